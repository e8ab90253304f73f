import datetime as dt
import os
import sqlite3
import textwrap

import pytest

import tocsin
from conftest import count, unprivileged_python_problem


def test_versions():
    root = os.path.join(os.path.dirname(__file__), "..", "..", "..", "VERSION")
    assert tocsin.__version__ == tocsin.core_version()
    if os.path.exists(root):
        assert tocsin.__version__ == open(root).read().strip()
    # one SQLite in the process: the stdlib module and tocsin report the same library
    assert tocsin.sqlite_version() == sqlite3.sqlite_version


def test_error_hierarchy():
    for cls in (tocsin.InvalidArgument, tocsin.NotFound, tocsin.Busy, tocsin.LeaseLost,
                tocsin.Closed, tocsin.Corrupt, tocsin.PayloadTooLarge, tocsin.VersionMismatch,
                tocsin.Replaced, tocsin.Timeout, tocsin.ReadOnly, tocsin.SQLiteError):
        assert issubclass(cls, tocsin.Error)
        assert isinstance(cls.code, int)
    assert issubclass(tocsin.InvalidArgument, ValueError)
    assert issubclass(tocsin.Timeout, TimeoutError)
    assert len({c.code for c in (tocsin.InvalidArgument, tocsin.Busy, tocsin.Closed)}) == 3


def test_open_close_context(path):
    with tocsin.open(path) as db:
        assert not db.closed
        db.queue("q").enqueue(1)
    assert db.closed
    db.close()  # idempotent
    with pytest.raises(tocsin.Closed):
        db.queue("q").enqueue(2)
    with tocsin.open(path) as db2:
        assert db2.queue("q").stats()["pending"] == 1


def test_open_bad_arguments(tmp_path):
    with pytest.raises(tocsin.InvalidArgument):
        tocsin.open("")
    with pytest.raises(tocsin.InvalidArgument):
        tocsin.open(str(tmp_path / "a.db"), busy_timeout=-1)
    with pytest.raises(tocsin.InvalidArgument):
        tocsin.open(str(tmp_path / "a.db"), max_payload_bytes=0)
    with pytest.raises(TypeError):
        tocsin.open(str(tmp_path / "a.db"), no_such_option=1)
    with pytest.raises(tocsin.Error):
        tocsin.open(str(tmp_path / "missing-dir" / "a.db"))
    assert not os.path.exists(tmp_path / "a.db")


def test_not_a_database(tmp_path):
    p = tmp_path / "junk.db"
    p.write_bytes(b"this is not an sqlite file at all" * 100)
    with pytest.raises(tocsin.Corrupt):
        tocsin.open(str(p))


def test_read_only(path):
    tocsin.open(path).close()
    with tocsin.open(path, read_only=True) as ro:
        assert ro.queue("q").stats()["pending"] == 0
        with pytest.raises((tocsin.ReadOnly, tocsin.SQLiteError)) as ei:
            ro.queue("q").enqueue(1)
        assert "read" in str(ei.value).lower()


def test_payload_limit(path):
    with tocsin.open(path, max_payload_bytes=64) as db:
        q = db.queue("q")
        q.enqueue("x" * 10)
        with pytest.raises(tocsin.PayloadTooLarge):
            q.enqueue("x" * 100)
        db.set_max_payload(1000)
        q.enqueue("x" * 100)
        with pytest.raises(tocsin.InvalidArgument):
            db.set_max_payload(0)
        assert q.stats()["pending"] == 2


def test_execute_and_script(db):
    db.executescript("CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT, score REAL, pic BLOB)")
    db.execute("INSERT INTO users(name, score, pic) VALUES (?, ?, ?)", ["ada", 1.5, b"\x00\x01"])
    assert db.changes() == 1 and db.last_insert_rowid() == 1
    db.execute("INSERT INTO users(name) VALUES (:n)", {"n": "bob"})
    assert db.execute("SELECT name, score, pic FROM users ORDER BY id") == [
        ("ada", 1.5, b"\x00\x01"), ("bob", None, None)]
    with pytest.raises(tocsin.InvalidArgument):
        db.execute("SELECT 1; SELECT 2")
    with pytest.raises(ValueError):
        db.execute("SELECT ?", [])
    with pytest.raises(ValueError):
        db.execute("SELECT :x", {"y": 1})
    with pytest.raises(TypeError):
        db.execute("SELECT ?", [object()])
    with pytest.raises(tocsin.SQLiteError) as ei:
        db.execute("SELEC 1")
    assert "syntax" in str(ei.value)
    assert ei.value.sqlite_code == 1


def test_clock(db):
    db.set_time(1234)
    assert db.now() == 1234
    db.set_time(dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc))
    assert db.now() == 1704067200000
    db.set_time(None)
    assert db.now() > 1704067200000
    with pytest.raises(tocsin.InvalidArgument):
        db.set_time(-5)
    with pytest.raises(tocsin.InvalidArgument):
        db.set_time("now")


def test_schema_tables_exist(db):
    names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"_tocsin_meta", "_tocsin_jobs", "_tocsin_dead", "_tocsin_events",
            "_tocsin_notifications"} <= names
    assert count(db, "_tocsin_jobs") == 0


def _as_nobody(code, tmp_path):
    import shutil
    import subprocess
    import sys
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run as an unprivileged user")
    problem = unprivileged_python_problem()
    if problem:
        pytest.skip(problem)
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))


def test_read_only_in_a_directory_the_process_cannot_write(tmp_path):
    import pathlib
    import shutil
    import tempfile
    top = pathlib.Path(tempfile.mkdtemp())  # reachable by another user (pytest's is not)
    os.chmod(str(top), 0o755)
    d = top / "ro"
    d.mkdir()
    with tocsin.open(str(d / "a.db")) as db:  # a WAL database, closed cleanly (no -shm left)
        db.queue("q").enqueue(1)
    os.chmod(str(d), 0o555)
    try:
        p = _as_nobody(textwrap.dedent("""
            import tocsin
            with tocsin.open(%r, read_only=True) as db:
                print(db.queue("q").stats()["pending"])
            try:
                tocsin.open(%r)
            except tocsin.Error as e:
                print(e)
        """ % (str(d / "a.db"), str(d / "a.db"))), tmp_path)
    finally:
        os.chmod(str(d), 0o755)
        shutil.rmtree(str(top), ignore_errors=True)
    assert p.returncode == 0, p.stderr
    out = p.stdout.splitlines()
    assert out[0] == "1"  # read-only works: no pragma writes, no -shm to create
    assert "must be writable" in out[1] and str(d) in out[1]
