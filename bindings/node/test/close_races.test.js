'use strict';
// close() racing the waits and the calls on the libuv pool (the class of the Python
// binding's close-during-wait segfault): no core object may be freed while a call
// still uses it, every wait ends (ClosedError or its result), and nothing opened
// while close() runs is left open after it. Each stress runs in a child process, so
// that a crash or an abort fails the test instead of taking the runner down.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const path = require('path');
const tocsin = require('..');
const { tmpdb, run, holdWriteLock } = require('./helpers');

const PKG = path.resolve(__dirname, '..');

// Rounds of: a database, a wait of each kind (a lock held by another owner, a lock
// that is free but whose acquire finds the write lock taken, so that the step runs on
// the pool; a job, a result, a notification, a stream event, a wake, a worker), the
// write lock held by another connection for part of the rounds, then close() after
// 0..12 ms, and, for half the rounds, a second wait started while close() runs.
const CLOSE_RACE = String.raw`
const [pkg, file, roundsArg, seedArg] = process.argv.slice(1);
const tocsin = require(pkg);
const Better = require(require.resolve('better-sqlite3', { paths: [pkg] }));
const rounds = Number(roundsArg);
let seed = Number(seedArg);
const rnd = () => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed / 0x7fffffff; };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
(async () => {
  const setup = tocsin.open(file);
  await setup.lock('held', { ttl: 600000, owner: 'holder' }).tryAcquire();
  const jid = await setup.queue('q').enqueue(1);
  const holder = new Better(file, { timeout: 0 });
  const kinds = {
    lock: (db) => db.lock('held', { ttl: 30000, owner: 'waiter' }).acquire({ timeout: 30000 }),
    lockFree: (db) => db.lock('free' + Math.floor(rnd() * 1e9), { ttl: 30000, owner: 'waiter' }).acquire({ timeout: 30000 }),
    jobs: (db) => db.queue('empty').jobs('w')[Symbol.asyncIterator]().next(),
    waitResult: (db) => db.waitResult(jid, { timeout: 30000 }),
    listen: (db) => db.listen('c').get({ timeout: 30000 }),
    subscribe: (db) => db.stream('s').subscribe({ consumer: 'c' }).get({ timeout: 30000 }),
    wake: (db) => db.subscribe().wait({ timeout: 30000 }),
    worker: (db) => new tocsin.Worker(db, { queues: ['empty'], shutdownTimeout: 100 }).run(),
  };
  const names = Object.keys(kinds);
  const seen = { ok: 0, closed: 0 };
  const start = (kind, db) => {
    try { return Promise.resolve(kinds[kind](db)).then(() => 'ok', (e) => e); } catch (e) { return Promise.resolve(e); }
  };
  for (let i = 0; i < rounds; i++) {
    // the lock waits (the Python crash) for half the rounds, then every kind in turn
    const kind = i < rounds / 2 ? (i % 2 ? 'lock' : 'lockFree') : names[i % names.length];
    const db = tocsin.open(file, { busyTimeout: 50 });
    // (a worker registers its tasks on the main thread: not under a held write lock)
    const contend = kind !== 'worker' && rnd() < 0.6;
    if (contend) holder.exec('BEGIN IMMEDIATE');
    const release = contend ? setTimeout(() => { try { holder.exec('COMMIT'); } catch (_) {} }, Math.floor(rnd() * 15)) : null;
    if (rnd() < 0.3) db.listen('x'); // one more thing to close: close() awaits
    const waits = [[kind, start(kind, db)]];
    await sleep(Math.floor(rnd() * 13));
    const closing = db.close();
    if (rnd() < 0.5) {
      const late = names[Math.floor(rnd() * names.length)];
      waits.push([late + ' (started during close)', start(late, db)]);
    }
    await closing;
    if (release) { clearTimeout(release); try { holder.exec('COMMIT'); } catch (_) {} }
    for (const [what, p] of waits) {
      let timer;
      const r = await Promise.race([p, new Promise((res) => { timer = setTimeout(res, 10000, 'HANG'); })]);
      clearTimeout(timer);
      if (r === 'HANG') { console.error('round ' + i + ': a ' + what + ' wait outlived db.close()'); process.exit(2); }
      if (r === 'ok') seen.ok++;
      else if (r instanceof tocsin.ClosedError) seen.closed++;
      else { console.error('round ' + i + ': a ' + what + ' wait ended with', r); process.exit(3); }
    }
  }
  holder.close();
  await setup.close();
  console.log('ok', rounds, JSON.stringify(seen));
})().catch((e) => { console.error(e); process.exit(4); });
`;

test('close() while waits of every kind are in flight (and some start during it): no crash, every wait ends', async () => {
  for (const seed of [7, 11]) {
    const r = await run(process.execPath, ['-e', CLOSE_RACE, PKG, tmpdb(), '160', String(seed)]);
    assert.equal(r.signal, null, `the child died of ${r.signal}: ${r.stderr.slice(-3000)}`);
    assert.equal(r.code, 0, r.stderr.slice(-3000));
    const m = /^ok 160 (\{.*\})$/m.exec(r.stdout);
    assert.ok(m, r.stdout);
    const seen = JSON.parse(m[1]);
    assert.ok(seen.closed > 0 && seen.ok > 0, m[1]);
  }
});

// worker_threads: the thread is terminated with calls still running on the pool (a
// write that waits for the lock another connection holds, a lock wait's step, a worker's
// step) and waits pending. Node completes those calls while it tears the thread's
// environment down, when no JS can run: a completion that settled its promise (or made
// its error) then was a fatal error that aborted the whole process.
const TERMINATE_RACE = String.raw`
const [pkg, file, roundsArg] = process.argv.slice(1);
const { Worker } = require('worker_threads');
const tocsin = require(pkg);
const Better = require(require.resolve('better-sqlite3', { paths: [pkg] }));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const src = 'const { parentPort, workerData: d } = require("worker_threads");' +
  'const tocsin = require(d.pkg);' +
  'const db = tocsin.open(d.file, { busyTimeout: 150 });' +
  'const all = [];' +
  'if (d.kind === "lock") all.push(db.lock("free" + Math.random(), { owner: "w" }).acquire({ timeout: 30000 }));' +
  'if (d.kind === "enqueue") { all.push(db.queue("x").enqueue(1)); all.push(db.subscribe().wait({ timeout: 30000 })); }' +
  'if (d.kind === "worker") { db.queue("wq").task("t", () => 1); all.push(new tocsin.Worker(db, { queues: ["wq"] }).run()); }' +
  'if (d.kind === "listen") { all.push(db.listen("c").get({ timeout: 30000 })); all.push(db.queue("x").enqueue(2)); }' +
  'for (const p of all) Promise.resolve(p).catch(() => {});' +
  'parentPort.postMessage("started");' +
  'if (d.exitIn >= 0) setTimeout(() => process.exit(0), d.exitIn);';
(async () => {
  const setup = tocsin.open(file);
  await setup.queue('wq').enqueue('{}');
  const holder = new Better(file, { timeout: 0 });
  const kinds = ['lock', 'enqueue', 'worker', 'listen'];
  for (let i = 0; i < Number(roundsArg); i++) {
    const kind = kinds[i % kinds.length];
    const contend = kind !== 'worker';
    if (contend) holder.exec('BEGIN IMMEDIATE');
    const w = new Worker(src, { eval: true, workerData: { pkg, file, kind, exitIn: i % 3 === 0 ? i % 13 : -1 } });
    await new Promise((r, j) => { w.once('message', r); w.once('error', j); w.once('exit', r); });
    await sleep(i % 13);
    if (kind === 'worker') setup.queue('wq').enqueue('{}').catch(() => {});
    await w.terminate();
    if (contend) holder.exec('COMMIT');
  }
  holder.close();
  await setup.close();
  console.log('ok', roundsArg);
})().catch((e) => { console.error(e); process.exit(4); });
`;

test('a worker_threads Worker terminated with calls on the pool and waits pending: the process lives on', async () => {
  const r = await run(process.execPath, ['-e', TERMINATE_RACE, PKG, tmpdb(), '24']);
  assert.equal(r.signal, null, `the process died of ${r.signal}: ${r.stderr.slice(-3000)}`);
  assert.equal(r.code, 0, r.stderr.slice(-3000));
  assert.match(r.stdout, /^ok 24$/m);
});

test('process.exit() with a call on the pool and a wait pending exits with its code', async () => {
  const script = String.raw`
    const [pkg, file] = process.argv.slice(1);
    const tocsin = require(pkg);
    const Better = require(require.resolve('better-sqlite3', { paths: [pkg] }));
    const holder = new Better(file, { timeout: 0 });
    const db = tocsin.open(file, { busyTimeout: 300 });
    db.queue('x').enqueue(0).then(() => {
      holder.exec('BEGIN IMMEDIATE');
      db.lock('free', { owner: 'w' }).acquire().catch(() => {});
      db.queue('x').enqueue(1).catch(() => {});
      db.listen('c').get().catch(() => {});
      setTimeout(() => process.exit(7), 5);
    });`;
  const r = await run(process.execPath, ['-e', script, PKG, tmpdb()]);
  assert.equal(r.signal, null, r.stderr);
  assert.equal(r.code, 7, r.stderr);
});

test('what is opened while close() runs is refused with ClosedError, not left open after it', async () => {
  const db = tocsin.open(tmpdb());
  const first = db.listen('a'); // close() has something to close: it awaits
  const closing = db.close();
  const refused = (f) => assert.throws(f, (e) => e instanceof tocsin.ClosedError, String(f));
  refused(() => db.listen('b'));
  refused(() => db.subscribe());
  refused(() => db.stream('t').subscribe({ consumer: 'c' }));
  const later = [
    db.waitResult(1, { timeout: 30000 }),
    db.lock('l').acquire({ timeout: 30000 }),
    db.queue('q').wait({ timeout: 30000 }),
    new tocsin.Worker(db, { queues: ['q'] }).run(),
  ];
  for (const p of later) await assert.rejects(p, tocsin.ClosedError);
  await closing;
  assert.equal(first.closed, true);
  assert.equal(db.closed, true);
});

// A call on the pool waiting for the write lock (another connection's transaction
// holds it; busyTimeout 60 s) kept close() waiting until that timeout ran out: now the
// call rejects with ClosedError and close() resolves.
test('close() ends a pool call waiting for the write lock with ClosedError, not at its busy timeout', async () => {
  const file = tmpdb('busy_close.db');
  const db = tocsin.open(file, { busyTimeout: 60000 });
  await db.queue('q').enqueue(1);
  const other = tocsin.open(file);
  const release = await holdWriteLock(other, 0);
  const waiting = db.queue('q').enqueue(2).then(() => 'enqueued', (e) => e);
  await new Promise((r) => setTimeout(r, 100)); // on the pool, in its lock wait
  const closed = db.close();
  const outcome = await Promise.race([waiting,
    new Promise((r) => setTimeout(() => r('still waiting after 30 s'), 30000).unref())]);
  assert.ok(outcome instanceof tocsin.ClosedError, String(outcome));
  await closed;
  await release();
  assert.equal((await other.queue('q').stats()).pending, 2);
  await other.close();
});
