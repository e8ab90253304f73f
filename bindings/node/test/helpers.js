'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawn, spawnSync } = require('child_process');

const ROOT = path.resolve(__dirname, '..');

function tmpdir(prefix = 'tocsin-node-') {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

function tmpdb(name = 'test.db') {
  return path.join(tmpdir(), name);
}

/**
 * Makes `db` hold the write lock: a transaction that enqueues `payload` on queue 'q'
 * and stays open. Resolves, once it holds it, to release(), which ends the
 * transaction (committing) and resolves when it has.
 */
async function holdWriteLock(db, payload) {
  let free;
  const freed = new Promise((r) => { free = r; });
  let holding;
  const held = new Promise((r) => { holding = r; });
  const done = db.transaction(async (tx) => {
    await db.queue('q').enqueue(payload, { tx });
    holding();
    await freed;
  });
  await held;
  return () => { free(); return done; };
}

/** The Python of build/venv (tocsin's Python binding installed), or null. */
function python() {
  const p = process.env.TOCSIN_TEST_PYTHON;
  if (p && fs.existsSync(p)) return p;
  const guess = path.resolve(ROOT, '..', '..', 'build', 'venv', 'bin', 'python');
  return fs.existsSync(guess) ? guess : null;
}

/** Runs a child and resolves { code, stdout, stderr }. */
function run(cmd, args, opts = {}) {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], ...opts });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => { stdout += d; });
    p.stderr.on('data', (d) => { stderr += d; });
    p.on('error', reject);
    p.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

/** Spawns a child and resolves once it prints `marker` on stdout (the child keeps running). */
function spawnUntil(cmd, args, marker, opts = {}) {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], ...opts });
    p.closed = new Promise((r) => p.on('close', (code) => r(code)));
    let out = '';
    let err = '';
    p.stderr.on('data', (d) => { err += d; if (err.includes(marker)) resolve(p); });
    p.stdout.on('data', (d) => {
      out += d;
      if (out.includes(marker)) resolve(p);
    });
    p.on('error', reject);
    p.on('close', (code) => reject(new Error(`child exited (${code}) before "${marker}": ${out}${err}`)));
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

module.exports = { ROOT, tmpdir, tmpdb, python, run, spawnUntil, sleep, spawnSync, holdWriteLock };
