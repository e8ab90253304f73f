'use strict';
// Regression tests of a stream review: save() and position inside a for-await loop that
// is mid-batch mean the last event handed on, not the end of the batch the core read.
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert/strict');
const tocsin = require('..');
const { tmpdb } = require('./helpers');

describe('stream review', () => {
  let db;
  before(() => { db = tocsin.open(tmpdb()); });
  after(() => db.close());

  test('save() mid-batch saves the last event handed on; the loop goes on with the rest once', async () => {
    const s = db.stream('mid');
    const offs = await s.publishMany([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    const sub = s.subscribe({ consumer: 'c', batch: 100, saveOnClose: false });
    const got = [];
    for await (const ev of sub) {
      got.push(ev.payload);
      assert.equal(sub.position, ev.offset);
      if (ev.payload === 2) {
        sub.save();
        assert.equal(await s.offset('c'), offs[2], 'was the batch end: 3..9 skipped after a crash');
      }
      if (ev.payload === 9) break;
    }
    assert.deepEqual(got, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    assert.equal(await s.offset('c'), offs[2]);
    // a save, then a break in the same body: close saves that event (save on close)
    const sub2 = s.subscribe({ consumer: 'd', batch: 100 });
    for await (const ev of sub2) {
      if (ev.payload === 5) { sub2.save(); break; }
    }
    assert.equal(await s.offset('d'), offs[5]);
    for await (const ev of s.subscribe({ consumer: 'd' })) {
      assert.equal(ev.payload, 6);
      break;
    }
  });
});

// A for-await loop mid-batch whose body still awaited when the process ran out of work:
// the subscription was never closed, and its native finalizer at exit saved the end of
// the batch the core had read (10), so events 4..10, never handed on, counted as
// processed. It saves the last event handed on, as break and close() do.
test('a loop left mid-batch at the process end saves the last event handed on, not the batch end', async () => {
  const path = require('path');
  const { run } = require('./helpers');
  const file = tmpdb();
  const db = tocsin.open(file);
  const s = db.stream('exit');
  const offs = await s.publishMany([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  const script = `
    const tocsin = require(${JSON.stringify(path.resolve(__dirname, '..'))});
    (async () => {
      const db = tocsin.open(process.argv[1]);
      for await (const ev of db.stream('exit').subscribe({ consumer: 'c', batch: 10 })) {
        if (ev.payload === 2) await new Promise(() => {}); // never settles: the loop empties
      }
    })();
  `;
  const r = await run(process.execPath, ['-e', script, file]);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(await s.offset('c'), offs[2]);
  // a subscription read with get() (no loop) saves its whole batch: it was handed on
  const r2 = await run(process.execPath, ['-e', `
    const tocsin = require(${JSON.stringify(path.resolve(__dirname, '..'))});
    (async () => { await tocsin.open(process.argv[1]).stream('exit').subscribe({ consumer: 'g', batch: 4 }).get(); })();
  `, file]);
  assert.equal(r2.code, 0, r2.stderr);
  assert.equal(await s.offset('g'), offs[3]);
  await db.close();
});
