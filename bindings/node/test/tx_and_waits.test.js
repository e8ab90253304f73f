'use strict';
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert/strict');
const tocsin = require('..');
const { tmpdb, sleep } = require('./helpers');

describe('transactions', () => {
  let db;
  before(async () => { db = tocsin.open(tmpdb()); await db.exec('CREATE TABLE orders(id INTEGER PRIMARY KEY, item TEXT)'); });
  after(() => db.close());

  test('commit: business row, job, event, notification and result together', async () => {
    const q = db.queue('tx-q');
    const prev = await q.enqueue('to ack');
    const claimed = await q.claim('w');
    const out = await db.transaction(async (tx) => {
      tx.exec("INSERT INTO orders(item) VALUES ('book')");
      const id = await q.enqueue({ order: 1 }, { tx });
      await q.enqueueMany([{ payload: 2 }], { tx });
      await db.stream('tx-s').publish({ order: 1 }, { tx });
      await db.notify('tx-ch', 'hi', { tx });
      await db.saveResult(prev, 'r', { tx });
      assert.equal(await claimed.ack({ tx }), true);
      return id;
    });
    assert.equal(typeof out, 'number');
    assert.equal((await q.stats()).pending, 2);
    assert.equal((await db.stream('tx-s').read()).length, 1);
    assert.equal((await db.notifications('tx-ch')).length, 1);
    assert.equal((await db.result(prev)).value, 'r');
  });

  test('rollback drops everything written in it, the error propagates', async () => {
    const q = db.queue('tx-rb');
    const id0 = await q.enqueue('keep');
    const job = await q.claim('w');
    await assert.rejects(db.transaction(async (tx) => {
      tx.exec("INSERT INTO orders(item) VALUES ('ghost')");
      await q.enqueue('ghost', { tx });
      await db.stream('tx-rb').publish('ghost', { tx });
      await db.notify('tx-rb', 'ghost', { tx });
      assert.equal(await job.ack({ tx }), true);
      throw new Error('business rule');
    }), /business rule/);
    assert.equal((await q.stats()).pending, 0);
    assert.equal((await q.get(id0)).state, 'processing', 'the ack was rolled back');
    assert.equal((await db.stream('tx-rb').read()).length, 0);
    assert.equal((await db.notifications('tx-rb')).length, 0);
  });

  test('a transaction handle cannot be used after it ended, nor by another database', async () => {
    let saved;
    await db.transaction(async (tx) => { saved = tx; });
    await assert.rejects(db.queue('x').enqueue(1, { tx: saved }), tocsin.ClosedError);
    const other = tocsin.open(tmpdb());
    await assert.rejects(other.queue('x').enqueue(1, { tx: saved }), tocsin.InvalidArgumentError);
    await assert.rejects(db.queue('x').enqueue(1, { tx: {} }), tocsin.InvalidArgumentError);
    await other.close();
  });

  test('exec cannot begin or end a transaction: refused before it runs', async () => {
    for (const sql of ['BEGIN', 'BEGIN IMMEDIATE', 'COMMIT', 'ROLLBACK', 'END', 'SAVEPOINT s']) {
      await assert.rejects(db.exec(sql), (e) => e instanceof tocsin.InvalidArgumentError &&
        /may not begin or end a transaction/.test(e.message));
    }
    const q = db.queue('tx-ctl');
    await db.transaction(async (tx) => {
      tx.exec("INSERT INTO orders(item) VALUES ('ctl')");
      for (const sql of ['COMMIT', 'ROLLBACK', 'END']) assert.throws(() => tx.exec(sql), tocsin.InvalidArgumentError);
      await q.enqueue('inside', { tx }); // still the transaction's
      tx.exec("SAVEPOINT a; INSERT INTO orders(item) VALUES ('gone'); ROLLBACK TO a; RELEASE a");
    });
    assert.equal((await q.stats()).pending, 1);
  });

  test('two transactions of one event loop never share one by accident', async () => {
    const q = db.queue('tx-two');
    const a = db.transaction(async (tx) => { await q.enqueue('a', { tx }); await sleep(30); throw new Error('a fails'); });
    const aFails = assert.rejects(a, /a fails/);
    await sleep(5);
    // outside any transaction: commits on its own even while `a` holds the lock
    await q.enqueue('outside');
    await aFails;
    const jobs = await q.claimBatch(10, 'w');
    assert.deepEqual(jobs.map((j) => j.payload), ['outside']);
  });
});

describe('waits', () => {
  let db;
  before(() => { db = tocsin.open(tmpdb()); });
  after(() => db.close());

  test('waitResult: a timeout says why there is no result (never claimed, running, retrying)', async () => {
    const q = db.queue('why-q');
    const id = await q.enqueue('x');
    await assert.rejects(db.waitResult(id, { timeout: 20 }), (e) => {
      assert.ok(e instanceof tocsin.TimeoutError, String(e));
      assert.match(e.message, new RegExp(`^no result for job ${id} within 20 ms: job ${id} was never claimed: no worker took it from queue "why-q"$`));
      return true;
    });
    const job = await q.claim('w-why');
    await assert.rejects(db.waitResult(id, { timeout: 20 }), /is running \(attempt 1 of \d+, worker w-why\)/);
    await job.retry({ delay: 60000, error: 'flaky' });
    await assert.rejects(db.waitResult(id, { timeout: 20 }), /is retrying: attempt 1 of \d+ ended \(flaky\)/);
    // an outcome that lands at the deadline is returned, not a timeout
    await db.saveResult(id, 'late');
    assert.equal((await db.waitResult(id, { timeout: 0 })).value, 'late');
  });

  test('listen: async iterator and EventEmitter', async () => {
    const it = db.listen('ch1');
    const em = db.listen('ch1');
    const got = [];
    const emitted = new Promise((resolve) => em.on('notification', (n) => { got.push(n.payload); if (got.length === 2) resolve(); }));
    setTimeout(async () => { await db.notify('ch1', { n: 1 }, { meta: { trace: 'z' } }); await db.notify('ch1', { n: 2 }); }, 10);
    const seen = [];
    for await (const n of it) {
      seen.push(n.payload);
      assert.equal(n.channel, 'ch1');
      if (seen.length === 1) assert.deepEqual(n.meta, { trace: 'z' });
      if (seen.length === 2) break;
    }
    await emitted;
    assert.deepEqual(seen, [{ n: 1 }, { n: 2 }]);
    assert.deepEqual(got, [{ n: 1 }, { n: 2 }]);
    assert.equal(it.closed, true, 'breaking out of the loop closes the listener');
    em.close();
  });

  test('stream subscribe: replay, then live, offsets saved', async () => {
    const s = db.stream('topic1');
    await s.publishMany([{ i: 1 }, { i: 2 }], { keys: ['a', null] });
    const seen = [];
    setTimeout(() => s.publish({ i: 3 }, { key: 'k' }), 20);
    for await (const ev of s.subscribe({ consumer: 'c1', autosaveEvery: 1 })) {
      seen.push(ev.payload.i);
      if (seen.length === 3) { assert.equal(ev.key, 'k'); break; }
    }
    assert.deepEqual(seen, [1, 2, 3]);
    assert.ok((await s.offset('c1')) >= 2);
    const sub = s.subscribe({ consumer: 'c1' });
    setTimeout(() => s.publish({ i: 4 }), 10);
    const batch = await sub.get({ timeout: 1000 });
    assert.ok(batch.length >= 1);
    sub.close();
    assert.ok(await s.trim({ maxCount: 1 }) >= 1);
  });

  test('stream subscribe: a named consumer\'s offset is saved when the loop ends; saveOnClose: false leaves it', async () => {
    const s = db.stream('soc');
    await s.publishMany([1, 2, 3, 4, 5].map((i) => ({ i })));
    const seen = [];
    for await (const ev of s.subscribe({ consumer: 'c', batch: 10 })) {
      seen.push(ev.payload.i);
      if (ev.payload.i === 2) break; // mid-batch: 3..5 were fetched, not handed on
    }
    assert.deepEqual(seen, [1, 2]);
    const again = [];
    for await (const ev of s.subscribe({ consumer: 'c' })) {
      again.push(ev.payload.i);
      if (ev.payload.i === 3) break;
    }
    assert.deepEqual(again, [3], 'a new subscription resumes after the last event seen');
    const at = await s.offset('c');
    for await (const ev of s.subscribe({ consumer: 'c', saveOnClose: false })) {
      if (ev.payload.i === 5) break;
    }
    assert.equal(await s.offset('c'), at, 'saveOnClose: false leaves the offset');
    const sub = s.subscribe({ consumer: 'c' }); // close() after get(): the batch handed out
    const batch = await sub.get({ timeout: 1000 });
    assert.deepEqual(batch.map((e) => e.payload.i), [4, 5]);
    sub.close();
    assert.equal(await s.offset('c'), batch[1].offset);
    assert.throws(() => s.subscribe({ consumer: 'c', saveOnClose: 'no' }), /saveOnClose must be a boolean/);
  });

  test('results: waitResult resolves on the commit that stores it', async () => {
    const q = db.queue('res');
    const id = await q.enqueue('x');
    const p = db.waitResult(id, { timeout: 5000 });
    const job = await q.claim('w');
    await job.complete({ ok: 1 });
    const r = await p;
    assert.deepEqual(r.value, { ok: 1 });
    assert.deepEqual(r.unwrap(), { ok: 1 });
    const id2 = await q.enqueue('y');
    const j2 = await q.claim('w');
    await q.failTask(j2, 'ValueError', 'bad value');
    const r2 = await db.waitResult(id2);
    assert.equal(r2.ok, false);
    assert.throws(() => r2.unwrap(), (e) => e instanceof tocsin.TaskError && e.type === 'ValueError');
    assert.equal(await db.deleteResult(id2), true);
  });

  test('locks: withLock waits for the holder and fences', async () => {
    const holder = db.lock('L1', { ttl: 60000, owner: 'other' });
    assert.equal(await holder.tryAcquire(), true);
    const order = [];
    const p = db.withLock('L1', { ttl: 5000, timeout: 5000 }, async (lock) => {
      order.push('inside');
      assert.ok(lock.token > holder.token, 'a new holder gets a higher token');
      return lock.token;
    });
    await sleep(30);
    order.push('release');
    assert.equal(await holder.release(), true);
    const tok = await p;
    assert.deepEqual(order, ['release', 'inside']);
    assert.ok(tok > 0);
    assert.equal((await db.lockHolder('L1')).owner, null, 'released after fn');
    assert.equal(await holder.renew(), false, 'stale holder cannot renew');
  });

  test('rate limits', async () => {
    const rl = db.rateLimit('api', 2, 1000);
    assert.equal((await rl.tryAcquire()).allowed, true);
    assert.equal((await rl.tryAcquire()).allowed, true);
    const d = await rl.tryAcquire();
    assert.equal(d.allowed, false);
    assert.ok(d.retryAfter > 0);
    assert.equal(await rl.reset(), 2);
  });

  test('timeouts reject with TimeoutError', async () => {
    await assert.rejects(db.queue('empty').wait({ timeout: 30 }), tocsin.TimeoutError);
    await assert.rejects(db.waitResult(999999, { timeout: 30 }), (e) => e instanceof tocsin.TimeoutError || e instanceof tocsin.NotFoundError);
    const l = db.listen('quiet');
    await assert.rejects(l.get({ timeout: 30 }), tocsin.TimeoutError);
    l.close();
    const w = db.subscribe();
    await assert.rejects(w.wait({ timeout: 30 }), tocsin.TimeoutError);
    w.close();
  });

  test('AbortSignal ends every wait', async () => {
    const q = db.queue('abort-q');
    const id = await q.enqueue('x');
    const holder = db.lock('abort-lock', { ttl: 60000, owner: 'someone' });
    await holder.tryAcquire();
    const mk = () => { const c = new AbortController(); setTimeout(() => c.abort(), 20); return c.signal; };
    const waits = {
      queueWait: () => db.queue('abort-empty').wait({ signal: mk() }),
      jobs: async () => { for await (const j of db.queue('abort-empty').jobs('w', { signal: mk() })) void j; },
      waitResult: () => db.waitResult(id, { signal: mk() }),
      lock: () => db.lock('abort-lock').acquire({ signal: mk() }),
      withLock: () => db.withLock('abort-lock', { signal: mk() }, async () => 1),
      listenGet: () => db.listen('abort-ch').get({ signal: mk() }),
      listenIter: async () => { for await (const n of db.listen('abort-ch', { signal: mk() })) void n; },
      streamIter: async () => { for await (const e of db.stream('abort-t').subscribe({ fromOffset: 0, signal: mk() })) void e; },
      wake: () => db.subscribe().wait({ signal: mk() }),
    };
    for (const [name, fn] of Object.entries(waits)) {
      await assert.rejects(fn(), (e) => { assert.equal(e.name, 'AbortError', `${name}: ${e}`); return true; });
    }
    // an already-aborted signal rejects at once
    const done = AbortSignal.abort();
    await assert.rejects(db.queue('abort-empty').wait({ signal: done }), { name: 'AbortError' });
    await assert.rejects(db.queue('x').wait({ signal: 'nope' }), tocsin.InvalidArgumentError);
    await holder.release();
  });

  test('close with waits in flight rejects them with ClosedError', async () => {
    const d2 = tocsin.open(tmpdb());
    const id = await d2.queue('c').enqueue('x');
    const h = d2.lock('cl', { owner: 'x' });
    await h.tryAcquire();
    const waits = [
      d2.queue('c-empty').wait(),
      d2.waitResult(id),
      d2.lock('cl').acquire(),
      d2.listen('c').get(),
      (async () => { for await (const e of d2.stream('c').subscribe({ fromOffset: 0 })) void e; })(),
      d2.subscribe().wait(),
    ];
    await sleep(20);
    await d2.close();
    const results = await Promise.allSettled(waits);
    for (const r of results) {
      assert.equal(r.status, 'rejected');
      assert.ok(r.reason instanceof tocsin.ClosedError, String(r.reason));
    }
    await assert.rejects(d2.queue('c').enqueue(1), tocsin.ClosedError);
    assert.equal(d2.closed, true);
  });
});
