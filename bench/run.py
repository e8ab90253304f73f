"""The driver of `make bench` / `make bench-quick`: every runtime's tocsin beside its peers
and raw SQL, in one session, interleaved, then results JSON, a Markdown table and charts.

    python bench/run.py --mode full|quick --out DIR [--readme bench/README.md] [--only RUNTIME]

Each measurement is one run of a runner program (bench/peers/<runtime>/...), which prints
one JSON object {"metrics": {...}, "samples": {...}} for one implementation on one
workload. The driver runs every (workload, runtime, implementation) once per repetition,
alternating the implementations' order from one repetition to the next (ABBA), so that
the machine's noise falls on tocsin and its peers alike, and keeps the median of the
repetitions with their spread. It fails when a run fails or a figure is missing.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BENCH_BUILD", os.path.join(ROOT, "build"))
PAYLOAD_BYTES = len('{"to": "ada@example.org", "template": "welcome", "n": 1}')

# workload key -> (title, metrics [(key, label, unit, higher_is_better)])
WORKLOADS = {
    "enq1": ("enqueue, 1 per transaction", [("ops_s", "jobs/s", "1/s", True)]),
    "enq100": ("enqueue, 100 per transaction", [("ops_s", "jobs/s", "1/s", True)]),
    "ca1": ("claim + ack, 1 per transaction", [("ops_s", "jobs/s", "1/s", True)]),
    # the delivery huey's dequeue gives: the job is gone when the claim commits
    "ca1tx": ("claim + ack in one transaction, 1 per transaction", [("ops_s", "jobs/s", "1/s", True)]),
    "ca100": ("claim 100 + ack 100", [("ops_s", "jobs/s", "1/s", True)]),
    # p50/p99 from the time taken before the send (the sender's commit included);
    # "after commit": from the time the sender's call returned (the listener's share)
    "wake": ("enqueue -> handler start, across processes", [
        ("p50_ms", "p50 ms", "ms", False), ("p99_ms", "p99 ms", "ms", False),
        ("p50_commit_ms", "p50 ms after commit", "ms", False), ("p99_commit_ms", "p99 ms after commit", "ms", False)]),
    "notify": ("notify -> listen, across processes", [
        ("p50_ms", "p50 ms", "ms", False), ("p99_ms", "p99 ms", "ms", False),
        ("p50_commit_ms", "p50 ms after commit", "ms", False), ("p99_commit_ms", "p99 ms after commit", "ms", False)]),
    "stream": ("stream publish (1 per tx) and replay", [
        ("publish_ops_s", "publish ev/s", "1/s", True), ("replay_ops_s", "replay ev/s", "1/s", True)]),
    "claimlat": ("claim latency, 0 vs backlog queued", [
        ("empty_p50_ms", "empty p50 ms", "ms", False), ("backlog_p50_ms", "backlog p50 ms", "ms", False),
        ("backlog_over_empty", "backlog/empty", "x", False)]),
    "sustained": ("sustained: 4 worker processes + 2 producers", [
        ("acked_ops_s", "acked jobs/s", "1/s", True), ("enqueued_ops_s", "enqueued jobs/s", "1/s", True)]),
    "worker": ("worker runner, no-op tasks, 2 processes x 4 concurrency", [
        ("tasks_s", "tasks/s", "1/s", True)]),
    "idle": ("idle worker (scheduler on, nothing queued): its CPU", [
        ("cpu_pct", "% of a core", "%", False)]),
}

MODES = {
    # reps: throughput and latency workloads (an odd count: the median is one run);
    # reps_long: claimlat, sustained, idle; the worker runner, ~1.5 s a run, takes reps
    "full": dict(reps=5, reps_long=3, n=2000, lat_n=300, claim_n=300, backlog=100000,
                 seconds=20.0, worker_n=30000, idle_s=5.0),
    "quick": dict(reps=1, reps_long=1, n=1000, lat_n=100, claim_n=100, backlog=20000,
                  seconds=2.0, worker_n=2000, idle_s=1.0),
}
LONG = {"claimlat", "sustained", "idle"}


def runtimes():
    """runtime -> (implementations in order, {impl: (argv prefix, workloads)}). tocsin first,
    raw SQL second, then the peers."""
    py = os.path.join(BUILD, "bench-venv", "bin", "python")
    pyhk = os.path.join(BUILD, "bench-venv-hkfeat", "bin", "python")
    pyrun = os.path.join(ROOT, "bench", "peers", "python", "runner.py")
    thr = ["enq1", "enq100", "ca1", "ca100"]
    rt = {}
    p = {
        "tocsin": ([py, pyrun, "tocsin"], thr + ["ca1tx", "wake", "notify", "stream", "claimlat", "sustained",
                                                 "worker", "idle"]),
        "raw": ([py, pyrun, "raw"], thr + ["ca1tx", "stream", "claimlat", "sustained"]),
        "honker": ([py, pyrun, "honker"], thr + ["wake", "notify", "stream", "claimlat", "sustained", "worker",
                                                 "idle"]),
        # huey has no claim with a lease and a later ack: its dequeue is the one-transaction row
        "huey": ([py, pyrun, "huey"], ["enq1", "ca1tx"]),
        # the floor of any asyncio listener here: a line through a pipe, no database
        "pipe": ([py, pyrun, "pipe"], ["notify"]),
    }
    if os.path.exists(pyhk):
        p["honker-kernel"] = ([pyhk, pyrun, "honker-kernel"], ["wake", "notify"])
        p["honker-shm"] = ([pyhk, pyrun, "honker-shm"], ["wake", "notify"])
    rt["python"] = p
    for name, fn in (("c", c_runtime), ("node", node_runtime), ("go", go_runtime), ("ruby", ruby_runtime)):
        r = fn(thr)
        if r:
            rt[name] = r
        else:
            MISSING.append(name)
    return rt


MISSING = []  # runtimes whose runner is not built (an error unless --only leaves them out)


def c_runtime(thr):
    exe = os.path.join(BUILD, "bench_peers_c")
    if not os.path.exists(exe):
        return None
    return {"tocsin": ([exe, "tocsin"], thr + ["claimlat"]),
            "raw": ([exe, "raw"], thr + ["claimlat"])}


def node_runtime(thr):
    js = os.path.join(ROOT, "bench", "peers", "node", "runner.js")
    if not os.path.exists(os.path.join(ROOT, "bench", "peers", "node", "node_modules")):
        return None
    return {"tocsin": (["node", js, "tocsin"], thr + ["wake", "notify", "worker"]),
            "raw": (["node", js, "raw"], thr),
            "plainjob": (["node", js, "plainjob"], thr)}


def go_runtime(thr):
    exe = os.path.join(BUILD, "bench-peers-go")
    if not os.path.exists(exe):
        return None
    return {"tocsin": ([exe, "tocsin"], thr + ["wake", "worker"]),
            "raw": ([exe, "raw"], thr),
            "goqite": ([exe, "goqite"], ["enq1", "enq100", "ca1"]),
            "river": ([exe, "river"], ["enq1", "enq100", "ca1"])}


def ruby_runtime(thr):
    rb = os.path.join(ROOT, "bench", "peers", "ruby", "runner.rb")
    lib = os.path.join(BUILD, "ruby", "lib")
    if not os.path.exists(os.path.join(lib, "tocsin", "tocsin_native.so")):
        return None
    base = ["ruby", "-I" + os.path.join(ROOT, "bindings", "ruby", "lib"), "-I" + lib, rb]
    return {"tocsin": (base + ["tocsin"], thr + ["worker"]), "raw": (base + ["raw"], thr)}


def args_for(w, m):
    if w in ("wake", "notify"):
        return ["--n", str(m["lat_n"])]
    if w == "claimlat":
        return ["--n", str(m["claim_n"]), "--backlog", str(m["backlog"])]
    if w == "sustained":
        return ["--seconds", str(m["seconds"])]
    if w == "worker":
        return ["--n", str(m["worker_n"])]
    if w == "idle":
        return ["--seconds", str(m["idle_s"])]
    return ["--n", str(m["n"])]


def run_one(argv, w, m, tmp):
    d = tempfile.mkdtemp(prefix="run-", dir=tmp)
    cmd = argv + [w, "--dir", d] + args_for(w, m)
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=m["seconds"] + 240, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return None, "timed out: " + " ".join(cmd)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    dt = time.monotonic() - t0
    if p.returncode != 0:
        return None, "exit %d: %s\n%s" % (p.returncode, " ".join(cmd), p.stderr.decode()[-2000:])
    try:
        out = json.loads(p.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, "no JSON from %s\n%s" % (" ".join(cmd), p.stdout.decode()[-500:])
    out["seconds"] = dt
    return out, None


def machine():
    info = {"platform": platform.platform(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "sqlite_stdlib": sqlite3.sqlite_version}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    for k, cmd in (("node", ["node", "--version"]), ("go", ["go", "version"]), ("ruby", ["ruby", "--version"]),
                   ("cc", ["cc", "--version"])):
        try:
            info[k] = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     timeout=20).stdout.decode().splitlines()[0].strip()
        except (OSError, IndexError, subprocess.TimeoutExpired):
            pass
    info["loadavg_start"] = os.getloadavg()
    return info


def stats(vals):
    v = sorted(vals)
    n = len(v)
    med = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    return {"median": med, "min": v[0], "max": v[-1], "runs": vals}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=sorted(MODES), default="full")
    ap.add_argument("--out", required=True)
    ap.add_argument("--readme")
    ap.add_argument("--only", help="comma-separated runtimes")
    ap.add_argument("--workloads", help="comma-separated workload keys")
    a = ap.parse_args()
    m = MODES[a.mode]
    os.makedirs(a.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="tocsin-bench-", dir=os.environ.get("TMPDIR"))
    rts = runtimes()
    if a.only:
        rts = {k: v for k, v in rts.items() if k in a.only.split(",")}
    wls = [w for w in WORKLOADS if not a.workloads or w in a.workloads.split(",")]
    started = time.time()
    info = machine()
    raw = {}      # (rt, w, impl) -> [metrics dict per rep]
    samples = {}  # (rt, w, impl) -> {name: pooled samples}
    errors = ["runtime %s: its runner is not built (make bench-deps)" % r for r in MISSING
              if not a.only or r in a.only.split(",")]
    max_reps = max(m["reps"], m["reps_long"])
    for rep in range(max_reps):
        for w in wls:
            if rep >= (m["reps_long"] if w in LONG else m["reps"]):
                continue
            for rt, impls in rts.items():
                order = [i for i, (_, ws) in impls.items() if w in ws]
                if rep % 2:
                    order.reverse()
                for impl in order:
                    out, err = run_one(impls[impl][0], w, m, tmp)
                    tag = "%s/%s/%s rep %d" % (rt, w, impl, rep + 1)
                    if err:
                        errors.append(tag + ": " + err)
                        print("FAIL " + tag + ": " + err.splitlines()[0], flush=True)
                        continue
                    raw.setdefault((rt, w, impl), []).append(out["metrics"])
                    for k, v in out.get("samples", {}).items():
                        samples.setdefault((rt, w, impl), {}).setdefault(k, []).extend(v)
                    print("%-40s %6.1fs  %s" % (tag, out["seconds"], "  ".join(
                        "%s=%.4g" % kv for kv in out["metrics"].items())), flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    figures = {}
    for rt, impls in rts.items():
        for impl, (_, ws) in impls.items():
            for w in ws:
                if w not in wls:
                    continue
                runs = raw.get((rt, w, impl), [])
                for mk, _, _, _ in WORKLOADS[w][1]:
                    vals = [r[mk] for r in runs if r.get(mk) is not None]
                    if not vals:
                        errors.append("%s/%s/%s: no figure %s" % (rt, w, impl, mk))
                        continue
                    figures.setdefault(rt, {}).setdefault(w, {}).setdefault(impl, {})[mk] = stats(vals)
    info["loadavg_end"] = os.getloadavg()
    result = {
        "mode": a.mode, "params": m, "started": datetime.datetime.utcfromtimestamp(started).isoformat() + "Z",
        "duration_s": time.time() - started, "machine": info,
        "settings": {"journal_mode": "WAL", "synchronous": "NORMAL", "payload_bytes": PAYLOAD_BYTES,
                     "concurrency": {"wake": "1 producer process -> 1 consumer process",
                                     "notify": "1 notifying process -> 1 listening process",
                                     "sustained": "4 worker processes + 2 producer processes",
                                     "worker": "2 worker processes x 4 concurrency",
                                     "idle": "1 worker process, scheduler on, measured after 1.5 s",
                                     "other": "1 process, 1 connection"}},
        "workloads": {k: {"title": t, "metrics": [x[0] for x in ms]} for k, (t, ms) in WORKLOADS.items()},
        "figures": figures,
        "samples": {"%s/%s/%s" % k: {n: thin(v) for n, v in s.items()} for k, s in samples.items()},
        "errors": errors,
    }
    with open(os.path.join(a.out, "latest.json"), "w") as f:
        json.dump(result, f, indent=1)
    import report
    table = report.table(result)
    report.charts(result, a.out)
    if a.readme:
        report.update_readme(a.readme, table)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(table)
    print(table)
    print("bench %s: %.0f s, %d figures, %d errors" % (a.mode, result["duration_s"],
          sum(len(x) for r in figures.values() for w in r.values() for x in w.values()), len(errors)))
    if errors:
        for e in errors:
            print("ERROR " + e, file=sys.stderr)
        sys.exit(1)


def thin(v, k=400):
    """Sorted samples thinned to at most k points (quantiles) for the CDFs."""
    v = sorted(v)
    if len(v) <= k:
        return v
    return [v[int(i * (len(v) - 1) / (k - 1))] for i in range(k)]


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
