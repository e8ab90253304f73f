"""tocsin: NOTIFY/LISTEN, durable job queues and durable streams for SQLite.

    import tocsin
    with tocsin.open("app.db") as db:
        q = db.queue("emails")
        with db.transaction() as tx:
            db.execute("INSERT INTO users(name) VALUES (?)", ["ada"])
            q.enqueue({"to": "ada@example.org"}, tx=tx)

Units: durations are seconds (int/float) or datetime.timedelta; instants are datetime
or seconds since the epoch; times read back from rows are integer milliseconds since the
Unix epoch, as stored.
"""
from . import _tocsin
from ._tocsin import (
    Busy,
    CallbackError,
    CantOpen,
    Full,
    Interrupted,
    IOError,
    PermissionDenied,
    Closed,
    Corrupt,
    Error,
    InvalidArgument,
    LeaseLost,
    NoMemory,
    NotFound,
    PayloadTooLarge,
    ReadOnly,
    Replaced,
    SQLiteError,
    Timeout,
    VersionMismatch,
)
from ._version import __version__
from .db import Database, Transaction, open
from .ext import call, enqueue, load, loadable_path, notify, publish
from .queue import Job, Queue
from .stream import Event, Notification, Stream
from .coord import Lock, RateDecision, RateLimit, Result, Schedule, cron_next
from .queue import JobIterator
from .tasks import JobContext, Task, TaskError, TaskHandle, current_job
from .wake import Listener, Subscription, Wake
from .worker import Worker


def core_version() -> str:
    """The version of the C core compiled into this package."""
    return _tocsin.version()


def sqlite_version() -> str:
    """The SQLite version this process runs on (the system's shared libsqlite3)."""
    return _tocsin.sqlite_version()


__all__ = [
    "__version__", "core_version", "sqlite_version", "open", "Database", "Transaction",
    "Queue", "Job", "JobIterator", "Stream", "Event", "Notification", "load", "loadable_path",
    "enqueue", "call", "publish", "notify",
    "Listener", "Subscription", "Wake", "Result", "Lock", "RateLimit", "RateDecision",
    "Schedule", "cron_next", "Task", "TaskHandle", "TaskError", "Worker", "JobContext",
    "current_job",
    "Error", "SQLiteError", "InvalidArgument", "NotFound", "Busy", "LeaseLost", "Closed",
    "Corrupt", "PayloadTooLarge", "VersionMismatch", "CallbackError", "NoMemory", "Replaced",
    "Timeout", "ReadOnly", "Interrupted", "IOError", "Full", "CantOpen", "PermissionDenied",
]
