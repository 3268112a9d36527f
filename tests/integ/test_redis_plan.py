"""What a scope's compiled plan makes Redis do, read from Redis itself.

A one-rule scope's acquire makes fewer Redis calls than a plain bucket
script (TIME, GET, SET with PX: a rule's state is one string,
scripts/lib/state.lua) and touches no lease set, quota log or pacing hash; a
scope without min_delay keeps a key's penalty in its first counting rule's
string, and every path that reads or writes that string keeps it: another
daemon's acquire, a class that does not apply that rule, a token release
that rewrites the string, inspect and reset.
"""

import re
import time
import unittest

from .harness import acquire_req
from .redis_util import Pods, key_name, redis_field

PLAN_CONF = """
[scope one]
rule = requests token-bucket 1000/1s

[scope cls]
rule fast = requests token-bucket 1000/1s
rule slow = requests token-bucket 1000/1s
rule tok = tokens token-bucket 100000/1s
class a = fast tok
class b = slow
default_class = a

[scope tokfirst]
rule = tokens token-bucket 100000/1s
rule = requests token-bucket 1000/1s

[scope paced]
min_delay = 10ms
rule = requests token-bucket 1000/1s
"""

CALLS = ("time", "get", "set", "hmget", "hget", "hset", "pexpire", "zremrangebyscore", "zcard",
         "zadd", "zrange")


def cmdstats(redis):
    """calls per command, from INFO commandstats (commands scripts ran included)."""
    info = redis.command("INFO", "commandstats")
    if isinstance(info, bytes):
        info = info.decode()
    out = {}
    for m in re.finditer(r"cmdstat_(\w+):calls=(\d+)", info):
        out[m.group(1)] = int(m.group(2))
    return out


def delta(before, after):
    return {c: after.get(c, 0) - before.get(c, 0) for c in CALLS}


class PlanCallsTest(unittest.TestCase):

    def test_one_rule_acquire_makes_the_calls_of_a_plain_bucket_script(self):
        with Pods(PLAN_CONF, n=1) as cl:
            d = cl.daemons[0]
            with d.connect() as c:
                # a first call warms the connection up (script load, heartbeat)
                r = c.request(acquire_req("one", "warm", timeout_ms=1000))
                self.assertEqual(r.get("backend"), "redis", r)
                n = 20
                before = cmdstats(cl.redis)
                leases = []
                for i in range(n):
                    r = c.request(acquire_req("one", "k%d" % i, timeout_ms=1000))
                    self.assertIs(r.get("ok"), True, r)
                    self.assertEqual(r.get("backend"), "redis", r)
                    leases.append(r["lease"])
                after = cmdstats(cl.redis)
                # heartbeats may run meanwhile: they call TIME and nothing here
                got = delta(before, after)
                self.assertGreaterEqual(got["time"], n)
                self.assertLessEqual(got["time"], n + 3)
                # the rule's state is one string (scripts/lib/state.lua):
                # read with GET, written with its TTL in one SET
                self.assertEqual(got["get"], n, got)
                self.assertEqual(got["set"], n, got)
                for cmd in ("hmget", "hget", "hset", "pexpire"):
                    self.assertEqual(got[cmd], 0, (cmd, got))
                for cmd in ("zremrangebyscore", "zcard", "zadd", "zrange"):
                    self.assertEqual(got[cmd], 0, (cmd, got))
                # a release of a scope with nothing to settle makes no call at all
                before = cmdstats(cl.redis)
                for lease in leases:
                    r = c.request({"op": "release", "lease": lease})
                    self.assertIs(r.get("held"), True, r)
                got = delta(before, cmdstats(cl.redis))
                self.assertEqual(got["get"] + got["set"] + got["hmget"] + got["hset"] +
                                 got["zadd"], 0, got)
            # no pacing hash, lease set or quota log exists for the scope
            self.assertEqual(cl.redis.command("EXISTS", key_name("admitd", "one", "k0", "s"),
                                              key_name("admitd", "one", "k0", "l"),
                                              key_name("admitd", "one", "k0", "q")), 0)
            self.assertEqual(cl.redis.command("EXISTS", key_name("admitd", "one", "k0", "r0")), 1)

    def test_paced_scope_reads_its_pacing_hash(self):
        with Pods(PLAN_CONF, n=1) as cl:
            with cl.daemons[0].connect() as c:
                r = c.request(acquire_req("paced", "w", timeout_ms=1000))
                self.assertEqual(r.get("backend"), "redis", r)
                c.request({"op": "release", "lease": r["lease"]})
                # the release is answered before Redis has it: its GET and SET
                # of the lease's record must land before the count starts
                t = time.monotonic() + 10
                while time.monotonic() < t and [
                        cl.redis.command("GET", k)
                        for k in cl.redis.command("KEYS", "admitd:{paced:w}:k:*")] != ["D"]:
                    time.sleep(0.01)
                before = cmdstats(cl.redis)
                r = c.request(acquire_req("paced", "k", timeout_ms=1000))
                self.assertIs(r.get("ok"), True, r)
                got = delta(before, cmdstats(cl.redis))
                # the state hash (pacing and penalty) and the rule's string;
                # SET twice: the rule's state and the lease's settlement record
                self.assertEqual(got["hmget"], 1, got)
                self.assertEqual((got["get"], got["set"]), (1, 2), got)


class PenaltyHomeTest(unittest.TestCase):

    def penalize(self, d, scope, key, ms):
        with d.connect() as c:
            r = c.request({"op": "penalize", "scope": scope, "key": key, "retry_after_ms": ms})
            self.assertIs(r.get("ok"), True, r)

    def wait_field(self, redis, key, field):
        import time
        t = time.monotonic() + 3
        while time.monotonic() < t:
            if redis_field(redis, key, field) is not None:
                return
            time.sleep(0.01)
        self.fail("%s %s never set" % (key, field))

    def refused(self, d, scope, key, cls=None):
        req = acquire_req(scope, key, timeout_ms=0)
        if cls:
            req["class"] = cls
        with d.connect() as c:
            r = c.request(req)
        self.assertEqual(r.get("error"), "limited", r)
        self.assertEqual(r.get("rule"), "penalty", r)
        self.assertEqual(r.get("backend"), "redis", r)
        return r

    def test_penalty_in_a_rule_hash_holds_every_daemon_and_every_class(self):
        with Pods(PLAN_CONF, n=2) as cl:
            a, b = cl.daemons
            self.penalize(a, "one", "k", 5000)
            home = key_name("admitd", "one", "k", "r0")
            self.wait_field(cl.redis, home, "penalty_until")
            self.assertEqual(cl.redis.command("EXISTS", key_name("admitd", "one", "k", "s")), 0)
            r = self.refused(b, "one", "k")
            self.assertGreater(r["retry_after_ms"], 4000)
            # scope cls: the penalty lives in rule fast's hash; class b does
            # not apply that rule and is held all the same
            self.penalize(a, "cls", "k", 5000)
            self.wait_field(cl.redis, key_name("admitd", "cls", "k", "r0"), "penalty_until")
            self.refused(b, "cls", "k", cls="a")
            self.refused(b, "cls", "k", cls="b")

    def test_a_token_release_does_not_cut_the_penalty_short(self):
        # tokfirst's penalty lives in its token rule's hash, which a release
        # that reports tokens rewrites, with that rule's own short TTL
        with Pods(PLAN_CONF, n=1) as cl:
            d = cl.daemons[0]
            with d.connect() as c:
                r = c.request(acquire_req("tokfirst", "t", timeout_ms=1000))
                self.assertIs(r.get("ok"), True, r)
                self.penalize(d, "tokfirst", "t", 60000)
                home = key_name("admitd", "tokfirst", "t", "r0")
                self.wait_field(cl.redis, home, "penalty_until")
                r = c.request({"op": "release", "lease": r["lease"], "tokens": {"out": 500}})
                self.assertIs(r.get("held"), True, r)
            # the release is answered before Redis has it: wait for the charge
            import time
            t = time.monotonic() + 3
            while time.monotonic() < t and redis_field(cl.redis, home, "a") is None:
                time.sleep(0.01)
            self.assertGreater(int(redis_field(cl.redis, home, "a")), 0)
            self.assertGreater(cl.redis.command("PTTL", home), 50000)
            self.refused(d, "tokfirst", "t")

    def test_inspect_and_reset_see_the_penalty_in_its_rule_hash(self):
        with Pods(PLAN_CONF, n=1) as cl:
            d = cl.daemons[0]
            self.penalize(d, "one", "i", 5000)
            self.wait_field(cl.redis, key_name("admitd", "one", "i", "r0"), "penalty_until")
            with d.connect() as c:
                r = c.request({"op": "inspect", "scope": "one", "key": "i"})
                self.assertIs(r.get("ok"), True, r)
                self.assertEqual(r.get("backend"), "redis", r)
                self.assertGreater(r.get("penalty_ms", 0), 4000, r)
                r = c.request({"op": "reset", "scope": "one", "key": "i"})
                self.assertIs(r.get("ok"), True, r)
                r = c.request(acquire_req("one", "i", timeout_ms=0))
                self.assertIs(r.get("ok"), True, r)
            self.assertIsNone(redis_field(cl.redis, key_name("admitd", "one", "i", "r0"),
                                          "penalty_until"))


if __name__ == "__main__":
    unittest.main()
