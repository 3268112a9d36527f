'use strict';
/*
 * connect.test.js - waiting for the daemon, and reconnecting.
 *
 * A missing or refused socket is retried for connectTimeoutMs, never
 * beyond an acquire's own budget; a request in flight when the connection
 * dies rejects with Unavailable; the next request connects again (a
 * restart between requests is not an error). Every test runs the real
 * daemon, started late, stopped, restarted or killed under the client.
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const admit = require('../index.js');
const { Daemon, PROMPT, EPS, key, since, sleep, tmpDir } = require('./support/daemon');

const LATE = 500;

async function unavailableAtOnce(c, call) {
  const t0 = performance.now();
  await assert.rejects(call(), (e) => {
    assert.ok(e instanceof admit.Unavailable, String(e));
    assert.equal(e.code, 'unavailable');
    assert.ok(e.message.includes(c.socket), e.message);
    assert.equal(e.retryable, true);
    return true;
  });
  assert.ok(since(t0) < PROMPT, `took ${since(t0)} ms`);
}

test('no socket, connectTimeoutMs 0: every call rejects Unavailable at once', async () => {
  const d = tmpDir('admit-node-none-');
  try {
    const c = new admit.Client({ socket: path.join(d, 'none.sock'), connectTimeoutMs: 0 });
    for (const call of [() => c.ping(), () => c.status(), () => c.acquire('one', 'k', { timeoutMs: 1000 }),
      () => c.tryAcquire('one', 'k'), () => c.release('lease-x'), () => c.penalize('one', 'k', { retryAfterMs: 1 })]) {
      await unavailableAtOnce(c, call);
    }
    await assert.rejects(c.ping(), /ENOENT/);
  } finally {
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('a socket nobody listens on (ECONNREFUSED) is Unavailable too', async () => {
  const d = tmpDir('admit-node-refused-');
  const p = path.join(d, 'dead.sock');
  const srv = net.createServer();
  await new Promise((r) => srv.listen(p, r));
  // Close the listener but keep the file: a stale socket, as after a crash.
  fs.linkSync(p, p + '.keep');
  await new Promise((r) => srv.close(r));
  fs.renameSync(p + '.keep', p);
  try {
    const c = new admit.Client({ socket: p, connectTimeoutMs: 0 });
    await unavailableAtOnce(c, () => c.ping());
    await assert.rejects(c.ping(), /ECONNREFUSED/);
  } finally {
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('connectTimeoutMs bounds the retries', async () => {
  const d = tmpDir('admit-node-none-');
  try {
    const c = new admit.Client({ socket: path.join(d, 'none.sock'), connectTimeoutMs: 300 });
    const t0 = performance.now();
    await assert.rejects(c.ping(), admit.Unavailable);
    const took = since(t0);
    assert.ok(took >= 300 - EPS && took < 300 + PROMPT, `took ${took} ms`);
  } finally {
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test("an acquire's budget bounds the connect; tryAcquire tries once", async () => {
  const d = tmpDir('admit-node-none-');
  try {
    const c = new admit.Client({ socket: path.join(d, 'none.sock') }); // connectTimeoutMs 5000
    let t0 = performance.now();
    await assert.rejects(c.acquire('one', 'k', { timeoutMs: 300 }), admit.Unavailable);
    const took = since(t0);
    assert.ok(took >= 300 - EPS && took < 300 + PROMPT, `took ${took} ms`);
    t0 = performance.now();
    await assert.rejects(c.tryAcquire('one', 'k'), admit.Unavailable);
    assert.ok(since(t0) < 100, `took ${since(t0)} ms`);
  } finally {
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('a client first: the request waits for a daemon starting late', async () => {
  const daemon = new Daemon();
  const started = daemon.startLater(LATE);
  try {
    const c = new admit.Client({ socket: daemon.socket });
    const t0 = performance.now();
    const lease = await c.acquire('one', 'late-1', { timeoutMs: 3000 });
    const took = since(t0);
    assert.ok(took >= LATE - EPS && took < LATE + 3000, `took ${took} ms`);
    assert.equal(lease.backend, 'local');
    await assert.rejects(c.tryAcquire('one', 'late-1'), admit.Limited); // really held there
    assert.equal(await lease.release(), true);
    await c.close();
  } finally {
    await started.catch(() => {});
    await daemon.stop();
  }
});

test('the time spent connecting is taken from the wait', async () => {
  // The daemon holds the key for another client; this client's socket path
  // appears only LATE ms from now (a symlink), as for a daemon starting.
  const daemon = await new Daemon().start();
  const d = tmpDir('admit-node-link-');
  const link = path.join(d, 'admitd.sock');
  const holder = new admit.Client({ socket: daemon.socket });
  try {
    const k = key('spend');
    await holder.acquire('one', k);
    setTimeout(() => fs.symlinkSync(daemon.socket, link), LATE);
    const c = new admit.Client({ socket: link });
    const t0 = performance.now();
    await assert.rejects(c.acquire('one', k, { timeoutMs: 1000 }), admit.Timeout);
    const took = since(t0);
    // 1500 ms if the whole budget were still sent once connected.
    assert.ok(took >= 1000 - EPS && took < 1300, `took ${took} ms`);
    await c.close();
  } finally {
    await holder.close();
    fs.rmSync(d, { recursive: true, force: true });
    await daemon.stop();
  }
});

test('a restart between requests: the next request connects again', async () => {
  const daemon = await new Daemon().start();
  const c = new admit.Client({ socket: daemon.socket });
  try {
    const k = key('restart');
    assert.equal(await c.ping(), true);
    const before = await c.acquire('one', k);
    await daemon.halt();
    await daemon.start();
    // The connection the daemon closed is noticed before sending.
    assert.equal(await c.ping(), true);
    const lease = await c.acquire('one', k, { timeoutMs: 1000 });
    assert.equal(lease.backend, 'local');
    // The old lease went with the old daemon: releasing it settles nothing.
    assert.equal(await before.release(), false);
    assert.equal(await lease.release(), true);
  } finally {
    await c.close();
    await daemon.stop();
  }
});

test('the connect retry covers the gap of a restart', async () => {
  const daemon = await new Daemon().start();
  const c = new admit.Client({ socket: daemon.socket });
  try {
    assert.equal(await c.ping(), true);
    await daemon.halt(true); // SIGKILL: the stale socket file stays
    const started = daemon.startLater(LATE);
    const t0 = performance.now();
    const lease = await c.acquire('one', 'gap-1', { timeoutMs: 3000 });
    assert.ok(since(t0) >= LATE - EPS, `took ${since(t0)} ms`);
    assert.equal(await lease.release(), true);
    await started;
  } finally {
    await c.close();
    await daemon.stop();
  }
});

test('a request in flight when the daemon dies rejects; the next one reconnects', async () => {
  const daemon = await new Daemon().start();
  const c = new admit.Client({ socket: daemon.socket });
  try {
    const k = key('inflight');
    await c.acquire('one', k);
    const waiting = c.acquire('one', k, { timeoutMs: 5000 }).then(() => null, (e) => e);
    await sleep(100);
    const t0 = performance.now();
    await daemon.halt(true);
    const err = await waiting;
    assert.ok(err instanceof admit.Unavailable, String(err));
    assert.match(err.message, /connection to admitd/);
    assert.ok(since(t0) < PROMPT, `took ${since(t0)} ms`);
    await daemon.start();
    const lease = await c.acquire('one', k, { timeoutMs: 1000 }); // a new daemon: the key is free
    assert.equal(await lease.release(), true);
  } finally {
    await c.close();
    await daemon.stop();
  }
});

test('SIGTERM answers a waiting acquire ShuttingDown', async () => {
  const daemon = await new Daemon().start();
  const c = new admit.Client({ socket: daemon.socket });
  try {
    const k = key('term');
    await c.acquire('one', k);
    const waiting = c.acquire('one', k, { timeoutMs: 5000 }).then(() => null, (e) => e);
    await sleep(100);
    await daemon.halt();
    const err = await waiting;
    assert.ok(err instanceof admit.ShuttingDown, String(err));
    assert.equal(err.code, 'shutting_down');
    assert.equal(err.retryable, true);
  } finally {
    await c.close();
    await daemon.stop();
  }
});

test('the socket path: the option, else $ADMITD_SOCKET, else the default', () => {
  const old = process.env.ADMITD_SOCKET;
  try {
    delete process.env.ADMITD_SOCKET;
    assert.equal(new admit.Client().socket, '/run/admitd/admitd.sock');
    process.env.ADMITD_SOCKET = '/tmp/from-env.sock';
    assert.equal(new admit.Client().socket, '/tmp/from-env.sock');
    assert.equal(new admit.Client({ socket: '/tmp/arg.sock' }).socket, '/tmp/arg.sock');
  } finally {
    if (old === undefined) delete process.env.ADMITD_SOCKET;
    else process.env.ADMITD_SOCKET = old;
  }
});
