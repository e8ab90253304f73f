'use strict';
// The SQL helpers on the app's own better-sqlite3 connection: a refusal is the
// TocsinError class of the same refusal through open(), with better-sqlite3's
// exception as its `cause` and SQLite's primary result code as `sqliteCode` (as the
// Python, Ruby and Go bindings keep the driver's error); the app's transaction
// survives the refusal and commits its own writes.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const Better = require('better-sqlite3');
const tocsin = require('..');
const { tmpdb } = require('./helpers');

test("a refused SQL helper call keeps the driver's error as cause; the transaction commits the rest", () => {
  const file = tmpdb();
  const app = new Better(file);
  app.exec('CREATE TABLE orders(id INTEGER PRIMARY KEY)');
  tocsin.load(app);
  app.exec('BEGIN');
  app.prepare('INSERT INTO orders(id) VALUES (1)').run();
  const id = tocsin.enqueueSql(app, 'q', { order: 1 });
  assert.throws(() => tocsin.enqueueSql(app, 'q', 'x'.repeat(2_000_000)), (e) => {
    assert.ok(e instanceof tocsin.TooBigError, e);
    assert.equal(e.sqliteCode, 18); // SQLITE_TOOBIG
    assert.ok(e.cause instanceof Better.SqliteError, 'the cause is better-sqlite3\'s error');
    assert.equal(e.cause.code, 'SQLITE_TOOBIG');
    return true;
  });
  assert.throws(() => tocsin.enqueueSql(app, '', 1), (e) => {
    assert.ok(e instanceof tocsin.InvalidArgumentError, e);
    assert.equal(e.sqliteCode, 1); // SQLITE_ERROR: how the SQL functions refuse an argument
    assert.ok(e.cause instanceof Better.SqliteError);
    assert.match(e.cause.message, /queue name must not be empty/);
    return true;
  });
  assert.ok(app.inTransaction);
  app.exec('COMMIT');
  assert.equal(app.prepare('SELECT count(*) AS n FROM orders').get().n, 1);
  assert.deepEqual(app.prepare('SELECT id FROM _tocsin_jobs').all().map((r) => r.id), [id]);
  app.close();
  assert.throws(() => tocsin.enqueueSql(app, 'q', 1), (e) => e instanceof tocsin.ClosedError);
});
