/*
 * The job queue: every SQL statement of the queue lives in this file.
 *
 * A job lives in _tocsin_jobs while pending or processing and moves to
 * _tocsin_dead when it fails for good; ack deletes it. A claim is a lease
 * whose fencing token is the attempt number: each claim increments
 * `attempts`, so a holder whose lease was reclaimed and handed to someone
 * else holds a stale token and every lease operation it tries matches no row.
 */
#include "internal.h"

/* Column lists shared by every statement that reads jobs (see read_job). */
#define JOB_COLS                                                                              \
    "id, queue, state, payload, meta, priority, attempts, max_attempts, run_at, created_at, " \
    "lease_until, expires_at, unique_key, worker, last_error, NULL, NULL"
#define DEAD_COLS                                                                              \
    "id, queue, 'dead', payload, meta, priority, attempts, max_attempts, run_at, created_at, " \
    "NULL, expires_at, unique_key, worker, last_error, reason, died_at"

static const char SQL_INSERT[] =
    "INSERT INTO _tocsin_jobs(queue, payload, meta, priority, max_attempts, run_at, created_at,"
    " expires_at, unique_key) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
    " ON CONFLICT(queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING";
static const char SQL_FIND_UNIQUE[] =
    "SELECT id FROM _tocsin_jobs WHERE queue = ?1 AND unique_key = ?2";

/* What a claim must do before handing out jobs: is the queue paused, has a
 * lease lapsed, has a pending job expired? Three index probes, one statement. */
static const char SQL_CLAIM_CHECK[] =
    "SELECT (SELECT paused FROM _tocsin_queues WHERE name = ?1),"
    " EXISTS (SELECT 1 FROM _tocsin_jobs WHERE queue = ?1 AND state = 'processing'"
    "         AND lease_until <= ?2),"
    " EXISTS (SELECT 1 FROM _tocsin_jobs WHERE queue = ?1 AND state = 'pending'"
    "         AND expires_at IS NOT NULL AND expires_at <= ?2)";

#define TO_DEAD_PREFIX                                                               \
    "INSERT INTO _tocsin_dead(id, queue, payload, meta, priority, attempts, max_attempts,"   \
    " run_at, created_at, expires_at, worker, unique_key, last_error, reason, died_at)"      \
    " SELECT id, queue, payload, meta, priority, attempts, max_attempts, run_at, created_at," \
    " expires_at, worker, unique_key, "

/* Lapsed leases: exhausted jobs die, the others go back to pending. */
static const char SQL_LAPSED_DEAD[] =
    TO_DEAD_PREFIX "coalesce(last_error, 'lease expired'), 'max_attempts', ?2 FROM _tocsin_jobs"
    " WHERE queue = ?1 AND state = 'processing' AND lease_until <= ?2 AND attempts >= max_attempts";
static const char SQL_LAPSED_DELETE[] =
    "DELETE FROM _tocsin_jobs WHERE queue = ?1 AND state = 'processing' AND lease_until <= ?2"
    " AND attempts >= max_attempts";
static const char SQL_LAPSED_REQUEUE[] =
    "UPDATE _tocsin_jobs SET state = 'pending', lease_until = NULL, last_error = 'lease expired'"
    " WHERE queue = ?1 AND state = 'processing' AND lease_until <= ?2";

/* Pending jobs past their expiry die with reason 'expired'. */
static const char SQL_EXPIRED_DEAD[] =
    TO_DEAD_PREFIX "last_error, 'expired', ?2 FROM _tocsin_jobs"
    " WHERE queue = ?1 AND state = 'pending' AND expires_at IS NOT NULL AND expires_at <= ?2";
static const char SQL_EXPIRED_DELETE[] =
    "DELETE FROM _tocsin_jobs"
    " WHERE queue = ?1 AND state = 'pending' AND expires_at IS NOT NULL AND expires_at <= ?2";

/* A claim reads the jobs it takes, in claim order, then leases each by id.
 * (One UPDATE .. WHERE id IN (..) RETURNING would build two ephemeral tables
 * per call, which cost more than the commit on the one-job path.) */
static const char SQL_CLAIM_SELECT[] =
    "SELECT " JOB_COLS " FROM _tocsin_jobs WHERE queue = ?1 AND state = 'pending'"
    " AND run_at <= ?2 ORDER BY priority DESC, run_at, id LIMIT ?3";
static const char SQL_CLAIM_LEASE[] =
    "UPDATE _tocsin_jobs SET state = 'processing', attempts = attempts + 1, worker = ?2,"
    " lease_until = ?3 + ?4 WHERE id = ?1";

/* The lease check every holder operation starts with. */
static const char SQL_HOLDER[] =
    "SELECT attempts, max_attempts FROM _tocsin_jobs"
    " WHERE id = ?1 AND state = 'processing' AND attempts = ?2";
static const char SQL_ACK[] =
    "DELETE FROM _tocsin_jobs WHERE id = ?1 AND state = 'processing' AND attempts = ?2";
static const char SQL_RETRY[] =
    "UPDATE _tocsin_jobs SET state = 'pending', run_at = ?2, lease_until = NULL, last_error = ?3"
    " WHERE id = ?1";
static const char SQL_HEARTBEAT[] =
    "UPDATE _tocsin_jobs SET lease_until = ?3"
    " WHERE id = ?1 AND state = 'processing' AND attempts = ?2";
static const char SQL_ONE_DEAD[] =
    TO_DEAD_PREFIX "coalesce(?2, last_error), ?3, ?4 FROM _tocsin_jobs WHERE id = ?1";
static const char SQL_DELETE_ONE[] = "DELETE FROM _tocsin_jobs WHERE id = ?1";

static const char SQL_GET_LIVE[] = "SELECT " JOB_COLS " FROM _tocsin_jobs WHERE id = ?1";
static const char SQL_GET_DEAD[] = "SELECT " DEAD_COLS " FROM _tocsin_dead WHERE id = ?1";

static const char SQL_PAUSE[] =
    "INSERT INTO _tocsin_queues(name, paused, updated_at) VALUES (?1, ?2, ?3)"
    " ON CONFLICT(name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at";
static const char SQL_IS_PAUSED[] =
    "SELECT coalesce((SELECT paused FROM _tocsin_queues WHERE name = ?1), 0)";

static const char SQL_STATS[] =
    "SELECT"
    " (SELECT count(*) FROM _tocsin_jobs WHERE queue = ?1 AND state = 'pending' AND run_at <= ?2),"
    " (SELECT count(*) FROM _tocsin_jobs WHERE queue = ?1 AND state = 'pending' AND run_at > ?2),"
    " (SELECT count(*) FROM _tocsin_jobs WHERE queue = ?1 AND state = 'processing'),"
    " (SELECT count(*) FROM _tocsin_dead WHERE queue = ?1),"
    " (SELECT min(run_at) FROM _tocsin_jobs WHERE queue = ?1 AND state = 'pending' AND run_at <= ?2),"
    " coalesce((SELECT paused FROM _tocsin_queues WHERE name = ?1), 0)";
static const char SQL_QUEUE_NAMES[] =
    "SELECT DISTINCT queue FROM _tocsin_jobs UNION SELECT DISTINCT queue FROM _tocsin_dead"
    " UNION SELECT name FROM _tocsin_queues ORDER BY 1";

/* Next deadline: the earliest run_at of pending jobs is found by hopping from
 * one priority group of the claim index to the next (few groups, each an index
 * seek) rather than scanning the backlog. */
static const char SQL_FIRST_GROUP[] =
    "SELECT priority, run_at FROM _tocsin_jobs WHERE queue = ?1 AND state = 'pending'"
    " ORDER BY priority DESC, run_at, id LIMIT 1";
static const char SQL_NEXT_GROUP[] =
    "SELECT priority, run_at FROM _tocsin_jobs WHERE queue = ?1 AND state = 'pending'"
    " AND priority < ?2 ORDER BY priority DESC, run_at, id LIMIT 1";
static const char SQL_OTHER_DEADLINES[] =
    "SELECT (SELECT min(lease_until) FROM _tocsin_jobs WHERE queue = ?1 AND state = 'processing'),"
    " (SELECT min(expires_at) FROM _tocsin_jobs WHERE queue = ?1 AND state = 'pending'"
    "  AND expires_at IS NOT NULL),"
    " coalesce((SELECT paused FROM _tocsin_queues WHERE name = ?1), 0)";

static const char SQL_DEAD_LIST_Q[] =
    "SELECT " DEAD_COLS " FROM _tocsin_dead WHERE queue = ?1 AND id > ?2 ORDER BY id LIMIT ?3";
static const char SQL_DEAD_LIST_ALL[] =
    "SELECT " DEAD_COLS " FROM _tocsin_dead WHERE id > ?2 ORDER BY id LIMIT ?3";
static const char SQL_REQUEUE[] =
    "INSERT INTO _tocsin_jobs(id, queue, state, payload, meta, priority, attempts, max_attempts,"
    " run_at, created_at, expires_at, unique_key)"
    " SELECT id, queue, 'pending', payload, meta, priority, 0, max_attempts, ?2, created_at,"
    " NULL, unique_key FROM _tocsin_dead WHERE id = ?1";
static const char SQL_DEAD_DELETE_ONE[] = "DELETE FROM _tocsin_dead WHERE id = ?1";
static const char SQL_PURGE_Q[] =
    "DELETE FROM _tocsin_dead WHERE queue = ?1 AND (?2 = 0 OR died_at < ?2)";
static const char SQL_PURGE_ALL[] = "DELETE FROM _tocsin_dead WHERE (?2 = 0 OR died_at < ?2)";

#define TC_MAX_CLAIM TOCSIN_MAX_BATCH
#define TC_MAX_UNIQUE_KEY TOCSIN_MAX_UNIQUE_KEY_BYTES

/* ---- helpers -------------------------------------------------------------- */

static void bind_text_or_null(sqlite3_stmt *st, int i, const char *s) {
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

static void bind_i64_or_null(sqlite3_stmt *st, int i, int64_t v) {
    if (v)
        sqlite3_bind_int64(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

/* Fills *j from a row in JOB_COLS / DEAD_COLS order; 0 on out-of-memory. */
static int read_job(sqlite3_stmt *st, tocsin_job *j) {
    memset(j, 0, sizeof *j);
    j->id = sqlite3_column_int64(st, 0);
    j->queue = tc_col_text(st, 1);
    j->state = tc_col_text(st, 2);
    j->payload = tc_col_text(st, 3);
    j->meta = tc_col_text(st, 4);
    j->priority = sqlite3_column_int64(st, 5);
    j->attempts = sqlite3_column_int(st, 6);
    j->max_attempts = sqlite3_column_int(st, 7);
    j->token = j->attempts;
    j->run_at = sqlite3_column_int64(st, 8);
    j->created_at = sqlite3_column_int64(st, 9);
    j->lease_until = sqlite3_column_int64(st, 10);
    j->expires_at = sqlite3_column_int64(st, 11);
    j->unique_key = tc_col_text(st, 12);
    j->worker = tc_col_text(st, 13);
    j->last_error = tc_col_text(st, 14);
    j->reason = tc_col_text(st, 15);
    j->died_at = sqlite3_column_int64(st, 16);
    return j->queue && j->state && j->payload;
}

static void job_clear(tocsin_job *j) {
    sqlite3_free(j->queue);
    sqlite3_free(j->state);
    sqlite3_free(j->payload);
    sqlite3_free(j->meta);
    sqlite3_free(j->unique_key);
    sqlite3_free(j->worker);
    sqlite3_free(j->last_error);
    sqlite3_free(j->reason);
}

void tocsin_jobs_free(tocsin_job *jobs, size_t n) {
    size_t i;
    if (!jobs) return;
    for (i = 0; i < n; i++) job_clear(&jobs[i]);
    sqlite3_free(jobs);
}

/* Steps `st` to the end, collecting at most `cap` jobs. Resets `st`. */
static int collect_jobs(tocsin_db *db, sqlite3_stmt *st, size_t cap, tocsin_job **out,
                        size_t *out_n, const char *what) {
    tocsin_job *jobs = NULL;
    size_t n = 0;
    int rc;
    *out = NULL;
    *out_n = 0;
    if (cap && !(jobs = sqlite3_malloc64(cap * sizeof *jobs))) {
        sqlite3_reset(st);
        return tc_err(db, TOCSIN_NOMEM, "%s: out of memory", what);
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) continue; /* drain: RETURNING rows must all be stepped */
        if (!read_job(st, &jobs[n++])) {
            sqlite3_reset(st);
            tocsin_jobs_free(jobs, n);
            return tc_err(db, TOCSIN_NOMEM, "%s: out of memory", what);
        }
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        tocsin_jobs_free(jobs, n);
        return tc_sqlerr(db, rc, what);
    }
    if (n == 0) {
        sqlite3_free(jobs);
        jobs = NULL;
    }
    *out = jobs;
    *out_n = n;
    return TOCSIN_OK;
}

/* Runs a statement bound to (queue, now), expecting no rows. */
static int run_qnow(tocsin_db *db, const char *sql, const char *queue, int64_t now,
                    const char *what) {
    sqlite3_stmt *st = tc_stmt(db, sql);
    if (!st) return TC_ERRCODE;
    sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, now);
    return tc_step_done(db, st, what);
}

/* Moves live job `id` to the dead table. */
static int to_dead(tocsin_db *db, int64_t id, const char *reason, const char *error, int64_t now) {
    sqlite3_stmt *st = tc_stmt(db, SQL_ONE_DEAD);
    int rc;
    if (!st) return TC_ERRCODE;
    sqlite3_bind_int64(st, 1, id);
    bind_text_or_null(st, 2, error);
    sqlite3_bind_text(st, 3, reason, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, now);
    if ((rc = tc_step_done(db, st, "move job to dead letters")) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, SQL_DELETE_ONE))) return TC_ERRCODE;
    sqlite3_bind_int64(st, 1, id);
    return tc_step_done(db, st, "move job to dead letters");
}

#define CHECK_DB(db)                           \
    do {                                       \
        if (!(db)) return TOCSIN_INVALID;      \
        tc_clear(db);                          \
    } while (0)

/* ---- enqueue -------------------------------------------------------------- */

static int check_spec(tocsin_db *db, const tocsin_job_spec *s) {
    const tocsin_enqueue_opts *o = s->opts;
    int rc;
    if ((rc = tc_check_name(db, "queue name", s->queue)) != TOCSIN_OK) return rc;
    if ((rc = tc_check_payload(db, "payload", s->payload)) != TOCSIN_OK) return rc;
    if (!o) return TOCSIN_OK;
    if (o->version < 1)
        return tc_err(db, TOCSIN_INVALID, "enqueue options: version must be set (use TOCSIN_ENQUEUE_OPTS_INIT)");
    if (o->delay_ms < 0) return tc_err(db, TOCSIN_INVALID, "delay_ms must be >= 0");
    if (o->run_at_ms < 0) return tc_err(db, TOCSIN_INVALID, "run_at_ms must be >= 0");
    if (o->delay_ms && o->run_at_ms)
        return tc_err(db, TOCSIN_INVALID, "give delay_ms or run_at_ms, not both");
    if (o->max_attempts < 0) return tc_err(db, TOCSIN_INVALID, "max_attempts must be >= 1");
    if (o->expires_ms < 0) return tc_err(db, TOCSIN_INVALID, "expires_ms must be >= 0");
    if (o->unique_key) {
        size_t n = strlen(o->unique_key);
        if (n == 0) return tc_err(db, TOCSIN_INVALID, "unique_key must not be empty");
        if (n > TC_MAX_UNIQUE_KEY)
            return tc_err(db, TOCSIN_INVALID, "unique_key is %zu bytes long; the limit is %d", n,
                          TC_MAX_UNIQUE_KEY);
    }
    return tc_check_meta(db, o->meta);
}

static int insert_job(tocsin_db *db, int64_t *out_id, const tocsin_job_spec *s, int64_t now) {
    static const tocsin_enqueue_opts defaults = TOCSIN_ENQUEUE_OPTS_INIT;
    const tocsin_enqueue_opts *o = s->opts ? s->opts : &defaults;
    int64_t run_at = o->run_at_ms ? o->run_at_ms : now + o->delay_ms;
    sqlite3_stmt *st = tc_stmt(db, SQL_INSERT);
    int rc;
    if (!st) return TC_ERRCODE;
    sqlite3_bind_text(st, 1, s->queue, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, s->payload, -1, SQLITE_STATIC);
    bind_text_or_null(st, 3, o->meta);
    sqlite3_bind_int64(st, 4, o->priority);
    sqlite3_bind_int(st, 5, o->max_attempts ? o->max_attempts : TOCSIN_DEFAULT_MAX_ATTEMPTS);
    sqlite3_bind_int64(st, 6, run_at);
    sqlite3_bind_int64(st, 7, now);
    bind_i64_or_null(st, 8, o->expires_ms ? now + o->expires_ms : 0);
    bind_text_or_null(st, 9, o->unique_key);
    /* No RETURNING: it buffers its row in an ephemeral table. Without one,
     * the row count and last rowid of this statement say the same. */
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) return tc_sqlerr(db, rc, "enqueue");
    if (sqlite3_changes(db->conn) == 1) {
        *out_id = sqlite3_last_insert_rowid(db->conn);
        return TOCSIN_OK;
    }
    /* A live job holds the unique key: hand back its id. */
    if (!(st = tc_stmt(db, SQL_FIND_UNIQUE))) return TC_ERRCODE;
    sqlite3_bind_text(st, 1, s->queue, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, o->unique_key, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) *out_id = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    if (rc != SQLITE_ROW) return tc_sqlerr(db, rc, "enqueue: find job holding unique_key");
    return TOCSIN_OK;
}

int tocsin_queue_enqueue_many(tocsin_db *db, int64_t *out_ids, const tocsin_job_spec *specs,
                              size_t n) {
    tc_op op;
    size_t i;
    int64_t now;
    int rc = TOCSIN_OK;
    CHECK_DB(db);
    if (!out_ids || (!specs && n)) return tc_err(db, TOCSIN_INVALID, "out_ids and specs must not be NULL");
    for (i = 0; i < n; i++) {
        if ((rc = check_spec(db, &specs[i])) != TOCSIN_OK) {
            if (n > 1) {
                char msg[sizeof tc_tls()->msg];
                memcpy(msg, tc_tls()->msg, sizeof msg);
                tc_err(db, rc, "job %zu: %s", i, msg);
            }
            return rc;
        }
    }
    if (n == 0) return TOCSIN_OK;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    now = tocsin_now(db);
    for (i = 0; i < n && rc == TOCSIN_OK; i++) rc = insert_job(db, &out_ids[i], &specs[i], now);
    return tc_op_end(db, &op, rc);
}

int tocsin_queue_enqueue(tocsin_db *db, int64_t *out_id, const char *queue, const char *payload,
                         const tocsin_enqueue_opts *opts) {
    tocsin_job_spec s;
    s.queue = queue;
    s.payload = payload;
    s.opts = opts;
    if (db && !out_id) {
        tc_clear(db);
        return tc_err(db, TOCSIN_INVALID, "out_id must not be NULL");
    }
    return tocsin_queue_enqueue_many(db, out_id, &s, 1);
}

/* ---- claim ---------------------------------------------------------------- */

/* Leases the selected jobs (already in claim order) to `worker` and makes the
 * structs show the leased rows, as a fresh read would. */
static int lease_jobs(tocsin_db *db, tocsin_job *jobs, size_t n, const char *worker, int64_t now,
                      int64_t visibility_ms) {
    /* SQLite computes now + visibility_ms in the row; mirror its int64 result. */
    int64_t until = visibility_ms > INT64_MAX - now ? INT64_MAX : now + visibility_ms;
    size_t i;
    int rc;
    for (i = 0; i < n; i++) {
        tocsin_job *j = &jobs[i];
        sqlite3_stmt *st = tc_stmt(db, SQL_CLAIM_LEASE);
        char *state, *who;
        if (!st) return TC_ERRCODE;
        sqlite3_bind_int64(st, 1, j->id);
        sqlite3_bind_text(st, 2, worker, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, now);
        sqlite3_bind_int64(st, 4, visibility_ms);
        if ((rc = tc_step_done(db, st, "claim")) != TOCSIN_OK) return rc;
        if (!(state = tc_strdup("processing")) || !(who = tc_strdup(worker))) {
            sqlite3_free(state);
            return tc_err(db, TOCSIN_NOMEM, "claim: out of memory");
        }
        sqlite3_free(j->state);
        sqlite3_free(j->worker);
        j->state = state;
        j->worker = who;
        j->attempts++;
        j->token = j->attempts;
        j->lease_until = until;
    }
    return TOCSIN_OK;
}

/* Reclaims lapsed leases and expires stale pending jobs of `queue`. Sets
 * *paused. Runs inside the caller's write operation. */
static int claim_prepare(tocsin_db *db, const char *queue, int64_t now, int *paused) {
    sqlite3_stmt *st = tc_stmt(db, SQL_CLAIM_CHECK);
    int rc, lapsed, expired;
    if (!st) return TC_ERRCODE;
    sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, now);
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(st);
        return tc_sqlerr(db, rc, "claim");
    }
    *paused = sqlite3_column_int(st, 0);
    lapsed = sqlite3_column_int(st, 1);
    expired = sqlite3_column_int(st, 2);
    sqlite3_reset(st);
    rc = TOCSIN_OK;
    if (lapsed) {
        rc = run_qnow(db, SQL_LAPSED_DEAD, queue, now, "reclaim lapsed leases");
        if (rc == TOCSIN_OK) rc = run_qnow(db, SQL_LAPSED_DELETE, queue, now, "reclaim lapsed leases");
        if (rc == TOCSIN_OK) rc = run_qnow(db, SQL_LAPSED_REQUEUE, queue, now, "reclaim lapsed leases");
    }
    if (expired && rc == TOCSIN_OK) {
        rc = run_qnow(db, SQL_EXPIRED_DEAD, queue, now, "expire jobs");
        if (rc == TOCSIN_OK) rc = run_qnow(db, SQL_EXPIRED_DELETE, queue, now, "expire jobs");
    }
    return rc;
}

int tocsin_queue_claim(tocsin_db *db, tocsin_job **out_jobs, size_t *out_n, const char *queue,
                       const char *worker, size_t max, int64_t visibility_ms) {
    tc_op op;
    sqlite3_stmt *st;
    int64_t now;
    int rc, paused = 0;
    CHECK_DB(db);
    if (!out_jobs || !out_n) return tc_err(db, TOCSIN_INVALID, "out_jobs and out_n must not be NULL");
    *out_jobs = NULL;
    *out_n = 0;
    if ((rc = tc_check_name(db, "queue name", queue)) != TOCSIN_OK) return rc;
    if ((rc = tc_check_name(db, "worker id", worker)) != TOCSIN_OK) return rc;
    if (max < 1 || max > TC_MAX_CLAIM)
        return tc_err(db, TOCSIN_INVALID, "claim count must be between 1 and %d", TC_MAX_CLAIM);
    if (visibility_ms < 1) return tc_err(db, TOCSIN_INVALID, "visibility_ms must be >= 1");
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    now = tocsin_now(db);
    rc = claim_prepare(db, queue, now, &paused);
    if (rc == TOCSIN_OK && !paused) {
        if (!(st = tc_stmt(db, SQL_CLAIM_SELECT))) {
            rc = TC_ERRCODE;
        } else {
            sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
            sqlite3_bind_int64(st, 2, now);
            sqlite3_bind_int64(st, 3, (sqlite3_int64)max);
            rc = collect_jobs(db, st, max, out_jobs, out_n, "claim");
        }
        if (rc == TOCSIN_OK && *out_n) rc = lease_jobs(db, *out_jobs, *out_n, worker, now, visibility_ms);
    }
    rc = tc_op_end(db, &op, rc);
    if (rc != TOCSIN_OK) {
        tocsin_jobs_free(*out_jobs, *out_n);
        *out_jobs = NULL;
        *out_n = 0;
        return rc;
    }
    return TOCSIN_OK;
}

/* ---- lease operations ----------------------------------------------------- */

/* Is (id, token) the current lease? Sets *attempts and *max when it is. */
static int holder(tocsin_db *db, int *held, int64_t id, int64_t token, int *attempts, int *max) {
    sqlite3_stmt *st = tc_stmt(db, SQL_HOLDER);
    int rc;
    if (!st) return TC_ERRCODE;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int64(st, 2, token);
    rc = sqlite3_step(st);
    *held = rc == SQLITE_ROW;
    if (*held) {
        *attempts = sqlite3_column_int(st, 0);
        *max = sqlite3_column_int(st, 1);
    }
    sqlite3_reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return tc_sqlerr(db, rc, "check lease");
    return TOCSIN_OK;
}

static int check_error_text(tocsin_db *db, const char *error) {
    if (error && strlen(error) > 65536)
        return tc_err(db, TOCSIN_TOOBIG, "error text is longer than 65536 bytes");
    return TOCSIN_OK;
}

int tocsin_job_ack(tocsin_db *db, int *out_ok, int64_t id, int64_t token) {
    size_t acked = 0;
    int rc = tocsin_job_ack_batch(db, &acked, &id, &token, 1);
    if (out_ok) *out_ok = acked == 1;
    return rc;
}

int tocsin_job_ack_batch(tocsin_db *db, size_t *out_acked, const int64_t *ids,
                         const int64_t *tokens, size_t n) {
    tc_op op;
    sqlite3_stmt *st;
    size_t i, acked = 0;
    int rc = TOCSIN_OK;
    CHECK_DB(db);
    if (!out_acked || ((!ids || !tokens) && n))
        return tc_err(db, TOCSIN_INVALID, "out_acked, ids and tokens must not be NULL");
    *out_acked = 0;
    if (n == 0) return TOCSIN_OK;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    for (i = 0; i < n && rc == TOCSIN_OK; i++) {
        if (!(st = tc_stmt(db, SQL_ACK))) {
            rc = TC_ERRCODE;
            break;
        }
        sqlite3_bind_int64(st, 1, ids[i]);
        sqlite3_bind_int64(st, 2, tokens[i]);
        rc = tc_step_done(db, st, "ack");
        if (rc == TOCSIN_OK) acked += (size_t)sqlite3_changes(db->conn);
    }
    rc = tc_op_end(db, &op, rc);
    if (rc == TOCSIN_OK) *out_acked = acked;
    return rc;
}

int64_t tocsin_backoff_ms(int64_t base_ms, int64_t cap_ms, int attempts) {
    int64_t d = base_ms < 1 ? 1 : base_ms, half;
    int i;
    if (cap_ms < d) cap_ms = d;
    for (i = 1; i < attempts && d < cap_ms; i++) d = d > cap_ms / 2 ? cap_ms : d * 2;
    if (d > cap_ms) d = cap_ms;
    half = d / 2;
    return d - half + (half > 0 ? (int64_t)(tc_random() % (uint64_t)(half + 1)) : 0);
}

int tocsin_job_retry(tocsin_db *db, int *out_ok, int64_t id, int64_t token, int64_t delay_ms,
                     const char *error) {
    tc_op op;
    sqlite3_stmt *st;
    int rc, held = 0, attempts = 0, max = 0;
    int64_t now;
    CHECK_DB(db);
    if (!out_ok) return tc_err(db, TOCSIN_INVALID, "out_ok must not be NULL");
    *out_ok = 0;
    if ((rc = check_error_text(db, error)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    now = tocsin_now(db);
    rc = holder(db, &held, id, token, &attempts, &max);
    if (rc == TOCSIN_OK && held) {
        if (attempts >= max) {
            rc = to_dead(db, id, "max_attempts", error, now);
        } else if (!(st = tc_stmt(db, SQL_RETRY))) {
            rc = TC_ERRCODE;
        } else {
            if (delay_ms < 0)
                delay_ms = tocsin_backoff_ms(TOCSIN_BACKOFF_BASE_MS, TOCSIN_BACKOFF_CAP_MS, attempts);
            sqlite3_bind_int64(st, 1, id);
            sqlite3_bind_int64(st, 2, now + delay_ms);
            bind_text_or_null(st, 3, error);
            rc = tc_step_done(db, st, "retry");
        }
    }
    rc = tc_op_end(db, &op, rc);
    if (rc == TOCSIN_OK) *out_ok = held;
    return rc;
}

int tocsin_job_fail(tocsin_db *db, int *out_ok, int64_t id, int64_t token, const char *error) {
    tc_op op;
    int rc, held = 0, attempts = 0, max = 0;
    CHECK_DB(db);
    if (!out_ok) return tc_err(db, TOCSIN_INVALID, "out_ok must not be NULL");
    *out_ok = 0;
    if ((rc = check_error_text(db, error)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    rc = holder(db, &held, id, token, &attempts, &max);
    if (rc == TOCSIN_OK && held) rc = to_dead(db, id, "failed", error, tocsin_now(db));
    rc = tc_op_end(db, &op, rc);
    if (rc == TOCSIN_OK) *out_ok = held;
    return rc;
}

int tocsin_job_heartbeat(tocsin_db *db, int *out_ok, int64_t id, int64_t token,
                         int64_t extend_ms) {
    tc_op op;
    sqlite3_stmt *st;
    int rc;
    CHECK_DB(db);
    if (!out_ok) return tc_err(db, TOCSIN_INVALID, "out_ok must not be NULL");
    *out_ok = 0;
    if (extend_ms < 1) return tc_err(db, TOCSIN_INVALID, "extend_ms must be >= 1");
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, SQL_HEARTBEAT))) {
        rc = TC_ERRCODE;
    } else {
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int64(st, 2, token);
        sqlite3_bind_int64(st, 3, tocsin_now(db) + extend_ms);
        rc = tc_step_done(db, st, "heartbeat");
        if (rc == TOCSIN_OK) *out_ok = sqlite3_changes(db->conn) == 1;
    }
    rc = tc_op_end(db, &op, rc);
    if (rc != TOCSIN_OK) *out_ok = 0;
    return rc;
}

int tocsin_job_cancel(tocsin_db *db, int *out_ok, int64_t id) {
    tc_op op;
    int rc;
    CHECK_DB(db);
    if (!out_ok) return tc_err(db, TOCSIN_INVALID, "out_ok must not be NULL");
    *out_ok = 0;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    rc = to_dead(db, id, "cancelled", NULL, tocsin_now(db));
    if (rc == TOCSIN_OK) *out_ok = sqlite3_changes(db->conn) == 1;
    rc = tc_op_end(db, &op, rc);
    if (rc != TOCSIN_OK) *out_ok = 0;
    return rc;
}

/* ---- reading -------------------------------------------------------------- */

static int get_one(tocsin_db *db, const char *sql, int64_t id, tocsin_job **out) {
    sqlite3_stmt *st = tc_stmt(db, sql);
    size_t n;
    if (!st) return TC_ERRCODE;
    sqlite3_bind_int64(st, 1, id);
    return collect_jobs(db, st, 1, out, &n, "get job");
}

int tocsin_job_get(tocsin_db *db, tocsin_job **out_job, int64_t id) {
    tc_op op;
    int rc;
    CHECK_DB(db);
    if (!out_job) return tc_err(db, TOCSIN_INVALID, "out_job must not be NULL");
    *out_job = NULL;
    if ((rc = tc_op_begin(db, &op, 0)) != TOCSIN_OK) return rc;
    rc = get_one(db, SQL_GET_LIVE, id, out_job);
    if (rc == TOCSIN_OK && !*out_job) rc = get_one(db, SQL_GET_DEAD, id, out_job);
    return tc_op_end(db, &op, rc);
}

static int set_paused(tocsin_db *db, const char *queue, int paused) {
    tc_op op;
    sqlite3_stmt *st;
    int rc;
    CHECK_DB(db);
    if ((rc = tc_check_name(db, "queue name", queue)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, SQL_PAUSE))) {
        rc = TC_ERRCODE;
    } else {
        sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, paused);
        sqlite3_bind_int64(st, 3, tocsin_now(db));
        rc = tc_step_done(db, st, paused ? "pause" : "resume");
    }
    return tc_op_end(db, &op, rc);
}

int tocsin_queue_pause(tocsin_db *db, const char *queue) { return set_paused(db, queue, 1); }
int tocsin_queue_resume(tocsin_db *db, const char *queue) { return set_paused(db, queue, 0); }

int tocsin_queue_is_paused(tocsin_db *db, int *out_paused, const char *queue) {
    tc_op op;
    sqlite3_stmt *st;
    int rc;
    CHECK_DB(db);
    if (!out_paused) return tc_err(db, TOCSIN_INVALID, "out_paused must not be NULL");
    *out_paused = 0;
    if ((rc = tc_check_name(db, "queue name", queue)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 0)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, SQL_IS_PAUSED))) {
        rc = TC_ERRCODE;
    } else {
        sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
        if ((rc = sqlite3_step(st)) == SQLITE_ROW) *out_paused = sqlite3_column_int(st, 0);
        sqlite3_reset(st);
        rc = rc == SQLITE_ROW ? TOCSIN_OK : tc_sqlerr(db, rc, "is paused");
    }
    return tc_op_end(db, &op, rc);
}

static int stats_one(tocsin_db *db, tc_buf *b, const char *queue, int64_t now) {
    sqlite3_stmt *st = tc_stmt(db, SQL_STATS);
    int rc, first = 1;
    if (!st) return TC_ERRCODE;
    sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, now);
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(st);
        return tc_sqlerr(db, rc, "stats");
    }
    tc_buf_puts(b, "{");
    tc_buf_key(b, "queue", &first);
    tc_buf_jstr(b, queue);
    tc_buf_key(b, "pending", &first);
    tc_buf_i64(b, sqlite3_column_int64(st, 0));
    tc_buf_key(b, "scheduled", &first);
    tc_buf_i64(b, sqlite3_column_int64(st, 1));
    tc_buf_key(b, "processing", &first);
    tc_buf_i64(b, sqlite3_column_int64(st, 2));
    tc_buf_key(b, "dead", &first);
    tc_buf_i64(b, sqlite3_column_int64(st, 3));
    tc_buf_key(b, "oldest_pending_age_ms", &first);
    tc_buf_i64(b, sqlite3_column_type(st, 4) == SQLITE_NULL ? 0 : now - sqlite3_column_int64(st, 4));
    tc_buf_key(b, "paused", &first);
    tc_buf_puts(b, sqlite3_column_int(st, 5) ? "true" : "false");
    tc_buf_puts(b, "}");
    sqlite3_reset(st);
    return TOCSIN_OK;
}

int tocsin_queue_stats(tocsin_db *db, char **out_json, const char *queue) {
    tc_op op;
    tc_buf b = {0};
    int rc;
    int64_t now;
    CHECK_DB(db);
    if (!out_json) return tc_err(db, TOCSIN_INVALID, "out_json must not be NULL");
    *out_json = NULL;
    if (queue && (rc = tc_check_name(db, "queue name", queue)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 0)) != TOCSIN_OK) return rc;
    now = tocsin_now(db);
    if (queue) {
        rc = stats_one(db, &b, queue, now);
    } else {
        /* Collect names first: SQL_STATS is stepped for each of them. */
        sqlite3_stmt *st = tc_stmt(db, SQL_QUEUE_NAMES);
        char **names = NULL;
        size_t n = 0, cap = 0, i;
        int src = SQLITE_DONE;
        if (!st) rc = TC_ERRCODE;
        while (st && (src = sqlite3_step(st)) == SQLITE_ROW) {
            if (n == cap) {
                char **p = sqlite3_realloc64(names, (cap = cap ? cap * 2 : 16) * sizeof *names);
                if (!p) break;
                names = p;
            }
            if (!(names[n] = tc_col_text(st, 0))) break;
            n++;
        }
        if (st) sqlite3_reset(st);
        if (st && src == SQLITE_ROW) rc = tc_err(db, TOCSIN_NOMEM, "stats: out of memory");
        else if (st && src != SQLITE_DONE) rc = tc_sqlerr(db, src, "stats");
        tc_buf_puts(&b, "{\"queues\":[");
        for (i = 0; i < n && rc == TOCSIN_OK; i++) {
            if (i) tc_buf_puts(&b, ",");
            rc = stats_one(db, &b, names[i], now);
        }
        tc_buf_puts(&b, "]}");
        for (i = 0; i < n; i++) sqlite3_free(names[i]);
        sqlite3_free(names);
    }
    rc = tc_op_end(db, &op, rc);
    if (rc == TOCSIN_OK && !(*out_json = tc_buf_take(&b)))
        return tc_err(db, TOCSIN_NOMEM, "stats: out of memory");
    sqlite3_free(b.p);
    return rc;
}

static void earliest(int64_t *acc, int64_t t) {
    if (*acc < 0 || t < *acc) *acc = t;
}

/* The earliest pending run_at of `queue`, hopping across priority groups. */
static int min_run_at(tocsin_db *db, const char *queue, int64_t *acc) {
    int64_t prio = 0;
    int rc, first = 1;
    for (;;) {
        sqlite3_stmt *st = tc_stmt(db, first ? SQL_FIRST_GROUP : SQL_NEXT_GROUP);
        if (!st) return TC_ERRCODE;
        sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
        if (!first) sqlite3_bind_int64(st, 2, prio);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            prio = sqlite3_column_int64(st, 0);
            earliest(acc, sqlite3_column_int64(st, 1));
        }
        sqlite3_reset(st);
        if (rc == SQLITE_DONE) return TOCSIN_OK;
        if (rc != SQLITE_ROW) return tc_sqlerr(db, rc, "next deadline");
        first = 0;
    }
}

int tocsin_queue_next_deadline(tocsin_db *db, int64_t *out_ms, const char *const *queues,
                               size_t n) {
    tc_op op;
    size_t i;
    int rc;
    int64_t acc = -1;
    CHECK_DB(db);
    if (!out_ms || (!queues && n)) return tc_err(db, TOCSIN_INVALID, "out_ms and queues must not be NULL");
    *out_ms = -1;
    for (i = 0; i < n; i++)
        if ((rc = tc_check_name(db, "queue name", queues[i])) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 0)) != TOCSIN_OK) return rc;
    for (i = 0; i < n && rc == TOCSIN_OK; i++) {
        sqlite3_stmt *st = tc_stmt(db, SQL_OTHER_DEADLINES);
        int paused = 0;
        if (!st) {
            rc = TC_ERRCODE;
            break;
        }
        sqlite3_bind_text(st, 1, queues[i], -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            if (sqlite3_column_type(st, 0) != SQLITE_NULL) earliest(&acc, sqlite3_column_int64(st, 0));
            paused = sqlite3_column_int(st, 2);
            if (!paused && sqlite3_column_type(st, 1) != SQLITE_NULL)
                earliest(&acc, sqlite3_column_int64(st, 1));
        }
        sqlite3_reset(st);
        rc = rc == SQLITE_ROW ? TOCSIN_OK : tc_sqlerr(db, rc, "next deadline");
        if (rc == TOCSIN_OK && !paused) rc = min_run_at(db, queues[i], &acc);
    }
    rc = tc_op_end(db, &op, rc);
    if (rc == TOCSIN_OK) *out_ms = acc;
    return rc;
}

/* ---- dead letters --------------------------------------------------------- */

int tocsin_dead_list(tocsin_db *db, tocsin_job **out_jobs, size_t *out_n, const char *queue,
                     int64_t after_id, size_t limit) {
    tc_op op;
    sqlite3_stmt *st;
    int rc;
    CHECK_DB(db);
    if (!out_jobs || !out_n) return tc_err(db, TOCSIN_INVALID, "out_jobs and out_n must not be NULL");
    *out_jobs = NULL;
    *out_n = 0;
    if (queue && (rc = tc_check_name(db, "queue name", queue)) != TOCSIN_OK) return rc;
    if (limit < 1 || limit > TC_MAX_CLAIM)
        return tc_err(db, TOCSIN_INVALID, "limit must be between 1 and %d", TC_MAX_CLAIM);
    if ((rc = tc_op_begin(db, &op, 0)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, queue ? SQL_DEAD_LIST_Q : SQL_DEAD_LIST_ALL))) {
        rc = TC_ERRCODE;
    } else {
        if (queue) sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, after_id);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)limit);
        rc = collect_jobs(db, st, limit, out_jobs, out_n, "list dead letters");
    }
    return tc_op_end(db, &op, rc);
}

int tocsin_dead_requeue(tocsin_db *db, int *out_ok, int64_t id) {
    tc_op op;
    sqlite3_stmt *st;
    int rc;
    CHECK_DB(db);
    if (!out_ok) return tc_err(db, TOCSIN_INVALID, "out_ok must not be NULL");
    *out_ok = 0;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, SQL_REQUEUE))) {
        rc = TC_ERRCODE;
    } else {
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int64(st, 2, tocsin_now(db));
        rc = sqlite3_step(st);
        sqlite3_reset(st);
        if (rc == SQLITE_CONSTRAINT_UNIQUE)
            rc = tc_err(db, TOCSIN_INVALID,
                        "requeue job %lld: a live job of its queue holds the same unique_key",
                        (long long)id);
        else if (rc != SQLITE_DONE)
            rc = tc_sqlerr(db, rc, "requeue");
        else {
            rc = TOCSIN_OK;
            *out_ok = sqlite3_changes(db->conn) == 1;
        }
    }
    if (rc == TOCSIN_OK && *out_ok) {
        if (!(st = tc_stmt(db, SQL_DEAD_DELETE_ONE))) {
            rc = TC_ERRCODE;
        } else {
            sqlite3_bind_int64(st, 1, id);
            rc = tc_step_done(db, st, "requeue");
        }
    }
    rc = tc_op_end(db, &op, rc);
    if (rc != TOCSIN_OK) *out_ok = 0;
    return rc;
}

int tocsin_dead_purge(tocsin_db *db, int64_t *out_n, const char *queue, int64_t before_ms) {
    tc_op op;
    sqlite3_stmt *st;
    int rc;
    CHECK_DB(db);
    if (!out_n) return tc_err(db, TOCSIN_INVALID, "out_n must not be NULL");
    *out_n = 0;
    if (queue && (rc = tc_check_name(db, "queue name", queue)) != TOCSIN_OK) return rc;
    if (before_ms < 0) return tc_err(db, TOCSIN_INVALID, "before_ms must be >= 0");
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, queue ? SQL_PURGE_Q : SQL_PURGE_ALL))) {
        rc = TC_ERRCODE;
    } else {
        if (queue) sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, before_ms);
        rc = tc_step_done(db, st, "purge dead letters");
        if (rc == TOCSIN_OK) *out_n = sqlite3_changes(db->conn);
    }
    rc = tc_op_end(db, &op, rc);
    if (rc != TOCSIN_OK) *out_n = 0;
    return rc;
}

/* ---- JSON for the SQL surface --------------------------------------------- */

static void job_json(tc_buf *b, const tocsin_job *j) {
    int first = 1;
    tc_buf_puts(b, "{");
    tc_buf_key(b, "id", &first);
    tc_buf_i64(b, j->id);
    tc_buf_key(b, "queue", &first);
    tc_buf_jstr(b, j->queue);
    tc_buf_key(b, "state", &first);
    tc_buf_jstr(b, j->state);
    tc_buf_key(b, "payload", &first);
    tc_buf_jraw(b, j->payload);
    tc_buf_key(b, "meta", &first);
    tc_buf_jraw(b, j->meta);
    tc_buf_key(b, "priority", &first);
    tc_buf_i64(b, j->priority);
    tc_buf_key(b, "attempts", &first);
    tc_buf_i64(b, j->attempts);
    tc_buf_key(b, "max_attempts", &first);
    tc_buf_i64(b, j->max_attempts);
    tc_buf_key(b, "token", &first);
    tc_buf_i64(b, j->token);
    tc_buf_key(b, "run_at", &first);
    tc_buf_i64(b, j->run_at);
    tc_buf_key(b, "created_at", &first);
    tc_buf_i64(b, j->created_at);
    tc_buf_key(b, "lease_until", &first);
    if (j->lease_until) tc_buf_i64(b, j->lease_until); else tc_buf_puts(b, "null");
    tc_buf_key(b, "expires_at", &first);
    if (j->expires_at) tc_buf_i64(b, j->expires_at); else tc_buf_puts(b, "null");
    tc_buf_key(b, "unique_key", &first);
    tc_buf_jstr(b, j->unique_key);
    tc_buf_key(b, "worker", &first);
    tc_buf_jstr(b, j->worker);
    tc_buf_key(b, "last_error", &first);
    tc_buf_jstr(b, j->last_error);
    if (j->reason) {
        tc_buf_key(b, "reason", &first);
        tc_buf_jstr(b, j->reason);
        tc_buf_key(b, "died_at", &first);
        tc_buf_i64(b, j->died_at);
    }
    tc_buf_puts(b, "}");
}

char *tc_job_json(const tocsin_job *job) {
    tc_buf b = {0};
    job_json(&b, job);
    return tc_buf_take(&b);
}

char *tc_jobs_json(const tocsin_job *jobs, size_t n) {
    tc_buf b = {0};
    size_t i;
    tc_buf_puts(&b, "[");
    for (i = 0; i < n; i++) {
        if (i) tc_buf_puts(&b, ",");
        job_json(&b, &jobs[i]);
    }
    tc_buf_puts(&b, "]");
    return tc_buf_take(&b);
}

/* ---- waiting until something is claimable ---------------------------------- */

typedef struct queue_wait {
    tocsin_db *db;
    const char *const *queues;
    size_t n;
    int64_t deadline;
} queue_wait;

/* Read-only: is anything due? If not, sleep until the earliest deadline. */
static int queue_wait_check(void *p, int *done, int64_t *sleep_ms) {
    queue_wait *q = p;
    int64_t next = -1;
    int rc = tocsin_queue_next_deadline(q->db, &next, q->queues, q->n);
    if (rc != TOCSIN_OK) return rc;
    if (next >= 0 && next <= tocsin_now(q->db)) {
        *done = 1;
        return TOCSIN_OK;
    }
    return tc_sleep_until_clock(q->db, q->deadline, next, sleep_ms, "nothing became claimable");
}

int tocsin_queue_wait(tocsin_db *db, const char *const *queues, size_t n, int64_t deadline_ms,
                      tocsin_sub *sub) {
    queue_wait q;
    size_t i;
    int rc;
    CHECK_DB(db);
    if (!queues || n == 0) return tc_err(db, TOCSIN_INVALID, "queues must name at least one queue");
    for (i = 0; i < n; i++)
        if ((rc = tc_check_name(db, "queue name", queues[i])) != TOCSIN_OK) return rc;
    if ((rc = tc_wake_wait_sub(db, &sub)) != TOCSIN_OK) return rc;
    q.db = db;
    q.queues = queues;
    q.n = n;
    q.deadline = deadline_ms < 0 ? -1 : deadline_ms;
    return tc_wait_loop(sub, queue_wait_check, &q);
}
