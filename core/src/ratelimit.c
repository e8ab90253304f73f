/*
 * Rate limits: a sliding log of admissions per name. Every SQL statement of
 * rate limits lives here. A call at time t is admitted when fewer than
 * `limit` admissions of the name lie in (t - per, t]; so no window of per ms
 * ever holds more than `limit` of them (a fixed window would let 2 x limit
 * through around its edge, a token bucket close to that). The log of a name
 * holds at most `limit` rows: older rows are dropped on every try, and the
 * sweep drops those of names nobody tries any more.
 */
#include "internal.h"

static const char SQL_RATE_EXPIRE[] =
    "DELETE FROM _tocsin_rate_hits WHERE name = ?1 AND at <= ?2";
static const char SQL_RATE_COUNT[] = "SELECT count(*) FROM _tocsin_rate_hits WHERE name = ?1";
static const char SQL_RATE_INSERT[] =
    "INSERT INTO _tocsin_rate_hits(name, at, expires_at) VALUES (?1, ?2, ?3)";
/* The admission whose expiry brings the count below the limit. */
static const char SQL_RATE_NTH[] =
    "SELECT at FROM _tocsin_rate_hits WHERE name = ?1 ORDER BY at LIMIT 1 OFFSET ?2";
static const char SQL_RATE_SWEEP[] = "DELETE FROM _tocsin_rate_hits WHERE expires_at <= ?1";
static const char SQL_RATE_RESET[] = "DELETE FROM _tocsin_rate_hits WHERE name = ?1";

#define RATE_MAX_LIMIT 1000000

/* Steps a statement returning one integer. */
static int rate_int(tocsin_db *db, sqlite3_stmt *st, int64_t *out, int *found, const char *what) {
    int rc = tc_step(db, st);
    *found = rc == SQLITE_ROW;
    if (rc == SQLITE_ROW) *out = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return tc_sqlerr(db, rc, what);
    return TOCSIN_OK;
}

int tocsin_ratelimit_try(tocsin_db *db, int *out_allowed, int64_t *out_retry_after_ms,
                         int64_t *out_remaining, const char *name, int64_t limit, int64_t per_ms) {
    tc_op op;
    sqlite3_stmt *st;
    int64_t now, count = 0, at = 0;
    int found, rc;
    TC_CHECK_DB(db);
    if (!out_allowed) return tc_err(db, TOCSIN_INVALID, "out_allowed must not be NULL");
    *out_allowed = 0;
    if (out_retry_after_ms) *out_retry_after_ms = 0;
    if (out_remaining) *out_remaining = 0;
    if ((rc = tc_check_name(db, "rate limit name", name)) != TOCSIN_OK) return rc;
    if (limit < 1 || limit > RATE_MAX_LIMIT)
        return tc_err(db, TOCSIN_INVALID, "limit must be between 1 and %d", RATE_MAX_LIMIT);
    if (per_ms < 1 || per_ms > TOCSIN_MAX_LEASE_MS)
        return tc_err(db, TOCSIN_INVALID, "per_ms must be between 1 and %lld (366 days)",
                      (long long)TOCSIN_MAX_LEASE_MS);
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    now = tocsin_now(db);
    if (!(st = tc_stmt(db, SQL_RATE_EXPIRE))) return tc_op_end(db, &op, TC_ERRCODE);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, now - per_ms);
    if ((rc = tc_step_done(db, st, "rate limit")) != TOCSIN_OK) return tc_op_end(db, &op, rc);
    if (!(st = tc_stmt(db, SQL_RATE_COUNT))) return tc_op_end(db, &op, TC_ERRCODE);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    if ((rc = rate_int(db, st, &count, &found, "rate limit")) != TOCSIN_OK)
        return tc_op_end(db, &op, rc);
    if (count < limit) {
        if (!(st = tc_stmt(db, SQL_RATE_INSERT))) return tc_op_end(db, &op, TC_ERRCODE);
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, now);
        sqlite3_bind_int64(st, 3, tc_time_add(now, per_ms));
        rc = tc_one_row(db, tc_step_done(db, st, "rate limit"), "rate limit", "_tocsin_rate_hits");
        if (rc != TOCSIN_OK) return tc_op_end(db, &op, rc);
        *out_allowed = 1;
        if (out_remaining) *out_remaining = limit - count - 1;
        return tc_op_end(db, &op, TOCSIN_OK);
    }
    if (!(st = tc_stmt(db, SQL_RATE_NTH))) return tc_op_end(db, &op, TC_ERRCODE);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, count - limit);
    if ((rc = rate_int(db, st, &at, &found, "rate limit")) != TOCSIN_OK)
        return tc_op_end(db, &op, rc);
    if (out_retry_after_ms) *out_retry_after_ms = at + per_ms - now > 1 ? at + per_ms - now : 1;
    /* A refusal writes nothing, but the expiry above may have: commit it. */
    return tc_op_end(db, &op, TOCSIN_OK);
}

int tocsin_ratelimit_sweep(tocsin_db *db, int64_t *out_n) {
    return tc_sweep(db, out_n, SQL_RATE_SWEEP, "sweep rate limits");
}

int tocsin_ratelimit_reset(tocsin_db *db, int64_t *out_n, const char *name) {
    tc_op op;
    sqlite3_stmt *st;
    int rc;
    TC_CHECK_DB(db);
    if (!out_n) return tc_err(db, TOCSIN_INVALID, "out_n must not be NULL");
    *out_n = 0;
    if ((rc = tc_check_name(db, "rate limit name", name)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, SQL_RATE_RESET))) return tc_op_end(db, &op, TC_ERRCODE);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    rc = tc_step_done(db, st, "reset rate limit");
    if (rc == TOCSIN_OK) *out_n = sqlite3_changes(db->conn);
    return tc_op_end(db, &op, rc);
}
