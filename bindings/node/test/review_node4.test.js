'use strict';
// Regression tests of a fourth review: run() of a worker whose database is closed under
// it, calls that would wait for their own transaction's write lock, BigInt integers.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const Better = require('better-sqlite3');
const tocsin = require('..');
const { tmpdb } = require('./helpers');

const invalid = (re) => (e) => e instanceof tocsin.InvalidArgumentError && re.test(e.message);

test('db.close() while a worker runs: run() rejects with ClosedError, "error" hears it; stop() still resolves', async () => {
  const db = tocsin.open(tmpdb());
  db.queue('q').task('t', () => 1);
  const w = new tocsin.Worker(db, { queues: ['q'] });
  const heard = [];
  w.on('error', (e) => heard.push(e));
  let started;
  const up = new Promise((r) => { started = r; });
  w.on('start', started);
  const running = w.run();
  await up;
  await db.close();
  await assert.rejects(running, (e) => e instanceof tocsin.ClosedError && e.code === 'TOCSIN_CLOSED' &&
    /the database was closed/.test(e.message));
  assert.equal(heard.length, 1);
  assert.equal(heard[0].code, 'TOCSIN_CLOSED');

  // a stop() asked for resolves, also when the database closes after it
  const db2 = tocsin.open(tmpdb());
  db2.queue('q').task('t', () => 1);
  const w2 = new tocsin.Worker(db2, { queues: ['q'] });
  const running2 = w2.run();
  const stopping = w2.stop();
  await db2.close();
  await stopping;
  await running2;
});

test('transactions do not nest: refused at once with InvalidArgumentError saying why, nothing written', async () => {
  // (before the refusal the call waited for its own transaction's lock until the busy timeout)
  const db = tocsin.open(tmpdb(), { busyTimeout: 2000 });
  try {
    const q = db.queue('nest');
    const nested = /^transactions do not nest: db\.transaction\(\) was called inside the callback of a transaction of this database/;
    await assert.rejects(db.transaction(async (tx) => {
      await q.enqueue('outer', { tx });
      return db.transaction(async (tx2) => q.enqueue('inner', { tx: tx2 }));
    }), invalid(nested));
    // a synchronous callback, and a nested one after an await
    await assert.rejects(db.transaction(() => db.transaction(() => 1)), invalid(nested));
    await assert.rejects(db.transaction(async () => {
      await new Promise((r) => setTimeout(r, 1));
      await db.transaction(async () => 1);
    }), invalid(nested));
    assert.equal((await q.stats()).pending, 0); // the outer one rolled back with the error
    // another database's transaction is not this one's: it may run inside
    const other = tocsin.open(tmpdb());
    try {
      assert.equal(await db.transaction(async () => other.transaction(async (tx) => other.queue('o').enqueue(1, { tx }))), 1);
    } finally {
      await other.close();
    }
  } finally {
    await db.close();
  }
});

test('a write on the database without { tx } inside its transaction callback is refused at once; with { tx } and reads it works', async () => {
  const db = tocsin.open(tmpdb(), { busyTimeout: 2000 });
  try {
    const q = db.queue('inside');
    await q.enqueue('claim me');
    const noTx = (call) => invalid(new RegExp(`^${call.replace(/[().]/g, '\\$&')} was called without \\{ tx \\} inside the callback of db\\.transaction\\(\\) on this database: it would .*wait for the write lock that transaction holds`));
    const noTxArg = (call) => invalid(new RegExp(`^${call.replace(/[().]/g, '\\$&')} cannot run inside the callback of db\\.transaction\\(\\) on this database`));
    const out = await db.transaction(async (tx) => {
      await q.enqueue('in tx', { tx });
      await assert.rejects(q.enqueue('outside'), noTx('queue.enqueue()'));
      await assert.rejects(q.enqueueMany([{ payload: 1 }]), noTx('queue.enqueueMany()'));
      await assert.rejects(db.notify('c', 1), noTx('db.notify()'));
      await assert.rejects(db.stream('s').publish(1), noTx('stream.publish()'));
      await assert.rejects(db.exec('CREATE TABLE t(x)'), noTx('db.exec()'));
      await assert.rejects(q.call('task', []), noTx('queue.call()'));
      await assert.rejects(q.claim('w'), noTxArg('queue.claim()'));
      await assert.rejects(q.pause(), noTxArg('queue.pause()'));
      await assert.rejects(db.lock('l').tryAcquire(), noTxArg('lock.tryAcquire()'));
      await assert.rejects(db.lock('l').acquire({ timeout: 60000 }), noTxArg('lock.acquire()'));
      await assert.rejects(db.withLock('l', () => 1), noTxArg('db.withLock()'));
      await assert.rejects(db.rateLimit('r', 1, 1000).tryAcquire(), noTxArg('rateLimit.tryAcquire()'));
      // after an await, and in a timer the callback started: still its transaction's code
      await new Promise((r) => setTimeout(r, 1));
      await assert.rejects(new Promise((res, rej) => setTimeout(() => q.enqueue('timer').then(res, rej), 1)), noTx('queue.enqueue()'));
      // reads do not wait for the write lock
      assert.equal((await q.stats()).pending, 1);
      return 'done';
    });
    assert.equal(out, 'done');
    const jobs = await q.claimBatch(10, 'w');
    assert.deepEqual(jobs.map((j) => j.payload).sort(), ['claim me', 'in tx']);
    // once the transaction has ended, the same async function writes without { tx }
    await db.transaction(async () => {});
    assert.equal(typeof await q.enqueue('after'), 'number');
  } finally {
    await db.close();
  }
});

test('code elsewhere on the event loop still waits for an open transaction and then writes', async () => {
  const db = tocsin.open(tmpdb());
  try {
    const q = db.queue('elsewhere');
    let release;
    const gate = new Promise((r) => { release = r; });
    let began;
    const open = new Promise((r) => { began = r; });
    const txDone = db.transaction(async (tx) => {
      await q.enqueue('in tx', { tx });
      began();
      await gate; // awaits something that is not the write below
      return 'committed';
    });
    await open;
    const outside = q.enqueue('outside'); // not the transaction's code: waits for its commit
    const notified = db.notify('c', 'hi');
    release();
    assert.equal(await txDone, 'committed');
    assert.equal(typeof await outside, 'number');
    assert.equal(typeof await notified, 'number');
    assert.deepEqual((await q.claimBatch(10, 'w')).map((j) => j.payload), ['in tx', 'outside']);
  } finally {
    await db.close();
  }
});

test('a BigInt is accepted wherever an integer is (durations, instants, counts, priorities, ids) and refused out of range', async () => {
  const file = tmpdb();
  const db = tocsin.open(file, { busyTimeout: 5000n, maxPayload: 1000000n });
  const app = new Better(file);
  app.defaultSafeIntegers(true);
  try {
    const q = db.queue('big');
    const now = db.now();
    const row = (id) => app.prepare('SELECT priority, max_attempts, run_at, expires_at FROM _tocsin_jobs WHERE id = ?').get(id);
    const a = await q.enqueue(1, { priority: 5n, delay: 60000n, maxAttempts: 7n, expires: 3600000n });
    assert.equal(row(a).priority, 5n);
    assert.equal(row(a).max_attempts, 7n);
    assert.ok(row(a).run_at >= BigInt(now) + 60000n);
    const b = await q.enqueue(2, { runAt: BigInt(now) + 1000n });
    assert.equal(row(b).run_at, BigInt(now) + 1000n);
    // beyond 2^53 a priority is read exactly (int64), as a Number option cannot say it
    const [c] = await q.enqueueMany([{ payload: 3, priority: 2n ** 60n + 1n, delay: 60000n, maxAttempts: 2n }]);
    assert.equal(row(c).priority, 2n ** 60n + 1n);
    const d = tocsin.enqueueSql(app, 'big', 4, { priority: -(2n ** 60n) - 1n, delay: 60000n, maxAttempts: 3n, meta: { k: 'v' } });
    assert.equal(row(d).priority, -(2n ** 60n) - 1n);
    assert.equal(row(d).max_attempts, 3n);
    await db.schedule('s', '* * * * *', 'big', null, { priority: 9n, maxAttempts: 2n, jobExpires: 1000n, maxCatchUp: 3n });
    assert.equal((await db.getSchedule('s')).priority, 9);
    await db.updateSchedule('s', { priority: 10n });
    assert.equal((await db.getSchedule('s')).priority, 10);

    // a claim, its lease and the job's id and the waits' timeouts
    const e = await q.enqueue(5, { priority: 100n });
    const [job] = await q.claimBatch(1n, 'w', { visibility: 30000n });
    assert.equal(job.id, e);
    assert.equal(await job.heartbeat({ extend: 30000n }), true);
    assert.equal((await q.get(BigInt(e))).state, 'processing');
    assert.equal(await q.complete(BigInt(e), 'v', { token: job.token, ttl: 60000n }), true);
    assert.equal((await db.result(BigInt(e))).value, 'v');
    await assert.rejects(db.listen('c').get({ timeout: 1n }), tocsin.TimeoutError);
    assert.deepEqual(await db.notifications('c', { afterId: 0n, limit: 10n }), []);
    assert.equal(typeof await db.pruneNotifications({ maxAge: 1000n, maxKeep: 10n }), 'number');
    await db.stream('s').publish(1);
    assert.equal((await db.stream('s').read({ after: 0n, limit: 10n })).length, 1);
    await db.stream('s').trim({ maxAge: 3600000n, maxCount: 10n });
    const lock = db.lock('l', { ttl: 1000n });
    assert.equal(await lock.tryAcquire(), true);
    assert.equal(await lock.renew({ ttl: 2000n }), true);
    assert.equal((await db.rateLimit('r', 2, 1000n).tryAcquire()).allowed, true);
    assert.equal(typeof tocsin.cronNext('* * * * *', BigInt(now)), 'number');
    const t = q.task('t', () => 1, { retries: 2n, timeout: 1000n, resultTtl: 1000n, backoffBase: 10n, delay: 0n });
    assert.ok(await t());
    const w = new tocsin.Worker(db, { queues: ['big'], concurrency: 2n, visibility: 30000n, shutdownTimeout: 1000n });
    assert.equal(w.concurrency, 2);

    // out of range: refused as a Number of that value is, nothing written
    const before = (await q.stats()).pending + (await q.stats()).scheduled;
    await assert.rejects(q.enqueue(1, { delay: -1n }), invalid(/^delay must be >= 0 ms, not -1n$/));
    await assert.rejects(q.enqueue(1, { delay: 2n ** 70n }), invalid(/^delay must be between 0 and 253402300799999 ms \(the year 9999\), not 1180591620717411303424n$/));
    await assert.rejects(q.enqueue(1, { runAt: 2n ** 60n }), invalid(/^runAt must be between 1 and 253402300799999 ms/));
    await assert.rejects(q.enqueue(1, { priority: 2n ** 64n }), invalid(/^priority must be a 64-bit signed integer$/));
    await assert.rejects(q.enqueue(1, { maxAttempts: 0n }), invalid(/^maxAttempts must be between 1 and 1000000$/));
    await assert.rejects(q.enqueueMany([{ payload: 1, priority: 2n ** 64n }]), invalid(/^jobs\[0\]: priority must be an integer$/));
    assert.throws(() => tocsin.enqueueSql(app, 'big', 1, { priority: 2n ** 64n }), invalid(/priority/));
    await assert.rejects(q.wait({ timeout: -1n }), invalid(/^timeout must be a number of milliseconds >= 0$/));
    assert.throws(() => new tocsin.Worker(db, { queues: ['big'], concurrency: 0n }), invalid(/^concurrency must be an integer between 1 and 10000$/));
    assert.throws(() => tocsin.open(file, { busyTimeout: -5n }), invalid(/^busyTimeout must be between 1 and 2147483647 ms \(about 24 days\), not -5n$/));
    assert.equal((await q.stats()).pending + (await q.stats()).scheduled, before);
  } finally {
    app.close();
    await db.close();
  }
});

test('a 64-bit integer read back past 2^53 is the exact BigInt (offsets, notification ids, priorities), never a rounded Number', async () => {
  const file = tmpdb();
  const db = tocsin.open(file);
  const app = new Better(file);
  try {
    const s = db.stream('big');
    assert.equal(await s.publish('first'), 1); // safe integers stay Numbers
    assert.equal(await db.notify('c', 'first'), 1);
    const base = 2n ** 53n + 4n; // the next ids: 2^53 + 5 (a Number would read 2^53 + 4) and 2^53 + 6
    app.prepare("UPDATE sqlite_sequence SET seq = ? WHERE name IN ('_tocsin_events', '_tocsin_notifications')").run(base);
    const a = await s.publish('a');
    assert.equal(a, base + 1n);
    assert.equal(tocsin.publishSql(app, 'big', 'b'), base + 2n);
    assert.deepEqual(await s.publishMany(['c']), [base + 3n]);
    const evs = await s.read({ after: a - 1n });
    assert.deepEqual(evs.map((e) => e.offset), [base + 1n, base + 2n, base + 3n]);
    assert.deepEqual(evs.map((e) => e.id), [base + 1n, base + 2n, base + 3n]);
    assert.equal(JSON.parse(JSON.stringify(evs[0])).id, String(base + 1n));
    assert.equal(await s.saveOffset('billing', evs[1].offset), base + 2n);
    assert.equal(await s.offset('billing'), base + 2n);
    // a consumer resumes after the exact offset, and its close saves the exact offset
    const sub = s.subscribe({ consumer: 'billing' });
    for await (const ev of sub) { assert.equal(ev.offset, base + 3n); assert.equal(ev.payload, 'c'); break; }
    assert.equal(await s.offset('billing'), base + 3n);

    assert.equal(await db.notify('c', 'n'), base + 1n);
    assert.equal(tocsin.notifySql(app, 'c', 'm'), base + 2n);
    assert.deepEqual((await db.notifications('c', { afterId: 1 })).map((n) => n.id), [base + 1n, base + 2n]);
    assert.equal(await db.notifyMaxId(), base + 2n);

    // a priority any other runtime may write (any 64-bit integer) reads back exactly
    const q = db.queue('p');
    const id = await q.enqueue(1, { priority: 2n ** 62n + 1n });
    const low = await q.enqueue(2, { priority: -(2n ** 63n) });
    assert.equal((await q.get(id)).priority, 2n ** 62n + 1n);
    assert.equal((await q.get(low)).priority, -(2n ** 63n));
    assert.equal((await q.get(await q.enqueue(3, { priority: 7 }))).priority, 7);
    const job = await q.claim('w');
    assert.equal(job.priority, 2n ** 62n + 1n);
    assert.deepEqual([JSON.parse(JSON.stringify(job)).priority, JSON.parse(JSON.stringify(job)).token], [String(2n ** 62n + 1n), String(job.token)]);
  } finally {
    app.close();
    await db.close();
  }
});

test('tocsin.callSql: a task call by name in the app\'s own better-sqlite3 transaction (rollback drops it, commit runs it)', async () => {
  const file = tmpdb();
  const db = tocsin.open(file);
  const app = new Better(file);
  try {
    app.exec('CREATE TABLE orders(id INTEGER PRIMARY KEY)');
    const q = db.queue('mail');
    q.task('receipt', (order, kw) => ({ order, copy: kw.copy }));
    const tryCall = app.transaction((id) => {
      app.prepare('INSERT INTO orders(id) VALUES (?)').run(id);
      const jid = tocsin.callSql(app, 'mail', 'receipt', [id], { kwargs: { copy: true }, priority: 3, resultTtl: 60000, timeout: 5000, maxAttempts: 2 });
      if (id === 1) throw new Error('declined');
      return jid;
    });
    assert.throws(() => tryCall(1), /declined/);
    assert.equal((await q.stats()).pending, 0);
    const jid = tryCall(2);
    const job = await q.get(jid);
    assert.deepEqual(job.payload, { task: 'receipt', args: [2], kwargs: { copy: true }, result_ttl_ms: 60000, timeout_ms: 5000 });
    assert.deepEqual([job.priority, job.maxAttempts], [3, 2]);
    const w = new tocsin.Worker(db, { queues: ['mail'] });
    const running = w.run();
    assert.deepEqual((await db.waitResult(jid, { timeout: 10000 })).value, { order: 2, copy: true });
    await w.stop();
    await running;
    // refusals: the TocsinError classes of the same refusal through open()
    assert.throws(() => tocsin.callSql(app, 'mail', '', []), tocsin.InvalidArgumentError);
    assert.throws(() => tocsin.callSql(app, 'mail', 't', 'x'), invalid(/args must be an array/));
    assert.throws(() => tocsin.callSql(app, 'mail', 't', [], { kwargs: [1] }), invalid(/kwargs must be a plain object/));
    assert.throws(() => tocsin.callSql(app, 'mail', 't', [], { bogus: 1 }), tocsin.InvalidArgumentError);
    assert.throws(() => tocsin.callSql(app, 'mail', 't', ['x'.repeat(2 << 20)]), tocsin.TooBigError);
  } finally {
    app.close();
    await db.close();
  }
});
