/* Everything that depends on the operating system lives here. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/random.h>
#endif

int64_t tc_system_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t tc_monotonic_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void tc_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

/* Randomness for jitter and the auto-trim dice; not for secrets. */
uint64_t tc_random(void) {
    uint64_t v = 0;
#if defined(__linux__)
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v) return v;
#endif
    {
        static uint64_t s;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        s ^= (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL + (uint64_t)getpid();
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
}

/* The local UTC offset (seconds east of UTC) in effect at Unix time t, as
 * the C library's time zone data (TZ) says. 0 when t cannot be converted. */
int tc_local_offset(int64_t t, int64_t *out_offset) {
    time_t tt = (time_t)t;
    struct tm tm;
    if ((int64_t)tt != t || !localtime_r(&tt, &tm)) return 0;
    *out_offset = (int64_t)tm.tm_gmtoff;
    return 1;
}

/* Re-reads TZ so that a change of the environment variable is followed. */
void tc_tz_reload(void) { tzset(); }
