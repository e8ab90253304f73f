"""One measurement of one implementation on one workload, for bench/run.py.

    python runner.py IMPL WORKLOAD --dir DIR [--n N] [--seconds S] [--backlog B]

IMPL: tocsin | raw | honker | honker-kernel | honker-shm | huey
Prints one JSON object: {"metrics": {name: value}, "samples": {name: [ms, ...]}}.
Every implementation runs on a fresh file with journal_mode=WAL, synchronous=NORMAL and
the same JSON payload. Libraries are imported only by the implementation that uses them
(the honker feature build lives in a venv of its own, without tocsin).
"""
import argparse
import asyncio
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

PAYLOAD = {"to": "ada@example.org", "template": "welcome", "n": 1}
HERE = os.path.abspath(__file__)

# ---- raw SQL: what a minimal queue does, through the stdlib sqlite3 module ------------
RAW_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs(id INTEGER PRIMARY KEY, queue TEXT NOT NULL,
  payload TEXT NOT NULL, ready INTEGER NOT NULL DEFAULT 1, lease_until INTEGER, worker TEXT);
CREATE INDEX IF NOT EXISTS jobs_ready ON jobs(queue, id) WHERE ready = 1;
CREATE TABLE IF NOT EXISTS events(id INTEGER PRIMARY KEY, topic TEXT NOT NULL, payload TEXT NOT NULL);
"""
RAW_INSERT = "INSERT INTO jobs(queue, payload) VALUES (?, ?)"
RAW_CLAIM = ("UPDATE jobs SET ready = 0, lease_until = ?, worker = ? WHERE id IN "
             "(SELECT id FROM jobs WHERE queue = ? AND ready = 1 ORDER BY id LIMIT ?) "
             "RETURNING id, payload")
RAW_ACK = "DELETE FROM jobs WHERE id = ?"


def raw_conn(path):
    c = sqlite3.connect(path, isolation_level=None, timeout=10)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("PRAGMA synchronous=NORMAL")
    c.executescript(RAW_SCHEMA)
    return c


def now_ms():
    return int(time.time() * 1000)


class Raw:
    def __init__(self, path):
        self.c = raw_conn(path)

    def enqueue(self, p):
        self.c.execute(RAW_INSERT, ("bench", json.dumps(p)))

    def enqueue_100(self, ps):
        c = self.c
        c.execute("BEGIN IMMEDIATE")
        c.executemany(RAW_INSERT, [("bench", json.dumps(p)) for p in ps])
        c.execute("COMMIT")

    def claim_ack(self):
        c = self.c
        c.execute("BEGIN IMMEDIATE")
        row = c.execute(RAW_CLAIM, (now_ms() + 30000, "w1", "bench", 1)).fetchone()
        c.execute("COMMIT")
        if row is None:
            return False
        json.loads(row[1])
        c.execute(RAW_ACK, (row[0],))
        return True

    def claim_ack_tx(self):
        c = self.c
        c.execute("BEGIN IMMEDIATE")
        row = c.execute(RAW_CLAIM, (now_ms() + 30000, "w1", "bench", 1)).fetchone()
        if row is not None:
            json.loads(row[1])
            c.execute(RAW_ACK, (row[0],))
        c.execute("COMMIT")
        return row is not None

    def claim_ack_100(self):
        c = self.c
        c.execute("BEGIN IMMEDIATE")
        rows = c.execute(RAW_CLAIM, (now_ms() + 30000, "w1", "bench", 100)).fetchall()
        c.execute("COMMIT")
        for r in rows:
            json.loads(r[1])
        c.execute("BEGIN IMMEDIATE")
        c.executemany(RAW_ACK, [(r[0],) for r in rows])
        c.execute("COMMIT")
        return len(rows)

    def claim_only(self):
        c = self.c
        c.execute("BEGIN IMMEDIATE")
        row = c.execute(RAW_CLAIM, (now_ms() + 30000, "w1", "bench", 1)).fetchone()
        c.execute("COMMIT")
        return row

    def ack(self, row):
        self.c.execute(RAW_ACK, (row[0],))

    def fill(self, n):
        c = self.c
        text = json.dumps(PAYLOAD)
        for i in range(0, n, 1000):
            c.execute("BEGIN")
            c.executemany(RAW_INSERT, [("bench", text)] * min(1000, n - i))
            c.execute("COMMIT")

    def publish(self, p):
        self.c.execute("INSERT INTO events(topic, payload) VALUES ('bench', ?)", (json.dumps(p),))

    def replay(self, n):
        got, after = 0, 0
        while got < n:
            rows = self.c.execute("SELECT id, payload FROM events WHERE topic = 'bench' AND id > ? "
                                  "ORDER BY id LIMIT 1000", (after,)).fetchall()
            if not rows:
                break
            for r in rows:
                json.loads(r[1])
            after = rows[-1][0]
            got += len(rows)
        return got

    def wait(self, timeout):
        time.sleep(0.001)  # a raw queue has no wake-up: it polls


class Tocsin:
    def __init__(self, path):
        import tocsin
        self.db = tocsin.open(path)
        self.q = self.db.queue("bench")

    def enqueue(self, p):
        self.q.enqueue(p)

    def enqueue_100(self, ps):
        self.q.enqueue_many(ps)

    def claim_ack(self):
        job = self.q.claim("w1")
        if job is None:
            return False
        job.payload
        job.ack()
        return True

    def claim_ack_tx(self):
        with self.db.transaction() as tx:
            job = self.q.claim("w1", tx=tx)
            if job is None:
                return False
            job.payload
            job.ack(tx=tx)
        return True

    def claim_ack_100(self):
        jobs = self.q.claim_batch(100, "w1")
        for j in jobs:
            j.payload
        self.q.ack_batch(jobs)
        return len(jobs)

    def claim_only(self):
        return self.q.claim("w1")

    def ack(self, job):
        job.ack()

    def fill(self, n):
        for i in range(0, n, 1000):
            self.q.enqueue_many([PAYLOAD] * min(1000, n - i))

    def publish(self, p):
        self.db.stream("bench").publish(p)

    def replay(self, n):
        got = 0
        for e in self.db.stream("bench").subscribe(from_offset=0):
            e.payload
            got += 1
            if got >= n:
                break
        return got

    def wait(self, timeout):
        self.q.wait(timeout=timeout)


def honker_backend(impl):
    return {"honker": None, "honker-kernel": "kernel", "honker-shm": "shm"}[impl]


class Honker:
    def __init__(self, path, impl="honker"):
        import honker
        self.db = honker.open(path, watcher_backend=honker_backend(impl))
        self.q = self.db.queue("bench")

    def enqueue(self, p):
        self.q.enqueue(p)

    def enqueue_100(self, ps):
        with self.db.transaction() as tx:
            for p in ps:
                self.q.enqueue(p, tx=tx)

    def claim_ack(self):
        job = self.q.claim_one("w1")
        if job is None:
            return False
        job.payload
        job.ack()
        return True

    def claim_ack_100(self):
        jobs = self.q.claim_batch("w1", 100)
        for j in jobs:
            j.payload
        self.q.ack_batch([j.id for j in jobs], "w1")
        return len(jobs)

    def claim_only(self):
        return self.q.claim_one("w1")

    def ack(self, job):
        job.ack()

    def fill(self, n):
        for i in range(0, n, 1000):
            self.enqueue_100([PAYLOAD] * min(1000, n - i))

    def publish(self, p):
        self.db.stream("bench").publish(p)

    def replay(self, n):
        async def go():
            got = 0
            async for e in self.db.stream("bench").subscribe(from_offset=0):
                e.payload
                got += 1
                if got >= n:
                    break
            return got
        return asyncio.run(go())

    def wait(self, timeout):
        time.sleep(0.001)  # honker's wake is an async iterator; the sync loop polls


def huey_app(path):
    from huey import SqliteHuey
    from huey.storage import SqliteStorage

    class Storage(SqliteStorage):
        # huey's fsync option knows only OFF and FULL: NORMAL like everyone else here
        def _create_connection(self):
            conn = super()._create_connection()
            conn.execute("PRAGMA synchronous=NORMAL")
            return conn

    h = SqliteHuey("bench", filename=path, storage_class=Storage, results=False)

    @h.task(name="noop")
    def noop(p=None):
        return None
    return h, noop


class Huey:
    def __init__(self, path):
        self.h, self.task = huey_app(path)

    def enqueue(self, p):
        self.task(p)

    def claim_ack_tx(self):
        # huey's dequeue reads and deletes the row in one transaction (no lease, no ack)
        t = self.h.dequeue()
        return t is not None

    def fill(self, n):
        for _ in range(n):
            self.task(PAYLOAD)


def make(impl, path):
    if impl == "tocsin":
        return Tocsin(path)
    if impl == "raw":
        return Raw(path)
    if impl.startswith("honker"):
        return Honker(path, impl)
    if impl == "huey":
        return Huey(path)
    raise SystemExit("unknown impl " + impl)


def rate(n, fn):
    t = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t)


# ---- throughput -------------------------------------------------------------------
def w_enq1(a, s):
    def run():
        for _ in range(a.n):
            s.enqueue(PAYLOAD)
    return {"ops_s": rate(a.n, run)}


def w_enq100(a, s):
    rounds = max(1, a.n // 100)
    batch = [PAYLOAD] * 100

    def run():
        for _ in range(rounds):
            s.enqueue_100(batch)
    return {"ops_s": rate(rounds * 100, run)}


def claim_each(a, s, claim_ack):
    s.fill(a.n)

    def run():
        for _ in range(a.n):
            if not claim_ack():
                raise SystemExit("queue ran dry")
    return {"ops_s": rate(a.n, run)}


def w_ca1(a, s):
    return claim_each(a, s, s.claim_ack)


def w_ca1tx(a, s):
    return claim_each(a, s, s.claim_ack_tx)


def w_ca100(a, s):
    rounds = max(1, a.n // 100)
    s.fill(rounds * 100)

    def run():
        for _ in range(rounds):
            if s.claim_ack_100() != 100:
                raise SystemExit("short batch")
    return {"ops_s": rate(rounds * 100, run)}


def w_stream(a, s):
    def pub():
        for _ in range(a.n):
            s.publish(PAYLOAD)
    p = rate(a.n, pub)
    t = time.perf_counter()
    got = s.replay(a.n)
    r = got / (time.perf_counter() - t)
    if got != a.n:
        raise SystemExit("replayed %d of %d" % (got, a.n))
    return {"publish_ops_s": p, "replay_ops_s": r}


def w_claimlat(a, s):
    """Time of one claim call (then ack, untimed) on a queue holding 0 vs `backlog` other jobs."""
    def sample(k):
        out = []
        for _ in range(k):
            t = time.perf_counter()
            j = s.claim_only()
            out.append((time.perf_counter() - t) * 1000.0)
            if j is None:
                raise SystemExit("no job to claim")
            s.ack(j)
        return out
    empty = []
    for _ in range(a.n):
        s.fill(1)
        empty += sample(1)
    s.fill(a.backlog + a.n)
    full = sample(a.n)
    empty.sort()
    full.sort()
    p50 = lambda v: v[len(v) // 2]
    return {"empty_p50_ms": p50(empty), "backlog_p50_ms": p50(full),
            "backlog_over_empty": p50(full) / p50(empty)}, {"empty": empty, "backlog": full}


# ---- cross-process latency: this process consumes, a child produces ----------------
# Two clocks start each sample: the payload carries the time taken before the send (so
# the sender's own commit counts), and the producer writes down, in sent.json, the time
# its send returned (the commit is then visible): the listener's share alone.
def produce(impl, path, kind, n):
    time.sleep(0.3)
    if impl == "pipe":  # the floor: no database, one byte through a pipe
        fd = int(os.environ["BENCH_PIPE_FD"])
        send = lambda p: os.write(fd, (json.dumps(p) + "\n").encode())
    elif impl == "tocsin":
        import tocsin
        db = tocsin.open(path)
        q = db.queue("bench")
        send = (lambda p: q.enqueue(p)) if kind == "wake" else (lambda p: db.notify("bench", p))
    else:
        import honker
        db = honker.open(path, watcher_backend=honker_backend(impl))
        q = db.queue("bench")

        def notify(p):
            with db.transaction() as tx:
                tx.notify("bench", p)
        send = (lambda p: q.enqueue(p)) if kind == "wake" else notify
    sent = []
    for i in range(n):
        time.sleep(random.uniform(0.002, 0.004))
        send({"t": time.time(), "i": i})
        sent.append(time.time())
    with open(os.path.join(os.path.dirname(path), "sent.json"), "w") as f:
        json.dump(sent, f)
    send({"t": 0, "i": -1})


class PipeMessage:
    __slots__ = ("payload",)

    def __init__(self, payload):
        self.payload = payload


class PipeListener:
    """The floor of an asyncio listener: lines from a pipe, through loop.add_reader."""

    def __init__(self, fd):
        self.f = os.fdopen(fd, "rb", buffering=0)
        self.buf = b""

    def __aiter__(self):
        return self

    async def __anext__(self):
        loop = asyncio.get_running_loop()
        while b"\n" not in self.buf:
            fut = loop.create_future()
            loop.add_reader(self.f.fileno(), lambda: fut.done() or fut.set_result(None))
            try:
                await fut
            finally:
                loop.remove_reader(self.f.fileno())
            self.buf += os.read(self.f.fileno(), 4096)
        line, self.buf = self.buf.split(b"\n", 1)
        return PipeMessage(json.loads(line))


def w_latency(a, kind):
    path = os.path.join(a.dir, "lat.db")
    recv = {}
    env, fds = dict(os.environ), ()
    if a.impl == "pipe":
        rfd, wfd = os.pipe()
        env["BENCH_PIPE_FD"], fds = str(wfd), (wfd,)
        it = PipeListener(rfd)
    elif a.impl == "tocsin":
        import tocsin
        db = tocsin.open(path)
        q = db.queue("bench")
        if kind == "wake":
            it = q.jobs("w1")
        else:
            it = db.listen("bench")
    else:
        import honker
        db = honker.open(path, watcher_backend=honker_backend(a.impl))
        q = db.queue("bench")
        it = q.claim("w1") if kind == "wake" else db.listen("bench", fallback_poll_s=None)

    async def consume():
        proc = subprocess.Popen([sys.executable, HERE, a.impl, "produce-" + kind, "--dir", a.dir,
                                 "--n", str(a.n)], env=env, pass_fds=fds)
        if fds:
            os.close(fds[0])
        async for item in it:
            p = item.payload
            t = time.time()
            if kind == "wake":
                item.ack()
            if p["i"] < 0:
                break
            recv[p["i"]] = (p["t"], t)
        if proc.wait() != 0:
            raise SystemExit("producer failed")
    asyncio.run(consume())
    with open(os.path.join(a.dir, "sent.json")) as f:
        sent = json.load(f)
    lat = sorted((t - t0) * 1000.0 for t0, t in recv.values())
    after = sorted((t - sent[i]) * 1000.0 for i, (_, t) in recv.items())
    pct = lambda v, q_: v[min(len(v) - 1, int(q_ * len(v)))]
    return {"p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99),
            "p50_commit_ms": pct(after, 0.5), "p99_commit_ms": pct(after, 0.99)}, {"latency": lat}


# ---- sustained: 4 worker processes and 2 producers for S seconds -------------------
def sustained_child(a, role, start_at, end_at):
    s = make(a.impl, os.path.join(a.dir, "sus.db"))
    while time.time() < start_at:
        time.sleep(0.005)
    n = 0
    if role == "producer":
        while time.time() < end_at:
            s.enqueue(PAYLOAD)
            n += 1
    elif a.impl.startswith("honker"):
        async def work():
            nonlocal n
            it = s.q.claim("w%d" % os.getpid(), idle_poll_s=0.05)
            while True:
                left = end_at - time.time()
                if left <= 0:
                    break
                try:
                    job = await asyncio.wait_for(it.__anext__(), timeout=left)
                except asyncio.TimeoutError:
                    break
                job.payload
                job.ack()
                n += 1
        asyncio.run(work())
    else:
        while time.time() < end_at:
            if s.claim_ack():
                n += 1
            else:
                s.wait(min(0.05, max(0.0, end_at - time.time())))
    print(json.dumps({"role": role, "n": n}))


def w_sustained(a):
    path = os.path.join(a.dir, "sus.db")
    make(a.impl, path)  # creates the schema before the children race for it
    start_at = time.time() + 1.5
    end_at = start_at + a.seconds
    procs = []
    for role in ["worker"] * 4 + ["producer"] * 2:
        procs.append(subprocess.Popen(
            [sys.executable, HERE, a.impl, "sustained-" + role, "--dir", a.dir,
             "--start-at", repr(start_at), "--end-at", repr(end_at)], stdout=subprocess.PIPE))
    done = {"worker": 0, "producer": 0}
    for p in procs:
        out, _ = p.communicate(timeout=a.seconds + 120)
        if p.returncode != 0:
            raise SystemExit("sustained child failed")
        r = json.loads(out.decode().strip().splitlines()[-1])
        done[r["role"]] += r["n"]
    return {"acked_ops_s": done["worker"] / a.seconds, "enqueued_ops_s": done["producer"] / a.seconds}


# ---- the worker runner: no-op tasks through 2 processes x 4 concurrency ---------------
TOCSIN_APP = """
import os, tocsin
db = tocsin.open(os.environ["BENCH_DB"])
q = db.queue("bench")

@q.task(name="noop", result_ttl=None)
def noop():
    return None
"""
HONKER_APP = """
import os, honker
db = honker.open(os.environ["BENCH_DB"])
q = db.queue("bench")

@q.task(name="noop", store_result=False)
def noop():
    return None
"""


def w_worker(a):
    path = os.path.join(a.dir, "worker.db")
    app = os.path.join(a.dir, "benchapp.py")
    env = dict(os.environ, BENCH_DB=path, PYTHONPATH=a.dir)
    n = a.n
    if a.impl == "tocsin":
        import tocsin
        with open(app, "w") as f:
            f.write(TOCSIN_APP)
        db = tocsin.open(path)
        q = db.queue("bench")
        cmd = [sys.executable, "-m", "tocsin", "worker", "benchapp:db", "--queue", "bench",
               "--concurrency", "4", "--no-scheduler"]
        ready = lambda: db.execute("SELECT count(*) FROM _tocsin_workers")[0][0] >= 2

        def load():
            with db.transaction():
                for _ in range(n):
                    q.call("noop")
        left = lambda: db.execute("SELECT EXISTS (SELECT 1 FROM _tocsin_jobs)")[0][0]
    elif a.impl == "honker":
        with open(app, "w") as f:
            f.write(HONKER_APP)
        sys.path.insert(0, a.dir)
        os.environ["BENCH_DB"] = path
        import benchapp
        db, q = benchapp.db, benchapp.q
        cmd = [sys.executable, "-m", "honker", "worker", "benchapp:db", "--queue", "bench",
               "--concurrency", "4"]
        ready = lambda: True

        from honker._tasks import _ENVELOPE

        def load():
            # the envelope a task call enqueues, all in one transaction as tocsin's are
            env_ = {_ENVELOPE: {"task": "noop", "args": [], "kwargs": {}}}
            with db.transaction() as tx:
                for _ in range(n):
                    q.enqueue(env_, tx=tx)
        left = lambda: db.query("SELECT EXISTS (SELECT 1 FROM _honker_live) AS c")[0]["c"]
    else:
        raise SystemExit("worker: no runner for " + a.impl)
    ps = [subprocess.Popen(cmd, cwd=a.dir, env=env, stderr=subprocess.DEVNULL) for _ in range(2)]
    try:
        end = time.monotonic() + 60
        while not ready():
            if time.monotonic() > end:
                raise SystemExit("the workers did not start")
            time.sleep(0.05)
        load()
        t0 = time.perf_counter()
        end = time.monotonic() + 120
        while left():
            if time.monotonic() > end:
                raise SystemExit("the workers did not finish")
            time.sleep(0.002)
        r = n / (time.perf_counter() - t0)
    finally:
        for p in ps:
            p.send_signal(signal.SIGTERM)
        for p in ps:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    return {"tasks_s": r}


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def w_idle(a):
    """The CPU of one idle worker process (its scheduler on, as by default, for tocsin:
    it leads and renews its lease), over a.seconds once it has started."""
    path = os.path.join(a.dir, "idle.db")
    app = os.path.join(a.dir, "benchapp.py")
    env = dict(os.environ, BENCH_DB=path, PYTHONPATH=a.dir)
    with open(app, "w") as f:
        f.write(TOCSIN_APP if a.impl == "tocsin" else HONKER_APP)
    mod = "tocsin" if a.impl == "tocsin" else "honker"
    p = subprocess.Popen([sys.executable, "-m", mod, "worker", "benchapp:db", "--queue", "bench",
                          "--concurrency", "4"], cwd=a.dir, env=env, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)  # started (and, for tocsin, leading the scheduler)
        if p.poll() is not None:
            raise SystemExit("the worker exited")
        c0, t0 = cpu_seconds(p.pid), time.monotonic()
        time.sleep(a.seconds)
        c1, t1 = cpu_seconds(p.pid), time.monotonic()
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return {"cpu_pct": 100.0 * (c1 - c0) / (t1 - t0)}


WORKLOADS = {
    "enq1": w_enq1, "enq100": w_enq100, "ca1": w_ca1, "ca1tx": w_ca1tx, "ca100": w_ca100,
    "stream": w_stream, "claimlat": w_claimlat,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("impl")
    ap.add_argument("workload")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--backlog", type=int, default=100000)
    ap.add_argument("--start-at", type=float)
    ap.add_argument("--end-at", type=float)
    a = ap.parse_args()
    w = a.workload
    if w.startswith("produce-"):
        produce(a.impl, os.path.join(a.dir, "lat.db"), w.split("-", 1)[1], a.n)
        return
    if w.startswith("sustained-"):
        sustained_child(a, w.split("-", 1)[1], a.start_at, a.end_at)
        return
    if w in ("wake", "notify"):
        out = w_latency(a, w)
    elif w == "sustained":
        out = w_sustained(a)
    elif w == "worker":
        out = w_worker(a)
    elif w == "idle":
        out = w_idle(a)
    else:
        out = WORKLOADS[w](a, make(a.impl, os.path.join(a.dir, w + ".db")))
    metrics, samples = out if isinstance(out, tuple) else (out, {})
    print(json.dumps({"metrics": metrics, "samples": samples}))


if __name__ == "__main__":
    main()
