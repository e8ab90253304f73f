import datetime as dt

import pytest

import tocsin
from conftest import T0, count


def test_enqueue_claim_ack_fields(clocked):
    db = clocked
    q = db.queue("emails")
    jid = q.enqueue({"to": "ada@example.org", "n": [1, 2]}, priority=3, max_attempts=5,
                    unique_key="u1", meta={"trace": "abc"})
    assert isinstance(jid, int)
    job = q.claim("worker-1", visibility=10)
    assert isinstance(job, tocsin.Job)
    assert (job.id, job.queue, job.state, job.priority) == (jid, "emails", "processing", 3)
    assert job.payload == {"to": "ada@example.org", "n": [1, 2]}
    assert job.meta == {"trace": "abc"}
    assert (job.attempts, job.max_attempts, job.token) == (1, 5, (jid << 20) + 1)
    assert (job.run_at, job.created_at, job.lease_until) == (T0, T0, T0 + 10_000)
    assert (job.unique_key, job.worker, job.last_error, job.reason) == ("u1", "worker-1", None, None)
    assert job.expires_at == 0
    assert job.as_dict()["payload"] == job.payload
    assert q.claim("worker-2") is None
    assert job.ack() is True
    assert job.ack() is False  # done already: the lease is gone
    assert q.get(jid) is None
    assert count(db, "_tocsin_jobs") == 0


def test_payload_types(db):
    q = db.queue("q")
    values = [None, 0, -7, 1.5, "text", "ünïcødé ✓", [], {}, [1, {"a": None}], True]
    for v in values:
        q.enqueue(v)
    got = [j.payload for j in q.claim_batch(100, "w")]
    assert got == values


def test_bad_names_fail_at_once(db):
    for name in ["", "a\nb", "x" * 256]:
        with pytest.raises(tocsin.InvalidArgument, match="queue name"):
            db.queue(name)
        with pytest.raises(tocsin.InvalidArgument, match="topic"):
            db.stream(name)


def test_bad_enqueue_writes_nothing(db):
    q = db.queue("q")
    bad = [
        dict(payload=object()),
        dict(payload=float("nan")),
        dict(payload=1, priority="high"),
        dict(payload=1, delay=-1),
        dict(payload=1, delay="soon"),
        dict(payload=1, delay=1, run_at=dt.datetime.now()),
        dict(payload=1, max_attempts=0),
        dict(payload=1, max_attempts=2.5),
        dict(payload=1, expires=0),
        dict(payload=1, unique_key=""),
        dict(payload=1, unique_key=5),
        dict(payload=1, meta=[1]),
        dict(payload=1, meta={"x": object()}),
        dict(payload=1, run_at=-3),
    ]
    for kw in bad:
        payload = kw.pop("payload")
        with pytest.raises((tocsin.InvalidArgument, TypeError)):
            q.enqueue(payload, **kw)
    for name in ["", "a\x01b", "x" * 300]:
        with pytest.raises(tocsin.InvalidArgument):
            db.queue(name).enqueue(1)
    with pytest.raises(ValueError):
        db.queue("a\x00b").enqueue(1)
    with pytest.raises(tocsin.InvalidArgument):
        db.queue(5)
    assert count(db, "_tocsin_jobs") == 0


def test_priority_and_order(db):
    q = db.queue("q")
    a = q.enqueue("a")
    b = q.enqueue("b", priority=10)
    c = q.enqueue("c")
    assert [j.id for j in q.claim_batch(3, "w")] == [b, a, c]


def test_delay_and_run_at(clocked):
    db = clocked
    q = db.queue("q")
    q.enqueue("later", delay=dt.timedelta(seconds=30))
    q.enqueue("at", run_at=(T0 + 60_000) / 1000.0)
    assert q.claim("w") is None
    assert q.stats()["scheduled"] == 2
    assert q.next_deadline() == T0 + 30_000
    db.set_time(T0 + 30_000)
    assert q.claim("w").ack()  # "later" (ordered by run_at)
    assert q.get(1) is None
    db.set_time(dt.datetime.fromtimestamp((T0 + 60_000) / 1000, dt.timezone.utc))
    assert q.claim("w").payload == "at"


def test_unique_key_dedups_live_jobs(db):
    q = db.queue("q")
    a = q.enqueue(1, unique_key="k")
    assert q.enqueue(2, unique_key="k") == a
    assert db.queue("other").enqueue(3, unique_key="k") != a
    job = q.claim("w")
    job.ack()
    assert q.enqueue(4, unique_key="k") != a  # no live job holds it any more


def test_expires(clocked):
    db = clocked
    q = db.queue("q")
    jid = q.enqueue(1, expires=5)
    db.set_time(T0 + 6000)
    assert q.claim("w") is None
    dead = q.dead_letters()
    assert [(j.id, j.reason, j.state) for j in dead] == [(jid, "expired", "dead")]


def test_enqueue_many_atomic(db):
    q = db.queue("q")
    ids = q.enqueue_many([{"payload": 2, "priority": 5}, {"payload": 1}], options=True)
    ids += q.enqueue_many([{"payload": 3}])  # a dict is a payload: nothing is guessed
    assert len(ids) == 3 and ids == sorted(ids)
    with pytest.raises(tocsin.InvalidArgument):
        q.enqueue_many([{"payload": 4}, {"payload": 5, "max_attempts": 0}], options=True)
    with pytest.raises(tocsin.InvalidArgument):
        q.enqueue_many([{"payload": 6, "colour": "red"}], options=True)
    with pytest.raises(tocsin.InvalidArgument, match="payload"):
        q.enqueue_many([7], options=True)
    with pytest.raises(tocsin.PayloadTooLarge):
        db.set_max_payload(50)
        q.enqueue_many([7, "y" * 100])
    db.set_max_payload(1 << 20)
    assert q.enqueue_many([]) == []
    jobs = q.claim_batch(10, "w")
    assert [j.payload for j in jobs] == [2, 1, {"payload": 3}]


def test_claim_batch_and_ack_batch(db):
    q = db.queue("q")
    q.enqueue_many(range(10))
    jobs = q.claim_batch(4, "w")
    assert len(jobs) == 4
    assert q.ack_batch(jobs[:2] + [(jobs[2].id, jobs[2].token), (jobs[3].id, 999)]) == 3
    assert q.stats()["processing"] == 1
    with pytest.raises(tocsin.InvalidArgument):
        q.claim_batch(0, "w")
    with pytest.raises(tocsin.InvalidArgument):
        q.claim("", visibility=1)
    with pytest.raises(tocsin.InvalidArgument):
        q.claim("w", visibility=0)
    with pytest.raises(tocsin.InvalidArgument):
        q.claim("w", visibility=-5)


def test_fencing_stale_holder_gets_false(clocked):
    db = clocked
    q = db.queue("q")
    q.enqueue("work", max_attempts=5)
    first = q.claim("w1", visibility=10)
    db.set_time(T0 + 11_000)  # the lease lapses
    second = q.claim("w2", visibility=10)  # reclaimed: a new holder, a new token
    assert second.id == first.id and second.token > first.token
    assert second.attempts == 2
    assert first.heartbeat() is False
    assert first.retry(0) is False
    assert first.fail("x") is False
    assert first.ack() is False
    assert q.get(first.id).worker == "w2"
    assert second.ack() is True
    with pytest.raises(tocsin.InvalidArgument):
        q.ack(first.id)  # no token
    with pytest.raises(tocsin.InvalidArgument):
        q.ack(second, token=second.token + 1)


def test_lapsed_lease_not_reclaimed_may_still_ack(clocked):
    db = clocked
    q = db.queue("q")
    q.enqueue("work")
    job = q.claim("w1", visibility=1)
    db.set_time(T0 + 5000)
    assert job.ack() is True  # documented choice of the core: nobody else holds it


def test_retry_fail_heartbeat_cancel(clocked):
    db = clocked
    q = db.queue("q")
    jid = q.enqueue("x", max_attempts=2)
    job = q.claim("w", visibility=10)
    assert job.heartbeat(60) is True
    assert q.get(jid).lease_until == T0 + 60_000
    assert job.retry(dt.timedelta(seconds=5), error="boom") is True
    j = q.get(jid)
    assert (j.state, j.run_at, j.last_error) == ("scheduled", T0 + 5000, "boom")
    db.set_time(T0 + 5000)
    job = q.claim("w")
    assert job.retry(error="again") is True  # attempts spent: dead
    dead = q.get(jid)
    assert (dead.state, dead.reason, dead.last_error) == ("dead", "max_attempts", "again")
    assert q.requeue(jid) is True and q.requeue(jid) is False
    # a fresh budget of attempts; the count goes on, so no token repeats
    assert (q.get(jid).attempts, q.get(jid).max_attempts) == (2, 4)
    job = q.claim("w")
    assert (job.attempts, job.max_attempts) == (3, 4)
    assert job.fail("fatal") is True
    assert q.get(jid).reason == "failed"
    other = q.enqueue("y")
    assert q.cancel(other) is True and q.cancel(other) is False
    assert q.get(other).reason == "cancelled"
    assert q.cancel(123456) is False
    with pytest.raises(tocsin.InvalidArgument):
        q.heartbeat(job, 0)
    with pytest.raises(tocsin.InvalidArgument):
        q.retry(job, -1)


def test_backoff_retry_uses_core_policy(clocked):
    db = clocked
    q = db.queue("q")
    jid = q.enqueue("x", max_attempts=5)
    job = q.claim("w")
    assert job.retry() is True
    run_at = q.get(jid).run_at
    # first attempt: base 1 s with equal jitter -> between 0.5 s and 1 s
    assert T0 + 500 <= run_at <= T0 + 1000


def test_pause_resume_stats(clocked):
    db = clocked
    q = db.queue("q")
    q.enqueue(1)
    q.pause()
    assert q.paused is True
    assert q.claim("w") is None
    assert q.stats()["paused"] is True
    q.enqueue(2)  # enqueue still works
    q.resume()
    assert q.paused is False
    db.set_time(T0 + 2500)
    s = q.stats()
    assert (s["queue"], s["pending"], s["processing"], s["dead"]) == ("q", 2, 0, 0)
    assert s["oldest_pending_age_ms"] == 2500
    q.claim("w")
    assert q.stats()["processing"] == 1
    assert {x["queue"] for x in db.stats()} == {"q"}


def test_dead_letters_requeue_purge(clocked):
    db = clocked
    q = db.queue("q")
    ids = [q.enqueue(i) for i in range(5)]
    for job in q.claim_batch(5, "w"):
        job.fail("no")
    dead = q.dead_letters()
    assert [j.id for j in dead] == ids
    assert [j.id for j in q.dead_letters(after_id=ids[1], limit=2)] == ids[2:4]
    assert db.queue("other").dead_letters() == []
    assert q.requeue(dead[0]) is True
    db.set_time(T0 + 10_000)
    assert q.purge(before=(T0 + 1) / 1000) == 4
    assert q.dead_letters() == []
    assert q.purge() == 0
    with pytest.raises(tocsin.InvalidArgument):
        q.dead_letters(limit=0)


def test_get_unknown_and_job_eq(db):
    q = db.queue("q")
    assert q.get(999) is None
    jid = q.enqueue(1)
    assert q.get(jid) == q.get(jid)
    assert "Job %d" % jid in repr(q.get(jid))
