/*
 * The wake engine (docs/architecture.md, "The wake path").
 *
 * One watcher per database file per process, keyed by (device, inode) in a
 * registry guarded by one mutex. A watcher owns a thread and a read-only
 * SQLite connection on which it runs `PRAGMA data_version` (a cached
 * statement): whenever the kernel reports a write to the database, its -wal
 * or -journal (platform.c: inotify on Linux), and at least every poll
 * interval. When the value moves, every subscription of the file is woken
 * through its own pollable descriptor. About every 100 ms the watcher stats
 * the path: if it now names another file, every subscription gets
 * TOCSIN_REPLACED.
 *
 * The engine never open()s or close()s the database files itself: closing
 * any descriptor of a file drops every POSIX lock the process holds on it,
 * including SQLite's. Its connection is an ordinary SQLite connection, and
 * SQLite's unix VFS shares descriptors and lock state across connections of
 * one process, so it is safe.
 *
 * Lock order: wk_lock is the only mutex; nothing else is taken under it
 * except the watcher's own SQLite connection while a watcher starts.
 */
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define WK_BURST_US 50        /* recheck spacing after a kernel event that showed no commit yet */
#define WK_BURST_CHECKS 20    /* how many such rechecks (1 ms in all) */
#define WK_RESUME_CHECKS 3    /* rechecks after a resume that found reports and no commit yet */
#define WK_SATURATE_US 1000   /* broadcasts closer than this: the watcher may saturate */
#define WK_ERROR_LIMIT 200    /* consecutive failed checks before subscribers hear of it */
#define WK_MAX_BUFFER TOCSIN_MAX_BATCH

struct tocsin_sub {
    struct tc_watcher *w;
    struct tocsin_sub *prev, *next; /* in w->subs, under wk_lock */
    tc_signal sig;
    atomic_int pending; /* a raise is outstanding: later wakes coalesce into it */
    atomic_int poked;
    atomic_int err;     /* sticky error code; errmsg is written before it */
    atomic_int closed;  /* tocsin_sub_close began: every wait ends with TOCSIN_CLOSED */
    atomic_int waiters; /* threads inside a wait or call on it (close lets them leave first) */
    int ghosts;         /* of those, the ones a fork() left behind: the parent's threads, which
                         * do not exist in this child and never leave (set in wk_fork_child) */
    int generation;     /* wk_generation at open: a different value means fork() since */
    char errmsg[300];
};

typedef struct tc_watcher {
    struct tc_watcher *next; /* registry, under wk_lock */
    uint64_t dev, ino;
    char *path;
    char *names[3]; /* base names of the db, its -wal and -journal */
    sqlite3 *conn;  /* used by the watcher thread only once it runs */
    sqlite3_stmt *dv;
    int64_t dv_last;
    int errors; /* consecutive failed checks */
    tc_signal stop;
    int dirfd; /* kernel change feed on the directory, -1 if none */
    int poll_ms, idle_poll_ms, identity_ms;
    pthread_t thread;
    tocsin_sub *subs; /* under wk_lock */
    int nsubs;        /* under wk_lock */
    int gone;         /* under wk_lock: failed or replaced; no new subscriber joins */
    uint64_t serial;  /* unique in the process: a handle's write names its watcher by it */
    /* Local writes (tc_wake_write_begin/end): while a handle of this process
     * holds the file's write lock, no other process can commit, so the kernel's
     * reports are our own page writes. The watcher then parks (stops reading
     * them and rechecking) until the last local write ends and kicks it. */
    atomic_int writers;
    atomic_int parked;
    /* Every subscription has a wake pending: the watcher sleeps until a drain
     * (or a new subscription) kicks it; see wk_saturate. */
    atomic_int saturated;
    tc_signal kick;
} tc_watcher;

/* What a tocsin_db keeps in the wake engine. */
struct tc_wake {
    tocsin_sub *sub; /* the handle's own subscription (waits given no `sub`) */
    int sub_busy;    /* under the handle's mutex: a wait uses it (others get their own) */
};

static pthread_mutex_t wk_lock = PTHREAD_MUTEX_INITIALIZER;
static tc_watcher *wk_watchers;
static atomic_int wk_nsubs; /* subscriptions in the process: the cheap "anyone listening?" */
static tocsin_wake_opts wk_opts = TOCSIN_WAKE_OPTS_INIT;
static atomic_int wk_generation; /* bumped in every forked child: older subscriptions are the parent's */
static uint64_t wk_serial;       /* under wk_lock: the last watcher's serial */

/* ---- fork() ---------------------------------------------------------------- */

/*
 * A child of fork() has only the forking thread. Any mutex another thread
 * held at that instant stays locked in the child forever, so the prepare
 * handler takes every lock the child may need -- ours, then SQLite's global
 * ones in SQLite's own order -- and both sides release them. The child then
 * forgets the parent's watchers (their threads do not exist there): its
 * first subscription starts a watcher of its own, and subscriptions it
 * inherited report TOCSIN_CLOSED instead of waiting on a thread that is gone.
 */
/* In the order SQLite itself nests them: a temporary file's name is drawn
 * under the unix VFS lock (VFS1, alias TEMPDIR, then PRNG: a statement journal
 * that spills, a big claim); the PRNG's first use looks up the default VFS
 * (PRNG, then MAIN); MAIN, VFS1 and the page cache's (LRU, PMEM) all allocate
 * memory (MEM) while held. (VFS1 after PRNG was an inversion: a fork() while
 * another thread named a temporary file could hang both.) */
static const int wk_sqlite_mutexes[] = {SQLITE_MUTEX_STATIC_VFS1, SQLITE_MUTEX_STATIC_PRNG,
                                        SQLITE_MUTEX_STATIC_MAIN, SQLITE_MUTEX_STATIC_LRU,
                                        SQLITE_MUTEX_STATIC_PMEM, SQLITE_MUTEX_STATIC_MEM};
#define WK_N_SQLITE_MUTEXES ((int)(sizeof wk_sqlite_mutexes / sizeof wk_sqlite_mutexes[0]))

/*
 * Several copies of the core may share a process and its one SQLite: a
 * binding's native module and the loadable extension the application loads
 * into its own connection (Tocsin::SQL in Ruby, the stdlib sqlite3 module in
 * Python). Each copy has fork handlers, but SQLite's static mutexes are not
 * recursive: a second copy taking them in its prepare handler would wait on
 * the same thread for the first copy's hold, and fork() would never return.
 * So one copy only takes them. SQLite's VFS registry is what every copy
 * sees: the first copy registers a marker VFS (an alias of the default one,
 * so that naming it opens files as usual, allocated from SQLite's heap so that
 * it outlives a copy that is unloaded) and owns SQLite's mutexes at fork; the
 * others find the marker and take only their own lock.
 */
#define WK_FORK_MARKER "tocsin-fork-handlers-v1"
static int wk_fork_owner; /* this copy takes SQLite's mutexes at fork */

static void wk_fork_claim(void) {
    sqlite3_mutex *m;
    sqlite3_vfs *d, *v;
#ifndef TOCSIN_EXTENSION /* a host loading the extension has initialized SQLite */
    if (sqlite3_initialize() != SQLITE_OK) return;
#endif
    /* APP3 orders the copies' claims (sqlite3_vfs_register takes MAIN itself) */
    m = sqlite3_mutex_alloc(SQLITE_MUTEX_STATIC_APP3);
    sqlite3_mutex_enter(m);
    if (!sqlite3_vfs_find(WK_FORK_MARKER) && (d = sqlite3_vfs_find(NULL)) != NULL) {
        wk_fork_owner = 1; /* also when the marker cannot be registered (out of memory) */
        if ((v = sqlite3_malloc((int)(sizeof *v + sizeof WK_FORK_MARKER))) != NULL) {
            *v = *d;
            memcpy(v + 1, WK_FORK_MARKER, sizeof WK_FORK_MARKER);
            v->zName = (const char *)(v + 1);
            v->pNext = NULL;
            if (sqlite3_vfs_register(v, 0) != SQLITE_OK) sqlite3_free(v);
        }
    }
    sqlite3_mutex_leave(m);
}

static void wk_fork_prepare(void) {
    int i;
    pthread_mutex_lock(&wk_lock);
    for (i = 0; wk_fork_owner && i < WK_N_SQLITE_MUTEXES; i++)
        sqlite3_mutex_enter(sqlite3_mutex_alloc(wk_sqlite_mutexes[i]));
}

static void wk_fork_release(void) {
    int i;
    for (i = WK_N_SQLITE_MUTEXES - 1; wk_fork_owner && i >= 0; i--)
        sqlite3_mutex_leave(sqlite3_mutex_alloc(wk_sqlite_mutexes[i]));
    pthread_mutex_unlock(&wk_lock);
}

static void wk_fork_child(void) {
    tc_watcher *w;
    tocsin_sub *s;
    /* Every thread counted in a subscription's waiters was the parent's: the
     * child's close of it must not wait for them (it would wait forever). */
    for (w = wk_watchers; w; w = w->next)
        for (s = w->subs; s; s = s->next) s->ghosts = atomic_load(&s->waiters);
    wk_watchers = NULL; /* the parent's: never touched here again */
    atomic_store(&wk_nsubs, 0);
    atomic_fetch_add(&wk_generation, 1);
    wk_fork_release();
}

static pthread_once_t wk_fork_once = PTHREAD_ONCE_INIT;
static void wk_fork_register(void) {
    wk_fork_claim();
    pthread_atfork(wk_fork_prepare, wk_fork_release, wk_fork_child);
}

int tc_fork_generation(void) {
    pthread_once(&wk_fork_once, wk_fork_register);
    return atomic_load(&wk_generation);
}

/* TOCSIN_CLOSED (message in s) for a subscription inherited across fork(). */
static int wk_inherited(tocsin_sub *s) {
    if (s->generation == atomic_load(&wk_generation)) return 0;
    if (!atomic_load(&s->err)) {
        snprintf(s->errmsg, sizeof s->errmsg,
                 "this subscription was opened before fork(); it belongs to the parent process "
                 "(open a new one in the child)");
        atomic_store(&s->err, TOCSIN_CLOSED);
    }
    return 1;
}

/* ---- signalling a subscription --------------------------------------------- */

/* Raise the descriptor unless a raise is already pending (wakes coalesce). */
static void wk_signal(tocsin_sub *s) {
    if (!atomic_exchange(&s->pending, 1)) tc_signal_raise(&s->sig);
}

/*
 * Consumes pending wakes; 1 if there was one. The descriptor is read before
 * the flag is cleared: a wake raised in between then stays visible through
 * the flag's value here, and the caller re-reads state after this returns,
 * after that commit.
 */
static int wk_drain(tocsin_sub *s) {
    int got = tc_signal_drain(&s->sig);
    if (atomic_exchange(&s->pending, 0)) {
        got = 1;
        /* the first drain of a saturated watcher's subscriptions wakes it */
        if (s->generation == atomic_load(&wk_generation) && atomic_load(&s->w->saturated) &&
            atomic_exchange(&s->w->saturated, 0))
            tc_signal_raise(&s->w->kick);
    }
    return got;
}

/* Marks every subscription of w failed with rc and wakes it. Under wk_lock. */
static void wk_fail_all(tc_watcher *w, int rc, const char *msg) {
    tocsin_sub *s;
    w->gone = 1;
    for (s = w->subs; s; s = s->next) {
        if (atomic_load(&s->err)) continue;
        snprintf(s->errmsg, sizeof s->errmsg, "%s", msg);
        atomic_store(&s->err, rc);
        wk_signal(s);
    }
}

static void wk_broadcast(tc_watcher *w) {
    tocsin_sub *s;
    pthread_mutex_lock(&wk_lock);
    for (s = w->subs; s; s = s->next) wk_signal(s);
    pthread_mutex_unlock(&wk_lock);
}

/* ---- the watcher thread --------------------------------------------------- */

/* 1 if data_version moved since the last check. A busy or failed check counts
 * as no change: the next one retries, and the safety poll bounds the delay. */
static int wk_check(tc_watcher *w) {
    int rc = sqlite3_step(w->dv);
    int64_t v;
    if (rc != SQLITE_ROW) {
        sqlite3_reset(w->dv);
        if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED &&
            ++w->errors == WK_ERROR_LIMIT) {
            char msg[300];
            snprintf(msg, sizeof msg, "wake engine: checking %s for commits keeps failing: %s",
                     w->path, sqlite3_errmsg(w->conn));
            pthread_mutex_lock(&wk_lock);
            wk_fail_all(w, TOCSIN_ERROR, msg);
            pthread_mutex_unlock(&wk_lock);
        }
        return 0;
    }
    w->errors = 0;
    v = sqlite3_column_int64(w->dv, 0);
    sqlite3_reset(w->dv);
    if (v == w->dv_last) return 0;
    w->dv_last = v;
    return 1;
}

/*
 * After a broadcast every subscription has a wake pending, and another commit
 * would change nothing for them: the watcher stops reading the kernel's
 * reports and the safety poll until a drain clears a pending wake (it kicks
 * the watcher, which then checks at once: what committed meanwhile is seen).
 * Under many writing processes this is most of the watcher's work saved; it
 * is done only when commits come closer than WK_SATURATE_US (the drain's kick
 * would otherwise wake the watcher in the middle of every wake-up, on the
 * consumer's time). The flag is set before the subscriptions are read, and a
 * drain clears its subscription's flag before it reads this one: one of the
 * two sees the other.
 */
static void wk_saturate(tc_watcher *w) {
    tocsin_sub *s;
    int all = 1;
    atomic_store(&w->saturated, 1);
    pthread_mutex_lock(&wk_lock);
    for (s = w->subs; s && all; s = s->next)
        if (!atomic_load(&s->pending)) all = 0;
    pthread_mutex_unlock(&wk_lock);
    if (!all) atomic_store(&w->saturated, 0);
}

/* Does the path still name the file the watcher opened? */
static void wk_identity(tc_watcher *w) {
    struct stat st;
    char msg[300];
    if (stat(w->path, &st) == 0) {
        if ((uint64_t)st.st_dev == w->dev && (uint64_t)st.st_ino == w->ino) return;
        snprintf(msg, sizeof msg,
                 "the database file %s was replaced (another file now has its name); reopen it",
                 w->path);
    } else if (errno == ENOENT || errno == ENOTDIR) {
        snprintf(msg, sizeof msg, "the database file %s was deleted or renamed; reopen it", w->path);
    } else {
        return; /* a transient failure to stat says nothing about identity */
    }
    pthread_mutex_lock(&wk_lock);
    wk_fail_all(w, TOCSIN_REPLACED, msg);
    pthread_mutex_unlock(&wk_lock);
}

static void *wk_main(void *arg) {
    tc_watcher *w = arg;
    const char *names[3];
    int64_t poll_us = (int64_t)w->poll_ms * 1000, now = tc_monotonic_us();
    /* without a kernel feed the poll is the primary path: it never backs off */
    int64_t idle_us = w->dirfd >= 0 ? (int64_t)w->idle_poll_ms * 1000 : poll_us, cur_us = poll_us;
    int64_t next_poll = now + poll_us, next_id = now + (int64_t)w->identity_ms * 1000;
    int64_t last_change = 0;
    int burst = 0, gone = 0;
    names[0] = w->names[0];
    names[1] = w->names[1];
    names[2] = w->names[2];
    for (;;) {
        int fds[2], ready[2] = {0, 0}, nfd = 1, hit = 0, r, parked = 0, sat = 0, resumed = 0;
        int64_t until = burst ? now + WK_BURST_US : next_poll;
        fds[0] = w->stop.rfd;
        if (!gone && atomic_load(&w->saturated)) {
            sat = 1;
            fds[nfd++] = w->kick.rfd;
            until = next_id;
        }
        /* A local write holds the write lock: what the kernel reports is ours.
         * Sleep until it ends (its end kicks) or the safety poll is due. The
         * flag is set before the count is read again, and the writer lowers
         * the count before it reads the flag: one of the two sees the other. */
        if (!sat && !gone && w->dirfd >= 0 && atomic_load(&w->writers) > 0) { /* no feed: nothing to ignore */
            atomic_store(&w->parked, 1);
            if (atomic_load(&w->writers) > 0) parked = 1;
            else atomic_store(&w->parked, 0);
        }
        if (parked) {
            fds[nfd++] = w->kick.rfd;
            until = next_poll;
        } else if (!sat && w->dirfd >= 0) {
            fds[nfd++] = w->dirfd;
        }
        /* The identity check rides on poll wakeups (at most idle_poll_ms
         * late); it has a timer of its own only when nothing else does. */
        if (gone) until = next_id;
        r = tc_poll_read(fds, ready, nfd, until > now ? until - now : 0);
        if (r > 0 && ready[0]) break;
        now = tc_monotonic_us();
        if (sat) {
            if (r > 0 && ready[1]) tc_signal_drain(&w->kick);
            if (!atomic_load(&w->saturated)) {
                /* kicked: what the kernel reported meanwhile is read, and the
                 * check below runs now */
                resumed = 1;
                if (w->dirfd >= 0) hit = tc_dirwatch_read(w->dirfd, names, 3);
                burst = 0;
            }
        } else if (parked) {
            atomic_store(&w->parked, 0);
            tc_signal_drain(&w->kick);
            /* the reports queued meanwhile are the write's: one check covers them */
            if (w->dirfd >= 0) tc_dirwatch_read(w->dirfd, names, 3);
            hit = r > 0 && ready[1];
            burst = 0;
        } else if (r > 0 && nfd == 2 && ready[1]) {
            hit = tc_dirwatch_read(w->dirfd, names, 3);
            /* a local write began: park first, check at its end */
            if (hit && atomic_load(&w->writers) > 0) continue;
        }
        if (!gone && (hit || burst || resumed || (!sat && now >= next_poll))) {
            int changed = wk_check(w), polled = !hit && !burst && !resumed;
            /* A write seen before its commit is published (the WAL frames land
             * before the index header moves): look again shortly. */
            if (changed) {
                burst = 0;
                wk_broadcast(w);
                if (now - last_change < WK_SATURATE_US) wk_saturate(w);
                last_change = now;
            } else if (resumed) {
                /* a report without a commit yet may be one being published */
                burst = hit ? WK_RESUME_CHECKS : 0;
            } else if (hit && !parked) {
                burst = WK_BURST_CHECKS;
            } else if (burst) {
                burst--;
            }
            /* Activity brings the safety poll back to poll_ms; quiet doubles it
             * up to idle_poll_ms (each timer wakeup costs CPU even when idle). */
            if (changed || hit) cur_us = poll_us;
            else if (polled && cur_us < idle_us) cur_us = cur_us * 2 < idle_us ? cur_us * 2 : idle_us;
            next_poll = now + cur_us;
        }
        if (now >= next_id) {
            next_id = now + (int64_t)w->identity_ms * 1000;
            if (!gone) wk_identity(w);
            pthread_mutex_lock(&wk_lock);
            gone = w->gone;
            pthread_mutex_unlock(&wk_lock);
        }
    }
    return NULL;
}

static void wk_free(tc_watcher *w) {
    int i;
    if (!w) return;
    sqlite3_finalize(w->dv);
    if (w->conn) sqlite3_close_v2(w->conn);
    tc_signal_close(&w->stop);
    tc_signal_close(&w->kick);
    tc_fd_close(w->dirfd);
    for (i = 0; i < 3; i++) sqlite3_free(w->names[i]);
    sqlite3_free(w->path);
    sqlite3_free(w);
}

/* Stops the thread of a watcher already out of the registry, and frees it. */
static void wk_stop(tc_watcher *w) {
    tc_signal_raise(&w->stop);
    pthread_join(w->thread, NULL);
    wk_free(w);
}

/*
 * Starts a watcher on `path` (identity dev/ino). Its baseline data_version is
 * read here, before the first subscriber returns: a commit after that point
 * always moves the value the thread compares against. Called under wk_lock.
 */
static int wk_start(tocsin_db *db, tc_watcher **out, const char *path, uint64_t dev, uint64_t ino) {
    tc_watcher *w = sqlite3_malloc(sizeof *w);
    const char *base = strrchr(path, '/');
    char *dir;
    int rc, i;
    sigset_t all, old;
    *out = NULL;
    if (!w) return tc_err(db, TOCSIN_NOMEM, "wake engine: out of memory");
    memset(w, 0, sizeof *w);
    w->stop.rfd = w->stop.wfd = w->kick.rfd = w->kick.wfd = w->dirfd = -1;
    w->serial = ++wk_serial;
    w->dev = dev;
    w->ino = ino;
    w->poll_ms = wk_opts.poll_ms ? wk_opts.poll_ms : 1;
    w->idle_poll_ms = wk_opts.idle_poll_ms ? wk_opts.idle_poll_ms : 20;
    if (w->idle_poll_ms < w->poll_ms) w->idle_poll_ms = w->poll_ms;
    w->identity_ms = wk_opts.identity_ms ? wk_opts.identity_ms : 100;
    base = base ? base + 1 : path;
    w->path = tc_strdup(path);
    w->names[0] = sqlite3_mprintf("%s", base);
    w->names[1] = sqlite3_mprintf("%s-wal", base);
    w->names[2] = sqlite3_mprintf("%s-journal", base);
    dir = base == path ? sqlite3_mprintf(".") : sqlite3_mprintf("%.*s", (int)(base - path), path);
    for (i = 0; i < 3; i++)
        if (!w->names[i]) dir = (sqlite3_free(dir), NULL);
    if (!w->path || !dir) {
        sqlite3_free(dir);
        wk_free(w);
        return tc_err(db, TOCSIN_NOMEM, "wake engine: out of memory");
    }
    rc = tc_open_sibling(db->conn, &w->conn, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX);
    if (rc == SQLITE_OK) {
        /* the watcher only reads: it must never checkpoint or remove the WAL */
        sqlite3_db_config(w->conn, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)NULL);
        sqlite3_busy_timeout(w->conn, db->busy_timeout_ms);
        rc = sqlite3_prepare_v3(w->conn, "PRAGMA data_version", -1, SQLITE_PREPARE_PERSISTENT,
                                &w->dv, NULL);
    }
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(w->dv);
        if (rc == SQLITE_ROW) w->dv_last = sqlite3_column_int64(w->dv, 0);
        sqlite3_reset(w->dv);
        rc = rc == SQLITE_ROW ? SQLITE_OK : rc;
        /* the thread never blocks on a lock: a busy check is retried */
        sqlite3_busy_timeout(w->conn, 0);
    }
    if (rc != SQLITE_OK) {
        rc = tc_err(db, (rc & 0xff) == SQLITE_BUSY ? TOCSIN_BUSY : TOCSIN_ERROR,
                    "wake engine: cannot read %s: %s", path,
                    w->conn ? sqlite3_errmsg(w->conn) : "out of memory");
        sqlite3_free(dir);
        wk_free(w);
        return rc;
    }
    if (tc_signal_open(&w->stop) != 0 || tc_signal_open(&w->kick) != 0) {
        sqlite3_free(dir);
        wk_free(w);
        return tc_err(db, TOCSIN_ERROR, "wake engine: cannot create a descriptor: %s",
                      strerror(errno));
    }
    if (!wk_opts.no_kernel_events) w->dirfd = tc_dirwatch_open(dir);
    sqlite3_free(dir);
    /* The thread takes no signal: the host's handlers run on its own threads. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&w->thread, NULL, wk_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        wk_free(w);
        return tc_err(db, TOCSIN_ERROR, "wake engine: cannot start the watcher thread: %s",
                      strerror(rc));
    }
    *out = w;
    return TOCSIN_OK;
}

/* ---- identity of a handle's file -------------------------------------------- */

static int wk_state(tocsin_db *db) {
    if (db->wake) return TOCSIN_OK;
    db->wake = sqlite3_malloc(sizeof *db->wake);
    if (!db->wake) return tc_err(db, TOCSIN_NOMEM, "wake engine: out of memory");
    memset(db->wake, 0, sizeof *db->wake);
    return TOCSIN_OK;
}

/* The handle's database path, or NULL (message set) for in-memory/temporary ones. */
static const char *wk_path(tocsin_db *db) { return tc_shared_path(db, "the wake engine needs a database file"); }

/* The identity of the file db's path names now; TOCSIN_REPLACED when it is
 * no longer the file the handle opened (a watcher on it would watch a stranger). */
static int wk_identify(tocsin_db *db, const char *path, uint64_t *dev, uint64_t *ino) {
    struct stat st;
    if (stat(path, &st) != 0) {
        if (db->has_identity && (errno == ENOENT || errno == ENOTDIR))
            return tc_err(db, TOCSIN_REPLACED,
                          "the database file %s was deleted or renamed since this handle opened it; reopen it",
                          path);
        return tc_err(db, TOCSIN_ERROR, "wake engine: stat %s: %s", path, strerror(errno));
    }
    *dev = (uint64_t)st.st_dev;
    *ino = (uint64_t)st.st_ino;
    if (db->has_identity && (db->dev != *dev || db->ino != *ino))
        return tc_err(db, TOCSIN_REPLACED,
                      "the database file %s was replaced since this handle opened it (another file now has its name); reopen it",
                      path);
    return TOCSIN_OK;
}

void tc_wake_local(tocsin_db *db) {
    tc_watcher *w;
    if (atomic_load(&wk_nsubs) == 0) return;
    if (!db->has_identity) return;
    pthread_mutex_lock(&wk_lock);
    for (w = wk_watchers; w; w = w->next) {
        if (w->dev == db->dev && w->ino == db->ino) {
            tocsin_sub *s;
            for (s = w->subs; s; s = s->next) wk_signal(s);
        }
    }
    pthread_mutex_unlock(&wk_lock);
}

/* The handle's watcher (same file), or NULL. Under wk_lock. */
static tc_watcher *wk_find(const tocsin_db *db) {
    tc_watcher *w;
    for (w = wk_watchers; w; w = w->next)
        if (!w->gone && w->dev == db->dev && w->ino == db->ino) return w;
    return NULL;
}

void tc_wake_write_begin(tocsin_db *db) {
    tc_watcher *w;
    if (db->wk_writer || atomic_load(&wk_nsubs) == 0 || !db->has_identity) return;
    pthread_mutex_lock(&wk_lock);
    if ((w = wk_find(db)) != NULL) {
        atomic_fetch_add(&w->writers, 1);
        db->wk_writer = w->serial;
    }
    pthread_mutex_unlock(&wk_lock);
}

void tc_wake_write_end(tocsin_db *db) {
    tc_watcher *w;
    if (!db->wk_writer) return;
    pthread_mutex_lock(&wk_lock);
    /* by serial: the watcher counted may be gone, and another in its place */
    for (w = wk_watchers; w && w->serial != db->wk_writer; w = w->next)
        ;
    if (w && atomic_fetch_sub(&w->writers, 1) == 1 && atomic_load(&w->parked))
        tc_signal_raise(&w->kick);
    pthread_mutex_unlock(&wk_lock);
    db->wk_writer = 0;
}

/* Tests: a counter of db's file's watcher (at `offset` in it), -1 without one. */
static int wk_counter(tocsin_db *db, size_t offset) {
    tc_watcher *w;
    int n = -1;
    pthread_mutex_lock(&wk_lock);
    if ((w = wk_find(db)) != NULL) n = atomic_load((atomic_int *)((char *)w + offset));
    pthread_mutex_unlock(&wk_lock);
    return n;
}

int tc_wake_local_writers(tocsin_db *db) { return wk_counter(db, offsetof(tc_watcher, writers)); }
int tc_wake_saturated(tocsin_db *db) { return wk_counter(db, offsetof(tc_watcher, saturated)); }

void tc_wake_free(struct tc_wake *wake) {
    if (!wake) return;
    tocsin_sub_close(wake->sub);
    sqlite3_free(wake);
}

void tc_wake_release(tocsin_db *db) {
    tc_wake_free(db->wake);
    db->wake = NULL;
}

static int wk_sub_open(tocsin_sub **out, tocsin_db *db);

int tc_wake_db_sub(tocsin_db *db, tocsin_sub **out) {
    int rc;
    *out = NULL;
    if ((rc = wk_state(db)) != TOCSIN_OK) return rc;
    if (!db->wake->sub && (rc = wk_sub_open(&db->wake->sub, db)) != TOCSIN_OK) return rc;
    *out = db->wake->sub;
    return TOCSIN_OK;
}

/* ---- configuration ------------------------------------------------------------ */

int tocsin_wake_configure(const tocsin_wake_opts *opts) {
    tocsin_wake_opts o = TOCSIN_WAKE_OPTS_INIT;
    tc_clear(NULL);
    if (opts) {
        int vrc = TC_CHECK_VERSION(NULL, "wake options", opts->version, TOCSIN_WAKE_OPTS);
        if (vrc != TOCSIN_OK) return vrc;
        if (opts->poll_ms < 0 || opts->poll_ms > 1000)
            return tc_err(NULL, TOCSIN_INVALID, "poll_ms must be between 0 and 1000, not %d", opts->poll_ms);
        if (opts->identity_ms < 0 || opts->identity_ms > 60000)
            return tc_err(NULL, TOCSIN_INVALID, "identity_ms must be between 0 and 60000, not %d",
                          opts->identity_ms);
        if (opts->idle_poll_ms < 0 || opts->idle_poll_ms > 1000)
            return tc_err(NULL, TOCSIN_INVALID, "idle_poll_ms must be between 0 and 1000, not %d",
                          opts->idle_poll_ms);
        o.poll_ms = opts->poll_ms;
        o.idle_poll_ms = opts->idle_poll_ms;
        o.identity_ms = opts->identity_ms;
        o.no_kernel_events = opts->no_kernel_events != 0;
    }
    pthread_mutex_lock(&wk_lock);
    wk_opts = o;
    pthread_mutex_unlock(&wk_lock);
    return TOCSIN_OK;
}

/* ---- subscriptions ------------------------------------------------------------ */

/*
 * A handle that subscribes once keeps its file's watcher until it closes: the
 * handle's own subscription (opened here if absent) anchors it. Without it, a
 * binding that opens a subscription per wait (to poke it) started and stopped
 * the watcher thread, its connection and its baseline read at every wait, and
 * a commit landing meanwhile waited for the next one (5-8 ms in Go and Node).
 */
int tocsin_sub_open(tocsin_sub **out, tocsin_db *db) {
    int rc = wk_sub_open(out, db);
    if (rc == TOCSIN_OK) {
        tocsin_sub *own;
        /* never waits for another thread's call on the handle (an event
         * loop's thread opens subscriptions): a later open anchors instead */
        if (pthread_mutex_trylock(&db->mutex) == 0) {
            if (tc_wake_db_sub(db, &own) != TOCSIN_OK) tc_clear(db); /* the caller's subscription stands */
            tc_unlock(db);
        }
    }
    return rc;
}

static int wk_sub_open(tocsin_sub **out, tocsin_db *db) {
    tocsin_sub *s;
    tc_watcher *w;
    const char *path;
    uint64_t dev, ino;
    int rc;
    if (!out) return tc_err(NULL, TOCSIN_INVALID, "out must not be NULL");
    *out = NULL;
    if (!db) return tc_err(NULL, TOCSIN_INVALID, "db must not be NULL");
    tc_clear(db);
    if (tc_inherited(db)) return TC_ERRCODE;
    if (!(path = wk_path(db))) return TC_ERRCODE;
    if ((rc = wk_identify(db, path, &dev, &ino)) != TOCSIN_OK) return rc;
    if (!(s = sqlite3_malloc(sizeof *s))) return tc_err(db, TOCSIN_NOMEM, "wake engine: out of memory");
    memset(s, 0, sizeof *s);
    pthread_once(&wk_fork_once, wk_fork_register);
    s->generation = atomic_load(&wk_generation);
    if (tc_signal_open(&s->sig) != 0) {
        sqlite3_free(s);
        return tc_err(db, TOCSIN_ERROR, "wake engine: cannot create a descriptor: %s",
                      strerror(errno));
    }
    pthread_mutex_lock(&wk_lock);
    for (w = wk_watchers; w; w = w->next)
        if (w->dev == dev && w->ino == ino && !w->gone) break;
    if (!w) {
        if ((rc = wk_start(db, &w, path, dev, ino)) != TOCSIN_OK) {
            pthread_mutex_unlock(&wk_lock);
            tc_signal_close(&s->sig);
            sqlite3_free(s);
            return rc;
        }
        w->next = wk_watchers;
        wk_watchers = w;
    }
    s->w = w;
    s->next = w->subs;
    if (w->subs) w->subs->prev = s;
    w->subs = s;
    w->nsubs++;
    atomic_fetch_add(&wk_nsubs, 1);
    /* a saturated watcher wakes: this subscription has no wake pending */
    if (atomic_exchange(&w->saturated, 0)) tc_signal_raise(&w->kick);
    pthread_mutex_unlock(&wk_lock);
    *out = s;
    return TOCSIN_OK;
}

void tc_sub_shut(tocsin_sub *s) {
    if (!s) return;
    atomic_store(&s->closed, 1);
    tc_signal_raise(&s->sig);
    /* every wait on s ends at once with TOCSIN_CLOSED; let them leave (not the
     * parent's threads of a subscription inherited across fork: never here) */
    while (atomic_load(&s->waiters) > s->ghosts) tc_sleep_ms(1);
}

/*
 * Counts the calling thread in while it uses s. Dekker's pattern with
 * tc_sub_shut (both sides sequentially consistent): either the close sees this
 * thread counted and waits for it, or this sees the close and declines (0,
 * the thread's error set to TOCSIN_CLOSED), never touching s again.
 */
int tc_sub_enter(tocsin_sub *s) {
    atomic_fetch_add(&s->waiters, 1);
    if (!atomic_load(&s->closed)) return 1;
    atomic_fetch_sub(&s->waiters, 1);
    tc_err(NULL, TOCSIN_CLOSED, "the subscription was closed");
    return 0;
}

void tc_sub_leave(tocsin_sub *s) { atomic_fetch_sub(&s->waiters, 1); }

void tc_sub_nudge(tocsin_sub *s) {
    if (s) wk_signal(s);
}

int tocsin_sub_close(tocsin_sub *s) {
    tc_watcher *w, *stop = NULL;
    if (!s) return TOCSIN_OK;
    tc_sub_shut(s);
    w = s->w;
    /* A subscription inherited across fork() has no watcher here: only free it. */
    if (s->generation == atomic_load(&wk_generation)) {
        pthread_mutex_lock(&wk_lock);
        if (s->prev) s->prev->next = s->next;
        else w->subs = s->next;
        if (s->next) s->next->prev = s->prev;
        atomic_fetch_sub(&wk_nsubs, 1);
        if (--w->nsubs == 0) {
            tc_watcher **pp = &wk_watchers;
            while (*pp != w) pp = &(*pp)->next;
            *pp = w->next;
            stop = w;
        }
        pthread_mutex_unlock(&wk_lock);
    }
    if (stop) wk_stop(stop);
    tc_signal_close(&s->sig);
    sqlite3_free(s);
    return TOCSIN_OK;
}

int tocsin_sub_fd(tocsin_sub *s) { return s ? s->sig.rfd : -1; }

int tocsin_sub_poke(tocsin_sub *s) {
    if (!s) return tc_err(NULL, TOCSIN_INVALID, "sub must not be NULL");
    atomic_store(&s->poked, 1);
    wk_signal(s);
    return TOCSIN_OK;
}

/*
 * Why a wait must end although its condition does not hold: closed, the
 * subscription's sticky error (replaced file, inherited across fork), or a
 * poke (consumed here). Sets the thread's error; 0 when the wait goes on.
 */
static int wk_stop_reason(tocsin_sub *s) {
    int err;
    if (atomic_load(&s->closed))
        return tc_err(NULL, TOCSIN_CLOSED, "the subscription was closed while waiting");
    wk_inherited(s);
    if ((err = atomic_load(&s->err)) != 0) return tc_err(NULL, err, "%s", s->errmsg);
    if (atomic_exchange(&s->poked, 0))
        return tc_err(NULL, TOCSIN_INTERRUPTED, "the wait was interrupted (poked)");
    return 0;
}

int tocsin_sub_drain(tocsin_sub *s, int *out_woken) {
    int woken, rc;
    if (out_woken) *out_woken = 0;
    tc_clear(NULL);
    if (!s || !out_woken) return tc_err(NULL, TOCSIN_INVALID, "sub and out_woken must not be NULL");
    woken = wk_drain(s);
    if ((rc = wk_stop_reason(s)) != 0) return rc;
    *out_woken = woken;
    return TOCSIN_OK;
}

/* Blocks up to timeout_us (< 0: forever) for the descriptor; 1 readable, 0 not. */
static int wk_block(tocsin_sub *s, int64_t timeout_us) {
    int fd = s->sig.rfd, ready = 0;
    int64_t end = timeout_us < 0 ? -1 : tc_monotonic_us() + timeout_us;
    for (;;) {
        int64_t left = end < 0 ? -1 : end - tc_monotonic_us();
        if (end >= 0 && left < 0) left = 0;
        if (tc_poll_read(&fd, &ready, 1, left) > 0 && ready) return 1;
        if (end >= 0 && tc_monotonic_us() >= end) return 0;
    }
}

int tocsin_sub_wait(tocsin_sub *s, int timeout_ms) {
    int rc = 0;
    tc_clear(NULL);
    if (!s) return tc_err(NULL, TOCSIN_INVALID, "sub must not be NULL");
    atomic_fetch_add(&s->waiters, 1);
    if (!wk_drain(s) && (rc = wk_stop_reason(s)) == 0) {
        if (!wk_block(s, timeout_ms < 0 ? -1 : (int64_t)timeout_ms * 1000))
            rc = tc_err(NULL, TOCSIN_TIMEOUT, "no commit within %d ms", timeout_ms);
        else
            wk_drain(s);
    }
    if (rc == 0) rc = wk_stop_reason(s);
    atomic_fetch_sub(&s->waiters, 1);
    return rc;
}

int tc_wait_loop(tocsin_sub *s, tc_check_fn check, void *ctx) {
    int rc;
    atomic_fetch_add(&s->waiters, 1);
    for (;;) {
        int64_t sleep_ms = -1;
        int done = 0;
        wk_drain(s);
        if ((rc = wk_stop_reason(s)) != 0) break;
        if ((rc = check(ctx, &done, &sleep_ms)) != TOCSIN_OK || done) break;
        wk_block(s, sleep_ms < 0 ? -1 : sleep_ms * 1000);
    }
    atomic_fetch_sub(&s->waiters, 1);
    return rc;
}

int64_t tc_deadline_us(int timeout_ms) {
    return timeout_ms < 0 ? -1 : tc_monotonic_us() + (int64_t)timeout_ms * 1000;
}

int tc_sleep_until(int64_t end_us, int64_t *sleep_ms, const char *what) {
    int64_t left;
    if (end_us < 0) return TOCSIN_OK;
    left = end_us - tc_monotonic_us();
    if (left <= 0) return tc_err(NULL, TOCSIN_TIMEOUT, "%s before the timeout", what);
    *sleep_ms = (left + 999) / 1000;
    return TOCSIN_OK;
}

/* tocsin_sub_wait_until: the caller's condition plus a monotonic deadline. */
typedef struct wk_until {
    tocsin_check_fn check;
    void *ctx;
    int64_t end_us; /* < 0: none */
} wk_until;

static int wk_until_check(void *p, int *done, int64_t *sleep_ms) {
    wk_until *u = p;
    int rc = u->check(u->ctx, done);
    if (rc != TOCSIN_OK) {
        if (tocsin_errcode(NULL) != rc) tc_err(NULL, rc, "the wait's check returned %s", tocsin_errstr(rc));
        return rc;
    }
    if (*done) return TOCSIN_OK;
    return tc_sleep_until(u->end_us, sleep_ms, "the condition did not hold");
}

int tocsin_sub_wait_until(tocsin_sub *s, tocsin_check_fn check, void *ctx, int timeout_ms) {
    wk_until u;
    tc_clear(NULL);
    if (!s || !check) return tc_err(NULL, TOCSIN_INVALID, "sub and check must not be NULL");
    u.check = check;
    u.ctx = ctx;
    u.end_us = tc_deadline_us(timeout_ms);
    return tc_wait_loop(s, wk_until_check, &u);
}

/*
 * Under the handle's mutex: another thread's operation in progress is not
 * "a transaction of the caller's", and the handle's own subscription serves
 * one wait at a time (a subscription's wake is consumed by one waiter):
 * concurrent waits on one handle each get a subscription of their own. The
 * wait is recorded on the handle, with a reference, for tocsin_close.
 */
static int wait_sub(tocsin_db *db, tocsin_sub **sub, int *own, tc_waitrec *rec) {
    int rc = TOCSIN_OK;
    *own = 0;
    tc_lock(db);
    if (db->closed) {
        rc = tc_err(db, TOCSIN_CLOSED, "the database handle was closed");
    } else if (!sqlite3_get_autocommit(db->conn)) {
        rc = tc_err(db, TOCSIN_INVALID,
                    "cannot wait inside a transaction (it would hold its snapshot and locks)");
    } else if (*sub) {
        const char *path = wk_path(db);
        uint64_t dev = 0, ino = 0;
        if (!path) rc = TC_ERRCODE;
        else if ((rc = wk_identify(db, path, &dev, &ino)) == TOCSIN_OK &&
                 ((*sub)->w->dev != dev || (*sub)->w->ino != ino))
            rc = tc_err(db, TOCSIN_INVALID, "sub watches another database file than this handle's");
    } else if ((rc = wk_state(db)) == TOCSIN_OK && !db->wake->sub_busy) {
        if ((rc = tc_wake_db_sub(db, sub)) == TOCSIN_OK) db->wake->sub_busy = *own = 1;
    } else if (rc == TOCSIN_OK) {
        rc = tocsin_sub_open(sub, db);
        *own = 2;
    }
    if (rc == TOCSIN_OK) {
        rec->sub = *sub;
        rec->next = db->waits;
        db->waits = rec;
        db->refs++;
    }
    tc_unlock(db);
    return rc;
}

typedef struct db_wait {
    tocsin_db *db;
    tc_check_fn check;
    void *ctx;
} db_wait;

/* The wait's check, unless the handle was closed meanwhile (its connection
 * is then no longer the wait's to use). */
static int db_wait_check(void *p, int *done, int64_t *sleep_ms) {
    db_wait *d = p;
    int closed;
    tc_lock(d->db);
    closed = d->db->closed;
    tc_unlock(d->db);
    if (closed) return tc_err(d->db, TOCSIN_CLOSED, "the database handle was closed during the wait");
    return d->check(d->ctx, done, sleep_ms);
}

int tc_db_wait(tocsin_db *db, tocsin_sub *sub, tc_check_fn check, void *ctx) {
    tc_waitrec rec, **p;
    db_wait d;
    int own, rc, closed;
    if (tc_inherited(db)) return TC_ERRCODE;
    if ((rc = wait_sub(db, &sub, &own, &rec)) != TOCSIN_OK) return rc;
    d.db = db;
    d.check = check;
    d.ctx = ctx;
    rc = tc_wait_loop(sub, db_wait_check, &d);
    tc_lock(db);
    for (p = &db->waits; *p && *p != &rec; p = &(*p)->next)
        ;
    if (*p) *p = rec.next;
    if (own == 1 && db->wake) db->wake->sub_busy = 0;
    closed = db->closed;
    tc_unlock(db);
    if (own == 2) tocsin_sub_close(sub);
    /* poked by tocsin_close (or its own subscription closed under it) */
    if (closed && rc != TOCSIN_OK && rc != TOCSIN_CLOSED)
        rc = tc_err(db, TOCSIN_CLOSED, "the database handle was closed during the wait");
    tc_db_drop(db);
    return rc;
}

int tc_sleep_until_clock(tocsin_db *db, int64_t deadline, int64_t next, int64_t *sleep_ms,
                         const char *what) {
    int64_t now = tocsin_now(db), wake = deadline;
    if (deadline >= 0 && now >= deadline)
        return tc_err(db, TOCSIN_TIMEOUT, "%s before the deadline", what);
    if (next >= 0 && (wake < 0 || next < wake)) wake = next;
    *sleep_ms = wake < 0 || wake - now > TC_MAX_SLEEP_MS ? TC_MAX_SLEEP_MS : wake - now;
    return TOCSIN_OK;
}

/* ==== end of the engine: the waiters live beside their features ==== */
