/*
 * Options JSON of the SQL surface: tocsin_enqueue, tocsin_task_enqueue,
 * tocsin_enqueue_many, tocsin_stream_trim, tocsin_schedule_set and
 * tocsin_schedule_update with the input as their options / jobs text.
 * The first byte picks the function; the rest is the JSON text.
 * Invariants: no crash; a refused call writes nothing; an accepted enqueue
 * writes exactly its jobs, each with sound columns.
 */
#include "fuzz.h"

static long long rows(tocsin_db *db) {
    return fuzz_qi(db, "SELECT (SELECT count(*) FROM _tocsin_jobs) + (SELECT count(*) FROM _tocsin_dead) +"
                       " (SELECT count(*) FROM _tocsin_events) + (SELECT count(*) FROM _tocsin_schedules)");
}

int fuzz_options(const uint8_t *data, size_t size) {
    static const char *SQL[] = {
        "SELECT tocsin_enqueue('q', '{\"a\":1}', ?1)",
        "SELECT tocsin_task_enqueue('q', 'task', '[1]', '{}', ?1)",
        "SELECT tocsin_enqueue_many(?1)",
        "SELECT tocsin_stream_trim('t', ?1)",
        "SELECT tocsin_schedule_set('s', '*/5 * * * *', 'q', '1', ?1)",
        "SELECT tocsin_schedule_update('s', ?1)",
    };
    tocsin_db *db = fuzz_memdb();
    sqlite3_stmt *st;
    char *text;
    long long before;
    int rc, which;
    if (size < 1) return 0;
    which = data[0] % (int)(sizeof SQL / sizeof SQL[0]);
    text = fuzz_cstr(data + 1, size - 1);
    fuzz_reset(db);
    /* something for trim and update to act on */
    FUZZ_REQUIRE(tocsin_exec(db, "SELECT tocsin_stream_publish('t', '1'), tocsin_stream_publish('t', '2'),"
                                 " tocsin_schedule_set('s', '0 * * * *', 'q', '2')") == TOCSIN_OK);
    before = rows(db);
    FUZZ_REQUIRE(sqlite3_prepare_v2(tocsin_sqlite(db), SQL[which], -1, &st, NULL) == SQLITE_OK);
    sqlite3_bind_text(st, 1, text, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW) {
        FUZZ_REQUIRE(rows(db) == before); /* refused: nothing written */
        FUZZ_REQUIRE(fuzz_qi(db, "SELECT fired_count FROM _tocsin_schedules") == 0);
    } else if (which <= 2) {
        FUZZ_REQUIRE(rows(db) >= before + (which == 2 ? 0 : 1));
        /* every written job satisfies the documented column rules */
        FUZZ_REQUIRE(fuzz_qi(db, "SELECT count(*) FROM _tocsin_jobs WHERE json_valid(payload) = 0"
                                 " OR (meta IS NOT NULL AND json_type(meta) <> 'object')"
                                 " OR max_attempts NOT BETWEEN 1 AND 1000000 OR run_at < 0"
                                 " OR run_at > 253402300799999") == 0);
    }
    free(text);
    return 0;
}

FUZZ_ENTRY(fuzz_options)
