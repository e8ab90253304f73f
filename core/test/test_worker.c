/*
 * The worker protocol (docs/worker-protocol.md): envelope, outcomes, backoff,
 * hand-back, unknown tasks, dead-worker recovery, cancellation, the
 * scheduler's step and housekeeping -- all on the injectable clock.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

static const char *const QS[] = {"tasks"};

static void nap(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static tocsin_worker *open_worker(tocsin_db *db, const char *id, int concurrency) {
    tocsin_worker_opts o = TOCSIN_WORKER_OPTS_INIT;
    tocsin_worker *w = NULL;
    o.worker_id = id;
    o.queues = QS;
    o.n_queues = 1;
    o.concurrency = concurrency;
    o.visibility_ms = 30000;
    if (tocsin_worker_open(&w, db, &o) != TOCSIN_OK) {
        fprintf(stderr, "worker_open: %s\n", tocsin_errmsg(NULL));
        return NULL;
    }
    tocsin_worker_register(w, "add", NULL);
    return w;
}

static int64_t call(tocsin_db *db, const char *task, const char *args, int max_attempts) {
    tocsin_task_call c = TOCSIN_TASK_CALL_INIT;
    tocsin_enqueue_opts eo = TOCSIN_ENQUEUE_OPTS_INIT;
    int64_t id = 0;
    c.task = task;
    c.args = args;
    eo.max_attempts = max_attempts;
    if (tocsin_task_enqueue(db, &id, "tasks", &c, &eo) != TOCSIN_OK)
        fprintf(stderr, "task_enqueue: %s\n", tocsin_errmsg(NULL));
    return id;
}

/* One run of the next batch (timeout 0), or NULL. */
static tocsin_task_run *next_run(tocsin_worker *w, int *rc_out) {
    tocsin_task_run **runs = NULL, *r = NULL;
    size_t n = 0;
    int rc = tocsin_worker_next(w, &runs, &n, 0);
    if (rc_out) *rc_out = rc;
    if (rc == TOCSIN_OK && n >= 1) r = runs[0];
    tocsin_free(runs);
    return r;
}

static void envelope(void) {
    tocsin_db *db = t_open("w_envelope", NULL);
    tocsin_task_call c = TOCSIN_TASK_CALL_INIT;
    char *json = NULL;
    int64_t id = 0;
    c.task = "send_email";
    c.args = "[\"ada@example.org\"]";
    c.kwargs = "{\"subject\":\"hi\"}";
    c.result_ttl_ms = 5000;
    CHECK_OK(db, tocsin_task_envelope(db, &json, &c));
    CHECK_STR(json, "{\"task\":\"send_email\",\"args\":[\"ada@example.org\"],\"kwargs\":{\"subject\":\"hi\"},"
                    "\"result_ttl_ms\":5000}");
    tocsin_free(json);
    /* bad calls: a clear error, nothing written */
    c.args = "{\"not\":\"an array\"}";
    CHECK_EQ_I(tocsin_task_enqueue(db, &id, "tasks", &c, NULL), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(NULL), "args must be a JSON array") != NULL);
    {
        /* args nested 1000 deep is a valid payload on its own, but not inside the
         * envelope: refused naming args, not the envelope's payload */
        char deep[2001];
        memset(deep, '[', 1000);
        memset(deep + 1000, ']', 1000);
        deep[2000] = 0;
        c.args = deep;
        CHECK_EQ_I(tocsin_task_enqueue(db, &id, "tasks", &c, NULL), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(NULL), "args nests arrays and objects more than 999 deep") != NULL);
        deep[999] = ' ';
        deep[1000] = ' ';
        CHECK_OK(db, tocsin_task_envelope(db, &json, &c)); /* 999 levels: the envelope is 1000 */
        tocsin_free(json);
    }
    c.args = NULL;
    c.kwargs = "[1]";
    CHECK_EQ_I(tocsin_task_enqueue(db, &id, "tasks", &c, NULL), TOCSIN_INVALID);
    c.kwargs = NULL;
    c.task = "";
    CHECK_EQ_I(tocsin_task_enqueue(db, &id, "tasks", &c, NULL), TOCSIN_INVALID);
    c.task = "t";
    c.timeout_ms = -1;
    CHECK_EQ_I(tocsin_task_enqueue(db, &id, "tasks", &c, NULL), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(NULL), "timeout_ms") != NULL);
    CHECK_EQ_I(tocsin_task_enqueue(db, &id, "tasks", NULL, NULL), TOCSIN_INVALID);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 0);
    c.timeout_ms = 0;
    c.result_ttl_ms = 0;
    CHECK_OK(db, tocsin_task_enqueue(db, &id, "tasks", &c, NULL));
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE payload = '{\"task\":\"t\",\"args\":[],\"kwargs\":{}}'"), 1);
    tocsin_close(db);
}

static void bad_worker_options(void) {
    tocsin_db *db = t_open("w_bad", NULL);
    tocsin_worker_opts o = TOCSIN_WORKER_OPTS_INIT;
    tocsin_worker *w = NULL;
    const char *bad[] = {"ok", ""};
    CHECK_EQ_I(tocsin_worker_open(&w, db, NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_worker_open(&w, db, &o), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(NULL), "queues") != NULL);
    o.queues = bad;
    o.n_queues = 2;
    CHECK_EQ_I(tocsin_worker_open(&w, db, &o), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(NULL), "queue name") != NULL);
    o.n_queues = 1;
    o.concurrency = -1;
    CHECK_EQ_I(tocsin_worker_open(&w, db, &o), TOCSIN_INVALID);
    o.concurrency = 1;
    o.visibility_ms = INT64_MAX;
    CHECK_EQ_I(tocsin_worker_open(&w, db, &o), TOCSIN_INVALID);
    CHECK(w == NULL);
    CHECK_EQ_I(t_count(db, "_tocsin_workers"), 0);
    o.visibility_ms = TOCSIN_MIN_WORKER_LEASE_MS - 1;
    CHECK_EQ_I(tocsin_worker_open(&w, db, &o), TOCSIN_INVALID);
    o.visibility_ms = 0;
    /* the scheduler's leader lease is a lock: over 366 days, every lead failed later */
    o.scheduler_ttl_ms = TOCSIN_MAX_LEASE_MS + 1;
    CHECK_EQ_I(tocsin_worker_open(&w, db, &o), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(NULL), "scheduler_ttl_ms") != NULL);
    o.scheduler_ttl_ms = TOCSIN_MIN_WORKER_LEASE_MS - 1;
    CHECK_EQ_I(tocsin_worker_open(&w, db, &o), TOCSIN_INVALID);
    CHECK(w == NULL);
    o.scheduler_ttl_ms = TOCSIN_MAX_LEASE_MS;
    CHECK_OK(db, tocsin_worker_open(&w, db, &o));
    CHECK_OK(db, tocsin_worker_close(w));
    o.scheduler_ttl_ms = 0;
    CHECK_OK(db, tocsin_worker_open(&w, db, &o));
    CHECK_EQ_I(t_count(db, "_tocsin_workers"), 1);
    CHECK_EQ_I(tocsin_worker_register(w, "bad\nname", NULL), TOCSIN_INVALID);
    CHECK_OK(db, tocsin_worker_close(w));
    CHECK_EQ_I(t_count(db, "_tocsin_workers"), 0);
    tocsin_close(db);
}

/* A worker without worker_id takes a fresh owner id, and registers under the
 * id tocsin_worker_id reports; owner ids differ call to call and truncate. */
static void worker_ids(void) {
    tocsin_db *db = t_open("w_ids", NULL);
    tocsin_worker_opts o = TOCSIN_WORKER_OPTS_INIT;
    tocsin_worker *a = NULL, *b = NULL;
    char x[TOCSIN_OWNER_ID_SIZE], y[TOCSIN_OWNER_ID_SIZE], small[8], where[200], pid[32];
    const char *id, *tail;
    size_t n = tocsin_owner_id(x, sizeof x), i;
    CHECK(n > 0 && n == strlen(x));
    CHECK_EQ_I(tocsin_owner_id(y, sizeof y), strlen(y));
    CHECK(strcmp(x, y) != 0);
    snprintf(pid, sizeof pid, ":%d:", (int)getpid());
    CHECK(strstr(x, pid) != NULL);
    tail = strrchr(x, ':');
    CHECK(tail && strlen(tail + 1) == 12);
    for (i = 1; tail && tail[i]; i++) CHECK(strchr("0123456789abcdef", tail[i]) != NULL);
    CHECK_EQ_I(tocsin_owner_id(small, sizeof small), 7);
    CHECK_EQ_I(strlen(small), 7);
    CHECK_EQ_I(tocsin_owner_id(NULL, 10), 0);
    CHECK(tocsin_worker_id(NULL) == NULL);
    o.queues = QS;
    o.n_queues = 1;
    CHECK_OK(db, tocsin_worker_open(&a, db, &o));
    id = tocsin_worker_id(a);
    CHECK(id && strstr(id, pid) != NULL);
    snprintf(where, sizeof where, "_tocsin_workers WHERE id = '%s'", id ? id : "");
    CHECK_EQ_I(t_count(db, where), 1);
    o.worker_id = "named-worker";
    CHECK_OK(db, tocsin_worker_open(&b, db, &o));
    CHECK_STR(tocsin_worker_id(b), "named-worker");
    CHECK_EQ_I(t_count(db, "_tocsin_workers WHERE id = 'named-worker'"), 1);
    /* one id, one live worker: a second open under it is refused and
     * writes nothing (the row stays the first worker's) */
    {
        tocsin_worker *c = NULL;
        tocsin_db *db2 = NULL;
        CHECK_EQ_I(tocsin_worker_open(&c, db, &o), TOCSIN_INVALID);
        CHECK(c == NULL);
        CHECK(strstr(tocsin_errmsg(db), "\"named-worker\" is taken by another open worker") != NULL);
        CHECK_OK(db2, tocsin_open(&db2, sqlite3_db_filename(tocsin_sqlite(db), "main"), NULL));
        CHECK_EQ_I(tocsin_worker_open(&c, db2, &o), TOCSIN_INVALID);
        CHECK_EQ_I(t_count(db, "_tocsin_workers WHERE id = 'named-worker'"), 1);
        /* a row a live process of this host holds (here: pid 1) is refused too */
        CHECK_OK(db, tocsin_exec(db, "INSERT INTO _tocsin_workers(id, host, pid, pid_start, queues,"
                                     " started_at, heartbeat_at, lease_ms) SELECT 'init-held', host, 1,"
                                     " 0, queues, started_at, heartbeat_at, lease_ms FROM _tocsin_workers"
                                     " WHERE id = 'named-worker'"));
        o.worker_id = "init-held";
        CHECK_EQ_I(tocsin_worker_open(&c, db2, &o), TOCSIN_INVALID);
        CHECK(strstr(tocsin_errmsg(db2), "registered by a live worker (pid 1 on") != NULL);
        o.worker_id = "named-worker";
        CHECK_OK(db, tocsin_worker_close(b));
        b = NULL;
        CHECK_OK(db2, tocsin_worker_open(&c, db2, &o)); /* free again once closed */
        CHECK_OK(db2, tocsin_worker_close(c));
        tocsin_close(db2);
    }
    CHECK_OK(db, tocsin_worker_close(a));
    CHECK_OK(db, tocsin_worker_close(b));
    tocsin_close(db);
}

/* A run is finished on the worker that handed it out; a task registered while
 * runs are in flight leaves them their options. */
static void foreign_runs_and_late_registration(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_foreign", &clk);
    tocsin_worker *w1 = open_worker(db, "f1", 2), *w2 = open_worker(db, "f2", 2);
    tocsin_task_opts to = TOCSIN_TASK_OPTS_INIT;
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    tocsin_task_run *r;
    char name[32];
    int i;
    int64_t id = call(db, "add", "[1]", 3);
    to.result_ttl_ms = 5000;
    CHECK_OK(db, tocsin_worker_register(w2, "add", &to));
    r = next_run(w2, NULL);
    CHECK(r && r->job_id == id);
    if (!r) return;
    CHECK_EQ_I(tocsin_worker_finish(w1, NULL, r, &o), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "handed out by another worker") != NULL);
    CHECK_EQ_I(tocsin_worker_in_flight(w1), 0);
    CHECK_EQ_I(tocsin_worker_in_flight(w2), 1);
    for (i = 0; i < 40; i++) { /* the task table grows (and moves) under the run */
        snprintf(name, sizeof name, "late%d", i);
        CHECK_OK(db, tocsin_worker_register(w2, name, NULL));
    }
    o.value = "7";
    CHECK_OK(db, tocsin_worker_finish(w2, NULL, r, &o));
    CHECK_OK(db, tocsin_worker_flush(w2, NULL));
    CHECK_EQ_I(t_count(db, "_tocsin_results WHERE job_id = 1 AND expires_at = 1005000"), 1);
    CHECK_OK(db, tocsin_worker_close(w1));
    CHECK_OK(db, tocsin_worker_close(w2));
    tocsin_close(db);
}

static void outcomes(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_outcomes", &clk);
    tocsin_worker *w = open_worker(db, "w1", 8);
    tocsin_task_run **runs = NULL;
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    tocsin_result *res = NULL;
    tocsin_job *job = NULL;
    size_t n = 0, i;
    int64_t ok_id = call(db, "add", "[1,2]", 3), err_id = call(db, "add", "[]", 2);
    int64_t fail_id = call(db, "add", "[0]", 3), back_id = call(db, "add", "[9]", 1);
    int64_t bad_id = 0;
    tocsin_task_run *r_ok = NULL, *r_err = NULL, *r_fail = NULL, *r_back = NULL;
    CHECK_OK(db, tocsin_queue_enqueue(db, &bad_id, "tasks", "[\"not an envelope\"]", NULL));
    CHECK_OK(db, tocsin_worker_next(w, &runs, &n, 0));
    CHECK_EQ_I(n, 4); /* the invalid envelope was dealt with by the core */
    for (i = 0; i < n; i++) {
        if (runs[i]->job_id == ok_id) r_ok = runs[i];
        if (runs[i]->job_id == err_id) r_err = runs[i];
        if (runs[i]->job_id == fail_id) r_fail = runs[i];
        if (runs[i]->job_id == back_id) r_back = runs[i];
    }
    tocsin_free(runs);
    CHECK(r_ok && r_err && r_fail && r_back);
    if (!(r_ok && r_err && r_fail && r_back)) return;
    CHECK_STR(r_ok->task, "add");
    CHECK_STR(r_ok->args, "[1,2]");
    CHECK_STR(r_ok->kwargs, "{}");
    CHECK_EQ_I(r_ok->attempt, 1);
    CHECK_EQ_I(tocsin_worker_in_flight(w), 4);
    CHECK_OK(db, tocsin_job_get(db, &job, bad_id));
    CHECK(job && strcmp(job->state, "dead") == 0 && strcmp(job->reason, "failed") == 0);
    tocsin_jobs_free(job, 1);
    CHECK_OK(db, tocsin_result_get(db, &res, bad_id));
    CHECK(res && res->is_error && strcmp(res->error_type, "InvalidEnvelope") == 0);
    tocsin_result_free(res);

    /* an outcome of the wrong form is refused, the run stays */
    o.kind = 7;
    CHECK_EQ_I(tocsin_worker_finish(w, NULL, r_ok, &o), TOCSIN_INVALID);
    o.version = 0;
    o.kind = TOCSIN_OUTCOME_OK;
    CHECK_EQ_I(tocsin_worker_finish(w, NULL, r_ok, &o), TOCSIN_INVALID);
    o.version = TOCSIN_OUTCOME_VERSION;
    o.value = "3";
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r_ok, &o));
    CHECK_EQ_I(tocsin_worker_finish(w, NULL, r_ok, &o), TOCSIN_INVALID); /* twice */
    /* batched: nothing committed until the next upkeep */
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 1);
    o.kind = TOCSIN_OUTCOME_ERROR;
    o.value = NULL;
    o.error_type = "ValueError";
    o.error_message = "bad input";
    o.error_trace = "Traceback: line 1";
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r_err, &o));
    o.kind = TOCSIN_OUTCOME_FAIL;
    o.error_type = "TypeError";
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r_fail, &o));
    o.kind = TOCSIN_OUTCOME_HAND_BACK;
    o.delay_ms = 0;
    o.error_message = "worker shutdown: handed back";
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r_back, &o));
    o.error_message = "bad input";
    {
        size_t lost = 9;
        CHECK_OK(db, tocsin_worker_flush(w, &lost));
        CHECK_EQ_I(lost, 0);
    }
    CHECK_EQ_I(tocsin_worker_in_flight(w), 0);
    /* success: the result with the default ttl, the job acked */
    CHECK_OK(db, tocsin_result_get(db, &res, ok_id));
    CHECK(res && !res->is_error && strcmp(res->value, "3") == 0);
    CHECK(res && res->expires_at == clk.now + TOCSIN_DEFAULT_RESULT_TTL_MS);
    tocsin_result_free(res);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE id = 1"), 0);
    /* error with attempts left: retried with backoff, no result yet */
    CHECK_OK(db, tocsin_job_get(db, &job, err_id));
    CHECK(job && strcmp(job->state, "scheduled") == 0 && job->run_at > clk.now);
    CHECK(job && job->last_error && strcmp(job->last_error, "ValueError: bad input") == 0);
    tocsin_jobs_free(job, 1);
    CHECK_OK(db, tocsin_result_get(db, &res, err_id));
    CHECK(res == NULL);
    /* final failure: dead, the error recorded as data with its trace */
    CHECK_OK(db, tocsin_result_get(db, &res, fail_id));
    CHECK(res && res->is_error && strcmp(res->error_type, "TypeError") == 0 &&
          strcmp(res->error_message, "bad input") == 0 && res->error_trace &&
          strcmp(res->error_trace, "Traceback: line 1") == 0);
    tocsin_result_free(res);
    /* hand-back: pending again, no attempt consumed (max_attempts 1 still allows a run) */
    CHECK_OK(db, tocsin_job_get(db, &job, back_id));
    CHECK(job && strcmp(job->state, "pending") == 0 && job->attempts == 1 && job->max_attempts == 2);
    CHECK(job && job->last_error && strcmp(job->last_error, "worker shutdown: handed back") == 0);
    tocsin_jobs_free(job, 1);
    {
        int64_t old_token = r_back ? 0 : 0;
        tocsin_task_run *again = next_run(w, NULL);
        CHECK(again && again->job_id == back_id && again->attempt == 2);
        (void)old_token;
        /* the last attempt fails: dead with reason max_attempts, error result */
        clk.now += 10000000;
        o.kind = TOCSIN_OUTCOME_ERROR;
        o.error_type = "IOError";
        o.error_trace = NULL;
        if (again) CHECK_OK(db, tocsin_worker_finish(w, NULL, again, &o));
        CHECK_OK(db, tocsin_worker_flush(w, NULL));
        CHECK_OK(db, tocsin_job_get(db, &job, back_id));
        CHECK(job && strcmp(job->state, "dead") == 0 && strcmp(job->reason, "max_attempts") == 0);
        tocsin_jobs_free(job, 1);
        CHECK_OK(db, tocsin_result_get(db, &res, back_id));
        CHECK(res && res->is_error && strcmp(res->error_type, "IOError") == 0 && !res->error_trace);
        tocsin_result_free(res);
    }
    /* the retried job comes back once due */
    {
        tocsin_task_run *again = next_run(w, NULL);
        CHECK(again && again->job_id == err_id && again->attempt == 2);
        o.kind = TOCSIN_OUTCOME_OK;
        o.value = NULL;
        if (again) CHECK_OK(db, tocsin_worker_finish(w, NULL, again, &o));
        CHECK_OK(db, tocsin_worker_close(w)); /* flushes */
        CHECK_OK(db, tocsin_result_get(db, &res, err_id));
        CHECK(res && strcmp(res->value, "null") == 0);
        tocsin_result_free(res);
    }
    tocsin_close(db);
}

/* Four jobs claimed at once, r[k] the run of ids[k], with the payload limit at 64
 * bytes (outcome tests); 0 when the claim did not hand out the four. */
static int claim_four(tocsin_db *db, tocsin_worker *w, int64_t ids[4], tocsin_task_run *r[4]) {
    tocsin_task_run **runs = NULL;
    size_t n = 0, i, k;
    for (k = 0; k < 4; k++) {
        ids[k] = call(db, "add", "[1]", 3);
        r[k] = NULL;
    }
    CHECK_OK(db, tocsin_set_max_payload(db, 64));
    CHECK_OK(db, tocsin_worker_next(w, &runs, &n, 0));
    CHECK_EQ_I(n, 4);
    for (i = 0; i < n; i++)
        for (k = 0; k < 4; k++)
            if (runs[i]->job_id == ids[k]) r[k] = runs[i];
    tocsin_free(runs);
    CHECK(r[0] && r[1] && r[2] && r[3]);
    return r[0] && r[1] && r[2] && r[3];
}

/* An error message or hand-back reason over the payload limit (a long
 * exception text) is cut to the limit, in a transaction or not, and the
 * outcome stands: the job retries, dies or goes back as it would with a short
 * message. Before, it ended the run as a final InvalidOutcome failure. */
static void long_messages_cut(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_long_msg", &clk), *tx = NULL;
    tocsin_worker *w = open_worker(db, "w1", 8);
    tocsin_task_run *r[4];
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    tocsin_result *res = NULL;
    tocsin_job *job = NULL;
    int64_t ids[4];
    size_t i, k;
    char big[300];
    if (!claim_four(db, w, ids, r)) return;
    /* 99 x "\xc3\xa9" (e-acute): the cut falls inside a character at 64 */
    for (i = 0; i + 2 < sizeof big; i += 2) {
        big[i] = (char)0xc3;
        big[i + 1] = (char)0xa9;
    }
    big[sizeof big - 2] = 'x';
    big[sizeof big - 1] = 0;
    o.kind = TOCSIN_OUTCOME_ERROR;
    o.error_type = "ValueError";
    o.error_message = big;
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r[0], &o)); /* retried */
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    CHECK_OK(tx, tocsin_worker_finish(w, tx, r[1], &o)); /* retried, in the caller's transaction */
    CHECK_OK(tx, tocsin_tx_commit(tx));
    o.kind = TOCSIN_OUTCOME_FAIL;
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r[2], &o)); /* dead, the error its result */
    o.kind = TOCSIN_OUTCOME_HAND_BACK;
    o.error_type = NULL;
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r[3], &o)); /* back, no attempt spent */
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    CHECK_EQ_I(tocsin_worker_in_flight(w), 0);
    for (k = 0; k < 2; k++) {
        CHECK_OK(db, tocsin_job_get(db, &job, ids[k]));
        CHECK(job && strcmp(job->state, "scheduled") == 0 && job->attempts == 1);
        CHECK(job && job->last_error && strncmp(job->last_error, "ValueError: \xc3\xa9", 14) == 0);
        CHECK(job && job->last_error && strlen(job->last_error) <= 64 && strlen(job->last_error) >= 62);
        tocsin_jobs_free(job, 1);
    }
    CHECK_OK(db, tocsin_job_get(db, &job, ids[2]));
    CHECK(job && strcmp(job->state, "dead") == 0 && strcmp(job->reason, "failed") == 0);
    tocsin_jobs_free(job, 1);
    CHECK_OK(db, tocsin_result_get(db, &res, ids[2]));
    CHECK(res && res->is_error && strcmp(res->error_type, "ValueError") == 0);
    CHECK(res && strlen(res->error_message) == 64 && memcmp(res->error_message, big, 64) == 0);
    tocsin_result_free(res);
    CHECK_OK(db, tocsin_job_get(db, &job, ids[3]));
    CHECK(job && strcmp(job->state, "pending") == 0);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE handbacks = 1 AND state = 'pending'"), 1);
    tocsin_jobs_free(job, 1);
    tocsin_worker_close(w);
    tocsin_close(db);
}

/* Outcomes that wait in the batch keep their leases: a group commit that
 * keeps failing (here a trigger refuses the result; a full disk does the
 * same) while the renewals commit must not let the finished job lapse and run
 * again on another worker. It commits, once, when the write works again. */
static void batched_outcomes_renewed(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_batch_renew", &clk);
    tocsin_worker *w = open_worker(db, "w1", 1), *w2 = open_worker(db, "w2", 1);
    tocsin_outcome ok = TOCSIN_OUTCOME_INIT;
    tocsin_task_run *r, **got = NULL;
    size_t n = 0;
    int i, rc;
    int64_t id = call(db, "add", "[1]", 3);
    r = next_run(w, &rc);
    CHECK(r != NULL);
    if (!r) return;
    CHECK_EQ_I(sqlite3_exec(tocsin_sqlite(db),
                            "CREATE TRIGGER no_results BEFORE INSERT ON _tocsin_results "
                            "BEGIN SELECT RAISE(ABORT, 'the disk is full'); END",
                            NULL, NULL, NULL),
               SQLITE_OK);
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &ok));
    for (i = 0; i < 8; i++) { /* 8 x 11 s: three leases' time */
        clk.now += 11000;
        rc = tocsin_worker_next(w, &got, &n, 0);
        CHECK(rc != TOCSIN_OK || n == 0);
        if (rc == TOCSIN_OK) tocsin_free(got);
        got = NULL;
        CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'processing'"), 1);
        CHECK(next_run(w2, NULL) == NULL); /* never claimed again */
    }
    CHECK_EQ_I(sqlite3_exec(tocsin_sqlite(db), "DROP TRIGGER no_results", NULL, NULL, NULL), SQLITE_OK);
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 1);
    (void)id;
    CHECK_OK(db, tocsin_worker_close(w));
    CHECK_OK(db, tocsin_worker_close(w2));
    tocsin_close(db);
}

/* Contents the core cannot store end the run as a final failure (without a
 * transaction), or are refused with nothing written (in one). */
static void refused_outcomes(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_refused", &clk), *tx = NULL;
    tocsin_worker *w = open_worker(db, "w1", 8);
    tocsin_task_run *r[4];
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    tocsin_result *res = NULL;
    tocsin_job *job = NULL;
    int64_t ids[4];
    size_t k;
    char big[200];
    if (!claim_four(db, w, ids, r)) return;
    /* in a transaction: refused, nothing written, the run still open */
    memset(big, '7', sizeof big - 1);
    big[sizeof big - 1] = 0;
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    o.value = big;
    CHECK_EQ_I(tocsin_worker_finish(w, tx, r[0], &o), TOCSIN_TOOBIG);
    CHECK_OK(tx, tocsin_tx_rollback(tx));
    CHECK_EQ_I(tocsin_worker_in_flight(w), 4);
    /* without: a result over the payload limit, one that is not JSON, an error
     * type that is not a name, a message that is not UTF-8 */
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r[0], &o));
    o.value = "{not json";
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r[1], &o));
    o.kind = TOCSIN_OUTCOME_ERROR;
    o.value = NULL;
    o.error_type = "bad\ttype";
    o.error_message = "m";
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r[2], &o));
    o.error_type = "ValueError";
    o.error_message = "caf\xc3";
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r[3], &o));
    CHECK_EQ_I(tocsin_worker_finish(w, NULL, r[3], &o), TOCSIN_INVALID); /* ended */
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    CHECK_EQ_I(tocsin_worker_in_flight(w), 0);
    for (k = 0; k < 4; k++) {
        CHECK_OK(db, tocsin_job_get(db, &job, ids[k]));
        CHECK(job && strcmp(job->state, "dead") == 0 && strcmp(job->reason, "failed") == 0);
        tocsin_jobs_free(job, 1);
        CHECK_OK(db, tocsin_result_get(db, &res, ids[k]));
        CHECK(res && res->is_error && strcmp(res->error_type, k < 2 ? "InvalidResult" : "InvalidOutcome") == 0);
        CHECK(res && strstr(res->error_message, "the outcome was refused: ") == res->error_message);
        tocsin_result_free(res);
    }
    CHECK_OK(db, tocsin_result_get(db, &res, ids[0])); /* the message cut to the limit */
    CHECK(res && strlen(res->error_message) == 64);
    tocsin_result_free(res);
    tocsin_worker_close(w);
    tocsin_close(db);
}

/* The ack inside the business transaction: exactly-once effects. */
static void finish_in_transaction(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_tx", &clk), *tx = NULL, *other = NULL;
    tocsin_worker *w = open_worker(db, "w1", 1);
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    tocsin_task_run *r;
    int64_t id = call(db, "add", "[1]", 3), id2 = call(db, "add", "[2]", 3);
    int ok = 0;
    CHECK_OK(db, tocsin_exec(db, "CREATE TABLE effects(job INTEGER PRIMARY KEY)"));
    r = next_run(w, NULL);
    CHECK(r && r->job_id == id);
    if (!r) return;
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    CHECK_OK(tx, tocsin_exec(tx, "INSERT INTO effects VALUES (1)"));
    o.value = "\"sent\"";
    CHECK_OK(tx, tocsin_worker_finish(w, tx, r, &o));
    CHECK_EQ_I(t_count(db, "effects"), 0); /* not yet committed */
    CHECK_OK(tx, tocsin_tx_commit(tx));
    CHECK_EQ_I(t_count(db, "effects"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_results WHERE job_id = 1"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE id = 1"), 0);
    /* a lost lease is an error in the transaction's scope */
    r = next_run(w, NULL);
    CHECK(r && r->job_id == id2);
    if (!r) return;
    CHECK_OK(other, tocsin_open(&other, sqlite3_db_filename(tocsin_sqlite(db), "main"), NULL));
    CHECK_OK(other, tocsin_job_cancel(other, &ok, id2));
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    CHECK_OK(tx, tocsin_exec(tx, "INSERT INTO effects VALUES (2)"));
    CHECK_EQ_I(tocsin_worker_finish(w, tx, r, &o), TOCSIN_LEASE_LOST);
    CHECK(strstr(tocsin_errmsg(NULL), "lease was lost") != NULL);
    CHECK_OK(tx, tocsin_tx_rollback(tx));
    CHECK_EQ_I(t_count(db, "effects"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_results WHERE job_id = 2"), 0);
    /* a tx of another database handle is refused */
    CHECK_OK(other, tocsin_tx_begin(other, &tx));
    CHECK_EQ_I(tocsin_worker_finish(w, tx, r, &o), TOCSIN_INVALID);
    CHECK_OK(tx, tocsin_tx_rollback(tx));
    /* the run whose lease was lost still holds its slot until finished again
     * without tx: a hand-back the core counts as lost, writing nothing */
    CHECK_EQ_I(tocsin_worker_in_flight(w), 1);
    {
        tocsin_outcome hb = TOCSIN_OUTCOME_INIT;
        size_t lost = 0;
        int64_t id3 = call(db, "add", "[3]", 3);
        hb.kind = TOCSIN_OUTCOME_HAND_BACK;
        CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &hb));
        CHECK_EQ_I(tocsin_worker_in_flight(w), 0);
        CHECK_OK(db, tocsin_worker_flush(w, &lost));
        CHECK_EQ_I(lost, 1);
        CHECK_EQ_I(t_count(db, "_tocsin_dead WHERE id = 2 AND reason = 'cancelled'"), 1);
        r = next_run(w, NULL); /* the slot took the next job */
        CHECK(r && r->job_id == id3);
    }
    tocsin_close(other);
    tocsin_worker_close(w);
    tocsin_close(db);
}

/* A run that returns after its timeout (CPU-bound work its runtime could not
 * interrupt, a handler that swallowed the cancellation) fails the attempt as
 * a Timeout, whatever it returned; in a transaction its result is refused. */
static void late_results_time_out(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_late", &clk), *tx = NULL;
    tocsin_worker *w = open_worker(db, "w1", 1);
    tocsin_task_opts to = TOCSIN_TASK_OPTS_INIT;
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    tocsin_task_run *r;
    tocsin_job *job = NULL;
    int64_t id;
    to.timeout_ms = 500;
    CHECK_OK(db, tocsin_worker_register(w, "slow", &to));
    id = call(db, "slow", "[1]", 3);
    r = next_run(w, NULL);
    CHECK(r && r->job_id == id && r->timeout_ms == 500);
    if (!r) return;
    clk.now += 500; /* at the timeout: still in time */
    o.value = "1";
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    CHECK_EQ_I(t_count(db, "_tocsin_results WHERE status = 'ok'"), 1);
    id = call(db, "slow", "[2]", 3);
    r = next_run(w, NULL);
    CHECK(r && r->job_id == id);
    if (!r) return;
    clk.now += 501;
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    CHECK_EQ_I(tocsin_worker_finish(w, tx, r, &o), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(NULL), "exceeded its timeout of 500 ms (it returned after 501 ms)") != NULL);
    CHECK_OK(tx, tocsin_tx_rollback(tx));
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK(job && strcmp(job->state, "dead") != 0 && job->attempts == 1);
    CHECK(job && job->last_error &&
          strcmp(job->last_error, "Timeout: the run exceeded its timeout of 500 ms (it returned after 501 ms)") == 0);
    tocsin_jobs_free(job, 1);
    job = NULL;
    CHECK_EQ_I(t_count(db, "_tocsin_results WHERE status = 'ok'"), 1);
    /* a runtime that interrupted the run gives a Timeout without a message: the
     * core's own text, the same in every runtime (a message given is kept) */
    clk.now += 60000; /* past the retry's backoff */
    r = next_run(w, NULL);
    CHECK(r && r->job_id == id && r->attempt == 2);
    if (!r) return;
    o.kind = TOCSIN_OUTCOME_ERROR;
    o.value = NULL;
    o.error_type = "Timeout";
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK(job && job->last_error && strcmp(job->last_error, "Timeout: the run exceeded its timeout of 500 ms") == 0);
    tocsin_jobs_free(job, 1);
    job = NULL;
    clk.now += 60000;
    r = next_run(w, NULL);
    CHECK(r && r->job_id == id && r->attempt == 3);
    if (!r) return;
    o.error_message = "gave up after 0.5 s";
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK(job && job->last_error && strcmp(job->last_error, "Timeout: gave up after 0.5 s") == 0);
    tocsin_jobs_free(job, 1);
    tocsin_worker_close(w);
    tocsin_close(db);
}

/* A task's own bound on its runs (its retries + 1) holds whatever the call
 * allowed -- a call by name from another runtime knows nothing of it -- and
 * hand-backs do not count against it. Options of version 1 still register. */
static void task_attempts_bound(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_task_attempts", &clk);
    tocsin_worker *w = open_worker(db, "w1", 1);
    tocsin_task_opts to = TOCSIN_TASK_OPTS_INIT;
    tocsin_outcome err = TOCSIN_OUTCOME_INIT, hb = TOCSIN_OUTCOME_INIT;
    tocsin_task_run *r;
    tocsin_job *job = NULL;
    int64_t id;
    int k;
    struct { int version; int64_t a, b, c, d; } v1 = {1, 0, 0, 0, 0};
    CHECK_OK(db, tocsin_worker_register(w, "old", (const tocsin_task_opts *)(const void *)&v1));
    to.max_attempts = -1;
    CHECK_EQ_I(tocsin_worker_register(w, "once", &to), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(NULL), "max_attempts must be between 1 and 1000000") != NULL);
    to.max_attempts = 1;
    CHECK_OK(db, tocsin_worker_register(w, "once", &to));
    to.max_attempts = 2;
    CHECK_OK(db, tocsin_worker_register(w, "twice", &to));
    err.kind = TOCSIN_OUTCOME_ERROR;
    err.error_type = "Boom";
    err.delay_ms = 0;
    hb.kind = TOCSIN_OUTCOME_HAND_BACK;
    /* retries 0, called with 5 attempts: one run, then dead (max_attempts) */
    id = call(db, "once", "[]", 5);
    r = next_run(w, NULL);
    CHECK(r && r->job_id == id);
    if (!r) return;
    CHECK_EQ_I(r->max_attempts, 1); /* the task's bound, the lower: this run is the last */
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &err));
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK(job && strcmp(job->state, "dead") == 0 && job->reason && strcmp(job->reason, "max_attempts") == 0 &&
          job->attempts == 1);
    tocsin_jobs_free(job, 1);
    CHECK_EQ_I(t_count(db, "_tocsin_results WHERE status = 'error'"), 1);
    /* retries 1: error, hand-back, error -> two runs, then dead */
    id = call(db, "twice", "[]", 5);
    for (k = 0; k < 3; k++) {
        r = next_run(w, NULL);
        CHECK(r && r->job_id == id && r->attempt == k + 1);
        if (!r) return;
        CHECK_EQ_I(r->max_attempts, k == 2 ? 3 : 2); /* the hand-back gave one more claim */
        CHECK_OK(db, tocsin_worker_finish(w, NULL, r, k == 1 ? &hb : &err));
        CHECK_OK(db, tocsin_worker_flush(w, NULL));
        CHECK_OK(db, tocsin_job_get(db, &job, id));
        CHECK_STR(job ? job->state : NULL, k < 2 ? "pending" : "dead");
        tocsin_jobs_free(job, 1);
        job = NULL;
    }
    /* the call's own bound still counts when it is the lower one */
    id = call(db, "twice", "[]", 1);
    r = next_run(w, NULL);
    CHECK(r && r->job_id == id);
    if (!r) return;
    CHECK_EQ_I(r->max_attempts, 1);
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &err));
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    CHECK_EQ_I(t_count(db, "_tocsin_dead WHERE reason = 'max_attempts'"), 3);
    tocsin_worker_close(w);
    tocsin_close(db);
}

/* A task this worker lacks: handed back with growing delays, no attempt
 * consumed, dead (UnknownTask) after the bound. */
static void unknown_tasks(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_unknown", &clk);
    tocsin_worker_opts wo = TOCSIN_WORKER_OPTS_INIT;
    tocsin_worker *w = NULL;
    tocsin_job *job = NULL;
    tocsin_result *res = NULL;
    int64_t id = call(db, "renamed_task", "[]", 1), first_delay;
    int rc, i;
    wo.queues = QS;
    wo.n_queues = 1;
    wo.unknown_task_handbacks = 3;
    wo.unknown_task_delay_ms = 1000;
    CHECK_OK(db, tocsin_worker_open(&w, db, &wo));
    CHECK(next_run(w, &rc) == NULL);
    CHECK_EQ_I(rc, TOCSIN_TIMEOUT);
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK(job && strcmp(job->state, "scheduled") == 0 && job->attempts == 1 && job->max_attempts == 2);
    CHECK(job && job->last_error && strstr(job->last_error, "UnknownTask") != NULL);
    first_delay = job ? job->run_at - clk.now : 0;
    CHECK(first_delay >= 500 && first_delay <= 1000);
    tocsin_jobs_free(job, 1);
    for (i = 0; i < 3; i++) {
        clk.now += 100000;
        CHECK(next_run(w, NULL) == NULL);
    }
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK(job && strcmp(job->state, "dead") == 0);
    tocsin_jobs_free(job, 1);
    CHECK_OK(db, tocsin_result_get(db, &res, id));
    CHECK(res && res->is_error && strcmp(res->error_type, "UnknownTask") == 0);
    tocsin_result_free(res);
    tocsin_worker_close(w);
    tocsin_close(db);
}

/* A worker process that died: its jobs are claimable at once (not after
 * the lease), and its late ack is refused. */
static void dead_worker_recovery(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_dead", &clk);
    char path[512];
    int64_t id = call(db, "add", "[1]", 3), token = 0;
    int fds[2], ok = 1;
    pid_t pid;
    snprintf(path, sizeof path, "%s", sqlite3_db_filename(tocsin_sqlite(db), "main"));
    CHECK(pipe(fds) == 0);
    pid = fork();
    if (pid == 0) {
        tocsin_db *c = NULL;
        tocsin_worker *cw;
        tocsin_task_run *r;
        close(fds[0]);
        if (tocsin_open(&c, path, NULL) != TOCSIN_OK) _exit(2);
        if (!(cw = open_worker(c, "doomed", 1))) _exit(3);
        if (!(r = next_run(cw, NULL))) _exit(4);
        if (write(fds[1], &r->token, sizeof r->token) != sizeof r->token) _exit(5);
        _exit(0); /* dies holding the lease, without closing */
    }
    close(fds[1]);
    CHECK(read(fds[0], &token, sizeof token) == sizeof token);
    close(fds[0]);
    waitpid(pid, NULL, 0);
    CHECK_EQ_I(t_count(db, "_tocsin_workers WHERE id = 'doomed'"), 1);
    {
        tocsin_worker *w = open_worker(db, "heir", 1);
        int rc = 0;
        tocsin_task_run *r = next_run(w, &rc); /* the clock has not moved */
        if (!r) fprintf(stderr, "heir: %d %s\n", rc, tocsin_errmsg(NULL));
        tocsin_outcome o = TOCSIN_OUTCOME_INIT;
        CHECK(r && r->job_id == id && r->attempt == 2 && r->token != token);
        CHECK_EQ_I(t_count(db, "_tocsin_workers WHERE id = 'doomed'"), 0);
        /* the dead holder's late ack is refused */
        CHECK_OK(db, tocsin_job_ack(db, &ok, id, token));
        CHECK_EQ_I(ok, 0);
        if (r) CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
        tocsin_worker_close(w);
    }
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 1);
    tocsin_close(db);
}

/* Cancelling a running job reaches the worker at its next upkeep. */
static void cancellation(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_cancel", &clk), *other = NULL;
    tocsin_worker *w = open_worker(db, "w1", 2);
    tocsin_task_run *r;
    int64_t id = call(db, "add", "[1]", 3), *ids = NULL;
    size_t n = 0;
    int ok = 0, rc;
    r = next_run(w, NULL);
    CHECK(r != NULL);
    CHECK_OK(other, tocsin_open(&other, sqlite3_db_filename(tocsin_sqlite(db), "main"), NULL));
    CHECK_OK(other, tocsin_job_cancel(other, &ok, id));
    CHECK_EQ_I(ok, 1);
    /* the commit wakes the worker; its next call sees the cancellation */
    for (int i = 0; i < 50 && n == 0; i++) {
        CHECK(next_run(w, &rc) == NULL);
        CHECK_OK(db, tocsin_worker_cancelled(w, &ids, &n));
        if (n == 0) {
            tocsin_free(ids);
            ids = NULL;
            nap(25);
        }
    }
    CHECK_EQ_I(n, 1);
    if (n == 1) CHECK_EQ_I(ids[0], id);
    tocsin_free(ids);
    tocsin_close(other);
    tocsin_worker_close(w);
    tocsin_close(db);
}

/* A tocsin_worker_next blocked with runs in flight returns as soon as its
 * upkeep finds one of them cancelled (also when the commit came too soon
 * after the last check of running jobs): the caller reads
 * tocsin_worker_cancelled then, not when a run is next handed out. */
static void cancellation_ends_next(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_cancel_next", &clk), *other = NULL;
    tocsin_worker *w = open_worker(db, "w1", 2);
    tocsin_task_run *r, **runs = NULL;
    int64_t id = call(db, "add", "[1]", 3), *ids = NULL;
    size_t n = 0, nruns = 0;
    int ok = 0;
    r = next_run(w, NULL);
    CHECK(r != NULL);
    CHECK_OK(other, tocsin_open(&other, sqlite3_db_filename(tocsin_sqlite(db), "main"), NULL));
    CHECK_OK(other, tocsin_job_cancel(other, &ok, id));
    CHECK_EQ_I(ok, 1);
    CHECK_EQ_I(tocsin_worker_next(w, &runs, &nruns, 60000), TOCSIN_TIMEOUT);
    CHECK(strstr(tocsin_errmsg(NULL), "cancelled or lost their leases") != NULL);
    CHECK_EQ_I(nruns, 0);
    CHECK_OK(db, tocsin_worker_cancelled(w, &ids, &n));
    CHECK_EQ_I(n, 1);
    if (n == 1) CHECK_EQ_I(ids[0], id);
    tocsin_free(ids);
    /* the news is told once: the next call waits for its own timeout */
    CHECK_EQ_I(tocsin_worker_next(w, &runs, &nruns, 30), TOCSIN_TIMEOUT);
    CHECK(strstr(tocsin_errmsg(NULL), "before the timeout") != NULL);
    tocsin_close(other);
    tocsin_worker_close(w);
    tocsin_close(db);
}

/* The scheduler's step runs inside tocsin_worker_next: lead, fire, sleep. */
static void scheduler_step(void) {
    t_clock clk = {60000};
    tocsin_db *db = t_open("w_sched", &clk);
    tocsin_worker_opts wo = TOCSIN_WORKER_OPTS_INIT;
    tocsin_worker *w = NULL;
    tocsin_task_run *r;
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    int64_t next = 0, wake;
    wo.queues = QS;
    wo.n_queues = 1;
    wo.scheduler = 1;
    wo.worker_id = "leader";
    CHECK_OK(db, tocsin_schedule_set(db, &next, "every-minute", "* * * * *", "tasks",
                                     "{\"task\":\"add\",\"args\":[]}", NULL));
    CHECK_EQ_I(next, 120000);
    CHECK_OK(db, tocsin_worker_open(&w, db, &wo));
    CHECK_OK(db, tocsin_worker_register(w, "add", NULL));
    CHECK(next_run(w, NULL) == NULL); /* leads, nothing due yet */
    CHECK_EQ_I(t_count(db, "_tocsin_locks WHERE owner = 'leader'"), 1);
    wake = tocsin_worker_wake_in(w);
    CHECK(wake > 0 && wake <= 1000);
    clk.now = 120000;
    r = next_run(w, NULL); /* fires the boundary and claims its job */
    CHECK(r && strcmp(r->task, "add") == 0);
    if (r) CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
    /* no second fire of the same boundary */
    CHECK(next_run(w, NULL) == NULL);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 0);
    /* the leader's housekeeping: expired results go at the next sweep */
    CHECK_OK(db, tocsin_result_save(db, 999, "1", 1));
    clk.now += 61000;
    CHECK(next_run(w, NULL) != NULL || 1); /* the boundary of the next minute may fire too */
    CHECK_EQ_I(t_count(db, "_tocsin_results WHERE job_id = 999"), 0);
    CHECK_OK(db, tocsin_worker_close(w));
    CHECK_EQ_I(t_count(db, "_tocsin_locks WHERE owner IS NOT NULL"), 0); /* resigned */
    tocsin_close(db);
}

/* A schedule that cannot fire holds back neither the other schedules nor the
 * leader's jobs; its error is told, then again once a minute. */
static void scheduler_damaged_schedule(void) {
    t_clock clk = {60000};
    tocsin_db *db = t_open("w_sched_bad", &clk);
    tocsin_worker_opts wo = TOCSIN_WORKER_OPTS_INIT;
    tocsin_worker *w = NULL;
    tocsin_task_run *r;
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    int64_t next = 0, id = 0;
    int rc = 0, told = 0, ran = 0, i;
    wo.queues = QS;
    wo.n_queues = 1;
    wo.scheduler = 1;
    wo.worker_id = "leader";
    CHECK_OK(db, tocsin_schedule_set(db, &next, "a-damaged", "* * * * *", "tasks",
                                     "{\"task\":\"add\",\"args\":[]}", NULL));
    CHECK_OK(db, tocsin_schedule_set(db, &next, "b-good", "* * * * *", "tasks",
                                     "{\"task\":\"add\",\"args\":[]}", NULL));
    CHECK_OK(db, tocsin_exec(db, "UPDATE _tocsin_schedules SET cron = 'bogus' WHERE name = 'a-damaged'"));
    CHECK_OK(db, tocsin_worker_open(&w, db, &wo));
    CHECK_OK(db, tocsin_worker_register(w, "add", NULL));
    clk.now = 120000;
    /* b fires, its job and an enqueued one run; a's error is told once */
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "tasks", "{\"task\":\"add\",\"args\":[]}", NULL));
    for (i = 0; i < 6; i++) {
        r = next_run(w, &rc);
        if (r) {
            ran++;
            CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
        } else if (rc == TOCSIN_CORRUPT) {
            told++;
            CHECK(strstr(tocsin_errmsg(NULL), "schedule a-damaged") != NULL);
        } else {
            CHECK_EQ_I(rc, TOCSIN_TIMEOUT);
        }
    }
    CHECK_EQ_I(ran, 2);
    CHECK_EQ_I(told, 1);
    CHECK_EQ_I(t_count(db, "_tocsin_schedules WHERE name = 'b-good' AND next_fire = 180000"), 1);
    /* tried again a second later (not told), told again a minute later */
    CHECK(tocsin_worker_wake_in(w) <= 1000);
    clk.now = 121500;
    CHECK(next_run(w, &rc) == NULL);
    CHECK_EQ_I(rc, TOCSIN_TIMEOUT);
    clk.now = 120000 + 60000 + 500; /* b's next boundary fires too */
    for (i = 0, told = ran = 0; i < 4; i++) {
        r = next_run(w, &rc);
        if (r) {
            ran++;
            CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
        } else {
            told += rc == TOCSIN_CORRUPT;
        }
    }
    CHECK_EQ_I(ran, 1);
    CHECK_EQ_I(told, 1);
    /* mended: no more errors */
    CHECK_OK(db, tocsin_schedule_set(db, &next, "a-damaged", "* * * * *", "tasks",
                                     "{\"task\":\"add\",\"args\":[]}", NULL));
    clk.now = 240000 + 61000;
    for (i = 0; i < 6; i++) {
        r = next_run(w, &rc);
        if (r) CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
        else CHECK_EQ_I(rc, TOCSIN_TIMEOUT);
    }
    CHECK_OK(db, tocsin_worker_close(w));
    tocsin_close(db);
}

typedef struct waiter_ctx {
    tocsin_worker *w;
    int rc;
} waiter_ctx;

static void *wait_next(void *p) {
    waiter_ctx *c = p;
    tocsin_task_run **runs = NULL;
    size_t n = 0;
    c->rc = tocsin_worker_next(c->w, &runs, &n, -1);
    tocsin_free(runs);
    return NULL;
}

/* A blocked next ends with INTERRUPTED on poke; close hands back what runs. */
static void poke_and_close(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_close", &clk);
    tocsin_worker *w = open_worker(db, "w1", 1);
    tocsin_job *job = NULL;
    waiter_ctx c = {w, -1};
    pthread_t t;
    int64_t id;
    CHECK(pthread_create(&t, NULL, wait_next, &c) == 0);
    nap(20);
    CHECK_OK(db, tocsin_worker_poke(w));
    pthread_join(t, NULL);
    CHECK_EQ_I(c.rc, TOCSIN_INTERRUPTED);
    /* idle: a non-blocking call times out */
    CHECK(next_run(w, &c.rc) == NULL);
    CHECK_EQ_I(c.rc, TOCSIN_TIMEOUT);
    id = call(db, "add", "[1]", 1);
    CHECK(next_run(w, NULL) != NULL);
    CHECK_OK(db, tocsin_worker_close(w));
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK(job && strcmp(job->state, "pending") == 0 && job->attempts < job->max_attempts);
    tocsin_jobs_free(job, 1);
    CHECK_EQ_I(t_count(db, "_tocsin_workers"), 0);
    tocsin_close(db);
}

/* A retry waits the task's own backoff, not the default's. */
static void task_backoff(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_backoff", &clk);
    tocsin_worker *w = open_worker(db, "w1", 1);
    tocsin_task_opts to = TOCSIN_TASK_OPTS_INIT;
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    tocsin_task_run *r;
    tocsin_job *job = NULL;
    int64_t id = call(db, "slow", "[]", 5);
    to.backoff_base_ms = 8000;
    to.backoff_cap_ms = 8000;
    CHECK_OK(db, tocsin_worker_register(w, "slow", &to));
    to.backoff_base_ms = -1;
    CHECK_EQ_I(tocsin_worker_register(w, "bad", &to), TOCSIN_INVALID);
    r = next_run(w, NULL);
    CHECK(r && r->job_id == id);
    o.kind = TOCSIN_OUTCOME_ERROR;
    o.error_type = "Flaky";
    if (r) CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK(job && job->run_at - clk.now >= 4000 && job->run_at - clk.now <= 8000);
    tocsin_jobs_free(job, 1);
    tocsin_worker_close(w);
    tocsin_close(db);
}

typedef struct enqueue_ctx {
    tocsin_db *db;
    int rc;
} enqueue_ctx;

static void *enqueue_thread(void *p) {
    enqueue_ctx *c = p;
    int64_t id;
    c->rc = tocsin_queue_enqueue(c->db, &id, "elsewhere", "1", NULL);
    return NULL;
}

/* tocsin_worker_poll never waits for the write lock: BUSY at once while another
 * connection holds it, the batched outcome kept; then it claims and commits. */
static void poll_never_blocks(void) {
    tocsin_open_opts oo = TOCSIN_OPEN_OPTS_INIT;
    tocsin_db *db = NULL, *other = NULL;
    tocsin_worker *w;
    tocsin_task_run **runs = NULL, *r;
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    size_t n = 0;
    int64_t id1, id2;
    oo.busy_timeout_ms = 600000; /* a wait would hang the suite (its alarm fails it) */
    CHECK_OK(db, tocsin_open(&db, t_path("w_poll"), &oo));
    CHECK_OK(other, tocsin_open(&other, sqlite3_db_filename(tocsin_sqlite(db), "main"), NULL));
    w = open_worker(db, "wp", 2);
    id1 = call(db, "add", "[1]", 3);
    id2 = call(db, "add", "[2]", 3);
    CHECK_OK(db, tocsin_worker_poll(w, &runs, &n));
    CHECK_EQ_I(n, 2);
    if (n != 2) return;
    r = runs[0]->job_id == id1 ? runs[0] : runs[1];
    o.value = "3";
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
    tocsin_free(runs);
    runs = NULL;
    CHECK_OK(other, tocsin_begin(other)); /* another connection holds the write lock */
    CHECK_EQ_I(tocsin_worker_poll(w, &runs, &n), TOCSIN_BUSY);
    CHECK_EQ_I(n, 0);
    /* another thread's call on the handle waits for that lock, holding the
     * handle: poll does not wait for it either */
    {
        enqueue_ctx ec = {db, -1};
        pthread_t th;
        pthread_create(&th, NULL, enqueue_thread, &ec);
        nap(50);
        CHECK_EQ_I(tocsin_worker_poll(w, &runs, &n), TOCSIN_BUSY);
        CHECK_OK(other, tocsin_rollback(other));
        pthread_join(th, NULL);
        CHECK_EQ_I(ec.rc, TOCSIN_OK);
        CHECK_OK(other, tocsin_begin(other));
    }
    CHECK_OK(other, tocsin_rollback(other));
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 0);
    /* the outcome was kept: the next poll commits it (nothing new to claim) */
    CHECK_EQ_I(tocsin_worker_poll(w, &runs, &n), TOCSIN_TIMEOUT);
    CHECK_EQ_I(t_count(db, "_tocsin_results WHERE status = 'ok'"), 1);
    CHECK_EQ_I(tocsin_worker_in_flight(w), 1); /* id2 still runs */
    CHECK(id2 > id1);
    /* and the blocking call still waits for locks as before */
    CHECK_OK(other, tocsin_begin(other));
    CHECK_OK(other, tocsin_rollback(other));
    CHECK_EQ_I(tocsin_worker_next(w, &runs, &n, 0), TOCSIN_TIMEOUT);
    tocsin_worker_close(w);
    tocsin_close(other);
    tocsin_close(db);
}

/* A transaction handle of the worker's database holds the write lock while a
 * thread waits in tocsin_worker_next (a binding finishing runs from its worker
 * loop): the wait never sits in the lock's busy wait, a poke ends it, and the
 * run finished inside that transaction commits; then the claim proceeds. */
static void own_transaction_no_deadlock(void) {
    tocsin_open_opts oo = TOCSIN_OPEN_OPTS_INIT;
    tocsin_db *db = NULL, *tx = NULL;
    tocsin_worker *w;
    tocsin_task_run **runs = NULL;
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    waiter_ctx wc;
    pthread_t th;
    size_t n = 0;
    oo.busy_timeout_ms = 600000; /* a busy wait would hang the suite (its alarm fails it) */
    CHECK_OK(db, tocsin_open(&db, t_path("w_owntx"), &oo));
    w = open_worker(db, "wo", 1);
    call(db, "add", "[1]", 3);
    CHECK_OK(db, tocsin_worker_next(w, &runs, &n, 0));
    CHECK_EQ_I(n, 1);
    if (n != 1) return;
    call(db, "add", "[2]", 3);
    o.value = "1";
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    /* the slot is busy: the waiter's step wants the lock for upkeep and claims */
    wc.w = w;
    wc.rc = -1;
    CHECK_OK(db, tocsin_worker_finish(w, tx, runs[0], &o)); /* the slot frees: next wants to claim */
    pthread_create(&th, NULL, wait_next, &wc);
    nap(50);
    CHECK_OK(db, tocsin_worker_poke(w));
    pthread_join(th, NULL);
    CHECK_EQ_I(wc.rc, TOCSIN_INTERRUPTED);
    CHECK_OK(tx, tocsin_tx_commit(tx));
    CHECK_EQ_I(t_count(db, "_tocsin_results WHERE status = 'ok'"), 1);
    tocsin_free(runs);
    runs = NULL;
    /* the transaction ended: the step waits for locks again and claims */
    CHECK_OK(db, tocsin_worker_next(w, &runs, &n, 5000));
    CHECK_EQ_I(n, 1);
    if (n == 1) CHECK_OK(db, tocsin_worker_finish(w, NULL, runs[0], &o));
    tocsin_free(runs);
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    CHECK_EQ_I(t_count(db, "_tocsin_results WHERE status = 'ok'"), 2);
    tocsin_worker_close(w);
    tocsin_close(db);
}


/* Runs handed out by one step (timeout 0): *n of them into out (capacity cap). */
static int next_runs(tocsin_worker *w, tocsin_task_run **out, size_t cap) {
    tocsin_task_run **runs = NULL;
    size_t n = 0, i;
    if (tocsin_worker_next(w, &runs, &n, 0) != TOCSIN_OK) return 0;
    for (i = 0; i < n && i < cap; i++) out[i] = runs[i];
    tocsin_free(runs);
    return (int)n;
}

/* The reserve: a worker whose runs are short claims ahead of its free slots
 * (never more than concurrency in flight to the binding), refills it with
 * the outcomes in one commit, never hands out a reserved job that was
 * cancelled meanwhile, and hands its reserve back at close; long runs earn
 * no reserve. */
static void reserve(void) {
    tocsin_db *db = t_open("w_reserve", NULL), *other = NULL;
    tocsin_worker *w = open_worker(db, "w1", 2);
    tocsin_outcome ok = TOCSIN_OUTCOME_INIT;
    tocsin_task_run *runs[8];
    static int seen[64];
    int64_t ids[40], victim = 0, *cids = NULL;
    size_t ncancelled = 0;
    int i, n, done = 0, max_flight = 0, max_processing = 0, dup = 0, victim_run = 0, ok2 = 0;
    for (i = 0; i < 40; i++) ids[i] = call(db, "add", "[1]", 3);
    CHECK_OK(other, tocsin_open(&other, sqlite3_db_filename(tocsin_sqlite(db), "main"), NULL));
    for (int round = 0; round < 200 && done < 30; round++) {
        long long processing;
        n = next_runs(w, runs, 8);
        if ((int)tocsin_worker_in_flight(w) > max_flight) max_flight = (int)tocsin_worker_in_flight(w);
        processing = t_count(db, "_tocsin_jobs WHERE state = 'processing'");
        if (processing > max_processing) max_processing = (int)processing;
        if (!victim && processing > 2) { /* a job claimed ahead: cancel it before it is handed out */
            sqlite3_stmt *st;
            sqlite3_prepare_v2(tocsin_sqlite(other),
                               "SELECT max(id) FROM _tocsin_jobs WHERE state = 'processing'", -1, &st, NULL);
            if (sqlite3_step(st) == SQLITE_ROW) victim = sqlite3_column_int64(st, 0);
            sqlite3_finalize(st);
            CHECK_OK(other, tocsin_job_cancel(other, &ok2, victim));
            CHECK_EQ_I(ok2, 1);
            nap(30); /* past the worker's re-read interval */
        }
        for (i = 0; i < n; i++) {
            int64_t id = runs[i]->job_id;
            if (id >= 1 && id < 64 && seen[id]++) dup++;
            if (id == victim) victim_run = 1;
            CHECK_OK(db, tocsin_worker_finish(w, NULL, runs[i], &ok));
            done++;
        }
        CHECK_OK(db, tocsin_worker_cancelled(w, &cids, &ncancelled));
        CHECK_EQ_I(ncancelled, 0); /* a reserved job is dropped, never reported */
        tocsin_free(cids);
        cids = NULL;
    }
    /* take: reserved runs with no step, or TIMEOUT when a step is due */
    {
        tocsin_task_run **taken = NULL;
        size_t nt = 0;
        int trc = tocsin_worker_take(w, &taken, &nt);
        CHECK(trc == TOCSIN_OK || trc == TOCSIN_TIMEOUT);
        if (trc == TOCSIN_OK) {
            CHECK(nt >= 1 && nt <= 2);
            CHECK((int)tocsin_worker_in_flight(w) <= 2);
            for (size_t k = 0; k < nt; k++) {
                int64_t id = taken[k]->job_id;
                if (id >= 1 && id < 64 && seen[id]++) dup++;
                if (id == victim) victim_run = 1;
                CHECK_OK(db, tocsin_worker_finish(w, NULL, taken[k], &ok));
                done++;
            }
        }
        tocsin_free(taken);
        /* nothing free: a step is due, never a run past concurrency */
        CHECK_EQ_I(tocsin_worker_take(NULL, &taken, &nt), TOCSIN_INVALID);
    }
    CHECK(done >= 30 && done <= 32);
    CHECK_EQ_I(dup, 0);
    CHECK(victim != 0);
    CHECK_EQ_I(victim_run, 0);
    CHECK(max_flight <= 2);
    CHECK(max_processing > 2);  /* it claimed ahead */
    CHECK(max_processing <= 2 + 128); /* 2 running + a reserve of at most 128 */
    /* close: the outcomes commit, the reserve goes back (no attempt consumed) */
    CHECK_OK(db, tocsin_worker_close(w));
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'processing'"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_results"), done);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'pending' AND attempts < max_attempts"), 39 - done);
    CHECK_EQ_I(t_count(db, "_tocsin_dead"), 1); /* the cancelled one */
    (void)ids;
    /* long runs earn no reserve */
    w = open_worker(db, "w2", 1);
    for (int round = 0; round < 8; round++) {
        n = next_runs(w, runs, 8);
        CHECK(n <= 1);
        CHECK(t_count(db, "_tocsin_jobs WHERE state = 'processing'") <= 1);
        nap(3);
        for (i = 0; i < n; i++) CHECK_OK(db, tocsin_worker_finish(w, NULL, runs[i], &ok));
    }
    CHECK_OK(db, tocsin_worker_close(w));
    tocsin_close(other);
    tocsin_close(db);
}

/* Envelopes written by hand (any SQL client may enqueue one): the worker
 * reads the top-level members, first occurrence, escapes decoded in values;
 * anything else is an InvalidEnvelope failure, never a failed claim. */
static void hand_written_envelopes(void) {
    static const struct {
        const char *payload, *task, *args, *kwargs;
        int64_t ttl, timeout;
    } good[] = {
        {"{\"task\":\"add\"}", "add", "[]", "{}", 0, 0},
        {" { \"args\" : [ 1 , 2 ] , \"task\" : \"add\" , \"kwargs\" : {\"k\": [ ]} } ", "add", "[ 1 , 2 ]",
         "{\"k\": [ ]}", 0, 0},
        {"{\"task\":\"\\u0061dd\"}", "add", "[]", "{}", 0, 0},
        {"{\"task\":\"add\",\"result_ttl_ms\":-0,\"timeout_ms\":250,\"extra\":{\"task\":\"x\"}}", "add", "[]",
         "{}", 0, 250},
        {"{\"kwargs\":{\"s\":\"\\ud83d\\ude00\"},\"task\":\"add\",\"result_ttl_ms\":60000}", "add", "[]",
         "{\"s\":\"\\ud83d\\ude00\"}", 60000, 0},
    };
    static const char *const bad[] = {
        "[]", "\"add\"", "{}", "{\"task\":1}", "{\"task\":\"\"}", "{\"task\":\"a\\nb\"}",
        "{\"task\":\"add\",\"args\":{}}", "{\"task\":\"add\",\"kwargs\":[]}", "{\"task\":\"add\",\"args\":null}",
        "{\"task\":\"add\",\"result_ttl_ms\":5.0}", "{\"task\":\"add\",\"timeout_ms\":-1}",
        "{\"task\":\"add\",\"timeout_ms\":1e3}", "{\"task\":\"add\",\"timeout_ms\":\"5\"}",
        "{\"task\":\"add\",\"result_ttl_ms\":99999999999999999999}", "{\"t\\u0061sk\":\"add\"}",
        "{\"task\":\"a\\u0000b\"}",
    };
    tocsin_db *db = t_open("w_envelopes", NULL);
    tocsin_worker *w = open_worker(db, "w1", 1);
    size_t i;
    for (i = 0; i < sizeof good / sizeof good[0]; i++) {
        tocsin_task_run **runs = NULL;
        tocsin_outcome ok = TOCSIN_OUTCOME_INIT;
        size_t n = 0;
        int64_t id = 0;
        CHECK_OK(db, tocsin_queue_enqueue(db, &id, "tasks", good[i].payload, NULL));
        CHECK_OK(db, tocsin_worker_next(w, &runs, &n, 0));
        CHECK_EQ_I(n, 1);
        if (n != 1) continue;
        CHECK_STR(runs[0]->task, good[i].task);
        CHECK_STR(runs[0]->args, good[i].args);
        CHECK_STR(runs[0]->kwargs, good[i].kwargs);
        CHECK_EQ_I(runs[0]->timeout_ms, good[i].timeout);
        CHECK_OK(db, tocsin_worker_finish(w, NULL, runs[0], &ok));
        CHECK_OK(db, tocsin_worker_flush(w, NULL));
        tocsin_free(runs);
        if (good[i].ttl)
            CHECK_EQ_I(t_count(db, "_tocsin_results WHERE expires_at - created_at = 60000"), 1);
    }
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tocsin_task_run **runs = NULL;
        tocsin_result *res = NULL;
        size_t n = 0;
        int64_t id = 0;
        CHECK_OK(db, tocsin_queue_enqueue(db, &id, "tasks", bad[i], NULL));
        CHECK_EQ_I(tocsin_worker_next(w, &runs, &n, 0), TOCSIN_TIMEOUT);
        CHECK_EQ_I(n, 0);
        tocsin_free(runs);
        CHECK_OK(db, tocsin_result_get(db, &res, id));
        CHECK(res && res->is_error && strcmp(res->error_type, "InvalidEnvelope") == 0);
        if (!(res && res->is_error)) fprintf(stderr, "  envelope %s was read as valid\n", bad[i]);
        tocsin_result_free(res);
    }
    { /* a lone surrogate escape is not even enqueued (json.c), nor is a key
       * twice (SQL reads the first "task", the runtimes' JSON readers the
       * last); one written around the core fails as InvalidEnvelope */
        static const char *const twice[] = {"{\"task\":\"\\u0061dd\",\"task\":\"other\"}",
                                            "{\"task\":\"add\",\"args\":[],\"args\":[1]}"};
        int64_t id = 0;
        tocsin_task_run **runs = NULL;
        tocsin_result *res = NULL;
        size_t n = 0;
        char sql[200];
        CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "tasks", "{\"task\":\"a\\ud800b\"}", NULL), TOCSIN_INVALID);
        for (i = 0; i < sizeof twice / sizeof twice[0]; i++) {
            CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "tasks", twice[i], NULL), TOCSIN_INVALID);
            CHECK(strstr(tocsin_errmsg(db), "payload: duplicate key") != NULL);
            CHECK_OK(db, tocsin_queue_enqueue(db, &id, "tasks", "{\"task\":\"add\"}", NULL));
            snprintf(sql, sizeof sql, "UPDATE _tocsin_jobs SET payload = '%s' WHERE id = %lld", twice[i],
                     (long long)id);
            CHECK_OK(db, tocsin_exec(db, sql));
            CHECK_EQ_I(tocsin_worker_next(w, &runs, &n, 0), TOCSIN_TIMEOUT);
            CHECK_EQ_I(n, 0);
            tocsin_free(runs);
            runs = NULL;
            CHECK_OK(db, tocsin_result_get(db, &res, id));
            CHECK(res && res->is_error && strcmp(res->error_type, "InvalidEnvelope") == 0 &&
                  strstr(res->error_message, "given twice") != NULL);
            tocsin_result_free(res);
            res = NULL;
        }
    }
    tocsin_worker_close(w);
    tocsin_close(db);
}

/* A step that failed (here: another connection held the write lock past the
 * busy timeout) is tried again W_STEP_RETRY_MS (100 ms, handle's clock) after
 * it: a caller that reports the error and calls again at once does no
 * database work meanwhile, wake_in says when, and nothing is lost. */
static void failed_step_waits(void) {
    t_clock clk = {1000000};
    tocsin_open_opts oo = TOCSIN_OPEN_OPTS_INIT;
    tocsin_db *db = NULL, *other = NULL;
    tocsin_worker *w;
    tocsin_task_run *r, **runs = NULL;
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    size_t n = 0;
    int rc = -1;
    int64_t id;
    oo.busy_timeout_ms = 1;
    oo.clock = t_clock_fn;
    oo.clock_ctx = &clk;
    CHECK_OK(db, tocsin_open(&db, t_path("w_backoff"), &oo));
    CHECK_OK(other, tocsin_open(&other, sqlite3_db_filename(tocsin_sqlite(db), "main"), NULL));
    w = open_worker(db, "wb", 1);
    if (!w) return;
    id = call(db, "add", "[1]", 3);
    CHECK_OK(other, tocsin_begin(other));
    r = next_run(w, &rc);
    CHECK(r == NULL);
    CHECK_EQ_I(rc, TOCSIN_BUSY);
    CHECK_OK(other, tocsin_rollback(other));
    /* at once again: the lock is free, but the step waits out its pause */
    r = next_run(w, &rc);
    CHECK(r == NULL);
    CHECK_EQ_I(rc, TOCSIN_TIMEOUT);
    CHECK(strstr(tocsin_errmsg(db), "tried again") != NULL);
    CHECK_EQ_I(tocsin_worker_poll(w, &runs, &n), TOCSIN_TIMEOUT);
    CHECK_EQ_I(tocsin_worker_wake_in(w), 100);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'pending'"), 1);
    clk.now += 99;
    CHECK_EQ_I(tocsin_worker_wake_in(w), 1);
    r = next_run(w, &rc);
    CHECK(r == NULL);
    CHECK_EQ_I(rc, TOCSIN_TIMEOUT);
    clk.now += 1;
    r = next_run(w, &rc);
    CHECK(r != NULL && r->job_id == id);
    if (r) {
        o.value = "2";
        CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
    }
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    CHECK_EQ_I(t_count(db, "_tocsin_results WHERE status = 'ok'"), 1);
    /* tocsin_worker_poll's BUSY is its answer, not a failure: no pause after it */
    call(db, "add", "[2]", 3);
    CHECK_OK(other, tocsin_begin(other));
    CHECK_EQ_I(tocsin_worker_poll(w, &runs, &n), TOCSIN_BUSY);
    CHECK_OK(other, tocsin_rollback(other));
    r = next_run(w, &rc);
    CHECK(r != NULL);
    CHECK_OK(db, tocsin_worker_close(w));
    tocsin_close(other);
    tocsin_close(db);
}

/* A task's own bound after a run that never reported (its worker stalled or
 * was killed: the lease lapsed, the crash counting as an attempt): the job
 * dies as at its own bound, and the late outcome of the lost run is refused. */
static void task_bound_after_crash(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_task_bound_crash", &clk), *db2 = NULL;
    tocsin_task_opts to = TOCSIN_TASK_OPTS_INIT;
    tocsin_outcome ok = TOCSIN_OUTCOME_INIT;
    tocsin_worker *w1 = open_worker(db, "w1", 1), *w2;
    tocsin_task_run *r, *r2;
    tocsin_job *job = NULL;
    int64_t once, twice;
    size_t lost = 0;
    to.max_attempts = 1;
    CHECK_OK(db, tocsin_worker_register(w1, "once", &to));
    once = call(db, "once", "[]", 5); /* retries 0, called with 5 attempts */
    r = next_run(w1, NULL);
    CHECK(r && r->job_id == once);
    if (!r) return;
    CHECK_OK(db2, tocsin_open(&db2, sqlite3_db_filename(tocsin_sqlite(db), "main"), NULL));
    tocsin_set_clock(db2, t_clock_fn, &clk);
    w2 = open_worker(db2, "w2", 1);
    CHECK_OK(db2, tocsin_worker_register(w2, "once", &to));
    to.max_attempts = 2;
    CHECK_OK(db2, tocsin_worker_register(w2, "twice", &to));
    clk.now += 31000; /* w1 stalls past its lease: no renewal, no heartbeat */
    CHECK(next_run(w2, NULL) == NULL); /* not run again: dead, its bound spent */
    CHECK_OK(db, tocsin_job_get(db, &job, once));
    CHECK(job && strcmp(job->state, "dead") == 0 && job->reason && strcmp(job->reason, "max_attempts") == 0 &&
          job->attempts == 2 && job->last_error && strcmp(job->last_error, "lease expired") == 0);
    tocsin_jobs_free(job, 1);
    job = NULL;
    /* the stalled run's late outcome is refused by fencing */
    CHECK_OK(db, tocsin_worker_finish(w1, NULL, r, &ok));
    CHECK_OK(db, tocsin_worker_flush(w1, &lost));
    CHECK_EQ_I(lost, 1);
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 0);
    /* with a run left, a lost one is run again, its attempt counted */
    twice = call(db2, "twice", "[]", 5);
    r2 = next_run(w2, NULL);
    CHECK(r2 && r2->job_id == twice && r2->attempt == 1);
    clk.now += 31000; /* w2 stalls this time */
    tocsin_worker_close(w1);
    w1 = open_worker(db, "w3", 1);
    CHECK_OK(db, tocsin_worker_register(w1, "twice", &to));
    r = next_run(w1, NULL);
    CHECK(r && r->job_id == twice && r->attempt == 2);
    if (r) CHECK_OK(db, tocsin_worker_finish(w1, NULL, r, &ok));
    CHECK_OK(db, tocsin_worker_close(w1));
    if (r2) CHECK_OK(db2, tocsin_worker_finish(w2, NULL, r2, &ok));
    CHECK_OK(db2, tocsin_worker_flush(w2, &lost));
    CHECK_EQ_I(lost, 1);
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 1);
    tocsin_worker_close(w2);
    tocsin_close(db2);
    tocsin_close(db);
}

/* Graceful shutdown: tocsin_worker_drain stops claims and hand-outs at once,
 * the reserve goes back with no attempt consumed, the upkeep and the group
 * commit of the running runs go on, and close hands back the rest. Before,
 * a binding that kept stepping to renew its running leases while it drained
 * claimed jobs it only handed back (a claim and a hand-back per freed slot). */
static void drain(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_drain", &clk);
    tocsin_worker *w = open_worker(db, "w1", 2);
    tocsin_outcome ok = TOCSIN_OUTCOME_INIT;
    tocsin_task_run *runs[8], **got = NULL;
    size_t n = 0;
    int i, k, rc;
    for (i = 0; i < 2; i++) call(db, "add", "[0]", 3); /* warm-up: earns the reserve */
    for (i = 0; i < 10; i++) call(db, "add", "[1]", 1);
    k = next_runs(w, runs, 8);
    CHECK_EQ_I(k, 2);
    for (i = 0; i < k; i++) CHECK_OK(db, tocsin_worker_finish(w, NULL, runs[i], &ok));
    k = next_runs(w, runs, 8); /* two run, the rest is claimed ahead */
    CHECK_EQ_I(k, 2);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'processing'"), 10);
    CHECK_OK(db, tocsin_worker_drain(w));
    CHECK_EQ_I(tocsin_worker_take(w, &got, &n), TOCSIN_TIMEOUT);
    CHECK_OK(db, tocsin_worker_finish(w, NULL, runs[0], &ok)); /* a slot frees: nothing refills it */
    rc = tocsin_worker_next(w, &got, &n, 0);
    CHECK_EQ_I(rc, TOCSIN_TIMEOUT);
    CHECK_EQ_I(n, 0);
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 3); /* the finished one was committed */
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'processing'"), 1); /* only runs[1] */
    /* the reserve went back as handed back: its one attempt is still to run */
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'pending' AND attempts = 1 AND max_attempts = 2 "
                           "AND handbacks = 1"), 8);
    clk.now += 11000; /* the upkeep goes on: the running lease is renewed */
    CHECK_EQ_I(tocsin_worker_next(w, &got, &n, 0), TOCSIN_TIMEOUT);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'processing' AND lease_until > 1011000 + 20000"), 1);
    CHECK_OK(db, tocsin_worker_finish(w, NULL, runs[1], &ok));
    CHECK_OK(db, tocsin_worker_close(w));
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 4);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'pending'"), 8);
    CHECK_EQ_I(tocsin_worker_drain(NULL), TOCSIN_INVALID);
    tocsin_close(db);
}

/* A worker that stalled past its lease (SIGSTOP, swap, a long GC pause) may
 * have lost its reserve to another worker: its jobs' leases lapsed and they
 * were claimed again. tocsin_worker_take must not hand those runs out with no
 * step (that ran each twice at once); the step renews first, drops the runs
 * that were taken, and hands out the rest. A renewal that fails stays due. */
static void reserve_after_stall(void) {
    t_clock clk = {1000000};
    tocsin_open_opts oo = TOCSIN_OPEN_OPTS_INIT;
    tocsin_db *db = t_open("w_stall", &clk), *db2 = NULL;
    tocsin_worker *w = open_worker(db, "w1", 2), *w2;
    tocsin_outcome ok = TOCSIN_OUTCOME_INIT;
    tocsin_task_run *runs[8], *r2[8], **got = NULL;
    size_t n = 0, j;
    int i, k, k2, dup = 0, rc;
    for (i = 0; i < 2; i++) call(db, "add", "[0]", 3); /* warm-up: earns the reserve */
    for (i = 0; i < 10; i++) call(db, "add", "[1]", 3);
    k = next_runs(w, runs, 8);
    for (i = 0; i < k; i++) CHECK_OK(db, tocsin_worker_finish(w, NULL, runs[i], &ok));
    k = next_runs(w, runs, 8);
    CHECK_EQ_I(k, 2);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'processing'"), 10); /* 8 reserved */
    oo.clock = t_clock_fn;
    oo.clock_ctx = &clk;
    CHECK_OK(db2, tocsin_open(&db2, sqlite3_db_filename(tocsin_sqlite(db), "main"), &oo));
    w2 = open_worker(db2, "w2", 8);
    clk.now += 31000; /* w1 stalls past its lease */
    k2 = next_runs(w2, r2, 8);
    CHECK_EQ_I(k2, 8); /* the lapsed reserve, and the two running jobs */
    /* w1 resumes: its handlers return and their threads take the next runs */
    for (i = 0; i < k; i++) CHECK_OK(db, tocsin_worker_finish(w, NULL, runs[i], &ok));
    CHECK_EQ_I(tocsin_worker_take(w, &got, &n), TOCSIN_TIMEOUT); /* a step is due */
    CHECK_EQ_I(n, 0);
    rc = tocsin_worker_next(w, &got, &n, 0);
    for (j = 0; rc == TOCSIN_OK && j < n; j++) {
        for (i = 0; i < k2; i++)
            if (got[j]->job_id == r2[i]->job_id) dup++;
        CHECK_OK(db, tocsin_worker_finish(w, NULL, got[j], &ok));
    }
    tocsin_free(got);
    CHECK_EQ_I(dup, 0);
    for (i = 0; i < k2; i++) CHECK_OK(db2, tocsin_worker_finish(w2, NULL, r2[i], &ok));
    CHECK_OK(db, tocsin_worker_close(w));
    CHECK_OK(db2, tocsin_worker_close(w2));
    tocsin_close(db2);
    tocsin_close(db);

    /* a renewal that failed (the lock held past the busy timeout) is tried again
     * after the step's pause, not a third of the lease later */
    oo.busy_timeout_ms = 1;
    CHECK_OK(db, tocsin_open(&db, t_path("w_renew_retry"), &oo));
    CHECK_OK(db2, tocsin_open(&db2, sqlite3_db_filename(tocsin_sqlite(db), "main"), NULL));
    w = open_worker(db, "w1", 1);
    call(db, "add", "[1]", 3);
    runs[0] = next_run(w, &rc);
    CHECK(runs[0] != NULL);
    clk.now += 10000; /* the renewal is due */
    CHECK_OK(db2, tocsin_begin(db2));
    CHECK(next_run(w, &rc) == NULL);
    CHECK_EQ_I(rc, TOCSIN_BUSY);
    CHECK_OK(db2, tocsin_rollback(db2));
    clk.now += 100; /* the pause */
    CHECK(next_run(w, &rc) == NULL);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'processing' AND lease_until = 1041100 + 30000"), 1);
    if (runs[0]) CHECK_OK(db, tocsin_worker_finish(w, NULL, runs[0], &ok));
    CHECK_OK(db, tocsin_worker_close(w));
    tocsin_close(db2);
    tocsin_close(db);
}

/* A worker restarted under its fixed id after a crash (SIGKILL) gets its
 * predecessor's jobs at once, as any worker gets a dead worker's: the row it
 * takes over is no other worker's to reap, so they waited out their lease. */
static void restart_under_same_id(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_restart", &clk);
    char path[512];
    int64_t id = call(db, "add", "[1]", 3), token = 0;
    int fds[2];
    pid_t pid;
    snprintf(path, sizeof path, "%s", sqlite3_db_filename(tocsin_sqlite(db), "main"));
    CHECK(pipe(fds) == 0);
    pid = fork();
    if (pid == 0) {
        tocsin_db *c = NULL;
        tocsin_worker *cw;
        tocsin_task_run *r;
        close(fds[0]);
        if (tocsin_open(&c, path, NULL) != TOCSIN_OK) _exit(2);
        if (!(cw = open_worker(c, "fixed", 1))) _exit(3);
        if (!(r = next_run(cw, NULL))) _exit(4);
        if (write(fds[1], &r->token, sizeof r->token) != sizeof r->token) _exit(5);
        for (;;) pause(); /* killed mid-run */
    }
    close(fds[1]);
    CHECK(read(fds[0], &token, sizeof token) == sizeof token);
    close(fds[0]);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    {
        tocsin_worker *w = open_worker(db, "fixed", 1);
        tocsin_outcome o = TOCSIN_OUTCOME_INIT;
        tocsin_task_run *r = w ? next_run(w, NULL) : NULL; /* the clock has not moved */
        CHECK(r && r->job_id == id && r->attempt == 2 && r->token != token);
        if (r) CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
        CHECK_OK(db, tocsin_worker_close(w));
    }
    CHECK_EQ_I(t_count(db, "_tocsin_results WHERE status = 'ok'"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 0);
    tocsin_close(db);
}

/* Hand-backs are no runs: a job handed back many times (a rolling deploy, a
 * worker that lacked its task) retries its first failure after the task's
 * base delay, not after the delay of its claim count (the cap: an hour). */
static void backoff_after_hand_backs(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_backoff_hb", &clk);
    tocsin_worker *w = open_worker(db, "w1", 1);
    tocsin_task_opts to = TOCSIN_TASK_OPTS_INIT;
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    tocsin_task_run *r = NULL;
    tocsin_job *job = NULL;
    int64_t id = call(db, "slow", "[]", 3);
    int i;
    to.backoff_base_ms = 1000;
    CHECK_OK(db, tocsin_worker_register(w, "slow", &to));
    o.kind = TOCSIN_OUTCOME_HAND_BACK;
    for (i = 0; i < 10; i++) { /* handed back at shutdown ten times */
        r = next_run(w, NULL);
        CHECK(r && r->job_id == id);
        if (r) CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
        CHECK_OK(db, tocsin_worker_flush(w, NULL));
    }
    r = next_run(w, NULL);
    CHECK(r && r->attempt == 11 && r->max_attempts == 13);
    o.kind = TOCSIN_OUTCOME_ERROR;
    o.error_type = "Flaky";
    if (r) CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK(job && job->run_at - clk.now >= 500 && job->run_at - clk.now <= 1000);
    tocsin_jobs_free(job, 1);
    tocsin_worker_close(w);
    tocsin_close(db);
}

/* ---- the contract at its edges (docs/worker-protocol.md) ---------------------------- */

/* "max_attempts - attempt is always the runs left after this one", also when a
 * task's own bound is the lower one and the job was handed back before it
 * reached that bound. Before, the hand-backs were read only from the claim
 * that could reach the task's bound: a job of a 3-run task handed back once
 * was told 1 run left at its attempt 2 (3 - 2) while 2 were. */
static void task_bound_runs_left(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_runs_left", &clk);
    tocsin_worker *w = open_worker(db, "w1", 1);
    tocsin_task_opts to = TOCSIN_TASK_OPTS_INIT;
    tocsin_outcome hb = TOCSIN_OUTCOME_INIT, err = TOCSIN_OUTCOME_INIT;
    tocsin_task_run *r;
    tocsin_job *job = NULL;
    int64_t id;
    int runs = 0, i;
    to.max_attempts = 3;
    to.backoff_base_ms = 1;
    CHECK_OK(db, tocsin_worker_register(w, "thrice", &to));
    id = call(db, "thrice", "[]", 10);
    hb.kind = TOCSIN_OUTCOME_HAND_BACK;
    err.kind = TOCSIN_OUTCOME_ERROR;
    err.error_type = "Flaky";
    err.delay_ms = 0;
    r = next_run(w, NULL);
    CHECK(r && r->attempt == 1 && r->max_attempts == 3);
    if (r) CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &hb));
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    /* every run tells the runs left after it, and they are what the core allows */
    for (i = 0; i < 5; i++) {
        if (!(r = next_run(w, NULL))) break;
        runs++;
        CHECK_EQ_I(r->max_attempts - r->attempt, 3 - runs);
        CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &err));
        CHECK_OK(db, tocsin_worker_flush(w, NULL));
    }
    CHECK_EQ_I(runs, 3);
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK(job && strcmp(job->state, "dead") == 0 && strcmp(job->reason, "max_attempts") == 0);
    tocsin_jobs_free(job, 1);
    CHECK_OK(db, tocsin_worker_close(w));
    tocsin_close(db);
}

/* delay_ms means something for ERROR and HAND_BACK only: an OK or FAIL outcome
 * carrying any delay_ms (a binding that left it unset) is recorded as given.
 * Before, it was checked for every kind, and a successful run with an out of
 * range delay_ms died as an InvalidResult failure. */
static void ignored_delay(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_ignored_delay", &clk);
    tocsin_worker *w = open_worker(db, "w1", 4);
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    tocsin_task_run **runs = NULL, *r[3] = {NULL, NULL, NULL};
    tocsin_result *res = NULL;
    tocsin_job *job = NULL;
    int64_t ids[3];
    size_t n = 0, i, k;
    for (k = 0; k < 3; k++) ids[k] = call(db, "add", "[1]", 3);
    CHECK_OK(db, tocsin_worker_next(w, &runs, &n, 0));
    CHECK_EQ_I(n, 3);
    for (i = 0; i < n; i++)
        for (k = 0; k < 3; k++)
            if (runs[i]->job_id == ids[k]) r[k] = runs[i];
    tocsin_free(runs);
    if (!(r[0] && r[1] && r[2])) return;
    o.value = "5";
    o.delay_ms = TOCSIN_MAX_TIME_MS + 1;
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r[0], &o));
    o.kind = TOCSIN_OUTCOME_FAIL;
    o.value = NULL;
    o.error_type = "TypeError";
    o.delay_ms = INT64_MAX;
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r[1], &o));
    /* where it means something, it is still checked: an ERROR's delay out of range */
    o.kind = TOCSIN_OUTCOME_ERROR;
    CHECK_OK(db, tocsin_worker_finish(w, NULL, r[2], &o));
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    CHECK_OK(db, tocsin_result_get(db, &res, ids[0]));
    CHECK(res && !res->is_error && strcmp(res->value, "5") == 0);
    tocsin_result_free(res);
    CHECK_OK(db, tocsin_result_get(db, &res, ids[1]));
    CHECK(res && res->is_error && strcmp(res->error_type, "TypeError") == 0);
    tocsin_result_free(res);
    CHECK_OK(db, tocsin_result_get(db, &res, ids[2]));
    CHECK(res && res->is_error && strcmp(res->error_type, "InvalidOutcome") == 0 &&
          strstr(res->error_message, "delay_ms") != NULL);
    tocsin_result_free(res);
    CHECK_OK(db, tocsin_job_get(db, &job, ids[2]));
    CHECK(job && strcmp(job->state, "dead") == 0 && strcmp(job->reason, "failed") == 0);
    tocsin_jobs_free(job, 1);
    CHECK_OK(db, tocsin_worker_close(w));
    tocsin_close(db);
}

/* A worker of more than TOCSIN_MAX_BATCH / 2 concurrency with short runs:
 * its free slots plus the reserve's refill may ask for more jobs than one
 * claim takes (TOCSIN_MAX_BATCH). Before, that claim was refused
 * (TOCSIN_INVALID) at every step: the worker claimed nothing again and kept
 * its outcomes batched. */
static void huge_concurrency_reserve(void) {
    enum { C = 5001 };
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_huge_reserve", &clk);
    tocsin_worker *w = open_worker(db, "w1", C);
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    tocsin_job_spec *specs = calloc(C + 1, sizeof *specs);
    int64_t *ids = calloc(C + 1, sizeof *ids);
    tocsin_task_run **runs = NULL;
    size_t n = 0, i;
    int rc;
    if (!w || !specs || !ids) return;
    for (i = 0; i <= C; i++) {
        specs[i].queue = "tasks";
        specs[i].payload = "{\"task\":\"add\",\"args\":[]}";
    }
    CHECK_OK(db, tocsin_queue_enqueue_many(db, ids, specs, C));
    CHECK_OK(db, tocsin_worker_next(w, &runs, &n, 0));
    CHECK_EQ_I(n, C);
    for (i = 0; i < n; i++) CHECK_OK(db, tocsin_worker_finish(w, NULL, runs[i], &o));
    tocsin_free(runs);
    runs = NULL;
    /* C short runs measured: the next claim fills the slots and a reserve of C */
    CHECK_OK(db, tocsin_queue_enqueue_many(db, ids, specs, C + 1));
    rc = tocsin_worker_next(w, &runs, &n, 0);
    if (rc != TOCSIN_OK) fprintf(stderr, "huge_concurrency_reserve: %s\n", tocsin_errmsg(NULL));
    CHECK_EQ_I(rc, TOCSIN_OK);
    CHECK(n >= 1 && n <= C);
    CHECK_EQ_I(t_count(db, "_tocsin_results"), C); /* the batch rode with the claim */
    for (i = 0; i < n; i++) CHECK_OK(db, tocsin_worker_finish(w, NULL, runs[i], &o));
    tocsin_free(runs);
    CHECK_OK(db, tocsin_worker_close(w));
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'processing'"), 0);
    free(specs);
    free(ids);
    tocsin_close(db);
}

/* A clock that holds one thread inside a call: the test's way to have a
 * finish under way on one thread while another thread finishes the same run. */
typedef struct hold_clock {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t now;
    int armed, inside, go;
    pthread_t who;
} hold_clock;

static int64_t hold_clock_fn(void *p) {
    hold_clock *h = p;
    int64_t now;
    pthread_mutex_lock(&h->mu);
    if (h->armed && pthread_equal(h->who, pthread_self())) {
        h->armed = 0;
        h->inside = 1;
        pthread_cond_broadcast(&h->cv);
        while (!h->go) pthread_cond_wait(&h->cv, &h->mu);
    }
    now = h->now;
    pthread_mutex_unlock(&h->mu);
    return now;
}

typedef struct tx_finish_ctx {
    tocsin_worker *w;
    tocsin_db *db, *tx;
    tocsin_task_run *run;
    hold_clock *clk;
    int rc;
} tx_finish_ctx;

static void *tx_finish_thread(void *p) {
    tx_finish_ctx *c = p;
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    pthread_mutex_lock(&c->clk->mu);
    c->clk->who = pthread_self();
    c->clk->armed = 1;
    pthread_mutex_unlock(&c->clk->mu);
    o.value = "\"tx\"";
    c->rc = tocsin_worker_finish(c->w, c->tx, c->run, &o);
    if (c->rc == TOCSIN_OK) c->rc = tocsin_tx_commit(c->tx);
    else tocsin_tx_rollback(c->tx);
    return NULL;
}

/* A run is finished once, also when two threads finish it at the same time,
 * one inside a transaction: one finish wins, the other is refused. Before,
 * the transactional finish checked the run only before it wrote: a finish
 * without transaction from another thread meanwhile was taken too, the slot
 * was freed twice (tocsin_worker_in_flight wrapped around) and the run was
 * freed twice (by the batch and by the released list). */
static void finish_race(void) {
    hold_clock clk;
    tocsin_db *db = t_open("w_finish_race", NULL), *tx = NULL;
    tocsin_worker *w;
    tocsin_task_call c = TOCSIN_TASK_CALL_INIT;
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    tx_finish_ctx fc;
    tocsin_task_run *r;
    pthread_t t;
    int64_t id = 0;
    int rc;
    memset(&clk, 0, sizeof clk);
    pthread_mutex_init(&clk.mu, NULL);
    pthread_cond_init(&clk.cv, NULL);
    clk.now = 1000000;
    tocsin_set_clock(db, hold_clock_fn, &clk);
    w = open_worker(db, "w1", 1);
    c.task = "add";
    c.timeout_ms = 60000; /* an OK finish reads the clock (the late-result check) */
    CHECK_OK(db, tocsin_task_enqueue(db, &id, "tasks", &c, NULL));
    r = next_run(w, NULL);
    CHECK(r && r->job_id == id);
    if (!r) return;
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    memset(&fc, 0, sizeof fc);
    fc.w = w;
    fc.db = db;
    fc.tx = tx;
    fc.run = r;
    fc.clk = &clk;
    CHECK(pthread_create(&t, NULL, tx_finish_thread, &fc) == 0);
    pthread_mutex_lock(&clk.mu);
    while (!clk.inside) pthread_cond_wait(&clk.cv, &clk.mu);
    pthread_mutex_unlock(&clk.mu);
    /* the transactional finish is under way: this one is refused */
    o.value = "\"plain\"";
    rc = tocsin_worker_finish(w, NULL, r, &o);
    CHECK_EQ_I(rc, TOCSIN_INVALID);
    pthread_mutex_lock(&clk.mu);
    clk.go = 1;
    pthread_cond_broadcast(&clk.cv);
    pthread_mutex_unlock(&clk.mu);
    pthread_join(t, NULL);
    CHECK_EQ_I(fc.rc, TOCSIN_OK);
    CHECK_EQ_I(tocsin_worker_in_flight(w), 0);
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    CHECK_EQ_I(t_count(db, "_tocsin_results WHERE value = '\"tx\"'"), 1);
    CHECK_OK(db, tocsin_worker_close(w));
    tocsin_close(db);
    pthread_cond_destroy(&clk.cv);
    pthread_mutex_destroy(&clk.mu);
}

/* A run whose lease another worker took over (the first stalled past it):
 * whatever the stalled run reports late -- a result, an error, a final
 * failure, inside a transaction or not -- is refused by fencing and nothing
 * is recorded twice: the job is the new holder's, its outcome the one kept. */
static void late_finish_after_takeover(void) {
    t_clock clk = {1000000};
    tocsin_open_opts oo = TOCSIN_OPEN_OPTS_INIT;
    tocsin_db *db = t_open("w_takeover", &clk), *db2 = NULL, *tx = NULL;
    tocsin_worker *w1 = open_worker(db, "w1", 3), *w2;
    tocsin_task_run **runs = NULL, *r1[3], *r2[3];
    tocsin_outcome ok = TOCSIN_OUTCOME_INIT, err = TOCSIN_OUTCOME_INIT, fail = TOCSIN_OUTCOME_INIT;
    tocsin_job *job = NULL;
    int64_t *ids = NULL;
    size_t n = 0, i, lost = 0;
    for (i = 0; i < 3; i++) call(db, "add", "[1]", 5);
    CHECK_OK(db, tocsin_worker_next(w1, &runs, &n, 0));
    CHECK_EQ_I(n, 3);
    for (i = 0; i < 3 && i < n; i++) r1[i] = runs[i];
    tocsin_free(runs);
    if (n != 3) return;
    oo.clock = t_clock_fn;
    oo.clock_ctx = &clk;
    CHECK_OK(db2, tocsin_open(&db2, sqlite3_db_filename(tocsin_sqlite(db), "main"), &oo));
    w2 = open_worker(db2, "w2", 3);
    clk.now += 31000; /* w1 stalls past its lease */
    CHECK_OK(db2, tocsin_worker_next(w2, &runs, &n, 0));
    CHECK_EQ_I(n, 3);
    for (i = 0; i < 3 && i < n; i++) {
        r2[i] = runs[i];
        CHECK_EQ_I(r2[i]->attempt, 2);
    }
    tocsin_free(runs);
    if (n != 3) return;
    /* w1 resumes: its late outcomes are refused */
    err.kind = TOCSIN_OUTCOME_ERROR;
    err.error_type = "Late";
    fail.kind = TOCSIN_OUTCOME_FAIL;
    fail.error_type = "Late";
    CHECK_OK(db, tocsin_tx_begin(db, &tx));
    CHECK_EQ_I(tocsin_worker_finish(w1, tx, r1[0], &ok), TOCSIN_LEASE_LOST);
    CHECK_OK(tx, tocsin_tx_rollback(tx));
    CHECK_EQ_I(tocsin_worker_in_flight(w1), 3); /* until finished again without tx */
    CHECK_OK(db, tocsin_worker_finish(w1, NULL, r1[0], &ok));
    CHECK_OK(db, tocsin_worker_finish(w1, NULL, r1[1], &err));
    CHECK_OK(db, tocsin_worker_finish(w1, NULL, r1[2], &fail));
    CHECK_OK(db, tocsin_worker_flush(w1, &lost));
    CHECK_EQ_I(lost, 3);
    CHECK_EQ_I(tocsin_worker_in_flight(w1), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'processing' AND worker = 'w2' AND attempts = 2"
                           " AND last_error IS NOT 'Late'"), 3);
    /* the stalled worker was told (a step of its own: lost runs are no longer renewed) */
    CHECK_EQ_I(tocsin_worker_next(w1, &runs, &n, 0), TOCSIN_TIMEOUT);
    CHECK_OK(db, tocsin_worker_cancelled(w1, &ids, &n));
    CHECK_EQ_I(n, 0); /* they were finished before the step: nothing to stop */
    tocsin_free(ids);
    for (i = 0; i < 3; i++) CHECK_OK(db2, tocsin_worker_finish(w2, NULL, r2[i], &ok));
    CHECK_OK(db2, tocsin_worker_flush(w2, &lost));
    CHECK_EQ_I(lost, 0);
    CHECK_EQ_I(t_count(db, "_tocsin_results WHERE status = 'ok'"), 3);
    CHECK_EQ_I(t_count(db, "_tocsin_dead"), 0);
    (void)job;
    CHECK_OK(db, tocsin_worker_close(w1));
    CHECK_OK(db2, tocsin_worker_close(w2));
    tocsin_close(db2);
    tocsin_close(db);
}

/* One job, one run at a time in a worker: a stalled worker whose run lost its
 * lease (another worker took the job over, then retried it) claims the job
 * again while its own old run may still be running. The bindings know a run
 * by its job id, so the new run waits (claimed, its lease renewed) until the
 * old one is finished, and is handed out then. */
static void no_second_run_of_a_job(void) {
    t_clock clk = {1000000};
    tocsin_open_opts oo = TOCSIN_OPEN_OPTS_INIT;
    tocsin_db *db = t_open("w_one_run", &clk), *db2 = NULL;
    tocsin_worker *w1 = open_worker(db, "w1", 2), *w2;
    tocsin_task_run *r1, *r2, *r3 = NULL;
    tocsin_outcome ok = TOCSIN_OUTCOME_INIT, again = TOCSIN_OUTCOME_INIT;
    int64_t *ids = NULL, jid = call(db, "add", "[1]", 9);
    size_t n = 0, lost = 0;
    int rc, i;
    r1 = next_run(w1, NULL);
    CHECK(r1 != NULL);
    if (!r1) return;
    oo.clock = t_clock_fn;
    oo.clock_ctx = &clk;
    CHECK_OK(db2, tocsin_open(&db2, sqlite3_db_filename(tocsin_sqlite(db), "main"), &oo));
    w2 = open_worker(db2, "w2", 1);
    clk.now += 31000; /* w1 stalls past its lease: w2 takes the job over and retries it at once */
    r2 = next_run(w2, NULL);
    CHECK(r2 != NULL);
    if (!r2) return;
    CHECK_EQ_I(r2->attempt, 2);
    again.kind = TOCSIN_OUTCOME_ERROR;
    again.error_type = "Flaky";
    again.delay_ms = 0;
    CHECK_OK(db2, tocsin_worker_finish(w2, NULL, r2, &again));
    CHECK_OK(db2, tocsin_worker_flush(w2, &lost));
    /* w1 resumes: its run is lost (told), the job is claimed again (attempt 3)
     * and held back while the old run has not finished */
    for (i = 0; i < 3; i++) CHECK(next_run(w1, &rc) == NULL);
    CHECK_OK(db, tocsin_worker_cancelled(w1, &ids, &n));
    CHECK_EQ_I(n, 1);
    if (n == 1) CHECK_EQ_I(ids[0], jid);
    tocsin_free(ids);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'processing' AND worker = 'w1' AND attempts = 3"), 1);
    CHECK_EQ_I(tocsin_worker_take(w1, (tocsin_task_run ***)&ids, &n), TOCSIN_TIMEOUT);
    clk.now += 12000; /* its lease is renewed meanwhile */
    CHECK(next_run(w1, NULL) == NULL);
    clk.now += 12000;
    CHECK(next_run(w1, NULL) == NULL);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'processing' AND worker = 'w1' AND attempts = 3"), 1);
    /* the old run ends (its outcome is refused): once that is written, the new
     * one is handed out */
    CHECK_OK(db, tocsin_worker_finish(w1, NULL, r1, &ok));
    CHECK_OK(db, tocsin_worker_flush(w1, &lost));
    CHECK_EQ_I(lost, 1);
    r3 = next_run(w1, NULL);
    CHECK(r3 != NULL);
    if (r3) {
        CHECK_EQ_I(r3->job_id, jid);
        CHECK_EQ_I(r3->attempt, 3);
        CHECK_OK(db, tocsin_worker_finish(w1, NULL, r3, &ok));
        CHECK_OK(db, tocsin_worker_flush(w1, &lost));
        CHECK_EQ_I(lost, 0);
    }
    CHECK_EQ_I(t_count(db, "_tocsin_results WHERE status = 'ok'"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 0);
    CHECK_OK(db, tocsin_worker_close(w1));
    CHECK_OK(db2, tocsin_worker_close(w2));
    tocsin_close(db2);
    tocsin_close(db);
}

/* The scheduler's leadership between two workers on one file: one leader at
 * a time; a leader that stalls past its ttl loses it to the other, and on
 * resuming finds it lost before it fires anything, so each boundary fires
 * once; a leader that closes resigns, and the other takes over at its next
 * lead. */
static void scheduler_handover(void) {
    t_clock clk = {60000};
    tocsin_open_opts oo = TOCSIN_OPEN_OPTS_INIT;
    tocsin_db *db = t_open("w_sched_handover", &clk), *db2 = NULL;
    tocsin_worker_opts wo = TOCSIN_WORKER_OPTS_INIT;
    tocsin_worker *a = NULL, *b = NULL;
    tocsin_task_run *r;
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    int64_t next = 0;
    int i;
    wo.queues = QS;
    wo.n_queues = 1;
    wo.scheduler = 1;
    wo.scheduler_ttl_ms = 9000;
    oo.clock = t_clock_fn;
    oo.clock_ctx = &clk;
    CHECK_OK(db2, tocsin_open(&db2, sqlite3_db_filename(tocsin_sqlite(db), "main"), &oo));
    CHECK_OK(db, tocsin_schedule_set(db, &next, "every-minute", "* * * * *", "tasks",
                                     "{\"task\":\"add\",\"args\":[]}", NULL));
    wo.worker_id = "a";
    CHECK_OK(db, tocsin_worker_open(&a, db, &wo));
    wo.worker_id = "b";
    CHECK_OK(db2, tocsin_worker_open(&b, db2, &wo));
    CHECK_OK(db, tocsin_worker_register(a, "add", NULL));
    CHECK_OK(db2, tocsin_worker_register(b, "add", NULL));
    CHECK(next_run(a, NULL) == NULL);
    CHECK(next_run(b, NULL) == NULL);
    CHECK_EQ_I(t_count(db, "_tocsin_locks WHERE owner = 'a'"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_locks WHERE owner = 'b'"), 0);
    /* a stalls past its ttl; b takes over and fires the boundary */
    clk.now = 120000;
    r = next_run(b, NULL);
    CHECK_EQ_I(t_count(db, "_tocsin_locks WHERE owner = 'b'"), 1);
    CHECK(r != NULL);
    if (r) CHECK_OK(db2, tocsin_worker_finish(b, NULL, r, &o));
    CHECK_OK(db2, tocsin_worker_flush(b, NULL));
    /* a resumes: not the leader any more, fires nothing */
    CHECK(next_run(a, NULL) == NULL);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_locks WHERE owner = 'a'"), 0);
    /* b closes (resigns); a leads at its next lead and fires the next boundary */
    CHECK_OK(db2, tocsin_worker_close(b));
    clk.now = 180000;
    for (i = 0; i < 3; i++)
        if ((r = next_run(a, NULL)) != NULL) CHECK_OK(db, tocsin_worker_finish(a, NULL, r, &o));
    CHECK_OK(db, tocsin_worker_flush(a, NULL));
    CHECK_EQ_I(t_count(db, "_tocsin_locks WHERE owner = 'a'"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 2);
    CHECK_OK(db, tocsin_worker_close(a));
    tocsin_close(db2);
    tocsin_close(db);
}

/* Unknown tasks: the hand-back delay doubles up to 60 s, each drawn between
 * half and all of it; a first delay over 60 s stays that delay. */
static void unknown_task_delays(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_unknown_delays", &clk);
    tocsin_worker_opts wo = TOCSIN_WORKER_OPTS_INIT;
    tocsin_worker *w = NULL;
    tocsin_job *job = NULL;
    int64_t id = call(db, "nobody", "[]", 1), want = 1000, d;
    int i;
    wo.queues = QS;
    wo.n_queues = 1;
    wo.worker_id = "w1";
    CHECK_OK(db, tocsin_worker_open(&w, db, &wo));
    for (i = 0; i < 9; i++) {
        CHECK(next_run(w, NULL) == NULL);
        CHECK_OK(db, tocsin_job_get(db, &job, id));
        d = job ? job->run_at - clk.now : -1;
        CHECK(job && job->attempts == i + 1 && job->max_attempts == i + 2);
        CHECK(d >= want / 2 && d <= want);
        tocsin_jobs_free(job, 1);
        job = NULL;
        clk.now += want;
        want = want * 2 > 60000 ? 60000 : want * 2;
    }
    CHECK_OK(db, tocsin_worker_close(w));
    wo.worker_id = "w2";
    wo.unknown_task_delay_ms = 90000;
    CHECK_OK(db, tocsin_worker_open(&w, db, &wo));
    for (i = 0; i < 3; i++) {
        CHECK(next_run(w, NULL) == NULL);
        CHECK_OK(db, tocsin_job_get(db, &job, id));
        d = job ? job->run_at - clk.now : -1;
        CHECK(d >= 45000 && d <= 90000);
        tocsin_jobs_free(job, 1);
        job = NULL;
        clk.now += 90000;
    }
    CHECK_OK(db, tocsin_worker_close(w));
    tocsin_close(db);
}

/* Result ttl: the call's when > 0, else the task's (> 0 that, < 0 forever),
 * else one day; a task registered again with other options applies to the
 * runs claimed after it, not to the one in flight. Backoff at its limits: a
 * base past the cap, a huge base, an explicit delay at the time limit. */
static void result_ttl_and_backoff_limits(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_ttl_limits", &clk);
    tocsin_worker *w = open_worker(db, "w1", 1);
    tocsin_task_opts to = TOCSIN_TASK_OPTS_INIT;
    tocsin_task_call c = TOCSIN_TASK_CALL_INIT;
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    tocsin_task_run *r;
    tocsin_job *job = NULL;
    int64_t id = 0;
    to.result_ttl_ms = -1;
    CHECK_OK(db, tocsin_worker_register(w, "t", &to));
    c.task = "t";
    CHECK_OK(db, tocsin_task_enqueue(db, &id, "tasks", &c, NULL));
    r = next_run(w, NULL);
    to.result_ttl_ms = 7000; /* registered again: for the next claims */
    CHECK_OK(db, tocsin_worker_register(w, "t", &to));
    if (r) CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    CHECK_EQ_I(t_count(db, "_tocsin_results WHERE expires_at IS NULL OR expires_at = 0"), 1);
    CHECK_OK(db, tocsin_task_enqueue(db, &id, "tasks", &c, NULL));
    if ((r = next_run(w, NULL)) != NULL) CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    CHECK_EQ_I(t_count(db, "_tocsin_results WHERE expires_at = 1007000"), 1);
    c.result_ttl_ms = 3000; /* the call's wins */
    CHECK_OK(db, tocsin_task_enqueue(db, &id, "tasks", &c, NULL));
    if ((r = next_run(w, NULL)) != NULL) CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    CHECK_EQ_I(t_count(db, "_tocsin_results WHERE expires_at = 1003000"), 1);
    /* backoff: a base over the cap is the delay; the largest base stays in time */
    to.backoff_base_ms = 5000;
    to.backoff_cap_ms = 2000;
    CHECK_OK(db, tocsin_worker_register(w, "t", &to));
    c.result_ttl_ms = 0;
    CHECK_OK(db, tocsin_task_enqueue(db, &id, "tasks", &c, NULL));
    o.kind = TOCSIN_OUTCOME_ERROR;
    o.error_type = "Flaky";
    if ((r = next_run(w, NULL)) != NULL) CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK(job && job->run_at - clk.now >= 2500 && job->run_at - clk.now <= 5000);
    tocsin_jobs_free(job, 1);
    job = NULL;
    clk.now += 5000;
    to.backoff_base_ms = TOCSIN_MAX_TIME_MS;
    to.backoff_cap_ms = TOCSIN_MAX_TIME_MS;
    CHECK_OK(db, tocsin_worker_register(w, "t", &to));
    if ((r = next_run(w, NULL)) != NULL) CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
    CHECK_OK(db, tocsin_worker_flush(w, NULL));
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK(job && strcmp(job->state, "scheduled") == 0 && job->run_at > clk.now &&
          job->run_at <= TOCSIN_MAX_TIME_MS);
    tocsin_jobs_free(job, 1);
    CHECK_OK(db, tocsin_worker_close(w));
    tocsin_close(db);
}

/* Dead workers elsewhere: a registry row of another host whose heartbeat is
 * older than its lease is reaped at the next registry read (its row deleted,
 * its leases lapsed at once: its jobs run again now, the crash an attempt);
 * one whose heartbeat is within its lease is left alone. */
static void reap_by_heartbeat(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_reap_beat", &clk);
    tocsin_worker *w;
    tocsin_job *jobs = NULL;
    tocsin_task_run *r;
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    size_t n = 0;
    int64_t stale = call(db, "add", "[1]", 3), fresh = call(db, "add", "[2]", 3);
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "tasks", "ghost", 1, 30000));
    CHECK(n == 1 && jobs[0].id == stale);
    tocsin_jobs_free(jobs, n);
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "tasks", "alive", 1, 30000));
    CHECK(n == 1 && jobs[0].id == fresh);
    tocsin_jobs_free(jobs, n);
    CHECK_OK(db, tocsin_exec(db, "INSERT INTO _tocsin_workers(id, host, pid, pid_start, queues, started_at,"
                                 " heartbeat_at, lease_ms) VALUES"
                                 " ('ghost', 'elsewhere', 1, 0, '[\"tasks\"]', 900000, 968999, 30000),"
                                 " ('alive', 'elsewhere', 1, 0, '[\"tasks\"]', 900000, 990000, 30000)"));
    w = open_worker(db, "w1", 2);
    r = next_run(w, NULL); /* the clock has not moved: only the reaping frees the job */
    CHECK(r && r->job_id == stale && r->attempt == 2);
    CHECK(next_run(w, NULL) == NULL);
    CHECK_EQ_I(t_count(db, "_tocsin_workers WHERE id = 'ghost'"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_workers WHERE id = 'alive'"), 1);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'processing' AND worker = 'alive'"), 1);
    if (r) CHECK_OK(db, tocsin_worker_finish(w, NULL, r, &o));
    CHECK_OK(db, tocsin_worker_close(w));
    tocsin_close(db);
}

typedef struct two_next_ctx {
    tocsin_worker *w;
    tocsin_task_run *runs[8];
    size_t n;
    int rc;
} two_next_ctx;

static void *two_next_thread(void *p) {
    two_next_ctx *c = p;
    tocsin_task_run **runs = NULL;
    size_t i;
    c->rc = tocsin_worker_next(c->w, &runs, &c->n, 200);
    for (i = 0; i < c->n && i < 8; i++) c->runs[i] = runs[i];
    tocsin_free(runs);
    return NULL;
}

/* tocsin_worker_next from two threads at once: they serialise on the worker,
 * and together never hand out more than concurrency runs, nor one job twice. */
static void next_from_two_threads(void) {
    t_clock clk = {1000000};
    tocsin_db *db = t_open("w_two_next", &clk);
    tocsin_worker *w = open_worker(db, "w1", 3);
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    two_next_ctx a, b;
    pthread_t ta, tb;
    size_t i, j;
    for (i = 0; i < 10; i++) call(db, "add", "[1]", 3);
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.w = b.w = w;
    CHECK(pthread_create(&ta, NULL, two_next_thread, &a) == 0);
    CHECK(pthread_create(&tb, NULL, two_next_thread, &b) == 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK_EQ_I(a.n + b.n, 3);
    CHECK_EQ_I(tocsin_worker_in_flight(w), 3);
    for (i = 0; i < a.n; i++)
        for (j = 0; j < b.n; j++) CHECK(a.runs[i]->job_id != b.runs[j]->job_id);
    for (i = 0; i < a.n; i++) CHECK_OK(db, tocsin_worker_finish(w, NULL, a.runs[i], &o));
    for (i = 0; i < b.n; i++) CHECK_OK(db, tocsin_worker_finish(w, NULL, b.runs[i], &o));
    CHECK_OK(db, tocsin_worker_close(w));
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 3);
    tocsin_close(db);
}

void suite_worker(void) {
    drain();
    task_bound_after_crash();
    reserve();
    own_transaction_no_deadlock();
    poll_never_blocks();
    failed_step_waits();
    task_backoff();
    envelope();
    hand_written_envelopes();
    bad_worker_options();
    worker_ids();
    foreign_runs_and_late_registration();
    outcomes();
    refused_outcomes();
    long_messages_cut();
    batched_outcomes_renewed();
    finish_in_transaction();
    late_results_time_out();
    task_attempts_bound();
    unknown_tasks();
    dead_worker_recovery();
    cancellation();
    cancellation_ends_next();
    scheduler_step();
    scheduler_damaged_schedule();
    poke_and_close();
    reserve_after_stall();
    restart_under_same_id();
    backoff_after_hand_backs();
    task_bound_runs_left();
    ignored_delay();
    huge_concurrency_reserve();
    finish_race();
    late_finish_after_takeover();
    no_second_run_of_a_job();
    scheduler_handover();
    unknown_task_delays();
    result_ttl_and_backoff_limits();
    reap_by_heartbeat();
    next_from_two_threads();
}
