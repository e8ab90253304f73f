"""The soak: mixed load from Python, Node, Go and Ruby peers on one .db (the crash
suite's peers, never killed here) plus a Python peer that publishes and follows a
stream and notifies and listens, for SOAK_SECONDS (default 600). Every SOAK_EVERY
seconds it prints jobs/s, the p99 enqueue->handled latency, peak RSS and open
descriptors per process (/proc) and the WAL size. At the end it fails when a process
grew beyond the bounds below between the GROWTH_FROM mark and the end.

    python soak.py --dir build/soak [--seconds 60] [--every 10]
"""
import argparse
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crash"))
import driver  # noqa: E402  (the crash suite's peers and setup)

# Bounds (why these numbers):
# an allocator settles within seconds; past the warm-up a steady load should not need
# more memory, so growth over this is a leak rather than a cache filling up
RSS_GROWTH_MIB = 24
# each peer opens its handles once; a descriptor per operation that is not closed
# shows within a minute as tens of descriptors
FD_GROWTH = 4
# autocheckpoints keep the WAL near 1000 pages (4 MiB) while readers let them finish;
# far beyond means checkpoints are starved (a reader that never ends its snapshot)
WAL_MAX_MIB = 64
# growth is measured from this mark (warm-up: imports, JIT, first allocations done)
GROWTH_FROM = 20.0

# Two consumers per runtime against one producer each: the peers keep the crash
# suite's pauses (a consumer spends ~15 ms on a job, a producer ~40 ms between
# jobs), and with one consumer each the backlog, and with it the latency, grew
# for as long as the soak ran.
ROLES = ["py-worker", "py-worker-2", "node-consumer", "node-consumer-2", "go-consumer",
         "go-consumer-2", "rb-consumer", "rb-consumer-2",
         "py-producer", "node-producer", "go-producer", "rb-producer", "py-pubsub"]
driver.ROLES["py-pubsub"] = ("python", "pubsub", "pubsub", 0)
for _name in ("node-consumer", "go-consumer", "rb-consumer"):
    driver.ROLES[_name + "-2"] = driver.ROLES[_name]


def proc_stat(pid):
    """(VmRSS MiB, VmHWM MiB, open descriptors) of pid."""
    rss = hwm = 0.0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024.0
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024.0
    return rss, hwm, len(os.listdir("/proc/%d/fd" % pid))


def p99(values):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * 0.99))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS") or 600))
    ap.add_argument("--every", type=float, default=float(os.environ.get("SOAK_EVERY") or 10))
    args = ap.parse_args()
    seed = int(os.environ.get("SEED") or random.SystemRandom().randrange(1, 2 ** 31))
    print("soak: seed %d, %.0f s, a line every %.0f s" % (seed, args.seconds, args.every), flush=True)
    rng = random.Random(seed)
    driver.workdir(args, "soak.db")
    driver.setup(args)
    peers = {n: driver.Peer(n, args, random.Random(rng.randrange(2 ** 31))) for n in ROLES}
    for p in peers.values():
        p.start()
    deadline = time.monotonic() + 60
    while not all(p.ready() for p in peers.values()):
        driver.check_peers_alive(peers)
        if time.monotonic() > deadline:
            driver.fail("soak peers not ready after 60 s")
        time.sleep(0.05)
    t0 = time.monotonic()
    conn = sqlite3.connect("file:%s?mode=ro" % args.db, uri=True, timeout=10)
    base, marks, last_t, last_n, last_at = {}, {}, t0, 0, int(time.time() * 1000)
    peak = {}
    print("soak: %6s %8s %9s %8s  %s" % ("t(s)", "jobs/s", "p99(ms)", "WAL(MiB)", "peak RSS MiB / fds per process"))
    while True:
        time.sleep(min(args.every, max(0.0, args.seconds - (time.monotonic() - t0))))
        driver.check_peers_alive(peers)
        t = time.monotonic() - t0
        now_ms = int(time.time() * 1000)
        n = conn.execute("SELECT count(*) FROM effects").fetchone()[0]
        lat = [r[0] for r in conn.execute(
            "SELECT e.at - i.at FROM effects e JOIN intents i ON i.job_id = e.job_id WHERE e.at > ? AND e.at <= ?",
            (last_at, now_ms))]
        wal = os.path.getsize(args.db + "-wal") / 2 ** 20 if os.path.exists(args.db + "-wal") else 0.0
        row = {}
        for name, p in peers.items():
            rss, hwm, fds = proc_stat(p.proc.pid)
            row[name] = (rss, hwm, fds)
            peak[name] = max(peak.get(name, 0), hwm)
        if t >= GROWTH_FROM and not base:
            base = dict(row)
        marks = row
        peak["wal"] = max(peak.get("wal", 0), wal)
        print("soak: %6.0f %8.1f %9.0f %8.1f  %s" % (
            t, (n - last_n) / (time.monotonic() - t0 - (last_t - t0) or 1), p99(lat), wal,
            " ".join("%s %.0f/%d" % (k, v[1], v[2]) for k, v in row.items())), flush=True)
        last_t, last_n, last_at = time.monotonic(), n, now_ms
        if t >= args.seconds:
            break
    for p in peers.values():
        p.proc.send_signal(signal.SIGTERM)
        p.killed = True
    for p in peers.values():
        try:
            p.proc.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
    problems = []
    if not base:
        base = marks  # a run shorter than the warm-up compares the last sample with itself
    for name in ROLES:
        grow = marks[name][0] - base[name][0]
        fds = marks[name][2] - base[name][2]
        if grow > RSS_GROWTH_MIB:
            problems.append("%s: RSS grew %.1f MiB after %.0f s (bound %d)" % (name, grow, GROWTH_FROM, RSS_GROWTH_MIB))
        if fds > FD_GROWTH:
            problems.append("%s: %d more descriptors than at %.0f s (bound %d)" % (name, fds, GROWTH_FROM, FD_GROWTH))
    if peak["wal"] > WAL_MAX_MIB:
        problems.append("WAL reached %.1f MiB (bound %d)" % (peak["wal"], WAL_MAX_MIB))
    total = conn.execute("SELECT count(*) FROM effects").fetchone()[0]
    twice = conn.execute("SELECT count(*) FROM (SELECT job_id FROM effects GROUP BY job_id HAVING count(*) > 1)").fetchone()[0]
    if total == 0:
        problems.append("no job was handled")
    if twice:
        problems.append("%d jobs handled twice" % twice)
    pubsub = peers["py-pubsub"].lines()
    counts = {}
    for line in pubsub:
        w = line.split()
        if w and w[0] == "count":
            counts = dict(zip(w[1::2], map(int, w[2::2])))
    for k in ("published", "followed", "notified", "heard"):
        if not counts.get(k):
            problems.append("pubsub peer: nothing %s" % k)
    conn.close()
    print("soak: %d jobs handled; stream published %s followed %s; notified %s heard %s" % (
        total, counts.get("published"), counts.get("followed"), counts.get("notified"), counts.get("heard")))
    print("soak: growth %0.f s -> end: %s" % (GROWTH_FROM, ", ".join(
        "%s %+.1f MiB %+d fds" % (k, marks[k][0] - base[k][0], marks[k][2] - base[k][2]) for k in ROLES)))
    if problems:
        for p in problems:
            print("soak: BOUND BROKEN: " + p)
        driver.fail("%d bound(s) broken (seed %d)" % (len(problems), seed))
    print("soak: ok, within bounds (RSS +%d MiB, fds +%d, WAL %d MiB)" % (RSS_GROWTH_MIB, FD_GROWTH, WAL_MAX_MIB))


if __name__ == "__main__":
    main()
