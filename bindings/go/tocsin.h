/*
 * tocsin: NOTIFY/LISTEN, durable job queues and durable streams for SQLite.
 *
 * The one public header of the C core. Conventions used throughout:
 *  - functions return an int result code: TOCSIN_OK (0) or one of TOCSIN_*;
 *    there is one error channel: tocsin_errmsg() / tocsin_errcode() /
 *    tocsin_sqlite_errcode() read the calling thread's last failure, whatever
 *    handle (or none) failed -- read them on the thread that made the call
 *    (in Go, inside runtime.LockOSThread or one cgo call);
 *  - out-parameters come first;
 *  - every pointer handed out is documented as "owned" (free it with the
 *    named function, never with libc free) or "borrowed";
 *  - times are integer milliseconds since the Unix epoch, taken from the
 *    handle's clock (injectable, see tocsin_set_clock);
 *  - options structs carry a `version` field; initialise them with their
 *    _INIT macro so that fields added later keep the ABI.
 *
 * Threads (the rule bindings build on; details per function below):
 *  - a tocsin_db may be used from any number of threads at once: the core
 *    serialises the calls on one handle (like SQLite's serialized mode), each
 *    call atomic;
 *  - a transaction belongs to a transaction handle, never to a thread:
 *    tocsin_tx_begin() returns one, on a connection of its own, and only the
 *    calls made on that handle join the transaction (so two tasks of one event
 *    loop thread, or two goroutines, never share one by accident). The
 *    handle's own tocsin_begin()/tocsin_commit() remain for single-threaded
 *    C code: while it is open, every call on that handle joins it;
 *  - waits (subscriptions, listeners, stream subscriptions, queue, result and
 *    lock waits) block only the calling thread and hold no lock of the
 *    handle while they sleep; poke and close are safe from any other thread
 *    (see "How every wait ends");
 *  - nothing survives fork(): open handles and subscriptions in the process
 *    that uses them (inherited subscriptions report TOCSIN_CLOSED).
 */
#ifndef TOCSIN_H
#define TOCSIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- symbol export ------------------------------------------------------
 * TOCSIN_API marks the public functions. The core is compiled with
 * -fvisibility=hidden, so only these leave a shared libtocsin, and nothing of
 * the core leaves a module that contains it privately:
 *  - TOCSIN_EXTENSION (the loadable SQLite extension) and TOCSIN_EMBED (the
 *    core compiled into a binding's module) make TOCSIN_API empty: such a
 *    module exports its own entry point only (sqlite3_tocsin_init, PyInit_...);
 *  - on Windows the DLL is built with TOCSIN_BUILD_SHARED (dllexport); users
 *    of the static library define TOCSIN_STATIC; everyone else gets dllimport.
 * TOCSIN_EXPORT is the unconditional export, for the extension's entry point.
 * Define TOCSIN_API yourself before including this header to override. */
#if defined(_WIN32) || defined(__CYGWIN__)
#define TOCSIN_EXPORT __declspec(dllexport)
#elif defined(__GNUC__) && __GNUC__ >= 4
#define TOCSIN_EXPORT __attribute__((visibility("default")))
#else
#define TOCSIN_EXPORT
#endif
#ifndef TOCSIN_API
#if defined(TOCSIN_EXTENSION) || defined(TOCSIN_EMBED)
#define TOCSIN_API
#elif defined(_WIN32) || defined(__CYGWIN__)
#if defined(TOCSIN_BUILD_SHARED)
#define TOCSIN_API __declspec(dllexport)
#elif defined(TOCSIN_STATIC)
#define TOCSIN_API
#else
#define TOCSIN_API __declspec(dllimport)
#endif
#else
#define TOCSIN_API TOCSIN_EXPORT
#endif
#endif

/* Kept in step with the VERSION file by tools/sync-version (checked by make test). */
#define TOCSIN_VERSION_MAJOR 0
#define TOCSIN_VERSION_MINOR 1
#define TOCSIN_VERSION_PATCH 0
#define TOCSIN_VERSION_STRING "0.1.0"
#define TOCSIN_VERSION_NUMBER \
    (TOCSIN_VERSION_MAJOR * 1000000 + TOCSIN_VERSION_MINOR * 1000 + TOCSIN_VERSION_PATCH)

/* The on-disk schema version this library writes (docs/schema.md). */
#define TOCSIN_SCHEMA_VERSION 2

/* ---- result codes ------------------------------------------------------ */
#define TOCSIN_OK 0
#define TOCSIN_ERROR 1      /* SQLite or system failure; see tocsin_sqlite_errcode() */
#define TOCSIN_INVALID 2    /* an argument was invalid; nothing was written */
#define TOCSIN_NOTFOUND 3   /* the named object does not exist */
#define TOCSIN_BUSY 4       /* the database stayed locked past the busy timeout */
#define TOCSIN_LEASE_LOST 5 /* the caller no longer holds the job/lock lease */
#define TOCSIN_CLOSED 6     /* the handle or subscription was closed */
#define TOCSIN_CORRUPT 7    /* the database or its tocsin schema is damaged */
#define TOCSIN_TOOBIG 8     /* a payload exceeded the size limit; nothing was written */
#define TOCSIN_VERSION 9    /* SQLite too old, or schema newer than this library */
#define TOCSIN_CALLBACK 10  /* a callback of the host language raised */
#define TOCSIN_NOMEM 11     /* out of memory */
#define TOCSIN_REPLACED 12  /* the database file was replaced under the handle */
#define TOCSIN_TIMEOUT 13   /* a wait ended at its deadline */
#define TOCSIN_READONLY 14  /* a write was attempted on a read-only handle or file */
#define TOCSIN_INTERRUPTED 15 /* a wait was poked, or SQLite was interrupted */
#define TOCSIN_IOERR 16     /* an I/O error of the file system (SQLITE_IOERR) */
#define TOCSIN_FULL 17      /* the disk or the database is full (SQLITE_FULL) */
#define TOCSIN_CANTOPEN 18  /* the database file cannot be opened or created */
#define TOCSIN_PERM 19      /* access denied (SQLITE_PERM, SQLITE_AUTH) */

/* The tocsin code for an SQLite result code (primary or extended), so that
 * no binding maps SQLite codes itself. SQLITE_OK gives TOCSIN_OK. */
TOCSIN_API int tocsin_code_of_sqlite(int sqlite_rc);

/* ---- limits ------------------------------------------------------------
 * Enforced once, in the core: the SQL surface and every binding inherit them
 * (a binding may check early for a nicer error, never with other numbers).
 */
#define TOCSIN_MAX_NAME_BYTES 255        /* queue, topic, channel, consumer, worker, lock, ... */
#define TOCSIN_MAX_UNIQUE_KEY_BYTES 1024
#define TOCSIN_MAX_ATTEMPTS 1000000      /* max_attempts is 1..this */
#define TOCSIN_MAX_BATCH 10000           /* claim count, read limits, buffers, enqueue_many */
#define TOCSIN_DEFAULT_MAX_PAYLOAD_BYTES (1024 * 1024)
/* Every instant (ms since the epoch) and every duration (ms) an API takes is
 * within 0..TOCSIN_MAX_TIME_MS (9999-12-31T23:59:59.999Z); sums of the two
 * saturate there (a lease or delay that long never ends). */
#define TOCSIN_MAX_TIME_MS 253402300799999LL
/* A lock's ttl and a rate limit's window are 1..this (366 days), as is the
 * scheduler's leader lease. */
#define TOCSIN_MAX_LEASE_MS (366LL * 86400 * 1000)
/* A worker's visibility (its runs' lease) and scheduler ttl are 0 (their
 * defaults) or at least this: the worker renews each at a third of it. */
#define TOCSIN_MIN_WORKER_LEASE_MS 3

/* Library versions. Borrowed static strings. */
TOCSIN_API const char *tocsin_version(void);
TOCSIN_API int tocsin_version_number(void);
TOCSIN_API const char *tocsin_sqlite_version(void); /* the SQLite this process runs on */

/*
 * One SQLite per process (design.md §2). Two copies of SQLite opening one
 * database file drop each other's POSIX locks and can corrupt it, so each
 * binding calls this when it opens a handle or loads tocsin into the
 * application's connection. It looks at the shared objects loaded in the
 * process (Linux) for the ones that carry a copy of SQLite: TOCSIN_OK when no
 * object but the one tocsin runs on does; TOCSIN_ERROR otherwise, with a
 * message in msg (at most cap bytes with the NUL) naming tocsin's copy and the
 * others. A copy compiled into the program itself is not seen (Node's own
 * node:sqlite, say); elsewhere than Linux it answers TOCSIN_OK. The answer is
 * kept until an object is loaded or unloaded. Any thread; no handle.
 */
TOCSIN_API int tocsin_check_sqlite_copies(char *msg, size_t cap);

/* A constant English name for a result code ("invalid argument", ...). */
TOCSIN_API const char *tocsin_errstr(int rc);

/* Frees memory handed out by tocsin (strings, arrays). Accepts NULL. */
TOCSIN_API void tocsin_free(void *p);

/* A fresh owner id unique to this process and call, "host:pid:random" (48
 * random bits): the default worker id, and the owner a binding gives a lock
 * or a leadership when the application names none. Writes at most size bytes
 * with the NUL (TOCSIN_OWNER_ID_SIZE always suffices); returns its length. */
#define TOCSIN_OWNER_ID_SIZE 96
TOCSIN_API size_t tocsin_owner_id(char *buf, size_t size);

/* ---- handles ----------------------------------------------------------- */
typedef struct tocsin_db tocsin_db;
struct sqlite3;

/* The clock: milliseconds since the Unix epoch. */
typedef int64_t (*tocsin_clock_fn)(void *ctx);

/* Options structs start with `int version`: start from the struct's _INIT
 * macro. A version of 0 (unset) or newer than this library's (a struct from a
 * newer tocsin.h, whose fields this library cannot see) is TOCSIN_INVALID. */

typedef struct tocsin_open_opts {
    int version;               /* TOCSIN_OPEN_OPTS_VERSION */
    int busy_timeout_ms;       /* how long a writer waits for the lock; 0: 5000 */
    int64_t max_payload_bytes; /* payload size limit; 0: 1 MiB */
    int read_only;             /* open read-only (no bootstrap, writes fail); a WAL database
                                  in a directory this process cannot write, without its -shm,
                                  opens immutable (a snapshot). A read-write open there fails
                                  saying the directory must be writable. */
    tocsin_clock_fn clock;     /* NULL: the system clock */
    void *clock_ctx;
} tocsin_open_opts;
#define TOCSIN_OPEN_OPTS_VERSION 1
#define TOCSIN_OPEN_OPTS_INIT {TOCSIN_OPEN_OPTS_VERSION, 0, 0, 0, NULL, NULL}

/*
 * Opens (creating if needed) the database at `path` on its own connection:
 * WAL, synchronous=NORMAL, busy_timeout and foreign_keys are set explicitly,
 * the SQLite version is checked (>= 3.37) and schema v1 is bootstrapped.
 * On success *out is owned by the caller: close it with tocsin_close().
 * On failure *out is NULL (use tocsin_errstr for the code) or, when a handle
 * could be made, a handle carrying the message (close it too).
 * `opts` may be NULL.
 */
TOCSIN_API int tocsin_open(tocsin_db **out, const char *path, const tocsin_open_opts *opts);

/*
 * Wraps an existing connection owned by the host (used by the loadable
 * extension). The connection stays the host's: tocsin_close() frees the
 * wrapper only. Journal mode and pragmas are left as the host set them.
 */
TOCSIN_API int tocsin_wrap(tocsin_db **out, struct sqlite3 *conn, const tocsin_open_opts *opts);

/* Closes the handle (and its connection unless wrapped). Accepts NULL. Every
 * queue, result or lock wait of another thread on the handle -- on its own
 * subscription or on one of the caller's -- ends with TOCSIN_CLOSED, and so
 * does a call of another thread waiting for a database lock (within a few
 * milliseconds, not at the end of its busy timeout); later
 * calls on the handle return TOCSIN_CLOSED while transaction handles or such
 * waits still keep it alive, and whichever lets go of it last frees it. A
 * transaction handle is ended with tocsin_tx_*, not this. */
TOCSIN_API int tocsin_close(tocsin_db *db);

/* The first step of a close for a caller that must let other threads' calls
 * on db leave before tocsin_close frees what they use (a binding's count of
 * calls in flight): a call of another thread waiting for a database lock on
 * db ends within a few milliseconds with TOCSIN_CLOSED, and so does any later
 * call that meets a lock; calls that need no wait still run. Thread-safe and
 * idempotent; no way back: tocsin_close(db) follows. Accepts NULL; does
 * nothing on a transaction handle (its transaction ends with tocsin_tx_*). */
TOCSIN_API void tocsin_close_begin(tocsin_db *db);

/* The underlying connection, borrowed until tocsin_close(): use it for the
 * application's own statements inside a tocsin transaction (on a connection
 * tocsin opened they may not begin or end one: see tocsin_exec). */
TOCSIN_API struct sqlite3 *tocsin_sqlite(tocsin_db *db);
/*
 * Holds the handle's serialisation (the lock every tocsin call on db takes)
 * so that a binding can run the application's own statements on
 * tocsin_sqlite(db) from any thread without racing a tocsin call of another
 * thread on the same connection. Recursive; tocsin calls may be made while
 * held. TOCSIN_CLOSED (not held) once db is closed; otherwise pair it with
 * tocsin_sqlite_leave(db) on the same thread.
 */
TOCSIN_API int tocsin_sqlite_enter(tocsin_db *db);
TOCSIN_API void tocsin_sqlite_leave(tocsin_db *db);

/*
 * The one error channel: the message, code and SQLite extended code (0 if
 * none) of the calling thread's last failed tocsin call, on any handle or on
 * none. `db` may be NULL and is not consulted (the thread's error is the
 * handle's error, since a failing call sets it before returning). Borrowed,
 * valid until the next tocsin call of this thread. Every failure sets it,
 * including those of subscriptions, listeners, stream subscriptions,
 * tocsin_wake_configure and tocsin_cron_parse.
 */
TOCSIN_API const char *tocsin_errmsg(tocsin_db *db);
TOCSIN_API int tocsin_errcode(tocsin_db *db);
TOCSIN_API int tocsin_sqlite_errcode(tocsin_db *db);

/*
 * Bounds the lock waits of the calling thread's following tocsin calls, on any
 * handle: a call that waits for another connection's write lock gives up with
 * TOCSIN_BUSY `ms` from now, or at the handle's busy timeout if that comes
 * first. ms < 0 removes the bound. For a per-call deadline (a Go context, a
 * binding's timeout): set it before the call and remove it after, on the same
 * thread. The bound is on waits for locks only; queue, result and lock waits
 * keep their own timeouts (their writes are bounded too).
 */
TOCSIN_API void tocsin_thread_timeout(int ms);

/*
 * Cancels lock waits from another thread, for a per-call cancel (a Go
 * context's cancel, an AbortSignal). tocsin_cancel_new() makes a token (NULL
 * when out of memory); tocsin_thread_cancel(c) binds the calling thread's
 * following tocsin calls to it, on any handle (NULL unbinds: bind before the
 * call and unbind after, on the same thread, as with tocsin_thread_timeout).
 * tocsin_cancel_fire(c), from any thread, makes a bound call that waits for
 * another connection's write lock give up within a few milliseconds with
 * TOCSIN_INTERRUPTED, nothing of it written; a fired token stays fired, and a
 * bound call that meets a lock after it fails at once. Calls that need no wait
 * still run. Like tocsin_thread_timeout it bounds waits for locks only (queue,
 * result, listen and subscription waits have their pokes). Free the token once
 * no thread is bound to it and no fire can come. All three accept NULL.
 */
typedef struct tocsin_cancel tocsin_cancel;
TOCSIN_API tocsin_cancel *tocsin_cancel_new(void);
TOCSIN_API void tocsin_cancel_fire(tocsin_cancel *c);
TOCSIN_API void tocsin_cancel_free(tocsin_cancel *c);
TOCSIN_API void tocsin_thread_cancel(tocsin_cancel *c);

/* The handle's clock. tocsin_set_clock(db, NULL, NULL) restores the system
 * clock. Set it (and the payload limit) before other threads use the handle;
 * transaction handles take db's settings when they begin. The clock may be
 * called from any thread that uses the handle. */
TOCSIN_API int64_t tocsin_now(tocsin_db *db);
TOCSIN_API void tocsin_set_clock(tocsin_db *db, tocsin_clock_fn clock, void *ctx);

/* The payload size limit in bytes (>= 1). */
TOCSIN_API int tocsin_set_max_payload(tocsin_db *db, int64_t max_bytes);

/* Checks a name (queue, topic, channel, consumer, worker, lock...) as every
 * operation does: non-empty UTF-8, at most 255 bytes, no control characters.
 * TOCSIN_INVALID with a message naming `what` otherwise. Writes nothing. `db`
 * may be NULL (a name a binding keeps before any database is open: a task's). */
TOCSIN_API int tocsin_check_name(tocsin_db *db, const char *what, const char *name);

/* The length in bytes of the UTF-8 character that begins at s (1 for ASCII),
 * by the rule every text argument follows: shortest form, no surrogate, at
 * most U+10FFFF. 0 when none begins there (a stray continuation byte, a
 * truncated or overlong sequence); never reads past a NUL. For tools that
 * print or repair text read from the tables. */
TOCSIN_API unsigned tocsin_utf8_len(const char *s);
/* 1 when `text` is JSON as tocsin accepts and stores it (RFC 8259, UTF-8,
 * nesting at most 1000 deep, no number beyond a double's range, no object
 * with a key twice, keys compared decoded), else 0:
 * a tool printing what the tables hold tells such text from text written
 * around tocsin. NULL is 0. */
TOCSIN_API int tocsin_json_valid(const char *text);

/* Creates the schema if missing, migrates forward; *out_version is the schema version. */
TOCSIN_API int tocsin_bootstrap(tocsin_db *db, int *out_version);

/* ---- transactions ------------------------------------------------------ */
/*
 * tocsin_begin() starts a write transaction on the handle's own connection
 * (BEGIN IMMEDIATE, waiting up to the busy timeout): for single-threaded
 * code, since every call on the handle, from any thread, joins it until
 * commit/rollback (threads and bindings use tocsin_tx_begin). Every tocsin
 * operation called before commit/rollback joins it: a rollback drops its jobs, events and notifications together
 * with the application's own writes. Outside a transaction each operation is
 * its own transaction; inside one it nests in a SAVEPOINT, so a failed
 * operation leaves nothing half applied.
 */
TOCSIN_API int tocsin_begin(tocsin_db *db);
TOCSIN_API int tocsin_commit(tocsin_db *db);
TOCSIN_API int tocsin_rollback(tocsin_db *db);
TOCSIN_API int tocsin_in_transaction(tocsin_db *db);

/*
 * Transaction handles: the transactions of multi-threaded programs and of
 * every binding. tocsin_tx_begin() starts a write transaction (BEGIN
 * IMMEDIATE, waiting up to the busy timeout) on a connection of its own
 * (pooled by db) and returns it as *out_tx, a tocsin_db that every function
 * taking a tocsin_db accepts: the calls made on *out_tx join the transaction,
 * calls on db (or another transaction handle) do not. *out_tx is usable from
 * any thread, one call at a time per handle (the core serialises them).
 * tocsin_tx_commit() / tocsin_tx_rollback() end it and always release *out_tx
 * (a failed commit has rolled back: nothing of it was written). Transaction
 * handles do not nest, cannot wait (waits refuse inside a transaction) and
 * keep db alive until they end, even past tocsin_close(db). Not for an
 * in-memory database (TOCSIN_INVALID) nor a read-only handle. A transaction
 * whose application SQL (tocsin_exec, or statements between
 * tocsin_sqlite_enter and _leave) left state on its connection -- ATTACH or
 * DETACH, a PRAGMA, a TEMP table, view, index or trigger -- releases that
 * connection when it ends instead of pooling it: no later transaction
 * inherits that state.
 */
TOCSIN_API int tocsin_tx_begin(tocsin_db *db, tocsin_db **out_tx);
TOCSIN_API int tocsin_tx_commit(tocsin_db *tx);
TOCSIN_API int tocsin_tx_rollback(tocsin_db *tx);
/* Runs SQL text of the application's (no result rows) on the handle's
 * connection, statement by statement up to the first failure.
 *
 * On the connections tocsin opens (tocsin_open, transaction handles) the
 * application's SQL -- here, and its statements on tocsin_sqlite(db) -- may
 * not begin or end a transaction: BEGIN, COMMIT, ROLLBACK, END, and a
 * SAVEPOINT outside a transaction are refused when prepared (TOCSIN_INVALID,
 * SQLite's SQLITE_AUTH; that statement and the rest of the script do not run;
 * VACUUM, which begins and ends a transaction inside itself, is not refused),
 * since a transaction begun that way on a handle every thread shares would
 * take in the other threads' calls, and a COMMIT would end tocsin_begin's or a
 * transaction handle's transaction behind its back. Transactions are
 * tocsin_begin's and tocsin_tx_begin's; SAVEPOINT / RELEASE / ROLLBACK TO
 * inside one are the application's. On a host's connection (tocsin_wrap) the
 * host keeps transaction control, and a failed call rolls back a transaction
 * its own SQL opened (BEGIN; ...; a failing statement), so the handle is left
 * as it was found. */
TOCSIN_API int tocsin_exec(tocsin_db *db, const char *sql);

/* ---- queue ------------------------------------------------------------- */
typedef struct tocsin_enqueue_opts {
    int version;              /* TOCSIN_ENQUEUE_OPTS_VERSION */
    int64_t priority;         /* higher runs first; default 0 */
    int64_t delay_ms;         /* run no sooner than now + delay_ms */
    int64_t run_at_ms;        /* absolute run time; 0: use delay_ms */
    int max_attempts;         /* >= 1; 0: default 3 */
    int64_t expires_ms;       /* discard (dead, 'expired') if not claimed within this; 0: never */
    const char *unique_key;   /* dedup against live jobs of the queue; NULL: none */
    const char *meta;         /* JSON object of headers, or NULL */
} tocsin_enqueue_opts;
#define TOCSIN_ENQUEUE_OPTS_VERSION 1
#define TOCSIN_ENQUEUE_OPTS_INIT {TOCSIN_ENQUEUE_OPTS_VERSION, 0, 0, 0, 0, 0, NULL, NULL}
#define TOCSIN_DEFAULT_MAX_ATTEMPTS 3

/* One job to enqueue with tocsin_queue_enqueue_many. `opts` may be NULL. */
typedef struct tocsin_job_spec {
    const char *queue;
    const char *payload; /* JSON text */
    const tocsin_enqueue_opts *opts;
} tocsin_job_spec;

/*
 * Enqueues a job; *out_id is its id. With a unique_key that a live job of the
 * same queue already holds, nothing is written and *out_id is that job's id.
 */
TOCSIN_API int tocsin_queue_enqueue(tocsin_db *db, int64_t *out_id, const char *queue,
                         const char *payload, const tocsin_enqueue_opts *opts);
/* Enqueues n jobs atomically (all or none); out_ids has room for n ids. */
TOCSIN_API int tocsin_queue_enqueue_many(tocsin_db *db, int64_t *out_ids, const tocsin_job_spec *specs,
                              size_t n);

/* A job as stored. Strings are owned by the array they came in. */
typedef struct tocsin_job {
    int64_t id;
    char *queue;
    char *state;      /* "scheduled" (run_at in the future), "pending" (claimable),
                         "processing" (leased) or "dead" */
    char *payload;    /* JSON text */
    char *meta;       /* JSON object text or NULL */
    int64_t priority;
    int attempts;     /* claims so far */
    int max_attempts;
    int64_t token;    /* fencing token of the current (or last) lease: id * 2^20 +
                         attempts, unique across jobs and claims; 0 if never claimed.
                         Opaque to callers: pass it back as given */
    int64_t run_at;
    int64_t created_at;
    int64_t lease_until; /* 0 unless processing */
    int64_t expires_at;  /* 0: never */
    char *unique_key;    /* NULL if none */
    char *worker;        /* current or last holder, NULL if never claimed */
    char *last_error;    /* NULL if none */
    char *reason;        /* dead jobs: "failed", "max_attempts", "expired", "cancelled" */
    int64_t died_at;     /* dead jobs: when */
} tocsin_job;

/* Frees an array of n jobs returned by tocsin. Accepts NULL. */
TOCSIN_API void tocsin_jobs_free(tocsin_job *jobs, size_t n);

/*
 * Claims up to `max` claimable jobs of `queue` for `worker`, ordered by
 * priority DESC, run_at, id, each leased for visibility_ms. Lapsed leases of
 * the queue are reclaimed first (the lapsed claim counted as an attempt; an
 * exhausted job goes dead with reason "max_attempts"), and unclaimed jobs
 * past expiry go dead with reason "expired". A paused queue yields nothing.
 * *out_jobs (owned, free with tocsin_jobs_free) holds *out_n jobs.
 */
TOCSIN_API int tocsin_queue_claim(tocsin_db *db, tocsin_job **out_jobs, size_t *out_n, const char *queue,
                       const char *worker, size_t max, int64_t visibility_ms);

/*
 * Lease operations. *out_ok is 1 when `token` is the current lease of job
 * `id` (state processing), 0 otherwise (stale holder, unknown or finished
 * job): then nothing is written. A lease that lapsed but that nobody
 * reclaimed yet still holds (the work was done and no one else has it).
 *  ack: the job is done and removed;
 *  retry: back to pending after delay_ms (< 0: exponential backoff with the
 *         default policy), or dead ("max_attempts") if attempts are spent;
 *  fail: dead now with reason "failed";
 *  heartbeat: lease extended to now + extend_ms.
 */
TOCSIN_API int tocsin_job_ack(tocsin_db *db, int *out_ok, int64_t id, int64_t token);
/* Acks n (id, token) pairs in one transaction; *out_acked counts those that held. */
TOCSIN_API int tocsin_job_ack_batch(tocsin_db *db, size_t *out_acked, const int64_t *ids,
                         const int64_t *tokens, size_t n);
TOCSIN_API int tocsin_job_retry(tocsin_db *db, int *out_ok, int64_t id, int64_t token, int64_t delay_ms,
                     const char *error);
TOCSIN_API int tocsin_job_fail(tocsin_db *db, int *out_ok, int64_t id, int64_t token, const char *error);
TOCSIN_API int tocsin_job_heartbeat(tocsin_db *db, int *out_ok, int64_t id, int64_t token,
                         int64_t extend_ms);

/* Hands a held job back unrun: pending again after delay_ms (0: now), no
 * attempt consumed (max_attempts grows by one, so tokens never repeat; at
 * TOCSIN_MAX_ATTEMPTS the attempt is spent instead, and a hand-back of the
 * last one moves the job to the dead letters, reason "max_attempts"). For a
 * worker that claimed more than it will run (a batch cut short, shutdown).
 * *out_ok 0 when (id, token) is not the current lease: nothing written. */
TOCSIN_API int tocsin_job_hand_back(tocsin_db *db, int *out_ok, int64_t id, int64_t token,
                                    int64_t delay_ms);

/* Exponential backoff: min(cap, base * 2^(attempts-1)), then "equal jitter"
 * (the upper half drawn at random). attempts >= 1. */
TOCSIN_API int64_t tocsin_backoff_ms(int64_t base_ms, int64_t cap_ms, int attempts);
#define TOCSIN_BACKOFF_BASE_MS 1000
#define TOCSIN_BACKOFF_CAP_MS 3600000

/* Cancels a live job (scheduled, pending or processing): it goes dead with reason
 * "cancelled". *out_ok is 0 if no live job has that id. */
TOCSIN_API int tocsin_job_cancel(tocsin_db *db, int *out_ok, int64_t id);

/* Looks a job up, live or dead. *out_job (owned, free with tocsin_jobs_free(job, 1))
 * is NULL when no job has that id (acked jobs are removed). */
TOCSIN_API int tocsin_job_get(tocsin_db *db, tocsin_job **out_job, int64_t id);

/* Paused queues hand out no jobs; enqueue still works. */
TOCSIN_API int tocsin_queue_pause(tocsin_db *db, const char *queue);
TOCSIN_API int tocsin_queue_resume(tocsin_db *db, const char *queue);
TOCSIN_API int tocsin_queue_is_paused(tocsin_db *db, int *out_paused, const char *queue);

/*
 * Statistics as a JSON object (owned, free with tocsin_free). For one queue:
 * {"queue","pending","scheduled","processing","dead","oldest_pending_age_ms",
 * "paused"}; with queue NULL: {"queues":[...one object per queue...]}.
 */
TOCSIN_API int tocsin_queue_stats(tocsin_db *db, char **out_json, const char *queue);

/*
 * The earliest instant at which something in these queues needs a worker: a
 * pending job becomes due (now if one already is), a lease lapses, or a job
 * expires. *out_ms is -1 when nothing is pending or in flight. Paused queues
 * count only their leases. Read-only.
 */
TOCSIN_API int tocsin_queue_next_deadline(tocsin_db *db, int64_t *out_ms, const char *const *queues,
                               size_t n);

/* Dead letters of `queue` (NULL: all queues), oldest first, ids > after_id. */
TOCSIN_API int tocsin_dead_list(tocsin_db *db, tocsin_job **out_jobs, size_t *out_n, const char *queue,
                     int64_t after_id, size_t limit);
/* Moves dead job `id` back to pending, keeping its id, with max_attempts
 * more claims allowed: attempts keeps counting (max_attempts becomes
 * attempts + max_attempts, at most TOCSIN_MAX_ATTEMPTS), so no claim repeats
 * an earlier claim's fencing token. *out_ok is 0 if no dead job has that id.
 * TOCSIN_FULL, nothing written, for a job that spent all TOCSIN_MAX_ATTEMPTS
 * claims (no token is left to hand out). */
TOCSIN_API int tocsin_dead_requeue(tocsin_db *db, int *out_ok, int64_t id);
/* Deletes dead jobs of `queue` (NULL: all) that died before `before_ms`
 * (0: all of them); *out_n counts them. */
TOCSIN_API int tocsin_dead_purge(tocsin_db *db, int64_t *out_n, const char *queue, int64_t before_ms);

/* ---- streams and notifications ----------------------------------------- */
/* A stream event or a notification. Strings are owned by the array. */
typedef struct tocsin_message {
    int64_t id;       /* stream offset or notification id */
    char *name;       /* topic or channel */
    char *key;        /* stream events: partition/ordering key or NULL */
    char *payload;    /* JSON text */
    char *meta;       /* JSON object text or NULL */
    int64_t created_at;
} tocsin_message;

TOCSIN_API void tocsin_messages_free(tocsin_message *msgs, size_t n);

/* Appends an event; *out_offset is its offset (increasing, never reused). */
TOCSIN_API int tocsin_stream_publish(tocsin_db *db, int64_t *out_offset, const char *topic,
                          const char *payload, const char *key, const char *meta);
/* Appends n events atomically; keys may be NULL (no keys); out_offsets has room for n. */
TOCSIN_API int tocsin_stream_publish_many(tocsin_db *db, int64_t *out_offsets, const char *topic,
                               const char *const *payloads, const char *const *keys, size_t n);
/* Events of `topic` with offset > after, oldest first, at most limit. */
TOCSIN_API int tocsin_stream_read(tocsin_db *db, tocsin_message **out, size_t *out_n, const char *topic,
                       int64_t after, size_t limit);
/* Saves a consumer's offset; offsets only move forward: *out_stored (may be
 * NULL) is the offset stored afterwards, max(old, offset). */
TOCSIN_API int tocsin_stream_save_offset(tocsin_db *db, int64_t *out_stored, const char *consumer,
                              const char *topic, int64_t offset);
/* A consumer's saved offset, 0 if none yet. */
TOCSIN_API int tocsin_stream_offset(tocsin_db *db, int64_t *out_offset, const char *consumer,
                         const char *topic);

typedef struct tocsin_trim_opts {
    int version;           /* TOCSIN_TRIM_OPTS_VERSION */
    int64_t max_age_ms;    /* > 0: delete events older than this */
    int64_t max_count;     /* > 0: keep at most this many newest events */
    int below_consumers;   /* != 0: delete events every consumer of the topic has passed */
} tocsin_trim_opts;
#define TOCSIN_TRIM_OPTS_VERSION 1
#define TOCSIN_TRIM_OPTS_INIT {TOCSIN_TRIM_OPTS_VERSION, 0, 0, 0}
/* Deletes events of `topic` matching any criterion set; *out_n counts them. */
TOCSIN_API int tocsin_stream_trim(tocsin_db *db, int64_t *out_n, const char *topic,
                       const tocsin_trim_opts *opts);

/* Records a notification in the caller's transaction; *out_id is its id. */
TOCSIN_API int tocsin_notify(tocsin_db *db, int64_t *out_id, const char *channel, const char *payload,
                  const char *meta);
/* Notifications of `channel` with id > after_id, oldest first, at most limit. */
TOCSIN_API int tocsin_notify_read(tocsin_db *db, tocsin_message **out, size_t *out_n, const char *channel,
                       int64_t after_id, size_t limit);
/* The highest notification id so far (any channel), 0 if none: where a listener starts. */
TOCSIN_API int tocsin_notify_max_id(tocsin_db *db, int64_t *out_id);
/* Deletes notifications older than max_age_ms (> 0) and, per channel, all but
 * the newest max_keep (> 0); 0 disables a criterion. *out_n counts them. */
TOCSIN_API int tocsin_notify_prune(tocsin_db *db, int64_t *out_n, int64_t max_age_ms, int64_t max_keep);
/*
 * Opt-in automatic trim, stored in the database (every process and language
 * follows it): about one notify in `one_in` runs tocsin_notify_prune(max_age_ms,
 * max_keep). one_in == 0 turns it off.
 */
TOCSIN_API int tocsin_notify_set_autotrim(tocsin_db *db, int64_t max_age_ms, int64_t max_keep,
                               int64_t one_in);

/* ==== wake engine ======================================================== */
/*
 * How a process learns, within a fraction of a millisecond, that any process
 * committed to the database (docs/architecture.md). One watcher thread per
 * database file per process (keyed by device and inode) serves every
 * subscription on that file: it starts with the first subscription and stops
 * when the last one closes. It reads `PRAGMA data_version` on its own
 * read-only connection whenever the kernel reports a write in the database's
 * directory (Linux inotify) and on a safety poll (1 ms, backing off to 20 ms
 * while idle when kernel events are available; see tocsin_wake_opts), and checks every ~100 ms that the path still names the same file.
 * Commits made through tocsin in this process wake subscribers directly.
 *
 * A wake means "something may have changed: re-read". Wakes coalesce (many
 * commits, one wake) and may be spurious; none is lost for a commit made
 * after the subscription opened. Subscribe first, then read: a commit racing
 * the first read is never missed.
 *
 * Every handle below exposes a pollable descriptor (readable while a wake is
 * pending: asyncio add_reader, libuv uv_poll, select/poll/epoll), a
 * non-blocking call that consumes it (timeout 0) and a blocking wait with a
 * timeout that releases no lock of the caller's (bindings drop their
 * GIL/GVL around it). Timeouts of these waits are real (monotonic) time in
 * milliseconds: < 0 waits without bound, 0 does not block. Deadlines that
 * carry meaning (tocsin_queue_wait) are read from the handle's clock.
 *
 * Subscriptions do not survive fork(): open them in the process that uses them.
 * Nor do database handles on tocsin's own connections (tocsin_open, transaction
 * handles): in a child of fork() every call on one inherited from the parent
 * returns TOCSIN_CLOSED ("opened before fork()"), and tocsin_close() of it
 * returns at once, releasing nothing (its connection, locks and mutex are the
 * parent's; SQLite forbids using a connection across fork()). A handle on a
 * host's connection (tocsin_wrap, the extension) follows its connection: the
 * host decides.
 *
 * How every wait ends -- tocsin_sub_wait, tocsin_sub_wait_until,
 * tocsin_listen_next, tocsin_stream_sub_next, tocsin_queue_wait,
 * tocsin_result_wait and tocsin_lock_wait alike:
 *   TOCSIN_OK           its condition holds (woken, messages, claimable,
 *                       an outcome, the lock held), outputs set;
 *   TOCSIN_TIMEOUT      the timeout or deadline passed first;
 *   TOCSIN_INTERRUPTED  another thread poked it (tocsin_*_poke): a binding's
 *                       cancellation;
 *   TOCSIN_CLOSED       its subscription was closed meanwhile by another
 *                       thread, or was inherited across fork();
 *   TOCSIN_REPLACED     the database file was replaced or deleted (sticky);
 *                       a listener or stream subscription also when the
 *                       file's ids went back below the last one it saw (a
 *                       backup restored into the file);
 *   anything else       a failure reading the database (TOCSIN_BUSY, ...).
 * Outputs are empty unless TOCSIN_OK; the message is tocsin_errmsg() of the
 * waiting thread. Closing a subscription, listener or stream subscription
 * while another thread is inside a call on it (a wait, a save) is safe: the
 * call ends (a wait with TOCSIN_CLOSED) and the close returns after it. As for
 * any object that is freed, the caller must make sure no call on it begins
 * once the close may have returned: a binding that lets one thread close
 * what another uses orders the two itself (its own lock or reference count).
 */

/* Process-wide watcher settings; they apply to watchers started afterwards. */
/*
 * The safety poll checks every poll_ms. With kernel events (Linux), it backs
 * off while nothing changes, doubling up to idle_poll_ms, and returns to
 * poll_ms at any event or commit: a commit the kernel failed to report is seen
 * within poll_ms during activity and within idle_poll_ms after a quiet spell,
 * and an idle watcher costs ~1/idle_poll_ms wakeups a second. Set
 * idle_poll_ms = poll_ms for a fixed poll. Without kernel events the poll is
 * fixed at poll_ms.
 */
typedef struct tocsin_wake_opts {
    int version;          /* TOCSIN_WAKE_OPTS_VERSION */
    int poll_ms;          /* safety poll interval, 1..1000; 0: 1 */
    int identity_ms;      /* file identity check interval, 1..60000; 0: 100 */
    int no_kernel_events; /* != 0: rely on the poll alone (no inotify) */
    int idle_poll_ms;     /* idle back-off limit, 1..1000 (raised to poll_ms); 0: 20 */
} tocsin_wake_opts;
#define TOCSIN_WAKE_OPTS_VERSION 1
#define TOCSIN_WAKE_OPTS_INIT {TOCSIN_WAKE_OPTS_VERSION, 0, 0, 0, 0}
/* NULL restores the defaults. Thread-safe. TOCSIN_INVALID on bad values. */
TOCSIN_API int tocsin_wake_configure(const tocsin_wake_opts *opts);

/*
 * ---- subscriptions: the raw wake ----
 * A tocsin_sub holds no connection: after tocsin_sub_open it is independent
 * of the tocsin_db it was opened from (which may be closed or used by another
 * thread). wait/drain are called by one thread at a time; tocsin_sub_fd,
 * tocsin_sub_poke and tocsin_sub_close from any thread.
 */
typedef struct tocsin_sub tocsin_sub;

/* Subscribes to commits on db's file. *out is owned: tocsin_sub_close().
 * TOCSIN_INVALID for an in-memory database, TOCSIN_REPLACED when db's path
 * no longer names the file db opened. */
TOCSIN_API int tocsin_sub_open(tocsin_sub **out, tocsin_db *db);
/* The descriptor, readable while a wake is pending. Borrowed until close; -1 if sub is NULL. */
TOCSIN_API int tocsin_sub_fd(tocsin_sub *sub);
/* Consumes pending wakes without blocking (what an event loop calls when the
 * descriptor is readable): TOCSIN_OK with *out_woken 1 if there was one, or
 * how a wait would end (TOCSIN_INTERRUPTED after a poke, TOCSIN_CLOSED,
 * TOCSIN_REPLACED). */
TOCSIN_API int tocsin_sub_drain(tocsin_sub *sub, int *out_woken);
/* Waits up to timeout_ms for a wake and consumes it (see "How every wait ends"). */
TOCSIN_API int tocsin_sub_wait(tocsin_sub *sub, int timeout_ms);
/*
 * Ends the wait in progress on the subscription (or the next one) with
 * TOCSIN_INTERRUPTED: how a binding cancels a blocked wait from another
 * thread. Waits on a listener or stream subscription built on it, and queue,
 * result and lock waits given it as `sub`, end the same way. Thread-safe.
 */
TOCSIN_API int tocsin_sub_poke(tocsin_sub *sub);
/* Unsubscribes and releases the descriptor (and the watcher thread with the
 * last subscription of the file). A wait of another thread on it ends with
 * TOCSIN_CLOSED first. Accepts NULL. */
TOCSIN_API int tocsin_sub_close(tocsin_sub *sub);

/*
 * "Wait until a condition holds or the timeout passes": check() is called at
 * once and after every wake; it sets *out_done and returns TOCSIN_OK, or a
 * code that ends the wait and is returned (TOCSIN_CALLBACK when the host's
 * callback raised). TOCSIN_OK once the condition held; otherwise as every
 * wait ends. check() runs on the calling thread.
 */
typedef int (*tocsin_check_fn)(void *ctx, int *out_done);
TOCSIN_API int tocsin_sub_wait_until(tocsin_sub *sub, tocsin_check_fn check, void *ctx,
                                     int timeout_ms);

/*
 * ---- listen: NOTIFY/LISTEN ----
 * A listener reads through its own private read-only connection to db's
 * file, so it is independent of db after open (db may be closed or used by
 * other threads). One thread at a time per listener; tocsin_listen_fd,
 * tocsin_listen_poke and tocsin_listen_close from any thread.
 */
typedef struct tocsin_listener tocsin_listener;

/*
 * Listens on `channel` from now on: notifications with an id above the
 * current maximum (read after subscribing, so none racing the open is lost).
 * buffer_size (1..10000) bounds what one tocsin_listen_next returns: a
 * listener more than buffer_size notifications behind loses the oldest ones,
 * counted by tocsin_listen_dropped (use a stream for lossless delivery).
 * *out is owned: tocsin_listen_close(). On failure *out is NULL.
 */
TOCSIN_API int tocsin_listen_open(tocsin_listener **out, tocsin_db *db, const char *channel,
                       size_t buffer_size);
/* Readable while a wake is pending. Borrowed until close; -1 if l is NULL. */
TOCSIN_API int tocsin_listen_fd(tocsin_listener *l);
/*
 * The notifications that arrived since the last call, oldest first, waiting
 * up to timeout_ms for at least one: TOCSIN_OK with *out_n >= 1 (*out owned:
 * tocsin_messages_free(*out, *out_n)); otherwise *out_n is 0 and the wait
 * ended as every wait ends (TOCSIN_TIMEOUT, TOCSIN_INTERRUPTED after
 * tocsin_listen_poke, TOCSIN_CLOSED, ...). timeout_ms 0 is the non-blocking
 * read for event loops.
 */
TOCSIN_API int tocsin_listen_next(tocsin_listener *l, tocsin_message **out, size_t *out_n, int timeout_ms);
/* Notifications lost to the bounded buffer so far. */
TOCSIN_API int64_t tocsin_listen_dropped(tocsin_listener *l);
/* Ends a blocked tocsin_listen_next with TOCSIN_INTERRUPTED. Thread-safe. */
TOCSIN_API int tocsin_listen_poke(tocsin_listener *l);
/* Closes it; a wait of another thread on it ends with TOCSIN_CLOSED first. Accepts NULL. */
TOCSIN_API int tocsin_listen_close(tocsin_listener *l);

/*
 * ---- stream subscriptions: replay, then live ----
 * A stream subscription reads (and saves offsets) through its own private
 * read-write connection, with db's clock and busy timeout; it is independent
 * of db after open (the clock's ctx must outlive it). One thread at a time;
 * tocsin_stream_sub_fd, tocsin_stream_sub_poke and tocsin_stream_sub_close
 * from any thread.
 */
typedef struct tocsin_stream_sub tocsin_stream_sub;
typedef struct tocsin_stream_sub_opts {
    int version;            /* TOCSIN_STREAM_SUB_OPTS_VERSION */
    int64_t from_offset;    /* -1: after the consumer's saved offset; >= 0: after this offset */
    size_t batch;           /* most events per tocsin_stream_sub_next, 1..10000; 0: 100 */
    int64_t autosave_every; /* > 0: save the consumer's offset every N processed events */
    int64_t autosave_ms;    /* > 0: ... or when this long passed since the last save */
    /* Version 2. Nonzero: tocsin_stream_sub_close saves the consumer's offset (the
     * position: the last event handed out, or where tocsin_stream_sub_rewind put
     * it) when it moved since the last save, also without autosave. The bindings
     * set it by default (the end of an iteration saves). Needs a consumer. */
    int save_on_close;
} tocsin_stream_sub_opts;
#define TOCSIN_STREAM_SUB_OPTS_VERSION 2
#define TOCSIN_STREAM_SUB_OPTS_INIT {TOCSIN_STREAM_SUB_OPTS_VERSION, -1, 0, 0, 0, 0}

/*
 * Subscribes `consumer` (may be NULL when opts->from_offset >= 0 and nothing
 * autosaves) to `topic`. Events handed out by one tocsin_stream_sub_next
 * count as processed when the next call is made, or at tocsin_stream_sub_save
 * and close: autosave stores those (at-least-once delivery). `opts` may be
 * NULL. *out is owned: tocsin_stream_sub_close(). On failure *out is NULL.
 */
TOCSIN_API int tocsin_stream_sub_open(tocsin_stream_sub **out, tocsin_db *db, const char *topic,
                           const char *consumer, const tocsin_stream_sub_opts *opts);
TOCSIN_API int tocsin_stream_sub_fd(tocsin_stream_sub *s); /* -1 if s is NULL */
/* The next events (offset order), waiting up to timeout_ms for at least one:
 * TOCSIN_OK with *out_n >= 1 (*out owned: tocsin_messages_free); otherwise
 * *out_n is 0 and the wait ended as every wait ends (TOCSIN_INTERRUPTED after
 * tocsin_stream_sub_poke). */
TOCSIN_API int tocsin_stream_sub_next(tocsin_stream_sub *s, tocsin_message **out, size_t *out_n,
                           int timeout_ms);
/* The offset of the last event handed out (where the subscription stands). */
TOCSIN_API int64_t tocsin_stream_sub_position(tocsin_stream_sub *s);
/* Only the events of the last batch up to `offset` were processed (an
 * iteration that stopped mid-batch): the position moves back to `offset`, so
 * the rest comes again with the next call and no save (autosave, close,
 * tocsin_stream_sub_save) stores more than `offset`. `offset` lies within the
 * last batch: from the position before it (nothing of it processed) to its
 * last event. TOCSIN_INVALID otherwise. */
TOCSIN_API int tocsin_stream_sub_rewind(tocsin_stream_sub *s, int64_t offset);
/* Saves the position as the consumer's offset now. */
TOCSIN_API int tocsin_stream_sub_save(tocsin_stream_sub *s);
TOCSIN_API int tocsin_stream_sub_poke(tocsin_stream_sub *s); /* thread-safe */
/* Saves the position when autosave or save_on_close is on and it moved since
 * the last save, then closes (a wait of another thread ends with
 * TOCSIN_CLOSED first). An iteration that stopped mid-batch calls
 * tocsin_stream_sub_rewind to the last event it handed on first. Accepts
 * NULL. Returns the save's failure, if any (the subscription is closed
 * regardless). */
TOCSIN_API int tocsin_stream_sub_close(tocsin_stream_sub *s);

/*
 * ---- workers: wait until claimable ----
 * Blocks until something in these queues is claimable (TOCSIN_OK), or ends
 * as every wait ends: the deadline passes (TOCSIN_TIMEOUT; deadline_ms is a
 * time of the handle's clock, < 0: none), `sub` is poked (TOCSIN_INTERRUPTED)
 * or closed (TOCSIN_CLOSED, also when the handle is closed meanwhile).
 * Each wake runs the read-only tocsin_queue_next_deadline, never a write
 * transaction, so idle workers woken by unrelated commits leave the write lock
 * alone; between wakes it sleeps until the next run_at, lease expiry or job
 * expiry (re-reading the clock at least every second). Runs on db (its thread,
 * outside a transaction). `sub`: a subscription on the same file that another
 * thread may poke to cancel the wait, or NULL to use one the handle keeps
 * from its first wait until tocsin_close.
 */
TOCSIN_API int tocsin_queue_wait(tocsin_db *db, const char *const *queues, size_t n,
                                 int64_t deadline_ms, tocsin_sub *sub);
/* ==== end of wake engine ================================================= */

/* ==== coordination: results, locks, rate limits, cron, scheduler ========= */
/* (docs/sql.md describes the semantics; docs/schema.md the tables.)
 * Every write below joins the caller's transaction like every other operation. */

/* ---- results ----------------------------------------------------------- */
/*
 * A job's result: a JSON value or a task error (type, message), kept until
 * its expiry. Saving again replaces the result (a retried job's last word wins).
 * ttl_ms > 0: the result expires ttl_ms after it was saved; 0: never.
 */
TOCSIN_API int tocsin_result_save(tocsin_db *db, int64_t job_id, const char *value_json, int64_t ttl_ms);
/* Records a task error as data: `type` (a name such as "ValueError", 1..255
 * bytes, no control characters) and `message` (any text; NULL: ""). */
TOCSIN_API int tocsin_result_save_error(tocsin_db *db, int64_t job_id, const char *type,
                             const char *message, int64_t ttl_ms);

/*
 * Finishing a task's job with its outcome, atomically and only while (id,
 * token) holds the lease (*out_ok 0: stale holder, nothing written):
 *  complete: saves value_json as the job's result (ttl_ms as for
 *            tocsin_result_save) and acks the job;
 *  fail_task: records the task error (type, message) as the job's result and
 *            fails the job for good (dead, reason "failed", last_error
 *            "type: message").
 * So a result exists exactly when the job finished. Join the caller's
 * transaction like every operation.
 */
TOCSIN_API int tocsin_job_complete(tocsin_db *db, int *out_ok, int64_t id, int64_t token,
                        const char *value_json, int64_t ttl_ms);
TOCSIN_API int tocsin_job_fail_task(tocsin_db *db, int *out_ok, int64_t id, int64_t token,
                         const char *type, const char *message, int64_t ttl_ms);

/* A stored result. Strings are owned by the struct (tocsin_result_free). */
typedef struct tocsin_result {
    int64_t job_id;
    int is_error;          /* 0: a value; 1: a task error */
    char *value;           /* JSON text ("null" for a stored JSON null); NULL when is_error */
    char *error_type;      /* when is_error; NULL otherwise */
    char *error_message;   /* when is_error; NULL otherwise */
    int64_t created_at;
    int64_t expires_at;    /* 0: never */
    char *error_trace;     /* when is_error: the runtime's traceback, or NULL */
} tocsin_result;

/*
 * Reads the result of job_id (read-only, cheap: one primary-key lookup; poll
 * it after each wake). *out_result (owned, free with tocsin_result_free) is
 * NULL when there is no result or it has expired -- a stored JSON null is a
 * result whose value is "null".
 */
TOCSIN_API int tocsin_result_get(tocsin_db *db, tocsin_result **out_result, int64_t job_id);

/*
 * The outcome of job_id, read in one snapshot: its result (as
 * tocsin_result_get), or -- for a job that died without one -- an error whose
 * error_type is "JobDead" and whose message names the dead reason and last
 * error. *out_result (owned, tocsin_result_free) is NULL while the job is
 * live (scheduled, pending or processing). TOCSIN_NOTFOUND when neither a job nor a result has
 * that id (acked without a result, result expired, or never enqueued).
 * Read-only: what an event loop calls after each wake of a subscription.
 */
TOCSIN_API int tocsin_result_check(tocsin_db *db, tocsin_result **out_result, int64_t job_id);
/*
 * Blocks until tocsin_result_check gives an outcome (TOCSIN_OK, *out_result
 * set), or ends as every wait ends (*out_result NULL): deadline_ms passes (a
 * time of the handle's clock, < 0: none; TOCSIN_TIMEOUT), `sub` is poked
 * (TOCSIN_INTERRUPTED) or closed (TOCSIN_CLOSED). Re-checks
 * after every commit of any process (wake engine), never polling the table.
 * `sub` as for tocsin_queue_wait (NULL: the handle's own). Not inside a
 * transaction. The TOCSIN_TIMEOUT message says what the job is doing: never
 * claimed, running, or retrying (a caller whose own timer ended the wait calls
 * it once more with deadline_ms 0: a last check, and that message).
 */
TOCSIN_API int tocsin_result_wait(tocsin_db *db, tocsin_result **out_result, int64_t job_id,
                       int64_t deadline_ms, tocsin_sub *sub);
TOCSIN_API void tocsin_result_free(tocsin_result *result); /* accepts NULL */
/* Deletes the result of job_id; *out_ok is 0 if there was none. */
TOCSIN_API int tocsin_result_delete(tocsin_db *db, int *out_ok, int64_t job_id);
/* Deletes expired results; *out_n counts them. */
TOCSIN_API int tocsin_result_sweep(tocsin_db *db, int64_t *out_n);

/* ---- locks ------------------------------------------------------------- */
/*
 * Named TTL leases with fencing tokens. A lock's token grows by one with
 * every new holder and never goes back (per name, across release and
 * expiry): a resource that remembers the highest token it saw can refuse a
 * holder whose lease was taken over.
 *
 * acquire: *out_token > 0 when `owner` now holds `name` until now + ttl_ms; 0
 *   when another owner holds an unexpired lease (nothing written). The
 *   current holder acquiring again extends its lease and keeps its token.
 *   *out_until (may be NULL) is the holder's lease end (ours or theirs).
 * renew: *out_ok is 1 when (owner, token) is the lock's current holding,
 *   which is then extended to now + ttl_ms; 0 for a stale holder. As with job
 *   leases, a lease that lapsed but that nobody took over can still be renewed.
 * release: *out_ok is 1 when (owner, token) held the lock, which is now free.
 * holder: *out_owner (owned, tocsin_free; NULL when free or expired), the
 *   current token (0 if the lock never existed) and lease end (0 when free).
 * ttl_ms >= 1; owner is a name (1..255 bytes, no control characters).
 */
TOCSIN_API int tocsin_lock_acquire(tocsin_db *db, int64_t *out_token, int64_t *out_until, const char *name,
                        const char *owner, int64_t ttl_ms);
TOCSIN_API int tocsin_lock_renew(tocsin_db *db, int *out_ok, const char *name, const char *owner,
                      int64_t token, int64_t ttl_ms);
TOCSIN_API int tocsin_lock_release(tocsin_db *db, int *out_ok, const char *name, const char *owner,
                        int64_t token);
TOCSIN_API int tocsin_lock_holder(tocsin_db *db, char **out_owner, int64_t *out_token,
                       int64_t *out_until, const char *name);
/*
 * Blocking acquire: waits until `owner` holds `name` (TOCSIN_OK, *out_token
 * and *out_until (may be NULL) as for tocsin_lock_acquire), or ends as every
 * wait ends (deadline_ms on the handle's clock, < 0: none; TOCSIN_TIMEOUT,
 * TOCSIN_INTERRUPTED when `sub` is poked, TOCSIN_CLOSED). While another owner
 * holds the lease it only reads (no write lock is taken) and sleeps until the
 * lease ends or a commit (a release) wakes it. `sub` as for tocsin_queue_wait.
 */
TOCSIN_API int tocsin_lock_wait(tocsin_db *db, int64_t *out_token, int64_t *out_until,
                                const char *name, const char *owner, int64_t ttl_ms,
                                int64_t deadline_ms, tocsin_sub *sub);

/* ---- rate limits ------------------------------------------------------- */
/*
 * Sliding-log rate limit: a call is admitted when fewer than `limit` calls
 * of `name` were admitted in the last per_ms milliseconds, so no window of
 * length per_ms ever holds more than `limit` admissions (no 2x burst at
 * window edges). *out_allowed is 1 or 0; *out_retry_after_ms (may be NULL)
 * is 0 when allowed, else how long until a call would be admitted;
 * *out_remaining (may be NULL) counts calls still admissible right now.
 * 1 <= limit <= 1000000, 1 <= per_ms <= 31622400000 (366 days).
 * Use one (limit, per_ms) per name.
 */
TOCSIN_API int tocsin_ratelimit_try(tocsin_db *db, int *out_allowed, int64_t *out_retry_after_ms,
                         int64_t *out_remaining, const char *name, int64_t limit, int64_t per_ms);
/* Deletes admissions older than their window (every name); *out_n counts them. */
TOCSIN_API int tocsin_ratelimit_sweep(tocsin_db *db, int64_t *out_n);
/* Forgets every admission of `name` (the limit starts afresh); *out_n counts them. */
TOCSIN_API int tocsin_ratelimit_reset(tocsin_db *db, int64_t *out_n, const char *name);

/* ---- cron (pure C, no database) ---------------------------------------- */
typedef struct tocsin_cron tocsin_cron;
/*
 * Parses a cron expression: 5 fields (minute hour day-of-month month
 * day-of-week) or 6 (a leading seconds field); `*`, N, A-B, steps /S on `*`
 * and ranges, A/S, lists, JAN..DEC and SUN..SAT (any case; 7 is Sunday),
 * @yearly @annually @monthly @weekly @daily @midnight @hourly, and
 * `@every <duration>` (units d h m s ms, e.g. "1h30m"). On success *out
 * (owned, free with tocsin_cron_free) is the parsed expression. On failure
 * (TOCSIN_INVALID, TOCSIN_NOMEM) *out is NULL and `err` (may be NULL; err_size
 * bytes, 256 is plenty) names the bad field: "minute field: 61 is out of range 0-59".
 */
TOCSIN_API int tocsin_cron_parse(tocsin_cron **out, const char *expr, char *err, size_t err_size);
/*
 * *out_next_ms: the first fire time strictly after after_ms (0 <= after_ms
 * <= 9999-12-31). local_time 0: UTC; 1: the process's local time zone (TZ),
 * with the daylight-saving policy of docs/sql.md. @every fires at the
 * multiples of its duration since the Unix epoch (in any zone).
 * TOCSIN_NOTFOUND (*out_next_ms = -1) when no fire time comes before year 10000;
 * TOCSIN_INVALID for a NULL argument or after_ms out of range. Thread-safe, except
 * that local time re-reads TZ (tzset): do not change TZ while another thread calls it.
 */
TOCSIN_API int tocsin_cron_next(int64_t *out_next_ms, const tocsin_cron *cron, int64_t after_ms,
                     int local_time);
TOCSIN_API void tocsin_cron_free(tocsin_cron *cron); /* accepts NULL */

/* ---- scheduler --------------------------------------------------------- */
#define TOCSIN_CATCHUP_ONCE 0 /* one job stands for all missed boundaries */
#define TOCSIN_CATCHUP_ALL 1  /* one job per missed boundary, up to max_catch_up */
#define TOCSIN_DEFAULT_MAX_CATCH_UP 100
#define TOCSIN_MAX_CATCH_UP 100000 /* max_catch_up is 1..this (0: the default) */

/* The fields of tocsin_schedule_opts, as flags for its `fields` member. */
#define TOCSIN_SCHEDULE_PRIORITY 0x01u
#define TOCSIN_SCHEDULE_MAX_ATTEMPTS 0x02u
#define TOCSIN_SCHEDULE_JOB_EXPIRES 0x04u
#define TOCSIN_SCHEDULE_CATCH_UP 0x08u
#define TOCSIN_SCHEDULE_MAX_CATCH_UP 0x10u
#define TOCSIN_SCHEDULE_LOCAL_TIME 0x20u
#define TOCSIN_SCHEDULE_META 0x40u
#define TOCSIN_SCHEDULE_ALL 0x7fu

typedef struct tocsin_schedule_opts {
    int version;            /* TOCSIN_SCHEDULE_OPTS_VERSION */
    int64_t priority;       /* of the fired jobs; default 0 */
    int max_attempts;       /* of the fired jobs, 1..TOCSIN_MAX_ATTEMPTS; 0: TOCSIN_DEFAULT_MAX_ATTEMPTS */
    int64_t job_expires_ms; /* fired jobs expire if unclaimed this long; 0: never (0..TOCSIN_MAX_TIME_MS) */
    int catch_up;           /* TOCSIN_CATCHUP_ONCE (default) or TOCSIN_CATCHUP_ALL */
    int max_catch_up;       /* ALL: most jobs fired for one overdue run, 1..TOCSIN_MAX_CATCH_UP; 0: 100 */
    int local_time;         /* 0: the expression is in UTC; 1: in the process's local time */
    const char *meta;       /* JSON object copied into the fired jobs' meta, or NULL */
    /* Version 2. tocsin_schedule_update changes only the fields flagged here
     * (TOCSIN_SCHEDULE_* bits); tocsin_schedule_set ignores it (it sets all). */
    unsigned fields;
} tocsin_schedule_opts;
#define TOCSIN_SCHEDULE_OPTS_VERSION 2
#define TOCSIN_SCHEDULE_OPTS_INIT {TOCSIN_SCHEDULE_OPTS_VERSION, 0, 0, 0, 0, 0, 0, NULL, 0u}

/* A schedule as stored. Strings are owned by the array they came in. */
typedef struct tocsin_schedule {
    char *name;
    char *cron;
    char *queue;
    char *payload;        /* JSON text */
    char *meta;           /* JSON object text or NULL */
    int64_t priority;
    int max_attempts;
    int64_t job_expires_ms;
    int catch_up;         /* TOCSIN_CATCHUP_* */
    int max_catch_up;
    int local_time;
    int paused;
    int64_t next_fire;    /* the next boundary not yet fired; -1: none (never fires again) */
    int64_t last_fire;    /* the last boundary fired; 0: none yet */
    int64_t last_job_id;  /* 0: none yet */
    int64_t fired_count;  /* jobs enqueued so far */
    int64_t skipped_count; /* ALL: missed boundaries beyond max_catch_up, not fired */
    int64_t created_at;
    int64_t updated_at;
} tocsin_schedule;
TOCSIN_API void tocsin_schedules_free(tocsin_schedule *schedules, size_t n); /* accepts NULL */

/*
 * Registers (inserts or replaces) schedule `name`: every boundary of `cron`
 * enqueues `payload` on `queue`. `opts` may be NULL. Re-registering with the
 * same expression and zone keeps next_fire (restarts neither skip nor repeat
 * a boundary); a new expression or zone restarts from now. The paused flag
 * is kept. *out_next_fire (may be NULL) is the next boundary.
 */
TOCSIN_API int tocsin_schedule_set(tocsin_db *db, int64_t *out_next_fire, const char *name, const char *cron,
                        const char *queue, const char *payload, const tocsin_schedule_opts *opts);
/*
 * Changes an existing schedule (TOCSIN_NOTFOUND if none), with field-presence
 * semantics: a NULL cron / queue / payload keeps its value; of `opts` (NULL:
 * keep every option) only the fields flagged in opts->fields change, the
 * others keep their stored values. A flagged TOCSIN_SCHEDULE_META with meta
 * NULL removes the meta. Flagged values are checked as tocsin_schedule_set
 * checks them; an unknown flag is TOCSIN_INVALID. (An opts of version 1, which
 * has no `fields`, replaces every option.) A new expression or zone restarts
 * next_fire from now; otherwise the pending boundary is kept.
 */
TOCSIN_API int tocsin_schedule_update(tocsin_db *db, int64_t *out_next_fire, const char *name,
                           const char *cron, const char *queue, const char *payload,
                           const tocsin_schedule_opts *opts);
/* Pause: no boundary fires. Resume: firing restarts at the first boundary
 * after now (boundaries while paused are not fired). TOCSIN_NOTFOUND if none. */
TOCSIN_API int tocsin_schedule_pause(tocsin_db *db, const char *name);
TOCSIN_API int tocsin_schedule_resume(tocsin_db *db, const char *name);
/* Deletes a schedule; *out_ok is 0 if there was none. */
TOCSIN_API int tocsin_schedule_remove(tocsin_db *db, int *out_ok, const char *name);
/* *out (owned, tocsin_schedules_free(s, 1)) is NULL when there is no such schedule. */
TOCSIN_API int tocsin_schedule_get(tocsin_db *db, tocsin_schedule **out, const char *name);
/* Every schedule by name; *out (owned, tocsin_schedules_free) holds *out_n. */
TOCSIN_API int tocsin_schedule_list(tocsin_db *db, tocsin_schedule **out, size_t *out_n);

/*
 * Fires every due boundary (next_fire <= now) of every unpaused schedule:
 * enqueues the jobs and advances next_fire in one write transaction, with a
 * compare-and-set on next_fire, so tickers racing on any number of handles
 * or processes fire each boundary exactly once. Missed boundaries follow the
 * schedule's catch-up policy. *out_fired (may be NULL) counts jobs enqueued.
 * Each fired job's meta carries "tocsin_schedule" (name) and
 * "tocsin_fire_at" (the boundary, ms) besides the schedule's meta.
 * A schedule that cannot fire -- its stored row is damaged (TOCSIN_CORRUPT),
 * its job is refused (TOCSIN_INVALID, TOCSIN_TOOBIG: a payload over this
 * handle's limit) -- changes nothing and does not hold back the others: they
 * fire and are committed (*out_fired counts them), and the call returns the
 * first such error, naming that schedule. Other failures (TOCSIN_BUSY, I/O)
 * roll the whole tick back.
 */
TOCSIN_API int tocsin_scheduler_tick(tocsin_db *db, int64_t *out_fired);
/* The earliest next_fire of the unpaused schedules (sleep until then); -1: none. */
TOCSIN_API int tocsin_scheduler_next_fire(tocsin_db *db, int64_t *out_ms);
/*
 * The leader lease, built on the lock "tocsin.scheduler": acquires it or,
 * when `owner` holds it, extends it to now + ttl_ms. *out_is_leader is 1 when
 * `owner` leads. Call it every ttl_ms/3 or so; a standby calling it takes over
 * once the leader's lease lapses. *out_token (may be NULL) is the lease's
 * fencing token (0 when not leader).
 */
TOCSIN_API int tocsin_scheduler_lead(tocsin_db *db, int *out_is_leader, int64_t *out_token,
                          const char *owner, int64_t ttl_ms);
/* Gives the lease up if `owner` holds it (a clean shutdown); *out_ok may be NULL. */
TOCSIN_API int tocsin_scheduler_resign(tocsin_db *db, int *out_ok, const char *owner);

/* ==== end of coordination =============================================== */

/* ==== the worker protocol (docs/worker-protocol.md) ====================== */
/*
 * What every runtime's worker is built on, so that Python, Node, Go and Ruby
 * workers cannot disagree: the core claims, decides retries, backoff,
 * hand-backs, unknown tasks and dead-worker recovery, renews leases, leads
 * the scheduler and does the housekeeping; a binding only gets the next runs,
 * calls the user's handler its runtime's way, and reports each outcome.
 *
 *     tocsin_worker_open(&w, db, &opts);          one per worker process/loop
 *     tocsin_worker_register(w, "send_email", &topts);
 *     loop:
 *       tocsin_worker_next(w, &runs, &n, timeout) -> TOCSIN_OK with n runs,
 *                                                   or as every wait ends
 *       for each run: handler(run->args, run->kwargs) in the runtime, then
 *       tocsin_worker_finish(w, NULL or tx, run, &outcome)
 *       (tocsin_worker_cancelled tells which running jobs to cancel)
 *     tocsin_worker_close(w)                       hands back what still runs
 *
 * An event loop polls tocsin_worker_fd() and calls tocsin_worker_next(w,
 * ..., 0) when it is readable or tocsin_worker_wake_in() ms have passed.
 * tocsin_worker_finish, _take, _cancelled, _poke, _fd, _in_flight and _id may
 * be called from any thread at any time; _next, _poll, _register and _flush
 * serialise on the worker; _close comes after every other call returned
 * (docs/worker-protocol.md, "Thread rule").
 */
#define TOCSIN_DEFAULT_RESULT_TTL_MS 86400000LL /* results are kept one day unless told */
#define TOCSIN_MAX_TRACE_BYTES 16384             /* recorded tracebacks are cut to this */

/* ---- the task envelope ---- */
/* A call of a task by name (docs/sql.md, "Task envelope"). */
typedef struct tocsin_task_call {
    int version;           /* TOCSIN_TASK_CALL_VERSION */
    const char *task;      /* the task's name (a name: 1..255 bytes, no control characters) */
    /* args and kwargs nest at most 999 deep: the envelope around them is one level more */
    const char *args;      /* JSON array of positional arguments; NULL: [] */
    const char *kwargs;    /* JSON object of keyword arguments; NULL: {} */
    int64_t result_ttl_ms; /* > 0: keep the result this long; 0: the task's default */
    int64_t timeout_ms;    /* > 0: a run longer than this fails the attempt (Timeout); 0: none */
} tocsin_task_call;
#define TOCSIN_TASK_CALL_VERSION 1
#define TOCSIN_TASK_CALL_INIT {TOCSIN_TASK_CALL_VERSION, NULL, NULL, NULL, 0, 0}

/* The envelope JSON of a call (*out_json owned: tocsin_free), validated. */
TOCSIN_API int tocsin_task_envelope(tocsin_db *db, char **out_json, const tocsin_task_call *call);
/* Enqueues a call on `queue` (job options in `opts`, may be NULL); *out_id is
 * the job's id, whose outcome any runtime reads with tocsin_result_*. */
TOCSIN_API int tocsin_task_enqueue(tocsin_db *db, int64_t *out_id, const char *queue,
                                   const tocsin_task_call *call, const tocsin_enqueue_opts *opts);

/* ---- workers ---- */
typedef struct tocsin_worker tocsin_worker;

typedef struct tocsin_worker_opts {
    int version;                 /* TOCSIN_WORKER_OPTS_VERSION */
    const char *worker_id;       /* a name; NULL: a fresh tocsin_owner_id(). One live worker
                                    per id: open refuses an id a live worker registered
                                    (docs/worker-protocol.md, "Dead workers") */
    const char *const *queues;   /* the queues to work, in order of precedence */
    size_t n_queues;             /* 1..64 */
    int concurrency;             /* most runs in flight at once, 1..10000; 0: 1 */
    int64_t visibility_ms;       /* lease of each claim, renewed every third of it; 0: 30000 */
    int scheduler;               /* != 0: stand for the scheduler's leadership (cron schedules) */
    int64_t scheduler_ttl_ms;    /* leader lease; 0: 10000 */
    int64_t unknown_task_delay_ms; /* first hand-back delay of a task this worker lacks
                                    (doubling up to 60 s, or this if larger, each
                                    drawn between half and all of it); 0: 1000 */
    int unknown_task_handbacks;  /* hand-backs before such a job dies (UnknownTask); 0: 20 */
} tocsin_worker_opts;
#define TOCSIN_WORKER_OPTS_VERSION 1
#define TOCSIN_WORKER_OPTS_INIT {TOCSIN_WORKER_OPTS_VERSION, NULL, NULL, 0, 0, 0, 0, 0, 0, 0}

/* What a worker knows of one of its tasks. */
typedef struct tocsin_task_opts {
    int version;             /* TOCSIN_TASK_OPTS_VERSION */
    int64_t backoff_base_ms; /* retry delay base (exponential, capped, jittered); 0: 1000 */
    int64_t backoff_cap_ms;  /* 0: TOCSIN_BACKOFF_CAP_MS */
    int64_t timeout_ms;      /* a run's default timeout when the call has none; 0: none */
    int64_t result_ttl_ms;   /* when the call says 0: > 0 this long, 0 the core's default
                                (TOCSIN_DEFAULT_RESULT_TTL_MS), < 0 forever */
    /* (version 2) runs of one job of this task at most (its retries + 1), whatever
       the call's max_attempts allowed (the lower bound wins; hand-backs do not
       count): a task called by name from any runtime keeps the retries its
       worker declared. 0: the job's own max_attempts. */
    int max_attempts;
} tocsin_task_opts;
#define TOCSIN_TASK_OPTS_VERSION 2
#define TOCSIN_TASK_OPTS_INIT {TOCSIN_TASK_OPTS_VERSION, 0, 0, 0, 0, 0}

/* One run of a task handed to the binding. Strings are owned by the run and
 * live until tocsin_worker_finish (or tocsin_worker_close) releases it. */
typedef struct tocsin_task_run {
    int64_t job_id;
    int64_t token;        /* the lease's fencing token */
    const char *queue;
    const char *task;
    const char *args;     /* JSON array */
    const char *kwargs;   /* JSON object */
    const char *meta;     /* the job's meta (trace context), JSON object or NULL */
    int attempt;          /* the job's claims so far: 1 for the first run. A hand-back
                             (shutdown, a task the worker lacks) counts too and raises
                             max_attempts by one, so max_attempts - attempt is always
                             the runs left after this one */
    int max_attempts;     /* the job's, or the task's bound (tocsin_task_opts) when that
                             is lower: attempt == max_attempts is the last run */
    int64_t timeout_ms;   /* the run's timeout (call, else the task's); 0: none */
    int64_t started_at;   /* handle's clock */
} tocsin_task_run;

/* Outcome kinds of tocsin_worker_finish. */
#define TOCSIN_OUTCOME_OK 0        /* success: `value` is the result */
#define TOCSIN_OUTCOME_ERROR 1     /* the handler raised: retried with the task's backoff
                                      while attempts remain, else recorded and dead */
#define TOCSIN_OUTCOME_FAIL 2      /* a final failure, no retry (e.g. a result that cannot
                                      be serialised, arguments that do not fit) */
#define TOCSIN_OUTCOME_HAND_BACK 3 /* not run, or stopped unfinished (shutdown): pending
                                      again after delay_ms, no attempt consumed */

typedef struct tocsin_outcome {
    int version;               /* TOCSIN_OUTCOME_VERSION */
    int kind;                  /* TOCSIN_OUTCOME_* */
    const char *value;         /* OK: JSON text of the result; NULL: null */
    const char *error_type;    /* ERROR/FAIL: a name such as "ValueError"; NULL: "Error" */
    const char *error_message; /* ERROR/FAIL: any text; NULL: "". HAND_BACK: the reason,
                                  kept as the job's last_error (NULL: unchanged) */
    const char *error_trace;   /* ERROR/FAIL: the runtime's traceback or NULL (cut to
                                  TOCSIN_MAX_TRACE_BYTES) */
    int64_t delay_ms;          /* HAND_BACK: delay (<= 0: now); ERROR: < 0 the task's backoff */
} tocsin_outcome;
#define TOCSIN_OUTCOME_VERSION 1
#define TOCSIN_OUTCOME_INIT {TOCSIN_OUTCOME_VERSION, TOCSIN_OUTCOME_OK, NULL, NULL, NULL, NULL, -1}

/*
 * Opens a worker on db (which it uses for every step; db must outlive it):
 * registers it in the database's worker registry (so that other workers can
 * tell when its process died and take its jobs back at once) and subscribes
 * to commits. *out owned: tocsin_worker_close().
 */
TOCSIN_API int tocsin_worker_open(tocsin_worker **out, tocsin_db *db, const tocsin_worker_opts *opts);
/* Declares a task this worker runs (opts may be NULL). A claimed job of a
 * task not registered is handed back (no attempt consumed) with a growing
 * delay, and dies (UnknownTask) only after unknown_task_handbacks of them. */
TOCSIN_API int tocsin_worker_register(tocsin_worker *w, const char *task, const tocsin_task_opts *opts);
/*
 * The next runs: first the worker's upkeep when due (group-commits the
 * outcomes finished since the last call, renews the leases of running jobs,
 * heartbeats the registry, takes back the jobs of dead workers, leads the
 * scheduler and fires due boundaries, sweeps expired results), then claims
 * up to the free slots (concurrency - runs in flight) across the queues in
 * one transaction. Waits up to timeout_ms (< 0: no bound, 0: do not block)
 * for claimable work. TOCSIN_OK with *out_n >= 1 runs (*out owned:
 * tocsin_free(*out) frees the array only; each run is released by
 * tocsin_worker_finish), or as every wait ends (TOCSIN_TIMEOUT,
 * TOCSIN_INTERRUPTED after tocsin_worker_poke, TOCSIN_CLOSED). Also
 * TOCSIN_TIMEOUT before the timeout, once, when an upkeep found running jobs
 * cancelled or whose lease was lost: read tocsin_worker_cancelled. Invalid
 * envelopes fail (InvalidEnvelope) and unknown tasks are handed back here,
 * never returned. A schedule that cannot fire (tocsin_scheduler_tick: a
 * damaged row, a refused job) holds back neither the other schedules nor the
 * worker's jobs: it is tried again every second, and a call that hands out no
 * run returns its error (TOCSIN_CORRUPT, TOCSIN_INVALID or TOCSIN_TOOBIG,
 * naming the schedule) when it first appears and then once a minute while it
 * lasts; the worker goes on, so log it and call again. Any other failed
 * step (its error returned: the write lock held past the busy timeout, an
 * I/O error; nothing is lost) is tried again 100 ms later on the handle's
 * clock: until then the next call only hands out reserved runs, waits out the
 * pause (or returns TOCSIN_TIMEOUT at its timeout; tocsin_worker_poll at
 * once), and tocsin_worker_wake_in counts it in -- so a caller reports the
 * error and calls again, without a pause of its own.
 */
TOCSIN_API int tocsin_worker_next(tocsin_worker *w, tocsin_task_run ***out, size_t *out_n,
                                  int timeout_ms);
/*
 * tocsin_worker_next(w, out, out_n, 0) that never blocks, for an event loop's
 * own thread: when another connection holds the write lock it returns
 * TOCSIN_BUSY at once instead of waiting (nothing is lost: batched outcomes
 * stay batched); call tocsin_worker_next from a thread that may block then.
 * TOCSIN_TIMEOUT when nothing is claimable now.
 */
TOCSIN_API int tocsin_worker_poll(tocsin_worker *w, tocsin_task_run ***out, size_t *out_n);
/*
 * The part of tocsin_worker_next that needs no database: hands reserved runs
 * (claimed ahead by an earlier step, see docs/worker-protocol.md) into the
 * free slots, never blocks and never touches the database -- for a binding
 * that keeps a runtime lock (a GIL) across it. TOCSIN_TIMEOUT when a step is
 * due (no reserved run, the reserve needs its refill, batched outcomes are
 * due, or the leases' renewal is: a reserved run is handed out only while its
 * lease is known to hold): call tocsin_worker_next then. While another thread
 * is in a step (which refills the reserve) it hands out all the reserve holds.
 */
TOCSIN_API int tocsin_worker_take(tocsin_worker *w, tocsin_task_run ***out, size_t *out_n);
/*
 * Records a run's outcome and releases the run. tx NULL: batched with the
 * other outcomes of this worker and committed by the next tocsin_worker_next
 * (or tocsin_worker_flush); tx a transaction handle (tocsin_tx_begin on the
 * worker's db): written inside it at once, so the task's own database effects
 * and its ack commit together (exactly-once effects), and TOCSIN_LEASE_LOST
 * (nothing written) when the lease is no longer this run's -- roll tx back,
 * then finish the run again without tx (HAND_BACK, say: the core counts it
 * as lost, writes nothing and releases the run; until then it holds a slot).
 * Outcome ERROR retries with the task's backoff while attempts remain, else
 * records the error (type, message, trace) as the result and kills the job;
 * FAIL does the latter at once; HAND_BACK makes it pending again after
 * delay_ms without consuming an attempt. An outcome whose contents the core
 * cannot store (a result over the payload limit or not JSON, an error type
 * that is not a name, an error message over the payload limit, a text that is
 * not UTF-8, an ERROR or HAND_BACK delay_ms past the time limit) is refused
 * with tx (nothing written: roll tx back, then finish again without it);
 * without tx it is
 * recorded as a final failure instead, type "InvalidResult" (a result) or
 * "InvalidOutcome", its message naming what was refused, and the call
 * returns TOCSIN_OK: a run always ends. A run is finished on the worker that
 * handed it out (another worker: TOCSIN_INVALID), once: a second finish, also
 * from another thread while the first is under way, is TOCSIN_INVALID. After
 * TOCSIN_OK the run is released (freed by a later step): do not pass it again.
 */
TOCSIN_API int tocsin_worker_finish(tocsin_worker *w, tocsin_db *tx, tocsin_task_run *run,
                                    const tocsin_outcome *outcome);
/* Commits the batched outcomes now. *out_lost (may be NULL) counts those whose
 * lease was lost meanwhile (another worker has the job: nothing written).
 * The batch is written in a write operation of db: inside a transaction the
 * caller opened on db itself (tocsin_begin) it commits or rolls back with it,
 * and the runs are released either way -- a rolled-back outcome's job runs
 * again when its lease lapses. Workers flush outside transactions of their own. */
TOCSIN_API int tocsin_worker_flush(tocsin_worker *w, size_t *out_lost);
/* Job ids among the running ones whose handler should stop: cancelled, or
 * whose lease was lost (*out owned: tocsin_free). Checked at each upkeep. */
TOCSIN_API int tocsin_worker_cancelled(tocsin_worker *w, int64_t **out_ids, size_t *out_n);
/* The descriptor to poll, and how long until the next upkeep is due (ms, >= 0). */
TOCSIN_API int tocsin_worker_fd(tocsin_worker *w);
TOCSIN_API int64_t tocsin_worker_wake_in(tocsin_worker *w);
/* Ends a blocked tocsin_worker_next with TOCSIN_INTERRUPTED (any thread). */
TOCSIN_API int tocsin_worker_poke(tocsin_worker *w);
/* Graceful shutdown (any thread): from now on the worker claims nothing and
 * hands out nothing (tocsin_worker_next and poll keep the upkeep -- lease
 * renewal, the group commit of the runs that finish -- and return no run;
 * tocsin_worker_take says TOCSIN_TIMEOUT), and its next step hands the reserve
 * back (pending again, no attempt consumed). The runs in flight finish as
 * usual; tocsin_worker_close hands back the rest. Wakes a blocked next. */
TOCSIN_API int tocsin_worker_drain(tocsin_worker *w);
/* Runs in flight (handed out, not finished). */
TOCSIN_API size_t tocsin_worker_in_flight(tocsin_worker *w);
/* The worker's id (opts.worker_id, or the one it made); valid until close. */
TOCSIN_API const char *tocsin_worker_id(const tocsin_worker *w);
/* Flushes, hands back every run still in flight (no attempt consumed),
 * resigns the scheduler's lease, leaves the registry and frees. Accepts NULL.
 * It always frees: when the write lock stays taken past the busy timeout (or
 * the caller's own transaction on db holds it), it returns TOCSIN_BUSY and
 * what it could not write is not written -- the batched outcomes and the runs
 * in flight keep their leases until they lapse, and those jobs run again
 * (at least once, never lost). Close with no transaction of yours open. */
TOCSIN_API int tocsin_worker_close(tocsin_worker *w);
/* ==== end of the worker protocol ========================================= */

/* ---- SQL surface ------------------------------------------------------- */
/* Registers the tocsin_* SQL functions (docs/sql.md) on the handle's connection. */
TOCSIN_API int tocsin_register_sql(tocsin_db *db);
/*
 * An extension entry point for the library build (not in the loadable extension,
 * whose entry point is sqlite3_tocsin_init): wraps `conn` -- a connection of the
 * SQLite this library links -- and registers the SQL functions on it, with a
 * wrapper freed when the connection closes. `pApi` is ignored. Its signature fits
 * sqlite3_auto_extension(), so that every connection the process opens afterwards
 * through that same copy of SQLite (e.g. a database/sql driver linked to the
 * system libsqlite3) gets the SQL surface. Returns an SQLite result code; on
 * failure *pzErrMsg (may be NULL) is set with sqlite3_mprintf.
 */
TOCSIN_API int tocsin_sql_init(struct sqlite3 *conn, char **pzErrMsg, const void *pApi);

#ifdef __cplusplus
}
#endif
#endif /* TOCSIN_H */
