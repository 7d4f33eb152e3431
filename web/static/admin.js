// admin.js — the Codemojex operator page.
//
// Holds nothing until the operator pastes the admin token (kept in sessionStorage). Then it polls
// the admin API about once a second and shows workers, queue, lanes, throughput and dead jobs.
// The event log is computed by comparing successive polls, so an operator can follow a killed
// worker's job: leased to the dead worker, reclaimed, then scored by another worker — once.

import { request, ApiError, h, showText, syncList } from './api.js';

const TOKEN_KEY = 'codemojex.admin';
const POLL_MS = 1000;
const LEASE_MS = 10000;          // the ScoreWorker's lease (contract §2); bars scale to it
const SPARK_WINDOW_MS = 60000;
const LOG_MAX = 300;
const FLASH_MS = 2500;

const $ = (id) => document.getElementById(id);

const state = {
  token: null,
  gen: 0,                 // bumped on sign-in/out so a stale poll loop stops
  timer: null,
  first: true,            // first successful poll: describe, do not diff
  workers: new Map(),     // worker_id -> last seen worker (with polledAt)
  leaseMax: LEASE_MS,
  counters: null,         // last counters object
  queue: null,
  deadIds: null,          // Set of job ids on the dead floor at the last poll
  orphans: new Map(),     // job_id -> {worker, phase: leased|reclaimed|rescoring, by, at}
  reclaimCredit: 0,       // reclaims already logged from a sighting, not yet seen in the counter
  rates: [],              // [{t, r}] scored per second
  lastSample: null,       // {t, v}
  flashes: new Map(),     // worker_id -> {text, until, kind}
  lastOk: 0,
  failing: false,
};

// ---------------------------------------------------------------- helpers

function api(path, opts = {}) {
  return request(path, { ...opts, token: state.token });
}

function num(v) {
  const n = Number(v);
  return Number.isFinite(n) ? n : 0;
}

function setBanner(text) {
  showText($('banner'), text);
}

function setPollStatus(kind, text) {
  const el = $('poll-status');
  el.dataset.state = kind;
  if (el.textContent !== text) el.textContent = text;
}

function flash(elId, text, kind = 'good') {
  const el = $(elId);
  el.textContent = text;
  el.dataset.kind = kind;
  el.hidden = false;
  clearTimeout(el._t);
  el._t = setTimeout(() => { el.hidden = true; }, FLASH_MS + 1500);
}

function fmtTime(d = new Date()) {
  return d.toLocaleTimeString([], { hour12: false, hour: '2-digit', minute: '2-digit', second: '2-digit' });
}

function log(text, kind = 'info') {
  const list = $('event-log');
  const li = h('li', { class: `log-row ${kind}`, dataset: { kind } },
    h('time', { class: 'log-time', datetime: new Date().toISOString() }, fmtTime()),
    h('span', { class: 'log-text' }, text));
  list.prepend(li);
  while (list.children.length > LOG_MAX) list.lastElementChild.remove();
}

// ---------------------------------------------------------------- sign-in

function showLogin(message) {
  $('dashboard').hidden = true;
  $('admin-logout').hidden = true;
  $('login').hidden = false;
  showText($('login-error'), message);
  setPollStatus('offline', 'signed out');
  setBanner(null);
  const input = $('admin-token');
  input.value = '';
  input.focus();
}

function signIn(token) {
  state.token = token;
  try { sessionStorage.setItem(TOKEN_KEY, token); } catch { /* storage blocked: keep it in memory */ }
  resetView();
  $('login').hidden = true;
  $('dashboard').hidden = false;
  $('admin-logout').hidden = false;
  setPollStatus('connecting', 'connecting…');
  startPolling();
}

function signOut(message) {
  state.gen += 1;
  clearTimeout(state.timer);
  state.token = null;
  try { sessionStorage.removeItem(TOKEN_KEY); } catch { /* ignore */ }
  resetView();
  showLogin(message);
}

function resetView() {
  state.first = true;
  state.workers = new Map();
  state.counters = null;
  state.queue = null;
  state.deadIds = null;
  state.orphans = new Map();
  state.reclaimCredit = 0;
  state.rates = [];
  state.lastSample = null;
  state.flashes = new Map();
  for (const id of ['workers', 'queue-counters', 'lanes', 'dead-jobs', 'event-log', 'sparkline']) $(id).replaceChildren();
  for (const id of ['workers-summary', 'lanes-summary', 'dead-summary', 'spark-now', 'spark-max', 'queue-updated']) $(id).textContent = '';
}

// ---------------------------------------------------------------- polling

function startPolling() {
  state.gen += 1;
  clearTimeout(state.timer);
  const gen = state.gen;
  const loop = async () => {
    const t0 = Date.now();
    try {
      await poll(gen);
    } catch (e) {
      // A malformed answer must not stop the page: say so and keep polling.
      setBanner(`Could not show the admin data: ${e && e.message ? e.message : e}`);
    }
    if (gen !== state.gen) return;
    state.timer = setTimeout(loop, Math.max(150, POLL_MS - (Date.now() - t0)));
  };
  loop();
}

async function poll(gen) {
  const results = await Promise.allSettled([
    api('/api/admin/workers'),
    api('/api/admin/queue'),
    api('/api/admin/dead'),
  ]);
  if (gen !== state.gen) return;
  const errors = results.filter((r) => r.status === 'rejected').map((r) => r.reason);
  if (errors.some((e) => e instanceof ApiError && e.status === 401)) {
    signOut('That admin token was refused — paste it again.');
    return;
  }
  const [w, q, d] = results.map((r) => (r.status === 'fulfilled' ? r.value.data : null));
  const polledAt = Date.now();
  const firstPoll = state.first;
  if (w) applyWorkers(Array.isArray(w.workers) ? w.workers : [], polledAt);
  if (q) applyQueue(q, polledAt);
  if (d) applyDead(d);
  if (w || q || d) {
    state.lastOk = polledAt;
    if (firstPoll && w && q) {
      state.first = false;
      log(`Signed in — ${state.workers.size} worker${state.workers.size === 1 ? '' : 's'}, ${num(q.pending)} pending, ${num(q.active)} active`, 'info');
    }
  }

  if (errors.length === 0) {
    if (state.failing) log('Server reachable again', 'good');
    state.failing = false;
    setBanner(null);
  } else {
    const transient = errors.every((e) => e instanceof ApiError && e.transient);
    const text = transient ? 'Server unavailable, retrying…'
      : `Some admin data failed: ${errors.map((e) => (e instanceof ApiError ? e.code : String(e))).join(', ')}`;
    if (!state.failing && transient) log('Server unavailable', 'bad');
    state.failing = transient;
    setBanner(text);
  }
  renderPollStatus();
}

function renderPollStatus() {
  if (!state.token) return;
  if (state.failing) {
    setPollStatus('reconnecting', 'retrying…');
  } else if (state.lastOk) {
    setPollStatus('live', 'live');
  }
}

// ---------------------------------------------------------------- workers

function applyWorkers(list, polledAt) {
  const prev = state.workers;
  const next = new Map();
  const diff = !state.first;
  for (const raw of list) {
    if (!raw || typeof raw.worker_id !== 'string') continue;
    const w = { ...raw, polledAt };
    const id = w.worker_id;
    next.set(id, w);
    state.leaseMax = Math.max(state.leaseMax, num(w.lease_remaining_ms));
    const p = prev.get(id);
    const job = w.state === 'scoring' && w.job_id ? w.job_id : null;
    const pjob = p && p.state === 'scoring' && p.job_id ? p.job_id : null;
    if (!diff) {
      if (!w.alive && job) state.orphans.set(job, { worker: id, phase: 'leased', at: polledAt });
      continue;
    }
    if (!p) {
      log(`${id} started${w.pid ? ` (pid ${w.pid}${w.host ? ` on ${w.host}` : ''})` : ''}`, 'good');
      if (job && w.alive) noteLeased(id, job);
      continue;
    }
    if (p.alive && !w.alive) {
      // A killed worker wrote down what it was scoring as it died; otherwise the last poll
      // is the best guess.
      const held = Array.isArray(w.killed_holding) ? w.killed_holding
        : (pjob || job ? [pjob || job] : []);
      log(`${id} died (${w.exit_reason || 'heartbeat lost'})${held.length ? ` while scoring ${held.join(', ')}` : ''}`, 'bad');
      for (const jobId of held) {
        state.orphans.set(jobId, { worker: id, phase: 'leased', at: polledAt });
        log(`${jobId} still leased to dead ${id} — waiting for the reaper`, 'warn');
      }
      continue;
    }
    if (!p.alive && w.alive) log(`${id} is alive again`, 'good');
    if (!w.alive) continue;
    if (pjob && pjob !== job) {
      const done = num(w.jobs_done) > num(p.jobs_done);
      if (done) {
        const o = state.orphans.get(pjob);
        log(o ? `${pjob} scored by ${id} (recovered after ${o.worker} died)` : `${pjob} scored by ${id}`, 'good');
      } else {
        log(`${id} let go of ${pjob}`, 'warn');
      }
      if (done) state.orphans.delete(pjob);
    }
    if (job && job !== pjob) noteLeased(id, job);
  }
  if (diff) {
    for (const [id, p] of prev) {
      if (next.has(id) || !p.alive) continue;
      const held = p.state === 'scoring' && p.job_id ? p.job_id : null;
      log(`${id} left the registry${held ? ` while scoring ${held}` : ''}`, held ? 'bad' : 'warn');
      if (held) state.orphans.set(held, { worker: id, phase: 'leased', at: polledAt });
    }
  }
  // Orphans are followed for five minutes at most.
  for (const [job, o] of state.orphans) if (polledAt - o.at > 300000) state.orphans.delete(job);
  state.workers = next;
  renderWorkers();
}

function noteLeased(workerId, job) {
  const o = state.orphans.get(job);
  if (o && o.worker !== workerId) {
    if (o.phase === 'leased') {
      log(`${job} reclaimed from dead ${o.worker}`, 'warn');
      state.reclaimCredit += 1;
    }
    log(`${workerId} scoring ${job} (taken over from ${o.worker})`, 'info');
    o.phase = 'rescoring';
    o.by = workerId;
  } else {
    log(`${workerId} scoring ${job}`, 'info');
  }
}

function leaseLeft(w, now = Date.now()) {
  if (w.state !== 'scoring' || w.lease_remaining_ms === null || w.lease_remaining_ms === undefined) return null;
  return num(w.lease_remaining_ms) - (now - w.polledAt);
}

function renderWorkers() {
  const rows = [...state.workers.values()].sort((a, b) =>
    (Number(!!b.alive) - Number(!!a.alive)) || String(a.worker_id).localeCompare(String(b.worker_id)));
  const now = Date.now();
  const items = rows.map((w) => {
    const fl = state.flashes.get(w.worker_id);
    const flashText = fl && fl.until > now ? fl.text : '';
    return {
      key: w.worker_id,
      sig: JSON.stringify([w.state, w.job_id, w.alive, w.jobs_done, w.exit_reason, w.killed_holding, w.pid, w.host, flashText]),
      build: () => buildWorkerRow(w, flashText, fl && fl.kind),
    };
  });
  const tbody = $('workers');
  syncList(tbody, items);
  // The lease countdown is interpolated between polls: hand each row its fresh reading.
  for (const tr of tbody.children) {
    const w = state.workers.get(tr.dataset.key);
    if (w) tr._worker = w;
  }
  tickLeases();
  $('workers-empty').hidden = rows.length > 0;
  const alive = rows.filter((w) => w.alive).length;
  const scoring = rows.filter((w) => w.alive && w.state === 'scoring').length;
  $('workers-summary').textContent = `${alive} alive · ${scoring} scoring${rows.length > alive ? ` · ${rows.length - alive} dead` : ''}`;
}

function buildWorkerRow(w, flashText, flashKind) {
  const alive = !!w.alive;
  const scoring = w.state === 'scoring' && !!w.job_id;
  const stateText = alive ? (w.state || 'idle') : 'dead';
  const tr = h('tr', {
    class: `worker-row${alive ? '' : ' dead'}${scoring ? ' scoring' : ''}`,
    dataset: {
      testid: 'worker-row',
      workerId: w.worker_id,
      state: String(w.state || ''),
      alive: String(alive),
    },
  });
  tr._worker = w;
  const killBtn = alive
    ? h('button', {
      type: 'button',
      class: 'small danger',
      'aria-label': `Kill worker ${w.worker_id}`,
      dataset: { testid: 'kill', workerId: w.worker_id },
      onclick: (ev) => kill(w.worker_id, ev.currentTarget),
    }, 'Kill')
    : null;
  tr.append(
    h('td', { class: 'mono wid' }, w.worker_id),
    h('td', {}, h('span', { class: `pill ${alive ? w.state || 'idle' : 'dead'}` }, stateText),
      !alive && w.exit_reason ? h('div', { class: 'muted small-text' }, String(w.exit_reason)) : null,
      !alive && Array.isArray(w.killed_holding) && w.killed_holding.length
        ? h('div', { class: 'muted small-text', 'data-testid': 'killed-holding' },
          `while scoring ${w.killed_holding.join(', ')}`) : null),
    h('td', { class: 'mono job' }, scoring ? w.job_id : h('span', { class: 'muted' }, '—')),
    h('td', { class: 'lease-col' }, scoring
      ? h('div', { class: 'lease', role: 'progressbar', 'aria-label': 'Lease remaining', 'aria-valuemin': '0', 'aria-valuemax': String(state.leaseMax) },
        h('div', { class: 'lease-bar' }, h('div', { class: 'lease-fill' })),
        h('span', { class: 'lease-text mono' }, ''))
      : h('span', { class: 'muted' }, '—')),
    h('td', { class: 'num' }, String(num(w.jobs_done))),
    h('td', { class: 'muted small-text proc' }, w.pid ? `pid ${w.pid}` : '', w.host ? h('div', {}, String(w.host)) : null),
    h('td', { class: 'row-actions' }, killBtn,
      flashText ? h('span', { class: `row-flash ${flashKind || 'good'}`, role: 'status' }, flashText) : null),
  );
  return tr;
}

function tickLeases() {
  const now = Date.now();
  for (const tr of $('workers').children) {
    const w = tr._worker;
    const bar = tr.querySelector('.lease');
    if (!w || !bar) continue;
    const left = leaseLeft(w, now);
    const fill = bar.querySelector('.lease-fill');
    const text = bar.querySelector('.lease-text');
    if (left === null) continue;
    const clamped = Math.max(0, left);
    const frac = Math.min(1, clamped / state.leaseMax);
    fill.style.width = `${(frac * 100).toFixed(1)}%`;
    bar.dataset.level = frac < 0.25 ? 'low' : frac < 0.5 ? 'mid' : 'ok';
    bar.setAttribute('aria-valuenow', String(Math.round(clamped)));
    const t = left > 0 ? `${(clamped / 1000).toFixed(1)} s` : (w.alive ? 'renewing…' : 'expired');
    if (text.textContent !== t) text.textContent = t;
  }
  // Expired flashes disappear.
  let expired = false;
  for (const [id, f] of state.flashes) {
    if (f.until <= now) { state.flashes.delete(id); expired = true; }
  }
  if (expired) renderWorkers();
}

async function kill(workerId, btn) {
  if (btn) btn.disabled = true;
  try {
    await api(`/api/admin/workers/${encodeURIComponent(workerId)}/kill`, { method: 'POST' });
    const w = state.workers.get(workerId);
    const job = w && w.state === 'scoring' ? w.job_id : null;
    state.flashes.set(workerId, { text: 'killed', until: Date.now() + FLASH_MS, kind: 'bad' });
    flash('workers-flash', `killed ${workerId}`, 'bad');
    log(`Kill sent to ${workerId}${job ? ` (scoring ${job})` : ''}`, 'bad');
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    if (e.status === 401) { signOut('That admin token was refused — paste it again.'); return; }
    const text = e.status === 404 ? 'unknown worker' : e.status === 409 ? 'already dead' : e.transient ? 'server unavailable' : (e.detail || e.code);
    state.flashes.set(workerId, { text, until: Date.now() + FLASH_MS, kind: 'warn' });
    flash('workers-flash', `${workerId}: ${text}`, 'warn');
  } finally {
    if (btn && btn.isConnected) btn.disabled = false;
  }
  renderWorkers();
}

async function addWorker() {
  const btn = $('add-worker');
  btn.disabled = true;
  try {
    const { data } = await api('/api/admin/workers', { method: 'POST' });
    const id = data && data.worker_id;
    flash('workers-flash', id ? `added ${id}` : 'worker added', 'good');
    log(`Add worker requested${id ? `: ${id}` : ''}`, 'good');
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    if (e.status === 401) { signOut('That admin token was refused — paste it again.'); return; }
    flash('workers-flash', e.status === 409 ? 'no supervisor here' : e.transient ? 'server unavailable, try again' : (e.detail || e.code), 'warn');
  } finally {
    btn.disabled = false;
  }
}

// ---------------------------------------------------------------- queue, lanes, sparkline

const STATE_COUNTS = ['pending', 'active', 'scheduled', 'completed', 'dead'];

function applyQueue(q, polledAt) {
  const counters = q.counters && typeof q.counters === 'object' ? q.counters : {};
  const prev = state.counters;
  if (prev && !state.first) diffCounters(prev, counters);
  state.counters = { ...counters };
  const prevQueue = state.queue;
  state.queue = q;
  renderCounters(q, counters, prevQueue, prev);
  renderLanes(q.lanes);
  const scored = counters.scored ?? counters.completed ?? q.completed;
  if (scored !== undefined) recordSample(num(scored), polledAt);
  $('queue-updated').textContent = `updated ${fmtTime(new Date(polledAt))}`;
}

function diffCounters(prev, cur) {
  const reclaimName = 'reclaimed' in cur ? 'reclaimed' : 'reaped' in cur ? 'reaped' : null;
  if (reclaimName) {
    let delta = num(cur[reclaimName]) - num(prev[reclaimName]);
    const credited = Math.min(Math.max(0, delta), state.reclaimCredit);
    state.reclaimCredit -= credited;
    delta -= credited;
    if (delta > 0) {
      // Name the orphans we know of, oldest first; count the rest.
      const waiting = [...state.orphans.entries()].filter(([, o]) => o.phase === 'leased').sort((a, b) => a[1].at - b[1].at);
      for (const [job, o] of waiting) {
        if (delta <= 0) break;
        log(`${job} reclaimed — the lease of dead ${o.worker} returned it to its lane`, 'warn');
        o.phase = 'reclaimed';
        delta -= 1;
      }
      if (delta > 0) log(`${delta} job${delta === 1 ? '' : 's'} reclaimed`, 'warn');
    }
  }
  for (const [name, value] of Object.entries(cur)) {
    if (name === reclaimName) continue;
    if (!/stale|dead|fail|expire|reap|reclaim|retr|kill|lost|poison/i.test(name)) continue;
    const d = num(value) - num(prev[name]);
    if (d > 0) log(`${name.replace(/_/g, ' ')} +${d}`, /dead|fail|lost|poison/i.test(name) ? 'bad' : 'warn');
  }
}

function renderCounters(q, counters, prevQueue, prevCounters) {
  const tile = (label, value, prevValue, attrs) => {
    const d = prevValue === undefined || prevValue === null ? 0 : num(value) - num(prevValue);
    return h('div', { class: 'counter', ...attrs },
      h('span', { class: 'counter-value' }, num(value).toLocaleString()),
      h('span', { class: 'counter-label' }, label.replace(/_/g, ' ')),
      d ? h('span', { class: `counter-delta ${d > 0 ? 'up' : 'down'}` }, `${d > 0 ? '+' : ''}${d.toLocaleString()}`) : null);
  };
  const box = $('queue-counters');
  const stateTiles = STATE_COUNTS.filter((k) => q[k] !== undefined).map((k) =>
    tile(k, q[k], prevQueue ? prevQueue[k] : null, { class: `counter state ${k}`, dataset: { stateCount: k } }));
  const names = Object.keys(counters).sort((a, b) => {
    const order = ['accepted', 'scored', 'stale_refused', 'reclaimed', 'dead'];
    const ia = order.indexOf(a); const ib = order.indexOf(b);
    return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || a.localeCompare(b);
  });
  const counterTiles = names.map((k) => tile(k, counters[k], prevCounters ? prevCounters[k] : null, { dataset: { counter: k } }));
  box.replaceChildren(
    h('div', { class: 'counter-group', role: 'group', 'aria-label': 'Jobs by state' }, stateTiles),
    counterTiles.length ? h('div', { class: 'counter-group', role: 'group', 'aria-label': 'Counters' }, counterTiles) : null,
  );
}

function renderLanes(raw) {
  let lanes = [];
  if (Array.isArray(raw)) lanes = raw.filter((l) => l && l.lane !== undefined).map((l) => ({ lane: String(l.lane), depth: num(l.depth) }));
  else if (raw && typeof raw === 'object') lanes = Object.entries(raw).map(([lane, depth]) => ({ lane, depth: num(depth) }));
  lanes = lanes.filter((l) => l.depth > 0).sort((a, b) => b.depth - a.depth || a.lane.localeCompare(b.lane));
  const top = lanes.slice(0, 20);
  const max = Math.max(1, ...top.map((l) => l.depth));
  const items = top.map((l) => ({
    key: l.lane,
    sig: `${l.depth}|${max}`,
    build: () => {
      const fill = h('div', { class: 'lane-fill' });
      fill.style.width = `${((l.depth / max) * 100).toFixed(1)}%`;
      return h('li', { class: 'lane', dataset: { testid: 'lane', lane: l.lane, depth: String(l.depth) } },
        h('span', { class: 'lane-name mono', title: l.lane }, l.lane),
        h('div', { class: 'lane-bar', 'aria-hidden': 'true' }, fill),
        h('span', { class: 'lane-depth num' }, String(l.depth)));
    },
  }));
  syncList($('lanes'), items);
  $('lanes-empty').hidden = top.length > 0;
  const total = lanes.reduce((s, l) => s + l.depth, 0);
  $('lanes-summary').textContent = lanes.length
    ? `${lanes.length} busy lane${lanes.length === 1 ? '' : 's'} · ${total} queued${lanes.length > 20 ? ' · top 20' : ''}` : '';
}

function recordSample(v, t) {
  const last = state.lastSample;
  if (last && t > last.t && v >= last.v) state.rates.push({ t, r: ((v - last.v) * 1000) / (t - last.t) });
  state.lastSample = { t, v };
  state.rates = state.rates.filter((p) => p.t >= t - SPARK_WINDOW_MS);
  renderSparkline(t);
}

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

function renderSparkline(now) {
  const W = 300;
  const H = 80;
  const pad = 4;
  const el = $('sparkline');
  const pts = state.rates;
  const max = Math.max(1, ...pts.map((p) => p.r));
  const xy = pts.map((p) => [
    W - ((now - p.t) / SPARK_WINDOW_MS) * W,
    H - pad - (p.r / max) * (H - 2 * pad),
  ]);
  const kids = [
    svg('line', { x1: 0, y1: H - pad, x2: W, y2: H - pad, class: 'spark-base' }),
  ];
  if (xy.length >= 2) {
    const line = xy.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(' ');
    kids.push(svg('polygon', { points: `${xy[0][0].toFixed(1)},${H - pad} ${line} ${xy[xy.length - 1][0].toFixed(1)},${H - pad}`, class: 'spark-area' }));
    kids.push(svg('polyline', { points: line, class: 'spark-line' }));
  }
  if (xy.length >= 1) {
    const [x, y] = xy[xy.length - 1];
    kids.push(svg('circle', { cx: x.toFixed(1), cy: y.toFixed(1), r: 3, class: 'spark-dot' }));
  }
  el.replaceChildren(...kids);
  const current = pts.length ? pts[pts.length - 1].r : 0;
  el.dataset.rate = current.toFixed(2);
  el.setAttribute('aria-label', `Scored jobs per second over the last 60 seconds; now ${current.toFixed(1)}, peak ${max.toFixed(1)}`);
  $('spark-now').textContent = `${current.toFixed(1)} scored/s`;
  $('spark-max').textContent = pts.length ? `peak ${Math.max(...pts.map((p) => p.r)).toFixed(1)}/s` : '';
}

// ---------------------------------------------------------------- dead jobs

function deadList(d) {
  if (Array.isArray(d)) return d;
  if (d && typeof d === 'object') {
    for (const k of ['jobs', 'dead', 'items', 'dead_jobs']) if (Array.isArray(d[k])) return d[k];
  }
  return [];
}

function applyDead(d) {
  const jobs = deadList(d).filter((j) => j && typeof j.job_id === 'string');
  const ids = new Set(jobs.map((j) => j.job_id));
  if (state.deadIds && !state.first) {
    for (const j of jobs) {
      if (!state.deadIds.has(j.job_id)) log(`${j.job_id} dead: ${j.reason || j.error || 'out of attempts'}`, 'bad');
    }
  }
  state.deadIds = ids;
  const items = jobs.slice(0, 200).map((j) => ({
    key: j.job_id,
    sig: JSON.stringify([j.lane, j.error, j.reason, j.attempts, j.payload]),
    build: () => buildDeadRow(j),
  }));
  syncList($('dead-jobs'), items);
  $('dead-empty').hidden = jobs.length > 0;
  $('dead-summary').textContent = jobs.length ? `${jobs.length} on the floor${jobs.length > 200 ? ' · first 200' : ''}` : '';
}

function buildDeadRow(j) {
  let payload = '';
  try { payload = JSON.stringify(j.payload, null, 1) ?? ''; } catch { payload = String(j.payload); }
  const field = (label, value, cls = '') => h('div', { class: `dead-field ${cls}` },
    h('span', { class: 'dead-label' }, label), h('span', { class: 'dead-value' }, value === undefined || value === null || value === '' ? '—' : String(value)));
  return h('li', { class: 'dead-job', dataset: { testid: 'dead-job', jobId: j.job_id } },
    h('div', { class: 'dead-head' },
      h('span', { class: 'mono dead-id' }, j.job_id),
      h('div', { class: 'dead-actions' },
        h('button', {
          type: 'button', class: 'small', 'aria-label': `Retry dead job ${j.job_id}`,
          dataset: { testid: 'retry' }, onclick: (ev) => deadAction(j.job_id, 'retry', ev.currentTarget),
        }, 'Retry'),
        h('button', {
          type: 'button', class: 'small danger', 'aria-label': `Discard dead job ${j.job_id}`,
          dataset: { testid: 'discard' }, onclick: (ev) => deadAction(j.job_id, 'discard', ev.currentTarget),
        }, 'Discard'))),
    h('div', { class: 'dead-fields' },
      field('lane', j.lane, 'mono'),
      field('attempts', j.attempts),
      field('reason', j.reason),
      field('error', j.error)),
    payload ? h('details', { class: 'dead-payload' }, h('summary', {}, 'payload'), h('pre', { class: 'mono' }, payload)) : null);
}

async function deadAction(jobId, action, btn) {
  if (btn) btn.disabled = true;
  const path = `/api/admin/dead/${encodeURIComponent(jobId)}${action === 'retry' ? '/retry' : ''}`;
  try {
    await api(path, { method: action === 'retry' ? 'POST' : 'DELETE' });
    flash('dead-flash', `${action === 'retry' ? 'retried' : 'discarded'} ${jobId}`, 'good');
    log(`${jobId} ${action === 'retry' ? 'retried — back on its lane' : 'discarded'} by the operator`, action === 'retry' ? 'good' : 'warn');
    const row = $('dead-jobs').querySelector(`[data-key="${CSS.escape(jobId)}"]`);
    if (row) row.remove();
    if (state.deadIds) state.deadIds.delete(jobId);
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    if (e.status === 401) { signOut('That admin token was refused — paste it again.'); return; }
    flash('dead-flash', `${jobId}: ${e.status === 404 ? 'already gone' : e.transient ? 'server unavailable' : (e.detail || e.code)}`, 'warn');
    if (btn && btn.isConnected) btn.disabled = false;
  }
}

// ---------------------------------------------------------------- boot

function boot() {
  $('login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const token = $('admin-token').value.trim();
    if (!token) {
      showText($('login-error'), 'Paste the admin token first.');
      return;
    }
    $('admin-token').value = '';
    signIn(token);
  });
  $('admin-logout').addEventListener('click', () => signOut(null));
  $('add-worker').addEventListener('click', addWorker);
  $('log-clear').addEventListener('click', () => $('event-log').replaceChildren());
  setInterval(tickLeases, 100);

  let saved = null;
  try { saved = sessionStorage.getItem(TOKEN_KEY); } catch { /* storage blocked */ }
  if (saved) signIn(saved);
  else showLogin(null);
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', boot);
else boot();
