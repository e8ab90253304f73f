# tocsin developer and CI entry points. `make test` and `make demo` do all set-up.
CC      ?= cc
BUILD   ?= build
VERSION := $(shell cat VERSION)
WARN    := -std=c11 -Wall -Wextra -Werror
CFLAGS  ?= -O2 -g
ALL_CFLAGS := $(WARN) $(CFLAGS) -fPIC -Icore/include -Icore/src
SAN     := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
LIBS    := -lsqlite3 -lpthread

CORE_SRC := $(filter-out core/src/tocsin_all.c,$(wildcard core/src/*.c))
CORE_HDR := core/include/tocsin.h core/src/internal.h
TEST_SRC := $(wildcard core/test/*.c)
TEST_HDR := $(wildcard core/test/*.h)

.PHONY: all lib ext test test-c test-san test-sql test-golden test-header test-readme check-version deps demo bench bench-wake clean fuzz-cron \
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

$(BUILD)/libtocsin.so: $(BUILD)/tocsin_all.o
	$(CC) -shared -o $@ $^ $(LIBS)

# The loadable extension: the same code calling SQLite through the host's routines.
$(BUILD)/tocsin.so: $(CORE_SRC) $(CORE_HDR) core/src/tocsin_all.c | $(BUILD)
	$(CC) $(ALL_CFLAGS) -DTOCSIN_EXTENSION -shared core/src/tocsin_all.c -o $@ -lpthread

$(BUILD)/test_core: $(TEST_SRC) $(TEST_HDR) $(BUILD)/libtocsin.a
	$(CC) $(ALL_CFLAGS) $(TEST_SRC) $(BUILD)/libtocsin.a -o $@ $(LIBS)

$(BUILD)/test_core_san: $(TEST_SRC) $(TEST_HDR) $(CORE_SRC) $(CORE_HDR) | $(BUILD)
	$(CC) $(WARN) $(SAN) -Icore/include -Icore/src $(TEST_SRC) core/src/tocsin_all.c -o $@ $(LIBS)

test: deps all check-version test-header test-c test-san test-sql test-sql-property test-golden test-readme test-python

test-c: $(BUILD)/test_core
	$(BUILD)/test_core

test-san: $(BUILD)/test_core_san
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(BUILD)/test_core_san

test-sql: $(BUILD)/tocsin.so
	sh core/test/sql/run.sh $(BUILD)/tocsin.so

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
test-readme: $(BUILD)/libtocsin.a
	mkdir -p $(BUILD)/readme && rm -f $(BUILD)/readme/app.db*
	awk '/^```c$$/{f=1;next}/^```$$/{f=0}f' README.md > $(BUILD)/readme/app.c
	$(CC) $(WARN) -Icore/include $(BUILD)/readme/app.c $(BUILD)/libtocsin.a -o $(BUILD)/readme/app $(LIBS)
	cd $(BUILD)/readme && ./app | grep -q 'sending {"to":"ann@example.com"}'

check-version:
	@sh tools/sync-version --check

demo: deps all $(BUILD)/demo_shop python-venv
	BUILD=$(BUILD) sh demo/run.sh

$(BUILD)/demo_shop: demo/shop.c $(BUILD)/libtocsin.a
	$(CC) $(ALL_CFLAGS) demo/shop.c $(BUILD)/libtocsin.a -o $@ $(LIBS)

bench: deps $(BUILD)/bench_core $(BUILD)/bench_wake
	$(BUILD)/bench_core
	$(BUILD)/bench_wake
	$(MAKE) --no-print-directory BUILD=$(BUILD) bench-python

$(BUILD)/bench_core: bench/bench_core.c $(BUILD)/libtocsin.a
	$(CC) $(ALL_CFLAGS) -O2 bench/bench_core.c $(BUILD)/libtocsin.a -o $@ $(LIBS)

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
