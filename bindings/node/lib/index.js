'use strict';
// tocsin for Node.js: a thin layer over the C core (core/include/tocsin.h).
// Types, errors, idioms and the event loop live here; behaviour lives in C.
//
// Units: durations and instants are integer milliseconds (instants since the
// Unix epoch; a Date is accepted where an instant is). Job ids, offsets and
// notification ids are Numbers; fencing tokens are BigInts (id * 2^20 +
// attempts exceeds 2^53 once ids pass 2^33) and are accepted back as BigInt,
// decimal string, or safe-integer Number.
const { AsyncLocalStorage } = require('async_hooks');
const { EventEmitter } = require('events');
const util = require('util');
const { native, addonPath, ensureLoaded } = require('./native');
const errors = require('./errors');
const { waitFor, checkSignal, checkTimeout, abortReason } = require('./wait');

const { errorOf } = errors;
const DEFAULT_VISIBILITY = 30000;

// The transactions whose callback the running code is part of (an array, outermost
// first; the async context follows the callback across its awaits, timers and the
// promises it starts). Such code must not wait for the write lock on the database's
// own connection: its transaction holds that lock and commits only when the callback
// returns, so the wait could only end at the busy timeout. Code elsewhere on the event
// loop is not in that context: it waits for the commit, as any other writer does.
const txContext = new AsyncLocalStorage();

// ---- argument translation ----

function invalid(msg) { return errorOf('TOCSIN_INVALID', msg); }

// The one serialiser of every value written as JSON (payloads, meta, results, task
// arguments and return values). The value must be a JSON value: JSON.stringify would
// write NaN and the infinities as null, a Map or a Set as {}, and undefined as nothing,
// so a value holding one (at any depth) is refused, as is a BigInt (which it throws on)
// and undefined itself (unless the argument is optional: `optional` gives null then).
// What JSON.stringify does by definition stays: toJSON() is honoured (a Date is its ISO
// string), an undefined or function member of an object is left out, and one in an
// array is null. The walk that looks for the refused values runs only when the text
// holds a null or a {} (where they end up), so most payloads pay one stringify; the
// walk visits what JSON.stringify did (own enumerable keys, toJSON results) and costs
// about a quarter of it.
function notJson(v) {
  if (typeof v === 'number') return Number.isFinite(v) ? null : String(v);
  if (v instanceof Number) return Number.isFinite(v.valueOf()) ? null : String(v.valueOf());
  if (v instanceof Map) return 'a Map';
  if (v instanceof Set) return 'a Set';
  if (v instanceof WeakMap || v instanceof WeakSet) return `a ${v instanceof WeakMap ? 'WeakMap' : 'WeakSet'}`;
  return null;
}

function checkJson(v, what, key, inArray, top) {
  if (typeof v === 'number') {
    if (Number.isFinite(v)) return;
  } else if (typeof v !== 'object' || v === null) {
    return;
  } else if (typeof v.toJSON === 'function') {
    checkJson(v.toJSON(key), what, key, inArray, top);
    return;
  } else if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) checkJson(v[i], what, String(i), true, false);
    return;
  }
  const bad = notJson(v);
  if (bad === null) {
    const keys = Object.keys(v);
    for (let i = 0; i < keys.length; i++) checkJson(v[keys[i]], what, keys[i], false, false);
    return;
  }
  const at = top ? '' : ` (at ${inArray ? `[${key}]` : JSON.stringify(key)})`;
  throw invalid(`${what} is not a JSON value: it holds ${bad}${at}, which JSON cannot represent`);
}

function toJson(value, what, optional) {
  if (value === undefined) {
    if (optional) return 'null';
    throw invalid(`${what} is undefined, which is not a JSON value (pass null for none)`);
  }
  let s;
  try {
    s = JSON.stringify(value);
  } catch (e) {
    if (!(e instanceof TypeError && /BigInt/.test(e.message))) throw invalid(`${what} is not JSON-serialisable: ${e.message}`);
    try {
      s = stringifyExact(value);
    } catch (e2) {
      throw invalid(`${what} is not JSON-serialisable: ${e2.message}`);
    }
  }
  if (s === undefined) throw invalid(`${what} is not JSON-serialisable (${typeof value})`);
  if (s.includes('null') || s.includes('{}')) checkJson(value, what, '', false, true);
  return s;
}

// Integers beyond Number's safe range (2^53 - 1) cross runtimes exactly: another runtime
// writes any integer (a Python int, a Go int64, a Ruby Integer: ids, snowflakes, counters)
// and JSON.parse rounded it to the nearest double, silently (2^53 + 1 came back as
// 2^53, and a task echoing it wrote the rounded value back). What the core hands out is
// read with such an integer as the exact BigInt, as the addon's own integers are; a
// BigInt written (at any depth) is its exact digits, so it goes back as it came.
// Numbers written with a fraction or an exponent stay Numbers (doubles, as everywhere).

// A safe integer has at most 16 digits, and 16 digits in a row are rare elsewhere: the
// text holds no unsafe integer without them, and JSON.parse reads it as before.
const LONG_DIGITS = /\d{16}/;
const NUMBER = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/y;

// JSON.parse's result, with every integer literal beyond the safe integers as a BigInt.
// The text is JSON the core validated (strict RFC 8259); a value the parser does not
// expect falls back to JSON.parse, which says what is wrong. Iterative (a stack of the
// open arrays and objects), as JSON.parse is: at any depth, and whatever stack the
// caller has left, it reads the value exactly, never rounded by a fallback.
function parseExact(text) {
  let i = 0;
  const n = text.length;
  const ws = () => {
    for (; i < n; i++) {
      const c = text.charCodeAt(i);
      if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
    }
  };
  const fail = () => { throw new SyntaxError(`unexpected JSON at position ${i}`); };
  const string = () => {
    const start = i;
    for (i++; i < n; i++) {
      const c = text.charCodeAt(i);
      if (c === 0x5c) i++; // a backslash: the next character is escaped
      else if (c === 0x22) break;
    }
    if (i >= n) fail();
    i++;
    return JSON.parse(text.slice(start, i));
  };
  const key = () => {
    ws();
    if (text[i] !== '"') fail();
    const k = string();
    ws();
    if (text[i++] !== ':') fail();
    return k;
  };
  // the open containers: [array, null] or [object, the key of the value being read]
  const open = [];
  try {
    for (;;) {
      let v;
      ws();
      const c = text[i];
      if (c === '{') {
        i++;
        ws();
        if (text[i] !== '}') { open.push([{}, key()]); continue; }
        i++;
        v = {};
      } else if (c === '[') {
        i++;
        ws();
        if (text[i] !== ']') { open.push([[], null]); continue; }
        i++;
        v = [];
      } else if (c === '"') {
        v = string();
      } else if (text.startsWith('true', i)) {
        i += 4; v = true;
      } else if (text.startsWith('false', i)) {
        i += 5; v = false;
      } else if (text.startsWith('null', i)) {
        i += 4; v = null;
      } else {
        NUMBER.lastIndex = i;
        const m = NUMBER.exec(text);
        if (!m) fail();
        i = NUMBER.lastIndex;
        const num = Number(m[0]);
        v = m[1] === undefined && m[2] === undefined && !Number.isSafeInteger(num) ? BigInt(m[0]) : num;
      }
      // v is complete: it goes into the innermost open container, which may close too
      for (;;) {
        if (open.length === 0) {
          ws();
          if (i !== n) fail();
          return v;
        }
        const top = open[open.length - 1];
        const o = top[0];
        const array = top[1] === null;
        if (array) o.push(v);
        // as JSON.parse: an own "__proto__" property, not the prototype; the last of a
        // key given twice wins
        else if (top[1] === '__proto__') Object.defineProperty(o, '__proto__', { value: v, writable: true, enumerable: true, configurable: true });
        else o[top[1]] = v;
        ws();
        const e = text[i++];
        if (e === ',') {
          if (!array) top[1] = key();
          break;
        }
        if (e !== (array ? ']' : '}')) fail();
        open.pop();
        v = o;
      }
    }
  } catch (e) {
    if (!(e instanceof SyntaxError)) throw e;
    return JSON.parse(text); // throws what JSON.parse says
  }
}

function fromJson(text) {
  if (text === null || text === undefined) return null;
  return LONG_DIGITS.test(text) ? parseExact(text) : JSON.parse(text);
}

// JSON text of a value holding BigInts (JSON.stringify throws on one): each BigInt is
// written as a marker string, then the marker is replaced by the BigInt's digits. The
// marker holds a NUL and a random tag; a key or string of the value holding it would
// be taken for one, so then another tag is drawn.
function stringifyExact(value) {
  for (;;) {
    const tag = `\u0000tocsin-bigint-${Math.random().toString(36).slice(2)}:`;
    let clash = false;
    const s = JSON.stringify(value, function (k, v) {
      if (k.includes(tag)) clash = true;
      if (typeof v === 'bigint') return tag + v.toString();
      if (typeof v === 'object' && v !== null) {
        const b = bigOf(v);
        if (b !== undefined) return tag + b.toString();
      }
      if (typeof v === 'string' && v.includes(tag)) clash = true;
      return v;
    });
    if (clash) continue;
    if (s === undefined) return s;
    const quoted = JSON.stringify(tag).slice(1, -1).replace(/[\\^$.*+?()[\]{}|-]/g, '\\$&');
    return s.replace(new RegExp(`"${quoted}(-?\\d+)"`, 'g'), '$1');
  }
}

// The BigInt of a BigInt object (Object(1n)), else undefined: its [[BigIntData]], which
// BigInt.prototype.valueOf reads (an object whose Symbol.toStringTag says 'BigInt' has none).
function bigOf(v) {
  try {
    return BigInt.prototype.valueOf.call(v);
  } catch (_) {
    return undefined;
  }
}

// A value for JSON.stringify of a row (a job's or event's toJSON): its BigInts as their
// decimal strings, as the row's own BigInts are (JSON.stringify throws on a BigInt).
function bigAsString(v) {
  if (typeof v === 'bigint') return String(v);
  if (typeof v !== 'object' || v === null) return v;
  if (Array.isArray(v)) return v.map(bigAsString);
  const o = {};
  for (const k of Object.keys(v)) {
    const x = bigAsString(v[k]);
    if (k === '__proto__') Object.defineProperty(o, k, { value: x, writable: true, enumerable: true, configurable: true });
    else o[k] = x;
  }
  return o;
}
function rowJson(text, v) { return text && LONG_DIGITS.test(text) ? bigAsString(v) : v; }

function metaJson(meta) {
  if (meta === undefined || meta === null) return null;
  if (typeof meta !== 'object' || Array.isArray(meta)) throw invalid('meta must be a plain object (headers)');
  return toJson(meta, 'meta');
}

// An integer may be given as a BigInt wherever one is accepted (a duration, an instant,
// a count, a priority, a job id): the Number of the same value when it is a safe integer,
// else the BigInt itself, which the addon reads exactly as a 64-bit integer (a priority
// may be any) or refuses with its range.
const MAX_SAFE_BIG = BigInt(Number.MAX_SAFE_INTEGER);
function fromBig(v) { return typeof v === 'bigint' && v >= -MAX_SAFE_BIG && v <= MAX_SAFE_BIG ? Number(v) : v; }

// Durations and instants are the core's milliseconds; their bounds are checked here
// so that a message names the option as JS spells it (delay, not the core's delay_ms).
// A value below `min` is refused with the range it must be in (from `min`, not 0).
function ms(v, what, min = 0, max = native.MAX_TIME_MS, note = 'the year 9999') {
  if (v === undefined || v === null) return undefined;
  if (typeof v === 'bigint') {
    if (v < 0n && min === 0) throw invalid(`${what} must be >= 0 ms, not ${v}n`);
    if (v < BigInt(min) || v > BigInt(max)) throw invalid(`${what} must be between ${min} and ${max} ms (${note}), not ${v}n`);
    return Number(v);
  }
  if (typeof v !== 'number' || !Number.isInteger(v)) throw invalid(`${what} must be an integer number of milliseconds`);
  // no duration is negative (the core reads some negative values as "none" or "the
  // backoff": those are spelled by leaving the option out)
  if (v < 0 && min === 0) throw invalid(`${what} must be >= 0 ms, not ${v}`);
  if (v < min || v > max) throw invalid(`${what} must be between ${min} and ${max} ms (${note}), not ${v}`);
  return v;
}

/**
 * A duration whose 0 the core reads as "none" or "the default" (expires, a result's
 * ttl, resultTtl, a task's timeout...): 1 ms or more, as Python's allow_zero=False.
 * "None" and "the default" are spelled by leaving the option out.
 */
function positiveMs(v, what) { return ms(v, what, 1); }

/** A lock's ttl, a rate limit's window: 1 ms to 366 days. */
function lease(v, what) { return ms(v, what, 1, native.MAX_LEASE_MS, '366 days'); }

/** An instant (ms since the epoch, or a Date); `min` 1 where the core reads 0 as "none" (runAt, before). */
function instant(v, what, min = 0) {
  if (v instanceof Date) {
    const t = v.getTime();
    if (Number.isNaN(t)) throw invalid(`${what} is an invalid Date`);
    return ms(t, what, min);
  }
  return ms(v, what, min);
}

/** An optional integer count (undefined when not given); NaN, 1.5, '5' are refused, not read as 0. */
function int(v, what) {
  if (v === undefined || v === null) return undefined;
  if (typeof v === 'bigint') return fromBig(v);
  if (typeof v !== 'number' || !Number.isInteger(v)) throw invalid(`${what} must be an integer`);
  return v;
}

/** An optional count between min and max (undefined when not given): where the core reads 0 as "the default", 0 is refused. */
function count(v, what, min, max) {
  const n = int(v, what);
  if (n !== undefined && (n < min || (max !== undefined && n > max))) {
    const range = max === undefined ? `>= ${min}` : `between ${min} and ${max}`;
    throw invalid(`${what} must be an integer ${range}, not ${typeof v === 'bigint' ? `${v}n` : v}`);
  }
  return n;
}

/** A payload size limit in bytes: >= 1 (the core reads 0 as "the default, 1 MiB"). */
function payloadLimit(v) {
  const n = int(v, 'maxPayload');
  if (n === undefined || n < 1) throw invalid(`maxPayload must be an integer >= 1 (bytes), not ${String(v)}`);
  return n;
}

/** What a refused argument was, for a message: undefined, null, 1.5, a string ("x"), an object. */
function shown(v) {
  if (v === undefined || v === null || typeof v === 'number' || typeof v === 'boolean') return String(v);
  if (typeof v === 'bigint') return `${v}n`;
  if (typeof v === 'string') return `a string (${JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}...` : v)})`;
  if (Array.isArray(v)) return 'an array';
  return `${/^[aeiou]/.test(typeof v) ? 'an' : 'a'} ${typeof v}`;
}

/** An optional flag: true, false, or left out (undefined/null: false); 'no' or 1 is refused, not read as true. */
function bool(v, what) {
  if (v === undefined || v === null) return false;
  if (typeof v !== 'boolean') throw invalid(`${what} must be a boolean, not ${typeof v}`);
  return v;
}

function str(v, what) {
  if (typeof v !== 'string') throw invalid(`${what} must be a string`);
  return v;
}

/**
 * An options object ({} when none). With `keys`, a key it does not know is refused
 * ({ dealy: 5000 } must not enqueue a job to run now), as is an array.
 */
function opts(o, what, keys) {
  if (o === undefined || o === null) return {};
  // the messages are built only when one is thrown (this runs for every job of a batch)
  const known = () => (keys ? ` (known: ${keys.join(', ')})` : '');
  if (typeof o !== 'object' || Array.isArray(o)) {
    // q.enqueue(1, 5000) (a delay meant as { delay: 5000 }) says which call and what it takes
    const got = Array.isArray(o) ? 'an array' : `${/^[aeiou]/.test(typeof o) ? 'an' : 'a'} ${typeof o}`;
    throw invalid(`${what || 'options'} must be an object, not ${got}${known()}`);
  }
  if (keys) {
    for (const k of Object.keys(o)) {
      if (!keys.includes(k)) throw invalid(`unknown option "${k}" in ${what || 'options'}${known()}`);
    }
  }
  return o;
}

/** A fresh owner id, host:pid:random (the core's). */
function defaultOwner() {
  return native.ownerId();
}

/** The fencing token as the BigInt the core gave (tokens travel as BigInt). */
function tokenOf(t) {
  if (typeof t === 'bigint') return t;
  if (typeof t === 'string' && /^-?\d+$/.test(t)) return BigInt(t);
  if (typeof t === 'number' && Number.isSafeInteger(t)) return BigInt(t);
  throw invalid('token must be a bigint (or its decimal string)');
}

function idOf(job, token) {
  if (job instanceof Job) return [job.id, token === undefined ? job.token : tokenOf(token)];
  job = fromBig(job);
  if (typeof job === 'number' || typeof job === 'bigint') {
    if (token === undefined) throw invalid('a job id needs its token');
    return [job, tokenOf(token)];
  }
  if (job && typeof job === 'object' && 'id' in job && 'token' in job) return [fromBig(job.id), tokenOf(job.token)];
  throw invalid(`expected a Job or a job id and token, not ${shown(job)}`);
}

function jobIdOf(job) {
  if (job instanceof Job) return job.id;
  const id = fromBig(job);
  if (typeof id === 'bigint' || (typeof id === 'number' && Number.isInteger(id))) return id;
  throw invalid(`expected a Job or a job id, not ${shown(job)}`);
}

// AbortSignal.any (Node >= 20.3) where it exists.
function anySignal(signals) {
  if (typeof AbortSignal.any === 'function') return AbortSignal.any(signals);
  const c = new AbortController();
  for (const s of signals) {
    if (s.aborted) { c.abort(s.reason); break; }
    s.addEventListener('abort', () => c.abort(s.reason), { once: true });
  }
  return c.signal;
}

// ---- messages ----

// util.inspect / console.log of a Job, Event or Notification: the decoded fields (its
// getters), as `Job { id: 1, queue: 'emails', payload: { ... }, ... }`, not the
// internal row, queue and database handle it is made of. The fields go into an
// instance of a class of the same name so that inspect prints that name.
const views = new Map();
function viewClass(name) {
  let C = views.get(name);
  if (!C) { C = { [name]: class {} }[name]; views.set(name, C); }
  return C;
}
function inspectFields(self, name, fields, depth, options, inspect) {
  if (depth < 0) return options.stylize(`[${name}]`, 'special');
  const o = new (viewClass(name))();
  for (const k of fields) {
    try { o[k] = self[k]; } catch (_) { o[k] = self._row && k === 'payload' ? self._row.payload : undefined; }
  }
  // `depth` is what is left at this object's level, where o stands in for it
  return (inspect || util.inspect)(o, { ...options, depth });
}
const JOB_FIELDS = ['id', 'queue', 'state', 'payload', 'meta', 'priority', 'attempts', 'maxAttempts', 'token', 'runAt',
  'createdAt', 'leaseUntil', 'expiresAt', 'uniqueKey', 'worker', 'lastError', 'reason', 'diedAt'];

// A row for JSON.stringify: its BigInts (the token; an offset, id or priority beyond
// the safe integers) as their decimal strings (JSON.stringify throws on a BigInt).
function jsonRow(row) {
  const r = { ...row };
  for (const k of Object.keys(r)) if (typeof r[k] === 'bigint') r[k] = String(r[k]);
  return r;
}

class Job {
  constructor(queue, row) {
    this._queue = queue;
    this._row = row;
    this._payload = undefined;
  }
  get id() { return this._row.id; }
  get queue() { return this._row.queue; }
  get state() { return this._row.state; }
  get payload() {
    if (this._payload === undefined) this._payload = fromJson(this._row.payload);
    return this._payload;
  }
  get payloadJson() { return this._row.payload; }
  get meta() { return fromJson(this._row.meta); }
  get priority() { return this._row.priority; }
  get attempts() { return this._row.attempts; }
  get maxAttempts() { return this._row.maxAttempts; }
  /** The lease's fencing token (BigInt): pass it back as given. */
  get token() { return this._row.token; }
  get runAt() { return this._row.runAt; }
  get createdAt() { return this._row.createdAt; }
  get leaseUntil() { return this._row.leaseUntil; }
  get expiresAt() { return this._row.expiresAt; }
  get uniqueKey() { return this._row.uniqueKey; }
  get worker() { return this._row.worker; }
  get lastError() { return this._row.lastError; }
  get reason() { return this._row.reason; }
  get diedAt() { return this._row.diedAt; }
  ack(o) { return this._queue.ack(this, undefined, o); }
  retry(o) { return this._queue.retry(this, o); }
  fail(o) { return this._queue.fail(this, o); }
  heartbeat(o) { return this._queue.heartbeat(this, o); }
  cancel() { return this._queue.cancel(this.id); }
  complete(value, o) { return this._queue.complete(this, value, o); }
  toJSON() { return { ...jsonRow(this._row), payload: rowJson(this._row.payload, this.payload), meta: rowJson(this._row.meta, this.meta) }; }
  [util.inspect.custom](depth, options, inspect) { return inspectFields(this, 'Job', JOB_FIELDS, depth, options, inspect); }
}

class Message {
  constructor(row) { this._row = row; this._payload = undefined; }
  get id() { return this._row.id; }
  get payload() {
    if (this._payload === undefined) this._payload = fromJson(this._row.payload);
    return this._payload;
  }
  get meta() { return fromJson(this._row.meta); }
  get createdAt() { return this._row.createdAt; }
  toJSON() { return { ...jsonRow(this._row), payload: rowJson(this._row.payload, this.payload), meta: rowJson(this._row.meta, this.meta) }; }
  [util.inspect.custom](depth, options, inspect) {
    return inspectFields(this, this.constructor.name, this._fields, depth, options, inspect);
  }
}
Message.prototype._fields = ['id', 'payload', 'meta', 'createdAt'];
class Event extends Message {
  get offset() { return this._row.id; }
  get topic() { return this._row.name; }
  get key() { return this._row.key; }
}
Event.prototype._fields = ['offset', 'topic', 'key', 'payload', 'meta', 'createdAt'];
class Notification extends Message {
  get channel() { return this._row.name; }
}
Notification.prototype._fields = ['id', 'channel', 'payload', 'meta', 'createdAt'];

class Result {
  constructor(row) {
    this.jobId = row.jobId;
    this.ok = !row.isError;
    this.value = row.isError ? undefined : fromJson(row.value);
    this.error = row.isError ? { type: row.errorType, message: row.errorMessage, trace: row.errorTrace } : null;
    this.createdAt = row.createdAt;
    this.expiresAt = row.expiresAt;
  }
  /** The value, or throws the recorded task error as a TaskError. */
  unwrap() {
    if (this.ok) return this.value;
    throw new errors.TaskError(this.error.type, this.error.message, this.jobId, this.error.trace);
  }
  /** For JSON.stringify: BigInts in the value as their decimal strings, as a job's are. */
  toJSON() { return { ...this, value: bigAsString(this.value) }; }
}

// ---- the database ----

class Transaction {
  constructor(db, h) { this._db = db; this._h = h; this.active = true; this._closedByDb = false; db._txs.add(this); }
  get database() { return this._db; }
  _end(commit, byClose) {
    if (!this.active) return;
    this.active = false;
    this._closedByDb = !!byClose;
    this._db._txs.delete(this);
    if (commit) { native.txEnd(this._h, true); return; }
    try { native.txEnd(this._h, false); } catch (_) { /* rolled back */ }
  }
  /** Runs SQL of the application's (no result rows) inside the transaction. */
  exec(sql) { return native.exec(this._h, str(sql, 'sql')); }
}

class Database {
  constructor(path, options) {
    const o = opts(options, 'tocsin.open() options', ['busyTimeout', 'maxPayload', 'readOnly', 'allowOtherSqlite']);
    ensureLoaded();
    if (!bool(o.allowOtherSqlite, 'allowOtherSqlite')) {
      // the core names any other loaded object carrying a copy of SQLite (a second
      // better-sqlite3 build, node-sqlite3, an addon linking libsqlite3.so)
      const copies = native.sqliteCopies();
      if (copies !== null) {
        throw errorOf('TOCSIN_ERROR', `tocsin: ${copies}. Use one better-sqlite3 (npm ls better-sqlite3), or pass ` +
          '{ allowOtherSqlite: true } if that copy never opens this file.');
      }
    }
    // the core's busy timeout is an int of ms; 0 is its default (5000): left out here
    const busy = ms(o.busyTimeout, 'busyTimeout', 1, 2147483647, 'about 24 days');
    const maxPayload = o.maxPayload === undefined || o.maxPayload === null ? null : payloadLimit(o.maxPayload);
    this._h = native.open(str(path, 'path'), busy || 0, maxPayload, bool(o.readOnly, 'readOnly'));
    this.path = path;
    this._waits = new Set();
    this._closers = new Set(); // listeners, subscriptions, workers: closed with the database
    this._txs = new Set(); // transactions in progress: rolled back by close()
    this._closing = false;
    this._closed = false;
  }
  get closed() { return this._closed; }
  /** The open transaction of this database whose callback the running code is part of, or null. */
  _contextTx() {
    if (this._txs.size === 0) return null;
    const stack = txContext.getStore();
    if (stack) for (const t of stack) if (t._db === this && t.active) return t;
    return null;
  }
  /**
   * The handle a call runs on: o.tx's, else the database's. `what` names a call that
   * writes: made without o.tx inside a transaction callback of this database, it is
   * refused at once (it would wait for the lock that transaction holds).
   */
  _handle(o, what) {
    const tx = o && o.tx;
    if (tx === undefined || tx === null) {
      if (this._closing) throw errorOf('TOCSIN_CLOSED', 'the database is closed');
      if (what !== undefined && this._txs.size > 0 && this._contextTx()) {
        throw invalid(`${what} was called without { tx } inside the callback of db.transaction() on this database: ` +
          'it would write on the database\'s own connection and wait for the write lock that transaction holds ' +
          'until the busy timeout; pass { tx } to write in the transaction, or call it after the transaction ends');
      }
      return this._h;
    }
    if (!(tx instanceof Transaction)) throw invalid('tx must be a Transaction (from db.transaction)');
    if (tx._db !== this) throw invalid('tx belongs to another database');
    if (!tx.active) throw errorOf('TOCSIN_CLOSED', 'the transaction has ended');
    return tx._h;
  }
  /**
   * The database's handle for `what`, a call that writes and takes no { tx }: refused
   * at once inside a transaction callback of this database (see _handle).
   */
  _writeHandle(what) {
    if (this._txs.size > 0 && this._contextTx()) {
      throw invalid(`${what} cannot run inside the callback of db.transaction() on this database: it writes ` +
        'outside the transaction (it takes no { tx }) and would wait for the write lock that transaction holds ' +
        'until the busy timeout; call it before or after the transaction');
    }
    return this._h;
  }

  /**
   * Closes the database: waits in flight reject with ClosedError, listeners,
   * subscriptions and workers close, calls running off the main thread finish.
   */
  async close() {
    if (this._closed) return;
    this._closing = true;
    const closed = errorOf('TOCSIN_CLOSED', 'the database was closed');
    for (const w of [...this._waits]) w.cancel(closed);
    // _closing refuses new waits, listeners, subscriptions and workers from here on;
    // the loop still takes whatever joined the set meanwhile, so nothing is left open
    while (this._closers.size > 0) {
      for (const c of [...this._closers]) {
        this._closers.delete(c);
        try { await c._closeFromDb(); } catch (_) { /* closing anyway */ }
      }
    }
    // transactions still open are rolled back, as closing a connection does: none may
    // go on writing (and commit) after close(); their transaction() rejects with ClosedError
    for (const tx of [...this._txs]) tx._end(false, true);
    while (native.close(this._h) > 0) await new Promise((r) => setTimeout(r, 2));
    this._closed = true;
  }

  /**
   * Runs fn(tx) in a write transaction: committed when fn resolves, rolled back when it
   * throws. { signal }: aborted while the transaction waits for the write lock, that
   * wait ends (nothing begun); aborted before fn settles, the transaction rolls back
   * instead of committing. Either way the promise rejects with the signal's reason.
   */
  async transaction(fn, o) {
    o = opts(o, 'db.transaction() options', ['signal']);
    checkSignal(o.signal);
    return this._transaction(fn, false, o.signal);
  }

  async _transaction(fn, onMain, signal) {
    if (typeof fn !== 'function') throw invalid('transaction(fn): fn must be a function');
    if (this._contextTx()) {
      // its own write lock would keep the new one waiting until the busy timeout
      throw invalid('transactions do not nest: db.transaction() was called inside the callback of a transaction of ' +
        'this database, which holds the write lock the new one would wait for; write in the open one (pass its { tx })');
    }
    if (signal && signal.aborted) throw abortReason(signal);
    let th;
    if (signal) {
      // the core's cancel token: an abort ends the BEGIN's wait for the lock on the pool
      const cancel = native.cancelNew();
      const onAbort = () => native.cancelFire(cancel);
      signal.addEventListener('abort', onAbort, { once: true });
      try {
        th = await native.txBegin(this._handle(), !!onMain, cancel);
      } catch (e) {
        if (signal.aborted) throw abortReason(signal);
        throw e;
      } finally {
        signal.removeEventListener('abort', onAbort);
      }
    } else {
      th = await native.txBegin(this._handle(), !!onMain);
    }
    const tx = new Transaction(this, th);
    if (signal && signal.aborted) {  // aborted as the BEGIN returned: fn does not run
      tx._end(false);
      throw abortReason(signal);
    }
    if (this._closing) {
      // close() began while the transaction waited for the write lock
      tx._end(false, true);
      throw errorOf('TOCSIN_CLOSED', 'the database was closed');
    }
    let result;
    try {
      const outer = txContext.getStore();
      result = await txContext.run(outer ? [...outer, tx] : [tx], fn, tx);
    } catch (e) {
      const byClose = tx._closedByDb;
      tx._end(false);
      if (byClose && !(e instanceof errors.ClosedError)) {
        throw errorOf('TOCSIN_CLOSED', 'the database was closed during the transaction (rolled back)');
      }
      throw e;
    }
    if (!tx.active) {
      throw errorOf('TOCSIN_CLOSED', tx._closedByDb
        ? 'the database was closed during the transaction (rolled back)' : 'the transaction ended early');
    }
    if (signal && signal.aborted) {  // aborted while fn ran: nothing of it commits
      tx._end(false);
      throw abortReason(signal);
    }
    tx._end(true);
    return result;
  }

  /**
   * Runs SQL of the application's (no result rows): a Promise, always (a write that
   * finds the file locked by another process finishes on the libuv pool; an error is
   * a rejection, never a synchronous throw that only happens when uncontended).
   */
  async exec(sql, o) { return native.exec(this._handle(opts(o, 'db.exec() options', ['tx']), 'db.exec()'), str(sql, 'sql')); }
  now() { return native.now(this._h); }
  /** Fixes the clock at `when` (ms or Date); null restores the system clock (tests). */
  setTime(when) { native.setTime(this._h, when === null || when === undefined ? null : instant(when, 'time')); }
  setMaxPayload(bytes) { native.setMaxPayload(this._h, payloadLimit(bytes)); }

  queue(name) { return new Queue(this, str(name, 'queue name')); }
  stream(topic) { return new Stream(this, str(topic, 'topic')); }

  async stats() { return JSON.parse(await native.stats(this._h, null)).queues; }

  // ---- notify / listen ----
  async notify(channel, payload, o) {
    o = opts(o, 'db.notify() options', ['tx', 'meta']);
    return native.notify(this._handle(o, 'db.notify()'), str(channel, 'channel'), toJson(payload, 'payload', true), metaJson(o.meta));
  }
  async notifications(channel, o) {
    o = opts(o, 'db.notifications() options', ['afterId', 'limit']);
    const rows = await native.notifyRead(this._h, str(channel, 'channel'), o.afterId, o.limit);
    return rows.map((r) => new Notification(r));
  }
  async notifyMaxId() { return native.notifyMaxId(this._h); }
  async pruneNotifications(o) {
    o = opts(o, 'db.pruneNotifications() options', ['maxAge', 'maxKeep']);
    return native.notifyPrune(this._writeHandle('db.pruneNotifications()'), ms(o.maxAge, 'maxAge') || 0, count(o.maxKeep, 'maxKeep', 0) || 0);
  }
  async setNotifyAutotrim(o) {
    o = opts(o, 'db.setNotifyAutotrim() options', ['maxAge', 'maxKeep', 'oneIn']);
    const age = ms(o.maxAge, 'maxAge') || 0, keep = count(o.maxKeep, 'maxKeep', 0) || 0, oneIn = count(o.oneIn, 'oneIn', 0) || 0;
    if (oneIn > 0 && !age && !keep) throw invalid('setNotifyAutotrim() needs maxAge or maxKeep (oneIn 0 turns it off)');
    return native.notifyAutotrim(this._writeHandle('db.setNotifyAutotrim()'), age, keep, oneIn);
  }
  /** Listens on `channel` from now on: an async iterator of Notifications and an EventEmitter ('notification'). */
  listen(channel, o) {
    o = opts(o, 'db.listen() options', ['bufferSize', 'signal']);
    checkSignal(o.signal);
    return new Listener(this, native.listenOpen(this._handle(), str(channel, 'channel'), o.bufferSize), o.signal);
  }
  /** The raw wake: resolves after any commit to the file (any process). */
  subscribe() { return new Wake(this, native.subOpen(this._handle())); }

  // ---- results ----
  async saveResult(jobId, value, o) {
    o = opts(o, 'db.saveResult() options', ['tx', 'ttl']);
    return native.resultSave(this._handle(o, 'db.saveResult()'), jobIdOf(jobId), toJson(value, 'value'), positiveMs(o.ttl, 'ttl'));
  }
  async saveError(jobId, type, message, o) {
    o = opts(o, 'db.saveError() options', ['tx', 'ttl']);
    return native.resultSaveError(this._handle(o, 'db.saveError()'), jobIdOf(jobId), str(type, 'type'), message === undefined ? null : message, positiveMs(o.ttl, 'ttl'));
  }
  /** The stored result of a job, or null. */
  async result(jobId) {
    const r = await native.resultGet(this._h, jobIdOf(jobId), false);
    return r ? new Result(r) : null;
  }
  /** The outcome of a job (its result, or a JobDead error for a job that died without one), or null while it runs. */
  async checkResult(jobId) {
    const r = await native.resultGet(this._h, jobIdOf(jobId), true);
    return r ? new Result(r) : null;
  }
  /** Waits for a job's outcome (see checkResult): { timeout, signal }. */
  async waitResult(jobId, o) {
    o = opts(o, 'db.waitResult() options', ['timeout', 'signal']);
    const id = jobIdOf(jobId);
    const h = this._handle();
    const sub = native.subOpen(h);
    return waitFor({
      fd: sub.fd(), timeout: o.timeout, signal: o.signal, owner: this,
      attempt: () => {
        const v = native.resultWaitStep(h, id, sub);
        const conv = (r) => (r === null ? undefined : new Result(r));
        return v && typeof v.then === 'function' ? v.then(conv) : conv(v);
      },
      // at the timeout, one last check: its TimeoutError says why (never claimed,
      // running, retrying)
      atDeadline: async () => {
        try {
          return new Result(await native.resultWaitStep(h, id, sub, true));
        } catch (e) {
          if (e && e.code === 'TOCSIN_TIMEOUT') e.message = `no result for job ${id} within ${o.timeout} ms: ${e.message}`;
          throw e;
        }
      },
      recheck: () => 1000,
      cleanup: () => sub.close(),
    });
  }
  async deleteResult(jobId) { return native.resultDelete(this._writeHandle('db.deleteResult()'), jobIdOf(jobId)); }

  // ---- locks and rate limits ----
  lock(name, o) { return new Lock(this, str(name, 'lock name'), opts(o, 'db.lock() options', ['ttl', 'owner'])); }
  async lockHolder(name) { return native.lockHolder(this._h, str(name, 'lock name')); }
  /** Acquires `name` (waiting: { ttl, timeout, signal, owner }), runs fn(lock), releases. */
  async withLock(name, o, fn) {
    if (typeof o === 'function') { fn = o; o = {}; }
    if (typeof fn !== 'function') throw invalid('withLock(name, options, fn): fn must be a function');
    o = opts(o, 'db.withLock() options', ['ttl', 'owner', 'timeout', 'signal']);
    this._writeHandle('db.withLock()');
    const lock = this.lock(name, { ttl: o.ttl, owner: o.owner });
    await lock.acquire({ timeout: o.timeout, signal: o.signal });
    try {
      return await fn(lock);
    } finally {
      if (!this._closing) await lock.release();
    }
  }
  rateLimit(name, limit, per) { return new RateLimit(this, str(name, 'rate limit name'), limit, per); }

  // ---- schedules ----
  async schedule(name, cron, queue, payload, o) {
    return native.scheduleSet(this._writeHandle('db.schedule()'), str(name, 'schedule name'), str(cron, 'cron'), str(queue, 'queue'),
      toJson(payload, 'payload', true), scheduleOpts(o));
  }
  async updateSchedule(name, changes) {
    const c = opts(changes, 'db.updateSchedule() changes', [...SCHEDULE_KEYS, 'cron', 'queue', 'payload']);
    return native.scheduleUpdate(this._writeHandle('db.updateSchedule()'), str(name, 'schedule name'), c.cron === undefined ? null : c.cron,
      c.queue === undefined ? null : c.queue, 'payload' in c ? toJson(c.payload, 'payload') : null, scheduleOpts(c, true));
  }
  async schedules() { return (await native.scheduleList(this._h)).map(scheduleOf); }
  async getSchedule(name) { const s = await native.scheduleGet(this._h, str(name, 'schedule name')); return s ? scheduleOf(s) : null; }
  async pauseSchedule(name) { return native.schedulePause(this._writeHandle('db.pauseSchedule()'), str(name, 'schedule name'), false); }
  async resumeSchedule(name) { return native.schedulePause(this._writeHandle('db.resumeSchedule()'), str(name, 'schedule name'), true); }
  async unschedule(name) { return native.scheduleRemove(this._writeHandle('db.unschedule()'), str(name, 'schedule name')); }
  async schedulerTick() { return native.schedulerTick(this._writeHandle('db.schedulerTick()')); }
  async schedulerNextFire() { const t = await native.schedulerNextFire(this._h); return t < 0 ? null : t; }
  async schedulerLead(owner, ttl) {
    return native.schedulerLead(this._writeHandle('db.schedulerLead()'), str(owner, 'owner'), ms(ttl, 'ttl', 1));
  }
  async schedulerResign(owner) { return native.schedulerResign(this._writeHandle('db.schedulerResign()'), str(owner, 'owner')); }

  // ---- housekeeping ----
  /** Deletes expired results and stale rate-limit state; prunes notifications when a criterion is given. */
  async prune(o) {
    o = opts(o, 'db.prune() options', ['notificationsMaxAge', 'notificationsMaxKeep']);
    const h = this._writeHandle('db.prune()');
    // checked before anything is deleted, named as given here
    const age = ms(o.notificationsMaxAge, 'notificationsMaxAge') || 0;
    const keep = count(o.notificationsMaxKeep, 'notificationsMaxKeep', 0) || 0;
    const out = { results: await native.resultSweep(h), rateLimits: await native.rateSweep(h), notifications: 0 };
    if (age || keep) out.notifications = await native.notifyPrune(h, age, keep);
    return out;
  }

  // ---- tasks ----
  /** Calls task `name` by name on `queue` (any runtime's worker may run it). */
  async call(queue, name, args, o) { return this.queue(queue).call(name, args, o); }
}

const SCHEDULE_KEYS = ['priority', 'maxAttempts', 'jobExpires', 'maxCatchUp', 'catchUp', 'localTime', 'meta'];
function scheduleOpts(o, update) {
  o = opts(o, update ? 'db.updateSchedule() changes' : 'db.schedule() options', update ? [...SCHEDULE_KEYS, 'cron', 'queue', 'payload'] : SCHEDULE_KEYS);
  const r = {};
  for (const k of ['priority', 'maxAttempts', 'jobExpires', 'maxCatchUp']) if (o[k] !== undefined) r[k] = fromBig(o[k]);
  // 0 is the core's "the default" (never expires, 3 attempts, 100 runs caught up): a new
  // schedule spells it by leaving the option out, and refuses 0; a change may give 0 to
  // go back to the default
  const min = update ? 0 : 1;
  if (r.jobExpires !== undefined && r.jobExpires !== null) r.jobExpires = ms(r.jobExpires, 'jobExpires', min);
  if (r.maxAttempts !== undefined) count(r.maxAttempts, 'maxAttempts', min, native.MAX_ATTEMPTS);
  if (r.maxCatchUp !== undefined) count(r.maxCatchUp, 'maxCatchUp', min, 100000);
  if (o.catchUp !== undefined) r.catchUp = o.catchUp;
  if (o.localTime !== undefined) r.localTime = bool(o.localTime, 'localTime');
  if ('meta' in o && (o.meta !== undefined || update)) r.meta = metaJson(o.meta);
  return r;
}
function scheduleOf(s) { return { ...s, payload: fromJson(s.payload), meta: fromJson(s.meta) }; }

// ---- queues ----

function enqueueArgs(o) {
  if (o.delay !== undefined && o.delay !== null && o.runAt !== undefined && o.runAt !== null) {
    throw invalid('give delay or runAt, not both');
  }
  return [o.priority === undefined ? null : fromBig(o.priority), ms(o.delay, 'delay'), instant(o.runAt, 'runAt', 1),
    o.maxAttempts === undefined ? null : fromBig(o.maxAttempts), positiveMs(o.expires, 'expires'),
    o.uniqueKey === undefined ? null : o.uniqueKey, metaJson(o.meta)];
}

const ENQUEUE_KEYS = ['priority', 'delay', 'runAt', 'maxAttempts', 'expires', 'uniqueKey', 'meta'];
const JOB_SPEC_KEYS = ['payload', 'queue', ...ENQUEUE_KEYS];
function plainJob(j) {
  return j.queue === undefined && j.priority === undefined && j.delay === undefined && j.runAt === undefined &&
    j.maxAttempts === undefined && j.expires === undefined && j.uniqueKey === undefined && j.meta === undefined;
}

class Queue {
  constructor(db, name) { this.db = db; this.name = name; }

  /** Enqueues a job; resolves to its id. { priority, delay, runAt, maxAttempts, expires, uniqueKey, meta, tx } */
  async enqueue(payload, o) {
    if (o === undefined) return native.enqueue(this.db._handle(o, 'queue.enqueue()'), this.name, toJson(payload, 'payload'));
    o = opts(o, 'queue.enqueue() options', ['tx', 'priority', 'delay', 'runAt', 'maxAttempts', 'expires', 'uniqueKey', 'meta']);
    return native.enqueue(this.db._handle(o, 'queue.enqueue()'), this.name, toJson(payload, 'payload'), ...enqueueArgs(o));
  }
  /** Enqueues jobs atomically (all or none): each a { payload, ...options } object. */
  async enqueueMany(jobs, o) {
    o = opts(o, 'queue.enqueueMany() options', ['tx']);
    if (!Array.isArray(jobs)) throw invalid('jobs must be an array');
    const texts = [];
    for (let i = 0; i < jobs.length; i++) {
      const j = jobs[i];
      if (!j || typeof j !== 'object' || !('payload' in j)) throw invalid(`jobs[${i}] must be an object with a payload`);
      const keys = Object.keys(j);
      if (keys.length !== 1 || keys[0] !== 'payload') { // { payload } alone needs no other check
        opts(j, `jobs[${i}]`, JOB_SPEC_KEYS);
        if (!plainJob(j)) break;
      }
      texts.push(toJson(j.payload, `jobs[${i}].payload`));
    }
    // a payload and nothing else (the common batch): the payload texts alone
    if (texts.length === jobs.length) return native.enqueueMany(this.db._handle(o, 'queue.enqueueMany()'), this.name, texts);
    const specs = jobs.map((j, i) => {
      if (!j || typeof j !== 'object' || !('payload' in j)) throw invalid(`jobs[${i}] must be an object with a payload`);
      opts(j, `jobs[${i}]`, JOB_SPEC_KEYS);
      let args;
      try {
        args = enqueueArgs(j);
      } catch (e) {
        throw invalid(`jobs[${i}].${e.message}`); // which job's option it was
      }
      return [j.queue === undefined ? this.name : j.queue, toJson(j.payload, `jobs[${i}].payload`), ...args];
    });
    return native.enqueueMany(this.db._handle(o, 'queue.enqueueMany()'), specs);
  }
  /** Claims one job for `workerId` (null when none is claimable). { visibility } */
  async claim(workerId, o) {
    const jobs = await this._claim(1, workerId, o, 'queue.claim()');
    return jobs.length ? jobs[0] : null;
  }
  async claimBatch(n, workerId, o) { return this._claim(n, workerId, o, 'queue.claimBatch()'); }
  async _claim(n, workerId, o, call) {
    o = opts(o, `${call} options`, ['visibility']);
    const rows = await native.claim(this.db._writeHandle(call), this.name, str(workerId, 'workerId'), n,
      o.visibility === undefined ? DEFAULT_VISIBILITY : ms(o.visibility, 'visibility', 1));
    return rows.map((r) => new Job(this, r));
  }
  /** true when the token still held the lease (the job is done). { tx } */
  async ack(job, token, o) {
    if (token && typeof token === 'object' && !(typeof token === 'bigint')) { o = token; token = undefined; }
    o = opts(o, 'ack() options', ['tx']);
    const [id, tok] = idOf(job, token);
    return native.ack(this.db._handle(o, 'ack()'), id, tok);
  }
  async ackBatch(jobs, o) {
    o = opts(o, 'queue.ackBatch() options', ['tx']);
    if (!Array.isArray(jobs)) throw invalid('jobs must be an array');
    const pairs = jobs.map((j) => idOf(j));
    return native.ackBatch(this.db._handle(o, 'queue.ackBatch()'), pairs.map((p) => p[0]), pairs.map((p) => p[1]));
  }
  /** { delay (ms; default: the core's exponential backoff), error, token } */
  async retry(job, o) {
    o = opts(o, 'retry() options', ['tx', 'token', 'delay', 'error']);
    const [id, tok] = idOf(job, o.token);
    return native.retry(this.db._handle(o, 'retry()'), id, tok, ms(o.delay, 'delay'), o.error === undefined ? null : o.error);
  }
  async fail(job, o) {
    o = opts(o, 'fail() options', ['tx', 'token', 'error']);
    const [id, tok] = idOf(job, o.token);
    return native.fail(this.db._handle(o, 'fail()'), id, tok, o.error === undefined ? null : o.error);
  }
  async heartbeat(job, o) {
    o = opts(o, 'heartbeat() options', ['tx', 'token', 'extend']);
    const [id, tok] = idOf(job, o.token);
    return native.heartbeat(this.db._handle(o, 'heartbeat()'), id, tok, o.extend === undefined ? DEFAULT_VISIBILITY : ms(o.extend, 'extend', 1));
  }
  /** Saves `value` as the job's result and acks it, atomically. { ttl, tx, token } */
  async complete(job, value, o) {
    o = opts(o, 'complete() options', ['tx', 'token', 'ttl']);
    const [id, tok] = idOf(job, o.token);
    return native.complete(this.db._handle(o, 'complete()'), id, tok, toJson(value, 'value', true), positiveMs(o.ttl, 'ttl')); // no value: null
  }
  async failTask(job, type, message, o) {
    o = opts(o, 'failTask() options', ['tx', 'token', 'ttl']);
    const [id, tok] = idOf(job, o.token);
    return native.failTask(this.db._handle(o, 'failTask()'), id, tok, str(type, 'type'), message === undefined ? null : message, positiveMs(o.ttl, 'ttl'));
  }
  async cancel(job) { return native.cancel(this.db._writeHandle('cancel()'), jobIdOf(job)); }
  async get(id) {
    const r = await native.get(this.db._h, jobIdOf(id));
    return r ? new Job(this, r) : null;
  }
  async pause() { return native.pause(this.db._writeHandle('queue.pause()'), this.name, false); }
  async resume() { return native.pause(this.db._writeHandle('queue.resume()'), this.name, true); }
  async isPaused() { return native.isPaused(this.db._h, this.name); }
  async stats() { return JSON.parse(await native.stats(this.db._h, this.name)); }
  async nextDeadline() { const t = await native.nextDeadline(this.db._h, [this.name]); return t < 0 ? null : t; }
  async deadLetters(o) {
    o = opts(o, 'queue.deadLetters() options', ['afterId', 'limit']);
    return (await native.deadList(this.db._h, this.name, o.afterId, o.limit)).map((r) => new Job(this, r));
  }
  async requeue(job) { return native.deadRequeue(this.db._writeHandle('queue.requeue()'), jobIdOf(job)); }
  async purge(o) { o = opts(o, 'queue.purge() options', ['before']); return native.deadPurge(this.db._writeHandle('queue.purge()'), this.name, instant(o.before, 'before', 1) || 0); }

  /** Resolves true once something is claimable. { timeout, signal } */
  async wait(o) {
    o = opts(o, 'queue.wait() options', ['timeout', 'signal']);
    return waitClaimable(this.db, [this.name], o.timeout, o.signal);
  }

  /** for await (const job of queue.jobs(workerId, { signal, visibility, batch })) */
  jobs(workerId, o) {
    o = opts(o, 'queue.jobs() options', ['signal', 'visibility', 'batch']);
    str(workerId, 'workerId');
    checkSignal(o.signal);
    const self = this;
    const batch = o.batch === undefined ? 1 : count(o.batch, 'batch', 1, 10000);
    return (async function* jobIterator() {
      const buffered = [];
      try {
        for (;;) {
          if (buffered.length) { yield buffered.shift(); continue; }
          if (o.signal && o.signal.aborted) throw abortReason(o.signal);
          const got = await self.claimBatch(batch, workerId, { visibility: o.visibility });
          if (got.length) { buffered.push(...got); continue; }
          await self.wait({ signal: o.signal });
        }
      } finally {
        // the loop ended (break, a throw, the signal) with jobs of a batch claimed and
        // not handed on: hand them back (pending again at once, no attempt consumed)
        // rather than leave them to their lease
        for (const j of buffered.splice(0)) {
          if (self.db._closing) break; // closed: the lease lapses and the job is claimed again
          try { await native.handBack(self.db._h, j.id, j.token, 0); } catch (_) { break; }
        }
      }
    })();
  }

  // tasks: see lib/tasks.js
}

function waitClaimable(db, queues, timeout, signal) {
  checkSignal(signal);
  checkTimeout(timeout);
  const h = db._handle();
  const sub = native.subOpen(h);
  let nextAt = null;
  return waitFor({
    fd: sub.fd(), timeout, signal, owner: db,
    attempt: () => {
      const v = native.queueWaitStep(h, queues, sub);
      const after = (r) => {
        if (r) return true;
        const d = native.nextDeadline(h, queues);
        nextAt = typeof d === 'number' ? d : null;
        return undefined;
      };
      return v && typeof v.then === 'function' ? v.then(after) : after(v);
    },
    recheck: () => {
      if (nextAt === null || nextAt < 0) return 1000;
      return Math.min(1000, Math.max(0, nextAt - native.now(h)));
    },
    cleanup: () => sub.close(),
  });
}

// ---- streams ----

class Stream {
  constructor(db, topic) { this.db = db; this.topic = topic; }
  async publish(payload, o) {
    o = opts(o, 'stream.publish() options', ['tx', 'key', 'meta']);
    return native.publish(this.db._handle(o, 'stream.publish()'), this.topic, toJson(payload, 'payload'), o.key === undefined ? null : o.key, metaJson(o.meta));
  }
  async publishMany(payloads, o) {
    o = opts(o, 'stream.publishMany() options', ['tx', 'keys']);
    if (!Array.isArray(payloads)) throw invalid('payloads must be an array');
    const h = this.db._handle(o, 'stream.publishMany()');
    if (payloads.length === 0) {
      // nothing to publish (as enqueueMany([]) enqueues nothing)
      if (o.keys !== undefined && o.keys !== null && (!Array.isArray(o.keys) || o.keys.length !== 0)) {
        throw invalid('keys must have one key per payload');
      }
      return [];
    }
    return native.publishMany(h, this.topic, payloads.map((p, i) => toJson(p, `payloads[${i}]`)), o.keys === undefined ? null : o.keys);
  }
  async read(o) {
    o = opts(o, 'stream.read() options', ['after', 'limit']);
    return (await native.streamRead(this.db._h, this.topic, o.after, o.limit)).map((r) => new Event(r));
  }
  async saveOffset(consumer, offset) { return native.saveOffset(this.db._writeHandle('stream.saveOffset()'), str(consumer, 'consumer'), this.topic, offset); }
  async offset(consumer) { return native.offset(this.db._h, str(consumer, 'consumer'), this.topic); }
  async trim(o) {
    o = opts(o, 'stream.trim() options', ['maxAge', 'maxCount', 'belowConsumers']);
    const age = ms(o.maxAge, 'maxAge') || 0, max = count(o.maxCount, 'maxCount', 0) || 0;
    const below = bool(o.belowConsumers, 'belowConsumers');
    if (!age && !max && !below) throw invalid('stream.trim() needs maxAge, maxCount or belowConsumers');
    return native.trim(this.db._writeHandle('stream.trim()'), this.topic, age, max, below);
  }
  /**
   * Replays from the consumer's saved offset (or fromOffset), then follows
   * live: an async iterator of Events. { consumer, fromOffset, batch,
   * autosaveEvery, autosaveMs, signal }
   */
  subscribe(o) {
    o = opts(o, 'stream.subscribe() options', ['consumer', 'fromOffset', 'batch', 'autosaveEvery', 'autosaveMs', 'saveOnClose', 'signal']);
    checkSignal(o.signal);
    if (o.saveOnClose !== undefined && typeof o.saveOnClose !== 'boolean') {
      throw new errors.InvalidArgumentError(`saveOnClose must be a boolean, got ${typeof o.saveOnClose}`);
    }
    const consumer = o.consumer === undefined ? null : o.consumer;
    // a named consumer's offset is saved when the subscription closes (the end of a
    // for-await loop, close()), by the core, unless saveOnClose: false
    const saveOnClose = consumer !== null && o.saveOnClose !== false;
    // 0 is the core's "the default" (batch) or "never" (autosave), and a fromOffset of
    // -1 its "the saved offset": left out here
    const from = count(o.fromOffset, 'fromOffset', 0);
    const w = native.streamSubOpen(this.db._handle(), this.topic, consumer,
      from === undefined ? null : from, count(o.batch, 'batch', 1, 10000),
      count(o.autosaveEvery, 'autosaveEvery', 1), positiveMs(o.autosaveMs, 'autosaveMs'),
      saveOnClose);
    return new Subscription(this.db, w, o.signal, (r) => new Event(r));
  }
}

// ---- waits with a descriptor: wake, listener, stream subscription ----

class Waiting {
  constructor(db, w, signal, wrap) {
    this._db = db;
    this._w = w;
    this._wrap = wrap;
    this._closed = false;
    this._signal = signal;
    this._onAbort = null;
    this._waits = new Set();
    db._closers.add(this);
    if (signal) {
      this._onAbort = () => this.close();
      if (signal.aborted) this.close(); else signal.addEventListener('abort', this._onAbort, { once: true });
    }
  }
  get closed() { return this._closed; }
  /** The next batch (at least one), waiting: { timeout, signal }. */
  async get(o) {
    o = opts(o, 'get() options', ['timeout', 'signal']);
    if (this._closed) {
      if (this._signal && this._signal.aborted) return Promise.reject(abortReason(this._signal));
      return Promise.reject(errorOf('TOCSIN_CLOSED', 'the subscription is closed'));
    }
    let signal = o.signal;
    let busy = false;
    if (this._signal) signal = signal ? anySignal([signal, this._signal]) : this._signal;
    return waitFor({
      fd: this._w.fd(), timeout: o.timeout, signal, owner: this._db, holder: this,
      attempt: () => {
        let rows;
        try {
          rows = this._w.next();
        } catch (e) {
          // a stream subscription's autosave found the write lock taken by another
          // process (1 ms busy timeout, never blocking the loop): nothing was saved or
          // handed out; the core retries the save at the next call
          if (e instanceof errors.BusyError) { busy = true; return undefined; }
          throw e;
        }
        return rows === null ? undefined : rows.map(this._wrap);
      },
      recheck: () => (busy ? (busy = false, 10) : null),
    });
  }
  async *[Symbol.asyncIterator]() {
    // the batch being handed on, how much of it was, and whether the rest is left to
    // the core (a save() mid-batch moved the core's position back: it comes again)
    const it = { batch: null, handed: 0, cut: false };
    this._iter = it;
    try {
      for (;;) {
        it.batch = await this.get();
        it.handed = 0;
        it.cut = false;
        for (const m of it.batch) {
          if (it.cut) break;
          it.handed++;
          this._handing(m);
          yield m;
        }
      }
    } finally {
      if (this._iter === it) this._iter = null;
      // a loop left mid-batch (handed >= 1: a break happens at a yield): the rest of
      // the batch was not handed on
      if (it.batch && it.handed < it.batch.length && !it.cut && !this._closed) this._stoppedAt(it.batch[it.handed - 1]);
      if (!this._iterKeepOpen) this.close();
    }
  }
  // The last event handed on while a for-await loop is mid-batch, else null.
  _midBatch() {
    const it = this._iter;
    return it && it.batch && !it.cut && it.handed >= 1 && it.handed < it.batch.length ? it.batch[it.handed - 1] : null;
  }
  _stoppedAt() {}
  _handing() {}
  close() {
    if (this._closed) return;
    // closed while a for-await loop is mid-batch (close() in its body, the signal,
    // db.close()): the rest of the batch is not handed on, and the position (what
    // close saves) goes back to the last event that was
    const ev = this._midBatch();
    if (ev) {
      this._stoppedAt(ev);
      this._iter.cut = true;
    }
    this._closed = true;
    this._db._closers.delete(this);
    if (this._signal && this._onAbort) this._signal.removeEventListener('abort', this._onAbort);
    const why = this._signal && this._signal.aborted ? abortReason(this._signal) : errorOf('TOCSIN_CLOSED', 'the subscription was closed');
    for (const w of [...this._waits]) w.cancel(why);
    this._w.close();
  }
  async _closeFromDb() { this.close(); }
}

class Listener extends Waiting {
  constructor(db, w, signal) {
    super(db, w, signal, (r) => new Notification(r));
    this._emitter = new EventEmitter();
    this._pumping = false;
    this._pumpStop = null; // ends the pump's wait once no 'notification' listener is left
    this._emitter.on('newListener', (ev) => { if (ev === 'notification') setImmediate(() => this._pump()); });
    // the last 'notification' listener removed: the pump stops waiting (its descriptor
    // no longer keeps the event loop alive); what arrives meanwhile stays for the next
    // listener or get()
    this._emitter.on('removeListener', (ev) => {
      if (ev === 'notification' && this._emitter.listenerCount('notification') === 0 && this._pumpStop) this._pumpStop.abort();
    });
  }
  get dropped() { return this._w.dropped(); }
  on(ev, fn) { this._emitter.on(ev, fn); return this; }
  once(ev, fn) { this._emitter.once(ev, fn); return this; }
  off(ev, fn) { this._emitter.off(ev, fn); return this; }
  addListener(ev, fn) { return this.on(ev, fn); }
  removeListener(ev, fn) { return this.off(ev, fn); }
  async _pump() {
    if (this._pumping) return;
    this._pumping = true;
    try {
      while (!this._closed && this._emitter.listenerCount('notification') > 0) {
        let batch;
        const stop = new AbortController();
        this._pumpStop = stop;
        try {
          batch = await this.get({ signal: stop.signal });
        } catch (e) {
          if (this._closed || stop.signal.aborted) break;
          if (this._emitter.listenerCount('error') > 0) this._emitter.emit('error', e);
          break;
        }
        // a handler that throws is the process's uncaught exception, as a throwing
        // listener of any Node emitter is; the other notifications are still
        // delivered (a process that handles 'uncaughtException' keeps listening).
        // (setImmediate: a nextTick queued here did not run when a handler closed
        // the listener and the loop had nothing else to do)
        for (const n of batch) {
          try {
            this._emitter.emit('notification', n);
          } catch (e) {
            setImmediate(() => { throw e; });
          }
        }
      }
    } finally {
      this._pumping = false;
    }
  }
  close() {
    const was = this._closed;
    super.close();
    // (no emitter yet when the constructor's signal was already aborted: Waiting's
    // constructor closes it before this class's fields exist, and nobody listens yet)
    if (!was && this._emitter) this._emitter.emit('close');
  }
}

class Subscription extends Waiting {
  // the offset of the last event handed on (mid-batch, the core has read further)
  get position() {
    const ev = this._midBatch();
    return ev ? ev.offset : this._w.position();
  }
  // the core's position goes back to the last event handed on: close saves that
  _stoppedAt(ev) { this._w.rewind(ev.offset); }
  // a subscription collected while its loop is mid-batch (never closed: the process ran
  // out of work while the body awaited) saves no more than this (the native finalizer)
  _handing(ev) { this._w.handed(ev.offset); }
  // saves the last event handed on; mid-batch, the rest of the batch then comes again
  // from the core (the loop goes on with it), so no save stores an event not handed on
  save() {
    const ev = this._midBatch();
    if (ev) {
      this._w.rewind(ev.offset);
      this._iter.cut = true;
    }
    this._w.save();
  }
}

class Wake {
  constructor(db, w) { this._db = db; this._w = w; this._closed = false; this._waits = new Set(); db._closers.add(this); }
  /** Resolves true after a commit (any process); { timeout, signal }. */
  async wait(o) {
    o = opts(o, 'wake.wait() options', ['timeout', 'signal']);
    if (this._closed) return Promise.reject(errorOf('TOCSIN_CLOSED', 'the subscription is closed'));
    return waitFor({
      fd: this._w.fd(), timeout: o.timeout, signal: o.signal, owner: this._db, holder: this,
      attempt: () => (this._w.next() ? true : undefined),
    });
  }
  close() {
    if (this._closed) return;
    this._closed = true;
    this._db._closers.delete(this);
    for (const w of [...this._waits]) w.cancel(errorOf('TOCSIN_CLOSED', 'the subscription was closed'));
    this._w.close();
  }
  async _closeFromDb() { this.close(); }
}

// ---- locks, rate limits ----

class Lock {
  constructor(db, name, o) {
    this.db = db;
    this.name = name;
    this.ttl = o.ttl === undefined ? 30000 : lease(o.ttl, 'ttl');
    this.owner = o.owner === undefined ? defaultOwner() : str(o.owner, 'owner');
    this.token = 0;
    this.until = 0;
  }
  get held() { return this.token > 0 && this.until > this.db.now(); }
  async tryAcquire() {
    const r = await native.lockAcquire(this.db._writeHandle('lock.tryAcquire()'), this.name, this.owner, this.ttl);
    if (r.token > 0) { this.token = r.token; this.until = r.until; return true; }
    return false;
  }
  /** Waits until held (resolves to the fencing token). { timeout, signal } */
  async acquire(o) {
    o = opts(o, 'lock.acquire() options', ['timeout', 'signal']);
    const db = this.db;
    db._writeHandle('lock.acquire()');
    const h = db._handle();
    const sub = native.subOpen(h);
    let until = 0;
    return waitFor({
      fd: sub.fd(), timeout: o.timeout, signal: o.signal, owner: db,
      attempt: () => {
        const v = native.lockWaitStep(h, this.name, this.owner, this.ttl, sub);
        const after = (r) => {
          if (r) { this.token = r.token; this.until = r.until; return r.token; }
          const hold = native.lockHolder(h, this.name);
          if (hold && typeof hold.then === 'function') return hold.then((x) => { until = x.until; return undefined; });
          until = hold.until;
          return undefined;
        };
        return v && typeof v.then === 'function' ? v.then(after) : after(v);
      },
      recheck: () => (until > 0 ? Math.min(1000, Math.max(0, until - native.now(h))) : 1000),
      cleanup: () => sub.close(),
    });
  }
  async renew(o) {
    o = opts(o, 'lock.renew() options', ['ttl']);
    const ttl = o.ttl === undefined ? this.ttl : lease(o.ttl, 'ttl');
    // (the core's own refusal names the token, which the caller never gave)
    if (!this.token) throw invalid(`lock.renew(): the lock "${this.name}" is not held by this Lock (acquire it first)`);
    const ok = await native.lockRenew(this.db._writeHandle('lock.renew()'), this.name, this.owner, this.token, ttl);
    if (ok) this.until = this.db.now() + ttl;
    return ok;
  }
  async release() {
    if (!this.token) return false;
    const ok = await native.lockRelease(this.db._writeHandle('lock.release()'), this.name, this.owner, this.token);
    this.until = 0; // the token stays: a fencing check against it still says 'stale'
    return ok;
  }
}

class RateLimit {
  constructor(db, name, limit, per) {
    this.db = db; this.name = name; this.limit = limit; this.per = lease(per, 'per');
  }
  /** { allowed, retryAfter (ms), remaining } */
  async tryAcquire() { return native.rateTry(this.db._writeHandle('rateLimit.tryAcquire()'), this.name, this.limit, this.per); }
  async reset() { return native.rateReset(this.db._writeHandle('rateLimit.reset()'), this.name); }
}

// ---- the extension in the app's own better-sqlite3 connections ----

/** The path of the loadable SQLite extension (this addon): db.loadExtension(loadablePath()). */
function loadablePath() { return addonPath; }

const loadedInto = new WeakSet();
/** Loads tocsin's SQL functions into a better-sqlite3 connection (once per connection). */
function load(betterDb) {
  if (!betterDb || typeof betterDb.loadExtension !== 'function' || typeof betterDb.prepare !== 'function') {
    throw invalid('expected a better-sqlite3 Database');
  }
  if (betterDb.open === false) throw errorOf('TOCSIN_CLOSED', 'the better-sqlite3 connection is closed');
  if (loadedInto.has(betterDb)) return betterDb;
  ensureLoaded();
  try {
    betterDb.loadExtension(addonPath, 'sqlite3_tocsin_init');
  } catch (e) {
    throw driverError('TOCSIN_ERROR', e.message, e);
  }
  loadedInto.add(betterDb);
  return betterDb;
}

function sqlOptions(o, extra) {
  const r = { ...extra };
  const exact = []; // [key, BigInt or JSON text]: written as is (a BigInt as its exact digits)
  // checked as queue.enqueue() checks them (JSON.stringify would write a NaN or an
  // Infinity as null, which the SQL function reads as "the default")
  const integer = (key, v) => {
    if (typeof v === 'bigint') exact.push([key, v]); else r[key] = v;
  };
  if (o.delay !== undefined && o.delay !== null && o.runAt !== undefined && o.runAt !== null) {
    throw invalid('give delay or runAt, not both');
  }
  if (o.priority !== undefined && o.priority !== null) integer('priority', int(o.priority, 'priority'));
  if (o.delay !== undefined) r.delay_ms = ms(o.delay, 'delay');
  if (o.runAt !== undefined) r.run_at_ms = instant(o.runAt, 'runAt', 1);
  if (o.maxAttempts !== undefined && o.maxAttempts !== null) {
    integer('max_attempts', count(o.maxAttempts, 'maxAttempts', 1, native.MAX_ATTEMPTS));
  }
  if (o.expires !== undefined) r.expires_ms = positiveMs(o.expires, 'expires');
  if (o.uniqueKey !== undefined && o.uniqueKey !== null) r.unique_key = str(o.uniqueKey, 'uniqueKey');
  // meta as metaJson wrote it: a BigInt in it is its exact digits (JSON.parse of that
  // text, to put it in r, rounded one past 2^53)
  if (o.meta !== undefined && o.meta !== null) exact.push(['meta', metaJson(o.meta)]);
  if (!exact.length) return Object.keys(r).length ? JSON.stringify(r) : null;
  const text = JSON.stringify(r);
  return `${text.slice(0, -1)}${text === '{}' ? '' : ','}${exact.map(([k, v]) => `"${k}":${v}`).join(',')}}`;
}

const stmtCache = new WeakMap();
function stmt(betterDb, key, sql) {
  let m = stmtCache.get(betterDb);
  if (!m) { m = new Map(); stmtCache.set(betterDb, m); }
  let s = m.get(key);
  // safeIntegers: the id or offset exactly (better-sqlite3 rounds one past 2^53 to a Number)
  if (!s) { s = betterDb.prepare(sql).pluck().safeIntegers(true); m.set(key, s); }
  return s;
}

// better-sqlite3's error (SQLite's primary result code in e.code) as the error class the
// same refusal has through the native calls
const SQL_CODES = {
  SQLITE_TOOBIG: 'TOCSIN_TOOBIG', SQLITE_BUSY: 'TOCSIN_BUSY', SQLITE_LOCKED: 'TOCSIN_BUSY',
  SQLITE_READONLY: 'TOCSIN_READONLY', SQLITE_NOMEM: 'TOCSIN_NOMEM', SQLITE_IOERR: 'TOCSIN_IOERR',
  SQLITE_FULL: 'TOCSIN_FULL', SQLITE_CORRUPT: 'TOCSIN_CORRUPT', SQLITE_NOTADB: 'TOCSIN_CORRUPT',
  SQLITE_CANTOPEN: 'TOCSIN_CANTOPEN', SQLITE_PERM: 'TOCSIN_PERM', SQLITE_AUTH: 'TOCSIN_PERM', SQLITE_INTERRUPT: 'TOCSIN_INTERRUPTED',
};
// SQLite's primary result codes by name (better-sqlite3 gives the name only)
const SQLITE_PRIMARY = {
  SQLITE_ERROR: 1, SQLITE_INTERNAL: 2, SQLITE_PERM: 3, SQLITE_ABORT: 4, SQLITE_BUSY: 5, SQLITE_LOCKED: 6,
  SQLITE_NOMEM: 7, SQLITE_READONLY: 8, SQLITE_INTERRUPT: 9, SQLITE_IOERR: 10, SQLITE_CORRUPT: 11,
  SQLITE_NOTFOUND: 12, SQLITE_FULL: 13, SQLITE_CANTOPEN: 14, SQLITE_PROTOCOL: 15, SQLITE_EMPTY: 16,
  SQLITE_SCHEMA: 17, SQLITE_TOOBIG: 18, SQLITE_CONSTRAINT: 19, SQLITE_MISMATCH: 20, SQLITE_MISUSE: 21,
  SQLITE_NOLFS: 22, SQLITE_AUTH: 23, SQLITE_FORMAT: 24, SQLITE_RANGE: 25, SQLITE_NOTADB: 26,
};
// A TocsinError for a failure of better-sqlite3: the driver's exception is its `cause`
// (as in the other bindings), SQLite's primary result code its `sqliteCode`.
// The primary code's name of a better-sqlite3 exception ('SQLITE_TOOBIG' of
// 'SQLITE_TOOBIG', 'SQLITE_IOERR' of 'SQLITE_IOERR_WRITE'), or ''.
function primaryOf(e) {
  return e && typeof e.code === 'string' ? e.code.replace(/^(SQLITE_[A-Z]+)_.*$/, '$1') : '';
}
function driverError(code, message, e) {
  const err = errorOf(code, message);
  Object.defineProperty(err, 'cause', { value: e, writable: true, configurable: true, enumerable: false });
  err.sqliteCode = SQLITE_PRIMARY[primaryOf(e)] || 0;
  return err;
}
function sqlError(betterDb, e) {
  if (e instanceof errors.TocsinError) return e;
  if (!betterDb.open) return driverError('TOCSIN_CLOSED', `the better-sqlite3 connection is closed (${e.message})`, e);
  return driverError(SQL_CODES[primaryOf(e)] || 'TOCSIN_INVALID', e.message, e);
}

function sqlCall(betterDb, key, sql, args) {
  load(betterDb);
  try {
    return fromBig(stmt(betterDb, key, sql).get(...args));
  } catch (e) {
    throw sqlError(betterDb, e);
  }
}

/** Enqueues through SQL on the app's better-sqlite3 connection (inside its transaction, if any); returns the id. */
function enqueueSql(betterDb, queue, payload, o) {
  o = opts(o, 'tocsin.enqueueSql() options', ['priority', 'delay', 'runAt', 'maxAttempts', 'expires', 'uniqueKey', 'meta']);
  const optsJson = sqlOptions(o);
  if (optsJson === null) return sqlCall(betterDb, 'enq2', 'SELECT tocsin_enqueue(?, ?)', [str(queue, 'queue'), toJson(payload, 'payload')]);
  return sqlCall(betterDb, 'enq3', 'SELECT tocsin_enqueue(?, ?, ?)', [str(queue, 'queue'), toJson(payload, 'payload'), optsJson]);
}
/**
 * Enqueues a call of task `task` (any runtime's, by name) through SQL on the app's
 * better-sqlite3 connection (tocsin_task_enqueue, inside its transaction, if any), as
 * queue.call(task, args, options) does; returns the job's id (db.waitResult reads its outcome).
 */
function callSql(betterDb, queue, task, args, o) {
  o = opts(o, 'tocsin.callSql() options', ['kwargs', 'resultTtl', 'timeout', 'priority', 'delay', 'runAt', 'maxAttempts',
    'expires', 'uniqueKey', 'meta']);
  const { kwargs, resultTtl, timeout, ...job } = o;
  if (args === undefined || args === null) args = [];
  if (!Array.isArray(args)) throw invalid('args must be an array');
  if (kwargs !== undefined && kwargs !== null && (typeof kwargs !== 'object' || Array.isArray(kwargs))) {
    throw invalid('kwargs must be a plain object');
  }
  const extra = {};
  const ttl = positiveMs(resultTtl, 'resultTtl'), limit = positiveMs(timeout, 'timeout');
  if (ttl) extra.result_ttl_ms = ttl;
  if (limit) extra.timeout_ms = limit;
  return sqlCall(betterDb, 'call', 'SELECT tocsin_task_enqueue(?, ?, ?, ?, ?)', [str(queue, 'queue'), str(task, 'task name'),
    toJson(args, 'args'), toJson(kwargs || {}, 'kwargs'), sqlOptions(job, extra)]);
}
function publishSql(betterDb, topic, payload, o) {
  o = opts(o, 'tocsin.publishSql() options', ['key', 'meta']);
  const key = o.key === undefined || o.key === null ? null : str(o.key, 'key');
  return sqlCall(betterDb, 'pub', 'SELECT tocsin_stream_publish(?, ?, ?, ?)', [str(topic, 'topic'), toJson(payload, 'payload'), key, metaJson(o.meta)]);
}
function notifySql(betterDb, channel, payload, o) {
  o = opts(o, 'tocsin.notifySql() options', ['meta']);
  return sqlCall(betterDb, 'ntf', 'SELECT tocsin_notify(?, ?, ?)', [str(channel, 'channel'), toJson(payload, 'payload'), metaJson(o.meta)]);
}

/**
 * Opens (creating if needed) the database at `path`: { busyTimeout (ms),
 * maxPayload (bytes), readOnly, allowOtherSqlite }. Refuses (TocsinError)
 * when another copy of SQLite is loaded in the process, unless allowOtherSqlite.
 */
function open(path, options) { return new Database(path, options); }

function cronNext(expr, after, o) {
  o = opts(o, 'tocsin.cronNext() options', ['localTime']);
  const a = after === undefined || after === null ? Date.now() : instant(after, 'after');
  ensureLoaded();
  return native.cronNext(str(expr, 'cron'), a, bool(o.localTime, 'localTime'));
}

function versions() { ensureLoaded(); return native.versions(); }

module.exports = {
  open, Database, Transaction, Queue, Job, Stream, Event, Notification, Listener, Subscription, Wake,
  Result, Lock, RateLimit, loadablePath, load, enqueueSql, callSql, publishSql, notifySql, cronNext, versions,
  ...errors,
  // for lib/tasks.js and lib/worker.js
  _internal: { ENQUEUE_KEYS, bool, fromBig, native, toJson, fromJson, metaJson, ms, positiveMs, lease, int, count, instant, str, opts, invalid, enqueueArgs, defaultOwner, waitFor, Result },
};
delete module.exports.makeError;
delete module.exports.errorOf;
delete module.exports.CODES;
module.exports.codes = errors.CODES;

// tasks and the worker runner extend the classes above
const tasksMod = require('./tasks');
const workerMod = require('./worker');
module.exports.TaskHandle = tasksMod.TaskHandle;
module.exports.currentJob = tasksMod.currentJob;
module.exports.Worker = workerMod.Worker;
