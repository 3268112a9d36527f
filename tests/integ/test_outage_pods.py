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
