#!/bin/sh
# The polyglot demo on a local .db: writers and workers in different runtimes
# share one SQLite file. Run through `make demo`.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DB=${DEMO_DB:-$BUILD/demo.db}
rm -f "$DB" "$DB-wal" "$DB-shm"
echo "== tocsin demo on $DB"

# 1. A C program writes an order + job + event + notification in one transaction.
"$BUILD/demo_shop" "$DB" "teapot"
"$BUILD/demo_shop" "$DB" "kettle"

# 2. Any SQLite client with the extension is a worker: claim, do the work, ack.
sqlite3 -batch "$DB" <<SQL
.load $BUILD/tocsin.so
.mode list
SELECT 'sqlite3 worker: claimed job ' || json_extract(value, '\$.id') || ' (' ||
       json_extract(value, '\$.payload.item') || '), ack -> ' ||
       tocsin_ack(json_extract(value, '\$.id'), json_extract(value, '\$.token'))
  FROM json_each(tocsin_claim('emails', 'sqlite3-worker', 10, 30000));
SELECT 'sqlite3 reader: stream event ' || json_extract(value, '\$.offset') || ' ' ||
       json_extract(value, '\$.payload')
  FROM json_each(tocsin_stream_read('orders', tocsin_stream_offset('audit', 'orders'), 100));
SELECT 'sqlite3 reader: saved offset ' || tocsin_stream_save_offset('audit', 'orders', 2);
SELECT 'sqlite3 listener: notification ' || json_extract(value, '\$.id') || ' ' ||
       json_extract(value, '\$.payload')
  FROM json_each(tocsin_notify_read('orders', 0, 100));
SELECT 'queue stats: ' || tocsin_stats('emails');
SQL
echo "== demo done"
