"""test_refusals.py - replies that mean what they say, tokens reserved up
front, the operator's reset and inspect, and outages that show.

- A wait for a lease slot (a held lease of a serialized min_delay scope, a
  concurrency rule, cluster_concurrency) has no known end: it is slept out
  and ends in `timeout` naming the rule, never `budget_exceeded`.
- A request no wait can admit (its cost is above a limit's capacity) is
  `exceeds_limit`, at once, whatever the budget, with the rule and limit.
- `reserve` books token meters at acquire, all-or-nothing with every other
  limit; the release settles with the real counts; an expired lease keeps
  its reservation; a refused multi-target acquire refunds it.
- `reset` lifts a key's penalty and pacing for every daemon; `inspect`
  reports the key's state as the deciding limiter sees it.
- Outages: the state is logged at start; every call that could not reach
  Redis is counted; a frozen Redis logs its dropped connections rate-limited;
  a daemon started during an outage divides `auto` by fallback_pods (1 by
  default: one that never saw its peers divides by 1).

Each runs in local mode and, where Redis changes the path, on Redis.
"""

import time
import unittest

from . import harness
from .harness import SLACK, Admitd, acquire_req, now
from .redis_util import Pods, status, wait_backend

CONF = """
[scope pace]
min_delay = 200ms
timeout = 1s

[scope conc]
rule = concurrency 1
timeout = 1s

[scope cc]
cluster_concurrency = 1
timeout = 1s

[scope car]
rule main = requests token-bucket 10/1s
rule prio = requests token-bucket 5/1s
class main = main
class background = main floor=4
class priority = prio
default_class = main
quota = 20/1m

[scope llm]
rule = tokens fixed-window 1000/1h
rule out = tokens.output fixed-window 800/1h
class chat = out
default_class = chat
lease_ttl = 1s

[scope other]
quota = 1/1m
"""


class Refusals:
    """Mixin over self.conn() and self.BACKEND (local or redis)."""

    def slot_wait_ends_in_timeout(self, scope):
        holder, c = self.conn(), self.conn()
        k = "slot-%s" % scope
        lease = holder.request(acquire_req(scope, k))
        self.assertIs(lease.get("ok"), True, lease)
        t0 = now()
        r = c.request(acquire_req(scope, k, timeout_ms=600))
        took = now() - t0
        self.assertEqual((r.get("ok"), r.get("error")), (False, "timeout"), r)
        self.assertEqual(r.get("rule"), {"pace": "min_delay", "conc": "concurrency 1",
                                         "cc": "cluster_concurrency"}[scope], r)
        self.assertNotIn("retry_after_ms", r)
        self.assertGreaterEqual(took, 0.6 - harness.EPS)
        # slept out to the deadline, not a whole retry period past it
        self.assertLess(took, 0.6 + 4 * SLACK + 0.1 + harness.late_allowance(t0))
        # a try says how soon to look again, as before
        r = c.request(acquire_req(scope, k, timeout_ms=0))
        self.assertEqual(r.get("error"), "limited", r)
        self.assertIsInstance(r.get("retry_after_ms"), int, r)

    def test_slot_waits_end_in_timeout(self):
        for scope in ("pace", "conc", "cc"):
            with self.subTest(scope=scope):
                self.slot_wait_ends_in_timeout(scope)

    def test_a_known_wait_longer_than_the_budget_is_still_budget_exceeded(self):
        c = self.conn()
        r = c.request(acquire_req("pace", "known"))
        c.request({"op": "release", "lease": r["lease"]})
        r = c.request(acquire_req("pace", "known", timeout_ms=50))
        self.assertEqual(r.get("error"), "budget_exceeded", r)
        self.assertGreater(r["retry_after_ms"], 50)

    def test_exceeds_limit_at_once_whatever_the_budget(self):
        c = self.conn()
        cases = [
            (acquire_req("car", "x", cost=50, timeout_ms=5000), "requests token-bucket 10/1s", 10),
            (acquire_req("car", "x", cost=50, timeout_ms=0), "requests token-bucket 10/1s", 10),
            # a class floor leaves the last 4 to others: 6 is all background can have
            (acquire_req("car", "x", cost=7, timeout_ms=5000, **{"class": "background"}),
             "requests token-bucket 10/1s", 6),
            (acquire_req("car", "x", cost=6, timeout_ms=5000, **{"class": "priority"}),
             "requests token-bucket 5/1s", 5),
            ({"op": "acquire", "scope": "llm", "key": "x", "reserve": {"output": 900},
              "timeout_ms": 5000}, "tokens.output fixed-window 800/1h", 800),
        ]
        for req, rule, limit in cases:
            t0 = now()
            r = c.request(req)
            self.assertLess(now() - t0, 0.2, r)
            self.assertEqual((r.get("ok"), r.get("error"), r.get("rule"), r.get("limit")),
                             (False, "exceeds_limit", rule, limit), r)
            self.assertNotIn("retry_after_ms", r)
            self.assertEqual(r.get("backend"), self.BACKEND, r)
        # nothing was booked by those refusals
        r = c.request(acquire_req("car", "x", cost=10, timeout_ms=0))
        self.assertIs(r.get("ok"), True, r)

    def test_reservations_cannot_overdraw(self):
        c = self.conn()
        leases = []
        for i in range(3):
            r = c.request({"op": "acquire", "scope": "llm", "key": "r", "id": i,
                           "reserve": {"output": 300}, "timeout_ms": 0})
            if r.get("ok"):
                leases.append(r["lease"])
        # 800/1h on output: two reservations of 300 fit, a third does not
        self.assertEqual(len(leases), 2)
        r = c.request({"op": "acquire", "scope": "llm", "key": "r",
                       "reserve": {"output": 300}, "timeout_ms": 0})
        self.assertEqual((r.get("error"), r.get("rule")),
                         ("limited", "tokens.output fixed-window 800/1h"), r)
        # settled with the real count: 50 used of 300, so 250 come back
        self.assertEqual(c.request({"op": "release", "lease": leases[0],
                                    "tokens": {"output": 50}})["held"], True)
        r = c.request({"op": "acquire", "scope": "llm", "key": "r",
                       "reserve": {"output": 300}, "timeout_ms": 0})
        self.assertIs(r.get("ok"), True, r)
        # 50 + 300 + 300 = 650 booked: 150 left
        ins = c.request({"op": "inspect", "scope": "llm", "key": "r"})
        out = [x for x in ins["rules"] if x["rule"].startswith("tokens.output")][0]
        self.assertEqual(out["remaining"], 150, ins)
        # used beyond the reservation is charged: 300 reserved, 400 used
        self.assertEqual(c.request({"op": "release", "lease": leases[1],
                                    "tokens": {"output": 400}})["held"], True)
        ins = c.request({"op": "inspect", "scope": "llm", "key": "r"})
        out = [x for x in ins["rules"] if x["rule"].startswith("tokens.output")][0]
        self.assertEqual(out["remaining"], 50, ins)

    def test_an_expired_lease_keeps_its_reservation(self):
        c = self.conn()
        r = c.request({"op": "acquire", "scope": "llm", "key": "e",
                       "reserve": {"output": 700}, "timeout_ms": 0})
        self.assertIs(r.get("ok"), True, r)
        time.sleep(1.2)  # lease_ttl 1s
        r2 = c.request({"op": "acquire", "scope": "llm", "key": "e",
                        "reserve": {"output": 200}, "timeout_ms": 0})
        self.assertEqual(r2.get("error"), "limited", r2)
        # a late release still settles it: 100 used
        self.assertEqual(c.request({"op": "release", "lease": r["lease"],
                                    "tokens": {"output": 100}}),
                         {"ok": True, "held": False})
        r2 = c.request({"op": "acquire", "scope": "llm", "key": "e",
                        "reserve": {"output": 600}, "timeout_ms": 0})
        self.assertIs(r2.get("ok"), True, r2)

    def test_refused_targets_refund_the_reservation(self):
        c = self.conn()
        self.assertIs(c.request(acquire_req("other", "o")).get("ok"), True)
        for _ in range(3):
            r = c.request({"op": "acquire", "timeout_ms": 0, "reserve": {"output": 500},
                           "targets": [{"scope": "llm", "key": "t"},
                                       {"scope": "other", "key": "o"}]})
            self.assertEqual(r.get("rule"), "quota 1/1m", r)
        r = c.request({"op": "acquire", "scope": "llm", "key": "t",
                       "reserve": {"output": 800}, "timeout_ms": 0})
        self.assertIs(r.get("ok"), True, r)

    def test_reset_lifts_penalty_and_pacing(self):
        c = self.conn()
        c.request({"op": "penalize", "scope": "car", "key": "p", "retry_after": "3600"})
        ins = c.request({"op": "inspect", "scope": "car", "key": "p"})
        self.assertGreater(ins["penalty_ms"], 3500 * 1000, ins)
        self.assertEqual(c.request(acquire_req("car", "p", timeout_ms=0)).get("rule"),
                         "penalty")
        self.assertEqual(c.request({"op": "reset", "scope": "car", "key": "p"}),
                         {"ok": True, "backend": self.BACKEND})
        self.assertEqual(c.request({"op": "inspect", "scope": "car",
                                    "key": "p"})["penalty_ms"], 0)
        self.assertIs(c.request(acquire_req("car", "p", timeout_ms=0)).get("ok"), True)
        # pacing: a waiter sleeping out min_delay is admitted at the reset
        r = c.request(acquire_req("pace", "q"))
        c.request({"op": "release", "lease": r["lease"]})
        ins = c.request({"op": "inspect", "scope": "pace", "key": "q"})
        self.assertGreater(ins["next_in_ms"], 100, ins)
        w = self.conn()
        w.send(acquire_req("pace", "q", id=9, timeout_ms=1000))
        time.sleep(0.05)
        c.request({"op": "reset", "scope": "pace", "key": "q"})
        t0 = now()
        r = w.recv()
        self.assertIs(r.get("ok"), True, r)
        self.assertLess(now() - t0, 0.1)

    def test_inspect_reports_the_state(self):
        c = self.conn()
        for _ in range(3):
            self.assertIs(c.request(acquire_req("car", "i", cost=2, timeout_ms=0)).get("ok"),
                          True)
        ins = c.request({"op": "inspect", "scope": "car", "key": "i", "id": 4})
        self.assertEqual(ins["id"], 4)
        self.assertEqual((ins["backend"], ins["scope"], ins["key"]), (self.BACKEND, "car", "i"))
        self.assertEqual(ins["quota"]["used"], 3, ins)
        self.assertEqual(ins["quota"]["limit"], 20, ins)
        self.assertEqual(ins["quota"]["frees_in_ms"], 0, ins)
        rules = {x["rule"]: x for x in ins["rules"]}
        self.assertEqual(list(rules), ["requests token-bucket 10/1s"])  # class main only
        main = rules["requests token-bucket 10/1s"]
        self.assertEqual(main["capacity"], 10)
        self.assertIn(main["remaining"], (4, 5), ins)  # 6 taken, maybe 1 refilled
        self.assertGreater(main["full_in_ms"], 400, ins)
        self.assertLessEqual(main["full_in_ms"], 600, ins)
        ins = c.request({"op": "inspect", "scope": "car", "key": "i", "class": "priority"})
        self.assertEqual([x["rule"] for x in ins["rules"]], ["requests token-bucket 5/1s"])
        holder = self.conn()
        holder.request(acquire_req("conc", "i"))
        ins = c.request({"op": "inspect", "scope": "conc", "key": "i"})
        self.assertEqual(ins["leases"], 1, ins)
        self.assertEqual(ins["rules"], [{"rule": "concurrency 1", "capacity": 1,
                                         "remaining": 0}])
        r = c.request({"op": "inspect", "scope": "nope", "key": "i"})
        self.assertEqual(r.get("error"), "unknown_scope", r)


class LocalRefusalsTest(Refusals, harness.DaemonCase):
    CONF = CONF
    BACKEND = "local"


@unittest.skipIf(harness.VALGRIND, "Redis timings; run under ASan instead of valgrind")
class RedisRefusalsTest(Refusals, unittest.TestCase):
    BACKEND = "redis"

    @classmethod
    def setUpClass(cls):
        cls.cl = Pods(CONF, n=2, admitd_extra="redis_timeout = 500ms\n")
        cls.cl.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.cl.__exit__(None, None, None)

    def setUp(self):
        self.cl.redis.command("FLUSHALL")
        self._conns = []

    def tearDown(self):
        for c in self._conns:
            c.close()

    def conn(self):
        c = self.cl.daemons[0].connect()
        self._conns.append(c)
        return c

    def test_reset_reaches_every_daemon(self):
        a = self.conn()
        b = self.cl.daemons[1].connect()
        self._conns.append(b)
        a.request({"op": "penalize", "scope": "car", "key": "all", "retry_after_ms": 600000})
        # The penalty reaches Redis after its reply (PROTOCOL.md): b sees it
        # once it has landed (an ASan run asked b before, and was admitted).
        deadline = time.monotonic() + 5
        while True:
            r = b.request(acquire_req("car", "all", timeout_ms=0))
            if r.get("rule") == "penalty" or time.monotonic() > deadline:
                break
            if r.get("ok"):
                b.request({"op": "release", "lease": r["lease"]})
            time.sleep(0.01)
        self.assertEqual(r.get("rule"), "penalty", r)
        self.assertEqual(a.request({"op": "reset", "scope": "car", "key": "all"})["ok"], True)
        # b gives its known refusal again for at most redis_refusal_hold (1s)
        t0 = time.monotonic()
        while not b.request(acquire_req("car", "all", timeout_ms=0)).get("ok"):
            self.assertLess(time.monotonic() - t0, 1.5, "the reset did not reach b")
            time.sleep(0.05)


@unittest.skipIf(harness.VALGRIND, "Redis timings; run under ASan instead of valgrind")
class OutageShowsTest(unittest.TestCase):
    CONF = """
[scope q]
quota = 30/1m
fallback_divisor = auto
"""

    def started_during_an_outage(self, conf, extra, admitted):
        cl = Pods(conf, n=1, admitd_extra="redis_timeout = 100ms\n" + extra,
                     start_redis=False)
        with cl:
            d = cl.daemons[0]
            err = d.stderr_text()
            self.assertIn("state=fallback", err)
            self.assertIn("redis is down", err)
            c = d.connect()
            # born while Redis is unreachable, it cannot know what it
            # admitted before (a restart): its share starts spent
            got = [c.request(acquire_req("q", "k", timeout_ms=0)) for _ in range(40)]
            self.assertEqual([r for r in got if r.get("ok")], [], got)
            self.assertEqual({(r.get("error"), r.get("rule"), r.get("backend")) for r in got},
                             {("limited", "quota 30/1s", "fallback")}, got)
            time.sleep(1.2)  # a window after its start: the share is there again
            got = [c.request(acquire_req("q", "k", timeout_ms=0)) for _ in range(40)]
            ok = [r for r in got if r.get("ok")]
            self.assertEqual(len(ok), admitted, got)
            self.assertEqual({r["backend"] for r in ok}, {"fallback"})
            st = status(d)
            self.assertGreaterEqual(st["redis"]["errors"]["acquire"], 80, st)

    def test_started_during_an_outage(self):
        # no pod seen yet: auto divides by fallback_pods (3): 30/3 = 10
        self.started_during_an_outage("[scope q]\nquota = 30/1s\n", "fallback_pods = 3\n", 10)

    def test_started_during_an_outage_default_divides_by_one(self):
        # the defaults (fallback_divisor auto, fallback_pods 1): a daemon that
        # never saw its peers divides by 1
        self.started_during_an_outage("[scope q]\nquota = 30/1s\n", "", 30)

    def test_every_call_that_missed_redis_counts(self):
        with Pods(self.CONF, n=1, admitd_extra="redis_timeout = 100ms\n") as cl:
            d = cl.daemons[0]
            c = d.connect()
            before = status(d)["redis"]["errors"]
            cl.redis.stop()
            wait_backend(d, "fallback", 5)
            for _ in range(5):
                c.request(acquire_req("q", "k", timeout_ms=0))
            c.request({"op": "penalize", "scope": "q", "key": "k", "retry_after_ms": 10})
            time.sleep(1.2)  # a heartbeat or more
            after = status(d)["redis"]["errors"]
            self.assertGreaterEqual(after["acquire"] - before["acquire"], 5, after)
            self.assertGreaterEqual(after["heartbeat"] - before["heartbeat"], 1, after)
            # a penalty is not tried while Redis is down: it is owed, and
            # written back (with the fallback's admissions) once Redis answers
            self.assertEqual(after["penalize"] - before["penalize"], 0, after)
            self.assertEqual(status(d)["redis"]["owed"], 1)
            cl.redis.restart()
            wait_backend(d, "redis", 5)
            self.assertIn("redis is up", d.stderr_text())
            st = status(d)["redis"]
            self.assertEqual((st["owed"], st["written_back"]), (0, 1), st)

    def test_a_frozen_redis_logs_its_drops_rate_limited(self):
        with Pods(self.CONF, n=1, admitd_extra="redis_timeout = 50ms\n") as cl:
            d = cl.daemons[0]
            cl.redis.pause()
            try:
                wait_backend(d, "fallback", 5)
                time.sleep(3)
            finally:
                cl.redis.resume()
            drops = [ln for ln in d.stderr_text().splitlines()
                     if "redis connection dropped" in ln]
            self.assertGreaterEqual(len(drops), 1)
            self.assertLessEqual(len(drops), 6, drops)


if __name__ == "__main__":
    unittest.main()


@unittest.skipIf(harness.VALGRIND, "Redis timings; run under ASan instead of valgrind")
class ManyRulesTest(unittest.TestCase):
    """A scope with many rules and a long key: the script's argument vector
    outgrows what a call keeps inline (48 arguments, 1 KB), and every rule
    still counts."""

    CONF = "[scope many]\n" + "".join(
        "rule = requests %s %d/1h\n" % (kind, 100 + i)
        for i, kind in enumerate(["fixed-window", "sliding-window", "token-bucket",
                                  "leaky-bucket", "session-window"] * 2)) + \
        "rule = requests fixed-window 3/1h\n"

    def test_the_tightest_of_eleven_rules_decides(self):
        key = "k" * 400  # 14 keys of ~420 bytes: 6 KB of arguments
        with Pods(self.CONF, n=1, admitd_extra="redis_timeout = 500ms\n") as cl:
            c = cl.daemons[0].connect()
            got = [c.request(acquire_req("many", key, timeout_ms=0)) for _ in range(4)]
            self.assertEqual([r.get("ok") for r in got], [True, True, True, False], got)
            self.assertEqual({r.get("backend") for r in got}, {"redis"}, got)
            self.assertEqual(got[3].get("rule"), "requests fixed-window 3/1h", got[3])
            n = sum(1 for k in cl.redis.command("KEYS", "admitd:{many:*") if ":r" in k)
            self.assertEqual(n, 11)  # one counter per rule, each booked


class HeldLeaseMinDelayTest(unittest.TestCase):
    """min_delay from completion while a lease is held: a try is told that a
    lease is held, and not to come back sooner than min_delay (the poll
    interval of a slot wait, 25 ms, would invite a retry storm)."""

    def test_a_try_behind_a_held_lease_says_so(self):
        with Admitd("[scope pace]\nmin_delay = 2s\nlease_ttl = 30s\n") as d:
            c = d.connect()
            first = c.request({"op": "acquire", "scope": "pace", "key": "h"})
            self.assertIs(first.get("ok"), True, first)
            r = c.request({"op": "acquire", "scope": "pace", "key": "h", "timeout_ms": 0})
            self.assertEqual((r.get("error"), r.get("rule")), ("limited", "min_delay"), r)
            self.assertGreaterEqual(r["retry_after_ms"], 2000, r)
            self.assertIn("lease of this key is held", r.get("message", ""))
