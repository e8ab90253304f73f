'use strict';
// Copies the repository's C core (core/include, core/src) into the package,
// so that the package (and its `npm pack` tarball) builds on its own. Inside a
// checkout it refreshes the copy; an installed package keeps the copy it carries
// (it never looks outside itself, see checkoutCore).
const fs = require('fs');
const path = require('path');

const pkg = fs.realpathSync(path.resolve(__dirname, '..'));
const dest = path.join(pkg, 'core');

// The repository's core, only when this package is the repository's bindings/node (a
// checkout; an npm link or a local-folder install resolves to one). An installed
// package (<project>/node_modules/tocsin, or deeper) must build the copy it carries:
// <pkg>/../../core is then the user's project's own core/ folder, whatever it holds.
function checkoutCore() {
  if (path.basename(pkg) !== 'node' || path.basename(path.dirname(pkg)) !== 'bindings') return null;
  if (pkg.split(path.sep).includes('node_modules')) return null;
  const root = path.dirname(path.dirname(pkg));
  const core = path.join(root, 'core');
  const ours = ['VERSION', path.join('core', 'include', 'tocsin.h'), path.join('core', 'src', 'tocsin_all.c')];
  return ours.every((f) => fs.existsSync(path.join(root, f))) ? core : null;
}
const repoCore = checkoutCore();

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

if (repoCore) {
  copyDir(path.join(repoCore, 'include'), path.join(dest, 'include'));
  copyDir(path.join(repoCore, 'src'), path.join(dest, 'src'));
} else if (!fs.existsSync(path.join(dest, 'src', 'tocsin_all.c'))) {
  console.error('tocsin: no copy of the C core in ' + dest + ' and no repository core to copy from');
  process.exit(1);
}
