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
