'use strict';
// Regression tests of a fourth review: run() of a worker whose database is closed under it.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const tocsin = require('..');
const { tmpdb } = require('./helpers');

const invalid = (re) => (e) => e instanceof tocsin.InvalidArgumentError && re.test(e.message);

test('db.close() while a worker runs: run() rejects with ClosedError, "error" hears it; stop() still resolves', async () => {
  const db = tocsin.open(tmpdb());
  db.queue('q').task('t', () => 1);
  const w = new tocsin.Worker(db, { queues: ['q'] });
  const heard = [];
  w.on('error', (e) => heard.push(e));
  let started;
  const up = new Promise((r) => { started = r; });
  w.on('start', started);
  const running = w.run();
  await up;
  await db.close();
  await assert.rejects(running, (e) => e instanceof tocsin.ClosedError && e.code === 'TOCSIN_CLOSED' &&
    /the database was closed/.test(e.message));
  assert.equal(heard.length, 1);
  assert.equal(heard[0].code, 'TOCSIN_CLOSED');

  // a stop() asked for resolves, also when the database closes after it
  const db2 = tocsin.open(tmpdb());
  db2.queue('q').task('t', () => 1);
  const w2 = new tocsin.Worker(db2, { queues: ['q'] });
  const running2 = w2.run();
  const stopping = w2.stop();
  await db2.close();
  await stopping;
  await running2;
});
