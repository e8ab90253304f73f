#!/bin/sh
# Golden test of the SQL surface: runs golden.sql through the stock sqlite3
# shell with the extension loaded, on a fresh database, and compares the
# output with golden.expected. Usage: golden.sh BUILD_DIR/tocsin.so [--update]
set -eu
ext=${1:?usage: golden.sh path/to/tocsin.so [--update]}
here=$(cd "$(dirname "$0")" && pwd)
case $ext in /*) ;; *) ext=$(pwd)/$ext ;; esac
ext=${ext%.so} # the shell's .load adds the platform suffix itself
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tocsin-golden-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
{
    printf '.load %s\n' "$ext"
    cat "$here/golden.sql"
} >"$tmp/in.sql"
# Error lines name a line number of the input and their wording differs
# between shell versions ("Runtime error near line N:", "Error: near line N:",
# "Parse error near line N:"): keep only the message.
sqlite3 "$tmp/golden.db" <"$tmp/in.sql" >"$tmp/raw.txt" 2>&1 || true
sed -E 's/^(Runtime error|Parse error|Error:)( near line [0-9]+)?: */error: /' "$tmp/raw.txt" >"$tmp/out.txt"
if [ "${2:-}" = "--update" ]; then
    cp "$tmp/out.txt" "$here/golden.expected"
    echo "golden: golden.expected updated"
    exit 0
fi
if diff -u "$here/golden.expected" "$tmp/out.txt"; then
    echo "golden: SQL surface output matches ($(wc -l <"$here/golden.expected") lines)"
else
    echo "golden: output differs from golden.expected (see diff above)" >&2
    exit 1
fi
