'use strict';
// Copies the repository's C core (core/include, core/src) into the package,
// so that the package (and its `npm pack` tarball) builds on its own. Inside a
// checkout it refreshes the copy; in an installed tarball (no ../../core) it
// keeps the copy the tarball carries.
const fs = require('fs');
const path = require('path');

const pkg = path.resolve(__dirname, '..');
const repoCore = path.resolve(pkg, '..', '..', 'core');
const dest = path.join(pkg, 'core');

function copyDir(from, to) {
  fs.mkdirSync(to, { recursive: true });
  for (const ent of fs.readdirSync(from, { withFileTypes: true })) {
    const src = path.join(from, ent.name);
    const dst = path.join(to, ent.name);
    if (ent.isDirectory()) continue;
    if (!/\.(c|h)$/.test(ent.name)) continue;
    const data = fs.readFileSync(src);
    let same = false;
    try { same = fs.readFileSync(dst).equals(data); } catch (_) { /* missing */ }
    if (!same) fs.writeFileSync(dst, data);
  }
}

if (fs.existsSync(path.join(repoCore, 'include', 'tocsin.h')) && fs.existsSync(path.join(repoCore, 'src', 'tocsin_all.c'))) {
  copyDir(path.join(repoCore, 'include'), path.join(dest, 'include'));
  copyDir(path.join(repoCore, 'src'), path.join(dest, 'src'));
} else if (!fs.existsSync(path.join(dest, 'src', 'tocsin_all.c'))) {
  console.error('tocsin: no copy of the C core in ' + dest + ' and no repository core to copy from');
  process.exit(1);
}
