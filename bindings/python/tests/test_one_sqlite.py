"""One SQLite per process (docs/architecture.md, "Python: one SQLite per process"):
a second copy of SQLite loaded beside the system library tocsin links is refused at
tocsin.open(), naming both, unless allow_other_sqlite=True; tocsin.load() runs on the
connection's own SQLite and is not refused."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import tocsin

from conftest import LOADS_EXTENSIONS

# The child loads a renamed copy of the system libsqlite3 (as a sqlite3 module that
# bundles its own SQLite would bring one) and reports what tocsin says.
CHILD = textwrap.dedent("""
    import ctypes, _ctypes, sqlite3, sys
    import tocsin
    db_path, copy = sys.argv[1], sys.argv[2]
    tocsin.open(db_path).close()  # one copy: fine
    lib = ctypes.CDLL(copy, mode=ctypes.RTLD_LOCAL)
    try:
        tocsin.open(db_path)
        print("OPENED")
    except tocsin.Error as e:
        print("REFUSED", type(e).__name__, e)
    conn = sqlite3.connect(db_path)
    try:
        tocsin.load(conn)
        print("LOADED")
    except tocsin.Error as e:
        print("LOAD-REFUSED", e)
    # without extension loading, tocsin's module would reach conn's SQLite directly,
    # which it cannot tell is its own with a second copy loaded
    try:
        tocsin.ext._register_without_loading(sqlite3.connect(db_path))
        print("REGISTERED")
    except tocsin.Error as e:
        print("REGISTER-REFUSED", e)
    tocsin.open(db_path, allow_other_sqlite=True).close()
    print("ALLOWED")
    _ctypes.dlclose(lib._handle)
    tocsin.open(db_path).close()
    print("UNLOADED-OK")
""")


def _system_libsqlite3():
    out = subprocess.run(["ldd", tocsin._tocsin.__file__], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "libsqlite3" in line and "=>" in line:
            return line.split("=>")[1].split("(")[0].strip()
    pytest.fail("tocsin's module does not link a shared libsqlite3:\n" + out)


def test_second_copy_refused_and_named(tmp_path):
    copy = str(tmp_path / "libbundled-sqlite.so")
    shutil.copyfile(_system_libsqlite3(), copy)
    db_path = str(tmp_path / "one.db")
    r = subprocess.run([sys.executable, "-c", CHILD, db_path, copy], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    refused = [ln for ln in lines if ln.startswith("REFUSED")]
    assert refused and refused[0].startswith("REFUSED Error a second copy of SQLite is loaded"), r.stdout
    assert copy in refused[0] and "libsqlite3" in refused[0] and "allow_other_sqlite=True" in refused[0]
    assert "OPENED" not in lines
    if LOADS_EXTENSIONS:
        assert "LOADED" in lines, r.stdout  # the extension runs on conn's SQLite: no refusal
    else:  # tocsin.load takes the path below
        assert any(ln.startswith("LOAD-REFUSED") and copy in ln for ln in lines), r.stdout
    assert any(ln.startswith("REGISTER-REFUSED this Python's sqlite3 module cannot load SQLite extensions")
               and copy in ln for ln in lines), r.stdout
    assert lines[-2:] == ["ALLOWED", "UNLOADED-OK"]


def test_one_copy_is_fine(tmp_path):
    assert tocsin._tocsin.sqlite_copies() is None
    with tocsin.open(str(tmp_path / "x.db"), allow_other_sqlite=False):
        pass


def test_allow_other_sqlite_must_be_a_bool(tmp_path):
    with pytest.raises(tocsin.InvalidArgument, match="allow_other_sqlite must be True or False"):
        tocsin.open(str(tmp_path / "x.db"), allow_other_sqlite="yes")
    assert not os.path.exists(str(tmp_path / "x.db"))
