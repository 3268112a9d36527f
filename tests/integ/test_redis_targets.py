"""test_redis_targets.py - several targets in one acquire, over Redis.

A request naming several targets is admitted only when every target admits;
a target that admitted while another refused is rolled back (its lease and
quota instant leave Redis); the lease's release commits every target. The
Redis keys are read directly to see what is booked.
"""

import time
import unittest

from .harness import Admitd, RedisServer

CONF = """
[admitd]
; generous: the test is about bookings, not timing (and may run under valgrind)
redis_timeout = 5s

[scope tenant]
quota = 1/1h
cluster_concurrency = 4
lease_ttl = 30s

[scope upstream]
quota = 10/1h
cluster_concurrency = 4
lease_ttl = 30s
"""

T_ACME = {"scope": "tenant", "key": "acme"}
T_HOST = {"scope": "upstream", "url": "https://API.example.com/v1"}


def acquire(conn, targets, **kw):
    req = {"op": "acquire", "targets": targets, "timeout_ms": 0}
    req.update(kw)
    return conn.request(req)


class TargetsTest(unittest.TestCase):

    def setUp(self):
        self.redis = RedisServer()
        self.redis.start()
        self.addCleanup(self.redis.cleanup)
        self.d = Admitd(CONF, redis_url=self.redis.url)
        self.d.start()
        self.addCleanup(self.d.stop)
        # The pool connects in the background: until it is up, decisions are
        # the fallback's. Wait for it (deadline), do not race it.
        deadline = time.monotonic() + 30
        with self.d.connect() as c:
            while c.request({"op": "status"})["backend"] != "redis":
                self.assertLess(time.monotonic(), deadline, "admitd never reached redis")
                time.sleep(0.02)

    def booked(self, scope, key):
        """(quota instants, leases in flight) Redis holds for (scope, key)."""
        q = self.redis.command("ZCARD", "admitd:{%s:%s}:q" % (scope, key))
        l = self.redis.command("ZCARD", "admitd:{%s:%s}:l" % (scope, key))
        return q, l

    def test_all_or_nothing_and_rollback(self):
        with self.d.connect() as c:
            first = acquire(c, [T_ACME, T_HOST])
            self.assertIs(first.get("ok"), True, first)
            self.assertEqual(first["backend"], "redis")
            self.assertEqual(self.booked("tenant", "acme"), (1, 1))
            self.assertEqual(self.booked("upstream", "api.example.com"), (1, 1))

            # The tenant's quota (1/1h) refuses; the upstream admitted in its
            # own script and must be rolled back: still one instant, one lease.
            second = acquire(c, [T_HOST, T_ACME])
            self.assertEqual(second.get("error"), "limited", second)
            self.assertEqual(second.get("rule"), "quota 1/1h")
            self.assertEqual(second.get("backend"), "redis")
            self.assertEqual(self.booked("upstream", "api.example.com"), (1, 1))

            # The upstream alone still has its budget (nothing leaked to it).
            alone = acquire(c, [T_HOST])
            self.assertIs(alone.get("ok"), True, alone)
            self.assertEqual(self.booked("upstream", "api.example.com"), (2, 2))

            # One release frees every target of the lease.
            rel = c.request({"op": "release", "lease": first["lease"]})
            self.assertEqual(rel, {"ok": True, "held": True})
            # A ping on the same connection comes after the release's
            # pipelined scripts were sent; poll Redis briefly for them.
            for _ in range(100):
                if self.booked("tenant", "acme")[1] == 0:
                    break
                c.request({"op": "ping"})
            self.assertEqual(self.booked("tenant", "acme"), (1, 0))
            self.assertEqual(self.booked("upstream", "api.example.com"), (2, 1))

    def test_unknown_scope_in_targets(self):
        with self.d.connect() as c:
            r = acquire(c, [T_ACME, {"scope": "nope", "key": "x"}])
            self.assertEqual(r.get("error"), "unknown_scope", r)
            # Nothing was asked of Redis for the valid target.
            self.assertEqual(self.booked("tenant", "acme"), (0, 0))


if __name__ == "__main__":
    unittest.main()
