"""test_remaining.py - what an acquire's reply says is left, and who refused.

An admitted or refused acquire carries `remaining` and `reset_ms` for the
tightest limit of its targets (the smallest part of its capacity left), so
a gateway can fill x-ratelimit-remaining / x-ratelimit-reset without an
inspect; a refusal names the target that refused. Each strategy, the quota,
the caps and multi-target acquires are checked in process and through a
real redis-server, against what inspect reports.
"""

import unittest

from .harness import Admitd, RedisServer, acquire_req

CONF = """
[scope fw]
rule = requests fixed-window 5/1h

[scope tb]
rule = requests token-bucket 10/1s

[scope lb]
rule = requests leaky-bucket 4/1s

[scope sw]
rule = requests sliding-window 6/1h

[scope q]
quota = 3/1h

[scope cc]
cluster_concurrency = 4
lease_ttl = 30s

[scope mc]
max_concurrent = 2
lease_ttl = 20s

[scope tok]
rule = tokens.output fixed-window 1000/1h

[scope two]
rule = requests fixed-window 100/1h
rule = requests fixed-window 10/1m

[scope open]
max_waiters = 10

[scope sh]
quota = 1/1h
shadow = yes
"""

HOUR = 3600000


class LeftCases:
    """Run against self.d (a started daemon); self.via is its backend."""

    def acq(self, scope, key, **kw):
        r = self.c.request(acquire_req(scope, key, timeout_ms=0, **kw))
        if r.get("ok"):
            self.assertEqual(r["backend"], self.via, r)
        return r

    def test_fixed_window(self):
        r = self.acq("fw", "a", cost=2)
        self.assertEqual(r["remaining"], 3)
        self.assertTrue(0 < r["reset_ms"] <= HOUR, r)
        r = self.acq("fw", "a", cost=3)
        self.assertEqual(r["remaining"], 0)
        ref = self.acq("fw", "a")
        self.assertEqual((ref["error"], ref["remaining"]), ("limited", 0), ref)
        self.assertLessEqual(abs(ref["reset_ms"] - ref["retry_after_ms"]), 5, ref)
        self.assertEqual(ref["target"], {"index": 0, "scope": "fw", "key": "a"})

    def test_token_bucket_refills(self):
        r = self.acq("tb", "a", cost=4)
        self.assertEqual(r["remaining"], 6)
        # 4 tokens at 10/s: full again in 400 ms (less what passed since)
        self.assertTrue(300 <= r["reset_ms"] <= 400, r)

    def test_leaky_bucket(self):
        r = self.acq("lb", "a")
        self.assertEqual(r["remaining"], 3)
        self.assertTrue(150 <= r["reset_ms"] <= 250, r)

    def test_sliding_window(self):
        for want in (5, 4):
            r = self.acq("sw", "a")
            self.assertEqual(r["remaining"], want, r)
        self.assertTrue(0 < r["reset_ms"] <= 2 * HOUR, r)

    def test_quota(self):
        r = self.acq("q", "a")
        self.assertEqual((r["remaining"], r["reset_ms"]), (2, HOUR))
        self.acq("q", "a")
        r = self.acq("q", "a")
        self.assertEqual(r["remaining"], 0)
        ref = self.acq("q", "a")
        self.assertEqual((ref["error"], ref["remaining"]), ("limited", 0))
        # full again when the newest instant leaves the window
        self.assertTrue(HOUR - 2000 <= ref["reset_ms"] <= HOUR, ref)

    def test_caps(self):
        r = self.acq("cc", "a")
        self.assertEqual((r["remaining"], r["reset_ms"]), (3, 30000))
        r = self.acq("mc", "a")
        self.assertEqual((r["remaining"], r["reset_ms"]), (1, 20000))
        r = self.acq("mc", "a")
        self.assertEqual(r["remaining"], 0)
        ref = self.acq("mc", "a")
        self.assertEqual((ref["error"], ref["rule"], ref["remaining"]),
                         ("limited", "max_concurrent", 0), ref)

    def test_token_meter_with_a_reservation(self):
        r = self.acq("tok", "a", reserve={"output": 300})
        self.assertEqual(r["remaining"], 700)

    def test_the_tightest_of_several_rules_and_targets(self):
        r = self.acq("two", "a")
        # 99 of 100 is more of its capacity than 9 of 10
        self.assertEqual(r["remaining"], 9)
        self.assertTrue(0 < r["reset_ms"] <= 60000, r)
        r = self.c.request({"op": "acquire", "timeout_ms": 0, "targets": [
            {"scope": "fw", "key": "m"}, {"scope": "q", "key": "m"}]})
        self.assertEqual((r["ok"], r["remaining"], r["reset_ms"]), (True, 2, HOUR), r)

    def test_a_refused_target_is_named(self):
        for _ in range(3):
            self.assertIs(self.acq("q", "full").get("ok"), True)
        r = self.c.request({"op": "acquire", "timeout_ms": 0, "targets": [
            {"scope": "fw", "key": "n"}, {"scope": "q", "key": "full"}]})
        self.assertEqual(r["error"], "limited", r)
        self.assertEqual(r["target"], {"index": 1, "scope": "q", "key": "full"})
        self.assertEqual(r["rule"], "quota 3/1h")
        # the first target was not spent: the whole acquire books nothing
        self.assertEqual(self.acq("fw", "n")["remaining"], 4)

    def test_nothing_limits(self):
        r = self.acq("open", "a")
        self.assertIs(r.get("ok"), True, r)
        self.assertNotIn("remaining", r)
        self.assertNotIn("reset_ms", r)
        # a shadow scope refuses nothing, so it tells nothing either
        r = self.acq("sh", "a")
        self.assertNotIn("remaining", r)

    def test_inspect_agrees(self):
        r = self.acq("fw", "i", cost=2)
        ins = self.c.request({"op": "inspect", "scope": "fw", "key": "i"})
        self.assertEqual(ins["rules"][0]["remaining"], r["remaining"])


class LocalLeftTest(LeftCases, unittest.TestCase):
    via = "local"

    def setUp(self):
        self.d = Admitd(CONF).start()
        self.c = self.d.connect()

    def tearDown(self):
        self.c.close()
        self.d.cleanup(failed=False)


class RedisLeftTest(LeftCases, unittest.TestCase):
    via = "redis"

    def setUp(self):
        self.rs = RedisServer().start()
        self.d = Admitd(CONF, redis_url=self.rs.url).start()
        self.c = self.d.connect()

    def tearDown(self):
        self.c.close()
        self.d.cleanup(failed=False)
        self.rs.cleanup(failed=False)


if __name__ == "__main__":
    unittest.main()
