'use strict';
// Regression tests of a fifth review: a worker's options refused by its constructor,
// range messages that give the real lower bound, open() options named as JS spells
// them, 0 refused where the core reads it as "none" or "the default" (as Python does),
// and a refused job id saying what it got.
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert/strict');
const Better = require('better-sqlite3');
const tocsin = require('..');
const { tmpdb } = require('./helpers');

const invalid = (re) => (e) => e instanceof tocsin.InvalidArgumentError && re.test(e.message);

describe('fifth review', () => {
  let file;
  let db;
  before(() => { file = tmpdb(); db = tocsin.open(file); });
  after(() => db.close());

  test("new Worker() refuses a bad queue name (and every other option) itself, naming the option", async () => {
    assert.throws(() => new tocsin.Worker(db, { queues: [''] }), invalid(/^queues\[0\] must not be empty$/));
    assert.throws(() => new tocsin.Worker(db, { queues: ['ok', 'a\nb'] }), invalid(/^queues\[1\] must not contain control characters$/));
    assert.throws(() => new tocsin.Worker(db, { queues: ['ok', 'a\0b'] }), invalid(/^queues\[1\] must not contain NUL/));
    assert.throws(() => new tocsin.Worker(db, { queue: '' }), invalid(/^queue must not be empty$/));
    assert.throws(() => new tocsin.Worker(db, { queues: 'x'.repeat(300) }), invalid(/^queues is 300 bytes long; the limit is 255$/));
    assert.throws(() => new tocsin.Worker(db, { queues: ['w5'], workerId: '' }), invalid(/^workerId must not be empty$/));
    assert.throws(() => new tocsin.Worker(db, { queues: ['w5'], workerId: 5 }), invalid(/^workerId must be a string/));
    assert.throws(() => new tocsin.Worker(db, { queues: ['w5'], scheduler: 1 }), invalid(/^scheduler must be a boolean/));
    assert.throws(() => new tocsin.Worker(db, { queues: ['w5'], visibility: 0 }), invalid(/^visibility must be between 3 and 253402300799999 ms \(the year 9999\), not 0$/));
    assert.throws(() => new tocsin.Worker(db, { queues: ['w5'], schedulerTtl: 0 }), invalid(/^schedulerTtl must be between 3 and 31622400000 ms \(366 days\), not 0$/));
    assert.throws(() => new tocsin.Worker(db, { queues: ['w5'], unknownTaskDelay: 0 }), invalid(/^unknownTaskDelay must be between 1 and/));
    assert.throws(() => new tocsin.Worker(db, { queues: ['w5'], unknownTaskHandbacks: 0 }), invalid(/^unknownTaskHandbacks must be an integer between 1 and 1000000, not 0$/));
    // good options still make a worker that runs; 0 stays meaningful for shutdownTimeout
    db.queue('w5').task('t5', () => 5);
    assert.equal(new tocsin.Worker(db, { queues: ['w5'], visibility: 3, schedulerTtl: 3 }).queues[0], 'w5');
    const w = new tocsin.Worker(db, { queues: ['w5'], workerId: 'w-5', visibility: 30000, unknownTaskDelay: 1,
      unknownTaskHandbacks: 1, shutdownTimeout: 0 });
    const running = w.run();
    assert.equal(await (await db.queue('w5').call('t5')).result({ timeout: 10000 }), 5);
    await w.stop();
    await running;
    // on a closed database the constructor still builds it and run() rejects with ClosedError
    const closed = tocsin.open(tmpdb());
    await closed.close();
    await assert.rejects(new tocsin.Worker(closed, { queues: ['w5'] }).run(), (e) => e instanceof tocsin.ClosedError);
  });

  test('a value below a lower bound of 1 (or 3) says that bound, not ">= 0"', async () => {
    const q = db.queue('q5-range');
    await q.enqueue(1);
    const job = await q.claim('w');
    const bound = (what, min) => invalid(new RegExp(`^${what} must be between ${min} and \\d+ ms \\([^)]+\\), not -1$`));
    await assert.rejects(q.claim('w', { visibility: -1 }), bound('visibility', 1));
    await assert.rejects(job.heartbeat({ extend: -1 }), bound('extend', 1));
    await assert.rejects(job.complete(1, { ttl: -1 }), bound('ttl', 1));
    await assert.rejects(q.enqueue(1, { expires: -1 }), bound('expires', 1));
    assert.throws(() => db.lock('l5', { ttl: -1 }), bound('ttl', 1));
    assert.throws(() => db.rateLimit('r5', 1, -1), bound('per', 1));
    assert.throws(() => new tocsin.Worker(db, { queues: ['w5'], visibility: -1 }), bound('visibility', 3));
    assert.throws(() => tocsin.open(tmpdb(), { busyTimeout: -1 }), bound('busyTimeout', 1));
    assert.throws(() => tocsin.open(tmpdb(), { busyTimeout: 0 }), invalid(/^busyTimeout must be between 1 and 2147483647 ms \(about 24 days\), not 0$/));
    await assert.rejects(db.schedulerLead('o5', -1), bound('ttl', 1));
    // where 0 is allowed, a negative value still says >= 0
    await assert.rejects(q.enqueue(1, { delay: -1 }), invalid(/^delay must be >= 0 ms, not -1$/));
    assert.ok(await job.ack());
  });

  test("open() and setMaxPayload() name maxPayload, not the core's max_payload_bytes, and refuse 0", async () => {
    for (const v of [-1, 0, -1n, 0n]) {
      assert.throws(() => tocsin.open(tmpdb(), { maxPayload: v }), invalid(/^maxPayload must be an integer >= 1 \(bytes\), not -?\d+$/));
      assert.throws(() => db.setMaxPayload(v), invalid(/^maxPayload must be an integer >= 1 \(bytes\), not -?\d+$/));
    }
    assert.throws(() => db.setMaxPayload(), invalid(/^maxPayload must be an integer >= 1 \(bytes\), not undefined$/));
    assert.throws(() => tocsin.open(tmpdb(), { busyTimeout: 2 ** 31 }), invalid(/^busyTimeout must be between 1 and 2147483647 ms/));
    // every refusal of an open() option names it as JS spells it
    for (const o of [{ maxPayload: -1 }, { maxPayload: 0 }, { busyTimeout: -1 }, { busyTimeout: 2 ** 31 }, { readOnly: 1 }]) {
      assert.throws(() => tocsin.open(tmpdb(), o), (e) => e instanceof tocsin.InvalidArgumentError && e.message.startsWith(Object.keys(o)[0]) &&
        !/_/.test(e.message));
    }
    const small = tocsin.open(tmpdb(), { maxPayload: 10 });
    try {
      await assert.rejects(small.queue('q').enqueue('x'.repeat(20)), (e) => e instanceof tocsin.TooBigError);
      small.setMaxPayload(100);
      assert.equal(typeof await small.queue('q').enqueue('x'.repeat(20)), 'number');
    } finally {
      await small.close();
    }
  });

  test('0 is refused where the core reads it as "none" or "the default", as in Python; 0 stays where it means something', async () => {
    const q = db.queue('q5-zero');
    const app = new Better(file);
    try {
      const zero = (what) => invalid(new RegExp(`^${what} must be between 1 and \\d+ ms \\([^)]+\\), not 0n?$`));
      await assert.rejects(q.enqueue(1, { expires: 0 }), zero('expires'));
      await assert.rejects(q.enqueue(1, { expires: 0n }), zero('expires'));
      await assert.rejects(q.enqueueMany([{ payload: 1 }, { payload: 2, expires: 0 }]), zero('jobs\\[1\\]\\.expires'));
      await assert.rejects(q.enqueue(1, { runAt: 0 }), zero('runAt'));
      await assert.rejects(q.enqueue(1, { runAt: new Date(0) }), zero('runAt'));
      assert.throws(() => tocsin.enqueueSql(app, 'q5-zero', 1, { expires: 0 }), zero('expires'));
      assert.throws(() => tocsin.callSql(app, 'q5-zero', 't', [], { expires: 0 }), zero('expires'));
      assert.throws(() => tocsin.callSql(app, 'q5-zero', 't', [], { resultTtl: 0 }), zero('resultTtl'));
      assert.throws(() => tocsin.callSql(app, 'q5-zero', 't', [], { timeout: 0 }), zero('timeout'));
      await assert.rejects(q.call('t', [], { expires: 0 }), zero('expires'));
      await assert.rejects(q.call('t', [], { resultTtl: 0 }), zero('resultTtl'));
      await assert.rejects(q.call('t', [], { timeout: 0 }), zero('timeout'));
      await assert.rejects(async () => db.taskEnvelope('t', [], { resultTtl: 0 }), zero('resultTtl'));
      for (const k of ['expires', 'timeout', 'resultTtl', 'backoffBase', 'backoffCap']) {
        assert.throws(() => q.task('t0', () => 1, { [k]: 0 }), zero(k), k);
      }
      const t = q.task('t5', () => 1, { expires: 60000 });
      await assert.rejects(t.enqueue({ expires: 0 }), zero('expires'));
      // results: ttl 0 would be the core's "never"
      const done = await q.enqueue(1);
      const job = await q.claim('w');
      assert.equal(job.id, done);
      await assert.rejects(db.saveResult(job.id, 1, { ttl: 0 }), zero('ttl'));
      await assert.rejects(db.saveError(job.id, 'E', 'm', { ttl: 0 }), zero('ttl'));
      await assert.rejects(job.complete(1, { ttl: 0 }), zero('ttl'));
      await assert.rejects(q.failTask(job, 'E', 'm', { ttl: 0 }), zero('ttl'));
      assert.equal(await db.result(job.id), null, 'no result was saved');
      // streams: 0 would be the core's "never autosave" or "the default batch"
      const s = db.stream('s5');
      assert.throws(() => s.subscribe({ consumer: 'c', autosaveMs: 0 }), zero('autosaveMs'));
      assert.throws(() => s.subscribe({ consumer: 'c', autosaveEvery: 0 }), invalid(/^autosaveEvery must be an integer >= 1, not 0$/));
      assert.throws(() => s.subscribe({ consumer: 'c', batch: 0 }), invalid(/^batch must be an integer between 1 and 10000, not 0$/));
      assert.throws(() => q.jobs('w', { batch: 0 }), invalid(/^batch must be an integer between 1 and 10000, not 0$/));
      // schedules: a new one refuses 0; a change may give 0 to go back to the core's default
      await assert.rejects(db.schedule('s5', '@daily', 'q5-zero', 1, { jobExpires: 0 }), zero('jobExpires'));
      await assert.rejects(db.schedule('s5', '@daily', 'q5-zero', 1, { maxAttempts: 0 }), invalid(/^maxAttempts must be an integer between 1 and 1000000, not 0$/));
      await assert.rejects(db.schedule('s5', '@daily', 'q5-zero', 1, { maxCatchUp: 0 }), invalid(/^maxCatchUp must be an integer between 1 and 100000, not 0$/));
      await assert.rejects(q.periodic('@daily', 't5', { jobExpires: 0 }), zero('jobExpires'));
      assert.equal(await db.getSchedule('s5'), null);
      await db.schedule('s5', '@daily', 'q5-zero', 1, { jobExpires: 60000, maxAttempts: 5 });
      assert.equal((await db.getSchedule('s5')).jobExpires, 60000);
      await db.updateSchedule('s5', { jobExpires: 0, maxAttempts: 0 });
      const sch = await db.getSchedule('s5');
      assert.deepEqual([sch.jobExpires, sch.maxAttempts], [0, 3]);
      await assert.rejects(db.updateSchedule('s5', { jobExpires: -1 }), invalid(/^jobExpires must be >= 0 ms, not -1$/));
      // purge: before 0 would be the core's "no bound" (every dead job)
      await q.enqueue(1, { maxAttempts: 1 });
      const dying = await q.claim('w');
      await dying.fail();
      await assert.rejects(q.purge({ before: 0 }), zero('before'));
      assert.equal((await q.stats()).dead, 1, 'the refused purge deleted nothing');
      // 0 is kept where it means something: delay 0 (now), a wait timeout of 0 (do not wait)
      assert.equal(typeof await q.enqueue(1, { delay: 0 }), 'number');
      await assert.rejects(db.queue('q5-empty').wait({ timeout: 0 }), (e) => e instanceof tocsin.TimeoutError);
      assert.equal(typeof await db.stream('s5').trim({ maxAge: 0, maxCount: 1 }), 'number');
      assert.equal((await q.stats()).pending, 1, 'only the delay: 0 job was enqueued');
    } finally {
      app.close();
    }
  });

  test('a refused job id says what it got', async () => {
    const q = db.queue('q5-get');
    await assert.rejects(q.get(undefined), invalid(/^expected a Job or a job id, not undefined$/));
    await assert.rejects(q.get(null), invalid(/^expected a Job or a job id, not null$/));
    await assert.rejects(q.get('7'), invalid(/^expected a Job or a job id, not a string \("7"\)$/));
    await assert.rejects(q.get(1.5), invalid(/^expected a Job or a job id, not 1\.5$/));
    await assert.rejects(q.get({}), invalid(/^expected a Job or a job id, not an object$/));
    await assert.rejects(q.cancel(), invalid(/^expected a Job or a job id, not undefined$/));
    await assert.rejects(db.result(NaN), invalid(/^expected a Job or a job id, not NaN$/));
    await assert.rejects(q.ack(undefined), invalid(/^expected a Job or a job id and token, not undefined$/));
    await assert.rejects(q.retry('x'), invalid(/^expected a Job or a job id and token, not a string \("x"\)$/));
  });
});
