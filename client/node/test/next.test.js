'use strict';
/*
 * next.test.js - the protocol's newer fields and ops through the client,
 * against the real daemon:
 *
 * - acquire replies (admitted or refused) carry remaining and reset_ms
 *   when a rule limits the targets: Lease and AdmitError expose them as
 *   remaining and resetMs (null when absent);
 * - ... and limits, per meter: { rule, limit, remaining, resetMs };
 * - a refusal names the target that refused (target: index, scope, key);
 * - cancel ends a waiting acquire of the same connection: the acquire is
 *   answered "canceled" first, then the cancel with found; an AbortSignal
 *   on acquire sends it, and nothing is spent;
 * - release takes an outcome ("ok", "limited", "error").
 *
 * A daemon without these answers cancel with unknown_op and leaves the
 * fields out: these tests fail against it, and pass once it has them.
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const admit = require('../index.js');
const { Daemon, PROMPT, key, since, sleep } = require('./support/daemon');
const { scripted, reply } = require('./support/scripted');

let daemon;
let client;

test.before(async () => {
  daemon = await new Daemon().start();
  client = new admit.Client({ socket: daemon.socket });
});
test.after(async () => {
  await client.close();
  await daemon.stop();
});

test('a lease carries what the tightest rule still allows, and when it is full again', async () => {
  const k = key('remaining');
  const l1 = await client.acquire('fw', k); // requests fixed-window 5/1h
  assert.equal(l1.remaining, 4);
  assert.ok(l1.resetMs > 0 && l1.resetMs <= 3600000, `resetMs ${l1.resetMs}`);
  const l2 = await client.acquire('fw', k, { cost: 2 });
  assert.equal(l2.remaining, 2);
  await client.acquire('fw', k, { cost: 2 });
  await assert.rejects(client.tryAcquire('fw', k), (e) => {
    assert.ok(e instanceof admit.Limited);
    assert.equal(e.remaining, 0);
    assert.ok(e.resetMs > 0 && e.resetMs <= 3600000, `resetMs ${e.resetMs}`);
    assert.ok(e.retryAfterMs > 0);
    return true;
  });
  // Nothing limits the scope: the fields are absent.
  const free = await client.acquire('free', key('free'));
  assert.equal(free.remaining, null);
  assert.equal(free.resetMs, null);
  assert.equal('remaining' in free.reply, false);
});

test('limits: per meter, its tightest limit, on a lease and on a refusal', async () => {
  const k = key('limits');
  const l1 = await client.acquire('gw', k);
  await l1.release({ tokens: { input: 300, output: 200 } });
  const l2 = await client.acquire('gw', k);
  assert.deepEqual(Object.keys(l2.limits).sort(), ['requests', 'tokens']);
  const { requests, tokens } = l2.limits;
  assert.deepEqual([requests.rule, requests.limit, requests.remaining], ['rpm', 20, 18]);
  assert.deepEqual([tokens.rule, tokens.limit, tokens.remaining], ['1', 6000, 5500]);
  assert.ok(tokens.resetMs > 0 && tokens.resetMs <= 3600000, `resetMs ${tokens.resetMs}`);
  await l2.release();
  await (await client.acquire('gw', k, { cost: 18 })).release();
  await assert.rejects(client.tryAcquire('gw', k), (e) => {
    assert.ok(e instanceof admit.Limited);
    assert.equal(e.limits.requests.remaining, 0);
    assert.equal(e.limits.tokens.rule, '1');
    return true;
  });
  assert.deepEqual((await client.acquire('free', key('free'))).limits, {});
});

test('limits: a member of the wrong shape is left out', () => {
  const { limitsOf } = require('../lib/errors');
  assert.deepEqual(limitsOf({ limits: {
    requests: { rule: 'r', limit: 2, remaining: 1, reset_ms: 5 },
    tokens: { rule: 't', limit: '6000', remaining: 1, reset_ms: 5 },
    concurrency: [1] } }), { requests: { rule: 'r', limit: 2, remaining: 1, resetMs: 5 } });
  assert.deepEqual(limitsOf({ limits: 3 }), {});
  assert.deepEqual(limitsOf(null), {});
});

test('a refusal names the target that refused', async () => {
  const spent = key('spent');
  await client.tryAcquire('quota', spent);
  await assert.rejects(client.tryAcquire('quota', spent), (e) => {
    assert.deepEqual(e.target, { index: 0, scope: 'quota', key: spent });
    return true;
  });
  await assert.rejects(client.tryAcquire({ targets: [{ scope: 'pen', key: key('pen') }, { scope: 'quota', key: spent }] }), (e) => {
    assert.ok(e instanceof admit.Limited);
    assert.equal(e.rule, 'quota 1/1h');
    assert.deepEqual(e.target, { index: 1, scope: 'quota', key: spent });
    return true;
  });
});

test('cancel on the wire: the acquire answered canceled first, then found', async () => {
  const k = key('cancel');
  const holder = await client.acquire('one', k);
  const order = [];
  const acquired = client.requestLine(JSON.stringify({ op: 'acquire', scope: 'one', key: k, timeout_ms: 5000, id: 'w1' }))
    .then((r) => { order.push('acquire'); return r; });
  await sleep(50);
  const t0 = performance.now();
  const r = await client.cancel('w1');
  order.push('cancel');
  assert.ok(since(t0) < PROMPT);
  assert.deepEqual(r, { ok: true, found: true });
  const a = await acquired;
  assert.deepEqual(order, ['acquire', 'cancel']);
  assert.equal(a.ok, false);
  assert.equal(a.id, 'w1');
  assert.equal(a.error, 'canceled');
  assert.equal(typeof a.message, 'string');
  const e = admit.errorFromReply(a);
  assert.ok(e instanceof admit.Canceled);
  assert.equal(e.retryable, false);
  // Already answered, and never sent: found is false.
  assert.deepEqual(await client.cancel('w1'), { ok: true, found: false });
  assert.deepEqual(await client.cancel({ never: 'sent' }), { ok: true, found: false });
  await holder.release();
});

test('an aborted acquire is canceled, rejects AbortError, and spends nothing', async () => {
  const slot = key('abort-slot');
  const once = key('abort-once'); // quota 1/1h: one admission would spend it
  const holder = await client.acquire('one', slot);
  const ac = new AbortController();
  const p = client.acquire({ targets: [{ scope: 'one', key: slot }, { scope: 'quota', key: once }], timeoutMs: 5000, signal: ac.signal });
  await sleep(100);
  const t0 = performance.now();
  ac.abort(new Error('the user left'));
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof admit.AbortError);
    assert.equal(e.name, 'AbortError');
    assert.equal(e.cause.message, 'the user left');
    assert.equal(e.reply.error, 'canceled');
    return true;
  });
  assert.ok(since(t0) < PROMPT, `took ${since(t0)} ms`);
  assert.equal((await client.status()).scopes.one.waiting, 0);
  await holder.release();
  await sleep(50);
  const l = await client.tryAcquire('quota', once); // not spent
  assert.equal(l.backend, 'local');
});

test('an aborted admit is canceled and spends nothing', async () => {
  const k = key('abort-admit'); // quota 1/1h: one admission would spend it
  await client.penalize('quota', k, { retryAfterMs: 800 });
  const ac = new AbortController();
  const p = client.admit('quota', k, { timeoutMs: 5000, signal: ac.signal });
  await sleep(100);
  ac.abort(new Error('the user left'));
  await assert.rejects(p, (e) => e instanceof admit.AbortError && e.reply.error === 'canceled');
  assert.equal((await client.status()).scopes.quota.waiting, 0);
  await sleep(900); // the penalty is over
  assert.equal((await client.tryAdmit('quota', k)).remaining, 0); // the one admission, ours
});

test('a signal aborted before the acquire sends nothing', async () => {
  const k = key('pre-abort');
  const before = (await client.status()).scopes.quota;
  const ac = new AbortController();
  ac.abort();
  await assert.rejects(client.acquire('quota', k, { signal: ac.signal }), (e) => e.name === 'AbortError');
  const after = (await client.status()).scopes.quota;
  assert.equal(after.admitted, before.admitted);
  assert.equal(after.refused, before.refused);
  await client.tryAcquire('quota', k); // not spent
});

test('an abort right behind the release that admits the waiter: no lease is kept', async () => {
  const k = key('race');
  const holder = await client.acquire('one', k);
  const ac = new AbortController();
  const p = client.acquire('one', k, { timeoutMs: 5000, signal: ac.signal });
  await sleep(50);
  const rel = holder.release();
  for (let i = 0; i < 50; i++) await null; // the release is written first
  ac.abort();
  await assert.rejects(p, (e) => {
    assert.equal(e.name, 'AbortError');
    // Admitted before the cancel arrived (its lease released here), or
    // ended by it: either way nobody holds the key.
    assert.ok(e.reply === null || typeof e.reply.lease === 'string' || e.reply.error === 'canceled', JSON.stringify(e.reply));
    return true;
  });
  assert.equal(await rel, true);
  await sleep(50);
  const l = await client.tryAcquire('one', k);
  await l.release();
});

test('a lease that arrives after the abort is released at once (scripted peer)', async () => {
  const released = [];
  let acquireId = null;
  const srv = await scripted({
    answer(req, sock) {
      if (req.op === 'acquire') {
        acquireId = req.id; // waits: answered when the cancel comes
      } else if (req.op === 'cancel') {
        assert.equal(req.of, acquireId);
        // The daemon had admitted it just before: the lease, then found:false.
        reply(sock, { ok: true, id: acquireId, lease: 'L-race', waited_ms: 40, backend: 'local' });
        reply(sock, { ok: true, id: req.id, found: false });
      } else if (req.op === 'release') {
        released.push(req.lease);
        reply(sock, { ok: true, id: req.id, held: true });
      } else {
        reply(sock, { ok: true, id: req.id });
      }
    },
  });
  const c = new admit.Client({ socket: srv.socket });
  try {
    const ac = new AbortController();
    const p = c.acquire('s', 'k', { timeoutMs: 5000, signal: ac.signal });
    await sleep(30);
    ac.abort();
    await assert.rejects(p, (e) => {
      assert.ok(e instanceof admit.AbortError);
      assert.equal(e.reply.lease, 'L-race');
      return true;
    });
    assert.equal(await c.ping(), true);
    assert.deepEqual(released, ['L-race']);
  } finally {
    await c.close();
    await srv.close();
  }
});

test('an abort a daemon does not understand still rejects, and a later lease is released', async () => {
  const released = [];
  let late = null;
  const srv = await scripted({
    answer(req, sock) {
      if (req.op === 'acquire') late = () => reply(sock, { ok: true, id: req.id, lease: 'L-old', waited_ms: 90, backend: 'local' });
      else if (req.op === 'cancel') reply(sock, { ok: false, id: req.id, error: 'unknown_op', message: 'unknown op "cancel"' });
      else if (req.op === 'release') { released.push(req.lease); reply(sock, { ok: true, id: req.id, held: true }); }
      else reply(sock, { ok: true, id: req.id });
    },
  });
  const c = new admit.Client({ socket: srv.socket });
  try {
    const ac = new AbortController();
    const p = c.acquire('s', 'k', { timeoutMs: 5000, signal: ac.signal });
    await sleep(30);
    ac.abort();
    await assert.rejects(p, (e) => e instanceof admit.AbortError);
    late();
    await sleep(30);
    assert.equal(await c.ping(), true);
    assert.deepEqual(released, ['L-old']);
  } finally {
    await c.close();
    await srv.close();
  }
});

test('release tells the outcome', async () => {
  for (const outcome of ['ok', 'limited', 'error']) {
    const l = await client.acquire('pen', key(`outcome-${outcome}`));
    assert.equal(await l.release({ outcome }), true);
  }
  const l = await client.acquire('pen', key('outcome-prop'));
  l.outcome = admit.outcomeFor(429);
  assert.equal(await l.release(), true);
  await assert.rejects(client.release('x', { outcome: 'maybe' }), TypeError); // checked here
  // The daemon refuses any other outcome itself.
  const l2 = await client.acquire('pen', key('outcome-bad'));
  const r = await client.requestLine(JSON.stringify({ op: 'release', lease: l2.lease, outcome: 'maybe', id: 'o1' }));
  assert.equal(r.ok, false);
  assert.equal(r.error, 'bad_request');
  assert.equal(await l2.release(), true);
});
