'use strict';
/*
 * redis.test.js - two daemons on one real redis-server (on a Unix socket,
 * no TCP port): a limit is shared through Redis, and a detached lease
 * taken through one daemon is released through the other. Skipped when
 * redis-server is not installed.
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const admit = require('../index.js');
const { Daemon, RedisServer, CONF, key } = require('./support/daemon');

const skip = RedisServer.available() ? false : 'redis-server is not installed (Debian: apt-get install redis-server)';

test('two daemons on one Redis share a quota and each other\'s leases', { skip }, async () => {
  const redis = await new RedisServer().start();
  const a = new Daemon({ conf: CONF, args: ['--redis', redis.url] });
  const b = new Daemon({ conf: CONF, args: ['--redis', redis.url] });
  let ca = null;
  let cb = null;
  try {
    await a.start();
    await b.start();
    ca = new admit.Client({ socket: a.socket });
    cb = new admit.Client({ socket: b.socket });
    assert.equal((await ca.status()).backend, 'redis');
    const k = key('redis-quota');
    const lease = await ca.tryAcquire('quota', k, { detach: true });
    assert.equal(lease.backend, 'redis');
    await assert.rejects(cb.tryAcquire('quota', k), (e) => {
      assert.ok(e instanceof admit.Limited);
      assert.equal(e.rule, 'quota 1/1h');
      assert.equal(e.reply.backend, 'redis');
      assert.ok(e.retryAfterMs > 3600000 - 60000 && e.retryAfterMs <= 3600000, `retryAfterMs ${e.retryAfterMs}`);
      return true;
    });
    // A cluster-wide slot held through a, released through b.
    const s = key('redis-slot');
    const held = await ca.acquire('cc', s, { detach: true });
    await assert.rejects(cb.tryAcquire('cc', s), (e) => e instanceof admit.Limited && e.rule === 'cluster_concurrency');
    assert.equal(await cb.release(held.lease), true);
    assert.equal(await cb.release(held.lease), false); // settled once
    const again = await ca.tryAcquire('cc', s);
    assert.equal(again.backend, 'redis');
    assert.equal(await again.release(), true);
  } finally {
    if (ca) await ca.close();
    if (cb) await cb.close();
    await a.stop();
    await b.stop();
    await redis.stop();
  }
});
