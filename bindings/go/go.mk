# ---- Go binding (bindings/go): its own module, the core committed beside it ----------
GO       ?= go
GO_DIR   := bindings/go
GO_ENV   := cd $(GO_DIR) &&
STATICCHECK_VERSION ?= v0.8.2
GO_TOOLS := $(abspath $(BUILD))/go-tools

.PHONY: sync-core sync-core-check test-go bench-go go-vet go-staticcheck test-go-module demo-go

test: test-go

# Copies core/ into the module (tocsin.h + the unity file tocsin_core.c).
sync-core:
	sh $(GO_DIR)/sync-core.sh

sync-core-check:
	sh $(GO_DIR)/sync-core.sh --check

go-vet:
	$(GO_ENV) $(GO) vet -tags libsqlite3 ./...
	@out=$$(cd $(GO_DIR) && gofmt -l .); if [ -n "$$out" ]; then echo "gofmt -l:"; echo "$$out"; exit 1; fi

# staticcheck from the module proxy when it installs; skipped (said so) when it does not.
go-staticcheck:
	@if [ ! -x $(GO_TOOLS)/staticcheck ]; then \
		GOBIN=$(GO_TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) 2>/dev/null \
		|| echo "staticcheck: did not install, skipped"; fi
	@if [ -x $(GO_TOOLS)/staticcheck ]; then echo "staticcheck ./..."; $(GO_ENV) $(GO_TOOLS)/staticcheck -tags libsqlite3 ./...; fi

# The Python venv is needed by the cross-runtime tests (a Python worker runs Go's calls);
# -tags libsqlite3 builds mattn/go-sqlite3 (a test dependency) on the system SQLite.
GO_TEST_LOG := $(abspath $(BUILD))/go-test.log
test-go: sync-core-check go-vet go-staticcheck python-venv
	@mkdir -p $(BUILD)
	sh $(GO_DIR)/check-readme.sh
	@rc=0; $(GO_ENV) TOCSIN_TEST_PYTHON=$(abspath $(PY_VENV))/bin/python $(GO) test -race -count=1 -tags libsqlite3 -v ./... > $(GO_TEST_LOG) 2>&1 || rc=$$?; \
	grep -E '^(ok|FAIL|panic:|--- FAIL|\s+--- FAIL|\s+\S+_test.go:[0-9]+:)' $(GO_TEST_LOG); \
	p=$$(grep -cE '^\s*--- PASS' $(GO_TEST_LOG)); f=$$(grep -cE '^\s*--- FAIL' $(GO_TEST_LOG)); s=$$(grep -cE '^\s*--- SKIP' $(GO_TEST_LOG)); \
	echo "go: $$p passed, $$f failed, $$s skipped"; \
	[ $$rc -eq 0 ] && [ $$p -gt 0 ]
	@echo "go: the unsafe setup (mattn/go-sqlite3 with its bundled SQLite) is refused at Open:"
	$(GO_ENV) $(GO) run ./internal/bundledcheck
	@echo "go: a second copy of SQLite loaded as a shared object is refused at Open:"
	$(GO_ENV) $(GO) run ./internal/copycheck
	sh $(GO_DIR)/test-module.sh $(abspath $(BUILD))/go-module

# go get from a clean module cache: a temporary module requires ours through a
# file-system GOPROXY and builds and runs an example program.
test-go-module:
	sh $(GO_DIR)/test-module.sh $(abspath $(BUILD))/go-module

# testing.B figures of the Go binding beside the C core (same process) and the Go peers
# goqite and River (riversqlite); the peers live in the bench-only module bindings/go/bench.
bench-go: deps
	cd $(GO_DIR)/bench && $(GO) run -tags libsqlite3 . -dir $(abspath $(BUILD))

demo: demo-go
demo-go: python-venv
	sh $(GO_DIR)/demo.sh $(abspath $(BUILD)) $(abspath $(PY_VENV))/bin/python
