#!/bin/sh
# The polyglot demo on ONE local .db: a Python web request writes orders and calls
# tasks that Go and Node workers run, a Ruby consumer follows the order stream, the
# results flow back to Python, a C program and the sqlite3 shell see the same state.
# No broker, no daemon. Run through `make demo` (it builds what this needs).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PY=${PY:-$BUILD/venv/bin/python}
DEMO_DB=${DEMO_DB:-$BUILD/demo.db}
NODE=${NODE:-node}
RUBY=${RUBY:-ruby}
ORDERS=${DEMO_ORDERS:-5}
export DEMO_DB
rm -f "$DEMO_DB" "$DEMO_DB-wal" "$DEMO_DB-shm"
echo "== tocsin demo on $DEMO_DB"

# 1. A C program: an order row, a call of the Python task send_email, a stream
#    event and a notification, all in one transaction.
sqlite3 "$DEMO_DB" "CREATE TABLE orders(id INTEGER PRIMARY KEY, item TEXT);"
job1=$("$BUILD/demo_shop" "$DEMO_DB" "teapot")
job2=$("$BUILD/demo_shop" "$DEMO_DB" "kettle")

# 2. A Python worker (tasks + scheduler) starts; it runs what C enqueued.
PYTHONPATH=demo "$PY" -m tocsin worker tasks:db --queue emails --concurrency 2 \
    --shutdown-timeout 5 --log-level warning &
worker=$!
# 2b. The Go worker (reserve_stock), the Node worker (charge_card) and the Ruby
#     follower of the orders stream, each its own process on the same file.
"$BUILD/demo-stock" "$DEMO_DB" &
goworker=$!
"$NODE" demo/node_worker.js "$DEMO_DB" &
nodeworker=$!
rm -f "$BUILD/demo-ruby-shipping.json" "$BUILD/demo-ruby-shipping.json.summary"
$RUBY -Ibindings/ruby/lib -I"$BUILD/ruby/lib" demo/ruby_follower.rb "$DEMO_DB" "$ORDERS" \
    "$BUILD/demo-ruby-shipping.json" &
follower=$!
trap 'kill "$worker" "$goworker" "$nodeworker" "$follower" 2>/dev/null || true' EXIT

# Every worker is up (in the worker registry) before the web requests start, so the
# latencies at the end are the queue's, not a worker process's start-up.
i=0
until [ "$(sqlite3 -batch "$DEMO_DB" "SELECT count(DISTINCT q.value) FROM _tocsin_workers,
      json_each(queues) AS q WHERE q.value IN ('emails', 'stock', 'payments');" 2>/dev/null)" = 3 ]; do
    i=$((i + 1))
    [ "$i" -le 300 ] || { echo "demo: the workers did not start within 30 s" >&2; exit 1; }
    sleep 0.1
done

# 3. A Python "web request" enqueues in its own transaction and reads every result.
PYTHONPATH=demo "$PY" demo/web.py "mug" "$job1" "$job2"

# 3b. The story: Python web requests -> Go and Node tasks, Ruby follows the stream,
#     the results come back to Python. The follower ends after $ORDERS orders.
PYTHONPATH=demo "$PY" demo/story.py "$ORDERS" "$BUILD/demo-ruby-shipping.json" &
story=$!
wait "$follower" || { echo "demo: the Ruby follower failed" >&2; exit 1; }
wait "$story" || { echo "demo: the Python story failed" >&2; exit 1; }

# 4. Any SQLite client with the extension sees the same state: here the sqlite3 shell.
sqlite3 -batch "$DEMO_DB" <<SQL
.load $BUILD/tocsin.so
.mode list
SELECT 'sqlite3: result of job ' || $job1 || ': ' || json_extract(tocsin_result_get($job1), '\$.value');
SELECT 'sqlite3: stream event ' || json_extract(value, '\$.offset') || ' ' || json_extract(value, '\$.payload')
  FROM json_each(tocsin_stream_read('orders', tocsin_stream_offset('audit', 'orders'), 100));
SELECT 'sqlite3: saved consumer offset ' || tocsin_stream_save_offset('audit', 'orders', 3);
SELECT 'sqlite3: notification ' || json_extract(value, '\$.id') || ' ' || json_extract(value, '\$.payload')
  FROM json_each(tocsin_notify_read('orders', 0, 100));
SELECT 'sqlite3: orders committed: ' || count(*) FROM orders;
SELECT 'sqlite3: the Ruby consumer "shipping" is at offset ' || tocsin_stream_offset('shipping', 'orders');
SELECT 'sqlite3: results by runtime: ' || group_concat(rt || ' ' || n, ', ') FROM
  (SELECT json_extract(value, '\$.runtime') AS rt, count(*) AS n FROM _tocsin_results
    WHERE json_extract(value, '\$.runtime') IS NOT NULL GROUP BY rt);
SELECT 'sqlite3: stock ' || json_extract(tocsin_stats('stock'), '\$.pending') || ' pending, payments '
  || json_extract(tocsin_stats('payments'), '\$.pending') || ' pending';
SQL

# 5. The scheduler fires the periodic digest; then the worker stops gracefully.
"$PY" - <<'PY'
import os, time, tocsin
db = tocsin.open(os.environ["DEMO_DB"])
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    s = [x for x in db.schedules() if x.name == "periodic:digest"]
    if s and s[0].fired_count > 0:
        print("python: the scheduler fired periodic:digest %d time(s)" % s[0].fired_count)
        break
    time.sleep(0.2)
else:
    raise SystemExit("python: the periodic digest never fired")
db.close()
PY
kill -TERM "$worker" "$goworker" "$nodeworker"
wait "$worker" "$goworker" "$nodeworker"
trap - EXIT
echo "queue stats: $(sqlite3 -batch "$DEMO_DB" ".load $BUILD/tocsin.so" "SELECT tocsin_stats('emails');")"
echo "== who processed what (one .db, $ORDERS orders)"
cat "$BUILD/demo-ruby-shipping.json.summary"
echo "== demo done"
