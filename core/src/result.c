/*
 * Results: a job's JSON value or its task error, with an optional expiry.
 * Every SQL statement of results lives here. A row holds either a value
 * (status 'ok', value = JSON text, a JSON null being the text "null") or an
 * error (status 'error', error = {"type":..,"message":..}). A missing row and
 * an expired row both read as "no result".
 */
#include "internal.h"

static const char SQL_RESULT_SAVE[] =
    "INSERT INTO _tocsin_results(job_id, status, value, error, created_at, expires_at)"
    " VALUES (?1, 'ok', ?2, NULL, ?3, ?4)"
    " ON CONFLICT(job_id) DO UPDATE SET status = 'ok', value = excluded.value, error = NULL,"
    " created_at = excluded.created_at, expires_at = excluded.expires_at";
static const char SQL_RESULT_SAVE_ERROR[] =
    "INSERT INTO _tocsin_results(job_id, status, value, error, created_at, expires_at)"
    " VALUES (?1, 'error', NULL, CASE WHEN ?6 IS NULL THEN json_object('type', ?2, 'message', ?3)"
    " ELSE json_object('type', ?2, 'message', ?3, 'trace', ?6) END, ?4, ?5)"
    " ON CONFLICT(job_id) DO UPDATE SET status = 'error', value = NULL, error = excluded.error,"
    " created_at = excluded.created_at, expires_at = excluded.expires_at";
static const char SQL_RESULT_GET[] =
    "SELECT status, value, json_extract(error, '$.type'), json_extract(error, '$.message'),"
    " created_at, expires_at, json_extract(error, '$.trace') FROM _tocsin_results"
    " WHERE job_id = ?1 AND (expires_at IS NULL OR expires_at > ?2)";
static const char SQL_RESULT_DELETE[] = "DELETE FROM _tocsin_results WHERE job_id = ?1";
static const char SQL_RESULT_EXISTS[] = "SELECT 1 FROM _tocsin_results WHERE job_id = ?1";
static const char SQL_RESULT_SWEEP[] =
    "DELETE FROM _tocsin_results WHERE expires_at IS NOT NULL AND expires_at <= ?1";

static int result_check(tocsin_db *db, int64_t job_id, int64_t ttl_ms) {
    if (job_id < 1) return tc_err(db, TOCSIN_INVALID, "job_id must be >= 1");
    return tc_check_ms(db, "ttl_ms (0: never expires)", ttl_ms, 0);
}

static void result_bind_expiry(sqlite3_stmt *st, int i, int64_t now, int64_t ttl_ms) {
    if (ttl_ms > 0)
        sqlite3_bind_int64(st, i, tc_time_add(now, ttl_ms));
    else
        sqlite3_bind_null(st, i);
}

int tocsin_result_save(tocsin_db *db, int64_t job_id, const char *value_json, int64_t ttl_ms) {
    tc_op op;
    sqlite3_stmt *st;
    int64_t now;
    int rc;
    TC_CHECK_DB(db);
    if ((rc = result_check(db, job_id, ttl_ms)) != TOCSIN_OK) return rc;
    if ((rc = tc_check_payload(db, "value", value_json)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    now = tocsin_now(db);
    if (!(st = tc_stmt(db, SQL_RESULT_SAVE))) return tc_op_end(db, &op, TC_ERRCODE);
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_text(st, 2, value_json, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, now);
    result_bind_expiry(st, 4, now, ttl_ms);
    rc = tc_one_row(db, tc_step_done(db, st, "save result"), "save result", "_tocsin_results");
    return tc_op_end(db, &op, rc);
}

int tocsin_result_save_error(tocsin_db *db, int64_t job_id, const char *type,
                             const char *message, int64_t ttl_ms) {
    TC_CHECK_DB(db);
    return tc_result_save_error(db, job_id, type, message, NULL, ttl_ms);
}

int tc_result_save_error(tocsin_db *db, int64_t job_id, const char *type, const char *message,
                         const char *trace, int64_t ttl_ms) {
    tc_op op;
    sqlite3_stmt *st;
    int64_t now;
    int rc;
    if ((rc = result_check(db, job_id, ttl_ms)) != TOCSIN_OK) return rc;
    if ((rc = tc_check_text(db, "error trace", trace, TOCSIN_MAX_TRACE_BYTES)) != TOCSIN_OK) return rc;
    if ((rc = tc_check_name(db, "error type", type)) != TOCSIN_OK) return rc;
    if ((rc = tc_check_text(db, "error message", message, (size_t)db->max_payload)) != TOCSIN_OK)
        return rc;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    now = tocsin_now(db);
    if (!(st = tc_stmt(db, SQL_RESULT_SAVE_ERROR))) return tc_op_end(db, &op, TC_ERRCODE);
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_text(st, 2, type, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, message ? message : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, now);
    result_bind_expiry(st, 5, now, ttl_ms);
    if (trace) sqlite3_bind_text(st, 6, trace, -1, SQLITE_STATIC);
    rc = tc_one_row(db, tc_step_done(db, st, "save error result"), "save error result",
                    "_tocsin_results");
    return tc_op_end(db, &op, rc);
}

void tocsin_result_free(tocsin_result *r) {
    if (!r) return;
    sqlite3_free(r->value);
    sqlite3_free(r->error_type);
    sqlite3_free(r->error_message);
    sqlite3_free(r->error_trace);
    sqlite3_free(r);
}

int tocsin_result_get(tocsin_db *db, tocsin_result **out_result, int64_t job_id) {
    tc_op op;
    sqlite3_stmt *st;
    tocsin_result *r;
    int rc;
    TC_CHECK_DB(db);
    if (!out_result) return tc_err(db, TOCSIN_INVALID, "out_result must not be NULL");
    *out_result = NULL;
    if (job_id < 1) return tc_err(db, TOCSIN_INVALID, "job_id must be >= 1");
    if ((rc = tc_op_begin(db, &op, 0)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, SQL_RESULT_GET))) return tc_op_end(db, &op, TC_ERRCODE);
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, tocsin_now(db));
    rc = tc_step(db, st);
    if (rc == SQLITE_DONE) {
        sqlite3_reset(st);
        return tc_op_end(db, &op, TOCSIN_OK);
    }
    if (rc != SQLITE_ROW) {
        rc = tc_sqlerr(db, rc, "get result");
        sqlite3_reset(st);
        return tc_op_end(db, &op, rc);
    }
    if (!(r = sqlite3_malloc(sizeof *r))) {
        sqlite3_reset(st);
        return tc_op_end(db, &op, tc_err(db, TOCSIN_NOMEM, "get result: out of memory"));
    }
    memset(r, 0, sizeof *r);
    r->job_id = job_id;
    r->is_error = strcmp((const char *)sqlite3_column_text(st, 0), "error") == 0;
    r->value = tc_col_text(st, 1);
    r->error_type = tc_col_text(st, 2);
    r->error_message = tc_col_text(st, 3);
    r->created_at = sqlite3_column_int64(st, 4);
    r->expires_at = sqlite3_column_int64(st, 5);
    r->error_trace = tc_col_text(st, 6);
    sqlite3_reset(st);
    if (r->is_error ? !r->error_type || !r->error_message : !r->value) {
        tocsin_result_free(r);
        return tc_op_end(db, &op, tc_err(db, TOCSIN_NOMEM, "get result: out of memory"));
    }
    *out_result = r;
    return tc_op_end(db, &op, TOCSIN_OK);
}

/* ---- finishing a task's job: the lease operation and its outcome, atomically ---- */

int tocsin_job_complete(tocsin_db *db, int *out_ok, int64_t id, int64_t token,
                        const char *value_json, int64_t ttl_ms) {
    tc_op op;
    int rc, ok = 0;
    TC_CHECK_DB(db);
    if (!out_ok) return tc_err(db, TOCSIN_INVALID, "out_ok must not be NULL");
    *out_ok = 0;
    if ((rc = result_check(db, id, ttl_ms)) != TOCSIN_OK) return rc;
    if ((rc = tc_check_payload(db, "value", value_json)) != TOCSIN_OK) return rc;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    rc = tocsin_job_ack(db, &ok, id, token);
    if (rc == TOCSIN_OK && ok) rc = tocsin_result_save(db, id, value_json, ttl_ms);
    rc = tc_op_end(db, &op, rc);
    if (rc == TOCSIN_OK) *out_ok = ok;
    return rc;
}

int tocsin_job_fail_task(tocsin_db *db, int *out_ok, int64_t id, int64_t token,
                         const char *type, const char *message, int64_t ttl_ms) {
    tc_op op;
    char *error;
    int rc, ok = 0;
    TC_CHECK_DB(db);
    if (!out_ok) return tc_err(db, TOCSIN_INVALID, "out_ok must not be NULL");
    *out_ok = 0;
    if ((rc = result_check(db, id, ttl_ms)) != TOCSIN_OK) return rc;
    if ((rc = tc_check_name(db, "error type", type)) != TOCSIN_OK) return rc;
    if ((rc = tc_check_text(db, "error message", message, (size_t)db->max_payload)) != TOCSIN_OK)
        return rc;
    /* the job's last_error reads "type: message", as a retry records it, cut to
     * the limit as the worker cuts it (the result keeps the whole message) */
    error = message && *message ? sqlite3_mprintf("%s: %s", type, message) : sqlite3_mprintf("%s", type);
    if (!error) return tc_err(db, TOCSIN_NOMEM, "fail task: out of memory");
    tc_cut_utf8(error, (size_t)db->max_payload);
    if ((rc = tc_op_begin(db, &op, 1)) == TOCSIN_OK) {
        rc = tocsin_job_fail(db, &ok, id, token, error);
        if (rc == TOCSIN_OK && ok) rc = tocsin_result_save_error(db, id, type, message, ttl_ms);
        rc = tc_op_end(db, &op, rc);
    }
    sqlite3_free(error);
    if (rc == TOCSIN_OK) *out_ok = ok;
    return rc;
}

/* The outcome of a job that died without a result: a "JobDead" error. */
static int dead_outcome(tocsin_db *db, tocsin_result **out, const tocsin_job *job) {
    tocsin_result *r = sqlite3_malloc(sizeof *r);
    if (!r) return tc_err(db, TOCSIN_NOMEM, "check result: out of memory");
    memset(r, 0, sizeof *r);
    r->job_id = job->id;
    r->is_error = 1;
    r->created_at = job->died_at;
    r->error_type = tc_strdup("JobDead");
    r->error_message = job->last_error
                           ? sqlite3_mprintf("the job died (%s): %s", job->reason, job->last_error)
                           : sqlite3_mprintf("the job died (%s)", job->reason);
    if (!r->error_type || !r->error_message) {
        tocsin_result_free(r);
        return tc_err(db, TOCSIN_NOMEM, "check result: out of memory");
    }
    *out = r;
    return TOCSIN_OK;
}

int tocsin_result_check(tocsin_db *db, tocsin_result **out_result, int64_t job_id) {
    tc_op op;
    tocsin_job *job = NULL;
    int rc;
    TC_CHECK_DB(db);
    if (!out_result) return tc_err(db, TOCSIN_INVALID, "out_result must not be NULL");
    *out_result = NULL;
    if (job_id < 1) return tc_err(db, TOCSIN_INVALID, "job_id must be >= 1");
    /* One snapshot for both reads: an ack with its result cannot slip between them. */
    if ((rc = tc_op_begin(db, &op, 0)) != TOCSIN_OK) return rc;
    rc = tocsin_result_get(db, out_result, job_id);
    if (rc == TOCSIN_OK && !*out_result) rc = tocsin_job_get(db, &job, job_id);
    if (rc == TOCSIN_OK && !*out_result) {
        if (!job)
            rc = tc_err(db, TOCSIN_NOTFOUND,
                        "job %lld has no result and no row: it was acked without a result, its "
                        "result expired, or it never existed",
                        (long long)job_id);
        else if (strcmp(job->state, "dead") == 0)
            rc = dead_outcome(db, out_result, job);
    }
    tocsin_jobs_free(job, 1);
    rc = tc_op_end(db, &op, rc);
    if (rc != TOCSIN_OK) {
        tocsin_result_free(*out_result);
        *out_result = NULL;
    }
    return rc;
}

/* TOCSIN_TIMEOUT with what the job is doing: never claimed, running, or retrying. */
static int why_waiting(tocsin_db *db, int64_t job_id) {
    tocsin_job *j = NULL;
    int64_t now = tocsin_now(db);
    if (tocsin_job_get(db, &j, job_id) != TOCSIN_OK || !j)
        return tc_err(db, TOCSIN_TIMEOUT, "job %lld has no outcome yet before the deadline",
                      (long long)job_id);
    if (strcmp(j->state, "processing") == 0)
        tc_err(db, TOCSIN_TIMEOUT,
               "job %lld is running (attempt %d of %d, worker %s) and has no outcome yet",
               (long long)job_id, j->attempts, j->max_attempts, j->worker ? j->worker : "?");
    else if (j->attempts == 0)
        tc_err(db, TOCSIN_TIMEOUT,
               "job %lld was never claimed: no worker took it from queue \"%s\"%s",
               (long long)job_id, j->queue,
               strcmp(j->state, "scheduled") == 0 ? " (it is scheduled for later)" : "");
    else
        tc_err(db, TOCSIN_TIMEOUT,
               "job %lld is retrying: attempt %d of %d ended (%s); the next run is due in %lld ms",
               (long long)job_id, j->attempts, j->max_attempts,
               j->last_error ? j->last_error : "no error recorded",
               (long long)(j->run_at > now ? j->run_at - now : 0));
    tocsin_jobs_free(j, 1);
    return TOCSIN_TIMEOUT;
}

typedef struct rs_wait {
    tocsin_db *db;
    tocsin_result **out;
    int64_t job_id, deadline;
} rs_wait;

static int rs_wait_check(void *p, int *done, int64_t *sleep_ms) {
    rs_wait *w = p;
    int rc = tocsin_result_check(w->db, w->out, w->job_id);
    if (rc != TOCSIN_OK) return rc;
    if (*w->out) {
        *done = 1;
        return TOCSIN_OK;
    }
    if (w->deadline < 0) return TOCSIN_OK; /* only a commit can bring the outcome */
    rc = tc_sleep_until_clock(w->db, w->deadline, -1, sleep_ms, "the job has no outcome yet");
    return rc == TOCSIN_TIMEOUT ? why_waiting(w->db, w->job_id) : rc;
}

int tocsin_result_wait(tocsin_db *db, tocsin_result **out_result, int64_t job_id,
                       int64_t deadline_ms, tocsin_sub *sub) {
    rs_wait w;
    int rc;
    TC_CHECK_DB(db);
    if (!out_result) return tc_err(db, TOCSIN_INVALID, "out_result must not be NULL");
    *out_result = NULL;
    if (job_id < 1) return tc_err(db, TOCSIN_INVALID, "job_id must be >= 1");
    w.db = db;
    w.out = out_result;
    w.job_id = job_id;
    w.deadline = deadline_ms < 0 ? -1 : deadline_ms;
    rc = tc_db_wait(db, sub, rs_wait_check, &w);
    if (rc != TOCSIN_OK) {
        tocsin_result_free(*out_result);
        *out_result = NULL;
    }
    return rc;
}

int tocsin_result_delete(tocsin_db *db, int *out_ok, int64_t job_id) {
    tc_op op;
    sqlite3_stmt *st;
    int rc;
    TC_CHECK_DB(db);
    if (!out_ok) return tc_err(db, TOCSIN_INVALID, "out_ok must not be NULL");
    *out_ok = 0;
    if (job_id < 1) return tc_err(db, TOCSIN_INVALID, "job_id must be >= 1");
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, SQL_RESULT_DELETE))) return tc_op_end(db, &op, TC_ERRCODE);
    sqlite3_bind_int64(st, 1, job_id);
    rc = tc_step_done(db, st, "delete result");
    if (rc == TOCSIN_OK) *out_ok = sqlite3_changes(db->conn) > 0;
    if (rc == TOCSIN_OK && !*out_ok) { /* none, or a trigger dropped the delete */
        if (!(st = tc_stmt(db, SQL_RESULT_EXISTS))) return tc_op_end(db, &op, TC_ERRCODE);
        sqlite3_bind_int64(st, 1, job_id);
        rc = tc_step(db, st);
        sqlite3_reset(st);
        rc = rc == SQLITE_ROW    ? tc_trigger_dropped(db, "delete result", "_tocsin_results")
             : rc == SQLITE_DONE ? TOCSIN_OK
                                 : tc_sqlerr(db, rc, "delete result");
    }
    return tc_op_end(db, &op, rc);
}

int tocsin_result_sweep(tocsin_db *db, int64_t *out_n) {
    return tc_sweep(db, out_n, SQL_RESULT_SWEEP, "sweep results");
}

/* {"job_id","status","value","error":{"type","message"},"created_at","expires_at"} */
char *tc_result_json(const tocsin_result *r) {
    tc_buf b = {0};
    int first = 1;
    tc_buf_puts(&b, "{");
    tc_buf_key(&b, "job_id", &first);
    tc_buf_i64(&b, r->job_id);
    tc_buf_key(&b, "status", &first);
    tc_buf_jstr(&b, r->is_error ? "error" : "ok");
    tc_buf_key(&b, "value", &first);
    tc_buf_jraw(&b, r->is_error ? NULL : r->value);
    tc_buf_key(&b, "error", &first);
    if (r->is_error) {
        int f2 = 1;
        tc_buf_puts(&b, "{");
        tc_buf_key(&b, "type", &f2);
        tc_buf_jstr(&b, r->error_type);
        tc_buf_key(&b, "message", &f2);
        tc_buf_jstr(&b, r->error_message);
        if (r->error_trace) {
            tc_buf_key(&b, "trace", &f2);
            tc_buf_jstr(&b, r->error_trace);
        }
        tc_buf_puts(&b, "}");
    } else {
        tc_buf_puts(&b, "null");
    }
    tc_buf_key(&b, "created_at", &first);
    tc_buf_i64(&b, r->created_at);
    tc_buf_key(&b, "expires_at", &first);
    if (r->expires_at)
        tc_buf_i64(&b, r->expires_at);
    else
        tc_buf_puts(&b, "null");
    tc_buf_puts(&b, "}");
    return tc_buf_take(&b);
}
