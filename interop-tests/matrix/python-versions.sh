#!/bin/sh
# The Python package built from its sdist, and its pytest suite, on each CPython
# 3.9-3.13 that pyenv has (`pyenv root`/versions/3.X.*): one venv per interpreter.
# Whether each interpreter's sqlite3 module can load extensions is reported (where it
# cannot, tocsin.load registers the SQL functions through tocsin's own module).
#   sh python-versions.sh DIST_PYTHON_DIR WORKDIR
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
dist=$(cd "${1:?usage: python-versions.sh DIST WORK}" && pwd)
work=${2:?usage: python-versions.sh DIST WORK}
mkdir -p "$work" && work=$(cd "$work" && pwd)
sdist=$(ls "$dist"/tocsin-*.tar.gz | head -n 1)
if ! command -v pyenv >/dev/null 2>&1 && [ ! -d "$HOME/.pyenv" ]; then
    echo "python-versions: no pyenv on this machine"; exit 1
fi
proot=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
ran=0 bad=0 summary=""
for minor in 9 10 11 12 13; do
    py=$(ls -d "$proot"/versions/3.$minor.* 2>/dev/null | sort -V | tail -n 1)
    if [ -z "$py" ] || [ ! -x "$py/bin/python3" ]; then
        echo "python-versions: 3.$minor not installed under $proot/versions"; summary="$summary 3.$minor:absent"; continue
    fi
    v=$("$py/bin/python3" -c 'import platform; print(platform.python_version())')
    ext=$("$py/bin/python3" -c 'import sqlite3; c = sqlite3.connect(":memory:"); print("yes" if hasattr(c, "enable_load_extension") else "no")')
    venv=$work/py$v
    echo "== CPython $v ($py), sqlite3 enable_load_extension: $ext"
    # --upgrade: the setuptools a 3.9 venv starts with is older than pyproject's >=61
    # (the suite builds the sdist with --no-isolation); .deps marks a complete install
    if [ ! -f "$venv/.deps" ]; then
        rm -rf "$venv"
        "$py/bin/python3" -m venv "$venv"
        "$venv/bin/pip" install -q --disable-pip-version-check --upgrade pytest sqlalchemy build setuptools wheel
        touch "$venv/.deps"
    fi
    # the wheel from the sdist with this interpreter (setuptools from its own build env)
    "$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps "$sdist"
    log=$work/pytest-$v.log
    ran=$((ran + 1))
    # from the repository root, so `import tocsin` is the installed package (as make test-python)
    if (cd "$root" && TOCSIN_TEST_VENV="$venv" "$venv/bin/pytest" -q -rs bindings/python/tests) > "$log" 2>&1; then
        res=$(tail -n 1 "$log"); echo "   $res"; summary="$summary $v:ok"
    else
        bad=$((bad + 1)); tail -n 30 "$log"; summary="$summary $v:FAILED"
    fi
    grep -i "SKIPPED" "$log" | sed 's/^/   /' | head -n 5 || true
done
echo "python-versions:$summary"
[ "$ran" -gt 0 ] && [ "$bad" -eq 0 ]
