"""test_remaining.py - what an acquire's reply says is left, and who refused.

An admitted or refused acquire carries `remaining` and `reset_ms` for the
tightest limit of its targets (the smallest part of its capacity left), so
a gateway can fill x-ratelimit-remaining / x-ratelimit-reset without an
inspect; a refusal names the target that refused. Each strategy, the quota,
the caps and multi-target acquires are checked in process and through a
real redis-server, against what inspect reports.

`limits` gives the same per meter (requests, tokens, tokens.NAME,
concurrency): the meter's tightest limit (fewest units left, ties: the
sooner reset), named, with its capacity, so that a gateway can fill
x-ratelimit-{limit,remaining,reset}-{requests,tokens}. Its reset_ms is
checked per strategy against its definition (when the limit would admit its
whole capacity again), worked out here from the instant of the decision on
the daemon's clock (CLOCK_MONOTONIC in process, Redis TIME through Redis).
"""

import time
import unittest

from .harness import Admitd, acquire_req, redis_daemon

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

[scope llm]
rule rpm = requests sliding-window 20/1m
rule = tokens fixed-window 6000/1h
rule = tokens.output token-bucket 1000/1h
class chat = rpm
max_concurrent = 3
lease_ttl = 40s

[scope capped]
quota = 3/1h
cluster_concurrency = 4
rule = concurrency 2
lease_ttl = 30s

[scope tie]
rule = requests token-bucket 10/1h
rule = requests token-bucket 10/1m

[scope fw10]
rule = requests fixed-window 5/10s

[scope sw10]
rule = requests sliding-window 4/10s

[scope sw2]
rule = requests sliding-window 2/2s

[scope ss10]
rule = requests session-window 5/10s
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

    # ---- limits: per meter ----

    def clock_ms(self):
        """Now on the clock the daemon decides by (see the module's doc)."""
        return (time.monotonic() if self.via == "local" else time.time()) * 1000.0

    def timed(self, scope, key, **kw):
        t0 = self.clock_ms()
        r = self.acq(scope, key, **kw)
        return r, t0, self.clock_ms()

    def assert_reset(self, got, t0, t1, full_at, r):
        """got is full_at(T) - T for some decision instant T in [t0, t1]
        (whole ms on the daemon's clock; 1 ms either side for rounding)."""
        ok = any(full_at(T) - T == got for T in range(int(t0) - 1, int(t1) + 2))
        self.assertTrue(ok, "reset_ms %s: no instant in [%.1f, %.1f] gives it; %r"
                        % (got, t0, t1, r))

    def test_limits_per_meter(self):
        t0 = time.monotonic()
        for _ in range(2):
            r = self.acq("llm", "k", reserve={"output": 100}, **{"class": "chat"})
            self.assertIs(r.get("ok"), True, r)
        took_ms = (time.monotonic() - t0) * 1000.0
        lim = r["limits"]
        self.assertEqual(set(lim), {"requests", "tokens", "tokens.output", "concurrency"}, r)
        self.assertEqual([lim["requests"][f] for f in ("rule", "limit", "remaining")],
                         ["rpm", 20, 18], r)
        # an unnamed rule is named by its index in the scope
        self.assertEqual([lim["tokens"][f] for f in ("rule", "limit", "remaining")],
                         ["1", 6000, 5800], r)
        # 200 of 1000 taken from a bucket refilling 1000/1h: full in 720 s,
        # less what it refilled between the two
        out = lim["tokens.output"]
        self.assertEqual([out[f] for f in ("rule", "limit", "remaining")], ["2", 1000, 800], r)
        self.assertTrue(720000 - took_ms - 1 <= out["reset_ms"] <= 720000, (r, took_ms))
        self.assertEqual(lim["concurrency"], {"rule": "max_concurrent", "limit": 3,
                                              "remaining": 1, "reset_ms": 40000}, r)
        # the two overall fields stay: the smallest part of its capacity left
        self.assertEqual((r["remaining"], r["reset_ms"]), (1, 40000), r)
        self.acq("llm", "k", reserve={"output": 100}, **{"class": "chat"})
        ref = self.acq("llm", "k", reserve={"output": 100}, **{"class": "chat"})
        # refused before any limiter read the counters: this pod's cap alone
        self.assertEqual((ref["error"], ref["rule"]), ("limited", "max_concurrent"), ref)
        self.assertEqual(ref["limits"], {"concurrency": {
            "rule": "max_concurrent", "limit": 3, "remaining": 0, "reset_ms": 40000}}, ref)

    def test_limits_quota_and_caps(self):
        r = self.acq("capped", "k")
        lim = r["limits"]
        self.assertEqual(lim["requests"],
                         {"rule": "quota", "limit": 3, "remaining": 2, "reset_ms": HOUR}, r)
        # concurrency: the rule's 1 of 2 is fewer than cluster_concurrency's 3 of 4
        self.assertEqual(lim["concurrency"],
                         {"rule": "0", "limit": 2, "remaining": 1, "reset_ms": 30000}, r)
        self.assertEqual(set(lim), {"requests", "concurrency"}, r)
        for _ in range(2):
            a = self.acq("capped", "k")
            self.assertIs(a.get("ok"), True, a)
            rel = self.c.request({"op": "release", "lease": a["lease"]})
            self.assertIs(rel.get("ok"), True, rel)
        ref = self.acq("capped", "k")
        # a limiter's refusal tells every meter, the deciding one at 0
        self.assertEqual((ref["error"], ref["rule"]), ("limited", "quota 3/1h"), ref)
        self.assertEqual(ref["limits"]["requests"]["remaining"], 0, ref)
        self.assertTrue(HOUR - 5000 <= ref["limits"]["requests"]["reset_ms"] <= HOUR, ref)
        self.assertEqual(ref["limits"]["concurrency"]["remaining"], 1, ref)

    def test_limits_the_tightest_of_rules_and_targets(self):
        r = self.acq("tie", "k")
        # 9 left of each: the sooner reset (the 1m bucket's, 6 s, against
        # the 1h one's 6 min) is the meter's. Buckets, not clock-aligned
        # windows: in an hour's last minute a 1h and a 1m fixed window end
        # at the same instant, a tie in both (the suite once ran there).
        self.assertEqual(r["limits"]["requests"]["limit"], 10, r)
        self.assertEqual(r["limits"]["requests"]["rule"], "1", r)
        self.assertTrue(0 < r["limits"]["requests"]["reset_ms"] <= 6000, r)
        r = self.c.request({"op": "acquire", "timeout_ms": 0, "targets": [
            {"scope": "two", "key": "t"}, {"scope": "fw", "key": "t"}]})
        # 4 of fw's 5 is fewer than 9 of two's 10 and 99 of its 100
        self.assertEqual(r["limits"], {"requests": {
            "rule": "0", "limit": 5, "remaining": 4,
            "reset_ms": r["limits"]["requests"]["reset_ms"]}}, r)
        self.assertTrue(0 < r["limits"]["requests"]["reset_ms"] <= HOUR, r)

    def test_limits_nothing_limits(self):
        self.assertNotIn("limits", self.acq("open", "a"))
        self.assertNotIn("limits", self.acq("sh", "a"))

    def test_reset_fixed_window_is_the_windows_end(self):
        r, t0, t1 = self.timed("fw10", "k")
        w = 10000
        self.assert_reset(r["limits"]["requests"]["reset_ms"], t0, t1,
                          lambda T: (T // w + 1) * w, r)

    def test_reset_sliding_window_is_when_the_estimate_is_0(self):
        # a count in the current window weighs until the next one ends
        r, t0, t1 = self.timed("sw10", "k")
        w = 10000
        self.assertEqual(r["limits"]["requests"]["remaining"], 3, r)
        self.assert_reset(r["limits"]["requests"]["reset_ms"], t0, t1,
                          lambda T: (T // w + 2) * w, r)
        # only the previous window's count: it weighs until this one ends
        w = 2000
        self.sleep_to_window(w, 100)
        for _ in range(2):
            self.assertIs(self.acq("sw2", "k").get("ok"), True)
        self.sleep_to_window(w, 100)
        ref, t0, t1 = self.timed("sw2", "k")
        self.assertEqual(ref["error"], "limited", ref)
        self.assertEqual(ref["limits"]["requests"]["remaining"], 0, ref)
        self.assert_reset(ref["limits"]["requests"]["reset_ms"], t0, t1,
                          lambda T: (T // w + 1) * w, ref)
        self.assertLessEqual(ref["limits"]["requests"]["reset_ms"], w, ref)

    def sleep_to_window(self, w, into):
        """Sleep until `into` ms into the next window of w ms (daemon's clock)."""
        now = self.clock_ms()
        time.sleep(((now // w + 1) * w + into - now) / 1000.0)

    def test_reset_buckets_are_the_refill_or_drain(self):
        r = self.acq("tb", "k", cost=4)
        # (capacity - level) / rate: 4 tokens at 10/s
        self.assertEqual(r["limits"]["requests"],
                         {"rule": "0", "limit": 10, "remaining": 6, "reset_ms": 400}, r)
        r = self.acq("lb", "k")
        # one unit drains at 4/s
        self.assertEqual(r["limits"]["requests"],
                         {"rule": "0", "limit": 4, "remaining": 3, "reset_ms": 250}, r)

    def test_reset_session_window_is_the_sessions_end(self):
        r, a0, a1 = self.timed("ss10", "k")
        self.assertEqual(r["limits"]["requests"]["reset_ms"], 10000, r)
        time.sleep(0.3)
        r, b0, b1 = self.timed("ss10", "k")
        got = r["limits"]["requests"]["reset_ms"]
        # the session opened at the first decision A: it ends at A + 10 s
        self.assertTrue(10000 - (b1 - a0) - 2 <= got <= 10000 - (b0 - a1) + 2,
                        (got, a0, a1, b0, b1))
        self.assertEqual(r["limits"]["requests"]["remaining"], 3, r)


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
        self.rs, self.d, self.c = redis_daemon(self, CONF)


if __name__ == "__main__":
    unittest.main()
