#!/usr/bin/env python3
"""Tests of the tocsin command-line tool: every subcommand, --json output, exit
codes and bad input (nothing written), and the dashboard's HTTP surface (CSRF,
read-only, access token, Host check, SSE pushed on commits, /metrics).

usage: test_cli.py TOCSIN OUTDIR EXTENSION
  TOCSIN     the built tool (build/tocsin)
  OUTDIR     a scratch directory for databases (build/cli-test)
  EXTENSION  the SQLite extension (build/tocsin.so), used to set up state the
             CLI does not write itself (claims, stream events, schedules)
"""
import json
from http.cookiejar import CookieJar
import os
import pty
import queue
import re
import select
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import tempfile
import traceback
import urllib.error
import urllib.request

TOCSIN, OUT, EXT = (os.path.abspath(a) for a in sys.argv[1:4])
OUT = os.path.join(OUT, "cli")
shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)

passed = failed = 0
EXIT_OK, EXIT_ERR, EXIT_USAGE, EXIT_NOTFOUND, EXIT_BUSY = 0, 1, 2, 3, 4


def run(*args, input=None, env=None, timeout=20):
    e = dict(os.environ)
    e.update(env or {})
    # stdin is never the terminal the suite runs on: a command that asks would wait on it
    p = subprocess.run([TOCSIN, *[str(a) for a in args]], input=input, capture_output=True, text=True,
                       env=e, timeout=timeout, **({} if input is not None else {"stdin": subprocess.DEVNULL}))
    return p.returncode, p.stdout, p.stderr


def js(*args, **kw):
    rc, out, err = run(*args, "--json", **kw)
    assert rc == 0, f"{args}: exit {rc}: {err}"
    return json.loads(out)


def sql(db, q, *params):
    c = sqlite3.connect(db, isolation_level=None)
    c.enable_load_extension(True)
    c.load_extension(EXT)
    try:
        return c.execute(q, params).fetchall()
    finally:
        c.close()


def count(db, table):
    return sql(db, f"SELECT count(*) FROM {table}")[0][0]


def test(fn):
    global passed, failed
    try:
        fn()
        passed += 1
        print(f"ok   {fn.__name__}")
    except Exception:
        failed += 1
        print(f"FAIL {fn.__name__}")
        traceback.print_exc()
    return fn


def newdb(name):
    path = os.path.join(OUT, name + ".db")
    rc, _, err = run("init", path)
    assert rc == 0, err
    return path


def usage_error(rc, err, word):
    assert rc == EXIT_USAGE, f"exit {rc}, wanted 2: {err}"
    assert word in err, f"{word!r} not in {err!r}"
    assert err.count("\n") == 1, f"not one line: {err!r}"


def refused_all(db, cases):
    """Each (args, word) is a usage error naming word, printing nothing, writing no job."""
    for args, word in cases:
        rc, out, err = run(*args)
        usage_error(rc, err, word)
        assert out == ""
    assert count(db, "_tocsin_jobs") == 0


COMMANDS = ["init", "stats", "jobs", "job", "enqueue", "cancel", "dead", "pause", "resume", "notify",
            "listen", "tail", "schedules", "prune", "metrics", "ui"]


@test
def help_everywhere():
    rc, out, _ = run("--help")
    assert rc == 0 and "exit codes" in out
    for c in COMMANDS:
        rc, out, err = run(c, "--help")
        assert rc == 0, (c, err)
        assert out.startswith("usage: tocsin " + c), (c, out[:40])
        rc, out2, err = run("help", c)
        assert rc == 0 and out2 == out, (c, rc, err, out2[:40])
    rc, _, err = run("help", "frobnicate")
    usage_error(rc, err, "unknown command 'frobnicate'")
    rc, _, err = run()
    assert rc == EXIT_USAGE
    rc, _, err = run("frobnicate")
    usage_error(rc, err, "unknown command 'frobnicate'")


@test
def missing_database_is_not_found():
    missing = os.path.join(OUT, "nope.db")
    for args in (["stats", missing], ["enqueue", missing, "q", "{}"], ["jobs", missing], ["ui", missing]):
        rc, _, err = run(*args)
        assert rc == EXIT_NOTFOUND, (args, rc, err)
        assert "no such database" in err
    assert not os.path.exists(missing)


@test
def a_directory_is_not_a_database():
    d = os.path.join(OUT, "dir.db")
    os.makedirs(d, exist_ok=True)
    for args in (["init", d], ["stats", d], ["enqueue", d, "q", "{}"], ["ui", d]):
        rc, _, err = run(*args)
        usage_error(rc, err, "is a directory")
    assert os.listdir(d) == []


@test
def output_that_cannot_be_written_is_an_error():
    db = newdb("full")
    with open("/dev/full", "w") as full:
        for args in (["stats", db], ["jobs", db, "--json"], ["metrics", db], ["--help"]):
            p = subprocess.run([TOCSIN, *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=20)
            assert p.returncode == 1 and "cannot write the output" in p.stderr, (args, p.returncode, p.stderr)


@test
def init_follows_the_busy_timeout_setting():
    rc, _, err = run("init", os.path.join(OUT, "busy.db"), env={"TOCSIN_BUSY_TIMEOUT": "soon"})
    usage_error(rc, err, "TOCSIN_BUSY_TIMEOUT")
    assert not os.path.exists(os.path.join(OUT, "busy.db"))


@test
def init_json():
    path = os.path.join(OUT, "init.db")
    rc, out, _ = run("init", path, "--json")
    assert rc == 0 and json.loads(out)["schema_version"] == 2
    assert count(path, "_tocsin_jobs") == 0


@test
def enqueue_and_options():
    db = newdb("enqueue")
    assert js("enqueue", db, "emails", '{"to":"a@x"}')["id"] == 1
    rc, out, _ = run("enqueue", db, "emails", '{"to":"b@x"}', "--priority", "5", "--max-attempts", "7",
                     "--meta", '{"trace":"t1"}', "--expires", "1h")
    assert rc == 0 and out.strip() == "2"
    j = js("job", db, 2)
    assert j["priority"] == 5 and j["max_attempts"] == 7 and j["meta"] == {"trace": "t1"}
    assert j["expires_at"] - j["created_at"] == 3600000
    later = js("enqueue", db, "emails", "{}", "--delay", "1h30m")["id"]
    j = js("job", db, later)
    assert j["state"] == "scheduled" and j["run_at"] - j["created_at"] == 5400000
    a = js("enqueue", db, "emails", "{}", "--unique-key", "u1")["id"]
    b = js("enqueue", db, "emails", '{"other":1}', "--unique-key", "u1")["id"]
    assert a == b
    rc, out, _ = run("enqueue", db, "stdin", "-", input='{"from":"stdin"}\n')
    assert rc == 0
    assert js("job", db, int(out))["payload"] == {"from": "stdin"}


@test
def enqueue_bad_input_writes_nothing():
    db = newdb("badenqueue")
    cases = [
        (["enqueue", db, "q", "{not json"], "JSON"),
        (["enqueue", db, "", "{}"], "queue"),
        (["enqueue", db, "bad\x01name", "{}"], "queue"),
        (["enqueue", db, "q", "{}", "--priority", "high"], "--priority"),
        (["enqueue", db, "q", "{}", "--delay", "soon"], "--delay"),
        (["enqueue", db, "q", "{}", "--max-attempts", "0"], "--max-attempts"),
        (["enqueue", db, "q", "{}", "--meta", "[1]"], "meta"),
        (["enqueue", db, "q", "{}", "--bogus"], "unknown option --bogus"),
        (["enqueue", db, "q", "{}", "--delay", "1s", "--run-at", "5"], "--delay and --run-at exclude each other"),
        (["enqueue", db, "q"], "missing"),
        (["enqueue", db, "q", "{}", "extra"], "unexpected argument"),
        (["enqueue", db, "q", "{}", "--run-at", "0"], "--run-at"),  # 0 would read as "left out"
        (["enqueue", db + "/", "q", "{}"], "ends with '/'"),
        (["dead", "purge", db, "--older-than", "0"], "--older-than"),  # 0 would read as "every one"
    ]
    refused_all(db, cases)


@test
def help_is_an_option_not_a_value():
    """--help/-h after "--", or as an option's value, is data: the command runs."""
    db = newdb("helpvalue")
    rc, out, err = run("enqueue", db, "q", "{}", "--unique-key", "-h")
    assert rc == 0 and "usage" not in out, (rc, out, err)
    rc, out, err = run("enqueue", db, "--", "--help", "{}")
    assert rc == 0 and "usage" not in out, (rc, out, err)
    assert sql(db, "SELECT queue, unique_key FROM _tocsin_jobs ORDER BY id") == [("q", "-h"), ("--help", None)]
    rc, out, _ = run("enqueue", db, "--json", "--help")
    assert rc == 0 and out.startswith("usage: tocsin enqueue")
    rc, _, err = run("init", db + "x/")
    assert rc == 2 and "ends with '/'" in err


@test
def stats_table_and_json():
    db = newdb("stats")
    c = sqlite3.connect(db, isolation_level=None)  # two jobs enqueued an hour ago
    c.enable_load_extension(True)
    c.load_extension(EXT)
    c.execute("SELECT tocsin_clock(?)", (int(time.time() * 1000) - 3600000,))
    c.execute("""SELECT tocsin_enqueue('emails', '{"old":1}'), tocsin_enqueue('emails', '{"old":2}')""")
    c.close()
    for i in range(3):
        run("enqueue", db, "emails", json.dumps({"i": i}))
    run("enqueue", db, "reports", "{}", "--delay", "1h")
    rc, out, _ = run("stats", db)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["QUEUE", "PENDING", "SCHEDULED", "IN-FLIGHT", "DEAD"]
    assert re.match(r"emails\s+5\s+0\s+0\s+0\s+1h00m", lines[1]), lines[1]
    assert re.match(r"reports\s+0\s+1\s+0\s+0", lines[2]), lines[2]
    s = js("stats", db)
    q = {x["queue"]: x for x in s["queues"]}
    assert q["emails"]["pending"] == 5 and q["emails"]["enqueued_1m"] == 3
    assert q["reports"]["scheduled"] == 1 and s["enqueued_total"] == 6
    one = js("stats", db, "emails")
    assert [x["queue"] for x in one["queues"]] == ["emails"]
    rc, _, err = run("stats", db, "bad\nname")
    usage_error(rc, err, "queue")


@test
def stats_sample_rates():
    db = newdb("rates")
    p = subprocess.Popen([TOCSIN, "stats", db, "--sample", "1500ms", "--json"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.4)
    c = sqlite3.connect(db, isolation_level=None)
    c.enable_load_extension(True)
    c.load_extension(EXT)
    c.execute("SELECT tocsin_enqueue_many(?)", (json.dumps([{"queue": "q", "payload": i} for i in range(4)]),))
    for j in json.loads(c.execute("SELECT tocsin_claim('q', 'w', 3, 60000)").fetchone()[0]):
        assert c.execute("SELECT tocsin_ack(?, ?)", (j["id"], j["token"])).fetchone()[0] == 1
    c.close()
    out, _ = p.communicate(timeout=20)
    assert p.returncode == 0
    r = json.loads(out)["rates"]
    secs = r["window_ms"] / 1000
    assert 1.4 <= secs < 3, r
    assert round(r["enqueued_per_s"] * secs) == 4 and round(r["completed_per_s"] * secs) == 3, r
    assert r["died_per_s"] == 0
    rc, _, err = run("stats", db, "--sample", "1ms")
    usage_error(rc, err, "--sample")


@test
def jobs_filters():
    db = newdb("jobs")
    ids = [js("enqueue", db, "a", json.dumps({"n": i, "tag": "needle" if i == 2 else "hay"}))["id"] for i in range(4)]
    js("enqueue", db, "b", "{}", "--delay", "1h")
    sql(db, "SELECT tocsin_claim('a', 'w1', 1, 60000)")
    all_ = js("jobs", db)
    assert [j["id"] for j in all_] == [5, 4, 3, 2, 1]
    assert {j["id"] for j in js("jobs", db, "--queue", "a")} == set(ids)
    assert [j["id"] for j in js("jobs", db, "--state", "scheduled")] == [5]
    assert [j["id"] for j in js("jobs", db, "--state", "processing")] == [1]
    assert [j["payload"]["n"] for j in js("jobs", db, "--search", "needle")] == [2]
    assert [j["id"] for j in js("jobs", db, "--search", "4")] == [4]
    assert js("jobs", db, "--older-than", "1h") == []
    assert len(js("jobs", db, "--newer-than", "1h")) == 5
    assert len(js("jobs", db, "--limit", "2")) == 2
    rc, out, _ = run("jobs", db, "--queue", "a")
    assert rc == 0 and out.splitlines()[0].split() == ["ID", "QUEUE", "STATE", "ATTEMPTS", "AGE", "PAYLOAD"]
    assert len(out.splitlines()) == 5
    for args, word in ((["--state", "done"], "--state"), (["--limit", "0"], "--limit"),
                       (["--older-than", "x"], "--older-than"), (["--queue", ""], "queue")):
        rc, _, err = run("jobs", db, *args)
        usage_error(rc, err, word)


@test
def job_show():
    db = newdb("job")
    jid = js("enqueue", db, "q", '{"hello":"world"}', "--unique-key", "k")["id"]
    rc, out, _ = run("job", db, jid)
    assert rc == 0 and "state         pending" in out and '{"hello":"world"}' in out and "unique key    k" in out
    assert js("job", db, jid)["payload"] == {"hello": "world"}
    rc, _, err = run("job", db, 999)
    assert rc == EXIT_NOTFOUND and "no job 999" in err
    for bad in ("abc", "-1", "0", "1x"):
        rc, _, err = run("job", db, bad)
        usage_error(rc, err, "job id")


@test
def cancel_job():
    db = newdb("cancel")
    jid = js("enqueue", db, "q", "{}")["id"]
    assert js("cancel", db, jid) == {"cancelled": jid}
    j = js("job", db, jid)
    assert j["state"] == "dead" and j["reason"] == "cancelled"
    rc, _, err = run("cancel", db, jid)
    assert rc == EXIT_NOTFOUND and "no live job" in err
    rc, _, err = run("cancel", db, "x")
    usage_error(rc, err, "job id")


def make_dead(db, queue, n, error="boom"):
    """n dead jobs (failed by their lease holder), through the extension."""
    c = sqlite3.connect(db, isolation_level=None)
    c.enable_load_extension(True)
    c.load_extension(EXT)
    ids = []
    try:
        jobs = json.dumps([{"queue": queue, "payload": {"i": i}, "max_attempts": 1} for i in range(n)])
        c.execute("SELECT tocsin_enqueue_many(?)", (jobs,))
        claimed = json.loads(c.execute("SELECT tocsin_claim(?, 'w', ?, 60000)", (queue, n)).fetchone()[0])
        c.execute("BEGIN IMMEDIATE")
        for j in claimed:
            assert c.execute("SELECT tocsin_fail(?, ?, ?)", (j["id"], j["token"], error)).fetchone()[0] == 1
            ids.append(j["id"])
        c.execute("COMMIT")
    finally:
        c.close()
    assert len(ids) == n
    return ids


@test
def dead_list_requeue_purge():
    db = newdb("dead")
    ids = make_dead(db, "a", 3, error="bad <b>address</b>")
    other = make_dead(db, "b", 2)
    dead = js("dead", "list", db)
    assert [j["id"] for j in dead] == ids + other
    assert dead[0]["reason"] == "failed" and dead[0]["last_error"] == "bad <b>address</b>"
    assert [j["id"] for j in js("dead", "list", db, "--queue", "b")] == other
    assert [j["id"] for j in js("dead", "list", db, "--after", ids[1], "--limit", "2")] == [ids[2], other[0]]
    rc, out, _ = run("dead", "list", db)
    assert rc == 0 and "failed" in out and len(out.splitlines()) == 6
    assert js("dead", "requeue", db, ids[0]) == {"requeued": [ids[0]]}
    assert js("job", db, ids[0])["state"] == "pending"
    rc, _, err = run("dead", "requeue", db, ids[0])
    assert rc == EXIT_NOTFOUND and f"no dead job {ids[0]}" in err
    assert js("dead", "requeue", db, "--all", "--queue", "a", "--yes") == {"requeued": ids[1:]}
    for args, word in ((["requeue", db], "ids or --all"), (["requeue", db, "x"], "job id"),
                       (["purge", db, "--older-than", "nope"], "--older-than"), (["explode", db], "unknown action"),
                       (["list", db, "--limit", "-3"], "--limit")):
        rc, _, err = run("dead", *args)
        usage_error(rc, err, word)
    # a requeue that would clash with a live job's unique key is refused (exit 2: invalid, nothing written)
    clash = js("enqueue", db, "c", "{}", "--unique-key", "k1")["id"]
    js("cancel", db, clash)
    js("enqueue", db, "c", "{}", "--unique-key", "k1")
    rc, _, err = run("dead", "requeue", db, clash)
    assert rc == EXIT_USAGE and "unique_key" in err and err.count("\n") == 1, (rc, err)
    assert js("job", db, clash)["state"] == "dead"
    run("dead", "purge", db, "--queue", "c", "--yes")
    assert js("dead", "purge", db, "--older-than", "1d", "--yes") == {"purged": 0}
    assert js("dead", "purge", db, "--queue", "b", "--yes") == {"purged": 2}
    assert count(db, "_tocsin_dead") == 0


@test
def purge_in_batches():
    db = newdb("bigpurge")
    make_dead(db, "q", 2500)
    assert js("dead", "purge", db, "--yes") == {"purged": 2500}
    assert count(db, "_tocsin_dead") == 0


@test
def progress_bar_on_a_terminal():
    db = newdb("progress")
    make_dead(db, "q", 30)
    master, slave = pty.openpty()
    p = subprocess.Popen([TOCSIN, "dead", "purge", db, "--yes"], stdout=slave, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
    os.close(slave)
    data = b""
    while True:
        r, _, _ = select.select([master], [], [], 10)
        if not r:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    p.wait(10)
    os.close(master)
    text = data.decode()
    assert p.returncode == 0
    assert "purging dead" in text and "30/30" in text and "#" * 30 in text, text
    # not on a pipe
    make_dead(db, "q", 3)
    rc, out, _ = run("dead", "purge", db, "--yes")
    assert rc == 0 and out == "purged 3 dead jobs\n"


def on_a_terminal(args, answer, then=None):
    """Runs tocsin with stdin and stderr on a pseudo-terminal (stdout a pipe): waits for the
    question ('[y/N] '), calls then() if given, types answer (None: no question is awaited).
    Returns (exit code, stdout, what the terminal showed)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([TOCSIN, *[str(a) for a in args]], stdin=slave, stderr=slave, stdout=subprocess.PIPE)
    os.close(slave)
    shown = b""

    def read_until(done):
        nonlocal shown
        end = time.time() + 15
        while not done() and time.time() < end:
            r, _, _ = select.select([master], [], [], 0.2)
            if r:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    return
                if not chunk:
                    return
                shown += chunk
            elif p.poll() is not None:
                return
    if answer is not None:
        read_until(lambda: b"[y/N] " in shown)
        assert b"[y/N] " in shown, shown
        if then:
            then()
        os.write(master, answer.encode())
    out = p.stdout.read().decode()
    p.wait(15)
    read_until(lambda: False)
    os.close(master)
    return p.returncode, out, shown.decode()


@test
def bulk_commands_refuse_without_yes_off_a_terminal():
    db = newdb("yes")
    ids = make_dead(db, "emails", 3)
    make_dead(db, "other", 2)
    for args, word in ((["dead", "purge", db], "dead purge deletes dead jobs in bulk"),
                       (["dead", "purge", db, "--queue", "emails"], "dead purge"),
                       (["dead", "purge", db, "--older-than", "1ms"], "dead purge"),
                       (["dead", "requeue", db, "--all"], "dead requeue --all"),
                       (["dead", "requeue", db, "--all", "--queue", "emails", "--json"], "dead requeue --all"),
                       (["prune", db, "--dead-older-than", "1ms"], "prune with --dead-older-than"),
                       (["prune", db, "--streams-older-than", "1ms"], "prune with --streams-older-than")):
        rc, out, err = run(*args)
        usage_error(rc, err, word)
        assert "add --yes" in err and "not a terminal" in err and out == "", (args, err)
    # piped input is no answer either: the question is never asked of a pipe
    rc, out, err = run("dead", "purge", db, input="y\n")
    usage_error(rc, err, "--yes")
    assert count(db, "_tocsin_dead") == 5 and count(db, "_tocsin_jobs") == 0
    # --yes is an option of the bulk actions only
    rc, _, err = run("dead", "list", db, "--yes")
    usage_error(rc, err, "--yes does not apply to dead list")
    rc, out, _ = run("dead", "purge", db, "--yes", "--help")
    assert rc == 0 and "--yes" in out and out.startswith("usage: tocsin dead")
    for cmd in (["dead"], ["prune"]):
        rc, out, _ = run(*cmd, "--help") if cmd != ["dead"] else run("help", "dead")
        assert rc == 0 and "--yes" in out, out
    rc, out, _ = run("--help")
    assert "--yes" in out
    # what names its jobs one by one, and prune's routine steps, need no --yes
    assert js("dead", "requeue", db, ids[0]) == {"requeued": [ids[0]]}
    assert js("prune", db)["dead"] == 0
    # with --yes it goes ahead
    assert js("dead", "requeue", db, "--all", "--queue", "emails", "--yes") == {"requeued": ids[1:]}
    assert js("dead", "purge", db, "--queue", "other", "--yes") == {"purged": 2}
    assert count(db, "_tocsin_dead") == 0 and count(db, "_tocsin_jobs") == 3


@test
def bulk_commands_ask_on_a_terminal():
    db = newdb("ask")
    make_dead(db, "emails", 1234)
    make_dead(db, "other", 2)
    # no: nothing purged, exit 1
    rc, out, shown = on_a_terminal(["dead", "purge", db, "--queue", "emails"], "n\n")
    assert 'Delete 1,234 dead jobs from queue "emails"? [y/N] ' in shown, shown
    assert rc == EXIT_ERR and "not confirmed: nothing was changed" in shown and out == "", (rc, out, shown)
    assert count(db, "_tocsin_dead") == 1236
    # an empty answer and end of input (^D) are no
    for answer in ("\n", "\x04", "yep\n"):
        rc, out, shown = on_a_terminal(["dead", "purge", db], answer)
        assert "Delete 1,236 dead jobs from every queue? [y/N] " in shown, shown
        assert rc == EXIT_ERR and out == "", (answer, rc, out, shown)
    assert count(db, "_tocsin_dead") == 1236
    # yes: purged; a job that dies while the question waits is not (it was not counted)
    late = []
    rc, out, shown = on_a_terminal(["dead", "purge", db, "--queue", "emails"], "y\n",
                                   then=lambda: (time.sleep(0.01), late.extend(make_dead(db, "emails", 1))))
    assert rc == 0 and out == "purged 1234 dead jobs\n", (rc, out, shown)
    assert [j["id"] for j in js("dead", "list", db, "--queue", "emails")] == late
    # --older-than is named in the question
    rc, out, shown = on_a_terminal(["dead", "purge", db, "--older-than", "1ms"], "no\n")
    assert "Delete 3 dead jobs that died more than 1ms ago from every queue? [y/N] " in shown, shown
    assert rc == EXIT_ERR and count(db, "_tocsin_dead") == 3
    # requeue --all
    rc, out, shown = on_a_terminal(["dead", "requeue", db, "--all", "--queue", "other"], "N\n")
    assert 'Requeue 2 dead jobs of queue "other"? [y/N] ' in shown and rc == EXIT_ERR, shown
    assert count(db, "_tocsin_dead") == 3
    # yes: the jobs counted are requeued; one that dies while the question waits is not
    counted = [j["id"] for j in js("dead", "list", db, "--queue", "other")]
    late = []
    rc, out, shown = on_a_terminal(["dead", "requeue", db, "--all", "--queue", "other", "--json"], "yes\n",
                                   then=lambda: (time.sleep(0.01), late.extend(make_dead(db, "other", 1))))
    assert rc == 0 and json.loads(out)["requeued"] == counted, (out, shown)
    assert [j["id"] for j in js("dead", "list", db, "--queue", "other")] == late
    assert js("dead", "requeue", db, "--all", "--queue", "other", "--yes") == {"requeued": late}
    # prune: the dead letters counted, the stream events not (that count walks them all)
    rc, out, shown = on_a_terminal(["prune", db, "--dead-older-than", "1ms", "--streams-older-than", "1h"], "n\n")
    assert ("Delete 1 dead job that died more than 1ms ago (every queue) and the stream events older than 1h"
            " (every topic)? [y/N] ") in shown, shown
    assert rc == EXIT_ERR and out == "" and count(db, "_tocsin_dead") == 1
    rc, out, shown = on_a_terminal(["prune", db, "--dead-older-than", "1ms", "--json"], "y\n")
    assert rc == 0 and json.loads(out)["dead"] == 1, (out, shown)
    # nothing to delete: no question; --yes: no question
    rc, out, shown = on_a_terminal(["dead", "purge", db], None)
    assert rc == 0 and out == "purged 0 dead jobs\n" and "[y/N]" not in shown, shown
    make_dead(db, "q", 2)
    rc, out, shown = on_a_terminal(["dead", "purge", db, "--yes"], None)
    assert rc == 0 and out == "purged 2 dead jobs\n" and "[y/N]" not in shown, shown
    # a name's control characters do not reach the terminal through the question
    make_dead(db, "q\u009b2J", 1)
    rc, out, shown = on_a_terminal(["dead", "purge", db, "--queue", "q\u009b2J"], "n\n")
    assert 'from queue "q?2J"?' in shown and "\u009b" not in shown, shown


@test
def pause_resume():
    db = newdb("pause")
    js("enqueue", db, "q", "{}")
    assert js("pause", db, "q") == {"queue": "q", "paused": True}
    assert js("stats", db, "q")["queues"][0]["paused"] is True
    assert json.loads(sql(db, "SELECT tocsin_claim('q', 'w', 1, 1000)")[0][0]) == []
    rc, out, _ = run("resume", db, "q")
    assert rc == 0 and out == "resumed q\n"
    assert js("stats", db, "q")["queues"][0]["paused"] is False
    rc, _, err = run("pause", db)
    usage_error(rc, err, "missing")


@test
def notify_and_bad_payload():
    db = newdb("notify")
    assert js("notify", db, "ch", '{"a":1}', "--meta", '{"m":1}')["id"] == 1
    rc, _, err = run("notify", db, "ch", "nope")
    usage_error(rc, err, "JSON")
    rc, _, err = run("notify", db, "", "{}")
    usage_error(rc, err, "channel")
    assert count(db, "_tocsin_notifications") == 1


def spawn(*args):
    return subprocess.Popen([TOCSIN, *[str(a) for a in args]], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


_readers = {}


def wait_line(stream, timeout=10):
    """The next line of a child's pipe (a thread reads it: buffered pipes defeat select)."""
    entry = _readers.get(id(stream))
    if entry is None:  # the stream is kept in the entry, so its id is never reused
        entry = _readers[id(stream)] = (stream, queue.Queue())
    q = entry[1]
    if entry[0] is stream and not getattr(q, "started", False):
        q.started = True

        def pump():
            for line in iter(stream.readline, ""):
                q.put(line)
            q.put("")
        threading.Thread(target=pump, daemon=True).start()
    try:
        return q.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError("timed out waiting for output")


@test
def listen_follows_live():
    db = newdb("listen")
    p = spawn("listen", db, "ch", "--count", "2", "--timeout", "20s")
    assert "listening on ch" in wait_line(p.stderr)
    run("notify", db, "ch", '{"n":1}')
    run("notify", db, "other", '{"n":99}')
    run("notify", db, "ch", '{"n":2}')
    out, _ = p.communicate(timeout=20)
    assert p.returncode == 0
    lines = [json.loads(x) for x in out.splitlines()]
    assert [x["payload"]["n"] for x in lines] == [1, 2] and lines[0]["channel"] == "ch"
    # no history: a notification sent before listening is not shown; --timeout ends with 0
    rc, out, _ = run("listen", db, "ch", "--timeout", "200ms")
    assert rc == 0 and out == ""
    # SIGTERM ends it cleanly
    p = spawn("listen", db, "ch")
    wait_line(p.stderr)
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=10)
    assert p.returncode == 0
    rc, _, err = run("listen", db, "ch", "--count", "zero")
    usage_error(rc, err, "--count")


@test
def tail_replays_then_follows():
    db = newdb("tail")
    for i in range(3):
        sql(db, "SELECT tocsin_stream_publish('orders', ?, 'k')", json.dumps({"i": i}))
    rc, out, _ = run("tail", db, "orders", "--no-follow")
    ev = [json.loads(x) for x in out.splitlines()]
    assert rc == 0 and [e["payload"]["i"] for e in ev] == [0, 1, 2] and ev[0]["topic"] == "orders"
    rc, out, _ = run("tail", db, "orders", "--no-follow", "--from", "2")
    assert [json.loads(x)["id"] for x in out.splitlines()] == [3]
    p = spawn("tail", db, "orders", "--count", "4", "--timeout", "20s")
    first = [json.loads(wait_line(p.stdout)) for _ in range(3)]
    assert [e["id"] for e in first] == [1, 2, 3]
    sql(db, "SELECT tocsin_stream_publish('orders', '{\"i\":3}')")
    assert json.loads(wait_line(p.stdout))["payload"] == {"i": 3}
    assert p.wait(20) == 0
    # a consumer's offset is saved as it goes: the second run has nothing new
    rc, out, _ = run("tail", db, "orders", "--consumer", "c1", "--no-follow")
    assert rc == 0 and len(out.splitlines()) == 4
    assert sql(db, "SELECT tocsin_stream_offset('c1', 'orders')")[0][0] == 4
    rc, out, _ = run("tail", db, "orders", "--consumer", "c1", "--no-follow")
    assert rc == 0 and out == ""
    rc, _, err = run("tail", db, "orders", "--consumer", "c1", "--from", "1")
    usage_error(rc, err, "exclude")
    rc, _, err = run("tail", db, "orders", "--from", "-1")
    usage_error(rc, err, "--from")


@test
def schedules_list():
    db = newdb("sched")
    rc, out, _ = run("schedules", db)
    assert rc == 0 and out.split() == ["NAME", "CRON", "QUEUE", "NEXT-FIRE", "LAST-FIRE", "FIRED", "PAUSED"]
    sql(db, "SELECT tocsin_schedule_set('nightly', '0 3 * * *', 'reports', '{\"kind\":\"daily\"}')")
    s = js("schedules", db)
    assert s[0]["name"] == "nightly" and s[0]["cron"] == "0 3 * * *" and s[0]["next_fire"] > time.time() * 1000
    rc, out, _ = run("schedules", db)
    assert "nightly" in out and "0 3 * * *" in out and re.search(r"T03:00:00Z", out)


@test
def json_has_null_where_there_is_none():
    # `job --json` (and `dead list --json`, the dashboard's dead letters) printed
    # lease_until, expires_at and died_at as 0 when there were none, and `schedules
    # --json` last_fire and last_job_id as 0 before the first fire; `jobs --json` and
    # the SQL documents (docs/sql.md) have null there
    db = newdb("nulls")
    live = js("enqueue", db, "q", '{"a":1}')["id"]
    dead = make_dead(db, "d", 1)[0]
    nullable = ("lease_until", "expires_at", "died_at", "reason")
    listing = {j["id"]: j for j in js("jobs", db)}
    for jid in (live, dead):
        one = js("job", db, jid)
        doc = json.loads(sql(db, "SELECT tocsin_job(?)", jid)[0][0])
        for k in nullable:
            assert one[k] == listing[jid][k] == doc.get(k), (jid, k, one[k], listing[jid][k], doc.get(k))
    assert js("job", db, live)["lease_until"] is None and js("job", db, live)["died_at"] is None
    assert js("job", db, dead)["lease_until"] is None and js("job", db, dead)["died_at"] > 0
    assert [j["lease_until"] for j in js("dead", "list", db)] == [None]
    sql(db, "SELECT tocsin_schedule_set('nightly', '0 3 * * *', 'reports', '{}')")
    cli = js("schedules", db)[0]
    doc = json.loads(sql(db, "SELECT tocsin_schedule_list()")[0][0])[0]
    for k in ("next_fire", "last_fire", "last_job_id"):
        assert cli[k] == doc[k], (k, cli[k], doc[k])
    assert cli["last_fire"] is None and cli["last_job_id"] is None and cli["next_fire"] > 0


@test
def prune_housekeeping():
    db = newdb("prune")
    for i in range(5):
        run("notify", db, "ch", json.dumps({"i": i}))
    make_dead(db, "q", 2)
    sql(db, "SELECT tocsin_stream_publish('t', '{}')")
    r = js("prune", db, "--notifications-keep", "2")
    assert r["notifications"] == 3 and r["dead"] == 0 and r["events"] == 0
    r = js("prune", db, "--dead-older-than", "1ms", "--streams-older-than", "1ms", "--yes")
    assert r["dead"] == 2 and r["events"] == 1
    rc, out, _ = run("prune", db)
    assert rc == 0 and out.startswith("deleted: ")
    rc, _, err = run("prune", db, "--dead-older-than", "yesterday")
    usage_error(rc, err, "--dead-older-than")


@test
def double_dash_ends_the_options():
    db = newdb("dashdash")
    # a queue whose name starts with "--" comes after a lone "--"
    rc, out, err = run("enqueue", db, "--priority", "3", "--", "--weird", '{"a":1}')
    assert rc == 0 and out.strip() == "1", (rc, out, err)
    job = js("job", db, "1")
    assert job["queue"] == "--weird" and job["priority"] == 3, job
    # after it, an option's spelling is an argument (one too many here)
    rc, out, err = run("jobs", db, "--", "--queue")
    assert rc == 2 and "unexpected argument '--queue'" in err, (rc, err)
    # ui too ("unknown option --"): a database named "-x.db" is served as tocsin ui -- -x.db
    init = subprocess.run([TOCSIN, "init", "--", "-x.db"], cwd=OUT, capture_output=True, text=True, timeout=20)
    assert init.returncode == 0, init.stderr
    p = subprocess.Popen([TOCSIN, "ui", "--port", "0", "--", "-x.db"], cwd=OUT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        line = wait_line(p.stdout)
        assert "listening on http://" in line, (line, p.stderr.read() if p.poll() is not None else "")
    finally:
        p.send_signal(signal.SIGTERM)  # our own child, by its pid
        p.communicate(timeout=15)
    rc, out, err = run("ui", db, "--", "--port")
    assert rc == 2 and "unexpected argument '--port'" in err, (rc, err)


@test
def metrics_text():
    db = newdb("metrics")
    js("enqueue", db, "emails", "{}")
    js("enqueue", db, 'we"ird\\q', "{}")
    make_dead(db, "emails", 1)
    sql(db, "SELECT tocsin_stream_publish('t', '{}')")
    sql(db, "SELECT tocsin_stream_save_offset('c', 't', 0)")
    sql(db, "SELECT tocsin_schedule_set('s', '@hourly', 'emails', '{}')")
    rc, out, _ = run("metrics", db)
    assert rc == 0
    assert 'tocsin_jobs{queue="emails",state="pending"} 1' in out
    assert 'tocsin_jobs{queue="emails",state="dead"} 1' in out
    assert 'tocsin_jobs{queue="we\\"ird\\\\q",state="pending"} 1' in out, out
    assert 'tocsin_stream_consumer_lag{topic="t",consumer="c"} 1' in out
    assert re.search(r'tocsin_schedule_next_fire_timestamp_seconds\{schedule="s"\} \d+\.\d+', out)
    assert "# TYPE tocsin_jobs gauge" in out
    for line in out.splitlines():
        assert line.startswith("#") or re.match(r'^[a-z_]+(\{.*\})? -?[0-9.]+$', line), line
    # it has no JSON form: --json is refused, not ignored
    rc, out, err = run("metrics", db, "--json")
    assert rc == 2 and out == "" and "Prometheus text format only" in err, (rc, out, err)


@test
def busy_database_exit_code():
    db = newdb("busy")
    c = sqlite3.connect(db, isolation_level=None)
    c.execute("BEGIN IMMEDIATE")
    try:
        rc, _, err = run("enqueue", db, "q", "{}", env={"TOCSIN_BUSY_TIMEOUT": "200ms"})
        assert rc == EXIT_BUSY, (rc, err)
        assert "locked" in err and "enqueue: enqueue:" not in err, err  # one prefix per step
    finally:
        c.execute("ROLLBACK")
        c.close()
    assert js("enqueue", db, "q", "{}")["id"] == 1


@test
def dead_options_belong_to_their_action():
    # an option of another action is refused, never ignored: `dead purge --limit 1` purged everything
    db = newdb("deadopts")
    make_dead(db, "q", 3)
    for args, word in ((["purge", db, "--limit", "1"], "--limit does not apply to dead purge"),
                       (["purge", db, "--after", "1"], "--after"),
                       (["requeue", db, "--all", "--older-than", "1d"], "--older-than does not apply to dead requeue"),
                       (["requeue", db, "1", "--limit", "1"], "--limit"),
                       # ids name their jobs: --queue was ignored, requeueing a job of another queue
                       (["requeue", db, "1", "--queue", "other"], "--queue goes with --all"),
                       (["list", db, "--all"], "--all does not apply to dead list"),
                       (["list", db, "--older-than", "1d"], "--older-than"),
                       ([db], "unknown action"), ([db, "list"], "unknown action")):
        rc, out, err = run("dead", *args)
        usage_error(rc, err, word)
        assert out == ""
    assert count(db, "_tocsin_dead") == 3 and count(db, "_tocsin_jobs") == 0


def publish(db, topic, n):
    for i in range(n):
        sql(db, "SELECT tocsin_stream_publish(?, ?)", topic, json.dumps({"i": i}))


@test
def tail_consumer_count_saves_only_what_it_printed():
    # --count stops mid-batch: the saved offset is the last event printed, not the batch's end
    db = newdb("tailcount")
    publish(db, "t", 5)
    rc, out, _ = run("tail", db, "t", "--consumer", "c", "--count", "2")
    assert rc == 0 and [json.loads(x)["id"] for x in out.splitlines()] == [1, 2]
    assert sql(db, "SELECT tocsin_stream_offset('c', 't')")[0][0] == 2
    rc, out, _ = run("tail", db, "t", "--consumer", "c", "--count", "1", "--no-follow")
    assert rc == 0 and [json.loads(x)["id"] for x in out.splitlines()] == [3]
    rc, out, _ = run("tail", db, "t", "--consumer", "c", "--no-follow")
    assert rc == 0 and [json.loads(x)["id"] for x in out.splitlines()] == [4, 5]


@test
def follow_ends_when_the_reader_goes():
    # `tocsin tail DB T | head -1` and `tocsin listen ... | head -1` used to run forever
    db = newdb("pipeclose")
    publish(db, "t", 1)
    for args in (["tail", db, "t"], ["tail", db, "t", "--consumer", "c"], ["listen", db, "ch"]):
        p = spawn(*args)
        if args[0] == "listen":
            assert "listening" in wait_line(p.stderr)
            run("notify", db, "ch", "1")
        # read here, not with wait_line: its thread would hold the pipe and block close()
        r, _, _ = select.select([p.stdout], [], [], 10)
        assert r, f"{args}: no output"
        json.loads(p.stdout.readline())
        p.stdout.close()  # the reader goes away
        try:
            assert p.wait(10) == 0, args
        except subprocess.TimeoutExpired:
            p.kill()  # our own child, by its pid
            p.wait()
            raise AssertionError(f"{args} kept running after its reader closed the pipe")
        p.stderr.close()
    assert sql(db, "SELECT tocsin_stream_offset('c', 't')")[0][0] == 1


@test
def a_closed_output_ends_tail_with_exit_0():
    # `tocsin tail DB T | head -1` exited 1 ("cannot write the output: Bad file
    # descriptor"): the write that met the closed pipe ended the command quietly, and
    # then the final flush at exit saw stdout's error flag. The reader here is gone
    # before the first line, so the very first write fails.
    db = newdb("pipegone")
    publish(db, "t", 50)
    for args in (["tail", db, "t"], ["tail", db, "t", "--no-follow"],
                 ["tail", db, "t", "--consumer", "c"], ["tail", db, "t", "--consumer", "c", "--no-follow"]):
        rd, wr = os.pipe()
        os.close(rd)
        try:
            p = subprocess.run([TOCSIN, *args], stdout=wr, stderr=subprocess.PIPE, text=True, timeout=20)
        finally:
            os.close(wr)
        assert p.returncode == 0 and p.stderr == "", (args, p.returncode, p.stderr)
    # the consumer printed nothing: nothing saved past it
    assert sql(db, "SELECT tocsin_stream_offset('c', 't')")[0][0] == 0


@test
def init_json_escapes_the_path():
    path = os.path.join(OUT, 'we"ird\\name.db')
    rc, out, _ = run("init", path, "--json")
    assert rc == 0 and json.loads(out) == {"path": path, "schema_version": 2}, out


@test
def no_terminal_controls_from_the_data():
    # C0 controls are refused by the core; C1 controls (U+009B is CSI for xterm) are valid UTF-8
    db = newdb("c1")
    csi = "\u009b"
    qname = "q" + csi + "31m"
    jid = js("enqueue", db, qname, json.dumps({"a": csi + "2J"}, ensure_ascii=False), "--unique-key", "k" + csi)["id"]
    make_dead(db, "d" + csi, 1, error="line1\nbad" + csi + "2J")
    dead = js("dead", "list", db)[0]["id"]
    for args in (["job", db, jid], ["job", db, dead], ["jobs", db], ["stats", db], ["dead", "list", db],
                 ["metrics", db]):
        rc, out, _ = run(*args)
        assert rc == 0, args
        if args[0] != "metrics":  # Prometheus text: label values are UTF-8 as they are
            assert csi not in out and "\x1b" not in out, (args, out)
        else:
            assert 'queue="q' + csi + '31m"' in out, out
    # ...but not on a terminal (the metrics text went there with its CSI)
    master, slave = pty.openpty()
    p = subprocess.Popen([TOCSIN, "metrics", db], stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    data = b""
    while select.select([master], [], [], 10)[0]:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    assert p.wait(10) == 0
    os.close(master)
    text = data.decode()
    assert 'queue="q?31m"' in text and csi not in text and "# TYPE tocsin_jobs gauge" in text, text
    rc, out, _ = run("job", db, dead)
    assert "last error    line1\nbad?2J" in out, out
    for args in (["job", db, jid], ["jobs", db], ["stats", db], ["dead", "list", db]):
        rc, out, _ = run(*args, "--json")
        assert rc == 0 and csi not in out and "\\u009b" in out, (args, out)
    assert js("job", db, jid)["queue"] == qname and js("job", db, dead)["last_error"] == "line1\nbad" + csi + "2J"
    sql(db, "SELECT tocsin_stream_publish('t', ?)", json.dumps({"x": csi}, ensure_ascii=False))
    rc, out, _ = run("tail", db, "t", "--no-follow")
    assert rc == 0 and csi not in out and json.loads(out)["payload"] == {"x": csi}


@test
def stdin_payload_with_a_nul_is_refused():
    db = newdb("nul")
    for cmd in (["enqueue", db, "q", "-"], ["notify", db, "ch", "-"]):
        rc, out, err = run(*cmd, input='{}\x00{"rest":"unseen"}')
        usage_error(rc, err, "NUL")
        assert out == ""
    assert count(db, "_tocsin_jobs") == 0 and count(db, "_tocsin_notifications") == 0


@test
def bad_busy_timeout_is_refused():
    db = newdb("badbusy")
    for args in (["enqueue", db, "q", "{}"], ["stats", db], ["ui", db, "--port", "0"]):
        rc, out, err = run(*args, env={"TOCSIN_BUSY_TIMEOUT": "5 seconds"})
        usage_error(rc, err, "TOCSIN_BUSY_TIMEOUT")
        assert out == ""
    assert count(db, "_tocsin_jobs") == 0


@test
def read_only_open_of_an_old_schema_says_what_to_do():
    old = os.path.join(OUT, "v1.db")
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop-tests", "golden",
                             "v1-empty.db"), old)
    before = open(old, "rb").read()
    for args in (["stats", old], ["jobs", old], ["ui", old, "--read-only", "--port", "0"]):
        rc, out, err = run(*args)
        assert rc == EXIT_ERR and f"tocsin init {old}" in err and err.count("\n") == 1, (args, rc, err)
        assert out == ""
    assert open(old, "rb").read() == before


@test
def replay_of_a_file_in_a_read_only_directory():
    # a WAL file without its -shm, in a directory the user cannot write (as root: run as
    # nobody): a replay is plain reads, no wake engine, so it works
    d = tempfile.mkdtemp(prefix="tocsin-ro-")
    try:
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop-tests", "golden",
                           "v2-full.db")
        db, exe = os.path.join(d, "x.db"), os.path.join(d, "tocsin")
        shutil.copy(src, db)
        shutil.copy(TOCSIN, exe)  # reachable by the other user wherever the checkout is
        os.chmod(db, 0o444)
        os.chmod(d, 0o555)
        cmd = [exe, "tail", db, "orders", "--no-follow"]
        if os.geteuid() == 0:
            cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + cmd
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        assert p.returncode == 0, (p.returncode, p.stderr)
        lines = [json.loads(x) for x in p.stdout.splitlines()]
        assert lines and all(x["topic"] == "orders" for x in lines), p.stdout
        assert [x["id"] for x in lines] == sorted(x["id"] for x in lines)
        assert not os.path.exists(db + "-shm")
    finally:
        os.chmod(d, 0o755)
        shutil.rmtree(d, ignore_errors=True)


# ---- the dashboard's HTTP surface ----
class Server:
    def __init__(self, db, *args, env=None):
        port = [] if "--port" in args else ["--port", "0"]
        self.p = subprocess.Popen([TOCSIN, "ui", db, *port, *args], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True,
                                  env=None if env is None else {**os.environ, **env})
        line = wait_line(self.p.stdout)
        m = re.search(r"listening on (http://\S+)", line)
        assert m, line
        self.url = m.group(1)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)  # our own child, by its pid
        self.p.communicate(timeout=15)
        return self.p.returncode


def http(url, method="GET", headers=None):
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def csrf_of(page):
    return re.search(r'name="tocsin-csrf" content="([0-9a-f]{32})"', page).group(1)


@test
def ui_bad_options():
    db = newdb("uiopts")
    rc, _, err = run("ui", db, "--host", "0.0.0.0")
    usage_error(rc, err, "--token")
    rc, _, err = run("ui", db, "--port", "99999")
    usage_error(rc, err, "--port")
    rc, _, err = run("ui", db, "--host", "nowhere")
    usage_error(rc, err, "--host")
    rc, _, err = run("ui", db, "--token", "short")
    usage_error(rc, err, "--token")
    rc, _, err = run("ui", db, "--port=99999")  # --name=value as in every other command
    usage_error(rc, err, "--port must be")
    rc, _, err = run("ui", db, "--port=")
    usage_error(rc, err, "--port must be")
    s = Server(db, "--host=127.0.0.1", "--read-only")
    try:
        assert http(s.url)[0] == 200
    finally:
        assert s.stop() == 0


@test
def ui_csrf_and_mutations():
    db = newdb("uicsrf")
    js("enqueue", db, "q", '{"x":"<script>alert(1)</script>"}')
    s = Server(db)
    try:
        st, h, page = http(s.url)
        assert st == 200 and "script-src 'self'" in h["Content-Security-Policy"]
        assert "<script>" not in page.replace('<script src="/dashboard.js"></script>', "")
        token = csrf_of(page)
        st, _, body = http(s.url + "api/pause?queue=q", "POST")
        assert st == 403 and "CSRF" in body
        st, _, body = http(s.url + "api/pause?queue=q", "POST", {"X-Tocsin-CSRF": "0" * 32})
        assert st == 403
        assert js("stats", db, "q")["queues"][0]["paused"] is False
        st, _, body = http(s.url + "api/pause?queue=q", "POST", {"X-Tocsin-CSRF": token})
        assert st == 200 and json.loads(body) == {"paused": True}
        assert js("stats", db, "q")["queues"][0]["paused"] is True
        st, _, _ = http(s.url + "api/pause?queue=q", "GET", {"X-Tocsin-CSRF": token})
        assert st == 404  # a GET never mutates
        st, h, body = http(s.url + "api/jobs?q=script")
        assert st == 200 and h["Content-Type"].startswith("application/json") and h["X-Content-Type-Options"] == "nosniff"
        assert json.loads(body)[0]["payload"]["x"] == "<script>alert(1)</script>"
        jid = js("enqueue", db, "q", "{}")["id"]
        st, _, body = http(s.url + f"api/cancel?id={jid}", "POST", {"X-Tocsin-CSRF": token})
        assert st == 200 and js("job", db, jid)["state"] == "dead"
        st, _, body = http(s.url + f"api/requeue?id={jid}", "POST", {"X-Tocsin-CSRF": token})
        assert st == 200 and js("job", db, jid)["state"] == "pending"
        st, _, body = http(s.url + "api/requeue?id=abc", "POST", {"X-Tocsin-CSRF": token})
        assert st == 400
        st, _, body = http(s.url + "api/requeue?id=12345", "POST", {"X-Tocsin-CSRF": token})
        assert st == 404
        st, _, body = http(s.url, "GET", {"Host": "evil.example:80"})
        assert st == 403 and "Host" in body
        # two Host headers: the first was checked, another hop may read the second
        port = int(re.search(r":(\d+)/", s.url).group(1))
        for hosts in ((f"127.0.0.1:{port}", "evil.example"), ("evil.example", f"127.0.0.1:{port}")):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
                conn.sendall(("GET /api/snapshot HTTP/1.1\r\n" + "".join(f"Host: {h}\r\n" for h in hosts) +
                              "Connection: close\r\n\r\n").encode())
                reply = b""
                while chunk := conn.recv(65536):
                    reply += chunk
            assert reply.startswith(b"HTTP/1.1 403") and b"unexpected Host header" in reply, (hosts, reply[:200])
        st, h, body = http(s.url + "metrics")
        assert st == 200 and h["Content-Type"].startswith("text/plain") and 'tocsin_jobs{queue="q"' in body
        st, _, body = http(s.url + "api/resume?queue=q", "POST", {"X-Tocsin-CSRF": token})
        assert st == 200 and js("stats", db, "q")["queues"][0]["paused"] is False
        make_dead(db, "gone", 2)
        st, _, body = http(s.url + "api/purge?queue=gone", "POST")
        assert st == 403 and count(db, "_tocsin_dead") == 2
        st, _, body = http(s.url + "api/purge?queue=gone", "POST", {"X-Tocsin-CSRF": token})
        assert st == 200 and json.loads(body) == {"purged": 2} and count(db, "_tocsin_dead") == 0
        st, _, body = http(s.url + "api/pause?queue=bad%01name", "POST", {"X-Tocsin-CSRF": token})
        assert st == 400 and "queue" in json.loads(body)["error"]
        # an argument that cannot mean what it says is refused, and nothing is changed:
        # `purge?queue=` once purged every queue's dead jobs
        make_dead(db, "keep", 2)
        for bad, why in [("queue=", "'queue' is empty"), ("queue", "'queue' is empty"),
                         ("queue=keep%00x", "NUL byte"), ("queue=gone&queue=keep", "more than once")]:
            st, _, body = http(s.url + "api/purge?" + bad, "POST", {"X-Tocsin-CSRF": token})
            assert st == 400 and why in json.loads(body)["error"], (bad, st, body)
            st, _, body = http(s.url + "api/jobs?" + bad)
            assert st == 400 and why in json.loads(body)["error"], (bad, st, body)
        assert count(db, "_tocsin_dead") == 2
    finally:
        assert s.stop() == 0


@test
def ui_read_only():
    db = newdb("uiro")
    jid = make_dead(db, "q", 1)[0]
    s = Server(db, "--read-only")
    try:
        st, _, page = http(s.url)
        assert 'name="tocsin-read-only" content="1"' in page
        st, _, body = http(s.url + f"api/requeue?id={jid}", "POST", {"X-Tocsin-CSRF": csrf_of(page)})
        assert st == 403 and "read-only" in body
        assert js("job", db, jid)["state"] == "dead"
        st, _, body = http(s.url + "api/dead")
        assert st == 200 and json.loads(body)[0]["id"] == jid
    finally:
        assert s.stop() == 0


@test
def ui_access_token():
    db = newdb("uitoken")
    s = Server(db, "--token", "s3cret-token")
    try:
        st, _, _ = http(s.url)
        assert st == 401
        st, _, _ = http(s.url + "api/snapshot", "GET", {"Authorization": "Bearer wrong-token"})
        assert st == 401
        st, _, body = http(s.url + "api/snapshot", "GET", {"Authorization": "Bearer s3cret-token"})
        assert st == 200 and "stats" in json.loads(body)
        st, h, _ = http(s.url + "?token=s3cret-token")
        assert st == 200, st
        port = s.url.rstrip("/").rsplit(":", 1)[1]
        # a browser sends a host's cookies to every port of it: the cookie is this dashboard's
        # own (its port in the name) and holds a random session id, never the token, so
        # another app of the host that receives it learns nothing it could use elsewhere
        m = re.fullmatch(rf"tocsin_session_{port}=([0-9a-f]{{32}}); HttpOnly; SameSite=Strict; Path=/",
                         h["Set-Cookie"])
        assert m, h["Set-Cookie"]
        session = m.group(1)
        assert "s3cret-token" not in h["Set-Cookie"]
        assert http(s.url + "metrics", "GET", {"Cookie": f"tocsin_session_{port}={session}"})[0] == 200
        # the session id is a cookie only: not a token, not another port's cookie name
        assert http(s.url + "metrics", "GET", {"Authorization": f"Bearer {session}"})[0] == 401
        assert http(s.url + f"metrics?token={session}")[0] == 401
        assert http(s.url + "metrics", "GET", {"Cookie": f"tocsin_session_1{port}={session}"})[0] == 401
        # the old cookie (the token itself, under the old name) opens nothing any more
        assert http(s.url + "metrics", "GET", {"Cookie": f"tocsin_token_{port}=s3cret-token"})[0] == 401
        # an old or foreign cookie of our name is ignored, wherever it comes: before ours
        # (a longer Path another app set), after it, or alone (401, as with no cookie)
        for cookie in (f"tocsin_session_{port}=stale0123; tocsin_session_{port}={session}",
                       f"tocsin_session_{port}={session}; tocsin_session_{port}=stale0123",
                       f"other=1; tocsin_session_{port}={session}; junk",
                       f'tocsin_session_{port}="{session}x"; tocsin_session_{port}={session}'):
            st, _, body = http(s.url + "metrics", "GET", {"Cookie": cookie})
            assert st == 200, (cookie, st, body)
        st, _, body = http(s.url + "api/snapshot", "GET", {"Cookie": f"tocsin_session_{port}=stale0123"})
        assert st == 401 and "open /?token=T again" in body, (st, body)
        # with a valid token beside it, a stale cookie changes nothing: the page is served
        # and hands out the current session
        st, h, _ = http(s.url + "?token=s3cret-token", "GET", {"Cookie": f"tocsin_session_{port}=stale0123"})
        assert st == 200 and session in h["Set-Cookie"], h
        # the mutations still want the CSRF token, cookie or not
        st, _, page = http(s.url, "GET", {"Cookie": f"tocsin_session_{port}={session}"})
        assert st == 200
        assert http(s.url + "api/pause?queue=q", "POST", {"Cookie": f"tocsin_session_{port}={session}"})[0] == 403
        assert http(s.url + "api/pause?queue=q", "POST", {"Cookie": f"tocsin_session_{port}={session}",
                                                          "X-Tocsin-CSRF": csrf_of(page)})[0] == 200
    finally:
        assert s.stop() == 0
    # a restart draws a new session: the last run's cookie (same port, same token) is ignored
    s = Server(db, "--token", "s3cret-token")
    try:
        port = s.url.rstrip("/").rsplit(":", 1)[1]
        first = http(s.url + "?token=s3cret-token")[1]["Set-Cookie"].split(";")[0]
    finally:
        assert s.stop() == 0
    s = Server(db, "--port", port, "--token", "s3cret-token")
    try:
        assert http(s.url + "metrics", "GET", {"Cookie": first})[0] == 401
        second = http(s.url + "?token=s3cret-token")[1]["Set-Cookie"].split(";")[0]
        assert second != first and second.startswith(f"tocsin_session_{port}=")
        assert http(s.url + "metrics", "GET", {"Cookie": second})[0] == 200
    finally:
        assert s.stop() == 0
    # two dashboards of one host: a browser keeps cookies per host, not per port, so the
    # second's token must not replace the first's (its open page answered 401 from then on)
    a, b = Server(db, "--token", "token-of-a"), Server(db, "--token", "token-of-b")
    try:
        jar = CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        for srv, tok in ((a, "token-of-a"), (b, "token-of-b")):
            assert opener.open(srv.url + "?token=" + tok, timeout=10).status == 200
        for srv in (a, b):
            with opener.open(srv.url + "api/snapshot", timeout=10) as r:
                assert r.status == 200 and "stats" in json.loads(r.read())
        # the jar holds a cookie of each, neither holding a token
        assert len(jar) == 2 and all(c.name.startswith("tocsin_session_") for c in jar), list(jar)
        assert not any("token-of" in c.value for c in jar)
        # a's cookie opens nothing on b: a session id is good on its own dashboard only
        a_cookie = [c for c in jar if c.name.endswith(a.url.rstrip("/").rsplit(":", 1)[1])][0]
        b_port = b.url.rstrip("/").rsplit(":", 1)[1]
        assert http(b.url + "metrics", "GET", {"Cookie": f"tocsin_session_{b_port}={a_cookie.value}"})[0] == 401
    finally:
        assert a.stop() == 0 and b.stop() == 0
    # the same from the environment (a command line is readable by every local user)
    s = Server(db, env={"TOCSIN_UI_TOKEN": "env-token-1"})
    try:
        assert http(s.url)[0] == 401
        assert http(s.url + "api/snapshot", "GET", {"Authorization": "Bearer env-token-1"})[0] == 200
    finally:
        assert s.stop() == 0
    for env, args, word in (({"TOCSIN_UI_TOKEN": "short"}, [], "TOCSIN_UI_TOKEN must be at least 8"),
                            ({"TOCSIN_UI_TOKEN": "has space1"}, [], "TOCSIN_UI_TOKEN may hold only"),
                            ({"TOCSIN_UI_TOKEN": "env-token-1"}, ["--token", "s3cret-token"], "not both")):
        p = subprocess.run([TOCSIN, "ui", db, "--port", "0", *args], capture_output=True, text=True,
                           env={**os.environ, **env}, timeout=15)
        assert p.returncode == 2 and word in p.stderr, (env, p.returncode, p.stderr)


@test
def ui_sse_pushes_on_commit():
    db = newdb("uisse")
    js("enqueue", db, "q", "{}")
    s = Server(db)
    try:
        r = urllib.request.urlopen(s.url + "events", timeout=10)
        assert r.headers["Content-Type"] == "text/event-stream"

        def next_snapshot():
            while True:
                line = r.readline().decode()
                if line.startswith("data: "):
                    return json.loads(line[6:])

        first = next_snapshot()
        assert first["stats"]["queues"][0]["pending"] == 1
        t0 = time.monotonic()
        js("enqueue", db, "q", "{}")  # another process commits
        snap = next_snapshot()
        while snap["stats"]["queues"][0]["pending"] != 2:
            snap = next_snapshot()
        # pushed by the wake engine, well before the 5 s idle snapshot
        assert time.monotonic() - t0 < 4, time.monotonic() - t0
        r.close()
    finally:
        assert s.stop() == 0


@test
def ui_says_when_its_file_is_replaced_or_deleted():
    # it went on serving the old file's data and writing into it ({"paused":true}, lost)
    db = newdb("uigone")
    js("enqueue", db, "q", "{}")
    s = Server(db)
    try:
        st, _, page = http(s.url)
        token = {"X-Tocsin-CSRF": csrf_of(page)}
        r = urllib.request.urlopen(s.url + "events", timeout=10)

        def next_snapshot():
            while True:
                line = r.readline().decode()
                assert line, "the stream ended without saying why"
                if line.startswith("data: "):
                    return json.loads(line[6:])

        assert next_snapshot()["stats"]["queues"][0]["pending"] == 1
        fresh = newdb("uigone-new")
        for suffix in ("-wal", "-shm"):
            if os.path.exists(db + suffix):
                os.unlink(db + suffix)
        os.replace(fresh, db)  # a restore from a backup, say
        snap = next_snapshot()  # the stream's last event says what happened
        assert "replaced after tocsin ui opened it" in snap["error"], snap
        assert r.readline() == b"" or r.read() == b""
        for path, method, hdrs in (("api/snapshot", "GET", {}), ("api/jobs", "GET", {}), ("metrics", "GET", {}),
                                   ("events", "GET", {}), ("api/pause?queue=q", "POST", token)):
            st, _, body = http(s.url + path, method, hdrs)
            assert st == 503 and "restart tocsin ui" in json.loads(body)["error"], (path, st, body)
        assert js("stats", db)["queues"] == []
        os.unlink(db)
        st, _, body = http(s.url + "api/snapshot")
        assert st == 503 and "deleted or renamed" in json.loads(body)["error"], (st, body)
        assert http(s.url)[0] == 200  # the page still loads, to show the error
    finally:
        assert s.stop() == 0


# ---- audit: hostile input of every kind is refused, nothing written ----
@test
def durations_are_read_exactly():
    db = newdb("durations")
    # a bare number only when it is the whole text, units from the largest down, each once
    for bad in ("30s5", "1h30", "1m1m", "30m1h", "5ms5s", "1.5s", "-5s", " 5", "5 ", "+5", "1H", "s", "ms"):
        rc, out, err = run("enqueue", db, "q", "{}", "--delay", bad)
        usage_error(rc, err, "--delay must be a duration")
        assert out == ""
    assert count(db, "_tocsin_jobs") == 0
    for good, ms in (("250", 250), ("250ms", 250), ("1h30m", 5400000), ("1d2h3m4s5ms", 93784005), ("0", 0)):
        jid = js("enqueue", db, "q", "{}", "--delay", good)["id"]
        (delay,) = sql(db, "SELECT run_at - created_at FROM _tocsin_jobs WHERE id = ?", jid)[0]
        assert delay == ms, (good, delay)
    rc, _, err = run("stats", db, env={"TOCSIN_BUSY_TIMEOUT": "1s5"})
    usage_error(rc, err, "TOCSIN_BUSY_TIMEOUT")


@test
def integers_are_read_exactly():
    db = newdb("integers")
    jid = js("enqueue", db, "q", "{}")["id"]
    for args, word in ((["enqueue", db, "q", "{}", "--priority", " 5"], "--priority"),
                       (["enqueue", db, "q", "{}", "--priority", "+5"], "--priority"),
                       (["enqueue", db, "q", "{}", "--priority", "0x10"], "--priority"),
                       (["enqueue", db, "q", "{}", "--priority", "99999999999999999999"], "--priority"),
                       (["enqueue", db, "q", "{}", "--max-attempts", "3 "], "--max-attempts"),
                       (["job", db, f" {jid}"], "job id"), (["job", db, f"+{jid}"], "job id"),
                       (["cancel", db, f" {jid}"], "job id"), (["jobs", db, "--limit", " 5"], "--limit"),
                       (["ui", db, "--port", " 80"], "--port")):
        rc, out, err = run(*args)
        usage_error(rc, err, word)
        assert out == ""
    assert count(db, "_tocsin_jobs") == 1 and count(db, "_tocsin_dead") == 0
    assert js("enqueue", db, "q", "{}", "--priority", "-5")["id"] == jid + 1


@test
def options_given_twice_are_refused():
    db = newdb("twice")
    cases = [(["enqueue", db, "q", "{}", "--priority", "1", "--priority", "2"], "--priority is given twice"),
             (["enqueue", db, "q", "{}", "--delay=1s", "--delay", "2s"], "--delay is given twice"),
             (["enqueue", db, "q", "{}", "--json", "--json"], "--json is given twice"),
             (["dead", "purge", db, "--queue", "a", "--queue", "b"], "--queue is given twice"),
             (["dead", "requeue", db, "--all", "--all"], "--all is given twice"),
             (["tail", db, "t", "--no-follow", "--no-follow"], "--no-follow is given twice"),
             (["jobs", db, "--limit", "1", "--limit", "2"], "--limit is given twice"),
             (["ui", db, "--port", "0", "--port", "0"], "--port is given twice"),
             (["ui", db, "--read-only", "--read-only"], "--read-only is given twice"),
             (["ui", db, "--host=127.0.0.1", "--host", "127.0.0.1"], "--host is given twice")]
    refused_all(db, cases)


@test
def dead_requeue_is_all_or_nothing():
    db = newdb("requeueatomic")
    ids = [js("enqueue", db, "q", "{}")["id"] for _ in range(3)]
    for i in ids:
        js("cancel", db, i)
    # one id that is no dead job: exit 3 and the others stay dead
    rc, out, err = run("dead", "requeue", db, ids[0], 999, ids[1])
    assert rc == EXIT_NOTFOUND and "no dead job 999" in err and "nothing was requeued" in err, (rc, err)
    assert out == "" and count(db, "_tocsin_dead") == 3 and count(db, "_tocsin_jobs") == 0
    rc, out, err = run("dead", "requeue", db, ids[0], ids[0])
    usage_error(rc, err, f"job id {ids[0]} is given twice")
    assert count(db, "_tocsin_dead") == 3
    # --all: a job it cannot requeue (its unique key is held again) leaves every one dead
    k = js("enqueue", db, "q", '"x"', "--unique-key", "k")["id"]
    js("cancel", db, k)
    js("enqueue", db, "q", '"y"', "--unique-key", "k")
    rc, out, err = run("dead", "requeue", db, "--all", "--yes")
    usage_error(rc, err, "unique_key")
    assert out == "" and count(db, "_tocsin_dead") == 4
    assert js("dead", "requeue", db, ids[0], ids[2]) == {"requeued": [ids[0], ids[2]]}
    assert count(db, "_tocsin_dead") == 2
    rc, out, err = run("dead", "requeue", db, *range(1, 10002))  # it said "unexpected argument '10000'"
    usage_error(rc, err, "at most 10000 job ids")


@test
def writing_to_a_file_it_cannot_write_is_refused_up_front():
    d = tempfile.mkdtemp(prefix="tocsin-rw-")
    try:
        db, exe = os.path.join(d, "x.db"), os.path.join(d, "tocsin")
        shutil.copy(TOCSIN, exe)
        assert subprocess.run([exe, "init", db], capture_output=True).returncode == 0
        assert subprocess.run([exe, "enqueue", db, "q", "1"], capture_output=True).returncode == 0
        os.chmod(db, 0o444)
        os.chmod(d, 0o777)  # the directory is writable: SQLite alone would open the file read-only
        before = open(db, "rb").read()
        pre = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
        for args in (["enqueue", db, "q", "2"], ["cancel", db, "1"], ["pause", db, "q"], ["init", db],
                     ["dead", "purge", db, "--yes"], ["prune", db], ["notify", db, "c", "1"],
                     ["tail", db, "t", "--consumer", "c", "--no-follow"]):
            p = subprocess.run(pre + [exe, *args], capture_output=True, text=True, timeout=20)
            assert p.returncode == EXIT_ERR, (args, p.returncode, p.stderr)
            assert f"cannot open {db} for writing: the file is read-only" in p.stderr, (args, p.stderr)
            assert p.stderr.count("\n") == 1 and p.stdout == "", (args, p.stdout, p.stderr)
        p = subprocess.run(pre + [exe, "stats", db, "--json"], capture_output=True, text=True, timeout=20)
        assert p.returncode == 0, p.stderr  # reading still works
        assert open(db, "rb").read() == before
    finally:
        os.chmod(d, 0o755)
        shutil.rmtree(d, ignore_errors=True)


@test
def newer_or_foreign_schemas_are_refused_untouched():
    for value, code, word in (("3", EXIT_ERR, "newer than this library's v2: upgrade tocsin"),
                              ("4294967298", EXIT_ERR, "schema v4294967298, newer"),
                              ("1.9", EXIT_ERR, "schema_version ('1.9') is malformed")):
        db = newdb("schema" + value.replace(".", "_"))
        sql(db, "UPDATE _tocsin_meta SET value = ? WHERE key = 'schema_version'", value)
        before = open(db, "rb").read()
        for args in (["stats", db], ["enqueue", db, "q", "{}"], ["init", db], ["ui", db, "--port", "0"]):
            rc, out, err = run(*args)
            assert rc == code and word in err and err.count("\n") == 1, (args, rc, err)
            assert out == ""
        assert open(db, "rb").read() == before
    # a file that is not SQLite at all
    junk = os.path.join(OUT, "junk.db")
    with open(junk, "w") as f:
        f.write("not a database, only text " * 20)
    before = open(junk, "rb").read()
    for args in (["stats", junk], ["enqueue", junk, "q", "{}"], ["init", junk]):
        rc, out, err = run(*args)
        assert rc == EXIT_ERR and "not a database" in err and err.count("\n") == 1, (args, rc, err)
    assert open(junk, "rb").read() == before and not os.path.exists(junk + "-wal")


@test
def writing_commands_leave_a_file_without_tocsin_tables_untouched():
    # another application's database, or an empty file: only init installs tocsin's tables
    # (a writing command did, and turned on WAL, even when it then failed: cancel said
    # "no live job 5", exit 3, after adding 13 tables)
    other, empty = os.path.join(OUT, "otherapp.db"), os.path.join(OUT, "empty.db")
    c = sqlite3.connect(other)
    c.execute("CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT)")
    c.commit()
    c.close()
    open(empty, "w").close()
    for db in (other, empty):
        before = open(db, "rb").read()
        for args in (["cancel", db, "5"], ["enqueue", db, "q", "{}"], ["pause", db, "q"], ["notify", db, "c", "{}"],
                     ["dead", "purge", db, "--yes"], ["dead", "requeue", db, "--all", "--yes"], ["prune", db],
                     ["tail", db, "t", "--consumer", "c", "--no-follow"], ["ui", db, "--port", "0"]):
            rc, out, err = run(*args)
            assert rc == EXIT_ERR and f"no tocsin schema (tocsin init {db} installs it)" in err, (args, rc, err)
            assert out == "" and err.count("\n") == 1, (args, out, err)
        assert open(db, "rb").read() == before and not os.path.exists(db + "-wal"), db
    js("init", other)
    assert js("enqueue", other, "q", "{}")["id"] == 1
    assert sql(other, "SELECT count(*) FROM users") == [(0,)]


@test
def ui_refuses_arguments_and_methods_a_path_does_not_take():
    db = newdb("uiargs")
    jid = js("enqueue", db, "q", "{}")["id"]
    js("cancel", db, jid)
    s = Server(db)
    try:
        st, _, page = http(s.url)
        token = {"X-Tocsin-CSRF": csrf_of(page)}
        # a misspelt argument is never ignored: purge?queu=x would purge every queue
        for path, method, word in (("api/purge?queu=x", "POST", "'queu'"), ("api/purge?id=1", "POST", "'id'"),
                                   ("api/requeue?id=1&queue=q", "POST", "'queue'"),
                                   ("api/jobs?status=dead", "GET", "'status'"), ("?x=1", "GET", "'x'"),
                                   ("api/dead?after=1", "GET", "'after'"), ("metrics?format=json", "GET", "'format'")):
            st, h, body = http(s.url + path, method, token)
            assert st == 400 and word in json.loads(body)["error"], (path, st, body)
        assert count(db, "_tocsin_dead") == 1
        for path, word in (("api/jobs?state=bogus", "state must be"), ("api/jobs?queue=%01", "queue")):
            st, _, body = http(s.url + path)
            assert st == 400 and word in json.loads(body)["error"], (path, st, body)
        # a GET of a mutation, with or without arguments, mutates nothing
        assert http(s.url + "api/requeue?id=%d" % jid, "GET", token)[0] == 404
        assert http(s.url + "api/purge?queu=x", "GET", token)[0] == 404
        assert http(s.url + "nope", "POST", token)[0] == 404
        # only GET, HEAD and POST are served: another method gets 405, the page included
        for path, method in (("", "PUT"), ("", "DELETE"), ("api/purge", "DELETE"), ("api/snapshot", "OPTIONS")):
            st, _, body = http(s.url + path, method, token)
            assert st == 405 and "method not allowed" in json.loads(body)["error"], (path, method, st, body)
        assert count(db, "_tocsin_dead") == 1
        st, _, body = http(s.url + "api/jobs?state=dead&limit=5&queue=q&q=%d" % jid)
        assert st == 200 and [j["id"] for j in json.loads(body)] == [jid], body
    finally:
        assert s.stop() == 0


@test
def ui_token_must_fit_in_its_cookie():
    db = newdb("uitoken")
    # it travels in a header (Bearer) and a URL: a space, ';' or a control byte would cut or
    # break it (the cookie holds a session id now, not the token, but the rule stays)
    for bad in ("abc defgh", "abcdefgh;x", "abcdefgh,x", 'abcd"efgh', "abcdefgh\r\nX-A: b", "abcdéfgh"):
        rc, out, err = run("ui", db, "--token", bad)
        usage_error(rc, err, "--token may hold only")
        assert out == ""
    s = Server(db, "--token", "Secret-Token_0123~!")
    try:
        st, h, _ = http(s.url + "?token=Secret-Token_0123~!")
        assert st == 200 and re.match(r"tocsin_session_\d+=[0-9a-f]{32};", h["Set-Cookie"]), h
        assert http(s.url + "metrics", "GET", {"Authorization": "Bearer Secret-Token_0123~!"})[0] == 200
    finally:
        assert s.stop() == 0


@test
def help_takes_one_command():
    rc, out, err = run("help", "enqueue", "extra")
    usage_error(rc, err, "help takes one command")
    assert out == ""


@test
def prune_refuses_a_zero_it_would_ignore():
    db = newdb("prunezero")
    jid = js("enqueue", db, "q", "{}")["id"]
    js("cancel", db, jid)
    for opt in ("--dead-older-than", "--streams-older-than"):
        rc, out, err = run("prune", db, opt, "0")
        usage_error(rc, err, f"{opt} must be more than 0")
        assert out == ""
    assert count(db, "_tocsin_dead") == 1
    # keep 0 read as "no count limit": every notification stayed, the prune said 0
    js("notify", db, "c", "{}")
    rc, out, err = run("prune", db, "--notifications-keep", "0", "--notifications-older-than", "0")
    usage_error(rc, err, "--notifications-keep must be at least 1")
    assert out == "" and count(db, "_tocsin_notifications") == 1
    assert js("prune", db, "--notifications-keep", "1")["notifications"] == 0


@test
def db_is_a_regular_files_path():
    # a FIFO blocked the open forever; a device got "tocsin init /dev/null does"
    fifo = os.path.join(OUT, "fifo.db")
    os.mkfifo(fifo)
    for path, word in ((fifo, "a FIFO"), ("/dev/null", "a character device")):
        for args in (["stats", path], ["enqueue", path, "q", "{}"], ["init", path], ["ui", path, "--port", "0"]):
            rc, out, err = run(*args, timeout=10)
            usage_error(rc, err, f"{path} is not a regular file ({word})")
            assert out == ""
    # a path, never an SQLite URI nor an in-memory database: init creates the file of that name
    cwd = os.getcwd()
    os.chdir(OUT)
    try:
        for name in ("file:uri.db?mode=memory", ":memory:"):
            rc, out, err = run("init", name)
            assert rc == 0 and os.path.isfile(name), (name, rc, err)
            assert js("enqueue", name, "q", "{}")["id"] == 1
            assert js("stats", name)["enqueued_total"] == 1
    finally:
        os.chdir(cwd)


@test
def enqueue_and_jobs_refuse_a_zero_they_would_ignore():
    db = newdb("zeroes")
    rc, out, err = run("enqueue", db, "q", "{}", "--expires", "0")  # the core reads 0 as never
    usage_error(rc, err, "--expires must be more than 0")
    assert out == "" and count(db, "_tocsin_jobs") == 0
    js("enqueue", db, "q", "{}")
    rc, out, err = run("jobs", db, "--newer-than", "0")  # it listed every job
    usage_error(rc, err, "--newer-than must be more than 0")
    assert out == ""
    assert len(js("jobs", db, "--older-than", "0")) == 1


@test
def rows_written_around_tocsin_keep_every_document_valid():
    # plain SQL can leave a payload that is not JSON, or a text that is not UTF-8: every
    # document still parses (as the SQL functions' do, docs/sql.md "Results"), one such row
    # fails no listing (json(payload) failed them all: "malformed JSON"), and the dashboard
    # still serves its snapshot
    db = newdb("around")
    good = js("enqueue", db, "q", '{"a":1}')["id"]
    c = sqlite3.connect(db, isolation_level=None)
    cols = "(queue, state, payload, meta, priority, attempts, max_attempts, run_at, created_at)"
    c.execute(f"INSERT INTO _tocsin_jobs {cols} VALUES ('q', 'pending', 'not json', '{{bad', 0, 0, 3, 1, 1)")
    bad = c.execute("SELECT max(id) FROM _tocsin_jobs").fetchone()[0]
    c.execute(f"INSERT INTO _tocsin_jobs {cols} VALUES (CAST(X'71FF' AS TEXT), 'pending',"
              " CAST(X'7B2261223A2280FF227D' AS TEXT), NULL, 0, 0, 3, 1, 1)")
    latin = c.execute("SELECT max(id) FROM _tocsin_jobs").fetchone()[0]
    c.execute("INSERT INTO _tocsin_dead (id, queue, payload, priority, attempts, max_attempts, run_at, created_at,"
              " last_error, reason, died_at) VALUES (100, 'd', '[1,', 0, 1, 1, 1, 1, CAST(X'6F6F9B' AS TEXT),"
              " 'failed', 1)")
    c.execute("INSERT INTO _tocsin_notifications (channel, payload, created_at) VALUES ('ch', 'nope', 1)")
    c.execute("INSERT INTO _tocsin_events (topic, payload, created_at) VALUES ('t', '{x}', 1)")
    c.close()

    def doc(*args):
        p = subprocess.run([TOCSIN, *args, "--json"], capture_output=True)
        assert p.returncode == 0, (args, p.stderr)
        return json.loads(p.stdout.decode("utf-8"))  # strict: raw bytes that are no UTF-8 fail

    jobs = {j["id"]: j for j in doc("jobs", db)}
    assert jobs[good]["payload"] == {"a": 1}
    assert jobs[bad]["payload"] == "not json" and jobs[bad]["meta"] == "{bad", jobs[bad]
    assert jobs[latin]["queue"] == "q\ufffd" and jobs[latin]["payload"] == '{"a":"\ufffd\ufffd"}', jobs[latin]
    assert doc("job", db, str(bad))["payload"] == "not json"
    assert doc("job", db, str(latin))["queue"] == "q\ufffd"
    dead = doc("dead", "list", db)[0]
    assert dead["payload"] == "[1," and dead["last_error"] == "oo\ufffd", dead
    assert doc("jobs", db, "--state", "dead")[0]["last_error"] == "oo\ufffd"
    assert [q["queue"] for q in doc("stats", db)["queues"]] == ["d", "q", "q\ufffd"]
    p = subprocess.run([TOCSIN, "tail", db, "t", "--no-follow"], capture_output=True)
    assert p.returncode == 0 and json.loads(p.stdout.decode("utf-8"))["payload"] == "{x}", p
    for args in (["jobs", db], ["job", db, str(latin)], ["dead", "list", db]):
        p = subprocess.run([TOCSIN, *args], capture_output=True)
        assert p.returncode == 0, (args, p.stderr)
        p.stdout.decode("utf-8")
        assert b"\x9b" not in p.stdout, (args, p.stdout)
    s = Server(db, "--read-only")
    try:
        status, _, body = http(s.url + "api/snapshot")
        assert status == 200, body
        snap = json.loads(body)
        assert snap["notifications"][0]["recent"][0]["payload"] == "nope", snap
        status, _, body = http(s.url + "api/jobs")
        assert status == 200 and len(json.loads(body)) == 4, body
    finally:
        assert s.stop() == 0


@test
def tables_line_up_names_in_any_script():
    # widths counted bytes: a queue named "été" (5 bytes, 3 characters) pushed the
    # columns after it two places out of line
    db = newdb("widths")
    for q in ("été", "ascii", "日本"):
        assert run("enqueue", db, q, "{}")[0] == 0
    for args in (["stats", db], ["jobs", db]):
        rc, out, err = run(*args)
        assert rc == 0, err
        lines = out.splitlines()
        starts = {len(line[:line.index("  0") if "  0" in line else line.index("pending")]) for line in lines[1:]}
        assert len(starts) == 1, (args, out)


@test
def bidi_controls_do_not_reach_the_terminal():
    # U+202E reversed what followed it on screen: "a\u202eq-evil" showed as "alive-q"
    db = newdb("bidi")
    assert run("enqueue", db, "pay\u202elive", "{}")[0] == 0
    assert run("enqueue", db, "x\u2066y\u200fz", "{}")[0] == 0
    for args in (["stats", db], ["jobs", db]):
        rc, out, err = run(*args)
        assert rc == 0, err
        assert not any(c in out for c in "\u202e\u2066\u200f"), (args, out)
        assert "pay?live" in out and "x?y?z" in out, out
    assert {q["queue"] for q in js("stats", db)["queues"]} == {"pay\u202elive", "x\u2066y\u200fz"}


print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
