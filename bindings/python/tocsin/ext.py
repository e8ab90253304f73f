"""The loadable SQLite extension shipped in this package, for the host's own
connections (stdlib sqlite3, SQLAlchemy)."""
from __future__ import annotations

import json
import os
import secrets
import sqlite3
import sys
from typing import Any, Dict, Optional, Sequence

from . import _tocsin
from ._tocsin import Closed, Error, InvalidArgument
from ._util import as_bool, sqlite_copies

__all__ = ["loadable_path", "load", "enqueue", "call", "publish", "notify"]

ENTRY_POINT = "sqlite3_tocsin_init"


def loadable_path() -> str:
    """Path of the tocsin SQLite extension built with this package (its entry point is
    sqlite3_tocsin_init, which SQLite derives from the file name)."""
    name = "tocsin.dll" if sys.platform == "win32" else "tocsin.so"
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext", name)
    if not os.path.isfile(path):
        raise Error("the tocsin SQLite extension is missing from this installation: %s" % path)
    return path


def _dbapi_connection(conn: Any, what: str = "tocsin.load") -> Any:
    """The sqlite3.Connection behind a stdlib connection or an SQLAlchemy
    Connection / Session (duck-typed: SQLAlchemy is not imported). ``what`` names the
    call in the refusal."""
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
    kinds = "Connection, Session or Engine" if what == "tocsin.load" else "Connection or Session"
    raise TypeError("%s() needs a sqlite3.Connection or an SQLAlchemy %s, not %s"
                    % (what, kinds, type(conn).__name__))


def load(conn: Any) -> None:
    """Loads the tocsin SQL functions (docs/sql.md) into ``conn``: a stdlib
    sqlite3.Connection, an SQLAlchemy Connection or Session (the DBAPI connection
    under it), or an SQLAlchemy Engine (then every connection it opens gets them).

    The functions run on conn's own SQLite, whichever copy that is, so no second-copy
    check is made here: only tocsin.open() opens the file with tocsin's copy, and it
    checks. Where this interpreter's sqlite3 module cannot load extensions (pyenv's
    default build), tocsin's own module registers them on the connection instead, which
    needs that module to run on the same libsqlite3 (else tocsin.Error says so)."""
    if hasattr(conn, "dialect") and hasattr(conn, "pool"):  # an SQLAlchemy Engine
        from sqlalchemy import event  # only reached with SQLAlchemy installed
        event.listen(conn, "connect", lambda dbapi_conn, _record: load(dbapi_conn))
        return
    raw = _dbapi_connection(conn)
    enable = getattr(raw, "enable_load_extension", None)
    if enable is None:
        _register_without_loading(raw)
        return
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


def _register_without_loading(raw: Any) -> None:
    """An interpreter whose sqlite3 module was built without extension loading (pyenv's
    default build): tocsin's own module, which links the same system libsqlite3, registers
    the functions on the connection. That needs one SQLite in the process: a connection
    of another copy cannot be reached from here."""
    if not isinstance(raw, sqlite3.Connection):
        raise Error("this sqlite3 module cannot load SQLite extensions (no "
                    "enable_load_extension), and %s is no sqlite3.Connection that tocsin "
                    "could register its functions on" % type(raw).__name__)
    other = sqlite_copies()
    if other is not None:
        raise Error("this Python's sqlite3 module cannot load SQLite extensions (built "
                    "without --enable-loadable-sqlite-extensions), and tocsin cannot register "
                    "its functions on the connection directly: %s" % other)
    raw.total_changes  # the module's own checks: an open connection, of this thread
    probe = "tocsin_probe_" + secrets.token_hex(8)
    raw.create_function(probe, 0, lambda: 1)
    _tocsin.register_sql(raw, probe)  # (which removes the probe)


# ---- enqueueing through the application's own connection ----
#
# The trap: Python's sqlite3 opens a transaction before INSERT/UPDATE/DELETE, never before a
# SELECT -- and `SELECT tocsin_enqueue(...)` is a SELECT. Run first in a block, it commits
# at once, and a later rollback of the business writes leaves the job (a receipt sent for a
# rolled-back order). These helpers refuse to run outside an open transaction unless told.

def _in_transaction(conn: Any, raw: Any) -> bool:
    """True when the DBAPI connection is inside a transaction. An SQLAlchemy Connection or
    Session that is in one while its pysqlite connection has not begun yet (it begins
    lazily, at the first write) gets its BEGIN now, so the job joins what it commits. An
    SQLAlchemy 2.x Connection not in one yet ("commit as you go") begins it, as its next
    statement would: the job is then committed by conn.commit(), dropped by rollback."""
    if raw.in_transaction:
        return True
    sa_in = getattr(conn, "in_transaction", None)
    if not callable(sa_in) or conn is raw:
        return False
    if not sa_in():
        autobegins = callable(getattr(conn, "commit", None)) and callable(getattr(conn, "begin", None))
        if not autobegins or hasattr(conn, "get_bind"):  # (a Session begins in connection())
            return False
        # AUTOCOMMIT: every statement commits by itself, and nothing would commit a
        # transaction begun here (the connection's return to the pool rolls it back,
        # with the statements after the job)
        is_autocommit = getattr(conn, "_is_autocommit_isolation", None)
        if callable(is_autocommit) and is_autocommit():
            return False
        conn.begin()
        if raw.in_transaction:  # a "begin" listener emitted BEGIN (SQLAlchemy's pysqlite recipe)
            return True
    raw.execute("BEGIN")
    return True


def _refuse(conn: Any, autocommit: bool, what: str) -> Any:
    raw = _dbapi_connection(conn, what)
    try:
        open_tx = as_bool(autocommit, "autocommit") or _in_transaction(conn, raw)
    except sqlite3.Error as e:
        raise _driver_error(raw, e, what) from e
    if not open_tx:
        raise InvalidArgument(
            "%s: no transaction is open on this connection, so the job would commit on its "
            "own right now (a later rollback would not drop it). Write the business rows "
            "first or run conn.execute('BEGIN') (SQLAlchemy: inside session.begin() / "
            "engine.begin()), then enqueue, then commit; or pass autocommit=True if the job "
            "should commit by itself" % what)
    return raw


# The tocsin error class of each core result code (the classes carry their .code).
_CLASSES = {c.code: c for c in Error.__subclasses__() if isinstance(getattr(c, "code", None), int)}

# The primary SQLite code of a driver error where the sqlite3 module does not give one
# (Python < 3.11 has no sqlite_errorcode): read from the exception's class and SQLite's
# own message for the code (sqlite3_errstr), as those builds report them.
_SQLITE_TEXTS = (("database is locked", 5), ("database table is locked", 6),
                 ("readonly", 8), ("read-only", 8), ("interrupted", 9), ("disk i/o error", 10),
                 ("malformed", 11), ("database or disk is full", 13),
                 ("unable to open", 14), ("not a database", 26))


def _sqlite_code(e: "sqlite3.Error") -> int:
    code = getattr(e, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code
    if isinstance(e, sqlite3.DataError):
        return 18  # SQLITE_TOOBIG
    text = str(e).lower()
    for needle, c in _SQLITE_TEXTS:
        if needle in text:
            return c
    return 1  # SQLITE_ERROR


def _driver_error(raw: Any, e: "sqlite3.Error", what: str) -> Error:
    """The tocsin error of a failure of the SQL functions on the application's own
    connection: the class the same refusal has through tocsin.open()'s calls (the
    core's code of the SQLite code: PayloadTooLarge, ReadOnly, Busy, ...; SQLITE_ERROR,
    how the SQL functions refuse an argument, is InvalidArgument), a closed connection
    Closed. The driver's exception is the __cause__, its code .sqlite_code."""
    msg = str(e)
    if isinstance(e, sqlite3.ProgrammingError) and "closed" in msg.lower():
        err: Error = Closed("%s: the connection is closed (%s)" % (what, msg))
        err.sqlite_code = 0  # type: ignore[attr-defined]
        return err
    sqlite_code = _sqlite_code(e)
    code = _tocsin.code_of_sqlite(sqlite_code)
    if code == _tocsin.SQLiteError.code:  # SQLITE_ERROR: how the SQL functions refuse an argument
        code = InvalidArgument.code
    if "no such function: tocsin_" in msg:
        msg += " (load the tocsin functions into this connection first: tocsin.load(conn))"
    err = _CLASSES.get(code, InvalidArgument)(msg)
    err.sqlite_code = sqlite_code  # type: ignore[attr-defined]
    return err


def _select(raw: Any, what: str, sql: str, params: tuple) -> Any:
    try:
        return raw.execute(sql, params).fetchone()[0]
    except sqlite3.Error as e:
        raise _driver_error(raw, e, what) from e


def _text(value: Any, what: str) -> str:
    """A str the SQL functions can take (refused here as InvalidArgument, not as an
    sqlite3 error of whatever class the driver maps the function's error to)."""
    if not isinstance(value, str):
        raise InvalidArgument("%s must be a str, not %s" % (what, type(value).__name__))
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidArgument("%s is not valid UTF-8: %s" % (what, e)) from None
    if not value and what in ("queue", "task"):
        raise InvalidArgument("%s name must not be empty" % what)
    return value


def _options(priority: int, delay: Any, max_attempts: Any, unique_key: Any, meta: Any,
             result_ttl: Any = None, timeout: Any = None, run_at: Any = None,
             expires: Any = None) -> Optional[str]:
    """The options JSON of the SQL functions: the job options of Queue.enqueue, in its
    units (delay and expires seconds or a timedelta, run_at a datetime or epoch seconds)."""
    from ._util import as_int, duration_ms, dumps, instant_ms, meta_json
    priority = as_int(priority, "priority")
    if delay is not None and run_at is not None:
        raise InvalidArgument("give delay or run_at, not both")
    if max_attempts is not None:
        max_attempts = as_int(max_attempts, "max_attempts", 1, 1000000)
    opts: Dict[str, Any] = {}
    if priority:
        opts["priority"] = priority
    if delay is not None:
        opts["delay_ms"] = duration_ms(delay, "delay")
    if run_at is not None:
        opts["run_at_ms"] = instant_ms(run_at, "run_at")
    if max_attempts is not None:
        opts["max_attempts"] = max_attempts
    if expires is not None:
        opts["expires_ms"] = duration_ms(expires, "expires", allow_zero=False)
    if unique_key is not None:
        opts["unique_key"] = _text(unique_key, "unique_key")
    if meta is not None:
        opts["meta"] = json.loads(meta_json(meta))
    if result_ttl is not None:
        opts["result_ttl_ms"] = duration_ms(result_ttl, "result_ttl", allow_zero=False)
    if timeout is not None:
        opts["timeout_ms"] = duration_ms(timeout, "timeout", allow_zero=False)
    return _text(dumps(opts, "options"), "options") if opts else None


def enqueue(conn: Any, queue: str, payload: Any = None, *, priority: int = 0, delay: Any = None,
            run_at: Any = None, max_attempts: Optional[int] = None, expires: Any = None,
            unique_key: Optional[str] = None, meta: Optional[dict] = None,
            autocommit: bool = False) -> int:
    """Enqueues a job through the application's own connection (stdlib sqlite3, or an
    SQLAlchemy Connection/Session) with the tocsin extension loaded (tocsin.load), inside
    the transaction open on it -- refused when none is, unless ``autocommit=True``.
    The options are Queue.enqueue's. Returns the job's id. A refusal raises the
    tocsin.Error class the same call raises through tocsin.open()'s handle
    (InvalidArgument, PayloadTooLarge, ReadOnly, Busy, ...; a closed connection Closed),
    with the driver's exception as its __cause__."""
    from ._util import dumps
    _text(queue, "queue")
    text = _text(dumps(payload), "payload")
    opts = _options(priority, delay, max_attempts, unique_key, meta, run_at=run_at, expires=expires)
    raw = _refuse(conn, autocommit, "tocsin.enqueue")
    return _select(raw, "tocsin.enqueue", "SELECT tocsin_enqueue(?, ?, ?)", (queue, text, opts))


def call(conn: Any, queue: str, task: str, args: Sequence[Any] = (),
         kwargs: Optional[Dict[str, Any]] = None, *, autocommit: bool = False,
         **options: Any) -> int:
    """Enqueues a call of task ``task`` (registered by a worker of any runtime) through the
    application's own connection, inside its open transaction (see enqueue), with the
    SQL function tocsin_task_enqueue (the core's envelope, docs/sql.md). ``args``: a list
    or tuple; ``kwargs``: a dict; options: ``priority``, ``delay``, ``run_at``,
    ``max_attempts``, ``expires``, ``unique_key``, ``meta``, ``result_ttl``, ``timeout``
    (others raise InvalidArgument). Returns the job's id, whose result
    db.wait_result(id) (or any runtime) reads. Errors as enqueue's."""
    from ._util import dumps
    _text(queue, "queue")
    _text(task, "task")
    if not isinstance(args, (list, tuple)):  # not a str's characters
        raise InvalidArgument("args must be a list or tuple of the task's positional arguments, "
                              "not %s" % type(args).__name__)
    if kwargs is not None and not isinstance(kwargs, dict):
        raise InvalidArgument("kwargs must be a dict of the task's keyword arguments, not %s"
                              % type(kwargs).__name__)
    opts = _options(options.pop("priority", 0), options.pop("delay", None),
                    options.pop("max_attempts", None), options.pop("unique_key", None),
                    options.pop("meta", None), options.pop("result_ttl", None),
                    options.pop("timeout", None), options.pop("run_at", None),
                    options.pop("expires", None))
    if options:
        raise InvalidArgument("tocsin.call: unknown option(s) %s" % ", ".join(sorted(options)))
    args_text = _text(dumps(list(args), "args"), "args")
    kwargs_text = _text(dumps(dict(kwargs or {}), "kwargs"), "kwargs")
    raw = _refuse(conn, autocommit, "tocsin.call")
    return _select(raw, "tocsin.call", "SELECT tocsin_task_enqueue(?, ?, ?, ?, ?)",
                   (queue, task, args_text, kwargs_text, opts))


def publish(conn: Any, topic: str, payload: Any, *, key: Optional[str] = None,
            meta: Optional[dict] = None, autocommit: bool = False) -> int:
    """Publishes an event on ``topic`` through the application's own connection, inside
    its open transaction (see enqueue; refused outside one unless ``autocommit=True``),
    as Stream.publish does; returns its offset. Errors as enqueue's."""
    from ._util import dumps, meta_json
    _text(topic, "topic")
    text = _text(dumps(payload), "payload")
    if key is not None:
        _text(key, "key")
    m = meta_json(meta)
    raw = _refuse(conn, autocommit, "tocsin.publish")
    return _select(raw, "tocsin.publish", "SELECT tocsin_stream_publish(?, ?, ?, ?)", (topic, text, key, m))


def notify(conn: Any, channel: str, payload: Any = None, *, meta: Optional[dict] = None,
           autocommit: bool = False) -> int:
    """Records a notification on ``channel`` through the application's own connection,
    inside its open transaction (see enqueue): listeners of every process hear it when
    that transaction commits, never after a rollback. Returns its id. Errors as
    enqueue's."""
    from ._util import dumps, meta_json
    _text(channel, "channel")
    text = _text(dumps(payload), "payload")
    m = meta_json(meta)
    raw = _refuse(conn, autocommit, "tocsin.notify")
    return _select(raw, "tocsin.notify", "SELECT tocsin_notify(?, ?, ?)", (channel, text, m))
