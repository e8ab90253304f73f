'use strict';
// The worker runner against the other runtimes on the same scenarios
// (docs/worker-protocol.md): what a timeout records, and what a throwing event
// listener does to its run.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const tocsin = require('..');
const { tmpdb } = require('./helpers');

test('a run stopped at its timeout records the core\'s message and no trace, as every runtime does', async () => {
  const db = tocsin.open(tmpdb());
  try {
    const q = db.queue('tmo');
    // never settles on its own: only the worker's timeout ends it
    const stuck = q.task('stuck', () => new Promise(() => {}), { timeout: 20, retries: 0 });
    const h = await stuck();
    const w = new tocsin.Worker(db, { queues: ['tmo'] });
    const running = w.run();
    const r = await db.waitResult(h.id, { timeout: 10000 });
    await w.stop();
    await running;
    assert.equal(r.error.type, 'Timeout');
    assert.equal(r.error.message, 'the run exceeded its timeout of 20 ms');
    // (it was the stack of the binding's own timer, naming this machine's paths)
    assert.equal(r.error.trace, null);
  } finally {
    await db.close();
  }
});

test('a \'run\' listener that throws neither keeps the run from being reported nor stops the worker', async () => {
  const db = tocsin.open(tmpdb());
  try {
    const q = db.queue('hooks');
    const seven = q.task('seven', async () => 7, { retries: 0 });
    const w = new tocsin.Worker(db, { queues: ['hooks'] });
    const warnings = [];
    const failed = [];
    const done = [];
    w.on('warning', (e) => warnings.push(e.message));
    w.on('failed', (ctx) => failed.push(ctx.jobId));
    w.on('run', () => { throw new Error('a metrics hook with a bug'); });
    w.on('done', (ctx) => { done.push(ctx.jobId); throw new Error('another hook with a bug'); });
    const running = w.run();
    const h1 = await seven();
    const h2 = await seven();
    // the job was left in flight, its lease renewed, until the worker stopped
    assert.equal(await h1.result({ timeout: 10000 }), 7);
    assert.equal(await h2.result({ timeout: 10000 }), 7);
    await w.stop();
    await running;
    assert.deepEqual(done.sort(), [h1.id, h2.id].sort());
    // a throwing 'done' listener does not turn the success into a failure
    assert.deepEqual(failed, []);
    assert.ok(warnings.includes('a metrics hook with a bug'), warnings.join('; '));
    assert.ok(warnings.includes('another hook with a bug'), warnings.join('; '));
  } finally {
    await db.close();
  }
});
