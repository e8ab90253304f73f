/* The C agent of the interop matrix (protocol: interop-tests/README.md), built
 * against the installed library through pkg-config. JSON values travel as the
 * core's own JSON text: the agent never parses JSON, it passes it through. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tocsin.h>

#define MAXF 8

static tocsin_db *db;
static tocsin_stream_sub *sub;
static tocsin_listener *listener;
static tocsin_worker *worker;
static pthread_t worker_thread;
static volatile int worker_stopping;
static struct { char name[256], owner[256]; int64_t token, ttl; } locks[8];
static int nlocks;

/* ---- replies ---- */
static char *out;
static size_t out_len, out_cap;

static void put(const char *s, size_t n) {
    if (out_len + n + 1 > out_cap) {
        out_cap = (out_len + n + 1) * 2;
        out = realloc(out, out_cap);
        if (!out) abort();
    }
    memcpy(out + out_len, s, n);
    out_len += n;
    out[out_len] = 0;
}
static void puts_(const char *s) { put(s, strlen(s)); }
static void putf(const char *fmt, long long v) {
    char b[64];
    snprintf(b, sizeof b, fmt, v);
    puts_(b);
}
/* a JSON string */
static void putstr(const char *s) {
    put("\"", 1);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { put("\\", 1); put((const char *)&c, 1); }
        else if (c < 0x20) { char b[8]; snprintf(b, sizeof b, "\\u%04x", c); puts_(b); }
        else put((const char *)&c, 1);
    }
    put("\"", 1);
}
static void putjson(const char *json) { puts_(json ? json : "null"); }

static int fail(int rc) {
    out_len = 0;
    puts_("{\"ok\":false,\"error\":");
    char b[600];
    snprintf(b, sizeof b, "%s: %s", tocsin_errstr(rc), db ? tocsin_errmsg(db) : "");
    putstr(b);
    puts_("}");
    return rc;
}
#define CHECK(call) do { int rc_ = (call); if (rc_ != TOCSIN_OK) return fail(rc_); } while (0)

static int64_t num(const char *s) { return s ? strtoll(s, NULL, 10) : 0; }
static int64_t deadline(void) { return tocsin_now(db) + 60000; }

/* ---- the worker: tasks "echo" (returns {"by":"c","echo":x}) and "boom" ---- */
static void *work(void *arg) {
    (void)arg;
    while (!worker_stopping) {
        tocsin_task_run **runs = NULL;
        size_t n = 0;
        int rc = tocsin_worker_next(worker, &runs, &n, 200);
        if (rc == TOCSIN_TIMEOUT || rc == TOCSIN_INTERRUPTED) continue;
        if (rc != TOCSIN_OK) break;
        for (size_t i = 0; i < n; i++) {
            tocsin_task_run *r = runs[i];
            tocsin_outcome o = TOCSIN_OUTCOME_INIT;
            /* the first argument: args is a JSON array "[x]" or "[x, ...]" */
            size_t len = strlen(r->args);
            char *value = malloc(len + 32), *msg = malloc(len + 16);
            if (!value || !msg) abort();
            const char *a = r->args + 1; /* past '[' */
            size_t alen = len >= 2 ? len - 2 : 0;
            if (strcmp(r->task, "echo") == 0) {
                snprintf(value, len + 32, "{\"by\":\"c\",\"echo\":%.*s}", (int)alen, a);
                o.value = value;
            } else {
                snprintf(msg, len + 16, "boom: %.*s", (int)alen, a);
                o.kind = TOCSIN_OUTCOME_ERROR;
                o.error_type = "CError";
                o.error_message = msg;
            }
            tocsin_worker_finish(worker, NULL, r, &o);
            free(value);
            free(msg);
        }
        tocsin_free(runs);
    }
    return NULL;
}

static void worker_stop(void) {
    if (!worker) return;
    worker_stopping = 1;
    tocsin_worker_poke(worker);
    pthread_join(worker_thread, NULL);
    tocsin_worker_close(worker);
    worker = NULL;
}

static void close_all(void) {
    worker_stop();
    tocsin_stream_sub_close(sub);
    tocsin_listen_close(listener);
    sub = NULL;
    listener = NULL;
    nlocks = 0;
    tocsin_close(db);
    db = NULL;
}

static int lock_slot(const char *name, const char *owner, const char *ttl) {
    for (int i = 0; i < nlocks; i++)
        if (!strcmp(locks[i].name, name) && !strcmp(locks[i].owner, owner)) return i;
    if (nlocks == 8) return -1;
    snprintf(locks[nlocks].name, 256, "%s", name);
    snprintf(locks[nlocks].owner, 256, "%s", owner);
    locks[nlocks].token = 0;
    locks[nlocks].ttl = num(ttl);
    return nlocks++;
}

static int events_reply(tocsin_message *m, size_t n, const char *key) {
    puts_("\"");
    puts_(key);
    puts_("\":[");
    for (size_t i = 0; i < n; i++) {
        putf(i ? ",{\"offset\":%lld,\"payload\":" : "{\"offset\":%lld,\"payload\":", (long long)m[i].id);
        putjson(m[i].payload);
        puts_("}");
    }
    puts_("]");
    return 0;
}

static int run(char **f, int nf) {
    const char *op = f[0];
    out_len = 0;
    puts_("{\"ok\":true");
    if (!strcmp(op, "hello")) {
        Dl_info info;
        memset(&info, 0, sizeof info);
        dladdr((void *)tocsin_version, &info);
        puts_(",\"runtime\":\"c\",\"version\":");
        putstr(tocsin_version());
        puts_(",\"module\":");
        putstr(info.dli_fname);
        puts_(",\"sqlite\":");
        putstr(tocsin_sqlite_version());
        puts_(",\"bigint\":true");
    } else if (!strcmp(op, "open")) {
        close_all();
        CHECK(tocsin_open(&db, f[1], NULL));
    } else if (!strcmp(op, "close") || !strcmp(op, "quit")) {
        close_all();
    } else if (!strcmp(op, "enqueue")) {
        tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
        int64_t id;
        o.meta = f[3];
        o.max_attempts = 1;
        CHECK(tocsin_queue_enqueue(db, &id, f[1], f[2], &o));
        putf(",\"id\":%lld", (long long)id);
    } else if (!strcmp(op, "claim_ack")) {
        const char *q[1] = {f[1]};
        for (;;) {
            tocsin_job *j = NULL;
            size_t n = 0;
            CHECK(tocsin_queue_claim(db, &j, &n, f[1], "c-consumer", 1, 30000));
            if (n == 0) {
                CHECK(tocsin_queue_wait(db, q, 1, deadline(), NULL));
                continue;
            }
            int ok = 0;
            int rc = tocsin_job_ack(db, &ok, j[0].id, j[0].token);
            if (rc != TOCSIN_OK) { tocsin_jobs_free(j, n); return fail(rc); }
            puts_(",\"payload\":");
            putjson(j[0].payload);
            puts_(",\"meta\":");
            putjson(j[0].meta);
            puts_(ok ? ",\"acked\":true" : ",\"acked\":false");
            tocsin_jobs_free(j, n);
            break;
        }
    } else if (!strcmp(op, "job")) {
        tocsin_job *j = NULL;
        CHECK(tocsin_job_get(db, &j, num(f[1])));
        puts_(",\"state\":");
        if (j) putstr(j->state); else puts_("null");
        tocsin_jobs_free(j, j ? 1 : 0);
    } else if (!strcmp(op, "worker_start")) {
        tocsin_worker_opts o = TOCSIN_WORKER_OPTS_INIT;
        tocsin_task_opts t = TOCSIN_TASK_OPTS_INIT;
        const char *qs[1] = {f[1]};
        o.queues = qs;
        o.n_queues = 1;
        o.scheduler = 1;
        t.backoff_base_ms = 10;
        CHECK(tocsin_worker_open(&worker, db, &o));
        CHECK(tocsin_worker_register(worker, "echo", &t));
        CHECK(tocsin_worker_register(worker, "boom", &t));
        worker_stopping = 0;
        if (pthread_create(&worker_thread, NULL, work, NULL) != 0) return fail(TOCSIN_ERROR);
    } else if (!strcmp(op, "worker_stop")) {
        worker_stop();
    } else if (!strcmp(op, "call")) {
        tocsin_task_call c = TOCSIN_TASK_CALL_INIT;
        tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
        int64_t id;
        c.task = f[2];
        c.args = f[3];
        o.max_attempts = 1;
        CHECK(tocsin_task_enqueue(db, &id, f[1], &c, &o));
        putf(",\"id\":%lld", (long long)id);
    } else if (!strcmp(op, "result")) {
        tocsin_result *r = NULL;
        CHECK(tocsin_result_wait(db, &r, num(f[1]), deadline(), NULL));
        if (r->is_error) {
            puts_(",\"error\":{\"type\":");
            putstr(r->error_type);
            puts_(",\"message\":");
            putstr(r->error_message);
            puts_("}");
        } else {
            puts_(",\"value\":");
            putjson(r->value);
        }
        tocsin_result_free(r);
    } else if (!strcmp(op, "publish")) {
        int64_t off;
        CHECK(tocsin_stream_publish(db, &off, f[1], f[2], NULL, NULL));
        putf(",\"offset\":%lld", (long long)off);
    } else if (!strcmp(op, "sub_start")) {
        tocsin_stream_sub_opts o = TOCSIN_STREAM_SUB_OPTS_INIT;
        o.batch = 1;
        CHECK(tocsin_stream_sub_open(&sub, db, f[1], f[2], &o));
    } else if (!strcmp(op, "sub_next")) {
        size_t want = (size_t)num(f[1]), got = 0;
        tocsin_message all[16];
        char *payloads[16];
        puts_(",");
        while (got < want && got < 16) {
            tocsin_message *m = NULL;
            size_t n = 0;
            CHECK(tocsin_stream_sub_next(sub, &m, &n, 60000));
            for (size_t i = 0; i < n && got < 16; i++) {
                all[got] = m[i];
                payloads[got] = strdup(m[i].payload);
                all[got].payload = payloads[got];
                got++;
            }
            tocsin_messages_free(m, n);
        }
        events_reply(all, got, "events");
        for (size_t i = 0; i < got; i++) free(payloads[i]);
    } else if (!strcmp(op, "sub_stop")) {
        CHECK(tocsin_stream_sub_save(sub));
        tocsin_stream_sub_close(sub);
        sub = NULL;
    } else if (!strcmp(op, "offset")) {
        int64_t off;
        CHECK(tocsin_stream_offset(db, &off, f[2], f[1]));
        putf(",\"offset\":%lld", (long long)off);
    } else if (!strcmp(op, "listen_start")) {
        CHECK(tocsin_listen_open(&listener, db, f[1], 1000));
    } else if (!strcmp(op, "listen_next")) {
        tocsin_message *m = NULL;
        size_t n = 0;
        CHECK(tocsin_listen_next(listener, &m, &n, 60000));
        puts_(",\"payload\":");
        putjson(m[0].payload);
        tocsin_messages_free(m, n);
    } else if (!strcmp(op, "listen_stop")) {
        tocsin_listen_close(listener);
        listener = NULL;
    } else if (!strcmp(op, "notify")) {
        int64_t id;
        CHECK(tocsin_notify(db, &id, f[1], f[2], NULL));
        putf(",\"id\":%lld", (long long)id);
    } else if (!strcmp(op, "lock_try") || !strcmp(op, "lock_wait")) {
        int i = lock_slot(f[1], f[2], f[3]);
        int64_t tok = 0, until = 0;
        if (i < 0) return fail(TOCSIN_INVALID);
        if (op[5] == 't') CHECK(tocsin_lock_acquire(db, &tok, &until, f[1], f[2], locks[i].ttl));
        else CHECK(tocsin_lock_wait(db, &tok, &until, f[1], f[2], locks[i].ttl, deadline(), NULL));
        if (tok > 0) locks[i].token = tok;
        putf(",\"token\":%lld", (long long)tok);
    } else if (!strcmp(op, "lock_renew") || !strcmp(op, "lock_release")) {
        int i = lock_slot(f[1], f[2], "1"), ok = 0;
        if (i < 0) return fail(TOCSIN_INVALID);
        if (op[5] == 'r' && op[6] == 'e' && op[7] == 'n')
            CHECK(tocsin_lock_renew(db, &ok, f[1], f[2], locks[i].token, locks[i].ttl));
        else
            CHECK(tocsin_lock_release(db, &ok, f[1], f[2], locks[i].token));
        puts_(ok ? ",\"res\":true" : ",\"res\":false");
    } else if (!strcmp(op, "schedule")) {
        int64_t next = 0;
        CHECK(tocsin_schedule_set(db, &next, f[1], f[2], f[3], f[4], NULL));
        putf(",\"next_fire\":%lld", (long long)next);
    } else if (!strcmp(op, "unschedule")) {
        int ok = 0;
        CHECK(tocsin_schedule_remove(db, &ok, f[1]));
        puts_(ok ? ",\"res\":true" : ",\"res\":false");
    } else {
        return fail(TOCSIN_INVALID);
    }
    (void)nf;
    puts_("}");
    return 0;
}

int main(void) {
    size_t cap = 0;
    char *line = NULL;
    ssize_t len;
    while ((len = getline(&line, &cap, stdin)) > 0) {
        if (line[len - 1] == '\n') line[--len] = 0;
        char *f[MAXF] = {0};
        int nf = 0;
        char *p = line;
        f[nf++] = p;
        while ((p = strchr(p, '\t')) && nf < MAXF) {
            *p++ = 0;
            f[nf++] = p;
        }
        run(f, nf);
        fwrite(out, 1, out_len, stdout);
        fputc('\n', stdout);
        fflush(stdout);
        if (!strcmp(f[0], "quit")) break;
    }
    close_all();
    free(line);
    free(out);
    return 0;
}
