// The Node.js addon of tocsin: translates JS values to the C API and back,
// maps result codes to errors (through a factory set by lib/errors.js) and
// integrates waits with libuv. No behaviour of its own: see tocsin.h.
//
// Calls on a Database run first on its "fast" handle (busy timeout 1 ms) on
// the main thread; a TOCSIN_BUSY there (nothing written) re-runs the call on
// the libuv pool on the "main" handle (the configured busy timeout) and the
// call returns a Promise. So an uncontended write is synchronous and a
// contended one never blocks the event loop.
#include <napi.h>
#include <uv.h>

#include <atomic>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

extern "C" {
#include "tocsin.h"
int tocsin_node_api_ready(void);
}

namespace {

// Per-environment state (the main thread and each worker_threads Worker load
// the addon into an environment of their own): references made in one
// environment must never be used from another, nor after it is torn down.
struct EnvData {
  Napi::FunctionReference error_factory;
  Napi::FunctionReference handle_ctor, waiter_ctor, poller_ctor, worker_ctor;
};
EnvData &env_data(Napi::Env env) { return *env.GetInstanceData<EnvData>(); }

struct Res {
  int rc = 0;
  int sqlite = 0;
  std::string msg;
};

void capture(Res &r, int rc) {
  r.rc = rc;
  r.sqlite = 0;
  r.msg.clear();
  if (rc != TOCSIN_OK) {
    const char *m = tocsin_errmsg(nullptr);
    r.msg = (m && *m) ? m : tocsin_errstr(rc);
    r.sqlite = tocsin_sqlite_errcode(nullptr);
  }
}

Napi::Value make_error(Napi::Env env, int code, const std::string &msg, int sqlite) {
  Napi::FunctionReference &factory = env_data(env).error_factory;
  if (!factory.IsEmpty()) {
    return factory.Call({Napi::Number::New(env, code), Napi::String::New(env, msg),
                                 Napi::Number::New(env, sqlite)});
  }
  Napi::Error e = Napi::Error::New(env, msg);
  e.Set("code", Napi::Number::New(env, code));
  return e.Value();
}

Napi::Value make_error(Napi::Env env, const Res &r) { return make_error(env, r.rc, r.msg, r.sqlite); }

// Throws (as a pending exception) and returns undefined.
Napi::Value throw_res(Napi::Env env, const Res &r) {
  Napi::Value e = make_error(env, r);
  if (!env.IsExceptionPending()) napi_throw(env, e);
  return env.Undefined();
}

Napi::Value throw_invalid(Napi::Env env, const std::string &msg) {
  Res r;
  r.rc = TOCSIN_INVALID;
  r.msg = msg;
  return throw_res(env, r);
}

Napi::Value throw_closed(Napi::Env env, const char *what) {
  Res r;
  r.rc = TOCSIN_CLOSED;
  r.msg = std::string(what) + " is closed";
  return throw_res(env, r);
}

// Whether JS can run in env. It cannot while the environment is torn down (a
// worker_threads Worker terminated or exiting, the process's own environment at its
// end): Node completes the pool calls still in flight then, and every N-API call that
// would run JS fails; node-addon-api makes such a failure (settling a promise,
// calling the error factory, a poll callback) a fatal error that aborts the whole
// process. So a completion or a callback asks first and, when it cannot, only
// releases what it holds. (A property read runs JS: it fails exactly then.)
bool js_runs(napi_env env) {
  napi_value g, v;
  return napi_get_global(env, &g) == napi_ok && napi_get_named_property(env, g, "undefined", &v) == napi_ok;
}

bool ensure_api(Napi::Env env) {
  if (tocsin_node_api_ready()) return true;
  throw_res(env, Res{TOCSIN_ERROR, 0,
                     "tocsin: the addon has not been loaded into an SQLite yet "
                     "(use require('tocsin').open(), which loads it into better-sqlite3)"});
  return false;
}

// ---- argument readers (main thread) ----

bool is_nullish(const Napi::Value &v) { return v.IsUndefined() || v.IsNull(); }

// An integer argument: a Number that is an exact integer in the int64 range, or a
// BigInt that fits in 64 bits (read exactly). false for anything else.
bool int64_of(const Napi::Value &v, int64_t &out) {
  if (v.IsBigInt()) {
    bool lossless = false;
    out = v.As<Napi::BigInt>().Int64Value(&lossless);
    return lossless;
  }
  if (!v.IsNumber()) return false;
  double d = v.As<Napi::Number>().DoubleValue();
  if (d != d || d < -9223372036854775808.0 || d >= 9223372036854775808.0 || (double)(int64_t)d != d) return false;
  out = (int64_t)d;
  return true;
}

// A JS string as the C string the core reads. Refused (false, `why` set) when
// C cannot carry it as given: a NUL would end it early ('a\0b' would become
// 'a'), a lone surrogate has no UTF-8 form (V8 would put U+FFFD in its place,
// so two different names would become one).
bool c_string(const Napi::Value &v, std::string &out, const char *&why) {
  Napi::String js = v.As<Napi::String>();
  out = js.Utf8Value();
  if (out.find('\0') != std::string::npos) {
    why = "must not contain NUL characters";
    return false;
  }
  if (out.find("\xEF\xBF\xBD") != std::string::npos) {  // U+FFFD: given, or made of a lone surrogate
    std::u16string u = js.Utf16Value();
    for (size_t k = 0; k < u.size(); k++) {
      char16_t c = u[k];
      if (c >= 0xD800 && c <= 0xDBFF && k + 1 < u.size() && u[k + 1] >= 0xDC00 && u[k + 1] <= 0xDFFF) {
        k++;
      } else if (c >= 0xD800 && c <= 0xDFFF) {
        why = "must not contain lone surrogates (not valid Unicode)";
        return false;
      }
    }
  }
  return true;
}

// c_string, or a pending InvalidArgumentError naming `what`.
bool c_string_arg(Napi::Env env, const Napi::Value &v, std::string &out, const std::string &what) {
  const char *why = nullptr;
  if (c_string(v, out, why)) return true;
  Res r;
  r.rc = TOCSIN_INVALID;
  r.msg = what + " " + why;
  throw_res(env, r);
  return false;
}

struct Args {
  const Napi::CallbackInfo &info;
  bool ok = true;
  explicit Args(const Napi::CallbackInfo &i) : info(i) {}

  void bad(size_t i, const char *what, const char *want) {
    if (!ok) return;
    ok = false;
    throw_invalid(info.Env(), std::string(what) + " must be " + want);
    (void)i;
  }
  std::string str(size_t i, const char *what) {
    if (!ok) return {};
    Napi::Value v = info[i];
    if (!v.IsString()) {
      bad(i, what, "a string");
      return {};
    }
    std::string out;
    if (!c_string_arg(info.Env(), v, out, what)) {
      ok = false;
      return {};
    }
    return out;
  }
  // nullable string: has=false for null/undefined
  std::string ostr(size_t i, const char *what, bool &has) {
    has = false;
    if (!ok) return {};
    Napi::Value v = info[i];
    if (is_nullish(v)) return {};
    has = true;
    return str(i, what);
  }
  int64_t i64(size_t i, const char *what) {
    if (!ok) return 0;
    Napi::Value v = info[i];
    if (v.IsBigInt()) {
      bool lossless = false;
      int64_t x = v.As<Napi::BigInt>().Int64Value(&lossless);
      if (!lossless) bad(i, what, "a 64-bit signed integer");
      return x;
    }
    if (v.IsNumber()) {
      double d = v.As<Napi::Number>().DoubleValue();
      if (d != d || d < -9223372036854775808.0 || d >= 9223372036854775808.0 ||
          (double)(int64_t)d != d) {
        bad(i, what, "an integer");
        return 0;
      }
      return (int64_t)d;
    }
    bad(i, what, "an integer");
    return 0;
  }
  int64_t oi64(size_t i, const char *what, int64_t dflt) {
    if (!ok) return dflt;
    if (is_nullish(info[i])) return dflt;
    return i64(i, what);
  }
  int i32(size_t i, const char *what, int64_t lo, int64_t hi) {
    int64_t v = i64(i, what);
    if (ok && (v < lo || v > hi)) {
      ok = false;
      throw_invalid(info.Env(), std::string(what) + " must be between " + std::to_string(lo) +
                                    " and " + std::to_string(hi));
    }
    return (int)v;
  }
  bool flag(size_t i) {
    // no call into JS once an argument was refused (its exception is pending)
    if (!ok) return false;
    Napi::Value v = info[i];
    return !is_nullish(v) && v.ToBoolean().Value();
  }
  std::vector<std::string> strs(size_t i, const char *what) {
    std::vector<std::string> out;
    if (!ok) return out;
    Napi::Value v = info[i];
    if (!v.IsArray()) {
      bad(i, what, "an array of strings");
      return out;
    }
    Napi::Array a = v.As<Napi::Array>();
    for (uint32_t k = 0; k < a.Length(); k++) {
      Napi::Value e = a.Get(k);
      if (!e.IsString()) {
        bad(i, what, "an array of strings");
        return out;
      }
      std::string one;
      if (!c_string_arg(info.Env(), e, one, std::string(what) + "[" + std::to_string(k) + "]")) {
        ok = false;
        out.clear();
        return out;
      }
      out.push_back(std::move(one));
    }
    return out;
  }
};

// ---- JS values out ----

Napi::Value js_str(Napi::Env env, const char *s) {
  return s ? Napi::String::New(env, s) : env.Null();
}
// A 64-bit integer of the core: a Number while it is a safe integer (|v| <= 2^53 - 1),
// else the BigInt of its exact value -- never a rounded Number (a stream offset, a
// notification id or a priority past 2^53 read back as a Number named another one).
// Every integer argument takes a BigInt back as given.
Napi::Value js_num(Napi::Env env, int64_t v) {
  if (v > 9007199254740991LL || v < -9007199254740991LL) return Napi::BigInt::New(env, v);
  return Napi::Number::New(env, (double)v);
}
Napi::Value js_big(Napi::Env env, int64_t v) { return Napi::BigInt::New(env, v); }

Napi::Object js_job(Napi::Env env, const tocsin_job &j) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("id", js_num(env, j.id));
  o.Set("queue", js_str(env, j.queue));
  o.Set("state", js_str(env, j.state));
  o.Set("payload", js_str(env, j.payload));
  o.Set("meta", js_str(env, j.meta));
  o.Set("priority", js_num(env, j.priority));
  o.Set("attempts", js_num(env, j.attempts));
  o.Set("maxAttempts", js_num(env, j.max_attempts));
  o.Set("token", js_big(env, j.token));
  o.Set("runAt", js_num(env, j.run_at));
  o.Set("createdAt", js_num(env, j.created_at));
  o.Set("leaseUntil", js_num(env, j.lease_until));
  o.Set("expiresAt", js_num(env, j.expires_at));
  o.Set("uniqueKey", js_str(env, j.unique_key));
  o.Set("worker", js_str(env, j.worker));
  o.Set("lastError", js_str(env, j.last_error));
  o.Set("reason", js_str(env, j.reason));
  o.Set("diedAt", js_num(env, j.died_at));
  return o;
}

Napi::Object js_msg(Napi::Env env, const tocsin_message &m) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("id", js_num(env, m.id));
  o.Set("name", js_str(env, m.name));
  o.Set("key", js_str(env, m.key));
  o.Set("payload", js_str(env, m.payload));
  o.Set("meta", js_str(env, m.meta));
  o.Set("createdAt", js_num(env, m.created_at));
  return o;
}

Napi::Value js_msgs(Napi::Env env, tocsin_message *m, size_t n) {
  Napi::Array a = Napi::Array::New(env, n);
  for (size_t i = 0; i < n; i++) a.Set((uint32_t)i, js_msg(env, m[i]));
  return a;
}

Napi::Value js_result(Napi::Env env, const tocsin_result *r) {
  if (!r) return env.Null();
  Napi::Object o = Napi::Object::New(env);
  o.Set("jobId", js_num(env, r->job_id));
  o.Set("isError", Napi::Boolean::New(env, r->is_error != 0));
  o.Set("value", js_str(env, r->value));
  o.Set("errorType", js_str(env, r->error_type));
  o.Set("errorMessage", js_str(env, r->error_message));
  o.Set("errorTrace", js_str(env, r->error_trace));
  o.Set("createdAt", js_num(env, r->created_at));
  o.Set("expiresAt", js_num(env, r->expires_at));
  return o;
}

Napi::Object js_schedule(Napi::Env env, const tocsin_schedule &s) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("name", js_str(env, s.name));
  o.Set("cron", js_str(env, s.cron));
  o.Set("queue", js_str(env, s.queue));
  o.Set("payload", js_str(env, s.payload));
  o.Set("meta", js_str(env, s.meta));
  o.Set("priority", js_num(env, s.priority));
  o.Set("maxAttempts", js_num(env, s.max_attempts));
  o.Set("jobExpires", js_num(env, s.job_expires_ms));
  o.Set("catchUp", Napi::String::New(env, s.catch_up == TOCSIN_CATCHUP_ALL ? "all" : "once"));
  o.Set("maxCatchUp", js_num(env, s.max_catch_up));
  o.Set("localTime", Napi::Boolean::New(env, s.local_time != 0));
  o.Set("paused", Napi::Boolean::New(env, s.paused != 0));
  o.Set("nextFire", js_num(env, s.next_fire));
  o.Set("lastFire", js_num(env, s.last_fire));
  o.Set("lastJobId", js_num(env, s.last_job_id));
  o.Set("firedCount", js_num(env, s.fired_count));
  o.Set("skippedCount", js_num(env, s.skipped_count));
  o.Set("createdAt", js_num(env, s.created_at));
  o.Set("updatedAt", js_num(env, s.updated_at));
  return o;
}

// ---- handles ----

struct Clock {
  std::atomic<int64_t> fixed{0};
};
int64_t fixed_clock(void *ctx) { return ((Clock *)ctx)->fixed.load(); }

// A database's two core handles, closed when the last holder lets go: the
// Handle (until close() or its finalizer), each pool call running on them and
// each Worker opened on them (the core's worker borrows the handle: it must be
// closed first). So no finalizer order (a worker_threads Worker's environment
// finalizes every object at once, in no set order) and no call still running
// can see a handle freed under it. The clock lives as long as anything that may
// read it: the handles, the transactions and stream subscriptions made from
// them (they copy its pointer).
struct DbBox {
  tocsin_db *main = nullptr;
  tocsin_db *fast = nullptr;
  std::shared_ptr<Clock> clock;
  ~DbBox() {
    if (fast) tocsin_close(fast);
    if (main) tocsin_close(main);
  }
};

class Handle : public Napi::ObjectWrap<Handle> {
 public:
  static Napi::FunctionReference &ctor(Napi::Env env) { return env_data(env).handle_ctor; }
  tocsin_db *main = nullptr;  // the database handle (NULL once closed), or the tx handle
  tocsin_db *fast = nullptr;  // database only: the 1 ms busy-timeout handle
  bool is_tx = false;
  int pending = 0;  // calls running on the pool
  std::shared_ptr<DbBox> box;    // database: owns main and fast; tx: its database's (kept open)
  Napi::ObjectReference parent;  // tx: keeps its database's wrapper alive

  static Napi::Function Init(Napi::Env env) {
    Napi::Function f = DefineClass(env, "Handle", {});
    ctor(env) = Napi::Persistent(f);
    return f;
  }
  explicit Handle(const Napi::CallbackInfo &info) : Napi::ObjectWrap<Handle>(info) {}
  ~Handle() override { release(); }

  // What the two connections hold (page caches, statements), told to V8 so that
  // handles dropped without close() are collected before they add up: V8 sees only
  // the small wrapper otherwise (1,500 of them reached 630 MB before a GC).
  static constexpr int64_t kNativeBytes = 512 * 1024;
  bool reported = false;

  void release() {
    if (is_tx) {
      if (main) tocsin_tx_rollback(main);
      main = nullptr;
      box.reset();
      return;
    }
    if (reported) {
      reported = false;
      Napi::MemoryManagement::AdjustExternalMemory(Env(), -kNativeBytes);
    }
    fast = main = nullptr;
    box.reset();  // closes both unless a pool call or a worker still holds them
  }

  tocsin_db *first() { return is_tx ? main : fast; }
};

Handle *get_handle(const Napi::CallbackInfo &info, size_t i = 0) {
  Napi::Value v = info[i];
  if (!v.IsObject() || !v.As<Napi::Object>().InstanceOf(Handle::ctor(info.Env()).Value())) {
    throw_invalid(info.Env(), "expected a tocsin database or transaction handle");
    return nullptr;
  }
  Handle *h = Handle::Unwrap(v.As<Napi::Object>());
  if (!h->main) {
    throw_closed(info.Env(), h->is_tx ? "the transaction" : "the database");
    return nullptr;
  }
  return h;
}

// ---- operations ----

struct Op {
  Res r;
  virtual ~Op() {}
  virtual int run(tocsin_db *db) = 0;
  virtual Napi::Value result(Napi::Env env) = 0;
};

class OpWorker : public Napi::AsyncWorker {
 public:
  OpWorker(Napi::Env env, Handle *h, std::unique_ptr<Op> op)
      : Napi::AsyncWorker(env, "tocsin"), h_(h), op_(std::move(op)),
        deferred_(Napi::Promise::Deferred::New(env)), box_(h->box), db_(h->main) {
    ref_ = Napi::Persistent(h->Value());
    h->pending++;
  }
  Napi::Promise promise() { return deferred_.Promise(); }
  void Execute() override { capture(op_->r, op_->run(db_)); }
  void OnOK() override {
    Napi::Env env = Env();
    Napi::HandleScope scope(env);
    h_->pending--;
    if (!js_runs(env)) return;  // the environment is torn down: nobody awaits the promise
    if (op_->r.rc != TOCSIN_OK) {
      deferred_.Reject(make_error(env, op_->r));
    } else {
      Napi::Value v = op_->result(env);
      if (env.IsExceptionPending()) {
        Napi::Error e = env.GetAndClearPendingException();
        deferred_.Reject(e.Value());
      } else {
        deferred_.Resolve(v);
      }
    }
  }
  void OnError(const Napi::Error &e) override {
    h_->pending--;
    if (!js_runs(Env())) return;
    deferred_.Reject(e.Value());
  }

 private:
  Handle *h_;
  std::unique_ptr<Op> op_;
  Napi::Promise::Deferred deferred_;
  std::shared_ptr<DbBox> box_;  // db_ stays open while this runs
  tocsin_db *db_;
  Napi::ObjectReference ref_;
};

Napi::Value dispatch(Napi::Env env, Handle *h, std::unique_ptr<Op> op) {
  capture(op->r, op->run(h->first()));
  if (op->r.rc == TOCSIN_BUSY && !h->is_tx) {
    auto *w = new OpWorker(env, h, std::move(op));
    Napi::Promise p = w->promise();
    w->Queue();
    return p;
  }
  if (op->r.rc != TOCSIN_OK) return throw_res(env, op->r);
  return op->result(env);
}

// Always on the pool (a call that may wait on the lock: BEGIN IMMEDIATE).
Napi::Value dispatch_async(Napi::Env env, Handle *h, std::unique_ptr<Op> op) {
  auto *w = new OpWorker(env, h, std::move(op));
  Napi::Promise p = w->promise();
  w->Queue();
  return p;
}

#define OP_BEGIN(NAME)                                      \
  Napi::Value NAME(const Napi::CallbackInfo &info) {        \
    Napi::Env env = info.Env();                             \
    Handle *h = get_handle(info);                           \
    if (!h) return env.Undefined();                         \
    Args a(info);                                           \
    (void)a;
#define OP_END(OPVAR)                                       \
    if (!a.ok) return env.Undefined();                      \
    return dispatch(env, h, std::move(OPVAR));              \
  }

// generic op with lambdas
template <typename Run, typename Out>
struct LOp : Op {
  Run runf;
  Out outf;
  LOp(Run r, Out o) : runf(r), outf(o) {}
  int run(tocsin_db *db) override { return runf(db); }
  Napi::Value result(Napi::Env env) override { return outf(env); }
};
template <typename Run, typename Out>
std::unique_ptr<Op> mk(Run r, Out o) {
  return std::unique_ptr<Op>(new LOp<Run, Out>(r, o));
}

struct OkOut {
  std::shared_ptr<int> v = std::make_shared<int>(0);
};

// ---- database ----

Napi::Value Open(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (!ensure_api(env)) return env.Undefined();
  Args a(info);
  std::string path = a.str(0, "path");
  int busy = a.i32(1, "busyTimeout", 0, 2147483647);
  int64_t maxp = a.oi64(2, "maxPayload", 0);
  bool ro = a.flag(3);
  if (!a.ok) return env.Undefined();
  if (busy == 0) busy = 5000;
  tocsin_open_opts o = TOCSIN_OPEN_OPTS_INIT;
  o.busy_timeout_ms = busy;
  o.max_payload_bytes = maxp;
  o.read_only = ro;
  tocsin_db *db = nullptr, *fast = nullptr;
  Res r;
  capture(r, tocsin_open(&db, path.c_str(), &o));
  if (r.rc != TOCSIN_OK) {
    tocsin_close(db);
    return throw_res(env, r);
  }
  o.busy_timeout_ms = 1;
  capture(r, tocsin_open(&fast, path.c_str(), &o));
  if (r.rc != TOCSIN_OK) {
    tocsin_close(fast);
    tocsin_close(db);
    return throw_res(env, r);
  }
  Napi::Object obj = Handle::ctor(env).New({});
  Handle *h = Handle::Unwrap(obj);
  h->box = std::make_shared<DbBox>();
  h->box->main = h->main = db;
  h->box->fast = h->fast = fast;
  h->box->clock = std::make_shared<Clock>();
  h->reported = true;
  Napi::MemoryManagement::AdjustExternalMemory(env, Handle::kNativeBytes);
  return obj;
}

// Closes the native handles; JS has ended waits and awaited pool calls first.
Napi::Value Close(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Napi::Value v = info[0];
  if (!v.IsObject() || !v.As<Napi::Object>().InstanceOf(Handle::ctor(env).Value()))
    return throw_invalid(env, "expected a tocsin database handle");
  Handle *h = Handle::Unwrap(v.As<Napi::Object>());
  if (h->pending > 0) {
    // a pool call waiting for the write lock ends now (ClosedError), not at the end
    // of the busy timeout; close() polls until every pool call has returned
    if (!h->is_tx && h->main) {
      tocsin_close_begin(h->main);
      tocsin_close_begin(h->fast);
    }
    return Napi::Number::New(env, h->pending);
  }
  h->release();
  return Napi::Number::New(env, 0);
}

Napi::Value Pending(const Napi::CallbackInfo &info) {
  Handle *h = Handle::Unwrap(info[0].As<Napi::Object>());
  return Napi::Number::New(info.Env(), h->pending);
}

Napi::Value SetTime(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Handle *h = get_handle(info);
  if (!h || h->is_tx) return env.Undefined();
  Args a(info);
  if (is_nullish(info[1])) {
    tocsin_set_clock(h->main, nullptr, nullptr);
    tocsin_set_clock(h->fast, nullptr, nullptr);
    return env.Undefined();
  }
  int64_t t = a.i64(1, "time");
  if (!a.ok) return env.Undefined();
  if (t < 0 || t > TOCSIN_MAX_TIME_MS) return throw_invalid(env, "time must be between 0 and 253402300799999");
  Clock *c = h->box->clock.get();
  c->fixed.store(t);
  tocsin_set_clock(h->main, fixed_clock, c);
  tocsin_set_clock(h->fast, fixed_clock, c);
  return env.Undefined();
}

Napi::Value Now(const Napi::CallbackInfo &info) {
  Handle *h = get_handle(info);
  if (!h) return info.Env().Undefined();
  return js_num(info.Env(), tocsin_now(h->first()));
}

Napi::Value SetMaxPayload(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Handle *h = get_handle(info);
  if (!h || h->is_tx) return env.Undefined();
  Args a(info);
  int64_t n = a.i64(1, "maxPayload");
  if (!a.ok) return env.Undefined();
  Res r;
  capture(r, tocsin_set_max_payload(h->main, n));
  if (r.rc == TOCSIN_OK) capture(r, tocsin_set_max_payload(h->fast, n));
  if (r.rc) return throw_res(env, r);
  return env.Undefined();
}

OP_BEGIN(Exec)
  std::string sql = a.str(1, "sql");
  auto op = mk([sql](tocsin_db *db) { return tocsin_exec(db, sql.c_str()); },
               [](Napi::Env e) { return e.Undefined(); });
OP_END(op)

OP_BEGIN(CheckName)
  // the name's own refusals (NUL, a lone surrogate) name it as `what` does
  std::string what = a.str(1, "what");
  std::string name = a.str(2, a.ok ? what.c_str() : "name");
  auto op = mk([what, name](tocsin_db *db) { return tocsin_check_name(db, what.c_str(), name.c_str()); },
               [](Napi::Env e) { return e.Undefined(); });
OP_END(op)

// ---- transactions ----

// A core cancel token (tocsin_cancel) shared by its JS external and the ops bound
// to it: freed when both are done with it. cancelFire(c) from the main thread ends
// the lock wait of a txBegin running on the pool with it.
struct CancelBox {
  tocsin_cancel *c;
  CancelBox() : c(tocsin_cancel_new()) {}
  ~CancelBox() { tocsin_cancel_free(c); }
};

Napi::Value CancelNew(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  auto *box = new std::shared_ptr<CancelBox>(std::make_shared<CancelBox>());
  if (!(*box)->c) {
    delete box;
    Napi::Error::New(env, "out of memory").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  return Napi::External<std::shared_ptr<CancelBox>>::New(
      env, box, [](Napi::Env, std::shared_ptr<CancelBox> *b) { delete b; });
}

static std::shared_ptr<CancelBox> cancel_of(const Napi::Value &v) {
  if (!v.IsExternal()) return nullptr;
  return *v.As<Napi::External<std::shared_ptr<CancelBox>>>().Data();
}

Napi::Value CancelFire(const Napi::CallbackInfo &info) {
  auto box = cancel_of(info[0]);
  if (box) tocsin_cancel_fire(box->c);
  return info.Env().Undefined();
}

struct TxBegin : Op {
  tocsin_db *tx = nullptr;
  Handle *parent;
  std::shared_ptr<DbBox> box;
  std::shared_ptr<CancelBox> cancel;  // (may be null) bound to the thread for the BEGIN
  TxBegin(Handle *p, std::shared_ptr<CancelBox> c) : parent(p), box(p->box), cancel(std::move(c)) {}
  ~TxBegin() override {
    if (tx) tocsin_tx_rollback(tx);
  }
  int run(tocsin_db *db) override {
    tocsin_thread_cancel(cancel ? cancel->c : nullptr);
    int rc = tocsin_tx_begin(db, &tx);
    tocsin_thread_cancel(nullptr);
    return rc;
  }
  Napi::Value result(Napi::Env env) override {
    Napi::Object obj = Handle::ctor(env).New({});
    Handle *t = Handle::Unwrap(obj);
    t->is_tx = true;
    t->main = tx;
    t->box = box;  // the transaction copied the database's clock
    t->parent = Napi::Persistent(parent->Value());
    tx = nullptr;
    return obj;
  }
};

Napi::Value TxBeginFn(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Handle *h = get_handle(info);
  if (!h) return env.Undefined();
  if (h->is_tx) return throw_invalid(env, "transactions do not nest");
  // on the main handle (a worker's transactions must begin on the worker's handle)
  auto cancel = cancel_of(info[2]);
  if (info[1].ToBoolean().Value()) return dispatch_async(env, h, std::unique_ptr<Op>(new TxBegin(h, cancel)));
  return dispatch(env, h, std::unique_ptr<Op>(new TxBegin(h, cancel)));
}

Napi::Value TxEnd(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Handle *h = get_handle(info);
  if (!h) return env.Undefined();
  if (!h->is_tx) return throw_invalid(env, "not a transaction");
  bool commit = info[1].ToBoolean().Value();
  tocsin_db *tx = h->main;
  h->main = nullptr;
  h->parent.Reset();
  std::shared_ptr<DbBox> keep = std::move(h->box);  // until the end below
  Res r;
  capture(r, commit ? tocsin_tx_commit(tx) : tocsin_tx_rollback(tx));
  if (r.rc) return throw_res(env, r);
  return env.Undefined();
}

// ---- queue ----

struct EnqOpts {
  tocsin_enqueue_opts o = TOCSIN_ENQUEUE_OPTS_INIT;
  std::string unique, meta;
  bool has_unique = false, has_meta = false;
  // args: priority, delay, runAt, maxAttempts, expires, uniqueKey, meta
  void read(Args &a, size_t i) {
    o.priority = a.oi64(i, "priority", 0);
    o.delay_ms = a.oi64(i + 1, "delay", 0);
    o.run_at_ms = a.oi64(i + 2, "runAt", 0);
    int64_t ma = a.oi64(i + 3, "maxAttempts", 0);
    // 0 is the C API's "unset": a JS caller who says 0 gets the range error
    if (a.ok && (ma < 0 || ma > TOCSIN_MAX_ATTEMPTS || (ma == 0 && !is_nullish(a.info[i + 3])))) {
      a.ok = false;
      throw_invalid(a.info.Env(), "maxAttempts must be between 1 and 1000000");
    }
    o.max_attempts = (int)ma;
    o.expires_ms = a.oi64(i + 4, "expires", 0);
    unique = a.ostr(i + 5, "uniqueKey", has_unique);
    meta = a.ostr(i + 6, "meta", has_meta);
  }
  const tocsin_enqueue_opts *get() {
    o.unique_key = has_unique ? unique.c_str() : nullptr;
    o.meta = has_meta ? meta.c_str() : nullptr;
    return &o;
  }
};

// enqueue(handle, queue, payload[, priority, delay, runAt, maxAttempts, expires, uniqueKey,
// meta]): without the options (the common call) no option is read; the first try runs
// here on the stack, and only a BUSY one becomes a pool op.
Napi::Value Enqueue(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Handle *h = get_handle(info);
  if (!h) return env.Undefined();
  Args a(info);
  std::string q = a.str(1, "queue"), payload = a.str(2, "payload");
  EnqOpts eo0;
  if (info.Length() > 3) eo0.read(a, 3);
  if (!a.ok) return env.Undefined();
  int64_t id0 = 0;
  Res r;
  capture(r, tocsin_queue_enqueue(h->first(), &id0, q.c_str(), payload.c_str(), eo0.get()));
  if (r.rc == TOCSIN_OK) return js_num(env, id0);
  if (r.rc != TOCSIN_BUSY || h->is_tx) return throw_res(env, r);
  auto eo = std::make_shared<EnqOpts>(std::move(eo0));
  auto id = std::make_shared<int64_t>(0);
  auto op = mk([q = std::move(q), payload = std::move(payload), eo, id](tocsin_db *db) {
                 return tocsin_queue_enqueue(db, id.get(), q.c_str(), payload.c_str(), eo->get());
               },
               [id](Napi::Env e) { return js_num(e, *id); });
  return dispatch_async(env, h, std::move(op));
}

// One job of an enqueueMany batch, as the C call reads it.
struct BatchJob {
  std::string q, p;
  EnqOpts eo;
};

// The batch in one enqueue_many (all or none); resolves to the ids. `queue`,
// when given, is every job's queue (their own q is then left empty).
Napi::Value enqueue_batch(Napi::Env env, Handle *h, std::shared_ptr<std::vector<BatchJob>> jobs,
                          std::shared_ptr<std::string> queue = nullptr) {
  auto ids = std::make_shared<std::vector<int64_t>>(jobs->size());
  auto op = mk(
      [jobs, ids, queue](tocsin_db *db) {
        std::vector<tocsin_job_spec> v(jobs->size());
        for (size_t i = 0; i < v.size(); i++) {
          v[i].queue = queue ? queue->c_str() : (*jobs)[i].q.c_str();
          v[i].payload = (*jobs)[i].p.c_str();
          v[i].opts = (*jobs)[i].eo.get();
        }
        return tocsin_queue_enqueue_many(db, ids->data(), v.data(), v.size());
      },
      [ids](Napi::Env e) {
        Napi::Array a = Napi::Array::New(e, ids->size());
        for (size_t i = 0; i < ids->size(); i++) a.Set((uint32_t)i, js_num(e, (*ids)[i]));
        return a;
      });
  return dispatch(env, h, std::move(op));
}

// enqueueMany(handle, queue, payloads): jobs with a payload and no option (the
// common batch) travel as the queue's name and an array of payload texts.
Napi::Value EnqueuePlain(const Napi::CallbackInfo &info, Handle *h) {
  Napi::Env env = info.Env();
  if (!info[2].IsArray()) return throw_invalid(env, "payloads must be an array");
  Napi::Array arr = info[2].As<Napi::Array>();
  auto q = std::make_shared<std::string>();
  if (!c_string_arg(env, info[1], *q, "queue")) return env.Undefined();
  uint32_t n = arr.Length();
  auto jobs = std::make_shared<std::vector<BatchJob>>(n);
  for (uint32_t i = 0; i < n; i++) {
    Napi::Value v = arr.Get(i);
    const char *why = nullptr;
    if (!v.IsString()) return throw_invalid(env, "jobs[" + std::to_string(i) + "]: payload must be a string");
    if (!c_string(v, (*jobs)[i].p, why)) // the message is built only for a refusal
      return throw_invalid(env, "jobs[" + std::to_string(i) + "].payload " + why);
  }
  return enqueue_batch(env, h, std::move(jobs), std::move(q));
}

// specs: array of [queue, payload, priority, delay, runAt, maxAttempts, expires, uniqueKey, meta]
Napi::Value EnqueueMany(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Handle *h = get_handle(info);
  if (!h) return env.Undefined();
  if (info[1].IsString()) return EnqueuePlain(info, h);
  if (!info[1].IsArray()) return throw_invalid(env, "jobs must be an array");
  Napi::Array arr = info[1].As<Napi::Array>();
  auto specs = std::make_shared<std::vector<BatchJob>>(arr.Length());
  for (uint32_t i = 0; i < arr.Length(); i++) {
    Napi::Value v = arr.Get(i);
    if (!v.IsArray()) return throw_invalid(env, "each job spec must be an array");
    Napi::Array s = v.As<Napi::Array>();
    // build a fake CallbackInfo-less reader: read by hand
    Napi::Value qv = s.Get(0u), pv = s.Get(1u);
    if (!qv.IsString()) return throw_invalid(env, "jobs[" + std::to_string(i) + "]: queue must be a string");
    if (!pv.IsString()) return throw_invalid(env, "jobs[" + std::to_string(i) + "]: payload must be a string");
    std::string at = "jobs[" + std::to_string(i) + "].";
    if (!c_string_arg(env, qv, (*specs)[i].q, at + "queue") || !c_string_arg(env, pv, (*specs)[i].p, at + "payload"))
      return env.Undefined();
    EnqOpts &eo = (*specs)[i].eo;
    auto num = [&](uint32_t k, const char *what, int64_t &out) -> bool {
      Napi::Value x = s.Get(k);
      if (is_nullish(x)) return true;
      if (int64_of(x, out)) return true;
      throw_invalid(env, "jobs[" + std::to_string(i) + "]: " + what + " must be an integer");
      return false;
    };
    int64_t ma = 0;
    if (!num(2, "priority", eo.o.priority) || !num(3, "delay", eo.o.delay_ms) ||
        !num(4, "runAt", eo.o.run_at_ms) || !num(5, "maxAttempts", ma) ||
        !num(6, "expires", eo.o.expires_ms))
      return env.Undefined();
    if (ma < 0 || ma > TOCSIN_MAX_ATTEMPTS || (ma == 0 && !is_nullish(s.Get(5u))))
      return throw_invalid(env, "jobs[" + std::to_string(i) + "]: maxAttempts must be between 1 and 1000000");
    eo.o.max_attempts = (int)ma;
    Napi::Value uk = s.Get(7u), mt = s.Get(8u);
    if (!is_nullish(uk)) {
      if (!uk.IsString()) return throw_invalid(env, "jobs[" + std::to_string(i) + "].uniqueKey must be a string");
      if (!c_string_arg(env, uk, eo.unique, "jobs[" + std::to_string(i) + "].uniqueKey")) return env.Undefined();
      eo.has_unique = true;
    }
    if (!is_nullish(mt)) {
      if (!mt.IsString()) return throw_invalid(env, "jobs[" + std::to_string(i) + "].meta must be a string");
      if (!c_string_arg(env, mt, eo.meta, "jobs[" + std::to_string(i) + "].meta")) return env.Undefined();
      eo.has_meta = true;
    }
  }
  return enqueue_batch(env, h, std::move(specs));
}

struct Jobs {
  tocsin_job *jobs = nullptr;
  size_t n = 0;
  ~Jobs() { tocsin_jobs_free(jobs, n); }
  void reset() {
    tocsin_jobs_free(jobs, n);
    jobs = nullptr;
    n = 0;
  }
  Napi::Value js(Napi::Env e) {
    Napi::Array a = Napi::Array::New(e, n);
    for (size_t i = 0; i < n; i++) a.Set((uint32_t)i, js_job(e, jobs[i]));
    return a;
  }
};

OP_BEGIN(Claim)
  std::string q = a.str(1, "queue"), w = a.str(2, "workerId");
  int64_t max = a.i64(3, "count");
  int64_t vis = a.i64(4, "visibility");
  if (a.ok && (max < 1 || max > TOCSIN_MAX_BATCH)) return throw_invalid(env, "count must be between 1 and 10000");
  auto js = std::make_shared<Jobs>();
  auto op = mk([q, w, max, vis, js](tocsin_db *db) {
                 js->reset();
                 return tocsin_queue_claim(db, &js->jobs, &js->n, q.c_str(), w.c_str(), (size_t)max, vis);
               },
               [js](Napi::Env e) { return js->js(e); });
OP_END(op)

Napi::Value bool_out(Napi::Env e, int v) { return Napi::Boolean::New(e, v != 0); }

OP_BEGIN(Ack)
  int64_t id = a.i64(1, "id"), tok = a.i64(2, "token");
  auto ok = std::make_shared<int>(0);
  auto op = mk([id, tok, ok](tocsin_db *db) { return tocsin_job_ack(db, ok.get(), id, tok); },
               [ok](Napi::Env e) { return bool_out(e, *ok); });
OP_END(op)

OP_BEGIN(AckBatch)
  if (!info[1].IsArray() || !info[2].IsArray()) return throw_invalid(env, "jobs must be an array");
  Napi::Array ia = info[1].As<Napi::Array>(), ta = info[2].As<Napi::Array>();
  auto ids = std::make_shared<std::vector<int64_t>>();
  auto toks = std::make_shared<std::vector<int64_t>>();
  if (ia.Length() != ta.Length()) return throw_invalid(env, "jobs: one token per id");
  for (uint32_t i = 0; i < ia.Length(); i++) {
    Napi::Value iv = ia.Get(i), tv = ta.Get(i);
    std::string at = "jobs[" + std::to_string(i) + "]";
    // exact integers only: 1.5 must not become job 1, NaN must not become 0
    bool lossless = true;
    int64_t t = 0;
    if (tv.IsBigInt()) t = tv.As<Napi::BigInt>().Int64Value(&lossless);
    else return throw_invalid(env, at + ".token must be a bigint");
    if (!lossless) return throw_invalid(env, at + ".token must be a 64-bit signed integer");
    int64_t id = 0;
    if (!int64_of(iv, id)) return throw_invalid(env, at + ".id must be an integer");
    ids->push_back(id);
    toks->push_back(t);
  }
  auto n = std::make_shared<size_t>(0);
  auto op = mk([ids, toks, n](tocsin_db *db) {
                 return tocsin_job_ack_batch(db, n.get(), ids->data(), toks->data(), ids->size());
               },
               [n](Napi::Env e) { return js_num(e, (int64_t)*n); });
OP_END(op)

OP_BEGIN(Retry)
  int64_t id = a.i64(1, "id"), tok = a.i64(2, "token"), delay = a.oi64(3, "delay", -1);
  bool has = false;
  std::string err = a.ostr(4, "error", has);
  auto ok = std::make_shared<int>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_job_retry(db, ok.get(), id, tok, delay, has ? err.c_str() : nullptr); },
               [ok](Napi::Env e) { return bool_out(e, *ok); });
OP_END(op)

OP_BEGIN(Fail)
  int64_t id = a.i64(1, "id"), tok = a.i64(2, "token");
  bool has = false;
  std::string err = a.ostr(3, "error", has);
  auto ok = std::make_shared<int>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_job_fail(db, ok.get(), id, tok, has ? err.c_str() : nullptr); },
               [ok](Napi::Env e) { return bool_out(e, *ok); });
OP_END(op)

OP_BEGIN(Heartbeat)
  int64_t id = a.i64(1, "id"), tok = a.i64(2, "token"), ext = a.i64(3, "extend");
  auto ok = std::make_shared<int>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_job_heartbeat(db, ok.get(), id, tok, ext); },
               [ok](Napi::Env e) { return bool_out(e, *ok); });
OP_END(op)

OP_BEGIN(Complete)
  int64_t id = a.i64(1, "id"), tok = a.i64(2, "token");
  std::string v = a.str(3, "value");
  int64_t ttl = a.oi64(4, "ttl", 0);
  auto ok = std::make_shared<int>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_job_complete(db, ok.get(), id, tok, v.c_str(), ttl); },
               [ok](Napi::Env e) { return bool_out(e, *ok); });
OP_END(op)

OP_BEGIN(HandBack)
  int64_t id = a.i64(1, "id"), tok = a.i64(2, "token"), delay = a.oi64(3, "delay", 0);
  auto ok = std::make_shared<int>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_job_hand_back(db, ok.get(), id, tok, delay); },
               [ok](Napi::Env e) { return bool_out(e, *ok); });
OP_END(op)

OP_BEGIN(FailTask)
  int64_t id = a.i64(1, "id"), tok = a.i64(2, "token");
  std::string ty = a.str(3, "type");
  bool has = false;
  std::string m = a.ostr(4, "message", has);
  int64_t ttl = a.oi64(5, "ttl", 0);
  auto ok = std::make_shared<int>(0);
  auto op = mk([=](tocsin_db *db) {
                 return tocsin_job_fail_task(db, ok.get(), id, tok, ty.c_str(), has ? m.c_str() : nullptr, ttl);
               },
               [ok](Napi::Env e) { return bool_out(e, *ok); });
OP_END(op)

OP_BEGIN(Cancel)
  int64_t id = a.i64(1, "id");
  auto ok = std::make_shared<int>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_job_cancel(db, ok.get(), id); },
               [ok](Napi::Env e) { return bool_out(e, *ok); });
OP_END(op)

OP_BEGIN(Get)
  int64_t id = a.i64(1, "id");
  auto js = std::make_shared<Jobs>();
  auto op = mk([=](tocsin_db *db) {
                 js->reset();
                 int rc = tocsin_job_get(db, &js->jobs, id);
                 js->n = js->jobs ? 1 : 0;
                 return rc;
               },
               [js](Napi::Env e) -> Napi::Value { return js->n ? (Napi::Value)js_job(e, js->jobs[0]) : e.Null(); });
OP_END(op)

OP_BEGIN(Pause)
  std::string q = a.str(1, "queue");
  bool resume = a.flag(2);
  auto op = mk([=](tocsin_db *db) { return resume ? tocsin_queue_resume(db, q.c_str()) : tocsin_queue_pause(db, q.c_str()); },
               [](Napi::Env e) { return e.Undefined(); });
OP_END(op)

OP_BEGIN(IsPaused)
  std::string q = a.str(1, "queue");
  auto ok = std::make_shared<int>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_queue_is_paused(db, ok.get(), q.c_str()); },
               [ok](Napi::Env e) { return bool_out(e, *ok); });
OP_END(op)

struct Text {
  char *s = nullptr;
  ~Text() { tocsin_free(s); }
  void reset() {
    tocsin_free(s);
    s = nullptr;
  }
};

OP_BEGIN(Stats)
  bool has = false;
  std::string q = a.ostr(1, "queue", has);
  auto t = std::make_shared<Text>();
  auto op = mk([=](tocsin_db *db) {
                 t->reset();
                 return tocsin_queue_stats(db, &t->s, has ? q.c_str() : nullptr);
               },
               [t](Napi::Env e) { return js_str(e, t->s); });
OP_END(op)

OP_BEGIN(NextDeadline)
  auto qs = std::make_shared<std::vector<std::string>>(a.strs(1, "queues"));
  auto out = std::make_shared<int64_t>(-1);
  auto op = mk([=](tocsin_db *db) {
                 std::vector<const char *> v;
                 for (auto &s : *qs) v.push_back(s.c_str());
                 return tocsin_queue_next_deadline(db, out.get(), v.data(), v.size());
               },
               [out](Napi::Env e) { return js_num(e, *out); });
OP_END(op)

OP_BEGIN(DeadList)
  bool has = false;
  std::string q = a.ostr(1, "queue", has);
  int64_t after = a.oi64(2, "afterId", 0), limit = a.oi64(3, "limit", 100);
  if (a.ok && (limit < 1 || limit > TOCSIN_MAX_BATCH)) return throw_invalid(env, "limit must be between 1 and 10000");
  auto js = std::make_shared<Jobs>();
  auto op = mk([=](tocsin_db *db) {
                 js->reset();
                 return tocsin_dead_list(db, &js->jobs, &js->n, has ? q.c_str() : nullptr, after, (size_t)limit);
               },
               [js](Napi::Env e) { return js->js(e); });
OP_END(op)

OP_BEGIN(DeadRequeue)
  int64_t id = a.i64(1, "id");
  auto ok = std::make_shared<int>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_dead_requeue(db, ok.get(), id); },
               [ok](Napi::Env e) { return bool_out(e, *ok); });
OP_END(op)

OP_BEGIN(DeadPurge)
  bool has = false;
  std::string q = a.ostr(1, "queue", has);
  int64_t before = a.oi64(2, "before", 0);
  auto n = std::make_shared<int64_t>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_dead_purge(db, n.get(), has ? q.c_str() : nullptr, before); },
               [n](Napi::Env e) { return js_num(e, *n); });
OP_END(op)

// ---- streams and notifications ----

struct Msgs {
  tocsin_message *m = nullptr;
  size_t n = 0;
  ~Msgs() { tocsin_messages_free(m, n); }
  void reset() {
    tocsin_messages_free(m, n);
    m = nullptr;
    n = 0;
  }
};

OP_BEGIN(Publish)
  std::string t = a.str(1, "topic"), p = a.str(2, "payload");
  bool hk = false, hm = false;
  std::string k = a.ostr(3, "key", hk), m = a.ostr(4, "meta", hm);
  auto out = std::make_shared<int64_t>(0);
  auto op = mk([=](tocsin_db *db) {
                 return tocsin_stream_publish(db, out.get(), t.c_str(), p.c_str(), hk ? k.c_str() : nullptr,
                                              hm ? m.c_str() : nullptr);
               },
               [out](Napi::Env e) { return js_num(e, *out); });
OP_END(op)

OP_BEGIN(PublishMany)
  std::string t = a.str(1, "topic");
  auto ps = std::make_shared<std::vector<std::string>>(a.strs(2, "payloads"));
  bool has_keys = !is_nullish(info[3]);
  auto ks = std::make_shared<std::vector<std::string>>();
  auto knull = std::make_shared<std::vector<bool>>();
  if (a.ok && has_keys) {
    if (!info[3].IsArray()) return throw_invalid(env, "keys must be an array");
    Napi::Array ka = info[3].As<Napi::Array>();
    if (ka.Length() != ps->size()) return throw_invalid(env, "keys must have one key per payload");
    for (uint32_t i = 0; i < ka.Length(); i++) {
      Napi::Value v = ka.Get(i);
      if (is_nullish(v)) {
        ks->push_back("");
        knull->push_back(true);
      } else if (v.IsString()) {
        std::string k;
        if (!c_string_arg(env, v, k, "keys[" + std::to_string(i) + "]")) return env.Undefined();
        ks->push_back(std::move(k));
        knull->push_back(false);
      } else {
        return throw_invalid(env, "keys must be strings or null");
      }
    }
  }
  auto offs = std::make_shared<std::vector<int64_t>>(ps->size());
  auto op = mk([=](tocsin_db *db) {
                 std::vector<const char *> pv, kv;
                 for (auto &s : *ps) pv.push_back(s.c_str());
                 for (size_t i = 0; i < ks->size(); i++) kv.push_back((*knull)[i] ? nullptr : (*ks)[i].c_str());
                 return tocsin_stream_publish_many(db, offs->data(), t.c_str(), pv.data(),
                                                   has_keys ? kv.data() : nullptr, pv.size());
               },
               [offs](Napi::Env e) {
                 Napi::Array r = Napi::Array::New(e, offs->size());
                 for (size_t i = 0; i < offs->size(); i++) r.Set((uint32_t)i, js_num(e, (*offs)[i]));
                 return r;
               });
OP_END(op)

OP_BEGIN(StreamRead)
  std::string t = a.str(1, "topic");
  int64_t after = a.oi64(2, "after", 0), limit = a.oi64(3, "limit", 100);
  if (a.ok && (limit < 1 || limit > TOCSIN_MAX_BATCH)) return throw_invalid(env, "limit must be between 1 and 10000");
  auto ms = std::make_shared<Msgs>();
  auto op = mk([=](tocsin_db *db) {
                 ms->reset();
                 return tocsin_stream_read(db, &ms->m, &ms->n, t.c_str(), after, (size_t)limit);
               },
               [ms](Napi::Env e) { return js_msgs(e, ms->m, ms->n); });
OP_END(op)

OP_BEGIN(SaveOffset)
  std::string c = a.str(1, "consumer"), t = a.str(2, "topic");
  int64_t off = a.i64(3, "offset");
  auto out = std::make_shared<int64_t>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_stream_save_offset(db, out.get(), c.c_str(), t.c_str(), off); },
               [out](Napi::Env e) { return js_num(e, *out); });
OP_END(op)

OP_BEGIN(Offset)
  std::string c = a.str(1, "consumer"), t = a.str(2, "topic");
  auto out = std::make_shared<int64_t>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_stream_offset(db, out.get(), c.c_str(), t.c_str()); },
               [out](Napi::Env e) { return js_num(e, *out); });
OP_END(op)

OP_BEGIN(Trim)
  std::string t = a.str(1, "topic");
  tocsin_trim_opts o = TOCSIN_TRIM_OPTS_INIT;
  o.max_age_ms = a.oi64(2, "maxAge", 0);
  o.max_count = a.oi64(3, "maxCount", 0);
  o.below_consumers = a.flag(4);
  auto out = std::make_shared<int64_t>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_stream_trim(db, out.get(), t.c_str(), &o); },
               [out](Napi::Env e) { return js_num(e, *out); });
OP_END(op)

OP_BEGIN(Notify)
  std::string c = a.str(1, "channel"), p = a.str(2, "payload");
  bool hm = false;
  std::string m = a.ostr(3, "meta", hm);
  auto out = std::make_shared<int64_t>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_notify(db, out.get(), c.c_str(), p.c_str(), hm ? m.c_str() : nullptr); },
               [out](Napi::Env e) { return js_num(e, *out); });
OP_END(op)

OP_BEGIN(NotifyRead)
  std::string c = a.str(1, "channel");
  int64_t after = a.oi64(2, "afterId", 0), limit = a.oi64(3, "limit", 100);
  if (a.ok && (limit < 1 || limit > TOCSIN_MAX_BATCH)) return throw_invalid(env, "limit must be between 1 and 10000");
  auto ms = std::make_shared<Msgs>();
  auto op = mk([=](tocsin_db *db) {
                 ms->reset();
                 return tocsin_notify_read(db, &ms->m, &ms->n, c.c_str(), after, (size_t)limit);
               },
               [ms](Napi::Env e) { return js_msgs(e, ms->m, ms->n); });
OP_END(op)

OP_BEGIN(NotifyMaxId)
  auto out = std::make_shared<int64_t>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_notify_max_id(db, out.get()); },
               [out](Napi::Env e) { return js_num(e, *out); });
OP_END(op)

OP_BEGIN(NotifyPrune)
  int64_t age = a.oi64(1, "maxAge", 0), keep = a.oi64(2, "maxKeep", 0);
  auto out = std::make_shared<int64_t>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_notify_prune(db, out.get(), age, keep); },
               [out](Napi::Env e) { return js_num(e, *out); });
OP_END(op)

OP_BEGIN(NotifyAutotrim)
  int64_t age = a.oi64(1, "maxAge", 0), keep = a.oi64(2, "maxKeep", 0), one = a.oi64(3, "oneIn", 0);
  auto op = mk([=](tocsin_db *db) { return tocsin_notify_set_autotrim(db, age, keep, one); },
               [](Napi::Env e) { return e.Undefined(); });
OP_END(op)

// ---- results ----

struct ResultBox {
  tocsin_result *r = nullptr;
  ~ResultBox() { tocsin_result_free(r); }
  void reset() {
    tocsin_result_free(r);
    r = nullptr;
  }
};

OP_BEGIN(ResultSave)
  int64_t id = a.i64(1, "jobId");
  std::string v = a.str(2, "value");
  int64_t ttl = a.oi64(3, "ttl", 0);
  auto op = mk([=](tocsin_db *db) { return tocsin_result_save(db, id, v.c_str(), ttl); },
               [](Napi::Env e) { return e.Undefined(); });
OP_END(op)

OP_BEGIN(ResultSaveError)
  int64_t id = a.i64(1, "jobId");
  std::string ty = a.str(2, "type");
  bool hm = false;
  std::string m = a.ostr(3, "message", hm);
  int64_t ttl = a.oi64(4, "ttl", 0);
  auto op = mk([=](tocsin_db *db) { return tocsin_result_save_error(db, id, ty.c_str(), hm ? m.c_str() : nullptr, ttl); },
               [](Napi::Env e) { return e.Undefined(); });
OP_END(op)

OP_BEGIN(ResultGet)
  int64_t id = a.i64(1, "jobId");
  bool check = a.flag(2);
  auto b = std::make_shared<ResultBox>();
  auto op = mk([=](tocsin_db *db) {
                 b->reset();
                 return check ? tocsin_result_check(db, &b->r, id) : tocsin_result_get(db, &b->r, id);
               },
               [b](Napi::Env e) { return js_result(e, b->r); });
OP_END(op)

OP_BEGIN(ResultDelete)
  int64_t id = a.i64(1, "jobId");
  auto ok = std::make_shared<int>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_result_delete(db, ok.get(), id); },
               [ok](Napi::Env e) { return bool_out(e, *ok); });
OP_END(op)

OP_BEGIN(ResultSweep)
  auto out = std::make_shared<int64_t>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_result_sweep(db, out.get()); },
               [out](Napi::Env e) { return js_num(e, *out); });
OP_END(op)

// ---- locks, rate limits ----

OP_BEGIN(LockAcquire)
  std::string n = a.str(1, "name"), o = a.str(2, "owner");
  int64_t ttl = a.i64(3, "ttl");
  auto tok = std::make_shared<int64_t>(0), until = std::make_shared<int64_t>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_lock_acquire(db, tok.get(), until.get(), n.c_str(), o.c_str(), ttl); },
               [=](Napi::Env e) {
                 Napi::Object r = Napi::Object::New(e);
                 r.Set("token", js_num(e, *tok));
                 r.Set("until", js_num(e, *until));
                 return r;
               });
OP_END(op)

OP_BEGIN(LockRenew)
  std::string n = a.str(1, "name"), o = a.str(2, "owner");
  int64_t tok = a.i64(3, "token"), ttl = a.i64(4, "ttl");
  auto ok = std::make_shared<int>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_lock_renew(db, ok.get(), n.c_str(), o.c_str(), tok, ttl); },
               [ok](Napi::Env e) { return bool_out(e, *ok); });
OP_END(op)

OP_BEGIN(LockRelease)
  std::string n = a.str(1, "name"), o = a.str(2, "owner");
  int64_t tok = a.i64(3, "token");
  auto ok = std::make_shared<int>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_lock_release(db, ok.get(), n.c_str(), o.c_str(), tok); },
               [ok](Napi::Env e) { return bool_out(e, *ok); });
OP_END(op)

OP_BEGIN(LockHolder)
  std::string n = a.str(1, "name");
  auto t = std::make_shared<Text>();
  auto tok = std::make_shared<int64_t>(0), until = std::make_shared<int64_t>(0);
  auto op = mk([=](tocsin_db *db) {
                 t->reset();
                 return tocsin_lock_holder(db, &t->s, tok.get(), until.get(), n.c_str());
               },
               [=](Napi::Env e) {
                 Napi::Object r = Napi::Object::New(e);
                 r.Set("owner", js_str(e, t->s));
                 r.Set("token", js_num(e, *tok));
                 r.Set("until", js_num(e, *until));
                 return r;
               });
OP_END(op)

OP_BEGIN(RateTry)
  std::string n = a.str(1, "name");
  int64_t lim = a.i64(2, "limit"), per = a.i64(3, "per");
  auto al = std::make_shared<int>(0);
  auto ra = std::make_shared<int64_t>(0), rem = std::make_shared<int64_t>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_ratelimit_try(db, al.get(), ra.get(), rem.get(), n.c_str(), lim, per); },
               [=](Napi::Env e) {
                 Napi::Object r = Napi::Object::New(e);
                 r.Set("allowed", bool_out(e, *al));
                 r.Set("retryAfter", js_num(e, *ra));
                 r.Set("remaining", js_num(e, *rem));
                 return r;
               });
OP_END(op)

OP_BEGIN(RateSweep)
  auto out = std::make_shared<int64_t>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_ratelimit_sweep(db, out.get()); },
               [out](Napi::Env e) { return js_num(e, *out); });
OP_END(op)

OP_BEGIN(RateReset)
  std::string n = a.str(1, "name");
  auto out = std::make_shared<int64_t>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_ratelimit_reset(db, out.get(), n.c_str()); },
               [out](Napi::Env e) { return js_num(e, *out); });
OP_END(op)

// ---- schedules ----

struct SchedOpts {
  tocsin_schedule_opts o = TOCSIN_SCHEDULE_OPTS_INIT;
  std::string meta;
  bool has_meta = false;
  // obj fields: priority, maxAttempts, jobExpires, catchUp ('once'|'all'), maxCatchUp, localTime, meta (JSON text)
  bool read(Napi::Env env, Napi::Value v, bool update) {
    if (is_nullish(v)) return true;
    if (!v.IsObject()) {
      throw_invalid(env, "options must be an object");
      return false;
    }
    Napi::Object ob = v.As<Napi::Object>();
    auto num = [&](const char *k, int64_t &out, unsigned flag) -> bool {
      if (!ob.Has(k)) return true;
      Napi::Value x = ob.Get(k);
      if (x.IsUndefined()) return true;
      if (!int64_of(x, out)) {
        throw_invalid(env, std::string(k) + " must be an integer");
        return false;
      }
      if (update) o.fields |= flag;
      return true;
    };
    int64_t ma = 0, mcu = 0;
    if (!num("priority", o.priority, TOCSIN_SCHEDULE_PRIORITY)) return false;
    if (!num("maxAttempts", ma, TOCSIN_SCHEDULE_MAX_ATTEMPTS)) return false;
    if (!num("jobExpires", o.job_expires_ms, TOCSIN_SCHEDULE_JOB_EXPIRES)) return false;
    if (!num("maxCatchUp", mcu, TOCSIN_SCHEDULE_MAX_CATCH_UP)) return false;
    if (ma < 0 || ma > TOCSIN_MAX_ATTEMPTS) {
      throw_invalid(env, "maxAttempts must be between 1 and 1000000");
      return false;
    }
    if (mcu < 0 || mcu > TOCSIN_MAX_CATCH_UP) {
      throw_invalid(env, "maxCatchUp must be between 1 and 100000");
      return false;
    }
    o.max_attempts = (int)ma;
    o.max_catch_up = (int)mcu;
    if (ob.Has("catchUp") && !ob.Get("catchUp").IsUndefined()) {
      Napi::Value c = ob.Get("catchUp");
      std::string s = c.IsString() ? c.As<Napi::String>().Utf8Value() : "";
      if (s == "once") o.catch_up = TOCSIN_CATCHUP_ONCE;
      else if (s == "all") o.catch_up = TOCSIN_CATCHUP_ALL;
      else {
        throw_invalid(env, "catchUp must be 'once' or 'all'");
        return false;
      }
      if (update) o.fields |= TOCSIN_SCHEDULE_CATCH_UP;
    }
    if (ob.Has("localTime") && !ob.Get("localTime").IsUndefined()) {
      o.local_time = ob.Get("localTime").ToBoolean().Value();
      if (update) o.fields |= TOCSIN_SCHEDULE_LOCAL_TIME;
    }
    if (ob.Has("meta") && !ob.Get("meta").IsUndefined()) {
      Napi::Value m = ob.Get("meta");
      if (!m.IsNull()) {
        if (!m.IsString()) {
          throw_invalid(env, "meta must be JSON text");
          return false;
        }
        if (!c_string_arg(env, m, meta, "meta")) return false;
        has_meta = true;
      }
      if (update) o.fields |= TOCSIN_SCHEDULE_META;
    }
    return true;
  }
  const tocsin_schedule_opts *get() {
    o.meta = has_meta ? meta.c_str() : nullptr;
    return &o;
  }
};

OP_BEGIN(ScheduleSet)
  std::string n = a.str(1, "name"), c = a.str(2, "cron"), q = a.str(3, "queue"), p = a.str(4, "payload");
  auto so = std::make_shared<SchedOpts>();
  if (a.ok && !so->read(env, info[5], false)) return env.Undefined();
  auto out = std::make_shared<int64_t>(0);
  auto op = mk([=](tocsin_db *db) {
                 return tocsin_schedule_set(db, out.get(), n.c_str(), c.c_str(), q.c_str(), p.c_str(), so->get());
               },
               [out](Napi::Env e) { return js_num(e, *out); });
OP_END(op)

OP_BEGIN(ScheduleUpdate)
  std::string n = a.str(1, "name");
  bool hc = false, hq = false, hp = false;
  std::string c = a.ostr(2, "cron", hc), q = a.ostr(3, "queue", hq), p = a.ostr(4, "payload", hp);
  auto so = std::make_shared<SchedOpts>();
  if (a.ok && !so->read(env, info[5], true)) return env.Undefined();
  auto out = std::make_shared<int64_t>(0);
  auto op = mk([=](tocsin_db *db) {
                 return tocsin_schedule_update(db, out.get(), n.c_str(), hc ? c.c_str() : nullptr,
                                               hq ? q.c_str() : nullptr, hp ? p.c_str() : nullptr, so->get());
               },
               [out](Napi::Env e) { return js_num(e, *out); });
OP_END(op)

OP_BEGIN(SchedulePause)
  std::string n = a.str(1, "name");
  bool resume = a.flag(2);
  auto op = mk([=](tocsin_db *db) { return resume ? tocsin_schedule_resume(db, n.c_str()) : tocsin_schedule_pause(db, n.c_str()); },
               [](Napi::Env e) { return e.Undefined(); });
OP_END(op)

OP_BEGIN(ScheduleRemove)
  std::string n = a.str(1, "name");
  auto ok = std::make_shared<int>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_schedule_remove(db, ok.get(), n.c_str()); },
               [ok](Napi::Env e) { return bool_out(e, *ok); });
OP_END(op)

struct Scheds {
  tocsin_schedule *s = nullptr;
  size_t n = 0;
  ~Scheds() { tocsin_schedules_free(s, n); }
  void reset() {
    tocsin_schedules_free(s, n);
    s = nullptr;
    n = 0;
  }
};

OP_BEGIN(ScheduleGet)
  std::string n = a.str(1, "name");
  auto b = std::make_shared<Scheds>();
  auto op = mk([=](tocsin_db *db) {
                 b->reset();
                 int rc = tocsin_schedule_get(db, &b->s, n.c_str());
                 b->n = b->s ? 1 : 0;
                 return rc;
               },
               [b](Napi::Env e) -> Napi::Value { return b->n ? (Napi::Value)js_schedule(e, b->s[0]) : e.Null(); });
OP_END(op)

OP_BEGIN(ScheduleList)
  auto b = std::make_shared<Scheds>();
  auto op = mk([=](tocsin_db *db) {
                 b->reset();
                 return tocsin_schedule_list(db, &b->s, &b->n);
               },
               [b](Napi::Env e) {
                 Napi::Array r = Napi::Array::New(e, b->n);
                 for (size_t i = 0; i < b->n; i++) r.Set((uint32_t)i, js_schedule(e, b->s[i]));
                 return r;
               });
OP_END(op)

OP_BEGIN(SchedulerTick)
  auto out = std::make_shared<int64_t>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_scheduler_tick(db, out.get()); },
               [out](Napi::Env e) { return js_num(e, *out); });
OP_END(op)

OP_BEGIN(SchedulerNextFire)
  auto out = std::make_shared<int64_t>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_scheduler_next_fire(db, out.get()); },
               [out](Napi::Env e) { return js_num(e, *out); });
OP_END(op)

OP_BEGIN(SchedulerLead)
  std::string o = a.str(1, "owner");
  int64_t ttl = a.i64(2, "ttl");
  auto lead = std::make_shared<int>(0);
  auto tok = std::make_shared<int64_t>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_scheduler_lead(db, lead.get(), tok.get(), o.c_str(), ttl); },
               [=](Napi::Env e) {
                 Napi::Object r = Napi::Object::New(e);
                 r.Set("leader", bool_out(e, *lead));
                 r.Set("token", js_num(e, *tok));
                 return r;
               });
OP_END(op)

OP_BEGIN(SchedulerResign)
  std::string o = a.str(1, "owner");
  auto ok = std::make_shared<int>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_scheduler_resign(db, ok.get(), o.c_str()); },
               [ok](Napi::Env e) { return bool_out(e, *ok); });
OP_END(op)

// ---- tasks ----

struct TaskCall {
  tocsin_task_call c = TOCSIN_TASK_CALL_INIT;
  std::string task, args, kwargs;
  // args: task, argsJSON, kwargsJSON, resultTtl, timeout
  void read(Args &a, size_t i) {
    task = a.str(i, "task name");
    args = a.str(i + 1, "args");
    kwargs = a.str(i + 2, "kwargs");
    c.result_ttl_ms = a.oi64(i + 3, "resultTtl", 0);
    c.timeout_ms = a.oi64(i + 4, "timeout", 0);
  }
  const tocsin_task_call *get() {
    c.task = task.c_str();
    c.args = args.c_str();
    c.kwargs = kwargs.c_str();
    return &c;
  }
};

#ifdef TOCSIN_NODE_WORKER
OP_BEGIN(TaskEnvelope)
  auto tc = std::make_shared<TaskCall>();
  tc->read(a, 1);
  auto t = std::make_shared<Text>();
  auto op = mk([=](tocsin_db *db) {
                 t->reset();
                 return tocsin_task_envelope(db, &t->s, tc->get());
               },
               [t](Napi::Env e) { return js_str(e, t->s); });
OP_END(op)

OP_BEGIN(TaskEnqueue)
  std::string q = a.str(1, "queue");
  auto tc = std::make_shared<TaskCall>();
  tc->read(a, 2);
  auto eo = std::make_shared<EnqOpts>();
  eo->read(a, 7);
  auto id = std::make_shared<int64_t>(0);
  auto op = mk([=](tocsin_db *db) { return tocsin_task_enqueue(db, id.get(), q.c_str(), tc->get(), eo->get()); },
               [id](Napi::Env e) { return js_num(e, *id); });
OP_END(op)
#endif

Napi::Value CronNext(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Args a(info);
  std::string expr = a.str(0, "cron");
  int64_t after = a.i64(1, "after");
  bool local = a.flag(2);
  if (!a.ok) return env.Undefined();
  tocsin_cron *c = nullptr;
  char err[256] = {0};
  int rc = tocsin_cron_parse(&c, expr.c_str(), err, sizeof err);
  if (rc != TOCSIN_OK) {
    Res r;
    r.rc = rc;
    r.msg = err[0] ? err : tocsin_errstr(rc);
    return throw_res(env, r);
  }
  int64_t next = -1;
  rc = tocsin_cron_next(&next, c, after, local);
  tocsin_cron_free(c);
  if (rc == TOCSIN_NOTFOUND) return env.Null();
  if (rc != TOCSIN_OK) return throw_res(env, Res{rc, 0, tocsin_errstr(rc)});
  return js_num(env, next);
}

// ---- waits: subscriptions, listeners, stream subscriptions ----

// A raw subscription, closed when the last holder lets go: its Waiter (until
// close() or the finalizer) and each queue, result or lock wait step running
// on the pool with it as the wait's `sub`. So closing the Waiter (or
// collecting it) while such a step runs never frees the subscription under it.
struct SubBox {
  tocsin_sub *sub = nullptr;
  ~SubBox() { tocsin_sub_close(sub); }
};

// A subscription (the raw wake), a listener or a stream subscription; the fd
// is polled from JS through a Poller.
class Waiter : public Napi::ObjectWrap<Waiter> {
 public:
  static Napi::FunctionReference &ctor(Napi::Env env) { return env_data(env).waiter_ctor; }
  enum Kind { SUB, LISTEN, STREAM } kind = SUB;
  tocsin_sub *sub = nullptr;  // subbox->sub while open
  std::shared_ptr<SubBox> subbox;
  tocsin_listener *lis = nullptr;
  tocsin_stream_sub *ss = nullptr;
  std::shared_ptr<Clock> clock;  // a stream subscription reads its database's clock

  static Napi::Function Init(Napi::Env env) {
    Napi::Function f = DefineClass(env, "Waiter",
                                   {InstanceMethod("fd", &Waiter::Fd), InstanceMethod("next", &Waiter::Next),
                                    InstanceMethod("poke", &Waiter::Poke), InstanceMethod("close", &Waiter::Close),
                                    InstanceMethod("dropped", &Waiter::Dropped),
                                    InstanceMethod("position", &Waiter::Position),
                                    InstanceMethod("save", &Waiter::Save),
                                    InstanceMethod("rewind", &Waiter::Rewind),
                                    InstanceMethod("handed", &Waiter::Handed)});
    ctor(env) = Napi::Persistent(f);
    return f;
  }
  // A for-await loop of lib/index.js mid-batch: the last event it handed on (-1: the
  // whole batch the core handed out was, or none was read yet).
  int64_t handed = -1;
  explicit Waiter(const Napi::CallbackInfo &info) : Napi::ObjectWrap<Waiter>(info) {}
  // Collected without close() -- the loop never ended: its body still awaited when the
  // process ran out of work, or the subscription was dropped -- a stream subscription
  // saves no event the loop did not hand on (the core's position is the batch's end).
  ~Waiter() override {
    if (ss && handed >= 0) tocsin_stream_sub_rewind(ss, handed);
    close();
  }
  int close() {
    int rc = TOCSIN_OK;
    // a step on the pool still holding the subscription ends first (it is poked; its
    // wait is non-blocking anyway) and the subscription closes when it lets go
    if (sub && subbox.use_count() > 1) tocsin_sub_poke(sub);
    subbox.reset();
    if (lis) tocsin_listen_close(lis);
    if (ss) rc = tocsin_stream_sub_close(ss);
    sub = nullptr;
    lis = nullptr;
    ss = nullptr;
    return rc;
  }
  bool open() const { return sub || lis || ss; }
  Napi::Value Fd(const Napi::CallbackInfo &info) {
    int fd = kind == SUB ? tocsin_sub_fd(sub) : kind == LISTEN ? tocsin_listen_fd(lis) : tocsin_stream_sub_fd(ss);
    return Napi::Number::New(info.Env(), fd);
  }
  // Non-blocking: SUB -> true/false (woken); LISTEN/STREAM -> array of
  // messages or null (nothing yet). Any other ending throws.
  Napi::Value Next(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    if (!open()) return throw_closed(env, "the subscription");
    Res r;
    if (kind == SUB) {
      int woken = 0;
      capture(r, tocsin_sub_drain(sub, &woken));
      if (r.rc) return throw_res(env, r);
      return Napi::Boolean::New(env, woken != 0);
    }
    tocsin_message *m = nullptr;
    size_t n = 0;
    capture(r, kind == LISTEN ? tocsin_listen_next(lis, &m, &n, 0) : tocsin_stream_sub_next(ss, &m, &n, 0));
    if (n) handed = -1;
    if (r.rc == TOCSIN_TIMEOUT) return env.Null();
    if (r.rc) return throw_res(env, r);
    Napi::Value v = js_msgs(env, m, n);
    tocsin_messages_free(m, n);
    return v;
  }
  Napi::Value Poke(const Napi::CallbackInfo &info) {
    if (sub) tocsin_sub_poke(sub);
    if (lis) tocsin_listen_poke(lis);
    if (ss) tocsin_stream_sub_poke(ss);
    return info.Env().Undefined();
  }
  Napi::Value Close(const Napi::CallbackInfo &info) {
    Res r;
    capture(r, close());
    if (r.rc) return throw_res(info.Env(), r);
    return info.Env().Undefined();
  }
  Napi::Value Dropped(const Napi::CallbackInfo &info) {
    return js_num(info.Env(), lis ? tocsin_listen_dropped(lis) : 0);
  }
  Napi::Value Position(const Napi::CallbackInfo &info) {
    return js_num(info.Env(), ss ? tocsin_stream_sub_position(ss) : 0);
  }
  // An iteration that stopped mid-batch: the position goes back to the last
  // event handed on (what close then saves).
  Napi::Value Rewind(const Napi::CallbackInfo &info) {
    if (!ss) return throw_closed(info.Env(), "the subscription");
    Args a(info);
    int64_t off = a.i64(0, "offset");
    if (!a.ok) return info.Env().Undefined();
    Res r;
    capture(r, tocsin_stream_sub_rewind(ss, off));
    if (r.rc) return throw_res(info.Env(), r);
    return info.Env().Undefined();
  }
  // The for-await loop hands on the event at `offset` (of the last batch).
  Napi::Value Handed(const Napi::CallbackInfo &info) {
    Args a(info);
    int64_t off = a.i64(0, "offset");
    if (!a.ok) return info.Env().Undefined();
    handed = off;
    return info.Env().Undefined();
  }
  Napi::Value Save(const Napi::CallbackInfo &info) {
    if (!ss) return throw_closed(info.Env(), "the subscription");
    Res r;
    capture(r, tocsin_stream_sub_save(ss));
    if (r.rc) return throw_res(info.Env(), r);
    return info.Env().Undefined();
  }
};

Napi::Value SubOpen(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Handle *h = get_handle(info);
  if (!h) return env.Undefined();
  tocsin_sub *s = nullptr;
  Res r;
  capture(r, tocsin_sub_open(&s, h->is_tx ? h->main : h->fast));
  if (r.rc) return throw_res(env, r);
  Napi::Object o = Waiter::ctor(env).New({});
  Waiter *w = Waiter::Unwrap(o);
  w->kind = Waiter::SUB;
  w->subbox = std::make_shared<SubBox>();
  w->subbox->sub = w->sub = s;
  return o;
}

Napi::Value ListenOpen(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Handle *h = get_handle(info);
  if (!h) return env.Undefined();
  Args a(info);
  std::string ch = a.str(1, "channel");
  int64_t buf = a.oi64(2, "bufferSize", 1000);
  if (!a.ok) return env.Undefined();
  if (buf < 1 || buf > TOCSIN_MAX_BATCH) return throw_invalid(env, "bufferSize must be between 1 and 10000");
  tocsin_listener *l = nullptr;
  Res r;
  capture(r, tocsin_listen_open(&l, h->fast, ch.c_str(), (size_t)buf));
  if (r.rc) return throw_res(env, r);
  Napi::Object o = Waiter::ctor(env).New({});
  Waiter *w = Waiter::Unwrap(o);
  w->kind = Waiter::LISTEN;
  w->lis = l;
  return o;
}

Napi::Value StreamSubOpen(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Handle *h = get_handle(info);
  if (!h) return env.Undefined();
  Args a(info);
  std::string t = a.str(1, "topic");
  bool hc = false;
  std::string c = a.ostr(2, "consumer", hc);
  tocsin_stream_sub_opts o = TOCSIN_STREAM_SUB_OPTS_INIT;
  o.from_offset = a.oi64(3, "fromOffset", -1);
  int64_t batch = a.oi64(4, "batch", 0);
  o.autosave_every = a.oi64(5, "autosaveEvery", 0);
  o.autosave_ms = a.oi64(6, "autosaveMs", 0);
  // the core saves the consumer's offset at close (validated by lib/index.js)
  o.save_on_close = info.Length() > 7 && info[7].IsBoolean() && info[7].As<Napi::Boolean>().Value();
  if (!a.ok) return env.Undefined();
  if (batch < 0 || batch > TOCSIN_MAX_BATCH) return throw_invalid(env, "batch must be between 1 and 10000");
  o.batch = (size_t)batch;
  tocsin_stream_sub *s = nullptr;
  Res r;
  // on the fast handle: its saves (autosave, inside next()) run on the main thread and
  // never block it for long (a BusyError there is retried at the next call)
  capture(r, tocsin_stream_sub_open(&s, h->fast, t.c_str(), hc ? c.c_str() : nullptr, &o));
  if (r.rc) return throw_res(env, r);
  Napi::Object ob = Waiter::ctor(env).New({});
  Waiter *w = Waiter::Unwrap(ob);
  w->kind = Waiter::STREAM;
  w->ss = s;
  w->clock = h->box->clock;
  return ob;
}


// ---- one non-blocking step of a core wait (deadline 0: check once) ----
// TOCSIN_TIMEOUT (not yet) gives null; the waiter's subscription is the
// wait's `sub` (its pending wake is consumed by the step).
Waiter *get_sub(const Napi::CallbackInfo &info, size_t i) {
  Napi::Value v = info[i];
  if (!v.IsObject() || !v.As<Napi::Object>().InstanceOf(Waiter::ctor(info.Env()).Value())) {
    throw_invalid(info.Env(), "expected a subscription");
    return nullptr;
  }
  Waiter *w = Waiter::Unwrap(v.As<Napi::Object>());
  if (!w->sub) {
    throw_closed(info.Env(), "the subscription");
    return nullptr;
  }
  return w;
}

template <typename Run, typename Out>
struct StepOp : Op {
  Run runf;
  Out outf;
  StepOp(Run r, Out o) : runf(r), outf(o) {}
  int run(tocsin_db *db) override {
    int rc = runf(db);
    timed_out = rc == TOCSIN_TIMEOUT;
    return timed_out ? TOCSIN_OK : rc;
  }
  bool timed_out = false;
  Napi::Value result(Napi::Env env) override { return timed_out ? env.Null() : outf(env); }
};
template <typename Run, typename Out>
std::unique_ptr<Op> mkstep(Run r, Out o) {
  return std::unique_ptr<Op>(new StepOp<Run, Out>(r, o));
}

OP_BEGIN(QueueWaitStep)
  auto qs = std::make_shared<std::vector<std::string>>(a.strs(1, "queues"));
  Waiter *w = a.ok ? get_sub(info, 2) : nullptr;
  if (!w) return env.Undefined();
  std::shared_ptr<SubBox> sb = w->subbox;  // open while the step runs
  auto op = mkstep([=](tocsin_db *db) {
                     std::vector<const char *> v;
                     for (auto &s : *qs) v.push_back(s.c_str());
                     return tocsin_queue_wait(db, v.data(), v.size(), 0, sb->sub);
                   },
                   [](Napi::Env e) { return Napi::Boolean::New(e, true); });
OP_END(op)

// `last` (the wait's deadline has passed): the check's TOCSIN_TIMEOUT is kept, a
// TimeoutError whose message says what the job is doing (never claimed, running,
// retrying).
OP_BEGIN(ResultWaitStep)
  int64_t id = a.i64(1, "jobId");
  Waiter *w = a.ok ? get_sub(info, 2) : nullptr;
  if (!w) return env.Undefined();
  bool last = a.flag(3);
  std::shared_ptr<SubBox> sb = w->subbox;
  auto b = std::make_shared<ResultBox>();
  auto runf = [=](tocsin_db *db) {
    b->reset();
    return tocsin_result_wait(db, &b->r, id, 0, sb->sub);
  };
  auto outf = [b](Napi::Env e) { return js_result(e, b->r); };
  std::unique_ptr<Op> op = last ? mk(runf, outf) : mkstep(runf, outf);
OP_END(op)

OP_BEGIN(LockWaitStep)
  std::string n = a.str(1, "name"), o = a.str(2, "owner");
  int64_t ttl = a.i64(3, "ttl");
  Waiter *w = a.ok ? get_sub(info, 4) : nullptr;
  if (!w) return env.Undefined();
  std::shared_ptr<SubBox> sb = w->subbox;
  auto tok = std::make_shared<int64_t>(0), until = std::make_shared<int64_t>(0);
  auto op = mkstep([=](tocsin_db *db) {
                     return tocsin_lock_wait(db, tok.get(), until.get(), n.c_str(), o.c_str(), ttl, 0, sb->sub);
                   },
                   [=](Napi::Env e) {
                     Napi::Object r = Napi::Object::New(e);
                     r.Set("token", js_num(e, *tok));
                     r.Set("until", js_num(e, *until));
                     return r;
                   });
OP_END(op)

// ---- Poller: uv_poll on a descriptor, calling back into JS ----

class Poller : public Napi::ObjectWrap<Poller> {
 public:
  static Napi::FunctionReference &ctor(Napi::Env env) { return env_data(env).poller_ctor; }
  static Napi::Function Init(Napi::Env env) {
    Napi::Function f = DefineClass(env, "Poller",
                                   {InstanceMethod("start", &Poller::Start), InstanceMethod("stop", &Poller::Stop),
                                    InstanceMethod("close", &Poller::Close)});
    ctor(env) = Napi::Persistent(f);
    return f;
  }
  // new Poller(fd, callback)
  explicit Poller(const Napi::CallbackInfo &info) : Napi::ObjectWrap<Poller>(info) {
    Napi::Env env = info.Env();
    if (!info[0].IsNumber() || !info[1].IsFunction()) {
      throw_invalid(env, "Poller(fd, callback)");
      return;
    }
    int fd = info[0].As<Napi::Number>().Int32Value();
    cb_ = Napi::Persistent(info[1].As<Napi::Function>());
    ctx_ = std::make_unique<Napi::AsyncContext>(env, "tocsin.poll");
    uv_loop_t *loop = nullptr;
    napi_get_uv_event_loop(env, &loop);
    h_ = new uv_poll_t;
    h_->data = this;
    if (uv_poll_init(loop, h_, fd) != 0) {
      delete h_;
      h_ = nullptr;
      throw_invalid(env, "cannot poll descriptor " + std::to_string(fd));
    }
  }
  ~Poller() override { close_handle(); }

  static void on_poll(uv_poll_t *h, int status, int events) {
    (void)status;
    (void)events;
    Poller *p = (Poller *)h->data;
    if (!p || !p->active_ || p->cb_.IsEmpty()) return;
    Napi::Env env = p->cb_.Env();
    Napi::HandleScope scope(env);
    if (!js_runs(env)) {  // a descriptor readable while the environment is torn down
      p->active_ = false;
      uv_poll_stop(h);
      return;
    }
    p->cb_.MakeCallback(env.Global(), {}, *p->ctx_);
    // An exception that left the callback, or the nextTick queue it drains on the way
    // out (a user's process.nextTick that throws), must not stay pending here: no JS
    // frame would ever take it, and every later N-API call of the addon would fail
    // (the poller's callback never ran again while its descriptor stayed readable: a
    // busy loop). It is the process's uncaught exception, as in any Node callback.
    if (env.IsExceptionPending()) {
      Napi::Error e = env.GetAndClearPendingException();
      napi_fatal_exception(env, e.Value());
    }
  }
  void close_handle() {
    if (!h_) return;
    active_ = false;
    uv_poll_stop(h_);
    h_->data = nullptr;
    uv_close((uv_handle_t *)h_, [](uv_handle_t *hh) { delete (uv_poll_t *)hh; });
    h_ = nullptr;
    if (ref_held_) {
      ref_held_ = false;
      Unref();
    }
    // the callback (a closure that usually holds this Poller's JS object) must not be
    // kept alive by a strong reference of the object itself: that cycle is never
    // collected, and every wait would leak its closure, timers and error
    if (!cb_.IsEmpty()) cb_.Reset();
    // nor is the async context (napi_async_init's record, resource object and handle:
    // about 300 bytes of native memory) needed after close: a closed Poller that is
    // still referenced, or not collected yet, holds only this object
    ctx_.reset();
  }
  Napi::Value Start(const Napi::CallbackInfo &info) {
    if (h_ && !active_) {
      active_ = true;
      uv_poll_start(h_, UV_READABLE, on_poll);
      if (!ref_held_) {  // keep the JS object alive while polling
        ref_held_ = true;
        Ref();
      }
    }
    return info.Env().Undefined();
  }
  Napi::Value Stop(const Napi::CallbackInfo &info) {
    if (h_ && active_) {
      active_ = false;
      uv_poll_stop(h_);
      if (ref_held_) {
        ref_held_ = false;
        Unref();
      }
    }
    return info.Env().Undefined();
  }
  Napi::Value Close(const Napi::CallbackInfo &info) {
    close_handle();
    return info.Env().Undefined();
  }

 private:
  uv_poll_t *h_ = nullptr;
  bool active_ = false;
  bool ref_held_ = false;
  Napi::FunctionReference cb_;
  std::unique_ptr<Napi::AsyncContext> ctx_;
};

#ifdef TOCSIN_NODE_WORKER
#include "worker.inc"
#else
void InitWorker(Napi::Env, Napi::Object) {}
#endif

Napi::Value SetErrorFactory(const Napi::CallbackInfo &info) {
  if (!info[0].IsFunction()) return throw_invalid(info.Env(), "setErrorFactory(fn): fn must be a function");
  env_data(info.Env()).error_factory = Napi::Persistent(info[0].As<Napi::Function>());
  return info.Env().Undefined();
}

Napi::Value Versions(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("version", Napi::String::New(env, tocsin_version()));
  o.Set("versionNumber", Napi::Number::New(env, tocsin_version_number()));
  o.Set("compiledVersion", Napi::String::New(env, TOCSIN_VERSION_STRING));
  o.Set("schemaVersion", Napi::Number::New(env, TOCSIN_SCHEMA_VERSION));
  o.Set("sqliteVersion", tocsin_node_api_ready() ? js_str(env, tocsin_sqlite_version()) : env.Null());
  return o;
}

Napi::Value ApiReady(const Napi::CallbackInfo &info) {
  return Napi::Boolean::New(info.Env(), tocsin_node_api_ready() != 0);
}

// null, or the core's message naming a second copy of SQLite in the process
Napi::Value SqliteCopies(const Napi::CallbackInfo &info) {
  char msg[1024];
  if (tocsin_check_sqlite_copies(msg, sizeof msg) == TOCSIN_OK) return info.Env().Null();
  return Napi::String::New(info.Env(), msg);
}

Napi::Value OwnerId(const Napi::CallbackInfo &info) {
  char id[TOCSIN_OWNER_ID_SIZE];
  tocsin_owner_id(id, sizeof id);
  return Napi::String::New(info.Env(), id);
}

Napi::Value Errstr(const Napi::CallbackInfo &info) {
  return Napi::String::New(info.Env(), tocsin_errstr(info[0].As<Napi::Number>().Int32Value()));
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  env.SetInstanceData(new EnvData());  // deleted with the environment
  exports.Set("Handle", Handle::Init(env));
  exports.Set("Waiter", Waiter::Init(env));
  exports.Set("Poller", Poller::Init(env));
  InitWorker(env, exports);
  // the core's bounds, checked in lib/ so that a message names the JS option
  exports.Set("MAX_TIME_MS", Napi::Number::New(env, (double)TOCSIN_MAX_TIME_MS));
  exports.Set("MAX_LEASE_MS", Napi::Number::New(env, (double)TOCSIN_MAX_LEASE_MS));
  exports.Set("MIN_WORKER_LEASE_MS", Napi::Number::New(env, TOCSIN_MIN_WORKER_LEASE_MS));
  exports.Set("MAX_ATTEMPTS", Napi::Number::New(env, TOCSIN_MAX_ATTEMPTS));
#define F(name, fn) exports.Set(name, Napi::Function::New(env, fn, name))
  F("setErrorFactory", SetErrorFactory);
  F("versions", Versions);
  F("apiReady", ApiReady);
  F("sqliteCopies", SqliteCopies);
  F("errstr", Errstr);
  F("ownerId", OwnerId);
  F("open", Open);
  F("close", Close);
  F("pending", Pending);
  F("setTime", SetTime);
  F("now", Now);
  F("setMaxPayload", SetMaxPayload);
  F("exec", Exec);
  F("checkName", CheckName);
  F("txBegin", TxBeginFn);
  F("cancelNew", CancelNew);
  F("cancelFire", CancelFire);
  F("txEnd", TxEnd);
  F("enqueue", Enqueue);
  F("enqueueMany", EnqueueMany);
  F("claim", Claim);
  F("ack", Ack);
  F("ackBatch", AckBatch);
  F("retry", Retry);
  F("fail", Fail);
  F("heartbeat", Heartbeat);
  F("complete", Complete);
  F("failTask", FailTask);
  F("handBack", HandBack);
  F("cancel", Cancel);
  F("get", Get);
  F("pause", Pause);
  F("isPaused", IsPaused);
  F("stats", Stats);
  F("nextDeadline", NextDeadline);
  F("deadList", DeadList);
  F("deadRequeue", DeadRequeue);
  F("deadPurge", DeadPurge);
  F("publish", Publish);
  F("publishMany", PublishMany);
  F("streamRead", StreamRead);
  F("saveOffset", SaveOffset);
  F("offset", Offset);
  F("trim", Trim);
  F("notify", Notify);
  F("notifyRead", NotifyRead);
  F("notifyMaxId", NotifyMaxId);
  F("notifyPrune", NotifyPrune);
  F("notifyAutotrim", NotifyAutotrim);
  F("resultSave", ResultSave);
  F("resultSaveError", ResultSaveError);
  F("resultGet", ResultGet);
  F("resultDelete", ResultDelete);
  F("resultSweep", ResultSweep);
  F("lockAcquire", LockAcquire);
  F("lockRenew", LockRenew);
  F("lockRelease", LockRelease);
  F("lockHolder", LockHolder);
  F("rateTry", RateTry);
  F("rateSweep", RateSweep);
  F("rateReset", RateReset);
  F("scheduleSet", ScheduleSet);
  F("scheduleUpdate", ScheduleUpdate);
  F("schedulePause", SchedulePause);
  F("scheduleRemove", ScheduleRemove);
  F("scheduleGet", ScheduleGet);
  F("scheduleList", ScheduleList);
  F("schedulerTick", SchedulerTick);
  F("schedulerNextFire", SchedulerNextFire);
  F("schedulerLead", SchedulerLead);
  F("schedulerResign", SchedulerResign);
#ifdef TOCSIN_NODE_WORKER
  F("taskEnvelope", TaskEnvelope);
  F("taskEnqueue", TaskEnqueue);
#endif
  F("cronNext", CronNext);
  F("subOpen", SubOpen);
  F("queueWaitStep", QueueWaitStep);
  F("resultWaitStep", ResultWaitStep);
  F("lockWaitStep", LockWaitStep);
  F("listenOpen", ListenOpen);
  F("streamSubOpen", StreamSubOpen);
#undef F
  return exports;
}

}  // namespace

NODE_API_MODULE(tocsin, Init)
