'use strict';
// Regression tests of a second adversarial review (worker_threads, option keys, ...).
const { test } = require('node:test');
const assert = require('node:assert/strict');
const path = require('path');
const tocsin = require('..');
const { tmpdb, run } = require('./helpers');

const invalid = (re) => (e) => e instanceof tocsin.InvalidArgumentError && re.test(e.message);

test('a worker_threads Worker using tocsin does not break the main thread after it exits', async () => {
  const file = tmpdb();
  // a child process: a crash there (the addon's references of the exited thread) fails this test
  const script = `
    const { Worker } = require('worker_threads');
    const tocsin = require(${JSON.stringify(path.resolve(__dirname, '..'))});
    (async () => {
      const db = tocsin.open(process.argv[1]);
      await db.queue('wt').enqueue('main');
      const w = new Worker(\`
        const tocsin = require(\${JSON.stringify(${JSON.stringify(path.resolve(__dirname, '..'))})});
        (async () => {
          const db = tocsin.open(\${JSON.stringify(process.argv[1])});
          await db.queue('wt').enqueue('thread');
          await db.queue('wt').enqueue(1, { priority: 'x' }).catch((e) => { if (!(e instanceof tocsin.InvalidArgumentError)) throw e; });
          await db.close();
        })();\`, { eval: true });
      await new Promise((r, j) => { w.on('exit', r); w.on('error', j); });
      const e = await db.queue('wt').enqueue(1, { priority: 'x' }).catch((x) => x);
      if (!(e instanceof tocsin.InvalidArgumentError)) throw new Error('wrong error: ' + e);
      const t = new tocsin.Worker(db, { queues: ['wt2'] });
      db.queue('wt2').task('noop', () => 1);
      const running = t.run();
      await t.stop();
      await running;
      console.log('pending', (await db.queue('wt').stats()).pending);
      await db.close();
    })().catch((e) => { console.error(e); process.exit(3); });
  `;
  const r = await run(process.execPath, ['-e', script, file]);
  assert.equal(r.signal, null, `the process died of ${r.signal}: ${r.stderr}`);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /pending 2/);
});

test('close() during a transaction rolls it back: nothing it wrote is committed after close', async () => {
  const file = tmpdb();
  const db = tocsin.open(file);
  const q = db.queue('tx-close');
  let resume;
  const gate = new Promise((r) => { resume = r; });
  const inTx = db.transaction(async (tx) => {
    await q.enqueue(1, { tx });
    await gate;
    await q.enqueue(2, { tx });
  });
  const outcome = inTx.then(() => 'committed', (e) => e);
  await new Promise((r) => setImmediate(r));
  await db.close();
  resume();
  const e = await outcome;
  assert.ok(e instanceof tocsin.ClosedError, String(e));
  const after = tocsin.open(file);
  try {
    assert.equal((await after.queue('tx-close').stats()).pending, 0, 'the transaction was rolled back');
  } finally {
    await after.close();
  }
});

test('close() during a transaction that never touches tocsin again: transaction() rejects with ClosedError', async () => {
  const db = tocsin.open(tmpdb());
  let resume;
  const gate = new Promise((r) => { resume = r; });
  const p = db.transaction(async (tx) => { tx.exec('CREATE TABLE t(x)'); await gate; return 'done'; }).catch((e) => e);
  await new Promise((r) => setImmediate(r));
  await db.close();
  resume();
  const e = await p;
  assert.ok(e instanceof tocsin.ClosedError && /closed during the transaction/.test(e.message), String(e));
});

test('SQL helpers on the app connection raise the error class of the native calls', async () => {
  const Better = require('better-sqlite3');
  const file = tmpdb();
  const db = tocsin.open(file);
  const app = new Better(file);
  try {
    assert.throws(() => tocsin.enqueueSql(app, 'sql-err', 'x'.repeat(2 * 1024 * 1024)), (e) => e instanceof tocsin.TooBigError);
    assert.throws(() => tocsin.enqueueSql(app, '', 1), invalid(/queue name must not be empty/));
    assert.throws(() => tocsin.publishSql(app, 't', 1, { key: 5 }), invalid(/key must be a string/));
    assert.equal((await db.stream('t').read()).length, 0, 'nothing was published');
  } finally {
    app.close();
  }
  assert.throws(() => tocsin.enqueueSql(app, 'sql-err', 1), (e) => e instanceof tocsin.ClosedError);
  const fresh = new Better(file);
  fresh.close();
  assert.throws(() => tocsin.load(fresh), (e) => e instanceof tocsin.ClosedError);
  await db.close();
});

test('publishMany([]) publishes nothing, like enqueueMany([])', async () => {
  const db = tocsin.open(tmpdb());
  try {
    assert.deepEqual(await db.stream('empty').publishMany([]), []);
    await assert.rejects(db.stream('empty').publishMany([], { keys: ['a'] }), invalid(/one key per payload/));
    assert.deepEqual(await db.queue('empty').enqueueMany([]), []);
  } finally {
    await db.close();
  }
});

test('a handler whose value cannot be serialised emits failed, not done', async () => {
  const db = tocsin.open(tmpdb());
  const q = db.queue('ser');
  const bad = q.task('bad', () => new Map([[1, 2]]), { retries: 0 });
  const w = new tocsin.Worker(db, { queues: ['ser'] });
  const seen = [];
  w.on('done', () => seen.push('done'));
  w.on('failed', (_ctx, e) => seen.push(`failed: ${e.message}`));
  const running = w.run();
  const h = await bad();
  await assert.rejects(h.result({ timeout: 10000 }), (e) => e instanceof tocsin.TaskError && e.type === 'SerializationError');
  await w.stop();
  await running;
  assert.equal(seen.length, 1);
  assert.match(seen[0], /^failed: the return value is not a JSON value: it holds a Map/);
  await db.close();
});

test('an unknown option key is refused before anything is written ({ dealy } does not enqueue a job to run now)', async () => {
  const file = tmpdb();
  assert.throws(() => tocsin.open(file, { busyTimout: 10 }), invalid(/unknown option "busyTimout" in tocsin\.open\(\) options/));
  const db = tocsin.open(file);
  try {
    const q = db.queue('keys');
    await assert.rejects(q.enqueue(1, { dealy: 5000 }), invalid(/unknown option "dealy" in queue\.enqueue\(\) options \(known: .*delay/));
    await assert.rejects(q.enqueue(1, [5000]), invalid(/options must be an object/));
    await assert.rejects(q.enqueueMany([{ payload: 1 }, { payload: 2, prio: 3 }]), invalid(/unknown option "prio" in jobs\[1\]/));
    await assert.rejects(db.schedule('s', '* * * * *', 'keys', 1, { maxAttempt: 3 }), invalid(/unknown option "maxAttempt" in db\.schedule\(\) options/));
    await assert.rejects(db.stream('keys').publish(1, { keys: 'a' }), invalid(/unknown option "keys"/));
    assert.throws(() => q.task('t', () => 1, { retry: 3 }), invalid(/unknown option "retry" in queue\.task\(\) options/));
    await assert.rejects(q.call('t', [], { kwarg: {} }), invalid(/unknown option "kwarg" in queue\.call\(\) options/));
    assert.throws(() => new tocsin.Worker(db, { queues: ['keys'], concurency: 4 }), invalid(/unknown option "concurency" in new Worker\(\) options/));
    assert.throws(() => tocsin.enqueueSql({ loadExtension() {}, prepare() {} }, 'keys', 1, { tx: null }), invalid(/unknown option "tx"/));
    assert.equal((await q.stats()).pending, 0, 'nothing was enqueued');
    assert.equal((await db.stream('keys').read()).length, 0, 'nothing was published');
    assert.deepEqual(await db.schedules(), []);
    // the documented keys all pass
    const id = await q.enqueue(1, { priority: 1, delay: 0, maxAttempts: 2, expires: 60000, uniqueKey: 'u', meta: { a: 1 } });
    const job = await q.claim('w', { visibility: 1000 });
    assert.equal(job.id, id);
    assert.equal(await job.heartbeat({ extend: 1000 }), true);
    assert.equal(await job.retry({ delay: 0, error: 'e' }), true);
  } finally {
    await db.close();
  }
});

test('a finished wait is garbage: its descriptor poller does not keep the wait (closure, timers, signal) alive', async () => {
  const v8 = require('v8');
  const vm = require('vm');
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc');
  const db = tocsin.open(tmpdb());
  try {
    const refs = [];
    const one = async () => {
      const ac = new AbortController();
      refs.push(new WeakRef(ac.signal));
      await assert.rejects(db.queue('gc').wait({ timeout: 0, signal: ac.signal }), (e) => e instanceof tocsin.TimeoutError);
      const l = db.listen('gc');
      await assert.rejects(l.get({ timeout: 0, signal: ac.signal }), (e) => e instanceof tocsin.TimeoutError);
      l.close();
    };
    for (let i = 0; i < 20; i++) await one();
    for (let i = 0; i < 5 && refs.some((r) => r.deref() !== undefined); i++) {
      await new Promise((r) => setImmediate(r));
      gc();
    }
    assert.equal(refs.filter((r) => r.deref() !== undefined).length, 0, 'every wait was collected');
  } finally {
    await db.close();
  }
});

test('tocsin-worker exits after SIGTERM even when a handler ignores its signal past --shutdown-timeout', { timeout: 60000 }, async () => {
  const fs = require('fs');
  const { spawnUntil, tmpdir } = require('./helpers');
  const dir = tmpdir();
  const file = path.join(dir, 'bin.db');
  const jobs = path.join(dir, 'jobs.js');
  fs.writeFileSync(jobs, `
    const tocsin = require(${JSON.stringify(path.resolve(__dirname, '..'))});
    const db = tocsin.open(${JSON.stringify(file)});
    db.queue('bin').task('stubborn', async () => {
      console.log('running');
      await new Promise((r) => setTimeout(r, 600000)); // ignores currentJob().signal
    });
    module.exports = db;
  `);
  const db = tocsin.open(file);
  try {
    const h = await db.queue('bin').call('stubborn', []);
    const child = await spawnUntil(process.execPath, [path.join(__dirname, '..', 'bin', 'tocsin-worker.js'), jobs,
      '--queue', 'bin', '--shutdown-timeout', '100'], 'running');
    child.kill('SIGTERM');
    const code = await child.closed;
    assert.equal(code, 0);
    const job = await db.queue('bin').get(h.id);
    assert.equal(job.state, 'pending', 'handed back, not lost');
    assert.equal(await db.result(h.id), null);
  } finally {
    await db.close();
  }
});

test('flags are booleans: a string such as "no" is refused, not read as true', async () => {
  const file = tmpdb();
  assert.throws(() => tocsin.open(file, { readOnly: 'no' }), invalid(/readOnly must be a boolean/));
  const db = tocsin.open(file);
  try {
    await db.stream('flags').publish(1);
    await assert.rejects(db.stream('flags').trim({ maxCount: 1, belowConsumers: 'no' }), invalid(/belowConsumers must be a boolean/));
    assert.throws(() => tocsin.cronNext('* * * * *', 0, { localTime: 1 }), invalid(/localTime must be a boolean/));
    assert.throws(() => db.queue('flags').task('t', () => 1, { transactional: 'yes' }), invalid(/transactional must be a boolean/));
    assert.throws(() => new tocsin.Worker(db, { queues: ['flags'], scheduler: 'false' }), invalid(/scheduler must be a boolean/));
    const w2 = new tocsin.Worker(db, { queues: ['flags'] });
    await assert.rejects(w2.run({ handleSignals: 'yes' }), invalid(/handleSignals must be a boolean/));
    assert.equal((await db.stream('flags').read()).length, 1, 'the refused trim trimmed nothing');
  } finally {
    await db.close();
  }
});

test('db.exec() is a Promise whether or not the file is locked: an error rejects, it never throws only sometimes', async () => {
  const db = tocsin.open(tmpdb());
  try {
    const p = db.exec('CREATE TABLE t(x)');
    assert.ok(p instanceof Promise);
    await p;
    await assert.rejects(db.exec('SELEC 1'), (e) => e instanceof tocsin.SQLiteError && /syntax error/.test(e.message));
    await assert.rejects(db.exec(42), invalid(/sql must be a string/));
    await db.transaction(async (tx) => { tx.exec('INSERT INTO t VALUES (1)'); await db.exec('INSERT INTO t VALUES (2)', { tx }); });
  } finally {
    await db.close();
  }
});

test('a schedule that cannot fire stops neither the worker leading the scheduler nor its jobs', async () => {
  const db = tocsin.open(tmpdb());
  const q = db.queue('dmg');
  const add = q.task('dmg-add', async (a, b) => a + b);
  await db.schedule('broken', '* * * * *', 'dmg', 1);
  await db.exec("UPDATE _tocsin_schedules SET cron = 'bogus', next_fire = 0 WHERE name = 'broken'");
  const w = new tocsin.Worker(db, { queues: ['dmg'], scheduler: true });
  const warnings = [];
  w.on('warning', (e) => warnings.push(e));
  const running = w.run();
  const h = await add(2, 3);
  assert.equal(await h.result({ timeout: 20000 }), 5);
  const h2 = await add(4, 5);
  assert.equal(await h2.result({ timeout: 20000 }), 9);
  assert.ok(warnings.some((e) => /schedule broken/.test(e.message)), 'the schedule is named in a warning');
  await w.stop();
  await running; // resolves: not ended by the schedule's error
  await db.close();
});
