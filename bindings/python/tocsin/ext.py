"""The loadable SQLite extension shipped in this package, for the host's own
connections (stdlib sqlite3, SQLAlchemy)."""
from __future__ import annotations

import os
import sqlite3
import sys
from typing import Any

from ._tocsin import Error

__all__ = ["loadable_path", "load"]

ENTRY_POINT = "sqlite3_tocsin_init"


def loadable_path() -> str:
    """Path of the tocsin SQLite extension built with this package (its entry point is
    sqlite3_tocsin_init, which SQLite derives from the file name)."""
    name = "tocsin.dll" if sys.platform == "win32" else "tocsin.so"
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext", name)
    if not os.path.isfile(path):
        raise Error("the tocsin SQLite extension is missing from this installation: %s" % path)
    return path


def _dbapi_connection(conn: Any) -> Any:
    """The sqlite3.Connection behind a stdlib connection or an SQLAlchemy
    Connection / Session (duck-typed: SQLAlchemy is not imported)."""
    if isinstance(conn, sqlite3.Connection):
        return conn
    # SQLAlchemy Session: its current Connection
    if hasattr(conn, "get_bind") and callable(getattr(conn, "connection", None)):
        conn = conn.connection()
    # SQLAlchemy Connection -> pooled proxy -> DBAPI connection
    proxy = getattr(conn, "connection", None)
    for attr in ("dbapi_connection", "driver_connection", "connection"):
        raw = getattr(proxy, attr, None)
        if raw is not None and hasattr(raw, "execute") and hasattr(raw, "cursor"):
            return raw
    if hasattr(conn, "load_extension") or hasattr(conn, "execute"):
        return conn
    raise TypeError("tocsin.load() needs a sqlite3.Connection or an SQLAlchemy Connection, "
                    "Session or Engine, not %s" % type(conn).__name__)


def load(conn: Any) -> None:
    """Loads the tocsin SQL functions (docs/sql.md) into ``conn``: a stdlib
    sqlite3.Connection, an SQLAlchemy Connection or Session (the DBAPI connection
    under it), or an SQLAlchemy Engine (then every connection it opens gets them).

    Raises tocsin.Error when this interpreter's sqlite3 module cannot load extensions
    (some builds omit it; Debian's python3 allows it)."""
    if hasattr(conn, "dialect") and hasattr(conn, "pool"):  # an SQLAlchemy Engine
        from sqlalchemy import event  # only reached with SQLAlchemy installed
        event.listen(conn, "connect", lambda dbapi_conn, _record: load(dbapi_conn))
        return
    raw = _dbapi_connection(conn)
    enable = getattr(raw, "enable_load_extension", None)
    if enable is None:
        raise Error("this Python's sqlite3 module was built without SQLite extension loading "
                    "(no Connection.enable_load_extension); use a Python built with "
                    "--enable-loadable-sqlite-extensions, such as Debian's python3, or use "
                    "tocsin.open() instead")
    path = loadable_path()
    enable(True)
    try:
        if sys.version_info >= (3, 12):
            raw.load_extension(path, entrypoint=ENTRY_POINT)
        else:
            raw.load_extension(path)
    except sqlite3.OperationalError as e:
        raise Error("cannot load the tocsin extension from %s: %s" % (path, e)) from e
    finally:
        enable(False)
