"""test_no_lease.py - acquires with "lease": false, admissions with nothing
to release.

Checked with the real daemon, alone and on a real redis-server shared by two
daemons: such an admission's reply has no lease and the daemon holds none
(status counts 0 leases); it counts against the limits exactly as a leased
one does (a budget of N admits N across both pods, then refuses with a
retry); a burst of distinct keys in one write is batched into a few script
calls, each admitted on its own without a lease; while Redis is down the
fallback limits it the same way (never "no limit"). A scope whose release
books something (max_concurrent, cluster_concurrency, a concurrency rule,
serialized min_delay, a tokens rule, an adaptive amount) refuses it
bad_request naming the scope and why, books nothing for the other targets,
and the connection goes on.
"""

import json
import unittest

from .harness import Admitd, RedisServer, acquire_req
from .test_hot_key import evalsha_calls

CONF = """
[admitd]
redis_pool = 1
redis_timeout = 300ms

[scope plain]
rule = requests fixed-window 6/1h
fallback_divisor = 1

[scope conc]
max_concurrent = 2

[scope cap]
cluster_concurrency = 2

[scope crule]
rule = concurrency 2

[scope paced]
min_delay = 10ms

[scope tok]
rule = tokens 1000/1h

[scope learn]
rule = requests 100/1m
adaptive = yes
adaptive_floor = 1/1m
"""

WHY = {
    "conc": "max_concurrent",
    "cap": "cluster_concurrency",
    "crule": "concurrency rule",
    "paced": "min_delay",
    "tok": "meters tokens",
    "learn": "adaptive",
}


def one_shot(scope, key, **kw):
    return acquire_req(scope, key, lease=False, timeout_ms=0, **kw)


class NoLeaseCase(unittest.TestCase):

    def check_admitted(self, r, backend):
        self.assertIs(r.get("ok"), True, r)
        self.assertNotIn("lease", r)
        self.assertEqual(r.get("backend"), backend, r)
        self.assertIsInstance(r.get("waited_ms"), int, r)

    def check_budget(self, conns, backend, key="k"):
        """Eight one-shot acquires on a key of a 6/1h scope, round robin over
        conns: the first six admitted, then refusals that say when."""
        got = [c.request(one_shot("plain", key)) for c in (conns * 8)[:8]]
        for i, r in enumerate(got[:6]):
            self.check_admitted(r, backend)
            self.assertEqual(r.get("remaining"), 5 - i, r)
        for r in got[6:]:
            self.assertEqual(r.get("error"), "limited", r)
            self.assertEqual(r.get("rule"), "requests fixed-window 6/1h", r)
            self.assertGreater(r.get("retry_after_ms"), 0, r)

    def check_refusals(self, c):
        for scope, why in WHY.items():
            r = c.request(one_shot(scope, "x", id=scope))
            self.assertEqual((r.get("id"), r.get("error")), (scope, "bad_request"), r)
            self.assertIn('scope "%s"' % scope, r["message"])
            self.assertIn(why, r["message"])
        # several targets: one that needs a lease refuses the whole request,
        # and the other is not charged
        r = c.request({"op": "acquire", "lease": False, "timeout_ms": 0,
                       "targets": [{"scope": "plain", "key": "mixed"},
                                   {"scope": "conc", "key": "mixed"}]})
        self.assertEqual(r.get("error"), "bad_request", r)
        self.assertIn('scope "conc"', r["message"])
        r = c.request(one_shot("plain", "mixed"))
        self.assertEqual(r.get("remaining"), 5, r)
        # the connection goes on, and a leased acquire there still works
        r = c.request(acquire_req("conc", "x", timeout_ms=0))
        self.assertIsInstance(r.get("lease"), str, r)


class LocalTest(NoLeaseCase):

    def test_counts_without_a_lease(self):
        with Admitd(CONF) as d, d.connect() as c:
            self.check_budget([c], "local")
            st = c.request({"op": "status"})
            self.assertEqual(st["leases"], 0, st)
            self.assertEqual(st["scopes"]["plain"]["admitted"], 6, st["scopes"]["plain"])
            # a leased acquire on another key is held until released
            r = c.request(acquire_req("plain", "other", timeout_ms=0))
            self.assertEqual(c.request({"op": "status"})["leases"], 1)
            self.assertEqual(c.request({"op": "release", "lease": r["lease"]}).get("held"),
                             True)

    def test_refused_where_a_release_books(self):
        with Admitd(CONF) as d, d.connect() as c:
            self.check_refusals(c)


class RedisTest(NoLeaseCase):

    def setUp(self):
        self.rs = RedisServer().start()
        self.addCleanup(self.rs.cleanup)
        self.a = Admitd(CONF, redis_url=self.rs.url).start()
        self.addCleanup(self.a.cleanup)
        self.b = Admitd(CONF, redis_url=self.rs.url).start()
        self.addCleanup(self.b.cleanup)

    def test_one_budget_across_pods(self):
        with self.a.connect() as ca, self.b.connect() as cb:
            self.check_budget([ca, cb], "redis")
            for c in (ca, cb):
                self.assertEqual(c.request({"op": "status"})["leases"], 0)
            self.check_refusals(ca)

    def test_a_burst_is_batched(self):
        with self.a.connect() as c:
            before = evalsha_calls(self.rs)
            reqs = [one_shot("plain", "b%d" % i, id=i) for i in range(64)]
            c.send(b"".join(json.dumps(r).encode() + b"\n" for r in reqs))
            got = [c.recv(timeout=10) for _ in reqs]
            calls = evalsha_calls(self.rs) - before
            self.assertEqual(sorted(r.get("id") for r in got), list(range(64)))
            for r in got:
                self.check_admitted(r, "redis")
                self.assertEqual(r.get("remaining"), 5, r)
            self.assertLessEqual(calls, 16, "%d script calls for 64 acquires" % calls)
            self.assertEqual(c.request({"op": "status"})["leases"], 0)

    def test_fallback_limits_while_redis_is_down(self):
        with self.a.connect() as c:
            self.check_admitted(c.request(one_shot("plain", "warm")), "redis")
            self.rs.stop()
            self.check_budget([c], "fallback", key="down")
            self.assertEqual(c.request({"op": "status"})["leases"], 0)


if __name__ == "__main__":
    unittest.main()
