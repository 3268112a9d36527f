'use strict';
/*
 * client.test.js - the Client against the real admitd (local mode).
 *
 * Every call's result is checked, refusals included: their class, code,
 * retryAfterMs, rule and retryable; a lease's fields; release twice sends
 * once; the scope's default key; url keys; pipelining (replies out of
 * order, matched by id); tokens; penalize and reset; override; dispose;
 * arguments refused before anything is sent.
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const admit = require('../index.js');
const pkg = require('../package.json');
const { Daemon, PROMPT, EPS, key, since, sleep } = require('./support/daemon');

let daemon;
let client;

test.before(async () => {
  daemon = await new Daemon().start();
});
test.after(async () => {
  if (client) await client.close();
  await daemon.stop();
});
test.beforeEach(() => {
  client = new admit.Client({ socket: daemon.socket });
});
test.afterEach(async () => {
  await client.close();
  client = null;
});

async function admitted(scope, k) {
  try {
    await (await client.tryAcquire(scope, k)).release();
    return true;
  } catch (e) {
    if (e instanceof admit.Limited) return false;
    throw e;
  }
}

test('ping, and status naming the version package.json carries', async () => {
  assert.equal(await client.ping(), true);
  const st = await client.status();
  assert.equal(st.ok, true);
  assert.equal('id' in st, false);
  assert.equal(st.version, pkg.version);
  assert.equal(admit.VERSION, pkg.version);
  assert.equal(st.backend, 'local');
  for (const s of ['one', 'quota', 'pen', 'tok', 'cost', 'fw', 'dflt']) {
    assert.equal(typeof st.scopes[s].leases, 'number');
    assert.equal(typeof st.scopes[s].waiting, 'number');
  }
});

test('an admitted lease and its fields', async () => {
  const k = key('admitted');
  const lease = await client.acquire('one', k, { timeoutMs: 1000 });
  assert.ok(lease instanceof admit.Lease);
  assert.match(lease.lease, /^[0-9a-f._A-Za-z-]+$/);
  assert.equal(String(lease), lease.lease);
  assert.equal(lease.backend, 'local');
  assert.ok(Number.isInteger(lease.waitedMs) && lease.waitedMs >= 0 && lease.waitedMs < PROMPT, `waitedMs ${lease.waitedMs}`);
  assert.equal(lease.scope, 'one');
  assert.equal(lease.key, k);
  assert.equal(lease.targets, null);
  assert.equal(lease.shadowLimited, false);
  assert.equal(lease.released, false);
  // Held: a second lease on the key is refused, by max_concurrent.
  await assert.rejects(client.tryAcquire('one', k), (e) => {
    assert.ok(e instanceof admit.Limited);
    assert.equal(e.code, 'limited');
    assert.equal(e.rule, 'max_concurrent');
    assert.equal(e.retryable, true);
    assert.ok(e.retryAfterMs > 0 && e.retryAfterMs <= 1000, `retryAfterMs ${e.retryAfterMs}`);
    return true;
  });
  assert.equal(await lease.release(), true);
  assert.equal(lease.released, true);
  assert.equal(lease.held, true);
  assert.equal(await admitted('one', k), true);
});

test('admit: an admission with nothing to release, counted as a lease is', async () => {
  const k = key('admit');
  const a = await client.admit('fw', k, { cost: 2 });
  assert.ok(a instanceof admit.Admission);
  assert.equal(a instanceof admit.Lease, false);
  assert.equal('lease' in a.reply, false);
  assert.deepEqual([a.scope, a.key, a.remaining, a.backend], ['fw', k, 3, 'local']);
  assert.equal((await client.tryAdmit('fw', k, { cost: 3 })).remaining, 0);
  await assert.rejects(client.tryAdmit('fw', k), (e) => e instanceof admit.Limited && e.retryAfterMs > 0);
  assert.equal((await client.status()).leases, 0);
  // a scope whose release books something refuses it; the connection goes on
  await assert.rejects(client.admit('one', k), (e) => e instanceof admit.BadRequest && /max_concurrent/.test(e.message));
  await (await client.tryAcquire('one', k)).release();
  // what only a lease can carry is refused before anything is sent
  await assert.rejects(client.admit('fw', k, { detach: true }), TypeError);
});

test('tenant: sent with acquire and admit; a bad name is BadRequest', async () => {
  const k = key('tenant');
  await (await client.tryAcquire('fw', k, { tenant: 'gold' })).release();
  await client.admit('fw', k, { tenant: 'acme.b-1' });
  await assert.rejects(client.tryAcquire('fw', k, { tenant: 'a b' }),
    (e) => e instanceof admit.BadRequest && /"tenant" must be 1 to 64/.test(e.message));
  await assert.rejects(client.admit('fw', k, { tenant: 7 }), TypeError);
});

test('a refusal: Limited with the quota rule and its retryAfterMs', async () => {
  const k = key('limited');
  const first = await client.tryAcquire('quota', k);
  assert.equal(first.backend, 'local');
  const err = await client.tryAcquire('quota', k).then(() => null, (e) => e);
  assert.ok(err instanceof admit.Limited, String(err));
  assert.ok(err instanceof admit.AdmitError);
  assert.equal(err.name, 'Limited');
  assert.equal(err.code, 'limited');
  assert.equal(err.rule, 'quota 1/1h');
  assert.equal(err.retryable, true);
  assert.ok(err.retryAfterMs > 3600000 - 60000 && err.retryAfterMs <= 3600000, `retryAfterMs ${err.retryAfterMs}`);
  assert.equal(err.retryAfterMs, err.reply.retry_after_ms);
  assert.equal(typeof err.message, 'string');
  // A budget shorter than the wait: BudgetExceeded at once, not slept out.
  const t0 = performance.now();
  await assert.rejects(client.acquire('quota', k, { timeoutMs: 2000 }), (e) => {
    assert.ok(e instanceof admit.BudgetExceeded);
    assert.equal(e.code, 'budget_exceeded');
    assert.equal(e.rule, 'quota 1/1h');
    assert.ok(e.retryAfterMs > 3600000 - 60000);
    assert.equal(e.retryable, true);
    return true;
  });
  assert.ok(since(t0) < PROMPT, `took ${since(t0)} ms`);
});

test('a wait for a slot ends in Timeout after the whole budget', async () => {
  const k = key('timeout');
  const holder = await client.acquire('one', k);
  const t0 = performance.now();
  await assert.rejects(client.acquire('one', k, { timeoutMs: 300 }), (e) => {
    assert.ok(e instanceof admit.Timeout);
    assert.equal(e.code, 'timeout');
    assert.equal(e.rule, 'max_concurrent');
    assert.equal(e.retryable, true);
    return true;
  });
  const took = since(t0);
  assert.ok(took >= 300 - EPS && took < 300 + PROMPT, `took ${took} ms`);
  await holder.release();
});

test('ExceedsLimit: no wait can admit it, and it is not retryable', async () => {
  await assert.rejects(client.acquire('cost', key('exceeds'), { cost: 3, timeoutMs: 1000 }), (e) => {
    assert.ok(e instanceof admit.ExceedsLimit);
    assert.equal(e instanceof admit.Limited, false);
    assert.equal(e.code, 'exceeds_limit');
    assert.equal(e.rule, 'requests token-bucket 2/1h');
    assert.equal(e.limit, 2);
    assert.equal(e.retryAfterMs, null);
    assert.equal(e.retryable, false);
    return true;
  });
  // cost counts: 2 of 2 taken, then refused.
  const k = key('cost');
  await client.tryAcquire('cost', k, { cost: 2 });
  await assert.rejects(client.tryAcquire('cost', k), admit.Limited);
});

test('UnknownScope, and BadRequest from the daemon', async () => {
  await assert.rejects(client.acquire('no-such-scope', 'k'), (e) => {
    assert.ok(e instanceof admit.UnknownScope);
    assert.equal(e.code, 'unknown_scope');
    assert.equal(e.retryable, false);
    return true;
  });
  await assert.rejects(client.request({ op: 'frob' }), (e) => {
    assert.ok(e instanceof admit.BadRequest);
    assert.equal(e.code, 'unknown_op');
    assert.equal(e.retryable, false);
    return true;
  });
  // acquire without a key on a scope with no default key
  await assert.rejects(client.acquire('one'), (e) => e instanceof admit.BadRequest && e.code === 'bad_request');
  assert.equal(await client.ping(), true); // the connection stays usable
});

test('release twice sends once', async () => {
  const k = key('twice');
  const lease = await client.acquire('one', k);
  const before = (await client.status()).scopes.one.releases;
  assert.equal(await lease.release(), true);
  assert.equal((await client.status()).scopes.one.releases, before + 1);
  assert.equal(await lease.release(), false); // nothing sent
  assert.equal((await client.status()).scopes.one.releases, before + 1);
  // Two calls at once still send one release.
  const l2 = await client.acquire('one', k);
  const both = await Promise.all([l2.release(), l2.release()]);
  assert.deepEqual(both.sort(), [false, true]);
  assert.equal((await client.status()).scopes.one.releases, before + 2);
  // The client's release of the string does send: the daemon says not held.
  assert.equal(await client.release(l2.lease), false);
  assert.equal((await client.status()).scopes.one.releases, before + 3);
  assert.equal(await client.release('no-such-lease-0123'), false);
});

test("a scope's default key needs no key", async () => {
  const lease = await client.acquire('dflt', { timeoutMs: 1000 });
  assert.equal(lease.scope, 'dflt');
  assert.equal(lease.key, null);
  // The lease holds the conf's key, "shared".
  await assert.rejects(client.tryAcquire('dflt', 'shared'), (e) => e instanceof admit.Limited && e.rule === 'max_concurrent');
  await assert.rejects(client.tryAcquire('dflt'), admit.Limited);
  assert.equal(await admitted('dflt', 'other'), true);
  assert.equal(await lease.release(), true);
  assert.equal(await admitted('dflt', 'shared'), true);
  // inspect and reset take it too; a scope without one is the daemon's bad_request
  assert.equal((await client.inspect('dflt')).key, 'shared');
  assert.equal((await client.reset('dflt')).ok, true);
  await assert.rejects(client.reset('one'), admit.BadRequest);
});

test('a url is keyed by its host, as the daemon does', async () => {
  const host = `${key('url').toLowerCase()}.example.com`;
  const lease = await client.acquire('one', { url: `https://User@${host.toUpperCase()}:8443/x?y` });
  assert.equal(lease.key, host);
  assert.equal(lease.url, `https://User@${host.toUpperCase()}:8443/x?y`);
  await assert.rejects(client.tryAcquire('one', host), admit.Limited);
  await lease.release();
  assert.equal(admit.urlHost('https://u@[::1]:8/x'), '::1');
  assert.equal(admit.urlHost('no-scheme'), null);
});

test('pipelined: replies out of order, each matched by id', async () => {
  const k = key('pipelined');
  const holder = await client.acquire('one', k);
  const order = [];
  const waiter = client.acquire('one', k, { timeoutMs: 3000 }).then((l) => { order.push('acquire'); return l; });
  await sleep(50);
  const pings = Promise.all([client.ping(), client.status()]).then(() => order.push('ping+status'));
  await pings;
  assert.deepEqual(order, ['ping+status']); // the waiting acquire did not hold them up
  await sleep(100);
  await holder.release();
  const l = await waiter;
  assert.deepEqual(order, ['ping+status', 'acquire']);
  assert.ok(l.waitedMs >= 100, `waitedMs ${l.waitedMs}`);
  await l.release();
});

test('tokens reported at release are charged', async () => {
  const k = key('tokens');
  const lease = await client.acquire('tok', k);
  lease.tokens = { input: 60 };
  assert.equal(await lease.release(), true);
  const info = await client.inspect('tok', k);
  assert.equal(info.rules[0].rule, 'tokens.input token-bucket 100/1h');
  assert.equal(info.rules[0].remaining, 40);
  // A reservation is charged at acquire, then settled by the release.
  const l2 = await client.acquire('tok', k, { reserve: { input: 30 } });
  assert.equal((await client.inspect('tok', k)).rules[0].remaining, 10);
  await l2.release({ tokens: { input: 5 } });
  assert.equal((await client.inspect('tok', k)).rules[0].remaining, 35);
  // A misspelt meter is refused by the daemon, and the lease stays held.
  const l3 = await client.acquire('tok', k);
  await assert.rejects(l3.release({ tokens: { ouput: 1 } }), (e) => e instanceof admit.BadRequest && /ouput/.test(e.message));
  assert.equal(l3.released, false);
  assert.equal(await l3.release(), true);
});

test('penalize holds a key back; reset lifts it', async () => {
  const k = key('pen');
  const r = await client.penalize('pen', k, { retryAfter: '120' });
  assert.equal(r.penalty_ms, 120000);
  await assert.rejects(client.tryAcquire('pen', k), (e) => {
    assert.ok(e instanceof admit.Limited);
    assert.equal(e.rule, 'penalty');
    assert.ok(e.retryAfterMs > 110000 && e.retryAfterMs <= 120000, `retryAfterMs ${e.retryAfterMs}`);
    return true;
  });
  const info = await client.inspect('pen', k);
  assert.ok(info.penalty_ms > 110000 && info.penalty_ms <= 120000);
  const rr = await client.reset('pen', k);
  assert.equal(rr.backend, 'local');
  assert.equal(await admitted('pen', k), true);
  // retryAfterMs in ms, and seconds as a number.
  assert.equal((await client.penalize('pen', key('pen-ms'), { retryAfterMs: 1500 })).penalty_ms, 1500);
  assert.equal((await client.penalize('pen', key('pen-s'), { retryAfter: 2 })).penalty_ms, 2000);
});

test('override tightens a rule until reset lifts it; loosening is bounded', async () => {
  const k = key('ovr');
  const r = await client.override('ovr', k, { ttlMs: 60000, rules: { 0: 1 } });
  assert.deepEqual([r.ok, r.backend, r.ttl_ms, 'id' in r], [true, 'local', 60000, false]);
  const lease = await client.tryAcquire('ovr', k);
  assert.equal(lease.remaining, 0);
  await assert.rejects(client.tryAcquire('ovr', k), (e) => e instanceof admit.Limited && e.rule === 'requests fixed-window 5/1h');
  await lease.release();
  // past override_max (2 x 5): the daemon's BadRequest
  await assert.rejects(client.override('ovr', k, { ttlMs: 60000, rules: { 0: 11 } }),
    (e) => e instanceof admit.BadRequest && e.code === 'bad_request' && /override_max/.test(e.message) && !e.retryable);
  const info = await client.inspect('ovr', k);
  assert.deepEqual(info.override.rules, { 0: 1 });
  assert.ok(info.override.ttl_ms > 0 && info.override.ttl_ms <= 60000, `ttl_ms ${info.override.ttl_ms}`);
  assert.equal(info.rules[0].capacity, 1);
  assert.equal((await client.reset('ovr', k)).ok, true);
  const after = await client.inspect('ovr', k);
  assert.equal('override' in after, false);
  assert.equal(after.rules[0].capacity, 5);
  assert.equal(await admitted('ovr', k), true);
});

test('override: the default key, a url, replacing, and the refusals', async () => {
  await client.override('ovr', { ttlMs: 60000, rules: { 0: 1 } });
  assert.equal((await client.inspect('ovr', 'k')).override.rules['0'], 1);
  const host = `${key('ovr-url').toLowerCase()}.example.com`;
  await client.override({ scope: 'ovr', url: `https://${host.toUpperCase()}/x`, ttlMs: 60000, rules: { 0: 10 } });
  assert.equal((await client.tryAcquire('ovr', host)).remaining, 9);
  await client.override('ovr', host, { ttlMs: 60000, rules: { 0: 2 } }); // replaces the last whole
  assert.equal(await admitted('ovr', host), true);
  assert.equal(await admitted('ovr', host), false);
  await assert.rejects(client.override('pen', 'k', { ttlMs: 1000, rules: { 0: 1 } }), admit.BadRequest);
  await assert.rejects(client.override('ovr', 'k', { ttlMs: 1000, rules: { fast: 1 } }), admit.BadRequest);
  await assert.rejects(client.override('ovr', 'k', { ttlMs: 1000, minDelayMs: 5 }), admit.BadRequest);
  await assert.rejects(client.override('nope', 'k', { ttlMs: 1000, rules: { 0: 1 } }), admit.UnknownScope);
});

test('a multi-target lease names its targets; a refusal books nothing', async () => {
  const k1 = key('t1');
  const k2 = key('t2');
  const lease = await client.acquire({ targets: [{ scope: 'one', key: k1 }, { scope: 'quota', url: `http://${k2.toLowerCase()}/` }] });
  assert.equal(lease.scope, null);
  assert.deepEqual(lease.targets, [{ scope: 'one', key: k1 }, { scope: 'quota', url: `http://${k2.toLowerCase()}/`, key: k2.toLowerCase() }]);
  await lease.release();
  const k3 = key('t3');
  await assert.rejects(client.tryAcquire({ targets: [{ scope: 'one', key: k3 }, { scope: 'quota', key: k2.toLowerCase() }] }),
    (e) => e instanceof admit.Limited && e.rule === 'quota 1/1h');
  assert.equal(await admitted('one', k3), true); // rolled back
});

test('disposing of a lease releases it; disposing of the client closes it', async () => {
  const k = key('dispose');
  const lease = await client.acquire('one', k);
  await lease[admit.asyncDispose]();
  assert.equal(lease.released, true);
  assert.equal(lease.held, true);
  assert.equal(await admitted('one', k), true);
  const c2 = new admit.Client({ socket: daemon.socket });
  await c2.acquire('one', k);
  await c2[admit.asyncDispose]();
  await sleep(50);
  assert.equal(await admitted('one', k), true); // the daemon released it with the connection
  await assert.rejects(c2.ping(), (e) => e instanceof admit.Unavailable && /client closed/.test(e.message));
  if (typeof Symbol.asyncDispose === 'symbol') assert.equal(admit.asyncDispose, Symbol.asyncDispose);
  else assert.equal(admit.asyncDispose, Symbol.for('nodejs.asyncDispose'));
});

test('a detached lease outlives its connection; another client releases it', async () => {
  const k = key('detach');
  const c2 = new admit.Client({ socket: daemon.socket });
  const lease = await c2.acquire('one', k, { detach: true });
  await c2.close();
  await sleep(50);
  assert.equal(await admitted('one', k), false);
  assert.equal(await client.release(lease.lease), true);
  assert.equal(await admitted('one', k), true);
});

test('a request line longer than maxLine is refused here, never sent', async () => {
  const c2 = new admit.Client({ socket: daemon.socket, maxLine: 200 });
  try {
    const l = await c2.acquire('one', key('long-holder'));
    await assert.rejects(c2.acquire('one', 'x'.repeat(300)), (e) => {
      assert.ok(e instanceof admit.BadRequest);
      assert.equal(e.code, 'line_too_long');
      assert.match(e.message, /not sent/);
      return true;
    });
    assert.equal(await l.release(), true); // the connection (and its lease) survived
  } finally {
    await c2.close();
  }
});

test('arguments are checked before anything is sent', async () => {
  const c = new admit.Client({ socket: '/nonexistent/admitd.sock', connectTimeoutMs: 0 });
  await assert.rejects(c.acquire('one', 'a', { url: 'http://a/' }), TypeError);
  await assert.rejects(c.acquire('one', 'a', { timeoutMs: -1 }), RangeError);
  await assert.rejects(c.acquire('one', 'a', { timeoutMs: 86400001 }), RangeError);
  await assert.rejects(c.acquire('one', 'a', { cost: -2 }), RangeError);
  await assert.rejects(c.acquire('one', 'a', { cost: 1.5 }), TypeError);
  await assert.rejects(c.acquire({ targets: [] }), RangeError);
  await assert.rejects(c.acquire({ targets: [{ scope: 's', key: 'k', weight: 2 }] }), TypeError);
  await assert.rejects(c.penalize('one', 'a'), TypeError);
  await assert.rejects(c.release(42), TypeError);
  await assert.rejects(c.release('x', { outcome: 'maybe' }), TypeError);
  await assert.rejects(c.reset(), TypeError);
  await assert.rejects(c.inspect(), TypeError);
  await assert.rejects(c.override('ovr', 'a', { rules: { 0: 1 } }), TypeError); // no ttlMs
  await assert.rejects(c.override('ovr', 'a', { ttlMs: 1000 }), TypeError); // nothing to set
  await assert.rejects(c.override('ovr', 'a', { ttlMs: 0, rules: { 0: 1 } }), RangeError);
  await assert.rejects(c.override('ovr', 'a', { ttlMs: 2592000001, rules: { 0: 1 } }), RangeError);
  await assert.rejects(c.override('ovr', 'a', { ttlMs: '1000', rules: { 0: 1 } }), TypeError);
  await assert.rejects(c.override('ovr', 'a', { ttlMs: 1000, minDelayMs: -1 }), RangeError);
  await assert.rejects(c.override('ovr', 'a', { ttlMs: 1000, minDelayMs: 86400001 }), RangeError);
  await assert.rejects(c.override('ovr', 'a', { ttlMs: 1000, rules: [] }), TypeError);
  await assert.rejects(c.override('ovr', 'a', { ttlMs: 1000, rules: {} }), RangeError);
  await assert.rejects(c.override('ovr', 'a', { ttlMs: 1000, rules: { 0: 0 } }), RangeError);
  await assert.rejects(c.override('ovr', 'a', { ttlMs: 1000, rules: { 0: 1.5 } }), TypeError);
  await assert.rejects(c.override('ovr', 'a', { ttlMs: 1000, rules: { '': 1 } }), TypeError);
  await assert.rejects(c.override('ovr', 'a', { url: 'http://a/', ttlMs: 1000, rules: { 0: 1 } }), TypeError);
  assert.throws(() => new admit.Client({ connectTimeoutMs: -1 }), RangeError);
  assert.throws(() => new admit.Client({ connectTimeoutMs: '5' }), TypeError);
  assert.throws(() => new admit.Client({ maxLine: 1 }), RangeError);
});

test('outcomeFor maps an upstream status to a release outcome', () => {
  assert.equal(admit.outcomeFor(200), 'ok');
  assert.equal(admit.outcomeFor(304), 'ok');
  assert.equal(admit.outcomeFor(429), 'limited');
  assert.equal(admit.outcomeFor(503, '30'), 'limited');
  assert.equal(admit.outcomeFor(503), 'error');
  assert.equal(admit.outcomeFor(500, '30'), 'error');
  assert.equal(admit.outcomeFor(404), 'error');
});
