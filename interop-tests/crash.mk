# ---- crash suite and soak (interop-tests/crash, interop-tests/soak) ---------------
# Peers of four runtimes (Python, Node, Go, Ruby) on one .db, SIGKILLed at seeded
# random moments; SEED=n replays a kill schedule. The soak runs mixed load and checks
# resource growth. Both build the bindings from the checkout.
.PHONY: test-crash test-crash-slow test-crash-scen test-soak soak test-slow crash-peers

CRASH_DIR     := $(BUILD)/crash
CRASH_GO_PEER := $(BUILD)/crash-go-peer
CRASH_GO_SRC  := $(wildcard interop-tests/crash/peers/go/*.go interop-tests/crash/peers/go/go.*) \
                 $(wildcard $(GO_DIR)/*.go) $(GO_DIR)/tocsin_core.c $(GO_DIR)/tocsin.h
CRASH_KILLS      ?= 30
CRASH_SLOW_KILLS ?= 200

test: test-crash test-crash-scen test-soak
test-slow: test-crash-slow

$(CRASH_GO_PEER): $(CRASH_GO_SRC)
	@mkdir -p $(BUILD)
	cd interop-tests/crash/peers/go && $(GO) build -o $(abspath $@) .

crash-peers: deps python-venv $(NODE_ADDON) ruby-ext $(CRASH_GO_PEER)

test-crash: crash-peers
	$(PY_VENV)/bin/python interop-tests/crash/driver.py --kills $(CRASH_KILLS) --dir $(CRASH_DIR) $(if $(SEED),--seed $(SEED))

test-crash-slow: crash-peers
	$(PY_VENV)/bin/python interop-tests/crash/driver.py --kills $(CRASH_SLOW_KILLS) --dir $(CRASH_DIR) $(if $(SEED),--seed $(SEED))

# The cross-runtime worker scenarios (kill/term mid-run, scheduler leader restarts, unique
# keys, a burst within concurrency, priorities and delays): driver.py --scenarios.
test-crash-scen: crash-peers
	$(PY_VENV)/bin/python interop-tests/crash/driver.py --scenarios --dir $(BUILD)/crash-scen $(if $(SEED),--seed $(SEED))

SOAK_DIR     := $(BUILD)/soak
SOAK_SECONDS ?= 600
# The 60-second soak of `make test` (bounds in interop-tests/soak/soak.py).
test-soak: crash-peers
	SOAK_SECONDS=60 $(PY_VENV)/bin/python interop-tests/soak/soak.py --dir $(SOAK_DIR)

# The long soak, not in CI: SOAK_SECONDS=n to change its length.
soak: crash-peers
	SOAK_SECONDS=$(SOAK_SECONDS) $(PY_VENV)/bin/python interop-tests/soak/soak.py --dir $(SOAK_DIR)

# ---- the polyglot `make demo` (demo/run.sh): its Go worker, the Node addon and the
# Ruby extension, built before the demo's recipe runs.
DEMO_STOCK := $(BUILD)/demo-stock
demo: $(NODE_ADDON) ruby-ext $(DEMO_STOCK)
$(DEMO_STOCK): demo/go/main.go demo/go/go.mod $(wildcard $(GO_DIR)/*.go) $(GO_DIR)/tocsin_core.c $(GO_DIR)/tocsin.h
	@mkdir -p $(BUILD)
	cd demo/go && $(GO) build -o $(abspath $@) .
