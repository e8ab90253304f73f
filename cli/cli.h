/* The tocsin command-line tool and dashboard: what tocsin.c and ui.c share. */
#ifndef TOCSIN_CLI_H
#define TOCSIN_CLI_H

#include <stddef.h>
#include <stdint.h>
#include "tocsin.h"

/* Exit codes (documented in `tocsin --help` and docs/cli.md). */
#define EXIT_OK 0
#define EXIT_ERR 1      /* database or system failure */
#define EXIT_USAGE 2    /* bad arguments or input: nothing was written */
#define EXIT_NOTFOUND 3 /* no such job, queue, schedule or database */
#define EXIT_BUSY 4     /* the database stayed locked past the busy timeout */

/* A growing string buffer; out of memory aborts (a CLI has nothing better to do). */
typedef struct sb {
    char *p;
    size_t n, cap;
} sb;
void sb_add(sb *b, const char *s, size_t n);
void sb_puts(sb *b, const char *s);
void sb_printf(sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_json_str(sb *b, const char *s); /* a JSON string literal (UTF-8: U+FFFD for a byte that
                                         begins no character), or null for NULL */
void sb_json_raw(sb *b, const char *json); /* stored JSON as is, or a string of a text that is not */
void sb_add_utf8(sb *b, const char *s); /* s with U+FFFD for each byte that begins no character */
void sb_free(sb *b);

/* The last error of a collector, and the exit code it maps to. */
extern char g_err[512];
int fail_tocsin(int rc, const char *what);
int fail_sqlite(tocsin_db *db, const char *what);
int exit_code_of(int tocsin_rc);

/* Runs one SELECT returning one text value: `fmt` names the binds in order
 * (i: int64_t, I: int64_t with 0 as NULL, t: const char * or NULL, n: NULL). *out owned (free()), NULL for SQL NULL. */
int sql_text(tocsin_db *db, char **out, const char *sql, const char *fmt, ...);

/* Collectors: JSON documents the CLI prints and the dashboard serves.
 * 0 on success (out filled), else an exit code with g_err set. */
typedef struct job_filter {
    const char *queue;
    const char *state;    /* scheduled | pending | processing | dead | NULL */
    int64_t older_than_ms; /* > 0: created at least this long ago */
    int64_t newer_than_ms; /* > 0: created at most this long ago */
    const char *search;   /* substring of the payload, meta, unique key or error; or an id */
    int64_t limit;
} job_filter;
int collect_stats(tocsin_db *db, sb *out, const char *queue);
int collect_jobs(tocsin_db *db, sb *out, const job_filter *f);
int collect_dead(tocsin_db *db, sb *out, const char *queue, int64_t after, int64_t limit);
int collect_streams(tocsin_db *db, sb *out);
int collect_schedules(tocsin_db *db, sb *out);
int collect_notifications(tocsin_db *db, sb *out, const char *channel, int64_t per_channel);
int collect_metrics(tocsin_db *db, sb *out);
void job_json(sb *b, const tocsin_job *j);
void message_json(sb *b, const tocsin_message *m);

/* TOCSIN_BUSY_TIMEOUT in ms (0: unset, the default); -1 (message printed) when invalid. */
int cli_busy_timeout(void);
/* Opens the database at path (write 0: a read-only handle; create 0: it must exist);
 * a directory is refused by name. 0, or an exit code with the message in g_err. */
int cli_open(tocsin_db **db, const char *path, int write, int create);
/* Registers json_value_text(X) (sb_json_raw) on the handle's connection for the collectors. */
int cli_register_functions(tocsin_db *db);

/* tocsin ui (ui.c) */
int cmd_ui(int argc, char **argv);

#endif
