/*
 * tocsin._tocsin: the CPython binding of the tocsin core (plain C API).
 *
 * This layer only maps: Python values in, core call, Python values out, core
 * result codes to exception classes. Behaviour lives in the core; idiom lives
 * in the pure-Python package around it.
 *
 * Threads: the core's thread model (tocsin.h). A Handle may be used from any
 * number of threads: the core serialises the calls on one tocsin_db, and the
 * GIL is released around every call that may block or touch the disk. A
 * transaction is a Tx (a core transaction handle from tocsin_tx_begin, on a
 * connection of its own): only the calls made on that Tx join it. The module
 * keeps no lock of its own; a Handle only counts the calls in progress so that
 * close() never frees a tocsin_db another thread still uses.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <limits.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "tocsin.h"
#include <sqlite3.h>

/* ---- exceptions ----------------------------------------------------------- */

#define MAX_CODE TOCSIN_PERM
static PyObject *Error;           /* tocsin.Error */
static PyObject *code_exc[MAX_CODE + 1];

static const struct {
    int code;
    const char *name;
    const char *doc;
    PyObject **extra_base; /* a builtin the class also derives from, or NULL */
} EXC[] = {
    {TOCSIN_ERROR, "SQLiteError", "SQLite or the system failed (see .sqlite_code).", NULL},
    {TOCSIN_INVALID, "InvalidArgument", "An argument was invalid; nothing was written.", &PyExc_ValueError},
    {TOCSIN_NOTFOUND, "NotFound", "The named object does not exist.", &PyExc_LookupError},
    {TOCSIN_BUSY, "Busy", "The database stayed locked past the busy timeout.", NULL},
    {TOCSIN_LEASE_LOST, "LeaseLost", "The caller no longer holds the job or lock lease.", NULL},
    {TOCSIN_CLOSED, "Closed", "The handle or subscription was closed.", NULL},
    {TOCSIN_CORRUPT, "Corrupt", "The database or its tocsin schema is damaged.", NULL},
    {TOCSIN_TOOBIG, "PayloadTooLarge", "A payload exceeded the size limit; nothing was written.", &PyExc_ValueError},
    {TOCSIN_VERSION, "VersionMismatch", "SQLite too old, or the schema newer than this library.", NULL},
    {TOCSIN_CALLBACK, "CallbackError", "A callback raised.", NULL},
    {TOCSIN_NOMEM, "NoMemory", "Out of memory.", &PyExc_MemoryError},
    {TOCSIN_REPLACED, "Replaced", "The database file was replaced under the handle.", NULL},
    {TOCSIN_TIMEOUT, "Timeout", "A wait ended at its deadline.", &PyExc_TimeoutError},
    {TOCSIN_READONLY, "ReadOnly", "A write was attempted on a read-only handle.", NULL},
    {TOCSIN_INTERRUPTED, "Interrupted", "A wait was poked, or SQLite was interrupted.", NULL},
    {TOCSIN_IOERR, "IOError", "An I/O error of the file system.", &PyExc_OSError},
    {TOCSIN_FULL, "Full", "The disk or the database is full.", NULL},
    {TOCSIN_CANTOPEN, "CantOpen", "The database file cannot be opened or created.", NULL},
    {TOCSIN_PERM, "PermissionDenied", "Access denied.", &PyExc_PermissionError},
};

/* Raises the exception class of `rc` with `msg`; .code and .sqlite_code set. */
static PyObject *raise_code(int rc, const char *msg, int sqlite_code) {
    PyObject *cls = (rc > 0 && rc <= MAX_CODE && code_exc[rc]) ? code_exc[rc] : Error;
    PyObject *exc = PyObject_CallFunction(cls, "s", msg ? msg : tocsin_errstr(rc));
    if (!exc) return NULL;
    PyObject *c = PyLong_FromLong(rc), *s = PyLong_FromLong(sqlite_code);
    if (c && s) {
        PyObject_SetAttrString(exc, "code", c);
        PyObject_SetAttrString(exc, "sqlite_code", s);
    }
    Py_XDECREF(c);
    Py_XDECREF(s);
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

/* The calling thread's last core failure (the one error channel). */
static PyObject *raise_last(int rc) {
    return raise_code(rc, tocsin_errmsg(NULL), tocsin_sqlite_errcode(NULL));
}

/* A value that cannot be converted (a str with a NUL or a lone surrogate, an
 * integer out of range) is an invalid argument: InvalidArgument naming the call,
 * not a bare ValueError/OverflowError. Wrong types stay TypeError. */
static void as_invalid(const char *fmt) {
    PyObject *type, *value, *tb, *msg;
    const char *fn = fmt ? strchr(fmt, ':') : NULL;
    if (!PyErr_Occurred() || PyErr_ExceptionMatches(Error) ||
        !(PyErr_ExceptionMatches(PyExc_ValueError) || PyErr_ExceptionMatches(PyExc_OverflowError)))
        return;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    msg = value ? PyObject_Str(value) : NULL;
    if (msg) {
        const char *m = PyUnicode_AsUTF8(msg);
        if (m) {
            PyObject *text = PyUnicode_FromFormat("%s%s%s", fn ? fn + 1 : "", fn ? "(): " : "", m);
            if (text) {
                raise_code(TOCSIN_INVALID, PyUnicode_AsUTF8(text), 0);
                Py_DECREF(text);
            }
        }
        Py_DECREF(msg);
    }
    if (PyErr_Occurred()) { /* converted (or failed converting: that error stands) */
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return;
    }
    PyErr_Restore(type, value, tb);
}

/* The names of the arguments of each parse_args format (by the function name after
 * its ':'), as the public API calls them: an argument of the wrong type is refused
 * naming it. Looked up only when an argument is refused. */
static const struct {
    const char *fn;
    const char *names; /* space-separated, in the order of the format's units */
} ARG_NAMES[] = {
    {"Handle", "path busy_timeout_ms max_payload_bytes read_only"},
    {"executescript", "sql"},
    {"execute", "sql params"},
    {"set_max_payload", "max_bytes"},
    {"enqueue", "queue payload priority delay run_at max_attempts expires unique_key meta"},
    {"enqueue_many", "queue payload priority delay run_at max_attempts expires unique_key meta"},
    {"claim", "queue worker_id n visibility"},
    {"ack", "job_id token"},
    {"ack_batch", "ids tokens"},
    {"retry", "job_id token delay error"},
    {"fail", "job_id token error"},
    {"hand_back", "job_id token delay"},
    {"heartbeat", "job_id token extend"},
    {"cancel", "job_id"},
    {"get", "job_id"},
    {"pause", "queue"},
    {"resume", "queue"},
    {"is_paused", "queue"},
    {"stats", "queue"},
    {"next_deadline", "queues"},
    {"dead_list", "queue after_id limit"},
    {"dead_requeue", "job_id"},
    {"dead_purge", "queue before"},
    {"publish", "topic payload key meta"},
    {"publish_many", "topic payloads keys"},
    {"stream_read", "topic after limit"},
    {"notify_read", "channel after_id limit"},
    {"save_offset", "consumer topic offset"},
    {"offset", "consumer topic"},
    {"trim", "topic max_age max_count below_consumers"},
    {"notify", "channel payload meta"},
    {"notify_prune", "max_age max_keep"},
    {"notify_set_autotrim", "max_age max_keep one_in"},
    {"result_save", "job_id value ttl"},
    {"result_save_error", "job_id type message ttl"},
    {"result_get", "job_id"},
    {"result_check", "job_id"},
    {"result_delete", "job_id"},
    {"result_wait", "job_id"},
    {"check_name", "what name"},
    {"lock_acquire", "name owner ttl"},
    {"lock_renew", "name owner token ttl"},
    {"lock_release", "name owner token"},
    {"lock_holder", "name"},
    {"lock_wait", "name owner ttl deadline sub"},
    {"ratelimit_try", "name limit per"},
    {"ratelimit_reset", "name"},
    {"schedule options", "priority max_attempts job_expires catch_up max_catch_up local_time meta"},
    {"schedule_set", "name cron queue payload options"},
    {"schedule_update", "name cron queue payload options fields"},
    {"schedule_pause", "name"},
    {"schedule_resume", "name"},
    {"schedule_remove", "name"},
    {"schedule_get", "name"},
    {"Sub", "handle"},
    {"wait", "timeout_ms"},
    {"next", "timeout_ms"},
    {"queue_wait", "queues deadline sub"},
    {"Listener", "handle channel buffer_size"},
    {"StreamSub", "handle topic consumer from_offset batch autosave_every autosave_ms save_on_close"},
    {"task_enqueue", "queue task args kwargs result_ttl timeout priority delay run_at max_attempts "
                     "expires unique_key meta"},
    {"task_envelope", "task args kwargs result_ttl timeout"},
    {"Worker", "handle queues concurrency worker_id visibility scheduler scheduler_ttl "
               "unknown_task_delay unknown_task_handbacks"},
    {"register", "task backoff_base backoff_cap timeout result_ttl"},
    {"finish", "run kind value error_type error_message error_trace delay tx"},
    {"wake_configure", "poll_ms identity_ms no_kernel_events"},
    {"errstr", "rc"},
    {"cron_next", "expr after local_time"},
};

/* The public name of argument `pos` (0-based) of the format `fmt` (ARG_NAMES), in
 * `name`; check_name's `name` is called what its first argument says ("queue name"). */
static void arg_name(const char *fmt, Py_ssize_t pos, PyObject *args, char *name, size_t size) {
    const char *fn = strchr(fmt, ':'), *names = NULL, *p;
    size_t i, len = 0;
    Py_ssize_t want = pos;
    if (fn) {
        fn++;
        if (!strcmp(fn, "check_name") && pos == 1 && args && PyTuple_Check(args) &&
            PyTuple_GET_SIZE(args) > 0 && PyUnicode_Check(PyTuple_GET_ITEM(args, 0))) {
            const char *what = PyUnicode_AsUTF8(PyTuple_GET_ITEM(args, 0));
            if (what) {
                PyOS_snprintf(name, size, "%s", what);
                return;
            }
            PyErr_Clear();
        }
        for (i = 0; i < sizeof ARG_NAMES / sizeof ARG_NAMES[0]; i++)
            if (!strcmp(ARG_NAMES[i].fn, fn)) {
                names = ARG_NAMES[i].names;
                break;
            }
    }
    for (p = names; p && *p && want > 0; p++)
        if (*p == ' ') want--;
    if (p && *p && !want) {
        while (p[len] && p[len] != ' ' && len < size - 1) len++;
        memcpy(name, p, len);
        name[len] = 0;
    } else {
        PyOS_snprintf(name, size, "argument %d", (int)pos + 1);
    }
}

/* Raises InvalidArgument: argument `pos` (0-based) of the format `fmt` must be `want`. */
static int refuse_arg(const char *fmt, Py_ssize_t pos, const char *want, PyObject *v) {
    char name[64];
    PyObject *text;
    arg_name(fmt, pos, NULL, name, sizeof name);
    text = PyUnicode_FromFormat("%s must be %s, not %.100s", name, want, Py_TYPE(v)->tp_name);
    if (text) {
        raise_code(TOCSIN_INVALID, PyUnicode_AsUTF8(text), 0);
        Py_DECREF(text);
    }
    return 0;
}

/* An integer as a message shows it: its digits, or 1.000e+30 past 24 of them (not
 * 400 digits of it), as the Python layer's messages do. */
static PyObject *shown_int(PyObject *ix) {
    PyObject *digits = PyObject_Str(ix), *out;
    Py_ssize_t n;
    const char *d;
    int neg;
    if (!digits) return NULL;
    n = PyUnicode_GET_LENGTH(digits);
    if (n <= 24 || !(d = PyUnicode_AsUTF8(digits))) return digits;
    neg = d[0] == '-';
    out = PyUnicode_FromFormat("%s%c.%.3se+%zd", neg ? "-" : "", d[neg], d + neg + 1, n - neg - 1);
    Py_DECREF(digits);
    return out;
}

/* Raises InvalidArgument when the integer `v` is outside lo..hi (the C type it goes
 * to): "<name> must be at most <hi>, not <v>". 1 when raised, 0 when it fits, -1 on
 * another failure (raised). */
static int refuse_range(const char *name, PyObject *v, long long lo, long long hi) {
    int overflow = 0, rc = 0;
    long long x;
    PyObject *ix = PyNumber_Index(v), *shown;
    if (!ix) return -1;
    x = PyLong_AsLongLongAndOverflow(ix, &overflow);
    if (x == -1 && PyErr_Occurred()) {
        Py_DECREF(ix);
        return -1;
    }
    if (overflow || x < lo || x > hi) {
        int above = overflow > 0 || (!overflow && x > hi);
        if ((shown = shown_int(ix))) {
            PyObject *text = PyUnicode_FromFormat("%s must be at %s %lld, not %U", name,
                                                  above ? "most" : "least", above ? hi : lo, shown);
            if (text) {
                raise_code(TOCSIN_INVALID, PyUnicode_AsUTF8(text), 0);
                Py_DECREF(text);
            }
            Py_DECREF(shown);
        }
        rc = PyErr_Occurred() ? 1 : -1;
    }
    Py_DECREF(ix);
    return rc;
}

/* Raises InvalidArgument when the str `v` cannot go to C as UTF-8 text: a lone
 * surrogate, or (unless allow_nul: text given with its length) a NUL character (the
 * C string would end there). 1 when raised. */
static int refuse_text(const char *name, PyObject *v, int allow_nul) {
    Py_ssize_t len, i, n = PyUnicode_GET_LENGTH(v);
    const char *u = PyUnicode_AsUTF8AndSize(v, &len);
    if (u && (allow_nul || strlen(u) == (size_t)len)) return 0;
    PyErr_Clear();
    for (i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ_CHAR(v, i);
        if (c == 0 && !allow_nul) {
            char msg[160];
            PyOS_snprintf(msg, sizeof msg, "%s must not contain a NUL character (at index %zd)", name, i);
            raise_code(TOCSIN_INVALID, msg, 0);
            return 1;
        }
        if (c >= 0xd800 && c <= 0xdfff) {
            char msg[160];
            PyOS_snprintf(msg, sizeof msg, "%s is not valid UTF-8 text: it holds a lone surrogate (U+%04X)",
                          name, (unsigned)c);
            raise_code(TOCSIN_INVALID, msg, 0);
            return 1;
        }
    }
    return 0;
}

/* Whether `v` is an integer argument: an int (or an int subclass, or an object with
 * __index__ such as numpy's integers), never a bool (True is not job 1), never a
 * float (1.5 is not truncated to 1). The exact int is the fast path. */
static inline int is_int_arg(PyObject *v) {
    return PyLong_CheckExact(v) || (!PyBool_Check(v) && (PyLong_Check(v) || PyIndex_Check(v)));
}

/* The types of the positional arguments against the format's units: integer units
 * (L, i, n, I, K...) take integers only, s a str, z a str or None. One type check per
 * argument; refused as InvalidArgument naming the argument. */
static int check_arg_types(PyObject *args, const char *fmt) {
    Py_ssize_t n, i = 0;
    const char *f;
    if (!PyTuple_Check(args)) return 1;
    n = PyTuple_GET_SIZE(args);
    for (f = fmt; *f && *f != ':' && *f != ';' && i < n; f++) {
        PyObject *v;
        switch (*f) {
        case '|': case '$': continue;
        default: break;
        }
        v = PyTuple_GET_ITEM(args, i);
        switch (*f) {
        case 'L': case 'K': case 'i': case 'I': case 'n': case 'l': case 'k':
        case 'h': case 'H': case 'b': case 'B':
            if (!is_int_arg(v)) return refuse_arg(fmt, i, "an integer", v);
            break;
        case 's':
            if (!PyUnicode_Check(v)) return refuse_arg(fmt, i, "a str", v);
            break;
        case 'z':
            if (v != Py_None && !PyUnicode_Check(v)) return refuse_arg(fmt, i, "a str or None", v);
            break;
        case 'O':
            if (f[1] == '!' || f[1] == '&') f++;
            break;
        default: break;
        }
        i++;
    }
    return 1;
}

/* After PyArg_ParseTuple refused a value of the right type (an integer out of the
 * range of its C type, a str with a lone surrogate or a NUL): InvalidArgument
 * naming the argument. Only on that error path; else as_invalid's translation. */
static void name_bad_value(PyObject *args, const char *fmt) {
    PyObject *type, *value, *tb;
    Py_ssize_t n, i = 0;
    const char *f;
    int found = 0;
    if (!PyErr_Occurred() || PyErr_ExceptionMatches(Error) || !PyTuple_Check(args) ||
        !(PyErr_ExceptionMatches(PyExc_ValueError) || PyErr_ExceptionMatches(PyExc_OverflowError))) {
        as_invalid(fmt);
        return;
    }
    PyErr_Fetch(&type, &value, &tb);
    n = PyTuple_GET_SIZE(args);
    for (f = fmt; !found && *f && *f != ':' && *f != ';' && i < n; f++) {
        PyObject *v;
        char name[64];
        long long lo = 0, hi = 0;
        if (*f == '|' || *f == '$') continue;
        v = PyTuple_GET_ITEM(args, i);
        switch (*f) {
        case 'L': lo = LLONG_MIN; hi = LLONG_MAX; break;
        case 'i': lo = INT_MIN; hi = INT_MAX; break;
        case 'l': lo = LONG_MIN; hi = LONG_MAX; break;
        case 'n': lo = PY_SSIZE_T_MIN; hi = PY_SSIZE_T_MAX; break;
        case 'I': lo = 0; hi = UINT_MAX; break;
        case 'O': if (f[1] == '!' || f[1] == '&') f++; break;
        default: break;
        }
        if (hi && is_int_arg(v)) {
            arg_name(fmt, i, args, name, sizeof name);
            found = refuse_range(name, v, lo, hi);
        } else if ((*f == 's' || *f == 'z') && PyUnicode_Check(v)) {
            arg_name(fmt, i, args, name, sizeof name);
            found = refuse_text(name, v, 0);
        }
        if (found < 0) PyErr_Clear(); /* not this one after all */
        found = found > 0;
        i++;
    }
    if (found) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return;
    }
    PyErr_Restore(type, value, tb);
    as_invalid(fmt);
}

/* PyArg_ParseTuple after check_arg_types; a value it cannot convert is refused
 * naming the argument (name_bad_value). */
static int parse_args(PyObject *args, const char *fmt, ...) {
    va_list va;
    int ok;
    if (!check_arg_types(args, fmt)) return 0;
    va_start(va, fmt);
    ok = PyArg_VaParse(args, fmt, va);
    va_end(va);
    if (!ok) name_bad_value(args, fmt);
    return ok;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- the Handle type (a database handle) and Tx (a transaction handle) ---- */

typedef struct {
    PyObject_HEAD
    tocsin_db *db;
    int busy;          /* calls in progress (atomic): close() waits for them */
    int closing;       /* close() started: new calls raise Closed */
    int is_tx;         /* a Tx: a core transaction handle */
    int workers;       /* open Workers on this handle (they must close first) */
    int64_t fixed_now; /* the fixed clock set by set_time() */
    PyObject *parent;  /* a Tx: its Handle (owns fixed_now, the clock's ctx) */
    PyObject *weakrefs;
} Handle;

static PyTypeObject HandleType, TxType;

/* Takes the handle for one call: 1, or 0 with Closed raised. */
static int enter(Handle *h) {
    if (!h->db || __atomic_load_n(&h->closing, __ATOMIC_ACQUIRE)) {
        raise_code(TOCSIN_CLOSED, h->is_tx ? "the transaction is over (committed or rolled back)"
                                           : "the database is closed", 0);
        return 0;
    }
    __atomic_add_fetch(&h->busy, 1, __ATOMIC_ACQ_REL);
    if (__atomic_load_n(&h->closing, __ATOMIC_ACQUIRE) || !h->db) {
        __atomic_sub_fetch(&h->busy, 1, __ATOMIC_ACQ_REL);
        raise_code(TOCSIN_CLOSED, "the database is closed", 0);
        return 0;
    }
    return 1;
}

static void leave(Handle *h, int how) {
    (void)how;
    __atomic_sub_fetch(&h->busy, 1, __ATOMIC_ACQ_REL);
}

/* Marks the handle closing and waits (GIL released) until no call is in
 * progress; a call of another thread waiting for a database lock ends at once
 * (Closed) rather than at the end of the busy timeout. */
static int quiesce(Handle *h) {
    if (__atomic_exchange_n(&h->closing, 1, __ATOMIC_ACQ_REL)) return 0; /* another close */
    if (!h->is_tx) tocsin_close_begin(h->db);
    if (__atomic_load_n(&h->busy, __ATOMIC_ACQUIRE)) {
        Py_BEGIN_ALLOW_THREADS
        while (__atomic_load_n(&h->busy, __ATOMIC_ACQUIRE)) sleep_ms(1);
        Py_END_ALLOW_THREADS
    }
    return 1;
}

/* Raises the calling thread's last failure. */
static PyObject *raise_db(Handle *h, int rc) {
    (void)h;
    return raise_last(rc);
}

/* Runs `stmt` (which sets rc) with the GIL released, inside enter/leave; on
 * failure raises and returns NULL from the calling function. */
#define CORE_CALL(h, stmt)                              \
    do {                                                \
        if (!enter(h)) return NULL;                     \
        Py_BEGIN_ALLOW_THREADS                          \
        stmt;                                           \
        Py_END_ALLOW_THREADS                            \
        leave(h, 1);                                    \
        if (rc != TOCSIN_OK) return raise_last(rc);     \
    } while (0)

static int64_t fixed_clock(void *ctx) { return *(int64_t *)ctx; }

static int Handle_init(Handle *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", "busy_timeout_ms", "max_payload_bytes", "read_only", NULL};
    const char *path;
    int busy = 0, ro = 0, rc;
    long long maxp = 0;
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    tocsin_db *db = NULL;
    if (!check_arg_types(args, "s|iLp:Handle") ||
        !PyArg_ParseTupleAndKeywords(args, kw, "s|iLp:Handle", kwlist, &path, &busy, &maxp, &ro)) {
        name_bad_value(args, "s|iLp:Handle");
        return -1;
    }
    if (self->db || self->is_tx) {
        PyErr_SetString(PyExc_RuntimeError, "Handle is already open");
        return -1;
    }
    o.busy_timeout_ms = busy;
    o.max_payload_bytes = maxp;
    o.read_only = ro;
    Py_BEGIN_ALLOW_THREADS
    rc = tocsin_open(&db, path, &o);
    Py_END_ALLOW_THREADS
    if (rc != TOCSIN_OK) {
        if (db) raise_last(rc);
        else raise_code(rc, tocsin_errstr(rc), 0);
        Py_BEGIN_ALLOW_THREADS
        tocsin_close(db);
        Py_END_ALLOW_THREADS
        return -1;
    }
    self->db = db;
    return 0;
}

/* Closes the core handle (transaction handles still open keep it alive, closed,
 * until they end). A Tx left open is rolled back. Idempotent. */
static PyObject *Handle_close(Handle *self, PyObject *unused) {
    tocsin_db *db;
    (void)unused;
    if (!self->db) Py_RETURN_NONE;
    if (!self->is_tx && __atomic_load_n(&self->workers, __ATOMIC_ACQUIRE) > 0)
        return raise_code(TOCSIN_INVALID, "close the workers of this database first", 0);
    if (!quiesce(self)) Py_RETURN_NONE;
    db = self->db;
    self->db = NULL;
    Py_BEGIN_ALLOW_THREADS
    if (self->is_tx) tocsin_tx_rollback(db);
    else tocsin_close(db);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static void Handle_dealloc(Handle *self) {
    if (self->weakrefs) PyObject_ClearWeakRefs((PyObject *)self);
    if (self->db) {
        /* Nobody else can reach us at refcount 0. */
        if (self->is_tx) tocsin_tx_rollback(self->db);
        else tocsin_close(self->db);
        self->db = NULL;
    }
    Py_CLEAR(self->parent);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Handle_closed(Handle *self, void *unused) {
    (void)unused;
    return PyBool_FromLong(self->db == NULL || __atomic_load_n(&self->closing, __ATOMIC_ACQUIRE));
}

/* ---- transactions: Tx objects over core transaction handles ---- */

/* Cancel(): a core cancel token (tocsin_cancel): fire() from any thread ends the
 * lock wait of the call bound to it (begin_tx(cancel)) with Interrupted. */
typedef struct {
    PyObject_HEAD
    tocsin_cancel *c;
} Cancel;

static PyTypeObject CancelType;

static int Cancel_init(Cancel *self, PyObject *args, PyObject *kw) {
    if (!PyArg_ParseTuple(args, ":Cancel") || (kw && PyDict_Size(kw))) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "Cancel() takes no arguments");
        return -1;
    }
    if (!self->c && !(self->c = tocsin_cancel_new())) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void Cancel_dealloc(Cancel *self) {
    tocsin_cancel_free(self->c);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Cancel_fire(Cancel *self, PyObject *unused) {
    (void)unused;
    tocsin_cancel_fire(self->c);
    Py_RETURN_NONE;
}

static PyMethodDef Cancel_methods[] = {
    {"fire", (PyCFunction)Cancel_fire, METH_NOARGS, "Ends the lock wait of the call bound to it (any thread)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CancelType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tocsin._tocsin.Cancel",
    .tp_basicsize = sizeof(Cancel),
    .tp_dealloc = (destructor)Cancel_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A cancel token for begin_tx(cancel): fire() ends its wait for the write lock.",
    .tp_methods = Cancel_methods,
    .tp_init = (initproc)Cancel_init,
    .tp_new = PyType_GenericNew,
};

/* begin_tx([cancel]): a new Tx, a write transaction (BEGIN IMMEDIATE) on a
 * connection of its own; cancel.fire() (another thread) ends its wait for the
 * write lock with Interrupted. */
static PyObject *Handle_begin_tx(Handle *self, PyObject *args) {
    tocsin_db *tx = NULL;
    int rc;
    Handle *t;
    PyObject *cancel = Py_None;
    tocsin_cancel *c = NULL;
    if (!PyArg_ParseTuple(args, "|O:begin_tx", &cancel)) return NULL;
    if (cancel != Py_None) {
        if (!PyObject_TypeCheck(cancel, &CancelType))
            return raise_code(TOCSIN_INVALID, "cancel must be a Cancel or None", 0);
        c = ((Cancel *)cancel)->c;
    }
    if (self->is_tx) return raise_code(TOCSIN_INVALID, "transactions do not nest", 0);
    CORE_CALL(self, (tocsin_thread_cancel(c), rc = tocsin_tx_begin(self->db, &tx), tocsin_thread_cancel(NULL)));
    if (!(t = (Handle *)TxType.tp_alloc(&TxType, 0))) {
        tocsin_tx_rollback(tx);
        return NULL;
    }
    t->db = tx;
    t->is_tx = 1;
    Py_INCREF(self);
    t->parent = (PyObject *)self;
    return (PyObject *)t;
}

static PyObject *end_tx(Handle *self, int commit) {
    tocsin_db *tx;
    int rc;
    if (!self->is_tx) return raise_code(TOCSIN_INVALID, "not a transaction", 0);
    if (!self->db) return raise_code(TOCSIN_INVALID, "this transaction is not open", 0);
    if (!quiesce(self)) return raise_code(TOCSIN_INVALID, "this transaction is ending in another thread", 0);
    tx = self->db;
    self->db = NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = commit ? tocsin_tx_commit(tx) : tocsin_tx_rollback(tx);
    Py_END_ALLOW_THREADS
    if (rc != TOCSIN_OK) return raise_last(rc);
    Py_RETURN_NONE;
}
static PyObject *Tx_commit(Handle *self, PyObject *u) { (void)u; return end_tx(self, 1); }
static PyObject *Tx_rollback(Handle *self, PyObject *u) { (void)u; return end_tx(self, 0); }

static PyObject *Handle_executescript(Handle *self, PyObject *args) {
    const char *sql;
    int rc;
    if (!parse_args(args, "s:executescript", &sql)) return NULL;
    CORE_CALL(self, rc = tocsin_exec(self->db, sql));
    Py_RETURN_NONE;
}

/* ---- the application's own statements ---- */

static int bind_value(sqlite3_stmt *st, int i, PyObject *v) {
    if (v == Py_None) return sqlite3_bind_null(st, i);
    if (PyBool_Check(v) || PyLong_Check(v)) {
        long long x = PyLong_AsLongLong(v);
        if (x == -1 && PyErr_Occurred()) {
            char name[32];
            PyErr_Clear();
            PyOS_snprintf(name, sizeof name, "parameter %d", i);
            if (refuse_range(name, v, LLONG_MIN, LLONG_MAX) <= 0 && !PyErr_Occurred())
                PyErr_SetString(PyExc_OverflowError, "int too big to convert");
            return -1;
        }
        return sqlite3_bind_int64(st, i, x);
    }
    if (PyFloat_Check(v)) return sqlite3_bind_double(st, i, PyFloat_AsDouble(v));
    if (PyUnicode_Check(v)) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(v, &n);
        if (!s) {
            char name[32];
            PyObject *et, *ev, *etb;
            PyErr_Fetch(&et, &ev, &etb);
            PyOS_snprintf(name, sizeof name, "parameter %d", i);
            if (refuse_text(name, v, 1) > 0) {
                Py_XDECREF(et);
                Py_XDECREF(ev);
                Py_XDECREF(etb);
            } else {
                PyErr_Restore(et, ev, etb);
            }
            return -1;
        }
        return sqlite3_bind_text64(st, i, s, (sqlite3_uint64)n, SQLITE_TRANSIENT, SQLITE_UTF8);
    }
    if (PyBytes_Check(v))
        return sqlite3_bind_blob64(st, i, PyBytes_AS_STRING(v), (sqlite3_uint64)PyBytes_GET_SIZE(v),
                                   SQLITE_TRANSIENT);
    PyErr_Format(PyExc_TypeError, "parameter %d: unsupported type %.100s", i,
                 Py_TYPE(v)->tp_name);
    return -1;
}

static int bind_params(sqlite3_stmt *st, PyObject *params) {
    int n = sqlite3_bind_parameter_count(st), i, rc;
    if (params == Py_None) params = NULL;
    if (params && PyDict_Check(params)) {
        for (i = 1; i <= n; i++) {
            const char *name = sqlite3_bind_parameter_name(st, i);
            PyObject *v;
            if (!name || !name[1]) {
                PyErr_Format(PyExc_ValueError, "parameter %d has no name but a dict was given", i);
                return -1;
            }
            v = PyDict_GetItemString(params, name + 1);
            if (!v) {
                PyErr_Format(PyExc_ValueError, "missing parameter %s", name + 1);
                return -1;
            }
            if ((rc = bind_value(st, i, v)) < 0) return -1;
            if (rc != SQLITE_OK) return rc;
        }
        return SQLITE_OK;
    }
    if (!params) {
        if (n) {
            PyErr_Format(PyExc_ValueError, "the statement has %d parameters but none were given", n);
            return -1;
        }
        return SQLITE_OK;
    }
    PyObject *seq = PySequence_Fast(params, "params must be a sequence or a dict");
    if (!seq) return -1;
    if (PySequence_Fast_GET_SIZE(seq) != n) {
        PyErr_Format(PyExc_ValueError, "the statement has %d parameters, %zd given", n,
                     PySequence_Fast_GET_SIZE(seq));
        Py_DECREF(seq);
        return -1;
    }
    for (i = 0; i < n; i++) {
        rc = bind_value(st, i + 1, PySequence_Fast_GET_ITEM(seq, i));
        if (rc != SQLITE_OK) {
            Py_DECREF(seq);
            return rc;
        }
    }
    Py_DECREF(seq);
    return SQLITE_OK;
}

static PyObject *column_value(sqlite3_stmt *st, int i) {
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_INTEGER: return PyLong_FromLongLong(sqlite3_column_int64(st, i));
    case SQLITE_FLOAT: return PyFloat_FromDouble(sqlite3_column_double(st, i));
    case SQLITE_TEXT:
        return PyUnicode_FromStringAndSize((const char *)sqlite3_column_text(st, i),
                                           sqlite3_column_bytes(st, i));
    case SQLITE_BLOB:
        return PyBytes_FromStringAndSize((const char *)sqlite3_column_blob(st, i),
                                         sqlite3_column_bytes(st, i));
    default: Py_RETURN_NONE;
    }
}

static PyObject *sqlite_failure(Handle *h, int src) {
    sqlite3 *c = tocsin_sqlite(h->db);
    /* refused by the core (transaction control: tocsin_exec's rule), its reason in
     * the thread's error (tocsin_sqlite_enter cleared it) */
    if ((src & 0xff) == SQLITE_AUTH && tocsin_errcode(NULL) == TOCSIN_INVALID)
        return raise_code(TOCSIN_INVALID, tocsin_errmsg(NULL), src);
    return raise_code(tocsin_code_of_sqlite(src), sqlite3_errmsg(c), sqlite3_extended_errcode(c));
}

/*
 * Runs one SQL statement of the application's on the handle's connection
 * (a Tx: inside its transaction) and returns its rows as a list of tuples.
 * The handle's serialisation is held throughout (tocsin_sqlite_enter), so no
 * tocsin call of another thread interleaves with the statement.
 */
static PyObject *Handle_execute(Handle *self, PyObject *args) {
    const char *sql, *tail = NULL;
    PyObject *params = Py_None, *rows = NULL;
    sqlite3_stmt *st = NULL;
    int rc;
    if (!parse_args(args, "s|O:execute", &sql, &params)) return NULL;
    if (!enter(self)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = tocsin_sqlite_enter(self->db);
    Py_END_ALLOW_THREADS
    if (rc != TOCSIN_OK) {
        leave(self, 1);
        return raise_last(rc);
    }
    Py_BEGIN_ALLOW_THREADS
    rc = sqlite3_prepare_v2(tocsin_sqlite(self->db), sql, -1, &st, &tail);
    Py_END_ALLOW_THREADS
    if (rc != SQLITE_OK) {
        sqlite_failure(self, rc);
        goto done;
    }
    if (!st) {
        raise_code(TOCSIN_INVALID, "sql holds no statement", 0);
        goto done;
    }
    while (tail && (*tail == ' ' || *tail == '\n' || *tail == '\t' || *tail == '\r' || *tail == ';')) tail++;
    if (tail && *tail) {
        raise_code(TOCSIN_INVALID, "execute runs one statement at a time (use executescript)", 0);
        goto done;
    }
    rc = bind_params(st, params);
    if (rc < 0) goto done;
    if (rc != SQLITE_OK) {
        sqlite_failure(self, rc);
        goto done;
    }
    if (!(rows = PyList_New(0))) goto done;
    for (;;) {
        int ncol, i;
        PyObject *row;
        Py_BEGIN_ALLOW_THREADS
        rc = sqlite3_step(st);
        Py_END_ALLOW_THREADS
        if (rc == SQLITE_DONE) break;
        if (rc != SQLITE_ROW) {
            sqlite_failure(self, rc);
            Py_CLEAR(rows);
            break;
        }
        ncol = sqlite3_column_count(st);
        if (!(row = PyTuple_New(ncol))) {
            Py_CLEAR(rows);
            break;
        }
        for (i = 0; i < ncol; i++) {
            PyObject *v = column_value(st, i);
            if (!v) break;
            PyTuple_SET_ITEM(row, i, v);
        }
        if (i < ncol || PyList_Append(rows, row) < 0) {
            Py_DECREF(row);
            Py_CLEAR(rows);
            break;
        }
        Py_DECREF(row);
    }
done:
    sqlite3_finalize(st);
    tocsin_sqlite_leave(self->db);
    leave(self, 1);
    return rows;
}

static PyObject *Handle_changes(Handle *self, PyObject *u) {
    int how;
    long long n;
    (void)u;
    if (!(how = enter(self))) return NULL;
    n = sqlite3_changes64(tocsin_sqlite(self->db));
    leave(self, how);
    return PyLong_FromLongLong(n);
}

static PyObject *Handle_last_insert_rowid(Handle *self, PyObject *u) {
    int how;
    long long n;
    (void)u;
    if (!(how = enter(self))) return NULL;
    n = sqlite3_last_insert_rowid(tocsin_sqlite(self->db));
    leave(self, how);
    return PyLong_FromLongLong(n);
}

/* ---- clock and limits ---- */

static PyObject *Handle_now(Handle *self, PyObject *u) {
    int how;
    long long n;
    (void)u;
    if (!(how = enter(self))) return NULL;
    n = tocsin_now(self->db);
    leave(self, how);
    return PyLong_FromLongLong(n);
}

/* set_time(ms): a fixed clock for tests; set_time(None): the system clock. */
static PyObject *Handle_set_time(Handle *self, PyObject *arg) {
    int how;
    long long ms = 0;
    if (arg != Py_None) {
        if (!is_int_arg(arg)) return refuse_arg(":set_time", 0, "an integer or None", arg), NULL;
        ms = PyLong_AsLongLong(arg);
        if (ms == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            if (refuse_range("time", arg, LLONG_MIN, LLONG_MAX) <= 0) as_invalid(":set_time");
            return NULL;
        }
        if (ms < 0) return raise_code(TOCSIN_INVALID, "time must be >= 0 ms", 0);
    }
    if (!(how = enter(self))) return NULL;
    if (arg == Py_None) {
        tocsin_set_clock(self->db, NULL, NULL);
    } else {
        self->fixed_now = ms;
        tocsin_set_clock(self->db, fixed_clock, &self->fixed_now);
    }
    leave(self, how);
    Py_RETURN_NONE;
}

static PyObject *Handle_set_max_payload(Handle *self, PyObject *args) {
    long long n;
    int rc;
    if (!parse_args(args, "L:set_max_payload", &n)) return NULL;
    CORE_CALL(self, rc = tocsin_set_max_payload(self->db, n));
    Py_RETURN_NONE;
}

/* ---- queue ---- */

static PyObject *job_tuple(const tocsin_job *j) {
    return Py_BuildValue("(LsszzLiiLLLLLzzzzL)", (long long)j->id, j->queue, j->state, j->payload,
                         j->meta, (long long)j->priority, j->attempts, j->max_attempts,
                         (long long)j->token, (long long)j->run_at, (long long)j->created_at,
                         (long long)j->lease_until, (long long)j->expires_at, j->unique_key,
                         j->worker, j->last_error, j->reason, (long long)j->died_at);
}

static PyObject *jobs_list(tocsin_job *jobs, size_t n) {
    PyObject *list = PyList_New((Py_ssize_t)n);
    size_t i;
    if (!list) return NULL;
    for (i = 0; i < n; i++) {
        PyObject *t = job_tuple(&jobs[i]);
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    return list;
}

/* enqueue(queue, payload, priority, delay_ms, run_at_ms, max_attempts, expires_ms, unique_key, meta) */
static PyObject *Handle_enqueue(Handle *self, PyObject *args) {
    const char *queue, *payload, *ukey = NULL, *meta = NULL;
    long long prio = 0, delay = 0, run_at = 0, expires = 0;
    int maxa = 0, rc;
    int64_t id;
    tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
    if (!parse_args(args, "ss|LLLiLzz:enqueue", &queue, &payload, &prio, &delay, &run_at,
                          &maxa, &expires, &ukey, &meta))
        return NULL;
    o.priority = prio;
    o.delay_ms = delay;
    o.run_at_ms = run_at;
    o.max_attempts = maxa;
    o.expires_ms = expires;
    o.unique_key = ukey;
    o.meta = meta;
    CORE_CALL(self, rc = tocsin_queue_enqueue(self->db, &id, queue, payload, &o));
    return PyLong_FromLongLong(id);
}

/* enqueue_many(specs): each spec a tuple of enqueue's arguments. Returns the ids. */
static PyObject *Handle_enqueue_many(Handle *self, PyObject *args) {
    PyObject *arg, *specs, *out = NULL;
    Py_ssize_t n, i;
    tocsin_job_spec *sp = NULL;
    tocsin_enqueue_opts *op = NULL;
    int64_t *ids = NULL;
    int rc;
    if (!parse_args(args, "O:enqueue_many", &arg)) return NULL;
    /* A tuple of the items: the strings we point into stay alive and unchanged
     * while the GIL is released. */
    if (!(specs = PySequence_Tuple(arg))) return NULL;
    n = PyTuple_GET_SIZE(specs);
    sp = PyMem_Calloc((size_t)n + 1, sizeof *sp);
    op = PyMem_Calloc((size_t)n + 1, sizeof *op);
    ids = PyMem_Calloc((size_t)n + 1, sizeof *ids);
    if (!sp || !op || !ids) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < n; i++) {
        PyObject *t = PyTuple_GET_ITEM(specs, i);
        long long prio = 0, delay = 0, run_at = 0, expires = 0;
        int maxa = 0;
        tocsin_enqueue_opts init = TOCSIN_ENQUEUE_OPTS_INIT;
        op[i] = init;
        if (!PyTuple_Check(t)) {
            PyErr_Format(PyExc_TypeError, "job %zd: spec must be a tuple", i);
            goto done;
        }
        if (!parse_args(t, "ss|LLLiLzz:enqueue_many", &sp[i].queue, &sp[i].payload, &prio,
                              &delay, &run_at, &maxa, &expires, &op[i].unique_key, &op[i].meta))
            goto done;
        op[i].priority = prio;
        op[i].delay_ms = delay;
        op[i].run_at_ms = run_at;
        op[i].max_attempts = maxa;
        op[i].expires_ms = expires;
        sp[i].opts = &op[i];
    }
    {
        int how = enter(self);
        if (!how) goto done;
        Py_BEGIN_ALLOW_THREADS
        rc = tocsin_queue_enqueue_many(self->db, ids, sp, (size_t)n);
        Py_END_ALLOW_THREADS
        if (rc != TOCSIN_OK) {
            raise_db(self, rc);
            leave(self, how);
            goto done;
        }
        leave(self, how);
    }
    if (!(out = PyList_New(n))) goto done;
    for (i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLongLong(ids[i]);
        if (!v) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, v);
    }
done:
    PyMem_Free(sp);
    PyMem_Free(op);
    PyMem_Free(ids);
    Py_DECREF(specs);
    return out;
}

static PyObject *Handle_claim(Handle *self, PyObject *args) {
    const char *queue, *worker;
    Py_ssize_t max;
    long long vis;
    tocsin_job *jobs = NULL;
    size_t n = 0;
    int rc;
    PyObject *out;
    if (!parse_args(args, "ssnL:claim", &queue, &worker, &max, &vis)) return NULL;
    if (max < 0) return raise_code(TOCSIN_INVALID, "n must be >= 1", 0);
    CORE_CALL(self, rc = tocsin_queue_claim(self->db, &jobs, &n, queue, worker, (size_t)max, vis));
    out = jobs_list(jobs, n);
    tocsin_jobs_free(jobs, n);
    return out;
}

static PyObject *Handle_ack(Handle *self, PyObject *args) {
    long long id, token;
    int ok = 0, rc;
    if (!parse_args(args, "LL:ack", &id, &token)) return NULL;
    CORE_CALL(self, rc = tocsin_job_ack(self->db, &ok, id, token));
    return PyBool_FromLong(ok);
}

static int64_t *int_array(PyObject *seq, Py_ssize_t *n, const char *what) {
    PyObject *f;
    int64_t *a;
    Py_ssize_t i;
    if (!PySequence_Check(seq) || PyUnicode_Check(seq) || PyBytes_Check(seq)) {
        PyErr_Format(code_exc[TOCSIN_INVALID], "%s must be a sequence of integers, not %.100s", what,
                     Py_TYPE(seq)->tp_name);
        return NULL;
    }
    if (!(f = PySequence_Fast(seq, what))) return NULL;
    *n = PySequence_Fast_GET_SIZE(f);
    if (!(a = PyMem_Calloc((size_t)*n + 1, sizeof *a))) {
        Py_DECREF(f);
        PyErr_NoMemory();
        return NULL;
    }
    for (i = 0; i < *n; i++) {
        PyObject *v = PySequence_Fast_GET_ITEM(f, i);
        if (!is_int_arg(v)) {
            PyErr_Format(code_exc[TOCSIN_INVALID], "%s[%zd] must be an integer, not %.100s", what,
                         i, Py_TYPE(v)->tp_name);
            PyMem_Free(a);
            Py_DECREF(f);
            return NULL;
        }
        a[i] = PyLong_AsLongLong(v);
        if (a[i] == -1 && PyErr_Occurred()) {
            char name[64];
            PyObject *et, *ev, *etb;
            PyErr_Fetch(&et, &ev, &etb);
            PyOS_snprintf(name, sizeof name, "%s[%zd]", what, i);
            if (refuse_range(name, v, LLONG_MIN, LLONG_MAX) > 0) {
                Py_XDECREF(et);
                Py_XDECREF(ev);
                Py_XDECREF(etb);
            } else {
                PyErr_Clear();
                PyErr_Restore(et, ev, etb);
                as_invalid(":ack_batch");
            }
            PyMem_Free(a);
            Py_DECREF(f);
            return NULL;
        }
    }
    Py_DECREF(f);
    return a;
}

static PyObject *Handle_ack_batch(Handle *self, PyObject *args) {
    PyObject *pids, *ptoks;
    int64_t *ids = NULL, *toks = NULL;
    Py_ssize_t n1 = 0, n2 = 0;
    size_t acked = 0;
    int rc, how;
    if (!parse_args(args, "OO:ack_batch", &pids, &ptoks)) return NULL;
    if (!(ids = int_array(pids, &n1, "ids"))) return NULL;
    if (!(toks = int_array(ptoks, &n2, "tokens"))) goto fail;
    if (n1 != n2) {
        raise_code(TOCSIN_INVALID, "ids and tokens must have the same length", 0);
        goto fail;
    }
    if (!(how = enter(self))) goto fail;
    Py_BEGIN_ALLOW_THREADS
    rc = tocsin_job_ack_batch(self->db, &acked, ids, toks, (size_t)n1);
    Py_END_ALLOW_THREADS
    if (rc != TOCSIN_OK) raise_db(self, rc);
    leave(self, how);
    PyMem_Free(ids);
    PyMem_Free(toks);
    if (rc != TOCSIN_OK) return NULL;
    return PyLong_FromSize_t(acked);
fail:
    PyMem_Free(ids);
    PyMem_Free(toks);
    return NULL;
}

static PyObject *Handle_retry(Handle *self, PyObject *args) {
    long long id, token, delay = -1;
    const char *error = NULL;
    int ok = 0, rc;
    if (!parse_args(args, "LL|Lz:retry", &id, &token, &delay, &error)) return NULL;
    CORE_CALL(self, rc = tocsin_job_retry(self->db, &ok, id, token, delay, error));
    return PyBool_FromLong(ok);
}

static PyObject *Handle_fail(Handle *self, PyObject *args) {
    long long id, token;
    const char *error = NULL;
    int ok = 0, rc;
    if (!parse_args(args, "LL|z:fail", &id, &token, &error)) return NULL;
    CORE_CALL(self, rc = tocsin_job_fail(self->db, &ok, id, token, error));
    return PyBool_FromLong(ok);
}

static PyObject *Handle_hand_back(Handle *self, PyObject *args) {
    long long id, token, delay = 0;
    int ok = 0, rc;
    if (!parse_args(args, "LL|L:hand_back", &id, &token, &delay)) return NULL;
    CORE_CALL(self, rc = tocsin_job_hand_back(self->db, &ok, id, token, delay));
    return PyBool_FromLong(ok);
}

static PyObject *Handle_heartbeat(Handle *self, PyObject *args) {
    long long id, token, extend;
    int ok = 0, rc;
    if (!parse_args(args, "LLL:heartbeat", &id, &token, &extend)) return NULL;
    CORE_CALL(self, rc = tocsin_job_heartbeat(self->db, &ok, id, token, extend));
    return PyBool_FromLong(ok);
}

static PyObject *Handle_cancel(Handle *self, PyObject *args) {
    long long id;
    int ok = 0, rc;
    if (!parse_args(args, "L:cancel", &id)) return NULL;
    CORE_CALL(self, rc = tocsin_job_cancel(self->db, &ok, id));
    return PyBool_FromLong(ok);
}

static PyObject *Handle_get(Handle *self, PyObject *args) {
    long long id;
    tocsin_job *job = NULL;
    int rc;
    PyObject *out;
    if (!parse_args(args, "L:get", &id)) return NULL;
    CORE_CALL(self, rc = tocsin_job_get(self->db, &job, id));
    if (!job) Py_RETURN_NONE;
    out = job_tuple(job);
    tocsin_jobs_free(job, 1);
    return out;
}

static PyObject *Handle_pause(Handle *self, PyObject *args) {
    const char *q;
    int rc;
    if (!parse_args(args, "s:pause", &q)) return NULL;
    CORE_CALL(self, rc = tocsin_queue_pause(self->db, q));
    Py_RETURN_NONE;
}

static PyObject *Handle_resume(Handle *self, PyObject *args) {
    const char *q;
    int rc;
    if (!parse_args(args, "s:resume", &q)) return NULL;
    CORE_CALL(self, rc = tocsin_queue_resume(self->db, q));
    Py_RETURN_NONE;
}

static PyObject *Handle_is_paused(Handle *self, PyObject *args) {
    const char *q;
    int rc, p = 0;
    if (!parse_args(args, "s:is_paused", &q)) return NULL;
    CORE_CALL(self, rc = tocsin_queue_is_paused(self->db, &p, q));
    return PyBool_FromLong(p);
}

static PyObject *take_json(char *json) {
    PyObject *s = json ? PyUnicode_FromString(json) : NULL;
    tocsin_free(json);
    if (!json) return raise_code(TOCSIN_NOMEM, "out of memory", 0);
    return s;
}

static PyObject *Handle_stats(Handle *self, PyObject *args) {
    const char *q = NULL;
    char *json = NULL;
    int rc;
    if (!parse_args(args, "|z:stats", &q)) return NULL;
    CORE_CALL(self, rc = tocsin_queue_stats(self->db, &json, q));
    return take_json(json);
}

/* A tuple of the strings of `seq` (kept alive by the caller) and their pointers. */
static const char **str_array(PyObject *tuple, int allow_none, const char *what) {
    Py_ssize_t n = PyTuple_GET_SIZE(tuple), i;
    const char **a = PyMem_Calloc((size_t)n + 1, sizeof *a);
    if (!a) {
        PyErr_NoMemory();
        return NULL;
    }
    for (i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(tuple, i);
        Py_ssize_t len;
        if (allow_none && v == Py_None) continue;
        if (!PyUnicode_Check(v)) {
            PyErr_Format(code_exc[TOCSIN_INVALID], "%s[%zd] must be a str%s, not %.100s", what, i,
                         allow_none ? " or None" : "", Py_TYPE(v)->tp_name);
            PyMem_Free(a);
            return NULL;
        }
        if (!(a[i] = PyUnicode_AsUTF8AndSize(v, &len))) {
            PyErr_Clear();
            PyErr_Format(code_exc[TOCSIN_INVALID], "%s[%zd] is not valid UTF-8 (a lone surrogate)", what, i);
            PyMem_Free(a);
            return NULL;
        }
        if ((size_t)len != strlen(a[i])) {
            PyErr_Format(code_exc[TOCSIN_INVALID], "%s[%zd] contains a NUL character", what, i);
            PyMem_Free(a);
            return NULL;
        }
    }
    return a;
}

static PyObject *Handle_next_deadline(Handle *self, PyObject *args) {
    PyObject *arg, *t;
    const char **qs;
    int64_t ms = -1;
    int rc, how;
    if (!parse_args(args, "O:next_deadline", &arg)) return NULL;
    if (!(t = PySequence_Tuple(arg))) return NULL;
    if (!(qs = str_array(t, 0, "queues"))) {
        Py_DECREF(t);
        return NULL;
    }
    if ((how = enter(self))) {
        Py_BEGIN_ALLOW_THREADS
        rc = tocsin_queue_next_deadline(self->db, &ms, qs, (size_t)PyTuple_GET_SIZE(t));
        Py_END_ALLOW_THREADS
        if (rc != TOCSIN_OK) {
            raise_db(self, rc);
            how = -how;
        }
        leave(self, how < 0 ? -how : how);
    }
    PyMem_Free(qs);
    Py_DECREF(t);
    if (how <= 0) return NULL;
    if (ms < 0) Py_RETURN_NONE;
    return PyLong_FromLongLong(ms);
}

static PyObject *Handle_dead_list(Handle *self, PyObject *args) {
    const char *q = NULL;
    long long after = 0;
    Py_ssize_t limit = 100;
    tocsin_job *jobs = NULL;
    size_t n = 0;
    int rc;
    PyObject *out;
    if (!parse_args(args, "|zLn:dead_list", &q, &after, &limit)) return NULL;
    if (limit < 1) limit = 0; /* the core refuses it, naming the range */
    CORE_CALL(self, rc = tocsin_dead_list(self->db, &jobs, &n, q, after, (size_t)limit));
    out = jobs_list(jobs, n);
    tocsin_jobs_free(jobs, n);
    return out;
}

static PyObject *Handle_dead_requeue(Handle *self, PyObject *args) {
    long long id;
    int ok = 0, rc;
    if (!parse_args(args, "L:dead_requeue", &id)) return NULL;
    CORE_CALL(self, rc = tocsin_dead_requeue(self->db, &ok, id));
    return PyBool_FromLong(ok);
}

static PyObject *Handle_dead_purge(Handle *self, PyObject *args) {
    const char *q = NULL;
    long long before = 0;
    int64_t n = 0;
    int rc;
    if (!parse_args(args, "|zL:dead_purge", &q, &before)) return NULL;
    CORE_CALL(self, rc = tocsin_dead_purge(self->db, &n, q, before));
    return PyLong_FromLongLong(n);
}

/* ---- streams and notifications ---- */

static PyObject *messages_list(tocsin_message *m, size_t n) {
    PyObject *list = PyList_New((Py_ssize_t)n);
    size_t i;
    if (!list) return NULL;
    for (i = 0; i < n; i++) {
        PyObject *t = Py_BuildValue("(LszszL)", (long long)m[i].id, m[i].name, m[i].key,
                                    m[i].payload, m[i].meta, (long long)m[i].created_at);
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    return list;
}

static PyObject *Handle_publish(Handle *self, PyObject *args) {
    const char *topic, *payload, *key = NULL, *meta = NULL;
    int64_t off = 0;
    int rc;
    if (!parse_args(args, "ss|zz:publish", &topic, &payload, &key, &meta)) return NULL;
    CORE_CALL(self, rc = tocsin_stream_publish(self->db, &off, topic, payload, key, meta));
    return PyLong_FromLongLong(off);
}

static PyObject *Handle_publish_many(Handle *self, PyObject *args) {
    const char *topic;
    PyObject *pp, *pk = Py_None, *tp = NULL, *tk = NULL, *out = NULL;
    const char **payloads = NULL, **keys = NULL;
    int64_t *offs = NULL;
    Py_ssize_t n, i;
    int rc, how;
    if (!parse_args(args, "sO|O:publish_many", &topic, &pp, &pk)) return NULL;
    if (!(tp = PySequence_Tuple(pp))) return NULL;
    n = PyTuple_GET_SIZE(tp);
    if (!(payloads = str_array(tp, 0, "payloads"))) goto done;
    if (pk != Py_None) {
        if (!(tk = PySequence_Tuple(pk))) goto done;
        if (PyTuple_GET_SIZE(tk) != n) {
            raise_code(TOCSIN_INVALID, "keys must have one entry per payload", 0);
            goto done;
        }
        if (!(keys = str_array(tk, 1, "keys"))) goto done;
    }
    if (!(offs = PyMem_Calloc((size_t)n + 1, sizeof *offs))) {
        PyErr_NoMemory();
        goto done;
    }
    if (!(how = enter(self))) goto done;
    Py_BEGIN_ALLOW_THREADS
    rc = tocsin_stream_publish_many(self->db, offs, topic, payloads, keys, (size_t)n);
    Py_END_ALLOW_THREADS
    if (rc != TOCSIN_OK) {
        raise_db(self, rc);
        leave(self, how);
        goto done;
    }
    leave(self, how);
    if (!(out = PyList_New(n))) goto done;
    for (i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLongLong(offs[i]);
        if (!v) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, v);
    }
done:
    PyMem_Free(payloads);
    PyMem_Free(keys);
    PyMem_Free(offs);
    Py_XDECREF(tp);
    Py_XDECREF(tk);
    return out;
}

/* stream_read / notify_read(name, after, limit): the core's readers share a shape. */
typedef int (*reader_fn)(tocsin_db *, tocsin_message **, size_t *, const char *, int64_t, size_t);

static PyObject *read_messages(Handle *self, PyObject *args, const char *fmt, reader_fn read) {
    const char *name;
    long long after;
    Py_ssize_t limit;
    tocsin_message *m = NULL;
    size_t n = 0;
    int rc;
    PyObject *out;
    if (!parse_args(args, fmt, &name, &after, &limit)) return NULL;
    if (limit < 1) limit = 0; /* the core refuses it, naming the range */
    CORE_CALL(self, rc = read(self->db, &m, &n, name, after, (size_t)limit));
    out = messages_list(m, n);
    tocsin_messages_free(m, n);
    return out;
}

static PyObject *Handle_stream_read(Handle *self, PyObject *args) {
    return read_messages(self, args, "sLn:stream_read", tocsin_stream_read);
}

static PyObject *Handle_save_offset(Handle *self, PyObject *args) {
    const char *consumer, *topic;
    long long off;
    int64_t stored = 0;
    int rc;
    if (!parse_args(args, "ssL:save_offset", &consumer, &topic, &off)) return NULL;
    CORE_CALL(self, rc = tocsin_stream_save_offset(self->db, &stored, consumer, topic, off));
    return PyLong_FromLongLong(stored);
}

static PyObject *Handle_offset(Handle *self, PyObject *args) {
    const char *consumer, *topic;
    int64_t off = 0;
    int rc;
    if (!parse_args(args, "ss:offset", &consumer, &topic)) return NULL;
    CORE_CALL(self, rc = tocsin_stream_offset(self->db, &off, consumer, topic));
    return PyLong_FromLongLong(off);
}

static PyObject *Handle_trim(Handle *self, PyObject *args) {
    const char *topic;
    long long age = 0, count = 0;
    int below = 0, rc;
    int64_t n = 0;
    tocsin_trim_opts o = TOCSIN_TRIM_OPTS_INIT;
    if (!parse_args(args, "s|LLp:trim", &topic, &age, &count, &below)) return NULL;
    o.max_age_ms = age;
    o.max_count = count;
    o.below_consumers = below;
    CORE_CALL(self, rc = tocsin_stream_trim(self->db, &n, topic, &o));
    return PyLong_FromLongLong(n);
}

static PyObject *Handle_notify(Handle *self, PyObject *args) {
    const char *channel, *payload, *meta = NULL;
    int64_t id = 0;
    int rc;
    if (!parse_args(args, "ss|z:notify", &channel, &payload, &meta)) return NULL;
    CORE_CALL(self, rc = tocsin_notify(self->db, &id, channel, payload, meta));
    return PyLong_FromLongLong(id);
}

static PyObject *Handle_notify_read(Handle *self, PyObject *args) {
    return read_messages(self, args, "sLn:notify_read", tocsin_notify_read);
}

static PyObject *Handle_notify_max_id(Handle *self, PyObject *u) {
    int64_t id = 0;
    int rc;
    (void)u;
    CORE_CALL(self, rc = tocsin_notify_max_id(self->db, &id));
    return PyLong_FromLongLong(id);
}

static PyObject *Handle_notify_prune(Handle *self, PyObject *args) {
    long long age = 0, keep = 0;
    int64_t n = 0;
    int rc;
    if (!parse_args(args, "|LL:notify_prune", &age, &keep)) return NULL;
    CORE_CALL(self, rc = tocsin_notify_prune(self->db, &n, age, keep));
    return PyLong_FromLongLong(n);
}

static PyObject *Handle_notify_set_autotrim(Handle *self, PyObject *args) {
    long long age, keep, one_in;
    int rc;
    if (!parse_args(args, "LLL:notify_set_autotrim", &age, &keep, &one_in)) return NULL;
    CORE_CALL(self, rc = tocsin_notify_set_autotrim(self->db, age, keep, one_in));
    Py_RETURN_NONE;
}


/* ---- results ---- */

static PyObject *Handle_result_save(Handle *self, PyObject *args) {
    long long id, ttl = 0;
    const char *value;
    int rc;
    if (!parse_args(args, "Ls|L:result_save", &id, &value, &ttl)) return NULL;
    CORE_CALL(self, rc = tocsin_result_save(self->db, id, value, ttl));
    Py_RETURN_NONE;
}

static PyObject *Handle_result_save_error(Handle *self, PyObject *args) {
    long long id, ttl = 0;
    const char *type, *msg = NULL;
    int rc;
    if (!parse_args(args, "Lsz|L:result_save_error", &id, &type, &msg, &ttl)) return NULL;
    CORE_CALL(self, rc = tocsin_result_save_error(self->db, id, type, msg, ttl));
    Py_RETURN_NONE;
}

/* None, or (job_id, is_error, value_json, error_type, error_message, created_at,
 * expires_at); frees r. */
static PyObject *result_tuple(tocsin_result *r) {
    PyObject *out;
    if (!r) Py_RETURN_NONE;
    out = Py_BuildValue("(LNzzzLLz)", (long long)r->job_id, PyBool_FromLong(r->is_error), r->value,
                        r->error_type, r->error_message, (long long)r->created_at,
                        (long long)r->expires_at, r->error_trace);
    tocsin_result_free(r);
    return out;
}

static PyObject *Handle_result_get(Handle *self, PyObject *args) {
    long long id;
    tocsin_result *r = NULL;
    int rc;
    if (!parse_args(args, "L:result_get", &id)) return NULL;
    CORE_CALL(self, rc = tocsin_result_get(self->db, &r, id));
    return result_tuple(r);
}

/* check_name(what, name): the core's name rule, raising InvalidArgument. */
static PyObject *Handle_check_name(Handle *self, PyObject *args) {
    const char *what, *name;
    int rc;
    if (!parse_args(args, "ss:check_name", &what, &name)) return NULL;
    CORE_CALL(self, rc = tocsin_check_name(self->db, what, name));
    Py_RETURN_NONE;
}

/* The core's outcome check: None while the job runs, a result tuple as
 * result_get (a "JobDead" error for a job that died without a result);
 * NotFound when neither a job nor a result has that id. */
static PyObject *Handle_result_check(Handle *self, PyObject *args) {
    long long id;
    tocsin_result *r = NULL;
    int rc;
    if (!parse_args(args, "L:result_check", &id)) return NULL;
    CORE_CALL(self, rc = tocsin_result_check(self->db, &r, id));
    return result_tuple(r);
}

static PyObject *Handle_result_delete(Handle *self, PyObject *args) {
    long long id;
    int ok = 0, rc;
    if (!parse_args(args, "L:result_delete", &id)) return NULL;
    CORE_CALL(self, rc = tocsin_result_delete(self->db, &ok, id));
    return PyBool_FromLong(ok);
}

static PyObject *Handle_result_sweep(Handle *self, PyObject *u) {
    int64_t n = 0;
    int rc;
    (void)u;
    CORE_CALL(self, rc = tocsin_result_sweep(self->db, &n));
    return PyLong_FromLongLong(n);
}

/* ---- locks ---- */

static PyObject *Handle_lock_acquire(Handle *self, PyObject *args) {
    const char *name, *owner;
    long long ttl;
    int64_t token = 0, until = 0;
    int rc;
    if (!parse_args(args, "ssL:lock_acquire", &name, &owner, &ttl)) return NULL;
    CORE_CALL(self, rc = tocsin_lock_acquire(self->db, &token, &until, name, owner, ttl));
    return Py_BuildValue("(LL)", (long long)token, (long long)until);
}

static PyObject *Handle_lock_renew(Handle *self, PyObject *args) {
    const char *name, *owner;
    long long token, ttl;
    int ok = 0, rc;
    if (!parse_args(args, "ssLL:lock_renew", &name, &owner, &token, &ttl)) return NULL;
    CORE_CALL(self, rc = tocsin_lock_renew(self->db, &ok, name, owner, token, ttl));
    return PyBool_FromLong(ok);
}

static PyObject *Handle_lock_release(Handle *self, PyObject *args) {
    const char *name, *owner;
    long long token;
    int ok = 0, rc;
    if (!parse_args(args, "ssL:lock_release", &name, &owner, &token)) return NULL;
    CORE_CALL(self, rc = tocsin_lock_release(self->db, &ok, name, owner, token));
    return PyBool_FromLong(ok);
}

static PyObject *Handle_lock_holder(Handle *self, PyObject *args) {
    const char *name;
    char *owner = NULL;
    int64_t token = 0, until = 0;
    int rc;
    PyObject *out;
    if (!parse_args(args, "s:lock_holder", &name)) return NULL;
    CORE_CALL(self, rc = tocsin_lock_holder(self->db, &owner, &token, &until, name));
    out = Py_BuildValue("(zLL)", owner, (long long)token, (long long)until);
    tocsin_free(owner);
    return out;
}

/* ---- rate limits ---- */

static PyObject *Handle_ratelimit_try(Handle *self, PyObject *args) {
    const char *name;
    long long limit, per;
    int allowed = 0, rc;
    int64_t after = 0, remaining = 0;
    if (!parse_args(args, "sLL:ratelimit_try", &name, &limit, &per)) return NULL;
    CORE_CALL(self, rc = tocsin_ratelimit_try(self->db, &allowed, &after, &remaining, name, limit, per));
    return Py_BuildValue("(NLL)", PyBool_FromLong(allowed), (long long)after, (long long)remaining);
}

static PyObject *Handle_ratelimit_sweep(Handle *self, PyObject *u) {
    int64_t n = 0;
    int rc;
    (void)u;
    CORE_CALL(self, rc = tocsin_ratelimit_sweep(self->db, &n));
    return PyLong_FromLongLong(n);
}

static PyObject *Handle_ratelimit_reset(Handle *self, PyObject *args) {
    const char *name;
    int64_t n = 0;
    int rc;
    if (!parse_args(args, "s:ratelimit_reset", &name)) return NULL;
    CORE_CALL(self, rc = tocsin_ratelimit_reset(self->db, &n, name));
    return PyLong_FromLongLong(n);
}

/* ---- schedules ---- */

static PyObject *schedule_tuple(const tocsin_schedule *s) {
    return Py_BuildValue("(ssssNLiLiiNNLLLLLLL)", s->name, s->cron, s->queue, s->payload,
                         s->meta ? PyUnicode_FromString(s->meta) : (Py_INCREF(Py_None), Py_None),
                         (long long)s->priority, s->max_attempts, (long long)s->job_expires_ms,
                         s->catch_up, s->max_catch_up, PyBool_FromLong(s->local_time),
                         PyBool_FromLong(s->paused), (long long)s->next_fire,
                         (long long)s->last_fire, (long long)s->last_job_id,
                         (long long)s->fired_count, (long long)s->skipped_count,
                         (long long)s->created_at, (long long)s->updated_at);
}

/* opts: (priority, max_attempts, job_expires_ms, catch_up, max_catch_up, local_time, meta) */
static int schedule_opts(PyObject *t, tocsin_schedule_opts *o) {
    long long prio = 0, expires = 0;
    int maxa = 0, catch_up = 0, max_catch = 0, local = 0;
    const char *meta = NULL;
    if (!parse_args(t, "LiLiipz:schedule options", &prio, &maxa, &expires, &catch_up,
                          &max_catch, &local, &meta))
        return -1;
    o->priority = prio;
    o->max_attempts = maxa;
    o->job_expires_ms = expires;
    o->catch_up = catch_up;
    o->max_catch_up = max_catch;
    o->local_time = local;
    o->meta = meta;
    return 0;
}

static PyObject *Handle_schedule_set(Handle *self, PyObject *args) {
    const char *name, *cron, *queue, *payload;
    PyObject *opts;
    tocsin_schedule_opts o = TOCSIN_SCHEDULE_OPTS_INIT;
    int64_t next = 0;
    int rc;
    if (!parse_args(args, "ssssO!:schedule_set", &name, &cron, &queue, &payload,
                          &PyTuple_Type, &opts))
        return NULL;
    if (schedule_opts(opts, &o) < 0) return NULL;
    CORE_CALL(self, rc = tocsin_schedule_set(self->db, &next, name, cron, queue, payload, &o));
    return PyLong_FromLongLong(next);
}

/* schedule_update(name, cron, queue, payload, opts, fields): cron/queue/payload None keep
 * their value; of opts (None: keep every option) only the TOCSIN_SCHEDULE_* flags in
 * `fields` change (field presence is the core's: tocsin_schedule_opts.fields). */
static PyObject *Handle_schedule_update(Handle *self, PyObject *args) {
    const char *name, *cron = NULL, *queue = NULL, *payload = NULL;
    PyObject *opts = Py_None;
    unsigned int fields = 0;
    tocsin_schedule_opts o = TOCSIN_SCHEDULE_OPTS_INIT;
    int64_t next = 0;
    int rc;
    if (!parse_args(args, "szzz|OI:schedule_update", &name, &cron, &queue, &payload, &opts,
                          &fields))
        return NULL;
    if (opts != Py_None) {
        if (!PyTuple_Check(opts)) return raise_code(TOCSIN_INVALID, "options must be a tuple", 0);
        if (schedule_opts(opts, &o) < 0) return NULL;
        o.fields = fields;
    }
    CORE_CALL(self, rc = tocsin_schedule_update(self->db, &next, name, cron, queue, payload,
                                                opts == Py_None ? NULL : &o));
    return PyLong_FromLongLong(next);
}

static PyObject *Handle_schedule_pause(Handle *self, PyObject *args) {
    const char *name;
    int rc;
    if (!parse_args(args, "s:schedule_pause", &name)) return NULL;
    CORE_CALL(self, rc = tocsin_schedule_pause(self->db, name));
    Py_RETURN_NONE;
}

static PyObject *Handle_schedule_resume(Handle *self, PyObject *args) {
    const char *name;
    int rc;
    if (!parse_args(args, "s:schedule_resume", &name)) return NULL;
    CORE_CALL(self, rc = tocsin_schedule_resume(self->db, name));
    Py_RETURN_NONE;
}

static PyObject *Handle_schedule_remove(Handle *self, PyObject *args) {
    const char *name;
    int ok = 0, rc;
    if (!parse_args(args, "s:schedule_remove", &name)) return NULL;
    CORE_CALL(self, rc = tocsin_schedule_remove(self->db, &ok, name));
    return PyBool_FromLong(ok);
}

static PyObject *Handle_schedule_get(Handle *self, PyObject *args) {
    const char *name;
    tocsin_schedule *s = NULL;
    int rc;
    PyObject *out;
    if (!parse_args(args, "s:schedule_get", &name)) return NULL;
    CORE_CALL(self, rc = tocsin_schedule_get(self->db, &s, name));
    if (!s) Py_RETURN_NONE;
    out = schedule_tuple(s);
    tocsin_schedules_free(s, 1);
    return out;
}

static PyObject *Handle_schedule_list(Handle *self, PyObject *u) {
    tocsin_schedule *s = NULL;
    size_t n = 0, i;
    int rc;
    PyObject *out;
    (void)u;
    CORE_CALL(self, rc = tocsin_schedule_list(self->db, &s, &n));
    if ((out = PyList_New((Py_ssize_t)n))) {
        for (i = 0; i < n; i++) {
            PyObject *t = schedule_tuple(&s[i]);
            if (!t) {
                Py_CLEAR(out);
                break;
            }
            PyList_SET_ITEM(out, (Py_ssize_t)i, t);
        }
    }
    tocsin_schedules_free(s, n);
    return out;
}

static PyObject *Handle_scheduler_tick(Handle *self, PyObject *u) {
    int64_t n = 0;
    int rc;
    (void)u;
    CORE_CALL(self, rc = tocsin_scheduler_tick(self->db, &n));
    return PyLong_FromLongLong(n);
}

static PyObject *Handle_scheduler_next_fire(Handle *self, PyObject *u) {
    int64_t ms = -1;
    int rc;
    (void)u;
    CORE_CALL(self, rc = tocsin_scheduler_next_fire(self->db, &ms));
    if (ms < 0) Py_RETURN_NONE;
    return PyLong_FromLongLong(ms);
}

static PyObject *Handle_queue_wait(Handle *self, PyObject *args);
static PyObject *Handle_lock_wait(Handle *self, PyObject *args);
static PyObject *Handle_task_enqueue(Handle *self, PyObject *args);
static PyObject *Handle_task_envelope(Handle *self, PyObject *args);
static PyObject *Handle_result_wait(Handle *self, PyObject *args);

static PyMethodDef Handle_methods[] = {
    {"close", (PyCFunction)Handle_close, METH_NOARGS, "Closes the handle (a Tx: rolls it back)."},
    {"begin_tx", (PyCFunction)Handle_begin_tx, METH_VARARGS, "A new Tx: a write transaction on a connection of its own."},
    {"task_enqueue", (PyCFunction)Handle_task_enqueue, METH_VARARGS, NULL},
    {"task_envelope", (PyCFunction)Handle_task_envelope, METH_VARARGS, NULL},
    {"result_wait", (PyCFunction)Handle_result_wait, METH_VARARGS, NULL},
    {"executescript", (PyCFunction)Handle_executescript, METH_VARARGS, NULL},
    {"execute", (PyCFunction)Handle_execute, METH_VARARGS, NULL},
    {"changes", (PyCFunction)Handle_changes, METH_NOARGS, NULL},
    {"last_insert_rowid", (PyCFunction)Handle_last_insert_rowid, METH_NOARGS, NULL},
    {"now", (PyCFunction)Handle_now, METH_NOARGS, NULL},
    {"set_time", (PyCFunction)Handle_set_time, METH_O, NULL},
    {"set_max_payload", (PyCFunction)Handle_set_max_payload, METH_VARARGS, NULL},
    {"enqueue", (PyCFunction)Handle_enqueue, METH_VARARGS, NULL},
    {"enqueue_many", (PyCFunction)Handle_enqueue_many, METH_VARARGS, NULL},
    {"claim", (PyCFunction)Handle_claim, METH_VARARGS, NULL},
    {"ack", (PyCFunction)Handle_ack, METH_VARARGS, NULL},
    {"ack_batch", (PyCFunction)Handle_ack_batch, METH_VARARGS, NULL},
    {"retry", (PyCFunction)Handle_retry, METH_VARARGS, NULL},
    {"fail", (PyCFunction)Handle_fail, METH_VARARGS, NULL},
    {"heartbeat", (PyCFunction)Handle_heartbeat, METH_VARARGS, NULL},
    {"hand_back", (PyCFunction)Handle_hand_back, METH_VARARGS, "Hands a held job back unrun (no attempt consumed)."},
    {"cancel", (PyCFunction)Handle_cancel, METH_VARARGS, NULL},
    {"get", (PyCFunction)Handle_get, METH_VARARGS, NULL},
    {"pause", (PyCFunction)Handle_pause, METH_VARARGS, NULL},
    {"resume", (PyCFunction)Handle_resume, METH_VARARGS, NULL},
    {"is_paused", (PyCFunction)Handle_is_paused, METH_VARARGS, NULL},
    {"stats", (PyCFunction)Handle_stats, METH_VARARGS, NULL},
    {"next_deadline", (PyCFunction)Handle_next_deadline, METH_VARARGS, NULL},
    {"dead_list", (PyCFunction)Handle_dead_list, METH_VARARGS, NULL},
    {"dead_requeue", (PyCFunction)Handle_dead_requeue, METH_VARARGS, NULL},
    {"dead_purge", (PyCFunction)Handle_dead_purge, METH_VARARGS, NULL},
    {"publish", (PyCFunction)Handle_publish, METH_VARARGS, NULL},
    {"publish_many", (PyCFunction)Handle_publish_many, METH_VARARGS, NULL},
    {"stream_read", (PyCFunction)Handle_stream_read, METH_VARARGS, NULL},
    {"save_offset", (PyCFunction)Handle_save_offset, METH_VARARGS, NULL},
    {"offset", (PyCFunction)Handle_offset, METH_VARARGS, NULL},
    {"trim", (PyCFunction)Handle_trim, METH_VARARGS, NULL},
    {"notify", (PyCFunction)Handle_notify, METH_VARARGS, NULL},
    {"notify_read", (PyCFunction)Handle_notify_read, METH_VARARGS, NULL},
    {"notify_max_id", (PyCFunction)Handle_notify_max_id, METH_NOARGS, NULL},
    {"notify_prune", (PyCFunction)Handle_notify_prune, METH_VARARGS, NULL},
    {"notify_set_autotrim", (PyCFunction)Handle_notify_set_autotrim, METH_VARARGS, NULL},
    {"result_save", (PyCFunction)Handle_result_save, METH_VARARGS, NULL},
    {"result_save_error", (PyCFunction)Handle_result_save_error, METH_VARARGS, NULL},
    {"result_get", (PyCFunction)Handle_result_get, METH_VARARGS, NULL},
    {"result_check", (PyCFunction)Handle_result_check, METH_VARARGS, NULL},
    {"check_name", (PyCFunction)Handle_check_name, METH_VARARGS, NULL},
    {"result_delete", (PyCFunction)Handle_result_delete, METH_VARARGS, NULL},
    {"result_sweep", (PyCFunction)Handle_result_sweep, METH_NOARGS, NULL},
    {"lock_acquire", (PyCFunction)Handle_lock_acquire, METH_VARARGS, NULL},
    {"lock_wait", (PyCFunction)Handle_lock_wait, METH_VARARGS, NULL},
    {"lock_renew", (PyCFunction)Handle_lock_renew, METH_VARARGS, NULL},
    {"lock_release", (PyCFunction)Handle_lock_release, METH_VARARGS, NULL},
    {"lock_holder", (PyCFunction)Handle_lock_holder, METH_VARARGS, NULL},
    {"ratelimit_try", (PyCFunction)Handle_ratelimit_try, METH_VARARGS, NULL},
    {"ratelimit_sweep", (PyCFunction)Handle_ratelimit_sweep, METH_NOARGS, NULL},
    {"ratelimit_reset", (PyCFunction)Handle_ratelimit_reset, METH_VARARGS, NULL},
    {"schedule_set", (PyCFunction)Handle_schedule_set, METH_VARARGS, NULL},
    {"schedule_update", (PyCFunction)Handle_schedule_update, METH_VARARGS, NULL},
    {"schedule_pause", (PyCFunction)Handle_schedule_pause, METH_VARARGS, NULL},
    {"schedule_resume", (PyCFunction)Handle_schedule_resume, METH_VARARGS, NULL},
    {"schedule_remove", (PyCFunction)Handle_schedule_remove, METH_VARARGS, NULL},
    {"schedule_get", (PyCFunction)Handle_schedule_get, METH_VARARGS, NULL},
    {"schedule_list", (PyCFunction)Handle_schedule_list, METH_NOARGS, NULL},
    {"scheduler_tick", (PyCFunction)Handle_scheduler_tick, METH_NOARGS, NULL},
    {"scheduler_next_fire", (PyCFunction)Handle_scheduler_next_fire, METH_NOARGS, NULL},
    {"queue_wait", (PyCFunction)Handle_queue_wait, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Handle_getset[] = {
    {"closed", (getter)Handle_closed, NULL, "True once closed.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject HandleType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tocsin._tocsin.Handle",
    .tp_basicsize = sizeof(Handle),
    .tp_dealloc = (destructor)Handle_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A tocsin database handle (low level; use tocsin.open()).",
    .tp_methods = Handle_methods,
    .tp_getset = Handle_getset,
    .tp_init = (initproc)Handle_init,
    .tp_new = PyType_GenericNew,
    .tp_weaklistoffset = offsetof(Handle, weakrefs),
};


static PyMethodDef Tx_methods[] = {
    {"commit", (PyCFunction)Tx_commit, METH_NOARGS, "Commits (a failed commit has rolled back); the Tx is over."},
    {"rollback", (PyCFunction)Tx_rollback, METH_NOARGS, "Rolls back; the Tx is over."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject TxType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tocsin._tocsin.Tx",
    .tp_basicsize = sizeof(Handle),
    .tp_dealloc = (destructor)Handle_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A transaction handle (low level; use Database.transaction()). Every Handle "
              "method called on it joins the transaction.",
    .tp_methods = Tx_methods,
    .tp_base = &HandleType,
    .tp_weaklistoffset = offsetof(Handle, weakrefs),
};

/* ---- wake engine: subscriptions, listeners, stream subscriptions -------------
 *
 * Each object wraps one core wake handle, used by one thread at a time (its own
 * lock), with fileno() and poke() callable from any thread. Blocking waits run
 * with the GIL released, in slices of at most SLICE_MS so that signals
 * (Ctrl-C) are handled; poke() ends a wait (the `poked` flag tells a poke from
 * a slice's timeout).
 */
#include <time.h>
#define SLICE_MS 200

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The next slice of a wait of timeout_ms that started at `start`; -1 when over. */
static int next_slice(int timeout_ms, int64_t start) {
    int64_t left;
    if (timeout_ms < 0) return SLICE_MS;
    left = timeout_ms - (mono_ms() - start);
    if (left <= 0) return -1;
    return left > SLICE_MS ? SLICE_MS : (int)left;
}

static int lock_obj(PyThread_type_lock lock) {
    if (!PyThread_acquire_lock(lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
    return 1;
}

typedef struct {
    PyObject_HEAD
    tocsin_sub *sub;
    PyThread_type_lock lock;
    int poked;
    int closing; /* close() started: waits return at once */
    int fd;
    PyObject *weakrefs;
} Sub;

static PyTypeObject SubType;

static int Sub_init(Sub *self, PyObject *args, PyObject *kw) {
    Handle *h;
    int how, rc;
    tocsin_sub *sub = NULL;
    (void)kw;
    if (!parse_args(args, "O!:Sub", &HandleType, &h)) return -1;
    if (self->sub) {
        PyErr_SetString(PyExc_RuntimeError, "Sub is already open");
        return -1;
    }
    if (!self->lock && !(self->lock = PyThread_allocate_lock())) {
        PyErr_NoMemory();
        return -1;
    }
    if (!(how = enter(h))) return -1;
    Py_BEGIN_ALLOW_THREADS
    rc = tocsin_sub_open(&sub, h->db);
    Py_END_ALLOW_THREADS
    if (rc != TOCSIN_OK) {
        raise_db(h, rc);
        leave(h, how);
        return -1;
    }
    leave(h, how);
    self->sub = sub;
    self->fd = tocsin_sub_fd(sub);
    return 0;
}

static PyObject *sub_closed(void) { return raise_code(TOCSIN_CLOSED, "the subscription is closed", 0); }

static PyObject *Sub_fileno(Sub *self, PyObject *u) {
    (void)u;
    if (!self->sub) return sub_closed();
    return PyLong_FromLong(self->fd);
}

static PyObject *Sub_poke(Sub *self, PyObject *u) {
    (void)u;
    __atomic_store_n(&self->poked, 1, __ATOMIC_RELEASE);
    if (self->sub) tocsin_sub_poke(self->sub);
    Py_RETURN_NONE;
}

static PyObject *Sub_drain(Sub *self, PyObject *u) {
    int woken = 0, rc;
    (void)u;
    lock_obj(self->lock);
    if (!self->sub) {
        PyThread_release_lock(self->lock);
        return sub_closed();
    }
    rc = tocsin_sub_drain(self->sub, &woken);
    if (rc == TOCSIN_INTERRUPTED) { /* a poke counts as a wake here */
        woken = 1;
        rc = TOCSIN_OK;
    }
    if (rc != TOCSIN_OK) {
        raise_code(rc, tocsin_errmsg(NULL), tocsin_sqlite_errcode(NULL));
        PyThread_release_lock(self->lock);
        return NULL;
    }
    PyThread_release_lock(self->lock);
    return PyBool_FromLong(woken);
}

/* wait(timeout_ms): True when woken (or poked), False at the timeout. */
static PyObject *Sub_wait(Sub *self, PyObject *args) {
    int timeout_ms, rc = TOCSIN_TIMEOUT, t;
    int64_t start = mono_ms();
    if (!parse_args(args, "i:wait", &timeout_ms)) return NULL;
    lock_obj(self->lock);
    if (!self->sub || __atomic_load_n(&self->closing, __ATOMIC_ACQUIRE)) {
        PyThread_release_lock(self->lock);
        return sub_closed();
    }
    for (int first = 1;; first = 0) {
        if ((t = next_slice(timeout_ms, start)) < 0) {
            if (!first) break;
            t = 0;
        }
        Py_BEGIN_ALLOW_THREADS
        rc = tocsin_sub_wait(self->sub, t);
        Py_END_ALLOW_THREADS
        /* poked or closed by another thread: the wait is over, as a wake (a Closed
         * nobody asked for -- a subscription inherited across fork() -- is raised) */
        if (rc == TOCSIN_INTERRUPTED ||
            (rc == TOCSIN_CLOSED && __atomic_load_n(&self->closing, __ATOMIC_ACQUIRE)))
            rc = TOCSIN_OK;
        if (rc != TOCSIN_TIMEOUT) break;
        if (timeout_ms == 0) break;
        if (__atomic_load_n(&self->poked, __ATOMIC_ACQUIRE) ||
            __atomic_load_n(&self->closing, __ATOMIC_ACQUIRE)) {
            rc = TOCSIN_OK;
            break;
        }
        if (PyErr_CheckSignals() < 0) {
            PyThread_release_lock(self->lock);
            return NULL;
        }
    }
    __atomic_store_n(&self->poked, 0, __ATOMIC_RELEASE);
    if (rc != TOCSIN_OK && rc != TOCSIN_TIMEOUT) {
        raise_code(rc, tocsin_errmsg(NULL), tocsin_sqlite_errcode(NULL));
        PyThread_release_lock(self->lock);
        return NULL;
    }
    PyThread_release_lock(self->lock);
    return PyBool_FromLong(rc == TOCSIN_OK);
}

static PyObject *Sub_close(Sub *self, PyObject *u) {
    tocsin_sub *s;
    (void)u;
    if (!self->sub) Py_RETURN_NONE;
    __atomic_store_n(&self->closing, 1, __ATOMIC_RELEASE);
    tocsin_sub_poke(self->sub); /* a waiter in another thread returns and lets go */
    lock_obj(self->lock);
    s = self->sub;
    self->sub = NULL;
    PyThread_release_lock(self->lock);
    if (s) {
        Py_BEGIN_ALLOW_THREADS
        tocsin_sub_close(s);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

static void Sub_dealloc(Sub *self) {
    if (self->weakrefs) PyObject_ClearWeakRefs((PyObject *)self);
    if (self->sub) tocsin_sub_close(self->sub);
    if (self->lock) PyThread_free_lock(self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Sub_get_closed(Sub *self, void *u) {
    (void)u;
    return PyBool_FromLong(self->sub == NULL || __atomic_load_n(&self->closing, __ATOMIC_ACQUIRE));
}

static PyMethodDef Sub_methods[] = {
    {"fileno", (PyCFunction)Sub_fileno, METH_NOARGS, "The descriptor, readable while a wake is pending."},
    {"poke", (PyCFunction)Sub_poke, METH_NOARGS, "Ends a blocked wait (any thread)."},
    {"drain", (PyCFunction)Sub_drain, METH_NOARGS, "Consumes pending wakes; True if there was one."},
    {"wait", (PyCFunction)Sub_wait, METH_VARARGS, "Waits up to timeout_ms (<0: no bound) for a wake."},
    {"close", (PyCFunction)Sub_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};
static PyGetSetDef Sub_getset[] = {
    {"closed", (getter)Sub_get_closed, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SubType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tocsin._tocsin.Sub",
    .tp_basicsize = sizeof(Sub),
    .tp_dealloc = (destructor)Sub_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A subscription to commits on a database file (low level).",
    .tp_methods = Sub_methods,
    .tp_getset = Sub_getset,
    .tp_init = (initproc)Sub_init,
    .tp_new = PyType_GenericNew,
    .tp_weaklistoffset = offsetof(Sub, weakrefs),
};

/* A deadline wait of the core (queue, lock) in slices of SLICE_MS with the GIL
 * released, so that signals (Ctrl-C) are handled between them: fn waits until
 * slice_end (a time of the handle's clock). `sub` optional (the sub argument of
 * the methods below: checked, NULL when None). Returns the final code (OK,
 * TIMEOUT, a failure: a Python exception may be set by a signal handler);
 * *poked when a poke or close of sub ended it (then TOCSIN_OK). */
typedef int (*slice_wait_fn)(void *ctx, tocsin_db *db, int64_t slice_end, tocsin_sub *sub);
static int sliced_wait(Handle *self, Sub *sub, int64_t deadline, slice_wait_fn fn, void *ctx,
                       int *poked) {
    int rc;
    *poked = 0;
    if (sub) {
        /* the Sub's lock for the whole wait: Sub.close() (db.close() in another
         * thread) pokes, then frees the core's subscription only once it holds it */
        lock_obj(sub->lock);
        if (!sub->sub || __atomic_load_n(&sub->closing, __ATOMIC_ACQUIRE)) {
            PyThread_release_lock(sub->lock);
            *poked = 1;
            return TOCSIN_OK;
        }
    }
    for (;;) {
        int64_t slice_end = deadline;
        int64_t now = tocsin_now(self->db);
        if (deadline != 0 && (deadline < 0 || deadline - now > SLICE_MS)) slice_end = now + SLICE_MS;
        Py_BEGIN_ALLOW_THREADS
        rc = fn(ctx, self->db, slice_end, sub ? sub->sub : NULL);
        Py_END_ALLOW_THREADS
        /* poked, or closed by close() of the Sub or of the handle (db.close() in another
         * thread); a Closed of the core's own (a handle or subscription inherited across
         * fork()) is the wait's failure */
        if (rc == TOCSIN_INTERRUPTED ||
            (rc == TOCSIN_CLOSED && (__atomic_load_n(&self->closing, __ATOMIC_ACQUIRE) ||
                                     (sub && __atomic_load_n(&sub->closing, __ATOMIC_ACQUIRE))))) {
            *poked = 1;
            rc = TOCSIN_OK;
            break;
        }
        if (rc == TOCSIN_TIMEOUT && slice_end != deadline) {
            if (PyErr_CheckSignals() < 0) break;
            if (sub && (__atomic_load_n(&sub->poked, __ATOMIC_ACQUIRE) ||
                        __atomic_load_n(&sub->closing, __ATOMIC_ACQUIRE))) {
                *poked = 1;
                rc = TOCSIN_OK;
                break;
            }
            continue;
        }
        break;
    }
    if (sub) {
        __atomic_store_n(&sub->poked, 0, __ATOMIC_RELEASE);
        PyThread_release_lock(sub->lock);
    }
    return rc;
}

/* The optional `sub` argument of a wait: NULL for None, else a live Sub. */
static int sub_arg(PyObject *subobj, Sub **out) {
    *out = NULL;
    if (subobj == Py_None) return 1;
    if (!PyObject_TypeCheck(subobj, &SubType)) {
        raise_code(TOCSIN_INVALID, "sub must be a Sub or None", 0);
        return 0;
    }
    *out = (Sub *)subobj;
    if (!(*out)->sub) {
        sub_closed();
        return 0;
    }
    return 1;
}

struct queue_wait_args { const char **qs; size_t n; };
static int queue_wait_slice(void *ctx, tocsin_db *db, int64_t slice_end, tocsin_sub *sub) {
    struct queue_wait_args *a = ctx;
    return tocsin_queue_wait(db, a->qs, a->n, slice_end, sub);
}

/* queue_wait(queues, deadline_ms, sub): True when something is claimable, False
 * at the deadline or when `sub` was poked. deadline_ms is a time of the handle's
 * clock (< 0: none); 0 makes it a non-blocking, read-only check. */
static PyObject *Handle_queue_wait(Handle *self, PyObject *args) {
    PyObject *arg, *t, *subobj = Py_None;
    const char **qs;
    long long deadline;
    int how, rc = TOCSIN_OK, ready = 0, poked = 0;
    Sub *sub = NULL;
    struct queue_wait_args a;
    if (!parse_args(args, "OL|O:queue_wait", &arg, &deadline, &subobj)) return NULL;
    if (!sub_arg(subobj, &sub)) return NULL;
    if (!(t = PySequence_Tuple(arg))) return NULL;
    if (!(qs = str_array(t, 0, "queues"))) {
        Py_DECREF(t);
        return NULL;
    }
    if (!(how = enter(self))) goto out;
    a.qs = qs;
    a.n = (size_t)PyTuple_GET_SIZE(t);
    rc = sliced_wait(self, sub, deadline, queue_wait_slice, &a, &poked);
    ready = rc == TOCSIN_OK && !poked;
    if (rc != TOCSIN_OK && rc != TOCSIN_TIMEOUT && !PyErr_Occurred()) raise_db(self, rc);
    leave(self, how);
out:
    PyMem_Free(qs);
    Py_DECREF(t);
    if (PyErr_Occurred()) return NULL;
    return PyBool_FromLong(ready);
}

/* lock_wait(name, owner, ttl_ms, deadline_ms, sub): (token, until) once `owner` holds
 * the lock, (0, 0) at the deadline or when `sub` was poked. While another owner holds
 * it the core only reads (no write, so no commit that would wake this very wait) and
 * sleeps until the lease ends or a commit; deadline_ms as for queue_wait (0: one
 * non-blocking attempt). */
struct lock_wait_args { const char *name, *owner; long long ttl; int64_t token, until; };
static int lock_wait_slice(void *ctx, tocsin_db *db, int64_t slice_end, tocsin_sub *sub) {
    struct lock_wait_args *a = ctx;
    return tocsin_lock_wait(db, &a->token, &a->until, a->name, a->owner, a->ttl, slice_end, sub);
}
static PyObject *Handle_lock_wait(Handle *self, PyObject *args) {
    struct lock_wait_args a = {NULL, NULL, 0, 0, 0};
    long long deadline;
    int how, rc, poked = 0;
    PyObject *subobj = Py_None;
    Sub *sub = NULL;
    if (!parse_args(args, "ssLL|O:lock_wait", &a.name, &a.owner, &a.ttl, &deadline, &subobj)) return NULL;
    if (!sub_arg(subobj, &sub)) return NULL;
    if (!(how = enter(self))) return NULL;
    rc = sliced_wait(self, sub, deadline, lock_wait_slice, &a, &poked);
    if (rc != TOCSIN_OK && rc != TOCSIN_TIMEOUT && !PyErr_Occurred()) raise_db(self, rc);
    leave(self, how);
    if (PyErr_Occurred()) return NULL;
    if (rc != TOCSIN_OK || poked) a.token = a.until = 0; /* not held */
    return Py_BuildValue("(LL)", (long long)a.token, (long long)a.until);
}

/* ---- listeners and stream subscriptions ---- */

typedef struct {
    PyObject_HEAD
    void *p; /* tocsin_listener or tocsin_stream_sub */
    int is_stream;
    int fd;
    int poked;
    int closing; /* close() started: waits return at once */
    PyThread_type_lock lock;
} Waiter;

static PyTypeObject ListenerType, StreamSubType;

static const char *waiter_errmsg(Waiter *w) {
    (void)w;
    return tocsin_errmsg(NULL); /* the thread's last failure: the waiter's */
}

/* Listener(handle, channel, buffer_size) */
static int Listener_init(Waiter *self, PyObject *args, PyObject *kw) {
    Handle *h;
    const char *channel;
    Py_ssize_t buffer = 1000;
    tocsin_listener *l = NULL;
    int how, rc;
    (void)kw;
    if (!parse_args(args, "O!s|n:Listener", &HandleType, &h, &channel, &buffer)) return -1;
    if (self->p) {
        PyErr_SetString(PyExc_RuntimeError, "already open");
        return -1;
    }
    if (buffer < 1) {
        raise_code(TOCSIN_INVALID, "buffer_size must be >= 1", 0);
        return -1;
    }
    if (!self->lock && !(self->lock = PyThread_allocate_lock())) {
        PyErr_NoMemory();
        return -1;
    }
    if (!(how = enter(h))) return -1;
    Py_BEGIN_ALLOW_THREADS
    rc = tocsin_listen_open(&l, h->db, channel, (size_t)buffer);
    Py_END_ALLOW_THREADS
    if (rc != TOCSIN_OK) {
        raise_db(h, rc);
        leave(h, how);
        return -1;
    }
    leave(h, how);
    self->p = l;
    self->is_stream = 0;
    self->fd = tocsin_listen_fd(l);
    return 0;
}

/* StreamSub(handle, topic, consumer, from_offset, batch, autosave_every, autosave_ms,
 *           save_on_close) */
static int StreamSub_init(Waiter *self, PyObject *args, PyObject *kw) {
    Handle *h;
    const char *topic, *consumer = NULL;
    long long from = -1, every = 0, every_ms = 0;
    Py_ssize_t batch = 0;
    tocsin_stream_sub_opts o = TOCSIN_STREAM_SUB_OPTS_INIT;
    tocsin_stream_sub *s = NULL;
    int how, rc, save_on_close = 0;
    (void)kw;
    if (!parse_args(args, "O!sz|LnLLp:StreamSub", &HandleType, &h, &topic, &consumer, &from,
                          &batch, &every, &every_ms, &save_on_close))
        return -1;
    if (self->p) {
        PyErr_SetString(PyExc_RuntimeError, "already open");
        return -1;
    }
    if (batch < 0) {
        raise_code(TOCSIN_INVALID, "batch must be >= 1", 0);
        return -1;
    }
    if (!self->lock && !(self->lock = PyThread_allocate_lock())) {
        PyErr_NoMemory();
        return -1;
    }
    o.from_offset = from;
    o.batch = (size_t)batch;
    o.autosave_every = every;
    o.autosave_ms = every_ms;
    o.save_on_close = save_on_close; /* the core saves at tocsin_stream_sub_close */
    if (!(how = enter(h))) return -1;
    Py_BEGIN_ALLOW_THREADS
    rc = tocsin_stream_sub_open(&s, h->db, topic, consumer, &o);
    Py_END_ALLOW_THREADS
    if (rc != TOCSIN_OK) {
        raise_db(h, rc);
        leave(h, how);
        return -1;
    }
    leave(h, how);
    self->p = s;
    self->is_stream = 1;
    self->fd = tocsin_stream_sub_fd(s);
    return 0;
}

static PyObject *Waiter_fileno(Waiter *self, PyObject *u) {
    (void)u;
    if (!self->p) return sub_closed();
    return PyLong_FromLong(self->fd);
}

static PyObject *Waiter_poke(Waiter *self, PyObject *u) {
    (void)u;
    __atomic_store_n(&self->poked, 1, __ATOMIC_RELEASE);
    if (self->p) {
        if (self->is_stream) tocsin_stream_sub_poke(self->p);
        else tocsin_listen_poke(self->p);
    }
    Py_RETURN_NONE;
}

/* next(timeout_ms): the messages that arrived (a list, empty at the timeout or after poke). */
static PyObject *Waiter_next(Waiter *self, PyObject *args) {
    int timeout_ms, rc = TOCSIN_TIMEOUT, t;
    int64_t start = mono_ms();
    tocsin_message *m = NULL;
    size_t n = 0;
    PyObject *out;
    if (!parse_args(args, "i:next", &timeout_ms)) return NULL;
    if (__atomic_load_n(&self->closing, __ATOMIC_ACQUIRE)) return PyList_New(0);
    lock_obj(self->lock);
    if (!self->p) {
        PyThread_release_lock(self->lock);
        return sub_closed();
    }
    for (int first = 1;; first = 0) {
        if ((t = next_slice(timeout_ms, start)) < 0) {
            if (!first) break;
            t = 0;
        }
        Py_BEGIN_ALLOW_THREADS
        rc = self->is_stream ? tocsin_stream_sub_next(self->p, &m, &n, t)
                             : tocsin_listen_next(self->p, &m, &n, t);
        Py_END_ALLOW_THREADS
        /* poked, or closed by close() in another thread: an empty batch (a Closed
         * nobody asked for -- inherited across fork() -- is raised) */
        if (rc == TOCSIN_INTERRUPTED ||
            (rc == TOCSIN_CLOSED && __atomic_load_n(&self->closing, __ATOMIC_ACQUIRE))) {
            rc = TOCSIN_TIMEOUT;
            break;
        }
        if (rc != TOCSIN_TIMEOUT || timeout_ms == 0) break;
        if (__atomic_load_n(&self->poked, __ATOMIC_ACQUIRE) ||
            __atomic_load_n(&self->closing, __ATOMIC_ACQUIRE))
            break;
        if (PyErr_CheckSignals() < 0) {
            PyThread_release_lock(self->lock);
            return NULL;
        }
    }
    __atomic_store_n(&self->poked, 0, __ATOMIC_RELEASE);
    if (rc != TOCSIN_OK && rc != TOCSIN_TIMEOUT) {
        raise_code(rc, waiter_errmsg(self), 0);
        PyThread_release_lock(self->lock);
        return NULL;
    }
    PyThread_release_lock(self->lock);
    out = messages_list(m, n);
    tocsin_messages_free(m, n);
    return out;
}

static PyObject *Waiter_dropped(Waiter *self, PyObject *u) {
    long long n;
    (void)u;
    lock_obj(self->lock);
    if (!self->p || self->is_stream) {
        PyThread_release_lock(self->lock);
        return self->p ? PyLong_FromLong(0) : sub_closed();
    }
    n = tocsin_listen_dropped(self->p);
    PyThread_release_lock(self->lock);
    return PyLong_FromLongLong(n);
}

static PyObject *Waiter_position(Waiter *self, PyObject *u) {
    long long n;
    (void)u;
    lock_obj(self->lock);
    if (!self->p) {
        PyThread_release_lock(self->lock);
        return sub_closed();
    }
    n = tocsin_stream_sub_position(self->p);
    PyThread_release_lock(self->lock);
    return PyLong_FromLongLong(n);
}

/* An iteration that stopped mid-batch: the position goes back to the last event
 * handed to the caller (what close then saves). */
static PyObject *Waiter_rewind(Waiter *self, PyObject *arg) {
    long long off;
    int rc;
    if (!is_int_arg(arg)) return refuse_arg(":rewind", 0, "an integer", arg), NULL;
    off = PyLong_AsLongLong(arg);
    if (off == -1 && PyErr_Occurred()) {
        as_invalid(":rewind");
        return NULL;
    }
    lock_obj(self->lock);
    if (!self->p) {
        PyThread_release_lock(self->lock);
        return sub_closed();
    }
    rc = tocsin_stream_sub_rewind(self->p, off);
    if (rc != TOCSIN_OK) raise_code(rc, waiter_errmsg(self), 0);
    PyThread_release_lock(self->lock);
    if (rc != TOCSIN_OK) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Waiter_save(Waiter *self, PyObject *u) {
    int rc;
    (void)u;
    lock_obj(self->lock);
    if (!self->p) {
        PyThread_release_lock(self->lock);
        return sub_closed();
    }
    Py_BEGIN_ALLOW_THREADS
    rc = tocsin_stream_sub_save(self->p);
    Py_END_ALLOW_THREADS
    if (rc != TOCSIN_OK) raise_code(rc, waiter_errmsg(self), 0);
    PyThread_release_lock(self->lock);
    if (rc != TOCSIN_OK) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Waiter_close(Waiter *self, PyObject *u) {
    void *p;
    int rc = TOCSIN_OK;
    (void)u;
    if (!self->p) Py_RETURN_NONE;
    __atomic_store_n(&self->closing, 1, __ATOMIC_RELEASE);
    if (self->is_stream) tocsin_stream_sub_poke(self->p);
    else tocsin_listen_poke(self->p);
    lock_obj(self->lock);
    p = self->p;
    self->p = NULL;
    PyThread_release_lock(self->lock);
    if (!p) Py_RETURN_NONE;
    Py_BEGIN_ALLOW_THREADS
    if (self->is_stream) rc = tocsin_stream_sub_close(p);
    else tocsin_listen_close(p);
    Py_END_ALLOW_THREADS
    if (rc != TOCSIN_OK) return raise_last(rc); /* the core's message: what failed and why */
    Py_RETURN_NONE;
}

static void Waiter_dealloc(Waiter *self) {
    if (self->p) {
        if (self->is_stream) tocsin_stream_sub_close(self->p);
        else tocsin_listen_close(self->p);
    }
    if (self->lock) PyThread_free_lock(self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Waiter_get_closed(Waiter *self, void *u) {
    (void)u;
    return PyBool_FromLong(self->p == NULL || __atomic_load_n(&self->closing, __ATOMIC_ACQUIRE));
}

static PyGetSetDef Waiter_getset[] = {
    {"closed", (getter)Waiter_get_closed, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Listener_methods[] = {
    {"fileno", (PyCFunction)Waiter_fileno, METH_NOARGS, NULL},
    {"poke", (PyCFunction)Waiter_poke, METH_NOARGS, NULL},
    {"next", (PyCFunction)Waiter_next, METH_VARARGS, NULL},
    {"dropped", (PyCFunction)Waiter_dropped, METH_NOARGS, NULL},
    {"close", (PyCFunction)Waiter_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef StreamSub_methods[] = {
    {"fileno", (PyCFunction)Waiter_fileno, METH_NOARGS, NULL},
    {"poke", (PyCFunction)Waiter_poke, METH_NOARGS, NULL},
    {"next", (PyCFunction)Waiter_next, METH_VARARGS, NULL},
    {"position", (PyCFunction)Waiter_position, METH_NOARGS, NULL},
    {"save", (PyCFunction)Waiter_save, METH_NOARGS, NULL},
    {"rewind", (PyCFunction)Waiter_rewind, METH_O, NULL},
    {"close", (PyCFunction)Waiter_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ListenerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tocsin._tocsin.Listener",
    .tp_basicsize = sizeof(Waiter),
    .tp_dealloc = (destructor)Waiter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "LISTEN on a channel (low level).",
    .tp_methods = Listener_methods,
    .tp_getset = Waiter_getset,
    .tp_init = (initproc)Listener_init,
    .tp_new = PyType_GenericNew,
};

static PyTypeObject StreamSubType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tocsin._tocsin.StreamSub",
    .tp_basicsize = sizeof(Waiter),
    .tp_dealloc = (destructor)Waiter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A stream subscription: replay, then live (low level).",
    .tp_methods = StreamSub_methods,
    .tp_getset = Waiter_getset,
    .tp_init = (initproc)StreamSub_init,
    .tp_new = PyType_GenericNew,
};

/* ---- tasks: the envelope and enqueue by name (tocsin_task_*) ---- */

/* task_enqueue(queue, task, args_json, kwargs_json, result_ttl_ms, timeout_ms,
 *              priority, delay_ms, run_at_ms, max_attempts, expires_ms, unique_key, meta) */
static PyObject *Handle_task_enqueue(Handle *self, PyObject *args) {
    const char *queue, *ukey = NULL, *meta = NULL;
    long long ttl = 0, timeout = 0, prio = 0, delay = 0, run_at = 0, expires = 0;
    int maxa = 0, rc;
    int64_t id = 0;
    tocsin_task_call c = TOCSIN_TASK_CALL_INIT;
    tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
    if (!parse_args(args, "sszz|LLLLLiLzz:task_enqueue", &queue, &c.task, &c.args, &c.kwargs,
                          &ttl, &timeout, &prio, &delay, &run_at, &maxa, &expires, &ukey, &meta))
        return NULL;
    c.result_ttl_ms = ttl;
    c.timeout_ms = timeout;
    o.priority = prio;
    o.delay_ms = delay;
    o.run_at_ms = run_at;
    o.max_attempts = maxa;
    o.expires_ms = expires;
    o.unique_key = ukey;
    o.meta = meta;
    CORE_CALL(self, rc = tocsin_task_enqueue(self->db, &id, queue, &c, &o));
    return PyLong_FromLongLong(id);
}

/* task_envelope(task, args_json, kwargs_json, result_ttl_ms, timeout_ms) -> JSON text */
static PyObject *Handle_task_envelope(Handle *self, PyObject *args) {
    long long ttl = 0, timeout = 0;
    char *json = NULL;
    int rc;
    tocsin_task_call c = TOCSIN_TASK_CALL_INIT;
    if (!parse_args(args, "szz|LL:task_envelope", &c.task, &c.args, &c.kwargs, &ttl, &timeout))
        return NULL;
    c.result_ttl_ms = ttl;
    c.timeout_ms = timeout;
    CORE_CALL(self, rc = tocsin_task_envelope(self->db, &json, &c));
    return take_json(json);
}

/* result_wait(job_id): the core's result wait with its deadline already passed:
 * the outcome tuple if there is one, else Timeout carrying the core's account of
 * why (never claimed, running, retrying). Binding-side waits call it last. */
static PyObject *Handle_result_wait(Handle *self, PyObject *args) {
    long long id;
    tocsin_result *r = NULL;
    int rc;
    if (!parse_args(args, "L:result_wait", &id)) return NULL;
    CORE_CALL(self, rc = tocsin_result_wait(self->db, &r, id, 0, NULL));
    return result_tuple(r);
}

/* ---- workers: the worker protocol (tocsin_worker_*) ------------------------
 *
 * A Worker wraps a tocsin_worker; each run it hands out is a Run, released by
 * finish() (or by close(), which hands back what still runs). next() is called
 * by one thread at a time (the runner's loop); finish(), poke(), fileno() and
 * in_flight() from any thread (the core locks the worker's state). Calls in
 * progress are counted so that close() never frees what another thread uses.
 */
typedef struct {
    PyObject_HEAD
    tocsin_worker *w;
    Handle *handle;
    int busy, closing;
} Worker;

typedef struct {
    PyObject_HEAD
    tocsin_task_run *run; /* NULL once finished */
    Worker *worker;
} Run;

static PyTypeObject WorkerType, RunType;

static int w_enter(Worker *self) {
    if (!self->w || __atomic_load_n(&self->closing, __ATOMIC_ACQUIRE)) {
        raise_code(TOCSIN_CLOSED, "the worker is closed", 0);
        return 0;
    }
    __atomic_add_fetch(&self->busy, 1, __ATOMIC_ACQ_REL);
    if (__atomic_load_n(&self->closing, __ATOMIC_ACQUIRE)) {
        __atomic_sub_fetch(&self->busy, 1, __ATOMIC_ACQ_REL);
        raise_code(TOCSIN_CLOSED, "the worker is closed", 0);
        return 0;
    }
    return 1;
}
static void w_leave(Worker *self) { __atomic_sub_fetch(&self->busy, 1, __ATOMIC_ACQ_REL); }

/* Worker(handle, queues, concurrency, worker_id, visibility_ms, scheduler,
 *        scheduler_ttl_ms, unknown_task_delay_ms, unknown_task_handbacks) */
static int Worker_init(Worker *self, PyObject *args, PyObject *kw) {
    Handle *h;
    PyObject *qarg, *qt = NULL;
    const char **qs = NULL, *wid = NULL;
    int conc = 0, sched = 0, handbacks = 0, rc = -1, crc;
    long long vis = 0, sttl = 0, udelay = 0;
    tocsin_worker_opts o = TOCSIN_WORKER_OPTS_INIT;
    tocsin_worker *w = NULL;
    (void)kw;
    if (!parse_args(args, "O!O|izLpLLi:Worker", &HandleType, &h, &qarg, &conc, &wid, &vis,
                          &sched, &sttl, &udelay, &handbacks))
        return -1;
    if (h->is_tx) {
        raise_code(TOCSIN_INVALID, "a worker runs on a database handle, not a transaction", 0);
        return -1;
    }
    if (self->w) {
        PyErr_SetString(PyExc_RuntimeError, "Worker is already open");
        return -1;
    }
    if (!(qt = PySequence_Tuple(qarg))) return -1;
    if (!(qs = str_array(qt, 0, "queues"))) goto out;
    o.worker_id = wid;
    o.queues = qs;
    o.n_queues = (size_t)PyTuple_GET_SIZE(qt);
    o.concurrency = conc;
    o.visibility_ms = vis;
    o.scheduler = sched;
    o.scheduler_ttl_ms = sttl;
    o.unknown_task_delay_ms = udelay;
    o.unknown_task_handbacks = handbacks;
    if (!enter(h)) goto out;
    Py_BEGIN_ALLOW_THREADS
    crc = tocsin_worker_open(&w, h->db, &o);
    Py_END_ALLOW_THREADS
    if (crc != TOCSIN_OK) {
        raise_last(crc);
        leave(h, 1);
        goto out;
    }
    __atomic_add_fetch(&h->workers, 1, __ATOMIC_ACQ_REL);
    leave(h, 1);
    self->w = w;
    Py_INCREF(h);
    self->handle = h;
    rc = 0;
out:
    PyMem_Free(qs);
    Py_XDECREF(qt);
    return rc;
}

/* register(task, backoff_base_ms, backoff_cap_ms, timeout_ms, result_ttl_ms, max_attempts) */
static PyObject *Worker_register(Worker *self, PyObject *args) {
    const char *task;
    long long base = 0, cap = 0, timeout = 0, ttl = 0;
    int max_attempts = 0;
    tocsin_task_opts o = TOCSIN_TASK_OPTS_INIT;
    int rc;
    if (!parse_args(args, "s|LLLLi:register", &task, &base, &cap, &timeout, &ttl, &max_attempts)) return NULL;
    o.max_attempts = max_attempts;
    o.backoff_base_ms = base;
    o.backoff_cap_ms = cap;
    o.timeout_ms = timeout;
    o.result_ttl_ms = ttl;
    if (!w_enter(self)) return NULL;
    rc = tocsin_worker_register(self->w, task, &o);
    w_leave(self);
    if (rc != TOCSIN_OK) return raise_last(rc);
    Py_RETURN_NONE;
}

/* A run as (Run, job_id, token, queue, task, args_json, kwargs_json, meta_json,
 * attempt, max_attempts, timeout_ms, started_at). */
static PyObject *run_tuple(Worker *w, tocsin_task_run *r) {
    Run *o = (Run *)RunType.tp_alloc(&RunType, 0);
    if (!o) return NULL;
    o->run = r;
    Py_INCREF(w);
    o->worker = w;
    return Py_BuildValue("(NLLssssziiLL)", (PyObject *)o, (long long)r->job_id, (long long)r->token,
                         r->queue, r->task, r->args, r->kwargs, r->meta, r->attempt,
                         r->max_attempts, (long long)r->timeout_ms, (long long)r->started_at);
}

static PyObject *runs_list(Worker *self, int rc, tocsin_task_run **runs, size_t n);

/* next(timeout_ms): the next runs (a list; empty at the timeout or after poke). */
static PyObject *Worker_next(Worker *self, PyObject *args) {
    int timeout_ms, rc = TOCSIN_TIMEOUT;
    int64_t start;
    tocsin_task_run **runs = NULL;
    size_t n = 0;
    struct timespec ts;
    if (!parse_args(args, "i:next", &timeout_ms)) return NULL;
    if (!w_enter(self)) return NULL;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    start = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    for (;;) {
        int t = timeout_ms;
        if (timeout_ms != 0) { /* slices, so that signals (Ctrl-C) are handled */
            int64_t now, left;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
            left = timeout_ms < 0 ? 200 : timeout_ms - (now - start);
            if (left < 0) left = 0;
            t = left > 200 ? 200 : (int)left;
        }
        Py_BEGIN_ALLOW_THREADS
        rc = tocsin_worker_next(self->w, &runs, &n, t);
        Py_END_ALLOW_THREADS
        if (rc != TOCSIN_TIMEOUT || timeout_ms == 0 || __atomic_load_n(&self->closing, __ATOMIC_ACQUIRE))
            break;
        if (timeout_ms > 0 && t < 200) break;
        if (PyErr_CheckSignals() < 0) {
            w_leave(self);
            return NULL;
        }
    }
    return runs_list(self, rc, runs, n);
}

/* poll(): next(0) that never waits for the write lock: None when another
 * connection holds it (call next() from a thread that may block then). */
static PyObject *Worker_poll(Worker *self, PyObject *noargs) {
    tocsin_task_run **runs = NULL;
    size_t n = 0;
    int rc;
    (void)noargs;
    if (!w_enter(self)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = tocsin_worker_poll(self->w, &runs, &n);
    Py_END_ALLOW_THREADS
    if (rc == TOCSIN_BUSY) {
        w_leave(self);
        Py_RETURN_NONE;
    }
    return runs_list(self, rc, runs, n);
}

/* take(): reserved runs for the free slots with no database work, under the
 * GIL (it never blocks): [] when a step is due or another thread is in one. */
static PyObject *Worker_take(Worker *self, PyObject *noargs) {
    tocsin_task_run **runs = NULL;
    size_t n = 0;
    int rc;
    (void)noargs;
    if (!w_enter(self)) return NULL;
    rc = tocsin_worker_take(self->w, &runs, &n);
    if (rc == TOCSIN_BUSY) rc = TOCSIN_TIMEOUT;
    return runs_list(self, rc, runs, n);
}

/* The runs of a next/poll as a list (leaves the worker: w_leave). */
static PyObject *runs_list(Worker *self, int rc, tocsin_task_run **runs, size_t n) {
    PyObject *out;
    size_t i;
    if (rc == TOCSIN_TIMEOUT || rc == TOCSIN_INTERRUPTED) {
        w_leave(self);
        return PyList_New(0);
    }
    if (rc != TOCSIN_OK) {
        w_leave(self);
        return raise_last(rc);
    }
    out = PyList_New((Py_ssize_t)n);
    for (i = 0; out && i < n; i++) {
        PyObject *t = run_tuple(self, runs[i]);
        if (!t) {
            Py_CLEAR(out); /* the runs stay in flight: close() hands them back */
            break;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, t);
    }
    tocsin_free(runs);
    w_leave(self);
    return out;
}

/* finish(run, kind, value, error_type, error_message, error_trace, delay_ms, tx):
 * records the outcome (tx None: batched into the next group commit; a Tx:
 * inside it at once, LeaseLost when the lease is gone). */
static PyObject *Worker_finish(Worker *self, PyObject *args) {
    Run *run;
    PyObject *txo = Py_None;
    Handle *tx = NULL;
    tocsin_task_run *r;
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    long long delay = -1;
    int rc;
    if (!parse_args(args, "O!i|zzzzLO:finish", &RunType, &run, &o.kind, &o.value,
                          &o.error_type, &o.error_message, &o.error_trace, &delay, &txo))
        return NULL;
    o.delay_ms = delay;
    if (txo != Py_None) {
        if (!PyObject_TypeCheck(txo, &TxType))
            return raise_code(TOCSIN_INVALID, "tx must be a Tx or None", 0);
        tx = (Handle *)txo;
    }
    if (run->worker != self) return raise_code(TOCSIN_INVALID, "this run belongs to another worker", 0);
    if (!(r = run->run)) return raise_code(TOCSIN_INVALID, "this run was finished already", 0);
    if (!w_enter(self)) return NULL;
    if (tx && !enter(tx)) {
        w_leave(self);
        return NULL;
    }
    run->run = NULL; /* under the GIL: a second finish of this run is refused */
    if (tx) {
        Py_BEGIN_ALLOW_THREADS
        rc = tocsin_worker_finish(self->w, tx->db, r, &o);
        Py_END_ALLOW_THREADS
    } else { /* batched: the core only queues it (never waits for a step), so keep the GIL */
        rc = tocsin_worker_finish(self->w, NULL, r, &o);
    }
    if (tx) leave(tx, 1);
    w_leave(self);
    /* a refused outcome or a lost lease leaves the run in flight: finish it again */
    if (rc != TOCSIN_OK) run->run = r;
    if (rc != TOCSIN_OK) return raise_last(rc);
    Py_RETURN_NONE;
}

static PyObject *Worker_flush(Worker *self, PyObject *u) {
    size_t lost = 0;
    int rc;
    (void)u;
    if (!w_enter(self)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = tocsin_worker_flush(self->w, &lost);
    Py_END_ALLOW_THREADS
    w_leave(self);
    if (rc != TOCSIN_OK) return raise_last(rc);
    return PyLong_FromSize_t(lost);
}

static PyObject *Worker_cancelled(Worker *self, PyObject *u) {
    int64_t *ids = NULL;
    size_t n = 0, i;
    int rc;
    PyObject *out;
    (void)u;
    if (!w_enter(self)) return NULL;
    rc = tocsin_worker_cancelled(self->w, &ids, &n);
    w_leave(self);
    if (rc != TOCSIN_OK) return raise_last(rc);
    out = PyList_New((Py_ssize_t)n);
    for (i = 0; out && i < n; i++) {
        PyObject *v = PyLong_FromLongLong(ids[i]);
        if (!v) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, v);
    }
    tocsin_free(ids);
    return out;
}

static PyObject *Worker_fileno(Worker *self, PyObject *u) {
    (void)u;
    if (!self->w) return raise_code(TOCSIN_CLOSED, "the worker is closed", 0);
    return PyLong_FromLong(tocsin_worker_fd(self->w));
}

static PyObject *Worker_wake_in(Worker *self, PyObject *u) {
    long long ms;
    (void)u;
    if (!w_enter(self)) return NULL;
    ms = tocsin_worker_wake_in(self->w);
    w_leave(self);
    return PyLong_FromLongLong(ms);
}

static PyObject *Worker_poke(Worker *self, PyObject *u) {
    (void)u;
    if (w_enter(self)) {
        tocsin_worker_poke(self->w);
        w_leave(self);
    } else {
        PyErr_Clear();
    }
    Py_RETURN_NONE;
}

/* drain(): graceful shutdown -- no claim and no run handed out from now on, the
 * reserve goes back at the next step; next() keeps the upkeep (any thread). */
static PyObject *Worker_drain(Worker *self, PyObject *u) {
    (void)u;
    if (w_enter(self)) {
        tocsin_worker_drain(self->w);
        w_leave(self);
    } else {
        PyErr_Clear();
    }
    Py_RETURN_NONE;
}

static PyObject *Worker_in_flight(Worker *self, PyObject *u) {
    size_t n;
    (void)u;
    if (!w_enter(self)) return NULL;
    n = tocsin_worker_in_flight(self->w);
    w_leave(self);
    return PyLong_FromSize_t(n);
}

/* close(): flushes, hands back every run in flight, resigns, leaves the registry. */
static PyObject *Worker_close(Worker *self, PyObject *u) {
    tocsin_worker *w;
    int rc;
    (void)u;
    if (!self->w || __atomic_exchange_n(&self->closing, 1, __ATOMIC_ACQ_REL)) Py_RETURN_NONE;
    tocsin_worker_poke(self->w);
    Py_BEGIN_ALLOW_THREADS
    while (__atomic_load_n(&self->busy, __ATOMIC_ACQUIRE)) sleep_ms(1);
    Py_END_ALLOW_THREADS
    w = self->w;
    self->w = NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = tocsin_worker_close(w);
    Py_END_ALLOW_THREADS
    __atomic_sub_fetch(&self->handle->workers, 1, __ATOMIC_ACQ_REL);
    if (rc != TOCSIN_OK) return raise_last(rc);
    Py_RETURN_NONE;
}

static void Worker_dealloc(Worker *self) {
    if (self->w) {
        tocsin_worker_close(self->w);
        self->w = NULL;
        __atomic_sub_fetch(&self->handle->workers, 1, __ATOMIC_ACQ_REL);
    }
    Py_CLEAR(self->handle);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Worker_get_closed(Worker *self, void *u) {
    (void)u;
    return PyBool_FromLong(self->w == NULL);
}

static PyMethodDef Worker_methods[] = {
    {"register", (PyCFunction)Worker_register, METH_VARARGS, "Declares a task this worker runs."},
    {"next", (PyCFunction)Worker_next, METH_VARARGS, "Upkeep, then the next runs (waits up to timeout_ms; 0: waits for no job)."},
    {"poll", (PyCFunction)Worker_poll, METH_NOARGS, "next(0) that never waits for the write lock: None while another connection holds it."},
    {"take", (PyCFunction)Worker_take, METH_NOARGS, "Reserved runs for the free slots, with no database work ([] when a step is due)."},
    {"finish", (PyCFunction)Worker_finish, METH_VARARGS, "Records a run's outcome (optionally inside a Tx)."},
    {"flush", (PyCFunction)Worker_flush, METH_NOARGS, "Commits the batched outcomes; returns how many leases were lost."},
    {"cancelled", (PyCFunction)Worker_cancelled, METH_NOARGS, "Job ids of running jobs whose handler should stop."},
    {"fileno", (PyCFunction)Worker_fileno, METH_NOARGS, "The descriptor to poll."},
    {"wake_in", (PyCFunction)Worker_wake_in, METH_NOARGS, "Milliseconds until the next upkeep is due."},
    {"poke", (PyCFunction)Worker_poke, METH_NOARGS, "Ends a blocked next() (any thread)."},
    {"drain", (PyCFunction)Worker_drain, METH_NOARGS, "Graceful shutdown: claims and hands out nothing more; the reserve goes back (any thread)."},
    {"in_flight", (PyCFunction)Worker_in_flight, METH_NOARGS, "Runs handed out and not finished."},
    {"close", (PyCFunction)Worker_close, METH_NOARGS, "Hands back what still runs and closes."},
    {NULL, NULL, 0, NULL},
};
static PyGetSetDef Worker_getset[] = {
    {"closed", (getter)Worker_get_closed, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject WorkerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tocsin._tocsin.Worker",
    .tp_basicsize = sizeof(Worker),
    .tp_dealloc = (destructor)Worker_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The core's worker protocol (low level; use tocsin.Worker).",
    .tp_methods = Worker_methods,
    .tp_getset = Worker_getset,
    .tp_init = (initproc)Worker_init,
    .tp_new = PyType_GenericNew,
};

static void Run_dealloc(Run *self) {
    Py_CLEAR(self->worker); /* an unfinished run stays in flight: close() hands it back */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Run_get_finished(Run *self, void *u) {
    (void)u;
    return PyBool_FromLong(self->run == NULL || self->worker->w == NULL);
}

static PyGetSetDef Run_getset[] = {
    {"finished", (getter)Run_get_finished, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RunType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tocsin._tocsin.Run",
    .tp_basicsize = sizeof(Run),
    .tp_dealloc = (destructor)Run_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One run of a task handed out by a Worker (low level).",
    .tp_getset = Run_getset,
};

/* wake_configure(poll_ms, identity_ms, no_kernel_events): process-wide watcher settings. */
static PyObject *m_wake_configure(PyObject *m, PyObject *args) {
    tocsin_wake_opts o = TOCSIN_WAKE_OPTS_INIT;
    int rc, nk = 0;
    (void)m;
    if (!parse_args(args, "ii|p:wake_configure", &o.poll_ms, &o.identity_ms, &nk)) return NULL;
    o.no_kernel_events = nk;
    rc = tocsin_wake_configure(&o);
    if (rc != TOCSIN_OK) return raise_code(rc, "invalid wake settings (poll_ms 1..1000, identity_ms 1..60000)", 0);
    Py_RETURN_NONE;
}

/* ---- module functions ------------------------------------------------------ */

static PyObject *m_version(PyObject *m, PyObject *u) {
    (void)m; (void)u;
    return PyUnicode_FromString(tocsin_version());
}
static PyObject *m_sqlite_version(PyObject *m, PyObject *u) {
    (void)m; (void)u;
    return PyUnicode_FromString(tocsin_sqlite_version());
}
static PyObject *m_owner_id(PyObject *m, PyObject *u) {
    char id[TOCSIN_OWNER_ID_SIZE];
    (void)m; (void)u;
    tocsin_owner_id(id, sizeof id);
    return PyUnicode_FromString(id);
}
static PyObject *m_errstr(PyObject *m, PyObject *args) {
    int rc;
    (void)m;
    if (!parse_args(args, "i:errstr", &rc)) return NULL;
    return PyUnicode_FromString(tocsin_errstr(rc));
}
/* code_of_sqlite(sqlite_rc) -> the core's result code of an SQLite result code
 * (tocsin_code_of_sqlite): the class of an error of the application's own
 * connection (tocsin.enqueue, tocsin.call) is the core's, not mapped here. */
static PyObject *m_code_of_sqlite(PyObject *m, PyObject *args) {
    int rc;
    (void)m;
    if (!parse_args(args, "i:code_of_sqlite", &rc)) return NULL;
    return PyLong_FromLong(tocsin_code_of_sqlite(rc));
}
/* cron_next(expr, after_ms, local_time) -> next fire (ms) or None */
static PyObject *m_cron_next(PyObject *m, PyObject *args) {
    const char *expr;
    long long after;
    int local = 0, rc;
    tocsin_cron *c = NULL;
    char err[256] = "";
    int64_t next = -1;
    (void)m;
    if (!parse_args(args, "sL|p:cron_next", &expr, &after, &local)) return NULL;
    rc = tocsin_cron_parse(&c, expr, err, sizeof err);
    if (rc != TOCSIN_OK) return raise_code(rc, err[0] ? err : tocsin_errstr(rc), 0);
    rc = tocsin_cron_next(&next, c, after, local);
    tocsin_cron_free(c);
    if (rc == TOCSIN_NOTFOUND) Py_RETURN_NONE;
    if (rc != TOCSIN_OK) return raise_code(rc, "after_ms is out of range", 0);
    return PyLong_FromLongLong(next);
}

/* One SQLite per process: None, or the core's message naming the copies. */
static PyObject *m_sqlite_copies(PyObject *m, PyObject *unused) {
    char msg[1024];
    int rc;
    (void)m;
    (void)unused;
    Py_BEGIN_ALLOW_THREADS
    rc = tocsin_check_sqlite_copies(msg, sizeof msg);
    Py_END_ALLOW_THREADS
    if (rc == TOCSIN_OK) Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
}

/*
 * register_sql(conn, probe): the tocsin_* SQL functions on a stdlib sqlite3.Connection
 * whose module cannot load extensions (an interpreter built without them), through the
 * core linked here (tocsin_sql_init). CPython's connection object begins with its
 * sqlite3 pointer (pysqlite_Connection: PyObject_HEAD, then `sqlite3 *db`, in every
 * version since 3.9). The caller (ext.py) has checked that conn is a sqlite3.Connection,
 * open and usable from this thread, that the process has one SQLite (so that pointer
 * belongs to the library linked here), and has registered a function named `probe` on
 * conn: seeing it through the pointer confirms the pointer is conn's.
 */
static PyObject *m_register_sql(PyObject *m, PyObject *args) {
    typedef struct {
        PyObject_HEAD
        sqlite3 *db;
    } stdlib_conn;
    PyObject *conn;
    const char *probe;
    sqlite3 *db;
    sqlite3_stmt *st = NULL;
    char *sql, *err = NULL;
    int rc;
    (void)m;
    if (!PyArg_ParseTuple(args, "Os:register_sql", &conn, &probe)) return NULL;
    db = ((stdlib_conn *)conn)->db;
    if (!db) return raise_code(TOCSIN_CLOSED, "the sqlite3 connection is closed", 0);
    if (!(sql = sqlite3_mprintf("SELECT \"%w\"()", probe))) return PyErr_NoMemory();
    rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    sqlite3_finalize(st);
    sqlite3_free(sql);
    /* the probe goes (the stdlib's create_function cannot remove one) */
    if (rc == SQLITE_OK) sqlite3_create_function_v2(db, probe, 0, SQLITE_UTF8, NULL, NULL, NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return raise_code(TOCSIN_ERROR, "cannot reach this sqlite3 connection's SQLite from tocsin's module", 0);
    rc = tocsin_sql_init(db, &err, NULL);
    if (rc != SQLITE_OK) {
        PyObject *r = raise_code(TOCSIN_ERROR, err ? err : "cannot register the tocsin SQL functions", 0);
        sqlite3_free(err);
        return r;
    }
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"register_sql", m_register_sql, METH_VARARGS, "Registers the SQL functions on a stdlib sqlite3.Connection (see ext.py)."},
    {"wake_configure", m_wake_configure, METH_VARARGS, "Process-wide watcher settings."},
    {"cron_next", m_cron_next, METH_VARARGS, "The first fire time of a cron expression after a time (ms)."},
    {"version", m_version, METH_NOARGS, "The core's version string."},
    {"sqlite_copies", m_sqlite_copies, METH_NOARGS, "None, or a message naming a second copy of SQLite in the process."},
    {"sqlite_version", m_sqlite_version, METH_NOARGS, "The SQLite version this process runs on."},
    {"owner_id", m_owner_id, METH_NOARGS, "A fresh owner id unique to this process and call: host:pid:random."},
    {"errstr", m_errstr, METH_VARARGS, "The English name of a result code."},
    {"code_of_sqlite", m_code_of_sqlite, METH_VARARGS, "The core's result code of an SQLite result code."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "tocsin._tocsin", "The C core of tocsin (low level).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__tocsin(void) {
    PyObject *m = PyModule_Create(&moduledef);
    size_t i;
    if (!m) return NULL;
    if (PyType_Ready(&HandleType) < 0) goto fail;
    Py_INCREF(&HandleType);
    if (PyModule_AddObject(m, "Handle", (PyObject *)&HandleType) < 0) goto fail;
    if (PyType_Ready(&TxType) < 0 || PyType_Ready(&WorkerType) < 0 || PyType_Ready(&RunType) < 0)
        goto fail;
    Py_INCREF(&TxType);
    if (PyModule_AddObject(m, "Tx", (PyObject *)&TxType) < 0) goto fail;
    Py_INCREF(&WorkerType);
    if (PyModule_AddObject(m, "Worker", (PyObject *)&WorkerType) < 0) goto fail;
    Py_INCREF(&RunType);
    if (PyModule_AddObject(m, "Run", (PyObject *)&RunType) < 0) goto fail;
    if (PyType_Ready(&CancelType) < 0) goto fail;
    Py_INCREF(&CancelType);
    if (PyModule_AddObject(m, "Cancel", (PyObject *)&CancelType) < 0) goto fail;
    if (PyType_Ready(&SubType) < 0 || PyType_Ready(&ListenerType) < 0 ||
        PyType_Ready(&StreamSubType) < 0)
        goto fail;
    Py_INCREF(&SubType);
    if (PyModule_AddObject(m, "Sub", (PyObject *)&SubType) < 0) goto fail;
    Py_INCREF(&ListenerType);
    if (PyModule_AddObject(m, "Listener", (PyObject *)&ListenerType) < 0) goto fail;
    Py_INCREF(&StreamSubType);
    if (PyModule_AddObject(m, "StreamSub", (PyObject *)&StreamSubType) < 0) goto fail;
    Error = PyErr_NewExceptionWithDoc("tocsin.Error", "Base class of every tocsin error.",
                                      NULL, NULL);
    if (!Error) goto fail;
    if (PyObject_SetAttrString(Error, "code", Py_None) < 0) goto fail;
    {
        PyObject *z = PyLong_FromLong(0);
        int bad = !z || PyObject_SetAttrString(Error, "sqlite_code", z) < 0;
        Py_XDECREF(z);
        if (bad) goto fail;
    }
    Py_INCREF(Error);
    if (PyModule_AddObject(m, "Error", Error) < 0) goto fail;
    for (i = 0; i < sizeof EXC / sizeof EXC[0]; i++) {
        char full[64];
        PyObject *bases, *cls;
        snprintf(full, sizeof full, "tocsin.%s", EXC[i].name);
        if (EXC[i].extra_base) {
            bases = PyTuple_Pack(2, Error, *EXC[i].extra_base);
        } else {
            bases = PyTuple_Pack(1, Error);
        }
        if (!bases) goto fail;
        cls = PyErr_NewExceptionWithDoc(full, EXC[i].doc, bases, NULL);
        Py_DECREF(bases);
        if (!cls) goto fail;
        code_exc[EXC[i].code] = cls;
        {
            PyObject *c = PyLong_FromLong(EXC[i].code);
            int bad = !c || PyObject_SetAttrString(cls, "code", c) < 0;
            Py_XDECREF(c);
            if (bad) goto fail;
        }
        Py_INCREF(cls);
        if (PyModule_AddObject(m, EXC[i].name, cls) < 0) goto fail;
    }
    if (PyModule_AddIntConstant(m, "VERSION_NUMBER", tocsin_version_number()) < 0) goto fail;
    if (PyModule_AddIntConstant(m, "SCHEMA_VERSION", TOCSIN_SCHEMA_VERSION) < 0) goto fail;
    if (PyModule_AddIntConstant(m, "OUTCOME_OK", TOCSIN_OUTCOME_OK) < 0) goto fail;
    if (PyModule_AddIntConstant(m, "OUTCOME_ERROR", TOCSIN_OUTCOME_ERROR) < 0) goto fail;
    if (PyModule_AddIntConstant(m, "OUTCOME_FAIL", TOCSIN_OUTCOME_FAIL) < 0) goto fail;
    if (PyModule_AddIntConstant(m, "OUTCOME_HAND_BACK", TOCSIN_OUTCOME_HAND_BACK) < 0) goto fail;
    if (PyModule_AddIntConstant(m, "MAX_TRACE_BYTES", TOCSIN_MAX_TRACE_BYTES) < 0) goto fail;
    {   /* the core's bounds of times, durations and leases: _util checks them */
        static const struct { const char *name; long long v; } bounds[] = {
            {"MAX_TIME_MS", TOCSIN_MAX_TIME_MS},
            {"MAX_LEASE_MS", TOCSIN_MAX_LEASE_MS},
            {"MIN_WORKER_LEASE_MS", TOCSIN_MIN_WORKER_LEASE_MS}};
        size_t i;
        for (i = 0; i < sizeof bounds / sizeof bounds[0]; i++) {
            PyObject *v = PyLong_FromLongLong(bounds[i].v);
            if (!v || PyModule_AddObject(m, bounds[i].name, v) < 0) {
                Py_XDECREF(v);
                goto fail;
            }
        }
    }
    if (PyModule_AddIntConstant(m, "DEFAULT_RESULT_TTL_MS", (long)TOCSIN_DEFAULT_RESULT_TTL_MS) < 0) goto fail;
    if (PyModule_AddIntConstant(m, "CATCHUP_ONCE", TOCSIN_CATCHUP_ONCE) < 0) goto fail;
    if (PyModule_AddIntConstant(m, "CATCHUP_ALL", TOCSIN_CATCHUP_ALL) < 0) goto fail;
    if (PyModule_AddIntConstant(m, "SCHEDULE_PRIORITY", TOCSIN_SCHEDULE_PRIORITY) < 0) goto fail;
    if (PyModule_AddIntConstant(m, "SCHEDULE_MAX_ATTEMPTS", TOCSIN_SCHEDULE_MAX_ATTEMPTS) < 0) goto fail;
    if (PyModule_AddIntConstant(m, "SCHEDULE_JOB_EXPIRES", TOCSIN_SCHEDULE_JOB_EXPIRES) < 0) goto fail;
    if (PyModule_AddIntConstant(m, "SCHEDULE_CATCH_UP", TOCSIN_SCHEDULE_CATCH_UP) < 0) goto fail;
    if (PyModule_AddIntConstant(m, "SCHEDULE_MAX_CATCH_UP", TOCSIN_SCHEDULE_MAX_CATCH_UP) < 0) goto fail;
    if (PyModule_AddIntConstant(m, "SCHEDULE_LOCAL_TIME", TOCSIN_SCHEDULE_LOCAL_TIME) < 0) goto fail;
    if (PyModule_AddIntConstant(m, "SCHEDULE_META", TOCSIN_SCHEDULE_META) < 0) goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
