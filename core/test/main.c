/* Runs every C suite; prints "N passed, N failed" last. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "suites.h"

int t_passed, t_failed;
const char *t_suite = "";
static char t_dir[256];

int64_t t_clock_fn(void *ctx) { return ((t_clock *)ctx)->now; }

void t_nap(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

const char *t_path(const char *name) {
    static char path[512];
    static const char *sfx[] = {"", "-wal", "-shm", "-journal"};
    size_t i;
    snprintf(path, sizeof path, "%s/%s.db", t_dir, name);
    for (i = 0; i < 4; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s%s", path, sfx[i]);
        unlink(p);
    }
    return path;
}

tocsin_db *t_open(const char *name, t_clock *clk) {
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    tocsin_db *db = NULL;
    if (clk) {
        o.clock = t_clock_fn;
        o.clock_ctx = clk;
    }
    if (tocsin_open(&db, t_path(name), &o) != TOCSIN_OK) {
        fprintf(stderr, "cannot open test db %s: %s\n", name, tocsin_errmsg(db));
        exit(2);
    }
    return db;
}

long long t_count(tocsin_db *db, const char *from_where) {
    char sql[512];
    sqlite3_stmt *st;
    long long n = -1;
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", from_where);
    if (sqlite3_prepare_v2(tocsin_sqlite(db), sql, -1, &st, NULL) != SQLITE_OK) return -1;
    if (sqlite3_step(st) == SQLITE_ROW) n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    size_t i;
    snprintf(t_dir, sizeof t_dir, "%s/tocsin-test-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    mkdir(t_dir, 0700);
    for (i = 0; i < sizeof SUITES / sizeof SUITES[0]; i++) {
        if (only && strcmp(only, SUITES[i].name) != 0) continue;
        t_suite = SUITES[i].name;
        SUITES[i].fn();
    }
    /* leave t_dir for inspection only when something failed */
    if (!t_failed) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", t_dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", t_dir);
    }
    printf("%d passed, %d failed\n", t_passed, t_failed);
    return t_failed ? 1 : 0;
}
