/*
 * The job queue: every SQL statement of the queue lives in this file.
 *
 * A job lives in _tocsin_jobs while live and moves to _tocsin_dead when it
 * fails for good; ack deletes it. Live jobs are in one of three states
 * (docs/schema.md, "Job states"):
 *   scheduled   run_at was in the future when the row was written (a delayed
 *               job, a retry waiting out its backoff); indexed by run_at only;
 *   pending     claimable: in the claim index, in claim order;
 *   processing  leased; in the same index, by lease end.
 * A claim first promotes the scheduled jobs that became due (a bounded batch,
 * in its own write transaction), so it never walks jobs scheduled for later,
 * whatever their priority: its cost is a few index probes plus the jobs it
 * takes.
 *
 * A claim is a lease whose fencing token is id * 2^20 + attempts: each claim
 * increments `attempts`, so a holder whose lease was reclaimed and handed to
 * someone else holds a stale token, and a token names one job, so a token
 * presented with another job's id is refused too.
 */
#include "internal.h"

/* Column lists shared by every statement that reads jobs (see read_job). */
#define JOB_COLS_STATE(state)                                                              \
    "id, queue, " state ", payload, meta, priority, attempts, max_attempts, run_at, "       \
    "created_at, lease_until, expires_at, unique_key, worker, last_error, NULL, NULL"
#define JOB_COLS JOB_COLS_STATE("state")
#define DEAD_COLS                                                                              \
    "id, queue, 'dead', payload, meta, priority, attempts, max_attempts, run_at, created_at, " \
    "NULL, expires_at, unique_key, worker, last_error, reason, died_at"

/* The partial-index terms, spelled exactly as in the index definitions (the
 * planner matches them literally):
 *   READY      _tocsin_jobs_claim: pending (lease_until IS NULL) and processing;
 *   SCHEDULED  _tocsin_jobs_scheduled;
 *   UNLEASED   _tocsin_jobs_expiry: jobs that can still expire. */
#define READY "state <> 'scheduled'"
#define SCHEDULED "state = 'scheduled'"
#define UNLEASED "expires_at IS NOT NULL AND state <> 'processing'"
#define PENDING "lease_until IS NULL AND " READY
#define LEASED "lease_until IS NOT NULL AND " READY
/* Claim order: the order of the pending entries of _tocsin_jobs_claim. */
#define CLAIM_ORDER "priority DESC, run_at, id"

#define INSERT_JOB(id)                                                                        \
    "INSERT INTO _tocsin_jobs(id, queue, state, payload, meta, priority, max_attempts, run_at," \
    " created_at, expires_at, unique_key) VALUES (" id ", ?1, ?10, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)" \
    " ON CONFLICT(queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING"
/* The first job of an enqueue reads the next id in its own statement (its
 * write takes the lock); the write lock held, the next ones follow it. */
static const char SQL_INSERT[] = INSERT_JOB(TC_NEXT_ID("_tocsin_jobs"));
/* On an own connection, a job inserted outside an explicit transaction takes
 * the id its handle remembers when nothing changed the file since (db.c's
 * _tocsin_next_id), else reads it: coalesce evaluates the reads only then. */
static const char SQL_INSERT_HINTED[] =
    INSERT_JOB("coalesce(_tocsin_next_id(), " TC_NEXT_ID("_tocsin_jobs") ")");
static const char SQL_INSERT_AT[] = INSERT_JOB("?11");
/* Batch statements take up to BATCH_CHUNK jobs each (an enqueue, a claim's
 * lease, an ack): one statement's own cost (bind, step, halt, reset: ~7k
 * instructions) was a fifth of a job's cost in batches of 100. */
#define BATCH_CHUNK 100
/* Payload-only jobs of one queue, BATCH_CHUNK at a time: ?1 is the first one's
 * id, ?2 the queue, ?5 on the payloads in order. The unbound ones are NULL and
 * their rows are left out (no job has a NULL payload), so one statement serves
 * any count up to its rows; a batch of at most 10 takes the 10-row one (each
 * empty row costs a few dozen instructions). Each payload is bound as it is,
 * stored as its exact text: the JSON array of payload strings that json_each
 * read before cost a quarter of each job's instructions (encoding it, then
 * SQLite's parse of it). */
#define VROW(k) "(" #k ",?)"
#define VROWS10(d)                                                                              \
    VROW(d##0) "," VROW(d##1) "," VROW(d##2) "," VROW(d##3) "," VROW(d##4) "," VROW(d##5) "," \
        VROW(d##6) "," VROW(d##7) "," VROW(d##8) "," VROW(d##9)
#define INSERT_MANY(rows)                                                                         \
    "INSERT INTO _tocsin_jobs(id, queue, state, payload, meta, priority, max_attempts, run_at,"  \
    " created_at, expires_at, unique_key)"                                                       \
    " SELECT ?1 + column1, ?2, 'pending', column2, NULL, 0, ?3, ?4, ?4, NULL, NULL FROM (VALUES " \
    rows ") WHERE column2 IS NOT NULL"
#define INSERT_MANY_SMALL 10
#define INSERT_MANY_PARAMS (4 + BATCH_CHUNK)
static const char SQL_INSERT_MANY_SMALL[] = INSERT_MANY(VROWS10());
static const char SQL_INSERT_MANY[] = INSERT_MANY(
    VROWS10() "," VROWS10(1) "," VROWS10(2) "," VROWS10(3) "," VROWS10(4) "," VROWS10(5) ","
    VROWS10(6) "," VROWS10(7) "," VROWS10(8) "," VROWS10(9));
static const char SQL_NEXT_ID[] = "SELECT " TC_NEXT_ID("_tocsin_jobs");
/* An enqueue that met a live job's unique key still uses up the id it would
 * have taken, as AUTOINCREMENT did in schema v1: the ids a sequence of calls
 * gets do not depend on the format. */
static const char SQL_SKIP_ID[] =
    "UPDATE main.sqlite_sequence SET seq = " TC_NEXT_ID("_tocsin_jobs") " WHERE name = '_tocsin_jobs'";
/* The job holding a unique key, and whether it has expired (unleased, past
 * its expires_at: dead at the next claim, it holds the key no longer). */
static const char SQL_FIND_UNIQUE[] =
    "SELECT id, expires_at IS NOT NULL AND expires_at <= ?3 AND state <> 'processing'"
    " FROM _tocsin_jobs WHERE queue = ?1 AND unique_key = ?2";

/* What a claim must do before handing out jobs: is the queue paused, has a
 * lease lapsed, has a job expired, has a scheduled job become due? Four index
 * probes, one statement. */
static const char SQL_CLAIM_CHECK[] =
    "SELECT (SELECT paused FROM _tocsin_queues WHERE name = ?1),"
    " EXISTS (SELECT 1 FROM _tocsin_jobs WHERE queue = ?1 AND lease_until <= ?2 AND " READY "),"
    " EXISTS (SELECT 1 FROM _tocsin_jobs WHERE queue = ?1 AND expires_at <= ?2 AND " UNLEASED "),"
    " EXISTS (SELECT 1 FROM _tocsin_jobs WHERE queue = ?1 AND " SCHEDULED " AND run_at <= ?2)";

#define TO_DEAD_PREFIX                                                               \
    "INSERT INTO _tocsin_dead(id, queue, payload, meta, priority, attempts, max_attempts,"   \
    " run_at, created_at, expires_at, worker, unique_key, last_error, reason, died_at)"      \
    " SELECT id, queue, payload, meta, priority, attempts, max_attempts, run_at, created_at," \
    " expires_at, worker, unique_key, "

/* Lapsed leases: exhausted jobs die, the others go back to pending. */
#define LAPSED "queue = ?1 AND lease_until <= ?2 AND " READY
static const char SQL_LAPSED_DEAD[] =
    TO_DEAD_PREFIX "coalesce(last_error, 'lease expired'), 'max_attempts', ?2 FROM _tocsin_jobs"
    " WHERE " LAPSED " AND attempts >= max_attempts";
static const char SQL_LAPSED_DELETE[] =
    "DELETE FROM _tocsin_jobs WHERE " LAPSED " AND attempts >= max_attempts";
static const char SQL_LAPSED_REQUEUE[] =
    "UPDATE _tocsin_jobs SET state = 'pending', lease_until = NULL, last_error = 'lease expired'"
    " WHERE " LAPSED;

/* Unclaimed (scheduled or pending) jobs past their expiry die with reason 'expired'. */
#define EXPIRED "queue = ?1 AND expires_at <= ?2 AND " UNLEASED
static const char SQL_EXPIRED_DEAD[] =
    TO_DEAD_PREFIX "last_error, 'expired', ?2 FROM _tocsin_jobs WHERE " EXPIRED;
static const char SQL_EXPIRED_DELETE[] = "DELETE FROM _tocsin_jobs WHERE " EXPIRED;

/* Scheduled jobs that became due move to pending, earliest first, at most ?3
 * per claim (so one claim never carries a burst of millions). */
static const char SQL_PROMOTE[] =
    "UPDATE _tocsin_jobs SET state = 'pending' WHERE id IN (SELECT id FROM _tocsin_jobs"
    " WHERE queue = ?1 AND " SCHEDULED " AND run_at <= ?2 ORDER BY run_at LIMIT ?3)";
#define TC_PROMOTE_MAX 1000

/* A claim reads the jobs it takes, in claim order, then leases each by id.
 * (One UPDATE .. WHERE id IN (..) RETURNING would build two ephemeral tables
 * per call, which cost more than the commit on the one-job path.) */
static const char SQL_CLAIM_SELECT[] =
    "SELECT " JOB_COLS " FROM _tocsin_jobs WHERE queue = ?1 AND " PENDING
    " ORDER BY " CLAIM_ORDER " LIMIT ?3";
/* The one-job claim, the hot path: a bound LIMIT makes SQLite re-prepare the
 * statement at every execution (the planner reads the LIMIT's value, so each
 * bind expires the statement), which cost more than the rest of the claim's
 * SELECT; a literal LIMIT 1 keeps the prepared statement. */
static const char SQL_CLAIM_SELECT_ONE[] =
    "SELECT " JOB_COLS " FROM _tocsin_jobs WHERE queue = ?1 AND " PENDING
    " ORDER BY " CLAIM_ORDER " LIMIT 1";
/* The same while a burst of due jobs is still being promoted (the promotion
 * hit its bound): due scheduled jobs compete in claim order too, so the order
 * stays exact. Costs a scan of the due jobs not yet promoted, never of the
 * jobs scheduled for later. */
static const char SQL_CLAIM_SELECT_BURST[] =
    "SELECT " JOB_COLS " FROM _tocsin_jobs WHERE id IN (SELECT id FROM ("
    " SELECT * FROM (SELECT id, priority, run_at FROM _tocsin_jobs WHERE queue = ?1 AND " PENDING
    "  ORDER BY " CLAIM_ORDER " LIMIT ?3)"
    " UNION ALL SELECT * FROM (SELECT id, priority, run_at FROM _tocsin_jobs"
    "  WHERE queue = ?1 AND " SCHEDULED " AND run_at <= ?2 ORDER BY " CLAIM_ORDER " LIMIT ?3)"
    " ORDER BY " CLAIM_ORDER " LIMIT ?3)) ORDER BY " CLAIM_ORDER;
static const char SQL_CLAIM_LEASE[] =
    "UPDATE _tocsin_jobs SET state = 'processing', attempts = attempts + 1, worker = ?2,"
    " lease_until = ?3 WHERE id = ?1";
/* The batch forms (BATCH_CHUNK): their ids (tokens for an ack) in a JSON array. */
static const char SQL_CLAIM_LEASE_MANY[] =
    "UPDATE _tocsin_jobs SET state = 'processing', attempts = attempts + 1, worker = ?2,"
    " lease_until = ?3 WHERE id IN (SELECT value FROM json_each(?1))";

/* The lease check every holder operation starts with. */
static const char SQL_HOLDER[] =
    "SELECT attempts, max_attempts FROM _tocsin_jobs"
    " WHERE id = ?1 AND state = 'processing' AND attempts = ?2";
static const char SQL_ACK[] =
    "DELETE FROM _tocsin_jobs WHERE id = ?1 AND state = 'processing' AND attempts = ?2";
/* ?1: the tokens (id << TC_TOKEN_SHIFT | attempts) of the leases to end */
static const char SQL_ACK_MANY[] =
    "DELETE FROM _tocsin_jobs WHERE id IN (SELECT j.id FROM json_each(?1) AS t, _tocsin_jobs AS j"
    " WHERE j.id = t.value >> 20 AND j.attempts = t.value & 1048575 AND j.state = 'processing')";
/* Leases of ?1 (as SQL_ACK_MANY) still there after their DELETE: a trigger dropped it. */
static const char SQL_ACK_LEFT[] =
    "SELECT EXISTS (SELECT 1 FROM json_each(?1) AS t, _tocsin_jobs AS j"
    " WHERE j.id = t.value >> 20 AND j.attempts = t.value & 1048575 AND j.state = 'processing')";
static const char SQL_RETRY[] =
    "UPDATE _tocsin_jobs SET state = ?4, run_at = ?2, lease_until = NULL, last_error = ?3"
    " WHERE id = ?1";
static const char SQL_HEARTBEAT[] =
    "UPDATE _tocsin_jobs SET lease_until = ?3"
    " WHERE id = ?1 AND state = 'processing' AND attempts = ?2";
/* A hand-back: pending (or scheduled) again, no attempt consumed -- the
 * claim's attempt is matched by one more allowed, and `attempts` is never
 * lowered, so the next claim's token differs from every earlier one. At the
 * max_attempts limit no more can be allowed: the hand-back then spends the
 * attempt, and when it was the last one the statement matches nothing and
 * the job dies instead (tc_job_hand_back). */
static const char SQL_HAND_BACK[] =
    "UPDATE _tocsin_jobs SET state = ?4, run_at = ?3, lease_until = NULL,"
    " last_error = coalesce(?5, last_error), handbacks = handbacks + 1,"
    " max_attempts = max_attempts + (max_attempts < 1000000)"
    " WHERE id = ?1 AND state = 'processing' AND attempts = ?2"
    " AND (max_attempts < 1000000 OR attempts < max_attempts) RETURNING handbacks";
static const char SQL_HANDBACKS[] = "SELECT handbacks FROM _tocsin_jobs WHERE id = ?1";
/* A dead worker's leases lapse at once: the next claim of its queue takes them. */
static const char SQL_RELEASE_WORKER[] =
    "UPDATE _tocsin_jobs SET lease_until = ?3"
    " WHERE queue = ?1 AND state = 'processing' AND lease_until > ?3 AND worker = ?2";
static const char SQL_ONE_DEAD[] =
    TO_DEAD_PREFIX "coalesce(?2, last_error), ?3, ?4 FROM _tocsin_jobs WHERE id = ?1";
static const char SQL_DELETE_ONE[] = "DELETE FROM _tocsin_jobs WHERE id = ?1";

/* A scheduled job whose run_at has passed is claimable (the next claim
 * promotes it): readers report it as pending. */
static const char SQL_GET_LIVE[] =
    "SELECT " JOB_COLS_STATE("CASE WHEN state = 'scheduled' AND run_at <= ?2 THEN 'pending'"
                             " ELSE state END") " FROM _tocsin_jobs WHERE id = ?1";
static const char SQL_GET_DEAD[] = "SELECT " DEAD_COLS " FROM _tocsin_dead WHERE id = ?1";

static const char SQL_PAUSE[] =
    "INSERT INTO _tocsin_queues(name, paused, updated_at) VALUES (?1, ?2, ?3)"
    " ON CONFLICT(name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at";
static const char SQL_IS_PAUSED[] =
    "SELECT coalesce((SELECT paused FROM _tocsin_queues WHERE name = ?1), 0)";

/* Counts are index range counts; "pending" includes the scheduled jobs that
 * are due but not yet promoted, "scheduled" is what is due later. */
static const char SQL_STATS[] =
    "SELECT"
    " (SELECT count(*) FROM _tocsin_jobs WHERE queue = ?1 AND " PENDING "),"
    " (SELECT count(*) FROM _tocsin_jobs WHERE queue = ?1 AND " SCHEDULED " AND run_at <= ?2),"
    " (SELECT count(*) FROM _tocsin_jobs WHERE queue = ?1 AND " SCHEDULED " AND run_at > ?2),"
    " (SELECT count(*) FROM _tocsin_jobs WHERE queue = ?1 AND " LEASED "),"
    " (SELECT count(*) FROM _tocsin_dead WHERE queue = ?1),"
    " (SELECT min(run_at) FROM _tocsin_jobs WHERE queue = ?1 AND " PENDING "),"
    " (SELECT min(run_at) FROM _tocsin_jobs WHERE queue = ?1 AND " SCHEDULED "),"
    " coalesce((SELECT paused FROM _tocsin_queues WHERE name = ?1), 0)";
/* Queue names from the covering partial indexes (together they hold every
 * live job), not from the table rows. */
static const char SQL_QUEUE_NAMES[] =
    "SELECT DISTINCT queue FROM _tocsin_jobs WHERE " READY
    " UNION SELECT DISTINCT queue FROM _tocsin_jobs WHERE " SCHEDULED
    " UNION SELECT DISTINCT queue FROM _tocsin_dead"
    " UNION SELECT name FROM _tocsin_queues ORDER BY 1";

/* Next deadline of one queue, five index probes: the earliest lease end, the
 * earliest expiry, the run_at of the next job a claim would take (pending:
 * due now), the earliest scheduled run_at, and the pause flag. */
static const char SQL_DEADLINES[] =
    "SELECT (SELECT min(lease_until) FROM _tocsin_jobs WHERE queue = ?1 AND " LEASED "),"
    " (SELECT min(expires_at) FROM _tocsin_jobs WHERE queue = ?1 AND " UNLEASED "),"
    " (SELECT run_at FROM _tocsin_jobs WHERE queue = ?1 AND " PENDING " ORDER BY " CLAIM_ORDER
    "  LIMIT 1),"
    " (SELECT min(run_at) FROM _tocsin_jobs WHERE queue = ?1 AND " SCHEDULED "),"
    " coalesce((SELECT paused FROM _tocsin_queues WHERE name = ?1), 0)";

static const char SQL_DEAD_LIST_Q[] =
    "SELECT " DEAD_COLS " FROM _tocsin_dead WHERE queue = ?1 AND id > ?2 ORDER BY id LIMIT ?3";
static const char SQL_DEAD_LIST_ALL[] =
    "SELECT " DEAD_COLS " FROM _tocsin_dead WHERE id > ?2 ORDER BY id LIMIT ?3";
/* A requeue grants the job max_attempts more claims, keeping the claims it
 * had: tokens are id * 2^20 + attempts, so resetting attempts to 0 would
 * hand the next claim the token of the job's first one, and a stale holder
 * of that claim could ack the new lease. A job that spent all 1,000,000
 * claims has no token left to hand out: it matches nothing here and the
 * requeue is refused (tocsin_dead_requeue). */
static const char SQL_REQUEUE[] =
    "INSERT INTO _tocsin_jobs(id, queue, state, payload, meta, priority, attempts, max_attempts,"
    " run_at, created_at, expires_at, unique_key)"
    " SELECT id, queue, 'pending', payload, meta, priority, attempts,"
    " min(1000000, attempts + max_attempts), ?2, created_at, NULL, unique_key"
    " FROM _tocsin_dead WHERE id = ?1 AND attempts < 1000000";
static const char SQL_DEAD_ATTEMPTS[] = "SELECT attempts FROM _tocsin_dead WHERE id = ?1";
static const char SQL_DEAD_DELETE_ONE[] = "DELETE FROM _tocsin_dead WHERE id = ?1";
/* A requeued job is live again: the outcome of its last run is not its result
 * (a result exists while, and only once, the job has finished). */
static const char SQL_REQUEUE_RESULT[] = "DELETE FROM _tocsin_results WHERE job_id = ?1";
/* One statement per shape, so each is a plain index range (no OR for the planner). */
static const char SQL_PURGE_Q[] = "DELETE FROM _tocsin_dead WHERE queue = ?1";
static const char SQL_PURGE_Q_BEFORE[] =
    "DELETE FROM _tocsin_dead WHERE queue = ?1 AND died_at < ?2";
static const char SQL_PURGE_ALL[] = "DELETE FROM _tocsin_dead";
static const char SQL_PURGE_ALL_BEFORE[] = "DELETE FROM _tocsin_dead WHERE died_at < ?2";
/* What a purge matched and left: a trigger dropped its DELETE. */
static const char SQL_PURGE_LEFT[] =
    "SELECT EXISTS (SELECT 1 FROM _tocsin_dead WHERE (?1 IS NULL OR queue = ?1) AND (?2 = 0 OR died_at < ?2))";

#define TC_MAX_CLAIM TOCSIN_MAX_BATCH
#define TC_MAX_UNIQUE_KEY TOCSIN_MAX_UNIQUE_KEY_BYTES

/* ---- fencing tokens ------------------------------------------------------- */

/* token = id * 2^20 + attempts: attempts <= max_attempts <= TOCSIN_MAX_ATTEMPTS
 * < 2^20 and ids stay below 2^43 (CHECKs in schema.c), so a token names one
 * job and one of its claims, fits in 63 bits, and costs no stored column. */
#define TC_TOKEN_SHIFT 20
#define TC_TOKEN_MASK ((INT64_C(1) << TC_TOKEN_SHIFT) - 1)
#define TC_TOKEN_MAX_ID ((INT64_C(1) << (63 - TC_TOKEN_SHIFT)) - 1)
_Static_assert(TC_TOKEN_SHIFT == 20 && TC_TOKEN_MASK == 1048575,
               "SQL_ACK_MANY spells the token's layout out");

static int64_t token_of(int64_t id, int attempts) {
    if (attempts < 1 || id < 1 || id > TC_TOKEN_MAX_ID) return 0;
    return (int64_t)((uint64_t)id << TC_TOKEN_SHIFT) | (int64_t)attempts;
}

/* The attempt number `token` stands for on job `id`, or 0 when the token was
 * not issued for that job (then no lease operation can match). */
static int64_t token_attempt(int64_t id, int64_t token) {
    if (token < 1 || id < 1 || (token >> TC_TOKEN_SHIFT) != id) return 0;
    return token & TC_TOKEN_MASK;
}

/* The handle's clock, kept within 0..TOCSIN_MAX_TIME_MS: an injected clock
 * cannot push an instant the queue computes out of range. */
static int64_t queue_now(tocsin_db *db) {
    int64_t t = tocsin_now(db);
    return t < 0 ? 0 : t > TOCSIN_MAX_TIME_MS ? TOCSIN_MAX_TIME_MS : t;
}

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
    j->token = token_of(j->id, j->attempts);
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
    while ((rc = tc_step(db, st)) == SQLITE_ROW) {
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

/* Runs the two halves of a move (an INSERT ... SELECT, then the DELETE of the
 * rows it copied), which must change as many rows each; *out_n (if given):
 * how many moved. */
static int move_rows(tocsin_db *db, sqlite3_stmt *copy, sqlite3_stmt *del, const char *what,
                     const char *to, const char *from, int64_t *out_n) {
    int copied, rc = tc_step_done(db, copy, what);
    if (rc != TOCSIN_OK) {
        sqlite3_reset(del);
        return rc;
    }
    copied = sqlite3_changes(db->conn);
    if ((rc = tc_step_done(db, del, what)) != TOCSIN_OK) return rc;
    if (sqlite3_changes(db->conn) != copied)
        return tc_trigger_dropped(db, what, sqlite3_changes(db->conn) < copied ? from : to);
    if (out_n) *out_n = copied;
    return TOCSIN_OK;
}

/* Moves live job `id` to the dead table; *out_n: 1 if it did, 0 if no live job
 * has that id. */
static int to_dead(tocsin_db *db, int64_t id, const char *reason, const char *error, int64_t now,
                   int64_t *out_n) {
    sqlite3_stmt *st = tc_stmt(db, SQL_ONE_DEAD), *del;
    if (!st) return TC_ERRCODE;
    if (!(del = tc_stmt(db, SQL_DELETE_ONE))) {
        sqlite3_reset(st);
        return TC_ERRCODE;
    }
    sqlite3_bind_int64(st, 1, id);
    bind_text_or_null(st, 2, error);
    sqlite3_bind_text(st, 3, reason, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, now);
    sqlite3_bind_int64(del, 1, id);
    return move_rows(db, st, del, "move job to dead letters", "_tocsin_dead", "_tocsin_jobs", out_n);
}

/* to_dead for a job whose lease was just checked (holder): it must move. */
static int held_to_dead(tocsin_db *db, int64_t id, const char *reason, const char *error,
                        int64_t now) {
    int64_t n = 0;
    int rc = to_dead(db, id, reason, error, now, &n);
    return rc == TOCSIN_OK && n != 1 ? tc_trigger_dropped(db, "move job to dead letters", "_tocsin_dead")
                                     : rc;
}

/* Runs a statement bound to (queue, now), expecting no rows, and the DELETE
 * that follows it the same way: a move of every row the first one copies. */
static int move_qnow(tocsin_db *db, const char *copy_sql, const char *del_sql, const char *queue,
                     int64_t now, const char *what) {
    sqlite3_stmt *copy = tc_stmt(db, copy_sql), *del;
    if (!copy) return TC_ERRCODE;
    if (!(del = tc_stmt(db, del_sql))) {
        sqlite3_reset(copy);
        return TC_ERRCODE;
    }
    sqlite3_bind_text(copy, 1, queue, -1, SQLITE_STATIC);
    sqlite3_bind_int64(copy, 2, now);
    sqlite3_bind_text(del, 1, queue, -1, SQLITE_STATIC);
    sqlite3_bind_int64(del, 2, now);
    return move_rows(db, copy, del, what, "_tocsin_dead", "_tocsin_jobs", NULL);
}

#define CHECK_DB(db)                           \
    do {                                       \
        if (!(db)) return TOCSIN_INVALID;      \
        tc_clear(db);                          \
    } while (0)

/* ---- enqueue -------------------------------------------------------------- */

/* A unique_key is a name-like text: 1..TOCSIN_MAX_UNIQUE_KEY_BYTES bytes of
 * UTF-8 without control characters (bytes below 0x20, 0x7f). */
static int check_unique_key(tocsin_db *db, const char *key) {
    const unsigned char *p;
    int rc;
    if (!*key) return tc_err(db, TOCSIN_INVALID, "unique_key must not be empty");
    if ((rc = tc_check_text(db, "unique_key", key, TC_MAX_UNIQUE_KEY)) != TOCSIN_OK) return rc;
    for (p = (const unsigned char *)key; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return tc_err(db, TOCSIN_INVALID,
                          "unique_key must not contain control characters (byte 0x%02x at %d)", *p,
                          (int)(p - (const unsigned char *)key));
    return TOCSIN_OK;
}

static int check_spec(tocsin_db *db, const tocsin_job_spec *s) {
    const tocsin_enqueue_opts *o = s->opts;
    int rc;
    if ((rc = tc_check_name(db, "queue name", s->queue)) != TOCSIN_OK) return rc;
    if ((rc = tc_check_payload(db, "payload", s->payload)) != TOCSIN_OK) return rc;
    if (!o) return TOCSIN_OK;
    if ((rc = TC_CHECK_VERSION(db, "enqueue options", o->version, TOCSIN_ENQUEUE_OPTS)) != TOCSIN_OK)
        return rc;
    if ((rc = tc_check_ms(db, "delay_ms", o->delay_ms, 0)) != TOCSIN_OK) return rc;
    if ((rc = tc_check_ms(db, "run_at_ms", o->run_at_ms, 0)) != TOCSIN_OK) return rc;
    if (o->delay_ms && o->run_at_ms)
        return tc_err(db, TOCSIN_INVALID, "give delay_ms or run_at_ms, not both");
    if (o->max_attempts < 0 || o->max_attempts > TOCSIN_MAX_ATTEMPTS)
        return tc_err(db, TOCSIN_INVALID, "max_attempts must be between 1 and %d (0: the default %d), not %d",
                      TOCSIN_MAX_ATTEMPTS, TOCSIN_DEFAULT_MAX_ATTEMPTS, o->max_attempts);
    if ((rc = tc_check_ms(db, "expires_ms", o->expires_ms, 0)) != TOCSIN_OK) return rc;
    if (o->unique_key && (rc = check_unique_key(db, o->unique_key)) != TOCSIN_OK) return rc;
    return tc_check_meta(db, o->meta);
}

/* The job's INSERT wrote no row, and no live job holds its unique key. */
static int insert_dropped(tocsin_db *db) {
    return tc_err(db, TOCSIN_CORRUPT,
                  "enqueue: the job's INSERT wrote no row and no live job holds its unique_key: a "
                  "trigger on _tocsin_jobs (RAISE(IGNORE)) dropped it; tocsin tables must not "
                  "carry triggers that change their rows");
}

/* Element k of a batch statement's JSON array (the caller closes it with "]"). */
static void list_sep(tc_buf *b, size_t k) { tc_buf_puts(b, k ? "," : "["); }

/* An INSERT's CHECK on the id failed: the table's ids are spent. */
static int ids_spent(tocsin_db *db, int rc) {
    if (rc != SQLITE_CONSTRAINT_CHECK || !strstr(sqlite3_errmsg(db->conn), "id BETWEEN")) return 0;
    tc_err(db, TOCSIN_FULL,
           "enqueue: no job id is left: ids end at 8796093022207 (2^43 - 1), the bound "
           "that keeps every fencing token (id * 2^20 + attempts) within 63 bits");
    return 1;
}

static int plain_spec(const tocsin_job_spec *s) {
    const tocsin_enqueue_opts *o = s->opts;
    return !o || (!o->priority && !o->delay_ms && !o->run_at_ms && !o->max_attempts &&
                  !o->expires_ms && !o->unique_key && !o->meta);
}

/* How many of the n specs from s on can go in one SQL_INSERT_MANY (0 or 1:
 * insert the first alone). A host that allows fewer parameters per statement
 * (SQLITE_LIMIT_VARIABLE_NUMBER) or shorter statements gets one INSERT per job. */
static size_t plain_run(tocsin_db *db, const tocsin_job_spec *s, size_t n) {
    size_t k;
    if (sqlite3_limit(db->conn, SQLITE_LIMIT_VARIABLE_NUMBER, -1) < INSERT_MANY_PARAMS ||
        sqlite3_limit(db->conn, SQLITE_LIMIT_SQL_LENGTH, -1) < (int)sizeof SQL_INSERT_MANY)
        return 0;
    for (k = 0; k < n && k < BATCH_CHUNK && plain_spec(&s[k]) && strcmp(s[k].queue, s[0].queue) == 0; k++) {
    }
    return k;
}

/* k payload-only jobs of one queue in one statement; *next as for insert_job. */
static int insert_plain(tocsin_db *db, int64_t *out_ids, const tocsin_job_spec *s, size_t k,
                        int64_t now, int64_t *next) {
    sqlite3_stmt *st;
    size_t i;
    int rc;
    if (!*next) { /* the first id: as the one-job INSERT reads it */
        if (!(st = tc_stmt(db, SQL_NEXT_ID))) return TC_ERRCODE;
        rc = tc_step(db, st);
        if (rc == SQLITE_ROW) *next = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
        if (rc != SQLITE_ROW) return tc_sqlerr(db, rc, "enqueue");
    }
    if (!(st = tc_stmt(db, k <= INSERT_MANY_SMALL ? SQL_INSERT_MANY_SMALL : SQL_INSERT_MANY))) return TC_ERRCODE;
    sqlite3_bind_int64(st, 1, *next);
    sqlite3_bind_text(st, 2, s[0].queue, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, TOCSIN_DEFAULT_MAX_ATTEMPTS);
    sqlite3_bind_int64(st, 4, now);
    for (i = 0; i < k; i++) sqlite3_bind_text(st, 5 + (int)i, s[i].payload, -1, SQLITE_STATIC);
    rc = tc_step(db, st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st); /* the payloads are the caller's */
    if (ids_spent(db, rc)) return TOCSIN_FULL;
    if (rc != SQLITE_DONE) return tc_sqlerr(db, rc, "enqueue");
    if ((size_t)sqlite3_changes(db->conn) != k) return insert_dropped(db);
    for (i = 0; i < k; i++) out_ids[i] = *next + (int64_t)i;
    *next += (int64_t)k;
    return TOCSIN_OK;
}

/* *next: the id the job takes, 0 if unknown (then read by the INSERT); set to
 * the id after it, or 0 when it met a unique key. */
static int insert_job(tocsin_db *db, int64_t *out_id, const tocsin_job_spec *s, int64_t now,
                      int64_t *next, int retried) {
    static const tocsin_enqueue_opts defaults = TOCSIN_ENQUEUE_OPTS_INIT;
    const tocsin_enqueue_opts *o = s->opts ? s->opts : &defaults;
    int64_t run_at = o->run_at_ms ? o->run_at_ms : tc_time_add(now, o->delay_ms);
    int hinted = !*next && db->id_hinted && sqlite3_get_autocommit(db->conn);
    sqlite3_stmt *st = tc_stmt(db, *next ? SQL_INSERT_AT : hinted ? SQL_INSERT_HINTED : SQL_INSERT);
    int rc;
    if (!st) return TC_ERRCODE;
    if (*next) sqlite3_bind_int64(st, 11, *next);
    sqlite3_bind_text(st, 1, s->queue, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, s->payload, -1, SQLITE_STATIC);
    bind_text_or_null(st, 3, o->meta);
    sqlite3_bind_int64(st, 4, o->priority);
    sqlite3_bind_int(st, 5, o->max_attempts ? o->max_attempts : TOCSIN_DEFAULT_MAX_ATTEMPTS);
    sqlite3_bind_int64(st, 6, run_at);
    sqlite3_bind_int64(st, 7, now);
    bind_i64_or_null(st, 8, o->expires_ms ? tc_time_add(now, o->expires_ms) : 0);
    bind_text_or_null(st, 9, o->unique_key);
    sqlite3_bind_text(st, 10, run_at > now ? "scheduled" : "pending", -1, SQLITE_STATIC);
    /* No RETURNING: it buffers its row in an ephemeral table. Without one,
     * the row count and last rowid of this statement say the same. */
    rc = tc_step(db, st);
    sqlite3_reset(st);
    if (ids_spent(db, rc)) return TOCSIN_FULL;
    if (rc != SQLITE_DONE) return tc_sqlerr(db, rc, "enqueue");
    if (sqlite3_changes(db->conn) == 1) {
        *out_id = sqlite3_last_insert_rowid(db->conn);
        *next = *out_id + 1;
        if (hinted) tc_id_hint_set(db, *next);
        return TOCSIN_OK;
    }
    *next = 0;
    /* No row and no key to meet: a trigger on _tocsin_jobs dropped the insert
     * (RAISE(IGNORE)); report it before writing anything else. */
    if (!o->unique_key) return insert_dropped(db);
    /* A job holds the unique key: hand back its id -- unless it has expired:
     * folded into it, this enqueue would die with it, never run. The queue's
     * expired jobs go to the dead letters as a claim would move them, and the
     * job is inserted. */
    if (!(st = tc_stmt(db, SQL_FIND_UNIQUE))) return TC_ERRCODE;
    sqlite3_bind_text(st, 1, s->queue, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, o->unique_key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, now);
    rc = tc_step(db, st);
    if (rc == SQLITE_ROW) {
        *out_id = sqlite3_column_int64(st, 0);
        if (sqlite3_column_int(st, 1) && !retried) {
            sqlite3_reset(st);
            if ((rc = move_qnow(db, SQL_EXPIRED_DEAD, SQL_EXPIRED_DELETE, s->queue, now, "expire jobs")) !=
                TOCSIN_OK)
                return rc;
            return insert_job(db, out_id, s, now, next, 1);
        }
    }
    sqlite3_reset(st);
    if (rc == SQLITE_DONE) return insert_dropped(db);
    if (rc != SQLITE_ROW) return tc_sqlerr(db, rc, "enqueue: find job holding unique_key");
    if (!(st = tc_stmt(db, SQL_SKIP_ID))) return TC_ERRCODE;
    return tc_step_done(db, st, "enqueue");
}

int tc_check_specs(tocsin_db *db, const tocsin_job_spec *specs, size_t n) {
    size_t i;
    int rc;
    for (i = 0; i < n; i++) {
        if ((rc = check_spec(db, &specs[i])) != TOCSIN_OK) {
            /* which one, when there are several (tc_err formats the message aside first) */
            return n > 1 ? tc_err(db, rc, "job %zu: %s", i, tc_tls()->msg) : rc;
        }
    }
    return TOCSIN_OK;
}

int tocsin_queue_enqueue_many(tocsin_db *db, int64_t *out_ids, const tocsin_job_spec *specs,
                              size_t n) {
    tc_op op;
    size_t i;
    int64_t now, next = 0;
    int rc = TOCSIN_OK;
    CHECK_DB(db);
    if (n && (!out_ids || !specs)) return tc_err(db, TOCSIN_INVALID, "out_ids and specs must not be NULL");
    if ((rc = tc_check_specs(db, specs, n)) != TOCSIN_OK) return rc;
    if (n == 0) return TOCSIN_OK;
    /* one job without a unique key is one INSERT (with a key, a second
     * statement may look up the job holding it: a transaction then) */
    if ((rc = tc_op_begin(db, &op, n == 1 && !(specs[0].opts && specs[0].opts->unique_key) ? TC_OP_ONE : 1)) !=
        TOCSIN_OK)
        return rc;
    now = queue_now(db);
    for (i = 0; i < n && rc == TOCSIN_OK;) {
        size_t k = n - i > 1 ? plain_run(db, &specs[i], n - i) : 0;
        if (k > 1) {
            rc = insert_plain(db, &out_ids[i], &specs[i], k, now, &next);
            i += k;
        } else {
            rc = insert_job(db, &out_ids[i], &specs[i], now, &next, 0);
            i++;
        }
    }
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

/* Leases the selected jobs (already in claim order) to `worker` until
 * `until` and makes the structs show the leased rows, as a fresh read would. */
static int lease_jobs(tocsin_db *db, tocsin_job *jobs, size_t n, const char *worker,
                      int64_t until) {
    size_t i, k;
    int rc;
    for (i = 0; i < n; i += k) {
        sqlite3_stmt *st;
        tc_buf ids = {0};
        size_t m;
        k = n - i < BATCH_CHUNK ? n - i : BATCH_CHUNK;
        if (k > 1) { /* one job (the hot path) binds its id: no list */
            for (m = 0; m < k; m++) {
                list_sep(&ids, m);
                tc_buf_i64(&ids, jobs[i + m].id);
            }
            tc_buf_puts(&ids, "]");
            if (ids.oom) {
                sqlite3_free(ids.p);
                return tc_err(db, TOCSIN_NOMEM, "claim: out of memory");
            }
        }
        if (!(st = tc_stmt(db, k > 1 ? SQL_CLAIM_LEASE_MANY : SQL_CLAIM_LEASE))) {
            sqlite3_free(ids.p);
            return TC_ERRCODE;
        }
        if (k > 1) sqlite3_bind_text(st, 1, ids.p, (int)ids.len, SQLITE_TRANSIENT);
        else sqlite3_bind_int64(st, 1, jobs[i].id);
        sqlite3_free(ids.p);
        sqlite3_bind_text(st, 2, worker, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, until);
        if ((rc = tc_step_done(db, st, "claim")) != TOCSIN_OK) return rc;
        /* the rows were read in this write transaction: every one is there */
        if ((size_t)sqlite3_changes(db->conn) != k) return tc_trigger_dropped(db, "claim", "_tocsin_jobs");
    }
    for (i = 0; i < n; i++) {
        tocsin_job *j = &jobs[i];
        char *state, *who;
        if (!(state = tc_strdup("processing")) || !(who = tc_strdup(worker))) {
            sqlite3_free(state);
            return tc_err(db, TOCSIN_NOMEM, "claim: out of memory");
        }
        sqlite3_free(j->state);
        sqlite3_free(j->worker);
        j->state = state;
        j->worker = who;
        j->attempts++;
        j->token = token_of(j->id, j->attempts);
        j->lease_until = until;
    }
    return TOCSIN_OK;
}

/* Reclaims lapsed leases, expires unclaimed jobs past their expiry and, unless
 * the queue is paused, promotes scheduled jobs that became due. Sets *paused,
 * and *burst when the promotion hit its bound (more due jobs may wait).
 * Runs inside the claim's write operation. */
static int claim_prepare(tocsin_db *db, const char *queue, int64_t now, size_t max, int *paused,
                         int *burst) {
    sqlite3_stmt *st = tc_stmt(db, SQL_CLAIM_CHECK);
    int rc, lapsed, expired, due;
    *burst = 0;
    if (!st) return TC_ERRCODE;
    sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, now);
    rc = tc_step(db, st);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(st);
        return tc_sqlerr(db, rc, "claim");
    }
    *paused = sqlite3_column_int(st, 0);
    lapsed = sqlite3_column_int(st, 1);
    expired = sqlite3_column_int(st, 2);
    due = sqlite3_column_int(st, 3);
    sqlite3_reset(st);
    rc = TOCSIN_OK;
    if (lapsed) {
        rc = move_qnow(db, SQL_LAPSED_DEAD, SQL_LAPSED_DELETE, queue, now, "reclaim lapsed leases");
        if (rc == TOCSIN_OK) rc = run_qnow(db, SQL_LAPSED_REQUEUE, queue, now, "reclaim lapsed leases");
    }
    /* A lapsed lease reclaimed just now is pending again: past its expiry it
     * dies too, which the check (run while it was leased) could not see. */
    if ((expired || lapsed) && rc == TOCSIN_OK) {
        rc = move_qnow(db, SQL_EXPIRED_DEAD, SQL_EXPIRED_DELETE, queue, now, "expire jobs");
    }
    if (due && !*paused && rc == TOCSIN_OK) {
        int64_t bound = TC_PROMOTE_MAX > max ? TC_PROMOTE_MAX : (int64_t)max;
        if (!(st = tc_stmt(db, SQL_PROMOTE))) return TC_ERRCODE;
        sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, now);
        sqlite3_bind_int64(st, 3, bound);
        rc = tc_step_done(db, st, "promote scheduled jobs");
        if (rc == TOCSIN_OK) *burst = sqlite3_changes(db->conn) >= bound;
    }
    return rc;
}

int tc_check_claim(tocsin_db *db, const char *queue, const char *worker, size_t max,
                   int64_t visibility_ms) {
    int rc;
    if ((rc = tc_check_name(db, "queue name", queue)) != TOCSIN_OK) return rc;
    if ((rc = tc_check_name(db, "worker id", worker)) != TOCSIN_OK) return rc;
    if (max < 1 || max > TC_MAX_CLAIM)
        return tc_err(db, TOCSIN_INVALID, "claim count must be between 1 and %d", TC_MAX_CLAIM);
    return tc_check_ms(db, "visibility_ms", visibility_ms, 1);
}

int tocsin_queue_claim(tocsin_db *db, tocsin_job **out_jobs, size_t *out_n, const char *queue,
                       const char *worker, size_t max, int64_t visibility_ms) {
    tc_op op;
    sqlite3_stmt *st;
    int64_t now;
    int rc, paused = 0, burst = 0;
    CHECK_DB(db);
    if (!out_jobs || !out_n) return tc_err(db, TOCSIN_INVALID, "out_jobs and out_n must not be NULL");
    *out_jobs = NULL;
    *out_n = 0;
    if ((rc = tc_check_claim(db, queue, worker, max, visibility_ms)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    now = queue_now(db);
    rc = claim_prepare(db, queue, now, max, &paused, &burst);
    if (rc == TOCSIN_OK && !paused) {
        int one = !burst && max == 1;
        if (!(st = tc_stmt(db, burst ? SQL_CLAIM_SELECT_BURST
                                     : one ? SQL_CLAIM_SELECT_ONE : SQL_CLAIM_SELECT))) {
            rc = TC_ERRCODE;
        } else {
            sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
            if (burst) sqlite3_bind_int64(st, 2, now);
            if (!one) sqlite3_bind_int64(st, 3, (sqlite3_int64)max);
            rc = collect_jobs(db, st, max, out_jobs, out_n, "claim");
        }
        if (rc == TOCSIN_OK && *out_n)
            rc = lease_jobs(db, *out_jobs, *out_n, worker, tc_time_add(now, visibility_ms));
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
    sqlite3_bind_int64(st, 2, token_attempt(id, token));
    rc = tc_step(db, st);
    *held = rc == SQLITE_ROW;
    if (*held) {
        *attempts = sqlite3_column_int(st, 0);
        *max = sqlite3_column_int(st, 1);
    }
    sqlite3_reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return tc_sqlerr(db, rc, "check lease");
    return TOCSIN_OK;
}

/* Error text of retry/fail: any UTF-8 text up to the handle's payload limit
 * (the size a result may have), so every reader can decode the job. */
static int check_error_text(tocsin_db *db, const char *error) {
    return tc_check_text(db, "error text", error, (size_t)db->max_payload);
}

/* After an ack that ended fewer leases than it was given: TOCSIN_OK when the
 * others were stale, the trigger error when a lease of `tokens` (a JSON array)
 * is still there (a trigger dropped its DELETE). Read on the failure path only. */
static int acks_dropped(tocsin_db *db, tc_buf *tokens) {
    sqlite3_stmt *st;
    int rc, left;
    if (tokens->oom) return tc_err(db, TOCSIN_NOMEM, "ack: out of memory");
    if (!(st = tc_stmt(db, SQL_ACK_LEFT))) return TC_ERRCODE;
    sqlite3_bind_text(st, 1, tokens->p, (int)tokens->len, SQLITE_STATIC);
    rc = tc_step(db, st);
    left = rc == SQLITE_ROW && sqlite3_column_int(st, 0);
    sqlite3_reset(st);
    if (rc != SQLITE_ROW) return tc_sqlerr(db, rc, "ack");
    return left ? tc_trigger_dropped(db, "ack", "_tocsin_jobs") : TOCSIN_OK;
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
    if ((rc = tc_op_begin(db, &op, n == 1 ? TC_OP_ONE : 1)) != TOCSIN_OK) return rc;
    if (n == 1) {
        if (!(st = tc_stmt(db, SQL_ACK))) {
            rc = TC_ERRCODE;
        } else {
            sqlite3_bind_int64(st, 1, ids[0]);
            sqlite3_bind_int64(st, 2, token_attempt(ids[0], tokens[0]));
            rc = tc_step_done(db, st, "ack");
            if (rc == TOCSIN_OK) acked = (size_t)sqlite3_changes(db->conn);
            if (rc == TOCSIN_OK && !acked) { /* a stale token, or a trigger dropped the delete */
                tc_buf one = {0};
                tc_buf_puts(&one, "[");
                tc_buf_i64(&one, tokens[0]);
                tc_buf_puts(&one, "]");
                rc = token_attempt(ids[0], tokens[0]) ? acks_dropped(db, &one) : TOCSIN_OK;
                sqlite3_free(one.p);
            }
        }
    }
    for (i = 0; n > 1 && i < n && rc == TOCSIN_OK;) {
        /* a token not issued for its id matches no lease: it is left out */
        tc_buf list = {0};
        size_t k = 0;
        for (; i < n && k < BATCH_CHUNK; i++) {
            if (!token_attempt(ids[i], tokens[i])) continue;
            list_sep(&list, k++);
            tc_buf_i64(&list, tokens[i]);
        }
        tc_buf_puts(&list, "]");
        if (list.oom) {
            rc = tc_err(db, TOCSIN_NOMEM, "ack: out of memory");
        } else if (k && !(st = tc_stmt(db, SQL_ACK_MANY))) {
            rc = TC_ERRCODE;
        } else if (k) {
            sqlite3_bind_text(st, 1, list.p, (int)list.len, SQLITE_TRANSIENT);
            size_t ended;
            rc = tc_step_done(db, st, "ack");
            ended = (size_t)sqlite3_changes(db->conn);
            if (rc == TOCSIN_OK && ended < k) rc = acks_dropped(db, &list);
            if (rc == TOCSIN_OK) acked += ended;
        }
        sqlite3_free(list.p);
    }
    rc = tc_op_end(db, &op, rc);
    if (rc == TOCSIN_OK) *out_acked = acked;
    return rc;
}

/* Doubling stops at the cap before it could overflow; base and cap are
 * clamped to 1..TOCSIN_MAX_TIME_MS, so any arguments give a valid duration. */
int64_t tocsin_backoff_ms(int64_t base_ms, int64_t cap_ms, int attempts) {
    int64_t d = base_ms < 1 ? 1 : base_ms > TOCSIN_MAX_TIME_MS ? TOCSIN_MAX_TIME_MS : base_ms, half;
    int i;
    if (cap_ms > TOCSIN_MAX_TIME_MS) cap_ms = TOCSIN_MAX_TIME_MS;
    if (cap_ms < d) cap_ms = d;
    for (i = 1; i < attempts && d < cap_ms; i++) d = d > cap_ms / 2 ? cap_ms : d * 2;
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
    /* delay_ms < 0 asks for the default backoff */
    if (delay_ms >= 0 && (rc = tc_check_ms(db, "delay_ms", delay_ms, 0)) != TOCSIN_OK) return rc;
    if ((rc = check_error_text(db, error)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    now = queue_now(db);
    rc = holder(db, &held, id, token, &attempts, &max);
    if (rc == TOCSIN_OK && held) {
        if (attempts >= max) {
            rc = held_to_dead(db, id, "max_attempts", error, now);
        } else if (!(st = tc_stmt(db, SQL_RETRY))) {
            rc = TC_ERRCODE;
        } else {
            int64_t run_at;
            if (delay_ms < 0)
                delay_ms = tocsin_backoff_ms(TOCSIN_BACKOFF_BASE_MS, TOCSIN_BACKOFF_CAP_MS, attempts);
            run_at = tc_time_add(now, delay_ms);
            sqlite3_bind_int64(st, 1, id);
            sqlite3_bind_int64(st, 2, run_at);
            bind_text_or_null(st, 3, error);
            sqlite3_bind_text(st, 4, run_at > now ? "scheduled" : "pending", -1, SQLITE_STATIC);
            rc = tc_one_row(db, tc_step_done(db, st, "retry"), "retry", "_tocsin_jobs");
        }
    }
    rc = tc_op_end(db, &op, rc);
    if (rc == TOCSIN_OK) *out_ok = held;
    return rc;
}

int tc_job_to_dead(tocsin_db *db, int *out_ok, int64_t id, int64_t token, const char *error,
                   const char *reason) {
    tc_op op;
    int rc, held = 0, attempts = 0, max = 0;
    CHECK_DB(db);
    if (!out_ok) return tc_err(db, TOCSIN_INVALID, "out_ok must not be NULL");
    *out_ok = 0;
    if ((rc = check_error_text(db, error)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    rc = holder(db, &held, id, token, &attempts, &max);
    if (rc == TOCSIN_OK && held) rc = held_to_dead(db, id, reason, error, queue_now(db));
    rc = tc_op_end(db, &op, rc);
    if (rc == TOCSIN_OK) *out_ok = held;
    return rc;
}

int tocsin_job_fail(tocsin_db *db, int *out_ok, int64_t id, int64_t token, const char *error) {
    return tc_job_to_dead(db, out_ok, id, token, error, "failed");
}

int tocsin_job_heartbeat(tocsin_db *db, int *out_ok, int64_t id, int64_t token,
                         int64_t extend_ms) {
    tc_op op;
    sqlite3_stmt *st;
    int rc;
    CHECK_DB(db);
    if (!out_ok) return tc_err(db, TOCSIN_INVALID, "out_ok must not be NULL");
    *out_ok = 0;
    if ((rc = tc_check_ms(db, "extend_ms", extend_ms, 1)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, SQL_HEARTBEAT))) {
        rc = TC_ERRCODE;
    } else {
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int64(st, 2, token_attempt(id, token));
        sqlite3_bind_int64(st, 3, tc_time_add(queue_now(db), extend_ms));
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
    {
        int64_t n = 0;
        rc = to_dead(db, id, "cancelled", NULL, queue_now(db), &n);
        if (rc == TOCSIN_OK) *out_ok = n == 1;
    }
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
    if (sql == SQL_GET_LIVE) sqlite3_bind_int64(st, 2, queue_now(db));
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
        sqlite3_bind_int64(st, 3, queue_now(db));
        rc = tc_one_row(db, tc_step_done(db, st, paused ? "pause" : "resume"), paused ? "pause" : "resume",
                        "_tocsin_queues");
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
        if ((rc = tc_step(db, st)) == SQLITE_ROW) *out_paused = sqlite3_column_int(st, 0);
        sqlite3_reset(st);
        rc = rc == SQLITE_ROW ? TOCSIN_OK : tc_sqlerr(db, rc, "is paused");
    }
    return tc_op_end(db, &op, rc);
}

static int stats_one(tocsin_db *db, tc_buf *b, const char *queue, int64_t now) {
    sqlite3_stmt *st = tc_stmt(db, SQL_STATS);
    int rc, first = 1;
    int64_t oldest = -1, age = 0;
    if (!st) return TC_ERRCODE;
    sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, now);
    rc = tc_step(db, st);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(st);
        return tc_sqlerr(db, rc, "stats");
    }
    /* the oldest due job: pending, or scheduled and due (not promoted yet) */
    if (sqlite3_column_type(st, 5) != SQLITE_NULL) oldest = sqlite3_column_int64(st, 5);
    if (sqlite3_column_type(st, 6) != SQLITE_NULL && sqlite3_column_int64(st, 6) <= now &&
        (oldest < 0 || sqlite3_column_int64(st, 6) < oldest))
        oldest = sqlite3_column_int64(st, 6);
    if (oldest >= 0 && oldest < now) age = now - oldest; /* never negative (clock stepped back) */
    tc_buf_puts(b, "{");
    tc_buf_key(b, "queue", &first);
    tc_buf_jstr(b, queue);
    tc_buf_key(b, "pending", &first);
    tc_buf_i64(b, sqlite3_column_int64(st, 0) + sqlite3_column_int64(st, 1));
    tc_buf_key(b, "scheduled", &first);
    tc_buf_i64(b, sqlite3_column_int64(st, 2));
    tc_buf_key(b, "processing", &first);
    tc_buf_i64(b, sqlite3_column_int64(st, 3));
    tc_buf_key(b, "dead", &first);
    tc_buf_i64(b, sqlite3_column_int64(st, 4));
    tc_buf_key(b, "oldest_pending_age_ms", &first);
    tc_buf_i64(b, age);
    tc_buf_key(b, "paused", &first);
    tc_buf_puts(b, sqlite3_column_int(st, 7) ? "true" : "false");
    tc_buf_puts(b, "}");
    sqlite3_reset(st);
    return TOCSIN_OK;
}

/* Names in byte order of their UTF-8 (code point order): SQLite's ORDER BY
 * compares the bytes of the database's encoding, which in a UTF-16le database
 * puts U+0100 before "a". */
static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
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
    now = queue_now(db);
    if (queue) {
        rc = stats_one(db, &b, queue, now);
    } else {
        /* Collect names first: SQL_STATS is stepped for each of them. */
        sqlite3_stmt *st = tc_stmt(db, SQL_QUEUE_NAMES);
        char **names = NULL;
        size_t n = 0, cap = 0, i;
        int src = SQLITE_DONE;
        if (!st) rc = TC_ERRCODE;
        while (st && (src = tc_step(db, st)) == SQLITE_ROW) {
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
        if (n > 1) qsort(names, n, sizeof *names, cmp_names);
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

int tocsin_queue_next_deadline(tocsin_db *db, int64_t *out_ms, const char *const *queues,
                               size_t n) {
    tc_op op;
    size_t i;
    int rc;
    int64_t acc = -1, now;
    CHECK_DB(db);
    if (!out_ms || (!queues && n)) return tc_err(db, TOCSIN_INVALID, "out_ms and queues must not be NULL");
    *out_ms = -1;
    for (i = 0; i < n; i++)
        if ((rc = tc_check_name(db, "queue name", queues[i])) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 0)) != TOCSIN_OK) return rc;
    now = queue_now(db);
    for (i = 0; i < n && rc == TOCSIN_OK; i++) {
        sqlite3_stmt *st = tc_stmt(db, SQL_DEADLINES);
        if (!st) {
            rc = TC_ERRCODE;
            break;
        }
        sqlite3_bind_text(st, 1, queues[i], -1, SQLITE_STATIC);
        rc = tc_step(db, st);
        if (rc == SQLITE_ROW) {
            int paused = sqlite3_column_int(st, 4);
            if (sqlite3_column_type(st, 0) != SQLITE_NULL) earliest(&acc, sqlite3_column_int64(st, 0));
            if (!paused && sqlite3_column_type(st, 1) != SQLITE_NULL)
                earliest(&acc, sqlite3_column_int64(st, 1));
            /* a pending job is claimable now (even if the clock stepped back),
             * and so is a due scheduled one (the claim promotes it) */
            if (!paused && sqlite3_column_type(st, 2) != SQLITE_NULL) earliest(&acc, now);
            if (!paused && sqlite3_column_type(st, 3) != SQLITE_NULL) {
                int64_t t = sqlite3_column_int64(st, 3);
                earliest(&acc, t < now ? now : t);
            }
        }
        sqlite3_reset(st);
        rc = rc == SQLITE_ROW ? TOCSIN_OK : tc_sqlerr(db, rc, "next deadline");
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
        sqlite3_bind_int64(st, 2, queue_now(db));
        rc = tc_step(db, st);
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
    if (rc == TOCSIN_OK && !*out_ok) {
        /* not requeued: no such dead job, or one with every claim spent */
        if (!(st = tc_stmt(db, SQL_DEAD_ATTEMPTS))) {
            rc = TC_ERRCODE;
        } else {
            sqlite3_bind_int64(st, 1, id);
            rc = tc_step(db, st);
            if (rc == SQLITE_ROW && sqlite3_column_int64(st, 0) < TOCSIN_MAX_ATTEMPTS) {
                sqlite3_reset(st);
                rc = tc_trigger_dropped(db, "requeue", "_tocsin_jobs");
            } else if (sqlite3_reset(st), rc == SQLITE_ROW)
                rc = tc_err(db, TOCSIN_FULL,
                            "requeue job %lld: it spent all %d claims its fencing tokens allow;"
                            " enqueue its payload as a new job",
                            (long long)id, TOCSIN_MAX_ATTEMPTS);
            else
                rc = rc == SQLITE_DONE ? TOCSIN_OK : tc_sqlerr(db, rc, "requeue");
        }
    }
    if (rc == TOCSIN_OK && *out_ok) {
        if (!(st = tc_stmt(db, SQL_DEAD_DELETE_ONE))) {
            rc = TC_ERRCODE;
        } else {
            sqlite3_bind_int64(st, 1, id);
            rc = tc_one_row(db, tc_step_done(db, st, "requeue"), "requeue", "_tocsin_dead");
        }
        if (rc == TOCSIN_OK && !(st = tc_stmt(db, SQL_REQUEUE_RESULT))) {
            rc = TC_ERRCODE;
        } else if (rc == TOCSIN_OK) {
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
    if ((rc = tc_check_ms(db, "before_ms", before_ms, 0)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, queue ? (before_ms ? SQL_PURGE_Q_BEFORE : SQL_PURGE_Q)
                                 : (before_ms ? SQL_PURGE_ALL_BEFORE : SQL_PURGE_ALL)))) {
        rc = TC_ERRCODE;
    } else {
        if (queue) sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, before_ms);
        rc = tc_step_done(db, st, "purge dead letters");
        if (rc == TOCSIN_OK) *out_n = sqlite3_changes(db->conn);
        if (rc == TOCSIN_OK && !(st = tc_stmt(db, SQL_PURGE_LEFT))) {
            rc = TC_ERRCODE;
        } else if (rc == TOCSIN_OK) {
            int left;
            if (queue) sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
            sqlite3_bind_int64(st, 2, before_ms);
            rc = tc_step(db, st);
            left = rc == SQLITE_ROW && sqlite3_column_int(st, 0);
            sqlite3_reset(st);
            rc = rc != SQLITE_ROW ? tc_sqlerr(db, rc, "purge dead letters")
                 : left           ? tc_trigger_dropped(db, "purge dead letters", "_tocsin_dead")
                                  : TOCSIN_OK;
        }
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
    q.db = db;
    q.queues = queues;
    q.n = n;
    q.deadline = deadline_ms < 0 ? -1 : deadline_ms;
    return tc_db_wait(db, sub, queue_wait_check, &q);
}

/* ---- for the worker protocol (worker.c) --------------------------------------- */

int tc_job_hand_back(tocsin_db *db, int *held, int64_t *out_handbacks, int64_t id,
                     int64_t token, int64_t delay_ms, const char *why) {
    sqlite3_stmt *st = tc_stmt(db, SQL_HAND_BACK);
    int64_t now = queue_now(db), run_at = tc_time_add(now, delay_ms);
    int rc;
    *held = 0;
    if (!st) return TC_ERRCODE;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int64(st, 2, token_attempt(id, token));
    sqlite3_bind_int64(st, 3, run_at);
    sqlite3_bind_text(st, 4, run_at > now ? "scheduled" : "pending", -1, SQLITE_STATIC);
    bind_text_or_null(st, 5, why);
    rc = tc_step(db, st);
    if (rc == SQLITE_ROW) {
        *held = 1;
        if (out_handbacks) *out_handbacks = sqlite3_column_int64(st, 0);
        return tc_step_done(db, st, "hand back");
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) return tc_sqlerr(db, rc, "hand back");
    {
        /* still held but not handed back: the claim was the last of the
         * max_attempts limit, so the job dies as a retry there would */
        int attempts = 0, max = 0;
        if ((rc = holder(db, held, id, token, &attempts, &max)) != TOCSIN_OK || !*held) return rc;
        if (max < TOCSIN_MAX_ATTEMPTS || attempts < max) return tc_trigger_dropped(db, "hand back", "_tocsin_jobs");
        if (out_handbacks) *out_handbacks = 0;
        return held_to_dead(db, id, "max_attempts", why ? why : "handed back after its last attempt", now);
    }
}

int tocsin_job_hand_back(tocsin_db *db, int *out_ok, int64_t id, int64_t token, int64_t delay_ms) {
    tc_op op;
    int rc, held = 0;
    CHECK_DB(db);
    if (!out_ok) return tc_err(db, TOCSIN_INVALID, "out_ok must not be NULL");
    *out_ok = 0;
    if ((rc = tc_check_ms(db, "delay_ms", delay_ms, 0)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    rc = tc_op_end(db, &op, tc_job_hand_back(db, &held, NULL, id, token, delay_ms, NULL));
    if (rc == TOCSIN_OK) *out_ok = held;
    return rc;
}

int tc_jobs_release_worker(tocsin_db *db, const char *queue, const char *worker, int64_t *out_n) {
    sqlite3_stmt *st = tc_stmt(db, SQL_RELEASE_WORKER);
    int rc;
    if (!st) return TC_ERRCODE;
    sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, worker, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, queue_now(db));
    rc = tc_step_done(db, st, "release a dead worker's jobs");
    if (rc == TOCSIN_OK && out_n) *out_n += sqlite3_changes(db->conn);
    return rc;
}

int tc_job_held(tocsin_db *db, int *held, int64_t id, int64_t token) {
    int attempts = 0, max = 0;
    return holder(db, held, id, token, &attempts, &max);
}

int tc_job_handbacks(tocsin_db *db, int64_t id, int64_t *out_n) {
    sqlite3_stmt *st = tc_stmt(db, SQL_HANDBACKS);
    int rc;
    *out_n = 0;
    if (!st) return TC_ERRCODE;
    sqlite3_bind_int64(st, 1, id);
    rc = tc_step(db, st);
    if (rc == SQLITE_ROW) *out_n = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? TOCSIN_OK : tc_sqlerr(db, rc, "read hand-backs");
}
