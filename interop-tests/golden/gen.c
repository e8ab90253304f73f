/*
 * Writes the golden databases of interop-tests/golden/ and their manifest.
 *
 *   gen OUTDIR
 *
 * Every table of schema v1 gets rows, all written through the public C API on
 * a fixed clock (GOLDEN_T0), so that a regeneration with the same library
 * writes the same facts. Instants that readers compare against their own
 * (real) clock are put far in the future (year 2100 and later) so that the
 * files read the same today and in years: scheduled jobs stay scheduled,
 * leases stay held, results never expire.
 *
 * The manifest (manifest.json) is produced from the finished files by SQL
 * (json_object over the documented tables), then checked here against what
 * the generator meant to write. Regenerating is for a deliberate, documented
 * format change only (README.md).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sqlite3.h>

#include "tocsin.h"

#define GOLDEN_T0 1700000000000LL     /* 2023-11-14T22:13:20Z */
#define Y2100 4102444800000LL         /* 2100-01-01T00:00:00Z */
#define CENTURY 3155760000000LL       /* 100 years of ms */

static int64_t now_ms = GOLDEN_T0;
static int64_t clock_fn(void *ctx) {
    (void)ctx;
    return now_ms;
}

static tocsin_db *db;
static void die(const char *what, int rc) {
    fprintf(stderr, "gen: %s failed (%d): %s\n", what, rc, tocsin_errmsg(db));
    exit(1);
}
#define OK(what, expr)                        \
    do {                                      \
        int _rc = (expr);                     \
        if (_rc != TOCSIN_OK) die(what, _rc); \
    } while (0)

static void rm_db(const char *path) {
    static const char *sfx[] = {"", "-wal", "-shm", "-journal"};
    char p[4096];
    size_t i;
    for (i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s%s", path, sfx[i]);
        unlink(p);
    }
}

static tocsin_db *open_at(const char *path) {
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    tocsin_db *h = NULL;
    o.clock = clock_fn;
    rm_db(path);
    if (tocsin_open(&h, path, &o) != TOCSIN_OK) {
        fprintf(stderr, "gen: open %s: %s\n", path, tocsin_errmsg(h));
        exit(1);
    }
    return h;
}

/* Checkpoints into the main file and closes: no -wal/-shm is left. */
static void finish(tocsin_db *h) {
    OK("checkpoint", tocsin_exec(h, "PRAGMA wal_checkpoint(TRUNCATE)"));
    OK("close", tocsin_close(h));
}

static void fill_full(void) {
    tocsin_enqueue_opts eo = TOCSIN_ENQUEUE_OPTS_INIT;
    tocsin_job *jobs = NULL;
    tocsin_db *tx = NULL;
    size_t n = 0;
    int64_t id, off, tok, ids[8];
    int ok;

    /* queue "emails": two pending (one with meta, priority and unique key), one
     * scheduled for 2100, one claimed (lease for a century) */
    OK("enqueue", tocsin_queue_enqueue(db, &id, "emails", "{\"to\":\"ann@example.com\"}", NULL));
    eo.priority = 5;
    eo.unique_key = "welcome:bob";
    eo.meta = "{\"trace\":\"t-1\"}";
    OK("enqueue", tocsin_queue_enqueue(db, &id, "emails", "{\"to\":\"bob@example.com\"}", &eo));
    eo = (tocsin_enqueue_opts)TOCSIN_ENQUEUE_OPTS_INIT;
    eo.run_at_ms = Y2100;
    OK("enqueue", tocsin_queue_enqueue(db, &id, "emails", "{\"to\":\"future@example.com\"}", &eo));
    /* "reports": one job claimed and held, one pending */
    OK("enqueue", tocsin_queue_enqueue(db, &id, "reports", "{\"report\":\"q3\"}", NULL));
    OK("enqueue", tocsin_queue_enqueue(db, &id, "reports", "{\"report\":\"q4\"}", NULL));
    now_ms += 1000;
    OK("claim", tocsin_queue_claim(db, &jobs, &n, "reports", "golden-claimer", 1, CENTURY));
    if (n != 1) die("claim count", -1);
    tocsin_jobs_free(jobs, n);

    /* dead letters, one per reason */
    OK("enqueue", tocsin_queue_enqueue(db, &id, "billing", "{\"invoice\":1}", NULL));
    OK("claim", tocsin_queue_claim(db, &jobs, &n, "billing", "golden-claimer", 1, 60000));
    OK("fail", tocsin_job_fail(db, &ok, jobs[0].id, jobs[0].token, "card declined"));
    tocsin_jobs_free(jobs, n);
    eo = (tocsin_enqueue_opts)TOCSIN_ENQUEUE_OPTS_INIT;
    eo.max_attempts = 1;
    OK("enqueue", tocsin_queue_enqueue(db, &id, "billing", "{\"invoice\":2}", &eo));
    OK("claim", tocsin_queue_claim(db, &jobs, &n, "billing", "golden-claimer", 1, 60000));
    OK("retry", tocsin_job_retry(db, &ok, jobs[0].id, jobs[0].token, 0, "timeout talking to bank"));
    tocsin_jobs_free(jobs, n);
    OK("enqueue", tocsin_queue_enqueue(db, &id, "billing", "{\"invoice\":3}", NULL));
    OK("cancel", tocsin_job_cancel(db, &ok, id));
    eo = (tocsin_enqueue_opts)TOCSIN_ENQUEUE_OPTS_INIT;
    eo.expires_ms = 500;
    OK("enqueue", tocsin_queue_enqueue(db, &id, "billing", "{\"invoice\":4}", &eo));
    now_ms += 1000;
    OK("claim", tocsin_queue_claim(db, &jobs, &n, "billing", "golden-claimer", 1, 60000));
    tocsin_jobs_free(jobs, n);
    /* a paused queue with one pending job */
    OK("enqueue", tocsin_queue_enqueue(db, &id, "paused-q", "[1,2,3]", NULL));
    OK("pause", tocsin_queue_pause(db, "paused-q"));

    /* a transaction handle: two jobs and a notification committed together */
    OK("tx_begin", tocsin_tx_begin(db, &tx));
    OK("enqueue", tocsin_queue_enqueue(tx, &ids[0], "emails", "{\"to\":\"tx1@example.com\"}", NULL));
    OK("notify", tocsin_notify(tx, &id, "jobs", "{\"added\":2}", NULL));
    OK("tx_commit", tocsin_tx_commit(tx));

    /* results saved directly: a value, a JSON null, an error */
    OK("result", tocsin_result_save(db, 9001, "{\"sum\":42}", 0));
    OK("result", tocsin_result_save(db, 9002, "null", 0));
    OK("result", tocsin_result_save_error(db, 9003, "ValueError", "bad input", 0));

    /* a stream with two saved consumer offsets */
    {
        static const char *p[] = {"{\"order\":1}", "{\"order\":2}", "{\"order\":3}", "{\"order\":4}",
                                  "{\"order\":5}"};
        static const char *k[] = {"alice", "bob", "alice", NULL, "carol"};
        size_t i;
        for (i = 0; i < 5; i++) {
            now_ms += 10;
            OK("publish", tocsin_stream_publish(db, &off, "orders", p[i], k[i],
                                                i == 0 ? "{\"source\":\"web\"}" : NULL));
        }
        OK("save_offset", tocsin_stream_save_offset(db, NULL, "billing", "orders", 3));
        OK("save_offset", tocsin_stream_save_offset(db, NULL, "audit", "orders", 5));
        OK("publish", tocsin_stream_publish(db, &off, "clicks", "{\"x\":1}", NULL, NULL));
    }

    /* notifications */
    OK("notify", tocsin_notify(db, &id, "chat", "{\"text\":\"hello\"}", NULL));
    OK("notify", tocsin_notify(db, &id, "chat", "{\"text\":\"world\"}", "{\"from\":\"ann\"}"));
    OK("notify", tocsin_notify(db, &id, "alerts", "\"disk\"", NULL));

    /* locks: one held for a century, one released (token kept) */
    OK("lock", tocsin_lock_acquire(db, &tok, NULL, "leader", "node-a", 3600000));
    OK("lock", tocsin_lock_acquire(db, &tok, NULL, "migrations", "node-b", 60000));
    OK("unlock", tocsin_lock_release(db, &ok, "migrations", "node-b", tok));
    OK("lock", tocsin_lock_acquire(db, &tok, NULL, "migrations", "node-c", 60000));
    OK("unlock", tocsin_lock_release(db, &ok, "migrations", "node-c", tok));

    /* rate limit admissions */
    {
        int allowed, i;
        for (i = 0; i < 3; i++)
            OK("ratelimit", tocsin_ratelimit_try(db, &allowed, NULL, NULL, "api", 5, 60000));
    }

    /* schedules: an active one, a paused one with options */
    {
        tocsin_schedule_opts so = TOCSIN_SCHEDULE_OPTS_INIT;
        OK("schedule", tocsin_schedule_set(db, NULL, "nightly", "0 3 * * *", "maintenance",
                                           "{\"job\":\"vacuum\"}", NULL));
        so.priority = 2;
        so.max_attempts = 5;
        so.catch_up = TOCSIN_CATCHUP_ALL;
        so.max_catch_up = 10;
        so.meta = "{\"team\":\"ops\"}";
        OK("schedule", tocsin_schedule_set(db, NULL, "hourly-report", "0 * * * *", "reports",
                                           "{\"report\":\"hourly\"}", &so));
        OK("schedule", tocsin_schedule_pause(db, "hourly-report"));
    }
    (void)ids;
}

/* Task envelopes: queued calls, and calls a worker ran to an ok and an error
 * result. The worker's registry row is kept (with a fixed host) after the
 * worker closed, so that the file holds one. */
static void fill_tasks(void) {
    tocsin_worker_opts wo = TOCSIN_WORKER_OPTS_INIT;
    tocsin_task_opts to = TOCSIN_TASK_OPTS_INIT;
    tocsin_task_call c = TOCSIN_TASK_CALL_INIT;
    tocsin_enqueue_opts eo = TOCSIN_ENQUEUE_OPTS_INIT;
    const char *queues[] = {"tasks"};
    tocsin_worker *w = NULL;
    tocsin_task_run **runs = NULL;
    size_t n = 0, i;
    int64_t id;

    c.task = "add";
    c.args = "[2,3]";
    OK("task_enqueue", tocsin_task_enqueue(db, &id, "tasks", &c, NULL));
    c.task = "explode";
    c.args = "[]";
    c.kwargs = "{\"why\":\"testing\"}";
    eo.max_attempts = 1;
    OK("task_enqueue", tocsin_task_enqueue(db, &id, "tasks", &c, &eo));

    wo.worker_id = "golden-worker";
    wo.queues = queues;
    wo.n_queues = 1;
    wo.concurrency = 4;
    OK("worker_open", tocsin_worker_open(&w, db, &wo));
    to.result_ttl_ms = -1; /* results kept forever */
    OK("register", tocsin_worker_register(w, "add", &to));
    OK("register", tocsin_worker_register(w, "explode", &to));
    OK("worker_next", tocsin_worker_next(w, &runs, &n, 0));
    if (n != 2) die("worker_next count", -1);
    for (i = 0; i < n; i++) {
        tocsin_outcome o = TOCSIN_OUTCOME_INIT;
        if (strcmp(runs[i]->task, "add") == 0) {
            o.value = "5";
        } else {
            o.kind = TOCSIN_OUTCOME_ERROR;
            o.error_type = "RuntimeError";
            o.error_message = "it blew up";
            o.error_trace = "Traceback: explode() line 1";
        }
        OK("worker_finish", tocsin_worker_finish(w, NULL, runs[i], &o));
    }
    tocsin_free(runs);
    OK("worker_flush", tocsin_worker_flush(w, NULL));
    OK("keep registry row",
       tocsin_exec(db, "CREATE TEMP TABLE golden_w AS SELECT * FROM _tocsin_workers"));
    OK("worker_close", tocsin_worker_close(w));
    OK("restore registry row",
       tocsin_exec(db, "INSERT INTO _tocsin_workers SELECT * FROM golden_w;"
                       "UPDATE _tocsin_workers SET host = 'golden-host', pid = 1, pid_start = 0;"
                       "DROP TABLE golden_w"));

    /* calls still queued for any runtime's worker */
    c = (tocsin_task_call)TOCSIN_TASK_CALL_INIT;
    c.task = "send_email";
    c.args = "[\"ann@example.com\"]";
    c.kwargs = "{\"subject\":\"hi\"}";
    c.result_ttl_ms = 3600000;
    c.timeout_ms = 30000;
    OK("task_enqueue", tocsin_task_enqueue(db, &id, "tasks", &c, NULL));
    c = (tocsin_task_call)TOCSIN_TASK_CALL_INIT;
    c.task = "resize";
    c.args = "[640,480]";
    OK("task_enqueue", tocsin_task_enqueue(db, &id, "tasks", &c, NULL));
}

/* The manifest of one file, computed from its tables. */
static const char *MANIFEST_SQL =
    "SELECT json_object("
    " 'schema_version', (SELECT CAST(value AS INTEGER) FROM _tocsin_meta WHERE key='schema_version'),"
    " 'journal_mode', (SELECT journal_mode FROM pragma_journal_mode),"
    " 'queues', (SELECT json_group_object(q, json_object('pending', p, 'scheduled', s, 'processing', c,"
    "      'dead', d, 'paused', ps)) FROM (SELECT q,"
    "      (SELECT count(*) FROM _tocsin_jobs WHERE queue=q AND state='pending') AS p,"
    "      (SELECT count(*) FROM _tocsin_jobs WHERE queue=q AND state='scheduled') AS s,"
    "      (SELECT count(*) FROM _tocsin_jobs WHERE queue=q AND state='processing') AS c,"
    "      (SELECT count(*) FROM _tocsin_dead WHERE queue=q) AS d,"
    "      coalesce((SELECT paused FROM _tocsin_queues WHERE name=q), 0) AS ps"
    "    FROM (SELECT queue AS q FROM _tocsin_jobs UNION SELECT queue FROM _tocsin_dead"
    "          UNION SELECT name FROM _tocsin_queues) ORDER BY q)),"
    " 'jobs', (SELECT json_group_array(json_object('id', id, 'queue', queue, 'state', state,"
    "      'payload', json(payload), 'meta', json(meta), 'priority', priority, 'attempts', attempts,"
    "      'max_attempts', max_attempts, 'run_at', run_at, 'unique_key', unique_key, 'worker', worker))"
    "    FROM (SELECT * FROM _tocsin_jobs ORDER BY id)),"
    " 'dead', (SELECT json_group_array(json_object('id', id, 'queue', queue, 'reason', reason,"
    "      'last_error', last_error, 'payload', json(payload), 'attempts', attempts))"
    "    FROM (SELECT * FROM _tocsin_dead ORDER BY id)),"
    " 'results', (SELECT json_group_array(json_object('job_id', job_id, 'status', status,"
    "      'value', value, 'error_type', json_extract(error, '$.type'),"
    "      'error_message', json_extract(error, '$.message'),"
    "      'error_trace', json_extract(error, '$.trace')))"
    "    FROM (SELECT * FROM _tocsin_results ORDER BY job_id)),"
    " 'streams', (SELECT json_group_array(json_object('topic', topic, 'count', n, 'last_offset', mx,"
    "      'events', json(ev), 'consumers', (SELECT json_group_object(consumer, position) FROM"
    "        (SELECT consumer, position FROM _tocsin_offsets o WHERE o.topic = t.topic ORDER BY consumer))))"
    "    FROM (SELECT topic, count(*) AS n, max(id) AS mx, json_group_array(json_object('offset', id,"
    "          'key', key, 'payload', json(payload), 'meta', json(meta))) AS ev"
    "          FROM (SELECT * FROM _tocsin_events ORDER BY id) GROUP BY topic ORDER BY topic) AS t),"
    " 'notifications', (SELECT json_group_array(json_object('id', id, 'channel', channel,"
    "      'payload', json(payload), 'meta', json(meta))) FROM (SELECT * FROM _tocsin_notifications ORDER BY id)),"
    " 'max_notification_id', coalesce((SELECT max(id) FROM _tocsin_notifications), 0),"
    " 'locks', (SELECT json_group_array(json_object('name', name, 'owner', owner, 'token', token,"
    "      'expires_at', expires_at)) FROM (SELECT * FROM _tocsin_locks ORDER BY name)),"
    " 'rate_limits', (SELECT json_group_object(name, n) FROM"
    "      (SELECT name, count(*) AS n FROM _tocsin_rate_hits GROUP BY name ORDER BY name)),"
    " 'schedules', (SELECT json_group_array(json_object('name', name, 'cron', cron, 'queue', queue,"
    "      'payload', json(payload), 'meta', json(meta), 'priority', priority, 'max_attempts', max_attempts,"
    "      'catch_up', catch_up, 'max_catch_up', max_catch_up, 'paused', paused, 'next_fire', next_fire))"
    "    FROM (SELECT * FROM _tocsin_schedules ORDER BY name)),"
    " 'workers', (SELECT json_group_array(json_object('id', id, 'host', host, 'queues', json(queues),"
    "      'lease_ms', lease_ms)) FROM (SELECT * FROM _tocsin_workers ORDER BY id)),"
    " 'tasks', (SELECT json_group_array(json_object('job_id', id, 'task', json_extract(payload, '$.task'),"
    "      'args', json_extract(payload, '$.args'), 'kwargs', json_extract(payload, '$.kwargs')))"
    "    FROM (SELECT * FROM _tocsin_jobs WHERE queue = 'tasks' ORDER BY id))"
    ")";

static char *manifest_conn(sqlite3 *c) {
    sqlite3_stmt *st = NULL;
    char *out = NULL;
    if (sqlite3_prepare_v2(c, MANIFEST_SQL, -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "gen: manifest: %s\n", sqlite3_errmsg(c));
        exit(1);
    }
    if (sqlite3_step(st) == SQLITE_ROW) out = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    if (!out) exit(1);
    return out;
}
static char *manifest_of(tocsin_db *h) { return manifest_conn(tocsin_sqlite(h)); }

/* A file written through the SQL surface on a plain connection of the host's
 * (the extension's way: tocsin_sql_init, journal mode left as SQLite's
 * default rollback journal). */
static const char *SQL_FILL =
    "SELECT tocsin_clock(1700000000000);"
    "SELECT tocsin_bootstrap();"
    "SELECT tocsin_enqueue('sqlq', '{\"via\":\"sql\"}', '{\"priority\":3,\"unique_key\":\"s1\"}');"
    "SELECT tocsin_enqueue('sqlq', '[1]', '{\"meta\":{\"m\":1},\"max_attempts\":7}');"
    "SELECT tocsin_enqueue('sqlq', '2', '{\"run_at_ms\":4102444800000}');"
    "SELECT tocsin_claim('sqlq', 'sql-worker', 1, 3155760000000);"
    "SELECT tocsin_cancel(tocsin_enqueue('sqldead', '{\"gone\":true}'));"
    "SELECT tocsin_result_save(777, '{\"ok\":true}');"
    "SELECT tocsin_result_save_error(778, 'KeyError', 'missing');"
    "SELECT tocsin_stream_publish('orders', '{\"n\":1}', 'k1');"
    "SELECT tocsin_stream_publish('orders', '{\"n\":2}', NULL, '{\"h\":2}');"
    "SELECT tocsin_stream_save_offset('billing', 'orders', 1);"
    "SELECT tocsin_notify('chat', '\"hi\"');"
    "SELECT tocsin_lock_acquire('sqllock', 'sql-owner', 60000);"
    "SELECT tocsin_ratelimit_try('sqlapi', 10, 60000);"
    "SELECT tocsin_schedule_set('sqlsched', '@every 1h', 'sqlq', '{}');"
    "SELECT tocsin_task_enqueue('tasks', 'mul', '[6,7]', '{\"k\":1}');";

static char *fill_sql_file(const char *path) {
    sqlite3 *c = NULL;
    char *err = NULL, *m;
    rm_db(path);
    if (sqlite3_open_v2(path, &c, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK ||
        tocsin_sql_init(c, &err, NULL) != SQLITE_OK || sqlite3_exec(c, SQL_FILL, NULL, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "gen: %s: %s\n", path, err ? err : sqlite3_errmsg(c));
        exit(1);
    }
    m = manifest_conn(c);
    sqlite3_close(c);
    return m;
}

/* The manifest entries of the other schema versions' files (one per line, as
 * written below), kept as they are: owned text, "" when there are none. */
static char *kept_entries(const char *dir, const char *prefix) {
    char path[4096], line[1 << 16];
    size_t len = 0, cap = 1, n;
    char *out = malloc(cap);
    FILE *f;
    if (!out) exit(1);
    out[0] = 0;
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    if (!(f = fopen(path, "r"))) return out;
    while (fgets(line, sizeof line, f)) {
        if (line[0] != '"' || line[1] != 'v' || strstr(line, ".db\": {") == NULL) continue;
        if (strncmp(line + 1, prefix, strlen(prefix)) == 0) continue; /* this version's: rewritten */
        n = strlen(line);
        while (n && (line[n - 1] == '\n' || line[n - 1] == ',')) line[--n] = 0;
        if (!(out = realloc(out, cap += n + 2))) exit(1);
        memcpy(out + len, line, n);
        len += n;
        out[len++] = '\n';
        out[len] = 0;
    }
    fclose(f);
    return out;
}

int main(int argc, char **argv) {
    char path[4096], prefix[16], names[3][32], *m[3], *kept, *line, *next;
    const char *kinds[3] = {"full", "empty", "sql"};
    FILE *f;
    size_t i;
    if (argc != 2) {
        fprintf(stderr, "usage: gen OUTDIR\n");
        return 2;
    }
    /* Each schema version's files are written once, by the library that
     * writes that version, and then kept as they are: a later library must
     * read them unchanged (README.md). */
    snprintf(prefix, sizeof prefix, "v%d-", TOCSIN_SCHEMA_VERSION);
    for (i = 0; i < 3; i++) snprintf(names[i], sizeof names[i], "%s%s.db", prefix, kinds[i]);
    snprintf(path, sizeof path, "%s/%s", argv[1], names[0]);
    if (access(path, F_OK) == 0) {
        fprintf(stderr, "gen: %s exists: the schema v%d golden files must stay as they were written "
                        "(interop-tests/golden/README.md); delete them first only for a deliberate, "
                        "documented change\n", path, TOCSIN_SCHEMA_VERSION);
        return 2;
    }
    kept = kept_entries(argv[1], prefix);

    db = open_at(path);
    fill_full();
    fill_tasks();
    m[0] = manifest_of(db);
    finish(db);

    snprintf(path, sizeof path, "%s/%s", argv[1], names[1]);
    db = open_at(path);
    m[1] = manifest_of(db);
    finish(db);

    snprintf(path, sizeof path, "%s/%s", argv[1], names[2]);
    m[2] = fill_sql_file(path);

    snprintf(path, sizeof path, "%s/manifest.json", argv[1]);
    f = fopen(path, "w");
    if (!f) return 1;
    fprintf(f, "{\n\"about\": \"Facts of the golden databases beside this file (README.md). "
               "Written by interop-tests/golden/gen.c; do not edit by hand.\",\n");
    fprintf(f, "\"library_version\": \"%s\",\n\"generated_at_clock_ms\": %lld,\n\"files\": {\n",
            tocsin_version(), (long long)GOLDEN_T0);
    for (line = kept; *line; line = next) {
        next = strchr(line, '\n');
        *next++ = 0;
        fprintf(f, "%s,\n", line);
    }
    for (i = 0; i < 3; i++) {
        fprintf(f, "\"%s\": %s%s\n", names[i], m[i], i + 1 < 3 ? "," : "");
        free(m[i]);
    }
    fprintf(f, "}\n}\n");
    fclose(f);
    free(kept);
    printf("gen: wrote the schema v%d databases and manifest.json to %s\n", TOCSIN_SCHEMA_VERSION, argv[1]);
    return 0;
}
