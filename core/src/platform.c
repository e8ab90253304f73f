/* Everything that depends on the operating system lives here. */
#define _GNU_SOURCE
#include "internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
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

void tc_sleep_us(int64_t us) {
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000L};
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

/* ---- wake engine primitives ----------------------------------------------
 * Everything the wake engine needs from the kernel: a pollable signal, a
 * directory change feed and a poll with a microsecond timeout. Linux uses
 * eventfd, inotify and ppoll; elsewhere a non-blocking pipe and poll() stand
 * in and the directory feed is absent (the safety poll alone bounds latency).
 */
#include <fcntl.h>
#include <poll.h>
#if defined(__linux__)
#include <sys/eventfd.h>
#include <sys/inotify.h>
#endif

int tc_signal_open(tc_signal *s) {
#if defined(__linux__)
    s->rfd = s->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    return s->rfd < 0 ? -1 : 0;
#else
    int p[2], i;
    if (pipe(p) != 0) return -1;
    for (i = 0; i < 2; i++) {
        fcntl(p[i], F_SETFL, fcntl(p[i], F_GETFL) | O_NONBLOCK);
        fcntl(p[i], F_SETFD, FD_CLOEXEC);
    }
    s->rfd = p[0];
    s->wfd = p[1];
    return 0;
#endif
}

void tc_signal_close(tc_signal *s) {
    if (s->rfd >= 0) close(s->rfd);
    if (s->wfd >= 0 && s->wfd != s->rfd) close(s->wfd);
    s->rfd = s->wfd = -1;
}

/* Makes the descriptor readable. A full pipe is already readable: ignore EAGAIN. */
void tc_signal_raise(tc_signal *s) {
#if defined(__linux__)
    uint64_t one = 1;
    ssize_t r;
    do r = write(s->wfd, &one, sizeof one);
    while (r < 0 && errno == EINTR);
#else
    char c = 1;
    ssize_t r;
    do r = write(s->wfd, &c, 1);
    while (r < 0 && errno == EINTR);
#endif
}

/* Empties the descriptor without blocking; returns 1 if it was readable. */
int tc_signal_drain(tc_signal *s) {
#if defined(__linux__)
    uint64_t v;
    ssize_t r;
    do r = read(s->rfd, &v, sizeof v);
    while (r < 0 && errno == EINTR);
    return r == (ssize_t)sizeof v;
#else
    char buf[64];
    int got = 0;
    for (;;) {
        ssize_t r = read(s->rfd, buf, sizeof buf);
        if (r > 0) {
            got = 1;
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        return got;
    }
#endif
}

/*
 * Waits until one of n descriptors is readable or timeout_us passes
 * (< 0: forever). Sets ready[i]; returns the number readable, 0 on timeout,
 * -1 on failure. EINTR counts as a timeout: callers loop anyway.
 */
int tc_poll_read(const int *fds, int *ready, int n, int64_t timeout_us) {
    struct pollfd p[4];
    int i, r;
    if (n > 4) return -1;
    for (i = 0; i < n; i++) {
        p[i].fd = fds[i];
        p[i].events = POLLIN;
        p[i].revents = 0;
        ready[i] = 0;
    }
#if defined(__linux__)
    {
        struct timespec ts, *tp = NULL;
        if (timeout_us >= 0) {
            ts.tv_sec = (time_t)(timeout_us / 1000000);
            ts.tv_nsec = (long)(timeout_us % 1000000) * 1000L;
            tp = &ts;
        }
        r = ppoll(p, (nfds_t)n, tp, NULL);
    }
#else
    {
        int ms = timeout_us < 0 ? -1 : (int)((timeout_us + 999) / 1000);
        if (timeout_us > (int64_t)0x7fffffff * 1000) ms = 0x7fffffff;
        r = poll(p, (nfds_t)n, ms);
    }
#endif
    if (r < 0) return errno == EINTR ? 0 : -1;
    for (i = 0; i < n; i++) ready[i] = (p[i].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) != 0;
    return r;
}

int64_t tc_monotonic_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/*
 * A directory change feed: a descriptor that becomes readable when a file of
 * `dir` is written, created, deleted or renamed. -1 where unsupported.
 */
int tc_dirwatch_open(const char *dir) {
#if defined(__linux__)
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) return -1;
    if (inotify_add_watch(fd, dir,
                          IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE | IN_DELETE | IN_MOVED_TO |
                              IN_MOVED_FROM | IN_DELETE_SELF | IN_MOVE_SELF) < 0) {
        close(fd);
        return -1;
    }
    return fd;
#else
    (void)dir;
    return -1;
#endif
}

/*
 * Reads every pending event of the feed; returns 1 if one named a file in
 * names[0..n) (or the directory itself moved or the queue overflowed).
 */
int tc_dirwatch_read(int fd, const char *const *names, int n) {
#if defined(__linux__)
    struct {
        _Alignas(struct inotify_event) char raw[4096];
    } buf;
    int hit = 0;
    for (;;) {
        ssize_t r = read(fd, buf.raw, sizeof buf.raw), off = 0;
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return hit;
        while (off + (ssize_t)sizeof(struct inotify_event) <= r) {
            const struct inotify_event *e = (const struct inotify_event *)(buf.raw + off);
            int i;
            if (e->mask & (IN_Q_OVERFLOW | IN_DELETE_SELF | IN_MOVE_SELF)) hit = 1;
            if (e->len)
                for (i = 0; i < n && !hit; i++)
                    if (strcmp(e->name, names[i]) == 0) hit = 1;
            off += (ssize_t)sizeof(struct inotify_event) + e->len;
        }
    }
#else
    (void)fd;
    (void)names;
    (void)n;
    return 0;
#endif
}

void tc_fd_close(int fd) {
    if (fd >= 0) close(fd);
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

/* ---- process identity (worker registry) ------------------------------------ */

/* The host's name ("" if unknown), into buf of n bytes. */
void tc_host_name(char *buf, size_t n) {
    if (n == 0) return;
    if (gethostname(buf, n) != 0) buf[0] = 0;
    buf[n - 1] = 0;
}

size_t tocsin_owner_id(char *buf, size_t size) {
    char host[64];
    int n;
    if (!buf || size == 0) return 0;
    tc_host_name(host, sizeof host);
    n = snprintf(buf, size, "%s:%d:%012llx", host[0] ? host : "host", tc_process_id(),
                 (unsigned long long)(tc_random() & 0xffffffffffffULL));
    return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

/*
 * When process pid started (clock ticks since boot, field 22 of
 * /proc/PID/stat): with the pid it names one process for the whole uptime,
 * so a reused pid is told apart. 0 when unknown (not Linux, no such process).
 */
int64_t tc_process_start(int pid) {
    char path[64], buf[1024], *p;
    FILE *f;
    size_t n;
    int field;
    long long start = 0;
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    if (!(f = fopen(path, "r"))) return 0;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* the command name (field 2) may hold spaces and parentheses: skip past the last ')' */
    if (!(p = strrchr(buf, ')'))) return 0;
    for (field = 2; *p && field < 22; p++)
        if (*p == ' ') field++;
    if (sscanf(p, "%lld", &start) != 1) return 0;
    return start;
}

int tc_process_id(void) { return (int)getpid(); }

/* 1 when the process (pid, start) of this host is gone; 0 when alive or unknown. */
int tc_process_gone(int pid, int64_t start) {
    int64_t now;
    if (pid <= 0) return 0;
    if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
    now = tc_process_start(pid);
    return start > 0 && now > 0 && now != start; /* the pid was reused */
}

/*
 * Keeps the shared object holding this code loaded until the process ends. SQLite
 * dlclose()s an extension with the connection that loaded it, and unloading
 * the core's code would take with it the fork handlers this copy registered
 * (glibc drops an unloaded object's pthread_atfork handlers: if this copy
 * owned SQLite's mutexes at fork, no copy would take them any more, and a
 * child forked while another thread allocated hung) and the watcher threads'
 * code while they run. Best effort: a failure leaves the usual behaviour.
 */
void tc_pin_self(void) {
#if defined(RTLD_NODELETE) && defined(RTLD_NOLOAD)
    static const char anchor = 0; /* an object of this shared object (-pedantic: no function pointer) */
    Dl_info info;
    if (dladdr(&anchor, &info) && info.dli_fname) {
        void *h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
        (void)h; /* the reference is kept on purpose */
    }
#endif
}

/* ---- one SQLite per process (design.md §2) -------------------------------
 * Which loaded shared objects carry a copy of SQLite, besides the one tocsin
 * runs on (the object whose code holds its sqlite3_libversion)? An object
 * that exports sqlite3_libversion from its own code does (libsqlite3,
 * better-sqlite3's addon, node-sqlite3). A copy compiled in with hidden
 * symbols (python-build-standalone's _sqlite3, a static build in a plugin) is
 * found by the format of SQLite's corruption reports, "%s at line %d of
 * [%.10s]" (sqlite3ReportError), which every copy carries and no client of
 * SQLite does: the object's read-only segments are searched in memory, for
 * objects up to TC_SCAN_MAX_BYTES of them (a gigabyte of CUDA kernels is not
 * read through; only its symbols are looked at). The signature is built at
 * run time so that the object holding this code does not carry it; that
 * object and the program itself are not looked at.
 *
 * The loader's list is only copied under dl_iterate_phdr (its lock is held
 * for microseconds, never across the search: a fork() meanwhile would leave
 * it held in the child); each object is then held open (dlopen RTLD_NOLOAD)
 * while it is searched, so that another thread's dlclose cannot unmap it,
 * and skipped when it is no longer the object seen in the list. */
#if defined(__linux__)
#include <link.h>

#define TC_SIG_MAX 32
#define TC_SCAN_MAX_BYTES ((size_t)64 << 20)
#define TC_SCAN_SEGS 16

typedef struct copy_obj {
    char *name;
    uintptr_t base;                          /* dlpi_addr */
    uintptr_t lo[TC_SCAN_SEGS], hi[TC_SCAN_SEGS]; /* every PT_LOAD: where its code and data lie */
    uintptr_t rlo[TC_SCAN_SEGS];             /* the read-only ones, file part: where to search */
    size_t rlen[TC_SCAN_SEGS];
    int nseg, nro;
    size_t ro_bytes;
} copy_obj;

typedef struct copy_list {
    uintptr_t own_fn, self_fn;
    unsigned long long adds, subs;
    char own[256]; /* the object of tocsin's SQLite ("": the program itself) */
    copy_obj *objs;
    size_t n, cap;
    int nomem;
} copy_list;

typedef struct copy_answer {
    unsigned long long adds, subs;
    char own[256];
    char others[768]; /* the other objects carrying a copy, ", "-separated */
    int n_others;
} copy_answer;

/* Drops a character cut short at the end of s (a snprintf that ran out of room). */
static void end_whole(char *s) {
    size_t n = strlen(s), j = n;
    while (j > 0 && n - j < 3 && ((unsigned char)s[j - 1] & 0xc0) == 0x80) j--;
    if (j > 0 && (unsigned char)s[j - 1] >= 0x80 && !tocsin_utf8_len(s + j - 1)) s[j - 1] = 0;
}

static int in_ranges(const copy_obj *o, uintptr_t a) {
    for (int i = 0; i < o->nseg; i++)
        if (a >= o->lo[i] && a < o->hi[i]) return 1;
    return 0;
}

static int counters(struct dl_phdr_info *info, size_t size, unsigned long long *adds, unsigned long long *subs) {
    if (size < offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) return 0;
    *adds = info->dlpi_adds;
    *subs = info->dlpi_subs;
    return 1;
}

/* Under the loader's lock: copies what is needed, nothing more. */
static int list_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    copy_list *cl = arg;
    copy_obj o;
    counters(info, size, &cl->adds, &cl->subs);
    memset(&o, 0, sizeof o);
    o.base = (uintptr_t)info->dlpi_addr;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || o.nseg == TC_SCAN_SEGS) continue;
        uintptr_t lo = o.base + (uintptr_t)ph->p_vaddr;
        o.lo[o.nseg] = lo;
        o.hi[o.nseg++] = lo + (uintptr_t)ph->p_memsz;
        if ((ph->p_flags & PF_R) && !(ph->p_flags & PF_W) && ph->p_filesz > 0) {
            o.rlo[o.nro] = lo;
            o.rlen[o.nro++] = (size_t)ph->p_filesz;
            o.ro_bytes += (size_t)ph->p_filesz;
        }
    }
    const char *name = info->dlpi_name;
    int own = in_ranges(&o, cl->own_fn);
    if (own) snprintf(cl->own, sizeof cl->own, "%s", name && *name ? name : "");
    if (!name || !*name || own || in_ranges(&o, cl->self_fn) || strstr(name, "linux-vdso")) return 0;
    if (cl->n == cl->cap) {
        size_t cap = cl->cap ? cl->cap * 2 : 64;
        copy_obj *grown = realloc(cl->objs, cap * sizeof *grown);
        if (!grown) {
            cl->nomem = 1;
            return 1;
        }
        cl->objs = grown;
        cl->cap = cap;
    }
    if (!(o.name = strdup(name))) {
        cl->nomem = 1;
        return 1;
    }
    cl->objs[cl->n++] = o;
    return 0;
}

/* Reads memory of other objects, not this one's: no sanitizer checks it. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((no_sanitize_address, no_sanitize_thread))
#endif
static int segment_has(const unsigned char *p, size_t n, const char *sig, size_t len) {
    if (n < len) return 0;
    const unsigned char first = (unsigned char)sig[0];
    for (size_t i = 0; i + len <= n; i++) {
        if (p[i] != first) continue;
        size_t k = 1;
        while (k < len && p[i + k] == (unsigned char)sig[k]) k++;
        if (k == len) return 1;
    }
    return 0;
}

/* Held open while it is looked at; 0 when it is gone or not the object listed. */
static int carries_sqlite(const copy_obj *o, const char *sig, size_t siglen) {
    void *h = dlopen(o->name, RTLD_LAZY | RTLD_NOLOAD);
    struct link_map *lm = NULL;
    int found = 0;
    if (!h) return 0;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && (uintptr_t)lm->l_addr == o->base) {
        void *sym = dlsym(h, "sqlite3_libversion"); /* (from a dependency: not its own) */
        uintptr_t a;
        memcpy(&a, &sym, sizeof a);
        found = sym && in_ranges(o, a);
        for (int i = 0; !found && o->ro_bytes <= TC_SCAN_MAX_BYTES && i < o->nro; i++)
            found = segment_has((const unsigned char *)o->rlo[i], o->rlen[i], sig, siglen);
    }
    dlclose(h);
    return found;
}

/* Stops at the first object: the load counters alone. */
static int counters_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    copy_answer *a = arg;
    counters(info, size, &a->adds, &a->subs);
    return 1;
}

static uintptr_t code_address(void (*fn)(void)) {
    uintptr_t a;
    memcpy(&a, &fn, sizeof a);
    return a;
}

static pthread_mutex_t copies_mutex = PTHREAD_MUTEX_INITIALIZER;
static copy_answer copies_kept; /* the last answer, under copies_mutex */
static int copies_known;

/* The answer now; TOCSIN_NOMEM when the list could not be copied. */
static int copies_scan(copy_answer *out) {
    copy_list cl;
    char sig[TC_SIG_MAX];
    memset(&cl, 0, sizeof cl);
    memset(out, 0, sizeof *out);
    snprintf(sig, sizeof sig, "%cs at line %cd of [%c.10s]", '%', '%', '%');
#ifdef TOCSIN_EXTENSION
    if (sqlite3_api) cl.own_fn = code_address((void (*)(void))sqlite3_api->libversion);
#else
    cl.own_fn = code_address((void (*)(void))sqlite3_libversion);
#endif
    cl.self_fn = code_address((void (*)(void))tocsin_check_sqlite_copies);
    dl_iterate_phdr(list_cb, &cl);
    out->adds = cl.adds;
    out->subs = cl.subs;
    snprintf(out->own, sizeof out->own, "%s", cl.own);
    end_whole(out->own);
    for (size_t i = 0; i < cl.n; i++) {
        if (!cl.nomem && carries_sqlite(&cl.objs[i], sig, strlen(sig))) {
            size_t used = strlen(out->others);
            out->n_others++;
            snprintf(out->others + used, sizeof out->others - used, "%s%s", used ? ", " : "", cl.objs[i].name);
            end_whole(out->others);
        }
        free(cl.objs[i].name);
    }
    free(cl.objs);
    return cl.nomem ? TOCSIN_NOMEM : TOCSIN_OK;
}
#endif

int tocsin_check_sqlite_copies(char *msg, size_t cap) {
    if (msg && cap) msg[0] = 0;
#if defined(__linux__)
    copy_answer now, fresh;
    memset(&now, 0, sizeof now);
    dl_iterate_phdr(counters_cb, &now);
    pthread_mutex_lock(&copies_mutex);
    int known = copies_known && now.adds && now.adds == copies_kept.adds && now.subs == copies_kept.subs;
    if (known) now = copies_kept;
    pthread_mutex_unlock(&copies_mutex);
    if (!known) {
        /* searched without the lock: two threads may both search, and agree */
        if (copies_scan(&fresh) != TOCSIN_OK) {
            if (msg && cap) snprintf(msg, cap, "out of memory while listing the loaded objects");
            return TOCSIN_NOMEM;
        }
        now = fresh;
        pthread_mutex_lock(&copies_mutex);
        copies_kept = fresh;
        copies_known = 1;
        pthread_mutex_unlock(&copies_mutex);
    }
    if (now.n_others == 0) return TOCSIN_OK;
    if (msg && cap) {
        snprintf(msg, cap,
                 "a second copy of SQLite is loaded in this process: tocsin runs on %s%s, and %s %s another; two "
                 "copies opening one database file drop each other's locks and can corrupt it",
                 now.own[0] ? "the one in " : "the one built into the program", now.own, now.others,
                 now.n_others > 1 ? "each carry" : "carries");
        end_whole(msg);
    }
    return TOCSIN_ERROR;
#else
    (void)cap;
    return TOCSIN_OK;
#endif
}
