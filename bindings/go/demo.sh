#!/bin/sh
# The Go part of `make demo`: Go calls a Python task, Python calls a Go task, on one file.
#   sh bindings/go/demo.sh BUILD_DIR PYTHON
set -eu
build=$1 py=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
db=$build/demo-go.db
rm -f "$db" "$db-wal" "$db-shm"
export DEMO_DB="$db"
echo "== tocsin demo, Go part, on $db"
(cd "$root/bindings/go" && go build -o "$build/demo-go-shop" ./examples/shop)
PYTHONPATH="$root/demo" "$py" -m tocsin worker tasks:db --queue emails --no-scheduler \
    --shutdown-timeout 2 --log-level warning &
worker=$!
trap 'kill "$worker" 2>/dev/null || true' EXIT
"$build/demo-go-shop" "$db" > "$build/demo-go.out" &
shop=$!
while ! grep -q "worker ready" "$build/demo-go.out" 2>/dev/null; do sleep 0.1; done
"$py" - <<PY
import os, tocsin
db = tocsin.open(os.environ["DEMO_DB"])
r = db.queue("go-invoices").call("invoice", kwargs={"order": 7, "total": 990}).get(timeout=30)
print("python: the Go worker ran invoice:", r)
db.notify("demo-go", {"thanks": r["invoice"]})
PY
wait "$shop"
cat "$build/demo-go.out"
