// app.js — the Codemojex player page.
//
// State flows one way: HTTP answers and websocket messages update `state`, then render*()
// functions bring the DOM in line. Guesses are keyed by job_id, so a score that arrives twice
// (replay after a reconnect, a refetch racing a live message) is shown once.

import { request, ApiError, onServerDate, h, randomId, shortId, showText, syncList } from './api.js';
import { LiveSocket } from './socket.js';

const PLAYER_KEY = 'codemojex.player';
const DEFAULT_PALETTE = ['🍎', '🍌', '🍇', '🍒', '🥝', '🍋', '🫐', '🍑'];
const WS_ACK_TIMEOUT_MS = 5000;   // no `accepted` by then: resend over HTTP with the same key
const ROUND_REFETCH_MS = 3000;    // no new round this long after a close: ask GET /api/round
const OFFLINE_POLL_MS = 4000;     // socket down: poll our guesses this often
const HTTP_RETRIES = 4;
const REVEAL_BIG_MS = 8000;       // the secret stays big this long, even once the next round opened
const PROGRESS_LEADERS = 20;      // the contract's bound on a progress message's rows: more are cut, not shown
const PROGRESS_ROUNDS_KEPT = 3;   // late scores of a closed round keep coming after the next one opened

const $ = (id) => document.getElementById(id);
const bootAt = Date.now();

const state = {
  player: null,            // {player_id, name, token}
  config: { length: 4, palette: DEFAULT_PALETTE },
  round: null,             // {round_id, length, palette, opens_at, closes_at, state, secret?}
  roundClosedSeenAt: 0,    // local ms when we learned the current round closed
  reveal: null,            // {round_id, secret, solvers?}
  revealed: new Set(),     // round ids whose secret we already showed
  composing: [],
  guesses: new Map(),      // job_id -> {job_id, round_id, seq, guess, score|null, jobState}
  sending: new Map(),      // client_id -> {client_id, round_id, guess, via, timer, attempts}
  sentByClient: new Map(), // client_id -> {round_id, guess}: lets a late `accepted` still show
  progress: new Map(),     // round_id -> {playing, guesses, solved, leaders: [row…]}, the last message, last few rounds
  leaderboard: [],
  lastEventId: null,
  clockOffset: null,       // server ms − local ms (best lower bound seen)
  lastRoundFetch: 0,
  lastGuessPoll: 0,
  errorTimer: null,
};

// ---------------------------------------------------------------- server clock

/** Every server time we see is ≤ the server's now, so the largest (t − local now) is the best estimate. */
function observeServerTime(ms) {
  if (typeof ms !== 'number' || !Number.isFinite(ms)) return;
  const off = ms - Date.now();
  if (state.clockOffset === null || off > state.clockOffset) state.clockOffset = off;
}
function serverNow() {
  return Date.now() + (state.clockOffset ?? 0);
}
onServerDate(observeServerTime);

// ---------------------------------------------------------------- storage

function loadPlayer() {
  try {
    const p = JSON.parse(localStorage.getItem(PLAYER_KEY) || 'null');
    if (p && typeof p.token === 'string' && typeof p.player_id === 'string') return p;
  } catch { /* unreadable or blocked storage */ }
  return null;
}
function savePlayer(p) {
  try { localStorage.setItem(PLAYER_KEY, JSON.stringify(p)); } catch { /* private mode */ }
}
function forgetPlayer() {
  try { localStorage.removeItem(PLAYER_KEY); } catch { /* ignore */ }
}

// ---------------------------------------------------------------- banner, errors, status

function setBanner(text) {
  showText($('banner'), text);
}

function showError(text, retryAfter = null) {
  const el = $('error');
  clearInterval(state.errorTimer);
  state.errorTimer = null;
  delete el.dataset.code;
  if (!text) {
    el.hidden = true;
    el.textContent = '';
    return;
  }
  el.hidden = false;
  if (retryAfter && retryAfter > 0) {
    const until = Date.now() + retryAfter * 1000;
    const tick = () => {
      const left = Math.ceil((until - Date.now()) / 1000);
      if (left <= 0) { showError(null); return; }
      el.textContent = `${text} Try again in ${left} s.`;
    };
    tick();
    state.errorTimer = setInterval(tick, 250);
  } else {
    el.textContent = text;
  }
}

function explain(code, detail, retryAfter) {
  switch (code) {
    case 'lane_full':
      return { text: 'Slow down — too many of your guesses are still being scored.', retryAfter: retryAfter ?? 3 };
    case 'rate_limited':
      // Throttled: the guess is back in the composer, one key press sends it again.
      return { text: 'Slow down — you are guessing faster than the game allows.', retryAfter: retryAfter ?? 1 };
    case 'round_closed':
      return { text: 'That round has closed — a new one starts right away.' };
    case 'invalid_guess':
      return { text: `That guess is not valid${detail ? `: ${detail}` : '.'}` };
    case 'idempotency_conflict':
      return { text: 'That guess clashed with an earlier submission; please try again.' };
    case 'unavailable':
    case 'timeout':
    case 'network':
      return { text: 'Server unavailable — your guess was not sent.', retryAfter };
    case 'not_found':
      return { text: 'That round is unknown to the server; refreshing.' };
    default:
      return { text: detail ? `Error: ${detail}` : `Error: ${code}` };
  }
}

function setConnStatus(status) {
  const el = $('conn-status');
  el.dataset.state = status;
  el.textContent = {
    live: 'live',
    connecting: 'connecting…',
    reconnecting: 'reconnecting…',
    offline: 'offline',
  }[status] || status;
}

// ---------------------------------------------------------------- rounds

function roundIsOpen() {
  const r = state.round;
  return !!r && r.state !== 'closed' && serverNow() < r.closes_at;
}

function applyConfig(r) {
  if (Number.isInteger(r.length) && r.length > 0) state.config.length = r.length;
  if (Array.isArray(r.palette) && r.palette.length) state.config.palette = r.palette.map(String);
}

/** A round from GET /api/round or a `round` message. */
function applyRound(r) {
  if (!r || typeof r.round_id !== 'string') return;
  applyConfig(r);
  observeServerTime(r.opens_at);
  const cur = state.round;

  if (r.state === 'closed') {
    observeServerTime(r.closes_at); // we hear of a close only after it happened
    if (!cur || cur.round_id === r.round_id) {
      state.round = { ...state.config, ...(cur || {}), ...r, state: 'closed' };
      state.roundClosedSeenAt = Date.now();
    }
    if (Array.isArray(r.secret)) revealSecret(r.round_id, r.secret);
    else fetchClosedRound(r.round_id);
    renderAll();
    return;
  }

  // An open round. A late answer about an older round (or about this one, from before its
  // close) must not take the page back in time.
  if (cur && cur.round_id !== r.round_id && Number(r.opens_at) < Number(cur.opens_at)) return;
  if (cur && cur.round_id === r.round_id) {
    if (cur.state === 'closed') return;
    Object.assign(cur, r);
    renderRound();
    return;
  }
  if (cur && !state.revealed.has(cur.round_id)) {
    // We missed the close of the round we were showing: ask for its secret.
    fetchClosedRound(cur.round_id);
  }
  // Right after loading, a round change may hide guesses we made before the reload: fetch them.
  const fetchMine = !cur || Date.now() - bootAt < 15000;
  state.round = { ...state.config, ...r, state: 'open' };
  state.composing = [];
  showError(null);
  renderAll();
  if (fetchMine && state.player) refetchGuesses();
}

async function fetchRound() {
  state.lastRoundFetch = Date.now();
  try {
    const { data } = await request('/api/round');
    setBanner(null);
    applyRound(data);
  } catch (e) {
    if (e instanceof ApiError && e.transient) setBanner('Server unavailable, retrying…');
  }
}

async function fetchClosedRound(roundId) {
  if (state.revealed.has(roundId)) return;
  try {
    const { data } = await request(`/api/rounds/${encodeURIComponent(roundId)}`);
    if (data && data.state === 'closed' && Array.isArray(data.secret)) {
      revealSecret(roundId, data.secret, data.solvers);
    }
  } catch { /* the next close will reveal instead */ }
}

function revealSecret(roundId, secret, solvers) {
  state.revealed.add(roundId);
  // Ids sort by mint time: never replace a newer round's secret with an older one's.
  if (state.reveal && roundId < state.reveal.round_id) return;
  if (state.reveal && roundId === state.reveal.round_id) {
    if (Array.isArray(solvers)) { state.reveal.solvers = solvers; renderReveal(); }
    return;
  }
  state.reveal = {
    round_id: roundId,
    secret: secret.map(String),
    solvers: Array.isArray(solvers) ? solvers : null,
    shownAt: Date.now(),
  };
  renderReveal();
  setTimeout(renderReveal, REVEAL_BIG_MS + 50);
}

// ---------------------------------------------------------------- guesses

function mergeGuessList(list) {
  if (!Array.isArray(list)) return;
  for (const g of list) {
    if (!g || typeof g.job_id !== 'string') continue;
    const have = state.guesses.get(g.job_id);
    if (have && have.score) continue; // a score never goes back to pending
    const score = g.score && typeof g.score === 'object' ? normScore(g.score) : null;
    state.guesses.set(g.job_id, {
      job_id: g.job_id,
      round_id: g.round_id,
      seq: g.seq,
      guess: Array.isArray(g.guess) ? g.guess.map(String) : (have ? have.guess : []),
      score,
      jobState: g.state || null,
    });
  }
}

function normScore(s) {
  return {
    exact: Number(s.exact) || 0,
    near: Number(s.near) || 0,
    solved: !!s.solved,
    points: Number(s.points) || 0,
  };
}

async function refetchGuesses() {
  if (!state.player || !state.round) return;
  state.lastGuessPoll = Date.now();
  const roundId = state.round.round_id;
  try {
    const { data } = await request(`/api/guesses?round_id=${encodeURIComponent(roundId)}`, { token: state.player.token });
    mergeGuessList(data && data.guesses);
    renderGuesses();
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) leave('Your session has expired — please join again.');
  }
}

async function fetchLeaderboard() {
  try {
    const { data } = await request('/api/leaderboard');
    if (data && Array.isArray(data.players)) {
      state.leaderboard = data.players;
      renderLeaderboard();
    }
  } catch { /* the websocket will send one */ }
}

function applyScore(m) {
  if (typeof m.job_id !== 'string') return;
  if (state.player && m.player_id && m.player_id !== state.player.player_id) return;
  const have = state.guesses.get(m.job_id);
  if (have && have.score) return; // de-duplicate by job_id
  const g = {
    job_id: m.job_id,
    round_id: m.round_id ?? (have && have.round_id),
    seq: m.seq ?? (have && have.seq),
    guess: Array.isArray(m.guess) ? m.guess.map(String) : (have ? have.guess : []),
    score: normScore(m),
    jobState: 'completed',
  };
  state.guesses.set(m.job_id, g);
  renderGuesses();
}

function applyAccepted(clientId, jobId, seq) {
  if (typeof jobId !== 'string') return;
  const s = state.sending.get(clientId);
  if (s) {
    clearTimeout(s.timer);
    state.sending.delete(clientId);
  }
  const sent = s || state.sentByClient.get(clientId);
  if (!state.guesses.has(jobId) && sent) {
    state.guesses.set(jobId, { job_id: jobId, round_id: sent.round_id, seq, guess: sent.guess, score: null, jobState: 'pending' });
  } else if (state.guesses.has(jobId)) {
    const g = state.guesses.get(jobId);
    if (g.seq === undefined || g.seq === null) g.seq = seq;
  }
  renderGuesses();
}

function sendFailed(clientId, code, detail, retryAfter) {
  const s = state.sending.get(clientId);
  if (!s) return;
  clearTimeout(s.timer);
  state.sending.delete(clientId);
  if (code === 'unauthorized') { leave('Your session has expired — please join again.'); return; }
  // Give the guess back so it can be sent again with one key press.
  if (state.composing.length === 0 && state.round && s.round_id === state.round.round_id) {
    state.composing = s.guess.slice();
  }
  const { text, retryAfter: ra } = explain(code, detail, retryAfter);
  showError(text, ra);
  if (code) $('error').dataset.code = code; // throttling reads as a notice, not a failure
  if (code === 'round_closed' || code === 'not_found') fetchRound();
  renderComposer();
  renderGuesses();
}

function submitGuess() {
  const r = state.round;
  if (!state.player) return;
  if (!r || !roundIsOpen()) {
    showError('This round has closed — wait for the next one.');
    return;
  }
  const length = r.length || state.config.length;
  if (state.composing.length !== length) {
    showError(`Pick ${length} emojis first (${state.composing.length}/${length}).`);
    return;
  }
  showError(null);
  const entry = {
    client_id: randomId('c_'),
    round_id: r.round_id,
    guess: state.composing.slice(),
    via: null,
    timer: null,
    attempts: 0,
  };
  state.sending.set(entry.client_id, entry);
  state.sentByClient.set(entry.client_id, { round_id: entry.round_id, guess: entry.guess });
  if (state.sentByClient.size > 500) state.sentByClient.delete(state.sentByClient.keys().next().value);
  state.composing = [];
  renderComposer();
  renderGuesses();
  dispatch(entry);
}

function dispatch(entry) {
  const msg = { type: 'guess', round_id: entry.round_id, guess: entry.guess, client_id: entry.client_id };
  if (sock.send(msg)) {
    entry.via = 'ws';
    entry.timer = setTimeout(() => {
      if (state.sending.has(entry.client_id)) postGuess(entry);
    }, WS_ACK_TIMEOUT_MS);
  } else {
    postGuess(entry);
  }
}

/** POST /api/guesses with client_id as the Idempotency-Key, so a resend can never count twice. */
async function postGuess(entry) {
  if (!state.player || !state.sending.has(entry.client_id)) return;
  clearTimeout(entry.timer);
  entry.via = 'http';
  try {
    const { data } = await request('/api/guesses', {
      method: 'POST',
      token: state.player.token,
      body: { round_id: entry.round_id, guess: entry.guess },
      headers: { 'Idempotency-Key': entry.client_id },
    });
    setBanner(null);
    applyAccepted(entry.client_id, data && data.job_id, data && data.seq);
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    if (e.transient && entry.attempts < HTTP_RETRIES && state.sending.has(entry.client_id)) {
      entry.attempts += 1;
      const wait = e.retryAfter ? e.retryAfter * 1000 : 500 * 2 ** entry.attempts;
      setBanner('Server unavailable, retrying…');
      entry.timer = setTimeout(() => postGuess(entry), Math.min(wait, 8000));
      return;
    }
    sendFailed(entry.client_id, e.code, e.detail, e.retryAfter);
  }
}

// ---------------------------------------------------------------- websocket

function socketUrl() {
  // The token travels as a subprotocol (socketProtocols), not in the URL, where servers
  // and proxies log it.
  const u = new URL('/ws', location.href);
  u.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
  if (state.lastEventId !== null && state.lastEventId !== undefined) u.searchParams.set('after', String(state.lastEventId));
  return u.toString();
}

function handleMessage(m) {
  if (m.event_id !== undefined && m.event_id !== null) state.lastEventId = m.event_id;
  switch (m.type) {
    case 'round':
      applyRound(m);
      break;
    case 'leaderboard':
      if (Array.isArray(m.players)) {
        state.leaderboard = m.players;
        renderLeaderboard();
      }
      break;
    case 'score':
      applyScore(m);
      break;
    case 'progress':
      applyProgress(m);
      break;
    case 'accepted':
      applyAccepted(m.client_id, m.job_id, m.seq);
      break;
    case 'error':
      if (m.client_id) {
        // An answer for a guess already settled (say, over HTTP after a slow socket) changes nothing.
        if (state.sending.has(m.client_id)) sendFailed(m.client_id, m.error, m.detail, m.retry_after ?? null);
      } else if (m.error === 'unauthorized') {
        leave('Your session has expired — please join again.');
      } else if (m.error) {
        showError(explain(m.error, m.detail).text);
      }
      break;
    case 'gap':
      refetchGuesses();
      fetchLeaderboard();
      break;
    default:
      break; // pings and future message types
  }
}

function socketProtocols() {
  return ['codemojex', 'codemojex.token.' + (state.player ? state.player.token : '')];
}

const sock = new LiveSocket({
  url: socketUrl,
  protocols: socketProtocols,
  onMessage: handleMessage,
  onStatus: setConnStatus,
  onOpen: () => {
    setBanner(null);
    // Covers anything scored while we were away that a replay could not (first connect, no after=).
    refetchGuesses();
  },
  onClose: ({ opened }) => {
    // Guesses sent on the dead socket and not yet acknowledged go again over HTTP, same key.
    for (const entry of state.sending.values()) {
      if (entry.via === 'ws') postGuess(entry);
    }
    // A refused upgrade (bad token → 403) looks like any failed connect; ask HTTP which it was.
    if (!opened) checkToken();
  },
});

async function checkToken() {
  if (!state.player) return;
  if (!state.round) await fetchRound(); // a new round refetches our guesses, which checks the token
  else await refetchGuesses();
}

// ---------------------------------------------------------------- progress

// Each message is the round's whole picture — counts over the whole field and its leaders,
// already in order — so it replaces the last one instead of merging into it: a player who
// fell out of the top rows must leave the list. Kept per round: late scores of the closed
// round keep coming after the next one opened.
function applyProgress(m) {
  if (typeof m.round_id !== 'string' || !Array.isArray(m.players)) return;
  const leaders = [];
  for (const p of m.players) {
    if (leaders.length >= PROGRESS_LEADERS) break;
    if (p && typeof p.player_id === 'string') leaders.push(progressRow(p));
  }
  // Map.set keeps a known round in its place, so a late message of an older round never
  // makes it look newer than the current one to the trim below (first seen, first dropped).
  state.progress.set(m.round_id, {
    playing: countOrNull(m.playing),
    guesses: countOrNull(m.guesses),
    solved: countOrNull(m.solved),
    leaders,
  });
  while (state.progress.size > PROGRESS_ROUNDS_KEPT) state.progress.delete(state.progress.keys().next().value);
  if (state.round && m.round_id === state.round.round_id) renderProgress();
}

/** A count the server sent, or null when it sent none (then the page shows none, not 0). */
function countOrNull(v) {
  return Number.isInteger(v) && v >= 0 ? v : null;
}

function progressRow(p) {
  return {
    player_id: p.player_id,
    name: String(p.name ?? ''),
    guesses: Number(p.guesses) || 0,
    scored: Number(p.scored) || 0,
    best_exact: Number(p.best_exact) || 0,
    best_near: Number(p.best_near) || 0,
    solved: !!p.solved,
  };
}

/** Our own row for a round, from our own guesses (GET /api/guesses and our `score` messages):
 * the leaders may not include us, and where they do they may lag our latest score. */
function myProgress(roundId) {
  let count = 0;
  let seqs = 0;
  let scored = 0;
  let best = [0, 0];
  let solved = false;
  for (const g of state.guesses.values()) {
    if (g.round_id !== roundId) continue;
    count += 1;
    if (Number.isInteger(g.seq)) seqs = Math.max(seqs, g.seq + 1);
    if (!g.score) continue;
    scored += 1;
    const { exact, near } = g.score;
    if (exact > best[0] || (exact === best[0] && near > best[1])) best = [exact, near];
    solved = solved || g.score.solved;
  }
  return {
    player_id: state.player.player_id,
    name: state.player.name,
    // seq numbers have no gaps, so seq + 1 also counts accepted guesses this tab never listed.
    guesses: Math.max(count, seqs),
    scored,
    best_exact: best[0],
    best_near: best[1],
    solved,
  };
}

/** Two views of the same player, each only ever behind: take the further of each figure. */
function furthest(a, b) {
  const aBest = a.best_exact > b.best_exact || (a.best_exact === b.best_exact && a.best_near >= b.best_near);
  return {
    ...a,
    guesses: Math.max(a.guesses, b.guesses),
    scored: Math.max(a.scored, b.scored),
    best_exact: aBest ? a.best_exact : b.best_exact,
    best_near: aBest ? a.best_near : b.best_near,
    solved: a.solved || b.solved,
  };
}

// ---------------------------------------------------------------- composing

function addEmoji(i) {
  const palette = (state.round && state.round.palette) || state.config.palette;
  const length = (state.round && state.round.length) || state.config.length;
  if (i < 0 || i >= palette.length) return;
  if (state.composing.length >= length) {
    bump($('guess-slots'));
    return;
  }
  state.composing.push(palette[i]);
  showError(null);
  renderComposer();
}

function removeLast() {
  if (state.composing.length === 0) return;
  state.composing.pop();
  renderComposer();
}

function removeAt(i) {
  if (i < state.composing.length) {
    state.composing.splice(i, 1);
    renderComposer();
  }
}

function bump(el) {
  el.classList.remove('bump');
  void el.offsetWidth; // restart the animation
  el.classList.add('bump');
}

// ---------------------------------------------------------------- rendering

function renderAll() {
  renderRound();
  renderComposer();
  renderGuesses();
  renderProgress();
  renderReveal();
}

let paletteShown = '';

function renderRound() {
  const r = state.round;
  $('round-id').textContent = r ? shortId(r.round_id) : '';
  $('round-id').title = r ? r.round_id : '';
  renderTimer();
  const palette = (r && r.palette) || state.config.palette;
  const key = palette.join('|');
  if (key !== paletteShown) {
    paletteShown = key;
    const box = $('palette');
    box.replaceChildren(...palette.map((emoji, i) => h('button', {
      type: 'button',
      class: 'key',
      'aria-label': `Add ${emoji}${i < 9 ? ` (key ${i + 1})` : ''}`,
      dataset: { testid: `key-${i}`, index: String(i) },
      onclick: () => addEmoji(i),
    }, h('span', { class: 'key-emoji', 'aria-hidden': 'true' }, emoji),
       i < 9 ? h('span', { class: 'key-num', 'aria-hidden': 'true' }, String(i + 1)) : null)));
  }
}

function renderComposer() {
  const r = state.round;
  const length = (r && r.length) || state.config.length;
  const slots = $('guess-slots');
  const kids = [];
  for (let i = 0; i < length; i++) {
    const emoji = state.composing[i];
    kids.push(h('button', {
      type: 'button',
      class: `slot${emoji ? ' filled' : ''}${i === state.composing.length ? ' next' : ''}`,
      'aria-label': emoji ? `Position ${i + 1}: ${emoji}, press to remove` : `Position ${i + 1}: empty`,
      disabled: !emoji,
      dataset: { index: String(i) },
      onclick: () => removeAt(i),
    }, emoji || ''));
  }
  slots.replaceChildren(...kids);
  slots.dataset.count = String(state.composing.length);
  slots.setAttribute('aria-label', `Your guess: ${state.composing.length} of ${length} chosen`);
  const open = roundIsOpen();
  const ready = open && state.composing.length === length;
  const submit = $('submit-guess');
  submit.classList.toggle('ready', ready);
  submit.setAttribute('aria-disabled', String(!ready));
  $('backspace').disabled = state.composing.length === 0;
  $('composer').classList.toggle('closed', !!r && !open);
}

let timerText = '';

function renderTimer() {
  const r = state.round;
  const el = $('round-timer');
  const fill = $('timebar-fill');
  const note = $('round-note');
  if (!r) {
    setText(el, '--:--');
    fill.style.width = '0%';
    return;
  }
  const now = serverNow();
  const left = r.closes_at - now;
  const span = Math.max(1, r.closes_at - r.opens_at);
  let text;
  if (r.state === 'closed' || left <= 0) {
    text = '0:00';
    el.dataset.state = 'closed';
    fill.style.width = '0%';
    const msg = r.state === 'closed' ? 'Round closed — the next one is starting…' : 'Closing…';
    if (note.textContent !== msg) note.textContent = msg;
    note.hidden = false;
  } else {
    const s = Math.ceil(left / 1000);
    text = `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
    el.dataset.state = left <= 10000 ? 'urgent' : 'open';
    fill.style.width = `${Math.min(100, Math.max(0, (left / span) * 100)).toFixed(2)}%`;
    note.hidden = true;
  }
  el.dataset.closesAt = String(r.closes_at);
  if (text !== timerText) {
    timerText = text;
    setText(el, text);
    // Announce the time only at a few moments, not every second.
    const s = Math.ceil(left / 1000);
    el.setAttribute('aria-label', left > 0 && r.state !== 'closed' ? `${s} seconds left in this round` : 'Round closed');
  }
  // Opening and closing flips the composer state.
  const closed = !roundIsOpen();
  if ($('composer').classList.contains('closed') !== closed) renderComposer();
}

function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

function pegs(score, length, testid = 'pegs') {
  const dots = [];
  for (let i = 0; i < score.exact; i++) dots.push(h('span', { class: 'peg exact' }));
  for (let i = 0; i < score.near; i++) dots.push(h('span', { class: 'peg near' }));
  for (let i = score.exact + score.near; i < length; i++) dots.push(h('span', { class: 'peg none' }));
  return h('span', {
    class: 'pegs',
    role: 'img',
    'aria-label': `${score.exact} exact, ${score.near} near`,
    dataset: { testid, exact: String(score.exact), near: String(score.near) },
  }, dots);
}

function guessRowSig(g) {
  return g.score ? `s${g.score.exact}.${g.score.near}.${g.score.points}` : `p${g.seq}.${g.jobState}`;
}

function buildGuessRow(g, length) {
  const seqText = Number.isInteger(g.seq) ? `#${g.seq + 1}` : '#…';
  const emojis = h('span', { class: 'emojis', 'aria-label': `Guess ${g.guess.join(' ')}` },
    g.guess.map((e) => h('span', { class: 'emoji', 'aria-hidden': 'true' }, e)));
  let tail;
  if (g.score) {
    tail = [
      pegs(g.score, length),
      g.score.solved
        ? h('span', { class: 'points solved', 'aria-label': `Solved, ${g.score.points} points` }, `🎉 +${g.score.points}`)
        : h('span', { class: 'points', 'aria-hidden': 'true' }, ''),
    ];
  } else if (g.jobState === 'dead') {
    tail = h('span', { class: 'status failed' }, 'could not be scored');
  } else {
    tail = h('span', { class: 'status pending' }, h('span', { class: 'spinner', 'aria-hidden': 'true' }), 'scoring…');
  }
  return h('li', {
    class: `guess-row ${g.score ? 'scored' : 'pending'}${g.score && g.score.solved ? ' solved' : ''}`,
    dataset: {
      testid: 'guess-row',
      jobId: g.job_id,
      state: g.score ? 'scored' : 'pending',
      seq: Number.isInteger(g.seq) ? String(g.seq) : '',
    },
  }, h('span', { class: 'seq', title: g.job_id }, seqText), emojis, tail);
}

function buildSendingRow(s) {
  return h('li', {
    class: 'guess-row sending',
    dataset: { testid: 'guess-sending', clientId: s.client_id, state: 'sending' },
  }, h('span', { class: 'seq' }, '#…'),
  h('span', { class: 'emojis', 'aria-label': `Guess ${s.guess.join(' ')}` },
    s.guess.map((e) => h('span', { class: 'emoji', 'aria-hidden': 'true' }, e))),
  h('span', { class: 'status pending' }, h('span', { class: 'spinner', 'aria-hidden': 'true' }), 'sending…'));
}

function byNewest(a, b) {
  const sa = Number.isInteger(a.seq) ? a.seq : Infinity;
  const sb = Number.isInteger(b.seq) ? b.seq : Infinity;
  return sb - sa || (a.job_id < b.job_id ? 1 : -1);
}

function renderGuesses() {
  const r = state.round;
  const length = (r && r.length) || state.config.length;
  const roundId = r && r.round_id;
  const mine = [...state.guesses.values()].filter((g) => g.round_id === roundId).sort(byNewest);
  const sending = [...state.sending.values()].filter((s) => s.round_id === roundId);
  const items = [
    ...sending.reverse().map((s) => ({ key: `c:${s.client_id}`, sig: 'sending', build: () => buildSendingRow(s) })),
    ...mine.map((g) => ({ key: `j:${g.job_id}`, sig: guessRowSig(g), build: () => buildGuessRow(g, length) })),
  ];
  syncList($('guesses'), items);
  $('guesses-empty').hidden = items.length > 0;

  const scored = mine.filter((g) => g.score);
  const solved = scored.filter((g) => g.score.solved);
  const best = solved.reduce((m, g) => Math.max(m, g.score.points), 0);
  const pending = mine.length - scored.length + sending.length;
  const parts = [];
  if (mine.length) parts.push(`${mine.length} guess${mine.length === 1 ? '' : 'es'}`);
  if (pending) parts.push(`${pending} scoring`);
  if (solved.length) parts.push(`solved · ${best} pts`);
  $('my-summary').textContent = parts.join(' · ');
  document.body.classList.toggle('has-solved', solved.length > 0);

  // The previous round's guesses, under the revealed secret (late scores still land here).
  if (state.reveal) {
    const prev = [...state.guesses.values()].filter((g) => g.round_id === state.reveal.round_id).sort(byNewest);
    syncList($('prev-guesses'), prev.map((g) => ({ key: `j:${g.job_id}`, sig: guessRowSig(g), build: () => buildGuessRow(g, length) })));
    $('prev-details').hidden = prev.length === 0;
    renderRevealNote();
  }
  renderProgress(); // our own row in the field comes from these same guesses
}

function renderReveal() {
  const box = $('reveal');
  const rv = state.reveal;
  if (!rv) {
    box.hidden = true;
    return;
  }
  box.hidden = false;
  const current = state.round && state.round.round_id === rv.round_id;
  const big = current || Date.now() - rv.shownAt < REVEAL_BIG_MS;
  box.classList.toggle('compact', !big);
  box.dataset.roundId = rv.round_id;
  setText($('reveal-title'), big ? 'Time! The secret was' : 'Last round’s secret');
  const secret = $('secret');
  if (secret.dataset.roundId !== rv.round_id) {
    secret.dataset.roundId = rv.round_id;
    secret.setAttribute('aria-label', `The secret was ${rv.secret.join(' ')}`);
    secret.replaceChildren(...rv.secret.map((e, i) => h('span', { class: 'secret-emoji', dataset: { i: String(i) } }, e)));
    secret.querySelectorAll('.secret-emoji').forEach((el, i) => { el.style.animationDelay = `${i * 120}ms`; });
  }
  renderGuesses(); // also refreshes the note and the previous round's list
}

function renderRevealNote() {
  const rv = state.reveal;
  if (!rv) return;
  const mine = [...state.guesses.values()].filter((g) => g.round_id === rv.round_id);
  const solvedBy = mine.filter((g) => g.score && g.score.solved).sort((a, b) => a.seq - b.seq)[0];
  let note;
  if (solvedBy) note = `You cracked it with guess #${solvedBy.seq + 1} for ${solvedBy.score.points} points.`;
  else if (mine.length) note = `Not this time — ${mine.length} guess${mine.length === 1 ? '' : 'es'}.`;
  else note = '';
  if (rv.solvers && rv.solvers.length) note += `${note ? ' ' : ''}${rv.solvers.length} player${rv.solvers.length === 1 ? '' : 's'} solved it.`;
  setText($('reveal-note'), note);
  $('reveal-note').hidden = !note;
}

function renderProgress() {
  const card = $('progress-card');
  card.hidden = !state.player;
  const roundId = state.round && state.round.round_id;
  const field = roundId ? state.progress.get(roundId) : null;
  const length = (state.round && state.round.length) || state.config.length;
  const meId = state.player && state.player.player_id;
  const mine = roundId && state.player ? myProgress(roundId) : null;
  const leaders = field ? field.leaders : [];
  const myIndex = leaders.findIndex((p) => p.player_id === meId);
  const rows = leaders.map((p, i) => ({ p: i === myIndex && mine ? furthest(p, mine) : p, rank: i + 1, me: i === myIndex }));
  // Not among the leaders (or not in them yet): our own row after them, its place unknown.
  if (myIndex < 0 && mine && mine.guesses > 0) rows.push({ p: mine, rank: null, me: true });
  const items = rows.map((row) => ({
    key: row.rank === null ? `me:${row.p.player_id}` : `p:${row.p.player_id}`,
    sig: progressSig(row),
    build: () => buildProgressRow(row, length),
  }));
  syncList($('progress'), items);
  $('progress-empty').hidden = rows.length > 0 || !!(field && field.playing);
  renderProgressCounts(field);
}

function progressSig({ p, rank, me }) {
  return `${rank}|${me ? 1 : 0}|${p.name}|${p.guesses}|${p.scored}|${p.best_exact}|${p.best_near}|${p.solved}`;
}

function buildProgressRow({ p, rank, me }, length) {
  const outside = rank === null;
  return h('li', {
    class: `progress-row${p.solved ? ' solved' : ''}${me ? ' me' : ''}${outside ? ' gap' : ''}`,
    dataset: {
      // Our row outside the leaders has its own test id: `progress-row` counts the leaders.
      testid: outside ? 'progress-me' : 'progress-row',
      playerId: p.player_id,
      rank: outside ? '' : String(rank),
      me: String(me),
      guesses: String(p.guesses),
      scored: String(p.scored),
      solved: String(p.solved),
    },
  },
  outside
    ? h('span', { class: 'rank you', title: 'Your place: not among the leaders shown' }, 'you')
    : h('span', { class: 'rank' }, String(rank)),
  h('span', { class: 'name' }, String(p.name), me && !outside ? h('span', { class: 'you' }, ' (you)') : null),
  h('span', { class: 'counts', title: `${p.guesses} guesses, ${p.scored} scored` },
    `${p.guesses} guess${p.guesses === 1 ? '' : 'es'}`, p.scored < p.guesses ? ` · ${p.guesses - p.scored} scoring` : ''),
  p.solved
    ? h('span', { class: 'badge solved', 'aria-label': 'solved' }, '✓ solved')
    // Best-so-far pegs, not a guess of theirs: their own test id.
    : pegs({ exact: p.best_exact, near: p.best_near }, length, 'best-pegs'));
}

/** playing · guesses · solved over the whole round's field, as the server counted it. */
function renderProgressCounts(field) {
  const el = $('progress-count');
  const known = field && field.playing !== null && field.guesses !== null && field.solved !== null;
  const sig = known ? `${field.playing}|${field.guesses}|${field.solved}` : '';
  if (el.dataset.sig === sig) return;
  el.dataset.sig = sig;
  el.dataset.playing = known ? String(field.playing) : '';
  el.dataset.guesses = known ? String(field.guesses) : '';
  el.dataset.solved = known ? String(field.solved) : '';
  el.textContent = known
    ? `${field.playing} playing · ${field.guesses} guess${field.guesses === 1 ? '' : 'es'} · ${field.solved} solved`
    : '';
}

function renderLeaderboard() {
  const players = Array.isArray(state.leaderboard) ? state.leaderboard : [];
  const meId = state.player && state.player.player_id;
  let rows = players.slice(0, 20).map((p, i) => ({ p, rank: i + 1 }));
  const myIndex = players.findIndex((p) => p.player_id === meId);
  if (myIndex >= 20) rows.push({ p: players[myIndex], rank: myIndex + 1, gap: true });
  const items = rows.map(({ p, rank, gap }) => ({
    key: p.player_id,
    sig: `${rank}|${p.name}|${p.points}|${p.solved_rounds}|${gap ? 1 : 0}|${p.player_id === meId ? 1 : 0}`,
    build: () => h('li', {
      class: `lb-row${p.player_id === meId ? ' me' : ''}${gap ? ' gap' : ''}`,
      dataset: { testid: 'leaderboard-row', playerId: p.player_id },
    },
    h('span', { class: 'rank' }, rank <= 3 ? ['🥇', '🥈', '🥉'][rank - 1] : String(rank)),
    h('span', { class: 'name' }, String(p.name ?? ''), p.player_id === meId ? h('span', { class: 'you' }, ' (you)') : null),
    h('span', { class: 'solved-rounds', title: 'rounds solved' }, `${Number(p.solved_rounds) || 0} solved`),
    h('span', { class: 'points' }, `${Number(p.points) || 0}`)),
  }));
  syncList($('leaderboard'), items);
  $('leaderboard-empty').hidden = items.length > 0;
}

// ---------------------------------------------------------------- join / leave

async function join(ev) {
  ev.preventDefault();
  const input = $('join-name');
  const name = input.value.trim();
  const err = $('join-error');
  err.hidden = true;
  const n = [...name].length;
  if (n < 1 || n > 32) {
    err.textContent = 'Pick a name of 1 to 32 characters.';
    err.hidden = false;
    input.focus();
    return;
  }
  const btn = $('join-submit');
  btn.disabled = true;
  try {
    const { data } = await request('/api/players', { method: 'POST', body: { name } });
    const p = { player_id: data.player_id, name: data.name ?? name, token: data.token };
    savePlayer(p);
    startGame(p);
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    err.textContent = e.transient ? 'Server unavailable — please try again in a moment.'
      : e.code === 'invalid_body' ? `That name will not do${e.detail ? `: ${e.detail}` : '.'}`
        : e.detail || e.code;
    err.hidden = false;
  } finally {
    btn.disabled = false;
  }
}

function startGame(p) {
  state.player = p;
  $('join').hidden = true;
  $('game').hidden = false;
  $('leave').hidden = false;
  const me = $('me');
  me.textContent = p.name;
  me.hidden = false;
  renderAll();
  renderLeaderboard();
  sock.start();
  if (!state.round) fetchRound();
  else refetchGuesses();
}

function leave(message) {
  sock.stop();
  forgetPlayer();
  state.player = null;
  state.guesses.clear();
  for (const s of state.sending.values()) clearTimeout(s.timer);
  state.sending.clear();
  state.composing = [];
  state.reveal = null;
  state.progress.clear();
  $('game').hidden = true;
  $('leave').hidden = true;
  $('me').hidden = true;
  $('join').hidden = false;
  showText($('join-error'), message);
  showError(null);
  renderAll();
  renderLeaderboard();
  setConnStatus('offline');
  $('join-name').focus();
}

// ---------------------------------------------------------------- keys, timers, boot

function onKeyDown(e) {
  if (!state.player || $('game').hidden) return;
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const t = e.target;
  if (t && (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' || t.tagName === 'SELECT' || t.isContentEditable)) return;
  if (/^[1-9]$/.test(e.key)) {
    e.preventDefault();
    const i = Number(e.key) - 1;
    addEmoji(i);
    pressFlash(i);
  } else if (e.key === 'Backspace') {
    e.preventDefault();
    removeLast();
  } else if (e.key === 'Enter') {
    // Enter always submits, even with a palette key focused after a click;
    // only other buttons and links keep their own Enter.
    const own = t && (t.tagName === 'A' || (t.tagName === 'BUTTON' && !t.closest('#composer')) || t.tagName === 'SUMMARY');
    if (own) return;
    e.preventDefault();
    submitGuess();
  }
}

function pressFlash(i) {
  const key = $('palette').querySelector(`[data-index="${i}"]`);
  if (!key) return;
  key.classList.remove('pressed');
  void key.offsetWidth;
  key.classList.add('pressed');
}

function housekeeping() {
  const r = state.round;
  const now = Date.now();
  if (!r) {
    if (now - state.lastRoundFetch > ROUND_REFETCH_MS) fetchRound();
  } else {
    const closedFor = r.state === 'closed' ? now - state.roundClosedSeenAt : serverNow() - r.closes_at;
    if (closedFor > ROUND_REFETCH_MS && now - state.lastRoundFetch > ROUND_REFETCH_MS) fetchRound();
  }
  if (state.player && !sock.isOpen && now - state.lastGuessPoll > OFFLINE_POLL_MS) {
    refetchGuesses();
  }
}

function boot() {
  $('join-form').addEventListener('submit', join);
  $('leave').addEventListener('click', () => leave(null));
  $('backspace').addEventListener('click', removeLast);
  $('submit-guess').addEventListener('click', submitGuess);
  document.addEventListener('keydown', onKeyDown);
  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible') sock.reconnectNow();
  });
  window.addEventListener('online', () => sock.reconnectNow());

  renderAll();
  fetchRound();
  fetchLeaderboard();
  const p = loadPlayer();
  if (p) {
    startGame(p);
  } else {
    $('join').hidden = false;
    $('join-name').focus();
  }
  setInterval(renderTimer, 250);
  setInterval(housekeeping, 1000);
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', boot);
else boot();
