/*
 * The on-disk format: schema v2 (docs/schema.md documents every column).
 * Migrations are forward-only scripts, one per version, run in one transaction.
 */
#include "internal.h"

#include <stdio.h>

/*
 * The three tables whose ids readers and fencing rely on never seeing twice.
 * Their columns and indexes are the same in v1 and v2 (v2 only drops
 * AUTOINCREMENT from the id): one text serves both scripts.
 */
/* The jobs' columns after the id. The state CHECK is written with ORs, not
 * IN: SQLite 3.40 builds an ephemeral table for an IN list of 3+ values each
 * time it checks a row (~30% of a claim's CPU). */
#define JOBS_COLUMNS \
    "  queue TEXT NOT NULL," \
    "  state TEXT NOT NULL" \
    "    CHECK (state = 'scheduled' OR state = 'pending' OR state = 'processing')," \
    "  payload TEXT NOT NULL," \
    "  meta TEXT," \
    "  priority INTEGER NOT NULL DEFAULT 0," \
    "  attempts INTEGER NOT NULL DEFAULT 0," \
    "  max_attempts INTEGER NOT NULL CHECK (max_attempts BETWEEN 1 AND 1000000)," \
    "  run_at INTEGER NOT NULL," \
    "  created_at INTEGER NOT NULL," \
    "  expires_at INTEGER," \
    "  lease_until INTEGER," \
    "  worker TEXT," \
    "  unique_key TEXT," \
    "  last_error TEXT," \
    "  handbacks INTEGER NOT NULL DEFAULT 0 CHECK (handbacks >= 0)," \
    "  CHECK (attempts BETWEEN 0 AND max_attempts)," \
    "  CHECK ((state = 'processing') = (lease_until IS NOT NULL))" \
    ");"

/* Claim and lease in one index. Per queue: the processing entries by lease
 * end, latest first, then the pending ones (lease_until NULL sorts last in a
 * DESC column) in claim order. The next job to claim is the first pending
 * entry and its lease entry lands beside it, on the same page while few jobs
 * are in flight; new jobs append at the end. The trailing `state` makes the
 * counts of stats index-only (SQLite 3.40 does not count a column of the
 * WHERE clause as covered). */
#define JOBS_INDEXES \
    "CREATE INDEX _tocsin_jobs_claim" \
    "  ON _tocsin_jobs(queue, lease_until DESC, priority DESC, run_at, id, state)" \
    "  WHERE state <> 'scheduled';", \
    "CREATE INDEX _tocsin_jobs_scheduled ON _tocsin_jobs(queue, run_at, priority, state)" \
    "  WHERE state = 'scheduled';", \
    "CREATE INDEX _tocsin_jobs_expiry ON _tocsin_jobs(queue, expires_at)" \
    "  WHERE expires_at IS NOT NULL AND state <> 'processing';", \
    "CREATE UNIQUE INDEX _tocsin_jobs_unique ON _tocsin_jobs(queue, unique_key)" \
    "  WHERE unique_key IS NOT NULL;"

#define EVENTS_COLUMNS \
    "  topic TEXT NOT NULL," \
    "  key TEXT," \
    "  payload TEXT NOT NULL," \
    "  meta TEXT," \
    "  created_at INTEGER NOT NULL" \
    ");"
#define EVENTS_INDEXES "CREATE INDEX _tocsin_events_topic ON _tocsin_events(topic, id);"

#define NOTIFICATIONS_COLUMNS \
    "  channel TEXT NOT NULL," \
    "  payload TEXT NOT NULL," \
    "  meta TEXT," \
    "  created_at INTEGER NOT NULL" \
    ");"
#define NOTIFICATIONS_INDEXES \
    "CREATE INDEX _tocsin_notifications_channel ON _tocsin_notifications(channel, id);", \
    "CREATE INDEX _tocsin_notifications_age ON _tocsin_notifications(created_at);"

/*
 * Schema v1, one statement per string: a single literal would pass the 4095
 * characters that C11 guarantees a compiler accepts (-pedantic refuses it).
 */
static const char *const SCHEMA_V1[] = {
    "CREATE TABLE _tocsin_meta("
    "  key TEXT PRIMARY KEY NOT NULL,"
    "  value TEXT"
    ") WITHOUT ROWID;",
    /* queue: live jobs (scheduled, pending or processing). The CHECKs pin what
     * the fencing token (id * 2^20 + attempts) and the indexes rely on. */
    "CREATE TABLE _tocsin_jobs("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT CHECK (id BETWEEN 1 AND 8796093022207)," JOBS_COLUMNS,
    JOBS_INDEXES,
    /* queue: dead letters, keyed by the job's id */
    "CREATE TABLE _tocsin_dead("
    "  id INTEGER PRIMARY KEY,"
    "  queue TEXT NOT NULL,"
    "  payload TEXT NOT NULL,"
    "  meta TEXT,"
    "  priority INTEGER NOT NULL,"
    "  attempts INTEGER NOT NULL,"
    "  max_attempts INTEGER NOT NULL,"
    "  run_at INTEGER NOT NULL,"
    "  created_at INTEGER NOT NULL,"
    "  expires_at INTEGER,"
    "  worker TEXT,"
    "  unique_key TEXT,"
    "  last_error TEXT,"
    "  reason TEXT NOT NULL CHECK (reason = 'failed' OR reason = 'max_attempts'"
    "    OR reason = 'expired' OR reason = 'cancelled'),"
    "  died_at INTEGER NOT NULL"
    ");",
    "CREATE INDEX _tocsin_dead_queue ON _tocsin_dead(queue, id);",
    "CREATE INDEX _tocsin_dead_died ON _tocsin_dead(died_at);",
    /* queue: per-queue settings */
    "CREATE TABLE _tocsin_queues("
    "  name TEXT PRIMARY KEY NOT NULL,"
    "  paused INTEGER NOT NULL DEFAULT 0,"
    "  updated_at INTEGER NOT NULL"
    ") WITHOUT ROWID;",
    /* streams */
    "CREATE TABLE _tocsin_events("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT," EVENTS_COLUMNS,
    EVENTS_INDEXES,
    "CREATE TABLE _tocsin_offsets("
    "  consumer TEXT NOT NULL,"
    "  topic TEXT NOT NULL,"
    "  position INTEGER NOT NULL,"
    "  updated_at INTEGER NOT NULL,"
    "  PRIMARY KEY (consumer, topic)"
    ") WITHOUT ROWID;",
    "CREATE INDEX _tocsin_offsets_topic ON _tocsin_offsets(topic, position);",
    /* notifications */
    "CREATE TABLE _tocsin_notifications("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT," NOTIFICATIONS_COLUMNS,
    NOTIFICATIONS_INDEXES,
    /* results: a job's value or task error (docs/schema.md) */
    "CREATE TABLE _tocsin_results("
    "  job_id INTEGER PRIMARY KEY,"
    "  status TEXT NOT NULL CHECK (status IN ('ok','error')),"
    "  value TEXT,"
    "  error TEXT,"
    "  created_at INTEGER NOT NULL,"
    "  expires_at INTEGER,"
    "  CHECK ((status = 'ok' AND value IS NOT NULL AND error IS NULL)"
    "      OR (status = 'error' AND value IS NULL AND error IS NOT NULL))"
    ");",
    "CREATE INDEX _tocsin_results_expiry ON _tocsin_results(expires_at)"
    "  WHERE expires_at IS NOT NULL;",
    /* locks: one row per name, kept after release so tokens never go back */
    "CREATE TABLE _tocsin_locks("
    "  name TEXT PRIMARY KEY NOT NULL,"
    "  owner TEXT,"
    "  token INTEGER NOT NULL CHECK (token >= 1),"
    "  acquired_at INTEGER,"
    "  expires_at INTEGER,"
    "  updated_at INTEGER NOT NULL,"
    "  CHECK ((owner IS NULL) = (expires_at IS NULL))"
    ") WITHOUT ROWID;",
    /* rate limits: the sliding log of admissions */
    "CREATE TABLE _tocsin_rate_hits("
    "  id INTEGER PRIMARY KEY,"
    "  name TEXT NOT NULL,"
    "  at INTEGER NOT NULL,"
    "  expires_at INTEGER NOT NULL"
    ");",
    "CREATE INDEX _tocsin_rate_hits_name ON _tocsin_rate_hits(name, at);",
    "CREATE INDEX _tocsin_rate_hits_expiry ON _tocsin_rate_hits(expires_at);",
    /* scheduler */
    "CREATE TABLE _tocsin_schedules("
    "  name TEXT PRIMARY KEY NOT NULL,"
    "  cron TEXT NOT NULL,"
    "  queue TEXT NOT NULL,"
    "  payload TEXT NOT NULL,"
    "  meta TEXT,"
    "  priority INTEGER NOT NULL DEFAULT 0,"
    "  max_attempts INTEGER NOT NULL CHECK (max_attempts >= 1),"
    "  job_expires_ms INTEGER NOT NULL DEFAULT 0 CHECK (job_expires_ms >= 0),"
    "  catch_up TEXT NOT NULL CHECK (catch_up IN ('once','all')),"
    "  max_catch_up INTEGER NOT NULL CHECK (max_catch_up >= 1),"
    "  local_time INTEGER NOT NULL DEFAULT 0 CHECK (local_time IN (0,1)),"
    "  paused INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0,1)),"
    "  next_fire INTEGER,"
    "  last_fire INTEGER,"
    "  last_job_id INTEGER,"
    "  fired_count INTEGER NOT NULL DEFAULT 0,"
    "  skipped_count INTEGER NOT NULL DEFAULT 0,"
    "  created_at INTEGER NOT NULL,"
    "  updated_at INTEGER NOT NULL"
    ") WITHOUT ROWID;",
    "CREATE INDEX _tocsin_schedules_due ON _tocsin_schedules(next_fire) WHERE paused = 0;",
    /* the worker registry: live worker processes (docs/worker-protocol.md) */
    "CREATE TABLE _tocsin_workers("
    "  id TEXT PRIMARY KEY NOT NULL,"
    "  host TEXT NOT NULL,"
    "  pid INTEGER NOT NULL,"
    "  pid_start INTEGER NOT NULL,"
    "  queues TEXT NOT NULL,"
    "  started_at INTEGER NOT NULL,"
    "  heartbeat_at INTEGER NOT NULL,"
    "  lease_ms INTEGER NOT NULL CHECK (lease_ms >= 1)"
    ") WITHOUT ROWID;",
    NULL};

/*
 * Schema v2: job ids, event offsets and notification ids without
 * AUTOINCREMENT, which rewrites the table's sqlite_sequence row (a page of its
 * own) in every inserting transaction: one page in three of a single
 * enqueue's commit. The sqlite_sequence rows stay and keep their meaning --
 * with the table's max(id), the highest id ever handed out -- but are written
 * only when a table's highest row is deleted (the trigger), and inserts name
 * their id: TC_NEXT_ID (internal.h), AUTOINCREMENT's own rule. The rebuild is
 * SQLite's recipe for a changed table (rename, create, copy, drop); renaming
 * an AUTOINCREMENT table renames its sqlite_sequence row, which the copy then
 * carries over. The statements name main.sqlite_sequence (a TEMP AUTOINCREMENT
 * table gives the connection a temp.sqlite_sequence, found first otherwise); the
 * trigger's body cannot (SQLite refuses a schema there), and needs not: a
 * trigger of main resolves its names in main.
 */
#define REBUILD(table, columns)                                                            \
    "ALTER TABLE " table " RENAME TO " table "_v1;",                                       \
    "CREATE TABLE " table "(  id INTEGER PRIMARY KEY" columns,                             \
    "INSERT INTO " table " SELECT * FROM " table "_v1;",                                   \
    "INSERT INTO main.sqlite_sequence(name, seq) SELECT '" table "',"                       \
    " coalesce((SELECT seq FROM main.sqlite_sequence WHERE name = '" table "_v1'), 0);",    \
    "DROP TABLE " table "_v1;",                                                            \
    "CREATE TRIGGER " table "_top AFTER DELETE ON " table                                  \
    " WHEN NOT EXISTS (SELECT 1 FROM " table " WHERE id > old.id)"                         \
    " AND old.id > coalesce((SELECT seq FROM sqlite_sequence WHERE name = '" table "'), 0)" \
    " BEGIN UPDATE sqlite_sequence SET seq = old.id WHERE name = '" table "';"             \
    " INSERT INTO sqlite_sequence(name, seq) SELECT '" table "', old.id"                    \
    " WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = '" table "'); END;"

/*
 * With no AUTOINCREMENT table left, VACUUM (and VACUUM INTO) would drop
 * sqlite_sequence and its rows: SQLite recreates it in the new file only for
 * an AUTOINCREMENT table. The ids of deleted top rows would then be handed
 * out again (and the fencing tokens of their claims would match again), and
 * every write would fail to prepare ("no such table: sqlite_sequence"). This
 * table, never written, keeps sqlite_sequence a table VACUUM copies. A v2 file
 * made before it is given it by the first read-write handle (tc_schema_install).
 */
#define SEQUENCE_KEEPER "CREATE TABLE IF NOT EXISTS _tocsin_sequence_keeper(id INTEGER PRIMARY KEY AUTOINCREMENT);"

static const char *const SCHEMA_V2[] = {
    REBUILD("_tocsin_jobs", " CHECK (id BETWEEN 1 AND 8796093022207)," JOBS_COLUMNS),
    JOBS_INDEXES,
    REBUILD("_tocsin_events", "," EVENTS_COLUMNS),
    EVENTS_INDEXES,
    REBUILD("_tocsin_notifications", "," NOTIFICATIONS_COLUMNS),
    NOTIFICATIONS_INDEXES,
    SEQUENCE_KEEPER,
    NULL};

/* MIGRATIONS[v-1] brings schema v-1 to v (v0 = nothing): NULL-terminated
 * lists of statements. */
static const char *const *const MIGRATIONS[] = {SCHEMA_V1, SCHEMA_V2};
#define N_MIGRATIONS ((int)(sizeof MIGRATIONS / sizeof MIGRATIONS[0]))

/* The stored schema_version must be exactly a decimal integer >= 1 as the
 * installer writes it ('1'): '1.9', '1abc', ' 1', '01' or a REAL 1.0 are not
 * read as v1 (a file some other program touched is reported, not guessed).
 * A version of more digits than an int holds is a newer one all the same
 * (TC_VERSION_HUGE). shown gets the value for messages: quoted, at most 40 bytes,
 * control bytes as '?' ('1.9'), or what it is when it is not text (NULL, a REAL). */
#define TC_VERSION_HUGE 1000000000
static int parse_version(sqlite3_stmt *st, int *out, char *shown, size_t cap) {
    const unsigned char *t;
    int n, i, v = 0, type = sqlite3_column_type(st, 0);
    size_t k;
    if (type != SQLITE_TEXT && type != SQLITE_INTEGER) {
        snprintf(shown, cap, "%s", type == SQLITE_NULL ? "NULL" : type == SQLITE_FLOAT ? "a REAL" : "a BLOB");
        return 0;
    }
    t = sqlite3_column_text(st, 0);
    n = sqlite3_column_bytes(st, 0);
    shown[0] = '\'';
    for (k = 1; t && k <= (size_t)n && k <= 40 && k + 5 < cap; k++)
        shown[k] = t[k - 1] < 0x20 || t[k - 1] == 0x7f ? '?' : (char)t[k - 1];
    snprintf(shown + k, cap - k, "%s'", t && (size_t)n >= k ? "..." : "");
    if (!t || n < 1 || t[0] == '0') return 0;
    for (i = 0; i < n; i++) {
        if (t[i] < '0' || t[i] > '9') return 0;
        v = v < TC_VERSION_HUGE / 10 ? v * 10 + (t[i] - '0') : TC_VERSION_HUGE; /* never wraps */
    }
    *out = v;
    return 1;
}

/* The v2 triggers that keep a deleted top id from being handed out again. */
static const char *const TOP_TRIGGERS[] = {"_tocsin_jobs_top", "_tocsin_events_top", "_tocsin_notifications_top"};

/* Reads the stored schema version: 0 when the database has no tocsin schema.
 * shown (cap >= 48) gets the stored text for messages; *keeper is 1 when
 * _tocsin_sequence_keeper exists; bit i of *tops is set when TOP_TRIGGERS[i]
 * exists. */
static int read_version(tocsin_db *db, int *out, char *shown, size_t cap, int *keeper, int *tops) {
    sqlite3_stmt *st = NULL;
    int rc, valid = 0, meta;
    *out = 0;
    *keeper = 0;
    *tops = 0;
    shown[0] = 0;
    rc = tc_prepare(db, "SELECT EXISTS (SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = '_tocsin_meta'),"
                        " EXISTS (SELECT 1 FROM main.sqlite_master WHERE type = 'table'"
                        " AND name = '_tocsin_sequence_keeper')",
                    0, &st);
    if (rc != SQLITE_OK) return tc_sqlerr(db, rc, "read schema");
    rc = tc_step(db, st);
    meta = rc == SQLITE_ROW && sqlite3_column_int(st, 0);
    if (rc == SQLITE_ROW) *keeper = sqlite3_column_int(st, 1);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW) return tc_sqlerr(db, rc, "read schema");
    if (!meta) return TOCSIN_OK;
    rc = tc_prepare(db, "SELECT value FROM _tocsin_meta WHERE key = 'schema_version'",
                            0, &st);
    if (rc != SQLITE_OK) return tc_sqlerr(db, rc, "read schema version");
    rc = tc_step(db, st);
    if (rc == SQLITE_ROW) valid = parse_version(st, out, shown, cap);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return tc_sqlerr(db, rc, "read schema version");
    if (valid && *out == TOCSIN_SCHEMA_VERSION) { /* a short statement: a host's low limits */
        rc = tc_prepare(db, "SELECT name FROM main.sqlite_master WHERE type = 'trigger' AND name LIKE '%_top'", 0, &st);
        if (rc != SQLITE_OK) return tc_sqlerr(db, rc, "read schema");
        while ((rc = tc_step(db, st)) == SQLITE_ROW) {
            const char *name = (const char *)sqlite3_column_text(st, 0);
            int i;
            for (i = 0; name && i < 3; i++)
                if (strcmp(name, TOP_TRIGGERS[i]) == 0) *tops |= 1 << i;
        }
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE) return tc_sqlerr(db, rc, "read schema");
    }
    if (!valid) {
        *out = 0;
        if (rc == SQLITE_ROW)
            return tc_err(db, TOCSIN_CORRUPT,
                          "_tocsin_meta exists but its schema_version (%s) is malformed, not a version "
                          "number (decimal digits, 1 or more, no leading zero)", shown);
        return tc_err(db, TOCSIN_CORRUPT,
                      "_tocsin_meta exists but its schema_version is missing, not a version number "
                      "(decimal digits, 1 or more)");
    }
    return TOCSIN_OK;
}

/* A v2 schema whose <table>_top trigger was dropped (by hand: tocsin never
 * drops it) would hand the id of a deleted top row out again, and with it the
 * fencing tokens of that job's claims: refused, not used silently. */
static int missing_trigger(tocsin_db *db, int tops) {
    int i;
    for (i = 0; i < 3; i++)
        if (!(tops & (1 << i)))
            return tc_err(db, TOCSIN_CORRUPT,
                          "the tocsin schema v%d lacks its trigger %s (dropped by hand?): without it "
                          "the id of a deleted highest row would be handed out again",
                          TOCSIN_SCHEMA_VERSION, TOP_TRIGGERS[i]);
    return TOCSIN_OK;
}

/* The refusal of a schema newer than this library's; shown is read_version's
 * quoted text of the stored version. */
static int newer_schema(tocsin_db *db, const char *shown) {
    return tc_err(db, TOCSIN_VERSION,
                  "the database has tocsin schema v%.*s, newer than this library's v%d: upgrade tocsin",
                  (int)strlen(shown) - 2, shown + 1, TOCSIN_SCHEMA_VERSION);
}

int tc_schema_precheck(tocsin_db *db) {
    int v, keeper, tops, rc;
    char shown[48];
    if ((rc = read_version(db, &v, shown, sizeof shown, &keeper, &tops)) != TOCSIN_OK) return rc;
    if (v == TOCSIN_SCHEMA_VERSION) return missing_trigger(db, tops);
    return v > TOCSIN_SCHEMA_VERSION ? newer_schema(db, shown) : TOCSIN_OK;
}

/*
 * Installs or migrates the schema of a host's connection (the extension,
 * tocsin_wrap) on a private connection to the same file, in that connection's
 * one transaction, so that nothing the host's connection does -- a progress
 * handler or sqlite3_interrupt() that stops our statements and then our
 * ROLLBACK too, its own open transaction, a later statement of it that fails,
 * its COMMIT -- can leave a half-migrated schema in the file: the private
 * transaction commits all of it or none. The private connection runs the one
 * installer (tc_schema_install on a connection tocsin owns, as tocsin_open
 * does). *done is set when the schema was installed so; it stays 0 where a
 * private connection cannot do it, and the caller then installs on the host's
 * connection (a fresh schema, which then joins the host's transaction) or
 * refuses (a migration, which must not: see the message below).
 *
 * A private connection can do it when the file is one another connection can
 * open (not in memory, not TEMP, not a deserialized image), the host's
 * connection holds no transaction on it (it is in autocommit mode, and no
 * statement of it reads the file: the version check that found the work to do
 * has ended; inside a host's BEGIN that check opened the host's read
 * transaction, whose snapshot would not see our commit), and it does not keep
 * its locks between transactions (locking_mode EXCLUSIVE would keep our
 * connection out until it gave up).
 */
static int install_privately(tocsin_db *db, int *done, int *out_version) {
    const char *path = sqlite3_db_filename(db->conn, "main");
    sqlite3_vfs *vfs = NULL;
    sqlite3_stmt *st = NULL;
    tocsin_db *p = NULL;
    char shown[48];
    int rc, pv = 0, keeper, tops, exclusive = 0;
    *done = 0;
    if (!path || !*path) return TOCSIN_OK;
    if (sqlite3_file_control(db->conn, "main", SQLITE_FCNTL_VFS_POINTER, &vfs) != SQLITE_OK || !vfs ||
        (vfs->zName && strcmp(vfs->zName, "memdb") == 0))
        return TOCSIN_OK;
    if (sqlite3_txn_state(db->conn, "main") != SQLITE_TXN_NONE) return TOCSIN_OK;
    rc = tc_prepare(db, "PRAGMA main.locking_mode", 0, &st);
    if (rc == SQLITE_OK && (rc = tc_step(db, st)) == SQLITE_ROW) {
        const char *m = (const char *)sqlite3_column_text(st, 0);
        exclusive = m && sqlite3_stricmp(m, "exclusive") == 0;
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    if ((rc & 0xff) == SQLITE_AUTH) rc = SQLITE_OK; /* a sandbox's authorizer: assume the default */
    if (rc != SQLITE_OK && rc != SQLITE_DONE) return tc_sqlerr(db, rc, "read the connection's locking mode");
    if (exclusive) return TOCSIN_OK;
    if ((rc = tc_open_private(db, &p, 0)) != TOCSIN_OK) return rc;
    rc = tc_schema_install(p, &pv);
    TC_KEEP_ERROR(tocsin_close(p));
    if (rc != TOCSIN_OK) return rc;
    /* the host's connection sees the committed schema from its next read on */
    if ((rc = read_version(db, &pv, shown, sizeof shown, &keeper, &tops)) != TOCSIN_OK) return rc;
    if (pv > TOCSIN_SCHEMA_VERSION) return newer_schema(db, shown); /* a newer library, meanwhile */
    if (pv != TOCSIN_SCHEMA_VERSION)
        return tc_err(db, TOCSIN_ERROR, "install schema: the schema v%d installed on a private connection to %s "
                                        "is not what this connection reads (v%d)",
                      TOCSIN_SCHEMA_VERSION, path, pv);
    *done = 1;
    *out_version = pv;
    return TOCSIN_OK;
}

int tc_schema_install(tocsin_db *db, int *out_version) {
    tc_op op;
    int v, rc, from, legacy = -1, keeper, tops, read_only, file_ro;
    char sql[160], shown[48];
    *out_version = 0;
    if ((rc = read_version(db, &v, shown, sizeof shown, &keeper, &tops)) != TOCSIN_OK) return rc;
    if (v > TOCSIN_SCHEMA_VERSION) return newer_schema(db, shown);
    if (v == TOCSIN_SCHEMA_VERSION && (rc = missing_trigger(db, tops)) != TOCSIN_OK) return rc;
    if (v == TOCSIN_SCHEMA_VERSION && keeper) {
        *out_version = v;
        return TOCSIN_OK;
    }
    /* PRAGMA query_only on a host's connection: say so now, not "cannot begin a
     * write transaction" from a call that only reads. A file SQLite could open
     * only read-only (its permissions, a read-only medium) is read-only too, for
     * tocsin_open's read-write handle as well. */
    file_ro = sqlite3_db_readonly(db->conn, "main") == 1;
    read_only = db->read_only || file_ro || (!db->owns_conn && tc_query_only(db->conn));
    if (v == TOCSIN_SCHEMA_VERSION && read_only) { /* its reads need no keeper: a writer adds it */
        *out_version = v;
        return TOCSIN_OK;
    }
    if (read_only)
        return tc_err(db, TOCSIN_READONLY,
                      "the database has %s; open it read-write once to install schema v%d%s",
                      v ? "an older tocsin schema" : "no tocsin schema", TOCSIN_SCHEMA_VERSION,
                      file_ro && !db->read_only ? " (the file is read-only to this process)" : "");
    if (!db->owns_conn) {
        int done;
        if ((rc = install_privately(db, &done, out_version)) != TOCSIN_OK || done) return rc;
        /* A migration joins no transaction of the host's: there it could not be
         * all or nothing (its ROLLBACK stopped by the host's progress handler, or
         * the host's COMMIT after a failure, would keep half of it). */
        if (v >= 1 && v < TOCSIN_SCHEMA_VERSION &&
            (!sqlite3_get_autocommit(db->conn) || sqlite3_txn_state(db->conn, "main") != SQLITE_TXN_NONE))
            return tc_err(db, TOCSIN_ERROR,
                          "this file's tocsin schema is v%d and must be migrated to v%d: call "
                          "tocsin_bootstrap() outside a transaction, in a statement of its own (SELECT "
                          "tocsin_bootstrap()), or open the file once with tocsin_open(). tocsin migrates "
                          "only there, on a connection of its own, so that the migration commits whole or "
                          "not at all, never with this connection's transaction. Nothing was written",
                          v, TOCSIN_SCHEMA_VERSION);
    }
    if ((rc = tc_op_open(db, &op, 1)) != TOCSIN_OK) return rc;
    /* Another process may have installed it while we waited for the lock. */
    rc = read_version(db, &v, shown, sizeof shown, &keeper, &tops);
    if (rc == TOCSIN_OK && v == TOCSIN_SCHEMA_VERSION) { /* a v2 file from before the keeper */
        rc = missing_trigger(db, tops);
        if (rc == TOCSIN_OK && !keeper) rc = tc_exec(db, SEQUENCE_KEEPER, "install schema");
        rc = tc_op_end(db, &op, rc);
        if (rc == TOCSIN_OK) *out_version = v;
        return rc;
    }
    if (rc == TOCSIN_OK && v > TOCSIN_SCHEMA_VERSION) /* a newer library installed it meanwhile */
        rc = newer_schema(db, shown);
    from = v;
    /* The v2 rebuild renames tables. SQLite's ALTER TABLE RENAME (unless
     * legacy_alter_table is on) checks every view and trigger of the schema
     * first, and would refuse the install for an application's view or trigger
     * that no longer resolves (a view on a table renamed under
     * legacy_alter_table: "error in view v: no such table"), though the rename
     * concerns none of them; it would also point an application's view on a v1
     * _tocsin_jobs at _tocsin_jobs_v1, dropped a statement later. The legacy
     * rename touches only the table (and its sqlite_sequence row). */
    if (rc == TOCSIN_OK && v < N_MIGRATIONS)
        sqlite3_db_config(db->conn, SQLITE_DBCONFIG_LEGACY_ALTER_TABLE, -1, &legacy);
    if (legacy == 0) sqlite3_db_config(db->conn, SQLITE_DBCONFIG_LEGACY_ALTER_TABLE, 1, (int *)NULL);
    for (; rc == TOCSIN_OK && v < N_MIGRATIONS; v++) {
        const char *const *sql;
        for (sql = MIGRATIONS[v]; rc == TOCSIN_OK && *sql; sql++) rc = tc_exec(db, *sql, "install schema");
    }
    if (legacy == 0) sqlite3_db_config(db->conn, SQLITE_DBCONFIG_LEGACY_ALTER_TABLE, 0, (int *)NULL);
    if (rc != TOCSIN_OK && (tc_tls()->sqlite_rc & 0xff) == SQLITE_LOCKED && (tc_running(db->conn) & TC_RUN_ANY))
        rc = tc_err(db, TOCSIN_ERROR,
                    "install schema: the tocsin tables %s, and installing them drops a table, which "
                    "SQLite refuses while another statement of this connection is running (as in "
                    "SELECT tocsin_...(x) FROM t on a database without them): install them first, "
                    "with tocsin_bootstrap() or any tocsin call in a statement of its own",
                    from ? "need an upgrade" : "do not exist yet");
    if (rc == TOCSIN_OK) {
        snprintf(sql, sizeof sql,
                 "INSERT INTO _tocsin_meta(key, value) VALUES ('schema_version', '%d') "
                 "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                 v);
        rc = tc_exec(db, sql, "record schema version");
    }
    rc = tc_op_end(db, &op, rc);
    if (rc == TOCSIN_OK) *out_version = v;
    return rc;
}
