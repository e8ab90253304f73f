/*
 * bench_core: throughput and claim latency of the tocsin C API on a file
 * database (WAL, synchronous=NORMAL, as tocsin_open sets), next to a raw
 * SQLite baseline measured in the same run with the same pragmas.
 *
 *   build/bench_core [--quick] [--ops N] [--reps R] [--keep] [--only KEY]
 *
 * Every scenario gets a fresh database in a temporary directory, runs a
 * warm-up, then a fixed number of operations. Figures are wall-clock and
 * machine-dependent: this program prints them, it asserts nothing.
 */
#define _POSIX_C_SOURCE 200809L
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tocsin.h"

/* ---- settings ------------------------------------------------------------- */

static int g_ops = 20000;          /* operations per throughput scenario */
static int g_warm = 500;           /* warm-up operations */
static int g_lat_ops = 2000;       /* claims per latency scenario */
static int g_backlog = 100000;     /* due, delayed or retrying jobs beside the latency claims */
static int g_inflight = 10000;     /* leased jobs behind the latency claims */
static int g_keep = 0;             /* keep the temporary directory */
static const char *g_only;         /* run only scenarios whose key contains this */
static char g_dir[512];
static int g_seq;

static const char PAYLOAD[] = "{\"user\":\"alice\",\"order\":123456,\"items\":[1,2,3]}";
static const char QUEUE[] = "bench";
static const char WORKER[] = "worker-1";
#define LONG_LEASE_MS (3600 * 1000)
#define LEASE_MS 30000

/* ---- helpers -------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, const char *msg) {
    fprintf(stderr, "bench_core: %s: %s\n", what, msg);
    exit(1);
}

#define T(db, expr)                                              \
    do {                                                         \
        if ((expr) != TOCSIN_OK) die(#expr, tocsin_errmsg(db));  \
    } while (0)

#define S(conn, expr)                                            \
    do {                                                         \
        int _rc = (expr);                                        \
        if (_rc != SQLITE_OK && _rc != SQLITE_DONE && _rc != SQLITE_ROW) \
            die(#expr, sqlite3_errmsg(conn));                    \
    } while (0)

/* A fresh database path for one scenario. */
static const char *fresh_path(const char *name) {
    static char path[700];
    snprintf(path, sizeof path, "%s/%02d-%s.db", g_dir, ++g_seq, name);
    return path;
}

static tocsin_db *open_fresh(const char *name) {
    tocsin_db *db = NULL;
    if (tocsin_open(&db, fresh_path(name), NULL) != TOCSIN_OK)
        die("tocsin_open", db ? tocsin_errmsg(db) : "no handle");
    return db;
}

/* Enqueues n jobs in transactions of up to 1000 (set-up, untimed). */
static void fill(tocsin_db *db, int n) {
    tocsin_job_spec specs[1000];
    int64_t ids[1000];
    int i, k;
    for (i = 0; i < 1000; i++) {
        specs[i].queue = QUEUE;
        specs[i].payload = PAYLOAD;
        specs[i].opts = NULL;
    }
    for (i = 0; i < n; i += k) {
        k = n - i < 1000 ? n - i : 1000;
        T(db, tocsin_queue_enqueue_many(db, ids, specs, (size_t)k));
    }
}

static void claim_ack_one(tocsin_db *db) {
    tocsin_job *jobs;
    size_t n;
    int ok;
    T(db, tocsin_queue_claim(db, &jobs, &n, QUEUE, WORKER, 1, LEASE_MS));
    if (n != 1) die("claim", "queue ran dry");
    T(db, tocsin_job_ack(db, &ok, jobs[0].id, jobs[0].token));
    if (!ok) die("ack", "lease not held");
    tocsin_jobs_free(jobs, n);
}

static void claim_ack_batch(tocsin_db *db, size_t batch) {
    tocsin_job *jobs;
    int64_t ids[100], tokens[100];
    size_t n, i, acked;
    T(db, tocsin_queue_claim(db, &jobs, &n, QUEUE, WORKER, batch, LEASE_MS));
    if (n != batch) die("claim", "queue ran dry");
    for (i = 0; i < n; i++) {
        ids[i] = jobs[i].id;
        tokens[i] = jobs[i].token;
    }
    T(db, tocsin_job_ack_batch(db, &acked, ids, tokens, n));
    if (acked != n) die("ack_batch", "lease not held");
    tocsin_jobs_free(jobs, n);
}

/* ---- results -------------------------------------------------------------- */

#define MAX_REPS 9

/* One scenario's figures: a sample (jobs/s) per repetition. */
typedef struct row {
    const char *name;
    int n;
    double per_s[MAX_REPS];
} row;

static row g_rows[32];
static int g_nrows;
static int g_reps = 3;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double record(const char *name, long units, double secs) {
    row *r;
    int i;
    for (i = 0; i < g_nrows && strcmp(g_rows[i].name, name) != 0; i++) {
    }
    r = &g_rows[i];
    if (i == g_nrows) {
        g_nrows++;
        r->name = name;
    }
    r->per_s[r->n++] = (double)units / secs;
    fprintf(stderr, "  .. %-52s %10.0f /s\n", name, r->per_s[r->n - 1]);
    return r->per_s[r->n - 1];
}

/* The median over the repetitions of scenario `r` (0 when it did not run). */
static double median(const row *r) {
    double v[MAX_REPS];
    if (!r || !r->n) return 0;
    memcpy(v, r->per_s, sizeof(double) * (size_t)r->n);
    qsort(v, (size_t)r->n, sizeof *v, cmp_double);
    return r->n % 2 ? v[r->n / 2] : (v[r->n / 2 - 1] + v[r->n / 2]) / 2;
}

static const row *find_row(const char *name) {
    int i;
    for (i = 0; i < g_nrows; i++)
        if (strcmp(g_rows[i].name, name) == 0) return &g_rows[i];
    return NULL;
}

/* Scenario names, as printed. */
static const char N_ENQ1[] = "enqueue, 1 per transaction";
static const char N_ENQ100[] = "enqueue, 100 per tx (begin + 100 enqueue + commit)";
static const char N_ENQMANY[] = "enqueue, 100 per tx (enqueue_many)";
static const char N_CA1[] = "claim 1 + ack 1 (each its own tx)";
static const char N_CA1TX[] = "claim 1 + ack 1 in one tx";
static const char N_RAW_CD1[] = "raw: claim + DELETE in one tx";
static const char N_CA100[] = "claim 100 + ack_batch 100 (2 tx per 100 jobs)";
static const char N_RAW_INS[] = "raw: INSERT, 1 per autocommit tx";
static const char N_RAW_CD[] = "raw: claim (UPDATE..RETURNING) + DELETE, 2 tx";
static const char N_RAW_CDL[] = "raw: same + lease index (queue, lease_until)";

/* ---- tocsin scenarios ----------------------------------------------------- */

static double bench_enqueue_1(void) {
    tocsin_db *db = open_fresh("enqueue1");
    int64_t id;
    int i;
    double t0;
    for (i = 0; i < g_warm; i++) T(db, tocsin_queue_enqueue(db, &id, QUEUE, PAYLOAD, NULL));
    t0 = now_s();
    for (i = 0; i < g_ops; i++) T(db, tocsin_queue_enqueue(db, &id, QUEUE, PAYLOAD, NULL));
    tocsin_close(db);
    return record(N_ENQ1, g_ops, now_s() - t0);
}

static double bench_enqueue_100_tx(void) {
    tocsin_db *db = open_fresh("enqueue100tx");
    int64_t id;
    int i, j, txs = g_ops * 5 / 100;
    double t0 = 0;
    for (i = -g_warm / 100 - 1; i < txs; i++) {
        if (i == 0) t0 = now_s();
        T(db, tocsin_begin(db));
        for (j = 0; j < 100; j++) T(db, tocsin_queue_enqueue(db, &id, QUEUE, PAYLOAD, NULL));
        T(db, tocsin_commit(db));
    }
    tocsin_close(db);
    return record(N_ENQ100, (long)txs * 100,
                  now_s() - t0);
}

static double bench_enqueue_many_100(void) {
    tocsin_db *db = open_fresh("enqueuemany");
    tocsin_job_spec specs[100];
    int64_t ids[100];
    int i, txs = g_ops * 5 / 100;
    double t0 = 0;
    for (i = 0; i < 100; i++) {
        specs[i].queue = QUEUE;
        specs[i].payload = PAYLOAD;
        specs[i].opts = NULL;
    }
    for (i = -g_warm / 100 - 1; i < txs; i++) {
        if (i == 0) t0 = now_s();
        T(db, tocsin_queue_enqueue_many(db, ids, specs, 100));
    }
    tocsin_close(db);
    return record(N_ENQMANY, (long)txs * 100, now_s() - t0);
}

static double bench_claim_ack_1(void) {
    tocsin_db *db = open_fresh("claimack1");
    int i;
    double t0;
    fill(db, g_warm + g_ops);
    for (i = 0; i < g_warm; i++) claim_ack_one(db);
    t0 = now_s();
    for (i = 0; i < g_ops; i++) claim_ack_one(db);
    tocsin_close(db);
    return record(N_CA1, g_ops, now_s() - t0);
}

/* Claim and ack inside one transaction: the queue's mechanics per commit. */
static double bench_claim_ack_1_tx(void) {
    tocsin_db *db = open_fresh("claimack1tx");
    int i;
    double t0 = 0;
    fill(db, g_warm + g_ops);
    for (i = 0; i < g_warm + g_ops; i++) {
        if (i == g_warm) t0 = now_s();
        T(db, tocsin_begin(db));
        claim_ack_one(db);
        T(db, tocsin_commit(db));
    }
    tocsin_close(db);
    return record(N_CA1TX, g_ops, now_s() - t0);
}

static double bench_claim_ack_100(void) {
    tocsin_db *db = open_fresh("claimack100");
    int i, rounds = g_ops * 5 / 100, warm = g_warm / 100 + 1;
    double t0;
    fill(db, (warm + rounds) * 100);
    for (i = 0; i < warm; i++) claim_ack_batch(db, 100);
    t0 = now_s();
    for (i = 0; i < rounds; i++) claim_ack_batch(db, 100);
    tocsin_close(db);
    return record(N_CA100, (long)rounds * 100,
                  now_s() - t0);
}

typedef struct lat {
    double mean, p50, p99;
} lat;

/* Claim-latency backlogs (issue 9): what sits in the queue beside the job each
 * timed claim takes. */
enum backlog { BL_EMPTY, BL_DUE, BL_DELAYED, BL_RETRYING, BL_INFLIGHT, BL_COUNT };
static const char *const BL_NAME[BL_COUNT] = {
    "empty queue", "100k due (same priority, older)", "100k delayed 1 day, priority 5",
    "100k retrying with backoff, priorities -5..4", "10k in flight"};
static const char *const BL_KEY[BL_COUNT] = {"latency-empty", "latency-due", "latency-delayed",
                                             "latency-retrying", "latency-inflight"};

/* Enqueues n jobs of `queue` with per-job options from opt(i) in transactions
 * of up to 1000 (set-up, untimed). opt NULL: defaults. */
static void fill_with(tocsin_db *db, int n, void (*opt)(tocsin_enqueue_opts *, int)) {
    static tocsin_job_spec specs[1000];
    static tocsin_enqueue_opts opts[1000];
    int64_t ids[1000];
    int i, j, k;
    for (i = 0; i < n; i += k) {
        k = n - i < 1000 ? n - i : 1000;
        for (j = 0; j < k; j++) {
            tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
            if (opt) opt(&o, i + j);
            opts[j] = o;
            specs[j].queue = QUEUE;
            specs[j].payload = PAYLOAD;
            specs[j].opts = &opts[j];
        }
        T(db, tocsin_queue_enqueue_many(db, ids, specs, (size_t)k));
    }
}

static void opt_delayed(tocsin_enqueue_opts *o, int i) {
    (void)i;
    o->priority = 5;
    o->delay_ms = 86400000;
}

static void opt_mixed(tocsin_enqueue_opts *o, int i) {
    o->priority = i % 10 - 5;
    o->max_attempts = 10;
}

/* Leases n jobs of QUEUE for an hour; with retry set, hands each back with an
 * exponential backoff (10 min base, 1 day cap, 1..8 attempts' worth). */
static void lease_all(tocsin_db *db, int n, int retry) {
    while (n > 0) {
        tocsin_job *jobs;
        size_t got, i, k = n > 5000 ? 5000 : (size_t)n;
        T(db, tocsin_queue_claim(db, &jobs, &got, QUEUE, "holder", k, LONG_LEASE_MS));
        if (got != k) die("latency set-up", "short claim");
        if (retry) {
            T(db, tocsin_begin(db));
            for (i = 0; i < got; i++) {
                int ok;
                int64_t d = tocsin_backoff_ms(600000, 86400000, 1 + (int)(jobs[i].id % 8));
                T(db, tocsin_job_retry(db, &ok, jobs[i].id, jobs[i].token, d, "transient"));
                if (!ok) die("latency set-up", "retry refused");
            }
            T(db, tocsin_commit(db));
        }
        tocsin_jobs_free(jobs, got);
        n -= (int)k;
    }
}

/* Opens scenario bl's database and builds its backlog (untimed). */
static tocsin_db *latency_setup(enum backlog bl) {
    tocsin_db *db = open_fresh(BL_KEY[bl]);
    switch (bl) {
    case BL_EMPTY: break;
    case BL_DUE: fill(db, g_backlog); break;
    case BL_DELAYED: fill_with(db, g_backlog, opt_delayed); break;
    case BL_RETRYING:
        fill_with(db, g_backlog, opt_mixed);
        lease_all(db, g_backlog, 1);
        break;
    case BL_INFLIGHT:
        fill(db, g_inflight);
        lease_all(db, g_inflight, 0);
        break;
    default: break;
    }
    T(db, tocsin_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)"));
    /* Checkpoints run untimed between samples: the p99 is the claim's own
     * tail, not the cost of copying the WAL back (the pages figure measures
     * what a claim writes). */
    sqlite3_wal_autocheckpoint(tocsin_sqlite(db), 0);
    return db;
}

/* One sample: enqueue a due priority-0 job (untimed), time one claim of 1,
 * ack it (untimed). The backlog stays constant. */
static double latency_sample(tocsin_db *db, int i) {
    tocsin_job *jobs;
    size_t n;
    int ok;
    int64_t id;
    double t0, t1;
    T(db, tocsin_queue_enqueue(db, &id, QUEUE, PAYLOAD, NULL));
    t0 = now_s();
    T(db, tocsin_queue_claim(db, &jobs, &n, QUEUE, WORKER, 1, LEASE_MS));
    t1 = now_s();
    if (n != 1) die("claim", "queue ran dry");
    T(db, tocsin_job_ack(db, &ok, jobs[0].id, jobs[0].token));
    if (!ok) die("ack", "lease not held");
    tocsin_jobs_free(jobs, n);
    if (i % 64 == 0) T(db, tocsin_exec(db, "PRAGMA wal_checkpoint(PASSIVE)"));
    return t1 - t0;
}

/*
 * Claim latency of every scenario in ran[]: the samples are taken round-robin
 * across the scenarios' databases, so a slow spell of this shared machine
 * hits all of them alike and the ratios to the empty queue stay meaningful.
 */
static void bench_latency(const int *ran, lat *out) {
    tocsin_db *db[BL_COUNT] = {NULL};
    double *t[BL_COUNT] = {NULL};
    int ops = g_lat_ops, i, b;
    for (b = 0; b < BL_COUNT; b++) {
        if (!ran[b]) continue;
        db[b] = latency_setup((enum backlog)b);
        if (!(t[b] = malloc(sizeof(double) * (size_t)ops))) die("latency", "out of memory");
        fprintf(stderr, "  .. latency set-up: %s\n", BL_NAME[b]);
    }
    for (i = -g_warm; i < ops; i++)
        for (b = 0; b < BL_COUNT; b++) {
            double d;
            if (!db[b]) continue;
            d = latency_sample(db[b], i);
            if (i >= 0) t[b][i] = d;
        }
    for (b = 0; b < BL_COUNT; b++) {
        double sum = 0;
        if (!db[b]) continue;
        for (i = 0; i < ops; i++) sum += t[b][i];
        qsort(t[b], (size_t)ops, sizeof *t[b], cmp_double);
        out[b].mean = sum / ops * 1e6;
        out[b].p50 = t[b][ops / 2] * 1e6;
        out[b].p99 = t[b][(int)(ops * 0.99)] * 1e6;
        free(t[b]);
        sqlite3_wal_autocheckpoint(tocsin_sqlite(db[b]), 1000);
        tocsin_close(db[b]);
    }
}

/* ---- write cost: database pages per claim + ack ---------------------------- */

/* sqlite3_wal_hook reports the WAL's frame count after each commit; with the
 * WAL reset first and no checkpoint in between, the growth is the pages the
 * commits wrote. (Setting the hook turns off auto-checkpoint: only for this
 * short, untimed measurement.) */
static int wal_frames(void *ctx, sqlite3 *c, const char *name, int n) {
    (void)c;
    (void)name;
    *(int *)ctx = n;
    return SQLITE_OK;
}

static double tocsin_pages_per_job(int in_one_tx) {
    tocsin_db *db = open_fresh(in_one_tx ? "pages-tx" : "pages");
    sqlite3 *c = tocsin_sqlite(db);
    int frames = 0, i, n = 1000;
    fill(db, g_warm + n);
    for (i = 0; i < g_warm; i++) claim_ack_one(db);
    T(db, tocsin_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)"));
    sqlite3_wal_hook(c, wal_frames, &frames);
    for (i = 0; i < n; i++) {
        if (in_one_tx) T(db, tocsin_begin(db));
        claim_ack_one(db);
        if (in_one_tx) T(db, tocsin_commit(db));
    }
    sqlite3_wal_autocheckpoint(c, 1000);
    tocsin_close(db);
    return (double)frames / n;
}

/* ---- raw SQLite baseline -------------------------------------------------- */

static const char RAW_SCHEMA[] =
    "CREATE TABLE q("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  queue TEXT NOT NULL,"
    "  state TEXT NOT NULL DEFAULT 'pending',"
    "  payload TEXT NOT NULL,"
    "  run_at INTEGER NOT NULL,"
    "  lease_until INTEGER);"
    "CREATE INDEX q_claim ON q(queue, run_at, id) WHERE state = 'pending';";
static const char RAW_INSERT[] = "INSERT INTO q(queue, payload, run_at) VALUES (?1, ?2, ?3)";
static const char RAW_CLAIM[] =
    "UPDATE q SET state = 'processing', lease_until = ?2 + 30000"
    " WHERE id = (SELECT id FROM q WHERE queue = ?1 AND state = 'pending' AND run_at <= ?2"
    "             ORDER BY run_at, id LIMIT 1) RETURNING id, payload";
static const char RAW_DELETE[] = "DELETE FROM q WHERE id = ?1";

static const char RAW_LEASE_INDEX[] =
    "CREATE INDEX q_lease ON q(queue, lease_until) WHERE state = 'processing';";

static sqlite3 *raw_open(const char *name, int lease_index) {
    sqlite3 *c = NULL;
    if (sqlite3_open(fresh_path(name), &c) != SQLITE_OK) die("raw open", sqlite3_errmsg(c));
    S(c, sqlite3_exec(c, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                         "PRAGMA busy_timeout=5000; PRAGMA foreign_keys=ON",
                      NULL, NULL, NULL));
    S(c, sqlite3_exec(c, RAW_SCHEMA, NULL, NULL, NULL));
    if (lease_index) S(c, sqlite3_exec(c, RAW_LEASE_INDEX, NULL, NULL, NULL));
    return c;
}

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void raw_insert(sqlite3 *c, sqlite3_stmt *st) {
    sqlite3_bind_text(st, 1, QUEUE, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, PAYLOAD, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, wall_ms());
    if (sqlite3_step(st) != SQLITE_DONE) die("raw insert", sqlite3_errmsg(c));
    sqlite3_reset(st);
}

/* One autocommit INSERT per transaction. */
static double bench_raw_insert(void) {
    sqlite3 *c = raw_open("raw-insert", 0);
    sqlite3_stmt *st;
    int i;
    double t0;
    S(c, sqlite3_prepare_v2(c, RAW_INSERT, -1, &st, NULL));
    for (i = 0; i < g_warm; i++) raw_insert(c, st);
    t0 = now_s();
    for (i = 0; i < g_ops; i++) raw_insert(c, st);
    sqlite3_finalize(st);
    sqlite3_close(c);
    return record(N_RAW_INS, g_ops, now_s() - t0);
}

/* A minimal raw queue: UPDATE..RETURNING claims one row (autocommit), then a
 * DELETE by id removes it (a second autocommit) -- two commits per job, as
 * tocsin's claim 1 + ack 1. */
static void raw_claim_delete(sqlite3 *c, sqlite3_stmt *claim, sqlite3_stmt *del) {
    int64_t id;
    sqlite3_bind_text(claim, 1, QUEUE, -1, SQLITE_STATIC);
    sqlite3_bind_int64(claim, 2, wall_ms());
    if (sqlite3_step(claim) != SQLITE_ROW) die("raw claim", "queue ran dry");
    id = sqlite3_column_int64(claim, 0);
    if (sqlite3_step(claim) != SQLITE_DONE) die("raw claim", sqlite3_errmsg(c));
    sqlite3_reset(claim);
    sqlite3_bind_int64(del, 1, id);
    if (sqlite3_step(del) != SQLITE_DONE) die("raw delete", sqlite3_errmsg(c));
    sqlite3_reset(del);
}

/* Both statements inside one BEGIN IMMEDIATE .. COMMIT (one commit per job). */
static double bench_raw_claim_delete_tx(void) {
    sqlite3 *c = raw_open("raw-claim-tx", 0);
    sqlite3_stmt *ins, *claim, *del, *begin, *commit;
    int i;
    double t0 = 0;
    S(c, sqlite3_prepare_v2(c, RAW_INSERT, -1, &ins, NULL));
    S(c, sqlite3_prepare_v2(c, RAW_CLAIM, -1, &claim, NULL));
    S(c, sqlite3_prepare_v2(c, RAW_DELETE, -1, &del, NULL));
    S(c, sqlite3_prepare_v2(c, "BEGIN IMMEDIATE", -1, &begin, NULL));
    S(c, sqlite3_prepare_v2(c, "COMMIT", -1, &commit, NULL));
    S(c, sqlite3_exec(c, "BEGIN", NULL, NULL, NULL));
    for (i = 0; i < g_warm + g_ops; i++) raw_insert(c, ins);
    S(c, sqlite3_exec(c, "COMMIT", NULL, NULL, NULL));
    for (i = 0; i < g_warm + g_ops; i++) {
        if (i == g_warm) t0 = now_s();
        sqlite3_step(begin);
        sqlite3_reset(begin);
        raw_claim_delete(c, claim, del);
        if (sqlite3_step(commit) != SQLITE_DONE) die("raw commit", sqlite3_errmsg(c));
        sqlite3_reset(commit);
    }
    t0 = now_s() - t0;
    sqlite3_finalize(ins);
    sqlite3_finalize(claim);
    sqlite3_finalize(del);
    sqlite3_finalize(begin);
    sqlite3_finalize(commit);
    sqlite3_close(c);
    return record(N_RAW_CD1, g_ops, t0);
}

static double raw_claim_delete_run(int lease_index) {
    sqlite3 *c = raw_open(lease_index ? "raw-claim-lease" : "raw-claim", lease_index);
    sqlite3_stmt *ins, *claim, *del;
    int i;
    double t0;
    S(c, sqlite3_prepare_v2(c, RAW_INSERT, -1, &ins, NULL));
    S(c, sqlite3_prepare_v2(c, RAW_CLAIM, -1, &claim, NULL));
    S(c, sqlite3_prepare_v2(c, RAW_DELETE, -1, &del, NULL));
    S(c, sqlite3_exec(c, "BEGIN", NULL, NULL, NULL));
    for (i = 0; i < g_warm + g_ops; i++) raw_insert(c, ins);
    S(c, sqlite3_exec(c, "COMMIT", NULL, NULL, NULL));
    for (i = 0; i < g_warm; i++) raw_claim_delete(c, claim, del);
    t0 = now_s();
    for (i = 0; i < g_ops; i++) raw_claim_delete(c, claim, del);
    sqlite3_finalize(ins);
    sqlite3_finalize(claim);
    sqlite3_finalize(del);
    sqlite3_close(c);
    return now_s() - t0;
}

static double bench_raw_claim_delete(void) {
    return record(N_RAW_CD, g_ops, raw_claim_delete_run(0));
}

/* The same with a lease index like tocsin's (what a reclaimable lease needs):
 * shows what that index costs on its own. */
static double bench_raw_claim_delete_lease(void) {
    return record(N_RAW_CDL, g_ops, raw_claim_delete_run(1));
}

/* Pages per job of the raw queue: claim + DELETE in two autocommit
 * transactions (or in one), with or without the lease index. */
static double raw_pages_per_job(int lease_index, int in_one_tx) {
    sqlite3 *c = raw_open(lease_index ? "raw-pages-lease" : "raw-pages", lease_index);
    sqlite3_stmt *ins, *claim, *del;
    int frames = 0, i, n = 1000;
    S(c, sqlite3_prepare_v2(c, RAW_INSERT, -1, &ins, NULL));
    S(c, sqlite3_prepare_v2(c, RAW_CLAIM, -1, &claim, NULL));
    S(c, sqlite3_prepare_v2(c, RAW_DELETE, -1, &del, NULL));
    S(c, sqlite3_exec(c, "BEGIN", NULL, NULL, NULL));
    for (i = 0; i < g_warm + n; i++) raw_insert(c, ins);
    S(c, sqlite3_exec(c, "COMMIT", NULL, NULL, NULL));
    for (i = 0; i < g_warm; i++) raw_claim_delete(c, claim, del);
    S(c, sqlite3_exec(c, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL));
    sqlite3_wal_hook(c, wal_frames, &frames);
    for (i = 0; i < n; i++) {
        if (in_one_tx) S(c, sqlite3_exec(c, "BEGIN IMMEDIATE", NULL, NULL, NULL));
        raw_claim_delete(c, claim, del);
        if (in_one_tx) S(c, sqlite3_exec(c, "COMMIT", NULL, NULL, NULL));
    }
    sqlite3_finalize(ins);
    sqlite3_finalize(claim);
    sqlite3_finalize(del);
    sqlite3_close(c);
    return (double)frames / n;
}

/* ---- main ----------------------------------------------------------------- */

static int want(const char *key) { return !g_only || strstr(key, g_only) != NULL; }

static void cleanup(void) {
    char cmd[700];
    if (g_keep) {
        printf("databases kept in %s\n", g_dir);
        return;
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
}

static void usage(void) {
    fprintf(stderr, "usage: bench_core [--quick] [--ops N] [--reps R] [--keep] [--only KEY]\n"
                    "  --quick   small counts (CI smoke test)\n"
                    "  --ops N   operations per throughput scenario (default 20000)\n"
                    "  --reps R  repetitions per throughput scenario, median printed (default 3)\n"
                    "  --keep    keep the temporary databases\n"
                    "  --only K  run only the scenarios whose key contains K (profiling):\n"
                    "            raw-insert raw-claim raw-claim-lease enqueue1 enqueue100tx enqueuemany\n"
                    "            claimack1 claimack100 pages latency (latency-empty latency-due\n"
                    "            latency-delayed latency-retrying latency-inflight)\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *tmp = getenv("TMPDIR");
    double enq1, enq100, enqmany, ca1, ca100, raw_ins, raw_cd, raw_cdl, t_all = now_s();
    lat L[BL_COUNT];
    int ran[BL_COUNT] = {0};
    double pages[2] = {0, 0}, pages_tx[2] = {0, 0}, raw_pages[3] = {0, 0, 0};
    int i, rep;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            g_ops = 1000;
            g_warm = 100;
            g_lat_ops = 300;
            g_backlog = 10000;
            g_inflight = 1000;
            g_reps = 1;
        } else if (strcmp(argv[i], "--ops") == 0 && i + 1 < argc) {
            g_ops = atoi(argv[++i]);
            if (g_ops < 100) usage();
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            g_reps = atoi(argv[++i]);
            if (g_reps < 1 || g_reps > MAX_REPS) usage();
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            g_only = argv[++i];
        } else if (strcmp(argv[i], "--keep") == 0) {
            g_keep = 1;
        } else {
            usage();
        }
    }
    snprintf(g_dir, sizeof g_dir, "%s/tocsin-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) die("mkdtemp", g_dir);

    printf("tocsin %s on SQLite %s; file databases in a fresh temporary directory\n",
           tocsin_version(), tocsin_sqlite_version());
    printf("journal_mode=WAL, synchronous=NORMAL; payload %zu bytes; per scenario %d ops "
           "(x5 for batched ones) after %d warm-up ops;\nfigures are the median of %d "
           "interleaved repetitions, each on a fresh database\n\n",
           strlen(PAYLOAD), g_ops, g_warm, g_reps);
    fprintf(stderr, "running...\n");

    /* Repetitions interleave the scenarios so that a slow spell of the
     * machine hits all of them rather than one. */
    for (rep = 0; rep < g_reps; rep++) {
        if (want("raw-insert")) bench_raw_insert();
        if (want("enqueue1")) bench_enqueue_1();
        if (want("raw-claim")) bench_raw_claim_delete();
        if (want("claimack1")) bench_claim_ack_1();
        if (want("raw-claim-lease")) bench_raw_claim_delete_lease();
        if (want("raw-claim-tx")) bench_raw_claim_delete_tx();
        if (want("claimack1tx")) bench_claim_ack_1_tx();
        if (want("enqueue100tx")) bench_enqueue_100_tx();
        if (want("enqueuemany")) bench_enqueue_many_100();
        if (want("claimack100")) bench_claim_ack_100();
    }
    for (i = 0; i < BL_COUNT; i++) ran[i] = want(BL_KEY[i]);
    bench_latency(ran, L);
    if (want("pages")) {
        pages[0] = tocsin_pages_per_job(0);
        pages_tx[0] = tocsin_pages_per_job(1);
        raw_pages[0] = raw_pages_per_job(0, 0);
        raw_pages[1] = raw_pages_per_job(1, 0);
        raw_pages[2] = raw_pages_per_job(0, 1);
        pages[1] = pages_tx[1] = 1;
    }

    printf("%-54s %12s %10s\n", "scenario", "jobs/s", "us/job");
    for (i = 0; i < g_nrows; i++) {
        double m = median(&g_rows[i]);
        printf("%-54s %12.0f %10.2f\n", g_rows[i].name, m, 1e6 / m);
    }
    enq1 = median(find_row(N_ENQ1));
    enq100 = median(find_row(N_ENQ100));
    enqmany = median(find_row(N_ENQMANY));
    ca1 = median(find_row(N_CA1));
    ca100 = median(find_row(N_CA100));
    raw_ins = median(find_row(N_RAW_INS));
    raw_cd = median(find_row(N_RAW_CD));
    raw_cdl = median(find_row(N_RAW_CDL));

    if (enq1 && raw_ins && ca1 && raw_cd) {
        printf("\ntocsin / raw SQLite (target >= 0.90):\n");
        printf("  enqueue 1 per tx   / raw INSERT commit             %6.2f\n", enq1 / raw_ins);
        printf("  claim 1 + ack 1    / raw claim + DELETE            %6.2f\n", ca1 / raw_cd);
        if (raw_cdl)
            printf("  claim 1 + ack 1    / raw claim + DELETE, lease idx %6.2f\n", ca1 / raw_cdl);
        if (find_row(N_CA1TX) && find_row(N_RAW_CD1) && median(find_row(N_RAW_CD1)))
            printf("  claim+ack in 1 tx  / raw claim + DELETE in 1 tx    %6.2f\n",
                   median(find_row(N_CA1TX)) / median(find_row(N_RAW_CD1)));
        if (enq100 && enqmany && ca100)
            printf("  batched, for scale: begin+100 enqueue %.1fx, enqueue_many 100 %.1fx raw INSERT;"
                   " claim 100 + ack_batch 100 %.1fx raw claim+DELETE\n",
                   enq100 / raw_ins, enqmany / raw_ins, ca100 / raw_cd);
    }

    if (pages[1]) {
        printf("\nwrite cost: database pages written per job (WAL frames per claim 1 + ack 1,"
               " 1000 jobs, 20k-job queue)\n");
        printf("  tocsin claim + ack, 2 tx  %5.2f    raw claim + DELETE, 2 tx %5.2f"
               "    raw + lease index, 2 tx %5.2f\n",
               pages[0], raw_pages[0], raw_pages[1]);
        printf("  tocsin claim + ack, 1 tx  %5.2f    raw claim + DELETE, 1 tx %5.2f\n",
               pages_tx[0], raw_pages[2]);
    }

    if (ran[BL_EMPTY]) {
        printf("\nclaim latency: one claim of 1 (its own transaction) of a due priority-0 job"
               " enqueued before it;\nenqueue, ack and WAL checkpoints untimed; %d samples per"
               " backlog, taken round-robin across the backlogs\n(target: each within 2x of the"
               " empty queue)\n", g_lat_ops);
        printf("  %-48s %9s %9s %9s %10s %10s\n", "backlog", "mean us", "p50 us", "p99 us",
               "p50/empty", "p99/empty");
        for (i = 0; i < BL_COUNT; i++) {
            if (!ran[i]) continue;
            printf("  %-48s %9.1f %9.1f %9.1f %10.2f %10.2f\n", BL_NAME[i], L[i].mean, L[i].p50,
                   L[i].p99, L[i].p50 / L[BL_EMPTY].p50, L[i].p99 / L[BL_EMPTY].p99);
        }
        if (g_backlog != 100000 || g_inflight != 10000)
            printf("  (--quick: backlogs of %d and %d in flight instead of 100k and 10k)\n",
                   g_backlog, g_inflight);
    }

    printf("\nraw baseline: table q(id INTEGER PRIMARY KEY AUTOINCREMENT, queue, state, payload,"
           " run_at, lease_until)\n"
           "  with a partial index q_claim(queue, run_at, id) WHERE state='pending', same pragmas;\n"
           "  INSERT: one prepared INSERT per autocommit transaction;\n"
           "  claim + DELETE: UPDATE q SET state='processing', lease_until=.. WHERE id ="
           " (SELECT id .. ORDER BY run_at, id LIMIT 1)\n"
           "    RETURNING id, payload in one autocommit transaction, then DELETE FROM q WHERE"
           " id=? in a second one;\n"
           "  'lease idx': the same with a second partial index q_lease(queue, lease_until)"
           " WHERE state='processing',\n"
           "    as tocsin keeps so that lapsed leases are found without a scan: one more page"
           " per commit.\n");
    printf("total time %.1f s\n", now_s() - t_all);
    cleanup();
    return 0;
}
