#!/bin/sh
# The Ruby part of `make demo`: a Ruby worker serves Ruby and Python callers on one
# SQLite file; the sqlite3 gem enqueues inside its own transaction.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:?}
RUBY="ruby -Ilib -I$BUILD/ruby/lib"
PY=${PY:-$BUILD/venv/bin/python}
DB=$BUILD/demo-ruby.db
rm -f "$DB" "$DB-wal" "$DB-shm"
echo "== tocsin Ruby demo on $DB"
$RUBY exe/tocsin-worker --db "$DB" --require demo/tasks.rb --concurrency 2 --shutdown-timeout 5 >/dev/null &
worker=$!
trap 'kill "$worker" 2>/dev/null || true' EXIT

# a Ruby "web request": the order row and the call of the task commit together
$RUBY -e '
require "tocsin"; require "sqlite3"; require "tocsin/sql"
db = Tocsin.open(ARGV[0])
db.execute("CREATE TABLE IF NOT EXISTS orders(id INTEGER PRIMARY KEY, total INTEGER)")
h = db.transaction do |tx|
  tx.execute("INSERT INTO orders(total) VALUES (990)")
  db.queue("billing").call("invoice", 1, kwargs: { total: 990 }, tx: tx)
end
puts "ruby: invoice task -> #{h.value(timeout: 10)}"
conn = SQLite3::Database.new(ARGV[0]); conn.busy_timeout = 5000
Tocsin::SQL.load(conn)
id = nil
conn.transaction do
  conn.execute("INSERT INTO orders(total) VALUES (45)")
  id = Tocsin::SQL.enqueue_envelope(conn, "billing", db.task_envelope("invoice", 2, kwargs: { total: 45 }))
end
puts "sqlite3 gem: enqueued job #{id} in its own transaction -> #{db.wait_result(id, timeout: 10).value}"
' "$DB"

# Python calls the Ruby task by name and reads its result
"$PY" - "$DB" <<'PY'
import sys, tocsin
db = tocsin.open(sys.argv[1])
print("python: invoice task ->", db.queue("billing").call("invoice", 3, kwargs={"total": 12}).get(timeout=10))
PY

# the worker's scheduler fires the periodic heartbeat; then INT/TERM stops it gracefully
$RUBY -e '
require "tocsin"
Tocsin.open(ARGV[0]) do |db|
  t = Time.now
  sleep 0.2 until (s = db.get_schedule("periodic:heartbeat")) && s.fired_count.positive? || Time.now - t > 10
  abort "ruby: the periodic heartbeat never fired" unless s&.fired_count&.positive?
  puts "ruby: the scheduler fired periodic:heartbeat #{s.fired_count} time(s)"
end' "$DB"
kill -TERM "$worker"
wait "$worker"
trap - EXIT
echo "== Ruby demo done"
