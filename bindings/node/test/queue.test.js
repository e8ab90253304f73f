'use strict';
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert/strict');
const tocsin = require('..');
const { tmpdb } = require('./helpers');

describe('queue', () => {
  let db;
  before(() => { db = tocsin.open(tmpdb()); });
  after(() => db.close());

  test('enqueue, claim, ack; payload and meta are JSON values', async () => {
    const q = db.queue('q-basic');
    const id = await q.enqueue({ to: 'ada', n: [1, 2] }, { meta: { traceparent: 't-1' }, priority: 3 });
    assert.equal(typeof id, 'number');
    const job = await q.claim('w1');
    assert.equal(job.id, id);
    assert.deepEqual(job.payload, { to: 'ada', n: [1, 2] });
    assert.deepEqual(job.meta, { traceparent: 't-1' });
    assert.equal(job.priority, 3);
    assert.equal(job.attempts, 1);
    assert.equal(job.state, 'processing');
    assert.equal(typeof job.token, 'bigint');
    assert.equal(job.token, BigInt(id) * 2n ** 20n + 1n);
    assert.equal(await job.ack(), true);
    assert.equal(await q.get(id), null, 'acked jobs are removed');
    assert.equal(await q.claim('w1'), null);
  });

  test('priority order, delay, unique keys, enqueueMany', async () => {
    const q = db.queue('q-order');
    const low = await q.enqueue('low');
    const high = await q.enqueue('high', { priority: 10 });
    await q.enqueue('later', { delay: 60000 });
    const u1 = await q.enqueue('u', { uniqueKey: 'k' });
    const u2 = await q.enqueue('u again', { uniqueKey: 'k' });
    assert.equal(u1, u2, 'unique key dedups against live jobs');
    const ids = await q.enqueueMany([{ payload: 1 }, { payload: 2, priority: -1 }]);
    assert.equal(ids.length, 2);
    const st = await q.stats();
    assert.equal(st.pending, 5);
    assert.equal(st.scheduled, 1);
    const batch = await q.claimBatch(10, 'w');
    assert.deepEqual(batch.map((j) => j.id).slice(0, 2), [high, low]);
    assert.equal(batch.length, 5);
    assert.equal(await q.ackBatch(batch), 5);
  });

  test('enqueueMany: payload-only batches, mixed batches, all or none', async () => {
    const q = db.queue('q-many');
    const plain = await q.enqueueMany([{ payload: { n: 1 } }, { payload: 'two' }, { payload: null }]);
    assert.equal(plain.length, 3);
    assert.deepEqual(plain, [plain[0], plain[0] + 1, plain[0] + 2]);
    assert.deepEqual(await q.enqueueMany([]), []);
    // a job with an option after plain ones: the whole batch takes the options path
    const mixed = await q.enqueueMany([{ payload: 4 }, { payload: 5, priority: 9 }, { payload: 6, queue: 'q-many-b' }]);
    assert.equal(mixed.length, 3);
    assert.equal((await q.get(mixed[1])).priority, 9);
    assert.equal((await db.queue('q-many-b').get(mixed[2])).queue, 'q-many-b');
    const before = (await q.stats()).pending;
    for (const bad of [[{ payload: 1 }, { payload: NaN }], [{ payload: 1 }, null], [{ payload: 1 }, { nopayload: 1 }]]) {
      await assert.rejects(() => q.enqueueMany(bad), (e) => {
        assert.ok(e instanceof tocsin.InvalidArgumentError);
        assert.match(e.message, /jobs\[1\]/);
        return true;
      });
    }
    assert.equal((await q.stats()).pending, before, 'a rejected batch writes nothing');
    const jobs = await q.claimBatch(10, 'w');
    assert.deepEqual(jobs.slice(0, 4).map((j) => j.payload), [5, { n: 1 }, 'two', null]);
  });

  test('retry, fail, dead letters, requeue, purge', async () => {
    const q = db.queue('q-dead');
    const id = await q.enqueue('x', { maxAttempts: 2 });
    let job = await q.claim('w');
    assert.equal(await job.retry({ delay: 0, error: 'boom' }), true);
    job = await q.claim('w');
    assert.equal(job.attempts, 2);
    assert.equal(await job.fail({ error: 'final' }), true);
    const dead = await q.deadLetters();
    assert.equal(dead.length, 1);
    assert.equal(dead[0].id, id);
    assert.equal(dead[0].reason, 'failed');
    assert.equal(dead[0].state, 'dead');
    assert.equal(await q.requeue(id), true);
    assert.equal((await q.get(id)).state, 'pending');
    job = await q.claim('w');
    await job.fail();
    assert.equal(await q.purge(), 1);
    assert.equal((await q.deadLetters()).length, 0);
  });

  test('fencing: a stale token is refused and writes nothing', async () => {
    const q = db.queue('q-fence');
    db.setTime(1_000_000);
    try {
      await q.enqueue('f');
      const first = await q.claim('w1', { visibility: 1000 });
      db.setTime(1_003_000); // the lease lapsed
      const second = await q.claim('w2', { visibility: 1000 });
      assert.equal(second.id, first.id);
      assert.notEqual(second.token, first.token);
      assert.equal(await first.ack(), false, 'the first holder lost the lease');
      assert.equal(await first.heartbeat(), false);
      assert.equal(await first.retry(), false);
      assert.equal((await q.get(first.id)).worker, 'w2');
      assert.equal(await second.heartbeat({ extend: 5000 }), true);
      assert.equal(await second.ack(), true);
    } finally {
      db.setTime(null);
    }
  });

  test('tokens past 2^53 round-trip as BigInt (and decimal strings)', async () => {
    const q = db.queue('q-big');
    const big = 2 ** 33 + 7;
    db.exec(`UPDATE sqlite_sequence SET seq = ${big} WHERE name = '_tocsin_jobs'`);
    const id = await q.enqueue('big');
    assert.equal(id, big + 1);
    const job = await q.claim('w');
    const expected = BigInt(big + 1) * 2n ** 20n + 1n;
    assert.equal(job.token, expected);
    assert.ok(job.token > BigInt(Number.MAX_SAFE_INTEGER));
    assert.equal(await q.heartbeat(job.id, { token: String(expected) }), true);
    await assert.rejects(q.ack(job.id, Number(expected)), tocsin.InvalidArgumentError, 'an unsafe Number token is refused');
    assert.equal(await q.ack(job.id, expected), true);
  });

  test('cancel, pause/resume, get, stats of all queues', async () => {
    const q = db.queue('q-ctl');
    const id = await q.enqueue('c');
    assert.equal(await q.cancel(id), true);
    assert.equal((await q.get(id)).reason, 'cancelled');
    await q.enqueue('p');
    await q.pause();
    assert.equal(await q.isPaused(), true);
    assert.equal(await q.claim('w'), null);
    await q.resume();
    assert.ok(await q.claim('w'));
    const all = await db.stats();
    assert.ok(all.some((s) => s.queue === 'q-ctl'));
    assert.equal(typeof (await q.nextDeadline()), 'number');
  });

  test('bad input: clear errors, nothing written', async () => {
    const q = db.queue('q-bad');
    const cases = [
      () => q.enqueue(1, { maxAttempts: 0 }),
      () => q.enqueue(1, { maxAttempts: 1.5 }),
      () => q.enqueue(1, { delay: -1 }),
      () => q.enqueue(1, { delay: 'soon' }),
      () => q.enqueue(1, { meta: 'not an object' }),
      () => q.enqueue(1, { uniqueKey: '' }),
      () => q.enqueue(NaN),
      () => db.queue('').enqueue(1),
      () => db.queue('bad\u0001name').enqueue(1),
      () => db.queue('x'.repeat(256)).enqueue(1),
      () => q.enqueueMany([{ payload: 1 }, { payload: 2, maxAttempts: -3 }]),
      () => q.enqueueMany('nope'),
      () => q.claimBatch(0, 'w'),
      () => q.claim(''),
      () => q.claim(42),
      () => q.ack(1),
      () => q.ack(1, 'abc'),
    ];
    for (const c of cases) {
      await assert.rejects(c, (e) => {
        assert.ok(e instanceof tocsin.InvalidArgumentError, `${c}: ${e && e.stack}`);
        assert.equal(e.code, 'TOCSIN_INVALID');
        assert.ok(e.message.length > 5);
        return true;
      });
    }
    await assert.rejects(q.enqueue('x'.repeat(2 * 1024 * 1024)), tocsin.TooBigError);
    const st = await q.stats();
    assert.equal(st.pending + st.scheduled + st.processing + st.dead, 0, 'nothing was written');
  });

  test('jobs() iterates claims and ends with the AbortSignal', async () => {
    const q = db.queue('q-iter');
    const ac = new AbortController();
    const seen = [];
    setTimeout(() => q.enqueueMany([{ payload: 'a' }, { payload: 'b' }]), 20);
    await assert.rejects((async () => {
      for await (const job of q.jobs('w', { signal: ac.signal })) {
        seen.push(job.payload);
        await job.ack();
        if (seen.length === 2) setTimeout(() => ac.abort(), 10);
      }
    })(), { name: 'AbortError' });
    assert.deepEqual(seen, ['a', 'b']);
  });

  test('complete saves the result and acks, atomically', async () => {
    const q = db.queue('q-complete');
    const id = await q.enqueue('job');
    const job = await q.claim('w');
    assert.equal(await job.complete({ sum: 3 }), true);
    const r = await db.result(id);
    assert.equal(r.ok, true);
    assert.deepEqual(r.value, { sum: 3 });
    assert.equal(await q.get(id), null);
  });
});
