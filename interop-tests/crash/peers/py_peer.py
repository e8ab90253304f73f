"""The Python peer of the crash suite and the soak (interop-tests/crash/driver.py,
interop-tests/soak/soak.py start it as a separate process and SIGKILL it at will).

    py_peer.py MODE DB LOGDIR SEED

MODE:
  worker        tocsin.Worker running task "crash.effect": the effect row and the ack
                commit in one transaction (current_job().transaction()); leads the
                scheduler when it can
  producer      the intent row and the call of "crash.effect" in one transaction,
                through the app's own stdlib sqlite3 connection (tocsin.call)
  zombie        claims with a short lease, waits past it, then tries effect + ack in
                one transaction: a refused ack must roll the effect back
  checkpointer  PRAGMA wal_checkpoint(TRUNCATE) in a loop (SIGKILLed mid-checkpoint)
  scen          the scenarios' Worker (driver.py --scenarios): task "scen.hold"
  soak-*        the soak's loads (see interop-tests/soak/soak.py)

Each peer appends one line per event to LOGDIR/<mode>-<pid>.log with os.write (no
buffer a SIGKILL could lose): the driver reads which runs started and which
transactions were open when the process died."""
import os
import random
import signal
import sqlite3
import sys
import time

import tocsin

MODE, DB, LOGDIR, SEED = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
RUNTIME = "python"
rng = random.Random(SEED)
log_fd = os.open(os.path.join(LOGDIR, "%s-%s-%d.log" % (RUNTIME, MODE, os.getpid())),
                 os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def log(line):
    os.write(log_fd, (line + "\n").encode())


def now_ms():
    return int(time.time() * 1000)


def pause(lo, hi):
    time.sleep(rng.uniform(lo, hi) / 1000.0)


def worker():
    db = tocsin.open(DB)
    q = db.queue("crash")

    @q.task(name="crash.effect", retries=24)
    def effect(n, p):
        job = tocsin.current_job()
        log("run %d %d" % (job.job_id, job.attempt))
        pause(0, 15)
        with job.transaction() as tx:
            tx.execute("INSERT INTO effects(job_id, runtime, pid, attempt, at) VALUES (?, ?, ?, ?, ?)",
                       [job.job_id, RUNTIME, os.getpid(), job.attempt, now_ms()])
            pause(0, 15)  # a SIGKILL here lands inside the ack transaction
            tx.result = {"n": n, "by": RUNTIME}
        return None

    log("ready")
    tocsin.Worker(db, ["crash"], concurrency=3, visibility=3, shutdown_timeout=5,
                  scheduler=True, scheduler_ttl=1.5).run()
    db.close()


def scen():
    """The scenarios' Worker on queue "scen" (the same in every runtime's peer): task
    "scen.hold(ms)" logs "run JOB ATTEMPT", sleeps ms (cancellable), then returns who ran
    it, the run's attempt and max_attempts, its start order in this process and the most
    runs this process had in flight at once. SCEN_HOLD_CAP_MS caps the sleep (a peer that
    re-runs a long job ends it at once); SCEN_CONCURRENCY, SCEN_SHUTDOWN_MS set the
    Worker's concurrency and shutdown timeout; it stands for the scheduler and stops
    gracefully on SIGTERM."""
    import asyncio
    db = tocsin.open(DB)
    q = db.queue("scen")
    st = {"running": 0, "peak": 0, "seq": 0}
    cap = int(os.environ.get("SCEN_HOLD_CAP_MS", str(1 << 30)))

    @q.task(name="scen.hold", retries=9)
    async def hold(ms):
        job = tocsin.current_job()
        st["seq"] += 1
        seq = st["seq"]
        st["running"] += 1
        st["peak"] = max(st["peak"], st["running"])
        log("run %d %d" % (job.job_id, job.attempt))
        try:
            await asyncio.sleep(min(ms, cap) / 1000.0)
        finally:
            st["running"] -= 1
        log("done %d" % job.job_id)
        return {"by": RUNTIME, "pid": os.getpid(), "attempt": job.attempt, "max_attempts": job.max_attempts,
                "seq": seq, "peak": st["peak"]}

    log("ready")
    tocsin.Worker(db, ["scen"], concurrency=int(os.environ.get("SCEN_CONCURRENCY", "2")), visibility=3,
                  shutdown_timeout=int(os.environ.get("SCEN_SHUTDOWN_MS", "500")) / 1000.0,
                  scheduler=True, scheduler_ttl=1.5).run()
    db.close()


def producer():
    conn = sqlite3.connect(DB, isolation_level=None, timeout=10)
    tocsin.load(conn)
    seq = 0
    log("ready")
    while True:
        log("begin")
        conn.execute("BEGIN IMMEDIATE")
        for _ in range(rng.randint(1, 3)):
            seq += 1
            jid = tocsin.call(conn, "crash", "crash.effect", kwargs={"n": seq, "p": RUNTIME},
                              max_attempts=25)
            conn.execute("INSERT INTO intents(job_id, producer, pid, at) VALUES (?, ?, ?, ?)",
                         (jid, RUNTIME, os.getpid(), now_ms()))
        pause(0, 10)  # a SIGKILL here commits nothing
        conn.execute("COMMIT")
        log("commit")
        pause(20, 60)


def zombie():
    db = tocsin.open(DB)
    q = db.queue("crash")
    wid = "zombie-%d" % os.getpid()
    log("ready")
    while True:
        job = q.claim(wid, visibility=0.3)
        if job is None:
            pause(50, 150)
            continue
        log("run %d %d" % (job.id, job.attempts))
        pause(500, 900)  # past the lease: another worker may have reclaimed it
        try:
            with db.transaction() as tx:
                tx.execute("INSERT INTO effects(job_id, runtime, pid, attempt, at) VALUES (?, ?, ?, ?, ?)",
                           [job.id, "python-zombie", os.getpid(), job.attempts, now_ms()])
                if not q.ack(job, tx=tx):
                    raise tocsin.LeaseLost("stale")
            log("late-ack-accepted %d" % job.id)
        except tocsin.LeaseLost:
            log("late-ack-refused %d" % job.id)


def checkpointer():
    # A short busy timeout: RESTART and TRUNCATE hold the write lock while they wait for
    # readers, and every peer has a reader (its watcher); PASSIVE waits for nobody.
    conn = sqlite3.connect(DB, isolation_level=None, timeout=0.2)
    log("ready")
    while True:
        mode = rng.choice(["PASSIVE", "PASSIVE", "RESTART", "TRUNCATE"])
        log("checkpoint")
        conn.execute("PRAGMA wal_checkpoint(%s)" % mode).fetchall()
        log("checkpointed")
        pause(20, 80)


def pubsub():
    """The soak's stream and notify load: publish + notify in one transaction, a
    follower of the stream (a named consumer) and a listener, each on its thread; the
    counts go to the log once a second."""
    import threading
    db = tocsin.open(DB)
    counts = {"published": 0, "followed": 0, "notified": 0, "heard": 0}

    def follow():
        for _ in db.stream("soak").subscribe(consumer="soak-follower", autosave_every=50):
            counts["followed"] += 1

    def hear():
        for _ in db.listen("soak"):
            counts["heard"] += 1

    for fn in (follow, hear):
        threading.Thread(target=fn, daemon=True).start()
    log("ready")
    last = time.monotonic()
    while True:
        with db.transaction() as tx:
            db.stream("soak").publish({"at": now_ms()}, tx=tx)
            db.notify("soak", {"at": now_ms()}, tx=tx)
        counts["published"] += 1
        counts["notified"] += 1
        if counts["published"] % 200 == 0:
            db.stream("soak").trim(max_count=1000)  # bounded tables: growth would be ours
            db.prune_notifications(max_keep=1000)
        if time.monotonic() - last > 1:
            log("count " + " ".join("%s %d" % kv for kv in counts.items()))
            last = time.monotonic()
        pause(10, 30)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0)) if MODE in ("producer", "zombie", "checkpointer", "pubsub") else None
    {"worker": worker, "scen": scen, "producer": producer, "zombie": zombie, "checkpointer": checkpointer,
     "pubsub": pubsub}[MODE]()
