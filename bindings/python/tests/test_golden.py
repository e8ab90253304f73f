"""The golden databases of interop-tests/golden, read through the Python API.

Each test opens a copy of a file the manifest names, checks the manifest's
facts (stats, jobs, dead letters, results, streams from the saved offsets,
notifications, lock tokens, schedules) and then does new work on it, so that
a change that cannot read or extend files written by an earlier version fails.
"""
import json
import os
import shutil

import pytest

import tocsin

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "..", "..", "interop-tests", "golden")
with open(os.path.join(GOLDEN, "manifest.json")) as f:
    MANIFEST = json.load(f)
FILES = sorted(MANIFEST["files"])


def test_manifest_names_files():
    assert "v1-full.db" in FILES and len(FILES) >= 2
    for name in FILES:
        assert os.path.exists(os.path.join(GOLDEN, name))


@pytest.mark.parametrize("name", FILES)
def test_journal_mode_as_left(name):
    # header bytes 18-19: 2 for WAL, 1 for a rollback journal (tocsin.open switches a copy to WAL)
    with open(os.path.join(GOLDEN, name), "rb") as f:
        hdr = f.read(20)
    assert {b"\x02\x02": "wal", b"\x01\x01": "delete"}[hdr[18:20]] == MANIFEST["files"][name]["journal_mode"]


@pytest.fixture(params=FILES)
def golden(request, tmp_path):
    dst = tmp_path / request.param
    shutil.copyfile(os.path.join(GOLDEN, request.param), dst)
    db = tocsin.open(str(dst))
    yield db, MANIFEST["files"][request.param], str(dst)
    db.close()


def _json(text):
    return None if text is None else json.loads(text)


def test_facts(golden):
    db, m, _ = golden
    assert db.execute("PRAGMA integrity_check")[0][0] == "ok"
    for name, want in m["queues"].items():
        st = db.queue(name).stats()
        for k in ("pending", "scheduled", "processing", "dead"):
            assert st[k] == want[k], (name, k)
        assert bool(st["paused"]) == bool(want["paused"])
    for j in m["jobs"]:
        job = db.queue(j["queue"]).get(j["id"])
        assert job is not None, j["id"]
        assert (job.queue, job.state, job.payload, job.meta) == (j["queue"], j["state"], j["payload"], j["meta"])
        assert (job.priority, job.attempts, job.max_attempts, job.run_at) == (
            j["priority"], j["attempts"], j["max_attempts"], j["run_at"])
        assert (job.unique_key, job.worker) == (j["unique_key"], j["worker"])
    dead = {}
    for q in {d["queue"] for d in m["dead"]}:
        for job in db.queue(q).dead_letters(limit=1000):
            dead[job.id] = job
    assert sorted(dead) == [d["id"] for d in m["dead"]]
    for d in m["dead"]:
        job = dead[d["id"]]
        assert (job.state, job.reason, job.last_error, job.payload, job.attempts) == (
            "dead", d["reason"], d["last_error"], d["payload"], d["attempts"])
    for r in m["results"]:
        res = db.result(r["job_id"])
        assert res is not None
        assert res.is_error == (r["status"] == "error")
        if not res.is_error:
            assert res.value == _json(r["value"])
        assert (res.error_type, res.error_message, res.error_trace) == (
            r["error_type"], r["error_message"], r["error_trace"])
        assert res.expires_at == 0
    for s in m["streams"]:
        stream = db.stream(s["topic"])
        events = stream.read(0, 1000)
        assert [(e.offset, e.key, e.payload, e.meta) for e in events] == [
            (e["offset"], e["key"], e["payload"], e["meta"]) for e in s["events"]]
        for consumer, pos in s["consumers"].items():
            assert stream.offset(consumer) == pos
            after = stream.read(pos, 1000)
            assert [e.offset for e in after] == [e["offset"] for e in s["events"] if e["offset"] > pos]
    assert db.notify_max_id() == m["max_notification_id"]
    for n in m["notifications"]:
        got = db.notifications(n["channel"], n["id"] - 1, 1)
        assert [(x.id, x.payload, x.meta) for x in got] == [(n["id"], n["payload"], n["meta"])]
    for lk in m["locks"]:
        owner, token, _until = db.lock_holder(lk["name"])
        assert owner is None  # the lease ended long ago, or was released
        assert token == lk["token"]
    scheds = db.schedules()
    assert [s.name for s in scheds] == [s["name"] for s in m["schedules"]]
    for got, want in zip(scheds, m["schedules"]):
        assert (got.cron, got.queue, got.payload, got.meta, got.priority, got.max_attempts) == (
            want["cron"], want["queue"], want["payload"], want["meta"], want["priority"], want["max_attempts"])
        assert (got.catch_up, got.max_catch_up, got.paused, got.next_fire) == (
            want["catch_up"], want["max_catch_up"], bool(want["paused"]), want["next_fire"])
    for name, n in m["rate_limits"].items():
        assert db.execute("SELECT count(*) FROM _tocsin_rate_hits WHERE name = ?", [name])[0][0] == n
    assert [r[0] for r in db.execute("SELECT id FROM _tocsin_workers ORDER BY id")] == [w["id"] for w in m["workers"]]


def test_new_work(golden):
    db, m, path = golden
    max_id = max([j["id"] for j in m["jobs"]] + [d["id"] for d in m["dead"]] + [0])
    emails = db.queue("emails")
    new_id = emails.enqueue({"to": "py@example.com"}, priority=100)
    assert new_id > max_id
    pending = m["queues"].get("emails", {}).get("pending", 0)
    jobs = emails.claim_batch(100, "py-golden")
    assert len(jobs) == pending + 1 and jobs[0].id == new_id
    for job in jobs:
        assert job.ack()
    if m["dead"]:
        d = m["dead"][0]
        q = db.queue(d["queue"])
        assert q.requeue(d["id"])
        job = q.claim("py-golden")
        assert job is not None and job.id == d["id"]
        assert job.ack()
    for lk in m["locks"]:
        with db.lock(lk["name"], ttl=60, owner="py-golden") as lock:
            assert lock.token == lk["token"] + 1
    off = db.stream("orders").publish({"order": "py"})
    assert all(off > s["last_offset"] for s in m["streams"])
    assert db.notify("chat", {"text": "py"}) > m["max_notification_id"]
    want = sum(1 for s in m["schedules"] if not s["paused"] and s["catch_up"] == "once")
    assert db.scheduler_tick() == want
    assert db.execute("PRAGMA integrity_check")[0][0] == "ok"
    db.close()
    again = tocsin.open(path)
    assert again.queue("emails").stats()["pending"] == 0
    again.close()
