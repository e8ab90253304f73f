// Browser test of `tocsin ui`: Debian's chromium, headless, driven by playwright-core.
// usage: node cli/test_ui.js TOCSIN OUTDIR EXTENSION   (make test-cli-browser)
// Opens the dashboard, sees a depth change pushed (SSE) after another process
// enqueues, requeues a dead job with a click and sees it pending, checks that a
// mutation without the CSRF token is refused and that <script> payloads are
// shown as text, that Purge all asks first; saves screenshots under OUTDIR/ui/.
'use strict';
const { chromium } = require('playwright-core');
const { spawn, execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');

const [TOCSIN, OUTROOT, EXT] = process.argv.slice(2).map((p) => path.resolve(p));
const OUT = path.join(OUTROOT, 'ui');
fs.rmSync(OUT, { recursive: true, force: true });
fs.mkdirSync(OUT, { recursive: true });
const DB = path.join(OUT, 'app.db');

let passed = 0, failed = 0;
function tocsin(...args) {
  return execFileSync(TOCSIN, args.map(String), { encoding: 'utf8' }).trim();
}
function sql(q) { // state the CLI does not write (claims, streams, schedules), through the extension
  return execFileSync('sqlite3', ['-cmd', '.load ' + EXT, DB, q], { encoding: 'utf8' }).trim();
}
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log('ok   ' + name);
  } catch (e) {
    failed++;
    console.log('FAIL ' + name + '\n' + (e && e.stack || e));
  }
}
function assert(cond, msg) { if (!cond) throw new Error('assertion failed: ' + msg); }

const XSS = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">';

async function main() {
  tocsin('init', DB);
  // a little of everything, for the panels and the screenshot
  for (let i = 0; i < 4; i++) tocsin('enqueue', DB, 'emails', JSON.stringify({ to: `user${i}@example.com` }));
  tocsin('enqueue', DB, 'emails', JSON.stringify({ html: XSS }));
  tocsin('enqueue', DB, 'reports', '{"kind":"weekly"}', '--delay', '2h');
  for (let i = 0; i < 3; i++) tocsin('enqueue', DB, 'webhooks', JSON.stringify({ n: i }));
  const deadId = Number(tocsin('enqueue', DB, 'webhooks', '{"url":"https://example.com/hook"}', '--max-attempts', '1', '--priority', '10'));
  sql("SELECT tocsin_claim('webhooks', 'worker-1', 1, 60000)");
  const tok = sql(`SELECT json_extract(tocsin_job(${deadId}), '$.token')`);
  sql(`SELECT tocsin_fail(${deadId}, ${tok}, 'HTTP 502 from upstream')`);
  assert(JSON.parse(tocsin('job', DB, deadId, '--json')).state === 'dead', 'the job is dead');
  sql("SELECT tocsin_claim('webhooks', 'worker-1', 1, 60000)");
  // a second dead letter stays for the screenshot
  tocsin('cancel', DB, tocsin('enqueue', DB, 'emails', '{"to":"bounced@example.com"}'));
  for (let i = 0; i < 5; i++) sql(`SELECT tocsin_stream_publish('orders', '{"order":${i}}')`);
  sql("SELECT tocsin_stream_save_offset('billing', 'orders', 3)");
  sql("SELECT tocsin_stream_save_offset('analytics', 'orders', 5)");
  sql("SELECT tocsin_schedule_set('nightly-report', '0 3 * * *', 'reports', '{\"kind\":\"daily\"}')");
  sql("SELECT tocsin_schedule_set('cleanup', '@every 15m', 'maintenance', '{}')");
  tocsin('notify', DB, 'cache', '{"invalidate":"user:42"}');
  tocsin('notify', DB, 'chat', JSON.stringify({ msg: XSS }));
  // queue names are data: these must not reach Object.prototype in the page
  for (const q of ['constructor', '__proto__', 'toString']) tocsin('enqueue', DB, q, '{}');

  const start = async (...extra) => {
    const server = spawn(TOCSIN, ['ui', DB, '--port', '0', ...extra], { stdio: ['ignore', 'pipe', 'inherit'] });
    const url = await new Promise((resolve, reject) => {
      let buf = '';
      server.stdout.on('data', (d) => {
        buf += d;
        const m = buf.match(/listening on (http:\/\/\S+)/);
        if (m) resolve(m[1]);
      });
      server.on('exit', (code) => reject(new Error('tocsin ui exited with ' + code)));
      setTimeout(() => reject(new Error('tocsin ui did not start')), 10000);
    });
    return { server, url };
  };
  const { server, url } = await start();
  const guarded = await start('--token', 'browser-token-1');

  const profile = fs.mkdtempSync(path.join(OUT, 'profile-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1400, height: 1000 },
  });
  try {
    const page = context.pages()[0] || await context.newPage();
    const pageErrors = [];
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    await page.goto(url);
    await page.waitForSelector('#status.live');
    const pending = () => page.$eval('#queues tr[data-queue="emails"] td.pending', (td) => Number(td.textContent));
    await page.waitForSelector('#queues tr[data-queue="emails"]');

    await check('depth change pushed after another process enqueues', async () => {
      const before = await pending();
      const snaps = Number(await page.getAttribute('body', 'data-snapshots'));
      tocsin('enqueue', DB, 'emails', '{"to":"late@example.com"}'); // a separate process
      await page.waitForFunction((want) => {
        const td = document.querySelector('#queues tr[data-queue="emails"] td.pending');
        return td && Number(td.textContent) === want;
      }, before + 1, { timeout: 4000 }); // before the 5 s idle snapshot: pushed by the commit
      assert(Number(await page.getAttribute('body', 'data-snapshots')) > snaps, 'a new snapshot arrived');
    });

    await check('queues named constructor, __proto__ and toString render', async () => {
      // the per-queue rate appears from the second snapshot on: wait for one more
      const snaps = Number(await page.getAttribute('body', 'data-snapshots'));
      await page.waitForFunction((n) => Number(document.body.dataset.snapshots) > n, snaps, { timeout: 8000 });
      const names = await page.$$eval('#queues tbody tr', (rows) => rows.map((r) => r.firstChild.textContent));
      for (const q of ['constructor', '__proto__', 'toString']) assert(names.includes(q), 'row for ' + q + ': ' + names);
      assert(pageErrors.length === 0, 'page errors: ' + pageErrors.join('; '));
    });

    await check('requeue a dead job with a click, see it pending', async () => {
      const row = `#dead tr[data-id="${deadId}"]`;
      await page.waitForSelector(row);
      await page.click(`${row} button.requeue`);
      await page.waitForSelector(`#jobs tr[data-id="${deadId}"] td.state`);
      await page.waitForFunction((id) => {
        const td = document.querySelector(`#jobs tr[data-id="${id}"] td.state`);
        return td && td.textContent === 'pending';
      }, deadId);
      await page.waitForSelector(row, { state: 'detached' });
      assert(JSON.parse(tocsin('job', DB, deadId, '--json')).state === 'pending', 'pending in the database');
    });

    await check('a mutation without the CSRF token is refused', async () => {
      const r = await page.evaluate(async () => {
        const res = await fetch('/api/pause?queue=emails', { method: 'POST' });
        return { status: res.status, body: await res.json() };
      });
      assert(r.status === 403, 'status ' + r.status);
      assert(/CSRF/.test(r.body.error), r.body.error);
      const q = JSON.parse(tocsin('stats', DB, 'emails', '--json')).queues[0];
      assert(q.paused === false, 'queue not paused');
      // with the page's token the same request works (and is undone)
      const ok = await page.evaluate(async () => {
        const t = document.querySelector('meta[name="tocsin-csrf"]').content;
        const res = await fetch('/api/pause?queue=emails', { method: 'POST', headers: { 'X-Tocsin-CSRF': t } });
        return res.status;
      });
      assert(ok === 200, 'with the token: ' + ok);
      tocsin('resume', DB, 'emails');
    });

    await check('<script> payloads are shown as text', async () => {
      await page.fill('#s-q', 'onerror');
      await page.click('#search button[type=submit]');
      // the search's answer, not the table it replaces (one row of that may be shown meanwhile)
      await page.waitForFunction(() => {
        const rows = document.querySelectorAll('#jobs tbody tr');
        return rows.length === 1 && rows[0].textContent.includes('__xss');
      });
      const text = await page.textContent('#jobs tbody tr code');
      assert(text.includes('<script>window.__xss = 1</script>'), 'payload shown verbatim: ' + text);
      const noteText = await page.textContent('#notes');
      assert(noteText.includes('<img src=x onerror='), 'notification payload shown as text');
      const injected = await page.evaluate(() => ({
        xss: window.__xss,
        scripts: document.querySelectorAll('main script').length,
        imgs: document.querySelectorAll('main img').length,
      }));
      assert(injected.xss === undefined && injected.scripts === 0 && injected.imgs === 0, JSON.stringify(injected));
      assert(pageErrors.length === 0, 'page errors: ' + pageErrors.join('; '));
    });

    await check('screenshot', async () => {
      await page.fill('#s-q', '');
      await page.click('#search button[type=submit]');
      // some traffic for the throughput chart: jobs enqueued and acked by other processes
      for (let i = 0; i < 8; i++) {
        for (let k = 0; k <= i % 4; k++) tocsin('enqueue', DB, 'emails', JSON.stringify({ burst: i, k }));
        const jobs = JSON.parse(sql(`SELECT tocsin_claim('emails', 'worker-2', ${1 + (i % 3)}, 60000)`));
        for (const j of jobs) sql(`SELECT tocsin_ack(${j.id}, ${j.token})`);
        await page.waitForTimeout(300);
      }
      await page.waitForTimeout(300);
      const file = path.join(OUT, 'dashboard.png');
      await page.screenshot({ path: file, fullPage: true });
      assert(fs.statSync(file).size > 10000, 'a real screenshot');
    });
    await check('purge all asks first; dismissed, nothing is purged', async () => {
      const deadCount = () => JSON.parse(tocsin('dead', 'list', DB, '--json')).length;
      const before = deadCount();
      assert(before > 0, 'a dead letter to purge');
      let asked = '';
      page.once('dialog', (d) => { asked = d.message(); d.dismiss(); });
      await page.click('#purge-all');
      await page.waitForTimeout(300);
      assert(asked === `Delete ${before} dead job${before === 1 ? '' : 's'} from every queue? This cannot be undone.`,
        'question: ' + asked);
      assert(deadCount() === before, 'nothing purged after a dismiss');
      page.once('dialog', (d) => d.accept());
      await page.click('#purge-all');
      await page.waitForFunction(() => /purged \d+/.test(document.getElementById('msg').textContent), null, { timeout: 4000 });
      assert(deadCount() === 0, 'purged after an accept');
    });
    await check('--token: the cookie is the port\'s own, HttpOnly, SameSite=Strict, and holds no token', async () => {
      const p2 = await context.newPage();
      const r0 = await p2.goto(guarded.url);
      assert(r0.status() === 401, 'without the token: ' + r0.status());
      await p2.goto(guarded.url + '?token=browser-token-1');
      await p2.waitForSelector('#status.live');
      const port = new URL(guarded.url).port;
      const cookies = (await context.cookies(guarded.url)).filter((c) => c.name.startsWith('tocsin_'));
      assert(cookies.length === 1, JSON.stringify(cookies));
      const c = cookies[0];
      assert(c.name === 'tocsin_session_' + port && c.httpOnly && c.sameSite === 'Strict' && c.path === '/', JSON.stringify(c));
      assert(/^[0-9a-f]{32}$/.test(c.value) && !c.value.includes('browser-token'), 'a session id, not the token');
      assert(await p2.evaluate(() => document.cookie) === '', 'no script reads it');
      // the cookie keeps the page signed in
      const r1 = await p2.goto(guarded.url);
      assert(r1.status() === 200, 'with the cookie: ' + r1.status());
      await p2.waitForSelector('#status.live');
      // one of the same name that another app of the host set for /api (sent before ours
      // there, a longer path) is ignored: the page's calls still work
      await context.addCookies([{ name: c.name, value: 'stale0123', domain: c.domain, path: '/api' }]);
      const sent = await p2.evaluate(async () => (await fetch('/api/snapshot')).status);
      assert(sent === 200, 'with a foreign cookie before ours: ' + sent);
      assert((await context.cookies(guarded.url + 'api/snapshot')).filter((k) => k.name === c.name).length === 2,
        'both cookies are there');
      await p2.close();
    });
  } finally {
    await context.close();
    guarded.server.kill('SIGTERM'); // our own child, by its pid
    server.kill('SIGTERM'); // our own child, by its pid
    await new Promise((r) => (guarded.server.exitCode !== null ? r() : guarded.server.on('exit', r)));
    await new Promise((r) => (server.exitCode !== null ? r() : server.on('exit', r)));
    fs.rmSync(profile, { recursive: true, force: true });
  }
}

main().then(() => {
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}, (e) => {
  console.log(e && e.stack || e);
  console.log(`${passed} passed, ${failed + 1} failed`);
  process.exit(1);
});
