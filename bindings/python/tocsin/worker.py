"""The worker runner: claims task jobs, runs them (sync functions in threads, async
ones on the event loop), records results, heartbeats long jobs, shuts down
gracefully, and runs the scheduler (leader election with standbys).

    python -m tocsin worker myapp.jobs:db --queue emails --concurrency 4
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import signal
import time
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Set

from . import _tocsin
from ._util import Duration, duration_ms, dumps
from .coord import default_owner
from .tasks import Task, parse_envelope
from .wake import readable

if TYPE_CHECKING:
    from .db import Database
    from .queue import Job

__all__ = ["Worker", "Scheduler"]

log = logging.getLogger("tocsin.worker")


def _event(level: int, event: str, **fields: Any) -> None:
    log.log(level, event, extra={"tocsin": fields})


class Scheduler:
    """Runs the schedules: one leader among all schedulers of the database (a lease
    renewed every ttl/3); standbys take over when the leader's lease lapses. The
    leader fires due boundaries with the core's tick (each boundary exactly once)."""

    def __init__(self, db: "Database", *, owner: Optional[str] = None, ttl: Duration = 10.0) -> None:
        self.db = db
        self.owner = owner or default_owner()
        self.ttl_ms = duration_ms(ttl, "ttl", allow_zero=False)
        self.leader = False
        self.fired = 0

    def step(self) -> float:
        """One round: lead (or stand by), fire what is due. Returns seconds to sleep."""
        h = self.db._h
        was = self.leader
        self.leader, token = h.scheduler_lead(self.owner, self.ttl_ms)
        if self.leader != was:
            _event(logging.INFO, "scheduler.leader" if self.leader else "scheduler.standby",
                   owner=self.owner, token=token)
        renew_in = self.ttl_ms / 3000.0
        if not self.leader:
            return renew_in
        fired = h.scheduler_tick()
        if fired:
            self.fired += fired
            _event(logging.INFO, "scheduler.fired", jobs=fired)
        nxt = h.scheduler_next_fire()
        if nxt is None:
            return renew_in
        return max(0.0, min(renew_in, (nxt - h.now()) / 1000.0))

    def resign(self) -> None:
        if self.leader:
            self.db._h.scheduler_resign(self.owner)
            self.leader = False
            _event(logging.INFO, "scheduler.resigned", owner=self.owner)

    async def run(self, stop: asyncio.Event) -> None:
        """Runs until ``stop`` is set; wakes early when schedules change (wake engine)."""
        sub = _tocsin.Sub(self.db._h)
        try:
            while not stop.is_set():
                sub.drain()
                delay = self.step()
                if delay > 0:
                    stopper = asyncio.ensure_future(stop.wait())
                    waker = asyncio.ensure_future(readable(sub.fileno(), delay))
                    await asyncio.wait({stopper, waker}, return_when=asyncio.FIRST_COMPLETED)
                    stopper.cancel()
                    waker.cancel()
        finally:
            sub.close()
            self.resign()


class Worker:
    """Runs the tasks registered on ``queues`` of ``db``.

    concurrency: jobs at once; visibility: the lease per claim (heartbeats renew it
    every visibility/3 while the task runs); shutdown_timeout: on SIGINT/SIGTERM (or
    stop()) the worker stops claiming, lets running jobs finish for this long, then
    hands the rest back to the queue (pending again, attempt not consumed by a
    failure) so no job is lost; scheduler: also run the scheduler (leader/standby).
    """

    def __init__(self, db: "Database", queues: Iterable[str], *, concurrency: int = 1,
                 worker_id: Optional[str] = None, visibility: Duration = 30.0,
                 shutdown_timeout: Duration = 30.0, scheduler: bool = True,
                 scheduler_ttl: Duration = 10.0) -> None:
        self.db = db
        self.queues = list(queues)
        if not self.queues:
            raise _tocsin.InvalidArgument("give at least one queue")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise _tocsin.InvalidArgument("concurrency must be an integer >= 1")
        self.concurrency = concurrency
        self.worker_id = worker_id or default_owner()
        self.visibility_ms = duration_ms(visibility, "visibility", allow_zero=False)
        self.shutdown_timeout = duration_ms(shutdown_timeout, "shutdown_timeout") / 1000.0
        self.scheduler = Scheduler(db, owner=self.worker_id, ttl=scheduler_ttl) if scheduler else None
        self.processed = 0
        self.failed = 0
        self._stop: Optional[asyncio.Event] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._running: Dict["asyncio.Task[Any]", "Job"] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=concurrency,
                                                           thread_name_prefix="tocsin-task")

    def _tasks(self) -> Dict[str, Task]:
        out: Dict[str, Task] = {}
        for q in self.queues:
            out.update(self.db.queue(q)._tasks)
        return out

    # ---- lifecycle ----
    def run(self, *, install_signal_handlers: bool = True) -> None:
        """Runs until SIGINT/SIGTERM or stop() (blocking)."""
        asyncio.run(self.run_async(install_signal_handlers=install_signal_handlers))

    def stop(self) -> None:
        """Requests a graceful stop (thread-safe)."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    async def run_async(self, *, install_signal_handlers: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if install_signal_handlers:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._loop.add_signal_handler(sig, self._on_signal, sig)
        for q in self.queues:
            self.db.queue(q).register_periodic()
        _event(logging.INFO, "worker.start", worker=self.worker_id, queues=self.queues,
               concurrency=self.concurrency, tasks=sorted(self._tasks()))
        sched = asyncio.ensure_future(self.scheduler.run(self._stop)) if self.scheduler else None
        try:
            await self._claim_loop()
        finally:
            await self._drain()
            if sched is not None:
                self._stop.set()
                await sched
            self._pool.shutdown(wait=False)
            if install_signal_handlers:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    self._loop.remove_signal_handler(sig)
            _event(logging.INFO, "worker.stop", worker=self.worker_id, processed=self.processed,
                   failed=self.failed)

    def _on_signal(self, sig: int) -> None:
        _event(logging.INFO, "worker.signal", signal=signal.Signals(sig).name,
               in_flight=len(self._running))
        assert self._stop is not None
        self._stop.set()

    # ---- claiming ----
    async def _claim_loop(self) -> None:
        h = self.db._h
        assert self._stop is not None
        stop = self._stop
        sub = _tocsin.Sub(h)
        stopper = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                free = self.concurrency - len(self._running)
                if free <= 0:
                    await asyncio.wait(set(self._running) | {stopper}, return_when=asyncio.FIRST_COMPLETED)
                    continue
                claimed = 0
                for q in self.queues:
                    rows = h.claim(q, self.worker_id, free - claimed, self.visibility_ms)
                    for row in rows:
                        from .queue import Job
                        job = Job(self.db.queue(q), row)
                        t = asyncio.ensure_future(self._execute(job))
                        self._running[t] = job
                        t.add_done_callback(self._running.pop)
                    claimed += len(rows)
                    if claimed >= free:
                        break
                if claimed:
                    continue
                if h.queue_wait(self.queues, 0, sub):  # read-only check, drains the wake
                    continue
                deadline = h.next_deadline(self.queues)
                timeout = None if deadline is None else max(0.0, (deadline - h.now()) / 1000.0)
                waker = asyncio.ensure_future(readable(sub.fileno(), None if timeout is None else min(timeout, 1.0)))
                await asyncio.wait({waker, stopper} | set(self._running), return_when=asyncio.FIRST_COMPLETED)
                waker.cancel()
        finally:
            stopper.cancel()
            sub.close()

    async def _drain(self) -> None:
        """Shutdown: let running jobs finish within the deadline, hand the rest back."""
        if not self._running:
            return
        pending = set(self._running)
        _event(logging.INFO, "worker.draining", in_flight=len(pending), deadline_s=self.shutdown_timeout)
        done, pending = await asyncio.wait(pending, timeout=self.shutdown_timeout)
        for t in pending:
            job = self._running.get(t)
            t.cancel()
            if job is not None:
                handed = job.retry(0, error="worker shutdown: handed back unfinished")
                _event(logging.WARNING, "job.handed_back", job_id=job.id, task=_task_name(job),
                       ok=handed)
        if pending:
            await asyncio.wait(pending, timeout=1.0)

    # ---- running one job ----
    async def _heartbeat(self, job: "Job") -> None:
        every = self.visibility_ms / 3000.0
        while True:
            await asyncio.sleep(every)
            if not job.heartbeat(self.visibility_ms / 1000.0):
                _event(logging.WARNING, "job.lease_lost", job_id=job.id)
                return

    async def _execute(self, job: "Job") -> None:
        t0 = time.monotonic()
        try:
            name, args, kwargs, ttl_ms, timeout_ms = parse_envelope(job.payload)
        except ValueError as e:
            self._record_failure(job, None, "InvalidEnvelope", str(e), final=True, ttl_ms=None)
            return
        task = self._tasks().get(name)
        if task is None:
            self._record_failure(job, name, "UnknownTask",
                                 "no task %r is registered by this worker" % name, final=True,
                                 ttl_ms=ttl_ms)
            return
        timeout = (timeout_ms or task.timeout_ms or 0) / 1000.0 or None
        hb = asyncio.ensure_future(self._heartbeat(job))
        try:
            if task.is_async:
                coro = task.fn(*args, **kwargs)
            else:
                loop = asyncio.get_running_loop()
                coro = loop.run_in_executor(self._pool, lambda: task.fn(*args, **kwargs))
            value = await asyncio.wait_for(coro, timeout) if timeout else await coro
            text = dumps(value, "the task's return value")
        except asyncio.CancelledError:
            raise
        except asyncio.TimeoutError:
            self._record_failure(job, name, "Timeout", "the task ran longer than %.3f s" % timeout,
                                 final=job.attempts >= job.max_attempts, ttl_ms=ttl_ms, task=task)
            return
        except Exception as e:  # the task's own error: recorded as data
            self._record_failure(job, name, type(e).__name__, str(e),
                                 final=job.attempts >= job.max_attempts, ttl_ms=ttl_ms, task=task)
            return
        finally:
            hb.cancel()
        ttl = ttl_ms if ttl_ms is not None else (task.result_ttl_ms or 0)
        # the result and the ack commit together, only while the lease holds
        acked = self.db._h.complete(job.id, job.token, text, ttl or 0)
        self.processed += 1
        _event(logging.INFO, "job.done" if acked else "job.lease_lost", job_id=job.id, task=name,
               attempt=job.attempts, ms=round((time.monotonic() - t0) * 1000, 3))

    def _record_failure(self, job: "Job", name: Optional[str], etype: str, message: str, *,
                        final: bool, ttl_ms: Optional[int], task: Optional[Task] = None) -> None:
        self.failed += 1
        error = "%s: %s" % (etype, message)
        if not final:
            delay = task.retry_delay_ms(job.attempts) if task else -1
            ok = self.db._h.retry(job.id, job.token, delay, error)
            _event(logging.WARNING, "job.retry", job_id=job.id, task=name, attempt=job.attempts,
                   error=error, ok=ok)
            return
        ttl = ttl_ms if ttl_ms is not None else ((task.result_ttl_ms if task else None) or 0)
        ok = self.db._h.fail_task(job.id, job.token, etype, message, ttl or 0)
        _event(logging.ERROR, "job.failed", job_id=job.id, task=name, attempt=job.attempts,
               error=error, ok=ok)


def _task_name(job: "Job") -> Optional[str]:
    try:
        return parse_envelope(job.payload)[0]
    except ValueError:
        return None
