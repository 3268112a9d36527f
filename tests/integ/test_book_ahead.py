"""test_book_ahead.py - units a hot key books ahead in Redis, handed out here.

A key this daemon takes fast, under a plan of one token or leaky bucket and
nothing else, has the units it will take within redis_book_ahead booked by
the call that admits it, and hands them out with no call; what it did not
hand out in time goes back to Redis. Checked in two layers, with a real
redis-server:

- acquire.lua's 'a' group: with nothing ahead it decides as the 'p' group
  does (same replies, same hashes, random states of both bucket kinds); it
  books at most `extra` more and never past the bucket's room above the
  class's floor; `give` lowers the level (never below empty) whether or not
  the acquire is admitted; a penalty books nothing ahead.
- the daemon: a burst on one key costs a few calls; two daemons hammering
  one key together never admit beyond the bucket; what one daemon holds
  goes back once the horizon passes (the bucket's level in Redis says
  exactly what was taken), and so does what a stopping daemon held; a
  penalty, a reset and a reload end what is held; a window rule, a bucket too slow for the horizon, or
  redis_book_ahead = 0 book nothing ahead; a hot key's waiters are served
  from what its head booked; units held when Redis goes away are counted
  as dropped, and the counters add up: booked = taken + given back +
  dropped.
"""

import random
import struct
import threading
import time
import unittest

from .harness import VALGRIND, Admitd, RedisServer, _wait_until, acquire_req
from .redis_util import rule_pack, rule_state
from .test_lua_plain import ScriptCase, plain_group
from .test_reload import ReloadCase

KINDS = ("token-bucket", "leaky-bucket")


def ahead_group(kind, amount, window, burst, floor, acquires, code=0, not_after=0):
    """An 'a' group: acquires is a list of (cost, extra, give)."""
    g = ["a", kind, str(amount), str(window), str(burst), str(floor), str(code),
         str(not_after), str(len(acquires))]
    for cost, extra, give in acquires:
        g += [str(cost), str(extra), str(give)]
    return g


class AheadScriptTest(ScriptCase):
    """acquire.lua's 'a' group, called directly."""

    def now(self):
        t = self.conn.command("TIME")
        return int(t[0]) * 1000 + int(t[1]) // 1000

    def hash(self, key):
        """The rule's state under key (scripts/lib/state.lua), ints."""
        return rule_state(self.conn, key)

    def put(self, key, a, t, pen=0):
        self.conn.command("SET", key, rule_pack(a, 0, t, pen))

    def test_nothing_ahead_decides_as_plain(self):
        rnd = random.Random(23)
        now = self.now()
        seen = set()
        for n in range(300):
            kind = KINDS[n % 2]
            amount = rnd.choice([1, 2, 10, 1000, 1000000])
            window = rnd.choice([10, 1000, 60000])
            burst = rnd.choice([0, 1, amount, 3 * amount])
            cost = rnd.choice([0, 1, 1, 2, amount + 1])
            floor = rnd.choice([0, 0, 1])
            a = rnd.randrange(0, 3 * amount * 1000 + 2)
            t = now - rnd.randrange(-5, 2 * window)
            pen = rnd.choice([0, 0, now + 5000, now - 10])
            kp, ka = "t:{p%d}:r0" % n, "t:{a%d}:r0" % n
            for k in (kp, ka):
                self.conn.command("SET", k, rule_pack(a, 0, t, pen))
            argv = ["=", "2"] + plain_group(kind, amount, window, burst, floor, [cost]) + \
                ahead_group(kind, amount, window, burst, floor, [(cost, 0, 0)])
            self.conn.command("MULTI")
            self.conn.command("EVALSHA", self.sha, 2, kp, ka, *argv)
            self.conn.command("GET", kp)
            self.conn.command("GET", ka)
            r, hp, ha = self.conn.command("EXEC")
            where = "case %d: %s %d/%d burst %d cost %d floor %d a %d pen %d" % (
                n, kind, amount, window, burst, cost, floor, a, pen)
            self.assertEqual(len(r), 1 + 6 + 7, where)
            self.assertEqual(r[1:7], r[7:13], where)
            self.assertEqual(r[13], 0, where)
            self.assertEqual(hp, ha, where)
            seen.add(r[1])
        self.assertEqual(seen, {0, 1})  # both outcomes exercised

    def test_extra_within_room(self):
        # A bucket that refills 1 unit an hour: nothing drains during the
        # test, so the level is exact: units * 1000.
        rnd = random.Random(5)
        for n in range(200):
            kind = KINDS[n % 2]
            burst = rnd.choice([10, 50, 100])
            floor = rnd.choice([0, 0, 3])
            level = rnd.randrange(0, burst + 1)
            cost = rnd.choice([0, 1, 2, 5])
            extra = rnd.choice([0, 1, 7, 40, 200])
            key = "x:{e%d}:r0" % n
            self.put(key, level * 1000, self.now())
            r = self.conn.command("EVALSHA", self.sha, 1, key, "=", "1",
                                  *ahead_group(kind, 1, 3600000, burst, floor,
                                               [(cost, extra, 0)]))
            where = "case %d: %s burst %d floor %d level %d cost %d extra %d" % (
                n, kind, burst, floor, level, cost, extra)
            room = burst - floor - level
            fits = level + cost <= burst - floor and (cost > 0 or level < burst - floor)
            self.assertEqual(r[1], 1 if fits else 0, where)
            got = r[7]
            if fits:
                self.assertEqual(got, max(0, min(extra, room - cost)), where)
                self.assertEqual(int(self.hash(key)["a"]), (level + cost + got) * 1000, where)
                self.assertEqual(r[4], (level + cost + got) * 1000, where)
            else:
                self.assertEqual(got, 0, where)
                self.assertEqual(int(self.hash(key)["a"]), level * 1000, where)

    def test_give_back_lowers_the_level_whatever_is_decided(self):
        key = "g:{1}:r0"
        # admitted: 40 held come back, 1 is taken
        self.put(key, 60000, self.now())
        r = self.conn.command("EVALSHA", self.sha, 1, key, "=", "1",
                              *ahead_group("token-bucket", 1, 3600000, 100, 0, [(1, 0, 40)]))
        self.assertEqual((r[1], r[7]), (1, 0))
        self.assertEqual(self.hash(key)["a"], 21000)
        # refused by a penalty: what comes back still does, nothing is booked ahead
        pen = self.now() + 60000
        self.put(key, 21000, self.hash(key)["t"], pen)
        r = self.conn.command("EVALSHA", self.sha, 1, key, "=", "1",
                              *ahead_group("token-bucket", 1, 3600000, 100, 0, [(1, 50, 5)]))
        self.assertEqual((r[1], r[3], r[7]), (0, -2, 0))
        self.assertEqual(self.hash(key)["a"], 16000)
        self.assertEqual(self.hash(key)["penalty_until"], pen)  # a give-back keeps it
        # refused by the bucket (full): the level drops by what comes back, never below empty
        self.put(key, 100000, self.hash(key)["t"])
        r = self.conn.command("EVALSHA", self.sha, 1, key, "=", "1",
                              *ahead_group("token-bucket", 1, 3600000, 100, 0, [(3, 0, 2)]))
        self.assertEqual(r[1], 0)
        self.assertEqual(self.hash(key)["a"], 98000)
        r = self.conn.command("EVALSHA", self.sha, 1, key, "=", "1",
                              *ahead_group("token-bucket", 1, 3600000, 100, 0, [(0, 0, 500)]))
        self.assertEqual(r[1], 1)
        self.assertEqual(self.hash(key)["a"], 0)

    def test_groups_mix_in_one_call(self):
        # a 'p' and an 'a' group in one call: the reply has 6 and 7 numbers
        ka, kb = "m:{a}:r0", "m:{b}:r0"
        r = self.conn.command("EVALSHA", self.sha, 3, ka, kb, "m:{c}:r0", "=", "2",
                              *plain_group("token-bucket", 1, 3600000, 10, 0, [1]),
                              *ahead_group("token-bucket", 1, 3600000, 10, 0,
                                           [(1, 4, 0), (2, 100, 0)]))
        self.assertEqual(len(r), 1 + 6 + 7 + 7)
        self.assertEqual((r[1], r[7]), (1, 1))
        self.assertEqual((r[7], r[13]), (1, 4))
        self.assertEqual((r[14], r[20]), (1, 8))  # 2 + 8: the bucket's room of 10
        self.assertEqual(self.hash(kb)["a"], 5000)


CONF = """
[admitd]
redis_book_ahead = %s

[scope fast]
rule = requests token-bucket 1000000/1s

[scope tight]
rule = requests token-bucket 50/1s burst=20

[scope slowdrain]
rule = requests token-bucket 20/1s burst=100000

[scope window]
rule = requests fixed-window 1000000/1s

[scope slow]
rule = requests token-bucket 2/1s burst=5
"""


def status(c):
    r = c.request({"op": "status"})
    assert r["ok"], r
    return r


def counters_add_up(test, st):
    a = st["redis"]["ahead"]
    test.assertEqual(a["booked"], a["taken"] + a["given_back"] + a["dropped"], a)


class AheadDaemonTest(unittest.TestCase):
    horizon = "200ms"

    def setUp(self):
        self.rs = RedisServer().start()
        self.addCleanup(self.rs.cleanup)
        self.d = self.daemon()

    def daemon(self, horizon=None):
        conf = CONF % (horizon or self.horizon)
        if VALGRIND:
            # A stopping daemon gives back what it holds within redis_timeout
            # (250 ms): a loaded valgrind run once stopped before the reply,
            # and the unit stayed booked (never more than the bucket).
            conf = conf.replace("[admitd]\n", "[admitd]\nredis_timeout = 5s\n", 1)
        d = Admitd(conf, redis_url=self.rs.url).start()
        self.addCleanup(d.cleanup)
        return d

    def conn(self, d=None):
        c = (d or self.d).connect()
        self.addCleanup(c.close)
        return c

    def burst(self, c, scope, n, key="k"):
        ok = 0
        for _ in range(n):
            r = c.request(acquire_req(scope, key, timeout_ms=0, lease=False))
            ok += 1 if r["ok"] else 0
        return ok

    def settled(self, c):
        """Status once nothing is held ahead any more (the horizon passed)."""
        def cond():
            a = status(c)["redis"]["ahead"]
            return a["booked"] == a["taken"] + a["given_back"] + a["dropped"]
        _wait_until(cond, 10.0, "the units held ahead to go back")
        return status(c)

    def test_burst_costs_few_calls(self):
        c = self.conn()
        self.assertEqual(self.burst(c, "fast", 400), 400)
        st = status(c)
        calls = st["redis"]["calls"]["acquire"]
        taken = st["scopes"]["fast"]["admitted_ahead"]
        self.assertLessEqual(calls, 40, st["redis"])
        self.assertEqual(taken + calls, 400)
        self.assertEqual(st["redis"]["ahead"]["taken"], taken)
        counters_add_up(self, self.settled(c))

    def test_nothing_ahead_where_it_does_not_apply(self):
        c = self.conn()
        # a window (a unit booked early would count in the wrong window), and a
        # bucket that refills less than one unit within the horizon
        self.assertEqual(self.burst(c, "window", 60), 60)
        self.assertEqual(self.burst(c, "slow", 5), 5)
        st = status(c)
        self.assertEqual(st["scopes"]["window"]["admitted_ahead"], 0)
        self.assertEqual(st["scopes"]["slow"]["admitted_ahead"], 0)
        self.assertEqual(st["redis"]["calls"]["acquire"], 65)
        self.assertEqual(st["redis"]["ahead"]["booked"], 0)
        # and redis_book_ahead = 0 turns it off
        off = self.conn(self.daemon("0"))
        self.assertEqual(self.burst(off, "fast", 50), 50)
        st = status(off)
        self.assertEqual((st["scopes"]["fast"]["admitted_ahead"], st["redis"]["calls"]["acquire"]),
                         (0, 50))

    def test_two_daemons_never_over_the_bucket(self):
        # 50/s, burst 20, horizon 200ms: each call may book 10 ahead.
        other = self.daemon()
        admitted = [0] * 4
        stop = time.monotonic() + (4.0 if VALGRIND else 1.5)
        t_redis0 = self.rs.command("TIME")

        def hammer(i, d):
            c = d.connect()
            try:
                while time.monotonic() < stop:
                    r = c.request(acquire_req("tight", "k", timeout_ms=0, lease=False))
                    admitted[i] += 1 if r["ok"] else 0
            finally:
                c.close()

        threads = [threading.Thread(target=hammer, args=(i, d))
                   for i, d in enumerate((self.d, self.d, other, other))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        t_redis1 = self.rs.command("TIME")
        elapsed_ms = ((int(t_redis1[0]) - int(t_redis0[0])) * 1000 +
                      (int(t_redis1[1]) - int(t_redis0[1])) // 1000)
        total = sum(admitted)
        # the bucket: its burst, and what it refilled while they ran
        self.assertLessEqual(total, 20 + 50 * elapsed_ms // 1000 + 1, (admitted, elapsed_ms))
        self.assertGreater(total, 20, admitted)
        sa, sb = status(self.conn()), status(self.conn(other))
        self.assertGreater(sa["scopes"]["tight"]["refused"] + sb["scopes"]["tight"]["refused"], 0)
        self.assertGreater(sa["scopes"]["tight"]["admitted_ahead"] +
                           sb["scopes"]["tight"]["admitted_ahead"], 0)

    def test_what_is_not_handed_out_goes_back(self):
        # 20/s drains 20 milli-units a ms; burst 100000 never fills, and 200
        # units last 10 s, so the level in Redis is linear in time: level(now)
        # = 1000 * taken - 20 * (now - first booking). What this daemon held
        # and did not hand out (up to 4 units a call) must not be in it once
        # the horizon has passed.
        c = self.conn()
        t0 = self.slowdrain_burst(c)
        st = self.settled(c)
        self.assertGreater(st["redis"]["ahead"]["booked"], 0)
        self.assertGreater(st["redis"]["ahead"]["given_back"], 0)
        self.assertEqual(st["redis"]["ahead"]["dropped"], 0)
        self.assert_taken(t0, 200)

    def test_a_stopping_daemon_gives_back(self):
        # a horizon of 1 s: what it holds when SIGTERM comes is still held
        d = self.daemon("1s")
        c = d.connect()
        t0 = self.slowdrain_burst(c)
        a = status(c)["redis"]["ahead"]
        self.assertGreater(a["booked"] - a["taken"] - a["given_back"], 0, a)
        c.close()
        d.terminate()
        self.assert_taken(t0, 200)

    def slowdrain_burst(self, c):
        """200 acquires on slowdrain's key; the first booking's Redis time."""
        self.assertEqual(self.burst(c, "slowdrain", 1), 1)
        # it booked nothing ahead (no record yet): its time is the hash's
        t0 = rule_state(self.rs, "admitd:{slowdrain:k}:r0")["t"]
        self.assertEqual(self.burst(c, "slowdrain", 199), 199)
        return t0

    def assert_taken(self, t0, units):
        """The slowdrain bucket holds exactly `units` taken since t0, drained."""
        rc = self.rs.connect()
        self.addCleanup(rc.close)
        rc.command("MULTI")
        rc.command("GET", "admitd:{slowdrain:k}:r0")
        rc.command("TIME")
        st, now = rc.command("EXEC")
        st = st.encode() if isinstance(st, str) else st
        a, t = struct.unpack("<3q", st[:24])[0::2]
        now = int(now[0]) * 1000 + int(now[1]) // 1000
        level = int(a) - 20 * (now - int(t))
        self.assertGreater(level, 0)  # it never emptied: linear all along
        # 200 units taken, drained since the first; a unit held ahead and not
        # given back would add 1000 (the pending fraction: under 1 per call)
        self.assertAlmostEqual(level + 20 * (now - t0), units * 1000, delta=300)

    def test_penalty_and_reset_end_what_is_held(self):
        c = self.conn()
        self.assertEqual(self.burst(c, "fast", 50), 50)
        before = status(c)["redis"]["ahead"]
        self.assertGreater(before["booked"] - before["taken"] - before["given_back"], 0, before)
        self.assertTrue(c.request({"op": "penalize", "scope": "fast", "key": "k",
                                   "retry_after_ms": 60000})["ok"])
        r = c.request(acquire_req("fast", "k", timeout_ms=0, lease=False))
        self.assertEqual((r["ok"], r["error"]), (False, "limited"), r)
        after = status(c)["redis"]["ahead"]
        self.assertEqual(after["booked"], after["taken"] + after["given_back"], after)
        self.assertEqual(after["taken"], before["taken"])
        self.assertTrue(c.request({"op": "reset", "scope": "fast", "key": "k"})["ok"])
        self.assertEqual(self.burst(c, "fast", 50), 50)
        self.assertTrue(c.request({"op": "reset", "scope": "fast", "key": "k"})["ok"])
        counters_add_up(self, status(c))

    def test_hot_key_waiters_served_from_the_head(self):
        n_threads, each = 8, 60
        done = [0] * n_threads

        def worker(i):
            c = self.d.connect()
            try:
                for _ in range(each):
                    r = c.request(acquire_req("fast", "hot", timeout_ms=5000))
                    if r["ok"]:
                        done[i] += 1
                        c.request({"op": "release", "lease": r["lease"]})
            finally:
                c.close()

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(sum(done), n_threads * each)
        st = status(self.conn())
        self.assertGreater(st["scopes"]["fast"]["admitted_ahead"], n_threads * each // 2, st)
        self.assertLess(st["redis"]["calls"]["acquire"], n_threads * each // 2, st["redis"])
        counters_add_up(self, self.settled(self.conn()))

    def test_redis_gone_drops_what_is_held(self):
        c = self.conn()
        self.assertEqual(self.burst(c, "fast", 50), 50)
        held = status(c)["redis"]["ahead"]
        held = held["booked"] - held["taken"] - held["given_back"]
        self.assertGreater(held, 0)
        self.rs.stop()
        st = self.settled(c)
        # they could not go back: lost to the bucket until it refills
        self.assertEqual(st["redis"]["ahead"]["dropped"], held)

        def fallback():
            r = c.request(acquire_req("fast", "k", timeout_ms=0, lease=False))
            return r["ok"] and r["backend"] == "fallback"
        _wait_until(fallback, 10.0, "the fallback to admit")


class AheadReloadTest(ReloadCase):
    BODY = """
[scope fast]
rule = requests token-bucket 1000000/1s
"""

    def test_reload_gives_back_what_is_held(self):
        rs = RedisServer().start()
        self.addCleanup(rs.cleanup)
        self.start(self.BODY, extra="redis = %s\nredis_book_ahead = 1s" % rs.url)
        c = self.conn()
        for _ in range(50):
            self.assertTrue(self.acq(c, "fast", "k", lease=False)["ok"])
        a = c.request({"op": "status"})["redis"]["ahead"]
        held = a["booked"] - a["taken"] - a["given_back"]
        self.assertGreater(held, 0, a)
        self.reload(self.BODY + "\n[scope other]\nrule = requests token-bucket 5/1s\n",
                    extra="redis = %s\nredis_book_ahead = 1s" % rs.url)
        a2 = c.request({"op": "status"})["redis"]["ahead"]
        self.assertEqual(a2["given_back"], a["given_back"] + held, a2)
        self.assertEqual(a2["booked"], a2["taken"] + a2["given_back"] + a2["dropped"], a2)
        self.assertTrue(self.acq(c, "fast", "k", lease=False)["ok"])


if __name__ == "__main__":
    unittest.main()
