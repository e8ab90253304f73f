# ---- Node.js binding (bindings/node) ------------------------------------------
# Everything is installed from the package registry by npm, idempotently; node-gyp
# builds the addon (and better-sqlite3, which has no prebuild download here) against
# the headers of the Node that runs it when they are installed beside it.
NODE      ?= node
NPM       ?= npm
NODE_DIR  := bindings/node
NODE_PREFIX := $(shell $(NODE) -p "require('path').resolve(process.execPath, '..', '..')" 2>/dev/null)
NODE_GYP_ENV := $(if $(wildcard $(NODE_PREFIX)/include/node/node_api.h),npm_config_nodedir=$(NODE_PREFIX))
NODE_DEPS := $(NODE_DIR)/node_modules/.tocsin-deps
NODE_ADDON := $(NODE_DIR)/build/Release/tocsin.node
NODE_SRC  := $(wildcard $(NODE_DIR)/src/*) $(NODE_DIR)/binding.gyp $(CORE_SRC) $(CORE_HDR) core/src/tocsin_all.c

.PHONY: node-deps node-build test-node bench-node node-pack demo-node

test: test-node

$(NODE_DEPS): $(NODE_DIR)/package.json
	cd $(NODE_DIR) && $(NODE_GYP_ENV) $(NPM) install --ignore-scripts --no-audit --no-fund --loglevel=error
	cd $(NODE_DIR) && $(NODE_GYP_ENV) $(NPM) rebuild better-sqlite3 --loglevel=error
	touch $@

node-deps: $(NODE_DEPS)

# better-sqlite3 has no prebuild download here, so every install of it compiled its SQLite
# with node-gyp (~80 s each: the binding's, the npm pack test's, interop's, the bench
# peers'). The binding's build is packed once as a prebuild-install "local prebuild"; the
# later installs of the same version on the same Node unpack it instead of compiling (any
# other version or Node compiles as before).
NODE_BS3_DIR := $(abspath $(BUILD))/node-prebuilds
NODE_BS3 := $(NODE_BS3_DIR)/.packed
export npm_config_better_sqlite3_local_prebuilds := $(NODE_BS3_DIR)

$(NODE_BS3): $(NODE_DEPS)
	rm -rf $(NODE_BS3_DIR) && mkdir -p $(NODE_BS3_DIR)
	cd $(NODE_DIR)/node_modules/better-sqlite3 && tar -czf $(NODE_BS3_DIR)/$$($(NODE) -p \
		"const p = require('./package.json'); p.name + '-v' + p.version + '-node-v' + process.versions.modules + '-' + process.platform + '-' + process.arch + '.tar.gz'") \
		build/Release/better_sqlite3.node
	touch $@

$(NODE_DIR)/build/Makefile: $(NODE_DEPS) $(NODE_DIR)/binding.gyp
	cd $(NODE_DIR) && $(NODE) scripts/sync-core.js
	cd $(NODE_DIR) && $(NODE_GYP_ENV) npx --no-install node-gyp configure --loglevel=error

$(NODE_ADDON): $(NODE_DIR)/build/Makefile $(NODE_SRC)
	cd $(NODE_DIR) && $(NODE) scripts/sync-core.js
	cd $(NODE_DIR) && $(NODE_GYP_ENV) npx --no-install node-gyp build -j 2 --loglevel=error > /dev/null
	touch $@

node-build: $(NODE_ADDON)

# node:test over bindings/node/test; fails when it ran no test.
test-node: $(NODE_ADDON) $(NODE_BS3) python-venv
	@mkdir -p $(BUILD)
	cd $(NODE_DIR) && TOCSIN_TEST_PYTHON=$(abspath $(PY_VENV))/bin/python $(NODE_GYP_ENV) \
		$(NODE) --test --test-reporter=spec --test-reporter-destination=stdout \
		--test-reporter=tap --test-reporter-destination=$(abspath $(BUILD))/node-test.tap test/*.test.js
	@awk '/^# tests /{t=$$3} /^# fail /{f=$$3} END{ if (t+0 == 0) { print "test-node: no test ran"; exit 1 } if (f+0 > 0) exit 1; print "test-node: " t " tests" }' $(BUILD)/node-test.tap

bench-node: $(NODE_ADDON) $(NODE_BS3)
	cd $(NODE_DIR)/bench && $(NODE_GYP_ENV) $(NPM) install --no-audit --no-fund --loglevel=error > /dev/null
	$(NODE) $(NODE_DIR)/bench/bench.js

# The Node part of `make demo`: Node <-> Python tasks by name, a better-sqlite3 transaction.
demo: demo-node
demo-node: $(NODE_ADDON) python-venv
	rm -f $(BUILD)/demo-node.db $(BUILD)/demo-node.db-wal $(BUILD)/demo-node.db-shm
	DEMO_DB=$(abspath $(BUILD))/demo-node.db TOCSIN_PY=$(abspath $(PY_VENV))/bin/python $(NODE) $(NODE_DIR)/examples/demo.js
