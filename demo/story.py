"""The demo's Python web requests: each order row, the calls of the Go task
reserve_stock and the Node task charge_card, and the order's stream event commit in
ONE transaction. Then the results flow back here and a summary says who (runtime,
pid) processed what and the end-to-end latency (enqueue -> result saved).
Usage: story.py N RUBY_OUT"""
import json
import os
import sys
import time

import tocsin

n, ruby_out = int(sys.argv[1]), sys.argv[2]
db = tocsin.open(os.environ["DEMO_DB"])
items = ["teapot", "kettle", "mug", "saucer", "tray", "spoon", "cosy", "strainer"]
calls = []  # (order, task, handle, enqueued_ms)
for i in range(n):
    item = items[i % len(items)]
    with db.transaction() as tx:
        order = db.execute("INSERT INTO orders(item) VALUES (?) RETURNING id", [item])[0][0]
        at = int(time.time() * 1000)
        h1 = db.queue("stock").call("reserve_stock", kwargs={"order": order, "item": item})
        h2 = db.queue("payments").call("charge_card", order, kwargs={"amount": 990 + i})
        db.stream("orders").publish({"order": order, "item": item}, tx=tx)
    calls += [(order, "reserve_stock", h1, at), (order, "charge_card", h2, at)]
    print("python web (pid %d): order %d (%s) committed with jobs %d, %d and its stream event"
          % (os.getpid(), order, item, h1.job_id, h2.job_id))

rows, lat = [], []
for order, task, h, at in calls:
    v = h.get(timeout=30)
    r = db.result(h.job_id)
    lat.append(r.created_at - at)
    rows.append((order, task, h.job_id, v["runtime"], v["pid"], r.created_at - at))
deadline = time.monotonic() + 20
while not os.path.exists(ruby_out) and time.monotonic() < deadline:
    time.sleep(0.05)
if not os.path.exists(ruby_out):
    raise SystemExit("python: the Ruby follower did not report")
time.sleep(0.1)
with open(ruby_out) as f:
    ruby = json.load(f)
for order in sorted({c[0] for c in calls}):
    rows.append((order, "ship (stream)", "-", ruby["runtime"], ruby["pid"], None))
    if order not in ruby["orders"]:
        raise SystemExit("python: the Ruby follower never saw order %d" % order)
if {r[3] for r in rows} != {"go", "node", "ruby"}:
    raise SystemExit("python: not every runtime took part: %s" % sorted({r[3] for r in rows}))
out = []
out.append("%-6s %-15s %-6s %-8s %-8s %s" % ("order", "work", "job", "runtime", "pid", "enqueue->result (ms)"))
for r in sorted(rows, key=lambda r: (r[0], r[1])):
    out.append("%-6s %-15s %-6s %-8s %-8s %s" % (r[0], r[1], r[2], r[3], r[4], "" if r[5] is None else r[5]))
lat.sort()
out.append("end-to-end latency over %d task calls: p50 %d ms, max %d ms" % (len(lat), lat[len(lat) // 2], lat[-1]))
with open(ruby_out + ".summary", "w") as f:
    f.write("\n".join(out) + "\n")
print("python web: every result came back (summary at the end)")
db.close()
