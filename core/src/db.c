/* Handles, errors, statement cache, atomic operations, validation. */
#include "internal.h"

#include <ctype.h>
#include <stdatomic.h>

#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- versions and codes -------------------------------------------------- */

const char *tocsin_version(void) { return TOCSIN_VERSION_STRING; }
int tocsin_version_number(void) { return TOCSIN_VERSION_NUMBER; }
const char *tocsin_sqlite_version(void) { return sqlite3_libversion(); }

const char *tocsin_errstr(int rc) {
    switch (rc) {
    case TOCSIN_OK: return "ok";
    case TOCSIN_ERROR: return "error";
    case TOCSIN_INVALID: return "invalid argument";
    case TOCSIN_NOTFOUND: return "not found";
    case TOCSIN_BUSY: return "database busy";
    case TOCSIN_LEASE_LOST: return "lease lost";
    case TOCSIN_CLOSED: return "closed";
    case TOCSIN_CORRUPT: return "corrupt";
    case TOCSIN_TOOBIG: return "payload too big";
    case TOCSIN_VERSION: return "version mismatch";
    case TOCSIN_CALLBACK: return "callback raised";
    case TOCSIN_NOMEM: return "out of memory";
    case TOCSIN_REPLACED: return "database file replaced";
    case TOCSIN_TIMEOUT: return "timed out";
    case TOCSIN_READONLY: return "read-only";
    case TOCSIN_INTERRUPTED: return "interrupted";
    case TOCSIN_IOERR: return "I/O error";
    case TOCSIN_FULL: return "disk or database full";
    case TOCSIN_CANTOPEN: return "cannot open";
    case TOCSIN_PERM: return "permission denied";
    default: return "unknown result code";
    }
}

void tocsin_free(void *p) { sqlite3_free(p); }

/* ---- errors ------------------------------------------------------------- */

static _Thread_local tc_thread_state tc_thread;

tc_thread_state *tc_tls(void) { return &tc_thread; }

void tocsin_thread_timeout(int ms) {
    if (ms < 0) {
        tc_thread.deadline_us = 0;
    } else {
        tc_thread.deadline_us = tc_monotonic_us() + (int64_t)ms * 1000;
        if (!tc_thread.deadline_us) tc_thread.deadline_us = 1; /* 0 is "none" */
    }
}

struct tocsin_cancel {
    _Atomic int fired;
};

tocsin_cancel *tocsin_cancel_new(void) {
    tocsin_cancel *c = sqlite3_malloc(sizeof *c);
    if (c) atomic_init(&c->fired, 0);
    return c;
}

void tocsin_cancel_fire(tocsin_cancel *c) {
    if (c) atomic_store(&c->fired, 1);
}

void tocsin_cancel_free(tocsin_cancel *c) { sqlite3_free(c); }

void tocsin_thread_cancel(tocsin_cancel *c) { tc_thread.cancel = c; }

/* Whether the calling thread's call was cancelled (tocsin_cancel_fire): its lock waits end. */
static int cancelled(void) { return tc_thread.cancel && atomic_load(&tc_thread.cancel->fired); }

void tc_clear(tocsin_db *db) {
    tc_thread.code = TOCSIN_OK;
    tc_thread.sqlite_rc = 0;
    tc_thread.msg[0] = 0;
    /* only a host's connection needs it (busy_wait): no clock read per call on ours */
    tc_thread.call_start = db && !db->owns_conn ? tc_monotonic_ms() : 0;
    tc_thread.busy_until = 0;
    tc_thread.busy_waited = 0;
    tc_thread.denied = 0;
    tc_thread.prepare_failed = 0;
}

int tc_err(tocsin_db *db, int rc, const char *fmt, ...) {
    char msg[sizeof tc_thread.msg];
    va_list ap;
    (void)db;
    /* format aside first: an argument may be the current message itself */
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(tc_thread.msg, msg, sizeof msg);
    tc_thread.code = rc;
    tc_thread.sqlite_rc = 0;
    return rc;
}

int tocsin_code_of_sqlite(int sqlite_rc) {
    switch (sqlite_rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE: return TOCSIN_OK;
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return TOCSIN_BUSY;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return TOCSIN_CORRUPT;
    case SQLITE_NOMEM: return TOCSIN_NOMEM;
    case SQLITE_READONLY: return TOCSIN_READONLY;
    case SQLITE_INTERRUPT: return TOCSIN_INTERRUPTED;
    case SQLITE_IOERR: return TOCSIN_IOERR;
    case SQLITE_FULL: return TOCSIN_FULL;
    case SQLITE_CANTOPEN: return TOCSIN_CANTOPEN;
    case SQLITE_PERM:
    case SQLITE_AUTH: return TOCSIN_PERM;
    case SQLITE_TOOBIG: return TOCSIN_TOOBIG;
    case SQLITE_RANGE:
    case SQLITE_MISMATCH: return TOCSIN_INVALID;
    default: return TOCSIN_ERROR;
    }
}

/*
 * The extended code of a failure: a host's connection may run without
 * extended result codes, and then sqlite3_step returns the primary code alone
 * (SQLITE_BUSY for SQLITE_BUSY_SNAPSHOT, SQLITE_CONSTRAINT for a UNIQUE
 * failure). The connection still records the extended one.
 */
int tc_xcode(tocsin_db *db, int rc) {
    if (rc != SQLITE_OK && rc != SQLITE_ROW && rc != SQLITE_DONE && rc == (rc & 0xff) && db->conn) {
        int x = sqlite3_extended_errcode(db->conn);
        if ((x & 0xff) == rc) return x;
    }
    return rc;
}

/* Whether db's close began (tocsin_close_begin): its lock waits end. A
 * transaction handle's are its database's (a tocsin_tx_begin waiting for the
 * write lock ends too; a transaction that holds it never waits). */
static int closing(tocsin_db *db) {
    return atomic_load(&db->closing) || (db->is_tx && db->parent && atomic_load(&db->parent->closing));
}

int tc_sqlerr(tocsin_db *db, int sqlite_rc, const char *what) {
    int prim, rc;
    const char *msg = sqlite3_errmsg(db->conn);
    sqlite_rc = tc_xcode(db, sqlite_rc);
    prim = sqlite_rc & 0xff;
    rc = tocsin_code_of_sqlite(sqlite_rc);
    if (rc == TOCSIN_OK) rc = TOCSIN_ERROR;
    /* the file under the connection was replaced (a backup written into it, a
     * restore): the schema the handle had checked is gone, and the next call
     * checks it again (and installs it) instead of failing the same way */
    if (prim == SQLITE_ERROR && strncmp(msg, "no such table: ", 15) == 0) db->schema_ok = 0;
    if (sqlite_rc == SQLITE_BUSY_SNAPSHOT)
        tc_err(db, rc,
               "%s: this connection's read snapshot is stale (another connection committed "
               "after its transaction or statement began reading), so it cannot write; roll back "
               "and retry, and start write transactions with BEGIN IMMEDIATE",
               what);
    else if (prim == SQLITE_BUSY && strstr(msg, "in progress"))
        tc_err(db, rc, "%s: %s (a statement of this connection is still running)", what, msg);
    else if (prim == SQLITE_BUSY && sqlite3_txn_state(db->conn, "main") == SQLITE_TXN_READ)
        tc_err(db, rc,
               "%s: database is locked by another connection, and this connection's open "
               "transaction holds a read lock, so it cannot wait for the write lock without "
               "risking a deadlock; start write transactions with BEGIN IMMEDIATE",
               what);
    else if (prim == SQLITE_BUSY && closing(db))
        rc = tc_err(db, TOCSIN_CLOSED,
                    "%s: the database handle was closed while this call waited for a lock", what);
    else if (prim == SQLITE_BUSY && cancelled())
        rc = tc_err(db, TOCSIN_INTERRUPTED,
                    "%s: cancelled while this call waited for another connection's lock (nothing "
                    "was written)", what);
    else if (prim == SQLITE_BUSY && tc_thread.nowait)
        tc_err(db, rc, "%s: database is locked by another connection (this call does not wait)", what);
    else if (prim == SQLITE_BUSY)
        tc_err(db, rc, "%s: database is locked (waited %lld ms for the lock)", what,
               (long long)(!db->owns_conn && tc_thread.call_start
                               ? tc_monotonic_ms() - tc_thread.call_start /* its handler's wait too */
                           : tc_thread.busy_waited ? (tc_thread.busy_waited + 999) / 1000
                                                   : db->busy_timeout_ms));
    else if (tc_thread.prepare_failed &&
             (prim == SQLITE_TOOBIG || strstr(msg, "variable number") || strstr(msg, "too many") ||
              strstr(msg, "too large")))
        /* a host's sqlite3_limit below what tocsin's own statements need */
        tc_err(db, rc,
               "%s: %s: this connection's limits refuse one of tocsin's own statements (%zu bytes; "
               "sqlite3_limit: SQLITE_LIMIT_SQL_LENGTH %d, SQLITE_LIMIT_LENGTH %d, "
               "SQLITE_LIMIT_VARIABLE_NUMBER %d, SQLITE_LIMIT_FUNCTION_ARG %d, "
               "SQLITE_LIMIT_EXPR_DEPTH %d, SQLITE_LIMIT_COMPOUND_SELECT %d, SQLITE_LIMIT_COLUMN %d); "
               "nothing was written: raise the limit (SQLite's defaults suit tocsin)",
               what, msg, tc_thread.prepare_failed, sqlite3_limit(db->conn, SQLITE_LIMIT_SQL_LENGTH, -1),
               sqlite3_limit(db->conn, SQLITE_LIMIT_LENGTH, -1),
               sqlite3_limit(db->conn, SQLITE_LIMIT_VARIABLE_NUMBER, -1),
               sqlite3_limit(db->conn, SQLITE_LIMIT_FUNCTION_ARG, -1),
               sqlite3_limit(db->conn, SQLITE_LIMIT_EXPR_DEPTH, -1),
               sqlite3_limit(db->conn, SQLITE_LIMIT_COMPOUND_SELECT, -1),
               sqlite3_limit(db->conn, SQLITE_LIMIT_COLUMN, -1));
    else if (strstr(msg, "too many levels of trigger recursion"))
        tc_err(db, rc, "%s: %s (this connection's SQLITE_LIMIT_TRIGGER_DEPTH is %d: tocsin's tables fire "
               "triggers of their own, one level deep)", what, msg,
               sqlite3_limit(db->conn, SQLITE_LIMIT_TRIGGER_DEPTH, -1));
    else if (prim == SQLITE_TOOBIG && strstr(msg, "too big"))
        /* a value, or a row with it, over the host's limit: say which */
        tc_err(db, rc, "%s: %s (a value or row over this connection's SQLITE_LIMIT_LENGTH, %d bytes)",
               what, msg, sqlite3_limit(db->conn, SQLITE_LIMIT_LENGTH, -1));
    else if (prim == SQLITE_NOTADB)
        tc_err(db, rc,
               "%s: %s (its header is not an SQLite database's: another kind of file, or an "
               "encrypted database)",
               what, msg);
    else
        tc_err(db, rc, "%s: %s", what, msg);
    tc_thread.sqlite_rc = sqlite_rc;
    return rc;
}

/*
 * Whether this thread's call must not wait for a lock now: tocsin_worker_poll,
 * or a worker step while a transaction handle of its database holds the lock
 * (that transaction may be waiting for this very step).
 */
static int no_wait(void) {
    if (tc_thread.nowait) return 1;
    if (tc_thread.yield_to && atomic_load(tc_thread.yield_to) > 0) {
        tc_thread.yielded = 1;
        return 1;
    }
    return 0;
}

/*
 * One more lock wait within the call's budget: 1 when the caller should
 * retry, 0 when the budget is spent. Sleeps 1, 1, 2, 4, then 5 ms (not longer:
 * see busy_cb, a writer that backs off far starves under load). The budget runs
 * from the first SQLITE_BUSY; on a host's connection from the call's start:
 * the host's own busy handler has already waited before SQLite returned
 * SQLITE_BUSY, and that wait counts; host_ms is how long that handler waited
 * in the step that just failed: a retry that would wait as long again past the
 * budget is not made (the call waits about the longer of the two timeouts, at
 * most, never their sum: each retry used to run the host's whole timeout again).
 */
static int busy_wait(tocsin_db *db, int64_t host_ms) {
    int64_t now = tc_monotonic_ms(), pause;
    if (no_wait() || closing(db) || cancelled()) return 0;
    if (!tc_thread.busy_until) {
        /* on our own connections, busy_cb's sleeps of this call count: it had
         * waited the whole timeout inside SQLite before this first retry, and
         * a write waited twice TOCSIN_BUSY_TIMEOUT */
        tc_thread.busy_until = (!db->owns_conn && tc_thread.call_start ? tc_thread.call_start
                                                                        : now - tc_thread.busy_waited / 1000) +
                               db->busy_timeout_ms;
        if (tc_thread.deadline_us && tc_thread.deadline_us / 1000 < tc_thread.busy_until)
            tc_thread.busy_until = tc_thread.deadline_us / 1000;
    }
    if (now >= tc_thread.busy_until || (host_ms > 1 && now + host_ms > tc_thread.busy_until)) return 0;
    pause = tc_thread.busy_waited / 1000;
    pause = pause < 1 ? 1 : pause > 5 ? 5 : pause;
    if (pause > tc_thread.busy_until - now) pause = tc_thread.busy_until - now;
    tc_sleep_ms((int)pause);
    tc_thread.busy_waited += pause * 1000;
    return 1;
}

/*
 * Pauses (us) up to the handle's timeout (ctx: the tocsin_db that owns the
 * connection). A tocsin write transaction holds the lock for a fraction of a
 * millisecond, so the first pauses are that short (SQLite's own schedule
 * starts at 1 ms: a worker that just missed another process's commit slept
 * several of them), and they stop growing at 5 ms. SQLite's schedule goes on
 * to 100 ms, and under a saturating load (4 claiming processes and 2
 * producers) a writer that had backed off that far woke to find the lock
 * taken again and again, until its timeout ran out: a 5 s Busy for one
 * enqueue in a bench run; with a 300 ms timeout 30-40 calls of 200k failed
 * in 10 s, none with pauses of at most 5 ms. So does a close of the handle:
 * it is seen within one pause, and the call fails with TOCSIN_CLOSED.
 */
static int busy_cb(void *ctx, int count) {
    static const int pauses[] = {50, 100, 200, 400, 800, 1000, 2000, 5000};
    enum { N_PAUSES = (int)(sizeof pauses / sizeof pauses[0]) };
    tocsin_db *db = ctx;
    int64_t timeout = (int64_t)db->busy_timeout_ms * 1000, pause, prior = 0;
    int i;
    if (no_wait() || closing(db) || cancelled()) return 0;
    for (i = 0; i < count && i < N_PAUSES; i++) prior += pauses[i];
    if (count >= N_PAUSES) prior += (int64_t)pauses[N_PAUSES - 1] * (count - N_PAUSES);
    pause = pauses[count < N_PAUSES ? count : N_PAUSES - 1];
    if (prior + pause > timeout) {
        pause = timeout - prior;
        if (pause <= 0) return 0;
    }
    if (tc_thread.deadline_us) { /* the thread's own bound (tocsin_thread_timeout) */
        int64_t left = tc_thread.deadline_us - tc_monotonic_us();
        if (left <= 0) return 0;
        if (pause > left) pause = left;
    }
    tc_sleep_us(pause);
    tc_thread.busy_waited += pause; /* the "waited N ms" of a BUSY error counts these too */
    return !closing(db) && !cancelled();
}

/*
 * The authorizer of the connections the core opens (never a host's): the
 * application's SQL on them -- tocsin_exec, its statements on tocsin_sqlite(db)
 * -- may not begin or end a transaction. Transactions are tocsin_begin's and
 * the transaction handles': a BEGIN on a handle that every thread shares would
 * pull the other threads' calls into it (and a close would drop them), and a
 * COMMIT or ROLLBACK would end tocsin_begin's or a transaction handle's
 * transaction behind its back. Refused when prepared, so nothing of the
 * statement runs; the core's own control statements run with ctl set.
 */
static int own_auth(void *ctx, int action, const char *a, const char *b, const char *c, const char *d) {
    tocsin_db *db = ctx;
    (void)b, (void)c;
    if (tc_thread.ctl) return SQLITE_OK;
    /* State the connection keeps past the transaction: an attached database, a
     * pragma's setting, a TEMP table, view, index or trigger (one on tocsin's
     * tables would fire in the transactions of other threads). A transaction
     * handle's connection so changed is closed when it ends, not reused. */
    if (tc_thread.user_sql &&
        (action == SQLITE_ATTACH || action == SQLITE_DETACH || action == SQLITE_PRAGMA ||
         action == SQLITE_CREATE_TEMP_INDEX || action == SQLITE_CREATE_TEMP_TABLE ||
         action == SQLITE_CREATE_TEMP_TRIGGER || action == SQLITE_CREATE_TEMP_VIEW ||
         (action == SQLITE_CREATE_VTABLE && d && sqlite3_stricmp(d, "temp") == 0)))
        db->conn_changed = 1;
    /* VACUUM (INTO) runs a BEGIN and a COMMIT of its own, in autocommit only, and
     * ends where it began: it is the application's to run */
    if (action == SQLITE_TRANSACTION && (tc_running(db->conn) & TC_RUN_VACUUM)) return SQLITE_OK;
    if (action == SQLITE_TRANSACTION ||
        (action == SQLITE_SAVEPOINT && a && !strcmp(a, "BEGIN") && sqlite3_get_autocommit(db->conn))) {
        tc_err(NULL, TOCSIN_INVALID,
               "the SQL's %s is refused: SQL run on tocsin's own connections may not begin or end a "
               "transaction (BEGIN, COMMIT, ROLLBACK, END, or a SAVEPOINT outside one); transactions "
               "are tocsin's (tocsin_begin, tocsin_tx_begin; a binding's transaction())",
               action == SQLITE_SAVEPOINT ? "SAVEPOINT" : a ? a : "transaction control");
        tc_thread.denied = 1;
        return SQLITE_DENY;
    }
    /* tocsin's statements name their tables without a schema and SQLite looks
     * in temp before main: a TEMP table or view named like one of tocsin's
     * would take the claims and enqueues meant for it (lost with the
     * connection). The SQL functions check a host's connection at each call. */
    if ((action == SQLITE_CREATE_TEMP_TABLE || action == SQLITE_CREATE_TEMP_VIEW) && a &&
        sqlite3_strnicmp(a, "_tocsin_", 8) == 0) {
        tc_err(NULL, TOCSIN_INVALID,
               "the SQL's TEMP %s %s is refused: it would hide tocsin's own table of that name "
               "(SQLite looks a name up in temp before main)",
               action == SQLITE_CREATE_TEMP_VIEW ? "view" : "table", a);
        tc_thread.denied = 1;
        return SQLITE_DENY;
    }
    return SQLITE_OK;
}

/*
 * The next job id without reading it. A one-job enqueue on an own connection is
 * an INSERT that commits on its own, and reading its id (TC_NEXT_ID: the table's
 * last row and its sqlite_sequence row, two more b-trees) was a tenth of its
 * time. The handle remembers the id after the one it inserted and the file's
 * data version just after that commit. The INSERT asks _tocsin_next_id() first,
 * which runs inside the INSERT's write transaction: the data version it reads
 * there has moved if anything at all was committed to the file since -- by
 * another connection or process (SQLite sees it as the transaction begins), or
 * by this connection (each of its commits moves it) -- and then it answers NULL
 * and the INSERT reads the id. Only outside an explicit transaction: inside
 * one, the connection may have written ids or deleted the top row uncommitted,
 * which the version does not show.
 */
/* The file's data version, outside an explicit transaction only (0 otherwise). */
static int autocommit_version(tocsin_db *db, unsigned *ver) {
    return sqlite3_get_autocommit(db->conn) &&
           sqlite3_file_control(db->conn, "main", SQLITE_FCNTL_DATA_VERSION, ver) == SQLITE_OK;
}

static void next_id_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    tocsin_db *db = sqlite3_user_data(ctx);
    unsigned ver = 0;
    (void)argc, (void)argv;
    if (db->id_hint_next && autocommit_version(db, &ver) && ver == db->id_hint_ver)
        sqlite3_result_int64(ctx, db->id_hint_next);
}

void tc_id_hint_set(tocsin_db *db, int64_t next) {
    /* committed: the version read now is the one this commit left (another
     * connection's later commit moves it as the next transaction begins) */
    db->id_hint_next = autocommit_version(db, &db->id_hint_ver) ? next : 0;
}

void tc_own_conn_setup(tocsin_db *db) {
    sqlite3_busy_handler(db->conn, busy_cb, db);
    sqlite3_set_authorizer(db->conn, own_auth, db);
    /* without it (out of memory), the INSERT that names it fails to prepare:
     * owns_conn alone does not choose that INSERT (tc_id_hinted) */
    db->id_hinted = sqlite3_create_function_v2(db->conn, "_tocsin_next_id", 0, SQLITE_UTF8 | SQLITE_DIRECTONLY,
                                               db, next_id_fn, NULL, NULL, NULL) == SQLITE_OK;
}

/* Could waiting for this BUSY ever succeed without risking a deadlock? */
static int busy_retryable(tocsin_db *db, sqlite3_stmt *st, int rc) {
    if ((rc & 0xff) != SQLITE_BUSY || rc == SQLITE_BUSY_SNAPSHOT) return 0;
    if (strstr(sqlite3_errmsg(db->conn), "in progress")) return 0;
    /* A reader upgrading to a writer: SQLite itself declines to wait. */
    if (st && !sqlite3_stmt_readonly(st) &&
        sqlite3_txn_state(db->conn, "main") == SQLITE_TXN_READ)
        return 0;
    return 1;
}

int tc_prepare(tocsin_db *db, const char *sql, unsigned flags, sqlite3_stmt **st) {
    int rc;
    /* Preparing reads the schema, which takes a read lock. */
    while ((rc = tc_xcode(db, sqlite3_prepare_v3(db->conn, sql, -1, flags, st, NULL))) != SQLITE_OK &&
           !db->owns_conn && busy_retryable(db, NULL, rc) && busy_wait(db, 0)) {
    }
    tc_thread.prepare_failed = rc == SQLITE_OK ? 0 : strlen(sql);
    return rc;
}

/*
 * The row PRAGMA count_changes (deprecated, still built into most SQLites)
 * makes an INSERT, UPDATE or DELETE without RETURNING return, its count, after
 * all of its work and before SQLITE_DONE. tocsin's statements are written for
 * SQLITE_DONE: an enqueue would take the row for a failure, report it and
 * commit the job all the same. tc_step steps past it.
 */
static int count_changes_row(sqlite3_stmt *st) {
    const char *name;
    if (sqlite3_stmt_readonly(st) || sqlite3_column_count(st) != 1) return 0;
    name = sqlite3_column_name(st, 0);
    return name && (strcmp(name, "rows inserted") == 0 || strcmp(name, "rows updated") == 0 ||
                    strcmp(name, "rows deleted") == 0);
}

int tc_step(tocsin_db *db, sqlite3_stmt *st) {
    int64_t t0 = db->owns_conn ? 0 : tc_monotonic_ms();
    int rc = tc_xcode(db, sqlite3_step(st));
    /* Our own connections wait in SQLite's busy handler (same budget); on a
     * host's, the host's handler waited inside the step (busy_wait) */
    while ((rc & 0xff) == SQLITE_BUSY && !db->owns_conn && busy_retryable(db, st, rc) &&
           busy_wait(db, tc_monotonic_ms() - t0)) {
        t0 = tc_monotonic_ms();
        rc = tc_xcode(db, sqlite3_step(st));
    }
    if (rc == SQLITE_ROW && count_changes_row(st)) rc = tc_step(db, st);
    return rc;
}

const char *tocsin_errmsg(tocsin_db *db) {
    (void)db;
    return tc_thread.msg[0] ? tc_thread.msg : tocsin_errstr(tc_thread.code);
}
int tocsin_errcode(tocsin_db *db) {
    (void)db;
    return tc_thread.code;
}
int tocsin_sqlite_errcode(tocsin_db *db) {
    (void)db;
    return tc_thread.sqlite_rc;
}

/* ---- clock --------------------------------------------------------------- */

/* A host clock outside 0..TOCSIN_MAX_TIME_MS is clamped: no arithmetic on
 * "now" can then wrap (tc_time_add saturates at the same bound). */
int64_t tocsin_now(tocsin_db *db) {
    int64_t t = db->clock ? db->clock(db->clock_ctx) : tc_system_ms();
    return t < 0 ? 0 : t > TOCSIN_MAX_TIME_MS ? TOCSIN_MAX_TIME_MS : t;
}

void tocsin_set_clock(tocsin_db *db, tocsin_clock_fn clock, void *ctx) {
    db->clock = clock;
    db->clock_ctx = ctx;
}

int tocsin_set_max_payload(tocsin_db *db, int64_t max_bytes) {
    tc_clear(db);
    if (max_bytes < 1) return tc_err(db, TOCSIN_INVALID, "max_payload_bytes must be >= 1");
    db->max_payload = max_bytes;
    return TOCSIN_OK;
}

/* ---- handles ------------------------------------------------------------- */

static int apply_opts(tocsin_db *db, const tocsin_open_opts *o) {
    int rc;
    db->busy_timeout_ms = TC_DEFAULT_BUSY_MS;
    db->max_payload = TC_DEFAULT_MAX_PAYLOAD;
    if (!o) return TOCSIN_OK;
    if ((rc = TC_CHECK_VERSION(db, "open options", o->version, TOCSIN_OPEN_OPTS)) != TOCSIN_OK) return rc;
    if (o->busy_timeout_ms < 0) return tc_err(db, TOCSIN_INVALID, "busy_timeout_ms must be >= 0");
    if (o->max_payload_bytes < 0) return tc_err(db, TOCSIN_INVALID, "max_payload_bytes must be >= 0");
    if (o->busy_timeout_ms) db->busy_timeout_ms = o->busy_timeout_ms;
    if (o->max_payload_bytes) db->max_payload = o->max_payload_bytes;
    db->read_only = o->read_only != 0;
    db->clock = o->clock;
    db->clock_ctx = o->clock_ctx;
    return TOCSIN_OK;
}

static tocsin_db *alloc_db(void) {
    tocsin_db *db = sqlite3_malloc(sizeof *db);
    pthread_mutexattr_t a;
    if (!db) return NULL;
    memset(db, 0, sizeof *db);
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&db->mutex, &a);
    pthread_mutexattr_destroy(&a);
    db->refs = 1;
    db->generation = tc_fork_generation();
    return db;
}

int tc_inherited(tocsin_db *db) {
    /* a host's connection (tocsin_wrap) is the host's to use after fork() */
    if (!db->owns_conn || db->generation == tc_fork_generation()) return 0;
    return tc_err(db, TOCSIN_CLOSED,
                  "this database handle was opened before fork(); it belongs to the parent process "
                  "(open a new one in the child)");
}

/* Frees a handle no thread uses any more (its connection too, if its own). */
static void free_db(tocsin_db *db) {
    tc_wake_write_end(db); /* closing ends an open write */
    tc_wake_release(db);
    tc_stmt_flush(db);
    if (db->owns_conn && db->conn) sqlite3_close_v2(db->conn);
    sqlite3_free(db->ext_fns);
    pthread_mutex_destroy(&db->mutex);
    sqlite3_free(db);
}

static int check_sqlite_version(tocsin_db *db) {
    if (sqlite3_libversion_number() < TC_MIN_SQLITE)
        return tc_err(db, TOCSIN_VERSION, "tocsin needs SQLite >= 3.37.0; this process runs %s",
                      sqlite3_libversion());
    return TOCSIN_OK;
}

/* Records the (device, inode) of the file the connection opened: a path that
 * later names another file is a replaced database (watcher.c). */
void tc_identify(tocsin_db *db) {
    const char *path = sqlite3_db_filename(db->conn, "main");
    struct stat st;
    if (path && *path && stat(path, &st) == 0) {
        db->dev = (uint64_t)st.st_dev;
        db->ino = (uint64_t)st.st_ino;
        db->has_identity = 1;
    }
}

/*
 * journal_mode=WAL needs the file to itself for a moment: processes racing
 * to open a fresh file see SQLITE_BUSY here without the busy handler being
 * asked, so wait within the budget like every other step.
 */
static int set_wal(tocsin_db *db) {
    for (;;) {
        int rc = tc_exec(db, "PRAGMA journal_mode=WAL", "set journal_mode");
        if (rc != TOCSIN_BUSY || !busy_wait(db, 0)) return rc;
    }
}

/* ---- opening a database in a directory this process cannot write ---------- */

/* The directory that holds path (a copy), or NULL without memory. */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return sqlite3_mprintf(".");
    if (slash == path) return sqlite3_mprintf("/");
    return sqlite3_mprintf("%.*s", (int)(slash - path), path);
}

static int dir_writable(const char *path) {
    char *dir = dir_of(path);
    int ok = dir && access(dir, W_OK) == 0;
    sqlite3_free(dir);
    return ok;
}

/* The header says WAL (file format bytes 18 and 19 are 2). Read through
 * SQLite's VFS, never with open()/close() of our own: closing a descriptor
 * drops every POSIX lock this process holds on the file (another connection's
 * read lock among them), and the unix VFS keeps such a descriptor open until
 * those locks are gone. */
static int file_is_wal(const char *path) {
    unsigned char head[20];
    sqlite3_vfs *vfs = sqlite3_vfs_find(NULL);
    sqlite3_file *f;
    const char *name; /* char * before SQLite 3.41's sqlite3_filename, const after */
    int flags = 0, wal = 0;
    if (!vfs || !(name = sqlite3_create_filename(path, "", "", 0, NULL))) return 0;
    if ((f = sqlite3_malloc(vfs->szOsFile)) != NULL) {
        memset(f, 0, (size_t)vfs->szOsFile);
        if (vfs->xOpen(vfs, name, f, SQLITE_OPEN_READONLY | SQLITE_OPEN_MAIN_DB, &flags) == SQLITE_OK)
            wal = f->pMethods->xRead(f, head, (int)sizeof head, 0) == SQLITE_OK && head[18] == 2 && head[19] == 2;
        if (f->pMethods) f->pMethods->xClose(f);
        sqlite3_free(f);
    }
    sqlite3_free_filename((char *)name);
    return wal;
}

/* Appends text to a URI, every byte but letters, digits and "/-._~" as %XX. */
static void uri_escape(sqlite3_str *u, const char *text) {
    for (; *text; text++) {
        unsigned char c = (unsigned char)*text;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("/-._~", c))
            sqlite3_str_appendchar(u, 1, (char)c);
        else
            sqlite3_str_appendf(u, "%%%02X", c);
    }
}

/* "file:" and path as a URI: an absolute path after an empty authority
 * ("file:///a", so that a path starting with "//" is no authority). */
static void uri_file(sqlite3_str *u, const char *path) {
    sqlite3_str_appendall(u, path[0] == '/' ? "file://" : "file:");
    uri_escape(u, path);
}

/*
 * What a read-only open opens: a WAL database needs its -shm file, which
 * SQLite cannot create in a directory this process may not write; it is then
 * opened immutable (a snapshot: later commits are not seen). Anything else
 * opens as named. NULL: as named; else a URI to free.
 */
static char *read_only_target(const char *path) {
    char *shm, *uri, *abs = NULL;
    struct stat st;
    int i;
    sqlite3_str *u;
    if (strncmp(path, "file:", 5) == 0 || strcmp(path, ":memory:") == 0 || dir_writable(path)) return NULL;
    if (!(shm = sqlite3_mprintf("%s-shm", path))) return NULL;
    i = stat(shm, &st) == 0;
    sqlite3_free(shm);
    if (i || !file_is_wal(path)) return NULL;
    if (path[0] != '/') {
        char cwd[4096];
        if (!getcwd(cwd, sizeof cwd)) return NULL;
        abs = sqlite3_mprintf("%s/%s", cwd, path);
    } else {
        abs = sqlite3_mprintf("%s", path);
    }
    if (!abs) return NULL;
    u = sqlite3_str_new(NULL);
    uri_file(u, abs);
    sqlite3_str_appendall(u, "?mode=ro&immutable=1");
    sqlite3_free(abs);
    uri = sqlite3_str_finish(u);
    return uri;
}

/* A read-write open that failed because the directory is not writable says so. */
static int explain_open(tocsin_db *db, const char *path, int rc) {
    char msg[sizeof tc_thread.msg];
    char *dir;
    if (db->read_only || (rc != TOCSIN_READONLY && rc != TOCSIN_CANTOPEN) || strncmp(path, "file:", 5) == 0 ||
        dir_writable(path))
        return rc;
    memcpy(msg, tc_thread.msg, sizeof msg);
    dir = dir_of(path);
    tc_err(db, rc,
           "%s (%s: the directory %s must be writable -- SQLite keeps a WAL database's -wal and -shm "
           "files beside it; make it writable, or open it read-only to read it)",
           msg, path, dir ? dir : "?");
    sqlite3_free(dir);
    return rc;
}

int tocsin_open(tocsin_db **out, const char *path, const tocsin_open_opts *opts) {
    tocsin_db *db;
    int rc, flags;
    if (!out) return TOCSIN_INVALID;
    *out = NULL;
    db = alloc_db();
    if (!db) return TOCSIN_NOMEM;
    *out = db;
    if ((rc = apply_opts(db, opts)) != TOCSIN_OK) return rc;
    if (!path || !*path) return tc_err(db, TOCSIN_INVALID, "path must be a non-empty string");
    if ((rc = check_sqlite_version(db)) != TOCSIN_OK) return rc;
    flags = (db->read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
            SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI;
    {
        char *target = db->read_only ? read_only_target(path) : NULL;
        rc = sqlite3_open_v2(target ? target : path, &db->conn, flags, NULL);
        sqlite3_free(target);
    }
    db->owns_conn = 1;
    if (rc != SQLITE_OK) {
        if (!db->conn) return tc_err(db, TOCSIN_NOMEM, "open %s: out of memory", path);
        return explain_open(db, path, tc_sqlerr(db, rc, path));
    }
    sqlite3_extended_result_codes(db->conn, 1);
    tc_own_conn_setup(db);
    tc_identify(db);
    /* a newer or damaged schema is refused before the switch to WAL writes the header */
    if ((rc = tc_schema_precheck(db)) != TOCSIN_OK) return explain_open(db, path, rc);
    if (!db->read_only && (rc = set_wal(db)) != TOCSIN_OK) return explain_open(db, path, rc);
    if ((rc = tc_exec(db, "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON", "set pragmas")) != TOCSIN_OK)
        return explain_open(db, path, rc);
    if ((rc = tc_ensure_schema(db)) != TOCSIN_OK) return explain_open(db, path, rc);
    tc_clear(db);
    return TOCSIN_OK;
}

int tocsin_wrap(tocsin_db **out, sqlite3 *conn, const tocsin_open_opts *opts) {
    tocsin_db *db;
    int rc;
    if (!out) return TOCSIN_INVALID;
    *out = NULL;
    db = alloc_db();
    if (!db) return TOCSIN_NOMEM;
    *out = db;
    if ((rc = apply_opts(db, opts)) != TOCSIN_OK) return rc;
    if (!conn) return tc_err(db, TOCSIN_INVALID, "connection must not be NULL");
    if ((rc = check_sqlite_version(db)) != TOCSIN_OK) return rc;
    db->conn = conn;
    if (sqlite3_db_readonly(conn, "main") == 1) db->read_only = 1;
    tc_identify(db);
    return TOCSIN_OK;
}

void tc_stmt_flush(tocsin_db *db) {
    int i;
    for (i = 0; i < TC_STMT_SLOTS; i++) {
        sqlite3_finalize(db->stmts[i].stmt);
        db->stmts[i].stmt = NULL;
        db->stmts[i].sql = NULL;
    }
    sqlite3_finalize(db->stmt_sentinel);
    db->stmt_sentinel = NULL;
}

/* The cache's slot for the statement of `sql` is found from here on. */
static size_t stmt_slot(const char *sql) { return ((uintptr_t)sql >> 3) % TC_STMT_SLOTS; }

/*
 * Statements that outlive a call on a host's connection (the extension's
 * cache, a wrapped handle's) are in the connection's list of statements, which
 * the host may walk with sqlite3_next_stmt to finalize every one before a
 * close (a common cleanup): ours then dangle, and finalizing or stepping them
 * again crashed. stmt_alive tells whether the statement the cache holds for
 * `sql` is still the connection's: in its list, with that text (the memory of
 * one the host finalized may hold a statement of the host's since).
 */
static int same_text(sqlite3_stmt *s, const char *sql) {
    const char *t = sqlite3_sql(s);
    return t && strcmp(t, sql) == 0;
}

static int stmt_alive(sqlite3 *conn, sqlite3_stmt *st, const char *sql) {
    sqlite3_stmt *s = NULL;
    while ((s = sqlite3_next_stmt(conn, s)))
        if (s == st) return same_text(s, sql);
    return 0;
}

static const char SQL_SENTINEL[] = "SELECT 'tocsin: statement cache sentinel'";

/* Forgets the cached statements the host finalized (finalizing none) and
 * rehashes the others. A walk of the whole list per statement: at a close, or
 * once a host was seen finalizing statements it did not prepare. */
static void stmt_forget_gone(tocsin_db *db) {
    const char *sql[TC_STMT_SLOTS];
    sqlite3_stmt *st[TC_STMT_SLOTS];
    int i, n = 0;
    for (i = 0; i < TC_STMT_SLOTS; i++) {
        if (db->stmts[i].stmt && stmt_alive(db->conn, db->stmts[i].stmt, db->stmts[i].sql)) {
            sql[n] = db->stmts[i].sql;
            st[n++] = db->stmts[i].stmt;
        }
        db->stmts[i].sql = NULL;
        db->stmts[i].stmt = NULL;
    }
    for (i = 0; i < n; i++) {
        size_t k = stmt_slot(sql[i]);
        while (db->stmts[k].sql) k = (k + 1) % TC_STMT_SLOTS;
        db->stmts[k].sql = sql[i];
        db->stmts[k].stmt = st[i];
    }
    if (db->stmt_sentinel && !stmt_alive(db->conn, db->stmt_sentinel, SQL_SENTINEL)) db->stmt_sentinel = NULL;
}

/* How far below the top of the list the sentinel may sit before it is
 * prepared again: the check's walk stays this short while the host prepares
 * statements of its own. */
#define TC_SENTINEL_DEPTH 8

/* At the start of a call: a host that finalized every statement of the
 * connection finalized the sentinel too. Finding it is a walk of at most
 * TC_SENTINEL_DEPTH statements; not finding it, the cache keeps only the
 * statements still there. */
void tc_stmt_check(tocsin_db *db) {
    sqlite3_stmt *s = NULL, *fresh = NULL;
    int depth = 0, i;
    if (db->stmt_sentinel) {
        while ((s = sqlite3_next_stmt(db->conn, s)) && s != db->stmt_sentinel) depth++;
        if (s && same_text(s, SQL_SENTINEL)) {
            if (depth <= TC_SENTINEL_DEPTH) return;
        } else {
            db->stmt_sentinel = NULL; /* finalized by the host */
            stmt_forget_gone(db);
        }
    } else {
        for (i = 0; i < TC_STMT_SLOTS && !db->stmts[i].stmt; i++) {
        }
        if (i == TC_STMT_SLOTS) return; /* nothing cached: nothing to lose */
        stmt_forget_gone(db); /* what was cached before there was a sentinel */
    }
    if (sqlite3_prepare_v3(db->conn, SQL_SENTINEL, -1, SQLITE_PREPARE_PERSISTENT, &fresh, NULL) == SQLITE_OK) {
        sqlite3_finalize(db->stmt_sentinel); /* one deeper down, still there */
        db->stmt_sentinel = fresh;
    }
}

void tc_stmt_flush_host(tocsin_db *db) {
    stmt_forget_gone(db);
    tc_stmt_flush(db);
}

void tc_stmt_idle(tocsin_db *db) {
    int i;
    for (i = 0; i < TC_STMT_SLOTS; i++) {
        if (!db->stmts[i].stmt) continue;
        sqlite3_reset(db->stmts[i].stmt);
        sqlite3_clear_bindings(db->stmts[i].stmt); /* a 1 MiB payload's copy is not kept */
    }
}

int tc_query_only(sqlite3 *conn) {
    sqlite3_stmt *st = NULL;
    int on = 0;
    if (sqlite3_prepare_v2(conn, "PRAGMA query_only", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        on = sqlite3_column_int(st, 0) != 0;
    sqlite3_finalize(st);
    return on;
}

/* Does the statement s begin with keyword (after white space and comments)? */
static int starts_with(const char *s, const char *keyword) {
    size_t n = strlen(keyword);
    for (;;) {
        while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\f') s++;
        if (s[0] == '-' && s[1] == '-') {
            while (*s && *s != '\n') s++;
        } else if (s[0] == '/' && s[1] == '*') {
            const char *end = strstr(s + 2, "*/");
            s = end ? end + 2 : s + strlen(s);
        } else {
            break;
        }
    }
    return sqlite3_strnicmp(s, keyword, (int)n) == 0 && !(isalnum((unsigned char)s[n]) || s[n] == '_');
}

int tc_running(sqlite3 *conn) {
    sqlite3_stmt *st;
    int run = 0;
    for (st = sqlite3_next_stmt(conn, NULL); st; st = sqlite3_next_stmt(conn, st)) {
        const char *sql;
        if (!sqlite3_stmt_busy(st)) continue;
        run |= TC_RUN_ANY;
        if (!sqlite3_stmt_readonly(st)) run |= TC_RUN_WRITER;
        if ((sql = sqlite3_sql(st)) != NULL && starts_with(sql, "PRAGMA")) run |= TC_RUN_PRAGMA;
        if (sql && starts_with(sql, "VACUUM")) run |= TC_RUN_VACUUM;
    }
    return run;
}

void tc_db_drop(tocsin_db *db) {
    int last;
    tc_lock(db);
    last = --db->refs == 0;
    tc_unlock(db);
    if (last) free_db(db);
}

void tocsin_close_begin(tocsin_db *db) {
    if (db && !db->is_tx) atomic_store(&db->closing, 1);
}

int tocsin_close(tocsin_db *db) {
    tocsin_db *tx;
    tc_waitrec *rec;
    struct tc_wake *wake;
    int last;
    if (!db) return TOCSIN_OK;
    tc_clear(db);
    if (db->is_tx)
        return tc_err(db, TOCSIN_INVALID, "a transaction handle ends with tocsin_tx_commit or tocsin_tx_rollback");
    /* inherited across fork(): its connection, locks and mutex are the parent's,
     * and closing them here would act on the parent's file state */
    if (db->owns_conn && db->generation != tc_fork_generation()) return TOCSIN_OK;
    /* A call of another thread waiting for a lock holds the mutex: this ends
     * its wait (busy_cb, busy_wait), and it fails with TOCSIN_CLOSED. */
    tocsin_close_begin(db);
    /* Every queue, result or lock wait of another thread is poked and ends
     * with TOCSIN_CLOSED; each holds a reference, so the handle is freed by
     * whoever lets go of it last. */
    tc_lock(db);
    db->closed = 1;
    for (rec = db->waits; rec; rec = rec->next) tocsin_sub_poke(rec->sub);
    wake = db->wake;
    db->wake = NULL;
    /* a host's connection is left with none of ours, waits or not */
    if (db->owns_conn) tc_stmt_flush(db);
    else tc_stmt_flush_host(db);
    tc_unlock(db);
    /* a wait on the handle's own subscription ends before this returns; it
     * takes the mutex between sleeps, so this must not hold it */
    tc_wake_free(wake);
    tc_lock(db);
    while ((tx = db->idle) != NULL) {
        db->idle = tx->idle;
        free_db(tx);
    }
    last = --db->refs == 0;
    tc_unlock(db);
    /* live transaction handles keep the handle until they end */
    if (last) free_db(db);
    return TOCSIN_OK;
}

sqlite3 *tocsin_sqlite(tocsin_db *db) { return db ? db->conn : NULL; }

int tocsin_sqlite_enter(tocsin_db *db) {
    if (!db) return tc_err(NULL, TOCSIN_INVALID, "db must not be NULL");
    tc_clear(db); /* a statement that own_auth refuses sets the thread's error */
    if (tc_inherited(db)) return TC_ERRCODE;
    tc_lock(db);
    if (db->closed) {
        tc_unlock(db);
        return tc_err(db, TOCSIN_CLOSED, "the database handle was closed");
    }
    tc_thread.user_sql++;
    return TOCSIN_OK;
}

void tocsin_sqlite_leave(tocsin_db *db) {
    if (!db) return;
    if (tc_thread.user_sql > 0) tc_thread.user_sql--;
    tc_unlock(db);
}

/*
 * The name under which another connection reaches db's main database, or NULL
 * (TOCSIN_INVALID set, led by `what`) when none can: an in-memory or temporary
 * database (no name), or a memdb image (sqlite3_deserialize, vfs=memdb) whose
 * name does not begin with '/', which SQLite shares with no other connection --
 * another open of that name would make a new, empty database.
 */
const char *tc_shared_path(tocsin_db *db, const char *what) {
    const char *path = sqlite3_db_filename(db->conn, "main");
    sqlite3_vfs *vfs = NULL;
    if (path && *path &&
        !(sqlite3_file_control(db->conn, "main", SQLITE_FCNTL_VFS_POINTER, &vfs) == SQLITE_OK && vfs &&
          vfs->zName && strcmp(vfs->zName, "memdb") == 0 && path[0] != '/'))
        return path;
    tc_err(db, TOCSIN_INVALID,
           "%s; this handle's database is in memory or temporary (or a memdb image no other connection "
           "shares: deserialized, or named without a leading '/'), which no other connection can open",
           what);
    return NULL;
}

/*
 * Opens another connection to the main file of `from`, as `from` reaches it: on
 * its VFS and with the URI parameters it was opened with (nolock=1,
 * immutable=1, mode=ro, a VFS's own keys), which sqlite3_db_filename keeps
 * after the path. Left out: vfs (given apart), cache (a connection of tocsin's
 * shares no cache) and a mode other than ro (`flags` decide it). NULL *out
 * only when out of memory; else close it, opened or not.
 */
int tc_open_sibling(sqlite3 *from, sqlite3 **out, int flags) {
    const char *path = sqlite3_db_filename(from, "main"), *k, *v;
    sqlite3_vfs *vfs = NULL;
    sqlite3_str *u = NULL;
    char *uri = NULL;
    int i, rc, n = 0;
    *out = NULL;
    if (sqlite3_file_control(from, "main", SQLITE_FCNTL_VFS_POINTER, &vfs) != SQLITE_OK) vfs = NULL;
    for (i = 0; path && (k = sqlite3_uri_key(path, i)) != NULL; i++) {
        v = sqlite3_uri_parameter(path, k);
        if (!sqlite3_stricmp(k, "vfs") || !sqlite3_stricmp(k, "cache") ||
            (!sqlite3_stricmp(k, "mode") && (!v || sqlite3_stricmp(v, "ro"))))
            continue;
        if (!u) {
            u = sqlite3_str_new(NULL);
            uri_file(u, path);
        }
        sqlite3_str_appendchar(u, 1, n++ ? '&' : '?');
        uri_escape(u, k);
        sqlite3_str_appendchar(u, 1, '=');
        uri_escape(u, v ? v : "");
    }
    if (u && !(uri = sqlite3_str_finish(u))) return SQLITE_NOMEM;
    rc = sqlite3_open_v2(uri ? uri : path, out, flags | (uri ? SQLITE_OPEN_URI : 0), vfs ? vfs->zName : NULL);
    sqlite3_free(uri);
    return rc;
}

/* A handle of its own on db's file, with db's clock, limits and busy timeout.
 * Journal mode and schema are left as they are. */
int tc_open_private(tocsin_db *db, tocsin_db **out, int read_only) {
    const char *path;
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    sqlite3 *conn = NULL;
    int rc;
    *out = NULL;
    if (tc_inherited(db)) return TC_ERRCODE;
    if (!(path = tc_shared_path(db, "listeners and stream subscriptions need a database file"))) return TC_ERRCODE;
    /* db's VFS (its locks are the ones db's connection takes) and URI parameters */
    rc = tc_open_sibling(db->conn, &conn,
                         (read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE) | SQLITE_OPEN_NOMUTEX);
    if (rc != SQLITE_OK) {
        tc_err(db, TOCSIN_ERROR, "open a private connection to %s: %s", path,
               conn ? sqlite3_errmsg(conn) : "out of memory");
        sqlite3_close(conn);
        return TC_ERRCODE;
    }
    sqlite3_extended_result_codes(conn, 1);
    o.busy_timeout_ms = db->busy_timeout_ms;
    o.max_payload_bytes = db->max_payload;
    o.read_only = read_only;
    o.clock = db->clock;
    o.clock_ctx = db->clock_ctx;
    if ((rc = tocsin_wrap(out, conn, &o)) != TOCSIN_OK) {
        TC_KEEP_ERROR(tocsin_close(*out));
        *out = NULL;
        sqlite3_close(conn);
        return rc;
    }
    (*out)->owns_conn = 1;
    tc_own_conn_setup(*out);
    if (!read_only && (rc = tc_exec(*out, "PRAGMA foreign_keys=ON", "set pragmas")) != TOCSIN_OK) {
        TC_KEEP_ERROR(tocsin_close(*out));
        *out = NULL;
        return rc;
    }
    return TOCSIN_OK;
}

/* ---- statements ---------------------------------------------------------- */

sqlite3_stmt *tc_stmt_rc(tocsin_db *db, const char *sql, int *out_rc) {
    size_t h = stmt_slot(sql), i;
    *out_rc = SQLITE_OK;
    for (i = 0; i < TC_STMT_SLOTS; i++) {
        size_t k = (h + i) % TC_STMT_SLOTS;
        if (db->stmts[k].sql == sql) {
            sqlite3_reset(db->stmts[k].stmt);
            sqlite3_clear_bindings(db->stmts[k].stmt);
            return db->stmts[k].stmt;
        }
        if (!db->stmts[k].sql) {
            sqlite3_stmt *st = NULL;
            if ((*out_rc = tc_prepare(db, sql, SQLITE_PREPARE_PERSISTENT, &st)) != SQLITE_OK) return NULL;
            db->stmts[k].sql = sql;
            db->stmts[k].stmt = st;
            return st;
        }
    }
    /* The cache is full: a programming error (raise TC_STMT_SLOTS). */
    *out_rc = SQLITE_INTERNAL;
    tc_err(db, TOCSIN_ERROR, "statement cache full");
    return NULL;
}

sqlite3_stmt *tc_stmt(tocsin_db *db, const char *sql) {
    int rc;
    sqlite3_stmt *st = tc_stmt_rc(db, sql, &rc);
    if (!st && rc != SQLITE_INTERNAL) tc_sqlerr(db, rc, "prepare");
    return st;
}

int tc_step_done(tocsin_db *db, sqlite3_stmt *st, const char *what) {
    int rc;
    while ((rc = tc_step(db, st)) == SQLITE_ROW) {
    }
    if (rc != SQLITE_DONE) {
        rc = tc_sqlerr(db, rc, what);
        sqlite3_reset(st);
        return rc;
    }
    sqlite3_reset(st);
    return TOCSIN_OK;
}

void tc_cut_utf8(char *s, size_t n) {
    if (strlen(s) <= n) return;
    while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80) n--;
    s[n] = 0;
}

int tc_no_id_left(tocsin_db *db, int rc, const char *what) {
    /* the next id, max + 1 past INT64_MAX, is a real: the INTEGER PRIMARY KEY
     * refuses it as a datatype mismatch */
    if (rc != TOCSIN_INVALID || (tc_thread.sqlite_rc & 0xff) != SQLITE_MISMATCH) return rc;
    return tc_err(db, TOCSIN_FULL, "%s: no id is left: ids end at 9223372036854775807", what);
}

int tc_trigger_dropped(tocsin_db *db, const char *what, const char *table) {
    return tc_err(db, TOCSIN_CORRUPT,
                  "%s: a statement on %s changed fewer rows than it matched: a trigger on it "
                  "(RAISE(IGNORE)) dropped them; tocsin tables must not carry triggers that "
                  "change their rows",
                  what, table);
}

int tc_one_row(tocsin_db *db, int rc, const char *what, const char *table) {
    if (rc == TOCSIN_OK && sqlite3_changes(db->conn) != 1) return tc_trigger_dropped(db, what, table);
    return rc;
}

int tc_exec(tocsin_db *db, const char *sql, const char *what) {
    char *msg = NULL;
    int rc = sqlite3_exec(db->conn, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        int prim = rc & 0xff;
        if (prim == SQLITE_AUTH && tc_thread.denied) { /* own_auth's refusal, with its reason */
            sqlite3_free(msg);
            tc_err(db, TOCSIN_INVALID, "%s: %s", what, tc_thread.msg);
            tc_thread.sqlite_rc = tc_xcode(db, rc);
            return TOCSIN_INVALID;
        }
        if (prim == SQLITE_BUSY || prim == SQLITE_LOCKED || prim == SQLITE_NOTADB) {
            sqlite3_free(msg);
            return tc_sqlerr(db, rc, what);
        }
        tc_err(db, tocsin_code_of_sqlite(rc), "%s: %s", what, msg ? msg : sqlite3_errstr(rc));
        tc_thread.sqlite_rc = tc_xcode(db, rc);
        sqlite3_free(msg);
        return tc_thread.code;
    }
    return TOCSIN_OK;
}

char *tc_strdup(const char *s) {
    size_t n;
    char *p;
    if (!s) return NULL;
    n = strlen(s);
    p = sqlite3_malloc64(n + 1);
    if (p) memcpy(p, s, n + 1);
    return p;
}

char *tc_strndup(const char *s, size_t n) {
    char *p = sqlite3_malloc64(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

char *tc_col_text(sqlite3_stmt *st, int i) {
    if (sqlite3_column_type(st, i) == SQLITE_NULL) return NULL;
    return tc_strdup((const char *)sqlite3_column_text(st, i));
}

/* ---- atomic operations --------------------------------------------------- */

/*
 * BEGIN IMMEDIATE with a bounded retry: the connection's busy handler may be
 * short or absent (a host connection in the extension), so we wait here too,
 * backing off up to the handle's busy timeout before reporting TOCSIN_BUSY.
 */
static const char SQL_BEGIN_IMMEDIATE[] = "BEGIN IMMEDIATE";
static const char SQL_BEGIN[] = "BEGIN";
static const char SQL_COMMIT[] = "COMMIT";
static const char SQL_ROLLBACK[] = "ROLLBACK";
static const char SQL_SAVEPOINT[] = "SAVEPOINT tocsin_op";
static const char SQL_RELEASE[] = "RELEASE tocsin_op";
static const char SQL_ROLLBACK_TO[] = "ROLLBACK TO tocsin_op";

/* Runs one cached transaction-control statement; returns SQLite's code. */
static int run_ctl(tocsin_db *db, const char *sql) {
    sqlite3_stmt *st;
    int rc, ctl = tc_thread.ctl;
    tc_thread.ctl = 1; /* own_auth: the core's own (prepared, or re-prepared in the step) */
    st = tc_stmt(db, sql);
    rc = st ? tc_step(db, st) : SQLITE_ERROR;
    if (st) sqlite3_reset(st);
    tc_thread.ctl = ctl;
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/*
 * BEGIN IMMEDIATE with a bounded retry: the connection's busy handler may be
 * short or absent (a host connection in the extension), so we wait here too,
 * backing off up to the handle's busy timeout before reporting TOCSIN_BUSY.
 */
static int begin_immediate(tocsin_db *db) {
    int rc;
    /* tc_step waits on a host's connection; SQLite's busy handler on ours,
     * except where it declines (it may return BUSY at once): wait here too. */
    while ((rc = run_ctl(db, SQL_BEGIN_IMMEDIATE)) != SQLITE_OK) {
        if (!db->owns_conn || !busy_retryable(db, NULL, rc) || !busy_wait(db, 0))
            return tc_sqlerr(db, rc, "begin write transaction");
    }
    tc_wake_write_begin(db);
    return TOCSIN_OK;
}

static int op_finish(tocsin_db *db, tc_op *op, int rc);
static int orphan_end(tocsin_db *db);

void tc_lock(tocsin_db *db) { pthread_mutex_lock(&db->mutex); }
void tc_unlock(tocsin_db *db) {
    if (db->wk_writer && sqlite3_get_autocommit(db->conn)) tc_wake_write_end(db);
    pthread_mutex_unlock(&db->mutex);
}

/*
 * A host's transaction that has not touched the file yet (BEGIN, then a tocsin
 * call first): the call's first statement may read (the schema check of a
 * connection's first call, a claim, a lock or rate-limit check), and SQLite
 * lets a transaction that holds a read snapshot wait for nobody's write lock,
 * so the call failed with SQLITE_BUSY at once where the host's own INSERT
 * would have waited. A write that changes nothing takes the lock first, under
 * the waits of any statement of ours. Before tocsin's tables exist (the first
 * call ever on the file) there is nothing to take it with, and the install
 * reads first as before.
 */
static const char SQL_TAKE_WRITE_LOCK[] = "DELETE FROM main._tocsin_meta WHERE 0";

static int host_tx_write_lock(tocsin_db *db) {
    int rc;
    sqlite3_stmt *st;
    if (db->owns_conn || sqlite3_get_autocommit(db->conn) ||
        sqlite3_txn_state(db->conn, "main") != SQLITE_TXN_NONE)
        return TOCSIN_OK;
    if (!(st = tc_stmt_rc(db, SQL_TAKE_WRITE_LOCK, &rc))) return TOCSIN_OK; /* no tables yet */
    rc = tc_step(db, st);
    sqlite3_reset(st);
    /* any other failure (a read-only file) is the call's own to report */
    return (rc & 0xff) == SQLITE_BUSY ? tc_sqlerr(db, rc, "take the write lock") : TOCSIN_OK;
}

int tc_op_begin(tocsin_db *db, tc_op *op, int write) {
    int rc;
    op->mode = 0;
    op->write = write;
    op->locked = 0;
    if (tc_inherited(db)) return TC_ERRCODE;
    if (write && write != TC_OP_READ_ONE && db->read_only)
        return tc_err(db, TOCSIN_READONLY, "the database handle is read-only");
    /* a call that must not wait (tocsin_worker_poll) does not wait for another
     * thread's call on the handle either: that call may itself wait for a lock
     * whose holder needs this thread */
    if (tc_thread.nowait) {
        if (pthread_mutex_trylock(&db->mutex) != 0)
            return tc_err(db, TOCSIN_BUSY, "the handle is busy with another thread's call (this call does not wait)");
    } else {
        tc_lock(db);
    }
    if (db->closed) {
        tc_unlock(db);
        return tc_err(db, TOCSIN_CLOSED, "the database handle was closed");
    }
    if ((db->orphan_tx && (rc = orphan_end(db)) != TOCSIN_OK) ||
        (write && write != TC_OP_READ_ONE && (rc = host_tx_write_lock(db)) != TOCSIN_OK) ||
        (!db->schema_ok && (rc = tc_ensure_schema(db)) != TOCSIN_OK) ||
        (rc = tc_op_open(db, op, write)) != TOCSIN_OK) {
        tc_unlock(db);
        return rc;
    }
    op->locked = 1;
    return TOCSIN_OK;
}

/*
 * What a write of tocsin's needs of a host's connection, whose settings are the
 * application's (tocsin_open sets up its own connections):
 *  - a rollback journal or WAL: with journal_mode=OFF SQLite cannot roll back a
 *    savepoint, nor a transaction whose pages reached the file, so a call failing
 *    after its first write (a trigger that dropped a row, a full disk, a result
 *    too long to return) would leave that write behind: a job taken out of the
 *    live jobs and never put into the dead letters, a lease nobody saw;
 *  - its triggers: <table>_top keeps a deleted top id from being handed out
 *    again, which SQLITE_DBCONFIG_ENABLE_TRIGGER off skips (an acked job's id,
 *    and so its fencing tokens, would come back);
 *  - its CHECK constraints: the job id bound keeps fencing tokens within 63
 *    bits (and ends the ids with TOCSIN_FULL), which PRAGMA
 *    ignore_check_constraints skips.
 * A write is refused, before anything is written, naming the setting.
 */
static const char SQL_JOURNAL_MODE[] = "PRAGMA main.journal_mode";
static const char SQL_IGNORE_CHECKS[] = "PRAGMA ignore_check_constraints";

/* The setting a PRAGMA reads, "" when the host's authorizer denies or ignores
 * PRAGMAs (a sandbox's choice: the setting is then left unchecked, as before). */
static int pragma_text(tocsin_db *db, const char *sql, char *out, size_t cap) {
    int rc;
    sqlite3_stmt *st = tc_stmt_rc(db, sql, &rc);
    out[0] = 0;
    if ((rc & 0xff) == SQLITE_AUTH) {
        tc_thread.prepare_failed = 0; /* not a limit's refusal (tc_sqlerr) */
        return TOCSIN_OK;
    }
    if (!st) return tc_sqlerr(db, rc, "read the connection's settings");
    /* cached: the journal mode is read when it runs, and a flag PRAGMA's change
     * expires every statement, so a step always sees the current setting */
    rc = tc_step(db, st);
    if (rc == SQLITE_ROW && sqlite3_column_text(st, 0))
        snprintf(out, cap, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_reset(st); /* not left running: a later call's check of running PRAGMAs */
    if ((rc & 0xff) == SQLITE_AUTH) { /* an authorizer set since: re-prepared, and denied */
        tc_thread.prepare_failed = 0;
        return TOCSIN_OK;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return tc_sqlerr(db, rc, "read the connection's settings");
    return TOCSIN_OK;
}

static int host_can_write(tocsin_db *db) {
    char v[32];
    int on = 1, rc;
    if (sqlite3_db_config(db->conn, SQLITE_DBCONFIG_ENABLE_TRIGGER, -1, &on) == SQLITE_OK && !on)
        return tc_err(db, TOCSIN_ERROR,
                      "triggers are disabled on this connection (SQLITE_DBCONFIG_ENABLE_TRIGGER "
                      "off), and tocsin's tables need theirs: they keep the id of a deleted job, "
                      "event or notification from being handed out again. Nothing was written; "
                      "enable triggers to write");
    if ((rc = pragma_text(db, SQL_JOURNAL_MODE, v, sizeof v)) != TOCSIN_OK) return rc;
    if (sqlite3_stricmp(v, "off") == 0)
        return tc_err(db, TOCSIN_ERROR,
                      "PRAGMA journal_mode is OFF on this connection: SQLite then cannot roll "
                      "back, so a call failing after its first write would leave half of it "
                      "written. Nothing was written; use journal_mode DELETE, TRUNCATE, PERSIST, "
                      "MEMORY or WAL to write");
    if ((rc = pragma_text(db, SQL_IGNORE_CHECKS, v, sizeof v)) != TOCSIN_OK) return rc;
    if (v[0] && strcmp(v, "0") != 0)
        return tc_err(db, TOCSIN_ERROR,
                      "PRAGMA ignore_check_constraints is on for this connection, and tocsin's "
                      "tables need their CHECK constraints (the job id bound keeps fencing tokens "
                      "within 63 bits). Nothing was written; turn it off to write");
    return TOCSIN_OK;
}

/*
 * Rolls back the transaction of ours that an out-of-memory left open (op_finish)
 * before anything else runs on the connection's next operation -- unless the
 * host wrote in it since (its total changes moved), which a ROLLBACK would undo
 * too: that call is refused, asking the application to end it.
 */
static int orphan_end(tocsin_db *db) {
    if (sqlite3_get_autocommit(db->conn)) { /* ended by the host meanwhile */
        db->orphan_tx = 0;
        return TOCSIN_OK;
    }
    if (sqlite3_total_changes64(db->conn) != db->orphan_changes)
        return tc_err(db, TOCSIN_ERROR,
                      "an earlier tocsin call on this connection ran out of memory inside its own "
                      "transaction, which SQLite then let nobody end, and the connection has "
                      "written in it since: end it (ROLLBACK drops that call's half and what was "
                      "written since) before the next tocsin call");
    if (run_ctl(db, SQL_ROLLBACK) != SQLITE_OK) return tc_sqlerr(db, SQLITE_ERROR, "roll back");
    db->orphan_tx = 0;
    return TOCSIN_OK;
}

int tc_op_open(tocsin_db *db, tc_op *op, int write) {
    int rc;
    op->mode = 0;
    op->write = write;
    op->locked = 0;
    if (db->orphan_tx && (rc = orphan_end(db)) != TOCSIN_OK) return rc;
    if (write && write != TC_OP_READ_ONE && !db->owns_conn && (rc = host_can_write(db)) != TOCSIN_OK)
        return rc;
    if (write == TC_OP_ONE) {
        op->mode = sqlite3_get_autocommit(db->conn) ? 3 : 0;
        return TOCSIN_OK;
    }
    if (write == TC_OP_READ_ONE) { /* no BEGIN/COMMIT around it: nothing to end */
        op->write = 0;
        return TOCSIN_OK;
    }
    if (sqlite3_get_autocommit(db->conn)) {
        if (write) {
            rc = begin_immediate(db);
        } else {
            rc = run_ctl(db, SQL_BEGIN);
            rc = rc == SQLITE_OK ? TOCSIN_OK : tc_sqlerr(db, rc, "begin read transaction");
        }
        if (rc == TOCSIN_OK) op->mode = 1;
        return rc;
    }
    rc = run_ctl(db, SQL_SAVEPOINT);
    if (rc != SQLITE_OK) return tc_sqlerr(db, rc, "savepoint");
    op->mode = 2;
    return TOCSIN_OK;
}

int tc_op_end(tocsin_db *db, tc_op *op, int rc) {
    int locked = op->locked;
    op->locked = 0;
    rc = op_finish(db, op, rc);
    if (locked) tc_unlock(db);
    return rc;
}

static int op_finish(tocsin_db *db, tc_op *op, int rc) {
    int mode = op->mode, src;
    op->mode = 0;
    if (mode == 0) return rc;
    if (mode == 3) { /* the statement committed itself, or failed and changed nothing */
        if (rc == TOCSIN_OK) tc_wake_local(db);
        return rc;
    }
    if (rc == TOCSIN_OK) {
        src = run_ctl(db, mode == 1 ? SQL_COMMIT : SQL_RELEASE);
        if (src == SQLITE_OK) {
            /* Only a real commit is news; a released savepoint waits for tocsin_commit. */
            if (mode == 1 && op->write) tc_wake_local(db);
            return TOCSIN_OK;
        }
        rc = tc_sqlerr(db, src, "commit");
    }
    /* Keep the first error's message: rolling back must not overwrite it. */
    if (mode == 1) {
        if (!sqlite3_get_autocommit(db->conn)) run_ctl(db, SQL_ROLLBACK);
        /* Out of memory inside a host's statement (a prepare of ours that failed):
         * SQLite then refuses every statement until that statement ends, our
         * ROLLBACK too, and leaves our transaction open on the host's connection.
         * The next operation ends it (orphan_end). */
        if (!sqlite3_get_autocommit(db->conn) && !db->owns_conn) {
            db->orphan_tx = 1;
            db->orphan_changes = sqlite3_total_changes64(db->conn);
        }
    } else {
        run_ctl(db, SQL_ROLLBACK_TO);
        run_ctl(db, SQL_RELEASE);
    }
    return rc;
}

int tc_ensure_schema(tocsin_db *db) {
    int v, rc, in_tx = !sqlite3_get_autocommit(db->conn);
    rc = tc_schema_install(db, &v);
    /* A schema created inside the caller's transaction may still be rolled
     * back: check again next time until it was created outside one. */
    if (rc == TOCSIN_OK && !in_tx) db->schema_ok = 1;
    return rc;
}

int tocsin_bootstrap(tocsin_db *db, int *out_version) {
    int v = 0, rc;
    if (!db) return tc_err(NULL, TOCSIN_INVALID, "db must not be NULL");
    tc_clear(db);
    if (tc_inherited(db)) return TC_ERRCODE;
    tc_lock(db);
    rc = db->orphan_tx ? orphan_end(db) : TOCSIN_OK;
    if (rc == TOCSIN_OK) rc = tc_schema_install(db, &v);
    tc_unlock(db);
    if (out_version) *out_version = v;
    return rc;
}

int tc_sweep(tocsin_db *db, int64_t *out_n, const char *sql, const char *what) {
    tc_op op;
    sqlite3_stmt *st;
    int rc;
    if (!db) return TOCSIN_INVALID;
    tc_clear(db);
    if (!out_n) return tc_err(db, TOCSIN_INVALID, "out_n must not be NULL");
    *out_n = 0;
    if ((rc = tc_op_begin(db, &op, 1)) != TOCSIN_OK) return rc;
    if (!(st = tc_stmt(db, sql))) return tc_op_end(db, &op, TC_ERRCODE);
    sqlite3_bind_int64(st, 1, tocsin_now(db));
    rc = tc_step_done(db, st, what);
    if (rc == TOCSIN_OK) *out_n = sqlite3_changes(db->conn);
    return tc_op_end(db, &op, rc);
}

/* ---- transactions -------------------------------------------------------- */

int tocsin_begin(tocsin_db *db) {
    int rc = TOCSIN_OK;
    if (!db) return tc_err(NULL, TOCSIN_INVALID, "db must not be NULL");
    tc_clear(db);
    if (tc_inherited(db)) return TC_ERRCODE;
    if (db->read_only) return tc_err(db, TOCSIN_READONLY, "the database handle is read-only");
    tc_lock(db);
    if (!sqlite3_get_autocommit(db->conn))
        rc = tc_err(db, TOCSIN_INVALID, "a transaction is already open on this handle");
    if (rc == TOCSIN_OK && !db->schema_ok) rc = tc_ensure_schema(db);
    if (rc == TOCSIN_OK) rc = begin_immediate(db);
    tc_unlock(db);
    return rc;
}

/* The handle's own transaction ends; transaction handles end with tocsin_tx_*. */
static int own_end(tocsin_db *db, const char *sql, const char *what) {
    int rc = TOCSIN_OK, src;
    if (!db) return tc_err(NULL, TOCSIN_INVALID, "db must not be NULL");
    tc_clear(db);
    if (db->is_tx)
        return tc_err(db, TOCSIN_INVALID, "a transaction handle ends with tocsin_tx_commit or tocsin_tx_rollback");
    if (tc_inherited(db)) return TC_ERRCODE;
    tc_lock(db);
    if (sqlite3_get_autocommit(db->conn))
        rc = tc_err(db, TOCSIN_INVALID, "no transaction is open on this handle");
    else if ((src = run_ctl(db, sql)) != SQLITE_OK)
        rc = tc_sqlerr(db, src, what);
    else if (sql == SQL_COMMIT)
        tc_wake_local(db);
    tc_unlock(db);
    return rc;
}

int tocsin_commit(tocsin_db *db) { return own_end(db, SQL_COMMIT, "commit"); }
int tocsin_rollback(tocsin_db *db) { return own_end(db, SQL_ROLLBACK, "rollback"); }

int tocsin_in_transaction(tocsin_db *db) {
    int in;
    if (!db) return 0;
    tc_lock(db); /* not another thread's operation in progress */
    in = !sqlite3_get_autocommit(db->conn);
    tc_unlock(db);
    return in;
}

int tocsin_exec(tocsin_db *db, const char *sql) {
    int rc;
    if (!db) return tc_err(NULL, TOCSIN_INVALID, "db must not be NULL");
    tc_clear(db);
    if (!sql) return tc_err(db, TOCSIN_INVALID, "sql must not be NULL");
    if (tc_inherited(db)) return TC_ERRCODE;
    tc_lock(db);
    {
        /* On a host's connection (tocsin_wrap: no own_auth) a failed script
         * leaves the transaction state as it found it: one the script opened
         * itself (BEGIN; ...; a failing statement) is rolled back, not left
         * holding the write lock with every later call joining it. */
        int was_auto = sqlite3_get_autocommit(db->conn);
        tc_thread.user_sql++;
        rc = tc_exec(db, sql, "exec");
        tc_thread.user_sql--;
        if (rc != TOCSIN_OK && was_auto && !sqlite3_get_autocommit(db->conn)) run_ctl(db, SQL_ROLLBACK);
    }
    tc_unlock(db);
    return rc;
}

/* ---- transaction handles ------------------------------------------------------ */

/* A connection of db's file for a transaction handle, set up like db's own. */
static int tx_new(tocsin_db *db, tocsin_db **out) {
    tocsin_db *tx;
    int rc;
    *out = NULL;
    if (!tc_shared_path(db, "transaction handles need a database file")) return TC_ERRCODE;
    if (!(tx = alloc_db())) return tc_err(db, TOCSIN_NOMEM, "transaction: out of memory");
    rc = tc_open_sibling(db->conn, &tx->conn, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX);
    tx->owns_conn = 1;
    if (rc != SQLITE_OK) {
        rc = tx->conn ? tc_sqlerr(tx, rc, "open a transaction's connection")
                      : tc_err(db, TOCSIN_NOMEM, "transaction: out of memory");
        free_db(tx);
        return rc;
    }
    sqlite3_extended_result_codes(tx->conn, 1);
    tx->busy_timeout_ms = db->busy_timeout_ms; /* tocsin_tx_begin sets it again at each reuse */
    tc_own_conn_setup(tx);
    if ((rc = tc_exec(tx, "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON", "set pragmas")) != TOCSIN_OK) {
        free_db(tx);
        return rc;
    }
    tx->is_tx = 1;
    *out = tx;
    return TOCSIN_OK;
}

static void tx_release(tocsin_db *tx);

int tocsin_tx_begin(tocsin_db *db, tocsin_db **out_tx) {
    tocsin_db *tx = NULL;
    int rc;
    if (!out_tx) return tc_err(NULL, TOCSIN_INVALID, "out_tx must not be NULL");
    *out_tx = NULL;
    if (!db) return tc_err(NULL, TOCSIN_INVALID, "db must not be NULL");
    tc_clear(db);
    if (db->is_tx) return tc_err(db, TOCSIN_INVALID, "transactions do not nest: db is a transaction handle");
    if (tc_inherited(db)) return TC_ERRCODE;
    if (db->read_only) return tc_err(db, TOCSIN_READONLY, "the database handle is read-only");
    tc_lock(db);
    rc = db->closed ? tc_err(db, TOCSIN_CLOSED, "the database handle was closed") : TOCSIN_OK;
    if (rc == TOCSIN_OK && !db->schema_ok) rc = tc_ensure_schema(db);
    if (rc == TOCSIN_OK && (tx = db->idle) != NULL) db->idle = tx->idle;
    else if (rc == TOCSIN_OK) rc = tx_new(db, &tx);
    if (rc == TOCSIN_OK) {
        db->refs++;
        tx->idle = NULL;
        tx->parent = db;
        /* the database handle's settings as they are now */
        tx->busy_timeout_ms = db->busy_timeout_ms;
        tx->max_payload = db->max_payload;
        tx->clock = db->clock;
        tx->clock_ctx = db->clock_ctx;
        tx->sql_clock = db->sql_clock;
        tx->schema_ok = 1;
        tx->has_identity = db->has_identity;
        tx->dev = db->dev;
        tx->ino = db->ino;
    }
    tc_unlock(db);
    if (rc != TOCSIN_OK) return rc;
    if ((rc = begin_immediate(tx)) != TOCSIN_OK) {
        tx_release(tx);
        return rc;
    }
    tx->tx_open = 1;
    atomic_fetch_add(&db->tx_writers, 1); /* tx_release takes it back */
    *out_tx = tx;
    return TOCSIN_OK;
}

/* Hands a finished transaction handle back to its database handle. */
static void tx_release(tocsin_db *tx) {
    tocsin_db *db = tx->parent;
    int last;
    if (!sqlite3_get_autocommit(tx->conn)) run_ctl(tx, SQL_ROLLBACK);
    tc_wake_write_end(tx);
    if (tx->tx_open) {
        tx->tx_open = 0;
        atomic_fetch_sub(&db->tx_writers, 1);
    }
    tc_wake_release(tx);
    tc_lock(db);
    if (db->closed || tx->conn_changed) { /* (changed: the next transaction gets a fresh one) */
        free_db(tx);
    } else {
        tx->idle = db->idle;
        db->idle = tx;
    }
    last = --db->refs == 0;
    tc_unlock(db);
    if (last) free_db(db);
}

static int tx_end(tocsin_db *tx, int commit) {
    int rc = TOCSIN_OK, src;
    if (!tx) return tc_err(NULL, TOCSIN_INVALID, "tx must not be NULL");
    tc_clear(tx);
    if (!tx->is_tx)
        return tc_err(tx, TOCSIN_INVALID, "not a transaction handle (use tocsin_commit / tocsin_rollback)");
    if (tc_inherited(tx)) return TC_ERRCODE; /* the parent's: nothing of it is released here */
    tc_lock(tx);
    if (commit) {
        if ((src = run_ctl(tx, SQL_COMMIT)) != SQLITE_OK) rc = tc_sqlerr(tx, src, "commit");
        else tc_wake_local(tx);
    }
    tc_unlock(tx);
    tx_release(tx);
    return rc;
}

int tocsin_tx_commit(tocsin_db *tx) { return tx_end(tx, 1); }
int tocsin_tx_rollback(tocsin_db *tx) { return tx_end(tx, 0); }

/* ---- time arithmetic ------------------------------------------------------- */

int64_t tc_time_add(int64_t t, int64_t d) {
    if (t < 0) t = 0;
    if (d < 0) d = 0;
    if (t >= TOCSIN_MAX_TIME_MS || d >= TOCSIN_MAX_TIME_MS - t) return TOCSIN_MAX_TIME_MS;
    return t + d;
}

int tc_check_ms(tocsin_db *db, const char *what, int64_t v, int64_t lo) {
    if (v < lo || v > TOCSIN_MAX_TIME_MS)
        return tc_err(db, TOCSIN_INVALID, "%s must be between %lld and %lld ms, not %lld", what,
                      (long long)lo, (long long)TOCSIN_MAX_TIME_MS, (long long)v);
    return TOCSIN_OK;
}

/* ---- validation ---------------------------------------------------------- */

/* The length of the strict UTF-8 sequence (no overlongs, no surrogates, at
 * most U+10FFFF) that begins at s, a lead byte of 0x80 or more; 0 if none
 * does. */
static unsigned utf8_seq(const unsigned char *s) {
    unsigned c = *s, n, cp, i;
    if ((c & 0xe0) == 0xc0) { n = 1; cp = c & 0x1f; }
    else if ((c & 0xf0) == 0xe0) { n = 2; cp = c & 0x0f; }
    else if ((c & 0xf8) == 0xf0) { n = 3; cp = c & 0x07; }
    else return 0;
    for (i = 1; i <= n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0; /* the NUL ends the text: never read past */
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n + 1;
}

unsigned tocsin_utf8_len(const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    if (!u || !*u) return 0;
    return *u < 0x80 ? 1 : utf8_seq(u);
}

/* Strict UTF-8; returns 0 if invalid. */
static int utf8_ok(const unsigned char *s) {
    while (*s) {
        unsigned n = *s < 0x80 ? 1 : utf8_seq(s);
        if (!n) return 0;
        s += n;
    }
    return 1;
}

int tocsin_json_valid(const char *text) {
    return text && utf8_ok((const unsigned char *)text) && tc_json_valid(text, strlen(text), NULL);
}

int tc_check_name(tocsin_db *db, const char *what, const char *name) {
    size_t n, i;
    if (!name) return tc_err(db, TOCSIN_INVALID, "%s must be a string, not NULL", what);
    n = strlen(name);
    if (n == 0) return tc_err(db, TOCSIN_INVALID, "%s must not be empty", what);
    if (n > TC_MAX_NAME)
        return tc_err(db, TOCSIN_INVALID, "%s is %zu bytes long; the limit is %d", what, n,
                      TC_MAX_NAME);
    for (i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
            return tc_err(db, TOCSIN_INVALID, "%s must not contain control characters", what);
    if (!utf8_ok((const unsigned char *)name))
        return tc_err(db, TOCSIN_INVALID, "%s is not valid UTF-8", what);
    return TOCSIN_OK;
}

int tocsin_check_name(tocsin_db *db, const char *what, const char *name) {
    tc_clear(db);
    return tc_check_name(db, what ? what : "name", name);
}

int tc_check_version(tocsin_db *db, const char *what, int version, int current, const char *init) {
    if (version < 1) return tc_err(db, TOCSIN_INVALID, "%s: version must be set (use %s)", what, init);
    if (version > current)
        return tc_err(db, TOCSIN_INVALID,
                      "%s: version %d is newer than this library's (%d): build against the tocsin.h "
                      "of the library you link (use %s)",
                      what, version, current, init);
    return TOCSIN_OK;
}

int tc_check_text(tocsin_db *db, const char *what, const char *text, size_t max_bytes) {
    size_t n;
    if (!text) return TOCSIN_OK;
    n = strlen(text);
    if (n > max_bytes)
        return tc_err(db, TOCSIN_TOOBIG, "%s is %zu bytes; the limit is %zu bytes", what, n,
                      max_bytes);
    if (!utf8_ok((const unsigned char *)text))
        return tc_err(db, TOCSIN_INVALID, "%s is not valid UTF-8", what);
    return TOCSIN_OK;
}

/* kind 0: any JSON value; 1: a JSON object */
static int check_json(tocsin_db *db, const char *what, const char *json, int kind) {
    size_t n;
    char top = 0;
    int valid;
    if (!json) return tc_err(db, TOCSIN_INVALID, "%s must be JSON text, not NULL", what);
    n = strlen(json);
    if ((int64_t)n > db->max_payload)
        return tc_err(db, TOCSIN_TOOBIG, "%s is %zu bytes; the limit is %lld bytes", what, n,
                      (long long)db->max_payload);
    if (!(valid = tc_json_valid(json, n, &top)) || !utf8_ok((const unsigned char *)json)) {
        char why[TC_JSON_DUP_CAP];
        why[0] = 0;
        if (!valid) switch (tc_json_refusal(json, n, why, sizeof why)) {
            case TC_JSON_DUP: return tc_err(db, TOCSIN_INVALID, "%s: %s", what, why);
            case TC_JSON_NOMEM: return tc_err(db, TOCSIN_NOMEM, "%s: out of memory checking its keys", what);
            default: break;
            }
        return tc_err(db, TOCSIN_INVALID, "%s is not valid JSON%s", what, why);
    }
    if (kind == 1 && top != '{') return tc_err(db, TOCSIN_INVALID, "%s must be a JSON object", what);
    return TOCSIN_OK;
}

int tc_check_payload(tocsin_db *db, const char *what, const char *json) {
    return check_json(db, what, json, 0);
}

int tc_check_meta(tocsin_db *db, const char *meta) {
    return meta ? check_json(db, "meta", meta, 1) : TOCSIN_OK;
}

/* ---- JSON building ------------------------------------------------------- */

void tc_buf_put(tc_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *p;
        while (cap < b->len + n + 1) cap *= 2;
        p = sqlite3_realloc64(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void tc_buf_puts(tc_buf *b, const char *s) { tc_buf_put(b, s, strlen(s)); }

void tc_buf_i64(tc_buf *b, int64_t v) {
    char t[32];
    int n = snprintf(t, sizeof t, "%lld", (long long)v);
    tc_buf_put(b, t, (size_t)n);
}

void tc_buf_jstr(tc_buf *b, const char *s) {
    static const char hex[] = "0123456789abcdef";
    const char *run;
    if (!s) {
        tc_buf_puts(b, "null");
        return;
    }
    tc_buf_put(b, "\"", 1);
    for (run = s; *s; s++) {
        unsigned char c = (unsigned char)*s;
        unsigned n;
        if (c >= 0x80) {
            /* a byte that begins no UTF-8 character (a row written around
             * tocsin): U+FFFD, so that the result stays UTF-8, as JSON must be */
            if ((n = utf8_seq((const unsigned char *)s)) != 0) {
                s += n - 1;
                continue;
            }
            tc_buf_put(b, run, (size_t)(s - run));
            run = s + 1;
            tc_buf_put(b, "\\ufffd", 6);
            continue;
        }
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        tc_buf_put(b, run, (size_t)(s - run));
        run = s + 1;
        switch (c) {
        case '"': tc_buf_put(b, "\\\"", 2); break;
        case '\\': tc_buf_put(b, "\\\\", 2); break;
        case '\n': tc_buf_put(b, "\\n", 2); break;
        case '\r': tc_buf_put(b, "\\r", 2); break;
        case '\t': tc_buf_put(b, "\\t", 2); break;
        default: {
            char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            tc_buf_put(b, u, 6);
        }
        }
    }
    tc_buf_put(b, run, (size_t)(s - run));
    tc_buf_put(b, "\"", 1);
}

/* A stored value tocsin wrote is valid JSON; one written into the tables around
 * tocsin that is not (plain SQL) goes in as a JSON string of its text, so the
 * result stays the valid JSON its subtype promises -- and UTF-8, as JSON must
 * be: a byte of such a text that begins no UTF-8 character becomes U+FFFD. */
void tc_buf_jraw(tc_buf *b, const char *json) {
    if (!json)
        tc_buf_puts(b, "null");
    else if (tocsin_json_valid(json))
        tc_buf_puts(b, json);
    else
        tc_buf_jstr(b, json);
}

void tc_buf_key(tc_buf *b, const char *key, int *first) {
    if (!*first) tc_buf_put(b, ",", 1);
    *first = 0;
    tc_buf_jstr(b, key);
    tc_buf_put(b, ":", 1);
}

char *tc_buf_take(tc_buf *b) {
    char *p;
    if (b->oom || !b->p) {
        if (!b->oom && !b->p) {
            p = sqlite3_malloc(1);
            if (p) *p = 0;
            return p;
        }
        sqlite3_free(b->p);
        memset(b, 0, sizeof *b);
        return NULL;
    }
    p = b->p;
    memset(b, 0, sizeof *b);
    return p;
}
