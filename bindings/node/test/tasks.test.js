'use strict';
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert/strict');
const path = require('path');
const tocsin = require('..');
const { tmpdb, python, run, spawnUntil, sleep, ROOT } = require('./helpers');

const BIN = path.join(ROOT, 'bin', 'tocsin-worker.js');
const JOBS = path.join(__dirname, 'fixtures', 'jobs.js');

describe('tasks in one process', () => {
  let db;
  let worker;
  let running;
  let q;
  const calls = {};
  before(async () => {
    db = tocsin.open(tmpdb());
    q = db.queue('t1');
    calls.add = q.task('add', async (a, b, kw) => ({ sum: a + b, kw: kw || null, job: tocsin.currentJob().attempt }));
    calls.flaky = q.task('flaky', async () => {
      const j = tocsin.currentJob();
      if (j.attempt < 2) throw new TypeError(`attempt ${j.attempt}`);
      return j.attempt;
    }, { retries: 2, backoffBase: 1, backoffCap: 2 });
    calls.bad = q.task('bad', async () => { throw new RangeError('out of range'); }, { retries: 0 });
    calls.slow = q.task('slow', (ms) => new Promise((r) => setTimeout(r, ms)), { timeout: 50, retries: 0 });
    calls.cyclic = q.task('cyclic', async () => { const o = {}; o.o = o; return o; });
    // CPU-bound past its timeout: no timer can interrupt it, it returns late
    calls.cpu = q.task('cpu', (ms) => { const end = Date.now() + ms; while (Date.now() < end); return 'late'; },
      { timeout: 50, retries: 0 });
    calls.meta = q.task('meta', async () => tocsin.currentJob().meta);
    await db.exec('CREATE TABLE effects(job INTEGER PRIMARY KEY)');
    calls.tx = q.task('tx', async (n) => {
      const { tx, jobId } = tocsin.currentJob();
      tx.exec(`INSERT INTO effects(job) VALUES (${jobId})`);
      return n;
    }, { transactional: true });
    worker = new tocsin.Worker(db, { queues: ['t1'], concurrency: 4 });
    running = worker.run();
  });
  after(async () => { await worker.stop(); await running; await db.close(); });

  test('a call enqueues; result() waits for the value', async () => {
    const h = await calls.add(2, 3);
    assert.equal(typeof h.id, 'number');
    assert.deepEqual(await h.result({ timeout: 10000 }), { sum: 5, kw: null, job: 1 });
    const h2 = await calls.add.enqueue({ args: [1, 1], kwargs: { x: 1 } });
    assert.deepEqual(await h2.result({ timeout: 10000 }), { sum: 2, kw: { x: 1 }, job: 1 });
  });

  test('errors: retried with the backoff, then recorded as data (TaskError)', async () => {
    assert.equal(await (await calls.flaky()).result({ timeout: 10000 }), 2);
    const h = await calls.bad();
    await assert.rejects(h.result({ timeout: 10000 }), (e) => {
      assert.ok(e instanceof tocsin.TaskError);
      assert.equal(e.type, 'RangeError');
      assert.equal(e.taskMessage, 'out of range');
      assert.match(e.trace, /RangeError: out of range/);
      return true;
    });
    const t = await calls.slow(2000);
    await assert.rejects(t.result({ timeout: 10000 }), (e) => e.type === 'Timeout');
    const late = await calls.cpu(150);
    await assert.rejects(late.result({ timeout: 10000 }), (e) => e.type === 'Timeout' && /exceeded its timeout of 50 ms/.test(e.taskMessage));
    // a call by name knows nothing of the task's retries: its worker still keeps them
    const byName = await q.call('bad', [], { maxAttempts: 5 });
    await assert.rejects(byName.result({ timeout: 10000 }), (e) => e.type === 'RangeError');
    const dead = await byName.job();
    assert.equal(dead.state, 'dead');
    assert.equal(dead.attempts, 1);
    assert.equal(dead.reason, 'max_attempts');
    assert.throws(() => q.task('x', () => 1, { retries: 1000000 }), /retries must be an integer between 0 and 999999/);
    const c = await calls.cyclic();
    await assert.rejects(c.result({ timeout: 10000 }), (e) => e.type === 'SerializationError');
  });

  test('meta carries trace context to the handler', async () => {
    const h = await calls.meta.enqueue({ meta: { traceparent: '00-abc-def-01' } });
    assert.deepEqual(await h.result({ timeout: 10000 }), { traceparent: '00-abc-def-01' });
  });

  test('transactional task: its writes and its ack commit together', async () => {
    const h = await calls.tx(7);
    assert.equal(await h.result({ timeout: 10000 }), 7);
    const st = await q.stats();
    assert.equal(st.processing, 0);
  });

  test('calling by name; result() with AbortSignal and timeout', async () => {
    const h = await q.call('add', [10, 20]);
    assert.equal((await h.result({ timeout: 10000 })).sum, 30);
    const nobody = db.queue('t-nobody');
    const h2 = await nobody.call('nobody_runs_this', []);
    await assert.rejects(h2.result({ timeout: 30 }), tocsin.TimeoutError);
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 20);
    await assert.rejects(h2.result({ signal: ac.signal }), { name: 'AbortError' });
    await assert.rejects(nobody.call('', []), tocsin.InvalidArgumentError);
    await assert.rejects(nobody.call('x', 'not an array'), tocsin.InvalidArgumentError);
    assert.deepEqual(q.tasks().sort(), ['add', 'bad', 'cpu', 'cyclic', 'flaky', 'meta', 'slow', 'tx']);
  });

  test('worker concurrency: up to N handlers run at once, never more', async () => {
    const d3 = tocsin.open(tmpdb());
    const cq = d3.queue('conc');
    let active = 0;
    let peak = 0;
    const gate = [];
    cq.task('hold', async () => {
      active++;
      peak = Math.max(peak, active);
      await new Promise((r) => gate.push(r));
      active--;
      return peak;
    });
    const handles = [];
    for (let i = 0; i < 6; i++) handles.push(await cq.call('hold', []));
    const w = new tocsin.Worker(d3, { queues: ['conc'], concurrency: 3 });
    const r = w.run();
    while (active < 3) await sleep(5);
    await sleep(50);
    assert.equal(active, 3, 'three run at once');
    assert.equal(w.inFlight, 3);
    while (handles.length && (await Promise.all(handles.map((h) => h.peek()))).some((x) => !x)) {
      const open = gate.splice(0);
      for (const g of open) g();
      await sleep(5);
    }
    assert.equal(peak, 3, 'never more than the concurrency');
    await w.stop(); await r;
    await d3.close();
  });

  test('a shutdown longer than the lease keeps renewing it: nobody else claims the running job', async () => {
    const d4 = tocsin.open(tmpdb());
    const lq = d4.queue('lease');
    let release;
    const gate = new Promise((r) => { release = r; });
    let started = false;
    lq.task('held', async (n) => { started = true; await gate; return n; });
    const h = await lq.call('held', [7]);
    const w = new tocsin.Worker(d4, { queues: ['lease'], visibility: 30, shutdownTimeout: 30000 });
    const r = w.run();
    while (!started) await sleep(5);
    const stopped = w.stop();
    for (let i = 0; i < 10; i++) { // many leases long
      await sleep(30);
      assert.equal(await lq.claim('rival', { visibility: 60000 }), null, 'claimed while its handler ran');
    }
    release();
    await stopped; await r;
    assert.equal(await h.result({ timeout: 10000 }), 7);
    await d4.close();
  });

  test('cancelling a running job aborts its handler (the core reports it to the worker)', async () => {
    const d4 = tocsin.open(tmpdb());
    const cq = d4.queue('cx');
    let started;
    let sawAbort = null;
    const running = new Promise((r) => { started = r; });
    cq.task('waitcancel', async () => {
      const { signal } = tocsin.currentJob();
      started();
      await new Promise((resolve) => signal.addEventListener('abort', () => { sawAbort = signal.reason; resolve(); }, { once: true }));
      return 'stopped';
    });
    const w = new tocsin.Worker(d4, { queues: ['cx'] });
    const r = w.run();
    const h = await cq.call('waitcancel', []);
    await running;
    assert.equal(await cq.cancel(h.id), true);
    const deadline = Date.now() + 10000;
    while (!sawAbort && Date.now() < deadline) await sleep(10);
    assert.ok(sawAbort, 'the handler saw its signal abort');
    assert.equal(sawAbort.code, 'TOCSIN_LEASE_LOST');
    await w.stop(); await r;
    const job = await cq.get(h.id);
    assert.equal(job.reason, 'cancelled', 'the late outcome did not overwrite the cancellation');
    await d4.close();
  });

  test('worker: run({ signal }) stops on abort; bad options are refused', async () => {
    const ac = new AbortController();
    const w2 = new tocsin.Worker(db, { queues: ['t-abort'] });
    const r = w2.run({ signal: ac.signal });
    setTimeout(() => ac.abort(), 20);
    assert.match(w2.workerId, new RegExp(`^.+:${process.pid}:[0-9a-f]{12}$`), 'the core made its id');
    assert.notEqual(new tocsin.Worker(db, { queues: ['x'] }).workerId, w2.workerId);
    await r;
    assert.equal(w2.inFlight, 0);
    assert.equal(new tocsin.Worker(db, { queues: ['x'], workerId: 'w-7' }).workerId, 'w-7');
    assert.throws(() => new tocsin.Worker(db, { queues: [] }), tocsin.InvalidArgumentError);
    assert.throws(() => new tocsin.Worker({}, { queues: ['x'] }), tocsin.InvalidArgumentError);
    assert.throws(() => new tocsin.Worker(db, { queues: ['x'], concurrency: -1 }).run(), tocsin.InvalidArgumentError);
    // a refused queue name is refused by the constructor (as in Python and Go), not at run()
    assert.throws(() => new tocsin.Worker(db, { queues: [''] }), tocsin.InvalidArgumentError);
    assert.throws(() => q.task('', async () => 1), tocsin.InvalidArgumentError);
    assert.throws(() => q.task('x', 'not a function'), tocsin.InvalidArgumentError);
  });

  test('periodic tasks fire through the worker scheduler', async () => {
    const d2 = tocsin.open(tmpdb());
    const pq = d2.queue('per');
    let fired = 0;
    pq.task('tick', async () => { fired++; return fired; });
    const next = await pq.periodic('@every 1s', 'tick', { args: [] });
    assert.ok(next > Date.now() - 1000);
    assert.equal((await d2.getSchedule('tick')).queue, 'per');
    const w = new tocsin.Worker(d2, { queues: ['per'], scheduler: true, schedulerTtl: 3000 });
    const r = w.run();
    const deadline = Date.now() + 8000;
    while (fired === 0 && Date.now() < deadline) await sleep(50);
    await w.stop(); await r;
    assert.ok(fired >= 1, 'the schedule fired');
    await d2.close();
  });
});

describe('tasks across processes', () => {
  test('a tocsin-worker child runs what this process calls', async () => {
    const file = tmpdb();
    const db = tocsin.open(file);
    const q = db.queue('node-tasks');
    const child = await spawnUntil(process.execPath, [BIN, JOBS, '--queue', 'node-tasks', '--concurrency', '2'],
      'worker.start', { env: { ...process.env, TOCSIN_DB: file } });
    try {
      const h = await q.call('node_mul', [6, 7]);
      assert.equal(await h.result({ timeout: 15000 }), 42);
      const m = await q.call('meta', [], { meta: { traceparent: 'tp-1' } });
      assert.deepEqual(await m.result({ timeout: 15000 }), { traceparent: 'tp-1' });
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.on('close', r));
      await db.close();
    }
  });

  test('SIGTERM mid-job loses nothing: the running job finishes, the rest stay queued', async () => {
    const file = tmpdb();
    const db = tocsin.open(file);
    const q = db.queue('node-tasks');
    const handles = [];
    for (let i = 0; i < 4; i++) handles.push(await q.call('slow', [400, i]));
    const child = await spawnUntil(process.execPath, [BIN, JOBS, '--queue', 'node-tasks'],
      'slow.start', { env: { ...process.env, TOCSIN_DB: file } });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    child.kill('SIGTERM');
    const code = await new Promise((r) => child.on('close', r));
    assert.equal(code, 0, out);
    const done = (await Promise.all(handles.map((h) => h.peek()))).filter(Boolean);
    assert.equal(done.length, 1, 'the job running at SIGTERM completed before exit');
    const st = await q.stats();
    assert.equal(st.pending + st.scheduled, 3, 'the others are still queued');
    assert.equal(st.processing, 0, 'nothing is left leased');

    // a hard deadline: the running job is handed back (no attempt consumed)
    const c2 = await spawnUntil(process.execPath, [BIN, JOBS, '--queue', 'node-tasks', '--shutdown-timeout', '10'],
      'slow.start', { env: { ...process.env, TOCSIN_DB: file } });
    c2.kill('SIGTERM');
    assert.equal(await new Promise((r) => c2.on('close', r)), 0);
    const st2 = await q.stats();
    assert.equal(st2.processing, 0);
    assert.equal(st2.pending + st2.scheduled, 3, 'the interrupted job went back to the queue');

    // another worker finishes them all
    const c3 = await spawnUntil(process.execPath, [BIN, JOBS, '--queue', 'node-tasks', '--concurrency', '4'],
      'worker.start', { env: { ...process.env, TOCSIN_DB: file } });
    try {
      const values = await Promise.all(handles.map((h) => h.result({ timeout: 20000 })));
      assert.deepEqual(values.map((v) => v.tag).sort(), [0, 1, 2, 3]);
      for (const h of handles) {
        const r = await h.peek();
        assert.equal(r.ok, true);
      }
    } finally {
      c3.kill('SIGTERM');
      await new Promise((r) => c3.on('close', r));
      await db.close();
    }
  });
});

describe('tasks across runtimes', { skip: python() ? false : 'no Python venv (make python-venv)' }, () => {
  test('a Python worker runs a task this Node process calls', async () => {
    const file = tmpdb();
    const db = tocsin.open(file);
    const q = db.queue('py-tasks');
    const fixtures = path.join(__dirname, 'fixtures');
    const env = { ...process.env, TOCSIN_DB: file, PYTHONPATH: fixtures };
    const child = await spawnUntil(python(), ['-u', '-m', 'tocsin', 'worker', 'py_jobs:db', '--queue', 'py-tasks'], 'worker.start', { env, cwd: fixtures });
    try {
      const h = await q.call('py_add', [2, 3], { kwargs: { scale: 10 } });
      assert.equal(await h.result({ timeout: 20000 }), 50);
      const f = await q.call('py_fail', []);
      await assert.rejects(f.result({ timeout: 20000 }), (e) => e instanceof tocsin.TaskError && e.type === 'ValueError' && /python says no/.test(e.taskMessage));
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.on('close', r));
      await db.close();
    }
  });

  test('a Node worker runs a task a Python process calls', async () => {
    const file = tmpdb();
    const child = await spawnUntil(process.execPath, [BIN, JOBS, '--queue', 'node-tasks'], 'worker.start',
      { env: { ...process.env, TOCSIN_DB: file } });
    try {
      const r = await run(python(), [path.join(__dirname, 'fixtures', 'py_call.py'), 'node-tasks', 'node_mul', '[5, 9]'],
        { env: { ...process.env, TOCSIN_DB: file } });
      assert.equal(r.code, 0, r.stderr);
      assert.equal(JSON.parse(r.stdout.trim()), 45);
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.on('close', r));
    }
  });
});
