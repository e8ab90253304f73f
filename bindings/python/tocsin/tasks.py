"""Tasks: functions turned into enqueues, with results any runtime can read.

The envelope (docs/sql.md ("Task envelope")) is the job payload:
    {"task": "send_email", "args": [...], "kwargs": {...}, "result_ttl_ms": 86400000}
A worker of any runtime that registered ``send_email`` runs it and stores the outcome
with the core's results: the return value as JSON, or an error recorded as data
{"type": "ValueError", "message": "..."}.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Sequence, Tuple

from ._tocsin import Error, InvalidArgument
from ._util import Duration, Instant, duration_ms

if TYPE_CHECKING:
    from .coord import Result
    from .db import Transaction
    from .queue import Job, Queue

__all__ = ["Task", "TaskHandle", "TaskError", "envelope", "parse_envelope", "DEFAULT_RESULT_TTL"]

DEFAULT_RESULT_TTL = 86400.0  # seconds a result is kept by default (one day)


class TaskError(Error):
    """The task raised (or its job died): ``type`` and ``message`` as recorded."""

    def __init__(self, type: str, message: str, job_id: int) -> None:
        super().__init__("%s: %s" % (type, message) if message else type)
        self.type = type
        self.message = message
        self.job_id = job_id


def envelope(task: str, args: Sequence[Any] = (), kwargs: Optional[Dict[str, Any]] = None,
             result_ttl_ms: Optional[int] = None, timeout_ms: Optional[int] = None) -> Dict[str, Any]:
    """The language-neutral job payload of a task call."""
    if not isinstance(task, str) or not task:
        raise InvalidArgument("task name must be a non-empty str")
    env: Dict[str, Any] = {"task": task, "args": list(args), "kwargs": dict(kwargs or {})}
    if result_ttl_ms is not None:
        env["result_ttl_ms"] = result_ttl_ms
    if timeout_ms is not None:
        env["timeout_ms"] = timeout_ms
    return env


def parse_envelope(payload: Any) -> Tuple[str, list, dict, Optional[int], Optional[int]]:
    """(task, args, kwargs, result_ttl_ms, timeout_ms) of a payload; ValueError if it is
    not a task envelope."""
    if not isinstance(payload, dict) or not isinstance(payload.get("task"), str) or not payload["task"]:
        raise ValueError('not a task envelope (a JSON object with a "task" name)')
    args = payload.get("args", [])
    kwargs = payload.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise ValueError('"args" must be an array and "kwargs" an object')
    ttl = payload.get("result_ttl_ms")
    timeout = payload.get("timeout_ms")
    for v, what in ((ttl, "result_ttl_ms"), (timeout, "timeout_ms")):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise ValueError('"%s" must be an integer >= 0' % what)
    return payload["task"], args, kwargs, ttl, timeout


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
            raise TaskError(r.error_type or "Error", r.error_message or "", self.job_id)
        return r.value

    def get(self, timeout: Optional[Duration] = None) -> Any:
        """Waits (GIL released) for the task's return value; raises TaskError if it
        failed, tocsin.Timeout at the timeout."""
        return self._unwrap(self.queue.db.wait_result(self.job_id, timeout))

    async def result(self, timeout: Optional[Duration] = None) -> Any:
        """get() for asyncio (the event loop is never blocked)."""
        return self._unwrap(await self.queue.db.wait_result_async(self.job_id, timeout))

    def done(self) -> bool:
        return self.queue.db.result(self.job_id) is not None


class Task:
    """A registered task (``@queue.task(...)``). Calling it enqueues a call and returns
    a TaskHandle; ``task.run(...)`` calls the function here and now."""

    def __init__(self, queue: "Queue", fn: Callable[..., Any], name: str, retries: int,
                 backoff: Optional[Duration], timeout: Optional[Duration],
                 result_ttl: Optional[Duration]) -> None:
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries < 1000000:
            raise InvalidArgument("retries must be an integer >= 0")
        self.queue = queue
        self.fn = fn
        self.name = name
        self.retries = retries
        self.backoff_ms = None if backoff is None else duration_ms(backoff, "backoff", allow_zero=False)
        self.timeout_ms = None if timeout is None else duration_ms(timeout, "timeout", allow_zero=False)
        self.result_ttl_ms = None if result_ttl is None else duration_ms(result_ttl, "result_ttl", allow_zero=False)
        self.is_async = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return "<tocsin.Task %r on %r>" % (self.name, self.queue.name)

    def __call__(self, *args: Any, **kwargs: Any) -> TaskHandle:
        return self.enqueue(args, kwargs)

    def enqueue(self, args: Sequence[Any] = (), kwargs: Optional[Dict[str, Any]] = None, *,
                tx: Optional["Transaction"] = None, delay: Optional[Duration] = None,
                run_at: Optional[Instant] = None, priority: int = 0,
                unique_key: Optional[str] = None, meta: Optional[dict] = None) -> TaskHandle:
        """Enqueues a call with job options (``tx=`` joins a transaction)."""
        env = envelope(self.name, args, kwargs, self.result_ttl_ms, self.timeout_ms)
        jid = self.queue.enqueue(env, tx=tx, delay=delay, run_at=run_at, priority=priority,
                                 max_attempts=self.retries + 1, unique_key=unique_key, meta=meta)
        return TaskHandle(self.queue, jid)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Calls the function directly (a coroutine function is run to completion)."""
        if self.is_async:
            return asyncio.run(self.fn(*args, **kwargs))
        return self.fn(*args, **kwargs)

    def retry_delay_ms(self, attempts: int) -> int:
        """The delay before the next attempt: None -> -1 (the core's default backoff)."""
        if self.backoff_ms is None:
            return -1
        from . import _tocsin
        return _tocsin.backoff_ms(self.backoff_ms, _tocsin.BACKOFF_CAP_MS, max(1, attempts))


def call(queue: "Queue", task_name: str, args: Sequence[Any], kwargs: Dict[str, Any], *,
         max_attempts: Optional[int] = None, tx: Optional["Transaction"] = None,
         result_ttl: Optional[Duration] = DEFAULT_RESULT_TTL) -> TaskHandle:
    ttl = None if result_ttl is None else duration_ms(result_ttl, "result_ttl", allow_zero=False)
    jid = queue.enqueue(envelope(task_name, args, kwargs, ttl), tx=tx, max_attempts=max_attempts)
    return TaskHandle(queue, jid)
