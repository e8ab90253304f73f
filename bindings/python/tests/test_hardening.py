"""Regressions: bad values, waits, stop and BaseException in tasks, iterators' batches."""
import asyncio
import sqlite3
import threading
import time

import pytest

import tocsin

from conftest import count


def test_unconvertible_values_raise_invalid_argument_and_write_nothing(db):
    q = db.queue("q")
    for call in (lambda: q.enqueue(1, priority=10 ** 30),
                 lambda: q.enqueue(1, unique_key="a\x00b"),
                 lambda: q.enqueue("lone \ud800"),
                 lambda: q.enqueue(1, delay=10 ** 400),
                 lambda: q.enqueue(1, delay=1e300),
                 lambda: q.enqueue(1, run_at=1e300),
                 lambda: q.claim("w\x00"),
                 lambda: q.get(10 ** 30),
                 lambda: db.notify("c\x00", 1),
                 lambda: db.stream("s").publish_many(["\ud800"]),
                 lambda: db.set_time(10 ** 30),
                 lambda: db.set_max_payload(True),
                 lambda: db.lock("l", ttl=1e300),
                 lambda: tocsin.open(db.path, busy_timeout=1e10)):
        with pytest.raises(tocsin.InvalidArgument):
            call()
    assert q.stats()["pending"] == 0
    with pytest.raises(tocsin.InvalidArgument, match="^unique_key must not contain a NUL character"):
        q.enqueue(1, unique_key="a\x00b")  # named (it said "enqueue(): embedded null character")
    with pytest.raises(tocsin.InvalidArgument, match="queue name must be a str"):
        db.queue(["x"])


def test_a_string_is_not_a_list_of_queues(db):
    with pytest.raises(tocsin.InvalidArgument, match=r"\['emails'\]"):
        tocsin.Worker(db, "emails")
    with pytest.raises(tocsin.InvalidArgument):
        db.queue("q").jobs("w", also="ab")


def test_waits_longer_than_an_int_of_ms(db):
    holder = db.lock("L", ttl=40 * 86400, owner="a")
    assert holder.try_acquire()
    other = db.lock("L", owner="b")
    assert other.acquire(timeout=0.05) is False  # the holder's lease end is > 2**31 ms away
    q = db.queue("q")
    jid = q.enqueue(1)
    threading.Timer(0.2, lambda: db.save_result(jid, 7)).start()
    assert db.wait_result(jid, timeout=40 * 86400).value == 7
    w = db.subscribe()
    threading.Timer(0.2, w.poke).start()
    assert w.wait(timeout=40 * 86400) is True
    w.close()


def test_closing_the_batch_iterator_hands_unreturned_jobs_back(db):
    q = db.queue("q")
    for i in range(5):
        q.enqueue(i, max_attempts=1)
    with q.jobs("w1", batch=5) as it:
        job = next(it)
        assert job.ack()
    assert q.stats()["processing"] == 0
    rest = q.claim_batch(10, "w2")
    assert sorted(j.payload for j in rest) == [1, 2, 3, 4]
    # handed back: no attempt consumed (the core grows max_attempts with attempts)
    assert all((j.attempts, j.max_attempts) == (2, 2) for j in rest)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_breaking_out_of_a_batch_loop_hands_unreturned_jobs_back(db, mode):
    q = db.queue("q")
    for i in range(5):
        q.enqueue(i, max_attempts=1)
    if mode == "sync":
        for job in q.jobs("w1", batch=5):
            assert job.ack()
            break
    else:
        async def first():
            async for job in q.jobs("w1", batch=5):
                assert job.ack()
                break
        asyncio.run(first())
    # the iterator was dropped with the loop: the four jobs it held are pending again
    assert q.stats()["processing"] == 0
    assert sorted(j.payload for j in q.claim_batch(10, "w2")) == [1, 2, 3, 4]


@pytest.mark.parametrize("kind", ["listen", "subscribe", "jobs", "wait_result", "wake"])
def test_close_ends_waits_of_other_threads(path, kind):
    db = tocsin.open(path)
    jid = db.queue("q").enqueue(1)
    waits = {
        "listen": lambda: list(db.listen("c")),
        "subscribe": lambda: list(db.stream("s").subscribe("c")),
        "jobs": lambda: list(db.queue("empty").jobs("w")),
        "wait_result": lambda: db.wait_result(jid),
        "wake": lambda: db.subscribe().wait(),
    }
    out = []

    def run():
        try:
            out.append(waits[kind]())
        except tocsin.Closed as e:
            out.append(e)

    th = threading.Thread(target=run)
    th.start()
    time.sleep(0.3)
    db.close()
    th.join(5)
    assert not th.is_alive(), "the wait outlived db.close()"
    assert out


_CLOSE_RACE = r"""
import random, sys, threading, time
import tocsin

path, rounds = sys.argv[1], int(sys.argv[2])
setup = tocsin.open(path)
setup.lock("held", ttl=600).acquire()  # held by another owner for every round
jid = setup.queue("q").enqueue(1)
kinds = {
    "lock": lambda db: db.lock("held", ttl=30, owner="waiter").acquire(timeout=30),
    "jobs": lambda db: next(iter(db.queue("empty").jobs("w")), None),
    "wait_result": lambda db: db.wait_result(jid, timeout=30),
    "listen": lambda db: next(iter(db.listen("c")), None),
    "subscribe": lambda db: next(iter(db.stream("s").subscribe("c")), None),
    "wake": lambda db: db.subscribe().wait(30),
}
rng = random.Random(7)
for i in range(rounds):
    # the lock wait (the one that crashed) for most rounds, then every kind in turn
    kind = "lock" if i < rounds * 2 // 3 else list(kinds)[i % len(kinds)]
    db = tocsin.open(path)
    def run():
        try:
            kinds[kind](db)
        except tocsin.Closed:
            pass
    th = threading.Thread(target=run)
    th.start()
    time.sleep(rng.random() * 0.012)  # before, as and after the wait blocks
    db.close()
    th.join(10)
    if th.is_alive():
        sys.exit("a %s wait outlived db.close()" % kind)
print("ok", rounds)
"""


def test_closing_the_database_while_another_thread_waits_never_crashes(path):
    # a wait used its subscription without the subscription's lock: db.close() in
    # another thread freed it under the wait (a segfault, one run in a few)
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", _CLOSE_RACE, path, "240"], capture_output=True,
                       text=True, timeout=240)
    assert r.returncode == 0, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert r.stdout.split() == ["ok", "240"]


def test_close_ends_another_threads_wait_for_the_write_lock(path):
    # the close waited for that call's busy timeout (here 60 s): now the call
    # raises Closed and the close returns
    import sqlite3
    import threading

    db = tocsin.open(path, busy_timeout=60)
    db.queue("q").enqueue(1)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    started, got = threading.Event(), []

    def enqueue():
        started.set()
        try:
            db.queue("q").enqueue(2)
            got.append("enqueued")
        except Exception as e:  # noqa: BLE001 - the exception is what is checked
            got.append(e)

    t = threading.Thread(target=enqueue)
    t.start()
    started.wait()
    time.sleep(0.1)  # into its lock wait (if not, it meets the closed handle: the same)
    db.close()
    t.join(30)
    assert not t.is_alive()
    holder.rollback()
    holder.close()
    assert len(got) == 1 and isinstance(got[0], tocsin.Closed), got
    with tocsin.open(path) as again:
        assert again.queue("q").stats()["pending"] == 1


def test_close_ends_an_async_result_wait(path):
    db = tocsin.open(path)
    jid = db.queue("q").enqueue(1)

    async def main():
        t = asyncio.ensure_future(db.wait_result_async(jid))
        await asyncio.sleep(0.1)
        db.close()
        with pytest.raises(tocsin.Closed):
            await asyncio.wait_for(t, 5)

    asyncio.run(main())


def test_stop_before_the_run_starts_and_after_it_ended(db):
    w = tocsin.Worker(db, ["q"], scheduler=False)

    async def main():
        runner = asyncio.ensure_future(w.run_async())
        w.stop()  # the run has not started yet
        await asyncio.wait_for(runner, 10)

    asyncio.run(main())
    w.stop()  # the loop is closed: nothing to stop, no error


class Boom(BaseException):
    pass


def test_tasks_raising_base_exceptions_fail_their_job_and_the_worker_goes_on(db):
    q = db.queue("q")

    @q.task(name="sync_boom", retries=0)
    def sync_boom():
        raise Boom("sync")

    @q.task(name="sync_exit", retries=0)
    def sync_exit():
        raise SystemExit(3)

    @q.task(name="async_boom", retries=0)
    async def async_boom():
        raise Boom("async")

    @q.task(name="timed_boom", retries=0, timeout=10)
    def timed_boom():
        raise Boom("timed")

    @q.task(name="ok", retries=0)
    def ok():
        return "fine"

    handles = [sync_boom(), sync_exit(), async_boom(), timed_boom(), ok()]
    w = tocsin.Worker(db, ["q"], scheduler=False, shutdown_timeout=1)

    async def main():
        runner = asyncio.ensure_future(w.run_async())
        try:
            got = []
            for h in handles:
                try:
                    got.append(await h.result(timeout=10))
                except tocsin.TaskError as e:
                    got.append(e.type)
            return got
        finally:
            w.stop()
            await asyncio.wait_for(runner, 10)

    assert asyncio.run(main()) == ["Boom", "SystemExit", "Boom", "Boom", "fine"]
    assert w.failed == 4 and w.processed == 1


def test_a_timeout_error_the_task_raises_is_its_own_error(db):
    q = db.queue("q")

    @q.task(name="net", retries=0, timeout=30)
    async def net():
        raise TimeoutError("the server did not answer")

    @q.task(name="net_sync", retries=0, timeout=30)
    def net_sync():
        raise TimeoutError("the socket timed out")

    handles = [net(), net_sync()]
    w = tocsin.Worker(db, ["q"], scheduler=False)

    async def main():
        runner = asyncio.ensure_future(w.run_async())
        try:
            out = []
            for h in handles:
                with pytest.raises(tocsin.TaskError) as e:
                    await h.result(timeout=10)
                out.append((e.value.type, e.value.message))
            return out
        finally:
            w.stop()
            await asyncio.wait_for(runner, 10)

    assert asyncio.run(main()) == [("TimeoutError", "the server did not answer"),
                                   ("TimeoutError", "the socket timed out")]


class BrokenStr(Exception):
    def __str__(self):
        raise RuntimeError("no str")


@pytest.mark.parametrize("mode", ["thread", "async", "process", "timeout"])
def test_outcomes_the_core_cannot_store_still_end_the_run(db, mode):
    # a lone surrogate in the result or the error, an exception whose str() raises, a
    # result nested too deeply: each ends its job (it held its slot and lease forever)
    q = db.queue("q")
    opts = {"process": {"process": True}, "timeout": {"timeout": 30}}.get(mode, {})

    def register(name, fn):
        if mode == "async":
            async def run():
                return fn()
            return q.task(name=name, retries=0)(run)
        return q.task(name=name, retries=0, **opts)(fn)

    def deep():
        x = []
        for _ in range(100000):
            x = [x]
        return x

    def bad_message():
        raise ValueError("bad \ud800")

    def broken_str():
        raise BrokenStr()

    tasks = [register("surrogate", lambda: "bad \ud800"), register("message", bad_message),
             register("broken", broken_str), register("deep", deep), register("ok", lambda: "fine")]
    handles = [t() for t in tasks]
    w = tocsin.Worker(db, ["q"], scheduler=False, shutdown_timeout=1)

    async def main():
        runner = asyncio.ensure_future(w.run_async())
        try:
            got = []
            for h in handles:
                try:
                    got.append(await h.result(timeout=20))
                except tocsin.TaskError as e:
                    got.append((e.type, e.message))
            return got
        finally:
            w.stop()
            await asyncio.wait_for(runner, 10)

    got = asyncio.run(main())
    assert got[0][0] == "SerializationError" and "UTF-8" in got[0][1]
    assert got[1] == ("ValueError", "bad \\ud800")
    assert got[2] == ("BrokenStr", "<str() of the BrokenStr raised>")
    assert got[3] == ("SerializationError",
                      "the task's return value is not JSON-serialisable: nested too deeply")
    assert got[4] == "fine"
    assert q.stats()["processing"] == 0 and q.stats()["dead"] == 4


def test_bad_containers_and_task_definitions_are_refused(db):
    q = db.queue("q")
    deep = []
    for _ in range(100000):
        deep = [deep]
    with pytest.raises(tocsin.InvalidArgument, match="nested too deeply"):
        q.enqueue(deep)
    for jobs in ("abc", b"ab", {"a": 1}):
        with pytest.raises(tocsin.InvalidArgument, match="list of jobs"):
            q.enqueue_many(jobs)
    for items in ([(1,)], [("1", 2)], [(1.5, 2)], [None], "ab"):
        with pytest.raises(tocsin.InvalidArgument, match="ack_batch"):
            q.ack_batch(items)
    assert q.stats()["pending"] == 0
    with pytest.raises(tocsin.InvalidArgument, match="callable"):
        q.task(5, name="five")
    with pytest.raises(tocsin.InvalidArgument, match="empty"):
        q.task(lambda: 1, name="")
    with pytest.raises(tocsin.InvalidArgument, match="task name must be a str"):
        q.task(lambda: 1, name=5)
    with pytest.raises(tocsin.InvalidArgument, match="catch_up"):
        q.periodic("* * * * *", name="p", catch_up="never")
    assert q.tasks == {}


def test_a_worker_refuses_bad_settings_before_it_writes_or_opens_anything(db):
    q = db.queue("q")

    @q.periodic("* * * * *", name="tick")
    def tick():
        pass

    for kw in (dict(worker_id=5), dict(worker_id=""), dict(worker_id="w" * 300),
               dict(concurrency=20000), dict(queues=["q", ""])):
        queues = kw.pop("queues", ["q"])
        with pytest.raises(tocsin.InvalidArgument):
            tocsin.Worker(db, queues, scheduler=False, **kw)
    assert db.schedules() == []
    for payloads in ("abc", {"a": 1}):
        with pytest.raises(tocsin.InvalidArgument, match="list of payloads"):
            db.stream("s").publish_many(payloads)
    assert db.stream("s").read(0) == []


def test_a_second_run_of_a_running_worker_is_refused_and_leaves_the_first_alone(db):
    q = db.queue("q")

    @q.task(name="echo", retries=0)
    def echo(x):
        with tocsin.current_job().transaction() as tx:  # on the first run's own handle
            tx.result = x

    w = tocsin.Worker(db, ["q"], scheduler=False, shutdown_timeout=1)

    async def main():
        first = asyncio.ensure_future(w.run_async())
        await asyncio.sleep(0.1)
        with pytest.raises(tocsin.InvalidArgument, match="already running"):
            await w.run_async()
        try:
            return await echo(7).result(timeout=10)
        finally:
            w.stop()
            await asyncio.wait_for(first, 10)

    assert asyncio.run(main()) == 7

    async def again():  # stopped, it may run again
        run = asyncio.ensure_future(w.run_async())
        try:
            return await echo(8).result(timeout=10)
        finally:
            w.stop()
            await asyncio.wait_for(run, 10)

    assert asyncio.run(again()) == 8


# ---- ids, tokens, counts, offsets and names: the argument's own type, named ----

_NOT_INTS = (True, False, 1.0, 1.5, "1", None)
_NOT_STRS = (True, 1, 1.5, b"w", None)


def _int_calls(db):
    """(argument name, call taking the bad value) of every public call that passes an
    integer the caller gave straight to the core."""
    q, s = db.queue("q"), db.stream("s")
    return [
        ("job_id", lambda v: q.get(v)),
        ("job_id", lambda v: q.ack(v, 1)),
        ("token", lambda v: q.ack(1, v)),
        ("job_id", lambda v: q.retry(v, token=1)),
        ("token", lambda v: q.retry(1, token=v)),
        ("job_id", lambda v: q.fail(v, token=1)),
        ("token", lambda v: q.fail(1, token=v)),
        ("job_id", lambda v: q.heartbeat(v, token=1)),
        ("token", lambda v: q.heartbeat(1, token=v)),
        ("job_id", lambda v: q.cancel(v)),
        ("job_id", lambda v: q.requeue(v)),
        ("after_id", lambda v: q.dead_letters(after_id=v)),
        ("limit", lambda v: q.dead_letters(limit=v)),
        ("after", lambda v: s.read(v)),
        ("limit", lambda v: s.read(0, v)),
        ("offset", lambda v: s.save_offset("c", v)),
        ("after_id", lambda v: db.notifications("c", v)),
        ("limit", lambda v: db.notifications("c", 0, v)),
        ("one_in", lambda v: db.set_notify_autotrim(max_keep=10, one_in=v)),
        ("job_id", lambda v: db.save_result(v, 1)),
        ("job_id", lambda v: db.save_error(v, "E")),
        ("job_id", lambda v: db.result(v)),
        ("job_id", lambda v: db.delete_result(v)),
        ("job_id", lambda v: db.wait_result(v, timeout=0.01)),
    ]


def _str_calls(db):
    q, s = db.queue("q"), db.stream("s")
    return [
        ("worker_id", lambda v: q.claim(v)),
        ("worker_id", lambda v: q.claim_batch(2, v)),
        ("worker_id", lambda v: q.jobs(v)),
        ("consumer", lambda v: s.save_offset(v, 0)),
        ("consumer", lambda v: s.offset(v)),
        ("consumer", lambda v: s.subscribe(v) if v is not None else s.subscribe(3)),
        ("channel", lambda v: db.notify(v, 1)),
        ("channel", lambda v: db.notifications(v)),
        ("channel", lambda v: db.listen(v)),
        ("type", lambda v: db.save_error(1, v)),
        ("name", lambda v: db.lock_holder(v)),
        ("key", lambda v: s.publish(1, key=v) if v is not None else s.publish(1, key=7)),
    ]


def test_integer_arguments_refuse_bools_floats_and_other_types_naming_them(db):
    q = db.queue("q")
    jid = q.enqueue({"a": 1})
    job = q.claim("w")
    db.save_result(jid, "kept")
    for name, call in _int_calls(db):
        for v in _NOT_INTS:
            want = (r"^token is required" if name == "token" and v is None else
                    r"^%s must be an integer, not %s$" % (name, type(v).__name__))
            with pytest.raises(tocsin.InvalidArgument, match=want) as ei:
                call(v)
            assert isinstance(ei.value, ValueError) and ei.value.code is not None
    # nothing was read as job 1 (True) nor changed: the lease, the result, the stream
    assert q.get(jid).state == "processing" and q.get(jid).token == job.token
    assert db.result(jid).value == "kept"
    assert db.stream("s").offset("c") == 0
    # the ints still work, and so do int subclasses and __index__ objects (not bools)
    import enum

    class Id(enum.IntEnum):
        JOB = jid

    class Index:
        def __index__(self):
            return jid

    assert q.get(Id.JOB).id == jid and q.get(Index()).id == jid
    assert q.ack(Id.JOB, job.token) is True


def test_name_arguments_refuse_non_str_naming_them(db):
    for name, call in _str_calls(db):
        for v in _NOT_STRS:
            if v is None and name in ("key",):
                continue
            with pytest.raises(tocsin.InvalidArgument, match=r"^%s must be a str" % name):
                call(v)
    assert count(db, "_tocsin_notifications") == 0
    assert count(db, "_tocsin_events") == 0


def test_counts_priorities_and_attempts_refuse_bools_and_floats(db):
    q = db.queue("q")
    calls = [
        lambda v: q.enqueue(1, priority=v),
        lambda v: q.enqueue_many([{"payload": 1, "priority": v}], options=True),
        lambda v: q.enqueue(1, max_attempts=v),
        lambda v: q.claim_batch(v, "w"),
        lambda v: q.jobs("w", batch=v),
        lambda v: q.call("t", kwargs={}, priority=v),
        lambda v: db.stream("s").trim(max_count=v),
        lambda v: db.stream("s").subscribe("c", batch=v),
        lambda v: db.stream("s").subscribe(from_offset=v),
        lambda v: db.stream("s").subscribe("c", autosave_every=v),
        lambda v: db.prune_notifications(max_keep=v),
        lambda v: db.listen("c", buffer_size=v),
        lambda v: db.rate_limit("r", v, 1),
        lambda v: db.schedule("s", "@hourly", queue="q", priority=v),
        lambda v: db.schedule("s", "@hourly", queue="q", max_catch_up=v),
        lambda v: db.set_max_payload(v),
        lambda v: db.set_time(v),
        lambda v: q.task(name="t", retries=v)(lambda: None),
        lambda v: tocsin.Worker(db, ["q"], concurrency=v),
        lambda v: q.ack_batch([(v, 1)]),
    ]
    for call in calls:
        for v in (True, False, 1.0, 2.5, "2"):
            with pytest.raises(tocsin.InvalidArgument):
                call(v)
    # priority=False / 0.0 were taken as 0 by enqueue's shortcut
    for v in (False, 0.0):
        with pytest.raises(tocsin.InvalidArgument, match="priority"):
            q.enqueue(1, priority=v)
    assert q.stats()["pending"] == 0 and db.schedules() == []


def test_worker_ids_and_low_level_calls_refuse_wrong_types(db):
    from tocsin import _tocsin
    with pytest.raises(tocsin.InvalidArgument, match="worker_id must be a str, not int"):
        tocsin.Worker(db, ["q"], worker_id=7)
    with pytest.raises(tocsin.InvalidArgument, match="queue names must be str"):
        tocsin.Worker(db, ["q", 3])
    h = db._h
    with pytest.raises(tocsin.InvalidArgument, match="ids must be a sequence of integers, not int"):
        h.ack_batch(1, [1])
    with pytest.raises(tocsin.InvalidArgument, match=r"tokens\[1\] must be an integer, not bool"):
        h.ack_batch([1, 2], [1, True])
    with pytest.raises(tocsin.InvalidArgument, match=r"queues\[0\] must be a str, not int"):
        h.next_deadline((1,))
    with pytest.raises(tocsin.InvalidArgument, match="busy_timeout_ms must be an integer, not float"):
        _tocsin.Handle(db.path, 1.5)
    with pytest.raises(tocsin.InvalidArgument, match="concurrency must be an integer, not bool"):
        _tocsin.Worker(h, ["q"], True)
    with pytest.raises(tocsin.InvalidArgument, match="timeout_ms must be an integer, not float"):
        _tocsin.Sub(h).wait(0.5)
    # an integer out of range is InvalidArgument too (not OverflowError), as before
    with pytest.raises(tocsin.InvalidArgument):
        db.queue("q").get(2 ** 64)


# ---- payloads: only JSON values are written ----

class _Shown:
    def __str__(self):
        return "shown"


_NOT_JSON = (float("nan"), float("inf"), float("-inf"), {"a": [1, float("nan")]}, {1, 2},
             b"bytes", bytearray(b"x"), __import__("datetime").datetime(2024, 1, 1), _Shown(),
             complex(1, 2), {"k": object()})


def test_every_serialising_path_refuses_non_json_values_and_writes_nothing(db):
    q, s = db.queue("q"), db.stream("s")

    @q.task(name="t")
    def t(*a, **k):
        return None

    paths = [
        ("payload", lambda v: q.enqueue(v)),
        ("payload", lambda v: q.enqueue(v, priority=1)),
        ("payload", lambda v: q.enqueue_many([1, v])),
        ("payload", lambda v: q.enqueue_many([{"payload": 1}, {"payload": v}], options=True)),
        ("meta", lambda v: q.enqueue(1, meta={"m": v})),
        ("payload", lambda v: s.publish(v)),
        ("meta", lambda v: s.publish(1, meta={"m": v})),
        ("payload", lambda v: s.publish_many([1, v])),
        ("payload", lambda v: db.notify("c", v)),
        ("meta", lambda v: db.notify("c", 1, meta={"m": v})),
        ("value", lambda v: db.save_result(1, v)),
        ("args", lambda v: q.call("t", v)),
        ("kwargs", lambda v: q.call("t", kwargs={"k": v})),
        ("args", lambda v: t(v)),
        ("kwargs", lambda v: t.enqueue((), {"k": v})),
        ("payload", lambda v: db.schedule("s", "@hourly", queue="q", payload=v)),
        ("meta", lambda v: db.schedule("s", "@hourly", queue="q", meta={"m": v})),
        ("args", lambda v: db.schedule("s", "@hourly", task=t, args=[v])),
    ]
    for what, call in paths:  # a batch's second item is named ("job 1: payload ...")
        for v in _NOT_JSON:
            with pytest.raises(tocsin.InvalidArgument, match="^((job|event) 1: )?%s is not JSON-serialisable: " % what) as ei:
                call(v)
            if isinstance(v, float) or isinstance(v, dict) and "a" in v:
                assert "NaN and infinities" in str(ei.value)
    assert q.stats()["pending"] == 0
    assert count(db, "_tocsin_events") == 0
    assert count(db, "_tocsin_notifications") == 0
    assert count(db, "_tocsin_results") == 0
    assert db.schedules() == []


def test_a_task_returning_a_non_json_value_records_an_error(db):
    """The worker's serialising path: a NaN return value is an error result, not "NaN"."""
    q = db.queue("q")

    @q.task(name="nan", retries=0)
    def nan():
        return float("nan")

    h = nan()
    w = tocsin.Worker(db, ["q"], scheduler=False)

    async def main():
        task = asyncio.ensure_future(w.run_async())
        try:
            r = await db.wait_result_async(h.job_id, timeout=30)
        finally:
            w.stop()
            await task
        return r

    r = asyncio.run(main())
    assert r.is_error and "JSON" in (r.error_message or "") and "NaN" in r.error_message


class _Index:
    """An integer that is not an int (as numpy's integers are): it has __index__."""

    def __init__(self, v):
        self.v = v

    def __index__(self):
        return self.v


def test_every_integer_argument_takes_an_index_object_and_refuses_floats(path):
    n = _Index
    db = tocsin.open(path, max_payload_bytes=n(100000))
    try:
        q = db.queue("q")
        jid = q.enqueue({"a": 1}, priority=n(3), max_attempts=n(2), delay=n(0))
        assert q.get(jid).priority == 3 and q.get(jid).max_attempts == 2
        jobs = q.claim_batch(n(5), "w")
        assert [j.id for j in jobs] == [jid]
        assert q.ack_batch([(n(jid), n(jobs[0].token))]) == 1
        q.enqueue(2)
        it = q.jobs("w", batch=n(2))
        assert next(iter(it)).payload == 2
        it.close()
        db.set_max_payload(n(50000))
        db.set_time(n(1_700_000_000_000))
        assert db.now() == 1_700_000_000_000
        db.set_time(None)
        assert db.prune_notifications(max_keep=n(10)) == 0
        assert db.rate_limit("r", n(2), 60).limit == 2
        db.schedule("s", "*/5 * * * *", "q", 1, priority=n(1), max_attempts=n(3), max_catch_up=n(2))
        s = db.stream("t")
        s.publish(1)
        with s.subscribe("c", from_offset=n(0), batch=n(10), autosave_every=n(5)) as sub:
            assert next(iter(sub)).payload == 1
        assert s.trim(max_count=n(1)) == 0
        with db.listen("c", buffer_size=n(5)):
            pass

        @q.task(retries=n(2))
        def t():
            pass

        tocsin.Worker(db, ["q"], concurrency=n(2), scheduler=False).close()
        for bad, call in [(1.0, lambda v: q.claim_batch(v, "w")), (True, lambda v: q.enqueue(1, priority=v)),
                          (2.5, lambda v: db.listen("c", buffer_size=v)),
                          (n(0), lambda v: q.claim_batch(v, "w")),
                          (n(10 ** 7), lambda v: q.enqueue(1, max_attempts=v))]:
            with pytest.raises(tocsin.InvalidArgument, match=r"must be an integer"):
                call(bad)
        assert q.stats()["pending"] == 0
    finally:
        db.close()


def _depth(v):
    d = 0
    while isinstance(v, (list, dict)):
        d += 1
        v = (v[0] if v else None) if isinstance(v, list) else v.get("x")
    return d


def _nested(depth, text=False):
    if text:
        return "[" * depth + "]" * depth
    v = []
    for _ in range(depth - 1):
        v = [v]
    return v


@pytest.mark.parametrize("mode", ["thread", "async"])
def test_values_nested_to_the_cores_bound_are_read_and_written(db, path, mode):
    # The core stores JSON nested up to 1000 deep, and any runtime may write that deep;
    # json's decoder and encoder count each level against Python's recursion limit
    # (1000), so reading such a payload raised RecursionError and a task could not
    # return what it was given.
    listener = db.listen("n")
    c = sqlite3.connect(path)
    tocsin.load(c)
    c.execute("SELECT tocsin_enqueue('q', ?)", [_nested(1000, True)])
    c.execute("SELECT tocsin_stream_publish('s', ?)", [_nested(1000, True)])
    c.execute("SELECT tocsin_notify('n', ?, ?)", [_nested(1000, True), '{"x":' * 999 + "1" + "}" * 999])
    sql_call = c.execute("SELECT tocsin_task_enqueue('t', 'echo', ?)", ["[%s]" % _nested(998, True)]).fetchone()[0]
    c.commit()
    c.close()
    q = db.queue("q")
    job = q.claim("w")
    assert _depth(job.payload) == 1000
    q.enqueue(job.payload)  # written back as deep as the core allows
    assert job.ack() and _depth(q.claim("w").payload) == 1000
    assert _depth(db.stream("s").read(0, 1)[0].payload) == 1000
    note = listener.get(timeout=5)[0]
    assert _depth(note.payload) == 1000 and _depth(note.meta) == 999

    t = db.queue("t")
    if mode == "async":
        async def echo(x):
            return x
    else:
        def echo(x):
            return x
    t.task(name="echo", retries=0)(echo)
    h = t.call("echo", _nested(998))
    w = tocsin.Worker(db, ["t"], scheduler=False, shutdown_timeout=1)

    async def main():
        runner = asyncio.ensure_future(w.run_async())
        try:
            return [await tocsin.TaskHandle(t, sql_call).result(timeout=20), await h.result(timeout=20)]
        finally:
            w.stop()
            await asyncio.wait_for(runner, 10)

    got = asyncio.run(main())
    assert [_depth(v) for v in got] == [998, 998]


def test_an_error_message_with_a_nul_is_the_same_error_in_every_runtime(db):
    # the NUL is dropped (Go's, Node's and Ruby's workers do the same): the error keeps
    # its type and message, and is retried as any error
    q = db.queue("q")

    @q.task(name="nul", retries=1, backoff=0.001)
    def nul():
        raise ValueError("bad\0tail")

    h = nul()
    w = tocsin.Worker(db, ["q"], scheduler=False, shutdown_timeout=1)

    async def main():
        runner = asyncio.ensure_future(w.run_async())
        try:
            with pytest.raises(tocsin.TaskError) as e:
                await h.result(timeout=20)
            return e.value
        finally:
            w.stop()
            await asyncio.wait_for(runner, 10)

    e = asyncio.run(main())
    assert (e.type, e.message) == ("ValueError", "badtail")
    assert "bad" in (e.trace or "") and "\0" not in e.trace
    assert q.get(h.job_id).attempts == 2  # retried: an ERROR, not a final failure


def test_deep_values_leave_the_recursion_limit_another_thread_set(db):
    # Writing a deep value raises the process's recursion limit for the call (before
    # Python 3.12, json counted each level against it) and put the old one back
    # unconditionally: a limit another thread set meanwhile was overwritten (and a thread
    # deep in a recursion that relied on it raised RecursionError). The lock was not
    # re-entrant: a value's own code writing a deep value while it is written hung.
    import sys
    q = db.queue("q")
    app_limit = sys.getrecursionlimit() + 4321
    seen = []
    # (3.12 bounds json's C encoder at 1500 levels in all, which no recursion limit
    # raises: the outer value's 990 count, so the inner one is shallower there)
    inner = 400 if sys.version_info[:2] == (3, 12) else 999

    class Hook(dict):
        def items(self):
            if not seen:
                # re-entrant, from a caller of its own some frames deep: the limit raised again
                def down(n):
                    return q.enqueue(_nested(inner)) if n == 0 else down(n - 1)
                seen.append(down(200))
                t = threading.Thread(target=sys.setrecursionlimit, args=(app_limit,))
                t.start()  # the application's thread sets its limit meanwhile
                t.join()
            return super().items()

    value = Hook(k=1)
    for _ in range(990):
        value = [value]
    before = sys.getrecursionlimit()
    out = []
    writer = threading.Thread(target=lambda: out.append(q.enqueue(value)), daemon=True)
    try:
        writer.start()
        writer.join(30)  # (a guard: it hung on the non-re-entrant lock)
        assert not writer.is_alive(), "writing a value whose code writes a deep value hung"
        assert sys.getrecursionlimit() == app_limit  # the other thread's setting stands
        assert _depth(q.get(out[0]).payload) == 991 and _depth(q.get(seen[0]).payload) == inner
    finally:
        sys.setrecursionlimit(before)
