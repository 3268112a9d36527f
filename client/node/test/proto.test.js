'use strict';
/*
 * proto.test.js - the pure codec (lib/proto.js): which id the daemon will
 * echo for a raw line, ids matched whatever their key order, the id-less
 * FIFO and line_too_long's pick, url keys, and the override request.
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const proto = require('../lib/proto');

const id = (s) => proto.rawId(Buffer.from(s));

test('rawId: the id the daemon echoes, none when it answers without one', () => {
  assert.equal(id('{"op":"ping","id":7}'), 7);
  assert.equal(id('{"op":"ping","id":"a"}\r\n'), 'a');
  assert.deepEqual(id('{"op":"ping","id":{"t":"x","n":[1,2]}}'), { t: 'x', n: [1, 2] });
  assert.equal(id('{"op":"ping","id":9223372036854775807}'), 9223372036854775807);
  assert.equal(id('{"op":"ping","id":18446744073709551616}'), undefined); // beyond 64 bits
  assert.equal(id('{"op":"ping","id":[-9223372036854775809]}'), undefined);
  assert.equal(id('{"op":"ping","cost":18446744073709551616,"id":3}'), 3); // elsewhere: echoed
  assert.equal(id('{"op":"ping","id":1,"id":2}'), undefined); // duplicate key
  assert.equal(id('{"op":"ping","x":{"a":1,"a":2},"id":1}'), undefined);
  assert.equal(id('{"op":"ping","x":"a\\u0000b","id":1}'), undefined); // NUL
  assert.equal(id('{"op":"ping","x":"\\ud800","id":1}'), undefined); // lone surrogate
  assert.equal(id('{"op":"ping","x":"\\ud83d\\ude00","id":1}'), 1); // a pair is fine
  assert.equal(id('{"op":"ping","x":1e999,"id":1}'), undefined); // real overflow
  assert.equal(id('{"op":"ping","id":null}'), undefined);
  assert.equal(id('[1,2]'), undefined);
  assert.equal(id('hello'), undefined);
  assert.equal(proto.rawId(Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d])), undefined); // bad UTF-8
});

test('Pending: by id in any key order, id-less in order, line_too_long to the longest', () => {
  const p = new proto.Pending();
  const a = {}; const b = {}; const c = {}; const d = {};
  p.add({ x: 1, y: [2] }, a, 10);
  p.add(undefined, b, 5);
  p.add(undefined, c, 500);
  p.add(4, d, 20);
  assert.equal(p.size, 4);
  assert.deepEqual(p.take({ ok: true, id: { y: [2], x: 1 } }), [a, null]);
  assert.deepEqual(p.take({ ok: false, error: 'line_too_long' }), [c, null]);
  assert.deepEqual(p.take({ ok: false, error: 'bad_request' }), [b, null]);
  p.forget(4, d, true); // an orphaned acquire: its lease comes back to release
  assert.deepEqual(p.take({ ok: true, id: 4, lease: 'L1' }), [null, 'L1']);
  assert.deepEqual(p.take({ ok: true, id: 4, lease: 'L2' }), [null, null]);
  assert.equal(p.size, 0);
});

test('urlHost keys by host as the daemon does', () => {
  assert.equal(proto.urlHost('https://API.Example.com/v1/x'), 'api.example.com');
  assert.equal(proto.urlHost('http://user:pw@Host.Example:8080/'), 'host.example');
  assert.equal(proto.urlHost('http://a@b@Host/'), 'host');
  assert.equal(proto.urlHost('//Example.org?q'), 'example.org');
  assert.equal(proto.urlHost('https://[2001:DB8::1]:443/'), '2001:db8::1');
  assert.equal(proto.urlHost('https://[::1/'), null);
  assert.equal(proto.urlHost('https:///path'), null);
  assert.equal(proto.urlHost('example.org'), null);
});

test('spend takes the connect time from the budget, keeping a wait a wait', () => {
  assert.deepEqual(proto.spend({ op: 'acquire', timeout_ms: 1000 }, 300.2), { op: 'acquire', timeout_ms: 699 });
  assert.deepEqual(proto.spend({ op: 'acquire', timeout_ms: 100 }, 500), { op: 'acquire', timeout_ms: 1 });
  assert.deepEqual(proto.spend({ op: 'acquire', timeout_ms: 0 }, 500), { op: 'acquire', timeout_ms: 0 });
  assert.equal(proto.connectBudget({ op: 'acquire', timeout_ms: 0 }), 0);
  assert.equal(proto.connectBudget({ op: 'acquire' }), null);
  assert.equal(proto.connectBudget({ op: 'ping' }), null);
});

test('overrideRequest: ms as on the wire, rules by name or index', () => {
  assert.deepEqual(proto.overrideRequest('s', 'k', { ttlMs: 60000, rules: { 0: 1 } }),
    { op: 'override', scope: 's', key: 'k', ttl_ms: 60000, rules: { 0: 1 } });
  assert.deepEqual(proto.overrideRequest('s', null, { url: 'http://h/', ttlMs: 0.2, minDelayMs: 250.1, rules: { burst: 20 } }),
    { op: 'override', scope: 's', url: 'http://h/', ttl_ms: 1, min_delay_ms: 251, rules: { burst: 20 } });
  // neither key nor url: the scope's default key, resolved by the daemon
  assert.deepEqual(proto.overrideRequest('s', null, { ttlMs: 2592000000, minDelayMs: 0 }),
    { op: 'override', scope: 's', ttl_ms: 2592000000, min_delay_ms: 0 });
  assert.throws(() => proto.overrideRequest('s', 'k', { ttlMs: 1, rules: Object.fromEntries([...Array(17).keys()].map((i) => [`r${i}`, 1])) }), RangeError);
  assert.throws(() => proto.overrideRequest(null, 'k', { ttlMs: 1, rules: { 0: 1 } }), TypeError);
});
