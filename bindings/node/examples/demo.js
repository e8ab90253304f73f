'use strict';
// The Node part of `make demo` (DEMO_DB, TOCSIN_PY): a Node service calls the Python task
// send_email by name and reads its result; a Python process's call of a Node task runs
// in a Node worker; a better-sqlite3 transaction enqueues with its business row.
const path = require('path');
const { spawn, execFile } = require('child_process');
const { promisify } = require('util');
const Better = require('better-sqlite3');
const tocsin = require('..');

async function main() {
  const file = process.env.DEMO_DB;
  const py = process.env.TOCSIN_PY;
  const repo = path.resolve(__dirname, '..', '..', '..');
  const db = tocsin.open(file);
  // a Python worker runs demo/tasks.py (send_email)
  const worker = spawn(py, ['-m', 'tocsin', 'worker', 'tasks:db', '--queue', 'emails', '--log-level', 'warning'],
    { cwd: repo, env: { ...process.env, PYTHONPATH: path.join(repo, 'demo') }, stdio: 'inherit' });
  try {
    const h = await db.queue('emails').call('send_email', ['teapot'], { kwargs: { to: 'node@example.org' }, meta: { traceparent: '00-node-01' } });
    console.log('node: send_email (run by Python) returned', JSON.stringify(await h.result({ timeout: 20000 })));

    // the app's better-sqlite3 transaction: the order row and its job commit together
    const app = new Better(file);
    tocsin.load(app);
    app.exec('CREATE TABLE IF NOT EXISTS node_orders(id INTEGER PRIMARY KEY, item TEXT)');
    const jobId = app.transaction(() => {
      app.prepare('INSERT INTO node_orders(item) VALUES (?)').run('kettle');
      return tocsin.enqueueSql(app, 'node-orders', { item: 'kettle' });
    })();
    app.close();

    // a Node worker runs a Node task; Python calls it by name
    const nq = db.queue('node-tasks');
    nq.task('shout', async (word) => `${String(word).toUpperCase()}!`);
    const w = new tocsin.Worker(db, { queues: ['node-tasks'] });
    const running = w.run();
    // (asynchronously: the Node worker runs on this event loop)
    const { stdout: out } = await promisify(execFile)(py, ['-c', [
      'import os, tocsin',
      'db = tocsin.open(os.environ["DEMO_DB"])',
      'print("python: shout (run by Node) returned", db.queue("node-tasks").call("shout", "hello").get(timeout=20))',
    ].join('\n')], { env: process.env });
    process.stdout.write(out);
    await w.stop();
    await running;
    const job = await db.queue('node-orders').claim('node-demo');
    console.log(`node: claimed job ${jobId === job.id ? job.id : '?'} enqueued by better-sqlite3:`, JSON.stringify(job.payload));
    await job.ack();
  } finally {
    worker.kill('SIGTERM');
    await new Promise((r) => worker.on('close', r));
    await db.close();
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
