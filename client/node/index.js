'use strict';
/*
 * admitd-client - the Node.js client for admitd (per-pod admission control).
 *
 * Owns: one Unix-socket connection per Client, shared by every caller:
 * each request carries a fresh id and its reply is matched by id, so a
 * long acquire never holds up a release, a status or another acquire (the
 * protocol pipelines; replies to acquires come back out of order). Leases
 * and their release, the AbortSignal of an acquire (a "cancel" sent on the
 * same connection), and the connect and reconnect rules:
 *
 * - A connect that finds no socket, a refused one or a full backlog (the
 *   daemon is starting beside the application) is tried again, 20 ms apart
 *   doubling to 200 ms (jittered), for up to connectTimeoutMs, and never
 *   beyond an acquire's own budget (the time spent connecting is taken from
 *   the timeout_ms it sends; tryAcquire tries once).
 * - A request in flight when the connection dies rejects with Unavailable:
 *   it is never sent again (an acquire might have been admitted). The next
 *   request connects again, also when the daemon closed the connection
 *   since the last one (a restart).
 *
 * Leases not acquired with detach live as long as the connection: when it
 * closes (client.close(), the process exits, the daemon restarts) admitd
 * releases them. Nothing here keeps the process alive while no request is
 * waiting for its reply.
 */

const net = require('node:net');
const proto = require('./lib/proto');
const errors = require('./lib/errors');
const { version: VERSION } = require('./package.json');

const { AdmitError, Unavailable, AbortError, errorFromReply, unreachable, limitsOf } = errors;

/* Node 18 has no Symbol.asyncDispose; Node's own objects use this one. */
const asyncDispose = Symbol.asyncDispose || Symbol.for('nodejs.asyncDispose');

/* The longest reply line read (a status of many scopes is long). */
const MAX_REPLY = 16 * 1024 * 1024;

const now = () => performance.now();

/* An admission: what admit() resolves to, and what a Lease is besides its
 * lease. */
class Admission {
  constructor(reply, req) {
    this.reply = reply;
    this.waitedMs = Number.isInteger(reply.waited_ms) ? reply.waited_ms : 0;
    this.backend = typeof reply.backend === 'string' ? reply.backend : null;
    this.shadowLimited = reply.shadow_limited === true;
    this.rule = typeof reply.rule === 'string' ? reply.rule : null;
    this.remaining = Number.isInteger(reply.remaining) ? reply.remaining : null;
    this.resetMs = Number.isInteger(reply.reset_ms) ? reply.reset_ms : null;
    this.limits = limitsOf(reply);
    if (req.targets) {
      this.scope = null;
      this.key = null;
      this.url = null;
      this.targets = req.targets.map((t) =>
        Object.assign({}, t, { key: t.url !== undefined ? proto.urlHost(t.url) : t.key === undefined ? null : t.key }));
    } else {
      this.scope = req.scope;
      this.url = req.url === undefined ? null : req.url;
      this.key = req.key !== undefined ? req.key : req.url !== undefined ? proto.urlHost(req.url) : null;
      this.targets = null;
    }
  }
}

/* An admitted acquire. Release it with release() or by disposing of it. */
class Lease extends Admission {
  constructor(client, reply, req) {
    super(reply, req);
    this._client = client;
    this.lease = reply.lease;
    this.tokens = null;
    this.outcome = null;
    this.released = false;
    this.held = null;
    this._releasing = null;
  }

  /* Release the lease, charging tokens (default: this.tokens) and telling
   * the outcome (default: this.outcome). Resolves to whether the daemon
   * still held it. A second call sends nothing and resolves to false; one
   * after a failed release (the connection died) sends again, which is
   * safe: the daemon settles a lease once. */
  async release(opts) {
    if (this.released) return false;
    if (this._releasing) {
      try {
        await this._releasing;
        return false;
      } catch (e) {
        if (this.released) return false;
      }
    }
    const o = Object.assign({ tokens: this.tokens, outcome: this.outcome }, opts || {});
    this._releasing = this._client.release(this, o);
    try {
      return await this._releasing;
    } finally {
      this._releasing = null;
    }
  }

  async [asyncDispose]() {
    if (!this.released) await this.release();
  }

  toString() {
    return String(this.lease);
  }
}

/* One connected socket, its reader and its pending requests. Once dead it
 * stays dead; the Client replaces it. */
class Conn {
  constructor(path, sock) {
    this.path = path;
    this.sock = sock;
    this.pending = new proto.Pending();
    this.dead = null;
    this.refused = null;
    this.ended = false;
    this.nextId = 1;
    this.chunks = [];
    this.buffered = 0;
    this.closed = new Promise((resolve) => sock.once('close', resolve));
    sock.on('data', (d) => this._read(d));
    sock.on('end', () => {
      this.ended = true;
      this._die('connection to admitd closed');
    });
    sock.on('error', (e) => this._die(`connection to admitd lost: ${e.message}`));
    sock.on('close', () => this._die('connection to admitd closed'));
    sock.unref();
  }

  id() {
    let rid = this.nextId++;
    while (this.pending.has(rid)) rid = this.nextId++;
    return rid;
  }

  /* File entry for the reply to line, then write the line. Once filed, the
   * entry always gets an answer (the connection's death included). */
  send(line, rid, entry) {
    if (this.refused) throw errorFromReply(this.refused);
    if (this.dead) throw new Unavailable('unavailable', this.dead);
    this.pending.add(rid, entry, line.length);
    this.sock.ref();
    this.sock.write(line);
  }

  /* Stop waiting for rid; orphan: release the lease its reply may bring. */
  forget(rid, entry, orphan) {
    this.pending.forget(rid, entry, orphan);
    this._idle();
  }

  _idle() {
    if (this.pending.size === 0 && !this.dead) this.sock.unref();
  }

  _read(data) {
    let start = 0;
    for (;;) {
      const nl = data.indexOf(0x0a, start);
      if (nl < 0) break;
      let line = data.subarray(start, nl);
      if (this.chunks.length) {
        line = Buffer.concat([...this.chunks, line]);
        this.chunks = [];
        this.buffered = 0;
      }
      start = nl + 1;
      this._line(line);
      if (this.dead) return;
    }
    if (start < data.length) {
      this.chunks.push(data.subarray(start));
      this.buffered += data.length - start;
      if (this.buffered > MAX_REPLY) this._die(`a reply line from admitd is longer than ${MAX_REPLY} bytes`);
    }
  }

  _line(line) {
    if (line.length === 0 || (line.length === 1 && line[0] === 0x0d)) return;
    const reply = proto.decode(line);
    if (reply === null) {
      // The stream can no longer be trusted to pair replies with requests.
      const text = line.subarray(0, 80).toString('utf8');
      this._die(`admitd sent a line that is not a JSON object: ${JSON.stringify(text)}`, {
        ok: false,
        error: proto.BAD_REPLY,
        message: `admitd sent a line that is not a JSON object: ${JSON.stringify(text)}`,
      });
      return;
    }
    if (proto.refusal(reply)) {
      this.refused = reply;
      this._die(`admitd refused the connection: ${reply.message || ''}`);
      return;
    }
    const [entry, orphanLease] = this.pending.take(reply);
    if (entry) entry.done(reply);
    else if (orphanLease) this.releaseOrphan(orphanLease);
    if (proto.closesConnection(reply)) this._die('admitd closed the connection: a request line was too long');
    else this._idle();
  }

  /* Release a lease nobody will see (an aborted or timed-out acquire's). */
  releaseOrphan(lease) {
    if (this.dead) return; // the lease went with the connection
    const rid = this.id();
    const [line] = proto.frame({ op: 'release', lease }, null, rid);
    this.send(line, rid, { done() {} });
  }

  _die(reason, reply) {
    if (this.dead) return;
    this.dead = reason;
    const answer = this.refused || reply || proto.lost(reason);
    for (const e of this.pending.clear()) e.done(answer);
    this.sock.destroy();
  }

  close() {
    this._die('client closed');
    return this.closed;
  }
}

function connectOnce(path, timeoutMs) {
  return new Promise((resolve, reject) => {
    const sock = net.createConnection({ path });
    const timer = setTimeout(() => {
      const e = new Error('connect timed out');
      e.code = 'ETIMEDOUT';
      sock.destroy();
      reject(e);
    }, Math.max(timeoutMs, 1));
    sock.once('connect', () => {
      clearTimeout(timer);
      sock.removeAllListeners('error');
      resolve(sock);
    });
    sock.once('error', (e) => {
      clearTimeout(timer);
      sock.destroy();
      reject(e);
    });
  });
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(done, ms);
    function done() {
      if (signal) signal.removeEventListener('abort', aborted);
      resolve();
    }
    function aborted() {
      clearTimeout(t);
      reject(new AbortError('the acquire was aborted before it was sent', signal.reason));
    }
    if (signal) signal.addEventListener('abort', aborted, { once: true });
  });
}

/* Wait for a setImmediate: the I/O already readable (a daemon's EOF) is
 * handled first, so a connection the daemon closed is seen as closed. */
const ioTurn = () => new Promise((resolve) => setImmediate(resolve));

function checkReply(reply) {
  if (reply.ok === true) {
    const r = Object.assign({}, reply);
    delete r.id;
    return r;
  }
  throw errorFromReply(reply);
}

/*
 * A connection to admitd, shared by every caller in the process.
 *
 * options.socket: the socket path (default: $ADMITD_SOCKET, else
 * /run/admitd/admitd.sock). connectTimeoutMs (5000): how long a connect
 * keeps trying a daemon that is not up yet (0: once). requestTimeoutMs
 * (30000): how long to wait for a reply beyond the request's own wait
 * budget (null: for ever); past it the request rejects with Unavailable.
 * maxLine (65536): the longest request line sent, newline included; a
 * longer one rejects with BadRequest (line_too_long) and is not sent.
 */
class Client {
  constructor(options) {
    const o = options || {};
    this.socket = proto.socketPath(o.socket);
    this.connectTimeoutMs = proto.wholeMs(o.connectTimeoutMs == null ? 5000 : o.connectTimeoutMs, 'connectTimeoutMs');
    this.requestTimeoutMs = o.requestTimeoutMs === null ? null
      : proto.wholeMs(o.requestTimeoutMs === undefined ? 30000 : o.requestTimeoutMs, 'requestTimeoutMs');
    this.maxLine = proto.checkMaxLine(o.maxLine === undefined ? proto.DEFAULT_MAX_LINE : o.maxLine);
    this._conn = null;
    this._closed = false;
  }

  /* The connection a request may use now, or null. */
  async _live() {
    if (this._closed) throw new Unavailable('unavailable', 'client closed');
    let c = this._conn;
    if (c && !c.dead && c.pending.size === 0) {
      await ioTurn();
      c = this._conn;
    }
    if (c && !c.dead) return c;
    if (c === this._conn) this._conn = null;
    return null;
  }

  /* [connection, ms spent connecting]. Callers that connect at once each
   * try; the first connection made is kept, the others closed. */
  async _connection(budgetMs, signal) {
    const t0 = now();
    const live = await this._live();
    if (live) return [live, 0];
    const windowMs = budgetMs == null ? this.connectTimeoutMs : Math.min(this.connectTimeoutMs, budgetMs);
    const deadline = t0 + windowMs;
    const pauses = proto.backoff();
    for (;;) {
      if (signal && signal.aborted) throw new AbortError('the acquire was aborted before it was sent', signal.reason);
      let sock;
      try {
        sock = await connectOnce(this.socket, Math.max(deadline - now(), 50));
      } catch (e) {
        const left = deadline - now();
        if (!proto.retryableConnect(e) || left <= 0 || this._closed) throw unreachable(this.socket, e);
        await sleep(Math.min(pauses.next().value, left), signal);
        continue;
      }
      if (this._closed) {
        sock.destroy();
        throw new Unavailable('unavailable', 'client closed');
      }
      if (this._conn && !this._conn.dead) {
        sock.destroy(); // another caller connected first
        return [this._conn, now() - t0];
      }
      this._conn = new Conn(this.socket, sock);
      return [this._conn, now() - t0];
    }
  }

  /*
   * Send one request (an object, given an id here, or a raw line) and
   * resolve to its reply unchecked. waitMs: how long the daemon may take
   * before requestTimeoutMs starts counting (null: no limit). orphan: an
   * acquire, whose lease must be released when nobody takes it. signal: an
   * AbortSignal that cancels a waiting acquire.
   */
  async _roundtrip({ req = null, line = null, waitMs = 0, orphan = false, signal = null }) {
    if (signal && signal.aborted) throw new AbortError('the acquire was aborted before it was sent', signal.reason);
    const [c, spent] = await this._connection(proto.connectBudget(req), signal);
    if (spent > 0 && req) {
      req = proto.spend(req, spent);
      if (waitMs != null) waitMs = Math.max(0, waitMs - spent);
    }
    const [bytes, rid] = proto.frame(req, line, c.id());
    if (bytes.length > this.maxLine) {
      throw new errors.BadRequest(proto.LINE_TOO_LONG,
        `request line of ${bytes.length} bytes is longer than maxLine (${this.maxLine}); not sent`);
    }
    if (signal && signal.aborted) throw new AbortError('the acquire was aborted before it was sent', signal.reason);
    const limit = waitMs != null && this.requestTimeoutMs != null ? waitMs + this.requestTimeoutMs : null;
    return new Promise((resolve, reject) => {
      let timer = null;
      let aborting = false;
      const finish = () => {
        if (timer) clearTimeout(timer);
        if (signal) signal.removeEventListener('abort', onAbort);
      };
      const entry = {
        done(reply) {
          finish();
          if (aborting) {
            if (proto.leaseOf(reply)) c.releaseOrphan(reply.lease); // it raced the cancel
            reject(new AbortError('the acquire was aborted while it waited', signal.reason, reply));
          } else {
            resolve(reply);
          }
        },
      };
      const onAbort = () => {
        if (aborting) return;
        aborting = true;
        const cid = c.id();
        const [cancelLine] = proto.frame({ op: 'cancel', of: rid }, null, cid);
        try {
          c.send(cancelLine, cid, {
            // The acquire's own answer comes first when the daemon knew it.
            // One still pending now was not ended (an older daemon answers
            // unknown_op): whatever it brings later is released.
            done() {
              if (c.pending.has(rid)) {
                c.forget(rid, entry, true);
                entry.done({ ok: false, error: 'canceled', message: 'aborted; the daemon did not end the acquire' });
              }
            },
          });
        } catch (e) {
          // The connection is dead: the entry has had its answer already.
        }
      };
      try {
        c.send(bytes, rid, entry);
      } catch (e) {
        reject(e);
        return;
      }
      if (signal && rid !== undefined) signal.addEventListener('abort', onAbort, { once: true });
      if (limit != null) {
        timer = setTimeout(() => {
          c.forget(rid, entry, orphan);
          if (signal) signal.removeEventListener('abort', onAbort);
          if (aborting) reject(new AbortError('the acquire was aborted while it waited', signal.reason));
          else reject(new Unavailable('unavailable', `no reply from admitd within ${limit} ms`));
        }, limit);
      }
    });
  }

  /* Raw transport: send one protocol line as is (a string or Buffer; the
   * newline is optional) and resolve to the reply object, error or not. A
   * line with an id is matched by it; one without (or that the daemon will
   * answer without one) gets the next id-less reply. */
  async requestLine(line) {
    return this._roundtrip({ line, waitMs: 0 });
  }

  /* Send a request object (an id is added) and resolve to the reply without
   * its id; rejects with the AdmitError of a failed reply. */
  async request(req, options) {
    const o = options || {};
    return checkReply(await this._roundtrip({ req, waitMs: o.waitMs === undefined ? 0 : o.waitMs }));
  }

  /*
   * acquire(scope, key?, options?), acquire(scope, options),
   * acquire(options): wait (up to options.timeoutMs; default the scope's
   * timeout) for a lease. options: url (key by its host), class, tenant
   * (whose request: served among tenants by the scope's weights), cost,
   * detach, reserve ({output: 500}), targets ([{scope, key | url, class,
   * cost}], instead of scope/key/url/class/cost), signal (an AbortSignal:
   * aborting while it waits cancels it in the daemon and rejects with
   * AbortError; a lease that arrives anyway is released at once). A scope
   * with a `key` default in its conf needs no key.
   */
  async acquire(a, b, c) {
    const [scope, key, o] = proto.splitArgs(a, b, c);
    const req = proto.acquireRequest(scope, key, o);
    const waitMs = req.timeout_ms === undefined ? null : req.timeout_ms;
    const reply = await this._roundtrip({ req, waitMs, orphan: true, signal: o.signal || null });
    return new Lease(this, checkReply(reply), req);
  }

  /* acquire that never waits: the lease, or Limited (with retryAfterMs).
   * The connect is tried once. */
  async tryAcquire(a, b, c) {
    const [scope, key, o] = proto.splitArgs(a, b, c);
    return this.acquire(scope, key, Object.assign({}, o, { timeoutMs: 0, scope: undefined, key: undefined }));
  }

  /*
   * admit(scope, key?, options?), admit(scope, options), admit(options):
   * acquire for an admission with nothing to release ("lease": false), one
   * round trip, for a scope that only limits rates. Resolves to an
   * Admission (waitedMs, remaining, resetMs, backend, reply); rejects as
   * acquire does, and with BadRequest when a scope's release would book
   * something (max_concurrent, cluster_concurrency, a concurrency rule,
   * min_delay, a tokens rule, adaptive). options as acquire's, without
   * detach and reserve.
   */
  async admit(a, b, c) {
    const [scope, key, o] = proto.splitArgs(a, b, c);
    const req = proto.acquireRequest(scope, key, Object.assign({}, o, { lease: false }));
    const waitMs = req.timeout_ms === undefined ? null : req.timeout_ms;
    // an orphan when abandoned (signal): canceled in the daemon, it spends nothing
    const reply = await this._roundtrip({ req, waitMs, orphan: true, signal: o.signal || null });
    return new Admission(checkReply(reply), req);
  }

  /* admit that never waits: the Admission, or Limited (with retryAfterMs). */
  async tryAdmit(a, b, c) {
    const [scope, key, o] = proto.splitArgs(a, b, c);
    return this.admit(scope, key, Object.assign({}, o, { timeoutMs: 0, scope: undefined, key: undefined }));
  }

  /* Release a lease (a Lease or its string). options: tokens ({input: 300,
   * output: 200}) charged to the token meters, outcome ("ok", "limited",
   * "error": what the upstream said). Resolves to whether the daemon held
   * it; releasing twice is harmless. */
  async release(lease, options) {
    const reply = await this.request(proto.releaseRequest(lease, options || {}));
    const held = reply.held === true;
    if (lease instanceof Lease) {
      lease.released = true;
      lease.held = held;
    }
    return held;
  }

  /* Hold key (or options.url's host) back: options.retryAfter is an
   * upstream's Retry-After value as is (a string) or seconds (a number);
   * options.retryAfterMs milliseconds. Only ever extends a hold. */
  async penalize(a, b, c) {
    const [scope, key, o] = proto.splitArgs(a, b, c);
    return this.request(proto.penalizeRequest(scope, key, o));
  }

  /* Lift key's penalty and pacing, on every daemon. */
  async reset(a, b, c) {
    const [scope, key, o] = proto.splitArgs(a, b, c);
    return this.request(proto.keyRequest('reset', scope, key, o));
  }

  /* For options.ttlMs, replace key's (or options.url's host's; neither:
   * the scope's default key) min_delay (options.minDelayMs) and rule
   * amounts (options.rules: {"0": 1}, a rule by its conf name or its 0-based
   * index), on every daemon; a new override replaces the last one whole and
   * reset lifts it. Loosening past the scope's override_max, or a scope
   * without it, rejects with BadRequest; Unavailable: Redis could not be
   * told (it holds on this daemon only). Resolves to the reply (backend,
   * ttl_ms). */
  async override(a, b, c) {
    const [scope, key, o] = proto.splitArgs(a, b, c);
    return this.request(proto.overrideRequest(scope, key, o));
  }

  /* Where key stands: backend, penalty_ms, next_in_ms, leases, quota, rules
   * and, while one holds, override (for options.class, default the scope's
   * default class). */
  async inspect(a, b, c) {
    const [scope, key, o] = proto.splitArgs(a, b, c);
    return this.request(proto.keyRequest('inspect', scope, key, o));
  }

  async status() {
    return this.request({ op: 'status' });
  }

  async ping() {
    await this.request({ op: 'ping' });
    return true;
  }

  /* End the waiting acquire whose id is `of` on this connection (for
   * acquires sent through requestLine with their own id; an acquire's
   * signal does this itself). Resolves to the reply: found says whether one
   * was waiting. */
  async cancel(of) {
    return this.request({ op: 'cancel', of });
  }

  /* Close the connection; admitd releases its non-detached leases. Requests
   * still waiting reject with Unavailable. */
  async close() {
    this._closed = true;
    const c = this._conn;
    this._conn = null;
    if (c) await c.close();
  }

  [asyncDispose]() {
    return this.close();
  }
}

module.exports = {
  Client,
  Admission,
  Lease,
  AdmitError,
  Limited: errors.Limited,
  BudgetExceeded: errors.BudgetExceeded,
  Timeout: errors.Timeout,
  Unavailable,
  UnknownScope: errors.UnknownScope,
  BadRequest: errors.BadRequest,
  ShuttingDown: errors.ShuttingDown,
  TooManyWaiters: errors.TooManyWaiters,
  ExceedsLimit: errors.ExceedsLimit,
  Forbidden: errors.Forbidden,
  Canceled: errors.Canceled,
  AbortError,
  errorFromReply,
  urlHost: proto.urlHost,
  outcomeFor: proto.outcomeFor,
  asyncDispose,
  DEFAULT_SOCKET: proto.DEFAULT_SOCKET,
  SOCKET_ENV: proto.SOCKET_ENV,
  VERSION,
};
