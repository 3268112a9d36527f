"""test_redis_batch.py - acquires of different keys in one Redis call.

The single-target acquires that one pass of the daemon's event loop sends on
one pool connection go to Redis as one acquire.lua call (redis_batch, at
most that many), each decided alone with its own reply. Checked with a real
redis-server and the real daemon: a burst of acquires for distinct keys costs
far fewer script calls than acquires (and exactly one each with
redis_batch = 1); each acquire in a batch gets its own decision (admitted and
refused side by side, remaining per key); a batch sent while Redis is frozen
is answered by the fallback and reconciled once Redis answers, leaving no
lease behind; a shutdown with acquires in a batch answers what it read and
exits cleanly.
"""

import json
import time
import unittest

from . import harness
from .harness import Admitd, RedisServer, acquire_req
from .redis_util import rule_state
from .test_hot_key import evalsha_calls

CONF = """
[admitd]
redis_pool = 1
redis_timeout = 300ms
%s
[scope one]
rule = requests fixed-window 1/1h

[scope two]
rule = requests token-bucket 2/1h
[scope cap]
cluster_concurrency = 1
lease_ttl = 1h
fallback_divisor = 1
"""


def burst(c, reqs):
    """Send every request in one write (one read for the daemon), then read
    the replies: {id: reply}."""
    c.send(b"".join(json.dumps(r).encode() + b"\n" for r in reqs))
    out = {}
    for _ in reqs:
        r = c.recv(timeout=10)
        out[r["id"]] = r
    return out


class RedisBatchTest(unittest.TestCase):
    def start(self, admitd_extra=""):
        self.rs = RedisServer().start()
        self.addCleanup(self.rs.cleanup)
        self.d = Admitd(CONF % admitd_extra, redis_url=self.rs.url).start()
        self.addCleanup(self.d.cleanup)
        self.c = self.d.connect()
        self.addCleanup(self.c.close)

    def test_distinct_keys_share_calls(self):
        self.start()
        before = evalsha_calls(self.rs)
        reqs = [acquire_req("one", "k%d" % i, timeout_ms=0, id=i) for i in range(64)]
        got = burst(self.c, reqs)
        calls = evalsha_calls(self.rs) - before
        self.assertTrue(all(r["ok"] and r["backend"] == "redis" for r in got.values()), got)
        # 64 acquires, batches of at most 32: at least 2 calls, far fewer than 64
        self.assertGreaterEqual(calls, 2)
        self.assertLessEqual(calls, 16, "%d script calls for 64 acquires" % calls)

    def test_one_call_each_without_batches(self):
        self.start("redis_batch = 1\n")
        before, t0 = evalsha_calls(self.rs), time.monotonic()
        got = burst(self.c, [acquire_req("one", "k%d" % i, timeout_ms=0, id=i)
                             for i in range(20)])
        calls, elapsed = evalsha_calls(self.rs) - before, time.monotonic() - t0
        self.assertTrue(all(r["ok"] for r in got.values()), got)
        # one call each; the daemon's heartbeat (one a second) is a script
        # call too, and a slow run (valgrind) may see one
        self.assertGreaterEqual(calls, 20)
        self.assertLessEqual(calls, 20 + int(elapsed) + 1, "%.1fs" % elapsed)

    def test_each_decided_alone(self):
        self.start()
        # the even keys are used up before the burst
        for i in range(0, 20, 2):
            self.assertTrue(self.c.request(acquire_req("one", "m%d" % i, timeout_ms=0))["ok"])
        before = evalsha_calls(self.rs)
        got = burst(self.c, [acquire_req("one", "m%d" % i, timeout_ms=0, id=i)
                             for i in range(20)])
        self.assertLess(evalsha_calls(self.rs) - before, 20)
        for i in range(20):
            r = got[i]
            if i % 2:
                self.assertEqual((r["ok"], r["remaining"]), (True, 0), r)
            else:
                self.assertEqual((r["ok"], r["error"], r["backend"]),
                                 (False, "limited", "redis"), r)
                self.assertTrue(0 < r["retry_after_ms"] <= 3600000, r)

    def test_plain_and_general_side_by_side(self):
        # One-rule scopes (sent as a 'p' group each: only key and cost per
        # acquire) and a scope with a lease set (a 'g' group) in one burst:
        # each decided on its own, in fewer calls than acquires.
        self.start()
        before = evalsha_calls(self.rs)
        reqs = [acquire_req(("one", "two", "cap")[i % 3], "x%d" % i, timeout_ms=0, id=i)
                for i in range(30)]
        # asked again in the same burst: these wait behind the first
        reqs += [acquire_req("two", "x1", timeout_ms=2000, id=100 + i) for i in range(2)]
        reqs.append(acquire_req("one", "x0", timeout_ms=2000, id=102))
        got = burst(self.c, reqs)
        self.assertLess(evalsha_calls(self.rs) - before, len(reqs))
        for i in range(30):
            r = got[i]
            self.assertEqual((r["ok"], r["backend"]), (True, "redis"), r)
            if i % 3 == 0:
                self.assertEqual(r["remaining"], 0, r)
            elif i % 3 == 1 and i != 1:
                self.assertEqual(r["remaining"], 1, r)
        # x1 of "two" (2/h) was asked three times: two admitted, one refused
        two = [got[1], got[100], got[101]]
        self.assertEqual(sorted(r["ok"] for r in two), [False, True, True], two)
        self.assertEqual(sorted(r["remaining"] for r in two if r["ok"]), [0, 1], two)
        # its wait (the hour) is past its budget
        self.assertEqual((got[102]["ok"], got[102]["error"]), (False, "budget_exceeded"), got[102])
        self.assertEqual(rule_state(self.rs, "admitd:{two:x4}:r0")["a"], 1000)
        self.assertEqual(self.rs.command("ZCARD", "admitd:{cap:x2}:l"), 1)

    @unittest.skipIf(harness.VALGRIND, "Redis timings; run under ASan instead of valgrind")
    def test_frozen_redis_fallback_then_reconciled(self):
        self.start()
        self.rs.pause()
        try:
            got = burst(self.c, [acquire_req("cap", "c%d" % i, timeout_ms=0, id=i)
                                 for i in range(10)])
        finally:
            self.rs.resume()
        # Redis did not answer in redis_timeout: the fallback decided each
        self.assertTrue(all(r["ok"] and r["backend"] == "fallback" for r in got.values()), got)
        for r in got.values():
            self.assertTrue(self.c.request({"op": "release", "lease": r["lease"]})["ok"])
        # what the frozen batch booked (it ran on resume, after its not_after:
        # or before it) is gone from Redis once the queue has been sent
        deadline = time.monotonic() + 10
        left = None
        while time.monotonic() < deadline:
            left = sum(self.rs.command("ZCARD", "admitd:{cap:c%d}:l" % i) for i in range(10))
            if left == 0:
                break
            time.sleep(0.1)
        self.assertEqual(left, 0)
        deadline = time.monotonic() + 10
        while (self.c.request({"op": "status"})["backend"] != "redis"
               and time.monotonic() < deadline):
            time.sleep(0.05)
        r = self.c.request(acquire_req("cap", "c0", timeout_ms=0))
        self.assertEqual((r["ok"], r["backend"]), (True, "redis"), r)

    def test_shutdown_with_a_batch_queued(self):
        self.start()
        reqs = [acquire_req("one", "s%d" % i, timeout_ms=0, id=i) for i in range(30)]
        self.c.send(b"".join(json.dumps(r).encode() + b"\n" for r in reqs))
        first = self.c.recv(timeout=30)  # the daemon has read them (some, or all)
        code, _ = self.d.terminate()
        self.assertEqual(code, 0)
        # what was read is answered before the close, each well-formed
        n = 1
        try:
            while True:
                r = self.c.recv(timeout=5)
                self.assertTrue(r["ok"] or r["error"] in ("shutting_down", "unavailable"), r)
                n += 1
        except ConnectionError:
            pass
        self.assertTrue(first["ok"], first)
        self.assertLessEqual(n, 30)


if __name__ == "__main__":
    unittest.main()
