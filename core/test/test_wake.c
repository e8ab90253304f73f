/* The wake engine: subscriptions, listen, stream subscribe, worker waits, and
 * what they must never do (miss a commit, stampede the write lock, drop
 * SQLite's locks, leak threads or descriptors). No test asserts a speed. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

/* ---- helpers --------------------------------------------------------------- */

static int count_dir(const char *path) {
    DIR *d = opendir(path);
    struct dirent *e;
    int n = 0;
    if (!d) return -1;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}
static int n_threads(void) { return count_dir("/proc/self/task"); }
static int n_fds(void) { return count_dir("/proc/self/fd") - 1; /* opendir's own */ }

static void nap_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int64_t t_monotonic_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *path_of(tocsin_db *db) { return sqlite3_db_filename(tocsin_sqlite(db), "main"); }

/* Another handle on db's file (same clock). */
static tocsin_db *reopen(tocsin_db *db, t_clock *clk) {
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    tocsin_db *h = NULL;
    if (clk) {
        o.clock = t_clock_fn;
        o.clock_ctx = clk;
    }
    if (tocsin_open(&h, path_of(db), &o) != TOCSIN_OK) {
        fprintf(stderr, "reopen: %s\n", tocsin_errmsg(h));
        exit(2);
    }
    return h;
}

/* Waits until no wake arrived for a while: earlier commits are all delivered. */
static void quiesce(tocsin_sub *s) {
    int i;
    for (i = 0; i < 200 && tocsin_sub_wait(s, 30) == TOCSIN_OK; i++) {
    }
}

static int64_t notify(tocsin_db *db, const char *channel, const char *payload) {
    int64_t id = 0;
    CHECK_OK(db, tocsin_notify(db, &id, channel, payload, NULL));
    return id;
}

/* ---- invalid arguments --------------------------------------------------------- */

static int never_done(void *ctx, int *done) {
    (void)ctx;
    *done = 0;
    return TOCSIN_OK;
}

static void invalid_args(void) {
    tocsin_db *db = t_open("wake_invalid", NULL), *mem = NULL, *other = t_open("wake_invalid2", NULL);
    tocsin_wake_opts wo = TOCSIN_WAKE_OPTS_INIT;
    tocsin_stream_sub_opts so = TOCSIN_STREAM_SUB_OPTS_INIT;
    tocsin_sub *s = (tocsin_sub *)1, *os = NULL;
    tocsin_listener *l = (tocsin_listener *)1;
    tocsin_stream_sub *ss = (tocsin_stream_sub *)1;
    tocsin_message *m = NULL;
    size_t n = 9;
    int woken = 7;
    const char *qs[] = {"q"}, *bad[] = {""};

    /* configuration */
    wo.version = 0;
    CHECK_EQ_I(tocsin_wake_configure(&wo), TOCSIN_INVALID);
    wo.version = TOCSIN_WAKE_OPTS_VERSION;
    wo.poll_ms = -1;
    CHECK_EQ_I(tocsin_wake_configure(&wo), TOCSIN_INVALID);
    wo.poll_ms = 1001;
    CHECK_EQ_I(tocsin_wake_configure(&wo), TOCSIN_INVALID);
    wo.poll_ms = 0;
    wo.identity_ms = 60001;
    CHECK_EQ_I(tocsin_wake_configure(&wo), TOCSIN_INVALID);
    wo.identity_ms = 0;
    wo.idle_poll_ms = -1;
    CHECK_EQ_I(tocsin_wake_configure(&wo), TOCSIN_INVALID);
    wo.idle_poll_ms = 1001;
    CHECK_EQ_I(tocsin_wake_configure(&wo), TOCSIN_INVALID);
    CHECK_OK(db, tocsin_wake_configure(NULL));

    /* raw subscriptions */
    CHECK_EQ_I(tocsin_sub_open(NULL, db), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_sub_open(&s, NULL), TOCSIN_INVALID);
    CHECK(s == NULL);
    CHECK_OK(mem, tocsin_open(&mem, ":memory:", NULL));
    s = (tocsin_sub *)1;
    CHECK_EQ_I(tocsin_sub_open(&s, mem), TOCSIN_INVALID);
    CHECK(s == NULL);
    CHECK(strstr(tocsin_errmsg(mem), "needs a database file") != NULL);
    CHECK_EQ_I(tocsin_sub_fd(NULL), -1);
    CHECK_EQ_I(tocsin_sub_drain(NULL, &woken), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_sub_wait(NULL, 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_sub_poke(NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_sub_wait_until(NULL, never_done, NULL, 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_sub_close(NULL), TOCSIN_OK);
    CHECK_OK(db, tocsin_sub_open(&s, db));
    CHECK(tocsin_sub_fd(s) >= 0);
    CHECK_EQ_I(tocsin_sub_drain(s, NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_sub_wait_until(s, NULL, NULL, 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_sub_wait_until(s, never_done, NULL, 0), TOCSIN_TIMEOUT);

    /* listen */
    CHECK_EQ_I(tocsin_listen_open(NULL, db, "ch", 8), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_listen_open(&l, NULL, "ch", 8), TOCSIN_INVALID);
    CHECK(l == NULL);
    CHECK_EQ_I(tocsin_listen_open(&l, db, "", 8), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "channel") != NULL);
    CHECK_EQ_I(tocsin_listen_open(&l, db, NULL, 8), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_listen_open(&l, db, "ch", 0), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "buffer_size") != NULL);
    CHECK_EQ_I(tocsin_listen_open(&l, db, "ch", 10001), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_listen_open(&l, mem, "ch", 8), TOCSIN_INVALID);
    CHECK(l == NULL);
    CHECK_EQ_I(tocsin_listen_fd(NULL), -1);
    CHECK_EQ_I(tocsin_listen_dropped(NULL), 0);
    CHECK_EQ_I(tocsin_listen_poke(NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_listen_next(NULL, &m, &n, 0), TOCSIN_INVALID);
    CHECK(m == NULL && n == 0);
    CHECK_EQ_I(tocsin_listen_close(NULL), TOCSIN_OK);
    CHECK_OK(db, tocsin_listen_open(&l, db, "ch", 8));
    CHECK_EQ_I(tocsin_listen_next(l, NULL, &n, 0), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(NULL), "must not be NULL") != NULL);
    CHECK_EQ_I(tocsin_listen_next(l, &m, NULL, 0), TOCSIN_INVALID);
    tocsin_listen_close(l);

    /* stream subscriptions */
    CHECK_EQ_I(tocsin_stream_sub_open(NULL, db, "t", "c", NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_stream_sub_open(&ss, NULL, "t", "c", NULL), TOCSIN_INVALID);
    CHECK(ss == NULL);
    CHECK_EQ_I(tocsin_stream_sub_open(&ss, db, "", "c", NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_stream_sub_open(&ss, db, "t", "", NULL), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "consumer") != NULL);
    CHECK_EQ_I(tocsin_stream_sub_open(&ss, db, "t", NULL, NULL), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "consumer must be set") != NULL);
    so.version = 0;
    CHECK_EQ_I(tocsin_stream_sub_open(&ss, db, "t", "c", &so), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "version") != NULL);
    so.version = TOCSIN_STREAM_SUB_OPTS_VERSION;
    so.from_offset = -2;
    CHECK_EQ_I(tocsin_stream_sub_open(&ss, db, "t", "c", &so), TOCSIN_INVALID);
    so.from_offset = 0;
    so.batch = 10001;
    CHECK_EQ_I(tocsin_stream_sub_open(&ss, db, "t", "c", &so), TOCSIN_INVALID);
    so.batch = 0;
    so.autosave_every = -1;
    CHECK_EQ_I(tocsin_stream_sub_open(&ss, db, "t", "c", &so), TOCSIN_INVALID);
    so.autosave_every = 5;
    CHECK_EQ_I(tocsin_stream_sub_open(&ss, db, "t", NULL, &so), TOCSIN_INVALID);
    CHECK(ss == NULL);
    CHECK_EQ_I(tocsin_stream_sub_fd(NULL), -1);
    CHECK_EQ_I(tocsin_stream_sub_poke(NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_stream_sub_save(NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_stream_sub_next(NULL, &m, &n, 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_stream_sub_close(NULL), TOCSIN_OK);
    so.autosave_every = 0;
    CHECK_OK(db, tocsin_stream_sub_open(&ss, db, "t", NULL, &so));
    CHECK_EQ_I(tocsin_stream_sub_next(ss, NULL, &n, 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_stream_sub_save(ss), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(NULL), "no consumer") != NULL);
    CHECK_OK(db, tocsin_stream_sub_close(ss));

    /* worker waits */
    CHECK_EQ_I(tocsin_queue_wait(NULL, qs, 1, 0, NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_queue_wait(db, NULL, 1, 0, NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_queue_wait(db, qs, 0, 0, NULL), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "at least one queue") != NULL);
    CHECK_EQ_I(tocsin_queue_wait(db, bad, 1, 0, NULL), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "queue name") != NULL);
    CHECK_EQ_I(tocsin_queue_wait(mem, qs, 1, 0, NULL), TOCSIN_INVALID);
    CHECK_OK(other, tocsin_sub_open(&os, other));
    CHECK_EQ_I(tocsin_queue_wait(db, qs, 1, 0, os), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "another database file") != NULL);
    CHECK_OK(db, tocsin_begin(db));
    CHECK_EQ_I(tocsin_queue_wait(db, qs, 1, 0, NULL), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "inside a transaction") != NULL);
    CHECK_OK(db, tocsin_rollback(db));

    /* nothing was written anywhere */
    CHECK_EQ_I(t_count(db, "_tocsin_notifications"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_events"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_offsets"), 0);
    tocsin_sub_close(os);
    tocsin_sub_close(s);
    tocsin_close(mem);
    tocsin_close(other);
    tocsin_close(db);
}

/* ---- wakes in one process --------------------------------------------------------- */

/* The condition of a wait: has notification `target` been committed? */
typedef struct max_id_at_least {
    tocsin_db *db;
    int64_t target;
    int calls;
} max_id_at_least;

static int max_id_done(void *ctx, int *done) {
    max_id_at_least *c = ctx;
    int64_t max = 0;
    int rc = tocsin_notify_max_id(c->db, &max);
    c->calls++;
    *done = max >= c->target;
    return rc;
}

typedef struct later {
    tocsin_db *db;
    const char *channel;
    int delay_ms;
} later;

static void *notify_later(void *p) {
    later *a = p;
    int64_t id;
    nap_ms(a->delay_ms);
    tocsin_notify(a->db, &id, a->channel, "\"later\"", NULL);
    return NULL;
}

static int failing_check(void *ctx, int *done) {
    (void)ctx;
    *done = 0;
    return TOCSIN_CALLBACK;
}

static void local_wakes(void) {
    tocsin_db *db = t_open("wake_local", NULL), *w = reopen(db, NULL);
    tocsin_wake_opts slow = TOCSIN_WAKE_OPTS_INIT;
    tocsin_sub *s = NULL;
    int i;

    /* a slow watcher: what follows is the direct same-process path. Its
     * safety poll (once a second) is a second, legitimate source of wakes: a
     * round that took longer than that is run again (a loaded machine). */
    slow.poll_ms = 1000;
    slow.no_kernel_events = 1;
    CHECK_OK(db, tocsin_wake_configure(&slow));
    for (i = 0; i < 5; i++) {
        int got[6];
        int64_t max = 0, t0 = t_monotonic_ms();
        CHECK_OK(db, tocsin_sub_open(&s, db));
        CHECK_OK(db, tocsin_sub_drain(s, &got[0]));
        notify(w, "c", "1");
        CHECK_OK(db, tocsin_sub_drain(s, &got[1]));
        /* inside a transaction the wake comes at commit, not at the operation */
        CHECK_OK(w, tocsin_begin(w));
        notify(w, "c", "2");
        CHECK_OK(db, tocsin_sub_drain(s, &got[2]));
        CHECK_OK(w, tocsin_commit(w));
        CHECK_OK(db, tocsin_sub_drain(s, &got[3]));
        /* a rolled-back transaction wakes nobody */
        CHECK_OK(w, tocsin_begin(w));
        notify(w, "c", "3");
        CHECK_OK(w, tocsin_rollback(w));
        CHECK_OK(db, tocsin_sub_drain(s, &got[4]));
        /* reads wake nobody */
        CHECK_OK(w, tocsin_notify_max_id(w, &max));
        CHECK_OK(db, tocsin_sub_drain(s, &got[5]));
        tocsin_sub_close(s);
        s = NULL;
        if (t_monotonic_ms() - t0 >= 900 && i < 4) continue;
        CHECK_EQ_I(got[0], 0);
        CHECK_EQ_I(got[1], 1);
        CHECK_EQ_I(got[2], 0);
        CHECK_EQ_I(got[3], 1);
        CHECK_EQ_I(got[4], 0);
        CHECK_EQ_I(max, 2 * (i + 1));
        CHECK_EQ_I(got[5], 0);
        break;
    }
    CHECK_OK(db, tocsin_wake_configure(NULL));

    /* wakes coalesce; pokes wake and interrupt */
    CHECK_OK(db, tocsin_sub_open(&s, db));
    quiesce(s);
    for (i = 0; i < 5; i++) CHECK_OK(db, tocsin_sub_poke(s));
    CHECK_EQ_I(tocsin_sub_wait(s, 0), TOCSIN_INTERRUPTED);
    CHECK_EQ_I(tocsin_sub_wait(s, 0), TOCSIN_TIMEOUT);
    CHECK_OK(db, tocsin_sub_poke(s));
    CHECK_EQ_I(tocsin_sub_wait_until(s, never_done, NULL, -1), TOCSIN_INTERRUPTED);
    /* the condition is checked at once and again after wakes, until it holds */
    {
        max_id_at_least c = {db, 3, 0};
        later a = {w, "c", 20};
        pthread_t t;
        pthread_create(&t, NULL, notify_later, &a);
        CHECK_EQ_I(tocsin_sub_wait_until(s, max_id_done, &c, 10000), TOCSIN_OK);
        pthread_join(t, NULL);
        CHECK(c.calls >= 2);
        c.target = 100;
        CHECK_EQ_I(tocsin_sub_wait_until(s, max_id_done, &c, 50), TOCSIN_TIMEOUT);
    }
    CHECK_EQ_I(tocsin_sub_wait_until(s, failing_check, NULL, 0), TOCSIN_CALLBACK);
    tocsin_sub_close(s);
    tocsin_close(w);
    tocsin_close(db);
}

/* ---- another process commits ---------------------------------------------------- */

/* A writer forked before the parent opens the file (SQLite state must not
 * cross fork). Protocol: 'r' -> roll back a notify, answer 'R';
 * 'c' -> commit a notify, answer 'C'; 'q' -> exit. */
typedef struct writer {
    pid_t pid;
    int to, from;
} writer;

static void writer_main(const char *path, int in, int out) {
    sqlite3 *conn = NULL;
    tocsin_db *db = NULL;
    char c;
    int rc = 0;
    while (read(in, &c, 1) == 1 && c != 'q') {
        int64_t id;
        if (!db) {
            if (sqlite3_open_v2(path, &conn, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
                tocsin_wrap(&db, conn, NULL) != TOCSIN_OK)
                _exit(3);
            sqlite3_busy_timeout(conn, 5000);
        }
        if (c == 'r') {
            rc |= tocsin_begin(db);
            rc |= tocsin_notify(db, &id, "xp", "\"rolled back\"", NULL);
            rc |= tocsin_rollback(db);
        } else if (c == 'b') { /* a burst: ten commits back to back */
            int k;
            for (k = 0; k < 10; k++) rc |= tocsin_notify(db, &id, "xp", "\"burst\"", NULL);
        } else {
            rc |= tocsin_notify(db, &id, "xp", "\"from the child\"", NULL);
        }
        c = (char)(c - 'a' + 'A');
        if (write(out, &c, 1) != 1) _exit(4);
    }
    tocsin_close(db);
    sqlite3_close(conn);
    _exit(rc ? 1 : 0);
}

static writer writer_start(const char *path) {
    writer w = {0, -1, -1};
    int a[2], b[2];
    if (pipe(a) != 0 || pipe(b) != 0) return w;
    w.pid = fork();
    if (w.pid == 0) {
        close(a[1]);
        close(b[0]);
        writer_main(path, a[0], b[1]);
    }
    close(a[0]);
    close(b[1]);
    w.to = a[1];
    w.from = b[0];
    return w;
}

static int writer_do(writer *w, char c) {
    char r = 0;
    if (write(w->to, &c, 1) != 1) return 0;
    if (c == 'q') return 1;
    return read(w->from, &r, 1) == 1 && r == (char)(c - 'a' + 'A');
}

static int writer_stop(writer *w) {
    int status = -1;
    writer_do(w, 'q');
    close(w->to);
    close(w->from);
    waitpid(w->pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void cross_process_case(const char *name, int wal, int kernel_events) {
    char path[512];
    tocsin_wake_opts wo = TOCSIN_WAKE_OPTS_INIT;
    tocsin_db *db;
    tocsin_sub *s = NULL;
    tocsin_listener *l = NULL;
    tocsin_message *m = NULL;
    size_t n = 0;
    writer w;
    snprintf(path, sizeof path, "%s", t_path(name));
    w = writer_start(path);
    CHECK(w.pid > 0);
    db = t_open(name, NULL);
    if (!wal) {
        sqlite3_stmt *st;
        CHECK_OK(db, tocsin_exec(db, "PRAGMA journal_mode=DELETE"));
        sqlite3_prepare_v2(tocsin_sqlite(db), "PRAGMA journal_mode", -1, &st, NULL);
        CHECK(sqlite3_step(st) == SQLITE_ROW);
        CHECK_STR((const char *)sqlite3_column_text(st, 0), "delete");
        sqlite3_finalize(st);
    }
    wo.no_kernel_events = !kernel_events;
    CHECK_OK(db, tocsin_wake_configure(&wo));
    CHECK_OK(db, tocsin_sub_open(&s, db));
    CHECK_OK(db, tocsin_listen_open(&l, db, "xp", 16));
    CHECK_OK(db, tocsin_wake_configure(NULL));
    quiesce(s);
    /* a transaction the other process rolls back delivers nothing */
    CHECK(writer_do(&w, 'r'));
    CHECK_EQ_I(tocsin_sub_wait(s, 200), TOCSIN_TIMEOUT);
    CHECK_EQ_I(tocsin_listen_next(l, &m, &n, 0), TOCSIN_TIMEOUT);
    CHECK_EQ_I(n, 0);
    /* a commit wakes the subscriber and the listener gets it */
    CHECK(writer_do(&w, 'c'));
    CHECK_EQ_I(tocsin_sub_wait(s, 10000), TOCSIN_OK);
    CHECK_OK(db, tocsin_listen_next(l, &m, &n, 10000));
    CHECK_EQ_I(n, 1);
    if (n == 1) CHECK_STR(m[0].payload, "\"from the child\"");
    tocsin_messages_free(m, n);
    /* and again: the watcher keeps following */
    CHECK(writer_do(&w, 'c'));
    CHECK_OK(db, tocsin_listen_next(l, &m, &n, 10000));
    CHECK_EQ_I(n, 1);
    tocsin_messages_free(m, n);
    CHECK_EQ_I(writer_stop(&w), 0);
    tocsin_listen_close(l);
    tocsin_sub_close(s);
    tocsin_close(db);
}

/* internal (wake.c): what the file's watcher counts as local writes */
int tc_wake_local_writers(tocsin_db *db);

/*
 * Local writes park the watcher (it stops rechecking on the kernel's reports of
 * our own page writes); every way a write ends must end that, and commits of
 * another process right after a local write still wake us.
 */
static void local_writes_park(void) {
    char path[512];
    tocsin_db *db, *other, *tx = NULL;
    tocsin_sub *s = NULL;
    writer w;
    int64_t id;
    int i;
    snprintf(path, sizeof path, "%s", t_path("park"));
    w = writer_start(path);
    CHECK(w.pid > 0);
    db = t_open("park", NULL);
    other = reopen(db, NULL);
    CHECK_EQ_I(tc_wake_local_writers(db), -1); /* no watcher yet */
    CHECK_OK(db, tocsin_sub_open(&s, other));
    CHECK_EQ_I(tc_wake_local_writers(db), 0);
    /* an explicit transaction: counted from BEGIN to COMMIT */
    CHECK_OK(db, tocsin_begin(db));
    CHECK_EQ_I(tc_wake_local_writers(db), 1);
    CHECK_OK(db, tocsin_notify(db, &id, "park", "1", NULL));
    CHECK_OK(db, tocsin_commit(db));
    CHECK_EQ_I(tc_wake_local_writers(db), 0);
    /* rollback; a COMMIT through raw SQL (refused); an operation's own transaction */
    CHECK_OK(db, tocsin_begin(db));
    CHECK_OK(db, tocsin_rollback(db));
    CHECK_EQ_I(tc_wake_local_writers(db), 0);
    CHECK_OK(db, tocsin_begin(db));
    CHECK_EQ_I(tocsin_exec(db, "COMMIT"), TOCSIN_INVALID); /* refused: the transaction goes on */
    CHECK_EQ_I(tc_wake_local_writers(db), 1);
    CHECK_OK(db, tocsin_commit(db));
    CHECK_EQ_I(tc_wake_local_writers(db), 0);
    CHECK_OK(db, tocsin_notify(db, &id, "park", "2", NULL));
    CHECK_EQ_I(tocsin_notify(db, &id, "park", "not json", NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tc_wake_local_writers(db), 0);
    /* transaction handles: commit, rollback */
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    CHECK_EQ_I(tc_wake_local_writers(db), 1);
    CHECK_OK(tx, tocsin_notify(tx, &id, "park", "3", NULL));
    CHECK_OK(tx, tocsin_tx_commit(tx));
    CHECK_EQ_I(tc_wake_local_writers(db), 0);
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    CHECK_OK(tx, tocsin_tx_rollback(tx));
    CHECK_EQ_I(tc_wake_local_writers(db), 0);
    /* another process's commits right after each local one wake the subscriber */
    for (i = 0; i < 20; i++) {
        CHECK_OK(db, tocsin_notify(db, &id, "park", "4", NULL));
        quiesce(s);
        CHECK(writer_do(&w, 'c'));
        CHECK_EQ_I(tocsin_sub_wait(s, 10000), TOCSIN_OK);
    }
    /* a handle closed in the middle of a write ends it too */
    CHECK_OK(db, tocsin_begin(db));
    CHECK_EQ_I(tc_wake_local_writers(other), 1);
    tocsin_close(db);
    CHECK_EQ_I(tc_wake_local_writers(other), 0);
    quiesce(s);
    CHECK(writer_do(&w, 'c'));
    CHECK_EQ_I(tocsin_sub_wait(s, 10000), TOCSIN_OK);
    CHECK_EQ_I(writer_stop(&w), 0);
    tocsin_sub_close(s);
    tocsin_close(other);
}

/* internal (wake.c): whether the file's watcher is saturated */
int tc_wake_saturated(tocsin_db *db);

/*
 * Commits of another process close together, with every subscription's wake
 * pending, saturate the watcher (it stops reading the kernel's reports); a
 * drain, or a new subscription, ends that, and the next commit wakes again.
 * Nothing is lost on the way: every notification reaches the listener.
 */
/* Bursts from the writer until db's watcher saturates (a slow machine may need
 * several to see two commits within 1 ms); 1 when it did within 20 s. */
static int saturate(tocsin_db *db, writer *w, int *bursts) {
    int64_t end = t_monotonic_ms() + 20000;
    while (t_monotonic_ms() < end) {
        int i;
        if (!writer_do(w, 'b')) return 0;
        ++*bursts;
        for (i = 0; i < 100; i++) {
            if (tc_wake_saturated(db) == 1) return 1;
            nap_ms(2);
        }
    }
    return 0;
}

static void saturation(void) {
    char path[512];
    tocsin_db *db;
    tocsin_sub *a = NULL, *b = NULL, *c = NULL;
    tocsin_listener *l = NULL;
    tocsin_message *m = NULL;
    size_t n = 0, got = 0;
    int bursts = 0;
    writer w;
    snprintf(path, sizeof path, "%s", t_path("sat"));
    w = writer_start(path);
    CHECK(w.pid > 0);
    db = t_open("sat", NULL);
    CHECK_OK(db, tocsin_sub_open(&a, db));
    CHECK_OK(db, tocsin_sub_open(&b, db));
    CHECK_OK(db, tocsin_listen_open(&l, db, "xp", 10000));
    CHECK(writer_do(&w, 'c'));
    CHECK_OK(db, tocsin_sub_wait(a, 10000));
    quiesce(a);
    /* bursts of commits, nobody draining: the watcher saturates */
    CHECK(saturate(db, &w, &bursts));
    /* b was never drained: its wake is there */
    CHECK_EQ_I(tocsin_sub_wait(b, 0), TOCSIN_OK);
    /* draining ends it, and the next commit wakes the drained subscription */
    CHECK_OK(db, tocsin_sub_wait(a, 0));
    quiesce(a);
    CHECK(writer_do(&w, 'c'));
    CHECK_OK(db, tocsin_sub_wait(a, 10000));
    /* saturated again, a new subscription ends it too */
    CHECK(saturate(db, &w, &bursts));
    CHECK_OK(db, tocsin_sub_open(&c, db));
    CHECK(tc_wake_saturated(db) == 0);
    CHECK(writer_do(&w, 'c'));
    CHECK_OK(db, tocsin_sub_wait(c, 10000));
    /* every notification arrived: 3 single commits and ten per burst */
    while (got < (size_t)(3 + 10 * bursts) &&
           tocsin_listen_next(l, &m, &n, 10000) == TOCSIN_OK) {
        got += n;
        tocsin_messages_free(m, n);
    }
    CHECK_EQ_I(got, 3 + 10 * bursts);
    CHECK_EQ_I(writer_stop(&w), 0);
    tocsin_listen_close(l);
    tocsin_sub_close(a);
    tocsin_sub_close(b);
    tocsin_sub_close(c);
    tocsin_close(db);
}

static void cross_process(void) {
    CHECK_EQ_I(n_threads(), 1); /* fork below needs a single-threaded process */
    cross_process_case("xp_wal", 1, 1);
    cross_process_case("xp_delete", 0, 1);
    cross_process_case("xp_wal_poll", 1, 0);
    cross_process_case("xp_delete_poll", 0, 0);
    saturation();
    local_writes_park();
}

/* ---- sharing, release, replacement ---------------------------------------------- */

static void hundred_subscribers(void) {
    int threads0 = n_threads(), fds0 = n_fds(), fds1, i;
    tocsin_db *db = t_open("hundred", NULL), *db2 = reopen(db, NULL);
    tocsin_sub *subs[100], *warm = NULL;
    tocsin_listener *l = NULL;
    tocsin_stream_sub *ss = NULL;
    /* One cycle of the same handles first: SQLite keeps the descriptor of a
     * closed connection for reuse while another connection of the process
     * holds locks on the file (closing it would drop those locks). */
    CHECK_OK(db, tocsin_sub_open(&warm, db));
    CHECK_OK(db, tocsin_listen_open(&l, db, "c", 8));
    CHECK_OK(db, tocsin_stream_sub_open(&ss, db2, "t", "c", NULL));
    tocsin_listen_close(l);
    tocsin_stream_sub_close(ss);
    tocsin_sub_close(warm);
    /* the handles that subscribed keep the watcher (their own subscriptions) */
    CHECK_EQ_I(n_threads(), threads0 + 1);
    fds1 = n_fds();
    for (i = 0; i < 100; i++) CHECK_OK(db, tocsin_sub_open(&subs[i], i % 2 ? db2 : db));
    CHECK_EQ_I(n_threads(), threads0 + 1);
    CHECK_OK(db, tocsin_listen_open(&l, db, "c", 8));
    CHECK_OK(db, tocsin_stream_sub_open(&ss, db2, "t", "c", NULL));
    CHECK_EQ_I(n_threads(), threads0 + 1);
    quiesce(subs[0]);
    for (i = 0; i < 100; i++) {
        int woken;
        CHECK_OK(db, tocsin_sub_drain(subs[i], &woken));
    }
    notify(db2, "c", "1");
    for (i = 0; i < 100; i++) CHECK_EQ_I(tocsin_sub_wait(subs[i], 10000), TOCSIN_OK);
    for (i = 0; i < 100; i++) tocsin_sub_close(subs[i]);
    CHECK_EQ_I(n_threads(), threads0 + 1);
    tocsin_listen_close(l);
    tocsin_stream_sub_close(ss);
    CHECK_EQ_I(n_threads(), threads0 + 1);
    CHECK_EQ_I(n_fds(), fds1);
    /* the handle's own subscription (queue waits) goes with the handle */
    {
        const char *q[] = {"none"};
        CHECK_EQ_I(tocsin_queue_wait(db, q, 1, 0, NULL), TOCSIN_TIMEOUT);
        CHECK_EQ_I(n_threads(), threads0 + 1);
    }
    tocsin_close(db2);
    tocsin_close(db);
    CHECK_EQ_I(n_threads(), threads0);
    CHECK_EQ_I(n_fds(), fds0);
}

static void replaced_file(void) {
    char path[512], other_path[512];
    tocsin_db *db, *db2, *other;
    tocsin_sub *s[3];
    tocsin_listener *l = NULL;
    tocsin_stream_sub *ss = NULL;
    tocsin_message *m = NULL;
    size_t n = 0;
    const char *q[] = {"q"};
    int i;
    tocsin_wake_opts wo = TOCSIN_WAKE_OPTS_INIT;
    db = t_open("replaced", NULL);
    snprintf(path, sizeof path, "%s", path_of(db));
    db2 = reopen(db, NULL);
    other = t_open("replacement", NULL);
    snprintf(other_path, sizeof other_path, "%s", path_of(other));
    tocsin_close(other);
    wo.identity_ms = 20;
    CHECK_OK(db, tocsin_wake_configure(&wo));
    for (i = 0; i < 3; i++) CHECK_OK(db, tocsin_sub_open(&s[i], i == 2 ? db2 : db));
    CHECK_OK(db, tocsin_listen_open(&l, db, "c", 8));
    CHECK_OK(db, tocsin_stream_sub_open(&ss, db, "t", "c", NULL));
    CHECK_EQ_I(tocsin_queue_wait(db2, q, 1, 0, NULL), TOCSIN_TIMEOUT);
    CHECK_OK(db, tocsin_wake_configure(NULL));
    CHECK_EQ_I(rename(other_path, path), 0);
    for (i = 0; i < 3; i++) {
        int rc = TOCSIN_OK, k;
        for (k = 0; k < 100 && rc == TOCSIN_OK; k++) rc = tocsin_sub_wait(s[i], 10000);
        CHECK_EQ_I(rc, TOCSIN_REPLACED);
        CHECK(strstr(tocsin_errmsg(NULL), "replaced") != NULL);
        /* sticky */
        CHECK_EQ_I(tocsin_sub_wait(s[i], 0), TOCSIN_REPLACED);
    }
    CHECK_EQ_I(tocsin_listen_next(l, &m, &n, 10000), TOCSIN_REPLACED);
    CHECK(strstr(tocsin_errmsg(NULL), "replaced") != NULL);
    CHECK_EQ_I(tocsin_stream_sub_next(ss, &m, &n, 10000), TOCSIN_REPLACED);
    CHECK(strstr(tocsin_errmsg(NULL), "replaced") != NULL);
    CHECK_EQ_I(tocsin_queue_wait(db2, q, 1, -1, NULL), TOCSIN_REPLACED);
    CHECK(strstr(tocsin_errmsg(db2), "replaced") != NULL);
    /* a new subscription follows the new file */
    {
        tocsin_db *fresh = NULL;
        tocsin_sub *fs = NULL;
        CHECK_OK(fresh, tocsin_open(&fresh, path, NULL));
        CHECK_OK(fresh, tocsin_sub_open(&fs, fresh));
        CHECK_EQ_I(tocsin_sub_wait(fs, 0), TOCSIN_TIMEOUT);
        tocsin_sub_close(fs);
        tocsin_close(fresh);
    }
    for (i = 0; i < 3; i++) tocsin_sub_close(s[i]);
    tocsin_listen_close(l);
    tocsin_stream_sub_close(ss);
    tocsin_close(db2);
    tocsin_close(db);
}

/* A backup restored into the live file keeps its inode (the identity check sees
 * nothing): the ids went back, and a listener or stream subscription past them
 * waited in silence while every new notification or event up to its old position
 * passed unseen. It is now told (TOCSIN_REPLACED). */
static void restored_backup(void) {
    tocsin_db *db = t_open("restored", NULL), *old = t_open("restored_src", NULL), *w;
    tocsin_listener *l = NULL;
    tocsin_stream_sub *ss = NULL, *ahead = NULL;
    tocsin_stream_sub_opts o = TOCSIN_STREAM_SUB_OPTS_INIT;
    tocsin_message *m = NULL;
    size_t n = 0;
    int64_t off = 0;
    int i;
    sqlite3_backup *b;
    notify(old, "ch", "\"old\"");
    CHECK_OK(old, tocsin_stream_publish(old, &off, "t", "0", NULL, NULL));
    for (i = 0; i < 5; i++) {
        notify(db, "ch", "1");
        CHECK_OK(db, tocsin_stream_publish(db, &off, "t", "1", NULL, NULL));
    }
    CHECK_OK(db, tocsin_listen_open(&l, db, "ch", 8));
    o.from_offset = 0;
    CHECK_OK(db, tocsin_stream_sub_open(&ss, db, "t", NULL, &o));
    CHECK_OK(db, tocsin_stream_sub_next(ss, &m, &n, 0));
    CHECK_EQ_I(n, 5);
    tocsin_messages_free(m, n);
    o.from_offset = 1000; /* beyond the end: allowed, and not taken for a restore */
    CHECK_OK(db, tocsin_stream_sub_open(&ahead, db, "t", NULL, &o));
    CHECK_EQ_I(tocsin_stream_sub_next(ahead, &m, &n, 0), TOCSIN_TIMEOUT);
    b = sqlite3_backup_init(tocsin_sqlite(db), "main", tocsin_sqlite(old), "main");
    CHECK(b != NULL);
    if (b) {
        CHECK_EQ_I(sqlite3_backup_step(b, -1), SQLITE_DONE);
        CHECK_EQ_I(sqlite3_backup_finish(b), SQLITE_OK);
    }
    w = reopen(db, NULL);
    notify(w, "ch", "\"new\"");
    CHECK_OK(w, tocsin_stream_publish(w, &off, "t", "2", NULL, NULL));
    CHECK_EQ_I(off, 2);
    CHECK_EQ_I(tocsin_listen_next(l, &m, &n, 10000), TOCSIN_REPLACED);
    CHECK(strstr(tocsin_errmsg(NULL), "went back") != NULL);
    CHECK_EQ_I(tocsin_listen_next(l, &m, &n, 0), TOCSIN_REPLACED); /* stays */
    CHECK_EQ_I(tocsin_stream_sub_next(ss, &m, &n, 10000), TOCSIN_REPLACED);
    CHECK(strstr(tocsin_errmsg(NULL), "went back") != NULL);
    /* it was opened at 5 events: the file went back below what it had handed out */
    CHECK_EQ_I(tocsin_stream_sub_next(ahead, &m, &n, 0), TOCSIN_REPLACED);
    tocsin_listen_close(l);
    tocsin_stream_sub_close(ss);
    tocsin_stream_sub_close(ahead);
    /* subscribed again: the new ones are there */
    CHECK_OK(db, tocsin_listen_open(&l, db, "ch", 8));
    notify(w, "ch", "\"newer\"");
    CHECK_OK(db, tocsin_listen_next(l, &m, &n, 10000));
    CHECK_EQ_I(n, 1);
    tocsin_messages_free(m, n);
    tocsin_listen_close(l);
    tocsin_close(w);
    tocsin_close(old);
    tocsin_close(db);
}

/* ---- listen -------------------------------------------------------------------- */

static void listen(void) {
    tocsin_db *db = t_open("listen", NULL), *w = reopen(db, NULL);
    tocsin_listener *l = NULL;
    tocsin_message *m = NULL;
    size_t n = 0;
    int i;
    notify(w, "ch", "\"old\"");
    CHECK_OK(db, tocsin_listen_open(&l, db, "ch", 4));
    CHECK(tocsin_listen_fd(l) >= 0);
    /* starts at the current maximum: the old one is not delivered */
    CHECK_EQ_I(tocsin_listen_next(l, &m, &n, 0), TOCSIN_TIMEOUT);
    CHECK(m == NULL && n == 0);
    notify(w, "ch", "\"a\"");
    notify(w, "other", "\"b\"");
    notify(w, "ch", "\"c\"");
    CHECK_OK(db, tocsin_listen_next(l, &m, &n, 10000));
    CHECK_EQ_I(n, 2);
    if (n == 2) {
        CHECK_STR(m[0].payload, "\"a\"");
        CHECK_STR(m[1].payload, "\"c\"");
        CHECK_STR(m[1].name, "ch");
        CHECK(m[0].id < m[1].id);
    }
    tocsin_messages_free(m, n);
    /* a rolled-back notify is never delivered */
    CHECK_OK(w, tocsin_begin(w));
    notify(w, "ch", "\"rolled back\"");
    CHECK_OK(w, tocsin_rollback(w));
    CHECK_EQ_I(tocsin_listen_next(l, &m, &n, 100), TOCSIN_TIMEOUT);
    /* bounded buffer: a listener 10 behind keeps the newest 4 */
    CHECK_OK(w, tocsin_begin(w));
    for (i = 0; i < 10; i++) {
        char p[16];
        snprintf(p, sizeof p, "%d", i);
        notify(w, "ch", p);
    }
    CHECK_OK(w, tocsin_commit(w));
    CHECK_OK(db, tocsin_listen_next(l, &m, &n, 10000));
    CHECK_EQ_I(n, 4);
    if (n == 4) {
        CHECK_STR(m[0].payload, "6");
        CHECK_STR(m[3].payload, "9");
    }
    CHECK_EQ_I(tocsin_listen_dropped(l), 6);
    tocsin_messages_free(m, n);
    /* a poke ends a blocked wait */
    CHECK_OK(db, tocsin_listen_poke(l));
    CHECK_EQ_I(tocsin_listen_next(l, &m, &n, -1), TOCSIN_INTERRUPTED);
    /* the listener is independent of the handle it came from; it blocks
     * until another thread's commit arrives */
    tocsin_close(db);
    {
        pthread_t t;
        later a = {w, "ch", 20};
        pthread_create(&t, NULL, notify_later, &a);
        CHECK_EQ_I(tocsin_listen_next(l, &m, &n, 10000), TOCSIN_OK);
        pthread_join(t, NULL);
        CHECK_EQ_I(n, 1);
        if (n == 1) CHECK_STR(m[0].payload, "\"later\"");
        tocsin_messages_free(m, n);
    }
    /* a listener's notifications left undelivered are freed with it */
    notify(w, "ch", "\"left\"");
    tocsin_listen_close(l);
    tocsin_close(w);
}

/* ---- stream subscriptions --------------------------------------------------------- */

static void publish(tocsin_db *db, int k) {
    int64_t off;
    char p[32];
    snprintf(p, sizeof p, "{\"n\":%d}", k);
    CHECK_OK(db, tocsin_stream_publish(db, &off, "t", p, NULL, NULL));
}

static int64_t saved(tocsin_db *db, const char *consumer) {
    int64_t off = -1;
    CHECK_OK(db, tocsin_stream_offset(db, &off, consumer, "t"));
    return off;
}

static void *publish_later(void *p) {
    later *a = p;
    int64_t off;
    nap_ms(a->delay_ms);
    tocsin_stream_publish(a->db, &off, "t", "{\"n\":6}", NULL, NULL);
    return NULL;
}

static void stream_subscribe(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("ssub", &clk), *w = reopen(db, NULL);
    tocsin_stream_sub_opts o = TOCSIN_STREAM_SUB_OPTS_INIT;
    tocsin_stream_sub *ss = NULL;
    tocsin_message *m = NULL;
    size_t n = 0;
    int i;
    for (i = 1; i <= 5; i++) publish(db, i);
    CHECK_OK(db, tocsin_stream_save_offset(db, NULL, "c", "t", 2));
    o.batch = 2;
    o.autosave_every = 3;
    CHECK_OK(db, tocsin_stream_sub_open(&ss, db, "t", "c", &o));
    CHECK(tocsin_stream_sub_fd(ss) >= 0);
    /* replay from the saved offset */
    CHECK_OK(db, tocsin_stream_sub_next(ss, &m, &n, 0));
    CHECK_EQ_I(n, 2);
    if (n == 2) CHECK(m[0].id == 3 && m[1].id == 4);
    tocsin_messages_free(m, n);
    CHECK_OK(db, tocsin_stream_sub_next(ss, &m, &n, 0));
    CHECK_EQ_I(n, 1);
    if (n == 1) CHECK_STR(m[0].payload, "{\"n\":5}");
    tocsin_messages_free(m, n);
    CHECK_EQ_I(tocsin_stream_sub_position(ss), 5);
    CHECK_EQ_I(saved(db, "c"), 2); /* 2 processed so far: below autosave_every */
    CHECK_EQ_I(tocsin_stream_sub_next(ss, &m, &n, 0), TOCSIN_TIMEOUT);
    CHECK_EQ_I(saved(db, "c"), 5); /* the third processed event triggered the save */
    /* then live: another thread publishes while this one waits */
    {
        pthread_t t;
        later a = {w, NULL, 20};
        pthread_create(&t, NULL, publish_later, &a);
        CHECK_OK(db, tocsin_stream_sub_next(ss, &m, &n, 10000));
        pthread_join(t, NULL);
        CHECK_EQ_I(n, 1);
        if (n == 1) CHECK_EQ_I(m[0].id, 6);
        tocsin_messages_free(m, n);
    }
    /* close saves what was handed out */
    CHECK_OK(db, tocsin_stream_sub_close(ss));
    CHECK_EQ_I(saved(db, "c"), 6);

    /* autosave by time, on the handle's clock */
    o = (tocsin_stream_sub_opts)TOCSIN_STREAM_SUB_OPTS_INIT;
    o.autosave_ms = 1000;
    CHECK_OK(db, tocsin_stream_sub_open(&ss, db, "t", "c", &o));
    publish(db, 7);
    CHECK_OK(db, tocsin_stream_sub_next(ss, &m, &n, 10000));
    CHECK_EQ_I(n, 1);
    tocsin_messages_free(m, n);
    CHECK_EQ_I(tocsin_stream_sub_next(ss, &m, &n, 0), TOCSIN_TIMEOUT);
    CHECK_EQ_I(saved(db, "c"), 6);
    clk.now += 1000;
    CHECK_EQ_I(tocsin_stream_sub_next(ss, &m, &n, 0), TOCSIN_TIMEOUT);
    CHECK_EQ_I(saved(db, "c"), 7);
    /* poke ends a blocked wait */
    CHECK_OK(db, tocsin_stream_sub_poke(ss));
    CHECK_EQ_I(tocsin_stream_sub_next(ss, &m, &n, -1), TOCSIN_INTERRUPTED);
    CHECK_OK(db, tocsin_stream_sub_close(ss));

    /* from a given offset, without a consumer; explicit save with one */
    o = (tocsin_stream_sub_opts)TOCSIN_STREAM_SUB_OPTS_INIT;
    o.from_offset = 0;
    CHECK_OK(db, tocsin_stream_sub_open(&ss, db, "t", NULL, &o));
    CHECK_OK(db, tocsin_stream_sub_next(ss, &m, &n, 0));
    CHECK_EQ_I(n, 7);
    tocsin_messages_free(m, n);
    CHECK_OK(db, tocsin_stream_sub_close(ss));
    o.from_offset = 3;
    CHECK_OK(db, tocsin_stream_sub_open(&ss, db, "t", "d", &o));
    CHECK_OK(db, tocsin_stream_sub_next(ss, &m, &n, 0));
    CHECK_EQ_I(n, 4);
    tocsin_messages_free(m, n);
    CHECK_EQ_I(saved(db, "d"), 0);
    CHECK_OK(db, tocsin_stream_sub_save(ss));
    CHECK_EQ_I(saved(db, "d"), 7);
    CHECK_OK(db, tocsin_stream_sub_close(ss));
    tocsin_close(w);
    tocsin_close(db);
}

/* save_on_close: the end of an iteration saves the last event handed on (a
 * rewind marks where an iteration stopped mid-batch); off, close saves nothing */
static void stream_save_on_close(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("ssclose", &clk);
    tocsin_stream_sub_opts o = TOCSIN_STREAM_SUB_OPTS_INIT;
    tocsin_stream_sub *ss = NULL;
    tocsin_message *m = NULL;
    size_t n = 0;
    int i;
    for (i = 1; i <= 5; i++) publish(db, i);
    o.batch = 3;
    o.save_on_close = 1;
    CHECK_OK(db, tocsin_stream_sub_open(&ss, db, "t", "c", &o));
    CHECK_OK(db, tocsin_stream_sub_close(ss)); /* nothing handed out: nothing saved */
    CHECK_EQ_I(saved(db, "c"), 0);
    CHECK_OK(db, tocsin_stream_sub_open(&ss, db, "t", "c", &o));
    CHECK_OK(db, tocsin_stream_sub_next(ss, &m, &n, 0));
    CHECK_EQ_I(n, 3);
    tocsin_messages_free(m, n);
    CHECK_OK(db, tocsin_stream_sub_rewind(ss, 2)); /* events 1 and 2 handed on, then a break */
    CHECK_OK(db, tocsin_stream_sub_close(ss));
    CHECK_EQ_I(saved(db, "c"), 2);
    /* the next subscription resumes after 2 */
    CHECK_OK(db, tocsin_stream_sub_open(&ss, db, "t", "c", &o));
    CHECK_OK(db, tocsin_stream_sub_next(ss, &m, &n, 0));
    CHECK_EQ_I(n, 3);
    if (n == 3) CHECK(m[0].id == 3 && m[2].id == 5);
    tocsin_messages_free(m, n);
    CHECK_OK(db, tocsin_stream_sub_close(ss)); /* the whole batch handed out */
    CHECK_EQ_I(saved(db, "c"), 5);
    /* off (the default of the C struct): close leaves the offset */
    publish(db, 6);
    o.save_on_close = 0;
    CHECK_OK(db, tocsin_stream_sub_open(&ss, db, "t", "c", &o));
    CHECK_OK(db, tocsin_stream_sub_next(ss, &m, &n, 0));
    CHECK_EQ_I(n, 1);
    tocsin_messages_free(m, n);
    CHECK_OK(db, tocsin_stream_sub_close(ss));
    CHECK_EQ_I(saved(db, "c"), 5);
    /* a version-1 struct has no save_on_close (not read) */
    o.version = 1;
    o.save_on_close = 1;
    CHECK_OK(db, tocsin_stream_sub_open(&ss, db, "t", "c", &o));
    CHECK_OK(db, tocsin_stream_sub_next(ss, &m, &n, 0));
    tocsin_messages_free(m, n);
    CHECK_OK(db, tocsin_stream_sub_close(ss));
    CHECK_EQ_I(saved(db, "c"), 5);
    /* it needs a consumer */
    o = (tocsin_stream_sub_opts)TOCSIN_STREAM_SUB_OPTS_INIT;
    o.from_offset = 0;
    o.save_on_close = 1;
    CHECK_EQ_I(tocsin_stream_sub_open(&ss, db, "t", NULL, &o), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "save on close") != NULL);
    CHECK(ss == NULL);
    tocsin_close(db);
}

/* ---- worker waits --------------------------------------------------------------- */

static _Atomic int64_t shared_now;
static int64_t shared_clock(void *ctx) {
    (void)ctx;
    return atomic_load(&shared_now);
}

static tocsin_db *open_shared_clock(const char *path) {
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    tocsin_db *h = NULL;
    o.clock = shared_clock;
    if (tocsin_open(&h, path, &o) != TOCSIN_OK) {
        fprintf(stderr, "open: %s\n", tocsin_errmsg(h));
        exit(2);
    }
    return h;
}

typedef struct waiter {
    tocsin_db *db;
    tocsin_sub *sub;
    const char *queue;
    int64_t deadline;
    int rc, ready;
    int64_t returned_at;
    int64_t claimed_id;
} waiter;

static void *wait_and_claim(void *p) {
    waiter *w = p;
    const char *q[1];
    q[0] = w->queue;
    w->rc = tocsin_queue_wait(w->db, q, 1, w->deadline, w->sub);
    w->returned_at = tocsin_now(w->db);
    w->ready = w->rc == TOCSIN_OK;
    if (w->ready) {
        tocsin_job *jobs = NULL;
        size_t n = 0;
        if (tocsin_queue_claim(w->db, &jobs, &n, w->queue, "w", 1, 60000) == TOCSIN_OK && n == 1)
            w->claimed_id = jobs[0].id;
        tocsin_jobs_free(jobs, n);
    }
    return NULL;
}

static void queue_waits(void) {
    tocsin_db *db, *wdb;
    tocsin_enqueue_opts eo = TOCSIN_ENQUEUE_OPTS_INIT;
    const char *q[] = {"delayed"}, *q2[] = {"paused", "delayed"};
    int64_t id = 0;
    int ready = 0;
    waiter wt;
    pthread_t t;
    {
        tocsin_db *tmp = t_open("qwait", NULL);
        db = open_shared_clock(path_of(tmp));
        tocsin_close(tmp);
    }
    wdb = open_shared_clock(path_of(db));
    atomic_store(&shared_now, 1000);

    /* nothing pending: the deadline ends the wait */
    CHECK_EQ_I(tocsin_queue_wait(db, q, 1, 1000, NULL), TOCSIN_TIMEOUT);
    CHECK(strstr(tocsin_errmsg(db), "deadline") != NULL);
    /* a due job in a paused queue is not claimable */
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "paused", "{}", NULL));
    CHECK_OK(db, tocsin_queue_pause(db, "paused"));
    CHECK_EQ_I(tocsin_queue_wait(db, q2, 2, 1000, NULL), TOCSIN_TIMEOUT);
    /* a due job is claimable at once */
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "delayed", "{}", NULL));
    CHECK_OK(db, tocsin_queue_wait(db, q2, 2, 1000, NULL));
    {
        tocsin_job *jobs = NULL;
        size_t n = 0;
        CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "delayed", "me", 1, 60000));
        CHECK_EQ_I(n, 1);
        if (n == 1) CHECK_OK(db, tocsin_job_ack(db, &ready, jobs[0].id, jobs[0].token));
        tocsin_jobs_free(jobs, n);
    }

    /* a delayed job: the worker wakes when the clock reaches run_at (the
     * test advances its clock, then commits something unrelated as the poke) */
    eo.delay_ms = 5000;
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "delayed", "{}", &eo));
    memset(&wt, 0, sizeof wt);
    wt.db = wdb;
    wt.queue = "delayed";
    wt.deadline = 1000000;
    pthread_create(&t, NULL, wait_and_claim, &wt);
    nap_ms(30);
    notify(db, "unrelated", "1"); /* wakes the worker: nothing due yet */
    nap_ms(30);
    atomic_store(&shared_now, 6000);
    notify(db, "unrelated", "2");
    pthread_join(t, NULL);
    CHECK_OK(wdb, wt.rc);
    CHECK_EQ_I(wt.ready, 1);
    CHECK(wt.returned_at >= 6000);
    CHECK_EQ_I(wt.claimed_id, id);

    /* the deadline passes on the handle's clock */
    memset(&wt, 0, sizeof wt);
    wt.db = wdb;
    wt.queue = "delayed";
    wt.deadline = 7000;
    pthread_create(&t, NULL, wait_and_claim, &wt);
    nap_ms(20);
    atomic_store(&shared_now, 7000);
    notify(db, "unrelated", "3");
    pthread_join(t, NULL);
    CHECK_EQ_I(wt.rc, TOCSIN_TIMEOUT);
    CHECK_EQ_I(wt.ready, 0);
    CHECK(wt.returned_at >= 7000);

    /* a poke on the worker's own subscription cancels the wait */
    memset(&wt, 0, sizeof wt);
    wt.db = wdb;
    wt.queue = "delayed";
    wt.deadline = -1;
    CHECK_OK(wdb, tocsin_sub_open(&wt.sub, wdb));
    pthread_create(&t, NULL, wait_and_claim, &wt);
    nap_ms(20);
    CHECK_OK(db, tocsin_sub_poke(wt.sub));
    pthread_join(t, NULL);
    CHECK_EQ_I(wt.rc, TOCSIN_INTERRUPTED);
    CHECK_EQ_I(wt.ready, 0);
    tocsin_sub_close(wt.sub);
    tocsin_close(wdb);
    tocsin_close(db);

    /* on the system clock, with no commit at all: the worker sleeps until run_at */
    {
        tocsin_db *sdb = t_open("qwait_sys", NULL);
        tocsin_job *jobs = NULL;
        size_t n = 0;
        const char *sq[] = {"soon"};
        tocsin_enqueue_opts so = TOCSIN_ENQUEUE_OPTS_INIT;
        so.delay_ms = 50;
        CHECK_OK(sdb, tocsin_queue_enqueue(sdb, &id, "soon", "{}", &so));
        CHECK_OK(sdb, tocsin_queue_claim(sdb, &jobs, &n, "soon", "me", 1, 60000));
        CHECK_EQ_I(n, 0); /* not yet due */
        CHECK_OK(sdb, tocsin_queue_wait(sdb, sq, 1, tocsin_now(sdb) + 60000, NULL));
        CHECK_OK(sdb, tocsin_queue_claim(sdb, &jobs, &n, "soon", "me", 1, 60000));
        CHECK_EQ_I(n, 1);
        if (n == 1) CHECK(tocsin_now(sdb) >= jobs[0].run_at);
        tocsin_jobs_free(jobs, n);
        tocsin_close(sdb);
    }
}

/* 100 enqueues racing workers that wait, then claim: every job is claimed once. */
#define RACE_JOBS 100
#define RACE_WORKERS 10
static atomic_int race_claimed;
static atomic_int race_seen[RACE_JOBS + 1];
static atomic_int race_stop;

typedef struct racer {
    tocsin_db *db;
    tocsin_sub *sub;
    int errors;
    int one_shot; /* stop after the first job claimed */
    int claimed;
} racer;

static void *race_worker(void *p) {
    racer *r = p;
    const char *q[] = {"race"};
    int64_t deadline = tocsin_now(r->db) + 60000;
    while (!atomic_load(&race_stop)) {
        int rc = tocsin_queue_wait(r->db, q, 1, deadline, r->sub);
        tocsin_job *jobs = NULL;
        size_t n = 0;
        if (rc == TOCSIN_INTERRUPTED) continue;
        if (rc != TOCSIN_OK) {
            r->errors++;
            break;
        }
        if (tocsin_queue_claim(r->db, &jobs, &n, "race", "w", 1, 60000) != TOCSIN_OK) {
            r->errors++;
            continue;
        }
        if (n == 1) {
            int ok = 0;
            if (jobs[0].id >= 1 && jobs[0].id <= RACE_JOBS) atomic_fetch_add(&race_seen[jobs[0].id], 1);
            tocsin_job_ack(r->db, &ok, jobs[0].id, jobs[0].token);
            atomic_fetch_add(&race_claimed, 1);
            r->claimed++;
        }
        tocsin_jobs_free(jobs, n);
        if (r->one_shot && r->claimed) break;
    }
    return NULL;
}

static void *race_producer(void *p) {
    tocsin_db *db = p;
    int i;
    for (i = 0; i < RACE_JOBS; i++) {
        int64_t id;
        tocsin_queue_enqueue(db, &id, "race", "{}", NULL);
        if (i % 7 == 0) nap_ms(rand() % 3);
    }
    return NULL;
}

/* workers: RACE_WORKERS looping waiters, or RACE_JOBS waiters that each wait
 * for and claim exactly one job (100 enqueues racing 100 waits). */
static void enqueue_wait_race(int one_shot) {
    tocsin_db *db = t_open(one_shot ? "race100" : "race", NULL);
    int workers = one_shot ? RACE_JOBS : RACE_WORKERS;
    racer r[RACE_JOBS];
    pthread_t t[RACE_JOBS], prod;
    int i, errors = 0, once = 1, each = 1;
    atomic_store(&race_claimed, 0);
    atomic_store(&race_stop, 0);
    for (i = 0; i <= RACE_JOBS; i++) atomic_store(&race_seen[i], 0);
    for (i = 0; i < workers; i++) {
        r[i].db = reopen(db, NULL);
        r[i].errors = 0;
        r[i].one_shot = one_shot;
        r[i].claimed = 0;
        CHECK_OK(r[i].db, tocsin_sub_open(&r[i].sub, r[i].db));
        pthread_create(&t[i], NULL, race_worker, &r[i]);
    }
    pthread_create(&prod, NULL, race_producer, db);
    pthread_join(prod, NULL);
    for (i = 0; i < 60000 && atomic_load(&race_claimed) < RACE_JOBS; i++) nap_ms(1);
    atomic_store(&race_stop, 1);
    for (i = 0; i < workers; i++) tocsin_sub_poke(r[i].sub);
    for (i = 0; i < workers; i++) {
        pthread_join(t[i], NULL);
        errors += r[i].errors;
        if (one_shot && r[i].claimed != 1) each = 0;
        tocsin_sub_close(r[i].sub);
        tocsin_close(r[i].db);
    }
    CHECK_EQ_I(errors, 0);
    CHECK_EQ_I(atomic_load(&race_claimed), RACE_JOBS);
    for (i = 1; i <= RACE_JOBS; i++)
        if (atomic_load(&race_seen[i]) != 1) once = 0;
    CHECK(once);
    CHECK(each); /* with one-shot waiters: every waiter got exactly one job */
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 0);
    tocsin_close(db);
}

/* ---- the idle stampede ----------------------------------------------------------- */

#define IDLE_WORKERS 8
static atomic_int idle_stop;

typedef struct idler {
    tocsin_db *db;
    tocsin_sub *sub;
    atomic_int writes;   /* write transactions committed or rolled back */
    atomic_int begins;   /* read checks */
    atomic_int immediates;
    int readies, errors;
} idler;

static int on_commit(void *p) {
    atomic_fetch_add(&((idler *)p)->writes, 1);
    return 0;
}
static void on_rollback(void *p) { atomic_fetch_add(&((idler *)p)->writes, 1); }
static int on_trace(unsigned type, void *p, void *stmt, void *x) {
    const char *sql = sqlite3_sql((sqlite3_stmt *)stmt);
    idler *w = p;
    (void)type;
    (void)x;
    if (sql && strncmp(sql, "BEGIN IMMEDIATE", 15) == 0) atomic_fetch_add(&w->immediates, 1);
    else if (sql && strncmp(sql, "BEGIN", 5) == 0) atomic_fetch_add(&w->begins, 1);
    return 0;
}

static void *idle_worker(void *p) {
    idler *w = p;
    const char *q[] = {"A"};
    while (!atomic_load(&idle_stop)) {
        int rc = tocsin_queue_wait(w->db, q, 1, -1, w->sub);
        if (rc == TOCSIN_INTERRUPTED) continue;
        if (rc != TOCSIN_OK) {
            w->errors++;
            break;
        }
        w->readies++;
    }
    return NULL;
}

static void idle_stampede(void) {
    tocsin_db *db = t_open("stampede", NULL);
    static idler w[IDLE_WORKERS];
    pthread_t t[IDLE_WORKERS];
    int i, writes = 0, immediates = 0, begins = 0, readies = 0, errors = 0;
    atomic_store(&idle_stop, 0);
    for (i = 0; i < IDLE_WORKERS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].db = reopen(db, NULL);
        CHECK_OK(w[i].db, tocsin_sub_open(&w[i].sub, w[i].db));
        sqlite3_commit_hook(tocsin_sqlite(w[i].db), on_commit, &w[i]);
        sqlite3_rollback_hook(tocsin_sqlite(w[i].db), on_rollback, &w[i]);
        sqlite3_trace_v2(tocsin_sqlite(w[i].db), SQLITE_TRACE_STMT, on_trace, &w[i]);
        pthread_create(&t[i], NULL, idle_worker, &w[i]);
    }
    for (i = 0; i < 1000; i++) {
        int64_t id;
        CHECK_OK(db, tocsin_queue_enqueue(db, &id, "B", "{}", NULL));
    }
    quiesce(w[0].sub);
    atomic_store(&idle_stop, 1);
    for (i = 0; i < IDLE_WORKERS; i++) tocsin_sub_poke(w[i].sub);
    for (i = 0; i < IDLE_WORKERS; i++) {
        pthread_join(t[i], NULL);
        writes += atomic_load(&w[i].writes);
        immediates += atomic_load(&w[i].immediates);
        begins += atomic_load(&w[i].begins);
        readies += w[i].readies;
        errors += w[i].errors;
        tocsin_sub_close(w[i].sub);
        tocsin_close(w[i].db);
    }
    CHECK_EQ_I(errors, 0);
    CHECK_EQ_I(readies, 0);
    CHECK_EQ_I(writes, 0);
    CHECK_EQ_I(immediates, 0);
    /* they did wake and look (read-only) */
    CHECK(begins > IDLE_WORKERS);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE queue = 'B'"), 1000);
    tocsin_close(db);
}

/* ---- lock safety ----------------------------------------------------------------- */

/* In a child: does another process hold a lock on SQLite's lock bytes? Bit 1:
 * the database's shared/pending range; bit 2: the -shm's lock bytes. */
static int probe_locks(const char *db_path) {
    char shm[600];
    int result = 0, fd;
    struct flock fl;
    pid_t pid;
    int status = 0;
    snprintf(shm, sizeof shm, "%s-shm", db_path);
    pid = fork();
    if (pid == 0) {
        if ((fd = open(db_path, O_RDWR)) >= 0) {
            memset(&fl, 0, sizeof fl);
            fl.l_type = F_WRLCK;
            fl.l_whence = SEEK_SET;
            fl.l_start = 0x40000000; /* PENDING_BYTE, RESERVED, then the shared range */
            fl.l_len = 512;
            if (fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK) result |= 1;
        }
        if ((fd = open(shm, O_RDWR)) >= 0) {
            memset(&fl, 0, sizeof fl);
            fl.l_type = F_WRLCK;
            fl.l_whence = SEEK_SET;
            fl.l_start = 120; /* the WAL index lock bytes and the DMS byte */
            fl.l_len = 9;
            if (fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK) result |= 2;
        }
        _exit(result);
    }
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void lock_safety(void) {
    tocsin_db *db = t_open("locks", NULL), *w = reopen(db, NULL), *ctl;
    tocsin_sub *s = NULL;
    char ctl_path[512], shm[600];
    int i, fd;
    notify(db, "c", "0");
    CHECK_OK(db, tocsin_sub_open(&s, db)); /* the watcher runs, inotify on */
    CHECK_EQ_I(probe_locks(path_of(db)), 3);
    for (i = 0; i < 20; i++) {
        notify(w, "c", "1");
        CHECK_EQ_I(tocsin_sub_wait(s, 10000), TOCSIN_OK);
    }
    quiesce(s);
    CHECK_EQ_I(probe_locks(path_of(db)), 3);
    /* stopping the watcher (closing its connection) keeps them too */
    tocsin_sub_close(s);
    CHECK_EQ_I(probe_locks(path_of(db)), 3);
    tocsin_close(w);
    tocsin_close(db);

    /* control: opening and closing the file directly drops the process's
     * locks, and the probe sees it */
    ctl = t_open("locks_control", NULL);
    notify(ctl, "c", "0");
    snprintf(ctl_path, sizeof ctl_path, "%s", path_of(ctl));
    snprintf(shm, sizeof shm, "%s-shm", ctl_path);
    CHECK_EQ_I(probe_locks(ctl_path), 3);
    if ((fd = open(ctl_path, O_RDONLY)) >= 0) close(fd);
    if ((fd = open(shm, O_RDONLY)) >= 0) close(fd);
    CHECK_EQ_I(probe_locks(ctl_path), 0);
    tocsin_close(ctl);
}

void suite_wake(void) {
    cross_process(); /* first: it forks before any thread exists */
    invalid_args();
    local_wakes();
    hundred_subscribers();
    replaced_file();
    restored_backup();
    listen();
    stream_subscribe();
    stream_save_on_close();
    queue_waits();
    enqueue_wait_race(0);
    enqueue_wait_race(1);
    idle_stampede();
    lock_safety();
}
