'use strict';
const { test } = require('node:test');
const assert = require('node:assert/strict');
const path = require('path');
const tocsin = require('..');
const { tmpdb, spawnUntil, run } = require('./helpers');

// Another process holds the write lock for 2 s (Python's sqlite3, plain SQL).
const HOLDER = `
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
c.execute('BEGIN IMMEDIATE')
c.execute("INSERT INTO _tocsin_meta(key, value) VALUES ('lock-holder', 'x') ON CONFLICT(key) DO UPDATE SET value = 'y'")
print('locked', flush=True)
time.sleep(float(sys.argv[2]))
c.execute('COMMIT')
print('released', flush=True)
`;

test('the event loop keeps turning while another process holds the write lock and 100 listeners wait', async () => {
  const file = tmpdb();
  const db = tocsin.open(file);
  const q = db.queue('loop');
  await q.enqueue('warm');
  const listeners = [];
  const heard = [];
  for (let i = 0; i < 100; i++) {
    const l = db.listen('loop-ch');
    listeners.push(l);
    heard.push(l.get({ timeout: 30000 }));
  }
  let last = Date.now();
  let maxGap = 0;
  const tick = setInterval(() => { const now = Date.now(); maxGap = Math.max(maxGap, now - last); last = now; }, 10);
  try {
    const holder = await spawnUntil('python3', ['-c', HOLDER, file, '2'], 'locked');
    last = Date.now();
    maxGap = 0;
    const t0 = Date.now();
    // contended writes: they wait off the main thread
    const writes = [q.enqueue('during'), q.claim('w'), db.notify('loop-ch', 'after the lock'), db.transaction(async (tx) => q.enqueue('tx', { tx }))];
    const out = await Promise.all(writes);
    const waited = Date.now() - t0;
    await holder.closed;
    assert.ok(waited >= 1000, `the writes waited for the lock (${waited} ms)`);
    assert.equal(typeof out[0], 'number');
    const got = await Promise.all(heard);
    assert.equal(got.length, 100);
    for (const batch of got) assert.equal(batch[0].payload, 'after the lock');
    assert.ok(maxGap < 200, `the longest gap between 10 ms ticks was ${maxGap} ms`);
  } finally {
    clearInterval(tick);
    for (const l of listeners) l.close();
    await db.close();
  }
});

test('memory: 100k enqueue/claim/ack keep RSS bounded after GC', async () => {
  const script = `
    const tocsin = require(${JSON.stringify(path.resolve(__dirname, '..'))});
    (async () => {
      const db = tocsin.open(process.argv[1]);
      const q = db.queue('mem');
      const round = async (n) => {
        for (let i = 0; i < n; i++) {
          await q.enqueue({ i, pad: 'x'.repeat(100) }, { meta: { i } });
          const j = await q.claim('w');
          if (!(await j.ack())) throw new Error('ack failed');
        }
      };
      await round(20000);
      global.gc(); global.gc();
      const base = process.memoryUsage().rss;
      await round(80000);
      global.gc(); global.gc();
      const end = process.memoryUsage().rss;
      const st = await q.stats();
      console.log(JSON.stringify({ base, end, pending: st.pending, processing: st.processing }));
      await db.close();
    })().catch((e) => { console.error(e); process.exit(1); });
  `;
  const r = await run(process.execPath, ['--expose-gc', '-e', script, tmpdb()]);
  assert.equal(r.code, 0, r.stderr);
  const m = JSON.parse(r.stdout.trim().split('\n').pop());
  assert.equal(m.pending, 0);
  assert.equal(m.processing, 0);
  const growth = (m.end - m.base) / (1024 * 1024);
  assert.ok(growth < 24, `RSS grew by ${growth.toFixed(1)} MiB over 80k jobs after GC`);
});

test('databases dropped without close() are collected as the loop turns: V8 is told what they hold natively', async () => {
  // without the report V8 sees only the small wrappers: none of 2,000 was collected
  // during the loop, and RSS passed 800 MB
  const script = `
    const tocsin = require(${JSON.stringify(path.resolve(__dirname, '..'))});
    (async () => {
      let collected = 0;
      const reg = new FinalizationRegistry(() => { collected++; });
      for (let i = 0; i < 2000; i++) {
        reg.register(tocsin.open(process.argv[1]), i);
        if (i % 10 === 9) await new Promise(setImmediate);
      }
      console.log(JSON.stringify({ collected }));
    })().catch((e) => { console.error(e); process.exit(1); });
  `;
  const r = await run(process.execPath, ['-e', script, tmpdb()]);
  assert.equal(r.code, 0, r.stderr);
  const m = JSON.parse(r.stdout.trim().split('\n').pop());
  assert.ok(m.collected >= 1000, `only ${m.collected} of 2000 dropped databases were collected during the loop`);
});

test('a closed poller releases its native async context at close, not when it is collected', async () => {
  // Each Poller (the native object behind every wait) had an async context (napi_async_init:
  // ~100 bytes of native memory, a resource object and a handle) that lived until the JS
  // object was garbage collected: a closed Poller still referenced (or not collected yet)
  // held ~300 bytes. Its async hooks show when the context ends: at close now.
  const asyncHooks = require('async_hooks');
  const { native } = tocsin._internal;
  const live = new Set();
  let made = 0;
  const hook = asyncHooks.createHook({
    init(id, type) { if (type === 'tocsin.poll') { live.add(id); made++; } },
    destroy(id) { live.delete(id); },
  }).enable();
  const db = tocsin.open(tmpdb());
  const sub = native.subOpen(db._h);
  const kept = [];
  try {
    for (let i = 0; i < 200; i++) {
      const p = new native.Poller(sub.fd(), () => {});
      p.start();
      p.close();
      kept.push(p); // still referenced: never collected during the test
    }
    const l = db.listen('poll-ctx');
    for (let i = 0; i < 50; i++) {
      await assert.rejects(l.get({ timeout: 0 }), (e) => e instanceof tocsin.TimeoutError);
      await assert.rejects(db.queue('poll-ctx').wait({ timeout: 0 }), (e) => e instanceof tocsin.TimeoutError);
    }
    l.close();
    for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r)); // destroy hooks run on an immediate
    assert.ok(made >= 300, `${made} pollers made`);
    assert.equal(live.size, 0, `${live.size} of ${made} closed pollers still hold their async context`);
    assert.equal(kept.length, 200);
  } finally {
    hook.disable();
    sub.close();
    await db.close();
  }
});
