'use strict';
/*
 * proto.js - the wire codec; it never touches a socket.
 *
 * Owns: the socket path resolution, turning API arguments into request
 * objects (acquire with its targets and reservation, release with its
 * tokens and outcome, penalize, reset, override, inspect, cancel) checked before
 * they are sent, the key the daemon derives from a URL, encoding a request
 * as one line, decoding a reply line, the id the daemon will echo for a
 * raw line (none when it refuses the line whole), the table of who waits
 * for which reply on one connection, and the connect backoff.
 */

const DEFAULT_SOCKET = '/run/admitd/admitd.sock';
const SOCKET_ENV = 'ADMITD_SOCKET';
/* The daemon's default max_line: the longest line (newline included) sent. */
const DEFAULT_MAX_LINE = 64 * 1024;
const LINE_TOO_LONG = 'line_too_long';
const FORBIDDEN = 'forbidden';
const BAD_REPLY = 'bad_reply';

const MAX_TARGETS = 8;
const MAX_TOKENS = 16;
const MAX_KEY = 512;
const MAX_COST = 1000000000;
const MAX_WAIT_MS = 86400000;
const MAX_OVERRIDE_TTL_MS = 2592000000; /* an override's ttl_ms: 30 days */
const TARGET_FIELDS = ['scope', 'key', 'url', 'class', 'cost'];
const OUTCOMES = ['ok', 'limited', 'error'];

function socketPath(socket) {
  if (socket) return String(socket);
  const env = process.env[SOCKET_ENV];
  return env ? env : DEFAULT_SOCKET;
}

/* A duration in ms as sent: a finite number >= 0, rounded up so that a
 * tiny positive wait never becomes 0 ("do not wait"), at most maxMs
 * (maxText says it for people). */
function wholeMs(v, what, maxMs, maxText = '24h') {
  if (typeof v !== 'number' || Number.isNaN(v)) {
    throw new TypeError(`${what} must be a number of milliseconds, not ${show(v)}`);
  }
  if (v < 0 || !Number.isFinite(v)) {
    throw new RangeError(`${what} must be a finite number >= 0, not ${v}`);
  }
  const ms = Math.ceil(v);
  if (maxMs !== undefined && ms > maxMs) {
    throw new RangeError(`${what} must be at most ${maxMs} ms (${maxText}), not ${v}`);
  }
  return ms;
}

function checkMaxLine(n) {
  if (!Number.isInteger(n)) throw new TypeError(`maxLine must be a whole number of bytes, not ${show(n)}`);
  if (n < 2) throw new RangeError(`maxLine must be >= 2, not ${n}`);
  return n;
}

function show(v) {
  try {
    return typeof v === 'string' ? JSON.stringify(v) : String(v);
  } catch (e) {
    return typeof v;
  }
}

/* The key the daemon derives from a URL: its host, ASCII-lowercased,
 * without scheme, user info, port or IPv6 brackets; null when the URL has
 * no host. The same rules as the daemon's (and the Python client's). */
function urlHost(url) {
  if (typeof url !== 'string') return null;
  let b = url;
  const nul = b.indexOf('\0');
  if (nul >= 0) b = b.slice(0, nul);
  let p;
  const i = b.indexOf('://');
  if (i >= 0) p = b.slice(i + 3);
  else if (b.startsWith('//')) p = b.slice(2);
  else return null;
  let end = p.length;
  for (const c of '/?#') {
    const j = p.indexOf(c);
    if (j >= 0 && j < end) end = j;
  }
  let auth = p.slice(0, end);
  auth = auth.slice(auth.lastIndexOf('@') + 1);
  let host;
  if (auth.startsWith('[')) {
    const rb = auth.indexOf(']');
    if (rb < 0) return null;
    host = auth.slice(1, rb);
  } else {
    host = auth.split(':', 1)[0];
  }
  if (!host || Buffer.byteLength(host) > MAX_KEY) return null;
  return host.replace(/[A-Z]+/g, (s) => s.toLowerCase());
}

function setKey(req, key, url) {
  if (key != null && url != null) throw new TypeError('give key or url, not both');
  if (key != null) req.key = String(key);
  else if (url != null) req.url = String(url);
}

function checkCost(cost) {
  if (!Number.isInteger(cost)) throw new TypeError(`cost must be a whole number >= 0, not ${show(cost)}`);
  if (cost < 0 || cost > MAX_COST) throw new RangeError(`cost must be 0 to ${MAX_COST}, not ${cost}`);
  return cost;
}

/* A {name: count} object as sent (release's tokens, acquire's reserve). */
function tokenCounts(counts, what) {
  if (counts === null || typeof counts !== 'object' || Array.isArray(counts)) {
    throw new TypeError(`${what} must be an object of meter name to count`);
  }
  const names = Object.keys(counts);
  if (names.length > MAX_TOKENS) throw new RangeError(`${what}: at most ${MAX_TOKENS} names, not ${names.length}`);
  const out = {};
  for (const name of names) {
    const n = counts[name];
    if (!name) throw new TypeError(`${what}: meter names are non-empty strings`);
    if (!Number.isInteger(n)) throw new TypeError(`${what}: ${show(name)} must be a whole number >= 0, not ${show(n)}`);
    if (n < 0 || n > MAX_COST) throw new RangeError(`${what}: ${show(name)} must be 0 to ${MAX_COST}, not ${n}`);
    out[name] = n;
  }
  return out;
}

function checkTargets(targets) {
  if (!Array.isArray(targets)) throw new TypeError('targets must be an array of target objects');
  const out = targets.map((t) => {
    if (t === null || typeof t !== 'object' || Array.isArray(t)) throw new TypeError('each target must be an object');
    const unknown = Object.keys(t).filter((k) => !TARGET_FIELDS.includes(k));
    if (unknown.length) {
      throw new TypeError(`unknown target field(s) ${unknown.join(', ')}; a target has ${TARGET_FIELDS.join(', ')}`);
    }
    if (t.scope == null) throw new TypeError('each target needs a scope');
    const w = { scope: String(t.scope) };
    setKey(w, t.key, t.url);
    if (t.class != null) w.class = String(t.class);
    if (t.cost != null) w.cost = checkCost(t.cost);
    return w;
  });
  if (out.length < 1 || out.length > MAX_TARGETS) {
    throw new RangeError(`targets: 1 to ${MAX_TARGETS} targets, not ${out.length}`);
  }
  return out;
}

/* The acquire request (without "id"). o.timeoutMs: undefined/null for the
 * scope's default, 0 for "do not wait"; o.lease false: nothing to release;
 * o.tenant: whose request (the daemon checks the name). */
function acquireRequest(scope, key, o) {
  let req;
  if (o.targets != null) {
    if (scope != null || key != null || o.url != null || o.class != null || o.cost != null) {
      throw new TypeError('give targets, or scope/key/url/class/cost, not both');
    }
    req = { op: 'acquire', targets: checkTargets(o.targets) };
  } else {
    if (scope == null) throw new TypeError('acquire needs a scope (or targets)');
    req = { op: 'acquire', scope: String(scope) };
    setKey(req, key, o.url);
    if (o.class != null) req.class = String(o.class);
    if (o.cost != null && checkCost(o.cost) !== 1) req.cost = o.cost;
  }
  if (o.timeoutMs != null) req.timeout_ms = wholeMs(o.timeoutMs, 'timeoutMs', MAX_WAIT_MS);
  if (o.lease === false && (o.detach || o.reserve != null)) {
    throw new TypeError('an admission without a lease has nothing to detach or reserve');
  }
  if (o.detach) req.detach = true;
  if (o.reserve != null) req.reserve = tokenCounts(o.reserve, 'reserve');
  if (o.lease === false) req.lease = false;
  if (o.tenant != null) {
    if (typeof o.tenant !== 'string') throw new TypeError('tenant must be a string');
    req.tenant = o.tenant;
  }
  return req;
}

function releaseRequest(lease, o) {
  const id = lease !== null && typeof lease === 'object' ? lease.lease : lease;
  if (typeof id !== 'string') throw new TypeError('lease must be a Lease or a lease string');
  const req = { op: 'release', lease: id };
  if (o && o.tokens != null && Object.keys(o.tokens).length) req.tokens = tokenCounts(o.tokens, 'tokens');
  if (o && o.outcome != null) {
    if (!OUTCOMES.includes(o.outcome)) {
      throw new TypeError(`outcome must be one of ${OUTCOMES.join(', ')}, not ${show(o.outcome)}`);
    }
    req.outcome = o.outcome;
  }
  return req;
}

/* retryAfter: a Retry-After header value as is (a string: delta seconds or
 * an HTTP-date), or a number of seconds; retryAfterMs: milliseconds. */
function penalizeRequest(scope, key, o) {
  if (scope == null) throw new TypeError('penalize needs a scope');
  const req = { op: 'penalize', scope: String(scope) };
  setKey(req, key, o.url);
  if (o.retryAfter != null && o.retryAfterMs != null) throw new TypeError('give retryAfter or retryAfterMs, not both');
  if (typeof o.retryAfter === 'string') req.retry_after = o.retryAfter.trim();
  else if (o.retryAfter != null) req.retry_after_ms = wholeMs(o.retryAfter * 1000, 'retryAfter (s)', MAX_WAIT_MS);
  else if (o.retryAfterMs != null) req.retry_after_ms = wholeMs(o.retryAfterMs, 'retryAfterMs', MAX_WAIT_MS);
  else throw new TypeError('penalize needs retryAfter (a Retry-After value or seconds) or retryAfterMs');
  return req;
}

/* An override's rules as sent: {rule: amount}, a rule by its conf name or
 * its 0-based index in the scope ("0"), 1 to MAX_TOKENS of them, each
 * amount a whole number 1..MAX_COST. */
function ruleAmounts(rules) {
  if (rules === null || typeof rules !== 'object' || Array.isArray(rules)) {
    throw new TypeError('rules must be an object of rule name or index to amount');
  }
  const names = Object.keys(rules);
  if (names.length < 1 || names.length > MAX_TOKENS) {
    throw new RangeError(`rules: 1 to ${MAX_TOKENS} rules, not ${names.length}`);
  }
  const out = {};
  for (const name of names) {
    const n = rules[name];
    if (!name) throw new TypeError('rules: a rule is a name or a 0-based index');
    if (!Number.isInteger(n)) throw new TypeError(`rules: ${show(name)} must be a whole number >= 1, not ${show(n)}`);
    if (n < 1 || n > MAX_COST) throw new RangeError(`rules: ${show(name)} must be 1 to ${MAX_COST}, not ${n}`);
    out[name] = n;
  }
  return out;
}

/* ttlMs (required, 1 ms to 30 days) and minDelayMs (at most 24h) in ms, as
 * on the wire; rules: see ruleAmounts. At least one of minDelayMs and
 * rules. Neither key nor url: the scope's default key. */
function overrideRequest(scope, key, o) {
  if (scope == null) throw new TypeError('override needs a scope');
  const req = { op: 'override', scope: String(scope) };
  setKey(req, key, o.url);
  if (o.ttlMs == null) throw new TypeError('override needs ttlMs (how long it holds)');
  req.ttl_ms = wholeMs(o.ttlMs, 'ttlMs', MAX_OVERRIDE_TTL_MS, '30 days');
  if (req.ttl_ms < 1) throw new RangeError(`ttlMs must be more than 0, not ${o.ttlMs}`);
  if (o.minDelayMs == null && o.rules == null) {
    throw new TypeError('override needs minDelayMs or rules (what it sets)');
  }
  if (o.minDelayMs != null) req.min_delay_ms = wholeMs(o.minDelayMs, 'minDelayMs', MAX_WAIT_MS);
  if (o.rules != null) req.rules = ruleAmounts(o.rules);
  return req;
}

/* reset and inspect: {"op", "scope", "key" or "url"[, "class"]}; neither
 * key nor url: the scope's default key (its conf's `key =`). */
function keyRequest(op, scope, key, o) {
  if (scope == null) throw new TypeError(`${op} needs a scope`);
  const req = { op, scope: String(scope) };
  setKey(req, key, o.url);
  if (o.class != null) req.class = String(o.class);
  return req;
}

/* The upstream's answer as a release outcome: "limited" for 429, and for
 * 503 with a Retry-After; "ok" below 400; "error" otherwise. */
function outcomeFor(status, retryAfter) {
  if (status === 429) return 'limited';
  if (status === 503 && retryAfter != null && retryAfter !== '') return 'limited';
  if (Number.isInteger(status) && status > 0 && status < 400) return 'ok';
  return 'error';
}

/* (op) arguments in their three spellings: f(opts), f(scope, opts),
 * f(scope, key, opts). */
function splitArgs(a, b, c) {
  if (a !== null && typeof a === 'object') return [a.scope, a.key, a];
  if (b !== null && typeof b === 'object') return [a, b.key, b];
  return [a, b, c || {}];
}

/* Ms of a request's own budget the connect may take: an acquire's
 * timeout_ms, null (only connectTimeoutMs bounds it) for others. */
function connectBudget(req) {
  if (req && req.op === 'acquire' && Number.isInteger(req.timeout_ms)) return req.timeout_ms;
  return null;
}

/* req with ms spent connecting taken from its timeout_ms; a budget stays a
 * wait (at least 1 ms). */
function spend(req, ms) {
  if (!req || !Number.isInteger(req.timeout_ms) || req.timeout_ms <= 0 || ms <= 0) return req;
  return Object.assign({}, req, { timeout_ms: Math.max(1, req.timeout_ms - Math.ceil(ms)) });
}

const RETRY_CODES = new Set(['ENOENT', 'ECONNREFUSED', 'EAGAIN']);
const BACKOFF_MIN = 20;
const BACKOFF_MAX = 200;

/* Whether a failed connect found no daemon yet (no socket file, nobody
 * listening, a full backlog): worth trying again. */
function retryableConnect(err) {
  return !!err && RETRY_CODES.has(err.code);
}

/* Pauses between connect attempts: 20 ms doubling to 200 ms, each
 * shortened by a random 0 to 50%. */
function* backoff() {
  let d = BACKOFF_MIN;
  for (;;) {
    yield d * (1 - Math.random() * 0.5);
    d = Math.min(d * 2, BACKOFF_MAX);
  }
}

function encode(req) {
  return Buffer.from(JSON.stringify(req) + '\n', 'utf8');
}

/* One reply line (a Buffer, without its newline) as an object; null when
 * it is not a JSON object. */
function decode(buf) {
  let v;
  try {
    v = JSON.parse(buf.toString('utf8'));
  } catch (e) {
    return null;
  }
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? v : null;
}

/* (wire bytes, id) for a request object sent with id rid, or a raw line
 * (string or Buffer, one newline added when it has none) with its own id:
 * undefined when the daemon will answer it without one. */
function frame(req, line, rid) {
  if (req != null) return [encode(Object.assign({}, req, { id: rid })), rid];
  let b = Buffer.isBuffer(line) ? line : Buffer.from(String(line), 'utf8');
  if (b.length === 0 || b[b.length - 1] !== 0x0a) b = Buffer.concat([b, Buffer.from('\n')]);
  return [b, rawId(b)];
}

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
const utf8 = new TextDecoder('utf-8', { fatal: true });

/* The id of a raw request line as the daemon echoes it, undefined when it
 * has none or the daemon answers without it: a line that is not a JSON
 * object, or that its parser refuses whole (invalid UTF-8, a duplicate key,
 * a NUL or a lone surrogate in a string, a real that overflows), or whose
 * id holds an integer beyond 64 bits. */
function rawId(buf) {
  let text;
  try {
    text = utf8.decode(buf).replace(/\r?\n$/, '');
    const obj = JSON.parse(text);
    if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) return undefined;
    if (!strictScan(text)) return undefined;
    return obj.id === null ? undefined : obj.id;
  } catch (e) {
    return undefined;
  }
}

/* Walk text (already valid JSON, a top-level object) as the daemon's parser
 * would: false when it would refuse the line whole, or when the top-level
 * "id" holds an integer beyond 64 bits. */
function strictScan(text) {
  let i = 0;
  let bigInId = false;
  const ws = () => {
    while (i < text.length && ' \t\r\n'.includes(text[i])) i++;
  };
  const str = () => {
    const start = i;
    i++; // opening quote
    while (text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
    i++;
    const s = JSON.parse(text.slice(start, i));
    if (s.includes('\0')) throw new Error('NUL');
    if (/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(s)) throw new Error('surrogate');
    return s;
  };
  const value = (inId) => {
    ws();
    const c = text[i];
    if (c === '{') {
      i++;
      const seen = new Set();
      ws();
      if (text[i] === '}') { i++; return; }
      for (;;) {
        ws();
        const k = str();
        if (seen.has(k)) throw new Error('duplicate key');
        seen.add(k);
        ws();
        i++; // ':'
        value(inId);
        ws();
        if (text[i++] === '}') return;
      }
    } else if (c === '[') {
      i++;
      ws();
      if (text[i] === ']') { i++; return; }
      for (;;) {
        value(inId);
        ws();
        if (text[i++] === ']') return;
      }
    } else if (c === '"') {
      str();
    } else if (c === 't' || c === 'n') {
      i += 4;
    } else if (c === 'f') {
      i += 5;
    } else {
      const m = /^-?\d+(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(i, i + 1024));
      const tok = m[0];
      i += tok.length;
      if (m[1] === undefined && m[2] === undefined) {
        const n = BigInt(tok);
        if (inId && (n < INT64_MIN || n > INT64_MAX)) bigInId = true;
      } else if (!Number.isFinite(Number(tok))) {
        throw new Error('real overflow');
      }
    }
  };
  // The top level: an object whose "id" member is watched for big integers.
  try {
    ws();
    i++;
    const seen = new Set();
    ws();
    if (text[i] !== '}') {
      for (;;) {
        ws();
        const k = str();
        if (seen.has(k)) return false;
        seen.add(k);
        ws();
        i++;
        value(k === 'id');
        ws();
        if (text[i++] === '}') break;
      }
    }
  } catch (e) {
    return false;
  }
  return !bigInId;
}

/* The canonical text of an id: the daemon echoes any JSON value unchanged,
 * so equal values (object keys in any order) name the same request. */
function idKey(v) {
  if (v !== null && typeof v === 'object') {
    if (Array.isArray(v)) return '[' + v.map(idKey).join(',') + ']';
    return '{' + Object.keys(v).sort().map((k) => JSON.stringify(k) + ':' + idKey(v[k])).join(',') + '}';
  }
  return JSON.stringify(v);
}

/*
 * Who waits for which reply on one connection: entries by id, a FIFO of
 * entries for id-less lines (answered in order, without an id), and the ids
 * of acquires nobody waits for any more (a lease their reply brings must be
 * released at once). Each entry keeps its line's length, to find the line
 * an id-less line_too_long answers. An entry is what the caller hands in.
 */
class Pending {
  constructor() {
    this.byId = new Map();
    this.anon = [];
    this.orphans = new Set();
  }

  get size() {
    return this.byId.size + this.anon.length;
  }

  has(rid) {
    return this.byId.has(idKey(rid));
  }

  add(rid, entry, size) {
    entry.size = size;
    if (rid === undefined || rid === null) this.anon.push(entry);
    else this.byId.set(idKey(rid), entry);
  }

  /* Stop waiting for rid (orphan: release its lease if admitted later). An
   * id-less entry stays queued: its reply must still be matched to it. */
  forget(rid, entry, orphan) {
    if (rid === undefined || rid === null) return;
    const k = idKey(rid);
    if (this.byId.get(k) === entry) {
      this.byId.delete(k);
      if (orphan) this.orphans.add(k);
    }
  }

  /* The entry of the longest line still waiting, removed: every line before
   * the one the daemon found too long was short enough. */
  takeLongest() {
    let best = null;
    for (const e of this.byId.values()) if (!best || e.size > best.size) best = e;
    for (const e of this.anon) if (!best || e.size > best.size) best = e;
    if (!best) return null;
    for (const [k, e] of this.byId) {
      if (e === best) {
        this.byId.delete(k);
        return best;
      }
    }
    this.anon.splice(this.anon.indexOf(best), 1);
    return best;
  }

  /* [entry or null, lease string to release or null] for a reply. */
  take(reply) {
    const rid = reply.id;
    if (rid === undefined || rid === null) {
      if (reply.error === LINE_TOO_LONG) return [this.takeLongest(), null];
      return [this.anon.length ? this.anon.shift() : null, null];
    }
    const k = idKey(rid);
    const e = this.byId.get(k);
    if (e !== undefined) {
      this.byId.delete(k);
      return [e, null];
    }
    if (this.orphans.has(k)) {
      this.orphans.delete(k);
      return [null, leaseOf(reply)];
    }
    return [null, null];
  }

  clear() {
    const all = [...this.byId.values(), ...this.anon];
    this.byId.clear();
    this.anon = [];
    this.orphans.clear();
    return all;
  }
}

function leaseOf(reply) {
  return reply && reply.ok === true && typeof reply.lease === 'string' ? reply.lease : null;
}

/* Whether the daemon closes the connection after this reply. */
function closesConnection(reply) {
  return reply.id == null && (reply.error === LINE_TOO_LONG || reply.error === FORBIDDEN);
}

/* Whether this is the daemon refusing the connection itself. */
function refusal(reply) {
  return reply.id == null && reply.error === FORBIDDEN;
}

function lost(reason) {
  return { ok: false, error: 'unavailable', message: reason };
}

module.exports = {
  DEFAULT_SOCKET,
  SOCKET_ENV,
  DEFAULT_MAX_LINE,
  LINE_TOO_LONG,
  BAD_REPLY,
  MAX_WAIT_MS,
  socketPath,
  wholeMs,
  checkMaxLine,
  urlHost,
  acquireRequest,
  releaseRequest,
  penalizeRequest,
  overrideRequest,
  keyRequest,
  outcomeFor,
  splitArgs,
  connectBudget,
  spend,
  retryableConnect,
  backoff,
  encode,
  decode,
  frame,
  rawId,
  idKey,
  Pending,
  leaseOf,
  closesConnection,
  refusal,
  lost,
};
