'use strict';
// The npm pack tarball installs into an empty project: with the prebuilt
// linux-x64 addon it carries (no compiler), and with node-gyp when no prebuild
// matches (forced here by removing it).
const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const path = require('path');
const { tmpdir, run, ROOT } = require('./helpers');

const SMOKE = `
const tocsin = require('tocsin');
(async () => {
  const db = tocsin.open('smoke.db');
  const q = db.queue('q');
  await q.enqueue({ hello: 'world' });
  const job = await q.claim('w');
  if (!(await job.ack())) process.exit(3);
  console.log(JSON.stringify({ addon: tocsin.loadablePath(), payload: job.payload, sqlite: tocsin.versions().sqliteVersion }));
  await db.close();
})().catch((e) => { console.error(e); process.exit(1); });
`;

test('npm pack: the tarball installs in an empty project, prebuilt and compiled', { timeout: 900000 }, async () => {
  const out = tmpdir('tocsin-pack-');
  const pack = await run('npm', ['pack', '--json', '--pack-destination', out], { cwd: ROOT });
  assert.equal(pack.code, 0, pack.stderr);
  const info = JSON.parse(pack.stdout)[0];
  const files = info.files.map((f) => f.path);
  assert.ok(files.includes(`prebuilds/${process.platform}-${process.arch}/tocsin.napi.node`), 'a prebuilt addon');
  assert.ok(files.includes('core/src/tocsin_all.c') && files.includes('core/include/tocsin.h'), 'a copy of the core');
  assert.ok(files.includes('binding.gyp') && files.includes('src/addon.cc'), 'what node-gyp needs');
  assert.ok(files.includes('index.d.ts') && files.includes('lib/index.mjs') && files.includes('bin/tocsin-worker.js'));
  assert.ok(!files.some((f) => f.startsWith('test/')), 'no tests in the package');
  const tarball = path.join(out, info.filename);
  const list = await run('tar', ['-tvzf', tarball]);
  assert.ok(!/^l/m.test(list.stdout), 'no symlinks in the tarball');

  const proj = tmpdir('tocsin-proj-');
  fs.writeFileSync(path.join(proj, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true }));
  const inst = await run('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', tarball], { cwd: proj });
  assert.equal(inst.code, 0, inst.stdout + inst.stderr);
  const installed = path.join(proj, 'node_modules', 'tocsin');
  assert.ok(!fs.existsSync(path.join(installed, 'build')), 'the prebuild was used: nothing compiled');
  fs.writeFileSync(path.join(proj, 'smoke.js'), SMOKE);
  let r = await run(process.execPath, ['smoke.js'], { cwd: proj });
  assert.equal(r.code, 0, r.stderr);
  let res = JSON.parse(r.stdout.trim());
  assert.match(res.addon, /prebuilds/);
  assert.deepEqual(res.payload, { hello: 'world' });

  // no matching prebuild: the install compiles with node-gyp
  fs.rmSync(path.join(installed, 'prebuilds'), { recursive: true, force: true });
  const rb = await run('npm', ['rebuild', 'tocsin', '--loglevel=error'], { cwd: proj });
  assert.equal(rb.code, 0, rb.stdout + rb.stderr);
  assert.ok(fs.existsSync(path.join(installed, 'build', 'Release', 'tocsin.node')), 'compiled by node-gyp');
  r = await run(process.execPath, ['smoke.js'], { cwd: proj });
  assert.equal(r.code, 0, r.stderr);
  res = JSON.parse(r.stdout.trim());
  assert.match(res.addon, /build[\\/]Release/);
  assert.deepEqual(res.payload, { hello: 'world' });
  const bin = await run(path.join(proj, 'node_modules', '.bin', 'tocsin-worker'), ['--help'], { cwd: proj });
  assert.match(bin.stderr, /usage: tocsin-worker/);
});
