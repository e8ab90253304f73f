# tocsin developer and CI entry points. `make test` and `make demo` do all set-up.
CC      ?= cc
BUILD   ?= build
VERSION := $(shell cat VERSION)
SOMAJOR := $(firstword $(subst ., ,$(VERSION)))
WARN    := -std=c11 -Wall -Wextra -Werror
CFLAGS  ?= -O2 -g
# Only TOCSIN_API functions (tocsin.h) leave a shared object; the extension
# exports sqlite3_tocsin_init alone (make test-exports checks both).
VIS     := -fvisibility=hidden
ALL_CFLAGS := $(WARN) $(CFLAGS) $(VIS) -fPIC -Icore/include -Icore/src
SAN     := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
LIBS    := -lsqlite3 -lpthread

CORE_SRC := $(filter-out core/src/tocsin_all.c,$(wildcard core/src/*.c))
CORE_HDR := core/include/tocsin.h core/src/internal.h
TEST_SRC := $(wildcard core/test/*.c)
TEST_HDR := $(wildcard core/test/*.h)

.PHONY: all lib ext install test test-exports test-ctest test-consumer test-pedantic test-c test-san test-sql test-golden test-header test-readme check-version deps demo bench bench-c bench-wake clean fuzz-cron \
        test-python bench-python python-venv python-dist

all: lib ext

lib: $(BUILD)/libtocsin.a $(BUILD)/libtocsin.so
ext: $(BUILD)/tocsin.so

deps:
	@sh tools/deps.sh

$(BUILD):
	@mkdir -p $(BUILD)

$(BUILD)/tocsin_all.o: $(CORE_SRC) $(CORE_HDR) core/src/tocsin_all.c | $(BUILD)
	$(CC) $(ALL_CFLAGS) -c core/src/tocsin_all.c -o $@

$(BUILD)/libtocsin.a: $(BUILD)/tocsin_all.o
	rm -f $@ && ar rcs $@ $^

# soname libtocsin.so.<major>, as the CMake build and `make install` lay it out.
$(BUILD)/libtocsin.so: $(BUILD)/tocsin_all.o
	$(CC) -shared -Wl,-soname,libtocsin.so.$(SOMAJOR) -o $@ $^ $(LIBS)
	ln -sf libtocsin.so $(BUILD)/libtocsin.so.$(SOMAJOR)

# The loadable extension: the same code calling SQLite through the host's routines.
$(BUILD)/tocsin.so: $(CORE_SRC) $(CORE_HDR) core/src/tocsin_all.c | $(BUILD)
	$(CC) $(ALL_CFLAGS) -DTOCSIN_EXTENSION -shared core/src/tocsin_all.c -o $@ -lpthread

$(BUILD)/test_core: $(TEST_SRC) $(TEST_HDR) $(BUILD)/libtocsin.a
	$(CC) $(ALL_CFLAGS) $(TEST_SRC) $(BUILD)/libtocsin.a -o $@ $(LIBS)

$(BUILD)/test_core_san: $(TEST_SRC) $(TEST_HDR) $(CORE_SRC) $(CORE_HDR) | $(BUILD)
	$(CC) $(WARN) $(SAN) $(VIS) -Icore/include -Icore/src $(TEST_SRC) core/src/tocsin_all.c -o $@ $(LIBS)

test: deps all check-version test-header test-pedantic test-exports test-c test-san test-tsan test-sql test-sql-property test-golden \
      test-readme test-ctest test-consumer test-python

# A shared object that looks like a copy of SQLite with hidden symbols (the copy check's test).
$(BUILD)/fake_sqlite_copy.so: core/test/fake/fake_copy.c | $(BUILD)
	$(CC) $(WARN) -fPIC -shared $< -o $@

# TOCSIN_TEST_EXT: the loadable extension, a second copy of the core in the suite's process
test-c: $(BUILD)/test_core $(BUILD)/tocsin.so $(BUILD)/fake_sqlite_copy.so
	TOCSIN_TEST_EXT=$(BUILD)/tocsin.so TOCSIN_TEST_FAKE_COPY=$(BUILD)/fake_sqlite_copy.so $(BUILD)/test_core

# The extension the sanitized suite loads is sanitized too: a use after free
# inside it (on a host's connection) is then reported, not silently survived.
$(BUILD)/san/tocsin.so: $(CORE_SRC) $(CORE_HDR) core/src/tocsin_all.c | $(BUILD)
	@mkdir -p $(BUILD)/san
	$(CC) $(WARN) $(SAN) $(VIS) -fPIC -Icore/include -Icore/src -DTOCSIN_EXTENSION -shared core/src/tocsin_all.c -o $@ -lpthread

test-san: $(BUILD)/test_core_san $(BUILD)/san/tocsin.so $(BUILD)/fake_sqlite_copy.so
	TOCSIN_TEST_EXT=$(BUILD)/san/tocsin.so TOCSIN_TEST_FAKE_COPY=$(BUILD)/fake_sqlite_copy.so ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(BUILD)/test_core_san

# The thread model under ThreadSanitizer: one handle from 8 threads, transaction handles;
# and the worker protocol (finishes from other threads, the fork handlers' lock order).
$(BUILD)/test_core_tsan: $(TEST_SRC) $(TEST_HDR) $(CORE_SRC) $(CORE_HDR) | $(BUILD)
	$(CC) $(WARN) -O1 -g -fsanitize=thread $(VIS) -Icore/include -Icore/src $(TEST_SRC) core/src/tocsin_all.c -o $@ $(LIBS)

test-tsan: $(BUILD)/test_core_tsan
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 $(BUILD)/test_core_tsan threads
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 $(BUILD)/test_core_tsan worker

test-sql: $(BUILD)/tocsin.so
	sh core/test/sql/run.sh $(BUILD)/tocsin.so
	sh core/test/sql/open_race.sh $(BUILD)/tocsin.so

# Random (hostile) calls of the SQL surface against a model; prints its seed (SEED=n replays).
.PHONY: test-sql-property
test-sql-property: $(BUILD)/tocsin.so
	$(PYTHON) core/test/sql/property.py $(BUILD)/tocsin.so

# Pins the outputs of the SQL surface (docs/sql.md) through the sqlite3 shell.
test-golden: $(BUILD)/tocsin.so
	sh core/test/sql/golden.sh $(BUILD)/tocsin.so

# The public header must compile as C11 (pedantic) and as C++.
test-header: | $(BUILD)
	printf '#include "tocsin.h"\nint main(void){return tocsin_version_number() < 0;}\n' > $(BUILD)/hdr.c
	$(CC) -std=c11 -pedantic -Wall -Wextra -Werror -Icore/include -c $(BUILD)/hdr.c -o $(BUILD)/hdr_c.o
	cp $(BUILD)/hdr.c $(BUILD)/hdr.cpp
	c++ -std=c++11 -pedantic -Wall -Wextra -Werror -Icore/include -c $(BUILD)/hdr.cpp -o $(BUILD)/hdr_cpp.o

# The README's C example must compile and run.
test-readme: $(BUILD)/libtocsin.a $(BUILD)/tocsin.so
	mkdir -p $(BUILD)/readme && rm -f $(BUILD)/readme/app.db*
	awk '/^```c$$/{f=1;next}/^```$$/{f=0}f' README.md > $(BUILD)/readme/app.c
	$(CC) $(WARN) -Icore/include $(BUILD)/readme/app.c $(BUILD)/libtocsin.a -o $(BUILD)/readme/app $(LIBS)
	cd $(BUILD)/readme && ./app | grep -q 'sending {"to":"ann@example.com"}'
	awk '/^```sql$$/{f=1;next}/^```$$/{f=0}f' README.md | sed 's|^\.load build/|.load $(BUILD)/|' > $(BUILD)/readme/app.sql
	rm -f $(BUILD)/readme/sql.db* && sqlite3 -bail $(BUILD)/readme/sql.db < $(BUILD)/readme/app.sql > $(BUILD)/readme/sql.out
	test "$$(sed -n 4p $(BUILD)/readme/sql.out)" = 1 && grep -q '"pending":0,"scheduled":0,"processing":0' $(BUILD)/readme/sql.out

# What each shared object exports (tools/check-exports): libtocsin.so only the
# TOCSIN_API functions, each extension only sqlite3_tocsin_init, the CPython
# module only PyInit__tocsin.
test-exports: $(BUILD)/libtocsin.so $(BUILD)/tocsin.so python-venv
	sh tools/check-exports lib core/include/tocsin.h $(BUILD)/libtocsin.so
	sh tools/check-exports only $(BUILD)/tocsin.so sqlite3_tocsin_init
	$(PY_VENV)/bin/python -c 'import tocsin._tocsin as m, tocsin.ext as e; print(m.__file__); print(e.loadable_path())' > $(BUILD)/py-modules.txt
	sh tools/check-exports only "$$(sed -n 1p $(BUILD)/py-modules.txt)" PyInit__tocsin
	sh tools/check-exports only "$$(sed -n 2p $(BUILD)/py-modules.txt)" sqlite3_tocsin_init

# The CMake build in a fresh build directory: configure, build, ctest (run there).
test-ctest: deps
	sh tools/test-ctest

# Installs with CMake and with `make install` into temporary prefixes, then builds
# core/test/consumer against each through find_package and pkg-config (shared and
# static) and runs it; also .loads each installed extension into the sqlite3 shell.
test-consumer: deps lib ext
	BUILD=$(BUILD) sh tools/test-consumer

# The core as library and as extension under -pedantic. Not yet part of `make test`
# (schema.c and ext.c are being made pedantic-clean). Both builds always run.
PEDANTIC := -std=c11 -pedantic -Wall -Wextra -Werror -O0 $(VIS) -fPIC -Icore/include -Icore/src
test-pedantic: | $(BUILD)
	@rc=0; \
	echo "pedantic: library"; $(CC) $(PEDANTIC) -c core/src/tocsin_all.c -o $(BUILD)/pedantic_lib.o || rc=1; \
	echo "pedantic: extension"; $(CC) $(PEDANTIC) -DTOCSIN_EXTENSION -c core/src/tocsin_all.c -o $(BUILD)/pedantic_ext.o || rc=1; \
	exit $$rc

# ---- install -------------------------------------------------------------------
# make install [PREFIX=/usr/local] [LIBDIR=$(PREFIX)/lib] [INCLUDEDIR=$(PREFIX)/include] [DESTDIR=]
# The same layout as the CMake install (see CMakeLists.txt):
#   include/tocsin.h, lib/libtocsin.{a,so,so.<major>,so.<version>}, lib/tocsin/tocsin.so
#   (the SQLite extension), lib/pkgconfig/tocsin.pc, lib/cmake/tocsin/ (find_package).
PREFIX     ?= /usr/local
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
# tocsin.pc keeps ${prefix} in its paths where it can
PC_LIBDIR     = $(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))
PC_INCLUDEDIR = $(patsubst $(PREFIX)/%,$${prefix}/%,$(INCLUDEDIR))
SIZEOF_VOID_P = $(shell echo __SIZEOF_POINTER__ | $(CC) -E -P - 2>/dev/null | tr -d ' ')
PKG_SUBST = sed -e 's|@prefix@|$(PREFIX)|g' -e 's|@version@|$(VERSION)|g' -e 's|@somajor@|$(SOMAJOR)|g' \
                -e 's|@sizeof_void_p@|$(SIZEOF_VOID_P)|g'

install: lib ext
	@mkdir -p $(BUILD)/pkg
	$(PKG_SUBST) -e 's|@libdir@|$(PC_LIBDIR)|g' -e 's|@includedir@|$(PC_INCLUDEDIR)|g' \
		tools/pkg/tocsin.pc.in > $(BUILD)/pkg/tocsin.pc
	$(PKG_SUBST) -e 's|@libdir@|$(LIBDIR)|g' -e 's|@includedir@|$(INCLUDEDIR)|g' \
		tools/pkg/tocsinConfig-make.cmake.in > $(BUILD)/pkg/tocsinConfig.cmake
	$(PKG_SUBST) tools/pkg/tocsinConfigVersion-make.cmake.in > $(BUILD)/pkg/tocsinConfigVersion.cmake
	install -d $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR)/tocsin $(DESTDIR)$(LIBDIR)/pkgconfig \
		$(DESTDIR)$(LIBDIR)/cmake/tocsin
	install -m 644 core/include/tocsin.h $(DESTDIR)$(INCLUDEDIR)/tocsin.h
	install -m 644 $(BUILD)/libtocsin.a $(DESTDIR)$(LIBDIR)/libtocsin.a
	install -m 755 $(BUILD)/libtocsin.so $(DESTDIR)$(LIBDIR)/libtocsin.so.$(VERSION)
	ln -sf libtocsin.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libtocsin.so.$(SOMAJOR)
	ln -sf libtocsin.so.$(SOMAJOR) $(DESTDIR)$(LIBDIR)/libtocsin.so
	install -m 755 $(BUILD)/tocsin.so $(DESTDIR)$(LIBDIR)/tocsin/tocsin.so
	install -m 644 $(BUILD)/pkg/tocsin.pc $(DESTDIR)$(LIBDIR)/pkgconfig/tocsin.pc
	install -m 644 $(BUILD)/pkg/tocsinConfig.cmake $(BUILD)/pkg/tocsinConfigVersion.cmake \
		$(DESTDIR)$(LIBDIR)/cmake/tocsin/

check-version:
	@sh tools/sync-version --check

demo: deps all $(BUILD)/demo_shop python-venv
	BUILD=$(BUILD) sh demo/run.sh

$(BUILD)/demo_shop: demo/shop.c $(BUILD)/libtocsin.a
	$(CC) $(ALL_CFLAGS) demo/shop.c $(BUILD)/libtocsin.a -o $@ $(LIBS)

# `make bench` is the driver beside the peers (bench/bench.mk); the core's own detailed
# figures (printed only) stay here as `make bench-c`.
bench: deps

bench-c: deps $(BUILD)/bench_core $(BUILD)/bench_wake $(BUILD)/bench_worker
	$(BUILD)/bench_core
	$(BUILD)/bench_wake
	$(BUILD)/bench_worker

$(BUILD)/bench_core: bench/bench_core.c $(BUILD)/libtocsin.a
	$(CC) $(ALL_CFLAGS) -O2 bench/bench_core.c $(BUILD)/libtocsin.a -o $@ $(LIBS)

$(BUILD)/bench_worker: bench/bench_worker.c $(BUILD)/libtocsin.a
	$(CC) $(ALL_CFLAGS) -O2 bench/bench_worker.c $(BUILD)/libtocsin.a -o $@ $(LIBS)

# Cross-process wake latency and the watcher's idle CPU (docs/architecture.md).
bench-wake: deps $(BUILD)/bench_wake
	$(BUILD)/bench_wake

$(BUILD)/bench_wake: bench/bench_wake.c $(BUILD)/libtocsin.a
	$(CC) $(ALL_CFLAGS) -O2 bench/bench_wake.c $(BUILD)/libtocsin.a -o $@ $(LIBS)
# libFuzzer on the cron parser (needs clang with -fsanitize=fuzzer; not part of `make test`,
# whose C suite replays core/test/corpus/cron). New inputs go to $(BUILD)/fuzz-cron-corpus.
FUZZ_SECONDS ?= 60
fuzz-cron: | $(BUILD)
	@sh tools/deps.sh fuzz
	clang -std=c11 -O1 -g -fsanitize=fuzzer,address,undefined -Icore/include -Icore/src \
		core/test/fuzz_cron.c core/src/tocsin_all.c -o $(BUILD)/fuzz_cron $(LIBS)
	mkdir -p $(BUILD)/fuzz-cron-corpus
	TZ=America/New_York $(BUILD)/fuzz_cron -max_total_time=$(FUZZ_SECONDS) -timeout=5 \
		$(BUILD)/fuzz-cron-corpus core/test/corpus/cron

clean:
	rm -rf $(BUILD)

# ---- Python binding (bindings/python) ---------------------------------------
# A venv made from Debian's own python3 (it allows SQLite extension loading), with the
# package installed from the checkout (setup.py syncs the core into it) + test tools.
PYTHON  ?= /usr/bin/python3
PY_VENV := $(BUILD)/venv
PY_SRC  := $(wildcard bindings/python/src/*.c bindings/python/tocsin/*.py) \
           bindings/python/setup.py bindings/python/pyproject.toml $(CORE_SRC) $(CORE_HDR) VERSION

$(PY_VENV)/.tools:
	@mkdir -p $(BUILD)
	$(PYTHON) -m venv $(PY_VENV)
	$(PY_VENV)/bin/pip install -q --disable-pip-version-check pytest sqlalchemy build setuptools wheel
	touch $@

$(PY_VENV)/.installed: $(PY_VENV)/.tools $(PY_SRC)
	$(PY_VENV)/bin/pip install -q --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps ./bindings/python
	touch $@

python-venv: deps $(PY_VENV)/.installed

# pytest runs from the repository root so `import tocsin` is the installed package.
test-python: python-venv
	TOCSIN_TEST_VENV=$(abspath $(PY_VENV)) $(PY_VENV)/bin/pytest -q bindings/python/tests

python-dist: python-venv
	rm -rf $(BUILD)/python-dist
	$(PY_VENV)/bin/python -m build --no-isolation --sdist --outdir $(BUILD)/python-dist bindings/python
	$(PY_VENV)/bin/pip wheel -q --no-build-isolation --no-deps -w $(BUILD)/python-dist $(BUILD)/python-dist/tocsin-$(VERSION).tar.gz

bench-python: python-venv
	$(PY_VENV)/bin/python bench/bench_python.py

# ---- other bindings: each binding's own targets live in bindings/<name>/<name>.mk and
# add themselves to `test`, `bench` and `demo` (e.g. `test: test-node`).
include $(wildcard bindings/*/*.mk)
# ---- the tocsin command-line tool and dashboard (cli/cli.mk) ----
include $(wildcard cli/*.mk)
# ---- polyglot interop, crash, fault and soak suites (interop-tests/*.mk) and the
# benchmarks beside the peers (bench/*.mk): each file adds itself to test/bench/demo.
include $(wildcard interop-tests/*.mk bench/*.mk)
