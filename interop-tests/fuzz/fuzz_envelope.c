/*
 * The task envelope, both ways.
 *  - Building: tocsin_task_envelope with a call made of the input (first
 *    byte: flags; two bytes: ttl and timeout; the rest split at NUL bytes into
 *    task, args, kwargs). Accepted: the envelope is a JSON object naming the
 *    task, args an array, kwargs an object. Refused: TOCSIN_INVALID with a message.
 *  - Parsing: the input (cut at its first NUL) enqueued as a raw job on the
 *    queue of a worker (on a file database: a worker subscribes to commits)
 *    that knows the task "t". After one tocsin_worker_next the job was run
 *    (a valid envelope of "t": its args/kwargs handed over are an array and
 *    an object), failed as InvalidEnvelope, or handed back (another task):
 *    never left in flight.
 */
#define _POSIX_C_SOURCE 200809L
#include <unistd.h>

#include "fuzz.h"

static tocsin_db *fdb;
static tocsin_worker *w;
static char fpath[512];

static void close_file_db(void) {
    static const char *sfx[] = {"", "-wal", "-shm"};
    char p[600];
    size_t i;
    tocsin_worker_close(w);
    tocsin_close(fdb);
    for (i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s%s", fpath, sfx[i]);
        unlink(p);
    }
}

static void open_file_db(void) {
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    tocsin_worker_opts wo = TOCSIN_WORKER_OPTS_INIT;
    static const char *queues[] = {"tasks"};
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(fpath, sizeof fpath, "%s/tocsin-fuzz-envelope-%d.db", tmp, (int)getpid());
    unlink(fpath);
    o.clock = fuzz_clock;
    o.max_payload_bytes = 4096;
    FUZZ_REQUIRE(tocsin_open(&fdb, fpath, &o) == TOCSIN_OK);
    wo.worker_id = "fuzz";
    wo.queues = queues;
    wo.n_queues = 1;
    wo.concurrency = 4;
    FUZZ_REQUIRE(tocsin_worker_open(&w, fdb, &wo) == TOCSIN_OK);
    FUZZ_REQUIRE(tocsin_worker_register(w, "t", NULL) == TOCSIN_OK);
    atexit(close_file_db);
}

static int json_is(tocsin_db *db, const char *json, const char *path, const char *type) {
    sqlite3_stmt *st;
    int ok = 0;
    if (sqlite3_prepare_v2(tocsin_sqlite(db), "SELECT json_type(?1, ?2)", -1, &st, NULL) != SQLITE_OK) return 0;
    sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, path, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        ok = strcmp((const char *)sqlite3_column_text(st, 0), type) == 0;
    sqlite3_finalize(st);
    return ok;
}

static void build(const uint8_t *data, size_t size) {
    tocsin_db *db = fuzz_memdb();
    tocsin_task_call c = TOCSIN_TASK_CALL_INIT;
    char *buf, *parts[3] = {NULL, NULL, NULL}, *env = NULL;
    size_t i, k = 0;
    int rc, flags;
    if (size < 3) return;
    flags = data[0];
    c.result_ttl_ms = (int8_t)data[1] * 1000LL;
    c.timeout_ms = (int8_t)data[2] * 100LL;
    if (flags & 8) c.result_ttl_ms = (int64_t)((uint64_t)data[1] << 56);
    buf = fuzz_cstr(data + 3, size - 3);
    parts[0] = buf;
    for (i = 0; i < size - 3 && k < 2; i++)
        if (buf[i] == 0) parts[++k] = buf + i + 1;
    c.task = (flags & 1) ? NULL : parts[0];
    c.args = (flags & 2) ? NULL : parts[1];
    c.kwargs = (flags & 4) ? NULL : parts[2];
    rc = tocsin_task_envelope(db, &env, &c);
    if (rc == TOCSIN_OK) {
        FUZZ_REQUIRE(env != NULL);
        FUZZ_REQUIRE(json_is(db, env, "$", "object"));
        FUZZ_REQUIRE(json_is(db, env, "$.task", "text"));
        FUZZ_REQUIRE(json_is(db, env, "$.args", "array"));
        FUZZ_REQUIRE(json_is(db, env, "$.kwargs", "object"));
        FUZZ_REQUIRE(c.task != NULL);
    } else {
        FUZZ_REQUIRE(rc == TOCSIN_INVALID || rc == TOCSIN_TOOBIG);
        FUZZ_REQUIRE(env == NULL && tocsin_errmsg(NULL)[0] != 0);
    }
    tocsin_free(env);
    free(buf);
}

static void parse(const uint8_t *data, size_t size) {
    tocsin_task_run **runs = NULL;
    size_t n = 0, i;
    int64_t id = 0;
    char *text = fuzz_cstr(data, size), q[200];
    int rc;
    if (!fdb) open_file_db();
    FUZZ_REQUIRE(tocsin_exec(fdb, "DELETE FROM _tocsin_jobs; DELETE FROM _tocsin_dead; DELETE FROM _tocsin_results") ==
                 TOCSIN_OK);
    if (tocsin_queue_enqueue(fdb, &id, "tasks", text, NULL) != TOCSIN_OK) {
        free(text);
        return;
    }
    rc = tocsin_worker_next(w, &runs, &n, 0);
    FUZZ_REQUIRE(rc == TOCSIN_OK || rc == TOCSIN_TIMEOUT);
    for (i = 0; i < n; i++) {
        tocsin_outcome o = TOCSIN_OUTCOME_INIT;
        FUZZ_REQUIRE(runs[i]->job_id == id && strcmp(runs[i]->task, "t") == 0);
        FUZZ_REQUIRE(json_is(fdb, runs[i]->args, "$", "array"));
        FUZZ_REQUIRE(json_is(fdb, runs[i]->kwargs, "$", "object"));
        FUZZ_REQUIRE(tocsin_worker_finish(w, NULL, runs[i], &o) == TOCSIN_OK);
    }
    tocsin_free(runs);
    FUZZ_REQUIRE(tocsin_worker_flush(w, NULL) == TOCSIN_OK);
    FUZZ_REQUIRE(tocsin_worker_in_flight(w) == 0);
    snprintf(q, sizeof q,
             "SELECT (SELECT count(*) FROM _tocsin_results WHERE job_id = %lld) +"
             " (SELECT count(*) FROM _tocsin_jobs WHERE id = %lld AND state <> 'processing')",
             (long long)id, (long long)id);
    FUZZ_REQUIRE(fuzz_qi(fdb, q) == 1); /* a result (run or InvalidEnvelope) or handed back */
    free(text);
}

int fuzz_envelope(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (data[0] & 0x80) parse(data + 1, size - 1);
    else build(data + 1, size - 1);
    return 0;
}

FUZZ_ENTRY(fuzz_envelope)
