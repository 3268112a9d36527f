"""test_features.py - multi-target acquire, lease keys, cost 0, exceeds_limit,
reservations, tenants and the operator calls (reset, inspect), in both clients.

Against the real admitd on FEATURES_CONF. url_host is checked on the very
cases the daemon's own unit test uses for its URL parser
(tests/unit/wire/check_proto_decode.c, read from that file), so the key a Lease
reports for url= is the key the daemon limits.
"""

import os
import re
import time
import unittest

import admit
from admit import _proto

from .support import PROMPT, REPO, AsyncDaemonCase, DaemonCase

now = time.monotonic

FEATURES_CONF = """
[scope tenant]
max_concurrent = 1
timeout = 1s

[scope upstream]
max_concurrent = 1
timeout = 1s

[scope small]
rule = requests token-bucket 10/1s
timeout = 5s
weight gold = 4

[scope cost]
rule = requests token-bucket 2/1h
timeout = 1s

[scope out]
rule = tokens.output token-bucket 1000/1h
timeout = 1s

[scope paced]
min_delay = 1h
timeout = 1s

[scope pen]
max_concurrent = 100
timeout = 1s

[scope look]
quota = 5/1h
rule = requests token-bucket 10/1h
timeout = 1s
"""


def c_string(lit):
    """A C string literal's body (the escapes check_proto_decode.c may use)."""
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), lit)


def url_cases():
    """(url, host or None) of check_proto_decode.c's urlcases table."""
    with open(os.path.join(REPO, "tests", "unit", "wire", "check_proto_decode.c")) as f:
        text = f.read()
    table = text[text.index("urlcases[] = {"):]
    table = table[:table.index("};")]
    lit = r'"((?:[^"\\]|\\.)*)"'
    return [
        (c_string(m.group(1)), None if m.group(2) is None else c_string(m.group(2)))
        for m in re.finditer(r"\{\s*%s\s*,\s*(?:%s|NULL)\s*\}" % (lit, lit), table)
    ]


class UrlHostTest(unittest.TestCase):
    def test_the_daemons_cases(self):
        cases = url_cases()
        self.assertGreaterEqual(len(cases), 20)
        for url, host in cases:
            with self.subTest(url=url):
                self.assertEqual(admit.url_host(url), host)

    def test_bounds(self):
        # the daemon's keys are at most 512 bytes
        self.assertEqual(_proto.url_host("http://%s/" % ("a" * 512)), "a" * 512)
        self.assertIsNone(_proto.url_host("http://%s/" % ("a" * 513)))
        self.assertIsNone(_proto.url_host("http://[%s]/" % ("a" * 513)))
        self.assertIsNone(_proto.url_host(None))
        # only ASCII letters are lowercased, as the daemon's tolower does
        self.assertEqual(_proto.url_host("http://\u00c9X.example/"), "\u00c9x.example")


class LocalChecksTest(unittest.TestCase):
    """Arguments refused before anything is sent."""

    def test_targets_and_reserve(self):
        c = admit.Client("/nonexistent/admitd.sock", connect_timeout=0)
        t = {"scope": "tenant", "key": "k"}
        bad = [
            (ValueError, dict(scope="tenant", targets=[t])),
            (ValueError, dict(targets=[])),
            (ValueError, dict(targets=[t] * 9)),
            (ValueError, dict(targets=[{"scope": "tenant", "key": "k", "clas": "x"}])),
            (ValueError, dict(targets=[{"key": "k"}])),
            (ValueError, dict(targets=[{"scope": "s", "key": "k", "url": "http://h/"}])),
            (ValueError, dict(targets=[{"scope": "s", "cost": -1}])),
            (TypeError, dict(targets="tenant")),
            (TypeError, dict(targets=["tenant"])),
            (ValueError, dict()),
            (TypeError, dict(scope="s", reserve=[("output", 1)])),
            (ValueError, dict(scope="s", reserve={"output": -1})),
            (ValueError, dict(scope="s", reserve={"output": True})),
            (ValueError, dict(scope="s", reserve={"": 1})),
            (ValueError, dict(scope="s", reserve={"t%d" % i: 1 for i in range(17)})),
        ]
        for exc, kw in bad:
            with self.subTest(kw=kw):
                with self.assertRaises(exc):
                    c.acquire(**kw)
        with self.assertRaises(ValueError):
            c.inspect("pen", key="a", url="http://a/")

    def test_requests_sent(self):
        req = _proto.acquire_request(
            targets=[{"scope": "a", "key": "k"}, {"scope": "b", "url": "http://h/", "cost": 0}],
            timeout=2, reserve={"output": 500}, detach=True,
        )
        self.assertEqual(req, {
            "op": "acquire",
            "targets": [{"scope": "a", "key": "k"}, {"scope": "b", "url": "http://h/", "cost": 0}],
            "timeout_ms": 2000, "detach": True, "reserve": {"output": 500},
        })
        self.assertEqual(_proto.acquire_request("s", "k", cost=0)["cost"], 0)
        self.assertEqual(_proto.key_request("inspect", "s", url="http://h/", cls="c"),
                         {"op": "inspect", "scope": "s", "url": "http://h/", "class": "c"})
        self.assertEqual(_proto.acquire_request("s", "k", tenant="acme")["tenant"], "acme")
        self.assertNotIn("tenant", _proto.acquire_request("s", "k"))
        with self.assertRaises(ValueError):
            _proto.acquire_request("s", "k", tenant=7)
        # neither key nor url: the scope's default key, resolved by the daemon
        self.assertEqual(_proto.key_request("reset", "s"), {"op": "reset", "scope": "s"})


class FeaturesTest(DaemonCase):
    conf = FEATURES_CONF

    def setUp(self):
        self.client = admit.Client(self.daemon.sock_path)

    def tearDown(self):
        self.client.close()

    def admitted(self, scope, key, **kw):
        try:
            self.client.try_acquire(scope, key, **kw).release()
            return True
        except admit.Limited:
            return False

    def test_tenant(self):
        k = self.key()
        self.client.try_acquire("small", k, tenant="gold").release()
        self.client.try_admit("small", k, tenant="acme.b-1")
        self.client.acquire("small", k, timeout=1, tenant="gold").release()
        with self.assertRaises(admit.BadRequest) as cm:
            self.client.try_acquire("small", k, tenant="a b")
        self.assertIn('"tenant" must be 1 to 64', str(cm.exception))

    def test_lease_key_is_the_daemons_key(self):
        k = self.key().lower() + ".example.com"
        lease = self.client.acquire("tenant", url="https://User@%s:8443/x?y" % k.upper())
        self.assertEqual((lease.scope, lease.key, lease.targets), ("tenant", k, None))
        self.assertFalse(self.admitted("tenant", lease.key))  # the daemon holds that key
        self.assertIs(lease.release(), True)
        lease = self.client.acquire("tenant", url="http://[2001:DB8::%d]/x" % os.getpid())
        self.assertEqual(lease.key, "2001:db8::%d" % os.getpid())
        self.assertFalse(self.admitted("tenant", lease.key))
        lease.release()
        lease = self.client.acquire("tenant", self.key())
        self.assertEqual(lease.key, self.key())
        lease.release()

    def test_multi_target_acquire(self):
        k, host = self.key(), self.key().lower() + ".example.com"
        targets = [
            {"scope": "tenant", "key": k},
            {"scope": "upstream", "url": "https://%s/v1" % host.upper(), "cost": 1},
        ]
        lease = self.client.acquire(targets=targets, timeout=1)
        self.assertIsNone(lease.scope)
        self.assertIsNone(lease.key)
        self.assertEqual(lease.targets, [
            {"scope": "tenant", "key": k},
            {"scope": "upstream", "url": "https://%s/v1" % host.upper(), "cost": 1, "key": host},
        ])
        self.assertFalse(self.admitted("tenant", k))
        self.assertFalse(self.admitted("upstream", host))
        with self.assertRaises(admit.Limited):
            self.client.try_acquire(targets=targets)
        self.assertIs(lease.release(), True)  # one release frees both
        self.assertTrue(self.admitted("tenant", k))
        self.assertTrue(self.admitted("upstream", host))

    def test_multi_target_refusal_books_nothing(self):
        k = self.key()
        with self.client.acquire("upstream", k):
            with self.assertRaises(admit.Limited) as cm:
                self.client.try_acquire(
                    targets=[{"scope": "tenant", "key": k}, {"scope": "upstream", "key": k}]
                )
            self.assertEqual(cm.exception.rule, "max_concurrent")
            self.assertTrue(self.admitted("tenant", k))  # rolled back
        with self.client.try_acquire(targets=[{"scope": "tenant", "key": k}]) as lease:
            self.assertEqual(lease.targets, [{"scope": "tenant", "key": k}])

    def test_cost_zero(self):
        k = self.key()
        for _ in range(3):  # take nothing from the 2/1h bucket
            self.client.acquire("cost", k, cost=0).release()
        self.client.acquire("cost", k, cost=2).release()
        with self.assertRaises(admit.Limited):
            self.client.try_acquire("cost", k)

    def test_exceeds_limit(self):
        k = self.key()
        for call in (lambda: self.client.acquire("small", k, cost=50, timeout=5),
                     lambda: self.client.try_acquire("small", k, cost=50),
                     lambda: self.client.acquire(targets=[{"scope": "small", "key": k,
                                                           "cost": 11}])):
            t0 = now()
            with self.assertRaises(admit.ExceedsLimit) as cm:
                call()
            self.assertLess(now() - t0, PROMPT, "answered at once, whatever the budget")
            e = cm.exception
            self.assertEqual(e.code, "exceeds_limit")
            self.assertEqual(e.limit, 10)
            self.assertEqual(e.rule, "requests token-bucket 10/1s")
            self.assertIsNone(e.retry_after)
            self.assertIsInstance(e, admit.AdmitError)
            self.assertNotIsInstance(e, (admit.Limited, admit.BudgetExceeded, admit.Timeout))
        self.client.try_acquire("small", k, cost=10).release()  # the capacity itself fits

    def test_reserve(self):
        # tokens.output 1000/1h: a reservation of 800 leaves 200 while held.
        k = self.key()
        first = self.client.acquire("out", k, reserve={"output": 800})
        with self.assertRaises(admit.Limited) as cm:
            self.client.try_acquire("out", k, reserve={"output": 800})
        self.assertEqual(cm.exception.rule, "tokens.output token-bucket 1000/1h")
        # the release settles: 100 used, 700 given back
        self.assertIs(first.release(tokens={"output": 100}), True)
        second = self.client.try_acquire("out", k, reserve={"output": 800})
        self.assertIs(second.release(tokens={"output": 800}), True)
        with self.assertRaises(admit.Limited):
            self.client.try_acquire("out", k, reserve={"output": 200})

    def test_reset_clears_penalty_and_pacing(self):
        k = self.key()
        self.client.penalize("pen", k, retry_after=60)
        with self.assertRaises(admit.Limited) as cm:
            self.client.try_acquire("pen", k)
        self.assertEqual(cm.exception.rule, "penalty")
        self.assertIs(self.client.reset("pen", k)["ok"], True)
        self.assertTrue(self.admitted("pen", k))

        self.client.acquire("paced", k).release()
        with self.assertRaises(admit.Limited) as cm:
            self.client.try_acquire("paced", k)
        self.assertEqual(cm.exception.rule, "min_delay")
        self.client.reset("paced", k)
        self.assertTrue(self.admitted("paced", k))

    def test_reset_by_url(self):
        host = self.key().lower() + ".example.com"
        self.client.penalize("pen", host, retry_after=60)
        self.assertFalse(self.admitted("pen", host))
        self.client.reset("pen", url="https://%s:1/x" % host.upper())
        self.assertTrue(self.admitted("pen", host))

    def test_inspect(self):
        k = self.key()
        lease = self.client.acquire("look", k)
        ins = self.client.inspect("look", k)
        self.assertIs(ins["ok"], True)
        self.assertEqual((ins["backend"], ins["scope"], ins["key"]), ("local", "look", k))
        self.assertEqual((ins["penalty_ms"], ins["next_in_ms"], ins["leases"]), (0, 0, 1))
        self.assertEqual((ins["quota"]["used"], ins["quota"]["limit"]), (1, 5))
        rules = {r["rule"]: r for r in ins["rules"]}
        bucket = rules["requests token-bucket 10/1h"]
        self.assertEqual((bucket["remaining"], bucket["capacity"]), (9, 10))
        self.assertGreater(bucket["full_in_ms"], 0)
        lease.release()
        self.client.penalize("look", k, retry_after=60)
        ins = self.client.inspect("look", url="http://%s/" % k)
        self.assertEqual(ins["key"], k.lower())
        ins = self.client.inspect("look", k)
        self.assertGreater(ins["penalty_ms"], 55000)
        self.assertLessEqual(ins["penalty_ms"], 60000)
        self.assertEqual(ins["leases"], 0)
        self.assertNotIn("quota", self.client.inspect("pen", k))  # no quota in that scope
        with self.assertRaises(admit.UnknownScope):
            self.client.inspect("nope", k)


class AsyncFeaturesTest(AsyncDaemonCase):
    conf = FEATURES_CONF

    async def asyncSetUp(self):
        self.client = admit.AsyncClient(self.daemon.sock_path)

    async def asyncTearDown(self):
        await self.client.close()

    async def test_multi_target_and_url_key(self):
        k, host = self.key(), self.key().lower() + ".example.com"
        targets = [{"scope": "tenant", "key": k}, {"scope": "upstream", "url": "http://%s/" % host}]
        async with self.client.acquire(targets=targets) as lease:
            self.assertEqual([t["key"] for t in lease.targets], [k, host])
            with self.assertRaises(admit.Limited):
                await self.client.try_acquire("upstream", host)
            with self.assertRaises(admit.Limited):
                await self.client.try_acquire(targets=targets)
        self.assertIs(lease.held, True)
        lease = await self.client.try_acquire("upstream", url="HTTP://u@%s:9/" % host.upper())
        self.assertEqual(lease.key, host)
        self.assertIs(await lease.release(), True)

    async def test_tenant(self):
        k = self.key()
        await (await self.client.try_acquire("small", k, tenant="gold")).release()
        await self.client.admit("small", k, timeout=1, tenant="acme")
        with self.assertRaises(admit.BadRequest) as cm:
            await self.client.try_admit("small", k, tenant="x" * 65)
        self.assertIn('"tenant" longer than 64', str(cm.exception))

    async def test_exceeds_limit_cost_zero_reserve(self):
        k = self.key()
        with self.assertRaises(admit.ExceedsLimit) as cm:
            await self.client.acquire("small", k, cost=50, timeout=5)
        self.assertEqual((cm.exception.limit, cm.exception.retry_after), (10, None))
        self.assertNotIsInstance(cm.exception, (admit.Limited, admit.BudgetExceeded,
                                                admit.Timeout))
        for _ in range(3):
            await (await self.client.acquire("cost", k, cost=0)).release()
        await (await self.client.acquire("cost", k, cost=2)).release()
        with self.assertRaises(admit.Limited):
            await self.client.try_acquire("cost", k)
        lease = await self.client.acquire("out", k, reserve={"output": 800})
        with self.assertRaises(admit.Limited):
            await self.client.try_acquire("out", k, reserve={"output": 800})
        await lease.release(tokens={"output": 100})
        await (await self.client.try_acquire("out", k, reserve={"output": 800})).release()

    async def test_reset_and_inspect(self):
        k = self.key()
        await self.client.penalize("pen", k, retry_after=60)
        ins = await self.client.inspect("pen", k)
        self.assertGreater(ins["penalty_ms"], 55000)
        self.assertIs((await self.client.reset("pen", k))["ok"], True)
        ins = await self.client.inspect("pen", k)
        self.assertEqual(ins["penalty_ms"], 0)
        await (await self.client.try_acquire("pen", k)).release()


if __name__ == "__main__":
    unittest.main()
