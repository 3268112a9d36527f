"""test_pacing.py - "one in flight fleet-wide, then a delay from completion".

With cluster_concurrency = 1 there is one lease in flight at most, so one
completion to count min_delay from: the next admission comes no sooner than
min_delay after the previous release, as in a serialized scope (min_delay
without cluster_concurrency), whichever daemon admits it. Checked with the
real daemon in local mode and with two daemons on one real redis-server:

- alternation: one client holds the key's lease for HOLD (< min_delay) while
  a client of the other daemon (another connection in local mode) waits;
  the gap from the release to the waiter's admission is measured;
- contention: two clients per daemon loop acquire -> hold -> release, and
  every gap between a release and the next admission is measured.

Instants as in redis_util.py: a release's instant is taken before it is
sent (<= when the backend saw it) and an admission's after its reply was
read (>= when it was decided), so a measured gap is never smaller than the
real one; EPS covers the whole milliseconds the daemon and Redis keep.

A cap above 1 keeps spacing sends (from admissions); test_redis_multipod's
ClusterConcurrencyTest covers that.
"""

import statistics
import threading
import time
import unittest

from . import harness
from .harness import EPS, SLACK, Admitd, acquire_req, max_overlap, now
from .redis_util import Pods, hammer

D = 0.5  # min_delay
HOLD = 0.3  # < D: pacing from the admission would let the next one in at D - HOLD
CONF = """
[scope one]
cluster_concurrency = 1
min_delay = 500ms
lease_ttl = 30s
timeout = 10s

[scope two]
cluster_concurrency = 2
min_delay = 500ms
lease_ttl = 30s
"""


def alternate(test, conns, rounds):
    """rounds times: conns[i % 2] holds the lease for HOLD while conns[(i + 1)
    % 2] waits for it. Returns [(t_rel of the holder, t_recv of the waiter)]."""
    gaps = []
    first = conns[0].request(acquire_req("one", "k", timeout_ms=10000))
    test.assertTrue(first["ok"], first)
    lease = first["lease"]
    for i in range(rounds):
        holder, waiter = conns[i % 2], conns[(i + 1) % 2]
        got = {}

        def wait_for_it():
            waiter.send(acquire_req("one", "k", timeout_ms=10000))
            got["r"] = waiter.recv()
            got["t"] = now()

        th = threading.Thread(target=wait_for_it)
        th.start()
        time.sleep(HOLD)
        t_rel = now()
        r = holder.request({"op": "release", "lease": lease})
        test.assertTrue(r["ok"], r)
        th.join(20)
        test.assertFalse(th.is_alive(), "the waiter got no reply")
        test.assertTrue(got["r"]["ok"], got["r"])
        lease = got["r"]["lease"]
        gaps.append(got["t"] - t_rel)
    conns[rounds % 2].request({"op": "release", "lease": lease})
    return gaps


class PacingCase(unittest.TestCase):

    def assertFromCompletion(self, gaps):
        # never sooner than D after the release (EPS: whole milliseconds)
        self.assertGreaterEqual(min(gaps), D - EPS, ["%.3f" % g for g in gaps])
        # and not much later: the waiter polls the slot (concurrency_retry)
        # and then sleeps next_at out (a median: one stall cannot move it)
        self.assertLess(statistics.median(gaps), D + 0.1 + SLACK, ["%.3f" % g for g in gaps])


@unittest.skipIf(harness.VALGRIND, "timings; run under ASan instead of valgrind")
class LocalPacingTest(PacingCase):

    def setUp(self):
        self.d = Admitd(CONF).start()

    def tearDown(self):
        self.d.cleanup(failed=False)

    def test_cap_of_one_paces_from_the_release(self):
        conns = [self.d.connect(), self.d.connect()]
        try:
            gaps = alternate(self, conns, 4)
        finally:
            for c in conns:
                c.close()
        self.assertFromCompletion(gaps)

    def test_try_says_the_release_plus_min_delay(self):
        c = self.d.connect()
        r = c.request(acquire_req("one", "t", timeout_ms=0))
        self.assertTrue(r["ok"], r)
        # held: the cap refuses, and no admission comes before its release
        # plus min_delay, so a try is told at least min_delay
        ref = c.request(acquire_req("one", "t", timeout_ms=0))
        self.assertEqual((ref["ok"], ref["error"], ref["rule"]),
                         (False, "limited", "cluster_concurrency"), ref)
        self.assertGreaterEqual(ref["retry_after_ms"], 500, ref)
        time.sleep(HOLD)
        t_rel = now()
        self.assertTrue(c.request({"op": "release", "lease": r["lease"]})["ok"])
        ref = c.request(acquire_req("one", "t", timeout_ms=0))
        since = (now() - t_rel) * 1000
        # released: min_delay from the release, not from the admission
        self.assertEqual((ref["ok"], ref["rule"]), (False, "min_delay"), ref)
        self.assertGreaterEqual(ref["retry_after_ms"], 500 - since - 1, (ref, since))
        c.close()

    def test_cap_above_one_still_spaces_admissions(self):
        # cluster_concurrency 2: min_delay counts from the admission, and a
        # release starts nothing
        c = self.d.connect()
        r = c.request(acquire_req("two", "s", timeout_ms=0))
        self.assertTrue(r["ok"], r)
        ref = c.request(acquire_req("two", "s", timeout_ms=0))
        self.assertEqual((ref["ok"], ref["rule"]), (False, "min_delay"), ref)
        time.sleep(D + EPS)
        self.assertTrue(c.request({"op": "release", "lease": r["lease"]})["ok"])
        r = c.request(acquire_req("two", "s", timeout_ms=0))
        self.assertTrue(r["ok"], r)
        c.close()


@unittest.skipIf(harness.VALGRIND, "timings; run under ASan instead of valgrind")
class RedisPacingTest(PacingCase):

    def test_cap_of_one_paces_from_the_release_across_daemons(self):
        with Pods(CONF, n=2) as cl:
            conns = [cl.daemons[0].connect(), cl.daemons[1].connect()]
            try:
                for c in conns:  # both on Redis before anything is asked
                    deadline = time.monotonic() + 10
                    while c.request({"op": "status"})["backend"] != "redis":
                        self.assertLess(time.monotonic(), deadline, "never reached Redis")
                        time.sleep(0.02)
                gaps = alternate(self, conns, 4)
            finally:
                for c in conns:
                    c.close()
            self.assertTrue(cl.alive(), cl.logs())
        self.assertFromCompletion(gaps)

    def test_contention_across_daemons(self):
        with Pods(CONF, n=2) as cl:
            out = hammer(self, cl, "one", "h", 5.0, per_daemon=2, hold=(0.2, HOLD))
            self.assertTrue(cl.alive(), cl.logs())
        adms = sorted(out.adms, key=lambda a: a.t_recv)
        self.assertGreaterEqual(len(adms), 4, out.errors())
        for a in adms:
            self.assertEqual(a.reply.get("backend"), "redis", a.reply)
        # one in flight fleet-wide ...
        self.assertLessEqual(max_overlap([(a.t_recv, a.t_rel) for a in adms]), 1)
        # ... and each admission at least D after the previous release
        self.assertFromCompletion([b.t_recv - a.t_rel for a, b in zip(adms, adms[1:])])


if __name__ == "__main__":
    unittest.main()
