"""Tasks and workers across processes: results, errors, graceful shutdown, scheduler failover."""
import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import tocsin
from conftest import T0

APP = textwrap.dedent('''
    import asyncio, os, time
    import tocsin

    db = tocsin.open(os.environ["TOCSIN_TEST_DB"])
    emails = db.queue("emails")

    @emails.task(name="send_email", retries=1, backoff=0.01)
    def send_email(to, subject="hello"):
        if to == "bad":
            raise ValueError("no such address: " + to)
        return {"sent": to, "subject": subject, "pid": os.getpid()}

    @emails.task(name="sleepy")
    def sleepy(seconds):
        time.sleep(seconds)
        return seconds

    @emails.task(name="async_add", timeout=5)
    async def async_add(a, b):
        await asyncio.sleep(0.01)
        return a + b

    @emails.periodic("@every 1s", name="beat")
    def beat():
        return "beat"
''')


@pytest.fixture
def app(tmp_path, path):
    (tmp_path / "tasksapp.py").write_text(APP)
    env = dict(os.environ, TOCSIN_TEST_DB=path, PYTHONPATH=str(tmp_path))
    procs = []

    def start(*extra, worker_id=None):
        cmd = [sys.executable, "-m", "tocsin", "worker", "tasksapp:db", "--queue", "emails",
               "--concurrency", "2", *extra]
        if worker_id:
            cmd += ["--worker-id", worker_id]
        p = subprocess.Popen(cmd, cwd=str(tmp_path), env=env, stderr=subprocess.PIPE, text=True)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def test_envelope_is_language_neutral(db):
    q = db.queue("emails")

    @q.task(name="send_email", retries=4, result_ttl=60)
    def send_email(to):
        return to

    h = send_email("ada@example.org")
    job = q.get(h.job_id)
    assert job.payload == {"task": "send_email", "args": ["ada@example.org"], "kwargs": {},
                           "result_ttl_ms": 60000}
    assert job.max_attempts == 5
    h2 = q.call("other_runtime_task", 1, kwargs={"x": 2})
    # a call by name leaves the result ttl to the task's default at the worker (the core's)
    assert q.get(h2.job_id).payload == {"task": "other_runtime_task", "args": [1],
                                        "kwargs": {"x": 2}}
    assert send_email.run("direct") == "direct"
    with pytest.raises(tocsin.InvalidArgument):
        send_email.enqueue(("x",), tx="no")
    with pytest.raises(tocsin.InvalidArgument):
        q.task(name="bad", retries=-1)(lambda: None)
    with pytest.raises(tocsin.InvalidArgument):
        q.periodic("not a cron")(lambda: None)


def test_call_by_name_takes_job_options(clocked):
    db = clocked
    q = db.queue("emails")
    h = q.call("send", 1, kwargs={"x": 2}, priority=7, delay=30, max_attempts=2, expires=600,
               unique_key="send-1", meta={"src": "test"}, result_ttl=60, timeout=5)
    job = q.get(h.job_id)
    assert job.payload == {"task": "send", "args": [1], "kwargs": {"x": 2},
                           "result_ttl_ms": 60000, "timeout_ms": 5000}
    assert (job.priority, job.max_attempts, job.unique_key, job.meta) == (7, 2, "send-1", {"src": "test"})
    assert job.run_at == T0 + 30_000 and job.expires_at == T0 + 600_000
    # the unique key: a live job with it is the answer
    assert q.call("send", 1, unique_key="send-1").job_id == h.job_id
    h2 = q.call("send", run_at=T0 / 1000 + 90)
    assert q.get(h2.job_id).run_at == T0 + 90_000
    with pytest.raises(RuntimeError):  # tx=: rolled back with the transaction
        with db.transaction() as tx:
            h3 = q.call("send", 3, tx=tx)
            raise RuntimeError
    assert q.get(h3.job_id) is None
    # bad values say what was wrong
    for bad, what in (({"max_attempts": 0}, "max_attempts"), ({"priority": "high"}, "priority"),
                      ({"delay": -1}, "delay"), ({"delay": 1, "run_at": T0 / 1000}, "delay or run_at"),
                      ({"unique_key": 5}, "unique_key"), ({"expires": 0}, "expires"),
                      ({"result_ttl": -5}, "result_ttl"), ({"meta": [1]}, "meta")):
        with pytest.raises(tocsin.InvalidArgument, match=what):
            q.call("send", 1, **bad)
    with pytest.raises(tocsin.InvalidArgument, match="kwargs must be a dict"):
        q.call("send", 1, kwargs=[2])
    # the task's own keyword arguments go in kwargs=: anything else is named
    with pytest.raises(tocsin.InvalidArgument, match=r"unknown option\(s\) retries.*kwargs="):
        q.call("send", 1, retries=3)


def test_task_enqueue_takes_job_options(clocked):
    db = clocked
    q = db.queue("emails")

    @q.task(name="t", retries=4)
    def t(a):
        return a

    job = q.get(t.enqueue([1], max_attempts=2, expires=60, priority=3, unique_key="u").job_id)
    assert (job.max_attempts, job.priority, job.unique_key) == (2, 3, "u")
    assert job.expires_at == T0 + 60_000
    assert q.get(t.enqueue([2]).job_id).max_attempts == 5  # the task's retries + 1
    with pytest.raises(tocsin.InvalidArgument, match="max_attempts"):
        t.enqueue([1], max_attempts=0)
    with pytest.raises(tocsin.InvalidArgument, match="expires"):
        t.enqueue([1], expires=-1)


def test_task_in_transaction_rolls_back(db):
    q = db.queue("emails")

    @q.task(name="t")
    def t():
        return 1

    with pytest.raises(RuntimeError):
        with db.transaction() as tx:
            t.enqueue(tx=tx)
            raise RuntimeError
    assert q.stats()["pending"] == 0


def test_results_across_processes(app, db):
    worker = app()
    q = db.queue("emails")
    send = q.call  # the caller does not need the task's code
    ok = send("send_email", "ada@example.org", kwargs={"subject": "welcome"})
    bad = send("send_email", "bad")
    add = q.call("async_add", 2, 3)
    unknown = q.call("nobody_has_this")
    res = ok.get(timeout=30)
    assert res["sent"] == "ada@example.org" and res["subject"] == "welcome"
    assert res["pid"] == worker.pid  # ran in the worker process
    with pytest.raises(tocsin.TaskError) as ei:
        bad.get(timeout=30)
    assert ei.value.type == "ValueError" and "no such address" in ei.value.message
    assert asyncio.run(add.result(timeout=30)) == 5
    # a task this worker lacks is handed back with a delay (a rolling deploy), not killed
    job = _wait_state(db, unknown.job_id, "scheduled")
    assert "UnknownTask" in job.last_error and job.attempts == 1
    with pytest.raises(tocsin.Timeout, match="no result"):
        unknown.get(timeout=0.1)
    # the error is data any runtime can read
    r = db.result(bad.job_id)
    assert (r.error_type, r.is_error) == ("ValueError", True)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def _wait_state(db, job_id, state, timeout=30):
    end = time.monotonic() + timeout
    with db.subscribe() as wake:
        while time.monotonic() < end:
            job = db.queue("emails").get(job_id)
            if job is not None and job.state == state:
                return job
            wake.wait(timeout=0.5)
    raise AssertionError("job %d never reached %s" % (job_id, state))


def test_sigterm_mid_job_finishes_within_deadline(app, db):
    worker = app("--shutdown-timeout", "20")
    h = db.queue("emails").call("sleepy", 0.5)
    _wait_state(db, h.job_id, "processing")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    assert h.get(timeout=1) == 0.5  # finished, result stored, job acked
    assert db.queue("emails").get(h.job_id) is None


def test_sigterm_mid_job_hands_back_after_deadline(app, db):
    worker = app("--shutdown-timeout", "0.3")
    h = db.queue("emails").call("sleepy", 30)
    _wait_state(db, h.job_id, "processing")
    t0 = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    assert time.monotonic() - t0 < 15
    job = db.queue("emails").get(h.job_id)
    assert job is not None and job.state == "pending"  # handed back, not lost
    assert "shutdown" in job.last_error
    assert "job.handed_back" in worker.stderr.read()


def test_scheduler_leader_failover(app, db):
    a = app("--scheduler-ttl", "1", worker_id="worker-A")

    def holder():
        return db.lock_holder("tocsin.scheduler")[0]

    end = time.monotonic() + 30
    while holder() != "worker-A" and time.monotonic() < end:
        time.sleep(0.05)
    assert holder() == "worker-A"
    b = app("--scheduler-ttl", "1", worker_id="worker-B")
    time.sleep(1.0)
    assert holder() == "worker-A"  # B stands by
    a.kill()  # no resignation: B must take over when the lease lapses
    a.wait(10)
    end = time.monotonic() + 30
    while holder() != "worker-B" and time.monotonic() < end:
        time.sleep(0.05)
    assert holder() == "worker-B"
    fired = db.get_schedule("periodic:beat").fired_count
    end = time.monotonic() + 30
    while db.get_schedule("periodic:beat").fired_count <= fired and time.monotonic() < end:
        time.sleep(0.1)
    assert db.get_schedule("periodic:beat").fired_count > fired  # the new leader fires
    b.send_signal(signal.SIGTERM)
    assert b.wait(30) == 0
    assert holder() is None  # a clean stop resigns


def test_cli_names_a_bad_target(tmp_path):
    (tmp_path / "app.py").write_text("import tocsin\ndb = tocsin.open('a.db')\n")
    for target, msg in [("nosuch:db", "cannot import 'nosuch'"), ("app:nope", "has no attribute 'nope'"),
                        ("app", "must be module:attribute")]:
        p = subprocess.run([sys.executable, "-m", "tocsin", "worker", target, "--queue", "q"],
                           cwd=str(tmp_path), capture_output=True, text=True, timeout=60)
        assert p.returncode != 0
        assert msg in p.stderr and "Traceback" not in p.stderr


def test_cli_names_a_target_callable_that_needs_arguments(tmp_path):
    # a callable target is a factory called without arguments; one that needs some
    # (json:dumps named by mistake) raised a bare TypeError traceback
    (tmp_path / "app.py").write_text("import tocsin\ndef make(path):\n    return tocsin.open(path)\n"
                                     "def good():\n    return 42\n")
    for target, msg in [("app:make", "app:make is a callable that needs arguments"),
                        ("json:dumps", "json:dumps is a callable that needs arguments"),
                        ("app:good", "app:good is not a tocsin.Database")]:
        p = subprocess.run([sys.executable, "-m", "tocsin", "worker", target, "--queue", "q"],
                           cwd=str(tmp_path), capture_output=True, text=True, timeout=60)
        assert p.returncode != 0
        assert msg in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_cli_names_a_bad_option(tmp_path):
    (tmp_path / "app.py").write_text("import tocsin\ndb = tocsin.open('a.db')\n")
    for extra, msg in [(["--concurrency", "0"], "concurrency must be"),
                       (["--shutdown-timeout", "-1"], "shutdown_timeout must be"),
                       (["--log-level", "loud"], "invalid choice")]:
        p = subprocess.run([sys.executable, "-m", "tocsin", "worker", "app:db", "--queue", "q"] + extra,
                           cwd=str(tmp_path), capture_output=True, text=True, timeout=60)
        assert p.returncode != 0
        assert msg in p.stderr and "Traceback" not in p.stderr
