#!/usr/bin/env node
'use strict';
// tocsin-worker ./jobs.js [--queue emails]... [--concurrency 4] [--scheduler]
//                         [--shutdown-timeout ms] [--worker-id id]
// jobs.js declares its tasks with queue.task() and exports the Database
// (module.exports = db, or { db }, or a function returning one).
const path = require('path');
const { parseArgs } = require('util');
const tocsin = require('..');

function usage(msg) {
  if (msg) console.error('tocsin-worker: ' + msg);
  console.error('usage: tocsin-worker ./jobs.js [--queue NAME]... [--concurrency N] [--scheduler] [--shutdown-timeout MS] [--worker-id ID]');
  process.exit(2);
}

async function main() {
  let parsed;
  try {
    parsed = parseArgs({
      allowPositionals: true,
      options: {
        queue: { type: 'string', short: 'q', multiple: true },
        concurrency: { type: 'string', short: 'c' },
        scheduler: { type: 'boolean' },
        'shutdown-timeout': { type: 'string' },
        'worker-id': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (e) {
    usage(e.message);
  }
  const { values, positionals } = parsed;
  if (values.help) usage();
  if (positionals.length !== 1) usage('name one module that exports the Database');
  const int = (v, what) => {
    if (v === undefined) return undefined;
    if (!/^\d+$/.test(v)) usage(`${what} must be an integer`);
    return Number(v);
  };
  const target = path.resolve(process.cwd(), positionals[0]);
  let mod = require(target);
  if (mod && mod.__esModule && mod.default) mod = mod.default;
  let db = mod instanceof tocsin.Database ? mod : mod && mod.db;
  if (!db && typeof mod === 'function') db = await mod();
  if (!(db instanceof tocsin.Database)) usage(`${positionals[0]} must export a tocsin Database (module.exports = db)`);
  const worker = new tocsin.Worker(db, {
    queues: values.queue,
    concurrency: int(values.concurrency, '--concurrency'),
    scheduler: !!values.scheduler,
    shutdownTimeout: int(values['shutdown-timeout'], '--shutdown-timeout'),
    workerId: values['worker-id'],
  });
  const log = (event, fields) => console.log(JSON.stringify({ ts: Date.now(), event, pid: process.pid, ...fields }));
  worker.on('start', (f) => log('worker.start', f));
  worker.on('signal', (sig) => log('worker.signal', { signal: sig }));
  worker.on('stopping', (f) => log('worker.stopping', f));
  worker.on('failed', (ctx, e) => log('task.failed', { job: ctx.jobId, task: ctx.task, error: `${e.name}: ${e.message}` }));
  worker.on('warning', (e) => log('worker.warning', { message: e.message }));
  worker.on('error', (e) => log('worker.error', { message: e.message }));
  await worker.run({ handleSignals: true });
  await db.close();
  log('worker.stop', {});
  // a handler still running past --shutdown-timeout was handed back (another worker runs
  // the job again), but its timers would keep this process alive until it returns: the
  // worker has stopped, so the process ends (at once if nothing else is pending)
  setTimeout(() => process.exit(process.exitCode || 0), 1000).unref();
}

main().catch((e) => {
  console.error('tocsin-worker: ' + (e && e.stack ? e.stack : e));
  process.exit(1);
});
