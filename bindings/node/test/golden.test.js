'use strict';
// The golden databases of interop-tests/golden, read through the Node API:
// a copy of each file the manifest names, its facts checked, then new work on it.
const { test, describe } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const path = require('path');
const tocsin = require('..');
const { tmpdir } = require('./helpers');

const GOLDEN = path.resolve(__dirname, '..', '..', '..', 'interop-tests', 'golden');
const MANIFEST = JSON.parse(fs.readFileSync(path.join(GOLDEN, 'manifest.json'), 'utf8'));
const FILES = Object.keys(MANIFEST.files).sort();
const json = (t) => (t === null ? null : JSON.parse(t));

function copyOf(name) {
  const dst = path.join(tmpdir('tocsin-golden-'), name);
  fs.copyFileSync(path.join(GOLDEN, name), dst);
  return dst;
}

test('the manifest names the golden files', () => {
  assert.ok(FILES.includes('v1-full.db') && FILES.length >= 2);
  for (const f of FILES) assert.ok(fs.existsSync(path.join(GOLDEN, f)), f);
});

for (const name of FILES) {
  const m = MANIFEST.files[name];
  describe(`golden ${name}`, () => {
    test('facts through the API', async () => {
      const db = tocsin.open(copyOf(name));
      try {
        for (const [q, want] of Object.entries(m.queues)) {
          const st = await db.queue(q).stats();
          for (const k of ['pending', 'scheduled', 'processing', 'dead']) assert.equal(st[k], want[k], `${q} ${k}`);
          assert.equal(Boolean(st.paused), Boolean(want.paused));
        }
        for (const j of m.jobs) {
          const job = await db.queue(j.queue).get(j.id);
          assert.ok(job, `job ${j.id}`);
          assert.deepEqual([job.queue, job.state, job.payload, job.meta], [j.queue, j.state, j.payload, j.meta]);
          assert.deepEqual([job.priority, job.attempts, job.maxAttempts, job.runAt], [j.priority, j.attempts, j.max_attempts, j.run_at]);
          assert.deepEqual([job.uniqueKey, job.worker], [j.unique_key, j.worker]);
        }
        const dead = new Map();
        for (const q of new Set(m.dead.map((d) => d.queue))) {
          for (const job of await db.queue(q).deadLetters({ limit: 1000 })) dead.set(job.id, job);
        }
        assert.deepEqual([...dead.keys()].sort((a, b) => a - b), m.dead.map((d) => d.id));
        for (const d of m.dead) {
          const job = dead.get(d.id);
          assert.deepEqual([job.state, job.reason, job.lastError, job.payload, job.attempts],
            ['dead', d.reason, d.last_error, d.payload, d.attempts]);
        }
        for (const r of m.results) {
          const res = await db.result(r.job_id);
          assert.ok(res, `result ${r.job_id}`);
          assert.equal(res.ok, r.status === 'ok');
          if (res.ok) {
            assert.deepEqual(res.value, json(r.value));
          } else {
            assert.deepEqual([res.error.type, res.error.message, res.error.trace], [r.error_type, r.error_message, r.error_trace]);
          }
          assert.equal(res.expiresAt, 0);
        }
        for (const s of m.streams) {
          const st = db.stream(s.topic);
          const events = await st.read({ after: 0, limit: 1000 });
          assert.deepEqual(events.map((e) => [e.offset, e.key, e.payload, e.meta]),
            s.events.map((e) => [e.offset, e.key, e.payload, e.meta]));
          for (const [consumer, pos] of Object.entries(s.consumers)) {
            assert.equal(await st.offset(consumer), pos);
            const after = await st.read({ after: pos, limit: 1000 });
            assert.deepEqual(after.map((e) => e.offset), s.events.filter((e) => e.offset > pos).map((e) => e.offset));
          }
        }
        assert.equal(await db.notifyMaxId(), m.max_notification_id);
        for (const n of m.notifications) {
          const got = await db.notifications(n.channel, { afterId: n.id - 1, limit: 1 });
          assert.deepEqual(got.map((x) => [x.id, x.payload, x.meta]), [[n.id, n.payload, n.meta]]);
        }
        for (const lk of m.locks) {
          const h = await db.lockHolder(lk.name);
          assert.equal(h.owner, null);
          assert.equal(Number(h.token), lk.token);
        }
        const scheds = await db.schedules();
        assert.deepEqual(scheds.map((s) => s.name), m.schedules.map((s) => s.name));
        scheds.forEach((got, i) => {
          const want = m.schedules[i];
          assert.deepEqual([got.cron, got.queue, got.payload, got.meta, got.priority, got.maxAttempts],
            [want.cron, want.queue, want.payload, want.meta, want.priority, want.max_attempts]);
          assert.deepEqual([got.catchUp, got.maxCatchUp, got.paused, got.nextFire],
            [want.catch_up, want.max_catch_up, Boolean(want.paused), want.next_fire]);
        });
      } finally {
        await db.close();
      }
    });

    test('new work on the old file', async () => {
      const file = copyOf(name);
      const db = tocsin.open(file);
      try {
        const maxId = Math.max(0, ...m.jobs.map((j) => j.id), ...m.dead.map((d) => d.id));
        const emails = db.queue('emails');
        const id = await emails.enqueue({ to: 'node@example.com' }, { priority: 100 });
        assert.ok(id > maxId);
        const pending = (m.queues.emails || { pending: 0 }).pending;
        const jobs = await emails.claimBatch(100, 'node-golden');
        assert.equal(jobs.length, pending + 1);
        assert.equal(jobs[0].id, id);
        for (const job of jobs) assert.equal(await job.ack(), true);
        if (m.dead.length) {
          const d = m.dead[0];
          const q = db.queue(d.queue);
          assert.equal(await q.requeue(d.id), true);
          const job = await q.claim('node-golden');
          assert.equal(job.id, d.id);
          assert.equal(await job.ack(), true);
        }
        for (const lk of m.locks) {
          const lock = db.lock(lk.name, { ttl: 60000, owner: 'node-golden' });
          assert.equal(await lock.tryAcquire(), true);
          assert.equal(Number(lock.token), lk.token + 1);
          assert.equal(await lock.release(), true);
        }
        const off = await db.stream('orders').publish({ order: 'node' });
        for (const s of m.streams) assert.ok(off > s.last_offset);
        assert.ok((await db.notify('chat', { text: 'node' })) > m.max_notification_id);
        const want = m.schedules.filter((s) => !s.paused && s.catch_up === 'once').length;
        assert.equal(await db.schedulerTick(), want);
      } finally {
        await db.close();
      }
      const again = tocsin.open(file);
      try {
        assert.equal((await again.queue('emails').stats()).pending, 0);
      } finally {
        await again.close();
      }
    });
  });
}
