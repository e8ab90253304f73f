/*
 * Core hardening (issue 8): fork, busy hosts, stale snapshots, racing
 * opens, hostile durations and texts, replaced files, stream offsets.
 * Each test reproduces a defect class found by trying the core adversarially.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

/* Waits for child pid; 1 when it exited with status 0. */
static int child_ok(pid_t pid) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* ---- fork ----------------------------------------------------------------- */

typedef struct writer {
    const char *path;
    atomic_int stop;
    int commits;
} writer;

/* Commits in a loop on its own handle: every commit takes the wake engine's
 * lock and SQLite's global ones, so a fork lands inside them now and then. */
static void *writer_main(void *p) {
    writer *w = p;
    tocsin_db *db = NULL;
    int64_t id;
    if (tocsin_open(&db, w->path, NULL) != TOCSIN_OK) return NULL;
    while (!atomic_load(&w->stop))
        if (tocsin_queue_enqueue(db, &id, "busy", "{}", NULL) == TOCSIN_OK) w->commits++;
    tocsin_close(db);
    return NULL;
}

/* Under AddressSanitizer every fork copies the process's shadow memory (the
 * fork-heavy tests below took 150 s of system time there, 18 s without it),
 * and GCC 12's libasan does not hold its allocator lock across fork: a child
 * forked while the writer thread is inside malloc hangs in ASan's allocator
 * (seen with gdb), not in tocsin. So the sanitized build forks fewer
 * children and without the concurrent writer; the plain build runs the same
 * code paths with all of them and the writer. */
#ifdef __SANITIZE_ADDRESS__
#define FORK_SCALE 5
#define FORK_WRITER 0
#else
#define FORK_SCALE 1
#define FORK_WRITER 1
#endif

#define FORK_SUBS 200
#define FORK_CHILDREN (200 / FORK_SCALE)

static void fork_with_live_subscriptions(void) {
    tocsin_db *db = t_open("fork_parent", NULL);
    char path[512], child_dir[512];
    tocsin_sub *subs[FORK_SUBS];
    writer w;
    pthread_t th;
    int i, ok = 0, woken = 0;
    int64_t id;
    snprintf(path, sizeof path, "%s", sqlite3_db_filename(tocsin_sqlite(db), "main"));
    snprintf(child_dir, sizeof child_dir, "%s", path);
    *strrchr(child_dir, '/') = 0;
    for (i = 0; i < FORK_SUBS; i++) CHECK_OK(db, tocsin_sub_open(&subs[i], db));
    w.path = path;
    atomic_init(&w.stop, 0);
    w.commits = 0;
    if (FORK_WRITER) CHECK(pthread_create(&th, NULL, writer_main, &w) == 0);
    for (i = 0; i < FORK_CHILDREN; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            /* A hang here is the defect: the alarm turns it into a failure. */
            char own[600];
            tocsin_db *c = NULL;
            tocsin_sub *cs = NULL;
            int64_t cid;
            int woke = 0;
            alarm(90);
            snprintf(own, sizeof own, "%s/fork_child_%d.db", child_dir, i);
            unlink(own);
            if (tocsin_open(&c, own, NULL) != TOCSIN_OK) _exit(3);
            if (tocsin_queue_enqueue(c, &cid, "q", "{\"child\":true}", NULL) != TOCSIN_OK) _exit(4);
            /* an inherited handle is refused, and its close releases nothing of the parent's */
            {
                tocsin_db *tx = NULL;
                if (tocsin_queue_enqueue(db, &cid, "q", "{}", NULL) != TOCSIN_CLOSED) _exit(10);
                if (!strstr(tocsin_errmsg(db), "opened before fork()")) _exit(11);
                if (tocsin_exec(db, "CREATE TABLE x(y)") != TOCSIN_CLOSED) _exit(12);
                if (tocsin_tx_begin(db, &tx) != TOCSIN_CLOSED || tx) _exit(13);
                if (tocsin_begin(db) != TOCSIN_CLOSED) _exit(14);
                if (tocsin_sqlite_enter(db) != TOCSIN_CLOSED) _exit(15);
                {   /* nor is anything opened from it */
                    tocsin_sub *ns = NULL;
                    tocsin_listener *nl = NULL;
                    if (tocsin_sub_open(&ns, db) != TOCSIN_CLOSED || ns) _exit(17);
                    if (tocsin_listen_open(&nl, db, "c", 8) != TOCSIN_CLOSED || nl) _exit(18);
                }
                if (tocsin_close(db) != TOCSIN_OK) _exit(16);
            }
            /* inherited subscriptions report an error, never wait */
            if (tocsin_sub_wait(subs[0], 1000) != TOCSIN_CLOSED) _exit(5);
            if (tocsin_sub_drain(subs[1], &woke) != TOCSIN_CLOSED) _exit(6);
            /* its own subscriptions work */
            if (tocsin_sub_open(&cs, c) != TOCSIN_OK) _exit(7);
            if (tocsin_queue_enqueue(c, &cid, "q", "{}", NULL) != TOCSIN_OK) _exit(8);
            if (tocsin_sub_wait(cs, 5000) != TOCSIN_OK) _exit(9);
            tocsin_sub_close(cs);
            tocsin_close(c);
            unlink(own);
            _exit(0);
        }
        ok += pid > 0 && child_ok(pid);
    }
    CHECK_EQ_I(ok, FORK_CHILDREN);
    atomic_store(&w.stop, 1);
    if (FORK_WRITER) {
        pthread_join(th, NULL);
        CHECK(w.commits > 0);
    }
    /* the parent's handle still works, its file as it was */
    CHECK_EQ_I(t_count(db, "sqlite_master WHERE name = 'x'"), 0);
    /* the parent keeps receiving */
    for (i = 0; i < FORK_SUBS; i++) tocsin_sub_drain(subs[i], &woken);
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "{}", NULL));
    woken = 0;
    for (i = 0; i < FORK_SUBS; i++) woken += tocsin_sub_wait(subs[i], 5000) == TOCSIN_OK;
    CHECK_EQ_I(woken, FORK_SUBS);
    for (i = 0; i < FORK_SUBS; i++) tocsin_sub_close(subs[i]);
    tocsin_close(db);
}

/* ---- racing first opens ---------------------------------------------------- */

#define RACE_PROCS 16
#define RACE_ROUNDS (50 / FORK_SCALE)

static void racing_first_opens(void) {
    int round, failed = 0;
    for (round = 0; round < RACE_ROUNDS; round++) {
        char path[512];
        int gate[2], i;
        pid_t pids[RACE_PROCS];
        snprintf(path, sizeof path, "%s", t_path("open_race"));
        if (pipe(gate) != 0) {
            CHECK(0);
            return;
        }
        for (i = 0; i < RACE_PROCS; i++) {
            pids[i] = fork();
            if (pids[i] == 0) {
                tocsin_db *c = NULL;
                char ch;
                int64_t id;
                close(gate[1]);
                alarm(90);
                if (read(gate[0], &ch, 1) != 0) _exit(2); /* released when the gate closes */
                if (tocsin_open(&c, path, NULL) != TOCSIN_OK) {
                    fprintf(stderr, "open race: %s\n", tocsin_errmsg(c));
                    _exit(3);
                }
                if (tocsin_queue_enqueue(c, &id, "q", "{}", NULL) != TOCSIN_OK) _exit(4);
                tocsin_close(c);
                _exit(0);
            }
        }
        close(gate[0]);
        close(gate[1]);
        for (i = 0; i < RACE_PROCS; i++) failed += !(pids[i] > 0 && child_ok(pids[i]));
    }
    CHECK_EQ_I(failed, 0);
    {
        tocsin_db *db = NULL;
        CHECK_OK(db, tocsin_open(&db, t_path("open_race_check"), NULL));
        tocsin_close(db);
    }
}

/* ---- busy hosts: a host connection with no busy timeout ---------------------- */

/* A host's connection as the sqlite3 shell makes it: rollback journal, no
 * busy handler; tocsin wraps it (what the extension does). */
static tocsin_db *host_conn(const char *path, sqlite3 **out_conn, int busy_ms) {
    sqlite3 *conn = NULL;
    tocsin_db *db = NULL;
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    o.busy_timeout_ms = busy_ms;
    if (sqlite3_open(path, &conn) != SQLITE_OK) return NULL;
    sqlite3_exec(conn, "PRAGMA journal_mode=DELETE", NULL, NULL, NULL);
    if (tocsin_wrap(&db, conn, &o) != TOCSIN_OK) {
        tocsin_close(db);
        sqlite3_close(conn);
        return NULL;
    }
    *out_conn = conn;
    return db;
}

#define BUSY_PROCS 2
#define BUSY_ENQUEUES 300

/* The file under a handle replaced (sqlite3_backup into its connection, a
 * restore): the schema the handle had checked is gone. The call that meets it
 * fails naming the table; the next one checks the schema again and installs it. */
static void replaced_file_is_checked_again(void) {
    sqlite3 *conn = NULL, *empty = NULL;
    sqlite3_backup *b;
    tocsin_db *db = host_conn(t_path("replaced_main"), &conn, 0);
    int64_t id = 0;
    CHECK(db != NULL);
    if (!db) return;
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "1", NULL));
    CHECK_EQ_I(sqlite3_open(":memory:", &empty), SQLITE_OK);
    CHECK_EQ_I(sqlite3_exec(empty, "CREATE TABLE app(x)", NULL, NULL, NULL), SQLITE_OK);
    b = sqlite3_backup_init(conn, "main", empty, "main");
    CHECK(b != NULL);
    if (b) {
        CHECK_EQ_I(sqlite3_backup_step(b, -1), SQLITE_DONE);
        sqlite3_backup_finish(b);
    }
    CHECK(tocsin_queue_enqueue(db, &id, "q", "1", NULL) != TOCSIN_OK);
    CHECK(strstr(tocsin_errmsg(db), "no such table") != NULL);
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "2", NULL));
    CHECK_EQ_I(id, 1);
    tocsin_close(db);
    sqlite3_close(conn);
    sqlite3_close(empty);
}

/* A host's transaction that has not touched the file (BEGIN, then a tocsin
 * call first) while another connection holds the write lock: the call waits
 * for the lock like the host's own INSERT would, and times out as a wait
 * (never "holds a read lock", which its own first read -- the schema check of
 * a handle's first call, a claim's -- used to cause), leaving the host's
 * transaction usable; with the lock free, the same calls succeed in it. */
static void host_tx_first_call_waits(void) {
    static const char *const modes[] = {"PRAGMA journal_mode=WAL", "PRAGMA journal_mode=DELETE"};
    int m;
    for (m = 0; m < 2; m++) {
        char path[512];
        sqlite3 *holder = NULL, *conn = NULL;
        tocsin_db *first = NULL, *db;
        int op;
        snprintf(path, sizeof path, "%s", t_path(m ? "host_tx_first_delete" : "host_tx_first_wal"));
        first = host_conn(path, &holder, 0);
        CHECK(first != NULL);
        if (!first) return;
        CHECK_EQ_I(sqlite3_exec(holder, modes[m], NULL, NULL, NULL), SQLITE_OK);
        CHECK_OK(first, tocsin_bootstrap(first, NULL));
        tocsin_close(first);
        for (op = 0; op < 3; op++) {
            int64_t id;
            tocsin_job *jobs = NULL;
            size_t got = 0;
            int rc;
            db = host_conn(path, &conn, 50); /* a fresh handle: its first call checks the schema */
            CHECK(db != NULL);
            if (!db) break;
            CHECK_EQ_I(sqlite3_exec(holder, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
            CHECK_EQ_I(sqlite3_exec(conn, "BEGIN", NULL, NULL, NULL), SQLITE_OK);
            rc = op == 0   ? tocsin_queue_enqueue(db, &id, "q", "1", NULL)
                 : op == 1 ? tocsin_notify(db, &id, "c", "1", NULL)
                           : tocsin_queue_claim(db, &jobs, &got, "q", "w", 1, 1000);
            CHECK_EQ_I(rc, TOCSIN_BUSY);
            CHECK(strstr(tocsin_errmsg(db), "waited") != NULL);
            CHECK(strstr(tocsin_errmsg(db), "read lock") == NULL);
            CHECK_EQ_I(sqlite3_exec(holder, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
            rc = op == 0   ? tocsin_queue_enqueue(db, &id, "q", "1", NULL)
                 : op == 1 ? tocsin_notify(db, &id, "c", "1", NULL)
                           : tocsin_queue_claim(db, &jobs, &got, "q", "w", 1, 1000);
            CHECK_OK(db, rc);
            tocsin_jobs_free(jobs, got);
            CHECK_EQ_I(sqlite3_exec(conn, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
            tocsin_close(db);
            sqlite3_close(conn);
        }
        sqlite3_close(holder);
    }
}

static void busy_host_connections(void) {
    char path[512];
    pid_t pids[BUSY_PROCS];
    int i, ok = 0;
    sqlite3 *conn = NULL;
    tocsin_db *db;
    snprintf(path, sizeof path, "%s", t_path("busy_host"));
    db = host_conn(path, &conn, 0);
    CHECK(db != NULL);
    if (!db) return;
    CHECK_OK(db, tocsin_bootstrap(db, NULL));
    for (i = 0; i < BUSY_PROCS; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            sqlite3 *cc = NULL;
            /* a generous budget: the test is about waiting at all, not about a loaded machine */
            tocsin_db *c = host_conn(path, &cc, 30000);
            int n, failures = 0;
            alarm(120);
            if (!c) _exit(2);
            for (n = 0; n < BUSY_ENQUEUES; n++) {
                int64_t id;
                tocsin_job *jobs = NULL;
                size_t got = 0;
                char *stats = NULL;
                if (tocsin_queue_enqueue(c, &id, "q", "{}", NULL) != TOCSIN_OK) failures++;
                /* reads and claims wait too */
                if (tocsin_queue_stats(c, &stats, "q") != TOCSIN_OK) failures++;
                tocsin_free(stats);
                if (tocsin_queue_claim(c, &jobs, &got, "q", "w", 1, 60000) != TOCSIN_OK) failures++;
                tocsin_jobs_free(jobs, got);
            }
            if (failures) fprintf(stderr, "busy host: %d failures: %s\n", failures, tocsin_errmsg(c));
            tocsin_close(c);
            sqlite3_close(cc);
            _exit(failures ? 3 : 0);
        }
    }
    for (i = 0; i < BUSY_PROCS; i++) ok += pids[i] > 0 && child_ok(pids[i]);
    CHECK_EQ_I(ok, BUSY_PROCS);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), BUSY_PROCS * BUSY_ENQUEUES);
    tocsin_close(db);
    sqlite3_close(conn);
}

/* A lock held past the budget surfaces as TOCSIN_BUSY with SQLite's BUSY
 * alongside, on the write path and on the read path. */
static void busy_timeout_is_busy(void) {
    char path[512];
    sqlite3 *conn = NULL, *holder = NULL;
    tocsin_db *db;
    int64_t id = 0;
    char *stats = NULL;
    snprintf(path, sizeof path, "%s", t_path("busy_timeout"));
    db = host_conn(path, &conn, 30);
    CHECK(db != NULL);
    if (!db) return;
    CHECK_OK(db, tocsin_bootstrap(db, NULL));
    CHECK(sqlite3_open(path, &holder) == SQLITE_OK);
    CHECK(sqlite3_exec(holder, "BEGIN EXCLUSIVE", NULL, NULL, NULL) == SQLITE_OK);
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", NULL), TOCSIN_BUSY);
    CHECK_EQ_I(tocsin_sqlite_errcode(db) & 0xff, SQLITE_BUSY);
    CHECK(strstr(tocsin_errmsg(db), "locked") != NULL);
    CHECK_EQ_I(tocsin_queue_stats(db, &stats, "q"), TOCSIN_BUSY);
    CHECK(stats == NULL);
    sqlite3_exec(holder, "ROLLBACK", NULL, NULL, NULL);
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "{}", NULL));
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 1);
    sqlite3_close(holder);
    tocsin_close(db);
    sqlite3_close(conn);
}

/* The thread's own bound on lock waits (tocsin_thread_timeout) ends them before
 * a long busy timeout: on tocsin's connections (SQLite's busy handler) and on a
 * host's (tocsin's own retry). Without it these calls would wait 60 s. */
static void thread_timeout_bounds_lock_waits(void) {
    char path[512];
    sqlite3 *conn = NULL, *holder = NULL;
    tocsin_db *db = NULL, *host, *tx = NULL;
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    int64_t id = 0;
    snprintf(path, sizeof path, "%s", t_path("thread_timeout"));
    o.busy_timeout_ms = 60000;
    CHECK_OK(db, tocsin_open(&db, path, &o));
    host = host_conn(path, &conn, 60000);
    CHECK(host != NULL);
    if (!host) return;
    CHECK(sqlite3_open(path, &holder) == SQLITE_OK);
    CHECK(sqlite3_exec(holder, "BEGIN EXCLUSIVE", NULL, NULL, NULL) == SQLITE_OK);
    tocsin_thread_timeout(0);
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", NULL), TOCSIN_BUSY);
    CHECK(strstr(tocsin_errmsg(db), "locked") != NULL);
    CHECK_EQ_I(tocsin_queue_enqueue(host, &id, "q", "{}", NULL), TOCSIN_BUSY);
    tocsin_thread_timeout(30);
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", NULL), TOCSIN_BUSY);
    CHECK_EQ_I(tocsin_queue_enqueue(host, &id, "q", "{}", NULL), TOCSIN_BUSY);
    CHECK_EQ_I(tocsin_tx_begin(db, &tx), TOCSIN_BUSY);
    CHECK(tx == NULL);
    tocsin_thread_timeout(-1); /* removed: the next waits get the busy timeout again */
    sqlite3_exec(holder, "ROLLBACK", NULL, NULL, NULL);
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "{}", NULL));
    CHECK_OK(host, tocsin_queue_enqueue(host, &id, "q", "{}", NULL));
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 2);
    sqlite3_close(holder);
    tocsin_close(host);
    sqlite3_close(conn);
    tocsin_close(db);
}

/* ---- stale WAL snapshots ------------------------------------------------------ */

static sqlite3 *t_other_conn;

/* An SQL function that commits on another connection between rows. */
static void commit_elsewhere(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    (void)argc;
    (void)argv;
    sqlite3_exec(t_other_conn, "INSERT INTO side VALUES (1)", NULL, NULL, NULL);
    sqlite3_result_int(ctx, 1);
}

static void stale_snapshot_fails_at_once(void) {
    tocsin_db *db = t_open("stale", NULL), *other = NULL, *host = NULL;
    sqlite3 *conn = tocsin_sqlite(db), *hc = NULL;
    sqlite3_stmt *st = NULL;
    int64_t id;
    int rc;
    char path[512];
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    snprintf(path, sizeof path, "%s", sqlite3_db_filename(conn, "main"));
    /* a long budget: a retry of the unretryable would show as a hang */
    o.busy_timeout_ms = 60000;
    tocsin_close(db);
    CHECK_OK(db, tocsin_open(&db, path, &o));
    conn = tocsin_sqlite(db);
    CHECK_OK(other, tocsin_open(&other, path, NULL));
    CHECK_OK(db, tocsin_exec(db, "CREATE TABLE side(x)"));

    /* On a host's connection, which keeps transaction control: */
    CHECK(sqlite3_open(path, &hc) == SQLITE_OK);
    CHECK_OK(host, tocsin_wrap(&host, hc, &o));
    /* a failing script that opened a transaction leaves none behind */
    CHECK_EQ_I(tocsin_exec(host, "BEGIN; INSERT INTO side VALUES (1); INSERT INTO nope VALUES (1)"),
               TOCSIN_ERROR);
    CHECK_EQ_I(tocsin_in_transaction(host), 0);
    CHECK(t_count(db, "side") == 0);
    /* inside the caller's transaction, a failure leaves it open, as it was */
    CHECK_OK(host, tocsin_begin(host));
    CHECK_EQ_I(tocsin_exec(host, "INSERT INTO side VALUES (2); INSERT INTO nope VALUES (1)"), TOCSIN_ERROR);
    CHECK_EQ_I(tocsin_in_transaction(host), 1);
    CHECK_OK(host, tocsin_rollback(host));

    /* a stale BEGIN: read, another connection commits, then write */
    CHECK_OK(host, tocsin_exec(host, "BEGIN"));
    CHECK(t_count(host, "_tocsin_jobs") == 0);
    CHECK_OK(other, tocsin_queue_enqueue(other, &id, "q", "{}", NULL));
    rc = tocsin_queue_enqueue(host, &id, "q", "{}", NULL);
    CHECK_EQ_I(rc, TOCSIN_BUSY);
    CHECK(strstr(tocsin_errmsg(host), "stale") != NULL);
    CHECK_EQ_I(tocsin_sqlite_errcode(host), SQLITE_BUSY_SNAPSHOT);
    CHECK_OK(host, tocsin_exec(host, "ROLLBACK"));
    tocsin_close(host);
    sqlite3_close(hc);

    /* one statement over many rows, another connection committing in between */
    CHECK_OK(db, tocsin_register_sql(db));
    t_other_conn = tocsin_sqlite(other);
    CHECK(sqlite3_create_function(conn, "t_commit_elsewhere", 0, SQLITE_UTF8, NULL,
                                  commit_elsewhere, NULL, NULL) == SQLITE_OK);
    CHECK(sqlite3_prepare_v2(conn,
                             "SELECT t_commit_elsewhere(), tocsin_enqueue('q', value)"
                             " FROM json_each('[1,2,3]')",
                             -1, &st, NULL) == SQLITE_OK);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    }
    CHECK(rc != SQLITE_DONE);
    CHECK(strstr(sqlite3_errmsg(conn), "stale") != NULL);
    sqlite3_finalize(st);
    tocsin_close(other);
    tocsin_close(db);
}

/* A host's connection runs without extended result codes (SQLite's default):
 * sqlite3_step returns SQLITE_BUSY for a stale snapshot and SQLITE_CONSTRAINT
 * for a UNIQUE failure. The core reads the extended code from the connection,
 * so the messages and the no-retry rule are those of its own connections. */
static void host_without_extended_codes(void) {
    tocsin_db *writer = t_open("hostx", NULL), *db = NULL;
    sqlite3 *conn = NULL;
    tocsin_enqueue_opts eo = TOCSIN_ENQUEUE_OPTS_INIT;
    tocsin_job *jobs = NULL;
    size_t n = 0;
    int64_t id = 0, live = 0, dead = 0;
    int ok = -1, rc;
    char path[512];
    snprintf(path, sizeof path, "%s", sqlite3_db_filename(tocsin_sqlite(writer), "main"));
    CHECK(sqlite3_open(path, &conn) == SQLITE_OK);
    CHECK(sqlite3_extended_result_codes(conn, 0) == SQLITE_OK);
    CHECK_OK(db, tocsin_wrap(&db, conn, NULL));

    /* a stale read snapshot fails at once, named as such */
    CHECK(sqlite3_exec(conn, "BEGIN; SELECT count(*) FROM _tocsin_jobs", NULL, NULL, NULL) == SQLITE_OK);
    CHECK_OK(writer, tocsin_queue_enqueue(writer, &id, "q", "{}", NULL));
    rc = tocsin_queue_enqueue(db, &id, "q", "{}", NULL);
    CHECK_EQ_I(rc, TOCSIN_BUSY);
    CHECK(strstr(tocsin_errmsg(db), "stale") != NULL);
    CHECK_EQ_I(tocsin_sqlite_errcode(db), SQLITE_BUSY_SNAPSHOT);
    CHECK(sqlite3_exec(conn, "ROLLBACK", NULL, NULL, NULL) == SQLITE_OK);

    /* a requeue that meets a live job's unique key says so */
    eo.unique_key = "k";
    eo.max_attempts = 1;
    CHECK_OK(db, tocsin_queue_enqueue(db, &dead, "u", "1", &eo));
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "u", "w", 1, 60000));
    CHECK(n == 1);
    CHECK_OK(db, tocsin_job_fail(db, &ok, dead, n ? jobs[0].token : 0, "boom"));
    CHECK_EQ_I(ok, 1);
    tocsin_jobs_free(jobs, n);
    CHECK_OK(db, tocsin_queue_enqueue(db, &live, "u", "2", &eo));
    CHECK(live != dead);
    CHECK_EQ_I(tocsin_dead_requeue(db, &ok, dead), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "holds the same unique_key") != NULL);
    CHECK_EQ_I(t_count(db, "_tocsin_dead"), 1);
    tocsin_close(db);
    sqlite3_close(conn);
    tocsin_close(writer);
}

/* ---- hostile durations and instants ------------------------------------------ */

static int64_t max_clock(void *ctx) {
    (void)ctx;
    return INT64_MAX;
}

static void durations_never_wrap(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("durations", &clk);
    int64_t n = -1, token = 0, until = 0, offset;
    int ok = -1;
    tocsin_trim_opts to = TOCSIN_TRIM_OPTS_INIT;
    /* out of range: a clear error naming the argument, nothing written */
    CHECK_EQ_I(tocsin_result_save(db, 1, "1", INT64_MAX), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "ttl_ms") != NULL);
    CHECK_EQ_I(tocsin_result_save_error(db, 1, "E", "m", -1), TOCSIN_INVALID);
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 0);
    CHECK_EQ_I(tocsin_lock_acquire(db, &token, &until, "l", "me", INT64_MAX), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_notify_prune(db, &n, INT64_MAX, 0), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "max_age_ms") != NULL);
    CHECK_EQ_I(tocsin_notify_set_autotrim(db, INT64_MAX, 0, 1), TOCSIN_INVALID);
    CHECK_EQ_I(t_count(db, "_tocsin_meta WHERE key = 'notify_autotrim'"), 0);
    to.max_age_ms = INT64_MAX;
    CHECK_EQ_I(tocsin_stream_trim(db, &n, "t", &to), TOCSIN_INVALID);
    CHECK_EQ_I(t_count(db, "_tocsin_locks"), 0);
    /* the largest valid ttl saturates instead of wrapping */
    CHECK_OK(db, tocsin_result_save(db, 1, "1", TOCSIN_MAX_TIME_MS));
    CHECK_EQ_I(t_count(db, "_tocsin_results WHERE expires_at = 253402300799999"), 1);
    /* a host clock beyond the range is clamped: leases end at the bound */
    tocsin_set_clock(db, max_clock, NULL);
    CHECK_EQ_I(tocsin_now(db), TOCSIN_MAX_TIME_MS);
    CHECK_OK(db, tocsin_lock_acquire(db, &token, &until, "l", "me", 1000));
    CHECK_EQ_I(until, TOCSIN_MAX_TIME_MS);
    CHECK_OK(db, tocsin_lock_renew(db, &ok, "l", "me", token, 1000));
    CHECK_EQ_I(ok, 1);
    tocsin_set_clock(db, t_clock_fn, &clk);
    /* stream offsets: none beyond the last one handed out */
    CHECK_OK(db, tocsin_stream_publish(db, &offset, "t", "{}", NULL, NULL));
    CHECK_EQ_I(tocsin_stream_save_offset(db, NULL, "c", "t", offset + 1), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "beyond") != NULL);
    CHECK_EQ_I(tocsin_stream_save_offset(db, NULL, "c", "t", 1000000000000LL), TOCSIN_INVALID);
    CHECK_EQ_I(t_count(db, "_tocsin_offsets"), 0);
    CHECK_OK(db, tocsin_stream_save_offset(db, &n, "c", "t", offset));
    CHECK_EQ_I(n, offset);
    tocsin_close(db);
}

/* ---- texts the core stores ------------------------------------------------------ */

static void stored_texts_are_utf8(void) {
    tocsin_db *db = t_open("texts", NULL);
    CHECK_EQ_I(tocsin_result_save_error(db, 1, "ValueError", "bad \xff\xfe byte", 0), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "UTF-8") != NULL);
    CHECK_EQ_I(tocsin_result_save_error(db, 1, "ValueError", "overlong \xc0\xaf", 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_result_save_error(db, 1, "ValueError", "surrogate \xed\xa0\x80", 0),
               TOCSIN_INVALID);
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 0);
    CHECK_OK(db, tocsin_result_save_error(db, 1, "ValueError", "caf\xc3\xa9 \xf0\x9f\x93\xa6", 0));
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 1);
    tocsin_close(db);
}

/* ---- a replaced file ------------------------------------------------------------ */

static void subscribe_to_replaced_file(void) {
    tocsin_db *db = t_open("replaced", NULL), *fresh = NULL;
    tocsin_sub *sub = NULL;
    tocsin_listener *l = NULL;
    char path[512], moved[600];
    snprintf(path, sizeof path, "%s", sqlite3_db_filename(tocsin_sqlite(db), "main"));
    snprintf(moved, sizeof moved, "%s.moved", path);
    CHECK(rename(path, moved) == 0);
    {   /* its -wal and -shm go too: a new file must not inherit them */
        char from[600], to[620];
        snprintf(from, sizeof from, "%s-wal", path);
        snprintf(to, sizeof to, "%s-wal", moved);
        rename(from, to);
        snprintf(from, sizeof from, "%s-shm", path);
        snprintf(to, sizeof to, "%s-shm", moved);
        rename(from, to);
    }
    /* deleted or renamed: the handle still has the old file open */
    CHECK_EQ_I(tocsin_sub_open(&sub, db), TOCSIN_REPLACED);
    CHECK(sub == NULL);
    /* another file under the same name */
    CHECK_OK(fresh, tocsin_open(&fresh, path, NULL));
    CHECK_EQ_I(tocsin_sub_open(&sub, db), TOCSIN_REPLACED);
    CHECK(strstr(tocsin_errmsg(db), "replaced") != NULL);
    CHECK(sub == NULL);
    CHECK_EQ_I(tocsin_listen_open(&l, db, "c", 10), TOCSIN_REPLACED);
    CHECK(l == NULL);
    /* a handle on the new file subscribes as usual */
    CHECK_OK(fresh, tocsin_sub_open(&sub, fresh));
    tocsin_sub_close(sub);
    tocsin_close(fresh);
    tocsin_close(db);
    unlink(moved);
}

/* An iteration that stops mid-batch keeps the rest for the next reader. */
static void stream_rewind(void) {
    tocsin_db *db = t_open("rewind", NULL);
    tocsin_stream_sub *s = NULL;
    tocsin_stream_sub_opts o = TOCSIN_STREAM_SUB_OPTS_INIT;
    tocsin_message *m = NULL;
    size_t n = 0;
    int64_t off[5], saved = -1;
    int i;
    for (i = 0; i < 5; i++) CHECK_OK(db, tocsin_stream_publish(db, &off[i], "t", "{}", NULL, NULL));
    o.batch = 5;
    o.autosave_every = 1;
    CHECK_OK(db, tocsin_stream_sub_open(&s, db, "t", "c", &o));
    CHECK_EQ_I(tocsin_stream_sub_rewind(s, off[0]), TOCSIN_INVALID); /* nothing handed out yet */
    CHECK_OK(db, tocsin_stream_sub_next(s, &m, &n, 0));
    CHECK_EQ_I(n, 5);
    tocsin_messages_free(m, n);
    CHECK_EQ_I(tocsin_stream_sub_rewind(s, off[4] + 1), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(NULL), "last batch") != NULL);
    CHECK_OK(db, tocsin_stream_sub_rewind(s, off[1])); /* two were processed */
    CHECK_EQ_I(tocsin_stream_sub_position(s), off[1]);
    CHECK_OK(db, tocsin_stream_sub_close(s));
    CHECK_OK(db, tocsin_stream_offset(db, &saved, "c", "t"));
    CHECK_EQ_I(saved, off[1]);
    CHECK_OK(db, tocsin_stream_sub_open(&s, db, "t", "c", &o));
    CHECK_OK(db, tocsin_stream_sub_next(s, &m, &n, 0));
    CHECK_EQ_I(n, 3);
    if (n == 3) CHECK_EQ_I(m[0].id, off[2]);
    tocsin_messages_free(m, n);
    tocsin_stream_sub_close(s);
    tocsin_close(db);
}

/* A save at tocsin_stream_sub_close that fails (the write lock held past the busy
 * timeout) returns its code with its message: closing the private handle after it
 * cleared the thread's error, and the caller read "ok". */
static void stream_close_keeps_save_error(void) {
    tocsin_db *db = NULL, *other = NULL;
    tocsin_open_opts oo = TOCSIN_OPEN_OPTS_INIT;
    tocsin_stream_sub *s = NULL;
    tocsin_stream_sub_opts so = TOCSIN_STREAM_SUB_OPTS_INIT;
    tocsin_message *m = NULL;
    size_t n = 0;
    int64_t off = 0;
    char path[512];
    int rc;
    snprintf(path, sizeof path, "%s", t_path("close_keeps_save_error"));
    oo.busy_timeout_ms = 20;
    CHECK_OK(db, tocsin_open(&db, path, &oo));
    CHECK_OK(other, tocsin_open(&other, path, NULL));
    CHECK_OK(db, tocsin_stream_publish(db, &off, "t", "{}", NULL, NULL));
    so.save_on_close = 1;
    CHECK_OK(db, tocsin_stream_sub_open(&s, db, "t", "c", &so));
    CHECK_OK(db, tocsin_stream_sub_next(s, &m, &n, 0));
    CHECK_EQ_I(n, 1);
    tocsin_messages_free(m, n);
    CHECK_OK(other, tocsin_begin(other)); /* holds the write lock */
    rc = tocsin_stream_sub_close(s);
    CHECK_EQ_I(rc, TOCSIN_BUSY);
    CHECK_EQ_I(tocsin_errcode(NULL), TOCSIN_BUSY);
    CHECK(strstr(tocsin_errmsg(NULL), "locked") != NULL);
    CHECK_OK(other, tocsin_rollback(other));
    tocsin_close(other);
    tocsin_close(db);
}

static void plain_hand_back(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("hand_back", &clk);
    tocsin_enqueue_opts eo = TOCSIN_ENQUEUE_OPTS_INIT;
    tocsin_job *jobs = NULL, *job = NULL;
    size_t n = 0;
    int64_t id = 0, token;
    int ok = -1;
    eo.max_attempts = 1;
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "{}", &eo));
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "q", "w", 1, 60000));
    token = n ? jobs[0].token : 0;
    tocsin_jobs_free(jobs, n);
    CHECK_EQ_I(tocsin_job_hand_back(db, &ok, id, token, -1), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_job_hand_back(db, &ok, id, token + 1, 0), TOCSIN_OK);
    CHECK_EQ_I(ok, 0);
    CHECK_OK(db, tocsin_job_hand_back(db, &ok, id, token, 500));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK(job && strcmp(job->state, "scheduled") == 0 && job->run_at == 1500 && job->max_attempts == 2);
    tocsin_jobs_free(job, 1);
    clk.now = 2000;
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "q", "w", 1, 60000));
    CHECK(n == 1 && jobs[0].token != token); /* tokens never repeat */
    tocsin_jobs_free(jobs, n);
    {
        /* At the max_attempts limit a hand-back spends the attempt (attempts
         * is never lowered, so no token repeats); after the last one the job
         * dies as a retry there would. */
        char sql[160];
        int64_t toks[3] = {0, 0, 0};
        int k;
        snprintf(sql, sizeof sql,
                 "UPDATE _tocsin_jobs SET attempts = 999998, max_attempts = 1000000,"
                 " state = 'pending', lease_until = NULL WHERE id = %lld", (long long)id);
        CHECK_EQ_I(sqlite3_exec(tocsin_sqlite(db), sql, NULL, NULL, NULL), SQLITE_OK);
        for (k = 0; k < 2; k++) {
            CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "q", "w", 1, 60000));
            CHECK_EQ_I(n, 1);
            toks[k] = n ? jobs[0].token : 0;
            tocsin_jobs_free(jobs, n);
            CHECK_OK(db, tocsin_job_hand_back(db, &ok, id, toks[k], 0));
            CHECK_EQ_I(ok, 1);
            CHECK_OK(db, tocsin_job_get(db, &job, id));
            CHECK_EQ_I(job->max_attempts, 1000000);
            CHECK_EQ_I(job->attempts, 999999 + k);
            CHECK_STR(job->state, k == 0 ? "pending" : "dead");
            if (k == 1) {
                CHECK_STR(job->reason, "max_attempts");
                CHECK_STR(job->last_error, "handed back after its last attempt");
            }
            tocsin_jobs_free(job, 1);
        }
        CHECK(toks[0] != toks[1]);
        CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "q", "w", 1, 60000));
        CHECK_EQ_I(n, 0);
        tocsin_jobs_free(jobs, n);
        CHECK_OK(db, tocsin_job_ack(db, &ok, id, toks[1]));
        CHECK_EQ_I(ok, 0);
    }
    tocsin_close(db);
}

/* ---- transaction control through SQL ------------------------------------------ */

/* On the connections tocsin opens, the application's SQL may not begin or end
 * a transaction: refused when prepared, so it changes nothing. */
static void sql_transaction_control_refused(void) {
    tocsin_db *db = t_open("txctl", NULL), *tx = NULL;
    sqlite3 *conn = tocsin_sqlite(db);
    sqlite3_stmt *st = NULL;
    int64_t id;
    static const char *const refused[] = {"BEGIN", "BEGIN IMMEDIATE", "begin exclusive transaction",
                                          "  /* c */ COMMIT", "END", "ROLLBACK", "SAVEPOINT a",
                                          "INSERT INTO side VALUES (9); BEGIN; INSERT INTO side VALUES (9)"};
    size_t i;
    CHECK_OK(db, tocsin_exec(db, "CREATE TABLE side(x)"));
    for (i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        CHECK_EQ_I(tocsin_exec(db, refused[i]), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db), "may not begin or end a transaction") != NULL);
        CHECK_EQ_I(tocsin_sqlite_errcode(db), SQLITE_AUTH);
        CHECK_EQ_I(tocsin_in_transaction(db), 0);
    }
    /* statement by statement: the INSERT before the BEGIN ran, the one after did not */
    CHECK_EQ_I(t_count(db, "side"), 1);
    CHECK(strstr((tocsin_exec(db, "BEGIN"), tocsin_errmsg(db)), "exec: the SQL's BEGIN is refused") != NULL);
    /* VACUUM runs a BEGIN and COMMIT of its own, and is the application's to run */
    CHECK_OK(db, tocsin_exec(db, " /* nightly */ vacuum"));
    CHECK_EQ_I(tocsin_in_transaction(db), 0);
    CHECK_EQ_I(tocsin_exec(db, "VACUUM; BEGIN"), TOCSIN_INVALID);

    /* inside tocsin_begin's transaction: COMMIT/ROLLBACK refused, savepoints the app's */
    CHECK_OK(db, tocsin_begin(db));
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "{}", NULL));
    CHECK_EQ_I(tocsin_exec(db, "COMMIT"), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_exec(db, "ROLLBACK"), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_exec(db, "BEGIN"), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_in_transaction(db), 1);
    CHECK_OK(db, tocsin_exec(db, "SAVEPOINT a; INSERT INTO side VALUES (2); ROLLBACK TO a; "
                                 "INSERT INTO side VALUES (3); RELEASE a"));
    CHECK_EQ_I(tocsin_in_transaction(db), 1);
    CHECK_OK(db, tocsin_rollback(db));
    CHECK_EQ_I(t_count(db, "side"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 0);

    /* a transaction handle: its transaction cannot be ended behind its back */
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    CHECK_OK(tx, tocsin_exec(tx, "INSERT INTO side VALUES (4)"));
    CHECK_EQ_I(tocsin_exec(tx, "COMMIT"), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_exec(tx, "END TRANSACTION"), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_exec(tx, "ROLLBACK"), TOCSIN_INVALID);
    CHECK_OK(tx, tocsin_queue_enqueue(tx, &id, "q", "{}", NULL));
    CHECK_OK(tx, tocsin_tx_rollback(tx));
    CHECK_EQ_I(t_count(db, "side"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 0);
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    CHECK_OK(tx, tocsin_exec(tx, "INSERT INTO side VALUES (5)"));
    CHECK_OK(tx, tocsin_tx_commit(tx));
    CHECK_EQ_I(t_count(db, "side"), 2);

    /* the application's statements on tocsin_sqlite(db): refused when prepared, the
     * reason in the thread's error */
    CHECK_OK(db, tocsin_sqlite_enter(db));
    CHECK_EQ_I(sqlite3_prepare_v2(conn, "BEGIN", -1, &st, NULL), SQLITE_AUTH);
    CHECK(st == NULL);
    CHECK_EQ_I(tocsin_errcode(db), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "BEGIN is refused") != NULL);
    CHECK_EQ_I(sqlite3_prepare_v2(conn, "INSERT INTO side VALUES (6)", -1, &st, NULL), SQLITE_OK);
    CHECK_EQ_I(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    tocsin_sqlite_leave(db);
    CHECK_EQ_I(t_count(db, "side"), 3);
    /* nor may it hide a tocsin table behind a TEMP one (the claims went to the copy) */
    CHECK_EQ_I(tocsin_exec(db, "CREATE TEMP TABLE _tocsin_jobs AS SELECT * FROM main._tocsin_jobs"),
               TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "TEMP table _tocsin_jobs is refused") != NULL);
    CHECK_EQ_I(tocsin_exec(db, "CREATE TEMP VIEW _TOCSIN_locks AS SELECT 1"), TOCSIN_INVALID);
    CHECK_OK(db, tocsin_exec(db, "CREATE TEMP TABLE scratch(x)"));
    /* the core's own transactions still run */
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "{}", NULL));
    CHECK_OK(db, tocsin_begin(db));
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "{}", NULL));
    CHECK_OK(db, tocsin_commit(db));
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 2);
    tocsin_close(db);
}

/* ---- a close during another thread's call ------------------------------------- */

typedef struct closing_call {
    tocsin_db *db;
    tocsin_stream_sub *sub;
    atomic_int started;
    int begin; /* enqueue_main: tocsin_tx_begin instead of an enqueue */
    int rc;
    char msg[300];
} closing_call;

static void *enqueue_main(void *p) {
    closing_call *c = p;
    int64_t id = 0;
    tocsin_db *tx = NULL;
    atomic_store(&c->started, 1);
    c->rc = c->begin ? tocsin_tx_begin(c->db, &tx) : tocsin_queue_enqueue(c->db, &id, "q", "{}", NULL);
    snprintf(c->msg, sizeof c->msg, "%s", tocsin_errmsg(NULL));
    if (tx) tocsin_tx_rollback(tx);
    return NULL;
}

static void wait_started(closing_call *c) {
    while (!atomic_load(&c->started)) t_nap(1);
    t_nap(100); /* into its lock wait (if not, it meets the closed handle: same result) */
}

/* A call of another thread waiting for a database lock held the handle's
 * mutex until its busy timeout ran out, and tocsin_close waited for it (a 6 s
 * exit with a 2 s timeout). Now the close ends that wait: the call fails with
 * TOCSIN_CLOSED, not TOCSIN_BUSY after 20 s. A transaction handle of the
 * same database holds the lock and keeps the closed handle alive meanwhile. */
static void close_ends_lock_waits(void) {
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    tocsin_db *db = NULL, *tx = NULL;
    closing_call c;
    pthread_t th;
    int64_t id = 0;
    char path[512];
    snprintf(path, sizeof path, "%s", t_path("close_busy"));
    o.busy_timeout_ms = 20000;
    CHECK_OK(db, tocsin_open(&db, path, &o));
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    CHECK_OK(tx, tocsin_queue_enqueue(tx, &id, "q", "{\"held\":1}", NULL));
    memset(&c, 0, sizeof c);
    c.db = db;
    CHECK(pthread_create(&th, NULL, enqueue_main, &c) == 0);
    wait_started(&c);
    CHECK_OK(db, tocsin_close(db));
    pthread_join(th, NULL);
    CHECK_EQ_I(c.rc, TOCSIN_CLOSED);
    CHECK(strstr(c.msg, "closed") != NULL);
    /* the transaction handle still ends as asked */
    CHECK_OK(tx, tocsin_tx_commit(tx));
    {
        tocsin_db *again = NULL;
        CHECK_OK(again, tocsin_open(&again, path, NULL));
        CHECK_EQ_I(t_count(again, "_tocsin_jobs"), 1);
        tocsin_close(again);
    }
    /* tocsin_close_begin alone: the lock wait ends, the handle stays usable for
     * what needs no lock wait, until its close */
    CHECK_OK(db, tocsin_open(&db, path, &o));
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    memset(&c, 0, sizeof c);
    c.db = db;
    CHECK(pthread_create(&th, NULL, enqueue_main, &c) == 0);
    wait_started(&c);
    tocsin_close_begin(db);
    tocsin_close_begin(db); /* idempotent */
    pthread_join(th, NULL);
    CHECK_EQ_I(c.rc, TOCSIN_CLOSED);
    CHECK(strstr(c.msg, "closed while this call waited for a lock") != NULL);
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", NULL), TOCSIN_CLOSED);
    /* a transaction's begin waiting for the write lock ends the same way */
    memset(&c, 0, sizeof c);
    c.db = db;
    c.begin = 1;
    CHECK(pthread_create(&th, NULL, enqueue_main, &c) == 0);
    pthread_join(th, NULL);
    CHECK_EQ_I(c.rc, TOCSIN_CLOSED);
    CHECK(strstr(c.msg, "closed while this call waited for a lock") != NULL);
    tocsin_close_begin(tx); /* not for a transaction handle: nothing happens */
    CHECK_OK(tx, tocsin_queue_enqueue(tx, &id, "q", "{}", NULL));
    CHECK_OK(tx, tocsin_tx_commit(tx));
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 2); /* a read: no lock to wait for */
    tocsin_close_begin(NULL);
    CHECK_OK(db, tocsin_close(db));
}

static void *save_main(void *p) {
    closing_call *c = p;
    atomic_store(&c->started, 1);
    c->rc = tocsin_stream_sub_save(c->sub);
    return NULL;
}

static void *close_sub_main(void *p) {
    closing_call *c = p;
    wait_started(c);
    tocsin_stream_sub_close(c->sub);
    return NULL;
}

/* tocsin_stream_sub_save was not counted as a use of its subscription: a
 * close of another thread freed its connection under it. Now the close waits
 * for the save (here blocked on the write lock) to end. */
static void stream_close_waits_for_save(void) {
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    tocsin_stream_sub_opts so = TOCSIN_STREAM_SUB_OPTS_INIT;
    tocsin_db *db = NULL, *tx = NULL;
    tocsin_message *m = NULL;
    size_t n = 0;
    closing_call c;
    pthread_t saver, closer;
    int64_t off = 0, saved = -1;
    o.busy_timeout_ms = 20000;
    CHECK_OK(db, tocsin_open(&db, t_path("save_close"), &o));
    CHECK_OK(db, tocsin_stream_publish(db, &off, "t", "{}", NULL, NULL));
    memset(&c, 0, sizeof c);
    CHECK_OK(db, tocsin_stream_sub_open(&c.sub, db, "t", "c", &so));
    CHECK_OK(db, tocsin_stream_sub_next(c.sub, &m, &n, 0));
    CHECK_EQ_I(n, 1);
    tocsin_messages_free(m, n);
    CHECK_OK(db, tocsin_tx_begin(db, &tx)); /* the save waits for this lock */
    CHECK(pthread_create(&saver, NULL, save_main, &c) == 0);
    CHECK(pthread_create(&closer, NULL, close_sub_main, &c) == 0);
    t_nap(300);
    CHECK_OK(tx, tocsin_tx_rollback(tx));
    pthread_join(saver, NULL);
    pthread_join(closer, NULL);
    /* the save either ran (it began first) or met the close: never freed under it */
    CHECK(c.rc == TOCSIN_OK || c.rc == TOCSIN_CLOSED);
    CHECK_OK(db, tocsin_stream_offset(db, &saved, "c", "t"));
    CHECK_EQ_I(saved, off); /* by the save or by the close's save_on_close */
    tocsin_close(db);
}

/* A subscription and a listener inherited across fork() while a thread of the
 * parent waited on them: the child's close waited for that thread, which
 * does not exist in the child, and hung. */
static void *sub_wait_main(void *p) {
    closing_call *c = p;
    atomic_store(&c->started, 1);
    while ((c->rc = tocsin_sub_wait((tocsin_sub *)(void *)c->sub, -1)) == TOCSIN_OK) continue;
    return NULL;
}

static void *listen_wait_main(void *p) {
    tocsin_listener *l = p;
    tocsin_message *m = NULL;
    size_t n = 0;
    while (tocsin_listen_next(l, &m, &n, -1) == TOCSIN_OK) tocsin_messages_free(m, n);
    return NULL;
}

static void fork_closes_waited_on_subscriptions(void) {
    tocsin_db *db = t_open("fork_waited", NULL);
    tocsin_sub *s = NULL;
    tocsin_listener *l = NULL;
    closing_call c;
    pthread_t tw, tl;
    pid_t pid;
    CHECK_OK(db, tocsin_sub_open(&s, db));
    CHECK_OK(db, tocsin_listen_open(&l, db, "ch", 8));
    memset(&c, 0, sizeof c);
    c.sub = (tocsin_stream_sub *)(void *)s;
    CHECK(pthread_create(&tw, NULL, sub_wait_main, &c) == 0);
    CHECK(pthread_create(&tl, NULL, listen_wait_main, l) == 0);
    wait_started(&c);
    pid = fork();
    if (pid == 0) {
        alarm(30); /* a hang is the defect */
        if (tocsin_sub_close(s) != TOCSIN_OK) _exit(3);
        if (tocsin_listen_close(l) != TOCSIN_OK) _exit(4);
        if (tocsin_close(db) != TOCSIN_OK) _exit(5);
        _exit(0);
    }
    CHECK(pid > 0 && child_ok(pid));
    /* the parent's waits are untouched, and end with their closes */
    CHECK_OK(db, tocsin_sub_close(s));
    CHECK_OK(db, tocsin_listen_close(l));
    pthread_join(tw, NULL);
    pthread_join(tl, NULL);
    CHECK_EQ_I(c.rc, TOCSIN_CLOSED);
    tocsin_close(db);
}

/* ---- triggers that drop tocsin's writes ------------------------------------------ */

/* A TEMP trigger may sit on a tocsin table (SQLite allows it, docs/sql.md). One
 * that drops rows (RAISE(IGNORE)) must never leave a job half-moved -- live
 * and dead at once, or in neither table -- nor an operation reporting a write
 * it did not make: each such call fails (TOCSIN_CORRUPT, naming the table) and
 * writes nothing. */
static int t_trigger(tocsin_db *db, const char *when_on) {
    char sql[200];
    snprintf(sql, sizeof sql, "CREATE TEMP TRIGGER drop_it %s BEGIN SELECT RAISE(IGNORE); END", when_on);
    return sqlite3_exec(tocsin_sqlite(db), sql, NULL, NULL, NULL);
}
static void t_untrigger(tocsin_db *db) {
    CHECK_EQ_I(sqlite3_exec(tocsin_sqlite(db), "DROP TRIGGER temp.drop_it", NULL, NULL, NULL), SQLITE_OK);
}
static int64_t t_claim_one(tocsin_db *db, int64_t vis) {
    tocsin_job *jobs = NULL;
    size_t n = 0;
    int64_t token = 0;
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "q", "w", 1, vis));
    CHECK_EQ_I(n, 1);
    if (n) token = jobs[0].token;
    tocsin_jobs_free(jobs, n);
    return token;
}
#define CHECK_DROPPED(db, expr, table)                                              \
    do {                                                                            \
        CHECK_EQ_I((expr), TOCSIN_CORRUPT);                                         \
        CHECK(strstr(tocsin_errmsg(db), "a trigger on it (RAISE(IGNORE)) dropped") && \
              strstr(tocsin_errmsg(db), table));                                    \
    } while (0)

/* A listener or stream subscription that fails after its private handle was
 * opened freed that handle, and the close cleared the thread's error: the
 * caller got a failure code with the message "ok" (Python: SQLiteError('ok')). */
static void half_open_keeps_error(void) {
    tocsin_db *db = NULL;
    tocsin_listener *l = NULL;
    tocsin_stream_sub *s = NULL;
    sqlite3 *raw = NULL;
    char path[512];
    int rc;
    snprintf(path, sizeof path, "%s", t_path("half_open"));
    CHECK_OK(db, tocsin_open(&db, path, NULL));
    CHECK(sqlite3_open(path, &raw) == SQLITE_OK);
    CHECK(sqlite3_exec(raw, "DROP TABLE _tocsin_notifications; DROP TABLE _tocsin_offsets", NULL,
                       NULL, NULL) == SQLITE_OK);
    sqlite3_close(raw);
    rc = tocsin_listen_open(&l, db, "ch", 10);
    CHECK(rc != TOCSIN_OK && l == NULL);
    CHECK_EQ_I(tocsin_errcode(NULL), rc);
    CHECK(strstr(tocsin_errmsg(NULL), "_tocsin_notifications") != NULL);
    tocsin_close(db);
    /* a file of its own: one without _tocsin_notifications (and so its trigger
     * _tocsin_notifications_top) is refused as a whole by every open */
    snprintf(path, sizeof path, "%s", t_path("half_open_stream"));
    db = NULL;
    CHECK_OK(db, tocsin_open(&db, path, NULL));
    CHECK(sqlite3_open(path, &raw) == SQLITE_OK);
    CHECK(sqlite3_exec(raw, "DROP TABLE _tocsin_offsets", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(raw);
    rc = tocsin_stream_sub_open(&s, db, "t", "c", NULL);
    CHECK(rc != TOCSIN_OK && s == NULL);
    CHECK_EQ_I(tocsin_errcode(NULL), rc);
    CHECK(strstr(tocsin_errmsg(NULL), "_tocsin_offsets") != NULL);
    tocsin_close(db);
}

static void dropping_triggers(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("dropping_triggers", &clk);
    tocsin_enqueue_opts eo = TOCSIN_ENQUEUE_OPTS_INIT;
    tocsin_job *jobs = NULL;
    size_t n = 0;
    int64_t a = 0, b = 0, c = 0, tok, id = 0;
    int ok = -1;
    CHECK_OK(db, tocsin_queue_enqueue(db, &a, "q", "1", NULL));
    CHECK_OK(db, tocsin_queue_enqueue(db, &b, "q", "2", NULL));
    tok = t_claim_one(db, 60000); /* a, leased */

    /* deletes from the jobs dropped: fail and cancel would copy without moving */
    CHECK_EQ_I(t_trigger(db, "BEFORE DELETE ON _tocsin_jobs"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_job_fail(db, &ok, a, tok, "x"), "_tocsin_jobs");
    CHECK_EQ_I(ok, 0);
    CHECK_DROPPED(db, tocsin_job_cancel(db, &ok, b), "_tocsin_jobs");
    CHECK_EQ_I(ok, 0);
    CHECK_EQ_I(t_count(db, "_tocsin_dead"), 0);
    t_untrigger(db);

    /* inserts into the dead letters dropped: a move would delete the job */
    CHECK_EQ_I(t_trigger(db, "BEFORE INSERT ON _tocsin_dead"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_job_fail(db, &ok, a, tok, "x"), "_tocsin_dead");
    CHECK_DROPPED(db, tocsin_job_cancel(db, &ok, b), "_tocsin_dead");
    CHECK_EQ_I(ok, 0);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 2);
    /* the claim's own moves: an expired job, a lapsed last lease */
    eo.expires_ms = 10;
    CHECK_OK(db, tocsin_queue_enqueue(db, &c, "q", "3", &eo));
    clk.now = 2000;
    CHECK_DROPPED(db, tocsin_queue_claim(db, &jobs, &n, "q", "w", 1, 1000), "_tocsin_dead");
    CHECK_EQ_I(n, 0);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 3);
    t_untrigger(db);
    CHECK_OK(db, tocsin_job_cancel(db, &ok, c));
    CHECK_EQ_I(ok, 1);
    CHECK_EQ_I(t_count(db, "_tocsin_dead"), 1);

    /* updates of the jobs dropped: a retry or hand-back that changed nothing */
    CHECK_EQ_I(t_trigger(db, "BEFORE UPDATE ON _tocsin_jobs"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_job_retry(db, &ok, a, tok, 0, "again"), "_tocsin_jobs");
    CHECK_EQ_I(ok, 0);
    CHECK_DROPPED(db, tocsin_job_hand_back(db, &ok, a, tok, 0), "_tocsin_jobs");
    CHECK_EQ_I(ok, 0);
    CHECK_EQ_I(t_count(db, "_tocsin_dead"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'processing'"), 1);
    t_untrigger(db);

    /* a requeue whose INSERT or DELETE is dropped: the job stays in one table */
    CHECK_EQ_I(t_trigger(db, "BEFORE INSERT ON _tocsin_jobs"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_dead_requeue(db, &ok, c), "_tocsin_jobs");
    CHECK_EQ_I(ok, 0);
    t_untrigger(db);
    CHECK_EQ_I(t_trigger(db, "BEFORE DELETE ON _tocsin_dead"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_dead_requeue(db, &ok, c), "_tocsin_dead");
    CHECK_EQ_I(ok, 0);
    t_untrigger(db);
    CHECK_EQ_I(t_count(db, "_tocsin_dead"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 2);
    CHECK_OK(db, tocsin_dead_requeue(db, &ok, c));
    CHECK_EQ_I(ok, 1);

    /* the lapsed last lease of a job, its move dropped at the next claim */
    CHECK_OK(db, tocsin_job_ack(db, &ok, a, tok));
    CHECK_OK(db, tocsin_job_cancel(db, &ok, b));
    CHECK_OK(db, tocsin_job_cancel(db, &ok, c));
    eo = (tocsin_enqueue_opts)TOCSIN_ENQUEUE_OPTS_INIT;
    eo.max_attempts = 1;
    CHECK_OK(db, tocsin_queue_enqueue(db, &a, "q", "4", &eo));
    tok = t_claim_one(db, 100);
    clk.now = 5000;
    CHECK_EQ_I(t_trigger(db, "BEFORE INSERT ON _tocsin_dead"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_queue_claim(db, &jobs, &n, "q", "w", 1, 1000), "_tocsin_dead");
    t_untrigger(db);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'processing'"), 1);

    /* a notification, an event, a result: no id or write reported that is not there */
    CHECK_EQ_I(t_trigger(db, "BEFORE INSERT ON _tocsin_notifications"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_notify(db, &id, "c", "1", NULL), "_tocsin_notifications");
    t_untrigger(db);
    CHECK_EQ_I(t_trigger(db, "BEFORE INSERT ON _tocsin_events"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_stream_publish(db, &id, "t", "1", NULL, NULL), "_tocsin_events");
    t_untrigger(db);
    CHECK_EQ_I(t_trigger(db, "BEFORE INSERT ON _tocsin_results"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_result_save(db, a, "1", 0), "_tocsin_results");
    t_untrigger(db);
    CHECK_EQ_I(t_count(db, "_tocsin_notifications"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_events"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 0);
    tocsin_close(db);
}

/* The same for the other writes: locks, rate limits, queue pauses, schedules,
 * saved offsets, the claim's lease, acks, result and dead-letter deletes. A
 * write that can legitimately change nothing (a stale token, no such row) is
 * checked on that path only: the row still there means a trigger dropped it. */
static void dropping_triggers_everywhere(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("dropping_triggers_all", &clk);
    tocsin_job *jobs = NULL;
    size_t n = 0, acked = 0;
    int64_t id = 0, tok, tok2, t1 = 0, t2 = 0, v = 0, left = 0;
    int64_t ids[2], toks[2];
    int ok = -1, allowed = -1;

    CHECK_EQ_I(t_trigger(db, "BEFORE INSERT ON _tocsin_locks"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_lock_acquire(db, &t1, NULL, "l", "a", 1000), "_tocsin_locks");
    CHECK_EQ_I(t1, 0);
    t_untrigger(db);
    CHECK_OK(db, tocsin_lock_acquire(db, &t1, NULL, "l", "a", 1000));
    CHECK_EQ_I(t_trigger(db, "BEFORE UPDATE ON _tocsin_locks"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_lock_acquire(db, &t2, NULL, "l", "a", 1000), "_tocsin_locks"); /* extend */
    CHECK_DROPPED(db, tocsin_lock_renew(db, &ok, "l", "a", t1, 1000), "_tocsin_locks");
    CHECK_DROPPED(db, tocsin_lock_release(db, &ok, "l", "a", t1), "_tocsin_locks");
    CHECK_OK(db, tocsin_lock_release(db, &ok, "l", "b", t1)); /* not the holder: a plain 0 */
    CHECK_EQ_I(ok, 0);
    clk.now = 3000; /* lapsed: another owner takes it */
    CHECK_DROPPED(db, tocsin_lock_acquire(db, &t2, NULL, "l", "b", 1000), "_tocsin_locks");
    CHECK_EQ_I(t2, 0);
    t_untrigger(db);

    CHECK_EQ_I(t_trigger(db, "BEFORE INSERT ON _tocsin_rate_hits"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_ratelimit_try(db, &allowed, NULL, NULL, "r", 1, 1000), "_tocsin_rate_hits");
    t_untrigger(db);

    CHECK_EQ_I(t_trigger(db, "BEFORE INSERT ON _tocsin_queues"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_queue_pause(db, "q"), "_tocsin_queues");
    t_untrigger(db);

    CHECK_EQ_I(t_trigger(db, "BEFORE INSERT ON _tocsin_schedules"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_schedule_set(db, &v, "s", "* * * * *", "q", "1", NULL), "_tocsin_schedules");
    t_untrigger(db);
    CHECK_OK(db, tocsin_schedule_set(db, &v, "s", "* * * * *", "q", "1", NULL));
    CHECK_EQ_I(t_trigger(db, "BEFORE UPDATE ON _tocsin_schedules"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_schedule_pause(db, "s"), "_tocsin_schedules");
    CHECK_EQ_I(tocsin_schedule_pause(db, "none"), TOCSIN_NOTFOUND);
    t_untrigger(db);
    CHECK_EQ_I(t_trigger(db, "BEFORE DELETE ON _tocsin_schedules"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_schedule_remove(db, &ok, "s"), "_tocsin_schedules");
    CHECK_OK(db, tocsin_schedule_remove(db, &ok, "none"));
    CHECK_EQ_I(ok, 0);
    t_untrigger(db);

    CHECK_OK(db, tocsin_stream_publish(db, &id, "t", "1", NULL, NULL));
    CHECK_EQ_I(t_trigger(db, "BEFORE INSERT ON _tocsin_offsets"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_stream_save_offset(db, &v, "c", "t", id), "_tocsin_offsets");
    t_untrigger(db);

    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "1", NULL));
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "2", NULL));
    CHECK_EQ_I(t_trigger(db, "BEFORE UPDATE ON _tocsin_jobs"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_queue_claim(db, &jobs, &n, "q", "w", 1, 60000), "_tocsin_jobs");
    CHECK_EQ_I(n, 0);
    t_untrigger(db);
    tok = t_claim_one(db, 60000);
    tok2 = t_claim_one(db, 60000);
    CHECK_EQ_I(t_trigger(db, "BEFORE DELETE ON _tocsin_jobs"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_job_ack(db, &ok, tok >> 20, tok), "_tocsin_jobs");
    CHECK_EQ_I(ok, 0);
    CHECK_OK(db, tocsin_job_ack(db, &ok, tok >> 20, tok + 1)); /* a stale token: a plain 0 */
    CHECK_EQ_I(ok, 0);
    ids[0] = tok >> 20;
    ids[1] = tok2 >> 20;
    toks[0] = tok;
    toks[1] = tok2;
    CHECK_DROPPED(db, tocsin_job_ack_batch(db, &acked, ids, toks, 2), "_tocsin_jobs");
    CHECK_DROPPED(db, tocsin_job_complete(db, &ok, tok >> 20, tok, "1", 0), "_tocsin_jobs");
    t_untrigger(db);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'processing'"), 2);
    CHECK_OK(db, tocsin_job_complete(db, &ok, tok >> 20, tok, "1", 0));
    CHECK_EQ_I(ok, 1);
    CHECK_EQ_I(t_trigger(db, "BEFORE DELETE ON _tocsin_results"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_result_delete(db, &ok, tok >> 20), "_tocsin_results");
    CHECK_OK(db, tocsin_result_delete(db, &ok, 999)); /* none: a plain 0 */
    CHECK_EQ_I(ok, 0);
    t_untrigger(db);

    CHECK_OK(db, tocsin_job_cancel(db, &ok, tok2 >> 20));
    CHECK_EQ_I(t_trigger(db, "BEFORE DELETE ON _tocsin_dead"), SQLITE_OK);
    CHECK_DROPPED(db, tocsin_dead_purge(db, &left, "q", 0), "_tocsin_dead");
    CHECK_DROPPED(db, tocsin_dead_purge(db, &left, NULL, 0), "_tocsin_dead");
    CHECK_OK(db, tocsin_dead_purge(db, &left, "other", 0)); /* nothing matched */
    t_untrigger(db);
    CHECK_OK(db, tocsin_dead_purge(db, &left, "q", 0));
    CHECK_EQ_I(left, 1);
    tocsin_close(db);
}

/* ---- two copies of the core in one process ------------------------------------ */

/* A binding's native module and the loadable extension an application loads
 * into its own connection are two copies of the core sharing one SQLite. Each
 * has fork handlers; SQLite's static mutexes are not recursive, so if both
 * took them the second would wait for the first on the same thread and
 * fork() would never return. One copy takes them; fork works, in a child
 * both copies work. */
static void two_cores_fork(void) {
    const char *ext = getenv("TOCSIN_TEST_EXT");
    sqlite3 *c = NULL;
    char *err = NULL;
    pid_t pid;
    tocsin_db *db = t_open("two_cores", NULL);
    int64_t id = 0;
    CHECK(ext != NULL); /* make test-c and ctest set it */
    if (!ext || !db) return;
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "1", NULL)); /* this copy's handlers are in place */
    CHECK_EQ_I(sqlite3_open(":memory:", &c), SQLITE_OK);
    sqlite3_enable_load_extension(c, 1);
    if (sqlite3_load_extension(c, ext, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "FAIL load %s: %s\n", ext, err ? err : "");
        t_failed++;
    } else {
        t_passed++;
        /* the extension's copy opens its wrapper and subscribes: its handlers too */
        CHECK_EQ_I(sqlite3_exec(c, "SELECT tocsin_enqueue('q', '2')", NULL, NULL, NULL), SQLITE_OK);
    }
    sqlite3_free(err);
    pid = fork();
    if (pid == 0) {
        tocsin_db *mine = NULL;
        int ok = tocsin_open(&mine, sqlite3_db_filename(tocsin_sqlite(db), "main"), NULL) == TOCSIN_OK &&
                 tocsin_queue_enqueue(mine, &id, "q", "3", NULL) == TOCSIN_OK &&
                 sqlite3_exec(c, "SELECT tocsin_enqueue('q', '4')", NULL, NULL, NULL) == SQLITE_OK;
        _exit(ok ? 0 : 1);
    }
    CHECK(pid > 0 && child_ok(pid));
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 2);
    sqlite3_close(c);
    tocsin_close(db);
}

/* The extension keeps its prepared statements on a host's connection from one
 * call to the next (none running: the host's transactions, VACUUM and DETACH
 * go on), and sqlite3_close() still closes it: the cache anchor's xDisconnect
 * finalizes them first, also after a second load replaced the first. A host
 * table named like the anchor only makes the calls finalize theirs, as before. */
static void host_statement_cache(void) {
    const char *ext = getenv("TOCSIN_TEST_EXT");
    static const char *const setups[] = {"", "CREATE TABLE _tocsin_cache(x)"};
    size_t k;
    CHECK(ext != NULL);
    if (!ext) return;
    for (k = 0; k < 2; k++) {
        sqlite3 *c = NULL;
        sqlite3_stmt *st;
        char *err = NULL;
        int held = 0;
        CHECK_EQ_I(sqlite3_open(t_path(k ? "host_cache_1" : "host_cache_0"), &c), SQLITE_OK);
        CHECK_EQ_I(sqlite3_exec(c, setups[k], NULL, NULL, NULL), SQLITE_OK);
        sqlite3_enable_load_extension(c, 1);
        if (sqlite3_load_extension(c, ext, NULL, &err) != SQLITE_OK) {
            fprintf(stderr, "FAIL load %s: %s\n", ext, err ? err : "");
            t_failed++;
            sqlite3_free(err);
            sqlite3_close(c);
            continue;
        }
        CHECK_EQ_I(sqlite3_exec(c, "SELECT tocsin_enqueue('q', '1'); SELECT tocsin_enqueue('q', '2');"
                                   " SELECT tocsin_claim('q', 'w', 1, 1000)", NULL, NULL, NULL), SQLITE_OK);
        for (st = sqlite3_next_stmt(c, NULL); st; st = sqlite3_next_stmt(c, st)) {
            CHECK(!sqlite3_stmt_busy(st));
            held++;
        }
        CHECK(k == 0 ? held > 0 : held == 0);
        /* loaded again: the new wrapper replaces the old, whose statements go
         * when SQLite gets round to disconnecting its table (a later prepare) */
        CHECK_EQ_I(sqlite3_load_extension(c, ext, NULL, NULL), SQLITE_OK);
        CHECK_EQ_I(sqlite3_exec(c, "SELECT tocsin_enqueue('q', '5')", NULL, NULL, NULL), SQLITE_OK);
        CHECK_EQ_I(sqlite3_exec(c, "BEGIN; SELECT tocsin_enqueue('q', '3'); COMMIT; VACUUM;"
                                   " ATTACH ':memory:' AS aux; SELECT tocsin_stats('q'); DETACH aux;"
                                   " SELECT tocsin_enqueue('q', '4')", NULL, NULL, NULL), SQLITE_OK);
        CHECK_EQ_I(sqlite3_close(c), SQLITE_OK);
    }
}

/* A host that finalizes every statement of its connection (a loop over
 * sqlite3_next_stmt, a common cleanup before sqlite3_close) finalizes the
 * statements the extension keeps between calls: the close, or the next call,
 * used to finalize or step them again (SIGBUS, SIGSEGV). The cache forgets
 * them; the next calls prepare their own again. Also with host statements
 * prepared after the cleanup, and deep under many of them. */
static void host_finalizes_our_statements(void) {
    const char *ext = getenv("TOCSIN_TEST_EXT");
    int round;
    CHECK(ext != NULL);
    if (!ext) return;
    for (round = 0; round < 3; round++) {
        sqlite3 *c = NULL;
        sqlite3_stmt *st, *mine[20];
        char *err = NULL, *val = NULL;
        int i, n = 0;
        CHECK_EQ_I(sqlite3_open(t_path(round == 0 ? "host_fin_0" : round == 1 ? "host_fin_1" : "host_fin_2"), &c),
                   SQLITE_OK);
        sqlite3_enable_load_extension(c, 1);
        if (sqlite3_load_extension(c, ext, NULL, &err) != SQLITE_OK) {
            fprintf(stderr, "FAIL load %s: %s\n", ext, err ? err : "");
            t_failed++;
            sqlite3_free(err);
            sqlite3_close(c);
            continue;
        }
        CHECK_EQ_I(sqlite3_exec(c, "SELECT tocsin_enqueue('q', '1'); SELECT tocsin_enqueue('q', '2');"
                                   " SELECT tocsin_claim('q', 'w', 1, 1000); SELECT tocsin_stats('q')",
                                NULL, NULL, NULL), SQLITE_OK);
        if (round == 2) /* the host's own statements, prepared after ours */
            for (i = 0; i < 20; i++) CHECK_EQ_I(sqlite3_prepare_v2(c, "SELECT 1", -1, &mine[i], NULL), SQLITE_OK);
        while ((st = sqlite3_next_stmt(c, NULL))) {
            sqlite3_finalize(st);
            n++;
        }
        CHECK(n > 0);
        if (round >= 1) { /* go on using it: the calls prepare their statements again */
            CHECK_EQ_I(sqlite3_prepare_v2(c, "SELECT 2", -1, &st, NULL), SQLITE_OK); /* may take a freed address */
            CHECK_EQ_I(sqlite3_exec(c, "SELECT tocsin_enqueue('q', '3'); SELECT tocsin_claim('q', 'w', 1, 1000)",
                                    NULL, NULL, NULL), SQLITE_OK);
            CHECK_EQ_I(sqlite3_step(st), SQLITE_ROW); /* the host's statement is untouched */
            CHECK_EQ_I(sqlite3_column_int(st, 0), 2);
            sqlite3_finalize(st);
            st = NULL;
            CHECK_EQ_I(sqlite3_prepare_v2(c, "SELECT tocsin_stats('q') ->> '$.pending'", -1, &st, NULL), SQLITE_OK);
            CHECK_EQ_I(sqlite3_step(st), SQLITE_ROW);
            val = sqlite3_mprintf("%s", (const char *)sqlite3_column_text(st, 0));
            CHECK_STR(val, "1"); /* 3 enqueued, 2 claimed */
            sqlite3_free(val);
            sqlite3_finalize(st);
            if (round == 2) { /* and once more under many statements of the host's */
                for (i = 0; i < 20; i++) CHECK_EQ_I(sqlite3_prepare_v2(c, "SELECT 1", -1, &mine[i], NULL), SQLITE_OK);
                CHECK_EQ_I(sqlite3_exec(c, "SELECT tocsin_enqueue('q', '4')", NULL, NULL, NULL), SQLITE_OK);
                while ((st = sqlite3_next_stmt(c, NULL))) sqlite3_finalize(st);
                CHECK_EQ_I(sqlite3_exec(c, "SELECT tocsin_enqueue('q', '5')", NULL, NULL, NULL), SQLITE_OK);
            }
        }
        CHECK_EQ_I(sqlite3_close(c), SQLITE_OK);
    }
}

/* A connection opened while another connection holds the write lock of a
 * rollback-journal file, with tocsin registered as an automatic extension
 * (Go's database/sql): connecting the cache anchor reads the schema before the
 * host can set a busy handler, and its SQLITE_BUSY used to fail
 * sqlite3_open_v2 itself ("database is locked"). The open succeeds; the first
 * call, under the host's busy handler, connects the anchor (its statements are
 * kept from then on). */
static void auto_extension_open_while_locked(void) {
    const char *path = t_path("auto_ext_locked");
    sqlite3 *holder = NULL, *c = NULL;
    sqlite3_stmt *st;
    int held = 0;
    CHECK_EQ_I(sqlite3_open(path, &holder), SQLITE_OK);
    CHECK_EQ_I(sqlite3_exec(holder, "PRAGMA journal_mode=DELETE; CREATE TABLE app(x);"
                                    " BEGIN EXCLUSIVE; INSERT INTO app VALUES (1)", NULL, NULL, NULL), SQLITE_OK);
    CHECK_EQ_I(sqlite3_auto_extension((void (*)(void))tocsin_sql_init), SQLITE_OK);
    CHECK_EQ_I(sqlite3_open(path, &c), SQLITE_OK);
    sqlite3_cancel_auto_extension((void (*)(void))tocsin_sql_init);
    CHECK_EQ_I(sqlite3_errcode(c), SQLITE_OK);
    CHECK_EQ_I(sqlite3_exec(holder, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_busy_timeout(c, 5000);
    CHECK_EQ_I(sqlite3_exec(c, "SELECT tocsin_enqueue('q', '1'); SELECT tocsin_enqueue('q', '2')", NULL, NULL,
                            NULL), SQLITE_OK);
    for (st = sqlite3_next_stmt(c, NULL); st; st = sqlite3_next_stmt(c, st)) held++;
    CHECK(held > 0); /* the anchor is connected: the calls keep their statements */
    CHECK_EQ_I(sqlite3_close(c), SQLITE_OK);
    CHECK_EQ_I(sqlite3_close(holder), SQLITE_OK);
}

/* SQLite unloads an extension with the connection that loaded it; tocsin's
 * stays loaded: its fork handlers (which may be the ones that take SQLite's
 * mutexes at fork) and any watcher thread's code must outlive the connection. */
static void extension_stays_loaded(void) {
    const char *ext = getenv("TOCSIN_TEST_EXT");
    sqlite3 *c = NULL;
    void *h;
    CHECK(ext != NULL);
    if (!ext) return;
    CHECK_EQ_I(sqlite3_open(":memory:", &c), SQLITE_OK);
    sqlite3_enable_load_extension(c, 1);
    CHECK_EQ_I(sqlite3_load_extension(c, ext, NULL, NULL), SQLITE_OK);
    CHECK_EQ_I(sqlite3_close(c), SQLITE_OK);
    h = dlopen(ext, RTLD_NOW | RTLD_NOLOAD);
    CHECK(h != NULL);
    if (h) dlclose(h);
}

void suite_harden(void) {
    host_statement_cache();
    host_finalizes_our_statements();
    auto_extension_open_while_locked();
    extension_stays_loaded();
    sql_transaction_control_refused();
    plain_hand_back();
    stream_rewind();
    fork_with_live_subscriptions();
    racing_first_opens();
    busy_host_connections();
    host_tx_first_call_waits();
    replaced_file_is_checked_again();
    busy_timeout_is_busy();
    thread_timeout_bounds_lock_waits();
    stale_snapshot_fails_at_once();
    host_without_extended_codes();
    durations_never_wrap();
    stored_texts_are_utf8();
    subscribe_to_replaced_file();
    close_ends_lock_waits();
    stream_close_waits_for_save();
    fork_closes_waited_on_subscriptions();
    dropping_triggers();
    dropping_triggers_everywhere();
    half_open_keeps_error();
    stream_close_keeps_save_error();
    two_cores_fork();
}
