# ---- golden files, the fault suite and fuzzing (interop-tests/golden, fault, fuzz) ----
# test-golden-files: every file of interop-tests/golden read back with this library
#   (the bindings read them in their own suites: test_golden.py, golden.test.js, ...).
# golden-regen: rewrites the golden files -- only for a deliberate, documented format
#   change (interop-tests/golden/README.md).
.PHONY: test-golden-files golden-regen

GOLDEN_DIR := interop-tests/golden
IT_CFLAGS  := $(WARN) -O1 -g -Icore/include -Icore/test

test: test-golden-files

$(BUILD)/golden_gen: $(GOLDEN_DIR)/gen.c $(BUILD)/libtocsin.a
	$(CC) $(IT_CFLAGS) $< $(BUILD)/libtocsin.a -o $@ $(LIBS)

# The core under ASan/UBSan, compiled once for the three suites below.
$(BUILD)/it_core_san.o: $(CORE_SRC) $(CORE_HDR) core/src/tocsin_all.c | $(BUILD)
	$(CC) $(WARN) $(SAN) -Icore/include -Icore/src -c core/src/tocsin_all.c -o $@

$(BUILD)/golden_check: $(GOLDEN_DIR)/check.c core/test/test.h $(BUILD)/it_core_san.o
	$(CC) $(WARN) $(SAN) -Icore/include -Icore/test $< $(BUILD)/it_core_san.o -o $@ $(LIBS)

test-golden-files: $(BUILD)/golden_check
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(BUILD)/golden_check $(GOLDEN_DIR)

golden-regen: $(BUILD)/golden_gen
	$(BUILD)/golden_gen $(GOLDEN_DIR)
	@git status --short $(GOLDEN_DIR) || true

# ---- the fault suite: a fault-injecting VFS under every operation, a real full
# disk, files that cannot be opened (interop-tests/fault/fault.c). Built with
# -Wall -Wextra -Werror and run under ASan/UBSan (the plain build: make fault-plain).
.PHONY: test-fault fault-plain

test: test-fault

$(BUILD)/fault_san: interop-tests/fault/fault.c core/test/test.h $(BUILD)/it_core_san.o
	$(CC) $(WARN) $(SAN) -Icore/include -Icore/test $< $(BUILD)/it_core_san.o -o $@ $(LIBS)

$(BUILD)/fault: interop-tests/fault/fault.c core/test/test.h $(BUILD)/libtocsin.a
	$(CC) $(IT_CFLAGS) $< $(BUILD)/libtocsin.a -o $@ $(LIBS)

# The second run takes the fallbacks (no mount): RLIMIT_FSIZE for the full disk, a
# child without root for the read-only directory.
test-fault: $(BUILD)/fault_san
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(BUILD)/fault_san
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 TOCSIN_FAULT_NO_MOUNT=1 $(BUILD)/fault_san disk
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 TOCSIN_FAULT_NO_MOUNT=1 $(BUILD)/fault_san rodir

fault-plain: $(BUILD)/fault
	$(BUILD)/fault

# ---- fuzzing (interop-tests/fuzz): libFuzzer targets for the options JSON, payload
# validation, the task envelope and the SQL functions. test-fuzz-corpora replays the
# committed corpora through the same entry points without libFuzzer (cc, ASan/UBSan);
# `make fuzz` runs each fuzzer FUZZ_SECONDS (not in CI; new inputs land in
# $(BUILD)/fuzz-corpus/<target>, minimize them into the committed corpus by hand).
.PHONY: test-fuzz-corpora fuzz
FUZZ_DIR     := interop-tests/fuzz
FUZZ_TARGETS := options payload envelope sql
FUZZ_COMMON  := $(FUZZ_DIR)/common.c $(FUZZ_DIR)/fuzz.h
FUZZ_SECONDS ?= 60

test: test-fuzz-corpora

$(BUILD)/fuzz_replay: $(FUZZ_DIR)/replay.c $(foreach t,$(FUZZ_TARGETS),$(FUZZ_DIR)/fuzz_$(t).c) $(FUZZ_COMMON) $(BUILD)/it_core_san.o
	$(CC) $(WARN) $(SAN) -Icore/include $(FUZZ_DIR)/replay.c $(FUZZ_DIR)/common.c \
		$(foreach t,$(FUZZ_TARGETS),$(FUZZ_DIR)/fuzz_$(t).c) $(BUILD)/it_core_san.o -o $@ $(LIBS)

test-fuzz-corpora: $(BUILD)/fuzz_replay
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(BUILD)/fuzz_replay $(FUZZ_DIR)/corpus

$(BUILD)/fuzz_%: $(FUZZ_DIR)/fuzz_%.c $(FUZZ_COMMON) $(CORE_SRC) $(CORE_HDR) | $(BUILD)
	clang -std=c11 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -DFUZZ_LIBFUZZER -Icore/include -Icore/src \
		$< $(FUZZ_DIR)/common.c core/src/tocsin_all.c -o $@ $(LIBS)

fuzz: | $(BUILD)
	@sh tools/deps.sh fuzz
	$(MAKE) --no-print-directory $(foreach t,$(FUZZ_TARGETS),$(BUILD)/fuzz_$(t))
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(BUILD)/fuzz-corpus/$$t; \
	  echo "fuzz: $$t for $(FUZZ_SECONDS) s"; \
	  $(BUILD)/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 -max_len=4096 \
	    -artifact_prefix=$(BUILD)/fuzz-corpus/$$t- $(BUILD)/fuzz-corpus/$$t $(FUZZ_DIR)/corpus/$$t || exit 1; \
	done
