"""Job queues: enqueue, claim, leases with fencing tokens, dead letters."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from ._tocsin import Error, InvalidArgument
from ._util import Duration, Instant, as_int, at_item, duration_ms, is_int_like, dumps, dumps_each, instant_ms, loads, meta_json
from ._util import items as _items

if TYPE_CHECKING:
    from .db import Database, Transaction

__all__ = ["Queue", "Job", "JobSpec"]

_DEFAULT_VISIBILITY = 30.0
_UNSET: Any = object()

_FIELDS = ("id", "queue", "state", "payload_json", "meta_json", "priority", "attempts",
           "max_attempts", "token", "run_at", "created_at", "lease_until", "expires_at",
           "unique_key", "worker", "last_error", "reason", "died_at")


class Job:
    """A job as stored (live or dead). Times are integer milliseconds since the Unix
    epoch, as in the database (0: unset); ``payload`` and ``meta`` are decoded JSON.

    ``token`` is the fencing token of the current lease: ack/retry/fail/heartbeat
    succeed only while it is current (a worker whose lease was reclaimed gets False).
    """

    __slots__ = _FIELDS + ("_queue", "_payload")

    id: int
    queue: str
    state: str
    payload_json: str
    meta_json: Optional[str]
    priority: int
    attempts: int
    max_attempts: int
    token: int
    run_at: int
    created_at: int
    lease_until: int
    expires_at: int
    unique_key: Optional[str]
    worker: Optional[str]
    last_error: Optional[str]
    reason: Optional[str]
    died_at: int

    def __init__(self, q: "Queue", row: tuple) -> None:
        (self.id, self.queue, self.state, self.payload_json, self.meta_json, self.priority,
         self.attempts, self.max_attempts, self.token, self.run_at, self.created_at,
         self.lease_until, self.expires_at, self.unique_key, self.worker, self.last_error,
         self.reason, self.died_at) = row
        self._queue = q
        self._payload = _UNSET

    @property
    def payload(self) -> Any:
        """The payload, decoded from JSON (once)."""
        p = self._payload
        if p is _UNSET:
            p = self._payload = loads(self.payload_json)
        return p

    @property
    def meta(self) -> Optional[Dict[str, Any]]:
        return loads(self.meta_json)

    def ack(self, *, tx: Optional["Transaction"] = None) -> bool:
        """Done: the job is removed. False if this lease is no longer current."""
        return self._queue.db._hx(tx).ack(self.id, self.token)

    def retry(self, delay: Optional[Duration] = None, *, error: Optional[str] = None) -> bool:
        """Back to pending after ``delay`` (None: the core's exponential backoff), or dead
        ('max_attempts') when attempts are spent. False if the lease is no longer current."""
        return self._queue.retry(self, delay, error=error)

    def fail(self, error: Optional[str] = None) -> bool:
        """Dead now with reason 'failed'. False if the lease is no longer current."""
        return self._queue.fail(self, error=error)

    def heartbeat(self, extend: Duration = _DEFAULT_VISIBILITY) -> bool:
        """Extends the lease to now + ``extend``. False if the lease is no longer current."""
        return self._queue.heartbeat(self, extend)

    def cancel(self) -> bool:
        return self._queue.cancel(self.id)

    def as_dict(self) -> Dict[str, Any]:
        d = {k: getattr(self, k) for k in _FIELDS if k not in ("payload_json", "meta_json")}
        d["payload"] = self.payload
        d["meta"] = self.meta
        return d

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and self.id == other.id and self.token == other.token

    def __hash__(self) -> int:
        return hash((self.id, self.token))

    def __repr__(self) -> str:
        return "<tocsin.Job %d %s/%s attempts=%d/%d>" % (self.id, self.queue, self.state,
                                                        self.attempts, self.max_attempts)


JobSpec = Union[Any, Dict[str, Any]]


def _task_name(fn: Any, name: Optional[str]) -> str:
    """The name a task registers under: ``name``, else the function's qualified name."""
    if not callable(fn):
        raise InvalidArgument("a task must be a function (a callable), not %s" % type(fn).__name__)
    if name is None:
        return "%s.%s" % (getattr(fn, "__module__", None) or "__main__",
                          getattr(fn, "__qualname__", None) or type(fn).__qualname__)
    if not isinstance(name, str):
        raise InvalidArgument("task name must be a str, not %s" % type(name).__name__)
    return name  # checked (empty, too long, NUL) by the core


def _id_token(job: Union[Job, int], token: Optional[int]) -> Tuple[int, int]:
    if isinstance(job, Job):
        if token is not None and token != job.token:
            raise InvalidArgument("give a Job or (id, token), not a Job and another token")
        return job.id, job.token
    if token is None:
        raise InvalidArgument("token is required with a job id (or pass the Job)")
    return job, token


class Queue:
    """A named queue of a Database (``db.queue(name)``)."""

    def __init__(self, db: "Database", name: str) -> None:
        self.db = db
        self.name = name
        self._h = db._h
        self._tasks: Dict[str, Any] = {}
        self._periodic: List[Any] = []

    def __repr__(self) -> str:
        return "<tocsin.Queue %r>" % self.name

    # ---- enqueue ----
    def _spec(self, payload: Any, priority: int, delay: Optional[Duration],
              run_at: Optional[Instant], max_attempts: Optional[int], expires: Optional[Duration],
              unique_key: Optional[str], meta: Optional[dict]) -> tuple:
        priority = as_int(priority, "priority")
        if delay is not None and run_at is not None:
            raise InvalidArgument("give delay or run_at, not both")
        if max_attempts is None:
            maxa = 0
        else:
            maxa = as_int(max_attempts, "max_attempts", 1, 1000000)
        if unique_key is not None and not isinstance(unique_key, str):
            raise InvalidArgument("unique_key must be a str")
        return (self.name, dumps(payload), priority, duration_ms(delay, "delay"),
                instant_ms(run_at, "run_at"), maxa,
                duration_ms(expires, "expires", allow_zero=False) if expires is not None else 0,
                unique_key, meta_json(meta))

    def enqueue(self, payload: Any = None, *, priority: int = 0, delay: Optional[Duration] = None,
                run_at: Optional[Instant] = None, max_attempts: Optional[int] = None,
                expires: Optional[Duration] = None, unique_key: Optional[str] = None,
                meta: Optional[dict] = None, tx: Optional["Transaction"] = None) -> int:
        """Enqueues a job and returns its id.

        ``payload``: any JSON-serialisable value. ``priority``: higher runs first.
        ``delay`` (seconds or timedelta) or ``run_at`` (datetime or epoch seconds): not
        before then. ``max_attempts`` (default 3): claims before the job goes dead.
        ``expires`` (seconds or timedelta): dead ('expired') if not claimed within it.
        ``unique_key``: if a live job of this queue has it, nothing is written and that
        job's id is returned. ``meta``: a dict of headers kept beside the payload.
        ``tx``: the transaction it joins (rolled back with it).
        """
        h = self.db._hx(tx)
        if (priority == 0 and type(priority) is int and delay is None and run_at is None and
                max_attempts is None and expires is None and unique_key is None and meta is None):
            return h.enqueue(self.name, dumps(payload))
        return h.enqueue(*self._spec(payload, priority, delay, run_at, max_attempts,
                                           expires, unique_key, meta))

    def enqueue_many(self, jobs: Iterable[JobSpec], *, options: bool = False,
                     tx: Optional["Transaction"] = None) -> List[int]:
        """Enqueues several jobs atomically (all or none); returns their ids.

        Each item is a payload (any JSON value, dicts included: nothing is guessed).
        With ``options=True`` each item is instead a dict ``{"payload": ..., "priority":
        ..., "delay": ..., ...}`` of enqueue's keyword arguments."""
        if isinstance(jobs, (str, bytes, bytearray, dict)):  # not its characters, nor its keys
            raise InvalidArgument("enqueue_many takes a list of jobs, not a %s (write [%r])"
                                  % (type(jobs).__name__, jobs))
        h = self.db._hx(tx)
        jobs = list(_items(jobs, "jobs", "payloads (or of option dicts with options=True)"))
        if not options:
            return h.enqueue_many([(self.name, t) for t in dumps_each(jobs, "job")])
        specs = []
        for i, item in enumerate(jobs):
            if not isinstance(item, dict) or "payload" not in item:
                raise InvalidArgument('job %d: with options=True each item is a dict with a "payload"' % i)
            opts = dict(item)
            payload = opts.pop("payload")
            unknown = set(opts) - {"priority", "delay", "run_at", "max_attempts", "expires",
                                   "unique_key", "meta"}
            if unknown:
                raise InvalidArgument("job %d: unknown option(s) %s" % (i, ", ".join(sorted(unknown))))
            try:
                specs.append(self._spec(payload, opts.get("priority", 0), opts.get("delay"),
                                        opts.get("run_at"), opts.get("max_attempts"),
                                        opts.get("expires"), opts.get("unique_key"),
                                        opts.get("meta")))
            except InvalidArgument as e:
                raise at_item(e, "job", i, len(jobs)) from None
        return h.enqueue_many(specs)

    # ---- claim and leases ----
    def claim(self, worker_id: str, *, visibility: Duration = _DEFAULT_VISIBILITY,
              tx: Optional["Transaction"] = None) -> Optional[Job]:
        """Claims the next claimable job for ``worker_id`` (a lease of ``visibility``,
        default 30 s), or None. Lapsed leases are reclaimed first. In ``tx`` (or the
        transaction open in this context) the claim commits with it: claimed and acked
        in one transaction, a job is gone at that commit."""
        vis = 30000 if visibility is _DEFAULT_VISIBILITY else duration_ms(visibility, "visibility", allow_zero=False)
        rows = self.db._hx(tx).claim(self.name, worker_id, 1, vis)
        return Job(self, rows[0]) if rows else None

    def claim_batch(self, n: int, worker_id: str, *, visibility: Duration = _DEFAULT_VISIBILITY,
                    tx: Optional["Transaction"] = None) -> List[Job]:
        """Claims up to ``n`` jobs (priority DESC, run_at, id); ``tx`` as for claim()."""
        n = as_int(n, "n", 1)
        rows = self.db._hx(tx).claim(self.name, worker_id, n, duration_ms(visibility, "visibility", allow_zero=False))
        return [Job(self, r) for r in rows]

    def ack(self, job: Union[Job, int], token: Optional[int] = None, *,
            tx: Optional["Transaction"] = None) -> bool:
        """Acks a job (a Job, or its id and token): done and removed. Joins ``tx`` so the
        business write and the ack commit together. False if the lease is not current."""
        h = self.db._hx(tx)
        if token is None and type(job) is Job:
            return h.ack(job.id, job.token)
        return h.ack(*_id_token(job, token))

    def ack_batch(self, jobs: Sequence[Union[Job, Tuple[int, int]]], *,
                  tx: Optional["Transaction"] = None) -> int:
        """Acks several jobs (Jobs or (id, token) pairs) in one transaction; returns how
        many leases held."""
        h = self.db._hx(tx)
        ids, tokens = [], []
        if isinstance(jobs, (str, bytes, bytearray, dict)):
            raise InvalidArgument("ack_batch takes a list of Jobs or (id, token) pairs, not a %s"
                                  % type(jobs).__name__)
        for n, j in enumerate(_items(jobs, "jobs", "Jobs or (id, token) pairs")):
            if isinstance(j, Job):
                ids.append(j.id)
                tokens.append(j.token)
            elif (isinstance(j, (tuple, list)) and len(j) == 2 and
                  all(is_int_like(v) for v in j)):
                ids.append(as_int(j[0], "the job id of jobs[%d]" % n, -2 ** 63, 2 ** 63 - 1))
                tokens.append(as_int(j[1], "the token of jobs[%d]" % n, -2 ** 63, 2 ** 63 - 1))
            else:
                raise InvalidArgument("ack_batch: item %d must be a Job or an (id, token) pair of "
                                      "integers, not %r" % (n, j))
        return h.ack_batch(ids, tokens)

    def retry(self, job: Union[Job, int], delay: Optional[Duration] = None, *,
              token: Optional[int] = None, error: Optional[str] = None) -> bool:
        """Back to pending after ``delay`` seconds (None: exponential backoff with jitter)."""
        jid, tok = _id_token(job, token)
        d = -1 if delay is None else duration_ms(delay, "delay")
        return self.db._hx().retry(jid, tok, d, error)

    def fail(self, job: Union[Job, int], *, token: Optional[int] = None,
             error: Optional[str] = None) -> bool:
        jid, tok = _id_token(job, token)
        return self.db._hx().fail(jid, tok, error)

    def heartbeat(self, job: Union[Job, int], extend: Duration = _DEFAULT_VISIBILITY, *,
                  token: Optional[int] = None) -> bool:
        jid, tok = _id_token(job, token)
        return self.db._hx().heartbeat(jid, tok, duration_ms(extend, "extend", allow_zero=False))

    def cancel(self, job_id: Union[Job, int]) -> bool:
        """Cancels a live job (it goes dead, reason 'cancelled'); False if none is live."""
        if isinstance(job_id, Job):
            job_id = job_id.id
        return self.db._hx().cancel(job_id)

    def get(self, job_id: int) -> Optional[Job]:
        """The job with that id, live or dead; None if unknown or acked."""
        row = self.db._hx().get(job_id)
        return Job(self.db.queue(row[1]), row) if row else None

    # ---- queue state ----
    def pause(self) -> None:
        self.db._hx().pause(self.name)

    def resume(self) -> None:
        self.db._hx().resume(self.name)

    @property
    def paused(self) -> bool:
        return self.db._hx().is_paused(self.name)

    def stats(self) -> Dict[str, Any]:
        """{"queue", "pending", "scheduled", "processing", "dead", "oldest_pending_age_ms",
        "paused"}."""
        return json.loads(self.db._hx().stats(self.name))

    def next_deadline(self) -> Optional[int]:
        """When (ms since epoch) something here next needs a worker, None if nothing will."""
        return self.db._hx().next_deadline((self.name,))

    # ---- waiting ----
    def jobs(self, worker_id: str, *, visibility: Duration = _DEFAULT_VISIBILITY, batch: int = 1,
             also: Sequence[str] = ()) -> "JobIterator":
        """Iterates over jobs as they become claimable (sync or async for); ``also``
        adds more queues to watch (this one is claimed first)."""
        if isinstance(also, (str, bytes)):  # not its characters
            raise InvalidArgument("also must be a list of queue names, not a %s (write [%r])"
                                  % (type(also).__name__, also))
        return JobIterator(self, worker_id, visibility, batch,
                           (self.name,) + tuple(_items(also, "also", "queue names")))

    def wait(self, timeout: Optional[Duration] = None) -> bool:
        """Blocks (GIL released, on the wake engine) until a job of this queue is
        claimable (True) or ``timeout`` passes (False). Uses the handle: other threads'
        calls on this Database wait meanwhile; use jobs() for a worker loop."""
        deadline = -1 if timeout is None else self.db.now() + duration_ms(timeout, "timeout")
        return self._h.queue_wait((self.name,), deadline)

    # ---- tasks ----
    def task(self, fn: Optional[Callable[..., Any]] = None, *, name: Optional[str] = None,
             retries: int = 2, backoff: Optional[Duration] = None, timeout: Optional[Duration] = None,
             result_ttl: Optional[Duration] = 86400.0, process: bool = False) -> Any:
        """Decorator: ``@queue.task`` or ``@queue.task(name=..., retries=..., backoff=...,
        timeout=..., process=...)``. Calling the decorated function enqueues a call (the
        task envelope, docs/sql.md ("Task envelope")) and returns a TaskHandle
        (``.get(timeout)``, ``await .result(timeout)``); arguments that do not fit the
        function's signature are refused here. ``retries``: attempts after the first;
        ``backoff``: base delay of the core's exponential backoff (None: 1 s);
        ``timeout``: a run longer than this is stopped and fails the attempt (async:
        cancelled; ``process=True``: the child process is killed; a thread cannot be
        stopped, only flagged); ``result_ttl``: how long results are kept (None:
        forever). Nothing is written at import time."""
        from .tasks import Task

        def register(f: Callable[..., Any]) -> Any:
            task_name = _task_name(f, name)
            t = Task(self, f, task_name, retries, backoff, timeout, result_ttl, process)
            self._tasks[task_name] = t
            return t

        return register(fn) if fn is not None else register

    def periodic(self, cron: str, *, name: Optional[str] = None, args: Sequence[Any] = (),
                 kwargs: Optional[Dict[str, Any]] = None, catch_up: str = "once",
                 local_time: bool = False, retries: int = 0, timeout: Optional[Duration] = None,
                 result_ttl: Optional[Duration] = 3600.0, process: bool = False) -> Any:
        """Decorator: runs the function on a cron schedule (5 or 6 fields, @macros,
        "@every 5m"). The schedule is written when a worker starts (never at import);
        then exactly one scheduler (the leader) enqueues each boundary."""
        from .coord import cron_next
        from .tasks import Task
        cron_next(cron)  # a bad expression fails at import, naming the field
        if not isinstance(args, (list, tuple)):  # not a str's characters
            raise InvalidArgument("args must be a list or tuple of the task's positional arguments, "
                                  "not %s" % type(args).__name__)
        if catch_up not in ("once", "all"):  # at import too, not when a worker starts
            raise InvalidArgument('catch_up must be "once" or "all", not %r' % (catch_up,))

        def register(f: Callable[..., Any]) -> Any:
            task_name = _task_name(f, name)
            t = Task(self, f, task_name, retries, None, timeout, result_ttl, process)
            t._check_args(args, kwargs)
            self._tasks[task_name] = t
            self._periodic.append(dict(name="periodic:" + task_name, cron=cron, task=t,
                                       args=tuple(args), kwargs=dict(kwargs or {}),
                                       catch_up=catch_up, local_time=local_time,
                                       max_attempts=retries + 1))
            return t

        return register

    def register_periodic(self) -> int:
        """Writes this queue's periodic schedules (upserts; done by workers at start)."""
        for spec in self._periodic:
            spec = dict(spec)
            self.db.schedule(spec.pop("name"), spec.pop("cron"), **spec)
        return len(self._periodic)

    @property
    def tasks(self) -> Dict[str, Any]:
        """The tasks registered on this queue in this process, by name."""
        return dict(self._tasks)

    def call(self, task_name: str, *args: Any, kwargs: Optional[Dict[str, Any]] = None,
             priority: int = 0, delay: Optional[Duration] = None, run_at: Optional[Instant] = None,
             max_attempts: Optional[int] = None, expires: Optional[Duration] = None,
             unique_key: Optional[str] = None, meta: Optional[dict] = None,
             result_ttl: Optional[Duration] = None, timeout: Optional[Duration] = None,
             tx: Optional["Transaction"] = None, **unknown: Any) -> Any:
        """Enqueues a call of a task by name (registered by any runtime); returns a
        TaskHandle. ``args`` are the task's positional arguments, ``kwargs=`` (a dict)
        its keyword arguments; the other keywords are the job options of enqueue
        (``priority``, ``delay`` or ``run_at``, ``max_attempts``, ``expires``,
        ``unique_key``, ``meta``, ``tx``), as Ruby's ``q.call(name, *args, kwargs:,
        **opts)``, Node's ``queue.call(name, args, opts)``, Go's ``CallOptions`` and
        ``tocsin.call`` take them. ``result_ttl``: how long the result is kept (None:
        the core's default, one day); ``timeout``: a longer run fails the attempt."""
        from .tasks import TaskHandle
        if unknown:
            raise InvalidArgument("call(%r): unknown option(s) %s (the task's keyword arguments go in "
                                  "kwargs={...})" % (task_name, ", ".join(sorted(unknown))))
        if kwargs is not None and not isinstance(kwargs, dict):
            raise InvalidArgument("kwargs must be a dict of the task's keyword arguments, got %s"
                                  % type(kwargs).__name__)
        spec = self._spec(None, priority, delay, run_at, max_attempts, expires, unique_key, meta)
        ttl = 0 if result_ttl is None else duration_ms(result_ttl, "result_ttl", allow_zero=False)
        tmo = 0 if timeout is None else duration_ms(timeout, "timeout", allow_zero=False)
        jid = self.db._hx(tx).task_enqueue(self.name, task_name, dumps(list(args), "args"),
                                           dumps(dict(kwargs or {}), "kwargs"), ttl, tmo, *spec[2:])
        return TaskHandle(self, jid)

    # ---- dead letters ----
    def dead_letters(self, *, after_id: int = 0, limit: int = 100) -> List[Job]:
        """Dead jobs of this queue, oldest first, ids > after_id."""
        return [Job(self, r) for r in self.db._hx().dead_list(self.name, after_id, limit)]

    def requeue(self, job_id: Union[Job, int]) -> bool:
        """Moves a dead job back to pending (same id, max_attempts more attempts: the attempt count goes on, so tokens never repeat)."""
        if isinstance(job_id, Job):
            job_id = job_id.id
        return self.db._hx().dead_requeue(job_id)

    def purge(self, *, before: Optional[Instant] = None) -> int:
        """Deletes dead jobs of this queue (that died before ``before``, if given)."""
        return self.db._hx().dead_purge(self.name, instant_ms(before, "before"))


class JobIterator:
    """``for job in queue.jobs(worker_id)`` / ``async for job in queue.jobs(worker_id)``.

    Claims when something is claimable and otherwise waits on the core's wake
    engine (tocsin_queue_wait: read-only checks between wakes, sleeping until the
    next run_at or lease expiry; never a polling loop). The sync form waits in C
    with the GIL released, on a private connection of its own (the Database stays
    usable from other threads); the async form watches the subscription's
    descriptor with loop.add_reader and never blocks the event loop.
    stop() (any thread) ends the iteration after the current wait.
    """

    def __init__(self, queue: "Queue", worker_id: str, visibility: Duration, batch: int,
                 queues: Sequence[str]) -> None:
        from ._tocsin import Handle, Sub
        batch = as_int(batch, "batch", 1)
        if not isinstance(worker_id, str):  # refused now, not at the first claim
            raise InvalidArgument("worker_id must be a str, not %s" % type(worker_id).__name__)
        self.queue = queue
        self.db = queue.db
        self.worker_id = worker_id
        self.visibility_ms = duration_ms(visibility, "visibility", allow_zero=False)
        self.batch = batch
        self.queues = tuple(queues)
        for name in self.queues:
            if not isinstance(name, str):
                raise InvalidArgument("queue names must be str")
        self._buf: List[Job] = []
        self._stopped = False
        self._sub = Sub(self.db._h)
        self._Handle = Handle
        self._waiter: Any = None
        self._reader: Any = None
        self.db._track(self)

    def _claim(self) -> None:
        h = self.db._h
        for name in self.queues:
            rows = h.claim(name, self.worker_id, self.batch, self.visibility_ms)
            if rows:
                q = self.db.queue(name)
                self._buf.extend(Job(q, r) for r in rows)
                return

    def stop(self) -> None:
        """Ends the iteration (thread-safe): a blocked wait returns at once."""
        self._stopped = True
        self._sub.poke()

    def close(self) -> None:
        """Ends the iteration. Jobs claimed in a batch and not handed out yet are handed
        back (pending again at once, no attempt consumed), not left to their lease."""
        self._stopped = True
        buf, self._buf = self._buf, []
        for job in buf:
            try:
                self.db._h.hand_back(job.id, job.token, 0)
            except Error:  # closed database: the lease lapses and the job is claimed again
                break
        self._sub.close()
        if self._reader is not None:  # after: a wait it ends finds the iteration stopped
            self._reader.close()
        if self._waiter is not None:
            self._waiter.close()

    def __del__(self) -> None:  # `for job in queue.jobs(...): break` drops it here
        try:
            if getattr(self, "_buf", None) or not getattr(self, "_stopped", True):
                self.close()
        except Exception:
            pass

    def __iter__(self) -> "JobIterator":
        return self

    def __next__(self) -> Job:
        while not self._buf:
            if self._stopped:
                self.close()
                raise StopIteration
            self._claim()
            if self._buf:
                break
            if self._waiter is None:
                self._waiter = self._Handle(self.db.path, 0, 0, False)
            self._waiter.queue_wait(self.queues, -1, self._sub)
        return self._buf.pop(0)

    def __aiter__(self) -> "JobIterator":
        return self

    async def __anext__(self) -> Job:
        h = self.db._h
        while not self._buf:
            if self._stopped:
                self.close()
                raise StopAsyncIteration
            self._claim()
            if self._buf:
                break
            # read-only check (drains the wake first): claimable now?
            if h.queue_wait(self.queues, 0, self._sub):
                continue
            deadline = h.next_deadline(self.queues)
            timeout = None if deadline is None else max(0.0, (deadline - h.now()) / 1000.0)
            if self._reader is None:
                from .wake import Reader
                self._reader = Reader(self._sub.fileno())
            await self._reader.wait(None if timeout is None else min(timeout, 1.0))
        return self._buf.pop(0)

    def __enter__(self) -> "JobIterator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
