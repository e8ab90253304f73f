/*
 * The thread model: one handle used from many threads at once (the core
 * serialises its calls), transactions on transaction handles of their own.
 * Run under ThreadSanitizer by `make test-tsan`.
 */
#define _GNU_SOURCE /* pthread_timedjoin_np: a hung waiter fails the test instead of hanging it */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sqlite3.h>
#include <time.h>

#include "test.h"

#define T_THREADS 8
#define T_ROUNDS 150

typedef struct worker_ctx {
    tocsin_db *db;
    int index;
    int failures;
    int enqueued, acked, tx_commits, tx_rollbacks;
} worker_ctx;

/* Each thread enqueues, claims and acks on the shared handle, and commits or
 * rolls back transactions on transaction handles of its own. */
static void *worker_main(void *p) {
    worker_ctx *w = p;
    char queue[32], worker[32];
    int r;
    snprintf(queue, sizeof queue, "q%d", w->index);
    snprintf(worker, sizeof worker, "w%d", w->index);
    for (r = 0; r < T_ROUNDS; r++) {
        int64_t id = 0;
        tocsin_job *jobs = NULL;
        size_t n = 0, i;
        tocsin_db *tx = NULL;
        if (tocsin_queue_enqueue(w->db, &id, queue, "{\"plain\":true}", NULL) != TOCSIN_OK)
            w->failures++;
        else
            w->enqueued++;
        if (tocsin_tx_begin(w->db, &tx) != TOCSIN_OK) {
            fprintf(stderr, "tx_begin: %s\n", tocsin_errmsg(NULL));
            w->failures++;
        } else {
            int keep = r % 3 != 0;
            if (tocsin_queue_enqueue(tx, &id, queue, keep ? "{\"tx\":1}" : "{\"tx\":0}", NULL) != TOCSIN_OK)
                w->failures++;
            if (tocsin_exec(tx, keep ? "INSERT INTO side(k) VALUES ('kept')"
                                     : "INSERT INTO side(k) VALUES ('dropped')") != TOCSIN_OK)
                w->failures++;
            if (keep) {
                if (tocsin_tx_commit(tx) != TOCSIN_OK) w->failures++;
                else w->tx_commits++;
            } else {
                if (tocsin_tx_rollback(tx) != TOCSIN_OK) w->failures++;
                else w->tx_rollbacks++;
            }
        }
        if (tocsin_queue_claim(w->db, &jobs, &n, queue, worker, 2, 60000) != TOCSIN_OK) {
            w->failures++;
            continue;
        }
        for (i = 0; i < n; i++) {
            int ok = 0;
            if (tocsin_job_ack(w->db, &ok, jobs[i].id, jobs[i].token) != TOCSIN_OK || !ok)
                w->failures++;
            else
                w->acked++;
        }
        tocsin_jobs_free(jobs, n);
    }
    return NULL;
}

static void one_handle_many_threads(void) {
    tocsin_db *db = t_open("threads", NULL);
    worker_ctx w[T_THREADS];
    pthread_t t[T_THREADS];
    int i, failures = 0, enqueued = 0, acked = 0, commits = 0, rollbacks = 0;
    CHECK_OK(db, tocsin_exec(db, "CREATE TABLE side(k TEXT)"));
    for (i = 0; i < T_THREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].db = db;
        w[i].index = i;
        CHECK(pthread_create(&t[i], NULL, worker_main, &w[i]) == 0);
    }
    for (i = 0; i < T_THREADS; i++) {
        pthread_join(t[i], NULL);
        failures += w[i].failures;
        enqueued += w[i].enqueued;
        acked += w[i].acked;
        commits += w[i].tx_commits;
        rollbacks += w[i].tx_rollbacks;
    }
    CHECK_EQ_I(failures, 0);
    CHECK_EQ_I(enqueued, T_THREADS * T_ROUNDS);
    /* every committed job exists, no rolled-back job or row does */
    CHECK_EQ_I(t_count(db, "side WHERE k = 'dropped'"), 0);
    CHECK_EQ_I(t_count(db, "side WHERE k = 'kept'"), commits);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE payload = '{\"tx\":0}'"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs") + acked, enqueued + commits);
    CHECK(rollbacks > 0);
    tocsin_close(db);
}

/* A transaction handle's calls join its transaction; the database handle's
 * calls do not see them until commit. */
static void tx_handles(void) {
    tocsin_db *db = t_open("tx_handles", NULL), *tx = NULL, *tx2 = NULL, *mem = NULL;
    int64_t id = 0;
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    CHECK(tx != NULL && tx != db);
    CHECK(tocsin_in_transaction(tx));
    CHECK(!tocsin_in_transaction(db));
    CHECK_OK(tx, tocsin_queue_enqueue(tx, &id, "q", "{}", NULL));
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 0); /* not committed yet */
    /* misuse is refused with a clear error */
    CHECK_EQ_I(tocsin_tx_begin(tx, &tx2), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(NULL), "do not nest") != NULL);
    CHECK_EQ_I(tocsin_commit(tx), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_close(tx), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_tx_commit(db), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_tx_begin(db, NULL), TOCSIN_INVALID);
    {
        const char *q[] = {"q"};
        CHECK_EQ_I(tocsin_queue_wait(tx, q, 1, 0, NULL), TOCSIN_INVALID);
    }
    CHECK_OK(tx, tocsin_tx_commit(tx));
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 1);
    /* a rollback drops everything of the transaction */
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    CHECK_OK(tx, tocsin_queue_enqueue(tx, &id, "q", "{}", NULL));
    CHECK_OK(tx, tocsin_notify(tx, &id, "c", "{}", NULL));
    CHECK_OK(tx, tocsin_tx_rollback(tx));
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_notifications"), 0);
    /* a live transaction keeps the database handle past tocsin_close */
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    CHECK_OK(db, tocsin_close(db));
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", NULL), TOCSIN_CLOSED);
    CHECK_OK(tx, tocsin_queue_enqueue(tx, &id, "q", "{\"late\":1}", NULL));
    CHECK_OK(tx, tocsin_tx_commit(tx)); /* frees db too */
    /* an in-memory database has no file for a second connection */
    CHECK_OK(mem, tocsin_open(&mem, ":memory:", NULL));
    CHECK_EQ_I(tocsin_tx_begin(mem, &tx), TOCSIN_INVALID);
    CHECK(tx == NULL);
    tocsin_close(mem);
    CHECK_OK(db, tocsin_open(&db, t_path("tx_handles_check"), NULL));
    tocsin_close(db);
}

/* The application's SQL that leaves state on a transaction handle's connection
 * (an attached database, a TEMP trigger, a pragma's setting) stays with that
 * transaction: the next one does not inherit it. A transaction that ran only
 * ordinary statements hands its connection on. */
static void tx_connection_state_not_inherited(void) {
    tocsin_db *db = t_open("tx_state", NULL), *tx = NULL, *first = NULL;
    int64_t id = 0;
    CHECK_OK(db, tocsin_exec(db, "CREATE TABLE app(x)"));
    /* ordinary statements: the connection is reused */
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    CHECK_OK(tx, tocsin_exec(tx, "INSERT INTO app VALUES (1)"));
    first = tx;
    CHECK_OK(tx, tocsin_tx_commit(tx));
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    CHECK(tx == first);
    /* a TEMP trigger on tocsin's table that refuses every enqueue */
    CHECK_OK(tx, tocsin_exec(tx, "CREATE TEMP TRIGGER no_jobs BEFORE INSERT ON main._tocsin_jobs "
                                 "BEGIN SELECT RAISE(ABORT, 'refused by a temp trigger'); END"));
    CHECK_EQ_I(tocsin_queue_enqueue(tx, &id, "q", "{}", NULL), TOCSIN_ERROR);
    CHECK_OK(tx, tocsin_tx_commit(tx));
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    CHECK_OK(tx, tocsin_queue_enqueue(tx, &id, "q", "{}", NULL)); /* no trigger here */
    CHECK_OK(tx, tocsin_exec(tx, "ATTACH ':memory:' AS side"));
    CHECK_OK(tx, tocsin_tx_commit(tx));
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    CHECK_OK(tx, tocsin_exec(tx, "ATTACH ':memory:' AS side")); /* not attached here yet */
    CHECK_OK(tx, tocsin_exec(tx, "PRAGMA query_only = 1"));
    CHECK_OK(tx, tocsin_tx_rollback(tx));
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    CHECK_OK(tx, tocsin_queue_enqueue(tx, &id, "q", "{}", NULL)); /* writable here */
    CHECK_OK(tx, tocsin_tx_commit(tx));
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 2);
    tocsin_close(db);
}

/* A memdb database (vfs=memdb, sqlite3_deserialize) is reached by another
 * connection only under a name beginning with '/': a transaction handle or a
 * listener on one that is not is refused (another open of its name made a new,
 * empty database, where the transaction's writes went); a shared one works. */
static void memdb_handles(void) {
    static const char *const names[] = {"file:tx_memdb.db?vfs=memdb", "file:/tx_memdb_shared?vfs=memdb"};
    int i;
    for (i = 0; i < 2; i++) {
        sqlite3 *c = NULL;
        tocsin_db *db = NULL, *tx = NULL;
        tocsin_listener *l = NULL;
        int64_t id = 0;
        CHECK_EQ_I(sqlite3_open_v2(names[i], &c, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI, NULL),
                   SQLITE_OK);
        CHECK_OK(db, tocsin_wrap(&db, c, NULL));
        CHECK_OK(db, tocsin_bootstrap(db, NULL));
        if (i == 0) {
            CHECK_EQ_I(tocsin_tx_begin(db, &tx), TOCSIN_INVALID);
            CHECK(strstr(tocsin_errmsg(NULL), "memdb image no other connection shares") != NULL);
            CHECK_EQ_I(tocsin_listen_open(&l, db, "c", 8), TOCSIN_INVALID);
            CHECK(tx == NULL && l == NULL);
        } else {
            CHECK_OK(db, tocsin_tx_begin(db, &tx));
            CHECK_OK(tx, tocsin_queue_enqueue(tx, &id, "q", "{}", NULL));
            CHECK_OK(tx, tocsin_tx_commit(tx));
            CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 1); /* the host's database had the job */
        }
        tocsin_close(db);
        sqlite3_close(c);
    }
}

typedef struct cancel_call {
    tocsin_db *db;
    tocsin_cancel *token;
    int rc;
    char msg[256];
} cancel_call;

static void *enqueue_bound(void *p) {
    cancel_call *c = p;
    int64_t id = 0;
    tocsin_thread_cancel(c->token);
    c->rc = tocsin_queue_enqueue(c->db, &id, "q", "{\"cancelled\":1}", NULL);
    snprintf(c->msg, sizeof c->msg, "%s", tocsin_errmsg(NULL));
    tocsin_thread_cancel(NULL);
    return NULL;
}

/* A call bound to a cancel token (tocsin_thread_cancel) that waits for another
 * connection's write lock ends with TOCSIN_INTERRUPTED when another thread fires
 * the token, long before its busy timeout, nothing written; a fired token fails
 * the bound calls that meet the lock at once, and lets those that need no wait run. */
static void cancelled_lock_wait(void) {
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    tocsin_db *db = NULL, *holder = t_open("cancel_wait", NULL), *tx = NULL;
    cancel_call c;
    pthread_t t;
    int64_t id = 0;
    memset(&c, 0, sizeof c);
    o.busy_timeout_ms = 600000; /* the test would hang, not pass, if the fire were not heard */
    CHECK_OK(db, tocsin_open(&db, sqlite3_db_filename(tocsin_sqlite(holder), "main"), &o));
    CHECK((c.token = tocsin_cancel_new()) != NULL);
    c.db = db;
    CHECK_OK(holder, tocsin_tx_begin(holder, &tx)); /* holds the write lock */
    CHECK_EQ_I(pthread_create(&t, NULL, enqueue_bound, &c), 0);
    t_nap(50); /* (most likely waiting by now; a fire before the wait fails it at once too) */
    tocsin_cancel_fire(c.token);
    pthread_join(t, NULL);
    CHECK_EQ_I(c.rc, TOCSIN_INTERRUPTED);
    CHECK(strstr(c.msg, "cancelled while this call waited") != NULL);
    /* bound to the fired token: a call that meets the lock fails at once, a read runs */
    tocsin_thread_cancel(c.token);
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", NULL), TOCSIN_INTERRUPTED);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 0);
    CHECK_OK(tx, tocsin_tx_commit(tx)); /* the lock is free: no wait, the call runs */
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "{}", NULL));
    tocsin_thread_cancel(NULL);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE payload = '{\"cancelled\":1}'"), 0);
    tocsin_cancel_free(c.token);
    tocsin_cancel_fire(NULL);
    tocsin_cancel_free(NULL);
    tocsin_close(db);
    tocsin_close(holder);
}

typedef struct result_waiter {
    tocsin_db *db;
    int64_t job;
    int rc;
} result_waiter;

static void *wait_for_result(void *p) {
    result_waiter *r = p;
    tocsin_result *res = NULL;
    r->rc = tocsin_result_wait(r->db, &res, r->job, -1, NULL);
    tocsin_result_free(res);
    return NULL;
}

/* Waits of several threads on one handle, none given a subscription: each is
 * woken (the handle's own subscription serves one, the others get theirs). */
static void concurrent_waits_on_one_handle(void) {
    tocsin_db *db = t_open("concurrent_waits", NULL), *other = NULL;
    result_waiter r[4];
    pthread_t t[4];
    int i, ended = 0;
    CHECK_OK(other, tocsin_open(&other, sqlite3_db_filename(tocsin_sqlite(db), "main"), NULL));
    for (i = 0; i < 4; i++) {
        r[i].db = db;
        r[i].rc = -1;
        CHECK_OK(db, tocsin_queue_enqueue(db, &r[i].job, "q", "{}", NULL));
        pthread_create(&t[i], NULL, wait_for_result, &r[i]);
    }
    for (i = 0; i < 4; i++) CHECK_OK(other, tocsin_result_save(other, r[i].job, "1", 0));
    for (i = 0; i < 4; i++) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 30;
        if (pthread_timedjoin_np(t[i], NULL, &until) == 0) {
            ended++;
            CHECK_EQ_I(r[i].rc, TOCSIN_OK);
        }
    }
    CHECK_EQ_I(ended, 4);
    if (ended == 4) {
        tocsin_close(other);
        tocsin_close(db);
    }
}

/* tocsin_sqlite_enter holds the handle against other threads' tocsin calls and
 * refuses a closed handle. */
static void *enqueue_one(void *p) {
    int64_t id = 0;
    tocsin_queue_enqueue((tocsin_db *)p, &id, "q", "{}", NULL);
    return NULL;
}

static void sqlite_enter(void) {
    tocsin_db *db = t_open("sqlite_enter", NULL), *tx = NULL;
    pthread_t th;
    int64_t id = 0;
    CHECK_EQ_I(tocsin_sqlite_enter(NULL), TOCSIN_INVALID);
    CHECK_OK(db, tocsin_sqlite_enter(db));
    CHECK_OK(db, tocsin_sqlite_enter(db)); /* recursive */
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "{}", NULL)); /* tocsin calls while held */
    pthread_create(&th, NULL, enqueue_one, db);
    { struct timespec ts = {0, 50000000}; nanosleep(&ts, NULL); }
    /* the other thread's enqueue waits for the leave */
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 1);
    tocsin_sqlite_leave(db);
    tocsin_sqlite_leave(db);
    pthread_join(th, NULL);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 2);
    /* a transaction handle has its own */
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    CHECK_OK(tx, tocsin_sqlite_enter(tx));
    tocsin_sqlite_leave(tx);
    CHECK_OK(db, tocsin_close(db)); /* tx keeps it alive, closed */
    CHECK_EQ_I(tocsin_sqlite_enter(db), TOCSIN_CLOSED);
    CHECK_OK(tx, tocsin_tx_rollback(tx));
}


/* One worker driven by several threads at once, as the Python, Go and Ruby
 * workers do: each records its run's outcome and takes the next runs itself
 * (the reserve without the worker's step lock, else a step), while another
 * thread reads in_flight and cancelled. Every job runs once, never more than
 * `concurrency` at a time. */
#define TW_JOBS 2000
#define TW_THREADS 4
typedef struct tw_ctx {
    tocsin_worker *w;
    _Atomic int done, in_run, max_in_run, stop;
    _Atomic int seen[TW_JOBS + 1];
} tw_ctx;

static void *tw_runner(void *p) {
    tw_ctx *c = p;
    tocsin_outcome ok = TOCSIN_OUTCOME_INIT;
    int idle = 0;
    while (atomic_load(&c->done) < TW_JOBS && idle < 2000) {
        tocsin_task_run **runs = NULL;
        size_t n = 0, i;
        if (tocsin_worker_take(c->w, &runs, &n) != TOCSIN_OK &&
            tocsin_worker_next(c->w, &runs, &n, 5) != TOCSIN_OK) {
            idle++;
            continue;
        }
        idle = 0;
        for (i = 0; i < n; i++) {
            int now = atomic_fetch_add(&c->in_run, 1) + 1, m = atomic_load(&c->max_in_run);
            while (now > m && !atomic_compare_exchange_weak(&c->max_in_run, &m, now)) {
            }
            if (runs[i]->job_id >= 1 && runs[i]->job_id <= TW_JOBS) atomic_fetch_add(&c->seen[runs[i]->job_id], 1);
            atomic_fetch_sub(&c->in_run, 1);
            tocsin_worker_finish(c->w, NULL, runs[i], &ok);
            atomic_fetch_add(&c->done, 1);
        }
        tocsin_free(runs);
    }
    return NULL;
}

static void *tw_reader(void *p) {
    tw_ctx *c = p;
    while (!atomic_load(&c->stop)) {
        int64_t *ids = NULL;
        size_t n = 0;
        (void)tocsin_worker_in_flight(c->w);
        tocsin_worker_cancelled(c->w, &ids, &n);
        tocsin_free(ids);
        sched_yield();
    }
    return NULL;
}

static void worker_threads(void) {
    static const char *const qs[] = {"tw"};
    static tw_ctx c;
    tocsin_db *db = t_open("threads_worker", NULL);
    tocsin_worker_opts o = TOCSIN_WORKER_OPTS_INIT;
    tocsin_task_call call = TOCSIN_TASK_CALL_INIT;
    pthread_t th[TW_THREADS], rd;
    int64_t id;
    int i, dups = 0, missing = 0;
    call.task = "noop";
    CHECK_OK(db, tocsin_begin(db));
    for (i = 0; i < TW_JOBS; i++) CHECK_OK(db, tocsin_task_enqueue(db, &id, "tw", &call, NULL));
    CHECK_OK(db, tocsin_commit(db));
    o.queues = qs;
    o.n_queues = 1;
    o.concurrency = TW_THREADS;
    CHECK_OK(db, tocsin_worker_open(&c.w, db, &o));
    CHECK_OK(db, tocsin_worker_register(c.w, "noop", NULL));
    for (i = 0; i < TW_THREADS; i++) pthread_create(&th[i], NULL, tw_runner, &c);
    pthread_create(&rd, NULL, tw_reader, &c);
    for (i = 0; i < TW_THREADS; i++) pthread_join(th[i], NULL);
    atomic_store(&c.stop, 1);
    pthread_join(rd, NULL);
    CHECK_OK(db, tocsin_worker_close(c.w));
    for (i = 1; i <= TW_JOBS; i++) {
        if (atomic_load(&c.seen[i]) > 1) dups++;
        if (atomic_load(&c.seen[i]) == 0) missing++;
    }
    CHECK_EQ_I(atomic_load(&c.done), TW_JOBS);
    CHECK_EQ_I(dups, 0);
    CHECK_EQ_I(missing, 0);
    CHECK(atomic_load(&c.max_in_run) <= TW_THREADS);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_results"), TW_JOBS);
    tocsin_close(db);
}

void suite_threads(void) {
    worker_threads();
    concurrent_waits_on_one_handle();
    tx_handles();
    tx_connection_state_not_inherited();
    cancelled_lock_wait();
    memdb_handles();
    sqlite_enter();
    one_handle_many_threads();
}
