/*
 * The worker protocol (docs/worker-protocol.md): everything a worker of any
 * runtime does except running the user's handler. The task envelope, the
 * claim across queues, the outcome of each run (result, retry with backoff,
 * final failure recorded as data, hand-back without consuming an attempt),
 * lease renewal, the worker registry and dead-worker recovery, the
 * scheduler's step and the leader's housekeeping. The registry's SQL lives
 * here (it is the worker's table); the queue's in queue.c.
 */
#include "internal.h"

#include <stddef.h>

#include <stdatomic.h>

#include <pthread.h>
#include <stdio.h>

#define W_MAX_QUEUES 64
#define W_DEFAULT_VISIBILITY_MS 30000
#define W_DEFAULT_SCHED_TTL_MS 10000
#define W_DEFAULT_UNKNOWN_DELAY_MS 1000
#define W_UNKNOWN_DELAY_CAP_MS 60000
#define W_DEFAULT_UNKNOWN_HANDBACKS 20
#define W_REAP_EVERY_MS 1000      /* how often the registry is read for dead workers */
#define W_SWEEP_EVERY_MS 60000    /* the leader's housekeeping */
#define W_SCHED_RETRY_MS 1000     /* a schedule that could not fire is tried again */
#define W_SCHED_TELL_MS 60000     /* and its error told again */
#define W_STEP_RETRY_MS 100       /* a step that failed is tried again this much later */
#define W_CANCEL_CHECK_US 20000   /* running jobs and schedules are re-read at most this often */
/* The reserve (docs/worker-protocol.md): a worker whose runs are short claims
 * ahead of its free slots, so that a slot never waits for a commit and each
 * commit carries many claims and outcomes. */
#define W_RESERVE_RUN_US 2000     /* runs shorter than this on average (EWMA) earn a reserve */
#define W_RESERVE_HOLD_US 20000   /* the reserve holds at most this much of the slots' time, */
#define W_RESERVE_MAX 128         /* and at most this many runs (or concurrency, if more) */
#define W_FLUSH_US 5000           /* an outcome waits at most this long for the next claim's commit */

/* ---- SQL of the registry ------------------------------------------------------ */

static const char SQL_W_REGISTER[] =
    "INSERT INTO _tocsin_workers(id, host, pid, pid_start, queues, started_at, heartbeat_at,"
    " lease_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7)"
    " ON CONFLICT(id) DO UPDATE SET host = excluded.host, pid = excluded.pid,"
    " pid_start = excluded.pid_start, queues = excluded.queues,"
    " started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at,"
    " lease_ms = excluded.lease_ms";
static const char SQL_W_HEARTBEAT[] =
    "UPDATE _tocsin_workers SET heartbeat_at = ?2 WHERE id = ?1";
static const char SQL_W_LEAVE[] = "DELETE FROM _tocsin_workers WHERE id = ?1";
static const char SQL_W_SELF[] =
    "SELECT host, pid, pid_start, heartbeat_at, lease_ms FROM _tocsin_workers WHERE id = ?1";
static const char SQL_W_OTHERS[] =
    "SELECT id, host, pid, pid_start, heartbeat_at, lease_ms FROM _tocsin_workers WHERE id <> ?1";
static const char SQL_W_QUEUES[] =
    "SELECT j.value FROM _tocsin_workers AS w, json_each(w.queues) AS j WHERE w.id = ?1";
/* ---- the task envelope -------------------------------------------------------- */

/* args or kwargs: valid JSON of the kind `want` ('[' or '{'), one level less
 * deep than a payload may nest, since the envelope holding it is a level of
 * the payload (else the enqueue would refuse a payload the caller never gave). */
static int check_call_json(tocsin_db *db, const char *what, const char *json, char want) {
    char top = 0;
    int rc;
    if ((rc = tc_check_payload(db, what, json)) != TOCSIN_OK) return rc;
    if (tc_json_wrapper_valid(json, strlen(json), &top, -1) < 0)
        return tc_err(db, TOCSIN_INVALID,
                      "%s nests arrays and objects more than 999 deep (the task envelope around it "
                      "is one more level of the payload, which nests at most 1000 deep, tocsin's "
                      "limit)",
                      what);
    if (top != want)
        return tc_err(db, TOCSIN_INVALID, "%s must be a JSON %s", what,
                      want == '[' ? "array" : "object");
    return TOCSIN_OK;
}

static int check_call(tocsin_db *db, const tocsin_task_call *c) {
    int rc;
    if (!c) return tc_err(db, TOCSIN_INVALID, "call must not be NULL");
    if ((rc = TC_CHECK_VERSION(db, "task call", c->version, TOCSIN_TASK_CALL)) != TOCSIN_OK) return rc;
    if ((rc = tc_check_name(db, "task name", c->task)) != TOCSIN_OK) return rc;
    if (c->args && (rc = check_call_json(db, "args", c->args, '[')) != TOCSIN_OK) return rc;
    if (c->kwargs && (rc = check_call_json(db, "kwargs", c->kwargs, '{')) != TOCSIN_OK) return rc;
    if ((rc = tc_check_ms(db, "result_ttl_ms", c->result_ttl_ms, 0)) != TOCSIN_OK) return rc;
    return tc_check_ms(db, "timeout_ms", c->timeout_ms, 0);
}

int tocsin_task_envelope(tocsin_db *db, char **out_json, const tocsin_task_call *c) {
    tc_buf b = {0};
    int rc, first = 1;
    if (!db) return tc_err(NULL, TOCSIN_INVALID, "db must not be NULL");
    tc_clear(db);
    if (!out_json) return tc_err(db, TOCSIN_INVALID, "out_json must not be NULL");
    *out_json = NULL;
    if ((rc = check_call(db, c)) != TOCSIN_OK) return rc;
    tc_buf_puts(&b, "{");
    tc_buf_key(&b, "task", &first);
    tc_buf_jstr(&b, c->task);
    tc_buf_key(&b, "args", &first);
    tc_buf_puts(&b, c->args ? c->args : "[]");
    tc_buf_key(&b, "kwargs", &first);
    tc_buf_puts(&b, c->kwargs ? c->kwargs : "{}");
    if (c->result_ttl_ms > 0) {
        tc_buf_key(&b, "result_ttl_ms", &first);
        tc_buf_i64(&b, c->result_ttl_ms);
    }
    if (c->timeout_ms > 0) {
        tc_buf_key(&b, "timeout_ms", &first);
        tc_buf_i64(&b, c->timeout_ms);
    }
    tc_buf_puts(&b, "}");
    if (!(*out_json = tc_buf_take(&b))) return tc_err(db, TOCSIN_NOMEM, "task envelope: out of memory");
    if ((int64_t)strlen(*out_json) > db->max_payload) {
        tocsin_free(*out_json);
        *out_json = NULL;
        return tc_err(db, TOCSIN_TOOBIG, "the task call is larger than the payload limit (%lld bytes)",
                      (long long)db->max_payload);
    }
    return TOCSIN_OK;
}

int tocsin_task_enqueue(tocsin_db *db, int64_t *out_id, const char *queue,
                        const tocsin_task_call *call, const tocsin_enqueue_opts *opts) {
    char *env = NULL;
    int rc;
    if (!db) return tc_err(NULL, TOCSIN_INVALID, "db must not be NULL");
    tc_clear(db);
    if (!out_id) return tc_err(db, TOCSIN_INVALID, "out_id must not be NULL");
    *out_id = 0;
    if ((rc = tocsin_task_envelope(db, &env, call)) != TOCSIN_OK) return rc;
    rc = tocsin_queue_enqueue(db, out_id, queue, env, opts);
    tocsin_free(env);
    return rc;
}

/* ---- the worker ----------------------------------------------------------------- */

typedef struct wtask {
    char *name;
    tocsin_task_opts o;
} wtask;

#define W_FINISHED 1  /* wrun.finishing */
#define W_FINISHING 2

/* A run handed out: the binding sees `pub`; the strings are ours. */
typedef struct wrun {
    tocsin_task_run pub;
    char *queue, *task, *args, *kwargs, *meta;
    int64_t result_ttl_ms; /* the call's, 0: the task's default */
    int job_max;              /* the job's own max_attempts (pub's may be the task's, lower) */
    tocsin_task_opts topts;   /* the task's options at the claim (a copy: a later
                                 tocsin_worker_register may move the task table) */
    const struct tocsin_worker *owner; /* the worker that claimed it */
    struct wrun *prev, *next; /* in flight */
    int lost;                 /* reported by tocsin_worker_cancelled already */
    int reserved;             /* claimed ahead, not handed out yet (on w->reserve) */
    int held_back;            /* reserved behind a lost run of the same job whose handler
                                 may still run (under inmu): see hold_back */
    struct wrun *res_next;    /* on w->reserve, oldest first */
    int64_t handed_us;        /* run clock (run_clock_us): when it was handed out, -1: not yet */
    _Atomic int finishing;    /* 0, W_FINISHING (a finish is under way) or W_FINISHED
                                 (its outcome is batched or written; set by any thread) */
    struct wrun *rel_next;    /* on w->released: acked in the caller's transaction */
} wrun;

/* A batched outcome, with its own copies of the strings. */
typedef struct wdone {
    wrun *run;
    tocsin_outcome o;
    int64_t ran_us; /* how long the run took (handed out -> finished), < 0: unknown */
} wdone;

struct tocsin_worker {
    tocsin_db *db;
    tocsin_sub *sub;
    pthread_mutex_t mu; /* runs, batch and cancelled: tocsin_worker_finish may come from any thread */
    /* Runs finished inside a caller's transaction, unlinked at the next upkeep: the
     * finishing thread holds the write lock and must not wait for mu, which an upkeep
     * holds while it waits for that write lock. */
    pthread_mutex_t relmu;
    wrun *released;
    char *id;
    char **queues;
    size_t nq;
    int concurrency;
    int64_t vis, sched_ttl, unknown_delay;
    int unknown_max, scheduler, leader;
    int hot; /* the last claim filled every free slot: claim again without looking first */
    /* Claimed ahead of the free slots, oldest first (under inmu: tocsin_worker_take
     * hands them out while another thread's step waits for the write lock). */
    wrun *reserve, *reserve_tail;
    _Atomic size_t nreserve;
    size_t handed;         /* runs handed out and not finished (under inmu) */
    _Atomic int stepping;  /* a step is under way (it refills the reserve) */
    _Atomic int draining;  /* tocsin_worker_drain: no claim, no run handed out */
    /* Handle's clock: until then the reserve's leases are known to hold (next_renew
     * after a renewal that succeeded). Past it -- the process stalled, a renewal
     * failed -- they may have lapsed and another worker may run those jobs, so a
     * reserved run is handed out only by a step, after the renewal. */
    _Atomic int64_t fresh_until;
    int64_t run_ewma_us;    /* mean run time (handed out -> finished), exponentially weighted */
    int64_t runs_measured;  /* how many runs it has seen (no reserve before `concurrency` of them) */
    int64_t first_done_us;  /* monotonic: when the oldest batched outcome was recorded */
    wtask *tasks;
    size_t ntasks;
    wrun *runs;
    size_t nruns;
    size_t nlost;   /* runs in `runs` whose lease was lost (by the step, under mu) */
    size_t nheld;   /* reserved runs held back (under inmu) */
    int held_news;  /* a lost run went: the step after it hands out what it held back */
    wdone *done;
    size_t ndone, capdone;
    /* Outcomes just recorded, moved to `done` by the next step: tocsin_worker_finish
     * never waits for a step (which may be waiting for the write lock); inmu also
     * guards `cancelled`, so tocsin_worker_cancelled does not wait either. */
    pthread_mutex_t inmu;
    wdone *in;
    size_t nin, capin;
    int64_t in_first_us;
    wrun **claimed; /* a step's claims: up to concurrency + the largest reserve */
    int64_t *cancelled;
    size_t ncancelled, capcancelled;
    int cancel_news; /* under inmu: ids noted since a tocsin_worker_next last returned */
    /* when the next upkeep steps are due (handle's clock) */
    int64_t next_renew, next_reap, next_lead, next_fire, next_sweep, next_claim;
    /* a schedule that cannot fire (tocsin_scheduler_tick: the others did): its
     * error, told by tocsin_worker_next at most every W_SCHED_TELL_MS */
    int sched_err;
    int64_t sched_told;
    char sched_msg[512];
    /* after a step that failed (handle's clock): no database work before it, so a
     * caller that calls again at once does not spin on the failure */
    int64_t retry_at;
    int64_t last_check_us; /* monotonic: the last check of running jobs */
    int recheck_due;       /* a step skipped that check (too soon): one is owed */
    char host[256];
    int pid;
    int64_t pid_start;
    struct tocsin_worker *open_next; /* on open_workers (listed) */
    int listed, registered;
};

/* The workers open in this process, to refuse a second one with the same id
 * on the same file (the registry has one row per id). */
static pthread_mutex_t open_mu = PTHREAD_MUTEX_INITIALIZER;
static tocsin_worker *open_workers;

static void w_lock(tocsin_worker *w) { pthread_mutex_lock(&w->mu); }
static void w_unlock(tocsin_worker *w) { pthread_mutex_unlock(&w->mu); }
static void free_run(wrun *r);
static void unlink_run(tocsin_worker *w, wrun *r);

/* The clock runs are timed on, for the reserve (handed out -> finished): the
 * handle's clock when one was set (tocsin_set_clock: a test's clock decides
 * what a run took, as it decides deadlines), else the monotonic clock, in us.
 * now_ms: the handle's time if the caller read it already (< 0: read it). */
static int64_t run_clock_us(tocsin_worker *w, int64_t now_ms, int64_t mono_us) {
    if (!w->db->clock) return mono_us;
    return (now_ms >= 0 ? now_ms : tocsin_now(w->db)) * 1000;
}

/* Moves the outcomes recorded since the last step into the batch, and lets the
 * reserve follow the mean run time. Under w->mu. */
static int take_incoming(tocsin_worker *w) {
    size_t i;
    pthread_mutex_lock(&w->inmu);
    if (!w->nin) {
        pthread_mutex_unlock(&w->inmu);
        return TOCSIN_OK;
    }
    if (w->ndone + w->nin > w->capdone) {
        size_t cap = w->capdone ? w->capdone : 16;
        wdone *d;
        while (cap < w->ndone + w->nin) cap *= 2;
        if (!(d = sqlite3_realloc64(w->done, cap * sizeof *d))) {
            pthread_mutex_unlock(&w->inmu);
            return tc_err(w->db, TOCSIN_NOMEM, "worker: out of memory");
        }
        w->done = d;
        w->capdone = cap;
    }
    if (!w->ndone) w->first_done_us = w->in_first_us;
    for (i = 0; i < w->nin; i++) {
        int64_t d = w->in[i].ran_us;
        w->done[w->ndone++] = w->in[i];
        if (d >= 0) {
            w->run_ewma_us = w->runs_measured ? w->run_ewma_us + (d - w->run_ewma_us) / 8 : d;
            w->runs_measured++;
        }
    }
    w->nin = 0;
    pthread_mutex_unlock(&w->inmu);
    return TOCSIN_OK;
}

/* Unlinks and frees the runs finished in callers' transactions. Under w->mu. */
static void drain_released(tocsin_worker *w) {
    wrun *r;
    pthread_mutex_lock(&w->relmu);
    r = w->released;
    w->released = NULL;
    pthread_mutex_unlock(&w->relmu);
    while (r) {
        wrun *next = r->rel_next;
        unlink_run(w, r);
        free_run(r);
        r = next;
    }
}

static void free_run(wrun *r) {
    if (!r) return;
    sqlite3_free(r->queue);
    sqlite3_free(r->task);
    sqlite3_free(r->args);
    sqlite3_free(r->kwargs);
    sqlite3_free(r->meta);
    sqlite3_free(r);
}

static void unlink_run(tocsin_worker *w, wrun *r) {
    if (r->lost) {
        w->nlost--;
        if (w->nheld) w->held_news = 1;
    }
    if (r->prev) r->prev->next = r->next;
    else w->runs = r->next;
    if (r->next) r->next->prev = r->prev;
    r->prev = r->next = NULL;
    w->nruns--;
}

static void free_outcome(tocsin_outcome *o) {
    sqlite3_free((char *)o->value);
    sqlite3_free((char *)o->error_type);
    sqlite3_free((char *)o->error_message);
    sqlite3_free((char *)o->error_trace);
}

static const wtask *find_task(const tocsin_worker *w, const char *name) {
    size_t i;
    for (i = 0; i < w->ntasks; i++)
        if (strcmp(w->tasks[i].name, name) == 0) return &w->tasks[i];
    return NULL;
}

static int registry_write(tocsin_worker *w, int64_t now) {
    tocsin_db *db = w->db;
    sqlite3_stmt *st = tc_stmt(db, SQL_W_REGISTER);
    tc_buf b = {0};
    size_t i;
    char *queues;
    int rc;
    if (!st) return TC_ERRCODE;
    tc_buf_puts(&b, "[");
    for (i = 0; i < w->nq; i++) {
        if (i) tc_buf_puts(&b, ",");
        tc_buf_jstr(&b, w->queues[i]);
    }
    tc_buf_puts(&b, "]");
    if (!(queues = tc_buf_take(&b))) return tc_err(db, TOCSIN_NOMEM, "worker: out of memory");
    sqlite3_bind_text(st, 1, w->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, w->host, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, w->pid);
    sqlite3_bind_int64(st, 4, w->pid_start);
    sqlite3_bind_text(st, 5, queues, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 6, now);
    sqlite3_bind_int64(st, 7, w->vis);
    rc = tc_step_done(db, st, "register worker");
    sqlite3_free(queues);
    return rc;
}

static int worker_check_opts(tocsin_db *db, const tocsin_worker_opts *o) {
    size_t i;
    int rc;
    if (!o) return tc_err(db, TOCSIN_INVALID, "worker options must not be NULL (they name the queues)");
    if ((rc = TC_CHECK_VERSION(db, "worker options", o->version, TOCSIN_WORKER_OPTS)) != TOCSIN_OK)
        return rc;
    if (o->worker_id && (rc = tc_check_name(db, "worker id", o->worker_id)) != TOCSIN_OK) return rc;
    if (!o->queues || o->n_queues < 1 || o->n_queues > W_MAX_QUEUES)
        return tc_err(db, TOCSIN_INVALID, "a worker needs 1 to %d queues", W_MAX_QUEUES);
    for (i = 0; i < o->n_queues; i++)
        if ((rc = tc_check_name(db, "queue name", o->queues[i])) != TOCSIN_OK) return rc;
    if (o->concurrency < 0 || o->concurrency > TOCSIN_MAX_BATCH)
        return tc_err(db, TOCSIN_INVALID, "concurrency must be between 1 and %d", TOCSIN_MAX_BATCH);
    if (o->visibility_ms &&
        (rc = tc_check_ms(db, "visibility_ms", o->visibility_ms, TOCSIN_MIN_WORKER_LEASE_MS)) != TOCSIN_OK)
        return rc;
    if (o->scheduler_ttl_ms &&
        (o->scheduler_ttl_ms < TOCSIN_MIN_WORKER_LEASE_MS || o->scheduler_ttl_ms > TOCSIN_MAX_LEASE_MS))
        /* the leader lease is a lock: a longer ttl made every later lead fail */
        return tc_err(db, TOCSIN_INVALID, "scheduler_ttl_ms must be between %d and %lld (366 days), not %lld",
                      TOCSIN_MIN_WORKER_LEASE_MS, (long long)TOCSIN_MAX_LEASE_MS,
                      (long long)o->scheduler_ttl_ms);
    if ((rc = tc_check_ms(db, "unknown_task_delay_ms", o->unknown_task_delay_ms, 0)) != TOCSIN_OK)
        return rc;
    if (o->unknown_task_handbacks < 0 || o->unknown_task_handbacks > TOCSIN_MAX_ATTEMPTS)
        return tc_err(db, TOCSIN_INVALID, "unknown_task_handbacks must be between 0 and %d",
                      TOCSIN_MAX_ATTEMPTS);
    return TOCSIN_OK;
}

/* Refuses an id another live worker registered on this database: the same
 * process's (same file), a live process of this host, or a worker elsewhere
 * whose heartbeat is within its lease. Two workers under one id would replace
 * each other's registry row, and the death of one would release the other's
 * leases while it still runs them. */
/* The process's part: lists w (close unlists it) unless a worker of this
 * process has its id on the same file. */
static int list_worker(tocsin_worker *w) {
    tocsin_db *db = w->db;
    tocsin_worker *o;
    pthread_mutex_lock(&open_mu);
    for (o = open_workers; o; o = o->open_next)
        if (strcmp(o->id, w->id) == 0 && o->db->has_identity && db->has_identity &&
            o->db->dev == db->dev && o->db->ino == db->ino) {
            pthread_mutex_unlock(&open_mu);
            return tc_err(db, TOCSIN_INVALID,
                          "worker id \"%s\" is taken by another open worker of this process on this "
                          "database: give each worker its own id", w->id);
        }
    w->open_next = open_workers;
    open_workers = w;
    w->listed = 1;
    pthread_mutex_unlock(&open_mu);
    return TOCSIN_OK;
}

/* The leases a gone worker (registry row `id`) held on its queues lapse at
 * once: the next claim of each queue takes its jobs back, the crashed run
 * counting as an attempt. Inside a write op. */
static int release_gone(tocsin_db *db, const char *id) {
    sqlite3_stmt *st;
    char *queues[W_MAX_QUEUES];
    size_t nq = 0, k;
    int64_t released = 0;
    int rc;
    if (!(st = tc_stmt(db, SQL_W_QUEUES))) return TC_ERRCODE;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    while (nq < W_MAX_QUEUES && (rc = tc_step(db, st)) == SQLITE_ROW)
        if ((queues[nq] = tc_col_text(st, 0)) != NULL) nq++;
    sqlite3_reset(st);
    rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? TOCSIN_OK : tc_sqlerr(db, rc, "read workers");
    for (k = 0; k < nq; k++) {
        if (rc == TOCSIN_OK) rc = tc_jobs_release_worker(db, queues[k], id, &released);
        sqlite3_free(queues[k]);
    }
    return rc;
}

/* The registry's part, inside the registration op (this process's own row is
 * a close that could not leave the registry: list_worker ruled out the rest). */
static int check_id_free(tocsin_worker *w, int64_t now) {
    tocsin_db *db = w->db;
    sqlite3_stmt *st;
    int rc;
    if (!(st = tc_stmt(db, SQL_W_SELF))) return TC_ERRCODE;
    sqlite3_bind_text(st, 1, w->id, -1, SQLITE_STATIC);
    rc = tc_step(db, st);
    if (rc == SQLITE_ROW) {
        const char *host = (const char *)sqlite3_column_text(st, 0);
        int pid = sqlite3_column_int(st, 1), same_host = host && strcmp(host, w->host) == 0;
        int64_t start = sqlite3_column_int64(st, 2), beat = sqlite3_column_int64(st, 3),
                lease = sqlite3_column_int64(st, 4);
        /* this process's own row, no worker open under it: a close that could not
         * leave the registry; a process of this host: alive or not; elsewhere:
         * its heartbeat */
        int live = same_host ? pid != w->pid && !tc_process_gone(pid, start) : now - beat <= lease;
        if (live) {
            char who[300];
            snprintf(who, sizeof who, "pid %d on %s", pid, host ? host : "?");
            sqlite3_reset(st);
            return tc_err(db, TOCSIN_INVALID,
                          "worker id \"%s\" is registered by a live worker (%s%s): give each worker "
                          "its own id", w->id, who,
                          same_host ? "" : "; its registration lapses when its heartbeat is older "
                                           "than its lease");
        }
        /* a gone predecessor under this id (a restart with a fixed id): its jobs
         * come back now, as a reaped worker's do -- no other worker reaps a row
         * this one is about to take over, so they waited out their whole lease */
        sqlite3_reset(st);
        return release_gone(db, w->id);
    }
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? TOCSIN_OK : tc_sqlerr(db, rc, "read workers");
}

/* Frees a half-opened worker, keeping the thread's error (closing clears it). */
static int open_failed(tocsin_worker *w, int rc) {
    TC_KEEP_ERROR(tocsin_worker_close(w));
    return rc;
}

/* The largest reserve (the claimed array has room for concurrency + this). */
static size_t reserve_max(const tocsin_worker *w) {
    return (size_t)w->concurrency > W_RESERVE_MAX ? (size_t)w->concurrency : W_RESERVE_MAX;
}

int tocsin_worker_open(tocsin_worker **out, tocsin_db *db, const tocsin_worker_opts *o) {
    tocsin_worker *w;
    tc_op op;
    size_t i;
    int rc;
    if (!out) return tc_err(NULL, TOCSIN_INVALID, "out must not be NULL");
    *out = NULL;
    if (!db) return tc_err(NULL, TOCSIN_INVALID, "db must not be NULL");
    tc_clear(db);
    if ((rc = worker_check_opts(db, o)) != TOCSIN_OK) return rc;
    if (db->is_tx) return tc_err(db, TOCSIN_INVALID, "a worker runs on a database handle, not a transaction");
    if (db->read_only) return tc_err(db, TOCSIN_READONLY, "a worker needs a read-write handle");
    if (!(w = sqlite3_malloc(sizeof *w))) return tc_err(db, TOCSIN_NOMEM, "worker: out of memory");
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_mutex_init(&w->relmu, NULL);
    pthread_mutex_init(&w->inmu, NULL);
    w->db = db;
    w->concurrency = o->concurrency ? o->concurrency : 1;
    w->vis = o->visibility_ms ? o->visibility_ms : W_DEFAULT_VISIBILITY_MS;
    w->sched_ttl = o->scheduler_ttl_ms ? o->scheduler_ttl_ms : W_DEFAULT_SCHED_TTL_MS;
    w->unknown_delay = o->unknown_task_delay_ms ? o->unknown_task_delay_ms : W_DEFAULT_UNKNOWN_DELAY_MS;
    w->unknown_max = o->unknown_task_handbacks ? o->unknown_task_handbacks : W_DEFAULT_UNKNOWN_HANDBACKS;
    w->scheduler = o->scheduler != 0;
    tc_host_name(w->host, sizeof w->host);
    w->pid = tc_process_id();
    w->pid_start = tc_process_start(w->pid);
    if (o->worker_id) {
        w->id = tc_strdup(o->worker_id);
    } else {
        char id[TOCSIN_OWNER_ID_SIZE];
        tocsin_owner_id(id, sizeof id);
        w->id = tc_strdup(id);
    }
    w->queues = sqlite3_malloc64(o->n_queues * sizeof *w->queues);
    w->claimed = sqlite3_malloc64(((size_t)w->concurrency + reserve_max(w)) * sizeof *w->claimed);
    if (!w->id || !w->queues || !w->claimed) {
        return open_failed(w, tc_err(db, TOCSIN_NOMEM, "worker: out of memory"));
    }
    for (i = 0; i < o->n_queues; i++) {
        if (!(w->queues[i] = tc_strdup(o->queues[i]))) {
            return open_failed(w, tc_err(db, TOCSIN_NOMEM, "worker: out of memory"));
        }
        w->nq++;
    }
    if ((rc = tocsin_sub_open(&w->sub, db)) != TOCSIN_OK) {
        return open_failed(w, rc);
    }
    if ((rc = list_worker(w)) == TOCSIN_OK && (rc = tc_op_begin(db, &op, 1)) == TOCSIN_OK) {
        int64_t now = tocsin_now(db);
        rc = check_id_free(w, now);
        if (rc == TOCSIN_OK) rc = registry_write(w, now);
        rc = tc_op_end(db, &op, rc);
        w->registered = rc == TOCSIN_OK;
    }
    if (rc != TOCSIN_OK) {
        return open_failed(w, rc);
    }
    *out = w;
    return TOCSIN_OK;
}

int tocsin_worker_register(tocsin_worker *w, const char *task, const tocsin_task_opts *opts) {
    tocsin_task_opts o = TOCSIN_TASK_OPTS_INIT;
    wtask *t;
    int rc;
    if (!w) return tc_err(NULL, TOCSIN_INVALID, "worker must not be NULL");
    tc_clear(w->db);
    if ((rc = tc_check_name(w->db, "task name", task)) != TOCSIN_OK) return rc;
    if (opts) {
        if ((rc = TC_CHECK_VERSION(w->db, "task options", opts->version, TOCSIN_TASK_OPTS)) != TOCSIN_OK)
            return rc;
        if (opts->version == 1) /* a caller built before max_attempts: its struct ends before it */
            memcpy(&o, opts, offsetof(tocsin_task_opts, max_attempts));
        else
            o = *opts;
        o.version = TOCSIN_TASK_OPTS_VERSION;
    }
    if (o.max_attempts < 0 || o.max_attempts > TOCSIN_MAX_ATTEMPTS)
        return tc_err(w->db, TOCSIN_INVALID,
                      "max_attempts must be between 1 and %d (0: the job's own), not %d",
                      TOCSIN_MAX_ATTEMPTS, o.max_attempts);
    if ((rc = tc_check_ms(w->db, "backoff_base_ms", o.backoff_base_ms, 0)) != TOCSIN_OK ||
        (rc = tc_check_ms(w->db, "backoff_cap_ms", o.backoff_cap_ms, 0)) != TOCSIN_OK ||
        (rc = tc_check_ms(w->db, "timeout_ms", o.timeout_ms, 0)) != TOCSIN_OK)
        return rc;
    if (o.result_ttl_ms > TOCSIN_MAX_TIME_MS)
        return tc_err(w->db, TOCSIN_INVALID, "result_ttl_ms must be at most %lld ms",
                      (long long)TOCSIN_MAX_TIME_MS);
    w_lock(w);
    if ((t = (wtask *)find_task(w, task)) != NULL) {
        t->o = o; /* registering again replaces the options */
        w_unlock(w);
        return TOCSIN_OK;
    }
    t = sqlite3_realloc64(w->tasks, (w->ntasks + 1) * sizeof *w->tasks);
    if (t) w->tasks = t;
    if (!t || !(w->tasks[w->ntasks].name = tc_strdup(task))) {
        w_unlock(w);
        return tc_err(w->db, TOCSIN_NOMEM, "worker: out of memory");
    }
    w->tasks[w->ntasks++].o = o;
    w_unlock(w);
    return TOCSIN_OK;
}

/* ---- outcomes -------------------------------------------------------------------- */

static int64_t run_result_ttl(const wrun *r) {
    int64_t t = r->result_ttl_ms;
    if (t > 0) return t;
    t = r->topts.result_ttl_ms;
    return t > 0 ? t : t < 0 ? 0 : TOCSIN_DEFAULT_RESULT_TTL_MS;
}

/* The retry delay after the run'th run of a job (hand-backs are no runs: a
 * job handed back across a rolling deploy starts its backoff at the base). */
static int64_t run_backoff(const wrun *r, int64_t runs) {
    int64_t base = r->topts.backoff_base_ms ? r->topts.backoff_base_ms : TOCSIN_BACKOFF_BASE_MS;
    int64_t cap = r->topts.backoff_cap_ms ? r->topts.backoff_cap_ms : TOCSIN_BACKOFF_CAP_MS;
    return tocsin_backoff_ms(base, cap, runs < 1 ? 1 : (int)runs);
}

/* An owned copy of s cut to max bytes on a UTF-8 boundary. */
static char *cut_text(const char *s, size_t max) {
    size_t n;
    char *p;
    if (!s) return NULL;
    n = strlen(s);
    if (n > max) n = max;
    if (!(p = sqlite3_malloc64(n + 1))) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    tc_cut_utf8(p, max);
    return p;
}

/* A traceback, cut to TOCSIN_MAX_TRACE_BYTES (owned copy). */
static char *cut_trace(const char *s) {
    return cut_text(s, TOCSIN_MAX_TRACE_BYTES);
}

/* A final failure: dead now (reason `reason` via fail or retry), its error as the result. */
static int record_error(tocsin_db *db, int *ok, const wrun *r, const tocsin_outcome *o, int final) {
    const char *type = o->error_type ? o->error_type : "Error";
    const char *msg = o->error_message ? o->error_message : "";
    char *text = *msg ? sqlite3_mprintf("%s: %s", type, msg) : sqlite3_mprintf("%s", type);
    int rc, dies = final || r->pub.attempt >= r->job_max, spent = 0;
    int64_t handbacks = 0;
    if (!text) return tc_err(db, TOCSIN_NOMEM, "worker: out of memory");
    tc_cut_utf8(text, (size_t)db->max_payload); /* last_error: "type: message", bounded */
    /* the job's runs are its claims less its hand-backs: the task's own bound
     * and the backoff count those */
    if (!dies && (r->topts.max_attempts > 0 || o->delay_ms < 0) &&
        (rc = tc_job_handbacks(db, r->pub.job_id, &handbacks)) != TOCSIN_OK) {
        sqlite3_free(text);
        return rc;
    }
    if (!dies && r->topts.max_attempts > 0) dies = spent = r->pub.attempt - handbacks >= r->topts.max_attempts;
    if (final || spent)
        rc = tc_job_to_dead(db, ok, r->pub.job_id, r->pub.token, text, final ? "failed" : "max_attempts");
    else
        rc = tocsin_job_retry(db, ok, r->pub.job_id, r->pub.token,
                              o->delay_ms >= 0 ? o->delay_ms : run_backoff(r, r->pub.attempt - handbacks), text);
    sqlite3_free(text);
    if (rc == TOCSIN_OK && *ok && dies) {
        char *trace = cut_trace(o->error_trace);
        if (o->error_trace && !trace) return tc_err(db, TOCSIN_NOMEM, "worker: out of memory");
        rc = tc_result_save_error(db, r->pub.job_id, type, msg, trace, run_result_ttl(r));
        sqlite3_free(trace);
    }
    return rc;
}

/* Applies one outcome inside the caller's write op; *held 0 when the lease was lost. */
static int apply_outcome(tocsin_db *db, int *held, const wrun *r, const tocsin_outcome *o) {
    *held = 0;
    switch (o->kind) {
    case TOCSIN_OUTCOME_OK:
        return tocsin_job_complete(db, held, r->pub.job_id, r->pub.token, o->value ? o->value : "null",
                                   run_result_ttl(r));
    case TOCSIN_OUTCOME_ERROR: return record_error(db, held, r, o, 0);
    case TOCSIN_OUTCOME_FAIL: return record_error(db, held, r, o, 1);
    default:
        return tc_job_hand_back(db, held, NULL, r->pub.job_id, r->pub.token,
                                o->delay_ms > 0 ? o->delay_ms : 0, o->error_message);
    }
}

/* The outcome's form (a programming error of the binding when wrong). */
static int check_outcome_form(tocsin_db *db, const tocsin_outcome *o) {
    if (!o) return tc_err(db, TOCSIN_INVALID, "outcome must not be NULL");
    int rc;
    if ((rc = TC_CHECK_VERSION(db, "outcome", o->version, TOCSIN_OUTCOME)) != TOCSIN_OK) return rc;
    if (o->kind < TOCSIN_OUTCOME_OK || o->kind > TOCSIN_OUTCOME_HAND_BACK)
        return tc_err(db, TOCSIN_INVALID, "outcome kind %d is not one of TOCSIN_OUTCOME_*", o->kind);
    return TOCSIN_OK;
}

/* The outcome's contents: what the task produced (a result too big or not
 * JSON, an error type that is not a name, text that is not UTF-8). */
static int check_outcome(tocsin_db *db, const tocsin_outcome *o) {
    int rc;
    if (o->kind == TOCSIN_OUTCOME_OK && o->value &&
        (rc = tc_check_payload(db, "result value", o->value)) != TOCSIN_OK)
        return rc;
    /* a message, a hand-back reason and a trace are cut (finish_claimed), not
     * refused: a long exception text must not turn a retry into a death. Only
     * their encoding must be right. */
    if (o->kind == TOCSIN_OUTCOME_HAND_BACK &&
        (rc = tc_check_text(db, "hand-back reason", o->error_message, SIZE_MAX)) != TOCSIN_OK)
        return rc;
    if (o->kind == TOCSIN_OUTCOME_ERROR || o->kind == TOCSIN_OUTCOME_FAIL) {
        if (o->error_type && (rc = tc_check_name(db, "error type", o->error_type)) != TOCSIN_OK) return rc;
        if ((rc = tc_check_text(db, "error message", o->error_message, SIZE_MAX)) != TOCSIN_OK) return rc;
        if ((rc = tc_check_text(db, "error trace", o->error_trace, SIZE_MAX)) != TOCSIN_OK) return rc;
    }
    /* delay_ms is read for ERROR and HAND_BACK only: an OK or FAIL outcome
     * with any delay_ms (one a binding left unset) is not refused for it */
    if ((o->kind == TOCSIN_OUTCOME_ERROR || o->kind == TOCSIN_OUTCOME_HAND_BACK) && o->delay_ms >= 0 &&
        (rc = tc_check_ms(db, "delay_ms", o->delay_ms, 0)) != TOCSIN_OK)
        return rc;
    return TOCSIN_OK;
}

/* Commits the batch in one write transaction (group commit). Under w->mu. */
/* Writes the batched outcomes inside the caller's write op. Under w->mu. */
static int apply_batch(tocsin_worker *w, size_t *lost) {
    size_t i;
    int rc = TOCSIN_OK;
    for (i = 0; i < w->ndone && rc == TOCSIN_OK; i++) {
        int held = 0;
        rc = apply_outcome(w->db, &held, w->done[i].run, &w->done[i].o);
        if (rc == TOCSIN_OK && !held && lost) (*lost)++;
    }
    return rc;
}

/* Forgets the batch once the transaction that wrote it committed. */
static void drop_batch(tocsin_worker *w) {
    size_t i;
    for (i = 0; i < w->ndone; i++) {
        unlink_run(w, w->done[i].run);
        free_run(w->done[i].run);
        free_outcome(&w->done[i].o);
    }
    w->ndone = 0;
}

/* Commits the batch in one write transaction (group commit). Under w->mu. */
static int flush_batch(tocsin_worker *w, size_t *lost) {
    tc_op op;
    int rc;
    if (lost) *lost = 0;
    if (!w->ndone) return TOCSIN_OK;
    if ((rc = tc_op_begin(w->db, &op, 1)) != TOCSIN_OK) return rc;
    /* on failure the batch stays for the next try */
    if ((rc = tc_op_end(w->db, &op, apply_batch(w, lost))) == TOCSIN_OK) drop_batch(w);
    return rc;
}

int tocsin_worker_flush(tocsin_worker *w, size_t *out_lost) {
    int rc;
    if (!w) return tc_err(NULL, TOCSIN_INVALID, "worker must not be NULL");
    tc_clear(w->db);
    w_lock(w);
    rc = take_incoming(w);
    if (rc == TOCSIN_OK) rc = flush_batch(w, out_lost);
    w_unlock(w);
    return rc;
}

/* The finish of a run this thread claimed (W_FINISHING): on success the run is
 * W_FINISHED and no longer ours to touch (a step may free it at once); on
 * failure nothing was recorded and the caller gives the claim back. */
static int finish_checked(tocsin_worker *w, tocsin_db *tx, wrun *r, const tocsin_outcome *o);
static int finish_claimed(tocsin_worker *w, tocsin_db *tx, wrun *r, const tocsin_outcome *o) {
    tocsin_outcome shorter;
    char *cut;
    int rc;
    if (!o || o->kind == TOCSIN_OUTCOME_OK || !o->error_message ||
        strlen(o->error_message) <= (size_t)w->db->max_payload)
        return finish_checked(w, tx, r, o);
    /* a message over the payload limit is cut to it (on a UTF-8 boundary), as
     * last_error and the error result store it, and the outcome stands */
    if (!(cut = cut_text(o->error_message, (size_t)w->db->max_payload)))
        return tc_err(w->db, TOCSIN_NOMEM, "worker: out of memory");
    shorter = *o;
    shorter.error_message = cut;
    rc = finish_checked(w, tx, r, &shorter);
    sqlite3_free(cut);
    return rc;
}

static int finish_checked(tocsin_worker *w, tocsin_db *tx, wrun *r, const tocsin_outcome *o) {
    tocsin_outcome c;
    int rc;
    tocsin_outcome refused = TOCSIN_OUTCOME_INIT;
    tocsin_outcome late = TOCSIN_OUTCOME_INIT;
    char why[sizeof tc_tls()->msg + 40];
    if ((rc = check_outcome(w->db, o)) != TOCSIN_OK) {
        /* In a transaction: refused, nothing written (the caller rolls back
         * the task's writes and finishes again without tx). Otherwise the run
         * must still end, not keep its lease and slot until the worker stops:
         * a final failure naming what was refused takes the outcome's place. */
        if (tx || rc == TOCSIN_NOMEM) return rc;
        snprintf(why, sizeof why, "the outcome was refused: %s", tc_tls()->msg);
        tc_cut_utf8(why, (size_t)w->db->max_payload); /* stored as text under that limit */
        refused.kind = TOCSIN_OUTCOME_FAIL;
        refused.error_type = o->kind == TOCSIN_OUTCOME_OK ? "InvalidResult" : "InvalidOutcome";
        refused.error_message = why;
        o = &refused;
        tc_clear(w->db);
    }
    if (o->kind == TOCSIN_OUTCOME_ERROR && r->pub.timeout_ms > 0 && o->error_type &&
        strcmp(o->error_type, "Timeout") == 0 && (!o->error_message || !*o->error_message)) {
        /* the runtime interrupted the run at its timeout: the message is the
         * core's, the same in every runtime */
        snprintf(why, sizeof why, "the run exceeded its timeout of %lld ms", (long long)r->pub.timeout_ms);
        late = *o;
        late.error_message = why;
        o = &late;
    } else if (o->kind == TOCSIN_OUTCOME_OK && r->pub.timeout_ms > 0 &&
               tocsin_now(w->db) - r->pub.started_at > r->pub.timeout_ms) {
        /* It returned after its timeout (CPU-bound work the runtime could not
         * interrupt, a handler that swallowed the cancellation): the attempt
         * fails as a timeout does, whatever it returned, the same in every
         * runtime. In a transaction: refused, so that the binding rolls the
         * task's writes back and finishes again without it. */
        snprintf(why, sizeof why, "the run exceeded its timeout of %lld ms (it returned after %lld ms)",
                 (long long)r->pub.timeout_ms, (long long)(tocsin_now(w->db) - r->pub.started_at));
        if (tx) return tc_err(w->db, TOCSIN_INVALID, "%s: its result is refused", why);
        late.kind = TOCSIN_OUTCOME_ERROR;
        late.error_type = "Timeout";
        late.error_message = why;
        o = &late;
    }
    if (tx) {
        tc_op op;
        int held = 0;
        if (!tx->is_tx || tx->parent != w->db)
            return tc_err(w->db, TOCSIN_INVALID,
                          "tx must be a transaction handle begun on the worker's database handle");
        if ((rc = tc_op_begin(tx, &op, 1)) != TOCSIN_OK) return rc;
        rc = tc_op_end(tx, &op, apply_outcome(tx, &held, r, o));
        if (rc != TOCSIN_OK) return rc;
        if (!held)
            return tc_err(tx, TOCSIN_LEASE_LOST,
                          "job %lld: the lease was lost (another worker holds it, or it was cancelled); nothing was written",
                          (long long)r->pub.job_id);
        /* the run is over for this worker whatever the transaction does: if it
         * rolls back, the lease lapses and the job is claimed again. Released for
         * the next upkeep (never waiting for w->mu while tx holds the write lock). */
        pthread_mutex_lock(&w->relmu);
        atomic_store(&r->finishing, W_FINISHED);
        r->rel_next = w->released;
        w->released = r;
        pthread_mutex_unlock(&w->relmu);
        pthread_mutex_lock(&w->inmu);
        w->handed--; /* its slot is free */
        pthread_mutex_unlock(&w->inmu);
        tc_sub_nudge(w->sub);
        return TOCSIN_OK;
    }
    c = *o;
    c.value = tc_strdup(o->value);
    c.error_type = tc_strdup(o->error_type);
    c.error_message = tc_strdup(o->error_message);
    c.error_trace = cut_trace(o->error_trace);
    if ((o->value && !c.value) || (o->error_type && !c.error_type) ||
        (o->error_message && !c.error_message) || (o->error_trace && !c.error_trace)) {
        free_outcome(&c);
        return tc_err(w->db, TOCSIN_NOMEM, "worker: out of memory");
    }
    pthread_mutex_lock(&w->inmu);
    if (w->nin == w->capin) {
        size_t cap = w->capin ? w->capin * 2 : 16;
        wdone *d = sqlite3_realloc64(w->in, cap * sizeof *d);
        if (!d) {
            pthread_mutex_unlock(&w->inmu);
            free_outcome(&c);
            return tc_err(w->db, TOCSIN_NOMEM, "worker: out of memory");
        }
        w->in = d;
        w->capin = cap;
    }
    {
        int64_t now_us = tc_monotonic_us(), ran_us = run_clock_us(w, -1, now_us);
        w->in[w->nin].run = r;
        w->in[w->nin].o = c;
        w->in[w->nin].ran_us = r->handed_us >= 0 && ran_us >= r->handed_us ? ran_us - r->handed_us : -1;
        if (!w->nin++) w->in_first_us = now_us;
    }
    atomic_store(&r->finishing, W_FINISHED);
    w->handed--; /* its slot is free */
    pthread_mutex_unlock(&w->inmu);
    tc_sub_nudge(w->sub); /* a blocked tocsin_worker_next commits it and fills the slot */
    return TOCSIN_OK;
}

int tocsin_worker_finish(tocsin_worker *w, tocsin_db *tx, tocsin_task_run *run,
                         const tocsin_outcome *o) {
    wrun *r = (wrun *)run;
    int rc, idle = 0;
    if (!w || !run) return tc_err(NULL, TOCSIN_INVALID, "worker and run must not be NULL");
    tc_clear(w->db);
    if (r->owner != w)
        return tc_err(w->db, TOCSIN_INVALID,
                      "this run was handed out by another worker: finish it on that worker");
    if ((rc = check_outcome_form(w->db, o)) != TOCSIN_OK) return rc;
    /* Once, also across threads: the first finish claims the run for the whole
     * call (a transactional one writes before it releases the run), and one
     * that is refused gives it back to be finished again. */
    if (!atomic_compare_exchange_strong(&r->finishing, &idle, W_FINISHING))
        return tc_err(w->db, TOCSIN_INVALID, "this run was finished already (or is being finished)");
    if ((rc = finish_claimed(w, tx, r, o)) != TOCSIN_OK) atomic_store(&r->finishing, 0);
    return rc;
}

/* ---- upkeep ------------------------------------------------------------------------ */

/* ---- the reserve ---------------------------------------------------------------- */

/* How many runs to keep claimed ahead: none until `concurrency` runs were
 * measured and while runs take W_RESERVE_RUN_US or more on average (a long
 * run would keep the reserve from other workers), else what the slots run in
 * W_RESERVE_HOLD_US at the mean run time, between concurrency and
 * reserve_max. The bigger a refill, the fewer commits and lock hand-overs per
 * run; the time bound keeps a worker from holding more than a few
 * milliseconds of work that an idle worker could start. */
static size_t reserve_target(const tocsin_worker *w) {
    size_t c = (size_t)w->concurrency, max = reserve_max(w), t;
    if (w->runs_measured < w->concurrency || w->run_ewma_us >= W_RESERVE_RUN_US) return 0;
    t = (size_t)(W_RESERVE_HOLD_US / (w->run_ewma_us > 0 ? w->run_ewma_us : 1)) * c;
    return t < c ? c : t > max ? max : t;
}


/* The reserve's list and `handed`: under inmu. */
static void reserve_push(tocsin_worker *w, wrun *r) {
    r->reserved = 1;
    r->res_next = NULL;
    if (w->reserve_tail) w->reserve_tail->res_next = r;
    else w->reserve = r;
    w->reserve_tail = r;
    w->nreserve++;
}

/* The oldest reserved run that may be handed out (not one held back). */
static wrun *reserve_pop(tocsin_worker *w) {
    wrun **p = &w->reserve, *prev = NULL, *r;
    while ((r = *p) != NULL && r->held_back) {
        prev = r;
        p = &r->res_next;
    }
    if (!r) return NULL;
    *p = r->res_next;
    if (w->reserve_tail == r) w->reserve_tail = prev;
    r->res_next = NULL;
    r->reserved = 0;
    w->nreserve--;
    return r;
}

/*
 * One job, one run at a time in a worker: every binding knows a run by its job
 * id (to cancel it, to time it out, to count it). A job claimed again while a
 * run of it whose lease was lost -- another worker took it over after a stall,
 * then handed it back or retried it -- may still be running here waits in the
 * reserve, its lease renewed, until that run is gone (finished and dropped).
 * hold_back returns whether r is held back. By the step (under mu and inmu),
 * before r is linked into w->runs.
 */
static int lost_run_of(const tocsin_worker *w, int64_t job_id) {
    const wrun *o;
    if (!w->nlost) return 0;
    for (o = w->runs; o; o = o->next)
        if (o->lost && o->pub.job_id == job_id) return 1;
    return 0;
}

static int hold_back(tocsin_worker *w, wrun *r) {
    if (!lost_run_of(w, r->pub.job_id)) return 0;
    r->held_back = 1;
    w->nheld++;
    return 1;
}

/* The held-back runs whose lost run is gone may be handed out. By the step
 * (under mu and inmu). */
static void release_held(tocsin_worker *w) {
    wrun *r;
    w->held_news = 0;
    for (r = w->reserve; r && w->nheld; r = r->res_next) {
        if (r->held_back && !lost_run_of(w, r->pub.job_id)) {
            r->held_back = 0;
            w->nheld--;
        }
    }
}

/* A reserved run whose lease is gone (cancelled, taken back): forgotten, never
 * handed out. */
static void reserve_drop(tocsin_worker *w, wrun *r) {
    wrun **p = &w->reserve, *prev = NULL;
    while (*p && *p != r) {
        prev = *p;
        p = &(*p)->res_next;
    }
    if (!*p) return;
    *p = r->res_next;
    if (w->reserve_tail == r) w->reserve_tail = prev;
    r->reserved = 0;
    if (r->held_back) {
        r->held_back = 0;
        w->nheld--;
    }
    w->nreserve--;
}

static int note_cancelled(tocsin_worker *w, wrun *r) {
    if (r->lost) return TOCSIN_OK;
    pthread_mutex_lock(&w->inmu); /* tocsin_worker_cancelled takes only inmu */
    if (r->reserved) { /* never handed out: forgotten */
        reserve_drop(w, r);
        pthread_mutex_unlock(&w->inmu);
        unlink_run(w, r);
        free_run(r);
        return TOCSIN_OK;
    }
    if (w->ncancelled == w->capcancelled) {
        size_t cap = w->capcancelled ? w->capcancelled * 2 : 16;
        int64_t *p = sqlite3_realloc64(w->cancelled, cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&w->inmu);
            return tc_err(w->db, TOCSIN_NOMEM, "worker: out of memory");
        }
        w->cancelled = p;
        w->capcancelled = cap;
    }
    w->cancelled[w->ncancelled++] = r->pub.job_id;
    w->cancel_news = 1;
    pthread_mutex_unlock(&w->inmu);
    r->lost = 1;
    w->nlost++;
    return TOCSIN_OK;
}

/* Renews the leases of the running jobs, of the finished runs whose outcomes
 * wait in the batch (a group commit that keeps failing -- a full disk, a
 * failing hook -- must not let them lapse and run again), and the registry's
 * heartbeat. */
static int renew(tocsin_worker *w, int64_t now) {
    tocsin_db *db = w->db;
    sqlite3_stmt *st;
    wrun *r;
    tc_op op;
    int rc;
    size_t i;
    wrun *next;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    for (r = w->runs; r && rc == TOCSIN_OK; r = next) {
        int ok = 1;
        next = r->next; /* note_cancelled drops a reserved run */
        if (r->lost || r->finishing) continue;
        rc = tocsin_job_heartbeat(db, &ok, r->pub.job_id, r->pub.token, w->vis);
        if (rc == TOCSIN_OK && !ok) rc = note_cancelled(w, r);
    }
    for (i = 0; i < w->ndone && rc == TOCSIN_OK; i++) {
        int ok = 1; /* a lease lost meanwhile: the batch's write finds it so */
        if (!w->done[i].run->lost)
            rc = tocsin_job_heartbeat(db, &ok, w->done[i].run->pub.job_id, w->done[i].run->pub.token, w->vis);
    }
    if (rc == TOCSIN_OK && !(st = tc_stmt(db, SQL_W_HEARTBEAT))) rc = TC_ERRCODE;
    if (rc == TOCSIN_OK) {
        sqlite3_bind_text(st, 1, w->id, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, now);
        rc = tc_step_done(db, st, "worker heartbeat");
        /* gone from the registry (reaped as dead while stalled): join again */
        if (rc == TOCSIN_OK && sqlite3_changes(db->conn) == 0) rc = registry_write(w, now);
    }
    return tc_op_end(db, &op, rc);
}

/* Running jobs cancelled or lost since the last look (one read). */
static int check_running(tocsin_worker *w) {
    tc_op op;
    wrun *r, *next;
    int rc;
    if ((rc = tc_op_begin(w->db, &op, 0)) != TOCSIN_OK) return rc;
    for (r = w->runs; r && rc == TOCSIN_OK; r = next) {
        int held = 1;
        next = r->next; /* note_cancelled drops a reserved run */
        if (r->lost || r->finishing) continue;
        rc = tc_job_held(w->db, &held, r->pub.job_id, r->pub.token);
        if (rc == TOCSIN_OK && !held) rc = note_cancelled(w, r);
    }
    return tc_op_end(w->db, &op, rc);
}

typedef struct dead_worker {
    char *id;
} dead_worker;

/* Other workers whose process is gone (same host: the pid no longer names
 * the process that registered; any host: no heartbeat for a whole lease)
 * give their leases up at once, so their jobs are claimed again now. */
static int reap(tocsin_worker *w, int64_t now) {
    tocsin_db *db = w->db;
    sqlite3_stmt *st;
    dead_worker dead[16];
    size_t nd = 0, i;
    tc_op op;
    int rc;
    if ((rc = tc_op_begin(db, &op, 0)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, SQL_W_OTHERS))) return tc_op_end(db, &op, TC_ERRCODE);
    sqlite3_bind_text(st, 1, w->id, -1, SQLITE_STATIC);
    while (nd < 16 && (rc = tc_step(db, st)) == SQLITE_ROW) {
        const char *host = (const char *)sqlite3_column_text(st, 1);
        int same_host = host && strcmp(host, w->host) == 0;
        int gone = same_host && tc_process_gone(sqlite3_column_int(st, 2), sqlite3_column_int64(st, 3));
        int64_t beat = sqlite3_column_int64(st, 4), lease = sqlite3_column_int64(st, 5);
        if (gone || now - beat > lease) {
            if (!(dead[nd].id = tc_col_text(st, 0))) break;
            nd++;
        }
    }
    sqlite3_reset(st);
    rc = tc_op_end(db, &op, rc == SQLITE_ROW || rc == SQLITE_DONE ? TOCSIN_OK : tc_sqlerr(db, rc, "read workers"));
    if (rc == TOCSIN_OK && nd && (rc = tc_op_begin(db, &op, 1)) == TOCSIN_OK) {
        for (i = 0; i < nd && rc == TOCSIN_OK; i++) {
            rc = release_gone(db, dead[i].id);
            if (rc == TOCSIN_OK && (st = tc_stmt(db, SQL_W_LEAVE)) != NULL) {
                sqlite3_bind_text(st, 1, dead[i].id, -1, SQLITE_STATIC);
                rc = tc_step_done(db, st, "remove a dead worker");
            } else if (rc == TOCSIN_OK) {
                rc = TC_ERRCODE;
            }
        }
        rc = tc_op_end(db, &op, rc);
    }
    for (i = 0; i < nd; i++) sqlite3_free(dead[i].id);
    return rc;
}

/* The scheduler's step: keep or take the leader's lease every third of its
 * ttl (never more often: each renewal is a commit), fire due boundaries, and
 * as leader sweep expired results and rate-limit entries now and then. */
/* A schedule that cannot fire (rc, the thread's message): kept for
 * tocsin_worker_next to tell, told again when the error changes. */
static void sched_stuck(tocsin_worker *w, int rc) {
    if (!w->sched_err || strcmp(w->sched_msg, tc_tls()->msg) != 0) w->sched_told = 0;
    w->sched_err = rc;
    memcpy(w->sched_msg, tc_tls()->msg, sizeof w->sched_msg);
}

static int lead(tocsin_worker *w, int64_t now, int woken) {
    int rc = TOCSIN_OK, was = w->leader;
    if (now >= w->next_lead) {
        rc = tocsin_scheduler_lead(w->db, &w->leader, NULL, w->id, w->sched_ttl);
        if (rc != TOCSIN_OK) return rc;
        w->next_lead = now + w->sched_ttl / 3;
    }
    if (!w->leader) return TOCSIN_OK;
    /* another process may have changed the schedules: re-read after commits */
    if (!was || woken || now >= w->next_fire) {
        int64_t fired = 0, next = -1;
        int stuck = 0;
        if (now >= w->next_fire && (rc = tocsin_scheduler_tick(w->db, &fired)) != TOCSIN_OK) {
            if (rc != TOCSIN_CORRUPT && rc != TOCSIN_INVALID && rc != TOCSIN_TOOBIG) return rc;
            /* one schedule cannot fire (the others did): the worker goes on, the
             * schedule is tried again every W_SCHED_RETRY_MS, and the caller is
             * told (tocsin_worker_next) */
            sched_stuck(w, rc);
            stuck = 1;
            rc = TOCSIN_OK;
        } else if (now >= w->next_fire) {
            w->sched_err = 0;
        }
        if ((rc = tocsin_scheduler_next_fire(w->db, &next)) == TOCSIN_CORRUPT) {
            /* a schedule whose next_fire is not a time (the tick told it): retried */
            sched_stuck(w, rc);
            stuck = 1;
            next = now;
            rc = TOCSIN_OK;
        }
        if (rc != TOCSIN_OK) return rc;
        w->next_fire = next < 0 ? TOCSIN_MAX_TIME_MS : next;
        /* its next_fire stays due: not a tick per step until it is mended */
        if (stuck && w->next_fire < now + W_SCHED_RETRY_MS) w->next_fire = now + W_SCHED_RETRY_MS;
    }
    if (now >= w->next_sweep) {
        int64_t n = 0;
        if ((rc = tocsin_result_sweep(w->db, &n)) == TOCSIN_OK) rc = tocsin_ratelimit_sweep(w->db, &n);
        w->next_sweep = now + W_SWEEP_EVERY_MS;
    }
    return rc;
}

/* Every upkeep step that is due. Under w->mu. */
static int upkeep(tocsin_worker *w) {
    int64_t now = tocsin_now(w->db), mono = tc_monotonic_us();
    /* reads that follow other processes' commits, at most every few ms */
    int recheck = mono - w->last_check_us >= W_CANCEL_CHECK_US, rc = TOCSIN_OK;
    drain_released(w);
    if (recheck) w->last_check_us = mono;
    /* a step too soon after the last check (a commit woke it) may have news of a
     * cancelled job or a schedule change: the check it skipped is owed, at
     * last_check + W_CANCEL_CHECK_US (next_upkeep), not at the next renewal */
    w->recheck_due = !recheck && (w->nruns || w->scheduler);
    if (rc == TOCSIN_OK && now >= w->next_renew) {
        /* a renewal that failed stays due: tried again after the step's pause,
         * not a third of the lease later (two failures in a row lost the leases) */
        if ((rc = renew(w, now)) == TOCSIN_OK) w->next_renew = now + w->vis / 3;
        atomic_store(&w->fresh_until, w->next_renew);
    }
    if (rc == TOCSIN_OK && w->nruns && recheck) rc = check_running(w);
    if (rc == TOCSIN_OK && now >= w->next_reap) {
        rc = reap(w, now);
        w->next_reap = now + W_REAP_EVERY_MS;
    }
    if (rc == TOCSIN_OK && w->scheduler) rc = lead(w, now, recheck);
    return rc;
}

static int64_t next_upkeep(const tocsin_worker *w, int64_t now) {
    int64_t t = w->next_renew;
    if (w->recheck_due) {
        int64_t left_us = w->last_check_us + W_CANCEL_CHECK_US - tc_monotonic_us();
        int64_t at = now + (left_us > 0 ? (left_us + 999) / 1000 : 0);
        if (at < t) t = at;
    }
    if (w->next_reap < t) t = w->next_reap;
    if (w->scheduler && w->next_lead < t) t = w->next_lead;
    if (w->leader && w->next_fire < t) t = w->next_fire;
    if (w->leader && w->next_sweep < t) t = w->next_sweep;
    return t;
}

/* ---- claiming -------------------------------------------------------------------- */

/* The members of a task envelope a worker reads (docs/sql.md, "Task
 * envelope"); twice: one of them given twice (the core refuses such a
 * payload, json.c; a row written around it is not an envelope: SQL's
 * json_extract reads the first, the runtimes' JSON readers the last). */
typedef struct wenv {
    const char *v[5];
    size_t n[5];
    int twice;
} wenv;
static const char *const ENV_KEYS[5] = {"task", "args", "kwargs", "result_ttl_ms", "timeout_ms"};

static int env_member(void *ctx, const char *key, size_t key_n, const char *value, size_t value_n) {
    wenv *e = ctx;
    size_t i;
    /* keys are compared as written (SQLite 3.40's json_extract does not
     * decode escapes in keys either) */
    for (i = 0; i < 5; i++)
        if (strlen(ENV_KEYS[i]) == key_n - 2 && memcmp(ENV_KEYS[i], key + 1, key_n - 2) == 0) {
            if (e->v[i]) {
                e->twice = 1;
                return 1;
            }
            e->v[i] = value;
            e->n[i] = value_n;
        }
    return 0;
}

/* A member that must be an integer >= 0 when present: its value (0 when
 * absent), or -1 when it is not one. */
static int64_t env_count(const char *v, size_t n) {
    int64_t x = 0;
    size_t i = 0;
    if (!v) return 0;
    if (n == 2 && v[0] == '-' && v[1] == '0') return 0; /* -0 */
    if (n == 0 || n > 18) return -1; /* digits only below: no sign, no overflow */
    for (; i < n; i++) {
        if (v[i] < '0' || v[i] > '9') return -1;
        x = x * 10 + (v[i] - '0');
    }
    return x;
}

/* A run from a claimed job, or NULL with *kept 0 when the job was dealt with
 * here (invalid envelope: failed; unknown task: handed back or, past the
 * bound, failed). Inside the claim's write op. */
static int make_run(tocsin_worker *w, const tocsin_job *j, wrun **out) {
    tocsin_db *db = w->db;
    const char *bad = NULL;
    const wtask *t = NULL;
    wenv e;
    wrun *r;
    int rc, ok = 0, walked;
    *out = NULL;
    if (!(r = sqlite3_malloc(sizeof *r))) return tc_err(db, TOCSIN_NOMEM, "worker: out of memory");
    memset(r, 0, sizeof *r);
    r->handed_us = -1;
    memset(&e, 0, sizeof e);
    /* read in C, not by SQL's JSON functions: a run is made inside the
     * claim's write transaction, where they cost a tenth of a no-op task */
    walked = j->payload ? tc_json_members(j->payload, strlen(j->payload), env_member, &e) : 0;
    if (e.twice)
        bad = "not a task envelope (a key of the envelope is given twice)";
    else if (walked != 1 || !e.v[0] || e.v[0][0] != '"')
        bad = "not a task envelope (a JSON object with a \"task\" name)";
    else if ((e.v[1] && e.v[1][0] != '[') || (e.v[2] && e.v[2][0] != '{'))
        bad = "\"args\" must be an array and \"kwargs\" an object";
    else if (env_count(e.v[3], e.n[3]) < 0 || env_count(e.v[4], e.n[4]) < 0)
        bad = "\"result_ttl_ms\" and \"timeout_ms\" must be integers >= 0";
    if (!bad) {
        int drc = tc_json_decode(e.v[0], e.v[0] + e.n[0], &r->task);
        if (drc == 3) {
            free_run(r);
            return tc_err(db, TOCSIN_NOMEM, "worker: out of memory");
        }
        if (drc != 0 || tc_check_name(db, "task name", r->task) != TOCSIN_OK)
            bad = "not a task envelope (a JSON object with a \"task\" name)";
        tc_clear(db); /* a failed name check is the envelope's fault, not an error of ours */
    }
    if (!bad) {
        r->args = e.v[1] ? tc_strndup(e.v[1], e.n[1]) : tc_strdup("[]");
        r->kwargs = e.v[2] ? tc_strndup(e.v[2], e.n[2]) : tc_strdup("{}");
        r->result_ttl_ms = env_count(e.v[3], e.n[3]);
        r->pub.timeout_ms = env_count(e.v[4], e.n[4]);
    }
    if (bad) {
        tocsin_outcome o = TOCSIN_OUTCOME_INIT;
        o.kind = TOCSIN_OUTCOME_FAIL;
        o.error_type = "InvalidEnvelope";
        o.error_message = bad;
        r->pub.job_id = j->id;
        r->pub.token = j->token;
        rc = record_error(db, &ok, r, &o, 1);
        free_run(r);
        return rc;
    }
    r->queue = tc_strdup(j->queue);
    r->meta = tc_strdup(j->meta);
    if (!r->task || !r->args || !r->kwargs || !r->queue || (j->meta && !r->meta)) {
        free_run(r);
        return tc_err(db, TOCSIN_NOMEM, "worker: out of memory");
    }
    r->pub.job_id = j->id;
    r->pub.token = j->token;
    r->pub.attempt = j->attempts;
    r->pub.max_attempts = r->job_max = j->max_attempts;
    if (!(t = find_task(w, r->task))) {
        int64_t handbacks = 0;
        char *why = sqlite3_mprintf("UnknownTask: worker %s has no task \"%s\"", w->id, r->task);
        if (!why) {
            free_run(r);
            return tc_err(db, TOCSIN_NOMEM, "worker: out of memory");
        }
        rc = tc_job_handbacks(db, j->id, &handbacks);
        if (rc == TOCSIN_OK && handbacks >= w->unknown_max) {
            tocsin_outcome o = TOCSIN_OUTCOME_INIT;
            o.kind = TOCSIN_OUTCOME_FAIL;
            o.error_type = "UnknownTask";
            o.error_message = why + strlen("UnknownTask: ");
            rc = record_error(db, &ok, r, &o, 1);
        } else if (rc == TOCSIN_OK) {
            int held = 0;
            rc = tc_job_hand_back(db, &held, NULL, j->id, j->token,
                                  tocsin_backoff_ms(w->unknown_delay, W_UNKNOWN_DELAY_CAP_MS,
                                                    (int)handbacks + 1),
                                  why);
        }
        sqlite3_free(why);
        free_run(r);
        return rc;
    }
    if (t->o.max_attempts > 0 && j->attempts > t->o.max_attempts) {
        /* The task's own bound was spent by runs that never reported (a worker
         * killed mid-run: its lease lapsed, the crash counting as an attempt).
         * The job dies as at its own bound after such a crash (max_attempts,
         * its last error kept), instead of running past the task's retries. */
        int64_t handbacks = 0;
        if ((rc = tc_job_handbacks(db, j->id, &handbacks)) != TOCSIN_OK) {
            free_run(r);
            return rc;
        }
        if (j->attempts - handbacks > t->o.max_attempts) {
            rc = tc_job_to_dead(db, &ok, j->id, j->token, NULL, "max_attempts");
            free_run(r);
            return rc;
        }
    }
    if (t->o.max_attempts > 0 && t->o.max_attempts < j->max_attempts) {
        /* The task's bound is the lower: max_attempts - attempt stays the runs
         * left (the task counts runs: claims less hand-backs), so that a binding
         * tells a last run from one that will be retried. A first claim has no
         * hand-back to read; any later one may have (a job handed back once
         * before its attempt 2 has the task's bound runs left less one, not
         * less two). */
        int64_t handbacks = 0;
        if (j->attempts > 1 && (rc = tc_job_handbacks(db, j->id, &handbacks)) != TOCSIN_OK) {
            free_run(r);
            return rc;
        }
        if (t->o.max_attempts + handbacks < r->pub.max_attempts)
            r->pub.max_attempts = (int)(t->o.max_attempts + handbacks);
    }
    r->topts = t->o;
    r->owner = w;
    r->pub.queue = r->queue;
    r->pub.task = r->task;
    r->pub.args = r->args;
    r->pub.kwargs = r->kwargs;
    r->pub.meta = r->meta;
    if (!r->pub.timeout_ms) r->pub.timeout_ms = t->o.timeout_ms;
    *out = r;
    return TOCSIN_OK;
}

/* Claims up to `free` jobs across the queues in one write transaction. */
static int claim(tocsin_worker *w, size_t free_slots, wrun **got, size_t *ngot) {
    tocsin_db *db = w->db;
    tc_op op;
    size_t qi, i, want = free_slots;
    int rc;
    *ngot = 0;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    for (qi = 0; qi < w->nq && want > 0 && rc == TOCSIN_OK; qi++) {
        tocsin_job *jobs = NULL;
        size_t n = 0;
        rc = tocsin_queue_claim(db, &jobs, &n, w->queues[qi], w->id, want, w->vis);
        for (i = 0; i < n && rc == TOCSIN_OK; i++) {
            wrun *r = NULL;
            rc = make_run(w, &jobs[i], &r);
            if (r) got[(*ngot)++] = r;
        }
        want = free_slots - *ngot;
        tocsin_jobs_free(jobs, n);
    }
    rc = tc_op_end(db, &op, rc);
    if (rc != TOCSIN_OK) {
        for (i = 0; i < *ngot; i++) free_run(got[i]);
        *ngot = 0;
    }
    return rc;
}

typedef struct next_ctx {
    tocsin_worker *w;
    int64_t end_us;
    wrun **got;
    size_t ngot;
} next_ctx;

/* Hands a run out: it starts now. Under inmu. */
static void hand_out(tocsin_worker *w, wrun **got, size_t *ngot, wrun *r, int64_t now, int64_t mono) {
    r->pub.started_at = now;
    r->handed_us = run_clock_us(w, now, mono);
    got[(*ngot)++] = r;
    w->handed++;
}

/* Draining: the reserved runs go back (pending, no attempt consumed), in one
 * write. Under w->mu; kept reserved for the next step when the write fails. */
static int hand_back_reserve(tocsin_worker *w) {
    wrun *list = NULL, *r;
    tc_op op;
    int rc;
    pthread_mutex_lock(&w->inmu);
    while ((r = w->reserve) != NULL) { /* every one, those held back too */
        reserve_drop(w, r);
        r->res_next = list;
        list = r;
    }
    pthread_mutex_unlock(&w->inmu);
    if (!list) return TOCSIN_OK;
    if ((rc = tc_op_begin(w->db, &op, 1)) == TOCSIN_OK) {
        for (r = list; r && rc == TOCSIN_OK; r = r->res_next) {
            int held = 0;
            rc = tc_job_hand_back(w->db, &held, NULL, r->pub.job_id, r->pub.token, 0,
                                  "handed back: the worker is shutting down");
        }
        rc = tc_op_end(w->db, &op, rc);
    }
    while (list) {
        r = list;
        list = r->res_next;
        if (rc == TOCSIN_OK) {
            r->res_next = NULL;
            unlink_run(w, r);
            free_run(r);
        } else {
            pthread_mutex_lock(&w->inmu);
            reserve_push(w, r);
            pthread_mutex_unlock(&w->inmu);
        }
    }
    return rc;
}

static size_t free_slots_of(const tocsin_worker *w) {
    return w->handed < (size_t)w->concurrency ? (size_t)w->concurrency - w->handed : 0;
}

static int next_step(void *p, int *done, int64_t *sleep_ms) {
    next_ctx *c = p;
    tocsin_worker *w = c->w;
    size_t free_slots, target, want, nclaimed = 0, i;
    int64_t now, wake, deadline = -1;
    wrun *r;
    int rc, refill, news, backoff;
    /* Each wake-up is a fresh set of transactions: its lock waits get a whole busy
     * timeout (tocsin_worker_next may block for hours; the budget is per step). */
    tc_tls()->busy_until = 0;
    tc_tls()->busy_waited = 0;
    if (tc_tls()->nowait) { /* tocsin_worker_poll: not even for another thread's step */
        if (pthread_mutex_trylock(&w->mu) != 0)
            return tc_err(w->db, TOCSIN_BUSY, "the worker is busy with another thread's call (this call does not wait)");
    } else {
        w_lock(w);
    }
    w->stepping = 1;
    /* just after a step that failed, only the reserve serves (no database work) */
    backoff = w->retry_at > tocsin_now(w->db);
    rc = take_incoming(w);
    if (rc == TOCSIN_OK && !backoff) rc = upkeep(w);
    if (rc == TOCSIN_OK && !backoff && atomic_load(&w->draining)) rc = hand_back_reserve(w);
    /* the reserve first: no transaction (the batched runs gave their slots back) */
    pthread_mutex_lock(&w->inmu);
    if (w->held_news) release_held(w);
    now = tocsin_now(w->db);
    while (rc == TOCSIN_OK && !atomic_load(&w->draining) && now < w->next_renew && free_slots_of(w) &&
           (r = reserve_pop(w)) != NULL)
        hand_out(w, c->got, &c->ngot, r, now, tc_monotonic_us());
    free_slots = free_slots_of(w);
    pthread_mutex_unlock(&w->inmu);
    /* claim for the free slots, and refill the reserve once it is down to
     * `concurrency` (so that each refill carries many claims and outcomes) */
    target = reserve_target(w);
    want = free_slots + (w->nreserve < target ? target - w->nreserve : 0);
    /* one claim takes at most TOCSIN_MAX_BATCH (slots plus refill may ask more
     * above a concurrency of TOCSIN_MAX_BATCH / 2): the rest comes next step */
    if (want > TOCSIN_MAX_BATCH) want = TOCSIN_MAX_BATCH;
    refill = !backoff && want > 0 && (free_slots > 0 || w->nreserve <= (size_t)w->concurrency) &&
             !atomic_load(&w->draining);
    /* a read-only look first, unless the last claim filled every slot (more is likely) */
    if (rc == TOCSIN_OK && refill && !w->hot)
        rc = tocsin_queue_next_deadline(w->db, &deadline, (const char *const *)w->queues, w->nq);
    now = tocsin_now(w->db);
    if (rc == TOCSIN_OK && refill && (w->hot || (deadline >= 0 && deadline <= now))) {
        /* one commit for the finished outcomes and the next claim */
        tc_op op;
        if ((rc = tc_op_begin(w->db, &op, 1)) == TOCSIN_OK) {
            rc = apply_batch(w, NULL);
            if (rc == TOCSIN_OK) rc = claim(w, want, w->claimed, &nclaimed);
            if ((rc = tc_op_end(w->db, &op, rc)) == TOCSIN_OK) {
                drop_batch(w);
            } else {
                for (i = 0; i < nclaimed; i++) free_run(w->claimed[i]);
                nclaimed = 0;
            }
        }
        w->hot = rc == TOCSIN_OK && nclaimed == want;
        pthread_mutex_lock(&w->inmu); /* (tocsin_worker_take may have handed out meanwhile) */
        for (i = 0; i < nclaimed; i++) {
            int held;
            r = w->claimed[i];
            held = hold_back(w, r);
            r->next = w->runs;
            if (w->runs) w->runs->prev = r;
            w->runs = r;
            w->nruns++;
            if (!held && free_slots_of(w) && c->ngot < (size_t)w->concurrency)
                hand_out(w, c->got, &c->ngot, r, now, tc_monotonic_us());
            else
                reserve_push(w, r);
        }
        pthread_mutex_unlock(&w->inmu);
        /* all claimed jobs were dealt with here (unknown, invalid): look again */
        if (rc == TOCSIN_OK && !c->ngot) deadline = now;
    } else if (rc == TOCSIN_OK && !backoff && w->ndone &&
               (!w->nreserve || tc_monotonic_us() - w->first_done_us >= W_FLUSH_US)) {
        /* no claim to ride with: commit the outcomes alone (with a reserve, they
         * wait for its refill a few ms at most) */
        rc = flush_batch(w, NULL);
        w->hot = 0;
    }
    w->stepping = 0;
    /* A step that failed (the write lock held past the busy timeout, a full disk):
     * nothing is lost, and the next step waits W_STEP_RETRY_MS, so that a caller
     * that logs the error and calls again does not spin. Not for the answers that
     * are no failure: tocsin_worker_poll's BUSY, a transaction of our own that
     * holds the lock (next_check), a closed handle. */
    if (rc != TOCSIN_OK && rc != TOCSIN_CLOSED && !tc_tls()->yielded &&
        !(rc == TOCSIN_BUSY && tc_tls()->nowait))
        w->retry_at = tc_time_add(now, W_STEP_RETRY_MS);
    if (c->ngot) { /* runs to start: a failed write is retried by the next step */
        pthread_mutex_lock(&w->inmu); /* the caller reads tocsin_worker_cancelled after it */
        w->cancel_news = 0;
        pthread_mutex_unlock(&w->inmu);
        w_unlock(w);
        if (rc != TOCSIN_OK) tc_clear(w->db);
        *done = 1;
        return TOCSIN_OK;
    }
    wake = next_upkeep(w, now);
    if (free_slots && deadline >= 0 && deadline > now && deadline < wake) wake = deadline;
    if (w->held_news) wake = now; /* a lost run went: what it held back is handed out now */
    if (w->retry_at > now && wake < w->retry_at) wake = w->retry_at;
    w->next_claim = free_slots && deadline >= 0 ? deadline : -1;
    if (rc == TOCSIN_OK && w->sched_err && (!w->sched_told || now - w->sched_told >= W_SCHED_TELL_MS)) {
        w->sched_told = now > 0 ? now : 1;
        rc = tc_err(w->db, w->sched_err, "scheduler: %s", w->sched_msg);
    }
    w_unlock(w);
    if (rc != TOCSIN_OK) return rc;
    /* running jobs to stop: the caller hears of it now (tocsin_worker_cancelled),
     * not when a run is next handed out */
    pthread_mutex_lock(&w->inmu);
    news = w->cancel_news;
    w->cancel_news = 0;
    pthread_mutex_unlock(&w->inmu);
    if (news)
        return tc_err(w->db, TOCSIN_TIMEOUT,
                      "nothing to run yet; running jobs were cancelled or lost their leases"
                      " (tocsin_worker_cancelled)");
    *sleep_ms = wake <= now ? 0 : wake - now > TC_MAX_SLEEP_MS ? TC_MAX_SLEEP_MS : wake - now;
    if (c->end_us >= 0) {
        int64_t left = c->end_us - tc_monotonic_us();
        if (left <= 0)
            return tc_err(w->db, TOCSIN_TIMEOUT, "nothing to run before the timeout%s",
                          w->retry_at > now ? " (the step that failed is tried again after a pause)" : "");
        if ((left + 999) / 1000 < *sleep_ms) *sleep_ms = (left + 999) / 1000;
    }
    return TOCSIN_OK;
}

/*
 * A transaction handle of the worker's own database may hold the write lock
 * while its task waits for this worker (a binding that finishes runs from its
 * worker loop, or whose thread that commits is blocked on this handle's mutex,
 * which the step holds): waiting for the lock then waits for ourselves. So a
 * step's lock wait ends as soon as such a transaction is open -- also one that
 * took the lock while the step was already waiting -- and the step sleeps
 * until a commit wakes the subscription (that transaction's, at the latest)
 * and tries again.
 */
#define W_OWN_TX_RETRY_MS 5
static int next_check(void *p, int *done, int64_t *sleep_ms) {
    next_ctx *c = p;
    tc_thread_state *t = tc_tls();
    _Atomic int *prev = t->yield_to;
    int rc;
    t->yield_to = &c->w->db->tx_writers;
    t->yielded = 0;
    rc = next_step(p, done, sleep_ms);
    t->yield_to = prev;
    if (rc == TOCSIN_BUSY && t->yielded) {
        t->yielded = 0;
        tc_clear(c->w->db);
        *done = 0;
        if (*sleep_ms < 0 || *sleep_ms > W_OWN_TX_RETRY_MS) *sleep_ms = W_OWN_TX_RETRY_MS;
        if (c->end_us >= 0 && c->end_us <= tc_monotonic_us())
            return tc_err(c->w->db, TOCSIN_TIMEOUT, "nothing to run before the timeout");
        return TOCSIN_OK;
    }
    t->yielded = 0;
    return rc;
}

int tocsin_worker_next(tocsin_worker *w, tocsin_task_run ***out, size_t *out_n, int timeout_ms) {
    next_ctx c;
    int rc;
    if (out) *out = NULL;
    if (out_n) *out_n = 0;
    if (!w || !out || !out_n) return tc_err(NULL, TOCSIN_INVALID, "worker, out and out_n must not be NULL");
    tc_clear(w->db);
    memset(&c, 0, sizeof c);
    c.w = w;
    c.end_us = timeout_ms < 0 ? -1 : tc_monotonic_us() + (int64_t)timeout_ms * 1000;
    if (!(c.got = sqlite3_malloc64((size_t)w->concurrency * sizeof *c.got)))
        return tc_err(w->db, TOCSIN_NOMEM, "worker: out of memory");
    rc = tc_wait_loop(w->sub, next_check, &c);
    if (rc != TOCSIN_OK || !c.ngot) {
        sqlite3_free(c.got);
        return rc != TOCSIN_OK ? rc : tc_err(w->db, TOCSIN_TIMEOUT, "nothing to run before the timeout");
    }
    /* a wrun begins with its tocsin_task_run: the pointers are the runs */
    *out = (tocsin_task_run **)(void *)c.got;
    *out_n = c.ngot;
    return TOCSIN_OK;
}

int tocsin_worker_poll(tocsin_worker *w, tocsin_task_run ***out, size_t *out_n) {
    tc_thread_state *t = tc_tls();
    int rc;
    t->nowait = 1;
    rc = tocsin_worker_next(w, out, out_n, 0);
    t->nowait = 0;
    return rc;
}

int tocsin_worker_take(tocsin_worker *w, tocsin_task_run ***out, size_t *out_n) {
    size_t free_slots, low, n = 0;
    wrun **got, *r;
    int64_t now, mono;
    if (out) *out = NULL;
    if (out_n) *out_n = 0;
    if (!w || !out || !out_n) return tc_err(NULL, TOCSIN_INVALID, "worker, out and out_n must not be NULL");
    tc_clear(w->db);
    now = tocsin_now(w->db);
    mono = tc_monotonic_us();
    pthread_mutex_lock(&w->inmu); /* never w->mu: a step may be waiting for the write lock */
    free_slots = free_slots_of(w);
    /* down to `concurrency` the reserve wants its refill, unless a step is doing it */
    low = w->stepping ? 0 : (size_t)w->concurrency;
    /* (and a step is due when the reserve's leases may have lapsed: it renews them
     * and drops the runs another worker took meanwhile) */
    if (!free_slots || atomic_load(&w->draining) || w->nreserve <= low || now >= atomic_load(&w->fresh_until) ||
        (w->nin && !w->stepping && mono - w->in_first_us >= W_FLUSH_US)) {
        pthread_mutex_unlock(&w->inmu);
        return tc_err(w->db, TOCSIN_TIMEOUT, "nothing to take without a step (call tocsin_worker_next)");
    }
    if (!(got = sqlite3_malloc64(free_slots * sizeof *got))) {
        pthread_mutex_unlock(&w->inmu);
        return tc_err(w->db, TOCSIN_NOMEM, "worker: out of memory");
    }
    while (free_slots_of(w) && w->nreserve > low && (r = reserve_pop(w)) != NULL) hand_out(w, got, &n, r, now, mono);
    pthread_mutex_unlock(&w->inmu);
    if (!n) { /* only runs held back (hold_back) */
        sqlite3_free(got);
        return tc_err(w->db, TOCSIN_TIMEOUT, "nothing to take without a step (call tocsin_worker_next)");
    }
    *out = (tocsin_task_run **)(void *)got;
    *out_n = n;
    return TOCSIN_OK;
}

int tocsin_worker_cancelled(tocsin_worker *w, int64_t **out_ids, size_t *out_n) {
    if (out_ids) *out_ids = NULL;
    if (out_n) *out_n = 0;
    if (!w || !out_ids || !out_n) return tc_err(NULL, TOCSIN_INVALID, "worker, out_ids and out_n must not be NULL");
    tc_clear(w->db);
    pthread_mutex_lock(&w->inmu); /* never waits for a step */
    if (w->ncancelled) {
        *out_ids = w->cancelled;
        *out_n = w->ncancelled;
        w->cancelled = NULL;
        w->ncancelled = w->capcancelled = 0;
    }
    pthread_mutex_unlock(&w->inmu);
    return TOCSIN_OK;
}

int tocsin_worker_fd(tocsin_worker *w) { return w ? tocsin_sub_fd(w->sub) : -1; }

int64_t tocsin_worker_wake_in(tocsin_worker *w) {
    int64_t now, t;
    if (!w) return 0;
    w_lock(w);
    take_incoming(w);
    now = tocsin_now(w->db);
    t = next_upkeep(w, now);
    if (w->ndone && !w->nreserve) {
        t = now;
    } else if (w->ndone) { /* the outcomes wait for the reserve's refill, W_FLUSH_US at most */
        int64_t left_us = w->first_done_us + W_FLUSH_US - tc_monotonic_us();
        if (now + (left_us + 999) / 1000 < t) t = now + (left_us + 999) / 1000;
    }
    if (w->next_claim >= 0 && w->next_claim < t) t = w->next_claim;
    if (w->retry_at > now && t < w->retry_at) t = w->retry_at; /* after a step that failed */
    w_unlock(w);
    t -= now;
    return t < 0 ? 0 : t > TC_MAX_SLEEP_MS ? TC_MAX_SLEEP_MS : t;
}

int tocsin_worker_drain(tocsin_worker *w) {
    if (!w) return tc_err(NULL, TOCSIN_INVALID, "worker must not be NULL");
    tc_clear(w->db);
    atomic_store(&w->draining, 1);
    tc_sub_nudge(w->sub); /* a blocked next hands the reserve back and commits */
    return TOCSIN_OK;
}

int tocsin_worker_poke(tocsin_worker *w) {
    return w ? tocsin_sub_poke(w->sub) : tc_err(NULL, TOCSIN_INVALID, "worker must not be NULL");
}

const char *tocsin_worker_id(const tocsin_worker *w) { return w ? w->id : NULL; }

size_t tocsin_worker_in_flight(tocsin_worker *w) {
    size_t n;
    if (!w) return 0;
    pthread_mutex_lock(&w->inmu);
    n = w->handed;
    pthread_mutex_unlock(&w->inmu);
    return n;
}

int tocsin_worker_close(tocsin_worker *w) {
    int rc = TOCSIN_OK, rc2;
    size_t i;
    if (!w) return TOCSIN_OK;
    tc_clear(w->db);
    if (w->listed) {
        tocsin_worker **p;
        pthread_mutex_lock(&open_mu);
        for (p = &open_workers; *p; p = &(*p)->open_next)
            if (*p == w) {
                *p = w->open_next;
                break;
            }
        pthread_mutex_unlock(&open_mu);
    }
    tc_sub_shut(w->sub); /* a tocsin_worker_next of another thread ends first (TOCSIN_CLOSED) */
    w_lock(w);
    drain_released(w);
    take_incoming(w);
    if (w->registered) { /* opened fully: leave the database as we found it */
        tc_op op;
        rc = flush_batch(w, NULL);
        if ((rc2 = tc_op_begin(w->db, &op, 1)) == TOCSIN_OK) {
            wrun *r;
            sqlite3_stmt *st;
            for (r = w->runs; r && rc2 == TOCSIN_OK; r = r->next) {
                int held = 0;
                if (!r->finishing)
                    rc2 = tc_job_hand_back(w->db, &held, NULL, r->pub.job_id, r->pub.token, 0,
                                           "handed back: the worker closed before the run finished");
            }
            if (rc2 == TOCSIN_OK && (st = tc_stmt(w->db, SQL_W_LEAVE)) != NULL) {
                sqlite3_bind_text(st, 1, w->id, -1, SQLITE_STATIC);
                rc2 = tc_step_done(w->db, st, "leave the worker registry");
            }
            rc2 = tc_op_end(w->db, &op, rc2);
        }
        if (rc == TOCSIN_OK) rc = rc2;
        if (w->leader) tocsin_scheduler_resign(w->db, NULL, w->id);
    }
    while (w->runs) {
        wrun *r = w->runs;
        unlink_run(w, r);
        free_run(r);
    }
    for (i = 0; i < w->ndone; i++) free_outcome(&w->done[i].o);
    for (i = 0; i < w->nin; i++) free_outcome(&w->in[i].o);
    w_unlock(w);
    tocsin_sub_close(w->sub);
    for (i = 0; i < w->ntasks; i++) sqlite3_free(w->tasks[i].name);
    for (i = 0; i < w->nq; i++) sqlite3_free(w->queues[i]);
    sqlite3_free(w->tasks);
    sqlite3_free(w->queues);
    sqlite3_free(w->done);
    sqlite3_free(w->claimed);
    sqlite3_free(w->cancelled);
    sqlite3_free(w->id);
    pthread_mutex_destroy(&w->mu);
    pthread_mutex_destroy(&w->relmu);
    pthread_mutex_destroy(&w->inmu);
    sqlite3_free(w->in);
    sqlite3_free(w);
    return rc;
}
