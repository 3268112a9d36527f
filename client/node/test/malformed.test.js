'use strict';
/*
 * malformed.test.js - what the client makes of a server's bytes that the
 * real daemon does not send: a line that is not JSON, an error code this
 * version does not know, replies for ids nobody waits for, a reply split
 * across reads or two in one, a forbidden line at connect, a close in the
 * middle of a request. The peer is a Unix socket server in this test that
 * answers each request line from a script: its bytes are the input.
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const admit = require('../index.js');
const { PROMPT, since, sleep } = require('./support/daemon');
const { scripted, reply } = require('./support/scripted');


test('a line that is not JSON fails what is pending, and the next request reconnects', async () => {
  const srv = await scripted({
    answer(req, sock, conn) {
      if (conn.n === 0) sock.write('<html>oops</html>\n');
      else reply(sock, { ok: true, id: req.id });
    },
  });
  const c = new admit.Client({ socket: srv.socket });
  try {
    await assert.rejects(c.ping(), (e) => {
      assert.equal(e.constructor, admit.AdmitError);
      assert.equal(e.code, 'bad_reply');
      assert.match(e.message, /not a JSON object.*oops/);
      assert.equal(e.retryable, false);
      return true;
    });
    assert.equal(await c.ping(), true);
    assert.equal(srv.conns.length, 2);
  } finally {
    await c.close();
    await srv.close();
  }
});

test('an error code this version does not know is a plain AdmitError', async () => {
  const srv = await scripted({
    answer(req, sock) {
      reply(sock, { ok: false, id: req.id, error: 'frobbed', message: 'm', retry_after_ms: 5, rule: 'r', remaining: 3, reset_ms: 9, target: { index: 1, scope: 's', key: 'k' } });
    },
  });
  const c = new admit.Client({ socket: srv.socket });
  try {
    await assert.rejects(c.acquire('s', 'k'), (e) => {
      assert.equal(e.constructor, admit.AdmitError);
      assert.equal(e.name, 'AdmitError');
      assert.equal(e.code, 'frobbed');
      assert.equal(e.message, 'm');
      assert.equal(e.retryAfterMs, 5);
      assert.equal(e.rule, 'r');
      assert.equal(e.remaining, 3);
      assert.equal(e.resetMs, 9);
      assert.deepEqual(e.target, { index: 1, scope: 's', key: 'k' });
      assert.equal(e.retryable, false);
      return true;
    });
  } finally {
    await c.close();
    await srv.close();
  }
});

test('every protocol error code has its class and retryable', async () => {
  const table = {
    bad_request: [admit.BadRequest, false],
    unknown_op: [admit.BadRequest, false],
    unknown_scope: [admit.UnknownScope, false],
    line_too_long: [admit.BadRequest, false],
    limited: [admit.Limited, true],
    budget_exceeded: [admit.BudgetExceeded, true],
    timeout: [admit.Timeout, true],
    too_many_waiters: [admit.TooManyWaiters, true],
    shutting_down: [admit.ShuttingDown, true],
    unavailable: [admit.Unavailable, true],
    exceeds_limit: [admit.ExceedsLimit, false],
    forbidden: [admit.Forbidden, false],
    canceled: [admit.Canceled, false],
  };
  // The daemon's own list (proto/admit_proto.h) plus canceled.
  const header = fs.readFileSync(path.join(__dirname, '..', '..', '..', 'proto', 'admit_proto.h'), 'utf8');
  const codes = [...header.matchAll(/^\s*ACTION\([A-Z_]+, "([a-z_]+)"/gm)].map((m) => m[1]);
  assert.ok(codes.length >= 12, `codes ${codes}`);
  for (const code of codes) assert.ok(code in table, `no class for ${code}`);
  for (const [code, [Cls, retryable]] of Object.entries(table)) {
    const e = admit.errorFromReply({ ok: false, error: code, message: 'x' });
    assert.equal(e.constructor, Cls, code);
    assert.ok(e instanceof admit.AdmitError);
    assert.equal(e.code, code);
    assert.equal(e.retryable, retryable, code);
  }
});

test('replies for ids nobody waits for are dropped; split and joined lines are framed', async () => {
  const pings = [];
  const srv = await scripted({
    answer(req, sock) {
      if (req.op === 'status') {
        // A stray reply, then the real one cut in three writes.
        const text = JSON.stringify({ ok: true, id: req.id, version: '9.9', scopes: {} });
        sock.write(JSON.stringify({ ok: true, id: 'nobody' }) + '\n' + text.slice(0, 5));
        setTimeout(() => sock.write(text.slice(5, 12)), 20);
        setTimeout(() => sock.write(text.slice(12) + '\n'), 40);
      } else {
        // Two replies in one write, the later request's first.
        pings.push(req.id);
        if (pings.length === 2) sock.write(`{"ok":true,"id":${pings[1]}}\n{"ok":true,"id":${pings[0]}}\n`);
      }
    },
  });
  const c = new admit.Client({ socket: srv.socket });
  try {
    const st = await c.status();
    assert.equal(st.version, '9.9');
    assert.equal('id' in st, false);
    assert.deepEqual(await Promise.all([c.ping(), c.ping()]), [true, true]);
    assert.equal(pings.length, 2);
  } finally {
    await c.close();
    await srv.close();
  }
});

test('a forbidden line at connect: every request rejects Forbidden', async () => {
  const srv = await scripted({
    hello(sock) {
      reply(sock, { ok: false, error: 'forbidden', message: 'this peer may not connect' });
      sock.end();
    },
  });
  const c = new admit.Client({ socket: srv.socket });
  try {
    await sleep(20);
    await assert.rejects(c.ping(), (e) => e instanceof admit.Forbidden && e.code === 'forbidden' && e.retryable === false);
    await assert.rejects(c.acquire('s', 'k'), admit.Forbidden);
  } finally {
    await c.close();
    await srv.close();
  }
});

test('a peer that closes mid-request: Unavailable at once, not a hang', async () => {
  const srv = await scripted({ answer(req, sock) { sock.destroy(); } });
  const c = new admit.Client({ socket: srv.socket });
  try {
    const t0 = performance.now();
    await assert.rejects(c.acquire('s', 'k'), (e) => e instanceof admit.Unavailable && /connection to admitd/.test(e.message));
    assert.ok(since(t0) < PROMPT);
  } finally {
    await c.close();
    await srv.close();
  }
});

test('a peer that never answers: requestTimeoutMs ends the wait', async () => {
  const srv = await scripted();
  const c = new admit.Client({ socket: srv.socket, requestTimeoutMs: 200 });
  try {
    const t0 = performance.now();
    await assert.rejects(c.ping(), (e) => e instanceof admit.Unavailable && /no reply from admitd within 200 ms/.test(e.message));
    assert.ok(since(t0) >= 190 && since(t0) < 200 + PROMPT);
    // An acquire's wait budget comes first: 100 + 200 ms.
    const t1 = performance.now();
    await assert.rejects(c.acquire('s', 'k', { timeoutMs: 100 }), admit.Unavailable);
    assert.ok(since(t1) >= 290, `took ${since(t1)}`);
  } finally {
    await c.close();
    await srv.close();
  }
});

test('a lease whose acquire timed out here is released when it arrives', async () => {
  const released = [];
  let late = null;
  const srv = await scripted({
    answer(req, sock) {
      if (req.op === 'acquire') late = () => reply(sock, { ok: true, id: req.id, lease: 'L-late', waited_ms: 5, backend: 'local' });
      else if (req.op === 'release') { released.push(req.lease); reply(sock, { ok: true, id: req.id, held: true }); }
      else reply(sock, { ok: true, id: req.id });
    },
  });
  const c = new admit.Client({ socket: srv.socket, requestTimeoutMs: 100 });
  try {
    await assert.rejects(c.acquire('s', 'k', { timeoutMs: 0 }), admit.Unavailable);
    late();
    await sleep(50);
    assert.equal(await c.ping(), true);
    assert.deepEqual(released, ['L-late']);
  } finally {
    await c.close();
    await srv.close();
  }
});
