#!/bin/sh
# Every ```go block of README.md that defines an Example must be in example_test.go verbatim.
set -eu
cd "$(dirname "$0")"
python3 - <<'PY'
import re, sys
readme = open("README.md").read()
tests = open("example_test.go").read()
blocks = [b for b in re.findall(r"```go\n(.*?)```", readme, re.S)
          if "func Example" in b or "func exampleDB" in b]
bad = [b.splitlines()[0] for b in blocks if b.strip() not in tests]
if not any("func exampleDB" in b for b in blocks) or bad:
    sys.exit("bindings/go/README.md examples differ from example_test.go: %s" % (bad or "none found"))
print("README: %d examples match example_test.go" % len(blocks))
PY
