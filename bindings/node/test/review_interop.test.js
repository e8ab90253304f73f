'use strict';
// Cross-runtime fidelity of JSON numbers: what another runtime writes, Node reads the
// same, and writes back the same.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const Database = require('better-sqlite3');
const tocsin = require('..');
const { tmpdb } = require('./helpers');

// JSON text as another runtime writes it (a Python int, a Go int64, a Ruby Integer)
const BIG = '{"id":9007199254740993,"min":-9223372036854775808,"max":9223372036854775807,' +
  '"huge":123456789012345678901234567890,"safe":9007199254740991,"float":1.5e300,' +
  '"exp":12345678901234567e3,"frac":9007199254740993.0,"s":"9007199254740993","l":[18014398509481985]}';
const WANT = {
  id: 9007199254740993n, min: -9223372036854775808n, max: 9223372036854775807n,
  huge: 123456789012345678901234567890n, safe: 9007199254740991, float: 1.5e300,
  exp: 12345678901234567e3, frac: 9007199254740992, s: '9007199254740993', l: [18014398509481985n],
};

test('integers beyond 2^53 another runtime wrote are read as exact BigInts and written back exactly', async () => {
  const file = tmpdb();
  const db = tocsin.open(file);
  const app = new Database(file);
  tocsin.load(app);
  try {
    const id = app.prepare("SELECT tocsin_enqueue('q', ?, json_object('meta', json(?)))").pluck().get(BIG, '{"trace":18446744073709551615}');
    app.prepare("SELECT tocsin_stream_publish('s', ?)").get(BIG);
    app.prepare("SELECT tocsin_notify('n', ?)").get(BIG);
    app.prepare('SELECT tocsin_result_save(?, ?)').get(id + 1000, BIG);
    const q = db.queue('q');
    const job = await q.claim('w');
    // JSON.parse rounded each to the nearest double: 9007199254740993 came back as ...992
    assert.deepEqual(job.payload, WANT);
    assert.deepEqual(job.meta, { trace: 18446744073709551615n });
    assert.deepEqual((await db.stream('s').read({ after: 0, limit: 1 }))[0].payload, WANT);
    assert.deepEqual((await db.result(id + 1000)).value, WANT);
    // a job's JSON (a log line) has them as decimal strings, as its own BigInts
    assert.equal(JSON.parse(JSON.stringify(job)).payload.id, '9007199254740993');
    assert.ok(await job.ack());

    // written back: the exact digits (a BigInt was refused: "holds a BigInt")
    const again = await q.enqueue(job.payload, { meta: job.meta });
    const text = app.prepare('SELECT payload FROM _tocsin_jobs WHERE id = ?').pluck().get(again);
    assert.equal(app.prepare("SELECT json_extract(payload, '$.max') FROM _tocsin_jobs WHERE id = ?").pluck().safeIntegers().get(again),
      9223372036854775807n);
    assert.match(text, /"id":9007199254740993,/);
    assert.match(text, /"huge":123456789012345678901234567890,/);
    assert.match(text, /"l":\[18014398509481985\]/);
    assert.equal(app.prepare("SELECT meta FROM _tocsin_jobs WHERE id = ?").pluck().get(again), '{"trace":18446744073709551615}');
    await db.notify('n2', [2n ** 64n, -(2n ** 63n), 1n]);
    const [n] = JSON.parse(app.prepare("SELECT tocsin_notify_read('n2', 0, 1)").pluck().get());
    assert.equal(JSON.stringify(n.payload), '[18446744073709552000,-9223372036854776000,1]'); // (the driver's own parse)
    assert.match(app.prepare("SELECT payload FROM _tocsin_notifications WHERE channel = 'n2'").pluck().get(),
      /^\[18446744073709551616,-9223372036854775808,1\]$/);
  } finally {
    app.close();
    await db.close();
  }
});

test('a task gets such integers as BigInts and its result keeps them exact', async () => {
  const file = tmpdb();
  const db = tocsin.open(file);
  const app = new Database(file);
  tocsin.load(app);
  const q = db.queue('t');
  q.task('echo', (x, kw) => ({ x, kw, plus: x + 1n }), { retries: 0 });
  const w = new tocsin.Worker(db, { queues: ['t'] });
  const running = w.run();
  try {
    const id = app.prepare("SELECT tocsin_task_enqueue('t', 'echo', '[9007199254740993]', '{\"k\":-9223372036854775808}')").pluck().get();
    const r = await db.waitResult(id, { timeout: 10000 });
    assert.deepEqual(r.value, { x: 9007199254740993n, kw: { k: -9223372036854775808n }, plus: 9007199254740994n });
    assert.equal(app.prepare("SELECT json_extract(tocsin_result_get(?), '$.value.plus')").pluck().safeIntegers().get(id), 9007199254740994n);
  } finally {
    await w.stop();
    await running;
    app.close();
    await db.close();
  }
});

test('a task error whose message or type holds a NUL still ends its run, read the same as in Go', async () => {
  const db = tocsin.open(tmpdb());
  const q = db.queue('t');
  const nul = q.task('nul', () => { throw new RangeError('bad\0tail'); }, { retries: 0 });
  const nulType = q.task('nultype', () => { const e = new Error('m'); e.name = 'Bad\0Name'; throw e; }, { retries: 0 });
  class Odd extends Error {}
  Object.defineProperty(Odd, 'name', { value: 'Odd\0Type' });
  const nulClass = q.task('nulclass', () => { throw new Odd('m'); }, { retries: 0 });
  const w = new tocsin.Worker(db, { queues: ['t'] });
  w.on('error', () => {});
  const running = w.run();
  try {
    const got = [];
    for (const t of [nul, nulType, nulClass]) {
      const h = await t();
      // each wait timed out before: the run was never recorded (its job leased for good)
      await assert.rejects(h.result({ timeout: 10000 }), (e) => { got.push([e.type, e.taskMessage]); return e instanceof tocsin.TaskError; });
    }
    assert.deepEqual(got[0], ['RangeError', 'badtail']); // Go's worker strips it too
    assert.deepEqual(got[1], ['Error', 'm']); // the constructor's name is the type
    assert.equal(got[2][0], 'InvalidOutcome');
    assert.match(got[2][1], /^the outcome was refused: /);
    assert.equal((await q.stats()).processing, 0);
  } finally {
    await w.stop();
    await running;
    await db.close();
  }
});

// Review of the exact integers: the ways a value still went through JSON.parse, and the
// writer's and reader's corners.
test('enqueueSql and callSql write a BigInt in meta as its digits (JSON.parse of the meta text rounded it)', () => {
  const file = tmpdb();
  const app = new Database(file);
  tocsin.load(app);
  try {
    const meta = { trace: 9007199254740993n, span: [-(2n ** 63n) - 1n] };
    const a = tocsin.enqueueSql(app, 'q', { x: 1 }, { meta, priority: 2n ** 62n });
    const b = tocsin.callSql(app, 'q', 'echo', [], { meta });
    const m = app.prepare('SELECT meta FROM _tocsin_jobs WHERE id = ?').pluck();
    assert.equal(m.get(a), '{"trace":9007199254740993,"span":[-9223372036854775809]}');
    assert.equal(m.get(b), '{"trace":9007199254740993,"span":[-9223372036854775809]}');
    assert.equal(app.prepare('SELECT priority FROM _tocsin_jobs WHERE id = ?').pluck().safeIntegers().get(a), 2n ** 62n);
  } finally {
    app.close();
  }
});

test('queue.periodic stores BigInt arguments exactly (its envelope went through JSON.parse)', async () => {
  const file = tmpdb();
  const db = tocsin.open(file);
  const app = new Database(file);
  try {
    await db.queue('p').periodic('* * * * *', 'echo', { args: [9007199254740993n], kwargs: { k: -(2n ** 63n) - 1n } });
    assert.equal(app.prepare('SELECT payload FROM _tocsin_schedules').pluck().get(),
      '{"task":"echo","args":[9007199254740993],"kwargs":{"k":-9223372036854775809}}');
  } finally {
    app.close();
    await db.close();
  }
});

test('an object that only calls itself a BigInt (Symbol.toStringTag) is written as the object it is', async () => {
  const file = tmpdb();
  const db = tocsin.open(file);
  try {
    const q = db.queue('q');
    const id = await q.enqueue({ big: 1n, boxed: Object(2n), fake: { [Symbol.toStringTag]: 'BigInt', x: 1 } });
    // it was the writer's internal marker string, NUL included: "\u0000tocsin-bigint-...:[object BigInt]"
    assert.equal((await q.get(id)).payloadJson, '{"big":1,"boxed":2,"fake":{"x":1}}');
  } finally {
    await db.close();
  }
});

test('JSON read exactly at any depth: the reader does not fall back to JSON.parse (rounding) when the stack runs short', () => {
  const { fromJson } = tocsin._internal;
  const d = 20000; // beyond what a recursive reader's stack holds; JSON.parse reads it
  let v = fromJson(`${'['.repeat(d)}9007199254740993${']'.repeat(d)}`);
  for (let i = 0; i < d; i++) v = v[0];
  assert.equal(v, 9007199254740993n);
  v = fromJson(`${'{"__proto__":'.repeat(d)}{"a":18446744073709551615,"b":"1234567890123456"}${'}'.repeat(d)}`);
  for (let i = 0; i < d; i++) { assert.ok(Object.hasOwn(v, '__proto__')); v = v.__proto__; }
  assert.deepEqual(v, { a: 18446744073709551615n, b: '1234567890123456' });
  // anything else as JSON.parse reads it, errors too
  for (const t of ['{"a":[1,{"b":"x\\"\\\\\\u00e9"}],"a":2,"c":-0,"d":1.5e400} ', ' [ "1234567890123456" , 9007199254740991 ] ', '[]', '{}', '"\\u0000"']) {
    assert.deepEqual(fromJson(t), JSON.parse(t), t);
    assert.ok(Object.is(fromJson('[-0, 12345678901234567e0]')[0], -0));
  }
  assert.throws(() => fromJson('[12345678901234567,]'), SyntaxError);
  assert.throws(() => fromJson('{"a":12345678901234567'), SyntaxError);
});

test('JSON.stringify of a result writes its BigInts as decimal strings, as a job\'s', async () => {
  const db = tocsin.open(tmpdb());
  try {
    const id = await db.queue('q').enqueue(1);
    await db.saveResult(id, { n: 9007199254740993n, ok: 1 });
    const r = await db.result(id);
    assert.equal(r.value.n, 9007199254740993n);
    const doc = JSON.parse(JSON.stringify(r));
    assert.deepEqual(doc.value, { n: '9007199254740993', ok: 1 });
    assert.equal(doc.jobId, id);
    assert.equal(doc.ok, true);
  } finally {
    await db.close();
  }
});
