'use strict';
// Regression tests of a sixth review: a subscription's fromOffset of -1 (the core's
// "the saved offset") is refused as Python refuses it, and lock.renew() on a Lock that
// holds nothing says so instead of naming a token the caller never gave.
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert/strict');
const tocsin = require('..');
const { tmpdb } = require('./helpers');

const invalid = (re) => (e) => e instanceof tocsin.InvalidArgumentError && re.test(e.message);

describe('sixth review', () => {
  let db;
  before(() => { db = tocsin.open(tmpdb()); });
  after(() => db.close());

  test('subscribe() refuses a negative fromOffset; 0 replays from the start', async () => {
    const s = db.stream('s6');
    await s.publishMany([1, 2, 3]);
    await s.saveOffset('c6', 2);
    assert.throws(() => s.subscribe({ consumer: 'c6', fromOffset: -1 }), invalid(/^fromOffset must be an integer >= 0, not -1$/));
    assert.throws(() => s.subscribe({ consumer: 'c6', fromOffset: -1n }), invalid(/^fromOffset must be an integer >= 0, not -1n$/));
    assert.throws(() => s.subscribe({ fromOffset: 1.5 }), invalid(/^fromOffset must be an integer$/));
    assert.equal(await s.offset('c6'), 2, 'nothing saved by a refused subscription');
    const sub = s.subscribe({ consumer: 'c6', fromOffset: 0, saveOnClose: false });
    const got = [];
    for await (const ev of sub) { got.push(ev.offset); if (got.length === 3) break; }
    assert.deepEqual(got, [1, 2, 3]);
    // left out: the consumer's saved offset
    const sub2 = s.subscribe({ consumer: 'c6', saveOnClose: false });
    for await (const ev of sub2) { assert.equal(ev.offset, 3); break; }
  });

  test('lock.renew() before the lock is held says so', async () => {
    const l = db.lock('l6', { ttl: 1000 });
    await assert.rejects(l.renew(), invalid(/^lock\.renew\(\): the lock "l6" is not held by this Lock \(acquire it first\)$/));
    await assert.rejects(l.renew({ ttl: 0 }), invalid(/^ttl must be between 1/));
    assert.equal(await l.tryAcquire(), true);
    assert.equal(await l.renew(), true);
    assert.equal(await l.release(), true);
    assert.equal(await l.renew(), false, 'released: its token is stale, as another holder\'s would be');
  });
});
