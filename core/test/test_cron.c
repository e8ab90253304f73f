/* Cron: parsing, next fire times (UTC and a local zone with DST), errors, fuzz corpus. */
#define _DEFAULT_SOURCE /* timegm, setenv */
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

#include "test.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t rng_s = 0x2545f4914f6cdd1dULL;
static uint64_t rng_next(void) {
    rng_s ^= rng_s << 13;
    rng_s ^= rng_s >> 7;
    rng_s ^= rng_s << 17;
    return rng_s;
}

/* "YYYY-MM-DDTHH:MM:SS[.mmm]Z" -> ms, through the C library (independent of cron.c). */
static int64_t iso(const char *s) {
    struct tm tm;
    int ms = 0;
    memset(&tm, 0, sizeof tm);
    if (sscanf(s, "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec) != 6) {
        fprintf(stderr, "bad test time %s\n", s);
        exit(2);
    }
    if (strchr(s, '.')) ms = atoi(strchr(s, '.') + 1);
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm) * 1000 + ms;
}

static char *fmt_ms(int64_t ms, char *buf) {
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, 40, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

/* next(expr, after) must be `want` ("none": no fire time). */
static void expect_next(const char *expr, const char *after, const char *want, int local,
                        int line) {
    tocsin_cron *c = NULL;
    char err[256], got_s[40], want_s[40];
    int64_t got = 0, w = strcmp(want, "none") == 0 ? -1 : iso(want);
    int rc = tocsin_cron_parse(&c, expr, err, sizeof err);
    if (rc != TOCSIN_OK) {
        t_failed++;
        fprintf(stderr, "FAIL line %d: parse \"%s\": %s\n", line, expr, err);
        return;
    }
    rc = tocsin_cron_next(&got, c, iso(after), local);
    tocsin_cron_free(c);
    if ((w < 0 && rc == TOCSIN_NOTFOUND && got == -1) || (w >= 0 && rc == TOCSIN_OK && got == w)) {
        t_passed++;
        return;
    }
    t_failed++;
    fprintf(stderr, "FAIL line %d: next(\"%s\", %s%s) = %s (rc %d), want %s\n", line, expr, after,
            local ? ", local" : "", got >= 0 ? fmt_ms(got, got_s) : "none", rc,
            w >= 0 ? fmt_ms(w, want_s) : "none");
}
#define NEXT(e, a, w) expect_next(e, a, w, 0, __LINE__)
#define NEXT_LOCAL(e, a, w) expect_next(e, a, w, 1, __LINE__)

static void utc_table(void) {
    /* strictly after, whole seconds */
    NEXT("* * * * *", "2024-01-01T00:00:00Z", "2024-01-01T00:01:00Z");
    NEXT("* * * * *", "2024-01-01T00:00:59.999Z", "2024-01-01T00:01:00Z");
    NEXT("* * * * * *", "2024-01-01T00:00:00.000Z", "2024-01-01T00:00:01Z");
    NEXT("* * * * * *", "2024-01-01T00:00:00.001Z", "2024-01-01T00:00:01Z");
    NEXT("30 * * * * *", "2024-01-01T00:00:30Z", "2024-01-01T00:01:30Z");
    NEXT("*/15 * * * * *", "2024-01-01T00:00:00Z", "2024-01-01T00:00:15Z");
    NEXT("0 0 * * * *", "2024-01-01T23:30:00Z", "2024-01-02T00:00:00Z");
    /* year and month ends */
    NEXT("0 0 * * *", "2024-12-31T12:00:00Z", "2025-01-01T00:00:00Z");
    NEXT("59 23 31 12 *", "2024-01-01T00:00:00Z", "2024-12-31T23:59:00Z");
    NEXT("0 0 31 * *", "2024-04-01T00:00:00Z", "2024-05-31T00:00:00Z");
    NEXT("0 0 30 * *", "2024-01-31T00:00:00Z", "2024-03-30T00:00:00Z");
    NEXT("0 0 31 1,3 *", "2024-01-31T00:00:00Z", "2024-03-31T00:00:00Z");
    /* leap years: 2100 is not one, 2000 was */
    NEXT("0 0 29 2 *", "2024-03-01T00:00:00Z", "2028-02-29T00:00:00Z");
    NEXT("0 0 29 2 *", "2023-01-01T00:00:00Z", "2024-02-29T00:00:00Z");
    NEXT("0 0 29 2 *", "2096-03-01T00:00:00Z", "2104-02-29T00:00:00Z");
    NEXT("0 0 29 2 *", "1999-03-01T00:00:00Z", "2000-02-29T00:00:00Z");
    NEXT("0 12 28-31 2 *", "2023-02-28T12:00:00Z", "2024-02-28T12:00:00Z");
    /* Vixie rule: both restricted -> either matches */
    NEXT("0 0 13 * FRI", "2024-01-01T00:00:00Z", "2024-01-05T00:00:00Z");
    NEXT("0 0 13 * FRI", "2024-01-12T00:00:00Z", "2024-01-13T00:00:00Z");
    NEXT("0 0 29 2 MON", "2024-02-27T00:00:00Z", "2024-02-29T00:00:00Z");
    NEXT("0 0 29 2 MON", "2024-02-29T00:00:00Z", "2025-02-03T00:00:00Z");
    /* one field starts with '*': both must match */
    NEXT("0 0 13 * *", "2024-01-01T00:00:00Z", "2024-01-13T00:00:00Z");
    NEXT("0 0 * * MON", "2024-01-01T00:00:00Z", "2024-01-08T00:00:00Z");
    NEXT("0 0 */10 * 1", "2024-01-01T00:00:00Z", "2024-03-11T00:00:00Z");
    NEXT("0 0 13 * */7", "2024-01-01T00:00:00Z", "2024-10-13T00:00:00Z");
    /* names, any case, ranges of names; 7 is Sunday */
    NEXT("30 9 * JAN-MAR mon-fri", "2024-03-29T10:00:00Z", "2025-01-01T09:30:00Z");
    NEXT("0 0 1 jun *", "2024-01-01T00:00:00Z", "2024-06-01T00:00:00Z");
    NEXT("0 12 * * 7", "2024-01-01T00:00:00Z", "2024-01-07T12:00:00Z");
    NEXT("0 12 * * 5-7", "2024-01-01T00:00:00Z", "2024-01-05T12:00:00Z");
    NEXT("0 12 * * 5-7", "2024-01-06T13:00:00Z", "2024-01-07T12:00:00Z");
    NEXT("0 12 * * Sat,sun", "2024-01-01T00:00:00Z", "2024-01-06T12:00:00Z");
    /* steps, ranges with steps, A/S, lists */
    NEXT("5-20/5 * * * *", "2024-01-01T00:20:00Z", "2024-01-01T01:05:00Z");
    NEXT("10/20 * * * *", "2024-01-01T00:30:00Z", "2024-01-01T00:50:00Z");
    NEXT("10/20 * * * *", "2024-01-01T00:50:00Z", "2024-01-01T01:10:00Z");
    NEXT("0 0,12 1,15 * *", "2024-01-01T00:00:00Z", "2024-01-01T12:00:00Z");
    NEXT("0 0,12 1,15 * *", "2024-01-01T12:00:00Z", "2024-01-15T00:00:00Z");
    NEXT("0 */6 * * *", "2024-01-01T19:00:00Z", "2024-01-02T00:00:00Z");
    NEXT("0 0 * */5 *", "2024-02-01T00:00:00Z", "2024-06-01T00:00:00Z");
    /* macros */
    NEXT("@yearly", "2024-06-01T00:00:00Z", "2025-01-01T00:00:00Z");
    NEXT("@annually", "2024-06-01T00:00:00Z", "2025-01-01T00:00:00Z");
    NEXT("@monthly", "2024-06-01T00:00:00Z", "2024-07-01T00:00:00Z");
    NEXT("@weekly", "2024-06-01T00:00:00Z", "2024-06-02T00:00:00Z");
    NEXT("@daily", "2024-06-01T00:00:00Z", "2024-06-02T00:00:00Z");
    NEXT("@MIDNIGHT", "2024-06-01T23:59:59.999Z", "2024-06-02T00:00:00Z");
    NEXT("@hourly", "2024-06-01T10:30:00Z", "2024-06-01T11:00:00Z");
    NEXT("  @daily  ", "2024-06-01T00:00:00Z", "2024-06-02T00:00:00Z");
    /* @every: multiples of the duration since the epoch */
    NEXT("@every 90s", "1970-01-01T00:00:00Z", "1970-01-01T00:01:30Z");
    NEXT("@every 90s", "1970-01-01T00:01:30Z", "1970-01-01T00:03:00Z");
    NEXT("@every 1h30m", "2024-01-01T00:00:00Z", "2024-01-01T01:30:00Z");
    NEXT("@every 5m", "2024-01-01T00:04:59.999Z", "2024-01-01T00:05:00Z");
    NEXT("@every 1d", "2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z");
    NEXT("@every 250ms", "1970-01-01T00:00:01Z", "1970-01-01T00:00:01.250Z");
    NEXT("@every 1m30s500ms", "1970-01-01T00:00:00Z", "1970-01-01T00:01:30.500Z");
    /* the longest duration in any unit: 36600 days has 13 digits in ms (and leading zeros are fine) */
    NEXT("@every 3162240000000ms", "1970-01-01T00:00:00Z", "2070-03-17T00:00:00Z");
    NEXT("@every 0000000000000000090s", "1970-01-01T00:00:00Z", "1970-01-01T00:01:30Z");
    /* the end of the range */
    NEXT("0 0 1 1 *", "9999-06-01T00:00:00Z", "none");
    NEXT("59 23 31 12 *", "9999-12-30T00:00:00Z", "9999-12-31T23:59:00Z");
    /* a 6-field expression keeps the seconds of the match */
    NEXT("15 30 9 * * *", "2024-01-01T09:30:15Z", "2024-01-02T09:30:15Z");
}

static void chains(void) {
    /* following next() from boundary to boundary counts the boundaries */
    tocsin_cron *c = NULL;
    int64_t t = iso("2024-01-01T00:00:00Z"), end = iso("2024-01-02T00:00:00Z");
    int n = 0;
    CHECK_EQ_I(tocsin_cron_parse(&c, "*/7 * * * *", NULL, 0), TOCSIN_OK);
    while (tocsin_cron_next(&t, c, t, 0) == TOCSIN_OK && t < end) n++;
    CHECK_EQ_I(n, 24 * 9 - 1); /* minutes 0,7,...,56 each hour; 00:00 itself is excluded */
    tocsin_cron_free(c);
    c = NULL;
    CHECK_EQ_I(tocsin_cron_parse(&c, "0 0 * * MON-FRI", NULL, 0), TOCSIN_OK);
    t = iso("2024-01-01T00:00:00Z");
    end = iso("2025-01-01T00:00:00Z");
    n = 0;
    while (tocsin_cron_next(&t, c, t, 0) == TOCSIN_OK && t < end) n++;
    CHECK_EQ_I(n, 261); /* 2024's weekdays (262) without Mon Jan 1 itself */
    tocsin_cron_free(c);
    /* SUN ending a weekday range is 7: FRI-SUN is Friday to Sunday, MON-SUN every day
     * (it was refused as the backwards range 5-0) */
    c = NULL;
    CHECK_EQ_I(tocsin_cron_parse(&c, "0 0 * * FRI-SUN", NULL, 0), TOCSIN_OK);
    t = iso("2024-01-01T00:00:00Z");
    n = 0;
    while (tocsin_cron_next(&t, c, t, 0) == TOCSIN_OK && t < end) n++;
    CHECK_EQ_I(n, 156); /* 2024: 52 Fridays, Saturdays and Sundays */
    tocsin_cron_free(c);
    c = NULL;
    CHECK_EQ_I(tocsin_cron_parse(&c, "0 0 * * mon-sun", NULL, 0), TOCSIN_OK);
    t = iso("2024-01-01T00:00:00Z");
    n = 0;
    while (tocsin_cron_next(&t, c, t, 0) == TOCSIN_OK && t < end) n++;
    CHECK_EQ_I(n, 365); /* every day of 2024 (366) but Jan 1 itself */
    tocsin_cron_free(c);
}

static void expect_error(const char *expr, const char *want, int line) {
    tocsin_cron *c = (tocsin_cron *)&c;
    char err[256];
    int rc = tocsin_cron_parse(&c, expr, err, sizeof err);
    if (rc == TOCSIN_INVALID && c == NULL && strstr(err, want)) {
        t_passed++;
        return;
    }
    t_failed++;
    fprintf(stderr, "FAIL line %d: parse(\"%s\") rc %d err \"%s\", want \"%s\"\n", line,
            expr ? expr : "(null)", rc, rc ? err : "", want);
    if (rc == TOCSIN_OK) tocsin_cron_free(c);
}
#define BAD(e, w) expect_error(e, w, __LINE__)

static void errors(void) {
    char err[256];
    tocsin_cron *c = NULL;
    int64_t next = 0;
    char big[1100];
    BAD("61 * * * *", "minute field: 61 is out of range 0-59");
    BAD("* 24 * * *", "hour field: 24 is out of range 0-23");
    BAD("* * 0 * *", "day-of-month field: 0 is out of range 1-31");
    BAD("* * 32 * *", "day-of-month field: 32 is out of range 1-31");
    BAD("* * * 13 *", "month field: 13 is out of range 1-12");
    BAD("* * * * 8", "day-of-week field: 8 is out of range 0-7");
    BAD("60 * * * * *", "second field: 60 is out of range 0-59");
    BAD("* * * *", "expected 5 or 6 fields");
    BAD("* * * * * * *", "expected 5 or 6 fields");
    BAD("0 0 1 1 * 2025", "the sixth field \"2025\" reads as a year, and cron here has no year field");
    BAD("*/0 * * * *", "minute field: step 0 is out of range 1-60");
    BAD("* */25 * * *", "hour field: step 25 is out of range");
    BAD("5-1 * * * *", "minute field: range 5-1 is backwards");
    BAD("* * * * FRI-MON", "day-of-week field: range 5-1 is backwards");
    BAD("* * * * 5-0", "day-of-week field: range 5-0 is backwards"); /* numbers: as written */
    BAD("1-2-3 * * * *", "minute field: unexpected character '-'");
    BAD("1,,2 * * * *", "minute field: empty list item");
    BAD("1, * * * *", "minute field: empty list item");
    BAD("* * * FOO *", "month field: unknown name \"FOO\"");
    BAD("* * * * MONDAY", "day-of-week field: unknown name");
    BAD("MON * * * *", "minute field: names are allowed only in the month and day-of-week");
    BAD("* * L * *", "day-of-month field: names are allowed only");
    BAD("* * ? * *", "day-of-month field: unexpected character '?'");
    BAD("* * * * 1#2", "day-of-week field: unexpected character '#'");
    /* a character of several bytes is quoted whole: the message stays UTF-8 */
    BAD("6\xc3\xb6 * * * *", "minute field: unexpected character '\xc3\xb6'");
    BAD("1-2\xf0\x9f\x98\x80 * * * *", "minute field: unexpected character '\xf0\x9f\x98\x80'");
    BAD("*/5\xc3 * * * *", "minute field: unexpected byte 0xc3");
    BAD("1234567 * * * *", "minute field: number too long");
    BAD("*/ * * * *", "minute field: a number is missing");
    BAD("0 0 30 2 *", "never fires");
    BAD("0 0 31 4,6,9,11 *", "never fires");
    BAD("", "empty");
    BAD("   ", "empty");
    BAD("@reboot", "unknown macro \"@reboot\"");
    BAD("@daily x", "@daily takes no arguments");
    BAD("@every", "@every: a duration is missing");
    BAD("@every 5x", "@every: a unit (d, h, m, s or ms) must follow 5");
    BAD("@every 5", "@every: a unit");
    BAD("@every 0s", "@every: the duration must be > 0");
    BAD("@every 1.5h", "@every: a unit (d, h, m, s or ms) must follow 1");
    BAD("@every 5m x", "@every: expected a number at \" x\"");
    BAD("@every 9999999999999s", "@every: the duration exceeds 100 years");
    BAD("@every 99999999999999999999999999ms", "@every: the duration exceeds 100 years");
    BAD("@every 40000d", "exceeds 100 years");
    BAD("* * * * *\n", "control characters");
    memset(big, '1', sizeof big - 1);
    big[sizeof big - 1] = 0;
    BAD(big, "limit is 1024");
    /* NULLs: error, nothing handed out */
    CHECK_EQ_I(tocsin_cron_parse(&c, NULL, err, sizeof err), TOCSIN_INVALID);
    CHECK(c == NULL && strstr(err, "NULL") != NULL);
    CHECK_EQ_I(tocsin_cron_parse(NULL, "* * * * *", err, sizeof err), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_cron_parse(&c, "61 * * * *", NULL, 0), TOCSIN_INVALID); /* no buffer: fine */
    CHECK_EQ_I(tocsin_cron_parse(&c, "61 * * * *", err, 8), TOCSIN_INVALID);  /* truncated */
    CHECK_EQ_I(strlen(err), 7);
    CHECK_EQ_I(tocsin_cron_parse(&c, "* * * * *", err, sizeof err), TOCSIN_OK);
    CHECK_EQ_I(tocsin_cron_next(NULL, c, 0, 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_cron_next(&next, NULL, 0, 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_cron_next(&next, c, -1, 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_cron_next(&next, c, 253402300800000LL, 0), TOCSIN_INVALID);
    CHECK_EQ_I(next, -1);
    tocsin_cron_free(c);
    tocsin_cron_free(NULL);
}

static void local_oracle(void);

/* America/New_York: 2024-03-10 02:00 EST -> 03:00 EDT (07:00Z);
 * 2024-11-03 02:00 EDT -> 01:00 EST (06:00Z). */
static void dst(void) {
    char *old = getenv("TZ") ? strdup(getenv("TZ")) : NULL;
    struct stat sb;
    if (stat("/usr/share/zoneinfo/America/New_York", &sb) != 0) {
        t_failed++;
        fprintf(stderr, "FAIL [cron] tzdata is missing (/usr/share/zoneinfo): run tools/deps.sh\n");
        free(old);
        return;
    }
    setenv("TZ", "America/New_York", 1);
    tzset();
    /* an ordinary day: 09:00 EDT */
    NEXT_LOCAL("0 9 * * *", "2024-03-09T15:00:00Z", "2024-03-10T13:00:00Z");
    NEXT_LOCAL("0 9 * * *", "2024-01-15T15:00:00Z", "2024-01-16T14:00:00Z");
    /* spring forward, fixed time in the gap: fires once at 03:00 EDT */
    NEXT_LOCAL("30 2 * * *", "2024-03-10T05:00:00Z", "2024-03-10T07:00:00Z");
    NEXT_LOCAL("30 2 * * *", "2024-03-10T06:59:59.999Z", "2024-03-10T07:00:00Z");
    NEXT_LOCAL("30 2 * * *", "2024-03-10T07:00:00Z", "2024-03-11T06:30:00Z");
    NEXT_LOCAL("30 2 * * *", "2024-03-09T12:00:00Z", "2024-03-10T07:00:00Z");
    NEXT_LOCAL("0 30 2 * * *", "2024-03-10T05:00:00Z", "2024-03-10T07:00:00Z");
    /* wildcard expressions follow real time: 02:xx does not exist */
    NEXT_LOCAL("15 * * * *", "2024-03-10T06:15:00Z", "2024-03-10T07:15:00Z");
    NEXT_LOCAL("*/30 * * * *", "2024-03-10T06:30:00Z", "2024-03-10T07:00:00Z");
    NEXT_LOCAL("@hourly", "2024-03-10T06:00:00Z", "2024-03-10T07:00:00Z");
    NEXT_LOCAL("@hourly", "2024-03-10T07:00:00Z", "2024-03-10T08:00:00Z");
    /* fall back, fixed time in the repeated hour: first occurrence only */
    NEXT_LOCAL("30 1 * * *", "2024-11-03T04:00:00Z", "2024-11-03T05:30:00Z");
    NEXT_LOCAL("30 1 * * *", "2024-11-03T05:30:00Z", "2024-11-04T06:30:00Z");
    NEXT_LOCAL("30 1 * * *", "2024-11-03T06:10:00Z", "2024-11-04T06:30:00Z");
    NEXT_LOCAL("30 1 * * *", "2024-11-02T12:00:00Z", "2024-11-03T05:30:00Z");
    /* wildcard: both passes fire */
    NEXT_LOCAL("*/30 * * * *", "2024-11-03T05:30:00Z", "2024-11-03T06:00:00Z");
    NEXT_LOCAL("*/30 * * * *", "2024-11-03T05:50:00Z", "2024-11-03T06:00:00Z");
    NEXT_LOCAL("*/30 * * * *", "2024-11-03T06:00:00Z", "2024-11-03T06:30:00Z");
    NEXT_LOCAL("*/30 * * * *", "2024-11-03T06:30:00Z", "2024-11-03T07:00:00Z");
    NEXT_LOCAL("*/5 * * * *", "2024-11-03T05:50:00Z", "2024-11-03T05:55:00Z");
    NEXT_LOCAL("@hourly", "2024-11-03T05:00:00Z", "2024-11-03T06:00:00Z");
    /* midnights on both sides of the change */
    NEXT_LOCAL("@daily", "2024-11-02T12:00:00Z", "2024-11-03T04:00:00Z");
    NEXT_LOCAL("@daily", "2024-11-03T04:00:00Z", "2024-11-04T05:00:00Z");
    NEXT_LOCAL("@daily", "2024-03-09T12:00:00Z", "2024-03-10T05:00:00Z");
    NEXT_LOCAL("@daily", "2024-03-10T05:00:00Z", "2024-03-11T04:00:00Z");
    /* a yearly fixed time across both changes */
    NEXT_LOCAL("0 12 1 7 *", "2024-01-01T00:00:00Z", "2024-07-01T16:00:00Z");
    NEXT_LOCAL("0 12 1 12 *", "2024-01-01T00:00:00Z", "2024-12-01T17:00:00Z");
    /* UTC and @every ignore the zone */
    NEXT("30 2 * * *", "2024-03-10T00:00:00Z", "2024-03-10T02:30:00Z");
    NEXT_LOCAL("@every 1h", "2024-03-10T06:30:00Z", "2024-03-10T07:00:00Z");
    local_oracle();
    /* a zone without DST reads like UTC */
    setenv("TZ", "UTC", 1);
    tzset();
    NEXT_LOCAL("30 2 * * *", "2024-03-10T00:00:00Z", "2024-03-10T02:30:00Z");
    if (old) {
        setenv("TZ", old, 1);
        free(old);
    } else {
        unsetenv("TZ");
    }
    tzset();
}

/* ---- a brute-force oracle for local time --------------------------------- */

typedef struct oracle_expr {
    int minute[60], hour[24];
    int wildcard;
    char text[256];
} oracle_expr;

static int64_t oracle_wall(int64_t t, int *h, int *mi) {
    time_t tt = (time_t)t;
    struct tm tm;
    localtime_r(&tt, &tm);
    *h = tm.tm_hour;
    *mi = tm.tm_min;
    return (int64_t)tm.tm_yday * 1440 + tm.tm_hour * 60 + tm.tm_min; /* minutes into the year */
}

/* The documented policy, minute by minute: wildcard expressions fire at every
 * instant whose wall time matches; fixed ones at the first occurrence of a
 * matching wall time, and at the end of a gap that swallowed a match. */
static int64_t oracle_next(const oracle_expr *e, int64_t after_s) {
    int64_t t = (after_s / 60 + 1) * 60, end = t + 3 * 86400;
    for (; t < end; t += 60) {
        int h, mi, ph, pmi;
        int64_t w = oracle_wall(t, &h, &mi), pw = oracle_wall(t - 60, &ph, &pmi);
        int match = e->minute[mi] && e->hour[h];
        if (e->wildcard) {
            if (match) return t;
            continue;
        }
        if (match) {
            int rh, rmi;
            /* a repeat: the same wall time an hour of real time earlier */
            if (oracle_wall(t - 3600, &rh, &rmi) == w) continue;
            return t;
        }
        if (w - pw > 1) { /* t ends a gap: walls (pw, w) were skipped */
            int64_t k;
            for (k = 1; k < w - pw; k++) {
                int gm = (int)((pmi + k) % 60), gh = (int)((ph + (pmi + k) / 60) % 24);
                if (e->minute[gm] && e->hour[gh]) return t;
            }
        }
    }
    return -1;
}

static void oracle_gen(oracle_expr *e) {
    char mpart[64] = "", hpart[64] = "";
    int i, k;
    memset(e, 0, sizeof *e);
    if (rng_next() % 2) {
        k = 1 + (int)(rng_next() % 30);
        snprintf(mpart, sizeof mpart, "*/%d", k);
        for (i = 0; i < 60; i += k) e->minute[i] = 1;
        e->wildcard = 1;
    } else {
        int n = 1 + (int)(rng_next() % 3);
        for (i = 0; i < n; i++) {
            int m = (int)(rng_next() % 4 == 0 ? 0 : rng_next() % 60);
            char b[8];
            snprintf(b, sizeof b, "%s%d", i ? "," : "", m);
            strcat(mpart, b);
            e->minute[m] = 1;
        }
    }
    if (rng_next() % 3 == 0) {
        strcpy(hpart, "*");
        for (i = 0; i < 24; i++) e->hour[i] = 1;
        e->wildcard = 1;
    } else {
        int n = 1 + (int)(rng_next() % 3);
        for (i = 0; i < n; i++) {
            int h = (int)(rng_next() % 2 ? 1 + rng_next() % 2 : rng_next() % 24); /* often 1 or 2 */
            char b[8];
            snprintf(b, sizeof b, "%s%d", i ? "," : "", h);
            strcat(hpart, b);
            e->hour[h] = 1;
        }
    }
    snprintf(e->text, sizeof e->text, "%s %s * * *", mpart, hpart);
}

static void local_oracle(void) {
    static const int64_t changes[] = {1710054000LL, 1730613600LL}; /* 2024-03-10 07:00Z, 2024-11-03 06:00Z */
    int i, bad = 0;
    for (i = 0; i < 300; i++) {
        oracle_expr e;
        tocsin_cron *c = NULL;
        /* half within a day of the change, half within 3 hours of it */
        int64_t span = i % 4 < 2 ? 86400 : 3 * 3600, got = -2, want;
        int64_t after = changes[i % 2] - span + (int64_t)(rng_next() % (uint64_t)(2 * span));
        oracle_gen(&e);
        if (tocsin_cron_parse(&c, e.text, NULL, 0) != TOCSIN_OK) {
            bad++;
            fprintf(stderr, "FAIL [cron] oracle: cannot parse %s\n", e.text);
            continue;
        }
        if (tocsin_cron_next(&got, c, after * 1000, 1) != TOCSIN_OK) got = -1;
        tocsin_cron_free(c);
        want = oracle_next(&e, after);
        if (want < 0 || got != want * 1000) {
            bad++;
            if (bad < 5)
                fprintf(stderr, "FAIL [cron] oracle: next(\"%s\", %lld s, local) = %lld, want %lld\n",
                        e.text, (long long)after, (long long)got, (long long)want * 1000);
        }
    }
    CHECK_EQ_I(bad, 0);
}

/* The fuzz corpus as a plain regression suite: every input, no crash, no hang. */
static void corpus(void) {
    const char *dir = "core/test/corpus/cron";
    DIR *d = opendir(dir);
    struct dirent *e;
    char *old = getenv("TZ") ? strdup(getenv("TZ")) : NULL;
    int n = 0;
    if (!d) {
        t_failed++;
        fprintf(stderr, "FAIL [cron] cannot open %s (run from the repository root)\n", dir);
        return;
    }
    setenv("TZ", "America/New_York", 1); /* local-time searches cross DST changes */
    tzset();
    while ((e = readdir(d)) != NULL) {
        char path[512], buf[4096];
        FILE *f;
        size_t len;
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!(f = fopen(path, "rb"))) continue;
        len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        CHECK_EQ_I(LLVMFuzzerTestOneInput((const uint8_t *)buf, len), 0);
        n++;
    }
    closedir(d);
    if (old) {
        setenv("TZ", old, 1);
        free(old);
    } else {
        unsetenv("TZ");
    }
    tzset();
    CHECK(n >= 20);
}

void suite_cron(void) {
    utc_table();
    chains();
    errors();
    dst();
    corpus();
}
