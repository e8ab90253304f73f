'use strict';
// Node figures for `make bench`: single-job enqueue and claim+ack through tocsin,
// beside plainjob (a better-sqlite3 queue, WAL, synchronous=NORMAL) and raw
// better-sqlite3 running the same SQL as tocsin's core, in the same run.
// Peers live in bench/node_modules only. Prints best-of-rounds ops/s and ratios.
const fs = require('fs');
const os = require('os');
const path = require('path');
const tocsin = require('..');
const Better = require('better-sqlite3');

const N = Number(process.env.TOCSIN_BENCH_N || 5000);
const ROUNDS = Number(process.env.TOCSIN_BENCH_ROUNDS || 3);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tocsin-bench-node-'));
const now = () => Number(process.hrtime.bigint()) / 1e9;

async function timed(fn) {
  const t = now();
  await fn();
  return N / (now() - t);
}

async function main() {
  const { defineQueue, better } = await import('plainjob');

  // tocsin
  const db = tocsin.open(path.join(dir, 'tocsin.db'));
  const q = db.queue('bench');

  // plainjob (it sets WAL and synchronous=1 itself)
  const pconn = new Better(path.join(dir, 'plainjob.db'));
  const pq = defineQueue({ connection: better(pconn), logger: { info() {}, warn() {}, error() {}, debug() {} } });

  // raw better-sqlite3 on tocsin's schema, tocsin's statements
  const rawFile = path.join(dir, 'raw.db');
  (await (async () => { const d = tocsin.open(rawFile); await d.close(); })());
  const raw = new Better(rawFile);
  raw.pragma('journal_mode = WAL');
  raw.pragma('synchronous = NORMAL');
  raw.pragma('busy_timeout = 5000');
  const begin = raw.prepare('BEGIN IMMEDIATE');
  const commit = raw.prepare('COMMIT');
  const ins = raw.prepare("INSERT INTO _tocsin_jobs(queue, state, payload, meta, priority, max_attempts, run_at, created_at, expires_at, unique_key) VALUES (?, 'pending', ?, NULL, 0, 3, ?, ?, NULL, NULL) ON CONFLICT(queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING");
  const check = raw.prepare("SELECT (SELECT paused FROM _tocsin_queues WHERE name = @q), EXISTS (SELECT 1 FROM _tocsin_jobs WHERE queue = @q AND lease_until <= @t AND state <> 'scheduled'), EXISTS (SELECT 1 FROM _tocsin_jobs WHERE queue = @q AND expires_at <= @t AND expires_at IS NOT NULL AND state <> 'processing'), EXISTS (SELECT 1 FROM _tocsin_jobs WHERE queue = @q AND state = 'scheduled' AND run_at <= @t)").raw();
  const sel = raw.prepare("SELECT id, attempts FROM _tocsin_jobs WHERE queue = @q AND lease_until IS NULL AND state <> 'scheduled' ORDER BY priority DESC, run_at, id LIMIT 1");
  const lease = raw.prepare("UPDATE _tocsin_jobs SET state = 'processing', attempts = attempts + 1, worker = @t, lease_until = @u WHERE id = @q");
  const ack = raw.prepare("DELETE FROM _tocsin_jobs WHERE id = @q AND state = 'processing' AND attempts = @t");

  const systems = {
    tocsin: {
      enqueue: async () => { for (let i = 0; i < N; i++) await q.enqueue({ i }); },
      claimAck: async () => {
        for (let i = 0; i < N; i++) {
          const j = await q.claim('w');
          if (!(await j.ack())) throw new Error('ack');
        }
      },
    },
    plainjob: {
      enqueue: async () => { for (let i = 0; i < N; i++) pq.add('bench', { i }); },
      claimAck: async () => {
        for (let i = 0; i < N; i++) {
          const j = pq.getAndMarkJobAsProcessing('bench');
          pq.markJobAsDone(j.id);
        }
      },
    },
    'raw better-sqlite3': {
      enqueue: async () => {
        for (let i = 0; i < N; i++) {
          const t = Date.now();
          begin.run(); ins.run('bench', JSON.stringify({ i }), t, t); commit.run();
        }
      },
      claimAck: async () => {
        for (let i = 0; i < N; i++) {
          const t = Date.now();
          begin.run();
          check.get({ q: 'bench', t });
          const row = sel.get({ q: 'bench' });
          lease.run({ q: row.id, t: 'w', u: t + 30000 });
          commit.run();
          begin.run(); ack.run({ q: row.id, t: row.attempts + 1 }); commit.run();
        }
      },
    },
  };
  const best = {};
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, s] of Object.entries(systems)) {
      best[name] = best[name] || { enqueue: 0, claimAck: 0 };
      best[name].enqueue = Math.max(best[name].enqueue, await timed(s.enqueue));
      best[name].claimAck = Math.max(best[name].claimAck, await timed(s.claimAck));
    }
  }
  const fmt = (x) => Math.round(x).toString().padStart(9);
  const ratio = (a, b) => (a / b).toFixed(2).padStart(6);
  console.log(`\nNode ${process.version}, SQLite ${tocsin.versions().sqliteVersion}, ${N} single jobs x ${ROUNDS} rounds (best), ops/s`);
  console.log('  system                enqueue  claim+ack');
  for (const [name, b] of Object.entries(best)) console.log(`  ${name.padEnd(20)}${fmt(b.enqueue)}  ${fmt(b.claimAck)}`);
  const t = best.tocsin;
  const p = best.plainjob;
  const w = best['raw better-sqlite3'];
  console.log(`  tocsin / plainjob       ${ratio(t.enqueue, p.enqueue)}     ${ratio(t.claimAck, p.claimAck)}   (target >= 1.00)`);
  console.log(`  tocsin / raw (same SQL) ${ratio(t.enqueue, w.enqueue)}     ${ratio(t.claimAck, w.claimAck)}   (target >= 0.85)`);
  pq.close();
  pconn.close();
  raw.close();
  await db.close();
  fs.rmSync(dir, { recursive: true, force: true });
}

main().catch((e) => { console.error(e); process.exit(1); });
