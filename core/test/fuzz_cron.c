/*
 * libFuzzer target for the cron parser and next-fire search. Built alone with
 * `make fuzz-cron` (clang -fsanitize=fuzzer); the normal C suite runs every
 * file of core/test/corpus/cron through it as a regression test.
 * Invariants: no crash, no hang (every search is bounded), a parsed
 * expression's next fire is strictly after the instant asked about, and
 * following it again moves forward.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tocsin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char expr[2048], err[256];
    tocsin_cron *c = NULL;
    int64_t afters[4], next, again;
    size_t i;
    if (size >= sizeof expr) size = sizeof expr - 1;
    memcpy(expr, data, size);
    expr[size] = 0;
    if (tocsin_cron_parse(&c, expr, err, sizeof err) != TOCSIN_OK) {
        if (c != NULL || memchr(err, 0, sizeof err) == NULL || err[0] == 0) abort();
        return 0;
    }
    afters[0] = 0;
    afters[1] = 1709999999999LL; /* just before a DST change in many zones */
    afters[2] = 253402300000000LL;
    afters[3] = 0;
    for (i = 0; i < size && i < 8; i++) afters[3] = afters[3] * 31 + data[i];
    afters[3] = (afters[3] < 0 ? -afters[3] : afters[3]) % 253402300799999LL;
    for (i = 0; i < 8; i++) {
        int local = (int)(i & 1), rc = tocsin_cron_next(&next, c, afters[i / 2], local);
        if (rc == TOCSIN_NOTFOUND) {
            if (next != -1) abort();
            continue;
        }
        if (rc != TOCSIN_OK || next <= afters[i / 2]) abort();
        rc = tocsin_cron_next(&again, c, next, local);
        if (rc == TOCSIN_OK && again <= next) abort();
        if (rc != TOCSIN_OK && rc != TOCSIN_NOTFOUND) abort();
    }
    tocsin_cron_free(c);
    return 0;
}
