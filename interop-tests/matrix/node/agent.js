'use strict';
// The Node.js agent of the interop matrix (protocol: interop-tests/README.md). Runs from
// the npm project the tarball was installed into: `require('tocsin')` is that install.
const readline = require('readline');
const tocsin = require('tocsin');
const Database = require('better-sqlite3');

const RT = 'node';
// The agent's own JSON (command fields, replies) carries integers beyond 2^53 exactly,
// as BigInts: the package's reader and writer of JSON values do that (the driver
// compares what arrives with the exact values it sent).
const { fromJson: jparse, toJson } = tocsin._internal;
let db = null;
let worker = null;
let running = null;
let sub = null;
let subIter = null;
let listener = null;
let listenIter = null;
const locks = new Map();

async function close() {
  await workerStop();
  if (sub) sub.close();
  if (listener) listener.close();
  sub = listener = subIter = listenIter = null;
  locks.clear();
  if (db) await db.close();
  db = null;
  return {};
}

async function workerStop() {
  if (worker) {
    await worker.stop();
    await running;
    worker = running = null;
  }
  return {};
}

// Driver-side checks with better-sqlite3: the app's own connection and transaction.
function sqlConn(path) {
  const c = new Database(path);
  c.pragma('busy_timeout = 10000');
  tocsin.load(c);
  c.exec('CREATE TABLE IF NOT EXISTS orders(id INTEGER PRIMARY KEY, who TEXT)');
  return c;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const ops = {
  hello: async () => ({ runtime: RT, version: process.version, module: require.resolve('tocsin'),
    loadable: tocsin.loadablePath(), betterSqlite3: require.resolve('better-sqlite3'), bigint: true }),
  open: async (path) => { await close(); db = tocsin.open(path); return {}; },
  close,
  enqueue: async (queue, payload, meta) => ({ id: await db.queue(queue).enqueue(jparse(payload), { meta: jparse(meta), maxAttempts: 1 }) }),
  claim_ack: async (queue) => {
    const q = db.queue(queue);
    for (;;) {
      const job = await q.claim('node-consumer');
      if (job) return { payload: job.payload, meta: job.meta, acked: await job.ack() };
      await q.wait({ timeout: 30000 });
    }
  },
  job: async (id) => { const j = await db.queue('jobs').get(Number(id)); return { state: j ? j.state : null }; },
  worker_start: async (queue) => {
    const q = db.queue(queue);
    q.task('echo', async (x) => ({ by: RT, echo: x }), { retries: 0, backoffBase: 10 });
    q.task('boom', async (x) => { throw new TypeError(`boom: ${x}`); }, { retries: 0, backoffBase: 10 });
    worker = new tocsin.Worker(db, { queues: [queue], scheduler: true, shutdownTimeout: 2000 });
    running = worker.run();
    return {};
  },
  worker_stop: workerStop,
  call: async (queue, task, args) => ({ id: (await db.queue(queue).call(task, jparse(args), { maxAttempts: 1 })).id }),
  result: async (id) => {
    const r = await db.waitResult(Number(id), { timeout: 60000 });
    return r.ok ? { value: r.value } : { error: { type: r.error.type, message: r.error.message } };
  },
  publish: async (topic, payload) => ({ offset: await db.stream(topic).publish(jparse(payload)) }),
  sub_start: async (topic, consumer) => {
    sub = db.stream(topic).subscribe({ consumer, batch: 1 });
    subIter = sub[Symbol.asyncIterator]();
    sub._iterKeepOpen = true;
    return {};
  },
  sub_next: async (n) => {
    const events = [];
    while (events.length < Number(n)) {
      const { value } = await subIter.next();
      events.push({ offset: value.id, payload: value.payload });
    }
    return { events };
  },
  sub_stop: async () => { sub.save(); sub.close(); sub = subIter = null; return {}; },
  offset: async (topic, consumer) => ({ offset: await db.stream(topic).offset(consumer) }),
  listen_start: async (channel) => { listener = db.listen(channel); return {}; },
  listen_next: async () => { const [n] = await listener.get({ timeout: 60000 }); return { payload: n.payload }; },
  listen_stop: async () => { listener.close(); listener = null; return {}; },
  notify: async (channel, payload) => ({ id: await db.notify(channel, jparse(payload)) }),
  lock_try: async (name, owner, ttl) => {
    const k = `${name}\0${owner}`;
    if (!locks.has(k)) locks.set(k, db.lock(name, { owner, ttl: Number(ttl) }));
    const l = locks.get(k);
    return { token: (await l.tryAcquire()) ? Number(l.token) : 0 };
  },
  lock_wait: async (name, owner, ttl) => {
    const k = `${name}\0${owner}`;
    if (!locks.has(k)) locks.set(k, db.lock(name, { owner, ttl: Number(ttl) }));
    const l = locks.get(k);
    await l.acquire({ timeout: 60000 });
    return { token: Number(l.token) };
  },
  lock_renew: async (name, owner) => ({ res: await locks.get(`${name}\0${owner}`).renew() }),
  lock_release: async (name, owner) => ({ res: await locks.get(`${name}\0${owner}`).release() }),
  schedule: async (name, cron, queue, payload) => ({ next_fire: await db.schedule(name, cron, queue, jparse(payload)) }),
  unschedule: async (name) => ({ res: await db.unschedule(name) }),
  // better-sqlite3: a task call with a business row in the app's transaction
  sql_call: async (path, queue, task, args, outcome) => {
    const c = sqlConn(path);
    let id = null;
    try {
      c.transaction(() => {
        c.prepare('INSERT INTO orders(who) VALUES (?)').run(`better-sqlite3 ${outcome} ${queue}`);
        id = c.prepare("SELECT tocsin_task_enqueue(?, ?, ?, '{}', '{\"max_attempts\":1}')").pluck().get(queue, task, args);
        if (outcome === 'rollback') throw new Error('rollback');
      })();
    } catch (e) {
      if (e.message !== 'rollback') throw e;
    }
    const rows = c.prepare('SELECT count(*) FROM orders WHERE who = ?').pluck().get(`better-sqlite3 ${outcome} ${queue}`);
    const job = id === null ? null : c.prepare('SELECT tocsin_job(?)').pluck().get(id);
    c.close();
    return { id, rows, job: job === null ? null : JSON.parse(job) };
  },
  sql_result: async (path, id) => {
    const c = sqlConn(path);
    try {
      for (let i = 0; i < 3000; i++) {
        const r = c.prepare('SELECT tocsin_result_get(?)').pluck().get(Number(id));
        if (r !== null) return { result: JSON.parse(r) };
        await sleep(20);
      }
      throw new Error('no result');
    } finally { c.close(); }
  },
  sql_claim_ack: async (path, queue, id) => {
    const c = sqlConn(path);
    try {
      for (let i = 0; i < 3000; i++) {
        const rows = JSON.parse(c.prepare("SELECT tocsin_claim(?, 'better-sqlite3', 1, 30000)").pluck().get(queue));
        if (rows.length) {
          const j = rows[0];
          const acked = c.prepare('SELECT tocsin_ack(?, ?)').pluck().get(j.id, j.token);
          return { id: j.id, payload: j.payload, acked: acked === 1 };
        }
        await sleep(20);
      }
      throw new Error('nothing to claim');
    } finally { c.close(); }
  },
  quit: async () => { await close(); return {}; },
};

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
let chain = Promise.resolve();
rl.on('line', (line) => {
  chain = chain.then(async () => {
    const [op, ...args] = line.split('\t');
    let reply;
    try {
      reply = await ops[op](...args);
      reply.ok = true;
    } catch (e) {
      reply = { ok: false, error: `${e.name}: ${e.message}` };
    }
    process.stdout.write(toJson(reply, 'reply') + '\n');
    if (op === 'quit') process.exit(0);
  });
});
rl.on('close', () => { chain.then(close).then(() => process.exit(0)); });
