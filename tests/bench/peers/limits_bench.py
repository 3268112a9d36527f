#!/usr/bin/python3
"""limits_bench.py - the Python peer of admitd's benchmark: the `limits`
library's RedisStorage (Debian's python3-limits, on python3-redis), as a
Python service would use it.

    /usr/bin/python3 limits_bench.py --socket PATH [--threads 64]
        [--keys distinct|hot] [--strategy fixed-window|moving-window]
        [--seconds 3] [--warmup 0.5] [--limit "1000000/second"]

THREADS threads each call limiter.hit(item, key) back to back (one call in
flight per thread, each thread on its own pooled connection); key "k<i>" per
thread (distinct) or "k0" (hot). The limit is large enough that everything
is admitted. Only calls that start and end within the SECONDS after the
warmup count. Prints one JSON line like tests/bench/peers/rlf.js. When the
package is missing it prints {"skipped": "..."} and exits 3, which run.py
shows as a skipped row.
"""

import argparse
import json
import sys
import threading
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--threads", type=int, default=64)
    ap.add_argument("--keys", choices=("distinct", "hot"), default="distinct")
    ap.add_argument("--strategy", choices=("fixed-window", "moving-window"),
                    default="fixed-window")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--limit", default="1000000/second")
    a = ap.parse_args()
    try:
        import limits
        import limits.storage
        import limits.strategies
        import redis  # noqa: F401  (RedisStorage needs it: python3-redis)
    except ImportError as e:
        print(json.dumps({"skipped": "%s (apt-get install python3-limits python3-redis)" % e}))
        return 3

    storage = limits.storage.RedisStorage("redis+unix://" + a.socket)
    cls = (limits.strategies.FixedWindowRateLimiter if a.strategy == "fixed-window"
           else limits.strategies.MovingWindowRateLimiter)
    limiter = cls(storage)
    item = limits.parse(a.limit)
    storage.check()

    now = time.perf_counter_ns
    t0 = now()
    win_start = t0 + int(a.warmup * 1e9)
    win_end = win_start + int(a.seconds * 1e9)
    per_thread = []
    errors = []

    def body(i):
        key = "k0" if a.keys == "hot" else "k%d" % i
        lat = []
        n_all = rejected = 0
        try:
            while True:
                t = now()
                if t >= win_end:
                    break
                if not limiter.hit(item, "bench", key):
                    rejected += 1
                u = now()
                n_all += 1
                if t >= win_start and u < win_end:
                    lat.append((u - t) / 1000.0)
        except Exception as e:  # reported, and makes the run unclean
            errors.append(repr(e))
        per_thread.append((lat, n_all, rejected))

    threads = [threading.Thread(target=body, args=(i,)) for i in range(a.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = (now() - t0) / 1e9
    lat = sorted(x for p in per_thread for x in p[0])

    def q(f):
        return lat[min(len(lat) - 1, int(f * len(lat)))] if lat else 0

    print(json.dumps({
        "peer": "limits", "strategy": a.strategy,
        "versions": {"limits": limits.__version__, "redis": sys.modules["redis"].__version__,
                     "python": sys.version.split()[0]},
        "conc": a.threads, "keys": a.keys, "seconds": a.seconds, "elapsed_s": elapsed,
        "ops": len(lat), "ops_per_s": len(lat) / a.seconds,
        "ops_all": sum(p[1] for p in per_thread), "rejected": sum(p[2] for p in per_thread),
        "errors": len(errors), "last_error": errors[-1] if errors else "",
        "latency_us": {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": q(1.0)},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
