"""test_outage_pods.py - the pods of a fleet through a Redis outage, measured
from outside (outage_pods.py runs them): a pod restarted during the outage
gets no fresh share, and a serialized key (min_delay, one at a time) is
served by one pod at a time, its owner by the key's hash, while Redis is
unreachable, killed or frozen.

Real redis-server, three real daemons, clients on real sockets.
"""

import unittest

from . import harness
from . import outage_pods as op
from .redis_util import Pods, wait_backend


@unittest.skipIf(harness.VALGRIND, "timing; run under ASan instead of valgrind")
class RestartInOutageTest(unittest.TestCase):
    def test_a_restarted_pod_starts_spent(self):
        r = op.restart_run(restarts=4)
        # quota 30/1m: 30 through Redis, 10 by each pod, spend every share;
        # before, each start of pod 0 admitted a fresh share (10): 70 in all
        self.assertEqual(r["redis"], 30, r)
        self.assertEqual(r["fallback"], 0, r)
        self.assertEqual(r["restarted"], [0, 0, 0, 0], r)
        self.assertLessEqual(r["total"], 60, r)  # docs/outages.md: at most 2 Q
        # it is not starved: a share spent at its start earns again a window
        # later (quota 6/3s, fallback_pods 3 and no rank: 2)
        self.assertEqual((r["r_at_start"], r["r_later"]), (0, 2), r)


@unittest.skipIf(harness.VALGRIND, "timing; run under ASan instead of valgrind")
class PolitenessInOutageTest(unittest.TestCase):
    def check(self, kind):
        s = op.polite_summary(*op.polite_run(kind))
        msg = repr({k: v for k, v in s.items() if k != "pairs"}) + "\n" + repr(s["pairs"])
        # one host in flight at a time across the pods: into the outage and
        # through it (before: two pods in the same host at once, every run)
        self.assertEqual(s["overlaps"]["start"], 0, msg)
        self.assertEqual(s["overlaps"]["during"], 0, msg)
        self.assertEqual(s["overlaps"]["redis"], 0, msg)
        # the hosts are served in the outage, by more than one pod, and the
        # others say why they wait
        self.assertGreater(s["fallback"], 0, msg)
        self.assertGreater(len(s["fallback_daemons"]), 1, msg)
        self.assertGreater(s["owner_refusals"], 0, msg)
        owners = s["hosts_by_daemon"]
        self.assertEqual(sum(len(h) for h in owners.values()),
                         len({h for hs in owners.values() for h in hs}), msg)  # one each

    def test_redis_killed(self):
        self.check("kill")

    def test_redis_frozen(self):
        self.check("stop")


    def test_a_non_owner_stays_off_the_key_at_the_return(self):
        # A pod that refused a host as another's owes Redis min_delay from
        # its last refusal: back on Redis, it does not take the host while
        # the owner may hold a lease its fallback granted (before: admitted
        # through the Redis that came back empty at once).
        conf = "[scope slow]\nmin_delay = 10s\nlease_ttl = 2s\ntimeout = 100ms\n"
        with Pods(conf, n=3, admitd_extra=op.EXTRA) as cl:
            op.all_count(cl, 3)
            cl.redis.stop()
            for d in cl.daemons:
                wait_backend(d, "fallback", 5)
            rules = {}
            for i, d in enumerate(cl.daemons):
                with d.connect() as c:
                    r = c.request(harness.acquire_req("slow", "h", timeout_ms=0))
                    self.assertEqual((r.get("ok"), r.get("backend")), (False, "fallback"), r)
                    rules[i] = r.get("rule")
            others = [i for i, rule in rules.items() if rule == "fallback_owner"]
            self.assertEqual(len(others), 2, rules)  # one owner, two others
            cl.redis.restart()  # empty: it knows of no lease and no pacing
            for d in cl.daemons:
                wait_backend(d, "redis", 10)
            for i in others:
                with cl.daemons[i].connect() as c:
                    r = c.request(harness.acquire_req("slow", "h", timeout_ms=0))
                    self.assertEqual((r.get("ok"), r.get("backend"), r.get("rule")),
                                     (False, "redis", "min_delay"), r)
                    self.assertGreater(r["retry_after_ms"], 0, r)


@unittest.skipIf(harness.VALGRIND, "timing; run under ASan instead of valgrind")
class CapRemaindersTest(unittest.TestCase):
    def test_remainders_turn_with_the_key(self):
        held = op.cap_run(keys=8)
        for key, v in held.items():
            self.assertEqual(sorted(v), [1, 1, 2], held)  # 4 = 2 + 1 + 1, every key
        # before: the same pod (the first in rank) took the remainder of every key
        self.assertGreater(len({v.index(2) for v in held.values()}), 1, held)


if __name__ == "__main__":
    unittest.main()
