"""Database handles and transactions."""
from __future__ import annotations

import datetime as _dt
import asyncio
import contextvars
import logging
import os
import threading
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

from . import _tocsin
from ._tocsin import Closed, InvalidArgument
from ._util import (Duration, Instant, as_bool, as_int, check_one_sqlite, duration_ms, dumps, instant_ms, is_int_like,
                    meta_json)

__all__ = ["Database", "Transaction", "open"]

_NOCHANGE: Any = object()


_pool: Any = None


def _begin_pool() -> Any:
    """Threads in which async BEGINs wait for the write lock (never the loop's default
    executor: waiting BEGINs must not starve the work that would release the lock)."""
    global _pool
    if _pool is None:
        import concurrent.futures
        _pool = concurrent.futures.ThreadPoolExecutor(max_workers=64, thread_name_prefix="tocsin-begin")
    return _pool


_active: "contextvars.ContextVar[Tuple[Transaction, ...]]" = contextvars.ContextVar(
    "tocsin_transactions", default=())


def _owner() -> Any:
    """Who a transaction belongs to: the running asyncio task, else the thread. A task
    created inside a transaction (asyncio.create_task) and a thread given a copy of
    the context (asyncio.to_thread) inherit _active; they must not join it."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return threading.get_ident()
    return asyncio.current_task() or threading.get_ident()


# the type of the transaction at hand: `with job.transaction() as tx` is an AckTransaction
# (tx.result), not a plain Transaction
_TxT = TypeVar("_TxT", bound="Transaction")


class Transaction:
    """A write transaction on a Database (BEGIN IMMEDIATE ... COMMIT/ROLLBACK), on a
    core transaction handle of its own (a connection of its own).

    Used as a context manager it commits when the block succeeds and rolls back when
    it raises. The calls given ``tx=`` join it, and so do the calls on the same
    Database made in the same *context* (contextvars: the same thread, or the same
    asyncio task) before it ends. Other threads and other asyncio tasks never join it
    by accident: their calls run outside it (writers wait for the write lock).
    """

    __slots__ = ("_db", "_tx", "_token", "_base", "_owner")

    def __init__(self, db: "Database", base: Any = None) -> None:
        self._db = db
        self._tx: Any = None
        self._token: Any = None
        self._owner: Any = None
        self._base = base if base is not None else db._h  # the handle it begins on

    @property
    def database(self) -> "Database":
        return self._db

    @property
    def active(self) -> bool:
        """True between begin and commit/rollback."""
        return self._tx is not None and not self._tx.closed

    def begin(self: _TxT) -> _TxT:
        if self._tx is not None:
            raise InvalidArgument("this transaction is already open")
        if self._db._context_tx() is not None:
            raise InvalidArgument("a transaction of this database is already open in this "
                                  "context (transactions do not nest)")
        self._tx = self._base.begin_tx()
        self._owner = _owner()
        self._token = _active.set(_active.get() + (self,))
        return self

    def _pre_commit(self) -> None:
        """Runs inside the transaction just before COMMIT (a task's ack: JobContext)."""

    def commit(self) -> None:
        self._check_open()
        try:
            self._pre_commit()
        except BaseException:
            self._end(False)
            raise
        self._end(True)

    def rollback(self) -> None:
        self._check_open()
        self._end(False)

    def _detach(self) -> Any:
        tx, self._tx = self._tx, None
        stack = _active.get()
        if self in stack:
            try:
                _active.reset(self._token)
            except ValueError:  # ended in another context than it began in
                _active.set(tuple(t for t in stack if t is not self))
        return tx

    def _end(self, commit: bool) -> None:
        tx = self._detach()
        if commit:
            tx.commit()
        else:
            tx.rollback()

    def _check_open(self) -> None:
        if self._tx is None or self._tx.closed:
            raise InvalidArgument("this transaction is not open")

    def execute(self, sql: str, params: Union[Sequence[Any], Dict[str, Any], None] = None) -> List[tuple]:
        """Runs one statement of the application's inside this transaction."""
        self._check_open()
        return self._tx.execute(sql, params)

    def __enter__(self: _TxT) -> _TxT:
        return self.begin()

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self._tx is None:
            return False
        if exc_type is None:
            self.commit()
        else:
            self.rollback()
        return False

    async def __aenter__(self: _TxT) -> _TxT:
        """``async with db.transaction() as tx:`` -- BEGIN and COMMIT wait for the write
        lock off the event loop, so a transaction may span awaits while other tasks of
        the loop (and their transactions) go on."""
        if self._tx is not None:
            raise InvalidArgument("this transaction is already open")
        if self._db._context_tx() is not None:
            raise InvalidArgument("a transaction of this database is already open in this "
                                  "context (transactions do not nest)")
        loop = asyncio.get_running_loop()
        # a task cancelled while the BEGIN waits (asyncio.timeout, wait_for, a stop)
        # ends that wait too: the pool's thread is free again within a few ms (the
        # BEGIN fails with Interrupted, nothing begun), not at the busy timeout
        cancel = _tocsin.Cancel()
        try:
            self._tx = await loop.run_in_executor(_begin_pool(), self._base.begin_tx, cancel)
        except asyncio.CancelledError:
            cancel.fire()
            raise
        self._owner = _owner()
        self._token = _active.set(_active.get() + (self,))
        return self

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        if self._tx is None:
            return False
        # the write lock is held: COMMIT and ROLLBACK wait for nobody (GIL released)
        self.__exit__(exc_type, exc, tb)
        return False

    def __repr__(self) -> str:
        return "<tocsin.Transaction %s on %r>" % ("open" if self.active else "closed", self._db.path)


class Database:
    """A tocsin database: one SQLite file, opened on its own connection.

    Thread-safe: the core serialises the calls of several threads (the GIL is
    released while it works). Close it with close() or use it as a context manager.
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"], *, busy_timeout: Duration = 5.0,
                 max_payload_bytes: Optional[int] = None, read_only: bool = False,
                 allow_other_sqlite: bool = False) -> None:
        try:
            self.path = os.fspath(path)
        except TypeError:
            raise InvalidArgument("path must be a str or an os.PathLike, not %s"
                                  % type(path).__name__) from None
        # the core's busy timeout is an int of ms
        busy_ms = duration_ms(busy_timeout, "busy_timeout", allow_zero=False, max_ms=2 ** 31 - 1,
                              max_note="about 24 days")
        if max_payload_bytes is not None:
            max_payload_bytes = as_int(max_payload_bytes, "max_payload_bytes", 1)
        check_one_sqlite(allow_other_sqlite)
        # the core opens a WAL database in a directory it cannot write immutable
        # (read_only), and says when a read-write open needs a writable directory
        self._open_args = (self.path, busy_ms, max_payload_bytes or 0, as_bool(read_only, "read_only"))
        try:
            self._h = _tocsin.Handle(*self._open_args)
        except _tocsin.Error as e:
            raise e.with_traceback(None) from None
        self._queues: Dict[str, Any] = {}
        self._streams: Dict[str, Any] = {}
        self._workers: "weakref.WeakSet[Any]" = weakref.WeakSet()
        # listeners, subscriptions, job iterators and waits made on this database:
        # close() ends them, so that no thread waits on forever on a closed database
        self._waits: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._closing = False
        self.last_schedule_change: Optional[Dict[str, Any]] = None

    # ---- lifecycle ----
    def close(self) -> None:
        """Closes the connection, after closing the workers running on it and the
        listeners, subscriptions and job iterators made from it (their iterations end;
        a wait for a result or a lock in another thread raises Closed). Transactions
        still open stay usable until they end. Idempotent."""
        self._closing = True  # before the lists are taken: what enlists later ends itself
        for w in list(self._waits):
            try:
                w.close()
            except Exception:  # (a subscription's final offset save): the close goes on
                pass
        for w in list(self._workers):
            w.close()
        self._h.close()

    def _track(self, waiter: Any) -> Any:
        """Registers something with close() that close() ends."""
        return self._enlist(self._waits, waiter)

    def _enlist(self, group: Any, thing: Any) -> Any:
        """Adds a wait or worker to what close() ends; once close() has begun (in
        another thread, after this one opened it) it is closed here and Closed raised,
        so that it does not wait on a database that is gone."""
        group.add(thing)
        if self._closing:
            group.discard(thing)
            try:
                thing.close()
            except Exception:
                pass
            raise Closed("the database is closed")
        return thing

    @property
    def closed(self) -> bool:
        return self._h.closed

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<tocsin.Database %r%s>" % (self.path, " closed" if self.closed else "")

    # ---- transactions and the application's own SQL ----
    def transaction(self) -> Transaction:
        """A new Transaction; use it as ``with db.transaction() as tx:``."""
        return Transaction(self)

    @property
    def in_transaction(self) -> bool:
        """True while a transaction of this database is open in this context."""
        return self._context_tx() is not None

    def _context_tx(self) -> Optional[Transaction]:
        stack = _active.get()
        if not stack:
            return None
        me = _owner()
        for t in stack:
            if t._db is self and t._tx is not None and t._owner == me:
                return t
        return None

    def _hx(self, tx: Optional[Transaction] = None) -> Any:
        """The core handle a call runs on: ``tx``'s, else that of the transaction open
        in this context, else the database's own."""
        if tx is not None:
            if not isinstance(tx, Transaction):
                raise InvalidArgument("tx must be a tocsin.Transaction, not %s" % type(tx).__name__)
            if tx._db is not self:
                raise InvalidArgument("tx belongs to another database")
            if tx._tx is None or tx._tx.closed:
                raise InvalidArgument("tx is not open (already committed or rolled back)")
            return tx._tx
        if _active.get():
            t = self._context_tx()
            if t is not None:
                return t._tx
        return self._h

    def execute(self, sql: str, params: Union[Sequence[Any], Dict[str, Any], None] = None) -> List[tuple]:
        """Runs one statement of the application's on tocsin's connection (inside the
        open transaction, if any) and returns its rows as tuples. ``params`` binds
        ``?`` placeholders from a sequence or ``:name`` ones from a dict. SQL that
        begins or ends a transaction (BEGIN, COMMIT, ROLLBACK, END, a SAVEPOINT outside
        one) raises InvalidArgument and runs nothing: use ``db.transaction()``."""
        return self._hx().execute(sql, params)

    def executescript(self, sql: str) -> None:
        """Runs SQL text (several statements, no parameters, no rows), statement by
        statement up to the first failure; transaction control as in execute()."""
        self._hx().executescript(sql)

    def changes(self) -> int:
        """Rows changed by the last statement on this connection."""
        return self._hx().changes()

    def last_insert_rowid(self) -> int:
        return self._hx().last_insert_rowid()

    # ---- clock and limits ----
    def now(self) -> int:
        """The handle's clock: integer milliseconds since the Unix epoch."""
        return self._h.now()

    def set_time(self, when: Union[int, _dt.datetime, None]) -> None:
        """Fixes the handle's clock (for tests): a datetime, or integer milliseconds since
        the epoch; None restores the system clock."""
        if isinstance(when, _dt.datetime):
            when = instant_ms(when, "when")
        elif when is not None:
            if not is_int_like(when):
                raise InvalidArgument("when must be a datetime, integer milliseconds or None, not %s"
                                      % type(when).__name__)
            when = as_int(when, "when")
        self._h.set_time(when)

    def set_max_payload(self, max_bytes: int) -> None:
        max_bytes = as_int(max_bytes, "max_bytes", 1)
        self._h.set_max_payload(max_bytes)

    # ---- queues and streams ----
    def queue(self, name: str) -> "Queue":
        if not isinstance(name, str):
            raise InvalidArgument("queue name must be a str, not %s" % type(name).__name__)
        q = self._queues.get(name)
        if q is None:
            from .queue import Queue
            self._h.check_name("queue name", name)
            q = self._queues[name] = Queue(self, name)
        return q

    def stream(self, topic: str) -> "Stream":
        if not isinstance(topic, str):
            raise InvalidArgument("topic must be a str, not %s" % type(topic).__name__)
        s = self._streams.get(topic)
        if s is None:
            from .stream import Stream
            self._h.check_name("topic", topic)
            s = self._streams[topic] = Stream(self, topic)
        return s

    def stats(self) -> List[Dict[str, Any]]:
        """Statistics of every queue (see Queue.stats)."""
        import json
        return json.loads(self._hx().stats(None))["queues"]

    # ---- notifications ----
    def notify(self, channel: str, payload: Any = None, *, meta: Optional[dict] = None,
               tx: Optional[Transaction] = None) -> int:
        """Records a notification on ``channel`` (inside ``tx`` or the open transaction:
        rolled back with it) and returns its id."""
        return self._hx(tx).notify(channel, dumps(payload), meta_json(meta))

    def notifications(self, channel: str, after_id: int = 0, limit: int = 100) -> List["Notification"]:
        """Stored notifications of ``channel`` with id > after_id, oldest first."""
        from .stream import Notification
        return [Notification._from_row(r) for r in self._hx().notify_read(channel, after_id, limit)]

    def notify_max_id(self) -> int:
        """The highest notification id so far (where a listener starts), 0 if none."""
        return self._hx().notify_max_id()

    def prune_notifications(self, *, max_age: Optional[Duration] = None,
                            max_keep: Optional[int] = None) -> int:
        """Deletes notifications older than ``max_age`` and, per channel, all but the
        newest ``max_keep``. Returns how many were deleted. A criterion left out (None)
        is no bound; an explicit 0 ("keep none", "older than now") is refused."""
        age, keep = _criteria(max_age, max_keep, "max_age", "max_keep")
        return self._h.notify_prune(age, keep)

    def set_notify_autotrim(self, *, max_age: Optional[Duration] = None,
                            max_keep: Optional[int] = None, one_in: int = 100) -> None:
        """Opt-in automatic trim stored in the database: about one notify in ``one_in``
        prunes (max_age, max_keep). one_in=0 turns it off."""
        age, keep = _criteria(max_age, max_keep, "max_age", "max_keep")
        one_in = as_int(one_in, "one_in")
        if one_in and not age and not keep:  # the core's message names max_age_ms
            raise InvalidArgument("set_notify_autotrim needs max_age or max_keep (one_in=0 turns it off)")
        self._h.notify_set_autotrim(age, keep, one_in)


    # ---- waiting: the wake engine ----
    def subscribe(self) -> "Wake":
        """A raw subscription to commits on this file (any process)."""
        from .wake import Wake
        return Wake(self)

    def listen(self, channel: str, *, buffer_size: int = 1000) -> "Listener":
        """LISTEN: ``for n in db.listen(ch)`` or ``async for n in db.listen(ch)`` yields
        the notifications committed on ``channel`` after this call (no history)."""
        from .wake import Listener
        return Listener(self, channel, buffer_size)

    # ---- results ----
    def save_result(self, job_id: int, value: Any, *, ttl: Optional[Duration] = None,
                    tx: Optional[Transaction] = None) -> None:
        """Stores ``value`` (JSON-serialisable) as the result of job ``job_id``, replacing
        any earlier one; it expires ``ttl`` after saving (None: never)."""
        self._hx(tx).result_save(job_id, dumps(value, "value"), _ttl(ttl))

    def save_error(self, job_id: int, type: str, message: str = "", *,
                   ttl: Optional[Duration] = None, tx: Optional[Transaction] = None) -> None:
        """Stores a task error as data (type, message) as the result of ``job_id``."""
        self._hx(tx).result_save_error(job_id, type, message, _ttl(ttl))

    def result(self, job_id: int) -> Optional["Result"]:
        """The stored result of ``job_id``, None when absent or expired (a stored JSON
        null is a Result whose value is None)."""
        from .coord import Result
        row = self._hx().result_get(job_id)
        return None if row is None else Result._from_row(row)

    def wait_result(self, job_id: int, timeout: Optional[Duration] = None) -> "Result":
        """Waits (GIL released, woken by commits) for the result of ``job_id``."""
        from .coord import wait_result
        return wait_result(self, job_id, timeout)

    async def wait_result_async(self, job_id: int, timeout: Optional[Duration] = None) -> "Result":
        from .coord import wait_result_async
        return await wait_result_async(self, job_id, timeout)

    def delete_result(self, job_id: int) -> bool:
        return self._hx().result_delete(job_id)

    # ---- locks, rate limits ----
    def lock(self, name: str, *, ttl: Duration = 30.0, owner: Optional[str] = None) -> "Lock":
        """A named lease: ``with db.lock("nightly", ttl=60) as lock: ...``."""
        from .coord import Lock
        return Lock(self, name, ttl, owner)

    def lock_holder(self, name: str) -> Tuple[Optional[str], int, int]:
        """(owner or None when free, current token, lease end in ms)."""
        return self._hx().lock_holder(name)

    def rate_limit(self, name: str, limit: int, per: Duration) -> "RateLimit":
        from .coord import RateLimit
        return RateLimit(self, name, limit, per)

    # ---- schedules ----
    def schedule(self, name: str, cron: str, queue: Optional[str] = None, payload: Any = None, *,
                 task: Any = None, args: Sequence[Any] = (), kwargs: Optional[Dict[str, Any]] = None,
                 **options: Any) -> int:
        """Registers (upserts) schedule ``name``: every boundary of ``cron`` enqueues
        ``payload`` on ``queue`` -- or, with ``task=`` (a Task, or a task's name with
        ``queue``), a call of that task with ``args``/``kwargs``. Options: priority,
        max_attempts, job_expires, catch_up ("once" | "all"), max_catch_up, local_time,
        meta. Re-registering the same definition keeps its next boundary. A schedule
        that already exists with another definition is replaced and the change is
        reported (a warning on the "tocsin" logger, and ``self.last_schedule_change``),
        so that racing definitions do not win silently. Returns the next fire time (ms)."""
        from .coord import schedule_opts
        from .tasks import Task
        if not isinstance(args, (list, tuple)):  # not a str's characters
            raise InvalidArgument("args must be a list or tuple of the task's positional arguments, "
                                  "not %s" % type(args).__name__)
        if task is not None:
            if payload is not None:
                raise InvalidArgument("give payload or task=, not both")
            if isinstance(task, Task):
                queue = queue or task.queue.name
                text = task._envelope(args, kwargs)
            elif isinstance(task, str):
                if queue is None:
                    raise InvalidArgument("a task given by name needs queue=")
                text = self._h.task_envelope(task, dumps(list(args), "args"),
                                             dumps(dict(kwargs or {}), "kwargs"), 0, 0)
            else:
                raise InvalidArgument("task must be a Task or a task name")
        else:
            if args or kwargs:
                raise InvalidArgument("args/kwargs go with task=")
            text = dumps(payload)
        if not isinstance(queue, str):
            raise InvalidArgument("queue must be a str")
        opts = schedule_opts(**options)
        own = self._context_tx() is None
        tx = self.transaction().begin() if own else self._context_tx()
        try:
            h = tx._tx  # read and write in one transaction: a racing definition is seen
            old = h.schedule_get(name)
            nxt = h.schedule_set(name, cron, queue, text, opts)
            new = h.schedule_get(name)
            if own:
                tx.commit()
        except BaseException:
            if own and tx.active:
                tx.rollback()
            raise
        if old is not None and _definition(old) != _definition(new):
            change = {"name": name, "before": _definition(old), "after": _definition(new)}
            self.last_schedule_change = change
            logging.getLogger("tocsin").warning(
                "schedule %r was redefined (another definition was stored): %r -> %r",
                name, change["before"], change["after"], extra={"tocsin": change})
        return nxt

    def update_schedule(self, name: str, *, cron: Optional[str] = None, queue: Optional[str] = None,
                        payload: Any = _NOCHANGE, **options: Any) -> int:
        """Changes schedule ``name``: only what is given changes (cron, queue, payload and
        any of the options of :meth:`schedule`); everything else keeps its stored value.
        ``meta=None`` removes the meta. Returns the next fire time (ms)."""
        from .coord import schedule_changes
        opts, fields = schedule_changes(**options)
        return self._hx().schedule_update(name, cron, queue,
                                       None if payload is _NOCHANGE else dumps(payload),
                                       opts, fields)

    def schedules(self) -> List["Schedule"]:
        from .coord import Schedule
        return [Schedule._from_row(r) for r in self._hx().schedule_list()]

    def get_schedule(self, name: str) -> Optional["Schedule"]:
        from .coord import Schedule
        r = self._hx().schedule_get(name)
        return None if r is None else Schedule._from_row(r)

    def pause_schedule(self, name: str) -> None:
        self._hx().schedule_pause(name)

    def resume_schedule(self, name: str) -> None:
        self._hx().schedule_resume(name)

    def unschedule(self, name: str) -> bool:
        return self._hx().schedule_remove(name)

    def scheduler_tick(self) -> int:
        """Fires every due boundary exactly once (safe with racing tickers)."""
        return self._hx().scheduler_tick()

    def scheduler_next_fire(self) -> Optional[int]:
        return self._hx().scheduler_next_fire()

    # ---- housekeeping ----
    def prune(self, *, notifications_max_age: Optional[Duration] = None,
              notifications_max_keep: Optional[int] = None) -> Dict[str, int]:
        """Deletes expired results and stale rate-limit state, and prunes notifications
        when a criterion is given. Returns counts per kind."""
        # checked before anything is deleted
        age, keep = _criteria(notifications_max_age, notifications_max_keep,
                              "notifications_max_age", "notifications_max_keep")
        out = {"results": self._h.result_sweep(), "rate_limits": self._h.ratelimit_sweep(),
               "notifications": 0}
        if age or keep:
            out["notifications"] = self._h.notify_prune(age, keep)
        return out



def _definition(row: tuple) -> tuple:
    """What a schedule does (cron, queue, payload, options), not its firing state."""
    return tuple(row[1:11])


def _ttl(ttl: Optional[Duration]) -> int:
    return 0 if ttl is None else duration_ms(ttl, "ttl", allow_zero=False)


def _criteria(max_age: Optional[Duration], max_keep: Optional[int], age_what: str,
              keep_what: str) -> Tuple[int, int]:
    """A prune's age and count criteria for the core, which reads 0 as "no such
    criterion": None is that; an explicit 0 would silently prune nothing by it, so it is
    refused (leave it out for no limit)."""
    age = 0 if max_age is None else duration_ms(max_age, age_what, allow_zero=False)
    keep = 0 if max_keep is None else as_int(max_keep, keep_what, 1)
    return age, keep


def open(path: Union[str, "os.PathLike[str]"], **options: Any) -> Database:  # noqa: A001
    """Opens (creating if needed) the tocsin database at ``path``.

    Options: ``busy_timeout`` (seconds or timedelta the writer waits for the lock,
    default 5), ``max_payload_bytes`` (default 1 MiB), ``read_only`` (default False),
    ``allow_other_sqlite`` (default False: a second copy of SQLite loaded in the process,
    such as a sqlite3 module that bundles its own, is refused with tocsin.Error, since two
    copies opening one file can corrupt it; True when that copy never opens this file).
    """
    return Database(path, **options)


from .coord import Lock, RateLimit, Result, Schedule  # noqa: E402  (annotations)
from .queue import Queue  # noqa: E402
from .stream import Notification, Stream  # noqa: E402
from .wake import Listener, Wake  # noqa: E402
