"""test_lua_state.py - a rule's state as one string (scripts/lib/state.lua),
and the upgrade from the layout of older admitd versions.

Older versions kept each rule's state in a hash (fields a, b, t, and
penalty_until when the rule held the key's penalty). Here that hash is
written as those versions wrote it, into a real redis-server, and the real
daemon then meets it: every path that reads a rule (acquire, release with
tokens, inspect, penalize, reset) sees its counters and its penalty, and
the first write replaces the hash with the string, so a conf keeps its
state across the upgrade.
"""

import time
import unittest

from .harness import START_DEADLINE, Admitd, RedisServer, acquire_req
from .redis_util import key_name, rule_state


def warm(d):
    """Wait until d decides through Redis (connected, its scripts loaded):
    under valgrind that takes a while after the start."""
    deadline = time.monotonic() + START_DEADLINE
    with d.connect() as c:
        while True:
            r = c.request(acquire_req("up", "warm", timeout_ms=1000))
            if r.get("backend") == "redis" or time.monotonic() > deadline:
                return
            time.sleep(0.1)

CONF = """
[admitd]
redis_pool = 1
redis_timeout = 2s

[scope up]
rule = requests token-bucket 10/1h

[scope tok]
rule = tokens token-bucket 100000/1h
"""


class UpgradeTest(unittest.TestCase):

    def setUp(self):
        self.rs = RedisServer().start()
        self.addCleanup(self.rs.cleanup)
        self.r = self.rs.connect()
        self.addCleanup(self.r.close)
        self.d = Admitd(CONF, redis_url=self.rs.url).start()
        self.addCleanup(self.d.cleanup)
        warm(self.d)
        self.c = self.d.connect()
        self.addCleanup(self.c.close)

    def now(self):
        t = self.r.command("TIME")
        return int(t[0]) * 1000 + int(t[1]) // 1000

    def old_hash(self, key, a, t, pen=None, ttl=3600000):
        """The rule's state as older admitd versions' scripts wrote it."""
        f = ["a", a, "b", 0, "t", t]
        if pen is not None:
            f += ["penalty_until", pen]
        self.r.command("HSET", key, *f)
        self.r.command("PEXPIRE", key, ttl)

    def ask(self, scope, key):
        r = self.c.request(acquire_req(scope, key, timeout_ms=0))
        self.assertEqual(r.get("backend"), "redis", r)
        return r

    def test_counters_carry_over(self):
        key = key_name("admitd", "up", "k", "r0")
        self.old_hash(key, 8000, self.now())  # 8 of 10 taken, nothing drains in an hour
        r = self.ask("up", "k")
        self.assertIs(r.get("ok"), True, r)
        self.assertEqual(r.get("remaining"), 1, r)
        self.assertEqual(self.r.command("TYPE", key), "string")  # replaced on the write
        self.assertEqual(rule_state(self.r, key)["a"], 9000)
        self.assertGreater(self.r.command("PTTL", key), 0)
        self.assertIs(self.ask("up", "k").get("ok"), True)
        r = self.ask("up", "k")
        self.assertEqual((r.get("ok"), r.get("error")), (False, "limited"), r)

    def test_penalty_carries_over(self):
        key = key_name("admitd", "up", "p", "r0")
        self.old_hash(key, 1000, self.now(), pen=self.now() + 60000, ttl=60000)
        r = self.ask("up", "p")
        self.assertEqual((r.get("ok"), r.get("rule")), (False, "penalty"), r)
        self.assertGreater(r.get("retry_after_ms", 0), 50000, r)
        ins = self.c.request({"op": "inspect", "scope": "up", "key": "p"})
        self.assertEqual(ins.get("backend"), "redis", ins)
        self.assertGreater(ins.get("penalty_ms", 0), 50000, ins)
        # a penalize that extends it writes the string: counters kept
        r = self.c.request({"op": "penalize", "scope": "up", "key": "p",
                            "retry_after_ms": 120000})
        self.assertIs(r.get("ok"), True, r)
        deadline = time.monotonic() + 5
        while self.r.command("TYPE", key) != "string" and time.monotonic() < deadline:
            time.sleep(0.01)
        st = rule_state(self.r, key)
        self.assertEqual(st["a"], 1000, st)
        self.assertGreater(st["penalty_until"] - self.now(), 110000, st)
        self.assertGreater(self.r.command("PTTL", key), 110000)

    def test_reset_lifts_an_old_penalty(self):
        key = key_name("admitd", "up", "r", "r0")
        self.old_hash(key, 3000, self.now(), pen=self.now() + 60000, ttl=60000)
        r = self.c.request({"op": "reset", "scope": "up", "key": "r"})
        self.assertIs(r.get("ok"), True, r)
        st = rule_state(self.r, key)
        self.assertEqual((st["a"], st["penalty_until"]), (3000, 0), st)
        r = self.ask("up", "r")
        self.assertEqual((r.get("ok"), r.get("remaining")), (True, 6), r)

    def test_token_release_charges_an_old_hash(self):
        key = key_name("admitd", "tok", "k", "r0")
        r = self.c.request(acquire_req("tok", "k", timeout_ms=0))
        self.assertIs(r.get("ok"), True, r)
        # the rule as an older admitd left it: 500 tokens taken
        self.r.command("DEL", key)
        self.old_hash(key, 500000, self.now())
        r = self.c.request({"op": "release", "lease": r["lease"], "tokens": {"out": 700}})
        self.assertIs(r.get("held"), True, r)
        deadline = time.monotonic() + 5
        while self.r.command("TYPE", key) != "string" and time.monotonic() < deadline:
            time.sleep(0.01)
        # 500 + 700 tokens, less what drained since (100,000/h: 28 milli-units a ms)
        a = rule_state(self.r, key)["a"]
        self.assertLessEqual(a, 1200000)
        self.assertGreater(a, 1200000 - 28 * 5000)


class StringLayoutTest(unittest.TestCase):
    """What the string holds, through the daemon."""

    def test_one_string_with_its_ttl(self):
        rs = RedisServer().start()
        self.addCleanup(rs.cleanup)
        r = rs.connect()
        self.addCleanup(r.close)
        d = Admitd(CONF, redis_url=rs.url).start()
        self.addCleanup(d.cleanup)
        warm(d)
        with d.connect() as c:
            for _ in range(3):
                self.assertIs(c.request(acquire_req("up", "s", timeout_ms=0)).get("ok"), True)
        key = key_name("admitd", "up", "s", "r0")
        self.assertEqual(r.command("TYPE", key), "string")
        self.assertEqual(r.command("STRLEN", key), 24)  # a, b, t: no penalty
        self.assertEqual(rule_state(r, key)["a"], 3000)
        self.assertGreater(r.command("PTTL", key), 0)


if __name__ == "__main__":
    unittest.main()
