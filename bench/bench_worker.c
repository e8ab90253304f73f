#define _POSIX_C_SOURCE 200809L
/*
 * The worker protocol end to end in C: no-op tasks through tocsin_worker_next
 * and tocsin_worker_finish (group-committed outcomes, claims of up to the
 * free slots), one thread, a file database in a fresh temporary directory.
 * Beside it, for scale: claim 100 + ack_batch 100 without results. Prints
 * tasks/s per concurrency (the median of 3 runs).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tocsin.h"

#define N_TASKS 20000

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static char dir[256];

static tocsin_db *fresh(const char *name) {
    char path[400], cmd[1400];
    tocsin_db *db = NULL;
    snprintf(path, sizeof path, "%s/%s.db", dir, name);
    snprintf(cmd, sizeof cmd, "rm -f '%s' '%s-wal' '%s-shm'", path, path, path);
    if (system(cmd) != 0) exit(2);
    if (tocsin_open(&db, path, NULL) != TOCSIN_OK) {
        fprintf(stderr, "open: %s\n", tocsin_errmsg(NULL));
        exit(2);
    }
    return db;
}

static void fill(tocsin_db *db) {
    tocsin_task_call c = TOCSIN_TASK_CALL_INIT;
    int64_t id;
    int i;
    c.task = "noop";
    tocsin_begin(db);
    for (i = 0; i < N_TASKS; i++) tocsin_task_enqueue(db, &id, "q", &c, NULL);
    tocsin_commit(db);
}

/* tasks/s through the worker protocol at this concurrency */
static double run_worker(int concurrency) {
    static const char *const qs[] = {"q"};
    tocsin_db *db = fresh("worker");
    tocsin_worker_opts o = TOCSIN_WORKER_OPTS_INIT;
    tocsin_outcome ok = TOCSIN_OUTCOME_INIT;
    tocsin_worker *w = NULL;
    int done = 0;
    double t0;
    fill(db);
    o.queues = qs;
    o.n_queues = 1;
    o.concurrency = concurrency;
    if (tocsin_worker_open(&w, db, &o) != TOCSIN_OK || tocsin_worker_register(w, "noop", NULL) != TOCSIN_OK)
        exit(3);
    t0 = now_s();
    while (done < N_TASKS) {
        tocsin_task_run **runs = NULL;
        size_t n = 0, i;
        if (tocsin_worker_next(w, &runs, &n, 1000) != TOCSIN_OK) break;
        for (i = 0; i < n; i++, done++) tocsin_worker_finish(w, NULL, runs[i], &ok);
        tocsin_free(runs);
    }
    tocsin_worker_flush(w, NULL);
    t0 = now_s() - t0;
    tocsin_worker_close(w);
    tocsin_close(db);
    return done / t0;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(void) {
    static const int conc[] = {1, 8, 100};
    size_t i;
    snprintf(dir, sizeof dir, "%s/tocsin-bench-worker-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
        if (system(cmd) != 0) return 2;
    }
    printf("worker protocol, C, one thread: %d no-op tasks (result saved, job acked), median of 3\n", N_TASKS);
    printf("  %-12s %12s\n", "concurrency", "tasks/s");
    for (i = 0; i < sizeof conc / sizeof conc[0]; i++) {
        double r[3];
        int k;
        for (k = 0; k < 3; k++) r[k] = run_worker(conc[i]);
        qsort(r, 3, sizeof r[0], cmp);
        printf("  %-12d %12.0f\n", conc[i], r[1]);
    }
    {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) return 2;
    }
    return 0;
}
