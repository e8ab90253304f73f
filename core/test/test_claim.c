/*
 * Claim order across job states (scheduled, pending, processing), the
 * bounded promotion of due scheduled jobs, and the queue's hardening against
 * hostile values (issue 8): times never wrap, texts are validated, tokens name
 * one job, the stored schema version is read exactly. Time comes from the
 * injectable clock; nothing sleeps.
 */
#include <limits.h>
#include <sqlite3.h>
#include <stdlib.h>

#include "test.h"

#define TOKEN_SHIFT 1048576 /* tokens are id * 2^20 + attempts */

static int64_t enq_at(tocsin_db *db, const char *q, int64_t prio, int64_t delay, int64_t run_at) {
    tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
    int64_t id = -1;
    o.priority = prio;
    o.delay_ms = delay;
    o.run_at_ms = run_at;
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, q, "{}", &o));
    return id;
}

/* Claims up to n jobs, copying their ids (and tokens) in claim order; returns the count. */
static size_t claim_ids(tocsin_db *db, const char *q, size_t n, int64_t *ids, int64_t *tokens) {
    tocsin_job *jobs = NULL;
    size_t got = 0, i;
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &got, q, "w", n, 60000));
    for (i = 0; i < got; i++) {
        if (ids) ids[i] = jobs[i].id;
        if (tokens) tokens[i] = jobs[i].token;
    }
    tocsin_jobs_free(jobs, got);
    return got;
}

static int64_t claim_one(tocsin_db *db, const char *q, int64_t *token) {
    int64_t id = 0;
    return claim_ids(db, q, 1, &id, token) == 1 ? id : 0;
}

static const char *state_of(tocsin_db *db, int64_t id, char *buf, size_t cap) {
    tocsin_job *job = NULL;
    snprintf(buf, cap, "(none)");
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    if (job) snprintf(buf, cap, "%s", job->state);
    tocsin_jobs_free(job, job ? 1 : 0);
    return buf;
}

/* Priority DESC, then run_at, then id, whatever state each job waited in. */
static void order_across_states(void) {
    t_clock clk = {10000};
    tocsin_db *db = t_open("c_order", &clk);
    int64_t ids[16], p0a, s5, p1, s9, s0, p0b, p0c, s0tie, got;
    char st[32];
    p0a = enq_at(db, "q", 0, 0, 0);        /* pending, run_at 10000 */
    s5 = enq_at(db, "q", 5, 1000, 0);      /* scheduled for 11000, higher priority */
    p1 = enq_at(db, "q", 1, 0, 0);         /* pending, priority 1 */
    s9 = enq_at(db, "q", 9, 50000, 0);     /* scheduled far ahead, highest priority */
    s0 = enq_at(db, "q", 0, 500, 0);       /* scheduled for 10500 */
    p0b = enq_at(db, "q", 0, 0, 9000);     /* run_at in the past: pending, earliest */
    s0tie = enq_at(db, "q", 0, 0, 10500);  /* scheduled for 10500 like s0, later id */
    CHECK_STR(state_of(db, s5, st, sizeof st), "scheduled");
    CHECK_STR(state_of(db, p0b, st, sizeof st), "pending");
    /* now: only the pending jobs, highest priority first; s9 and s5 do not block */
    CHECK_EQ_I(claim_one(db, "q", NULL), p1);
    /* s0 and s0tie become due; a job enqueued now with the same run_at sorts by id */
    clk.now = 10500;
    CHECK_STR(state_of(db, s0, st, sizeof st), "pending"); /* due, not yet promoted */
    p0c = enq_at(db, "q", 0, 0, 10500);
    /* s5 becomes due: it overtakes every pending priority-0 job */
    clk.now = 11000;
    got = (int64_t)claim_ids(db, "q", 16, ids, NULL);
    CHECK_EQ_I(got, 6);
    if (got == 6) {
        CHECK_EQ_I(ids[0], s5);
        CHECK_EQ_I(ids[1], p0b);  /* 9000 */
        CHECK_EQ_I(ids[2], p0a);  /* 10000 */
        CHECK_EQ_I(ids[3], s0);   /* 10500, id order among equal run_at ... */
        CHECK_EQ_I(ids[4], s0tie);
        CHECK_EQ_I(ids[5], p0c);  /* ... whichever state each waited in */
    }
    CHECK_EQ_I(claim_one(db, "q", NULL), 0);
    clk.now = 60000;
    CHECK_EQ_I(claim_one(db, "q", NULL), s9);
    tocsin_close(db);
}

/* A delayed high-priority job that becomes due is claimed before the
 * lower-priority jobs that were pending all along, one claim at a time. */
static void delayed_overtakes_pending(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("c_overtake", &clk);
    int64_t low[5], hi, mid, i;
    for (i = 0; i < 5; i++) low[i] = enq_at(db, "q", 0, 0, 0);
    hi = enq_at(db, "q", 7, 2000, 0);
    mid = enq_at(db, "q", 3, 1000, 0);
    CHECK_EQ_I(claim_one(db, "q", NULL), low[0]);
    clk.now = 2000; /* mid due */
    CHECK_EQ_I(claim_one(db, "q", NULL), mid);
    CHECK_EQ_I(claim_one(db, "q", NULL), low[1]);
    clk.now = 3000; /* hi due */
    CHECK_EQ_I(claim_one(db, "q", NULL), hi);
    for (i = 2; i < 5; i++) CHECK_EQ_I(claim_one(db, "q", NULL), low[i]);
    tocsin_close(db);
}

/* Retries wait out their delay as scheduled jobs, then compete in claim order
 * (their run_at is the retry time + delay); a lapsed lease is claimable at
 * once with its original run_at. */
static void retries_and_reclaims_in_order(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("c_retry", &clk);
    int64_t a, b, c, ids[8], tok = 0, n;
    int ok = 0;
    char st[32];
    a = enq_at(db, "q", 2, 0, 0);
    b = enq_at(db, "q", 2, 0, 0);
    c = enq_at(db, "q", 1, 0, 0);
    CHECK_EQ_I(claim_one(db, "q", &tok), a);
    CHECK_OK(db, tocsin_job_retry(db, &ok, a, tok, 500, "later"));
    CHECK_EQ_I(ok, 1);
    CHECK_STR(state_of(db, a, st, sizeof st), "scheduled");
    CHECK_EQ_I(claim_one(db, "q", &tok), b); /* a waits, b leads */
    CHECK_OK(db, tocsin_job_retry(db, &ok, b, tok, 0, "now"));
    CHECK_STR(state_of(db, b, st, sizeof st), "pending"); /* delay 0: claimable at once */
    clk.now = 1500;
    n = (int64_t)claim_ids(db, "q", 8, ids, NULL);
    CHECK_EQ_I(n, 3);
    if (n == 3) {
        CHECK_EQ_I(ids[0], b); /* priority 2, run_at 1000 */
        CHECK_EQ_I(ids[1], a); /* priority 2, run_at 1500 */
        CHECK_EQ_I(ids[2], c); /* priority 1 */
    }
    /* all three lapse (60 s leases); the reclaim keeps the claim order */
    clk.now = 70000;
    n = (int64_t)claim_ids(db, "q", 8, ids, NULL);
    CHECK_EQ_I(n, 3);
    if (n == 3) {
        CHECK_EQ_I(ids[0], b);
        CHECK_EQ_I(ids[1], a);
        CHECK_EQ_I(ids[2], c);
    }
    tocsin_close(db);
}

/* More jobs become due at once than one claim promotes: the promotion is
 * bounded, and the claim order stays exact while the burst drains. */
static void burst_of_due_jobs(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("c_burst", &clk);
    tocsin_job_spec specs[1500];
    tocsin_enqueue_opts o[1500];
    int64_t *ids = malloc(sizeof(int64_t) * 1500), hi, got[4], total = 0;
    char *json = NULL;
    int i;
    for (i = 0; i < 1500; i++) {
        o[i] = (tocsin_enqueue_opts)TOCSIN_ENQUEUE_OPTS_INIT;
        o[i].run_at_ms = 2000 + i; /* due one after the other */
        specs[i].queue = "q";
        specs[i].payload = "{}";
        specs[i].opts = &o[i];
    }
    CHECK_OK(db, tocsin_queue_enqueue_many(db, ids, specs, 1500));
    hi = enq_at(db, "q", 9, 0, 5000); /* the latest run_at, the highest priority */
    clk.now = 10000;                  /* everything is due */
    CHECK_OK(db, tocsin_queue_stats(db, &json, "q"));
    CHECK(strstr(json, "\"pending\":1501,\"scheduled\":0") != NULL);
    tocsin_free(json);
    CHECK_EQ_I(claim_ids(db, "q", 2, got, NULL), 2);
    CHECK_EQ_I(got[0], hi);
    CHECK_EQ_I(got[1], ids[0]);
    /* bounded: part of the burst is still waiting to be promoted */
    CHECK(t_count(db, "_tocsin_jobs WHERE state = 'scheduled'") > 0);
    CHECK_OK(db, tocsin_queue_stats(db, &json, "q"));
    CHECK(strstr(json, "\"pending\":1499,\"scheduled\":0,\"processing\":2") != NULL);
    CHECK(strstr(json, "\"oldest_pending_age_ms\":7999") != NULL);
    tocsin_free(json);
    /* drains in run_at order */
    for (i = 1; i < 1500; i++) {
        int64_t id = claim_one(db, "q", NULL);
        if (id != ids[i]) {
            CHECK_EQ_I(id, ids[i]);
            break;
        }
        total++;
    }
    CHECK_EQ_I(total, 1499);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state <> 'processing'"), 0);
    free(ids);
    tocsin_close(db);
}

/* Scheduled jobs expire too (expiry means "not claimed by then"); stats,
 * next_deadline and job reads see the states as a claim would. */
static void scheduled_stats_deadline_expiry(void) {
    t_clock clk = {100000};
    tocsin_db *db = t_open("c_stats", &clk);
    tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
    const char *qs[1] = {"q"};
    int64_t ms = 0, doomed, later, now_job;
    char *json = NULL, st[32];
    tocsin_job *job = NULL;
    o.delay_ms = 60000;
    o.expires_ms = 1000; /* expires long before it is due */
    CHECK_OK(db, tocsin_queue_enqueue(db, &doomed, "q", "{}", &o));
    later = enq_at(db, "q", 0, 30000, 0);
    CHECK_OK(db, tocsin_queue_next_deadline(db, &ms, qs, 1));
    CHECK_EQ_I(ms, 101000); /* the expiry comes first */
    CHECK_OK(db, tocsin_queue_stats(db, &json, "q"));
    CHECK_STR(json, "{\"queue\":\"q\",\"pending\":0,\"scheduled\":2,\"processing\":0,\"dead\":0,"
                    "\"oldest_pending_age_ms\":0,\"paused\":false}");
    tocsin_free(json);
    clk.now = 101000;
    CHECK_EQ_I(claim_one(db, "q", NULL), 0);
    CHECK_OK(db, tocsin_job_get(db, &job, doomed));
    CHECK(job && strcmp(job->state, "dead") == 0 && strcmp(job->reason, "expired") == 0);
    tocsin_jobs_free(job, 1);
    CHECK_OK(db, tocsin_queue_next_deadline(db, &ms, qs, 1));
    CHECK_EQ_I(ms, 130000);
    /* due but not promoted yet: reported as pending everywhere */
    clk.now = 130500;
    CHECK_STR(state_of(db, later, st, sizeof st), "pending");
    CHECK_OK(db, tocsin_queue_stats(db, &json, "q"));
    CHECK(strstr(json, "\"pending\":1,\"scheduled\":0") && strstr(json, "\"oldest_pending_age_ms\":500"));
    tocsin_free(json);
    CHECK_OK(db, tocsin_queue_next_deadline(db, &ms, qs, 1));
    CHECK_EQ_I(ms, 130500); /* due: claimable now */
    now_job = enq_at(db, "q", 0, 0, 0);
    CHECK_EQ_I(claim_one(db, "q", NULL), later);
    CHECK_OK(db, tocsin_queue_next_deadline(db, &ms, qs, 1));
    CHECK_EQ_I(ms, 130500); /* now_job is pending: claimable now */
    CHECK_EQ_I(claim_one(db, "q", NULL), now_job);
    CHECK_OK(db, tocsin_queue_next_deadline(db, &ms, qs, 1));
    CHECK_EQ_I(ms, 130500 + 60000); /* only leases left: the first lapses then */
    tocsin_close(db);
}

/* ---- issue 8: hostile values --------------------------------------------- */

static int has(tocsin_db *db, const char *text) { return strstr(tocsin_errmsg(db), text) != NULL; }

/* Every duration and instant of every queue function is range-checked (a
 * clear error naming it, nothing written) and every sum saturates. */
static void times_never_wrap(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("c_time", &clk);
    tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
    tocsin_job *job = NULL, *jobs = NULL;
    int64_t id = 0, tok = 0, victim, vtok = 0, n64 = 0;
    size_t n = 0;
    int ok = -1;
    const int64_t bad[] = {INT64_MAX, TOCSIN_MAX_TIME_MS + 1, INT64_MIN, -1};
    size_t i;
    char *json = NULL;

    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o = (tocsin_enqueue_opts)TOCSIN_ENQUEUE_OPTS_INIT;
        o.delay_ms = bad[i];
        CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", &o), TOCSIN_INVALID);
        CHECK(has(db, "delay_ms"));
        o = (tocsin_enqueue_opts)TOCSIN_ENQUEUE_OPTS_INIT;
        o.run_at_ms = bad[i];
        CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", &o), TOCSIN_INVALID);
        CHECK(has(db, "run_at_ms"));
        o = (tocsin_enqueue_opts)TOCSIN_ENQUEUE_OPTS_INIT;
        o.expires_ms = bad[i];
        CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", &o), TOCSIN_INVALID);
        CHECK(has(db, "expires_ms"));
        CHECK_EQ_I(tocsin_queue_claim(db, &jobs, &n, "q", "w", 1, bad[i]), TOCSIN_INVALID);
        CHECK(has(db, "visibility_ms"));
        CHECK_EQ_I(tocsin_dead_purge(db, &n64, "q", bad[i]), TOCSIN_INVALID);
        CHECK(has(db, "before_ms"));
        CHECK_EQ_I(tocsin_dead_purge(db, &n64, NULL, bad[i]), TOCSIN_INVALID);
    }
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 0);

    /* the largest values are valid and saturate instead of wrapping */
    o = (tocsin_enqueue_opts)TOCSIN_ENQUEUE_OPTS_INIT;
    o.delay_ms = TOCSIN_MAX_TIME_MS;
    o.expires_ms = TOCSIN_MAX_TIME_MS;
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "{}", &o));
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK_EQ_I(job->run_at, TOCSIN_MAX_TIME_MS);
    CHECK_EQ_I(job->expires_at, TOCSIN_MAX_TIME_MS);
    CHECK_STR(job->state, "scheduled");
    tocsin_jobs_free(job, 1);
    CHECK_EQ_I(claim_one(db, "q", NULL), 0); /* not claimable, not expired */
    CHECK_EQ_I(t_count(db, "_tocsin_dead"), 0);
    CHECK_OK(db, tocsin_job_cancel(db, &ok, id));

    /* a lease as long as it gets is never stolen */
    id = enq_at(db, "q", 0, 0, 0);
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "q", "w1", 1, TOCSIN_MAX_TIME_MS));
    CHECK_EQ_I(n, 1);
    if (n == 1) {
        CHECK_EQ_I(jobs[0].lease_until, TOCSIN_MAX_TIME_MS);
        tok = jobs[0].token;
    }
    tocsin_jobs_free(jobs, n);
    clk.now = TOCSIN_MAX_TIME_MS - 1;
    CHECK_EQ_I(claim_one(db, "q", NULL), 0);
    CHECK_OK(db, tocsin_job_ack(db, &ok, id, tok));
    CHECK_EQ_I(ok, 1);

    /* heartbeat: a huge extension is refused, the lease untouched, nobody steals */
    clk.now = 5000;
    victim = enq_at(db, "q", 0, 0, 0);
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "q", "holder", 1, 1000));
    if (n == 1) vtok = jobs[0].token;
    tocsin_jobs_free(jobs, n);
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_I(tocsin_job_heartbeat(db, &ok, victim, vtok, bad[i]), TOCSIN_INVALID);
        CHECK(has(db, "extend_ms"));
        CHECK_EQ_I(ok, 0);
    }
    CHECK_OK(db, tocsin_job_get(db, &job, victim));
    CHECK_EQ_I(job->lease_until, 6000);
    tocsin_jobs_free(job, 1);
    clk.now = 5500;
    CHECK_EQ_I(claim_one(db, "q", NULL), 0);
    CHECK_OK(db, tocsin_job_heartbeat(db, &ok, victim, vtok, TOCSIN_MAX_TIME_MS));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_job_get(db, &job, victim));
    CHECK_EQ_I(job->lease_until, TOCSIN_MAX_TIME_MS);
    tocsin_jobs_free(job, 1);

    /* retry: a huge delay is refused (nothing written); the largest saturates */
    for (i = 0; i < 2; i++) {
        CHECK_EQ_I(tocsin_job_retry(db, &ok, victim, vtok, bad[i], "x"), TOCSIN_INVALID);
        CHECK(has(db, "delay_ms"));
    }
    CHECK_OK(db, tocsin_job_get(db, &job, victim));
    CHECK_STR(job->state, "processing");
    CHECK(job->last_error == NULL);
    tocsin_jobs_free(job, 1);
    CHECK_OK(db, tocsin_job_retry(db, &ok, victim, vtok, TOCSIN_MAX_TIME_MS, "much later"));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_job_get(db, &job, victim));
    CHECK_EQ_I(job->run_at, TOCSIN_MAX_TIME_MS);
    CHECK_STR(job->state, "scheduled");
    tocsin_jobs_free(job, 1);
    CHECK_EQ_I(claim_one(db, "q", NULL), 0);
    CHECK_OK(db, tocsin_job_cancel(db, &ok, victim));

    /* a clock at the end of time, or before the epoch: sums saturate, ages stay >= 0 */
    clk.now = INT64_MAX;
    id = enq_at(db, "q", 0, 1000, 0);
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK_EQ_I(job->created_at, TOCSIN_MAX_TIME_MS);
    CHECK_EQ_I(job->run_at, TOCSIN_MAX_TIME_MS);
    tocsin_jobs_free(job, 1);
    CHECK_EQ_I(claim_one(db, "q", &tok), id);
    CHECK_OK(db, tocsin_job_heartbeat(db, &ok, id, tok, 1000));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_job_retry(db, &ok, id, tok, 1000, NULL));
    clk.now = INT64_MIN;
    CHECK_OK(db, tocsin_queue_stats(db, &json, "q"));
    CHECK(strstr(json, "\"oldest_pending_age_ms\":0") != NULL);
    CHECK(strstr(json, "-") == NULL);
    tocsin_free(json);
    tocsin_close(db);
}

/* Stats never report a negative age, e.g. after the clock stepped back. */
static void stats_age_never_negative(void) {
    t_clock clk = {50000};
    tocsin_db *db = t_open("c_age", &clk);
    char *json = NULL;
    enq_at(db, "q", 0, 0, 0);
    clk.now = 1000;
    CHECK_OK(db, tocsin_queue_stats(db, &json, "q"));
    CHECK(strstr(json, "\"pending\":1") && strstr(json, "\"oldest_pending_age_ms\":0"));
    tocsin_free(json);
    tocsin_close(db);
}

static void backoff_never_overflows(void) {
    const int64_t v[] = {INT64_MIN, -1, 0, 1, 2, 1000, TOCSIN_MAX_TIME_MS, INT64_MAX / 2, INT64_MAX};
    const int at[] = {INT_MIN, -1, 0, 1, 2, 20, 62, 63, 64, 1000000, INT_MAX};
    size_t i, j, k;
    for (i = 0; i < sizeof v / sizeof v[0]; i++)
        for (j = 0; j < sizeof v / sizeof v[0]; j++)
            for (k = 0; k < sizeof at / sizeof at[0]; k++) {
                int64_t d = tocsin_backoff_ms(v[i], v[j], at[k]);
                int64_t base = v[i] < 1 ? 1 : v[i] > TOCSIN_MAX_TIME_MS ? TOCSIN_MAX_TIME_MS : v[i];
                if (d < 1 || d > TOCSIN_MAX_TIME_MS || (v[j] >= base && d > v[j])) {
                    CHECK(d >= 1 && d <= TOCSIN_MAX_TIME_MS);
                    fprintf(stderr, "  backoff(%lld, %lld, %d) = %lld\n", (long long)v[i],
                            (long long)v[j], at[k], (long long)d);
                    return;
                }
            }
    CHECK(1);
    /* doubling reaches the cap and stays there */
    CHECK(tocsin_backoff_ms(1, TOCSIN_MAX_TIME_MS, INT_MAX) >= TOCSIN_MAX_TIME_MS / 2);
}

/* unique_key and error texts: validated before anything is written. */
static void texts_are_validated(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("c_text", &clk);
    tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
    tocsin_job *job = NULL;
    char key[1100], *big;
    int64_t id = 0, tok = 0, fid, ftok = 0;
    int ok = -1;
    size_t big_n = 200 * 1024; /* over the old 64 KiB cap, under the 1 MiB payload limit */

    o.unique_key = "bad \xff utf-8";
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", &o), TOCSIN_INVALID);
    CHECK(has(db, "unique_key") && has(db, "UTF-8"));
    o.unique_key = "\xc0\x80"; /* overlong NUL */
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", &o), TOCSIN_INVALID);
    o.unique_key = "tab\there";
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", &o), TOCSIN_INVALID);
    CHECK(has(db, "unique_key") && has(db, "control"));
    o.unique_key = "del\x7f";
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", &o), TOCSIN_INVALID);
    memset(key, 'k', sizeof key);
    key[TOCSIN_MAX_UNIQUE_KEY_BYTES + 1] = 0;
    o.unique_key = key;
    CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", &o), TOCSIN_TOOBIG);
    CHECK(has(db, "unique_key"));
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 0);
    key[TOCSIN_MAX_UNIQUE_KEY_BYTES] = 0;
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "{}", &o));
    o.unique_key = "caf\xc3\xa9 \xe2\x9c\x93";
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "{}", &o));

    /* error text: UTF-8, up to the handle's payload limit, for retry and fail */
    CHECK_OK(db, tocsin_job_cancel(db, &ok, id));
    CHECK_OK(db, tocsin_job_cancel(db, &ok, id - 1));
    id = enq_at(db, "q", 0, 0, 0);
    fid = enq_at(db, "q", 0, 0, 0);
    CHECK_EQ_I(claim_one(db, "q", &tok), id);
    CHECK_EQ_I(claim_one(db, "q", &ftok), fid);
    CHECK_EQ_I(tocsin_job_retry(db, &ok, id, tok, 0, "broken \xe2\x28\xa1"), TOCSIN_INVALID);
    CHECK(has(db, "error text"));
    CHECK_EQ_I(tocsin_job_fail(db, &ok, fid, ftok, "\xed\xa0\x80 surrogate"), TOCSIN_INVALID);
    CHECK(has(db, "error text"));
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'processing' AND last_error IS NULL"), 2);
    CHECK_EQ_I(t_count(db, "_tocsin_dead WHERE reason = 'failed'"), 0);
    big = malloc(big_n + 1);
    memset(big, 'e', big_n);
    big[big_n] = 0;
    CHECK_OK(db, tocsin_job_retry(db, &ok, id, tok, 0, big));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_job_get(db, &job, id));
    CHECK(job->last_error && strlen(job->last_error) == big_n);
    tocsin_jobs_free(job, 1);
    CHECK_OK(db, tocsin_set_max_payload(db, 1000));
    big[1001] = 0;
    CHECK_EQ_I(tocsin_job_fail(db, &ok, fid, ftok, big), TOCSIN_TOOBIG);
    CHECK(has(db, "error text"));
    CHECK_EQ_I(t_count(db, "_tocsin_dead WHERE reason = 'failed'"), 0);
    big[1000] = 0;
    CHECK_OK(db, tocsin_job_fail(db, &ok, fid, ftok, big));
    CHECK_EQ_I(ok, 1);
    free(big);
    tocsin_close(db);
}

static void max_attempts_limit(void) {
    tocsin_db *db = t_open("c_attempts", NULL);
    tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
    tocsin_job_spec s = {"q", "{}", NULL};
    int64_t id = 0;
    const int bad[] = {TOCSIN_MAX_ATTEMPTS + 1, 5000000, INT_MAX, -1, INT_MIN};
    size_t i;
    s.opts = &o;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o.max_attempts = bad[i];
        CHECK_EQ_I(tocsin_queue_enqueue(db, &id, "q", "{}", &o), TOCSIN_INVALID);
        CHECK(has(db, "max_attempts"));
        CHECK_EQ_I(tocsin_queue_enqueue_many(db, &id, &s, 1), TOCSIN_INVALID);
    }
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 0);
    o.max_attempts = TOCSIN_MAX_ATTEMPTS;
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "{}", &o));
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE max_attempts = 1000000"), 1);
    tocsin_close(db);
}

/* A token names one claim of one job: presented with another job's id it is
 * refused by every lease operation, and nothing is written. */
static void tokens_name_one_job(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("c_tokens", &clk);
    int64_t a, b, ta = 0, tb = 0, ids[200], toks[200], pair_ids[2], pair_toks[2];
    int ok = -1;
    size_t i, j, n, acked = 99;
    const int64_t junk[] = {0, -1, 1, 2, INT64_MAX, INT64_MIN, TOKEN_SHIFT};
    tocsin_job *job = NULL;
    a = enq_at(db, "q", 0, 0, 0);
    b = enq_at(db, "q", 0, 0, 0);
    CHECK_EQ_I(claim_one(db, "q", &ta), a);
    CHECK_EQ_I(claim_one(db, "q", &tb), b);
    CHECK(ta != tb);
    CHECK_EQ_I(ta, a * TOKEN_SHIFT + 1);
    CHECK_OK(db, tocsin_job_ack(db, &ok, b, ta));
    CHECK_EQ_I(ok, 0);
    CHECK_OK(db, tocsin_job_retry(db, &ok, b, ta, 0, "x"));
    CHECK_EQ_I(ok, 0);
    CHECK_OK(db, tocsin_job_fail(db, &ok, b, ta, "x"));
    CHECK_EQ_I(ok, 0);
    CHECK_OK(db, tocsin_job_heartbeat(db, &ok, b, ta, 99999));
    CHECK_EQ_I(ok, 0);
    CHECK_OK(db, tocsin_job_complete(db, &ok, b, ta, "1", 0));
    CHECK_EQ_I(ok, 0);
    CHECK_OK(db, tocsin_job_fail_task(db, &ok, a, tb, "E", "m", 0));
    CHECK_EQ_I(ok, 0);
    pair_ids[0] = a;
    pair_ids[1] = b;
    pair_toks[0] = tb;
    pair_toks[1] = ta;
    CHECK_OK(db, tocsin_job_ack_batch(db, &acked, pair_ids, pair_toks, 2));
    CHECK_EQ_I(acked, 0);
    for (i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        CHECK_OK(db, tocsin_job_ack(db, &ok, a, junk[i]));
        CHECK_EQ_I(ok, 0);
        CHECK_OK(db, tocsin_job_heartbeat(db, &ok, a, junk[i], 10));
        CHECK_EQ_I(ok, 0);
    }
    /* nothing was written: both still held by their own tokens */
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'processing' AND lease_until = 61000"), 2);
    CHECK_EQ_I(t_count(db, "_tocsin_dead"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_results"), 0);
    CHECK_OK(db, tocsin_job_ack(db, &ok, a, ta));
    CHECK_EQ_I(ok, 1);
    CHECK_OK(db, tocsin_job_ack(db, &ok, b, tb));
    CHECK_EQ_I(ok, 1);

    /* tokens are unique across jobs and across claims of one job */
    for (i = 0; i < 100; i++) enq_at(db, "q", 0, 0, 0);
    n = claim_ids(db, "q", 100, ids, toks);
    CHECK_EQ_I(n, 100);
    clk.now += 120000; /* every lease lapses: reclaimed with new tokens */
    CHECK_EQ_I(claim_ids(db, "q", 100, ids + 100, toks + 100), 100);
    for (i = 0; i < 200; i++)
        for (j = i + 1; j < 200; j++)
            if (toks[i] == toks[j]) {
                CHECK(toks[i] != toks[j]);
                i = j = 200;
            }
    CHECK_OK(db, tocsin_job_ack_batch(db, &acked, ids, toks, 100)); /* stale: reclaimed */
    CHECK_EQ_I(acked, 0);
    CHECK_OK(db, tocsin_job_ack_batch(db, &acked, ids + 100, toks + 100, 100));
    CHECK_EQ_I(acked, 100);
    /* the dead letter keeps the token of its last claim */
    a = enq_at(db, "q", 0, 0, 0);
    CHECK_EQ_I(claim_one(db, "q", &ta), a);
    CHECK_OK(db, tocsin_job_fail(db, &ok, a, ta, "gone"));
    CHECK_OK(db, tocsin_job_get(db, &job, a));
    CHECK_EQ_I(job->token, ta);
    tocsin_jobs_free(job, 1);
    tocsin_close(db);
}

/* Batches past one statement's chunk (claims and acks of more than 100 jobs
 * go out in statements of 100): every job is leased exactly once, in claim
 * order, the structs show the stored rows, and an ack batch counts each live
 * lease once, whatever else it carries (duplicates, stale, foreign or junk
 * tokens), spread over the chunks. */
static void batches_span_chunks(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("c_chunks", &clk);
    int64_t ids[600], toks[600], bids[700], btoks[700], id;
    tocsin_job *jobs = NULL, *one = NULL;
    size_t i, n = 0, m = 0, acked = 0;
    for (i = 0; i < 250; i++) enq_at(db, "q", (int64_t)(i % 3), 0, 0);
    for (i = 0; i < 101; i++) enq_at(db, "r", 0, 0, 0);
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "q", "w7", 250, 5000));
    CHECK_EQ_I(n, 250);
    for (i = 0; i < n; i++) {
        ids[i] = jobs[i].id;
        toks[i] = jobs[i].token;
        CHECK(strcmp(jobs[i].state, "processing") == 0 && strcmp(jobs[i].worker, "w7") == 0);
        CHECK_EQ_I(jobs[i].attempts, 1);
        CHECK_EQ_I(jobs[i].lease_until, 6000);
        CHECK_EQ_I(jobs[i].token, jobs[i].id * TOKEN_SHIFT + 1);
        /* claim order: priority 2 first, then 1, then 0, each by id */
        if (i) CHECK(jobs[i - 1].priority > jobs[i].priority ||
                     (jobs[i - 1].priority == jobs[i].priority && jobs[i - 1].id < jobs[i].id));
    }
    CHECK_OK(db, tocsin_job_get(db, &one, jobs[137].id));
    CHECK(one && strcmp(one->state, "processing") == 0 && one->attempts == 1 && one->lease_until == 6000);
    tocsin_jobs_free(one, 1);
    tocsin_jobs_free(jobs, n);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE queue = 'q' AND state = 'processing' AND attempts = 1"
                           " AND worker = 'w7' AND lease_until = 6000"), 250);
    CHECK_EQ_I(claim_ids(db, "r", 101, ids + 250, toks + 250), 101); /* a chunk of 100, one of 1 */
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE queue = 'r' AND state = 'processing'"), 101);
    /* the ack batch: every lease of q once, then again, with junk between */
    for (i = 0; i < 250; i++) {
        bids[m] = ids[i];
        btoks[m++] = toks[i];
        if (i % 10 == 0) { bids[m] = ids[i]; btoks[m++] = toks[i]; }           /* duplicate */
        if (i % 25 == 0) { bids[m] = ids[i]; btoks[m++] = toks[i] + 1; }       /* stale attempt */
        if (i % 40 == 0) { bids[m] = ids[i]; btoks[m++] = toks[(i + 1) % 250]; } /* another job's */
        if (i % 50 == 0) { bids[m] = ids[i]; btoks[m++] = i % 100 ? 0 : -1; }  /* junk */
    }
    CHECK(m < 700);
    CHECK_OK(db, tocsin_job_ack_batch(db, &acked, bids, btoks, m));
    CHECK_EQ_I(acked, 250);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE queue = 'q'"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE queue = 'r' AND state = 'processing'"), 101);
    CHECK_OK(db, tocsin_job_ack_batch(db, &acked, bids, btoks, m)); /* all gone now */
    CHECK_EQ_I(acked, 0);
    /* a batch of nothing but junk writes nothing and acks nothing */
    for (i = 0; i < 150; i++) { bids[i] = ids[250 + (i % 101)]; btoks[i] = 0; }
    CHECK_OK(db, tocsin_job_ack_batch(db, &acked, bids, btoks, 150));
    CHECK_EQ_I(acked, 0);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE queue = 'r'"), 101);
    CHECK_OK(db, tocsin_job_ack_batch(db, &acked, ids + 250, toks + 250, 101));
    CHECK_EQ_I(acked, 101);
    /* the highest id was acked in a batch: it is still never handed out again */
    id = enq_at(db, "q", 0, 0, 0);
    CHECK(id > ids[250 + 100]);
    tocsin_close(db);
}

/* enqueue_many writes runs of payload-only jobs of one queue 100 to a
 * statement: each payload is stored as its exact text, ids are consecutive
* and never reused, jobs with options or of another queue go alone in
 * between, a trigger that drops rows is an error, a batch that runs out of ids
 * writes nothing, and a host that allows fewer than 104 parameters per
 * statement gets the same jobs, one INSERT each. */
static void enqueue_batches_exact(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("c_enq_batch", &clk);
    static const char *const texts[] = {"{\"to\": \"ada@example.org\", \"n\": 1}", "\"quoted \\\" \\\\ \\u00e9\"",
                                        "[1, 2.50, -0, 1e3]", " {\n\t\"a\" : \"caf\xc3\xa9 \xe2\x82\xac\"\r\n} ", "null",
                                        "\"\x7f\"", "true"};
    tocsin_job_spec specs[330];
    tocsin_enqueue_opts pri = TOCSIN_ENQUEUE_OPTS_INIT, uniq = TOCSIN_ENQUEUE_OPTS_INIT,
                        plain = TOCSIN_ENQUEUE_OPTS_INIT;
    int64_t ids[330], first;
    char *big = malloc(70000), sql[200];
    size_t i, n = 0;
    tocsin_job *job = NULL;
    CHECK(big != NULL);
    memset(big, 'x', 69998);
    big[0] = '"';
    big[69998] = '"';
    big[69999] = 0;
    pri.priority = 5;
    uniq.unique_key = "only-once";
    for (i = 0; i < 330; i++) {
        specs[i].queue = i >= 200 && i < 210 ? "other" : "q";
        specs[i].payload = i == 150 ? big : texts[i % 7];
        specs[i].opts = i == 120 ? &pri : (i == 121 || i == 122) ? &uniq : i % 2 ? &plain : NULL;
    }
    first = enq_at(db, "q", 0, 0, 0); /* the sequence so far */
    CHECK_OK(db, tocsin_queue_enqueue_many(db, ids, specs, 330));
    for (i = 0; i < 330; i++) {
        int64_t want = first + 1 + (int64_t)i; /* a unique key met still uses up its id */
        if (i == 122) want = ids[121]; /* the unique key met: the live job's id */
        if (ids[i] != want) {
            CHECK_EQ_I(ids[i], want);
            break;
        }
    }
    n = (size_t)t_count(db, "_tocsin_jobs");
    CHECK_EQ_I(n, 331 - 1);
    for (i = 0; i < 330; i += 7) {
        if (i == 122) continue;
        CHECK_OK(db, tocsin_job_get(db, &job, ids[i]));
        CHECK(job && strcmp(job->payload, specs[i].payload) == 0 && strcmp(job->queue, specs[i].queue) == 0);
        CHECK(job && strcmp(job->state, "pending") == 0 && job->max_attempts == 3 && job->run_at == 1000 &&
              job->created_at == 1000 && job->priority == (i == 120 ? 5 : 0) && job->attempts == 0);
        tocsin_jobs_free(job, 1);
        job = NULL;
    }
    for (i = 0; i < 7; i++) {
        CHECK_OK(db, tocsin_job_get(db, &job, ids[i + 14]));
        CHECK(job && strcmp(job->payload, texts[i]) == 0);
        tocsin_jobs_free(job, 1);
        job = NULL;
    }
    CHECK_OK(db, tocsin_job_get(db, &job, ids[150]));
    CHECK(job && strlen(job->payload) == 69999);
    tocsin_jobs_free(job, 1);
    /* a trigger that drops rows: the batch fails whole, the sequence does not move */
    CHECK_OK(db, tocsin_exec(db, "CREATE TRIGGER drop_some BEFORE INSERT ON _tocsin_jobs"
                                 " WHEN new.id % 50 = 7 BEGIN SELECT RAISE(IGNORE); END"));
    CHECK_EQ_I(tocsin_queue_enqueue_many(db, ids, specs, 100), TOCSIN_CORRUPT);
    CHECK(strstr(tocsin_errmsg(db), "wrote no row") != NULL);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), (int64_t)n);
    CHECK_OK(db, tocsin_exec(db, "DROP TRIGGER drop_some"));
    /* ids end at 2^43 - 1: a batch that would pass it writes nothing */
    snprintf(sql, sizeof sql, "UPDATE sqlite_sequence SET seq = %lld WHERE name = '_tocsin_jobs'",
             8796093022207LL - 50);
    CHECK_OK(db, tocsin_exec(db, "INSERT INTO sqlite_sequence(name, seq) SELECT '_tocsin_jobs', 0"
                                 " WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = '_tocsin_jobs')"));
    CHECK_OK(db, tocsin_exec(db, sql));
    CHECK_EQ_I(tocsin_queue_enqueue_many(db, ids, specs, 100), TOCSIN_FULL);
    CHECK(strstr(tocsin_errmsg(db), "no job id is left") != NULL);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), (int64_t)n);
    CHECK_OK(db, tocsin_queue_enqueue_many(db, ids, specs, 50));
    CHECK_EQ_I(ids[49], 8796093022207LL);
    CHECK_OK(db, tocsin_exec(db, "DELETE FROM _tocsin_jobs WHERE id > 1000"));
    CHECK_OK(db, tocsin_exec(db, "UPDATE sqlite_sequence SET seq = 1000 WHERE name = '_tocsin_jobs'"));
    n = (size_t)t_count(db, "_tocsin_jobs");
    sqlite3_limit(tocsin_sqlite(db), SQLITE_LIMIT_VARIABLE_NUMBER, 50);
    CHECK_OK(db, tocsin_queue_enqueue_many(db, ids, specs, 20));
    sqlite3_limit(tocsin_sqlite(db), SQLITE_LIMIT_VARIABLE_NUMBER, 32766);
    sqlite3_limit(tocsin_sqlite(db), SQLITE_LIMIT_SQL_LENGTH, 900); /* shorter than the 100-row statement */
    CHECK_OK(db, tocsin_queue_enqueue_many(db, ids + 20, specs, 20));
    sqlite3_limit(tocsin_sqlite(db), SQLITE_LIMIT_SQL_LENGTH, 1000000000);
    CHECK_EQ_I(ids[20], 1021);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), (int64_t)n + 40);
    for (i = 0; i < 20; i++) {
        CHECK_EQ_I(ids[i], 1001 + (int64_t)i);
        CHECK_OK(db, tocsin_job_get(db, &job, ids[i]));
        CHECK(job && strcmp(job->payload, specs[i].payload) == 0);
        tocsin_jobs_free(job, 1);
        job = NULL;
    }
    free(big);
    tocsin_close(db);
}

/* schema_version must be exactly a decimal integer: anything else is corrupt. */
static void schema_version_exact(void) {
    static const char *const bad[] = {"'1.9'", "'1abc'", "' 1'", "'01'", "''", "1.0", "'1 '",
                                      "x'31'", "NULL", "'-1'", "'0'"};
    size_t i;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tocsin_db *db = t_open("c_schema", NULL), *again = NULL;
        char sql[200], path[600];
        int rc;
        snprintf(path, sizeof path, "%s", sqlite3_db_filename(tocsin_sqlite(db), "main"));
        snprintf(sql, sizeof sql, "UPDATE _tocsin_meta SET value = %s WHERE key = 'schema_version'", bad[i]);
        CHECK_OK(db, tocsin_exec(db, sql));
        tocsin_close(db);
        rc = tocsin_open(&again, path, NULL);
        CHECK_EQ_I(rc, TOCSIN_CORRUPT);
        if (rc != TOCSIN_CORRUPT) fprintf(stderr, "  schema_version %s read as valid\n", bad[i]);
        CHECK(again && strstr(tocsin_errmsg(again), "schema_version") != NULL);
        /* the message shows what is stored (or what it is, when it is not text) */
        if (bad[i][0] == '\'') {
            char shown[40];
            snprintf(shown, sizeof shown, "(%s)", bad[i]);
            CHECK(again && strstr(tocsin_errmsg(again), shown) != NULL);
        }
        if (!strcmp(bad[i], "NULL")) CHECK(again && strstr(tocsin_errmsg(again), "(NULL)") != NULL);
        tocsin_close(again);
    }
    {
        tocsin_db *db = t_open("c_schema_ok", NULL), *again = NULL;
        char path[600];
        snprintf(path, sizeof path, "%s", sqlite3_db_filename(tocsin_sqlite(db), "main"));
        CHECK_OK(db, tocsin_exec(db, "UPDATE _tocsin_meta SET value = 2 WHERE key = 'schema_version'"));
        tocsin_close(db);
        CHECK_OK(again, tocsin_open(&again, path, NULL));
        tocsin_close(again);
    }
}

void suite_claim(void) {
    order_across_states();
    delayed_overtakes_pending();
    retries_and_reclaims_in_order();
    burst_of_due_jobs();
    scheduled_stats_deadline_expiry();
    times_never_wrap();
    stats_age_never_negative();
    backoff_never_overflows();
    texts_are_validated();
    max_attempts_limit();
    tokens_name_one_job();
    batches_span_chunks();
    enqueue_batches_exact();
    schema_version_exact();
}
