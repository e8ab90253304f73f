"""Results, locks, rate limits and schedules: thin objects over the core's coordination API."""
from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, NamedTuple, Optional, Tuple

from . import _tocsin
from ._tocsin import Closed, InvalidArgument, Timeout
from ._util import Duration, Instant, as_bool, as_int, duration_ms, instant_ms, lease_ms, loads
from .wake import MAX_WAIT_MS, Wake

if TYPE_CHECKING:
    from .db import Database

__all__ = ["Result", "Lock", "RateLimit", "RateDecision", "Schedule", "default_owner", "cron_next"]


def default_owner() -> str:
    """An owner id unique to this process and call: host:pid:random (the core's)."""
    return _tocsin.owner_id()


class Result(NamedTuple):
    """A stored job result: a JSON value, or a task error recorded as data."""

    job_id: int
    is_error: bool
    value: Any            # decoded JSON (None for an error or a stored null)
    error_type: Optional[str]
    error_message: Optional[str]
    created_at: int       # ms since epoch
    expires_at: int       # ms since epoch, 0: never
    error_trace: Optional[str] = None  # the runtime's traceback of an error, if recorded

    @classmethod
    def _from_row(cls, row: tuple) -> "Result":
        job_id, is_error, value, etype, emsg, created, expires, trace = row
        return cls(job_id, is_error, None if is_error else loads(value), etype, emsg, created,
                   expires, trace)


def wait_result(db: "Database", job_id: int, timeout: Optional[Duration]) -> Result:
    """Blocks (GIL released) until job ``job_id`` has a result; Timeout at the deadline.
    A job that died without a result (for instance its worker crashed on the last
    attempt) yields an error result of type "JobDead"."""
    limit = None if timeout is None else duration_ms(timeout, "timeout") / 1000
    end = None if limit is None else time.monotonic() + limit
    sub = db._track(_tocsin.Sub(db._h))  # subscribe first, then read: no commit is missed
    try:
        while True:
            r = _check_result(db, job_id)
            if r is not None:
                return r
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return _final_check(db, job_id, limit)
            sub.wait(-1 if left is None else min(max(1, int(left * 1000)), MAX_WAIT_MS))
    finally:
        sub.close()


async def wait_result_async(db: "Database", job_id: int, timeout: Optional[Duration]) -> Result:
    limit = None if timeout is None else duration_ms(timeout, "timeout") / 1000
    loop = asyncio.get_running_loop()
    end = None if limit is None else loop.time() + limit
    wake = Wake(db)  # db.close() ends its wait (then Closed)
    try:
        while True:
            r = _check_result(db, job_id)
            if r is not None:
                return r
            left = None if end is None else end - loop.time()
            if left is not None and left <= 0:
                return _final_check(db, job_id, limit)
            await wake.wait_async(left)
    finally:
        wake.close()


def _final_check(db: "Database", job_id: int, limit: Optional[float]) -> Result:
    """At the deadline: the core's result wait, which says why it timed out (the job was
    never claimed, is running, or is retrying)."""
    try:
        return Result._from_row(db._h.result_wait(job_id))
    except Timeout as e:
        raise Timeout("no result for job %d within %.3f s: %s" % (job_id, limit or 0, e)) from None


def _check_result(db: "Database", job_id: int) -> Optional[Result]:
    """The core's outcome check (tocsin_result_check): the result, a "JobDead" error for
    a job that died without one, or None while it runs."""
    row = db._h.result_check(job_id)
    return None if row is None else Result._from_row(row)

def _not_str(what: str, value: Any) -> None:
    raise InvalidArgument("%s must be a str, not %s" % (what, type(value).__name__))


class Lock:
    """A named TTL lease with a fencing token (``db.lock(name, ttl=...)``).

    ``with db.lock("report", ttl=60) as lock:`` waits until it is acquired (wake engine,
    no polling loop) and releases it at the end; ``async with`` (``acquire_async``)
    waits without blocking the event loop. ``lock.token`` grows with every new
    holder: hand it to resources that can refuse a stale holder. Renew long work with
    ``lock.renew()``; it returns False once the lease was taken over."""

    def __init__(self, db: "Database", name: str, ttl: Duration = 30.0, owner: Optional[str] = None) -> None:
        self.db = db
        if owner is not None and not isinstance(owner, str):
            raise InvalidArgument("owner must be a str, not %s" % type(owner).__name__)
        db._h.check_name("lock name", name) if isinstance(name, str) else _not_str("lock name", name)
        self.name = name
        self.ttl_ms = lease_ms(ttl, "ttl")
        self.owner = default_owner() if owner is None else owner
        db._h.check_name("lock owner", self.owner)
        self.token = 0
        self.until = 0

    def try_acquire(self) -> bool:
        self.token, self.until = self.db._h.lock_acquire(self.name, self.owner, self.ttl_ms)
        return self.token > 0

    def acquire(self, blocking: bool = True, timeout: Optional[Duration] = None) -> bool:
        """Acquires the lock; with blocking=True waits up to ``timeout`` (None: no bound)
        for the holder to release it or for its lease to lapse (GIL released)."""
        limit = None if timeout is None else duration_ms(timeout, "timeout") / 1000
        end = None if limit is None else time.monotonic() + limit
        if self.try_acquire() or not blocking:
            return self.token > 0
        sub = self.db._track(_tocsin.Sub(self.db._h))  # db.close() ends the wait
        try:
            while True:
                # a read-only check while another owner holds it (an attempt only when it
                # is free): no commit of its own that would wake this very wait at once
                self.token, self.until = self.db._h.lock_wait(self.name, self.owner, self.ttl_ms,
                                                              0, sub)
                if self.token > 0:
                    return True
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                if sub.closed:
                    raise Closed("the database was closed while waiting for lock %r" % self.name)
                sub.wait(self._wait_ms(None if left is None else left * 1000))
        finally:
            sub.close()

    def _wait_ms(self, left_ms: Optional[float]) -> int:
        """How long to sleep before the next check: until the holder's lease ends (or a
        commit, such as a release, wakes the wait), at most left_ms."""
        _, _, lease_end = self.db._h.lock_holder(self.name)
        lapse = max(1, lease_end - self.db.now()) if lease_end else 1
        wait = lapse if left_ms is None else min(lapse, max(1, int(left_ms)))
        return int(min(wait, MAX_WAIT_MS))

    async def acquire_async(self, timeout: Optional[Duration] = None) -> bool:
        """acquire() for asyncio: waits for the holder to release the lock or for its
        lease to lapse without blocking the event loop (``async with db.lock(...)``)."""
        limit = None if timeout is None else duration_ms(timeout, "timeout") / 1000
        loop = asyncio.get_running_loop()
        end = None if limit is None else loop.time() + limit
        if self.try_acquire():
            return True
        wake = Wake(self.db)  # db.close() ends its wait
        try:
            while True:
                # one read-only check (an attempt only when the lock is free): no commit
                # of its own, so the wait below sleeps until a release or the lease end
                self.token, self.until = self.db._h.lock_wait(self.name, self.owner, self.ttl_ms,
                                                              0, wake._s)
                if self.token > 0:
                    return True
                left = None if end is None else end - loop.time()
                if left is not None and left <= 0:
                    return False
                await wake.wait_async(self._wait_ms(None if left is None else left * 1000) / 1000)
        finally:
            wake.close()

    async def __aenter__(self) -> "Lock":
        await self.acquire_async()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.release()

    def renew(self, ttl: Optional[Duration] = None) -> bool:
        ms = self.ttl_ms if ttl is None else lease_ms(ttl, "ttl")
        if not self.token:  # (the core's refusal names a token the caller never gave)
            raise InvalidArgument("lock %r is not held by this Lock (acquire it first)" % (self.name,))
        ok = self.db._h.lock_renew(self.name, self.owner, self.token, ms)
        return ok

    def release(self) -> bool:
        ok = self.db._h.lock_release(self.name, self.owner, self.token) if self.token else False
        self.token = 0
        return ok

    @property
    def held(self) -> bool:
        owner, token, until = self.db._h.lock_holder(self.name)
        return owner == self.owner and token == self.token and self.token > 0

    def __enter__(self) -> "Lock":
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


class RateDecision(NamedTuple):
    allowed: bool
    retry_after: float  # seconds until a call would be admitted (0 when allowed)
    remaining: int      # calls still admissible right now


class RateLimit:
    """``db.rate_limit(name, limit, per)``: at most ``limit`` admissions in any window of
    ``per`` (seconds or timedelta), sliding (no 2x burst at window edges)."""

    def __init__(self, db: "Database", name: str, limit: int, per: Duration) -> None:
        limit = as_int(limit, "limit")
        db._h.check_name("rate limit name", name) if isinstance(name, str) else _not_str("rate limit name", name)
        self.db = db
        self.name = name
        self.limit = limit
        self.per_ms = lease_ms(per, "per")

    def try_acquire(self) -> RateDecision:
        allowed, after, remaining = self.db._h.ratelimit_try(self.name, self.limit, self.per_ms)
        return RateDecision(allowed, after / 1000.0, remaining)

    def reset(self) -> int:
        return self.db._h.ratelimit_reset(self.name)


_CATCH_UP = {"once": _tocsin.CATCHUP_ONCE, "all": _tocsin.CATCHUP_ALL}


class Schedule(NamedTuple):
    name: str
    cron: str
    queue: str
    payload: Any
    meta: Optional[Dict[str, Any]]
    priority: int
    max_attempts: int
    job_expires_ms: int
    catch_up: str          # "once" or "all"
    max_catch_up: int
    local_time: bool
    paused: bool
    next_fire: int         # ms since epoch; -1: never fires again
    last_fire: int
    last_job_id: int
    fired_count: int
    skipped_count: int
    created_at: int
    updated_at: int

    @classmethod
    def _from_row(cls, r: tuple) -> "Schedule":
        return cls(r[0], r[1], r[2], loads(r[3]), loads(r[4]), r[5], r[6], r[7],
                   "all" if r[8] == _tocsin.CATCHUP_ALL else "once", *r[9:])


def schedule_opts(priority: int = 0, max_attempts: Optional[int] = None,
                  job_expires: Optional[Duration] = None, catch_up: str = "once",
                  max_catch_up: Optional[int] = None, local_time: bool = False,
                  meta: Optional[dict] = None) -> tuple:
    from ._util import meta_json
    if not isinstance(catch_up, str) or catch_up not in _CATCH_UP:  # (a list is unhashable)
        raise InvalidArgument('catch_up must be "once" or "all", not %r' % (catch_up,))
    as_bool(local_time, "local_time")  # "no" is not False
    priority, max_attempts, max_catch_up = (
        None if v is None else as_int(v, what)
        for v, what in ((priority, "priority"), (max_attempts, "max_attempts"), (max_catch_up, "max_catch_up")))
    if max_attempts is not None and max_attempts < 1:
        raise InvalidArgument("max_attempts must be >= 1")
    if max_catch_up is not None and max_catch_up < 1:
        raise InvalidArgument("max_catch_up must be >= 1")
    return (priority, max_attempts or 0,
            0 if job_expires is None else duration_ms(job_expires, "job_expires", allow_zero=False),
            _CATCH_UP[catch_up], max_catch_up or 0, as_bool(local_time, "local_time"), meta_json(meta))


# schedule option name -> the core's field flag (tocsin_schedule_opts.fields)
_SCHEDULE_FIELDS = {
    "priority": _tocsin.SCHEDULE_PRIORITY, "max_attempts": _tocsin.SCHEDULE_MAX_ATTEMPTS,
    "job_expires": _tocsin.SCHEDULE_JOB_EXPIRES, "catch_up": _tocsin.SCHEDULE_CATCH_UP,
    "max_catch_up": _tocsin.SCHEDULE_MAX_CATCH_UP, "local_time": _tocsin.SCHEDULE_LOCAL_TIME,
    "meta": _tocsin.SCHEDULE_META,
}


def schedule_changes(**changes: Any) -> Tuple[Optional[tuple], int]:
    """(options tuple, field flags) for an update: only the options named here change;
    the core keeps every other stored value (field presence lives in the core)."""
    if not changes:
        return None, 0
    fields = 0
    for key in changes:
        if key not in _SCHEDULE_FIELDS:
            raise TypeError("update_schedule() got an unexpected keyword argument %r" % key)
        fields |= _SCHEDULE_FIELDS[key]
    return schedule_opts(**changes), fields


def cron_next(expr: str, after: Optional[Instant] = None, *, local_time: bool = False) -> Optional[int]:
    """The first fire time (ms since epoch) of a cron expression strictly after ``after``
    (default: now); None when it never fires again. Raises InvalidArgument naming the bad
    field."""
    after_ms = int(time.time() * 1000) if after is None else instant_ms(after, "after")
    return _tocsin.cron_next(expr, after_ms, as_bool(local_time, "local_time"))
