'use strict';
// db.transaction(fn, { signal }): an abort ends the wait for another connection's write
// lock (the core's cancel token, fired from the main thread while the BEGIN waits on
// the libuv pool), or rolls the transaction back when it comes while fn runs.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const tocsin = require('..');
const { tmpdb, holdWriteLock } = require('./helpers');

// (a liveness bound: a wait the abort does not end would otherwise hang the suite)
function within(p, ms, what) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not settled after ${ms} ms`)), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

test('an abort ends the wait for the write lock; nothing is begun', async () => {
  const file = tmpdb();
  const db = tocsin.open(file, { busyTimeout: 600000 });
  const holder = tocsin.open(file);
  const release = await holdWriteLock(holder, 'held');
  const ac = new AbortController();
  const reason = new Error('the request went away');
  setTimeout(() => ac.abort(reason), 20);
  let ran = false;
  await within(assert.rejects(db.transaction(async () => { ran = true; }, { signal: ac.signal }),
    (e) => e === reason), 30000, 'the aborted transaction');
  assert.equal(ran, false);
  await release();
  // the lock is free again and nothing of the aborted one was begun or kept
  await db.transaction(async (tx) => { await db.queue('q').enqueue('after', { tx }); });
  const jobs = await db.queue('q').claimBatch(5, 'w');
  assert.deepEqual(jobs.map((j) => j.payload), ['held', 'after']);
  await holder.close();
  await db.close();
});

test('an abort while fn runs rolls the transaction back; an aborted signal begins nothing', async () => {
  const db = tocsin.open(tmpdb());
  const q = db.queue('q');
  const ac = new AbortController();
  await assert.rejects(db.transaction(async (tx) => {
    await q.enqueue('rolled back', { tx });
    ac.abort();
    return 'done';
  }, { signal: ac.signal }), { name: 'AbortError' });
  assert.equal((await q.stats()).pending, 0);
  let ran = false;
  await assert.rejects(db.transaction(async () => { ran = true; }, { signal: ac.signal }), { name: 'AbortError' });
  assert.equal(ran, false);
  // a live signal changes nothing; a bad one is refused before anything runs
  const live = new AbortController();
  assert.equal(await db.transaction(async (tx) => { await q.enqueue(1, { tx }); return 7; }, { signal: live.signal }), 7);
  assert.equal((await q.stats()).pending, 1);
  await assert.rejects(db.transaction(async () => {}, { signal: 'soon' }), { name: 'InvalidArgumentError' });
  await assert.rejects(db.transaction(async () => {}, { timeout: 5 }), { name: 'InvalidArgumentError' });
  await db.close();
});
