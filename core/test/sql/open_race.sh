#!/bin/sh
# Racing first opens through the extension (issue 8): 16 sqlite3 shells load
# tocsin into a fresh file at the same instant and enqueue, 50 rounds; every
# one of them must succeed. Usage: open_race.sh path/to/tocsin.so [rounds]
set -u
EXT=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
ROUNDS=${2:-50}
PROCS=16
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
failed=0
round=0
while [ "$round" -lt "$ROUNDS" ]; do
    round=$((round + 1))
    db=$DIR/race$round.db
    i=0
    # started back to back: their opens, schema installs and first writes overlap
    while [ "$i" -lt "$PROCS" ]; do
        i=$((i + 1))
        printf '.load %s\nSELECT tocsin_enqueue(%s, %s);\n' "$EXT" "'q'" "'{}'" |
            sqlite3 -bail -batch "$db" >"$DIR/out$i" 2>&1 &
    done
    wait
    n=$(printf 'SELECT count(*) FROM _tocsin_jobs;\n' | sqlite3 -batch "$db")
    if [ "$n" != "$PROCS" ]; then
        failed=$((failed + 1))
        echo "round $round: $n of $PROCS enqueued"
        cat "$DIR"/out* | grep -iv '^[0-9]*$' | head -3
    fi
done
echo "open race: $((ROUNDS - failed)) passed, $failed failed ($ROUNDS rounds of $PROCS processes)"
[ "$failed" -eq 0 ]
