"""test_cancel.py - a client cancels one of its waiting acquires.

{"op":"cancel","of":ID} answers the waiting acquire whose id is ID on the
same connection with `canceled`, then says whether it found one. A
canceled acquire spends nothing: not while it waits, and not when the
cancel arrives while Redis is deciding for it (the admission that comes
back is undone, not released). Every budget is read back after the cancel.
"""

import time
import unittest

from .harness import Admitd, RedisServer, acquire_req

# A key held by one lease (max_concurrent) makes the next acquire wait; the
# fixed window shows what the waits spent.
HELD = """
[scope api]
max_concurrent = 1
rule = requests fixed-window 3/1h
lease_ttl = 30s
"""


def window_left(c, scope, key):
    ins = c.request({"op": "inspect", "scope": scope, "key": key})
    assert ins.get("ok"), ins
    return [r for r in ins["rules"] if "fixed-window" in r["rule"]][0]["remaining"]


class LocalCancelTest(unittest.TestCase):

    def test_a_canceled_wait_is_answered_and_spends_nothing(self):
        with Admitd(HELD) as d:
            c = d.connect()
            first = c.request(acquire_req("api", "k", id=1))
            self.assertIs(first.get("ok"), True, first)
            c.send(acquire_req("api", "k", id="w-2", timeout_ms=10000))
            c.send({"op": "cancel", "of": "w-2", "id": 3})
            self.assertEqual(c.recv()["error"], "canceled")
            self.assertEqual(c.recv(), {"ok": True, "id": 3, "found": True})
            self.assertEqual(window_left(c, "api", "k"), 2)
            # the semaphore's queue is empty again: the next one waits alone
            rel = c.request({"op": "release", "lease": first["lease"], "id": 4})
            self.assertIs(rel.get("ok"), True, rel)
            again = c.request(acquire_req("api", "k", id=5, timeout_ms=0))
            self.assertIs(again.get("ok"), True, again)
            self.assertEqual(window_left(c, "api", "k"), 1)
            st = c.request({"op": "status"})
            self.assertEqual(st["scopes"]["api"]["canceled"], 1)
            self.assertEqual(st["scopes"]["api"]["admitted"], 2)

    def test_the_canceled_reply_comes_first_and_carries_the_id(self):
        with Admitd(HELD) as d:
            c = d.connect()
            self.assertIs(c.request(acquire_req("api", "k", id=1)).get("ok"), True)
            c.send(acquire_req("api", "k", id={"n": [1, 2]}, timeout_ms=10000))
            # the same value spelled differently is the same id
            c.send({"op": "cancel", "of": {"n": [1, 2]}, "id": "c"})
            r = c.recv()
            self.assertEqual((r["ok"], r["id"], r["error"]), (False, {"n": [1, 2]}, "canceled"))
            self.assertEqual(c.recv(), {"ok": True, "id": "c", "found": True})

    def test_nothing_to_cancel(self):
        with Admitd(HELD) as d:
            c = d.connect()
            done = c.request(acquire_req("api", "k", id=7))
            self.assertIs(done.get("ok"), True, done)
            # already answered, never sent, and another connection's wait
            self.assertEqual(c.request({"op": "cancel", "of": 7, "id": 8}),
                             {"ok": True, "id": 8, "found": False})
            self.assertEqual(c.request({"op": "cancel", "of": "nope", "id": 9}),
                             {"ok": True, "id": 9, "found": False})
            other = d.connect()
            other.send(acquire_req("api", "k", id=10, timeout_ms=300))
            time.sleep(0.05)
            self.assertEqual(c.request({"op": "cancel", "of": 10, "id": 11}),
                             {"ok": True, "id": 11, "found": False})
            self.assertEqual(other.recv()["error"], "timeout")
            bad = c.request({"op": "cancel", "id": 12})
            self.assertEqual((bad["ok"], bad["error"]), (False, "bad_request"))
            self.assertIn("of", bad["message"])
            # the connection still works
            self.assertEqual(c.request({"op": "ping", "id": 13}), {"ok": True, "id": 13})

    def test_a_closed_connection_cancels_what_it_waited_for(self):
        with Admitd(HELD) as d:
            c = d.connect()
            self.assertIs(c.request(acquire_req("api", "k", id=1)).get("ok"), True)
            gone = d.connect()
            gone.send(acquire_req("api", "k", id=2, timeout_ms=10000))
            time.sleep(0.05)
            gone.close()
            time.sleep(0.1)
            self.assertEqual(window_left(c, "api", "k"), 2)


WINDOW = """
[admitd]
redis_timeout = 5s

[scope api]
rule = requests fixed-window 5/1h
lease_ttl = 30s
"""


class RedisCancelTest(unittest.TestCase):

    def test_a_cancel_while_redis_decides_undoes_the_admission(self):
        """Redis is stopped (SIGSTOP) with the acquire's script call sent:
        the cancel is answered at once, and the admission that Redis makes
        when it runs again is rolled back (the window is whole)."""
        with RedisServer() as rs, Admitd(WINDOW, redis_url=rs.url) as d:
            c = d.connect()
            warm = c.request(acquire_req("api", "warm", id=0))
            self.assertEqual(warm.get("backend"), "redis", warm)
            rs.pause()
            c.send(acquire_req("api", "k", id="a", timeout_ms=4000))
            time.sleep(0.1)
            c.send({"op": "cancel", "of": "a", "id": "c"})
            first = c.recv(timeout=2)
            self.assertEqual((first["id"], first["error"]), ("a", "canceled"), first)
            self.assertEqual(c.recv(timeout=2), {"ok": True, "id": "c", "found": True})
            time.sleep(0.3)
            rs.resume()
            # Redis made the admission when it woke; the daemon undid it
            deadline = time.time() + 3
            while time.time() < deadline and window_left(c, "api", "k") != 5:
                time.sleep(0.05)
            self.assertEqual(window_left(c, "api", "k"), 5)
            st = c.request({"op": "status"})["scopes"]["api"]
            self.assertEqual((st["canceled"], st["admitted"]), (1, 1), st)


if __name__ == "__main__":
    unittest.main()
