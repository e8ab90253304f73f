/*
 * Schema migrations on an application's connection (docs/schema.md, "Installs
 * and migrations on a host's connection"): the loadable extension migrates a
 * v1 file whole or not at all, whatever the application's connection does
 * around it -- a progress handler or sqlite3_interrupt() that stops the call
 * at any step (and would stop a ROLLBACK of ours too), its COMMIT right after,
 * a transaction of its own.
 */
#define _POSIX_C_SOURCE 200809L
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

/* A v1 file written by tocsin 0.1 (interop-tests/golden/README.md); the suite
 * runs from the repository root. */
static const char GOLDEN_V1[] = "interop-tests/golden/v1-full.db";

/* ---- a VFS without syncs ----------------------------------------------------
 * The default VFS whose files skip xSync: the sweep below commits a few
 * thousand times. The application opens its connection on it by name; the
 * private connection that migrates must open the file on the same VFS (its
 * locks are the ones the application's connection takes), which `opened`
 * counts. */
typedef struct nosync_file {
    sqlite3_file base;
    sqlite3_file *real; /* follows this struct in the same allocation */
} nosync_file;

static sqlite3_vfs nosync_vfs;
static sqlite3_io_methods nosync_io;
static int nosync_main_opens;
/* main-file opens whose URI parameter "tag" was "a b&c=d", whose was not, and
 * that carried a "cache" parameter */
static int tagged_opens, untagged_opens, cache_opens;

static int ns_close(sqlite3_file *f) {
    nosync_file *n = (nosync_file *)f;
    int rc = n->real->pMethods ? n->real->pMethods->xClose(n->real) : SQLITE_OK;
    return rc;
}
static int ns_read(sqlite3_file *f, void *b, int a, sqlite3_int64 o) {
    return ((nosync_file *)f)->real->pMethods->xRead(((nosync_file *)f)->real, b, a, o);
}
static int ns_write(sqlite3_file *f, const void *b, int a, sqlite3_int64 o) {
    return ((nosync_file *)f)->real->pMethods->xWrite(((nosync_file *)f)->real, b, a, o);
}
static int ns_truncate(sqlite3_file *f, sqlite3_int64 sz) {
    return ((nosync_file *)f)->real->pMethods->xTruncate(((nosync_file *)f)->real, sz);
}
static int ns_sync(sqlite3_file *f, int flags) {
    (void)f;
    (void)flags;
    return SQLITE_OK;
}
static int ns_size(sqlite3_file *f, sqlite3_int64 *sz) {
    return ((nosync_file *)f)->real->pMethods->xFileSize(((nosync_file *)f)->real, sz);
}
static int ns_lock(sqlite3_file *f, int l) { return ((nosync_file *)f)->real->pMethods->xLock(((nosync_file *)f)->real, l); }
static int ns_unlock(sqlite3_file *f, int l) {
    return ((nosync_file *)f)->real->pMethods->xUnlock(((nosync_file *)f)->real, l);
}
static int ns_check(sqlite3_file *f, int *out) {
    return ((nosync_file *)f)->real->pMethods->xCheckReservedLock(((nosync_file *)f)->real, out);
}
static int ns_fcntl(sqlite3_file *f, int op, void *arg) {
    return ((nosync_file *)f)->real->pMethods->xFileControl(((nosync_file *)f)->real, op, arg);
}
static int ns_sector(sqlite3_file *f) { return ((nosync_file *)f)->real->pMethods->xSectorSize(((nosync_file *)f)->real); }
static int ns_dev(sqlite3_file *f) {
    return ((nosync_file *)f)->real->pMethods->xDeviceCharacteristics(((nosync_file *)f)->real);
}
static int ns_shm_map(sqlite3_file *f, int pg, int sz, int ext, void volatile **p) {
    return ((nosync_file *)f)->real->pMethods->xShmMap(((nosync_file *)f)->real, pg, sz, ext, p);
}
static int ns_shm_lock(sqlite3_file *f, int off, int n, int flags) {
    return ((nosync_file *)f)->real->pMethods->xShmLock(((nosync_file *)f)->real, off, n, flags);
}
static void ns_shm_barrier(sqlite3_file *f) { ((nosync_file *)f)->real->pMethods->xShmBarrier(((nosync_file *)f)->real); }
static int ns_shm_unmap(sqlite3_file *f, int del) {
    return ((nosync_file *)f)->real->pMethods->xShmUnmap(((nosync_file *)f)->real, del);
}

static int ns_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out_flags) {
    sqlite3_vfs *real = vfs->pAppData;
    nosync_file *n = (nosync_file *)f;
    int rc;
    n->real = (sqlite3_file *)(n + 1);
    rc = real->xOpen(real, name, n->real, flags, out_flags);
    n->base.pMethods = n->real->pMethods ? &nosync_io : NULL;
    if (rc == SQLITE_OK && (flags & SQLITE_OPEN_MAIN_DB)) {
        const char *tag = sqlite3_uri_parameter(name, "tag");
        nosync_main_opens++;
        if (tag && strcmp(tag, "a b&c=d") == 0) tagged_opens++;
        else untagged_opens++;
        if (sqlite3_uri_parameter(name, "cache")) cache_opens++;
    }
    return rc;
}

static void nosync_register(void) {
    sqlite3_vfs *real = sqlite3_vfs_find(NULL);
    if (nosync_vfs.zName) return;
    nosync_vfs = *real;
    nosync_vfs.zName = "tocsin-test-nosync";
    nosync_vfs.pAppData = real;
    nosync_vfs.szOsFile = (int)sizeof(nosync_file) + real->szOsFile;
    nosync_vfs.xOpen = ns_open;
    nosync_vfs.pNext = NULL;
    nosync_io = (sqlite3_io_methods){2,        ns_close,     ns_read,       ns_write,       ns_truncate, ns_sync,
                                     ns_size,  ns_lock,      ns_unlock,     ns_check,       ns_fcntl,    ns_sector,
                                     ns_dev,   ns_shm_map,   ns_shm_lock,   ns_shm_barrier, ns_shm_unmap, NULL,
                                     NULL};
    sqlite3_vfs_register(&nosync_vfs, 0);
}


static int copy_file(const char *from, const char *to) {
    char buf[65536];
    size_t n;
    int ok = 1;
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    if (!in || !out) ok = 0;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
    if (in) fclose(in);
    if (out && fclose(out) != 0) ok = 0;
    return ok;
}

/* The first column of the first row of sql as text, into out ("" for none,
 * "ERR ..." for a failure). */
static void scalar(sqlite3 *c, const char *sql, char *out, size_t cap) {
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(c, sql, -1, &st, NULL);
    out[0] = 0;
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        snprintf(out, cap, "%s", t ? (const char *)t : "NULL");
    } else if (rc != SQLITE_DONE) {
        snprintf(out, cap, "ERR %s", sqlite3_errmsg(c));
    }
    sqlite3_finalize(st);
}

/* What a migration must keep: every row of the three rebuilt tables (ids
 * included), the other tables' rows, and the sqlite_sequence rows that say
 * where the ids continue. */
static const char FACTS_SQL[] =
    "SELECT json_array("
    " (SELECT group_concat(id || ':' || queue || ':' || state || ':' || payload || ':' || attempts, ',')"
    "    FROM (SELECT * FROM _tocsin_jobs ORDER BY id)),"
    " (SELECT group_concat(id || ':' || topic || ':' || payload, ',') FROM (SELECT * FROM _tocsin_events ORDER BY id)),"
    " (SELECT group_concat(id || ':' || channel || ':' || payload, ',')"
    "    FROM (SELECT * FROM _tocsin_notifications ORDER BY id)),"
    " (SELECT group_concat(name || '=' || seq, ',') FROM (SELECT * FROM main.sqlite_sequence"
    "    WHERE name IN ('_tocsin_jobs', '_tocsin_events', '_tocsin_notifications') ORDER BY name)),"
    " (SELECT count(*) FROM _tocsin_dead), (SELECT count(*) FROM _tocsin_results),"
    " (SELECT count(*) FROM _tocsin_offsets), (SELECT count(*) FROM _tocsin_locks),"
    " (SELECT count(*) FROM _tocsin_schedules))";

/* The schema objects a v1 file lacks and a v2 file has, and the leftovers of
 * a half-done rebuild. */
static const char SHAPE_SQL[] =
    "SELECT (SELECT count(*) FROM sqlite_master WHERE name IN ('_tocsin_jobs_top', '_tocsin_events_top',"
    " '_tocsin_notifications_top', '_tocsin_sequence_keeper')) || '/' ||"
    " (SELECT count(*) FROM sqlite_master WHERE name LIKE '\\_tocsin\\_%\\_v1' ESCAPE '\\') || '/' ||"
    " (SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name LIKE '\\_tocsin\\_%' ESCAPE '\\'"
    "  AND sql LIKE '%AUTOINCREMENT%' AND name <> '_tocsin_sequence_keeper')";

typedef struct progress {
    long steps, limit;
    int mode; /* 0: the handler returns nonzero from step `limit` on; 1: it calls sqlite3_interrupt once */
    sqlite3 *conn;
} progress;

static int on_progress(void *p) {
    progress *g = p;
    if (++g->steps < g->limit) return 0;
    if (g->mode == 0) return 1;
    if (g->steps == g->limit) sqlite3_interrupt(g->conn);
    return 0;
}

static sqlite3 *host_open(const char *path, const char *ext) {
    sqlite3 *c = NULL;
    char *err = NULL;
    if (sqlite3_open_v2(path, &c, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nosync_vfs.zName) != SQLITE_OK) {
        sqlite3_close(c);
        return NULL;
    }
    sqlite3_enable_load_extension(c, 1);
    if (sqlite3_load_extension(c, ext, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "load %s: %s\n", ext, err ? err : "");
        sqlite3_free(err);
        sqlite3_close(c);
        return NULL;
    }
    return c;
}

/* The file is wholly v1 (as copied) or wholly v2, its facts those of the
 * golden file; 1 or 2, 0 when it is neither (reported). */
static int whole_version(const char *path, const char *facts_v1, long n, int mode) {
    char v[64], shape[64], facts[8192];
    sqlite3 *c = NULL;
    int ok = 0;
    if (sqlite3_open(path, &c) != SQLITE_OK) {
        sqlite3_close(c);
        return 0;
    }
    scalar(c, "SELECT value FROM _tocsin_meta WHERE key = 'schema_version'", v, sizeof v);
    scalar(c, SHAPE_SQL, shape, sizeof shape);
    scalar(c, FACTS_SQL, facts, sizeof facts);
    sqlite3_close(c);
    if (strcmp(v, "1") == 0 && strcmp(shape, "0/0/3") == 0) ok = 1;
    if (strcmp(v, "2") == 0 && strcmp(shape, "4/0/0") == 0) ok = 2;
    if (!ok || strcmp(facts, facts_v1) != 0) {
        fprintf(stderr, "FAIL [migrate] N=%ld mode %d: version %s, shape %s (v1 0/0/3, v2 4/0/0), facts %s\n", n,
                mode, v, shape, strcmp(facts, facts_v1) == 0 ? "kept" : facts);
        return 0;
    }
    return ok;
}

/* Sweeps N from 1 until the bootstrap runs to its end uninterrupted: the
 * application's connection is stopped at its Nth VM step (one mode returns
 * nonzero from the progress handler from then on, so that it stops any
 * ROLLBACK of ours as well; the other calls sqlite3_interrupt once), then the
 * application COMMITs and writes on, as an application that saw an error
 * would. (The handler counts the host connection's steps only: the migration
 * itself runs on a private connection, out of its reach; the sweep covers
 * everything the call runs on the host's, before and after it.) After each N the file is wholly v1 or wholly v2 with every row and id
 * kept, and a later bootstrap migrates it (or finds it migrated). */
static void interrupted_migration(void) {
    const char *ext = getenv("TOCSIN_TEST_EXT");
    char path[600], facts_v1[8192], out[512];
    sqlite3 *c;
    int mode;
    CHECK(ext != NULL);
    if (!ext) return;
    snprintf(path, sizeof path, "%s", t_path("migrate_interrupt"));
    CHECK(copy_file(GOLDEN_V1, path));
    c = NULL;
    facts_v1[0] = 0;
    if (sqlite3_open(path, &c) == SQLITE_OK) scalar(c, FACTS_SQL, facts_v1, sizeof facts_v1);
    sqlite3_close(c);
    CHECK(strncmp(facts_v1, "[\"1:", 4) == 0);
    for (mode = 0; mode < 2; mode++) {
        long n, bad = 0, v1s = 0, v2s = 0, done = 0, opens;
        for (n = 1; n < 1000000 && !done; n++) {
            progress g = {0, n, mode, NULL};
            int rc, v;
            t_path("migrate_interrupt");
            if (!copy_file(GOLDEN_V1, path) || !(c = host_open(path, ext))) {
                bad++;
                break;
            }
            g.conn = c;
            opens = nosync_main_opens;
            sqlite3_progress_handler(c, 1, on_progress, &g);
            rc = sqlite3_exec(c, "SELECT tocsin_bootstrap()", NULL, NULL, NULL);
            done = rc == SQLITE_OK && g.steps < g.limit; /* ran to its end uninterrupted */
            if (done) CHECK_EQ_I(nosync_main_opens, opens + 1); /* the private connection, on the host's VFS */
            sqlite3_progress_handler(c, 0, NULL, NULL);
            /* the application goes on: its COMMIT (of whatever may be open),
             * then its own writes */
            sqlite3_exec(c, "COMMIT", NULL, NULL, NULL);
            sqlite3_exec(c, "CREATE TABLE IF NOT EXISTS app(x); INSERT INTO app VALUES (1)", NULL, NULL, NULL);
            sqlite3_close(c);
            v = whole_version(path, facts_v1, n, mode);
            if (v == 1) v1s++;
            else if (v == 2) v2s++;
            else bad++;
            /* a later bootstrap (no interruption) succeeds and keeps it all */
            if ((c = host_open(path, ext)) != NULL) {
                scalar(c, "SELECT tocsin_bootstrap()", out, sizeof out);
                sqlite3_close(c);
            }
            if (!c || strcmp(out, "2") != 0 || whole_version(path, facts_v1, n, mode) != 2) {
                if (c) fprintf(stderr, "FAIL [migrate] N=%ld mode %d: later bootstrap: %s\n", n, mode, out);
                bad++;
            }
            if (bad > 5) break;
        }
        CHECK_EQ_I(bad, 0);
        CHECK(done);  /* the sweep reached a bootstrap no step of which was stopped */
        CHECK(v1s > 0); /* some stops came before the migration ... */
        CHECK(v2s > 0); /* ... and some after it committed */
    }
}

/* A host connection with a transaction of its own open is refused the
 * migration, with what to do, and nothing is written: its COMMIT keeps its own
 * rows and the file stays v1; the bootstrap outside the transaction migrates. */
static void migration_refused_in_host_transaction(void) {
    const char *ext = getenv("TOCSIN_TEST_EXT");
    char path[600], facts_v1[8192], out[1024];
    static const char *const opens[] = {"BEGIN", "BEGIN IMMEDIATE", "BEGIN; INSERT INTO app VALUES (1)",
                                        "SAVEPOINT s; INSERT INTO app VALUES (1)"};
    size_t k;
    sqlite3 *c = NULL;
    CHECK(ext != NULL);
    if (!ext) return;
    snprintf(path, sizeof path, "%s", t_path("migrate_in_tx"));
    CHECK(copy_file(GOLDEN_V1, path));
    facts_v1[0] = 0;
    if (sqlite3_open(path, &c) == SQLITE_OK) scalar(c, FACTS_SQL, facts_v1, sizeof facts_v1);
    sqlite3_close(c);
    for (k = 0; k < sizeof opens / sizeof opens[0]; k++) {
        t_path("migrate_in_tx");
        CHECK(copy_file(GOLDEN_V1, path));
        if (!(c = host_open(path, ext))) {
            CHECK(c != NULL);
            continue;
        }
        CHECK_EQ_I(sqlite3_exec(c, "CREATE TABLE app(x)", NULL, NULL, NULL), SQLITE_OK);
        CHECK_EQ_I(sqlite3_exec(c, opens[k], NULL, NULL, NULL), SQLITE_OK);
        scalar(c, "SELECT tocsin_enqueue('q', '1')", out, sizeof out);
        CHECK(strstr(out, "tocsin schema is v1 and must be migrated to v2: call tocsin_bootstrap() outside a "
                          "transaction") != NULL);
        scalar(c, "SELECT tocsin_bootstrap()", out, sizeof out);
        CHECK(strstr(out, "must be migrated") != NULL && strstr(out, "Nothing was written") != NULL);
        CHECK_EQ_I(sqlite3_get_autocommit(c), 0); /* the application's transaction goes on */
        CHECK_EQ_I(sqlite3_exec(c, "INSERT INTO app VALUES (2)", NULL, NULL, NULL), SQLITE_OK);
        CHECK_EQ_I(sqlite3_exec(c, k == 3 ? "RELEASE s" : "COMMIT", NULL, NULL, NULL), SQLITE_OK);
        scalar(c, "SELECT count(*) FROM app", out, sizeof out);
        CHECK_STR(out, k >= 2 ? "2" : "1");
        sqlite3_close(c);
        CHECK_EQ_I(whole_version(path, facts_v1, (long)k, 9), 1);
        if ((c = host_open(path, ext)) != NULL) {
            scalar(c, "SELECT tocsin_bootstrap()", out, sizeof out);
            CHECK_STR(out, "2");
            scalar(c, "SELECT tocsin_enqueue('q', '1') > 15", out, sizeof out); /* ids go on past v1's */
            CHECK_STR(out, "1");
            sqlite3_close(c);
        }
    }
    /* a statement reading the file runs the call: no migration under it either */
    t_path("migrate_in_tx");
    CHECK(copy_file(GOLDEN_V1, path));
    if ((c = host_open(path, ext)) != NULL) {
        sqlite3_exec(c, "CREATE TABLE src(x); INSERT INTO src VALUES (1), (2)", NULL, NULL, NULL);
        scalar(c, "SELECT tocsin_enqueue('q', x) FROM src", out, sizeof out);
        CHECK(strstr(out, "must be migrated") != NULL);
        sqlite3_close(c);
        CHECK_EQ_I(whole_version(path, facts_v1, 0, 9), 1);
    }
}

/* Every connection tocsin opens on a host's file (the install's, a transaction
 * handle's, a listener's, the wake engine's watcher) opens it as the host did:
 * on its VFS, with its URI parameters (here an unknown one a VFS could need),
 * less cache; a file name with URI-special characters reaches the same file. */
static void private_connections_as_the_hosts(void) {
    char path[600], uri[1400], *e;
    const char *p;
    sqlite3 *c = NULL;
    tocsin_db *db = NULL, *tx = NULL;
    tocsin_listener *l = NULL;
    tocsin_sub *sub = NULL;
    int64_t id = 0;
    snprintf(path, sizeof path, "%s", t_path("uri?x#y%20z"));
    e = uri + snprintf(uri, sizeof uri, "file:");
    for (p = path; *p; p++)
        e += strchr("?#%", *p) ? sprintf(e, "%%%02X", (unsigned char)*p) : sprintf(e, "%c", *p);
    snprintf(e, sizeof uri - (size_t)(e - uri), "?tag=a%%20b%%26c%%3Dd&cache=private");
    CHECK_EQ_I(sqlite3_open_v2(uri, &c, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI,
                               nosync_vfs.zName), SQLITE_OK);
    tagged_opens = untagged_opens = cache_opens = 0;
    CHECK_EQ_I(tocsin_wrap(&db, c, NULL), TOCSIN_OK);
    CHECK_EQ_I(tocsin_bootstrap(db, NULL), TOCSIN_OK);  /* on a private connection */
    CHECK_OK(db, tocsin_listen_open(&l, db, "ch", 16)); /* the listener's, the watcher's */
    CHECK_OK(db, tocsin_sub_open(&sub, db));
    CHECK_OK(db, tocsin_tx_begin(db, &tx));             /* a transaction handle's */
    CHECK_OK(tx, tocsin_queue_enqueue(tx, &id, "q", "{}", NULL));
    CHECK_OK(tx, tocsin_tx_commit(tx));
    CHECK(tagged_opens >= 4);
    CHECK_EQ_I(untagged_opens, 0);
    CHECK_EQ_I(cache_opens, 0);
    tocsin_sub_close(sub);
    tocsin_listen_close(l);
    CHECK_EQ_I(tocsin_close(db), TOCSIN_OK);
    sqlite3_close(c);
    /* the same file, reached by its plain name */
    CHECK_EQ_I(sqlite3_open(path, &c), SQLITE_OK);
    {
        char out[64];
        scalar(c, "SELECT count(*) FROM _tocsin_jobs", out, sizeof out);
        CHECK_STR(out, "1");
    }
    sqlite3_close(c);
}

void suite_migrate(void) {
    FILE *f = fopen(GOLDEN_V1, "rb");
    CHECK(f != NULL); /* run from the repository root (make test-c, ctest) */
    if (!f) return;
    fclose(f);
    nosync_register();
    private_connections_as_the_hosts();
    migration_refused_in_host_transaction();
    interrupted_migration();
}
