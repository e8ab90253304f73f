/* A minimal test harness: suites are functions listed in main.c. */
#ifndef TOCSIN_TEST_H
#define TOCSIN_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tocsin.h"

extern int t_passed, t_failed;
extern const char *t_suite;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (cond) {                                                                   \
            t_passed++;                                                               \
        } else {                                                                      \
            t_failed++;                                                               \
            fprintf(stderr, "FAIL %s:%d [%s] %s\n", __FILE__, __LINE__, t_suite, #cond); \
        }                                                                             \
    } while (0)

#define CHECK_EQ_I(a, b)                                                                   \
    do {                                                                                   \
        long long _a = (long long)(a), _b = (long long)(b);                                \
        if (_a == _b) {                                                                    \
            t_passed++;                                                                    \
        } else {                                                                           \
            t_failed++;                                                                    \
            fprintf(stderr, "FAIL %s:%d [%s] %s == %s (%lld != %lld)\n", __FILE__, __LINE__, \
                    t_suite, #a, #b, _a, _b);                                              \
        }                                                                                  \
    } while (0)

#define CHECK_STR(a, b)                                                                        \
    do {                                                                                       \
        const char *_a = (a), *_b = (b);                                                       \
        if (_a && _b && strcmp(_a, _b) == 0) {                                                 \
            t_passed++;                                                                        \
        } else {                                                                               \
            t_failed++;                                                                        \
            fprintf(stderr, "FAIL %s:%d [%s] %s == %s (\"%s\" != \"%s\")\n", __FILE__, __LINE__, \
                    t_suite, #a, #b, _a ? _a : "(null)", _b ? _b : "(null)");                  \
        }                                                                                      \
    } while (0)

/* rc must be TOCSIN_OK; prints the handle's message otherwise. */
#define CHECK_OK(db, expr)                                                                    \
    do {                                                                                      \
        int _rc = (expr);                                                                     \
        if (_rc == TOCSIN_OK) {                                                               \
            t_passed++;                                                                       \
        } else {                                                                              \
            t_failed++;                                                                       \
            fprintf(stderr, "FAIL %s:%d [%s] %s -> %d: %s\n", __FILE__, __LINE__, t_suite, #expr, \
                    _rc, tocsin_errmsg(db));                                                  \
        }                                                                                     \
    } while (0)

/* A fake clock the tests drive. */
typedef struct t_clock {
    int64_t now;
} t_clock;
int64_t t_clock_fn(void *ctx);

/* Opens a fresh database in the test directory, driven by `clk` (may be NULL). */
tocsin_db *t_open(const char *name, t_clock *clk);
/* The path of a fresh test database file (removes leftovers). */
const char *t_path(const char *name);
/* Sleeps ms milliseconds (to let another thread get into a call, never to time one). */
void t_nap(int ms);
/* Counts rows: SELECT count(*) FROM <sql tail>. */
long long t_count(tocsin_db *db, const char *from_where);

#endif
