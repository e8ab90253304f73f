/*
 * The SQL functions with arbitrary argument values and types. The first
 * byte picks a function, the second its argument count (within what it
 * accepts), then each argument is a type byte and its value: NULL, a small
 * integer, a 64-bit integer, a double, a text or a blob (length byte, bytes).
 * Invariants: no crash, no sanitizer report, the database stays sound
 * (quick_check) and calls outside a transaction leave none open.
 */
#include "fuzz.h"

static const struct {
    const char *name;
    int min, max;
} FNS[] = {
    {"tocsin_bootstrap", 0, 0}, {"tocsin_version", 0, 0}, {"tocsin_enqueue", 2, 3},
    {"tocsin_enqueue_many", 1, 1}, {"tocsin_task_enqueue", 2, 5}, {"tocsin_claim", 4, 4},
    {"tocsin_ack", 2, 2}, {"tocsin_retry", 2, 4}, {"tocsin_fail", 2, 3}, {"tocsin_heartbeat", 3, 3},
    {"tocsin_cancel", 1, 1}, {"tocsin_job", 1, 1}, {"tocsin_pause", 1, 1}, {"tocsin_resume", 1, 1},
    {"tocsin_stats", 0, 1}, {"tocsin_next_deadline", 1, 16}, {"tocsin_dead_list", 0, 3},
    {"tocsin_dead_requeue", 1, 1}, {"tocsin_dead_purge", 0, 2}, {"tocsin_notify", 2, 3},
    {"tocsin_notify_read", 3, 3}, {"tocsin_notify_prune", 0, 2}, {"tocsin_notify_autotrim", 0, 3},
    {"tocsin_stream_publish", 2, 4}, {"tocsin_stream_read", 3, 3}, {"tocsin_stream_save_offset", 3, 3},
    {"tocsin_stream_offset", 2, 2}, {"tocsin_stream_trim", 2, 2}, {"tocsin_result_save", 2, 3},
    {"tocsin_result_save_error", 2, 4}, {"tocsin_complete", 3, 4}, {"tocsin_fail_task", 3, 5},
    {"tocsin_result_get", 1, 1}, {"tocsin_result_delete", 1, 1}, {"tocsin_result_sweep", 0, 0},
    {"tocsin_lock_acquire", 3, 3}, {"tocsin_lock_renew", 4, 4}, {"tocsin_lock_release", 3, 3},
    {"tocsin_lock_holder", 1, 1}, {"tocsin_ratelimit_try", 3, 3}, {"tocsin_ratelimit_sweep", 0, 0},
    {"tocsin_ratelimit_reset", 1, 1}, {"tocsin_cron_next", 2, 3}, {"tocsin_schedule_set", 4, 5},
    {"tocsin_schedule_update", 2, 2}, {"tocsin_schedule_pause", 1, 1}, {"tocsin_schedule_resume", 1, 1},
    {"tocsin_schedule_remove", 1, 1}, {"tocsin_schedule_get", 1, 1}, {"tocsin_schedule_list", 0, 0},
    {"tocsin_scheduler_tick", 0, 0}, {"tocsin_scheduler_next_fire", 0, 0}, {"tocsin_scheduler_lead", 2, 2},
    {"tocsin_scheduler_resign", 1, 1},
};
#define NFNS (sizeof FNS / sizeof FNS[0])

static int take(const uint8_t **p, const uint8_t *end, size_t n) {
    if ((size_t)(end - *p) < n) return 0;
    return 1;
}

int fuzz_sql(const uint8_t *data, size_t size) {
    const uint8_t *p = data, *end = data + size;
    tocsin_db *db = fuzz_memdb();
    sqlite3_stmt *st = NULL;
    char sql[256];
    size_t f, len;
    int argc, i, rc, steps = 0;
    if (size < 2) return 0;
    f = p[0] % NFNS;
    argc = FNS[f].min + (FNS[f].max > FNS[f].min ? p[1] % (FNS[f].max - FNS[f].min + 1) : 0);
    p += 2;
    len = (size_t)snprintf(sql, sizeof sql, "SELECT %s(", FNS[f].name);
    for (i = 0; i < argc; i++) len += (size_t)snprintf(sql + len, sizeof sql - len, i ? ",?" : "?");
    snprintf(sql + len, sizeof sql - len, ")");
    FUZZ_REQUIRE(sqlite3_prepare_v2(tocsin_sqlite(db), sql, -1, &st, NULL) == SQLITE_OK);
    for (i = 1; i <= argc; i++) {
        int t = take(&p, end, 1) ? *p++ % 6 : 0;
        uint64_t u = 0;
        size_t k;
        switch (t) {
        case 0: sqlite3_bind_null(st, i); break;
        case 1:
            sqlite3_bind_int64(st, i, take(&p, end, 1) ? (int8_t)*p++ : 0);
            break;
        case 2:
        case 3:
            for (k = 0; k < 8 && take(&p, end, 1); k++) u = u << 8 | *p++;
            if (t == 2) {
                sqlite3_bind_int64(st, i, (int64_t)u);
            } else {
                double d;
                memcpy(&d, &u, sizeof d);
                sqlite3_bind_double(st, i, d);
            }
            break;
        default:
            len = take(&p, end, 1) ? *p++ : 0;
            if (len > (size_t)(end - p)) len = (size_t)(end - p);
            if (t == 4) sqlite3_bind_text(st, i, (const char *)p, (int)len, SQLITE_TRANSIENT);
            else sqlite3_bind_blob(st, i, p, (int)len, SQLITE_TRANSIENT);
            p += len;
        }
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && steps++ < 10) {
        int j;
        for (j = 0; j < sqlite3_column_count(st); j++) (void)sqlite3_column_text(st, j);
    }
    sqlite3_finalize(st);
    FUZZ_REQUIRE(sqlite3_get_autocommit(tocsin_sqlite(db)) != 0);
    FUZZ_REQUIRE(fuzz_qi(db, "SELECT quick_check = 'ok' FROM pragma_quick_check") == 1);
    /* keep the database small across inputs */
    if (fuzz_qi(db, "SELECT count(*) FROM _tocsin_jobs") > 1000) fuzz_reset(db);
    return 0;
}

FUZZ_ENTRY(fuzz_sql)
