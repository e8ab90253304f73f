"""A bad duration or instant is refused naming the Python argument, in seconds (the
core's messages name its C argument, delay_ms, in milliseconds), and nothing is written."""
import datetime as dt
import re

import pytest

import tocsin
from tocsin import _tocsin

from conftest import count

BIG = 10 ** 12  # seconds: 1000 times the core's bound
MAX_S = "%d.%03d" % divmod(_tocsin.MAX_TIME_MS, 1000)


def refused(match, fn, *args, **kwargs):
    with pytest.raises(tocsin.InvalidArgument, match=match) as e:
        fn(*args, **kwargs)
    assert isinstance(e.value, ValueError)
    assert "_ms" not in str(e.value) and " ms" not in str(e.value), str(e.value)
    return str(e.value)


def test_the_bound_is_the_cores():
    assert _tocsin.MAX_TIME_MS == 253402300799999
    assert MAX_S == "253402300799.999"


def test_enqueue_durations_and_instants_name_the_argument_in_seconds(db):
    q = db.queue("q")
    msg = refused("^delay must be at most %s s \\(about 8030 years\\), not %d s$" % (MAX_S, BIG),
                  q.enqueue, {}, delay=BIG)
    assert msg.endswith("not 1000000000000 s")
    refused("^delay must be at most .* not 1e\\+300 s$", q.enqueue, {}, delay=1e300)
    refused("^delay must be at most .* not 1e\\+308 s$", q.enqueue, {}, delay=1e308)
    refused("^delay must be at most .* not 1.000e\\+400 s$", q.enqueue, {}, delay=10 ** 400)
    refused("^delay must be at most .* not 999999999 days, 23:59:59.999999$",
            q.enqueue, {}, delay=dt.timedelta.max)
    refused("^delay must be finite$", q.enqueue, {}, delay=float("inf"))
    refused("^delay must be finite$", q.enqueue, {}, delay=float("nan"))
    refused("^delay must be >= 0$", q.enqueue, {}, delay=-1)
    refused("^expires must be at most %s s .* not %d s$" % (MAX_S, BIG), q.enqueue, {}, expires=BIG)
    refused("^run_at must be at most %s s since the epoch \\(9999-12-31 23:59:59.999 UTC\\), not %d$"
            % (MAX_S, BIG), q.enqueue, {}, run_at=BIG)
    refused("^run_at must be at most 9999-12-31 23:59:59.999 UTC, not 9999-12-31 23:59:59.999999$",
            q.enqueue, {}, run_at=dt.datetime.max)
    refused("^run_at must be a positive instant$", q.enqueue, {}, run_at=float("nan"))
    refused("^give delay or run_at, not both$", q.enqueue, {}, delay=1, run_at=2e9)
    task = q.task()(lambda: 1)
    refused("^delay must be at most", task.enqueue, (), delay=BIG)
    assert q.stats()["pending"] + q.stats()["scheduled"] == 0
    # the bound itself is accepted
    q.enqueue({}, delay=_tocsin.MAX_TIME_MS / 1000)
    q.enqueue({}, run_at=dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=dt.timezone.utc))
    assert q.stats()["scheduled"] == 2


def test_job_calls_name_the_argument_in_seconds(db):
    q = db.queue("q")
    q.enqueue({})
    refused("^visibility must be at most %s s" % MAX_S, q.claim, "w", visibility=BIG)
    refused("^visibility must be at most", q.claim_batch, 2, "w", visibility=BIG)
    assert q.stats()["processing"] == 0
    job = q.claim("w")
    refused("^delay must be at most", q.retry, job, BIG)
    refused("^delay must be at most", job.retry, BIG)
    refused("^extend must be at most", q.heartbeat, job, BIG)
    refused("^timeout must be at most", q.wait, BIG)
    refused("^before must be at most %s s since the epoch" % MAX_S, q.purge, before=BIG)
    assert q.stats()["processing"] == 1 and q.stats()["pending"] == 0
    refused("^ttl must be at most %s s" % MAX_S, db.save_result, job.id, 1, ttl=BIG)
    assert count(db, "_tocsin_results") == 0


def test_trim_and_prune_name_their_keywords(db):
    t = db.stream("t")
    t.publish(1)
    refused("^trim needs max_age, max_count or below_consumers$", t.trim)
    refused("^max_age must be at most %s s" % MAX_S, t.trim, max_age=BIG)
    db.notify("c", "x")
    refused("^max_age must be at most", db.prune_notifications, max_age=BIG)
    refused("^notifications_max_age must be at most", db.prune, notifications_max_age=BIG)
    refused("^set_notify_autotrim needs max_age or max_keep", db.set_notify_autotrim)
    refused("^max_age must be at most", db.set_notify_autotrim, max_age=BIG)
    refused("^max_keep and one_in must be >= 0$", db.set_notify_autotrim, max_keep=1, one_in=-1)
    db.set_notify_autotrim(one_in=0)  # off needs neither
    assert len(t.read()) == 1 and count(db, "_tocsin_notifications") == 1


def test_leases_and_windows_are_bounded_to_366_days_in_seconds(db):
    days400 = 400 * 86400
    refused("^ttl must be at most 31622400 s \\(366 days\\), not %d s$" % days400,
            db.lock, "l", ttl=days400)
    refused("^ttl must be at most 31622400 s", db.lock("l", ttl=1).renew, days400)
    refused("^per must be at most 31622400 s \\(366 days\\), not 400 days, 0:00:00$",
            db.rate_limit, "r", 1, dt.timedelta(days=400))
    assert db.lock_holder("l")[0] is None
    refused("^scheduler_ttl must be at most 31622400 s", tocsin.Worker, db, ["q"], scheduler_ttl=days400)
    refused("^visibility must be at least 0.003 s, not 0.002 s$", tocsin.Worker, db, ["q"],
            visibility=0.002)
    refused("^visibility must be at most", tocsin.Worker, db, ["q"], visibility=BIG)


def test_other_durations_and_instants_name_the_argument(db, path):
    q = db.queue("q")
    refused("^backoff must be at most", lambda: q.task(backoff=BIG)(lambda: 1))
    refused("^timeout must be at most", lambda: q.task(timeout=BIG)(lambda: 1))
    refused("^result_ttl must be at most", lambda: q.task(result_ttl=BIG)(lambda: 1))
    refused("^job_expires must be at most", db.schedule, "s", "* * * * *", "q", job_expires=BIG)
    assert count(db, "_tocsin_schedules") == 0
    refused("^after must be at most %s s since the epoch" % MAX_S, tocsin.cron_next, "* * * * *", BIG)
    refused("^busy_timeout must be at most 2147483.647 s \\(about 24 days\\)", tocsin.open, path,
            busy_timeout=10 ** 7)
    refused("^timeout must be at most", db.wait_result, 1, BIG)
    assert re.search("at most", refused("timeout", db.subscribe().wait, BIG))


def test_values_the_c_layer_cannot_take_are_refused_naming_the_argument(db, path):
    """An integer beyond its C type, a str with a lone surrogate or a NUL character
    (values of the right type that PyArg cannot convert) raised messages naming a C
    function ("enqueue(): int too big to convert", "check_name(): embedded null
    character", "'utf-8' codec can't encode..."): InvalidArgument naming the
    argument now, and nothing is written."""
    q, s = db.queue("q"), db.stream("s")
    big = 10 ** 30
    most = "must be at most 9223372036854775807, not 1.000e\\+30$"

    def bad(match, fn, *args, **kwargs):
        with pytest.raises(tocsin.InvalidArgument, match=match) as e:
            fn(*args, **kwargs)
        assert "()" not in str(e.value) and "convert" not in str(e.value), str(e.value)

    bad("^priority " + most, q.enqueue, 1, priority=big)
    bad("^priority " + most, q.enqueue_many, [{"payload": 1, "priority": big}], options=True)
    bad("^job_id " + most, q.ack, big, 1)
    bad("^job_id " + most, q.get, big)
    bad("^the job id of jobs\\[0\\] must be an integer from -9223372036854775808 to "
        "9223372036854775807, not 1000000000000000000000000000000$", q.ack_batch, [(big, 1)])
    bad("^ids\\[0\\] " + most, db._h.ack_batch, [big], [1])  # the extension's own names
    bad("^n " + most, q.claim_batch, big, "w")
    bad("^limit " + most, q.dead_letters, limit=big)
    bad("^after " + most, s.read, big)
    bad("^limit " + most, db.rate_limit("r", big, 1).try_acquire)
    bad("^max_payload_bytes " + most, tocsin.open, path, max_payload_bytes=big)
    bad("^time " + most, db.set_time, big)
    bad("^parameter 1 " + most, db.execute, "SELECT ?", [big])
    bad("^priority must be at least -9223372036854775808, not -1.000e\\+30$", q.enqueue, 1, priority=-big)
    surrogate = "is not valid UTF-8 text: it holds a lone surrogate \\(U\\+D800\\)$"
    bad("^payload " + surrogate, q.enqueue, "\ud800")
    bad("^payload " + surrogate, s.publish, {"k": "\ud800"})
    bad("^payload " + surrogate, db.notify, "c", "\ud800")
    bad("^queue name " + surrogate, db.queue, "\ud800")
    bad("^error " + surrogate, q.retry, 1, token=1, error="\ud800")
    bad("^parameter 1 " + surrogate, db.execute, "SELECT ?", ["\ud800"])
    nul = "must not contain a NUL character \\(at index 1\\)$"
    bad("^queue name " + nul, db.queue, "a\x00b")
    bad("^channel " + nul, db.notify, "c\x00", 1)
    bad("^key " + nul, s.publish, 1, key="k\x00")
    bad("^lock name " + nul, db.lock, "l\x00")
    bad("^worker id " + nul, tocsin.Worker, db, ["q"], worker_id="w\x00")
    assert db.execute("SELECT ?", ["a\x00b"]) == [("a\x00b",)]  # SQL text takes a NUL
    assert count(db, "_tocsin_jobs") + count(db, "_tocsin_events") + count(db, "_tocsin_notifications") == 0


def test_a_list_argument_that_is_no_list_is_refused_naming_it(db):
    """None or an int where a list goes raised a bare TypeError ("'NoneType' object is
    not iterable")."""
    q, s = db.queue("q"), db.stream("s")
    for value, shown in ((None, "NoneType"), (5, "int")):
        for match, fn, args, kwargs in [
                ("^jobs must be a list of payloads", q.enqueue_many, (value,), {}),
                ("^jobs must be a list of Jobs or \\(id, token\\) pairs", q.ack_batch, (value,), {}),
                ("^payloads must be a list of JSON values", s.publish_many, (value,), {}),
                ("^keys must be a list of str or None", s.publish_many, ([1],), {"keys": value}),
                ("^queues must be a list of queue names", tocsin.Worker, (db, value), {}),
                ("^also must be a list of queue names", q.jobs, ("w",), {"also": value}),
                ("^args must be a list or tuple", db.schedule, ("x", "@hourly"),
                 {"task": "t", "queue": "q", "args": value}),
                ("^args must be a list or tuple", q.periodic, ("@hourly",), {"args": value})]:
            if value is None and kwargs.get("keys", 0) is None:
                continue  # keys=None: no keys
            with pytest.raises(tocsin.InvalidArgument, match=match + ".*, not %s$" % shown):
                fn(*args, **kwargs)
    with pytest.raises(tocsin.InvalidArgument, match="^path must be a str or an os.PathLike, not NoneType$"):
        tocsin.open(None)
    # any iterable is still a list
    assert len(q.enqueue_many(iter([1, 2]))) == 2 and len(s.publish_many(x for x in "ab")) == 2
    assert count(db, "_tocsin_jobs") == 2 and count(db, "_tocsin_schedules") == 0


def test_a_batch_names_the_item_refused(db):
    """A refused item of enqueue_many / publish_many names which one ("job 1: ...",
    "event 2: ...") when there are several, as the core does for its own checks;
    nothing is written."""
    q, s = db.queue("q"), db.stream("s")
    refused("^job 1: priority must be an integer, not str$", q.enqueue_many,
            [{"payload": 1}, {"payload": 2, "priority": "x"}], options=True)
    refused("^job 1: delay must be ", q.enqueue_many, [{"payload": 1}, {"payload": 2, "delay": -5}],
            options=True)
    refused("^job 1: meta must be a dict", q.enqueue_many, [{"payload": 1}, {"payload": 2, "meta": [1]}],
            options=True)
    refused("^job 2: payload is not JSON-serialisable", q.enqueue_many, [1, 2, object()])
    refused("^job 1: payload is not JSON-serialisable: NaN", q.enqueue_many, [1, float("nan")])
    refused("^job 1: unique_key must not contain control characters", q.enqueue_many,
            [{"payload": 1}, {"payload": 2, "unique_key": "a\x01"}], options=True)
    with pytest.raises(tocsin.PayloadTooLarge, match="^job 1: payload is "):
        q.enqueue_many([1, "x" * (2 << 20)])
    refused("^event 1: payload is not JSON-serialisable", s.publish_many, [1, object()])
    refused("^event 1: key must not contain control characters", s.publish_many, [1, 2],
            keys=["a", "b\x01"])
    # a batch of one says no position, as a single call would not
    refused("^priority must be an integer, not str$", q.enqueue_many,
            [{"payload": 2, "priority": "x"}], options=True)
    refused("^payload is not JSON-serialisable", s.publish_many, [object()])
    assert count(db, "_tocsin_jobs") == 0 and count(db, "_tocsin_events") == 0


def test_flags_are_true_or_false_only(db, tmp_path):
    # a truthy string turned a flag on: read_only="no" opened read-only, trim's
    # below_consumers="false" trimmed what consumers had passed
    import sqlite3
    bad = "no"
    refused("^read_only must be True or False, not 'no'$", tocsin.open, str(tmp_path / "r.db"), read_only=bad)
    t = db.stream("t")
    t.publish(1)
    t.save_offset("c", 1)
    refused("^below_consumers must be True or False", t.trim, below_consumers="false")
    assert len(t.read()) == 1
    refused("^save_on_close must be True or False", t.subscribe, consumer="c", save_on_close=1)
    refused("^local_time must be True or False", tocsin.cron_next, "* * * * *", local_time="no")
    q = db.queue("jobs")
    refused("^process must be True or False", q.task(process="yes"), lambda: None)
    refused("^scheduler must be True or False", tocsin.Worker, db, queues=["jobs"], scheduler="off")
    conn = sqlite3.connect(":memory:")
    refused("^autocommit must be True or False", tocsin.enqueue, conn, "q", 1, autocommit="yes")
