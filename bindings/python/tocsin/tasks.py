"""Tasks: functions turned into enqueues, with results any runtime can read.

The core builds and checks the envelope (docs/sql.md, "Task envelope"):
    {"task": "send_email", "args": [...], "kwargs": {...}, "result_ttl_ms": 86400000}
A worker of any runtime that registered ``send_email`` runs it and the core stores
the outcome: the return value as JSON, or an error recorded as data (type, message,
traceback).
"""
from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Sequence

from . import _tocsin
from ._tocsin import Error, InvalidArgument
from ._util import Duration, Instant, as_bool, as_int, duration_ms, dumps, instant_ms, loads, meta_json
from .db import Transaction

if TYPE_CHECKING:
    from .coord import Result
    from .queue import Job, Queue

__all__ = ["Task", "TaskHandle", "TaskError", "JobContext", "current_job"]


class TaskError(Error):
    """The task raised (or its job died): ``type``, ``message`` and ``trace`` (the
    runtime's traceback, when one was recorded) as stored."""

    def __init__(self, type: str, message: str, job_id: int, trace: Optional[str] = None) -> None:
        super().__init__("%s: %s" % (type, message) if message else type)
        self.type = type
        self.message = message
        self.job_id = job_id
        self.trace = trace


class TaskHandle:
    """What enqueueing a task returns: ``get(timeout)`` / ``await result(timeout)``."""

    def __init__(self, queue: "Queue", job_id: int) -> None:
        self.queue = queue
        self.job_id = job_id

    def __repr__(self) -> str:
        return "<tocsin.TaskHandle job %d on %r>" % (self.job_id, self.queue.name)

    @property
    def job(self) -> Optional["Job"]:
        """The job row while it lives (None once acked)."""
        return self.queue.get(self.job_id)

    def _unwrap(self, r: "Result") -> Any:
        if r.is_error:
            raise TaskError(r.error_type or "Error", r.error_message or "", self.job_id, r.error_trace)
        return r.value

    def get(self, timeout: Optional[Duration] = None) -> Any:
        """Waits (GIL released) for the task's return value; raises TaskError if it
        failed, tocsin.Timeout at the timeout (saying whether the job was never claimed,
        is running or is retrying)."""
        return self._unwrap(self.queue.db.wait_result(self.job_id, timeout))

    async def result(self, timeout: Optional[Duration] = None) -> Any:
        """get() for asyncio (the event loop is never blocked)."""
        return self._unwrap(await self.queue.db.wait_result_async(self.job_id, timeout))

    def done(self) -> bool:
        """True once the task has an outcome: its return value, its error, or a job that
        died without either (get() then raises TaskError JobDead at once)."""
        from .coord import _check_result
        return _check_result(self.queue.db, self.job_id) is not None


def _is_tx(v: Any) -> bool:
    return isinstance(v, Transaction)


class Task:
    """A registered task (``@queue.task(...)``). Calling it enqueues a call and returns
    a TaskHandle; ``task.run(...)`` calls the function here and now."""

    def __init__(self, queue: "Queue", fn: Callable[..., Any], name: str, retries: int,
                 backoff: Optional[Duration], timeout: Optional[Duration],
                 result_ttl: Optional[Duration], process: bool = False) -> None:
        retries = as_int(retries, "retries", 0, 999999)
        queue.db._h.check_name("task name", name)
        self.queue = queue
        self.fn = fn
        self.name = name
        self.retries = retries
        self.backoff_ms = 0 if backoff is None else duration_ms(backoff, "backoff", allow_zero=False)
        self.timeout_ms = 0 if timeout is None else duration_ms(timeout, "timeout", allow_zero=False)
        # the call's result_ttl_ms (0: the task's default at the worker, i.e. forever
        # when result_ttl is None: -1 is registered with the worker)
        self.result_ttl_ms = 0 if result_ttl is None else duration_ms(result_ttl, "result_ttl", allow_zero=False)
        self.keep_forever = result_ttl is None
        self.is_async = inspect.iscoroutinefunction(fn)
        self.process = as_bool(process, "process")
        if self.process and self.is_async:
            raise InvalidArgument("process=True is for sync functions (async ones are cancelled on timeout)")
        try:
            self.signature: Optional[inspect.Signature] = inspect.signature(fn)
        except (TypeError, ValueError):
            self.signature = None
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return "<tocsin.Task %r on %r>" % (self.name, self.queue.name)

    def __call__(self, *args: Any, **kwargs: Any) -> TaskHandle:
        if "tx" in kwargs and _is_tx(kwargs["tx"]) and not self._takes("tx"):
            raise InvalidArgument(
                "%s(..., tx=tx) would pass the transaction to the task as an argument; to "
                "enqueue inside a transaction write %s.enqueue(args, kwargs, tx=tx)"
                % (self.name, getattr(self.fn, "__name__", "task")))
        return self.enqueue(args, kwargs)

    def _takes(self, param: str) -> bool:
        if self.signature is None:
            return True
        ps = self.signature.parameters
        return param in ps or any(p.kind is p.VAR_KEYWORD for p in ps.values())

    def _check_args(self, args: Sequence[Any], kwargs: Optional[Dict[str, Any]]) -> None:
        """Arguments that do not fit the signature would fail every attempt: refused now."""
        if self.signature is None:
            return
        try:
            self.signature.bind(*args, **(kwargs or {}))
        except TypeError as e:
            raise InvalidArgument("%s: %s" % (self.name, e)) from None

    def _envelope(self, args: Sequence[Any] = (), kwargs: Optional[Dict[str, Any]] = None) -> str:
        self._check_args(args, kwargs)
        return self.queue.db._h.task_envelope(self.name, dumps(list(args), "args"),
                                              dumps(dict(kwargs or {}), "kwargs"),
                                              self.result_ttl_ms, self.timeout_ms)

    def enqueue(self, args: Sequence[Any] = (), kwargs: Optional[Dict[str, Any]] = None, *,
                tx: Optional["Transaction"] = None, delay: Optional[Duration] = None,
                run_at: Optional[Instant] = None, priority: int = 0,
                max_attempts: Optional[int] = None, expires: Optional[Duration] = None,
                unique_key: Optional[str] = None, meta: Optional[dict] = None) -> TaskHandle:
        """Enqueues a call with job options (``tx=`` joins a transaction): ``priority``,
        ``delay`` or ``run_at``, ``max_attempts`` (default: the task's retries + 1; a
        worker runs a job of the task at most retries + 1 times whatever it says),
        ``expires`` (dead if not claimed within it), ``unique_key``, ``meta``."""
        if isinstance(args, (str, bytes)) or not isinstance(args, (list, tuple)):
            raise InvalidArgument("args must be a list or tuple of positional arguments")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise InvalidArgument("kwargs must be a dict")
        self._check_args(args, kwargs)
        spec = self.queue._spec(None, priority, delay, run_at,
                                self.retries + 1 if max_attempts is None else max_attempts,
                                expires, unique_key, meta)
        h = self.queue.db._hx(tx)
        jid = h.task_enqueue(self.queue.name, self.name, dumps(list(args), "args"),
                             dumps(dict(kwargs or {}), "kwargs"), self.result_ttl_ms,
                             self.timeout_ms, *spec[2:])
        return TaskHandle(self.queue, jid)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Calls the function directly (a coroutine function is run to completion)."""
        if self.is_async:
            return asyncio.run(self.fn(*args, **kwargs))
        return self.fn(*args, **kwargs)


# ---- the context of a running task ----

_current: "contextvars.ContextVar[Optional[JobContext]]" = contextvars.ContextVar(
    "tocsin_job", default=None)


def current_job() -> "JobContext":
    """The JobContext of the task running in this context (thread or asyncio task);
    InvalidArgument outside a task run by a Worker."""
    ctx = _current.get()
    if ctx is None:
        raise InvalidArgument("current_job() is only available inside a task run by a tocsin Worker")
    return ctx


_UNREAD = object()


class JobContext:
    """What a running task may know: ``job_id``, ``attempt``, ``max_attempts``,
    ``queue``, ``task``, ``meta`` (the job's headers), ``cancelled`` (True once the
    job was cancelled, its lease lost or its timeout passed: stop), and
    ``transaction()``: the transaction in which the job is acked.

        with tocsin.current_job().transaction() as tx:
            tx.execute("INSERT INTO charges ...")   # commits together with the ack

    If the lease was lost meanwhile, LeaseLost is raised inside that ``with`` and the
    transaction rolls back (another worker runs the job). The job's result is
    ``tx.result`` (None unless set), and the handler's return value is then ignored."""

    def __init__(self, worker: Any, run: Any, job_id: int, attempt: int, max_attempts: int,
                 queue: str, task: str, meta_json: Optional[str], db: Any,
                 worker_handle: Any = None) -> None:
        self._worker = worker
        self._worker_handle = worker_handle
        self._run = run
        self.job_id = job_id
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.queue = queue
        self.task = task
        self._meta_json = meta_json
        self._meta: Any = _UNREAD
        self._db = db
        self._cancelled = False

    @property
    def meta(self) -> Optional[Dict[str, Any]]:
        """The job's meta (headers such as trace context), decoded on first use."""
        if self._meta is _UNREAD:
            self._meta = loads(self._meta_json)
        return self._meta

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def acked(self) -> bool:
        """True once the job was acked inside a transaction()."""
        return self._run.finished

    def transaction(self) -> "AckTransaction":
        return AckTransaction(self)

    def __repr__(self) -> str:
        return "<tocsin.JobContext job %d %s attempt %d/%d>" % (self.job_id, self.task, self.attempt,
                                                               self.max_attempts)


class AckTransaction(Transaction):
    """A transaction that acks the running task's job just before it commits."""

    __slots__ = ("_job", "result")

    def __init__(self, job: JobContext) -> None:
        # begun on the worker's own handle: the core acks a run only in a transaction of it
        super().__init__(job._db, job._worker_handle)
        self._job = job
        self.result: Any = None

    def _pre_commit(self) -> None:
        job = self._job
        text = dumps(self.result, "the task's result")
        # LeaseLost when another worker holds the job: nothing is written, and the
        # transaction rolls back with the business writes
        job._worker.finish(job._run, _tocsin.OUTCOME_OK, text, None, None, None, -1, self._tx)
