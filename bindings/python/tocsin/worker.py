"""The worker runner, on the core's worker protocol (tocsin_worker_*, tocsin.h).

The core claims (across queues, up to the free slots, in one transaction), decides
retries and backoff, hands back unknown tasks, renews leases, takes back dead workers'
jobs, leads the scheduler and group-commits outcomes. This module only gets the next
runs, runs each handler the Python way (async functions on the event loop, sync ones
on ``concurrency`` threads of the worker's own or, with ``process=True``, in a child
process that a timeout kills) and reports the outcome.

    python -m tocsin worker myapp.jobs:db --queue emails --concurrency 4
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import os
import queue as _queue
import signal
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any, Dict, Iterable, Optional

from . import _tocsin
from ._tocsin import Closed, Error, InvalidArgument, LeaseLost
from ._util import Duration, as_bool, as_int, duration_ms, dumps, lease_ms, loads
from ._util import items as _items
from .coord import default_owner
from .tasks import JobContext, Task, _current
from .wake import readable

if TYPE_CHECKING:
    from .db import Database

__all__ = ["Worker"]

log = logging.getLogger("tocsin.worker")

OK, ERROR, FAIL, HAND_BACK = (_tocsin.OUTCOME_OK, _tocsin.OUTCOME_ERROR, _tocsin.OUTCOME_FAIL,
                              _tocsin.OUTCOME_HAND_BACK)


# with every slot busy the loop looks at the core at most this often (ms): upkeep and
# outcomes batched by runs that end while the sync threads are all in long tasks
_BUSY_LOOK_MS = 5


def _event(level: int, event: str, **fields: Any) -> None:
    if log.isEnabledFor(level):
        log.log(level, event, extra={"tocsin": fields})


class _TaskFailed(Exception):
    """An error raised in a child process: its type name, message and traceback."""

    def __init__(self, type_name: str, message: str, trace: str) -> None:
        super().__init__(message)
        self.type_name, self.message, self.trace = type_name, message, trace


class _Unserialisable(Exception):
    pass


class _RunTimeout(Exception):
    """The run outlived its task's timeout (a TimeoutError the task raises itself, such
    as a socket's or tocsin.Timeout, is the task's own error)."""


async def _within(aw: Any, timeout: float) -> Any:
    """``await aw``, cancelled at ``timeout`` seconds: then _RunTimeout."""
    fired: list = []
    timer = asyncio.get_running_loop().call_later(timeout, fired.append, True)
    try:
        return await asyncio.wait_for(aw, timeout)
    except asyncio.TimeoutError:
        if not fired:  # raised by the task before the deadline: its own error
            raise
        raise _RunTimeout() from None
    finally:
        timer.cancel()


class _Json(str):
    """A result already encoded as JSON (by a child process)."""


class _Running:
    __slots__ = ("ctx", "task", "future", "proc", "stop_reason", "t0")

    def __init__(self, ctx: JobContext, task: Optional[Task]) -> None:
        self.ctx = ctx
        self.task = task
        self.future: Any = None
        self.proc: Any = None
        self.stop_reason: Optional[str] = None


def _child(conn: Any, fn: Any, args: list, kwargs: dict) -> None:
    """The body of a process-pool run: the result (JSON) or the error, through a pipe."""
    try:
        value = fn(*args, **kwargs)
        try:
            msg: tuple = ("ok", dumps(value, "the task's return value"))
        except InvalidArgument as e:
            msg = ("unserialisable", str(e))
    except BaseException as e:  # noqa: B902 -- everything is reported to the parent
        msg = ("error", type(e).__name__, _describe(e), _utf8(traceback.format_exc()))
    try:
        conn.send(msg)
        conn.close()
    finally:
        os._exit(0)


def _utf8(text: Optional[str]) -> Optional[str]:
    """text as the core can store it: lone surrogates (which UTF-8 cannot encode)
    escaped, and NUL characters (which a C string cannot hold) dropped, as every
    runtime's worker drops them (Go's, Node's, Ruby's), so that an outcome is never
    refused for its error text. (A NUL made the outcome refused: dead at once, no
    retry, its type and message lost.)"""
    if text is None:
        return None
    if "\0" in text:
        text = text.replace("\0", "")
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _describe(x: BaseException) -> str:
    """str(x), also for an exception whose __str__ raises or is not valid UTF-8."""
    try:
        text = str(x)
    except BaseException:  # noqa: B902 -- a broken __str__ must not lose the job
        text = "<str() of the %s raised>" % type(x).__name__
    return _utf8(text) or ""


def _failure(ctx: JobContext, x: BaseException) -> tuple:
    """(kind, error type, message, trace, delay) of a run that raised x."""
    if isinstance(x, LeaseLost):  # raised by the ack inside the task's transaction: another worker has it
        _event(logging.WARNING, "job.lease_lost", job_id=ctx.job_id, task=ctx.task)
        return HAND_BACK, None, None, None, 0
    if isinstance(x, _TaskFailed):
        return ERROR, _utf8(x.type_name), _utf8(x.message), _utf8(x.trace), -1
    if isinstance(x, _Unserialisable):
        return FAIL, "SerializationError", _describe(x), None, -1
    # the task's own error: recorded as data, with its traceback
    return ERROR, _utf8(type(x).__name__), _describe(x), _utf8(traceback.format_exc()), -1


def _outcome(ctx: JobContext, kind: int, value: Any, etype: Optional[str], emsg: Optional[str],
             trace: Optional[str], delay: int) -> Optional[tuple]:
    """The arguments of the core's finish for a run, or None when it was acked inside
    its own transaction."""
    if ctx.acked:
        return None
    text = None
    if kind == OK:
        if value is None:
            text = "null"
        elif isinstance(value, _Json):
            text = str(value)
        else:
            try:
                text = dumps(value, "the task's return value")
            except InvalidArgument as x:  # deterministic: retrying would repeat the side effect
                kind, etype, emsg = FAIL, "SerializationError", str(x)
        if text is not None:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as x:  # a lone surrogate: not storable as JSON text
                kind, text, etype, emsg = (FAIL, None, "SerializationError",
                                           "the task's return value is not valid UTF-8: %s" % _utf8(str(x)))
    return (ctx._run, kind, text, etype, emsg, trace, delay)


def _finish(w: Any, out: tuple) -> None:
    """The core's finish of an outcome; one it refuses as invalid (a value that slipped
    past the checks) is reported as the run's error instead, so that no run is left
    holding its slot and its lease forever."""
    try:
        w.finish(*out)
    except InvalidArgument as x:
        _event(logging.ERROR, "job.unreportable", error="%s: %s" % (type(x).__name__, x))
        # a final failure naming why, as the core and the other runtimes record one
        w.finish(out[0], FAIL, None, "InvalidOutcome", "the outcome was refused: " + _describe(x), None, -1)


class Worker:
    """Runs the tasks registered on ``queues`` of ``db``.

    concurrency: runs at once; visibility: the lease per claim (the core renews it every
    third while the task runs); shutdown_timeout: on SIGINT/SIGTERM (or stop()) the
    worker stops claiming, lets running jobs finish for this long, then hands the rest
    back (pending again, no attempt consumed); a second signal hands everything back at
    once; scheduler: also stand for the scheduler's leadership (cron schedules);
    unknown_task_delay / unknown_task_handbacks: a job of a task this worker lacks (a
    rolling deploy) is handed back after the delay (doubling, capped at 60 s; default
    1 s) and dies as UnknownTask after that many hand-backs (default 20).
    Counters: processed, retried (an attempt failed and will be retried), failed
    (final), handed_back.
    """

    def __init__(self, db: "Database", queues: Iterable[str], *, concurrency: int = 1,
                 worker_id: Optional[str] = None, visibility: Duration = 30.0,
                 shutdown_timeout: Duration = 30.0, scheduler: bool = True,
                 scheduler_ttl: Duration = 10.0, unknown_task_delay: Optional[Duration] = None,
                 unknown_task_handbacks: Optional[int] = None) -> None:
        self.db = db
        if isinstance(queues, (str, bytes)):  # not its characters
            raise InvalidArgument("queues must be a list of queue names, not a %s (write [%r])"
                                  % (type(queues).__name__, queues))
        self.queues = list(_items(queues, "queues", "queue names"))
        if not self.queues:
            raise InvalidArgument("give at least one queue")
        for q in self.queues:
            if not isinstance(q, str):
                raise InvalidArgument("queue names must be str, not %s" % type(q).__name__)
            db._h.check_name("queue name", q)
        concurrency = as_int(concurrency, "concurrency", 1, 10000)
        self.concurrency = concurrency
        # refused here, not when run() has written the schedules and opened a connection
        if worker_id is not None and not isinstance(worker_id, str):
            raise InvalidArgument("worker_id must be a str, not %s" % type(worker_id).__name__)
        self.worker_id = default_owner() if worker_id is None else worker_id
        db._h.check_name("worker id", self.worker_id)
        self.visibility_ms = duration_ms(visibility, "visibility", allow_zero=False,
                                         min_ms=_tocsin.MIN_WORKER_LEASE_MS)
        self.shutdown_timeout = duration_ms(shutdown_timeout, "shutdown_timeout") / 1000.0
        self.scheduler = as_bool(scheduler, "scheduler")
        self.scheduler_ttl_ms = lease_ms(scheduler_ttl, "scheduler_ttl", min_ms=_tocsin.MIN_WORKER_LEASE_MS)
        # a job of a task this worker lacks: handed back after unknown_task_delay (doubling,
        # capped at 60 s; None: 1 s), dead (UnknownTask) after unknown_task_handbacks (None: 20)
        self.unknown_task_delay_ms = (0 if unknown_task_delay is None else
                                      duration_ms(unknown_task_delay, "unknown_task_delay", allow_zero=False))
        self.unknown_task_handbacks = (0 if unknown_task_handbacks is None else
                                       as_int(unknown_task_handbacks, "unknown_task_handbacks", 1, 1000000))
        self.processed = self.failed = self.retried = self.handed_back = 0
        self._w: Any = None
        self._tasks: Dict[str, Task] = {}
        self._running: Dict[int, _Running] = {}
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._stop: Optional[asyncio.Event] = None
        self._hard: Optional[asyncio.Event] = None
        self._early_stop: Optional[bool] = None  # stop() while not running: ends the next run

    # ---- lifecycle ----
    def run(self, *, install_signal_handlers: Optional[bool] = None) -> None:
        """Runs until stop() or, with signal handlers, SIGINT/SIGTERM (blocking).

        install_signal_handlers: None (the default) installs them when run() is called
        in the main thread (only there can Python handle signals) and not in any other
        thread; True insists (InvalidArgument off the main thread, before anything
        starts); False never installs them."""
        if install_signal_handlers is None:
            install_signal_handlers = threading.current_thread() is threading.main_thread()
        asyncio.run(self.run_async(install_signal_handlers=install_signal_handlers))

    def stop(self, *, now: bool = False) -> None:
        """Requests a graceful stop (now=True: hand everything back at once). Thread-safe.
        Asked while the worker is not running (before run() or run_async() got going),
        the next run stops as soon as it starts."""
        loop = self._loop
        if loop is None:
            self._early_stop = bool(now) or bool(self._early_stop)
            return
        try:
            loop.call_soon_threadsafe(self._request_stop, now)
        except RuntimeError:  # the loop closed meanwhile: that run is over
            pass

    def close(self) -> None:
        """Closes the core worker (hands back what still runs). Idempotent."""
        if self._w is not None:
            self._w.close()
            self._hw.close()

    def _request_stop(self, now: bool) -> None:
        assert self._stop is not None and self._hard is not None
        self._stopping = True  # the sync threads stop taking runs
        if self._w is not None:  # the core claims and hands out nothing more (upkeep goes on)
            self._w.drain()
        if now or self._stop.is_set():
            self._hard.set()
        self._stop.set()

    def _on_signal(self, sig: int) -> None:
        assert self._stop is not None
        _event(logging.INFO, "worker.signal", signal=signal.Signals(sig).name,
               in_flight=len(self._running), now=self._stop.is_set())
        self._request_stop(False)

    def _collect_tasks(self) -> Dict[str, Task]:
        out: Dict[str, Task] = {}
        for q in self.queues:
            tasks = self.db.queue(q)._tasks
            if not tasks:
                log.warning("no task is registered for queue %r in this process: its jobs will be "
                            "handed back (and die as UnknownTask after a bound)", q,
                            extra={"tocsin": {"queue": q}})
            out.update(tasks)
        return out

    def _setup(self) -> None:
        """A run's state, its schedules, its connection and the core worker."""
        self._stop, self._hard, self._kick = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self._outbox: list = []
        self._tasks = self._collect_tasks()
        for q in self.queues:
            self.db.queue(q).register_periodic()
        # the worker's own handle (connection): its upkeep may wait for the write lock,
        # and that must never hold up the application's calls on db meanwhile
        hw = _tocsin.Handle(*self.db._open_args)
        w = None
        try:
            w = _tocsin.Worker(hw, self.queues, self.concurrency, self.worker_id,
                               self.visibility_ms, self.scheduler, self.scheduler_ttl_ms,
                               self.unknown_task_delay_ms, self.unknown_task_handbacks)
            for name, t in self._tasks.items():
                # retries bound the runs of the task's jobs here, whatever a call by name allowed
                w.register(name, t.backoff_ms, 0, t.timeout_ms, -1 if t.keep_forever else t.result_ttl_ms,
                           t.retries + 1)
        except BaseException:  # (e.g. this worker id is live elsewhere): no connection left open
            if w is not None:
                w.close()
            hw.close()
            raise
        self._hw, self._w = hw, w
        self.db._enlist(self.db._workers, self)

    async def run_async(self, *, install_signal_handlers: bool = False) -> None:
        """Runs until stop() or, with install_signal_handlers=True (main thread only),
        SIGINT/SIGTERM."""
        if install_signal_handlers and threading.current_thread() is not threading.main_thread():
            raise InvalidArgument("install_signal_handlers=True works only in the main thread "
                                  "(Python handles signals there); in another thread run the "
                                  "worker with install_signal_handlers=False and call stop()")
        if self._loop is not None:  # its state (events, outbox, handle) belongs to that run
            raise InvalidArgument("this Worker is already running; make another Worker (with "
                                  "its own worker_id) to run more")
        loop = self._loop = asyncio.get_running_loop()
        try:
            self._setup()
        except BaseException:  # nothing runs: a later run may start
            self._loop = None
            raise
        w = self._w
        self._threads = self._io = None
        self._sync_threads = []
        handlers: list = []
        try:
            self._threads = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.concurrency + 4, thread_name_prefix="tocsin-task")
            # sync tasks without a timeout run on `concurrency` threads of their own: each
            # reports its run's outcome to the core and takes the next runs itself (from
            # the core's reserve, or claiming), so the loop is not on their path at all
            self._todo: Any = _queue.SimpleQueue()
            self._stopping = False
            self._count_lock = threading.Lock()
            # next() runs off the loop: its group commit may wait for the write lock that an
            # async task's own transaction holds, and that task must be able to finish
            self._io = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="tocsin-worker")
            if install_signal_handlers:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(sig, self._on_signal, sig)
                    handlers.append(sig)
            for i in range(self.concurrency):
                th = threading.Thread(target=self._sync_main, daemon=True, name="tocsin-sync-%d" % i)
                th.start()
                self._sync_threads.append(th)
            _event(logging.INFO, "worker.start", worker=self.worker_id, queues=self.queues,
                   concurrency=self.concurrency, tasks=sorted(self._tasks))
            if self._early_stop is not None:  # stop() came before the run
                self._request_stop(self._early_stop)
                self._early_stop = None
            await self._loop_runs(w, loop)
            await self._drain(w, loop)
        finally:
            # also after a failure while starting: nothing of the run is left behind
            for e in list(self._running.values()):
                self._cancel(e, "shutdown")
            for args in self._outbox:
                try:
                    _finish(w, args)
                except Error:
                    pass
            for _ in self._sync_threads:
                self._todo.put(None)
            w.close()  # flushes, hands back what still runs, resigns, leaves the registry
            self._hw.close()
            self.db._workers.discard(self)
            self._loop = None  # a later stop() is for the next run
            if self._threads is not None:
                self._threads.shutdown(wait=False)
            if self._io is not None:
                self._io.shutdown(wait=False)
            for sig in handlers:
                loop.remove_signal_handler(sig)
            _event(logging.INFO, "worker.stop", worker=self.worker_id, processed=self.processed,
                   retried=self.retried, failed=self.failed, handed_back=self.handed_back)

    # ---- the core's steps, off the event loop ----
    #
    # Every call that takes the core worker's lock (next, finish without a transaction,
    # cancelled, wake_in) runs in one thread of its own: an upkeep may wait there for
    # the write lock that an async task's transaction holds, and the loop must stay
    # free to let that task commit.

    def _step(self, w: Any, claim: bool, poll: bool = False) -> Optional[tuple]:
        out, self._outbox = self._outbox, []
        for args in out:
            try:
                _finish(w, args)
            except Error as e:
                _event(logging.WARNING, "job.unreported", error="%s: %s" % (type(e).__name__, e))
        runs: list = []
        if poll:  # on the loop: never waits for the write lock (None: the thread must)
            try:
                runs = w.poll()
            except Closed:
                raise
            except Error:
                return None
            if runs is None:
                return None
        elif claim or w.wake_in() == 0:
            try:
                runs = w.next(0)
            except Closed:
                raise
            except Error as e:  # e.g. Busy past the busy timeout: the core tries again
                # after a pause, which wake_in() counts in
                _event(logging.WARNING, "worker.upkeep_failed", error="%s: %s" % (type(e).__name__, e))
        if not claim:  # draining: what the upkeep claimed goes straight back
            for r in runs:
                w.finish(r[0], HAND_BACK, None, None, "worker shutdown: not started", None, 0)
            runs = []
        return runs, w.cancelled(), w.wake_in()

    async def _wait(self, fd: int, seconds: float, *events: asyncio.Event) -> None:
        """Until the worker's descriptor is readable (fd >= 0), `seconds` pass or an
        event is set."""
        waits = [asyncio.ensure_future(readable(fd, seconds) if fd >= 0 else asyncio.sleep(seconds))]
        waits += [asyncio.ensure_future(e.wait()) for e in events]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for f in waits:
                f.cancel()

    async def _loop_runs(self, w: Any, loop: asyncio.AbstractEventLoop) -> None:
        assert self._stop is not None
        fd = w.fileno()
        while not self._stop.is_set():
            # on the loop when the write lock is free (no thread hop), else in the thread
            step = self._step(w, True, True)
            if step is None:
                step = await loop.run_in_executor(self._io, self._step, w, True)
            runs, cancelled, wake_in = step
            for r in runs:
                self._start(w, r)
            self._check_cancelled(cancelled)
            if runs and len(self._running) < self.concurrency:
                continue
            self._kick.clear()
            if self._outbox:
                continue
            if len(self._running) >= self.concurrency:
                # every slot busy: nothing to claim, so no need to follow commits; the
                # sync threads take their next runs themselves (their steps do the
                # upkeep) and kick when idle, so the loop only looks in now and then
                await self._wait(-1, max(wake_in, _BUSY_LOOK_MS) / 1000.0, self._stop, self._kick)
                continue
            # sleep on the descriptor (commits of any process) until the next upkeep
            await self._wait(fd, wake_in / 1000.0, self._stop, self._kick)

    async def _drain(self, w: Any, loop: asyncio.AbstractEventLoop) -> None:
        """Shutdown: let running jobs finish within the deadline, hand the rest back. The
        core's upkeep (lease renewal) goes on meanwhile; what it claims is handed back."""
        assert self._hard is not None
        fd = w.fileno()
        if self._running and not self._hard.is_set():
            _event(logging.INFO, "worker.draining", in_flight=len(self._running),
                   deadline_s=self.shutdown_timeout)
            end = loop.time() + self.shutdown_timeout
            wake_in = 0
            while self._running and not self._hard.is_set():
                left = end - loop.time()
                if left <= 0:
                    break
                self._kick.clear()
                if not self._outbox:
                    await self._wait(fd, min(left, wake_in / 1000.0), self._hard, self._kick)
                _, cancelled, wake_in = await loop.run_in_executor(self._io, self._step, w, False)
                self._check_cancelled(cancelled)
        pending = [e.future for e in self._running.values() if e.future is not None]
        for e in list(self._running.values()):
            self._cancel(e, "shutdown")
        if pending:
            await asyncio.wait(pending, timeout=2.0)
        await loop.run_in_executor(self._io, self._step, w, False)

    # ---- one run ----
    def _prepare(self, w: Any, r: tuple) -> tuple:
        """(run state, args, kwargs, timeout, sync) of a run handed out by the core."""
        run, job_id, _token, queue, task, args, kwargs, meta, attempt, maxa, timeout_ms, _t = r
        ctx = JobContext(w, run, job_id, attempt, maxa, queue, task, meta, self.db, self._hw)
        t = self._tasks.get(task)
        e = _Running(ctx, t)
        e.t0 = time.monotonic()
        self._running[job_id] = e
        return e, args, kwargs, timeout_ms, (t is not None and not t.is_async and not t.process
                                             and timeout_ms <= 0)

    def _start(self, w: Any, r: tuple) -> None:
        e, args, kwargs, timeout_ms, sync = self._prepare(w, r)
        if sync:
            self._todo.put((e, args, kwargs))
        else:
            self._launch(w, e, args, kwargs, timeout_ms)

    def _launch(self, w: Any, e: _Running, args: str, kwargs: str, timeout_ms: int) -> None:
        if self._running.get(e.ctx.job_id) is e:  # (not handed back at shutdown meanwhile)
            e.future = asyncio.ensure_future(self._execute(w, e, args, kwargs, timeout_ms))

    def _check_cancelled(self, ids: list) -> None:
        for jid in ids:
            e = self._running.get(jid)
            if e is not None and e.stop_reason is None:
                _event(logging.WARNING, "job.cancelled", job_id=jid, task=e.ctx.task)
                self._cancel(e, "cancelled")

    def _cancel(self, e: _Running, reason: str) -> None:
        if e.stop_reason is None:
            e.stop_reason = reason
        e.ctx._cancelled = True
        if e.future is None and e.task is not None and reason == "shutdown" and \
                self._running.pop(e.ctx.job_id, None) is e:
            # a sync run on a thread of its own cannot be stopped: handed back now, its
            # outcome is dropped when it ends (a cancelled one is told and runs on)
            self._outbox.append((e.ctx._run, HAND_BACK, None, None,
                                 "worker shutdown: handed back unfinished", None, 0))
            self._count(e.ctx, HAND_BACK, None, None, None, e.t0)
            return
        if e.proc is not None and e.proc.is_alive():
            e.proc.kill()
        if e.future is not None and not e.future.done():
            e.future.cancel()

    async def _execute(self, w: Any, e: _Running, args_json: str, kwargs_json: str,
                       timeout_ms: int) -> None:
        ctx, t = e.ctx, e.task
        _current.set(ctx)  # this asyncio task's context (and the thread's copy)
        t0 = time.monotonic()
        timeout = timeout_ms / 1000.0 if timeout_ms > 0 else None
        kind, value, etype, emsg, trace, delay = OK, None, None, None, None, -1
        cancelled_from_outside = False
        try:
            if t is None:
                raise asyncio.CancelledError  # registered after the worker started: hand back
            # most calls carry no arguments: skip the decoder for the empty forms
            args = [] if args_json == "[]" else loads(args_json)
            kwargs = {} if kwargs_json == "{}" else loads(kwargs_json)
            if t.is_async:
                coro = t.fn(*args, **kwargs)
                value = await (coro if timeout is None else _within(coro, timeout))
            elif t.process:
                value = await self._in_process(e, t, args, kwargs, timeout)
            else:
                value = await self._in_thread(e, t, args, kwargs, timeout)
        except asyncio.CancelledError as x:
            cancelling = getattr(asyncio.current_task(), "cancelling", None)  # Python >= 3.11
            if e.stop_reason is None and t is not None and not (cancelling is not None and cancelling()):
                # the handler raised CancelledError itself (an await of something that was
                # cancelled): a failure of the run like any other. Re-raised unreported, it
                # left the job running under this worker's renewed lease until shutdown.
                kind, etype, emsg, trace, delay = _failure(ctx, x)
            else:
                # stopped by the worker, or this run's asyncio task cancelled from outside
                # (then it is cancelled on after the hand-back): handed back unrun
                cancelled_from_outside = e.stop_reason is None and t is not None
                kind, emsg, delay = HAND_BACK, ("worker shutdown: handed back unfinished"
                                                if e.stop_reason != "cancelled" else None), 0
        except _RunTimeout:
            # no message: the core writes its own, the same in every runtime
            kind, etype, emsg = ERROR, "Timeout", None
        except BaseException as x:  # SystemExit, KeyboardInterrupt...: the task's error too
            kind, etype, emsg, trace, delay = _failure(ctx, x)
        finally:
            self._running.pop(ctx.job_id, None)
        self._report(ctx, _outcome(ctx, kind, value, etype, emsg, trace, delay), t0,
                     self._outbox.append)
        self._kick.set()
        if cancelled_from_outside:
            raise asyncio.CancelledError

    def _report(self, ctx: JobContext, out: Optional[tuple], t0: float, send: Any) -> None:
        """Counts a run's outcome and sends it (the loop's outbox, or the core's
        finish from a sync thread); out None: acked inside its own transaction."""
        if out is None:
            self._count(ctx, OK, None, None, None, t0)
        else:
            send(out)
            self._count(ctx, out[1], out[3], out[4], out[5], t0)

    # ---- sync runs on the worker's threads ----
    def _finish_now(self, out: tuple) -> None:
        try:
            _finish(self._w, out)  # batched into the core's next group commit
        except Error as x:
            _event(logging.WARNING, "job.unreported", error="%s: %s" % (type(x).__name__, x))

    def _sync_main(self) -> None:
        todo, w, loop = self._todo, self._w, self._loop
        assert loop is not None
        try:
            while True:
                item = todo.get()
                if item is None:
                    return
                while item is not None:
                    item = self._sync_run(w, loop, *item)
        except RuntimeError:  # the loop closed under a straggler: the worker is gone
            return

    def _sync_run(self, w: Any, loop: Any, e: _Running, args_json: str,
                  kwargs_json: str) -> Optional[tuple]:
        """Runs e on this thread, reports it and takes the next runs from the core:
        returns the next sync run for this thread, if any."""
        ctx = e.ctx
        _current.set(ctx)
        kind, value, etype, emsg, trace, delay = OK, None, None, None, None, -1
        try:
            args = [] if args_json == "[]" else loads(args_json)
            kwargs = {} if kwargs_json == "{}" else loads(kwargs_json)
            value = e.task.fn(*args, **kwargs)
        except BaseException as x:  # as in a child process: a SystemExit must not end the thread
            kind, etype, emsg, trace, delay = _failure(ctx, x)
        _current.set(None)
        out = _outcome(ctx, kind, value, etype, emsg, trace, delay)
        if self._running.pop(ctx.job_id, None) is e:  # else: handed back at shutdown
            self._report(ctx, out, e.t0, self._finish_now)
        mine = None
        if not self._stopping:
            # (cancellations reach handlers through the loop, which looks every few ms)
            try:
                # the core's reserve under the GIL, else a step (a claim: this thread may wait)
                runs = w.take() or w.next(0)
            except Error:  # Busy past the busy timeout, closed: the loop takes over
                runs = []
            for r in runs:
                e2, a2, k2, timeout_ms, sync = self._prepare(w, r)
                if not sync:
                    loop.call_soon_threadsafe(self._launch, w, e2, a2, k2, timeout_ms)
                elif mine is None:
                    mine = (e2, a2, k2)
                else:
                    self._todo.put((e2, a2, k2))
        if mine is None:  # out of work here: the loop waits for more (or drains)
            loop.call_soon_threadsafe(self._kick.set)
        return mine

    def _count(self, ctx: JobContext, kind: int, etype: Optional[str], emsg: Optional[str],
               trace: Optional[str], t0: float) -> None:
        with self._count_lock:  # the sync threads count too
            self._count_locked(ctx, kind, etype, emsg, trace, t0)

    def _count_locked(self, ctx: JobContext, kind: int, etype: Optional[str], emsg: Optional[str],
                      trace: Optional[str], t0: float) -> None:
        if kind == OK:
            self.processed += 1
            if log.isEnabledFor(logging.DEBUG):
                _event(logging.DEBUG, "job.done", job_id=ctx.job_id, task=ctx.task,
                       attempt=ctx.attempt, ms=round((time.monotonic() - t0) * 1000, 3))
        elif kind == HAND_BACK:
            self.handed_back += 1
            _event(logging.WARNING, "job.handed_back", job_id=ctx.job_id, task=ctx.task)
        elif kind == ERROR and ctx.attempt < ctx.max_attempts:
            self.retried += 1
            _event(logging.WARNING, "job.retry", job_id=ctx.job_id, task=ctx.task,
                   attempt=ctx.attempt, error="%s: %s" % (etype, emsg), trace=trace)
        else:
            self.failed += 1
            _event(logging.ERROR, "job.failed", job_id=ctx.job_id, task=ctx.task,
                   attempt=ctx.attempt, error="%s: %s" % (etype, emsg), trace=trace)

    async def _in_thread(self, e: _Running, t: Task, args: list, kwargs: dict,
                         timeout: Optional[float]) -> Any:
        loop = asyncio.get_running_loop()
        cv = contextvars.copy_context()
        if timeout is None:
            if kwargs:
                return await loop.run_in_executor(self._threads, lambda: cv.run(t.fn, *args, **kwargs))
            return await loop.run_in_executor(self._threads, cv.run, t.fn, *args)
        started = loop.create_future()

        def call() -> Any:
            loop.call_soon_threadsafe(lambda: started.done() or started.set_result(None))
            return t.fn(*args, **kwargs)

        fut = loop.run_in_executor(self._threads, cv.run, call)
        # the timeout counts from the start of the run, never from a wait for a thread
        await asyncio.wait({started, fut}, return_when=asyncio.FIRST_COMPLETED)
        try:
            return await _within(asyncio.shield(fut), timeout)
        except _RunTimeout:
            e.ctx._cancelled = True  # a thread cannot be stopped: it is told (ctx.cancelled)
            _event(logging.WARNING, "job.timeout_thread", job_id=e.ctx.job_id, task=t.name,
                   hint="a sync task's thread cannot be killed; use process=True for a hard timeout")
            raise

    async def _in_process(self, e: _Running, t: Task, args: list, kwargs: dict,
                          timeout: Optional[float]) -> Any:
        import multiprocessing
        mp = multiprocessing.get_context("fork")
        rd, wr = mp.Pipe(duplex=False)
        p = mp.Process(target=_child, args=(wr, t.fn, args, kwargs), daemon=True)
        p.start()
        wr.close()
        e.proc = p
        loop = asyncio.get_running_loop()
        try:
            if not await readable(rd.fileno(), timeout):
                p.kill()
                await loop.run_in_executor(None, p.join)
                raise _RunTimeout()
            try:
                msg = rd.recv()
            except EOFError:
                msg = None
            await loop.run_in_executor(None, p.join)
        except asyncio.CancelledError:
            p.kill()
            raise
        finally:
            rd.close()
        if msg is None:
            raise _TaskFailed("WorkerProcessDied", "the task's process died (exit code %s)"
                              % p.exitcode, "")
        if msg[0] == "ok":
            return _Json(msg[1])
        if msg[0] == "unserialisable":
            raise _Unserialisable(msg[1])
        raise _TaskFailed(msg[1], msg[2], msg[3])
