"""test_class_floor.py - a class's floor as a part of each rule's capacity.

`class NAME = RULES... floor=P%` leaves the last P% of each of its rules to
other classes, each rule of its own capacity (rounded down): with floor=10%
a 20-request rule keeps 2 back and a 6000-token rule 600. `floor=N` keeps N
units of every rule, as before. Checked with the real daemon in local mode
and through a real redis-server (the general script, and a one-rule class
whose plain acquire gets its floor from the daemon), and `admitd -t` on bad
floors (file:line: message, exit 2).
"""

import os
import unittest

from .harness import Admitd, RedisServer, acquire_req, run_admitd

CONF = """
[scope gw]
rule rpm = requests fixed-window 20/1h
rule tpm = tokens.output fixed-window 6000/1h
rule solo = requests token-bucket 50/1h
class main = rpm tpm
class batch = rpm tpm floor=10%
class lone = solo floor=10%
class units = solo floor=3
default_class = main
"""

RPM = "requests fixed-window 20/1h"
TPM = "tokens.output fixed-window 6000/1h"


class FloorCase:
    """The checks, on one daemon: in local mode, or with redis on a real
    redis-server (self.c: a connection to it)."""

    redis = False

    def setUp(self):
        self.rs = RedisServer().start() if self.redis else None
        self.d = Admitd(CONF, redis_url=self.rs.url if self.rs else None).start()
        self.c = self.d.connect()
        r = self.c.request(acquire_req("gw", "warm", timeout_ms=5000, detach=True))
        self.assertEqual(r.get("backend"), "redis" if self.redis else "local", r)

    def tearDown(self):
        self.c.close()
        self.d.cleanup(failed=False)
        if self.rs:
            self.rs.cleanup(failed=False)

    def acq(self, key, cls, reserve=None):
        kw = {"class": cls, "timeout_ms": 0, "detach": True}
        if reserve is not None:
            kw["reserve"] = {"output": reserve}
        return self.c.request(acquire_req("gw", key, **kw))

    def admitted(self, key, cls, n, reserve=None):
        """How many of n tries are admitted; the first refusal, if any."""
        k, ref = 0, None
        for _ in range(n):
            r = self.acq(key, cls, reserve)
            if r["ok"]:
                k += 1
            elif ref is None:
                ref = r
        return k, ref

    def test_request_rule_keeps_its_ten_percent(self):
        # 10% of 20 is 2: batch takes 18, main the last 2
        k, ref = self.admitted("r", "batch", 20, reserve=1)
        self.assertEqual(k, 18, ref)
        self.assertEqual((ref["error"], ref["rule"]), ("limited", RPM), ref)
        k, ref = self.admitted("r", "main", 3, reserve=1)
        self.assertEqual(k, 2, ref)
        self.assertEqual(ref["rule"], RPM, ref)

    def test_token_rule_keeps_its_ten_percent(self):
        # 10% of 6000 is 600: batch may reserve 5400 in all, main the rest
        r = self.acq("t", "batch", 5401)
        self.assertEqual((r["ok"], r["error"], r["rule"], r["limit"]),
                         (False, "exceeds_limit", TPM, 5400), r)
        self.assertTrue(self.acq("t", "batch", 5400)["ok"])
        r = self.acq("t", "batch", 1)
        self.assertEqual((r["ok"], r["error"], r["rule"]), (False, "limited", TPM), r)
        self.assertTrue(self.acq("t", "main", 600)["ok"])
        r = self.acq("t", "main", 1)
        self.assertEqual((r["ok"], r["rule"]), (False, TPM), r)

    def test_inspect_gives_each_rule_its_capacity(self):
        ins = self.c.request({"op": "inspect", "scope": "gw", "key": "i", "class": "batch"})
        self.assertEqual([(x["rule"], x["capacity"], x["remaining"]) for x in ins["rules"]],
                         [(RPM, 18, 18), (TPM, 5400, 5400)], ins)

    def test_one_rule_class(self):
        # 10% of 50 is 5 (the plain acquire in Redis mode); floor=3 keeps 3
        k, ref = self.admitted("p", "lone", 50)
        self.assertEqual(k, 45, ref)
        self.assertEqual(ref["rule"], "requests token-bucket 50/1h", ref)
        self.assertEqual(self.admitted("p", "units", 5)[0], 2)
        self.assertEqual(self.admitted("q", "units", 50)[0], 47)


class LocalFloorTest(FloorCase, unittest.TestCase):
    pass


class RedisFloorTest(FloorCase, unittest.TestCase):
    redis = True

    def acq(self, key, cls, reserve=None):
        r = FloorCase.acq(self, key, cls, reserve)
        if r["ok"] or r["error"] in ("limited", "exceeds_limit"):
            self.assertEqual(r.get("backend"), "redis", r)
        return r


class FloorConfTest(unittest.TestCase):

    def check(self, floor):
        d = Admitd("[scope s]\nrule r = requests fixed-window 20/1m\nclass a = r %s\n" % floor)
        try:
            with open(d.conf_path) as f:
                line = [l.startswith("class a =") for l in f.read().splitlines()].index(True)
            return run_admitd(["-t", "-c", d.conf_path]), "%s:%d" % (d.conf_path, line + 1)
        finally:
            d.tmp.cleanup()

    def test_bad_fractions(self):
        for floor, msg in (
                ("floor=150%", 'class a: floor "150%": must be at most 100% (want floor=P%, '
                               '0 <= P < 100)'),
                ("floor=%", 'class a: floor "%": empty value (want floor=P%, 0 <= P < 100)'),
                ("floor=1.23456%", 'class a: floor "1.23456%": at most 4 decimals (want '
                                   'floor=P%, 0 <= P < 100)'),
                ("floor=-5%", 'class a: floor "-5%": not a percentage (want floor=P%, '
                              '0 <= P < 100)'),
                ("floor=1.%", 'class a: floor "1.%": not a percentage (want floor=P%, '
                              '0 <= P < 100)'),
                ("floor=100%", "class a: floor=100% leaves nothing of any rule (want below "
                               "100%)")):
            with self.subTest(floor):
                r, where = self.check(floor)
                self.assertEqual(r.returncode, 2, r)
                self.assertIn("%s: %s\n" % (where, msg), r.stderr)

    def test_good_fractions(self):
        for floor in ("floor=10%", "floor=0%", "floor=99.9999%", "floor=12.5%", "floor=3"):
            with self.subTest(floor):
                r, _ = self.check(floor)
                self.assertEqual((r.returncode, r.stderr), (0, ""), r)


if __name__ == "__main__":
    unittest.main()
