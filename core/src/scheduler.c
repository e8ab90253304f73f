/*
 * The scheduler: cron schedules that enqueue jobs. Every SQL statement of the
 * scheduler lives here.
 *
 * A schedule row carries next_fire, the first boundary not yet fired. A tick
 * fires every schedule whose next_fire has come, in one write transaction:
 * it advances next_fire with a compare-and-set on the value it read and
 * enqueues the jobs only when that update took, so tickers racing on any
 * number of handles fire each boundary exactly once (and the jobs and the
 * advance commit or roll back together).
 */
#include "internal.h"

#include <stdio.h>

#define SCHED_COLS                                                                         \
    "name, cron, queue, payload, meta, priority, max_attempts, job_expires_ms, catch_up,"   \
    " max_catch_up, local_time, paused, next_fire, last_fire, last_job_id, fired_count,"    \
    " skipped_count, created_at, updated_at"

static const char SQL_SCHED_GET[] =
    "SELECT " SCHED_COLS " FROM _tocsin_schedules WHERE name = ?1";
static const char SQL_SCHED_LIST[] = "SELECT " SCHED_COLS " FROM _tocsin_schedules ORDER BY name";
static const char SQL_SCHED_UPSERT[] =
    "INSERT INTO _tocsin_schedules(name, cron, queue, payload, meta, priority, max_attempts,"
    " job_expires_ms, catch_up, max_catch_up, local_time, paused, next_fire, created_at,"
    " updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 0, ?12, ?13, ?13)"
    " ON CONFLICT(name) DO UPDATE SET cron = excluded.cron, queue = excluded.queue,"
    " payload = excluded.payload, meta = excluded.meta, priority = excluded.priority,"
    " max_attempts = excluded.max_attempts, job_expires_ms = excluded.job_expires_ms,"
    " catch_up = excluded.catch_up, max_catch_up = excluded.max_catch_up,"
    " local_time = excluded.local_time, next_fire = excluded.next_fire,"
    " updated_at = excluded.updated_at";
static const char SQL_SCHED_PAUSE[] =
    "UPDATE _tocsin_schedules SET paused = 1, updated_at = ?2 WHERE name = ?1";
static const char SQL_SCHED_RESUME[] =
    "UPDATE _tocsin_schedules SET paused = 0, next_fire = ?2, updated_at = ?3"
    " WHERE name = ?1 AND paused = 1";
static const char SQL_SCHED_DELETE[] = "DELETE FROM _tocsin_schedules WHERE name = ?1";
static const char SQL_SCHED_DUE[] =
    "SELECT " SCHED_COLS " FROM _tocsin_schedules WHERE paused = 0 AND next_fire <= ?1"
    " ORDER BY next_fire, name LIMIT ?2";
/* The compare-and-set that makes a boundary fire once. */
static const char SQL_SCHED_ADVANCE[] =
    "UPDATE _tocsin_schedules SET next_fire = ?3, last_fire = ?4, fired_count = fired_count + ?5,"
    " skipped_count = skipped_count + ?6, updated_at = ?7"
    " WHERE name = ?1 AND next_fire = ?2 AND paused = 0";
static const char SQL_SCHED_LAST_JOB[] =
    "UPDATE _tocsin_schedules SET last_job_id = ?2 WHERE name = ?1";
static const char SQL_SCHED_NEXT[] =
    "SELECT min(next_fire) FROM _tocsin_schedules WHERE paused = 0";
/* A running schedule whose next_fire is text or a blob (written by something
 * else than tocsin): never due, and read as 0 ms it made a leader wake at once,
 * again and again. Text and blobs sort after every number: one index seek. */
static const char SQL_SCHED_DAMAGED[] =
    "SELECT name, typeof(next_fire) FROM _tocsin_schedules WHERE paused = 0 AND next_fire >= '' LIMIT 1";
static const char SQL_SCHED_META[] =
    "SELECT json_set(coalesce(?1, '{}'), '$.tocsin_schedule', ?2, '$.tocsin_fire_at', ?3)";

#define SCHED_SKIP_COUNT_LIMIT 100000 /* boundaries counted when skipping past a cap */
#define SCHED_TICK_BATCH 1000         /* schedules handled per statement round */
#define SCHED_ERR 256

/* ---- rows ----------------------------------------------------------------- */

/* TOCSIN_CORRUPT naming a running schedule whose next_fire is not a time. */
static int sched_damaged(tocsin_db *db, const char *what) {
    sqlite3_stmt *st = tc_stmt(db, SQL_SCHED_DAMAGED);
    int rc;
    if (!st) return TC_ERRCODE;
    rc = tc_step(db, st);
    if (rc == SQLITE_ROW) {
        rc = tc_err(db, TOCSIN_CORRUPT,
                    "%s: schedule \"%.200s\" has a next_fire that is %s, not a time in ms (its row was "
                    "written by something other than tocsin): set the schedule again or remove it",
                    what, (const char *)sqlite3_column_text(st, 0), (const char *)sqlite3_column_text(st, 1));
    } else {
        rc = rc == SQLITE_DONE ? TOCSIN_OK : tc_sqlerr(db, rc, what);
    }
    sqlite3_reset(st);
    return rc;
}

static void sched_clear(tocsin_schedule *s) {
    sqlite3_free(s->name);
    sqlite3_free(s->cron);
    sqlite3_free(s->queue);
    sqlite3_free(s->payload);
    sqlite3_free(s->meta);
}

void tocsin_schedules_free(tocsin_schedule *schedules, size_t n) {
    size_t i;
    if (!schedules) return;
    for (i = 0; i < n; i++) sched_clear(&schedules[i]);
    sqlite3_free(schedules);
}

void tc_schedule_opts_of(const tocsin_schedule *row, tocsin_schedule_opts *o) {
    o->priority = row->priority;
    o->max_attempts = row->max_attempts;
    o->job_expires_ms = row->job_expires_ms;
    o->catch_up = row->catch_up;
    o->max_catch_up = row->max_catch_up;
    o->local_time = row->local_time;
    o->meta = row->meta;
}

/* Fills *s from a row in SCHED_COLS order; 0 on out-of-memory. */
static int sched_read(sqlite3_stmt *st, tocsin_schedule *s) {
    memset(s, 0, sizeof *s);
    s->name = tc_col_text(st, 0);
    s->cron = tc_col_text(st, 1);
    s->queue = tc_col_text(st, 2);
    s->payload = tc_col_text(st, 3);
    s->meta = tc_col_text(st, 4);
    s->priority = sqlite3_column_int64(st, 5);
    s->max_attempts = sqlite3_column_int(st, 6);
    s->job_expires_ms = sqlite3_column_int64(st, 7);
    s->catch_up = sqlite3_column_type(st, 8) == SQLITE_TEXT &&
                          strcmp((const char *)sqlite3_column_text(st, 8), "all") == 0
                      ? TOCSIN_CATCHUP_ALL
                      : TOCSIN_CATCHUP_ONCE;
    s->max_catch_up = sqlite3_column_int(st, 9);
    s->local_time = sqlite3_column_int(st, 10);
    s->paused = sqlite3_column_int(st, 11);
    s->next_fire = sqlite3_column_type(st, 12) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 12);
    s->last_fire = sqlite3_column_int64(st, 13);
    s->last_job_id = sqlite3_column_int64(st, 14);
    s->fired_count = sqlite3_column_int64(st, 15);
    s->skipped_count = sqlite3_column_int64(st, 16);
    s->created_at = sqlite3_column_int64(st, 17);
    s->updated_at = sqlite3_column_int64(st, 18);
    return s->name && s->cron && s->queue && s->payload &&
           (s->meta || sqlite3_column_type(st, 4) == SQLITE_NULL);
}

/* Steps `st` to the end collecting schedules. Resets `st`. */
static int sched_collect(tocsin_db *db, sqlite3_stmt *st, tocsin_schedule **out, size_t *out_n,
                         const char *what) {
    tocsin_schedule *v = NULL;
    size_t n = 0, cap = 0;
    int rc;
    *out = NULL;
    *out_n = 0;
    while ((rc = tc_step(db, st)) == SQLITE_ROW) {
        if (n == cap) {
            tocsin_schedule *nv;
            cap = cap ? cap * 2 : 8;
            if (!(nv = sqlite3_realloc64(v, cap * sizeof *v))) {
                sqlite3_reset(st);
                tocsin_schedules_free(v, n);
                return tc_err(db, TOCSIN_NOMEM, "%s: out of memory", what);
            }
            v = nv;
        }
        if (!sched_read(st, &v[n++])) {
            sqlite3_reset(st);
            tocsin_schedules_free(v, n);
            return tc_err(db, TOCSIN_NOMEM, "%s: out of memory", what);
        }
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        tocsin_schedules_free(v, n);
        return tc_sqlerr(db, rc, what);
    }
    *out = v;
    *out_n = n;
    return TOCSIN_OK;
}

/* The schedule `name` or *out NULL. */
static int sched_get(tocsin_db *db, const char *name, tocsin_schedule **out) {
    sqlite3_stmt *st = tc_stmt(db, SQL_SCHED_GET);
    size_t n;
    int rc;
    *out = NULL;
    if (!st) return TC_ERRCODE;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    rc = sched_collect(db, st, out, &n, "read schedule");
    return rc;
}

/* ---- validation ----------------------------------------------------------- */

/* The option fields `o` sets: every field for a set, the flagged ones for an
 * update (an opts of version 1 has no flags: every field). */
static unsigned sched_fields(const tocsin_schedule_opts *o, int update) {
    if (!o) return 0;
    if (!update || o->version < 2) return TOCSIN_SCHEDULE_ALL;
    return o->fields;
}

/* Checks the fields of `o` that will be used. */
static int sched_check_opts(tocsin_db *db, const tocsin_schedule_opts *o, unsigned fields) {
    int rc;
    if (!o) return TOCSIN_OK;
    if ((rc = TC_CHECK_VERSION(db, "schedule options", o->version, TOCSIN_SCHEDULE_OPTS)) != TOCSIN_OK)
        return rc;
    if (fields & ~TOCSIN_SCHEDULE_ALL)
        return tc_err(db, TOCSIN_INVALID, "schedule options: unknown field flags 0x%x",
                      fields & ~TOCSIN_SCHEDULE_ALL);
    if ((fields & TOCSIN_SCHEDULE_MAX_ATTEMPTS) &&
        (o->max_attempts < 0 || o->max_attempts > TOCSIN_MAX_ATTEMPTS))
        return tc_err(db, TOCSIN_INVALID, "max_attempts must be between 1 and %d (0: default)",
                      TOCSIN_MAX_ATTEMPTS);
    if ((fields & TOCSIN_SCHEDULE_JOB_EXPIRES) &&
        (rc = tc_check_ms(db, "job_expires_ms", o->job_expires_ms, 0)) != TOCSIN_OK)
        return rc;
    if ((fields & TOCSIN_SCHEDULE_CATCH_UP) && o->catch_up != TOCSIN_CATCHUP_ONCE &&
        o->catch_up != TOCSIN_CATCHUP_ALL)
        return tc_err(db, TOCSIN_INVALID,
                      "catch_up must be TOCSIN_CATCHUP_ONCE (0) or TOCSIN_CATCHUP_ALL (1)");
    if ((fields & TOCSIN_SCHEDULE_MAX_CATCH_UP) &&
        (o->max_catch_up < 0 || o->max_catch_up > TOCSIN_MAX_CATCH_UP))
        return tc_err(db, TOCSIN_INVALID, "max_catch_up must be between 1 and %d (0: default)",
                      TOCSIN_MAX_CATCH_UP);
    if ((fields & TOCSIN_SCHEDULE_LOCAL_TIME) && o->local_time != 0 && o->local_time != 1)
        return tc_err(db, TOCSIN_INVALID, "local_time must be 0 (UTC) or 1 (local time)");
    if (fields & TOCSIN_SCHEDULE_META) return tc_check_meta(db, o->meta);
    return TOCSIN_OK;
}

/* Copies the flagged fields of `o` into *eff. */
static void sched_apply(tocsin_schedule_opts *eff, const tocsin_schedule_opts *o, unsigned fields) {
    if (fields & TOCSIN_SCHEDULE_PRIORITY) eff->priority = o->priority;
    if (fields & TOCSIN_SCHEDULE_MAX_ATTEMPTS) eff->max_attempts = o->max_attempts;
    if (fields & TOCSIN_SCHEDULE_JOB_EXPIRES) eff->job_expires_ms = o->job_expires_ms;
    if (fields & TOCSIN_SCHEDULE_CATCH_UP) eff->catch_up = o->catch_up;
    if (fields & TOCSIN_SCHEDULE_MAX_CATCH_UP) eff->max_catch_up = o->max_catch_up;
    if (fields & TOCSIN_SCHEDULE_LOCAL_TIME) eff->local_time = o->local_time;
    if (fields & TOCSIN_SCHEDULE_META) eff->meta = o->meta;
}

/* A cron expression as stored: valid UTF-8 (the parser bounds its length and
 * characters) that parses. */
static int sched_check_cron(tocsin_db *db, const char *expr) {
    tocsin_cron *c = NULL;
    char err[SCHED_ERR];
    int rc;
    if (!expr) return tc_err(db, TOCSIN_INVALID, "cron must be a string, not NULL");
    if ((rc = tc_check_text(db, "cron", expr, (size_t)-1)) != TOCSIN_OK) return rc;
    rc = tocsin_cron_parse(&c, expr, err, sizeof err);
    tocsin_cron_free(c);
    if (rc != TOCSIN_OK) return tc_err(db, rc, "cron: %s", err);
    return TOCSIN_OK;
}

/* The first boundary of `expr` strictly after `after` (-1: none). */
static int sched_next(tocsin_db *db, const char *name, const tocsin_cron *c, int64_t after,
                      int local, int64_t *out) {
    int rc = tocsin_cron_next(out, c, after < 0 ? 0 : after, local);
    if (rc == TOCSIN_NOTFOUND) {
        *out = -1;
        return TOCSIN_OK;
    }
    if (rc != TOCSIN_OK)
        return tc_err(db, rc, "schedule %s: cannot compute the next boundary after %lld", name,
                      (long long)after);
    return TOCSIN_OK;
}

static int sched_next_expr(tocsin_db *db, const char *name, const char *expr, int64_t after,
                           int local, int64_t *out) {
    tocsin_cron *c = NULL;
    char err[SCHED_ERR];
    int rc = tocsin_cron_parse(&c, expr, err, sizeof err);
    if (rc != TOCSIN_OK)
        return tc_err(db, rc == TOCSIN_NOMEM ? rc : TOCSIN_CORRUPT,
                      "schedule %s: stored cron expression: %s", name, err);
    rc = sched_next(db, name, c, after, local, out);
    tocsin_cron_free(c);
    return rc;
}

static void sched_bind_next(sqlite3_stmt *st, int i, int64_t next) {
    if (next < 0)
        sqlite3_bind_null(st, i);
    else
        sqlite3_bind_int64(st, i, next);
}

/* ---- register / update ---------------------------------------------------- */

/* The meta of the job schedule `name` fires for boundary `fire_at`: its
 * meta plus "tocsin_schedule" and "tocsin_fire_at" (*out: sqlite3_free). */
static int sched_job_meta(tocsin_db *db, const char *name, const char *meta, int64_t fire_at,
                          char **out) {
    sqlite3_stmt *st = tc_stmt(db, SQL_SCHED_META);
    int rc;
    *out = NULL;
    if (!st) return TC_ERRCODE;
    if (meta)
        sqlite3_bind_text(st, 1, meta, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 1);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, fire_at);
    rc = tc_step(db, st);
    if (rc != SQLITE_ROW) {
        rc = tc_sqlerr(db, rc, "scheduler: build job meta");
        sqlite3_reset(st);
        return rc;
    }
    *out = tc_col_text(st, 0);
    sqlite3_reset(st);
    if (!*out) return tc_err(db, TOCSIN_NOMEM, "scheduler: out of memory");
    return TOCSIN_OK;
}

/* A schedule whose jobs the payload limit refuses would never fire: its meta
 * must fit with the two keys every job of it gets (the longest boundary). */
static int sched_check_job_meta(tocsin_db *db, const char *name, const char *meta) {
    char *job_meta;
    size_t n;
    int rc = sched_job_meta(db, name, meta, TOCSIN_MAX_TIME_MS, &job_meta);
    if (rc != TOCSIN_OK) return rc;
    n = strlen(job_meta);
    sqlite3_free(job_meta);
    if ((int64_t)n > db->max_payload)
        return tc_err(db, TOCSIN_TOOBIG,
                      "meta is %zu bytes with the keys each job of the schedule gets "
                      "(\"tocsin_schedule\", \"tocsin_fire_at\"); the limit is %lld bytes",
                      n, (long long)db->max_payload);
    return TOCSIN_OK;
}

/*
 * Writes schedule `name`. Registering (update 0) sets every option from
 * `opts`; an update keeps the stored value of every string given as NULL and
 * of every option field `opts` does not flag, and makes a missing schedule
 * TOCSIN_NOTFOUND.
 */
static int sched_write(tocsin_db *db, int64_t *out_next, const char *name, const char *cron,
                       const char *queue, const char *payload, const tocsin_schedule_opts *opts,
                       int update) {
    tocsin_schedule_opts eff = TOCSIN_SCHEDULE_OPTS_INIT;
    tocsin_schedule *row = NULL;
    sqlite3_stmt *st;
    tc_op op;
    int64_t now, next;
    unsigned fields = sched_fields(opts, update);
    int rc;
    if (out_next) *out_next = -1;
    if ((rc = tc_check_name(db, "schedule name", name)) != TOCSIN_OK) return rc;
    if ((cron || !update) && (rc = sched_check_cron(db, cron)) != TOCSIN_OK) return rc;
    if ((queue || !update) && (rc = tc_check_name(db, "queue name", queue)) != TOCSIN_OK)
        return rc;
    if ((payload || !update) && (rc = tc_check_payload(db, "payload", payload)) != TOCSIN_OK)
        return rc;
    if ((rc = sched_check_opts(db, opts, fields)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    now = tocsin_now(db);
    if ((rc = sched_get(db, name, &row)) != TOCSIN_OK) goto done;
    if (update && !row) {
        rc = tc_err(db, TOCSIN_NOTFOUND, "no schedule named \"%s\"", name);
        goto done;
    }
    /* the stored options (a set without opts keeps them too), then the given ones */
    if (row && (update || !opts)) tc_schedule_opts_of(row, &eff);
    if (opts) sched_apply(&eff, opts, fields);
    if ((!update || (fields & TOCSIN_SCHEDULE_META)) &&
        (rc = sched_check_job_meta(db, name, eff.meta)) != TOCSIN_OK)
        goto done;
    if (row) {
        if (!cron) cron = row->cron;
        if (!queue) queue = row->queue;
        if (!payload) payload = row->payload;
    }
    /* Same expression and zone: keep the boundary not yet fired, so that
     * registering again at every start neither skips nor repeats one. */
    if (row && strcmp(row->cron, cron) == 0 && row->local_time == eff.local_time)
        next = row->next_fire;
    else if ((rc = sched_next_expr(db, name, cron, now, eff.local_time, &next)) != TOCSIN_OK)
        goto done;
    if (!(st = tc_stmt(db, SQL_SCHED_UPSERT))) {
        rc = TC_ERRCODE;
        goto done;
    }
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, cron, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, queue, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, payload, -1, SQLITE_STATIC);
    if (eff.meta)
        sqlite3_bind_text(st, 5, eff.meta, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 5);
    sqlite3_bind_int64(st, 6, eff.priority);
    sqlite3_bind_int(st, 7, eff.max_attempts ? eff.max_attempts : TOCSIN_DEFAULT_MAX_ATTEMPTS);
    sqlite3_bind_int64(st, 8, eff.job_expires_ms);
    sqlite3_bind_text(st, 9, eff.catch_up == TOCSIN_CATCHUP_ALL ? "all" : "once", -1,
                      SQLITE_STATIC);
    sqlite3_bind_int(st, 10, eff.max_catch_up ? eff.max_catch_up : TOCSIN_DEFAULT_MAX_CATCH_UP);
    sqlite3_bind_int(st, 11, eff.local_time);
    sched_bind_next(st, 12, next);
    sqlite3_bind_int64(st, 13, now);
    rc = tc_one_row(db, tc_step_done(db, st, "register schedule"), "register schedule", "_tocsin_schedules");
    if (rc == TOCSIN_OK && out_next) *out_next = next;
done:
    tocsin_schedules_free(row, row ? 1 : 0);
    return tc_op_end(db, &op, rc);
}

int tocsin_schedule_set(tocsin_db *db, int64_t *out_next_fire, const char *name, const char *cron,
                        const char *queue, const char *payload, const tocsin_schedule_opts *opts) {
    TC_CHECK_DB(db);
    return sched_write(db, out_next_fire, name, cron, queue, payload, opts, 0);
}

int tocsin_schedule_update(tocsin_db *db, int64_t *out_next_fire, const char *name,
                           const char *cron, const char *queue, const char *payload,
                           const tocsin_schedule_opts *opts) {
    TC_CHECK_DB(db);
    return sched_write(db, out_next_fire, name, cron, queue, payload, opts, 1);
}

/* ---- pause / resume / remove / get / list --------------------------------- */

int tocsin_schedule_pause(tocsin_db *db, const char *name) {
    tc_op op;
    sqlite3_stmt *st;
    int rc;
    TC_CHECK_DB(db);
    if ((rc = tc_check_name(db, "schedule name", name)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, SQL_SCHED_PAUSE))) return tc_op_end(db, &op, TC_ERRCODE);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, tocsin_now(db));
    rc = tc_step_done(db, st, "pause schedule");
    if (rc == TOCSIN_OK && sqlite3_changes(db->conn) == 0) {
        tocsin_schedule *row = NULL;
        if ((rc = sched_get(db, name, &row)) == TOCSIN_OK)
            rc = row ? tc_trigger_dropped(db, "pause schedule", "_tocsin_schedules")
                     : tc_err(db, TOCSIN_NOTFOUND, "no schedule named \"%s\"", name);
        tocsin_schedules_free(row, row ? 1 : 0);
    }
    return tc_op_end(db, &op, rc);
}

int tocsin_schedule_resume(tocsin_db *db, const char *name) {
    tocsin_schedule *row = NULL;
    tc_op op;
    sqlite3_stmt *st;
    int64_t now, next;
    int rc;
    TC_CHECK_DB(db);
    if ((rc = tc_check_name(db, "schedule name", name)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    now = tocsin_now(db);
    if ((rc = sched_get(db, name, &row)) != TOCSIN_OK) goto done;
    if (!row) {
        rc = tc_err(db, TOCSIN_NOTFOUND, "no schedule named \"%s\"", name);
        goto done;
    }
    if (!row->paused) goto done; /* running: keep its pending boundary */
    if ((rc = sched_next_expr(db, name, row->cron, now, row->local_time, &next)) != TOCSIN_OK)
        goto done;
    if (!(st = tc_stmt(db, SQL_SCHED_RESUME))) {
        rc = TC_ERRCODE;
        goto done;
    }
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sched_bind_next(st, 2, next);
    sqlite3_bind_int64(st, 3, now);
    /* read as paused in this write: it matches */
    rc = tc_one_row(db, tc_step_done(db, st, "resume schedule"), "resume schedule", "_tocsin_schedules");
done:
    tocsin_schedules_free(row, row ? 1 : 0);
    return tc_op_end(db, &op, rc);
}

int tocsin_schedule_remove(tocsin_db *db, int *out_ok, const char *name) {
    tc_op op;
    sqlite3_stmt *st;
    int rc;
    TC_CHECK_DB(db);
    if (!out_ok) return tc_err(db, TOCSIN_INVALID, "out_ok must not be NULL");
    *out_ok = 0;
    if ((rc = tc_check_name(db, "schedule name", name)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, SQL_SCHED_DELETE))) return tc_op_end(db, &op, TC_ERRCODE);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    rc = tc_step_done(db, st, "remove schedule");
    if (rc == TOCSIN_OK) *out_ok = sqlite3_changes(db->conn) > 0;
    if (rc == TOCSIN_OK && !*out_ok) { /* none, or a trigger dropped the delete */
        tocsin_schedule *row = NULL;
        if ((rc = sched_get(db, name, &row)) == TOCSIN_OK && row)
            rc = tc_trigger_dropped(db, "remove schedule", "_tocsin_schedules");
        tocsin_schedules_free(row, row ? 1 : 0);
    }
    return tc_op_end(db, &op, rc);
}

int tocsin_schedule_get(tocsin_db *db, tocsin_schedule **out, const char *name) {
    tc_op op;
    int rc;
    TC_CHECK_DB(db);
    if (!out) return tc_err(db, TOCSIN_INVALID, "out must not be NULL");
    *out = NULL;
    if ((rc = tc_check_name(db, "schedule name", name)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 0)) != TOCSIN_OK) return rc;
    rc = sched_get(db, name, out);
    return tc_op_end(db, &op, rc);
}

/* By name in byte order of their UTF-8, whatever the database's encoding (see
 * cmp_names in queue.c). */
static int cmp_schedules(const void *a, const void *b) {
    return strcmp(((const tocsin_schedule *)a)->name, ((const tocsin_schedule *)b)->name);
}

int tocsin_schedule_list(tocsin_db *db, tocsin_schedule **out, size_t *out_n) {
    tc_op op;
    sqlite3_stmt *st;
    int rc;
    TC_CHECK_DB(db);
    if (!out || !out_n) return tc_err(db, TOCSIN_INVALID, "out and out_n must not be NULL");
    *out = NULL;
    *out_n = 0;
    if ((rc = tc_op_begin(db, &op, 0)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, SQL_SCHED_LIST))) return tc_op_end(db, &op, TC_ERRCODE);
    rc = sched_collect(db, st, out, out_n, "list schedules");
    if (rc == TOCSIN_OK && *out_n > 1) qsort(*out, *out_n, sizeof **out, cmp_schedules);
    return tc_op_end(db, &op, rc);
}

/* ---- tick ----------------------------------------------------------------- */

/* Enqueues the job of schedule `s` for boundary `fire_at`. */
static int sched_enqueue(tocsin_db *db, const tocsin_schedule *s, int64_t fire_at,
                         int64_t *out_id) {
    tocsin_enqueue_opts eo = TOCSIN_ENQUEUE_OPTS_INIT;
    char *meta;
    int rc;
    if ((rc = sched_job_meta(db, s->name, s->meta, fire_at, &meta)) != TOCSIN_OK) return rc;
    eo.priority = s->priority;
    eo.max_attempts = s->max_attempts;
    eo.expires_ms = s->job_expires_ms;
    eo.run_at_ms = fire_at; /* a catch-up job keeps its boundary's place in line */
    eo.meta = meta;
    rc = tocsin_queue_enqueue(db, out_id, s->queue, s->payload, &eo);
    sqlite3_free(meta);
    if (rc != TOCSIN_OK) {
        char msg[sizeof tc_tls()->msg];
        memcpy(msg, tc_tls()->msg, sizeof msg);
        tc_err(db, rc, "schedule %s: enqueue: %s", s->name, msg);
    }
    return rc;
}

/* Fires the due boundaries of one schedule; adds the jobs to *fired and 1 to
 * *advanced when its row moved on. */
static int sched_fire(tocsin_db *db, const tocsin_schedule *s, int64_t now, int64_t *fired,
                      int64_t *advanced) {
    tocsin_cron *c = NULL;
    char err[SCHED_ERR];
    int64_t *bounds = NULL, b = s->next_fire, next, skipped = 0, job_id = 0;
    size_t nb = 0, cap, i;
    sqlite3_stmt *st;
    int rc = tocsin_cron_parse(&c, s->cron, err, sizeof err);
    if (rc != TOCSIN_OK)
        return tc_err(db, rc == TOCSIN_NOMEM ? rc : TOCSIN_CORRUPT,
                      "schedule %s: stored cron expression: %s", s->name, err);
    cap = s->catch_up == TOCSIN_CATCHUP_ALL && s->max_catch_up > 0 ? (size_t)s->max_catch_up : 1;
    if (!(bounds = sqlite3_malloc64(cap * sizeof *bounds))) {
        tocsin_cron_free(c);
        return tc_err(db, TOCSIN_NOMEM, "scheduler: out of memory");
    }
    if (s->catch_up == TOCSIN_CATCHUP_ONCE) {
        /* one job stands for every boundary in [next_fire, now] */
        bounds[nb++] = b;
        rc = sched_next(db, s->name, c, now, s->local_time, &next);
    } else {
        next = b;
        while (rc == TOCSIN_OK && next >= 0 && next <= now && nb < cap) {
            bounds[nb++] = next;
            rc = sched_next(db, s->name, c, next, s->local_time, &next);
        }
        /* Past the cap: the rest up to now are skipped, and counted. */
        while (rc == TOCSIN_OK && next >= 0 && next <= now) {
            if (skipped == SCHED_SKIP_COUNT_LIMIT) {
                rc = sched_next(db, s->name, c, now, s->local_time, &next);
                break;
            }
            skipped++;
            rc = sched_next(db, s->name, c, next, s->local_time, &next);
        }
    }
    tocsin_cron_free(c);
    if (rc != TOCSIN_OK) goto done;
    /* compare-and-set first: only the ticker whose update takes enqueues */
    if (!(st = tc_stmt(db, SQL_SCHED_ADVANCE))) {
        rc = TC_ERRCODE;
        goto done;
    }
    sqlite3_bind_text(st, 1, s->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, s->next_fire);
    sched_bind_next(st, 3, next);
    sqlite3_bind_int64(st, 4, bounds[nb - 1]);
    sqlite3_bind_int64(st, 5, (int64_t)nb);
    sqlite3_bind_int64(st, 6, skipped);
    sqlite3_bind_int64(st, 7, now);
    if ((rc = tc_step_done(db, st, "scheduler: advance schedule")) != TOCSIN_OK) goto done;
    if (sqlite3_changes(db->conn) == 0) goto done; /* another ticker fired it */
    (*advanced)++;
    for (i = 0; i < nb && rc == TOCSIN_OK; i++) rc = sched_enqueue(db, s, bounds[i], &job_id);
    if (rc != TOCSIN_OK) goto done;
    *fired += (int64_t)nb;
    if (!(st = tc_stmt(db, SQL_SCHED_LAST_JOB))) {
        rc = TC_ERRCODE;
        goto done;
    }
    sqlite3_bind_text(st, 1, s->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, job_id);
    rc = tc_step_done(db, st, "scheduler: record job");
done:
    sqlite3_free(bounds);
    return rc;
}

int tocsin_scheduler_tick(tocsin_db *db, int64_t *out_fired) {
    tocsin_schedule *due = NULL;
    size_t n = 0, i;
    sqlite3_stmt *st;
    tc_op op;
    int64_t now, fired = 0, advanced;
    int rc, failed = 0;
    char why[sizeof tc_tls()->msg];
    TC_CHECK_DB(db);
    if (out_fired) *out_fired = 0;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    now = tocsin_now(db);
    do {
        /* collect a batch first: the loop below writes the rows it read */
        if (!(st = tc_stmt(db, SQL_SCHED_DUE))) {
            rc = TC_ERRCODE;
            break;
        }
        sqlite3_bind_int64(st, 1, now);
        sqlite3_bind_int(st, 2, SCHED_TICK_BATCH);
        if ((rc = sched_collect(db, st, &due, &n, "scheduler: due schedules")) != TOCSIN_OK) break;
        advanced = 0;
        for (i = 0; i < n && rc == TOCSIN_OK; i++) {
            /* each schedule in a savepoint of its own: one that cannot fire
             * (its stored row is damaged, its job is refused) changes nothing
             * and does not hold back the others */
            tc_op one;
            int64_t f = fired, a = advanced;
            if ((rc = tc_op_open(db, &one, 1)) != TOCSIN_OK) break;
            rc = tc_op_end(db, &one, sched_fire(db, &due[i], now, &fired, &advanced));
            if (rc == TOCSIN_CORRUPT || rc == TOCSIN_INVALID || rc == TOCSIN_TOOBIG) {
                fired = f, advanced = a;
                if (!failed) {
                    failed = rc;
                    memcpy(why, tc_tls()->msg, sizeof why);
                }
                rc = TOCSIN_OK;
            }
        }
        tocsin_schedules_free(due, n);
        due = NULL;
        /* a full batch: more may be due (each round moves every row it read) */
    } while (rc == TOCSIN_OK && n == SCHED_TICK_BATCH && advanced > 0);
    if (rc == TOCSIN_OK && !failed && (rc = sched_damaged(db, "scheduler tick")) == TOCSIN_CORRUPT) {
        failed = rc; /* never due: reported like a row that cannot fire */
        memcpy(why, tc_tls()->msg, sizeof why);
        rc = TOCSIN_OK;
    }
    rc = tc_op_end(db, &op, rc);
    if (rc == TOCSIN_OK && out_fired) *out_fired = fired;
    /* the others fired and are committed; the first that could not is reported */
    if (rc == TOCSIN_OK && failed) rc = tc_err(db, failed, "%s (the other due schedules fired)", why);
    return rc;
}

int tocsin_scheduler_next_fire(tocsin_db *db, int64_t *out_ms) {
    tc_op op;
    sqlite3_stmt *st;
    int rc;
    TC_CHECK_DB(db);
    if (!out_ms) return tc_err(db, TOCSIN_INVALID, "out_ms must not be NULL");
    *out_ms = -1;
    if ((rc = tc_op_begin(db, &op, 0)) != TOCSIN_OK) return rc;
    if ((rc = sched_damaged(db, "scheduler: next fire")) != TOCSIN_OK) return tc_op_end(db, &op, rc);
    if (!(st = tc_stmt(db, SQL_SCHED_NEXT))) return tc_op_end(db, &op, TC_ERRCODE);
    rc = tc_step(db, st);
    if (rc == SQLITE_ROW) {
        if (sqlite3_column_type(st, 0) != SQLITE_NULL) *out_ms = sqlite3_column_int64(st, 0);
        rc = TOCSIN_OK;
    } else {
        rc = tc_sqlerr(db, rc, "scheduler: next fire");
    }
    sqlite3_reset(st);
    return tc_op_end(db, &op, rc);
}

/* ---- leadership ----------------------------------------------------------- */

int tocsin_scheduler_lead(tocsin_db *db, int *out_is_leader, int64_t *out_token,
                          const char *owner, int64_t ttl_ms) {
    int64_t token = 0;
    int rc;
    TC_CHECK_DB(db);
    if (!out_is_leader) return tc_err(db, TOCSIN_INVALID, "out_is_leader must not be NULL");
    *out_is_leader = 0;
    if (out_token) *out_token = 0;
    if ((rc = tc_check_ms(db, "ttl_ms", ttl_ms, 1)) != TOCSIN_OK) return rc;
    rc = tc_lock_acquire(db, &token, TC_SCHEDULER_LOCK, owner, ttl_ms);
    if (rc != TOCSIN_OK) return rc;
    *out_is_leader = token > 0;
    if (out_token) *out_token = token;
    return TOCSIN_OK;
}

int tocsin_scheduler_resign(tocsin_db *db, int *out_ok, const char *owner) {
    char *holder = NULL;
    int64_t token, until;
    tc_op op;
    int ok = 0, rc;
    TC_CHECK_DB(db);
    if (out_ok) *out_ok = 0;
    if ((rc = tc_check_name(db, "owner", owner)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    rc = tocsin_lock_holder(db, &holder, &token, &until, TC_SCHEDULER_LOCK);
    if (rc == TOCSIN_OK && holder && strcmp(holder, owner) == 0)
        rc = tc_lock_release(db, &ok, TC_SCHEDULER_LOCK, owner, token);
    tocsin_free(holder);
    rc = tc_op_end(db, &op, rc);
    if (rc == TOCSIN_OK && out_ok) *out_ok = ok;
    return rc;
}

/* ---- JSON ----------------------------------------------------------------- */

static void sched_json_one(tc_buf *b, const tocsin_schedule *s) {
    int first = 1;
    tc_buf_puts(b, "{");
    tc_buf_key(b, "name", &first);
    tc_buf_jstr(b, s->name);
    tc_buf_key(b, "cron", &first);
    tc_buf_jstr(b, s->cron);
    tc_buf_key(b, "queue", &first);
    tc_buf_jstr(b, s->queue);
    tc_buf_key(b, "payload", &first);
    tc_buf_jraw(b, s->payload);
    tc_buf_key(b, "meta", &first);
    tc_buf_jraw(b, s->meta);
    tc_buf_key(b, "priority", &first);
    tc_buf_i64(b, s->priority);
    tc_buf_key(b, "max_attempts", &first);
    tc_buf_i64(b, s->max_attempts);
    tc_buf_key(b, "job_expires_ms", &first);
    tc_buf_i64(b, s->job_expires_ms);
    tc_buf_key(b, "catch_up", &first);
    tc_buf_jstr(b, s->catch_up == TOCSIN_CATCHUP_ALL ? "all" : "once");
    tc_buf_key(b, "max_catch_up", &first);
    tc_buf_i64(b, s->max_catch_up);
    tc_buf_key(b, "local_time", &first);
    tc_buf_puts(b, s->local_time ? "true" : "false");
    tc_buf_key(b, "paused", &first);
    tc_buf_puts(b, s->paused ? "true" : "false");
    tc_buf_key(b, "next_fire", &first);
    if (s->next_fire >= 0) tc_buf_i64(b, s->next_fire); else tc_buf_puts(b, "null");
    tc_buf_key(b, "last_fire", &first);
    if (s->last_fire) tc_buf_i64(b, s->last_fire); else tc_buf_puts(b, "null");
    tc_buf_key(b, "last_job_id", &first);
    if (s->last_job_id) tc_buf_i64(b, s->last_job_id); else tc_buf_puts(b, "null");
    tc_buf_key(b, "fired_count", &first);
    tc_buf_i64(b, s->fired_count);
    tc_buf_key(b, "skipped_count", &first);
    tc_buf_i64(b, s->skipped_count);
    tc_buf_key(b, "created_at", &first);
    tc_buf_i64(b, s->created_at);
    tc_buf_key(b, "updated_at", &first);
    tc_buf_i64(b, s->updated_at);
    tc_buf_puts(b, "}");
}

char *tc_schedule_json(const tocsin_schedule *s) {
    tc_buf b = {0};
    sched_json_one(&b, s);
    return tc_buf_take(&b);
}

char *tc_schedules_json(const tocsin_schedule *s, size_t n) {
    tc_buf b = {0};
    size_t i;
    tc_buf_puts(&b, "[");
    for (i = 0; i < n; i++) {
        if (i) tc_buf_puts(&b, ",");
        sched_json_one(&b, &s[i]);
    }
    tc_buf_puts(&b, "]");
    return tc_buf_take(&b);
}
