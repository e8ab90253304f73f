/*
 * The SQL surface (docs/sql.md) and the loadable extension's entry point.
 * Each SQL function checks its arguments, calls the C API and turns the
 * result into SQL values (JSON text for rows). Functions are registered
 * SQLITE_DIRECTONLY: a hostile schema cannot call them from a trigger or view.
 */
#include "internal.h"

#include <stdio.h>

#ifdef TOCSIN_EXTENSION
SQLITE_EXTENSION_INIT1
#endif

/* ---- argument checking ---------------------------------------------------- */

typedef struct fn_ctx {
    sqlite3_context *ctx;
    tocsin_db *db;
    const char *name;
} fn_ctx;

static void fail_msg(fn_ctx *f, int sqlite_code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void fail_msg(fn_ctx *f, int sqlite_code, const char *fmt, ...) {
    char msg[600];
    int n;
    va_list ap;
    n = snprintf(msg, sizeof msg, "%s: ", f->name);
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    sqlite3_result_error(f->ctx, msg, -1);
    sqlite3_result_error_code(f->ctx, sqlite_code);
}

/* Reports the handle's last failure. */
static void fail(fn_ctx *f, int rc) {
    int code = SQLITE_ERROR;
    switch (rc) {
    case TOCSIN_BUSY: code = SQLITE_BUSY; break;
    case TOCSIN_TOOBIG: code = SQLITE_TOOBIG; break;
    case TOCSIN_NOMEM: sqlite3_result_error_nomem(f->ctx); return;
    case TOCSIN_CORRUPT: code = SQLITE_CORRUPT; break;
    case TOCSIN_READONLY: code = SQLITE_READONLY; break;
    default: break;
    }
    fail_msg(f, code, "%s", tocsin_errmsg(f->db));
}

/* A required text argument. */
static int arg_text(fn_ctx *f, sqlite3_value **argv, int i, const char *what, const char **out) {
    int t = sqlite3_value_type(argv[i]);
    if (t == SQLITE_NULL) {
        fail_msg(f, SQLITE_MISMATCH, "%s must not be NULL", what);
        return 0;
    }
    if (t == SQLITE_BLOB) {
        fail_msg(f, SQLITE_MISMATCH, "%s must be text, not a blob", what);
        return 0;
    }
    *out = (const char *)sqlite3_value_text(argv[i]);
    if (!*out) {
        sqlite3_result_error_nomem(f->ctx);
        return 0;
    }
    return 1;
}

/* An optional text argument: absent or NULL gives NULL. */
static int arg_text_opt(fn_ctx *f, int argc, sqlite3_value **argv, int i, const char *what,
                        const char **out) {
    *out = NULL;
    if (i >= argc || sqlite3_value_type(argv[i]) == SQLITE_NULL) return 1;
    return arg_text(f, argv, i, what, out);
}

/* A required integer argument (an integral real is accepted). */
static int arg_int(fn_ctx *f, sqlite3_value **argv, int i, const char *what, int64_t *out) {
    int t = sqlite3_value_type(argv[i]);
    if (t == SQLITE_INTEGER) {
        *out = sqlite3_value_int64(argv[i]);
        return 1;
    }
    if (t == SQLITE_FLOAT) {
        double d = sqlite3_value_double(argv[i]);
        if (d == (double)(int64_t)d) {
            *out = (int64_t)d;
            return 1;
        }
    }
    fail_msg(f, SQLITE_MISMATCH, "%s must be an integer", what);
    return 0;
}

static int arg_int_opt(fn_ctx *f, int argc, sqlite3_value **argv, int i, const char *what,
                       int64_t dflt, int64_t *out) {
    *out = dflt;
    if (i >= argc || sqlite3_value_type(argv[i]) == SQLITE_NULL) return 1;
    return arg_int(f, argv, i, what, out);
}

static int arg_count(fn_ctx *f, sqlite3_value **argv, int i, const char *what, size_t *out) {
    int64_t v;
    if (!arg_int(f, argv, i, what, &v)) return 0;
    if (v < 1) {
        fail_msg(f, SQLITE_RANGE, "%s must be >= 1", what);
        return 0;
    }
    *out = (size_t)v;
    return 1;
}

static void result_json(fn_ctx *f, char *json) {
    if (!json) {
        sqlite3_result_error_nomem(f->ctx);
        return;
    }
    sqlite3_result_text(f->ctx, json, -1, sqlite3_free);
    sqlite3_result_subtype(f->ctx, 'J'); /* JSON subtype, as json() gives */
}

/* ---- options objects ------------------------------------------------------ */

typedef struct opt_spec {
    const char *key;
    int kind; /* 'i' integer, 't' text, 'b' boolean, 'o' JSON object, 'j' any JSON value */
    int set;
    int64_t i;
    char *t; /* owned (sqlite3_free) */
} opt_spec;

static const char SQL_JSON_EACH[] =
    "SELECT json_type(?1), key, type, atom, value,"
    " CASE WHEN type IN ('object', 'array') THEN value WHEN type = 'text' THEN json_quote(value)"
    " WHEN type IN ('true', 'false', 'null') THEN type ELSE CAST(value AS TEXT) END"
    " FROM json_each(?1)";

/* Parses an options JSON object against `specs` (terminated by key NULL).
 * Unknown keys and ill-typed values are errors naming the key. */
static int parse_opts(fn_ctx *f, const char *json, opt_spec *specs) {
    sqlite3_stmt *st;
    int rc, ok = 1;
    if (!json) return 1;
    if (!(st = tc_stmt(f->db, SQL_JSON_EACH))) {
        fail(f, TC_ERRCODE);
        return 0;
    }
    sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
    while (ok && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *top = (const char *)sqlite3_column_text(st, 0);
        const char *key = (const char *)sqlite3_column_text(st, 1);
        const char *type = (const char *)sqlite3_column_text(st, 2);
        opt_spec *s;
        if (!top || strcmp(top, "object") != 0) {
            fail_msg(f, SQLITE_MISMATCH, "options must be a JSON object");
            ok = 0;
            break;
        }
        for (s = specs; s->key && (!key || strcmp(s->key, key) != 0); s++) {
        }
        if (!s->key) {
            fail_msg(f, SQLITE_ERROR, "unknown option \"%s\"", key ? key : "");
            ok = 0;
        } else if (strcmp(type, "null") == 0) {
            continue;
        } else if (s->kind == 'i') {
            double d = sqlite3_column_double(st, 3);
            if (strcmp(type, "integer") == 0) {
                s->i = sqlite3_column_int64(st, 3);
            } else if (strcmp(type, "real") == 0 && d == (double)(int64_t)d) {
                s->i = (int64_t)d;
            } else {
                fail_msg(f, SQLITE_MISMATCH, "option \"%s\" must be an integer", key);
                ok = 0;
            }
        } else if (s->kind == 'b') {
            if (strcmp(type, "true") == 0 || strcmp(type, "false") == 0)
                s->i = type[0] == 't';
            else {
                fail_msg(f, SQLITE_MISMATCH, "option \"%s\" must be true or false", key);
                ok = 0;
            }
        } else if (s->kind == 'j') {
            sqlite3_free(s->t);
            s->t = tc_strdup((const char *)sqlite3_column_text(st, 5));
            if (!s->t) {
                sqlite3_result_error_nomem(f->ctx);
                ok = 0;
            }
        } else if (s->kind == 't' || s->kind == 'o') {
            int want_obj = s->kind == 'o';
            if (want_obj ? strcmp(type, "object") != 0 : strcmp(type, "text") != 0) {
                fail_msg(f, SQLITE_MISMATCH, "option \"%s\" must be %s", key,
                         want_obj ? "a JSON object" : "a string");
                ok = 0;
            } else {
                sqlite3_free(s->t);
                s->t = tc_strdup((const char *)sqlite3_column_text(st, want_obj ? 4 : 3));
                if (!s->t) {
                    sqlite3_result_error_nomem(f->ctx);
                    ok = 0;
                }
            }
        }
        if (ok) s->set = 1;
    }
    if (ok && rc != SQLITE_DONE) {
        if (rc == SQLITE_ERROR && sqlite3_errcode(f->db->conn) == SQLITE_ERROR)
            fail_msg(f, SQLITE_ERROR, "options are not valid JSON");
        else
            fail_msg(f, SQLITE_ERROR, "options: %s", sqlite3_errmsg(f->db->conn));
        ok = 0;
    }
    sqlite3_reset(st);
    return ok;
}

static void free_opts(opt_spec *specs) {
    for (; specs->key; specs++) sqlite3_free(specs->t);
}

/* ---- functions ------------------------------------------------------------ */

typedef void (*sql_fn)(sqlite3_context *, int, sqlite3_value **);

/* What each registered function carries: its handle and implementation. */
typedef struct ext_fn {
    tocsin_db *db;
    sql_fn fn;
} ext_fn;

#define SETUP(argname)                      \
    fn_ctx F, *f = &F;                      \
    F.ctx = ctx;                            \
    F.db = ((ext_fn *)sqlite3_user_data(ctx))->db; \
    F.name = argname;                       \
    (void)argc;                             \
    (void)argv

static void fn_bootstrap(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    int v = 0, rc;
    SETUP("tocsin_bootstrap");
    if ((rc = tocsin_bootstrap(f->db, &v)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(ctx, v);
}

static void fn_version(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    SETUP("tocsin_version");
    (void)f;
    sqlite3_result_text(ctx, tocsin_version(), -1, SQLITE_STATIC);
}

static int64_t fixed_clock(void *p) { return *(int64_t *)p; }

static void fn_clock(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    int64_t ms;
    SETUP("tocsin_clock");
    if (argc == 1) {
        if (sqlite3_value_type(argv[0]) == SQLITE_NULL) {
            tocsin_set_clock(f->db, NULL, NULL);
        } else {
            if (!arg_int(f, argv, 0, "ms", &ms)) return;
            if (ms < 0) return fail_msg(f, SQLITE_RANGE, "ms must be >= 0");
            f->db->sql_clock = ms;
            tocsin_set_clock(f->db, fixed_clock, &f->db->sql_clock);
        }
    }
    sqlite3_result_int64(ctx, tocsin_now(f->db));
}

static void fn_enqueue(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    opt_spec o[] = {{"priority", 'i', 0, 0, NULL},   {"delay_ms", 'i', 0, 0, NULL},
                    {"run_at_ms", 'i', 0, 0, NULL},  {"max_attempts", 'i', 0, 0, NULL},
                    {"expires_ms", 'i', 0, 0, NULL}, {"unique_key", 't', 0, 0, NULL},
                    {"meta", 'o', 0, 0, NULL},       {NULL, 0, 0, 0, NULL}};
    tocsin_enqueue_opts eo = TOCSIN_ENQUEUE_OPTS_INIT;
    const char *queue, *payload, *opts;
    int64_t id;
    int rc;
    SETUP("tocsin_enqueue");
    if (!arg_text(f, argv, 0, "queue", &queue) || !arg_text(f, argv, 1, "payload", &payload) ||
        !arg_text_opt(f, argc, argv, 2, "options", &opts))
        return;
    if (!parse_opts(f, opts, o)) return free_opts(o);
    if (o[3].set && o[3].i < 1) {
        free_opts(o);
        return fail_msg(f, SQLITE_RANGE, "option \"max_attempts\" must be >= 1");
    }
    if (o[3].i > 1000000) {
        free_opts(o);
        return fail_msg(f, SQLITE_RANGE, "option \"max_attempts\" must be <= 1000000");
    }
    eo.priority = o[0].i;
    eo.delay_ms = o[1].i;
    eo.run_at_ms = o[2].i;
    eo.max_attempts = (int)o[3].i;
    eo.expires_ms = o[4].i;
    eo.unique_key = o[5].t;
    eo.meta = o[6].t;
    rc = tocsin_queue_enqueue(f->db, &id, queue, payload, &eo);
    free_opts(o);
    if (rc != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(ctx, id);
}

static void fn_claim(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *queue, *worker;
    size_t n, got;
    int64_t vis;
    tocsin_job *jobs;
    int rc;
    SETUP("tocsin_claim");
    if (!arg_text(f, argv, 0, "queue", &queue) || !arg_text(f, argv, 1, "worker_id", &worker) ||
        !arg_count(f, argv, 2, "n", &n) || !arg_int(f, argv, 3, "visibility_ms", &vis))
        return;
    rc = tocsin_queue_claim(f->db, &jobs, &got, queue, worker, n, vis);
    if (rc != TOCSIN_OK) return fail(f, rc);
    result_json(f, tc_jobs_json(jobs, got));
    tocsin_jobs_free(jobs, got);
}

static void fn_ack(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    int64_t id, token;
    int ok, rc;
    SETUP("tocsin_ack");
    if (!arg_int(f, argv, 0, "job_id", &id) || !arg_int(f, argv, 1, "token", &token)) return;
    if ((rc = tocsin_job_ack(f->db, &ok, id, token)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(ctx, ok);
}

static void fn_retry(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    int64_t id, token, delay;
    const char *error;
    int ok, rc;
    SETUP("tocsin_retry");
    if (!arg_int(f, argv, 0, "job_id", &id) || !arg_int(f, argv, 1, "token", &token) ||
        !arg_int_opt(f, argc, argv, 2, "delay_ms", -1, &delay) ||
        !arg_text_opt(f, argc, argv, 3, "error", &error))
        return;
    if (argc > 2 && sqlite3_value_type(argv[2]) != SQLITE_NULL && delay < 0)
        return fail_msg(f, SQLITE_RANGE, "delay_ms must be >= 0 (NULL: exponential backoff)");
    if ((rc = tocsin_job_retry(f->db, &ok, id, token, delay, error)) != TOCSIN_OK)
        return fail(f, rc);
    sqlite3_result_int(ctx, ok);
}

static void fn_fail(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    int64_t id, token;
    const char *error;
    int ok, rc;
    SETUP("tocsin_fail");
    if (!arg_int(f, argv, 0, "job_id", &id) || !arg_int(f, argv, 1, "token", &token) ||
        !arg_text_opt(f, argc, argv, 2, "error", &error))
        return;
    if ((rc = tocsin_job_fail(f->db, &ok, id, token, error)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(ctx, ok);
}

static void fn_heartbeat(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    int64_t id, token, extend;
    int ok, rc;
    SETUP("tocsin_heartbeat");
    if (!arg_int(f, argv, 0, "job_id", &id) || !arg_int(f, argv, 1, "token", &token) ||
        !arg_int(f, argv, 2, "extend_ms", &extend))
        return;
    if ((rc = tocsin_job_heartbeat(f->db, &ok, id, token, extend)) != TOCSIN_OK)
        return fail(f, rc);
    sqlite3_result_int(ctx, ok);
}

static void fn_cancel(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    int64_t id;
    int ok, rc;
    SETUP("tocsin_cancel");
    if (!arg_int(f, argv, 0, "job_id", &id)) return;
    if ((rc = tocsin_job_cancel(f->db, &ok, id)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(ctx, ok);
}

static void fn_job(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    int64_t id;
    tocsin_job *job;
    int rc;
    SETUP("tocsin_job");
    if (!arg_int(f, argv, 0, "job_id", &id)) return;
    if ((rc = tocsin_job_get(f->db, &job, id)) != TOCSIN_OK) return fail(f, rc);
    if (!job) return sqlite3_result_null(ctx);
    result_json(f, tc_job_json(job));
    tocsin_jobs_free(job, 1);
}

static void pause_or_resume(sqlite3_context *ctx, int argc, sqlite3_value **argv, int pause) {
    const char *queue;
    int rc;
    SETUP(pause ? "tocsin_pause" : "tocsin_resume");
    if (!arg_text(f, argv, 0, "queue", &queue)) return;
    rc = pause ? tocsin_queue_pause(f->db, queue) : tocsin_queue_resume(f->db, queue);
    if (rc != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(ctx, 1);
}
static void fn_pause(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    pause_or_resume(ctx, argc, argv, 1);
}
static void fn_resume(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    pause_or_resume(ctx, argc, argv, 0);
}

static void fn_stats(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *queue;
    char *json;
    int rc;
    SETUP("tocsin_stats");
    if (!arg_text_opt(f, argc, argv, 0, "queue", &queue)) return;
    if ((rc = tocsin_queue_stats(f->db, &json, queue)) != TOCSIN_OK) return fail(f, rc);
    result_json(f, json);
}

static void fn_next_deadline(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *queues[16];
    int64_t ms;
    int i, rc;
    SETUP("tocsin_next_deadline");
    if (argc > 16) return fail_msg(f, SQLITE_RANGE, "at most 16 queues");
    for (i = 0; i < argc; i++)
        if (!arg_text(f, argv, i, "queue", &queues[i])) return;
    if ((rc = tocsin_queue_next_deadline(f->db, &ms, queues, (size_t)argc)) != TOCSIN_OK)
        return fail(f, rc);
    if (ms < 0) return sqlite3_result_null(ctx);
    sqlite3_result_int64(ctx, ms);
}

static void fn_dead_list(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *queue;
    int64_t after, limit;
    tocsin_job *jobs;
    size_t n;
    int rc;
    SETUP("tocsin_dead_list");
    if (!arg_text_opt(f, argc, argv, 0, "queue", &queue) ||
        !arg_int_opt(f, argc, argv, 1, "after_id", 0, &after) ||
        !arg_int_opt(f, argc, argv, 2, "limit", 100, &limit))
        return;
    if (limit < 1) return fail_msg(f, SQLITE_RANGE, "limit must be >= 1");
    rc = tocsin_dead_list(f->db, &jobs, &n, queue, after, (size_t)limit);
    if (rc != TOCSIN_OK) return fail(f, rc);
    result_json(f, tc_jobs_json(jobs, n));
    tocsin_jobs_free(jobs, n);
}

static void fn_dead_requeue(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    int64_t id;
    int ok, rc;
    SETUP("tocsin_dead_requeue");
    if (!arg_int(f, argv, 0, "job_id", &id)) return;
    if ((rc = tocsin_dead_requeue(f->db, &ok, id)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(ctx, ok);
}

static void fn_dead_purge(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *queue;
    int64_t before, n;
    int rc;
    SETUP("tocsin_dead_purge");
    if (!arg_text_opt(f, argc, argv, 0, "queue", &queue) ||
        !arg_int_opt(f, argc, argv, 1, "before_ms", 0, &before))
        return;
    if ((rc = tocsin_dead_purge(f->db, &n, queue, before)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(ctx, n);
}

static void fn_notify(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *channel, *payload, *meta;
    int64_t id;
    int rc;
    SETUP("tocsin_notify");
    if (!arg_text(f, argv, 0, "channel", &channel) || !arg_text(f, argv, 1, "payload", &payload) ||
        !arg_text_opt(f, argc, argv, 2, "meta", &meta))
        return;
    if ((rc = tocsin_notify(f->db, &id, channel, payload, meta)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(ctx, id);
}

static void fn_notify_read(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *channel;
    int64_t after;
    size_t limit, n;
    tocsin_message *m;
    int rc;
    SETUP("tocsin_notify_read");
    if (!arg_text(f, argv, 0, "channel", &channel) || !arg_int(f, argv, 1, "after_id", &after) ||
        !arg_count(f, argv, 2, "limit", &limit))
        return;
    if ((rc = tocsin_notify_read(f->db, &m, &n, channel, after, limit)) != TOCSIN_OK)
        return fail(f, rc);
    result_json(f, tc_messages_json(m, n, 0));
    tocsin_messages_free(m, n);
}

static void fn_notify_prune(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    int64_t age, keep, n;
    int rc;
    SETUP("tocsin_notify_prune");
    if (!arg_int_opt(f, argc, argv, 0, "max_age_ms", 0, &age) ||
        !arg_int_opt(f, argc, argv, 1, "max_keep", 0, &keep))
        return;
    if ((rc = tocsin_notify_prune(f->db, &n, age, keep)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(ctx, n);
}

static void fn_notify_autotrim(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    int64_t age, keep, one_in;
    int rc;
    SETUP("tocsin_notify_autotrim");
    if (!arg_int_opt(f, argc, argv, 0, "max_age_ms", 0, &age) ||
        !arg_int_opt(f, argc, argv, 1, "max_keep", 0, &keep) ||
        !arg_int_opt(f, argc, argv, 2, "one_in", 100, &one_in))
        return;
    if ((rc = tocsin_notify_set_autotrim(f->db, age, keep, one_in)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(ctx, one_in > 0);
}

static void fn_stream_publish(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *topic, *payload, *key, *meta;
    int64_t off;
    int rc;
    SETUP("tocsin_stream_publish");
    if (!arg_text(f, argv, 0, "topic", &topic) || !arg_text(f, argv, 1, "payload", &payload) ||
        !arg_text_opt(f, argc, argv, 2, "key", &key) ||
        !arg_text_opt(f, argc, argv, 3, "meta", &meta))
        return;
    if ((rc = tocsin_stream_publish(f->db, &off, topic, payload, key, meta)) != TOCSIN_OK)
        return fail(f, rc);
    sqlite3_result_int64(ctx, off);
}

static void fn_stream_read(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *topic;
    int64_t after;
    size_t limit, n;
    tocsin_message *m;
    int rc;
    SETUP("tocsin_stream_read");
    if (!arg_text(f, argv, 0, "topic", &topic) || !arg_int(f, argv, 1, "after_offset", &after) ||
        !arg_count(f, argv, 2, "limit", &limit))
        return;
    if ((rc = tocsin_stream_read(f->db, &m, &n, topic, after, limit)) != TOCSIN_OK)
        return fail(f, rc);
    result_json(f, tc_messages_json(m, n, 1));
    tocsin_messages_free(m, n);
}

static void fn_stream_save_offset(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *consumer, *topic;
    int64_t off, stored;
    int rc;
    SETUP("tocsin_stream_save_offset");
    if (!arg_text(f, argv, 0, "consumer", &consumer) || !arg_text(f, argv, 1, "topic", &topic) ||
        !arg_int(f, argv, 2, "offset", &off))
        return;
    if ((rc = tocsin_stream_save_offset(f->db, &stored, consumer, topic, off)) != TOCSIN_OK)
        return fail(f, rc);
    sqlite3_result_int64(ctx, stored);
}

static void fn_stream_offset(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *consumer, *topic;
    int64_t off;
    int rc;
    SETUP("tocsin_stream_offset");
    if (!arg_text(f, argv, 0, "consumer", &consumer) || !arg_text(f, argv, 1, "topic", &topic))
        return;
    if ((rc = tocsin_stream_offset(f->db, &off, consumer, topic)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(ctx, off);
}

static void fn_stream_trim(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    opt_spec o[] = {{"max_age_ms", 'i', 0, 0, NULL},
                    {"max_count", 'i', 0, 0, NULL},
                    {"below_consumers", 'b', 0, 0, NULL},
                    {NULL, 0, 0, 0, NULL}};
    tocsin_trim_opts to = TOCSIN_TRIM_OPTS_INIT;
    const char *topic, *opts;
    int64_t n;
    int rc;
    SETUP("tocsin_stream_trim");
    if (!arg_text(f, argv, 0, "topic", &topic) || !arg_text(f, argv, 1, "options", &opts)) return;
    if (!parse_opts(f, opts, o)) return free_opts(o);
    to.max_age_ms = o[0].i;
    to.max_count = o[1].i;
    to.below_consumers = (int)o[2].i;
    free_opts(o);
    if ((rc = tocsin_stream_trim(f->db, &n, topic, &to)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(ctx, n);
}

/* ---- coordination: results, locks, rate limits, cron, scheduler ------------ */

static void fn_result_save(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *value;
    int64_t id, ttl;
    int rc;
    SETUP("tocsin_result_save");
    if (!arg_int(f, argv, 0, "job_id", &id) || !arg_text(f, argv, 1, "value", &value) ||
        !arg_int_opt(f, argc, argv, 2, "ttl_ms", 0, &ttl))
        return;
    if ((rc = tocsin_result_save(f->db, id, value, ttl)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(ctx, 1);
}

static void fn_complete(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *value;
    int64_t id, token, ttl;
    int ok = 0, rc;
    SETUP("tocsin_complete");
    if (!arg_int(f, argv, 0, "job_id", &id) || !arg_int(f, argv, 1, "token", &token) ||
        !arg_text(f, argv, 2, "value", &value) || !arg_int_opt(f, argc, argv, 3, "ttl_ms", 0, &ttl))
        return;
    if ((rc = tocsin_job_complete(f->db, &ok, id, token, value, ttl)) != TOCSIN_OK)
        return fail(f, rc);
    sqlite3_result_int(ctx, ok);
}

static void fn_fail_task(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *type, *message;
    int64_t id, token, ttl;
    int ok = 0, rc;
    SETUP("tocsin_fail_task");
    if (!arg_int(f, argv, 0, "job_id", &id) || !arg_int(f, argv, 1, "token", &token) ||
        !arg_text(f, argv, 2, "type", &type) ||
        !arg_text_opt(f, argc, argv, 3, "message", &message) ||
        !arg_int_opt(f, argc, argv, 4, "ttl_ms", 0, &ttl))
        return;
    if ((rc = tocsin_job_fail_task(f->db, &ok, id, token, type, message, ttl)) != TOCSIN_OK)
        return fail(f, rc);
    sqlite3_result_int(ctx, ok);
}

static void fn_result_save_error(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *type, *message;
    int64_t id, ttl;
    int rc;
    SETUP("tocsin_result_save_error");
    if (!arg_int(f, argv, 0, "job_id", &id) || !arg_text(f, argv, 1, "type", &type) ||
        !arg_text_opt(f, argc, argv, 2, "message", &message) ||
        !arg_int_opt(f, argc, argv, 3, "ttl_ms", 0, &ttl))
        return;
    if ((rc = tocsin_result_save_error(f->db, id, type, message, ttl)) != TOCSIN_OK)
        return fail(f, rc);
    sqlite3_result_int(ctx, 1);
}

static void fn_result_get(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    tocsin_result *r;
    int64_t id;
    int rc;
    SETUP("tocsin_result_get");
    if (!arg_int(f, argv, 0, "job_id", &id)) return;
    if ((rc = tocsin_result_get(f->db, &r, id)) != TOCSIN_OK) return fail(f, rc);
    if (!r) return sqlite3_result_null(ctx);
    result_json(f, tc_result_json(r));
    tocsin_result_free(r);
}

static void fn_result_delete(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    int64_t id;
    int ok, rc;
    SETUP("tocsin_result_delete");
    if (!arg_int(f, argv, 0, "job_id", &id)) return;
    if ((rc = tocsin_result_delete(f->db, &ok, id)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(ctx, ok);
}

static void fn_result_sweep(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    int64_t n;
    int rc;
    SETUP("tocsin_result_sweep");
    if ((rc = tocsin_result_sweep(f->db, &n)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(ctx, n);
}

static void fn_lock_acquire(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *name, *owner;
    int64_t ttl, token;
    int rc;
    SETUP("tocsin_lock_acquire");
    if (!arg_text(f, argv, 0, "name", &name) || !arg_text(f, argv, 1, "owner", &owner) ||
        !arg_int(f, argv, 2, "ttl_ms", &ttl))
        return;
    if ((rc = tocsin_lock_acquire(f->db, &token, NULL, name, owner, ttl)) != TOCSIN_OK)
        return fail(f, rc);
    if (!token) return sqlite3_result_null(ctx);
    sqlite3_result_int64(ctx, token);
}

static void fn_lock_renew(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *name, *owner;
    int64_t token, ttl;
    int ok, rc;
    SETUP("tocsin_lock_renew");
    if (!arg_text(f, argv, 0, "name", &name) || !arg_text(f, argv, 1, "owner", &owner) ||
        !arg_int(f, argv, 2, "token", &token) || !arg_int(f, argv, 3, "ttl_ms", &ttl))
        return;
    if ((rc = tocsin_lock_renew(f->db, &ok, name, owner, token, ttl)) != TOCSIN_OK)
        return fail(f, rc);
    sqlite3_result_int(ctx, ok);
}

static void fn_lock_release(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *name, *owner;
    int64_t token;
    int ok, rc;
    SETUP("tocsin_lock_release");
    if (!arg_text(f, argv, 0, "name", &name) || !arg_text(f, argv, 1, "owner", &owner) ||
        !arg_int(f, argv, 2, "token", &token))
        return;
    if ((rc = tocsin_lock_release(f->db, &ok, name, owner, token)) != TOCSIN_OK)
        return fail(f, rc);
    sqlite3_result_int(ctx, ok);
}

static void fn_lock_holder(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *name;
    char *owner;
    int64_t token, until;
    tc_buf b = {0};
    int first = 1, rc;
    SETUP("tocsin_lock_holder");
    if (!arg_text(f, argv, 0, "name", &name)) return;
    if ((rc = tocsin_lock_holder(f->db, &owner, &token, &until, name)) != TOCSIN_OK)
        return fail(f, rc);
    tc_buf_puts(&b, "{");
    tc_buf_key(&b, "name", &first);
    tc_buf_jstr(&b, name);
    tc_buf_key(&b, "owner", &first);
    tc_buf_jstr(&b, owner);
    tc_buf_key(&b, "token", &first);
    tc_buf_i64(&b, token);
    tc_buf_key(&b, "expires_at", &first);
    if (owner) tc_buf_i64(&b, until); else tc_buf_puts(&b, "null");
    tc_buf_puts(&b, "}");
    tocsin_free(owner);
    result_json(f, tc_buf_take(&b));
}

static void fn_ratelimit_try(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *name;
    int64_t limit, per, retry, remaining;
    int allowed, rc;
    char buf[128];
    SETUP("tocsin_ratelimit_try");
    if (!arg_text(f, argv, 0, "name", &name) || !arg_int(f, argv, 1, "limit", &limit) ||
        !arg_int(f, argv, 2, "per_ms", &per))
        return;
    rc = tocsin_ratelimit_try(f->db, &allowed, &retry, &remaining, name, limit, per);
    if (rc != TOCSIN_OK) return fail(f, rc);
    snprintf(buf, sizeof buf, "{\"allowed\":%s,\"retry_after_ms\":%lld,\"remaining\":%lld}",
             allowed ? "true" : "false", (long long)retry, (long long)remaining);
    result_json(f, tc_strdup(buf));
}

static void fn_ratelimit_sweep(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    int64_t n;
    int rc;
    SETUP("tocsin_ratelimit_sweep");
    if ((rc = tocsin_ratelimit_sweep(f->db, &n)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(ctx, n);
}

static void fn_ratelimit_reset(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *name;
    int64_t n;
    int rc;
    SETUP("tocsin_ratelimit_reset");
    if (!arg_text(f, argv, 0, "name", &name)) return;
    if ((rc = tocsin_ratelimit_reset(f->db, &n, name)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(ctx, n);
}

/* 'utc' (default) or 'local' -> 0 / 1; -1 (error reported) otherwise */
static int arg_zone(fn_ctx *f, int argc, sqlite3_value **argv, int i) {
    const char *zone;
    if (!arg_text_opt(f, argc, argv, i, "zone", &zone)) return -1;
    if (!zone || sqlite3_stricmp(zone, "utc") == 0) return 0;
    if (sqlite3_stricmp(zone, "local") == 0) return 1;
    fail_msg(f, SQLITE_ERROR, "zone must be 'utc' or 'local', not '%s'", zone);
    return -1;
}

static void fn_cron_next(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *expr;
    int64_t after, next;
    tocsin_cron *c = NULL;
    char err[256];
    int local, rc;
    SETUP("tocsin_cron_next");
    if (!arg_text(f, argv, 0, "cron", &expr) || !arg_int(f, argv, 1, "after_ms", &after)) return;
    if ((local = arg_zone(f, argc, argv, 2)) < 0) return;
    if (after < 0 || after > 253402300799999LL)
        return fail_msg(f, SQLITE_RANGE, "after_ms must be between 0 and 253402300799999 (year 9999)");
    if ((rc = tocsin_cron_parse(&c, expr, err, sizeof err)) != TOCSIN_OK) {
        if (rc == TOCSIN_NOMEM) return sqlite3_result_error_nomem(ctx);
        return fail_msg(f, SQLITE_ERROR, "%s", err);
    }
    rc = tocsin_cron_next(&next, c, after, local);
    tocsin_cron_free(c);
    if (rc == TOCSIN_NOTFOUND) return sqlite3_result_null(ctx);
    sqlite3_result_int64(ctx, next);
}

/* The schedule options of an options object (o: the specs below). */
#define SCHEDULE_OPT_SPECS                                                         \
    {"priority", 'i', 0, 0, NULL}, {"max_attempts", 'i', 0, 0, NULL},              \
        {"job_expires_ms", 'i', 0, 0, NULL}, {"catch_up", 't', 0, 0, NULL},       \
        {"max_catch_up", 'i', 0, 0, NULL}, {"local_time", 'b', 0, 0, NULL},       \
        {"meta", 'o', 0, 0, NULL}
static int schedule_opts_from(fn_ctx *f, const opt_spec *o, tocsin_schedule_opts *so) {
    if (o[1].set && (o[1].i < 1 || o[1].i > 1000000)) {
        fail_msg(f, SQLITE_RANGE, "option \"max_attempts\" must be between 1 and 1000000");
        return 0;
    }
    if (o[4].set && (o[4].i < 1 || o[4].i > 100000)) {
        fail_msg(f, SQLITE_RANGE, "option \"max_catch_up\" must be between 1 and 100000");
        return 0;
    }
    if (o[2].set && o[2].i < 0) {
        fail_msg(f, SQLITE_RANGE, "option \"job_expires_ms\" must be >= 0");
        return 0;
    }
    if (o[3].set && strcmp(o[3].t, "once") != 0 && strcmp(o[3].t, "all") != 0) {
        fail_msg(f, SQLITE_ERROR, "option \"catch_up\" must be \"once\" or \"all\"");
        return 0;
    }
    if (o[0].set) so->priority = o[0].i;
    if (o[1].set) so->max_attempts = (int)o[1].i;
    if (o[2].set) so->job_expires_ms = o[2].i;
    if (o[3].set) so->catch_up = strcmp(o[3].t, "all") == 0 ? TOCSIN_CATCHUP_ALL : TOCSIN_CATCHUP_ONCE;
    if (o[4].set) so->max_catch_up = (int)o[4].i;
    if (o[5].set) so->local_time = (int)o[5].i;
    if (o[6].set) so->meta = o[6].t;
    return 1;
}

static void result_next_fire(sqlite3_context *ctx, int64_t next) {
    if (next < 0)
        sqlite3_result_null(ctx);
    else
        sqlite3_result_int64(ctx, next);
}

static void fn_schedule_set(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    opt_spec o[] = {SCHEDULE_OPT_SPECS, {NULL, 0, 0, 0, NULL}};
    tocsin_schedule_opts so = TOCSIN_SCHEDULE_OPTS_INIT;
    const char *name, *cron, *queue, *payload, *opts;
    int64_t next;
    int rc;
    SETUP("tocsin_schedule_set");
    if (!arg_text(f, argv, 0, "name", &name) || !arg_text(f, argv, 1, "cron", &cron) ||
        !arg_text(f, argv, 2, "queue", &queue) || !arg_text(f, argv, 3, "payload", &payload) ||
        !arg_text_opt(f, argc, argv, 4, "options", &opts))
        return;
    if (!parse_opts(f, opts, o) || !schedule_opts_from(f, o, &so)) return free_opts(o);
    rc = tocsin_schedule_set(f->db, &next, name, cron, queue, payload, &so);
    free_opts(o);
    if (rc != TOCSIN_OK) return fail(f, rc);
    result_next_fire(ctx, next);
}

static void fn_schedule_update(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    opt_spec o[] = {SCHEDULE_OPT_SPECS, {"cron", 't', 0, 0, NULL}, {"queue", 't', 0, 0, NULL},
                    {"payload", 'j', 0, 0, NULL}, {NULL, 0, 0, 0, NULL}};
    tocsin_schedule_opts so = TOCSIN_SCHEDULE_OPTS_INIT;
    tocsin_schedule *cur = NULL;
    const char *name, *changes;
    int64_t next;
    int rc, any_opt = 0, i;
    SETUP("tocsin_schedule_update");
    if (!arg_text(f, argv, 0, "name", &name) || !arg_text(f, argv, 1, "changes", &changes)) return;
    if (!parse_opts(f, changes, o)) return free_opts(o);
    for (i = 0; i < 7; i++) any_opt |= o[i].set;
    /* options not named keep their stored values */
    if (any_opt) {
        if ((rc = tocsin_schedule_get(f->db, &cur, name)) != TOCSIN_OK) {
            free_opts(o);
            return fail(f, rc);
        }
        if (!cur) {
            free_opts(o);
            return fail_msg(f, SQLITE_ERROR, "no schedule named \"%s\"", name);
        }
        tc_schedule_opts_of(cur, &so);
        if (!schedule_opts_from(f, o, &so)) {
            tocsin_schedules_free(cur, 1);
            return free_opts(o);
        }
    }
    rc = tocsin_schedule_update(f->db, &next, name, o[7].t, o[8].t, o[9].t, any_opt ? &so : NULL);
    tocsin_schedules_free(cur, cur ? 1 : 0);
    free_opts(o);
    if (rc != TOCSIN_OK) return fail(f, rc);
    result_next_fire(ctx, next);
}

static void schedule_pause_or_resume(sqlite3_context *ctx, int argc, sqlite3_value **argv,
                                     int pause) {
    const char *name;
    int rc;
    SETUP(pause ? "tocsin_schedule_pause" : "tocsin_schedule_resume");
    if (!arg_text(f, argv, 0, "name", &name)) return;
    rc = pause ? tocsin_schedule_pause(f->db, name) : tocsin_schedule_resume(f->db, name);
    if (rc != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(ctx, 1);
}
static void fn_schedule_pause(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    schedule_pause_or_resume(ctx, argc, argv, 1);
}
static void fn_schedule_resume(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    schedule_pause_or_resume(ctx, argc, argv, 0);
}

static void fn_schedule_remove(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *name;
    int ok, rc;
    SETUP("tocsin_schedule_remove");
    if (!arg_text(f, argv, 0, "name", &name)) return;
    if ((rc = tocsin_schedule_remove(f->db, &ok, name)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(ctx, ok);
}

static void fn_schedule_get(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *name;
    tocsin_schedule *s;
    int rc;
    SETUP("tocsin_schedule_get");
    if (!arg_text(f, argv, 0, "name", &name)) return;
    if ((rc = tocsin_schedule_get(f->db, &s, name)) != TOCSIN_OK) return fail(f, rc);
    if (!s) return sqlite3_result_null(ctx);
    result_json(f, tc_schedule_json(s));
    tocsin_schedules_free(s, 1);
}

static void fn_schedule_list(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    tocsin_schedule *s;
    size_t n;
    int rc;
    SETUP("tocsin_schedule_list");
    if ((rc = tocsin_schedule_list(f->db, &s, &n)) != TOCSIN_OK) return fail(f, rc);
    result_json(f, tc_schedules_json(s, n));
    tocsin_schedules_free(s, n);
}

static void fn_scheduler_tick(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    int64_t n;
    int rc;
    SETUP("tocsin_scheduler_tick");
    if ((rc = tocsin_scheduler_tick(f->db, &n)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(ctx, n);
}

static void fn_scheduler_next_fire(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    int64_t ms;
    int rc;
    SETUP("tocsin_scheduler_next_fire");
    if ((rc = tocsin_scheduler_next_fire(f->db, &ms)) != TOCSIN_OK) return fail(f, rc);
    result_next_fire(ctx, ms);
}

static void fn_scheduler_lead(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *owner;
    int64_t ttl, token;
    int leader, rc;
    SETUP("tocsin_scheduler_lead");
    if (!arg_text(f, argv, 0, "owner", &owner) || !arg_int(f, argv, 1, "ttl_ms", &ttl)) return;
    if ((rc = tocsin_scheduler_lead(f->db, &leader, &token, owner, ttl)) != TOCSIN_OK)
        return fail(f, rc);
    if (!leader) return sqlite3_result_null(ctx);
    sqlite3_result_int64(ctx, token);
}

static void fn_scheduler_resign(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    const char *owner;
    int ok, rc;
    SETUP("tocsin_scheduler_resign");
    if (!arg_text(f, argv, 0, "owner", &owner)) return;
    if ((rc = tocsin_scheduler_resign(f->db, &ok, owner)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(ctx, ok);
}

/* ---- registration --------------------------------------------------------- */

static const struct {
    const char *name;
    int min_args, max_args;
    sql_fn fn;
} FUNCTIONS[] = {
    {"tocsin_bootstrap", 0, 0, fn_bootstrap},
    {"tocsin_version", 0, 0, fn_version},
    {"tocsin_clock", 0, 1, fn_clock},
    {"tocsin_enqueue", 2, 3, fn_enqueue},
    {"tocsin_claim", 4, 4, fn_claim},
    {"tocsin_ack", 2, 2, fn_ack},
    {"tocsin_retry", 2, 4, fn_retry},
    {"tocsin_fail", 2, 3, fn_fail},
    {"tocsin_heartbeat", 3, 3, fn_heartbeat},
    {"tocsin_cancel", 1, 1, fn_cancel},
    {"tocsin_job", 1, 1, fn_job},
    {"tocsin_pause", 1, 1, fn_pause},
    {"tocsin_resume", 1, 1, fn_resume},
    {"tocsin_stats", 0, 1, fn_stats},
    {"tocsin_next_deadline", 1, 16, fn_next_deadline},
    {"tocsin_dead_list", 0, 3, fn_dead_list},
    {"tocsin_dead_requeue", 1, 1, fn_dead_requeue},
    {"tocsin_dead_purge", 0, 2, fn_dead_purge},
    {"tocsin_notify", 2, 3, fn_notify},
    {"tocsin_notify_read", 3, 3, fn_notify_read},
    {"tocsin_notify_prune", 0, 2, fn_notify_prune},
    {"tocsin_notify_autotrim", 0, 3, fn_notify_autotrim},
    {"tocsin_stream_publish", 2, 4, fn_stream_publish},
    {"tocsin_stream_read", 3, 3, fn_stream_read},
    {"tocsin_stream_save_offset", 3, 3, fn_stream_save_offset},
    {"tocsin_stream_offset", 2, 2, fn_stream_offset},
    {"tocsin_stream_trim", 2, 2, fn_stream_trim},
    /* coordination */
    {"tocsin_result_save", 2, 3, fn_result_save},
    {"tocsin_result_save_error", 2, 4, fn_result_save_error},
    {"tocsin_complete", 3, 4, fn_complete},
    {"tocsin_fail_task", 3, 5, fn_fail_task},
    {"tocsin_result_get", 1, 1, fn_result_get},
    {"tocsin_result_delete", 1, 1, fn_result_delete},
    {"tocsin_result_sweep", 0, 0, fn_result_sweep},
    {"tocsin_lock_acquire", 3, 3, fn_lock_acquire},
    {"tocsin_lock_renew", 4, 4, fn_lock_renew},
    {"tocsin_lock_release", 3, 3, fn_lock_release},
    {"tocsin_lock_holder", 1, 1, fn_lock_holder},
    {"tocsin_ratelimit_try", 3, 3, fn_ratelimit_try},
    {"tocsin_ratelimit_sweep", 0, 0, fn_ratelimit_sweep},
    {"tocsin_ratelimit_reset", 1, 1, fn_ratelimit_reset},
    {"tocsin_cron_next", 2, 3, fn_cron_next},
    {"tocsin_schedule_set", 4, 5, fn_schedule_set},
    {"tocsin_schedule_update", 2, 2, fn_schedule_update},
    {"tocsin_schedule_pause", 1, 1, fn_schedule_pause},
    {"tocsin_schedule_resume", 1, 1, fn_schedule_resume},
    {"tocsin_schedule_remove", 1, 1, fn_schedule_remove},
    {"tocsin_schedule_get", 1, 1, fn_schedule_get},
    {"tocsin_schedule_list", 0, 0, fn_schedule_list},
    {"tocsin_scheduler_tick", 0, 0, fn_scheduler_tick},
    {"tocsin_scheduler_next_fire", 0, 0, fn_scheduler_next_fire},
    {"tocsin_scheduler_lead", 2, 2, fn_scheduler_lead},
    {"tocsin_scheduler_resign", 1, 1, fn_scheduler_resign},
};

#define N_FUNCTIONS (sizeof FUNCTIONS / sizeof FUNCTIONS[0])

/*
 * On a host's connection the statement cache is emptied after every call: a
 * host that closes with sqlite3_close() (not _v2) fails while any statement
 * of ours is still prepared.
 */
static void dispatch(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    ext_fn *e = sqlite3_user_data(ctx);
    e->fn(ctx, argc, argv);
    if (!e->db->owns_conn) tc_stmt_flush(e->db);
}

/* The extension's wrapper lives as long as any of its functions: each
 * registration holds a reference, each xDestroy drops one. */
static void ext_unref(void *p) {
    tocsin_db *db = ((ext_fn *)p)->db;
    if (--db->ext_refs == 0) tocsin_close(db);
}

static int register_all(tocsin_db *db, int refcounted) {
    ext_fn *fns;
    size_t i;
    int n, rc;
    if (!db->ext_fns && !(db->ext_fns = sqlite3_malloc64(N_FUNCTIONS * sizeof(ext_fn))))
        return SQLITE_NOMEM;
    fns = db->ext_fns;
    for (i = 0; i < N_FUNCTIONS; i++) {
        fns[i].db = db;
        fns[i].fn = FUNCTIONS[i].fn;
        for (n = FUNCTIONS[i].min_args; n <= FUNCTIONS[i].max_args; n++) {
            if (refcounted) db->ext_refs++;
            rc = sqlite3_create_function_v2(db->conn, FUNCTIONS[i].name, n,
                                            SQLITE_UTF8 | SQLITE_DIRECTONLY, &fns[i], dispatch,
                                            NULL, NULL, refcounted ? ext_unref : NULL);
            if (rc != SQLITE_OK) return rc; /* xDestroy already ran on failure */
        }
    }
    return SQLITE_OK;
}

int tocsin_register_sql(tocsin_db *db) {
    int rc;
    if (!db) return TOCSIN_INVALID;
    tc_clear(db);
    rc = register_all(db, 0);
    return rc == SQLITE_OK ? TOCSIN_OK : tc_sqlerr(db, rc, "register SQL functions");
}

#ifdef TOCSIN_EXTENSION
TOCSIN_EXPORT
int sqlite3_tocsin_init(sqlite3 *conn, char **pzErrMsg, const sqlite3_api_routines *pApi) {
    tocsin_db *db = NULL;
    int rc;
    SQLITE_EXTENSION_INIT2(pApi);
    rc = tocsin_wrap(&db, conn, NULL);
    if (rc != TOCSIN_OK) {
        if (pzErrMsg) *pzErrMsg = sqlite3_mprintf("tocsin: %s", tocsin_errmsg(db));
        tocsin_close(db);
        return SQLITE_ERROR;
    }
    db->ext_refs = 1; /* held until registration is done */
    rc = register_all(db, 1);
    if (--db->ext_refs == 0) tocsin_close(db);
    if (rc != SQLITE_OK && pzErrMsg)
        *pzErrMsg = sqlite3_mprintf("tocsin: cannot register SQL functions: %s",
                                    sqlite3_errstr(rc));
    return rc;
}
#endif
