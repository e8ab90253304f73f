/*
 * Notifications: every SQL statement of NOTIFY lives in this file. A
 * notification is an ordinary row written in the caller's transaction, so a
 * rollback drops it with the business write; listeners read rows past the id
 * they last saw (the wake engine tells them when to look).
 */
#include "internal.h"

static const char SQL_NOTIFY[] =
    "INSERT INTO _tocsin_notifications(id, channel, payload, meta, created_at)"
    " VALUES (" TC_NEXT_ID("_tocsin_notifications") ", ?1, ?2, ?3, ?4)";
static const char SQL_NOTIFY_READ[] =
    "SELECT id, channel, NULL, payload, meta, created_at FROM _tocsin_notifications"
    " WHERE channel = ?1 AND id > ?2 ORDER BY id LIMIT ?3";
/* The highest id ever handed out, even when those rows were pruned since. */
static const char SQL_MAX_ID[] =
    "SELECT " TC_MAX_ID("_tocsin_notifications");
static const char SQL_PRUNE_AGE[] = "DELETE FROM _tocsin_notifications WHERE created_at < ?1";
static const char SQL_PRUNE_KEEP[] =
    "DELETE FROM _tocsin_notifications WHERE id IN (SELECT id FROM (SELECT id,"
    " row_number() OVER (PARTITION BY channel ORDER BY id DESC) AS n"
    " FROM _tocsin_notifications) WHERE n > ?1)";
/* The first column is 1 when the policy has the shape tocsin_notify_set_autotrim
 * writes (an object of three integers; their ranges are checked in C).
 * json_valid first: a damaged policy is reported as such, not as SQLite's
 * "malformed JSON" on every notify. */
static const char SQL_AUTOTRIM_GET[] =
    "SELECT CASE WHEN json_valid(value) AND json_type(value) = 'object' THEN"
    "  json_type(value, '$.one_in') = 'integer' AND json_type(value, '$.max_age_ms') = 'integer'"
    "  AND json_type(value, '$.max_keep') = 'integer' ELSE 0 END,"
    " CASE WHEN json_valid(value) THEN json_extract(value, '$.one_in') END,"
    " CASE WHEN json_valid(value) THEN json_extract(value, '$.max_age_ms') END,"
    " CASE WHEN json_valid(value) THEN json_extract(value, '$.max_keep') END"
    " FROM _tocsin_meta WHERE key = 'notify_autotrim'";
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
        if (!(st = tc_stmt(db, SQL_PRUNE_AGE))) return TC_ERRCODE;
        sqlite3_bind_int64(st, 1, tocsin_now(db) - max_age_ms);
        if ((rc = tc_step_done(db, st, "prune notifications")) != TOCSIN_OK) return rc;
        *n += sqlite3_changes(db->conn);
    }
    if (max_keep > 0) {
        if (!(st = tc_stmt(db, SQL_PRUNE_KEEP))) return TC_ERRCODE;
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
    if (!st) return TC_ERRCODE;
    rc = tc_step(db, st);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(st);
        return rc == SQLITE_DONE ? TOCSIN_OK : tc_sqlerr(db, rc, "notify auto-trim");
    }
    one_in = sqlite3_column_int64(st, 1);
    age = sqlite3_column_int64(st, 2);
    keep = sqlite3_column_int64(st, 3);
    if (!sqlite3_column_int(st, 0) || one_in < 1 || age < 0 || age > TOCSIN_MAX_TIME_MS || keep < 0 ||
        (!age && !keep)) {
        sqlite3_reset(st);
        /* (a policy tocsin_notify_set_autotrim would refuse: edited by hand, or damaged) */
        return tc_err(db, TOCSIN_CORRUPT,
                      "notify auto-trim: the stored policy (_tocsin_meta key 'notify_autotrim') is "
                      "not one tocsin writes (a JSON object of the integers one_in >= 1, max_age_ms "
                      "and max_keep >= 0, not both 0): set it again (tocsin_notify_autotrim() in "
                      "SQL, tocsin_notify_set_autotrim in C)");
    }
    sqlite3_reset(st);
    if (tc_random() % (uint64_t)one_in != 0) return TOCSIN_OK;
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
        rc = TC_ERRCODE;
    } else {
        sqlite3_bind_text(st, 1, channel, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, payload, -1, SQLITE_STATIC);
        if (meta) sqlite3_bind_text(st, 3, meta, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, tocsin_now(db));
        /* no RETURNING: see publish (stream.c) */
        rc = tc_one_row(db, tc_no_id_left(db, tc_step_done(db, st, "notify"), "notify"), "notify",
                        "_tocsin_notifications");
        if (rc == TOCSIN_OK) *out_id = sqlite3_last_insert_rowid(db->conn);
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
        rc = TC_ERRCODE;
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
        rc = TC_ERRCODE;
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

/* ---- listen: the waiter of notifications ------------------------------------- */

struct tocsin_listener {
    tocsin_db *db; /* private, read-only */
    tocsin_sub *sub;
    char *channel;
    size_t cap;
    int64_t last_id, dropped;
    tocsin_message *ring; /* what the current fetch kept: the newest `cap` */
    size_t head, count;
    int64_t end_us;
};

static void msg_clear(tocsin_message *m) {
    sqlite3_free(m->name);
    sqlite3_free(m->key);
    sqlite3_free(m->payload);
    sqlite3_free(m->meta);
    memset(m, 0, sizeof *m);
}

/* Reads everything past last_id, keeping the newest `cap` in the ring. */
static int listen_fetch(tocsin_listener *l) {
    for (;;) {
        tocsin_message *page = NULL;
        size_t n = 0, i;
        int rc = tocsin_notify_read(l->db, &page, &n, l->channel, l->last_id, l->cap);
        if (rc != TOCSIN_OK) return rc;
        for (i = 0; i < n; i++) {
            if (l->count == l->cap) {
                msg_clear(&l->ring[l->head]);
                l->head = (l->head + 1) % l->cap;
                l->count--;
                l->dropped++;
            }
            l->ring[(l->head + l->count) % l->cap] = page[i];
            l->count++;
            l->last_id = page[i].id;
        }
        sqlite3_free(page); /* the strings moved to the ring */
        if (n < l->cap) return TOCSIN_OK;
    }
}

static int listen_check(void *p, int *done, int64_t *sleep_ms) {
    tocsin_listener *l = p;
    int64_t max = 0;
    int rc = listen_fetch(l);
    if (rc != TOCSIN_OK) return rc;
    if (l->count) {
        *done = 1;
        return TOCSIN_OK;
    }
    /* Ids never go back (the highest one handed out is kept, pruned or not): below
     * the last one seen, the file's content was put back under it -- a backup
     * restored into the file keeps its inode -- and every notification up to that
     * id would pass unseen. */
    if ((rc = tocsin_notify_max_id(l->db, &max)) != TOCSIN_OK) return rc;
    if (max < l->last_id)
        return tc_err(NULL, TOCSIN_REPLACED,
                      "the database's notifications went back (the highest id is %lld, this listener "
                      "saw %lld): the file's content was replaced, as by a restored backup; listen again",
                      (long long)max, (long long)l->last_id);
    return tc_sleep_until(l->end_us, sleep_ms, "no notification arrived");
}

/* Frees a half-opened listener, keeping the thread's error (closing its
 * private handle clears it). */
static int listen_open_failed(tocsin_listener *l, int rc) {
    TC_KEEP_ERROR(tocsin_listen_close(l));
    return rc;
}

int tocsin_listen_open(tocsin_listener **out, tocsin_db *db, const char *channel,
                       size_t buffer_size) {
    tocsin_listener *l;
    int rc;
    if (!out) return tc_err(NULL, TOCSIN_INVALID, "out must not be NULL");
    *out = NULL;
    if (!db) return tc_err(NULL, TOCSIN_INVALID, "db must not be NULL");
    tc_clear(db);
    if ((rc = tc_check_name(db, "channel", channel)) != TOCSIN_OK) return rc;
    if (buffer_size < 1 || buffer_size > TOCSIN_MAX_BATCH)
        return tc_err(db, TOCSIN_INVALID, "buffer_size must be between 1 and %d", TOCSIN_MAX_BATCH);
    if (!(l = sqlite3_malloc(sizeof *l))) return tc_err(db, TOCSIN_NOMEM, "listen: out of memory");
    memset(l, 0, sizeof *l);
    l->cap = buffer_size;
    l->channel = tc_strdup(channel);
    l->ring = sqlite3_malloc64(buffer_size * sizeof *l->ring);
    if (!l->channel || !l->ring) {
        tocsin_listen_close(l);
        return tc_err(db, TOCSIN_NOMEM, "listen: out of memory");
    }
    memset(l->ring, 0, buffer_size * sizeof *l->ring);
    /* Subscribe first, then read where to start: nothing committed in between is lost. */
    if ((rc = tocsin_sub_open(&l->sub, db)) != TOCSIN_OK ||
        (rc = tc_open_private(db, &l->db, 1)) != TOCSIN_OK ||
        (rc = tocsin_notify_max_id(l->db, &l->last_id)) != TOCSIN_OK)
        return listen_open_failed(l, rc);
    *out = l;
    return TOCSIN_OK;
}

int tocsin_listen_fd(tocsin_listener *l) { return l ? tocsin_sub_fd(l->sub) : -1; }
int64_t tocsin_listen_dropped(tocsin_listener *l) { return l ? l->dropped : 0; }
int tocsin_listen_poke(tocsin_listener *l) {
    return l ? tocsin_sub_poke(l->sub) : tc_err(NULL, TOCSIN_INVALID, "listener must not be NULL");
}

int tocsin_listen_next(tocsin_listener *l, tocsin_message **out, size_t *out_n, int timeout_ms) {
    int rc;
    size_t i;
    if (out) *out = NULL;
    if (out_n) *out_n = 0;
    tc_clear(NULL);
    if (!l || !out || !out_n)
        return tc_err(NULL, TOCSIN_INVALID, "listener, out and out_n must not be NULL");
    if (!tc_sub_enter(l->sub)) return TC_ERRCODE; /* a racing close waits until this call returns */
    l->end_us = tc_deadline_us(timeout_ms);
    if ((rc = tc_wait_loop(l->sub, listen_check, l)) == TOCSIN_OK) {
        if (!(*out = sqlite3_malloc64(l->count * sizeof **out))) {
            rc = tc_err(l->db, TOCSIN_NOMEM, "listen: out of memory");
        } else {
            for (i = 0; i < l->count; i++) {
                (*out)[i] = l->ring[(l->head + i) % l->cap];
                memset(&l->ring[(l->head + i) % l->cap], 0, sizeof *l->ring);
            }
            *out_n = l->count;
            l->head = l->count = 0;
        }
    }
    tc_sub_leave(l->sub);
    return rc;
}

int tocsin_listen_close(tocsin_listener *l) {
    size_t i;
    if (!l) return TOCSIN_OK;
    tc_sub_shut(l->sub); /* a tocsin_listen_next of another thread ends with TOCSIN_CLOSED */
    if (l->ring)
        for (i = 0; i < l->count; i++) msg_clear(&l->ring[(l->head + i) % l->cap]);
    sqlite3_free(l->ring);
    tocsin_sub_close(l->sub);
    tocsin_close(l->db);
    sqlite3_free(l->channel);
    sqlite3_free(l);
    return TOCSIN_OK;
}
