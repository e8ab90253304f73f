/*
 * Named locks: TTL leases with fencing tokens. Every SQL statement of locks
 * lives here. A lock's row is kept after release (owner NULL) so that its
 * token keeps counting up: each new holder gets token + 1, never a value an
 * earlier holder had.
 */
#include "internal.h"

static const char SQL_LOCK_GET[] =
    "SELECT owner, token, expires_at FROM _tocsin_locks WHERE name = ?1";
static const char SQL_LOCK_INSERT[] =
    "INSERT INTO _tocsin_locks(name, owner, token, acquired_at, expires_at, updated_at)"
    " VALUES (?1, ?2, 1, ?3, ?4, ?3)";
static const char SQL_LOCK_TAKE[] =
    "UPDATE _tocsin_locks SET owner = ?2, token = token + 1, acquired_at = ?3, expires_at = ?4,"
    " updated_at = ?3 WHERE name = ?1 RETURNING token";
static const char SQL_LOCK_EXTEND[] =
    "UPDATE _tocsin_locks SET expires_at = ?4, updated_at = ?5"
    " WHERE name = ?1 AND owner = ?2 AND token = ?3";
static const char SQL_LOCK_RELEASE[] =
    "UPDATE _tocsin_locks SET owner = NULL, expires_at = NULL, updated_at = ?4"
    " WHERE name = ?1 AND owner = ?2 AND token = ?3";

/* Lock names beginning with "tocsin." are tocsin's own leases (the scheduler's
 * leader lease, TC_SCHEDULER_LOCK): only the core takes, renews or releases
 * them; anyone may read their holder. */
#define RESERVED_PREFIX "tocsin."

static int lock_check(tocsin_db *db, const char *name, const char *owner, int64_t ttl_ms,
                      int check_ttl, int internal) {
    int rc;
    if ((rc = tc_check_name(db, "lock name", name)) != TOCSIN_OK) return rc;
    if (!internal && strncmp(name, RESERVED_PREFIX, sizeof RESERVED_PREFIX - 1) == 0)
        return tc_err(db, TOCSIN_INVALID,
                      "lock name \"%.64s\" is reserved: names beginning with \"" RESERVED_PREFIX
                      "\" are tocsin's own leases (the scheduler's leader lease is taken with "
                      "tocsin_scheduler_lead)",
                      name);
    if ((rc = tc_check_name(db, "owner", owner)) != TOCSIN_OK) return rc;
    if (check_ttl && (ttl_ms < 1 || ttl_ms > TOCSIN_MAX_LEASE_MS))
        return tc_err(db, TOCSIN_INVALID, "ttl_ms must be between 1 and %lld (366 days)",
                      (long long)TOCSIN_MAX_LEASE_MS);
    return TOCSIN_OK;
}

/* Reads a lock's row: *found 0 when the lock never existed. */
static int lock_read(tocsin_db *db, const char *name, int *found, char **owner, int64_t *token,
                     int64_t *until) {
    sqlite3_stmt *st = tc_stmt(db, SQL_LOCK_GET);
    int rc;
    *found = 0;
    *owner = NULL;
    *token = *until = 0;
    if (!st) return TC_ERRCODE;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    rc = tc_step(db, st);
    if (rc == SQLITE_ROW) {
        *found = 1;
        *token = sqlite3_column_int64(st, 1);
        *until = sqlite3_column_int64(st, 2);
        if (sqlite3_column_type(st, 0) != SQLITE_NULL && !(*owner = tc_col_text(st, 0))) {
            sqlite3_reset(st);
            return tc_err(db, TOCSIN_NOMEM, "read lock: out of memory");
        }
    } else if (rc != SQLITE_DONE) {
        rc = tc_sqlerr(db, rc, "read lock");
        sqlite3_reset(st);
        return rc;
    }
    sqlite3_reset(st);
    return TOCSIN_OK;
}

static int lock_acquire(tocsin_db *db, int64_t *out_token, int64_t *out_until, const char *name,
                        const char *owner, int64_t ttl_ms, int internal) {
    tc_op op;
    sqlite3_stmt *st;
    char *cur = NULL;
    int64_t now, token, until, new_until;
    int found, rc;
    TC_CHECK_DB(db);
    if (!out_token) return tc_err(db, TOCSIN_INVALID, "out_token must not be NULL");
    *out_token = 0;
    if (out_until) *out_until = 0;
    if ((rc = lock_check(db, name, owner, ttl_ms, 1, internal)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    now = tocsin_now(db);
    new_until = tc_time_add(now, ttl_ms);
    if ((rc = lock_read(db, name, &found, &cur, &token, &until)) != TOCSIN_OK) goto done;
    if (!found) {
        if (!(st = tc_stmt(db, SQL_LOCK_INSERT))) { rc = TC_ERRCODE; goto done; }
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, owner, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, now);
        sqlite3_bind_int64(st, 4, new_until);
        if ((rc = tc_one_row(db, tc_step_done(db, st, "acquire lock"), "acquire lock", "_tocsin_locks")) !=
            TOCSIN_OK)
            goto done;
        *out_token = 1;
        if (out_until) *out_until = new_until;
    } else if (cur && until > now) {
        if (strcmp(cur, owner) == 0) {
            /* the holder again: extend, same token */
            if (!(st = tc_stmt(db, SQL_LOCK_EXTEND))) { rc = TC_ERRCODE; goto done; }
            sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 2, owner, -1, SQLITE_STATIC);
            sqlite3_bind_int64(st, 3, token);
            sqlite3_bind_int64(st, 4, new_until > until ? new_until : until);
            sqlite3_bind_int64(st, 5, now);
            /* the row was read just now, in this write: it matches */
            if ((rc = tc_one_row(db, tc_step_done(db, st, "acquire lock"), "acquire lock", "_tocsin_locks")) !=
                TOCSIN_OK)
                goto done;
            *out_token = token;
            if (out_until) *out_until = new_until > until ? new_until : until;
        } else if (out_until) {
            *out_until = until; /* someone else holds it */
        }
    } else {
        /* free, released or lapsed: a new holder, a new token */
        if (!(st = tc_stmt(db, SQL_LOCK_TAKE))) { rc = TC_ERRCODE; goto done; }
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, owner, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, now);
        sqlite3_bind_int64(st, 4, new_until);
        rc = tc_step(db, st);
        if (rc == SQLITE_ROW) token = sqlite3_column_int64(st, 0);
        rc = rc == SQLITE_ROW    ? tc_step_done(db, st, "acquire lock")
             : rc == SQLITE_DONE ? tc_trigger_dropped(db, "acquire lock", "_tocsin_locks") /* read, not updated */
                                 : tc_sqlerr(db, rc, "acquire lock");
        sqlite3_reset(st);
        if (rc != TOCSIN_OK) goto done;
        *out_token = token;
        if (out_until) *out_until = new_until;
    }
done:
    sqlite3_free(cur);
    if (rc != TOCSIN_OK) {
        *out_token = 0;
        if (out_until) *out_until = 0;
    }
    return tc_op_end(db, &op, rc);
}

int tocsin_lock_acquire(tocsin_db *db, int64_t *out_token, int64_t *out_until, const char *name,
                        const char *owner, int64_t ttl_ms) {
    return lock_acquire(db, out_token, out_until, name, owner, ttl_ms, 0);
}

int tc_lock_acquire(tocsin_db *db, int64_t *out_token, const char *name, const char *owner,
                    int64_t ttl_ms) {
    return lock_acquire(db, out_token, NULL, name, owner, ttl_ms, 1);
}

/* renew (extend 1) or release (extend 0) of the holding (owner, token) */
static int lock_holder_op(tocsin_db *db, int *out_ok, const char *name, const char *owner,
                          int64_t token, int64_t ttl_ms, int extend, int internal) {
    tc_op op;
    sqlite3_stmt *st;
    int64_t now;
    int rc;
    TC_CHECK_DB(db);
    if (!out_ok) return tc_err(db, TOCSIN_INVALID, "out_ok must not be NULL");
    *out_ok = 0;
    if ((rc = lock_check(db, name, owner, ttl_ms, extend, internal)) != TOCSIN_OK) return rc;
    if (token < 1) return tc_err(db, TOCSIN_INVALID, "token must be >= 1");
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    now = tocsin_now(db);
    if (!(st = tc_stmt(db, extend ? SQL_LOCK_EXTEND : SQL_LOCK_RELEASE)))
        return tc_op_end(db, &op, TC_ERRCODE);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, owner, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, token);
    if (extend) {
        sqlite3_bind_int64(st, 4, tc_time_add(now, ttl_ms));
        sqlite3_bind_int64(st, 5, now);
    } else {
        sqlite3_bind_int64(st, 4, now);
    }
    rc = tc_step_done(db, st, extend ? "renew lock" : "release lock");
    if (rc == TOCSIN_OK) *out_ok = sqlite3_changes(db->conn) > 0;
    if (rc == TOCSIN_OK && !*out_ok) { /* not the holder, or a trigger dropped the change */
        char *cur = NULL;
        int64_t cur_token = 0, until = 0;
        int found = 0;
        rc = lock_read(db, name, &found, &cur, &cur_token, &until);
        if (rc == TOCSIN_OK && found && cur && strcmp(cur, owner) == 0 && cur_token == token)
            rc = tc_trigger_dropped(db, extend ? "renew lock" : "release lock", "_tocsin_locks");
        sqlite3_free(cur);
    }
    return tc_op_end(db, &op, rc);
}

int tocsin_lock_renew(tocsin_db *db, int *out_ok, const char *name, const char *owner,
                      int64_t token, int64_t ttl_ms) {
    return lock_holder_op(db, out_ok, name, owner, token, ttl_ms, 1, 0);
}

int tocsin_lock_release(tocsin_db *db, int *out_ok, const char *name, const char *owner,
                        int64_t token) {
    return lock_holder_op(db, out_ok, name, owner, token, 0, 0, 0);
}

int tc_lock_release(tocsin_db *db, int *out_ok, const char *name, const char *owner, int64_t token) {
    return lock_holder_op(db, out_ok, name, owner, token, 0, 0, 1);
}

int tocsin_lock_holder(tocsin_db *db, char **out_owner, int64_t *out_token, int64_t *out_until,
                       const char *name) {
    tc_op op;
    char *cur = NULL;
    int64_t token, until;
    int found, rc;
    TC_CHECK_DB(db);
    if (!out_owner || !out_token || !out_until)
        return tc_err(db, TOCSIN_INVALID, "out_owner, out_token and out_until must not be NULL");
    *out_owner = NULL;
    *out_token = *out_until = 0;
    if ((rc = tc_check_name(db, "lock name", name)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 0)) != TOCSIN_OK) return rc;
    rc = lock_read(db, name, &found, &cur, &token, &until);
    if (rc == TOCSIN_OK) {
        *out_token = token;
        if (cur && until > tocsin_now(db)) {
            *out_owner = cur;
            *out_until = until;
            cur = NULL;
        }
    }
    sqlite3_free(cur);
    return tc_op_end(db, &op, rc);
}

/* ---- waiting for a lock ------------------------------------------------------ */

typedef struct lock_wait {
    tocsin_db *db;
    const char *name, *owner;
    int64_t ttl_ms, deadline;
    int64_t *out_token, *out_until;
} lock_wait;

/* A read first: while another owner's lease runs, sleep until it ends (or a
 * commit, e.g. its release, wakes us) instead of queueing on the write lock. */
static int lock_wait_check(void *p, int *done, int64_t *sleep_ms) {
    lock_wait *w = p;
    char *holder = NULL;
    int64_t token = 0, until = 0;
    int rc = tocsin_lock_holder(w->db, &holder, &token, &until, w->name);
    int theirs = holder && strcmp(holder, w->owner) != 0;
    sqlite3_free(holder);
    if (rc != TOCSIN_OK) return rc;
    if (!theirs) {
        rc = tocsin_lock_acquire(w->db, w->out_token, w->out_until, w->name, w->owner, w->ttl_ms);
        if (rc != TOCSIN_OK) return rc;
        if (*w->out_token > 0) {
            *done = 1;
            return TOCSIN_OK;
        }
        until = w->out_until ? *w->out_until : tocsin_now(w->db) + 1;
    }
    return tc_sleep_until_clock(w->db, w->deadline, until, sleep_ms, "the lock was not free");
}

int tocsin_lock_wait(tocsin_db *db, int64_t *out_token, int64_t *out_until, const char *name,
                     const char *owner, int64_t ttl_ms, int64_t deadline_ms, tocsin_sub *sub) {
    lock_wait w;
    int64_t until = 0;
    int rc;
    TC_CHECK_DB(db);
    if (!out_token) return tc_err(db, TOCSIN_INVALID, "out_token must not be NULL");
    *out_token = 0;
    if (out_until) *out_until = 0;
    if ((rc = lock_check(db, name, owner, ttl_ms, 1, 0)) != TOCSIN_OK) return rc;
    w.db = db;
    w.name = name;
    w.owner = owner;
    w.ttl_ms = ttl_ms;
    w.deadline = deadline_ms < 0 ? -1 : deadline_ms;
    w.out_token = out_token;
    w.out_until = &until;
    rc = tc_db_wait(db, sub, lock_wait_check, &w);
    if (rc != TOCSIN_OK) *out_token = 0;
    else if (out_until) *out_until = until;
    return rc;
}
