"""test_class_queue.py - a key's waiters queue per class, in class priority.

A `batch` acquire waiting for its floor holds back no `interactive` request
on the same key: an interactive try is admitted while it waits, and an
interactive acquire with a budget is admitted at once, not timed out behind
it. Checked with the real daemon in local mode, through a real redis-server,
and with that redis-server stopped (the fallback). Then priority=N: with
two classes waiting on a full key, a freed slot goes to the higher priority
first, and at equal priority to the head that arrived first; a lower class's
try is refused while a higher one waits for the same limit.
"""

import time
import unittest

from .harness import Admitd, RedisServer, acquire_req
from .redis_util import status, wait_backend
from .test_reload import ReloadCase

# 10 requests, one back every 20 s: batch may not take the last 5
FLOOR_CONF = """
[admitd]
redis_timeout = 100ms

[scope api]
rule main = requests token-bucket 10/200s
class interactive = main
class batch = main floor=5
default_class = interactive
fail_mode = fallback
"""

# one slot; three classes, two of them above the default priority
PRIO_CONF = """
[scope q]
rule = concurrency 1
class low =
class high = priority=10
class peer = priority=10
class bottom = priority=-1
default_class = low
"""


def _wait_for(cond, deadline_s, what):
    end = time.monotonic() + deadline_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("not within %.1fs: %s" % (deadline_s, what))
        time.sleep(0.02)


class DaemonCase:
    """One daemon on CONF: in local mode, or on a real redis-server (mode
    "redis"), or with that server stopped once the daemon is up ("fallback")."""

    CONF = ""
    mode = "local"

    def setUp(self):
        self.rs = RedisServer().start() if self.mode != "local" else None
        self.d = Admitd(self.CONF, redis_url=self.rs.url if self.rs else None).start()
        self.conns = []
        if self.mode == "fallback":
            self.rs.stop()
            wait_backend(self.d, "fallback", 10)

    def tearDown(self):
        for c in self.conns:
            c.close()
        self.d.cleanup(failed=False)
        if self.rs:
            self.rs.cleanup(failed=False)

    def conn(self):
        c = self.d.connect()
        self.conns.append(c)
        return c


class FloorCase(DaemonCase):
    """An interactive request is not held back by a batch waiter refused by
    its own floor."""

    CONF = FLOOR_CONF

    def batch_waits(self):
        """5 of 10 left (batch's floor), and a batch acquire waiting for more.
        Returns a connection for the next requests."""
        c = self.conn()
        for i in range(5):
            r = c.request(acquire_req("api", "k", timeout_ms=0, detach=True, id=i))
            self.assertTrue(r["ok"], r)
            self.assertEqual(r["backend"], self.mode, r)
        self.waiter = self.conn()
        self.waiter.send(acquire_req("api", "k", **{"class": "batch", "timeout_ms": 60000,
                                                     "detach": True, "id": "b"}))
        _wait_for(lambda: status(self.d)["scopes"]["api"]["waiting"] == 1, 10,
                  "the batch acquire waits for its floor")
        return c

    def still_waits(self):
        self.assertEqual(status(self.d)["scopes"]["api"]["waiting"], 1)
        with self.assertRaises(TimeoutError):
            self.waiter.recv(timeout=0.1)

    def test_interactive_try_goes_past_a_batch_waiter(self):
        c = self.batch_waits()
        # a batch try waits behind its own class's head: refused
        r = c.request(acquire_req("api", "k", **{"class": "batch", "timeout_ms": 0,
                                                  "detach": True, "id": "bt"}))
        self.assertEqual((r["ok"], r["error"]), (False, "limited"), r)
        # an interactive try: 5 are left, its class has no floor
        for i in range(2):
            r = c.request(acquire_req("api", "k", **{"class": "interactive", "timeout_ms": 0,
                                                      "detach": True, "id": "it%d" % i}))
            self.assertTrue(r["ok"], r)
            self.assertEqual(r["backend"], self.mode, r)
        self.still_waits()

    def test_interactive_acquire_is_admitted_promptly(self):
        c = self.batch_waits()
        t0 = time.monotonic()
        r = c.request(acquire_req("api", "k", **{"class": "interactive", "timeout_ms": 3000,
                                                  "detach": True, "id": "iw"}), timeout=10)
        self.assertTrue(r["ok"], r)
        self.assertEqual(r["backend"], self.mode, r)
        self.assertLess(r["waited_ms"], 1000, r)
        self.assertLess(time.monotonic() - t0, 2.5, r)
        self.still_waits()


class TestFloorLocal(FloorCase, unittest.TestCase):
    mode = "local"


class TestFloorRedis(FloorCase, unittest.TestCase):
    mode = "redis"


class TestFloorFallback(FloorCase, unittest.TestCase):
    mode = "fallback"


class PrioCase(DaemonCase):
    """priority=N on a key whose one slot is held."""

    CONF = PRIO_CONF

    def waiting(self):
        return status(self.d)["scopes"]["q"]["waiting"]

    def test_freed_slots_go_by_priority_then_arrival(self):
        holder = self.conn()
        r = holder.request(acquire_req("q", "k", timeout_ms=0, id="h"))
        self.assertTrue(r["ok"], r)
        lease = r["lease"]
        # arrival: low, high, peer (high's priority), high again, low again
        names = [("L1", "low"), ("H1", "high"), ("P1", "peer"), ("H2", "high"),
                 ("L2", "low")]
        pending = {}
        for n, (name, cls) in enumerate(names):
            c = self.conn()
            c.send(acquire_req("q", "k", **{"class": cls, "timeout_ms": 60000, "id": name}))
            pending[name] = c
            _wait_for(lambda: self.waiting() == n + 1, 10, "%s waits" % name)
        # a try behind its own class's waiters, and one of a class with none
        # waiting, but below classes that wait for the same slot: both refused
        for cls in ("low", "bottom"):
            r = holder.request(acquire_req("q", "k", **{"class": cls, "timeout_ms": 0,
                                                         "id": "try"}))
            self.assertEqual((r["ok"], r["error"], r["rule"]),
                             (False, "limited", "concurrency 1"), r)
        order = []
        while pending:
            holder.request({"op": "release", "lease": lease})
            got = None
            end = time.monotonic() + 10
            while got is None and time.monotonic() < end:
                for name, c in pending.items():
                    try:
                        got = (name, c.recv(timeout=0.05))
                        break
                    except TimeoutError:
                        continue
            self.assertIsNotNone(got, "nobody admitted after a release; so far %r" % order)
            name, r = got
            self.assertTrue(r["ok"], r)
            order.append(name)
            holder = pending.pop(name)
            lease = r["lease"]
        holder.request({"op": "release", "lease": lease})
        # higher priority first (high and peer are equal: by arrival), then low
        self.assertEqual(order, ["H1", "P1", "H2", "L1", "L2"])


class TestPrioLocal(PrioCase, unittest.TestCase):
    mode = "local"


class TestPrioRedis(PrioCase, unittest.TestCase):
    mode = "redis"


RELOAD_BODY = """
[scope q]
rule = concurrency 1
timeout = 60s
class low = priority=%d
class high = priority=10
%s
default_class = low
"""


class TestPrioReload(ReloadCase):
    """A reload that changes a class's priority, or removes a class, while
    waiters of both wait for the key's one slot."""

    def queue_low_then_high(self):
        c = self.conn()
        r = self.acq(c, "q", "k", id="h")
        self.assertTrue(r["ok"], r)
        low, high = self.conn(), self.conn()
        low.send(acquire_req("q", "k", **{"class": "low", "timeout_ms": 60000, "id": "L"}))
        _wait_for(lambda: status(self.d)["scopes"]["q"]["waiting"] == 1, 10, "low waits")
        high.send(acquire_req("q", "k", **{"class": "high", "timeout_ms": 60000, "id": "H"}))
        _wait_for(lambda: status(self.d)["scopes"]["q"]["waiting"] == 2, 10, "high waits")
        return c, r["lease"], low, high

    def test_raised_priority_applies_to_waiters(self):
        self.start(RELOAD_BODY % (0, "class peer ="))
        c, lease, low, high = self.queue_low_then_high()
        self.reload(RELOAD_BODY % (20, "class peer ="))
        c.request({"op": "release", "lease": lease})
        r = low.recv(timeout=10)  # low is above high now
        self.assertTrue(r["ok"], r)
        with self.assertRaises(TimeoutError):
            high.recv(timeout=0.2)
        c.request({"op": "release", "lease": r["lease"]}) if False else None
        low.request({"op": "release", "lease": r["lease"]})
        r = high.recv(timeout=10)
        self.assertTrue(r["ok"], r)

    def test_removed_class_leaves_the_others_queued(self):
        self.start(RELOAD_BODY % (0, ""))
        c, lease, low, high = self.queue_low_then_high()
        self.reload(RELOAD_BODY.replace("class high = priority=10\n", "") % (0, ""))
        r = high.recv(timeout=10)
        self.assertEqual((r["ok"], r["error"]), (False, "bad_request"), r)
        self.assertIn('no class "high"', r["message"])
        c.request({"op": "release", "lease": lease})
        r = low.recv(timeout=10)
        self.assertTrue(r["ok"], r)


if __name__ == "__main__":
    unittest.main()
