"""test_known_refusals.py - refusals Redis already answered, served in process.

A single-target acquire that Redis refused with a wait no release can
shorten (a rate rule, pacing, a penalty, the quota) is refused by the
daemon itself, with no Redis call, until the wait has passed, for the same
class and a cost at least as large. Checked with a real redis-server: a
burst of try-acquires on a refused key costs one script call; the replies
keep their rule, target and a retry_after_ms that counts down; a smaller
cost, another class, a lease-slot refusal, and asks after a reset, an
override or a release that books through this daemon all go to Redis again;
a reset through another daemon is seen within redis_refusal_hold (1 s).
"""

import time
import unittest

from . import harness
from .harness import Admitd, RedisServer, acquire_req, redis_daemon
from .test_reload import ReloadCase

CONF = """
[scope one]
rule = requests fixed-window 3/1h
override_max = 2

[scope cls]
rule bg = requests fixed-window 1/1h
rule fg = requests fixed-window 100/1h
class background = bg
class priority = fg
default_class = background

[scope cap]
cluster_concurrency = 1
lease_ttl = 1h

[scope tok]
rule = tokens fixed-window 10/1h
"""


def daemon_calls(c, *ops):
    """The script calls the daemon has sent, of ops (acquire by default),
    from its own counts: Redis's counts would also hold the heartbeat, and a
    penalty or a release that reaches Redis after its reply."""
    calls = c.request({"op": "status"})["redis"]["calls"]
    return sum(calls[op] for op in (ops or ("acquire",)))


class KnownRefusalTest(unittest.TestCase):
    def setUp(self):
        self.rs, self.d, self.c = redis_daemon(self, CONF)

    def acq(self, scope, key, **kw):
        return self.c.request(acquire_req(scope, key, timeout_ms=0, **kw))

    def calls(self, *ops):
        return daemon_calls(self.c, *ops)

    def known(self, scope):
        return self.c.request({"op": "status"})["scopes"][scope]["refused_known"]

    def test_burst_on_a_refused_key_costs_one_call(self):
        self.assertTrue(self.acq("one", "k", cost=3)["ok"])
        before = self.calls()
        first = self.acq("one", "k")
        self.assertEqual((first["ok"], first["error"], first["backend"]),
                         (False, "limited", "redis"), first)
        last = first["retry_after_ms"]
        for _ in range(30):
            r = self.acq("one", "k")
            self.assertEqual((r["ok"], r["error"], r["rule"], r["backend"]),
                             (False, "limited", first["rule"], "redis"), r)
            self.assertEqual(r["target"], first["target"], r)
            self.assertLessEqual(r["retry_after_ms"], last, r)
            self.assertEqual(r["remaining"], 0, r)
            last = r["retry_after_ms"]
        self.assertEqual(self.calls() - before, 1)
        self.assertEqual(self.known("one"), 30)
        # a larger cost is refused the same way; a smaller one is asked
        self.assertFalse(self.acq("one", "k", cost=2)["ok"])
        self.assertEqual(self.calls() - before, 1)
        r = self.acq("one", "k", cost=0)  # a smaller cost: Redis is asked (and refuses)
        self.assertEqual((r["ok"], r["error"]), (False, "limited"), r)
        self.assertEqual(self.calls() - before, 2)

    def test_another_class_is_asked(self):
        self.assertTrue(self.acq("cls", "k")["ok"])
        self.assertFalse(self.acq("cls", "k")["ok"])  # background: used up
        before = self.calls()
        r = self.acq("cls", "k", **{"class": "priority"})
        self.assertTrue(r["ok"], r)
        self.assertEqual(self.calls() - before, 1)

    def test_slot_refusals_are_asked_each_time(self):
        held = self.acq("cap", "s", detach=True)
        self.assertTrue(held["ok"], held)
        before = self.calls()
        for _ in range(5):
            r = self.acq("cap", "s")
            self.assertEqual((r["ok"], r["rule"]), (False, "cluster_concurrency"), r)
        self.assertEqual(self.calls() - before, 5)
        self.assertEqual(self.known("cap"), 0)

    def test_override_reset_and_release_forget_it(self):
        self.assertTrue(self.acq("one", "o", cost=3)["ok"])
        self.assertFalse(self.acq("one", "o")["ok"])
        # loosened through this daemon: admitted at once (2 x 3 = 6)
        self.assertTrue(self.c.request({"op": "override", "scope": "one", "key": "o",
                                        "ttl_ms": 60000, "rules": {"0": 6}})["ok"])
        self.assertTrue(self.acq("one", "o")["ok"])
        self.assertTrue(self.acq("one", "o", cost=2)["ok"])
        self.assertFalse(self.acq("one", "o")["ok"])
        before = self.calls("acquire", "reset")
        self.assertTrue(self.c.request({"op": "reset", "scope": "one", "key": "o"})["ok"])
        r = self.acq("one", "o")  # asked again: the conf's 3, 6 used
        self.assertFalse(r["ok"])
        self.assertEqual(self.calls("acquire", "reset") - before, 2)  # the reset, the acquire
        # a release that books nothing in Redis can refund nothing: still known
        self.assertTrue(self.acq("one", "p", cost=2)["ok"])
        lease = self.acq("one", "p")["lease"]
        self.assertFalse(self.acq("one", "p")["ok"])
        self.assertTrue(self.c.request({"op": "release", "lease": lease})["ok"])
        before = self.calls()
        self.assertFalse(self.acq("one", "p")["ok"])
        self.assertEqual(self.calls() - before, 0)

    def test_a_release_that_books_forgets_it(self):
        a = self.acq("tok", "t")
        b = self.acq("tok", "t")
        self.assertTrue(a["ok"] and b["ok"], (a, b))
        # a's 20 tokens overdraw the 10/1h budget: acquires wait for the window
        self.assertTrue(self.c.request({"op": "release", "lease": a["lease"],
                                        "tokens": {"out": 20}})["ok"])
        self.assertFalse(self.acq("tok", "t")["ok"])
        before = self.calls()
        self.assertFalse(self.acq("tok", "t")["ok"])
        self.assertEqual(self.calls() - before, 0)
        # b's release books (its tokens): the next acquire asks Redis again.
        self.assertTrue(self.c.request({"op": "release", "lease": b["lease"],
                                        "tokens": {"out": 0}})["ok"])
        before, known = self.calls(), self.known("tok")
        self.assertFalse(self.acq("tok", "t")["ok"])
        self.assertEqual(self.known("tok"), known)
        self.assertEqual(self.calls() - before, 1)

    @unittest.skipIf(harness.VALGRIND, "timings; run under ASan instead of valgrind")
    def test_a_reset_elsewhere_is_seen_within_the_hold(self):
        other = Admitd(CONF, redis_url=self.rs.url).start()
        self.addCleanup(other.cleanup)
        oc = other.connect()
        self.addCleanup(oc.close)
        self.assertTrue(self.c.request({"op": "penalize", "scope": "one", "key": "r",
                                        "retry_after_ms": 600000})["ok"])
        self.assertEqual(self.acq("one", "r")["rule"], "penalty")
        self.assertTrue(oc.request({"op": "reset", "scope": "one", "key": "r"})["ok"])
        r = self.acq("one", "r")  # known here: the penalty Redis gave
        self.assertEqual((r["ok"], r["rule"]), (False, "penalty"), r)
        self.assertGreater(r["retry_after_ms"], 590000, r)
        t0 = time.monotonic()
        while not self.acq("one", "r")["ok"]:
            self.assertLess(time.monotonic() - t0, 1.5, "the reset did not reach this daemon")
            time.sleep(0.05)
        self.assertGreater(time.monotonic() - t0, 0.5)  # it was held, for about 1s

    @unittest.skipIf(harness.VALGRIND, "timings; run under ASan instead of valgrind")
    def test_asks_again_once_the_wait_has_passed(self):
        self.assertTrue(self.c.request({"op": "penalize", "scope": "one", "key": "w",
                                        "retry_after_ms": 300})["ok"])
        before = self.calls()
        r = self.acq("one", "w")
        self.assertEqual((r["ok"], r["rule"]), (False, "penalty"), r)
        self.assertFalse(self.acq("one", "w")["ok"])
        self.assertEqual(self.calls() - before, 1)
        time.sleep(0.35)
        self.assertTrue(self.acq("one", "w")["ok"])
        self.assertEqual(self.calls() - before, 2)


class KnownRefusalReloadTest(ReloadCase):
    def test_a_reload_forgets_it(self):
        rs = RedisServer().start()
        self.addCleanup(rs.cleanup)
        self.start("[scope one]\nrule = requests fixed-window 1/1h\n", redis_url=rs.url)
        c = self.conn()
        self.assertTrue(self.acq(c, "one", "k")["ok"])
        self.assertFalse(self.acq(c, "one", "k")["ok"])  # known from here
        self.reload("[scope one]\nrule = requests fixed-window 2/1h\n")
        before = daemon_calls(c)
        r = self.acq(c, "one", "k")  # asked again, under the new rule
        self.assertTrue(r["ok"], r)
        self.assertEqual(daemon_calls(c) - before, 1)
        r = self.acq(c, "one", "k")
        self.assertEqual((r["ok"], r["rule"]), (False, "requests fixed-window 2/1h"), r)


if __name__ == "__main__":
    unittest.main()
