// The Node.js peer of the crash suite and the soak: see py_peer.py for the modes and
// the log lines.  node node_peer.js MODE DB LOGDIR SEED
'use strict';
const fs = require('fs');
const path = require('path');
const tocsin = require(path.resolve(__dirname, '../../../bindings/node'));

const [mode, dbPath, logDir, seedArg] = process.argv.slice(2);
const RUNTIME = 'node';
let seed = Number(seedArg) >>> 0;
function rand() { // mulberry32: seeded, so a peer's pauses replay
  seed = (seed + 0x6D2B79F5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const logFd = fs.openSync(path.join(logDir, `${RUNTIME}-${mode}-${process.pid}.log`), 'a');
const log = (line) => fs.writeSync(logFd, line + '\n');
const sleep = (lo, hi) => new Promise((r) => setTimeout(r, lo + rand() * (hi - lo)));

async function worker() {
  const db = tocsin.open(dbPath);
  db.queue('crash').task('crash.effect', async (kw) => {
    const job = tocsin.currentJob();
    log(`run ${job.jobId} ${job.attempt}`);
    // the effect and the ack commit in job.tx (transactional task)
    job.tx.exec(`INSERT INTO effects(job_id, runtime, pid, attempt, at) VALUES (${Number(job.jobId)}, 'node', ${process.pid}, ${Number(job.attempt)}, ${Date.now()})`);
    await sleep(0, 15); // a SIGKILL here lands inside the ack transaction
    return { n: kw.n, by: RUNTIME };
  }, { retries: 24, transactional: true });
  const w = new tocsin.Worker(db, { queues: ['crash'], concurrency: 3, visibility: 3000, shutdownTimeout: 5000,
    scheduler: true, schedulerTtl: 1500 });
  log('ready');
  await w.run({ handleSignals: true }); // SIGTERM: graceful stop
  await db.close();
}

// The scenarios' Worker (py_peer.py's scen: the same task and reply in every runtime).
async function scen() {
  const db = tocsin.open(dbPath);
  const st = { running: 0, peak: 0, seq: 0 };
  const cap = Number(process.env.SCEN_HOLD_CAP_MS || 2 ** 30);
  db.queue('scen').task('scen.hold', async (ms) => {
    const job = tocsin.currentJob();
    const seq = ++st.seq;
    st.running++;
    st.peak = Math.max(st.peak, st.running);
    log(`run ${job.jobId} ${job.attempt}`);
    try {
      await new Promise((r) => setTimeout(r, Math.min(Number(ms), cap)));
    } finally {
      st.running--;
    }
    log(`done ${job.jobId}`);
    return { by: RUNTIME, pid: process.pid, attempt: Number(job.attempt), max_attempts: Number(job.maxAttempts),
      seq, peak: st.peak };
  }, { retries: 9 });
  const w = new tocsin.Worker(db, { queues: ['scen'], concurrency: Number(process.env.SCEN_CONCURRENCY || 2),
    visibility: 3000, shutdownTimeout: Number(process.env.SCEN_SHUTDOWN_MS || 500), scheduler: true, schedulerTtl: 1500 });
  log('ready');
  await w.run({ handleSignals: true });
  await db.close();
  process.exit(0); // a handed-back run's timer must not keep the process alive
}

// The unique-key scenario's producer: once LOGDIR/scen-go exists, calls scen.hold with
// unique key SCEN_KEY, logs "id N" and exits.
async function scenEnqueue() {
  const db = tocsin.open(dbPath);
  log('ready');
  while (!fs.existsSync(path.join(logDir, 'scen-go'))) await new Promise((r) => setTimeout(r, 1));
  const h = await db.queue('scen').call('scen.hold', [Number(process.env.SCEN_HOLD_MS || 0)],
    { uniqueKey: process.env.SCEN_KEY, maxAttempts: 1 });
  log(`id ${h.id}`);
  await db.close();
}

class Refused extends Error {}

// claim, then the effect row and the ack (with the lease's token) in one transaction: a
// refused ack (LeaseLostError, or false) rolls the effect back.
async function consumer() {
  const db = tocsin.open(dbPath);
  const q = db.queue('crash');
  const wid = `node-consumer-${process.pid}`;
  log('ready');
  for (;;) {
    const job = await q.claim(wid, { visibility: 1500 });
    if (!job) { await sleep(20, 60); continue; }
    log(`run ${job.id} ${job.attempts}`);
    await sleep(0, 15);
    try {
      await db.transaction(async (tx) => {
        tx.exec(`INSERT INTO effects(job_id, runtime, pid, attempt, at) VALUES (${Number(job.id)}, 'node', ${process.pid}, ${Number(job.attempts)}, ${Date.now()})`);
        await sleep(0, 15); // a SIGKILL here lands inside the ack transaction
        if (!(await q.ack(job, { tx }))) throw new Refused();
      });
      log(`acked ${job.id}`);
    } catch (e) {
      if (!(e instanceof Refused) && !(e instanceof tocsin.LeaseLostError)) throw e;
      log(`refused ${job.id}`);
    }
  }
}

async function producer() {
  const db = tocsin.open(dbPath);
  const q = db.queue('crash');
  let seqNo = 0;
  log('ready');
  for (;;) {
    log('begin');
    await db.transaction(async (tx) => {
      const n = 1 + Math.floor(rand() * 3);
      for (let i = 0; i < n; i++) {
        seqNo++;
        const h = await q.call('crash.effect', [], { kwargs: { n: seqNo, p: RUNTIME }, maxAttempts: 25, tx });
        tx.exec(`INSERT INTO intents(job_id, producer, pid, at) VALUES (${Number(h.id)}, 'node', ${process.pid}, ${Date.now()})`);
      }
      await sleep(0, 10); // a SIGKILL here commits nothing
    });
    log('commit');
    await sleep(20, 60);
  }
}

process.on('SIGTERM', () => { if (mode !== 'worker' && mode !== 'scen') process.exit(0); });
({ worker, scen, 'scen-enqueue': scenEnqueue, consumer, producer })[mode]().catch((e) => { console.error(`node peer ${mode}:`, e); process.exit(1); });
