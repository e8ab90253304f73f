// tocsin dashboard. Every value from the database is attacker-controlled
// (payloads, names, errors): it reaches the page through textContent only.
'use strict';
(function () {
  const meta = (n) => (document.querySelector('meta[name="' + n + '"]') || {}).content || '';
  const CSRF = meta('tocsin-csrf');
  const READ_ONLY = meta('tocsin-read-only') === '1';
  if (READ_ONLY) document.body.classList.add('ro');

  const $ = (id) => document.getElementById(id);
  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function num(v) { return el('td', v, 'n'); }
  function json(v) {
    const td = el('td');
    let s = JSON.stringify(v);
    if (s && s.length > 160) s = s.slice(0, 157) + '...';
    td.appendChild(el('code', s));
    return td;
  }
  function age(ms) {
    if (ms < 1000) return ms + 'ms';
    if (ms < 60000) return (ms / 1000).toFixed(1) + 's';
    if (ms < 3600000) return Math.floor(ms / 60000) + 'm' + Math.floor(ms / 1000 % 60) + 's';
    return Math.floor(ms / 3600000) + 'h' + Math.floor(ms / 60000 % 60) + 'm';
  }
  function fill(tableId, rows) {
    const body = $(tableId).tBodies[0];
    body.replaceChildren(...rows);
  }
  function msg(text, ok) {
    const m = $('msg');
    m.textContent = text;
    m.className = ok ? 'ok' : 'err';
  }
  function button(label, cls, onClick) {
    const b = el('button', label, cls);
    b.addEventListener('click', onClick);
    return b;
  }

  async function post(action, params) {
    const q = new URLSearchParams(params).toString();
    const r = await fetch('/api/' + action + (q ? '?' + q : ''), {
      method: 'POST', headers: { 'X-Tocsin-CSRF': CSRF }, credentials: 'same-origin',
    });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.error || ('HTTP ' + r.status));
    return body;
  }
  async function get(path) {
    const r = await fetch(path, { credentials: 'same-origin' });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.error || ('HTTP ' + r.status));
    return body;
  }

  // ---- queues ----
  let prev = null;
  // queue -> enqueued/s estimate from successive snapshots; a Map, since queue names are data
  // (a queue named 'constructor' or '__proto__' must not reach Object.prototype)
  const rates = new Map();
  function renderQueues(snap) {
    const qs = snap.stats.queues || [];
    fill('queues', qs.map((q) => {
      const tr = el('tr');
      tr.dataset.queue = q.queue;
      tr.appendChild(el('td', q.queue));
      const p = num(q.pending); p.className = 'n pending'; tr.appendChild(p);
      tr.appendChild(num(q.scheduled));
      tr.appendChild(num(q.processing));
      const d = num(q.dead); d.className = 'n dead'; tr.appendChild(d);
      tr.appendChild(el('td', age(q.oldest_pending_age_ms)));
      tr.appendChild(num(q.enqueued_1m));
      tr.appendChild(el('td', rates.has(q.queue) ? rates.get(q.queue).toFixed(1) + '/s' : '–'));
      const act = el('td');
      if (q.paused) act.appendChild(el('span', 'paused ', 'paused'));
      act.appendChild(button(q.paused ? 'Resume' : 'Pause', 'mut', () =>
        post(q.paused ? 'resume' : 'pause', { queue: q.queue })
          .then(() => msg((q.paused ? 'resumed ' : 'paused ') + q.queue, true), (e) => msg(e.message))));
      tr.appendChild(act);
      return tr;
    }));
  }

  // ---- throughput: exact global rates from the enqueue counter and the depths ----
  const series = []; // {t, enq, done, died}
  function sample(snap) {
    const qs = snap.stats.queues || [];
    const live = qs.reduce((a, q) => a + q.pending + q.scheduled + q.processing, 0);
    const dead = qs.reduce((a, q) => a + q.dead, 0);
    const died = qs.reduce((a, q) => a + q.died_1m, 0);
    const cur = { t: snap.now, total: snap.stats.enqueued_total, live, dead, died, qs };
    if (prev && cur.t > prev.t) {
      const dt = (cur.t - prev.t) / 1000;
      const enq = Math.max(0, cur.total - prev.total);
      const done = Math.max(0, enq - (cur.live - prev.live) - (cur.dead - prev.dead));
      series.push({ t: cur.t, enq: enq / dt, done: done / dt, died: Math.max(0, cur.dead - prev.dead) / dt });
      if (series.length > 120) series.shift();
      for (const q of qs) {
        const pq = prev.qs.find((x) => x.queue === q.queue);
        if (pq) rates.set(q.queue, Math.max(0, q.enqueued_1m - pq.enqueued_1m) / dt);
      }
    }
    prev = cur;
    drawChart();
  }
  function drawChart() {
    const c = $('chart');
    const ctx = c.getContext('2d');
    const W = c.width, H = c.height;
    ctx.clearRect(0, 0, W, H);
    ctx.strokeStyle = '#e3e6ec';
    ctx.beginPath(); ctx.moveTo(30, H - 20); ctx.lineTo(W, H - 20); ctx.stroke();
    const max = Math.max(1, ...series.map((s) => Math.max(s.enq, s.done, s.died)));
    ctx.fillStyle = '#6b7385'; ctx.font = '11px sans-serif';
    ctx.fillText(max.toFixed(1), 0, 12); ctx.fillText('0', 0, H - 22);
    const x = (i) => 30 + (W - 30) * (i / Math.max(1, series.length - 1));
    const y = (v) => (H - 20) - (H - 30) * (v / max);
    for (const [key, color] of [['enq', '#2f6fde'], ['done', '#2c8a4b'], ['died', '#c2362f']]) {
      ctx.strokeStyle = color; ctx.lineWidth = 2; ctx.beginPath();
      series.forEach((s, i) => (i ? ctx.lineTo(x(i), y(s[key])) : ctx.moveTo(x(i), y(s[key]))));
      ctx.stroke();
    }
  }

  // ---- streams, schedules, notifications ----
  function renderStreams(snap) {
    const rows = [];
    for (const t of snap.streams) {
      const cons = t.consumers.length ? t.consumers : [null];
      for (const c of cons) {
        const tr = el('tr');
        tr.appendChild(el('td', t.topic));
        tr.appendChild(num(t.events));
        tr.appendChild(num(t.last_offset));
        tr.appendChild(el('td', c ? c.consumer : '–'));
        tr.appendChild(num(c ? c.position : ''));
        tr.appendChild(num(c ? c.lag : ''));
        rows.push(tr);
      }
    }
    fill('streams', rows);
  }
  function renderSchedules(snap) {
    fill('schedules', snap.schedules.map((s) => {
      const tr = el('tr');
      tr.appendChild(el('td', s.name + (s.paused ? ' (paused)' : '')));
      tr.appendChild(el('td').appendChild(el('code', s.cron)).parentNode);
      tr.appendChild(el('td', s.queue));
      const when = s.next_fire != null ? new Date(s.next_fire).toISOString().replace('.000', '') +
        ' (in ' + age(Math.max(0, s.next_fire - snap.now)) + ')' : 'never';
      tr.appendChild(el('td', when));
      tr.appendChild(num(s.fired_count));
      return tr;
    }));
  }
  function renderNotes(snap) {
    const rows = [];
    for (const ch of snap.notifications) {
      ch.recent.forEach((n, i) => {
        const tr = el('tr');
        tr.appendChild(el('td', i ? '' : ch.channel));
        tr.appendChild(num(i ? '' : ch.count));
        tr.appendChild(num(n.id));
        tr.appendChild(json(n.payload));
        tr.appendChild(el('td', age(Math.max(0, snap.now - n.created_at)) + ' ago'));
        rows.push(tr);
      });
    }
    fill('notes', rows);
  }

  // ---- dead letters ----
  async function loadDead() {
    try {
      const dead = await get('/api/dead?limit=100');
      fill('dead', dead.map((j) => {
        const tr = el('tr');
        tr.dataset.id = j.id;
        tr.appendChild(num(j.id));
        tr.appendChild(el('td', j.queue));
        tr.appendChild(el('td', j.reason));
        tr.appendChild(num(j.attempts));
        tr.appendChild(el('td', j.last_error || ''));
        tr.appendChild(json(j.payload));
        const act = el('td');
        act.appendChild(button('Requeue', 'mut requeue', () => requeue(j.id)));
        tr.appendChild(act);
        return tr;
      }));
    } catch (e) { msg(e.message); }
  }
  async function requeue(id) {
    try {
      await post('requeue', { id });
      msg('job ' + id + ' requeued', true);
      $('s-q').value = String(id);
      $('s-state').value = '';
      await search();
      await loadDead();
    } catch (e) { msg(e.message); }
  }
  $('purge-all').addEventListener('click', async () => {
    // a bulk delete asks first, as `tocsin dead purge` does on a terminal, naming how many
    const n = lastDead >= 0 ? lastDead.toLocaleString('en-US') + ' dead job' + (lastDead === 1 ? '' : 's') : 'every dead job';
    if (!confirm('Delete ' + n + ' from every queue? This cannot be undone.')) return;
    try { const r = await post('purge', {}); msg('purged ' + r.purged, true); await loadDead(); } catch (e) { msg(e.message); }
  });

  // ---- job search ----
  let searched = false, lastSearch = 0;
  async function search() {
    searched = true;
    lastSearch = Date.now();
    const p = new URLSearchParams({ limit: '50' });
    if ($('s-q').value) p.set('q', $('s-q').value);
    if ($('s-queue').value) p.set('queue', $('s-queue').value);
    if ($('s-state').value) p.set('state', $('s-state').value);
    try {
      const jobs = await get('/api/jobs?' + p.toString());
      fill('jobs', jobs.map((j) => {
        const tr = el('tr');
        tr.dataset.id = j.id;
        tr.appendChild(num(j.id));
        tr.appendChild(el('td', j.queue));
        const st = el('td', j.state, 'state'); tr.appendChild(st);
        tr.appendChild(num(j.attempts + '/' + j.max_attempts));
        tr.appendChild(json(j.payload));
        const act = el('td');
        if (j.state !== 'dead') act.appendChild(button('Cancel', 'mut danger', () =>
          post('cancel', { id: j.id }).then(() => { msg('job ' + j.id + ' cancelled', true); search(); loadDead(); }, (e) => msg(e.message))));
        else act.appendChild(button('Requeue', 'mut', () => requeue(j.id)));
        tr.appendChild(act);
        return tr;
      }));
    } catch (e) { msg(e.message); }
  }
  $('search').addEventListener('submit', (ev) => { ev.preventDefault(); search(); });

  // ---- live: Server-Sent Events pushed on commits (wake engine) ----
  let lastDead = -1;
  function onSnapshot(snap) {
    if (snap.error) { msg(snap.error); return; }
    $('now').textContent = new Date(snap.now).toISOString().replace('.000', '');
    sample(snap);
    renderQueues(snap);
    renderStreams(snap);
    renderSchedules(snap);
    renderNotes(snap);
    const dead = (snap.stats.queues || []).reduce((a, q) => a + q.dead, 0);
    if (dead !== lastDead) { lastDead = dead; loadDead(); }
    // a search scans jobs: refreshed by pushes, at most every 2 s
    if (searched && Date.now() - lastSearch > 2000) search();
    document.body.dataset.snapshots = String((+document.body.dataset.snapshots || 0) + 1);
  }
  const es = new EventSource('/events');
  es.addEventListener('snapshot', (ev) => onSnapshot(JSON.parse(ev.data)));
  es.onopen = () => { $('status').className = 'status live'; $('status-text').textContent = 'live'; };
  // A refused stream (a 503: no wake engine for a read-only user whose database's
  // directory is not writable, or too many streams) is not retried by the browser:
  // the page polls the snapshot instead, every 2 s.
  let polling = null;
  es.onerror = () => {
    $('status').className = 'status';
    if (es.readyState !== EventSource.CLOSED) { $('status-text').textContent = 'reconnecting…'; return; }
    $('status-text').textContent = 'polling every 2 s';
    if (polling) return;
    const poll = async () => {
      try { onSnapshot(await get('/api/snapshot')); } catch (e) { msg(String(e.message || e)); }
    };
    poll();
    polling = setInterval(poll, 2000);
  };
})();
