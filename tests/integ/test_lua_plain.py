"""test_lua_plain.py - acquire.lua's plain path against its general path.

A one-rule acquire with nothing else to check (no pacing, quota, lease set,
settlement record, adaptive amount or override) takes acquire_plain, which
does what a plain bucket script does; every other acquire takes the general
path. Both must decide alike. Here both run in one batch call of the real
script in a real redis-server (so at one Redis TIME), on two copies of the
same random state: the plain-shaped acquire, and the same one with the lease
set turned on (which sends it down the general path and changes nothing else
for a requests rule). Their replies and the rule hashes they leave must be
the same, for every strategy, refusals, penalties, floors and costs included.
"""

import os
import random
import unittest

from .harness import REPO, RedisServer

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


def acquire_argv(lease, cost, floor, kind, amount, window, burst, track):
    return [lease, "1", str(cost), str(floor), "0", "0", "0", "0", "0", "60000", "25",
            "1" if track else "0", "1", "r", kind, str(amount), str(window), str(burst),
            "0", "0", "1", "0"]


class PlainPathTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.redis = RedisServer().start()
        cls.conn = cls.redis.connect(timeout=30.0)
        cls.sha = cls.conn.command("SCRIPT", "LOAD", script())

    @classmethod
    def tearDownClass(cls):
        cls.conn.close()
        cls.redis.cleanup()

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
                self.conn.command("HSET", k, "a", state["a"], "b", state["b"], "t", state["t"],
                                  "penalty_until", pen)
            plain = acquire_argv("a%031d" % n, cost, floor, kind, amount, window, burst, False)
            general = acquire_argv("b%031d" % n, cost, floor, kind, amount, window, burst, True)
            argv = ["*", "2", "4", str(len(plain)), "4", str(len(general))] + plain + general
            rp, rg = self.conn.command("EVALSHA", self.sha, 8, *(ka + kb), *argv)
            if rp[0] == 1:
                admitted += 1
                rg[7] = 0  # the general path counts the lease it booked in its set
            else:
                refused += 1
            where = "case %d: %s %d/%dms burst %d cost %d floor %d state %r pen %d" % (
                n, kind, amount, window, burst, cost, floor, state, pen)
            self.assertEqual(rp, rg, where)
            ha = self.conn.command("HGETALL", ka[3])
            hb = self.conn.command("HGETALL", kb[3])
            self.assertEqual(dict(zip(ha[::2], ha[1::2])), dict(zip(hb[::2], hb[1::2])), where)
        # both outcomes were exercised
        self.assertGreater(admitted, 50)
        self.assertGreater(refused, 50)

    def test_plain_shape_takes_the_plain_path(self):
        # The plain path reads only the rule hash: a state hash that the
        # general path would read (pacing) is left alone, and no lease set.
        k = self.keys("shape")
        argv = acquire_argv("c" * 32, 1, 0, "token-bucket", 10, 1000, 0, False)
        r = self.conn.command("EVALSHA", self.sha, 4, *k, *argv)
        self.assertEqual(r[0], 1)
        self.assertEqual(self.conn.command("EXISTS", k[2]), 0)
        self.assertEqual(len(r), 13)


if __name__ == "__main__":
    unittest.main()
