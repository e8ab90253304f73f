/*
 * Payload and meta validation of the C API: the input (cut at its first NUL)
 * as a job payload, a job's meta, a notification, a stream event's payload
 * and meta, a result value. The first byte picks the call.
 * Invariants: the call succeeds or refuses with TOCSIN_INVALID / TOCSIN_TOOBIG
 * and writes nothing; what is accepted is valid JSON (meta: an object) within
 * the size limit, and reads back byte for byte.
 */
#include "fuzz.h"

int fuzz_payload(const uint8_t *data, size_t size) {
    tocsin_db *db = fuzz_memdb();
    tocsin_enqueue_opts eo = TOCSIN_ENQUEUE_OPTS_INIT;
    char *text;
    int64_t id = 0;
    int rc, which, is_meta = 0;
    if (size < 1) return 0;
    which = data[0] % 6;
    text = fuzz_cstr(data + 1, size - 1);
    fuzz_reset(db);
    switch (which) {
    case 0: rc = tocsin_queue_enqueue(db, &id, "q", text, NULL); break;
    case 1:
        eo.meta = text;
        is_meta = 1;
        rc = tocsin_queue_enqueue(db, &id, "q", "1", &eo);
        break;
    case 2: rc = tocsin_notify(db, &id, "ch", text, NULL); break;
    case 3: rc = tocsin_stream_publish(db, &id, "t", text, NULL, NULL); break;
    case 4:
        is_meta = 1;
        rc = tocsin_stream_publish(db, &id, "t", "1", NULL, text);
        break;
    default: rc = tocsin_result_save(db, 7, text, 0); break;
    }
    FUZZ_REQUIRE(rc == TOCSIN_OK || rc == TOCSIN_INVALID || rc == TOCSIN_TOOBIG);
    if (rc != TOCSIN_OK) {
        FUZZ_REQUIRE(tocsin_errcode(NULL) == rc && tocsin_errmsg(NULL)[0] != 0);
        FUZZ_REQUIRE(fuzz_qi(db, "SELECT (SELECT count(*) FROM _tocsin_jobs) + (SELECT count(*) FROM _tocsin_events)"
                                 " + (SELECT count(*) FROM _tocsin_notifications) + (SELECT count(*) FROM _tocsin_results)") == 0);
    } else {
        sqlite3_stmt *st;
        static const char *BACK[] = {
            "SELECT payload FROM _tocsin_jobs", "SELECT meta FROM _tocsin_jobs",
            "SELECT payload FROM _tocsin_notifications", "SELECT payload FROM _tocsin_events",
            "SELECT meta FROM _tocsin_events", "SELECT value FROM _tocsin_results"};
        FUZZ_REQUIRE(strlen(text) <= 4096);
        FUZZ_REQUIRE(sqlite3_prepare_v2(tocsin_sqlite(db), BACK[which], -1, &st, NULL) == SQLITE_OK);
        FUZZ_REQUIRE(sqlite3_step(st) == SQLITE_ROW);
        FUZZ_REQUIRE(sqlite3_column_text(st, 0) && strcmp((const char *)sqlite3_column_text(st, 0), text) == 0);
        sqlite3_finalize(st);
        {
            sqlite3_stmt *v;
            FUZZ_REQUIRE(sqlite3_prepare_v2(tocsin_sqlite(db), "SELECT json_valid(?1), json_type(?1)", -1, &v, NULL) ==
                         SQLITE_OK);
            sqlite3_bind_text(v, 1, text, -1, SQLITE_STATIC);
            FUZZ_REQUIRE(sqlite3_step(v) == SQLITE_ROW && sqlite3_column_int(v, 0) == 1);
            if (is_meta) FUZZ_REQUIRE(strcmp((const char *)sqlite3_column_text(v, 1), "object") == 0);
            sqlite3_finalize(v);
        }
    }
    free(text);
    return 0;
}

FUZZ_ENTRY(fuzz_payload)
