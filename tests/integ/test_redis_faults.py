"""test_redis_faults.py - admitd's Redis backend when things go wrong.

A pod killed while holding leases, Redis stopped, frozen (SIGSTOP) or
flushed under load, error replies (ACL denial, out of memory), admitd
started before its Redis, penalize across pods, Redis memory returning to
its baseline, and fallback_divisor = auto. Instants are recorded as in
redis_util.py (its header says what each bracket means); stages of a fault
(stop Redis, restart it) are driven by a control thread next to the load.

Run: ADMITD_BIN=daemon/admitd python3 -m unittest tests.integ.test_redis_faults -v
"""

import time
import unittest

from . import harness
from .harness import (EPS, IO_TIMEOUT, SLACK, RedisServer, acquire_req, late_allowance, now,
                      run_clients)
from .redis_util import (BUDGET_SLACK, LAG, Pods, budget_late_ok, key_name, load, per_window,
                         span_excess, status, wait_backend, wait_redis_field, write_secret)

TIMEOUT_CONF = "redis_timeout = 100ms\n"


# Under valgrind the daemon runs 20-50x slower: Redis calls overrun
# redis_timeout and the fallback decides, so these timing invariants would
# measure valgrind, not admitd. `make valgrind` skips them; the same code
# paths run under ASan+UBSan in `make test SANITIZE=1`.
@unittest.skipIf(harness.VALGRIND, "timing invariants; run under ASan instead of valgrind")
class FaultCase(unittest.TestCase):

    def load(self, cl, scope, control, per_daemon=4, budget_ms=300):
        """redis_util.load on key "k": replies as (daemon, t_send, t_recv,
        reply) sorted by t_recv, and control's result."""
        replies, res = load(self, cl, scope, control, per_daemon, budget_ms)
        return [x[:4] for x in replies], res

    def check_outage(self, cl, replies, t_down, t_back, per_daemon_budget, window):
        """The outage invariants: fallback admissions within each daemon's
        budget, "fallback" while Redis was gone, "redis" again within 2 s of
        it answering (t_back; the reconnect backoff is capped at 1 s), plus
        the stalls of this process measured meanwhile."""
        adm = [x for x in replies if x[3].get("ok")]
        t_end = max(x[2] for x in replies)
        back_by = 2.0 + late_allowance(t_back, t_end)
        for d, t_send, t_recv, r in adm:
            self.assertIn(r.get("backend"), ("redis", "fallback"), r)
            # Sent after Redis was gone and answered before it was back.
            if t_send > t_down and t_recv < t_back:
                self.assertEqual(r.get("backend"), "fallback", r)
            # Sent 2 s after Redis was back: shared state again.
            if t_send > t_back + back_by:
                self.assertEqual(r.get("backend"), "redis", r)
        for i in range(len(cl.daemons)):
            fb = [(ts + r["waited_ms"] / 1000.0 - LAG, tr)
                  for d, ts, tr, r in adm if d == i and r["backend"] == "fallback"]
            # The in-process limiter with the scope's limits / divisor.
            self.assertIsNone(span_excess(fb, per_window(per_daemon_budget, window)), i)
            # ... and it did serve (the outage lasted 2 windows).
            self.assertGreaterEqual(len(fb), per_daemon_budget, i)
            # Refusals say which limiter decided too ("backend"), so the
            # first reply of any kind decided by Redis counts.
            back = [tr for d, ts, tr, r in replies
                    if d == i and ts > t_back and r.get("backend") == "redis"]
            self.assertTrue(back, "daemon %d never went back to redis" % i)
            self.assertLess(min(back) - t_back, back_by)


class LeaseTest(FaultCase):

    def test_kill9_holder_slots_return_at_lease_ttl(self):
        ttl = 1.0
        conf = "[scope cc]\ncluster_concurrency = 2\nlease_ttl = 1s\ntimeout = 10s\n"
        with Pods(conf) as cl:
            a = cl.daemons[0]
            held = []
            for _ in range(2):
                c = a.connect()
                t_send = now()
                r = c.request(acquire_req("cc", "k"))
                self.assertIs(r.get("ok"), True, r)
                self.assertEqual(r.get("backend"), "redis", r)
                held.append((t_send, c.last_t))
            # Both cluster slots are taken: the others are refused.
            for d in cl.daemons[1:]:
                with d.connect() as c:
                    r = c.request(acquire_req("cc", "k", timeout_ms=0))
                    self.assertEqual(r.get("error"), "limited", r)
                    self.assertEqual(r.get("rule"), "cluster_concurrency", r)
            a.kill9()

            def waiter(i):
                c = cl.daemons[1 + i].connect()
                try:
                    t = now()
                    r = c.request(acquire_req("cc", "k", timeout_ms=5000), timeout=5 + IO_TIMEOUT)
                    self.assertIs(r.get("ok"), True, r)
                    # admitted within [t + waited_ms, reply read]
                    return t + r["waited_ms"] / 1000.0, c.last_t
                finally:
                    c.close()

            got = run_clients(2, waiter)
            his = sorted(hi for _, hi in got)
            los = sorted(lo for lo, _ in got)
            for (t_send, t_recv), hi, lo in zip(held, his, los):
                # Not before the lease's deadline (admission + lease_ttl) ...
                self.assertGreaterEqual(hi - t_send, ttl - EPS)
                # ... and within lease_ttl + 10% of it (the waiters' polls are
                # bounded by the earliest deadline, so they land on it), by
                # the daemon's own wait, plus the stalls measured meanwhile.
                self.assertLess(lo - t_recv, ttl * 1.1 + late_allowance(t_recv, hi))
            for d in cl.daemons[1:]:
                self.assertIsNone(d.proc.poll(), d.stderr_text())


class OutageTest(FaultCase):
    CONF = "[scope q]\nquota = 20/1s\nfallback_divisor = 2\ntimeout = 30s\n"

    def test_redis_stopped_under_load(self):
        with Pods(self.CONF, admitd_extra=TIMEOUT_CONF) as cl:
            def control():
                time.sleep(1.0)  # load runs on Redis first
                cl.redis.stop()
                t_down = now()
                for d in cl.daemons:
                    wait_backend(d, "fallback", IO_TIMEOUT)
                time.sleep(max(0.0, 2.0 - (now() - t_down)))  # a 2 s outage (at least)
                cl.redis.restart()
                t_back = now()
                time.sleep(3.0)
                return t_down, t_back

            replies, (t_down, t_back) = self.load(cl, "q", control)
            self.assertTrue(cl.alive(), cl.logs())
        self.check_outage(cl, replies, t_down, t_back, 10, 1.0)

    # Waiting budgets while Redis is frozen: a waiter whose deadline passes
    # while its call is in flight and which the fallback then admits is
    # given straight back; this once sent the same waiter twice (a
    # use-after-free, fixed in waitq_decided). The test keeps that path hot.
    def test_redis_frozen_under_load(self):
        with Pods(self.CONF, admitd_extra=TIMEOUT_CONF) as cl:
            def control():
                time.sleep(1.0)
                t_down = now()
                cl.redis.pause()
                for d in cl.daemons:
                    # redis_timeout (100ms) notices; status follows.
                    wait_backend(d, "fallback", IO_TIMEOUT)
                time.sleep(max(0.0, 2.0 - (now() - t_down)))
                cl.redis.resume()
                t_back = now()
                time.sleep(3.0)
                return t_down, t_back

            replies, (t_down, t_back) = self.load(cl, "q", control)
            self.assertTrue(cl.alive(), cl.logs())
        # While frozen, a request may still be answered from Redis's last
        # replies before the freeze: check "fallback" only from one
        # redis_timeout after the freeze.
        self.check_outage(cl, replies, t_down + 0.1 + SLACK, t_back, 10, 1.0)

    def test_function_flush_under_load(self):
        # FCALL (the default on Redis 7): "Function not found" is answered
        # by loading the library again and one retry
        self.flush_under_load("", "FUNCTION", "redis function not found: loading the library")

    def test_script_flush_under_load(self):
        # EVALSHA (redis_functions = no, or Redis 6): NOSCRIPT is answered
        # by SCRIPT LOAD and one retry
        self.flush_under_load("redis_functions = no\n", "SCRIPT", "NOSCRIPT")

    def flush_under_load(self, extra, what, logged):
        conf = "[scope tb]\nrule = requests token-bucket 50/1s burst=10\n"
        with Pods(conf, admitd_extra=extra) as cl:
            def control():
                for _ in range(5):
                    time.sleep(0.4)
                    self.assertEqual(cl.redis.command(what, "FLUSH"), "OK")
                time.sleep(0.4)

            replies, _ = self.load(cl, "tb", control)
            self.assertTrue(cl.alive(), cl.logs())
            logs = cl.logs()
            for d in cl.daemons:
                for sc in status(d)["scopes"].values():
                    self.assertEqual(sc["fallback_admitted"], 0, logs)
        adm = [x for x in replies if x[3].get("ok")]
        self.assertGreater(len(adm), 50)
        for _, _, _, r in adm:
            self.assertEqual(r.get("backend"), "redis", r)
        for _, _, _, r in replies:
            # The limit's own refusals only: waiting clients of three pods
            # compete for one bucket, so a wait can end in budget_exceeded
            # or timeout; never unavailable or an error of the backend.
            if not r.get("ok"):
                self.assertIn(r.get("error"), ("limited", "budget_exceeded", "timeout"), r)
                # A waiter that timed out before it ever reached the head of
                # its daemon's queue (and whose head had not been refused
                # yet) names the queue it waited in: that is what kept it.
                if r.get("error") == "timeout" and r.get("rule") == "queue":
                    continue
                self.assertEqual(r.get("rule"), "requests token-bucket 50/1s burst=10", r)
        # The flush was met and answered by a reload, never by an error.
        self.assertIn(logged, logs)
        self.assertNotIn("redis error reply", logs)
        self.assertNotIn("redis call failed", logs)


class ErrorReplyTest(FaultCase):
    """An error reply is never read as admitted: fail_mode decides."""

    QUOTA = "[scope q]\nquota = 5/1h\n"

    def probe(self, d, scope, n, key="k"):
        out = []
        with d.connect() as c:
            for _ in range(n):
                out.append(c.request(acquire_req(scope, key, timeout_ms=0)))
        return out

    def assertFallbackQuota(self, replies, q=5):
        for r in replies[:q]:
            self.assertIs(r.get("ok"), True, r)
            self.assertEqual(r.get("backend"), "fallback", r)
        for r in replies[q:]:
            self.assertEqual(r.get("error"), "limited", r)
            self.assertEqual(r.get("rule"), "quota %d/1h" % q, r)

    def test_acl_denial_takes_fallback(self):
        secret = "s3cret-pw-xyzzy"
        with RedisServer() as redis:
            redis.command("ACL", "SETUSER", "lim", "on", ">" + secret, "~*", "&*", "+@all",
                          "-evalsha", "-eval", "-fcall")
            pw = write_secret(redis.tmp.path, "pw", secret)
            extra = "redis_user = lim\nredis_password_file = %s\n" % pw
            with Pods(self.QUOTA, n=1, admitd_extra=extra, redis=redis,
                         start_redis=False) as cl:  # started above, with the ACL user
                d = cl.daemons[0]
                # Connected and authenticated (SCRIPT LOAD is allowed) ...
                wait_backend(d, "redis", 5.0)
                # ... but every EVALSHA and FCALL is denied: served by the fallback.
                self.assertFallbackQuota(self.probe(d, "q", 8))
                self.assertEqual(status(d)["scopes"]["q"]["fallback_admitted"], 5)
                log = d.stderr_text()
                self.assertIn("NOPERM", log)
                self.assertNotIn(secret, log)

    def test_functions_denied_use_evalsha(self):
        # An ACL without FUNCTION (or a Redis 6): the scripts run by EVALSHA,
        # still decided by Redis
        secret = "s3cret-pw-plugh"
        with RedisServer() as redis:
            redis.command("ACL", "SETUSER", "nf", "on", ">" + secret, "~*", "&*", "+@all",
                          "-function", "-fcall")
            pw = write_secret(redis.tmp.path, "pw", secret)
            extra = "redis_user = nf\nredis_password_file = %s\n" % pw
            with Pods(self.QUOTA, n=1, admitd_extra=extra, redis=redis,
                      start_redis=False) as cl:
                d = cl.daemons[0]
                wait_backend(d, "redis", 5.0)
                got = self.probe(d, "q", 6)
                self.assertEqual([r.get("backend") for r in got[:5]], ["redis"] * 5, got)
                self.assertEqual((got[5].get("error"), got[5].get("backend")),
                                 ("limited", "redis"), got[5])
                self.assertIn("redis functions unavailable: calls use EVALSHA", d.stderr_text())
                calls = {}
                for line in redis.command("INFO", "commandstats").splitlines():
                    if line.startswith("cmdstat_"):
                        name, rest = line[len("cmdstat_"):].split(":", 1)
                        calls[name] = int(rest.split("calls=")[1].split(",")[0])
                self.assertGreaterEqual(calls.get("evalsha", 0), 6, calls)
                self.assertEqual(calls.get("fcall", 0), 0, calls)

    def test_script_error_takes_fallback(self):
        with Pods(self.QUOTA, n=1) as cl:
            d = cl.daemons[0]
            wait_backend(d, "redis", 5.0)
            # The quota zset is a string: the script's ZREMRANGEBYSCORE on it
            # fails with WRONGTYPE, a script error reply.
            cl.redis.command("SET", key_name("admitd", "q", "k", "q"), "not a zset")
            self.assertFallbackQuota(self.probe(d, "q", 8))
            self.assertEqual(status(d)["scopes"]["q"]["fallback_admitted"], 5)
            self.assertIn("WRONGTYPE", d.stderr_text())
            # Other keys of the scope are still decided by Redis.
            r = self.probe(d, "q", 1, key="fine")[0]
            self.assertEqual(r.get("backend"), "redis", r)

    def test_oom_never_admits_unlimited(self):
        # Redis lets a script that has already written go on past maxmemory
        # (it must not stop half-way), and acquire.lua's first command is a
        # write (ZREMRANGEBYSCORE): so acquires may still run in Redis.
        # Penalize (HGET, then HSET) and the heartbeat (ZADD first) do get
        # the OOM error reply. Either way: nothing goes unlimited.
        with Pods(self.QUOTA, n=1) as cl:
            d = cl.daemons[0]
            wait_backend(d, "redis", 5.0)
            cl.redis.command("CONFIG", "SET", "maxmemory-policy", "noeviction")
            cl.redis.command("CONFIG", "SET", "maxmemory", "1")
            with d.connect() as c:
                r = c.request({"op": "penalize", "scope": "q", "key": "p",
                               "retry_after_ms": 50})
                self.assertIs(r.get("ok"), True, r)
            end = now() + IO_TIMEOUT  # the heartbeat (every 1 s) meets OOM
            while "OOM" not in d.stderr_text():
                self.assertLess(now(), end, d.stderr_text())
                time.sleep(0.02)
            rs = self.probe(d, "q", 8)
            self.assertEqual([r.get("ok") for r in rs], [True] * 5 + [False] * 3, rs)
            for r in rs[5:]:
                self.assertEqual(r.get("rule"), "quota 5/1h", r)
            cl.redis.command("CONFIG", "SET", "maxmemory", "0")

    def test_fail_modes_while_redis_down(self):
        conf = ("[scope closed]\nquota = 100/1s\nfail_mode = closed\n\n"
                "[scope open]\nquota = 1/1h\nfail_mode = open\n\n"
                "[scope fb]\nquota = 2/1s\n")
        # Redis never started: nothing listens on its socket.
        with Pods(conf, n=1, start_redis=False) as cl:
            d = cl.daemons[0]
            self.assertEqual(status(d)["backend"], "fallback")
            # born while Redis is unreachable, the fallback's share starts
            # spent: a window later it is there again
            r = self.probe(d, "fb", 1)[0]
            self.assertEqual((r.get("ok"), r.get("rule"), r.get("backend")),
                             (False, "quota 2/1s", "fallback"), r)
            time.sleep(r["retry_after_ms"] / 1000.0 + 0.05)
            for r in self.probe(d, "closed", 3):
                self.assertEqual(r.get("error"), "unavailable", r)
            for r in self.probe(d, "open", 5):  # quota 1/1h, and all 5 go
                self.assertIs(r.get("ok"), True, r)
                self.assertEqual(r.get("backend"), "fallback", r)
            rs = self.probe(d, "fb", 4)
            self.assertEqual([r.get("ok") for r in rs], [True, True, False, False], rs)


class StartupTest(FaultCase):

    def test_admitd_before_redis(self):
        conf = "[scope q]\nquota = 1000/1s\n"
        with Pods(conf, n=1, start_redis=False) as cl:
            d = cl.daemons[0]
            # Born while Redis is unreachable, its fallback starts with the
            # window spent (a restart cannot know what it admitted before);
            # then, for a second (the reconnect backoff grows to its 1 s
            # cap), it serves from the fallback.
            with d.connect() as c:
                r = c.request(acquire_req("q", "k", timeout_ms=0))
                self.assertEqual((r.get("ok"), r.get("rule"), r.get("backend")),
                                 (False, "quota 1000/1s", "fallback"), r)
                self.assertLessEqual(r["retry_after_ms"], 1000, r)
                time.sleep(r["retry_after_ms"] / 1000.0 + 0.05)
            t0 = now()
            with d.connect() as c:
                while now() < t0 + 1.0:
                    r = c.request(acquire_req("q", "k", timeout_ms=0))
                    self.assertIs(r.get("ok"), True, r)
                    self.assertEqual(r.get("backend"), "fallback", r)
                    self.assertEqual(status(d)["backend"], "fallback")
                    time.sleep(0.05)
            cl.redis.start()
            t_up = now()
            t_sw = wait_backend(d, "redis", IO_TIMEOUT)
            # The reconnect backoff is capped at 1 s: back within 2 s (plus
            # the stalls measured meanwhile).
            self.assertLess(t_sw - t_up, 2.0 + late_allowance(t_up, t_sw))
            with d.connect() as c:
                r = c.request(acquire_req("q", "k", timeout_ms=0))
                self.assertEqual(r.get("backend"), "redis", r)


class PenalizeTest(FaultCase):

    def test_penalize_holds_key_for_other_daemons(self):
        conf = "[scope p]\nmax_concurrent = 100\n"
        with Pods(conf) as cl:
            t0 = now()
            with cl.daemons[0].connect() as c:
                r = c.request({"op": "penalize", "scope": "p", "key": "k",
                               "retry_after_ms": 800})
                self.assertIs(r.get("ok"), True, r)
            # penalize is answered before Redis has it: wait until it has.
            wait_redis_field(cl.redis, key_name("admitd", "p", "k", "s"), "penalty_until")
            t_seen = now()
            for d in cl.daemons[1:]:
                with d.connect() as c:
                    r = c.request(acquire_req("p", "k", timeout_ms=0))
                    self.assertEqual(r.get("error"), "limited", r)
                    self.assertEqual(r.get("rule"), "penalty", r)
                    self.assertLessEqual(r["retry_after_ms"], 800)
                    self.assertGreaterEqual(r["retry_after_ms"], 800 - (c.last_t - t0) * 1000 - 2)

            def waiter(i):
                c = cl.daemons[1 + i].connect()
                try:
                    t = now()
                    r = c.request(acquire_req("p", "k", timeout_ms=3000), timeout=3 + IO_TIMEOUT)
                    self.assertIs(r.get("ok"), True, r)
                    self.assertEqual(r.get("backend"), "redis", r)
                    # admitted within [t + waited_ms, reply read]
                    return t + r["waited_ms"] / 1000.0, c.last_t
                finally:
                    c.close()

            for lo, hi in run_clients(2, waiter):
                self.assertGreaterEqual(hi - t0, 0.8 - EPS)
                # timer lateness (SLACK) plus the two client threads'
                # scheduling on a 2-core box (another SLACK), by the
                # daemon's own wait, plus the stalls measured meanwhile
                self.assertLess(lo - t_seen, 0.8 + 2 * SLACK + late_allowance(t_seen, hi))


MEM_CONF = """
[scope m_quota]
quota = 5/500ms

[scope m_cc]
cluster_concurrency = 2
min_delay = 100ms
lease_ttl = 500ms

[scope m_serial]
min_delay = 100ms
lease_ttl = 500ms

[scope m_rules]
rule = requests token-bucket 5/500ms
rule = requests sliding-window 5/500ms
rule = requests fixed-window 5/500ms
rule = requests leaky-bucket 5/500ms
rule = requests session-window 5/500ms
rule = tokens token-bucket 100/500ms
lease_ttl = 500ms

[scope m_pen]
max_concurrent = 10
"""


class MemoryTest(FaultCase):

    def test_memory_returns_to_baseline(self):
        with Pods(MEM_CONF) as cl:
            pods = "admitd:pods"
            end = now() + 5.0
            while cl.redis.command("EXISTS", pods) != 1:
                self.assertLess(now(), end, "no heartbeat")
                time.sleep(0.02)
            self.assertEqual(cl.redis.command("DBSIZE"), 1)
            nkeys = 10

            def work(i):
                d = cl.daemons[i % 3]
                c = d.connect()
                try:
                    for j in range(nkeys):
                        k = "k%d-%d" % (i, j)
                        for sc in ("m_quota", "m_cc", "m_serial", "m_rules"):
                            r = c.request(acquire_req(sc, k, timeout_ms=0))
                            self.assertIs(r.get("ok"), True, r)
                            self.assertEqual(r.get("backend"), "redis", r)
                            c.request({"op": "release", "lease": r["lease"],
                                       "tokens": {"out": 150}})
                        c.request({"op": "penalize", "scope": "m_pen", "key": k,
                                   "retry_after_ms": 300})
                    # A lease never released (detached, connection closed).
                    r = c.request(acquire_req("m_cc", "leak%d" % i, detach=True))
                    self.assertIs(r.get("ok"), True, r)
                finally:
                    c.close()

            run_clients(3, work)
            # Every key carries a TTL bounded by what it holds: its window
            # or lease_ttl (500ms), sliding-window's previous bucket (2
            # windows), and a bucket's (burst/amount + 2) windows, which
            # covers a token meter's overdraft (strat_bucket_ttl).
            bound = {"r0": 1500, "r1": 1000, "r3": 1500, "r5": 1500}
            # A settlement record (":k:" then the lease id) outlives its
            # lease by one lease_ttl, so that late tokens still settle.
            rc = cl.redis.connect()
            try:
                keys = rc.command("KEYS", "*")
                self.assertGreater(len(keys), 3 * nkeys * 4)
                for k in keys:
                    ttl = rc.command("PTTL", k)
                    if k == pods or ttl == -2:  # -2: expired since KEYS
                        continue
                    self.assertGreaterEqual(ttl, 0, k)  # -1 would be no TTL
                    last = k.rsplit(":", 1)[1]
                    if k.rsplit(":", 2)[1] == "k":
                        last = "k"
                    self.assertLessEqual(ttl, bound.get(last, 1000 if last == "k" else 500), k)
            finally:
                rc.close()
            t_end = now()
            # Every TTL has run out 1.5 s after the last call; Redis's
            # active expiry cycle (10 Hz) reclaims the keys shortly after.
            while cl.redis.command("DBSIZE") != 1:
                self.assertLess(now(), t_end + 1.5 + 2.0 + late_allowance(t_end),
                                cl.redis.command("KEYS", "*"))
                time.sleep(0.05)
            self.assertEqual(cl.redis.command("KEYS", "*"), [pods])


class DivisorAutoTest(FaultCase):

    def test_divisor_auto_is_pods_seen(self):
        self.check_pods_seen("[scope q]\nquota = 30/1s\nfallback_divisor = auto\n")

    def test_default_divisor_is_auto(self):
        # a fleet that never set fallback_divisor does not admit 3x its budget
        self.check_pods_seen("[scope q]\nquota = 30/1s\n")

    def check_pods_seen(self, conf):
        with Pods(conf) as cl:
            end = now() + 5.0
            while cl.redis.command("ZCARD", "admitd:pods") != 3:
                self.assertLess(now(), end, "three pods never registered")
                time.sleep(0.02)
            # Each daemon learns the count at its next heartbeat (every 1 s):
            # wait until each says it has (status, not a sleep).
            for d in cl.daemons:
                harness._wait_until(lambda: status(d)["redis"]["pods_seen"] == 3, IO_TIMEOUT,
                                    "daemon to count 3 pods", d.stderr_text)
            cl.redis.stop()
            for d in cl.daemons:
                wait_backend(d, "fallback", IO_TIMEOUT)

            def prober(i):
                c = cl.daemons[i].connect()
                adm, first_refusal = [], None
                try:
                    t_end = now() + 1.5
                    while now() < t_end:
                        t = now()
                        r = c.request(acquire_req("q", "k", timeout_ms=0))
                        if r.get("ok"):
                            self.assertEqual(r.get("backend"), "fallback", r)
                            adm.append((t, c.last_t))
                        elif first_refusal is None:
                            self.assertEqual(r.get("rule"), "quota 30/1s", r)
                            first_refusal = len(adm)
                        time.sleep(0.005)
                finally:
                    c.close()
                return adm, first_refusal

            for adm, first in run_clients(3, prober):
                # 30 / 3 pods = 10 before the first refusal, and every 1 s
                # window holds <= 10.
                self.assertEqual(first, 10)
                self.assertIsNone(span_excess(adm, per_window(10, 1.0)))
                self.assertGreater(len(adm), 10)  # the next window opened


if __name__ == "__main__":
    unittest.main()
