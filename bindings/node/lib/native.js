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

module.exports = { native, addonPath, ensureLoaded, anchorConnection: () => anchor };
