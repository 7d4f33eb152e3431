// api.js — fetch with a timeout, the contract's error shape, and small DOM helpers
// shared by the player page (app.js) and the admin page (admin.js).

export const REQUEST_TIMEOUT_MS = 5000;

/** Every failed request becomes an ApiError: status 0 means the network or the timeout. */
export class ApiError extends Error {
  constructor(status, code, detail, retryAfter = null) {
    super(detail ? `${code}: ${detail}` : code);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.detail = detail || '';
    this.retryAfter = retryAfter; // seconds, or null
  }

  /** True when trying again later may help (server down, network, timeout). */
  get transient() {
    return this.status === 0 || this.status === 502 || this.status === 503 || this.status === 504;
  }
}

const dateListeners = new Set();

/** Called with the server's `Date` header (epoch ms, second resolution) of each response. */
export function onServerDate(fn) {
  dateListeners.add(fn);
}

function parseRetryAfter(value) {
  if (!value) return null;
  const s = Number(value);
  if (Number.isFinite(s) && s >= 0) return Math.ceil(s);
  const at = Date.parse(value);
  if (Number.isFinite(at)) return Math.max(0, Math.ceil((at - Date.now()) / 1000));
  return null;
}

/**
 * request(path, {method, token, body, headers, timeout}) -> {status, data, headers}
 * Throws ApiError for any non-2xx answer, a network failure or the timeout.
 */
export async function request(path, { method = 'GET', token = null, body, headers = {}, timeout = REQUEST_TIMEOUT_MS } = {}) {
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), timeout);
  const h = { Accept: 'application/json', ...headers };
  if (token) h.Authorization = `Bearer ${token}`;
  let payload;
  if (body !== undefined) {
    h['Content-Type'] = 'application/json';
    payload = JSON.stringify(body);
  }
  let res;
  let text = '';
  try {
    res = await fetch(path, {
      method,
      headers: h,
      body: payload,
      signal: ctrl.signal,
      cache: 'no-store',
      credentials: 'same-origin',
    });
    text = await res.text();
  } catch (err) {
    const timedOut = ctrl.signal.aborted;
    throw new ApiError(0, timedOut ? 'timeout' : 'network',
      timedOut ? 'the server did not answer in time' : 'could not reach the server');
  } finally {
    clearTimeout(timer);
  }

  const date = Date.parse(res.headers.get('Date') || '');
  if (Number.isFinite(date)) for (const fn of dateListeners) fn(date);

  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = null; }
  }
  if (!res.ok) {
    const code = (data && typeof data.error === 'string' && data.error)
      || (res.status === 503 ? 'unavailable' : res.status === 401 ? 'unauthorized' : `http_${res.status}`);
    const detail = (data && typeof data.detail === 'string' && data.detail) || res.statusText || '';
    throw new ApiError(res.status, code, detail, parseRetryAfter(res.headers.get('Retry-After')));
  }
  return { status: res.status, data, headers: res.headers };
}

/**
 * h('div', {class: 'x', dataset: {testid: 'y'}, onclick: fn}, child, 'text', …)
 * Builds DOM without innerHTML, so player names and payloads are always text.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'text') el.textContent = v;
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

/** Shows `text` in `el`, or hides `el` when there is none. */
export function showText(el, text) {
  el.textContent = text || '';
  el.hidden = !text;
}

/** A random hex id that works outside secure contexts too (crypto.randomUUID does not). */
export function randomId(prefix = '') {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return prefix + Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

/** Shortens a branded id for display: "JOB_01HV…X7K2". */
export function shortId(id) {
  if (typeof id !== 'string') return '';
  return id.length > 14 ? `${id.slice(0, 8)}…${id.slice(-4)}` : id;
}

/** Keyed update of a list: rows are reused, so the aria-live region announces only what changed. */
export function syncList(listEl, items) {
  const byKey = new Map();
  for (const el of listEl.children) byKey.set(el.dataset.key, el);
  items.forEach((it, i) => {
    let el = byKey.get(it.key);
    if (!el || el.dataset.sig !== it.sig) {
      const fresh = it.build();
      fresh.dataset.key = it.key;
      fresh.dataset.sig = it.sig;
      if (el) el.replaceWith(fresh);
      el = fresh;
    }
    byKey.delete(it.key);
    const at = listEl.children[i];
    if (at !== el) listEl.insertBefore(el, at || null);
  });
  for (const el of byKey.values()) el.remove();
}
