"""test_seams.py - where admitd's parts meet: a Redis stall with calls in
flight, the switch between Redis and the in-process fallback in both
directions, shutdown, late releases, releases through another daemon, a
refused multi-target acquire, and the counters of multi-target waiters.

Each test reproduces a fault that was seen against the real daemon and
asserts what must hold instead:
- a stall leaves no lease booked in Redis that nobody holds;
- this daemon's leases count against a cap whichever backend booked them;
- SIGTERM releases the connected clients' leases in Redis before exiting;
- tokens reported after lease_ttl, or while Redis is down, are charged;
- a refused multi-target acquire books nothing, on Redis as in process;
- a detached lease can be released through any daemon on the same Redis.

Run: ADMITD_BIN=daemon/admitd python3 -m unittest tests.integ.test_seams -v
"""

import socket
import threading
import time
import unittest

from . import harness
from .harness import Admitd, RedisServer, acquire_req, now, settled_nothing
from .redis_util import Pods, key_name, status, wait_backend


def wait_for(cond, deadline, what, log=None):
    return harness._wait_until(cond, deadline, what, log)


def lease_sets(redis, scope, keys):
    """ZCARD of each key's lease set in Redis."""
    return [int(redis.command("ZCARD", key_name("admitd", scope, k, "l"))) for k in keys]


def queue_empty(daemon):
    st = status(daemon)
    return st.get("redis", {}).get("queued", 0) == 0


# Every test here runs Redis calls against tight timeouts: under valgrind
# they would time out by the slowdown, not by the fault (ASan runs them).
@unittest.skipIf(harness.VALGRIND, "timing seams; run under ASan instead of valgrind")
class RedisStallTest(unittest.TestCase):
    CONF = """
[scope cc]
cluster_concurrency = 1
lease_ttl = 30s
timeout = 2s
"""

    def test_pipelined_load_through_a_stall_leaves_nothing_booked(self):
        keys = ["k%d" % i for i in range(100)]
        redis = RedisServer(args=["--enable-debug-command", "yes"])
        self.addCleanup(redis.cleanup)  # the cluster stops only a Redis it made
        with Pods(self.CONF, n=2, redis=redis,
                     admitd_extra="redis_timeout = 250ms\nredis_pool = 2\n") as cl:
            a, b = cl.daemons
            c = a.connect(timeout=10)
            replies, released = {}, []

            def reader():
                while len(replies) < len(keys) or len(released) < len(replies):
                    r = c.recv(timeout=10)
                    if isinstance(r.get("id"), str):
                        self.assertEqual(r.get("held"), True, r)
                        released.append(r)
                        continue
                    replies[r["id"]] = r
                    if r.get("ok"):
                        # released at once, like a client done with its call
                        c.send({"op": "release", "lease": r["lease"], "id": "rel-%s" % r["id"]})

            t = threading.Thread(target=reader)
            t.start()
            stall = threading.Timer(0.3, lambda: redis.command("DEBUG", "SLEEP", "0.3"))
            stall.start()
            for i, k in enumerate(keys):
                c.send(acquire_req("cc", k, id=i, timeout_ms=2000))
                time.sleep(0.01)
            t.join(20)
            stall.join()
            self.assertEqual(len(replies), len(keys))
            admitted = [r for r in replies.values() if r.get("ok")]
            self.assertEqual(len(admitted), len(keys), [r for r in replies.values()
                                                        if not r.get("ok")])
            backends = {r["backend"] for r in admitted}
            self.assertIn("fallback", backends, "the stall sent nothing to the fallback")
            # Every lease was released; within a few redis_timeouts nothing is
            # left booked in Redis (before: 15 of 100 stayed for lease_ttl).
            wait_for(lambda: sum(lease_sets(redis, "cc", keys)) == 0, 3.0,
                     "every lease set empty", a.stderr_text)
            # ... so another daemon gets every key at once.
            with b.connect() as cb:
                for k in keys:
                    r = cb.request(acquire_req("cc", k, timeout_ms=0))
                    self.assertIs(r.get("ok"), True, (k, r))
                    self.assertEqual(r["backend"], "redis", r)
            err = a.stderr_text()
            self.assertNotIn("reply of unexpected shape", err)


@unittest.skipIf(harness.VALGRIND, "timing seams; run under ASan instead of valgrind")
class FirstCallTest(unittest.TestCase):
    CONF = "[scope cc]\ncluster_concurrency = 1\n"

    def test_the_first_acquire_after_start_carries_its_deadline(self):
        # Before, not_after was 0 (no bound) until the first heartbeat had
        # taught the daemon Redis's clock, a second after start.
        cl = Pods(self.CONF, n=1, admitd_extra="redis_timeout = 200ms\n",
                     start_daemons=False)
        with cl:
            mon = cl.redis.connect()
            mon.sock.sendall(b"MONITOR\r\n")
            self.assertEqual(mon._reply(), "OK")
            d = cl.daemons[0]
            d.start()
            with d.connect() as c:
                r = c.request(acquire_req("cc", "first"))
                self.assertIs(r.get("ok"), True, r)
            t_redis = None
            while True:
                line = mon._reply()
                if ('"EVALSHA"' in line or '"FCALL"' in line) and \
                        '"first' in line.replace("{cc:", '"'):
                    args = [a.strip('"') for a in line.split(" ")]
                    # ... not_after, then the settlement record's TTL and
                    # reservation (a scope with a lease set has one)
                    not_after = int(args[-3])
                    t_redis = float(line.split(" ")[0])
                    break
            mon.close()
            # a Redis time (ms) a little after the call was sent: bounded
            self.assertGreater(not_after, 0, line)
            self.assertLess(abs(not_after - t_redis * 1000), 1000, line)


@unittest.skipIf(harness.VALGRIND, "timing seams; run under ASan instead of valgrind")
class SwitchTest(unittest.TestCase):
    CONF = """
[scope cap]
cluster_concurrency = 2
lease_ttl = 30s
fail_mode = fallback
fallback_divisor = 1
"""
    EXTRA = "redis_timeout = 100ms\n"

    def refused_cap(self, c, backend):
        r = c.request(acquire_req("cap", "k", timeout_ms=0))
        self.assertIs(r.get("ok"), False, r)
        self.assertEqual(r.get("rule"), "cluster_concurrency", r)
        self.assertEqual(r.get("backend"), backend, r)

    def test_cap_holds_through_an_outage_and_an_empty_redis(self):
        with Pods(self.CONF, n=2, admitd_extra=self.EXTRA) as cl:
            a, b = cl.daemons
            holder = a.connect()
            for _ in range(2):
                r = holder.request(acquire_req("cap", "k"))
                self.assertEqual((r.get("ok"), r.get("backend")), (True, "redis"), r)
            probe = a.connect()
            self.refused_cap(probe, "redis")
            cl.redis.stop()
            wait_backend(a, "fallback", 5)
            # The fallback counts the two leases Redis booked.
            self.refused_cap(probe, "fallback")
            # Redis returns empty: this daemon's leases are booked there again.
            cl.redis.restart()
            wait_backend(a, "redis", 5)
            wait_backend(b, "redis", 5)
            wait_for(lambda: lease_sets(cl.redis, "cap", ["k"]) == [2], 3.0,
                     "the two leases booked in Redis again", a.stderr_text)
            self.refused_cap(probe, "redis")
            with b.connect() as cb:
                self.refused_cap(cb, "redis")
            st = status(a)
            self.assertEqual(st["scopes"]["cap"]["leases"], 2, st)
            self.assertGreaterEqual(st["redis"]["rebooked"], 2, st)

    def test_leases_granted_in_fallback_are_counted_when_redis_returns(self):
        with Pods(self.CONF, n=2, admitd_extra=self.EXTRA) as cl:
            a, b = cl.daemons
            cl.redis.stop()
            wait_backend(a, "fallback", 5)
            holder = a.connect()
            leases = []
            for _ in range(2):
                r = holder.request(acquire_req("cap", "k"))
                self.assertEqual((r.get("ok"), r.get("backend")), (True, "fallback"), r)
                leases.append(r["lease"])
            probe = a.connect()
            self.refused_cap(probe, "fallback")
            cl.redis.restart()
            wait_backend(a, "redis", 5)
            wait_backend(b, "redis", 5)
            wait_for(lambda: lease_sets(cl.redis, "cap", ["k"]) == [2], 3.0,
                     "the fallback's leases booked in Redis", a.stderr_text)
            self.refused_cap(probe, "redis")
            with b.connect() as cb:
                self.refused_cap(cb, "redis")
                # Released through the daemon that granted them: Redis frees them.
                for lease in leases:
                    self.assertEqual(holder.request({"op": "release", "lease": lease}),
                                     {"ok": True, "held": True})
                wait_for(lambda: lease_sets(cl.redis, "cap", ["k"]) == [0], 3.0,
                         "the leases released in Redis", a.stderr_text)
                r = cb.request(acquire_req("cap", "k", timeout_ms=0))
                self.assertEqual((r.get("ok"), r.get("backend")), (True, "redis"), r)


@unittest.skipIf(harness.VALGRIND, "timing seams; run under ASan instead of valgrind")
class ShutdownTest(unittest.TestCase):
    CONF = """
[scope one]
cluster_concurrency = 1
lease_ttl = 30s
"""

    def test_sigterm_releases_connected_leases_in_redis(self):
        with Pods(self.CONF, n=2, admitd_extra="redis_timeout = 500ms\n") as cl:
            a, b = cl.daemons
            holder = a.connect()
            for k in ("x", "y", "z"):
                r = holder.request(acquire_req("one", k))
                self.assertEqual((r.get("ok"), r.get("backend")), (True, "redis"), r)
            self.assertEqual(lease_sets(cl.redis, "one", ["x", "y", "z"]), [1, 1, 1])
            code, took = a.terminate()
            self.assertEqual(code, 0, a.stderr_text())
            self.assertNotIn("status=shutdown", a.stderr_text())
            self.assertEqual(lease_sets(cl.redis, "one", ["x", "y", "z"]), [0, 0, 0])
            with b.connect() as cb:
                for k in ("x", "y", "z"):
                    r = cb.request(acquire_req("one", k, timeout_ms=0))
                    self.assertEqual((r.get("ok"), r.get("backend")), (True, "redis"), r)

    def test_sigterm_keeps_detached_leases(self):
        with Pods(self.CONF, n=2, admitd_extra="redis_timeout = 500ms\n") as cl:
            a, b = cl.daemons
            with a.connect() as c:
                r = c.request(acquire_req("one", "d", detach=True))
                self.assertIs(r.get("ok"), True, r)
            lease = r["lease"]
            code, _ = a.terminate()
            self.assertEqual(code, 0)
            self.assertEqual(lease_sets(cl.redis, "one", ["d"]), [1])
            with b.connect() as cb:
                self.assertIs(cb.request(acquire_req("one", "d", timeout_ms=0)).get("ok"),
                              False)
                # ... and the other daemon can release it (issued elsewhere).
                self.assertEqual(cb.request({"op": "release", "lease": lease}),
                                 {"ok": True, "held": True})
                r = cb.request(acquire_req("one", "d", timeout_ms=0))
                self.assertEqual((r.get("ok"), r.get("backend")), (True, "redis"), r)


TOKENS_CONF = """
[scope llm]
rule = tokens fixed-window 1000/1h
lease_ttl = 1s
"""


class LateTokensLocalTest(unittest.TestCase):

    def test_tokens_after_lease_ttl_are_charged(self):
        with Admitd(TOKENS_CONF) as d:
            c = d.connect()
            for i in range(1):
                r = c.request(acquire_req("llm", "m", timeout_ms=0))
                self.assertIs(r.get("ok"), True, r)
                time.sleep(1.2)  # the call outlives lease_ttl
                rel = c.request({"op": "release", "lease": r["lease"],
                                 "tokens": {"output": 5000}})
                self.assertEqual(rel, {"ok": True, "held": False})
            r = c.request(acquire_req("llm", "m", timeout_ms=0))
            self.assertIs(r.get("ok"), False, r)
            self.assertEqual(r.get("rule"), "tokens fixed-window 1000/1h", r)
            self.assertEqual(status(d)["scopes"]["llm"]["expired"], 1)

    def test_a_string_that_is_no_lease_charges_nothing(self):
        with Admitd(TOKENS_CONF) as d:
            c = d.connect()
            for bogus in ("no-such-lease", "0" * 32, "0" * 32 + ".AWxsbQAAbQA"):
                r = c.request({"op": "release", "lease": bogus, "tokens": {"output": 5000}})
                self.assertTrue(settled_nothing(r), (bogus, r))
            r = c.request(acquire_req("llm", "m", timeout_ms=0))
            self.assertIs(r.get("ok"), True, r)


@unittest.skipIf(harness.VALGRIND, "timing seams; run under ASan instead of valgrind")
class LateTokensRedisTest(unittest.TestCase):
    EXTRA = "redis_timeout = 100ms\n"

    def test_tokens_after_lease_ttl_are_charged_in_redis(self):
        with Pods(TOKENS_CONF, n=2, admitd_extra=self.EXTRA) as cl:
            a, b = cl.daemons
            c = a.connect()
            r = c.request(acquire_req("llm", "m", timeout_ms=0))
            self.assertEqual((r.get("ok"), r.get("backend")), (True, "redis"), r)
            time.sleep(1.2)
            self.assertEqual(c.request({"op": "release", "lease": r["lease"],
                                        "tokens": {"output": 5000}}),
                             {"ok": True, "held": False})
            # The issuer answers its own lease's release at once and sends
            # it on: b sees the charge once Redis has taken it.
            with b.connect() as cb:
                wait_for(lambda: cb.request(acquire_req("llm", "m", timeout_ms=0)).get("ok")
                         is False, 3.0, "the late tokens charged in Redis", a.stderr_text)
                r = cb.request(acquire_req("llm", "m", timeout_ms=0))
                self.assertEqual((r.get("ok"), r.get("backend"), r.get("rule")),
                                 (False, "redis", "tokens fixed-window 1000/1h"), r)

    def test_tokens_released_during_an_outage(self):
        with Pods(TOKENS_CONF.replace("lease_ttl = 1s", "lease_ttl = 30s"), n=1,
                     admitd_extra=self.EXTRA) as cl:
            a = cl.daemons[0]
            c = a.connect()
            r = c.request(acquire_req("llm", "m", timeout_ms=0))
            self.assertEqual((r.get("ok"), r.get("backend")), (True, "redis"), r)
            cl.redis.stop()
            wait_backend(a, "fallback", 5)
            self.assertEqual(c.request({"op": "release", "lease": r["lease"],
                                        "tokens": {"output": 5000}}),
                             {"ok": True, "held": True})
            # charged to the fallback ...
            r = c.request(acquire_req("llm", "m", timeout_ms=0))
            self.assertEqual((r.get("ok"), r.get("backend")), (False, "fallback"), r)
            # ... and to Redis once it returns (it came back empty).
            cl.redis.restart()
            wait_backend(a, "redis", 5)
            wait_for(lambda: queue_empty(a), 3.0, "the release queue sent", a.stderr_text)
            r = c.request(acquire_req("llm", "m", timeout_ms=0))
            self.assertEqual((r.get("ok"), r.get("backend"), r.get("rule")),
                             (False, "redis", "tokens fixed-window 1000/1h"), r)


TARGETS_CONF = """
[scope a]
cluster_concurrency = 2
min_delay = 1s
lease_ttl = 30s

[scope b]
quota = 1/1m
"""


class RefusedTargetsBookNothing:
    """Mixin: after a refused [a, b], a alone is admitted (nothing was booked)."""

    def check(self, c, backend):
        r = c.request(acquire_req("b", "y", timeout_ms=0))
        self.assertEqual((r.get("ok"), r.get("backend")), (True, backend), r)
        for _ in range(3):
            r = c.request({"op": "acquire", "timeout_ms": 0,
                           "targets": [{"scope": "a", "key": "x"}, {"scope": "b", "key": "y"}]})
            self.assertIs(r.get("ok"), False, r)
            self.assertEqual(r.get("rule"), "quota 1/1m", r)
        r = c.request(acquire_req("a", "x", timeout_ms=0))
        self.assertEqual((r.get("ok"), r.get("backend")), (True, backend), r)


class RefusedTargetsLocalTest(RefusedTargetsBookNothing, unittest.TestCase):

    def test_refused_targets_book_nothing(self):
        with Admitd(TARGETS_CONF) as d:
            self.check(d.connect(), "local")


@unittest.skipIf(harness.VALGRIND, "timing seams; run under ASan instead of valgrind")
class RefusedTargetsRedisTest(RefusedTargetsBookNothing, unittest.TestCase):

    def test_refused_targets_book_nothing(self):
        with Pods(TARGETS_CONF, n=1, admitd_extra="redis_timeout = 500ms\n") as cl:
            self.check(cl.daemons[0].connect(), "redis")


@unittest.skipIf(harness.VALGRIND, "timing seams; run under ASan instead of valgrind")
class ForeignReleaseTest(unittest.TestCase):
    CONF = """
[scope one]
cluster_concurrency = 1
lease_ttl = 30s
rule = tokens fixed-window 1000/1h
"""

    def test_detached_lease_released_through_a_restarted_daemon(self):
        with Pods(self.CONF, n=1, admitd_extra="redis_timeout = 500ms\n") as cl:
            a = cl.daemons[0]
            with a.connect() as c:
                r = c.request(acquire_req("one", "k", detach=True))
                self.assertEqual((r.get("ok"), r.get("backend")), (True, "redis"), r)
            lease = r["lease"]
            a.stop()
            a.start()
            wait_backend(a, "redis", 5)
            with a.connect() as c:
                self.assertIs(c.request(acquire_req("one", "k", timeout_ms=0)).get("ok"),
                              False)
                self.assertEqual(c.request({"op": "release", "lease": lease,
                                            "tokens": {"output": 5000}}),
                                 {"ok": True, "held": True})
                self.assertEqual(lease_sets(cl.redis, "one", ["k"]), [0])
                # The slot is free, and the tokens were charged to the rule.
                r = c.request(acquire_req("one", "k", timeout_ms=0))
                self.assertEqual((r.get("ok"), r.get("rule")),
                                 (False, "tokens fixed-window 1000/1h"), r)
                # A second release of it changes nothing, and says it was
                # released before (Redis keeps the settled record).
                r = c.request({"op": "release", "lease": lease,
                               "tokens": {"output": 0}})
                self.assertTrue(settled_nothing(r, repeat=True), r)
                r = c.request(acquire_req("one", "k", timeout_ms=0))
                self.assertEqual((r.get("ok"), r.get("rule")),
                                 (False, "tokens fixed-window 1000/1h"), r)

    def test_released_through_another_daemon_while_redis_is_down_is_refused(self):
        # Only Redis can vouch for a handle another daemon issued: while it
        # is down such a release is refused (retryable) and nothing is kept,
        # so a flood of forged handles cannot fill the release queue.
        with Pods(self.CONF, n=2, admitd_extra="redis_timeout = 100ms\n") as cl:
            a, b = cl.daemons
            with a.connect() as c:
                r = c.request(acquire_req("one", "k", detach=True))
                self.assertIs(r.get("ok"), True, r)
            lease = r["lease"]
            cl.redis.pause()
            try:
                wait_backend(b, "fallback", 5)
                with b.connect() as cb:
                    r = cb.request({"op": "release", "lease": lease})
                    self.assertEqual(r.get("error"), "unavailable", r)
                    self.assertEqual(status(b)["redis"].get("queued", 0), 0)
            finally:
                cl.redis.resume()
            wait_backend(b, "redis", 5)
            wait_backend(a, "redis", 5)
            with b.connect() as cb:
                self.assertEqual(cb.request({"op": "release", "lease": lease}),
                                 {"ok": True, "held": True})
            self.assertEqual(lease_sets(cl.redis, "one", ["k"]), [0])
            # The issuer, back from the same outage, books its leases again
            # (before or after that release reached Redis): a released lease
            # is remembered, so it is not put back either way.
            time.sleep(0.5)
            self.assertEqual(lease_sets(cl.redis, "one", ["k"]), [0])


@unittest.skipIf(harness.VALGRIND, "timing seams; run under ASan instead of valgrind")
class ReleasedElsewhereTest(unittest.TestCase):
    CONF = ForeignReleaseTest.CONF

    def test_a_lease_released_elsewhere_is_not_booked_again_by_its_issuer(self):
        with Pods(self.CONF, n=2, admitd_extra="redis_timeout = 100ms\n") as cl:
            a, b = cl.daemons
            with a.connect() as c:
                r = c.request(acquire_req("one", "k", detach=True))
                self.assertEqual((r.get("ok"), r.get("backend")), (True, "redis"), r)
            with b.connect() as cb:
                self.assertEqual(cb.request({"op": "release", "lease": r["lease"]}),
                                 {"ok": True, "held": True})
            self.assertEqual(lease_sets(cl.redis, "one", ["k"]), [0])
            # a still holds it; an outage makes a book its leases again
            cl.redis.pause()
            try:
                wait_backend(a, "fallback", 5)
            finally:
                cl.redis.resume()
            wait_backend(a, "redis", 5)
            wait_for(lambda: status(a)["scopes"]["one"]["leases"] == 0, 3.0,
                     "the issuer dropping the lease released elsewhere", a.stderr_text)
            self.assertEqual(lease_sets(cl.redis, "one", ["k"]), [0])
            with b.connect() as cb:
                r = cb.request(acquire_req("one", "k", timeout_ms=0))
                self.assertEqual((r.get("ok"), r.get("backend")), (True, "redis"), r)


class TargetCountersTest(unittest.TestCase):
    CONF = """
[scope first]
max_concurrent = 1
timeout = 10s

[scope second]
max_waiters = 1
timeout = 10s
"""

    def test_every_target_scope_counts_waiters_and_waits(self):
        with Admitd(self.CONF) as d:
            holder = d.connect()
            lease = holder.request(acquire_req("first", "x"))["lease"]
            w1, w2 = d.connect(), d.connect()
            two = lambda k, i: {"op": "acquire", "id": i,
                                "targets": [{"scope": "first", "key": "x"},
                                            {"scope": "second", "key": k}]}
            w1.send(two("y", 1))
            wait_for(lambda: status(d)["scopes"]["second"]["waiting"] == 1, 3.0,
                     "the waiter counted in its second target's scope")
            r = w2.request(two("z", 2))
            self.assertEqual((r.get("ok"), r.get("error"), r.get("rule")),
                             (False, "too_many_waiters", "max_waiters"), r)
            time.sleep(0.2)
            holder.request({"op": "release", "lease": lease})
            r = w1.recv()
            self.assertIs(r.get("ok"), True, r)
            st = status(d)["scopes"]
            self.assertEqual(st["second"]["admitted"], 1)
            self.assertGreaterEqual(st["second"]["wait_ms_total"], 150, st)
            self.assertEqual(st["second"]["waiting"], 0)

    def test_an_admission_nobody_receives_is_not_also_counted_admitted(self):
        with Admitd(self.CONF) as d:
            holder = d.connect()
            lease = holder.request(acquire_req("first", "x"))["lease"]
            w = d.connect()
            w.send(acquire_req("first", "x", id=1, timeout_ms=300))
            self.assertEqual(w.recv(timeout=3).get("error"), "timeout")
            holder.request({"op": "release", "lease": lease})
            st = status(d)["scopes"]["first"]
            self.assertEqual(st["admitted"], 1, st)
            self.assertEqual(st["timeouts"], 1, st)


class ExpiryLogTest(unittest.TestCase):

    def test_many_expiries_log_a_few_lines(self):
        conf = "[scope s]\nlease_ttl = 500ms\n"
        with Admitd(conf) as d:
            c = d.connect()
            for i in range(50):
                self.assertIs(c.request(acquire_req("s", "k%d" % i)).get("ok"), True)
            wait_for(lambda: status(d)["scopes"]["s"]["expired"] == 50, 5.0, "50 expiries")
            lines = [ln for ln in d.stderr_text().splitlines() if "expired" in ln]
            self.assertLessEqual(len(lines), 2, lines)


if __name__ == "__main__":
    unittest.main()
