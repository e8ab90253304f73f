/*
 * One wait contract (tocsin.h, "How every wait ends"), run identically over
 * every wait kind: woken -> TOCSIN_OK, nothing -> TOCSIN_TIMEOUT, poked ->
 * TOCSIN_INTERRUPTED, closed by another thread -> TOCSIN_CLOSED, file
 * replaced -> TOCSIN_REPLACED; the message is tocsin_errmsg() of the waiter.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

enum { K_SUB, K_UNTIL, K_LISTEN, K_STREAM, K_QUEUE, K_RESULT, K_LOCK, K_WORKER, N_KINDS };
static const char *const KIND_NAMES[N_KINDS] = {"sub_wait",    "sub_wait_until", "listen_next",
                                                "stream_sub_next", "queue_wait", "result_wait",
                                                "lock_wait",   "worker_next"};
enum { C_WOKEN, C_TIMEOUT, C_POKE, C_CLOSE, C_REPLACED, N_CASES };
static const char *const CASE_NAMES[N_CASES] = {"woken", "timeout", "poke", "close", "replaced"};

static void nap(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

typedef struct waitable {
    int kind;
    tocsin_db *db, *other; /* other: the second process's stand-in, for commits */
    tocsin_sub *sub;       /* the subscription the wait uses (or is built on) */
    tocsin_listener *l;
    tocsin_stream_sub *ss;
    tocsin_worker *w;
    int64_t job, max_seen;
    char path[512];
    int closed; /* the close case freed the object */
} waitable;

static int max_notify_at_least(void *ctx, int *done) {
    waitable *x = ctx;
    int64_t id = 0;
    int rc = tocsin_notify_max_id(x->other, &id);
    *done = id > x->max_seen;
    return rc;
}

static int setup(waitable *x, int kind, int n) {
    char name[64];
    int64_t token = 0;
    memset(x, 0, sizeof *x);
    x->kind = kind;
    snprintf(name, sizeof name, "wait_%d_%d", kind, n);
    x->db = t_open(name, NULL);
    snprintf(x->path, sizeof x->path, "%s", sqlite3_db_filename(tocsin_sqlite(x->db), "main"));
    if (tocsin_open(&x->other, x->path, NULL) != TOCSIN_OK) return 0;
    switch (kind) {
    case K_LISTEN: return tocsin_listen_open(&x->l, x->db, "c", 10) == TOCSIN_OK;
    case K_STREAM: return tocsin_stream_sub_open(&x->ss, x->db, "t", "reader", NULL) == TOCSIN_OK;
    case K_WORKER: {
        static const char *const qs[] = {"q"};
        tocsin_worker_opts o = TOCSIN_WORKER_OPTS_INIT;
        o.queues = qs;
        o.n_queues = 1;
        if (tocsin_worker_open(&x->w, x->db, &o) != TOCSIN_OK) return 0;
        return tocsin_worker_register(x->w, "t", NULL) == TOCSIN_OK;
    }
    case K_RESULT:
        if (tocsin_queue_enqueue(x->db, &x->job, "q", "{}", NULL) != TOCSIN_OK) return 0;
        break;
    case K_LOCK:
        if (tocsin_lock_acquire(x->other, &token, NULL, "l", "someone", 3600000) != TOCSIN_OK) return 0;
        x->job = token;
        break;
    default: break;
    }
    if (tocsin_notify_max_id(x->db, &x->max_seen) != TOCSIN_OK) return 0;
    return tocsin_sub_open(&x->sub, x->db) == TOCSIN_OK;
}

/* Makes the wait's condition true, from the other handle (as another process would). */
static void make_ready(waitable *x) {
    int64_t id;
    int ok;
    switch (x->kind) {
    case K_STREAM: tocsin_stream_publish(x->other, &id, "t", "{}", NULL, NULL); break;
    case K_QUEUE: tocsin_queue_enqueue(x->other, &id, "q", "{}", NULL); break;
    case K_RESULT: tocsin_result_save(x->other, x->job, "42", 0); break;
    case K_LOCK: tocsin_lock_release(x->other, &ok, "l", "someone", x->job); break;
    case K_WORKER: {
        tocsin_task_call c = TOCSIN_TASK_CALL_INIT;
        c.task = "t";
        tocsin_task_enqueue(x->other, &id, "q", &c, NULL);
        break;
    }
    default: tocsin_notify(x->other, &id, "c", "{}", NULL); break;
    }
}

/* The wait under test. timeout_ms < 0: no bound; 0: a deadline already reached. */
static int do_wait(waitable *x, int timeout_ms) {
    const char *qs[] = {"q"};
    int64_t deadline = timeout_ms < 0 ? -1 : tocsin_now(x->db) + timeout_ms;
    tocsin_message *m = NULL;
    tocsin_result *r = NULL;
    tocsin_task_run **runs = NULL;
    size_t n = 0;
    int64_t token = 0;
    int rc;
    switch (x->kind) {
    case K_SUB: return tocsin_sub_wait(x->sub, timeout_ms);
    case K_UNTIL: return tocsin_sub_wait_until(x->sub, max_notify_at_least, x, timeout_ms);
    case K_LISTEN:
        rc = tocsin_listen_next(x->l, &m, &n, timeout_ms);
        tocsin_messages_free(m, n);
        return rc;
    case K_STREAM:
        rc = tocsin_stream_sub_next(x->ss, &m, &n, timeout_ms);
        tocsin_messages_free(m, n);
        return rc;
    case K_QUEUE: return tocsin_queue_wait(x->db, qs, 1, deadline, x->sub);
    case K_RESULT:
        rc = tocsin_result_wait(x->db, &r, x->job, deadline, x->sub);
        tocsin_result_free(r);
        return rc;
    case K_LOCK: return tocsin_lock_wait(x->db, &token, NULL, "l", "me", 1000, deadline, x->sub);
    default:
        rc = tocsin_worker_next(x->w, &runs, &n, timeout_ms);
        tocsin_free(runs);
        return rc;
    }
}

static void poke(waitable *x) {
    switch (x->kind) {
    case K_LISTEN: tocsin_listen_poke(x->l); break;
    case K_STREAM: tocsin_stream_sub_poke(x->ss); break;
    case K_WORKER: tocsin_worker_poke(x->w); break;
    default: tocsin_sub_poke(x->sub); break;
    }
}

/* Closes what the wait waits on (from another thread in the close case). */
static void close_waited(waitable *x) {
    switch (x->kind) {
    case K_LISTEN: tocsin_listen_close(x->l); x->l = NULL; break;
    case K_STREAM: tocsin_stream_sub_close(x->ss); x->ss = NULL; break;
    case K_WORKER: tocsin_worker_close(x->w); x->w = NULL; break;
    default: tocsin_sub_close(x->sub); x->sub = NULL; break;
    }
}

static void teardown(waitable *x) {
    tocsin_listen_close(x->l);
    tocsin_stream_sub_close(x->ss);
    tocsin_worker_close(x->w);
    tocsin_sub_close(x->sub);
    tocsin_close(x->other);
    tocsin_close(x->db);
}

static void *closer(void *p) {
    nap(40);
    close_waited(p);
    return NULL;
}

static void *readier(void *p) {
    nap(40);
    make_ready(p);
    return NULL;
}

/* Moves the database and its -wal/-shm aside and creates another at the path
 * (a new file must not share the old one's shared-memory file: its
 * connections would reset the mapping the old ones still use). */
static void replace_file(const char *path) {
    static const char *const sfx[] = {"", "-wal", "-shm"};
    char from[600], to[620];
    tocsin_db *fresh = NULL;
    size_t i;
    for (i = 0; i < 3; i++) {
        snprintf(from, sizeof from, "%s%s", path, sfx[i]);
        snprintf(to, sizeof to, "%s.old%s", path, sfx[i]);
        rename(from, to);
    }
    if (tocsin_open(&fresh, path, NULL) == TOCSIN_OK) tocsin_close(fresh);
}

static void one_case(int kind, int c) {
    waitable x;
    pthread_t t;
    int rc, want = TOCSIN_OK;
    if (!setup(&x, kind, c)) {
        fprintf(stderr, "FAIL setup %s/%s: %s\n", KIND_NAMES[kind], CASE_NAMES[c], tocsin_errmsg(NULL));
        t_failed++;
        teardown(&x);
        return;
    }
    switch (c) {
    case C_WOKEN: /* the condition comes true while waiting */
        pthread_create(&t, NULL, readier, &x);
        rc = do_wait(&x, 10000);
        pthread_join(t, NULL);
        want = TOCSIN_OK;
        break;
    case C_TIMEOUT:
        rc = do_wait(&x, 30);
        want = TOCSIN_TIMEOUT;
        break;
    case C_POKE:
        poke(&x); /* a poke before the wait is not lost: the wait ends at once */
        rc = do_wait(&x, -1);
        want = TOCSIN_INTERRUPTED;
        break;
    case C_CLOSE:
        pthread_create(&t, NULL, closer, &x);
        rc = do_wait(&x, -1);
        pthread_join(t, NULL);
        want = TOCSIN_CLOSED;
        break;
    default:
        replace_file(x.path);
        rc = do_wait(&x, 10000);
        want = TOCSIN_REPLACED;
        break;
    }
    if (rc == want) {
        t_passed++;
    } else {
        t_failed++;
        fprintf(stderr, "FAIL [waits] %s / %s: %s (%d) instead of %s; %s\n", KIND_NAMES[kind],
                CASE_NAMES[c], tocsin_errstr(rc), rc, tocsin_errstr(want), tocsin_errmsg(NULL));
    }
    /* the thread's error channel says why, except after success */
    if (want != TOCSIN_OK) CHECK_EQ_I(tocsin_errcode(NULL), want);
    teardown(&x);
}

static void *db_closer(void *p) {
    waitable *x = p;
    nap(40);
    tocsin_close(x->db);
    return NULL;
}

/* Closing the handle ends the queue, result and lock waits another thread
 * has on it with TOCSIN_CLOSED, whether they wait on a subscription of the
 * caller's or on the handle's own, and the handle is freed once they have
 * ended (ASan: nothing is used after that). */
static void close_the_handle(void) {
    int kind, own;
    for (kind = K_QUEUE; kind <= K_LOCK; kind++)
        for (own = 0; own < 2; own++) {
            waitable x;
            pthread_t t;
            int rc;
            if (!setup(&x, kind, 10 + own)) {
                fprintf(stderr, "FAIL setup %s/db close: %s\n", KIND_NAMES[kind], tocsin_errmsg(NULL));
                t_failed++;
                teardown(&x);
                continue;
            }
            if (own) {
                tocsin_sub_close(x.sub);
                x.sub = NULL; /* the wait uses the handle's own subscription */
            }
            pthread_create(&t, NULL, db_closer, &x);
            rc = do_wait(&x, -1);
            pthread_join(t, NULL);
            if (rc != TOCSIN_CLOSED)
                fprintf(stderr, "FAIL [waits] %s / db close (%s sub): %s; %s\n", KIND_NAMES[kind],
                        own ? "the handle's" : "a caller's", tocsin_errstr(rc), tocsin_errmsg(NULL));
            CHECK_EQ_I(rc, TOCSIN_CLOSED);
            CHECK_EQ_I(tocsin_errcode(NULL), TOCSIN_CLOSED);
            x.db = NULL; /* freed when the wait let go of it */
            teardown(&x);
        }
}

void suite_waits(void) {
    tocsin_wake_opts wo = TOCSIN_WAKE_OPTS_INIT;
    int kind, c;
    wo.identity_ms = 5; /* a replaced file is noticed within milliseconds */
    CHECK_OK(NULL, tocsin_wake_configure(&wo));
    for (kind = 0; kind < N_KINDS; kind++)
        for (c = 0; c < N_CASES; c++) one_case(kind, c);
    close_the_handle();
    CHECK_OK(NULL, tocsin_wake_configure(NULL));
}
