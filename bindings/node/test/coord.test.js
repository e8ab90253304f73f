'use strict';
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert/strict');
const tocsin = require('..');
const { tmpdb } = require('./helpers');

describe('schedules, prune, notifications, bad input across the API', () => {
  let db;
  before(() => { db = tocsin.open(tmpdb()); });
  after(() => db.close());

  test('schedules: set, get, update with field presence, pause/resume, tick, remove', async () => {
    const t0 = Date.UTC(2030, 0, 1, 0, 0, 0);
    db.setTime(t0);
    try {
      const next = await db.schedule('nightly', '0 3 * * *', 'reports', { kind: 'nightly' }, { priority: 2, meta: { team: 'ops' } });
      assert.equal(next, Date.UTC(2030, 0, 1, 3, 0, 0));
      let s = await db.getSchedule('nightly');
      assert.equal(s.queue, 'reports');
      assert.deepEqual(s.payload, { kind: 'nightly' });
      assert.deepEqual(s.meta, { team: 'ops' });
      assert.equal(s.priority, 2);
      assert.equal(s.catchUp, 'once');
      await db.updateSchedule('nightly', { priority: 5 });
      s = await db.getSchedule('nightly');
      assert.equal(s.priority, 5);
      assert.deepEqual(s.meta, { team: 'ops' }, 'unflagged fields keep their values');
      await db.pauseSchedule('nightly');
      assert.equal((await db.getSchedule('nightly')).paused, true);
      await db.resumeSchedule('nightly');
      assert.equal((await db.schedulerNextFire()), Date.UTC(2030, 0, 1, 3, 0, 0));
      db.setTime(Date.UTC(2030, 0, 1, 3, 0, 1));
      assert.equal(await db.schedulerTick(), 1);
      assert.equal(await db.schedulerTick(), 0, 'a boundary fires once');
      const job = await db.queue('reports').claim('w');
      assert.deepEqual(job.payload, { kind: 'nightly' });
      assert.equal(job.meta.tocsin_schedule, 'nightly');
      assert.equal((await db.schedules()).length, 1);
      const lead = await db.schedulerLead('me', 10000);
      assert.equal(lead.leader, true);
      assert.equal(await db.schedulerResign('me'), true);
      assert.equal(await db.unschedule('nightly'), true);
      assert.equal(await db.getSchedule('nightly'), null);
      await assert.rejects(db.pauseSchedule('nightly'), tocsin.NotFoundError);
    } finally {
      db.setTime(null);
    }
  });

  test('cronNext', () => {
    const after = Date.UTC(2030, 0, 1, 0, 0, 0);
    assert.equal(tocsin.cronNext('*/15 * * * *', after), Date.UTC(2030, 0, 1, 0, 15, 0));
    assert.equal(tocsin.cronNext('@hourly', new Date(after)), Date.UTC(2030, 0, 1, 1, 0, 0));
    assert.throws(() => tocsin.cronNext('61 * * * *'), (e) => e instanceof tocsin.InvalidArgumentError && /minute/.test(e.message));
    assert.throws(() => tocsin.cronNext('0 0 30 2 *', after), /never fires/);
  });

  test('prune, notify autotrim, notifyMaxId, stats of all queues', async () => {
    await db.notify('p', 1);
    await db.notify('p', 2);
    const max = await db.notifyMaxId();
    assert.ok(max >= 2);
    const out = await db.prune({ notificationsMaxKeep: 1 });
    assert.equal(typeof out.results, 'number');
    assert.equal(typeof out.rateLimits, 'number');
    assert.ok(out.notifications >= 1);
    assert.equal((await db.notifications('p')).length, 1);
    await db.setNotifyAutotrim({ maxKeep: 100, oneIn: 10 });
    assert.ok(Array.isArray(await db.stats()));
  });

  test('bad input everywhere: clear InvalidArgumentError, nothing written', async () => {
    const s = db.stream('bad-s');
    const cases = {
      publishKey: () => s.publish(1, { key: 5 }),
      publishMeta: () => s.publish(1, { meta: [1] }),
      publishMany: () => s.publishMany([1, 2], { keys: ['a'] }),
      readLimit: () => s.read({ limit: 0 }),
      offsetConsumer: () => s.offset(''),
      subscribeBatch: () => s.subscribe({ batch: 20000 }),
      notifyChannel: () => db.notify('', 1),
      notifyPayload: () => db.notify('c', () => 1),
      listenBuffer: () => db.listen('c', { bufferSize: 0 }),
      lockTtl: () => db.lock('l', { ttl: 0 }).tryAcquire(),
      lockName: () => db.lock('').tryAcquire(),
      rateLimit: () => db.rateLimit('r', 0, 1000).tryAcquire(),
      ratePer: () => db.rateLimit('r', 1, 0).tryAcquire(),
      schedule: () => db.schedule('s', 'not cron', 'q', 1),
      scheduleOpts: () => db.schedule('s', '@daily', 'q', 1, { catchUp: 'sometimes' }),
      saveResult: () => db.saveResult('x', 1),
      saveError: () => db.saveError(1, ''),
      withLock: () => db.withLock('l', {}, 'not a function'),
      transaction: () => db.transaction('not a function'),
      waitTimeout: () => db.queue('q').wait({ timeout: -1 }),
      exec: () => db.exec(42),
      open: async () => tocsin.open(42),
    };
    for (const [name, fn] of Object.entries(cases)) {
      await assert.rejects(async () => fn(), (e) => {
        assert.ok(e instanceof tocsin.InvalidArgumentError || e instanceof tocsin.SQLiteError, `${name}: ${e && e.stack}`);
        assert.ok(e.message.length > 5, name);
        return true;
      }, name);
    }
    assert.equal((await s.read()).length, 0);
    assert.equal(await db.getSchedule('s'), null);
    assert.equal((await db.lockHolder('l')).owner, null);
  });

  test('read-only databases refuse writes with ReadOnlyError', async () => {
    const file = tmpdb();
    const rw = tocsin.open(file);
    await rw.queue('q').enqueue(1);
    await rw.close();
    const ro = tocsin.open(file, { readOnly: true });
    assert.equal((await ro.queue('q').stats()).pending, 1);
    await assert.rejects(ro.queue('q').enqueue(2), tocsin.ReadOnlyError);
    await ro.close();
  });
});
