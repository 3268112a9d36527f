"""test_status.py - the outcome counters in `status` (what wait and error
hooks would see in a library, as a daemon reports them).

Per scope: admitted, refusals by error code, canceled (the client left
while waiting), wait_ms_total; with Redis, failed calls by operation.
Every counter is driven to a known value and read back exactly.
"""

import time
import unittest

from .harness import IO_TIMEOUT, Admitd, RedisServer, acquire_req

CONF = """
[scope q]
quota = 1/1h

[scope m]
max_concurrent = 1
timeout = 10s
"""


def scope(status, name):
    return status["scopes"][name]


class StatusCountersTest(unittest.TestCase):

    def test_outcomes_are_counted(self):
        with Admitd(CONF) as d, d.connect() as c:
            self.assertIs(c.request(acquire_req("q", "a")).get("ok"), True)
            self.assertEqual(c.request(acquire_req("q", "a", timeout_ms=0))["error"], "limited")
            self.assertEqual(c.request(acquire_req("q", "a", timeout_ms=5000))["error"],
                             "budget_exceeded")

            held = c.request(acquire_req("m", "k"))
            self.assertIs(held.get("ok"), True, held)
            self.assertEqual(c.request(acquire_req("m", "k", timeout_ms=100))["error"], "timeout")

            # A waiter whose client leaves is canceled, not refused.
            gone = d.connect()
            gone.send(acquire_req("m", "k"))
            # (A deadline for the polls below, not a bound: it only ends a
            # test that is failing anyway.)
            deadline = time.monotonic() + IO_TIMEOUT
            while scope(c.request({"op": "status"}), "m")["waiting"] != 1:
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.01)
            gone.close()
            while scope(c.request({"op": "status"}), "m")["waiting"] != 0:
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.01)

            # An admission that waited adds its wait to wait_ms_total.
            w = d.connect()
            w.send(acquire_req("m", "k", id=1))
            while scope(c.request({"op": "status"}), "m")["waiting"] != 1:
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.01)
            time.sleep(0.15)
            c.request({"op": "release", "lease": held["lease"]})
            got = w.recv()
            self.assertIs(got.get("ok"), True, got)
            self.assertGreaterEqual(got["waited_ms"], 150)
            w.close()

            st = c.request({"op": "status"})
            q, m = scope(st, "q"), scope(st, "m")
            self.assertEqual(q["admitted"], 1)
            self.assertEqual(q["refusals"], {"limited": 1, "budget_exceeded": 1})
            self.assertEqual(q["refused"], 2)
            self.assertEqual(m["admitted"], 2)
            self.assertEqual(m["refusals"], {"timeout": 1})
            self.assertEqual(m["timeouts"], 1)
            self.assertEqual(m["canceled"], 1)
            # Both admissions' waits (the first one's is ~0, not always 0).
            self.assertEqual(m["wait_ms_total"], held["waited_ms"] + got["waited_ms"])
            self.assertNotIn("redis", st)


class RedisErrorCountersTest(unittest.TestCase):

    def test_failed_calls_are_counted_by_operation(self):
        with RedisServer() as redis:
            # The pacing hash of (q, k) is a string: the acquire script fails
            # with WRONGTYPE, an error reply that must go to the fallback.
            redis.command("SET", "admitd:{q:k}:s", "not a hash")
            with Admitd(CONF, redis_url=redis.url) as d, d.connect() as c:
                deadline = time.monotonic() + 10
                while c.request({"op": "status"})["backend"] != "redis":
                    self.assertLess(time.monotonic(), deadline)
                    time.sleep(0.02)
                r = c.request(acquire_req("q", "k"))
                self.assertIs(r.get("ok"), True, r)
                self.assertEqual(r["backend"], "fallback")
                ok = c.request(acquire_req("q", "other"))
                self.assertEqual(ok["backend"], "redis", ok)
                st = c.request({"op": "status"})
                self.assertEqual(st["redis"]["errors"]["acquire"], 1)
                self.assertEqual(st["redis"]["errors"]["release"], 0)
                self.assertGreaterEqual(st["redis"]["pods_seen"], 1)
                self.assertEqual(scope(st, "q")["fallback_admitted"], 1)
                self.assertIn("WRONGTYPE", d.stderr_text())


if __name__ == "__main__":
    unittest.main()
