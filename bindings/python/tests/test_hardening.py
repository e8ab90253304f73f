"""Regressions: bad values, waits, stop and BaseException in tasks, iterators' batches."""
import asyncio
import threading
import time

import pytest

import tocsin


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
    with pytest.raises(tocsin.InvalidArgument, match="enqueue"):
        q.enqueue(1, unique_key="a\x00b")
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
    assert got[0][0] == "ResultNotSerialisable" and "UTF-8" in got[0][1]
    assert got[1] == ("ValueError", "bad \\ud800")
    assert got[2] == ("BrokenStr", "<str() of the BrokenStr raised>")
    assert got[3] == ("ResultNotSerialisable",
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
