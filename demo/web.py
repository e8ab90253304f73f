"""The demo's Python "web request": records an order and, in the same
transaction, calls the send_email task, publishes to the orders stream and
notifies listeners. Then it waits for every email job's result, including the
ones the C shop enqueued. Usage: web.py ITEM JOB_ID..."""
import os
import sys

import tocsin

db = tocsin.open(os.environ["DEMO_DB"])
emails = db.queue("emails")
item, others = sys.argv[1], [int(j) for j in sys.argv[2:]]

with db.transaction() as tx:
    db.execute("INSERT INTO orders(item) VALUES (?)", [item])
    handle = emails.call("send_email", item, kwargs={"to": "ada@example.org"})  # joins the transaction
    offset = db.stream("orders").publish({"item": item, "by": "python"}, tx=tx)
    db.notify("orders", {"item": item}, tx=tx)
print("Python web: order for %s committed with job %d, stream offset %d" % (item, handle.job_id, offset))

print("Python web: result of job %d: %s" % (handle.job_id, handle.get(timeout=30)))
for job_id in others:
    r = db.wait_result(job_id, timeout=30)
    print("Python web: result of job %d (enqueued from C): %s"
          % (job_id, r.value if not r.is_error else r.error_type + ": " + r.error_message))
db.close()
