'use strict';
// One measurement for bench/run.py: node runner.js IMPL WORKLOAD --dir DIR [--n N]
// IMPL: tocsin (the addon of bindings/node) | raw (better-sqlite3, the SQL of a minimal
// queue) | plainjob (on better-sqlite3). Prints {"metrics": {...}, "samples": {...}}.
// Every file: WAL, synchronous=NORMAL, the same JSON payload as the other runtimes.
const fs = require('fs');
const path = require('path');
const { spawn } = require('child_process');
const { parseArgs } = require('util');

const ROOT = path.resolve(__dirname, '..', '..', '..');
const PAYLOAD = { to: 'ada@example.org', template: 'welcome', n: 1 };
const { values: opt, positionals: [impl, workload] } = parseArgs({
  allowPositionals: true,
  options: { dir: { type: 'string' }, n: { type: 'string', default: '5000' },
    seconds: { type: 'string' }, backlog: { type: 'string' } },
});
const N = Number(opt.n);
const now = () => Number(process.hrtime.bigint()) / 1e9;
const tocsin = () => require(path.join(ROOT, 'bindings', 'node'));

const RAW_SCHEMA = `
CREATE TABLE IF NOT EXISTS jobs(id INTEGER PRIMARY KEY, queue TEXT NOT NULL,
  payload TEXT NOT NULL, ready INTEGER NOT NULL DEFAULT 1, lease_until INTEGER, worker TEXT);
CREATE INDEX IF NOT EXISTS jobs_ready ON jobs(queue, id) WHERE ready = 1;`;

function open(file) {
  if (impl === 'tocsin') {
    const db = tocsin().open(file);
    const q = db.queue('bench');
    return {
      enqueue: () => q.enqueue(PAYLOAD),
      enqueue100: (ps) => q.enqueueMany(ps.map((payload) => ({ payload }))),
      claimAck: async () => { const j = await q.claim('w1'); if (!j) return false; j.payload; await j.ack(); return true; },
      claimAck100: async () => { const js = await q.claimBatch(100, 'w1'); for (const j of js) j.payload; await q.ackBatch(js); return js.length; },
      fill: async (n) => { for (let i = 0; i < n; i += 1000) await q.enqueueMany(Array(Math.min(1000, n - i)).fill({ payload: PAYLOAD })); },
    };
  }
  const Better = require('better-sqlite3');
  const c = new Better(file);
  c.pragma('journal_mode = WAL');
  c.pragma('synchronous = NORMAL');
  c.pragma('busy_timeout = 10000');
  if (impl === 'raw') {
    c.exec(RAW_SCHEMA);
    const ins = c.prepare('INSERT INTO jobs(queue, payload) VALUES (?, ?)');
    const claim = c.prepare('UPDATE jobs SET ready = 0, lease_until = ?, worker = ? WHERE id IN ' +
      '(SELECT id FROM jobs WHERE queue = ? AND ready = 1 ORDER BY id LIMIT ?) RETURNING id, payload');
    const del = c.prepare('DELETE FROM jobs WHERE id = ?');
    const many = c.transaction((ps) => { for (const p of ps) ins.run('bench', JSON.stringify(p)); });
    const claimTx = c.transaction((k) => claim.all(Date.now() + 30000, 'w1', 'bench', k));
    const ackTx = c.transaction((rows) => { for (const r of rows) del.run(r.id); });
    return {
      enqueue: () => ins.run('bench', JSON.stringify(PAYLOAD)),
      enqueue100: (ps) => many.immediate(ps),
      claimAck: () => { const r = claimTx.immediate(1)[0]; if (!r) return false; JSON.parse(r.payload); del.run(r.id); return true; },
      claimAck100: () => { const rs = claimTx.immediate(100); for (const r of rs) JSON.parse(r.payload); ackTx.immediate(rs); return rs.length; },
      fill: (n) => { for (let i = 0; i < n; i += 1000) many(Array(Math.min(1000, n - i)).fill(PAYLOAD)); },
    };
  }
  if (impl === 'plainjob') {
    return import('plainjob').then(({ defineQueue, better }) => {
      const quiet = { info() {}, warn() {}, error() {}, debug() {} };
      const pq = defineQueue({ connection: better(c), logger: quiet });
      const many = c.transaction((ps) => { for (const p of ps) pq.add('bench', p); });
      // as plainjob's own worker does: claim an id, then read the job's data
      const claim = () => { const j = pq.getAndMarkJobAsProcessing('bench'); if (j) JSON.parse(pq.getJobById(j.id).data); return j; };
      const claimTx = c.transaction((k) => { const js = []; for (let i = 0; i < k; i++) { const j = claim(); if (!j) break; js.push(j); } return js; });
      const ackTx = c.transaction((js) => { for (const j of js) pq.markJobAsDone(j.id); });
      return {
        enqueue: () => pq.add('bench', PAYLOAD),
        enqueue100: (ps) => many.immediate(ps),
        claimAck: () => { const j = claim(); if (!j) return false; pq.markJobAsDone(j.id); return true; },
        claimAck100: () => { const js = claimTx.immediate(100); ackTx.immediate(js); return js.length; },
        fill: (n) => { for (let i = 0; i < n; i += 1000) many(Array(Math.min(1000, n - i)).fill(PAYLOAD)); },
      };
    });
  }
  throw new Error('unknown impl ' + impl);
}

async function rate(n, fn) { const t = now(); await fn(); return n / (now() - t); }

async function throughput(s) {
  const rounds = Math.max(1, Math.floor(N / 100));
  const batch = Array(100).fill(PAYLOAD);
  switch (workload) {
    case 'enq1': return { ops_s: await rate(N, async () => { for (let i = 0; i < N; i++) await s.enqueue(); }) };
    case 'enq100': return { ops_s: await rate(rounds * 100, async () => { for (let i = 0; i < rounds; i++) await s.enqueue100(batch); }) };
    case 'ca1':
      await s.fill(N);
      return { ops_s: await rate(N, async () => { for (let i = 0; i < N; i++) if (!(await s.claimAck())) throw new Error('dry'); }) };
    case 'ca100':
      await s.fill(rounds * 100);
      return { ops_s: await rate(rounds * 100, async () => { for (let i = 0; i < rounds; i++) if ((await s.claimAck100()) !== 100) throw new Error('short'); }) };
    default: throw new Error('unknown workload ' + workload);
  }
}

// cross-process: this process consumes, a child produces at random 2-4 ms intervals
async function produce(kind) {
  const db = tocsin().open(path.join(opt.dir, 'lat.db'));
  const q = db.queue('bench');
  await new Promise((r) => setTimeout(r, 300));
  const send = (p) => (kind === 'wake' ? q.enqueue(p) : db.notify('bench', p));
  const sent = []; // when each send returned: its commit is visible from then on
  for (let i = 0; i < N; i++) {
    await new Promise((r) => setTimeout(r, 2 + Math.random() * 2));
    await send({ tn: wall(), i });
    sent.push(wall());
  }
  fs.writeFileSync(path.join(opt.dir, 'sent.json'), JSON.stringify(sent));
  await send({ tn: 0, i: -1 });
  await db.close();
}

// wall-clock milliseconds with sub-millisecond precision, comparable across processes
function wall() { return performance.timeOrigin + performance.now(); }

async function latency(kind) {
  const db = tocsin().open(path.join(opt.dir, 'lat.db'));
  const q = db.queue('bench');
  const it = kind === 'wake' ? q.jobs('w1') : db.listen('bench');
  const child = spawn(process.execPath, [__filename, impl, 'produce-' + kind, '--dir', opt.dir, '--n', String(N)], { stdio: 'inherit' });
  const done = new Promise((res, rej) => child.on('exit', (code) => (code === 0 ? res() : rej(new Error('producer failed')))));
  const lat = [], after = [];
  const got = [];
  for await (const item of it) {
    const p = item.payload;
    const t = wall();
    if (kind === 'wake') await item.ack();
    if (p.i < 0) break;
    lat.push(t - p.tn);
    got.push([p.i, t]);
  }
  await done;
  await db.close();
  const sent = JSON.parse(fs.readFileSync(path.join(opt.dir, 'sent.json'), 'utf8'));
  for (const [i, t] of got) after.push(t - sent[i]);
  const pct = (v, x) => v[Math.min(v.length - 1, Math.floor(x * v.length))];
  lat.sort((a, b) => a - b);
  after.sort((a, b) => a - b);
  return [{ p50_ms: pct(lat, 0.5), p99_ms: pct(lat, 0.99), p50_commit_ms: pct(after, 0.5), p99_commit_ms: pct(after, 0.99) },
    { latency: lat }];
}

async function worker() {
  const file = path.join(opt.dir, 'worker.db');
  const app = path.join(opt.dir, 'jobs.js');
  fs.writeFileSync(app, `const t = require(${JSON.stringify(path.join(ROOT, 'bindings', 'node'))});
const db = t.open(${JSON.stringify(file)});
db.queue('bench').task('noop', () => null, { resultTtl: null });
module.exports = db;\n`);
  const db = tocsin().open(file);
  const q = db.queue('bench');
  const bin = path.join(ROOT, 'bindings', 'node', 'bin', 'tocsin-worker.js');
  const ps = [0, 1].map(() => spawn(process.execPath, [bin, app, '--queue', 'bench', '--concurrency', '4'], { stdio: ['ignore', 'ignore', 'inherit'] }));
  // counts through a read-only better-sqlite3 connection on the same file
  const ro = new (require('better-sqlite3'))(file, { readonly: true });
  const count = async (s) => ro.prepare(s).pluck().get();
  try {
    let end = Date.now() + 60000;
    while ((await count('SELECT count(*) AS c FROM _tocsin_workers')) < 2) {
      if (Date.now() > end) throw new Error('the workers did not start');
      await new Promise((r) => setTimeout(r, 50));
    }
    await db.transaction(async (tx) => { for (let i = 0; i < N; i++) await q.call('noop', [], { tx, resultTtl: null }); });
    const t0 = now();
    end = Date.now() + 120000;
    while ((await count('SELECT EXISTS (SELECT 1 FROM _tocsin_jobs) AS c')) > 0) {
      if (Date.now() > end) throw new Error('the workers did not finish');
      await new Promise((r) => setTimeout(r, 2));
    }
    return { tasks_s: N / (now() - t0) };
  } finally {
    for (const p of ps) p.kill('SIGTERM');
    await Promise.all(ps.map((p) => new Promise((r) => (p.exitCode !== null ? r() : p.on('exit', r)))));
    ro.close();
    await db.close();
  }
}

async function main() {
  let out;
  if (workload.startsWith('produce-')) return produce(workload.split('-')[1]);
  if (workload === 'wake' || workload === 'notify') out = await latency(workload);
  else if (workload === 'worker') out = [await worker(), {}];
  else out = [await throughput(await open(path.join(opt.dir, workload + '.db'))), {}];
  process.stdout.write(JSON.stringify({ metrics: out[0], samples: out[1] }) + '\n');
}

main().then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });
