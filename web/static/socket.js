// socket.js — one websocket that keeps itself connected.
//
// Reconnects with exponential backoff (0.5 s doubling to 8 s, ±20 % jitter), resets the backoff
// once a connection delivers a message, resumes at once after a 4008 (fell behind) close, and
// asks its owner for the URL on every attempt so the URL can carry `after=<last event_id>`.

const BACKOFF_MIN_MS = 500;
const BACKOFF_MAX_MS = 8000;
const CLOSE_TOO_SLOW = 4008;

export class LiveSocket {
  /**
   * @param {object} opts
   * @param {() => string} opts.url           the URL for the next attempt
   * @param {(msg: object) => void} opts.onMessage
   * @param {(status: string) => void} [opts.onStatus]   connecting | live | reconnecting | offline
   * @param {() => void} [opts.onOpen]
   * @param {(info: {code: number, opened: boolean}) => void} [opts.onClose]
   */
  constructor(opts) {
    this.opts = opts;
    this.ws = null;
    this.attempt = 0;
    this.timer = null;
    this.stopped = true;
    this.everOpened = false;
    this.status = 'offline';
  }

  get isOpen() {
    return !!this.ws && this.ws.readyState === WebSocket.OPEN;
  }

  start() {
    if (!this.stopped) return;
    this.stopped = false;
    this.attempt = 0;
    this.everOpened = false;
    this._connect();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = null;
    const ws = this.ws;
    this.ws = null;
    if (ws) {
      ws.onopen = ws.onmessage = ws.onerror = ws.onclose = null;
      try { ws.close(1000, 'bye'); } catch { /* already closing */ }
    }
    this._setStatus('offline');
  }

  /** Skip the backoff wait (the page became visible, the network came back). */
  reconnectNow() {
    if (this.stopped || this.ws) return;
    clearTimeout(this.timer);
    this.timer = null;
    this._connect();
  }

  send(obj) {
    if (!this.isOpen) return false;
    try {
      this.ws.send(JSON.stringify(obj));
      return true;
    } catch {
      return false;
    }
  }

  _setStatus(status) {
    if (status === this.status) return;
    this.status = status;
    if (this.opts.onStatus) this.opts.onStatus(status);
  }

  _connect() {
    this.timer = null;
    if (this.stopped) return;
    let ws;
    try {
      ws = this.opts.protocols
        ? new WebSocket(this.opts.url(), this.opts.protocols())
        : new WebSocket(this.opts.url());
    } catch {
      this._setStatus('reconnecting');
      this._schedule();
      return;
    }
    this.ws = ws;
    this._setStatus(this.everOpened ? 'reconnecting' : 'connecting');
    let opened = false;

    ws.onopen = () => {
      if (this.ws !== ws) return;
      opened = true;
      this.everOpened = true;
      this._setStatus('live');
      if (this.opts.onOpen) this.opts.onOpen();
    };
    ws.onmessage = (ev) => {
      if (this.ws !== ws || typeof ev.data !== 'string') return;
      let msg;
      try { msg = JSON.parse(ev.data); } catch { return; }
      if (!msg || typeof msg !== 'object') return;
      this.attempt = 0; // a connection that delivers is a healthy one
      this.opts.onMessage(msg);
    };
    ws.onerror = () => { /* a close event always follows */ };
    ws.onclose = (ev) => {
      if (this.ws !== ws) return;
      this.ws = null;
      if (this.opts.onClose) this.opts.onClose({ code: ev.code, opened });
      if (this.stopped) return;
      this._setStatus('reconnecting');
      this._schedule(ev.code === CLOSE_TOO_SLOW ? 250 : null);
    };
  }

  _schedule(fixedMs = null) {
    clearTimeout(this.timer);
    let delay = fixedMs;
    if (delay === null) {
      const base = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** this.attempt);
      delay = Math.min(BACKOFF_MAX_MS, Math.round(base * (0.8 + Math.random() * 0.4)));
      this.attempt = Math.min(this.attempt + 1, 8);
    }
    this.nextAttemptAt = Date.now() + delay;
    this.timer = setTimeout(() => this._connect(), delay);
  }
}
