/* An external program built against an *installed* tocsin (make test-consumer, once
 * through CMake's find_package and once through pkg-config, shared and static):
 * opens a database in a fresh temporary directory, enqueues, claims and acks one
 * job, and prints the versions. Exits non-zero on any failure. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tocsin.h>

static int fail(tocsin_db *db, const char *what) {
    fprintf(stderr, "consumer: %s failed: %s\n", what, db ? tocsin_errmsg(db) : "no handle");
    return 1;
}

static int run(const char *path) {
    tocsin_db *db = NULL;
    tocsin_job *jobs = NULL;
    size_t n = 0;
    int64_t id = 0;
    int ok = 0, rc = 1;
    if (tocsin_open(&db, path, NULL) != TOCSIN_OK) return fail(db, "tocsin_open");
    if (tocsin_queue_enqueue(db, &id, "emails", "{\"to\":\"ann@example.com\"}", NULL) != TOCSIN_OK) {
        rc = fail(db, "tocsin_queue_enqueue");
        goto done;
    }
    if (tocsin_queue_claim(db, &jobs, &n, "emails", "consumer", 10, 30000) != TOCSIN_OK) {
        rc = fail(db, "tocsin_queue_claim");
        goto done;
    }
    if (n != 1 || jobs[0].id != id || strcmp(jobs[0].payload, "{\"to\":\"ann@example.com\"}") != 0) {
        fprintf(stderr, "consumer: claimed %zu jobs, expected job %lld\n", n, (long long)id);
        goto done;
    }
    if (tocsin_job_ack(db, &ok, jobs[0].id, jobs[0].token) != TOCSIN_OK || !ok) {
        rc = fail(db, "tocsin_job_ack");
        goto done;
    }
    tocsin_jobs_free(jobs, n);
    jobs = NULL;
    if (tocsin_queue_claim(db, &jobs, &n, "emails", "consumer", 10, 30000) != TOCSIN_OK || n != 0) {
        fprintf(stderr, "consumer: the acked job is still claimable\n");
        goto done;
    }
    printf("tocsin %s (header %s, SQLite %s): job %lld enqueued, claimed, acked\n",
           tocsin_version(), TOCSIN_VERSION_STRING, tocsin_sqlite_version(), (long long)id);
    rc = 0;
done:
    tocsin_jobs_free(jobs, n);
    if (tocsin_close(db) != TOCSIN_OK && rc == 0) rc = 1;
    return rc;
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    char dir[512], path[600];
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    size_t i;
    int rc;
    if (strcmp(tocsin_version(), TOCSIN_VERSION_STRING) != 0) {
        fprintf(stderr, "consumer: header %s but library %s\n", TOCSIN_VERSION_STRING, tocsin_version());
        return 1;
    }
    snprintf(dir, sizeof dir, "%s/tocsin-consumer-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("consumer: mkdtemp");
        return 1;
    }
    snprintf(path, sizeof path, "%s/app.db", dir);
    rc = run(path);
    for (i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        char f[620];
        snprintf(f, sizeof f, "%s%s", path, suffixes[i]);
        unlink(f);
    }
    rmdir(dir);
    return rc;
}
