'use strict';
// Regression tests of the binding's translation of bad inputs: each is refused
// with an InvalidArgumentError naming the argument, nothing is written, the
// process neither aborts nor leaves a rejection unhandled.
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert/strict');
const tocsin = require('..');
const { tmpdb } = require('./helpers');

const invalid = (re) => (e) => e instanceof tocsin.InvalidArgumentError && re.test(e.message);

describe('bad inputs', () => {
  let db;
  before(() => { db = tocsin.open(tmpdb()); });
  after(() => db.close());

  test('a refused number before a boolean argument throws, it does not abort the process', async () => {
    assert.throws(() => tocsin.cronNext('* * * * *', new Date('nope')), invalid(/after is an invalid Date/));
    await assert.rejects(db.result(2 ** 70), invalid(/jobId must be a 64-bit|jobId must be an integer/));
    await assert.rejects(db.stream('s-abort').trim({ maxCount: 1.5 }), invalid(/maxCount must be an integer/));
    assert.throws(() => tocsin.open(tmpdb(), { maxPayload: NaN }), invalid(/maxPayload must be an integer/));
    assert.throws(() => new tocsin.Worker(db, { queues: ['q-abort'], visibility: 1e20 }), invalid(/visibility must be between 3 and 253402300799999 ms/));
  });

  test("out-of-range durations and instants name the JS option, not the core's *_ms argument", async () => {
    const q = db.queue('q-units');
    const noCoreName = (e) => e instanceof tocsin.InvalidArgumentError && !/_ms\b/.test(e.message);
    await assert.rejects(q.enqueue(1, { delay: 1e15 }), invalid(/^delay must be between 0 and 253402300799999 ms \(the year 9999\), not 1000000000000000$/));
    await assert.rejects(q.enqueue(1, { runAt: new Date(8.64e15) }), invalid(/^runAt must be between 1 and 253402300799999 ms/));
    await assert.rejects(q.enqueue(1, { delay: 5, runAt: Date.now() }), invalid(/^give delay or runAt, not both$/));
    await assert.rejects(q.enqueueMany([{ payload: 1, delay: 5, runAt: 1 }]), noCoreName);
    await assert.rejects(q.claim('w', { visibility: 0 }), invalid(/^visibility must be between 1 and/));
    await assert.rejects(db.stream('s-units').trim({}), invalid(/^stream\.trim\(\) needs maxAge, maxCount or belowConsumers$/));
    await assert.rejects(db.setNotifyAutotrim({ oneIn: 5 }), invalid(/needs maxAge or maxKeep/));
    assert.throws(() => db.lock('l-units', { ttl: 400 * 86400000 }), invalid(/^ttl must be between 1 and 31622400000 ms \(366 days\), not 34560000000$/));
    assert.throws(() => db.rateLimit('r-units', 5, 0), invalid(/^per must be between 1 and 31622400000 ms \(366 days\), not 0$/));
    assert.throws(() => new tocsin.Worker(db, { queues: ['q-units'], visibility: 2 }), invalid(/^visibility must be between 3 and/));
    assert.throws(() => new tocsin.Worker(db, { queues: ['q-units'], schedulerTtl: 400 * 86400000 }),
      invalid(/^schedulerTtl must be between 3 and 31622400000 ms \(366 days\)/));
    assert.equal((await q.stats()).pending, 0); // nothing was written
  });

  test('strings with a NUL or a lone surrogate are refused, not cut short or replaced', async () => {
    const q = db.queue('q-nul');
    await assert.rejects(db.queue('q-nul\0other').enqueue(1), invalid(/queue must not contain NUL/));
    await assert.rejects(q.enqueue(1, { uniqueKey: 'k\0a' }), invalid(/uniqueKey must not contain NUL/));
    await assert.rejects(db.queue('q-\ud800').enqueue(1), invalid(/queue must not contain lone surrogates/));
    await assert.rejects(q.enqueueMany([{ payload: 1, queue: 'q-nul\0x' }]), invalid(/jobs\[0\]\.queue must not contain NUL/));
    await assert.rejects(db.notify('c\0x', 1), invalid(/channel must not contain NUL/));
    await assert.rejects(db.stream('s-nul').publishMany([1], { keys: ['k\0'] }), invalid(/keys\[0\] must not contain NUL/));
    assert.throws(() => tocsin.open(tmpdb() + '\0.x'), invalid(/path must not contain NUL/));
    assert.equal((await db.stats()).filter((s) => s.queue.startsWith('q-')).length, 0, 'nothing was written');
    // a well-formed pair and U+FFFD itself are fine
    assert.equal(typeof await db.queue('q-\ud83d\ude00\ufffd').enqueue(1), 'number');
    await q.enqueue(1);
    await assert.rejects(q.claim('w\0x'), invalid(/workerId must not contain NUL/));
    assert.equal((await q.stats()).pending, 1, 'the refused claim took nothing');
  });

  test('integers are numbers: strings and NaN are refused, not read as another value', async () => {
    const q = db.queue('q-int');
    await assert.rejects(q.enqueue(1, { priority: '3' }), invalid(/priority must be an integer/));
    assert.throws(() => db.setMaxPayload('5'), invalid(/maxPayload must be an integer/));
    await assert.rejects(db.pruneNotifications({ maxKeep: NaN }), invalid(/maxKeep must be an integer/));
    await assert.rejects(db.setNotifyAutotrim({ oneIn: NaN }), invalid(/oneIn must be an integer/));
    await assert.rejects(db.stream('s-int').trim({ maxCount: NaN }), invalid(/maxCount must be an integer/));
    await assert.rejects(q.enqueue(1, { runAt: new Date('nope') }), invalid(/runAt is an invalid Date/));
    await assert.rejects(q.enqueueMany([{ payload: 1 }, { payload: 2, delay: 1.5 }]), invalid(/jobs\[1\]\.delay must be an integer/));
    assert.equal((await q.stats()).pending + (await q.stats()).scheduled, 0, 'nothing was written');
  });

  test('a negative duration is refused, not read as the core\'s "none" or "backoff"', async () => {
    const q = db.queue('q-negative');
    await q.enqueue(1, { maxAttempts: 3 });
    const job = await q.claim('w');
    await assert.rejects(job.retry({ delay: -5 }), invalid(/delay must be >= 0 ms, not -5/));
    // where 0 is refused too, the message gives the real lower bound (1), not ">= 0"
    await assert.rejects(job.complete(1, { ttl: -1 }), invalid(/^ttl must be between 1 and 253402300799999 ms \(the year 9999\), not -1$/));
    await assert.rejects(db.saveResult(job.id, 1, { ttl: -1 }), invalid(/^ttl must be between 1 and/));
    await assert.rejects(job.heartbeat({ extend: -1 }), invalid(/^extend must be between 1 and .*, not -1$/));
    await assert.rejects(q.enqueue(1, { delay: -1 }), invalid(/delay must be >= 0 ms/));
    const got = await q.get(job.id);
    assert.equal(got.state, 'processing', 'the refused retry wrote nothing');
    assert.equal(await db.result(job.id), null, 'no result was saved');
    assert.equal((await q.stats()).pending, 0);
  });

  test('ackBatch refuses an id that is not an exact integer (1.5 does not ack job 1)', async () => {
    const q = db.queue('q-ackbatch');
    await q.enqueue(1);
    const job = await q.claim('w');
    await assert.rejects(q.ackBatch([{ id: job.id + 0.5, token: job.token }]), invalid(/jobs\[0\]\.id must be an integer/));
    await assert.rejects(q.ackBatch([{ id: NaN, token: job.token }]), invalid(/jobs\[0\]\.id must be an integer/));
    assert.equal((await q.get(job.id)).state, 'processing', 'the job was not acked');
    assert.equal(await q.ackBatch([job]), 1);
  });

  test('jobs(): a loop left mid-batch hands the rest of the batch back', async () => {
    const q = db.queue('q-iter');
    await q.enqueueMany([{ payload: 1 }, { payload: 2 }, { payload: 3 }]);
    for await (const job of q.jobs('w', { batch: 3 })) {
      await job.ack();
      break;
    }
    const st = await q.stats();
    assert.equal(st.processing, 0, 'no job is left to its lease');
    assert.equal(st.pending, 2);
    const again = await q.claimBatch(5, 'w2');
    // no attempt consumed: the hand-back grows maxAttempts with attempts (tokens never repeat)
    assert.deepEqual(again.map((j) => j.maxAttempts - j.attempts), [2, 2], 'no attempt consumed');
  });
});

describe('worker and tasks: bad inputs and odd throws', () => {
  let db;
  before(() => { db = tocsin.open(tmpdb()); });
  after(() => db.close());

  test('run() refuses bad options with a rejection; concurrency 0 and bad task options are refused', async () => {
    assert.throws(() => new tocsin.Worker(db, { queues: ['w-opts'], concurrency: 0 }), invalid(/concurrency must be an integer between 1 and 10000/));
    assert.throws(() => new tocsin.Worker(db, { queues: ['w-opts'], concurrency: NaN }), invalid(/concurrency/));
    assert.throws(() => new tocsin.Worker(db, { queues: [5] }), invalid(/queues must be an array of strings/));
    assert.throws(() => db.queue('w-opts').task('t', () => 1, { backoffBase: 1.5 }), invalid(/backoffBase/));
    const w = new tocsin.Worker(db, { queues: ['w-opts'] });
    let p;
    assert.doesNotThrow(() => { p = w.run({ signal: 5 }); });
    await assert.rejects(p, invalid(/signal must be an AbortSignal/));
  });

  test('a handler throwing a value without a string form fails its run, nothing goes unhandled', async () => {
    const unhandled = [];
    const onUnhandled = (e) => unhandled.push(e);
    process.on('unhandledRejection', onUnhandled);
    try {
      const q = db.queue('w-throw');
      const noProto = q.task('no_proto', () => { throw Object.create(null); }, { retries: 0 });
      const badGetter = q.task('bad_getter', () => {
        const e = new Error('x');
        Object.defineProperty(e, 'message', { get() { throw new Error('getter'); } });
        throw e;
      }, { retries: 0 });
      const w = new tocsin.Worker(db, { queues: ['w-throw'] });
      const running = w.run();
      const h1 = await noProto();
      const h2 = await badGetter();
      await assert.rejects(h1.result({ timeout: 5000 }), (e) => e instanceof tocsin.TaskError && e.type === 'Error' && e.taskMessage === '[object Object]');
      await assert.rejects(h2.result({ timeout: 5000 }), (e) => e instanceof tocsin.TaskError && e.type === 'Error');
      await w.stop();
      await running;
      assert.equal((await q.stats()).dead, 2);
      await new Promise((r) => setImmediate(r));
      assert.deepEqual(unhandled, []);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});

describe('long timeouts', () => {
  test('a wait timeout past setTimeout\'s limit (2^31-1 ms) is re-armed, not cut short', async (t) => {
    const db = tocsin.open(tmpdb());
    t.mock.timers.enable({ apis: ['setTimeout', 'Date'] });
    try {
      const max = 2147483647;
      let outcome = null;
      const w = db.queue('q-long').wait({ timeout: max + 5000 }).then(
        (v) => { outcome = ['resolved', v]; },
        (e) => { outcome = ['rejected', e]; });
      await new Promise((r) => setImmediate(r));
      t.mock.timers.tick(max);
      await new Promise((r) => setImmediate(r));
      assert.equal(outcome, null, 'still waiting after 2^31-1 ms');
      t.mock.timers.tick(5000);
      await w;
      assert.equal(outcome[0], 'rejected');
      assert.ok(outcome[1] instanceof tocsin.TimeoutError, String(outcome[1]));
    } finally {
      t.mock.timers.reset();
      db.close();
    }
  });
});

describe('payloads are JSON values', () => {
  let db;
  before(() => { db = tocsin.open(tmpdb()); });
  after(() => db.close());

  // [value, what the message says it holds]
  const NOT_JSON = [
    [NaN, /holds NaN\b/],
    [Infinity, /holds Infinity/],
    [-Infinity, /holds -Infinity/],
    [{ a: [1, NaN] }, /holds NaN \(at \[1\]\)/],
    [{ a: { b: Infinity } }, /holds Infinity \(at "b"\)/],
    [[{ x: new Number(NaN) }], /holds NaN \(at "x"\)/],
    [{ toJSON() { return NaN; } }, /holds NaN/],
    [new Map([[1, 2]]), /holds a Map/],
    [{ s: new Set([1]) }, /holds a Set \(at "s"\)/],
  ];

  test('every serialising path refuses NaN, infinities, Map and Set at any depth, and writes nothing', async () => {
    const q = db.queue('json-q');
    const s = db.stream('json-s');
    const t = q.task('json-t', () => null);
    const paths = [
      ['payload', (v) => q.enqueue(v)],
      ['payload', (v) => q.enqueue(v, { priority: 1 })],
      ['jobs\\[1\\]\\.payload', (v) => q.enqueueMany([{ payload: 1 }, { payload: v }])],
      ['jobs\\[1\\]\\.payload', (v) => q.enqueueMany([{ payload: 1 }, { payload: v, priority: 2 }])],
      ['meta', (v) => q.enqueue(1, { meta: { m: v } })],
      ['payload', (v) => s.publish(v)],
      ['meta', (v) => s.publish(1, { meta: { m: v } })],
      ['payloads\\[1\\]', (v) => s.publishMany([1, v])],
      ['payload', (v) => db.notify('json-c', v)],
      ['meta', (v) => db.notify('json-c', 1, { meta: { m: v } })],
      ['value', (v) => db.saveResult(1, v)],
      ['args', (v) => q.call('json-t', [v])],
      ['kwargs', (v) => q.call('json-t', [], { kwargs: { k: v } })],
      ['args', (v) => t(v)],
      ['payload', (v) => db.schedule('json-sched', '@hourly', 'json-q', v)],
      ['meta', (v) => db.schedule('json-sched', '@hourly', 'json-q', 1, { meta: { m: v } })],
    ];
    for (const [what, call] of paths) {
      for (const [v, holds] of NOT_JSON) {
        // a toJSON object as meta's value still names what it holds
        await assert.rejects(async () => call(v), (e) => e instanceof tocsin.InvalidArgumentError &&
          new RegExp(`^${what} is not a JSON value: `).test(e.message) && holds.test(e.message),
        `${what} ${String(typeof v === 'bigint' ? `${v}n` : v)}`);
      }
    }
    const st = await q.stats();
    assert.equal(st.pending + st.scheduled, 0, 'no job was written');
    assert.deepEqual(await s.read(), [], 'no event was written');
    assert.deepEqual(await db.notifications('json-c'), [], 'no notification was written');
    assert.equal(await db.result(1), null, 'no result was written');
    assert.deepEqual(await db.schedules(), [], 'no schedule was written');
  });

  test('undefined as the value is refused where the value is required, null where it is optional', async () => {
    const q = db.queue('json-undef');
    await assert.rejects(q.enqueue(), invalid(/^payload is undefined, which is not a JSON value \(pass null for none\)/));
    await assert.rejects(q.enqueue(undefined, { priority: 1 }), invalid(/^payload is undefined/));
    await assert.rejects(q.enqueueMany([{ payload: undefined }]), invalid(/^jobs\[0\]\.payload is undefined/));
    await assert.rejects(db.stream('json-undef').publish(undefined), invalid(/^payload is undefined/));
    await assert.rejects(db.stream('json-undef').publishMany([1, undefined]), invalid(/^payloads\[1\] is undefined/));
    await assert.rejects(db.saveResult(1, undefined), invalid(/^value is undefined/));
    assert.equal((await q.stats()).pending, 0);
    // optional: a notification and a schedule without a payload carry null
    const id = await db.notify('json-undef');
    assert.equal((await db.notifications('json-undef'))[0].id, id);
    assert.equal((await db.notifications('json-undef'))[0].payload, null);
    await db.schedule('json-undef', '@hourly', 'json-undef');
    assert.equal((await db.getSchedule('json-undef')).payload, null);
    await db.unschedule('json-undef');
    await q.enqueue(null);
    const job = await q.claim('w');
    assert.equal(await job.complete(), true);
    const r = await db.result(job.id);
    assert.ok(r.ok);
    assert.equal(r.value, null);
  });

  test('what JSON.stringify defines is kept: toJSON, Dates, undefined members, strings that say null', async () => {
    const q = db.queue('json-ok');
    const cases = [
      [{ at: new Date(0) }, '{"at":"1970-01-01T00:00:00.000Z"}'],
      [{ u: undefined, n: null, f() {} }, '{"n":null}'],
      [[undefined, 1], '[null,1]'],
      ['null', '"null"'],
      [{}, '{}'],
      [{ nested: { empty: {} }, x: 'nullable' }, '{"nested":{"empty":{}},"x":"nullable"}'],
      [null, 'null'],
      [{ big: 2 ** 60, neg: -0.5 }, `{"big":${2 ** 60},"neg":-0.5}`],
    ];
    for (const [v, text] of cases) {
      const jid = await q.enqueue(v);
      assert.equal((await q.get(jid)).payloadJson, text);
    }
  });

  test('a task returning nothing stores null; one returning NaN fails with what it held', async () => {
    const d = tocsin.open(tmpdb());
    const q = d.queue('json-tasks');
    const nothing = q.task('nothing', () => {});
    const nan = q.task('nan', () => ({ ratio: NaN }), { retries: 0 });
    const w = new tocsin.Worker(d, { queues: ['json-tasks'] });
    const running = w.run();
    try {
      assert.equal(await (await nothing()).result({ timeout: 10000 }), null);
      await assert.rejects((await nan()).result({ timeout: 10000 }), (e) => e instanceof tocsin.TaskError &&
        e.type === 'SerializationError' && /the return value is not a JSON value: it holds NaN \(at "ratio"\)/.test(e.taskMessage));
    } finally {
      await w.stop();
      await running;
      await d.close();
    }
  });
});
