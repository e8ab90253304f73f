/*
 * Durable streams: every SQL statement of streams lives in this file.
 * An event's offset is its id in _tocsin_events: never reused (TC_NEXT_ID),
 * and with SQLite's single writer ids become visible in order, so a
 * reader's "offset > last seen" cursor never skips an event.
 */
#include "internal.h"

static const char SQL_PUBLISH[] =
    "INSERT INTO _tocsin_events(id, topic, key, payload, meta, created_at)"
    " VALUES (" TC_NEXT_ID("_tocsin_events") ", ?1, ?2, ?3, ?4, ?5)";
static const char SQL_STREAM_READ[] =
    "SELECT id, topic, key, payload, meta, created_at FROM _tocsin_events"
    " WHERE topic = ?1 AND id > ?2 ORDER BY id LIMIT ?3";
static const char SQL_SAVE_OFFSET[] =
    "INSERT INTO _tocsin_offsets(consumer, topic, position, updated_at) VALUES (?1, ?2, ?3, ?4)"
    " ON CONFLICT(consumer, topic) DO UPDATE SET position = max(position, excluded.position),"
    " updated_at = excluded.updated_at RETURNING position";
/* The highest offset ever handed out (trimmed events included): no offset
 * beyond it can be saved, or every later event would count as passed. */
static const char SQL_LAST_OFFSET[] =
    "SELECT " TC_MAX_ID("_tocsin_events");
static const char SQL_OFFSET[] =
    "SELECT position FROM _tocsin_offsets WHERE consumer = ?1 AND topic = ?2";
static const char SQL_TRIM_AGE[] =
    "DELETE FROM _tocsin_events WHERE topic = ?1 AND created_at < ?2";
static const char SQL_TRIM_COUNT[] =
    "DELETE FROM _tocsin_events WHERE topic = ?1 AND id <= (SELECT id FROM _tocsin_events"
    " WHERE topic = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)";
static const char SQL_TRIM_CONSUMERS[] =
    "DELETE FROM _tocsin_events WHERE topic = ?1"
    " AND id <= (SELECT min(position) FROM _tocsin_offsets WHERE topic = ?1)";

#define TC_MAX_READ TOCSIN_MAX_BATCH

/* ---- messages, shared with notify.c --------------------------------------- */

void tocsin_messages_free(tocsin_message *msgs, size_t n) {
    size_t i;
    if (!msgs) return;
    for (i = 0; i < n; i++) {
        sqlite3_free(msgs[i].name);
        sqlite3_free(msgs[i].key);
        sqlite3_free(msgs[i].payload);
        sqlite3_free(msgs[i].meta);
    }
    sqlite3_free(msgs);
}

int tc_collect_messages(tocsin_db *db, sqlite3_stmt *st, size_t cap, tocsin_message **out,
                        size_t *out_n, const char *what) {
    tocsin_message *m = NULL;
    size_t n = 0;
    int rc;
    *out = NULL;
    *out_n = 0;
    if (!(m = sqlite3_malloc64(cap * sizeof *m))) {
        sqlite3_reset(st);
        return tc_err(db, TOCSIN_NOMEM, "%s: out of memory", what);
    }
    while (n < cap && (rc = tc_step(db, st)) == SQLITE_ROW) {
        tocsin_message *x = &m[n++];
        x->id = sqlite3_column_int64(st, 0);
        x->name = tc_col_text(st, 1);
        x->key = tc_col_text(st, 2);
        x->payload = tc_col_text(st, 3);
        x->meta = tc_col_text(st, 4);
        x->created_at = sqlite3_column_int64(st, 5);
        if (!x->name || !x->payload) {
            sqlite3_reset(st);
            tocsin_messages_free(m, n);
            return tc_err(db, TOCSIN_NOMEM, "%s: out of memory", what);
        }
    }
    if (n == cap) rc = SQLITE_DONE;
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        tocsin_messages_free(m, n);
        return tc_sqlerr(db, rc, what);
    }
    if (n == 0) {
        sqlite3_free(m);
        m = NULL;
    }
    *out = m;
    *out_n = n;
    return TOCSIN_OK;
}

char *tc_messages_json(const tocsin_message *m, size_t n, int stream) {
    tc_buf b = {0};
    size_t i;
    tc_buf_puts(&b, "[");
    for (i = 0; i < n; i++) {
        int first = 1;
        tc_buf_puts(&b, i ? ",{" : "{");
        tc_buf_key(&b, stream ? "offset" : "id", &first);
        tc_buf_i64(&b, m[i].id);
        tc_buf_key(&b, stream ? "topic" : "channel", &first);
        tc_buf_jstr(&b, m[i].name);
        if (stream) {
            tc_buf_key(&b, "key", &first);
            tc_buf_jstr(&b, m[i].key);
        }
        tc_buf_key(&b, "payload", &first);
        tc_buf_jraw(&b, m[i].payload);
        tc_buf_key(&b, "meta", &first);
        tc_buf_jraw(&b, m[i].meta);
        tc_buf_key(&b, "created_at", &first);
        tc_buf_i64(&b, m[i].created_at);
        tc_buf_puts(&b, "}");
    }
    tc_buf_puts(&b, "]");
    return tc_buf_take(&b);
}

int tc_check_limit(tocsin_db *db, size_t limit) {
    if (limit < 1 || limit > TC_MAX_READ)
        return tc_err(db, TOCSIN_INVALID, "limit must be between 1 and %d", TC_MAX_READ);
    return TOCSIN_OK;
}

/* ---- streams -------------------------------------------------------------- */

static int publish(tocsin_db *db, int64_t *out_offsets, const char *topic,
                   const char *const *payloads, const char *const *keys, const char *meta,
                   size_t n) {
    tc_op op;
    size_t i;
    int64_t now;
    int rc = TOCSIN_OK;
    if (!db) return TOCSIN_INVALID;
    tc_clear(db);
    if (!out_offsets || (!payloads && n))
        return tc_err(db, TOCSIN_INVALID, "out_offsets and payloads must not be NULL");
    if ((rc = tc_check_name(db, "topic", topic)) != TOCSIN_OK) return rc;
    if ((rc = tc_check_meta(db, meta)) != TOCSIN_OK) return rc;
    for (i = 0; i < n; i++) {
        if ((rc = tc_check_payload(db, "payload", payloads[i])) != TOCSIN_OK ||
            (keys && keys[i] && (rc = tc_check_name(db, "key", keys[i])) != TOCSIN_OK))
            /* which one, when there are several (as a batch of jobs says) */
            return n > 1 ? tc_err(db, rc, "event %zu: %s", i, tc_tls()->msg) : rc;
    }
    if (n == 0) return TOCSIN_OK;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    now = tocsin_now(db);
    for (i = 0; i < n && rc == TOCSIN_OK; i++) {
        sqlite3_stmt *st = tc_stmt(db, SQL_PUBLISH);
        if (!st) {
            rc = TC_ERRCODE;
            break;
        }
        sqlite3_bind_text(st, 1, topic, -1, SQLITE_STATIC);
        if (keys && keys[i]) sqlite3_bind_text(st, 2, keys[i], -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, payloads[i], -1, SQLITE_STATIC);
        if (meta) sqlite3_bind_text(st, 4, meta, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, now);
        /* No RETURNING (it buffers its row in an ephemeral table): the
         * statement's last rowid is the offset. */
        rc = tc_one_row(db, tc_no_id_left(db, tc_step_done(db, st, "publish"), "publish"), "publish",
                        "_tocsin_events");
        if (rc == TOCSIN_OK) out_offsets[i] = sqlite3_last_insert_rowid(db->conn);
    }
    return tc_op_end(db, &op, rc);
}

int tocsin_stream_publish(tocsin_db *db, int64_t *out_offset, const char *topic,
                          const char *payload, const char *key, const char *meta) {
    return publish(db, out_offset, topic, &payload, &key, meta, 1);
}

int tocsin_stream_publish_many(tocsin_db *db, int64_t *out_offsets, const char *topic,
                               const char *const *payloads, const char *const *keys, size_t n) {
    return publish(db, out_offsets, topic, payloads, keys, NULL, n);
}

int tc_read_messages(tocsin_db *db, tocsin_message **out, size_t *out_n, const char *kind,
                     const char *name, const char *sql, int64_t after, size_t limit) {
    tc_op op;
    sqlite3_stmt *st;
    int rc;
    if (!db) return TOCSIN_INVALID;
    tc_clear(db);
    if (!out || !out_n) return tc_err(db, TOCSIN_INVALID, "out and out_n must not be NULL");
    *out = NULL;
    *out_n = 0;
    if ((rc = tc_check_name(db, kind, name)) != TOCSIN_OK) return rc;
    if ((rc = tc_check_limit(db, limit)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, TC_OP_READ_ONE)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, sql))) {
        rc = TC_ERRCODE;
    } else {
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, after);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)limit);
        rc = tc_collect_messages(db, st, limit, out, out_n, kind);
    }
    return tc_op_end(db, &op, rc);
}

int tocsin_stream_read(tocsin_db *db, tocsin_message **out, size_t *out_n, const char *topic,
                       int64_t after, size_t limit) {
    return tc_read_messages(db, out, out_n, "topic", topic, SQL_STREAM_READ, after, limit);
}

/* The highest offset ever handed out, inside an op of the caller's. */
static int last_offset(tocsin_db *db, int64_t *out, const char *what) {
    sqlite3_stmt *st = tc_stmt(db, SQL_LAST_OFFSET);
    int rc;
    *out = 0;
    if (!st) return TC_ERRCODE;
    rc = tc_step(db, st);
    if (rc == SQLITE_ROW) *out = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return rc == SQLITE_ROW ? TOCSIN_OK : tc_sqlerr(db, rc, what);
}

int tocsin_stream_save_offset(tocsin_db *db, int64_t *out_stored, const char *consumer,
                              const char *topic, int64_t offset) {
    tc_op op;
    sqlite3_stmt *st;
    int rc;
    int64_t stored = 0, last;
    if (!db) return TOCSIN_INVALID;
    tc_clear(db);
    if ((rc = tc_check_name(db, "consumer", consumer)) != TOCSIN_OK) return rc;
    if ((rc = tc_check_name(db, "topic", topic)) != TOCSIN_OK) return rc;
    if (offset < 0) return tc_err(db, TOCSIN_INVALID, "offset must be >= 0");
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    if ((rc = last_offset(db, &last, "save offset")) != TOCSIN_OK) return tc_op_end(db, &op, rc);
    if (offset > last)
        return tc_op_end(db, &op,
                         tc_err(db, TOCSIN_INVALID,
                                "offset %lld is beyond the end of the streams (the last offset is %lld)",
                                (long long)offset, (long long)last));
    if (!(st = tc_stmt(db, SQL_SAVE_OFFSET))) {
        rc = TC_ERRCODE;
    } else {
        sqlite3_bind_text(st, 1, consumer, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, topic, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, offset);
        sqlite3_bind_int64(st, 4, tocsin_now(db));
        rc = tc_step(db, st);
        if (rc == SQLITE_ROW) {
            stored = sqlite3_column_int64(st, 0);
            rc = tc_step_done(db, st, "save offset");
        } else {
            sqlite3_reset(st);
            /* no row back: a trigger dropped the insert or the update */
            rc = rc == SQLITE_DONE ? tc_trigger_dropped(db, "save offset", "_tocsin_offsets")
                                   : tc_sqlerr(db, rc, "save offset");
        }
    }
    rc = tc_op_end(db, &op, rc);
    if (rc == TOCSIN_OK && out_stored) *out_stored = stored;
    return rc;
}

int tocsin_stream_offset(tocsin_db *db, int64_t *out_offset, const char *consumer,
                         const char *topic) {
    tc_op op;
    sqlite3_stmt *st;
    int rc;
    if (!db) return TOCSIN_INVALID;
    tc_clear(db);
    if (!out_offset) return tc_err(db, TOCSIN_INVALID, "out_offset must not be NULL");
    *out_offset = 0;
    if ((rc = tc_check_name(db, "consumer", consumer)) != TOCSIN_OK) return rc;
    if ((rc = tc_check_name(db, "topic", topic)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 0)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, SQL_OFFSET))) {
        rc = TC_ERRCODE;
    } else {
        sqlite3_bind_text(st, 1, consumer, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, topic, -1, SQLITE_STATIC);
        rc = tc_step(db, st);
        if (rc == SQLITE_ROW) *out_offset = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
        rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? TOCSIN_OK : tc_sqlerr(db, rc, "read offset");
    }
    return tc_op_end(db, &op, rc);
}

/* Runs a DELETE bound to (topic, x), adding its changes to *n. */
static int trim_step(tocsin_db *db, const char *sql, const char *topic, int64_t x, int64_t *n) {
    sqlite3_stmt *st = tc_stmt(db, sql);
    int rc;
    if (!st) return TC_ERRCODE;
    sqlite3_bind_text(st, 1, topic, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, x);
    rc = tc_step_done(db, st, "trim stream");
    if (rc == TOCSIN_OK) *n += sqlite3_changes(db->conn);
    return rc;
}

int tocsin_stream_trim(tocsin_db *db, int64_t *out_n, const char *topic,
                       const tocsin_trim_opts *o) {
    tc_op op;
    int rc;
    int64_t n = 0;
    if (!db) return TOCSIN_INVALID;
    tc_clear(db);
    if (!out_n || !o) return tc_err(db, TOCSIN_INVALID, "out_n and opts must not be NULL");
    *out_n = 0;
    if ((rc = tc_check_name(db, "topic", topic)) != TOCSIN_OK) return rc;
    if ((rc = TC_CHECK_VERSION(db, "trim options", o->version, TOCSIN_TRIM_OPTS)) != TOCSIN_OK) return rc;
    if ((rc = tc_check_ms(db, "max_age_ms", o->max_age_ms, 0)) != TOCSIN_OK) return rc;
    if (o->max_count < 0) return tc_err(db, TOCSIN_INVALID, "max_count must be >= 0");
    if (!o->max_age_ms && !o->max_count && !o->below_consumers)
        return tc_err(db, TOCSIN_INVALID, "trim needs max_age_ms, max_count or below_consumers");
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    if (o->max_age_ms) rc = trim_step(db, SQL_TRIM_AGE, topic, tocsin_now(db) - o->max_age_ms, &n);
    if (rc == TOCSIN_OK && o->max_count) rc = trim_step(db, SQL_TRIM_COUNT, topic, o->max_count, &n);
    if (rc == TOCSIN_OK && o->below_consumers) rc = trim_step(db, SQL_TRIM_CONSUMERS, topic, 0, &n);
    rc = tc_op_end(db, &op, rc);
    if (rc == TOCSIN_OK) *out_n = n;
    return rc;
}

/* ---- stream subscriptions: replay, then live ----------------------------------- */

struct tocsin_stream_sub {
    tocsin_db *db; /* private, read-write (offsets) */
    tocsin_sub *sub;
    char *topic, *consumer;
    size_t batch;
    int64_t every, every_ms;
    int save_on_close;
    int64_t saved;     /* the offset last saved (or read at open) */
    int64_t position;  /* offset of the last event handed out */
    int64_t seen;      /* an offset known to have been handed out by the file (<= position) */
    int64_t before;    /* where the last call's batch began (its events are > this) */
    int64_t last_n;    /* events handed out by the last call */
    int64_t unsaved;   /* processed events not saved yet */
    int64_t saved_at;  /* clock time of the last save */
    int64_t end_us;
    tocsin_message *got;
    size_t got_n;
};

static int sub_save(tocsin_stream_sub *s, int64_t offset) {
    int rc = tocsin_stream_save_offset(s->db, NULL, s->consumer, s->topic, offset);
    if (rc == TOCSIN_OK) {
        s->unsaved = 0;
        s->saved = offset;
        s->saved_at = tocsin_now(s->db);
    }
    return rc;
}

/* The highest offset ever handed out, in a read of its own. */
static int sub_last_offset(tocsin_stream_sub *s, int64_t *out) {
    tc_op op;
    int rc;
    *out = 0;
    if ((rc = tc_op_begin(s->db, &op, TC_OP_READ_ONE)) != TOCSIN_OK) return rc;
    return tc_op_end(s->db, &op, last_offset(s->db, out, "stream subscription"));
}

static int sub_check(void *p, int *done, int64_t *sleep_ms) {
    tocsin_stream_sub *s = p;
    int64_t last = 0;
    int rc = tocsin_stream_read(s->db, &s->got, &s->got_n, s->topic, s->position, s->batch);
    if (rc != TOCSIN_OK) return rc;
    if (s->got_n) {
        *done = 1;
        return TOCSIN_OK;
    }
    /* Offsets never go back: below one the file handed out, its content was put
     * back under the subscription (a backup restored into the file keeps its
     * inode), and every event up to there would pass unseen. */
    if (s->seen > 0) {
        if ((rc = sub_last_offset(s, &last)) != TOCSIN_OK) return rc;
        if (last < s->seen)
            return tc_err(NULL, TOCSIN_REPLACED,
                          "the stream's offsets went back (the last offset is %lld, this subscription "
                          "is at %lld): the file's content was replaced, as by a restored backup; "
                          "subscribe again",
                          (long long)last, (long long)s->seen);
    }
    return tc_sleep_until(s->end_us, sleep_ms, "no event arrived");
}

/* Frees a half-opened subscription without saving, keeping the thread's error
 * (closing its private handle clears it). */
static int sub_open_failed(tocsin_stream_sub *s, int rc) {
    s->every = s->every_ms = 0;
    s->save_on_close = 0;
    TC_KEEP_ERROR(tocsin_stream_sub_close(s));
    return rc;
}

int tocsin_stream_sub_open(tocsin_stream_sub **out, tocsin_db *db, const char *topic,
                           const char *consumer, const tocsin_stream_sub_opts *opts) {
    tocsin_stream_sub_opts o = TOCSIN_STREAM_SUB_OPTS_INIT;
    tocsin_stream_sub *s;
    int rc;
    if (!out) return tc_err(NULL, TOCSIN_INVALID, "out must not be NULL");
    *out = NULL;
    if (!db) return tc_err(NULL, TOCSIN_INVALID, "db must not be NULL");
    tc_clear(db);
    if (opts) {
        int vrc = TC_CHECK_VERSION(db, "stream subscription options", opts->version,
                                   TOCSIN_STREAM_SUB_OPTS);
        if (vrc != TOCSIN_OK) return vrc;
        /* field by field: a version-1 struct ends before save_on_close */
        o.from_offset = opts->from_offset;
        o.batch = opts->batch;
        o.autosave_every = opts->autosave_every;
        o.autosave_ms = opts->autosave_ms;
        o.save_on_close = opts->version >= 2 ? opts->save_on_close : 0;
    }
    if ((rc = tc_check_name(db, "topic", topic)) != TOCSIN_OK) return rc;
    if (consumer && (rc = tc_check_name(db, "consumer", consumer)) != TOCSIN_OK) return rc;
    if (o.from_offset < -1) return tc_err(db, TOCSIN_INVALID, "from_offset must be >= 0, or -1");
    if (o.batch > TOCSIN_MAX_BATCH)
        return tc_err(db, TOCSIN_INVALID, "batch must be between 1 and %d", TOCSIN_MAX_BATCH);
    if (o.autosave_every < 0 || o.autosave_ms < 0)
        return tc_err(db, TOCSIN_INVALID, "autosave_every and autosave_ms must be >= 0");
    if (!consumer && (o.from_offset < 0 || o.autosave_every || o.autosave_ms || o.save_on_close))
        return tc_err(db, TOCSIN_INVALID,
                      "consumer must be set to resume from a saved offset, to autosave or to save on close");
    if (!(s = sqlite3_malloc(sizeof *s)))
        return tc_err(db, TOCSIN_NOMEM, "stream subscription: out of memory");
    memset(s, 0, sizeof *s);
    s->batch = o.batch ? o.batch : 100;
    s->every = o.autosave_every;
    s->every_ms = o.autosave_ms;
    s->save_on_close = o.save_on_close != 0;
    s->topic = tc_strdup(topic);
    s->consumer = consumer ? tc_strdup(consumer) : NULL;
    if (!s->topic || (consumer && !s->consumer)) {
        tocsin_stream_sub_close(s);
        return tc_err(db, TOCSIN_NOMEM, "stream subscription: out of memory");
    }
    /* Subscribe first, then read the saved offset: the replay and the live
     * tail meet without a gap. */
    if ((rc = tocsin_sub_open(&s->sub, db)) != TOCSIN_OK ||
        (rc = tc_open_private(db, &s->db, 0)) != TOCSIN_OK) {
        return sub_open_failed(s, rc);
    }
    s->position = o.from_offset;
    if (o.from_offset < 0 &&
        (rc = tocsin_stream_offset(s->db, &s->position, consumer, topic)) != TOCSIN_OK) {
        return sub_open_failed(s, rc);
    }
    /* a saved offset was at most the last one when saved; a from_offset may be beyond */
    if ((rc = sub_last_offset(s, &s->seen)) != TOCSIN_OK) {
        return sub_open_failed(s, rc);
    }
    if (s->seen > s->position) s->seen = s->position;
    s->saved = s->position;
    s->before = s->position;
    s->saved_at = tocsin_now(s->db);
    *out = s;
    return TOCSIN_OK;
}

int tocsin_stream_sub_next(tocsin_stream_sub *s, tocsin_message **out, size_t *out_n,
                           int timeout_ms) {
    int rc = TOCSIN_OK;
    if (out) *out = NULL;
    if (out_n) *out_n = 0;
    tc_clear(NULL);
    if (!s || !out || !out_n)
        return tc_err(NULL, TOCSIN_INVALID, "subscription, out and out_n must not be NULL");
    if (!tc_sub_enter(s->sub)) return TC_ERRCODE; /* a racing close waits until this call returns */
    /* What the previous call handed out is processed now. */
    s->unsaved += s->last_n;
    s->last_n = 0;
    if (s->unsaved &&
        ((s->every && s->unsaved >= s->every) ||
         (s->every_ms && tocsin_now(s->db) - s->saved_at >= s->every_ms)))
        rc = sub_save(s, s->position);
    s->end_us = tc_deadline_us(timeout_ms);
    if (rc == TOCSIN_OK && (rc = tc_wait_loop(s->sub, sub_check, s)) == TOCSIN_OK) {
        *out = s->got;
        *out_n = s->got_n;
        s->before = s->position;
        s->position = s->seen = s->got[s->got_n - 1].id;
        s->last_n = (int64_t)s->got_n;
        s->got = NULL;
        s->got_n = 0;
    }
    tc_sub_leave(s->sub);
    return rc;
}

int64_t tocsin_stream_sub_position(tocsin_stream_sub *s) { return s ? s->position : 0; }
int tocsin_stream_sub_fd(tocsin_stream_sub *s) { return s ? tocsin_sub_fd(s->sub) : -1; }
int tocsin_stream_sub_poke(tocsin_stream_sub *s) {
    return s ? tocsin_sub_poke(s->sub) : tc_err(NULL, TOCSIN_INVALID, "subscription must not be NULL");
}

int tocsin_stream_sub_rewind(tocsin_stream_sub *s, int64_t offset) {
    tc_clear(NULL);
    if (!s) return tc_err(NULL, TOCSIN_INVALID, "subscription must not be NULL");
    if (offset < s->before || offset > s->position)
        return tc_err(s->db, TOCSIN_INVALID,
                      "offset %lld is not in the last batch handed out (from %lld to %lld)",
                      (long long)offset, (long long)s->before, (long long)s->position);
    if (offset < s->position) {
        s->position = offset;
        s->last_n = offset > s->before; /* a count for autosave_every: at least the events kept */
    }
    return TOCSIN_OK;
}

int tocsin_stream_sub_save(tocsin_stream_sub *s) {
    int rc;
    tc_clear(NULL);
    if (!s) return tc_err(NULL, TOCSIN_INVALID, "subscription must not be NULL");
    if (!s->consumer)
        return tc_err(s->db, TOCSIN_INVALID, "this subscription has no consumer to save for");
    if (!tc_sub_enter(s->sub)) return TC_ERRCODE; /* a racing close waits until the save ends */
    s->unsaved += s->last_n;
    s->last_n = 0;
    rc = sub_save(s, s->position);
    tc_sub_leave(s->sub);
    return rc;
}

int tocsin_stream_sub_close(tocsin_stream_sub *s) {
    int rc = TOCSIN_OK;
    if (!s) return TOCSIN_OK;
    tc_sub_shut(s->sub); /* a tocsin_stream_sub_next of another thread ends with TOCSIN_CLOSED */
    if (s->db && s->consumer && (s->every || s->every_ms || s->save_on_close) &&
        (s->unsaved || s->last_n) && s->position != s->saved) {
        tc_clear(s->db);
        rc = sub_save(s, s->position);
    }
    tocsin_messages_free(s->got, s->got_n);
    tocsin_sub_close(s->sub);
    /* closing the private handle clears the thread's error: a failed save keeps its own */
    if (rc != TOCSIN_OK) TC_KEEP_ERROR(tocsin_close(s->db));
    else tocsin_close(s->db);
    sqlite3_free(s->topic);
    sqlite3_free(s->consumer);
    sqlite3_free(s);
    return rc;
}

