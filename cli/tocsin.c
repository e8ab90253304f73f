/* tocsin: the command-line tool. `tocsin --help` lists the subcommands. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static int g_json; /* --json */

static const char MAIN_HELP[] =
    "usage: tocsin COMMAND DB [ARGS] [--json] [--help]\n"
    "\n"
    "Inspect and operate the tocsin queues, streams and notifications of a SQLite file.\n"
    "\n"
    "commands:\n"
    "  init DB                         create the database (and tocsin's tables) if missing\n"
    "  stats DB [QUEUE]                depth per queue: pending, scheduled, in flight, dead,\n"
    "                                  oldest pending age, jobs enqueued/died in the last minute;\n"
    "                                  --sample 5s adds exact enqueue/completion/death rates\n"
    "  jobs DB [filters]               list jobs (--queue, --state, --older-than, --newer-than, --search)\n"
    "  job DB ID                       one job, live or dead\n"
    "  enqueue DB QUEUE PAYLOAD        enqueue a job (PAYLOAD is JSON; - reads stdin)\n"
    "  cancel DB ID                    cancel a live job (it goes dead, reason cancelled)\n"
    "  dead list|requeue|purge DB      dead letters (purge and requeue --all ask first: --yes)\n"
    "  pause DB QUEUE / resume DB QUEUE\n"
    "  notify DB CHANNEL PAYLOAD       send a notification\n"
    "  listen DB CHANNEL               print notifications as JSON lines, live\n"
    "  tail DB TOPIC                   print a stream's events (replay, then follow)\n"
    "  schedules DB                    cron schedules with their next fire\n"
    "  prune DB                        delete expired results, rate-limit hits, old notifications...\n"
    "                                  (--dead-older-than, --streams-older-than ask first: --yes)\n"
    "  metrics DB                      Prometheus text format\n"
    "  ui DB                           serve the live dashboard (tocsin ui --help)\n"
    "\n"
    "Bulk deletes and rewrites ask for confirmation when stdin is a terminal; when it is not,\n"
    "they refuse (exit 2, nothing changed) unless --yes is given.\n"
    "\n"
    "Every command takes --help. --json prints JSON for scripts. Durations: 500ms, 30s, 5m,\n"
    "2h, 7d, 1h30m (a bare number is milliseconds).\n"
    "\n"
    "TOCSIN_BUSY_TIMEOUT (a duration, default 5s) bounds the wait for the write lock.\n"
    "\n"
    "exit codes: 0 ok, 1 error (database or system; a question answered no), 2 usage or invalid\n"
    "            input (nothing written), 3 not found (job, schedule, dead letter or database),\n"
    "            4 busy (locked past the timeout)\n";

/* ---- small helpers ----------------------------------------------------- */

static int usage_err(const char *fmt, const char *arg) {
    fprintf(stderr, "tocsin: ");
    fprintf(stderr, fmt, arg);
    fputs(" (see --help)\n", stderr);
    return EXIT_USAGE;
}

static void clean_nl(char *s, int keep_nl);
static int report(int code) {
    if (code) {
        clean_nl(g_err, 0); /* a message may quote data (a key, an error text) */
        fprintf(stderr, "tocsin: %s\n", g_err);
    }
    return code;
}

/* A decimal integer exactly: an optional '-', then digits (no spaces, no '+', no hex). */
static int parse_int(const char *s, int64_t *out) {
    if (!s || !*s) return -1;
    const char *d = s + (*s == '-');
    if (*d < '0' || *d > '9') return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

/* "1h30m", "500ms", "7d", or a bare number of milliseconds. Units go from the
 * largest down, each at most once ("1h30" and "30s5" are refused, not read as
 * 1h + 30ms). */
static int parse_duration(const char *s, int64_t *out) {
    if (!s || !*s) return -1;
    int64_t total = 0;
    const char *p = s;
    int last = 5; /* the rank of the previous unit: d 4, h 3, m 2, s 1, ms 0 */
    while (*p) {
        if (*p < '0' || *p > '9') return -1;
        int64_t v = 0;
        while (*p >= '0' && *p <= '9') {
            if (v > TOCSIN_MAX_TIME_MS / 10) return -1;
            v = v * 10 + (*p++ - '0');
        }
        int64_t unit;
        int rank;
        if (!strncmp(p, "ms", 2)) { unit = 1; rank = 0; p += 2; }
        else if (*p == 's') { unit = 1000; rank = 1; p++; }
        else if (*p == 'm') { unit = 60000; rank = 2; p++; }
        else if (*p == 'h') { unit = 3600000; rank = 3; p++; }
        else if (*p == 'd') { unit = 86400000; rank = 4; p++; }
        else if (!*p && last == 5) { unit = 1; rank = 0; } /* the whole text is a number */
        else return -1;
        if (rank >= last) return -1;
        last = rank;
        if (v > TOCSIN_MAX_TIME_MS / unit) return -1;
        total += v * unit;
        if (total > TOCSIN_MAX_TIME_MS) return -1;
    }
    *out = total;
    return 0;
}

static void fmt_age(char *buf, size_t n, int64_t ms) {
    if (ms < 0) ms = 0;
    if (ms < 1000) snprintf(buf, n, "%lldms", (long long)ms);
    else if (ms < 60000) snprintf(buf, n, "%.1fs", ms / 1000.0);
    else if (ms < 3600000) snprintf(buf, n, "%lldm%02llds", (long long)(ms / 60000), (long long)(ms / 1000 % 60));
    else if (ms < 86400000) snprintf(buf, n, "%lldh%02lldm", (long long)(ms / 3600000), (long long)(ms / 60000 % 60));
    else snprintf(buf, n, "%lldd%02lldh", (long long)(ms / 86400000), (long long)(ms / 3600000 % 24));
}

static void fmt_time(char *buf, size_t n, int64_t ms) {
    if (ms <= 0) { snprintf(buf, n, "-"); return; }
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Reads a whole stream (the payload "-"). NULL (message printed) when it holds
 * a NUL byte: the C API takes a C string, so the rest would be cut off unseen. */
static char *read_all(FILE *f) {
    sb b = {0};
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) sb_add(&b, buf, n);
    if (!b.p) sb_add(&b, "", 0);
    if (strlen(b.p) != b.n) {
        fprintf(stderr, "tocsin: the payload read from stdin contains a NUL byte (at %zu)\n", strlen(b.p));
        sb_free(&b);
        return NULL;
    }
    /* a trailing newline from echo or a heredoc is not part of the JSON text */
    while (b.n && (b.p[b.n - 1] == '\n' || b.p[b.n - 1] == '\r')) b.p[--b.n] = 0;
    return b.p;
}

/* ---- options ----------------------------------------------------------- */
typedef struct opt {
    const char *name; /* without the leading -- */
    int has_val;
    const char *val;
    int set;
} opt;

/* Parses argv (after the command words): --name value, --name=value, flags,
 * positionals in order; after a lone "--" every argument is a positional (a
 * queue or channel named "--x"). --json is common to every command. */
static int parse_args(int argc, char **argv, opt *opts, const char **pos, int maxpos, int *npos) {
    int rest = 0;
    *npos = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!rest && !strcmp(a, "--")) {
            rest = 1;
            continue;
        }
        if (!rest && a[0] == '-' && a[1] == '-' && a[2]) {
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            if (len == 4 && !strncmp(name, "json", 4) && !eq) {
                if (g_json) return usage_err("option %s is given twice", a);
                g_json = 1;
                continue;
            }
            opt *o = NULL;
            for (opt *p = opts; p && p->name; p++)
                if (strlen(p->name) == len && !strncmp(p->name, name, len)) o = p;
            if (!o) return usage_err("unknown option %s", a);
            /* the last of two values silently winning is a typo's result, never meant */
            if (o->set) return usage_err("option --%s is given twice", o->name);
            o->set = 1;
            if (o->has_val) {
                if (eq) o->val = eq + 1;
                else if (i + 1 < argc) o->val = argv[++i];
                else return usage_err("option %s needs a value", a);
            } else if (eq) {
                return usage_err("option %s takes no value", a);
            }
        } else {
            if (*npos >= maxpos) return usage_err("unexpected argument '%s'", a);
            pos[(*npos)++] = a;
        }
    }
    return 0;
}

static opt *get_opt(opt *opts, const char *name) {
    for (opt *p = opts; p->name; p++)
        if (!strcmp(p->name, name)) return p;
    return NULL;
}

static int opt_int(opt *opts, const char *name, int64_t *out, int64_t lo, int64_t hi) {
    opt *o = get_opt(opts, name);
    if (!o->set) return 0;
    if (parse_int(o->val, out) || *out < lo || *out > hi) {
        fprintf(stderr, "tocsin: --%s must be an integer between %lld and %lld, not '%s'\n", name,
                (long long)lo, (long long)hi, o->val);
        return EXIT_USAGE;
    }
    return 0;
}

static int opt_dur(opt *opts, const char *name, int64_t *out) {
    opt *o = get_opt(opts, name);
    if (!o->set) return 0;
    if (parse_duration(o->val, out)) {
        fprintf(stderr, "tocsin: --%s must be a duration such as 30s, 5m, 2h or 7d, not '%s'\n", name, o->val);
        return EXIT_USAGE;
    }
    return 0;
}

/* Names are checked before anything opens the database, on an in-memory
 * handle (tocsin_check_name needs one for its message). */
static int check_name(const char *what, const char *name) {
    static tocsin_db *checker;
    if (!checker && tocsin_open(&checker, ":memory:", NULL) != TOCSIN_OK) {
        fprintf(stderr, "tocsin: cannot check names: %s\n", tocsin_errmsg(NULL));
        return EXIT_ERR;
    }
    int rc = tocsin_check_name(checker, what, name);
    if (rc) {
        fprintf(stderr, "tocsin: %s\n", tocsin_errmsg(NULL));
        return EXIT_USAGE;
    }
    return 0;
}

static int check_id(const char *s, int64_t *out) {
    if (parse_int(s, out) || *out < 1) {
        fprintf(stderr, "tocsin: job id must be a positive integer, not '%s'\n", s);
        return EXIT_USAGE;
    }
    return 0;
}

/* TOCSIN_BUSY_TIMEOUT (a duration) bounds how long a command waits for the
 * write lock before it gives up with exit code 4; default 5s. */
int cli_busy_timeout(void) {
    const char *e = getenv("TOCSIN_BUSY_TIMEOUT");
    int64_t ms;
    if (!e || !*e) return 0;
    if (parse_duration(e, &ms) || ms < 1 || ms > 3600000) {
        snprintf(g_err, sizeof g_err, "TOCSIN_BUSY_TIMEOUT must be a duration between 1ms and 1h, such as 500ms"
                 " or 30s, not '%.100s'", e);
        return -1;
    }
    return (int)ms;
}

/* A read-only open of a file without (the current) tocsin schema: say what installs it. */
static void schema_hint(int rc, const char *path) {
    if (rc == TOCSIN_READONLY && strstr(g_err, "tocsin schema") && strlen(g_err) + strlen(path) + 40 < sizeof g_err)
        snprintf(g_err + strlen(g_err), sizeof g_err - strlen(g_err), " (tocsin init %s does)", path);
}

/* 0 when the SQLite file at path is readable and has no _tocsin_meta table (no
 * tocsin schema, not even an old one); 1 when it has one, or when it cannot be
 * read here (not a database, locked...: tocsin_open then says why). Read-only:
 * it writes nothing, not even a -wal or -shm file of a rollback database. */
static int has_tocsin_tables(const char *path) {
    sqlite3 *c = NULL;
    sqlite3_stmt *st = NULL;
    int found = 1;
    if (sqlite3_open_v2(path, &c, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_busy_timeout(c, 1000);
        if (sqlite3_prepare_v2(c, "SELECT EXISTS (SELECT 1 FROM main.sqlite_master WHERE type = 'table'"
                                  " AND name = '_tocsin_meta')", -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW)
            found = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(c);
    return found;
}

/* Opens a database: an existing one (create 0), write 0 for a read-only handle
 * (nothing can be written). A directory is refused by name before SQLite sees it. */
int cli_open(tocsin_db **db, const char *path, int write, int create) {
    struct stat st;
    size_t n = strlen(path);
    *db = NULL;
    if (n && path[n - 1] == '/') { /* SQLite would create "x.db" for "x.db/" */
        snprintf(g_err, sizeof g_err, "%s ends with '/': a database is a file, not a directory", path);
        return EXIT_USAGE;
    }
    if (stat(path, &st) != 0) {
        if (!create) {
            snprintf(g_err, sizeof g_err, "no such database: %s (tocsin init creates one)", path);
            return EXIT_NOTFOUND;
        }
    } else if (S_ISDIR(st.st_mode)) {
        snprintf(g_err, sizeof g_err, "%s is a directory, not a database file", path);
        return EXIT_USAGE;
    } else if (!S_ISREG(st.st_mode)) {
        /* a FIFO would block the open forever, a device is no database */
        snprintf(g_err, sizeof g_err, "%s is not a regular file (a %s), not a database file", path,
                 S_ISFIFO(st.st_mode) ? "FIFO" : S_ISCHR(st.st_mode) ? "character device" :
                 S_ISBLK(st.st_mode) ? "block device" : S_ISSOCK(st.st_mode) ? "socket" : "special file");
        return EXIT_USAGE;
    }
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    o.read_only = !write;
    if ((o.busy_timeout_ms = cli_busy_timeout()) < 0) return EXIT_USAGE;
    /* DB is a file's path: "file:x.db?mode=memory" and ":memory:" name files of those
     * names, as stat() above read them, never an SQLite URI or an in-memory database */
    char *local = NULL;
    if (!strncmp(path, "file:", 5) || !strcmp(path, ":memory:")) {
        local = malloc(strlen(path) + 3);
        if (!local) return EXIT_ERR;
        strcpy(local, "./");
        strcat(local, path);
    }
    /* A read-write open installs tocsin's tables (and turns on WAL) in any SQLite
     * file: only init may do that. A writing command on another application's
     * database, or an empty file, would otherwise alter it, even when it then
     * fails ("no live job 5"). */
    if (write && !create && !has_tocsin_tables(local ? local : path)) {
        free(local);
        snprintf(g_err, sizeof g_err, "cannot open %s: the database has no tocsin schema (tocsin init %s installs it)",
                 path, path);
        return EXIT_ERR;
    }
    int rc = tocsin_open(db, local ? local : path, &o);
    free(local);
    if (rc) {
        snprintf(g_err, sizeof g_err, "cannot open %s: %s", path, *db ? tocsin_errmsg(NULL) : tocsin_errstr(rc));
        schema_hint(rc, path);
        tocsin_close(*db);
        *db = NULL;
        return exit_code_of(rc);
    }
    if ((rc = cli_register_functions(*db))) {
        tocsin_close(*db);
        *db = NULL;
        return rc;
    }
    /* SQLite opens a file it may not write read-only without a word: every write
     * would then fail halfway with "attempt to write a readonly database". Refuse
     * up front, naming the file, so a writing command writes nothing at all. */
    if (write && sqlite3_db_readonly(tocsin_sqlite(*db), "main") == 1) {
        snprintf(g_err, sizeof g_err, "cannot open %s for writing: the file is read-only (no write permission)",
                 path);
        tocsin_close(*db);
        *db = NULL;
        return EXIT_ERR;
    }
    return 0;
}
static int open_db(tocsin_db **db, const char *path, int write) { return cli_open(db, path, write, 0); }

/* ---- tables ------------------------------------------------------------ */
/* Column kinds of a table printed from a JSON array. */
enum { K_STR, K_INT, K_AGE, K_TIME, K_BOOL, K_JSON, K_AGO };
typedef struct col {
    const char *head;
    const char *path; /* JSON path inside each element */
    int kind;
} col;

/* Terminal output never carries control characters from the data (escape
 * sequences): C0, DEL and the C1 controls U+0080..U+009F (UTF-8 C2 80..C2 9F,
 * which terminals such as xterm obey: U+009B is CSI) become '?', and so does a
 * byte that begins no UTF-8 character (a text written around tocsin: a lone
 * 0x9b is CSI to a terminal in 8-bit mode). keep_nl keeps newlines
 * (multi-line errors). In place. */
/* The bidirectional controls (U+200E-200F, U+202A-202E, U+2066-2069): valid text
 * that reorders what a terminal shows, so that one name can pass for another. */
static int bidi_control(const unsigned char *r) {
    if (r[0] != 0xe2) return 0;
    if (r[1] == 0x80) return r[2] == 0x8e || r[2] == 0x8f || (r[2] >= 0xaa && r[2] <= 0xae);
    return r[1] == 0x81 && r[2] >= 0xa6 && r[2] <= 0xa9;
}

static void clean_nl(char *s, int keep_nl) {
    unsigned char *r = (unsigned char *)s, *w = r;
    for (; *r; r++) {
        unsigned n = 0;
        if (*r == 0xc2 && r[1] >= 0x80 && r[1] <= 0x9f) { *w++ = '?'; r++; }
        else if (*r >= 0x80 && !(n = tocsin_utf8_len((const char *)r))) *w++ = '?';
        else if (n == 3 && bidi_control(r)) { *w++ = '?'; r += 2; }
        else if (*r >= 0x80) { memmove(w, r, n); w += n; r += n - 1; }
        else if ((*r < 0x20 && !(keep_nl && *r == '\n')) || *r == 0x7f) *w++ = '?';
        else *w++ = *r;
    }
    *w = 0;
}
static void clean(char *s) { clean_nl(s, 0); }

/* Writes JSON text as one line on stdout with the C1 controls escaped
 * (\u0080..\u009f: the same JSON; valid JSON has raw non-ASCII bytes only
 * inside strings). -1 when stdout cannot be written (a closed pipe). */
static int put_json_line(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    for (; *p; p++) {
        if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) { printf("\\u%04x", p[1]); p++; }
        else putchar(*p);
    }
    putchar('\n');
    return fflush(stdout) || ferror(stdout) ? -1 : 0;
}
/* The columns a cell takes on a terminal: its characters, not its bytes (a name
 * in another script would push the columns after it out of line). */
static size_t columns(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

static int print_table(tocsin_db *db, const char *json, const char *each_path, const col *cols, int ncols) {
    sb sql = {0};
    sb_puts(&sql, "SELECT ");
    for (int i = 0; i < ncols; i++) {
        sb_printf(&sql, "%sjson_extract(value, '%s')", i ? ", " : "", cols[i].path);
    }
    sb_printf(&sql, " FROM json_each(?1%s%s%s)", each_path ? ", '" : "", each_path ? each_path : "",
              each_path ? "'" : "");
    sqlite3_stmt *st;
    sqlite3 *c = tocsin_sqlite(db);
    if (sqlite3_prepare_v2(c, sql.p, -1, &st, NULL) != SQLITE_OK) {
        sb_free(&sql);
        return report(fail_sqlite(db, "table"));
    }
    sb_free(&sql);
    sqlite3_bind_text(st, 1, json, -1, SQLITE_TRANSIENT);
    int64_t now = tocsin_now(db);
    size_t rows = 0, cap = 0;
    char **cells = NULL;
    size_t width[32] = {0};
    for (int i = 0; i < ncols; i++) width[i] = strlen(cols[i].head);
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (rows + 1 > cap) {
            cap = cap ? cap * 2 : 16;
            cells = realloc(cells, cap * (size_t)ncols * sizeof *cells);
            if (!cells) exit(EXIT_ERR);
        }
        for (int i = 0; i < ncols; i++) {
            char buf[64];
            const char *t = (const char *)sqlite3_column_text(st, i);
            int64_t v = sqlite3_column_int64(st, i);
            const char *out = buf;
            int isnull = sqlite3_column_type(st, i) == SQLITE_NULL;
            switch (cols[i].kind) {
            case K_INT: snprintf(buf, sizeof buf, "%lld", (long long)v); break;
            case K_AGE: fmt_age(buf, sizeof buf, v); break;
            case K_AGO:
                if (isnull || v <= 0) snprintf(buf, sizeof buf, "-");
                else fmt_age(buf, sizeof buf, now - v);
                break;
            case K_TIME: fmt_time(buf, sizeof buf, isnull ? 0 : v); break;
            case K_BOOL: snprintf(buf, sizeof buf, "%s", v ? "yes" : "no"); break;
            default: out = isnull ? "-" : t ? t : ""; break;
            }
            char *cell = strdup(out);
            if (cols[i].kind == K_JSON && strlen(cell) > 60) {
                size_t cut = 57;
                while (cut && ((unsigned char)cell[cut] & 0xc0) == 0x80) cut--; /* not inside a character */
                strcpy(cell + cut, "...");
            }
            clean(cell);
            if (columns(cell) > width[i]) width[i] = columns(cell);
            cells[rows * (size_t)ncols + (size_t)i] = cell;
        }
        rows++;
    }
    sqlite3_finalize(st);
    for (int i = 0; i < ncols; i++) {
        if (i + 1 == ncols) printf("%s\n", cols[i].head);
        else printf(cols[i].kind == K_INT ? "%*s  " : "%-*s  ", (int)width[i], cols[i].head);
    }
    for (size_t r = 0; r < rows; r++) {
        for (int i = 0; i < ncols; i++) {
            char *cell = cells[r * (size_t)ncols + (size_t)i];
            int right = cols[i].kind == K_INT, pad = (int)(width[i] - columns(cell));
            if (i + 1 == ncols && !right) printf("%s\n", cell);
            else if (right) printf("%*s%s%s", pad, "", cell, i + 1 < ncols ? "  " : "\n");
            else printf("%s%*s%s", cell, pad, "", i + 1 < ncols ? "  " : "\n");
            free(cell);
        }
    }
    free(cells);
    return 0;
}

/* A progress bar on a terminal (stdout), for long operations. */
static int g_progress = -1;
static void progress(const char *label, int64_t done, int64_t total) {
    if (g_progress < 0) g_progress = !g_json && isatty(STDOUT_FILENO);
    if (!g_progress) return;
    int w = 30, fill = total > 0 ? (int)(done * w / total) : w;
    if (fill > w) fill = w;
    printf("\r%-14s [", label);
    for (int i = 0; i < w; i++) putchar(i < fill ? '#' : '.');
    printf("] %lld/%lld", (long long)done, (long long)total);
    if (done >= total) putchar('\n');
    fflush(stdout);
}

/* ---- commands ---------------------------------------------------------- */
typedef int (*cmd_fn)(int argc, char **argv);
typedef struct command {
    const char *name;
    cmd_fn fn;
    const char *help;
} command;

/* --help or -h as an option of its own: not after "--" (everything there is
 * an argument), nor as the value of the option before it (--unique-key -h).
 * The options that take no value are --json, --all, --no-follow and --yes. */
static int want_help(int argc, char **argv, const char *help) {
    for (int i = 0; i < argc; i++) {
        const char *prev = i ? argv[i - 1] : "";
        if (!strcmp(argv[i], "--")) break;
        if (strcmp(argv[i], "--help") && strcmp(argv[i], "-h")) continue;
        if (!strncmp(prev, "--", 2) && prev[2] && !strchr(prev, '=') && strcmp(prev, "--json") &&
            strcmp(prev, "--all") && strcmp(prev, "--no-follow") && strcmp(prev, "--yes") &&
            strcmp(prev, "--help"))
            continue; /* the value of the option before it */
        fputs(help, stdout);
        return 1;
    }
    return 0;
}

/* ---- confirmation of bulk deletes and rewrites ------------------------- */
/* dead purge, dead requeue --all and prune with --dead-older-than or
 * --streams-older-than delete or rewrite rows by the thousand with one command.
 * Without --yes they ask on a terminal, and refuse (exit 2, before the database is
 * opened) when stdin is not one: a script must say --yes, so that a command copied
 * into one from a shell history does not delete unseen. */

/* 0 when the command may go on to ask (or needs not: --yes); else exit 2, said why. */
static int need_yes(int yes, const char *cmd, const char *does) {
    if (yes || isatty(STDIN_FILENO)) return 0;
    fprintf(stderr, "tocsin: %s %s and stdin is not a terminal to ask for confirmation on: add --yes to go "
                    "ahead (nothing was changed)\n", cmd, does);
    return EXIT_USAGE;
}

/* 1,234,567 */
static void fmt_count(char *buf, size_t n, int64_t v) {
    char d[32];
    int len = snprintf(d, sizeof d, "%lld", (long long)(v < 0 ? 0 : v)), o = 0;
    for (int i = 0; i < len && (size_t)o + 2 < n; i++) {
        if (i && (len - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = d[i];
    }
    buf[o] = 0;
}

/* 'queue "emails"' or 'every queue', for a question; control characters and
 * bidirectional controls of a name shown as '?', as in every table. */
static void queue_words(char *buf, size_t n, const char *queue) {
    if (!queue) { snprintf(buf, n, "every queue"); return; }
    char q[300];
    snprintf(q, sizeof q, "%s", queue);
    clean_nl(q, 0);
    snprintf(buf, n, "queue \"%s\"", q);
}

/* Asks `question? [y/N] ` on stderr and reads a line of stdin: 1 for y or yes (any
 * case), else 0 (an empty line, end of input, anything else), with the error set. */
static int ask(const char *question) {
    char line[64];
    fprintf(stderr, "%s? [y/N] ", question);
    fflush(stderr);
    if (!fgets(line, sizeof line, stdin)) {
        fputc('\n', stderr);
        line[0] = 0;
    }
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ')) line[--n] = 0;
    if (!strcasecmp(line, "y") || !strcasecmp(line, "yes")) return 1;
    snprintf(g_err, sizeof g_err, "not confirmed: nothing was changed");
    return 0;
}

#define NEED_POS(n, what)                                                            \
    do {                                                                             \
        if (npos < (n)) {                                                            \
            fprintf(stderr, "tocsin: missing %s (see --help)\n", what);              \
            return EXIT_USAGE;                                                       \
        }                                                                            \
    } while (0)

static const char H_INIT[] = "usage: tocsin init DB\n\nCreates DB (a SQLite file) if missing and installs tocsin's tables.\n";
static int cmd_init(int argc, char **argv) {
    const char *pos[1];
    int npos, rc;
    if ((rc = parse_args(argc, argv, NULL, pos, 1, &npos))) return rc;
    NEED_POS(1, "DB");
    tocsin_db *db;
    if ((rc = cli_open(&db, pos[0], 1, 1))) return report(rc);
    if (g_json) {
        sb b = {0};
        sb_puts(&b, "{\"path\":");
        sb_json_str(&b, pos[0]);
        sb_printf(&b, ",\"schema_version\":%d}", TOCSIN_SCHEMA_VERSION);
        put_json_line(b.p);
        sb_free(&b);
    }
    else printf("%s: tocsin schema v%d\n", pos[0], TOCSIN_SCHEMA_VERSION);
    tocsin_close(db);
    return 0;
}

static const char H_STATS[] =
    "usage: tocsin stats DB [QUEUE] [--sample DUR] [--json]\n\n"
    "Per queue: pending (due now), scheduled (later), in flight, dead, the age of the oldest\n"
    "due job, paused, and the jobs enqueued and died in the last minute (acked jobs leave no\n"
    "row, so enqueued/1m counts those of the last minute still live or dead).\n"
    "--sample DUR reads twice, DUR apart, and adds the exact rates of that window over all\n"
    "queues: jobs enqueued, completed (acked) and died per second (JSON: \"rates\").\n";

/* Totals of a stats document: enqueued_total, live jobs, dead jobs. */
static int stats_totals(tocsin_db *db, const char *json, int64_t *total, int64_t *live, int64_t *dead, int64_t *now) {
    char *t = NULL;
    int rc = sql_text(db, &t,
        "SELECT json_array(?1->>'enqueued_total', ?1->>'now',"
        " (SELECT coalesce(sum((value->>'pending') + (value->>'scheduled') + (value->>'processing')), 0)"
        "  FROM json_each(?1, '$.queues')),"
        " (SELECT coalesce(sum(value->>'dead'), 0) FROM json_each(?1, '$.queues')))", "t", json);
    if (rc) return rc;
    long long a = 0, b = 0, c = 0, d = 0;
    if (!t || sscanf(t, "[%lld,%lld,%lld,%lld]", &a, &b, &c, &d) != 4) {
        free(t);
        snprintf(g_err, sizeof g_err, "stats: unexpected document");
        return EXIT_ERR;
    }
    free(t);
    *total = a; *now = b; *live = c; *dead = d;
    return 0;
}

static int cmd_stats(int argc, char **argv) {
    opt opts[] = {{"sample", 1, 0, 0}, {0, 0, 0, 0}};
    const char *pos[2];
    int npos, rc;
    int64_t sample = 0;
    if ((rc = parse_args(argc, argv, opts, pos, 2, &npos))) return rc;
    NEED_POS(1, "DB");
    if (npos > 1 && (rc = check_name("queue", pos[1]))) return rc;
    if ((rc = opt_dur(opts, "sample", &sample))) return rc;
    if (opts[0].set && (sample < 100 || sample > 3600000)) {
        fprintf(stderr, "tocsin: --sample must be between 100ms and 1h, not '%s'\n", opts[0].val);
        return EXIT_USAGE;
    }
    tocsin_db *db;
    if ((rc = open_db(&db, pos[0], 0))) return report(rc);
    sb out = {0};
    double enq = 0, done = 0, died = 0, secs = 0;
    if (sample > 0) {
        /* the rates are global: the enqueue counter (the job id sequence) is one for all queues */
        sb first = {0};
        int64_t t1, l1, d1, n1, t2, l2, d2, n2;
        rc = collect_stats(db, &first, NULL);
        if (!rc) rc = stats_totals(db, first.p, &t1, &l1, &d1, &n1);
        sb_free(&first);
        if (!rc) {
            struct timespec ts = {(time_t)(sample / 1000), (long)(sample % 1000) * 1000000L};
            nanosleep(&ts, NULL);
            sb second = {0};
            rc = collect_stats(db, &second, NULL);
            if (!rc) rc = stats_totals(db, second.p, &t2, &l2, &d2, &n2);
            sb_free(&second);
        }
        if (!rc) {
            secs = (n2 - n1) / 1000.0;
            if (secs <= 0) secs = sample / 1000.0;
            int64_t e = t2 - t1, c = e - (l2 - l1) - (d2 - d1);
            enq = e / secs;
            done = (c > 0 ? c : 0) / secs;
            died = (d2 > d1 ? d2 - d1 : 0) / secs;
        }
    }
    if (!rc) rc = collect_stats(db, &out, npos > 1 ? pos[1] : NULL);
    if (!rc && sample > 0) {
        /* the rates go in as one more member of the document */
        out.p[--out.n] = 0; /* drop the closing brace */
        sb_printf(&out, ",\"rates\":{\"window_ms\":%lld,\"enqueued_per_s\":%.3f,\"completed_per_s\":%.3f,"
                        "\"died_per_s\":%.3f}}", (long long)(secs * 1000), enq, done, died);
    }
    if (!rc) {
        if (g_json) put_json_line(out.p);
        else {
            static const col cols[] = {{"QUEUE", "$.queue", K_STR}, {"PENDING", "$.pending", K_INT},
                {"SCHEDULED", "$.scheduled", K_INT}, {"IN-FLIGHT", "$.processing", K_INT},
                {"DEAD", "$.dead", K_INT}, {"OLDEST", "$.oldest_pending_age_ms", K_AGE},
                {"PAUSED", "$.paused", K_BOOL}, {"ENQ/1M", "$.enqueued_1m", K_INT},
                {"DIED/1M", "$.died_1m", K_INT}};
            rc = print_table(db, out.p, "$.queues", cols, 9);
            if (!rc && sample > 0)
                printf("last %.1fs, all queues: %.1f enqueued/s, %.1f completed/s, %.1f died/s\n", secs, enq, done, died);
        }
    }
    sb_free(&out);
    tocsin_close(db);
    return report(rc);
}

static const char H_JOBS[] =
    "usage: tocsin jobs DB [--queue Q] [--state S] [--older-than DUR] [--newer-than DUR]\n"
    "                      [--search TEXT] [--limit N] [--json]\n\n"
    "Lists jobs, newest first (default limit 100). --state is scheduled, pending, processing\n"
    "or dead; --older-than / --newer-than filter on the enqueue time; --search matches a\n"
    "substring of the payload, meta, unique key or last error, or an id.\n";
static int cmd_jobs(int argc, char **argv) {
    opt opts[] = {{"queue", 1, 0, 0}, {"state", 1, 0, 0}, {"older-than", 1, 0, 0}, {"newer-than", 1, 0, 0},
                  {"search", 1, 0, 0}, {"limit", 1, 0, 0}, {0, 0, 0, 0}};
    const char *pos[1];
    int npos, rc;
    if ((rc = parse_args(argc, argv, opts, pos, 1, &npos))) return rc;
    NEED_POS(1, "DB");
    job_filter f = {0};
    f.limit = 100;
    if (opts[0].set && (rc = check_name("queue", opts[0].val))) return rc;
    f.queue = opts[0].set ? opts[0].val : NULL;
    if (opts[1].set) {
        const char *s = opts[1].val;
        if (strcmp(s, "scheduled") && strcmp(s, "pending") && strcmp(s, "processing") && strcmp(s, "dead"))
            return usage_err("--state must be scheduled, pending, processing or dead, not '%s'", s);
        f.state = s;
    }
    if ((rc = opt_dur(opts, "older-than", &f.older_than_ms)) || (rc = opt_dur(opts, "newer-than", &f.newer_than_ms)) ||
        (rc = opt_int(opts, "limit", &f.limit, 1, TOCSIN_MAX_BATCH)))
        return rc;
    /* 0 would be taken for the option left out, listing every job: refused */
    if (opts[3].set && f.newer_than_ms == 0) return usage_err("%s", "--newer-than must be more than 0");
    f.search = opts[4].set ? opts[4].val : NULL;
    tocsin_db *db;
    if ((rc = open_db(&db, pos[0], 0))) return report(rc);
    sb out = {0};
    rc = collect_jobs(db, &out, &f);
    if (!rc) {
        if (g_json) put_json_line(out.p);
        else {
            static const col cols[] = {{"ID", "$.id", K_INT}, {"QUEUE", "$.queue", K_STR},
                {"STATE", "$.state", K_STR}, {"ATTEMPTS", "$.attempts", K_INT}, {"AGE", "$.created_at", K_AGO},
                {"PAYLOAD", "$.payload", K_JSON}};
            rc = print_table(db, out.p, NULL, cols, 6);
        }
    }
    sb_free(&out);
    tocsin_close(db);
    return report(rc);
}

/* "label         value" with the value cleaned of control characters. */
static void field(const char *label, const char *value, int keep_nl) {
    if (!value) return;
    char *v = strdup(value);
    if (!v) exit(EXIT_ERR);
    clean_nl(v, keep_nl);
    printf("%-14s%s\n", label, v);
    free(v);
}

static void print_job_human(tocsin_db *db, const tocsin_job *j) {
    char t1[64];
    int64_t now = tocsin_now(db);
    printf("id            %lld\n", (long long)j->id);
    field("queue", j->queue, 0);
    field("state", j->state, 0);
    field("payload", j->payload, 0);
    field("meta", j->meta, 0);
    printf("priority      %lld\n", (long long)j->priority);
    printf("attempts      %d/%d\n", j->attempts, j->max_attempts);
    fmt_time(t1, sizeof t1, j->created_at);
    printf("created       %s\n", t1);
    fmt_time(t1, sizeof t1, j->run_at);
    printf("run at        %s\n", t1);
    if (j->lease_until) { fmt_time(t1, sizeof t1, j->lease_until); printf("lease until   %s\n", t1); }
    if (j->expires_at) { fmt_time(t1, sizeof t1, j->expires_at); printf("expires       %s\n", t1); }
    field("unique key", j->unique_key, 0);
    field("worker", j->worker, 0);
    field("last error", j->last_error, 1);
    if (j->reason) {
        char *r = strdup(j->reason);
        if (!r) exit(EXIT_ERR);
        clean(r);
        fmt_age(t1, sizeof t1, now - j->died_at);
        printf("dead          %s, %s ago\n", r, t1);
        free(r);
    }
}

static const char H_JOB[] = "usage: tocsin job DB ID [--json]\n\nShows one job, live or dead (exit 3 if no job has that id: never enqueued, or acked).\n";
static int cmd_job(int argc, char **argv) {
    const char *pos[2];
    int npos, rc;
    int64_t id;
    if ((rc = parse_args(argc, argv, NULL, pos, 2, &npos))) return rc;
    NEED_POS(2, "DB and ID");
    if ((rc = check_id(pos[1], &id))) return rc;
    tocsin_db *db;
    if ((rc = open_db(&db, pos[0], 0))) return report(rc);
    tocsin_job *j = NULL;
    rc = tocsin_job_get(db, &j, id);
    if (rc) rc = fail_tocsin(rc, "job");
    else if (!j) {
        snprintf(g_err, sizeof g_err, "no job %lld (never enqueued, or acked)", (long long)id);
        rc = EXIT_NOTFOUND;
    } else {
        if (g_json) {
            sb out = {0};
            job_json(&out, j);
            put_json_line(out.p);
            sb_free(&out);
        } else {
            print_job_human(db, j);
        }
    }
    tocsin_jobs_free(j, j ? 1 : 0);
    tocsin_close(db);
    return report(rc);
}

static const char H_ENQUEUE[] =
    "usage: tocsin enqueue DB QUEUE PAYLOAD [--priority N] [--delay DUR] [--run-at MS]\n"
    "                      [--max-attempts N] [--expires DUR] [--unique-key K] [--meta JSON] [--json]\n\n"
    "Enqueues a job and prints its id. PAYLOAD is JSON text ('-' reads it from stdin).\n"
    "With a unique key a live job of the queue already holds, prints that job's id.\n";
static int cmd_enqueue(int argc, char **argv) {
    opt opts[] = {{"priority", 1, 0, 0}, {"delay", 1, 0, 0}, {"run-at", 1, 0, 0}, {"max-attempts", 1, 0, 0},
                  {"expires", 1, 0, 0}, {"unique-key", 1, 0, 0}, {"meta", 1, 0, 0}, {0, 0, 0, 0}};
    const char *pos[3];
    int npos, rc;
    if ((rc = parse_args(argc, argv, opts, pos, 3, &npos))) return rc;
    NEED_POS(3, "DB, QUEUE and PAYLOAD");
    if ((rc = check_name("queue", pos[1]))) return rc;
    tocsin_enqueue_opts eo = TOCSIN_ENQUEUE_OPTS_INIT;
    int64_t ma = 0;
    if ((rc = opt_int(opts, "priority", &eo.priority, INT64_MIN, INT64_MAX)) ||
        (rc = opt_dur(opts, "delay", &eo.delay_ms)) ||
        (rc = opt_int(opts, "run-at", &eo.run_at_ms, 1, TOCSIN_MAX_TIME_MS)) ||
        (rc = opt_int(opts, "max-attempts", &ma, 1, TOCSIN_MAX_ATTEMPTS)) ||
        (rc = opt_dur(opts, "expires", &eo.expires_ms)))
        return rc;
    /* the core's words for it would be its fields' (delay_ms, run_at_ms) */
    if (opts[1].set && opts[2].set) return usage_err("%s", "--delay and --run-at exclude each other");
    /* the core reads 0 as "never expires": not what --expires 0 says */
    if (opts[4].set && eo.expires_ms == 0) return usage_err("%s", "--expires must be more than 0");
    eo.max_attempts = (int)ma;
    eo.unique_key = opts[5].set ? opts[5].val : NULL;
    eo.meta = opts[6].set ? opts[6].val : NULL;
    char *stdin_payload = NULL;
    const char *payload = pos[2];
    if (!strcmp(payload, "-") && !(payload = stdin_payload = read_all(stdin))) return EXIT_USAGE;
    tocsin_db *db;
    if ((rc = open_db(&db, pos[0], 1))) { free(stdin_payload); return report(rc); }
    int64_t id = 0;
    rc = tocsin_queue_enqueue(db, &id, pos[1], payload, &eo);
    if (rc) rc = fail_tocsin(rc, "enqueue");
    else if (g_json) printf("{\"id\":%lld}\n", (long long)id);
    else printf("%lld\n", (long long)id);
    free(stdin_payload);
    tocsin_close(db);
    return report(rc);
}

static const char H_CANCEL[] = "usage: tocsin cancel DB ID [--json]\n\nCancels a live job: it goes dead with reason 'cancelled' (exit 3 if no live job has that id).\n";
static int cmd_cancel(int argc, char **argv) {
    const char *pos[2];
    int npos, rc, ok = 0;
    int64_t id;
    if ((rc = parse_args(argc, argv, NULL, pos, 2, &npos))) return rc;
    NEED_POS(2, "DB and ID");
    if ((rc = check_id(pos[1], &id))) return rc;
    tocsin_db *db;
    if ((rc = open_db(&db, pos[0], 1))) return report(rc);
    rc = tocsin_job_cancel(db, &ok, id);
    if (rc) rc = fail_tocsin(rc, "cancel");
    else if (!ok) {
        snprintf(g_err, sizeof g_err, "no live job %lld", (long long)id);
        rc = EXIT_NOTFOUND;
    } else if (g_json) printf("{\"cancelled\":%lld}\n", (long long)id);
    else printf("cancelled %lld\n", (long long)id);
    tocsin_close(db);
    return report(rc);
}

static const char H_DEAD[] =
    "usage: tocsin dead list DB [--queue Q] [--after ID] [--limit N] [--json]\n"
    "       tocsin dead requeue DB ID... | --all [--queue Q] [--yes]\n"
    "       tocsin dead purge DB [--queue Q] [--older-than DUR] [--yes]\n\n"
    "Dead letters: list them (oldest first), move them back to pending (same id, a fresh\n"
    "budget of attempts), or delete them (all of them, or those that died more than DUR ago).\n"
    "A requeue is atomic (one job it cannot requeue leaves them all dead); a purge runs in\n"
    "batches, with a progress bar on a terminal; each batch is atomic.\n"
    "purge and requeue --all ask first ('Delete 1,234 dead jobs from queue \"emails\"? [y/N]')\n"
    "when stdin is a terminal; when it is not they refuse (exit 2, nothing changed) unless\n"
    "--yes is given: scripts must pass --yes.\n";

/* Purges the dead letters of `queue` that died before `before` (0: all) in
 * batches of about 1000 (each one tocsin_dead_purge), reporting progress. */
static int purge_dead(tocsin_db *db, const char *queue, int64_t before, int64_t *out_n) {
    char *t = NULL;
    int rc = sql_text(db, &t, "SELECT count(*) FROM _tocsin_dead WHERE (?1 IS NULL OR queue = ?1)"
                              " AND (?2 = 0 OR died_at < ?2)", "ti", queue, before);
    if (rc) return rc;
    int64_t total = t ? atoll(t) : 0, done = 0;
    free(t);
    *out_n = 0;
    progress("purging dead", 0, total);
    while (done < total) {
        /* the died_at of the ~1000th oldest row bounds the next batch */
        int64_t cut = before;
        rc = sql_text(db, &t, "SELECT died_at FROM _tocsin_dead WHERE (?1 IS NULL OR queue = ?1)"
                              " AND (?2 = 0 OR died_at < ?2) ORDER BY died_at LIMIT 1 OFFSET 1000",
                      "ti", queue, before);
        if (rc) return rc;
        if (t) cut = atoll(t) + 1 < before || before == 0 ? atoll(t) + 1 : before;
        free(t);
        int64_t n = 0;
        rc = tocsin_dead_purge(db, &n, queue, cut);
        if (rc) return fail_tocsin(rc, "dead purge");
        done += n;
        *out_n += n;
        progress("purging dead", done < total ? done : total, total);
        if (n == 0 || cut == before) break;
    }
    if (total == 0) progress("purging dead", 0, 0);
    return 0;
}

static int cmd_dead(int argc, char **argv) {
    if (argc < 1) return usage_err("%s", "dead needs list, requeue or purge");
    const char *sub = argv[0];
    /* which options each action takes: one meant for another action is refused,
     * never ignored (`dead purge --limit 10` would purge everything) */
    static const char *const takes[][2] = {{"list", " queue after limit "}, {"requeue", " queue all yes "},
                                           {"purge", " queue older-than yes "}};
    const char *allowed = NULL;
    for (size_t k = 0; k < sizeof takes / sizeof takes[0]; k++)
        if (!strcmp(sub, takes[k][0])) allowed = takes[k][1];
    if (!allowed) return usage_err("dead: unknown action '%s' (list, requeue or purge)", sub);
    opt opts[] = {{"queue", 1, 0, 0}, {"after", 1, 0, 0}, {"limit", 1, 0, 0}, {"all", 0, 0, 0},
                  {"older-than", 1, 0, 0}, {"yes", 0, 0, 0}, {0, 0, 0, 0}};
    static const char *pos[TOCSIN_MAX_BATCH + 2]; /* DB, the ids, one more to say there are too many */
    int npos, rc;
    if ((rc = parse_args(argc - 1, argv + 1, opts, pos, TOCSIN_MAX_BATCH + 2, &npos))) return rc;
    for (opt *o = opts; o->name; o++) {
        char word[32];
        snprintf(word, sizeof word, " %s ", o->name);
        if (o->set && !strstr(allowed, word)) {
            fprintf(stderr, "tocsin: option --%s does not apply to dead %s (see --help)\n", o->name, sub);
            return EXIT_USAGE;
        }
    }
    NEED_POS(1, "DB");
    const char *queue = opts[0].set ? opts[0].val : NULL;
    if (queue && (rc = check_name("queue", queue))) return rc;
    tocsin_db *db = NULL;
    if (!strcmp(sub, "list")) {
        int64_t after = 0, limit = 100;
        if (npos > 1) return usage_err("unexpected argument '%s'", pos[1]);
        if ((rc = opt_int(opts, "after", &after, 0, INT64_MAX)) ||
            (rc = opt_int(opts, "limit", &limit, 1, TOCSIN_MAX_BATCH)))
            return rc;
        if ((rc = open_db(&db, pos[0], 0))) return report(rc);
        sb out = {0};
        rc = collect_dead(db, &out, queue, after, limit);
        if (!rc) {
            if (g_json) put_json_line(out.p);
            else {
                static const col cols[] = {{"ID", "$.id", K_INT}, {"QUEUE", "$.queue", K_STR},
                    {"REASON", "$.reason", K_STR}, {"ATTEMPTS", "$.attempts", K_INT},
                    {"DIED", "$.died_at", K_AGO}, {"ERROR", "$.last_error", K_JSON}, {"PAYLOAD", "$.payload", K_JSON}};
                rc = print_table(db, out.p, NULL, cols, 7);
            }
        }
        sb_free(&out);
    } else if (!strcmp(sub, "requeue")) {
        int64_t ids[TOCSIN_MAX_BATCH];
        int nids = npos - 1;
        if (opts[3].set == (nids > 0))
            return usage_err("%s", "dead requeue takes job ids or --all");
        /* ids name their jobs, whatever their queue: --queue would be ignored, and
         * requeue a job of another queue than the one it names */
        if (nids > 0 && queue)
            return usage_err("%s", "dead requeue: --queue goes with --all, not with job ids");
        if (nids > TOCSIN_MAX_BATCH)
            return usage_err("%s", "dead requeue takes at most 10000 job ids at a time (or --all)");
        for (int i = 0; i < nids; i++) {
            if ((rc = check_id(pos[i + 1], &ids[i]))) return rc;
            for (int k = 0; k < i; k++)
                if (ids[k] == ids[i]) return usage_err("job id %s is given twice", pos[i + 1]);
        }
        int yes = get_opt(opts, "yes")->set;
        /* ids name each job: only --all rewrites in bulk */
        if (opts[3].set && (rc = need_yes(yes, "dead requeue --all", "moves every dead job (of the queue) back to pending")))
            return rc;
        if ((rc = open_db(&db, pos[0], 1))) return report(rc);
        int64_t died_by = 0; /* --all asked: requeue no job that died after the count */
        if (opts[3].set && !yes) {
            char *t = NULL;
            rc = sql_text(db, &t, "SELECT count(*) || ' ' || ifnull(max(died_at), 0) FROM _tocsin_dead"
                                  " WHERE ?1 IS NULL OR queue = ?1", "t", queue);
            long long total = 0, last = 0;
            if (t && sscanf(t, "%lld %lld", &total, &last) != 2) total = 0;
            free(t);
            /* what was counted, not what died while the question waited */
            if (total > 0) died_by = last;
            char q[400], num[40], question[600];
            queue_words(q, sizeof q, queue);
            fmt_count(num, sizeof num, total);
            snprintf(question, sizeof question, "Requeue %s dead job%s of %s", num, total == 1 ? "" : "s", q);
            if (!rc && total > 0 && !ask(question)) rc = EXIT_ERR;
            if (rc) { tocsin_close(db); return report(rc); }
        }
        sb done = {0};
        int64_t count = 0;
        /* one transaction: a job that cannot be requeued (no such dead job, a unique key
         * a live job holds) leaves every other one dead too, so nothing is half done */
        if ((rc = tocsin_begin(db))) rc = fail_tocsin(rc, "requeue");
        else if (opts[3].set) {
            /* every dead letter (of the queue), in batches by id */
            int64_t after = 0;
            for (;;) {
                tocsin_job *jobs = NULL;
                size_t n = 0;
                if ((rc = tocsin_dead_list(db, &jobs, &n, queue, after, 1000))) { rc = fail_tocsin(rc, "dead list"); break; }
                for (size_t i = 0; i < n && !rc; i++) {
                    int ok = 0;
                    after = jobs[i].id;
                    if (died_by && jobs[i].died_at > died_by) continue;
                    if ((rc = tocsin_dead_requeue(db, &ok, jobs[i].id))) rc = fail_tocsin(rc, "requeue");
                    else if (ok) sb_printf(&done, "%s%lld", count++ ? "," : "", (long long)jobs[i].id);
                }
                tocsin_jobs_free(jobs, n);
                if (rc || n < 1000) break;
            }
        } else {
            for (int i = 0; i < nids && !rc; i++) {
                int ok = 0;
                if ((rc = tocsin_dead_requeue(db, &ok, ids[i]))) rc = fail_tocsin(rc, "requeue");
                else if (!ok) {
                    snprintf(g_err, sizeof g_err, "no dead job %lld", (long long)ids[i]);
                    rc = EXIT_NOTFOUND;
                } else sb_printf(&done, "%s%lld", count++ ? "," : "", (long long)ids[i]);
            }
        }
        if (tocsin_in_transaction(db)) {
            int r = rc ? tocsin_rollback(db) : tocsin_commit(db);
            if (r && !rc) rc = fail_tocsin(r, "requeue");
            else if (rc && count && strlen(g_err) + 40 < sizeof g_err)
                strcat(g_err, " (rolled back: nothing was requeued)");
        }
        if (!rc) {
            if (g_json) printf("{\"requeued\":[%s]}\n", done.p ? done.p : "");
            else if (count) printf("requeued %lld job%s: %s\n", (long long)count, count == 1 ? "" : "s", done.p);
            else printf("requeued 0 jobs\n");
        }
        sb_free(&done);
    } else if (!strcmp(sub, "purge")) {
        int64_t older = 0, n = 0;
        if (npos > 1) return usage_err("unexpected argument '%s'", pos[1]);
        if ((rc = opt_dur(opts, "older-than", &older))) return rc;
        if (get_opt(opts, "older-than")->set && older <= 0) /* as prune refuses it: 0 would read as "all" */
            return usage_err("%s", "--older-than must be more than 0 (without it, dead purge deletes every dead "
                                   "letter of the queue, or of every queue)");
        int yes = get_opt(opts, "yes")->set;
        if ((rc = need_yes(yes, "dead purge", "deletes dead jobs in bulk"))) return rc;
        if ((rc = open_db(&db, pos[0], 1))) return report(rc);
        int64_t before = older > 0 ? tocsin_now(db) - older : 0;
        if (older > 0 && before <= 0) before = 1;
        if (!yes) {
            char *t = NULL;
            rc = sql_text(db, &t, "SELECT count(*) || ' ' || ifnull(max(died_at), 0) FROM _tocsin_dead"
                                  " WHERE (?1 IS NULL OR queue = ?1) AND (?2 = 0 OR died_at < ?2)", "ti", queue, before);
            long long total = 0, last = 0;
            if (t && sscanf(t, "%lld %lld", &total, &last) != 2) total = 0;
            free(t);
            char q[400], num[40], age[120] = "", question[700];
            queue_words(q, sizeof q, queue);
            fmt_count(num, sizeof num, total);
            if (older > 0) snprintf(age, sizeof age, " that died more than %s ago", get_opt(opts, "older-than")->val);
            snprintf(question, sizeof question, "Delete %s dead job%s%s from %s", num, total == 1 ? "" : "s", age, q);
            if (!rc && total > 0 && !ask(question)) rc = EXIT_ERR;
            if (rc) { tocsin_close(db); return report(rc); }
            /* what was counted, not what died while the question waited */
            if (total > 0 && before == 0) before = last + 1;
        }
        rc = purge_dead(db, queue, before, &n);
        if (!rc) {
            if (g_json) printf("{\"purged\":%lld}\n", (long long)n);
            else printf("purged %lld dead job%s\n", (long long)n, n == 1 ? "" : "s");
        }
    } else {
        return usage_err("dead: unknown action '%s' (list, requeue or purge)", sub);
    }
    tocsin_close(db);
    return report(rc);
}

static const char H_PAUSE[] = "usage: tocsin pause DB QUEUE [--json]\n\nPauses QUEUE: it hands out no jobs (enqueue still works, running leases go on).\n";
static const char H_RESUME[] = "usage: tocsin resume DB QUEUE [--json]\n\nResumes a paused QUEUE: its jobs are claimable again.\n";
static int pause_resume(int argc, char **argv, int pause) {
    const char *pos[2];
    int npos, rc;
    if ((rc = parse_args(argc, argv, NULL, pos, 2, &npos))) return rc;
    NEED_POS(2, "DB and QUEUE");
    if ((rc = check_name("queue", pos[1]))) return rc;
    tocsin_db *db;
    if ((rc = open_db(&db, pos[0], 1))) return report(rc);
    rc = pause ? tocsin_queue_pause(db, pos[1]) : tocsin_queue_resume(db, pos[1]);
    if (rc) rc = fail_tocsin(rc, pause ? "pause" : "resume");
    else if (g_json) { printf("{\"queue\":"); sb q = {0}; sb_json_str(&q, pos[1]); printf("%s,\"paused\":%s}\n", q.p, pause ? "true" : "false"); sb_free(&q); }
    else printf("%s %s\n", pause ? "paused" : "resumed", pos[1]);
    tocsin_close(db);
    return report(rc);
}
static int cmd_pause(int argc, char **argv) { return pause_resume(argc, argv, 1); }
static int cmd_resume(int argc, char **argv) { return pause_resume(argc, argv, 0); }

static const char H_NOTIFY[] = "usage: tocsin notify DB CHANNEL PAYLOAD [--meta JSON] [--json]\n\nSends a notification (PAYLOAD is JSON text, '-' reads stdin) and prints its id.\n";
static int cmd_notify(int argc, char **argv) {
    opt opts[] = {{"meta", 1, 0, 0}, {0, 0, 0, 0}};
    const char *pos[3];
    int npos, rc;
    if ((rc = parse_args(argc, argv, opts, pos, 3, &npos))) return rc;
    NEED_POS(3, "DB, CHANNEL and PAYLOAD");
    if ((rc = check_name("channel", pos[1]))) return rc;
    char *stdin_payload = NULL;
    const char *payload = pos[2];
    if (!strcmp(payload, "-") && !(payload = stdin_payload = read_all(stdin))) return EXIT_USAGE;
    tocsin_db *db;
    if ((rc = open_db(&db, pos[0], 1))) { free(stdin_payload); return report(rc); }
    int64_t id = 0;
    rc = tocsin_notify(db, &id, pos[1], payload, opts[0].set ? opts[0].val : NULL);
    if (rc) rc = fail_tocsin(rc, "notify");
    else if (g_json) printf("{\"id\":%lld}\n", (long long)id);
    else printf("%lld\n", (long long)id);
    free(stdin_payload);
    tocsin_close(db);
    return report(rc);
}

/* SIGINT/SIGTERM end listen and tail cleanly: the handler writes to a pipe
 * that the wait polls beside the subscription's descriptor. */
static int g_sigpipe[2] = {-1, -1};
static void on_signal(int sig) {
    (void)sig;
    ssize_t r = write(g_sigpipe[1], "x", 1);
    (void)r;
}
static void catch_signals(void) {
    if (pipe(g_sigpipe) != 0) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}
static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
/* Waits for fd to be readable: 1 readable, 0 timed out, -1 signalled or stdout
 * closed (the reader of a pipe went away, as after `| head`: nothing could be
 * printed any more). */
static int wait_fd(int fd, int64_t deadline) {
    int timeout = -1;
    if (deadline >= 0) {
        int64_t left = deadline - mono_ms();
        if (left <= 0) return 0;
        timeout = left > 1000000 ? 1000000 : (int)left;
    }
    struct pollfd p[3] = {{fd, POLLIN, 0}, {g_sigpipe[0], POLLIN, 0}, {STDOUT_FILENO, 0, 0}};
    struct stat st;
    int np = fstat(STDOUT_FILENO, &st) == 0 && S_ISFIFO(st.st_mode) ? 3 : 2;
    int r = poll(p, (nfds_t)np, timeout);
    if (r < 0) return errno == EINTR ? 1 : -1;
    if (p[1].revents) return -1;
    if (np == 3 && (p[2].revents & (POLLERR | POLLHUP))) return -1;
    return r > 0 ? 1 : 0;
}

/* One message as a JSON line. -1 when stdout cannot take it (a closed pipe:
 * `tocsin tail DB T | head` must end, SIGPIPE being ignored). */
static int print_message(const tocsin_message *m, const char *kind) {
    sb b = {0}, line = {0};
    message_json(&b, m);
    /* rename "name" to the kind (channel or topic) for readability */
    sb_printf(&line, "{\"%s\":", kind);
    sb_json_str(&line, m->name);
    char *rest = strstr(b.p, ",\"key\"");
    sb_printf(&line, ",\"id\":%lld", (long long)m->id);
    sb_puts(&line, rest ? rest : "}");
    int r = put_json_line(line.p);
    sb_free(&line);
    sb_free(&b);
    return r;
}

/* Set once a write met a closed pipe: the command ended quietly on it, and the final
 * flush (output_done) must not take stdout's error flag for a failure. */
static int g_output_gone;

/* After stdout failed: a closed pipe ends the command quietly (exit 0), any other error is one. */
static int output_failed(void) {
    if (errno == EPIPE) {
        g_output_gone = 1;
        return 0;
    }
    snprintf(g_err, sizeof g_err, "cannot write the output: %s", strerror(errno));
    return EXIT_ERR;
}

static const char H_LISTEN[] =
    "usage: tocsin listen DB CHANNEL [--count N] [--timeout DUR]\n\n"
    "Prints the notifications of CHANNEL sent from now on, one JSON object a line, as they\n"
    "commit (woken by the wake engine). Stops after --count notifications, after --timeout,\n"
    "or at SIGINT/SIGTERM (exit 0). A listener that falls more than 1000 behind loses the\n"
    "oldest (a line {\"dropped\":N} on stderr says so).\n";
static int cmd_listen(int argc, char **argv) {
    opt opts[] = {{"count", 1, 0, 0}, {"timeout", 1, 0, 0}, {0, 0, 0, 0}};
    const char *pos[2];
    int npos, rc;
    int64_t count = 0, timeout = -1;
    if ((rc = parse_args(argc, argv, opts, pos, 2, &npos))) return rc;
    NEED_POS(2, "DB and CHANNEL");
    if ((rc = check_name("channel", pos[1]))) return rc;
    if ((rc = opt_int(opts, "count", &count, 1, INT64_MAX)) || (rc = opt_dur(opts, "timeout", &timeout))) return rc;
    tocsin_db *db;
    if ((rc = open_db(&db, pos[0], 0))) return report(rc);
    tocsin_listener *l = NULL;
    rc = tocsin_listen_open(&l, db, pos[1], 1000);
    if (rc) { rc = fail_tocsin(rc, "listen"); tocsin_close(db); return report(rc); }
    catch_signals();
    /* stdout is line-buffered JSON; the READY line on stderr lets scripts know we listen */
    fprintf(stderr, "listening on %s\n", pos[1]);
    int64_t deadline = timeout >= 0 ? mono_ms() + timeout : -1, got = 0, dropped = 0;
    int closed = 0;
    while (!closed && (!count || got < count)) {
        tocsin_message *m = NULL;
        size_t n = 0;
        int r = tocsin_listen_next(l, &m, &n, 0);
        if (r == TOCSIN_OK) {
            for (size_t i = 0; i < n && (!count || got < count) && !closed; i++, got++)
                if (print_message(&m[i], "channel")) { closed = 1; rc = output_failed(); }
            tocsin_messages_free(m, n);
            if (closed) break;
            if (tocsin_listen_dropped(l) != dropped) {
                dropped = tocsin_listen_dropped(l);
                fprintf(stderr, "{\"dropped\":%lld}\n", (long long)dropped);
            }
            continue;
        }
        if (r != TOCSIN_TIMEOUT) { rc = fail_tocsin(r, "listen"); break; }
        int w = wait_fd(tocsin_listen_fd(l), deadline);
        if (w <= 0) break;
    }
    tocsin_listen_close(l);
    tocsin_close(db);
    return report(rc);
}

static const char H_TAIL[] =
    "usage: tocsin tail DB TOPIC [--from OFFSET] [--consumer NAME] [--no-follow] [--count N]\n"
    "                   [--timeout DUR]\n\n"
    "Prints a stream's events as JSON lines: first those after --from (default 0: the whole\n"
    "stream), or after the saved offset of --consumer (whose offset is then saved as it goes),\n"
    "then new ones as they commit, until --count, --timeout, SIGINT/SIGTERM or, with\n"
    "--no-follow, the end of the replay.\n";
static int cmd_tail(int argc, char **argv) {
    opt opts[] = {{"from", 1, 0, 0}, {"consumer", 1, 0, 0}, {"no-follow", 0, 0, 0}, {"count", 1, 0, 0},
                  {"timeout", 1, 0, 0}, {0, 0, 0, 0}};
    const char *pos[2];
    int npos, rc;
    int64_t from = 0, count = 0, timeout = -1;
    if ((rc = parse_args(argc, argv, opts, pos, 2, &npos))) return rc;
    NEED_POS(2, "DB and TOPIC");
    if ((rc = check_name("topic", pos[1]))) return rc;
    const char *consumer = opts[1].set ? opts[1].val : NULL;
    if (consumer && (rc = check_name("consumer", consumer))) return rc;
    if (consumer && opts[0].set) return usage_err("%s", "--from and --consumer exclude each other");
    if ((rc = opt_int(opts, "from", &from, 0, INT64_MAX)) || (rc = opt_int(opts, "count", &count, 1, INT64_MAX)) ||
        (rc = opt_dur(opts, "timeout", &timeout)))
        return rc;
    int follow = !opts[2].set;
    tocsin_db *db;
    if ((rc = open_db(&db, pos[0], consumer != NULL))) return report(rc);
    if (!follow && !consumer) {
        /* a replay that saves nothing is plain reads: no subscription, so no wake
         * engine (which a read-only file in a directory it cannot write lacks) */
        int64_t after = from, got = 0;
        catch_signals(); /* a closed output ends it as in the follow mode (exit 0) */
        for (;;) {
            tocsin_message *m = NULL;
            size_t n = 0, i;
            int r = tocsin_stream_read(db, &m, &n, pos[1], after, 1000);
            if (r) { rc = fail_tocsin(r, "tail"); break; }
            for (i = 0; i < n && (!count || got < count); i++, got++) {
                if (print_message(&m[i], "topic")) { rc = output_failed(); break; }
                after = m[i].id;
            }
            tocsin_messages_free(m, n);
            if (rc || n == 0 || i < n || (count && got >= count)) break;
        }
        tocsin_close(db);
        return report(rc);
    }
    tocsin_stream_sub *s = NULL;
    tocsin_stream_sub_opts so = TOCSIN_STREAM_SUB_OPTS_INIT;
    so.from_offset = consumer ? -1 : from;
    if (consumer) so.autosave_every = 1;
    rc = tocsin_stream_sub_open(&s, db, pos[1], consumer, &so);
    if (rc) { rc = fail_tocsin(rc, "tail"); tocsin_close(db); return report(rc); }
    catch_signals();
    int64_t deadline = timeout >= 0 ? mono_ms() + timeout : -1, got = 0;
    int closed = 0;
    while (!closed && (!count || got < count)) {
        tocsin_message *m = NULL;
        size_t n = 0, i;
        int64_t done = tocsin_stream_sub_position(s); /* the last event printed */
        int r = tocsin_stream_sub_next(s, &m, &n, 0);
        if (r == TOCSIN_OK) {
            for (i = 0; i < n && (!count || got < count); i++, got++) {
                if (print_message(&m[i], "topic")) { closed = 1; rc = output_failed(); break; }
                done = m[i].id;
            }
            /* stopped mid-batch (--count, or the output closed): the consumer's saved
             * offset must not pass the last event printed */
            if (i < n && consumer) {
                int rr = tocsin_stream_sub_rewind(s, done);
                if (rr && !rc) rc = fail_tocsin(rr, "rewind");
            }
            tocsin_messages_free(m, n);
            continue;
        }
        if (r != TOCSIN_TIMEOUT) { rc = fail_tocsin(r, "tail"); break; }
        if (!follow) break;
        if (wait_fd(tocsin_stream_sub_fd(s), deadline) <= 0) break;
    }
    if (consumer && !rc) {
        int r = tocsin_stream_sub_save(s);
        if (r) rc = fail_tocsin(r, "save offset");
    }
    tocsin_stream_sub_close(s);
    tocsin_close(db);
    return report(rc);
}

static const char H_SCHEDULES[] = "usage: tocsin schedules DB [--json]\n\nCron schedules: expression, queue, next and last fire (UTC), jobs fired, paused.\n";
static int cmd_schedules(int argc, char **argv) {
    const char *pos[1];
    int npos, rc;
    if ((rc = parse_args(argc, argv, NULL, pos, 1, &npos))) return rc;
    NEED_POS(1, "DB");
    tocsin_db *db;
    if ((rc = open_db(&db, pos[0], 0))) return report(rc);
    sb out = {0};
    rc = collect_schedules(db, &out);
    if (!rc) {
        if (g_json) put_json_line(out.p);
        else {
            static const col cols[] = {{"NAME", "$.name", K_STR}, {"CRON", "$.cron", K_STR},
                {"QUEUE", "$.queue", K_STR}, {"NEXT-FIRE", "$.next_fire", K_TIME}, {"LAST-FIRE", "$.last_fire", K_TIME},
                {"FIRED", "$.fired_count", K_INT}, {"PAUSED", "$.paused", K_BOOL}};
            rc = print_table(db, out.p, NULL, cols, 7);
        }
    }
    sb_free(&out);
    tocsin_close(db);
    return report(rc);
}

static const char H_PRUNE[] =
    "usage: tocsin prune DB [--notifications-older-than DUR] [--notifications-keep N]\n"
    "                    [--dead-older-than DUR] [--streams-older-than DUR] [--json]\n\n"
    "Housekeeping, step by step (a progress bar on a terminal): deletes expired results and\n"
    "rate-limit hits; notifications older than --notifications-older-than (default 1d, 0: no\n"
    "age limit) and, per channel, all but the newest --notifications-keep; with\n"
    "--dead-older-than, dead letters that died longer ago; with --streams-older-than, stream\n"
    "events older than that (every topic). Prints what each step deleted.\n"
    "With --dead-older-than or --streams-older-than it asks first when stdin is a terminal,\n"
    "and refuses (exit 2, nothing changed) when it is not unless --yes is given; the other\n"
    "steps delete only what has expired and run from cron without --yes.\n";
static int cmd_prune(int argc, char **argv) {
    opt opts[] = {{"notifications-older-than", 1, 0, 0}, {"notifications-keep", 1, 0, 0},
                  {"dead-older-than", 1, 0, 0}, {"streams-older-than", 1, 0, 0}, {"yes", 0, 0, 0}, {0, 0, 0, 0}};
    const char *pos[1];
    int npos, rc;
    int64_t nage = 86400000, nkeep = 0, dage = 0, sage = 0;
    if ((rc = parse_args(argc, argv, opts, pos, 1, &npos))) return rc;
    NEED_POS(1, "DB");
    if ((rc = opt_dur(opts, "notifications-older-than", &nage)) ||
        (rc = opt_int(opts, "notifications-keep", &nkeep, 0, INT64_MAX)) ||
        (rc = opt_dur(opts, "dead-older-than", &dage)) || (rc = opt_dur(opts, "streams-older-than", &sage)))
        return rc;
    /* 0 would be read as "the option is not given" below: refused rather than ignored */
    if (opts[2].set && dage == 0)
        return usage_err("%s", "--dead-older-than must be more than 0 (tocsin dead purge DB deletes every dead letter)");
    if (opts[3].set && sage == 0)
        return usage_err("%s", "--streams-older-than must be more than 0");
    /* "keep none" to a reader, "no count limit" to the core: refused rather than ignored */
    if (opts[1].set && nkeep == 0)
        return usage_err("%s", "--notifications-keep must be at least 1 (leave it out: no count limit)");
    int yes = opts[4].set, bulk = dage > 0 || sage > 0;
    if (bulk && (rc = need_yes(yes, "prune", dage > 0 && sage > 0 ? "with --dead-older-than and --streams-older-than "
                                                                   "deletes dead jobs and stream events in bulk"
                                             : dage > 0 ? "with --dead-older-than deletes dead jobs in bulk"
                                                        : "with --streams-older-than deletes stream events in bulk")))
        return rc;
    tocsin_db *db;
    if ((rc = open_db(&db, pos[0], 1))) return report(rc);
    /* the dead letters' bound, fixed before the question: what was counted is what goes */
    int64_t dbefore = dage > 0 ? tocsin_now(db) - dage : 0;
    if (dage > 0 && dbefore <= 0) dbefore = 1;
    if (bulk && !yes) {
        char question[600] = "Delete", num[40];
        int64_t ndead = 0;
        if (dage > 0) {
            char *t = NULL;
            if ((rc = sql_text(db, &t, "SELECT count(*) FROM _tocsin_dead WHERE died_at < ?1", "i", dbefore))) {
                tocsin_close(db);
                return report(rc);
            }
            ndead = t ? atoll(t) : 0;
            free(t);
            fmt_count(num, sizeof num, ndead);
            snprintf(question + strlen(question), sizeof question - strlen(question),
                     " %s dead job%s that died more than %s ago (every queue)", num, ndead == 1 ? "" : "s", opts[2].val);
        }
        /* counting stream events by age walks every event: the question names no number */
        if (sage > 0)
            snprintf(question + strlen(question), sizeof question - strlen(question),
                     "%s the stream events older than %s (every topic)", dage > 0 ? " and" : "", opts[3].val);
        if ((sage > 0 || ndead > 0) && !ask(question)) {
            tocsin_close(db);
            return report(EXIT_ERR);
        }
    }
    int64_t results = 0, hits = 0, notes = 0, dead = 0, events = 0;
    int steps = 3 + (dage > 0) + (sage > 0), step = 0;
    progress("pruning", step, steps);
    if ((rc = tocsin_result_sweep(db, &results))) { rc = fail_tocsin(rc, "result sweep"); goto out; }
    progress("pruning", ++step, steps);
    if ((rc = tocsin_ratelimit_sweep(db, &hits))) { rc = fail_tocsin(rc, "rate-limit sweep"); goto out; }
    progress("pruning", ++step, steps);
    if ((nage > 0 || nkeep > 0) && (rc = tocsin_notify_prune(db, &notes, nage, nkeep))) {
        rc = fail_tocsin(rc, "notification prune");
        goto out;
    }
    progress("pruning", ++step, steps);
    if (dage > 0) {
        if ((rc = purge_dead(db, NULL, dbefore, &dead))) goto out;
        progress("pruning", ++step, steps);
    }
    if (sage > 0) {
        char *topics = NULL;
        if ((rc = sql_text(db, &topics, "SELECT json_group_array(topic) FROM (SELECT DISTINCT topic FROM _tocsin_events)", ""))) goto out;
        sqlite3_stmt *st;
        sqlite3_prepare_v2(tocsin_sqlite(db), "SELECT value FROM json_each(?1)", -1, &st, NULL);
        sqlite3_bind_text(st, 1, topics ? topics : "[]", -1, SQLITE_TRANSIENT);
        while (!rc && sqlite3_step(st) == SQLITE_ROW) {
            tocsin_trim_opts to = TOCSIN_TRIM_OPTS_INIT;
            to.max_age_ms = sage;
            int64_t n = 0;
            if ((rc = tocsin_stream_trim(db, &n, (const char *)sqlite3_column_text(st, 0), &to)))
                rc = fail_tocsin(rc, "stream trim");
            events += n;
        }
        sqlite3_finalize(st);
        free(topics);
        if (rc) goto out;
        progress("pruning", ++step, steps);
    }
    if (g_json)
        printf("{\"results\":%lld,\"rate_limit_hits\":%lld,\"notifications\":%lld,\"dead\":%lld,\"events\":%lld}\n",
               (long long)results, (long long)hits, (long long)notes, (long long)dead, (long long)events);
    else
        printf("deleted: %lld expired results, %lld rate-limit hits, %lld notifications, %lld dead jobs, %lld stream events\n",
               (long long)results, (long long)hits, (long long)notes, (long long)dead, (long long)events);
out:
    tocsin_close(db);
    return report(rc);
}

static const char H_METRICS[] = "usage: tocsin metrics DB\n\nPrints queue depths, oldest pending ages, pauses, stream consumer lag and\nschedules' next fire in the Prometheus text format (tocsin ui serves it at /metrics).\n";
static int cmd_metrics(int argc, char **argv) {
    const char *pos[1];
    int npos, rc;
    if ((rc = parse_args(argc, argv, NULL, pos, 1, &npos))) return rc;
    NEED_POS(1, "DB");
    /* a --json that printed the text anyway would mislead a script */
    if (g_json)
        return usage_err("%s", "metrics prints the Prometheus text format only; stats --json has its figures as JSON");
    tocsin_db *db;
    if ((rc = open_db(&db, pos[0], 0))) return report(rc);
    sb out = {0};
    rc = collect_metrics(db, &out);
    /* label values are the names as they are (Prometheus reads UTF-8), C1 controls
     * included: not on a terminal, where U+009B is CSI */
    if (!rc && isatty(STDOUT_FILENO)) clean_nl(out.p, 1);
    if (!rc) fputs(out.p, stdout);
    sb_free(&out);
    tocsin_close(db);
    return report(rc);
}

extern const char UI_HELP[];

static const command COMMANDS[] = {
    {"init", cmd_init, H_INIT},           {"stats", cmd_stats, H_STATS},
    {"jobs", cmd_jobs, H_JOBS},           {"job", cmd_job, H_JOB},
    {"enqueue", cmd_enqueue, H_ENQUEUE},  {"cancel", cmd_cancel, H_CANCEL},
    {"dead", cmd_dead, H_DEAD},           {"pause", cmd_pause, H_PAUSE},
    {"resume", cmd_resume, H_RESUME},      {"notify", cmd_notify, H_NOTIFY},
    {"listen", cmd_listen, H_LISTEN},     {"tail", cmd_tail, H_TAIL},
    {"schedules", cmd_schedules, H_SCHEDULES}, {"prune", cmd_prune, H_PRUNE},
    {"metrics", cmd_metrics, H_METRICS},  {"ui", cmd_ui, UI_HELP},
    {NULL, NULL, NULL}};

/* A command's exit code, made 1 when what it printed could not be written (a full
 * disk, a closed pipe): a script must not take a cut-off listing for the whole. */
static int output_done(int rc) {
    if (g_output_gone) return rc; /* listen/tail: the reader went away (| head), exit as they said */
    if (fflush(stdout) == 0 && !ferror(stdout)) return rc;
    if (rc == EXIT_OK) fprintf(stderr, "tocsin: cannot write the output: %s\n", strerror(errno));
    return rc == EXIT_OK ? EXIT_ERR : rc;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "help")) { /* tocsin help CMD: that command's help */
        for (const command *c = COMMANDS; c->name; c++)
            if (!strcmp(c->name, argv[2])) {
                fputs(c->help, stdout);
                return output_done(EXIT_OK);
            }
        fprintf(stderr, "tocsin: help: unknown command '%s' (see tocsin --help)\n", argv[2]);
        return EXIT_USAGE;
    }
    if (argc > 3 && !strcmp(argv[1], "help")) {
        fprintf(stderr, "tocsin: help takes one command, not '%s' too (see tocsin --help)\n", argv[3]);
        return EXIT_USAGE;
    }
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(MAIN_HELP, argc < 2 ? stderr : stdout);
        return output_done(argc < 2 ? EXIT_USAGE : EXIT_OK);
    }
    if (!strcmp(argv[1], "--version")) {
        printf("tocsin %s (SQLite %s)\n", tocsin_version(), tocsin_sqlite_version());
        return output_done(EXIT_OK);
    }
    for (const command *c = COMMANDS; c->name; c++) {
        if (strcmp(c->name, argv[1])) continue;
        if (want_help(argc - 2, argv + 2, c->help)) return output_done(EXIT_OK);
        return output_done(c->fn(argc - 2, argv + 2));
    }
    fprintf(stderr, "tocsin: unknown command '%s' (see tocsin --help)\n", argv[1]);
    return EXIT_USAGE;
}
