"""Python binding benchmark: tocsin next to the same operations as raw SQL through the
stdlib sqlite3 module, in the same run, on the same kind of file (WAL,
synchronous=NORMAL). Prints operations per second and the ratio tocsin / raw.

    make bench-python            (or: python bench/bench_python.py [--n 5000])
"""
import argparse
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time

import tocsin

RAW_SCHEMA = """
CREATE TABLE jobs(id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL,
  state TEXT NOT NULL DEFAULT 'pending', payload TEXT NOT NULL, priority INTEGER NOT NULL DEFAULT 0,
  attempts INTEGER NOT NULL DEFAULT 0, run_at INTEGER NOT NULL, created_at INTEGER NOT NULL,
  lease_until INTEGER, worker TEXT);
CREATE INDEX jobs_claim ON jobs(queue, priority DESC, run_at, id) WHERE state = 'pending';
"""
RAW_INSERT = "INSERT INTO jobs(queue, payload, run_at, created_at) VALUES (?, ?, ?, ?)"
RAW_CLAIM = """UPDATE jobs SET state = 'processing', attempts = attempts + 1, worker = ?,
  lease_until = ? WHERE id IN (SELECT id FROM jobs WHERE queue = ? AND state = 'pending'
  AND run_at <= ? ORDER BY priority DESC, run_at, id LIMIT ?) RETURNING id, attempts, payload"""
RAW_ACK = "DELETE FROM jobs WHERE id = ? AND attempts = ? AND state = 'processing'"

PAYLOAD = {"to": "ada@example.org", "template": "welcome", "n": 1}


def now_ms():
    return int(time.time() * 1000)


def raw_conn(path):
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("PRAGMA synchronous=NORMAL")
    c.execute("PRAGMA busy_timeout=5000")
    c.executescript(RAW_SCHEMA)
    return c


def rate(n, fn):
    t = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t)


ROUNDS = 3


def best(n, raw, tocsin_fn, setup=None):
    """Alternates raw and tocsin rounds (same file growth, same machine state) and keeps
    the best rate of each."""
    r, t = 0.0, 0.0
    for _ in range(ROUNDS):
        if setup:
            setup()
        r = max(r, rate(n, raw))
        t = max(t, rate(n, tocsin_fn))
    return r, t


def bench_enqueue(d, n):
    db = tocsin.open(os.path.join(d, "t-enq.db"))
    q = db.queue("bench")
    enqueue = q.enqueue

    def run_tocsin():
        for _ in range(n):
            enqueue(PAYLOAD)

    c = raw_conn(os.path.join(d, "r-enq.db"))

    def run_raw():
        ex = c.execute
        for _ in range(n):
            t = now_ms()
            ex("BEGIN IMMEDIATE")
            ex(RAW_INSERT, ("bench", json.dumps(PAYLOAD), t, t))
            ex("COMMIT")

    r = best(n, run_raw, run_tocsin)
    db.close()
    c.close()
    return r


def bench_claim_ack(d, n):
    db = tocsin.open(os.path.join(d, "t-claim.db"))
    q = db.queue("bench")
    claim = q.claim

    def run_tocsin():
        for _ in range(n):
            job = claim("w1", visibility=30)
            job.payload
            job.ack()

    c = raw_conn(os.path.join(d, "r-claim.db"))

    def fill():
        for i in range(0, n, 500):
            q.enqueue_many([PAYLOAD] * min(500, n - i))
        t = now_ms()
        c.execute("BEGIN")
        c.executemany(RAW_INSERT, [("bench", json.dumps(PAYLOAD), t, t)] * n)
        c.execute("COMMIT")

    def run_raw():
        ex = c.execute
        for _ in range(n):
            t = now_ms()
            ex("BEGIN IMMEDIATE")
            jid, att, payload = ex(RAW_CLAIM, ("w1", t + 30000, "bench", t, 1)).fetchone()
            ex("COMMIT")
            json.loads(payload)
            ex("BEGIN IMMEDIATE")
            ex(RAW_ACK, (jid, att))
            ex("COMMIT")

    r = best(n, run_raw, run_tocsin, fill)
    assert q.stats()["pending"] == 0
    db.close()
    c.close()
    return r


def bench_batched(d, n, batch=100):
    rounds = max(1, n // batch)
    db = tocsin.open(os.path.join(d, "t-batch.db"))
    q = db.queue("bench")
    payloads = [PAYLOAD] * batch

    def run_tocsin():
        for _ in range(rounds):
            q.enqueue_many(payloads)
        for _ in range(rounds):
            jobs = q.claim_batch(batch, "w1")
            for j in jobs:
                j.payload
            q.ack_batch(jobs)

    c = raw_conn(os.path.join(d, "r-batch.db"))

    def run_raw():
        ex = c.execute
        for _ in range(rounds):
            t = now_ms()
            ex("BEGIN IMMEDIATE")
            c.executemany(RAW_INSERT, [("bench", json.dumps(p), t, t) for p in payloads])
            ex("COMMIT")
        for _ in range(rounds):
            t = now_ms()
            ex("BEGIN IMMEDIATE")
            rows = ex(RAW_CLAIM, ("w1", t + 30000, "bench", t, batch)).fetchall()
            ex("COMMIT")
            for r in rows:
                json.loads(r[2])
            ex("BEGIN IMMEDIATE")
            c.executemany(RAW_ACK, [(r[0], r[1]) for r in rows])
            ex("COMMIT")

    r = best(rounds * batch, run_raw, run_tocsin)
    db.close()
    c.close()
    return r


def bench_claim_ack_one_tx(d, n):
    """claim + ack of one job in one transaction, against raw claim + DELETE in one."""
    db = tocsin.open(os.path.join(d, "t-claim1.db"))
    q = db.queue("bench")
    c = raw_conn(os.path.join(d, "r-claim1.db"))

    def fill():
        for i in range(0, n, 500):
            q.enqueue_many([PAYLOAD] * min(500, n - i))
        t = now_ms()
        c.execute("BEGIN")
        c.executemany(RAW_INSERT, [("bench", json.dumps(PAYLOAD), t, t)] * n)
        c.execute("COMMIT")

    def run_tocsin():
        for _ in range(n):
            with db.transaction() as tx:
                job = q.claim("w1")
                job.payload
                job.ack(tx=tx)

    def run_raw():
        ex = c.execute
        for _ in range(n):
            t = now_ms()
            ex("BEGIN IMMEDIATE")
            jid, att, payload = ex(RAW_CLAIM, ("w1", t + 30000, "bench", t, 1)).fetchone()
            json.loads(payload)
            ex(RAW_ACK, (jid, att))
            ex("COMMIT")

    r = best(n, run_raw, run_tocsin, fill)
    db.close()
    c.close()
    return r


PRODUCER = """
import random, sys, time, tocsin
db = tocsin.open(sys.argv[1]); q = db.queue("lat")
for i in range(int(sys.argv[2])):
    time.sleep(random.uniform(0.001, 0.003))
    q.enqueue({"t": time.time(), "i": i})
q.enqueue({"t": 0, "i": -1})
"""


def bench_async_latency(d, n):
    """End to end: another process enqueues at random intervals; an asyncio consumer
    (async for job in queue.jobs(...)) timestamps each claim. Returns latencies (ms)."""
    import asyncio
    import subprocess
    path = os.path.join(d, "t-lat.db")
    db = tocsin.open(path)
    q = db.queue("lat")
    lat = []

    async def consume():
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", PRODUCER, path, str(n))
        async for job in q.jobs("lat-worker"):
            p = job.payload
            job.ack()
            if p["i"] < 0:
                break
            lat.append((time.time() - p["t"]) * 1000.0)
        await proc.wait()

    asyncio.run(consume())
    db.close()
    lat.sort()
    return lat


def bench_binding_overhead(d, n):
    """The same single-job calls through the bare _tocsin handle (pre-encoded JSON, no
    Python layer) and through the public API: what the binding itself adds."""
    db = tocsin.open(os.path.join(d, "t-ovh.db"))
    q, h = db.queue("bench"), db._h
    text = json.dumps(PAYLOAD)

    def bare():
        for _ in range(n):
            h.enqueue("bench", text)
        for _ in range(n):
            row = h.claim("bench", "w1", 1, 30000)[0]
            json.loads(row[3])
            h.ack(row[0], row[8])

    def api():
        for _ in range(n):
            q.enqueue(PAYLOAD)
        for _ in range(n):
            job = q.claim("w1")
            job.payload
            job.ack()

    r = best(n, bare, api)
    db.close()
    return r


WORKER_APP = """
import os, tocsin
db = tocsin.open(os.environ["TOCSIN_BENCH_DB"])
q = db.queue("bench")

@q.task(name="noop", result_ttl=None)
def noop():
    return None

@q.task(name="anoop", result_ttl=None)
async def anoop():
    return None

@db.queue("idle").periodic("@hourly", name="hourly")
def hourly():
    return None
"""


def _worker_procs(d, path, queue, k, *extra):
    import subprocess
    env = dict(os.environ, TOCSIN_BENCH_DB=path, PYTHONPATH=d)
    cmd = [sys.executable, "-m", "tocsin", "worker", "benchapp:db", "--queue", queue] + list(extra)
    return [subprocess.Popen(cmd, cwd=d, env=env, stderr=subprocess.DEVNULL) for _ in range(k)]


def _stop(procs):
    import signal
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(30)
        except Exception:
            p.kill()


def bench_worker_throughput(d, n, task, procs=2, concurrency=4):
    """No-op tasks through the worker runner (python -m tocsin worker), `procs`
    processes x `concurrency`: jobs/s from the commit that enqueued them all to the
    last outcome committed."""
    with open(os.path.join(d, "benchapp.py"), "w") as f:
        f.write(WORKER_APP)
    path = os.path.join(d, "t-worker-%s.db" % task)
    db = tocsin.open(path)
    q = db.queue("bench")
    ps = _worker_procs(d, path, "bench", procs, "--concurrency", str(concurrency), "--no-scheduler")
    try:
        end = time.monotonic() + 60
        while db.execute("SELECT count(*) FROM _tocsin_workers")[0][0] < procs:
            if time.monotonic() > end:
                raise RuntimeError("the workers did not start")
            time.sleep(0.05)
        with db.transaction():
            for _ in range(n):
                q.call(task)
        t0 = time.perf_counter()
        with db.subscribe() as wake:
            while db.execute("SELECT count(*) FROM _tocsin_jobs")[0][0]:
                wake.wait(timeout=0.05)
        rate_ = n / (time.perf_counter() - t0)
        done = db.execute("SELECT count(*) FROM _tocsin_results WHERE status = 'ok'")[0][0]
        assert done == n, (done, n)
    finally:
        _stop(ps)
        db.close()
    return rate_


def _cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_idle_cpu(d, seconds=5.0):
    """CPU of an idle worker with the scheduler on (the default), over `seconds`."""
    with open(os.path.join(d, "benchapp.py"), "w") as f:
        f.write(WORKER_APP)
    path = os.path.join(d, "t-idle.db")
    tocsin.open(path).close()
    (p,) = _worker_procs(d, path, "idle", 1, "--scheduler-ttl", "3")
    try:
        time.sleep(1.5)  # started, leading the scheduler
        c0, t0 = _cpu_seconds(p.pid), time.monotonic()
        time.sleep(seconds)
        c1, t1 = _cpu_seconds(p.pid), time.monotonic()
    finally:
        _stop([p])
    return 100.0 * (c1 - c0) / (t1 - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--latency-n", type=int, default=1000)
    ap.add_argument("--worker-n", type=int, default=20000)
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="tocsin-bench-")
    try:
        print("tocsin %s (Python %s, SQLite %s), n=%d" % (
            tocsin.__version__, sys.version.split()[0], tocsin.sqlite_version(), args.n))
        print("%-34s %12s %12s %8s" % ("operation", "raw ops/s", "tocsin ops/s", "ratio"))
        rows = [
            ("enqueue, 1 per tx", bench_enqueue(d, args.n)),
            ("claim + ack, 1 per tx (jobs/s)", bench_claim_ack(d, args.n)),
            ("claim + ack in one tx (jobs/s)", bench_claim_ack_one_tx(d, args.n)),
            ("batched 100: enqueue+claim+ack", bench_batched(d, args.n * 2)),
        ]
        bare, api = bench_binding_overhead(d, args.n // 2)
        lat = bench_async_latency(d, args.latency_n)
        for name, (raw, tc) in rows:
            print("%-34s %12.0f %12.0f %7.0f%%" % (name, raw, tc, 100.0 * tc / raw))
        print("binding overhead: enqueue + claim + ack through the public API runs at %.0f%% of "
              "the bare core calls (%.1f us added per job)" % (100.0 * api / bare,
                                                              (1e6 / api - 1e6 / bare)))
        for task, kind in (("noop", "sync"), ("anoop", "async")):
            print("worker runner, %s no-op tasks, 2 processes x 4 concurrency: %.0f tasks/s "
                  "(target >= 20000)" % (kind, bench_worker_throughput(d, args.worker_n, task)))
        print("idle worker with the scheduler on (leader, ttl 3 s): %.2f%% of a core over 5 s "
              "(target < 1%%)" % bench_idle_cpu(d))
        pct = lambda p: lat[min(len(lat) - 1, int(p / 100.0 * len(lat)))]
        print("async end-to-end (enqueue in another process -> async for job in queue.jobs()), "
              "%d jobs: p50 %.3f ms, p99 %.3f ms, max %.3f ms" % (len(lat), pct(50), pct(99), lat[-1]))
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
