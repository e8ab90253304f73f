"""The worker runner on the core's worker protocol: transactions per asyncio task, task
context and the ack transaction, timeouts, cancellation, hand-back, deterministic errors,
tracebacks, the summary. In-process workers (run_async) unless a signal is involved."""
import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import tocsin
from conftest import count


def run_worker(db, queues, body, **opts):
    """Runs a worker in this process while the coroutine ``body(worker)`` runs."""
    opts.setdefault("scheduler", False)
    w = tocsin.Worker(db, queues, **opts)

    async def main():
        runner = asyncio.ensure_future(w.run_async())
        try:
            return await body(w)
        finally:
            w.stop()
            await asyncio.wait_for(runner, 30)

    return w, asyncio.run(main())


@pytest.mark.parametrize("form", ["with", "async with"])
def test_async_tasks_have_their_own_transactions(db, form):
    """An async task's db.transaction() is its own: it never captures the worker's
    claims and completions on the loop thread (the trial: the worker crashed and 50
    results vanished). ``async with`` may hold it across awaits."""
    db.executescript("CREATE TABLE orders(id INTEGER PRIMARY KEY, n INTEGER)")
    q = db.queue("q")

    @q.task(name="order")
    async def order(n):
        await asyncio.sleep(0.001)
        if form == "with":
            with db.transaction():  # joined by the calls of this task only
                db.execute("INSERT INTO orders(n) VALUES (?)", [n])
                db.queue("out").enqueue({"order": n})
        else:
            async with db.transaction():  # other tasks and the worker go on meanwhile
                db.execute("INSERT INTO orders(n) VALUES (?)", [n])
                await asyncio.sleep(0.005)
                db.queue("out").enqueue({"order": n})
        return n * 2

    handles = [order(i) for i in range(50)]

    async def body(w):
        return [await h.result(timeout=60) for h in handles]

    w, results = run_worker(db, ["q"], body, concurrency=8)
    assert results == [i * 2 for i in range(50)]
    assert count(db, "orders") == 50 and w.processed == 50 and w.failed == w.retried == 0
    assert db.queue("out").stats()["pending"] == 50  # the tasks' own enqueues, committed with their inserts


def test_task_context_and_ack_transaction(db):
    db.executescript("CREATE TABLE effects(job INTEGER PRIMARY KEY, attempt INTEGER)")
    q = db.queue("q")
    seen = {}

    @q.task(name="charge")
    def charge(amount):
        job = tocsin.current_job()
        seen["ctx"] = (job.queue, job.task, job.attempt, job.max_attempts, job.meta)
        with job.transaction() as tx:  # the effect commits with the ack, or not at all
            tx.execute("INSERT INTO effects(job, attempt) VALUES (?, ?)", [job.job_id, job.attempt])
            tx.result = {"charged": amount}
        return "ignored: the job was acked in its transaction"

    h = charge.enqueue((5,), meta={"trace": "abc"})

    async def body(w):
        return await h.result(timeout=30)

    w, value = run_worker(db, ["q"], body)
    assert value == {"charged": 5}
    assert seen["ctx"] == ("q", "charge", 1, 3, {"trace": "abc"})
    assert count(db, "effects") == 1 and q.get(h.job_id) is None
    with pytest.raises(tocsin.InvalidArgument, match="inside a task"):
        tocsin.current_job()


def test_lost_lease_raises_inside_the_ack_transaction(db):
    db.executescript("CREATE TABLE effects(job INTEGER PRIMARY KEY)")
    q = db.queue("q")
    raised = []

    @q.task(name="slow")
    def slow():
        job = tocsin.current_job()
        q.cancel(job.job_id)  # someone cancels it: the lease is no longer ours
        try:
            with job.transaction() as tx:
                tx.execute("INSERT INTO effects(job) VALUES (?)", [job.job_id])
        except tocsin.LeaseLost as e:
            raised.append(str(e))
            raise

    h = slow()

    async def body(w):
        for _ in range(300):
            if raised:
                return
            await asyncio.sleep(0.01)

    run_worker(db, ["q"], body)
    assert raised and "lease" in raised[0]
    assert count(db, "effects") == 0  # rolled back with the refused ack
    assert q.get(h.job_id).reason == "cancelled"


def test_deterministic_errors(db):
    q = db.queue("q")

    @q.task(name="add", retries=5)
    def add(a, b=1):
        return a + b

    @q.task(name="bad_result", retries=5)
    def bad_result():
        return object()

    # arguments that do not fit the signature are refused at enqueue, nothing written
    with pytest.raises(tocsin.InvalidArgument, match="add"):
        add(1, 2, 3)
    with pytest.raises(tocsin.InvalidArgument):
        add.enqueue((), {"c": 1})
    # task(1, tx=tx) explains how to enqueue inside a transaction
    with db.transaction() as tx:
        with pytest.raises(tocsin.InvalidArgument, match=r"\.enqueue\(args, kwargs, tx=tx\)"):
            add(1, tx=tx)
    assert count(db, "_tocsin_jobs") == 0
    h = bad_result()

    async def body(w):
        with pytest.raises(tocsin.TaskError) as ei:
            await h.result(timeout=30)
        return ei.value

    w, err = run_worker(db, ["q"], body)
    # a result that cannot be serialised is a final failure: one attempt, not six; its
    # type is the one every runtime records for it (Node, Ruby and Go: SerializationError)
    assert err.type == "SerializationError"
    assert q.get(h.job_id).attempts == 1 and q.get(h.job_id).state == "dead"
    assert w.failed == 1 and w.retried == 0


def test_errors_carry_their_traceback_and_retries_are_counted_apart(db, caplog):
    q = db.queue("q")

    @q.task(name="flaky", retries=1, backoff=0.01)
    def flaky():
        def inner():
            raise ValueError("boom")
        inner()

    h = flaky()

    async def body(w):
        with pytest.raises(tocsin.TaskError) as ei:
            await h.result(timeout=30)
        return ei.value

    with caplog.at_level(logging.WARNING, logger="tocsin.worker"):
        w, err = run_worker(db, ["q"], body)
    assert err.type == "ValueError" and err.message == "boom"
    assert "Traceback" in err.trace and "inner" in err.trace
    assert db.result(h.job_id).error_trace == err.trace
    assert (w.retried, w.failed, w.processed) == (1, 1, 0)
    logged = [r for r in caplog.records if r.getMessage() in ("job.retry", "job.failed")]
    assert len(logged) == 2 and all("inner" in r.tocsin["trace"] for r in logged)


def test_the_tasks_bound_decides_retry_or_failed(db):
    """Called with more attempts than the task's retries allow, the job runs
    retries + 1 times: the last run's error counts as failed, not retried."""
    q = db.queue("q")

    @q.task(name="flaky2", retries=1, backoff=0.01)
    def flaky2():
        raise ValueError("boom")

    h = q.call("flaky2", max_attempts=10)

    async def body(w):
        with pytest.raises(tocsin.TaskError):
            await h.result(timeout=30)

    w, _ = run_worker(db, ["q"], body)
    assert (w.retried, w.failed, w.processed) == (1, 1, 0)
    assert q.get(h.job_id).attempts == 2


def test_async_timeout_cancels_and_never_fails_a_job_that_did_not_run(db):
    q = db.queue("q")
    ran = []

    @q.task(name="hang", timeout=0.2, retries=0)
    async def hang():
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            ran.append("cancelled")
            raise

    @q.task(name="quick")
    async def quick():
        ran.append("quick")
        return "ok"

    h1, h2 = hang(), quick()

    async def body(w):
        with pytest.raises(tocsin.TaskError) as ei:
            await h1.result(timeout=30)
        return ei.value, await h2.result(timeout=30)

    w, (err, ok) = run_worker(db, ["q"], body, concurrency=1)
    assert err.type == "Timeout" and ok == "ok" and ran == ["cancelled", "quick"]


def test_a_call_by_name_keeps_the_tasks_retries(db):
    """A caller in another runtime knows nothing of the task's retries: its worker keeps them."""
    q = db.queue("q")
    runs = []

    @q.task(name="once", retries=0)
    def once():
        runs.append(1)
        raise ValueError("no")

    h = q.call("once", max_attempts=5)

    async def body(w):
        with pytest.raises(tocsin.TaskError):
            await h.result(timeout=30)

    run_worker(db, ["q"], body)
    job = q.get(h.job_id)
    assert (job.state, job.attempts, job.reason, len(runs)) == ("dead", 1, "max_attempts", 1)


def test_a_sync_task_that_returns_past_its_timeout_fails_with_timeout(db):
    q = db.queue("q")

    @q.task(name="late", timeout=0.05, retries=0)
    def late():
        time.sleep(0.2)  # a thread cannot be stopped: it returns, too late
        return "late"

    h = late()

    async def body(w):
        with pytest.raises(tocsin.TaskError) as ei:
            await h.result(timeout=30)
        return ei.value

    _, err = run_worker(db, ["q"], body)
    assert err.type == "Timeout"


def test_sync_timeout_counts_from_the_start_of_the_run(db):
    """With concurrency 1 the task queued behind a slow one is never recorded as a
    Timeout without running (the trial's bug)."""
    q = db.queue("q")

    @q.task(name="slowish", timeout=0.3, retries=0)
    def slowish(n):
        time.sleep(0.2)
        return n

    hs = [slowish(i) for i in range(3)]

    async def body(w):
        return [await h.result(timeout=30) for h in hs]

    w, values = run_worker(db, ["q"], body, concurrency=1)
    assert values == [0, 1, 2]


def test_process_pool_timeout_kills_the_child_and_the_next_task_runs(db, tmp_path):
    q = db.queue("q")
    marker = tmp_path / "side-effect"

    @q.task(name="stuck", timeout=0.3, retries=0, process=True)
    def stuck():
        time.sleep(2)
        marker.write_text("the killed child must not get here")

    @q.task(name="after", process=True)
    def after():
        return os.getpid()

    h1, h2 = stuck(), after()

    async def body(w):
        with pytest.raises(tocsin.TaskError) as ei:
            await h1.result(timeout=30)
        return ei.value, await h2.result(timeout=30)

    w, (err, pid) = run_worker(db, ["q"], body, concurrency=1)
    assert err.type == "Timeout"
    assert pid != os.getpid()  # ran in a child
    time.sleep(2.2)
    assert not marker.exists()  # the child was killed, not left running


def test_process_task_gets_closed_for_the_parents_handle_and_opens_its_own(db):
    q = db.queue("q")

    @q.task(name="parents", process=True, retries=0)
    def parents():
        return q.enqueue("from the child")  # the worker's handle: the parent's

    @q.task(name="own", process=True)
    def own():
        with tocsin.open(db.path) as mine:
            return mine.queue("side").enqueue("from the child")

    h1, h2 = parents(), own()

    async def body(w):
        with pytest.raises(tocsin.TaskError) as ei:
            await h1.result(timeout=30)
        return ei.value, await h2.result(timeout=30)

    w, (err, jid) = run_worker(db, ["q"], body, concurrency=1)
    assert err.type == "Closed" and "before fork()" in err.message
    assert db.queue("side").get(jid).payload == "from the child"
    assert db.queue("q").stats()["pending"] == 0  # nothing written through the parent's


def test_cancelling_a_running_job_reaches_its_handler(db):
    q = db.queue("q")
    state = {}

    @q.task(name="long_async")
    async def long_async():
        state["started"] = True
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            state["cancelled"] = True
            raise

    @q.task(name="long_sync")
    def long_sync():
        job = tocsin.current_job()
        state["sync_started"] = True
        end = time.monotonic() + 30
        while not job.cancelled and time.monotonic() < end:
            time.sleep(0.01)
        state["sync_saw_cancel"] = job.cancelled

    h1, h2 = long_async(), long_sync()

    async def body(w):
        for _ in range(500):
            if state.get("started") and state.get("sync_started"):
                break
            await asyncio.sleep(0.01)
        assert q.cancel(h1.job_id) and q.cancel(h2.job_id)
        for _ in range(1000):
            if state.get("cancelled") and "sync_saw_cancel" in state:
                return
            await asyncio.sleep(0.01)

    # visibility 0.6 s: the core's upkeep (every third of it) notices the cancellations
    run_worker(db, ["q"], body, concurrency=2, visibility=0.6)
    assert state.get("cancelled") and state.get("sync_saw_cancel")
    assert q.get(h1.job_id).reason == "cancelled"


def test_worker_on_a_queue_without_tasks_warns(db, caplog):
    db.queue("orphans").enqueue(1)

    async def body(w):
        await asyncio.sleep(0.05)

    with caplog.at_level(logging.WARNING, logger="tocsin.worker"):
        run_worker(db, ["orphans"], body)
    assert any("no task is registered for queue 'orphans'" in r.getMessage() for r in caplog.records)


def test_result_timeout_says_why(db):
    q = db.queue("q")
    h = q.call("nobody_runs_this")
    with pytest.raises(tocsin.Timeout, match="never claimed"):
        h.get(timeout=0.05)
    job = q.claim("w")
    with pytest.raises(tocsin.Timeout, match="running"):
        h.get(timeout=0.05)
    assert job.retry(60, error="ValueError: x")
    with pytest.raises(tocsin.Timeout, match="retry"):
        h.get(timeout=0.05)


APP = textwrap.dedent('''
    import os, sys, time
    import tocsin

    db = tocsin.open(os.environ["TOCSIN_TEST_DB"])
    q = db.queue("q")
    db.executescript("CREATE TABLE IF NOT EXISTS effects(job INTEGER PRIMARY KEY, n INTEGER)")

    @q.task(name="effect", retries=50)
    def effect(n):
        job = tocsin.current_job()
        time.sleep(0.002)
        with job.transaction() as tx:
            tx.execute("INSERT INTO effects(job, n) VALUES (?, ?)", [job.job_id, n])

    @q.task(name="sleepy", retries=0)
    def sleepy(seconds):
        time.sleep(seconds)
        return seconds
''')


@pytest.fixture
def app(tmp_path, path):
    (tmp_path / "workerapp.py").write_text(APP)
    env = dict(os.environ, TOCSIN_TEST_DB=path, PYTHONPATH=str(tmp_path))
    procs = []

    def start(*extra):
        cmd = [sys.executable, "-m", "tocsin", "worker", "workerapp:db", "--queue", "q",
               "--concurrency", "4", "--no-scheduler", *extra]
        p = subprocess.Popen(cmd, cwd=str(tmp_path), env=env, stderr=subprocess.PIPE, text=True)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def test_sigkill_through_the_decorator_is_exactly_once(app, db, tmp_path):
    """Effects acked in the task's transaction happen exactly once across SIGKILLs
    (the trial: 4 duplicates in 2000 through the decorator)."""
    sys.path.insert(0, str(tmp_path))
    os.environ["TOCSIN_TEST_DB"] = db.path
    try:
        import workerapp  # noqa: F401 -- the same task definitions, for enqueueing
        n = 300
        ids = [db.queue("q").call("effect", i).job_id for i in range(n)]
        for _ in range(3):
            p = app()
            time.sleep(0.7)
            p.kill()
            p.wait(10)
        p = app()
        end = time.monotonic() + 60
        while count(db, "effects") < n and time.monotonic() < end:
            time.sleep(0.1)
        p.send_signal(signal.SIGTERM)
        p.wait(30)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("workerapp", None)
    assert count(db, "effects") == n  # every effect once (job is the primary key)
    assert sorted(r[0] for r in db.execute("SELECT job FROM effects")) == ids
    assert count(db, "_tocsin_jobs") == 0


def test_sigterm_past_the_deadline_hands_back_a_retries0_job(app, db):
    p = app("--shutdown-timeout", "0.3")
    h = db.queue("q").call("sleepy", 30)
    end = time.monotonic() + 30
    while (db.queue("q").get(h.job_id).state != "processing") and time.monotonic() < end:
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == 0
    job = db.queue("q").get(h.job_id)
    assert job.state == "pending" and "shutdown" in job.last_error  # not dead: no attempt used


def test_draining_worker_claims_nothing_while_its_runs_finish(app, db):
    """SIGTERM: the runs in flight finish within the deadline, and the jobs waiting are
    not touched (they used to be claimed for each freed slot and handed back at once:
    attempts and hand-backs counted for runs that never started)."""
    p = app("--shutdown-timeout", "20")
    q = db.queue("q")
    running = [q.call("sleepy", 1.0) for _ in range(4)]
    end = time.monotonic() + 30
    while q.stats()["processing"] < 4 and time.monotonic() < end:
        time.sleep(0.05)
    waiting = [q.call("sleepy", 0) for _ in range(3)]
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == 0
    for h in running:
        assert h.get(timeout=5) == 1.0
    for h in waiting:
        job = q.get(h.job_id)
        assert (job.state, job.attempts, job.max_attempts, job.last_error) == ("pending", 0, 3, None)


def test_second_signal_stops_at_once(app, db):
    p = app("--shutdown-timeout", "60")
    h = db.queue("q").call("sleepy", 30)
    end = time.monotonic() + 30
    while (db.queue("q").get(h.job_id).state != "processing") and time.monotonic() < end:
        time.sleep(0.05)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert p.poll() is None  # draining, within its 60 s
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == 0
    assert time.monotonic() - t0 < 20
    assert db.queue("q").get(h.job_id).state == "pending"


def _in_thread(fn):
    """fn() in a thread of its own: (its return value, the exception it raised)."""
    out = {}

    def body():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: B902 -- reported to the test
            out["error"] = e

    t = threading.Thread(target=body)
    t.start()
    t.join(60)
    assert not t.is_alive()
    return out.get("value"), out.get("error")


def _left_behind(db):
    """What a finished run must not leave: the worker's registry row, its threads (an
    idle sync thread ends once told to)."""
    for t in threading.enumerate():
        if t.name.startswith("tocsin-sync"):
            t.join(30)
    return (count(db, "_tocsin_workers"),
            sorted(t.name for t in threading.enumerate() if t.name.startswith("tocsin-sync")))


def test_run_in_another_thread_runs_without_signal_handlers(db):
    """run() outside the main thread (where Python cannot handle signals) runs the
    worker without signal handlers; stop() ends it and it leaves nothing behind."""
    q = db.queue("q")

    @q.task(name="ok")
    def ok(x):
        return x + 1

    h = ok(1)
    w = tocsin.Worker(db, ["q"], scheduler=False, worker_id="w-thread")
    t = threading.Thread(target=w.run)
    t.start()
    try:
        assert h.get(timeout=30) == 2
    finally:
        w.stop()
        t.join(30)
    assert not t.is_alive() and w.processed == 1
    assert _left_behind(db) == (0, [])


def test_signal_handlers_off_the_main_thread_are_refused_before_anything_starts(db):
    q = db.queue("q")

    @q.task(name="ok")
    def ok():
        return 1

    h = ok()
    w = tocsin.Worker(db, ["q"], scheduler=False, worker_id="w-thread")
    _, err = _in_thread(lambda: w.run(install_signal_handlers=True))
    assert isinstance(err, tocsin.InvalidArgument) and "main thread" in str(err)
    assert _left_behind(db) == (0, []) and q.get(h.job_id).state == "pending"
    # the same Worker (and its id) runs afterwards
    w.stop()  # before the run: the run ends once started
    _, err = _in_thread(lambda: w.run(install_signal_handlers=False))
    assert err is None and _left_behind(db) == (0, [])


def test_a_failure_while_starting_leaves_nothing_behind(db, monkeypatch):
    """A run that fails after the core worker was made (here: installing the signal
    handlers) closes it: no registry row, no threads, and the Worker runs again."""
    q = db.queue("q")

    @q.task(name="ok")
    def ok():
        return 1

    h = ok()

    def refuse(self, *a, **k):
        raise RuntimeError("no signals here")

    monkeypatch.setattr(asyncio.unix_events._UnixSelectorEventLoop, "add_signal_handler", refuse)
    w = tocsin.Worker(db, ["q"], scheduler=False, worker_id="w-start")
    with pytest.raises(RuntimeError, match="no signals here"):
        w.run(install_signal_handlers=True)
    assert _left_behind(db) == (0, []) and q.get(h.job_id).state == "pending"
    monkeypatch.undo()
    t = threading.Thread(target=w.run)
    t.start()
    try:
        assert h.get(timeout=30) == 1
    finally:
        w.stop()
        t.join(30)
    assert _left_behind(db) == (0, [])


def test_a_task_that_raises_cancelled_error_itself_fails_its_attempt(db):
    # an async handler that raised asyncio.CancelledError of its own (an await of
    # something cancelled elsewhere) was re-raised unreported: the job stayed
    # "processing" under the worker's renewed lease until the worker stopped
    q = db.queue("q")
    calls = []

    @q.task(name="inner_cancel", retries=1, backoff=0.01)
    async def inner_cancel():
        calls.append(1)
        inner = asyncio.ensure_future(asyncio.sleep(30))
        asyncio.get_running_loop().call_soon(inner.cancel)
        await inner

    @q.task(name="after")
    async def after():
        return "ok"

    h1 = inner_cancel()

    async def body(w):
        with pytest.raises(tocsin.TaskError) as ei:
            await h1.result(timeout=30)
        return ei.value, await after().result(timeout=30)

    w, (err, ok) = run_worker(db, ["q"], body, concurrency=1)
    assert err.type == "CancelledError" and ok == "ok"
    assert len(calls) == 2  # retried as any failure is
    job = q.get(h1.job_id)
    assert job.state == "dead" and job.reason == "max_attempts"
    assert w.failed == 1 and w.retried == 1 and w.handed_back == 0


def test_unknown_task_handbacks_and_delay_are_the_workers_to_set(db):
    # (Node's unknownTaskDelay/unknownTaskHandbacks and Go's fields; Python had no way)
    q = db.queue("uk")
    h = q.call("nobody_has_this")

    async def body(w):
        return await db.wait_result_async(h.job_id, timeout=30)

    _, r = run_worker(db, ["uk"], body, unknown_task_delay=0.001, unknown_task_handbacks=2)
    assert r.is_error and r.error_type == "UnknownTask" and "nobody_has_this" in r.error_message
    job = q.dead_letters()[0]
    assert job.id == h.job_id
    for bad, match in ((dict(unknown_task_handbacks=0), "unknown_task_handbacks must be an integer from 1"),
                       (dict(unknown_task_handbacks=True), "unknown_task_handbacks must be an integer"),
                       (dict(unknown_task_delay=0), "unknown_task_delay must be > 0")):
        with pytest.raises(tocsin.InvalidArgument, match=match):
            tocsin.Worker(db, ["uk"], **bad)


def test_an_outcome_the_core_refuses_ends_the_run_as_invalid_outcome():
    # as the core and the Node, Ruby and Go workers record it: a final failure naming why
    from tocsin import worker as wmod

    class Stub:
        calls = []

        def finish(self, *args):
            self.calls.append(args)
            if len(self.calls) == 1:
                raise tocsin.InvalidArgument("error_type must not contain a NUL byte")

    w = Stub()
    wmod._finish(w, ("run", wmod.ERROR, None, "Bad\x00Type", "m", None, -1))
    assert w.calls[1] == ("run", wmod.FAIL, None, "InvalidOutcome",
                          "the outcome was refused: error_type must not contain a NUL byte", None, -1)


def test_with_job_transaction_is_typed_as_the_ack_transaction():
    # `with tocsin.current_job().transaction() as tx: tx.result = ...` (the README's task):
    # __enter__ was annotated -> Transaction, so a type checker took tx for a plain
    # Transaction and refused `tx.result` ("Transaction" has no attribute "result")
    import typing
    from tocsin.db import Transaction
    for name in ("begin", "__enter__", "__aenter__"):
        hints = typing.get_type_hints(getattr(Transaction, name))
        assert isinstance(hints["return"], typing.TypeVar), (name, hints["return"])
        assert hints["self"] is hints["return"], name
