import pytest

import tocsin
from conftest import T0, count


def test_results_values_null_errors_ttl(clocked):
    db = clocked
    q = db.queue("q")
    a, b, c = q.enqueue(1), q.enqueue(2), q.enqueue(3)
    assert db.result(a) is None
    db.save_result(a, {"ok": [1, 2]}, ttl=10)
    db.save_result(b, None)
    db.save_error(c, "ValueError", "bad input")
    ra, rb, rc = db.result(a), db.result(b), db.result(c)
    assert (ra.value, ra.is_error, ra.expires_at) == ({"ok": [1, 2]}, False, T0 + 10_000)
    assert rb is not None and rb.value is None and not rb.is_error  # a stored JSON null
    assert (rc.is_error, rc.error_type, rc.error_message) == (True, "ValueError", "bad input")
    db.set_time(T0 + 11_000)
    assert db.result(a) is None  # expired
    assert db.prune()["results"] == 1
    assert db.delete_result(b) is True and db.delete_result(b) is False
    with pytest.raises(tocsin.InvalidArgument):
        db.save_result(a, object())
    with pytest.raises(tocsin.InvalidArgument):
        db.save_result(a, 1, ttl=0)
    with pytest.raises(tocsin.InvalidArgument):
        db.save_error(a, "", "x")


def test_result_with_ack_in_one_transaction(db):
    q = db.queue("q")
    jid = q.enqueue(1)
    job = q.claim("w")
    with pytest.raises(RuntimeError):
        with db.transaction() as tx:
            db.save_result(jid, "done", tx=tx)
            job.ack(tx=tx)
            raise RuntimeError
    assert db.result(jid) is None and q.get(jid).state == "processing"
    with db.transaction() as tx:
        db.save_result(jid, "done", tx=tx)
        assert job.ack(tx=tx)
    assert db.result(jid).value == "done"


def test_wait_result_timeout_and_dead_job(clocked):
    db = clocked
    q = db.queue("q")
    jid = q.enqueue(1, max_attempts=1)
    with pytest.raises(tocsin.Timeout):
        db.wait_result(jid, timeout=0.05)
    q.claim("w").fail("broken")
    r = db.wait_result(jid, timeout=1)
    assert r.is_error and r.error_type == "JobDead" and "broken" in r.error_message
    with pytest.raises(tocsin.NotFound):  # no job and no result: nothing to wait for
        db.wait_result(987654, timeout=1)
    # a task handle of a job that died without a result is done, and get() says why
    h = tocsin.TaskHandle(q, q.enqueue(2, max_attempts=1))
    assert not h.done()
    q.claim("w").fail("broken again")
    assert h.done()
    with pytest.raises(tocsin.TaskError, match="broken again"):
        h.get(0)


def test_locks_fencing(clocked):
    db = clocked
    a = db.lock("report", ttl=10, owner="A")
    b = db.lock("report", ttl=10, owner="B")
    assert a.try_acquire() and a.token == 1
    assert a.held
    assert not b.try_acquire() and b.token == 0
    assert b.acquire(timeout=0.05) is False
    assert db.lock_holder("report")[:2] == ("A", 1)
    assert a.renew() is True
    db.set_time(T0 + 11_000)  # A's lease lapses
    assert b.acquire(timeout=1) and b.token == 2  # a new holder, a larger token
    assert a.renew() is False and a.release() is False  # stale holder
    assert b.release() is True
    with db.lock("report", ttl=5, owner="C") as c:
        assert c.token == 3
    assert db.lock_holder("report")[0] is None
    # renew() of a Lock holding nothing (never acquired, or released) says so; the
    # core's refusal named the token ("token must be >= 1"), which the caller never gave
    with pytest.raises(tocsin.InvalidArgument, match=r"^lock 'fresh' is not held by this Lock \(acquire it first\)$"):
        db.lock("fresh", ttl=5).renew()
    with pytest.raises(tocsin.InvalidArgument, match="is not held by this Lock"):
        a.renew()  # released above
    with pytest.raises(tocsin.InvalidArgument):
        db.lock("x", ttl=0)
    with pytest.raises(tocsin.InvalidArgument):
        db.lock("", ttl=1).try_acquire()


def test_rate_limit_sliding_window(clocked):
    db = clocked
    rl = db.rate_limit("api", 3, 1.0)
    got = [rl.try_acquire() for _ in range(4)]
    assert [d.allowed for d in got] == [True, True, True, False]
    assert got[2].remaining == 0 and got[3].retry_after == pytest.approx(1.0)
    db.set_time(T0 + 500)
    assert not rl.try_acquire().allowed  # no burst at a window edge
    db.set_time(T0 + 1000)
    assert rl.try_acquire().allowed
    assert rl.reset() >= 1
    assert rl.try_acquire().remaining == 2
    with pytest.raises(tocsin.InvalidArgument):
        db.rate_limit("api", 0, 1).try_acquire()
    with pytest.raises(tocsin.InvalidArgument):
        db.rate_limit("api", 1, 0)


def test_update_schedule_changes_only_what_is_given(clocked):
    # Regression: update_schedule("s", priority=9) used to reset max_attempts, catch_up,
    # max_catch_up, job_expires and meta to their defaults (the SQL function kept them).
    db = clocked
    db.schedule("s", "*/5 * * * *", "q", {"n": 1}, priority=2, max_attempts=5,
                job_expires=60, catch_up="all", max_catch_up=7, meta={"team": "ops"})
    before = db.get_schedule("s")
    db.update_schedule("s", priority=9)
    s = db.get_schedule("s")
    assert s.priority == 9
    assert (s.cron, s.queue, s.payload, s.max_attempts, s.job_expires_ms, s.catch_up,
            s.max_catch_up, s.local_time, s.meta, s.next_fire) == (
        before.cron, before.queue, before.payload, 5, 60000, "all", 7, False, {"team": "ops"},
        before.next_fire)
    db.update_schedule("s", max_catch_up=3, meta={"team": "dev"})
    s = db.get_schedule("s")
    assert (s.priority, s.max_attempts, s.catch_up, s.max_catch_up, s.meta) == (9, 5, "all", 3, {"team": "dev"})
    db.update_schedule("s", meta=None)  # a given None removes the meta
    assert db.get_schedule("s").meta is None and db.get_schedule("s").priority == 9
    db.update_schedule("s", cron="@hourly")  # no option given: every option kept
    s = db.get_schedule("s")
    assert (s.cron, s.priority, s.max_attempts, s.catch_up, s.max_catch_up) == ("@hourly", 9, 5, "all", 3)
    with pytest.raises(tocsin.InvalidArgument):
        db.update_schedule("s", max_attempts=0)
    with pytest.raises(TypeError):
        db.update_schedule("s", colour="red")
    assert db.get_schedule("s").max_attempts == 5
    with pytest.raises(tocsin.NotFound):
        db.update_schedule("missing", priority=1)


def test_update_schedule_agrees_with_sql(path):
    # The binding and the SQL function change only what is named, the same way.
    import sqlite3
    with tocsin.open(path) as db:
        db.schedule("s", "@daily", "q", priority=2, max_attempts=5, catch_up="all", meta={"a": 1})
        db.update_schedule("s", priority=9)
        by_binding = db.get_schedule("s")
        db.schedule("s", "@daily", "q", priority=2, max_attempts=5, catch_up="all", meta={"a": 1})
    conn = sqlite3.connect(path)
    tocsin.load(conn)
    conn.execute("""SELECT tocsin_schedule_update('s', '{"priority":9}')""")
    conn.commit()
    conn.close()
    with tocsin.open(path) as db:
        by_sql = db.get_schedule("s")
    fields = ("priority", "max_attempts", "job_expires_ms", "catch_up", "max_catch_up",
              "local_time", "meta", "payload", "cron", "queue")
    assert [getattr(by_binding, k) for k in fields] == [getattr(by_sql, k) for k in fields]
    assert (by_sql.priority, by_sql.max_attempts, by_sql.catch_up, by_sql.meta) == (9, 5, "all", {"a": 1})


def test_cron_next():
    assert tocsin.cron_next("*/5 * * * *", 1704067200) == 1704067500000  # 2024-01-01T00:05Z
    assert tocsin.cron_next("@every 90s", 1704067200) == 1704067200000 + 90_000  # multiples of 90 s since the epoch
    with pytest.raises(tocsin.InvalidArgument, match="minute"):
        tocsin.cron_next("61 * * * *")


def test_schedules_and_tick(clocked):
    db = clocked
    nxt = db.schedule("nightly", "0 3 * * *", "reports", {"kind": "daily"}, priority=2,
                      catch_up="once", meta={"team": "ops"})
    assert nxt > T0
    s = db.get_schedule("nightly")
    assert (s.cron, s.queue, s.payload, s.priority, s.meta, s.catch_up) == (
        "0 3 * * *", "reports", {"kind": "daily"}, 2, {"team": "ops"}, "once")
    assert [x.name for x in db.schedules()] == ["nightly"]
    assert db.scheduler_next_fire() == nxt
    assert db.scheduler_tick() == 0
    db.set_time(nxt)
    assert db.scheduler_tick() == 1
    assert db.scheduler_tick() == 0  # each boundary fires once
    job = db.queue("reports").claim("w")
    assert job.payload == {"kind": "daily"} and job.meta["tocsin_schedule"] == "nightly"
    assert job.ack()
    db.pause_schedule("nightly")
    assert db.get_schedule("nightly").paused
    db.resume_schedule("nightly")
    db.update_schedule("nightly", payload={"kind": "v2"})
    assert db.get_schedule("nightly").payload == {"kind": "v2"}
    assert db.unschedule("nightly") is True and db.unschedule("nightly") is False
    with pytest.raises(tocsin.InvalidArgument):
        db.schedule("bad", "not cron", "q")
    with pytest.raises(tocsin.InvalidArgument):
        db.schedule("bad", "* * * * *", "q", catch_up="sometimes")
    with pytest.raises(tocsin.NotFound):
        db.pause_schedule("missing")
    assert count(db, "_tocsin_jobs") == 0


def test_schedule_a_task_by_name_and_redefinitions_are_reported(db, caplog):
    import logging
    q = db.queue("reports")

    @q.task(name="report")
    def report(kind, days=1):
        return kind

    nxt = db.schedule("nightly", "0 3 * * *", task=report, args=["sales"], kwargs={"days": 7})
    s = db.get_schedule("nightly")
    assert s.queue == "reports" and nxt == s.next_fire
    assert s.payload == {"task": "report", "args": ["sales"], "kwargs": {"days": 7},
                         "result_ttl_ms": 86400000}
    db.schedule("by-name", "@hourly", "other", task="remote_task", args=[1])
    assert db.get_schedule("by-name").payload == {"task": "remote_task", "args": [1], "kwargs": {}}
    with pytest.raises(tocsin.InvalidArgument):
        db.schedule("bad", "@hourly", task=report, args=[1, 2, 3])  # does not fit report()
    with pytest.raises(tocsin.InvalidArgument):
        db.schedule("bad", "@hourly", task="remote_task")  # a name needs queue=
    # the same definition again: silent; another one (a racing deploy): reported
    with caplog.at_level(logging.WARNING, logger="tocsin"):
        db.schedule("nightly", "0 3 * * *", task=report, args=["sales"], kwargs={"days": 7})
        assert db.last_schedule_change is None and not caplog.records
        db.schedule("nightly", "0 4 * * *", task=report, args=["sales"], kwargs={"days": 7})
    assert db.last_schedule_change["name"] == "nightly"
    assert db.last_schedule_change["before"][0] == "0 3 * * *"
    assert db.last_schedule_change["after"][0] == "0 4 * * *"
    assert any("redefined" in r.getMessage() for r in caplog.records)


def test_default_owners_come_from_the_core_and_a_worker_takes_one(db):
    import os
    import re
    form = re.compile(r"^.+:%d:[0-9a-f]{12}$" % os.getpid())
    a, b = db.lock("x"), db.lock("x")
    assert form.match(a.owner) and form.match(b.owner) and a.owner != b.owner
    assert a.try_acquire() and not b.try_acquire()  # two default owners never share a lock
    w = tocsin.Worker(db, ["q"], scheduler=False)
    assert form.match(w.worker_id)
    assert tocsin.Worker(db, ["q"], worker_id="w-7", scheduler=False).worker_id == "w-7"


def test_async_lock_waits_off_the_loop_and_bad_names_are_refused_up_front(db):
    import asyncio

    for make in (lambda: db.lock(None), lambda: db.lock(""), lambda: db.lock("l", owner=5),
                 lambda: db.lock("l", owner=""), lambda: db.rate_limit(None, 1, 1)):
        with pytest.raises(tocsin.InvalidArgument):
            make()
    holder = db.lock("l", ttl=30)
    assert holder.acquire()

    async def main():
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.ensure_future(tick())
        waiter = db.lock("l", ttl=30)
        assert await waiter.acquire_async(timeout=0.2) is False  # held: times out
        asyncio.get_running_loop().call_later(0.1, holder.release)
        async with waiter:  # acquired when the holder releases
            assert waiter.held
            seen = ticks
        ticker.cancel()
        return seen

    assert asyncio.run(main()) > 5  # the loop ran while the lock was awaited
    assert db.lock_holder("l")[0] is None


def test_a_blocked_lock_wait_reads_instead_of_retrying_its_write(db, monkeypatch):
    # each failed attempt was a write whose commit woke the waiter's own subscription:
    # acquire(timeout=...) spun through tens of thousands of attempts at full CPU
    import threading

    holder = db.lock("l", ttl=30)
    assert holder.acquire()
    waiter = db.lock("l", ttl=30)
    attempts = []
    real = type(waiter).try_acquire
    monkeypatch.setattr(type(waiter), "try_acquire", lambda self: attempts.append(1) or real(self))
    assert waiter.acquire(timeout=0.3) is False
    assert len(attempts) == 1
    threading.Timer(0.1, holder.release).start()
    assert waiter.acquire(timeout=10) and waiter.held
    waiter.release()
    other = tocsin.open(db.path)
    try:
        stuck = other.lock("l")
        assert holder.acquire()
        out = []
        t = threading.Thread(target=lambda: out.append(pytest.raises(tocsin.Closed, stuck.acquire)))
        t.start()
        threading.Timer(0.1, other.close).start()
        t.join(10)
        assert not t.is_alive() and out
    finally:
        other.close()


@pytest.mark.parametrize("bad", [dict(catch_up=["all"]), dict(catch_up={}), dict(catch_up=None),
                                 dict(local_time="no"), dict(local_time=1)])
def test_schedule_catch_up_and_local_time_of_the_wrong_type_are_refused(db, bad):
    # a list or dict catch_up raised TypeError (unhashable), and local_time="no" made a
    # schedule on local time
    with pytest.raises(tocsin.InvalidArgument, match=next(iter(bad))):
        db.schedule("s", "* * * * *", "q", None, **bad)
    assert db.schedules() == []
    db.schedule("s", "* * * * *", "q", None)
    with pytest.raises(tocsin.InvalidArgument, match=next(iter(bad))):
        db.update_schedule("s", **bad)
    assert db.schedules()[0].local_time is False and db.schedules()[0].catch_up == "once"
