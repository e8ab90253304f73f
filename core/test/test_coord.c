/* Results, locks, rate limits, the scheduler and their SQL functions. */
#define _DEFAULT_SOURCE /* setenv */
#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>

#include "test.h"

#define T2024 1704067200000LL /* 2024-01-01T00:00:00Z */
#define MIN_MS 60000LL
#define HOUR_MS 3600000LL

/* First column of the first row of `sql` as owned text ("ERR: ..." on error, "NULL"). */
static char *q(tocsin_db *db, const char *sql) {
    sqlite3_stmt *st = NULL;
    char *out;
    int rc = sqlite3_prepare_v2(tocsin_sqlite(db), sql, -1, &st, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(st, 0);
        out = strdup(t ? t : "NULL");
    } else if (rc == SQLITE_DONE) {
        out = strdup("NO ROW");
    } else {
        size_t n = strlen(sqlite3_errmsg(tocsin_sqlite(db))) + 8;
        out = malloc(n);
        snprintf(out, n, "ERR: %s", sqlite3_errmsg(tocsin_sqlite(db)));
    }
    sqlite3_finalize(st);
    return out;
}

/* q() compared with `want`; a want ending in '*' is a prefix. */
static void q_is(tocsin_db *db, const char *sql, const char *want, int line) {
    char *got = q(db, sql);
    size_t n = strlen(want);
    int ok = n && want[n - 1] == '*' ? strncmp(got, want, n - 1) == 0 : strcmp(got, want) == 0;
    if (ok) {
        t_passed++;
    } else {
        t_failed++;
        fprintf(stderr, "FAIL test_coord.c:%d [%s] %s\n  got  %s\n  want %s\n", line, t_suite, sql,
                got, want);
    }
    free(got);
}
#define Q(db, sql, want) q_is(db, sql, want, __LINE__)

/* ---- results -------------------------------------------------------------- */

static void results(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("results", &clk);
    tocsin_result *r = NULL;
    int64_t n = 0;
    int ok = 0;
    CHECK_OK(db, tocsin_result_save(db, 1, "{\"a\":[1,2]}", 0));
    CHECK_OK(db, tocsin_result_get(db, &r, 1));
    CHECK(r && !r->is_error);
    if (r) {
        CHECK_STR(r->value, "{\"a\":[1,2]}");
        CHECK(r->error_type == NULL && r->error_message == NULL);
        CHECK_EQ_I(r->created_at, 1000);
        CHECK_EQ_I(r->expires_at, 0);
    }
    tocsin_result_free(r);
    /* a stored JSON null is a result; an absent one is not */
    CHECK_OK(db, tocsin_result_save(db, 2, "null", 0));
    CHECK_OK(db, tocsin_result_get(db, &r, 2));
    CHECK(r != NULL);
    if (r) CHECK_STR(r->value, "null");
    tocsin_result_free(r);
    r = (tocsin_result *)&r;
    CHECK_OK(db, tocsin_result_get(db, &r, 3));
    CHECK(r == NULL);
    /* ttl: present until expires_at, absent from then on, swept */
    CHECK_OK(db, tocsin_result_save(db, 4, "42", 500));
    clk.now = 1499;
    CHECK_OK(db, tocsin_result_get(db, &r, 4));
    CHECK(r != NULL);
    if (r) CHECK_EQ_I(r->expires_at, 1500);
    tocsin_result_free(r);
    clk.now = 1500;
    CHECK_OK(db, tocsin_result_get(db, &r, 4));
    CHECK(r == NULL);
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 3);
    CHECK_OK(db, tocsin_result_sweep(db, &n));
    CHECK_EQ_I(n, 1);
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 2);
    /* errors are data: type and message, replacing an earlier value */
    CHECK_OK(db, tocsin_result_save_error(db, 1, "ValueError", "bad \"x\"\n", 0));
    CHECK_OK(db, tocsin_result_get(db, &r, 1));
    CHECK(r && r->is_error);
    if (r) {
        CHECK(r->value == NULL);
        CHECK_STR(r->error_type, "ValueError");
        CHECK_STR(r->error_message, "bad \"x\"\n");
    }
    tocsin_result_free(r);
    CHECK_OK(db, tocsin_result_save_error(db, 5, "Timeout", NULL, 0));
    CHECK_OK(db, tocsin_result_get(db, &r, 5));
    if (r) CHECK_STR(r->error_message, "");
    CHECK(r != NULL);
    tocsin_result_free(r);
    CHECK_EQ_I(t_count(db, "_tocsin_results WHERE job_id = 1 AND status = 'error' AND "
                           "json_extract(error, '$.type') = 'ValueError'"), 1);
    /* saving joins the caller's transaction */
    CHECK_OK(db, tocsin_begin(db));
    CHECK_OK(db, tocsin_result_save(db, 6, "\"done\"", 0));
    CHECK_OK(db, tocsin_rollback(db));
    CHECK_OK(db, tocsin_result_get(db, &r, 6));
    CHECK(r == NULL);
    CHECK_OK(db, tocsin_begin(db));
    CHECK_OK(db, tocsin_result_save(db, 6, "\"done\"", 0));
    CHECK_OK(db, tocsin_commit(db));
    CHECK_OK(db, tocsin_result_get(db, &r, 6));
    CHECK(r != NULL);
    tocsin_result_free(r);
    CHECK_OK(db, tocsin_result_delete(db, &ok, 6));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_result_delete(db, &ok, 6));
    CHECK_EQ_I(ok, 0);

    /* bad input: a clear error, nothing written */
    n = t_count(db, "_tocsin_results");
    CHECK_EQ_I(tocsin_result_save(NULL, 7, "1", 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_result_save(db, 0, "1", 0), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "job_id") != NULL);
    CHECK_EQ_I(tocsin_result_save(db, 7, "1", -1), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "ttl_ms") != NULL);
    CHECK_EQ_I(tocsin_result_save(db, 7, NULL, 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_result_save(db, 7, "{nope", 0), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "value is not valid JSON") != NULL);
    CHECK_EQ_I(tocsin_result_save_error(db, 7, "", "m", 0), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "error type") != NULL);
    CHECK_EQ_I(tocsin_result_save_error(db, 7, NULL, "m", 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_result_save_error(db, -1, "E", "m", 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_result_save_error(db, 7, "E", "m", -5), TOCSIN_INVALID);
    CHECK_OK(db, tocsin_set_max_payload(db, 8));
    CHECK_EQ_I(tocsin_result_save(db, 7, "\"0123456789\"", 0), TOCSIN_TOOBIG);
    CHECK_EQ_I(tocsin_result_save_error(db, 7, "E", "0123456789", 0), TOCSIN_TOOBIG);
    CHECK_OK(db, tocsin_set_max_payload(db, 1 << 20));
    CHECK_EQ_I(tocsin_result_get(db, NULL, 1), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_result_get(db, &r, 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_result_get(NULL, &r, 1), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_result_delete(db, NULL, 1), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_result_delete(db, &ok, 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_result_sweep(db, NULL), TOCSIN_INVALID);
    CHECK_EQ_I(t_count(db, "_tocsin_results"), n);
    tocsin_result_free(NULL);
    tocsin_close(db);
}

/* ---- locks ---------------------------------------------------------------- */

static void locks(void) {
    t_clock clk = {10000}, clk2 = {10000};
    tocsin_db *db = t_open("locks", &clk), *db2;
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    int64_t tok = -1, tok_b = -1, until = 0, t3 = 0;
    char *owner = NULL;
    int ok = -1;
    o.clock = t_clock_fn;
    o.clock_ctx = &clk2;
    CHECK_OK(db, tocsin_open(&db2, sqlite3_db_filename(tocsin_sqlite(db), "main"), &o));

    CHECK_OK(db, tocsin_lock_acquire(db, &tok, &until, "res", "a", 1000));
    CHECK_EQ_I(tok, 1);
    CHECK_EQ_I(until, 11000);
    /* held: another owner (on another handle) is refused and told until when */
    CHECK_OK(db2, tocsin_lock_acquire(db2, &tok_b, &until, "res", "b", 1000));
    CHECK_EQ_I(tok_b, 0);
    CHECK_EQ_I(until, 11000);
    /* the holder again: same token, lease extended */
    clk.now = 10500;
    CHECK_OK(db, tocsin_lock_acquire(db, &tok, &until, "res", "a", 1000));
    CHECK_EQ_I(tok, 1);
    CHECK_EQ_I(until, 11500);
    CHECK_OK(db, tocsin_lock_renew(db, &ok, "res", "a", 1, 2000));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_lock_holder(db, &owner, &tok, &until, "res"));
    CHECK_STR(owner, "a");
    CHECK_EQ_I(tok, 1);
    CHECK_EQ_I(until, 12500);
    tocsin_free(owner);
    /* wrong owner or token: nothing */
    CHECK_OK(db2, tocsin_lock_renew(db2, &ok, "res", "b", 1, 1000));
    CHECK_EQ_I(ok, 0);
    CHECK_OK(db2, tocsin_lock_release(db2, &ok, "res", "a", 2));
    CHECK_EQ_I(ok, 0);
    /* the lease lapses; b takes over with a higher token; a is stale */
    clk.now = clk2.now = 12500;
    CHECK_OK(db2, tocsin_lock_acquire(db2, &tok_b, &until, "res", "b", 1000));
    CHECK_EQ_I(tok_b, 2);
    CHECK_OK(db, tocsin_lock_renew(db, &ok, "res", "a", 1, 1000));
    CHECK_EQ_I(ok, 0);
    CHECK_OK(db, tocsin_lock_release(db, &ok, "res", "a", 1));
    CHECK_EQ_I(ok, 0);
    CHECK_OK(db, tocsin_lock_acquire(db, &tok, NULL, "res", "a", 1000));
    CHECK_EQ_I(tok, 0);
    /* release, then a new holder: the token keeps counting up */
    CHECK_OK(db2, tocsin_lock_release(db2, &ok, "res", "b", 2));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_lock_holder(db, &owner, &tok, &until, "res"));
    CHECK(owner == NULL);
    CHECK_EQ_I(tok, 2);
    CHECK_EQ_I(until, 0);
    CHECK_OK(db2, tocsin_lock_renew(db2, &ok, "res", "b", 2, 1000)); /* released: gone */
    CHECK_EQ_I(ok, 0);
    CHECK_OK(db, tocsin_lock_acquire(db, &t3, NULL, "res", "b", 1000));
    CHECK_EQ_I(t3, 3); /* even the same owner as before: a new holding */
    /* a lease that lapsed but nobody took over may still be renewed */
    clk.now = 20000;
    CHECK_OK(db, tocsin_lock_renew(db, &ok, "res", "b", 3, 1000));
    CHECK_EQ_I(ok, 1);
    /* ...but once lapsed, acquiring again is a new holding */
    clk.now = 30000;
    CHECK_OK(db, tocsin_lock_acquire(db, &tok, NULL, "res", "b", 1000));
    CHECK_EQ_I(tok, 4);
    /* names are independent */
    CHECK_OK(db, tocsin_lock_acquire(db, &tok, NULL, "other", "a", 1000));
    CHECK_EQ_I(tok, 1);
    CHECK_OK(db, tocsin_lock_holder(db, &owner, &tok, &until, "never"));
    CHECK(owner == NULL && tok == 0 && until == 0);
    /* acquire joins the caller's transaction */
    clk.now = 40000;
    CHECK_OK(db, tocsin_begin(db));
    CHECK_OK(db, tocsin_lock_acquire(db, &tok, NULL, "res", "c", 1000));
    CHECK_EQ_I(tok, 5);
    CHECK_OK(db, tocsin_rollback(db));
    CHECK_OK(db, tocsin_lock_holder(db, &owner, &tok, &until, "res"));
    CHECK(owner == NULL);
    CHECK_EQ_I(tok, 4);

    /* bad input: clear errors, nothing written */
    {
        long long rows = t_count(db, "_tocsin_locks");
        CHECK_EQ_I(tocsin_lock_acquire(db, NULL, NULL, "x", "a", 10), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_lock_acquire(db, &tok, NULL, "", "a", 10), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "lock name") != NULL);
        CHECK_EQ_I(tocsin_lock_acquire(db, &tok, NULL, "x", NULL, 10), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "owner") != NULL);
        CHECK_EQ_I(tocsin_lock_acquire(db, &tok, NULL, "x", "a", 0), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "ttl_ms") != NULL);
        CHECK_EQ_I(tocsin_lock_acquire(db, &tok, NULL, "x", "a", 400LL * 86400000), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_lock_acquire(NULL, &tok, NULL, "x", "a", 10), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_lock_renew(db, NULL, "x", "a", 1, 10), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_lock_renew(db, &ok, "x", "a", 0, 10), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "token") != NULL);
        CHECK_EQ_I(tocsin_lock_renew(db, &ok, "x", "a", 1, -1), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_lock_release(db, &ok, "x", "a\x01", 1), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_lock_release(db, &ok, NULL, "a", 1), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_lock_holder(db, NULL, &tok, &until, "x"), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_lock_holder(db, &owner, &tok, &until, ""), TOCSIN_INVALID);
        CHECK_EQ_I(t_count(db, "_tocsin_locks"), rows);
    }
    tocsin_close(db2);
    tocsin_close(db);
}

/* ---- rate limits ---------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Property: no window of per_ms holds more than `limit` admissions, and a call
 * is refused only when the window before it is full (the limit is exact). */
static void ratelimit_property(void) {
    static const int64_t limits[] = {1, 3, 5, 10};
    static const int64_t pers[] = {100, 1000, 60000};
    t_clock clk = {T2024};
    tocsin_db *db = t_open("ratelimit", &clk);
    int64_t *adm = malloc(4000 * sizeof *adm);
    size_t li, pi;
    int violations = 0, wrong = 0, bad_retry = 0;
    for (li = 0; li < 4; li++)
        for (pi = 0; pi < 3; pi++) {
            int64_t limit = limits[li], per = pers[pi];
            char name[32];
            size_t n = 0, i, j;
            int call;
            snprintf(name, sizeof name, "p-%zu-%zu", li, pi);
            for (call = 0; call < 300; call++) {
                int allowed = -1;
                int64_t retry = -1, in_window = 0;
                uint64_t r = rng() % 100;
                /* bursts at one instant, small steps, steps near the window, long gaps */
                clk.now += r < 30 ? 0 : r < 70 ? (int64_t)(rng() % (uint64_t)(per / 4 + 1))
                                   : r < 95 ? per - 1 + (int64_t)(rng() % 3)
                                            : per * 3;
                for (i = 0; i < n; i++) in_window += adm[i] > clk.now - per;
                if (tocsin_ratelimit_try(db, &allowed, &retry, NULL, name, limit, per) != TOCSIN_OK) {
                    wrong++;
                    continue;
                }
                if (allowed != (in_window < limit)) wrong++;
                if (allowed) adm[n++] = clk.now;
                else if (retry < 1 || retry > per) bad_retry++;
            }
            /* every window [a_i, a_i + per) */
            for (i = 0; i < n; i++) {
                int64_t c = 0;
                for (j = i; j < n && adm[j] < adm[i] + per; j++) c++;
                if (c > limit) violations++;
            }
            CHECK(n > (size_t)limit); /* the test did admit, and more than one window's worth */
        }
    CHECK_EQ_I(violations, 0);
    CHECK_EQ_I(wrong, 0);
    CHECK_EQ_I(bad_retry, 0);
    free(adm);
    tocsin_close(db);
}

static void ratelimit_basics(void) {
    t_clock clk = {100000};
    tocsin_db *db = t_open("ratelimit2", &clk);
    int allowed = -1;
    int64_t retry = -1, rem = -1, n = 0;
    int i;
    for (i = 0; i < 3; i++) {
        clk.now = 100000 + i * 100;
        CHECK_OK(db, tocsin_ratelimit_try(db, &allowed, &retry, &rem, "api", 3, 1000));
        CHECK_EQ_I(allowed, 1);
        CHECK_EQ_I(retry, 0);
        CHECK_EQ_I(rem, 2 - i);
    }
    /* the window edge: at 100999 the first call is still inside (no 2x burst) */
    clk.now = 100999;
    CHECK_OK(db, tocsin_ratelimit_try(db, &allowed, &retry, &rem, "api", 3, 1000));
    CHECK_EQ_I(allowed, 0);
    CHECK_EQ_I(retry, 1);
    CHECK_EQ_I(rem, 0);
    clk.now = 100500;
    CHECK_OK(db, tocsin_ratelimit_try(db, &allowed, &retry, NULL, "api", 3, 1000));
    CHECK_EQ_I(allowed, 0);
    CHECK_EQ_I(retry, 500);
    /* retry_after is exact: admitted then, not a millisecond sooner */
    clk.now = 100999;
    CHECK_OK(db, tocsin_ratelimit_try(db, &allowed, NULL, NULL, "api", 3, 1000));
    CHECK_EQ_I(allowed, 0);
    clk.now = 101000;
    CHECK_OK(db, tocsin_ratelimit_try(db, &allowed, NULL, NULL, "api", 3, 1000));
    CHECK_EQ_I(allowed, 1);
    /* a refusal writes nothing; other names are independent */
    CHECK_EQ_I(t_count(db, "_tocsin_rate_hits WHERE name = 'api'"), 3);
    CHECK_OK(db, tocsin_ratelimit_try(db, &allowed, NULL, NULL, "other", 1, 1000));
    CHECK_EQ_I(allowed, 1);
    /* try joins the caller's transaction */
    CHECK_OK(db, tocsin_begin(db));
    CHECK_OK(db, tocsin_ratelimit_try(db, &allowed, NULL, NULL, "tx", 1, 1000));
    CHECK_OK(db, tocsin_rollback(db));
    CHECK_EQ_I(t_count(db, "_tocsin_rate_hits WHERE name = 'tx'"), 0);
    /* sweep: admissions past their window, of every name */
    clk.now = 200000;
    CHECK_OK(db, tocsin_ratelimit_sweep(db, &n));
    CHECK_EQ_I(n, 4);
    CHECK_EQ_I(t_count(db, "_tocsin_rate_hits"), 0);
    CHECK_OK(db, tocsin_ratelimit_try(db, &allowed, NULL, NULL, "api", 1, 1000));
    CHECK_OK(db, tocsin_ratelimit_reset(db, &n, "api"));
    CHECK_EQ_I(n, 1);
    CHECK_OK(db, tocsin_ratelimit_try(db, &allowed, NULL, NULL, "api", 1, 1000));
    CHECK_EQ_I(allowed, 1);

    /* bad input */
    n = t_count(db, "_tocsin_rate_hits");
    CHECK_EQ_I(tocsin_ratelimit_try(db, NULL, NULL, NULL, "x", 1, 1), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_ratelimit_try(db, &allowed, NULL, NULL, "", 1, 1), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "rate limit name") != NULL);
    CHECK_EQ_I(tocsin_ratelimit_try(db, &allowed, NULL, NULL, "x", 0, 1), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "limit") != NULL);
    CHECK_EQ_I(tocsin_ratelimit_try(db, &allowed, NULL, NULL, "x", 2000000, 1), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_ratelimit_try(db, &allowed, NULL, NULL, "x", 1, 0), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "per_ms") != NULL);
    CHECK_EQ_I(tocsin_ratelimit_try(NULL, &allowed, NULL, NULL, "x", 1, 1), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_ratelimit_sweep(db, NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_ratelimit_reset(db, NULL, "x"), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_ratelimit_reset(db, &n, NULL), TOCSIN_INVALID);
    CHECK_EQ_I(t_count(db, "_tocsin_rate_hits"), 1);
    tocsin_close(db);
}

/* ---- scheduler ------------------------------------------------------------ */

static void schedule_basics(void) {
    t_clock clk = {T2024 + 30000}; /* 00:00:30 */
    tocsin_db *db = t_open("sched", &clk);
    tocsin_schedule_opts so = TOCSIN_SCHEDULE_OPTS_INIT;
    tocsin_schedule *s = NULL, *list = NULL;
    tocsin_job *jobs = NULL;
    size_t n = 0;
    int64_t next = 0, fired = -1;
    int ok = 0;
    so.priority = 7;
    so.max_attempts = 2;
    so.job_expires_ms = 5000;
    so.meta = "{\"trace\":\"t1\"}";
    CHECK_OK(db, tocsin_schedule_set(db, &next, "minutely", "* * * * *", "jobs", "{\"x\":1}", &so));
    CHECK_EQ_I(next, T2024 + MIN_MS);
    CHECK_OK(db, tocsin_scheduler_next_fire(db, &next));
    CHECK_EQ_I(next, T2024 + MIN_MS);
    clk.now = T2024 + MIN_MS - 1;
    CHECK_OK(db, tocsin_scheduler_tick(db, &fired));
    CHECK_EQ_I(fired, 0);
    clk.now = T2024 + MIN_MS;
    CHECK_OK(db, tocsin_scheduler_tick(db, &fired));
    CHECK_EQ_I(fired, 1);
    CHECK_OK(db, tocsin_scheduler_tick(db, &fired)); /* the same boundary never twice */
    CHECK_EQ_I(fired, 0);
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "jobs", "w", 10, 1000));
    CHECK_EQ_I(n, 1);
    if (n == 1) {
        CHECK_STR(jobs[0].payload, "{\"x\":1}");
        CHECK_EQ_I(jobs[0].priority, 7);
        CHECK_EQ_I(jobs[0].max_attempts, 2);
        CHECK_EQ_I(jobs[0].run_at, T2024 + MIN_MS);
        CHECK_EQ_I(jobs[0].expires_at, T2024 + MIN_MS + 5000);
        CHECK(strstr(jobs[0].meta, "\"trace\":\"t1\"") != NULL);
        CHECK(strstr(jobs[0].meta, "\"tocsin_schedule\":\"minutely\"") != NULL);
        CHECK(strstr(jobs[0].meta, "\"tocsin_fire_at\":1704067260000") != NULL);
    }
    tocsin_jobs_free(jobs, n);
    CHECK_OK(db, tocsin_schedule_get(db, &s, "minutely"));
    CHECK(s != NULL);
    if (s) {
        CHECK_EQ_I(s->next_fire, T2024 + 2 * MIN_MS);
        CHECK_EQ_I(s->last_fire, T2024 + MIN_MS);
        CHECK_EQ_I(s->fired_count, 1);
        CHECK(s->last_job_id > 0);
        CHECK_EQ_I(s->catch_up, TOCSIN_CATCHUP_ONCE);
        CHECK_EQ_I(s->max_catch_up, TOCSIN_DEFAULT_MAX_CATCH_UP);
    }
    tocsin_schedules_free(s, 1);

    /* registering again with the same expression keeps the pending boundary */
    clk.now = T2024 + 3 * MIN_MS + 10; /* boundaries 00:02 and 00:03 are due */
    CHECK_OK(db, tocsin_schedule_set(db, &next, "minutely", "* * * * *", "jobs", "{\"x\":2}", &so));
    CHECK_EQ_I(next, T2024 + 2 * MIN_MS);
    /* a new expression restarts from now */
    CHECK_OK(db, tocsin_schedule_set(db, &next, "hourly", "@hourly", "jobs", "{}", NULL));
    CHECK_EQ_I(next, T2024 + HOUR_MS);
    CHECK_OK(db, tocsin_schedule_update(db, &next, "hourly", "*/5 * * * *", NULL, NULL, NULL));
    CHECK_EQ_I(next, T2024 + 5 * MIN_MS);
    CHECK_OK(db, tocsin_schedule_update(db, &next, "hourly", NULL, "other", "[1]", NULL));
    CHECK_EQ_I(next, T2024 + 5 * MIN_MS); /* same expression: kept */
    CHECK_OK(db, tocsin_schedule_get(db, &s, "hourly"));
    if (s) {
        CHECK_STR(s->cron, "*/5 * * * *");
        CHECK_STR(s->queue, "other");
        CHECK_STR(s->payload, "[1]");
    }
    tocsin_schedules_free(s, 1);
    CHECK_EQ_I(tocsin_schedule_update(db, &next, "nope", NULL, NULL, "1", NULL), TOCSIN_NOTFOUND);
    CHECK(strstr(tocsin_errmsg(db), "nope") != NULL);
    CHECK_OK(db, tocsin_scheduler_next_fire(db, &next));
    CHECK_EQ_I(next, T2024 + 2 * MIN_MS);

    /* pause: nothing fires; resume: from the next boundary after now */
    CHECK_OK(db, tocsin_schedule_pause(db, "minutely"));
    CHECK_OK(db, tocsin_scheduler_next_fire(db, &next));
    CHECK_EQ_I(next, T2024 + 5 * MIN_MS);
    clk.now = T2024 + 10 * MIN_MS + 1;
    CHECK_OK(db, tocsin_scheduler_tick(db, &fired));
    CHECK_EQ_I(fired, 1); /* only "hourly" (every 5 minutes now, catch-up once) */
    CHECK_OK(db, tocsin_schedule_resume(db, "minutely"));
    CHECK_OK(db, tocsin_schedule_get(db, &s, "minutely"));
    if (s) {
        CHECK_EQ_I(s->paused, 0);
        CHECK_EQ_I(s->next_fire, T2024 + 11 * MIN_MS);
        CHECK_EQ_I(s->fired_count, 1);
    }
    tocsin_schedules_free(s, 1);
    CHECK_OK(db, tocsin_schedule_resume(db, "minutely")); /* not paused: nothing changes */
    CHECK_EQ_I(tocsin_schedule_pause(db, "nope"), TOCSIN_NOTFOUND);
    CHECK_EQ_I(tocsin_schedule_resume(db, "nope"), TOCSIN_NOTFOUND);

    /* list, remove */
    CHECK_OK(db, tocsin_schedule_list(db, &list, &n));
    CHECK_EQ_I(n, 2);
    if (n == 2) {
        CHECK_STR(list[0].name, "hourly");
        CHECK_STR(list[1].name, "minutely");
    }
    tocsin_schedules_free(list, n);
    CHECK_OK(db, tocsin_schedule_remove(db, &ok, "hourly"));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_schedule_remove(db, &ok, "hourly"));
    CHECK_EQ_I(ok, 0);
    CHECK_OK(db, tocsin_schedule_get(db, &s, "hourly"));
    CHECK(s == NULL);

    /* a tick inside the caller's transaction rolls back with it */
    clk.now = T2024 + 11 * MIN_MS;
    {
        long long jobs_before = t_count(db, "_tocsin_jobs");
        CHECK_OK(db, tocsin_begin(db));
        CHECK_OK(db, tocsin_scheduler_tick(db, &fired));
        CHECK_EQ_I(fired, 1);
        CHECK_OK(db, tocsin_rollback(db));
        CHECK_EQ_I(t_count(db, "_tocsin_jobs"), jobs_before);
        CHECK_EQ_I(t_count(db, "_tocsin_schedules WHERE name = 'minutely' AND next_fire = 1704067860000"), 1);
    }
    /* nothing due anywhere: -1 */
    CHECK_OK(db, tocsin_schedule_pause(db, "minutely"));
    CHECK_OK(db, tocsin_scheduler_next_fire(db, &next));
    CHECK_EQ_I(next, -1);

    /* bad input: clear errors, nothing written */
    {
        long long rows = t_count(db, "_tocsin_schedules"), jobs_n = t_count(db, "_tocsin_jobs");
        tocsin_schedule_opts bad = TOCSIN_SCHEDULE_OPTS_INIT;
        CHECK_EQ_I(tocsin_schedule_set(db, &next, "s", "61 * * * *", "q", "{}", NULL), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "cron: minute field: 61 is out of range 0-59") != NULL);
        CHECK_EQ_I(tocsin_schedule_set(db, &next, "s", NULL, "q", "{}", NULL), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_schedule_set(db, &next, "", "@daily", "q", "{}", NULL), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "schedule name") != NULL);
        CHECK_EQ_I(tocsin_schedule_set(db, &next, "s", "@daily", "", "{}", NULL), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "queue name") != NULL);
        CHECK_EQ_I(tocsin_schedule_set(db, &next, "s", "@daily", "q", "{x", NULL), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "payload") != NULL);
        CHECK_EQ_I(tocsin_schedule_set(db, &next, "s", "@daily", "q", NULL, NULL), TOCSIN_INVALID);
        bad.version = 0;
        CHECK_EQ_I(tocsin_schedule_set(db, &next, "s", "@daily", "q", "{}", &bad), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "version") != NULL);
        bad.version = TOCSIN_SCHEDULE_OPTS_VERSION;
        bad.catch_up = 7;
        CHECK_EQ_I(tocsin_schedule_set(db, &next, "s", "@daily", "q", "{}", &bad), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "catch_up") != NULL);
        bad.catch_up = 0;
        bad.max_catch_up = -1;
        CHECK_EQ_I(tocsin_schedule_set(db, &next, "s", "@daily", "q", "{}", &bad), TOCSIN_INVALID);
        bad.max_catch_up = 0;
        bad.max_attempts = -1;
        CHECK_EQ_I(tocsin_schedule_set(db, &next, "s", "@daily", "q", "{}", &bad), TOCSIN_INVALID);
        bad.max_attempts = 0;
        bad.job_expires_ms = -1;
        CHECK_EQ_I(tocsin_schedule_set(db, &next, "s", "@daily", "q", "{}", &bad), TOCSIN_INVALID);
        bad.job_expires_ms = INT64_MAX;
        CHECK_EQ_I(tocsin_schedule_set(db, &next, "s", "@daily", "q", "{}", &bad), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "job_expires_ms") != NULL);
        bad.job_expires_ms = 0;
        bad.local_time = 2;
        CHECK_EQ_I(tocsin_schedule_set(db, &next, "s", "@daily", "q", "{}", &bad), TOCSIN_INVALID);
        bad.local_time = 0;
        bad.meta = "[1]";
        CHECK_EQ_I(tocsin_schedule_set(db, &next, "s", "@daily", "q", "{}", &bad), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "meta") != NULL);
        CHECK_EQ_I(tocsin_schedule_set(NULL, &next, "s", "@daily", "q", "{}", NULL), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_schedule_update(db, &next, "minutely", "bad", NULL, NULL, NULL), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_schedule_update(db, &next, NULL, NULL, NULL, NULL, NULL), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_schedule_pause(db, NULL), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_schedule_resume(db, ""), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_schedule_remove(db, NULL, "s"), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_schedule_remove(db, &ok, ""), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_schedule_get(db, NULL, "s"), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_schedule_get(db, &s, NULL), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_schedule_list(db, NULL, &n), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_scheduler_next_fire(db, NULL), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_scheduler_tick(NULL, &fired), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_scheduler_lead(db, NULL, NULL, "a", 10), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_scheduler_lead(db, &ok, NULL, "", 10), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_scheduler_lead(db, &ok, NULL, "a", 0), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_scheduler_resign(db, NULL, NULL), TOCSIN_INVALID);
        CHECK_EQ_I(t_count(db, "_tocsin_schedules"), rows);
        CHECK_EQ_I(t_count(db, "_tocsin_jobs"), jobs_n);
        CHECK_EQ_I(t_count(db, "_tocsin_locks"), 0);
        tocsin_schedules_free(NULL, 3);
    }
    tocsin_close(db);
}

/* After a long outage: "once" fires one job, "all" every boundary up to its
 * cap and counts the rest as skipped. */
static void catch_up(void) {
    t_clock clk = {T2024 + 30 * MIN_MS}; /* 00:30 */
    tocsin_db *db = t_open("catchup", &clk);
    tocsin_schedule_opts once = TOCSIN_SCHEDULE_OPTS_INIT, capped = TOCSIN_SCHEDULE_OPTS_INIT,
                         all = TOCSIN_SCHEDULE_OPTS_INIT;
    tocsin_schedule *s = NULL;
    int64_t fired = 0, next;
    capped.catch_up = all.catch_up = TOCSIN_CATCHUP_ALL;
    capped.max_catch_up = 5;
    CHECK_OK(db, tocsin_schedule_set(db, &next, "once", "@hourly", "q1", "{}", &once));
    CHECK_OK(db, tocsin_schedule_set(db, &next, "capped", "@hourly", "q2", "{}", &capped));
    CHECK_OK(db, tocsin_schedule_set(db, &next, "all", "@hourly", "q3", "{}", &all));
    /* nobody ticks from 00:30 to 10:30: boundaries 01:00 .. 10:00 were missed */
    clk.now = T2024 + 10 * HOUR_MS + 30 * MIN_MS;
    CHECK_OK(db, tocsin_scheduler_tick(db, &fired));
    CHECK_EQ_I(fired, 1 + 5 + 10);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE queue = 'q1'"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE queue = 'q1' AND run_at = 1704070800000 AND "
                           "json_extract(meta, '$.tocsin_fire_at') = 1704070800000"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE queue = 'q2'"), 5);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE queue = 'q2' AND run_at BETWEEN 1704070800000 "
                           "AND 1704085200000"), 5); /* 01:00 .. 05:00, oldest first */
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE queue = 'q3'"), 10);
    CHECK_EQ_I(t_count(db, "(SELECT DISTINCT json_extract(meta, '$.tocsin_fire_at') FROM _tocsin_jobs "
                           "WHERE queue = 'q3')"), 10);
    CHECK_OK(db, tocsin_schedule_get(db, &s, "capped"));
    if (s) {
        CHECK_EQ_I(s->fired_count, 5);
        CHECK_EQ_I(s->skipped_count, 5);
        CHECK_EQ_I(s->next_fire, T2024 + 11 * HOUR_MS);
        CHECK_EQ_I(s->last_fire, T2024 + 5 * HOUR_MS);
    }
    tocsin_schedules_free(s, 1);
    CHECK_OK(db, tocsin_schedule_get(db, &s, "once"));
    if (s) {
        CHECK_EQ_I(s->fired_count, 1);
        CHECK_EQ_I(s->skipped_count, 0);
        CHECK_EQ_I(s->next_fire, T2024 + 11 * HOUR_MS);
    }
    tocsin_schedules_free(s, 1);
    CHECK_OK(db, tocsin_schedule_get(db, &s, "all"));
    if (s) CHECK_EQ_I(s->next_fire, T2024 + 11 * HOUR_MS);
    tocsin_schedules_free(s, 1);
    CHECK_OK(db, tocsin_scheduler_tick(db, &fired));
    CHECK_EQ_I(fired, 0);
    tocsin_close(db);
}

typedef struct racer {
    const char *path;
    int64_t *times;
    int n_times;
    pthread_barrier_t *barrier;
    int64_t fired;
    int errors;
} racer;

static void *race_thread(void *p) {
    racer *r = p;
    t_clock clk = {0};
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    tocsin_db *db = NULL;
    int i;
    o.clock = t_clock_fn;
    o.clock_ctx = &clk;
    o.busy_timeout_ms = 20000;
    if (tocsin_open(&db, r->path, &o) != TOCSIN_OK) {
        r->errors++;
        tocsin_close(db);
        return NULL;
    }
    for (i = 0; i < r->n_times; i++) {
        int64_t n = 0;
        clk.now = r->times[i];
        if (r->barrier) pthread_barrier_wait(r->barrier);
        if (tocsin_scheduler_tick(db, &n) != TOCSIN_OK) {
            fprintf(stderr, "tick: %s\n", tocsin_errmsg(db));
            r->errors++;
        }
        r->fired += n;
    }
    tocsin_close(db);
    return NULL;
}

/* Two tickers on two handles race over the same due boundaries: each boundary
 * fires exactly once. Run in lockstep (barrier) and free-running. */
static void racing_tickers(void) {
    t_clock clk = {T2024};
    tocsin_db *db = t_open("race", &clk);
    tocsin_schedule_opts all = TOCSIN_SCHEDULE_OPTS_INIT;
    int64_t next, times_a[120], times_b[120];
    racer a, b;
    pthread_t ta, tb;
    pthread_barrier_t bar;
    int i, round;
    int64_t total = 0;
    const char *path = sqlite3_db_filename(tocsin_sqlite(db), "main");
    all.catch_up = TOCSIN_CATCHUP_ALL;
    all.max_catch_up = 1000;
    CHECK_OK(db, tocsin_schedule_set(db, &next, "s1", "* * * * *", "q", "{}", &all));
    CHECK_OK(db, tocsin_schedule_set(db, &next, "s2", "*/2 * * * *", "q", "{}", &all));
    CHECK_OK(db, tocsin_schedule_set(db, &next, "s3", "*/10 * * * * *", "q", "{}", &all));
    CHECK_OK(db, tocsin_schedule_set(db, &next, "s4", "@every 7s", "q", "{}", NULL));
    for (round = 0; round < 2; round++) {
        for (i = 0; i < 120; i++) {
            /* lockstep: the same instants; free-running: different ones */
            times_a[i] = T2024 + (round * 120 + i) * 30000;
            times_b[i] = round ? T2024 + (120 + i) * 30000 + 15000 : times_a[i];
        }
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        a.path = b.path = path;
        a.times = times_a;
        b.times = times_b;
        a.n_times = b.n_times = 120;
        if (round == 0) {
            pthread_barrier_init(&bar, NULL, 2);
            a.barrier = b.barrier = &bar;
        }
        pthread_create(&ta, NULL, race_thread, &a);
        pthread_create(&tb, NULL, race_thread, &b);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        if (round == 0) pthread_barrier_destroy(&bar);
        CHECK_EQ_I(a.errors + b.errors, 0);
        total += a.fired + b.fired;
        CHECK_EQ_I(total, t_count(db, "_tocsin_jobs")); /* the tickers' counts add up */
    }
    /* each (schedule, boundary) exactly once, and every boundary up to the end */
    CHECK_EQ_I(t_count(db, "(SELECT json_extract(meta, '$.tocsin_schedule') s,"
                           " json_extract(meta, '$.tocsin_fire_at') b FROM _tocsin_jobs"
                           " GROUP BY s, b HAVING count(*) > 1)"), 0);
    /* the last tick was at 00:00 + 239*30s + 15s = 01:59:45 */
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE meta ->> '$.tocsin_schedule' = 's1'"), 119);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE meta ->> '$.tocsin_schedule' = 's2'"), 59);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE meta ->> '$.tocsin_schedule' = 's3'"), 718);
    /* @every 7s, catch-up once: one job per tick instant that found it due
     * (119 lockstep instants; at most 240 free-running ones) */
    CHECK(t_count(db, "_tocsin_jobs WHERE meta ->> '$.tocsin_schedule' = 's4'") >= 120);
    CHECK(t_count(db, "_tocsin_jobs WHERE meta ->> '$.tocsin_schedule' = 's4'") <= 359);
    tocsin_close(db);
}

/* The leader lease: one leader; standbys take over when its lease lapses. */
static void leadership(void) {
    t_clock ca = {T2024}, cb = {T2024};
    tocsin_db *a = t_open("leader", &ca), *b = NULL;
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    int lead_a = -1, lead_b = -1, ok = -1;
    int64_t tok_a = 0, tok_b = 0, tok;
    o.clock = t_clock_fn;
    o.clock_ctx = &cb;
    CHECK_OK(a, tocsin_open(&b, sqlite3_db_filename(tocsin_sqlite(a), "main"), &o));
    CHECK_OK(a, tocsin_scheduler_lead(a, &lead_a, &tok_a, "node-a", 3000));
    CHECK_EQ_I(lead_a, 1);
    CHECK_OK(b, tocsin_scheduler_lead(b, &lead_b, &tok_b, "node-b", 3000));
    CHECK_EQ_I(lead_b, 0);
    CHECK_EQ_I(tok_b, 0);
    /* the leader renews every second; the standby keeps waiting */
    for (int i = 1; i <= 10; i++) {
        ca.now = cb.now = T2024 + i * 1000;
        CHECK_OK(a, tocsin_scheduler_lead(a, &lead_a, &tok, "node-a", 3000));
        CHECK(lead_a == 1 && tok == tok_a);
        CHECK_OK(b, tocsin_scheduler_lead(b, &lead_b, NULL, "node-b", 3000));
        CHECK_EQ_I(lead_b, 0);
    }
    /* the leader stops (crash): its lease lapses 3 s after its last renewal */
    cb.now = T2024 + 12999;
    CHECK_OK(b, tocsin_scheduler_lead(b, &lead_b, &tok_b, "node-b", 3000));
    CHECK_EQ_I(lead_b, 0);
    cb.now = ca.now = T2024 + 13000;
    CHECK_OK(b, tocsin_scheduler_lead(b, &lead_b, &tok_b, "node-b", 3000));
    CHECK_EQ_I(lead_b, 1);
    CHECK(tok_b > tok_a);
    /* the old leader comes back: it is a standby now */
    CHECK_OK(a, tocsin_scheduler_lead(a, &lead_a, &tok, "node-a", 3000));
    CHECK_EQ_I(lead_a, 0);
    /* a clean hand-over */
    CHECK_OK(a, tocsin_scheduler_resign(a, &ok, "node-a"));
    CHECK_EQ_I(ok, 0);
    CHECK_OK(b, tocsin_scheduler_resign(b, &ok, "node-b"));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(a, tocsin_scheduler_lead(a, &lead_a, &tok, "node-a", 3000));
    CHECK_EQ_I(lead_a, 1);
    CHECK(tok > tok_b);
    tocsin_close(b);
    tocsin_close(a);
}

/* A local-time schedule follows TZ (America/New_York here). */
static void local_schedule(void) {
    char *old = getenv("TZ") ? strdup(getenv("TZ")) : NULL;
    t_clock clk = {1710028800000LL}; /* 2024-03-10T00:00:00Z */
    tocsin_db *db;
    tocsin_schedule_opts lo = TOCSIN_SCHEDULE_OPTS_INIT;
    int64_t next = 0, fired = 0;
    setenv("TZ", "America/New_York", 1);
    tzset();
    db = t_open("localsched", &clk);
    lo.local_time = 1;
    CHECK_OK(db, tocsin_schedule_set(db, &next, "nightly", "30 2 * * *", "q", "{}", &lo));
    CHECK_EQ_I(next, 1710054000000LL); /* 03:00 EDT: 02:30 does not exist that day */
    CHECK_OK(db, tocsin_schedule_set(db, &next, "utc", "30 2 * * *", "q", "{}", NULL));
    CHECK_EQ_I(next, 1710037800000LL); /* 02:30Z */
    /* switching the zone is a new expression: next_fire restarts */
    lo.local_time = 0;
    CHECK_OK(db, tocsin_schedule_set(db, &next, "nightly", "30 2 * * *", "q", "{}", &lo));
    CHECK_EQ_I(next, 1710037800000LL);
    clk.now = 1710037800000LL;
    CHECK_OK(db, tocsin_scheduler_tick(db, &fired));
    CHECK_EQ_I(fired, 2);
    tocsin_close(db);
    if (old) {
        setenv("TZ", old, 1);
        free(old);
    } else {
        unsetenv("TZ");
    }
    tzset();
}

/* ---- SQL functions -------------------------------------------------------- */

static void sql_functions(void) {
    t_clock clk = {T2024};
    tocsin_db *db = t_open("coordsql", &clk);
    CHECK_OK(db, tocsin_register_sql(db));
    /* results */
    Q(db, "SELECT tocsin_result_save(1, '{\"a\":1}')", "1");
    Q(db, "SELECT tocsin_result_save(2, 'null', 1000)", "1");
    Q(db, "SELECT tocsin_result_get(1)",
      "{\"job_id\":1,\"status\":\"ok\",\"value\":{\"a\":1},\"error\":null,"
      "\"created_at\":1704067200000,\"expires_at\":null}");
    Q(db, "SELECT tocsin_result_get(2) ->> '$.status'", "ok");
    Q(db, "SELECT json_type(tocsin_result_get(2), '$.value')", "null");
    Q(db, "SELECT tocsin_result_get(3) IS NULL", "1");
    Q(db, "SELECT tocsin_result_save_error(3, 'KeyError', 'no key', 0)", "1");
    Q(db, "SELECT tocsin_result_get(3) -> '$.error'", "{\"type\":\"KeyError\",\"message\":\"no key\"}");
    Q(db, "SELECT tocsin_result_save_error(4, 'E')", "1");
    Q(db, "SELECT tocsin_result_get(4) ->> '$.error.message'", "");
    Q(db, "SELECT tocsin_clock(1704067201000)", "1704067201000");
    Q(db, "SELECT tocsin_result_get(2)", "NULL");
    Q(db, "SELECT tocsin_result_sweep()", "1");
    Q(db, "SELECT tocsin_result_delete(1)", "1");
    Q(db, "SELECT tocsin_result_delete(1)", "0");
    Q(db, "SELECT tocsin_result_save(0, '1')", "ERR: tocsin_result_save: job_id must be >= 1");
    Q(db, "SELECT tocsin_result_save(1, '{x')", "ERR: tocsin_result_save: value is not valid JSON");
    Q(db, "SELECT tocsin_result_save(1, NULL)", "ERR: tocsin_result_save: value must not be NULL");
    Q(db, "SELECT tocsin_result_save('a', '1')", "ERR: tocsin_result_save: job_id must be an integer");
    Q(db, "SELECT tocsin_result_save_error(1, '', 'm')", "ERR: tocsin_result_save_error: error type must not be empty");
    Q(db, "SELECT tocsin_result_get(NULL)", "ERR: tocsin_result_get: job_id must be an integer");
    /* locks */
    Q(db, "SELECT tocsin_lock_acquire('L', 'a', 1000)", "1");
    Q(db, "SELECT tocsin_lock_acquire('L', 'b', 1000)", "NULL");
    Q(db, "SELECT tocsin_lock_holder('L')",
      "{\"name\":\"L\",\"owner\":\"a\",\"token\":1,\"expires_at\":1704067202000}");
    Q(db, "SELECT tocsin_lock_renew('L', 'a', 1, 5000)", "1");
    Q(db, "SELECT tocsin_lock_renew('L', 'b', 1, 5000)", "0");
    Q(db, "SELECT tocsin_lock_release('L', 'a', 1)", "1");
    Q(db, "SELECT tocsin_lock_acquire('L', 'b', 1000)", "2");
    Q(db, "SELECT tocsin_lock_holder('free') ->> '$.owner' IS NULL", "1");
    Q(db, "SELECT tocsin_lock_acquire('L', 'a', 0)", "ERR: tocsin_lock_acquire: ttl_ms must be between 1*");
    Q(db, "SELECT tocsin_lock_acquire('', 'a', 10)", "ERR: tocsin_lock_acquire: lock name must not be empty");
    Q(db, "SELECT tocsin_lock_renew('L', 'a', 0, 10)", "ERR: tocsin_lock_renew: token must be >= 1");
    Q(db, "SELECT tocsin_lock_release('L', NULL, 1)", "ERR: tocsin_lock_release: owner must not be NULL");
    /* rate limits */
    Q(db, "SELECT tocsin_ratelimit_try('r', 2, 1000)", "{\"allowed\":true,\"retry_after_ms\":0,\"remaining\":1}");
    Q(db, "SELECT tocsin_ratelimit_try('r', 2, 1000)", "{\"allowed\":true,\"retry_after_ms\":0,\"remaining\":0}");
    Q(db, "SELECT tocsin_ratelimit_try('r', 2, 1000)", "{\"allowed\":false,\"retry_after_ms\":1000,\"remaining\":0}");
    Q(db, "SELECT tocsin_ratelimit_try('r', 2, 1000) ->> '$.allowed'", "0");
    Q(db, "SELECT tocsin_ratelimit_reset('r')", "2");
    Q(db, "SELECT tocsin_ratelimit_try('r', 0, 1000)", "ERR: tocsin_ratelimit_try: limit must be between 1 and 1000000");
    Q(db, "SELECT tocsin_ratelimit_try('r', 1, -1)", "ERR: tocsin_ratelimit_try: per_ms must be between 1*");
    Q(db, "SELECT tocsin_ratelimit_try('r2', 1, 10) ->> '$.allowed'", "1");
    Q(db, "SELECT tocsin_clock(1704067300000)", "1704067300000");
    Q(db, "SELECT tocsin_ratelimit_sweep()", "1");
    /* cron */
    Q(db, "SELECT tocsin_cron_next('*/15 * * * *', 1704067200000)", "1704068100000");
    Q(db, "SELECT tocsin_cron_next('@every 90s', 0, 'UTC')", "90000");
    Q(db, "SELECT tocsin_cron_next('0 0 1 1 *', 253402300000000)", "NULL");
    Q(db, "SELECT tocsin_cron_next('61 * * * *', 0)", "ERR: tocsin_cron_next: minute field: 61 is out of range 0-59");
    Q(db, "SELECT tocsin_cron_next('@daily', 0, 'mars')", "ERR: tocsin_cron_next: zone must be 'utc' or 'local', not 'mars'");
    Q(db, "SELECT tocsin_cron_next('@daily', -1)", "ERR: tocsin_cron_next: after_ms must be between*");
    Q(db, "SELECT tocsin_cron_next(NULL, 0)", "ERR: tocsin_cron_next: cron must not be NULL");
    /* scheduler */
    Q(db, "SELECT tocsin_clock(1704067200000)", "1704067200000");
    Q(db, "SELECT tocsin_schedule_set('m', '* * * * *', 'q', '{\"k\":1}', "
          "'{\"priority\":3,\"catch_up\":\"all\",\"max_catch_up\":2,\"meta\":{\"m\":1}}')",
      "1704067260000");
    Q(db, "SELECT tocsin_schedule_get('m') ->> '$.catch_up'", "all");
    Q(db, "SELECT tocsin_schedule_get('m') ->> '$.max_catch_up'", "2");
    Q(db, "SELECT tocsin_schedule_update('m', '{\"payload\":\"text\",\"priority\":9}')", "1704067260000");
    Q(db, "SELECT tocsin_schedule_get('m') ->> '$.payload'", "text");
    Q(db, "SELECT tocsin_schedule_get('m') ->> '$.priority'", "9");
    Q(db, "SELECT tocsin_schedule_get('m') ->> '$.catch_up'", "all"); /* kept */
    Q(db, "SELECT tocsin_schedule_update('m', '{\"payload\":{\"k\":2}}')", "1704067260000");
    Q(db, "SELECT tocsin_schedule_get('m') -> '$.payload'", "{\"k\":2}");
    Q(db, "SELECT tocsin_schedule_update('zz', '{\"cron\":\"@daily\"}')", "ERR: tocsin_schedule_update: no schedule named \"zz\"");
    Q(db, "SELECT tocsin_schedule_update('m', '{\"colour\":1}')", "ERR: tocsin_schedule_update: unknown option \"colour\"");
    Q(db, "SELECT tocsin_scheduler_next_fire()", "1704067260000");
    Q(db, "SELECT tocsin_clock(1704067440000)", "1704067440000"); /* 00:04: 4 due, cap 2 */
    Q(db, "SELECT tocsin_scheduler_tick()", "2");
    Q(db, "SELECT tocsin_schedule_get('m') ->> '$.skipped_count'", "2");
    Q(db, "SELECT tocsin_scheduler_tick()", "0");
    Q(db, "SELECT count(*) FROM _tocsin_jobs WHERE priority = 9 AND meta ->> '$.m' = 1", "2");
    Q(db, "SELECT tocsin_schedule_pause('m')", "1");
    Q(db, "SELECT tocsin_scheduler_next_fire()", "NULL");
    Q(db, "SELECT tocsin_schedule_resume('m')", "1");
    Q(db, "SELECT json_array_length(tocsin_schedule_list())", "1");
    Q(db, "SELECT tocsin_schedule_list() ->> '$[0].name'", "m");
    Q(db, "SELECT tocsin_schedule_pause('nope')", "ERR: tocsin_schedule_pause: no schedule named \"nope\"");
    Q(db, "SELECT tocsin_schedule_set('x', 'nope', 'q', '{}')", "ERR: tocsin_schedule_set: cron: expected 5 or 6 fields*");
    Q(db, "SELECT tocsin_schedule_set('x', '@daily', 'q', '{}', '{\"catch_up\":\"some\"}')",
      "ERR: tocsin_schedule_set: option \"catch_up\" must be \"once\" or \"all\"");
    Q(db, "SELECT tocsin_schedule_set('x', '@daily', 'q', '{}', '{\"max_catch_up\":0}')",
      "ERR: tocsin_schedule_set: option \"max_catch_up\" must be between 1 and 100000");
    Q(db, "SELECT tocsin_schedule_set('x', '@daily', 'q', '{}', '{\"local_time\":1}')",
      "ERR: tocsin_schedule_set: option \"local_time\" must be true or false");
    Q(db, "SELECT tocsin_schedule_set('x', '@daily', 'q', '{}', '{\"local_time\":true}')", "1704153600000");
    Q(db, "SELECT tocsin_schedule_get('x') ->> '$.local_time'", "1");
    Q(db, "SELECT tocsin_schedule_remove('x')", "1");
    Q(db, "SELECT tocsin_schedule_get('x')", "NULL");
    Q(db, "SELECT tocsin_scheduler_lead('n1', 1000)", "1");
    Q(db, "SELECT tocsin_scheduler_lead('n2', 1000)", "NULL");
    Q(db, "SELECT tocsin_scheduler_resign('n1')", "1");
    Q(db, "SELECT tocsin_scheduler_lead('n2', 1000)", "2");
    Q(db, "SELECT tocsin_scheduler_lead('n2', 0)", "ERR: tocsin_scheduler_lead: ttl_ms must be between 1*");
    tocsin_close(db);
}

/* A second handle saves the result while the first waits on it. */
typedef struct saver {
    const char *path;
    int64_t job_id;
    int rc;
} saver;

static void *save_later(void *p) {
    saver *sv = p;
    tocsin_db *db = NULL;
    int64_t tok = 0;
    tocsin_job *jobs = NULL;
    size_t n = 0;
    int ok = 0;
    sv->rc = tocsin_open(&db, sv->path, NULL);
    if (sv->rc == TOCSIN_OK) sv->rc = tocsin_queue_claim(db, &jobs, &n, "rw", "saver", 1, 60000);
    if (sv->rc == TOCSIN_OK && n == 1) {
        tok = jobs[0].token;
        /* result and ack in one transaction: the outcome appears atomically */
        sv->rc = tocsin_begin(db);
        if (sv->rc == TOCSIN_OK) sv->rc = tocsin_result_save(db, sv->job_id, "{\"sent\":true}", 0);
        if (sv->rc == TOCSIN_OK) sv->rc = tocsin_job_ack(db, &ok, sv->job_id, tok);
        if (sv->rc == TOCSIN_OK) sv->rc = tocsin_commit(db);
    }
    tocsin_jobs_free(jobs, n);
    tocsin_close(db);
    return NULL;
}

static void result_outcomes(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("result_wait", &clk);
    tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
    tocsin_result *r = NULL;
    tocsin_job *jobs = NULL;
    tocsin_sub *sub = NULL;
    size_t n = 0;
    int64_t id = 0, id2 = 0;
    int ok = 0;
    pthread_t th;
    saver sv;

    CHECK_EQ_I(tocsin_result_check(db, &r, 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_result_check(db, NULL, 1), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_result_check(db, &r, 777), TOCSIN_NOTFOUND);
    CHECK(strstr(tocsin_errmsg(db), "777") != NULL);
    CHECK_EQ_I(tocsin_result_wait(db, &r, -1, -1, NULL), TOCSIN_INVALID);
    /* pending: no outcome yet; a deadline already passed ends the wait */
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "rw", "{}", NULL));
    CHECK_OK(db, tocsin_result_check(db, &r, id));
    CHECK(r == NULL);
    CHECK_EQ_I(tocsin_result_wait(db, &r, id, 1000, NULL), TOCSIN_TIMEOUT);
    CHECK(r == NULL);
    /* a timeout says why: never claimed, running, retrying */
    CHECK(strstr(tocsin_errmsg(NULL), "never claimed") != NULL);
    CHECK_OK(db, tocsin_queue_enqueue(db, &id2, "why", "{}", NULL));
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "why", "w1", 1, 100));
    CHECK_EQ_I(tocsin_result_wait(db, &r, id2, 1000, NULL), TOCSIN_TIMEOUT);
    CHECK(strstr(tocsin_errmsg(NULL), "is running (attempt 1 of 3, worker w1)") != NULL);
    CHECK_OK(db, tocsin_job_retry(db, &ok, id2, n ? jobs[0].token : 0, 500, "ValueError: x"));
    tocsin_jobs_free(jobs, n);
    CHECK_EQ_I(tocsin_result_wait(db, &r, id2, 1000, NULL), TOCSIN_TIMEOUT);
    CHECK(strstr(tocsin_errmsg(NULL), "is retrying: attempt 1 of 3 ended (ValueError: x); the next run is due in 500 ms") != NULL);
    CHECK_OK(db, tocsin_job_cancel(db, &ok, id2));
    /* inside a transaction a wait is refused */
    CHECK_OK(db, tocsin_begin(db));
    CHECK_EQ_I(tocsin_result_wait(db, &r, id, -1, NULL), TOCSIN_INVALID);
    CHECK_OK(db, tocsin_rollback(db));
    /* another handle claims, saves and acks in one transaction while we wait */
    sv.path = sqlite3_db_filename(tocsin_sqlite(db), "main");
    sv.job_id = id;
    sv.rc = -1;
    CHECK(pthread_create(&th, NULL, save_later, &sv) == 0);
    CHECK_OK(db, tocsin_result_wait(db, &r, id, -1, NULL));
    pthread_join(th, NULL);
    CHECK_EQ_I(sv.rc, TOCSIN_OK);
    CHECK(r != NULL && !r->is_error);
    if (r) CHECK_STR(r->value, "{\"sent\":true}");
    tocsin_result_free(r);
    r = NULL;
    /* a job that died without a result: a JobDead error, not an endless wait */
    o.max_attempts = 1;
    CHECK_OK(db, tocsin_queue_enqueue(db, &id2, "dies", "{}", &o));
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "dies", "w", 1, 100));
    CHECK_EQ_I(n, 1);
    CHECK_OK(db, tocsin_job_fail(db, &ok, id2, n ? jobs[0].token : 0, "disk full"));
    tocsin_jobs_free(jobs, n);
    CHECK_OK(db, tocsin_result_wait(db, &r, id2, -1, NULL));
    CHECK(r != NULL && r->is_error);
    if (r) {
        CHECK_STR(r->error_type, "JobDead");
        CHECK_STR(r->error_message, "the job died (failed): disk full");
    }
    tocsin_result_free(r);
    r = NULL;
    /* acked without a result */
    CHECK_OK(db, tocsin_queue_enqueue(db, &id2, "plain", "{}", NULL));
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "plain", "w", 1, 100));
    CHECK_OK(db, tocsin_job_ack(db, &ok, id2, n ? jobs[0].token : 0));
    tocsin_jobs_free(jobs, n);
    CHECK_EQ_I(tocsin_result_wait(db, &r, id2, -1, NULL), TOCSIN_NOTFOUND);
    /* a poke ends the wait with no outcome */
    CHECK_OK(db, tocsin_queue_enqueue(db, &id2, "never", "{}", NULL));
    CHECK_OK(db, tocsin_sub_open(&sub, db));
    CHECK_OK(db, tocsin_sub_poke(sub));
    CHECK_EQ_I(tocsin_result_wait(db, &r, id2, -1, sub), TOCSIN_INTERRUPTED);
    CHECK(r == NULL);
    tocsin_sub_close(sub);
    tocsin_close(db);
}

/* Finishing a task's job: the lease check, the ack/fail and the result in one unit. */
static void finish_tasks(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("finish", &clk);
    tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
    tocsin_job *jobs = NULL, *job = NULL;
    tocsin_result *r = NULL;
    size_t n = 0;
    int64_t a = 0, b = 0, ta, tb;
    int ok = -1;
    o.max_attempts = 5;
    CHECK_OK(db, tocsin_queue_enqueue(db, &a, "t", "{\"task\":\"x\"}", &o));
    CHECK_OK(db, tocsin_queue_enqueue(db, &b, "t", "{\"task\":\"y\"}", &o));
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "t", "w", 2, 1000));
    CHECK_EQ_I(n, 2);
    ta = jobs[0].token;
    tb = jobs[1].token;
    tocsin_jobs_free(jobs, n);
    /* bad input first: nothing written */
    CHECK_EQ_I(tocsin_job_complete(db, &ok, a, ta, "{bad", 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_job_complete(db, &ok, a, ta, "1", -1), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_job_complete(db, NULL, a, ta, "1", 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_job_fail_task(db, &ok, b, tb, "", "m", 0), TOCSIN_INVALID);
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'processing'"), 2);
    /* a stale token writes nothing: no result, job untouched */
    CHECK_OK(db, tocsin_job_complete(db, &ok, a, ta + 1, "1", 0));
    CHECK_EQ_I(ok, 0);
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 0);
    CHECK_OK(db, tocsin_job_complete(db, &ok, a, ta, "{\"sum\":3}", 5000));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_result_get(db, &r, a));
    CHECK(r && !r->is_error && strcmp(r->value, "{\"sum\":3}") == 0 && r->expires_at == 6000);
    tocsin_result_free(r);
    CHECK_OK(db, tocsin_job_get(db, &job, a));
    CHECK(job == NULL);
    CHECK_OK(db, tocsin_job_fail_task(db, &ok, b, tb, "ValueError", "bad address", 0));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_result_get(db, &r, b));
    CHECK(r && r->is_error);
    if (r) {
        CHECK_STR(r->error_type, "ValueError");
        CHECK_STR(r->error_message, "bad address");
    }
    tocsin_result_free(r);
    CHECK_OK(db, tocsin_job_get(db, &job, b));
    CHECK(job && strcmp(job->state, "dead") == 0);
    if (job) {
        CHECK_STR(job->reason, "failed");
        CHECK_STR(job->last_error, "ValueError: bad address");
    }
    tocsin_jobs_free(job, 1);
    /* a second finish of the same job: its lease is gone */
    CHECK_OK(db, tocsin_job_fail_task(db, &ok, b, tb, "ValueError", NULL, 0));
    CHECK_EQ_I(ok, 0);
    /* a message within the limit whose "type: message" is not: last_error is cut
     * to the limit, as the worker cuts it; the result keeps the whole message */
    CHECK_OK(db, tocsin_queue_enqueue(db, &a, "t", "{\"task\":\"z\"}", &o));
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "t", "w", 1, 1000));
    CHECK_EQ_I(n, 1);
    ta = n == 1 ? jobs[0].token : 0;
    tocsin_jobs_free(jobs, n);
    CHECK_OK(db, tocsin_set_max_payload(db, 16));
    CHECK_OK(db, tocsin_job_fail_task(db, &ok, a, ta, "ValueError", "0123456789", 0));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_set_max_payload(db, 1048576));
    CHECK_OK(db, tocsin_job_get(db, &job, a));
    CHECK(job && job->last_error && strcmp(job->last_error, "ValueError: 0123") == 0);
    tocsin_jobs_free(job, 1);
    CHECK_OK(db, tocsin_result_get(db, &r, a));
    CHECK(r && r->is_error && strcmp(r->error_message, "0123456789") == 0);
    tocsin_result_free(r);
    tocsin_close(db);
}

/* tocsin_schedule_update changes only the flagged fields (regression: an update
 * of one option used to reset every other option to its default). */
static void schedule_update_fields(void) {
    t_clock clk = {T2024};
    tocsin_db *db = t_open("schedupdate", &clk);
    tocsin_schedule_opts so = TOCSIN_SCHEDULE_OPTS_INIT, ch = TOCSIN_SCHEDULE_OPTS_INIT;
    tocsin_schedule *s = NULL;
    int64_t next = 0, before_next = 0;
    so.priority = 2;
    so.max_attempts = 5;
    so.job_expires_ms = 60000;
    so.catch_up = TOCSIN_CATCHUP_ALL;
    so.max_catch_up = 7;
    so.local_time = 0;
    so.meta = "{\"team\":\"ops\"}";
    CHECK_OK(db, tocsin_schedule_set(db, &before_next, "s", "*/5 * * * *", "q", "{\"n\":1}", &so));
    /* priority only: every other option keeps its stored value */
    ch.priority = 9;
    ch.fields = TOCSIN_SCHEDULE_PRIORITY;
    CHECK_OK(db, tocsin_schedule_update(db, &next, "s", NULL, NULL, NULL, &ch));
    CHECK_EQ_I(next, before_next);
    CHECK_OK(db, tocsin_schedule_get(db, &s, "s"));
    CHECK(s != NULL);
    if (s) {
        CHECK_EQ_I(s->priority, 9);
        CHECK_EQ_I(s->max_attempts, 5);
        CHECK_EQ_I(s->job_expires_ms, 60000);
        CHECK_EQ_I(s->catch_up, TOCSIN_CATCHUP_ALL);
        CHECK_EQ_I(s->max_catch_up, 7);
        CHECK_EQ_I(s->local_time, 0);
        CHECK_STR(s->meta, "{\"team\":\"ops\"}");
        CHECK_STR(s->payload, "{\"n\":1}");
        CHECK_STR(s->cron, "*/5 * * * *");
    }
    tocsin_schedules_free(s, 1);
    /* unflagged fields are ignored, even when they hold nonsense */
    ch.priority = 0;
    ch.max_attempts = -5;
    ch.catch_up = 42;
    ch.max_catch_up = 3;
    ch.fields = TOCSIN_SCHEDULE_MAX_CATCH_UP;
    CHECK_OK(db, tocsin_schedule_update(db, &next, "s", NULL, NULL, NULL, &ch));
    /* a flagged NULL meta removes it */
    ch.meta = NULL;
    ch.fields = TOCSIN_SCHEDULE_META;
    CHECK_OK(db, tocsin_schedule_update(db, &next, "s", NULL, NULL, NULL, &ch));
    /* no field flagged: options kept, strings change */
    ch.fields = 0;
    CHECK_OK(db, tocsin_schedule_update(db, &next, "s", "@hourly", NULL, "[2]", &ch));
    CHECK_OK(db, tocsin_schedule_get(db, &s, "s"));
    if (s) {
        CHECK_EQ_I(s->priority, 9);
        CHECK_EQ_I(s->max_attempts, 5);
        CHECK_EQ_I(s->catch_up, TOCSIN_CATCHUP_ALL);
        CHECK_EQ_I(s->max_catch_up, 3);
        CHECK(s->meta == NULL);
        CHECK_STR(s->cron, "@hourly");
        CHECK_STR(s->payload, "[2]");
        CHECK_STR(s->queue, "q");
    }
    tocsin_schedules_free(s, 1);
    /* a flagged bad value is refused, nothing written */
    ch.max_attempts = TOCSIN_MAX_ATTEMPTS + 1;
    ch.fields = TOCSIN_SCHEDULE_MAX_ATTEMPTS;
    CHECK_EQ_I(tocsin_schedule_update(db, &next, "s", NULL, NULL, NULL, &ch), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "max_attempts") != NULL);
    ch.job_expires_ms = TOCSIN_MAX_TIME_MS + 1;
    ch.fields = TOCSIN_SCHEDULE_JOB_EXPIRES;
    CHECK_EQ_I(tocsin_schedule_update(db, &next, "s", NULL, NULL, NULL, &ch), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "job_expires_ms") != NULL);
    ch.job_expires_ms = -1;
    CHECK_EQ_I(tocsin_schedule_update(db, &next, "s", NULL, NULL, NULL, &ch), TOCSIN_INVALID);
    ch.job_expires_ms = TOCSIN_MAX_TIME_MS; /* the longest expiry is accepted */
    CHECK_OK(db, tocsin_schedule_update(db, &next, "s", NULL, NULL, NULL, &ch));
    ch.max_catch_up = TOCSIN_MAX_CATCH_UP + 1;
    ch.fields = TOCSIN_SCHEDULE_MAX_CATCH_UP;
    CHECK_EQ_I(tocsin_schedule_update(db, &next, "s", NULL, NULL, NULL, &ch), TOCSIN_INVALID);
    ch.fields = 0x80u; /* not a field */
    CHECK_EQ_I(tocsin_schedule_update(db, &next, "s", NULL, NULL, NULL, &ch), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "flags") != NULL);
    /* stored texts are checked: a cron that is not UTF-8 */
    CHECK_EQ_I(tocsin_schedule_update(db, &next, "s", "@daily\xff", NULL, NULL, NULL), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "UTF-8") != NULL);
    CHECK_EQ_I(tocsin_schedule_set(db, &next, "u", "\xc3\x28 * * * *", "q", "1", NULL), TOCSIN_INVALID);
    CHECK_OK(db, tocsin_schedule_get(db, &s, "s"));
    if (s) {
        CHECK_EQ_I(s->max_attempts, 5);
        CHECK_EQ_I(s->max_catch_up, 3);
        CHECK_EQ_I(s->job_expires_ms, TOCSIN_MAX_TIME_MS);
        CHECK_STR(s->cron, "@hourly");
    }
    tocsin_schedules_free(s, 1);
    /* an opts of version 1 (no fields member) replaces every option, as it always did */
    {
        tocsin_schedule_opts v1 = TOCSIN_SCHEDULE_OPTS_INIT;
        v1.version = 1;
        v1.priority = 1;
        v1.fields = 0; /* not read for version 1 */
        CHECK_OK(db, tocsin_schedule_update(db, &next, "s", NULL, NULL, NULL, &v1));
        CHECK_OK(db, tocsin_schedule_get(db, &s, "s"));
        if (s) {
            CHECK_EQ_I(s->priority, 1);
            CHECK_EQ_I(s->max_attempts, TOCSIN_DEFAULT_MAX_ATTEMPTS);
            CHECK_EQ_I(s->catch_up, TOCSIN_CATCHUP_ONCE);
            CHECK_EQ_I(s->max_catch_up, TOCSIN_DEFAULT_MAX_CATCH_UP);
        }
        tocsin_schedules_free(s, 1);
    }
    /* set ignores fields: it sets everything */
    so.fields = TOCSIN_SCHEDULE_PRIORITY;
    CHECK_OK(db, tocsin_schedule_set(db, &next, "s", "@hourly", "q", "1", &so));
    CHECK_OK(db, tocsin_schedule_get(db, &s, "s"));
    if (s) {
        CHECK_EQ_I(s->max_attempts, 5);
        CHECK_EQ_I(s->max_catch_up, 7);
    }
    tocsin_schedules_free(s, 1);
    tocsin_close(db);
}

/* A schedule that cannot fire does not hold back the others. */
static void schedule_cannot_fire(void) {
    t_clock clk = {T2024 + 30000};
    tocsin_db *db = t_open("sched_bad", &clk);
    int64_t next = 0, fired = -1;
    tocsin_schedule *s = NULL;
    CHECK_OK(db, tocsin_schedule_set(db, &next, "a-damaged", "* * * * *", "jobs", "{\"a\":1}", NULL));
    CHECK_OK(db, tocsin_schedule_set(db, &next, "b-good", "* * * * *", "jobs", "{\"b\":1}", NULL));
    CHECK_OK(db, tocsin_schedule_set(db, &next, "c-big", "* * * * *", "jobs",
                                     "{\"c\":\"a payload over the lowered limit of 80 bytes, which the job meta stays within\"}", NULL));
    CHECK_OK(db, tocsin_exec(db, "UPDATE _tocsin_schedules SET cron = 'bogus' WHERE name = 'a-damaged'"));
    CHECK_OK(db, tocsin_set_max_payload(db, 80));
    clk.now = T2024 + MIN_MS;
    CHECK_EQ_I(tocsin_scheduler_tick(db, &fired), TOCSIN_CORRUPT);
    CHECK(strstr(tocsin_errmsg(db), "schedule a-damaged") != NULL);
    CHECK(strstr(tocsin_errmsg(db), "the other due schedules fired") != NULL);
    CHECK_EQ_I(fired, 1);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE payload = '{\"b\":1}'"), 1);
    /* the two that could not fire are left as they were */
    CHECK_OK(db, tocsin_schedule_get(db, &s, "c-big"));
    CHECK(s && s->next_fire == T2024 + MIN_MS && s->last_job_id == 0);
    tocsin_schedules_free(s, 1);
    /* the limit back: c fires; a stays damaged and named, b fired its boundary already */
    CHECK_OK(db, tocsin_set_max_payload(db, TOCSIN_DEFAULT_MAX_PAYLOAD_BYTES));
    CHECK_EQ_I(tocsin_scheduler_tick(db, &fired), TOCSIN_CORRUPT);
    CHECK_EQ_I(fired, 1);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 2);
    /* inside the caller's transaction the good ones still roll back with it */
    clk.now = T2024 + 2 * MIN_MS;
    CHECK_OK(db, tocsin_begin(db));
    CHECK_EQ_I(tocsin_scheduler_tick(db, &fired), TOCSIN_CORRUPT);
    CHECK_EQ_I(fired, 2);
    CHECK_OK(db, tocsin_rollback(db));
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 2);
    /* one this handle's limit refuses from the start is refused at once: a meta (or
     * none) that fits alone but not with the keys each of its jobs gets */
    {
        tocsin_schedule_opts so = TOCSIN_SCHEDULE_OPTS_INIT;
        CHECK_OK(db, tocsin_set_max_payload(db, 80));
        CHECK_EQ_I(tocsin_schedule_set(db, &next, "d-long-name-whose-job-meta-is-over-the-limit", "* * * * *",
                                       "jobs", "1", NULL),
                   TOCSIN_TOOBIG);
        CHECK(strstr(tocsin_errmsg(db), "with the keys each job of the schedule gets") != NULL);
        CHECK_OK(db, tocsin_schedule_set(db, &next, "d", "* * * * *", "jobs", "1", NULL));
        so.fields = TOCSIN_SCHEDULE_META;
        so.meta = "{\"trace\":\"0123456789012345678901234567890123456789\"}";
        CHECK_EQ_I(tocsin_schedule_update(db, &next, "d", NULL, NULL, NULL, &so), TOCSIN_TOOBIG);
        CHECK_OK(db, tocsin_schedule_get(db, &s, "d"));
        CHECK(s && s->meta == NULL);
        tocsin_schedules_free(s, 1);
        CHECK_OK(db, tocsin_set_max_payload(db, TOCSIN_DEFAULT_MAX_PAYLOAD_BYTES));
    }
    tocsin_close(db);
}

/* A running schedule whose next_fire is text (written by something else than
 * tocsin) is never due; read as 0 ms it made a leader wake again and again,
 * saying nothing. The tick fires the others and names it; next_fire names it. */
static void schedule_next_fire_damaged(void) {
    t_clock clk = {T2024 + 30000};
    tocsin_db *db = t_open("sched_next_bad", &clk);
    int64_t next = 0, fired = -1;
    CHECK_OK(db, tocsin_schedule_set(db, &next, "a-text", "* * * * *", "jobs", "1", NULL));
    CHECK_OK(db, tocsin_schedule_set(db, &next, "b-good", "* * * * *", "jobs", "2", NULL));
    CHECK_OK(db, tocsin_exec(db, "UPDATE _tocsin_schedules SET next_fire = 'abc' WHERE name = 'a-text'"));
    clk.now = T2024 + MIN_MS;
    CHECK_EQ_I(tocsin_scheduler_tick(db, &fired), TOCSIN_CORRUPT);
    CHECK(strstr(tocsin_errmsg(db), "schedule \"a-text\" has a next_fire that is text") != NULL);
    CHECK(strstr(tocsin_errmsg(db), "the other due schedules fired") != NULL);
    CHECK_EQ_I(fired, 1);
    CHECK_EQ_I(tocsin_scheduler_next_fire(db, &next), TOCSIN_CORRUPT);
    CHECK(strstr(tocsin_errmsg(db), "a-text") != NULL);
    /* paused, it is not in the way */
    CHECK_OK(db, tocsin_exec(db, "UPDATE _tocsin_schedules SET paused = 1 WHERE name = 'a-text'"));
    CHECK_OK(db, tocsin_scheduler_next_fire(db, &next));
    CHECK_EQ_I(next, T2024 + 2 * MIN_MS);
    tocsin_close(db);
}

/* A requeued dead job is live again: the result of its last run goes with
 * the move (a waiter would get the old error at once, and keep it after a
 * later plain ack). */
static void requeue_drops_the_old_result(void) {
    t_clock clk = {T2024};
    tocsin_db *db = t_open("requeue_result", &clk);
    tocsin_job *jobs = NULL;
    tocsin_result *r = NULL;
    size_t n = 0;
    int64_t id = 0;
    int ok = 0;
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "1", NULL));
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "q", "w", 1, 30000));
    CHECK_EQ_I(n, 1);
    if (n == 1) CHECK_OK(db, tocsin_job_fail_task(db, &ok, id, jobs[0].token, "ValueError", "first run", 0));
    tocsin_jobs_free(jobs, n);
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_result_get(db, &r, id));
    CHECK(r && r->is_error);
    tocsin_result_free(r);
    r = NULL;
    CHECK_OK(db, tocsin_dead_requeue(db, &ok, id));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_result_get(db, &r, id));
    CHECK(r == NULL);
    tocsin_result_free(r);
    tocsin_close(db);
}

void suite_coord(void) {
    requeue_drops_the_old_result();
    schedule_next_fire_damaged();
    results();
    finish_tasks();
    result_outcomes();
    locks();
    ratelimit_property();
    ratelimit_basics();
    schedule_basics();
    schedule_update_fields();
    schedule_cannot_fire();
    catch_up();
    racing_tickers();
    leadership();
    local_schedule();
    sql_functions();
}
