#!/bin/sh
# `go get` from a clean module cache: packs this module as a file-system GOPROXY
# (module zip, as the module proxy serves it), then builds and runs an example program
# in a temporary module that requires it, with an empty GOMODCACHE.
#   sh test-module.sh WORKDIR
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=${1:?usage: test-module.sh WORKDIR}
mod=$(sed -n 's/^module //p' "$here/go.mod")
ver=v$(cat "$here/../../VERSION")
rm -rf "$work" && mkdir -p "$work/app" "$work/modcache"
sh "$here/go-proxy.sh" "$work/proxy" > /dev/null
cat > "$work/app/go.mod" <<EOM
module example.com/app

go 1.23

require $mod $ver
EOM
cat > "$work/app/main.go" <<EOM
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	tocsin "$mod"
)

func main() {
	ctx := context.Background()
	db, err := tocsin.Open(filepath.Join(os.Args[1], "app.db"), nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	q := db.Queue("emails")
	if _, err := q.Enqueue(ctx, map[string]string{"to": "ann@example.com"}, nil); err != nil {
		panic(err)
	}
	j, err := q.ClaimOne(ctx, "w1", 0)
	if err != nil {
		panic(err)
	}
	fmt.Printf("claimed %s on tocsin %s, SQLite %s\n", j.Payload, tocsin.Version(), tocsin.SQLite().Version)
	if err := q.Ack(ctx, j); err != nil {
		panic(err)
	}
}
EOM
upstream=$(go env GOPROXY)
cd "$work/app"
GODEBUG=goindex=0 GOMODCACHE="$work/modcache" GOPROXY="file://$work/proxy,$upstream" GONOSUMDB="$mod" GONOSUMCHECK=1 \
    GOFLAGS=-mod=mod GOSUMDB=off go build -o "$work/app/app" .
"$work/app/app" "$work" | grep 'claimed {"to":"ann@example.com"}'
chmod -R u+w "$work/modcache"
echo "go-module: built and ran an example from a clean module cache ($mod $ver)"
