/*
 * One measurement for bench/run.py: the C API beside raw SQL through the C sqlite3 API
 * (the statements of a minimal queue: INSERT of the JSON; claim = UPDATE ... RETURNING on
 * an indexed ready column; ack = DELETE), on fresh WAL files with synchronous=NORMAL.
 *
 *   bench_peers_c IMPL WORKLOAD --dir DIR [--n N] [--backlog B]
 *
 * IMPL: tocsin | raw; WORKLOAD: enq1 enq100 ca1 ca100 claimlat. Prints one JSON object
 * {"metrics": {...}, "samples": {...}}; asserts nothing about speed.
 */
#define _POSIX_C_SOURCE 200809L
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tocsin.h"

static const char PAYLOAD[] = "{\"to\": \"ada@example.org\", \"template\": \"welcome\", \"n\": 1}";
static int g_raw;
static tocsin_db *g_db;
static sqlite3 *g_c;
static sqlite3_stmt *g_ins, *g_claim, *g_del;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, const char *msg) {
    fprintf(stderr, "bench_peers_c: %s: %s\n", what, msg ? msg : "");
    exit(1);
}

#define T(expr) do { if ((expr) != TOCSIN_OK) die(#expr, tocsin_errmsg(g_db)); } while (0)
#define S(expr) do { int rc_ = (expr); if (rc_ != SQLITE_OK && rc_ != SQLITE_DONE && rc_ != SQLITE_ROW) \
    die(#expr, sqlite3_errmsg(g_c)); } while (0)

static void exec(const char *sql) {
    char *err = NULL;
    if (sqlite3_exec(g_c, sql, NULL, NULL, &err) != SQLITE_OK) die(sql, err);
}

static void open_impl(const char *path) {
    if (!g_raw) {
        if (tocsin_open(&g_db, path, NULL) != TOCSIN_OK) die("tocsin_open", g_db ? tocsin_errmsg(g_db) : "");
        return;
    }
    if (sqlite3_open(path, &g_c) != SQLITE_OK) die("sqlite3_open", path);
    sqlite3_busy_timeout(g_c, 10000);
    exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
         "CREATE TABLE IF NOT EXISTS jobs(id INTEGER PRIMARY KEY, queue TEXT NOT NULL,"
         " payload TEXT NOT NULL, ready INTEGER NOT NULL DEFAULT 1, lease_until INTEGER, worker TEXT);"
         "CREATE INDEX IF NOT EXISTS jobs_ready ON jobs(queue, id) WHERE ready = 1;");
    S(sqlite3_prepare_v2(g_c, "INSERT INTO jobs(queue, payload) VALUES ('bench', ?1)", -1, &g_ins, NULL));
    S(sqlite3_prepare_v2(g_c, "UPDATE jobs SET ready = 0, lease_until = ?1, worker = 'w1' WHERE id IN "
                              "(SELECT id FROM jobs WHERE queue = 'bench' AND ready = 1 ORDER BY id LIMIT ?2) "
                              "RETURNING id, payload", -1, &g_claim, NULL));
    S(sqlite3_prepare_v2(g_c, "DELETE FROM jobs WHERE id = ?1", -1, &g_del, NULL));
}

static void raw_insert(void) {
    sqlite3_bind_text(g_ins, 1, PAYLOAD, -1, SQLITE_STATIC);
    S(sqlite3_step(g_ins));
    sqlite3_reset(g_ins);
}

static void enqueue_n(int k) { /* k jobs in one transaction */
    if (g_raw) {
        int i;
        exec("BEGIN IMMEDIATE");
        for (i = 0; i < k; i++) raw_insert();
        exec("COMMIT");
    } else {
        tocsin_job_spec specs[1000];
        int64_t ids[1000];
        int i;
        for (i = 0; i < k; i++) {
            specs[i].queue = "bench";
            specs[i].payload = PAYLOAD;
            specs[i].opts = NULL;
        }
        T(tocsin_queue_enqueue_many(g_db, ids, specs, (size_t)k));
    }
}

static void enqueue_1(void) {
    if (g_raw) {
        raw_insert();
    } else {
        int64_t id;
        T(tocsin_queue_enqueue(g_db, &id, "bench", PAYLOAD, NULL));
    }
}

static void fill(int n) {
    int i;
    for (i = 0; i < n; i += 1000) enqueue_n(n - i < 1000 ? n - i : 1000);
}

/* claims up to k jobs (one transaction) and acks them (one more); returns how many */
static size_t claim_ack(size_t k, double *claim_s) {
    double t0 = now_s();
    size_t n = 0;
    if (g_raw) {
        int64_t ids[100];
        struct timespec ts;
        size_t i;
        clock_gettime(CLOCK_REALTIME, &ts);
        exec("BEGIN IMMEDIATE");
        sqlite3_bind_int64(g_claim, 1, (sqlite3_int64)ts.tv_sec * 1000 + 30000);
        sqlite3_bind_int(g_claim, 2, (int)k);
        while (sqlite3_step(g_claim) == SQLITE_ROW) {
            if (sqlite3_column_bytes(g_claim, 1) <= 0) die("claim", "empty payload");
            ids[n++] = sqlite3_column_int64(g_claim, 0);
        }
        sqlite3_reset(g_claim);
        exec("COMMIT");
        if (claim_s) *claim_s = now_s() - t0;
        if (n > 1) exec("BEGIN IMMEDIATE");
        for (i = 0; i < n; i++) {
            sqlite3_bind_int64(g_del, 1, ids[i]);
            S(sqlite3_step(g_del));
            sqlite3_reset(g_del);
        }
        if (n > 1) exec("COMMIT");
    } else {
        tocsin_job *jobs;
        int64_t ids[100], tokens[100];
        size_t i, acked;
        T(tocsin_queue_claim(g_db, &jobs, &n, "bench", "w1", k, 30000));
        if (claim_s) *claim_s = now_s() - t0;
        for (i = 0; i < n; i++) {
            ids[i] = jobs[i].id;
            tokens[i] = jobs[i].token;
        }
        if (n == 1) {
            int ok;
            T(tocsin_job_ack(g_db, &ok, ids[0], tokens[0]));
        } else if (n > 1) {
            T(tocsin_job_ack_batch(g_db, &acked, ids, tokens, n));
        }
        tocsin_jobs_free(jobs, n);
    }
    return n;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void print_samples(const char *name, const double *v, int n, int last) {
    int i;
    printf("\"%s\": [", name);
    for (i = 0; i < n; i++) printf("%s%.6f", i ? ", " : "", v[i]);
    printf("]%s", last ? "" : ", ");
}

int main(int argc, char **argv) {
    const char *dir = ".", *w;
    char path[4096];
    int n = 5000, backlog = 100000, i, rounds;
    double t;
    if (argc < 3) die("usage", "bench_peers_c IMPL WORKLOAD --dir DIR [--n N] [--backlog B]");
    g_raw = strcmp(argv[1], "raw") == 0;
    if (!g_raw && strcmp(argv[1], "tocsin") != 0) die("unknown impl", argv[1]);
    w = argv[2];
    for (i = 3; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--dir") == 0) dir = argv[i + 1];
        else if (strcmp(argv[i], "--n") == 0) n = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--backlog") == 0) backlog = atoi(argv[i + 1]);
    }
    snprintf(path, sizeof path, "%s/%s.db", dir, w);
    open_impl(path);
    rounds = n / 100 > 0 ? n / 100 : 1;
    if (strcmp(w, "enq1") == 0) {
        t = now_s();
        for (i = 0; i < n; i++) enqueue_1();
        printf("{\"metrics\": {\"ops_s\": %.3f}, \"samples\": {}}\n", n / (now_s() - t));
    } else if (strcmp(w, "enq100") == 0) {
        t = now_s();
        for (i = 0; i < rounds; i++) enqueue_n(100);
        printf("{\"metrics\": {\"ops_s\": %.3f}, \"samples\": {}}\n", rounds * 100 / (now_s() - t));
    } else if (strcmp(w, "ca1") == 0) {
        fill(n);
        t = now_s();
        for (i = 0; i < n; i++)
            if (claim_ack(1, NULL) != 1) die("claim", "queue ran dry");
        printf("{\"metrics\": {\"ops_s\": %.3f}, \"samples\": {}}\n", n / (now_s() - t));
    } else if (strcmp(w, "ca100") == 0) {
        fill(rounds * 100);
        t = now_s();
        for (i = 0; i < rounds; i++)
            if (claim_ack(100, NULL) != 100) die("claim", "short batch");
        printf("{\"metrics\": {\"ops_s\": %.3f}, \"samples\": {}}\n", rounds * 100 / (now_s() - t));
    } else if (strcmp(w, "claimlat") == 0) {
        /* the time of one claim call with 0, then `backlog`, other jobs queued */
        double *e = malloc(sizeof *e * (size_t)n), *f = malloc(sizeof *f * (size_t)n), s;
        if (!e || !f) die("malloc", "");
        for (i = 0; i < n; i++) {
            enqueue_1();
            if (claim_ack(1, &s) != 1) die("claim", "empty");
            e[i] = s * 1000.0;
        }
        fill(backlog + n);
        for (i = 0; i < n; i++) {
            if (claim_ack(1, &s) != 1) die("claim", "empty");
            f[i] = s * 1000.0;
        }
        qsort(e, (size_t)n, sizeof *e, cmp);
        qsort(f, (size_t)n, sizeof *f, cmp);
        printf("{\"metrics\": {\"empty_p50_ms\": %.6f, \"backlog_p50_ms\": %.6f, \"backlog_over_empty\": %.4f}, "
               "\"samples\": {", e[n / 2], f[n / 2], f[n / 2] / e[n / 2]);
        print_samples("empty", e, n, 0);
        print_samples("backlog", f, n, 1);
        printf("}}\n");
        free(e);
        free(f);
    } else {
        die("unknown workload", w);
    }
    if (g_raw) {
        sqlite3_finalize(g_ins);
        sqlite3_finalize(g_claim);
        sqlite3_finalize(g_del);
        sqlite3_close(g_c);
    } else {
        tocsin_close(g_db);
    }
    return 0;
}
