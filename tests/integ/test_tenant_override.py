"""test_tenant_override.py - a tenant's weight set at run time (override).

`{"op":"override",...,"tenant":T,"weight":W,"ttl_ms":N}` sets tenant T's
weight on one key until the ttl ends. Checked with the real daemon in local
mode and on a real redis-server: with gold = 4 and bronze = 1 in the conf,
bronze set to 4 for 3 s gets about as many admissions as gold while it
holds and a quarter of gold's after; a tenant without a `weight` line that
is given one is a flow of its own (not the shared default one); the bounds
(override_max times the conf weight, at most 1000, at most 16 tenants a
key) are refused `bad_request` naming them, a scope without override_max
refuses it as other overrides; inspect shows it, reset lifts it, it ends
at its ttl. On Redis it is the field tw:T of the key's adaptive hash,
"W:UNTIL" in Redis time (the layout the fair acquire reads), the 16 are
counted there across daemons, and the old override form leaves it alone.
"""

import time
import unittest

from .harness import Admitd
from .redis_util import key_name, wait_backend
from .test_tenants import CONF as TENANTS_CONF
from .test_tenants import RATE, LoadCase

# test_tenants' scope t (gold 4, silver 2, bronze 1) without silver, taking
# overrides up to 4 times; and a scope that takes none
CONF = TENANTS_CONF.replace("weight silver = 2\n", "override_max = 4\n") + """
[scope plain]
rule = requests token-bucket %d/1s burst=1
weight gold = 4
""" % RATE
assert "override_max = 4" in CONF


def ovr(c, tenant, weight, ttl_ms=3000, scope="t", key="k", **kw):
    r = {"op": "override", "scope": scope, "key": key, "tenant": tenant, "weight": weight,
         "ttl_ms": ttl_ms}
    r.update(kw)
    return c.request(r)


def inspect(c, key="k"):
    r = c.request({"op": "inspect", "scope": "t", "key": key})
    assert r.get("ok"), r
    return r


class TenantOverrideCase(LoadCase):
    CONF = CONF

    def shares(self, ld, t0, t1, want):
        """Each tenant's share of what ld got in [t0, t1) is within 10% of
        its weight's share, and enough were admitted to tell."""
        counts = ld.counts(t0, t1)
        total = sum(counts.get(t, 0) for t in want)
        self.assertGreater(total, 0.6 * RATE * (t1 - t0), counts)
        wsum = sum(want.values())
        for t, w in want.items():
            share, expect = counts.get(t, 0) / total, w / wsum
            self.assertLess(abs(share - expect), 0.1 * expect,
                            "%s: %.3f, want %.3f; %r" % (t, share, expect, counts))
        return counts

    def test_bronze_at_4_for_3s_then_back_to_1(self):
        c = self.conn()
        ld = self.load(["gold", "bronze"], 4)
        time.sleep(1.0)
        t0 = time.monotonic()
        time.sleep(1.5)
        before = self.shares(ld, t0, time.monotonic(), {"gold": 4, "bronze": 1})
        r = ovr(c, "bronze", 4, ttl_ms=3000)
        t_set = time.monotonic()
        self.assertEqual(r, {"ok": True, "ttl_ms": 3000, "backend": self.mode}, r)
        self.assertEqual(inspect(c)["tenant_weights"]["bronze"]["weight"], 4)
        # bronze's waiters queued before it keep their tags: it takes about
        # one turn of them (4 waiters a quarter of gold's pace) to settle
        time.sleep(max(0.0, t_set + 0.8 - time.monotonic()))
        t1 = time.monotonic()
        time.sleep(max(0.0, t_set + 2.8 - time.monotonic()))
        during = self.shares(ld, t1, time.monotonic(), {"gold": 1, "bronze": 1})
        time.sleep(max(0.0, t_set + 3.5 - time.monotonic()))
        self.assertNotIn("tenant_weights", inspect(c))
        t2 = time.monotonic()
        time.sleep(2.5)
        after = self.shares(ld, t2, time.monotonic(), {"gold": 4, "bronze": 1})
        ld.finish()
        print("\nshares (gold, bronze) before %r, during %r, after %r"
              % (before, during, after))

    def test_an_unlisted_tenant_given_a_weight_is_its_own_flow(self):
        c = self.conn()
        # acme and two invented names would share one default flow of weight 1
        self.assertTrue(ovr(c, "acme", 4, ttl_ms=60000)["ok"])
        ld = self.load(["gold", "acme", "x1", "x2"], 4)
        time.sleep(1.0)
        t0 = time.monotonic()
        time.sleep(2.5)
        counts = ld.counts(t0, time.monotonic())  # not the queue drained by finish
        ld.finish()
        counts["default"] = counts.pop("x1", 0) + counts.pop("x2", 0)
        self.assertGreater(sum(counts.values()), 0.6 * RATE * 2.5, counts)
        total = sum(counts.values())
        for t, w in (("gold", 4), ("acme", 4), ("default", 1)):
            self.assertLess(abs(counts[t] / total - w / 9), 0.1 * w / 9, counts)
        q = inspect(c)
        self.assertEqual(q["tenant_weights"]["acme"]["weight"], 4, q)

    def test_bounds_are_refused_naming_them(self):
        c = self.conn()
        r = ovr(c, "bronze", 5)
        self.assertEqual((r["ok"], r["error"]), (False, "bad_request"), r)
        self.assertIn("past override_max (4) times its weight (1): at most 4", r["message"])
        r = ovr(c, "gold", 17)
        self.assertIn("at most 16", r["message"])
        self.assertTrue(ovr(c, "gold", 16)["ok"])
        r = ovr(c, "gold", 1001)
        self.assertEqual(r["error"], "bad_request", r)
        self.assertIn('"weight" must be between 1 and 1000', r["message"])
        self.assertEqual(ovr(c, "gold", 0)["error"], "bad_request")
        r = ovr(c, "gold", 2, scope="plain")
        self.assertEqual(r["error"], "bad_request", r)
        self.assertIn("[scope plain] takes no overrides", r["message"])
        r = ovr(c, "gold", 2, rules={"0": 10})
        self.assertIn("a tenant's weight is set alone", r["message"])
        r = c.request({"op": "override", "scope": "t", "key": "k", "ttl_ms": 1000, "weight": 2})
        self.assertIn('"tenant" and "weight" go together', r["message"])
        r = ovr(c, "a b", 2)
        self.assertIn('"tenant" must be 1 to 64 of', r["message"])
        # 16 tenants a key; setting one of them again is not a 17th
        for i in range(15):
            self.assertTrue(ovr(c, "t%02d" % i, 2, ttl_ms=60000)["ok"])
        r = ovr(c, "one-more", 2)
        self.assertEqual(r["error"], "bad_request", r)
        self.assertIn("16 tenants' weights in force", r["message"])
        self.assertTrue(ovr(c, "t03", 3, ttl_ms=60000)["ok"])
        self.assertTrue(ovr(c, "one-more", 2, key="other")["ok"])
        tw = inspect(c)["tenant_weights"]
        self.assertEqual(len(tw), 16, tw)
        self.assertEqual(tw["t03"]["weight"], 3)
        self.assertEqual(tw["gold"]["weight"], 16)
        self.assertTrue(55000 < tw["t03"]["ttl_ms"] <= 60000, tw)

    def test_reset_lifts_it_and_it_ends_at_its_ttl(self):
        c = self.conn()
        self.assertTrue(ovr(c, "bronze", 3, ttl_ms=60000)["ok"])
        self.assertTrue(ovr(c, "gold", 2, ttl_ms=400)["ok"])
        tw = inspect(c)["tenant_weights"]
        self.assertEqual({t: o["weight"] for t, o in tw.items()}, {"bronze": 3, "gold": 2})
        time.sleep(0.6)
        self.assertEqual(list(inspect(c)["tenant_weights"]), ["bronze"])
        self.assertTrue(c.request({"op": "reset", "scope": "t", "key": "k"})["ok"])
        self.assertNotIn("tenant_weights", inspect(c))
        # the key's rule override is another thing, and stays apart
        r = c.request({"op": "override", "scope": "t", "key": "k", "ttl_ms": 60000,
                       "rules": {"0": 10}})
        self.assertTrue(r["ok"], r)
        self.assertTrue(ovr(c, "bronze", 2, ttl_ms=60000)["ok"])
        q = inspect(c)
        self.assertEqual(q["override"]["rules"], {"0": 10}, q)
        self.assertEqual(q["tenant_weights"]["bronze"]["weight"], 2, q)


class TestTenantOverrideLocal(TenantOverrideCase, unittest.TestCase):
    mode = "local"


class TestTenantOverrideKeyTable(unittest.TestCase):
    """Past max_keys in local mode, a key holding a tenant's weight is kept
    as one under an override is (the weight would be lost): a new key is
    refused instead, and every weight acknowledged holds, through the idle
    sweep too."""

    def test_weights_past_max_keys_are_kept_or_refused(self):
        d = Admitd("[admitd]\nmax_keys = 100\n\n[scope t]\nrule = requests 5/1h\n"
                   "override_max = 2\n").start()
        self.addCleanup(d.cleanup, failed=False)
        c = d.connect()
        self.addCleanup(c.close)
        acked = []
        for i in range(120):
            r = ovr(c, "acme", 2, ttl_ms=600000, key="o%d" % i)
            if r.get("ok"):
                acked.append(i)
                continue
            self.assertEqual(r.get("error"), "unavailable", r)
            self.assertIn("under an override", r["message"])
        self.assertEqual(acked, list(range(100)))
        time.sleep(1.5)  # the idle sweep has walked every key meanwhile
        for i in acked:
            r = c.request({"op": "inspect", "scope": "t", "key": "o%d" % i})
            self.assertEqual(r["tenant_weights"]["acme"]["weight"], 2, r)
        st = c.request({"op": "status"})
        self.assertEqual((st["keys"], st["key_evictions"]), (100, 0), st)


class TestTenantOverrideRedis(TenantOverrideCase, unittest.TestCase):
    mode = "redis"

    def setUp(self):
        super().setUp()
        wait_backend(self.d, "redis", 10)

    def field(self, tenant, key="k"):
        return self.rs.command("HGET", key_name("admitd", "t", key, "a"), "tw:" + tenant)

    def redis_ms(self):
        s, us = self.rs.command("TIME")
        return int(s) * 1000 + int(us) // 1000

    def test_stored_as_tw_field_in_the_adaptive_hash(self):
        c = self.conn()
        now = self.redis_ms()
        self.assertEqual(ovr(c, "bronze", 3, ttl_ms=5000)["backend"], "redis")
        w, until = self.field("bronze").split(":")
        self.assertEqual(w, "3")
        self.assertLessEqual(abs(int(until) - (now + 5000)), 1000, (until, now))
        # the old form sets the key's rules and leaves the tenant's field alone
        r = c.request({"op": "override", "scope": "t", "key": "k", "ttl_ms": 60000,
                       "rules": {"0": 10}})
        self.assertTrue(r["ok"], r)
        self.assertEqual(self.field("bronze").split(":")[0], "3")
        self.assertEqual(inspect(c)["override"]["rules"], {"0": 10})
        # reset lifts both, in Redis and here
        self.assertTrue(c.request({"op": "reset", "scope": "t", "key": "k"})["ok"])
        self.assertIsNone(self.field("bronze"))
        self.assertNotIn("tenant_weights", inspect(c))

    def test_sixteen_a_key_are_counted_in_redis_across_daemons(self):
        c = self.conn()
        other = Admitd(CONF, redis_url=self.rs.url).start()
        self.addCleanup(other.cleanup, failed=False)
        wait_backend(other, "redis", 10)
        with other.connect() as oc:
            for i in range(16):
                self.assertTrue(ovr(oc, "t%02d" % i, 2, ttl_ms=60000)["ok"])
        # this daemon set none of them: Redis counts them
        r = ovr(c, "bronze", 2)
        self.assertEqual((r["ok"], r["error"]), (False, "bad_request"), r)
        self.assertIn("16 tenants' weights in force", r["message"])
        self.assertIsNone(self.field("bronze"))
        self.assertNotIn("tenant_weights", inspect(c))
        # one of them set again is no 17th
        r = ovr(c, "t05", 4)
        self.assertTrue(r["ok"], r)
        self.assertEqual(self.field("t05").split(":")[0], "4")

    def test_redis_down_holds_here_only(self):
        c = self.conn()
        self.rs.stop()
        wait_backend(self.d, "fallback", 10)
        r = ovr(c, "bronze", 4)
        self.assertEqual((r["ok"], r["error"], r["backend"]), (False, "unavailable", "fallback"))
        self.assertIn("Redis could not be told", r["message"])
        self.assertEqual(inspect(c)["tenant_weights"]["bronze"]["weight"], 4)


if __name__ == "__main__":
    unittest.main()
