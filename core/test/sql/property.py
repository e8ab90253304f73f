#!/usr/bin/python3
"""Property test of the SQL surface (docs/sql.md), through the loadable extension.

Drives the tocsin_* SQL functions from Python's standard sqlite3 module (Debian's
python3 allows extension loading) with random calls against a model of the queue,
with light models of notifications, streams and locks:

- valid calls must return what the model says (ids, claim order priority DESC /
  run_at / id, lease results and fencing, stats counts, dead letters, offsets,
  lock tokens ...);
- hostile calls (one argument, or one value inside an options object, replaced by
  a value docs/sql.md refuses: NULL, blobs, NUL characters, invalid UTF-8,
  oversized text, integers out of range or beyond int64, reals, inf, wrong JSON,
  arrays as options ...) must fail with an error that names the function and the
  argument, and leave every _tocsin_* table exactly as it was;
- some steps run inside BEGIN ... ROLLBACK (all gone) or BEGIN ... COMMIT.

Before the random phase, deterministic sweeps cover each class for every function:
every text argument with a NUL, every integer argument with every out-of-range
value, every options object with every non-object, and every function inside a
writing statement. Time is driven by tocsin_clock(ms); nothing sleeps.

Usage: property.py path/to/tocsin.so [steps]   (SEED=n to replay a run)
"""
import copy
import json
import os
import random
import sqlite3
import sys
import tempfile
import time

MAX_TIME = 253402300799999
I64_MIN, I64_MAX = -2 ** 63, 2 ** 63 - 1
MAX_BATCH = 10000
MAX_ATTEMPTS = 1000000
MAX_CATCH_UP = 100000
LOCK_MAX_TTL = 366 * 86400 * 1000
MAX_PAYLOAD = 1 << 20
BACKOFF_BASE, BACKOFF_CAP = 1000, 3600000
T0 = 1_700_000_000_000

passed = failed = 0
shown = 0
context = ""



def tadd(t, d):
    """now + a duration, saturating at MAX_TIME as the core does."""
    return min(t + d, MAX_TIME)

def check(cond, what, *detail):
    global passed, failed, shown
    if cond:
        passed += 1
        return True
    failed += 1
    if shown < int(os.environ.get("SHOW_FAILURES", "25")):
        shown += 1
        print("FAIL [%s] %s" % (context, what))
        for d in detail:
            print("   ", d if len(str(d)) < 2000 else str(d)[:2000] + "...")
    return False


# ---- calling ------------------------------------------------------------------

def V(x):
    """An argument bound as a parameter."""
    return ("v", x)


def E(sql):
    """An argument written as an SQL expression (for values Python cannot bind)."""
    return ("e", sql)


def sql_of(fn, args):
    return "SELECT %s(%s)" % (fn, ", ".join("?" if a[0] == "v" else a[1] for a in args))


def call(conn, fn, args):
    """(True, value) or (False, message)."""
    params = [a[1] for a in args if a[0] == "v"]
    try:
        return True, conn.execute(sql_of(fn, args), params).fetchone()[0]
    except sqlite3.Error as e:
        return False, str(e)
    except UnicodeDecodeError as e:  # a result that is not UTF-8: never right
        return True, "<result not UTF-8: %s>" % e


def show(args):
    out = []
    for kind, v in args:
        if kind == "e":
            out.append(v)
        elif isinstance(v, str) and len(v) > 80:
            out.append(repr(v[:60]) + "...(%d chars)" % len(v))
        elif isinstance(v, bytes) and len(v) > 80:
            out.append("blob(%d)" % len(v))
        else:
            out.append(repr(v))
    return "(" + ", ".join(out) + ")"


def tables(conn):
    return [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '\\_tocsin\\_%' ESCAPE '\\'"
        " ORDER BY name")]


def dump(conn):
    """Every _tocsin_* row (and their AUTOINCREMENT counters)."""
    d = {}
    names = tables(conn)
    conn.text_factory = bytes  # raw bytes: a stored text that is not UTF-8 still compares
    try:
        for t in names:
            d[t] = sorted(conn.execute("SELECT * FROM %s" % t).fetchall(), key=repr)
        d["sqlite_sequence"] = sorted(conn.execute(
            "SELECT * FROM sqlite_sequence WHERE name LIKE '\\_tocsin\\_%' ESCAPE '\\'").fetchall())
    finally:
        conn.text_factory = str
    return d


# ---- the model ----------------------------------------------------------------

class Model:
    def __init__(self):
        self.now = T0
        self.jobs = {}      # id -> dict (live: pending/processing; dead: state 'dead')
        self.seq = 0        # the last job id handed out
        self.tokens = set() # every fencing token a claim handed out
        self.paused = set()
        self.notes = []     # (id, channel, payload)
        self.note_seq = 0
        self.events = []    # (offset, topic, key, payload)
        self.event_seq = 0
        self.offsets = {}   # (consumer, topic) -> position
        self.locks = {}     # name -> {"owner", "token", "until"}

    def live(self, q=None):
        return [j for j in self.jobs.values() if j["state"] != "dead" and (q is None or j["queue"] == q)]

    def dead(self, q=None):
        return [j for j in self.jobs.values() if j["state"] == "dead" and (q is None or j["queue"] == q)]

    def to_dead(self, j, reason, error=None):
        j["state"] = "dead"
        j["reason"] = reason
        if error is not None:
            j["last_error"] = error
        j["lease_until"] = None
        j["died_at"] = self.now

    def lock_free(self, name):
        l = self.locks.get(name)
        return l is None or l["owner"] is None or l["until"] <= self.now


def state_class(state):
    """The model knows three states: held ("processing"), dead, and waiting for a claim
    ("pending": whatever name the core gives a live job that is not held)."""
    return state if state in ("processing", "dead") else "pending"


def job_from_json(j):
    return {"id": j["id"], "queue": j["queue"], "state": state_class(j["state"]), "payload": j["payload"],
            "meta": j["meta"], "priority": j["priority"], "attempts": j["attempts"],
            "max_attempts": j["max_attempts"], "token": j["token"], "run_at": j["run_at"],
            "lease_until": j["lease_until"], "expires_at": j["expires_at"],
            "unique_key": j["unique_key"], "worker": j["worker"], "last_error": j["last_error"],
            "reason": j.get("reason"), "died_at": j.get("died_at")}


COMPARED = ("queue", "state", "payload", "meta", "priority", "attempts", "max_attempts", "run_at",
            "lease_until", "expires_at", "unique_key", "worker", "last_error", "reason")


def same_job(m, j):
    """The fields a user relies on; the token when the job is held."""
    diffs = [k for k in COMPARED if m.get(k) != j.get(k)]
    if m["state"] == "processing" and m.get("token") != j["token"]:
        diffs.append("token")
    return diffs


# ---- value generators ---------------------------------------------------------

QUEUES = ["a", "b", "émoji-😀"]
WORKERS = ["w1", "w2"]
CHANNELS = ["ch", "ch2"]
TOPICS = ["t1", "t2"]
CONSUMERS = ["c1", "c2"]
LOCKS = ["L1", "L2"]
OWNERS = ["o1", "o2"]
KEYS = ["k1", "k2", "ключ"]


def rand_json(rng, depth=0):
    r = rng.random()
    if depth > 2 or r < 0.35:
        return rng.choice([0, 1, -7, 2 ** 70, 3.25, 1e-7, True, False, None, "", "x", "é😀",
                           "a\x00b", "tab\t\"q\"\\", "\U0001F600", "日本"])
    if r < 0.6:
        return [rand_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["a", "b", "ü", "k\x01", ""]): rand_json(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def dumps(rng, v):
    if rng.random() < 0.3:
        return json.dumps(v, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 1]))
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def rand_text(rng):
    return rng.choice(["", "boom", "ошибка 😀", "line\nbreak\ttab", "x" * rng.randint(0, 300)])


def bad_names(required=True):
    out = [V(b"q"), V(""), V("x" * 256), V("q\x00x"), E("'q' || char(0)"), E("CAST(x'ff' AS TEXT)"),
           E("CAST(x'71c328' AS TEXT)"), V("a\nb"), V("a\x7fb"), E("zeroblob(3)")]
    if required:
        out += [V(None)]
    return out


def bad_json_text():
    return [V(None), V(b"{}"), V("{"), V("'x'"), V(""), V(" "), V("NaN"), V("[1,]"), V("{\"a\":1} x"),
            V('{"a":1}\x00junk'), E("'[1]' || char(0)"), E("CAST(x'22ff22' AS TEXT)"),
            V('"' + "x" * MAX_PAYLOAD + '"'), V(float("inf")), V("{'a':1}"), V("01")]


def bad_meta():
    return [V("[1]"), V("1"), V('"x"'), V("{"), V(b"{}"), V('{"a":1}\x00'),
            E("CAST(x'7b2261223a22ff227d' AS TEXT)"), V("null")]


def bad_text():
    return [V(b"x"), V("a\x00b"), E("CAST(x'ff' AS TEXT)"), E("'ok' || char(0) || 'tail'")]


def bad_ints(lo, hi, required=True):
    out = [V("5"), V(b"\x05"), V(1.5), V(-0.5), V(1e300), V(-1e300), V(float("inf")), V(float("-inf")),
           V(9.3e18), V(-9.3e18), E("9223372036854775808"), E("-9223372036854777856"), V("")]
    if required:
        out += [V(None), V(float("nan"))]
    if lo > I64_MIN:
        out.append(V(lo - 1))
        if lo - 1 > -2 ** 53:
            out.append(V(float(lo - 1)))
    if hi < I64_MAX:
        out.append(V(hi + 1))
    return out


# Options objects: key -> (kind, lo, hi)
ENQUEUE_KEYS = {"priority": ("int", I64_MIN, I64_MAX), "delay_ms": ("int", 0, MAX_TIME),
                "run_at_ms": ("int", 0, MAX_TIME), "max_attempts": ("int", 1, MAX_ATTEMPTS),
                "expires_ms": ("int", 0, MAX_TIME), "unique_key": ("text",), "meta": ("object",)}
TRIM_KEYS = {"max_age_ms": ("int", 0, MAX_TIME), "max_count": ("int", 0, I64_MAX),
             "below_consumers": ("bool",)}
SCHEDULE_KEYS = {"priority": ("int", I64_MIN, I64_MAX), "max_attempts": ("int", 1, MAX_ATTEMPTS),
                 "job_expires_ms": ("int", 0, MAX_TIME), "catch_up": ("catch_up",),
                 "max_catch_up": ("int", 1, MAX_CATCH_UP), "local_time": ("bool",),
                 "meta": ("object",)}


def bad_opt_values(spec):
    kind = spec[0]
    if kind == "int":
        lo, hi = spec[1], spec[2]
        out = ['"5"', "1.5", "1e400", "-1e400", "99999999999999999999", "-99999999999999999999",
               "true", "[1]", "{}", "1e-3"]
        if lo > I64_MIN:
            out.append(str(lo - 1))
        if hi < I64_MAX:
            out += [str(hi + 1), "%d.0" % (hi + 1), "%de0" % (hi + 1)]
        return out
    if kind == "bool":
        return ["1", "0", '"true"', "[]"]
    if kind in ("text", "catch_up"):
        out = ["1", "true", '"a\\u0000b"', '"\\ud800"', '"\\udc00x"', "[]", "{}"]
        if kind == "catch_up":
            out += ['"sometimes"', '""']
        else:
            out += ['""', '"%s"' % ("k" * 1025)]
        return out
    if kind == "object":
        return ["[1]", "1", '"x"', "true"]
    raise AssertionError(kind)


def bad_options(rng, keys, valid_text, required=False):
    """An invalid options argument: not an object, or one bad key/value inside a valid one."""
    r = rng.random()
    if r < 0.3:
        out = [V("[]"), V("[1]"), V('[{"priority":1}]'), V('"x"'), V("1"), V("null"), V("true"),
               V(""), V("{"), V('{"a":1'), V(b"{}"), V("{} {}"), E("CAST(x'7bff7d' AS TEXT)"),
               E("'{}' || char(0)"), V(3), V(1.5)]
        if required:
            out.append(V(None))
        return rng.choice(out), "options"
    base = json.loads(valid_text) if valid_text else {}
    if r < 0.4:
        base["bogus_key"] = 1
        return V(json.dumps(base)), "bogus_key"
    if r < 0.45:
        k = rng.choice(sorted(keys))
        return V('{"%s":null,"%s":null}' % (k, k)), k
    if r < 0.5:
        k = rng.choice(sorted(keys))
        return V('{"%s\\u0000x":1}' % k), "options"
    k = rng.choice(sorted(keys))
    bad = rng.choice(bad_opt_values(keys[k]))
    base.pop(k, None)
    text = json.dumps(base)
    text = ("{" + '"%s":%s' % (k, bad) + ("," + text[1:] if len(text) > 2 else "}"))
    return V(text), k


# ---- the SQL functions, with their arguments ----------------------------------
#
# Each op has argument specs (name, kind, required, range) for hostile calls, a
# generator of valid arguments from the model, and a checker that compares the
# result with the model and applies the call to it.

class Op:
    def __init__(self, name, args, gen, apply, weight=1, writes=True):
        self.name, self.args, self.gen, self.apply = name, args, gen, apply
        self.weight, self.writes = weight, writes


def arg_names(a):
    """What an error about argument spec `a` may call it."""
    aliases = {"queue": ["queue"], "worker_id": ["worker_id", "worker id"], "name": ["name"],
               "owner": ["owner"], "channel": ["channel"], "topic": ["topic"],
               "consumer": ["consumer"], "job_id": ["job_id"], "token": ["token"]}
    return aliases.get(a[0], [a[0]])


def pick_job(m, rng, states=None):
    js = [j for j in m.jobs.values() if states is None or j["state"] in states]
    if js and rng.random() < 0.9:
        return rng.choice(js)
    return None


def gen_enqueue_opts(m, rng):
    o = {}
    if rng.random() < 0.5:
        o["priority"] = rng.choice([0, 1, 2, -1, 5, 2 ** 62, -2 ** 62, I64_MAX, I64_MIN])
    r = rng.random()
    if r < 0.3:
        o["delay_ms"] = rng.choice([0, 1, 500, 3000])
    elif r < 0.45:
        o["run_at_ms"] = rng.choice([0, m.now - 1000, m.now + 2000, MAX_TIME])
    if rng.random() < 0.4:
        o["max_attempts"] = rng.choice([1, 2, 3])
    if rng.random() < 0.15:
        o["expires_ms"] = rng.choice([0, 1000, 5000])
    if rng.random() < 0.3:
        o["unique_key"] = rng.choice(KEYS)
    if rng.random() < 0.2:
        o["meta"] = {"trace": rng.choice(["t1", "ü", "a\x00"])}
    if rng.random() < 0.1:
        o[rng.choice(sorted(ENQUEUE_KEYS))] = None  # null: the default
    return o


def enqueue_model(m, q, payload, o, got):
    """Applies one enqueue to the model. Returns whether `got` is a right id: the
    live holder of the unique key, else a new id above every id handed out before
    (ids are never reused; a deduplicated insert may use up a number: ids can have gaps)."""
    uk = o.get("unique_key")
    if uk is not None:
        for j in m.live(q):
            if j["unique_key"] == uk:
                if j["state"] != "processing" and j["expires_at"] is not None and j["expires_at"] <= m.now:
                    # expired unclaimed: it holds the key no more; the queue's expired jobs
                    # die as a claim would move them, and the new job is written
                    for k in m.live(q):
                        if k["state"] != "processing" and k["expires_at"] is not None and k["expires_at"] <= m.now:
                            m.to_dead(k, "expired")
                    break
                return got == j["id"]
    if not isinstance(got, int) or got <= m.seq:
        return False
    m.seq = got
    run_at = o.get("run_at_ms") or tadd(m.now, o.get("delay_ms") or 0)
    m.jobs[got] = {"id": got, "queue": q, "state": "pending", "payload": payload,
                     "meta": o.get("meta"), "priority": o.get("priority") or 0, "attempts": 0,
                     "max_attempts": o.get("max_attempts") or 3, "token": None, "run_at": run_at,
                     "lease_until": None,
                     "expires_at": tadd(m.now, o["expires_ms"]) if o.get("expires_ms") else None,
                     "unique_key": uk, "worker": None, "last_error": None, "reason": None,
                     "died_at": None}
    return True


def op_enqueue():
    def gen(m, rng):
        q = rng.choice(QUEUES)
        p = rand_json(rng)
        o = gen_enqueue_opts(m, rng)
        args = [V(q), V(dumps(rng, p))]
        if o or rng.random() < 0.5:
            args.append(V(json.dumps(o, ensure_ascii=rng.random() < 0.5)) if o or rng.random() < 0.5 else V(None))
        return args, (q, p, {k: v for k, v in o.items() if v is not None})

    def apply(m, st, ok, res):
        q, p, o = st
        return check(ok and enqueue_model(m, q, p, o, res), "enqueue returns the right id",
                     (m.seq, ok, res))

    return Op("tocsin_enqueue", [("queue", "name", True), ("payload", "payload", True),
                                 ("options", "opts", False, ENQUEUE_KEYS)], gen, apply, weight=6)


def op_enqueue_many():
    def gen(m, rng):
        specs = []
        for _ in range(rng.randint(0, 4)):
            q = rng.choice(QUEUES)
            p = rand_json(rng)
            o = gen_enqueue_opts(m, rng)
            specs.append((q, p, {k: v for k, v in o.items() if v is not None}, o))
        jobs = []
        for q, p, _, o in specs:
            d = dict(o)
            d["queue"], d["payload"] = q, p
            jobs.append(d)
        return [V(json.dumps(jobs))], specs

    def apply(m, st, ok, res):
        if not check(ok, "enqueue_many succeeds", res):
            return False
        ids = json.loads(res)
        return check(len(ids) == len(st) and all(enqueue_model(m, q, p, o, i) for (q, p, o, _), i in zip(st, ids)),
                     "enqueue_many returns the right ids", (m.seq, res))

    return Op("tocsin_enqueue_many", [("jobs", "jobs", True)], gen, apply, weight=2)


def claim_model(m, q, n, vis):
    """The claim's effect on the model; returns the jobs it hands out, in order."""
    lapsed = [j for j in m.live(q) if j["state"] == "processing" and j["lease_until"] <= m.now]
    expired_flag = any(j["state"] == "pending" and j["expires_at"] is not None and j["expires_at"] <= m.now
                       for j in m.live(q))
    for j in lapsed:
        if j["attempts"] >= j["max_attempts"]:
            m.to_dead(j, "max_attempts", j["last_error"] if j["last_error"] is not None else "lease expired")
        else:
            j.update(state="pending", lease_until=None, last_error="lease expired")
    # a lease taken back past the job's expiry: that claim expires it too (docs/sql.md)
    if expired_flag or lapsed:
        for j in m.live(q):
            if j["state"] == "pending" and j["expires_at"] is not None and j["expires_at"] <= m.now:
                m.to_dead(j, "expired")
    if q in m.paused:
        return []
    due = sorted((j for j in m.live(q) if j["state"] == "pending" and j["run_at"] <= m.now),
                 key=lambda j: (-j["priority"], j["run_at"], j["id"]))[:n]
    for j in due:
        j.update(state="processing", attempts=j["attempts"] + 1, lease_until=tadd(m.now, vis))
    return due


def op_claim():
    def gen(m, rng):
        q = rng.choice(QUEUES)
        w = rng.choice(WORKERS)
        n = rng.choice([1, 1, 2, 3, 10, MAX_BATCH])
        vis = rng.choice([1, 100, 1000, 5000, MAX_TIME])
        return [V(q), V(w), V(n if rng.random() < 0.8 else float(n)), V(vis)], (q, w, n, vis)

    def apply(m, st, ok, res):
        q, w, n, vis = st
        if not check(ok, "claim succeeds", res):
            return False
        got = json.loads(res)
        due = claim_model(m, q, n, vis)
        if not check([j["id"] for j in due] == [j["id"] for j in got],
                     "claim hands out the model's jobs in claim order",
                     [j["id"] for j in due], [j["id"] for j in got]):
            return False
        for j in got:
            mj = m.jobs[j["id"]]
            check(j["token"] not in m.tokens, "a claim's token was never handed out before",
                  j["id"], j["token"])
            m.tokens.add(j["token"])
            mj["token"], mj["worker"] = j["token"], w
            diffs = same_job(mj, job_from_json(j))
            check(not diffs, "claimed job matches the model", diffs, mj, j)
        return True

    return Op("tocsin_claim", [("queue", "name", True), ("worker_id", "name", True),
                               ("n", "int", True, 1, MAX_BATCH), ("visibility_ms", "int", True, 1, MAX_TIME)],
              gen, apply, weight=5)


def lease_args(m, rng):
    """(job id, token): mostly a held lease, else stale or foreign tokens and unknown ids."""
    held = [j for j in m.jobs.values() if j["state"] == "processing"]
    others = [j for j in m.jobs.values() if j.get("token") is not None]
    r = rng.random()
    if held and r < 0.6:
        j = rng.choice(held)
        return j["id"], j["token"]
    if others and r < 0.85:
        j, k = rng.choice(others), rng.choice(others)
        return j["id"], rng.choice([k["token"], (j["token"] or 0) - 1, (j["token"] or 0) + 1])
    return rng.choice([0, -1, m.seq + 1, I64_MAX, I64_MIN, 1]), rng.choice([0, 1, 2, I64_MAX, -1])


def held(m, jid, token):
    j = m.jobs.get(jid)
    return j is not None and j["state"] == "processing" and j["token"] == token


def lapsed(m, jid):
    j = m.jobs.get(jid)
    return j is not None and j["state"] == "processing" and j["lease_until"] <= m.now


class Resync(Exception):
    """The model cannot tell which of two documented outcomes happened: read the job back."""


def lease_op(name, extra_args, gen_extra, effect):
    def gen(m, rng):
        jid, token = lease_args(m, rng)
        extra, st = gen_extra(m, rng)
        return [V(jid), V(token)] + extra, (jid, token, st)

    def apply(m, st, ok, res):
        jid, token, extra = st
        want = 1 if held(m, jid, token) else 0
        if want and lapsed(m, jid):
            # lapsed, nobody reclaimed: docs/sql.md lets it succeed; a stricter core may refuse
            if ok and res in (0, 1):
                raise Resync(jid)
        if not check(ok and res == want, "%s: lease result matches the model" % name, (jid, token, want, ok, res)):
            return False
        if want:
            return effect(m, m.jobs[jid], extra)
        return True

    return Op(name, [("job_id", "int", True, I64_MIN, I64_MAX), ("token", "int", True, I64_MIN, I64_MAX)]
              + extra_args, gen, apply, weight=3)


def ack_effect(m, j, extra):
    del m.jobs[j["id"]]
    return True


def retry_gen(m, rng):
    delay = rng.choice([None, 0, 10, 2000])
    err = rng.choice([None, rand_text(rng)])
    args = []
    if delay is not None or err is not None or rng.random() < 0.5:
        args.append(V(delay))
        if err is not None or rng.random() < 0.5:
            args.append(V(err))
    return args, (delay, err)


def retry_effect(m, j, extra):
    delay, err = extra
    if j["attempts"] >= j["max_attempts"]:
        m.to_dead(j, "max_attempts", err)
        return True
    if delay is None:
        d = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (j["attempts"] - 1))
        raise Resync((j["id"], m.now + d - d // 2, m.now + d))
    j.update(state="pending", run_at=tadd(m.now, delay), lease_until=None, last_error=err)
    return True


def fail_gen(m, rng):
    err = rng.choice([None, rand_text(rng)])
    return ([V(err)] if err is not None or rng.random() < 0.5 else []), err


def fail_effect(m, j, err):
    m.to_dead(j, "failed", err)
    return True


def heartbeat_gen(m, rng):
    ext = rng.choice([1, 1000, 60000, MAX_TIME])
    return [V(ext)], ext


def heartbeat_effect(m, j, ext):
    j["lease_until"] = tadd(m.now, ext)
    return True


def op_cancel():
    def gen(m, rng):
        j = pick_job(m, rng)
        jid = j["id"] if j else rng.choice([0, m.seq + 5, -3])
        return [V(jid)], jid

    def apply(m, jid, ok, res):
        j = m.jobs.get(jid)
        want = 1 if j and j["state"] != "dead" else 0
        if not check(ok and res == want, "cancel result", (jid, want, ok, res)):
            return False
        if want:
            m.to_dead(j, "cancelled")
        return True

    return Op("tocsin_cancel", [("job_id", "int", True, I64_MIN, I64_MAX)], gen, apply, weight=1)


def op_job():
    def gen(m, rng):
        j = pick_job(m, rng)
        jid = j["id"] if j else rng.choice([0, m.seq + 1, I64_MAX, I64_MIN])
        return [V(jid)], jid

    def apply(m, jid, ok, res):
        if not check(ok, "job succeeds", res):
            return False
        j = m.jobs.get(jid)
        if j is None:
            return check(res is None, "an unknown id gives NULL", (jid, res))
        if not check(res is not None, "a known job is found", jid):
            return False
        diffs = same_job(j, job_from_json(json.loads(res)))
        return check(not diffs, "tocsin_job matches the model", diffs, j, res)

    return Op("tocsin_job", [("job_id", "int", True, I64_MIN, I64_MAX)], gen, apply, weight=2, writes=False)


def model_stats(m, q):
    live = m.live(q)
    due = [j["run_at"] for j in live if j["state"] == "pending" and j["run_at"] <= m.now]
    return {"queue": q, "pending": len(due),
            "scheduled": sum(1 for j in live if j["state"] == "pending" and j["run_at"] > m.now),
            "processing": sum(1 for j in live if j["state"] == "processing"),
            "dead": len(m.dead(q)), "oldest_pending_age_ms": m.now - min(due) if due else 0,
            "paused": q in m.paused}


def op_stats():
    def gen(m, rng):
        q = rng.choice(QUEUES)
        return [V(q)], q

    def apply(m, q, ok, res):
        if not check(ok, "stats succeeds", res):
            return False
        got = json.loads(res)
        want = model_stats(m, q)
        return check(all(got.get(k) == v for k, v in want.items()), "stats match the model", want, got)

    return Op("tocsin_stats", [("queue", "name", False)], gen, apply, weight=2, writes=False)


def op_next_deadline():
    def gen(m, rng):
        qs = rng.sample(QUEUES, rng.randint(1, len(QUEUES)))
        return [V(q) for q in qs], qs

    def apply(m, qs, ok, res):
        cands = []
        for q in qs:
            for j in m.live(q):
                if j["state"] == "processing":
                    cands.append(j["lease_until"])
                elif q not in m.paused:
                    # claimable now when due (docs/sql.md: "now if one already is")
                    cands.append(max(j["run_at"], m.now))
                    if j["expires_at"] is not None:
                        cands.append(j["expires_at"])
        want = min(cands) if cands else None
        return check(ok and res == want, "next_deadline matches the model", (qs, want, ok, res))

    return Op("tocsin_next_deadline", [("queue", "name", True)], gen, apply, weight=1, writes=False)


def op_pause(resume):
    def gen(m, rng):
        q = rng.choice(QUEUES)
        return [V(q)], q

    def apply(m, q, ok, res):
        if not check(ok and res == 1, "pause/resume returns 1", (ok, res)):
            return False
        (m.paused.discard if resume else m.paused.add)(q)
        return True

    return Op("tocsin_resume" if resume else "tocsin_pause", [("queue", "name", True)], gen, apply, weight=1)


def op_dead_requeue():
    def gen(m, rng):
        j = pick_job(m, rng, ("dead",)) or pick_job(m, rng)
        jid = j["id"] if j else rng.choice([0, m.seq + 1])
        return [V(jid)], jid

    def apply(m, jid, ok, res):
        j = m.jobs.get(jid)
        if not j or j["state"] != "dead":
            return check(ok and res == 0, "requeue of a job that is not dead gives 0", (jid, ok, res))
        # a fresh budget on top of the claims it had: tokens never repeat; a job
        # that spent every claim has no token left and is refused
        a, mx = j["attempts"], j["max_attempts"]
        if a >= MAX_ATTEMPTS:
            return check(not ok and "spent all" in res, "requeue refused: every claim spent", (ok, res))
        clash = j["unique_key"] is not None and any(
            k["unique_key"] == j["unique_key"] for k in m.live(j["queue"]))
        if clash:
            return check(not ok and "unique_key" in res, "requeue refused: a live job holds the key", (ok, res))
        attempts, max_attempts = a, min(MAX_ATTEMPTS, a + mx)
        if not check(ok and res == 1, "requeue of a dead job gives 1", (jid, ok, res)):
            return False
        j.update(state="pending", attempts=attempts, max_attempts=max_attempts, run_at=m.now,
                 expires_at=None, lease_until=None, worker=None, last_error=None, reason=None,
                 died_at=None, token=None)
        return True

    return Op("tocsin_dead_requeue", [("job_id", "int", True, I64_MIN, I64_MAX)], gen, apply, weight=1)


def op_dead_list():
    def gen(m, rng):
        q = rng.choice(QUEUES + [None])
        after = rng.choice([0, -5, m.seq // 2, I64_MAX])
        limit = rng.choice([1, 2, 100, MAX_BATCH])
        return [V(q), V(after), V(limit)], (q, after, limit)

    def apply(m, st, ok, res):
        q, after, limit = st
        want = sorted(j["id"] for j in m.dead(q) if j["id"] > after)[:limit]
        return check(ok and [j["id"] for j in json.loads(res)] == want, "dead_list matches the model",
                     (st, want, ok, res))

    return Op("tocsin_dead_list", [("queue", "name", False), ("after_id", "int", False, I64_MIN, I64_MAX),
                                   ("limit", "int", False, 1, MAX_BATCH)], gen, apply, weight=1, writes=False)


def op_dead_purge():
    def gen(m, rng):
        q = rng.choice(QUEUES + [None])
        before = rng.choice([m.now - 2000, m.now + 1, 1])
        return [V(q), V(before)], (q, before)

    def apply(m, st, ok, res):
        q, before = st
        gone = [j for j in m.dead(q) if j["died_at"] < before]
        if not check(ok and res == len(gone), "dead_purge count", (st, len(gone), ok, res)):
            return False
        for j in gone:
            del m.jobs[j["id"]]
        return True

    return Op("tocsin_dead_purge", [("queue", "name", False), ("before_ms", "int", False, 0, MAX_TIME)],
              gen, apply, weight=0.3)


def op_notify():
    def gen(m, rng):
        ch = rng.choice(CHANNELS)
        p = rand_json(rng)
        meta = rng.choice([None, {"from": "sql"}])
        args = [V(ch), V(dumps(rng, p))] + ([V(json.dumps(meta))] if meta else [])
        return args, (ch, p)

    def apply(m, st, ok, res):
        m.note_seq += 1
        m.notes.append((m.note_seq, st[0], st[1]))
        return check(ok and res == m.note_seq, "notify id", (m.note_seq, ok, res))

    return Op("tocsin_notify", [("channel", "name", True), ("payload", "payload", True),
                                ("meta", "meta", False)], gen, apply, weight=1)


def op_notify_read():
    def gen(m, rng):
        ch = rng.choice(CHANNELS)
        after = rng.choice([0, m.note_seq // 2, -1, I64_MIN])
        limit = rng.choice([1, 3, MAX_BATCH])
        return [V(ch), V(after), V(limit)], (ch, after, limit)

    def apply(m, st, ok, res):
        ch, after, limit = st
        want = [(i, p) for i, c, p in m.notes if c == ch and i > after][:limit]
        got = [(x["id"], x["payload"]) for x in json.loads(res)] if ok else None
        return check(got == want, "notify_read matches the model", (st, want, got if ok else res))

    return Op("tocsin_notify_read", [("channel", "name", True), ("after_id", "int", True, I64_MIN, I64_MAX),
                                     ("limit", "int", True, 1, MAX_BATCH)], gen, apply, weight=1, writes=False)


def op_publish():
    def gen(m, rng):
        t = rng.choice(TOPICS)
        p = rand_json(rng)
        key = rng.choice([None, "k", "ключ"])
        args = [V(t), V(dumps(rng, p))]
        if key is not None or rng.random() < 0.3:
            args.append(V(key))
        return args, (t, p, key)

    def apply(m, st, ok, res):
        m.event_seq += 1
        m.events.append((m.event_seq,) + st)
        return check(ok and res == m.event_seq, "publish offset", (m.event_seq, ok, res))

    return Op("tocsin_stream_publish", [("topic", "name", True), ("payload", "payload", True),
                                        ("key", "name", False), ("meta", "meta", False)], gen, apply, weight=1)


def op_stream_read():
    def gen(m, rng):
        t = rng.choice(TOPICS)
        after = rng.choice([0, m.event_seq // 2, -7])
        limit = rng.choice([1, 2, MAX_BATCH])
        return [V(t), V(after), V(limit)], (t, after, limit)

    def apply(m, st, ok, res):
        t, after, limit = st
        want = [(o, k, p) for o, tt, p, k in m.events if tt == t and o > after][:limit]
        got = [(x["offset"], x["key"], x["payload"]) for x in json.loads(res)] if ok else None
        return check(got == want, "stream_read matches the model", (st, want, got if ok else res))

    return Op("tocsin_stream_read", [("topic", "name", True), ("after_offset", "int", True, I64_MIN, I64_MAX),
                                     ("limit", "int", True, 1, MAX_BATCH)], gen, apply, weight=1, writes=False)


def op_save_offset():
    def gen(m, rng):
        c, t = rng.choice(CONSUMERS), rng.choice(TOPICS)
        off = rng.randint(0, m.event_seq)  # within the stream: beyond it is another contract
        return [V(c), V(t), V(off)], (c, t, off)

    def apply(m, st, ok, res):
        c, t, off = st
        want = max(m.offsets.get((c, t), 0), off)
        if not check(ok and res == want, "save_offset keeps the maximum", (st, want, ok, res)):
            return False
        m.offsets[(c, t)] = want
        return True

    return Op("tocsin_stream_save_offset", [("consumer", "name", True), ("topic", "name", True),
                                            ("offset", "int", True, 0, I64_MAX)], gen, apply, weight=1)


def op_offset():
    def gen(m, rng):
        c, t = rng.choice(CONSUMERS), rng.choice(TOPICS)
        return [V(c), V(t)], (c, t)

    def apply(m, st, ok, res):
        return check(ok and res == m.offsets.get(st, 0), "stream_offset", (st, ok, res))

    return Op("tocsin_stream_offset", [("consumer", "name", True), ("topic", "name", True)], gen, apply,
              weight=0.5, writes=False)


def op_lock_acquire():
    def gen(m, rng):
        n, o = rng.choice(LOCKS), rng.choice(OWNERS)
        ttl = rng.choice([1, 500, 5000, LOCK_MAX_TTL])
        return [V(n), V(o), V(ttl)], (n, o, ttl)

    def apply(m, st, ok, res):
        n, o, ttl = st
        l = m.locks.get(n)
        if l and l["owner"] is not None and l["until"] > m.now:
            if l["owner"] != o:
                return check(ok and res is None, "acquire of a held lock gives NULL", (st, l, ok, res))
            l["until"] = max(l["until"], tadd(m.now, ttl))
            return check(ok and res == l["token"], "the holder keeps its token", (st, l, ok, res))
        token = (l["token"] if l else 0) + 1
        m.locks[n] = {"owner": o, "token": token, "until": tadd(m.now, ttl)}
        return check(ok and res == token, "a new holder gets the next token", (st, token, ok, res))

    return Op("tocsin_lock_acquire", [("name", "name", True), ("owner", "name", True),
                                      ("ttl_ms", "int", True, 1, LOCK_MAX_TTL)], gen, apply, weight=1)


def lock_holding(m, rng):
    n, o = rng.choice(LOCKS), rng.choice(OWNERS)
    l = m.locks.get(n)
    token = l["token"] if l and rng.random() < 0.7 else rng.choice([1, 2, 5])
    return n, o, token


def op_lock_renew():
    def gen(m, rng):
        n, o, token = lock_holding(m, rng)
        ttl = rng.choice([1, 1000, LOCK_MAX_TTL])
        return [V(n), V(o), V(token), V(ttl)], (n, o, token, ttl)

    def apply(m, st, ok, res):
        n, o, token, ttl = st
        l = m.locks.get(n)
        want = 1 if l and l["owner"] == o and l["token"] == token else 0
        if not check(ok and res == want, "renew matches the model", (st, l, ok, res)):
            return False
        if want:
            l["until"] = tadd(m.now, ttl)
        return True

    return Op("tocsin_lock_renew", [("name", "name", True), ("owner", "name", True),
                                    ("token", "int", True, 1, I64_MAX), ("ttl_ms", "int", True, 1, LOCK_MAX_TTL)],
              gen, apply, weight=1)


def op_lock_release():
    def gen(m, rng):
        n, o, token = lock_holding(m, rng)
        return [V(n), V(o), V(token)], (n, o, token)

    def apply(m, st, ok, res):
        n, o, token = st
        l = m.locks.get(n)
        want = 1 if l and l["owner"] == o and l["token"] == token else 0
        if not check(ok and res == want, "release matches the model", (st, l, ok, res)):
            return False
        if want:
            l["owner"], l["until"] = None, None
        return True

    return Op("tocsin_lock_release", [("name", "name", True), ("owner", "name", True),
                                      ("token", "int", True, 1, I64_MAX)], gen, apply, weight=0.7)


def op_lock_holder():
    def gen(m, rng):
        n = rng.choice(LOCKS + ["never"])
        return [V(n)], n

    def apply(m, n, ok, res):
        if not check(ok, "lock_holder succeeds", res):
            return False
        l = m.locks.get(n)
        got = json.loads(res)
        held_now = l is not None and l["owner"] is not None and l["until"] > m.now
        want = {"name": n, "owner": l["owner"] if held_now else None, "token": l["token"] if l else 0,
                "expires_at": l["until"] if held_now else None}
        return check(got == want, "lock_holder matches the model", want, got)

    return Op("tocsin_lock_holder", [("name", "name", True)], gen, apply, weight=0.5, writes=False)


OPS = [op_enqueue(), op_enqueue_many(), op_claim(),
       lease_op("tocsin_ack", [], lambda m, rng: ([], None), ack_effect),
       lease_op("tocsin_retry", [("delay_ms", "int", False, 0, MAX_TIME), ("error", "text", False)],
                retry_gen, retry_effect),
       lease_op("tocsin_fail", [("error", "text", False)], fail_gen, fail_effect),
       lease_op("tocsin_heartbeat", [("extend_ms", "int", True, 1, MAX_TIME)], heartbeat_gen, heartbeat_effect),
       op_cancel(), op_job(), op_stats(), op_next_deadline(), op_pause(False), op_pause(True),
       op_dead_requeue(), op_dead_list(), op_dead_purge(), op_notify(), op_notify_read(), op_publish(),
       op_stream_read(), op_save_offset(), op_offset(), op_lock_acquire(), op_lock_renew(),
       op_lock_release(), op_lock_holder()]


# ---- hostile variants -----------------------------------------------------------

def hostile(rng, op, args):
    """Replaces one argument of a valid call by a refused value; (args, names the error may use)."""
    positions = list(range(len(op.args)))
    i = rng.choice(positions)
    spec = op.args[i]
    name, kind, required = spec[0], spec[1], spec[2]
    args = list(args)
    # absent optional arguments before i become NULL (their default)
    while len(args) <= i:
        args.append(V(None))
    if kind == "name":
        bad = rng.choice(bad_names(required))
    elif kind == "payload":
        bad = rng.choice(bad_json_text())
    elif kind == "meta":
        bad = rng.choice(bad_meta())
    elif kind == "text":
        bad = rng.choice(bad_text())
    elif kind == "int":
        bad = rng.choice(bad_ints(spec[3], spec[4], required))
    elif kind == "opts":
        valid = args[i][1] if args[i][0] == "v" and isinstance(args[i][1], str) else None
        bad, key = bad_options(rng, spec[3], valid)
        args[i] = bad
        return args, [key, name]
    elif kind == "jobs":
        return hostile_jobs(rng, args)
    else:
        raise AssertionError(kind)
    args[i] = bad
    names = arg_names(spec)
    if kind == "meta":
        names = names + ["meta"]
    return args, names


def hostile_jobs(rng, args):
    jobs = json.loads(args[0][1]) or [{"queue": "a", "payload": 1}]
    r = rng.random()
    if r < 0.2:
        return [rng.choice([V("{}"), V("1"), V('"x"'), V("null"), V("["), V(None), V(b"[]"),
                            E("'[]' || char(0)"), V('[{"queue":"a","payload":1}] x')])], ["jobs"]
    k = rng.randrange(len(jobs))
    where = ["job %d" % k]
    if r < 0.3:
        jobs[k] = rng.choice([1, None, [], "x"])
        return [V(json.dumps(jobs))], where
    if r < 0.4:
        jobs[k].pop(rng.choice(["queue", "payload"]), None)
        return [V(json.dumps(jobs))], where
    if r < 0.55:
        jobs[k]["queue"] = rng.choice(["", "x" * 256, "a\nb", 5, None, ["q"]])
        if jobs[k]["queue"] is None:
            jobs[k].pop("queue")
        return [V(json.dumps(jobs))], where
    if r < 0.6:
        return [V(json.dumps([{"queue": "a", "payload": 1}] * (MAX_BATCH + 1)))], ["jobs"]
    # one bad option inside one job
    o = {kk: vv for kk, vv in jobs[k].items() if kk not in ("queue", "payload")}
    bad, key = bad_options(rng, ENQUEUE_KEYS, json.dumps(o))
    text = bad[1]
    if not isinstance(text, str) or not text.startswith("{") or key == "options":
        text = '{"bogus":1}'
        key = "bogus"
    inner = json.dumps({"queue": jobs[k]["queue"], "payload": jobs[k]["payload"]})
    elem = "{" + inner[1:-1] + ("," + text[1:] if len(text) > 2 else "}")
    parts = [json.dumps(j) for j in jobs]
    parts[k] = elem
    return [V("[" + ",".join(parts) + "]")], where + [key]


# ---- the run ----------------------------------------------------------------------

def connect(ext, path):
    conn = sqlite3.connect(path, isolation_level=None)
    conn.enable_load_extension(True)
    conn.load_extension(ext)
    conn.enable_load_extension(False)
    return conn


def set_clock(conn, m, ms):
    m.now = ms
    ok, res = call(conn, "tocsin_clock", [V(ms)])
    check(ok and res == ms, "tocsin_clock sets the clock", (ms, ok, res))


def resync_job(conn, m, jid):
    ok, res = call(conn, "tocsin_job", [V(jid)])
    if not check(ok, "resync read", res):
        return None
    if res is None:
        m.jobs.pop(jid, None)
        return None
    j = job_from_json(json.loads(res))
    m.jobs[jid] = j
    return j


def run_valid(conn, m, rng, op):
    args, st = op.gen(m, rng)
    ok, res = call(conn, op.name, args)
    try:
        good = op.apply(m, st, ok, res)
    except Resync as r:
        info = r.args[0]
        if isinstance(info, tuple):  # retry with backoff: run_at within the jitter window
            jid, lo, hi = info
            j = resync_job(conn, m, jid)
            good = check(j is not None and j["state"] == "pending" and lo <= j["run_at"] <= hi,
                         "backoff delay within [d/2, d]", (lo, hi, j))
        else:
            resync_job(conn, m, info)
            good = True
    if not good:
        print("    call: %s%s" % (op.name, show(args)))
    return good


def run_hostile(conn, m, rng, op):
    args, _ = op.gen(m, rng)
    bad_args, names = hostile(rng, op, args)
    before = dump(conn)
    ok, res = call(conn, op.name, bad_args)
    after = dump(conn)
    desc = "%s%s" % (op.name, show(bad_args))
    check(not ok, "a refused value is an error: " + desc, res)
    if not ok:
        check(res.startswith(op.name + ":"), "the error names the function: " + desc, res)
        check(any(n in res for n in names), "the error names the argument %s: %s" % (names, desc), res)
    check(before == after, "an error leaves the tables unchanged: " + desc,
          {k: (before.get(k), after.get(k)) for k in set(before) | set(after) if before.get(k) != after.get(k)})


def full_check(conn, m):
    """Every job of the model (live and dead) against the database, and the queue counts."""
    n_live = conn.execute("SELECT count(*) FROM _tocsin_jobs").fetchone()[0]
    n_dead = conn.execute("SELECT count(*) FROM _tocsin_dead").fetchone()[0]
    check(n_live == len(m.live()) and n_dead == len(m.dead()), "row counts match the model",
          (n_live, len(m.live()), n_dead, len(m.dead())))
    for jid, j in sorted(m.jobs.items()):
        ok, res = call(conn, "tocsin_job", [V(jid)])
        got = json.loads(res) if ok and res else None
        if not check(got is not None, "model job exists", jid, res):
            continue
        diffs = same_job(j, job_from_json(got))
        check(not diffs, "job %d matches the model" % jid, diffs, j, got)
    for q in QUEUES:
        ok, res = call(conn, "tocsin_stats", [V(q)])
        want = model_stats(m, q)
        got = json.loads(res) if ok else {}
        check(all(got.get(k) == v for k, v in want.items()), "stats of %s" % q, want, got)


# ---- deterministic sweeps over every function -------------------------------------

# Every SQL function with arguments that make a valid call, and the kind of each
# argument: (name, kind, required[, lo, hi | keys]).
SIGS = [
    ("tocsin_enqueue", [("queue", "name", True, "q"), ("payload", "payload", True, "{}"),
                        ("options", "opts", False, "{}", ENQUEUE_KEYS)]),
    ("tocsin_enqueue_many", [("jobs", "jobs", True, '[{"queue":"q","payload":1}]')]),
    ("tocsin_claim", [("queue", "name", True, "q"), ("worker_id", "name", True, "w"),
                      ("n", "int", True, 1, 1, MAX_BATCH), ("visibility_ms", "int", True, 1000, 1, MAX_TIME)]),
    ("tocsin_ack", [("job_id", "int", True, 1, I64_MIN, I64_MAX), ("token", "int", True, 1, I64_MIN, I64_MAX)]),
    ("tocsin_retry", [("job_id", "int", True, 1, I64_MIN, I64_MAX), ("token", "int", True, 1, I64_MIN, I64_MAX),
                      ("delay_ms", "int", False, 0, 0, MAX_TIME), ("error", "text", False, "e")]),
    ("tocsin_fail", [("job_id", "int", True, 1, I64_MIN, I64_MAX), ("token", "int", True, 1, I64_MIN, I64_MAX),
                     ("error", "text", False, "e")]),
    ("tocsin_heartbeat", [("job_id", "int", True, 1, I64_MIN, I64_MAX), ("token", "int", True, 1, I64_MIN, I64_MAX),
                          ("extend_ms", "int", True, 10, 1, MAX_TIME)]),
    ("tocsin_cancel", [("job_id", "int", True, 1, I64_MIN, I64_MAX)]),
    ("tocsin_job", [("job_id", "int", True, 1, I64_MIN, I64_MAX)]),
    ("tocsin_pause", [("queue", "name", True, "q")]),
    ("tocsin_resume", [("queue", "name", True, "q")]),
    ("tocsin_stats", [("queue", "name", False, "q")]),
    ("tocsin_next_deadline", [("queue", "name", True, "q")]),
    ("tocsin_dead_list", [("queue", "name", False, "q"), ("after_id", "int", False, 0, I64_MIN, I64_MAX),
                          ("limit", "int", False, 10, 1, MAX_BATCH)]),
    ("tocsin_dead_requeue", [("job_id", "int", True, 1, I64_MIN, I64_MAX)]),
    ("tocsin_dead_purge", [("queue", "name", False, "q"), ("before_ms", "int", False, 1, 0, MAX_TIME)]),
    ("tocsin_notify", [("channel", "name", True, "c"), ("payload", "payload", True, "1"),
                       ("meta", "meta", False, "{}")]),
    ("tocsin_notify_read", [("channel", "name", True, "c"), ("after_id", "int", True, 0, I64_MIN, I64_MAX),
                            ("limit", "int", True, 10, 1, MAX_BATCH)]),
    ("tocsin_notify_prune", [("max_age_ms", "int", False, 0, 0, MAX_TIME), ("max_keep", "int", False, 0, 0, I64_MAX)]),
    ("tocsin_notify_autotrim", [("max_age_ms", "int", False, 0, 0, MAX_TIME),
                                ("max_keep", "int", False, 5, 0, I64_MAX), ("one_in", "int", False, 0, 0, I64_MAX)]),
    ("tocsin_stream_publish", [("topic", "name", True, "t"), ("payload", "payload", True, "1"),
                               ("key", "name", False, "k"), ("meta", "meta", False, "{}")]),
    ("tocsin_stream_read", [("topic", "name", True, "t"), ("after_offset", "int", True, 0, I64_MIN, I64_MAX),
                            ("limit", "int", True, 10, 1, MAX_BATCH)]),
    ("tocsin_stream_save_offset", [("consumer", "name", True, "c"), ("topic", "name", True, "t"),
                                   ("offset", "int", True, 0, 0, I64_MAX)]),
    ("tocsin_stream_offset", [("consumer", "name", True, "c"), ("topic", "name", True, "t")]),
    ("tocsin_stream_trim", [("topic", "name", True, "t"),
                            ("options", "opts", True, '{"max_count":100}', TRIM_KEYS)]),
    ("tocsin_result_save", [("job_id", "int", True, 1, 1, I64_MAX), ("value", "payload", True, "1"),
                            ("ttl_ms", "int", False, 0, 0, MAX_TIME)]),
    ("tocsin_result_save_error", [("job_id", "int", True, 1, 1, I64_MAX), ("type", "name", True, "E"),
                                  ("message", "text", False, "m"), ("ttl_ms", "int", False, 0, 0, MAX_TIME)]),
    ("tocsin_complete", [("job_id", "int", True, 1, I64_MIN, I64_MAX), ("token", "int", True, 1, I64_MIN, I64_MAX),
                         ("value", "payload", True, "1"), ("ttl_ms", "int", False, 0, 0, MAX_TIME)]),
    ("tocsin_fail_task", [("job_id", "int", True, 1, I64_MIN, I64_MAX), ("token", "int", True, 1, I64_MIN, I64_MAX),
                          ("type", "name", True, "E"), ("message", "text", False, "m"),
                          ("ttl_ms", "int", False, 0, 0, MAX_TIME)]),
    ("tocsin_result_get", [("job_id", "int", True, 1, I64_MIN, I64_MAX)]),
    ("tocsin_result_check", [("job_id", "int", True, 1, I64_MIN, I64_MAX)]),
    ("tocsin_result_delete", [("job_id", "int", True, 1, I64_MIN, I64_MAX)]),
    ("tocsin_lock_acquire", [("name", "name", True, "L"), ("owner", "name", True, "o"),
                             ("ttl_ms", "int", True, 10, 1, LOCK_MAX_TTL)]),
    ("tocsin_lock_renew", [("name", "name", True, "L"), ("owner", "name", True, "o"),
                           ("token", "int", True, 1, 1, I64_MAX), ("ttl_ms", "int", True, 10, 1, LOCK_MAX_TTL)]),
    ("tocsin_lock_release", [("name", "name", True, "L"), ("owner", "name", True, "o"),
                             ("token", "int", True, 1, 1, I64_MAX)]),
    ("tocsin_lock_holder", [("name", "name", True, "L")]),
    ("tocsin_ratelimit_try", [("name", "name", True, "r"), ("limit", "int", True, 5, 1, 1000000),
                              ("per_ms", "int", True, 1000, 1, LOCK_MAX_TTL)]),
    ("tocsin_ratelimit_reset", [("name", "name", True, "r")]),
    ("tocsin_cron_next", [("cron", "name", True, "@daily"), ("after_ms", "int", True, 0, 0, MAX_TIME),
                          ("zone", "name", False, "utc")]),
    ("tocsin_schedule_set", [("name", "name", True, "s"), ("cron", "name", True, "@daily"),
                             ("queue", "name", True, "q"), ("payload", "payload", True, "1"),
                             ("options", "opts", False, "{}", SCHEDULE_KEYS)]),
    ("tocsin_schedule_update", [("name", "name", True, "s"),
                                ("changes", "opts", True, '{"priority":1}',
                                 dict(SCHEDULE_KEYS, cron=("text",), queue=("text",)))]),
    ("tocsin_schedule_pause", [("name", "name", True, "s")]),
    ("tocsin_schedule_resume", [("name", "name", True, "s")]),
    ("tocsin_schedule_remove", [("name", "name", True, "s")]),
    ("tocsin_schedule_get", [("name", "name", True, "s")]),
    ("tocsin_scheduler_lead", [("owner", "name", True, "o"), ("ttl_ms", "int", True, 1000, 1, LOCK_MAX_TTL)]),
    ("tocsin_scheduler_resign", [("owner", "name", True, "o")]),
    ("tocsin_clock", [("ms", "int", False, T0, 0, MAX_TIME)]),
]
NO_ARGS = ["tocsin_bootstrap", "tocsin_result_sweep", "tocsin_ratelimit_sweep", "tocsin_schedule_list",
           "tocsin_scheduler_tick", "tocsin_scheduler_next_fire"]
NO_DB = ["tocsin_version", "tocsin_clock", "tocsin_cron_next"]


def valid_args(sig):
    out = []
    for a in sig:
        out.append(V(a[3]))
    return out


def sweep_refused(conn, fn, args, names, what):
    before = dump(conn)
    ok, res = call(conn, fn, args)
    after = dump(conn)
    desc = "%s %s%s" % (what, fn, show(args))
    check(not ok, "refused: " + desc, res)
    if not ok:
        check(res.startswith(fn + ":"), "names the function: " + desc, res)
        check(any(n in res for n in names), "names %s: %s" % (names, desc), res)
    check(before == after, "nothing written: " + desc)


def sweeps(conn, m):
    global context
    # "names" that are not names: the zone and cron arguments are texts with their own rules
    for fn, sig in SIGS:
        base = valid_args(sig)
        for i, a in enumerate(sig):
            name, kind, required = a[0], a[1], a[2]
            context = "sweep %s.%s" % (fn, name)
            vals = []
            if kind in ("name", "text", "payload", "meta"):
                # the NUL rule and UTF-8 for every text argument
                vals = [E("%s || char(0) || 'x'" % sqlite_str(a[3])), E("char(0) || %s" % sqlite_str(a[3])),
                        E("CAST(x'ff' AS TEXT)"), V(b"\x00")]
                if required:
                    vals.append(V(None))
            elif kind == "int":
                vals = bad_ints(a[4], a[5], required)
            elif kind == "opts":
                vals = [V("[]"), V("[1]"), V('"x"'), V("1"), V("null"), V("true"), V(""), V("{"),
                        V(b"{}"), E("'{}' || char(0)"), E("CAST(x'7bff7d' AS TEXT)"), V(7), V("{} x")]
                if required:
                    vals.append(V(None))
                keys = a[4]
                names_k = [name, "options"]
                for k, spec in sorted(keys.items()):
                    for bad in bad_opt_values(spec):
                        args = list(base)
                        args[i] = V('{"%s":%s}' % (k, bad))
                        sweep_refused(conn, fn, args, [k], "option %s=%s" % (k, bad[:30]))
                    args = list(base)
                    args[i] = V('{"%s":null,"%s":null}' % (k, k))
                    sweep_refused(conn, fn, args, [k], "duplicate key")
                args = list(base)
                args[i] = V('{"zz_unknown":1}')
                sweep_refused(conn, fn, args, ["zz_unknown"], "unknown key")
                for v in vals:
                    args = list(base)
                    args[i] = v
                    sweep_refused(conn, fn, args, names_k, "options not an object")
                continue
            elif kind == "jobs":
                vals = [V("{}"), V("[1]"), V("[[]]"), V('[{"payload":1}]'), V('[{"queue":"q"}]'),
                        V('[{"queue":"q","payload":1,"priority":"x"}]'),
                        V('[{"queue":"q\\u0000x","payload":1}]'), V(None), V(b"[]"),
                        E("'[]' || char(0)"), V('[{"queue":"q","payload":1,"queue":"r"}]')]
            for v in vals:
                args = list(base)
                args[i] = v
                sweep_refused(conn, fn, args, arg_names(a) + (["jobs", "job"] if kind == "jobs" else [])
                              + (["meta"] if kind == "meta" else []), "bad %s" % name)
    # statement shapes: inside a writing statement every function that touches the
    # database fails at once with the real cause, nothing written
    conn.execute("CREATE TABLE IF NOT EXISTS host(x)")
    conn.execute("DELETE FROM host")
    for fn, sig in SIGS + [(f, []) for f in NO_ARGS]:
        if fn in NO_DB:
            continue
        context = "statement shapes %s" % fn
        args = valid_args(sig)
        inner = sql_of(fn, args)[len("SELECT "):]
        params = [a[1] for a in args if a[0] == "v"]
        for shape in ("INSERT INTO host VALUES (%s)", "INSERT INTO host SELECT %s",
                      "CREATE TABLE host2 AS SELECT %s AS x"):
            before = dump(conn)
            t = time.monotonic()
            try:
                conn.execute(shape % inner, params)
                err = None
            except sqlite3.Error as e:
                err = str(e)
            took = time.monotonic() - t
            check(err is not None and "statements in progress" in err and err.startswith(fn + ":"),
                  "%s fails with the real cause: %s" % (fn, shape % inner), err)
            check(took < 1.0, "%s fails at once (%.2f s)" % (fn, took))
            check(before == dump(conn), "nothing written by %s" % (shape % inner))
        conn.execute("DROP TABLE IF EXISTS host2")
        check(conn.execute("SELECT count(*) FROM host").fetchone()[0] == 0, "host table untouched")
    # functions that touch no table work anywhere
    context = "statement shapes (no table)"
    conn.execute("INSERT INTO host VALUES (tocsin_cron_next('@daily', 0))")
    check(conn.execute("SELECT x FROM host").fetchone()[0] == 86400000, "tocsin_cron_next inside INSERT")
    conn.execute("DELETE FROM host")
    # the SELECT shapes work: one row per source row, and enqueue_many all-or-nothing
    context = "statement shapes (select)"
    before = dump(conn)
    ok, res = call(conn, "tocsin_enqueue_many", [V('[{"queue":"shape","payload":1},{"queue":"","payload":2}]')])
    check(not ok and before == dump(conn), "enqueue_many is all or nothing", res)


def sqlite_str(s):
    return "'" + s.replace("'", "''") + "'"


def main():
    global context
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    ext = os.path.abspath(sys.argv[1])
    if ext.endswith(".so"):
        ext = ext[:-3]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else int(os.environ.get("STEPS", "2500"))
    seed = int(os.environ["SEED"]) if os.environ.get("SEED") else random.SystemRandom().randrange(1 << 32)
    print("property: seed %d (replay with SEED=%d), %d steps" % (seed, seed, steps))
    rng = random.Random(seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        # the sweeps run on a database of their own (their valid calls write)
        conn = connect(ext, os.path.join(tmp, "sweeps.db"))
        conn.execute("SELECT tocsin_bootstrap()")
        sweeps(conn, Model())
        conn.close()
        swept = passed + failed

        conn = connect(ext, os.path.join(tmp, "model.db"))
        if rng.random() < 0.5:
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("SELECT tocsin_bootstrap()")
        m = Model()
        set_clock(conn, m, T0)
        weights = [op.weight for op in OPS]
        step = 0
        while step < steps:
            step += 1
            r = rng.random()
            if r < 0.08:
                context = "step %d: clock" % step
                set_clock(conn, m, m.now + rng.choice([1, 10, 100, 1000, 3000, 10000]))
                continue
            if r < 0.11:
                # a few calls inside a transaction, then ROLLBACK (all gone) or COMMIT
                commit = rng.random() < 0.5
                context = "step %d: transaction (%s)" % (step, "commit" if commit else "rollback")
                before, saved = dump(conn), copy.deepcopy(m)
                conn.execute("BEGIN")
                for _ in range(rng.randint(1, 4)):
                    op = rng.choices(OPS, weights)[0]
                    if rng.random() < 0.3:
                        run_hostile(conn, m, rng, op)
                    else:
                        run_valid(conn, m, rng, op)
                if commit:
                    conn.execute("COMMIT")
                else:
                    conn.execute("ROLLBACK")
                    now = m.now
                    m = saved
                    m.now = now  # the clock is the connection's, not the database's
                    check(dump(conn) == before, "ROLLBACK drops every call of the transaction")
                continue
            op = rng.choices(OPS, weights)[0]
            context = "step %d: %s" % (step, op.name)
            if rng.random() < 0.35:
                run_hostile(conn, m, rng, op)
            else:
                run_valid(conn, m, rng, op)
            if step % 250 == 0:
                context = "step %d: full check" % step
                full_check(conn, m)
        context = "end: full check"
        full_check(conn, m)
        conn.close()
    print("property: %d sweep checks, %d random steps, %.1f s" % (swept, steps, time.monotonic() - started))
    print("property: %d passed, %d failed%s" % (passed, failed, "" if not failed else " (SEED=%d)" % seed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
