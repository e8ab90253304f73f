# ---- the tocsin command-line tool and dashboard (cli/) ------------------------
# build/tocsin: the CLI, linked with the static core, SQLite and libmicrohttpd.
# make test-cli: the CLI suite (cli/test_cli.py) and the dashboard's browser test
# (cli/test_ui.js: Debian's chromium driven by playwright-core from npm).
CLI_SRC := cli/tocsin.c cli/collect.c cli/ui.c
CLI_HDR := cli/cli.h
CLI_OUT := $(BUILD)/cli-test
CLI_NODE := $(BUILD)/cli-node

.PHONY: cli cli-deps cli-browser-deps test-cli test-cli-unit test-cli-browser install-cli

cli: $(BUILD)/tocsin

# Debian packages the CLI needs, installed only when missing (root, no prompt).
cli-deps:
	@if [ ! -f /usr/include/microhttpd.h ]; then \
		echo "cli: installing libmicrohttpd-dev"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq libmicrohttpd-dev >/dev/null; fi

# The page and its script are embedded with .incbin (cli/ui.c): both are dependencies.
$(BUILD)/tocsin: $(CLI_SRC) $(CLI_HDR) cli/dashboard.html cli/dashboard.js $(BUILD)/libtocsin.a | cli-deps
	$(CC) $(WARN) $(CFLAGS) -Icore/include -Icli $(CLI_SRC) $(BUILD)/libtocsin.a -o $@ \
		-lmicrohttpd $(LIBS)

cli-browser-deps:
	@if [ ! -x /usr/bin/chromium ]; then \
		echo "cli: installing chromium"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq chromium >/dev/null; fi
	@if [ ! -d $(CLI_NODE)/node_modules/playwright-core ]; then \
		mkdir -p $(CLI_NODE) && cd $(CLI_NODE) && \
		{ [ -f package.json ] || echo '{"name":"tocsin-cli-test","private":true}' > package.json; } && \
		npm install --silent --no-audit --no-fund playwright-core@1 >/dev/null; fi

test-cli: test-cli-unit test-cli-browser

test-cli-unit: $(BUILD)/tocsin $(BUILD)/tocsin.so
	$(PYTHON) cli/test_cli.py $(BUILD)/tocsin $(CLI_OUT) $(BUILD)/tocsin.so

test-cli-browser: $(BUILD)/tocsin $(BUILD)/tocsin.so cli-browser-deps
	mkdir -p $(CLI_OUT)
	NODE_PATH=$(abspath $(CLI_NODE))/node_modules node cli/test_ui.js $(BUILD)/tocsin $(CLI_OUT) $(BUILD)/tocsin.so

BINDIR ?= $(PREFIX)/bin
install-cli: $(BUILD)/tocsin
	install -d $(DESTDIR)$(BINDIR)
	install -m 755 $(BUILD)/tocsin $(DESTDIR)$(BINDIR)/tocsin

test: test-cli
install: install-cli
