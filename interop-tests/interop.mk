# ---- `make dist` and the polyglot interop matrix (interop-tests/matrix) --------------
# dist/ gets every artefact a user installs; test-interop installs each into a clean
# environment under $(BUILD)/interop and runs the matrix from those installs only.
# See interop-tests/README.md.
DIST      ?= dist
IOP       := $(BUILD)/interop
IOP_ABS    = $(abspath $(IOP))
DIST_ABS   = $(abspath $(DIST))
MATRIX    := interop-tests/matrix
GO_MOD    := $(shell sed -n 's/^module //p' bindings/go/go.mod)
GO_PROXY_UP := $(shell $(GO) env GOPROXY 2>/dev/null)
# GODEBUG=goindex=0: Go's module index (in the shared GOCACHE) keys a module-cache folder by
# its path alone, taking it as immutable; v$(VERSION) is rewritten here at each change, so an
# index from an earlier run of this checkout would describe old files (stale imports, a
# missing file: "could not import os (open : no such file or directory)").
GO_IOP_ENV = GODEBUG=goindex=0 GOMODCACHE=$(IOP_ABS)/go/modcache GOPROXY=file://$(DIST_ABS)/goproxy,$(GO_PROXY_UP) \
             GONOSUMDB=$(GO_MOD) GONOSUMCHECK=1 GOFLAGS=-mod=mod GOPATH=$(IOP_ABS)/go/path
C_PREFIX   = $(IOP_ABS)/c/usr/local
PY_WHEEL_SRC := $(PY_SRC)
NODE_PKG_SRC := $(wildcard $(NODE_DIR)/lib/*.js $(NODE_DIR)/lib/*.mjs $(NODE_DIR)/bin/*) $(NODE_DIR)/package.json \
                $(NODE_DIR)/index.d.ts
RB_GEM_SRC := $(RB_SRC) $(wildcard $(RB_DIR)/lib/*.rb $(RB_DIR)/lib/*/*.rb $(RB_DIR)/lib/*/*/*.rb $(RB_DIR)/exe/*) \
              $(RB_DIR)/tocsin.gemspec
GO_MOD_SRC := $(wildcard bindings/go/*.go bindings/go/*.c bindings/go/*.h bindings/go/internal/*/*.go) bindings/go/go.mod bindings/go/go.sum

.PHONY: dist dist-python dist-npm dist-gem dist-go dist-c interop-install test-interop test-slow test-python-versions

test: test-interop
test-slow: test-python-versions

dist: dist-python dist-npm dist-gem dist-go dist-c
	@echo "dist: artefacts in $(DIST)/"; cd $(DIST) && find . -type f ! -name '.stamp' | sort | sed 's/^/  /'

dist-python: $(DIST)/python/.stamp
dist-npm: $(DIST)/npm/.stamp
dist-gem: $(DIST)/gem/.stamp
dist-go: $(DIST)/goproxy/.stamp
dist-c: $(DIST)/c/.stamp

# sdist + wheel (python-dist builds the wheel from the sdist)
$(DIST)/python/.stamp: $(PY_WHEEL_SRC)
	$(MAKE) --no-print-directory BUILD=$(BUILD) python-dist
	rm -rf $(DIST)/python && mkdir -p $(DIST)/python
	cp $(BUILD)/python-dist/*.tar.gz $(BUILD)/python-dist/*.whl $(DIST)/python/
	touch $@

# the npm pack tarball (prepack syncs the core and ships the built addon as a prebuild)
$(DIST)/npm/.stamp: $(NODE_ADDON) $(NODE_PKG_SRC)
	rm -rf $(DIST)/npm && mkdir -p $(DIST)/npm
	cd $(NODE_DIR) && $(NPM) pack --loglevel=error --pack-destination $(DIST_ABS)/npm > /dev/null
	touch $@

# the .gem (the gemspec copies the core into ext/tocsin/core, git-ignored)
$(DIST)/gem/.stamp: $(RB_GEM_SRC) | ruby-deps
	rm -rf $(DIST)/gem && mkdir -p $(DIST)/gem
	cd $(RB_DIR) && gem build --silent tocsin.gemspec --output $(DIST_ABS)/gem/tocsin-$(VERSION).gem
	touch $@

# the Go module as the module proxy serves it (zip, .mod, .info, list)
$(DIST)/goproxy/.stamp: $(GO_MOD_SRC) $(GO_DIR)/go-proxy.sh
	sh $(GO_DIR)/go-proxy.sh $(DIST)/goproxy
	touch $@

# the C library, header, tocsin.pc and the extension: a `make install` tree, as a tarball
$(DIST)/c/.stamp: $(BUILD)/libtocsin.a $(BUILD)/libtocsin.so $(BUILD)/tocsin.so tools/pkg/tocsin.pc.in
	rm -rf $(DIST)/c $(IOP)/stage && mkdir -p $(DIST)/c
	$(MAKE) --no-print-directory BUILD=$(BUILD) install DESTDIR=$(IOP_ABS)/stage PREFIX=/usr/local > /dev/null
	tar -czf $(DIST)/c/tocsin-$(VERSION)-c.tar.gz -C $(IOP)/stage usr
	cp $(BUILD)/tocsin.so $(DIST)/c/tocsin.so
	rm -rf $(IOP)/stage
	touch $@

# ---- installs into clean environments under $(BUILD)/interop ----
$(IOP)/venv/.stamp: $(DIST)/python/.stamp
	rm -rf $(IOP)/venv && mkdir -p $(IOP)
	$(PYTHON) -m venv $(IOP)/venv
	$(IOP)/venv/bin/pip install -q --disable-pip-version-check --no-index --no-deps $(DIST)/python/tocsin-*.whl
	$(IOP)/venv/bin/pip install -q --disable-pip-version-check sqlalchemy
	touch $@

$(IOP)/npm/.stamp: $(DIST)/npm/.stamp $(NODE_BS3)
	rm -rf $(IOP)/npm && mkdir -p $(IOP)/npm
	printf '{"name":"tocsin-interop","version":"1.0.0","private":true}\n' > $(IOP)/npm/package.json
	cd $(IOP)/npm && $(NODE_GYP_ENV) $(NPM) install --no-audit --no-fund --loglevel=error $(DIST_ABS)/npm/tocsin-$(VERSION).tgz better-sqlite3@12 > /dev/null
	touch $@

$(IOP)/gems/.stamp: $(DIST)/gem/.stamp
	rm -rf $(IOP)/gems && mkdir -p $(IOP)/gems
	GEM_HOME=$(IOP_ABS)/gems GEM_PATH=$(IOP_ABS)/gems gem install --local --no-document --silent $(DIST)/gem/tocsin-$(VERSION).gem
	touch $@

$(IOP)/go/agent: $(DIST)/goproxy/.stamp $(MATRIX)/go/main.go
	rm -rf $(IOP)/go/src && mkdir -p $(IOP)/go/src
	@# the module's version stays v$(VERSION) while its source changes: drop the cached copy
	chmod -R u+w $(IOP)/go/modcache 2>/dev/null || true
	rm -rf $(IOP)/go/modcache/$(GO_MOD)@v$(VERSION) $(IOP)/go/modcache/cache/download/$(GO_MOD)
	cp $(MATRIX)/go/main.go $(IOP)/go/src/
	printf 'module example.com/interop-agent\n\ngo 1.23\n\nrequire $(GO_MOD) v$(VERSION)\n' > $(IOP)/go/src/go.mod
	cd $(IOP)/go/src && $(GO_IOP_ENV) $(GO) get $(GO_MOD)@v$(VERSION) github.com/mattn/go-sqlite3 2>&1 | grep -v '^go: ' || true
	cd $(IOP)/go/src && $(GO_IOP_ENV) $(GO) build -tags libsqlite3 -o $(IOP_ABS)/go/agent .
	chmod -R u+w $(IOP)/go/modcache

$(IOP)/c/.stamp: $(DIST)/c/.stamp
	rm -rf $(IOP)/c && mkdir -p $(IOP)/c
	tar -xzf $(DIST)/c/tocsin-$(VERSION)-c.tar.gz -C $(IOP)/c
	touch $@

$(IOP)/c/agent: $(IOP)/c/.stamp $(MATRIX)/c/agent.c
	$(CC) $(WARN) -O1 -g $(MATRIX)/c/agent.c -o $@ \
		$$(PKG_CONFIG_PATH=$(C_PREFIX)/lib/pkgconfig pkg-config --define-variable=prefix=$(C_PREFIX) --cflags --libs tocsin) \
		-Wl,-rpath,$(C_PREFIX)/lib -lpthread -ldl

interop-install: deps $(IOP)/venv/.stamp $(IOP)/npm/.stamp $(IOP)/gems/.stamp $(IOP)/go/agent $(IOP)/c/agent

# The matrix: one agent per runtime from the installs above, every ordered pair.
# PAIR=python,node runs one pair (both orders); SEED=n replays the random names.
test-interop: dist interop-install
	IOP=$(IOP_ABS) C_PREFIX=$(C_PREFIX) $(IOP)/venv/bin/python $(MATRIX)/driver.py

# ---- the Python package on every CPython 3.9-3.13 of pyenv (from the sdist) ----
test-python-versions: $(DIST)/python/.stamp
	sh $(MATRIX)/python-versions.sh $(DIST)/python $(IOP)/pyversions
