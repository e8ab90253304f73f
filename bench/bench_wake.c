/*
 * Cross-process wake latency: a writer process commits a notification at
 * random intervals; a listener process timestamps the wake (its
 * subscription's descriptor fires) and the delivery (tocsin_listen_next hands
 * the row over). Both read CLOCK_MONOTONIC, which processes share. Runs the
 * safety poll alone (kernel events off), then inotify + poll, and measures
 * the watcher's idle CPU. Usage: bench_wake [samples] (default 1000).
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tocsin.h"

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ns(int64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, int64_t *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_i64);
    printf("  %-34s p50 %7.3f ms  p90 %7.3f ms  p99 %7.3f ms  max %7.3f ms\n", what,
           v[n / 2] / 1e6, v[n * 90 / 100] / 1e6, v[n * 99 / 100] / 1e6, v[n - 1] / 1e6);
}

static void remove_db(const char *path) {
    static const char *sfx[] = {"", "-wal", "-shm", "-journal"};
    char p[600];
    int i;
    for (i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s%s", path, sfx[i]);
        unlink(p);
    }
}

/* The writer: commits sample i after a random pause of 0.5..3 ms. */
static void writer(const char *path, int n, atomic_int *ready, int64_t *t_start, int64_t *t_end) {
    tocsin_db *db = NULL;
    int i;
    while (!atomic_load(ready)) sleep_ns(100000);
    if (tocsin_open(&db, path, NULL) != TOCSIN_OK) _exit(2);
    srand((unsigned)getpid());
    for (i = 0; i < n; i++) {
        char payload[32];
        int64_t id;
        sleep_ns(500000 + (int64_t)(rand() % 2500) * 1000);
        snprintf(payload, sizeof payload, "%d", i);
        t_start[i] = now_ns();
        if (tocsin_notify(db, &id, "bench", payload, NULL) != TOCSIN_OK) _exit(3);
        t_end[i] = now_ns();
    }
    tocsin_close(db);
    _exit(0);
}

static int run(const char *path, int n, int kernel_events) {
    size_t bytes = sizeof(atomic_int) * 2 + sizeof(int64_t) * 4 * (size_t)n + 64;
    char *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    atomic_int *ready = (atomic_int *)mem;
    int64_t *t_start = (int64_t *)(mem + 64), *t_end = t_start + n, *t_wake = t_end + n,
            *t_got = t_wake + n, *lat = malloc(sizeof(int64_t) * (size_t)n);
    tocsin_wake_opts wo = TOCSIN_WAKE_OPTS_INIT;
    tocsin_db *db = NULL;
    tocsin_sub *sub = NULL;
    tocsin_listener *l = NULL;
    int got = 0, status = 0, i, early = 0;
    pid_t pid;
    if (mem == MAP_FAILED || !lat) return 1;
    memset(mem, 0, bytes);
    remove_db(path);
    pid = fork();
    if (pid == 0) writer(path, n, ready, t_start, t_end);
    if (tocsin_open(&db, path, NULL) != TOCSIN_OK) {
        fprintf(stderr, "open: %s\n", tocsin_errmsg(db));
        kill(pid, SIGKILL);
        return 1;
    }
    wo.no_kernel_events = !kernel_events;
    tocsin_wake_configure(&wo);
    if (tocsin_sub_open(&sub, db) != TOCSIN_OK ||
        tocsin_listen_open(&l, db, "bench", 64) != TOCSIN_OK) {
        fprintf(stderr, "subscribe: %s\n", tocsin_errmsg(db));
        kill(pid, SIGKILL);
        return 1;
    }
    atomic_store(ready, 1);
    while (got < n) {
        tocsin_message *m = NULL;
        size_t k = 0, j;
        int64_t woke;
        int rc = tocsin_sub_wait(sub, 10000);
        woke = now_ns();
        if (rc == TOCSIN_TIMEOUT) {
            fprintf(stderr, "no wake for 10 s after %d samples\n", got);
            break;
        }
        if (tocsin_listen_next(l, &m, &k, 0) != TOCSIN_OK) continue; /* a wake with no row */
        for (j = 0; j < k; j++) {
            int idx = atoi(m[j].payload);
            if (idx >= 0 && idx < n) {
                t_wake[idx] = woke;
                t_got[idx] = now_ns();
            }
        }
        got += (int)k;
        tocsin_messages_free(m, k);
    }
    waitpid(pid, &status, 0);
    printf("%s (%d samples, listener in another process than the writer)\n",
           kernel_events ? "(b) inotify + poll (1 ms, backing off to 20 ms when idle)"
                         : "(a) 1 ms poll alone",
           got);
    if (got < n || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("  incomplete run (writer status %d)\n", status);
        return 1;
    }
    /* From the writer's commit returning; a wake can even beat the return. */
    for (i = 0; i < n; i++) {
        lat[i] = t_wake[i] - t_end[i];
        if (lat[i] < 0) {
            early++;
            lat[i] = 0;
        }
    }
    report("wake, from commit returned", lat, n);
    for (i = 0; i < n; i++) lat[i] = t_wake[i] - t_start[i];
    report("wake, from commit started", lat, n);
    for (i = 0; i < n; i++) lat[i] = t_got[i] - t_start[i];
    report("row delivered, from commit started", lat, n);
    if (early) printf("  (%d wakes arrived before the writer's commit call returned)\n", early);
    tocsin_listen_close(l);
    tocsin_sub_close(sub);
    tocsin_close(db);
    tocsin_wake_configure(NULL);
    munmap(mem, bytes);
    free(lat);
    remove_db(path);
    return 0;
}

/* CPU of this process over 3 idle seconds while one watcher runs (the main
 * thread sleeps in a wait, so the watcher is all that runs). */
static void idle_cpu(const char *path, int kernel_events, int idle_poll_ms, const char *what) {
    tocsin_wake_opts wo = TOCSIN_WAKE_OPTS_INIT;
    tocsin_db *db = NULL;
    tocsin_sub *sub = NULL;
    struct rusage a, b;
    int64_t t0, t1;
    double cpu;
    remove_db(path);
    if (tocsin_open(&db, path, NULL) != TOCSIN_OK) return;
    wo.no_kernel_events = !kernel_events;
    wo.idle_poll_ms = idle_poll_ms;
    tocsin_wake_configure(&wo);
    tocsin_sub_open(&sub, db);
    tocsin_sub_wait(sub, 200);
    getrusage(RUSAGE_SELF, &a);
    t0 = now_ns();
    while (now_ns() - t0 < 3000000000LL) tocsin_sub_wait(sub, 1000);
    t1 = now_ns();
    getrusage(RUSAGE_SELF, &b);
    cpu = (double)(b.ru_utime.tv_sec - a.ru_utime.tv_sec) * 1e6 + (double)(b.ru_utime.tv_usec - a.ru_utime.tv_usec) +
          (double)(b.ru_stime.tv_sec - a.ru_stime.tv_sec) * 1e6 + (double)(b.ru_stime.tv_usec - a.ru_stime.tv_usec);
    printf("idle watcher CPU, %-40s %.2f%% of one core (%.1f ms CPU over %.3f s)\n", what,
           cpu / ((double)(t1 - t0) / 1e3) * 100,
           cpu / 1e3, (double)(t1 - t0) / 1e9);
    tocsin_sub_close(sub);
    tocsin_close(db);
    tocsin_wake_configure(NULL);
    remove_db(path);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    char path[512];
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    if (n < 10) n = 10;
    snprintf(path, sizeof path, "%s/tocsin-bench-wake-%d.db", tmp, (int)getpid());
    printf("tocsin %s, SQLite %s: cross-process wake latency (WAL, synchronous=NORMAL)\n",
           tocsin_version(), tocsin_sqlite_version());
    if (run(path, n, 0) != 0) return 1;
    if (run(path, n, 1) != 0) return 1;
    idle_cpu(path, 0, 0, "(a) 1 ms poll alone:");
    idle_cpu(path, 1, 0, "(b) inotify + poll (1 ms, idle 20 ms):");
    idle_cpu(path, 1, 1, "    inotify + fixed 1 ms poll:");
    return 0;
}
