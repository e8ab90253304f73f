'use strict';
// Regression tests of a third review: options that are not an object, how jobs and
// messages print, the install script's core copy, the stats keys.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const path = require('path');
const util = require('util');
const tocsin = require('..');
const { tmpdb, tmpdir, run, ROOT } = require('./helpers');

const invalid = (re) => (e) => e instanceof tocsin.InvalidArgumentError && re.test(e.message);

test('an options argument that is not an object is refused, naming the call and the keys it knows', async () => {
  const file = tmpdb();
  assert.throws(() => tocsin.open(file, 5000),
    invalid(/^tocsin\.open\(\) options must be an object, not a number \(known: busyTimeout, maxPayload, readOnly, allowOtherSqlite\)$/));
  const db = tocsin.open(file);
  try {
    const q = db.queue('opts');
    // q.enqueue(1, 5000): a delay meant as { delay: 5000 }; nothing is enqueued
    await assert.rejects(q.enqueue(1, 5000),
      invalid(/^queue\.enqueue\(\) options must be an object, not a number \(known: tx, priority, delay, runAt, maxAttempts, expires, uniqueKey, meta\)$/));
    await assert.rejects(q.enqueue(1, 'high'), invalid(/^queue\.enqueue\(\) options must be an object, not a string \(known: tx, priority/));
    await assert.rejects(q.enqueue(1, [5]), invalid(/^queue\.enqueue\(\) options must be an object, not an array \(known: /));
    await assert.rejects(q.enqueue(1, true), invalid(/not a boolean/));
    await assert.rejects(q.enqueueMany([{ payload: 1 }], 1), invalid(/^queue\.enqueueMany\(\) options must be an object, not a number \(known: tx\)$/));
    await assert.rejects(q.claim('w', 30000), invalid(/^queue\.claim\(\) options must be an object, not a number \(known: visibility\)$/));
    await assert.rejects(q.claimBatch(2, 'w', 30000), invalid(/^queue\.claimBatch\(\) options must be an object/));
    await assert.rejects(db.exec('SELECT 1', 1), invalid(/^db\.exec\(\) options must be an object, not a number \(known: tx\)$/));
    await assert.rejects(db.stream('opts').publish(1, 'key'), invalid(/^stream\.publish\(\) options must be an object, not a string \(known: tx, key, meta\)$/));
    await assert.rejects(db.notify('c', 1, 2), invalid(/^db\.notify\(\) options must be an object/));
    await assert.rejects(db.waitResult(1, 100), invalid(/^db\.waitResult\(\) options must be an object, not a number \(known: timeout, signal\)$/));
    await assert.rejects(q.wait(100), invalid(/^queue\.wait\(\) options must be an object, not a number \(known: timeout, signal\)$/));
    assert.throws(() => db.listen('c', 100), invalid(/^db\.listen\(\) options must be an object, not a number \(known: bufferSize, signal\)$/));
    assert.throws(() => db.stream('opts').subscribe('consumer'), invalid(/^stream\.subscribe\(\) options must be an object, not a string \(known: consumer, /));
    assert.throws(() => db.lock('l', 1000), invalid(/^db\.lock\(\) options must be an object, not a number \(known: ttl, owner\)$/));
    assert.throws(() => q.task('t', () => 1, 3), invalid(/^queue\.task\(\) options must be an object, not a number \(known: /));
    assert.throws(() => new tocsin.Worker(db, 'opts'), invalid(/^new Worker\(\) options must be an object, not a string \(known: queues, /));
    await assert.rejects(db.updateSchedule('s', 'x'), invalid(/^db\.updateSchedule\(\) changes must be an object, not a string \(known: .*cron, queue, payload\)$/));
    await q.enqueue('keep');
    const job = await q.claim('w');
    await assert.rejects(job.ack(5), invalid(/^ack\(\) options must be an object, not a number \(known: tx\)$/));
    await assert.rejects(job.retry(1000), invalid(/^retry\(\) options must be an object, not a number \(known: tx, token, delay, error\)$/));
    // an unknown key names the call too
    await assert.rejects(q.enqueue(1, { dealy: 5 }), invalid(/^unknown option "dealy" in queue\.enqueue\(\) options \(known: /));
    assert.equal((await q.stats()).pending + (await q.stats()).scheduled, 0, 'nothing else was enqueued');
    assert.equal(await job.ack(), true);
  } finally {
    await db.close();
  }
});

test('util.inspect / console.log of a Job, an Event and a Notification show the decoded fields, not the handles', async () => {
  const db = tocsin.open(tmpdb());
  try {
    const q = db.queue('shown');
    await q.enqueue({ to: 'ada@example.org', n: [1, 2] }, { meta: { trace: 't-1' } });
    const job = await q.claim('w');
    const text = util.inspect(job);
    assert.match(text, /^Job \{/);
    for (const part of [`id: ${job.id}`, "queue: 'shown'", "state: 'processing'", "payload: { to: 'ada@example.org', n: [ 1, 2 ] }",
      "meta: { trace: 't-1' }", 'attempts: 1', 'maxAttempts: 3', `token: ${job.token}n`, "worker: 'w'"]) {
      assert.ok(text.includes(part), `${part} in ${text}`);
    }
    for (const internal of ['_row', '_queue', '_payload', 'Handle', '_h', 'Database', '_closers']) {
      assert.ok(!text.includes(internal), `${internal} not in ${text}`);
    }
    // as a member: the depth counts as for a plain object
    assert.equal(util.inspect({ a: { b: job } }, { depth: 1 }), '{ a: { b: [Job] } }');
    assert.match(util.inspect([job]), /^\[\n {2}Job \{\n {4}id: /);

    await db.stream('shown').publish({ order: 7 }, { key: 'k1' });
    const [ev] = await db.stream('shown').read();
    const evText = util.inspect(ev);
    assert.match(evText, /^Event \{/);
    for (const part of ['offset: 1', "topic: 'shown'", "key: 'k1'", 'payload: { order: 7 }']) assert.ok(evText.includes(part), evText);
    assert.ok(!evText.includes('_row') && !evText.includes('name:'), evText);

    await db.notify('shown', 'hello');
    const [n] = await db.notifications('shown');
    const nText = util.inspect(n);
    assert.match(nText, /^Notification \{/);
    for (const part of ['id: 1', "channel: 'shown'", "payload: 'hello'", 'createdAt: ']) assert.ok(nText.includes(part), nText);
    assert.ok(!nText.includes('_row'), nText);

    // JSON is unchanged
    assert.equal(JSON.parse(JSON.stringify(job)).payload.to, 'ada@example.org');
  } finally {
    await db.close();
  }
});

test('the install script never takes a core/ folder of the project the package is installed in', async () => {
  const script = fs.readFileSync(path.join(ROOT, 'scripts', 'sync-core.js'));
  const layout = (root, pkgDir) => {
    fs.mkdirSync(path.join(pkgDir, 'scripts'), { recursive: true });
    fs.writeFileSync(path.join(pkgDir, 'scripts', 'sync-core.js'), script);
    for (const d of ['include', 'src']) fs.mkdirSync(path.join(pkgDir, 'core', d), { recursive: true });
    fs.writeFileSync(path.join(pkgDir, 'core', 'src', 'tocsin_all.c'), '/* the package copy */\n');
    fs.writeFileSync(path.join(pkgDir, 'core', 'include', 'tocsin.h'), '/* the package copy */\n');
    for (const d of ['include', 'src']) fs.mkdirSync(path.join(root, 'core', d), { recursive: true });
    fs.writeFileSync(path.join(root, 'VERSION'), '9.9.9\n');
    fs.writeFileSync(path.join(root, 'core', 'src', 'tocsin_all.c'), '/* a stray core */\n');
    fs.writeFileSync(path.join(root, 'core', 'include', 'tocsin.h'), '/* a stray core */\n');
  };
  // installed: <project>/node_modules/tocsin, the project having a core/ of its own (and
  // run from the project, as npm does with a cwd of the package)
  const project = tmpdir('tocsin-project-');
  const installed = path.join(project, 'node_modules', 'tocsin');
  layout(project, installed);
  for (const cwd of [installed, project]) {
    const r = await run(process.execPath, [path.join(installed, 'scripts', 'sync-core.js')], { cwd });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(fs.readFileSync(path.join(installed, 'core', 'src', 'tocsin_all.c'), 'utf8'), '/* the package copy */\n');
    assert.equal(fs.readFileSync(path.join(installed, 'core', 'include', 'tocsin.h'), 'utf8'), '/* the package copy */\n');
  }
  // also a project laid out like the repository, when the package is installed in it
  const lookalike = tmpdir('tocsin-lookalike-');
  const nested = path.join(lookalike, 'bindings', 'node', 'node_modules', 'tocsin');
  layout(path.join(lookalike, 'bindings', 'node'), nested);
  let r = await run(process.execPath, [path.join(nested, 'scripts', 'sync-core.js')]);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(fs.readFileSync(path.join(nested, 'core', 'src', 'tocsin_all.c'), 'utf8'), '/* the package copy */\n');
  // a checkout (the package is the repository's bindings/node): refreshed from core/
  const repo = tmpdir('tocsin-checkout-');
  const pkg = path.join(repo, 'bindings', 'node');
  layout(repo, pkg);
  r = await run(process.execPath, [path.join(pkg, 'scripts', 'sync-core.js')]);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(fs.readFileSync(path.join(pkg, 'core', 'src', 'tocsin_all.c'), 'utf8'), '/* a stray core */\n');
});

test('stats keys: what queue.stats() and db.stats() return is what index.d.ts and the README say', async () => {
  const db = tocsin.open(tmpdb());
  try {
    const q = db.queue('st');
    await q.enqueue(1);
    await q.enqueue(2, { delay: 60000 });
    const one = await q.stats();
    const dts = fs.readFileSync(path.join(ROOT, 'index.d.ts'), 'utf8');
    const iface = /export interface QueueStats \{([\s\S]*?)\n\}/.exec(dts);
    assert.ok(iface, 'QueueStats in index.d.ts');
    const declared = [...iface[1].matchAll(/^\s+(\w+): /gm)].map((m) => m[1]);
    assert.deepEqual(Object.keys(one), declared);
    const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    const listed = /`queue\.stats\(\)` is `\{ ([^}]*) \}`/.exec(readme.replace(/\n\s+/g, ' '));
    assert.ok(listed, 'the README lists the keys of queue.stats()');
    assert.deepEqual(listed[1].split(/,\s*/), declared);
    assert.deepEqual(one, { queue: 'st', pending: 1, scheduled: 1, processing: 0, dead: 0, oldest_pending_age_ms: one.oldest_pending_age_ms, paused: false });
    assert.equal(typeof one.oldest_pending_age_ms, 'number');
    const all = await db.stats();
    assert.ok(Array.isArray(all));
    assert.deepEqual(all, [one].map((s) => ({ ...s, oldest_pending_age_ms: all[0].oldest_pending_age_ms })));
  } finally {
    await db.close();
  }
});
