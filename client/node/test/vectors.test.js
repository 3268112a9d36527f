'use strict';
/*
 * vectors.test.js - proto/vectors/*.jsonl replayed through the Node
 * client's raw request path (Client.requestLine), against admitd on
 * proto/vectors/vectors.conf.
 *
 * The matching rules are PROTOCOL.md's ("Vectors"): expect is a subset of
 * the reply, objects compared recursively, arrays element by element,
 * other values equal and of the same JSON type; "<any>" matches any
 * present value, "<int>" any integer, "<absent>" a key the reply must not
 * have; "$lease" in a send is the most
 * recent lease of the case. Each case runs on a fresh connection (a new
 * Client); the steps of a case on that one connection.
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const admit = require('../index.js');
const { Daemon, VECTORS_DIR } = require('./support/daemon');

const ANY = '<any>';
const INT = '<int>';
const ABSENT = '<absent>';

function type(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  return typeof v;
}

/* null when got matches expect, else where it does not. */
function match(expect, got, where = '$') {
  if (expect === ANY) return null;
  if (expect === INT) return Number.isInteger(got) ? null : `${where}: want an integer, got ${JSON.stringify(got)}`;
  if (type(expect) === 'object') {
    if (type(got) !== 'object') return `${where}: want an object, got ${JSON.stringify(got)}`;
    for (const k of Object.keys(expect)) {
      const has = Object.prototype.hasOwnProperty.call(got, k);
      if (expect[k] === ABSENT) {
        if (has) return `${where}.${k}: want it absent, got ${JSON.stringify(got[k])}`;
        continue;
      }
      if (!has) return `${where}.${k}: missing`;
      const why = match(expect[k], got[k], `${where}.${k}`);
      if (why) return why;
    }
    return null;
  }
  if (type(expect) === 'array') {
    if (type(got) !== 'array' || got.length !== expect.length) {
      return `${where}: want ${JSON.stringify(expect)}, got ${JSON.stringify(got)}`;
    }
    for (let i = 0; i < expect.length; i++) {
      const why = match(expect[i], got[i], `${where}[${i}]`);
      if (why) return why;
    }
    return null;
  }
  // JSON has one number type: 1 and 1.0 are the same text once parsed.
  if (type(expect) !== type(got) || expect !== got) {
    return `${where}: want ${JSON.stringify(expect)}, got ${JSON.stringify(got)}`;
  }
  return null;
}

function subst(send, lease) {
  if (Array.isArray(send)) return send.map((v) => subst(v, lease));
  if (send !== null && typeof send === 'object') {
    const out = {};
    for (const k of Object.keys(send)) out[k] = subst(send[k], lease);
    return out;
  }
  return send === '$lease' && lease !== null ? lease : send;
}

async function runCase(socket, c) {
  const steps = c.steps || [{ send: c.send, expect: c.expect }];
  const client = new admit.Client({ socket, connectTimeoutMs: 2000, requestTimeoutMs: 10000 });
  let lease = null;
  try {
    for (let i = 0; i < steps.length; i++) {
      const send = subst(steps[i].send, lease);
      const line = typeof send === 'string' ? send : JSON.stringify(send);
      let got;
      try {
        got = await client.requestLine(line);
      } catch (e) {
        return `step ${i}: ${e}`;
      }
      const why = match(steps[i].expect, got);
      if (why) return `step ${i}: ${why} (reply ${JSON.stringify(got)})`;
      if (typeof got.lease === 'string') lease = got.lease;
    }
  } finally {
    await client.close();
  }
  return null;
}

test('the matcher itself', () => {
  assert.equal(match({ a: 1 }, { a: 1, b: 2 }), null);
  assert.match(match({ a: 1 }, { a: true }), /\$\.a/);
  assert.match(match({ a: 1 }, {}), /missing/);
  assert.equal(match({ a: ANY }, { a: null }), null);
  assert.equal(match({ a: INT }, { a: 7 }), null);
  assert.match(match({ a: INT }, { a: '7' }), /integer/);
  assert.match(match({ a: INT }, { a: 7.5 }), /integer/);
  assert.match(match([1, 2], [1, 2, 3]), /want/);
  assert.match(match({ a: { b: 'x' } }, { a: { b: 'y' } }), /\$\.a\.b/);
});

const files = fs.readdirSync(VECTORS_DIR).filter((f) => f.endsWith('.jsonl')).sort();

test('every vector file replays through requestLine', async (t) => {
  assert.ok(files.length >= 6, `vector files: ${files}`);
  const daemon = await new Daemon({ confPath: path.join(VECTORS_DIR, 'vectors.conf') }).start();
  try {
    for (const f of files) {
      const lines = fs.readFileSync(path.join(VECTORS_DIR, f), 'utf8').split('\n');
      await t.test(f, async () => {
        let n = 0;
        const bad = [];
        for (let i = 0; i < lines.length; i++) {
          if (!lines[i].trim()) continue;
          const c = JSON.parse(lines[i]);
          n += 1;
          const why = await runCase(daemon.socket, c);
          if (why) bad.push(`${f}:${i + 1} ${c.name}: ${why}`);
        }
        assert.ok(n > 0);
        assert.deepEqual(bad, []);
      });
    }
  } finally {
    await daemon.stop();
  }
});
