/*
 * Reads the golden databases with this library: opens a copy of each file
 * the manifest names, checks the manifest's facts through the public C API,
 * then does new work on it (enqueue, claim, ack, requeue, publish, notify,
 * lock, scheduler tick, a worker running the queued task calls) so that a
 * change that cannot read or extend old files fails here.
 *
 *   golden_check GOLDEN_DIR
 *
 * Prints "N passed, N failed"; exits 1 on any failure or when nothing was checked.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sqlite3.h>

#include "test.h"

int t_passed, t_failed;
const char *t_suite = "golden";

static sqlite3 *mj;      /* in-memory connection holding the manifest as ?1 */
static char *manifest;   /* its text */
static char file_key[64];
static long long seq_jobs, seq_events, seq_notes; /* the file's sqlite_sequence */

/* json_extract(manifest, '$.files."<file>"' || sub) as owned text (NULL for a JSON null). */
static int as_json; /* mtext gives JSON text (strings quoted) */
static char *mtext(const char *sub) {
    sqlite3_stmt *st;
    char path[512], *out = NULL;
    snprintf(path, sizeof path, "$.files.\"%s\"%s", file_key, sub);
    if (sqlite3_prepare_v2(mj, as_json ? "SELECT CASE json_type(?1, ?2) WHEN 'null' THEN NULL ELSE json_quote(json_extract(?1, ?2)) END"
                                       : "SELECT json_extract(?1, ?2)", -1, &st, NULL) != SQLITE_OK) exit(2);
    sqlite3_bind_text(st, 1, manifest, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, path, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        out = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return out;
}
static long long mint(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static long long mint(const char *fmt, ...) {
    char sub[400], *t;
    long long v;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sub, sizeof sub, fmt, ap);
    va_end(ap);
    t = mtext(sub);
    v = t ? atoll(t) : -1;
    free(t);
    return v;
}
static char *mstr(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *mstr(const char *fmt, ...) {
    char sub[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sub, sizeof sub, fmt, ap);
    va_end(ap);
    return mtext(sub);
}
/* A JSON value of the manifest as JSON text (NULL for a JSON null). */
static char *mjs(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *mjs(const char *fmt, ...) {
    char sub[400], *out;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sub, sizeof sub, fmt, ap);
    va_end(ap);
    as_json = 1;
    out = mtext(sub);
    as_json = 0;
    return out;
}
static long long mlen(const char *sub) {
    char path[400];
    snprintf(path, sizeof path, "%s", sub);
    {
        sqlite3_stmt *st;
        char full[512];
        long long n = -1;
        snprintf(full, sizeof full, "$.files.\"%s\"%s", file_key, path);
        if (sqlite3_prepare_v2(mj, "SELECT count(*) FROM json_each(?1, ?2)", -1, &st, NULL) != SQLITE_OK) exit(2);
        sqlite3_bind_text(st, 1, manifest, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, full, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(st) == SQLITE_ROW) n = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        return n;
    }
}
/* The n-th key of an object in the manifest (owned). */
static char *mkey(const char *sub, long long n) {
    sqlite3_stmt *st;
    char full[512], *out = NULL;
    snprintf(full, sizeof full, "$.files.\"%s\"%s", file_key, sub);
    if (sqlite3_prepare_v2(mj, "SELECT key FROM json_each(?1, ?2) LIMIT 1 OFFSET ?3", -1, &st, NULL) != SQLITE_OK)
        exit(2);
    sqlite3_bind_text(st, 1, manifest, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, full, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 3, n);
    if (sqlite3_step(st) == SQLITE_ROW) out = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return out;
}
/* Two JSON texts denote the same value (NULL equals NULL only). */
static int same_json(const char *a, const char *b) {
    sqlite3_stmt *st;
    int same = 0;
    if (!a || !b) return a == b;
    if (sqlite3_prepare_v2(mj, "SELECT json(?1) = json(?2)", -1, &st, NULL) != SQLITE_OK) exit(2);
    sqlite3_bind_text(st, 1, a, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, b, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) same = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (!same) fprintf(stderr, "  json differs: %s vs %s\n", a, b);
    return same;
}
static int same_str(const char *a, const char *b) {
    if (!a || !b) return a == b;
    if (strcmp(a, b) != 0) fprintf(stderr, "  text differs: \"%s\" vs \"%s\"\n", a, b);
    return strcmp(a, b) == 0;
}
static long long stat_of(const char *json, const char *field) {
    sqlite3_stmt *st;
    char path[300];
    long long v = -1;
    snprintf(path, sizeof path, "$.%s", field);
    if (sqlite3_prepare_v2(mj, "SELECT json_extract(?1, ?2)", -1, &st, NULL) != SQLITE_OK) exit(2);
    sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, path, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}
static char *db_text(tocsin_db *db, const char *sql) {
    sqlite3_stmt *st;
    char *out = NULL;
    if (sqlite3_prepare_v2(tocsin_sqlite(db), sql, -1, &st, NULL) != SQLITE_OK) return strdup("prepare failed");
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        out = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return out ? out : strdup("(none)");
}

static long long db_int(tocsin_db *db, const char *sql) {
    char *t = db_text(db, sql);
    long long v = atoll(t);
    free(t);
    return v;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    long n;
    char *b;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) n = 0;
    b[n] = 0;
    fclose(f);
    return b;
}
static int copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b;
    char buf[65536];
    size_t n;
    if (!a) return -1;
    b = fopen(to, "wb");
    if (!b) {
        fclose(a);
        return -1;
    }
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
    fclose(a);
    return fclose(b);
}

static void check_facts(tocsin_db *db) {
    long long i, j, n;
    int version = 0;
    char *s;

    /* the file was written as schema v1, v2...; opening it migrated it to
     * the library's version (docs/schema.md, "Migrations") */
    CHECK_OK(db, tocsin_bootstrap(db, &version));
    CHECK(mint(".schema_version") >= 1 && mint(".schema_version") <= TOCSIN_SCHEMA_VERSION);
    CHECK_EQ_I(mint(".schema_version"), atoi(file_key + 1)); /* "v2-full.db": 2 */
    CHECK_EQ_I(version, TOCSIN_SCHEMA_VERSION);
    s = db_text(db, "PRAGMA integrity_check");
    CHECK_STR(s, "ok");
    free(s);

    /* queue statistics */
    n = mlen(".queues");
    for (i = 0; i < n; i++) {
        char *q = mkey(".queues", i), *st = NULL;
        CHECK_OK(db, tocsin_queue_stats(db, &st, q));
        if (st) {
            static const char *f[] = {"pending", "scheduled", "processing", "dead", "paused"};
            size_t k;
            for (k = 0; k < 5; k++) {
                long long want = mint(".queues.\"%s\".%s", q, f[k]), got = stat_of(st, f[k]);
                if (want != got) fprintf(stderr, "  queue %s %s: %lld != %lld\n", q, f[k], got, want);
                CHECK_EQ_I(got, want);
            }
        }
        tocsin_free(st);
        free(q);
    }

    /* live jobs, one by one */
    n = mlen(".jobs");
    for (i = 0; i < n; i++) {
        tocsin_job *job = NULL;
        long long id = mint(".jobs[%lld].id", i);
        CHECK_OK(db, tocsin_job_get(db, &job, id));
        CHECK(job != NULL);
        if (job) {
            char *want;
            want = mstr(".jobs[%lld].queue", i);
            CHECK(same_str(job->queue, want));
            free(want);
            want = mstr(".jobs[%lld].state", i);
            CHECK(same_str(job->state, want));
            free(want);
            want = mjs(".jobs[%lld].payload", i);
            CHECK(same_json(job->payload, want));
            free(want);
            want = mjs(".jobs[%lld].meta", i);
            CHECK(same_json(job->meta, want));
            free(want);
            want = mstr(".jobs[%lld].unique_key", i);
            CHECK(same_str(job->unique_key, want));
            free(want);
            want = mstr(".jobs[%lld].worker", i);
            CHECK(same_str(job->worker, want));
            free(want);
            CHECK_EQ_I(job->priority, mint(".jobs[%lld].priority", i));
            CHECK_EQ_I(job->attempts, mint(".jobs[%lld].attempts", i));
            CHECK_EQ_I(job->max_attempts, mint(".jobs[%lld].max_attempts", i));
            CHECK_EQ_I(job->run_at, mint(".jobs[%lld].run_at", i));
        }
        tocsin_jobs_free(job, 1);
    }

    /* dead letters, all queues, oldest first */
    {
        tocsin_job *dead = NULL;
        size_t nd = 0;
        CHECK_OK(db, tocsin_dead_list(db, &dead, &nd, NULL, 0, 1000));
        n = mlen(".dead");
        CHECK_EQ_I(nd, n);
        for (i = 0; i < n && i < (long long)nd; i++) {
            char *want;
            CHECK_EQ_I(dead[i].id, mint(".dead[%lld].id", i));
            CHECK_STR(dead[i].state, "dead");
            want = mstr(".dead[%lld].reason", i);
            CHECK(same_str(dead[i].reason, want));
            free(want);
            want = mstr(".dead[%lld].last_error", i);
            CHECK(same_str(dead[i].last_error, want));
            free(want);
            want = mjs(".dead[%lld].payload", i);
            CHECK(same_json(dead[i].payload, want));
            free(want);
            CHECK_EQ_I(dead[i].attempts, mint(".dead[%lld].attempts", i));
        }
        tocsin_jobs_free(dead, nd);
    }

    /* results */
    n = mlen(".results");
    for (i = 0; i < n; i++) {
        tocsin_result *r = NULL;
        char *status = mstr(".results[%lld].status", i), *want;
        CHECK_OK(db, tocsin_result_get(db, &r, mint(".results[%lld].job_id", i)));
        CHECK(r != NULL);
        if (r && status) {
            CHECK_EQ_I(r->is_error, strcmp(status, "error") == 0);
            want = mstr(".results[%lld].value", i);
            CHECK(r->is_error ? r->value == NULL : same_json(r->value, want));
            free(want);
            want = mstr(".results[%lld].error_type", i);
            CHECK(same_str(r->error_type, want));
            free(want);
            want = mstr(".results[%lld].error_message", i);
            CHECK(same_str(r->error_message, want));
            free(want);
            want = mstr(".results[%lld].error_trace", i);
            CHECK(same_str(r->error_trace, want));
            free(want);
            CHECK_EQ_I(r->expires_at, 0);
        }
        tocsin_result_free(r);
        free(status);
    }

    /* streams: every event from the start, and from each saved offset */
    n = mlen(".streams");
    for (i = 0; i < n; i++) {
        char *topic = mstr(".streams[%lld].topic", i);
        tocsin_message *m = NULL;
        size_t nm = 0;
        long long ne = mlen("") >= 0 ? mint(".streams[%lld].count", i) : 0, nc;
        CHECK_OK(db, tocsin_stream_read(db, &m, &nm, topic, 0, 1000));
        CHECK_EQ_I(nm, ne);
        for (j = 0; j < (long long)nm && j < ne; j++) {
            char *want;
            CHECK_EQ_I(m[j].id, mint(".streams[%lld].events[%lld].offset", i, j));
            want = mjs(".streams[%lld].events[%lld].payload", i, j);
            CHECK(same_json(m[j].payload, want));
            free(want);
            want = mstr(".streams[%lld].events[%lld].key", i, j);
            CHECK(same_str(m[j].key, want));
            free(want);
            want = mjs(".streams[%lld].events[%lld].meta", i, j);
            CHECK(same_json(m[j].meta, want));
            free(want);
        }
        tocsin_messages_free(m, nm);
        {
            char sub[300];
            snprintf(sub, sizeof sub, ".streams[%lld].consumers", i);
            nc = mlen(sub);
            for (j = 0; j < nc; j++) {
                char *consumer = mkey(sub, j);
                long long pos = mint(".streams[%lld].consumers.\"%s\"", i, consumer), k, after = 0;
                int64_t got = -1;
                CHECK_OK(db, tocsin_stream_offset(db, &got, consumer, topic));
                CHECK_EQ_I(got, pos);
                CHECK_OK(db, tocsin_stream_read(db, &m, &nm, topic, got, 1000));
                for (k = 0; k < ne; k++)
                    if (mint(".streams[%lld].events[%lld].offset", i, k) > pos) after++;
                CHECK_EQ_I(nm, after);
                if (nm) CHECK(m[0].id > pos);
                tocsin_messages_free(m, nm);
                free(consumer);
            }
        }
        free(topic);
    }

    /* notifications, per channel in id order */
    {
        int64_t max_id = -1;
        CHECK_OK(db, tocsin_notify_max_id(db, &max_id));
        CHECK_EQ_I(max_id, mint(".max_notification_id"));
        n = mlen(".notifications");
        for (i = 0; i < n; i++) {
            char *ch = mstr(".notifications[%lld].channel", i), *want;
            long long id = mint(".notifications[%lld].id", i);
            tocsin_message *m = NULL;
            size_t nm = 0;
            CHECK_OK(db, tocsin_notify_read(db, &m, &nm, ch, id - 1, 1));
            CHECK_EQ_I(nm, 1);
            if (nm == 1) {
                CHECK_EQ_I(m[0].id, id);
                want = mjs(".notifications[%lld].payload", i);
                CHECK(same_json(m[0].payload, want));
                free(want);
                want = mjs(".notifications[%lld].meta", i);
                CHECK(same_json(m[0].meta, want));
                free(want);
            }
            tocsin_messages_free(m, nm);
            free(ch);
        }
    }

    /* locks: their leases have ended (or were released); the tokens stay */
    n = mlen(".locks");
    for (i = 0; i < n; i++) {
        char *name = mstr(".locks[%lld].name", i), *owner = NULL;
        int64_t token = -1, until = -1, t2 = 0;
        CHECK_OK(db, tocsin_lock_holder(db, &owner, &token, &until, name));
        CHECK_EQ_I(token, mint(".locks[%lld].token", i));
        CHECK(owner == NULL);
        tocsin_free(owner);
        CHECK_OK(db, tocsin_lock_acquire(db, &t2, NULL, name, "golden-reader", 60000));
        CHECK_EQ_I(t2, token + 1);
        free(name);
    }

    /* schedules, by name */
    {
        tocsin_schedule *s = NULL;
        size_t ns = 0;
        CHECK_OK(db, tocsin_schedule_list(db, &s, &ns));
        n = mlen(".schedules");
        CHECK_EQ_I(ns, n);
        for (i = 0; i < n && i < (long long)ns; i++) {
            char *want;
            want = mstr(".schedules[%lld].name", i);
            CHECK(same_str(s[i].name, want));
            free(want);
            want = mstr(".schedules[%lld].cron", i);
            CHECK(same_str(s[i].cron, want));
            free(want);
            want = mstr(".schedules[%lld].queue", i);
            CHECK(same_str(s[i].queue, want));
            free(want);
            want = mjs(".schedules[%lld].payload", i);
            CHECK(same_json(s[i].payload, want));
            free(want);
            want = mjs(".schedules[%lld].meta", i);
            CHECK(same_json(s[i].meta, want));
            free(want);
            want = mstr(".schedules[%lld].catch_up", i);
            CHECK_EQ_I(s[i].catch_up, strcmp(want ? want : "", "all") == 0 ? TOCSIN_CATCHUP_ALL : TOCSIN_CATCHUP_ONCE);
            free(want);
            CHECK_EQ_I(s[i].priority, mint(".schedules[%lld].priority", i));
            CHECK_EQ_I(s[i].max_attempts, mint(".schedules[%lld].max_attempts", i));
            CHECK_EQ_I(s[i].max_catch_up, mint(".schedules[%lld].max_catch_up", i));
            CHECK_EQ_I(s[i].paused, mint(".schedules[%lld].paused", i));
            CHECK_EQ_I(s[i].next_fire, mint(".schedules[%lld].next_fire", i));
        }
        tocsin_schedules_free(s, ns);
    }

    /* rate-limit log and worker registry (no read API: the documented tables) */
    n = mlen(".rate_limits");
    for (i = 0; i < n; i++) {
        char *name = mkey(".rate_limits", i), sql[400];
        snprintf(sql, sizeof sql, "_tocsin_rate_hits WHERE name = '%s'", name);
        {
            char q[500], *got;
            snprintf(q, sizeof q, "SELECT count(*) FROM %s", sql);
            got = db_text(db, q);
            CHECK_EQ_I(atoll(got), mint(".rate_limits.\"%s\"", name));
            free(got);
        }
        free(name);
    }
    n = mlen(".workers");
    for (i = 0; i < n; i++) {
        char *id = mstr(".workers[%lld].id", i), q[400], *got;
        snprintf(q, sizeof q, "SELECT host FROM _tocsin_workers WHERE id = '%s'", id);
        got = db_text(db, q);
        {
            char *want = mstr(".workers[%lld].host", i);
            CHECK(same_str(got, want));
            free(want);
        }
        free(got);
        free(id);
    }
}

/* New work on the old file. */
static void extend(tocsin_db *db) {
    tocsin_enqueue_opts eo = TOCSIN_ENQUEUE_OPTS_INIT;
    tocsin_job *jobs = NULL;
    size_t n = 0, k;
    int64_t id = 0, off = 0, nid = 0, fired = -1, maxid = 0;
    long long i, nj = mlen(".jobs"), nd = mlen(".dead"), pending = 0;
    int ok = 0;
    char *s;

    for (i = 0; i < nj; i++) maxid = mint(".jobs[%lld].id", i) > maxid ? mint(".jobs[%lld].id", i) : maxid;
    for (i = 0; i < nd; i++) maxid = mint(".dead[%lld].id", i) > maxid ? mint(".dead[%lld].id", i) : maxid;
    eo.priority = 100;
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "emails", "{\"to\":\"new@example.com\"}", &eo));
    CHECK(id > maxid);
    CHECK_EQ_I(id, (seq_jobs > maxid ? seq_jobs : maxid) + 1);
    /* v2: ids without AUTOINCREMENT on tocsin's tables; the one AUTOINCREMENT table is the
     * empty keeper of sqlite_sequence (VACUUM drops sqlite_sequence without one) */
    CHECK_EQ_I(db_int(db, "SELECT count(*) FROM sqlite_master WHERE sql LIKE '%AUTOINCREMENT%'"
                          " AND name <> '_tocsin_sequence_keeper'"), 0);
    CHECK_EQ_I(db_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
                          " AND name = '_tocsin_sequence_keeper'"), 1);
    /* claim every pending job of "emails": the new one first (priority 100) */
    pending = mint(".queues.emails.pending");
    if (pending < 0) pending = 0;
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "emails", "golden-reader", 100, 60000));
    CHECK_EQ_I(n, pending + 1);
    if (n) CHECK_EQ_I(jobs[0].id, id);
    for (k = 0; k < n; k++) {
        CHECK_OK(db, tocsin_job_ack(db, &ok, jobs[k].id, jobs[k].token));
        CHECK_EQ_I(ok, 1);
    }
    tocsin_jobs_free(jobs, n);
    /* unique keys held by acked jobs are free again */
    eo = (tocsin_enqueue_opts)TOCSIN_ENQUEUE_OPTS_INIT;
    eo.unique_key = "welcome:bob";
    CHECK_OK(db, tocsin_queue_enqueue(db, &nid, "emails", "{}", &eo));
    CHECK(nid > id);
    /* the held lease stays held: claiming "reports" gets only the pending ones */
    if (mint(".queues.reports.processing") == 1) {
        CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "reports", "golden-reader", 100, 60000));
        CHECK_EQ_I(n, mint(".queues.reports.pending"));
        for (k = 0; k < n; k++) CHECK_EQ_I(jobs[k].attempts, 1);
        tocsin_jobs_free(jobs, n);
    }
    /* a dead letter requeued keeps its id and runs */
    if (nd > 0) {
        long long did = mint(".dead[0].id");
        char *q = mstr(".dead[0].queue");
        CHECK_OK(db, tocsin_dead_requeue(db, &ok, did));
        CHECK_EQ_I(ok, 1);
        CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, q, "golden-reader", 1, 60000));
        CHECK_EQ_I(n, 1);
        if (n == 1) {
            CHECK_EQ_I(jobs[0].id, did);
            CHECK_OK(db, tocsin_job_ack(db, &ok, jobs[0].id, jobs[0].token));
        }
        tocsin_jobs_free(jobs, n);
        free(q);
    }
    /* streams and notifications go on after the stored ids */
    CHECK_OK(db, tocsin_stream_publish(db, &off, "orders", "{\"order\":6}", NULL, NULL));
    for (i = 0; i < mlen(".streams"); i++) CHECK(off > mint(".streams[%lld].last_offset", i));
    {
        long long top = seq_events;
        for (i = 0; i < mlen(".streams"); i++)
            if (mint(".streams[%lld].last_offset", i) > top) top = mint(".streams[%lld].last_offset", i);
        CHECK_EQ_I(off, top + 1);
    }
    CHECK_OK(db, tocsin_stream_save_offset(db, NULL, "billing", "orders", off));
    CHECK_OK(db, tocsin_notify(db, &nid, "chat", "{\"text\":\"again\"}", NULL));
    CHECK(nid > mint(".max_notification_id"));
    CHECK_EQ_I(nid, (seq_notes > mint(".max_notification_id") ? seq_notes : mint(".max_notification_id")) + 1);
    /* the unpaused schedules overdue since generation fire once (catch-up once) */
    {
        long long ns = mlen(".schedules"), want = 0;
        for (i = 0; i < ns; i++) {
            char *cu = mstr(".schedules[%lld].catch_up", i);
            if (mint(".schedules[%lld].paused", i) == 0 && cu && strcmp(cu, "once") == 0) want++;
            free(cu);
        }
        CHECK_OK(db, tocsin_scheduler_tick(db, &fired));
        CHECK_EQ_I(fired, want);
    }
    /* a worker runs the task calls queued in the file */
    if (mlen(".tasks") > 0) {
        tocsin_worker_opts wo = TOCSIN_WORKER_OPTS_INIT;
        const char *queues[] = {"tasks"};
        tocsin_worker *w = NULL;
        tocsin_task_run **runs = NULL;
        long long nt = mlen(".tasks");
        wo.worker_id = "golden-reader";
        wo.queues = queues;
        wo.n_queues = 1;
        wo.concurrency = 16;
        CHECK_OK(db, tocsin_worker_open(&w, db, &wo));
        for (i = 0; i < nt; i++) {
            char *t = mstr(".tasks[%lld].task", i);
            CHECK_OK(db, tocsin_worker_register(w, t, NULL));
            free(t);
        }
        CHECK_OK(db, tocsin_worker_next(w, &runs, &n, 0));
        CHECK_EQ_I(n, nt);
        for (k = 0; k < n; k++) {
            tocsin_outcome o = TOCSIN_OUTCOME_INIT;
            for (i = 0; i < nt; i++) {
                if (mint(".tasks[%lld].job_id", i) != runs[k]->job_id) continue;
                s = mstr(".tasks[%lld].task", i);
                CHECK(same_str(runs[k]->task, s));
                free(s);
                s = mjs(".tasks[%lld].args", i);
                CHECK(same_json(runs[k]->args, s));
                free(s);
                s = mjs(".tasks[%lld].kwargs", i);
                CHECK(same_json(runs[k]->kwargs, s));
                free(s);
            }
            o.value = "\"done\"";
            CHECK_OK(db, tocsin_worker_finish(w, NULL, runs[k], &o));
        }
        tocsin_free(runs);
        CHECK_OK(db, tocsin_worker_close(w));
        for (i = 0; i < nt; i++) {
            tocsin_result *r = NULL;
            CHECK_OK(db, tocsin_result_get(db, &r, mint(".tasks[%lld].job_id", i)));
            CHECK(r != NULL && !r->is_error && same_json(r->value, "\"done\""));
            tocsin_result_free(r);
        }
    }
    /* housekeeping on old rows */
    CHECK_OK(db, tocsin_result_sweep(db, &fired));
    CHECK_OK(db, tocsin_ratelimit_sweep(db, &fired));
    {
        long long total = 0, nr = mlen(".rate_limits");
        for (i = 0; i < nr; i++) {
            char *name = mkey(".rate_limits", i);
            total += mint(".rate_limits.\"%s\"", name);
            free(name);
        }
        CHECK_EQ_I(fired, total); /* every admission is out of its window by now */
    }
    CHECK_OK(db, tocsin_notify_prune(db, &fired, 0, 100));
    s = db_text(db, "PRAGMA integrity_check");
    CHECK_STR(s, "ok");
    free(s);
}

int main(int argc, char **argv) {
    char path[4096], dir[1024], copy[4096];
    long long nfiles, f;
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    if (argc != 2) {
        fprintf(stderr, "usage: golden_check GOLDEN_DIR\n");
        return 2;
    }
    snprintf(path, sizeof path, "%s/manifest.json", argv[1]);
    manifest = slurp(path);
    if (!manifest) {
        fprintf(stderr, "golden_check: cannot read %s\n", path);
        return 1;
    }
    if (sqlite3_open(":memory:", &mj) != SQLITE_OK) return 1;
    file_key[0] = 0;
    {
        sqlite3_stmt *st;
        sqlite3_prepare_v2(mj, "SELECT count(*) FROM json_each(?1, '$.files')", -1, &st, NULL);
        sqlite3_bind_text(st, 1, manifest, -1, SQLITE_STATIC);
        nfiles = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
        sqlite3_finalize(st);
    }
    snprintf(dir, sizeof dir, "%s/tocsin-golden-%d", tmp, (int)getpid());
    mkdir(dir, 0700);
    for (f = 0; f < nfiles; f++) {
        sqlite3_stmt *st;
        tocsin_db *db = NULL;
        int before = t_failed;
        sqlite3_prepare_v2(mj, "SELECT key FROM json_each(?1, '$.files') LIMIT 1 OFFSET ?2", -1, &st, NULL);
        sqlite3_bind_text(st, 1, manifest, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, f);
        if (sqlite3_step(st) == SQLITE_ROW)
            snprintf(file_key, sizeof file_key, "%s", (const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
        snprintf(path, sizeof path, "%s/%s", argv[1], file_key);
        snprintf(copy, sizeof copy, "%s/%s", dir, file_key);
        {
            /* the journal mode the file was left in: header bytes 18-19 are 2 for WAL, 1 for a
             * rollback journal (tocsin_open switches the copy to WAL) */
            FILE *g = fopen(path, "rb");
            unsigned char hdr[20] = {0};
            char *want = mstr(".journal_mode");
            if (!g || fread(hdr, 1, sizeof hdr, g) != sizeof hdr) t_failed++;
            if (g) fclose(g);
            CHECK_STR(hdr[18] == 2 && hdr[19] == 2 ? "wal" : hdr[18] == 1 && hdr[19] == 1 ? "delete" : "?", want);
            free(want);
        }
        if (copy_file(path, copy) != 0) {
            fprintf(stderr, "FAIL cannot copy %s\n", path);
            t_failed++;
            continue;
        }
        /* the ids the file handed out (v1: AUTOINCREMENT's sqlite_sequence;
         * v2: max(id), or the sqlite_sequence row once the top row is gone):
         * the next ones continue them exactly, whatever migrations ran. Read
         * from the copy: a reader of the file itself leaves a -wal and a -shm
         * beside it. */
        {
            sqlite3 *o = NULL;
            sqlite3_stmt *sq = NULL;
            seq_jobs = seq_events = seq_notes = 0;
            if (sqlite3_open_v2(copy, &o, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
                sqlite3_prepare_v2(o, "SELECT name, seq FROM sqlite_sequence", -1, &sq, NULL) == SQLITE_OK) {
                while (sqlite3_step(sq) == SQLITE_ROW) {
                    const char *nm = (const char *)sqlite3_column_text(sq, 0);
                    long long v = sqlite3_column_int64(sq, 1);
                    if (strcmp(nm, "_tocsin_jobs") == 0) seq_jobs = v;
                    if (strcmp(nm, "_tocsin_events") == 0) seq_events = v;
                    if (strcmp(nm, "_tocsin_notifications") == 0) seq_notes = v;
                }
            }
            sqlite3_finalize(sq);
            sqlite3_close(o);
        }
        if (tocsin_open(&db, copy, NULL) != TOCSIN_OK) {
            fprintf(stderr, "FAIL open %s: %s\n", file_key, tocsin_errmsg(db));
            t_failed++;
            tocsin_close(db);
            continue;
        }
        check_facts(db);
        extend(db);
        CHECK_OK(db, tocsin_close(db));
        /* and the extended file opens again */
        db = NULL;
        CHECK_OK(db, tocsin_open(&db, copy, NULL));
        tocsin_close(db);
        printf("golden: %s %s\n", file_key, t_failed == before ? "ok" : "FAILED");
        {
            char p2[4200];
            snprintf(p2, sizeof p2, "%s-wal", copy);
            unlink(p2);
            snprintf(p2, sizeof p2, "%s-shm", copy);
            unlink(p2);
            unlink(copy);
        }
    }
    rmdir(dir);
    sqlite3_close(mj);
    free(manifest);
    printf("%d passed, %d failed (%lld files)\n", t_passed, t_failed, nfiles);
    return t_failed || nfiles == 0 || t_passed == 0 ? 1 : 0;
}
