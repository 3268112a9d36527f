"""test_override.py - per-key overrides (the override op) with the real daemon.

An override sets one key's own min_delay and rule amounts for ttl_ms.
Checked here in process and through a real redis-server shared by two
daemons: it tightens for every daemon at once, loosens only up to the
scope's override_max, ends at its time, paces a serialized scope's next
admission from the release, is lifted by a reset through another daemon,
is kept by a daemon's fallback while Redis is down (and is refused
`unavailable`, applied here only, when Redis cannot be told), survives an
adaptive write in the same hash, and is bounded again by a reload that
lowers override_max. Past max_keys, a key under an override is evicted
after every key without one and, in local mode, not at all while it is
in force: an override that cannot be kept is refused, and every one
acknowledged holds (with Redis, which keeps them, all are taken).
proto/vectors/override.jsonl holds the protocol's
cases (errors, inspect, reset) that every client replays.
"""

import time
import unittest

from . import harness
from .harness import Admitd, RedisServer, acquire_req, redis_daemon
from .test_reload import ReloadCase

CONF = """
[admitd]
; what another daemon sets is seen at once (not after a known refusal's hold)
redis_refusal_hold = 0

[scope api]
rule = requests fixed-window 5/1h
override_max = 2
fallback_divisor = 1

[scope crawl]
min_delay = 2s
override_max = 4
lease_ttl = 30s

[scope learn]
rule = requests fixed-window 100/1h
adaptive = yes
adaptive_floor = 10/1h
override_max = 1

[scope plain]
rule = requests fixed-window 5/1h

[scope polite]
min_delay = 1s
override_max = 1
lease_ttl = 30s
"""

HOUR = 3600000


def ovr(c, scope, key, ttl_ms=HOUR, **kw):
    r = {"op": "override", "scope": scope, "key": key, "ttl_ms": ttl_ms}
    r.update(kw)
    return c.request(r)


def admitted(c, scope, key, n):
    """How many of n try-acquires (no wait) are admitted; leases are held."""
    k = 0
    for _ in range(n):
        r = c.request(acquire_req(scope, key, timeout_ms=0, detach=True))
        k += bool(r.get("ok"))
    return k


class LocalOverrideTest(unittest.TestCase):
    def setUp(self):
        self.d = Admitd(CONF).start()
        self.c = self.d.connect()

    def tearDown(self):
        self.c.close()
        self.d.cleanup(failed=False)

    @unittest.skipIf(harness.VALGRIND, "timings; run under ASan instead of valgrind")
    def test_tightens_then_ends(self):
        r = ovr(self.c, "api", "a", ttl_ms=400, rules={"0": 2})
        self.assertEqual(r, {"ok": True, "ttl_ms": 400, "backend": "local"})
        self.assertEqual(admitted(self.c, "api", "a", 4), 2)
        time.sleep(0.45)
        self.assertEqual(admitted(self.c, "api", "a", 4), 3)  # the conf's 5, 2 used

    def test_loosens_to_the_ceiling_only(self):
        r = ovr(self.c, "api", "b", rules={"0": 11})
        self.assertEqual((r["ok"], r["error"]), (False, "bad_request"), r)
        self.assertEqual(admitted(self.c, "api", "b", 1), 1)  # nothing was set
        self.assertTrue(ovr(self.c, "api", "b", rules={"0": 10})["ok"])
        self.assertEqual(admitted(self.c, "api", "b", 12), 9)

    @unittest.skipIf(harness.VALGRIND, "timings; run under ASan instead of valgrind")
    def test_serialized_min_delay_from_the_release(self):
        self.assertTrue(ovr(self.c, "crawl", "h", min_delay_ms=500)["ok"])
        r = self.c.request(acquire_req("crawl", "h", timeout_ms=0))
        self.c.request({"op": "release", "lease": r["lease"]})
        ref = self.c.request(acquire_req("crawl", "h", timeout_ms=0))
        self.assertEqual((ref["ok"], ref["rule"]), (False, "min_delay"), ref)
        self.assertTrue(400 < ref["retry_after_ms"] <= 500, ref)
        # waits the override's 500 ms, not the conf's 2 s
        t0 = time.monotonic()
        r = self.c.request(acquire_req("crawl", "h", timeout_ms=1500))
        self.assertTrue(r["ok"], r)
        self.assertLess(time.monotonic() - t0, 0.9)

    def test_held_lease_retry_after_is_the_override_min_delay(self):
        # a try while the key's lease is held: the earliest admission is its
        # release plus the key's min_delay, the override's 5 s, not the conf's 1 s
        self.assertTrue(ovr(self.c, "polite", "h", min_delay_ms=5000)["ok"])
        self.assertTrue(self.c.request(acquire_req("polite", "h", timeout_ms=0))["ok"])
        ref = self.c.request(acquire_req("polite", "h", timeout_ms=0))
        self.assertEqual((ref["ok"], ref["error"], ref["rule"]), (False, "limited", "min_delay"),
                         ref)
        self.assertEqual(ref["retry_after_ms"], 5000, ref)
        # a key without an override keeps the conf's
        self.assertTrue(self.c.request(acquire_req("polite", "g", timeout_ms=0))["ok"])
        ref = self.c.request(acquire_req("polite", "g", timeout_ms=0))
        self.assertEqual(ref["retry_after_ms"], 1000, ref)

    def test_scope_without_override_max(self):
        r = ovr(self.c, "plain", "p", rules={"0": 1})
        self.assertEqual((r["ok"], r["error"]), (False, "bad_request"), r)
        self.assertIn("takes no overrides", r["message"])
        self.assertEqual(admitted(self.c, "plain", "p", 6), 5)


class RedisOverrideTest(unittest.TestCase):
    """Two daemons on one Redis: what one sets, the other obeys."""

    def setUp(self):
        self.rs = RedisServer().start()
        self.a = Admitd(CONF, redis_url=self.rs.url).start()
        self.b = Admitd(CONF, redis_url=self.rs.url).start()
        self.ca, self.cb = self.a.connect(), self.b.connect()
        for c in (self.ca, self.cb):  # both on Redis before anything is asked
            deadline = time.monotonic() + 10
            while c.request({"op": "status"})["backend"] != "redis":
                self.assertLess(time.monotonic(), deadline, "a daemon never reached Redis")
                time.sleep(0.02)

    def tearDown(self):
        self.ca.close()
        self.cb.close()
        self.a.cleanup(failed=False)
        self.b.cleanup(failed=False)
        self.rs.cleanup(failed=False)

    def test_set_on_one_daemon_holds_on_the_other(self):
        r = ovr(self.ca, "api", "k", rules={"0": 2})
        self.assertEqual(r, {"ok": True, "ttl_ms": HOUR, "backend": "redis"})
        self.assertEqual(admitted(self.cb, "api", "k", 3), 2)
        self.assertEqual(admitted(self.ca, "api", "k", 1), 0)
        ins = self.cb.request({"op": "inspect", "scope": "api", "key": "k"})
        self.assertEqual(ins["override"]["rules"], {"0": 2}, ins)
        self.assertTrue(HOUR - 5000 < ins["override"]["ttl_ms"] <= HOUR, ins)
        self.assertEqual(ins["rules"][0]["capacity"], 2, ins)
        # loosened through B, up to 2 x 5: A admits up to 10 in all
        self.assertTrue(ovr(self.cb, "api", "k", rules={"0": 10})["ok"])
        self.assertEqual(admitted(self.ca, "api", "k", 10), 8)
        # a reset through A lifts it for B: the conf's 5, all used
        self.assertTrue(self.ca.request({"op": "reset", "scope": "api", "key": "k"})["ok"])
        ins = self.cb.request({"op": "inspect", "scope": "api", "key": "k"})
        self.assertNotIn("override", ins)
        self.assertEqual(admitted(self.cb, "api", "k", 1), 0)

    @unittest.skipIf(harness.VALGRIND, "timings; run under ASan instead of valgrind")
    def test_ends_at_its_time_in_redis(self):
        self.assertTrue(ovr(self.ca, "api", "t", ttl_ms=400, rules={"0": 1})["ok"])
        self.assertEqual(admitted(self.cb, "api", "t", 2), 1)
        time.sleep(0.45)
        self.assertEqual(admitted(self.cb, "api", "t", 5), 4)

    @unittest.skipIf(harness.VALGRIND, "timings; run under ASan instead of valgrind")
    def test_serialized_pacing_across_daemons(self):
        self.assertTrue(ovr(self.ca, "crawl", "host", min_delay_ms=600)["ok"])
        r = self.cb.request(acquire_req("crawl", "host", timeout_ms=0))
        self.assertTrue(r["ok"], r)
        self.assertTrue(self.cb.request({"op": "release", "lease": r["lease"]})["ok"])
        released = time.monotonic()
        # B's release reaches Redis after its reply: until then A is refused
        # for the held lease (a wait for the slot, longer than min_delay).
        for _ in range(100):
            ref = self.ca.request(acquire_req("crawl", "host", timeout_ms=0))
            if ref.get("retry_after_ms", 0) <= 600:
                break
            time.sleep(0.01)
        since = (time.monotonic() - released) * 1000
        self.assertEqual((ref["ok"], ref["rule"]), (False, "min_delay"), ref)
        self.assertTrue(600 - since - 100 < ref["retry_after_ms"] <= 600, (ref, since))

    def test_held_lease_retry_after_is_the_override_min_delay(self):
        # set through A, the lease held through A, the try through B (which
        # learns the override from its own acquire's reply) and through A
        self.assertTrue(ovr(self.ca, "polite", "h", min_delay_ms=5000)["ok"])
        self.assertTrue(self.ca.request(acquire_req("polite", "h", timeout_ms=0))["ok"])
        for c in (self.cb, self.ca):
            ref = c.request(acquire_req("polite", "h", timeout_ms=0))
            self.assertEqual((ref["ok"], ref["rule"], ref["backend"]),
                             (False, "min_delay", "redis"), ref)
            self.assertEqual(ref["retry_after_ms"], 5000, ref)

    def test_fallback_keeps_what_redis_said(self):
        self.assertTrue(ovr(self.ca, "api", "f", rules={"0": 1})["ok"])
        # B learns it from an acquire's reply, then Redis goes away
        self.assertEqual(admitted(self.cb, "api", "f", 1), 1)
        self.rs.stop()
        r = self.cb.request(acquire_req("api", "f", timeout_ms=0))
        self.assertEqual((r["ok"], r["backend"]), (False, "fallback"), r)
        self.assertEqual(r["rule"], "requests fixed-window 5/1h", r)
        # an override that cannot reach Redis holds here only, and says so
        r = ovr(self.ca, "api", "g", rules={"0": 1})
        self.assertEqual((r["ok"], r["error"], r["backend"]), (False, "unavailable", "fallback"), r)
        self.assertEqual(admitted(self.ca, "api", "g", 2), 1)

    def test_adaptive_write_keeps_the_override(self):
        self.assertTrue(ovr(self.ca, "learn", "x", rules={"0": 50})["ok"])
        # a penalty is a limited outcome: the learned amount is written in the same hash
        self.assertTrue(self.cb.request({"op": "penalize", "scope": "learn", "key": "x",
                                         "retry_after_ms": 0})["ok"])
        # the penalty reaches Redis after its reply: wait for it to land
        key = "admitd:{learn:x}:a"
        deadline = time.monotonic() + 5
        while True:
            h = self.rs.command("HGETALL", key)
            fields = dict(zip(h[::2], h[1::2]))
            if "amt" in fields or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        self.assertEqual((fields.get("o0"), fields.get("amt")), ("50", "80000"), fields)
        self.assertGreater(self.rs.command("PTTL", key), 3000000)  # the override's hour
        ins = self.ca.request({"op": "inspect", "scope": "learn", "key": "x"})
        # 50 in force, scaled by the learned 80 of 100
        self.assertEqual(ins["rules"][0]["capacity"], 40, ins)


KEYS_CONF = """
[admitd]
max_keys = 100

[scope api]
rule = requests fixed-window 5/1h
override_max = 2
"""


def status(c):
    return c.request({"op": "status"})


class KeyTableOverrideTest(unittest.TestCase):
    """max_keys and overrides, in local mode: a key under an override is
    evicted after every key without one, and never while its override is
    in force (it would be lost); an override that cannot be kept is
    refused, and every override acknowledged holds."""

    def setUp(self):
        self.d = Admitd(KEYS_CONF).start()
        self.c = self.d.connect()

    def tearDown(self):
        self.c.close()
        self.d.cleanup(failed=False)

    def assertInForce(self, keys):
        for k in keys:
            ins = self.c.request({"op": "inspect", "scope": "api", "key": k})
            self.assertEqual(ins.get("override", {}).get("rules"), {"0": 2}, (k, ins))
            self.assertEqual(ins["rules"][0]["capacity"], 2, (k, ins))

    def test_overrides_past_max_keys_are_kept_or_refused(self):
        acked, refused = [], []
        for i in range(150):
            r = ovr(self.c, "api", "o%d" % i, rules={"0": 2})
            if r.get("ok"):
                acked.append("o%d" % i)
                continue
            self.assertEqual(r.get("error"), "unavailable", r)
            self.assertIn("max_keys (100) reached", r["message"])
            self.assertIn("under an override", r["message"])
            refused.append("o%d" % i)
        self.assertEqual((len(acked), len(refused)), (100, 50))
        self.assertEqual(acked, ["o%d" % i for i in range(100)])
        self.assertInForce(acked)
        # and by their effect: 2 admitted of 3, where the conf says 5
        for k in acked[:5] + acked[-5:]:
            self.assertEqual(admitted(self.c, "api", k, 3), 2, k)
        st = status(self.c)
        self.assertEqual((st["keys"], st["key_evictions"]), (100, 0), st)
        # a new key is refused too, and says why; the keys kept still serve
        r = self.c.request(acquire_req("api", "new", timeout_ms=0))
        self.assertEqual(r.get("error"), "unavailable", r)
        self.assertIn("under an override", r["message"])
        self.assertEqual(admitted(self.c, "api", "o7", 1), 1)

    def test_keys_without_an_override_go_first(self):
        for i in range(50):
            self.assertTrue(ovr(self.c, "api", "o%d" % i, rules={"0": 2})["ok"])
        # 50 keys without an override, each used after every override was set
        for i in range(50):
            r = self.c.request(acquire_req("api", "p%d" % i, timeout_ms=0))
            self.assertTrue(r.get("ok"), r)
            self.assertTrue(self.c.request({"op": "release", "lease": r["lease"]})["ok"])
        for i in range(50, 100):
            r = ovr(self.c, "api", "o%d" % i, rules={"0": 2})
            self.assertTrue(r.get("ok"), r)
        st = status(self.c)
        self.assertEqual((st["keys"], st["key_evictions"]), (100, 50), st)
        self.assertInForce(["o%d" % i for i in range(100)])

    def test_a_key_whose_override_ended_can_go(self):
        for i in range(99):
            self.assertTrue(ovr(self.c, "api", "o%d" % i, rules={"0": 2})["ok"])
        r = ovr(self.c, "api", "short", ttl_ms=1500, rules={"0": 2})
        self.assertTrue(r.get("ok"), r)
        r = self.c.request(acquire_req("api", "new", timeout_ms=0))
        self.assertEqual(r.get("error"), "unavailable", r)
        time.sleep(1.7)
        r = self.c.request(acquire_req("api", "new", timeout_ms=0))
        self.assertTrue(r.get("ok"), r)
        st = status(self.c)
        # The ended override's key made the room: evicted for "new", or
        # freed just before by the idle sweep (its state is a fresh key's
        # once the override has ended), whichever came first.
        self.assertEqual(st["keys"], 100, st)
        self.assertIn(st["key_evictions"], (0, 1), st)
        self.assertInForce(["o%d" % i for i in range(99)])


class RedisKeyTableOverrideTest(unittest.TestCase):
    """With Redis the override lives in Redis, for every daemon: a key
    evicted past max_keys forgets only its fallback's copy, so overrides
    past max_keys are all taken and all hold."""

    def setUp(self):
        self.rs, self.d, self.c = redis_daemon(self, KEYS_CONF)

    def test_overrides_past_max_keys_all_hold(self):
        for i in range(150):
            r = ovr(self.c, "api", "o%d" % i, rules={"0": 2})
            self.assertEqual((r.get("ok"), r.get("backend")), (True, "redis"), r)
        for i in range(150):
            ins = self.c.request({"op": "inspect", "scope": "api", "key": "o%d" % i})
            self.assertEqual(ins.get("override", {}).get("rules"), {"0": 2}, (i, ins))
        self.assertEqual(admitted(self.c, "api", "o0", 3), 2)
        self.assertLessEqual(status(self.c)["keys"], 100)


class ReloadOverrideTest(ReloadCase):
    def test_lower_ceiling_bounds_an_override_already_set(self):
        self.start("[scope s]\nrule = requests fixed-window 5/1h\noverride_max = 2\n")
        c = self.conn()
        self.assertTrue(ovr(c, "s", "k", rules={"0": 10})["ok"])
        ins = c.request({"op": "inspect", "scope": "s", "key": "k"})
        self.assertEqual(ins["rules"][0]["capacity"], 10, ins)
        self.reload("[scope s]\nrule = requests fixed-window 5/1h\noverride_max = 1.2\n")
        ins = c.request({"op": "inspect", "scope": "s", "key": "k"})
        self.assertEqual(ins["rules"][0]["capacity"], 6, ins)
        self.assertEqual(ins["override"]["rules"], {"0": 6}, ins)

    def test_reload_ending_overrides_frees_their_keys(self):
        conf = "[scope s]\nrule = requests fixed-window 5/1h\n"
        self.start(conf + "override_max = 2\n", extra="max_keys = 3")
        c = self.conn()
        for k in ("a", "b", "c"):
            self.assertTrue(ovr(c, "s", k, rules={"0": 2})["ok"])
        r = c.request(acquire_req("s", "new", timeout_ms=0))
        self.assertEqual(r.get("error"), "unavailable", r)
        # without override_max the scope takes no overrides: none is in force
        self.reload(conf, extra="max_keys = 3")
        r = c.request(acquire_req("s", "new", timeout_ms=0))
        self.assertTrue(r.get("ok"), r)


if __name__ == "__main__":
    unittest.main()
