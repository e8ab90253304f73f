// The Node worker of `make demo`: runs the task "charge_card" that the Python web
// request calls by name.  node node_worker.js DB   (stops on SIGTERM)
'use strict';
const path = require('path');
const tocsin = require(path.resolve(__dirname, '../bindings/node'));

const db = tocsin.open(process.argv[2]);
db.queue('payments').task('charge_card', async (order, { amount }) => {
  return { charged: amount, order, runtime: 'node', pid: process.pid };
});
const w = new tocsin.Worker(db, { queues: ['payments'], concurrency: 2, shutdownTimeout: 2000 });
console.log(`node (pid ${process.pid}): worker for charge_card ready`);
w.run({ handleSignals: true }).then(() => db.close());
