/*
 * Notifications: every SQL statement of NOTIFY lives in this file. A
 * notification is an ordinary row written in the caller's transaction, so a
 * rollback drops it with the business write; listeners read rows past the id
 * they last saw (the wake engine tells them when to look).
 */
#include "internal.h"

static const char SQL_NOTIFY[] =
    "INSERT INTO _tocsin_notifications(channel, payload, meta, created_at)"
    " VALUES (?1, ?2, ?3, ?4) RETURNING id";
static const char SQL_NOTIFY_READ[] =
    "SELECT id, channel, NULL, payload, meta, created_at FROM _tocsin_notifications"
    " WHERE channel = ?1 AND id > ?2 ORDER BY id LIMIT ?3";
/* The highest id ever handed out, even when those rows were pruned since. */
static const char SQL_MAX_ID[] =
    "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = '_tocsin_notifications'), 0)";
static const char SQL_PRUNE_AGE[] = "DELETE FROM _tocsin_notifications WHERE created_at < ?1";
static const char SQL_PRUNE_KEEP[] =
    "DELETE FROM _tocsin_notifications WHERE id IN (SELECT id FROM (SELECT id,"
    " row_number() OVER (PARTITION BY channel ORDER BY id DESC) AS n"
    " FROM _tocsin_notifications) WHERE n > ?1)";
static const char SQL_AUTOTRIM_GET[] =
    "SELECT json_extract(value, '$.one_in'), json_extract(value, '$.max_age_ms'),"
    " json_extract(value, '$.max_keep') FROM _tocsin_meta WHERE key = 'notify_autotrim'";
static const char SQL_AUTOTRIM_SET[] =
    "INSERT INTO _tocsin_meta(key, value) VALUES ('notify_autotrim',"
    " json_object('one_in', ?1, 'max_age_ms', ?2, 'max_keep', ?3))"
    " ON CONFLICT(key) DO UPDATE SET value = excluded.value";
static const char SQL_AUTOTRIM_OFF[] = "DELETE FROM _tocsin_meta WHERE key = 'notify_autotrim'";

static int prune(tocsin_db *db, int64_t *n, int64_t max_age_ms, int64_t max_keep) {
    sqlite3_stmt *st;
    int rc = TOCSIN_OK;
    *n = 0;
    if (max_age_ms > 0) {
        if (!(st = tc_stmt(db, SQL_PRUNE_AGE))) return db->errcode;
        sqlite3_bind_int64(st, 1, tocsin_now(db) - max_age_ms);
        if ((rc = tc_step_done(db, st, "prune notifications")) != TOCSIN_OK) return rc;
        *n += sqlite3_changes(db->conn);
    }
    if (max_keep > 0) {
        if (!(st = tc_stmt(db, SQL_PRUNE_KEEP))) return db->errcode;
        sqlite3_bind_int64(st, 1, max_keep);
        if ((rc = tc_step_done(db, st, "prune notifications")) != TOCSIN_OK) return rc;
        *n += sqlite3_changes(db->conn);
    }
    return rc;
}

/* The opt-in trim: roll the dice against the stored policy. */
static int autotrim(tocsin_db *db) {
    sqlite3_stmt *st = tc_stmt(db, SQL_AUTOTRIM_GET);
    int64_t one_in, age, keep, n;
    int rc;
    if (!st) return db->errcode;
    rc = tc_step(db, st);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(st);
        return rc == SQLITE_DONE ? TOCSIN_OK : tc_sqlerr(db, rc, "notify auto-trim");
    }
    one_in = sqlite3_column_int64(st, 0);
    age = sqlite3_column_int64(st, 1);
    keep = sqlite3_column_int64(st, 2);
    sqlite3_reset(st);
    if (one_in < 1 || tc_random() % (uint64_t)one_in != 0) return TOCSIN_OK;
    return prune(db, &n, age, keep);
}

int tocsin_notify(tocsin_db *db, int64_t *out_id, const char *channel, const char *payload,
                  const char *meta) {
    tc_op op;
    sqlite3_stmt *st;
    int rc;
    if (!db) return TOCSIN_INVALID;
    tc_clear(db);
    if (!out_id) return tc_err(db, TOCSIN_INVALID, "out_id must not be NULL");
    if ((rc = tc_check_name(db, "channel", channel)) != TOCSIN_OK) return rc;
    if ((rc = tc_check_payload(db, "payload", payload)) != TOCSIN_OK) return rc;
    if ((rc = tc_check_meta(db, meta)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, SQL_NOTIFY))) {
        rc = db->errcode;
    } else {
        sqlite3_bind_text(st, 1, channel, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, payload, -1, SQLITE_STATIC);
        if (meta) sqlite3_bind_text(st, 3, meta, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, tocsin_now(db));
        rc = tc_step(db, st);
        if (rc == SQLITE_ROW) {
            *out_id = sqlite3_column_int64(st, 0);
            rc = tc_step_done(db, st, "notify");
        } else {
            sqlite3_reset(st);
            rc = tc_sqlerr(db, rc, "notify");
        }
    }
    if (rc == TOCSIN_OK) rc = autotrim(db);
    return tc_op_end(db, &op, rc);
}

int tocsin_notify_read(tocsin_db *db, tocsin_message **out, size_t *out_n, const char *channel,
                       int64_t after_id, size_t limit) {
    return tc_read_messages(db, out, out_n, "channel", channel, SQL_NOTIFY_READ, after_id, limit);
}

int tocsin_notify_max_id(tocsin_db *db, int64_t *out_id) {
    tc_op op;
    sqlite3_stmt *st;
    int rc;
    if (!db) return TOCSIN_INVALID;
    tc_clear(db);
    if (!out_id) return tc_err(db, TOCSIN_INVALID, "out_id must not be NULL");
    *out_id = 0;
    if ((rc = tc_op_begin(db, &op, 0)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, SQL_MAX_ID))) {
        rc = db->errcode;
    } else {
        rc = tc_step(db, st);
        if (rc == SQLITE_ROW) *out_id = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
        rc = rc == SQLITE_ROW ? TOCSIN_OK : tc_sqlerr(db, rc, "notify max id");
    }
    return tc_op_end(db, &op, rc);
}

int tocsin_notify_prune(tocsin_db *db, int64_t *out_n, int64_t max_age_ms, int64_t max_keep) {
    tc_op op;
    int64_t n = 0;
    int rc;
    if (!db) return TOCSIN_INVALID;
    tc_clear(db);
    if (!out_n) return tc_err(db, TOCSIN_INVALID, "out_n must not be NULL");
    *out_n = 0;
    if ((rc = tc_check_ms(db, "max_age_ms", max_age_ms, 0)) != TOCSIN_OK) return rc;
    if (max_keep < 0) return tc_err(db, TOCSIN_INVALID, "max_keep must be >= 0");
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    rc = tc_op_end(db, &op, prune(db, &n, max_age_ms, max_keep));
    if (rc == TOCSIN_OK) *out_n = n;
    return rc;
}

int tocsin_notify_set_autotrim(tocsin_db *db, int64_t max_age_ms, int64_t max_keep,
                               int64_t one_in) {
    tc_op op;
    sqlite3_stmt *st;
    int rc;
    if (!db) return TOCSIN_INVALID;
    tc_clear(db);
    if ((rc = tc_check_ms(db, "max_age_ms", max_age_ms, 0)) != TOCSIN_OK) return rc;
    if (max_keep < 0 || one_in < 0)
        return tc_err(db, TOCSIN_INVALID, "max_keep and one_in must be >= 0");
    if (one_in > 0 && !max_age_ms && !max_keep)
        return tc_err(db, TOCSIN_INVALID, "auto-trim needs max_age_ms or max_keep");
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, one_in ? SQL_AUTOTRIM_SET : SQL_AUTOTRIM_OFF))) {
        rc = db->errcode;
    } else {
        if (one_in) {
            sqlite3_bind_int64(st, 1, one_in);
            sqlite3_bind_int64(st, 2, max_age_ms);
            sqlite3_bind_int64(st, 3, max_keep);
        }
        rc = tc_step_done(db, st, "set auto-trim");
    }
    return tc_op_end(db, &op, rc);
}
