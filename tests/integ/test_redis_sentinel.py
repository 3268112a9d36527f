"""test_redis_sentinel.py - admitd on a Sentinel-managed master.

Three daemons on redis+sentinel://S1,S2,S3/mymaster over a real master, a
replica and three sentinels (redis_deploy.SentinelDeploy: quorum 2,
down-after-milliseconds 1000). Under load (4 clients per daemon, 300ms
budgets, a rolling quota) the master changes twice:
- SENTINEL FAILOVER (graceful: the old master still calls itself master
  for a moment, and admitd must move to the new one, not keep writing to
  the old);
- kill -9 of the master (no master is known until the sentinels agree).
Each time: every request is answered within its budget and none with an
error; replies say "redis" again within 5 s of the promotion; new writes
land on the new master (status names it); admissions stay within the limit
plus one fallback budget (fallback_divisor = the three pods, so the three
fallbacks together admit one limit's worth per window). Redis replicates
asynchronously: what the old master booked in its last moments may be lost
and granted again, which is what that allowance covers.
A sentinel that stops answering (SIGSTOP of the one subscribed to) is
noticed by PING within two seconds, left for another, and the next
failover is heard there.
Also: sentinels that require AUTH (sentinel_password_file), and
`admitd -t` on malformed sentinel URLs and an empty master name.

Run: ADMITD_BIN=daemon/admitd python3 -m unittest tests.integ.test_redis_sentinel -v
"""

import re
import time
import types
import unittest

from . import harness
from .harness import late_allowance, now
from .redis_deploy import ConfCheckMixin, SentinelDeploy, role, start_pods, what_is_missing
from .redis_util import (LAG, Pods, key_name, load, per_window, span_excess, status,
                         wait_backend, window_excess, write_secret)

MISSING = what_is_missing("sentinel")

Q, W, PODS = 30, 1.0, 3

CONF = """
[scope q]
quota = 30/1s
fallback_divisor = 3
timeout = 30s

[scope big]
quota = 100000/1h
timeout = 30s
"""

EXTRA = "redis_timeout = 100ms\n"


def evalsha_calls(server):
    """Script calls (EVALSHA and FCALL) server has run (executed, not
    rejected), or None when it does not answer."""
    try:
        text = server.command("INFO", "commandstats")
    except (OSError, ConnectionError, harness.RedisError):
        return None
    n = 0
    for line in text.splitlines():
        if line.startswith(("cmdstat_evalsha:", "cmdstat_fcall:")):
            n += int(line.split("calls=")[1].split(",")[0])
    return n


def failover_under_load(test, sd, kind, pods, settle=6.0):
    """Load on scope q through pods while the master changes (kind
    "failover": SENTINEL FAILOVER; "kill": kill -9 of the master). Returns
    (replies of redis_util.load, old master, new master, instant the fault
    began, instant the promotion was seen, {seconds after the promotion:
    EVALSHA calls the old master had run by then}, sampled each 0.5 s while
    it answers)."""
    ts = {}

    def control():
        time.sleep(1.0)
        old, t0 = sd.failover() if kind == "failover" else sd.kill_master()
        new, t1 = sd.wait_promoted(old)
        ts.update(old=old, new=new, t0=t0, t1=t1, old_calls={})
        while True:
            dt = now() - t1
            ts["old_calls"][round(dt, 2)] = evalsha_calls(old) if old.proc else None
            if dt >= settle:
                break
            time.sleep(min(0.5, settle - dt))

    replies, _ = load(test, pods, "q", control, per_daemon=4, budget_ms=300)
    return replies, ts["old"], ts["new"], ts["t0"], ts["t1"], ts["old_calls"]


def brackets(replies, daemon=None, backend=None):
    return [(ts + r["waited_ms"] / 1000.0 - LAG, tr) for d, ts, tr, r, _ in replies
            if r.get("ok") and (daemon is None or d == daemon)
            and (backend is None or r.get("backend") == backend)]


@unittest.skipIf(MISSING, MISSING or "")
@unittest.skipIf(harness.VALGRIND, "timing invariants; run under ASan instead of valgrind")
class FailoverTest(unittest.TestCase):
    """One deployment for the class (sentinels take ~7 s to know each
    other); each test heals it first (a killed master comes back as a
    replica)."""

    @classmethod
    def setUpClass(cls):
        cls.sd = SentinelDeploy()
        cls.sd.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.sd.cleanup(failed=False)

    def pods(self):
        return start_pods(self, CONF, self.sd, n=PODS, extra=EXTRA,
                         keep=lambda: self.sd.servers + self.sd.sentinels)

    def check_switch(self, p, replies, old, new, t_prom):
        t_end = max(x[2] for x in replies)
        back_by = 5.0 + late_allowance(t_prom, t_end)
        for d, t_send, t_recv, r, _ in replies:
            if r.get("ok") or "backend" in r:
                self.assertIn(r.get("backend"), ("redis", "fallback"), r)
            # 5 s after the promotion: shared state again, everywhere.
            if t_send > t_prom + back_by and (r.get("ok") or "backend" in r):
                self.assertEqual(r.get("backend"), "redis", r)
        for i in range(len(p.daemons)):
            back = [tr for d, ts, tr, r, _ in replies
                    if d == i and ts > t_prom and r.get("backend") == "redis"]
            self.assertTrue(back, "daemon %d never went back to redis" % i)
            self.assertLess(min(back) - t_prom, back_by, i)
        # The limit plus one fallback budget: Redis admits Q per window, the
        # three fallbacks Q / 3 each.
        self.assertIsNone(span_excess(brackets(replies), per_window(2 * Q, W, extra=1)))
        # Liveness: the limit was reached before and after the switch.
        self.assertGreaterEqual(len(brackets(replies, backend="redis")), 3 * Q)
        # New writes land on the new master: 5 through each daemon, all
        # booked there.
        key = "after-%d" % new.port
        for d in p.daemons:
            with d.connect() as c:
                for _ in range(5):
                    r = c.request(harness.acquire_req("big", key, timeout_ms=0))
                    self.assertIs(r.get("ok"), True, r)
                    self.assertEqual(r.get("backend"), "redis", r)
                    c.request({"op": "release", "lease": r["lease"]})
            topo = status(d)["redis"]["topology"]
            self.assertEqual([x["addr"] for x in topo["nodes"]], ["127.0.0.1:%d" % new.port],
                             topo)
        self.assertEqual(role(new), "master")
        self.assertEqual(new.command("ZCARD", key_name("admitd", "big", key, "q")), 5 * PODS)
        return window_excess(brackets(replies), W, Q)

    def test_status_names_the_master(self):
        m = self.sd.heal()
        p = start_pods(self, CONF, self.sd, extra=EXTRA,
                      keep=lambda: self.sd.servers + self.sd.sentinels)
        d = p.daemons[0]
        topo = status(d)["redis"]["topology"]
        self.assertEqual(topo["kind"], "sentinel", topo)
        self.assertEqual([x["addr"] for x in topo["nodes"]], ["127.0.0.1:%d" % m.port], topo)
        self.assertEqual(topo["nodes"][0]["state"], "ready", topo)

    def test_sentinel_failover_under_load(self):
        self.sd.heal()
        p = self.pods()
        replies, old, new, t0, t_prom, old_calls = failover_under_load(
            self, self.sd, "failover", p, settle=7.0)
        self.assertTrue(p.alive(), p.logs())
        self.assertNotEqual(old.port, new.port)
        self.check_switch(p, replies, old, new, t_prom)
        # admitd moved: 5 s after the promotion, the old master (which still
        # calls itself master until the sentinels announce the switch, ~1 s
        # after the promotion, and demote it) runs no more of its calls.
        later = sorted((dt, n) for dt, n in old_calls.items()
                       if n is not None and dt >= 5.0 + min(1.0, late_allowance(t_prom)))
        self.assertGreaterEqual(len(later), 2, sorted(old_calls.items()))
        self.assertEqual(later[-1][1], later[0][1],
                         "the old master ran admitd's calls 5 s after the promotion: %s"
                         % sorted(old_calls.items()))
        # The old master is demoted in the end (the sentinels do it after
        # announcing the switch).
        harness._wait_until(lambda: role(old) == "slave", 30.0, "the old master demoted",
                            self.sd.logs)

    def test_master_kill9_under_load(self):
        self.sd.heal()
        p = self.pods()
        replies, old, new, t_kill, t_prom, _ = failover_under_load(self, self.sd, "kill", p)
        self.assertTrue(p.alive(), p.logs())
        self.assertIsNone(old.proc)
        self.check_switch(p, replies, old, new, t_prom)
        # While no master answered (after one redis_timeout, before the
        # promotion was seen), what was admitted was the fallback's.
        for d, t_send, t_recv, r, _ in replies:
            if r.get("ok") and t_send > t_kill + 0.1 + harness.SLACK and t_recv < t_prom:
                self.assertEqual(r.get("backend"), "fallback", r)


@unittest.skipIf(MISSING, MISSING or "")
class SentinelAuthTest(unittest.TestCase):
    """Sentinels that require AUTH: sentinel_password_file opens them; without
    it no master is known and fail_mode serves."""

    def test_sentinel_password_file(self):
        secret = "sentinel-pw-plugh"
        with SentinelDeploy(sentinel_password=secret, converge=False) as sd:
            pw = write_secret(sd.sentinels[0].tmp.path, "spw", secret)
            slow = "redis_timeout = 2s\n" if harness.VALGRIND else ""
            good = slow + "sentinel_password_file = %s\n" % pw
            with Pods(CONF, n=1, admitd_extra=good, redis=sd, start_redis=False) as p:
                d = p.daemons[0]
                wait_backend(d, "redis", 10.0)
                with d.connect() as c:
                    r = c.request(harness.acquire_req("big", "auth", timeout_ms=0))
                    self.assertEqual(r.get("backend"), "redis", r)
                self.assertEqual(sd.master().command(
                    "ZCARD", key_name("admitd", "big", "auth", "q")), 1)
                self.assertNotIn(secret, d.stderr_text())
            with Pods(CONF, n=1, admitd_extra=slow, redis=sd, start_redis=False) as p:
                d = p.daemons[0]
                t0 = now()
                with d.connect() as c:
                    # Never on Redis: every answer the fallback's, for 1.5 s.
                    while now() < t0 + 1.5:
                        r = c.request(harness.acquire_req("big", "noauth", timeout_ms=0))
                        self.assertEqual(r.get("backend"), "fallback", r)
                        time.sleep(0.1)
                self.assertEqual(status(d)["backend"], "fallback")
                self.assertEqual(sd.master().command(
                    "EXISTS", key_name("admitd", "big", "noauth", "q")), 0)


    def test_data_node_password_in_the_url(self):
        # The URL's password is the master's (the sentinels here need none):
        # given, the master is used; left out, the master refuses (NOAUTH)
        # and fail_mode serves.
        secret = "data-pw-xyzzy"
        with SentinelDeploy(redis_password=secret, converge=False) as sd:
            slow = "redis_timeout = 2s\n" if harness.VALGRIND else ""
            hosts = ",".join(x.addr for x in sd.sentinels)
            with_pw = types.SimpleNamespace(
                url="redis+sentinel://:%s@%s/%s" % (secret, hosts, sd.NAME))
            with Pods(CONF, n=1, admitd_extra=slow, redis=with_pw, start_redis=False) as p:
                d = p.daemons[0]
                wait_backend(d, "redis", 10.0)
                with d.connect() as c:
                    r = c.request(harness.acquire_req("big", "pw", timeout_ms=0))
                    self.assertEqual(r.get("backend"), "redis", r)
                self.assertEqual(sd.master().command(
                    "ZCARD", key_name("admitd", "big", "pw", "q")), 1)
                log = d.stderr_text()
            with Pods(CONF, n=1, admitd_extra=slow, redis=sd, start_redis=False) as p:
                d = p.daemons[0]
                t0 = now()
                with d.connect() as c:
                    while now() < t0 + 1.0:
                        r = c.request(harness.acquire_req("big", "nopw", timeout_ms=0))
                        self.assertEqual(r.get("backend"), "fallback", r)
                        time.sleep(0.1)
                self.assertEqual(sd.master().command(
                    "EXISTS", key_name("admitd", "big", "nopw", "q")), 0)
        # The password is never logged (the URL in a log line hides it).
        self.assertNotIn(secret, log)


_SUBSCRIBED = re.compile(r'msg="sentinel subscribed" sentinel=127\.0\.0\.1:(\d+)')


@unittest.skipIf(MISSING, MISSING or "")
@unittest.skipIf(harness.VALGRIND, "timing bounds; run under ASan instead of valgrind")
class SentinelVanishTest(unittest.TestCase):
    """The sentinel the daemon is subscribed to stops (SIGSTOP: its sockets
    stay open and TCP says nothing). The daemon must notice by its PINGs,
    subscribe to another sentinel, and hear the next failover there."""

    def test_stopped_sentinel_is_left_and_failover_followed(self):
        with SentinelDeploy() as sd:
            p = start_pods(self, CONF, sd, n=1, extra=EXTRA,
                           keep=lambda: sd.servers + sd.sentinels)
            d = p.daemons[0]

            def subscribed():
                ports = _SUBSCRIBED.findall(d.stderr_text())
                return [int(x) for x in ports]

            harness._wait_until(subscribed, 10.0, "sentinel subscribed", d.stderr_text)
            first = subscribed()[-1]
            gone = next(x for x in sd.sentinels if x.port == first)
            gone.pause()
            t0 = now()
            stopped = 'msg="sentinel stopped answering: subscribing to the next one" ' \
                      'sentinel=127.0.0.1:%d' % first
            harness._wait_until(lambda: stopped in d.stderr_text(), 10.0, stopped,
                                d.stderr_text)
            t1 = now()
            # A PING a second, each answered within the next: noticed within
            # two intervals of the stop.
            self.assertLess(t1 - t0, 2.0 + 0.1 + late_allowance(t0, t1), d.stderr_text())
            harness._wait_until(lambda: len(subscribed()) >= 2, 5.0, "subscribed again",
                                d.stderr_text)
            now_on = subscribed()[-1]
            self.assertNotEqual(now_on, first)
            self.assertIn(now_on, [x.port for x in sd.sentinels])
            # A failover asked of a running sentinel is followed through the
            # new subscription (its events, not a new question after a failed
            # write), and new writes land on the new master.
            # (sd.master() asks every sentinel, the stopped one too.)
            old = next(x for x in sd.servers if role(x) == "master")
            asker = next(x for x in sd.sentinels if x is not gone)
            asker.command("SENTINEL", "FAILOVER", sd.NAME)
            new, t_prom = sd.wait_promoted(old)
            moved = re.compile(r'msg="redis master changed" from=127\.0\.0\.1:%d '
                               r'to=127\.0\.0\.1:%d reason=(selected-slave|switch-master)'
                               % (old.port, new.port))
            harness._wait_until(lambda: moved.search(d.stderr_text()), 10.0,
                                "the switch heard on the subscription", d.stderr_text)

            def on_new():
                topo = status(d)["redis"]["topology"]
                return [x["addr"] for x in topo["nodes"]] == ["127.0.0.1:%d" % new.port] \
                    and status(d)["backend"] == "redis"
            harness._wait_until(on_new, 10.0, "the daemon on the new master", d.stderr_text)
            with d.connect() as c:
                r = c.request(harness.acquire_req("big", "vanish", timeout_ms=0))
            self.assertEqual(r.get("backend"), "redis", r)
            self.assertEqual(new.command("ZCARD", key_name("admitd", "big", "vanish", "q")), 1)
            self.assertTrue(p.alive(), p.logs())


@unittest.skipIf(MISSING, MISSING or "")
class SentinelConfTest(ConfCheckMixin, unittest.TestCase):

    def conf(self, url, extra=""):
        return "[admitd]\nredis = %s\n%s\n[scope s]\nquota = 1/1s\n" % (url, extra)

    def test_good_urls(self):
        for url in ("redis+sentinel://127.0.0.1:26379,127.0.0.1:26380,127.0.0.1:26381/mymaster",
                    "redis+sentinel://127.0.0.1:26379/mymaster",
                    "redis+sentinel://alice:pw@127.0.0.1:26379,127.0.0.1:26380/mymaster?db=2",
                    "redis+sentinel://127.0.0.1:26379/mymaster?tls=1"):
            with self.subTest(url=url):
                self.assertConfOk(self.conf(url))

    def test_empty_master_name(self):
        for url in ("redis+sentinel://127.0.0.1:26379/",
                    "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/?db=1",
                    "redis+sentinel://127.0.0.1:26379"):
            with self.subTest(url=url):
                self.assertConfError(self.conf(url), 2, "master")

    def test_malformed(self):
        for url in ("redis+sentinel:///mymaster",
                    "redis+sentinel://127.0.0.1:notaport/mymaster",
                    "redis+sentinel://127.0.0.1:26379,,127.0.0.1:26380/mymaster",
                    "redis+sentinel://127.0.0.1:70000/mymaster",
                    "redis+sentinel://127.0.0.1:26379/mymaster?db=x",
                    "redis+sentinel://127.0.0.1:26379/mymaster?nosuchkey=1"):
            with self.subTest(url=url):
                self.assertConfError(self.conf(url), 2, "redis")


if __name__ == "__main__":
    unittest.main()
