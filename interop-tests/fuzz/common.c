/* Helpers of the fuzz targets (fuzz.h). */
#include "fuzz.h"

char *fuzz_cstr(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) abort();
    if (size) memcpy(s, data, size);
    s[size] = 0;
    return s;
}

long long fuzz_qi(tocsin_db *db, const char *sql) {
    sqlite3_stmt *st;
    long long v = -1;
    if (sqlite3_prepare_v2(tocsin_sqlite(db), sql, -1, &st, NULL) != SQLITE_OK) return -1;
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

int64_t fuzz_clock(void *ctx) {
    (void)ctx;
    return 1700000000000LL;
}

static tocsin_db *mem;
static void close_mem(void) {
    tocsin_close(mem);
    mem = NULL;
}

tocsin_db *fuzz_memdb(void) {
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    if (mem) return mem;
    o.clock = fuzz_clock;
    o.max_payload_bytes = 4096; /* small, so that inputs reach the limit */
    if (tocsin_open(&mem, ":memory:", &o) != TOCSIN_OK || tocsin_register_sql(mem) != TOCSIN_OK) {
        fprintf(stderr, "fuzz: cannot open the in-memory database: %s\n", tocsin_errmsg(mem));
        abort();
    }
    atexit(close_mem);
    return mem;
}

void fuzz_reset(tocsin_db *db) {
    if (tocsin_in_transaction(db)) tocsin_rollback(db);
    FUZZ_REQUIRE(tocsin_exec(db, "DELETE FROM _tocsin_jobs; DELETE FROM _tocsin_dead; DELETE FROM _tocsin_queues;"
                                 "DELETE FROM _tocsin_events; DELETE FROM _tocsin_offsets;"
                                 "DELETE FROM _tocsin_notifications; DELETE FROM _tocsin_results;"
                                 "DELETE FROM _tocsin_locks; DELETE FROM _tocsin_rate_hits;"
                                 "DELETE FROM _tocsin_schedules; DELETE FROM _tocsin_workers;"
                                 "DELETE FROM _tocsin_meta WHERE key <> 'schema_version'") == TOCSIN_OK);
}
