#!/bin/sh
# Lays out this Go module (bindings/go) as a file-system GOPROXY serves it:
#   OUT/<module>/@v/{list,<ver>.info,<ver>.mod,<ver>.zip}
# (the zip holds <module>@<ver>/..., nested modules such as bench/ left out).
#   sh go-proxy.sh OUT
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
src=$root/bindings/go
out=${1:?usage: go-proxy.sh OUT}
mod=$(sed -n 's/^module //p' "$src/go.mod")
ver=v$(cat "$root/VERSION")
dir=$out/$mod/@v
rm -rf "$out" && mkdir -p "$dir"
python3 - "$src" "$dir/$ver.zip" "$mod@$ver" <<'PY'
import os, sys, zipfile
src, out, prefix = sys.argv[1:]
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for root, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if not os.path.exists(os.path.join(root, d, "go.mod")))
        for f in sorted(files):
            p = os.path.join(root, f)
            info = zipfile.ZipInfo(prefix + "/" + os.path.relpath(p, src), (2026, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with open(p, "rb") as fh:
                z.writestr(info, fh.read())
PY
cp "$src/go.mod" "$dir/$ver.mod"
printf '{"Version":"%s","Time":"2026-01-01T00:00:00Z"}\n' "$ver" > "$dir/$ver.info"
echo "$ver" > "$dir/list"
echo "go-proxy: $mod $ver in $out"
