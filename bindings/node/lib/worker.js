'use strict';
// The worker runner on the C worker protocol (docs/worker-protocol.md): the
// core claims, retries, hands back, renews leases, finds dead workers and
// leads the scheduler; this file only polls the worker's descriptor on the
// event loop, calls the handlers and reports each outcome.
const { EventEmitter } = require('events');
const index = require('./index');
const tasks = require('./tasks');

const { native, opts, invalid, toJson, fromJson, ms, bool, defaultOwner, fromBig, str, count } = index._internal;
const { errorOf } = require('./errors');
const { checkSignal } = require('./wait');

// What a handler threw, as the strings the core records: any value may be thrown
// (null, a Symbol, an object without a prototype, an Error whose message getter
// throws), and none of them may keep the run from being reported.
/** A worker's lease (visibility, schedulerTtl): absent for the default, else at least 3 ms (0, the core's "default", is refused). */
function workerLease(v, what, max, note) { return ms(v, what, native.MIN_WORKER_LEASE_MS, max, note); }

function text(f, dflt) {
  try {
    const v = f();
    if (typeof v === 'string') return v;
    if (v === undefined || v === null) return dflt;
    return String(v);
  } catch (_) {
    return dflt;
  }
}
// An error's message or trace as the core takes it, as every runtime's worker gives it
// (Go's too): without NUL characters, which a C string cannot hold (the addon refused
// such a message: the run was never recorded, its job held its lease and its slot).
const noNul = (s) => (typeof s === 'string' && s.includes('\0') ? s.replace(/\0/g, '') : s);

function thrown(e) {
  if (e instanceof Error) {
    const type = e.name === 'Timeout' ? 'Timeout'
      : text(() => (e.constructor && e.constructor.name) || e.name, 'Error') || 'Error';
    return { type, message: noNul(text(() => e.message, '')), trace: noNul(text(() => e.stack, null)) };
  }
  return { type: 'Error', message: noNul(text(() => String(e), Object.prototype.toString.call(e))), trace: null };
}

const OK = 0;
const ERROR = 1;
const FAIL = 2;
const HAND_BACK = 3;

class Worker extends EventEmitter {
  /**
   * new Worker(db, { queues, concurrency, visibility, scheduler, schedulerTtl,
   *   workerId, shutdownTimeout, unknownTaskDelay, unknownTaskHandbacks })
   * Runs the tasks declared with queue.task() on those queues. Every option is
   * checked here (InvalidArgumentError naming it), none only when run() starts.
   */
  constructor(db, o) {
    super();
    o = opts(o, 'new Worker() options', ['queues', 'queue', 'concurrency', 'visibility', 'scheduler', 'schedulerTtl',
      'workerId', 'shutdownTimeout', 'unknownTaskDelay', 'unknownTaskHandbacks']);
    if (!(db instanceof index.Database)) throw invalid('new Worker(db, options): db must be a Database');
    const key = o.queues === undefined ? 'queue' : 'queues'; // as the options spell it, for messages
    let queues = o.queues === undefined ? o.queue : o.queues;
    const one = typeof queues === 'string';
    if (one) queues = [queues];
    const declared = queues === undefined;
    if (declared) queues = [...tasks.registry(db).keys()];
    if (!Array.isArray(queues) || queues.length === 0) throw invalid('a worker needs at least one queue');
    this.db = db;
    this.queues = queues;
    if (!queues.every((q) => typeof q === 'string')) throw invalid('queues must be an array of strings');
    const concurrency = fromBig(o.concurrency);
    if (concurrency !== undefined && (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 10000)) {
      throw invalid('concurrency must be an integer between 1 and 10000');
    }
    this.concurrency = concurrency === undefined ? 1 : concurrency;
    this.shutdownTimeout = o.shutdownTimeout === undefined ? 30000 : ms(o.shutdownTimeout, 'shutdownTimeout');
    // every option is refused here, as Python and Go do, not when run() opens the worker;
    // a closed database is run()'s ClosedError
    const id = o.workerId === undefined || o.workerId === null ? undefined : str(o.workerId, 'workerId');
    if (!db._closing) {
      queues.forEach((q, i) => native.checkName(db._h, declared ? 'queue name' : one ? key : `${key}[${i}]`, q)); // the core's rule
      if (id !== undefined) native.checkName(db._h, 'workerId', id);
    }
    // 0 is the core's "the default" for each of these: spelled by leaving the option out
    this._settings = {
      visibility: workerLease(o.visibility, 'visibility', native.MAX_TIME_MS, 'the year 9999'),
      scheduler: bool(o.scheduler, 'scheduler'),
      schedulerTtl: workerLease(o.schedulerTtl, 'schedulerTtl', native.MAX_LEASE_MS, '366 days'),
      unknownTaskDelay: ms(o.unknownTaskDelay, 'unknownTaskDelay', 1),
      unknownTaskHandbacks: count(o.unknownTaskHandbacks, 'unknownTaskHandbacks', 1, 1000000),
    };
    this._w = null;
    this._running = new Map(); // jobId -> { run, ac, stopped }
    this._stopping = false;
    this._id = id === undefined ? defaultOwner() : id;
    this._stopped = null;
    this._busy = false;
    this._again = false;
    this._poller = null;
    this._timer = null;
    this._signals = [];
    this._waits = new Set();
    this._failed = null;
  }

  get workerId() { return this._id; }
  get inFlight() { return this._running.size; }

  _open() {
    const o = this._settings;
    this._w = native.workerOpen(this.db._h, this.queues, this._id, this.concurrency, o.visibility,
      o.scheduler, o.schedulerTtl, o.unknownTaskDelay, o.unknownTaskHandbacks);
    this._tasks = new Map();
    const reg = tasks.registry(this.db);
    for (const q of this.queues) {
      const m = reg.get(q);
      if (!m || m.size === 0) this.emit('warning', new Error(`tocsin worker: no task declared for queue "${q}"`));
      if (!m) continue;
      for (const [name, def] of m) {
        if (this._tasks.has(name)) continue;
        const t = def.options;
        // retries bound the runs of the task's jobs here, whatever a call by name allowed
        this._w.register(name, ms(t.backoffBase, 'backoffBase'), ms(t.backoffCap, 'backoffCap'),
          ms(t.timeout, 'timeout'), ms(t.resultTtl, 'resultTtl'),
          t.retries === undefined ? 0 : Number(t.retries) + 1);
        this._tasks.set(name, def);
      }
    }
  }

  /**
   * Runs until stop() (or the signal, or SIGINT/SIGTERM with handleSignals):
   * resolves once every run has finished or been handed back.
   * { signal, handleSignals }
   */
  run(o) {
    if (this._stopped) return this._stopped;
    try {
      o = opts(o, 'worker.run() options', ['signal', 'handleSignals']);
      checkSignal(o.signal);
      bool(o.handleSignals, 'handleSignals');
      if (this.db._closing) throw errorOf('TOCSIN_CLOSED', 'the database is closed');
      this._open();
    } catch (e) {
      // refused (a bad option, a closed database): a rejection, as from any async call,
      // and no native worker left open behind it
      if (this._w) { const w = this._w; this._w = null; w.close().catch(() => {}); }
      return Promise.reject(e);
    }
    this.db._closers.add(this);
    this._stopped = new Promise((resolve, reject) => { this._resolve = resolve; this._reject = reject; });
    if (o.signal) {
      if (o.signal.aborted) this.stop();
      else o.signal.addEventListener('abort', () => this.stop(), { once: true });
    }
    if (o.handleSignals) {
      for (const sig of ['SIGINT', 'SIGTERM']) {
        const h = () => {
          if (this._stopping) { this._hurry(); return; } // a second signal: hand back at once
          this.emit('signal', sig);
          this.stop();
        };
        process.on(sig, h);
        this._signals.push([sig, h]);
      }
    }
    this._poller = new native.Poller(this._w.fd(), () => this._step());
    this._poller.start();
    this.emit('start', { queues: this.queues, concurrency: this.concurrency });
    this._step();
    return this._stopped;
  }

  _arm() {
    if (this._stopping || !this._w) return;
    if (this._timer) clearTimeout(this._timer);
    const wait = Math.min(Math.max(0, this._w.wakeIn()), 1000);
    this._timer = setTimeout(() => { this._timer = null; this._step(); }, wait);
  }

  async _step() {
    if (this._stopping || !this._w) return;
    if (this._busy) {
      // next() is on the pool (waiting for the write lock, say): the reserve still serves
      this._again = true;
      const runs = this._w.take();
      if (runs) for (const r of runs) this._execute(r);
      return;
    }
    this._busy = true;
    if (this._poller) this._poller.stop();
    try {
      do {
        this._again = false;
        // while runs are in flight the step goes to the pool, so that this thread keeps
        // running handlers and taking reserved runs meanwhile; idle, it runs here when the
        // write lock is free (no thread round trip before a lone job starts)
        let runs = this._running.size > 0 ? false : this._w.poll();
        if (runs === false) runs = await this._w.next();
        if (this._stopping) {
          // claimed while stopping: hand back at once
          if (runs) for (const r of runs) this._finish(r.jobId, HAND_BACK, {});
          break;
        }
        const cancelled = this._w.cancelled();
        for (const id of cancelled) {
          const e = this._running.get(id);
          if (e) { e.cancelled = true; e.ac.abort(errorOf('TOCSIN_LEASE_LOST', `job ${id} was cancelled or its lease was lost`)); }
        }
        if (runs) for (const r of runs) this._execute(r);
      } while (this._again && !this._stopping);
    } catch (e) {
      if (this._stopping) {
        // (stopping anyway)
      } else if (e.code === 'TOCSIN_CLOSED' || this.db._closing) {
        // run() rejects with it; 'error' listeners hear it first
        if (this.listenerCount('error') > 0) this.emit('error', e);
        this._failed = e;
        this.stop();
      } else {
        // a step that failed (the lock held past the busy timeout, a schedule that
        // cannot fire): nothing is lost, and the core tries the step again after a
        // pause, which wakeIn() counts in; the worker goes on
        this.emit('warning', e);
      }
    } finally {
      this._busy = false;
      if (!this._stopping) {
        if (this._poller) this._poller.start();
        this._arm();
      } else if (this._drained) {
        this._drained();
      }
    }
  }

  // The run's events ('run', 'done', 'failed') are told, never part of the run: a
  // listener that throws neither keeps its run from starting or being reported (a
  // throwing 'run' listener left the job in flight, its lease renewed, until the
  // worker stopped) nor turns a success into a failure; its error is a 'warning'.
  _tell(event, ...args) {
    try {
      this.emit(event, ...args);
    } catch (e) {
      try { this.emit('warning', e); } catch (_) { /* a throwing 'warning' listener */ }
    }
  }

  _finish(jobId, kind, f, tx) {
    try {
      this._w.finish(jobId, kind, f.value === undefined ? null : f.value,
        f.type === undefined ? null : f.type, f.message === undefined ? null : f.message,
        f.trace === undefined ? null : f.trace, f.delay === undefined ? -1 : f.delay, tx ? tx._h : null);
      return true;
    } catch (e) {
      if (tx) throw e;
      if (this.listenerCount('error') > 0) this.emit('error', e);
      const code = text(() => e.code, null);
      if (kind !== HAND_BACK && (code === 'TOCSIN_INVALID' || code === 'TOCSIN_TOOBIG')) {
        // an outcome the addon refuses (an error type holding a NUL) still ends the run,
        // a final failure naming why, as the core records one it cannot store: left
        // unrecorded, its job held its lease and the run its slot until the worker stopped
        try {
          this._w.finish(jobId, FAIL, null, 'InvalidOutcome', noNul(`the outcome was refused: ${e.message}`), null, -1, null);
        } catch (e2) {
          if (this.listenerCount('error') > 0) this.emit('error', e2);
        }
      }
      return false;
    }
  }

  async _execute(run) {
    const def = this._tasks.get(run.task);
    const ac = new AbortController();
    const entry = { run, ac, cancelled: false, handedBack: false };
    this._running.set(run.jobId, entry);
    let args;
    let kwargs;
    try {
      args = fromJson(run.args);
      kwargs = fromJson(run.kwargs);
    } catch (e) {
      this._running.delete(run.jobId);
      this._finish(run.jobId, FAIL, { type: 'InvalidEnvelope', message: e.message });
      return;
    }
    const callArgs = kwargs && Object.keys(kwargs).length ? [...args, kwargs] : args;
    const ctx = {
      jobId: run.jobId, token: run.token, attempt: run.attempt, maxAttempts: run.maxAttempts,
      queue: run.queue, task: run.task, meta: run.meta ? fromJson(run.meta) : null,
      signal: ac.signal, startedAt: run.startedAt, tx: null,
    };
    this._tell('run', ctx);
    let timer = null;
    let timeoutError = null;
    const timedOut = run.timeout > 0 ? new Promise((_, reject) => {
      timer = setTimeout(() => {
        const e = new Error(`the run exceeded its timeout of ${run.timeout} ms`);
        e.name = 'Timeout';
        timeoutError = e;
        ac.abort(e);
        reject(e);
      }, run.timeout);
    }) : null;
    const transactional = def && def.options && def.options.transactional;
    try {
      const go = async (tx) => {
        ctx.tx = tx || null;
        let p = tasks.current.run(ctx, () => def.fn(...callArgs));
        if (timedOut) p = Promise.race([p, timedOut]);
        const value = await p;
        let json;
        try {
          json = toJson(value, 'the return value', true); // no return: null
        } catch (e) {
          if (tx) throw e;
          this._finish(run.jobId, FAIL, { type: 'SerializationError', message: e.message, trace: e.stack });
          this._tell('failed', ctx, e); // the run failed: not 'done'
          return false;
        }
        if (entry.handedBack) return false;
        this._finish(run.jobId, OK, { value: json }, tx);
        return true;
      };
      const ok = transactional ? await this.db._transaction((tx) => go(tx), true) : await go(null);
      if (ok === true) this._tell('done', ctx);
    } catch (e) {
      if (!entry.handedBack) {
        // the worker's own timeout: type Timeout, no message and no trace (the core
        // writes its message, the same in every runtime; the stack would be this
        // file's timer, not the task's)
        const f = e === timeoutError && e ? { type: 'Timeout', message: null, trace: null } : thrown(e);
        if (transactional && e instanceof Error && text(() => e.code, null) === 'TOCSIN_LEASE_LOST') {
          // nothing was written (rolled back): the core has the job elsewhere
          this._finish(run.jobId, HAND_BACK, {});
        } else {
          this._finish(run.jobId, ERROR, { type: f.type, message: f.message, trace: f.trace, delay: -1 });
        }
        this._tell('failed', ctx, e instanceof Error ? e : new Error(f.message));
      }
    } finally {
      if (timer) clearTimeout(timer);
      this._running.delete(run.jobId);
      if (this._stopping) {
        if (this._running.size === 0 && this._idle) this._idle();
      } else {
        // a slot is free: a reserved run first (no database work, no poller churn); a
        // step only when the core says one is due (take() gives null then)
        const runs = this._busy ? null : this._w.take();
        if (runs && runs.length) for (const r of runs) this._execute(r);
        else this._step();
      }
    }
  }

  /** Graceful stop: no new runs; running handlers get shutdownTimeout ms, then are handed back. */
  stop() {
    if (!this._stopped) return Promise.resolve();
    if (this._stopping) return this._stopped;
    this._stopping = true;
    this.emit('stopping', { inFlight: this._running.size });
    if (this._poller) { this._poller.close(); this._poller = null; }
    if (this._timer) { clearTimeout(this._timer); this._timer = null; }
    this._shutdown().then(() => this._resolve(), (e) => this._reject(e));
    return this._stopped;
  }

  _hurry() { if (this._hurryNow) this._hurryNow(); }

  async _shutdown() {
    // the in-flight next() finishes first (one call at a time)
    if (this._busy) await new Promise((r) => { this._drained = r; });
    // the core claims and hands out nothing more; its upkeep goes on while the running
    // handlers finish (their leases are renewed, their outcomes committed: without it a
    // shutdownTimeout longer than what was left of a lease let the job be claimed again
    // while its handler still ran)
    this._w.drain();
    if (this._running.size > 0) {
      const end = Date.now() + this.shutdownTimeout;
      let hurry = false, wake = null;
      this._idle = () => { if (wake) wake(); };
      this._hurryNow = () => { hurry = true; if (wake) wake(); };
      while (this._running.size > 0 && !hurry && Date.now() < end) {
        try {
          const runs = await this._w.next(); // (none: a draining worker hands out nothing)
          if (runs) for (const r of runs) this._finish(r.jobId, HAND_BACK, {});
        } catch (e) {
          if (e.code === 'TOCSIN_CLOSED' || this.db._closing) break;
        }
        if (this._running.size === 0 || hurry) break;
        const wait = Math.max(1, Math.min(this._w.wakeIn(), end - Date.now(), 1000));
        await new Promise((r) => {
          const t = setTimeout(r, wait);
          wake = () => { clearTimeout(t); r(); };
        });
        wake = null;
      }
      if (this._running.size > 0 && !hurry && Date.now() < end && this.db._closing) {
        // the database is closing: no upkeep; the handlers get what is left of the timeout
        await new Promise((resolve) => {
          const t = setTimeout(resolve, end - Date.now());
          const done = () => { clearTimeout(t); resolve(); };
          this._idle = done;
          this._hurryNow = done;
          if (this._running.size === 0) done();
        });
      }
    }
    for (const [id, e] of this._running) {
      // still running past the deadline: hand back (no attempt consumed)
      e.handedBack = true;
      e.ac.abort(errorOf('TOCSIN_INTERRUPTED', 'the worker is shutting down'));
      this._finish(id, HAND_BACK, {});
    }
    this._running.clear();
    for (const [sig, h] of this._signals) process.removeListener(sig, h);
    this._signals = [];
    this.db._closers.delete(this);
    const w = this._w;
    this._w = null;
    await w.close();
    this.emit('stop');
    if (this._failed) throw this._failed;
  }

  // db.close() while run() runs: the worker stops (runs in flight get shutdownTimeout,
  // then are handed back) and run() rejects with ClosedError, 'error' hearing it first,
  // as when a step finds the database closed; a stop() already under way still resolves
  async _closeFromDb() {
    if (!this._stopping && !this._failed) {
      const e = errorOf('TOCSIN_CLOSED', 'the database was closed while the worker ran');
      if (this.listenerCount('error') > 0) this.emit('error', e);
      this._failed = e;
    }
    await this.stop();
  }
}

module.exports = { Worker };
