"""The Python agent of the interop matrix: one command per line on stdin
(tab-separated fields, JSON where a value is JSON), one JSON reply per line on
stdout. It uses the installed `tocsin` package's public API only."""
import json
import logging
import sys
import threading

import tocsin

RT = "python"


def harness(fn, arg):
    """The agent's own JSON (command fields, replies) holds values nested to the core's
    bound (1000) and a wrapper: done under a raised recursion limit, put back at once so
    that the binding's own calls run under Python's default."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(old + 2000)
    try:
        return fn(arg)
    finally:
        sys.setrecursionlimit(old)


def jload(text):
    return harness(json.loads, text)
# the worker logs each retry and failure of `boom`; the replies carry what matters
logging.getLogger("tocsin").setLevel(logging.CRITICAL)


class Agent:
    def __init__(self):
        self.db = None
        self.worker = None
        self.thread = None
        self.sub = None
        self.listener = None
        self.locks = {}

    def hello(self):
        return {"runtime": RT, "version": sys.version.split()[0], "module": tocsin.__file__,
                "loadable": tocsin.loadable_path(), "bigint": True}

    def open(self, path):
        self.close()
        self.db = tocsin.open(path)
        return {}

    def close(self):
        self.worker_stop()
        for w in (self.sub, self.listener):
            if w is not None:
                w.close()
        self.sub = self.listener = None
        self.locks = {}
        if self.db is not None:
            self.db.close()
            self.db = None
        return {}

    def enqueue(self, queue, payload, meta):
        jid = self.db.queue(queue).enqueue(jload(payload), meta=jload(meta), max_attempts=1)
        return {"id": jid}

    def claim_ack(self, queue):
        q = self.db.queue(queue)
        while True:
            job = q.claim("py-consumer")
            if job is not None:
                break
            q.wait(timeout=30)
        return {"payload": job.payload, "meta": job.meta, "acked": job.ack()}

    def job(self, jid):
        j = self.db.queue("jobs").get(int(jid))
        return {"state": None if j is None else j.state}

    def worker_start(self, queue):
        q = self.db.queue(queue)

        @q.task(name="echo", retries=0, backoff=0.01)
        def echo(x):
            return {"by": RT, "echo": x}

        @q.task(name="boom", retries=0, backoff=0.01)
        def boom(x):
            raise ValueError("boom: %s" % x)

        self.worker = tocsin.Worker(self.db, [queue], scheduler=True, shutdown_timeout=2)
        self.thread = threading.Thread(target=self.worker.run, kwargs={"install_signal_handlers": False})
        self.thread.start()
        return {}

    def worker_stop(self):
        if self.worker is not None:
            self.worker.stop()
            self.thread.join()
            self.worker = self.thread = None
        return {}

    def call(self, queue, task, args):
        return {"id": self.db.queue(queue).call(task, *jload(args)).job_id}

    def result(self, jid):
        r = self.db.wait_result(int(jid), timeout=60)
        if r.is_error:
            return {"error": {"type": r.error_type, "message": r.error_message}}
        return {"value": r.value}

    def publish(self, topic, payload):
        return {"offset": self.db.stream(topic).publish(jload(payload))}

    def sub_start(self, topic, consumer):
        self.sub = self.db.stream(topic).subscribe(consumer=consumer, batch=1)
        return {}

    def sub_next(self, n):
        events = []
        while len(events) < int(n):
            events.append(next(self.sub))
        return {"events": [{"offset": e.offset, "payload": e.payload} for e in events]}

    def sub_stop(self):
        self.sub.close()
        self.sub = None
        return {}

    def offset(self, topic, consumer):
        return {"offset": self.db.stream(topic).offset(consumer)}

    def listen_start(self, channel):
        self.listener = self.db.listen(channel)
        return {}

    def listen_next(self):
        n = next(self.listener)
        return {"payload": n.payload}

    def listen_stop(self):
        self.listener.close()
        self.listener = None
        return {}

    def notify(self, channel, payload):
        return {"id": self.db.notify(channel, jload(payload))}

    def _lock(self, name, owner, ttl_ms):
        key = (name, owner)
        if key not in self.locks:
            self.locks[key] = self.db.lock(name, ttl=int(ttl_ms) / 1000.0, owner=owner)
        return self.locks[key]

    def lock_try(self, name, owner, ttl_ms):
        lk = self._lock(name, owner, ttl_ms)
        return {"token": lk.token if lk.try_acquire() else 0}

    def lock_wait(self, name, owner, ttl_ms):
        lk = self._lock(name, owner, ttl_ms)
        lk.acquire(timeout=60)
        return {"token": lk.token}

    def lock_renew(self, name, owner):
        return {"res": self.locks[(name, owner)].renew()}

    def lock_release(self, name, owner):
        return {"res": self.locks[(name, owner)].release()}

    def schedule(self, name, cron, queue, payload):
        return {"next_fire": self.db.schedule(name, cron, queue, jload(payload))}

    def quit(self):
        return self.close()

    def unschedule(self, name):
        return {"res": self.db.unschedule(name)}


def main():
    agent = Agent()
    out = sys.stdout
    for line in sys.stdin:
        fields = line.rstrip("\n").split("\t")
        try:
            reply = getattr(agent, fields[0])(*fields[1:])
            reply["ok"] = True
        except Exception as e:  # the driver reports it as the check's failure
            reply = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
        out.write(harness(json.dumps, reply) + "\n")
        out.flush()
        if fields[0] == "quit":
            break
    agent.close()


if __name__ == "__main__":
    main()
