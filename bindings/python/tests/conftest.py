import os
import sqlite3
import subprocess
import sys

import pytest

import tocsin


def pytest_report_header(config):
    return "tocsin %s (core %s) on SQLite %s from %s" % (
        tocsin.__version__, tocsin.core_version(), tocsin.sqlite_version(),
        os.path.dirname(tocsin.__file__))


# pyenv's CPythons (and others built without --enable-loadable-sqlite-extensions) have
# no sqlite3.Connection.enable_load_extension: tocsin.load then registers the functions
# through tocsin's own module (ext.py), and the tests of tocsin.load run there too.
LOADS_EXTENSIONS = hasattr(sqlite3.Connection, "enable_load_extension")


def unprivileged_python_problem(uid=65534):
    """Why this interpreter cannot run as `uid` (None when it can): a pyenv interpreter
    under a home directory of mode 0700 has its libpython and standard library where
    that user cannot read them, and the dynamic loader then fails, or finds another
    build of the same libpython (Debian's) and runs a different Python."""
    try:
        p = subprocess.run(["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups",
                            sys.executable, "-c", "import sys; print(sys.version)"],
                           capture_output=True, text=True, timeout=60)
    except OSError as e:
        return "cannot start %s as uid %d: %s" % (sys.executable, uid, e)
    if p.returncode != 0:
        return "%s cannot run as uid %d (its files are not readable by that user?): %s" % (
            sys.executable, uid, (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1])
    if p.stdout.strip() != sys.version:
        return "%s runs another Python as uid %d (%s, not %s): its own libpython is not " \
               "readable by that user" % (sys.executable, uid, p.stdout.strip().split()[0],
                                           sys.version.split()[0])
    return None


T0 = 1_700_000_000_000  # a fixed instant (ms) for clock-driven tests


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "app.db")


@pytest.fixture
def db(path):
    d = tocsin.open(path)
    yield d
    d.close()


@pytest.fixture
def clocked(db):
    """A database whose clock is fixed at T0 (advance it with db.set_time)."""
    db.set_time(T0)
    return db


def count(db, table, where="1"):
    return db.execute("SELECT count(*) FROM %s WHERE %s" % (table, where))[0][0]


@pytest.fixture
def python():
    return sys.executable
