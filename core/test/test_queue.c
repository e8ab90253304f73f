/* The job queue: ordering, leases and fencing, reclaim, dead letters, stats. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>

#include "test.h"

static int64_t enq(tocsin_db *db, const char *q, const char *payload, const tocsin_enqueue_opts *o) {
    int64_t id = -1;
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, q, payload, o));
    return id;
}

/* Claims one job (or none: returns id 0). */
static int64_t claim1(tocsin_db *db, const char *q, const char *w, int64_t vis, int64_t *token) {
    tocsin_job *jobs = NULL;
    size_t n = 0;
    int64_t id = 0;
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, q, w, 1, vis));
    if (n == 1) {
        id = jobs[0].id;
        if (token) *token = jobs[0].token;
    }
    tocsin_jobs_free(jobs, n);
    return id;
}

static void enqueue_and_get(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("q_enqueue", &clk);
    tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
    tocsin_job *job = NULL;
    int64_t id;
    o.priority = 7;
    o.delay_ms = 500;
    o.max_attempts = 5;
    o.expires_ms = 10000;
    o.meta = "{\"trace\":\"abc\"}";
    id = enq(db, "mail", "{\"to\":\"x@y\"}", &o);
    CHECK(id > 0);
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK(job != NULL);
    if (job) {
        CHECK_STR(job->queue, "mail");
        CHECK_STR(job->state, "scheduled"); /* run_at is 500 ms ahead */
        CHECK_STR(job->payload, "{\"to\":\"x@y\"}");
        CHECK_STR(job->meta, "{\"trace\":\"abc\"}");
        CHECK_EQ_I(job->priority, 7);
        CHECK_EQ_I(job->attempts, 0);
        CHECK_EQ_I(job->max_attempts, 5);
        CHECK_EQ_I(job->run_at, 1500);
        CHECK_EQ_I(job->created_at, 1000);
        CHECK_EQ_I(job->expires_at, 11000);
        CHECK_EQ_I(job->lease_until, 0);
        CHECK(job->unique_key == NULL && job->worker == NULL && job->reason == NULL);
    }
    tocsin_jobs_free(job, 1);
    /* defaults */
    id = enq(db, "mail", "[1]", NULL);
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK_EQ_I(job->max_attempts, TOCSIN_DEFAULT_MAX_ATTEMPTS);
    CHECK_EQ_I(job->run_at, 1000);
    CHECK(job->meta == NULL);
    tocsin_jobs_free(job, 1);
    /* unknown id */
    CHECK_OK(db, tocsin_job_get(db, &job, 999));
    CHECK(job == NULL);
    /* run_at absolute */
    o = (tocsin_enqueue_opts)TOCSIN_ENQUEUE_OPTS_INIT;
    o.run_at_ms = 99999;
    id = enq(db, "mail", "1", &o);
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK_EQ_I(job->run_at, 99999);
    tocsin_jobs_free(job, 1);
    tocsin_close(db);
}

static void invalid_arguments(void) {
    tocsin_db *db = t_open("q_invalid", NULL);
    tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
    tocsin_job *jobs = NULL;
    tocsin_job_spec specs[3];
    size_t n = 0, acked = 0;
    int64_t id = 0, ids[3], ms = 0;
    int ok = 0;
    char *json = NULL;
    const char *qs[1] = {""};

    CHECK_EQ_I(tocsin_queue_enqueue(NULL, &id, "q", "{}", NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_queue_enqueue(db, NULL, "q", "{}", NULL), TOCSIN_INVALID);
    o.delay_ms = -1;
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", &o), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "delay_ms") != NULL);
    o = (tocsin_enqueue_opts)TOCSIN_ENQUEUE_OPTS_INIT;
    o.max_attempts = -3;
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", &o), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "max_attempts") != NULL);
    o = (tocsin_enqueue_opts)TOCSIN_ENQUEUE_OPTS_INIT;
    o.delay_ms = 5;
    o.run_at_ms = 5;
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", &o), TOCSIN_INVALID);
    o = (tocsin_enqueue_opts)TOCSIN_ENQUEUE_OPTS_INIT;
    o.expires_ms = -1;
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", &o), TOCSIN_INVALID);
    o = (tocsin_enqueue_opts)TOCSIN_ENQUEUE_OPTS_INIT;
    o.unique_key = "";
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", &o), TOCSIN_INVALID);
    o = (tocsin_enqueue_opts)TOCSIN_ENQUEUE_OPTS_INIT;
    o.meta = "[1,2]";
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", &o), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "meta must be a JSON object") != NULL);
    o.meta = "{nope";
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", &o), TOCSIN_INVALID);
    o = (tocsin_enqueue_opts)TOCSIN_ENQUEUE_OPTS_INIT;
    o.version = 0;
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", &o), TOCSIN_INVALID);
    o.version = 99;
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", &o), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "enqueue options: version 99 is newer") != NULL);

    /* an empty batch is no error and needs no arrays; a non-empty one does */
    CHECK_OK(db, tocsin_queue_enqueue_many(db, NULL, NULL, 0));
    CHECK_EQ_I(tocsin_queue_enqueue_many(db, NULL, specs, 1), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_queue_enqueue_many(db, ids, NULL, 1), TOCSIN_INVALID);

    /* enqueue_many is all or nothing, and names the bad job */
    specs[0].queue = "q"; specs[0].payload = "{}"; specs[0].opts = NULL;
    specs[1].queue = "q"; specs[1].payload = "{\"ok\":true}"; specs[1].opts = NULL;
    specs[2].queue = "q"; specs[2].payload = "{oops"; specs[2].opts = NULL;
    CHECK_EQ_I(tocsin_queue_enqueue_many(db, ids, specs, 3), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "job 2") != NULL);

    CHECK_EQ_I(tocsin_queue_claim(db, &jobs, &n, "", "w", 1, 1000), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_queue_claim(db, &jobs, &n, "q", "", 1, 1000), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "worker id") != NULL);
    CHECK_EQ_I(tocsin_queue_claim(db, &jobs, &n, "q", "w", 0, 1000), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_queue_claim(db, &jobs, &n, "q", "w", 1, 0), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "visibility_ms") != NULL);
    CHECK_EQ_I(tocsin_queue_claim(db, NULL, &n, "q", "w", 1, 10), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_job_ack(db, NULL, 1, 1), TOCSIN_OK); /* out_ok may be NULL for ack */
    CHECK_EQ_I(tocsin_job_ack_batch(db, NULL, NULL, NULL, 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_job_ack_batch(db, &acked, NULL, NULL, 2), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_job_retry(db, NULL, 1, 1, 0, NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_job_fail(db, NULL, 1, 1, NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_job_heartbeat(db, &ok, 1, 1, 0), TOCSIN_INVALID);
    CHECK(strstr(tocsin_errmsg(db), "extend_ms") != NULL);
    CHECK_EQ_I(tocsin_job_cancel(db, NULL, 1), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_job_get(db, NULL, 1), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_queue_pause(db, ""), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_queue_resume(db, NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_queue_is_paused(db, &ok, ""), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_queue_stats(db, NULL, "q"), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_queue_stats(db, &json, ""), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_queue_next_deadline(db, &ms, qs, 1), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_queue_next_deadline(db, &ms, NULL, 1), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_dead_list(db, &jobs, &n, "q", 0, 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_dead_list(db, &jobs, &n, "", 0, 10), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_dead_requeue(db, NULL, 1), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_dead_purge(db, &id, "q", -1), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_dead_purge(db, NULL, "q", 0), TOCSIN_INVALID);
    /* nothing was written by any of it */
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_dead"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_queues"), 0);
    tocsin_close(db);
}

static void claim_order(void) {
    t_clock clk = {10000};
    tocsin_db *db = t_open("q_order", &clk);
    tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
    tocsin_job *jobs = NULL;
    size_t n = 0;
    int64_t a, b, c, d, e;
    a = enq(db, "q", "\"a\"", NULL);              /* prio 0, run_at 10000 */
    o.priority = 10;
    b = enq(db, "q", "\"b\"", &o);                /* prio 10 */
    o.priority = 0;
    o.run_at_ms = 9000;
    c = enq(db, "q", "\"c\"", &o);                /* prio 0, earlier run_at */
    o.run_at_ms = 0;
    o.delay_ms = 5000;
    d = enq(db, "q", "\"d\"", &o);                /* not due yet */
    e = enq(db, "other", "\"e\"", NULL);          /* other queue */
    (void)e;
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "q", "w1", 10, 30000));
    CHECK_EQ_I(n, 3);
    if (n == 3) {
        CHECK_EQ_I(jobs[0].id, b);
        CHECK_EQ_I(jobs[1].id, c);
        CHECK_EQ_I(jobs[2].id, a);
        CHECK_STR(jobs[0].state, "processing");
        CHECK_STR(jobs[0].worker, "w1");
        CHECK_EQ_I(jobs[0].attempts, 1);
        CHECK_EQ_I(jobs[0].token, b * 1048576 + 1);
        CHECK_EQ_I(jobs[0].lease_until, 40000);
    }
    tocsin_jobs_free(jobs, n);
    /* the delayed job becomes claimable when the clock reaches its run_at */
    CHECK_EQ_I(claim1(db, "q", "w1", 1000, NULL), 0);
    clk.now = 14999;
    CHECK_EQ_I(claim1(db, "q", "w1", 1000, NULL), 0);
    clk.now = 15000;
    CHECK_EQ_I(claim1(db, "q", "w1", 1000, NULL), d);
    tocsin_close(db);
}

static void unique_keys(void) {
    t_clock clk = {1};
    tocsin_db *db = t_open("q_unique", &clk);
    tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
    int64_t a, b, c, tok = 0;
    int ok = 0;
    o.unique_key = "user:42";
    a = enq(db, "q", "{\"n\":1}", &o);
    b = enq(db, "q", "{\"n\":2}", &o);
    CHECK_EQ_I(a, b);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 1);
    c = enq(db, "other", "{\"n\":3}", &o); /* per queue */
    CHECK(c != a);
    /* still deduped while processing; free again once acked */
    CHECK_EQ_I(claim1(db, "q", "w", 1000, &tok), a);
    CHECK_EQ_I(enq(db, "q", "{}", &o), a);
    CHECK_OK(db, tocsin_job_ack(db, &ok, a, tok));
    CHECK_EQ_I(ok, 1);
    b = enq(db, "q", "{\"n\":4}", &o);
    CHECK(b != a && b > 0);
    tocsin_close(db);
}

/* A job that expired unclaimed is dead at the next claim: an enqueue of its
 * unique key is not folded into it (it would die with it, never run). The
 * holder goes to the dead letters as 'expired', as a claim would move it, and
 * the new job is written. A leased job past its expires_at still holds it. */
static void unique_key_of_expired_job(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("q_unique_expired", &clk);
    tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT, plain = TOCSIN_ENQUEUE_OPTS_INIT;
    tocsin_job *dead = NULL;
    int64_t a, b, c, tok = 0;
    o.unique_key = plain.unique_key = "k";
    o.expires_ms = 10;
    a = enq(db, "q", "1", &o);
    clk.now = 1100;
    b = enq(db, "q", "2", &plain);
    CHECK(b > a);
    CHECK_EQ_I(enq(db, "q", "3", &plain), b); /* the new one holds it now */
    CHECK_OK(db, tocsin_job_get(db, &dead, a));
    CHECK(dead && strcmp(dead->state, "dead") == 0 && dead->reason && strcmp(dead->reason, "expired") == 0);
    tocsin_jobs_free(dead, dead ? 1 : 0);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 1);
    /* leased, past its expiry: still the holder */
    c = enq(db, "r", "1", &o);
    CHECK_EQ_I(claim1(db, "r", "w", 60000, &tok), c);
    clk.now = 2000;
    CHECK_EQ_I(enq(db, "r", "2", &plain), c);
    tocsin_close(db);
}

static void fencing(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("q_fencing", &clk);
    int64_t id, t1 = 0, t2 = 0;
    int ok = -1;
    tocsin_job *job = NULL;
    id = enq(db, "q", "{}", NULL);
    CHECK_EQ_I(claim1(db, "q", "w1", 1000, &t1), id);
    CHECK_EQ_I(t1, id * 1048576 + 1);
    /* the lease lapses and another worker reclaims: w1's token is stale */
    clk.now = 2500;
    CHECK_EQ_I(claim1(db, "q", "w2", 1000, &t2), id);
    CHECK_EQ_I(t2, id * 1048576 + 2);
    CHECK_OK(db, tocsin_job_ack(db, &ok, id, t1));
    CHECK_EQ_I(ok, 0);
    CHECK_OK(db, tocsin_job_retry(db, &ok, id, t1, 0, "stale"));
    CHECK_EQ_I(ok, 0);
    CHECK_OK(db, tocsin_job_fail(db, &ok, id, t1, "stale"));
    CHECK_EQ_I(ok, 0);
    CHECK_OK(db, tocsin_job_heartbeat(db, &ok, id, t1, 5000));
    CHECK_EQ_I(ok, 0);
    /* nothing changed for the holder */
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK_STR(job->state, "processing");
    CHECK_STR(job->worker, "w2");
    CHECK_EQ_I(job->lease_until, 3500);
    CHECK_STR(job->last_error, "lease expired");
    tocsin_jobs_free(job, 1);
    /* the holder's heartbeat extends the lease past the old deadline */
    CHECK_OK(db, tocsin_job_heartbeat(db, &ok, id, t2, 5000));
    CHECK_EQ_I(ok, 1);
    clk.now = 4000;
    CHECK_EQ_I(claim1(db, "q", "w3", 1000, NULL), 0);
    CHECK_OK(db, tocsin_job_ack(db, &ok, id, t2));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_job_ack(db, &ok, id, t2)); /* twice: gone */
    CHECK_EQ_I(ok, 0);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 0);

    /* a late ack whose lease lapsed but that nobody reclaimed still holds */
    id = enq(db, "q", "{}", NULL);
    CHECK_EQ_I(claim1(db, "q", "w1", 100, &t1), id);
    clk.now += 10000;
    CHECK_OK(db, tocsin_job_ack(db, &ok, id, t1));
    CHECK_EQ_I(ok, 1);
    tocsin_close(db);
}

static void reclaim_to_dead(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("q_reclaim", &clk);
    tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
    tocsin_job *job = NULL;
    int64_t id;
    o.max_attempts = 2;
    id = enq(db, "q", "{}", &o);
    CHECK_EQ_I(claim1(db, "q", "w1", 100, NULL), id);  /* attempt 1 lapses */
    clk.now += 200;
    CHECK_EQ_I(claim1(db, "q", "w2", 100, NULL), id);  /* attempt 2 lapses */
    clk.now += 200;
    CHECK_EQ_I(claim1(db, "q", "w3", 100, NULL), 0);   /* exhausted: dead */
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK_STR(job->state, "dead");
    CHECK_STR(job->reason, "max_attempts");
    CHECK_EQ_I(job->attempts, 2);
    CHECK_STR(job->last_error, "lease expired");
    CHECK_EQ_I(job->died_at, clk.now);
    tocsin_jobs_free(job, 1);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'processing'"), 0);
    tocsin_close(db);
}

static void retry_fail_cancel(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("q_retry", &clk);
    tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
    tocsin_job *job = NULL;
    int64_t id, tok = 0, d;
    int ok = 0, i;
    o.max_attempts = 2;
    id = enq(db, "q", "{}", &o);
    CHECK_EQ_I(claim1(db, "q", "w", 1000, &tok), id);
    CHECK_OK(db, tocsin_job_retry(db, &ok, id, tok, 300, "flaky"));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK_STR(job->state, "scheduled");
    CHECK_EQ_I(job->run_at, 1300);
    CHECK_STR(job->last_error, "flaky");
    CHECK_EQ_I(job->lease_until, 0);
    tocsin_jobs_free(job, 1);
    CHECK_EQ_I(claim1(db, "q", "w", 1000, NULL), 0);
    clk.now = 1300;
    CHECK_EQ_I(claim1(db, "q", "w", 1000, &tok), id);
    /* the last attempt's retry sends it to the dead letters */
    CHECK_OK(db, tocsin_job_retry(db, &ok, id, tok, 0, "still flaky"));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK_STR(job->state, "dead");
    CHECK_STR(job->reason, "max_attempts");
    CHECK_STR(job->last_error, "still flaky");
    tocsin_jobs_free(job, 1);

    /* backoff: exponential, capped, with jitter in the upper half */
    for (i = 0; i < 50; i++) {
        d = tocsin_backoff_ms(1000, 60000, 1);
        CHECK(d >= 500 && d <= 1000);
        d = tocsin_backoff_ms(1000, 60000, 4);
        CHECK(d >= 4000 && d <= 8000);
        d = tocsin_backoff_ms(1000, 60000, 40);
        CHECK(d >= 30000 && d <= 60000);
    }
    id = enq(db, "q", "{}", NULL);
    CHECK_EQ_I(claim1(db, "q", "w", 1000, &tok), id);
    CHECK_OK(db, tocsin_job_retry(db, &ok, id, tok, -1, NULL));
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK(job->run_at >= clk.now + TOCSIN_BACKOFF_BASE_MS / 2 && job->run_at <= clk.now + TOCSIN_BACKOFF_BASE_MS);
    tocsin_jobs_free(job, 1);

    /* fail: dead now, with the error */
    clk.now += 5000;
    CHECK_EQ_I(claim1(db, "q", "w", 1000, &tok), id);
    CHECK_OK(db, tocsin_job_fail(db, &ok, id, tok, "bad input"));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK_STR(job->reason, "failed");
    CHECK_STR(job->last_error, "bad input");
    tocsin_jobs_free(job, 1);

    /* cancel: pending or processing; the holder then loses the job */
    id = enq(db, "q", "{}", NULL);
    CHECK_OK(db, tocsin_job_cancel(db, &ok, id));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_job_cancel(db, &ok, id));
    CHECK_EQ_I(ok, 0);
    CHECK_OK(db, tocsin_job_cancel(db, &ok, 12345));
    CHECK_EQ_I(ok, 0);
    id = enq(db, "q", "{}", NULL);
    CHECK_EQ_I(claim1(db, "q", "w", 1000, &tok), id);
    CHECK_OK(db, tocsin_job_cancel(db, &ok, id));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_job_ack(db, &ok, id, tok));
    CHECK_EQ_I(ok, 0);
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK_STR(job->reason, "cancelled");
    tocsin_jobs_free(job, 1);
    tocsin_close(db);
}

static void expiry(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("q_expiry", &clk);
    tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
    tocsin_job *job = NULL;
    int64_t id, keep;
    o.expires_ms = 100;
    id = enq(db, "q", "{}", &o);
    keep = enq(db, "q", "{}", NULL);
    clk.now = 1100;
    CHECK_EQ_I(claim1(db, "q", "w", 1000, NULL), keep);
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK_STR(job->state, "dead");
    CHECK_STR(job->reason, "expired");
    tocsin_jobs_free(job, 1);
    job = NULL;
    /* A lapsed lease reclaimed past the job's expiry: pending again, so it
     * expires in that same claim (alone in its queue: no other expired job
     * makes the claim look for expired ones). */
    o.expires_ms = 100;
    id = enq(db, "lapsed", "{}", &o);
    CHECK_EQ_I(claim1(db, "lapsed", "w", 10, NULL), id);
    clk.now = 1300;
    CHECK_EQ_I(claim1(db, "lapsed", "w", 10, NULL), 0);
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK(job && strcmp(job->state, "dead") == 0 && strcmp(job->reason, "expired") == 0);
    CHECK(job && job->last_error && strcmp(job->last_error, "lease expired") == 0);
    tocsin_jobs_free(job, 1);
    tocsin_close(db);
}

static void pause_stats_deadline(void) {
    t_clock clk = {100000};
    tocsin_db *db = t_open("q_stats", &clk);
    tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
    const char *qs[2] = {"q", "other"};
    char *json = NULL;
    int64_t ms = 0, id, tok;
    int paused = -1, ok;
    CHECK_OK(db, tocsin_queue_next_deadline(db, &ms, qs, 2));
    CHECK_EQ_I(ms, -1);
    o.delay_ms = 5000;
    enq(db, "q", "{}", &o);
    o.priority = 9;
    o.delay_ms = 7000;
    enq(db, "q", "{}", &o);
    CHECK_OK(db, tocsin_queue_next_deadline(db, &ms, qs, 2));
    CHECK_EQ_I(ms, 105000);
    clk.now = 100500;
    id = enq(db, "q", "{}", NULL);
    CHECK_OK(db, tocsin_queue_next_deadline(db, &ms, qs, 2));
    CHECK_EQ_I(ms, 100500);
    clk.now = 101000;
    CHECK_EQ_I(claim1(db, "q", "w", 2000, &tok), id);
    CHECK_OK(db, tocsin_queue_next_deadline(db, &ms, qs, 1));
    CHECK_EQ_I(ms, 103000); /* the lease lapses before the delayed jobs */
    CHECK_OK(db, tocsin_queue_stats(db, &json, "q"));
    CHECK_STR(json, "{\"queue\":\"q\",\"pending\":0,\"scheduled\":2,\"processing\":1,\"dead\":0,"
                    "\"oldest_pending_age_ms\":0,\"paused\":false}");
    tocsin_free(json);
    enq(db, "other", "{}", NULL);
    clk.now = 101250;
    CHECK_OK(db, tocsin_queue_stats(db, &json, "other"));
    CHECK(strstr(json, "\"pending\":1") && strstr(json, "\"oldest_pending_age_ms\":250"));
    tocsin_free(json);
    CHECK_OK(db, tocsin_queue_stats(db, &json, NULL));
    CHECK(strncmp(json, "{\"queues\":[{\"queue\":\"other\"", 27) == 0);
    CHECK(strstr(json, "{\"queue\":\"q\"") != NULL);
    tocsin_free(json);

    /* pause: no jobs handed out, enqueue still works; resume */
    CHECK_OK(db, tocsin_queue_pause(db, "other"));
    CHECK_OK(db, tocsin_queue_is_paused(db, &paused, "other"));
    CHECK_EQ_I(paused, 1);
    CHECK_EQ_I(claim1(db, "other", "w", 1000, NULL), 0);
    enq(db, "other", "{}", NULL);
    CHECK_OK(db, tocsin_queue_stats(db, &json, "other"));
    CHECK(strstr(json, "\"pending\":2") && strstr(json, "\"paused\":true"));
    tocsin_free(json);
    CHECK_OK(db, tocsin_queue_resume(db, "other"));
    CHECK_OK(db, tocsin_queue_is_paused(db, &paused, "other"));
    CHECK_EQ_I(paused, 0);
    CHECK(claim1(db, "other", "w", 1000, NULL) > 0);
    CHECK_OK(db, tocsin_job_ack(db, &ok, id, tok));
    CHECK_OK(db, tocsin_queue_is_paused(db, &paused, "never-seen"));
    CHECK_EQ_I(paused, 0);
    tocsin_close(db);
}

static void batches_and_dead_letters(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("q_batch", &clk);
    tocsin_job_spec specs[50];
    int64_t ids[50], toks[50], purged = 0, tok3;
    tocsin_job *jobs = NULL, *job = NULL;
    tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
    size_t n = 0, acked = 0, i;
    int ok = 0;
    for (i = 0; i < 50; i++) {
        specs[i].queue = "bulk";
        specs[i].payload = "{\"i\":1}";
        specs[i].opts = NULL;
    }
    CHECK_OK(db, tocsin_queue_enqueue_many(db, ids, specs, 50));
    CHECK(ids[49] > ids[0]);
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "bulk", "w", 100, 1000));
    CHECK_EQ_I(n, 50);
    for (i = 0; i < n; i++) {
        ids[i] = jobs[i].id;
        toks[i] = jobs[i].token;
    }
    tok3 = toks[3];
    toks[3] = tok3 + 1; /* one stale token */
    tocsin_jobs_free(jobs, n);
    CHECK_OK(db, tocsin_job_ack_batch(db, &acked, ids, toks, 50));
    CHECK_EQ_I(acked, 49);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 1);

    /* dead letters: list, requeue (same id, a fresh budget of claims), purge */
    CHECK_OK(db, tocsin_job_fail(db, &ok, ids[3], tok3, "x"));
    CHECK_EQ_I(ok, 1);
    o.max_attempts = 1;
    for (i = 0; i < 3; i++) {
        int64_t id = 0, tok = 0;
        CHECK_OK(db, tocsin_queue_enqueue(db, &id, i == 2 ? "other" : "bulk", "{}", &o));
        CHECK_EQ_I(claim1(db, i == 2 ? "other" : "bulk", "w", 1000, &tok), id);
        CHECK_OK(db, tocsin_job_fail(db, &ok, id, tok, "boom"));
    }
    CHECK_OK(db, tocsin_dead_list(db, &jobs, &n, "bulk", 0, 10));
    CHECK_EQ_I(n, 3);
    CHECK_EQ_I(jobs[0].id, ids[3]);
    CHECK_STR(jobs[0].state, "dead");
    {
        int64_t second = n > 1 ? jobs[1].id : 0;
        tocsin_jobs_free(jobs, n);
        CHECK_OK(db, tocsin_dead_list(db, &jobs, &n, "bulk", ids[3], 10));
        CHECK_EQ_I(n, 2);
        CHECK_EQ_I(jobs[0].id, second);
        tocsin_jobs_free(jobs, n);
    }
    CHECK_OK(db, tocsin_dead_list(db, &jobs, &n, NULL, 0, 10));
    CHECK_EQ_I(n, 4);
    tocsin_jobs_free(jobs, n);
    CHECK_OK(db, tocsin_dead_requeue(db, &ok, ids[3]));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_dead_requeue(db, &ok, ids[3]));
    CHECK_EQ_I(ok, 0);
    CHECK_OK(db, tocsin_job_get(db, &job, ids[3]));
    CHECK_STR(job->state, "pending");
    /* a fresh budget of 3 claims; the count goes on (1 of 4) */
    CHECK_EQ_I(job->attempts, 1);
    CHECK_EQ_I(job->max_attempts, 4);
    tocsin_jobs_free(job, 1);
    {
        /* the next claim's token is not the one the job died with: its stale
         * holder's lease operations write nothing */
        int64_t tok = 0;
        char sql[160];
        CHECK_EQ_I(claim1(db, "bulk", "w2", 1000, &tok), ids[3]);
        CHECK(tok != tok3);
        CHECK_OK(db, tocsin_job_ack(db, &ok, ids[3], tok3));
        CHECK_EQ_I(ok, 0);
        CHECK_OK(db, tocsin_job_heartbeat(db, &ok, ids[3], tok3, 1000));
        CHECK_EQ_I(ok, 0);
        CHECK_OK(db, tocsin_job_fail(db, &ok, ids[3], tok, "again"));
        CHECK_EQ_I(ok, 1);
        /* the budget stops at TOCSIN_MAX_ATTEMPTS; a job that spent all of it
         * has no token left and is refused, written nowhere */
        snprintf(sql, sizeof sql,
                 "UPDATE _tocsin_dead SET attempts = 999999, max_attempts = 1000000 WHERE id = %lld",
                 (long long)ids[3]);
        CHECK_EQ_I(sqlite3_exec(tocsin_sqlite(db), sql, NULL, NULL, NULL), SQLITE_OK);
        CHECK_OK(db, tocsin_dead_requeue(db, &ok, ids[3]));
        CHECK_OK(db, tocsin_job_get(db, &job, ids[3]));
        CHECK_EQ_I(job->attempts, 999999);
        CHECK_EQ_I(job->max_attempts, 1000000);
        tocsin_jobs_free(job, 1);
        CHECK_OK(db, tocsin_job_cancel(db, &ok, ids[3]));
        snprintf(sql, sizeof sql, "UPDATE _tocsin_dead SET attempts = 1000000 WHERE id = %lld",
                 (long long)ids[3]);
        CHECK_EQ_I(sqlite3_exec(tocsin_sqlite(db), sql, NULL, NULL, NULL), SQLITE_OK);
        ok = 7;
        CHECK_EQ_I(tocsin_dead_requeue(db, &ok, ids[3]), TOCSIN_FULL);
        CHECK_EQ_I(ok, 0);
        CHECK(strstr(tocsin_errmsg(db), "spent all 1000000 claims") != NULL);
        CHECK_OK(db, tocsin_job_get(db, &job, ids[3]));
        CHECK_STR(job->state, "dead");
        CHECK_EQ_I(job->attempts, 1000000);
        tocsin_jobs_free(job, 1);
    }
    clk.now = 5000;
    CHECK_OK(db, tocsin_dead_purge(db, &purged, "bulk", 0));
    CHECK_EQ_I(purged, 3);
    CHECK_OK(db, tocsin_dead_requeue(db, &ok, ids[3]));
    CHECK_EQ_I(ok, 0);
    CHECK_OK(db, tocsin_dead_purge(db, &purged, NULL, 1000));
    CHECK_EQ_I(purged, 0);
    CHECK_OK(db, tocsin_dead_purge(db, &purged, NULL, 5001));
    CHECK_EQ_I(purged, 1);
    CHECK_EQ_I(t_count(db, "_tocsin_dead"), 0);
    tocsin_close(db);
}

void suite_queue(void) {
    unique_key_of_expired_job();
    enqueue_and_get();
    invalid_arguments();
    claim_order();
    unique_keys();
    fencing();
    reclaim_to_dead();
    retry_fail_cancel();
    expiry();
    pause_stats_deadline();
    batches_and_dead_letters();
}
