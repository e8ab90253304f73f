/*
 * Cron expressions (pure C, no SQL): parsing and "next fire strictly after".
 *
 * Syntax: 5 fields (minute hour day-of-month month day-of-week) or 6 with a
 * leading seconds field; each field a comma list of `*`, `N`, `A-B`, each
 * optionally followed by a step `/S`, or `A/S` (from A to the field's maximum); month and weekday names
 * (JAN..DEC, SUN..SAT, any case; weekday 7 is Sunday too); macros @yearly
 * @annually @monthly @weekly @daily @midnight @hourly; `@every <duration>`
 * with units d h m s ms (`90s`, `1h30m`, `250ms`).
 *
 * Vixie's day rule: when both the day-of-month and the day-of-week field are
 * restricted (neither begins with `*`), a day matches if EITHER matches;
 * otherwise both must.
 *
 * Local time (docs/sql.md, "Cron and daylight saving time"), Vixie's
 * policy: an expression whose minute or hour field begins with `*` is a
 * "wildcard" one and follows real time (wall times skipped by a spring-forward
 * gap do not fire; wall times repeated by a fall-back fire in both passes). A
 * "fixed-time" expression fires each matching wall time once: a wall time in
 * a gap fires at the first instant after the gap, a repeated wall time fires
 * at its first occurrence only.
 */
#include "internal.h"

#include <stdio.h>

struct tocsin_cron {
    uint64_t sec, min; /* bit v: value v */
    uint32_t hour;     /* bits 0..23 */
    uint32_t dom;      /* bits 1..31 */
    uint32_t mon;      /* bits 1..12 */
    uint32_t dow;      /* bits 0..6 (Sunday = 0) */
    int dom_star, dow_star;
    int wildcard;     /* minute or hour field begins with '*' */
    int64_t every_ms; /* > 0: an @every expression */
};

enum { CF_SEC, CF_MIN, CF_HOUR, CF_DOM, CF_MON, CF_DOW };

static const struct {
    const char *name;
    int lo, hi;
} CRON_FIELDS[] = {{"second", 0, 59},      {"minute", 0, 59}, {"hour", 0, 23},
                   {"day-of-month", 1, 31}, {"month", 1, 12},  {"day-of-week", 0, 7}};

static const char *const CRON_MONTHS[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                          "jul", "aug", "sep", "oct", "nov", "dec"};
static const char *const CRON_DAYS[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

static const struct {
    const char *name, *expr;
} CRON_MACROS[] = {{"@yearly", "0 0 1 1 *"},  {"@annually", "0 0 1 1 *"},
                   {"@monthly", "0 0 1 * *"}, {"@weekly", "0 0 * * 0"},
                   {"@daily", "0 0 * * *"},   {"@midnight", "0 0 * * *"},
                   {"@hourly", "0 * * * *"}};

#define CRON_MAX_LEN 1024
#define CRON_MAX_EVERY_MS (100LL * 366 * 86400 * 1000) /* about a century */
#define CRON_MAX_AFTER_MS 253402300799999LL            /* 9999-12-31T23:59:59.999Z */
#define CRON_HORIZON_YEARS 60 /* a weekday/day-of-month pairing recurs well within this */

static int cron_fail(char *err, size_t n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int cron_fail(char *err, size_t n, const char *fmt, ...) {
    if (err && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, n, fmt, ap);
        va_end(ap);
    }
    return TOCSIN_INVALID;
}

/* "unexpected character" at p (< end), quoting the whole UTF-8 character: one
 * byte of a multi-byte one would leave the message invalid UTF-8 (an error a
 * Python or Node caller cannot even decode). A control byte, or one that
 * begins no valid sequence, is shown as its value. */
static int cron_unexpected(char *err, size_t n, const char *name, const char *p, const char *end) {
    unsigned char c = (unsigned char)*p;
    int len = c < 0x80 ? 1 : c >= 0xf8 ? 0 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0, i;
    if (len > end - p) len = 0;
    for (i = 1; i < len; i++)
        if (((unsigned char)p[i] & 0xc0) != 0x80) len = 0;
    if (len == 0 || c < 0x20 || c == 0x7f)
        return cron_fail(err, n, "%s field: unexpected byte 0x%02x", name, c);
    return cron_fail(err, n, "%s field: unexpected character '%.*s'", name, len, p);
}

static int cron_lower(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }
static int cron_is_space(int c) { return c == ' ' || c == '\t'; }
static int cron_is_digit(int c) { return c >= '0' && c <= '9'; }
static int cron_is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* Case-insensitive comparison of s[0..n) with the NUL-terminated word w. */
static int cron_word_eq(const char *s, size_t n, const char *w) {
    size_t i;
    for (i = 0; i < n; i++)
        if (!w[i] || cron_lower((unsigned char)s[i]) != w[i]) return 0;
    return w[n] == 0;
}

/* A number (at most 6 digits) at *pp; advances. */
static int cron_number(const char **pp, const char *end, int field, int *out, char *err,
                       size_t n) {
    const char *p = *pp;
    int v = 0, digits = 0;
    while (p < end && cron_is_digit((unsigned char)*p)) {
        if (++digits > 6)
            return cron_fail(err, n, "%s field: number too long", CRON_FIELDS[field].name);
        v = v * 10 + (*p++ - '0');
    }
    if (!digits) {
        if (p < end) return cron_unexpected(err, n, CRON_FIELDS[field].name, p, end);
        return cron_fail(err, n, "%s field: a number is missing", CRON_FIELDS[field].name);
    }
    *pp = p;
    *out = v;
    return TOCSIN_OK;
}

/* A value (number or name) at *pp, range-checked; advances. */
static int cron_value(const char **pp, const char *end, int field, int *out, char *err,
                      size_t n) {
    const char *p = *pp, *q = p;
    int v, rc;
    if (p < end && cron_is_alpha((unsigned char)*p)) {
        const char *const *names = field == CF_MON ? CRON_MONTHS : CRON_DAYS;
        int count = field == CF_MON ? 12 : 7, i;
        while (q < end && cron_is_alpha((unsigned char)*q)) q++;
        if (field != CF_MON && field != CF_DOW)
            return cron_fail(err, n, "%s field: names are allowed only in the month and "
                                     "day-of-week fields (got \"%.*s\")",
                             CRON_FIELDS[field].name, (int)(q - p > 20 ? 20 : q - p), p);
        for (i = 0; i < count; i++)
            if (cron_word_eq(p, (size_t)(q - p), names[i])) break;
        if (i == count)
            return cron_fail(err, n, "%s field: unknown name \"%.*s\"", CRON_FIELDS[field].name,
                             (int)(q - p > 20 ? 20 : q - p), p);
        *out = field == CF_MON ? i + 1 : i;
        *pp = q;
        return TOCSIN_OK;
    }
    if ((rc = cron_number(pp, end, field, &v, err, n)) != TOCSIN_OK) return rc;
    if (v < CRON_FIELDS[field].lo || v > CRON_FIELDS[field].hi)
        return cron_fail(err, n, "%s field: %d is out of range %d-%d", CRON_FIELDS[field].name,
                         v, CRON_FIELDS[field].lo, CRON_FIELDS[field].hi);
    *out = v;
    return TOCSIN_OK;
}

/* Parses one field s[0..len) into a bit mask. */
static int cron_field(const char *s, size_t len, int field, uint64_t *mask, int *star,
                      char *err, size_t n) {
    const char *p = s, *end = s + len;
    int lo_f = CRON_FIELDS[field].lo, hi_f = field == CF_DOW ? 6 : CRON_FIELDS[field].hi;
    int rc;
    *mask = 0;
    *star = len > 0 && s[0] == '*';
    for (;;) {
        int lo, hi, step = 1, ranged = 0, v;
        const char *item_end = p;
        while (item_end < end && *item_end != ',') item_end++;
        if (item_end == p)
            return cron_fail(err, n, "%s field: empty list item", CRON_FIELDS[field].name);
        if (*p == '*') {
            lo = lo_f;
            hi = hi_f;
            ranged = 1;
            p++;
        } else {
            if ((rc = cron_value(&p, item_end, field, &lo, err, n)) != TOCSIN_OK) return rc;
            hi = lo;
            if (p < item_end && *p == '-') {
                const char *hi_at = ++p;
                if ((rc = cron_value(&p, item_end, field, &hi, err, n)) != TOCSIN_OK) return rc;
                /* SUN ends a weekday range as 7 (FRI-SUN, MON-SUN): the name has no other
                 * reading, and 7 is Sunday too */
                if (field == CF_DOW && hi == 0 && lo > 0 && cron_is_alpha((unsigned char)*hi_at))
                    hi = 7;
                if (hi < lo)
                    return cron_fail(err, n, "%s field: range %d-%d is backwards",
                                     CRON_FIELDS[field].name, lo, hi);
                ranged = 1;
            }
        }
        if (p < item_end && *p == '/') {
            int span = CRON_FIELDS[field].hi - CRON_FIELDS[field].lo + (field == CF_DOW ? 0 : 1);
            p++;
            if ((rc = cron_number(&p, item_end, field, &step, err, n)) != TOCSIN_OK) return rc;
            if (step < 1 || step > span)
                return cron_fail(err, n, "%s field: step %d is out of range 1-%d",
                                 CRON_FIELDS[field].name, step, span);
            if (!ranged) hi = CRON_FIELDS[field].hi; /* A/S: from A to the maximum */
        }
        if (p < item_end) return cron_unexpected(err, n, CRON_FIELDS[field].name, p, item_end);
        for (v = lo; v <= hi; v += step) *mask |= 1ULL << (field == CF_DOW && v == 7 ? 0 : v);
        if (item_end == end) break;
        p = item_end + 1;
        if (p == end)
            return cron_fail(err, n, "%s field: empty list item", CRON_FIELDS[field].name);
    }
    return TOCSIN_OK;
}

/* "1h30m", "90s", "250ms", "2d": a positive duration in ms. */
static int cron_every(const char *p, const char *end, int64_t *out, char *err, size_t n) {
    int64_t total = 0;
    while (p < end && cron_is_space((unsigned char)*p)) p++;
    while (end > p && cron_is_space((unsigned char)end[-1])) end--;
    if (p == end) return cron_fail(err, n, "@every: a duration is missing (e.g. \"@every 5m\")");
    while (p < end) {
        int64_t v = 0, unit;
        int digits = 0;
        while (p < end && cron_is_digit((unsigned char)*p)) {
            digits++;
            /* bounded by value, not by digits: 36600 days in ms has 13 */
            if ((v = v * 10 + (*p++ - '0')) > CRON_MAX_EVERY_MS)
                return cron_fail(err, n, "@every: the duration exceeds 100 years");
        }
        if (!digits)
            return cron_fail(err, n, "@every: expected a number at \"%.*s\"",
                             (int)(end - p > 20 ? 20 : end - p), p);
        if (end - p >= 2 && p[0] == 'm' && p[1] == 's') {
            unit = 1;
            p += 2;
        } else if (p < end && *p == 's') {
            unit = 1000;
            p++;
        } else if (p < end && *p == 'm') {
            unit = 60000;
            p++;
        } else if (p < end && *p == 'h') {
            unit = 3600000;
            p++;
        } else if (p < end && *p == 'd') {
            unit = 86400000;
            p++;
        } else {
            return cron_fail(err, n, "@every: a unit (d, h, m, s or ms) must follow %lld",
                             (long long)v);
        }
        if (v > CRON_MAX_EVERY_MS / unit || (total += v * unit) > CRON_MAX_EVERY_MS)
            return cron_fail(err, n, "@every: the duration exceeds 100 years");
    }
    if (total < 1) return cron_fail(err, n, "@every: the duration must be > 0");
    *out = total;
    return TOCSIN_OK;
}

static int cron_leap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

static int cron_mdays(int64_t y, int m) {
    static const int D[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && cron_leap(y) ? 29 : D[m - 1];
}

/* Days since 1970-01-01 of a proleptic Gregorian date (era arithmetic). */
static int64_t cron_days_from_civil(int64_t y, int m, int d) {
    int64_t era, yoe, doy, doe;
    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void cron_civil_from_days(int64_t z, int64_t *y, int *m, int *d) {
    int64_t era, doe, yoe, doy, mp;
    z += 719468;
    era = (z >= 0 ? z : z - 146096) / 146097;
    doe = z - era * 146097;
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static int64_t cron_floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

static int cron_parse_fields(tocsin_cron *c, const char *expr, char *err, size_t n) {
    const char *f[7], *p = expr;
    size_t len[7];
    int nf = 0, i, rc, first, star;
    uint64_t mask;
    while (*p) {
        while (cron_is_space((unsigned char)*p)) p++;
        if (!*p) break;
        if (nf == 6) return cron_fail(err, n, "expected 5 or 6 fields, got more than 6");
        f[nf] = p;
        while (*p && !cron_is_space((unsigned char)*p)) p++;
        len[nf] = (size_t)(p - f[nf]);
        nf++;
    }
    if (nf != 5 && nf != 6)
        return cron_fail(err, n, "expected 5 or 6 fields (minute hour day-of-month month "
                                 "day-of-week, optionally led by seconds), got %d", nf);
    first = nf == 6 ? CF_SEC : CF_MIN;
    /* six fields whose last is a year (Quartz and some crons end with one) */
    if (nf == 6 && len[5] == 4 && strspn(f[5], "0123456789") == 4 && f[5][0] != '0')
        return cron_fail(err, n, "the sixth field \"%.4s\" reads as a year, and cron here has no year "
                                 "field: six fields are second minute hour day-of-month month day-of-week",
                         f[5]);
    c->sec = 1; /* 5 fields: second 0 */
    for (i = 0; i < nf; i++) {
        int field = first + i;
        if ((rc = cron_field(f[i], len[i], field, &mask, &star, err, n)) != TOCSIN_OK) return rc;
        switch (field) {
        case CF_SEC: c->sec = mask; break;
        case CF_MIN: c->min = mask; c->wildcard |= star; break;
        case CF_HOUR: c->hour = (uint32_t)mask; c->wildcard |= star; break;
        case CF_DOM: c->dom = (uint32_t)mask; c->dom_star = star; break;
        case CF_MON: c->mon = (uint32_t)mask; break;
        default: c->dow = (uint32_t)mask; c->dow_star = star; break;
        }
    }
    /* When the weekday does not widen the match, some listed day must exist
     * in some listed month (February counts 29), or the expression never fires. */
    if (c->dow_star) {
        int m, d, ok = 0;
        for (m = 1; m <= 12 && !ok; m++)
            if (c->mon >> m & 1)
                for (d = 1; d <= cron_mdays(2000, m) && !ok; d++) ok = c->dom >> d & 1;
        if (!ok)
            return cron_fail(err, n, "day-of-month field: no listed day occurs in the listed "
                                     "months, so the expression never fires");
    }
    return TOCSIN_OK;
}

int tocsin_cron_parse(tocsin_cron **out, const char *expr, char *err, size_t err_size) {
    tocsin_cron *c;
    const char *p, *w;
    size_t len, wl, i;
    int rc;
    if (err && err_size) err[0] = 0;
    if (!out) return cron_fail(err, err_size, "out must not be NULL");
    *out = NULL;
    if (!expr) return cron_fail(err, err_size, "the expression must not be NULL");
    len = strlen(expr);
    if (len > CRON_MAX_LEN)
        return cron_fail(err, err_size, "the expression is %zu bytes long; the limit is %d", len,
                         CRON_MAX_LEN);
    for (i = 0; i < len; i++)
        if ((unsigned char)expr[i] < 0x20 && expr[i] != '\t')
            return cron_fail(err, err_size, "the expression must not contain control characters");
    if (!(c = sqlite3_malloc(sizeof *c))) {
        cron_fail(err, err_size, "out of memory");
        return TOCSIN_NOMEM;
    }
    memset(c, 0, sizeof *c);
    p = expr;
    while (cron_is_space((unsigned char)*p)) p++;
    if (!*p) {
        sqlite3_free(c);
        return cron_fail(err, err_size, "the expression is empty");
    }
    if (*p == '@') {
        const char *rest;
        for (w = p; *w && !cron_is_space((unsigned char)*w); w++) {
        }
        wl = (size_t)(w - p);
        rest = w;
        if (cron_word_eq(p, wl, "@every")) {
            rc = cron_every(rest, expr + len, &c->every_ms, err, err_size);
        } else {
            for (i = 0; i < sizeof CRON_MACROS / sizeof CRON_MACROS[0]; i++)
                if (cron_word_eq(p, wl, CRON_MACROS[i].name)) break;
            if (i == sizeof CRON_MACROS / sizeof CRON_MACROS[0]) {
                rc = cron_fail(err, err_size, "unknown macro \"%.*s\" (known: @yearly @annually "
                                              "@monthly @weekly @daily @midnight @hourly @every)",
                               (int)(wl > 20 ? 20 : wl), p);
            } else {
                while (cron_is_space((unsigned char)*rest)) rest++;
                rc = *rest ? cron_fail(err, err_size, "%s takes no arguments", CRON_MACROS[i].name)
                           : cron_parse_fields(c, CRON_MACROS[i].expr, err, err_size);
            }
        }
    } else {
        rc = cron_parse_fields(c, p, err, err_size);
    }
    if (rc != TOCSIN_OK) {
        sqlite3_free(c);
        return rc;
    }
    *out = c;
    return TOCSIN_OK;
}

void tocsin_cron_free(tocsin_cron *cron) { sqlite3_free(cron); }

static int cron_day_ok(const tocsin_cron *c, int64_t y, int m, int d) {
    int wd = (int)(((cron_days_from_civil(y, m, d) + 4) % 7 + 7) % 7);
    int dom = (int)(c->dom >> d & 1), dow = (int)(c->dow >> wd & 1);
    return (c->dom_star || c->dow_star) ? dom && dow : dom || dow;
}

/* Lowest set bit >= v (up to hi), or -1. */
static int cron_next_bit(uint64_t mask, int v, int hi) {
    for (; v <= hi; v++)
        if (mask >> v & 1) return v;
    return -1;
}

/*
 * The first matching "naive" time (civil time read as if it were UTC, in
 * seconds) strictly after `lower`. 0 when none comes before the horizon.
 */
static int cron_naive_next(const tocsin_cron *c, int64_t lower, int64_t *out) {
    int64_t t = lower + 1, days = cron_floor_div(t, 86400), sod = t - days * 86400, y, ylimit;
    int m, d, h = (int)(sod / 3600), mi = (int)(sod / 60 % 60), s = (int)(sod % 60), v;
    cron_civil_from_days(days, &y, &m, &d);
    ylimit = y + CRON_HORIZON_YEARS;
    if (ylimit > 9999) ylimit = 9999;
    for (;;) {
        /* carry overflowing fields upward */
        if (s > 59) { s = 0; mi++; }
        if (mi > 59) { mi = 0; h++; }
        if (h > 23) { h = 0; d++; }
        if (m > 12) { m = 1; y++; } /* a month skip sets m = 13, d = 1 */
        if (d > cron_mdays(y, m)) { d = 1; m++; }
        if (m > 12) { m = 1; y++; }
        if (y > ylimit) return 0;
        if (!(c->mon >> m & 1)) {
            v = cron_next_bit(c->mon, m + 1, 12);
            if (v < 0) { m = 13; } else { m = v; }
            d = 1; h = mi = s = 0;
            continue;
        }
        if (!cron_day_ok(c, y, m, d)) { d++; h = mi = s = 0; continue; }
        if ((v = cron_next_bit(c->hour, h, 23)) != h) {
            if (v < 0) { h = 24; } else { h = v; }
            mi = s = 0;
            continue;
        }
        if ((v = cron_next_bit(c->min, mi, 59)) != mi) {
            if (v < 0) { mi = 60; } else { mi = v; }
            s = 0;
            continue;
        }
        if ((v = cron_next_bit(c->sec, s, 59)) != s) {
            if (v < 0) { s = 60; } else { s = v; }
            continue;
        }
        *out = cron_days_from_civil(y, m, d) * 86400 + h * 3600 + mi * 60 + s;
        return 1;
    }
}

/* The first instant in (a, b] whose local offset differs from `off` (the
 * offset at a), probing a day at a time (zones change offset at most once a
 * day). 0: none. */
static int64_t cron_first_change(int64_t a, int64_t b, int64_t off) {
    int64_t x = a, y, o;
    while (x < b) {
        y = x + 86400 < b ? x + 86400 : b;
        if (!tc_local_offset(y, &o)) return 0;
        if (o != off) {
            int64_t lo = x, hi = y;
            while (hi - lo > 1) {
                int64_t mid = lo + (hi - lo) / 2;
                if (!tc_local_offset(mid, &o)) return 0;
                if (o != off) hi = mid; else lo = mid;
            }
            return hi;
        }
        x = y;
    }
    return 0;
}

/* Local-time next fire (seconds) strictly after `lower`, following the DST
 * policy at the top. Walks segments of constant UTC offset: `from` is the
 * segment's first instant (its offset `off`), `lw` the wall time candidates
 * must exceed. */
static int cron_local_next(const tocsin_cron *c, int64_t lower, int64_t *out) {
    int64_t from = lower, off, prev, skip_wall = INT64_MIN, lw, w, cand, t, o2;
    int iter;
    if (!tc_local_offset(from, &off)) return 0;
    /* Starting inside the second pass of a repeated hour? */
    if (tc_local_offset(from - 86400, &prev) && prev > off) {
        int64_t tr = cron_first_change(from - 86400, from, prev);
        if (tr) skip_wall = tr + prev;
    }
    lw = from + off;
    for (iter = 0; iter < 400; iter++) {
        if (!c->wildcard && skip_wall != INT64_MIN && lw < skip_wall - 1) lw = skip_wall - 1;
        if (!cron_naive_next(c, lw, &w)) return 0;
        cand = w - off;
        if (!(t = cron_first_change(from, cand, off))) {
            *out = cand;
            return 1;
        }
        if (!tc_local_offset(t, &o2)) return 0;
        if (o2 > off) {
            /* spring forward: wall times [t+off, t+o2) do not exist */
            skip_wall = INT64_MIN;
            if (!c->wildcard && cron_naive_next(c, t + off - 1, &w) && w < t + o2) {
                *out = t;
                return 1;
            }
        } else {
            /* fall back: wall times [t+o2, t+off) come a second time */
            skip_wall = t + off;
        }
        from = t;
        off = o2;
        lw = t - 1 + o2;
    }
    return 0;
}

int tocsin_cron_next(int64_t *out_next_ms, const tocsin_cron *cron, int64_t after_ms,
                     int local_time) {
    int64_t lower, s;
    int found;
    if (!out_next_ms || !cron) return TOCSIN_INVALID;
    *out_next_ms = -1;
    if (after_ms < 0 || after_ms > CRON_MAX_AFTER_MS) return TOCSIN_INVALID;
    if (cron->every_ms) {
        int64_t next = (after_ms / cron->every_ms + 1) * cron->every_ms;
        if (next > CRON_MAX_AFTER_MS) return TOCSIN_NOTFOUND;
        *out_next_ms = next;
        return TOCSIN_OK;
    }
    lower = after_ms / 1000; /* candidates are whole seconds s with s*1000 > after_ms */
    if (local_time) {
        tc_tz_reload();
        found = cron_local_next(cron, lower, &s);
    } else {
        found = cron_naive_next(cron, lower, &s);
    }
    if (!found || s * 1000 > CRON_MAX_AFTER_MS) return TOCSIN_NOTFOUND;
    *out_next_ms = s * 1000;
    return TOCSIN_OK;
}
