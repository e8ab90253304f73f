'use strict';
// Loads the addon and makes it the extension of better-sqlite3's SQLite, so
// the core runs on that one copy of SQLite (docs/architecture.md, "Node").
const path = require('path');
const fs = require('fs');
const load = require('node-gyp-build');
const errors = require('./errors');

const root = path.resolve(__dirname, '..');
const addonPath = fs.realpathSync(load.resolve ? load.resolve(root) : load.path(root));
const native = require(addonPath);
native.setErrorFactory(errors.makeError);

let anchor = null; // a better-sqlite3 connection that loaded us: the routine table's owner

/** Loads the addon into better-sqlite3's SQLite (once per process). */
function ensureLoaded() {
  if (native.apiReady()) return;
  let Better;
  try {
    Better = require('better-sqlite3');
  } catch (e) {
    throw errors.errorOf('TOCSIN_ERROR', 'tocsin: better-sqlite3 (the SQLite tocsin runs on) cannot be loaded: ' + e.message);
  }
  const conn = new Better(':memory:');
  try {
    conn.loadExtension(addonPath, 'sqlite3_tocsin_init');
  } catch (e) {
    conn.close();
    throw errors.errorOf('TOCSIN_ERROR', 'tocsin: cannot load the addon into better-sqlite3: ' + e.message);
  }
  if (!native.apiReady()) {
    conn.close();
    // the dynamic loader gave SQLite a second copy of the addon: refuse
    throw errors.errorOf('TOCSIN_ERROR', 'tocsin: better-sqlite3 loaded another copy of the addon (' + addonPath +
      '); refusing to run two SQLite copies in one process');
  }
  anchor = conn;
}

let betterBinding = null; // the better-sqlite3 package tocsin runs on (realpath, with a trailing separator)

/**
 * Other copies of SQLite mapped into this process (Linux: /proc/self/maps):
 * a second better-sqlite3 build, node-sqlite3, a shared libsqlite3 loaded by
 * another addon. Any of them opening tocsin's file would run a second copy of
 * SQLite on it.
 */
function otherSqliteCopies() {
  let maps;
  try {
    maps = fs.readFileSync('/proc/self/maps', 'utf8');
  } catch (_) {
    return []; // not Linux: nothing to tell
  }
  if (betterBinding === null) {
    try {
      betterBinding = fs.realpathSync(path.dirname(require.resolve('better-sqlite3/package.json'))) + path.sep;
    } catch (_) { betterBinding = ''; }
  }
  const seen = new Set();
  for (const line of maps.split('\n')) {
    const i = line.indexOf('/');
    if (i < 0) continue;
    const file = line.slice(i).replace(/ \(deleted\)$/, '');
    if (!/(sqlite|sqlcipher)[^/]*\.(node|so(\.\d+)*)$/i.test(file)) continue;
    if (file === addonPath || (betterBinding && file.startsWith(betterBinding))) continue;
    seen.add(file);
  }
  return [...seen];
}

module.exports = { native, addonPath, ensureLoaded, otherSqliteCopies, anchorConnection: () => anchor };
