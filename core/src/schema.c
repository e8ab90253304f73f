/*
 * The on-disk format: schema v1 (docs/schema.md documents every column).
 * Migrations are forward-only scripts, one per version, run in one transaction.
 */
#include "internal.h"

#include <stdio.h>

static const char SCHEMA_V1[] =
    "CREATE TABLE _tocsin_meta("
    "  key TEXT PRIMARY KEY NOT NULL,"
    "  value TEXT"
    ") WITHOUT ROWID;"

    /* queue: live jobs */
    "CREATE TABLE _tocsin_jobs("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  queue TEXT NOT NULL,"
    "  state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending','processing')),"
    "  payload TEXT NOT NULL,"
    "  meta TEXT,"
    "  priority INTEGER NOT NULL DEFAULT 0,"
    "  attempts INTEGER NOT NULL DEFAULT 0,"
    "  max_attempts INTEGER NOT NULL CHECK (max_attempts >= 1),"
    "  run_at INTEGER NOT NULL,"
    "  created_at INTEGER NOT NULL,"
    "  expires_at INTEGER,"
    "  lease_until INTEGER,"
    "  worker TEXT,"
    "  unique_key TEXT,"
    "  last_error TEXT"
    ");"
    "CREATE INDEX _tocsin_jobs_claim ON _tocsin_jobs(queue, priority DESC, run_at, id)"
    "  WHERE state = 'pending';"
    "CREATE INDEX _tocsin_jobs_lease ON _tocsin_jobs(queue, lease_until)"
    "  WHERE state = 'processing';"
    "CREATE INDEX _tocsin_jobs_expiry ON _tocsin_jobs(queue, expires_at)"
    "  WHERE state = 'pending' AND expires_at IS NOT NULL;"
    "CREATE UNIQUE INDEX _tocsin_jobs_unique ON _tocsin_jobs(queue, unique_key)"
    "  WHERE unique_key IS NOT NULL;"

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
    "  reason TEXT NOT NULL CHECK (reason IN ('failed','max_attempts','expired','cancelled')),"
    "  died_at INTEGER NOT NULL"
    ");"
    "CREATE INDEX _tocsin_dead_queue ON _tocsin_dead(queue, id);"
    "CREATE INDEX _tocsin_dead_died ON _tocsin_dead(died_at);"

    /* queue: per-queue settings */
    "CREATE TABLE _tocsin_queues("
    "  name TEXT PRIMARY KEY NOT NULL,"
    "  paused INTEGER NOT NULL DEFAULT 0,"
    "  updated_at INTEGER NOT NULL"
    ") WITHOUT ROWID;"

    /* streams */
    "CREATE TABLE _tocsin_events("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  topic TEXT NOT NULL,"
    "  key TEXT,"
    "  payload TEXT NOT NULL,"
    "  meta TEXT,"
    "  created_at INTEGER NOT NULL"
    ");"
    "CREATE INDEX _tocsin_events_topic ON _tocsin_events(topic, id);"
    "CREATE TABLE _tocsin_offsets("
    "  consumer TEXT NOT NULL,"
    "  topic TEXT NOT NULL,"
    "  position INTEGER NOT NULL,"
    "  updated_at INTEGER NOT NULL,"
    "  PRIMARY KEY (consumer, topic)"
    ") WITHOUT ROWID;"
    "CREATE INDEX _tocsin_offsets_topic ON _tocsin_offsets(topic, position);"

    /* notifications */
    "CREATE TABLE _tocsin_notifications("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  channel TEXT NOT NULL,"
    "  payload TEXT NOT NULL,"
    "  meta TEXT,"
    "  created_at INTEGER NOT NULL"
    ");"
    "CREATE INDEX _tocsin_notifications_channel ON _tocsin_notifications(channel, id);"
    "CREATE INDEX _tocsin_notifications_age ON _tocsin_notifications(created_at);"

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
    ");"
    "CREATE INDEX _tocsin_results_expiry ON _tocsin_results(expires_at)"
    "  WHERE expires_at IS NOT NULL;"

    /* locks: one row per name, kept after release so tokens never go back */
    "CREATE TABLE _tocsin_locks("
    "  name TEXT PRIMARY KEY NOT NULL,"
    "  owner TEXT,"
    "  token INTEGER NOT NULL CHECK (token >= 1),"
    "  acquired_at INTEGER,"
    "  expires_at INTEGER,"
    "  updated_at INTEGER NOT NULL,"
    "  CHECK ((owner IS NULL) = (expires_at IS NULL))"
    ") WITHOUT ROWID;"

    /* rate limits: the sliding log of admissions */
    "CREATE TABLE _tocsin_rate_hits("
    "  id INTEGER PRIMARY KEY,"
    "  name TEXT NOT NULL,"
    "  at INTEGER NOT NULL,"
    "  expires_at INTEGER NOT NULL"
    ");"
    "CREATE INDEX _tocsin_rate_hits_name ON _tocsin_rate_hits(name, at);"
    "CREATE INDEX _tocsin_rate_hits_expiry ON _tocsin_rate_hits(expires_at);"

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
    ") WITHOUT ROWID;"
    "CREATE INDEX _tocsin_schedules_due ON _tocsin_schedules(next_fire) WHERE paused = 0;";

/* MIGRATIONS[v-1] brings schema v-1 to v (v0 = nothing). */
static const char *const MIGRATIONS[] = {SCHEMA_V1};
#define N_MIGRATIONS ((int)(sizeof MIGRATIONS / sizeof MIGRATIONS[0]))

/* Reads the stored schema version: 0 when the database has no tocsin schema. */
static int read_version(tocsin_db *db, int *out) {
    sqlite3_stmt *st = NULL;
    int rc;
    *out = 0;
    rc = tc_prepare(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_tocsin_meta'",
                            0, &st);
    if (rc != SQLITE_OK) return tc_sqlerr(db, rc, "read schema");
    rc = tc_step(db, st);
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE) return TOCSIN_OK;
    if (rc != SQLITE_ROW) return tc_sqlerr(db, rc, "read schema");
    rc = tc_prepare(db, "SELECT value FROM _tocsin_meta WHERE key = 'schema_version'",
                            0, &st);
    if (rc != SQLITE_OK) return tc_sqlerr(db, rc, "read schema version");
    rc = tc_step(db, st);
    if (rc == SQLITE_ROW) *out = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return tc_sqlerr(db, rc, "read schema version");
    if (*out < 1)
        return tc_err(db, TOCSIN_CORRUPT, "_tocsin_meta exists but holds no valid schema_version");
    return TOCSIN_OK;
}

int tc_schema_install(tocsin_db *db, int *out_version) {
    tc_op op;
    int v, rc;
    char sql[160];
    *out_version = 0;
    if ((rc = read_version(db, &v)) != TOCSIN_OK) return rc;
    if (v > TOCSIN_SCHEMA_VERSION)
        return tc_err(db, TOCSIN_VERSION,
                      "the database has tocsin schema v%d, newer than this library's v%d: upgrade tocsin",
                      v, TOCSIN_SCHEMA_VERSION);
    if (v == TOCSIN_SCHEMA_VERSION) {
        *out_version = v;
        return TOCSIN_OK;
    }
    if (db->read_only)
        return tc_err(db, TOCSIN_READONLY,
                      "the database has %s; open it read-write once to install schema v%d",
                      v ? "an older tocsin schema" : "no tocsin schema", TOCSIN_SCHEMA_VERSION);
    if ((rc = tc_op_open(db, &op, 1)) != TOCSIN_OK) return rc;
    /* Another process may have installed it while we waited for the lock. */
    rc = read_version(db, &v);
    for (; rc == TOCSIN_OK && v < N_MIGRATIONS; v++)
        rc = tc_exec(db, MIGRATIONS[v], "install schema");
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
