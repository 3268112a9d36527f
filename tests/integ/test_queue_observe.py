"""test_queue_observe.py - what an operator sees of the wait queues.

Checked with the real daemon (local mode and on a real redis-server) and
the real `admit` CLI: `status` and /metrics give the waits of admitted
acquires per class (a histogram per scope and class; class "" for the
acquires without one), with no tenant or key label anywhere in /metrics;
`inspect` gives a key's queue in this daemon, per class in the order the
classes are served, with each tenant flow's waiters, weight and next start
tag and the class's virtual time, values worked out by hand from the
start-time fair queuing tags; `admit inspect` prints it a line per class;
`status` lists the 20 (scope, key, class) with the most waiters, and
`admit status` (top's table) lists them too.
"""

import os
import subprocess
import time
import unittest

from .harness import Admitd, acquire_req
from .metrics_http import metrics_port, parse, scrape, val, wait_for
from .redis_util import status, wait_backend
from .test_class_queue import DaemonCase

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADMIT_BIN = os.environ.get("ADMIT_BIN", os.path.join(ROOT, "client", "admit"))

CONF = """
[admitd]
metrics = 127.0.0.1:0

[scope q]
rule = concurrency 1
weight gold = 4
class hi = priority=5
class lo =
default_class = lo
lease_ttl = 60s

[scope plain]
rule = concurrency 1
lease_ttl = 60s
"""


class ObserveCase(DaemonCase):
    CONF = CONF

    def setUp(self):
        super().setUp()
        if self.mode == "redis":
            wait_backend(self.d, "redis", 10)

    def hold(self, scope, key):
        """The key's one slot, held by a lease (returned)."""
        r = self.conn().request(acquire_req(scope, key, id="h"))
        self.assertTrue(r["ok"], r)
        return r["lease"]

    def queue(self, scope, key, n, **kw):
        """An acquire waiting on (scope, key) from a connection of its own,
        once the scope has n waiting; returns the connection."""
        c = self.conn()
        c.send(acquire_req(scope, key, timeout_ms=60000, **kw))
        wait_for(lambda: status(self.d)["scopes"][scope]["waiting"] == n,
                 "%d waiting in %s" % (n, scope))
        return c

    def release(self, lease):
        r = self.conn().request({"op": "release", "lease": lease})
        self.assertTrue(r["ok"], r)

    def inspect(self, scope, key):
        r = self.conn().request({"op": "inspect", "scope": scope, "key": key})
        self.assertTrue(r["ok"], r)
        return r

    def admit(self, *args):
        p = subprocess.run([ADMIT_BIN, "--socket", self.d.sock_path, *args],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def buckets(self, bounds, waits):
        """The per-bucket counts of waits (ms), as status gives them."""
        out = [0] * (len(bounds) + 1)
        for ms in waits:
            out[next((i for i, ub in enumerate(bounds) if ms <= ub), len(bounds))] += 1
        return out

    def test_waits_per_class_in_status_and_metrics(self):
        r = self.conn().request(acquire_req("q", "k"))
        self.assertTrue(r["ok"], r)
        lease, lo_waits = r["lease"], [r["waited_ms"]]
        hi = self.queue("q", "k", 1, **{"class": "hi", "tenant": "gold"})
        time.sleep(0.3)
        self.release(lease)
        got = hi.recv()
        self.assertTrue(got["ok"], got)
        self.assertGreaterEqual(got["waited_ms"], 300)
        self.release(got["lease"])
        # lo (the holder above, and one more): admitted at once; plain has no class: ""
        plain_waits = []
        for scope in ("q", "plain"):
            r = self.conn().request(acquire_req(scope, "k2"))
            self.assertTrue(r["ok"], r)
            self.release(r["lease"])
            (lo_waits if scope == "q" else plain_waits).append(r["waited_ms"])
        st = status(self.d)
        bounds = st["wait_bounds_ms"]
        cw = st["scopes"]["q"]["class_waits"]
        self.assertEqual(set(cw), {"hi", "lo"})  # a default_class: none without one
        # hi's one admission in its waited_ms's bucket, lo's in the first (no wait)
        b = next(i for i, ub in enumerate(bounds) if got["waited_ms"] <= ub)
        self.assertEqual(cw["hi"]["wait_buckets"], self.buckets(bounds, [got["waited_ms"]]))
        self.assertEqual(cw["hi"]["wait_ms_total"], got["waited_ms"])
        self.assertEqual(cw["lo"]["wait_buckets"], self.buckets(bounds, lo_waits), cw)
        self.assertEqual(cw["lo"]["wait_ms_total"], sum(lo_waits), cw)
        self.assertEqual(st["scopes"]["plain"]["class_waits"],
                         {"": {"wait_buckets": self.buckets(bounds, plain_waits),
                               "wait_ms_total": sum(plain_waits)}})
        text = scrape(metrics_port(self.d))
        m = parse(text)
        name = "admitd_acquire_class_wait_seconds"
        self.assertEqual(val(m, name + "_count", scope="q", **{"class": "hi"}), 1)
        self.assertEqual(val(m, name + "_count", scope="q", **{"class": "lo"}), 2)
        self.assertEqual(val(m, name + "_count", scope="plain", **{"class": ""}), 1)
        self.assertAlmostEqual(val(m, name + "_sum", scope="q", **{"class": "hi"}),
                               got["waited_ms"] / 1000.0, places=3)
        le_hi = "%g" % (bounds[b] / 1000.0)
        le_lo = "%g" % (bounds[b - 1] / 1000.0)
        self.assertEqual(val(m, name + "_bucket", scope="q", le=le_hi, **{"class": "hi"}), 1)
        self.assertEqual(val(m, name + "_bucket", scope="q", le=le_lo, **{"class": "hi"}), 0)
        # the scope's histogram counts both classes
        self.assertEqual(val(m, "admitd_acquire_wait_seconds_count", scope="q"), 3)
        # no tenant or key label, and no key or tenant name, anywhere
        for sample in m:
            self.assertTrue({k for k, _ in sample[1]} <= {"scope", "class", "le", "outcome",
                                                          "op", "result", "version"}, sample)
        for word in ('"k"', '"k2"', "gold", "tenant", "key="):
            self.assertNotIn(word, text)

    def test_inspect_shows_the_queue_by_class_and_tenant(self):
        lease = self.hold("q", "k")
        w = [self.queue("q", "k", 1, tenant="gold"),
             self.queue("q", "k", 2, tenant="gold"),
             self.queue("q", "k", 3, tenant="bronze"),
             self.queue("q", "k", 4),
             self.queue("q", "k", 5, **{"class": "hi", "tenant": "gold"})]
        # tags at V 0: gold 0 and 0.25 (cost 1, weight 4); bronze (no weight
        # line) and the acquire naming no tenant share the default flow: 0, 1
        q = self.inspect("q", "k")["queue"]
        self.assertEqual(q, [
            {"class": "hi", "priority": 5, "waiters": 1, "v": 0,
             "tenants": [{"tenant": "gold", "weight": 4, "waiters": 1, "next_start": 0}]},
            {"class": "lo", "priority": 0, "waiters": 4, "v": 0,
             "tenants": [{"tenant": "default", "shared": True, "weight": 1, "waiters": 2,
                          "next_start": 0},
                         {"tenant": "gold", "weight": 4, "waiters": 2, "next_start": 0}]},
        ])
        # hi first (priority), then lo's first gold (S 0, arrived first): V stays
        # 0, gold's next is its S 0.25
        self.release(lease)
        got = w[4].recv()
        self.assertTrue(got["ok"], got)
        self.release(got["lease"])
        got = w[0].recv()
        self.assertTrue(got["ok"], got)
        q = self.inspect("q", "k")["queue"]
        self.assertEqual(q, [
            {"class": "lo", "priority": 0, "waiters": 3, "v": 0,
             "tenants": [{"tenant": "default", "shared": True, "weight": 1, "waiters": 2,
                          "next_start": 0},
                         {"tenant": "gold", "weight": 4, "waiters": 1, "next_start": 0.25}]},
        ])
        # bronze (S 0, before gold's 0.25) next: V stays 0; then gold at 0.25
        self.release(got["lease"])
        got = w[2].recv()
        self.assertTrue(got["ok"], got)
        self.release(got["lease"])
        got = w[1].recv()
        self.assertTrue(got["ok"], got)
        q = self.inspect("q", "k")["queue"]
        self.assertEqual(q, [
            {"class": "lo", "priority": 0, "waiters": 1, "v": 0.25,
             "tenants": [{"tenant": "default", "shared": True, "weight": 1, "waiters": 1,
                          "next_start": 1}]},
        ])
        lines = [ln for ln in self.admit("inspect", "q", "k").splitlines()
                 if ln.startswith("queue")]
        self.assertEqual(lines, ['queue       class "lo" priority 0: 1 waiting, V 0.25; '
                                 'default* 1 (weight 1, next 1)'])
        self.release(got["lease"])
        self.assertTrue(w[3].recv()["ok"])
        self.assertEqual(self.inspect("q", "k")["queue"], [])

    def test_inspect_of_a_scope_without_weights_is_arrival_order(self):
        lease = self.hold("plain", "k")
        for n in (1, 2, 3):
            self.queue("plain", "k", n, tenant="t%d" % n)
        r = self.inspect("plain", "k")
        self.assertEqual(r["queue"], [
            {"class": "", "priority": 0, "waiters": 3,
             "tenants": [{"tenant": "default", "shared": True, "weight": 1, "waiters": 3}]}])
        self.assertNotIn("tenant_weights", r)
        self.release(lease)

    def test_status_lists_the_contended_keys(self):
        # 22 keys: "a" with 3 waiters of two flows, "b" with 2, 20 more with 1
        keys = ["a", "b"] + ["k%02d" % i for i in range(20)]
        n = 0
        for k in keys:
            self.hold("q", k)
        for k, tenants in (("a", ["gold", "gold", None]), ("b", [None, "x"])):
            for t in tenants:
                n += 1
                self.queue("q", k, n, **({"tenant": t} if t else {}))
        for k in keys[2:]:
            n += 1
            self.queue("q", k, n)
        hot = status(self.d)["contended"]
        self.assertEqual(len(hot), 20)
        self.assertEqual(hot[0], {"scope": "q", "key": "a", "class": "lo", "waiters": 3,
                                  "tenants": 2})
        self.assertEqual(hot[1], {"scope": "q", "key": "b", "class": "lo", "waiters": 2,
                                  "tenants": 1})
        # then the ones with 1, by key: the last two are left out
        self.assertEqual([h["key"] for h in hot[2:]], keys[2:20])
        self.assertTrue(all(h["waiters"] == 1 for h in hot[2:]))
        out = self.admit("status").splitlines()
        i = next(i for i, ln in enumerate(out) if ln.startswith("CONTENDED"))
        self.assertEqual(out[i].split(), ["CONTENDED", "KEY", "CLASS", "WAITING", "TENANTS"])
        self.assertEqual(out[i + 1].split(), ["q", "a", "lo", "3", "2"])
        self.assertEqual(out[i + 2].split(), ["q", "b", "lo", "2", "1"])
        self.assertEqual(out[i + 21], "")  # 20 lines, then the totals
        self.assertTrue(all(ln.startswith("q ") for ln in out[i + 1:i + 21]), out)

    def test_nothing_waits_nothing_contended(self):
        st = status(self.d)
        self.assertEqual(st["contended"], [])
        self.assertNotIn("CONTENDED", self.admit("status"))


class TestObserveLocal(ObserveCase, unittest.TestCase):
    mode = "local"


class TestObserveRedis(ObserveCase, unittest.TestCase):
    mode = "redis"


if __name__ == "__main__":
    unittest.main()
