/* Handles, versions, schema bootstrap, transactions, validation. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sqlite3.h>
#include <stdlib.h>

#include "test.h"

static void versions(void) {
    CHECK_STR(tocsin_version(), TOCSIN_VERSION_STRING);
    CHECK_EQ_I(tocsin_version_number(), TOCSIN_VERSION_NUMBER);
    CHECK_STR(tocsin_sqlite_version(), sqlite3_libversion());
    CHECK_STR(tocsin_errstr(TOCSIN_INVALID), "invalid argument");
    CHECK_STR(tocsin_errstr(9999), "unknown result code");
}

static void open_and_schema(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("basics", &clk), *ro = NULL;
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    int v = 0;
    sqlite3_stmt *st;
    CHECK_OK(db, tocsin_bootstrap(db, &v));
    CHECK_EQ_I(v, TOCSIN_SCHEMA_VERSION);
    CHECK_EQ_I(t_count(db, "_tocsin_meta WHERE key = 'schema_version' AND value = '2'"), 1);
    /* pragmas are set explicitly */
    sqlite3_prepare_v2(tocsin_sqlite(db), "PRAGMA journal_mode", -1, &st, NULL);
    CHECK(sqlite3_step(st) == SQLITE_ROW);
    CHECK_STR((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    sqlite3_prepare_v2(tocsin_sqlite(db), "PRAGMA foreign_keys", -1, &st, NULL);
    CHECK(sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 1);
    sqlite3_finalize(st);
    sqlite3_prepare_v2(tocsin_sqlite(db), "PRAGMA synchronous", -1, &st, NULL);
    CHECK(sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 1);
    sqlite3_finalize(st);
    CHECK_EQ_I(tocsin_now(db), 1000);
    /* the clock is injectable and can be restored */
    tocsin_set_clock(db, NULL, NULL);
    CHECK(tocsin_now(db) > 1600000000000LL);
    tocsin_set_clock(db, t_clock_fn, &clk);

    /* a read-only handle reads but refuses writes */
    o.read_only = 1;
    CHECK_OK(ro, tocsin_open(&ro, sqlite3_db_filename(tocsin_sqlite(db), "main"), &o));
    {
        int64_t id = 0;
        CHECK_EQ_I(tocsin_queue_enqueue(ro, &id, "q", "{}", NULL), TOCSIN_READONLY);
        CHECK(strstr(tocsin_errmsg(ro), "read-only") != NULL);
    }
    tocsin_close(ro);

    /* a schema newer than the library is refused with a clear message */
    CHECK_OK(db, tocsin_exec(db, "UPDATE _tocsin_meta SET value = '99' WHERE key = 'schema_version'"));
    {
        tocsin_db *db2 = NULL;
        CHECK_EQ_I(tocsin_open(&db2, sqlite3_db_filename(tocsin_sqlite(db), "main"), NULL),
                   TOCSIN_VERSION);
        CHECK(strstr(tocsin_errmsg(db2), "v99") != NULL);
        tocsin_close(db2);
    }
    /* so is one of more digits than an int holds: a newer version, not a malformed one
     * (4294967298 would wrap to 2 in 32 bits), and the file is left as it was */
    {
        static const char *const huge[] = {"4294967298", "123456789012345678901234567890123456789012345678901"};
        size_t i;
        for (i = 0; i < sizeof huge / sizeof huge[0]; i++) {
            tocsin_db *db2 = NULL;
            char sql[200];
            snprintf(sql, sizeof sql, "UPDATE _tocsin_meta SET value = '%s' WHERE key = 'schema_version'", huge[i]);
            CHECK_OK(db, tocsin_exec(db, sql));
            CHECK_EQ_I(tocsin_open(&db2, sqlite3_db_filename(tocsin_sqlite(db), "main"), NULL), TOCSIN_VERSION);
            CHECK(strstr(tocsin_errmsg(db2), "newer than this library") != NULL);
            CHECK(strstr(tocsin_errmsg(db2), i ? "v1234567890" : "v4294967298,") != NULL);
            tocsin_close(db2);
            snprintf(sql, sizeof sql, "_tocsin_meta WHERE key = 'schema_version' AND value = '%s'", huge[i]);
            CHECK_EQ_I(t_count(db, sql), 1);
        }
    }
    tocsin_close(db);
}

static void bad_open(void) {
    tocsin_db *db = NULL;
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    CHECK_EQ_I(tocsin_open(NULL, "x.db", NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_open(&db, "", NULL), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "path") != NULL);
    tocsin_close(db);
    o.busy_timeout_ms = -1;
    CHECK_EQ_I(tocsin_open(&db, t_path("bad"), &o), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "busy_timeout_ms") != NULL);
    tocsin_close(db);
    o = (tocsin_open_opts)TOCSIN_OPEN_OPTS_INIT;
    o.version = 0;
    CHECK_EQ_I(tocsin_open(&db, t_path("bad"), &o), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "version must be set (use TOCSIN_OPEN_OPTS_INIT)") != NULL);
    tocsin_close(db);
    /* a struct from a newer tocsin.h: fields this library cannot see */
    o.version = TOCSIN_OPEN_OPTS_VERSION + 1;
    CHECK_EQ_I(tocsin_open(&db, t_path("bad"), &o), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "open options: version 2 is newer than this library's (1)") != NULL);
    tocsin_close(db);
    CHECK_EQ_I(tocsin_open(&db, "/nonexistent-dir/x/y.db", NULL), TOCSIN_CANTOPEN);
    CHECK(strlen(tocsin_errmsg(db)) > 0);
    tocsin_close(db);
    {
        /* a file that is not an SQLite database: refused, saying so, the file as it was
         * (read-write and read-only opens alike) */
        static const char text[] = "not an SQLite file, only text; not an SQLite file, only text; "
                                   "not an SQLite file, only text; not an SQLite file, only text\n";
        char back[sizeof text];
        const char *p = t_path("notadb");
        FILE *f = fopen(p, "wb");
        int ro;
        CHECK(f && fwrite(text, 1, sizeof text - 1, f) == sizeof text - 1);
        if (f) fclose(f);
        for (ro = 0; ro < 2; ro++) {
            o = (tocsin_open_opts)TOCSIN_OPEN_OPTS_INIT;
            o.read_only = ro;
            CHECK_EQ_I(tocsin_open(&db, p, &o), TOCSIN_CORRUPT);
            CHECK(strstr(tocsin_errmsg(db), "not an SQLite database's") != NULL);
            tocsin_close(db);
        }
        f = fopen(p, "rb");
        CHECK(f && fread(back, 1, sizeof back, f) == sizeof text - 1 && !memcmp(back, text, sizeof text - 1));
        if (f) fclose(f);
    }
    CHECK_EQ_I(tocsin_close(NULL), TOCSIN_OK);
    tocsin_free(NULL);
    tocsin_jobs_free(NULL, 0);
    tocsin_messages_free(NULL, 0);
}

static void transactions(void) {
    t_clock clk = {5000};
    tocsin_db *db = t_open("tx", &clk);
    int64_t id = 0, nid = 0, off = 0;
    CHECK_EQ_I(tocsin_in_transaction(db), 0);
    CHECK_EQ_I(tocsin_commit(db), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_rollback(db), TOCSIN_INVALID);
    CHECK_OK(db, tocsin_exec(db, "CREATE TABLE orders(id INTEGER PRIMARY KEY, item TEXT)"));

    /* rollback drops the business row, the job, the event and the notification */
    CHECK_OK(db, tocsin_begin(db));
    CHECK_EQ_I(tocsin_begin(db), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_in_transaction(db), 1);
    CHECK_OK(db, tocsin_exec(db, "INSERT INTO orders(item) VALUES ('book')"));
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "orders", "{\"order\":1}", NULL));
    CHECK_OK(db, tocsin_stream_publish(db, &off, "orders", "{\"created\":1}", NULL, NULL));
    CHECK_OK(db, tocsin_notify(db, &nid, "orders", "{\"new\":1}", NULL));
    /* a failing operation inside the transaction leaves the rest intact */
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "orders", "{bad", NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_in_transaction(db), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 1);
    CHECK_OK(db, tocsin_rollback(db));
    CHECK_EQ_I(t_count(db, "orders"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_events"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_notifications"), 0);

    /* commit keeps them all */
    CHECK_OK(db, tocsin_begin(db));
    CHECK_OK(db, tocsin_exec(db, "INSERT INTO orders(item) VALUES ('pen')"));
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "orders", "{\"order\":2}", NULL));
    CHECK_OK(db, tocsin_stream_publish(db, &off, "orders", "{\"created\":2}", NULL, NULL));
    CHECK_OK(db, tocsin_notify(db, &nid, "orders", "{\"new\":2}", NULL));
    CHECK_OK(db, tocsin_commit(db));
    CHECK_EQ_I(t_count(db, "orders"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_events"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_notifications"), 1);
    CHECK_EQ_I(tocsin_exec(db, NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_exec(db, "SELEC nonsense"), TOCSIN_ERROR);
    tocsin_close(db);
}

/* Two handles: the second writer waits for the lock, then reports TOCSIN_BUSY. */
static void busy_timeout(void) {
    tocsin_db *a = t_open("busy", NULL), *b = NULL;
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    int64_t id = 0;
    o.busy_timeout_ms = 50;
    CHECK_OK(b, tocsin_open(&b, sqlite3_db_filename(tocsin_sqlite(a), "main"), &o));
    CHECK_OK(a, tocsin_begin(a));
    CHECK_EQ_I(tocsin_queue_enqueue(b, &id, "q", "{}", NULL), TOCSIN_BUSY);
    CHECK(strstr(tocsin_errmsg(b), "locked") != NULL);
    CHECK_OK(a, tocsin_rollback(a));
    CHECK_OK(b, tocsin_queue_enqueue(b, &id, "q", "{}", NULL));
    tocsin_close(a);
    tocsin_close(b);
}

static void names_and_payloads(void) {
    tocsin_db *db = t_open("names", NULL);
    int64_t id = 0;
    char big[300];
    char *huge;
    memset(big, 'q', sizeof big - 1);
    big[sizeof big - 1] = 0;
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, NULL, "{}", NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "", "{}", NULL), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "queue name must not be empty") != NULL);
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, big, "{}", NULL), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "limit") != NULL);
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "a\nb", "{}", NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "bad\xff", "{}", NULL), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "UTF-8") != NULL);
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "caf\xc3\xa9", "{}", NULL));
    CHECK_OK(db, tocsin_check_name(db, "topic", "caf\xc3\xa9"));
    CHECK_EQ_I(tocsin_check_name(db, "topic", ""), TOCSIN_INVALID);
    CHECK_STR(tocsin_errmsg(db), "topic must not be empty");
    CHECK_EQ_I(tocsin_check_name(db, "queue name", big), TOCSIN_INVALID);
    /* without a handle too (a binding checks a task's name before any database) */
    CHECK_OK(db, tocsin_check_name(NULL, "x", "y"));
    CHECK_EQ_I(tocsin_check_name(NULL, "task name", "a\tb"), TOCSIN_INVALID);
    CHECK_STR(tocsin_errmsg(NULL), "task name must not contain control characters");
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", NULL, NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{\"a\":", NULL), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "not valid JSON") != NULL);
    /* the size limit is enforced before anything is written */
    huge = malloc(2 * 1024 * 1024);
    memset(huge, ' ', 2 * 1024 * 1024);
    huge[0] = '1';
    huge[2 * 1024 * 1024 - 1] = 0;
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", huge, NULL), TOCSIN_TOOBIG);
    CHECK(strstr(tocsin_errmsg(db), "limit") != NULL);
    CHECK_EQ_I(tocsin_set_max_payload(db, 0), TOCSIN_INVALID);
    CHECK_OK(db, tocsin_set_max_payload(db, 4 * 1024 * 1024));
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", huge, NULL));
    CHECK_OK(db, tocsin_set_max_payload(db, 10));
    CHECK_EQ_I(tocsin_notify(db, &id, "c", "\"0123456789\"", NULL), TOCSIN_TOOBIG);
    free(huge);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 2);
    CHECK_EQ_I(t_count(db, "_tocsin_notifications"), 0);
    tocsin_close(db);
}

/* Schema v2: no AUTOINCREMENT, yet a committed job id, event offset or
 * notification id is never handed out again, however its row left (ack,
 * cancel, purge, trim, prune, a raw DELETE), and the highest id survives a
 * reopen. A rolled-back id may come back: nobody saw it. */
static void ids_never_reused(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("ids", &clk), *again = NULL;
    tocsin_job *jobs = NULL;
    tocsin_trim_opts trim = TOCSIN_TRIM_OPTS_INIT;
    int64_t id = 0, id2 = 0, n = 0, max = 0;
    size_t got = 0;
    int ok = 0;
    char path[600];
    snprintf(path, sizeof path, "%s", sqlite3_db_filename(tocsin_sqlite(db), "main"));
    /* AUTOINCREMENT only in the keeper, which keeps sqlite_sequence through VACUUM */
    CHECK_EQ_I(t_count(db, "sqlite_master WHERE sql LIKE '%AUTOINCREMENT%'"), 1);
    CHECK_EQ_I(t_count(db, "sqlite_master WHERE name = '_tocsin_sequence_keeper'"), 1);
    CHECK_EQ_I(t_count(db, "sqlite_sequence WHERE name LIKE '_tocsin%'"), 3);
    /* the top job acked: the next one does not take its id */
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "1", NULL));
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "2", NULL));
    CHECK_EQ_I(id, 2);
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &got, "q", "w", 2, 1000));
    CHECK_EQ_I((long long)got, 2);
    CHECK_OK(db, tocsin_job_ack(db, &ok, jobs[1].id, jobs[1].token));
    CHECK_OK(db, tocsin_job_ack(db, &ok, jobs[0].id, jobs[0].token));
    tocsin_jobs_free(jobs, got);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 0);
    { /* VACUUM (on a connection of its own) copies sqlite_sequence: the top id stays spent */
        sqlite3 *c = NULL;
        CHECK_EQ_I(sqlite3_open(path, &c), SQLITE_OK);
        CHECK_EQ_I(sqlite3_exec(c, "VACUUM", NULL, NULL, NULL), SQLITE_OK);
        sqlite3_close(c);
    }
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "3", NULL));
    CHECK_EQ_I(id, 3);
    /* cancel (to the dead table), purge, raw DELETE, reopen */
    CHECK_OK(db, tocsin_job_cancel(db, &ok, id));
    CHECK_OK(db, tocsin_dead_purge(db, &n, NULL, 0));
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "4", NULL));
    CHECK_EQ_I(id, 4);
    CHECK_OK(db, tocsin_exec(db, "DELETE FROM _tocsin_jobs"));
    /* a v2 file from before the keeper: the next read-write open adds it */
    CHECK_OK(db, tocsin_exec(db, "DROP TABLE _tocsin_sequence_keeper"));
    tocsin_close(db);
    CHECK_OK(again, tocsin_open(&again, path, NULL));
    db = again;
    CHECK_EQ_I(t_count(db, "sqlite_master WHERE name = '_tocsin_sequence_keeper'"), 1);
    tocsin_set_clock(db, t_clock_fn, &clk);
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "5", NULL));
    CHECK_EQ_I(id, 5);
    /* a rolled-back id was never seen: it may be handed out again */
    CHECK_OK(db, tocsin_begin(db));
    CHECK_OK(db, tocsin_queue_enqueue(db, &id2, "q", "6", NULL));
    CHECK_EQ_I(id2, 6);
    CHECK_OK(db, tocsin_rollback(db));
    CHECK_OK(db, tocsin_queue_enqueue(db, &id2, "q", "6", NULL));
    CHECK_EQ_I(id2, 6);
    /* deleting the top row inside a transaction that rolls back keeps it */
    CHECK_OK(db, tocsin_begin(db));
    CHECK_OK(db, tocsin_exec(db, "DELETE FROM _tocsin_jobs WHERE id = 6"));
    CHECK_OK(db, tocsin_rollback(db));
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE id = 6"), 1);
    /* a requeued dead job keeps its id below the top */
    CHECK_OK(db, tocsin_job_cancel(db, &ok, 5));
    CHECK_OK(db, tocsin_dead_requeue(db, &ok, 5));
    CHECK(ok);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE id = 5"), 1);
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "7", NULL));
    CHECK_EQ_I(id, 7);
    /* sqlite_sequence still counts as it did with AUTOINCREMENT: moved ahead, ids follow */
    CHECK_OK(db, tocsin_exec(db, "UPDATE sqlite_sequence SET seq = 100 WHERE name = '_tocsin_jobs'"));
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "8", NULL));
    CHECK_EQ_I(id, 101);
    /* a unique key met uses up the id it would have taken, as in v1 */
    {
        tocsin_enqueue_opts uo = TOCSIN_ENQUEUE_OPTS_INIT;
        uo.unique_key = "u";
        CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "9", &uo));
        CHECK_EQ_I(id, 102);
        CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "9", &uo));
        CHECK_EQ_I(id, 102);
        CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "10", NULL));
        CHECK_EQ_I(id, 104);
        /* the same in one batch: ids follow one another, a met key uses one up */
        {
            tocsin_enqueue_opts vo = TOCSIN_ENQUEUE_OPTS_INIT;
            tocsin_job_spec sp[4] = {{"q", "1", NULL}, {"q", "2", &uo}, {"q", "3", NULL}, {"q", "4", &vo}};
            int64_t ids[4] = {0};
            vo.unique_key = "v";
            CHECK_OK(db, tocsin_queue_enqueue_many(db, ids, sp, 4));
            CHECK(ids[0] == 105 && ids[1] == 102 && ids[2] == 107 && ids[3] == 108);
            sp[3].opts = &uo;
            CHECK_OK(db, tocsin_queue_enqueue_many(db, ids, sp + 2, 2));
            CHECK(ids[0] == 109 && ids[1] == 102);
            CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "5", NULL));
            CHECK_EQ_I(id, 111);
        }
    }

    /* stream offsets: trimmed away, the next event still moves on */
    CHECK_OK(db, tocsin_stream_publish(db, &id, "t", "1", NULL, NULL));
    CHECK_OK(db, tocsin_stream_publish(db, &id, "t", "2", NULL, NULL));
    CHECK_EQ_I(id, 2);
    clk.now += 10;
    trim.max_age_ms = 1;
    CHECK_OK(db, tocsin_stream_trim(db, &n, "t", &trim));
    CHECK_EQ_I(n, 2);
    CHECK_OK(db, tocsin_stream_publish(db, &id, "t", "3", NULL, NULL));
    CHECK_EQ_I(id, 3);
    /* an offset up to the highest ever handed out can be saved, not past it */
    CHECK_OK(db, tocsin_exec(db, "DELETE FROM _tocsin_events"));
    CHECK_OK(db, tocsin_stream_save_offset(db, NULL, "c", "t", 3));
    CHECK_EQ_I(tocsin_stream_save_offset(db, NULL, "c", "t", 4), TOCSIN_INVALID);

    /* notification ids: pruned away, max_id (where a listener starts) stays */
    CHECK_OK(db, tocsin_notify(db, &id, "ch", "1", NULL));
    CHECK_OK(db, tocsin_notify(db, &id, "ch", "2", NULL));
    CHECK_EQ_I(id, 2);
    clk.now += 10;
    CHECK_OK(db, tocsin_notify_prune(db, &n, 1, 0));
    CHECK_EQ_I(n, 2);
    CHECK_OK(db, tocsin_notify_max_id(db, &max));
    CHECK_EQ_I(max, 2);
    CHECK_OK(db, tocsin_notify(db, &id, "ch", "3", NULL));
    CHECK_EQ_I(id, 3);
    tocsin_close(db);
}

/* A one-job enqueue on an own connection takes the id its handle remembers
 * (db.c's _tocsin_next_id) only while nothing changed the file since its last
 * one: anything committed in between, by another handle, a raw connection or
 * the same handle, makes it read the id again. */
static void remembered_next_id(void) {
    t_clock clk = {1000};
    tocsin_db *a = t_open("nextid", &clk), *b = NULL, *tx = NULL;
    tocsin_job *jobs = NULL;
    tocsin_enqueue_opts uo = TOCSIN_ENQUEUE_OPTS_INIT;
    int64_t id = 0, n = 0;
    size_t got = 0;
    int ok = 0;
    sqlite3 *raw = NULL;
    char path[600];
    snprintf(path, sizeof path, "%s", sqlite3_db_filename(tocsin_sqlite(a), "main"));
    CHECK_OK(b, tocsin_open(&b, path, NULL));
    CHECK_EQ_I(sqlite3_open(path, &raw), SQLITE_OK);
    CHECK_OK(a, tocsin_queue_enqueue(a, &id, "q", "1", NULL));
    CHECK_OK(a, tocsin_queue_enqueue(a, &id, "q", "2", NULL));
    CHECK_EQ_I(id, 2);
    /* another handle inserts: a's next one follows it */
    CHECK_OK(b, tocsin_queue_enqueue(b, &id, "q", "3", NULL));
    CHECK_EQ_I(id, 3);
    CHECK_OK(a, tocsin_queue_enqueue(a, &id, "q", "4", NULL));
    CHECK_EQ_I(id, 4);
    /* another handle deletes the top job (b's own remembered id is stale too) */
    CHECK_OK(b, tocsin_job_cancel(b, &ok, 4));
    CHECK_OK(b, tocsin_dead_purge(b, &n, NULL, 0));
    CHECK_OK(a, tocsin_queue_enqueue(a, &id, "q", "5", NULL));
    CHECK_EQ_I(id, 5);
    CHECK_OK(b, tocsin_queue_enqueue(b, &id, "q", "6", NULL));
    CHECK_EQ_I(id, 6);
    /* a unique key met uses up an id, in another handle */
    uo.unique_key = "k";
    CHECK_OK(a, tocsin_queue_enqueue(a, &id, "q", "7", &uo));
    CHECK_EQ_I(id, 7);
    CHECK_OK(b, tocsin_queue_enqueue(b, &id, "q", "7", &uo));
    CHECK_EQ_I(id, 7);
    CHECK_OK(a, tocsin_queue_enqueue(a, &id, "q", "9", NULL));
    CHECK_EQ_I(id, 9);
    /* a raw connection moves the sequence ahead, or deletes the top row */
    CHECK_EQ_I(sqlite3_exec(raw, "UPDATE sqlite_sequence SET seq = 50 WHERE name = '_tocsin_jobs'", NULL, NULL,
                            NULL), SQLITE_OK);
    CHECK_OK(a, tocsin_queue_enqueue(a, &id, "q", "51", NULL));
    CHECK_EQ_I(id, 51);
    CHECK_EQ_I(sqlite3_exec(raw, "DELETE FROM _tocsin_jobs WHERE id = 51", NULL, NULL, NULL), SQLITE_OK);
    CHECK_OK(a, tocsin_queue_enqueue(a, &id, "q", "52", NULL));
    CHECK_EQ_I(id, 52);
    /* the same handle deletes its own top job, then inserts in a batch */
    CHECK_OK(a, tocsin_queue_claim(a, &jobs, &got, "q", "w", 100, 1000));
    CHECK_EQ_I((long long)got, 8); /* 1 2 3 5 6 7 9 52 */
    {
        size_t i;
        for (i = 0; i < got && jobs[i].id != 52; i++) {
        }
        CHECK(i < got);
        if (i < got) CHECK_OK(a, tocsin_job_ack(a, &ok, 52, jobs[i].token));
        CHECK(ok);
    }
    tocsin_jobs_free(jobs, got);
    CHECK_OK(a, tocsin_queue_enqueue(a, &id, "q", "53", NULL));
    CHECK_EQ_I(id, 53);
    {
        tocsin_job_spec sp[2] = {{"q", "54", NULL}, {"q", "55", NULL}};
        int64_t ids[2] = {0};
        CHECK_OK(a, tocsin_queue_enqueue_many(a, ids, sp, 2));
        CHECK(ids[0] == 54 && ids[1] == 55);
    }
    CHECK_OK(a, tocsin_queue_enqueue(a, &id, "q", "56", NULL));
    CHECK_EQ_I(id, 56);
    /* a transaction handle's commit, then the handle's own transaction */
    CHECK_OK(a, tocsin_tx_begin(a, &tx));
    CHECK_OK(tx, tocsin_queue_enqueue(tx, &id, "q", "57", NULL));
    CHECK_EQ_I(id, 57);
    CHECK_OK(tx, tocsin_tx_commit(tx));
    CHECK_OK(a, tocsin_queue_enqueue(a, &id, "q", "58", NULL));
    CHECK_EQ_I(id, 58);
    CHECK_OK(a, tocsin_begin(a));
    CHECK_OK(a, tocsin_exec(a, "DELETE FROM _tocsin_jobs WHERE id = 58"));
    CHECK_OK(a, tocsin_queue_enqueue(a, &id, "q", "59", NULL));
    CHECK_EQ_I(id, 59);
    CHECK_OK(a, tocsin_commit(a));
    CHECK_OK(a, tocsin_queue_enqueue(a, &id, "q", "60", NULL));
    CHECK_EQ_I(id, 60);
    /* inside the handle's transaction, after a batch took ids uncommitted */
    CHECK_OK(a, tocsin_begin(a));
    {
        tocsin_job_spec sp[2] = {{"q", "61", NULL}, {"q", "62", NULL}};
        int64_t ids[2] = {0};
        CHECK_OK(a, tocsin_queue_enqueue_many(a, ids, sp, 2));
        CHECK(ids[0] == 61 && ids[1] == 62);
    }
    CHECK_OK(a, tocsin_queue_enqueue(a, &id, "q", "63", NULL));
    CHECK_EQ_I(id, 63);
    CHECK_OK(a, tocsin_rollback(a));
    CHECK_OK(a, tocsin_queue_enqueue(a, &id, "q", "61", NULL));
    CHECK_EQ_I(id, 61);
    sqlite3_close(raw);
    tocsin_close(b);
    tocsin_close(a);
}

/* One SQLite per process: a second copy loaded (the system library under
 * another name, as a driver bundling its own would be) is named; once it is
 * unloaded the answer is fine again. */
static void sqlite_copies(void) {
    char msg[1024], copy[512];
    Dl_info info;
    CHECK_EQ_I(tocsin_check_sqlite_copies(msg, sizeof msg), TOCSIN_OK);
    CHECK_STR(msg, "");
    CHECK_EQ_I(tocsin_check_sqlite_copies(NULL, 0), TOCSIN_OK);
    CHECK(dladdr((void *)(uintptr_t)sqlite3_libversion, &info) && info.dli_fname);
    if (!info.dli_fname) return;
    snprintf(copy, sizeof copy, "%s", t_path("libsqlite-copy.so"));
    {
        FILE *in = fopen(info.dli_fname, "rb"), *out = fopen(copy, "wb");
        char buf[65536];
        size_t n;
        CHECK(in && out);
        if (!in || !out) return;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0) CHECK_EQ_I(fwrite(buf, 1, n, out), n);
        fclose(in);
        fclose(out);
    }
    void *h = dlopen(copy, RTLD_NOW | RTLD_LOCAL);
    CHECK(h != NULL);
    if (!h) return;
    CHECK_EQ_I(tocsin_check_sqlite_copies(msg, sizeof msg), TOCSIN_ERROR);
    CHECK(strstr(msg, "a second copy of SQLite is loaded in this process") != NULL);
    CHECK(strstr(msg, copy) != NULL);            /* the other copy, by its path */
    CHECK(strstr(msg, info.dli_fname) != NULL);  /* and tocsin's own */
    char small[16];
    CHECK_EQ_I(tocsin_check_sqlite_copies(small, sizeof small), TOCSIN_ERROR);
    CHECK_EQ_I(strlen(small), sizeof small - 1); /* cut, still terminated */
    CHECK_EQ_I(tocsin_check_sqlite_copies(NULL, 0), TOCSIN_ERROR);
    dlclose(h);
    CHECK_EQ_I(tocsin_check_sqlite_copies(msg, sizeof msg), TOCSIN_OK);
    remove(copy);
    /* a copy with hidden symbols: found by SQLite's signature in its read-only data */
    const char *fake = getenv("TOCSIN_TEST_FAKE_COPY");
    CHECK(fake != NULL); /* make test-c and test-san build it and say where */
    if (!fake) return;
    h = dlopen(fake, RTLD_NOW | RTLD_LOCAL);
    CHECK(h != NULL);
    if (!h) return;
    CHECK_EQ_I(tocsin_check_sqlite_copies(msg, sizeof msg), TOCSIN_ERROR);
    CHECK(strstr(msg, "fake_sqlite_copy.so carries another") != NULL);
    /* a cut never ends inside a character */
    {
        char small[48];
        for (size_t n = 1; n <= sizeof small; n++) {
            CHECK_EQ_I(tocsin_check_sqlite_copies(small, n), TOCSIN_ERROR);
            CHECK(strlen(small) < n);
        }
    }
    dlclose(h);
    CHECK_EQ_I(tocsin_check_sqlite_copies(msg, sizeof msg), TOCSIN_OK);
}

/* The journal mode in the header of a rollback-journal file: bytes 18 and 19 (1: legacy). */
static int header_mode(const char *path) {
    unsigned char h[20] = {0};
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(h, 1, sizeof h, f) : 0;
    if (f) fclose(f);
    return n == sizeof h ? h[18] * 10 + h[19] : -1;
}

/* A file tocsin must refuse (a newer schema, a malformed schema_version) is
 * refused by tocsin_open before it writes anything: its switch to WAL would
 * rewrite the header of a rollback-journal file. */
static void refusal_writes_nothing(void) {
    static const char *const set[] = {"'3'", "'2 '"};
    static const int want[] = {TOCSIN_VERSION, TOCSIN_CORRUPT};
    const char *p = t_path("refuse");
    size_t i;
    for (i = 0; i < sizeof set / sizeof set[0]; i++) {
        tocsin_db *db = NULL;
        char sql[200];
        CHECK_OK(db, tocsin_open(&db, p, NULL));
        snprintf(sql, sizeof sql,
                 "UPDATE _tocsin_meta SET value = %s WHERE key = 'schema_version'; PRAGMA journal_mode=DELETE",
                 set[i]);
        CHECK_OK(db, tocsin_exec(db, sql));
        tocsin_close(db);
        CHECK_EQ_I(header_mode(p), 11);
        db = NULL;
        CHECK_EQ_I(tocsin_open(&db, p, NULL), want[i]);
        tocsin_close(db);
        CHECK_EQ_I(header_mode(p), 11); /* still a rollback-journal file */
        remove(p);
    }
}

/* A file SQLite opens read-only under a read-write tocsin_open (its permissions;
 * here a URI's mode=ro) is read-only to the installer: a current v2 file
 * without _tocsin_sequence_keeper opens and reads (as a read-only handle would),
 * an older schema is refused as TOCSIN_READONLY saying why, and nothing is written. */
static void read_only_file(void) {
    tocsin_db *db = NULL, *ro = NULL;
    int64_t id = 0;
    char uri[600];
    const char *p = t_path("rofile");
    tocsin_job *job = NULL;
    CHECK_OK(db, tocsin_open(&db, p, NULL));
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "{}", NULL));
    CHECK_OK(db, tocsin_exec(db, "DROP TABLE _tocsin_sequence_keeper"));
    snprintf(uri, sizeof uri, "file:%s?mode=ro", p);
    CHECK_OK(ro, tocsin_open(&ro, uri, NULL));
    if (ro) {
        CHECK_OK(ro, tocsin_job_get(ro, &job, id));
        CHECK(job != NULL);
        tocsin_jobs_free(job, 1);
        CHECK_EQ_I(tocsin_queue_enqueue(ro, &id, "q", "{}", NULL), TOCSIN_READONLY);
    }
    tocsin_close(ro);
    CHECK_EQ_I(t_count(db, "sqlite_master WHERE name = '_tocsin_sequence_keeper'"), 0);
    CHECK_OK(db, tocsin_exec(db, "UPDATE _tocsin_meta SET value = '1' WHERE key = 'schema_version'"));
    ro = NULL;
    CHECK_EQ_I(tocsin_open(&ro, uri, NULL), TOCSIN_READONLY);
    CHECK(strstr(tocsin_errmsg(ro), "older tocsin schema") && strstr(tocsin_errmsg(ro), "file is read-only"));
    tocsin_close(ro);
    CHECK_EQ_I(t_count(db, "_tocsin_meta WHERE key = 'schema_version' AND value = '1'"), 1);
    tocsin_close(db);
}

/* A v2 schema whose <table>_top trigger was dropped by hand would hand a
 * deleted top row's id (and its claims' fencing tokens) out again: every
 * handle refuses it as TOCSIN_CORRUPT, naming the trigger, and writes nothing. */
static void dropped_trigger(void) {
    static const char *const trig[] = {"_tocsin_jobs_top", "_tocsin_events_top", "_tocsin_notifications_top"};
    const char *p = t_path("notrigger");
    size_t i;
    for (i = 0; i < sizeof trig / sizeof trig[0]; i++) {
        tocsin_db *db = NULL, *again = NULL;
        tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
        char sql[120];
        int ro;
        CHECK_OK(db, tocsin_open(&db, p, NULL));
        snprintf(sql, sizeof sql, "DROP TRIGGER %s", trig[i]);
        CHECK_OK(db, tocsin_exec(db, sql));
        for (ro = 0; ro < 2; ro++) {
            o.read_only = ro;
            CHECK_EQ_I(tocsin_open(&again, p, &o), TOCSIN_CORRUPT);
            CHECK(again && strstr(tocsin_errmsg(again), trig[i]) != NULL);
            tocsin_close(again);
            again = NULL;
        }
        snprintf(sql, sizeof sql, "sqlite_master WHERE name = '%s'", trig[i]);
        CHECK_EQ_I(t_count(db, sql), 0);
        tocsin_close(db);
        remove(p);
    }
}

void suite_basics(void) {
    versions();
    open_and_schema();
    bad_open();
    transactions();
    busy_timeout();
    names_and_payloads();
    ids_never_reused();
    remembered_next_id();
    sqlite_copies();
    refusal_writes_nothing();
    read_only_file();
    dropped_trigger();
}

/* The rows of every table a refused call might have written. */
static long long dup_rows(tocsin_db *db) {
    return t_count(db, "_tocsin_jobs") + t_count(db, "_tocsin_notifications") + t_count(db, "_tocsin_events") +
           t_count(db, "_tocsin_results") + t_count(db, "_tocsin_schedules") + t_count(db, "_tocsin_queues");
}

/* n distinct keys "k0".."k<n-1>" in one object, then `tail` (may be ""), as JSON text (malloc). */
static char *dup_big(size_t n, const char *tail) {
    size_t cap = n * 16 + strlen(tail) + 8, at = 0, i;
    char *t = malloc(cap);
    t[at++] = '{';
    for (i = 0; i < n; i++) at += (size_t)snprintf(t + at, cap - at, "%s\"k%zu\":%zu", i ? "," : "", i, i);
    at += (size_t)snprintf(t + at, cap - at, "%s}", tail);
    return t;
}

/*
 * An object with a key twice is refused wherever the core takes JSON it
 * stores: SQLite's JSON functions (and the worker's envelope reader) read the
 * first value, Python, Node, Ruby and Go the last. Keys are compared decoded;
 * the same key in two objects (siblings, or one inside the other) is fine.
 */
static void duplicate_keys(void) {
    static const char *refused[][2] = {
        {"{\"a\":1,\"a\":2}", "payload: duplicate key \"a\" in an object: JSON readers disagree"},
        {"{\"a\":1,\"b\":2,\"a\":1}", "duplicate key \"a\" in an object:"},
        {"{\"a\":1,\"\\u0061\":2}", "duplicate key \"a\" in an object (written \"\\u0061\" the second time)"},
        {"{\"\\u0061\":1,\"a\":2}", "duplicate key \"\\u0061\" in an object (written \"a\" the second time)"},
        {"{\"caf\xc3\xa9\":1,\"caf\\u00E9\":2}", "duplicate key \"caf\xc3\xa9\""},
        {"{\"\\ud83d\\ude00\":1,\"\xf0\x9f\x98\x80\":2}", "duplicate key \"\\ud83d\\ude00\""},
        {"{\"a/b\":1,\"a\\/b\":2}", "duplicate key \"a/b\""},
        {"{\"\\n\":1,\"\\u000a\":2}", "duplicate key \"\\n\""},
        {"{\"\\\"\":1,\"\\u0022\":2}", "duplicate key \"\\\"\""},
        {"{\"\\u0000\":1,\"\\u0000\":2}", "duplicate key \"\\u0000\""},
        {"{\"\":1,\"\":2}", "duplicate key \"\" in an object"},
        {"{\"a\":{},\"a\":{}}", "duplicate key \"a\""},
        {"{\"o\":{\"p\":1},\"o\":2}", "duplicate key \"o\""},
        {"{\"x\":{\"y\":[{\"a\":1,\"b\":2,\"a\":3}]}}", "duplicate key \"a\" in an object at $.x.y[0]:"},
        {"[1,{\"k\":{\"a\":1,\"a\":1}}]", "duplicate key \"a\" in an object at $[1].k:"},
        {"[[{\"a b\":{\"z\":0,\"z\":0}}]]", "duplicate key \"z\" in an object at $[0][0].\"a b\":"},
        {"{\"a\":[{\"b\":1},{\"b\":1,\"c\":{},\"b\":2}]}", "duplicate key \"b\" in an object at $.a[1]:"},
        {"{\"ok\":1,\"bad\":{\"a\":1,\"a\":2}", "is not valid JSON"}, /* cut short: a duplicate is said only of JSON */
    };
    static const char *fine[] = {
        "[{\"a\":1},{\"a\":2}]", "{\"a\":{\"a\":{\"a\":1}}}", "{\"a\":1,\"A\":2,\"a \":3,\" a\":4}",
        "{\"ab\":1,\"a\":2,\"b\":3}", "{\"\\u0061b\":1,\"a\":2}", "{\"\xc3\xa9\":1,\"e\\u0301\":2}",
        "{\"a\":[{\"b\":1},{\"b\":1}],\"b\":{\"a\":1}}", "{\"\\u0000\":1,\"\":2}", "{\"\\ud83d\\ude00\":1,\"\\ud83d\\ude01\":2}",
        "{\"x\":{\"k\":1},\"y\":{\"k\":2},\"k\":3}", "[{}, {}, {\"\":{\"\":{}}}]"};
    tocsin_db *db = t_open("dupkeys", NULL);
    int64_t id = 0, ids[2];
    size_t i;
    char *t;
    for (i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        CHECK(tocsin_json_valid(refused[i][0]) == 0);
        CHECK_EQ_I(tocsin_notify(db, &id, "c", refused[i][0], NULL), TOCSIN_INVALID);
        if (!strstr(tocsin_errmsg(db), refused[i][1])) {
            t_failed++;
            fprintf(stderr, "FAIL %s: got '%s', want '%s'\n", refused[i][0], tocsin_errmsg(db), refused[i][1]);
        } else {
            t_passed++;
        }
    }
    for (i = 0; i < sizeof fine / sizeof fine[0]; i++) {
        CHECK(tocsin_json_valid(fine[i]) == 1);
        CHECK_OK(db, tocsin_notify(db, &id, "c", fine[i], NULL));
    }
    CHECK_EQ_I(t_count(db, "_tocsin_notifications"), (long long)(sizeof fine / sizeof fine[0]));
    CHECK_OK(db, tocsin_exec(db, "DELETE FROM _tocsin_notifications"));
    /* objects past the few keys compared one by one are sorted: every size,
     * the duplicate first, last, escaped; 10,000 keys */
    {
        static const size_t sizes[] = {2, 15, 16, 17, 18, 33, 100, 10000};
        for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            char tail[64];
            t = dup_big(sizes[i], "");
            CHECK(tocsin_json_valid(t) == 1);
            free(t);
            snprintf(tail, sizeof tail, ",\"k%zu\":0", sizes[i] - 1); /* the last again */
            t = dup_big(sizes[i], tail);
            CHECK(tocsin_json_valid(t) == 0);
            free(t);
            t = dup_big(sizes[i], ",\"\\u006b0\":0"); /* the first again, escaped */
            CHECK_EQ_I(tocsin_notify(db, &id, "c", t, NULL), TOCSIN_INVALID);
            CHECK(strstr(tocsin_errmsg(db), "duplicate key \"k0\" in an object (written \"\\u006b0\"") != NULL);
            free(t);
        }
        t = dup_big(10000, ",\"k10000\":{\"k1\":1,\"k2\":2,\"k1\":3}");
        CHECK_EQ_I(tocsin_notify(db, &id, "c", t, NULL), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "duplicate key \"k1\" in an object at $.k10000:") != NULL);
        free(t);
        t = dup_big(10000, "");
        CHECK_OK(db, tocsin_notify(db, &id, "c", t, NULL));
        free(t);
    }
    {
        /* 1000 objects open at once, each with its own "a" (the kept keys
         * outgrow their inline room); one with "a" twice at the bottom, its
         * path cut short */
        char *deep = malloc(8100);
        size_t at = 0, d;
        for (d = 0; d < 1000; d++) at += (size_t)sprintf(deep + at, "{\"a\":");
        at += (size_t)sprintf(deep + at, "1");
        for (d = 0; d < 1000; d++) deep[at++] = '}';
        deep[at] = 0;
        CHECK_OK(db, tocsin_notify(db, &id, "c", deep, NULL));
        at = 0;
        for (d = 0; d < 999; d++) at += (size_t)sprintf(deep + at, "{\"a\":");
        at += (size_t)sprintf(deep + at, "{\"b\":1,\"b\":2}");
        for (d = 0; d < 999; d++) deep[at++] = '}';
        deep[at] = 0;
        CHECK_EQ_I(tocsin_notify(db, &id, "c", deep, NULL), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "duplicate key \"b\" in an object at $.a.a.a.") != NULL);
        CHECK(strstr(tocsin_errmsg(db), "...: JSON readers disagree") != NULL);
        free(deep);
    }
    CHECK_OK(db, tocsin_exec(db, "DELETE FROM _tocsin_notifications"));
    /* every call that stores JSON refuses it, writing nothing */
    {
        static const char dup[] = "{\"n\":1,\"x\":[{\"k\":1,\"k\":2}]}";
        tocsin_enqueue_opts eo = TOCSIN_ENQUEUE_OPTS_INIT;
        tocsin_schedule_opts so = TOCSIN_SCHEDULE_OPTS_INIT;
        tocsin_task_call call = TOCSIN_TASK_CALL_INIT;
        tocsin_job_spec specs[2];
        const char *payloads[2] = {"1", dup};
        CHECK_EQ_I(dup_rows(db), 0);
        CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", dup, NULL), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "payload: duplicate key \"k\" in an object at $.x[0]:") != NULL);
        eo.meta = "{\"t\":1,\"t\":2}";
        CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "1", &eo), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "meta: duplicate key \"t\"") != NULL);
        specs[0].queue = specs[1].queue = "q";
        specs[0].payload = "{\"a\":1}";
        specs[1].payload = dup;
        specs[0].opts = specs[1].opts = NULL;
        CHECK_EQ_I(tocsin_queue_enqueue_many(db, ids, specs, 2), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "duplicate key \"k\"") != NULL);
        CHECK_EQ_I(tocsin_notify(db, &id, "c", "1", "{\"t\":1,\"t\":2}"), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_stream_publish(db, &id, "s", dup, NULL, NULL), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_stream_publish(db, &id, "s", "1", NULL, "{\"t\":1,\"\\u0074\":2}"), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_stream_publish_many(db, ids, "s", payloads, NULL, 2), TOCSIN_INVALID);
        CHECK_EQ_I(tocsin_result_save(db, 1, dup, 0), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "value: duplicate key \"k\"") != NULL);
        CHECK_EQ_I(tocsin_schedule_set(db, NULL, "s", "* * * * *", "q", dup, NULL), TOCSIN_INVALID);
        so.meta = "{\"t\":1,\"t\":2}";
        CHECK_EQ_I(tocsin_schedule_set(db, NULL, "s", "* * * * *", "q", "1", &so), TOCSIN_INVALID);
        call.task = "t";
        call.args = "[{\"a\":1,\"a\":1}]";
        CHECK_EQ_I(tocsin_task_enqueue(db, &id, "q", &call, NULL), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "args: duplicate key \"a\" in an object at $[0]:") != NULL);
        call.args = NULL;
        call.kwargs = "{\"to\":\"a\",\"to\":\"b\"}";
        CHECK_EQ_I(tocsin_task_enqueue(db, &id, "q", &call, NULL), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "kwargs: duplicate key \"to\" in an object:") != NULL);
        CHECK_EQ_I(dup_rows(db), 0);
        /* the same calls go through with the keys told apart */
        CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "{\"n\":1,\"x\":[{\"k\":1},{\"k\":2}]}", NULL));
        call.kwargs = "{\"to\":\"a\",\"cc\":\"b\"}";
        CHECK_OK(db, tocsin_task_enqueue(db, &id, "q", &call, NULL));
        CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 2);
    }
    tocsin_close(db);
}

/* The JSON validator agrees with RFC 8259 (and with SQLite's json_valid on it). */
void suite_json(void) {
    static const char *good[] = {"0", "-0", "1.5e10", "-12.25E-3", "\"\"", "\"a\\u00e9\\n\\\"\"",
                                 "true", "false", "null", "[]", "{}", " [1, {\"a\": [null]}] ",
                                 "{\"k\":\"caf\xc3\xa9\"}", "[[[[[[[[[[1]]]]]]]]]]"};
    static const char *bad[] = {"", " ", "01", "1.", ".5", "+1", "1e", "--1", "[1,]", "{\"a\":1,}",
                                "{a:1}", "'x'", "\"tab\there\"", "\"\\x\"", "\"\\u12G4\"", "[1 2]",
                                "{\"a\" 1}", "tru", "nul", "NaN", "Infinity", "[1]x", "\"open",
                                "{\"a\":1", "// c\n1", "\"bad\xff\""};
    tocsin_db *db = t_open("json", NULL);
    sqlite3_stmt *st;
    int64_t id = 0;
    size_t i;
    char deep[2100];
    sqlite3_prepare_v2(tocsin_sqlite(db), "SELECT json_valid(?1)", -1, &st, NULL);
    /* the public checks follow the same rule as what every call accepts */
    for (i = 0; i < sizeof good / sizeof good[0]; i++) CHECK(tocsin_json_valid(good[i]) == 1);
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK(tocsin_json_valid(bad[i]) == 0);
    CHECK(tocsin_json_valid(NULL) == 0);
    CHECK(tocsin_json_valid("[1e309]") == 0);
    CHECK_EQ_I(tocsin_utf8_len("a"), 1);
    CHECK_EQ_I(tocsin_utf8_len("\xc3\xa9"), 2);
    CHECK_EQ_I(tocsin_utf8_len("\xe2\x80\xae"), 3);
    CHECK_EQ_I(tocsin_utf8_len("\xf0\x9f\x98\x80"), 4);
    CHECK_EQ_I(tocsin_utf8_len(""), 0);
    CHECK_EQ_I(tocsin_utf8_len(NULL), 0);
    CHECK_EQ_I(tocsin_utf8_len("\x80"), 0);          /* a continuation byte */
    CHECK_EQ_I(tocsin_utf8_len("\xc0\xaf"), 0);      /* overlong */
    CHECK_EQ_I(tocsin_utf8_len("\xed\xa0\x80"), 0);  /* a surrogate */
    CHECK_EQ_I(tocsin_utf8_len("\xf4\x90\x80\x80"), 0); /* above U+10FFFF */
    CHECK_EQ_I(tocsin_utf8_len("\xe2\x80"), 0);      /* cut short by the NUL */
    for (i = 0; i < sizeof good / sizeof good[0]; i++) {
        CHECK_OK(db, tocsin_notify(db, &id, "c", good[i], NULL));
        sqlite3_bind_text(st, 1, good[i], -1, SQLITE_STATIC);
        CHECK(sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 1);
        sqlite3_reset(st);
    }
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (tocsin_notify(db, &id, "c", bad[i], NULL) != TOCSIN_INVALID) {
            t_failed++;
            fprintf(stderr, "FAIL json accepted: %s\n", bad[i]);
        } else {
            t_passed++;
        }
    }
    sqlite3_finalize(st);
    /* nesting is bounded (SQLite's own limit is 1000) */
    memset(deep, '[', 1000);
    memset(deep + 1000, ']', 1000);
    deep[2000] = 0;
    CHECK_OK(db, tocsin_notify(db, &id, "c", deep, NULL));
    memset(deep, '[', 1001);
    memset(deep + 1001, ']', 1001);
    deep[2002] = 0;
    CHECK_EQ_I(tocsin_notify(db, &id, "c", deep, NULL), TOCSIN_INVALID);
    {
        /* numbers a double holds pass, whatever their spelling; those beyond its
         * range (infinity to Python, Node and Ruby, an error to Go) are refused,
         * saying so */
        static const char *fine[] = {"1e308", "-1.7976931348623157e308", "17976931348623157e292",
                                      "0.00000017976931348623157e315", "1e-999", "0e99999999999",
                                      "0.000e400", "-0.0e309", "123456789012345678901234567890",
                                      "[2.5e-308, 4.9e-324, 1e-400]"};
        static const char *huge[] = {"1e309", "-1e999", "1.7976931348623159e308", "10e308",
                                     "0.1e310", "{\"a\":[1,2e400]}", "1e99999999999999999999"};
        for (i = 0; i < sizeof fine / sizeof fine[0]; i++) CHECK_OK(db, tocsin_notify(db, &id, "c", fine[i], NULL));
        for (i = 0; i < sizeof huge / sizeof huge[0]; i++) {
            CHECK_EQ_I(tocsin_notify(db, &id, "c", huge[i], NULL), TOCSIN_INVALID);
            CHECK(strstr(tocsin_errmsg(db), "beyond the range of a double") != NULL);
        }
        {
            /* past 40 significant digits the digits still decide: the boundary
             * (the largest double plus half its last unit) has 309 of them, and
             * every reader rounds it, and anything above it, to infinity */
#define TC_BOUND "179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497792"
#define TC_BOUND_1 "179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497791"
            static const char *fine2[] = {"1.7976931348623158079372897140530341507993e308", TC_BOUND_1,
                                          TC_BOUND_1 ".999999999999999999999999999999",
                                          "-" TC_BOUND_1 ".9999999999999999999999999999999999999999999"};
            static const char *huge2[] = {"1.79769313486231580793728971405303415079999e308", TC_BOUND,
                                          "-" TC_BOUND, TC_BOUND ".000000000000000000000000000001",
                                          "[0." TC_BOUND "00000000000000000000000001e309]"};
#undef TC_BOUND
#undef TC_BOUND_1
            for (i = 0; i < sizeof fine2 / sizeof fine2[0]; i++)
                CHECK_OK(db, tocsin_notify(db, &id, "c", fine2[i], NULL));
            for (i = 0; i < sizeof huge2 / sizeof huge2[0]; i++) {
                CHECK_EQ_I(tocsin_notify(db, &id, "c", huge2[i], NULL), TOCSIN_INVALID);
                CHECK(strstr(tocsin_errmsg(db), "beyond the range of a double") != NULL);
            }
        }
        /* the message names the innermost member holding the number, and none
         * when it sits outside every object */
        {
            static const char *where[][2] = {
                {"{\"a\":[1,2e400]}", "the value of \"a\" holds a number"},
                {"{\"x\":{\"y\":1},\"z\":-1e999}", "the value of \"z\" holds"},
                {"{\"x\":{\"y\":{\"w\":1e999}}}", "the value of \"w\" holds"},
                {"{\"x\":{\"y\":[]},\"z\":[{}, 1e999]}", "the value of \"z\" holds"},
                {"[{\"b\":1},1e999]", "(it holds a number"},
                {"1e999", "(it holds a number"}};
            for (i = 0; i < sizeof where / sizeof where[0]; i++) {
                CHECK_EQ_I(tocsin_notify(db, &id, "c", where[i][0], NULL), TOCSIN_INVALID);
                CHECK(strstr(tocsin_errmsg(db), where[i][1]) != NULL);
            }
        }
    }
    {
        /* a surrogate pair written as two escapes is one character; half of one
         * alone is refused (readers disagree on it), in strings and keys */
        static const char *pairs[] = {"\"\\ud83d\\ude00\"", "\"a\\uD83D\\uDE00b\"", "{\"\\udbff\\udfff\":1}"};
        static const char *lone[] = {"\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"\\ud800x\"",
                                     "\"\\udbff\\ud800\"", "{\"\\udfff\":1}", "[1,\"\\uDE00\\uD83D\"]"};
        for (i = 0; i < sizeof pairs / sizeof pairs[0]; i++) CHECK_OK(db, tocsin_notify(db, &id, "c", pairs[i], NULL));
        for (i = 0; i < sizeof lone / sizeof lone[0]; i++) {
            CHECK_EQ_I(tocsin_notify(db, &id, "c", lone[i], NULL), TOCSIN_INVALID);
            CHECK(strstr(tocsin_errmsg(db), "lone surrogate escape") != NULL);
        }
    }
    tocsin_close(db);
    duplicate_keys();
}
