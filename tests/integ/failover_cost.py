"""failover_cost.py - how many admissions over the limit a Sentinel failover
under load lets through (a measurement, not a test).

The scenario of test_redis_sentinel.py's failover tests (three daemons, 4
clients each, 300ms budgets, quota 30/1s, fallback_divisor 3, a master, a
replica and three sentinels), repeated: for each run, the most admissions
certainly inside one 1 s window less the limit (window_excess: 0 or less
means none over), over the whole run and around the switch, and how many
of the admissions were the fallback's.

Run: ADMITD_BIN=daemon/admitd python3 -m tests.integ.failover_cost [runs] [failover|kill|both]

Every other kind of outage (Redis killed, back empty, a Cluster master
lost, a long slot migration), for a quota, a token bucket and a cap at
once, and old against new daemons: outage_cost.py (docs/outages.md).
"""

import sys
import unittest

from .redis_deploy import SentinelDeploy, what_is_missing
from .redis_util import Pods, wait_backend, window_excess
from .test_redis_sentinel import CONF, EXTRA, PODS, Q, W, brackets, failover_under_load


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    kinds = {"both": ("failover", "kill")}.get(sys.argv[2] if len(sys.argv) > 2 else "both",
                                               (sys.argv[2] if len(sys.argv) > 2 else "",))
    why = what_is_missing("sentinel")
    if why:
        sys.exit("failover_cost: " + why)
    t = unittest.TestCase()
    out = []
    with SentinelDeploy() as sd:
        for kind in kinds:
            for i in range(runs):
                sd.heal()
                with Pods(CONF, n=PODS, admitd_extra=EXTRA, redis=sd, start_redis=False) as p:
                    for d in p.daemons:
                        wait_backend(d, "redis", 10.0)
                    replies, old, new, t0, t1, oc = failover_under_load(t, sd, kind, p,
                                                                        settle=6.0)
                adm = brackets(replies)
                seen = sorted((k, v) for k, v in oc.items() if v is not None)
                old_after = (seen[-1][1] - seen[0][1]) if seen else 0
                # the last sample at which the old master's count had still grown
                grew = [b[0] for a, b in zip(seen, seen[1:]) if b[1] > a[1]]
                last_write = max(grew) if grew else 0.0
                near = [(lo, hi) for lo, hi in adm if t0 - 2.0 <= lo <= t1 + 2.0]
                fb = len(brackets(replies, backend="fallback"))
                red = window_excess(brackets(replies, backend="redis"), W, Q)
                row = (kind, i + 1, window_excess(adm, W, Q), window_excess(near, W, Q), red, fb,
                       len(adm), t1 - t0, old_after, last_write)
                out.append(row)
                print("%-8s run %d: over the limit in a 1s window: %d (whole run), %d (switch "
                      "+-2s), %d (Redis-decided only); fallback admissions %d of %d; promotion "
                      "%.2fs after the fault; EVALSHA run by the old master after it: %d (the last "
                      "by %.1fs after it)"
                      % row, flush=True)
    for kind in kinds:
        xs = [r[2] for r in out if r[0] == kind]
        print("%s: excess per 1s window over %d runs: %s (limit %d/s, fallback budget %d/s "
              "per pod x %d pods)" % (kind, len(xs), xs, Q, Q // PODS, PODS))


if __name__ == "__main__":
    main()
