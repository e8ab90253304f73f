'use strict';
// Regression tests of a new-user-and-attacker pass over the Node binding.
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert/strict');
const tocsin = require('..');
const { tmpdb } = require('./helpers');

describe('new-user-and-attacker pass', () => {
  let db;
  before(() => { db = tocsin.open(tmpdb()); });
  after(() => db.close());

  // db.listen() with a signal that was already aborted threw a TypeError out of the
  // constructor (the base class closed the listener before its emitter existed); it is
  // a closed listener whose iterator rejects with the signal's reason, as subscribe() is.
  test('listen() with an already aborted signal: a closed listener, the reason on iteration', async () => {
    const ac = new AbortController();
    const reason = new Error('stopped before it began');
    ac.abort(reason);
    let l;
    assert.doesNotThrow(() => { l = db.listen('pre-aborted', { signal: ac.signal }); });
    assert.equal(l.closed, true);
    const closes = [];
    l.on('close', () => closes.push(1));
    await assert.rejects(l.get(), (e) => e === reason);
    await assert.rejects(async () => { for await (const n of l) return n; }, (e) => e === reason);
    l.close(); // again: nothing more
    assert.deepEqual(closes, []);
    // the channel is not left with a listener: a new one hears what comes next
    const l2 = db.listen('pre-aborted');
    await db.notify('pre-aborted', { n: 1 });
    const [n] = await l2.get({ timeout: 5000 });
    assert.deepEqual(n.payload, { n: 1 });
    l2.close();
  });

  test('a signal aborted after listen() still closes the listener and emits close once', async () => {
    const ac = new AbortController();
    const l = db.listen('later-aborted', { signal: ac.signal });
    let closes = 0;
    l.on('close', () => { closes++; });
    const p = l.get();
    ac.abort(new Error('now'));
    await assert.rejects(p, /now/);
    assert.equal(l.closed, true);
    assert.equal(closes, 1);
  });
});
