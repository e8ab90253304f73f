#define _POSIX_C_SOURCE 200809L
/* The JSON documents behind the CLI's listings and the dashboard's panels.
 * Read-only SQL over the _tocsin_* tables (docs/schema.md) where the C API has
 * no listing (job search, streams, notifications); the C API everywhere else. */
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

char g_err[512];

void sb_add(sb *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { fputs("tocsin: out of memory\n", stderr); exit(EXIT_ERR); }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
void sb_puts(sb *b, const char *s) { sb_add(b, s, strlen(s)); }
void sb_printf(sb *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) { sb_add(b, tmp, (size_t)n); return; }
    char *big = malloc((size_t)n + 1);
    if (!big) { fputs("tocsin: out of memory\n", stderr); exit(EXIT_ERR); }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_add(b, big, (size_t)n);
    free(big);
}
/* Appends s with each byte that begins no UTF-8 character replaced by U+FFFD:
 * a text written into the tables around tocsin (plain SQL) may hold such bytes,
 * and every document printed or served must be UTF-8, as JSON must be. */
void sb_add_utf8(sb *b, const char *s) {
    const unsigned char *p = (const unsigned char *)s, *run = p;
    while (*p) {
        unsigned n = tocsin_utf8_len((const char *)p);
        if (n) { p += n; continue; }
        sb_add(b, (const char *)run, (size_t)(p - run));
        sb_add(b, "\xef\xbf\xbd", 3);
        run = ++p;
    }
    sb_add(b, (const char *)run, (size_t)(p - run));
}


/* A stored JSON value as it goes into a document: as is when it is valid JSON
 * and UTF-8 (what tocsin writes), else a JSON string of its text (a row written
 * around tocsin), as the core's SQL documents have it (docs/sql.md, "Results"). */
void sb_json_raw(sb *b, const char *v) {
    if (!v) sb_puts(b, "null");
    else if (tocsin_json_valid(v)) sb_puts(b, v);
    else sb_json_str(b, v);
}

void sb_json_str(sb *b, const char *s) {
    if (!s) { sb_puts(b, "null"); return; }
    sb_add(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p >= 0x80) { /* a byte that begins no UTF-8 character: U+FFFD */
            unsigned n = tocsin_utf8_len((const char *)p);
            if (!n) sb_puts(b, "\\ufffd");
            else { sb_add(b, (const char *)p, n); p += n - 1; }
            continue;
        }
        switch (*p) {
        case '"': sb_puts(b, "\\\""); break;
        case '\\': sb_puts(b, "\\\\"); break;
        case '\n': sb_puts(b, "\\n"); break;
        case '\r': sb_puts(b, "\\r"); break;
        case '\t': sb_puts(b, "\\t"); break;
        /* <, > and & escaped too, so JSON embedded anywhere cannot close a tag */
        case '<': sb_puts(b, "\\u003c"); break;
        case '>': sb_puts(b, "\\u003e"); break;
        case '&': sb_puts(b, "\\u0026"); break;
        default:
            if (*p < 0x20 || *p == 0x7f) sb_printf(b, "\\u%04x", *p);
            else sb_add(b, (const char *)p, 1);
        }
    }
    sb_add(b, "\"", 1);
}
void sb_free(sb *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* json_value_text(X): X as it goes into a document (sb_json_raw), for the SQL
 * collectors: json(json_value_text(payload)) is a stored payload, or the JSON
 * string of a text written around tocsin that is not JSON, where json(payload)
 * failed the whole listing ("malformed JSON"). NULL stays NULL. */
static void fn_json_value_text(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    (void)argc;
    const char *v = (const char *)sqlite3_value_text(argv[0]);
    if (!v) { sqlite3_result_null(ctx); return; }
    sb b = {0};
    sb_json_raw(&b, v);
    sqlite3_result_text(ctx, b.p, (int)b.n, free); /* sb_free's memory: free() */
}

int cli_register_functions(tocsin_db *db) {
    int rc = sqlite3_create_function_v2(tocsin_sqlite(db), "json_value_text", 1,
                                        SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, fn_json_value_text, NULL, NULL,
                                        NULL);
    return rc == SQLITE_OK ? 0 : fail_sqlite(db, "register functions");
}

int exit_code_of(int rc) {
    switch (rc) {
    case TOCSIN_OK: return EXIT_OK;
    case TOCSIN_INVALID: case TOCSIN_TOOBIG: return EXIT_USAGE;
    case TOCSIN_NOTFOUND: return EXIT_NOTFOUND;
    case TOCSIN_BUSY: case TOCSIN_TIMEOUT: return EXIT_BUSY;
    default: return EXIT_ERR;
    }
}

int fail_tocsin(int rc, const char *what) {
    const char *msg = tocsin_errmsg(NULL);
    size_t n = strlen(what);
    /* the core's message may already start with the same step ("enqueue: ...") */
    if (!strncmp(msg, what, n) && msg[n] == ':') snprintf(g_err, sizeof g_err, "%s", msg);
    else snprintf(g_err, sizeof g_err, "%s: %s", what, msg);
    return exit_code_of(rc);
}

int fail_sqlite(tocsin_db *db, const char *what) {
    sqlite3 *c = tocsin_sqlite(db);
    int rc = sqlite3_extended_errcode(c);
    snprintf(g_err, sizeof g_err, "%s: %s", what, sqlite3_errmsg(c));
    return exit_code_of(tocsin_code_of_sqlite(rc));
}

/* Binds per `fmt` and steps once; the caller finalizes. */
static int prepare_bind(tocsin_db *db, sqlite3_stmt **st, const char *sql, const char *fmt,
                        va_list ap) {
    sqlite3 *c = tocsin_sqlite(db);
    if (sqlite3_prepare_v2(c, sql, -1, st, NULL) != SQLITE_OK) return fail_sqlite(db, "query");
    for (int i = 0; fmt[i]; i++) {
        if (fmt[i] == 'i') sqlite3_bind_int64(*st, i + 1, va_arg(ap, int64_t));
        else if (fmt[i] == 'I') { /* 0 binds NULL */
            int64_t v = va_arg(ap, int64_t);
            if (v) sqlite3_bind_int64(*st, i + 1, v);
        }
        else if (fmt[i] == 't') {
            const char *s = va_arg(ap, const char *);
            if (s) sqlite3_bind_text(*st, i + 1, s, -1, SQLITE_TRANSIENT);
        }
    }
    return 0;
}

int sql_text(tocsin_db *db, char **out, const char *sql, const char *fmt, ...) {
    sqlite3_stmt *st = NULL;
    va_list ap;
    va_start(ap, fmt);
    int rc = prepare_bind(db, &st, sql, fmt, ap);
    va_end(ap);
    *out = NULL;
    if (rc) { sqlite3_finalize(st); return rc; }
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        if (t) *out = strdup((const char *)t);
    } else if (s != SQLITE_DONE) {
        rc = fail_sqlite(db, "query");
    }
    sqlite3_finalize(st);
    return rc;
}

static void kv_int(sb *b, const char *k, int64_t v, int comma) {
    sb_printf(b, "%s\"%s\":%lld", comma ? "," : "", k, (long long)v);
}
/* An instant or id the C API gives as `none` (0 or -1) when there is none: null in
 * JSON, as the SQL documents have it (docs/sql.md). */
static void kv_opt(sb *b, const char *k, int64_t v, int64_t none) {
    if (v == none) sb_printf(b, ",\"%s\":null", k);
    else kv_int(b, k, v, 1);
}
static void kv_str(sb *b, const char *k, const char *v) {
    sb_printf(b, ",\"%s\":", k);
    sb_json_str(b, v);
}
/* JSON text stored by the core (validated on write) goes out as is; a text
 * written around tocsin that is not JSON goes out as a string (sb_json_raw). */
static void kv_json(sb *b, const char *k, const char *v) {
    sb_printf(b, ",\"%s\":", k);
    sb_json_raw(b, v);
}

void job_json(sb *b, const tocsin_job *j) {
    sb_puts(b, "{");
    kv_int(b, "id", j->id, 0);
    kv_str(b, "queue", j->queue);
    kv_str(b, "state", j->state);
    kv_json(b, "payload", j->payload);
    kv_json(b, "meta", j->meta);
    kv_int(b, "priority", j->priority, 1);
    kv_int(b, "attempts", j->attempts, 1);
    kv_int(b, "max_attempts", j->max_attempts, 1);
    kv_int(b, "run_at", j->run_at, 1);
    kv_int(b, "created_at", j->created_at, 1);
    kv_opt(b, "lease_until", j->lease_until, 0);
    kv_opt(b, "expires_at", j->expires_at, 0);
    kv_str(b, "unique_key", j->unique_key);
    kv_str(b, "worker", j->worker);
    kv_str(b, "last_error", j->last_error);
    kv_str(b, "reason", j->reason);
    kv_opt(b, "died_at", j->died_at, 0);
    sb_puts(b, "}");
}

void message_json(sb *b, const tocsin_message *m) {
    sb_puts(b, "{");
    kv_int(b, "id", m->id, 0);
    kv_str(b, "name", m->name);
    kv_str(b, "key", m->key);
    kv_json(b, "payload", m->payload);
    kv_json(b, "meta", m->meta);
    kv_int(b, "created_at", m->created_at, 1);
    sb_puts(b, "}");
}

/* {"now":ms,"enqueued_total":n,"queues":[{stats of tocsin_queue_stats +
 * enqueued_1m, died_1m}]}. Acked jobs leave no row (docs/architecture.md), so
 * enqueued_1m counts the jobs of the last minute still live or dead, and
 * enqueued_total (the job id sequence, all queues) is what a sampler turns into
 * exact global enqueue and completion rates. */
int collect_stats(tocsin_db *db, sb *out, const char *queue) {
    char *js = NULL, *res = NULL;
    int rc = tocsin_queue_stats(db, &js, queue);
    if (rc) return fail_tocsin(rc, "stats");
    sb all = {0};
    if (queue) { sb_puts(&all, "{\"queues\":["); sb_puts(&all, js); sb_puts(&all, "]}"); }
    else sb_puts(&all, js);
    tocsin_free(js);
    int64_t now = tocsin_now(db);
    /* The minute's counts read only that minute's rows: ids grow with time, so
     * the newest live job created before the cut (found walking back from the
     * newest id) bounds a rowid range; `+` keeps the planner off the queue
     * indexes, which would walk every job of a queue. */
    rc = sql_text(db, &res,
        "WITH cut(x) AS (SELECT coalesce((SELECT id FROM _tocsin_jobs WHERE created_at < ?2"
        "                                 ORDER BY id DESC LIMIT 1), 0))"
        " SELECT json_object('now', ?1,"
        /* the highest job id ever handed out (docs/schema.md, "Ids") */
        " 'enqueued_total', max(coalesce((SELECT max(id) FROM _tocsin_jobs), 0),"
        "   coalesce((SELECT seq FROM sqlite_sequence WHERE name = '_tocsin_jobs'), 0)),"
        " 'queues', json((SELECT json_group_array(json(json_set(q.value,"
        "   '$.enqueued_1m', (SELECT count(*) FROM _tocsin_jobs j WHERE j.id > cut.x"
        "                     AND +j.queue = q.value->>'queue' AND j.created_at >= ?2)"
        "                  + (SELECT count(*) FROM _tocsin_dead d WHERE d.queue = q.value->>'queue'"
        "                     AND d.id > cut.x AND d.created_at >= ?2),"
        "   '$.died_1m', (SELECT count(*) FROM _tocsin_dead d WHERE +d.queue = q.value->>'queue'"
        "                 AND d.died_at >= ?2))))"
        "  FROM cut, json_each(?3, '$.queues') q)))",
        "iit", (int64_t)now, (int64_t)(now - 60000), all.p);
    sb_free(&all);
    if (rc) return rc;
    sb_add_utf8(out, res ? res : "{}"); /* names written around tocsin: UTF-8 */
    free(res);
    return 0;
}

int collect_jobs(tocsin_db *db, sb *out, const job_filter *f) {
    int64_t now = tocsin_now(db);
    char *res = NULL;
    int rc = sql_text(db, &res,
        "SELECT json_group_array(json(j)) FROM (SELECT json_object('id', id, 'queue', queue, 'state', st,"
        " 'payload', json(json_value_text(payload)), 'meta', json(json_value_text(meta)), 'priority', priority, 'attempts', attempts,"
        " 'max_attempts', max_attempts, 'run_at', run_at, 'created_at', created_at,"
        " 'lease_until', lease_until, 'expires_at', expires_at, 'unique_key', unique_key,"
        " 'worker', worker, 'last_error', last_error, 'reason', reason, 'died_at', died_at) AS j FROM ("
        "  SELECT id, queue, CASE WHEN state = 'scheduled' AND run_at <= ?1 THEN 'pending' ELSE state END AS st,"
        "   payload, meta, priority, attempts, max_attempts, run_at, created_at, lease_until, expires_at,"
        "   unique_key, worker, last_error, NULL AS reason, NULL AS died_at FROM _tocsin_jobs"
        "  UNION ALL SELECT id, queue, 'dead', payload, meta, priority, attempts, max_attempts, run_at,"
        "   created_at, NULL, expires_at, unique_key, worker, last_error, reason, died_at FROM _tocsin_dead)"
        " WHERE (?2 IS NULL OR queue = ?2) AND (?3 IS NULL OR st = ?3)"
        "  AND (?4 IS NULL OR created_at <= ?4) AND (?5 IS NULL OR created_at >= ?5)"
        "  AND (?6 IS NULL OR instr(payload, ?6) > 0 OR instr(coalesce(meta, ''), ?6) > 0"
        "       OR instr(coalesce(unique_key, ''), ?6) > 0 OR instr(coalesce(last_error, ''), ?6) > 0"
        "       OR CAST(id AS TEXT) = ?6)"
        " ORDER BY id DESC LIMIT ?7)",
        "ittIIti", (int64_t)now, f->queue, f->state,
        (int64_t)(f->older_than_ms > 0 ? now - f->older_than_ms : 0),
        (int64_t)(f->newer_than_ms > 0 ? now - f->newer_than_ms : 0), f->search,
        (int64_t)(f->limit > 0 ? f->limit : 100));
    if (rc) return rc;
    sb_add_utf8(out, res ? res : "[]"); /* names written around tocsin: UTF-8 */
    free(res);
    return 0;
}

int collect_dead(tocsin_db *db, sb *out, const char *queue, int64_t after, int64_t limit) {
    tocsin_job *jobs = NULL;
    size_t n = 0;
    int rc = tocsin_dead_list(db, &jobs, &n, queue, after, (size_t)(limit > 0 ? limit : 100));
    if (rc) return fail_tocsin(rc, "dead list");
    sb_puts(out, "[");
    for (size_t i = 0; i < n; i++) {
        if (i) sb_puts(out, ",");
        job_json(out, &jobs[i]);
    }
    sb_puts(out, "]");
    tocsin_jobs_free(jobs, n);
    return 0;
}

/* Topics with their offsets, and each consumer's position and lag (events after it). */
int collect_streams(tocsin_db *db, sb *out) {
    char *res = NULL;
    int rc = sql_text(db, &res,
        "SELECT json_group_array(json(t)) FROM (SELECT json_object('topic', topic, 'events', count(*),"
        " 'first_offset', min(id), 'last_offset', max(id), 'last_at', max(created_at),"
        " 'consumers', json((SELECT json_group_array(json_object('consumer', o.consumer,"
        "   'position', o.position, 'lag', (SELECT count(*) FROM _tocsin_events e2"
        "   WHERE e2.topic = o.topic AND e2.id > o.position), 'updated_at', o.updated_at))"
        "   FROM _tocsin_offsets o WHERE o.topic = e.topic))) AS t"
        " FROM _tocsin_events e GROUP BY topic ORDER BY topic)",
        "");
    if (rc) return rc;
    sb_add_utf8(out, res ? res : "[]"); /* names written around tocsin: UTF-8 */
    free(res);
    return 0;
}

int collect_schedules(tocsin_db *db, sb *out) {
    tocsin_schedule *s = NULL;
    size_t n = 0;
    int rc = tocsin_schedule_list(db, &s, &n);
    if (rc) return fail_tocsin(rc, "schedules");
    sb_puts(out, "[");
    for (size_t i = 0; i < n; i++) {
        if (i) sb_puts(out, ",");
        sb_puts(out, "{\"name\":");
        sb_json_str(out, s[i].name);
        kv_str(out, "cron", s[i].cron);
        kv_str(out, "queue", s[i].queue);
        kv_json(out, "payload", s[i].payload);
        kv_json(out, "meta", s[i].meta);
        kv_int(out, "paused", s[i].paused, 1);
        kv_int(out, "local_time", s[i].local_time, 1);
        kv_opt(out, "next_fire", s[i].next_fire, -1);
        kv_opt(out, "last_fire", s[i].last_fire, 0);
        kv_opt(out, "last_job_id", s[i].last_job_id, 0);
        kv_int(out, "fired_count", s[i].fired_count, 1);
        kv_int(out, "skipped_count", s[i].skipped_count, 1);
        sb_puts(out, "}");
    }
    sb_puts(out, "]");
    tocsin_schedules_free(s, n);
    return 0;
}

/* Per channel: how many notifications are kept, the newest id and the most recent ones. */
int collect_notifications(tocsin_db *db, sb *out, const char *channel, int64_t per_channel) {
    char *res = NULL;
    int rc = sql_text(db, &res,
        "SELECT json_group_array(json(c)) FROM (SELECT json_object('channel', channel, 'count', count(*),"
        " 'last_id', max(id), 'recent', json((SELECT json_group_array(json(x)) FROM (SELECT"
        "   json_object('id', id, 'payload', json(json_value_text(payload)), 'meta', json(json_value_text(meta)), 'created_at', created_at) AS x"
        "   FROM _tocsin_notifications n2 WHERE n2.channel = n.channel ORDER BY id DESC LIMIT ?1)))) AS c"
        " FROM _tocsin_notifications n WHERE (?2 IS NULL OR channel = ?2) GROUP BY channel ORDER BY channel)",
        "it", (int64_t)(per_channel > 0 ? per_channel : 10), channel);
    if (rc) return rc;
    sb_add_utf8(out, res ? res : "[]"); /* names written around tocsin: UTF-8 */
    free(res);
    return 0;
}

/* A Prometheus label value: backslash, double quote and newline escaped. */
static void prom_label(sb *b, const char *s) {
    for (; s && *s; s++) {
        if (*s == '\\') sb_puts(b, "\\\\");
        else if (*s == '"') sb_puts(b, "\\\"");
        else if (*s == '\n') sb_puts(b, "\\n");
        else sb_add(b, s, 1);
    }
}

/* Iterates rows of a query over a JSON document: each row is label columns then one number. */
static int prom_rows(tocsin_db *db, sb *out, const char *sql, const char *json,
                     const char *metric, const char *const *labels, int nlabels) {
    sqlite3_stmt *st = NULL;
    sqlite3 *c = tocsin_sqlite(db);
    if (sqlite3_prepare_v2(c, sql, -1, &st, NULL) != SQLITE_OK) return fail_sqlite(db, "metrics");
    sqlite3_bind_text(st, 1, json, -1, SQLITE_TRANSIENT);
    int s;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        sb_puts(out, metric);
        if (nlabels) {
            sb_puts(out, "{");
            for (int i = 0; i < nlabels; i++) {
                sb_printf(out, "%s%s=\"", i ? "," : "", labels[i]);
                prom_label(out, (const char *)sqlite3_column_text(st, i));
                sb_puts(out, "\"");
            }
            sb_puts(out, "}");
        }
        if (sqlite3_column_type(st, nlabels) == SQLITE_FLOAT)
            sb_printf(out, " %.3f\n", sqlite3_column_double(st, nlabels));
        else
            sb_printf(out, " %lld\n", (long long)sqlite3_column_int64(st, nlabels));
    }
    int rc = s == SQLITE_DONE ? 0 : fail_sqlite(db, "metrics");
    sqlite3_finalize(st);
    return rc;
}

int collect_metrics(tocsin_db *db, sb *out) {
    sb stats = {0}, streams = {0}, scheds = {0};
    int rc = collect_stats(db, &stats, NULL);
    if (!rc) rc = collect_streams(db, &streams);
    if (!rc) rc = collect_schedules(db, &scheds);
    static const char *const q[] = {"queue"}, *const qs[] = {"queue", "state"},
                             *const tc[] = {"topic", "consumer"}, *const t[] = {"topic"},
                             *const s[] = {"schedule"};
    if (rc) goto done;
    sb_puts(out, "# HELP tocsin_jobs Jobs per queue and state.\n# TYPE tocsin_jobs gauge\n");
    rc = prom_rows(db, out,
        "SELECT q.value->>'queue', k.value, q.value->>k.value FROM json_each(?1, '$.queues') q,"
        " json_each('[\"pending\",\"scheduled\",\"processing\",\"dead\"]') k", stats.p, "tocsin_jobs", qs, 2);
    if (rc) goto done;
    sb_puts(out, "# HELP tocsin_oldest_pending_age_seconds Age of the oldest due pending job.\n"
                 "# TYPE tocsin_oldest_pending_age_seconds gauge\n");
    rc = prom_rows(db, out, "SELECT value->>'queue', (value->>'oldest_pending_age_ms') / 1000.0"
                            " FROM json_each(?1, '$.queues')", stats.p,
                   "tocsin_oldest_pending_age_seconds", q, 1);
    if (rc) goto done;
    sb_puts(out, "# HELP tocsin_queue_paused 1 when the queue is paused.\n# TYPE tocsin_queue_paused gauge\n");
    rc = prom_rows(db, out, "SELECT value->>'queue', CASE WHEN value->>'paused' THEN 1 ELSE 0 END"
                            " FROM json_each(?1, '$.queues')", stats.p, "tocsin_queue_paused", q, 1);
    if (rc) goto done;
    sb_puts(out, "# HELP tocsin_jobs_enqueued_total Jobs ever enqueued (all queues).\n"
                 "# TYPE tocsin_jobs_enqueued_total counter\n");
    rc = prom_rows(db, out, "SELECT ?1->>'enqueued_total'", stats.p, "tocsin_jobs_enqueued_total", NULL, 0);
    if (rc) goto done;
    sb_puts(out, "# HELP tocsin_stream_last_offset Newest offset of each topic.\n"
                 "# TYPE tocsin_stream_last_offset gauge\n");
    rc = prom_rows(db, out, "SELECT value->>'topic', value->>'last_offset' FROM json_each(?1)", streams.p,
                   "tocsin_stream_last_offset", t, 1);
    if (rc) goto done;
    sb_puts(out, "# HELP tocsin_stream_consumer_lag Events of the topic after the consumer's offset.\n"
                 "# TYPE tocsin_stream_consumer_lag gauge\n");
    rc = prom_rows(db, out, "SELECT e.value->>'topic', c.value->>'consumer', c.value->>'lag'"
                            " FROM json_each(?1) e, json_each(e.value, '$.consumers') c", streams.p,
                   "tocsin_stream_consumer_lag", tc, 2);
    if (rc) goto done;
    sb_puts(out, "# HELP tocsin_schedule_next_fire_timestamp_seconds Next boundary of each schedule.\n"
                 "# TYPE tocsin_schedule_next_fire_timestamp_seconds gauge\n");
    rc = prom_rows(db, out, "SELECT value->>'name', (value->>'next_fire') / 1000.0 FROM json_each(?1)"
                            " WHERE value->>'next_fire' >= 0", scheds.p,
                   "tocsin_schedule_next_fire_timestamp_seconds", s, 1);
done:
    sb_free(&stats);
    sb_free(&streams);
    sb_free(&scheds);
    return rc;
}
