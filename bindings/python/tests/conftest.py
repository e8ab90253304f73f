import os
import sys

import pytest

import tocsin


def pytest_report_header(config):
    return "tocsin %s (core %s) on SQLite %s from %s" % (
        tocsin.__version__, tocsin.core_version(), tocsin.sqlite_version(),
        os.path.dirname(tocsin.__file__))


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
