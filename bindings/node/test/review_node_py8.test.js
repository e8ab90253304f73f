'use strict';
// Regression tests of a review of the Node binding (node + python pass).
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert/strict');
const tocsin = require('..');
const { tmpdb } = require('./helpers');

// Runs `body` in a child Node process with `tocsin` and a fresh `db` in scope; killed
// after 10 s (a process that never ends is what some of these tests look for).
async function runChild(body) {
  const script = `
    const tocsin = require(${JSON.stringify(require('path').resolve(__dirname, '..'))});
    const db = tocsin.open(${JSON.stringify(tmpdb())});
    ${body}
  `;
  const child = require('child_process').spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '', err = '';
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', (d) => { err += d; });
  const killer = setTimeout(() => child.kill('SIGKILL'), 10000);
  const [code, signal] = await new Promise((r) => child.on('close', (c, sg) => r([c, sg])));
  clearTimeout(killer);
  return { code, signal, out, err };
}

describe('node review 8', () => {
  let path;
  let db;
  before(() => { path = tmpdb(); db = tocsin.open(path); });
  after(() => db.close());

  // "A named consumer's offset is saved when the subscription closes (the end of a
  // for-await loop, close()): the last event handed on" -- closed mid-batch, it saved the
  // end of the batch the core had read (4..10 never handed on, skipped for good) and the
  // loop went on handing out the rest of that batch after close.
  test('close() inside a for-await loop mid-batch saves the last event handed on and hands out no more', async () => {
    const s = db.stream('close-mid');
    const offs = await s.publishMany([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    const sub = s.subscribe({ consumer: 'c', batch: 100 });
    const seen = [];
    await assert.rejects(async () => {
      for await (const ev of sub) {
        seen.push(ev.payload);
        if (ev.payload === 3) sub.close();
      }
    }, tocsin.ClosedError);
    assert.deepEqual(seen, [1, 2, 3]);
    assert.equal(await s.offset('c'), offs[2]);
    const next = [];
    for await (const ev of s.subscribe({ consumer: 'c' })) { next.push(ev.payload); if (ev.payload === 10) break; }
    assert.deepEqual(next, [4, 5, 6, 7, 8, 9, 10]);
  });

  test('the signal aborting a for-await loop mid-batch saves the last event handed on and hands out no more', async () => {
    const s = db.stream('abort-mid');
    const offs = await s.publishMany([1, 2, 3, 4, 5, 6]);
    const ac = new AbortController();
    const seen = [];
    await assert.rejects(async () => {
      for await (const ev of s.subscribe({ consumer: 'c', signal: ac.signal })) {
        seen.push(ev.payload);
        if (ev.payload === 2) ac.abort();
      }
    }, { name: 'AbortError' });
    assert.deepEqual(seen, [1, 2]);
    assert.equal(await s.offset('c'), offs[1]);
  });

  test('db.close() during a for-await loop mid-batch saves the last event handed on', async () => {
    const p = tmpdb();
    const d = tocsin.open(p);
    const s = d.stream('dbclose-mid');
    const offs = await s.publishMany([1, 2, 3, 4, 5]);
    const seen = [];
    await assert.rejects(async () => {
      for await (const ev of s.subscribe({ consumer: 'c' })) {
        seen.push(ev.payload);
        if (ev.payload === 2) await d.close();
      }
    }, tocsin.ClosedError);
    assert.deepEqual(seen, [1, 2]);
    const d2 = tocsin.open(p);
    try {
      assert.equal(await d2.stream('dbclose-mid').offset('c'), offs[1]);
    } finally {
      await d2.close();
    }
  });

  // The core's close of a stream subscription cleared its own error after a failed save
  // (the write lock held by a transaction): BusyError "ok".
  test('a save on close that finds the write lock taken says why', async () => {
    const s = db.stream('close-busy');
    await s.publishMany([1, 2, 3]);
    await assert.rejects(db.transaction(async (tx) => {
      await s.publish(4, { tx });
      for await (const ev of s.subscribe({ consumer: 'c', fromOffset: 0 })) { if (ev.payload === 2) break; }
    }), (e) => e instanceof tocsin.BusyError && /locked/.test(e.message) && e.message !== 'ok');
    assert.equal(await s.offset('c'), 0);
  });

  // A negative count reached the core, whose refusal named its C argument (max_count,
  // max_keep, "max_keep and one_in"), not the option as JS spells it.
  test('negative trim and prune counts are refused naming the option', async () => {
    await assert.rejects(db.stream('t').trim({ maxCount: -1 }), (e) => e instanceof tocsin.InvalidArgumentError && /^maxCount /.test(e.message));
    await assert.rejects(db.pruneNotifications({ maxKeep: -1 }), (e) => e instanceof tocsin.InvalidArgumentError && /^maxKeep /.test(e.message));
    await assert.rejects(db.setNotifyAutotrim({ maxKeep: -2 }), (e) => e instanceof tocsin.InvalidArgumentError && /^maxKeep /.test(e.message));
    await assert.rejects(db.setNotifyAutotrim({ maxKeep: 5, oneIn: -1 }), (e) => e instanceof tocsin.InvalidArgumentError && /^oneIn /.test(e.message));
    assert.equal(await db.stream('t').trim({ maxCount: 0, maxAge: 1 }), 0); // 0: no such bound
  });

  // tocsin.enqueueSql / callSql wrote their options with JSON.stringify unchecked: a NaN
  // or an Infinity priority, maxAttempts or uniqueKey became null, which the SQL function
  // reads as "the default", so the job was enqueued with priority 0, 3 attempts, no
  // unique key; queue.enqueue() refuses the same values.
  test('enqueueSql and callSql refuse the option values queue.enqueue() refuses, writing nothing', async () => {
    const Database = require('better-sqlite3');
    const app = new Database(path);
    try {
      const bad = [
        [{ priority: NaN }, /^priority must be an integer/],
        [{ priority: Infinity }, /^priority must be an integer/],
        [{ priority: '5' }, /^priority must be an integer/],
        [{ maxAttempts: NaN }, /^maxAttempts must be an integer/],
        [{ maxAttempts: -Infinity }, /^maxAttempts must be an integer/],
        [{ maxAttempts: 0 }, /^maxAttempts must be an integer between 1 and/],
        [{ uniqueKey: NaN }, /^uniqueKey must be a string/],
        [{ uniqueKey: 5 }, /^uniqueKey must be a string/],
        [{ delay: 5, runAt: Date.now() + 1000 }, /^give delay or runAt, not both/],
      ];
      for (const [o, re] of bad) {
        assert.throws(() => tocsin.enqueueSql(app, 'sqlopts', 1, o), (e) => e instanceof tocsin.InvalidArgumentError && re.test(e.message), JSON.stringify(o));
        assert.throws(() => tocsin.callSql(app, 'sqlopts', 't', [], o), (e) => e instanceof tocsin.InvalidArgumentError && re.test(e.message), JSON.stringify(o));
      }
      assert.equal((await db.queue('sqlopts').stats()).pending, 0, 'nothing was written');
      const id = tocsin.enqueueSql(app, 'sqlopts', 1, { priority: 2n ** 62n, maxAttempts: 2n, uniqueKey: null });
      const job = await db.queue('sqlopts').get(id);
      assert.equal(job.priority, 2n ** 62n);
      assert.equal(job.maxAttempts, 2);
    } finally {
      app.close();
    }
  });

  // The pump behind listener.on('notification') waited on the listener's descriptor
  // until a notification came, whether or not anyone still listened: after off() of the
  // last handler, that wait kept the process alive for good.
  test('removing the last notification handler stops the pump: the process can exit; a handler added later hears what came meanwhile', async () => {
    const { code, signal, out } = await runChild(`
      const l = db.listen('c');
      const f = () => {};
      l.on('notification', f);
      setImmediate(() => setImmediate(() => { l.off('notification', f); console.log('off'); }));
    `);
    assert.equal(out.trim(), 'off');
    assert.deepEqual([code, signal], [0, null], 'the process ended by itself');

    const l = db.listen('pump');
    const f = () => {};
    l.on('notification', f);
    await new Promise((r) => setImmediate(r));
    l.off('notification', f);
    await db.notify('pump', 1);
    const heard = await new Promise((resolve) => l.on('notification', (n) => resolve(n.payload)));
    assert.equal(heard, 1);
    l.close();
  });
});

// A 'notification' handler that threw ended the pump (an unhandled rejection): a
// process that handles 'uncaughtException' heard nothing more. Now the throw is the
// process's uncaught exception and the delivery goes on.
test('a notification handler that throws is an uncaught exception, and delivery goes on', async () => {
  const { code, out, err } = await runChild(`
    const l = db.listen('c');
    const got = [], thrown = [];
    process.on('uncaughtException', (e) => thrown.push(e.message));
    l.on('notification', (n) => {
      if (n.payload === 1) throw new Error('handler failed on 1');
      got.push(n.payload);
      if (n.payload === 3) { l.close(); db.close(); }
    });
    process.on('exit', () => console.log(JSON.stringify({ got, thrown })));
    setImmediate(async () => { await db.notify('c', 1); await db.notify('c', 2); await db.notify('c', 3); });
  `);
  assert.equal(code, 0, err);
  assert.deepEqual(JSON.parse(out.trim()), { got: [2, 3], thrown: ['handler failed on 1'] });
});

// A user's process.nextTick that throws while tocsin's descriptor callback drains the
// tick queue: the exception stayed pending in N-API, so every later call of the addon
// failed and the poller's callback never ran again while its descriptor stayed
// readable (a process spinning a core, never exiting). It is now the process's uncaught
// exception, and tocsin goes on.
test('a nextTick that throws during a wake is an uncaught exception; tocsin goes on', async () => {
  const { code, signal, out, err } = await runChild(`
    const l = db.listen('c');
    const got = [], thrown = [];
    process.on('uncaughtException', (e) => thrown.push(e.message));
    l.on('notification', (n) => {
      got.push(n.payload);
      if (n.payload === 1) process.nextTick(() => { throw new Error('tick failed'); });
      if (n.payload === 3) setTimeout(() => { l.close(); db.close(); }, 10);
    });
    process.on('exit', () => console.log(JSON.stringify({ got, thrown })));
    setImmediate(async () => {
      await db.notify('c', 1);
      await new Promise((r) => setTimeout(r, 20));
      await db.notify('c', 2);
      await new Promise((r) => setTimeout(r, 20));
      await db.notify('c', 3);
    });
  `);
  assert.deepEqual([code, signal], [0, null], err);
  assert.deepEqual(JSON.parse(out.trim()), { got: [1, 2, 3], thrown: ['tick failed'] });
});

test('db.prune() names its own options and refuses before it deletes anything', async () => {
  const db = tocsin.open(tmpdb());
  try {
    db.setTime(Date.UTC(2030, 0, 1));
    const id = await db.queue('q').enqueue(1);
    await db.saveResult(id, 'r', { ttl: 1000 });
    db.setTime(Date.UTC(2030, 0, 2)); // past the result's ttl
    await assert.rejects(db.prune({ notificationsMaxKeep: -1 }), (e) => e instanceof tocsin.InvalidArgumentError &&
      /^notificationsMaxKeep must be an integer >= 0, not -1/.test(e.message));
    await assert.rejects(db.prune({ notificationsMaxAge: -5 }), /notificationsMaxAge must be >= 0 ms, not -5/);
    assert.equal((await db.prune()).results, 1, 'the refused calls swept nothing');
  } finally {
    await db.close();
  }
});
