'use strict';
const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const path = require('path');
const { tmpdir, run, ROOT } = require('./helpers');

test('the README quickstart runs', async () => {
  const md = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const m = md.match(/## Quickstart\s+```js\n([\s\S]*?)```/);
  assert.ok(m, 'a js block under Quickstart');
  const dir = tmpdir('tocsin-readme-');
  // `require('tocsin')` and `require('better-sqlite3')` resolve to this package and its dependency
  const nm = path.join(dir, 'node_modules');
  fs.mkdirSync(nm);
  fs.symlinkSync(ROOT, path.join(nm, 'tocsin'));
  fs.writeFileSync(path.join(dir, 'quickstart.js'), m[1]);
  const r = await run(process.execPath, ['quickstart.js'], { cwd: dir, env: { ...process.env, NODE_PATH: path.join(ROOT, 'node_modules') } });
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /sent "Welcome" to ada@example.org \(attempt 1\)/);
  assert.match(r.stdout, /order 1 trace 00-abc-01/);
  assert.match(r.stdout, /notified \{ id: 1 \}/);
});

test('tsc --noEmit --strict passes on an example using every export', async () => {
  const tsc = require.resolve('typescript/bin/tsc');
  const r = await run(process.execPath, [tsc, '-p', path.join(ROOT, 'examples', 'tsconfig.json')]);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  // every runtime export is named in the example and declared in index.d.ts
  const tocsin = require('..');
  const example = fs.readFileSync(path.join(ROOT, 'examples', 'all.ts'), 'utf8');
  const dts = fs.readFileSync(path.join(ROOT, 'index.d.ts'), 'utf8');
  for (const name of Object.keys(tocsin)) {
    if (name.startsWith('_') || name === 'default') continue;
    assert.match(example, new RegExp(`\\b${name}\\b`), `examples/all.ts uses ${name}`);
    assert.match(dts, new RegExp(`(class|function|const) ${name}\\b`), `index.d.ts declares ${name}`);
  }
});

test('the ESM and the CommonJS entries are the same module', async () => {
  const script = `
    import tocsin, { open, Worker, TocsinError } from 'tocsin';
    import { createRequire } from 'node:module';
    const require = createRequire(import.meta.url);
    const cjs = require('tocsin');
    if (tocsin !== cjs || open !== cjs.open || Worker !== cjs.Worker || TocsinError !== cjs.TocsinError) process.exit(3);
    console.log('esm ok', typeof open);
  `;
  const dir = tmpdir('tocsin-esm-');
  fs.mkdirSync(path.join(dir, 'node_modules'));
  fs.symlinkSync(ROOT, path.join(dir, 'node_modules', 'tocsin'));
  fs.writeFileSync(path.join(dir, 'main.mjs'), script);
  const r = await run(process.execPath, ['main.mjs'], { cwd: dir });
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /esm ok function/);
});
