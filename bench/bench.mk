# ---- benchmarks beside the peers (bench/) ----------------------------------------
# `make bench` runs every runtime's tocsin beside its peers and raw SQL in one session
# (bench/run.py) and regenerates bench/results/latest.json, the charts there and the
# table in bench/README.md. `make bench-quick` runs the same code paths with fewer and
# shorter runs into $(BUILD)/bench-quick (a smoke check in `make test`: it fails when a
# workload errors or produced no figure; it asserts no speed).
# The peers live in bench-only environments: a venv ($(BUILD)/bench-venv: honker, huey,
# matplotlib, tocsin from the checkout), a second one with honker built from its sdist
# with its experimental watcher features, bench/peers/node (plainjob, better-sqlite3) and
# the Go module bench/peers/go (goqite, River).
.PHONY: bench-run bench-quick test-bench-quick bench-deps bench-python-env

BENCH_VENV    := $(BUILD)/bench-venv
BENCH_HKVENV  := $(BUILD)/bench-venv-hkfeat
BENCH_PIP     := --disable-pip-version-check -q

bench: bench-run
test: test-bench-quick

$(BENCH_VENV)/.peers: bench/peers/python/requirements.txt
	@mkdir -p $(BUILD)
	@[ -x $(BENCH_VENV)/bin/python ] || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install $(BENCH_PIP) -r bench/peers/python/requirements.txt
	touch $@

$(BENCH_VENV)/.tocsin: $(BENCH_VENV)/.peers $(PY_SRC)
	$(BENCH_VENV)/bin/pip install $(BENCH_PIP) --no-build-isolation --force-reinstall --no-deps ./bindings/python
	touch $@

# honker with its kernel-watcher and shm-fast-path cargo features, built from the sdist
# (cargo); when it does not build, its rows are left out and the driver says so.
$(BENCH_HKVENV)/.done:
	@mkdir -p $(BUILD)
	@[ -x $(BENCH_HKVENV)/bin/python ] || $(PYTHON) -m venv $(BENCH_HKVENV)
	@if MATURIN_PEP517_ARGS="--features kernel-watcher,shm-fast-path" \
	    $(BENCH_HKVENV)/bin/pip install $(BENCH_PIP) --no-binary honker honker==0.2.4 > $(BUILD)/bench-hkfeat.log 2>&1; \
	then echo "bench: honker with kernel-watcher,shm-fast-path built"; \
	else echo "bench: honker with its watcher features did not build (see $(BUILD)/bench-hkfeat.log)"; \
	  rm -rf $(BENCH_HKVENV); mkdir -p $(BENCH_HKVENV); fi
	touch $@

bench-python-env: $(BENCH_VENV)/.tocsin $(BENCH_HKVENV)/.done

bench-deps: deps bench-python-env

bench-run: bench-deps
	BENCH_BUILD=$(abspath $(BUILD)) $(BENCH_VENV)/bin/python bench/run.py --mode full \
		--out bench/results --readme bench/README.md

bench-quick: bench-deps
	BENCH_BUILD=$(abspath $(BUILD)) $(BENCH_VENV)/bin/python bench/run.py --mode quick \
		--out $(BUILD)/bench-quick

test-bench-quick: bench-quick

# C: the core's API beside raw SQL through the C sqlite3 API
$(BUILD)/bench_peers_c: bench/peers/c/runner.c $(BUILD)/libtocsin.a
	$(CC) $(WARN) -O2 -Icore/include bench/peers/c/runner.c $(BUILD)/libtocsin.a -o $@ $(LIBS)

# Go: the bench module bench/peers/go (the binding, goqite, River, mattn/go-sqlite3)
$(BUILD)/bench-peers-go: bench/peers/go/main.go bench/peers/go/go.mod $(wildcard $(GO_DIR)/*.go $(GO_DIR)/tocsin_core.c)
	cd bench/peers/go && $(GO) build -tags libsqlite3 -o $(abspath $@) .

# Node: the binding's addon, and plainjob + better-sqlite3 in bench/peers/node
BENCH_NODE_DEPS := bench/peers/node/node_modules/.installed
$(BENCH_NODE_DEPS): bench/peers/node/package.json $(NODE_BS3)
	cd bench/peers/node && $(NODE_GYP_ENV) $(NPM) install --no-audit --no-fund --loglevel=error
	touch $@

bench-deps: $(BUILD)/bench_peers_c $(BUILD)/bench-peers-go $(NODE_ADDON) $(BENCH_NODE_DEPS)
bench-deps: ruby-ext
