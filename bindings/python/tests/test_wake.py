import asyncio
import subprocess
import sys
import threading
import time

import pytest

import tocsin


def run_py(code, *args):
    """Runs Python code in another process (a different connection, a different process)."""
    subprocess.run([sys.executable, "-c", code, *args], check=True, timeout=60)


NOTIFY = "import sys, tocsin\nwith tocsin.open(sys.argv[1]) as db: db.notify(sys.argv[2], {'n': int(sys.argv[3])})"


def test_listen_wakes_on_other_process_commit(path, db):
    listener = db.listen("orders")
    db.notify("orders", {"n": 0})  # same process commits count too
    run_py(NOTIFY, path, "orders", "1")
    run_py(NOTIFY, path, "other", "2")
    got = []
    while len(got) < 2:
        batch = listener.get(timeout=10)
        assert batch, "no notification within 10 s"
        got.extend(batch)
    assert [(n.channel, n.payload) for n in got] == [("orders", {"n": 0}), ("orders", {"n": 1})]
    assert listener.get(timeout=0) == []
    listener.close()
    assert listener.get(timeout=0) == [] and listener.closed


def test_listen_has_no_history_and_rollback_delivers_nothing(db):
    db.notify("c", "before")
    with db.listen("c") as listener:
        with pytest.raises(RuntimeError):
            with db.transaction() as tx:
                db.notify("c", "rolled back", tx=tx)
                raise RuntimeError
        db.notify("c", "after")
        assert [n.payload for n in listener.get(timeout=10)] == ["after"]


def test_listen_bounded_buffer_counts_drops(db):
    with db.listen("c", buffer_size=3) as listener:
        for i in range(10):
            db.notify("c", i)
        got = listener.get(timeout=10)
        assert [n.payload for n in got] == [7, 8, 9]
        assert listener.dropped == 7
    with pytest.raises(tocsin.InvalidArgument):
        db.listen("c", buffer_size=0)
    with pytest.raises(tocsin.InvalidArgument):
        db.listen("")


def test_listen_sync_iteration_and_stop_from_thread(db):
    listener = db.listen("c")
    ticks = []

    def other():
        time.sleep(0.1)
        db.notify("c", "x")
        for _ in range(50):
            ticks.append(1)  # runs while the main thread waits: the GIL is free
        time.sleep(0.1)
        listener.close()

    threading.Thread(target=other).start()
    got = [n.payload for n in listener]
    assert got == ["x"] and len(ticks) == 50


def test_async_listen(path, db):
    async def main():
        listener = db.listen("c")

        async def produce():
            await asyncio.sleep(0.05)
            await asyncio.get_running_loop().run_in_executor(None, run_py, NOTIFY, path, "c", "7")

        task = asyncio.ensure_future(produce())
        beats = 0

        async def heartbeat():  # the loop keeps running while we wait
            nonlocal beats
            while True:
                beats += 1
                await asyncio.sleep(0.01)

        hb = asyncio.ensure_future(heartbeat())
        async for n in listener:
            assert n.payload == {"n": 7}
            break
        await task
        assert await listener.get_async(timeout=0.05) == []
        hb.cancel()
        listener.close()
        return beats

    assert asyncio.run(main()) > 1


def test_stream_subscribe_replay_then_live(db, path):
    s = db.stream("orders")
    s.publish_many([1, 2, 3])
    sub = s.subscribe("billing", batch=2)
    assert [e.payload for e in sub.get(timeout=5)] == [1, 2]
    assert [e.payload for e in sub.get(timeout=5)] == [3]
    run_py("import sys, tocsin\nwith tocsin.open(sys.argv[1]) as db: db.stream('orders').publish(4)", path)
    assert [e.payload for e in sub.get(timeout=10)] == [4]
    assert sub.position == 4
    sub.save()
    sub.close()
    assert s.offset("billing") == 4
    s.publish(5)
    with s.subscribe("billing") as again:
        assert [e.payload for e in again.get(timeout=5)] == [5]
    with s.subscribe(from_offset=1) as replay:
        assert [e.payload for e in replay.get(timeout=5)][:2] == [2, 3]
    with pytest.raises(tocsin.InvalidArgument):
        s.subscribe()
    with pytest.raises(tocsin.InvalidArgument):
        s.subscribe("c", batch=0)
    with pytest.raises(tocsin.InvalidArgument):
        s.subscribe("c", from_offset=-1)


def test_stream_autosave_and_async(db):
    s = db.stream("t")
    s.publish_many(list(range(5)))

    async def main():
        seen = []
        async with s.subscribe("c1", autosave_every=1) as sub:
            async for e in sub:
                seen.append(e.payload)
                if len(seen) == 5:
                    break
        return seen

    assert asyncio.run(main()) == [0, 1, 2, 3, 4]
    assert s.offset("c1") >= 4


def test_jobs_sync_iterator_wakes_on_other_process(db, path):
    q = db.queue("emails")
    it = q.jobs("w1")
    threading.Thread(target=run_py, args=(
        "import sys, time, tocsin\ntime.sleep(0.1)\n"
        "with tocsin.open(sys.argv[1]) as db: db.queue('emails').enqueue({'to': 'a'})", path)).start()
    job = next(it)
    assert job.payload == {"to": "a"} and job.ack()
    stopper = threading.Timer(0.2, it.stop)
    stopper.start()
    assert list(it) == []  # stop() ends a blocked wait
    with pytest.raises(tocsin.InvalidArgument):
        q.jobs("w", batch=0)


def test_jobs_async_iterator_many_racing(db, path):
    q = db.queue("work")
    n = 100

    async def main():
        got = []

        async def consume(wid):
            async for job in q.jobs(wid):
                got.append(job.payload)
                job.ack()
                if len(got) >= n:
                    return

        consumers = [asyncio.ensure_future(consume("w%d" % i)) for i in range(4)]
        await asyncio.sleep(0.05)
        await asyncio.get_running_loop().run_in_executor(None, run_py,
            "import sys, tocsin\nwith tocsin.open(sys.argv[1]) as db:\n"
            "    for i in range(100): db.queue('work').enqueue(i)", path)
        await asyncio.wait_for(asyncio.wait(consumers, return_when=asyncio.FIRST_COMPLETED), 30)
        for c in consumers:
            c.cancel()
        return got

    got = asyncio.run(main())
    assert sorted(got) == list(range(n))


def test_queue_wait_timeout(db):
    q = db.queue("idle")
    assert q.wait(timeout=0.05) is False
    q.enqueue(1)
    assert q.wait(timeout=5) is True


def test_raw_subscription(db, path):
    with db.subscribe() as wake:
        assert wake.wait(timeout=0) in (True, False)
        wake.wait(timeout=0)
        run_py(NOTIFY, path, "x", "1")
        assert wake.wait(timeout=10) is True
        t = threading.Timer(0.1, wake.poke)
        t.start()
        assert wake.wait(timeout=10) is True  # poked


def test_waits_release_the_gil(db):
    """A thread blocked in a wait must not stop other Python threads."""
    listener = db.listen("never")
    done = threading.Event()

    def wait():
        listener.get(timeout=0.5)
        done.set()

    t = threading.Thread(target=wait)
    t.start()
    n = 0
    start = time.monotonic()
    while not done.is_set() and time.monotonic() - start < 5:
        n += 1
    t.join()
    assert n > 10000
    listener.close()


def test_async_reader_stays_registered_and_never_spins(path, db, monkeypatch):
    """A wake that arrives while nobody awaits drops the loop's reader rather than
    calling back on every loop iteration; the next wait registers it again."""
    from tocsin import wake

    calls = []
    ready = wake.Reader._ready
    monkeypatch.setattr(wake.Reader, "_ready", lambda self: (calls.append(1), ready(self)))

    async def main():
        listener = db.listen("c")
        got = []

        async def consume(k):
            async for n in listener:
                got.append(n.payload["n"])
                if len(got) == k:
                    return

        task = asyncio.ensure_future(consume(1))
        await asyncio.sleep(0.05)  # waiting: the reader is registered
        await asyncio.get_running_loop().run_in_executor(None, run_py, NOTIFY, path, "c", "1")
        await asyncio.wait_for(task, 10)
        # nobody waits now; another process commits: the reader drops itself
        await asyncio.get_running_loop().run_in_executor(None, run_py, NOTIFY, path, "c", "2")
        for _ in range(100):
            await asyncio.sleep(0.005)
        assert len(calls) <= 3
        assert listener._reader._loop is None
        await asyncio.wait_for(consume(2), 10)  # the next wait registers it again
        assert got == [1, 2]
        listener.close()
        assert listener._reader._loop is None

    asyncio.run(main())


def test_async_wake_wait_timeout_and_close(db):
    async def main():
        w = db.subscribe()
        assert await w.wait_async(timeout=0.02) is False
        db.notify("x", 1)  # a commit through this process wakes it
        assert await w.wait_async(timeout=5) is True
        w.close()

    asyncio.run(main())


def test_close_ends_an_async_wait_from_the_loop_and_from_another_thread(db):
    async def main():
        for other_thread in (False, True):
            listener = db.listen("c")

            async def consume():
                return [n async for n in listener]

            task = asyncio.ensure_future(consume())
            await asyncio.sleep(0.05)  # it waits on the loop's reader
            if other_thread:
                await asyncio.get_running_loop().run_in_executor(None, listener.close)
            else:
                listener.close()
            assert await asyncio.wait_for(task, 5) == []

    asyncio.run(main())


def test_waits_inherited_across_fork_raise_closed_in_the_child(db, path):
    """A listener, stream subscription or raw subscription opened before fork() is the
    parent's: in the child every wait on it raises Closed ("opened before fork()"),
    as the calls on the parent's handle do, instead of returning nothing (or blocking
    for ever in a for loop)."""
    import json
    import os
    import signal

    listener = db.listen("c")
    sub = db.stream("s").subscribe(consumer="k")
    wake = db.subscribe()
    q = db.queue("q")
    waits = [
        ("listener.get", lambda: listener.get(5)),
        ("listener.get(0)", lambda: listener.get(0)),
        ("for in listener", lambda: next(iter(listener))),
        ("listener.get_async", lambda: asyncio.run(listener.get_async(5))),
        ("async for in listener", lambda: asyncio.run(listener.__anext__())),
        ("subscription.get", lambda: sub.get(5)),
        ("for in subscription", lambda: next(iter(sub))),
        ("subscription.get_async", lambda: asyncio.run(sub.get_async(5))),
        ("wake.wait", lambda: wake.wait(5)),
        ("wake.wait_async", lambda: asyncio.run(wake.wait_async(5))),
        ("queue.wait", lambda: q.wait(5)),
    ]
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: each wait's outcome, as JSON, through the pipe
        try:
            signal.alarm(60)  # a wait that blocks for ever must not hang the suite
            out = []
            for label, wait in waits:
                try:
                    out.append([label, "returned %r" % (wait(),)])
                except BaseException as e:  # noqa: B902 -- reported to the parent
                    out.append([label, "%s: %s" % (type(e).__name__, e)])
            os.write(wr, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(wr)
    db.notify("c", "hello")  # something to deliver, were the child's waits live
    db.stream("s").publish("event")
    chunks = []
    while True:
        chunk = os.read(rd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(rd)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), "the child was killed (a wait blocked)"
    got = dict(json.loads(b"".join(chunks).decode() or "[]"))
    assert sorted(got) == sorted(label for label, _ in waits)
    for label, outcome in got.items():
        assert outcome.startswith("Closed: ") and "before fork()" in outcome, (label, outcome)
    # the parent's objects are untouched
    assert [n.payload for n in listener.get(10)] == ["hello"]
    assert [e.payload for e in sub.get(10)] == ["event"]
