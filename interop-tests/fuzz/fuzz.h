/*
 * Shared pieces of the fuzz targets. Each target defines
 *   int fuzz_<name>(const uint8_t *data, size_t size)
 * and, built for libFuzzer (-DFUZZ_LIBFUZZER), LLVMFuzzerTestOneInput
 * calling it; replay.c links every target without libFuzzer and runs the
 * committed corpora through them (make test-fuzz-corpora).
 * A broken invariant calls abort() (a crash for libFuzzer, a failure for replay).
 */
#ifndef TOCSIN_FUZZ_H
#define TOCSIN_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>

#include "tocsin.h"

#define FUZZ_REQUIRE(cond)                                                              \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "fuzz invariant failed %s:%d: %s (last error: %s)\n", __FILE__, \
                    __LINE__, #cond, tocsin_errmsg(NULL));                              \
            abort();                                                                    \
        }                                                                               \
    } while (0)

#ifdef FUZZ_LIBFUZZER
#define FUZZ_ENTRY(fn)                                                  \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);       \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fn(data, size); }
#else
#define FUZZ_ENTRY(fn)
#endif

/* A NUL-terminated copy of data[0..size) (owned: free), cut at the first NUL. */
char *fuzz_cstr(const uint8_t *data, size_t size);
/* An integer of the handle's connection (SELECT ...), -1 on error. */
long long fuzz_qi(tocsin_db *db, const char *sql);
/* A handle on a fresh in-memory database with the SQL functions registered,
 * kept across inputs (its tables emptied by fuzz_reset). */
tocsin_db *fuzz_memdb(void);
void fuzz_reset(tocsin_db *db);
/* The fixed clock every target runs on. */
int64_t fuzz_clock(void *ctx);

int fuzz_options(const uint8_t *data, size_t size);
int fuzz_payload(const uint8_t *data, size_t size);
int fuzz_envelope(const uint8_t *data, size_t size);
int fuzz_sql(const uint8_t *data, size_t size);

#endif
