/*
 * Crash safety: a child process SIGKILLed inside an open transaction leaves
 * the database intact, no rows of its transaction behind, and the write lock
 * free for the next writer.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

static void killed_in_transaction(int claim_phase) {
    t_clock clk = {1000};
    tocsin_db *db = t_open(claim_phase ? "crash_claim" : "crash_enqueue", &clk);
    char path[512];
    int fds[2];
    pid_t pid;
    char c = 0;
    int status = 0;
    int64_t id = 0;
    tocsin_job *jobs = NULL;
    size_t n = 0;
    sqlite3_stmt *st;
    snprintf(path, sizeof path, "%s", sqlite3_db_filename(tocsin_sqlite(db), "main"));
    CHECK_OK(db, tocsin_exec(db, "CREATE TABLE orders(id INTEGER PRIMARY KEY, item TEXT)"));
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "{\"before\":1}", NULL));
    CHECK(pipe(fds) == 0);
    pid = fork();
    if (pid == 0) {
        tocsin_db *child = NULL;
        int64_t cid;
        close(fds[0]);
        if (tocsin_open(&child, path, NULL) != TOCSIN_OK) _exit(3);
        if (tocsin_begin(child) != TOCSIN_OK) _exit(4);
        tocsin_exec(child, "INSERT INTO orders(item) VALUES ('lost')");
        if (claim_phase) {
            tocsin_job *cj = NULL;
            size_t cn = 0;
            tocsin_queue_claim(child, &cj, &cn, "q", "doomed", 10, 60000);
        }
        for (int i = 0; i < 200; i++) tocsin_queue_enqueue(child, &cid, "q", "{\"lost\":true}", NULL);
        tocsin_notify(child, &cid, "c", "{}", NULL);
        tocsin_stream_publish(child, &cid, "t", "{}", NULL, NULL);
        if (write(fds[1], "x", 1) != 1) _exit(5);
        for (;;) pause(); /* hold the transaction open until killed */
    }
    close(fds[1]);
    CHECK(read(fds[0], &c, 1) == 1);
    close(fds[0]);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

    /* the lock is free, nothing of the child's transaction is visible */
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", "{\"after\":1}", NULL));
    CHECK_EQ_I(t_count(db, "orders"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs"), 2);
    CHECK_EQ_I(t_count(db, "_tocsin_jobs WHERE state = 'processing'"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_notifications"), 0);
    CHECK_EQ_I(t_count(db, "_tocsin_events"), 0);
    CHECK_OK(db, tocsin_queue_claim(db, &jobs, &n, "q", "survivor", 10, 1000));
    CHECK_EQ_I(n, 2);
    tocsin_jobs_free(jobs, n);
    CHECK(sqlite3_prepare_v2(tocsin_sqlite(db), "PRAGMA integrity_check", -1, &st, NULL) == SQLITE_OK);
    CHECK(sqlite3_step(st) == SQLITE_ROW);
    CHECK_STR((const char *)sqlite3_column_text(st, 0), "ok");
    sqlite3_finalize(st);
    tocsin_close(db);
}

void suite_crash(void) {
    killed_in_transaction(0);
    killed_in_transaction(1);
}
