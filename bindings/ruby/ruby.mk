# ---- Ruby binding (bindings/ruby) ---------------------------------------------
# Ruby and its libraries come from Debian's packages (no gem registry is needed):
# ruby-deps installs them once, only when missing. The extension is built out of
# tree in $(BUILD)/ruby with mkmf, against the checkout's core.
.PHONY: ruby-deps ruby-ext test-ruby bench-ruby ruby-gem demo-ruby

RUBY        ?= ruby
RB_DIR      := bindings/ruby
RB_BUILD    := $(BUILD)/ruby
RB_PKGS     := ruby ruby-dev ruby-sqlite3 ruby-minitest ruby-activejob ruby-async
RB_SRC      := $(wildcard $(RB_DIR)/ext/tocsin/*.c $(RB_DIR)/ext/tocsin/*.rb $(RB_DIR)/ext/tocsin_sqlite/*.rb) \
               $(CORE_SRC) $(CORE_HDR)
RB_NATIVE   := $(RB_BUILD)/lib/tocsin/tocsin_native.so
RB_LOADABLE := $(RB_BUILD)/lib/tocsin/sqlite/tocsin.so

test: test-ruby
demo: demo-ruby

# Installs the Debian packages that are missing (non-interactive; apt-get update once).
ruby-deps:
	@missing=""; for p in $(RB_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "ruby-deps: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(RB_NATIVE): $(RB_SRC) | ruby-deps
	@mkdir -p $(RB_BUILD)/native $(RB_BUILD)/lib/tocsin
	@# mkmf knows tocsin_all.c only, not the core files it includes
	@if [ -n "$(filter $(CORE_SRC) $(CORE_HDR),$?)" ]; then rm -f $(RB_BUILD)/native/tocsin_all.o; fi
	cd $(RB_BUILD)/native && $(RUBY) $(abspath $(RB_DIR))/ext/tocsin/extconf.rb --with-tocsin-core=$(abspath core) >/dev/null \
	  && $(MAKE) --no-print-directory -s V=0 >/dev/null
	cp $(RB_BUILD)/native/tocsin_native.so $@

$(RB_LOADABLE): $(CORE_SRC) $(CORE_HDR) $(RB_DIR)/ext/tocsin_sqlite/extconf.rb | ruby-deps
	@mkdir -p $(RB_BUILD)/sqlite $(RB_BUILD)/lib/tocsin/sqlite
	@if [ -n "$(filter $(CORE_SRC) $(CORE_HDR),$?)" ]; then rm -f $(RB_BUILD)/sqlite/tocsin_all.o; fi
	cd $(RB_BUILD)/sqlite && $(RUBY) $(abspath $(RB_DIR))/ext/tocsin_sqlite/extconf.rb --with-tocsin-core=$(abspath core) >/dev/null \
	  && $(MAKE) --no-print-directory -s V=0 >/dev/null
	cp $(RB_BUILD)/sqlite/tocsin.so $@

ruby-ext: $(RB_NATIVE) $(RB_LOADABLE)

# The minitest suite (prints its count; zero tests fails). TOCSIN_RUBY_LIB puts the
# freshly built extension first on the load path.
test-ruby: ruby-ext python-venv
	cd $(RB_DIR) && TOCSIN_BUILD=$(abspath $(BUILD)) TOCSIN_RUBY_LIB=$(abspath $(RB_BUILD))/lib \
	  $(RUBY) -Ilib -I$(abspath $(RB_BUILD))/lib test/run.rb

# Single-job enqueue and claim+ack: Ruby beside raw sqlite3-gem SQL (same run) and C.
bench-ruby: ruby-ext $(BUILD)/bench_core
	cd $(RB_DIR) && $(RUBY) -Ilib -I$(abspath $(RB_BUILD))/lib bench/bench_ruby.rb --bench-core $(abspath $(BUILD))/bench_core

demo-ruby: ruby-ext python-venv
	BUILD=$(abspath $(BUILD)) sh $(RB_DIR)/demo/run.sh
