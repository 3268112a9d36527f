"""test_override.py - the override call, in both clients.

The request it sends (checked without a daemon, arguments refused before
anything is sent), and against the real admitd on support.CONF's [scope
ovr] (rule 0 is `requests fixed-window 5/1h`, override_max 2, default key
"k"): an override that tightens the rule to 1 admits one try_acquire and
refuses the next, loosening past 2 x 5 is BadRequest, inspect shows the
override while it holds, and reset lifts it.
"""

import unittest

import admit
from admit import _proto

from .support import AsyncClientCase, ClientCase

RULE = "requests fixed-window 5/1h"


class OverrideRequestTest(unittest.TestCase):
    """override_request: seconds to ms as the other calls convert them."""

    def test_request_sent(self):
        self.assertEqual(_proto.override_request("s", "k", ttl=60, rules={"0": 1}),
                         {"op": "override", "scope": "s", "key": "k", "ttl_ms": 60000,
                          "rules": {"0": 1}})
        self.assertEqual(
            _proto.override_request("s", url="http://h/", ttl=0.0001, min_delay=0.25,
                                    rules={1: 3, "burst": 20}),
            {"op": "override", "scope": "s", "url": "http://h/", "ttl_ms": 1,
             "min_delay_ms": 250, "rules": {"1": 3, "burst": 20}})
        # neither key nor url: the scope's default key, resolved by the daemon
        self.assertEqual(_proto.override_request("s", ttl=1, min_delay=0),
                         {"op": "override", "scope": "s", "ttl_ms": 1000, "min_delay_ms": 0})
        self.assertEqual(_proto.override_request("s", ttl=30 * 86400, min_delay=86400)["ttl_ms"],
                         2592000000)

    def test_refused_before_sending(self):
        c = admit.Client("/nonexistent/admitd.sock", connect_timeout=0)
        bad = [
            (TypeError, dict(rules={"0": 1})),  # no ttl
            (TypeError, dict(ttl=60)),  # nothing to set
            (TypeError, dict(ttl="60", rules={"0": 1})),
            (ValueError, dict(ttl=0, rules={"0": 1})),
            (ValueError, dict(ttl=-1, rules={"0": 1})),
            (ValueError, dict(ttl=30 * 86400 + 1, rules={"0": 1})),
            (ValueError, dict(ttl=60, min_delay=-1)),
            (ValueError, dict(ttl=60, min_delay=86401)),
            (TypeError, dict(ttl=60, rules=[("0", 1)])),
            (ValueError, dict(ttl=60, rules={})),
            (ValueError, dict(ttl=60, rules={"0": 0})),
            (ValueError, dict(ttl=60, rules={"0": True})),
            (ValueError, dict(ttl=60, rules={"0": 1000000001})),
            (ValueError, dict(ttl=60, rules={"": 1})),
            (ValueError, dict(ttl=60, rules={-1: 1})),
            (ValueError, dict(ttl=60, rules={0: 1, "0": 2})),
            (ValueError, dict(ttl=60, rules={"r%d" % i: 1 for i in range(17)})),
            (ValueError, dict(key="a", url="http://a/", ttl=60, rules={"0": 1})),
        ]
        for exc, kw in bad:
            with self.subTest(kw=kw):
                with self.assertRaises(exc):
                    c.override("ovr", **kw)
        with self.assertRaises(TypeError):
            c.override("ovr", "k", 60, rules={"0": 1})  # ttl is keyword-only


def admitted(client, key):
    try:
        client.try_acquire("ovr", key).release()
        return True
    except admit.Limited:
        return False


class OverrideTest(ClientCase):
    def test_tighten_refuse_inspect_reset(self):
        k = self.key()
        reply = self.client.override("ovr", k, ttl=60, rules={"0": 1})
        self.assertEqual((reply["ok"], reply["backend"], reply["ttl_ms"]), (True, "local", 60000))
        self.assertNotIn("id", reply)
        lease = self.client.try_acquire("ovr", k)
        self.assertEqual(lease.remaining, 0)
        with self.assertRaises(admit.Limited) as cm:
            self.client.try_acquire("ovr", k)
        self.assertEqual(cm.exception.rule, RULE)
        lease.release()

        with self.assertRaises(admit.BadRequest) as cm:
            self.client.override("ovr", k, ttl=60, rules={"0": 11})  # past 2 x 5
        self.assertEqual(cm.exception.code, "bad_request")
        self.assertIn("override_max", cm.exception.message)

        ins = self.client.inspect("ovr", k)
        self.assertIn("override", ins)
        self.assertTrue(0 < ins["override"]["ttl_ms"] <= 60000, ins)
        self.assertEqual(ins["override"]["rules"], {"0": 1})
        self.assertEqual(ins["rules"][0]["capacity"], 1)

        self.assertIs(self.client.reset("ovr", k)["ok"], True)
        ins = self.client.inspect("ovr", k)
        self.assertNotIn("override", ins)
        self.assertEqual(ins["rules"][0]["capacity"], 5)
        self.assertTrue(admitted(self.client, k))

    def test_loosen_within_the_ceiling_and_replace(self):
        k = self.key()
        self.client.override("ovr", url="https://%s/x" % k.upper(), ttl=60, rules={"0": 10})
        self.assertEqual(self.client.try_acquire("ovr", k).remaining, 9)
        # a new override replaces the last one whole (1 used, 2 allowed)
        self.client.override("ovr", k, ttl=60, rules={0: 2})
        self.assertTrue(admitted(self.client, k))
        self.assertFalse(admitted(self.client, k))

    def test_default_key_and_refusals(self):
        self.client.override("ovr", ttl=60, rules={"0": 1})
        self.assertEqual(self.client.inspect("ovr")["key"], "k")
        self.assertTrue(admitted(self.client, "k"))
        self.assertFalse(admitted(self.client, None))
        self.client.reset("ovr")
        self.assertTrue(admitted(self.client, "k"))
        with self.assertRaises(admit.BadRequest):  # no override_max there
            self.client.override("pen", self.key(), ttl=60, rules={"0": 1})
        with self.assertRaises(admit.BadRequest):  # no such rule
            self.client.override("ovr", self.key(), ttl=60, rules={"fast": 1})
        with self.assertRaises(admit.UnknownScope):
            self.client.override("nope", self.key(), ttl=60, rules={"0": 1})


class AsyncOverrideTest(AsyncClientCase):
    async def test_tighten_refuse_inspect_reset(self):
        k = self.key()
        reply = await self.client.override("ovr", k, ttl=60, rules={"0": 1})
        self.assertEqual((reply["ok"], reply["ttl_ms"]), (True, 60000))
        await (await self.client.try_acquire("ovr", k)).release()
        with self.assertRaises(admit.Limited):
            await self.client.try_acquire("ovr", k)
        with self.assertRaises(admit.BadRequest):
            await self.client.override("ovr", k, ttl=60, rules={"0": 11})
        ins = await self.client.inspect("ovr", k)
        self.assertEqual(ins["override"]["rules"], {"0": 1})
        await self.client.reset("ovr", k)
        self.assertNotIn("override", await self.client.inspect("ovr", k))
        await (await self.client.try_acquire("ovr", k)).release()

    async def test_is_a_coroutine(self):
        call = self.client.override("ovr", self.key(), ttl=1, rules={"0": 3})
        self.assertTrue(hasattr(call, "__await__"))
        self.assertIs((await call)["ok"], True)


if __name__ == "__main__":
    unittest.main()
