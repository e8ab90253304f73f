/* tocsin ui: the live dashboard, served by libmicrohttpd (no HTTP parsing here).
 *
 * One thread per connection (libmicrohttpd's), one tocsin handle shared under
 * g_mu (the CLI's raw read-only SQL runs on the handle's connection, which the
 * core opens without SQLite's own mutex). Live data goes out as Server-Sent
 * Events: each /events stream holds a wake-engine subscription and sends a
 * snapshot after commits (coalesced to at most one per 250 ms) or every 5 s when
 * nothing happens. The page (dashboard.html, dashboard.js) is embedded in the
 * binary and renders every value with textContent; a strict
 * Content-Security-Policy forbids inline script besides.
 *
 * Security: mutations are POSTs that must carry the per-session CSRF token
 * (X-Tocsin-CSRF, handed out in the page); --read-only refuses them and opens
 * the database read-only; --token T guards every request (/?token=T once, which
 * sets a session cookie holding a per-start random id, never T; or Authorization:
 * Bearer T) and is required for a non-loopback
 * --host; on loopback the Host header must name the loopback (DNS rebinding).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* The embedded page: the files as they are in cli/, NUL-terminated. .incbin
 * resolves a relative path from the compiler's working directory: make runs at
 * the top of the tree; CMake passes the directory. */
#ifndef TOCSIN_UI_DIR
#define TOCSIN_UI_DIR "cli"
#endif
__asm__(".section .rodata\n"
        ".global tocsin_ui_html\n"
        "tocsin_ui_html:\n"
        ".incbin \"" TOCSIN_UI_DIR "/dashboard.html\"\n"
        ".byte 0\n"
        ".global tocsin_ui_js\n"
        "tocsin_ui_js:\n"
        ".incbin \"" TOCSIN_UI_DIR "/dashboard.js\"\n"
        ".byte 0\n"
        ".previous\n");
extern const char tocsin_ui_html[];
extern const char tocsin_ui_js[];

const char UI_HELP[] =
    "usage: tocsin ui DB [--port N] [--host H] [--read-only] [--token T]\n\n"
    "Serves the live dashboard on http://H:N/ (default 127.0.0.1, port 8080; --port 0 picks a\n"
    "free one): queue depths and rates pushed by Server-Sent Events as commits happen, a\n"
    "throughput chart, job search, dead letters with requeue and purge, pause and resume,\n"
    "streams with consumer lag, schedules with their next fire, recent notifications, and\n"
    "/metrics for Prometheus. Prints 'listening on http://H:N/' once ready; SIGINT/SIGTERM\n"
    "stop it.\n"
    "  --read-only  no mutation at all (the database is opened read-only)\n"
    "  --token T    every request must carry T (open http://H:N/?token=T once: a session cookie\n"
    "               of this run, tocsin_session_N, keeps the page signed in; it holds a random\n"
    "               id, never T; or send 'Authorization: Bearer T'); required when H is not loopback\n"
    "               (or TOCSIN_UI_TOKEN=T in the environment, out of sight of ps)\n"
    "Mutations always need the page's per-session CSRF token.\n";

static tocsin_db *g_db;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_csrf[33];
static const char *g_token;
static int g_read_only, g_loopback, g_port;
/* The session cookie. A browser sends a host's cookies to every port of it (RFC 6265
 * scopes them by host and path only): another web app on 127.0.0.1:3000 receives the
 * cookies of a dashboard on 127.0.0.1:8001, and no attribute prevents it. So the cookie
 * never carries the token: its value is a random session id drawn at each start
 * (g_session), worth nothing to any other dashboard and nothing once this one stops, and
 * its name, tocsin_session_PORT, is this dashboard's own, so that two dashboards of one
 * host (other --port) keep a cookie each instead of overwriting one. A cookie of that name
 * with another value (an earlier run's, or one another app set) is ignored. */
static char g_cookie[40];
static char g_session[33];
static const char *g_host;
static const char *g_path;     /* the database's path as given */
static struct stat g_file;     /* the file g_db opened (device and inode) */
static volatile sig_atomic_t g_stop;
static int g_stop_pipe[2] = {-1, -1};

/* The open SSE streams, so that a shutdown can poke their waits. */
#define MAX_STREAMS 256
static tocsin_sub *g_subs[MAX_STREAMS];

static void hex_random(char *out, size_t bytes) {
    unsigned char buf[32];
    if (bytes > sizeof buf) bytes = sizeof buf;
    if (getrandom(buf, bytes, 0) != (ssize_t)bytes) {
        fputs("tocsin: no random bytes for the session token\n", stderr);
        exit(EXIT_ERR);
    }
    for (size_t i = 0; i < bytes; i++) sprintf(out + 2 * i, "%02x", buf[i]);
}

/* Constant-time comparison of secrets. */
static int same_secret(const char *a, const char *b) {
    if (!a || !b) return 0;
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = la != lb;
    for (size_t i = 0; i < la && i < lb; i++) d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, const char *type,
                                 const char *body, size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
                            "frame-ancestors 'none'");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, const char *json) {
    return send_text(c, status, "application/json; charset=utf-8", json, strlen(json));
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *msg) {
    sb b = {0};
    sb_puts(&b, "{\"error\":");
    sb_json_str(&b, msg);
    sb_puts(&b, "}");
    enum MHD_Result r = send_json(c, status, b.p);
    sb_free(&b);
    return r;
}

/* The HTTP status of a collector's exit code. */
static unsigned status_of(int code) {
    switch (code) {
    case EXIT_USAGE: return MHD_HTTP_BAD_REQUEST;
    case EXIT_NOTFOUND: return MHD_HTTP_NOT_FOUND;
    case EXIT_BUSY: return MHD_HTTP_SERVICE_UNAVAILABLE;
    default: return MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
}

/* Query arguments that cannot mean what they say are refused before anything runs:
 * one given without a value (`purge?queue=` is not "every queue"), one with a NUL
 * byte (%00 would cut the name short), one given twice. msg gets the reason. */
struct arg_check { struct MHD_Connection *c; char msg[200]; };
static enum MHD_Result check_one_arg(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                     const char *value, size_t value_size) {
    struct arg_check *a = cls;
    (void)kind;
    if (a->msg[0]) return MHD_NO;
    if (strlen(key) != key_size) snprintf(a->msg, sizeof a->msg, "a query argument name has a NUL byte");
    else if (!value || !value_size) snprintf(a->msg, sizeof a->msg, "query argument '%.60s' is empty", key);
    else if (strlen(value) != value_size)
        snprintf(a->msg, sizeof a->msg, "query argument '%.60s' has a NUL byte", key);
    else if (MHD_lookup_connection_value(a->c, MHD_GET_ARGUMENT_KIND, key) != value)
        snprintf(a->msg, sizeof a->msg, "query argument '%.60s' is given more than once", key);
    return a->msg[0] ? MHD_NO : MHD_YES;
}

static int args_bad(struct MHD_Connection *c, char *msg, size_t cap) {
    struct arg_check a = {c, ""};
    MHD_get_connection_values_n(c, MHD_GET_ARGUMENT_KIND, check_one_arg, &a);
    snprintf(msg, cap, "%s", a.msg);
    return a.msg[0] != 0;
}

static const char *arg(struct MHD_Connection *c, const char *name) {
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
    return v && *v ? v : NULL;
}

static int arg_int(struct MHD_Connection *c, const char *name, int64_t *out, int64_t dflt) {
    const char *v = arg(c, name);
    *out = dflt;
    if (!v) return 0;
    const char *d = v + (*v == '-');
    if (*d < '0' || *d > '9') return -1; /* digits exactly: no spaces, no '+' */
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end) return -1;
    *out = x;
    return 0;
}

/* The query arguments each path takes (besides token, which any request may carry).
 * One it does not take is refused, never ignored: `/api/purge?queu=x` would purge
 * every queue, `/api/jobs?status=dead` list every state. NULL: not a path served. */
static const char *args_of(const char *url, int post) {
    static const char *const get_paths[][2] = {
        {"/", ""}, {"/dashboard.js", ""}, {"/events", ""}, {"/api/snapshot", ""},
        {"/api/jobs", " q queue state limit "}, {"/api/dead", " queue limit "}, {"/metrics", ""}};
    static const char *const post_paths[][2] = {
        {"/api/requeue", " id "}, {"/api/cancel", " id "}, {"/api/purge", " queue "},
        {"/api/pause", " queue "}, {"/api/resume", " queue "}};
    const char *const (*t)[2] = post ? post_paths : get_paths;
    size_t n = post ? sizeof post_paths / sizeof post_paths[0] : sizeof get_paths / sizeof get_paths[0];
    for (size_t i = 0; i < n; i++)
        if (!strcmp(url, t[i][0])) return t[i][1];
    return NULL;
}

struct arg_known { const char *allowed; char msg[200]; };
static enum MHD_Result check_known_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    struct arg_known *a = cls;
    char word[80];
    (void)kind;
    (void)value;
    if (a->msg[0] || !strcmp(key, "token")) return MHD_YES;
    snprintf(word, sizeof word, " %.60s ", key);
    if (strlen(key) > 60 || !strstr(a->allowed, word)) {
        int n = a->allowed[0] ? (int)strlen(a->allowed) - 2 : 0; /* the list without its spaces around */
        if (n > 0)
            snprintf(a->msg, sizeof a->msg, "unknown query argument '%.60s' (this path takes %.*s)", key, n,
                     a->allowed + 1);
        else snprintf(a->msg, sizeof a->msg, "unknown query argument '%.60s' (this path takes none)", key);
    }
    return a->msg[0] ? MHD_NO : MHD_YES;
}

/* 1 (message in tocsin_errmsg) when `queue` is not a valid name. */
static int bad_queue(const char *queue) {
    pthread_mutex_lock(&g_mu);
    int rc = tocsin_check_name(g_db, "queue", queue);
    pthread_mutex_unlock(&g_mu);
    return rc != TOCSIN_OK;
}

/* 1 (message in g_err) when the path no longer names the file the handle opened: it
 * was deleted, renamed or replaced (a restore, `mv new.db app.db`). The handle would
 * go on reading, and writing, the old inode unseen by anyone: every answer would be
 * stale and every mutation lost. Called under g_mu. */
static int db_gone(void) {
    struct stat st;
    int r = stat(g_path, &st);
    if (r == 0 && st.st_dev == g_file.st_dev && st.st_ino == g_file.st_ino) return 0;
    snprintf(g_err, sizeof g_err, "the database file %.300s was %s after tocsin ui opened it: restart tocsin ui",
             g_path, r == 0 ? "replaced" : "deleted or renamed");
    return 1;
}

/* {"now","stats","streams","schedules","notifications"}: one SSE event. */
static int snapshot(sb *out, char *err) {
    sb st = {0}, str = {0}, sc = {0}, no = {0};
    pthread_mutex_lock(&g_mu);
    int rc = db_gone() ? EXIT_ERR : collect_stats(g_db, &st, NULL);
    if (!rc) rc = collect_streams(g_db, &str);
    if (!rc) rc = collect_schedules(g_db, &sc);
    if (!rc) rc = collect_notifications(g_db, &no, NULL, 5);
    int64_t now = tocsin_now(g_db);
    if (!rc) sb_printf(out, "{\"now\":%lld,\"stats\":%s,\"streams\":%s,\"schedules\":%s,\"notifications\":%s}",
                       (long long)now, st.p, str.p, sc.p, no.p);
    else {
        sb_puts(out, "{\"error\":");
        sb_json_str(out, g_err);
        sb_puts(out, "}");
        if (err) memcpy(err, g_err, sizeof g_err);
    }
    pthread_mutex_unlock(&g_mu);
    sb_free(&st);
    sb_free(&str);
    sb_free(&sc);
    sb_free(&no);
    return rc;
}

/* ---- Server-Sent Events ---- */
typedef struct sse {
    tocsin_sub *sub;
    int slot;
    sb buf;      /* bytes not yet handed to libmicrohttpd */
    size_t off;
    int started;
    int last_event; /* the file went away: the error event was the last */
    struct timespec last;
} sse;

static double since(const struct timespec *t) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t->tv_sec) + (double)(now.tv_nsec - t->tv_nsec) / 1e9;
}

static void sse_event(sse *s) {
    sb snap = {0};
    snapshot(&snap, NULL);
    /* JSON whitespace only: no newline may break the data: line */
    for (size_t i = 0; i < snap.n; i++)
        if (snap.p[i] == '\n' || snap.p[i] == '\r') snap.p[i] = ' ';
    sb_puts(&s->buf, "event: snapshot\ndata: ");
    sb_add(&s->buf, snap.p, snap.n);
    sb_puts(&s->buf, "\n\n");
    sb_free(&snap);
    clock_gettime(CLOCK_MONOTONIC, &s->last);
}

/* Called on the connection's own thread: blocking here is what the thread is for. */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    sse *s = cls;
    if (s->off >= s->buf.n) {
        if (g_stop || s->last_event) return MHD_CONTENT_READER_END_OF_STREAM;
        s->buf.n = 0;
        s->off = 0;
        if (!s->started) {
            s->started = 1;
            sb_puts(&s->buf, "retry: 1000\n\n");
            sse_event(s);
        } else {
            int rc = tocsin_sub_wait(s->sub, 5000);
            if (g_stop) return MHD_CONTENT_READER_END_OF_STREAM;
            if (rc == TOCSIN_OK) {
                /* coalesce bursts: at most one snapshot per 250 ms */
                double el = since(&s->last);
                if (el < 0.25) {
                    struct timespec ts = {0, (long)((0.25 - el) * 1e9)};
                    nanosleep(&ts, NULL);
                    int woken;
                    tocsin_sub_drain(s->sub, &woken);
                }
                sse_event(s);
            } else if (rc == TOCSIN_TIMEOUT) {
                sse_event(s);
            } else if (rc == TOCSIN_REPLACED) {
                sse_event(s); /* the page shows the snapshot's error: which file, what to do */
                s->last_event = 1;
            } else {
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
        }
    }
    size_t n = s->buf.n - s->off;
    if (n > max) n = max;
    memcpy(buf, s->buf.p + s->off, n);
    s->off += n;
    return (ssize_t)n;
}

static void sse_free(void *cls) {
    sse *s = cls;
    pthread_mutex_lock(&g_mu);
    if (s->slot >= 0) g_subs[s->slot] = NULL;
    pthread_mutex_unlock(&g_mu);
    tocsin_sub_close(s->sub);
    sb_free(&s->buf);
    free(s);
}

static enum MHD_Result serve_events(struct MHD_Connection *c) {
    sse *s = calloc(1, sizeof *s);
    if (!s) return MHD_NO;
    s->slot = -1;
    pthread_mutex_lock(&g_mu);
    int rc = tocsin_sub_open(&s->sub, g_db);
    for (int i = 0; !rc && i < MAX_STREAMS; i++)
        if (!g_subs[i]) { g_subs[i] = s->sub; s->slot = i; break; }
    pthread_mutex_unlock(&g_mu);
    if (rc || s->slot < 0) {
        if (!rc) tocsin_sub_close(s->sub);
        free(s);
        return send_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, rc ? tocsin_errmsg(NULL) : "too many live streams");
    }
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, sse_read, s, sse_free);
    if (!r) { sse_free(s); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

/* ---- the page ---- */
static enum MHD_Result serve_page(struct MHD_Connection *c, int set_cookie) {
    /* the page reads its session settings from meta tags (no inline script) */
    sb b = {0};
    const char *mark = strstr(tocsin_ui_html, "<!--CONFIG-->");
    if (!mark) return send_error(c, 500, "page has no config mark");
    sb_add(&b, tocsin_ui_html, (size_t)(mark - tocsin_ui_html));
    sb_printf(&b, "<meta name=\"tocsin-csrf\" content=\"%s\"><meta name=\"tocsin-read-only\" content=\"%d\">",
              g_csrf, g_read_only);
    sb_puts(&b, mark + strlen("<!--CONFIG-->"));
    struct MHD_Response *r = MHD_create_response_from_buffer(b.n, b.p, MHD_RESPMEM_MUST_COPY);
    sb_free(&b);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
                            "frame-ancestors 'none'");
    if (set_cookie && g_token && g_cookie[0]) {
        sb ck = {0};
        sb_printf(&ck, "%s=%s; HttpOnly; SameSite=Strict; Path=/", g_cookie, g_session);
        MHD_add_response_header(r, "Set-Cookie", ck.p);
        sb_free(&ck);
    }
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

/* ---- access checks ---- */
static enum MHD_Result count_host(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    (void)value;
    if (!strcasecmp(key, "Host")) ++*(int *)cls;
    return MHD_YES;
}

static int host_ok(struct MHD_Connection *c) {
    if (!g_loopback) return 1; /* a non-loopback bind is guarded by --token */
    /* one Host header exactly (RFC 9112): the lookup reads the first of two, which
     * another hop could read the other way */
    int hosts = 0;
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_host, &hosts);
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    if (!h || hosts != 1) return 0;
    char want[300];
    const char *names[] = {"127.0.0.1", "localhost", "[::1]", g_host};
    for (int i = 0; i < 4; i++) {
        snprintf(want, sizeof want, "%s:%d", names[i], g_port);
        if (!strcmp(h, want)) return 1;
        /* port 80: browsers leave the default port out of the Host header */
        if (g_port == 80 && !strcmp(h, names[i])) return 1;
    }
    return 0;
}

/* Every cookie of our name is looked at, not the first only: a browser sends a cookie of
 * a longer Path first, so one that another app of the host set for /api would otherwise
 * hide ours (a 401 on every call of the open page). One that does not match is ignored. */
static enum MHD_Result find_session(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    if (!strcmp(key, g_cookie) && same_secret(value, g_session)) *(int *)cls = 1;
    return MHD_YES;
}

static int session_cookie_ok(struct MHD_Connection *c) {
    int found = 0;
    if (!g_session[0]) return 0;
    MHD_get_connection_values(c, MHD_COOKIE_KIND, find_session, &found);
    return found;
}

static int token_ok(struct MHD_Connection *c, int *from_query) {
    *from_query = 0;
    if (!g_token) return 1;
    const char *q = arg(c, "token");
    if (same_secret(q, g_token)) { *from_query = 1; return 1; }
    if (session_cookie_ok(c)) return 1;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (auth && !strncmp(auth, "Bearer ", 7) && same_secret(auth + 7, g_token)) return 1;
    return 0;
}

/* ---- mutations ---- */
static enum MHD_Result mutate(struct MHD_Connection *c, const char *what) {
    if (g_read_only) return send_error(c, MHD_HTTP_FORBIDDEN, "the dashboard is read-only (--read-only)");
    if (!same_secret(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Tocsin-CSRF"), g_csrf))
        return send_error(c, MHD_HTTP_FORBIDDEN, "missing or wrong CSRF token (X-Tocsin-CSRF)");
    int64_t id = 0;
    const char *queue = arg(c, "queue");
    if (arg_int(c, "id", &id, 0)) return send_error(c, MHD_HTTP_BAD_REQUEST, "id must be an integer");
    if (queue && bad_queue(queue)) return send_error(c, MHD_HTTP_BAD_REQUEST, tocsin_errmsg(NULL));
    sb out = {0};
    int rc = 0, ok = 0;
    pthread_mutex_lock(&g_mu);
    if (!strcmp(what, "requeue") || !strcmp(what, "cancel")) {
        if (id < 1) { pthread_mutex_unlock(&g_mu); return send_error(c, MHD_HTTP_BAD_REQUEST, "id must be a positive integer"); }
        rc = what[0] == 'r' ? tocsin_dead_requeue(g_db, &ok, id) : tocsin_job_cancel(g_db, &ok, id);
        if (!rc && !ok) {
            pthread_mutex_unlock(&g_mu);
            return send_error(c, MHD_HTTP_NOT_FOUND, what[0] == 'r' ? "no dead job has that id" : "no live job has that id");
        }
        if (!rc) sb_printf(&out, "{\"%s\":%lld}", what[0] == 'r' ? "requeued" : "cancelled", (long long)id);
    } else if (!strcmp(what, "purge")) {
        int64_t n = 0;
        rc = tocsin_dead_purge(g_db, &n, queue, 0);
        if (!rc) sb_printf(&out, "{\"purged\":%lld}", (long long)n);
    } else if (!strcmp(what, "pause") || !strcmp(what, "resume")) {
        if (!queue) { pthread_mutex_unlock(&g_mu); return send_error(c, MHD_HTTP_BAD_REQUEST, "queue is required"); }
        rc = what[0] == 'p' ? tocsin_queue_pause(g_db, queue) : tocsin_queue_resume(g_db, queue);
        if (!rc) sb_printf(&out, "{\"paused\":%s}", what[0] == 'p' ? "true" : "false");
    } else {
        pthread_mutex_unlock(&g_mu);
        return send_error(c, MHD_HTTP_NOT_FOUND, "no such action");
    }
    if (rc) snprintf(g_err, sizeof g_err, "%s: %s", what, tocsin_errmsg(NULL));
    char err[sizeof g_err];
    memcpy(err, g_err, sizeof err);
    pthread_mutex_unlock(&g_mu);
    enum MHD_Result r = rc ? send_error(c, status_of(exit_code_of(rc)), err) : send_json(c, MHD_HTTP_OK, out.p);
    sb_free(&out);
    return r;
}

/* ---- reads ---- */
static enum MHD_Result read_api(struct MHD_Connection *c, const char *url) {
    sb out = {0};
    int rc = 0;
    char err[sizeof g_err] = "";
    const char *ctype = "application/json; charset=utf-8";
    if (!strcmp(url, "/api/snapshot")) {
        rc = snapshot(&out, err);
    } else if (!strcmp(url, "/api/jobs")) {
        job_filter f = {0};
        f.queue = arg(c, "queue");
        f.state = arg(c, "state");
        f.search = arg(c, "q");
        if (arg_int(c, "limit", &f.limit, 100) || f.limit < 1 || f.limit > 1000)
            return send_error(c, MHD_HTTP_BAD_REQUEST, "limit must be between 1 and 1000");
        if (f.queue && bad_queue(f.queue)) return send_error(c, MHD_HTTP_BAD_REQUEST, tocsin_errmsg(NULL));
        if (f.state && strcmp(f.state, "scheduled") && strcmp(f.state, "pending") && strcmp(f.state, "processing") &&
            strcmp(f.state, "dead"))
            return send_error(c, MHD_HTTP_BAD_REQUEST, "state must be scheduled, pending, processing or dead");
        pthread_mutex_lock(&g_mu);
        rc = collect_jobs(g_db, &out, &f);
        if (rc) memcpy(err, g_err, sizeof err); /* g_err is shared: read it under the lock */
        pthread_mutex_unlock(&g_mu);
    } else if (!strcmp(url, "/api/dead")) {
        int64_t limit;
        if (arg_int(c, "limit", &limit, 100) || limit < 1 || limit > 1000)
            return send_error(c, MHD_HTTP_BAD_REQUEST, "limit must be between 1 and 1000");
        const char *queue = arg(c, "queue");
        if (queue && bad_queue(queue)) return send_error(c, MHD_HTTP_BAD_REQUEST, tocsin_errmsg(NULL));
        pthread_mutex_lock(&g_mu);
        rc = collect_dead(g_db, &out, queue, 0, limit);
        if (rc) memcpy(err, g_err, sizeof err); /* g_err is shared: read it under the lock */
        pthread_mutex_unlock(&g_mu);
    } else if (!strcmp(url, "/metrics")) {
        ctype = "text/plain; version=0.0.4; charset=utf-8";
        pthread_mutex_lock(&g_mu);
        rc = collect_metrics(g_db, &out);
        if (rc) memcpy(err, g_err, sizeof err); /* g_err is shared: read it under the lock */
        pthread_mutex_unlock(&g_mu);
    } else {
        return send_error(c, MHD_HTTP_NOT_FOUND, "not found");
    }
    enum MHD_Result r;
    if (rc) r = send_error(c, status_of(rc), err);
    else r = send_text(c, MHD_HTTP_OK, ctype, out.p ? out.p : "", out.n);
    sb_free(&out);
    return r;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)cls;
    (void)version;
    (void)upload;
    static int marker;
    if (!*con_cls) { *con_cls = &marker; return MHD_YES; } /* headers first; bodies are ignored */
    if (*upload_size) { *upload_size = 0; return MHD_YES; }
    if (!host_ok(c)) return send_error(c, MHD_HTTP_FORBIDDEN, "unexpected Host header");
    /* GET, HEAD and POST are all it serves: PUT, DELETE... are not another way in */
    if (strcmp(method, "GET") && strcmp(method, "HEAD") && strcmp(method, "POST"))
        return send_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed (GET, HEAD or POST)");
    int from_query;
    if (!token_ok(c, &from_query)) return send_error(c, MHD_HTTP_UNAUTHORIZED, "missing or wrong access token (after a restart of tocsin ui, open /?token=T again)");
    char bad[200];
    if (args_bad(c, bad, sizeof bad)) return send_error(c, MHD_HTTP_BAD_REQUEST, bad);
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    const char *allowed = get || post ? args_of(url, post) : NULL;
    if (allowed) { /* a path served: an argument it does not take is refused */
        struct arg_known k = {allowed, ""};
        MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, check_known_arg, &k);
        if (k.msg[0]) return send_error(c, MHD_HTTP_BAD_REQUEST, k.msg);
    }
    if (strcmp(url, "/") && strcmp(url, "/dashboard.js")) {
        /* the file deleted or replaced: no stale data, no write into an inode nobody sees */
        char err[sizeof g_err];
        pthread_mutex_lock(&g_mu);
        int gone = db_gone();
        memcpy(err, g_err, sizeof err);
        pthread_mutex_unlock(&g_mu);
        if (gone) return send_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, err);
    }
    if (!strncmp(url, "/api/", 5) && post) return mutate(c, url + 5);
    if (!strcmp(url, "/")) return serve_page(c, from_query);
    if (!strcmp(url, "/dashboard.js"))
        return send_text(c, MHD_HTTP_OK, "text/javascript; charset=utf-8", tocsin_ui_js, strlen(tocsin_ui_js));
    if (!strcmp(url, "/events")) return serve_events(c);
    return read_api(c, url);
}

static void on_stop(int sig) {
    (void)sig;
    g_stop = 1;
    ssize_t r = write(g_stop_pipe[1], "x", 1);
    (void)r;
}

/* A token travels in a header (Authorization: Bearer) and in the URL (/?token=): a space,
 * ';', ',', '"' or '\\' would be cut or read differently by one client or another, a control
 * byte would break the header. (It once went into the cookie as is; the cookie holds a
 * session id now, but the rule stays: a token valid before is valid still.) */
static int token_valid(const char *what, const char *v) {
    if (strlen(v) < 8) {
        fprintf(stderr, "tocsin: %s must be at least 8 characters\n", what);
        return 0;
    }
    for (const unsigned char *t = (const unsigned char *)v; *t; t++)
        if (*t <= 0x20 || *t >= 0x7f || *t == '"' || *t == ',' || *t == ';' || *t == '\\') {
            fprintf(stderr, "tocsin: %s may hold only printable ASCII without spaces, quotes, ',', ';' or '\\'"
                            " (byte 0x%02x at %d)\n", what, *t, (int)(t - (const unsigned char *)v));
            return 0;
        }
    return 1;
}

static int is_loopback(const char *host) {
    return !strcmp(host, "127.0.0.1") || !strcmp(host, "localhost") || !strncmp(host, "127.", 4);
}

int cmd_ui(int argc, char **argv) {
    const char *path = NULL, *host = "127.0.0.1";
    long port = 8080;
    unsigned seen = 0;
    int rest = 0; /* after a lone "--" every argument is the path ("-x.db" included), as elsewhere */
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        if (!rest && !strcmp(a, "--")) { rest = 1; continue; }
        if (rest) {
            if (path) { fprintf(stderr, "tocsin: unexpected argument '%s' (see --help)\n", a); return EXIT_USAGE; }
            path = a;
            continue;
        }
        char name[16] = "";
        /* --port N and --port=N, like every other command */
        if (!strncmp(a, "--", 2) && eq && (size_t)(eq - a) < sizeof name) memcpy(name, a, (size_t)(eq - a));
        else snprintf(name, sizeof name, "%s", strlen(a) < sizeof name ? a : "");
        int more = i + 1 < argc;
        /* an option given twice is refused, as by every other command (which one was meant?) */
        static const char *const once[] = {"--read-only", "--json", "--port", "--host", "--token"};
        for (size_t k = 0; k < sizeof once / sizeof once[0]; k++)
            if (!strcmp(name, once[k]) || !strcmp(a, once[k])) {
                if (seen & (1u << k)) {
                    fprintf(stderr, "tocsin: option %s is given twice (see --help)\n", once[k]);
                    return EXIT_USAGE;
                }
                seen |= 1u << k;
            }
        if (!strcmp(a, "--read-only")) g_read_only = 1;
        else if (!strcmp(a, "--json")) continue;
        else if (!strcmp(name, "--port") || !strcmp(name, "--host") || !strcmp(name, "--token")) {
            if (!eq && !more) { fprintf(stderr, "tocsin: option %s needs a value (see --help)\n", a); return EXIT_USAGE; }
            const char *v = eq ? eq + 1 : argv[++i];
            if (a[2] == 'p') {
                char *end;
                port = strtol(v, &end, 10);
                if (*v < '0' || *v > '9' || *end || port < 0 || port > 65535) {
                    fprintf(stderr, "tocsin: --port must be an integer between 0 and 65535, not '%s'\n", v);
                    return EXIT_USAGE;
                }
            } else if (a[2] == 'h') host = v;
            else if (!token_valid("--token", v)) return EXIT_USAGE;
            else g_token = v;
        } else if (a[0] == '-') {
            fprintf(stderr, "tocsin: unknown option %s (see --help)\n", a);
            return EXIT_USAGE;
        } else if (!path) path = a;
        else { fprintf(stderr, "tocsin: unexpected argument '%s' (see --help)\n", a); return EXIT_USAGE; }
    }
    if (!path) { fprintf(stderr, "tocsin: missing DB (see --help)\n"); return EXIT_USAGE; }
    /* the token from the environment: a command line is readable by every local user (ps) */
    const char *env_token = getenv("TOCSIN_UI_TOKEN");
    if (env_token && *env_token) {
        if (g_token) { fprintf(stderr, "tocsin: give --token or TOCSIN_UI_TOKEN, not both\n"); return EXIT_USAGE; }
        if (!token_valid("TOCSIN_UI_TOKEN", env_token)) return EXIT_USAGE;
        g_token = env_token;
    }
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    const char *ip = !strcmp(host, "localhost") ? "127.0.0.1" : host;
    if (inet_pton(AF_INET, ip, &addr.sin_addr) != 1) {
        fprintf(stderr, "tocsin: --host must be an IPv4 address or localhost, not '%s'\n", host);
        return EXIT_USAGE;
    }
    g_loopback = is_loopback(host);
    g_host = host;
    if (!g_loopback && !g_token) {
        fprintf(stderr, "tocsin: --host %s is not loopback: give --token too\n", host);
        return EXIT_USAGE;
    }
    int rc = cli_open(&g_db, path, !g_read_only, 0);
    if (rc) {
        fprintf(stderr, "tocsin: %s\n", g_err);
        return rc;
    }
    g_path = path;
    if (stat(path, &g_file) != 0) {
        fprintf(stderr, "tocsin: cannot stat %s: %s\n", path, strerror(errno));
        tocsin_close(g_db);
        return EXIT_ERR;
    }
    hex_random(g_csrf, 16);
    if (g_token) hex_random(g_session, 16); /* before the first request can come */
    if (port) snprintf(g_cookie, sizeof g_cookie, "tocsin_session_%ld", port); /* --port 0: once bound */
    if (pipe(g_stop_pipe) != 0) { perror("tocsin: pipe"); return EXIT_ERR; }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, (uint16_t)port,
        NULL, NULL, handle, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(MAX_STREAMS + 64), MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
        MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "tocsin: cannot listen on %s:%ld: %s\n", host, port, strerror(errno));
        tocsin_close(g_db);
        return EXIT_ERR;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    g_port = info ? info->port : (int)port;
    if (!port) snprintf(g_cookie, sizeof g_cookie, "tocsin_session_%d", g_port);
    printf("listening on http://%s:%d/%s\n", host, g_port, g_read_only ? " (read-only)" : "");
    fflush(stdout);
    char ch;
    while (!g_stop && read(g_stop_pipe[0], &ch, 1) < 0 && errno == EINTR) {}
    g_stop = 1;
    /* end the SSE waits so their connection threads can finish */
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (g_subs[i]) tocsin_sub_poke(g_subs[i]);
    pthread_mutex_unlock(&g_mu);
    MHD_stop_daemon(d);
    tocsin_close(g_db);
    return 0;
}
