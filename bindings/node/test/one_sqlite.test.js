'use strict';
// One SQLite per process (../../shared design §2, docs/architecture.md "Node"):
// tocsin runs on better-sqlite3's SQLite, so the app's connections and tocsin's
// share one copy (one table of POSIX locks per file). Proven here in one
// process, with a child probing the locks from outside (F_GETLK).
const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const path = require('path');
const Better = require('better-sqlite3');
const tocsin = require('..');
const { tmpdb, tmpdir, run } = require('./helpers');

const PROBE = `
import fcntl, os, struct, sys
path, start = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDWR)
req = struct.pack('hhqqi', fcntl.F_WRLCK, os.SEEK_SET, start, 1, 0)
res = fcntl.fcntl(fd, fcntl.F_GETLK, req)
l_type, _, _, _, pid = struct.unpack('hhqqi', res)
print({fcntl.F_UNLCK: 'unlocked', fcntl.F_RDLCK: 'read', fcntl.F_WRLCK: 'write'}[l_type], pid)
`;

// WAL index locks (sqlite3 os_unix.c): the write lock is shm byte 120, DMS byte 128.
const WAL_WRITE_LOCK = 120;
const WAL_DMS = 128;

async function probe(file, byte) {
  const r = await run('python3', ['-c', PROBE, file, String(byte)]);
  assert.equal(r.code, 0, r.stderr);
  const [state, pid] = r.stdout.trim().split(' ');
  return { state, pid: Number(pid) };
}

test('one SQLite: the app transaction enqueues, tocsin claims, locks survive opens and closes on both sides', async () => {
  const file = tmpdb('shop.db');
  const app = new Better(file);
  app.pragma('journal_mode = WAL');
  tocsin.load(app);
  app.exec('CREATE TABLE orders(id INTEGER PRIMARY KEY, item TEXT NOT NULL)');
  const db = tocsin.open(file);
  const q = db.queue('orders');

  // the job commits with the business row, or not at all
  const place = app.transaction((item) => {
    const { lastInsertRowid } = app.prepare('INSERT INTO orders(item) VALUES (?)').run(item);
    return tocsin.enqueueSql(app, 'orders', { order: Number(lastInsertRowid) }, { priority: 1, meta: { trace: 't' } });
  });
  const ids = [];
  for (let i = 0; i < 20; i++) ids.push(place(`item ${i}`));
  assert.throws(() => app.transaction(() => { place('ghost'); throw new Error('rollback'); })(), /rollback/);
  assert.equal(app.prepare('SELECT count(*) AS n FROM orders').get().n, 20);

  // tocsin's worker in the same process claims them
  const got = [];
  const ac = new AbortController();
  const consumer = (async () => {
    for await (const job of q.jobs('w1', { signal: ac.signal })) {
      got.push(job.payload.order);
      assert.deepEqual(job.meta, { trace: 't' });
      await job.ack();
      if (got.length === 20) ac.abort();
    }
  })().catch((e) => { if (e.name !== 'AbortError') throw e; });
  await consumer;
  assert.equal(got.length, 20);
  assert.deepEqual(new Set(got).size, 20);

  // (a) the app holds the write lock; tocsin opens and closes connections meanwhile
  app.exec('BEGIN IMMEDIATE');
  app.prepare("INSERT INTO orders(item) VALUES ('held')").run();
  const shm = file + '-shm';
  assert.deepEqual(await probe(shm, WAL_WRITE_LOCK), { state: 'write', pid: process.pid });
  for (let i = 0; i < 3; i++) {
    const other = tocsin.open(file);
    assert.equal(typeof (await other.queue('orders').stats()).pending, 'number');
    const l = other.listen('x');
    l.close();
    await other.close();
  }
  assert.deepEqual(await probe(shm, WAL_WRITE_LOCK), { state: 'write', pid: process.pid },
    "closing tocsin's connections kept the app's write lock");
  tocsin.enqueueSql(app, 'orders', { order: 'in held tx' });
  app.exec('COMMIT');
  assert.equal((await q.stats()).pending, 1);

  // (b) tocsin holds the write lock; the app opens and closes connections meanwhile
  await db.transaction(async (tx) => {
    await q.enqueue({ order: 'tocsin tx' }, { tx });
    for (let i = 0; i < 3; i++) {
      const c = new Better(file, { readonly: true });
      assert.ok(c.prepare('SELECT count(*) AS n FROM orders').get().n >= 21);
      c.close();
    }
    const p = await probe(shm, WAL_WRITE_LOCK);
    assert.deepEqual(p, { state: 'write', pid: process.pid }, "closing the app's connections kept tocsin's write lock");
  });
  assert.equal((await q.stats()).pending, 2);
  const dms = await probe(shm, WAL_DMS);
  assert.equal(dms.pid, process.pid, 'the open connections still hold their shared lock');

  assert.equal(app.pragma('integrity_check', { simple: true }), 'ok');
  const check = tocsin.open(file);
  assert.equal((await check.queue('orders').stats()).pending, 2, 'nothing was lost');
  await check.close();
  await db.close();
  app.close();
  const fresh = new Better(file);
  assert.equal(fresh.pragma('integrity_check', { simple: true }), 'ok');
  fresh.close();
});

test('a second copy of SQLite in the process is refused with a clear error', () => {
  // a copy of better-sqlite3's addon at another path is a second, separate SQLite
  const src = require.resolve('better-sqlite3/build/Release/better_sqlite3.node');
  const dir = tmpdir('tocsin-second-');
  const copy = path.join(dir, 'second_sqlite.node');
  fs.copyFileSync(src, copy);
  const conn = new Better(path.join(dir, 'x.db'), { nativeBinding: copy });
  assert.throws(() => tocsin.load(conn), (e) => {
    assert.ok(e instanceof tocsin.TocsinError);
    assert.match(e.message, /second copy of SQLite/);
    return true;
  });
  // and tocsin refuses to open any file while that copy is loaded
  assert.throws(() => tocsin.open(path.join(dir, 'y.db')), (e) => {
    assert.ok(e instanceof tocsin.TocsinError);
    assert.match(e.message, /^tocsin: a second copy of SQLite is loaded in this process: tocsin runs on the one in .*better_sqlite3\.node, and .*second_sqlite\.node carries another; .*allowOtherSqlite: true/);
    return true;
  });
  const allowed = tocsin.open(path.join(dir, 'y.db'), { allowOtherSqlite: true });
  allowed.close();
  conn.close();
  // the first copy keeps working
  const again = new Better(':memory:');
  tocsin.load(again);
  assert.equal(typeof again.prepare('SELECT tocsin_version() AS v').get().v, 'string');
  again.close();
});

test('negative control: the probe sees what a second copy of SQLite does to the locks', async () => {
  // what tocsin refuses: a second copy opening and closing the same file while
  // the first holds the write lock drops the lock (or deletes the -shm)
  const src = require.resolve('better-sqlite3/build/Release/better_sqlite3.node');
  const dir = tmpdir('tocsin-neg-');
  const copy = path.join(dir, 'second_sqlite.node');
  fs.copyFileSync(src, copy);
  const file = path.join(dir, 'neg.db');
  const a = new Better(file);
  a.pragma('journal_mode = WAL');
  a.exec('CREATE TABLE t(x)');
  a.exec('BEGIN IMMEDIATE');
  a.prepare('INSERT INTO t VALUES (1)').run();
  assert.deepEqual(await probe(file + '-shm', WAL_WRITE_LOCK), { state: 'write', pid: process.pid });
  const b = new Better(file, { nativeBinding: copy, readonly: true });
  b.prepare('SELECT count(*) FROM t').get();
  b.close();
  const lost = !fs.existsSync(file + '-shm') || (await probe(file + '-shm', WAL_WRITE_LOCK)).state !== 'write';
  assert.ok(lost, 'two copies of SQLite break the write lock: the hazard this binding refuses');
  try { a.exec('ROLLBACK'); } catch (_) { /* the file is in a bad state by design */ }
  a.close();
});

test('loadablePath is the addon itself, loadable by better-sqlite3 by path', () => {
  const p = tocsin.loadablePath();
  assert.ok(fs.existsSync(p));
  const c = new Better(':memory:');
  c.loadExtension(p, 'sqlite3_tocsin_init');
  assert.equal(c.prepare('SELECT tocsin_version() AS v').get().v, tocsin.versions().version);
  c.close();
  assert.throws(() => tocsin.load({}), tocsin.InvalidArgumentError);
  const v = tocsin.versions();
  assert.match(v.sqliteVersion, /^3\.\d+/);
});

test('the addon exports its N-API entry and the SQLite extension entry, nothing of the core', async () => {
  const r = await run('nm', ['-D', '--defined-only', tocsin.loadablePath()]);
  if (r.code !== 0 && /ENOENT|not found/.test(r.stderr)) return;
  assert.equal(r.code, 0, r.stderr);
  const names = r.stdout.split('\n').map((l) => l.trim().split(/\s+/)[2]).filter(Boolean).sort();
  assert.deepEqual(names, ['napi_register_module_v1', 'node_api_module_get_api_version_v1', 'sqlite3_tocsin_init']);
});
