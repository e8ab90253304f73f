'use strict';
// Tasks: named calls in the language-neutral envelope (docs/sql.md, "Task
// envelope"), enqueued by the core (tocsin_task_enqueue) and run by a worker
// of any runtime. JS has no keyword arguments: a call's kwargs reach a JS
// handler as one trailing object (only when non-empty).
const { AsyncLocalStorage } = require('async_hooks');
const index = require('./index');

const { Queue, Database, Result } = index;
const { native, toJson, fromJson, opts, str, invalid, enqueueArgs, positiveMs, fromBig, ENQUEUE_KEYS } = index._internal;

const CALL_KEYS = ['tx', 'kwargs', 'resultTtl', 'timeout', ...ENQUEUE_KEYS];
const TASK_KEYS = ['retries', 'timeout', 'resultTtl', 'backoffBase', 'backoffCap', 'priority', 'delay', 'expires', 'meta', 'transactional'];
const errors = require('./errors');

const current = new AsyncLocalStorage();

/** The run being executed by a worker ({ jobId, token, attempt, maxAttempts, queue, task, meta, signal }), or undefined. */
function currentJob() { return current.getStore(); }

class TaskHandle {
  constructor(queue, id) { this.queue = queue; this.id = id; }
  /** The task's value; throws TaskError when it failed. { timeout, signal } */
  async result(o) {
    const r = await this.queue.db.waitResult(this.id, o);
    return r.unwrap();
  }
  /** The outcome so far without waiting: a Result, or null while it runs. */
  async peek() { return this.queue.db.checkResult(this.id); }
  async job() { return this.queue.get(this.id); }
}

function callArgs(args, kwargs) {
  if (args === undefined || args === null) args = [];
  if (!Array.isArray(args)) throw invalid('args must be an array');
  if (kwargs !== undefined && kwargs !== null && (typeof kwargs !== 'object' || Array.isArray(kwargs))) {
    throw invalid('kwargs must be a plain object');
  }
  return [toJson(args, 'args'), toJson(kwargs || {}, 'kwargs')];
}

/** Enqueues a call of task `name` (any runtime's); options: kwargs, resultTtl, timeout, tx and the enqueue options. */
async function enqueueCall(queue, name, args, o) {
  o = opts(o, 'queue.call() options', CALL_KEYS);
  const [a, k] = callArgs(args, o.kwargs);
  const id = await native.taskEnqueue(queue.db._handle(o, 'queue.call()'), queue.name, str(name, 'task name'), a, k,
    positiveMs(o.resultTtl, 'resultTtl'), positiveMs(o.timeout, 'timeout'), ...enqueueArgs(o));
  return new TaskHandle(queue, id);
}

/** The envelope JSON of a call, validated by the core. */
function envelope(db, name, args, o) {
  o = opts(o);
  const [a, k] = callArgs(args, o.kwargs);
  return native.taskEnvelope(db._h, str(name, 'task name'), a, k, positiveMs(o.resultTtl, 'resultTtl'), positiveMs(o.timeout, 'timeout'));
}

function registry(db) {
  if (!db._tasks) db._tasks = new Map();
  return db._tasks;
}

/**
 * queue.task(name, fn, options) -> a function whose call enqueues the task
 * and resolves to a TaskHandle. Options: retries (max_attempts - 1), timeout,
 * resultTtl (ms, > 0; default: the core's, one day), backoffBase, backoffCap, priority,
 * transactional (fn(...args) runs with currentJob().tx, and its ack commits
 * in that transaction), and the default enqueue options.
 */
Queue.prototype.task = function task(name, fn, o) {
  native.checkName(this.db._h, 'task name', str(name, 'task name')); // the core's rule
  if (typeof fn !== 'function') throw invalid('task(name, fn): fn must be a function');
  o = opts(o, 'queue.task() options', TASK_KEYS);
  // the worker's options of the task (and its calls' expires), refused here rather than
  // at a worker's run() or at every call; 0 is the core's "none"/"the default": left out
  for (const k of ['backoffBase', 'backoffCap', 'timeout', 'resultTtl', 'expires']) positiveMs(o[k], k);
  index._internal.bool(o.transactional, 'transactional');
  const queue = this;
  const defaults = {};
  if (o.retries !== undefined) {
    const retries = fromBig(o.retries);
    if (!Number.isInteger(retries) || retries < 0 || retries >= native.MAX_ATTEMPTS) {
      throw invalid(`retries must be an integer between 0 and ${native.MAX_ATTEMPTS - 1}, not ${String(o.retries)}`);
    }
    defaults.maxAttempts = retries + 1;
  }
  for (const k of ['priority', 'delay', 'expires', 'meta', 'timeout', 'resultTtl']) if (o[k] !== undefined) defaults[k] = o[k];
  const def = { name, fn, queue: this.name, options: o };
  const tasks = registry(this.db);
  if (!tasks.has(this.name)) tasks.set(this.name, new Map());
  tasks.get(this.name).set(name, def);
  const call = (...args) => enqueueCall(queue, name, args, defaults);
  call.taskName = name;
  call.queue = queue;
  /** enqueue({ args, kwargs, tx, delay, priority, meta, ... }) */
  call.enqueue = (e) => {
    const { args, ...rest } = opts(e, 'task.enqueue() options', ['args', ...CALL_KEYS]);
    return enqueueCall(queue, name, args, { ...defaults, ...rest });
  };
  /** Runs the function here and now (tests). */
  call.run = (...args) => fn(...args);
  def.call = call;
  return call;
};

/** Calls task `name` by name (a worker of any runtime runs it): queue.call(name, args, { kwargs, ... }). */
Queue.prototype.call = function callTask(name, args, o) { return enqueueCall(this, name, args, o); };

/** The tasks declared on this queue in this process. */
Queue.prototype.tasks = function tasks() {
  const m = registry(this.db).get(this.name);
  return m ? [...m.keys()] : [];
};

/**
 * A periodic task: schedule `name` (default: the task name) fires a call of
 * `taskName` on this queue at every boundary of `cron`. Options: args,
 * kwargs, name and the schedule options (catchUp, localTime, ...). A worker
 * started with { scheduler: true } (any runtime) fires it. Resolves to the
 * next fire time.
 */
Queue.prototype.periodic = async function periodic(cron, taskName, o) {
  o = opts(o, 'queue.periodic() options', ['args', 'kwargs', 'name', 'resultTtl', 'timeout',
    'priority', 'maxAttempts', 'jobExpires', 'maxCatchUp', 'catchUp', 'localTime', 'meta']);
  const env = await envelope(this.db, taskName, o.args, o);
  const { args, kwargs, name, resultTtl, timeout, ...sched } = o;
  void args; void kwargs; void resultTtl; void timeout;
  return this.db.schedule(name === undefined ? taskName : name, cron, this.name, fromJson(env), sched); // (JSON.parse rounded a BigInt argument)
};

Database.prototype.taskEnvelope = function taskEnvelope(name, args, o) { return envelope(this, name, args, o); };

module.exports = { TaskHandle, currentJob, enqueueCall, envelope, registry, current, Result, errors };
