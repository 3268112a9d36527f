"""test_lua_plain.py - acquire.lua's plain path against its general path.

A one-rule acquire with nothing else to check (no pacing, quota, lease set,
settlement record, adaptive amount or override) is sent as a 'p' group and
decided by acquire_plain, which does what a plain bucket script does (a
bucket's arithmetic in numbers, strat_bucket_try); every other acquire takes
the general path. Both must decide alike. Here both run in one call of the
real script in a real redis-server (so at one Redis TIME), on two copies of
the same random state: the plain acquire, and the same one in the general
form with the lease set turned on (which changes nothing else for a requests
rule). Their decisions, what the replies say is left, and the rule states
they leave (scripts/lib/state.lua: one string a rule) must be the same, for
every strategy, refusals, penalties, floors and costs included, from either
layout: the string, or the hash an older admitd wrote (which a booking
replaces with the string).
"""

import os
import random
import struct
import unittest

from .harness import REPO, RedisServer
from .redis_util import rule_pack, rule_state

KINDS = ("token-bucket", "leaky-bucket", "fixed-window", "sliding-window", "session-window")


def script():
    """acquire.lua with the libraries prepended, as the daemon embeds it."""
    paths = [os.path.join(REPO, "scripts", "lib", f)
             for f in sorted(os.listdir(os.path.join(REPO, "scripts", "lib")))]
    paths.append(os.path.join(REPO, "scripts", "acquire.lua"))
    text = ""
    for p in paths:
        with open(p) as f:
            text += f.read() + "\n"
    return text


# A rule's state as stored: its string, or when an older admitd's hash is
# still there, that hash's a, b, t and penalty_until.
READ_EITHER = """local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then return redis.call('HMGET', KEYS[1], 'a', 'b', 't', 'penalty_until') end
return v"""


def unpack_state(v):
    """READ_EITHER's reply as a dict (empty: no key); an older hash's says
    so (field 'hash')."""
    if v is None:
        return {}
    if isinstance(v, list):
        return {"hash": True, "a": int(v[0] or 0), "b": int(v[1] or 0), "t": int(v[2] or 0),
                "penalty_until": int(v[3] or 0)}
    v = v.encode() if isinstance(v, str) else v
    f = struct.unpack("<%dq" % (len(v) // 8), v)
    return {"a": f[0], "b": f[1], "t": f[2], "penalty_until": f[3] if len(f) > 3 else 0}


def plain_group(kind, amount, window, burst, floor, costs, code=0, not_after=0):
    return ["p", kind, str(amount), str(window), str(burst), str(floor), str(code),
            str(not_after), str(len(costs))] + [str(c) for c in costs]


def acquire_argv(lease, cost, floor, kind, amount, window, burst, track):
    return [lease, "1", str(cost), str(floor), "0", "0", "0", "0", "0", "60000", "25",
            "1" if track else "0", "1", "r", kind, str(amount), str(window), str(burst),
            "0", "0", "1", "0"]


class ScriptCase(unittest.TestCase):
    """A redis-server of the class's own with acquire.lua loaded (cls.sha)."""

    @classmethod
    def setUpClass(cls):
        cls.redis = RedisServer().start()
        cls.conn = cls.redis.connect(timeout=30.0)
        cls.sha = cls.conn.command("SCRIPT", "LOAD", script())

    @classmethod
    def tearDownClass(cls):
        cls.conn.close()
        cls.redis.cleanup()


class PlainPathTest(ScriptCase):

    def keys(self, tag):
        return ["t:{%s}:s" % tag, "t:{%s}:q" % tag, "t:{%s}:l" % tag, "t:{%s}:r0" % tag]

    def test_same_decisions(self):
        rnd = random.Random(17)
        now = int(self.conn.command("TIME")[0]) * 1000
        admitted = refused = 0
        for n in range(400):
            kind = KINDS[n % len(KINDS)]
            amount = rnd.choice([1, 2, 5, 10, 100, 1000000])
            window = rnd.choice([1, 10, 1000, 60000, 3600000])
            burst = rnd.choice([0, 0, 1, amount, 3 * amount]) if "bucket" in kind else 0
            cost = rnd.choice([0, 1, 1, 2, amount, amount + 1])
            floor = rnd.choice([0, 0, 1])
            state = {"a": rnd.randrange(0, 3 * amount * 1000 + 2), "b": rnd.randrange(0, 5),
                     "t": now - rnd.randrange(-5, 2 * window)}
            pen = rnd.choice([0, 0, 0, now + rnd.randrange(1, 5000), now - 10])
            ka, kb = self.keys("p%d" % n), self.keys("g%d" % n)
            for k in (ka[3], kb[3]):
                self.conn.command("DEL", k)
                if n % 4 == 3:  # the layout of an older admitd: a hash
                    self.conn.command("HSET", k, "a", state["a"], "b", state["b"],
                                      "t", state["t"], "penalty_until", pen)
                else:
                    self.conn.command("SET", k, rule_pack(state["a"], state["b"], state["t"],
                                                          pen))
            general = acquire_argv("b%031d" % n, cost, floor, kind, amount, window, burst, True)
            argv = ["=", "2"] + plain_group(kind, amount, window, burst, floor, [cost]) + \
                ["g", "4", str(len(general))] + general
            # One transaction: a window of 1 ms leaves hashes that live for 2 ms,
            # which must still be there to be compared.
            self.conn.command("MULTI")
            self.conn.command("EVALSHA", self.sha, 5, ka[3], *kb, *argv)
            self.conn.command("EVAL", READ_EITHER, 1, ka[3])
            self.conn.command("EVAL", READ_EITHER, 1, kb[3])
            r, ha, hb = self.conn.command("EXEC")
            self.assertEqual(len(r), 8)
            rp, rg = r[1:7], r[7]
            if rp[0] == 1:
                admitted += 1
            else:
                refused += 1
            where = "case %d: %s %d/%dms burst %d cost %d floor %d state %r pen %d" % (
                n, kind, amount, window, burst, cost, floor, state, pen)
            self.assertEqual(r[0], rg[3], where)  # one Redis time
            self.assertEqual(rp, rg[0:3] + rg[10:13], where)
            if n % 4 == 3 and rp[0] == 1:  # a booking replaced the older layout
                self.assertNotIsInstance(ha, list, where)
            da, db = unpack_state(ha), unpack_state(hb)
            if window == 1 and (not da or not db):
                # A TTL of 1 ms: Redis 7.0's PEXPIRE reads the clock again to
                # see whether the key is already expired, and deletes it at
                # once when a millisecond ticked between (a preempted server,
                # as under valgrind), which leaves it as good as fresh. A
                # hash that remains must hold what both replies said.
                self.assertEqual(rp[0], 1, where)  # a refusal writes no TTL
                if da or db:
                    self.assertEqual([(da or db).get(f) for f in "abt"], rp[3:6], where)
                continue
            self.assertEqual(da, db, where)
        # both outcomes were exercised
        self.assertGreater(admitted, 50)
        self.assertGreater(refused, 50)

    def test_groups_in_one_call(self):
        # Two 'p' groups around a 'g' one: each acquire is decided on its own
        # key, in order, and the reply follows the groups.
        k = [self.keys("grp%d" % i)[3] for i in range(4)]
        g = self.keys("grpg")
        general = acquire_argv("d" * 32, 1, 0, "fixed-window", 1, 60000, 0, True)
        argv = ["=", "3"] + plain_group("token-bucket", 2, 60000, 0, 0, [1, 2, 3]) + \
            ["g", "4", str(len(general))] + general + \
            plain_group("fixed-window", 1, 60000, 0, 0, [1], code=7)
        r = self.conn.command("EVALSHA", self.sha, 8, k[0], k[1], k[2], *g, k[3], *argv)
        self.assertEqual(len(r), 1 + 6 * 3 + 1 + 6)
        # cost 1 and 2 fit a 2/min bucket on fresh keys, 3 never does (-1)
        self.assertEqual([r[1], r[7], r[13]], [1, 1, 0])
        self.assertEqual(r[14:16], [-1, 0])
        self.assertEqual(r[19][0], 1)  # the general one
        self.assertEqual(r[20:23], [1, 0, -1])  # its own code, admitted
        self.assertEqual(rule_state(self.conn, k[1])["a"], 2000)
        self.assertEqual(self.conn.command("EXISTS", k[2]), 0)  # refused: nothing booked
        # a second time, the fixed window refuses with the code it was given
        argv = ["=", "1"] + plain_group("fixed-window", 1, 60000, 0, 0, [1], code=7)
        r = self.conn.command("EVALSHA", self.sha, 1, k[3], *argv)
        self.assertEqual(r[1:4][0::2], [0, 7])
        self.assertGreater(r[2], 0)

    def test_stale_books_nothing(self):
        k = self.keys("stale")[3]
        argv = ["=", "1"] + plain_group("token-bucket", 10, 1000, 0, 0, [1], not_after=1)
        r = self.conn.command("EVALSHA", self.sha, 1, k, *argv)
        self.assertEqual(r[1:4], [0, 0, -6])
        self.assertEqual(self.conn.command("EXISTS", k), 0)


if __name__ == "__main__":
    unittest.main()
