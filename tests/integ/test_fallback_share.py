"""test_fallback_share.py - while Redis is down, the pods' shares add up to
the limit, and each pod's own admissions before the outage count.

Three real daemons on one real redis-server count each other through their
heartbeats; then Redis is stopped and every daemon decides alone, with its
share of each limit: the limit divided among the pods alive, the remainder
to the first pods by the rank every pod computes the same way (their ids
in byte order). The tests count what the fleet admits and compare it with
the limit itself, not with a multiple of it.
"""

import os
import signal
import time
import unittest

from . import harness
from .harness import acquire_req
from .redis_util import Pods, redis_field, status, wait_backend


def wait_for(cond, deadline, what, log=None):
    return harness._wait_until(cond, deadline, what, log)


def all_count(cl, n):
    """Every daemon's heartbeat counted n pods."""
    wait_for(lambda: all(status(d)["redis"]["pods_seen"] == n for d in cl.daemons), 10.0,
             "%d pods seen by every daemon" % n)


@unittest.skipIf(harness.VALGRIND, "timing; run under ASan instead of valgrind")
class FallbackShareTest(unittest.TestCase):
    EXTRA = "redis_timeout = 100ms\n"

    def test_a_cap_of_two_holds_across_three_pods(self):
        conf = "[scope cap]\ncluster_concurrency = 2\nlease_ttl = 30s\ntimeout = 200ms\n"
        with Pods(conf, n=3, admitd_extra=self.EXTRA) as cl:
            all_count(cl, 3)
            cl.redis.stop()
            for d in cl.daemons:
                wait_backend(d, "fallback", 5)
            held, refusals = [], []
            for d in cl.daemons:
                with d.connect() as c:
                    for _ in range(3):
                        r = c.request(acquire_req("cap", "k", detach=True, timeout_ms=0))
                        (held if r.get("ok") else refusals).append((d, r))
            # before: each pod rounded 2/3 up to 1, and 3 leases were held
            self.assertEqual(len(held), 2, [r for _, r in held])
            self.assertEqual(len({d.pid for d, _ in held}), 2)  # shares 1, 1 and 0
            zero = [r for d, r in refusals if d.pid not in {h.pid for h, _ in held}]
            self.assertTrue(zero, refusals)
            for r in zero:
                self.assertEqual((r.get("error"), r.get("rule"), r.get("backend")),
                                 ("limited", "cluster_concurrency", "fallback"), r)
                self.assertIn("share", r.get("message", ""), r)
            # a wait for a share ends in timeout, never in "exceeds"
            d0 = [r for d, r in refusals if d.pid not in {h.pid for h, _ in held}]
            self.assertTrue(d0)

    def test_own_admissions_before_the_outage_count(self):
        conf = "[scope q]\nquota = 9/30s\ntimeout = 100ms\n"
        with Pods(conf, n=3, admitd_extra=self.EXTRA) as cl:
            all_count(cl, 3)
            before = 0
            for d in cl.daemons:
                with d.connect() as c:
                    r = c.request(acquire_req("q", "k", timeout_ms=0))
                    self.assertEqual((r.get("ok"), r.get("backend")), (True, "redis"), r)
                    before += 1
            cl.redis.stop()
            for d in cl.daemons:
                wait_backend(d, "fallback", 5)
            during = {}
            for d in cl.daemons:
                with d.connect() as c:
                    during[d.pid] = sum(
                        bool(c.request(acquire_req("q", "k", timeout_ms=0)).get("ok"))
                        for _ in range(6))
            # each pod's share is 3, and it spent 1 of it through Redis: the
            # window holds 9 in all (before: 3 + 9 = 12 in the fallback alone)
            self.assertEqual(sorted(during.values()), [2, 2, 2], during)
            self.assertEqual(before + sum(during.values()), 9)

    def test_a_token_bucket_share_adds_up(self):
        conf = "[scope tb]\nrule = requests token-bucket 10/1h\ntimeout = 100ms\n"
        with Pods(conf, n=3, admitd_extra=self.EXTRA) as cl:
            all_count(cl, 3)
            cl.redis.stop()
            for d in cl.daemons:
                wait_backend(d, "fallback", 5)
            got = []
            for d in cl.daemons:
                with d.connect() as c:
                    got.append(sum(bool(c.request(acquire_req("tb", "k", timeout_ms=0))
                                        .get("ok")) for _ in range(6)))
            self.assertEqual(sorted(got), [3, 3, 4], got)  # 10 = 4 + 3 + 3


@unittest.skipIf(harness.VALGRIND, "timing; run under ASan instead of valgrind")
class WriteBackTest(unittest.TestCase):
    EXTRA = "redis_timeout = 100ms\n"

    def test_an_empty_redis_learns_what_the_fallback_spent(self):
        conf = "[scope q]\nquota = 9/30s\ntimeout = 100ms\n"
        with Pods(conf, n=3, admitd_extra=self.EXTRA) as cl:
            all_count(cl, 3)
            cl.redis.stop()
            for d in cl.daemons:
                wait_backend(d, "fallback", 5)
            spent = 0
            for d in cl.daemons:
                with d.connect() as c:
                    spent += sum(bool(c.request(acquire_req("q", "k", timeout_ms=0)).get("ok"))
                                 for _ in range(5))
            self.assertEqual(spent, 9)  # the shares: 3 + 3 + 3
            cl.redis.restart()  # empty: it never heard of those 9
            for d in cl.daemons:
                wait_backend(d, "redis", 5)
            self.assertEqual(int(cl.redis.command("ZCARD", "admitd:{q:k}:q")), 9)
            for d in cl.daemons:
                self.assertIn("fallback admissions written back", d.stderr_text())
            # a pod that never saw the outage is refused what the fallback spent
            late = harness.Admitd("[admitd]\n" + self.EXTRA + conf, redis_url=cl.redis.url)
            with late:
                with late.connect() as c:
                    r = c.request(acquire_req("q", "k", timeout_ms=0))
                    self.assertEqual((r.get("ok"), r.get("backend"), r.get("rule")),
                                     (False, "redis", "quota 9/30s"), r)

    def through_an_empty_redis(self, conf, scope, rkey):
        """3 pods: one admission each through Redis, Redis stopped, the
        fallback's shares spent, Redis back empty. Returns what the fleet
        admitted in the window, counting a pod that never saw the outage,
        and the restarted Redis's count for rkey."""
        with Pods(conf, n=3, admitd_extra=self.EXTRA) as cl:
            all_count(cl, 3)
            admitted = 0
            for d in cl.daemons:
                with d.connect() as c:
                    r = c.request(acquire_req(scope, "k", timeout_ms=0))
                    self.assertEqual((r.get("ok"), r.get("backend")), (True, "redis"), r)
                    admitted += 1
            cl.redis.stop()
            for d in cl.daemons:
                wait_backend(d, "fallback", 5)
            for d in cl.daemons:
                with d.connect() as c:
                    admitted += sum(bool(c.request(acquire_req(scope, "k", timeout_ms=0))
                                         .get("ok")) for _ in range(6))
            cl.redis.restart()  # empty: it never heard of any of them
            for d in cl.daemons:
                wait_backend(d, "redis", 5)
            lost = sum(status(d)["redis"]["found_lost"] for d in cl.daemons)
            self.assertEqual(lost, 3)  # each pod found the key lost, or its flag
            held = rkey(cl.redis)
            late = harness.Admitd("[admitd]\n" + self.EXTRA + conf, redis_url=cl.redis.url)
            with late:
                with late.connect() as c:
                    for _ in range(3):
                        r = c.request(acquire_req(scope, "k", timeout_ms=0))
                        admitted += bool(r.get("ok"))
                        self.assertEqual(r.get("backend"), "redis", r)
            for d in cl.daemons:
                with d.connect() as c:
                    r = c.request(acquire_req(scope, "k", timeout_ms=0))
                    admitted += bool(r.get("ok"))
            return admitted, held

    def test_a_quota_window_holds_through_an_empty_redis(self):
        # before: 3 through Redis + 6 in fallback + 9 from the empty Redis
        conf = "[scope q]\nquota = 9/30s\ntimeout = 100ms\n"
        admitted, held = self.through_an_empty_redis(
            conf, "q", lambda r: int(r.command("ZCARD", "admitd:{q:k}:q")))
        self.assertEqual(held, 9)  # 6 by the fallback, 3 before the outage
        self.assertLessEqual(admitted, 9 + 1)

    def test_a_fixed_window_rule_holds_through_an_empty_redis(self):
        conf = "[scope fw]\nrule = requests fixed-window 9/1h\ntimeout = 100ms\n"
        admitted, held = self.through_an_empty_redis(
            conf, "fw", lambda r: redis_field(r, "admitd:{fw:k}:r0", "a"))
        self.assertEqual(int(held), 9, held)
        self.assertLessEqual(admitted, 9 + 1)

    def test_a_penalty_given_in_an_outage_reaches_redis(self):
        conf = "[scope p]\nmax_concurrent = 10\ntimeout = 100ms\n"
        with Pods(conf, n=2, admitd_extra=self.EXTRA) as cl:
            a, b = cl.daemons
            all_count(cl, 2)
            cl.redis.stop()
            wait_backend(a, "fallback", 5)
            with a.connect() as c:
                self.assertIs(c.request({"op": "penalize", "scope": "p", "key": "h",
                                         "retry_after_ms": 20000}).get("ok"), True)
            cl.redis.restart()
            wait_backend(a, "redis", 5)
            wait_backend(b, "redis", 5)
            with b.connect() as c:  # b never heard of it but through Redis
                r = c.request(acquire_req("p", "h", timeout_ms=0))
                self.assertEqual((r.get("ok"), r.get("rule"), r.get("backend")),
                                 (False, "penalty", "redis"), r)
                self.assertGreater(r["retry_after_ms"], 15000)


class QuotaCase(unittest.TestCase):
    """quota 30/1m on key k of scope q, over three pods."""
    EXTRA = "redis_timeout = 100ms\n"
    CONF = "[scope q]\nquota = 30/1m\ntimeout = 100ms\n"

    def admit(self, d, n, backend):
        """n acquires through d; how many were admitted (each by backend)."""
        got = 0
        with d.connect() as c:
            for _ in range(n):
                r = c.request(acquire_req("q", "k", timeout_ms=0))
                if r.get("ok"):
                    self.assertEqual(r.get("backend"), backend, r)
                    got += 1
        return got


@unittest.skipIf(harness.VALGRIND, "timing; run under ASan instead of valgrind")
class RefillingRegistryTest(QuotaCase):
    """A heartbeat that counts the pods while their registry in Redis is
    still filling (this pod's first beats, or Redis just restarted empty)
    misses pods that are alive and take their shares: it must not make
    this pod's share bigger. quota 30/1m: every pod admits 10 through Redis
    (the window is full, each pod's share spent by its own admissions),
    then the outage comes while one pod's last beat counted it alone."""
    def fallback_admits(self, cl):
        """Redis stopped: what every pod's fallback admits in the window."""
        cl.redis.stop()
        got = []
        for d in cl.daemons:
            d.proc.send_signal(signal.SIGCONT)  # a pod frozen below: alive again
            wait_backend(d, "fallback", 5)
            got.append(self.admit(d, 30, "fallback"))
        return got

    def test_a_count_from_an_emptied_registry_gives_no_bigger_share(self):
        with Pods(self.CONF, n=3, admitd_extra=self.EXTRA) as cl:
            d0, d1, d2 = cl.daemons
            all_count(cl, 3)
            for d in cl.daemons:
                self.assertEqual(self.admit(d, 10, "redis"), 10)
            for d in (d1, d2):  # they cannot beat: d0 comes back to Redis alone
                d.proc.send_signal(signal.SIGSTOP)
            cl.redis.restart()  # empty: no pod registered
            wait_for(lambda: status(d0)["backend"] == "redis" and
                     status(d0)["redis"]["pods_seen"] == 1 and
                     status(d0)["redis"]["owed"] == 0, 10.0, "d0 back alone, written back")
            got = self.fallback_admits(cl)
            # before: d0 divided by the 1 pod its beat counted, and its
            # share was the whole limit: 20 more in the window
            self.assertEqual(got, [0, 0, 0])

    def test_a_first_count_below_fallback_pods_gives_no_bigger_share(self):
        extra = self.EXTRA + "fallback_pods = 3\n"
        with Pods(self.CONF, n=3, admitd_extra=extra, start_daemons=False) as cl:
            d0, d1, d2 = cl.daemons
            d0.start()  # the first of the fleet: its first beat counts 1
            wait_for(lambda: status(d0)["redis"]["pods_seen"] == 1, 10.0, "d0 counted")
            self.assertEqual(self.admit(d0, 10, "redis"), 10)
            d0.proc.send_signal(signal.SIGSTOP)  # no beat to count the others
            d1.start()
            d2.start()
            wait_for(lambda: status(d2)["redis"]["pods_seen"] >= 2, 10.0, "d2 counted")
            for d in (d1, d2):
                self.assertEqual(self.admit(d, 10, "redis"), 10)
            got = self.fallback_admits(cl)
            # before: 20 by d0, whose share was the whole limit (and 5 by
            # a pod whose first beat counted 2)
            self.assertEqual(got, [0, 0, 0])


@unittest.skipIf(harness.VALGRIND, "timing; run under ASan instead of valgrind")
class ReloadInOutageTest(QuotaCase):
    """A reload that remakes the Redis backend while Redis is down (a
    redis_* key changed) makes a backend born in the outage: its fallback
    starts with each key's share spent, and hands out no fresh share."""

    def test_a_new_backend_in_an_outage_hands_out_no_fresh_share(self):
        with Pods(self.CONF, n=3, admitd_extra=self.EXTRA) as cl:
            d0 = cl.daemons[0]
            all_count(cl, 3)
            cl.redis.stop()
            wait_backend(d0, "fallback", 5)
            self.assertEqual(self.admit(d0, 30, "fallback"), 10)  # its share
            text = d0.conf_text.replace("redis_timeout = 100ms", "redis_timeout = 120ms")
            with open(d0.conf_path + ".tmp", "w") as f:
                f.write(text)
            os.rename(d0.conf_path + ".tmp", d0.conf_path)
            d0.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: "conf reloaded" in d0.stderr_text(), 10.0, "reloaded")
            self.assertIn("reconnecting to redis", d0.stderr_text())
            # before the born-down spending: a fresh share of 10 again
            self.assertEqual(self.admit(d0, 30, "fallback"), 0)


if __name__ == "__main__":
    unittest.main()
