'use strict';
// Regression tests of a fourth review: run() of a worker whose database is closed under
// it, calls that would wait for their own transaction's write lock.
const { test } = require('node:test');
const assert = require('node:assert/strict');
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
