/* Private cross-file declarations of the tocsin core. Not installed. */
#ifndef TOCSIN_INTERNAL_H
#define TOCSIN_INTERNAL_H

#include "tocsin.h"

/*
 * Built as the loadable extension, the core calls SQLite through the host's
 * routine table (sqlite3ext.h); built as a library it links libsqlite3.
 * ext.c defines the routine pointer (INIT1); every file declares it (INIT3).
 */
#ifdef TOCSIN_EXTENSION
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT3
#else
#include <sqlite3.h>
#endif

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TC_MIN_SQLITE 3037000
#define TC_DEFAULT_BUSY_MS 5000
#define TC_DEFAULT_MAX_PAYLOAD TOCSIN_DEFAULT_MAX_PAYLOAD_BYTES
#define TC_MAX_NAME TOCSIN_MAX_NAME_BYTES
#define TC_STMT_SLOTS 256

/* The highest id ever handed out in a table of schema v2 (schema.c): its
 * max(id) or, once that row is gone, its sqlite_sequence row, as AUTOINCREMENT
 * counts. TC_NEXT_ID: the id of a new row, never one handed out before (a
 * rolled-back one aside). main.sqlite_sequence, named with its schema: a TEMP
 * table with AUTOINCREMENT gives the connection a temp.sqlite_sequence, which
 * an unqualified name would find first (and hand out a deleted top id again).
 * The top id is read as the last row, not max(id): the same value without the
 * aggregate's step and finalizer (~900 instructions of a single enqueue's 42k). */
#define TC_MAX_ID(table)                                                        \
    "max(coalesce((SELECT id FROM " table " ORDER BY id DESC LIMIT 1), 0),"     \
    " coalesce((SELECT seq FROM main.sqlite_sequence WHERE name = '" table "'), 0))"
#define TC_NEXT_ID(table) "(" TC_MAX_ID(table) " + 1)"

/* A queue, result or lock wait in progress on a handle (tc_db_wait): closing
 * the handle pokes it, and the handle lives until the wait has ended. */
typedef struct tc_waitrec {
    struct tocsin_sub *sub;
    struct tc_waitrec *next;
} tc_waitrec;

struct tocsin_db {
    /* Serialises the calls on the handle (held for each atomic operation;
     * recursive: operations nest). Never held while a wait sleeps. */
    pthread_mutex_t mutex;
    int is_tx;           /* a transaction handle (tocsin_tx_begin) */
    int generation;      /* tc_fork_generation() when made: another value means fork() since */
    tocsin_db *parent;   /* a transaction handle's database handle */
    tocsin_db *idle;     /* database: transaction handles to reuse; tx: next in that list */
    int conn_changed;    /* the application's SQL changed the connection's own state (own_auth) */
    int refs;            /* database: 1 for the user + 1 per live transaction handle */
    int closed;          /* database: tocsin_close() was called (refs > 0 keeps it) */
    _Atomic int closing; /* set by tocsin_close before it takes the mutex: lock waits end */
    tc_waitrec *waits;   /* database: the waits of other threads now sleeping on it (each holds a ref) */
    sqlite3 *conn;
    int owns_conn;
    int read_only;
    int busy_timeout_ms;
    int64_t max_payload;
    /* own connection: the id the next one-job INSERT takes, while the file's data
     * version is still id_hint_ver (tc_id_hint); 0: unknown */
    int64_t id_hint_next;
    unsigned id_hint_ver;
    int id_hinted; /* _tocsin_next_id() is registered on the connection */
    tocsin_clock_fn clock;
    void *clock_ctx;
    int schema_ok;    /* schema known to be present and current */
    int64_t sql_clock; /* the fixed time set by tocsin_clock() in SQL */
    int ext_refs;      /* extension: SQL functions still registered */
    int ext_depth;     /* extension: SQL function calls now running on the connection (ext.c) */
    void *ext_fns;     /* ext.c: what each registered SQL function carries */
    int ext_cache;     /* ext.c: the cache anchor is connected: statements outlive a call */
    int ext_anchor_retry; /* ext.c: the anchor's connect met a lock: a later call tries again */
    struct tc_wake *wake; /* watcher.c: file identity and the handle's own subscription */
    int has_identity;      /* (dev, ino) of the opened file are known */
    uint64_t dev, ino;
    uint64_t wk_writer;    /* wake.c: serial of the watcher told of this handle's open write, or 0 */
    int tx_open;            /* transaction handle: counted in its database's tx_writers */
    /* a host's connection: a BEGIN IMMEDIATE of ours that an out-of-memory left open
     * (op_finish), to roll back at the next operation; the connection's total
     * changes then, which tell whether the host wrote in it since */
    int orphan_tx;
    int64_t orphan_changes;
    _Atomic int tx_writers; /* database: its transaction handles now open (each holds the write lock) */
    /* a host's connection whose statements outlive a call (ext.c's cache): ours,
     * never stepped, prepared after the others; gone when the host finalized
     * statements it did not prepare (tc_stmt_check) */
    sqlite3_stmt *stmt_sentinel;
    /* prepared statements keyed by the address of their static SQL text */
    struct {
        const char *sql;
        sqlite3_stmt *stmt;
    } stmts[TC_STMT_SLOTS];
};

/* ---- errors (db.c) ----
 * One error channel: the calling thread's last failure (code, SQLite's code,
 * message), whatever handle failed -- a database, a subscription, a listener
 * or none (tocsin_wake_configure, tocsin_cron_parse). It also carries the
 * call's lock-wait budget, which belongs to the calling thread's call too.
 */
typedef struct tc_thread_state {
    int code;
    int sqlite_rc;
    int64_t call_start;  /* monotonic ms: when this call began (a host's busy handler waits count) */
    int64_t busy_until;  /* monotonic ms: end of this call's wait for locks; 0: not waiting yet */
    int64_t busy_waited; /* us this call spent waiting for locks */
    int nowait;          /* set around a call that must not wait for locks (tocsin_worker_poll) */
    /* set around a worker step: a lock wait stops as soon as this count (the worker
     * database's open transaction handles) is > 0, and sets `yielded` */
    _Atomic int *yield_to;
    int yielded;
    int64_t deadline_us; /* monotonic us: lock waits end then (tocsin_thread_timeout); 0: none */
    tocsin_cancel *cancel; /* lock waits end once it is fired (tocsin_thread_cancel); NULL: none */
    size_t prepare_failed; /* the length of the SQL whose prepare just failed (tc_prepare), or 0 */
    int ctl;    /* the core runs its own transaction control (own_auth lets it) */
    int denied; /* own_auth refused a statement of this call (its message is set) */
    int user_sql; /* > 0: the application's SQL runs (tocsin_exec, tocsin_sqlite_enter) */
    char msg[512];
} tc_thread_state;
tc_thread_state *tc_tls(void);
/* Runs `cleanup` keeping the thread's error (closing a handle clears it): what
 * failed before the cleanup is what the caller reports. */
#define TC_KEEP_ERROR(cleanup)                   \
    do {                                         \
        tc_thread_state tc_kept_ = *tc_tls();    \
        cleanup;                                 \
        *tc_tls() = tc_kept_;                    \
    } while (0)
int tc_xcode(tocsin_db *db, int rc);
/*
 * What the connection's running statements are (db.c), as bits:
 *  TC_RUN_ANY     a statement is mid-step (our own are always reset between calls);
 *  TC_RUN_WRITER  one of them writes;
 *  TC_RUN_PRAGMA  one is a PRAGMA: a function call under it comes from the
 *                 schema -- PRAGMA integrity_check and quick_check evaluate every
 *                 CHECK, and SQLite (3.40) lets a CHECK call a SQLITE_DIRECTONLY
 *                 function, though not a trigger, view or index (a PRAGMA has no
 *                 expressions of its own; the pragma_*() table functions run a
 *                 PRAGMA statement too);
 *  TC_RUN_VACUUM  one is a VACUUM (which runs BEGIN and COMMIT of its own).
 */
#define TC_RUN_ANY 1
#define TC_RUN_WRITER 2
#define TC_RUN_PRAGMA 4
#define TC_RUN_VACUUM 8
int tc_running(sqlite3 *conn);
/* 1 when the connection has PRAGMA query_only on (what a READONLY means then). */
int tc_query_only(sqlite3 *conn);
#define TC_ERRCODE (tc_tls()->code)
/* Sets the thread's error; db may be NULL. Returns rc. */
int tc_err(tocsin_db *db, int rc, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Maps the connection's last SQLite error to a tocsin code, naming `what`. */
int tc_sqlerr(tocsin_db *db, int sqlite_rc, const char *what);
void tc_clear(tocsin_db *db);
/* Bumped in every child of fork() (wake.c): a handle made before it is the parent's. */
int tc_fork_generation(void);
/* TOCSIN_CLOSED, with its message, for a handle on a connection of tocsin's
 * inherited across fork() (its connection, locks and mutex are the parent's:
 * not one is touched); else 0 (a host's connection is the host's to use).
 * Checked before the handle's mutex, which a parent's thread may have held. */
int tc_inherited(tocsin_db *db);
/* Sets up db->conn, a connection tocsin opened: its busy handler (waits up to
 * db's busy timeout for locks, short pauses first, never while the thread's
 * nowait is set, nor once db's close began) and its authorizer (the
 * application's SQL on it may not begin or end a transaction). */
void tc_own_conn_setup(tocsin_db *db);
/* After a one-job INSERT of TC_NEXT_ID_HINTED committed on its own: `next` is the
 * id the next one takes while nothing changes the file (tc_id_hint, db.c). */
void tc_id_hint_set(tocsin_db *db, int64_t next);
/* The handle's mutex, for the few calls that use the connection outside an op. */
void tc_lock(tocsin_db *db);
void tc_unlock(tocsin_db *db);
/* Records the identity of the handle's database file (db.c). */
void tc_identify(tocsin_db *db);

/* A handle of its own on db's file (listeners, stream subscriptions), with
 * db's clock, limits and busy timeout; journal mode and schema as they are. */
int tc_open_private(tocsin_db *db, tocsin_db **out, int read_only);
/* another connection to conn's main file: its VFS and URI parameters (db.c) */
int tc_open_sibling(sqlite3 *from, sqlite3 **out, int flags);
/* db's main database's name for another connection; NULL (error set, led by
 * `what`) when none can open it (db.c) */
const char *tc_shared_path(tocsin_db *db, const char *what);

/* ---- statements (db.c) ---- */
/* A cached, reset statement for static SQL text `sql`; NULL (error set) on failure. */
sqlite3_stmt *tc_stmt(tocsin_db *db, const char *sql);
/* tc_stmt without reporting a failure to prepare: NULL and *out_rc the SQLite code
 * (SQLITE_INTERNAL, reported: the cache is full). */
sqlite3_stmt *tc_stmt_rc(tocsin_db *db, const char *sql, int *out_rc);
/* Finalizes every cached statement. */
void tc_stmt_flush(tocsin_db *db);
/* A host's connection: drops from the cache the statements the host finalized
 * (a cleanup loop over sqlite3_next_stmt finalizes ours too), finalizing none
 * of them (tc_stmt_check: at the start of a call, when the sentinel is gone;
 * tc_stmt_flush_host: all of them, then the rest, at a close). */
void tc_stmt_check(tocsin_db *db);
void tc_stmt_flush_host(tocsin_db *db);
/* Resets every cached statement and drops its bindings: none keeps running or holds a value. */
void tc_stmt_idle(tocsin_db *db);
/*
 * sqlite3_step with the handle's lock wait: SQLITE_BUSY is retried with
 * back-off until the call's budget (busy_timeout_ms from the first BUSY of
 * the call) is spent -- on a host's connection too, whatever busy handler it
 * set (none, in the sqlite3 shell). Never retried: a stale WAL snapshot
 * (SQLITE_BUSY_SNAPSHOT can never clear) and a write by a connection that
 * holds only a read lock (waiting could deadlock: SQLite refuses too).
 */
int tc_step(tocsin_db *db, sqlite3_stmt *st);
/* sqlite3_prepare_v3 with the same lock wait (preparing reads the schema). */
int tc_prepare(tocsin_db *db, const char *sql, unsigned flags, sqlite3_stmt **st);
/* Steps a statement expecting no row (or ignoring rows); resets it. */
int tc_step_done(tocsin_db *db, sqlite3_stmt *st, const char *what);
/* rc of an INSERT that takes TC_NEXT_ID, or TOCSIN_FULL naming `what` when that
 * id went past INT64_MAX (the table's ids are spent). */
int tc_no_id_left(tocsin_db *db, int rc, const char *what);
/* A statement on tocsin's `table` changed fewer rows than it matched (or than
 * tocsin's own reads found): a trigger dropped them (TEMP triggers may sit on
 * tocsin's tables). TOCSIN_CORRUPT naming both; the caller's op rolls back, so
 * nothing is half-written. tc_one_row: rc, or that error when rc is TOCSIN_OK
 * and the last statement did not change exactly one row. */
int tc_trigger_dropped(tocsin_db *db, const char *what, const char *table);
int tc_one_row(tocsin_db *db, int rc, const char *what, const char *table);
/* Cuts s in place to at most n bytes, on a UTF-8 character boundary. */
void tc_cut_utf8(char *s, size_t n);
/* Runs literal SQL (no binds, no rows). */
int tc_exec(tocsin_db *db, const char *sql, const char *what);
char *tc_strdup(const char *s);
char *tc_strndup(const char *s, size_t n); /* n bytes of s, NUL-terminated */
/* Duplicates column `i` of a stepped statement as text (NULL stays NULL). */
char *tc_col_text(sqlite3_stmt *st, int i);

/* ---- operations: atomicity, lock waits, schema (db.c) ---- */
/* tc_op_begin's `write` for a unit of exactly one write statement (atomic by
 * itself): in autocommit it runs as it is, without BEGIN/COMMIT around it;
 * inside a caller's transaction, without a savepoint. */
#define TC_OP_ONE 2
#define TC_OP_READ_ONE 3 /* one read statement: it is its own read transaction */
typedef struct tc_op {
    int mode;   /* 0: nothing opened, 1: own transaction, 2: savepoint, 3: one autocommit statement */
    int write;  /* a write unit: its commit wakes local subscribers; TC_OP_ONE: one write statement */
    int locked; /* tc_op_begin took the handle's mutex; tc_op_end releases it */
} tc_op;
/* Opens an atomic unit: BEGIN IMMEDIATE (write) / BEGIN (read) in autocommit,
 * a SAVEPOINT inside a caller's transaction. Takes the handle's mutex until
 * tc_op_end (the thread model: calls on one handle are serialised) and
 * ensures the schema first. TOCSIN_CLOSED on a closed handle. */
int tc_op_begin(tocsin_db *db, tc_op *op, int write);
/* The same without the mutex and the schema check (the schema installer,
 * which runs under a caller's lock or on a handle no other thread has). */
int tc_op_open(tocsin_db *db, tc_op *op, int write);
/* Closes it: commit/release when rc == TOCSIN_OK, roll back otherwise. Returns rc
 * (or the commit's failure). */
int tc_op_end(tocsin_db *db, tc_op *op, int rc);
int tc_ensure_schema(tocsin_db *db);
/* Runs a DELETE binding ?1 = now in its own write op; *out_n counts the rows. */
int tc_sweep(tocsin_db *db, int64_t *out_n, const char *sql, const char *what);

/* ---- time arithmetic (db.c) ---- */
/* t + d for an instant t and a duration d (both >= 0), saturating at
 * TOCSIN_MAX_TIME_MS: never wraps. */
int64_t tc_time_add(int64_t t, int64_t d);
/* TOCSIN_INVALID (message naming `what`) unless lo <= v <= TOCSIN_MAX_TIME_MS. */
int tc_check_ms(tocsin_db *db, const char *what, int64_t v, int64_t lo);

/* ---- validation (db.c) ---- */
int tc_check_name(tocsin_db *db, const char *what, const char *name);
int tc_check_payload(tocsin_db *db, const char *what, const char *json);
int tc_check_meta(tocsin_db *db, const char *meta);
/* A free text the core stores (error text, stream key, unique key...): valid
 * UTF-8 of at most max_bytes. NULL is accepted (the caller decides whether
 * that is allowed). TOCSIN_INVALID / TOCSIN_TOOBIG naming `what` otherwise. */
int tc_check_text(tocsin_db *db, const char *what, const char *text, size_t max_bytes);
/* An options struct's version: set (>= 1) and not newer than this library's
 * (a caller built against a newer tocsin.h would set fields this library
 * cannot see). TC_CHECK_VERSION(db, "enqueue options", o->version,
 * TOCSIN_ENQUEUE_OPTS) names the struct's _INIT macro in the message. */
int tc_check_version(tocsin_db *db, const char *what, int version, int current, const char *init);
#define TC_CHECK_VERSION(db, what, version, NAME) \
    tc_check_version(db, what, version, NAME##_VERSION, #NAME "_INIT")
/* Strict RFC 8259 (json.c); *top gets the first character of the value. It
 * also refuses nesting past 1000 levels and numbers beyond a double's range
 * (1e999: infinity to most readers, an error to Go's): tc_json_why says
 * which (and for a number, the key that holds it), as the tail of an error
 * message written to buf ("" for the syntax itself); TC_JSON_WHY_CAP bytes
 * hold any. */
#define TC_JSON_WHY_CAP 256
int tc_json_valid(const char *text, size_t n, char *top);
/* tc_json_valid also refuses an object with a key twice at any depth (keys
 * compared decoded: "a" and "\u0061" are one key), and text it has not the
 * memory to check so (past 32, the keys of the objects open at once are
 * kept on the heap). tc_json_valid_syntax, tc_json_wrapper_valid and the
 * walks below let keys repeat (a wrapper's caller reads its keys itself, and
 * the values it stores are checked on their own); tc_json_why explains their
 * refusals. */
int tc_json_valid_syntax(const char *text, size_t n);
const char *tc_json_why(const char *text, size_t n, char *buf, size_t cap);
/* Why tc_json_valid refused text[0..n): TC_JSON_DUP, buf (TC_JSON_DUP_CAP
 * bytes hold it) saying which key and where ('duplicate key "a" in an object
 * at $.jobs[2]: JSON readers disagree...'); TC_JSON_NOMEM; or TC_JSON_BAD, buf
 * the tail tc_json_why gives. */
enum { TC_JSON_BAD = 1, TC_JSON_DUP, TC_JSON_NOMEM };
#define TC_JSON_DUP_CAP 480
int tc_json_refusal(const char *text, size_t n, char *buf, size_t cap);
int tc_json_wrapper_valid(const char *text, size_t n, char *top, int levels);
/* Walk the members of a JSON object / the elements of a JSON array, strictly:
 * fn gets each key as written (a string literal, quotes included) or index,
 * and the value's text without the whitespace around it; a nonzero return
 * stops the walk. 1 when `text` is exactly one valid object / array and fn
 * never stopped, -1 when fn stopped it, 0 when it is not valid (fn may have
 * seen the members before the fault). */
typedef int (*tc_json_member_fn)(void *ctx, const char *key, size_t key_n, const char *value,
                                 size_t value_n);
typedef int (*tc_json_element_fn)(void *ctx, size_t index, const char *value, size_t value_n);
int tc_json_members(const char *text, size_t n, tc_json_member_fn fn, void *ctx);
int tc_json_elements(const char *text, size_t n, tc_json_element_fn fn, void *ctx);
/* A copy of the valid JSON text[0..n) without whitespace outside strings
 * (owned, sqlite3_free; NULL when out of memory). */
char *tc_json_compact(const char *text, size_t n);
/* Decodes the string token [p, end) (quotes included, validated) into *out
 * (owned, sqlite3_free). 0 on success, 1 for a \u0000 (a NUL character), 2
 * for a lone surrogate (not UTF-8), 3 when out of memory. */
int tc_json_decode(const char *p, const char *end, char **out);

/* ---- time and randomness (platform.c) ---- */
int64_t tc_system_ms(void);
int64_t tc_monotonic_ms(void);
void tc_sleep_ms(int ms);
void tc_sleep_us(int64_t us);
uint64_t tc_random(void);
/* Local time (platform.c): offset east of UTC in seconds at Unix time t; 0 on failure. */
int tc_local_offset(int64_t t, int64_t *out_offset);
void tc_tz_reload(void);

/* Keeps the shared object that holds the core loaded for the life of the process (platform.c). */
void tc_pin_self(void);

/* ---- process identity (platform.c): the worker registry's liveness test ---- */
void tc_host_name(char *buf, size_t n);
int tc_process_id(void);
int64_t tc_process_start(int pid);
int tc_process_gone(int pid, int64_t start);

/* ---- wake engine primitives (platform.c) ---- */
/* A pollable signal: eventfd on Linux, a non-blocking pipe elsewhere. */
typedef struct tc_signal {
    int rfd, wfd;
} tc_signal;
int tc_signal_open(tc_signal *s); /* 0 or -1 (errno set) */
void tc_signal_close(tc_signal *s);
void tc_signal_raise(tc_signal *s);
int tc_signal_drain(tc_signal *s); /* 1 if it was raised */
int tc_poll_read(const int *fds, int *ready, int n, int64_t timeout_us);
int64_t tc_monotonic_us(void);
int tc_dirwatch_open(const char *dir); /* -1 where unsupported */
int tc_dirwatch_read(int fd, const char *const *names, int n);
void tc_fd_close(int fd);

/* ---- wake engine (watcher.c) ---- */
/* Wakes this process's subscribers of db's file after a commit made through
 * tocsin. One atomic load when nothing in the process subscribes. */
void tc_wake_local(tocsin_db *db);
/* A write transaction of db began (it holds the file's write lock) / ended:
 * the file's watcher in this process stops rechecking on the kernel's reports
 * of our own page writes meanwhile (docs/architecture.md, "Local writes").
 * tc_unlock ends it once the connection is back in autocommit. */
void tc_wake_write_begin(tocsin_db *db);
void tc_wake_write_end(tocsin_db *db);
/* Tests: the local writes counted by db's file's watcher, -1 without one. */
int tc_wake_local_writers(tocsin_db *db);
/* Tests: 1 if db's file's watcher is saturated (see wake.c), -1 without one. */
int tc_wake_saturated(tocsin_db *db);
/* Releases what the handle holds in the wake engine (tocsin_close). */
void tc_wake_release(tocsin_db *db);
/* Closes and frees a handle's wake state taken out of it (tocsin_close). */
void tc_wake_free(struct tc_wake *wake);
/* The handle's own subscription, opened at first use, closed with the handle. */
int tc_wake_db_sub(tocsin_db *db, tocsin_sub **out);
/*
 * The loop under every blocking wait (one contract, tocsin.h "How every wait
 * ends"): drain, check, sleep until woken or *sleep_ms passes. check() sets
 * *done, may lower *sleep_ms (< 0: no bound) and returns TOCSIN_OK, or a code
 * that ends the wait with the thread's error set (e.g. TOCSIN_TIMEOUT from
 * tc_sleep_until). Returns TOCSIN_OK when done, else TOCSIN_INTERRUPTED
 * (poked), TOCSIN_CLOSED, the subscription's error or check's code.
 */
typedef int (*tc_check_fn)(void *ctx, int *done, int64_t *sleep_ms);
int tc_wait_loop(tocsin_sub *sub, tc_check_fn check, void *ctx);
/* A blocking wait on db (queue, result, lock waits): tc_wait_loop on `sub`
 * when it watches db's file (else TOCSIN_INVALID); when `sub` is NULL on the
 * handle's own subscription, or on one of the wait's own while another wait
 * uses that. Refuses to wait inside a transaction. */
int tc_db_wait(tocsin_db *db, tocsin_sub *sub, tc_check_fn check, void *ctx);
/* Drops a reference a wait held (db.c): frees the handle when it was the last. */
void tc_db_drop(tocsin_db *db);
/* Marks sub closed and returns once no thread waits on it any more. */
void tc_sub_shut(tocsin_sub *sub);
/* Counts the calling thread in as using sub around a whole call of a waiter
 * (listen_next, stream_sub_next, stream_sub_save), so that a racing close frees
 * nothing the call still uses: 1, and tc_sub_leave() after; 0 when the close
 * began first (TOCSIN_CLOSED set), and nothing of sub may be touched. */
int tc_sub_enter(tocsin_sub *sub);
void tc_sub_leave(tocsin_sub *sub);
/* Wakes a wait on sub as a commit would (something to re-check; not a poke). */
void tc_sub_nudge(tocsin_sub *sub);
/* A monotonic deadline (us) from a timeout in ms (< 0: none). */
int64_t tc_deadline_us(int timeout_ms);
/* Lowers *sleep_ms to what is left until end_us; TOCSIN_TIMEOUT (error set:
 * "<what> before the timeout") once it passed; end_us < 0: no deadline. */
int tc_sleep_until(int64_t end_us, int64_t *sleep_ms, const char *what);
/* Sleep bound for a deadline of the handle's clock: TOCSIN_TIMEOUT (error
 * set, naming `what`) once now >= deadline; deadline < 0: none. Waits re-read
 * the clock at least every TC_MAX_SLEEP_MS (an injected clock may jump). */
#define TC_MAX_SLEEP_MS 1000
int tc_sleep_until_clock(tocsin_db *db, int64_t deadline, int64_t next, int64_t *sleep_ms,
                         const char *what);

/* ---- scheduler (scheduler.c) ---- */
/* Copies a stored schedule's options (meta borrowed from the row). */
void tc_schedule_opts_of(const tocsin_schedule *row, tocsin_schedule_opts *o);

/* ---- JSON text building (db.c) ---- */
typedef struct tc_buf {
    char *p;
    size_t len, cap;
    int oom;
} tc_buf;
void tc_buf_put(tc_buf *b, const char *s, size_t n);
void tc_buf_puts(tc_buf *b, const char *s);
void tc_buf_i64(tc_buf *b, int64_t v);
void tc_buf_jstr(tc_buf *b, const char *s); /* JSON string literal, or null */
void tc_buf_jraw(tc_buf *b, const char *json); /* embedded JSON text (a string if invalid), or null */
/* "name": prefix with a comma unless first */
void tc_buf_key(tc_buf *b, const char *key, int *first);
char *tc_buf_take(tc_buf *b); /* NUL-terminated, owned (tocsin_free); NULL on oom */

/* ---- schema (schema.c) ---- */
int tc_schema_install(tocsin_db *db, int *out_version);
/* Refuses, before tocsin_open writes anything (the switch to WAL), a schema
 * newer than this library's or a malformed schema_version. */
int tc_schema_precheck(tocsin_db *db);

/* ---- queue internals shared with the SQL layer (queue.c) ---- */
char *tc_jobs_json(const tocsin_job *jobs, size_t n); /* owned; NULL on oom */
char *tc_job_json(const tocsin_job *job);
char *tc_messages_json(const tocsin_message *m, size_t n, int stream);
/* Checks every job spec as tocsin_queue_enqueue_many does before it writes
 * ("job 3: ..." when n > 1); the SQL layer checks them before its own unit
 * begins, so that a refused batch writes nothing (not even the schema). */
int tc_check_specs(tocsin_db *db, const tocsin_job_spec *specs, size_t n);
/* Checks tocsin_queue_claim's arguments before anything is written. */
int tc_check_claim(tocsin_db *db, const char *queue, const char *worker, size_t max,
                   int64_t visibility_ms);

/* ---- queue steps of the worker protocol (queue.c), inside a caller's op ---- */
/* Hands a held job back (pending again after delay_ms, no attempt consumed;
 * `why` becomes last_error if not NULL); *held 0 when the lease is not held.
 * *out_handbacks (may be NULL): the job's hand-backs so far, this one included. */
int tc_job_hand_back(tocsin_db *db, int *held, int64_t *out_handbacks, int64_t id,
                     int64_t token, int64_t delay_ms, const char *why);
/* Makes the leases `worker` holds on `queue` lapse now; *out_n += their count. */
int tc_jobs_release_worker(tocsin_db *db, const char *queue, const char *worker, int64_t *out_n);
/* How often a live job was handed back so far (0 if no such live job). */
int tc_job_handbacks(tocsin_db *db, int64_t id, int64_t *out_n);
/* tocsin_job_fail with the dead letter's reason ("failed", "max_attempts"). */
int tc_job_to_dead(tocsin_db *db, int *out_ok, int64_t id, int64_t token, const char *error,
                   const char *reason);
/* Is (id, token) the job's current lease? */
int tc_job_held(tocsin_db *db, int *held, int64_t id, int64_t token);

/* ---- messages shared by streams and notifications (stream.c) ---- */
int tc_collect_messages(tocsin_db *db, sqlite3_stmt *st, size_t cap, tocsin_message **out,
                        size_t *out_n, const char *what);
int tc_check_limit(tocsin_db *db, size_t limit);
/* Reads messages named `name` (a `kind`: topic or channel) with SQL binding
 * (name, after, limit); the public stream/notify readers. */
int tc_read_messages(tocsin_db *db, tocsin_message **out, size_t *out_n, const char *kind,
                     const char *name, const char *sql, int64_t after, size_t limit);

/* ---- coordination (result.c, lock.c, ratelimit.c, scheduler.c) ---- */
#define TC_CHECK_DB(db)                   \
    do {                                  \
        if (!(db)) return TOCSIN_INVALID; \
        tc_clear(db);                     \
    } while (0)
/* The lock the scheduler's leader lease uses (a reserved lock name). */
#define TC_SCHEDULER_LOCK "tocsin.scheduler"
/* the lock calls on tocsin's own (reserved) lock names, lock.c */
int tc_lock_acquire(tocsin_db *db, int64_t *out_token, const char *name, const char *owner,
                    int64_t ttl_ms);
int tc_lock_release(tocsin_db *db, int *out_ok, const char *name, const char *owner, int64_t token);
/* JSON of one schedule / a list of them: owned, NULL on oom (scheduler.c). */
char *tc_schedules_json(const tocsin_schedule *s, size_t n);
char *tc_schedule_json(const tocsin_schedule *s);
char *tc_result_json(const tocsin_result *r);
/* tocsin_result_save_error with a traceback (NULL: none), inside or outside an op. */
int tc_result_save_error(tocsin_db *db, int64_t job_id, const char *type, const char *message,
                         const char *trace, int64_t ttl_ms);

#endif
