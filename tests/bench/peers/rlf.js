// rlf.js - the Node peer of admitd's benchmark: rate-limiter-flexible's
// RateLimiterRedis on one ioredis client, as a Node service would use it.
//
//   node rlf.js --socket PATH [--conc 64] [--keys distinct|hot|keyspace]
//               [--per-loop 1000] [--seconds 3] [--warmup 0.5] [--points 1000000]
//
// CONC async loops each await consume(key) back to back (one call in flight
// per loop; ioredis pipelines the loops' calls on its one connection). Key
// "k<i>" per loop (distinct), "k0" for all (hot), or a key space: loop i's
// j-th call on "k<i>-<j % PER_LOOP>" (keyspace: CONC x PER_LOOP keys, each
// loop cycling through its own, as the loadgen's -K does). The limit is POINTS per
// second, large enough that everything is admitted (a rejection is cheaper
// work). Only calls that start and end within the SECONDS after the warmup
// count. Prints one JSON line: ops, ops_per_s, ops_all (every call, warmup
// included: what Redis saw), latency percentiles in microseconds, rejected
// and errors. Run by tests/bench/run.py after `npm ci` in this directory.
'use strict';

const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');

function args(argv) {
  const o = {
    socket: null, conc: 64, keys: 'distinct', 'per-loop': 1000, seconds: 3, warmup: 0.5,
    points: 1000000,
  };
  for (let i = 2; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, '');
    if (!(k in o) || i + 1 >= argv.length) {
      process.stderr.write(`rlf.js: unknown or incomplete option ${argv[i]}\n`);
      process.exit(2);
    }
    o[k] = typeof o[k] === 'number' ? Number(argv[i + 1]) : argv[i + 1];
  }
  if (!o.socket || !['distinct', 'hot', 'keyspace'].includes(o.keys) ||
      !(Number.isInteger(o['per-loop']) && o['per-loop'] > 0)) {
    process.stderr.write('usage: node rlf.js --socket PATH [--conc N] ' +
                         '[--keys distinct|hot|keyspace] [--per-loop N]\n');
    process.exit(2);
  }
  return o;
}

function quantile(sorted, q) {
  if (sorted.length === 0) return 0;
  const i = Math.min(sorted.length - 1, Math.floor(q * sorted.length));
  return sorted[i];
}

async function main() {
  const o = args(process.argv);
  const redis = new Redis({ path: o.socket, maxRetriesPerRequest: 1, enableOfflineQueue: true });
  const limiter = new RateLimiterRedis({
    storeClient: redis, keyPrefix: 'rlf', points: o.points, duration: 1,
  });
  await redis.ping();
  const now = () => process.hrtime.bigint();
  const t0 = now();
  const winStart = t0 + BigInt(Math.round(o.warmup * 1e9));
  const winEnd = winStart + BigInt(Math.round(o.seconds * 1e9));
  const lat = [];
  let ops = 0, opsAll = 0, rejected = 0, errors = 0, lastError = '';

  async function loop(i) {
    const fixed = o.keys === 'hot' ? 'k0' : `k${i}`;
    const perLoop = o['per-loop'];
    let j = 0;
    for (;;) {
      const a = now();
      if (a >= winEnd) return;
      const key = o.keys === 'keyspace' ? `k${i}-${j}` : fixed;
      j = j + 1 === perLoop ? 0 : j + 1;
      try {
        await limiter.consume(key, 1);
      } catch (e) {
        if (e instanceof Error) { errors++; lastError = String(e.message || e); }
        else rejected++;   // a RateLimiterRes: refused
      }
      const b = now();
      opsAll++;
      if (a >= winStart && b < winEnd) {
        ops++;
        lat.push(Number(b - a) / 1000);
      }
    }
  }
  const loops = [];
  for (let i = 0; i < o.conc; i++) loops.push(loop(i));
  await Promise.all(loops);
  const elapsed = Number(now() - t0) / 1e9;
  await redis.quit();
  lat.sort((x, y) => x - y);
  process.stdout.write(JSON.stringify({
    peer: 'rate-limiter-flexible', versions: {
      'rate-limiter-flexible': require('rate-limiter-flexible/package.json').version,
      ioredis: require('ioredis/package.json').version, node: process.version,
    },
    conc: o.conc, keys: o.keys, per_loop: o.keys === 'keyspace' ? o['per-loop'] : null,
    seconds: o.seconds, elapsed_s: elapsed,
    ops, ops_per_s: ops / o.seconds, ops_all: opsAll, rejected, errors, last_error: lastError,
    latency_us: {
      p50: quantile(lat, 0.5), p90: quantile(lat, 0.9), p99: quantile(lat, 0.99),
      max: quantile(lat, 1),
    },
  }) + '\n');
}

main().catch((e) => {
  process.stderr.write(`rlf.js: ${e && e.stack || e}\n`);
  process.exit(1);
});
