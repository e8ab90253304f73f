"""The interop matrix driver (interop-tests/README.md).

Spawns one agent per runtime, each running from its clean install under
$IOP (build/interop), and checks every ordered pair (producer, consumer) of
the six runtimes on jobs, tasks, streams, notifications, locks and schedules;
then each language's own SQLite driver against each binding's worker. Prints
one line per check and a summary; exits non-zero on any failure or on zero
checks. PAIR=a,b runs only the pairs of those runtimes; SEED=n replays."""
import json
import os
import random
import select
import shutil
import sqlite3
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
IOP = os.environ["IOP"]
C_PREFIX = os.environ["C_PREFIX"]
RUN = os.path.join(IOP, "run")
REPLY_TIMEOUT = 120.0
MAX_PAYLOAD = 1024 * 1024  # TOCSIN_DEFAULT_MAX_PAYLOAD_BYTES (core/include/tocsin.h)
RUNTIMES = ["python", "node", "ruby", "go", "c", "sqlite3"]

# the driver's own json reads and writes values nested to the core's bound (1000) and
# the agents' reply wrapper around them (the bindings under test run in the agents)
sys.setrecursionlimit(10000)

seed = int(os.environ.get("SEED") or random.SystemRandom().randrange(1 << 30))
rnd = random.Random(seed)
print("interop: SEED=%d" % seed, flush=True)


def dumps(v):
    """JSON text as sent to the agents: compact, non-ASCII characters as UTF-8."""
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


class AgentError(Exception):
    pass


class Agent:
    """A long-lived agent process: tab-separated command lines in, JSON lines out."""

    def __init__(self, name, argv, env=None, cwd=None):
        self.name = name
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=cwd,
                                  text=True, encoding="utf-8", bufsize=1)

    def send(self, *fields):
        self.p.stdin.write("\t".join(str(f) for f in fields) + "\n")
        self.p.stdin.flush()

    def recv(self):
        r, _, _ = select.select([self.p.stdout], [], [], REPLY_TIMEOUT)
        if not r:
            raise AgentError("%s: no reply within %ss" % (self.name, REPLY_TIMEOUT))
        line = self.p.stdout.readline()
        if not line:
            raise AgentError("%s: the agent exited (rc %s)" % (self.name, self.p.poll()))
        reply = json.loads(line)
        if not reply.pop("ok"):
            raise AgentError("%s: %s" % (self.name, reply.get("error")))
        return reply

    def call(self, *fields):
        self.send(*fields)
        return self.recv()

    def stop(self):
        try:
            self.call("quit")
        except Exception:
            pass
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def q(s):
    return "'" + str(s).replace("'", "''") + "'"


class ShellAgent:
    """The stock sqlite3 shell with the installed extension loaded, driven from here:
    every operation is SQL run by `sqlite3`. The shell has no blocking waits, so its
    'live' listener, stream follower, lock wait and worker poll (wait for the state);
    as a worker it claims task envelopes and completes them in SQL
    (tocsin_complete / tocsin_fail_task) and fires schedules with tocsin_scheduler_tick."""

    name = "sqlite3"

    def __init__(self, ext):
        self.ext = ext
        self.db = None
        self.pending = None
        self.worker_queue = None
        self.locks = {}

    def sql(self, text):
        script = ".timeout 10000\n.load %s\n%s\n" % (self.ext, text)
        p = subprocess.run(["sqlite3", "-bail", "-batch", "-json", self.db], input=script,
                           capture_output=True, text=True, encoding="utf-8")
        if p.returncode != 0:
            raise AgentError("sqlite3: %s" % p.stderr.strip())
        # one JSON array per statement that returned rows: the last one is the value
        dec, text, pos, rows = json.JSONDecoder(), p.stdout, 0, []
        while True:
            while pos < len(text) and text[pos].isspace():
                pos += 1
            if pos >= len(text):
                break
            rows, pos = dec.raw_decode(text, pos)
        return rows[0]["v"] if rows else None

    def poll(self, text, done=lambda v: v is not None):
        end = time.monotonic() + 60
        while time.monotonic() < end:
            v = self.sql(text)
            if done(v):
                return v
            time.sleep(0.02)
        raise AgentError("sqlite3: the state did not arrive: %s" % text[:80])

    def call(self, op, *args):
        return getattr(self, "op_" + op)(*args)

    def send(self, op, *args):
        self.pending = (op, args)

    def recv(self):
        op, args = self.pending
        return self.call(op, *args)

    def stop(self):
        pass

    def op_hello(self):
        v = subprocess.run(["sqlite3", "--version"], capture_output=True, text=True).stdout.split()[0]
        return {"runtime": "sqlite3", "version": v, "module": self.ext, "bigint": True}

    def op_open(self, path):
        self.db, self.worker_queue, self.locks = path, None, {}
        return {}

    def op_close(self):
        self.db = None
        return {}

    def op_enqueue(self, queue, payload, meta):
        return {"id": self.sql("SELECT tocsin_enqueue(%s, %s, json_object('meta', json(%s), 'max_attempts', 1)) AS v;"
                               % (q(queue), q(payload), q(meta)))}

    def op_claim_ack(self, queue):
        tick = "SELECT tocsin_scheduler_tick();" if self.worker_queue else ""
        rows = self.poll("%s SELECT tocsin_claim(%s, 'shell', 1, 30000) AS v;" % (tick, q(queue)),
                         lambda v: v is not None and json.loads(v))
        j = json.loads(rows)[0]
        ok = self.sql("SELECT tocsin_ack(%d, %d) AS v;" % (j["id"], j["token"]))
        return {"payload": j["payload"], "meta": j["meta"], "acked": ok == 1}

    def op_job(self, jid):
        j = self.sql("SELECT tocsin_job(%d) AS v;" % int(jid))
        return {"state": json.loads(j)["state"] if j else None}

    def op_worker_start(self, queue):
        self.worker_queue = queue
        return {}

    def op_worker_stop(self):
        self.worker_queue = None
        return {}

    def pump_tasks(self):
        """Runs one task envelope of the worker queue: echo completes, boom fails."""
        rows = self.poll("SELECT tocsin_claim(%s, 'shell-worker', 1, 30000) AS v;" % q(self.worker_queue),
                         lambda v: v is not None and json.loads(v))
        j = json.loads(rows)[0]
        env = j["payload"]
        arg = env["args"][0]
        if env["task"] == "echo":
            self.sql("SELECT tocsin_complete(%d, %d, %s) AS v;"
                     % (j["id"], j["token"], q(dumps({"by": "sqlite3", "echo": arg}))))
        else:
            self.sql("SELECT tocsin_fail_task(%d, %d, 'SQLError', %s) AS v;"
                     % (j["id"], j["token"], q("boom: %s" % dumps(arg))))

    def op_call(self, queue, task, args):
        return {"id": self.sql("SELECT tocsin_task_enqueue(%s, %s, %s, '{}', '{\"max_attempts\":1}') AS v;"
                               % (q(queue), q(task), q(args)))}

    def op_result(self, jid):
        r = json.loads(self.poll("SELECT tocsin_result_get(%d) AS v;" % int(jid)))
        if r["status"] == "error":
            return {"error": {"type": r["error"]["type"], "message": r["error"]["message"]}}
        return {"value": r["value"]}

    def op_publish(self, topic, payload):
        return {"offset": self.sql("SELECT tocsin_stream_publish(%s, %s) AS v;" % (q(topic), q(payload)))}

    def op_sub_start(self, topic, consumer):
        self.sub = [topic, consumer, self.op_offset(topic, consumer)["offset"]]
        return {}

    def op_sub_next(self, n):
        topic, _, pos = self.sub
        rows = json.loads(self.poll("SELECT tocsin_stream_read(%s, %d, %d) AS v;" % (q(topic), pos, int(n)),
                                    lambda v: v is not None and len(json.loads(v)) >= int(n)))
        self.sub[2] = rows[-1]["offset"]
        return {"events": [{"offset": e["offset"], "payload": e["payload"]} for e in rows]}

    def op_sub_stop(self):
        topic, consumer, pos = self.sub
        self.sql("SELECT tocsin_stream_save_offset(%s, %s, %d) AS v;" % (q(consumer), q(topic), pos))
        return {}

    def op_offset(self, topic, consumer):
        return {"offset": self.sql("SELECT tocsin_stream_offset(%s, %s) AS v;" % (q(consumer), q(topic)))}

    def op_listen_start(self, channel):
        seen = json.loads(self.sql("SELECT tocsin_notify_read(%s, 0, 10000) AS v;" % q(channel)))
        self.listen = (channel, seen[-1]["id"] if seen else 0)
        return {}

    def op_listen_next(self):
        channel, after = self.listen
        rows = json.loads(self.poll("SELECT tocsin_notify_read(%s, %d, 1) AS v;" % (q(channel), after),
                                    lambda v: v is not None and json.loads(v)))
        self.listen = (channel, rows[0]["id"])
        return {"payload": rows[0]["payload"]}

    def op_listen_stop(self):
        return {}

    def op_notify(self, channel, payload):
        return {"id": self.sql("SELECT tocsin_notify(%s, %s) AS v;" % (q(channel), q(payload)))}

    def op_lock_try(self, name, owner, ttl):
        tok = self.sql("SELECT tocsin_lock_acquire(%s, %s, %d) AS v;" % (q(name), q(owner), int(ttl)))
        if tok:
            self.locks[(name, owner)] = (tok, int(ttl))
        return {"token": tok or 0}

    def op_lock_wait(self, name, owner, ttl):
        tok = self.poll("SELECT tocsin_lock_acquire(%s, %s, %d) AS v;" % (q(name), q(owner), int(ttl)))
        self.locks[(name, owner)] = (tok, int(ttl))
        return {"token": tok}

    def op_lock_renew(self, name, owner):
        tok, ttl = self.locks[(name, owner)]
        return {"res": self.sql("SELECT tocsin_lock_renew(%s, %s, %d, %d) AS v;" % (q(name), q(owner), tok, ttl)) == 1}

    def op_lock_release(self, name, owner):
        tok, _ = self.locks[(name, owner)]
        return {"res": self.sql("SELECT tocsin_lock_release(%s, %s, %d) AS v;" % (q(name), q(owner), tok)) == 1}

    def op_schedule(self, name, cron, queue, payload):
        return {"next_fire": self.sql("SELECT tocsin_schedule_set(%s, %s, %s, %s) AS v;"
                                      % (q(name), q(cron), q(queue), q(payload)))}

    def op_unschedule(self, name):
        return {"res": self.sql("SELECT tocsin_schedule_remove(%s) AS v;" % q(name)) == 1}


# ---- the Python drivers (stdlib sqlite3, SQLAlchemy) run here, on the venv's install ----
class PyDriver:
    def __init__(self, kind):
        import tocsin
        self.tocsin = tocsin
        self.name = kind

    def _conn(self, path):
        c = sqlite3.connect(path, timeout=10)
        self.tocsin.load(c)
        c.execute("CREATE TABLE IF NOT EXISTS orders(id INTEGER PRIMARY KEY, who TEXT)")
        c.commit()
        return c

    def call(self, op, *args):
        return getattr(self, op)(*args)

    def sql_call(self, path, queue, task, args, outcome):
        who = "%s %s %s" % (self.name, outcome, queue)
        if self.name == "sqlalchemy":
            import sqlalchemy as sa
            from sqlalchemy import event
            eng = sa.create_engine("sqlite:///" + path)
            event.listen(eng, "connect", lambda dbapi, rec: self.tocsin.load(dbapi))
            with eng.begin() as c:
                c.execute(sa.text("CREATE TABLE IF NOT EXISTS orders(id INTEGER PRIMARY KEY, who TEXT)"))
            jid = None
            try:
                with eng.begin() as c:
                    c.execute(sa.text("INSERT INTO orders(who) VALUES (:w)"), {"w": who})
                    jid = self.tocsin.call(c, queue, task, json.loads(args), max_attempts=1)
                    if outcome == "rollback":
                        raise KeyError("rollback")
            except KeyError:
                pass
            eng.dispose()
        else:
            c = self._conn(path)
            c.execute("BEGIN")
            c.execute("INSERT INTO orders(who) VALUES (?)", [who])
            jid = self.tocsin.call(c, queue, task, json.loads(args), max_attempts=1)
            c.rollback() if outcome == "rollback" else c.commit()
            c.close()
        c = self._conn(path)
        rows = c.execute("SELECT count(*) FROM orders WHERE who = ?", [who]).fetchone()[0]
        job = c.execute("SELECT tocsin_job(?)", [jid]).fetchone()[0]
        c.close()
        return {"id": jid, "rows": rows, "job": job and json.loads(job)}

    def sql_result(self, path, jid):
        c = self._conn(path)
        try:
            for _ in range(3000):
                r = c.execute("SELECT tocsin_result_get(?)", [int(jid)]).fetchone()[0]
                if r is not None:
                    return {"result": json.loads(r)}
                time.sleep(0.02)
            raise AgentError("no result")
        finally:
            c.close()

    def sql_claim_ack(self, path, queue, _jid):
        c = self._conn(path)
        try:
            for _ in range(3000):
                rows = json.loads(c.execute("SELECT tocsin_claim(?, ?, 1, 30000)", [queue, self.name]).fetchone()[0])
                c.commit()
                if rows:
                    j = rows[0]
                    ok = c.execute("SELECT tocsin_ack(?, ?)", [j["id"], j["token"]]).fetchone()[0]
                    c.commit()
                    return {"id": j["id"], "payload": j["payload"], "acked": ok == 1}
                time.sleep(0.02)
            raise AgentError("nothing to claim")
        finally:
            c.close()


# ---- results ----
passed = failed = 0
failures = []


def check(label, fn):
    global passed, failed
    t0 = time.monotonic()
    try:
        fn()
        passed += 1
        print("ok   %-40s (%.2fs)" % (label, time.monotonic() - t0), flush=True)
    except Exception as e:  # noqa: BLE001 - every failure is reported and counted
        failed += 1
        failures.append(label)
        print("FAIL %-40s %s: %s" % (label, type(e).__name__, e), flush=True)


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def nested_list(depth, leaf):
    """Arrays nested `depth` deep around `leaf`."""
    v = leaf
    for _ in range(depth):
        v = [v]
    return v


def payloads(bigint):
    uni = "Grüße, 日本語, emoji 😀🎉, math 𝔘𝔫𝔦, clef 𝄞, \u2028 sep, quote \" back\\slash, tab\t nl\n"
    nested = {"s": uni, "list": [1, -2, 3.5, True, False, None, {"deep": [[[{"x": "𐍈"}]]]}],
              "empty": {}, "none": [], "n": rnd.randrange(1 << 31), "key 😀": "v"}
    # the same value as raw UTF-8 and as \uXXXX escapes (surrogate pairs)
    out = [("unicode+nested", nested, dumps), ("unicode-escaped", nested, json.dumps)]
    if bigint:
        out.append(("bigint", {"big": 2 ** 53 + 1, "min": -2 ** 63, "max": 2 ** 63 - 1, "list": [2 ** 53 + 3]}, dumps))
    else:  # Node: Numbers are doubles; the largest exact integers it carries
        out.append(("bigint(safe)", {"big": 2 ** 53 - 1, "min": -(2 ** 53 - 1)}, dumps))
    out.append(("nested-1000", nested_list(1000, "leaf 😀"), dumps))  # the core's nesting bound
    filler = MAX_PAYLOAD - 4096  # near the size limit, with room for re-serialisation
    out.append(("near-limit", {"blob": "x" * filler, "tail": "😀"}, dumps))
    return out


def pair_checks(P, C, tag):
    db = os.path.join(RUN, "pair-%s-%s.db" % (P.name, C.name))
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    P.call("open", db)
    C.call("open", db)
    C.call("worker_start", "tasks")
    pre = "%s->%s" % (P.name, C.name)
    bigint = caps[P.name]["bigint"] and caps[C.name]["bigint"]

    for kind, payload, enc in payloads(bigint):
        def job(payload=payload, enc=enc):
            meta = {"traceparent": "00-%032x-%016x-01" % (rnd.getrandbits(128), rnd.getrandbits(64)),
                    "who": P.name, "uni": "☃😀"}
            P.call("enqueue", "jobs", enc(payload), dumps(meta))
            r = C.call("claim_ack", "jobs")
            expect(r["payload"] == payload, "payload differs: %r" % (str(r["payload"])[:200],))
            expect(r["meta"] == meta, "meta differs: %r" % (r["meta"],))
            expect(r["acked"] is True, "not acked")
        check("%s job %s" % (pre, kind), job)

    def task():
        arg = {"n": rnd.randrange(1000), "s": "héllo 😀", "l": [1, {"a": None}]}
        jid = P.call("call", "tasks", "echo", dumps([arg]))["id"]
        if isinstance(C, ShellAgent):
            C.pump_tasks()
        r = P.call("result", jid)
        expect(r.get("value") == {"by": C.name, "echo": arg}, "result %r" % (r,))
        # (a NUL in the argument: where the worker's message holds it as a character, it is
        # dropped, the same in every runtime; the run is recorded)
        jid = P.call("call", "tasks", "boom", dumps(["bad\u0000 😀"]))["id"]
        if isinstance(C, ShellAgent):
            C.pump_tasks()
        r = P.call("result", jid)
        err = r.get("error")
        expect(err and err["type"] and "boom" in err["message"] and "bad" in err["message"]
               and "\x00" not in err["message"], "error %r" % (r,))
        # an argument nested as deep as the envelope allows ({"args": [arg]}: 1000 levels),
        # and the result holding it, read back by the producer
        arg = nested_list(998, "deep 😀")
        jid = P.call("call", "tasks", "echo", dumps([arg]))["id"]
        if isinstance(C, ShellAgent):
            C.pump_tasks()
        r = P.call("result", jid)
        expect(r.get("value") == {"by": C.name, "echo": arg}, "deep result %r" % (str(r)[:200],))
        if bigint:  # integers past 2^53 and at the int64 bounds, there and back
            arg = {"big": 2 ** 53 + 1, "min": -2 ** 63, "max": 2 ** 63 - 1, "l": [2 ** 64 + 1]}
            jid = P.call("call", "tasks", "echo", dumps([arg]))["id"]
            if isinstance(C, ShellAgent):
                C.pump_tasks()
            r = P.call("result", jid)
            expect(r.get("value") == {"by": C.name, "echo": arg}, "bigint result %r" % (r,))
    check("%s task echo+error" % pre, task)

    def stream():
        topic, consumer = "orders-" + tag, "billing-" + tag
        e = [{"i": i, "s": "é%d😀" % i} for i in range(4)]
        o1 = P.call("publish", topic, dumps(e[0]))["offset"]
        o2 = P.call("publish", topic, dumps(e[1]))["offset"]
        C.call("sub_start", topic, consumer)
        got = C.call("sub_next", 2)["events"]
        expect([(g["offset"], g["payload"]) for g in got] == [(o1, e[0]), (o2, e[1])], "replay %r" % (got,))
        C.send("sub_next", 1)  # following live: waiting when the event is published
        o3 = P.call("publish", topic, dumps(e[2]))["offset"]
        got = C.recv()["events"]
        expect([(g["offset"], g["payload"]) for g in got] == [(o3, e[2])], "live %r" % (got,))
        C.call("sub_stop")
        saved = P.call("offset", topic, consumer)["offset"]
        expect(saved == o3, "saved offset %r, want %r" % (saved, o3))
        o4 = P.call("publish", topic, dumps(e[3]))["offset"]
        C.call("sub_start", topic, consumer)  # resumes after the saved offset
        got = C.call("sub_next", 1)["events"]
        expect([(g["offset"], g["payload"]) for g in got] == [(o4, e[3])], "resume %r" % (got,))
        C.call("sub_stop")
    check("%s stream replay+live+offset" % pre, stream)

    def notify():
        ch = "chan-" + tag
        C.call("listen_start", ch)
        payload = {"hello": "wörld 😀", "n": rnd.randrange(1 << 20)}
        C.send("listen_next")
        P.call("notify", ch, dumps(payload))
        got = C.recv()["payload"]
        C.call("listen_stop")
        expect(got == payload, "heard %r" % (got,))
    check("%s notify->listen" % pre, notify)

    def lock():
        name = "lock-" + tag
        t1 = P.call("lock_try", name, "p-" + P.name, 400)["token"]
        expect(t1 > 0, "producer did not get the lock")
        t = C.call("lock_try", name, "c-" + C.name, 30000)["token"]
        expect(t == 0, "consumer got a held lock (token %r)" % t)
        t2 = C.call("lock_wait", name, "c-" + C.name, 30000)["token"]  # until the lease lapses
        expect(t2 > t1, "token after expiry %r, first %r" % (t2, t1))
        expect(P.call("lock_renew", name, "p-" + P.name)["res"] is False, "the stale holder renewed")
        expect(P.call("lock_release", name, "p-" + P.name)["res"] is False, "the stale holder released")
        expect(C.call("lock_release", name, "c-" + C.name)["res"] is True, "the holder could not release")
    check("%s lock block+fence" % pre, lock)

    def schedule():
        name = "sched-" + tag
        payload = {"fired": "by schedule 😀", "tag": tag}
        P.call("schedule", name, "@every 1s", "sched", dumps(payload))
        r = C.call("claim_ack", "sched")  # the consumer's worker leads the scheduler and fires it
        P.call("unschedule", name)
        expect(r["payload"] == payload, "fired payload %r" % (r["payload"],))
    check("%s schedule fires in worker" % pre, schedule)

    C.call("worker_stop")
    C.call("close")
    P.call("close")


def sql_checks(workers, drivers):
    db = os.path.join(RUN, "sql.db")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    done_rollback = set()
    for W in workers:
        W.call("open", db)
        W.call("worker_start", "tasks-" + W.name)
        for D in drivers:
            def forward(D=D, W=W):
                arg = {"order": rnd.randrange(1 << 20), "s": "ünï 😀"}
                r = D.call("sql_call", db, "tasks-" + W.name, "echo", dumps([arg]), "commit")
                expect(r["rows"] == 1, "business row missing")
                res = D.call("sql_result", db, r["id"])["result"]
                expect(res["status"] == "ok" and res["value"] == {"by": W.name, "echo": arg}, "result %r" % (res,))
            check("%s tx -> %s worker, result" % (D.name, W.name), forward)
            if D.name not in done_rollback:
                done_rollback.add(D.name)

                def rollback(D=D, W=W):
                    r = D.call("sql_call", db, "tasks-" + W.name, "echo", dumps(["never"]), "rollback")
                    expect(r["rows"] == 0, "business row survived the rollback")
                    expect(r["job"] is None, "job survived the rollback: %r" % (r["job"],))
                check("%s rolled-back tx leaves no job" % D.name, rollback)

            def reverse(D=D, W=W):
                payload = {"from": W.name, "to": D.name, "s": "😀"}
                queue = "jobs-" + D.name.replace("/", "-")
                jid = W.call("enqueue", queue, dumps(payload), dumps({"m": 1}))["id"]
                r = D.call("sql_claim_ack", db, queue, jid)
                expect(r["id"] == jid and r["payload"] == payload and r["acked"], "claimed %r" % (r,))
                st = W.call("job", jid)["state"]
                expect(st is None, "the binding still sees job %d as %r" % (jid, st))
            check("%s enqueue -> %s claim+ack" % (W.name, D.name), reverse)
        W.call("worker_stop")
        W.call("close")


def spawn(names):
    os.makedirs(RUN, exist_ok=True)
    py = os.path.join(IOP, "venv", "bin", "python")
    shutil.copy(os.path.join(HERE, "node", "agent.js"), os.path.join(IOP, "npm", "agent.js"))
    genv = dict(os.environ, GEM_HOME=os.path.join(IOP, "gems"), GEM_PATH=os.path.join(IOP, "gems"))
    genv.pop("RUBYLIB", None)
    make = {
        "python": lambda: Agent("python", [py, os.path.join(HERE, "agent.py")], cwd=RUN),
        "node": lambda: Agent("node", ["node", os.path.join(IOP, "npm", "agent.js")], cwd=RUN),
        "ruby": lambda: Agent("ruby", ["ruby", os.path.join(HERE, "ruby", "agent.rb")], env=genv, cwd=RUN),
        "go": lambda: Agent("go", [os.path.join(IOP, "go", "agent")], cwd=RUN),
        "c": lambda: Agent("c", [os.path.join(IOP, "c", "agent")], cwd=RUN),
        "sqlite3": lambda: ShellAgent(os.path.join(C_PREFIX, "lib", "tocsin", "tocsin")),
    }
    return {n: make[n]() for n in names}


def provenance(agents):
    """Every agent must run from its install under build/interop, never the checkout."""
    checkout = [os.path.join(ROOT, "bindings"), os.path.join(ROOT, "core")]
    for name, a in agents.items():
        def hello(a=a, name=name):
            h = a.call("hello")
            caps[name] = h
            paths = [v for k, v in h.items() if k in ("module", "loadable", "native", "betterSqlite3", "sqlite3_gem")
                     and v]
            print("     %-8s %s %s: %s" % (name, h.get("runtime"), h.get("version"), h.get("module")), flush=True)
            expect(h.get("module"), "no module path reported")
            for key in ("module", "loadable", "native", "betterSqlite3"):
                v = h.get(key)
                if v:
                    v = os.path.realpath(v)
                    expect(v.startswith(os.path.realpath(IOP) + os.sep), "%s %s is not under %s" % (key, v, IOP))
            for p in paths:
                expect(not any(os.path.realpath(p).startswith(c) for c in checkout), "%s loads %s" % (name, p))
        check("%s runs from its clean install" % name, hello)


caps = {}


def main():
    t0 = time.monotonic()
    only = [s for s in os.environ.get("PAIR", "").split(",") if s]
    for s in only:
        if s not in RUNTIMES:
            sys.exit("PAIR: unknown runtime %r (one of %s)" % (s, ", ".join(RUNTIMES)))
    agents = spawn(only or RUNTIMES)
    try:
        provenance(agents)
        if failed:
            raise SystemExit(1)
        names = only or RUNTIMES
        for i, p in enumerate(names):
            for c in names:
                if p == c and len(names) > 1:
                    continue
                pair_checks(agents[p], agents[c], "%s-%s-%d" % (p, c, rnd.randrange(1 << 20)))
        drivers = [PyDriver("sqlite3-stdlib"), PyDriver("sqlalchemy")]
        for name, label in (("node", "better-sqlite3"), ("ruby", "sqlite3-gem"), ("go", "database/sql")):
            if not only or name in only:
                d = agents[name]
                drivers.append(type("D", (), {"name": label, "call": staticmethod(d.call)})())
        workers = [agents[n] for n in ("python", "node", "ruby", "go", "c") if not only or n in only]
        sql_checks(workers, drivers)
    finally:
        for a in agents.values():
            a.stop()
    total = passed + failed
    print("interop: %d checks, %d passed, %d failed in %.1fs (SEED=%d)"
          % (total, passed, failed, time.monotonic() - t0, seed), flush=True)
    if failures:
        print("interop: failed: " + "; ".join(failures))
    if failed or total == 0:
        sys.exit(1)


if __name__ == "__main__":
    main()
