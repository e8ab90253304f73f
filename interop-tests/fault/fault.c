/*
 * The fault suite: I/O failures under every tocsin operation.
 *
 * 1. A test VFS ("tcfault"), registered as the process's default VFS so that
 *    every connection the core opens (sqlite3_open_v2 with a NULL VFS, the
 *    transaction-handle pool included) goes through it. It forwards to the
 *    real default VFS and, once armed, makes the Nth xWrite / xSync /
 *    xTruncate after arming -- and every later one, until disarmed: a disk
 *    that stays full -- fail with SQLITE_FULL or SQLITE_IOERR_*; one kind
 *    fails the Nth write only (a transient fault).
 *    For each representative operation and each fault kind, N sweeps over
 *    every write the operation makes (until the operation runs with no fault
 *    left to inject). At each N: the API returns the fault's code
 *    (TOCSIN_FULL / TOCSIN_IOERR, the thread's error code, the SQLite code,
 *    a message), the operation is all or nothing (its rows fully there or
 *    not at all; an error means not at all), integrity_check is ok, and once
 *    the fault clears the same handle does the operation, and a reopened
 *    handle sees it.
 * 2. A real full disk: a 256 KiB tmpfs mounted in a private mount namespace
 *    (unshare, as root); where that is refused, RLIMIT_FSIZE with SIGXFSZ
 *    ignored (the run says which).
 * 3. Opening what cannot be opened: a corrupt database, a file that is not a
 *    database, a read-only directory (a read-only tmpfs mount; without mount
 *    rights, a child that dropped root so that permission bits apply), a
 *    missing parent directory: a clear error at open, nothing created.
 *
 * Prints "N passed, N failed"; exit 1 on any failure or when nothing ran.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sqlite3.h>

#include "test.h"

int t_passed, t_failed;
const char *t_suite = "";
int64_t t_clock_fn(void *ctx) { return ((t_clock *)ctx)->now; }

static char dir[512];
static int verbose;

/* ===================================================================== */
/* the fault-injecting VFS                                               */

#define F_WRITE 1
#define F_SYNC 2
#define F_TRUNC 4

static struct {
    int armed;     /* counting */
    int kinds;     /* F_* counted */
    long countdown; /* the Nth counted call fails ... */
    int err;       /* ... with this SQLite code */
    long fired;    /* calls failed since arming */
    long seen;     /* counted calls since arming */
    int once;      /* fail the Nth call only (a transient fault), not every later one */
} fault;

static void fault_arm(int kinds, long n, int err, int once) {
    fault.once = once;
    fault.kinds = kinds;
    fault.countdown = n;
    fault.err = err;
    fault.fired = 0;
    fault.seen = 0;
    fault.armed = 1;
}
static long fault_disarm(void) {
    fault.armed = 0;
    return fault.fired;
}
static int fault_hit(int kind) {
    if (!fault.armed || !(fault.kinds & kind)) return 0;
    fault.seen++;
    if (fault.once ? fault.seen == fault.countdown : fault.fired || fault.seen >= fault.countdown) {
        fault.fired++;
        return 1;
    }
    return 0;
}

typedef struct ffile {
    sqlite3_file base;
    sqlite3_file *real;
} ffile;

static sqlite3_vfs *real_vfs;
static sqlite3_vfs shim_vfs;
static sqlite3_io_methods shim_io[4]; /* by iVersion 1..3 */

#define REAL(f) (((ffile *)(f))->real)
static int f_close(sqlite3_file *f) {
    int rc = REAL(f)->pMethods->xClose(REAL(f));
    f->pMethods = NULL;
    return rc;
}
static int f_read(sqlite3_file *f, void *b, int n, sqlite3_int64 off) {
    return REAL(f)->pMethods->xRead(REAL(f), b, n, off);
}
static int f_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 off) {
    if (fault_hit(F_WRITE)) return fault.err;
    return REAL(f)->pMethods->xWrite(REAL(f), b, n, off);
}
static int f_truncate(sqlite3_file *f, sqlite3_int64 size) {
    if (fault_hit(F_TRUNC)) return fault.err;
    return REAL(f)->pMethods->xTruncate(REAL(f), size);
}
static int f_sync(sqlite3_file *f, int flags) {
    if (fault_hit(F_SYNC)) return fault.err;
    return REAL(f)->pMethods->xSync(REAL(f), flags);
}
static int f_size(sqlite3_file *f, sqlite3_int64 *out) { return REAL(f)->pMethods->xFileSize(REAL(f), out); }
static int f_lock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xLock(REAL(f), l); }
static int f_unlock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xUnlock(REAL(f), l); }
static int f_reserved(sqlite3_file *f, int *out) { return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out); }
static int f_fcntl(sqlite3_file *f, int op, void *arg) {
    return REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}
static int f_sector(sqlite3_file *f) { return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int f_devchar(sqlite3_file *f) { return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f)); }
static int f_shmmap(sqlite3_file *f, int pg, int sz, int ext, void volatile **pp) {
    return REAL(f)->pMethods->xShmMap(REAL(f), pg, sz, ext, pp);
}
static int f_shmlock(sqlite3_file *f, int off, int n, int flags) {
    return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags);
}
static void f_shmbarrier(sqlite3_file *f) { REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int f_shmunmap(sqlite3_file *f, int del) { return REAL(f)->pMethods->xShmUnmap(REAL(f), del); }
static int f_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **pp) {
    return REAL(f)->pMethods->xFetch(REAL(f), off, n, pp);
}
static int f_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p) {
    return REAL(f)->pMethods->xUnfetch(REAL(f), off, p);
}

static int v_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags, int *out_flags) {
    ffile *ff = (ffile *)file;
    int rc, v;
    (void)vfs;
    ff->real = (sqlite3_file *)(ff + 1);
    rc = real_vfs->xOpen(real_vfs, name, ff->real, flags, out_flags);
    if (ff->real->pMethods == NULL) {
        file->pMethods = NULL;
        return rc;
    }
    v = ff->real->pMethods->iVersion;
    file->pMethods = &shim_io[v < 1 ? 1 : v > 3 ? 3 : v];
    return rc;
}
static int v_delete(sqlite3_vfs *v, const char *n, int sync) {
    (void)v;
    return real_vfs->xDelete(real_vfs, n, sync);
}
static int v_access(sqlite3_vfs *v, const char *n, int flags, int *out) {
    (void)v;
    return real_vfs->xAccess(real_vfs, n, flags, out);
}
static int v_fullpath(sqlite3_vfs *v, const char *n, int size, char *out) {
    (void)v;
    return real_vfs->xFullPathname(real_vfs, n, size, out);
}
static void *v_dlopen(sqlite3_vfs *v, const char *n) {
    (void)v;
    return real_vfs->xDlOpen(real_vfs, n);
}
static void v_dlerror(sqlite3_vfs *v, int n, char *out) {
    (void)v;
    real_vfs->xDlError(real_vfs, n, out);
}
static void (*v_dlsym(sqlite3_vfs *v, void *h, const char *s))(void) {
    (void)v;
    return real_vfs->xDlSym(real_vfs, h, s);
}
static void v_dlclose(sqlite3_vfs *v, void *h) {
    (void)v;
    real_vfs->xDlClose(real_vfs, h);
}
static int v_random(sqlite3_vfs *v, int n, char *out) {
    (void)v;
    return real_vfs->xRandomness(real_vfs, n, out);
}
static int v_sleep(sqlite3_vfs *v, int us) {
    (void)v;
    return real_vfs->xSleep(real_vfs, us);
}
static int v_time(sqlite3_vfs *v, double *out) {
    (void)v;
    return real_vfs->xCurrentTime(real_vfs, out);
}
static int v_lasterr(sqlite3_vfs *v, int n, char *out) {
    (void)v;
    return real_vfs->xGetLastError ? real_vfs->xGetLastError(real_vfs, n, out) : 0;
}
static int v_time64(sqlite3_vfs *v, sqlite3_int64 *out) {
    (void)v;
    return real_vfs->xCurrentTimeInt64(real_vfs, out);
}

static void shim_install(void) {
    int v;
    sqlite3_initialize();
    real_vfs = sqlite3_vfs_find(NULL);
    for (v = 1; v <= 3; v++) {
        sqlite3_io_methods *m = &shim_io[v];
        m->iVersion = v;
        m->xClose = f_close;
        m->xRead = f_read;
        m->xWrite = f_write;
        m->xTruncate = f_truncate;
        m->xSync = f_sync;
        m->xFileSize = f_size;
        m->xLock = f_lock;
        m->xUnlock = f_unlock;
        m->xCheckReservedLock = f_reserved;
        m->xFileControl = f_fcntl;
        m->xSectorSize = f_sector;
        m->xDeviceCharacteristics = f_devchar;
        if (v >= 2) {
            m->xShmMap = f_shmmap;
            m->xShmLock = f_shmlock;
            m->xShmBarrier = f_shmbarrier;
            m->xShmUnmap = f_shmunmap;
        }
        if (v >= 3) {
            m->xFetch = f_fetch;
            m->xUnfetch = f_unfetch;
        }
    }
    shim_vfs.iVersion = 2;
    shim_vfs.szOsFile = (int)sizeof(ffile) + real_vfs->szOsFile;
    shim_vfs.mxPathname = real_vfs->mxPathname;
    shim_vfs.zName = "tcfault";
    shim_vfs.xOpen = v_open;
    shim_vfs.xDelete = v_delete;
    shim_vfs.xAccess = v_access;
    shim_vfs.xFullPathname = v_fullpath;
    shim_vfs.xDlOpen = v_dlopen;
    shim_vfs.xDlError = v_dlerror;
    shim_vfs.xDlSym = v_dlsym;
    shim_vfs.xDlClose = v_dlclose;
    shim_vfs.xRandomness = v_random;
    shim_vfs.xSleep = v_sleep;
    shim_vfs.xCurrentTime = v_time;
    shim_vfs.xGetLastError = v_lasterr;
    shim_vfs.xCurrentTimeInt64 = v_time64;
    if (sqlite3_vfs_register(&shim_vfs, 1) != SQLITE_OK) {
        fprintf(stderr, "cannot register the test VFS\n");
        exit(2);
    }
}

/* ===================================================================== */
/* helpers                                                               */

static t_clock clk = {1700000000000LL};

static const char *db_path(const char *name) {
    static char p[700];
    static const char *sfx[] = {"", "-wal", "-shm", "-journal"};
    char q[760];
    size_t i;
    snprintf(p, sizeof p, "%s/%s.db", dir, name);
    for (i = 0; i < 4; i++) {
        snprintf(q, sizeof q, "%s%s", p, sfx[i]);
        unlink(q);
    }
    return p;
}
static tocsin_db *open_db(const char *path) {
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    tocsin_db *db = NULL;
    o.clock = t_clock_fn;
    o.clock_ctx = &clk;
    if (tocsin_open(&db, path, &o) != TOCSIN_OK) {
        fprintf(stderr, "FAIL open %s: %s\n", path, tocsin_errmsg(db));
        t_failed++;
        tocsin_close(db);
        return NULL;
    }
    return db;
}
/* An integer from SQL on the handle's connection (-1000 on error). */
static long long qi(tocsin_db *db, const char *sql) {
    sqlite3_stmt *st;
    long long v = -1000;
    if (sqlite3_prepare_v2(tocsin_sqlite(db), sql, -1, &st, NULL) != SQLITE_OK) return -1000;
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}
static int integrity_ok(sqlite3 *c) {
    sqlite3_stmt *st;
    int ok = 0;
    if (sqlite3_prepare_v2(c, "PRAGMA integrity_check", -1, &st, NULL) != SQLITE_OK) return 0;
    if (sqlite3_step(st) == SQLITE_ROW) ok = strcmp((const char *)sqlite3_column_text(st, 0), "ok") == 0;
    sqlite3_finalize(st);
    return ok;
}

/* ===================================================================== */
/* the operations swept                                                  */

static struct {
    int64_t id, token, id2, token2;
} cx;

/* The first failure of a run that makes several calls (later cleanup calls
 * overwrite the thread's error). */
static struct {
    int set, code, sqlite_code;
    char msg[512];
} saved;
static int keep_err(int rc) {
    if (rc != TOCSIN_OK && !saved.set) {
        saved.set = 1;
        saved.code = tocsin_errcode(NULL);
        saved.sqlite_code = tocsin_sqlite_errcode(NULL);
        snprintf(saved.msg, sizeof saved.msg, "%s", tocsin_errmsg(NULL));
    }
    return rc;
}

static void enq(tocsin_db *db, const char *queue, int n) {
    int i;
    int64_t id;
    for (i = 0; i < n; i++) tocsin_queue_enqueue(db, &id, queue, "{\"setup\":true}", NULL);
}
static void claim1(tocsin_db *db) {
    tocsin_job *jobs = NULL;
    size_t n = 0;
    enq(db, "q", 1);
    tocsin_queue_claim(db, &jobs, &n, "q", "w1", 1, 60000);
    if (n == 1) {
        cx.id = jobs[0].id;
        cx.token = jobs[0].token;
    }
    tocsin_jobs_free(jobs, n);
}
/* state: 0 not applied, 1 applied, -1 anything else (half done) */
#define STATE(c0, c1) ((c1) ? 1 : (c0) ? 0 : -1)

static int run_enqueue(tocsin_db *db) {
    tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
    int64_t id;
    o.unique_key = "k1";
    o.meta = "{\"m\":1}";
    return tocsin_queue_enqueue(db, &id, "q", "{\"n\":1}", &o);
}
static int st_enqueue(tocsin_db *db) {
    long long n = qi(db, "SELECT count(*) FROM _tocsin_jobs WHERE queue = 'q'");
    return STATE(n == 0, n == 1 && qi(db, "SELECT count(*) FROM _tocsin_jobs WHERE unique_key = 'k1'") == 1);
}
static int run_enqueue_many(tocsin_db *db) {
    tocsin_job_spec s[3] = {{"q", "1", NULL}, {"q", "2", NULL}, {"r", "3", NULL}};
    int64_t ids[3];
    return tocsin_queue_enqueue_many(db, ids, s, 3);
}
static int st_enqueue_many(tocsin_db *db) {
    long long n = qi(db, "SELECT count(*) FROM _tocsin_jobs");
    return STATE(n == 0, n == 3);
}
static void setup_claim(tocsin_db *db) { enq(db, "q", 3); }
static int run_claim(tocsin_db *db) {
    tocsin_job *jobs = NULL;
    size_t n = 0;
    int rc = tocsin_queue_claim(db, &jobs, &n, "q", "w1", 2, 60000);
    if (rc == TOCSIN_OK && n != 2) rc = -1;
    if (rc != TOCSIN_OK && (jobs != NULL || n != 0)) rc = -2; /* outputs must be empty on failure */
    tocsin_jobs_free(jobs, n);
    return rc;
}
static int st_claim(tocsin_db *db) {
    long long p = qi(db, "SELECT count(*) FROM _tocsin_jobs WHERE state = 'processing' AND attempts = 1"),
              q = qi(db, "SELECT count(*) FROM _tocsin_jobs WHERE state = 'pending' AND attempts = 0");
    return STATE(p == 0 && q == 3, p == 2 && q == 1);
}
static int run_ack(tocsin_db *db) {
    int ok = 0, rc = tocsin_job_ack(db, &ok, cx.id, cx.token);
    return rc == TOCSIN_OK && ok != 1 ? -1 : rc;
}
static int st_ack(tocsin_db *db) {
    long long n = qi(db, "SELECT count(*) FROM _tocsin_jobs WHERE state = 'processing'");
    return STATE(n == 1, n == 0 && qi(db, "SELECT count(*) FROM _tocsin_jobs") == 0);
}
static int run_retry(tocsin_db *db) {
    int ok = 0, rc = tocsin_job_retry(db, &ok, cx.id, cx.token, 5000, "try later");
    return rc == TOCSIN_OK && ok != 1 ? -1 : rc;
}
static int st_retry(tocsin_db *db) {
    return STATE(qi(db, "SELECT count(*) FROM _tocsin_jobs WHERE state = 'processing' AND last_error IS NULL") == 1,
                 qi(db, "SELECT count(*) FROM _tocsin_jobs WHERE state <> 'processing' AND attempts = 1"
                        " AND last_error = 'try later' AND lease_until IS NULL") == 1);
}
static int run_fail(tocsin_db *db) {
    int ok = 0, rc = tocsin_job_fail(db, &ok, cx.id, cx.token, "broken");
    return rc == TOCSIN_OK && ok != 1 ? -1 : rc;
}
static int st_fail(tocsin_db *db) {
    long long live = qi(db, "SELECT count(*) FROM _tocsin_jobs"),
              dead = qi(db, "SELECT count(*) FROM _tocsin_dead WHERE reason = 'failed' AND last_error = 'broken'");
    return STATE(live == 1 && dead == 0 && qi(db, "SELECT count(*) FROM _tocsin_dead") == 0, live == 0 && dead == 1);
}
static int run_complete(tocsin_db *db) {
    int ok = 0, rc = tocsin_job_complete(db, &ok, cx.id, cx.token, "{\"r\":1}", 0);
    return rc == TOCSIN_OK && ok != 1 ? -1 : rc;
}
static int st_complete(tocsin_db *db) {
    long long live = qi(db, "SELECT count(*) FROM _tocsin_jobs"), res = qi(db, "SELECT count(*) FROM _tocsin_results");
    return STATE(live == 1 && res == 0, live == 0 && res == 1);
}
static int run_publish(tocsin_db *db) {
    int64_t off;
    return tocsin_stream_publish(db, &off, "t", "{\"e\":1}", "key", "{\"h\":2}");
}
static int st_publish(tocsin_db *db) {
    long long n = qi(db, "SELECT count(*) FROM _tocsin_events");
    return STATE(n == 0, n == 1);
}
static void setup_offset(tocsin_db *db) {
    int64_t off;
    int i;
    for (i = 0; i < 3; i++) tocsin_stream_publish(db, &off, "t", "1", NULL, NULL);
}
static int run_offset(tocsin_db *db) { return tocsin_stream_save_offset(db, NULL, "c", "t", 2); }
static int st_offset(tocsin_db *db) {
    long long n = qi(db, "SELECT coalesce((SELECT position FROM _tocsin_offsets), 0)");
    return STATE(n == 0, n == 2);
}
static int run_notify(tocsin_db *db) {
    int64_t id;
    return tocsin_notify(db, &id, "ch", "{\"x\":1}", NULL);
}
static int st_notify(tocsin_db *db) {
    long long n = qi(db, "SELECT count(*) FROM _tocsin_notifications");
    return STATE(n == 0, n == 1);
}
static int run_lock(tocsin_db *db) {
    int64_t tok = 0;
    int rc = tocsin_lock_acquire(db, &tok, NULL, "L", "owner-a", 10000);
    return rc == TOCSIN_OK && tok != 1 ? -1 : rc;
}
static int st_lock(tocsin_db *db) {
    long long n = qi(db, "SELECT count(*) FROM _tocsin_locks");
    return STATE(n == 0, n == 1 && qi(db, "SELECT count(*) FROM _tocsin_locks WHERE owner = 'owner-a'") == 1);
}
static int run_ratelimit(tocsin_db *db) {
    int allowed = 0, rc = tocsin_ratelimit_try(db, &allowed, NULL, NULL, "api", 3, 1000);
    return rc == TOCSIN_OK && allowed != 1 ? -1 : rc;
}
static int st_ratelimit(tocsin_db *db) {
    long long n = qi(db, "SELECT count(*) FROM _tocsin_rate_hits");
    return STATE(n == 0, n == 1);
}
static int run_schedule_set(tocsin_db *db) {
    return tocsin_schedule_set(db, NULL, "s", "*/5 * * * *", "sq", "{\"s\":1}", NULL);
}
static int st_schedule_set(tocsin_db *db) {
    long long n = qi(db, "SELECT count(*) FROM _tocsin_schedules");
    return STATE(n == 0, n == 1);
}
static void setup_tick(tocsin_db *db) {
    tocsin_schedule_set(db, NULL, "s", "* * * * *", "sq", "{\"s\":1}", NULL);
    clk.now += 5 * 60000;
}
static int run_tick(tocsin_db *db) {
    int64_t fired = -1;
    int rc = tocsin_scheduler_tick(db, &fired);
    return rc == TOCSIN_OK && fired != 1 ? -1 : rc;
}
static int st_tick(tocsin_db *db) {
    long long jobs = qi(db, "SELECT count(*) FROM _tocsin_jobs WHERE queue = 'sq'"),
              fc = qi(db, "SELECT fired_count FROM _tocsin_schedules");
    return STATE(jobs == 0 && fc == 0, jobs == 1 && fc == 1);
}
static void setup_prune(tocsin_db *db) {
    int64_t id;
    int i;
    for (i = 0; i < 5; i++) tocsin_notify(db, &id, "ch", "1", NULL);
    clk.now += 10000;
    for (i = 0; i < 2; i++) tocsin_notify(db, &id, "ch", "2", NULL);
}
static int run_prune(tocsin_db *db) {
    int64_t n = -1;
    int rc = tocsin_notify_prune(db, &n, 5000, 0);
    return rc == TOCSIN_OK && n != 5 ? -1 : rc;
}
static int st_prune(tocsin_db *db) {
    long long n = qi(db, "SELECT count(*) FROM _tocsin_notifications");
    return STATE(n == 7, n == 2);
}
static void setup_purge(tocsin_db *db) {
    int64_t id;
    int ok, i;
    for (i = 0; i < 3; i++) {
        tocsin_queue_enqueue(db, &id, "q", "1", NULL);
        tocsin_job_cancel(db, &ok, id);
    }
}
static int run_purge(tocsin_db *db) {
    int64_t n = -1;
    int rc = tocsin_dead_purge(db, &n, NULL, 0);
    return rc == TOCSIN_OK && n != 3 ? -1 : rc;
}
static int st_purge(tocsin_db *db) {
    long long n = qi(db, "SELECT count(*) FROM _tocsin_dead");
    return STATE(n == 3, n == 0);
}
static void setup_sweep(tocsin_db *db) {
    tocsin_result_save(db, 1, "1", 1000);
    tocsin_result_save(db, 2, "2", 0);
    clk.now += 2000;
}
static int run_sweep(tocsin_db *db) {
    int64_t n = -1;
    int rc = tocsin_result_sweep(db, &n);
    return rc == TOCSIN_OK && n != 1 ? -1 : rc;
}
static int st_sweep(tocsin_db *db) {
    long long n = qi(db, "SELECT count(*) FROM _tocsin_results");
    return STATE(n == 2, n == 1);
}
static int run_tx(tocsin_db *db) {
    tocsin_db *tx = NULL;
    int64_t id;
    int rc = tocsin_tx_begin(db, &tx);
    if (rc != TOCSIN_OK) return rc;
    if ((rc = tocsin_queue_enqueue(tx, &id, "q", "1", NULL)) != TOCSIN_OK ||
        (rc = tocsin_queue_enqueue(tx, &id, "q", "2", NULL)) != TOCSIN_OK ||
        (rc = tocsin_notify(tx, &id, "ch", "3", NULL)) != TOCSIN_OK ||
        (rc = tocsin_exec(tx, "INSERT INTO app_rows VALUES (1)")) != TOCSIN_OK) {
        keep_err(rc);
        tocsin_tx_rollback(tx);
        return rc;
    }
    return tocsin_tx_commit(tx);
}
static void setup_tx(tocsin_db *db) { tocsin_exec(db, "CREATE TABLE app_rows (x)"); }
static int st_tx(tocsin_db *db) {
    long long j = qi(db, "SELECT count(*) FROM _tocsin_jobs"), n = qi(db, "SELECT count(*) FROM _tocsin_notifications"),
              a = qi(db, "SELECT count(*) FROM app_rows");
    return STATE(j == 0 && n == 0 && a == 0, j == 2 && n == 1 && a == 1);
}
static int run_begin_commit(tocsin_db *db) {
    int64_t id;
    int rc = tocsin_begin(db);
    if (rc != TOCSIN_OK) return rc;
    if ((rc = tocsin_queue_enqueue(db, &id, "q", "1", NULL)) != TOCSIN_OK ||
        (rc = tocsin_stream_publish(db, &id, "t", "2", NULL, NULL)) != TOCSIN_OK) {
        keep_err(rc);
        tocsin_rollback(db);
        return rc;
    }
    rc = keep_err(tocsin_commit(db));
    if (rc != TOCSIN_OK && tocsin_in_transaction(db)) tocsin_rollback(db);
    return rc;
}
static int st_begin_commit(tocsin_db *db) {
    long long j = qi(db, "SELECT count(*) FROM _tocsin_jobs"), e = qi(db, "SELECT count(*) FROM _tocsin_events");
    return STATE(j == 0 && e == 0, j == 1 && e == 1);
}
static void setup_checkpoint(tocsin_db *db) { enq(db, "q", 40); }
static int run_checkpoint(tocsin_db *db) { return tocsin_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)"); }
static int st_checkpoint(tocsin_db *db) {
    return qi(db, "SELECT count(*) FROM _tocsin_jobs") == 40 ? 1 : -1;
}
static int run_worker(tocsin_db *db) {
    tocsin_worker_opts wo = TOCSIN_WORKER_OPTS_INIT;
    const char *queues[] = {"tasks"};
    tocsin_worker *w = NULL;
    tocsin_task_run **runs = NULL;
    size_t n = 0, i;
    int rc, rc2;
    wo.worker_id = "fw";
    wo.queues = queues;
    wo.n_queues = 1;
    wo.concurrency = 4;
    if ((rc = tocsin_worker_open(&w, db, &wo)) != TOCSIN_OK) return rc;
    rc = keep_err(tocsin_worker_register(w, "t", NULL));
    if (rc == TOCSIN_OK) rc = keep_err(tocsin_worker_next(w, &runs, &n, 0));
    for (i = 0; i < n; i++) {
        tocsin_outcome o = TOCSIN_OUTCOME_INIT;
        o.value = "7";
        rc2 = keep_err(tocsin_worker_finish(w, NULL, runs[i], &o));
        if (rc == TOCSIN_OK) rc = rc2;
    }
    tocsin_free(runs);
    if (rc == TOCSIN_OK) rc = keep_err(tocsin_worker_flush(w, NULL));
    rc2 = keep_err(tocsin_worker_close(w));
    if (rc == TOCSIN_OK) rc = rc2;
    return rc == TOCSIN_OK && n != 2 ? -1 : rc;
}
static void setup_worker(tocsin_db *db) {
    tocsin_task_call c = TOCSIN_TASK_CALL_INIT;
    int64_t id;
    c.task = "t";
    tocsin_task_enqueue(db, &id, "tasks", &c, NULL);
    tocsin_task_enqueue(db, &id, "tasks", &c, NULL);
}
/* A worker's steps are many transactions: each job is either still to run or
 * run with its result; no job holds a result while live. */
static int st_worker(tocsin_db *db) {
    long long done = qi(db, "SELECT count(*) FROM _tocsin_results WHERE value = '7'"),
              live = qi(db, "SELECT count(*) FROM _tocsin_jobs"),
              both = qi(db, "SELECT count(*) FROM _tocsin_jobs j JOIN _tocsin_results r ON r.job_id = j.id");
    if (both != 0 || done + live != 2) return -1;
    return done == 2 ? 1 : 0;
}

static int run_cancel(tocsin_db *db) {
    int ok = 0, rc = tocsin_job_cancel(db, &ok, cx.id);
    return rc == TOCSIN_OK && ok != 1 ? -1 : rc;
}
static int st_cancel(tocsin_db *db) {
    long long live = qi(db, "SELECT count(*) FROM _tocsin_jobs"),
              dead = qi(db, "SELECT count(*) FROM _tocsin_dead WHERE reason = 'cancelled'");
    return STATE(live == 1 && dead == 0, live == 0 && dead == 1);
}
static void setup_requeue(tocsin_db *db) {
    int ok;
    claim1(db);
    tocsin_job_fail(db, &ok, cx.id, cx.token, "x");
}
static int run_requeue(tocsin_db *db) {
    int ok = 0, rc = tocsin_dead_requeue(db, &ok, cx.id);
    return rc == TOCSIN_OK && ok != 1 ? -1 : rc;
}
static int st_requeue(tocsin_db *db) {
    long long live = qi(db, "SELECT count(*) FROM _tocsin_jobs WHERE state = 'pending' AND attempts = 1 AND max_attempts = 4"),
              dead = qi(db, "SELECT count(*) FROM _tocsin_dead");
    return STATE(live == 0 && dead == 1 && qi(db, "SELECT count(*) FROM _tocsin_jobs") == 0, live == 1 && dead == 0);
}
static void setup_trim(tocsin_db *db) {
    int64_t off;
    int i;
    for (i = 0; i < 6; i++) tocsin_stream_publish(db, &off, "t", "1", NULL, NULL);
}
static int run_trim(tocsin_db *db) {
    tocsin_trim_opts o = TOCSIN_TRIM_OPTS_INIT;
    int64_t n = -1;
    int rc;
    o.max_count = 2;
    rc = tocsin_stream_trim(db, &n, "t", &o);
    return rc == TOCSIN_OK && n != 4 ? -1 : rc;
}
static int st_trim(tocsin_db *db) {
    long long n = qi(db, "SELECT count(*) FROM _tocsin_events");
    return STATE(n == 6, n == 2);
}
static void setup_ack_batch(tocsin_db *db) {
    tocsin_job *jobs = NULL;
    size_t n = 0;
    enq(db, "q", 3);
    tocsin_queue_claim(db, &jobs, &n, "q", "w1", 3, 60000);
    if (n == 3) {
        cx.id = jobs[0].id;
        cx.token = jobs[0].token;
        cx.id2 = jobs[1].id;
        cx.token2 = jobs[1].token;
    }
    tocsin_jobs_free(jobs, n);
}
static int run_ack_batch(tocsin_db *db) {
    int64_t ids[2] = {cx.id, cx.id2}, toks[2] = {cx.token, cx.token2};
    size_t acked = 0;
    int rc = tocsin_job_ack_batch(db, &acked, ids, toks, 2);
    return rc == TOCSIN_OK && acked != 2 ? -1 : rc;
}
static int st_ack_batch(tocsin_db *db) {
    long long n = qi(db, "SELECT count(*) FROM _tocsin_jobs");
    return STATE(n == 3, n == 1);
}
static void setup_release(tocsin_db *db) { tocsin_lock_acquire(db, &cx.token, NULL, "L", "owner-a", 10000); }
static int run_release(tocsin_db *db) {
    int ok = 0, rc = tocsin_lock_release(db, &ok, "L", "owner-a", cx.token);
    return rc == TOCSIN_OK && ok != 1 ? -1 : rc;
}
static int st_release(tocsin_db *db) {
    long long held = qi(db, "SELECT count(*) FROM _tocsin_locks WHERE owner = 'owner-a'"),
              free_ = qi(db, "SELECT count(*) FROM _tocsin_locks WHERE owner IS NULL AND token = 1");
    return STATE(held == 1 && free_ == 0, held == 0 && free_ == 1);
}

typedef struct op {
    const char *name;
    void (*setup)(tocsin_db *db);
    int (*run)(tocsin_db *db);
    int (*state)(tocsin_db *db);
    int multi; /* 1: several transactions (an error may leave earlier ones committed);
                  2: the data is committed before (an error must keep it) */
} op;

static const op OPS[] = {
    {"enqueue", NULL, run_enqueue, st_enqueue, 0},
    {"enqueue_many", NULL, run_enqueue_many, st_enqueue_many, 0},
    {"claim", setup_claim, run_claim, st_claim, 0},
    {"ack", claim1, run_ack, st_ack, 0},
    {"retry", claim1, run_retry, st_retry, 0},
    {"fail", claim1, run_fail, st_fail, 0},
    {"complete", claim1, run_complete, st_complete, 0},
    {"ack_batch", setup_ack_batch, run_ack_batch, st_ack_batch, 0},
    {"cancel", claim1, run_cancel, st_cancel, 0},
    {"dead_requeue", setup_requeue, run_requeue, st_requeue, 0},
    {"publish", NULL, run_publish, st_publish, 0},
    {"save_offset", setup_offset, run_offset, st_offset, 0},
    {"stream_trim", setup_trim, run_trim, st_trim, 0},
    {"notify", NULL, run_notify, st_notify, 0},
    {"lock_acquire", NULL, run_lock, st_lock, 0},
    {"lock_release", setup_release, run_release, st_release, 0},
    {"ratelimit_try", NULL, run_ratelimit, st_ratelimit, 0},
    {"schedule_set", NULL, run_schedule_set, st_schedule_set, 0},
    {"scheduler_tick", setup_tick, run_tick, st_tick, 0},
    {"notify_prune", setup_prune, run_prune, st_prune, 0},
    {"dead_purge", setup_purge, run_purge, st_purge, 0},
    {"result_sweep", setup_sweep, run_sweep, st_sweep, 0},
    {"tx_handle_commit", setup_tx, run_tx, st_tx, 0},
    {"begin_commit", NULL, run_begin_commit, st_begin_commit, 0},
    {"checkpoint", setup_checkpoint, run_checkpoint, st_checkpoint, 2},
    {"worker_step", setup_worker, run_worker, st_worker, 1},
};

static const struct kind {
    const char *name;
    int kinds;
    int err;
    int want; /* tocsin code */
    int once; /* a transient fault: only the Nth call fails */
} KINDS[] = {
    {"write-full", F_WRITE, SQLITE_FULL, TOCSIN_FULL, 0},
    {"write-ioerr", F_WRITE, SQLITE_IOERR_WRITE, TOCSIN_IOERR, 0},
    {"write-ioerr-once", F_WRITE, SQLITE_IOERR_WRITE, TOCSIN_IOERR, 1},
    {"sync-ioerr", F_SYNC, SQLITE_IOERR_FSYNC, TOCSIN_IOERR, 0},
    {"truncate-ioerr", F_TRUNC, SQLITE_IOERR_TRUNCATE, TOCSIN_IOERR, 0},
};

#define FAILF(...)                                         \
    do {                                                   \
        t_failed++;                                        \
        fprintf(stderr, "FAIL [%s] ", t_suite);            \
        fprintf(stderr, __VA_ARGS__);                      \
        fputc('\n', stderr);                               \
    } while (0)

static long total_faults;
#include <time.h>
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}
static double since(double t0) { return now_s() - t0; }

/* Checks the error of a failed call against the injected fault. */
static void check_error(const char *what, long n, int rc, const struct kind *k) {
    const char *msg = saved.set ? saved.msg : tocsin_errmsg(NULL);
    int sq = saved.set ? saved.sqlite_code : tocsin_sqlite_errcode(NULL);
    int code = saved.set ? saved.code : tocsin_errcode(NULL);
    if (rc != k->want)
        FAILF("%s N=%ld: rc %d (%s), want %d: %s", what, n, rc, tocsin_errstr(rc), k->want, msg);
    else
        t_passed++;
    if (code != rc) FAILF("%s N=%ld: errcode %d != rc %d", what, n, code, rc);
    if (!msg || !*msg) FAILF("%s N=%ld: empty message", what, n);
    if ((sq & 0xff) != (k->err & 0xff))
        FAILF("%s N=%ld: sqlite code %d, want %d (%s)", what, n, sq, k->err, msg);
    else
        t_passed++;
    if (verbose) fprintf(stderr, "  %s N=%ld: %d %s\n", what, n, rc, msg);
}

static void sweep_op(const op *o, const struct kind *k) {
    long n, injected = 0;
    char what[128];
    double t0 = now_s();
    snprintf(what, sizeof what, "%s/%s", o->name, k->name);
    for (n = 1; n < 10000; n++) {
        const char *path = db_path("sweep");
        tocsin_db *db;
        int rc, st, rc2;
        long fired;
        clk.now = 1700000000000LL;
        memset(&cx, 0, sizeof cx);
        saved.set = 0;
        if (!(db = open_db(path))) return;
        if (o->setup) o->setup(db);
        fault_arm(k->kinds, n, k->err, k->once);
        rc = o->run(db);
        fired = fault_disarm();
        if (!fired) { /* no write of the operation left to fail: the sweep is over */
            if (rc != TOCSIN_OK) FAILF("%s: no fault, rc %d: %s", what, rc, tocsin_errmsg(db));
            CHECK_EQ_I(o->state(db), 1);
            tocsin_close(db);
            break;
        }
        injected++;
        if (rc == TOCSIN_OK) {
            /* the failed call was not needed (e.g. a checkpoint's sync): the work is done */
            if (o->state(db) != 1) FAILF("%s N=%ld: OK but not applied", what, n);
        } else {
            check_error(what, n, rc, k);
            st = o->state(db);
            if (o->multi == 2 ? st != 1 : st != 0 && !(o->multi && st >= 0))
                FAILF("%s N=%ld: after the error the state is %s", what, n, st < 0 ? "half applied" : "applied");
            else
                t_passed++;
        }
        if (!integrity_ok(tocsin_sqlite(db))) FAILF("%s N=%ld: integrity_check (same handle)", what, n);
        /* the fault cleared: the same handle does the work (leases taken by a
         * failed multi-step run lapse first) */
        if (o->multi == 1) clk.now += 120000;
        saved.set = 0;
        if (o->state(db) != 1) {
            rc2 = o->run(db);
            if (rc2 != TOCSIN_OK) FAILF("%s N=%ld: same handle after the fault: rc %d: %s", what, n, rc2, tocsin_errmsg(db));
            if (o->state(db) != 1) FAILF("%s N=%ld: same handle after the fault: not applied", what, n);
            else t_passed++;
        }
        CHECK_OK(db, tocsin_close(db));
        /* a reopened handle sees it, on a sound file */
        if ((db = open_db(path)) != NULL) {
            if (!integrity_ok(tocsin_sqlite(db))) FAILF("%s N=%ld: integrity_check after reopen", what, n);
            if (o->state(db) != 1) FAILF("%s N=%ld: reopened: not applied", what, n);
            else t_passed++;
            tocsin_close(db);
        }
    }
    total_faults += injected;
    printf("  %-18s %-15s %3ld faults injected (%.2f s)\n", o->name, k->name, injected, since(t0));
}

/* Open + schema creation on a new file. All or nothing: the schema is either
 * complete or absent, and a later open on a sound disk completes it. */
static long schema_objects = -1;
static long count_tocsin_objects(const char *path) {
    sqlite3 *c = NULL;
    sqlite3_stmt *st;
    long n = -1;
    if (sqlite3_open_v2(path, &c, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(c, "SELECT count(*) FROM sqlite_schema WHERE name LIKE '\\_tocsin%' ESCAPE '\\'", -1, &st,
                           NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW) n = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(c);
    return n;
}
static void sweep_open(const struct kind *k) {
    long n, injected = 0;
    char what[128];
    snprintf(what, sizeof what, "open+schema/%s", k->name);
    if (schema_objects < 0) {
        char ref[700];
        tocsin_db *db = open_db(db_path("ref"));
        tocsin_close(db);
        snprintf(ref, sizeof ref, "%s/ref.db", dir);
        schema_objects = count_tocsin_objects(ref);
    }
    (void)what;
    for (n = 1; n < 10000; n++) {
        const char *path = db_path("open");
        tocsin_open_opts oo = TOCSIN_OPEN_OPTS_INIT;
        tocsin_db *db = NULL;
        long fired, objs;
        int rc;
        oo.clock = t_clock_fn;
        oo.clock_ctx = &clk;
        fault_arm(k->kinds, n, k->err, k->once);
        rc = tocsin_open(&db, path, &oo);
        fired = fault_disarm();
        if (rc != TOCSIN_OK) check_error(what, n, rc, k);
        tocsin_close(db);
        if (!fired) {
            if (rc != TOCSIN_OK) FAILF("%s: no fault, rc %d", what, rc);
            break;
        }
        injected++;
        objs = count_tocsin_objects(path);
        if (objs != 0 && objs != schema_objects && !(objs < 0 && rc != TOCSIN_OK))
            FAILF("%s N=%ld: %ld of %ld schema objects", what, n, objs, schema_objects);
        else
            t_passed++;
        if ((db = open_db(path)) != NULL) {
            int v = 0;
            CHECK_OK(db, tocsin_bootstrap(db, &v));
            CHECK_EQ_I(v, TOCSIN_SCHEMA_VERSION);
            if (!integrity_ok(tocsin_sqlite(db))) FAILF("%s N=%ld: integrity after reopen", what, n);
            CHECK_OK(db, run_enqueue(db));
            tocsin_close(db);
        }
        CHECK_EQ_I(count_tocsin_objects(path), schema_objects);
    }
    total_faults += injected;
    printf("  %-18s %-15s %3ld faults injected\n", "open+schema", k->name, injected);
}

/* ===================================================================== */
/* a real full disk, in a child process                                  */

/* A private mount namespace: mounts made in it vanish with the process.
 * TOCSIN_FAULT_NO_MOUNT=1 refuses it, to run the fallbacks. */
static int private_mounts(void) {
    const char *no = getenv("TOCSIN_FAULT_NO_MOUNT");
    if (no && *no && strcmp(no, "0") != 0) return 0;
    if (unshare(CLONE_NEWNS) != 0) return 0;
    return mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0;
}

typedef struct counts {
    int passed, failed;
} counts;

/* Runs fn in a child; its pass/fail counts come back through a pipe. */
static void in_child(const char *name, void (*fn)(void)) {
    int fds[2], status = 0;
    pid_t pid;
    counts c = {0, 0};
    if (pipe(fds) != 0) {
        FAILF("pipe: %s", strerror(errno));
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        close(fds[0]);
        t_passed = t_failed = 0;
        t_suite = name;
        fn();
        c.passed = t_passed;
        c.failed = t_failed;
        if (write(fds[1], &c, sizeof c) != (ssize_t)sizeof c) _exit(3);
        fflush(stdout);
        fflush(stderr);
        _exit(0);
    }
    close(fds[1]);
    if (read(fds[0], &c, sizeof c) != (ssize_t)sizeof c) c.failed = 1;
    close(fds[0]);
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        FAILF("child %s ended with status %d", name, status);
    }
    t_passed += c.passed;
    t_failed += c.failed;
}

static struct rlimit saved_fsize;
static void disk_full(void) {
    char mnt[600], path[700], filler[700], payload[4097];
    const char *mode;
    tocsin_db *db;
    int64_t id;
    long ok_n = 0, i;
    int rc = TOCSIN_OK, tmpfs = 0;
    snprintf(mnt, sizeof mnt, "%s/full", dir);
    mkdir(mnt, 0700);
    if (private_mounts() && mount("tmpfs", mnt, "tmpfs", 0, "size=256k") == 0) {
        tmpfs = 1;
        mode = "a 256 KiB tmpfs in a private mount namespace";
    } else {
        struct rlimit rl;
        signal(SIGXFSZ, SIG_IGN);
        getrlimit(RLIMIT_FSIZE, &rl);
        saved_fsize = rl;
        rl.rlim_cur = 256 * 1024; /* the soft limit only: it can be raised again */
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) {
            FAILF("neither a tmpfs mount nor RLIMIT_FSIZE: %s", strerror(errno));
            return;
        }
        mode = "RLIMIT_FSIZE 256 KiB with SIGXFSZ ignored (mounting was refused)";
    }
    printf("  disk full: %s\n", mode);
    snprintf(path, sizeof path, "%s/app.db", mnt);
    if (!(db = open_db(path))) return;
    memset(payload, 'x', sizeof payload);
    payload[0] = '"';
    payload[4095] = '"';
    payload[4096] = 0;
    for (i = 0; i < 1000; i++) {
        rc = tocsin_queue_enqueue(db, &id, "q", payload, NULL);
        if (rc != TOCSIN_OK) break;
        ok_n++;
    }
    printf("  disk full: %ld enqueues of 4 KiB succeeded, then rc %d: %s\n", ok_n, rc, tocsin_errmsg(db));
    CHECK(ok_n > 0 && i < 1000);
    if (tmpfs) CHECK_EQ_I(rc, TOCSIN_FULL);
    else CHECK(rc == TOCSIN_FULL || rc == TOCSIN_IOERR);
    CHECK(strlen(tocsin_errmsg(db)) > 0);
    CHECK_EQ_I(qi(db, "SELECT count(*) FROM _tocsin_jobs"), ok_n);
    CHECK(integrity_ok(tocsin_sqlite(db)));
    /* still full: a second try fails the same way and writes nothing */
    rc = tocsin_queue_enqueue(db, &id, "q", payload, NULL);
    CHECK(rc == TOCSIN_FULL || rc == TOCSIN_IOERR);
    CHECK_EQ_I(qi(db, "SELECT count(*) FROM _tocsin_jobs"), ok_n);
    /* space comes back: the same handle goes on */
    if (tmpfs) {
        CHECK(mount(NULL, mnt, NULL, MS_REMOUNT, "size=16m") == 0);
    } else {
        CHECK(setrlimit(RLIMIT_FSIZE, &saved_fsize) == 0);
    }
    CHECK_OK(db, tocsin_queue_enqueue(db, &id, "q", payload, NULL));
    CHECK_EQ_I(qi(db, "SELECT count(*) FROM _tocsin_jobs"), ok_n + 1);
    CHECK_OK(db, tocsin_close(db));
    if ((db = open_db(path)) != NULL) {
        CHECK(integrity_ok(tocsin_sqlite(db)));
        CHECK_EQ_I(qi(db, "SELECT count(*) FROM _tocsin_jobs"), ok_n + 1);
        tocsin_close(db);
    }
    /* creating a database on a full disk: a clear error, then it works */
    if (tmpfs) {
        int fd;
        char big[65536];
        tocsin_open_opts oo = TOCSIN_OPEN_OPTS_INIT;
        snprintf(filler, sizeof filler, "%s/filler", mnt);
        CHECK(mount(NULL, mnt, NULL, MS_REMOUNT, "size=1m") == 0);
        fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        memset(big, 0, sizeof big);
        while (fd >= 0 && write(fd, big, sizeof big) > 0) {
        }
        while (fd >= 0 && write(fd, big, 512) > 0) {
        }
        if (fd >= 0) close(fd);
        snprintf(path, sizeof path, "%s/new.db", mnt);
        db = NULL;
        rc = tocsin_open(&db, path, &oo);
        printf("  disk full: creating a database: rc %d: %s\n", rc, rc ? tocsin_errmsg(db) : "");
        CHECK(rc == TOCSIN_FULL || rc == TOCSIN_IOERR || rc == TOCSIN_CANTOPEN);
        CHECK(strlen(tocsin_errmsg(db)) > 0);
        tocsin_close(db);
        CHECK(count_tocsin_objects(path) <= 0);
        unlink(filler);
        db = NULL;
        CHECK_OK(db, tocsin_open(&db, path, &oo));
        CHECK_OK(db, run_enqueue(db));
        tocsin_close(db);
        umount(mnt);
    }
}

/* ===================================================================== */
/* what cannot be opened                                                 */

static unsigned long file_sum(const char *path, long *size) {
    FILE *f = fopen(path, "rb");
    unsigned long sum = 0;
    long n = 0;
    int c;
    if (!f) return 0;
    while ((c = fgetc(f)) != EOF) {
        sum = sum * 31u + (unsigned)c;
        n++;
    }
    fclose(f);
    *size = n;
    return sum;
}
static int exists(const char *p) {
    struct stat s;
    return stat(p, &s) == 0;
}
static void expect_open_fails(const char *what, const char *path, int want, int ro) {
    tocsin_open_opts oo = TOCSIN_OPEN_OPTS_INIT;
    tocsin_db *db = NULL;
    unsigned long s0 = 0, s1 = 0;
    long sz0 = 0, sz1 = 0;
    char side[800];
    int rc, had = exists(path);
    if (had) s0 = file_sum(path, &sz0);
    oo.read_only = ro;
    rc = tocsin_open(&db, path, &oo);
    printf("  open %s: rc %d (%s): %s\n", what, rc, tocsin_errstr(rc), rc ? tocsin_errmsg(db) : "");
    if (rc != want) FAILF("open %s: rc %d, want %d", what, rc, want);
    else t_passed++;
    CHECK(tocsin_errcode(NULL) == rc);
    CHECK(strlen(tocsin_errmsg(NULL)) > 0);
    tocsin_close(db);
    if (had) {
        s1 = file_sum(path, &sz1);
        if (s0 != s1 || sz0 != sz1) FAILF("open %s: the file changed", what);
        else t_passed++;
    } else if (exists(path)) {
        FAILF("open %s: the file was created", what);
    } else {
        t_passed++;
    }
    snprintf(side, sizeof side, "%s-wal", path);
    {
        struct stat sb;
        if (stat(side, &sb) == 0 && sb.st_size > 0) FAILF("open %s: left a non-empty %s", what, side);
        else t_passed++;
    }
    snprintf(side, sizeof side, "%s-journal", path);
    if (exists(side)) FAILF("open %s: left %s", what, side);
}

static void open_errors(void) {
    char path[1024], sub[600];
    FILE *f;
    int i;
    tocsin_db *db;
    /* a corrupt database: its schema page overwritten */
    snprintf(path, sizeof path, "%s/corrupt.db", dir);
    db_path("corrupt");
    if ((db = open_db(path)) != NULL) {
        run_enqueue(db);
        tocsin_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
        tocsin_close(db);
    }
    f = fopen(path, "r+b");
    if (f) {
        fseek(f, 100, SEEK_SET);
        for (i = 100; i < 4096; i++) fputc(0xA5, f);
        fclose(f);
    }
    expect_open_fails("a corrupt database", path, TOCSIN_CORRUPT, 0);
    expect_open_fails("a corrupt database, read-only", path, TOCSIN_CORRUPT, 1);
    /* a text file */
    snprintf(path, sizeof path, "%s/notes.txt", dir);
    f = fopen(path, "w");
    for (i = 0; f && i < 200; i++) fprintf(f, "this is not a database, line %d\n", i);
    if (f) fclose(f);
    expect_open_fails("a file that is not a database", path, TOCSIN_CORRUPT, 0);
    /* a missing parent directory: nothing created on the way */
    snprintf(sub, sizeof sub, "%s/no-such-dir", dir);
    snprintf(path, sizeof path, "%s/deeper/app.db", sub);
    expect_open_fails("under a missing directory", path, TOCSIN_CANTOPEN, 0);
    CHECK(!exists(sub));
    /* a directory as the path */
    expect_open_fails("a directory", dir, TOCSIN_CANTOPEN, 0);
    /* read-only open of a missing file creates nothing */
    snprintf(path, sizeof path, "%s/absent.db", dir);
    expect_open_fails("a missing file, read-only", path, TOCSIN_CANTOPEN, 1);
}

/* A read-only directory: a tmpfs remounted read-only (root ignores
 * permission bits); without mount rights, a child that dropped root. */
static void ro_dir(void) {
    char mnt[600], path[700], fresh[700];
    tocsin_db *db;
    int mounted = 0;
    snprintf(mnt, sizeof mnt, "%s/ro", dir);
    mkdir(mnt, 0755);
    if (private_mounts() && mount("tmpfs", mnt, "tmpfs", 0, "size=1m") == 0) mounted = 1;
    snprintf(path, sizeof path, "%s/app.db", mnt);
    snprintf(fresh, sizeof fresh, "%s/new.db", mnt);
    if ((db = open_db(path)) != NULL) {
        CHECK_OK(db, run_enqueue(db));
        tocsin_close(db);
    }
    if (mounted) {
        CHECK(mount(NULL, mnt, NULL, MS_REMOUNT | MS_RDONLY, NULL) == 0);
        printf("  read-only directory: a tmpfs remounted read-only\n");
    } else {
        chmod(dir, 0711); /* the parents stay traversable for the unprivileged child */
        chmod(path, 0444);
        chmod(mnt, 0555);
        if (setgid(65534) != 0 || setuid(65534) != 0) {
            FAILF("read-only directory: neither a mount nor dropping root worked");
            return;
        }
        printf("  read-only directory: mode 0555 as uid 65534 (mounting was refused)\n");
    }
    expect_open_fails("a new file in a read-only directory", fresh, TOCSIN_CANTOPEN, 0);
    expect_open_fails("a new file in a read-only directory, read-only", fresh, TOCSIN_CANTOPEN, 1);
    /* an existing database there: read-write cannot work; say so clearly */
    {
        tocsin_db *h = NULL;
        int rc = tocsin_open(&h, path, NULL);
        printf("  open an existing database in a read-only directory: rc %d (%s): %s\n", rc, tocsin_errstr(rc),
               rc ? tocsin_errmsg(h) : "");
        if (rc == TOCSIN_OK) {
            int64_t id;
            rc = tocsin_queue_enqueue(h, &id, "q", "1", NULL);
            CHECK_EQ_I(rc, TOCSIN_READONLY);
        } else {
            CHECK(rc == TOCSIN_READONLY || rc == TOCSIN_CANTOPEN);
            CHECK(strlen(tocsin_errmsg(NULL)) > 0);
        }
        tocsin_close(h);
    }
    CHECK(!exists(fresh));
    if (mounted) umount(mnt);
}

int main(int argc, char **argv) {
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    const char *only = NULL;
    size_t i, j;
    int a;
    for (a = 1; a < argc; a++) {
        if (strcmp(argv[a], "-v") == 0) verbose = 1;
        else only = argv[a];
    }
    snprintf(dir, sizeof dir, "%s/tocsin-fault-XXXXXX", tmp);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    /* the sweep's thousands of opens and closes on a tmpfs when we may mount one
     * (fsync is a no-op there, xSync is still called and counted) */
    if (private_mounts() && mount("tmpfs", dir, "tmpfs", 0, "size=64m") == 0)
        printf("fault: working directory on a private tmpfs\n");
    else
        printf("fault: working directory %s (no private tmpfs)\n", dir);
    shim_install();
    printf("fault: test VFS \"%s\" over \"%s\", the default VFS of this process\n", shim_vfs.zName,
           real_vfs->zName);
    if (!only || strcmp(only, "sweep") == 0) {
        for (j = 0; j < sizeof KINDS / sizeof KINDS[0]; j++) {
            t_suite = "open+schema";
            sweep_open(&KINDS[j]);
        }
        for (i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
            for (j = 0; j < sizeof KINDS / sizeof KINDS[0]; j++) {
                t_suite = OPS[i].name;
                sweep_op(&OPS[i], &KINDS[j]);
            }
        printf("fault: %ld faults injected in all\n", total_faults);
        CHECK(total_faults > 0);
    }
    if (!only || strcmp(only, "disk") == 0) in_child("disk-full", disk_full);
    if (!only || strcmp(only, "open") == 0) {
        t_suite = "open-errors";
        open_errors();
    }
    if (!only || strcmp(only, "rodir") == 0) in_child("ro-dir", ro_dir);
    umount(dir);
    if (!t_failed) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    }
    printf("%d passed, %d failed\n", t_passed, t_failed);
    return t_failed || t_passed == 0 ? 1 : 0;
}
