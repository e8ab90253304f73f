"""The crash suite: producers and workers of four runtimes (Python, Node, Go, Ruby) as
separate processes on one .db, SIGKILLed at seeded random moments and restarted; then
the invariants of docs/worker-protocol.md are checked on what is left.

    python driver.py --kills 30 --dir build/crash [--seed N]      (SEED=n also replays)
    python driver.py --scenarios --dir build/crash-scen [--seed N]  (README.md: Scenarios)

The seed fixes the kill schedule (when, whom, how soon the restart) and every peer's
own pauses; the interleaving of the processes is the machine's. Checked at the end:
  - every committed intent (a producer's row, committed with its job) took effect
    exactly once, or its job is dead with a reason; nothing took effect without one;
  - the effect row, the ack and (for Worker runs) the result of a job are one commit;
  - no stale token acks: every lease any peer ever held is refused now, and the
    zombie's late acks after its lease was reclaimed were refused, effect rolled back;
  - each schedule boundary fired once, none skipped;
  - PRAGMA integrity_check is ok; no job is left live or claimed; no orphan result;
    the worker registry is empty after the graceful stop; the scheduler's lease is
    released or lapsed.
"""
import argparse
import glob
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
PEERS = os.path.join(HERE, "peers")


def peer_argv(kind, build):
    """argv (before MODE DB LOGDIR SEED) of a peer of runtime `kind`."""
    if kind == "python":
        return [os.path.join(build, "venv", "bin", "python"), os.path.join(PEERS, "py_peer.py")]
    if kind == "node":
        return [os.environ.get("NODE", "node"), os.path.join(PEERS, "node_peer.js")]
    if kind == "go":
        return [os.path.join(build, "crash-go-peer")]
    if kind == "ruby":
        return [os.environ.get("RUBY", "ruby"), "-I" + os.path.join(ROOT, "bindings", "ruby", "lib"),
                "-I" + os.path.join(build, "ruby", "lib"), os.path.join(PEERS, "rb_peer.rb")]
    raise ValueError(kind)


# role name -> (runtime, mode, kind of role, kill weight)
ROLES = {
    "py-worker": ("python", "worker", "worker", 3),
    "py-worker-2": ("python", "worker", "worker", 2),  # the scheduler's standby
    # the Node and Go Workers, effect + result + ack in the run's transaction
    # (CRASH_NODE_MODE=consumer / CRASH_GO_MODE=consumer: the hand-claiming peers)
    "node-consumer": ("node", os.environ.get("CRASH_NODE_MODE", "worker"), "worker", 3),
    "go-consumer": ("go", os.environ.get("CRASH_GO_MODE", "worker-tasktx"), "worker", 3),
    "rb-consumer": ("ruby", "consumer", "worker", 2),
    "py-producer": ("python", "producer", "producer", 2),
    "node-producer": ("node", "producer", "producer", 2),
    "go-producer": ("go", "producer", "producer", 2),
    "rb-producer": ("ruby", "producer", "producer", 2),
    "py-zombie": ("python", "zombie", "zombie", 1),
    "py-checkpointer": ("python", "checkpointer", "checkpointer", 2),
}
LEADER_WEIGHT = 3  # "the scheduler's leader, whoever it is now"


class Peer:
    def __init__(self, role, args, rng):
        self.role, self.args, self.rng = role, args, rng
        self.runtime, self.mode, self.kind, _ = ROLES[role]
        self.proc = None
        self.spawns = 0

    def log_path(self, pid):
        return os.path.join(self.args.logs, "%s-%s-%d.log" % (self.runtime, self.mode, pid))

    def start(self):
        argv = peer_argv(self.runtime, self.args.build) + [self.mode, self.args.db, self.args.logs,
                                                            str(self.rng.randrange(1, 2 ** 31))]
        self.err = open(os.path.join(self.args.logs, "%s.stderr" % self.role), "ab")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.err, stderr=self.err,
                                     cwd=ROOT)
        self.spawns += 1
        self.killed = False

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def lines(self):
        try:
            with open(self.log_path(self.proc.pid)) as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def ready(self):
        return "ready" in self.lines()

    def kill(self):
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.err.close()
        self.killed = True


def fail(msg):
    print("crash: FAIL: " + msg, flush=True)
    sys.exit(1)


def ro(db):
    c = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=10)
    return c


def leader_pid(db):
    c = ro(db)
    try:
        row = c.execute("SELECT w.pid FROM _tocsin_locks l JOIN _tocsin_workers w ON w.id = l.owner "
                        "WHERE l.name = 'tocsin.scheduler' AND l.expires_at > ?",
                        (int(time.time() * 1000),)).fetchone()
        return row[0] if row else None
    finally:
        c.close()


def check_peers_alive(peers):
    for p in peers.values():
        if p.proc is not None and not p.killed and p.proc.poll() is not None:
            with open(os.path.join(p.args.logs, "%s.stderr" % p.role), "rb") as f:
                tail = f.read()[-3000:].decode(errors="replace")
            fail("%s (pid %d) exited by itself with %s:\n%s" % (p.role, p.proc.pid, p.proc.returncode, tail))


def workdir(args, db_name):
    """The run's folder (args.dir, under the build folder), its database and an emptied
    logs folder, on args."""
    args.build = os.path.abspath(os.path.join(args.dir, ".."))
    args.dir = os.path.abspath(args.dir)
    args.logs = os.path.join(args.dir, "logs")
    args.db = os.path.join(args.dir, db_name)
    os.makedirs(args.logs, exist_ok=True)
    for f in glob.glob(os.path.join(args.logs, "*")):
        os.unlink(f)


def setup(args):
    import tocsin
    for f in glob.glob(args.db + "*"):
        os.unlink(f)
    db = tocsin.open(args.db)
    db.executescript("""
        CREATE TABLE intents(job_id INTEGER PRIMARY KEY, producer TEXT NOT NULL, pid INTEGER, at INTEGER);
        CREATE TABLE effects(id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, runtime TEXT NOT NULL,
                             pid INTEGER, attempt INTEGER, at INTEGER);
    """)
    db.close()
    c = sqlite3.connect(args.db, isolation_level=None)
    tocsin.load(c)
    # every boundary, one job each on a queue nobody works: the jobs are the record
    c.execute("SELECT tocsin_schedule_set('crash.tick', '@every 1s', 'ticks', '{}', "
              "'{\"catch_up\":\"all\",\"max_catch_up\":1000}')").fetchall()
    c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=30)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--scenarios", action="store_true", help="the cross-runtime scenarios instead of the kills")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int(os.environ.get("SEED") or random.SystemRandom().randrange(1, 2 ** 31))
    if args.scenarios:
        args.seed, args.rng = seed, random.Random(seed)
        workdir(args, "scen.db")
        print("scen: seed %d (replay: make test-crash-scen SEED=%d)" % (seed, seed), flush=True)
        return scenarios(args)
    print("crash: seed %d (replay: make test-crash SEED=%d), %d kills" % (seed, seed, args.kills), flush=True)
    rng = random.Random(seed)
    workdir(args, "crash.db")
    setup(args)

    # the whole kill plan is drawn first: the seed alone decides it
    names = list(ROLES)
    weights = [ROLES[n][3] for n in names] + [LEADER_WEIGHT]
    plan = [(rng.uniform(0.15, 0.7), rng.choices(names + ["leader"], weights)[0], rng.uniform(0.0, 0.3))
            for _ in range(args.kills)]
    peers = {n: Peer(n, args, random.Random(rng.randrange(2 ** 31))) for n in names}
    started = time.monotonic()
    for p in peers.values():
        p.start()
    deadline = time.monotonic() + 60
    while not all(p.ready() for p in peers.values()):
        check_peers_alive(peers)
        if time.monotonic() > deadline:
            fail("peers not ready after 60 s: %s" % [n for n, p in peers.items() if not p.ready()])
        time.sleep(0.05)
    print("crash: %d peers ready in %.1f s" % (len(peers), time.monotonic() - started), flush=True)

    stats = {"kills": 0, "producer_in_tx": 0, "worker_mid_run": 0, "checkpoint": 0, "leader": 0, "by_role": {}}
    for delay, target, restart in plan:
        time.sleep(delay)
        check_peers_alive(peers)
        if target == "leader":
            pid = leader_pid(args.db)
            match = [p for p in peers.values() if p.proc.pid == pid]
            if not match:  # nobody leads right now (a takeover pending): the Python worker then
                match = [peers["py-worker"]]
            else:
                stats["leader"] += 1
            p = match[0]
        else:
            p = peers[target]
        before = p.lines()
        p.kill()
        stats["kills"] += 1
        stats["by_role"][p.role] = stats["by_role"].get(p.role, 0) + 1
        last = before[-1] if before else ""
        if p.kind == "producer" and last == "begin":
            stats["producer_in_tx"] += 1
        if p.kind == "checkpointer" and last == "checkpoint":
            stats["checkpoint"] += 1
        if p.kind == "worker" and any(line.startswith("run ") for line in before[-3:]):
            stats["worker_mid_run"] += 1  # a run started just before: likely claimed, not acked
        time.sleep(restart)
        p.start()
    kill_phase = time.monotonic() - started

    # end: producers, zombie and checkpointer stop for good (SIGKILL: what they
    # committed is exactly what their intents say); workers drain the queue
    for p in peers.values():
        if p.kind in ("producer", "zombie", "checkpointer"):
            p.kill()
    deadline = time.monotonic() + 120
    while True:
        check_peers_alive(peers)
        c = ro(args.db)
        live = c.execute("SELECT count(*) FROM _tocsin_jobs WHERE queue = 'crash'").fetchone()[0]
        c.close()
        if live == 0:
            break
        if time.monotonic() > deadline:
            fail("%d crash jobs still live 120 s after the last kill" % live)
        time.sleep(0.2)
    time.sleep(2.5)  # a dead worker's registry row goes within ~1 s (worker-protocol.md)
    for p in peers.values():
        if p.kind == "worker":
            p.proc.send_signal(signal.SIGTERM)
    for p in peers.values():
        if p.kind == "worker":
            p.killed = True  # its exit is expected now
            try:
                rc = p.proc.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                fail("%s did not stop within 30 s of SIGTERM" % p.role)
            if rc != 0:
                fail("%s exited with %d after SIGTERM" % (p.role, rc))
    check(args, peers, stats, seed, kill_phase, time.monotonic() - started)


def check(args, peers, stats, seed, kill_phase, total):
    import tocsin
    problems = []
    c = sqlite3.connect(args.db, isolation_level=None, timeout=10)
    tocsin.load(c)
    q = lambda sql, *p: c.execute(sql, p).fetchall()  # noqa: E731
    integrity = q("PRAGMA integrity_check")
    if integrity != [("ok",)]:
        problems.append("integrity_check: %s" % integrity[:5])
    intents = q("SELECT count(*) FROM intents")[0][0]
    per_producer = dict(q("SELECT producer, count(*) FROM intents GROUP BY producer"))
    per_worker = dict(q("SELECT runtime, count(*) FROM effects GROUP BY runtime"))
    twice = q("SELECT job_id, count(*) FROM effects GROUP BY job_id HAVING count(*) > 1")
    if twice:
        problems.append("%d jobs took effect more than once (fencing failed), e.g. %s" % (len(twice), twice[:5]))
    missing = q("SELECT i.job_id FROM intents i WHERE NOT EXISTS (SELECT 1 FROM effects e WHERE e.job_id = i.job_id) "
                "AND NOT EXISTS (SELECT 1 FROM _tocsin_dead d WHERE d.id = i.job_id)")
    if missing:
        problems.append("%d committed intents neither took effect nor died, e.g. %s" % (len(missing), missing[:5]))
    dead = q("SELECT d.id, d.reason, d.last_error FROM _tocsin_dead d WHERE d.queue = 'crash'")
    dead_with_effect = [d for d in dead if q("SELECT 1 FROM effects WHERE job_id = ?", d[0])]
    if dead_with_effect:
        problems.append("dead jobs that took effect: %s" % dead_with_effect[:5])
    if any(not d[1] for d in dead):
        problems.append("dead jobs without a reason")
    orphans = q("SELECT count(*) FROM effects WHERE job_id NOT IN (SELECT job_id FROM intents)")[0][0]
    if orphans:
        problems.append("%d effects of jobs no producer committed" % orphans)
    no_intent = q("SELECT count(*) FROM (SELECT id FROM _tocsin_jobs WHERE queue = 'crash' UNION ALL "
                  "SELECT id FROM _tocsin_dead WHERE queue = 'crash') WHERE id NOT IN (SELECT job_id FROM intents)")[0][0]
    if no_intent:
        problems.append("%d crash jobs without an intent (a killed producer committed a job)" % no_intent)
    # results: a Worker run commits effect, result and ack together
    bad_results = 0
    with_results = "('python'%s%s)" % (", 'node'" if ROLES["node-consumer"][1] == "worker" else "",
                                          ", 'go'" if ROLES["go-consumer"][1] == "worker-tasktx" else "")
    for job_id, runtime in q("SELECT job_id, runtime FROM effects WHERE runtime IN %s" % with_results):
        r = q("SELECT status, value FROM _tocsin_results WHERE job_id = ?", job_id)
        if not r or r[0][0] != "ok" or json.loads(r[0][1]).get("by") != runtime:
            bad_results += 1
    if bad_results:
        problems.append("%d Worker effects without their result from the same runtime" % bad_results)
    orphan_results = q("SELECT count(*) FROM _tocsin_results WHERE job_id NOT IN (SELECT job_id FROM intents)")[0][0]
    if orphan_results:
        problems.append("%d orphan results" % orphan_results)
    live = q("SELECT count(*) FROM _tocsin_jobs WHERE queue = 'crash'")[0][0]
    processing = q("SELECT count(*) FROM _tocsin_jobs WHERE state = 'processing'")[0][0]
    if live or processing:
        problems.append("%d crash jobs still live, %d jobs processing after the workers stopped" % (live, processing))
    workers = q("SELECT id, pid FROM _tocsin_workers")
    if workers:
        problems.append("worker registry rows left after every worker stopped: %s" % workers)
    now = int(time.time() * 1000)
    lease = q("SELECT owner, expires_at FROM _tocsin_locks WHERE name = 'tocsin.scheduler'")
    if lease and lease[0][0] is not None and (lease[0][1] or 0) > now:
        problems.append("the scheduler's lease is still held by %s" % lease[0][0])
    # fencing: every lease any peer held (job id, attempt -> token) is refused now
    tokens = set()
    zombie_refused = zombie_accepted = 0
    for path in glob.glob(os.path.join(args.logs, "*.log")):
        with open(path) as f:
            for line in f:
                w = line.split()
                if w and w[0] == "run" and len(w) == 3:
                    tokens.add((int(w[1]), (int(w[1]) << 20) + int(w[2])))
                elif w and w[0] == "late-ack-refused":
                    zombie_refused += 1
                elif w and w[0] == "late-ack-accepted":
                    zombie_accepted += 1
    c.execute("BEGIN IMMEDIATE")
    stale_ok = [t for t in tokens if c.execute("SELECT tocsin_ack(?, ?)", t).fetchone()[0]]
    c.execute("ROLLBACK")
    if stale_ok:
        problems.append("%d stale tokens were accepted by ack, e.g. %s" % (len(stale_ok), stale_ok[:5]))
    zombie_effects = per_worker.get("python-zombie", 0)
    if zombie_effects != zombie_accepted:
        problems.append("zombie effects %d != its accepted late acks %d (a refused ack kept its effect)"
                        % (zombie_effects, zombie_accepted))
    # schedules: one job per boundary, consecutive, as many as fired_count
    fires = [r[0] for r in q("SELECT json_extract(meta, '$.tocsin_fire_at') FROM _tocsin_jobs "
                              "WHERE queue = 'ticks' ORDER BY 1")]
    sched = json.loads(q("SELECT tocsin_schedule_get('crash.tick')")[0][0])
    dup = len(fires) - len(set(fires))
    gaps = [(a, b) for a, b in zip(fires, fires[1:]) if b - a != 1000]
    if dup or gaps:
        problems.append("schedule boundaries: %d fired twice, gaps %s" % (dup, gaps[:5]))
    if sched["fired_count"] != len(fires) or sched["skipped_count"]:
        problems.append("schedule: fired_count %d, skipped %d, jobs %d"
                        % (sched["fired_count"], sched["skipped_count"], len(fires)))
    if len(fires) < 3:
        problems.append("the scheduler fired only %d boundaries" % len(fires))
    for rt in ("python", "node", "go", "ruby"):
        if not per_producer.get(rt):
            problems.append("no intent committed by the %s producer" % rt)
        if not per_worker.get(rt):
            problems.append("no effect by the %s worker" % rt)
    effects = sum(v for k, v in per_worker.items())
    print("crash: %d kills in %.1f s (%s); restarts %d" % (
        stats["kills"], kill_phase, ", ".join("%s %d" % kv for kv in sorted(stats["by_role"].items())),
        sum(p.spawns - 1 for p in peers.values())))
    print("crash: kills of a producer inside its transaction %d, of a worker between claim and ack %d, "
          "during a checkpoint %d, of the scheduler's leader %d" % (
              stats["producer_in_tx"], stats["worker_mid_run"], stats["checkpoint"], stats["leader"]))
    print("crash: %d intents committed (%s); %d effects (%s); %d dead (%s)" % (
        intents, ", ".join("%s %d" % kv for kv in sorted(per_producer.items())), effects,
        ", ".join("%s %d" % kv for kv in sorted(per_worker.items())), len(dead),
        ", ".join(sorted({d[1] for d in dead})) or "-"))
    print("crash: fencing: %d leases ever held, every token refused now: %s; zombie late acks refused %d, "
          "accepted (lease lapsed, not reclaimed) %d" % (len(tokens), "yes" if not stale_ok else "NO",
                                                       zombie_refused, zombie_accepted))
    print("crash: schedule: %d boundaries, each once, none skipped: %s" % (len(fires), "yes" if not (dup or gaps) else "NO"))
    print("crash: integrity %s; live crash jobs %d; processing %d; registry rows %d; total %.1f s" % (
        integrity[0][0], live, processing, len(workers), total))
    c.close()
    if problems:
        for p in problems:
            print("crash: VIOLATION: " + p)
        fail("%d invariant(s) broken (seed %d)" % (len(problems), seed))
    print("crash: ok, every invariant held (seed %d)" % seed)


# ---- scenarios (--scenarios): one job or schedule at a time, across runtimes ----------
# Each peer runs the "scen" Worker of its runtime (py_peer.py's scen); the driver enqueues
# through the Python binding and reads outcomes from the database. Nothing here asserts
# a duration: the checks wait for a state (bounded by SCEN_WAIT) and assert what it is.
SCEN_RUNTIMES = ["python", "node", "ruby", "go"]
SCEN_WAIT = 60.0


class ScenPeer:
    def __init__(self, args, runtime, **env):
        self.runtime, self.args = runtime, args
        e = dict(os.environ, **{k: str(v) for k, v in env.items()})
        argv = peer_argv(runtime, args.build) + ["scen", args.db, args.logs, str(args.rng.randrange(1, 2 ** 31))]
        self.err = open(os.path.join(args.logs, "scen-%s.stderr" % runtime), "ab")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.err, stderr=self.err, cwd=ROOT, env=e)
        wait_for(lambda: "ready" in self.lines(), "%s peer ready" % runtime, self)

    def lines(self):
        try:
            with open(os.path.join(self.args.logs, "%s-scen-%d.log" % (self.runtime, self.proc.pid))) as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def started(self, jid):
        return any(line.split()[:2] == ["run", str(jid)] for line in self.lines())

    def kill(self):
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.err.close()

    def term(self):
        """SIGTERM; the peer must stop by itself, with status 0."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("the %s peer did not stop within 30 s of SIGTERM" % self.runtime)
        self.err.close()
        if rc != 0:
            raise AssertionError("the %s peer exited with %d after SIGTERM" % (self.runtime, rc))


def wait_for(cond, what, peer=None, timeout=SCEN_WAIT):
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if peer is not None and peer.proc.poll() is not None:
            raise AssertionError("the %s peer exited (%s) waiting for %s" % (peer.runtime, peer.proc.returncode, what))
        if time.monotonic() > end:
            raise AssertionError("no %s within %.0f s" % (what, timeout))
        time.sleep(0.02)


class Scen:
    def __init__(self, args):
        import tocsin
        self.tocsin, self.args = tocsin, args
        self.passed, self.failed = 0, []

    def fresh(self):
        for f in glob.glob(self.args.db + "*"):
            os.unlink(f)
        self.db = self.tocsin.open(self.args.db)
        self.q = self.db.queue("scen")

    def sql(self, text, *p):
        c = ro(self.args.db)
        try:
            return c.execute(text, p).fetchall()
        finally:
            c.close()

    def job(self, jid):
        r = self.sql("SELECT state, attempts, max_attempts, handbacks FROM _tocsin_jobs WHERE id = ?", jid)
        return dict(zip(("state", "attempts", "max_attempts", "handbacks"), r[0])) if r else None

    def result(self, jid):
        r = self.db.wait_result(jid, timeout=SCEN_WAIT)
        if r.is_error:
            raise AssertionError("job %d failed: %s: %s" % (jid, r.error_type, r.error_message))
        return r.value

    def check_once(self, jid):
        n = self.sql("SELECT count(*) FROM _tocsin_results WHERE job_id = ?", jid)[0][0]
        expect(n == 1, "job %d has %d results" % (jid, n))
        expect(self.job(jid) is None, "job %d still live: %r" % (jid, self.job(jid)))

    def run(self, name, fn):
        t0 = time.monotonic()
        peers = []
        self.fresh()
        try:
            fn(peers)
            self.passed += 1
            print("scen: ok   %-52s (%.1fs)" % (name, time.monotonic() - t0), flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported and counted
            self.failed.append(name)
            print("scen: FAIL %-52s %s: %s" % (name, type(e).__name__, e), flush=True)
        finally:
            for p in peers:
                if p.proc.poll() is None:
                    p.kill()
            self.db.close()

    def start(self, peers, runtime, **env):
        p = ScenPeer(self.args, runtime, **env)
        peers.append(p)
        return p

    # (a) a worker SIGKILLed mid-run; a worker of another runtime re-runs the job once
    # its lease is released (the dead worker is seen); the crash counts as an attempt.
    def killed_mid_run(self, victim, heir):
        def fn(peers):
            v = self.start(peers, victim, SCEN_CONCURRENCY=1)
            jid = self.q.call("scen.hold", 600000, max_attempts=3).job_id
            wait_for(lambda: v.started(jid), "run of job %d on %s" % (jid, victim), v)
            v.kill()
            h = self.start(peers, heir, SCEN_CONCURRENCY=1, SCEN_HOLD_CAP_MS=0)
            r = self.result(jid)
            expect(r["by"] == heir and r["attempt"] == 2 and r["max_attempts"] == 3,
                   "result %r: want the %s worker's attempt 2 of 3" % (r, heir))
            expect(not any(line.startswith("done ") for line in v.lines()), "the killed run finished")
            self.check_once(jid)
            h.term()
        return fn

    # (a) the same with a stall (SIGSTOP) past the lease instead of a kill: the stalled
    # worker's process lives on, so its heartbeat, older than its lease, marks it gone; a
    # worker of another runtime re-runs the job, and the stalled run, resumed (SIGCONT)
    # and finishing (or stopped: its lease is lost), is refused: one result, the heir's.
    # The resumed worker (concurrency 1) runs the next job: the stalled run freed its slot.
    def stalled_mid_run(self, victim, heir):
        def fn(peers):
            v = self.start(peers, victim, SCEN_CONCURRENCY=1)
            jid = self.q.call("scen.hold", 1000, max_attempts=3).job_id
            wait_for(lambda: v.started(jid), "run of job %d on %s" % (jid, victim), v)
            os.kill(v.proc.pid, signal.SIGSTOP)
            try:
                h = self.start(peers, heir, SCEN_CONCURRENCY=1, SCEN_HOLD_CAP_MS=0)
                r = self.result(jid)
            finally:
                os.kill(v.proc.pid, signal.SIGCONT)
            expect(r["by"] == heir and r["attempt"] == 2, "result %r: want the %s worker's attempt 2" % (r, heir))
            h.term()  # (the resumed run ends, or is stopped as its lease is lost: either frees its slot)
            nxt = self.q.call("scen.hold", 0, max_attempts=1).job_id
            r2 = self.result(nxt)
            expect(r2["by"] == victim, "the resumed %s worker did not run the next job: %r" % (victim, r2))
            v.term()
            res = self.sql("SELECT status, value FROM _tocsin_results WHERE job_id = ?", jid)
            expect(len(res) == 1 and res[0][0] == "ok" and json.loads(res[0][1])["by"] == heir,
                   "the results of job %d after the stalled run ended: %r" % (jid, res))
            expect(self.job(jid) is None, "job %d live again: %r" % (jid, self.job(jid)))
        return fn

    # (d) SIGTERM while a long run is in flight: handed back, no attempt consumed (a job
    # with max_attempts 1 runs again), and a worker of another runtime runs it.
    def term_hand_back(self, victim, heir):
        def fn(peers):
            v = self.start(peers, victim, SCEN_CONCURRENCY=1, SCEN_SHUTDOWN_MS=300)
            jid = self.q.call("scen.hold", 600000, max_attempts=1).job_id
            wait_for(lambda: v.started(jid), "run of job %d on %s" % (jid, victim), v)
            v.term()
            j = self.job(jid)
            expect(j is not None and j["state"] == "pending" and j["attempts"] == 1 and j["max_attempts"] == 2
                   and j["handbacks"] == 1, "after the %s worker's SIGTERM the job is %r" % (victim, j))
            self.start(peers, heir, SCEN_CONCURRENCY=1, SCEN_HOLD_CAP_MS=0)
            r = self.result(jid)
            expect(r["by"] == heir and r["attempt"] == 2 and r["max_attempts"] == 2,
                   "result %r: want the %s worker's attempt 2 of 2" % (r, heir))
            self.check_once(jid)
        return fn

    # (c) one unique key enqueued by three runtimes (and the driver's Python) at the same
    # moment: one job, every caller gets its id; the key stays held while the job runs
    # (processing is live) and is free again once the job finished (docs/sql.md:
    # at most one live job per queue and key).
    def unique(self, peers):
        key = "scen-key-%d" % self.args.rng.randrange(1 << 30)
        env = dict(SCEN_KEY=key, SCEN_HOLD_MS=1500)
        producers = []
        for rt in ("node", "ruby", "go"):
            e = dict(os.environ, **{k: str(v) for k, v in env.items()})
            argv = peer_argv(rt, self.args.build) + ["scen-enqueue", self.args.db, self.args.logs, "1"]
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, cwd=ROOT, env=e)
            producers.append((rt, p))
        log = lambda rt, p: os.path.join(self.args.logs, "%s-scen-enqueue-%d.log" % (rt, p.pid))  # noqa: E731
        lines = lambda rt, p: open(log(rt, p)).read().split() if os.path.exists(log(rt, p)) else []  # noqa: E731
        wait_for(lambda: all("ready" in lines(rt, p) for rt, p in producers), "producers ready")
        open(os.path.join(self.args.logs, "scen-go"), "w").close()
        mine = self.q.call("scen.hold", 1500, unique_key=key, max_attempts=1).job_id
        ids = {"python": mine}
        for rt, p in producers:
            expect(p.wait(SCEN_WAIT) == 0, "the %s producer exited with %s" % (rt, p.returncode))
            w = lines(rt, p)
            ids[rt] = int(w[w.index("id") + 1])
        expect(len(set(ids.values())) == 1, "one key, several jobs: %r" % ids)
        n = self.sql("SELECT count(*) FROM _tocsin_jobs WHERE unique_key = ?", key)[0][0]
        expect(n == 1, "%d live jobs hold the key" % n)
        w = self.start(peers, "go", SCEN_CONCURRENCY=1)
        wait_for(lambda: w.started(mine), "run of job %d" % mine, w)
        again = self.q.call("scen.hold", 0, unique_key=key, max_attempts=1).job_id
        expect(again == mine, "an enqueue while job %d runs got %d" % (mine, again))
        r = self.result(mine)
        expect(r["attempt"] == 1, "result %r" % r)
        self.check_once(mine)
        after = self.q.call("scen.hold", 0, unique_key=key, max_attempts=1).job_id
        expect(after != mine, "the key of finished job %d still held" % mine)
        self.result(after)
        w.term()

    # (d) SIGTERM while a run that ends within the shutdown timeout is in flight: the run
    # finishes on its worker, on its first attempt, and is not handed back.
    def term_finish(self, victim):
        def fn(peers):
            v = self.start(peers, victim, SCEN_CONCURRENCY=1, SCEN_SHUTDOWN_MS=20000)
            jid = self.q.call("scen.hold", 500, max_attempts=1).job_id
            wait_for(lambda: v.started(jid), "run of job %d on %s" % (jid, victim), v)
            v.term()
            r = self.result(jid)
            expect(r["by"] == victim and r["attempt"] == 1 and r["max_attempts"] == 1, "result %r" % r)
            self.check_once(jid)
        return fn

    # (e) a burst of short runs (the workers claim a reserve ahead of their slots), one
    # worker SIGKILLed and one SIGTERMed in the middle: every job runs to its result,
    # once, no worker past its concurrency; the killed worker's claims come back as
    # attempts, the stopped one's reserve with none consumed.
    def burst_short(self, peers):
        conc = {"python": 2, "node": 3, "ruby": 2, "go": 4}
        live = {rt: self.start(peers, rt, SCEN_CONCURRENCY=conc[rt]) for rt in SCEN_RUNTIMES}
        with self.db.transaction() as tx:
            ids = [self.q.call("scen.hold", 0, max_attempts=3, tx=tx).job_id for _ in range(3000)]
        left = lambda: self.sql("SELECT count(*) FROM _tocsin_jobs WHERE queue = 'scen'")[0][0]  # noqa: E731
        wait_for(lambda: left() < 2000, "a third of the burst done")
        kill, term = self.args.rng.sample(SCEN_RUNTIMES, 2)
        live[kill].kill()
        live[term].term()
        by = {}
        for jid in ids:
            r = self.result(jid)
            expect(r["peak"] <= conc[r["by"]], "the %s worker ran %d at once, concurrency %d"
                   % (r["by"], r["peak"], conc[r["by"]]))
            expect(r["attempt"] <= 2, "job %d ran as attempt %d" % (jid, r["attempt"]))
            by[r["by"]] = by.get(r["by"], 0) + 1
        n = self.sql("SELECT count(*), count(DISTINCT job_id) FROM _tocsin_results")[0]
        expect(n == (len(ids), len(ids)), "results %r for %d jobs" % (n, len(ids)))
        expect(left() == 0 and not self.sql("SELECT id FROM _tocsin_dead"), "jobs left or dead")
        for rt, p in live.items():
            if rt not in (kill, term):
                p.term()

    def enqueue_from(self, rt, key):
        """scen.hold(0) with unique key `key`, enqueued by a producer of runtime `rt`."""
        open(os.path.join(self.args.logs, "scen-go"), "w").close()
        e = dict(os.environ, SCEN_KEY=key, SCEN_HOLD_MS="0")
        p = subprocess.Popen(peer_argv(rt, self.args.build) + ["scen-enqueue", self.args.db, self.args.logs, "1"],
                             stdin=subprocess.DEVNULL, cwd=ROOT, env=e)
        expect(p.wait(SCEN_WAIT) == 0, "the %s producer exited with %s" % (rt, p.returncode))
        w = open(os.path.join(self.args.logs, "%s-scen-enqueue-%d.log" % (rt, p.pid))).read().split()
        return int(w[w.index("id") + 1])

    # (c) the key is free once no live job holds it: a holder that expired unclaimed
    # (it goes dead, 'expired'), or one cancelled; a dead job is not requeued while a
    # live job holds its key, and is once that job finished.
    def unique_freed(self, peers):
        key = "scen-key-%d" % self.args.rng.randrange(1 << 30)
        first = self.q.call("scen.hold", 0, unique_key=key, expires=0.2, max_attempts=1).job_id
        exp = self.sql("SELECT expires_at FROM _tocsin_jobs WHERE id = ?", first)[0][0]
        wait_for(lambda: time.time() * 1000 > exp + 50, "the job's expiry")
        second = self.enqueue_from("node", key)
        expect(second != first, "the expired job %d still holds its key" % first)
        dead = self.sql("SELECT reason FROM _tocsin_dead WHERE id = ?", first)
        expect(dead == [("expired",)], "the expired job is %r in the dead letters" % (dead,))
        expect(self.q.cancel(second), "job %d not cancelled" % second)
        third = self.enqueue_from("ruby", key)
        expect(third not in (first, second), "the cancelled job %d still holds its key" % second)
        try:
            again = self.q.requeue(second)
        except self.tocsin.Error:
            again = False
        expect(not again, "dead job %d requeued while job %d holds its key" % (second, third))
        w = self.start(peers, "go", SCEN_CONCURRENCY=1)
        self.result(third)
        expect(self.q.requeue(second), "dead job %d not requeued once its key was free" % second)
        r = self.result(second)
        expect(r["by"] == "go", "result %r" % r)
        w.term()

    # (d) a second SIGTERM closes at once (worker-protocol.md, Shutdown): the long run is
    # handed back (no attempt consumed) although the shutdown timeout has not passed.
    def term_twice(self, victim, heir):
        def fn(peers):
            v = self.start(peers, victim, SCEN_CONCURRENCY=1, SCEN_SHUTDOWN_MS=600000)
            jid = self.q.call("scen.hold", 600000, max_attempts=1).job_id
            wait_for(lambda: v.started(jid), "run of job %d on %s" % (jid, victim), v)
            v.proc.send_signal(signal.SIGTERM)
            time.sleep(0.2)  # the first signal handled (no assertion rests on this pause)
            v.term()
            j = self.job(jid)
            expect(j is not None and j["state"] == "pending" and j["attempts"] == 1 and j["max_attempts"] == 2,
                   "after two SIGTERMs to the %s worker the job is %r" % (victim, j))
            self.start(peers, heir, SCEN_CONCURRENCY=1, SCEN_HOLD_CAP_MS=0)
            r = self.result(jid)
            expect(r["by"] == heir and r["attempt"] == 2, "result %r" % r)
        return fn

    # (e) a burst on four workers of four runtimes: no worker ever runs more than its
    # concurrency; every job runs once, on its first attempt.
    def burst(self, peers):
        conc = {"python": 2, "node": 3, "ruby": 1, "go": 4}
        for rt in SCEN_RUNTIMES:
            self.start(peers, rt, SCEN_CONCURRENCY=conc[rt])
        with self.db.transaction() as tx:
            ids = [self.q.call("scen.hold", 30, max_attempts=1, tx=tx).job_id for _ in range(80)]
        by = {}
        for jid in ids:
            r = self.result(jid)
            expect(r["attempt"] == 1, "job %d ran as attempt %d" % (jid, r["attempt"]))
            expect(r["peak"] <= conc[r["by"]], "the %s worker ran %d at once, concurrency %d"
                   % (r["by"], r["peak"], conc[r["by"]]))
            by[r["by"]] = by.get(r["by"], 0) + 1
            self.check_once(jid)
        runs = sum(1 for p in peers for line in p.lines() if line.startswith("run "))
        expect(runs == len(ids), "%d runs for %d jobs" % (runs, len(ids)))
        for p in peers:
            p.term()

    # (f) priorities and delays: jobs enqueued while no worker runs are run by one
    # worker (concurrency 1) highest priority first; the delayed job, of the highest
    # priority, runs last, after its delay.
    def priorities(self, runtime):
        def fn(peers):
            prios = list(range(-4, 6))
            self.args.rng.shuffle(prios)
            c = sqlite3.connect(self.args.db, isolation_level=None, timeout=10)
            self.tocsin.load(c)
            ids = {}
            for i, p in enumerate(prios):  # half through the binding, half through SQL
                if i % 2:
                    ids[p] = self.q.call("scen.hold", 0, priority=p, max_attempts=1).job_id
                else:
                    ids[p] = c.execute("SELECT tocsin_task_enqueue('scen', 'scen.hold', '[0]', '{}', "
                                       "json_object('priority', ?, 'max_attempts', 1))", (p,)).fetchone()[0]
            c.close()
            late = self.q.call("scen.hold", 0, priority=100, delay=1.5, max_attempts=1).job_id
            run_at = self.sql("SELECT run_at FROM _tocsin_jobs WHERE id = ?", late)[0][0]
            self.start(peers, runtime, SCEN_CONCURRENCY=1)
            order = sorted(prios, key=lambda p: self.result(ids[p])["seq"])
            expect(order == sorted(prios, reverse=True), "run order by priority %r" % order)
            r = self.result(late)
            expect(r["seq"] == len(prios) + 1, "the delayed job ran as run %d of %d" % (r["seq"], len(prios) + 1))
            done = self.sql("SELECT created_at FROM _tocsin_results WHERE job_id = ?", late)[0][0]
            expect(done >= run_at, "the delayed job finished at %d, before its run_at %d" % (done, run_at))
        return fn

    # (b) two workers of two runtimes, both standing for the scheduler: every boundary of
    # a schedule firing every second (@every 1s, or a 6-field cron) fires once, across SIGTERM restarts, a SIGKILL and a stall (SIGSTOP
    # past its lease, then SIGCONT) of the leader.
    def scheduler(self, a, b, cron):
        def fn(peers):
            c = sqlite3.connect(self.args.db, isolation_level=None, timeout=10)
            self.tocsin.load(c)
            c.execute("SELECT tocsin_schedule_set('scen.tick', ?, 'ticks', '{}', "
                      "'{\"catch_up\":\"all\",\"max_catch_up\":1000}')", (cron,)).fetchall()
            c.close()
            live = {a: self.start(peers, a), b: self.start(peers, b)}
            ticks = lambda: self.sql("SELECT count(*) FROM _tocsin_jobs WHERE queue = 'ticks'")[0][0]  # noqa: E731
            for how in ("term", "kill", "stop", "term"):
                n = ticks()
                wait_for(lambda: ticks() >= n + 2, "two more boundaries")
                pid = wait_for(lambda: leader_pid(self.args.db), "a scheduler leader")
                rt = [k for k, p in live.items() if p.proc.pid == pid]
                expect(rt, "the leader (pid %d) is none of the peers" % pid)
                if how == "stop":  # stalled past its lease: the other takes over, then it resumes
                    os.kill(pid, signal.SIGSTOP)
                    try:
                        wait_for(lambda: leader_pid(self.args.db) not in (None, pid), "a new leader")
                        n = ticks()
                        wait_for(lambda: ticks() >= n + 2, "two more boundaries")
                    finally:
                        os.kill(pid, signal.SIGCONT)
                    continue
                getattr(live[rt[0]], how)()
                live[rt[0]] = self.start(peers, rt[0])
            n = ticks()
            wait_for(lambda: ticks() >= n + 2, "two more boundaries")
            for p in live.values():
                p.term()
            fires = [r[0] for r in self.sql("SELECT json_extract(meta, '$.tocsin_fire_at') FROM _tocsin_jobs "
                                             "WHERE queue = 'ticks' ORDER BY 1")]
            dup = len(fires) - len(set(fires))
            gaps = [(x, y) for x, y in zip(fires, fires[1:]) if y - x != 1000]
            expect(not dup and not gaps, "boundaries fired twice %d, gaps %s" % (dup, gaps[:5]))
            fc = self.sql("SELECT fired_count, skipped_count FROM _tocsin_schedules WHERE name = 'scen.tick'")[0]
            expect(fc[0] == len(fires) and fc[1] == 0, "fired_count %d skipped %d, jobs %d" % (fc[0], fc[1], len(fires)))
        return fn


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def scenarios(args):
    s = Scen(args)
    t0 = time.monotonic()
    rts = SCEN_RUNTIMES
    for i, victim in enumerate(rts):  # each runtime killed once and heir once
        heir = rts[(i + 1) % len(rts)]
        s.run("(a) %s SIGKILLed mid-run, %s re-runs" % (victim, heir), s.killed_mid_run(victim, heir))
    for i, victim in enumerate(rts):
        heir = rts[(i + 3) % len(rts)]
        s.run("(a) %s stalled (SIGSTOP) mid-run, %s re-runs" % (victim, heir), s.stalled_mid_run(victim, heir))
    for i, victim in enumerate(rts):
        heir = rts[(i + 2) % len(rts)]
        s.run("(d) %s SIGTERM hands back, %s runs it" % (victim, heir), s.term_hand_back(victim, heir))
    # (Go's Worker leaves signals to the program: its peer calls Worker.StopNow at the second)
    for victim, heir in (("python", "node"), ("node", "ruby"), ("ruby", "go"), ("go", "python")):
        s.run("(d) %s second SIGTERM closes at once" % victim, s.term_twice(victim, heir))
    for rt in rts:
        s.run("(d) %s SIGTERM lets a short run finish" % rt, s.term_finish(rt))
    s.run("(c) one unique key from 4 runtimes at once", s.unique)
    s.run("(c) a unique key freed by expiry, cancel, finish", s.unique_freed)
    s.run("(e) burst on 4 runtimes within concurrency", s.burst)
    s.run("(e) short-run burst, a kill and a stop midway", s.burst_short)
    for rt in rts:
        s.run("(f) priorities and delay on %s" % rt, s.priorities(rt))
    s.run("(b) @every 1s on ruby+node, leader restarts", s.scheduler("ruby", "node", "@every 1s"))
    s.run("(b) cron '* * * * * *' on go+python, leader restarts", s.scheduler("go", "python", "* * * * * *"))
    total = s.passed + len(s.failed)
    print("scen: %d scenarios, %d passed, %d failed in %.1f s (seed %d)"
          % (total, s.passed, len(s.failed), time.monotonic() - t0, args.seed))
    if s.failed:
        print("scen: failed: " + "; ".join(s.failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
