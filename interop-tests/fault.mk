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

$(BUILD)/golden_check: $(GOLDEN_DIR)/check.c core/test/test.h $(CORE_SRC) $(CORE_HDR) | $(BUILD)
	$(CC) $(WARN) $(SAN) -Icore/include -Icore/src -Icore/test $< core/src/tocsin_all.c -o $@ $(LIBS)

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

$(BUILD)/fault_san: interop-tests/fault/fault.c core/test/test.h $(CORE_SRC) $(CORE_HDR) | $(BUILD)
	$(CC) $(WARN) $(SAN) -Icore/include -Icore/src -Icore/test $< core/src/tocsin_all.c -o $@ $(LIBS)

$(BUILD)/fault: interop-tests/fault/fault.c core/test/test.h $(BUILD)/libtocsin.a
	$(CC) $(IT_CFLAGS) $< $(BUILD)/libtocsin.a -o $@ $(LIBS)

test-fault: $(BUILD)/fault_san
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(BUILD)/fault_san

fault-plain: $(BUILD)/fault
	$(BUILD)/fault
