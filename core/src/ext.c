/*
 * The SQL surface (docs/sql.md) and the loadable extension's entry point.
 * Each SQL function checks its arguments, calls the C API and turns the
 * result into SQL values (JSON text for rows). Functions are registered
 * SQLITE_DIRECTONLY: a hostile schema cannot call them from a trigger or view.
 *
 * Every argument goes through one of the readers below (arg_text, arg_i64
 * and their optional forms, parse_opts for options objects): they are the
 * one place where SQL values become C values, so the rules of docs/sql.md
 * ("Arguments") hold for every function alike -- types, the NUL rule, UTF-8,
 * integers that fit, and the SQL-level ranges. Limits come from tocsin.h;
 * the core checks every value again and has the last word.
 */
#include "internal.h"

#include <stddef.h>
#include <stdio.h>

#ifdef TOCSIN_EXTENSION
SQLITE_EXTENSION_INIT1
#endif

/* ---- errors ---------------------------------------------------------------- */

typedef struct fn_ctx {
    sqlite3_context *ctx;
    tocsin_db *db;
    const char *name;  /* the SQL function's name: every message starts with it */
    const char *where; /* NULL, or what is being read ("job 3"), after the name */
    int undo;          /* inside unit_begin: a failure rolls the call back */
    int nomem;         /* out of memory: reported by dispatch, after the call (fail_nomem) */
} fn_ctx;

/* How many bytes of s to quote in a message: at most max, never splitting a
 * UTF-8 sequence (the message must stay valid UTF-8). */
static int quote_len(const char *s, size_t max) {
    size_t n = strlen(s);
    if (n <= max) return (int)n;
    while (max > 0 && ((unsigned char)s[max] & 0xc0) == 0x80) max--;
    return (int)max;
}

/* Reports an error of the SQL layer; returns 0 so callers can `return fail_msg(...)`. */
static int fail_msg(fn_ctx *f, int sqlite_code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int fail_msg(fn_ctx *f, int sqlite_code, const char *fmt, ...) {
    char msg[768];
    int n;
    va_list ap;
    n = snprintf(msg, sizeof msg, f->where ? "%s: %s: " : "%s: ", f->name, f->where);
    if (n < 0 || (size_t)n >= sizeof msg) n = 0;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    msg[quote_len(msg, sizeof msg - 2)] = 0; /* a cut message stays UTF-8 */
    sqlite3_result_error(f->ctx, msg, -1);
    sqlite3_result_error_code(f->ctx, sqlite_code);
    return 0;
}

/* Out of memory. sqlite3_result_error_nomem marks the whole connection as
 * failed while the caller's statement runs (SQLite's mallocFailed, and its
 * interrupt flag): every statement after it fails, the ROLLBACK of a unit
 * included, which would leave the call's BEGIN IMMEDIATE open on the host's
 * connection. So it is only noted here; dispatch reports it once the call's
 * transaction or savepoint has ended. */
static int fail_nomem(fn_ctx *f) {
    f->nomem = 1;
    return 0;
}

/* Reports the handle's last failure (a code of the C API); returns 0. */
static int fail(fn_ctx *f, int rc) {
    int code = SQLITE_ERROR;
    switch (rc) {
    case TOCSIN_BUSY: code = SQLITE_BUSY; break;
    case TOCSIN_TOOBIG: code = SQLITE_TOOBIG; break;
    case TOCSIN_NOMEM: return fail_nomem(f);
    case TOCSIN_CORRUPT:
        /* Damage tocsin found in its tables' content (a stored policy, cron
         * expression or schema version it cannot read) is SQLITE_CORRUPT_VTAB:
         * a function failing with the bare SQLITE_CORRUPT makes SQLite refuse
         * every later write of the caller's transaction, its COMMIT included
         * ("database disk image is malformed"), though the file is sound. A
         * corruption SQLite met itself keeps its code (its statement already
         * flagged the transaction). */
        code = tc_tls()->sqlite_rc ? SQLITE_CORRUPT : SQLITE_CORRUPT_VTAB;
        break;
    case TOCSIN_READONLY:
        if (tc_query_only(f->db->conn))
            return fail_msg(f, SQLITE_READONLY,
                            "%s (PRAGMA query_only is on for this connection: it refuses every "
                            "write)",
                            tocsin_errmsg(f->db));
        code = SQLITE_READONLY;
        break;
    case TOCSIN_FULL: code = SQLITE_FULL; break;
    case TOCSIN_IOERR: code = SQLITE_IOERR; break;
    case TOCSIN_INTERRUPTED: code = SQLITE_INTERRUPT; break;
    case TOCSIN_PERM: code = SQLITE_PERM; break;
    case TOCSIN_CANTOPEN: code = SQLITE_CANTOPEN; break;
    default: break;
    }
    return fail_msg(f, code, "%s", tocsin_errmsg(f->db));
}

/* ---- argument readers -------------------------------------------------------- */

#define I64_MIN INT64_MIN
#define I64_MAX INT64_MAX
#define MS_MAX TOCSIN_MAX_TIME_MS

/* "between lo and hi" / ">= lo" for a range error. */
static int fail_range(fn_ctx *f, const char *prefix, const char *what, int64_t lo, int64_t hi) {
    if (lo == I64_MIN && hi == I64_MAX)
        return fail_msg(f, SQLITE_RANGE, "%s%s must be a 64-bit signed integer", prefix, what);
    if (hi == I64_MAX)
        return fail_msg(f, SQLITE_RANGE, "%s%s must be >= %lld", prefix, what, (long long)lo);
    if (lo == I64_MIN)
        return fail_msg(f, SQLITE_RANGE, "%s%s must be <= %lld", prefix, what, (long long)hi);
    return fail_msg(f, SQLITE_RANGE, "%s%s must be between %lld and %lld", prefix, what,
                    (long long)lo, (long long)hi);
}

/*
 * A text the core will use as a C string, of n bytes: no NUL byte (the C
 * string would silently stop there, so 'q' || char(0) || 'x' would become
 * 'q') and valid UTF-8. `prefix` + `what` name it in the message.
 */
static int check_text(fn_ctx *f, const char *prefix, const char *what, const char *s, size_t n) {
    if (strlen(s) != n)
        return fail_msg(f, SQLITE_ERROR, "%s%s must not contain NUL characters (char(0))", prefix,
                        what);
    if (tc_check_text(f->db, what, s, (size_t)-1) != TOCSIN_OK)
        return fail_msg(f, SQLITE_ERROR, "%s%s is not valid UTF-8", prefix, what);
    return 1;
}

/* A required text argument (a number is used as its text). */
static int arg_text(fn_ctx *f, sqlite3_value **argv, int i, const char *what, const char **out) {
    int t = sqlite3_value_type(argv[i]);
    const char *s;
    if (t == SQLITE_NULL) return fail_msg(f, SQLITE_MISMATCH, "%s must not be NULL", what);
    if (t == SQLITE_BLOB) return fail_msg(f, SQLITE_MISMATCH, "%s must be text, not a blob", what);
    if (!(s = (const char *)sqlite3_value_text(argv[i]))) return fail_nomem(f);
    if (!check_text(f, "", what, s, (size_t)sqlite3_value_bytes(argv[i]))) return 0;
    *out = s;
    return 1;
}

/* An optional text argument: absent or NULL gives NULL. */
static int arg_text_opt(fn_ctx *f, int argc, sqlite3_value **argv, int i, const char *what,
                        const char **out) {
    *out = NULL;
    if (i >= argc || sqlite3_value_type(argv[i]) == SQLITE_NULL) return 1;
    return arg_text(f, argv, i, what, out);
}

/*
 * A required integer argument within lo..hi. An integral real is accepted
 * when it is an int64; anything else (text, blob, NULL, 1.5, inf) is a type
 * error. The range is checked before any conversion, so 1e300 is a range
 * error, never undefined behaviour.
 */
static int arg_i64(fn_ctx *f, sqlite3_value **argv, int i, const char *what, int64_t lo,
                   int64_t hi, int64_t *out) {
    int t = sqlite3_value_type(argv[i]);
    int64_t v;
    if (t == SQLITE_INTEGER) {
        v = sqlite3_value_int64(argv[i]);
    } else if (t == SQLITE_FLOAT) {
        double d = sqlite3_value_double(argv[i]);
        /* NaN and the infinities are not integers (1e300 is: out of range) */
        if (d != d || d - d != 0.0) return fail_msg(f, SQLITE_MISMATCH, "%s must be an integer", what);
        /* -2^63 is a double exactly; 2^63 is the first one past INT64_MAX */
        if (d < -9223372036854775808.0 || d >= 9223372036854775808.0)
            return fail_range(f, "", what, lo, hi);
        v = (int64_t)d;
        if ((double)v != d) return fail_msg(f, SQLITE_MISMATCH, "%s must be an integer", what);
    } else {
        return fail_msg(f, SQLITE_MISMATCH, "%s must be an integer", what);
    }
    if (v < lo || v > hi) return fail_range(f, "", what, lo, hi);
    *out = v;
    return 1;
}

/* An optional integer argument: absent or NULL gives dflt. */
static int arg_i64_opt(fn_ctx *f, int argc, sqlite3_value **argv, int i, const char *what,
                       int64_t lo, int64_t hi, int64_t dflt, int64_t *out) {
    *out = dflt;
    if (i >= argc || sqlite3_value_type(argv[i]) == SQLITE_NULL) return 1;
    return arg_i64(f, argv, i, what, lo, hi, out);
}

/* A count of rows: 1..TOCSIN_MAX_BATCH. */
static int arg_count(fn_ctx *f, sqlite3_value **argv, int i, const char *what, size_t *out) {
    int64_t v;
    if (!arg_i64(f, argv, i, what, 1, TOCSIN_MAX_BATCH, &v)) return 0;
    *out = (size_t)v;
    return 1;
}

/* The bytes UTF-8 text s[0..n) takes in UTF-16: two per code unit, four for a
 * character beyond U+FFFF (a 4-byte sequence). */
static size_t utf16_bytes(const char *s, size_t n) {
    size_t units = 0, i;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c & 0xc0) != 0x80) units += c >= 0xf0 ? 2 : 1;
    }
    return units * 2;
}

/* 1 when the main database's text encoding is UTF-16 (PRAGMA encoding). */
static int db_utf16(sqlite3 *conn) {
    sqlite3_stmt *st = NULL;
    int utf16 = 0;
    if (sqlite3_prepare_v2(conn, "PRAGMA main.encoding", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        utf16 = sqlite3_strnicmp((const char *)sqlite3_column_text(st, 0), "UTF-16", 6) == 0;
    sqlite3_finalize(st);
    return utf16;
}

/*
 * Sets a JSON result (owned: freed here). A text longer than the connection's
 * SQLITE_LIMIT_LENGTH is an error naming the function and the limit (SQLite's
 * own would be a bare "string or blob too big"); 0 (reported) then. The length
 * is the one SQLite checks: in a UTF-16 database it converts the result as it
 * is set, and a result that passed in UTF-8 may not in UTF-16 (twice the bytes
 * for ASCII) -- SQLite would then replace it with its own error after the unit
 * committed, a claim's leases taken for jobs nobody saw.
 */
static int result_json(fn_ctx *f, char *json) {
    size_t n, size;
    int limit, utf16 = 0;
    if (!json) return fail_nomem(f);
    size = n = strlen(json);
    limit = sqlite3_limit(f->db->conn, SQLITE_LIMIT_LENGTH, -1);
    if (limit >= 0 && n <= (size_t)limit && n > (size_t)limit / 2 && utf16_bytes(json, n) > (size_t)limit &&
        (utf16 = db_utf16(f->db->conn)) != 0)
        size = utf16_bytes(json, n);
    if (limit >= 0 && size > (size_t)limit) {
        sqlite3_free(json);
        return fail_msg(f, SQLITE_TOOBIG,
                        "the result is %zu bytes%s, over this connection's length limit "
                        "(SQLITE_LIMIT_LENGTH, %d bytes)%s",
                        size, utf16 ? " in the database's UTF-16 encoding" : "", limit,
                        f->undo ? ": nothing was written (ask for fewer at a time)" : "");
    }
    sqlite3_result_text(f->ctx, json, (int)n, sqlite3_free);
    sqlite3_result_subtype(f->ctx, 'J'); /* JSON subtype, as json() gives */
    return 1;
}

/*
 * A unit of work whose result is built after the C call that writes it
 * (tocsin_claim's jobs, tocsin_enqueue_many's ids): the call runs inside it
 * (a transaction of its own in autocommit, else a savepoint of the caller's),
 * and it commits only once the result is set. A result that cannot be
 * returned (over the length limit, out of memory) rolls the call back, so no
 * job is leased -- an attempt spent -- or enqueued that the caller never saw.
 */
static int unit_begin(fn_ctx *f, tc_op *op) {
    int rc;
    tc_clear(f->db);
    if ((rc = tc_op_begin(f->db, op, 1)) != TOCSIN_OK) return fail(f, rc);
    f->undo = 1;
    return 1;
}

/* ok: the result is set (commit; a failed commit replaces it with its
 * error), else an error was reported (roll back). Returns ok's outcome. */
static int unit_end(fn_ctx *f, tc_op *op, int ok) {
    int rc = tc_op_end(f->db, op, ok ? TOCSIN_OK : TOCSIN_ERROR);
    f->undo = 0;
    if (ok && rc != TOCSIN_OK) return fail(f, rc);
    return ok;
}

/* ---- JSON scanning --------------------------------------------------------------
 * Options objects and job arrays are read here, in C, with json.c's strict
 * (RFC 8259) walkers: no SQL statement (so no lock, whatever the host does),
 * the same on every SQLite version, exact integers (no detour through a
 * double) and the raw text of nested values.
 */

/*
 * The number token [p, end) as an int64, exactly: 0 on success, 1 when it is
 * not an integer (1.5, 1e-1), 2 when it is one beyond int64. Integral forms
 * such as 2.0, 1e3 and -0 are integers.
 */
static int js_int(const char *p, const char *end, int64_t *out) {
    const char *ip, *ie, *fp = NULL, *fe = NULL;
    size_t ni, nf, lo, hi, k;
    long long exp = 0, e;
    int neg = 0, eneg = 0;
    uint64_t u = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    for (ip = p; p < end && *p >= '0' && *p <= '9'; p++) {
    }
    ie = p;
    if (p < end && *p == '.') {
        for (fp = ++p; p < end && *p >= '0' && *p <= '9'; p++) {
        }
        fe = p;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) eneg = *p++ == '-';
        for (; p < end && *p >= '0' && *p <= '9'; p++)
            if (exp < 1000000000LL) exp = exp * 10 + (*p - '0');
        if (eneg) exp = -exp;
    }
    ni = (size_t)(ie - ip);
    nf = fp ? (size_t)(fe - fp) : 0;
    /* the digits D = int part + fraction part, value D * 10^e */
#define DIGIT(k) ((k) < ni ? ip[k] : fp[(k) - ni])
    lo = 0;
    hi = ni + nf;
    while (lo < hi && DIGIT(lo) == '0') lo++;
    if (lo == hi) {
        *out = 0;
        return 0;
    }
    e = exp - (long long)nf;
    while (DIGIT(hi - 1) == '0') {
        hi--;
        e++;
    }
    if (e < 0) return 1;
    if ((long long)(hi - lo) + e > 19) return 2;
    for (k = lo; k < hi; k++) u = u * 10 + (uint64_t)(DIGIT(k) - '0');
#undef DIGIT
    for (; e > 0; e--) u *= 10; /* at most 19 digits: below 2^64 */
    if (neg ? u > (uint64_t)INT64_MAX + 1 : u > (uint64_t)INT64_MAX) return 2;
    *out = neg ? (u == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)u) : (int64_t)u;
    return 0;
}

/* ---- options objects --------------------------------------------------------- */

enum { OPT_INT = 1, OPT_BOOL, OPT_TEXT, OPT_OBJECT, OPT_JSON };

/* One option's value. */
typedef struct opt_val {
    int set;   /* given (a JSON null counts as not given, except for OPT_JSON) */
    int64_t i; /* OPT_INT, OPT_BOOL */
    char *t;   /* OPT_TEXT: decoded; OPT_OBJECT, OPT_JSON: JSON text. Owned (sqlite3_free) */
} opt_val;

/* An option a function takes: its key, kind, place in the function's options
 * struct (a struct of opt_val, one per key) and, for integers, its range. */
typedef struct opt_spec {
    const char *key;
    int kind;
    size_t offset;
    int64_t lo, hi;
} opt_spec;

#define OPT_AT(out, s) ((opt_val *)((char *)(out) + (s)->offset))

static void free_opts(const opt_spec *specs, void *out) {
    for (; specs->key; specs++) {
        sqlite3_free(OPT_AT(out, specs)->t);
        OPT_AT(out, specs)->t = NULL;
    }
}

/* Reads one option value [p, e) of spec s into v; 0 (error reported) if ill-typed. */
static int opt_read(fn_ctx *f, const opt_spec *s, const char *p, const char *e, opt_val *v) {
    int rc;
    switch (s->kind) {
    case OPT_INT:
        if (*p != '-' && (*p < '0' || *p > '9'))
            return fail_msg(f, SQLITE_MISMATCH, "option \"%s\" must be an integer", s->key);
        rc = js_int(p, e, &v->i);
        if (rc == 1) return fail_msg(f, SQLITE_MISMATCH, "option \"%s\" must be an integer", s->key);
        if (rc == 2 || v->i < s->lo || v->i > s->hi) {
            char prefix[80];
            snprintf(prefix, sizeof prefix, "option \"%s\"", s->key);
            return fail_range(f, prefix, "", s->lo, s->hi);
        }
        return 1;
    case OPT_BOOL:
        if (*p != 't' && *p != 'f')
            return fail_msg(f, SQLITE_MISMATCH, "option \"%s\" must be true or false", s->key);
        v->i = *p == 't';
        return 1;
    case OPT_TEXT:
        if (*p != '"')
            return fail_msg(f, SQLITE_MISMATCH, "option \"%s\" must be a string", s->key);
        rc = tc_json_decode(p, e, &v->t);
        if (rc == 3) return fail_nomem(f);
        if (rc == 1)
            return fail_msg(f, SQLITE_ERROR,
                            "option \"%s\" must not contain NUL characters (\\u0000)", s->key);
        if (rc == 2) return fail_msg(f, SQLITE_ERROR, "option \"%s\" is not valid UTF-8", s->key);
        return 1;
    case OPT_OBJECT:
        if (*p != '{')
            return fail_msg(f, SQLITE_MISMATCH, "option \"%s\" must be a JSON object", s->key);
        /* fall through */
    default:
        if (!(v->t = tc_json_compact(p, (size_t)(e - p)))) return fail_nomem(f);
        return 1;
    }
}

/* One parse_opts walk: where the values go, and the keys seen so far. */
typedef struct opts_walk {
    fn_ctx *f;
    const char *what;
    const opt_spec *specs;
    void *out;
    unsigned seen;
} opts_walk;

/* One member of an options object: 0 to go on, 1 after reporting an error. */
static int opts_member(void *ctx, const char *k, size_t kn, const char *v, size_t vn) {
    opts_walk *w = ctx;
    fn_ctx *f = w->f;
    const opt_spec *s;
    char *key;
    int rc, idx;
    if ((rc = tc_json_decode(k, k + kn, &key)) == 3) return !fail_nomem(f);
    if (rc != 0)
        return !fail_msg(f, SQLITE_ERROR, "%s: a key must not contain %s", w->what,
                         rc == 1 ? "NUL characters (\\u0000)" : "lone surrogates");
    for (s = w->specs, idx = 0; s->key && strcmp(s->key, key) != 0; s++, idx++) {
    }
    if (!s->key) {
        fail_msg(f, SQLITE_ERROR, "unknown option \"%.*s\"", quote_len(key, 200), key);
        sqlite3_free(key);
        return 1;
    }
    sqlite3_free(key);
    if (w->seen & (1u << idx)) return !fail_msg(f, SQLITE_ERROR, "option \"%s\" is given twice", s->key);
    w->seen |= 1u << idx;
    if (*v == 'n' && s->kind != OPT_JSON) return 0; /* null: the default */
    if (!opt_read(f, s, v, v + vn, OPT_AT(w->out, s))) return 1;
    OPT_AT(w->out, s)->set = 1;
    return 0;
}

/* A wrapper (options, jobs) refused for the nesting of a value inside it,
 * which the value itself would get as an argument (SQLITE_ERROR). */
static int fail_too_deep(fn_ctx *f, const char *what) {
    return fail_msg(f, SQLITE_ERROR,
                    "%s: a value in it nests arrays and objects more than 1000 deep (tocsin's limit)",
                    what);
}

/*
 * Reads the options object json[0..n) into `out` (zeroed by the caller; free
 * it with free_opts, also after a failure) by key name against `specs`
 * (terminated by a NULL key). `what` names the object ("options"). NULL json:
 * nothing set. Anything but a JSON object is refused; so are unknown keys,
 * keys given twice, ill-typed values and out-of-range integers, with errors
 * naming the key.
 */
static int parse_opts(fn_ctx *f, const char *what, const char *json, size_t n,
                      const opt_spec *specs, void *out) {
    opts_walk w;
    char top = 0;
    int valid;
    if (!json) return 1;
    if ((valid = tc_json_wrapper_valid(json, n, &top, 1)) < 0) return fail_too_deep(f, what);
    if (!valid) {
        char why[TC_JSON_WHY_CAP];
        return fail_msg(f, SQLITE_MISMATCH, "%s must be a JSON object (not valid JSON%s)", what,
                        tc_json_why(json, n, why, sizeof why));
    }
    if (top != '{') return fail_msg(f, SQLITE_MISMATCH, "%s must be a JSON object", what);
    w.f = f;
    w.what = what;
    w.specs = specs;
    w.out = out;
    w.seen = 0;
    return tc_json_members(json, n, opts_member, &w) == 1;
}

#define OPT_SPEC(type, field, kind, lo, hi) {#field, kind, offsetof(type, field), lo, hi}
#define OPT_END {NULL, 0, 0, 0, 0}

/* tocsin_enqueue's options; tocsin_enqueue_many's job objects add queue and payload. */
typedef struct enqueue_opts_sql {
    opt_val queue, payload;
    opt_val priority, delay_ms, run_at_ms, max_attempts, expires_ms, unique_key, meta;
} enqueue_opts_sql;
#define ENQUEUE_OPT_SPECS                                                                 \
    OPT_SPEC(enqueue_opts_sql, priority, OPT_INT, I64_MIN, I64_MAX),                      \
        OPT_SPEC(enqueue_opts_sql, delay_ms, OPT_INT, 0, MS_MAX),                         \
        OPT_SPEC(enqueue_opts_sql, run_at_ms, OPT_INT, 0, MS_MAX),                        \
        OPT_SPEC(enqueue_opts_sql, max_attempts, OPT_INT, 1, TOCSIN_MAX_ATTEMPTS),        \
        OPT_SPEC(enqueue_opts_sql, expires_ms, OPT_INT, 0, MS_MAX),                       \
        OPT_SPEC(enqueue_opts_sql, unique_key, OPT_TEXT, 0, 0),                           \
        OPT_SPEC(enqueue_opts_sql, meta, OPT_OBJECT, 0, 0)
static const opt_spec ENQUEUE_SPECS[] = {ENQUEUE_OPT_SPECS, OPT_END};
static const opt_spec JOB_SPECS[] = {OPT_SPEC(enqueue_opts_sql, queue, OPT_TEXT, 0, 0),
                                     OPT_SPEC(enqueue_opts_sql, payload, OPT_JSON, 0, 0),
                                     ENQUEUE_OPT_SPECS, OPT_END};

static void enqueue_opts_of(const enqueue_opts_sql *o, tocsin_enqueue_opts *eo) {
    if (o->priority.set) eo->priority = o->priority.i;
    if (o->delay_ms.set) eo->delay_ms = o->delay_ms.i;
    if (o->run_at_ms.set) eo->run_at_ms = o->run_at_ms.i;
    if (o->max_attempts.set) eo->max_attempts = (int)o->max_attempts.i;
    if (o->expires_ms.set) eo->expires_ms = o->expires_ms.i;
    if (o->unique_key.set) eo->unique_key = o->unique_key.t;
    if (o->meta.set) eo->meta = o->meta.t;
}

/* tocsin_schedule_set's options; tocsin_schedule_update's changes add cron, queue, payload. */
typedef struct schedule_opts_sql {
    opt_val cron, queue, payload;
    opt_val priority, max_attempts, job_expires_ms, catch_up, max_catch_up, local_time, meta;
} schedule_opts_sql;
#define SCHEDULE_OPT_SPECS                                                                \
    OPT_SPEC(schedule_opts_sql, priority, OPT_INT, I64_MIN, I64_MAX),                     \
        OPT_SPEC(schedule_opts_sql, max_attempts, OPT_INT, 1, TOCSIN_MAX_ATTEMPTS),       \
        OPT_SPEC(schedule_opts_sql, job_expires_ms, OPT_INT, 0, MS_MAX),                  \
        OPT_SPEC(schedule_opts_sql, catch_up, OPT_TEXT, 0, 0),                            \
        OPT_SPEC(schedule_opts_sql, max_catch_up, OPT_INT, 1, TOCSIN_MAX_CATCH_UP),       \
        OPT_SPEC(schedule_opts_sql, local_time, OPT_BOOL, 0, 0),                          \
        OPT_SPEC(schedule_opts_sql, meta, OPT_OBJECT, 0, 0)
static const opt_spec SCHEDULE_SPECS[] = {SCHEDULE_OPT_SPECS, OPT_END};
static const opt_spec SCHEDULE_CHANGE_SPECS[] = {
    OPT_SPEC(schedule_opts_sql, cron, OPT_TEXT, 0, 0),
    OPT_SPEC(schedule_opts_sql, queue, OPT_TEXT, 0, 0),
    OPT_SPEC(schedule_opts_sql, payload, OPT_JSON, 0, 0), SCHEDULE_OPT_SPECS, OPT_END};

/* The options given, flagged in so->fields (what tocsin_schedule_update changes). */
static int schedule_opts_of(fn_ctx *f, const schedule_opts_sql *o, tocsin_schedule_opts *so) {
    so->fields = 0;
    if (o->catch_up.set && strcmp(o->catch_up.t, "once") != 0 && strcmp(o->catch_up.t, "all") != 0)
        return fail_msg(f, SQLITE_ERROR, "option \"catch_up\" must be \"once\" or \"all\"");
    if (o->priority.set) {
        so->priority = o->priority.i;
        so->fields |= TOCSIN_SCHEDULE_PRIORITY;
    }
    if (o->max_attempts.set) {
        so->max_attempts = (int)o->max_attempts.i;
        so->fields |= TOCSIN_SCHEDULE_MAX_ATTEMPTS;
    }
    if (o->job_expires_ms.set) {
        so->job_expires_ms = o->job_expires_ms.i;
        so->fields |= TOCSIN_SCHEDULE_JOB_EXPIRES;
    }
    if (o->catch_up.set) {
        so->catch_up = strcmp(o->catch_up.t, "all") == 0 ? TOCSIN_CATCHUP_ALL : TOCSIN_CATCHUP_ONCE;
        so->fields |= TOCSIN_SCHEDULE_CATCH_UP;
    }
    if (o->max_catch_up.set) {
        so->max_catch_up = (int)o->max_catch_up.i;
        so->fields |= TOCSIN_SCHEDULE_MAX_CATCH_UP;
    }
    if (o->local_time.set) {
        so->local_time = (int)o->local_time.i;
        so->fields |= TOCSIN_SCHEDULE_LOCAL_TIME;
    }
    if (o->meta.set) {
        so->meta = o->meta.t;
        so->fields |= TOCSIN_SCHEDULE_META;
    }
    return 1;
}

/* tocsin_stream_trim's options. */
typedef struct trim_opts_sql {
    opt_val max_age_ms, max_count, below_consumers;
} trim_opts_sql;
static const opt_spec TRIM_SPECS[] = {OPT_SPEC(trim_opts_sql, max_age_ms, OPT_INT, 0, MS_MAX),
                                      OPT_SPEC(trim_opts_sql, max_count, OPT_INT, 0, I64_MAX),
                                      OPT_SPEC(trim_opts_sql, below_consumers, OPT_BOOL, 0, 0),
                                      OPT_END};

/* An options argument (text or NULL) read against specs. */
static int arg_opts(fn_ctx *f, int argc, sqlite3_value **argv, int i, const char *what,
                    const opt_spec *specs, void *out) {
    const char *json;
    if (!arg_text_opt(f, argc, argv, i, what, &json)) return 0;
    return parse_opts(f, what, json, json ? strlen(json) : 0, specs, out);
}

/* ---- functions ------------------------------------------------------------------
 * Each returns 1 when it set a result, 0 when it reported an error (the
 * return value is for the `return fail(...)` idiom; dispatch ignores it).
 */

#define UNUSED_ARGS \
    (void)argc;     \
    (void)argv

static int fn_bootstrap(fn_ctx *f, int argc, sqlite3_value **argv) {
    int v = 0, rc;
    UNUSED_ARGS;
    if ((rc = tocsin_bootstrap(f->db, &v)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(f->ctx, v);
    return 1;
}

static int fn_version(fn_ctx *f, int argc, sqlite3_value **argv) {
    UNUSED_ARGS;
    sqlite3_result_text(f->ctx, tocsin_version(), -1, SQLITE_STATIC);
    return 1;
}

static int64_t fixed_clock(void *p) { return *(int64_t *)p; }

static int fn_clock(fn_ctx *f, int argc, sqlite3_value **argv) {
    int64_t ms;
    if (argc == 1) {
        if (sqlite3_value_type(argv[0]) == SQLITE_NULL) {
            tocsin_set_clock(f->db, NULL, NULL);
        } else {
            if (!arg_i64(f, argv, 0, "ms", 0, MS_MAX, &ms)) return 0;
            f->db->sql_clock = ms;
            tocsin_set_clock(f->db, fixed_clock, &f->db->sql_clock);
        }
    }
    sqlite3_result_int64(f->ctx, tocsin_now(f->db));
    return 1;
}

/* ---- queue ---- */

static int fn_enqueue(fn_ctx *f, int argc, sqlite3_value **argv) {
    enqueue_opts_sql o;
    tocsin_enqueue_opts eo = TOCSIN_ENQUEUE_OPTS_INIT;
    const char *queue, *payload;
    int64_t id;
    int rc;
    memset(&o, 0, sizeof o);
    if (!arg_text(f, argv, 0, "queue", &queue) || !arg_text(f, argv, 1, "payload", &payload) ||
        !arg_opts(f, argc, argv, 2, "options", ENQUEUE_SPECS, &o)) {
        free_opts(ENQUEUE_SPECS, &o);
        return 0;
    }
    enqueue_opts_of(&o, &eo);
    rc = tocsin_queue_enqueue(f->db, &id, queue, payload, &eo);
    free_opts(ENQUEUE_SPECS, &o);
    if (rc != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(f->ctx, id);
    return 1;
}

/* tocsin_task_enqueue's options: the enqueue options plus the call's. */
typedef struct task_opts_sql {
    opt_val queue, payload;
    opt_val priority, delay_ms, run_at_ms, max_attempts, expires_ms, unique_key, meta;
    opt_val result_ttl_ms, timeout_ms;
} task_opts_sql;
static const opt_spec TASK_SPECS[] = {
    OPT_SPEC(task_opts_sql, priority, OPT_INT, I64_MIN, I64_MAX),
    OPT_SPEC(task_opts_sql, delay_ms, OPT_INT, 0, MS_MAX),
    OPT_SPEC(task_opts_sql, run_at_ms, OPT_INT, 0, MS_MAX),
    OPT_SPEC(task_opts_sql, max_attempts, OPT_INT, 1, TOCSIN_MAX_ATTEMPTS),
    OPT_SPEC(task_opts_sql, expires_ms, OPT_INT, 0, MS_MAX),
    OPT_SPEC(task_opts_sql, unique_key, OPT_TEXT, 0, 0),
    OPT_SPEC(task_opts_sql, meta, OPT_OBJECT, 0, 0),
    OPT_SPEC(task_opts_sql, result_ttl_ms, OPT_INT, 0, MS_MAX),
    OPT_SPEC(task_opts_sql, timeout_ms, OPT_INT, 0, MS_MAX),
    OPT_END};

/*
 * tocsin_task_enqueue(queue, task [, args [, kwargs [, options]]]): a call of
 * a task by name (the envelope of docs/sql.md) for a worker of any runtime;
 * returns the job id, whose outcome tocsin_result_get reads.
 */
/* args must be a JSON array and kwargs an object: a JSON value of another
 * kind is a wrong-typed argument (SQLITE_MISMATCH, as for options); text that
 * is not JSON at all is left to the core, which says why. */
static int arg_json_kind(fn_ctx *f, const char *what, const char *json, char want) {
    char top = 0;
    if (!json || !tc_json_valid(json, strlen(json), &top) || top == want) return 1;
    return fail_msg(f, SQLITE_MISMATCH, "%s must be a JSON %s", what, want == '[' ? "array" : "object");
}

static int fn_task_enqueue(fn_ctx *f, int argc, sqlite3_value **argv) {
    task_opts_sql o;
    tocsin_task_call c = TOCSIN_TASK_CALL_INIT;
    tocsin_enqueue_opts eo = TOCSIN_ENQUEUE_OPTS_INIT;
    const char *queue, *task, *args, *kwargs;
    int64_t id;
    int rc;
    memset(&o, 0, sizeof o);
    if (!arg_text(f, argv, 0, "queue", &queue) || !arg_text(f, argv, 1, "task", &task) ||
        !arg_text_opt(f, argc, argv, 2, "args", &args) ||
        !arg_text_opt(f, argc, argv, 3, "kwargs", &kwargs) || !arg_json_kind(f, "args", args, '[') ||
        !arg_json_kind(f, "kwargs", kwargs, '{') || !arg_opts(f, argc, argv, 4, "options", TASK_SPECS, &o)) {
        free_opts(TASK_SPECS, &o);
        return 0;
    }
    c.task = task;
    c.args = args;
    c.kwargs = kwargs;
    if (o.result_ttl_ms.set) c.result_ttl_ms = o.result_ttl_ms.i;
    if (o.timeout_ms.set) c.timeout_ms = o.timeout_ms.i;
    if (o.priority.set) eo.priority = o.priority.i;
    if (o.delay_ms.set) eo.delay_ms = o.delay_ms.i;
    if (o.run_at_ms.set) eo.run_at_ms = o.run_at_ms.i;
    if (o.max_attempts.set) eo.max_attempts = (int)o.max_attempts.i;
    if (o.expires_ms.set) eo.expires_ms = o.expires_ms.i;
    if (o.unique_key.set) eo.unique_key = o.unique_key.t;
    if (o.meta.set) eo.meta = o.meta.t;
    rc = tocsin_task_enqueue(f->db, &id, queue, &c, &eo);
    free_opts(TASK_SPECS, &o);
    if (rc != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(f->ctx, id);
    return 1;
}

/* tocsin_enqueue_many's walk over its array: counting (o == NULL: each
 * element must be an object, at most TOCSIN_MAX_BATCH), then reading each job. */
typedef struct jobs_walk {
    fn_ctx *f;
    size_t n;
    enqueue_opts_sql *o;
    tocsin_enqueue_opts *eo;
    tocsin_job_spec *specs;
} jobs_walk;

static int jobs_element(void *ctx, size_t i, const char *v, size_t vn) {
    static const tocsin_enqueue_opts init = TOCSIN_ENQUEUE_OPTS_INIT;
    jobs_walk *w = ctx;
    fn_ctx *f = w->f;
    char where[48];
    int ok;
    if (!w->o) {
        if (*v != '{') return !fail_msg(f, SQLITE_MISMATCH, "job %zu must be a JSON object", i);
        if (++w->n > TOCSIN_MAX_BATCH)
            return !fail_msg(f, SQLITE_RANGE, "jobs must hold at most %d jobs", TOCSIN_MAX_BATCH);
        return 0;
    }
    snprintf(where, sizeof where, "job %zu", i);
    f->where = where;
    ok = parse_opts(f, "a job", v, vn, JOB_SPECS, &w->o[i]);
    if (ok && !w->o[i].queue.set) ok = fail_msg(f, SQLITE_ERROR, "\"queue\" is required");
    if (ok && !w->o[i].payload.set) ok = fail_msg(f, SQLITE_ERROR, "\"payload\" is required (a JSON value)");
    f->where = NULL; /* the message already names the job */
    if (!ok) return 1;
    w->eo[i] = init;
    enqueue_opts_of(&w->o[i], &w->eo[i]);
    w->specs[i].queue = w->o[i].queue.t;
    w->specs[i].payload = w->o[i].payload.t;
    w->specs[i].opts = &w->eo[i];
    return 0;
}

/*
 * tocsin_enqueue_many(jobs): a JSON array of job objects ({"queue",
 * "payload", ...enqueue options}) enqueued all or nothing (one
 * tocsin_queue_enqueue_many); returns the JSON array of their ids.
 */
static int fn_enqueue_many(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *jobs;
    char top = 0;
    size_t len, n, i;
    enqueue_opts_sql *o = NULL;
    int64_t *ids = NULL;
    jobs_walk w = {0};
    tc_buf b = {0};
    tc_op op;
    int rc, ok = 0, valid;
    UNUSED_ARGS;
    if (!arg_text(f, argv, 0, "jobs", &jobs)) return 0;
    len = strlen(jobs);
    if ((valid = tc_json_wrapper_valid(jobs, len, &top, 2)) < 0) return fail_too_deep(f, "jobs");
    if (!valid) {
        char why[TC_JSON_WHY_CAP];
        return fail_msg(f, SQLITE_MISMATCH, "jobs must be a JSON array of job objects (not valid JSON%s)",
                        tc_json_why(jobs, len, why, sizeof why));
    }
    if (top != '[')
        return fail_msg(f, SQLITE_MISMATCH, "jobs must be a JSON array of job objects");
    w.f = f;
    if (tc_json_elements(jobs, len, jobs_element, &w) != 1) return 0;
    if ((n = w.n) == 0) return result_json(f, tc_strdup("[]"));
    o = w.o = sqlite3_malloc64(n * sizeof *o);
    w.eo = sqlite3_malloc64(n * sizeof *w.eo);
    w.specs = sqlite3_malloc64(n * sizeof *w.specs);
    ids = sqlite3_malloc64(n * sizeof *ids);
    if (!o || !w.eo || !w.specs || !ids) {
        fail_nomem(f);
        goto done;
    }
    memset(o, 0, n * sizeof *o);
    if (tc_json_elements(jobs, len, jobs_element, &w) != 1) goto done;
    /* the core's checks of every job first: a refused batch must write
     * nothing, not even the schema the unit below would install */
    tc_clear(f->db);
    if ((rc = tc_check_specs(f->db, w.specs, n)) != TOCSIN_OK) {
        if (n == 1) f->where = "job 0";
        fail(f, rc);
        goto done;
    }
    if (!unit_begin(f, &op)) goto done;
    if ((rc = tocsin_queue_enqueue_many(f->db, ids, w.specs, n)) != TOCSIN_OK) {
        /* the core names the job ("job 3: ...") when there are several */
        if (n == 1 && (rc == TOCSIN_INVALID || rc == TOCSIN_TOOBIG)) f->where = "job 0";
        unit_end(f, &op, fail(f, rc));
        goto done;
    }
    tc_buf_puts(&b, "[");
    for (i = 0; i < n; i++) {
        if (i) tc_buf_puts(&b, ",");
        tc_buf_i64(&b, ids[i]);
    }
    tc_buf_puts(&b, "]");
    ok = unit_end(f, &op, result_json(f, tc_buf_take(&b)));
done:
    f->where = NULL;
    if (o)
        for (i = 0; i < n; i++) free_opts(JOB_SPECS, &o[i]);
    sqlite3_free(o);
    sqlite3_free(w.eo);
    sqlite3_free(w.specs);
    sqlite3_free(ids);
    return ok;
}

static int fn_claim(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *queue, *worker;
    size_t n, got;
    int64_t vis;
    tocsin_job *jobs;
    tc_op op;
    int rc;
    UNUSED_ARGS;
    if (!arg_text(f, argv, 0, "queue", &queue) || !arg_text(f, argv, 1, "worker_id", &worker) ||
        !arg_count(f, argv, 2, "n", &n) || !arg_i64(f, argv, 3, "visibility_ms", 1, MS_MAX, &vis))
        return 0;
    /* the core's checks first: a refused claim writes nothing, not even the
     * schema the unit below would install */
    tc_clear(f->db);
    if ((rc = tc_check_claim(f->db, queue, worker, n, vis)) != TOCSIN_OK) return fail(f, rc);
    if (!unit_begin(f, &op)) return 0;
    rc = tocsin_queue_claim(f->db, &jobs, &got, queue, worker, n, vis);
    if (rc != TOCSIN_OK) return unit_end(f, &op, fail(f, rc));
    rc = result_json(f, tc_jobs_json(jobs, got));
    tocsin_jobs_free(jobs, got);
    return unit_end(f, &op, rc);
}

/* (job_id, token): any integers (no job has an id or token out of range: 0). */
static int arg_lease(fn_ctx *f, sqlite3_value **argv, int64_t *id, int64_t *token) {
    return arg_i64(f, argv, 0, "job_id", I64_MIN, I64_MAX, id) &&
           arg_i64(f, argv, 1, "token", I64_MIN, I64_MAX, token);
}

static int fn_ack(fn_ctx *f, int argc, sqlite3_value **argv) {
    int64_t id = 0, token = 0;
    int ok, rc;
    UNUSED_ARGS;
    if (!arg_lease(f, argv, &id, &token)) return 0;
    if ((rc = tocsin_job_ack(f->db, &ok, id, token)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(f->ctx, ok);
    return 1;
}

static int fn_retry(fn_ctx *f, int argc, sqlite3_value **argv) {
    int64_t id = 0, token = 0, delay = 0;
    const char *error;
    int ok, rc;
    if (!arg_lease(f, argv, &id, &token) ||
        !arg_i64_opt(f, argc, argv, 2, "delay_ms", 0, MS_MAX, -1, &delay) ||
        !arg_text_opt(f, argc, argv, 3, "error", &error))
        return 0;
    if ((rc = tocsin_job_retry(f->db, &ok, id, token, delay, error)) != TOCSIN_OK)
        return fail(f, rc);
    sqlite3_result_int(f->ctx, ok);
    return 1;
}

static int fn_fail(fn_ctx *f, int argc, sqlite3_value **argv) {
    int64_t id = 0, token = 0;
    const char *error;
    int ok, rc;
    if (!arg_lease(f, argv, &id, &token) || !arg_text_opt(f, argc, argv, 2, "error", &error))
        return 0;
    if ((rc = tocsin_job_fail(f->db, &ok, id, token, error)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(f->ctx, ok);
    return 1;
}

static int fn_heartbeat(fn_ctx *f, int argc, sqlite3_value **argv) {
    int64_t id = 0, token = 0, extend = 0;
    int ok, rc;
    UNUSED_ARGS;
    if (!arg_lease(f, argv, &id, &token) ||
        !arg_i64(f, argv, 2, "extend_ms", 1, MS_MAX, &extend))
        return 0;
    if ((rc = tocsin_job_heartbeat(f->db, &ok, id, token, extend)) != TOCSIN_OK)
        return fail(f, rc);
    sqlite3_result_int(f->ctx, ok);
    return 1;
}

static int arg_job_id(fn_ctx *f, sqlite3_value **argv, int64_t *id) {
    return arg_i64(f, argv, 0, "job_id", I64_MIN, I64_MAX, id);
}

static int fn_cancel(fn_ctx *f, int argc, sqlite3_value **argv) {
    int64_t id = 0;
    int ok, rc;
    UNUSED_ARGS;
    if (!arg_job_id(f, argv, &id)) return 0;
    if ((rc = tocsin_job_cancel(f->db, &ok, id)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(f->ctx, ok);
    return 1;
}

static int fn_job(fn_ctx *f, int argc, sqlite3_value **argv) {
    int64_t id;
    tocsin_job *job;
    int rc;
    UNUSED_ARGS;
    if (!arg_job_id(f, argv, &id)) return 0;
    if ((rc = tocsin_job_get(f->db, &job, id)) != TOCSIN_OK) return fail(f, rc);
    if (!job) {
        sqlite3_result_null(f->ctx);
        return 1;
    }
    rc = result_json(f, tc_job_json(job));
    tocsin_jobs_free(job, 1);
    return rc;
}

static int pause_or_resume(fn_ctx *f, sqlite3_value **argv, int pause) {
    const char *queue;
    int rc;
    if (!arg_text(f, argv, 0, "queue", &queue)) return 0;
    rc = pause ? tocsin_queue_pause(f->db, queue) : tocsin_queue_resume(f->db, queue);
    if (rc != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(f->ctx, 1);
    return 1;
}
static int fn_pause(fn_ctx *f, int argc, sqlite3_value **argv) {
    (void)argc;
    return pause_or_resume(f, argv, 1);
}
static int fn_resume(fn_ctx *f, int argc, sqlite3_value **argv) {
    (void)argc;
    return pause_or_resume(f, argv, 0);
}

static int fn_stats(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *queue;
    char *json;
    int rc;
    if (!arg_text_opt(f, argc, argv, 0, "queue", &queue)) return 0;
    if ((rc = tocsin_queue_stats(f->db, &json, queue)) != TOCSIN_OK) return fail(f, rc);
    return result_json(f, json);
}

static int fn_next_deadline(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *queues[16];
    int64_t ms;
    int i, rc;
    if (argc > 16) return fail_msg(f, SQLITE_RANGE, "at most 16 queues");
    for (i = 0; i < argc; i++)
        if (!arg_text(f, argv, i, "queue", &queues[i])) return 0;
    if ((rc = tocsin_queue_next_deadline(f->db, &ms, queues, (size_t)argc)) != TOCSIN_OK)
        return fail(f, rc);
    if (ms < 0)
        sqlite3_result_null(f->ctx);
    else
        sqlite3_result_int64(f->ctx, ms);
    return 1;
}

static int fn_dead_list(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *queue;
    int64_t after, limit;
    tocsin_job *jobs;
    size_t n;
    int rc;
    if (!arg_text_opt(f, argc, argv, 0, "queue", &queue) ||
        !arg_i64_opt(f, argc, argv, 1, "after_id", I64_MIN, I64_MAX, 0, &after) ||
        !arg_i64_opt(f, argc, argv, 2, "limit", 1, TOCSIN_MAX_BATCH, 100, &limit))
        return 0;
    rc = tocsin_dead_list(f->db, &jobs, &n, queue, after, (size_t)limit);
    if (rc != TOCSIN_OK) return fail(f, rc);
    rc = result_json(f, tc_jobs_json(jobs, n));
    tocsin_jobs_free(jobs, n);
    return rc;
}

static int fn_dead_requeue(fn_ctx *f, int argc, sqlite3_value **argv) {
    int64_t id = 0;
    int ok, rc;
    UNUSED_ARGS;
    if (!arg_job_id(f, argv, &id)) return 0;
    if ((rc = tocsin_dead_requeue(f->db, &ok, id)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(f->ctx, ok);
    return 1;
}

static int fn_dead_purge(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *queue;
    int64_t before, n;
    int rc;
    if (!arg_text_opt(f, argc, argv, 0, "queue", &queue) ||
        !arg_i64_opt(f, argc, argv, 1, "before_ms", 0, MS_MAX, 0, &before))
        return 0;
    if ((rc = tocsin_dead_purge(f->db, &n, queue, before)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(f->ctx, n);
    return 1;
}

/* ---- notifications ---- */

static int fn_notify(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *channel, *payload, *meta;
    int64_t id;
    int rc;
    if (!arg_text(f, argv, 0, "channel", &channel) || !arg_text(f, argv, 1, "payload", &payload) ||
        !arg_text_opt(f, argc, argv, 2, "meta", &meta))
        return 0;
    if ((rc = tocsin_notify(f->db, &id, channel, payload, meta)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(f->ctx, id);
    return 1;
}

static int fn_notify_read(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *channel;
    int64_t after;
    size_t limit, n;
    tocsin_message *m;
    int rc;
    UNUSED_ARGS;
    if (!arg_text(f, argv, 0, "channel", &channel) ||
        !arg_i64(f, argv, 1, "after_id", I64_MIN, I64_MAX, &after) ||
        !arg_count(f, argv, 2, "limit", &limit))
        return 0;
    if ((rc = tocsin_notify_read(f->db, &m, &n, channel, after, limit)) != TOCSIN_OK)
        return fail(f, rc);
    rc = result_json(f, tc_messages_json(m, n, 0));
    tocsin_messages_free(m, n);
    return rc;
}

static int fn_notify_prune(fn_ctx *f, int argc, sqlite3_value **argv) {
    int64_t age, keep, n;
    int rc;
    if (!arg_i64_opt(f, argc, argv, 0, "max_age_ms", 0, MS_MAX, 0, &age) ||
        !arg_i64_opt(f, argc, argv, 1, "max_keep", 0, I64_MAX, 0, &keep))
        return 0;
    if ((rc = tocsin_notify_prune(f->db, &n, age, keep)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(f->ctx, n);
    return 1;
}

static int fn_notify_autotrim(fn_ctx *f, int argc, sqlite3_value **argv) {
    int64_t age, keep, one_in;
    int rc;
    if (!arg_i64_opt(f, argc, argv, 0, "max_age_ms", 0, MS_MAX, 0, &age) ||
        !arg_i64_opt(f, argc, argv, 1, "max_keep", 0, I64_MAX, 0, &keep) ||
        !arg_i64_opt(f, argc, argv, 2, "one_in", 0, I64_MAX, 100, &one_in))
        return 0;
    if ((rc = tocsin_notify_set_autotrim(f->db, age, keep, one_in)) != TOCSIN_OK)
        return fail(f, rc);
    sqlite3_result_int(f->ctx, one_in > 0);
    return 1;
}

/* ---- streams ---- */

static int fn_stream_publish(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *topic, *payload, *key, *meta;
    int64_t off = 0;
    int rc;
    if (!arg_text(f, argv, 0, "topic", &topic) || !arg_text(f, argv, 1, "payload", &payload) ||
        !arg_text_opt(f, argc, argv, 2, "key", &key) ||
        !arg_text_opt(f, argc, argv, 3, "meta", &meta))
        return 0;
    if ((rc = tocsin_stream_publish(f->db, &off, topic, payload, key, meta)) != TOCSIN_OK)
        return fail(f, rc);
    sqlite3_result_int64(f->ctx, off);
    return 1;
}

static int fn_stream_read(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *topic;
    int64_t after;
    size_t limit, n;
    tocsin_message *m;
    int rc;
    UNUSED_ARGS;
    if (!arg_text(f, argv, 0, "topic", &topic) ||
        !arg_i64(f, argv, 1, "after_offset", I64_MIN, I64_MAX, &after) ||
        !arg_count(f, argv, 2, "limit", &limit))
        return 0;
    if ((rc = tocsin_stream_read(f->db, &m, &n, topic, after, limit)) != TOCSIN_OK)
        return fail(f, rc);
    rc = result_json(f, tc_messages_json(m, n, 1));
    tocsin_messages_free(m, n);
    return rc;
}

static int fn_stream_save_offset(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *consumer, *topic;
    int64_t off, stored;
    int rc;
    UNUSED_ARGS;
    if (!arg_text(f, argv, 0, "consumer", &consumer) || !arg_text(f, argv, 1, "topic", &topic) ||
        !arg_i64(f, argv, 2, "offset", 0, I64_MAX, &off))
        return 0;
    if ((rc = tocsin_stream_save_offset(f->db, &stored, consumer, topic, off)) != TOCSIN_OK)
        return fail(f, rc);
    sqlite3_result_int64(f->ctx, stored);
    return 1;
}

static int fn_stream_offset(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *consumer, *topic;
    int64_t off;
    int rc;
    UNUSED_ARGS;
    if (!arg_text(f, argv, 0, "consumer", &consumer) || !arg_text(f, argv, 1, "topic", &topic))
        return 0;
    if ((rc = tocsin_stream_offset(f->db, &off, consumer, topic)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(f->ctx, off);
    return 1;
}

static int fn_stream_trim(fn_ctx *f, int argc, sqlite3_value **argv) {
    trim_opts_sql o;
    tocsin_trim_opts to = TOCSIN_TRIM_OPTS_INIT;
    const char *topic, *opts;
    int64_t n;
    int rc;
    UNUSED_ARGS;
    memset(&o, 0, sizeof o);
    if (!arg_text(f, argv, 0, "topic", &topic) || !arg_text(f, argv, 1, "options", &opts) ||
        !parse_opts(f, "options", opts, strlen(opts), TRIM_SPECS, &o)) {
        free_opts(TRIM_SPECS, &o);
        return 0;
    }
    if (o.max_age_ms.set) to.max_age_ms = o.max_age_ms.i;
    if (o.max_count.set) to.max_count = o.max_count.i;
    if (o.below_consumers.set) to.below_consumers = (int)o.below_consumers.i;
    free_opts(TRIM_SPECS, &o);
    if ((rc = tocsin_stream_trim(f->db, &n, topic, &to)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(f->ctx, n);
    return 1;
}

/* ---- results ---- */

static int fn_result_save(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *value;
    int64_t id = 0, ttl = 0;
    int rc;
    if (!arg_job_id(f, argv, &id) || !arg_text(f, argv, 1, "value", &value) ||
        !arg_i64_opt(f, argc, argv, 2, "ttl_ms", 0, MS_MAX, 0, &ttl))
        return 0;
    if ((rc = tocsin_result_save(f->db, id, value, ttl)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(f->ctx, 1);
    return 1;
}

static int fn_complete(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *value;
    int64_t id = 0, token = 0, ttl = 0;
    int ok = 0, rc;
    if (!arg_lease(f, argv, &id, &token) || !arg_text(f, argv, 2, "value", &value) ||
        !arg_i64_opt(f, argc, argv, 3, "ttl_ms", 0, MS_MAX, 0, &ttl))
        return 0;
    if ((rc = tocsin_job_complete(f->db, &ok, id, token, value, ttl)) != TOCSIN_OK)
        return fail(f, rc);
    sqlite3_result_int(f->ctx, ok);
    return 1;
}

static int fn_fail_task(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *type, *message;
    int64_t id = 0, token = 0, ttl = 0;
    int ok = 0, rc;
    if (!arg_lease(f, argv, &id, &token) || !arg_text(f, argv, 2, "type", &type) ||
        !arg_text_opt(f, argc, argv, 3, "message", &message) ||
        !arg_i64_opt(f, argc, argv, 4, "ttl_ms", 0, MS_MAX, 0, &ttl))
        return 0;
    if ((rc = tocsin_job_fail_task(f->db, &ok, id, token, type, message, ttl)) != TOCSIN_OK)
        return fail(f, rc);
    sqlite3_result_int(f->ctx, ok);
    return 1;
}

static int fn_result_save_error(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *type, *message;
    int64_t id = 0, ttl = 0;
    int rc;
    if (!arg_job_id(f, argv, &id) || !arg_text(f, argv, 1, "type", &type) ||
        !arg_text_opt(f, argc, argv, 2, "message", &message) ||
        !arg_i64_opt(f, argc, argv, 3, "ttl_ms", 0, MS_MAX, 0, &ttl))
        return 0;
    if ((rc = tocsin_result_save_error(f->db, id, type, message, ttl)) != TOCSIN_OK)
        return fail(f, rc);
    sqlite3_result_int(f->ctx, 1);
    return 1;
}

/* A result as its JSON document, or NULL: result_get's (none, or expired) or
 * result_check's (also a JobDead error for a job that died without one, NULL
 * while it is live; an error when neither a job nor a result has the id). */
static int result_out(fn_ctx *f, sqlite3_value **argv,
                      int (*read)(tocsin_db *, tocsin_result **, int64_t)) {
    tocsin_result *r;
    int64_t id = 0;
    int rc;
    if (!arg_job_id(f, argv, &id)) return 0;
    if ((rc = read(f->db, &r, id)) != TOCSIN_OK) return fail(f, rc);
    if (!r) {
        sqlite3_result_null(f->ctx);
        return 1;
    }
    rc = result_json(f, tc_result_json(r));
    tocsin_result_free(r);
    return rc;
}

static int fn_result_get(fn_ctx *f, int argc, sqlite3_value **argv) {
    UNUSED_ARGS;
    return result_out(f, argv, tocsin_result_get);
}

static int fn_result_check(fn_ctx *f, int argc, sqlite3_value **argv) {
    UNUSED_ARGS;
    return result_out(f, argv, tocsin_result_check);
}

static int fn_result_delete(fn_ctx *f, int argc, sqlite3_value **argv) {
    int64_t id = 0;
    int ok, rc;
    UNUSED_ARGS;
    if (!arg_job_id(f, argv, &id)) return 0;
    if ((rc = tocsin_result_delete(f->db, &ok, id)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(f->ctx, ok);
    return 1;
}

static int fn_result_sweep(fn_ctx *f, int argc, sqlite3_value **argv) {
    int64_t n;
    int rc;
    UNUSED_ARGS;
    if ((rc = tocsin_result_sweep(f->db, &n)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(f->ctx, n);
    return 1;
}

/* ---- locks ---- */

static int fn_lock_acquire(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *name, *owner;
    int64_t ttl, token;
    int rc;
    UNUSED_ARGS;
    if (!arg_text(f, argv, 0, "name", &name) || !arg_text(f, argv, 1, "owner", &owner) ||
        !arg_i64(f, argv, 2, "ttl_ms", 1, MS_MAX, &ttl))
        return 0;
    if ((rc = tocsin_lock_acquire(f->db, &token, NULL, name, owner, ttl)) != TOCSIN_OK)
        return fail(f, rc);
    if (!token)
        sqlite3_result_null(f->ctx);
    else
        sqlite3_result_int64(f->ctx, token);
    return 1;
}

static int fn_lock_renew(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *name, *owner;
    int64_t token, ttl;
    int ok, rc;
    UNUSED_ARGS;
    if (!arg_text(f, argv, 0, "name", &name) || !arg_text(f, argv, 1, "owner", &owner) ||
        !arg_i64(f, argv, 2, "token", I64_MIN, I64_MAX, &token) ||
        !arg_i64(f, argv, 3, "ttl_ms", 1, MS_MAX, &ttl))
        return 0;
    if ((rc = tocsin_lock_renew(f->db, &ok, name, owner, token, ttl)) != TOCSIN_OK)
        return fail(f, rc);
    sqlite3_result_int(f->ctx, ok);
    return 1;
}

static int fn_lock_release(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *name, *owner;
    int64_t token;
    int ok, rc;
    UNUSED_ARGS;
    if (!arg_text(f, argv, 0, "name", &name) || !arg_text(f, argv, 1, "owner", &owner) ||
        !arg_i64(f, argv, 2, "token", I64_MIN, I64_MAX, &token))
        return 0;
    if ((rc = tocsin_lock_release(f->db, &ok, name, owner, token)) != TOCSIN_OK)
        return fail(f, rc);
    sqlite3_result_int(f->ctx, ok);
    return 1;
}

static int fn_lock_holder(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *name;
    char *owner;
    int64_t token, until;
    tc_buf b = {0};
    int first = 1, rc;
    UNUSED_ARGS;
    if (!arg_text(f, argv, 0, "name", &name)) return 0;
    if ((rc = tocsin_lock_holder(f->db, &owner, &token, &until, name)) != TOCSIN_OK)
        return fail(f, rc);
    tc_buf_puts(&b, "{");
    tc_buf_key(&b, "name", &first);
    tc_buf_jstr(&b, name);
    tc_buf_key(&b, "owner", &first);
    tc_buf_jstr(&b, owner);
    tc_buf_key(&b, "token", &first);
    tc_buf_i64(&b, token);
    tc_buf_key(&b, "expires_at", &first);
    if (owner)
        tc_buf_i64(&b, until);
    else
        tc_buf_puts(&b, "null");
    tc_buf_puts(&b, "}");
    tocsin_free(owner);
    return result_json(f, tc_buf_take(&b));
}

/* ---- rate limits ---- */

static int fn_ratelimit_try(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *name;
    int64_t limit, per, retry, remaining;
    int allowed, rc;
    char buf[128];
    UNUSED_ARGS;
    if (!arg_text(f, argv, 0, "name", &name) ||
        !arg_i64(f, argv, 1, "limit", I64_MIN, I64_MAX, &limit) ||
        !arg_i64(f, argv, 2, "per_ms", 1, MS_MAX, &per))
        return 0;
    rc = tocsin_ratelimit_try(f->db, &allowed, &retry, &remaining, name, limit, per);
    if (rc != TOCSIN_OK) return fail(f, rc);
    snprintf(buf, sizeof buf, "{\"allowed\":%s,\"retry_after_ms\":%lld,\"remaining\":%lld}",
             allowed ? "true" : "false", (long long)retry, (long long)remaining);
    return result_json(f, tc_strdup(buf));
}

static int fn_ratelimit_sweep(fn_ctx *f, int argc, sqlite3_value **argv) {
    int64_t n;
    int rc;
    UNUSED_ARGS;
    if ((rc = tocsin_ratelimit_sweep(f->db, &n)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(f->ctx, n);
    return 1;
}

static int fn_ratelimit_reset(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *name;
    int64_t n;
    int rc;
    UNUSED_ARGS;
    if (!arg_text(f, argv, 0, "name", &name)) return 0;
    if ((rc = tocsin_ratelimit_reset(f->db, &n, name)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(f->ctx, n);
    return 1;
}

/* ---- cron and the scheduler ---- */

/* 'utc' (default) or 'local' -> 0 / 1; -1 (error reported) otherwise */
static int arg_zone(fn_ctx *f, int argc, sqlite3_value **argv, int i) {
    const char *zone;
    if (!arg_text_opt(f, argc, argv, i, "zone", &zone)) return -1;
    if (!zone || sqlite3_stricmp(zone, "utc") == 0) return 0;
    if (sqlite3_stricmp(zone, "local") == 0) return 1;
    fail_msg(f, SQLITE_ERROR, "zone must be 'utc' or 'local', not '%.*s'", quote_len(zone, 100),
             zone);
    return -1;
}

static int fn_cron_next(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *expr;
    int64_t after = 0, next = 0;
    tocsin_cron *c = NULL;
    char err[256];
    int local, rc;
    if (!arg_text(f, argv, 0, "cron", &expr) ||
        !arg_i64(f, argv, 1, "after_ms", 0, MS_MAX, &after))
        return 0;
    if ((local = arg_zone(f, argc, argv, 2)) < 0) return 0;
    if ((rc = tocsin_cron_parse(&c, expr, err, sizeof err)) != TOCSIN_OK) {
        if (rc == TOCSIN_NOMEM) return fail_nomem(f);
        return fail_msg(f, SQLITE_ERROR, "%s", err);
    }
    rc = tocsin_cron_next(&next, c, after, local);
    tocsin_cron_free(c);
    if (rc == TOCSIN_NOTFOUND)
        sqlite3_result_null(f->ctx);
    else
        sqlite3_result_int64(f->ctx, next);
    return 1;
}

static int result_next_fire(fn_ctx *f, int64_t next) {
    if (next < 0)
        sqlite3_result_null(f->ctx);
    else
        sqlite3_result_int64(f->ctx, next);
    return 1;
}

static int fn_schedule_set(fn_ctx *f, int argc, sqlite3_value **argv) {
    schedule_opts_sql o;
    tocsin_schedule_opts so = TOCSIN_SCHEDULE_OPTS_INIT;
    const char *name, *cron, *queue, *payload;
    int64_t next;
    int rc;
    memset(&o, 0, sizeof o);
    if (!arg_text(f, argv, 0, "name", &name) || !arg_text(f, argv, 1, "cron", &cron) ||
        !arg_text(f, argv, 2, "queue", &queue) || !arg_text(f, argv, 3, "payload", &payload) ||
        !arg_opts(f, argc, argv, 4, "options", SCHEDULE_SPECS, &o) ||
        !schedule_opts_of(f, &o, &so)) {
        free_opts(SCHEDULE_SPECS, &o);
        return 0;
    }
    rc = tocsin_schedule_set(f->db, &next, name, cron, queue, payload, &so);
    free_opts(SCHEDULE_SPECS, &o);
    if (rc != TOCSIN_OK) return fail(f, rc);
    return result_next_fire(f, next);
}

/* The changes object names what changes; the core keeps everything else
 * (field presence: tocsin_schedule_opts.fields). */
static int fn_schedule_update(fn_ctx *f, int argc, sqlite3_value **argv) {
    schedule_opts_sql o;
    tocsin_schedule_opts so = TOCSIN_SCHEDULE_OPTS_INIT;
    const char *name, *changes;
    int64_t next;
    int rc;
    UNUSED_ARGS;
    memset(&o, 0, sizeof o);
    if (!arg_text(f, argv, 0, "name", &name) || !arg_text(f, argv, 1, "changes", &changes) ||
        !parse_opts(f, "changes", changes, strlen(changes), SCHEDULE_CHANGE_SPECS, &o) ||
        !schedule_opts_of(f, &o, &so)) {
        free_opts(SCHEDULE_CHANGE_SPECS, &o);
        return 0;
    }
    rc = tocsin_schedule_update(f->db, &next, name, o.cron.t, o.queue.t, o.payload.t, &so);
    free_opts(SCHEDULE_CHANGE_SPECS, &o);
    if (rc != TOCSIN_OK) return fail(f, rc);
    return result_next_fire(f, next);
}

static int schedule_pause_or_resume(fn_ctx *f, sqlite3_value **argv, int pause) {
    const char *name;
    int rc;
    if (!arg_text(f, argv, 0, "name", &name)) return 0;
    rc = pause ? tocsin_schedule_pause(f->db, name) : tocsin_schedule_resume(f->db, name);
    if (rc != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(f->ctx, 1);
    return 1;
}
static int fn_schedule_pause(fn_ctx *f, int argc, sqlite3_value **argv) {
    (void)argc;
    return schedule_pause_or_resume(f, argv, 1);
}
static int fn_schedule_resume(fn_ctx *f, int argc, sqlite3_value **argv) {
    (void)argc;
    return schedule_pause_or_resume(f, argv, 0);
}

static int fn_schedule_remove(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *name;
    int ok, rc;
    UNUSED_ARGS;
    if (!arg_text(f, argv, 0, "name", &name)) return 0;
    if ((rc = tocsin_schedule_remove(f->db, &ok, name)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(f->ctx, ok);
    return 1;
}

static int fn_schedule_get(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *name;
    tocsin_schedule *s;
    int rc;
    UNUSED_ARGS;
    if (!arg_text(f, argv, 0, "name", &name)) return 0;
    if ((rc = tocsin_schedule_get(f->db, &s, name)) != TOCSIN_OK) return fail(f, rc);
    if (!s) {
        sqlite3_result_null(f->ctx);
        return 1;
    }
    rc = result_json(f, tc_schedule_json(s));
    tocsin_schedules_free(s, 1);
    return rc;
}

static int fn_schedule_list(fn_ctx *f, int argc, sqlite3_value **argv) {
    tocsin_schedule *s;
    size_t n;
    int rc;
    UNUSED_ARGS;
    if ((rc = tocsin_schedule_list(f->db, &s, &n)) != TOCSIN_OK) return fail(f, rc);
    rc = result_json(f, tc_schedules_json(s, n));
    tocsin_schedules_free(s, n);
    return rc;
}

static int fn_scheduler_tick(fn_ctx *f, int argc, sqlite3_value **argv) {
    int64_t n;
    int rc;
    UNUSED_ARGS;
    if ((rc = tocsin_scheduler_tick(f->db, &n)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int64(f->ctx, n);
    return 1;
}

static int fn_scheduler_next_fire(fn_ctx *f, int argc, sqlite3_value **argv) {
    int64_t ms;
    int rc;
    UNUSED_ARGS;
    if ((rc = tocsin_scheduler_next_fire(f->db, &ms)) != TOCSIN_OK) return fail(f, rc);
    return result_next_fire(f, ms);
}

static int fn_scheduler_lead(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *owner;
    int64_t ttl = 0, token = 0;
    int leader, rc;
    UNUSED_ARGS;
    if (!arg_text(f, argv, 0, "owner", &owner) ||
        !arg_i64(f, argv, 1, "ttl_ms", 1, MS_MAX, &ttl))
        return 0;
    if ((rc = tocsin_scheduler_lead(f->db, &leader, &token, owner, ttl)) != TOCSIN_OK)
        return fail(f, rc);
    if (!leader)
        sqlite3_result_null(f->ctx);
    else
        sqlite3_result_int64(f->ctx, token);
    return 1;
}

static int fn_scheduler_resign(fn_ctx *f, int argc, sqlite3_value **argv) {
    const char *owner;
    int ok, rc;
    UNUSED_ARGS;
    if (!arg_text(f, argv, 0, "owner", &owner)) return 0;
    if ((rc = tocsin_scheduler_resign(f->db, &ok, owner)) != TOCSIN_OK) return fail(f, rc);
    sqlite3_result_int(f->ctx, ok);
    return 1;
}

/* ---- registration ------------------------------------------------------------- */

typedef int (*sql_fn)(fn_ctx *f, int argc, sqlite3_value **argv);

#define FN_DB 1    /* touches the database (a transaction or savepoint of its own) */
#define FN_SETTER 2 /* changes the handle's state when given arguments (tocsin_clock(ms)) */

typedef struct fn_def {
    const char *name;
    int min_args, max_args;
    int flags;
    sql_fn fn;
} fn_def;

static const fn_def FUNCTIONS[] = {
    {"tocsin_bootstrap", 0, 0, FN_DB, fn_bootstrap},
    {"tocsin_version", 0, 0, 0, fn_version},
    {"tocsin_clock", 0, 1, FN_SETTER, fn_clock},
    {"tocsin_enqueue", 2, 3, FN_DB, fn_enqueue},
    {"tocsin_enqueue_many", 1, 1, FN_DB, fn_enqueue_many},
    {"tocsin_task_enqueue", 2, 5, FN_DB, fn_task_enqueue},
    {"tocsin_claim", 4, 4, FN_DB, fn_claim},
    {"tocsin_ack", 2, 2, FN_DB, fn_ack},
    {"tocsin_retry", 2, 4, FN_DB, fn_retry},
    {"tocsin_fail", 2, 3, FN_DB, fn_fail},
    {"tocsin_heartbeat", 3, 3, FN_DB, fn_heartbeat},
    {"tocsin_cancel", 1, 1, FN_DB, fn_cancel},
    {"tocsin_job", 1, 1, FN_DB, fn_job},
    {"tocsin_pause", 1, 1, FN_DB, fn_pause},
    {"tocsin_resume", 1, 1, FN_DB, fn_resume},
    {"tocsin_stats", 0, 1, FN_DB, fn_stats},
    {"tocsin_next_deadline", 1, 16, FN_DB, fn_next_deadline},
    {"tocsin_dead_list", 0, 3, FN_DB, fn_dead_list},
    {"tocsin_dead_requeue", 1, 1, FN_DB, fn_dead_requeue},
    {"tocsin_dead_purge", 0, 2, FN_DB, fn_dead_purge},
    {"tocsin_notify", 2, 3, FN_DB, fn_notify},
    {"tocsin_notify_read", 3, 3, FN_DB, fn_notify_read},
    {"tocsin_notify_prune", 0, 2, FN_DB, fn_notify_prune},
    {"tocsin_notify_autotrim", 0, 3, FN_DB, fn_notify_autotrim},
    {"tocsin_stream_publish", 2, 4, FN_DB, fn_stream_publish},
    {"tocsin_stream_read", 3, 3, FN_DB, fn_stream_read},
    {"tocsin_stream_save_offset", 3, 3, FN_DB, fn_stream_save_offset},
    {"tocsin_stream_offset", 2, 2, FN_DB, fn_stream_offset},
    {"tocsin_stream_trim", 2, 2, FN_DB, fn_stream_trim},
    /* coordination */
    {"tocsin_result_save", 2, 3, FN_DB, fn_result_save},
    {"tocsin_result_save_error", 2, 4, FN_DB, fn_result_save_error},
    {"tocsin_complete", 3, 4, FN_DB, fn_complete},
    {"tocsin_fail_task", 3, 5, FN_DB, fn_fail_task},
    {"tocsin_result_get", 1, 1, FN_DB, fn_result_get},
    {"tocsin_result_check", 1, 1, FN_DB, fn_result_check},
    {"tocsin_result_delete", 1, 1, FN_DB, fn_result_delete},
    {"tocsin_result_sweep", 0, 0, FN_DB, fn_result_sweep},
    {"tocsin_lock_acquire", 3, 3, FN_DB, fn_lock_acquire},
    {"tocsin_lock_renew", 4, 4, FN_DB, fn_lock_renew},
    {"tocsin_lock_release", 3, 3, FN_DB, fn_lock_release},
    {"tocsin_lock_holder", 1, 1, FN_DB, fn_lock_holder},
    {"tocsin_ratelimit_try", 3, 3, FN_DB, fn_ratelimit_try},
    {"tocsin_ratelimit_sweep", 0, 0, FN_DB, fn_ratelimit_sweep},
    {"tocsin_ratelimit_reset", 1, 1, FN_DB, fn_ratelimit_reset},
    {"tocsin_cron_next", 2, 3, 0, fn_cron_next},
    {"tocsin_schedule_set", 4, 5, FN_DB, fn_schedule_set},
    {"tocsin_schedule_update", 2, 2, FN_DB, fn_schedule_update},
    {"tocsin_schedule_pause", 1, 1, FN_DB, fn_schedule_pause},
    {"tocsin_schedule_resume", 1, 1, FN_DB, fn_schedule_resume},
    {"tocsin_schedule_remove", 1, 1, FN_DB, fn_schedule_remove},
    {"tocsin_schedule_get", 1, 1, FN_DB, fn_schedule_get},
    {"tocsin_schedule_list", 0, 0, FN_DB, fn_schedule_list},
    {"tocsin_scheduler_tick", 0, 0, FN_DB, fn_scheduler_tick},
    {"tocsin_scheduler_next_fire", 0, 0, FN_DB, fn_scheduler_next_fire},
    {"tocsin_scheduler_lead", 2, 2, FN_DB, fn_scheduler_lead},
    {"tocsin_scheduler_resign", 1, 1, FN_DB, fn_scheduler_resign},
};

#define N_FUNCTIONS (sizeof FUNCTIONS / sizeof FUNCTIONS[0])

/* What each registered function carries: its handle and definition. */
typedef struct ext_fn {
    tocsin_db *db;
    const fn_def *def;
} ext_fn;

static int no_temp_shadow(fn_ctx *f);

/*
 * Every SQL function enters here. A function that touches the database, or
 * changes the handle's state, runs only from the application's own statement:
 *  - not from inside another tocsin call: a TEMP trigger on a tocsin table
 *    (SQLite lets TEMP triggers call SQLITE_DIRECTONLY functions) or a
 *    function of the application called from one would otherwise run while
 *    a statement of ours is mid-step, and reset or finalize it under itself;
 *  - not inside a statement that writes: SQLite refuses the savepoint,
 *    BEGIN/COMMIT a call needs ("SQL statements in progress") -- INSERT INTO t
 *    VALUES (tocsin_enqueue(...)), UPDATE t SET x = tocsin_...(), CREATE TABLE
 *    ... AS SELECT tocsin_...();
 *  - not from a CHECK constraint that a PRAGMA evaluates (tc_running);
 *  - not while a TEMP table or view stands in for a tocsin table (no_temp_shadow).
 * On a host's connection the statement cache is emptied after every outermost
 * call: a host that closes with sqlite3_close() (not _v2) fails while any
 * statement of ours is still prepared.
 */
static void cache_connect_now(tocsin_db *db);

static void dispatch(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    ext_fn *e = sqlite3_user_data(ctx);
    tocsin_db *db = e->db;
    int outermost = db->ext_depth == 0, flags = e->def->flags;
    int guarded = (flags & FN_DB) || ((flags & FN_SETTER) && argc > 0);
    int running = guarded && outermost ? tc_running(db->conn) : 0;
    fn_ctx f;
    f.ctx = ctx;
    f.db = db;
    f.name = e->def->name;
    f.where = NULL;
    f.undo = 0;
    f.nomem = 0;
    if (outermost && db->ext_cache) tc_stmt_check(db); /* before any statement of ours runs */
    if (guarded && !outermost)
        fail_msg(&f, SQLITE_ERROR,
                 "cannot run inside another tocsin call (a trigger on a tocsin table, or a "
                 "function such a trigger calls): call it from a statement of its own");
    else if (running & TC_RUN_WRITER)
        fail_msg(&f, SQLITE_ERROR,
                 "cannot run inside a statement that writes (INSERT, UPDATE, DELETE, REPLACE, "
                 "CREATE TABLE ... AS): SQL statements in progress on this connection. Call "
                 "tocsin functions from a SELECT of their own, then write what they return in "
                 "the next statement (see \"Statement shapes\" in docs/sql.md)");
    else if (running & TC_RUN_PRAGMA)
        fail_msg(&f, SQLITE_ERROR,
                 "cannot run inside a PRAGMA (a CHECK constraint that PRAGMA integrity_check or "
                 "quick_check evaluates calls it): a schema must not call tocsin functions");
    else if (!(flags & FN_DB) || no_temp_shadow(&f)) {
        if (outermost && db->ext_anchor_retry) cache_connect_now(db);
        db->ext_depth++;
        e->def->fn(&f, argc, argv);
        db->ext_depth--;
    }
    if (f.nomem) sqlite3_result_error_nomem(ctx);
    if (outermost && !db->owns_conn) {
        if (db->ext_cache) tc_stmt_idle(db);
        else tc_stmt_flush(db);
    }
}

/*
 * tocsin's statements name their tables without a schema, and SQLite looks a
 * name up in `temp` before `main`: a TEMP table or view of the connection
 * named like one of tocsin's (CREATE TEMP TABLE _tocsin_jobs AS SELECT * FROM
 * _tocsin_jobs, to look at a copy) would take every read and write meant for
 * it -- claims, acks and enqueues made there vanish with the connection. A
 * call refuses to run while one exists (any case: SQLite's names are
 * case-insensitive). The names are compared here, in C, so that a function
 * of the application named like or glob cannot hide one. 0 (reported): one
 * exists, or the check failed.
 */
static const char SQL_TEMP_NAMES[] =
    "SELECT type, name FROM temp.sqlite_master WHERE type IN ('table', 'view')";

static int no_temp_shadow(fn_ctx *f) {
    static const char prefix[] = "_tocsin_";
    tocsin_db *db = f->db;
    sqlite3_stmt *st = NULL;
    int rc;
    /* preparing reads the schema, main's too (a lock another process may hold
     * for a moment): tc_prepare and tc_step wait as every call of ours does */
    tc_clear(db);
    st = tc_stmt_rc(db, SQL_TEMP_NAMES, &rc);
    while (st && (rc = tc_step(db, st)) == SQLITE_ROW) {
        const char *type = (const char *)sqlite3_column_text(st, 0);
        const char *name = (const char *)sqlite3_column_text(st, 1);
        char *ident;
        rc = SQLITE_OK; /* another row: unrelated TEMP tables and views are fine */
        if (!type || !name || sqlite3_strnicmp(name, prefix, (int)sizeof prefix - 1) != 0) continue;
        ident = sqlite3_mprintf("%w", name); /* quotes doubled: the hint runs as written */
        fail_msg(f, SQLITE_ERROR,
                 "the connection has a TEMP %s named %.*s, which hides tocsin's own tables "
                 "(SQLite looks a name up in temp before main: what tocsin wrote would go to it "
                 "and vanish with the connection); drop it (DROP %s temp.\"%.*s\") or rename it",
                 type, quote_len(name, 200), name, strcmp(type, "view") == 0 ? "VIEW" : "TABLE",
                 quote_len(ident ? ident : name, 200), ident ? ident : name);
        sqlite3_free(ident);
        sqlite3_reset(st);
        return 0;
    }
    if (st) sqlite3_reset(st);
    if (rc != SQLITE_DONE) return fail(f, tc_sqlerr(db, rc, "read the connection's TEMP schema"));
    return 1;
}

/* The extension's wrapper lives as long as any of its functions: each
 * registration holds a reference, each xDestroy drops one. */
static void ext_unref(void *p) {
    tocsin_db *db = ((ext_fn *)p)->db;
    if (--db->ext_refs == 0) tocsin_close(db);
}

static int register_all(tocsin_db *db, int refcounted) {
    ext_fn *fns;
    size_t i;
    int n, rc;
    if (!db->ext_fns && !(db->ext_fns = sqlite3_malloc64(N_FUNCTIONS * sizeof(ext_fn))))
        return SQLITE_NOMEM;
    fns = db->ext_fns;
    for (i = 0; i < N_FUNCTIONS; i++) {
        fns[i].db = db;
        fns[i].def = &FUNCTIONS[i];
        for (n = FUNCTIONS[i].min_args; n <= FUNCTIONS[i].max_args; n++) {
            if (refcounted) db->ext_refs++;
            rc = sqlite3_create_function_v2(db->conn, FUNCTIONS[i].name, n,
                                            SQLITE_UTF8 | SQLITE_DIRECTONLY, &fns[i], dispatch,
                                            NULL, NULL, refcounted ? ext_unref : NULL);
            if (rc != SQLITE_OK) return rc; /* xDestroy already ran on failure */
        }
    }
    return SQLITE_OK;
}

int tocsin_register_sql(tocsin_db *db) {
    int rc;
    if (!db) return TOCSIN_INVALID;
    tc_clear(db);
    rc = register_all(db, 0);
    return rc == SQLITE_OK ? TOCSIN_OK : tc_sqlerr(db, rc, "register SQL functions");
}

/*
 * The statement cache on a host's connection. sqlite3_close() refuses to
 * close a connection that still has prepared statements ("unfinalized
 * statements"; sqlite3_close_v2() leaves it a zombie, never freed), so the
 * statements of a call used to be finalized at its end -- and a call spent
 * three quarters of its instructions preparing them again. But
 * sqlite3_close() disconnects every virtual table before it looks for
 * statements, so that a virtual table can finalize its own: the eponymous
 * table _tocsin_cache (no rows), connected when the functions are registered,
 * empties the cache from its xDisconnect. While it is connected, a call only
 * resets the statements it used (none stays running: a running statement
 * would keep a read transaction open on the host's connection). When it could
 * not be connected (an authorizer, or a table of the host's with its name),
 * or was disconnected before the close, calls finalize their statements as
 * before.
 */
typedef struct {
    sqlite3_vtab base;
    tocsin_db *db;
} cache_vtab;

static int cache_connect(sqlite3 *conn, void *aux, int argc, const char *const *argv,
                         sqlite3_vtab **out, char **err) {
    cache_vtab *v;
    int rc;
    (void)argc;
    (void)argv;
    (void)err;
    if ((rc = sqlite3_declare_vtab(conn, "CREATE TABLE x(unused)")) != SQLITE_OK) return rc;
    if (!(v = sqlite3_malloc(sizeof *v))) return SQLITE_NOMEM;
    memset(v, 0, sizeof *v);
    v->db = aux;
    v->db->ext_cache = 1;
    v->db->ext_refs++; /* SQLite may defer the disconnect past the module's end
                          (a second load replaces the module): the table keeps the wrapper */
    *out = &v->base;
    return SQLITE_OK;
}

static void cache_unref(void *p);

static int cache_disconnect(sqlite3_vtab *vt) {
    cache_vtab *v = (cache_vtab *)vt;
    tocsin_db *db = v->db;
    db->ext_cache = 0;
    tc_stmt_flush_host(db); /* the host may have finalized some (tc_stmt_check) */
    sqlite3_free(v);
    cache_unref(db);
    return SQLITE_OK;
}

static int cache_best_index(sqlite3_vtab *vt, sqlite3_index_info *info) {
    (void)vt;
    info->estimatedCost = 1;
    info->estimatedRows = 0;
    return SQLITE_OK;
}

static int cache_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **out) {
    sqlite3_vtab_cursor *c = sqlite3_malloc(sizeof *c);
    (void)vt;
    if (!c) return SQLITE_NOMEM;
    memset(c, 0, sizeof *c);
    *out = c;
    return SQLITE_OK;
}

static int cache_close(sqlite3_vtab_cursor *c) {
    sqlite3_free(c);
    return SQLITE_OK;
}

static int cache_filter(sqlite3_vtab_cursor *c, int idx, const char *idx_str, int argc, sqlite3_value **argv) {
    (void)c;
    (void)idx;
    (void)idx_str;
    (void)argc;
    (void)argv;
    return SQLITE_OK;
}

static int cache_next(sqlite3_vtab_cursor *c) {
    (void)c;
    return SQLITE_OK;
}

static int cache_eof(sqlite3_vtab_cursor *c) {
    (void)c;
    return 1; /* no rows */
}

static int cache_column(sqlite3_vtab_cursor *c, sqlite3_context *ctx, int i) {
    (void)c;
    (void)i;
    sqlite3_result_null(ctx);
    return SQLITE_OK;
}

static int cache_rowid(sqlite3_vtab_cursor *c, sqlite3_int64 *out) {
    (void)c;
    *out = 0;
    return SQLITE_OK;
}

/* xCreate NULL: eponymous only (no CREATE VIRTUAL TABLE of it). */
static const sqlite3_module cache_module = {
    .iVersion = 0,
    .xConnect = cache_connect,
    .xBestIndex = cache_best_index,
    .xDisconnect = cache_disconnect,
    .xOpen = cache_open,
    .xClose = cache_close,
    .xFilter = cache_filter,
    .xNext = cache_next,
    .xEof = cache_eof,
    .xColumn = cache_column,
    .xRowid = cache_rowid,
};

static void cache_unref(void *p) {
    tocsin_db *db = p;
    if (--db->ext_refs == 0) tocsin_close(db);
}

/*
 * Connects _tocsin_cache: preparing a statement that names it reads the
 * schema. On a connection that is being opened (sqlite3_auto_extension) there
 * is no busy handler yet, so a writer of another connection holding its lock
 * (a rollback journal's, a WAL's last close checkpointing) makes it fail with
 * SQLITE_BUSY; the next call, under the host's busy handler, tries again.
 * A failure must not stay the connection's error: sqlite3_open_v2 returns the
 * connection's error code after its automatic extensions ran, so a BUSY left
 * here failed the open itself. A successful prepare of a statement that reads
 * no schema sets the code back to SQLITE_OK.
 */
static void cache_connect_now(tocsin_db *db) {
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db->conn, "SELECT 1 FROM _tocsin_cache", -1, &st, NULL);
    if (rc == SQLITE_OK) sqlite3_step(st);
    sqlite3_finalize(st);
    rc &= 0xff;
    db->ext_anchor_retry = !db->ext_cache && (rc == SQLITE_BUSY || rc == SQLITE_LOCKED);
    if (rc != SQLITE_OK) {
        st = NULL;
        sqlite3_prepare_v2(db->conn, "SELECT 1", -1, &st, NULL);
        sqlite3_finalize(st);
    }
}

/* Registers and connects _tocsin_cache; a failure only leaves the cache per call. */
static void cache_anchor(tocsin_db *db) {
    db->ext_refs++; /* the module's: dropped when it goes (cache_unref) */
    if (sqlite3_create_module_v2(db->conn, "_tocsin_cache", &cache_module, db, cache_unref) != SQLITE_OK)
        return; /* xDestroy already ran */
    cache_connect_now(db);
}

/* Wraps `conn` and registers the SQL functions on it; the wrapper lives as long as
 * the functions (freed with the connection). The body of both entry points. */
static int sql_entry(sqlite3 *conn, char **pzErrMsg) {
    tocsin_db *db = NULL;
    int rc;
    rc = tocsin_wrap(&db, conn, NULL);
    if (rc != TOCSIN_OK) {
        if (pzErrMsg) *pzErrMsg = sqlite3_mprintf("tocsin: %s", tocsin_errmsg(db));
        tocsin_close(db);
        return SQLITE_ERROR;
    }
    db->ext_refs = 1; /* held until registration is done */
    rc = register_all(db, 1);
    if (rc == SQLITE_OK) cache_anchor(db);
    if (--db->ext_refs == 0) tocsin_close(db);
    if (rc != SQLITE_OK && pzErrMsg)
        *pzErrMsg = sqlite3_mprintf("tocsin: cannot register SQL functions: %s",
                                    sqlite3_errstr(rc));
    return rc;
}

#ifdef TOCSIN_EXTENSION
TOCSIN_EXPORT
int sqlite3_tocsin_init(sqlite3 *conn, char **pzErrMsg, const sqlite3_api_routines *pApi) {
    /* One SQLite per process (docs/architecture.md): the core runs on the
     * routine table of the first SQLite that loaded it -- its own connections
     * included. A second copy of SQLite loading the same module would make
     * two copies run on one file (their POSIX locks drop each other's):
     * refuse it instead. */
    if (sqlite3_api && sqlite3_api != pApi) {
        if (pzErrMsg)
            *pzErrMsg = pApi->mprintf(
                "tocsin: refusing to load into a second copy of SQLite in this process "
                "(tocsin already runs on SQLite %s, this connection's is %s): two copies "
                "of SQLite on one database file can corrupt it; use one SQLite driver",
                sqlite3_api->libversion(), pApi->libversion());
        return SQLITE_ERROR;
    }
    SQLITE_EXTENSION_INIT2(pApi);
    tc_pin_self();
    return sql_entry(conn, pzErrMsg);
}
#else
/* The library build runs on the SQLite it links, so pApi is unused: hosts of the same
 * copy (sqlite3_auto_extension, mattn/go-sqlite3 -tags libsqlite3) get the SQL surface
 * without loading tocsin.so. */
int tocsin_sql_init(struct sqlite3 *conn, char **pzErrMsg, const void *pApi) {
    (void)pApi;
    return sql_entry(conn, pzErrMsg);
}
#endif
