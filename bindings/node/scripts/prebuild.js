'use strict';
// At pack time: puts the addon built by node-gyp into prebuilds/<platform>-<arch>/
// (the layout of prebuildify, read by node-gyp-build), so the tarball installs with
// no compiler. An N-API addon: one binary serves every Node version >= 18.
const fs = require('fs');
const path = require('path');

const pkg = path.resolve(__dirname, '..');
const built = path.join(pkg, 'build', 'Release', 'tocsin.node');
const dir = path.join(pkg, 'prebuilds', `${process.platform}-${process.arch}`);
fs.rmSync(path.join(pkg, 'prebuilds'), { recursive: true, force: true });
if (!fs.existsSync(built)) {
  console.error('tocsin: no build/Release/tocsin.node to ship as a prebuild (run node-gyp rebuild); packing without one');
  process.exit(0);
}
fs.mkdirSync(dir, { recursive: true });
fs.copyFileSync(built, path.join(dir, 'tocsin.napi.node'));
