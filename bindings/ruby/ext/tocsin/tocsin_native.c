/*
 * tocsin_native: the Ruby C-API face of the tocsin core (bindings/ruby).
 *
 * A translation layer only: handles become objects, result codes become
 * Tocsin::Error subclasses (read from the core's one thread-local error channel
 * right after the failing call, on the same thread), JSON stays text (the Ruby
 * layer parses it). Every call into the core runs without the GVL; waits run
 * with an unblock function that pokes them (tocsin_*_poke -> TOCSIN_INTERRUPTED),
 * so Thread#raise / Thread#kill / Timeout.timeout / signals interrupt them.
 */
#include <ruby.h>
#include <ruby/thread.h>
#include <ruby/encoding.h>
#include <stdatomic.h>
#include <string.h>
#include <limits.h>
#include <stdint.h>
#include <time.h>
#include <link.h>
#include <dlfcn.h>
#include <stdio.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>

#include "tocsin.h"

static VALUE mTocsin, mNative, cDB, cSub, cListener, cStreamSub, cWorker, eError;
static VALUE eByCode[20];

/* ---- errors ------------------------------------------------------------ */

static VALUE error_class(int rc) {
    if (rc > 0 && rc < 20 && eByCode[rc] != Qnil) return eByCode[rc];
    return eError;
}

/* Raises the calling thread's last tocsin failure (read at once, same thread). */
static void NORETURN(raise_rc(int rc));
static void raise_rc(int rc) {
    const char *msg = tocsin_errmsg(NULL);
    int code = tocsin_errcode(NULL);
    int sq = tocsin_sqlite_errcode(NULL);
    if (code != rc || !msg || !*msg) msg = tocsin_errstr(rc);
    VALUE m = rb_enc_str_new_cstr(msg, rb_utf8_encoding());
    VALUE exc = rb_exc_new_str(error_class(rc), m);
    rb_ivar_set(exc, rb_intern("@code"), INT2NUM(rc));
    rb_ivar_set(exc, rb_intern("@sqlite_code"), INT2NUM(sq));
    rb_exc_raise(exc);
}
#define CHECK(rc) do { int rc_ = (rc); if (rc_ != TOCSIN_OK) raise_rc(rc_); } while (0)

/* ---- running the core without the GVL ----------------------------------
 * rb_thread_call_without_gvl handles a pending interrupt (Thread#raise,
 * #kill, Timeout, a trap) before it calls the function -- which then does
 * not run -- and again after the function returned. An exception raised
 * there loses what the call made or did: a transaction begun, a listener
 * opened (never closed: the write lock or the connection held until the
 * process ends), a commit or close whose handle was already let go. So:
 *  - nogvl_once runs the call once; a pending interrupt is handled before it
 *    starts (it may raise then: nothing ran), never after it ran (it comes
 *    at Ruby's next check, once the result is in Ruby's hands);
 *  - nogvl_must runs a release (close, commit, rollback) that has to
 *    happen: it never raises (with an interrupt pending, the call runs
 *    holding the GVL; the interrupt comes next). */
struct once_a { void *(*fn)(void *); void *arg; int done; };
static void *once_f(void *p) {
    struct once_a *o = p;
    o->fn(o->arg);
    o->done = 1;
    return NULL;
}
static void nogvl_once(void *(*fn)(void *), void *arg) {
    struct once_a o = {fn, arg, 0};
    for (;;) {
        rb_nogvl(once_f, &o, NULL, NULL, RB_NOGVL_INTR_FAIL);
        if (o.done) return;
        rb_thread_check_ints(); /* raises, or (a trap that returned) the call starts now */
    }
}
static void nogvl_must(void *(*fn)(void *), void *arg) {
    struct once_a o = {fn, arg, 0};
    rb_nogvl(once_f, &o, NULL, NULL, RB_NOGVL_INTR_FAIL);
    if (!o.done) fn(arg);
}
/* DEF_CALL(name, fields, call): a struct of arguments and a trampoline that
 * runs `call` (using a->...) without the GVL. */
#define DEF_CALL(name, fields, ...)                                        \
    struct name##_a { int rc; fields };                                    \
    static void *name##_f(void *p) { struct name##_a *a = p; a->rc = __VA_ARGS__; return NULL; }
#define NOGVL(name, a) nogvl_once(name##_f, &(a))
#define NOGVL_MUST(name, a) nogvl_must(name##_f, &(a))

/* fork(): the child's copy of every handle and object is inherited (the core
 * refuses to use it: TOCSIN_CLOSED). What the parent's other threads were
 * doing with them at the fork -- calls in flight, waits -- stays recorded in
 * the copy, and those threads do not exist in the child: nothing may wait
 * for them to end there. fork_gen counts the forks this process came from;
 * each object keeps the count it was made under. */
static _Atomic unsigned fork_gen;
static void on_fork_child(void) { atomic_fetch_add(&fork_gen, 1); }
static unsigned cur_gen(void) { return atomic_load(&fork_gen); }

/* ---- values ------------------------------------------------------------ */

static VALUE str_or_nil(const char *s) {
    return s ? rb_enc_str_new_cstr(s, rb_utf8_encoding()) : Qnil;
}
/* A C string of a Ruby String (nil -> NULL). Refused (InvalidArgument) rather
 * than silently cut: a NUL byte, and an encoding whose text is not ASCII
 * bytes (UTF-16/32: the Ruby layer transcodes names to UTF-8). */
static const char *cstr(VALUE v) {
    StringValue(v);
    if (!rb_enc_asciicompat(rb_enc_get(v)))
        rb_raise(eByCode[TOCSIN_INVALID], "a %s string cannot be passed to tocsin: give UTF-8 text",
                 rb_enc_name(rb_enc_get(v)));
    if (memchr(RSTRING_PTR(v), 0, (size_t)RSTRING_LEN(v))) {
        VALUE shown = rb_str_inspect(rb_str_substr(v, 0, 40));
        rb_raise(eByCode[TOCSIN_INVALID], "%s%s contains a NUL byte", StringValueCStr(shown),
                 RSTRING_LEN(v) > 40 ? "..." : "");
    }
    return StringValueCStr(v);
}
static const char *cstr_or_null(VALUE v) { return NIL_P(v) ? NULL : cstr(v); }

/* ---- integers -----------------------------------------------------------
 * Every integer argument goes through arg_int (no NUM2LL / NUM2INT, whose
 * TypeError names no argument, whose RangeError says "bignum too big" and
 * which truncate a Float): an Integer -- not a Float, even an integral one,
 * never truncated; not a String -- within lo..hi, else Tocsin::InvalidArgument
 * naming the argument (`what`, as the Ruby API calls it), raised before the
 * core is called, so nothing is written. The core checks the ranges of its
 * 64-bit arguments itself; an argument of a narrower C type (int, size_t) is
 * bounded here with the core's own numbers. secs: a duration the Ruby layer
 * made of seconds (Util.ms): its bounds are worded in seconds. */
#define TC_SHOWN_MAX 40
static void fmt_secs(char *buf, size_t size, int64_t ms) {
    uint64_t a = ms < 0 ? (uint64_t)0 - (uint64_t)ms : (uint64_t)ms;
    int n = snprintf(buf, size, "%s%llu.%03llu", ms < 0 ? "-" : "", (unsigned long long)(a / 1000),
                     (unsigned long long)(a % 1000));
    while (n > 0 && (size_t)n < size && buf[n - 1] == '0') buf[--n] = 0; /* 1.500 -> 1.5, 2.000 -> 2 */
    if (n > 0 && (size_t)n < size && buf[n - 1] == '.') buf[--n] = 0;
}
/* sign: the value's (< 0: negative); fits: within 64 bits (n is the value) */
static void NORETURN(arg_range_error(VALUE v, const char *what, int64_t lo, int64_t hi, int sign, int fits, int64_t n,
                                     int secs));
static void arg_range_error(VALUE v, const char *what, int64_t lo, int64_t hi, int sign, int fits, int64_t n,
                            int secs) {
    VALUE inv = eByCode[TOCSIN_INVALID];
    char shown[64], a[32], b[32];
    if (fits && secs) {
        fmt_secs(shown, sizeof shown, n);
        strcat(shown, " seconds");
    } else if (fits) {
        snprintf(shown, sizeof shown, "%lld", (long long)n);
    } else { /* beyond 64 bits: its first digits */
        VALUE s = rb_big2str(v, 10);
        snprintf(shown, sizeof shown, "%.*s%s", TC_SHOWN_MAX, RSTRING_PTR(s), RSTRING_LEN(s) > TC_SHOWN_MAX ? "..." : "");
    }
    if (secs) {
        fmt_secs(a, sizeof a, lo);
        fmt_secs(b, sizeof b, hi);
        rb_raise(inv, "%s must be between %s and %s seconds, not %s", what, a, b, shown);
    }
    int below = fits ? n < lo : sign < 0;
    if (lo == INT64_MIN && hi == INT64_MAX) rb_raise(inv, "%s must be a 64-bit Integer, not %s", what, shown);
    if (below && hi == INT64_MAX) rb_raise(inv, "%s must be >= %lld, not %s", what, (long long)lo, shown);
    if (!below && lo == INT64_MIN) rb_raise(inv, "%s must be <= %lld, not %s", what, (long long)hi, shown);
    rb_raise(inv, "%s must be between %lld and %lld, not %s", what, (long long)lo, (long long)hi, shown);
}
static int64_t arg_int(VALUE v, const char *what, int64_t lo, int64_t hi, int secs) {
    if (!RB_INTEGER_TYPE_P(v))
        rb_raise(eByCode[TOCSIN_INVALID], "%s must be an Integer, not %s", what,
                 NIL_P(v) ? "nil" : v == Qtrue ? "true" : v == Qfalse ? "false" : rb_obj_classname(v));
    int64_t n = 0;
    /* n: the low 64 bits, two's complement. The sign says -2 / +2 only beyond
     * 64 bits of magnitude: 2**63..2**64-1 (and -2**64..-2**63-1) come back
     * with +1 (-1) and an n of the other sign. */
    int sign = rb_integer_pack(v, &n, 1, sizeof n, 0,
                               INTEGER_PACK_LSWORD_FIRST | INTEGER_PACK_NATIVE_BYTE_ORDER | INTEGER_PACK_2COMP);
    int fits = sign == 0 || (sign == 1 && n > 0) || (sign == -1 && n < 0);
    if (!fits || n < lo || n > hi) arg_range_error(v, what, lo, hi, sign, fits, n, secs);
    return n;
}
/* any 64-bit Integer (the core checks the range) */
static int64_t arg_i64(VALUE v, const char *what) { return arg_int(v, what, INT64_MIN, INT64_MAX, 0); }
/* nil -> d */
static int64_t opt_i64(VALUE v, const char *what, int64_t d) { return NIL_P(v) ? d : arg_i64(v, what); }
static int64_t opt_range(VALUE v, const char *what, int64_t lo, int64_t hi, int64_t d) {
    return NIL_P(v) ? d : arg_int(v, what, lo, hi, 0);
}
/* a count of rows (claim count, read limit, buffer): 1..TOCSIN_MAX_BATCH, as the core */
static size_t arg_count(VALUE v, const char *what) { return (size_t)arg_int(v, what, 1, TOCSIN_MAX_BATCH, 0); }
/* an int the core checks itself (a result code, an outcome kind): bounded to int */
static int arg_cint(VALUE v, const char *what) { return (int)arg_int(v, what, INT_MIN, INT_MAX, 0); }

/* ---- the database handle ----------------------------------------------- */

typedef struct {
    tocsin_db *db;
    int is_tx;
    _Atomic int64_t fixed_now; /* < 0: system clock */
    VALUE parent;              /* tx: the database it came from (kept alive) */
    _Atomic int workers;       /* open Native::Workers on it: it must outlive them */
    int closing;               /* close started: new calls raise Closed */
    _Atomic int inflight;      /* calls of other threads running in the core on it */
    unsigned gen;              /* fork_gen when opened */
} rdb;

static void rdb_mark(void *p) { rdb *h = p; rb_gc_mark(h->parent); }
static void rdb_free(void *p) {
    rdb *h = p;
    /* Only at exit can a database be swept before a worker on it (a worker
     * marks its database): leave both to the process's end then. */
    if (atomic_load(&h->workers) > 0) return;
    if (h->db) {
        if (h->is_tx) tocsin_tx_rollback(h->db);
        else tocsin_close(h->db);
    }
    xfree(h);
}
static const rb_data_type_t rdb_type = {"tocsin_db", {rdb_mark, rdb_free, NULL}, NULL, NULL,
                                        RUBY_TYPED_FREE_IMMEDIATELY};

static VALUE rdb_alloc(VALUE klass) {
    rdb *h;
    VALUE obj = TypedData_Make_Struct(klass, rdb, &rdb_type, h);
    h->parent = Qnil;
    h->gen = cur_gen();
    atomic_store(&h->fixed_now, -1);
    return obj;
}
static rdb *get_rdb(VALUE self) {
    rdb *h;
    TypedData_Get_Struct(self, rdb, &rdb_type, h);
    return h;
}
static tocsin_db *DB(VALUE self) {
    rdb *h = get_rdb(self);
    if (!h->db || h->closing) rb_raise(eByCode[TOCSIN_CLOSED], h->is_tx ? "the transaction has ended" : "the database is closed");
    return h->db;
}

/* A call into the core on a database handle, without the GVL, counted so
 * that close waits for it: tocsin_close frees the handle, which a call of
 * another thread must not be running on. Counted under the GVL after a last
 * check (converting the arguments may have run Ruby code, and a close, since
 * DB()); uncounted as soon as the core returns, or by the ensure when an
 * interrupt raised before the call started. */
struct dbcall {
    void *(*fn)(void *);
    void *arg;
    rb_unblock_function_t *ubf;
    void *ubf_arg;
    rdb *h;
    int done;
    int counted; /* in h->inflight */
};
static void *dbcall_f(void *p) {
    struct dbcall *c = p;
    c->fn(c->arg);
    atomic_fetch_sub(&c->h->inflight, 1);
    c->counted = 0;
    c->done = 1;
    return NULL;
}
static void NORETURN(raise_db_closed(rdb *h));
static void raise_db_closed(rdb *h) {
    rb_raise(eByCode[TOCSIN_CLOSED], h->is_tx ? "the transaction has ended" : "the database is closed");
}
static VALUE dbcall_body(VALUE p) {
    struct dbcall *c = (struct dbcall *)p;
    /* a wait's unblock function (wait_ubf) is async-signal-safe: see run_wait.
     * As nogvl_once: an interrupt pending before the call is handled (it may
     * raise), never one after it ran. It is handled uncounted: a trap's
     * close of the database must not wait for this very call. */
    for (;;) {
        rb_nogvl(dbcall_f, c, c->ubf, c->ubf_arg, RB_NOGVL_INTR_FAIL | (c->ubf ? RB_NOGVL_UBF_ASYNC_SAFE : 0));
        if (c->done) return Qnil;
        atomic_fetch_sub(&c->h->inflight, 1);
        c->counted = 0;
        rb_thread_check_ints();
        if (!c->h->db || c->h->closing) raise_db_closed(c->h);
        atomic_fetch_add(&c->h->inflight, 1);
        c->counted = 1;
    }
}
static VALUE dbcall_ensure(VALUE p) {
    struct dbcall *c = (struct dbcall *)p;
    if (c->counted) atomic_fetch_sub(&c->h->inflight, 1);
    return Qnil;
}
static void call_on_db(rdb *h, void *(*fn)(void *), void *arg, rb_unblock_function_t *ubf, void *ubf_arg) {
    struct dbcall c = {fn, arg, ubf, ubf_arg, h, 0, 1};
    if (!h->db || h->closing) raise_db_closed(h);
    atomic_fetch_add(&h->inflight, 1);
    rb_ensure(dbcall_body, (VALUE)&c, dbcall_ensure, (VALUE)&c);
}
#define NOGVL_DB(name, a, dbv) call_on_db(get_rdb(dbv), name##_f, &(a), NULL, NULL)

static int64_t fixed_clock(void *ctx) {
    rdb *h = ctx;
    int64_t t = atomic_load(&h->fixed_now);
    if (t >= 0) return t;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

DEF_CALL(open, tocsin_db *db; const char *path; tocsin_open_opts o;,
         tocsin_open(&a->db, a->path, &a->o))
/* Native::DB.open(path, busy_timeout_ms, max_payload_bytes, read_only) */
static VALUE db_s_open(VALUE klass, VALUE path, VALUE busy, VALUE maxp, VALUE ro) {
    VALUE obj = rdb_alloc(klass);
    rdb *h = get_rdb(obj);
    struct open_a a = {0};
    tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
    o.busy_timeout_ms = NIL_P(busy) ? 0 : (int)arg_int(busy, "busy_timeout", 0, INT_MAX, 1);
    o.max_payload_bytes = opt_i64(maxp, "max_payload", 0);
    o.read_only = RTEST(ro);
    a.o = o;
    a.path = cstr(path);
    NOGVL(open, a);
    if (a.rc != TOCSIN_OK) {
        int rc = a.rc;
        VALUE m = rb_str_new_cstr(a.db ? tocsin_errmsg(NULL) : tocsin_errstr(rc));
        if (a.db) tocsin_close(a.db);
        VALUE exc = rb_exc_new_str(error_class(rc), m);
        rb_ivar_set(exc, rb_intern("@code"), INT2NUM(rc));
        rb_exc_raise(exc);
    }
    h->db = a.db;
    RB_GC_GUARD(path);
    return obj;
}

DEF_CALL(close, tocsin_db *db;, tocsin_close(a->db))
/* close { wake the waits on the database } -- new calls raise Closed at once;
 * the calls other threads are running finish first (the block, called while
 * some still run, ends the waits: Database#close pokes its subscriptions). */
static VALUE db_close(VALUE self) {
    rdb *h = get_rdb(self);
    if (!h->db) return Qnil;
    if (h->gen != cur_gen()) {
        /* inherited across fork(): the calls counted in flight and the workers
         * are the parent's threads' (not here to end them); the core's close of
         * an inherited handle releases nothing of the parent's (the handle is
         * left allocated: what the parent's objects point to stays valid) */
        tocsin_db *d = h->db;
        h->closing = 1;
        h->db = NULL;
        if (h->is_tx) tocsin_tx_rollback(d);
        else tocsin_close(d);
        return Qnil;
    }
    if (atomic_load(&h->workers) > 0)
        rb_raise(eByCode[TOCSIN_BUSY], "%d worker(s) still run on this database: stop them before closing it",
                 atomic_load(&h->workers));
    if (h->is_tx) { tocsin_tx_rollback(h->db); h->db = NULL; return Qnil; }
    h->closing = 1;
    /* a call in flight that waits for the write lock ends now (Closed), not at
     * the end of the busy timeout */
    tocsin_close_begin(h->db);
    for (int i = 0; atomic_load(&h->inflight) > 0; i++) {
        if (i % 10 == 0 && rb_block_given_p()) rb_yield(Qnil);
        struct timeval tv = {0, 1000};
        rb_thread_wait_for(tv);
    }
    if (!h->db) return Qnil; /* closed by another thread meanwhile */
    /* (a worker whose open was in flight as the close began has closed itself:
     * wk_s_open sees `closing` in the same hold of the GVL as its call ended) */
    struct close_a a = {0, h->db};
    h->db = NULL;
    NOGVL_MUST(close, a);
    return Qnil;
}
static VALUE db_closed_p(VALUE self) {
    rdb *h = get_rdb(self);
    return h->db && !h->closing ? Qfalse : Qtrue;
}

/* Tocsin::Native::Cancel: a core cancel token (tocsin_cancel). fire (any thread)
 * ends the lock wait of the tx_begin(cancel) bound to it with Interrupted. */
static void rcancel_free(void *p) { tocsin_cancel_free(p); }
static const rb_data_type_t rcancel_type = {"tocsin_cancel", {NULL, rcancel_free, NULL}, NULL, NULL,
                                            RUBY_TYPED_FREE_IMMEDIATELY};
static VALUE cancel_alloc(VALUE klass) {
    tocsin_cancel *c = tocsin_cancel_new();
    if (!c) rb_raise(rb_eNoMemError, "out of memory");
    return TypedData_Wrap_Struct(klass, &rcancel_type, c);
}
static tocsin_cancel *cancel_of(VALUE v) {
    return NIL_P(v) ? NULL : (tocsin_cancel *)rb_check_typeddata(v, &rcancel_type);
}
static VALUE cancel_fire(VALUE self) {
    tocsin_cancel_fire(cancel_of(self));
    return Qnil;
}

static int tx_begin_bound(tocsin_db *db, tocsin_db **tx, tocsin_cancel *c) {
    int rc;
    tocsin_thread_cancel(c);
    rc = tocsin_tx_begin(db, tx);
    tocsin_thread_cancel(NULL);
    return rc;
}
DEF_CALL(txb, tocsin_db *db; tocsin_db *tx; tocsin_cancel *c;, tx_begin_bound(a->db, &a->tx, a->c))
/* tx_begin([cancel]) */
static VALUE db_tx_begin(int argc, VALUE *argv, VALUE self) {
    VALUE cancel = Qnil;
    rb_scan_args(argc, argv, "01", &cancel);
    tocsin_cancel *c = cancel_of(cancel); /* (a TypeError for anything but a Cancel or nil) */
    /* the object first: once begun, the transaction is in its hands at once
     * (its GC rolls back), with nothing left to fail in between */
    VALUE obj = rdb_alloc(cDB);
    rdb *t = get_rdb(obj);
    t->is_tx = 1;
    t->parent = self;
    struct txb_a a = {0, DB(self), NULL, c};
    NOGVL_DB(txb, a, self);
    RB_GC_GUARD(cancel);
    CHECK(a.rc);
    t->db = a.tx;
    return obj;
}
DEF_CALL(txc, tocsin_db *tx;, tocsin_tx_commit(a->tx))
DEF_CALL(txr, tocsin_db *tx;, tocsin_tx_rollback(a->tx))
static VALUE db_tx_commit(VALUE self) {
    rdb *h = get_rdb(self);
    if (!h->is_tx) rb_raise(eByCode[TOCSIN_INVALID], "not a transaction");
    struct txc_a a = {0, DB(self)};
    h->db = NULL; /* always released by the core */
    NOGVL_MUST(txc, a);
    CHECK(a.rc);
    return Qnil;
}
static VALUE db_tx_rollback(VALUE self) {
    rdb *h = get_rdb(self);
    if (!h->is_tx) rb_raise(eByCode[TOCSIN_INVALID], "not a transaction");
    if (!h->db) return Qnil;
    struct txr_a a = {0, h->db};
    h->db = NULL;
    NOGVL_MUST(txr, a);
    CHECK(a.rc);
    return Qnil;
}
static VALUE db_is_tx(VALUE self) { return get_rdb(self)->is_tx ? Qtrue : Qfalse; }

DEF_CALL(exec, tocsin_db *db; const char *sql;, tocsin_exec(a->db, a->sql))
static VALUE db_exec(VALUE self, VALUE sql) {
    struct exec_a a = {0, DB(self), cstr(sql)};
    NOGVL_DB(exec, a, self);
    RB_GC_GUARD(sql);
    CHECK(a.rc);
    return Qnil;
}

static VALUE db_now(VALUE self) { return LL2NUM(tocsin_now(DB(self))); }
/* set_time(ms or nil): a fixed clock the tests drive; nil: the system clock. */
static VALUE db_set_time(VALUE self, VALUE ms) {
    rdb *h = get_rdb(self);
    tocsin_db *db = DB(self);
    if (NIL_P(ms)) {
        atomic_store(&h->fixed_now, -1);
        tocsin_set_clock(db, NULL, NULL);
    } else {
        int64_t t = arg_int(ms, "time (epoch ms)", 0, TOCSIN_MAX_TIME_MS, 0);
        atomic_store(&h->fixed_now, t);
        tocsin_set_clock(db, fixed_clock, h);
    }
    return Qnil;
}
static VALUE db_set_max_payload(VALUE self, VALUE n) {
    CHECK(tocsin_set_max_payload(DB(self), arg_i64(n, "max_payload")));
    return Qnil;
}
static VALUE db_sqlite_version(VALUE self) { return rb_str_new_cstr(sqlite3_libversion()); }
/* The core's rules for a name (non-empty, at most 255 bytes, no control
 * characters), checked where a binding takes one it uses later. */
static VALUE db_check_name(VALUE self, VALUE what, VALUE name) {
    CHECK(tocsin_check_name(DB(self), StringValueCStr(what), StringValueCStr(name)));
    return name;
}
/* The same before any database is open (a task's name, its queue). */
static VALUE m_check_name(VALUE mod, VALUE what, VALUE name) {
    (void)mod;
    CHECK(tocsin_check_name(NULL, StringValueCStr(what), StringValueCStr(name)));
    return name;
}

/* ---- queue ------------------------------------------------------------- */

static VALUE job_to_ary(const tocsin_job *j) {
    VALUE a = rb_ary_new_capa(18);
    rb_ary_push(a, LL2NUM(j->id));
    rb_ary_push(a, str_or_nil(j->queue));
    rb_ary_push(a, str_or_nil(j->state));
    rb_ary_push(a, str_or_nil(j->payload));
    rb_ary_push(a, str_or_nil(j->meta));
    rb_ary_push(a, LL2NUM(j->priority));
    rb_ary_push(a, INT2NUM(j->attempts));
    rb_ary_push(a, INT2NUM(j->max_attempts));
    rb_ary_push(a, LL2NUM(j->token));
    rb_ary_push(a, LL2NUM(j->run_at));
    rb_ary_push(a, LL2NUM(j->created_at));
    rb_ary_push(a, LL2NUM(j->lease_until));
    rb_ary_push(a, LL2NUM(j->expires_at));
    rb_ary_push(a, str_or_nil(j->unique_key));
    rb_ary_push(a, str_or_nil(j->worker));
    rb_ary_push(a, str_or_nil(j->last_error));
    rb_ary_push(a, str_or_nil(j->reason));
    rb_ary_push(a, LL2NUM(j->died_at));
    return a;
}
static VALUE jobs_to_ary(tocsin_job *jobs, size_t n) {
    VALUE out = rb_ary_new_capa((long)n);
    for (size_t i = 0; i < n; i++) rb_ary_push(out, job_to_ary(&jobs[i]));
    tocsin_jobs_free(jobs, n);
    return out;
}

/* opts: [priority, delay_ms, run_at_ms, max_attempts, expires_ms, unique_key, meta] (nil entries: default) */
static void fill_enqueue_opts(tocsin_enqueue_opts *o, VALUE ary) {
    tocsin_enqueue_opts d = TOCSIN_ENQUEUE_OPTS_INIT;
    *o = d;
    if (NIL_P(ary)) return;
    Check_Type(ary, T_ARRAY);
    if (RARRAY_LEN(ary) != 7) rb_raise(rb_eArgError, "enqueue options: 7 entries expected");
    o->priority = opt_i64(rb_ary_entry(ary, 0), "priority", 0);
    o->delay_ms = opt_i64(rb_ary_entry(ary, 1), "delay", 0);
    o->run_at_ms = opt_i64(rb_ary_entry(ary, 2), "run_at", 0);
    /* an int: bounded here with the core's numbers (nil: the default) */
    o->max_attempts = (int)opt_range(rb_ary_entry(ary, 3), "max_attempts", 1, TOCSIN_MAX_ATTEMPTS, 0);
    o->expires_ms = opt_i64(rb_ary_entry(ary, 4), "expires", 0);
    o->unique_key = cstr_or_null(rb_ary_entry(ary, 5));
    o->meta = cstr_or_null(rb_ary_entry(ary, 6));
}

DEF_CALL(enq, tocsin_db *db; int64_t id; const char *q; const char *p; tocsin_enqueue_opts o;,
         tocsin_queue_enqueue(a->db, &a->id, a->q, a->p, &a->o))
static VALUE db_enqueue(VALUE self, VALUE queue, VALUE payload, VALUE opts) {
    struct enq_a a = {0};
    a.db = DB(self);
    a.q = cstr(queue);
    a.p = cstr(payload);
    fill_enqueue_opts(&a.o, opts);
    NOGVL_DB(enq, a, self);
    RB_GC_GUARD(queue); RB_GC_GUARD(payload); RB_GC_GUARD(opts);
    CHECK(a.rc);
    return LL2NUM(a.id);
}

DEF_CALL(enqm, tocsin_db *db; int64_t *ids; tocsin_job_spec *specs; size_t n;,
         tocsin_queue_enqueue_many(a->db, a->ids, a->specs, a->n))
/* enqueue_many([[queue, payload, opts], ...]) -> ids */
static VALUE db_enqueue_many(VALUE self, VALUE jobs) {
    Check_Type(jobs, T_ARRAY);
    long n = RARRAY_LEN(jobs);
    struct enqm_a a = {0};
    a.db = DB(self);
    a.n = (size_t)n;
    VALUE keep = rb_ary_new();
    VALUE buf1 = rb_str_new(NULL, (long)(sizeof(tocsin_job_spec) * (n ? n : 1)));
    VALUE buf2 = rb_str_new(NULL, (long)(sizeof(tocsin_enqueue_opts) * (n ? n : 1)));
    VALUE buf3 = rb_str_new(NULL, (long)(sizeof(int64_t) * (n ? n : 1)));
    a.specs = (tocsin_job_spec *)RSTRING_PTR(buf1);
    tocsin_enqueue_opts *opts = (tocsin_enqueue_opts *)RSTRING_PTR(buf2);
    a.ids = (int64_t *)RSTRING_PTR(buf3);
    for (long i = 0; i < n; i++) {
        VALUE e = rb_ary_entry(jobs, i);
        Check_Type(e, T_ARRAY);
        rb_ary_push(keep, e);
        a.specs[i].queue = cstr(rb_ary_entry(e, 0));
        a.specs[i].payload = cstr(rb_ary_entry(e, 1));
        fill_enqueue_opts(&opts[i], rb_ary_entry(e, 2));
        a.specs[i].opts = &opts[i];
    }
    NOGVL_DB(enqm, a, self);
    RB_GC_GUARD(keep); RB_GC_GUARD(buf1); RB_GC_GUARD(buf2); RB_GC_GUARD(buf3);
    CHECK(a.rc);
    VALUE out = rb_ary_new_capa(n);
    for (long i = 0; i < n; i++) rb_ary_push(out, LL2NUM(a.ids[i]));
    return out;
}

DEF_CALL(claim, tocsin_db *db; tocsin_job *jobs; size_t n; const char *q; const char *w; size_t max; int64_t vis;,
         tocsin_queue_claim(a->db, &a->jobs, &a->n, a->q, a->w, a->max, a->vis))
static VALUE db_claim(VALUE self, VALUE queue, VALUE worker, VALUE max, VALUE vis) {
    struct claim_a a = {0};
    a.db = DB(self);
    a.q = cstr(queue);
    a.w = cstr(worker);
    a.max = arg_count(max, "claim count");
    a.vis = arg_i64(vis, "visibility");
    NOGVL_DB(claim, a, self);
    RB_GC_GUARD(queue); RB_GC_GUARD(worker);
    CHECK(a.rc);
    return jobs_to_ary(a.jobs, a.n);
}

DEF_CALL(ack, tocsin_db *db; int ok; int64_t id; int64_t tok;, tocsin_job_ack(a->db, &a->ok, a->id, a->tok))
static VALUE db_ack(VALUE self, VALUE id, VALUE tok) {
    struct ack_a a = {0, DB(self), 0, arg_i64(id, "job id"), arg_i64(tok, "token")};
    NOGVL_DB(ack, a, self);
    CHECK(a.rc);
    return a.ok ? Qtrue : Qfalse;
}
DEF_CALL(ackb, tocsin_db *db; size_t acked; int64_t *ids; int64_t *toks; size_t n;,
         tocsin_job_ack_batch(a->db, &a->acked, a->ids, a->toks, a->n))
static VALUE db_ack_batch(VALUE self, VALUE ids, VALUE toks) {
    Check_Type(ids, T_ARRAY);
    Check_Type(toks, T_ARRAY);
    long n = RARRAY_LEN(ids);
    if (RARRAY_LEN(toks) != n) rb_raise(rb_eArgError, "ids and tokens differ in length");
    VALUE b1 = rb_str_new(NULL, (long)sizeof(int64_t) * (n ? n : 1));
    VALUE b2 = rb_str_new(NULL, (long)sizeof(int64_t) * (n ? n : 1));
    struct ackb_a a = {0, DB(self), 0, (int64_t *)RSTRING_PTR(b1), (int64_t *)RSTRING_PTR(b2), (size_t)n};
    for (long i = 0; i < n; i++) {
        char what[64];
        snprintf(what, sizeof what, "the job id of ack_batch entry %ld", i);
        a.ids[i] = arg_i64(rb_ary_entry(ids, i), what);
        snprintf(what, sizeof what, "the token of ack_batch entry %ld", i);
        a.toks[i] = arg_i64(rb_ary_entry(toks, i), what);
    }
    NOGVL_DB(ackb, a, self);
    RB_GC_GUARD(b1); RB_GC_GUARD(b2);
    CHECK(a.rc);
    return SIZET2NUM(a.acked);
}
DEF_CALL(retry, tocsin_db *db; int ok; int64_t id; int64_t tok; int64_t delay; const char *err;,
         tocsin_job_retry(a->db, &a->ok, a->id, a->tok, a->delay, a->err))
static VALUE db_retry(VALUE self, VALUE id, VALUE tok, VALUE delay, VALUE err) {
    struct retry_a a = {0, DB(self), 0, arg_i64(id, "job id"), arg_i64(tok, "token"), opt_i64(delay, "delay", -1),
                          cstr_or_null(err)};
    NOGVL_DB(retry, a, self);
    RB_GC_GUARD(err);
    CHECK(a.rc);
    return a.ok ? Qtrue : Qfalse;
}
DEF_CALL(fail, tocsin_db *db; int ok; int64_t id; int64_t tok; const char *err;,
         tocsin_job_fail(a->db, &a->ok, a->id, a->tok, a->err))
static VALUE db_fail(VALUE self, VALUE id, VALUE tok, VALUE err) {
    struct fail_a a = {0, DB(self), 0, arg_i64(id, "job id"), arg_i64(tok, "token"), cstr_or_null(err)};
    NOGVL_DB(fail, a, self);
    RB_GC_GUARD(err);
    CHECK(a.rc);
    return a.ok ? Qtrue : Qfalse;
}
DEF_CALL(handback, tocsin_db *db; int ok; int64_t id; int64_t tok; int64_t delay;,
         tocsin_job_hand_back(a->db, &a->ok, a->id, a->tok, a->delay))
/* hand_back(id, token, delay_ms): pending again, unrun, no attempt consumed */
static VALUE db_hand_back(VALUE self, VALUE id, VALUE tok, VALUE delay) {
    struct handback_a a = {0, DB(self), 0, arg_i64(id, "job id"), arg_i64(tok, "token"), opt_i64(delay, "delay", 0)};
    NOGVL_DB(handback, a, self);
    CHECK(a.rc);
    return a.ok ? Qtrue : Qfalse;
}
DEF_CALL(hb, tocsin_db *db; int ok; int64_t id; int64_t tok; int64_t ext;,
         tocsin_job_heartbeat(a->db, &a->ok, a->id, a->tok, a->ext))
static VALUE db_heartbeat(VALUE self, VALUE id, VALUE tok, VALUE ext) {
    struct hb_a a = {0, DB(self), 0, arg_i64(id, "job id"), arg_i64(tok, "token"), arg_i64(ext, "extend")};
    NOGVL_DB(hb, a, self);
    CHECK(a.rc);
    return a.ok ? Qtrue : Qfalse;
}
DEF_CALL(cancel, tocsin_db *db; int ok; int64_t id;, tocsin_job_cancel(a->db, &a->ok, a->id))
static VALUE db_cancel(VALUE self, VALUE id) {
    struct cancel_a a = {0, DB(self), 0, arg_i64(id, "job id")};
    NOGVL_DB(cancel, a, self);
    CHECK(a.rc);
    return a.ok ? Qtrue : Qfalse;
}
DEF_CALL(jget, tocsin_db *db; tocsin_job *job; int64_t id;, tocsin_job_get(a->db, &a->job, a->id))
static VALUE db_job_get(VALUE self, VALUE id) {
    struct jget_a a = {0, DB(self), NULL, arg_i64(id, "job id")};
    NOGVL_DB(jget, a, self);
    CHECK(a.rc);
    if (!a.job) return Qnil;
    VALUE r = job_to_ary(a.job);
    tocsin_jobs_free(a.job, 1);
    return r;
}
DEF_CALL(qname, tocsin_db *db; const char *q; int which; int out;,
         a->which == 0 ? tocsin_queue_pause(a->db, a->q)
         : a->which == 1 ? tocsin_queue_resume(a->db, a->q)
         : tocsin_queue_is_paused(a->db, &a->out, a->q))
static VALUE queue_op(VALUE self, VALUE q, int which) {
    struct qname_a a = {0, DB(self), cstr(q), which, 0};
    NOGVL_DB(qname, a, self);
    RB_GC_GUARD(q);
    CHECK(a.rc);
    return which == 2 ? (a.out ? Qtrue : Qfalse) : Qnil;
}
static VALUE db_pause(VALUE self, VALUE q) { return queue_op(self, q, 0); }
static VALUE db_resume(VALUE self, VALUE q) { return queue_op(self, q, 1); }
static VALUE db_is_paused(VALUE self, VALUE q) { return queue_op(self, q, 2); }

DEF_CALL(stats, tocsin_db *db; char *json; const char *q;, tocsin_queue_stats(a->db, &a->json, a->q))
static VALUE db_stats(VALUE self, VALUE q) {
    struct stats_a a = {0, DB(self), NULL, cstr_or_null(q)};
    NOGVL_DB(stats, a, self);
    RB_GC_GUARD(q);
    CHECK(a.rc);
    VALUE s = str_or_nil(a.json);
    tocsin_free(a.json);
    return s;
}

/* An array of names as C strings, kept alive by `keep`. */
static const char **names_of(VALUE ary, VALUE *keep, size_t *n) {
    Check_Type(ary, T_ARRAY);
    long len = RARRAY_LEN(ary);
    *keep = rb_str_new(NULL, (long)sizeof(char *) * (len ? len : 1));
    const char **out = (const char **)RSTRING_PTR(*keep);
    for (long i = 0; i < len; i++) out[i] = cstr(rb_ary_entry(ary, i));
    *n = (size_t)len;
    return out;
}
DEF_CALL(ndl, tocsin_db *db; int64_t ms; const char **qs; size_t n;,
         tocsin_queue_next_deadline(a->db, &a->ms, a->qs, a->n))
static VALUE db_next_deadline(VALUE self, VALUE queues) {
    VALUE keep;
    struct ndl_a a = {0, DB(self), 0, NULL, 0};
    a.qs = names_of(queues, &keep, &a.n);
    NOGVL_DB(ndl, a, self);
    RB_GC_GUARD(keep); RB_GC_GUARD(queues);
    CHECK(a.rc);
    return a.ms < 0 ? Qnil : LL2NUM(a.ms);
}

DEF_CALL(deadl, tocsin_db *db; tocsin_job *jobs; size_t n; const char *q; int64_t after; size_t limit;,
         tocsin_dead_list(a->db, &a->jobs, &a->n, a->q, a->after, a->limit))
static VALUE db_dead_list(VALUE self, VALUE q, VALUE after, VALUE limit) {
    struct deadl_a a = {0, DB(self), NULL, 0, cstr_or_null(q), arg_i64(after, "after"), arg_count(limit, "limit")};
    NOGVL_DB(deadl, a, self);
    RB_GC_GUARD(q);
    CHECK(a.rc);
    return jobs_to_ary(a.jobs, a.n);
}
DEF_CALL(requeue, tocsin_db *db; int ok; int64_t id;, tocsin_dead_requeue(a->db, &a->ok, a->id))
static VALUE db_dead_requeue(VALUE self, VALUE id) {
    struct requeue_a a = {0, DB(self), 0, arg_i64(id, "job id")};
    NOGVL_DB(requeue, a, self);
    CHECK(a.rc);
    return a.ok ? Qtrue : Qfalse;
}
DEF_CALL(purge, tocsin_db *db; int64_t n; const char *q; int64_t before;,
         tocsin_dead_purge(a->db, &a->n, a->q, a->before))
static VALUE db_dead_purge(VALUE self, VALUE q, VALUE before) {
    struct purge_a a = {0, DB(self), 0, cstr_or_null(q), opt_i64(before, "before", 0)};
    NOGVL_DB(purge, a, self);
    RB_GC_GUARD(q);
    CHECK(a.rc);
    return LL2NUM(a.n);
}

/* ---- streams and notifications ----------------------------------------- */

static VALUE msgs_to_ary(tocsin_message *m, size_t n) {
    VALUE out = rb_ary_new_capa((long)n);
    for (size_t i = 0; i < n; i++) {
        VALUE e = rb_ary_new_capa(6);
        rb_ary_push(e, LL2NUM(m[i].id));
        rb_ary_push(e, str_or_nil(m[i].name));
        rb_ary_push(e, str_or_nil(m[i].key));
        rb_ary_push(e, str_or_nil(m[i].payload));
        rb_ary_push(e, str_or_nil(m[i].meta));
        rb_ary_push(e, LL2NUM(m[i].created_at));
        rb_ary_push(out, e);
    }
    tocsin_messages_free(m, n);
    return out;
}

DEF_CALL(pub, tocsin_db *db; int64_t off; const char *t; const char *p; const char *k; const char *m;,
         tocsin_stream_publish(a->db, &a->off, a->t, a->p, a->k, a->m))
static VALUE db_publish(VALUE self, VALUE topic, VALUE payload, VALUE key, VALUE meta) {
    struct pub_a a = {0, DB(self), 0, cstr(topic), cstr(payload), cstr_or_null(key), cstr_or_null(meta)};
    NOGVL_DB(pub, a, self);
    RB_GC_GUARD(topic); RB_GC_GUARD(payload); RB_GC_GUARD(key); RB_GC_GUARD(meta);
    CHECK(a.rc);
    return LL2NUM(a.off);
}
DEF_CALL(pubm, tocsin_db *db; int64_t *offs; const char *t; const char **ps; const char **ks; size_t n;,
         tocsin_stream_publish_many(a->db, a->offs, a->t, a->ps, a->ks, a->n))
static VALUE db_publish_many(VALUE self, VALUE topic, VALUE payloads, VALUE keys) {
    VALUE k1, k2 = Qnil;
    struct pubm_a a = {0};
    a.db = DB(self);
    a.t = cstr(topic);
    a.ps = names_of(payloads, &k1, &a.n);
    if (!NIL_P(keys)) {
        Check_Type(keys, T_ARRAY);
        if ((size_t)RARRAY_LEN(keys) != a.n) rb_raise(eByCode[TOCSIN_INVALID], "publish_many: %ld keys for %zu payloads (give one key per payload, or none)", RARRAY_LEN(keys), a.n);
        k2 = rb_str_new(NULL, (long)sizeof(char *) * (a.n ? a.n : 1));
        a.ks = (const char **)RSTRING_PTR(k2);
        for (size_t i = 0; i < a.n; i++) a.ks[i] = cstr_or_null(rb_ary_entry(keys, (long)i));
    }
    VALUE b = rb_str_new(NULL, (long)sizeof(int64_t) * (a.n ? a.n : 1));
    a.offs = (int64_t *)RSTRING_PTR(b);
    NOGVL_DB(pubm, a, self);
    RB_GC_GUARD(k1); RB_GC_GUARD(k2); RB_GC_GUARD(b); RB_GC_GUARD(payloads); RB_GC_GUARD(keys); RB_GC_GUARD(topic);
    CHECK(a.rc);
    VALUE out = rb_ary_new_capa((long)a.n);
    for (size_t i = 0; i < a.n; i++) rb_ary_push(out, LL2NUM(a.offs[i]));
    return out;
}
DEF_CALL(sread, tocsin_db *db; tocsin_message *m; size_t n; const char *t; int64_t after; size_t lim; int notify;,
         a->notify ? tocsin_notify_read(a->db, &a->m, &a->n, a->t, a->after, a->lim)
                   : tocsin_stream_read(a->db, &a->m, &a->n, a->t, a->after, a->lim))
static VALUE read_msgs(VALUE self, VALUE name, VALUE after, VALUE limit, int notify) {
    struct sread_a a = {0, DB(self), NULL, 0, cstr(name), arg_i64(after, "after"), arg_count(limit, "limit"), notify};
    NOGVL_DB(sread, a, self);
    RB_GC_GUARD(name);
    CHECK(a.rc);
    return msgs_to_ary(a.m, a.n);
}
static VALUE db_stream_read(VALUE self, VALUE t, VALUE after, VALUE lim) { return read_msgs(self, t, after, lim, 0); }
static VALUE db_notify_read(VALUE self, VALUE c, VALUE after, VALUE lim) { return read_msgs(self, c, after, lim, 1); }

DEF_CALL(soff, tocsin_db *db; int64_t out; const char *c; const char *t; int64_t off; int save;,
         a->save ? tocsin_stream_save_offset(a->db, &a->out, a->c, a->t, a->off)
                 : tocsin_stream_offset(a->db, &a->out, a->c, a->t))
static VALUE db_save_offset(VALUE self, VALUE c, VALUE t, VALUE off) {
    struct soff_a a = {0, DB(self), 0, cstr(c), cstr(t), arg_int(off, "offset", 0, INT64_MAX, 0), 1};
    NOGVL_DB(soff, a, self);
    RB_GC_GUARD(c); RB_GC_GUARD(t);
    CHECK(a.rc);
    return LL2NUM(a.out);
}
static VALUE db_stream_offset(VALUE self, VALUE c, VALUE t) {
    struct soff_a a = {0, DB(self), 0, cstr(c), cstr(t), 0, 0};
    NOGVL_DB(soff, a, self);
    RB_GC_GUARD(c); RB_GC_GUARD(t);
    CHECK(a.rc);
    return LL2NUM(a.out);
}
DEF_CALL(trim, tocsin_db *db; int64_t n; const char *t; tocsin_trim_opts o;, tocsin_stream_trim(a->db, &a->n, a->t, &a->o))
static VALUE db_stream_trim(VALUE self, VALUE t, VALUE age, VALUE count, VALUE below) {
    tocsin_trim_opts o = TOCSIN_TRIM_OPTS_INIT;
    o.max_age_ms = opt_i64(age, "max_age", 0);
    o.max_count = opt_range(count, "max_count", 0, INT64_MAX, 0);
    o.below_consumers = RTEST(below);
    struct trim_a a = {0, DB(self), 0, cstr(t), o};
    NOGVL_DB(trim, a, self);
    RB_GC_GUARD(t);
    CHECK(a.rc);
    return LL2NUM(a.n);
}

DEF_CALL(notify, tocsin_db *db; int64_t id; const char *c; const char *p; const char *m;,
         tocsin_notify(a->db, &a->id, a->c, a->p, a->m))
static VALUE db_notify(VALUE self, VALUE c, VALUE p, VALUE m) {
    struct notify_a a = {0, DB(self), 0, cstr(c), cstr(p), cstr_or_null(m)};
    NOGVL_DB(notify, a, self);
    RB_GC_GUARD(c); RB_GC_GUARD(p); RB_GC_GUARD(m);
    CHECK(a.rc);
    return LL2NUM(a.id);
}
DEF_CALL(nmax, tocsin_db *db; int64_t id;, tocsin_notify_max_id(a->db, &a->id))
static VALUE db_notify_max_id(VALUE self) {
    struct nmax_a a = {0, DB(self), 0};
    NOGVL_DB(nmax, a, self);
    CHECK(a.rc);
    return LL2NUM(a.id);
}
DEF_CALL(nprune, tocsin_db *db; int64_t n; int64_t age; int64_t keep;, tocsin_notify_prune(a->db, &a->n, a->age, a->keep))
static VALUE db_notify_prune(VALUE self, VALUE age, VALUE keep) {
    struct nprune_a a = {0, DB(self), 0, opt_i64(age, "notifications_max_age", 0),
                           opt_range(keep, "notifications_keep", 0, INT64_MAX, 0)};
    NOGVL_DB(nprune, a, self);
    CHECK(a.rc);
    return LL2NUM(a.n);
}
DEF_CALL(ntrim, tocsin_db *db; int64_t age; int64_t keep; int64_t one_in;,
         tocsin_notify_set_autotrim(a->db, a->age, a->keep, a->one_in))
static VALUE db_notify_autotrim(VALUE self, VALUE age, VALUE keep, VALUE one_in) {
    struct ntrim_a a = {0, DB(self), opt_i64(age, "max_age", 0), opt_range(keep, "max_keep", 0, INT64_MAX, 0),
                          opt_range(one_in, "one_in", 0, INT64_MAX, 0)};
    NOGVL_DB(ntrim, a, self);
    CHECK(a.rc);
    return Qnil;
}

/* ---- results ----------------------------------------------------------- */

static VALUE result_to_ary(tocsin_result *r) {
    if (!r) return Qnil;
    VALUE a = rb_ary_new_capa(8);
    rb_ary_push(a, LL2NUM(r->job_id));
    rb_ary_push(a, r->is_error ? Qtrue : Qfalse);
    rb_ary_push(a, str_or_nil(r->value));
    rb_ary_push(a, str_or_nil(r->error_type));
    rb_ary_push(a, str_or_nil(r->error_message));
    rb_ary_push(a, LL2NUM(r->created_at));
    rb_ary_push(a, LL2NUM(r->expires_at));
    rb_ary_push(a, str_or_nil(r->error_trace));
    tocsin_result_free(r);
    return a;
}
DEF_CALL(rsave, tocsin_db *db; int64_t id; const char *v; int64_t ttl;, tocsin_result_save(a->db, a->id, a->v, a->ttl))
static VALUE db_result_save(VALUE self, VALUE id, VALUE v, VALUE ttl) {
    struct rsave_a a = {0, DB(self), arg_i64(id, "job id"), cstr(v), opt_i64(ttl, "ttl", 0)};
    NOGVL_DB(rsave, a, self);
    RB_GC_GUARD(v);
    CHECK(a.rc);
    return Qnil;
}
DEF_CALL(rerr, tocsin_db *db; int64_t id; const char *t; const char *m; int64_t ttl;,
         tocsin_result_save_error(a->db, a->id, a->t, a->m, a->ttl))
static VALUE db_result_save_error(VALUE self, VALUE id, VALUE t, VALUE m, VALUE ttl) {
    struct rerr_a a = {0, DB(self), arg_i64(id, "job id"), cstr(t), cstr_or_null(m), opt_i64(ttl, "ttl", 0)};
    NOGVL_DB(rerr, a, self);
    RB_GC_GUARD(t); RB_GC_GUARD(m);
    CHECK(a.rc);
    return Qnil;
}
DEF_CALL(rget, tocsin_db *db; tocsin_result *r; int64_t id; int check;,
         a->check ? tocsin_result_check(a->db, &a->r, a->id) : tocsin_result_get(a->db, &a->r, a->id))
static VALUE db_result_get(VALUE self, VALUE id) {
    struct rget_a a = {0, DB(self), NULL, arg_i64(id, "job id"), 0};
    NOGVL_DB(rget, a, self);
    CHECK(a.rc);
    return result_to_ary(a.r);
}
static VALUE db_result_check(VALUE self, VALUE id) {
    struct rget_a a = {0, DB(self), NULL, arg_i64(id, "job id"), 1};
    NOGVL_DB(rget, a, self);
    CHECK(a.rc);
    return result_to_ary(a.r);
}
DEF_CALL(rdel, tocsin_db *db; int ok; int64_t id;, tocsin_result_delete(a->db, &a->ok, a->id))
static VALUE db_result_delete(VALUE self, VALUE id) {
    struct rdel_a a = {0, DB(self), 0, arg_i64(id, "job id")};
    NOGVL_DB(rdel, a, self);
    CHECK(a.rc);
    return a.ok ? Qtrue : Qfalse;
}
DEF_CALL(sweep, tocsin_db *db; int64_t n; int which;,
         a->which == 0 ? tocsin_result_sweep(a->db, &a->n) : tocsin_ratelimit_sweep(a->db, &a->n))
static VALUE db_result_sweep(VALUE self) {
    struct sweep_a a = {0, DB(self), 0, 0};
    NOGVL_DB(sweep, a, self);
    CHECK(a.rc);
    return LL2NUM(a.n);
}
static VALUE db_ratelimit_sweep(VALUE self) {
    struct sweep_a a = {0, DB(self), 0, 1};
    NOGVL_DB(sweep, a, self);
    CHECK(a.rc);
    return LL2NUM(a.n);
}
DEF_CALL(complete, tocsin_db *db; int ok; int64_t id; int64_t tok; const char *v; int64_t ttl;,
         tocsin_job_complete(a->db, &a->ok, a->id, a->tok, a->v, a->ttl))
static VALUE db_job_complete(VALUE self, VALUE id, VALUE tok, VALUE v, VALUE ttl) {
    struct complete_a a = {0, DB(self), 0, arg_i64(id, "job id"), arg_i64(tok, "token"), cstr(v), opt_i64(ttl, "ttl", 0)};
    NOGVL_DB(complete, a, self);
    RB_GC_GUARD(v);
    CHECK(a.rc);
    return a.ok ? Qtrue : Qfalse;
}
DEF_CALL(failtask, tocsin_db *db; int ok; int64_t id; int64_t tok; const char *t; const char *m; int64_t ttl;,
         tocsin_job_fail_task(a->db, &a->ok, a->id, a->tok, a->t, a->m, a->ttl))
static VALUE db_job_fail_task(VALUE self, VALUE id, VALUE tok, VALUE t, VALUE m, VALUE ttl) {
    struct failtask_a a = {0, DB(self), 0, arg_i64(id, "job id"), arg_i64(tok, "token"), cstr(t), cstr_or_null(m),
                             opt_i64(ttl, "ttl", 0)};
    NOGVL_DB(failtask, a, self);
    RB_GC_GUARD(t); RB_GC_GUARD(m);
    CHECK(a.rc);
    return a.ok ? Qtrue : Qfalse;
}

/* ---- locks and rate limits --------------------------------------------- */

DEF_CALL(lacq, tocsin_db *db; int64_t tok; int64_t until; const char *n; const char *o; int64_t ttl;,
         tocsin_lock_acquire(a->db, &a->tok, &a->until, a->n, a->o, a->ttl))
static VALUE db_lock_acquire(VALUE self, VALUE name, VALUE owner, VALUE ttl) {
    struct lacq_a a = {0, DB(self), 0, 0, cstr(name), cstr(owner), arg_i64(ttl, "ttl")};
    NOGVL_DB(lacq, a, self);
    RB_GC_GUARD(name); RB_GC_GUARD(owner);
    CHECK(a.rc);
    return rb_ary_new_from_args(2, LL2NUM(a.tok), LL2NUM(a.until));
}
DEF_CALL(lren, tocsin_db *db; int ok; const char *n; const char *o; int64_t tok; int64_t ttl; int rel;,
         a->rel ? tocsin_lock_release(a->db, &a->ok, a->n, a->o, a->tok)
                : tocsin_lock_renew(a->db, &a->ok, a->n, a->o, a->tok, a->ttl))
static VALUE db_lock_renew(VALUE self, VALUE name, VALUE owner, VALUE tok, VALUE ttl) {
    struct lren_a a = {0, DB(self), 0, cstr(name), cstr(owner), arg_i64(tok, "token"), arg_i64(ttl, "ttl"), 0};
    NOGVL_DB(lren, a, self);
    RB_GC_GUARD(name); RB_GC_GUARD(owner);
    CHECK(a.rc);
    return a.ok ? Qtrue : Qfalse;
}
static VALUE db_lock_release(VALUE self, VALUE name, VALUE owner, VALUE tok) {
    struct lren_a a = {0, DB(self), 0, cstr(name), cstr(owner), arg_i64(tok, "token"), 0, 1};
    NOGVL_DB(lren, a, self);
    RB_GC_GUARD(name); RB_GC_GUARD(owner);
    CHECK(a.rc);
    return a.ok ? Qtrue : Qfalse;
}
DEF_CALL(lhold, tocsin_db *db; char *owner; int64_t tok; int64_t until; const char *n;,
         tocsin_lock_holder(a->db, &a->owner, &a->tok, &a->until, a->n))
static VALUE db_lock_holder(VALUE self, VALUE name) {
    struct lhold_a a = {0, DB(self), NULL, 0, 0, cstr(name)};
    NOGVL_DB(lhold, a, self);
    RB_GC_GUARD(name);
    CHECK(a.rc);
    VALUE o = str_or_nil(a.owner);
    tocsin_free(a.owner);
    return rb_ary_new_from_args(3, o, LL2NUM(a.tok), LL2NUM(a.until));
}
DEF_CALL(rl, tocsin_db *db; int allowed; int64_t retry; int64_t rem; const char *n; int64_t lim; int64_t per;,
         tocsin_ratelimit_try(a->db, &a->allowed, &a->retry, &a->rem, a->n, a->lim, a->per))
static VALUE db_ratelimit_try(VALUE self, VALUE name, VALUE lim, VALUE per) {
    struct rl_a a = {0, DB(self), 0, 0, 0, cstr(name), arg_i64(lim, "limit"), arg_i64(per, "per")};
    NOGVL_DB(rl, a, self);
    RB_GC_GUARD(name);
    CHECK(a.rc);
    return rb_ary_new_from_args(3, a.allowed ? Qtrue : Qfalse, LL2NUM(a.retry), LL2NUM(a.rem));
}
DEF_CALL(rlreset, tocsin_db *db; int64_t n; const char *name;, tocsin_ratelimit_reset(a->db, &a->n, a->name))
static VALUE db_ratelimit_reset(VALUE self, VALUE name) {
    struct rlreset_a a = {0, DB(self), 0, cstr(name)};
    NOGVL_DB(rlreset, a, self);
    RB_GC_GUARD(name);
    CHECK(a.rc);
    return LL2NUM(a.n);
}

/* ---- scheduler --------------------------------------------------------- */

/* opts hash keys -> tocsin_schedule_opts (fields flags for the keys present) */
static void fill_schedule_opts(tocsin_schedule_opts *o, VALUE h, VALUE keep) {
    tocsin_schedule_opts d = TOCSIN_SCHEDULE_OPTS_INIT;
    *o = d;
    if (NIL_P(h)) return;
    Check_Type(h, T_HASH);
    VALUE v;
#define SOPT(key, flag, stmt) \
    if (RTEST(rb_funcall(h, rb_intern("key?"), 1, ID2SYM(rb_intern(key))))) { \
        v = rb_hash_aref(h, ID2SYM(rb_intern(key))); o->fields |= flag; stmt; }
    /* the ints bounded here with the core's numbers (0: the default) */
    SOPT("priority", TOCSIN_SCHEDULE_PRIORITY, o->priority = opt_i64(v, "priority", 0))
    SOPT("max_attempts", TOCSIN_SCHEDULE_MAX_ATTEMPTS,
         o->max_attempts = (int)opt_range(v, "max_attempts", 0, TOCSIN_MAX_ATTEMPTS, 0))
    SOPT("job_expires_ms", TOCSIN_SCHEDULE_JOB_EXPIRES, o->job_expires_ms = opt_i64(v, "job_expires", 0))
    SOPT("catch_up", TOCSIN_SCHEDULE_CATCH_UP, o->catch_up = NIL_P(v) ? 0 : arg_cint(v, "catch_up"))
    SOPT("max_catch_up", TOCSIN_SCHEDULE_MAX_CATCH_UP,
         o->max_catch_up = (int)opt_range(v, "max_catch_up", 0, TOCSIN_MAX_CATCH_UP, 0))
    SOPT("local_time", TOCSIN_SCHEDULE_LOCAL_TIME, o->local_time = RTEST(v))
    SOPT("meta", TOCSIN_SCHEDULE_META, { rb_ary_push(keep, v); o->meta = cstr_or_null(v); })
#undef SOPT
}
DEF_CALL(sset, tocsin_db *db; int64_t next; const char *n; const char *c; const char *q; const char *p;
         tocsin_schedule_opts o; int update; int has_opts;,
         a->update ? tocsin_schedule_update(a->db, &a->next, a->n, a->c, a->q, a->p, a->has_opts ? &a->o : NULL)
                   : tocsin_schedule_set(a->db, &a->next, a->n, a->c, a->q, a->p, &a->o))
static VALUE db_schedule_set(VALUE self, VALUE name, VALUE cron, VALUE queue, VALUE payload, VALUE opts) {
    VALUE keep = rb_ary_new();
    struct sset_a a = {0};
    a.db = DB(self);
    a.n = cstr(name); a.c = cstr(cron); a.q = cstr(queue); a.p = cstr(payload);
    fill_schedule_opts(&a.o, opts, keep);
    NOGVL_DB(sset, a, self);
    RB_GC_GUARD(keep); RB_GC_GUARD(name); RB_GC_GUARD(cron); RB_GC_GUARD(queue); RB_GC_GUARD(payload);
    CHECK(a.rc);
    return a.next < 0 ? Qnil : LL2NUM(a.next);
}
static VALUE db_schedule_update(VALUE self, VALUE name, VALUE cron, VALUE queue, VALUE payload, VALUE opts) {
    VALUE keep = rb_ary_new();
    struct sset_a a = {0};
    a.db = DB(self);
    a.update = 1;
    a.n = cstr(name); a.c = cstr_or_null(cron); a.q = cstr_or_null(queue); a.p = cstr_or_null(payload);
    fill_schedule_opts(&a.o, opts, keep);
    a.has_opts = !NIL_P(opts);
    NOGVL_DB(sset, a, self);
    RB_GC_GUARD(keep); RB_GC_GUARD(name); RB_GC_GUARD(cron); RB_GC_GUARD(queue); RB_GC_GUARD(payload);
    CHECK(a.rc);
    return a.next < 0 ? Qnil : LL2NUM(a.next);
}
DEF_CALL(sop, tocsin_db *db; int ok; const char *n; int which;,
         a->which == 0 ? tocsin_schedule_pause(a->db, a->n)
         : a->which == 1 ? tocsin_schedule_resume(a->db, a->n)
         : tocsin_schedule_remove(a->db, &a->ok, a->n))
static VALUE sched_op(VALUE self, VALUE name, int which) {
    struct sop_a a = {0, DB(self), 0, cstr(name), which};
    NOGVL_DB(sop, a, self);
    RB_GC_GUARD(name);
    CHECK(a.rc);
    return which == 2 ? (a.ok ? Qtrue : Qfalse) : Qnil;
}
static VALUE db_schedule_pause(VALUE self, VALUE n) { return sched_op(self, n, 0); }
static VALUE db_schedule_resume(VALUE self, VALUE n) { return sched_op(self, n, 1); }
static VALUE db_schedule_remove(VALUE self, VALUE n) { return sched_op(self, n, 2); }

static VALUE schedule_to_hash(const tocsin_schedule *s) {
    VALUE h = rb_hash_new();
#define SET(k, v) rb_hash_aset(h, ID2SYM(rb_intern(k)), v)
    SET("name", str_or_nil(s->name)); SET("cron", str_or_nil(s->cron)); SET("queue", str_or_nil(s->queue));
    SET("payload", str_or_nil(s->payload)); SET("meta", str_or_nil(s->meta));
    SET("priority", LL2NUM(s->priority)); SET("max_attempts", INT2NUM(s->max_attempts));
    SET("job_expires_ms", LL2NUM(s->job_expires_ms)); SET("catch_up", INT2NUM(s->catch_up));
    SET("max_catch_up", INT2NUM(s->max_catch_up)); SET("local_time", s->local_time ? Qtrue : Qfalse);
    SET("paused", s->paused ? Qtrue : Qfalse);
    SET("next_fire", s->next_fire < 0 ? Qnil : LL2NUM(s->next_fire));
    SET("last_fire", s->last_fire ? LL2NUM(s->last_fire) : Qnil);
    SET("last_job_id", s->last_job_id ? LL2NUM(s->last_job_id) : Qnil);
    SET("fired_count", LL2NUM(s->fired_count)); SET("skipped_count", LL2NUM(s->skipped_count));
    SET("created_at", LL2NUM(s->created_at)); SET("updated_at", LL2NUM(s->updated_at));
#undef SET
    return h;
}
DEF_CALL(sget, tocsin_db *db; tocsin_schedule *s; size_t n; const char *name;,
         a->name ? tocsin_schedule_get(a->db, &a->s, a->name) : tocsin_schedule_list(a->db, &a->s, &a->n))
static VALUE db_schedule_get(VALUE self, VALUE name) {
    struct sget_a a = {0, DB(self), NULL, 0, cstr(name)};
    NOGVL_DB(sget, a, self);
    RB_GC_GUARD(name);
    CHECK(a.rc);
    if (!a.s) return Qnil;
    VALUE h = schedule_to_hash(a.s);
    tocsin_schedules_free(a.s, 1);
    return h;
}
static VALUE db_schedule_list(VALUE self) {
    struct sget_a a = {0, DB(self), NULL, 0, NULL};
    NOGVL_DB(sget, a, self);
    CHECK(a.rc);
    VALUE out = rb_ary_new();
    for (size_t i = 0; i < a.n; i++) rb_ary_push(out, schedule_to_hash(&a.s[i]));
    tocsin_schedules_free(a.s, a.n);
    return out;
}
DEF_CALL(stick, tocsin_db *db; int64_t n; int which;,
         a->which == 0 ? tocsin_scheduler_tick(a->db, &a->n) : tocsin_scheduler_next_fire(a->db, &a->n))
static VALUE db_scheduler_tick(VALUE self) {
    struct stick_a a = {0, DB(self), 0, 0};
    NOGVL_DB(stick, a, self);
    CHECK(a.rc);
    return LL2NUM(a.n);
}
static VALUE db_scheduler_next_fire(VALUE self) {
    struct stick_a a = {0, DB(self), 0, 1};
    NOGVL_DB(stick, a, self);
    CHECK(a.rc);
    return a.n < 0 ? Qnil : LL2NUM(a.n);
}
DEF_CALL(slead, tocsin_db *db; int lead; int64_t tok; const char *o; int64_t ttl; int resign;,
         a->resign ? tocsin_scheduler_resign(a->db, &a->lead, a->o)
                   : tocsin_scheduler_lead(a->db, &a->lead, &a->tok, a->o, a->ttl))
static VALUE db_scheduler_lead(VALUE self, VALUE owner, VALUE ttl) {
    struct slead_a a = {0, DB(self), 0, 0, cstr(owner), arg_i64(ttl, "ttl"), 0};
    NOGVL_DB(slead, a, self);
    RB_GC_GUARD(owner);
    CHECK(a.rc);
    return rb_ary_new_from_args(2, a.lead ? Qtrue : Qfalse, LL2NUM(a.tok));
}
static VALUE db_scheduler_resign(VALUE self, VALUE owner) {
    struct slead_a a = {0, DB(self), 0, 0, cstr(owner), 0, 1};
    NOGVL_DB(slead, a, self);
    RB_GC_GUARD(owner);
    CHECK(a.rc);
    return a.lead ? Qtrue : Qfalse;
}

static VALUE m_cron_next(VALUE mod, VALUE expr, VALUE after, VALUE local) {
    tocsin_cron *c = NULL;
    char err[256] = "";
    int rc = tocsin_cron_parse(&c, cstr(expr), err, sizeof err);
    if (rc != TOCSIN_OK && err[0]) rb_raise(error_class(rc), "cron: %s", err); /* the parser's own words */
    if (rc != TOCSIN_OK) raise_rc(rc);
    int64_t next = -1;
    rc = tocsin_cron_next(&next, c, arg_i64(after, "after"), RTEST(local));
    tocsin_cron_free(c);
    if (rc == TOCSIN_NOTFOUND) return Qnil;
    CHECK(rc);
    return LL2NUM(next);
}

/* ---- tasks ------------------------------------------------------------- */

static void fill_call(tocsin_task_call *c, VALUE task, VALUE args, VALUE kwargs, VALUE ttl, VALUE timeout) {
    tocsin_task_call d = TOCSIN_TASK_CALL_INIT;
    *c = d;
    c->task = cstr(task);
    c->args = cstr_or_null(args);
    c->kwargs = cstr_or_null(kwargs);
    c->result_ttl_ms = opt_i64(ttl, "result_ttl", 0);
    c->timeout_ms = opt_i64(timeout, "timeout", 0);
}
DEF_CALL(tenv, tocsin_db *db; char *json; tocsin_task_call c;, tocsin_task_envelope(a->db, &a->json, &a->c))
static VALUE db_task_envelope(VALUE self, VALUE task, VALUE args, VALUE kwargs, VALUE ttl, VALUE timeout) {
    struct tenv_a a = {0};
    a.db = DB(self);
    fill_call(&a.c, task, args, kwargs, ttl, timeout);
    NOGVL_DB(tenv, a, self);
    RB_GC_GUARD(task); RB_GC_GUARD(args); RB_GC_GUARD(kwargs);
    CHECK(a.rc);
    VALUE s = str_or_nil(a.json);
    tocsin_free(a.json);
    return s;
}
DEF_CALL(tenq, tocsin_db *db; int64_t id; const char *q; tocsin_task_call c; tocsin_enqueue_opts o;,
         tocsin_task_enqueue(a->db, &a->id, a->q, &a->c, &a->o))
/* task_enqueue(queue, task, args_json, kwargs_json, result_ttl_ms, timeout_ms, enqueue_opts) */
static VALUE db_task_enqueue(int argc, VALUE *argv, VALUE self) {
    if (argc != 7) rb_raise(rb_eArgError, "task_enqueue: 7 arguments expected");
    struct tenq_a a = {0};
    a.db = DB(self);
    a.q = cstr(argv[0]);
    fill_call(&a.c, argv[1], argv[2], argv[3], argv[4], argv[5]);
    fill_enqueue_opts(&a.o, argv[6]);
    NOGVL_DB(tenq, a, self);
    for (int i = 0; i < 7; i++) RB_GC_GUARD(argv[i]);
    CHECK(a.rc);
    return LL2NUM(a.id);
}

/* ==== waits ================================================================
 * A wait runs without the GVL. Ruby's unblock function pokes it (the call
 * returns TOCSIN_INTERRUPTED); the pending interrupt (Thread#raise, #kill,
 * Timeout, a signal's trap) then runs in rb_thread_check_ints(). When that
 * returns (a trap handler that did not raise), the wait resumes with the time
 * left. A poke through #poke from Ruby raises Tocsin::Interrupted.
 *
 * Signals. Ruby runs trap handlers on the main thread. Its C signal handler
 * only marks the main thread; the unblock function of a main thread that is
 * in a blocking region is called by whichever thread notices the signal: a
 * thread sleeping in Ruby (sleep, Queue#pop, IO waits: it watches the signal
 * descriptor), or one waiting for the GVL. Ruby 3.1 starts a helper thread
 * of its own for that only when the main thread is the only thread. So a
 * main thread waiting here while every other thread runs Ruby code, waits in
 * tocsin (or another extension) or has exited -- as when a thread sends
 * Process.kill(:USR1, Process.pid) and ends -- kept the trap until the wait
 * ended. Hence:
 *  - the unblock function is async-signal-safe (atomic stores and the
 *    core's poke: an atomic flag and a write(2) to an eventfd or pipe), and
 *    says so (RB_NOGVL_UBF_ASYNC_SAFE): alone, the main thread is unblocked
 *    from the signal handler itself, without Ruby's helper thread per wait;
 *  - with other threads, a wait of the main thread runs beside a helper that
 *    sleeps in Ruby (Thread "tocsin-signals", as Ruby's own helper does, in
 *    slices of 50 ms), so that a signal unblocks the wait at once -- within
 *    a slice when another thread held the signal descriptor -- whatever the
 *    other threads do; it is killed when the wait returns or raises.
 * The trap runs, then the wait resumes: what Ruby's own sleep does. */

/* The helper: started for a wait of the main thread when other threads live.
 * It sleeps in slices: a Ruby sleep watches the signal descriptor only when
 * it was free as the sleep began (another sleeping thread may hold it, and
 * hands it over to no one when it wakes), so each slice takes it anew. */
#define TC_SIGWATCH_SLICE_US 50000
static VALUE sigwatch_sleep(void *unused) {
    for (;;) {
        struct timeval tv = {0, TC_SIGWATCH_SLICE_US};
        rb_thread_wait_for(tv);
    }
    return Qnil;
}
static VALUE sigwatch_start(void) {
    if (rb_thread_current() != rb_thread_main() || rb_thread_alone()) return Qnil;
    VALUE th = rb_thread_create(sigwatch_sleep, NULL);
    rb_funcall(th, rb_intern("name="), 1, rb_str_new_cstr("tocsin-signals"));
    return th;
}
static void sigwatch_stop(VALUE th) {
    if (NIL_P(th)) return;
    rb_funcall(th, rb_intern("kill"), 0);
    rb_funcall(th, rb_intern("join"), 0);
}

typedef int (*wait_fn)(void *ctx, int timeout_ms);
typedef int (*poke_fn)(void *handle);

typedef struct {
    _Atomic int ubf_fired;
    _Atomic int user_poked;
} pokeflags;

/* ---- one thread at a time on a waited-on object -------------------------
 * A Sub, Listener, StreamSub or Worker wraps a core object that one thread
 * at a time may use (the core's rule), and that is freed by its close --
 * which may come from any thread (Database#close) or from a trap run inside
 * the wait itself. A close that freed the object while another thread used
 * it without the GVL (a wait about to start, or running: the core's own
 * count of waiters is taken only once the wait has begun) was a
 * use-after-free. So each object has a guard, kept under the GVL:
 *  - a use (a wait, a save, a drain ...) takes it first: `owner` is the
 *    thread; a second thread waits for the first to end (the object is one
 *    thread's at a time; it raised nothing before, and raced in the core);
 *  - close takes the handle from the object (new uses raise Closed), pokes
 *    the use in progress (its wait returns TOCSIN_INTERRUPTED and finds the
 *    object closed: Tocsin::Closed), waits until it has ended -- out of the
 *    core, its unblock function unregistered -- and only then frees it.
 *    From inside the use itself (a trap, an interrupt handler of the
 *    waiting thread) it cannot wait: the use frees it as it ends;
 *  - an object inherited across fork() and in use by one of the parent's
 *    threads at the fork is left as it is (its core close would wait for
 *    that thread, forever): a child never frees what the parent used. */
typedef struct guard guard;
struct guard {
    VALUE owner;        /* the Thread using the object (Qfalse: none) */
    void *pending;      /* closed during that use: freed once the use ended */
    int closers;        /* threads in guard_close waiting for the use to end */
    unsigned gen;       /* fork_gen when opened */
    const char *what;   /* "listener", ...: in messages */
    poke_fn poke;
    int (*close)(guard *g, void *handle); /* the core's close (without the GVL) */
};

static void guard_init(guard *g, const char *what, poke_fn poke, int (*close)(guard *, void *)) {
    g->owner = Qfalse;
    g->pending = NULL;
    g->closers = 0;
    g->gen = cur_gen();
    g->what = what;
    g->poke = poke;
    g->close = close;
}
/* in use by a thread that is not in this process (the parent's, before fork()) */
static int guard_orphaned(const guard *g) {
    return g->owner != Qfalse && g->gen != cur_gen() && g->owner != rb_thread_current();
}
struct gclose_call { guard *g; void *handle; int rc; };
static void *gclose_f(void *p) {
    struct gclose_call *c = p;
    c->rc = c->g->close(c->g, c->handle);
    return NULL;
}
/* the core close, without the GVL when it can (it never raises) */
static int guard_free_now(guard *g, void *handle) {
    struct gclose_call c = {g, handle, TOCSIN_OK};
    nogvl_must(gclose_f, &c);
    return c.rc;
}
/* Takes the object for a use by this thread; `slot`: where the object keeps
 * its core handle (NULL once closed). */
static void guard_enter(guard *g, void *const *slot) {
    VALUE me = rb_thread_current();
    long us = 1000;
    for (;;) {
        if (!*slot) rb_raise(eByCode[TOCSIN_CLOSED], "the %s is closed", g->what);
        if (g->owner == Qfalse) break;
        if (guard_orphaned(g))
            rb_raise(eByCode[TOCSIN_CLOSED], "the %s was opened before fork(): open one in this process", g->what);
        if (g->owner == me)
            rb_raise(eByCode[TOCSIN_BUSY], "the %s is in use by this thread already (called from inside its own wait)",
                     g->what);
        /* another thread's use: after it (an unusual program: it waits its turn) */
        struct timeval tv = {0, us};
        rb_thread_wait_for(tv);
        if (us < 50000) us *= 2;
    }
    g->owner = me;
}
/* Ends the use (an ensure: never raises); frees the object when a close
 * came during it and no closer waits to do so itself. */
static void guard_leave(guard *g) {
    g->owner = Qfalse;
    if (g->pending && g->closers == 0) {
        void *h = g->pending;
        g->pending = NULL;
        guard_free_now(g, h);
    }
}
struct gclose_wait { guard *g; int rc; };
static VALUE gclose_wait_body(VALUE p) {
    struct gclose_wait *c = (struct gclose_wait *)p;
    while (c->g->owner != Qfalse) { /* the poked use ends within a few ms */
        struct timeval tv = {0, 1000};
        rb_thread_wait_for(tv);
    }
    return Qnil;
}
static VALUE gclose_wait_done(VALUE p) {
    struct gclose_wait *c = (struct gclose_wait *)p;
    guard *g = c->g;
    g->closers--;
    /* the use has ended (or this closer was interrupted while it had not:
     * then the use frees it as it ends) */
    if (g->owner == Qfalse && g->pending) {
        void *h = g->pending;
        g->pending = NULL;
        c->rc = guard_free_now(g, h);
    }
    return Qnil;
}
/* Closes the object: returns the core close's code (TOCSIN_OK when another
 * thread or the use in progress closes it). Returns once it is closed,
 * unless called from inside the use itself. */
static int guard_close(guard *g, void **slot) {
    void *h = *slot;
    VALUE me = rb_thread_current();
    if (h) {
        *slot = NULL;
        if (g->owner == Qfalse) return guard_free_now(g, h);
        if (guard_orphaned(g)) return TOCSIN_OK; /* the parent's: left as it is */
        g->poke(h);
        g->pending = h;
    }
    /* closed already: a close of another thread waiting for a use may still
     * run; this one returns once the object is closed too */
    if (!g->pending || g->owner == Qfalse || g->owner == me || guard_orphaned(g)) return TOCSIN_OK;
    struct gclose_wait c = {g, TOCSIN_OK};
    g->closers++;
    rb_ensure(gclose_wait_body, (VALUE)&c, gclose_wait_done, (VALUE)&c);
    return c.rc;
}
/* what a GC'd object still holds: nobody can use it any more -- unless one
 * of the parent's threads did at fork() (left as it is) */
static void guard_dfree(guard *g, void *h) {
    if (!h) h = g->pending;
    if (h && g->owner == Qfalse) g->close(g, h);
}

struct wait_call {
    wait_fn fn;
    void *ctx;
    int timeout_ms;
    int rc;
};
struct ubf_arg {
    poke_fn poke;
    void *handle;
    pokeflags *flags;
};
static void *wait_nogvl(void *p) {
    struct wait_call *w = p;
    w->rc = w->fn(w->ctx, w->timeout_ms);
    return NULL;
}
static void wait_ubf(void *p) {
    struct ubf_arg *u = p;
    atomic_store(&u->flags->ubf_fired, 1);
    u->poke(u->handle);
}
static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
/* Returns the wait's final code (OK, TIMEOUT or a failure to raise);
 * interrupts are handled here. */
/* h: the database handle the wait runs on (NULL: none); its close ends the
 * wait with Tocsin::Closed (Database#close pokes the wait's subscription).
 * g, slot: the waited-on object's guard and where it keeps its core handle
 * (NULL once closed): the wait is the object's use (guard_enter), and
 * *handle_out (in ctx) gets the handle once the use began. An interrupt's
 * handler (a trap, another thread switched in meanwhile) may close the
 * object while the wait is between two calls of the core: the wait then
 * raises Closed (the handle stays valid until the use ended). */
struct run_wait_a {
    wait_fn fn;
    void *ctx;
    int timeout_ms;
    pokeflags *flags;
    rdb *h;
    guard *g;
    void *const *slot;
    void *handle;
    VALUE watcher;
    int rc;
};
/* a wait without a database handle: as call_on_db, an interrupt pending before
 * the call is handled (it may raise), never one after it ran -- a batch the
 * core handed out is returned */
static void wait_call_nogvl(struct wait_call *w, struct ubf_arg *u) {
    w->rc = -1;
    for (;;) {
        rb_nogvl(wait_nogvl, w, wait_ubf, u, RB_NOGVL_INTR_FAIL | RB_NOGVL_UBF_ASYNC_SAFE);
        if (w->rc != -1) return;
        rb_thread_check_ints();
    }
}
static VALUE run_wait_body(VALUE p) {
    struct run_wait_a *r = (struct run_wait_a *)p;
    int timeout_ms = r->timeout_ms;
    int64_t deadline = timeout_ms >= 0 ? mono_ms() + timeout_ms : -1;
    struct ubf_arg u = {r->g->poke, r->handle, r->flags};
    r->watcher = sigwatch_start();
    for (;;) {
        struct wait_call w = {r->fn, r->ctx, timeout_ms, 0};
        if (*r->slot != r->handle) rb_raise(eByCode[TOCSIN_CLOSED], "the %s was closed while waiting", r->g->what);
        atomic_store(&r->flags->ubf_fired, 0);
        if (r->h) call_on_db(r->h, wait_nogvl, &w, wait_ubf, &u); /* counted (see call_on_db) */
        else wait_call_nogvl(&w, &u);
        if (w.rc != TOCSIN_INTERRUPTED) {
            r->rc = w.rc;
            return Qnil;
        }
        /* Ruby's own interrupt first (it may run a trap that pokes, even inside
         * rb_thread_call_without_gvl), then a poke through #poke; a poke left
         * over from an earlier wait only resumes the wait. */
        if (atomic_exchange(&r->flags->ubf_fired, 0)) rb_thread_check_ints();
        if (atomic_exchange(&r->flags->user_poked, 0))
            rb_raise(eByCode[TOCSIN_INTERRUPTED], "the wait was interrupted (poke)");
        if (*r->slot != r->handle) rb_raise(eByCode[TOCSIN_CLOSED], "the %s was closed while waiting", r->g->what);
        if (deadline >= 0) {
            int64_t left = deadline - mono_ms();
            timeout_ms = left > 0 ? (int)left : 0;
        }
    }
}
static VALUE run_wait_done(VALUE p) {
    struct run_wait_a *r = (struct run_wait_a *)p;
    guard_leave(r->g);
    sigwatch_stop(r->watcher);
    return Qnil;
}
static int run_wait(wait_fn fn, void *ctx, void **handle_out, int timeout_ms, pokeflags *flags, rdb *h, guard *g,
                    void *const *slot) {
    struct run_wait_a r = {fn, ctx, timeout_ms, flags, h, g, slot, NULL, Qnil, 0};
    guard_enter(g, slot);
    r.handle = *handle_out = *slot;
    /* from here on the use is released by the ensure (the helper's start runs Ruby code) */
    rb_ensure(run_wait_body, (VALUE)&r, run_wait_done, (VALUE)&r);
    RB_GC_GUARD(r.watcher);
    return r.rc;
}
static int clamp_timeout(VALUE t) {
    if (NIL_P(t)) return -1;
    int64_t v = arg_i64(t, "timeout");
    if (v < 0) return -1;
    return v > INT32_MAX ? INT32_MAX : (int)v;
}
/* a use of a guarded object around a call without the GVL (save, flush):
 * released whatever the call raises */
struct guarded_a { guard *g; void *(*fn)(void *); void *arg; };
static VALUE guarded_body(VALUE p) {
    struct guarded_a *a = (struct guarded_a *)p;
    nogvl_once(a->fn, a->arg);
    return Qnil;
}
static VALUE guarded_done(VALUE p) {
    guard_leave(((struct guarded_a *)p)->g);
    return Qnil;
}
static void guarded_nogvl(guard *g, void *(*fn)(void *), void *arg) {
    struct guarded_a a = {g, fn, arg};
    rb_ensure(guarded_body, (VALUE)&a, guarded_done, (VALUE)&a);
}

/* ---- Native::Sub ------------------------------------------------------- */
typedef struct {
    tocsin_sub *sub;
    pokeflags flags;
    guard g;
} rsub;
static int sub_poke_fn(void *h) { return tocsin_sub_poke(h); }
static int sub_close_fn(guard *g, void *h) { return tocsin_sub_close(h); }
static void rsub_free(void *p) { rsub *s = p; guard_dfree(&s->g, s->sub); xfree(s); }
static const rb_data_type_t rsub_type = {"tocsin_sub", {NULL, rsub_free, NULL}, NULL, NULL, RUBY_TYPED_FREE_IMMEDIATELY};
static rsub *rsub_of(VALUE self) {
    rsub *s;
    TypedData_Get_Struct(self, rsub, &rsub_type, s);
    return s;
}
static rsub *get_rsub(VALUE self) {
    rsub *s = rsub_of(self);
    if (!s->sub) rb_raise(eByCode[TOCSIN_CLOSED], "the subscription is closed");
    return s;
}
static VALUE sub_s_open(VALUE klass, VALUE db) {
    rsub *s;
    VALUE obj = TypedData_Make_Struct(klass, rsub, &rsub_type, s);
    guard_init(&s->g, "subscription", sub_poke_fn, sub_close_fn);
    CHECK(tocsin_sub_open(&s->sub, DB(db)));
    return obj;
}
static VALUE sub_fd(VALUE self) { return INT2NUM(tocsin_sub_fd(get_rsub(self)->sub)); }
static VALUE sub_drain(VALUE self) {
    rsub *s = rsub_of(self);
    int woken = 0;
    guard_enter(&s->g, (void *const *)&s->sub); /* (with the GVL throughout: nothing raises before the leave) */
    int rc = tocsin_sub_drain(s->sub, &woken);
    guard_leave(&s->g);
    if (rc == TOCSIN_INTERRUPTED && atomic_exchange(&s->flags.user_poked, 0))
        rb_raise(eByCode[TOCSIN_INTERRUPTED], "the wait was interrupted (poke)");
    if (rc == TOCSIN_INTERRUPTED) return Qfalse;
    CHECK(rc);
    return woken ? Qtrue : Qfalse;
}
struct swait_ctx { tocsin_sub *sub; };
static int sub_wait_fn(void *p, int t) { return tocsin_sub_wait(((struct swait_ctx *)p)->sub, t); }
static VALUE sub_wait(VALUE self, VALUE timeout) {
    rsub *s = rsub_of(self);
    int t = clamp_timeout(timeout);
    struct swait_ctx c = {NULL};
    int rc = run_wait(sub_wait_fn, &c, (void **)&c.sub, t, &s->flags, NULL, &s->g, (void *const *)&s->sub);
    if (rc == TOCSIN_TIMEOUT) return Qfalse;
    CHECK(rc);
    return Qtrue;
}
static VALUE sub_poke(VALUE self) {
    rsub *s = get_rsub(self);
    atomic_store(&s->flags.user_poked, 1);
    tocsin_sub_poke(s->sub);
    return Qnil;
}
/* wake: ends a wait on the subscription without raising Interrupted (its
 * loop then finds the database closing: Database#close) */
static VALUE sub_wake(VALUE self) {
    tocsin_sub_poke(get_rsub(self)->sub);
    return Qnil;
}
static VALUE sub_close(VALUE self) {
    rsub *s = rsub_of(self);
    guard_close(&s->g, (void **)&s->sub);
    return Qnil;
}

/* db waits on a sub: queue_wait, result_wait, lock_wait (deadline on the handle's clock);
 * the wait is the sub's use (see guard) */
struct qwait_ctx { tocsin_db *db; const char **qs; size_t n; int64_t deadline; tocsin_sub *sub; };
static int qwait_fn(void *p, int t) {
    struct qwait_ctx *c = p;
    return tocsin_queue_wait(c->db, c->qs, c->n, c->deadline, c->sub);
}
static VALUE db_queue_wait(VALUE self, VALUE queues, VALUE deadline, VALUE subv) {
    VALUE keep;
    rsub *s = rsub_of(subv);
    struct qwait_ctx c = {NULL, NULL, 0, opt_i64(deadline, "deadline", -1), NULL};
    c.qs = names_of(queues, &keep, &c.n);
    c.db = DB(self);
    int rc = run_wait(qwait_fn, &c, (void **)&c.sub, -1, &s->flags, get_rdb(self), &s->g, (void *const *)&s->sub);
    RB_GC_GUARD(keep); RB_GC_GUARD(queues); RB_GC_GUARD(subv);
    if (rc == TOCSIN_TIMEOUT) return Qfalse;
    CHECK(rc);
    return Qtrue;
}
struct rwait_ctx { tocsin_db *db; tocsin_result *r; int64_t id; int64_t deadline; tocsin_sub *sub; };
static int rwait_fn(void *p, int t) {
    struct rwait_ctx *c = p;
    return tocsin_result_wait(c->db, &c->r, c->id, c->deadline, c->sub);
}
/* result_wait(job_id, deadline_ms|nil, sub) -> result array; Tocsin::Timeout at the
 * deadline, saying what the job is doing (never claimed, running, retrying) */
static VALUE db_result_wait(VALUE self, VALUE id, VALUE deadline, VALUE subv) {
    rsub *s = rsub_of(subv);
    struct rwait_ctx c = {NULL, NULL, arg_i64(id, "job id"), opt_i64(deadline, "deadline", -1), NULL};
    c.db = DB(self);
    int rc = run_wait(rwait_fn, &c, (void **)&c.sub, -1, &s->flags, get_rdb(self), &s->g, (void *const *)&s->sub);
    RB_GC_GUARD(subv);
    CHECK(rc);
    return result_to_ary(c.r);
}
struct lwait_ctx { tocsin_db *db; int64_t tok, until; const char *n, *o; int64_t ttl, deadline; tocsin_sub *sub; };
static int lwait_fn(void *p, int t) {
    struct lwait_ctx *c = p;
    return tocsin_lock_wait(c->db, &c->tok, &c->until, c->n, c->o, c->ttl, c->deadline, c->sub);
}
/* lock_wait(name, owner, ttl_ms, deadline_ms|nil, sub) -> [token, until] or nil at the deadline */
static VALUE db_lock_wait(VALUE self, VALUE name, VALUE owner, VALUE ttl, VALUE deadline, VALUE subv) {
    rsub *s = rsub_of(subv);
    struct lwait_ctx c = {NULL, 0, 0, cstr(name), cstr(owner), arg_i64(ttl, "ttl"),
                          opt_i64(deadline, "deadline", -1), NULL};
    c.db = DB(self);
    int rc = run_wait(lwait_fn, &c, (void **)&c.sub, -1, &s->flags, get_rdb(self), &s->g, (void *const *)&s->sub);
    RB_GC_GUARD(name); RB_GC_GUARD(owner); RB_GC_GUARD(subv);
    if (rc == TOCSIN_TIMEOUT) return Qnil;
    CHECK(rc);
    return rb_ary_new_from_args(2, LL2NUM(c.tok), LL2NUM(c.until));
}

/* ---- Native::Listener -------------------------------------------------- */
typedef struct {
    tocsin_listener *l;
    pokeflags flags;
    guard g;
} rlis;
static int lis_poke_fn(void *h) { return tocsin_listen_poke(h); }
static int lis_close_fn(guard *g, void *h) { return tocsin_listen_close(h); }
static void rlis_free(void *p) { rlis *l = p; guard_dfree(&l->g, l->l); xfree(l); }
static const rb_data_type_t rlis_type = {"tocsin_listener", {NULL, rlis_free, NULL}, NULL, NULL, RUBY_TYPED_FREE_IMMEDIATELY};
static rlis *rlis_of(VALUE self) {
    rlis *l;
    TypedData_Get_Struct(self, rlis, &rlis_type, l);
    return l;
}
static rlis *get_rlis(VALUE self) {
    rlis *l = rlis_of(self);
    if (!l->l) rb_raise(eByCode[TOCSIN_CLOSED], "the listener is closed");
    return l;
}
DEF_CALL(lopen, tocsin_listener *l; tocsin_db *db; const char *c; size_t buf;, tocsin_listen_open(&a->l, a->db, a->c, a->buf))
static VALUE lis_s_open(VALUE klass, VALUE db, VALUE ch, VALUE buf) {
    rlis *l;
    VALUE obj = TypedData_Make_Struct(klass, rlis, &rlis_type, l);
    guard_init(&l->g, "listener", lis_poke_fn, lis_close_fn);
    struct lopen_a a = {0, NULL, NULL, cstr(ch), arg_count(buf, "buffer_size")};
    a.db = DB(db);
    NOGVL_DB(lopen, a, db);
    RB_GC_GUARD(ch);
    CHECK(a.rc);
    l->l = a.l;
    return obj;
}
static VALUE lis_fd(VALUE self) { return INT2NUM(tocsin_listen_fd(get_rlis(self)->l)); }
/* A listener's or stream subscription's next(timeout_ms|nil) -> array of messages ([] at
 * the timeout). Timeout 0 is the event loops' read: with the GVL throughout (a stream
 * subscription's autosave is a short write); a longer one waits without it. */
struct mnext_ctx { void *h; tocsin_message *m; size_t n; };
static VALUE msgs_next(wait_fn fn, VALUE timeout, pokeflags *flags, guard *g, void *const *slot) {
    struct mnext_ctx c = {NULL, NULL, 0};
    int t = clamp_timeout(timeout);
    int rc;
    if (t == 0) {
        guard_enter(g, slot);
        c.h = *slot;
        rc = fn(&c, 0);
        guard_leave(g);
        if (rc == TOCSIN_INTERRUPTED) {
            if (atomic_exchange(&flags->user_poked, 0)) raise_rc(rc);
            return rb_ary_new();
        }
    } else {
        rc = run_wait(fn, &c, &c.h, t, flags, NULL, g, slot);
    }
    if (rc == TOCSIN_TIMEOUT) return rb_ary_new();
    CHECK(rc);
    return msgs_to_ary(c.m, c.n);
}
static int lnext_fn(void *p, int t) { struct mnext_ctx *c = p; return tocsin_listen_next(c->h, &c->m, &c->n, t); }
static VALUE lis_next(VALUE self, VALUE timeout) {
    rlis *l = rlis_of(self);
    return msgs_next(lnext_fn, timeout, &l->flags, &l->g, (void *const *)&l->l);
}
static VALUE lis_dropped(VALUE self) { return LL2NUM(tocsin_listen_dropped(get_rlis(self)->l)); }
static VALUE lis_poke(VALUE self) {
    rlis *l = get_rlis(self);
    atomic_store(&l->flags.user_poked, 1);
    tocsin_listen_poke(l->l);
    return Qnil;
}
static VALUE lis_close(VALUE self) {
    rlis *l = rlis_of(self);
    guard_close(&l->g, (void **)&l->l);
    return Qnil;
}

/* ---- Native::StreamSub ------------------------------------------------- */
typedef struct {
    tocsin_stream_sub *s;
    pokeflags flags;
    guard g;
    VALUE db; /* kept alive: the subscription reads its clock (set_time's ctx is the rdb) */
} rss;
static int ss_poke_fn(void *h) { return tocsin_stream_sub_poke(h); }
static int ss_close_fn(guard *g, void *h) { return tocsin_stream_sub_close(h); }
static void rss_mark(void *p) { rb_gc_mark(((rss *)p)->db); }
static void rss_free(void *p) { rss *s = p; guard_dfree(&s->g, s->s); xfree(s); }
static const rb_data_type_t rss_type = {"tocsin_stream_sub", {rss_mark, rss_free, NULL}, NULL, NULL, RUBY_TYPED_FREE_IMMEDIATELY};
static rss *rss_of(VALUE self) {
    rss *s;
    TypedData_Get_Struct(self, rss, &rss_type, s);
    return s;
}
static rss *get_rss(VALUE self) {
    rss *s = rss_of(self);
    if (!s->s) rb_raise(eByCode[TOCSIN_CLOSED], "the stream subscription is closed");
    return s;
}
DEF_CALL(ssopen, tocsin_stream_sub *s; tocsin_db *db; const char *t; const char *c; tocsin_stream_sub_opts o;,
         tocsin_stream_sub_open(&a->s, a->db, a->t, a->c, &a->o))
/* open(db, topic, consumer|nil, from_offset|nil, batch, autosave_every, autosave_ms,
 *      save_on_close) */
static VALUE ss_s_open(VALUE klass, VALUE db, VALUE topic, VALUE consumer, VALUE from, VALUE batch,
                       VALUE every, VALUE ms, VALUE save_on_close) {
    rss *s;
    VALUE obj = TypedData_Make_Struct(klass, rss, &rss_type, s);
    guard_init(&s->g, "stream subscription", ss_poke_fn, ss_close_fn);
    s->db = db;
    struct ssopen_a a = {0};
    tocsin_stream_sub_opts o = TOCSIN_STREAM_SUB_OPTS_INIT;
    o.from_offset = opt_range(from, "from_offset", -1, INT64_MAX, -1);
    o.batch = NIL_P(batch) ? 0 : arg_count(batch, "batch");
    o.autosave_every = opt_range(every, "autosave_every", 0, INT64_MAX, 0);
    o.autosave_ms = opt_i64(ms, "autosave", 0);
    o.save_on_close = RTEST(save_on_close); /* the core saves at tocsin_stream_sub_close */
    a.t = cstr(topic);
    a.c = cstr_or_null(consumer);
    a.db = DB(db);
    a.o = o;
    NOGVL_DB(ssopen, a, db);
    RB_GC_GUARD(topic); RB_GC_GUARD(consumer);
    CHECK(a.rc);
    s->s = a.s;
    return obj;
}
static VALUE ss_fd(VALUE self) { return INT2NUM(tocsin_stream_sub_fd(get_rss(self)->s)); }
static int ssnext_fn(void *p, int t) { struct mnext_ctx *c = p; return tocsin_stream_sub_next(c->h, &c->m, &c->n, t); }
static VALUE ss_next(VALUE self, VALUE timeout) {
    rss *s = rss_of(self);
    return msgs_next(ssnext_fn, timeout, &s->flags, &s->g, (void *const *)&s->s);
}
static VALUE ss_position(VALUE self) { return LL2NUM(tocsin_stream_sub_position(get_rss(self)->s)); }
DEF_CALL(sssave, tocsin_stream_sub *s;, tocsin_stream_sub_save(a->s))
static VALUE ss_save(VALUE self) {
    rss *s = rss_of(self);
    guard_enter(&s->g, (void *const *)&s->s);
    struct sssave_a a = {0, s->s};
    guarded_nogvl(&s->g, sssave_f, &a); /* a close meanwhile waits for the save */
    CHECK(a.rc);
    return Qnil;
}
/* an iteration stopped mid-batch: the position goes back to the last event handed on */
static VALUE ss_rewind(VALUE self, VALUE offset) {
    rss *s = rss_of(self);
    int64_t off = arg_i64(offset, "offset");
    guard_enter(&s->g, (void *const *)&s->s);
    int rc = tocsin_stream_sub_rewind(s->s, off);
    guard_leave(&s->g);
    CHECK(rc);
    return Qnil;
}
static VALUE ss_poke(VALUE self) {
    rss *s = get_rss(self);
    atomic_store(&s->flags.user_poked, 1);
    tocsin_stream_sub_poke(s->s);
    return Qnil;
}
static VALUE ss_close(VALUE self) {
    rss *s = rss_of(self);
    CHECK(guard_close(&s->g, (void **)&s->s));
    return Qnil;
}

/* ==== JSON values ==========================================================
 * Native.json_check(value, what): raises Tocsin::InvalidArgument unless
 * `value` is a JSON value, in one walk: a Hash whose keys are Strings or
 * Symbols, an Array, a String, an Integer, a finite Float, true, false or nil
 * (instances of subclasses of Hash, Array and String count: their type is the
 * builtin one). Anything else -- a Time, a Symbol value, a Rational, an Object
 * the json gem would store through its #to_s -- is refused with its class and
 * where it is (payload["a"][2]); so is a non-finite Float and nesting deeper
 * than the core's bound (1000 arrays and objects, what any runtime may write
 * and every reader reads; Util.dump gives JSON.generate the same max_nesting,
 * whose default, 100, refused what other runtimes wrote; a container that
 * holds itself ends there). Only the path to the offending value is
 * formatted, on failure. */
#define TC_JSON_MAX_DEPTH 1000
struct jframe { VALUE key; long index; int is_hash; };
struct jcheck {
    VALUE what;
    int depth;
    struct jframe stack[TC_JSON_MAX_DEPTH + 1];
};
static VALUE json_path(struct jcheck *c, int upto) {
    VALUE s = rb_str_dup(c->what);
    for (int i = 0; i < upto; i++) {
        if (upto > 12 && i == 5) { /* deep: its first and last steps */
            rb_str_cat_cstr(s, "...");
            i = upto - 6;
            continue;
        }
        if (c->stack[i].is_hash) {
            VALUE k = rb_inspect(c->stack[i].key);
            if (RSTRING_LEN(k) > TC_SHOWN_MAX) k = rb_str_cat_cstr(rb_str_substr(k, 0, TC_SHOWN_MAX), "...");
            rb_str_catf(s, "[%"PRIsVALUE"]", k);
        } else {
            rb_str_catf(s, "[%ld]", c->stack[i].index);
        }
    }
    return s;
}
/* "a Time", "an Object", "an anonymous Struct subclass" */
static VALUE json_kind(VALUE v) {
    VALUE k = rb_obj_class(v);
    const char *pre = "";
    while (rb_mod_name(k) == Qnil && RTEST(rb_class_superclass(k))) {
        k = rb_class_superclass(k);
        pre = "anonymous ";
    }
    VALUE name = rb_mod_name(k);
    const char *n = NIL_P(name) ? "Object" : StringValueCStr(name);
    int vowel = *pre || strchr("AEIOU", n[0]) != NULL; /* "an anonymous ...", "an Object" */
    return rb_sprintf("%s %s%s%s", vowel ? "an" : "a", pre, n, *pre ? " subclass" : "");
}
static void NORETURN(json_refuse(struct jcheck *c, VALUE v));
static void json_refuse(struct jcheck *c, VALUE v) {
    VALUE where = json_path(c, c->depth);
    if (RB_FLOAT_TYPE_P(v))
        rb_enc_raise(rb_utf8_encoding(), eByCode[TOCSIN_INVALID], "%"PRIsVALUE" is %s, which JSON cannot hold (a JSON number is finite)",
                 where, isnan(RFLOAT_VALUE(v)) ? "NaN" : RFLOAT_VALUE(v) > 0 ? "Infinity" : "-Infinity");
    rb_enc_raise(rb_utf8_encoding(), eByCode[TOCSIN_INVALID],
             "%"PRIsVALUE" is %"PRIsVALUE", not a JSON value (a Hash with String or Symbol keys, an Array, a String, "
             "an Integer, a finite Float, true, false or nil)",
             where, json_kind(v));
}
/* JSON text is UTF-8: a String whose bytes are broken in its own encoding,
 * or a binary one whose bytes are not UTF-8, has no JSON form (the json gem
 * said only "partial character in source, but hit end") */
static int json_text_ok(VALUE str) {
    int cr = rb_enc_str_coderange(str);
    if (cr == ENC_CODERANGE_7BIT) return 1;
    if (cr == ENC_CODERANGE_BROKEN) return 0;
    if (ENCODING_GET(str) != rb_ascii8bit_encindex()) return 1;
    VALUE u = rb_str_dup(str); /* (shares the bytes) */
    rb_enc_associate_index(u, rb_utf8_encindex());
    return rb_enc_str_coderange(u) != ENC_CODERANGE_BROKEN;
}
static VALUE json_text_shown(VALUE str) {
    VALUE shown = rb_str_inspect(rb_str_substr(rb_str_dup(str), 0, TC_SHOWN_MAX));
    return RSTRING_LEN(str) > TC_SHOWN_MAX ? rb_str_cat_cstr(shown, "...") : shown;
}
static void NORETURN(json_refuse_text(struct jcheck *c, VALUE str, int depth, int is_key));
static VALUE json_path(struct jcheck *c, int upto);
static void json_refuse_text(struct jcheck *c, VALUE str, int depth, int is_key) {
    VALUE where = json_path(c, depth);
    int bin = ENCODING_GET(str) == rb_ascii8bit_encindex();
    rb_enc_raise(rb_utf8_encoding(), eByCode[TOCSIN_INVALID],
                 "%"PRIsVALUE" %s the %sString %s%"PRIsVALUE", which is not valid %s (JSON text is UTF-8)", where,
                 is_key ? "has" : "is", bin ? "binary " : "", is_key ? "key " : "", json_text_shown(str),
                 bin ? "UTF-8" : rb_enc_name(rb_enc_get(str)));
}
static void json_walk(struct jcheck *c, VALUE v);
static int json_pair(VALUE k, VALUE v, VALUE p) {
    struct jcheck *c = (struct jcheck *)p;
    struct jframe *f = &c->stack[c->depth - 1];
    if (RB_TYPE_P(k, T_STRING) || RB_TYPE_P(k, T_SYMBOL)) {
        VALUE ks = RB_TYPE_P(k, T_SYMBOL) ? rb_sym2str(k) : k;
        if (!json_text_ok(ks)) json_refuse_text(c, ks, c->depth - 1, 1);
    }
    if (!RB_TYPE_P(k, T_STRING) && !RB_TYPE_P(k, T_SYMBOL)) {
        VALUE where = json_path(c, c->depth - 1);
        VALUE shown = rb_inspect(k);
        if (RSTRING_LEN(shown) > TC_SHOWN_MAX) shown = rb_str_cat_cstr(rb_str_substr(shown, 0, TC_SHOWN_MAX), "...");
        rb_enc_raise(rb_utf8_encoding(), eByCode[TOCSIN_INVALID],
                 "%"PRIsVALUE" has the key %"PRIsVALUE" (%"PRIsVALUE"): the keys of a JSON object are Strings or Symbols",
                 where, shown, json_kind(k));
    }
    f->key = k;
    json_walk(c, v);
    return ST_CONTINUE;
}
static void json_enter(struct jcheck *c, VALUE v, int is_hash) {
    if (c->depth >= TC_JSON_MAX_DEPTH)
        rb_enc_raise(rb_utf8_encoding(), eByCode[TOCSIN_INVALID], "%"PRIsVALUE" is nested deeper than %d levels (or contains itself)",
                 json_path(c, c->depth), TC_JSON_MAX_DEPTH);
    struct jframe *f = &c->stack[c->depth++];
    f->is_hash = is_hash;
    f->key = Qnil;
    f->index = 0;
}
static void json_walk(struct jcheck *c, VALUE v) {
    switch (rb_type(v)) {
    case T_NIL: case T_TRUE: case T_FALSE: case T_FIXNUM: case T_BIGNUM:
        return;
    case T_STRING:
        if (!json_text_ok(v)) json_refuse_text(c, v, c->depth, 0);
        return;
    case T_FLOAT:
        if (!isfinite(RFLOAT_VALUE(v))) json_refuse(c, v);
        return;
    case T_ARRAY: {
        json_enter(c, v, 0);
        struct jframe *f = &c->stack[c->depth - 1];
        for (long i = 0; i < RARRAY_LEN(v); i++) {
            f->index = i;
            json_walk(c, RARRAY_AREF(v, i));
        }
        c->depth--;
        return;
    }
    case T_HASH:
        json_enter(c, v, 1);
        rb_hash_foreach(v, json_pair, (VALUE)c);
        c->depth--;
        return;
    default:
        json_refuse(c, v);
    }
}
static VALUE m_json_check(VALUE mod, VALUE v, VALUE what) {
    switch (rb_type(v)) { /* the common scalars: no walk */
    case T_NIL: case T_TRUE: case T_FALSE: case T_FIXNUM: return Qnil;
    case T_STRING: if (json_text_ok(v)) return Qnil; break;
    default: break;
    }
    struct jcheck c;
    c.what = rb_String(what);
    c.depth = 0;
    json_walk(&c, v);
    RB_GC_GUARD(c.what);
    return Qnil;
}

/* ==== one SQLite per process ==============================================
 * Native.sqlite_copies -> nil, or the core's message naming a second copy of
 * SQLite loaded in the process (tocsin_check_sqlite_copies, design.md §2). */
static VALUE m_sqlite_copies(VALUE mod) {
    char msg[1024];
    if (tocsin_check_sqlite_copies(msg, sizeof msg) == TOCSIN_OK) return Qnil;
    return rb_utf8_str_new_cstr(msg);
}

/* ---- Native::Worker: the C worker protocol ------------------------------
 * One thread (the worker's loop) calls next/finish/flush/cancelled/close;
 * poke and fd from any thread (handler threads poke the loop when a run ends).
 * Runs are owned by the core until finish/close: a Native::Run holds the
 * pointer and the worker, and refuses once either is gone. */
typedef struct {
    tocsin_worker *w;
    VALUE db; /* kept alive: the worker uses it for every step */
    rdb *dbh;
    pokeflags flags;
    guard g; /* the loop's next and flush are its uses; close waits for them */
} rwk;
static int wk_poke_fn(void *h) { return tocsin_worker_poke(h); }
/* the core's close; the database may close once it returned */
static int wk_close_fn(guard *g, void *h) {
    rwk *k = (rwk *)(void *)((char *)g - offsetof(rwk, g));
    int rc = tocsin_worker_close(h);
    atomic_fetch_sub(&k->dbh->workers, 1);
    return rc;
}
static void rwk_mark(void *p) { rb_gc_mark(((rwk *)p)->db); }
static void rwk_free(void *p) {
    rwk *k = p;
    guard_dfree(&k->g, k->w);
    xfree(k);
}
static const rb_data_type_t rwk_type = {"tocsin_worker", {rwk_mark, rwk_free, NULL}, NULL, NULL, RUBY_TYPED_FREE_IMMEDIATELY};
static rwk *rwk_of(VALUE self) {
    rwk *k;
    TypedData_Get_Struct(self, rwk, &rwk_type, k);
    return k;
}
static rwk *get_rwk(VALUE self) {
    rwk *k = rwk_of(self);
    if (!k->w) rb_raise(eByCode[TOCSIN_CLOSED], "the worker is closed");
    return k;
}
typedef struct { tocsin_task_run *run; VALUE worker; } rrun;
static void rrun_mark(void *p) { rb_gc_mark(((rrun *)p)->worker); }
static const rb_data_type_t rrun_type = {"tocsin_task_run", {rrun_mark, RUBY_TYPED_DEFAULT_FREE, NULL}, NULL, NULL, RUBY_TYPED_FREE_IMMEDIATELY};
static VALUE cRun;

DEF_CALL(wopen, tocsin_worker *w; tocsin_db *db; tocsin_worker_opts o;, tocsin_worker_open(&a->w, a->db, &a->o))
/* open(db, worker_id|nil, queues, concurrency, visibility_ms, scheduler, scheduler_ttl_ms) */
static VALUE wk_s_open(VALUE klass, VALUE db, VALUE id, VALUE queues, VALUE conc, VALUE vis, VALUE sched, VALUE sttl,
                       VALUE udelay, VALUE uhandbacks) {
    rwk *k;
    VALUE obj = TypedData_Make_Struct(klass, rwk, &rwk_type, k);
    guard_init(&k->g, "worker", wk_poke_fn, wk_close_fn);
    k->db = db;
    VALUE keep;
    struct wopen_a a = {0};
    tocsin_worker_opts o = TOCSIN_WORKER_OPTS_INIT;
    o.worker_id = cstr_or_null(id);
    o.queues = names_of(queues, &keep, &o.n_queues);
    o.concurrency = (int)opt_range(conc, "concurrency", 1, TOCSIN_MAX_BATCH, 0);
    o.visibility_ms = opt_i64(vis, "visibility", 0);
    o.scheduler = RTEST(sched);
    o.scheduler_ttl_ms = opt_i64(sttl, "scheduler_ttl", 0);
    o.unknown_task_delay_ms = opt_i64(udelay, "unknown_task_delay", 0);
    o.unknown_task_handbacks = (int)opt_range(uhandbacks, "unknown_task_handbacks", 1, 1000000, 0);
    a.db = DB(db);
    a.o = o;
    NOGVL_DB(wopen, a, db);
    RB_GC_GUARD(keep); RB_GC_GUARD(queues); RB_GC_GUARD(id);
    CHECK(a.rc);
    if (get_rdb(db)->closing) {
        /* Database#close began while this opened: the worker ends itself, the
         * close goes on. With the GVL held, so that the close (which waits for
         * the GVL) cannot free the database under it; it is quick: nothing is
         * claimed yet, and the database's lock waits end at once now. */
        tocsin_worker_close(a.w);
        rb_raise(eByCode[TOCSIN_CLOSED], "the database was closed while the worker opened");
    }
    k->dbh = get_rdb(db);
    atomic_fetch_add(&k->dbh->workers, 1);
    k->w = a.w;
    return obj;
}
/* register(task, backoff_base_ms, backoff_cap_ms, timeout_ms, result_ttl_ms, max_attempts) */
static VALUE wk_register(VALUE self, VALUE task, VALUE base, VALUE cap, VALUE timeout, VALUE ttl,
                         VALUE max_attempts) {
    tocsin_task_opts o = TOCSIN_TASK_OPTS_INIT;
    o.max_attempts = (int)opt_i64(max_attempts, "retries + 1", 0);
    o.backoff_base_ms = opt_i64(base, "backoff", 0);
    o.backoff_cap_ms = opt_i64(cap, "backoff_cap", 0);
    o.timeout_ms = opt_i64(timeout, "timeout", 0);
    o.result_ttl_ms = opt_i64(ttl, "result_ttl", 0);
    CHECK(tocsin_worker_register(get_rwk(self)->w, cstr(task), &o));
    return Qnil;
}
struct wnext_ctx { tocsin_worker *w; tocsin_task_run **runs; size_t n; };
static VALUE runs_ary(VALUE self, tocsin_task_run **runs, size_t n);
static int wnext_fn(void *p, int t) { struct wnext_ctx *c = p; return tocsin_worker_next(c->w, &c->runs, &c->n, t); }
/* the worker's wait: as run_wait's, a poke from #poke ending it with poked set */
struct wk_wait_a { rwk *k; struct wnext_ctx *c; int t; VALUE watcher; int rc; int poked; };
static VALUE wk_wait_body(VALUE p) {
    struct wk_wait_a *a = (struct wk_wait_a *)p;
    rwk *k = a->k;
    int t = a->t;
    int64_t deadline = t >= 0 ? mono_ms() + t : -1;
    struct ubf_arg u = {wk_poke_fn, a->c->w, &k->flags};
    a->watcher = sigwatch_start();
    for (;;) {
        struct wait_call w = {wnext_fn, a->c, t, 0};
        if (k->w != a->c->w) rb_raise(eByCode[TOCSIN_CLOSED], "the worker was closed while waiting");
        atomic_store(&k->flags.ubf_fired, 0);
        wait_call_nogvl(&w, &u);
        a->rc = w.rc;
        if (w.rc != TOCSIN_INTERRUPTED) return Qnil;
        if (atomic_exchange(&k->flags.ubf_fired, 0)) rb_thread_check_ints();
        if (atomic_exchange(&k->flags.user_poked, 0)) { /* as in run_wait */
            a->poked = 1;
            return Qnil;
        }
        if (k->w != a->c->w) rb_raise(eByCode[TOCSIN_CLOSED], "the worker was closed while waiting");
        if (deadline >= 0) {
            int64_t left = deadline - mono_ms();
            t = left > 0 ? (int)left : 0;
        }
    }
}
static VALUE run_wait_done_wk(VALUE p) {
    struct wk_wait_a *a = (struct wk_wait_a *)p;
    guard_leave(&a->k->g);
    sigwatch_stop(a->watcher);
    return Qnil;
}
/* next(timeout_ms) -> [[run, job_id, token, queue, task, args, kwargs, meta, attempt, max_attempts, timeout_ms]],
 * [] at the timeout, nil when poked (Native::Worker#poke) */
static VALUE wk_next(VALUE self, VALUE timeout) {
    rwk *k = rwk_of(self);
    int t = clamp_timeout(timeout);
    guard_enter(&k->g, (void *const *)&k->w);
    struct wnext_ctx c = {k->w, NULL, 0};
    int rc;
    if (t == 0) { /* with the GVL throughout */
        rc = wnext_fn(&c, 0);
        guard_leave(&k->g);
    } else {
        /* a poke from #poke returns nil rather than raising */
        struct wk_wait_a a = {k, &c, t, Qnil, 0, 0};
        rb_ensure(wk_wait_body, (VALUE)&a, run_wait_done_wk, (VALUE)&a);
        RB_GC_GUARD(a.watcher);
        if (a.poked) return Qnil;
        rc = a.rc;
    }
    if (rc == TOCSIN_INTERRUPTED) { atomic_store(&k->flags.user_poked, 0); return Qnil; }
    if (rc == TOCSIN_TIMEOUT) return rb_ary_new();
    CHECK(rc);
    return runs_ary(self, c.runs, c.n);
}
/* take -> the runs reserved for the free slots (as #next), [] when a step is due:
 * no database work, so it keeps the GVL */
static VALUE wk_take(VALUE self) {
    rwk *k = get_rwk(self);
    tocsin_task_run **runs = NULL;
    size_t n = 0;
    int rc = tocsin_worker_take(k->w, &runs, &n);
    if (rc == TOCSIN_TIMEOUT || rc == TOCSIN_BUSY) return rb_ary_new();
    CHECK(rc);
    return runs_ary(self, runs, n);
}
static VALUE runs_ary(VALUE self, tocsin_task_run **runs, size_t n) {
    VALUE out = rb_ary_new_capa((long)n);
    for (size_t i = 0; i < n; i++) {
        tocsin_task_run *r = runs[i];
        rrun *rr;
        VALUE h = TypedData_Make_Struct(cRun, rrun, &rrun_type, rr);
        rr->run = r;
        rr->worker = self;
        VALUE e = rb_ary_new_capa(11);
        rb_ary_push(e, h);
        rb_ary_push(e, LL2NUM(r->job_id));
        rb_ary_push(e, LL2NUM(r->token));
        rb_ary_push(e, str_or_nil(r->queue));
        rb_ary_push(e, str_or_nil(r->task));
        rb_ary_push(e, str_or_nil(r->args));
        rb_ary_push(e, str_or_nil(r->kwargs));
        rb_ary_push(e, str_or_nil(r->meta));
        rb_ary_push(e, INT2NUM(r->attempt));
        rb_ary_push(e, INT2NUM(r->max_attempts));
        rb_ary_push(e, LL2NUM(r->timeout_ms));
        rb_ary_push(out, e);
    }
    tocsin_free(runs);
    return out;
}
DEF_CALL(wfin, tocsin_worker *w; tocsin_db *tx; tocsin_task_run *run; tocsin_outcome o;,
         tocsin_worker_finish(a->w, a->tx, a->run, &a->o))
/* finish(run, tx|nil, kind, value_json, error_type, error_message, error_trace, delay_ms) -> true,
 * false when tx was given and the lease is no longer this run's */
static VALUE wk_finish(int argc, VALUE *argv, VALUE self) {
    if (argc != 8) rb_raise(rb_eArgError, "finish: 8 arguments expected");
    rwk *k = get_rwk(self);
    rrun *rr;
    TypedData_Get_Struct(argv[0], rrun, &rrun_type, rr);
    if (!rr->run || rr->worker != self) rb_raise(eByCode[TOCSIN_INVALID], "this run was already finished");
    struct wfin_a a = {0};
    a.w = k->w;
    a.tx = NIL_P(argv[1]) ? NULL : DB(argv[1]);
    a.run = rr->run;
    tocsin_outcome o = TOCSIN_OUTCOME_INIT;
    o.kind = arg_cint(argv[2], "outcome kind");
    o.value = cstr_or_null(argv[3]);
    o.error_type = cstr_or_null(argv[4]);
    o.error_message = cstr_or_null(argv[5]);
    o.error_trace = cstr_or_null(argv[6]);
    o.delay_ms = opt_i64(argv[7], "delay", -1);
    a.o = o;
    /* without tx, finishing only records the outcome for the next step (no
     * database work, no wait for a step): it keeps the GVL, as #take does */
    if (a.tx) NOGVL_DB(wfin, a, argv[1]);
    else wfin_f(&a);
    for (int i = 0; i < 8; i++) RB_GC_GUARD(argv[i]);
    if (a.rc == TOCSIN_LEASE_LOST) {
        /* nothing was written and the run is still in flight, holding a slot:
         * end it with a hand-back, which the core counts as lost (it writes
         * nothing either) */
        tocsin_outcome hb = TOCSIN_OUTCOME_INIT;
        hb.kind = TOCSIN_OUTCOME_HAND_BACK;
        hb.delay_ms = 0;
        a.tx = NULL;
        a.o = hb;
        wfin_f(&a);
        rr->run = NULL;
        return Qfalse;
    }
    if (a.rc == TOCSIN_OK) rr->run = NULL; /* released */
    CHECK(a.rc);
    return Qtrue;
}
DEF_CALL(wflush, tocsin_worker *w; size_t lost;, tocsin_worker_flush(a->w, &a->lost))
static VALUE wk_flush(VALUE self) {
    rwk *k = rwk_of(self);
    guard_enter(&k->g, (void *const *)&k->w);
    struct wflush_a a = {0, k->w, 0};
    guarded_nogvl(&k->g, wflush_f, &a);
    CHECK(a.rc);
    return SIZET2NUM(a.lost);
}
static VALUE wk_cancelled(VALUE self) {
    int64_t *ids = NULL;
    size_t n = 0;
    CHECK(tocsin_worker_cancelled(get_rwk(self)->w, &ids, &n));
    VALUE out = rb_ary_new_capa((long)n);
    for (size_t i = 0; i < n; i++) rb_ary_push(out, LL2NUM(ids[i]));
    tocsin_free(ids);
    return out;
}
static VALUE wk_fd(VALUE self) { return INT2NUM(tocsin_worker_fd(get_rwk(self)->w)); }
static VALUE wk_wake_in(VALUE self) { return LL2NUM(tocsin_worker_wake_in(get_rwk(self)->w)); }
static VALUE wk_in_flight(VALUE self) { return SIZET2NUM(tocsin_worker_in_flight(get_rwk(self)->w)); }
static VALUE wk_poke(VALUE self) {
    rwk *k;
    TypedData_Get_Struct(self, rwk, &rwk_type, k);
    if (!k->w) return Qnil;
    atomic_store(&k->flags.user_poked, 1);
    tocsin_worker_poke(k->w);
    return Qnil;
}
/* drain: graceful shutdown -- no claim and no run handed out from now on, the
 * reserve goes back at the next step; next keeps the upkeep (any thread) */
static VALUE wk_drain(VALUE self) {
    rwk *k;
    TypedData_Get_Struct(self, rwk, &rwk_type, k);
    if (k->w) tocsin_worker_drain(k->w);
    return Qnil;
}
/* close: the loop's own call, after its last next (Worker#run); from another
 * thread it ends the loop's wait first (Tocsin::Closed there) */
static VALUE wk_close(VALUE self) {
    rwk *k = rwk_of(self);
    CHECK(guard_close(&k->g, (void **)&k->w));
    return Qnil;
}
static VALUE wk_closed_p(VALUE self) {
    rwk *k;
    TypedData_Get_Struct(self, rwk, &rwk_type, k);
    return k->w ? Qfalse : Qtrue;
}

static VALUE m_version(VALUE mod) { return rb_str_new_cstr(tocsin_version()); }
static VALUE m_sqlite_version(VALUE mod) { return rb_str_new_cstr(tocsin_sqlite_version()); }
static VALUE m_backoff_ms(VALUE mod, VALUE base, VALUE cap, VALUE att) {
    return LL2NUM(tocsin_backoff_ms(arg_i64(base, "base_ms"), arg_i64(cap, "cap_ms"),
                                     (int)arg_int(att, "attempts", 0, INT_MAX, 0)));
}
static VALUE m_errstr(VALUE mod, VALUE rc) { return rb_str_new_cstr(tocsin_errstr(arg_cint(rc, "code"))); }
/* The error class of an SQLite result code as the core maps it
 * (tocsin_code_of_sqlite); nil for the codes it has no class of its own for
 * (SQLITE_ERROR and the like: the caller's default). */
static VALUE m_error_class_of_sqlite(VALUE mod, VALUE code) {
    int rc = tocsin_code_of_sqlite(arg_cint(code, "code"));
    return rc == TOCSIN_OK || rc == TOCSIN_ERROR || rc == TOCSIN_INVALID ? Qnil : error_class(rc);
}
static VALUE m_owner_id(VALUE mod) {
    char id[TOCSIN_OWNER_ID_SIZE];
    tocsin_owner_id(id, sizeof id);
    return str_or_nil(id);
}

RUBY_FUNC_EXPORTED void Init_tocsin_native(void) {
    pthread_atfork(NULL, NULL, on_fork_child);
    mTocsin = rb_define_module("Tocsin");
    mNative = rb_define_module_under(mTocsin, "Native");
    eError = rb_define_class_under(mTocsin, "Error", rb_eStandardError);
    rb_define_const(eError, "CODE", INT2NUM(TOCSIN_ERROR));
    rb_define_attr(eError, "sqlite_code", 1, 0);
    for (int i = 0; i < 20; i++) eByCode[i] = Qnil;
    static const struct { int rc; const char *name; } names[] = {
        {TOCSIN_INVALID, "InvalidArgument"}, {TOCSIN_NOTFOUND, "NotFound"}, {TOCSIN_BUSY, "Busy"},
        {TOCSIN_LEASE_LOST, "LeaseLost"}, {TOCSIN_CLOSED, "Closed"}, {TOCSIN_CORRUPT, "Corrupt"},
        {TOCSIN_TOOBIG, "TooBig"}, {TOCSIN_VERSION, "VersionError"}, {TOCSIN_CALLBACK, "CallbackError"},
        {TOCSIN_NOMEM, "NoMemory"}, {TOCSIN_REPLACED, "Replaced"}, {TOCSIN_TIMEOUT, "Timeout"},
        {TOCSIN_READONLY, "ReadOnly"}, {TOCSIN_INTERRUPTED, "Interrupted"}, {TOCSIN_IOERR, "IOError"},
        {TOCSIN_FULL, "Full"}, {TOCSIN_CANTOPEN, "CantOpen"}, {TOCSIN_PERM, "PermissionDenied"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        eByCode[names[i].rc] = rb_define_class_under(mTocsin, names[i].name, eError);
        rb_gc_register_mark_object(eByCode[names[i].rc]);
        rb_define_const(eByCode[names[i].rc], "CODE", INT2NUM(names[i].rc));
    }
    rb_define_const(mNative, "MAX_TIME_MS", LL2NUM(TOCSIN_MAX_TIME_MS));
    rb_define_const(mNative, "MAX_LEASE_MS", LL2NUM(TOCSIN_MAX_LEASE_MS));
    rb_define_const(mNative, "MIN_WORKER_LEASE_MS", INT2NUM(TOCSIN_MIN_WORKER_LEASE_MS));
    rb_define_const(mNative, "MAX_ATTEMPTS", INT2NUM(TOCSIN_MAX_ATTEMPTS));
    rb_define_const(mNative, "MAX_BATCH", INT2NUM(TOCSIN_MAX_BATCH));
    rb_define_const(mNative, "MAX_CATCH_UP", INT2NUM(TOCSIN_MAX_CATCH_UP));
    rb_define_const(mNative, "MAX_NAME_BYTES", INT2NUM(TOCSIN_MAX_NAME_BYTES));
    rb_define_const(mNative, "BACKOFF_BASE_MS", LL2NUM(TOCSIN_BACKOFF_BASE_MS));
    rb_define_const(mNative, "BACKOFF_CAP_MS", LL2NUM(TOCSIN_BACKOFF_CAP_MS));
    rb_define_const(mNative, "DEFAULT_RESULT_TTL_MS", LL2NUM(TOCSIN_DEFAULT_RESULT_TTL_MS));
    rb_define_const(mNative, "CORE_VERSION", rb_str_new_cstr(TOCSIN_VERSION_STRING));
    rb_define_module_function(mNative, "version", m_version, 0);
    rb_define_module_function(mNative, "sqlite_version", m_sqlite_version, 0);
    rb_define_module_function(mNative, "backoff_ms", m_backoff_ms, 3);
    rb_define_module_function(mNative, "errstr", m_errstr, 1);
    rb_define_module_function(mNative, "error_class_of_sqlite", m_error_class_of_sqlite, 1);
    rb_define_module_function(mNative, "owner_id", m_owner_id, 0);
    rb_define_module_function(mNative, "cron_next", m_cron_next, 3);
    rb_define_module_function(mNative, "check_name", m_check_name, 2);
    rb_define_module_function(mNative, "sqlite_copies", m_sqlite_copies, 0);
    rb_define_module_function(mNative, "json_check", m_json_check, 2);

    cDB = rb_define_class_under(mNative, "DB", rb_cObject);
    rb_undef_alloc_func(cDB);
    rb_define_singleton_method(cDB, "open", db_s_open, 4);
#define M(name, fn, n) rb_define_method(cDB, name, fn, n)
    M("close", db_close, 0); M("closed?", db_closed_p, 0);
    M("tx_begin", db_tx_begin, -1); M("tx_commit", db_tx_commit, 0); M("tx_rollback", db_tx_rollback, 0);
    M("tx?", db_is_tx, 0); M("exec", db_exec, 1);
    M("now", db_now, 0); M("set_time", db_set_time, 1); M("set_max_payload", db_set_max_payload, 1);
    M("check_name", db_check_name, 2);
    M("sqlite_version", db_sqlite_version, 0);
    M("enqueue", db_enqueue, 3); M("enqueue_many", db_enqueue_many, 1);
    M("claim", db_claim, 4); M("ack", db_ack, 2); M("ack_batch", db_ack_batch, 2);
    M("retry", db_retry, 4); M("fail", db_fail, 3); M("heartbeat", db_heartbeat, 3);
    M("hand_back", db_hand_back, 3);
    M("cancel", db_cancel, 1); M("job", db_job_get, 1);
    M("pause", db_pause, 1); M("resume", db_resume, 1); M("paused?", db_is_paused, 1);
    M("stats", db_stats, 1); M("next_deadline", db_next_deadline, 1);
    M("dead_list", db_dead_list, 3); M("dead_requeue", db_dead_requeue, 1); M("dead_purge", db_dead_purge, 2);
    M("publish", db_publish, 4); M("publish_many", db_publish_many, 3);
    M("stream_read", db_stream_read, 3); M("save_offset", db_save_offset, 3);
    M("stream_offset", db_stream_offset, 2); M("stream_trim", db_stream_trim, 4);
    M("notify", db_notify, 3); M("notify_read", db_notify_read, 3); M("notify_max_id", db_notify_max_id, 0);
    M("notify_prune", db_notify_prune, 2); M("notify_autotrim", db_notify_autotrim, 3);
    M("result_save", db_result_save, 3); M("result_save_error", db_result_save_error, 4);
    M("result_get", db_result_get, 1); M("result_check", db_result_check, 1);
    M("result_delete", db_result_delete, 1); M("result_sweep", db_result_sweep, 0);
    M("job_complete", db_job_complete, 4); M("job_fail_task", db_job_fail_task, 5);
    M("result_wait", db_result_wait, 3);
    M("lock_acquire", db_lock_acquire, 3); M("lock_renew", db_lock_renew, 4);
    M("lock_release", db_lock_release, 3); M("lock_holder", db_lock_holder, 1); M("lock_wait", db_lock_wait, 5);
    M("ratelimit_try", db_ratelimit_try, 3); M("ratelimit_sweep", db_ratelimit_sweep, 0);
    M("ratelimit_reset", db_ratelimit_reset, 1);
    M("schedule_set", db_schedule_set, 5); M("schedule_update", db_schedule_update, 5);
    M("schedule_pause", db_schedule_pause, 1); M("schedule_resume", db_schedule_resume, 1);
    M("schedule_remove", db_schedule_remove, 1); M("schedule_get", db_schedule_get, 1);
    M("schedule_list", db_schedule_list, 0); M("scheduler_tick", db_scheduler_tick, 0);
    M("scheduler_next_fire", db_scheduler_next_fire, 0); M("scheduler_lead", db_scheduler_lead, 2);
    M("scheduler_resign", db_scheduler_resign, 1);
    M("task_envelope", db_task_envelope, 5); M("task_enqueue", db_task_enqueue, -1);
    M("queue_wait", db_queue_wait, 3);
#undef M

    VALUE cCancel = rb_define_class_under(mNative, "Cancel", rb_cObject);
    rb_define_alloc_func(cCancel, cancel_alloc);
    rb_define_method(cCancel, "fire", cancel_fire, 0);

    cSub = rb_define_class_under(mNative, "Sub", rb_cObject);
    rb_undef_alloc_func(cSub);
    rb_define_singleton_method(cSub, "open", sub_s_open, 1);
    rb_define_method(cSub, "fd", sub_fd, 0);
    rb_define_method(cSub, "drain", sub_drain, 0);
    rb_define_method(cSub, "wait", sub_wait, 1);
    rb_define_method(cSub, "poke", sub_poke, 0);
    rb_define_method(cSub, "wake", sub_wake, 0);
    rb_define_method(cSub, "close", sub_close, 0);

    cListener = rb_define_class_under(mNative, "Listener", rb_cObject);
    rb_undef_alloc_func(cListener);
    rb_define_singleton_method(cListener, "open", lis_s_open, 3);
    rb_define_method(cListener, "fd", lis_fd, 0);
    rb_define_method(cListener, "next", lis_next, 1);
    rb_define_method(cListener, "dropped", lis_dropped, 0);
    rb_define_method(cListener, "poke", lis_poke, 0);
    rb_define_method(cListener, "close", lis_close, 0);

    cStreamSub = rb_define_class_under(mNative, "StreamSub", rb_cObject);
    rb_undef_alloc_func(cStreamSub);
    rb_define_singleton_method(cStreamSub, "open", ss_s_open, 8);
    rb_define_method(cStreamSub, "rewind", ss_rewind, 1);
    rb_define_method(cStreamSub, "fd", ss_fd, 0);
    rb_define_method(cStreamSub, "next", ss_next, 1);
    rb_define_method(cStreamSub, "position", ss_position, 0);
    rb_define_method(cStreamSub, "save", ss_save, 0);
    rb_define_method(cStreamSub, "poke", ss_poke, 0);
    rb_define_method(cStreamSub, "close", ss_close, 0);

    cWorker = rb_define_class_under(mNative, "Worker", rb_cObject);
    rb_undef_alloc_func(cWorker);
    rb_define_singleton_method(cWorker, "open", wk_s_open, 9);
    rb_define_method(cWorker, "register", wk_register, 6);
    rb_define_method(cWorker, "next", wk_next, 1);
    rb_define_method(cWorker, "take", wk_take, 0);
    rb_define_method(cWorker, "finish", wk_finish, -1);
    rb_define_method(cWorker, "flush", wk_flush, 0);
    rb_define_method(cWorker, "cancelled", wk_cancelled, 0);
    rb_define_method(cWorker, "fd", wk_fd, 0);
    rb_define_method(cWorker, "wake_in", wk_wake_in, 0);
    rb_define_method(cWorker, "in_flight", wk_in_flight, 0);
    rb_define_method(cWorker, "poke", wk_poke, 0);
    rb_define_method(cWorker, "drain", wk_drain, 0);
    rb_define_method(cWorker, "close", wk_close, 0);
    rb_define_method(cWorker, "closed?", wk_closed_p, 0);
    cRun = rb_define_class_under(mNative, "Run", rb_cObject);
    rb_undef_alloc_func(cRun);
    rb_define_const(mNative, "OUTCOME_OK", INT2NUM(TOCSIN_OUTCOME_OK));
    rb_define_const(mNative, "OUTCOME_ERROR", INT2NUM(TOCSIN_OUTCOME_ERROR));
    rb_define_const(mNative, "OUTCOME_FAIL", INT2NUM(TOCSIN_OUTCOME_FAIL));
    rb_define_const(mNative, "OUTCOME_HAND_BACK", INT2NUM(TOCSIN_OUTCOME_HAND_BACK));
}
