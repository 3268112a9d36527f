"""test_reply_fields.py - what both clients add to the protocol's newer
fields and defaults, against the real admitd on FIELDS_CONF.

- A scope's default key: reset, inspect and penalize with neither key nor
  url act on the key the scope's conf names (`key =`).
- A lease's and a refusal's ``remaining`` and ``reset_ms`` (the tightest
  rule after the decision), and a refusal's ``target`` (which target of
  the request refused).
- A release's ``outcome`` ("ok", "limited", "error"), checked before it is
  sent.

The daemon sends remaining, reset_ms and target, and checks outcome,
since the protocol gained them; a daemon built before that fails the tests
that read them (test_lease_remaining_*, test_refusal_*,
test_daemon_refuses_an_unknown_outcome).
"""

import unittest

import admit
from admit import _proto

from .support import AsyncClientCase, ClientCase

FIELDS_CONF = """
[scope dflt]
key = shared
max_concurrent = 100
timeout = 1s

[scope meter]
rule = requests token-bucket 5/1h
timeout = 1s

[scope wide]
rule = requests token-bucket 100/1h
timeout = 1s

[scope free]
timeout = 1s

[scope gw]
rule rpm = requests fixed-window 20/1h
rule = tokens fixed-window 6000/1h
class chat = rpm
default_class = chat
timeout = 1s
"""

# 5/1h refills one unit every 720 s: after one admission the bucket is full
# again 720000 ms later (less the little time the test took).
REFILL_MS = 720000


class LocalOutcomeTest(unittest.TestCase):
    """outcome is checked before anything is sent."""

    def test_values(self):
        for o in ("ok", "limited", "error"):
            self.assertEqual(_proto.release_request("L", outcome=o),
                             {"op": "release", "lease": "L", "outcome": o})
        self.assertEqual(_proto.release_request("L"), {"op": "release", "lease": "L"})
        c = admit.Client("/nonexistent/admitd.sock", connect_timeout=0)
        for bad in ("OK", "429", "", 1, True, ["ok"]):
            with self.subTest(outcome=bad):
                with self.assertRaises(ValueError) as cm:
                    c.release("L", outcome=bad)
                self.assertIn("'ok', 'limited', 'error'", str(cm.exception))


class FieldsTest(ClientCase):
    conf = FIELDS_CONF

    def test_default_key_reset_inspect_penalize(self):
        c = self.client
        self.assertEqual(c.penalize("dflt", retry_after=60)["ok"], True)
        ins = c.inspect("dflt")
        self.assertEqual(ins["key"], "shared")
        self.assertGreater(ins["penalty_ms"], 55000)
        with self.assertRaises(admit.Limited) as cm:
            c.try_acquire("dflt", "shared")  # the same key, named
        self.assertEqual(cm.exception.rule, "penalty")
        self.assertIs(c.reset("dflt")["ok"], True)
        self.assertEqual(c.inspect("dflt")["penalty_ms"], 0)
        c.try_acquire("dflt").release()
        # a scope without a default key: the daemon says so
        with self.assertRaises(admit.BadRequest):
            c.inspect("meter")

    def test_lease_remaining_and_reset_ms(self):
        k = self.key()
        lease = self.client.acquire("meter", k)
        self.assertEqual(lease.remaining, 4)
        self.assertGreater(lease.reset_ms, REFILL_MS - 60000)
        self.assertLessEqual(lease.reset_ms, REFILL_MS)
        lease.release()
        lease = self.client.acquire("meter", k, cost=2)
        self.assertEqual(lease.remaining, 2)
        lease.release()
        # the tightest of the targets' rules: meter's 2 left, not wide's 99
        lease = self.client.acquire(targets=[{"scope": "wide", "key": k},
                                             {"scope": "meter", "key": k}])
        self.assertEqual(lease.remaining, 1)
        lease.release()

    def test_lease_remaining_absent_when_nothing_limits(self):
        lease = self.client.acquire("free", self.key())
        self.assertEqual((lease.remaining, lease.reset_ms), (None, None))
        self.assertEqual(lease.limits, {})
        lease.release()

    def test_limits_per_meter(self):
        k = self.key()
        with self.client.acquire("gw", k) as lease:
            lease.tokens = {"input": 300, "output": 200}
        lease = self.client.acquire("gw", k)
        self.assertEqual(set(lease.limits), {"requests", "tokens"})
        req, tok = lease.limits["requests"], lease.limits["tokens"]
        self.assertIsInstance(req, admit.Limit)
        self.assertEqual((req.rule, req.limit, req.remaining), ("rpm", 20, 18))
        self.assertEqual((tok.rule, tok.limit, tok.remaining), ("1", 6000, 5500))
        self.assertTrue(0 < tok.reset_ms <= 3600000, tok)
        lease.release()
        self.client.acquire("gw", k, cost=18).release()
        with self.assertRaises(admit.Limited) as cm:
            self.client.try_acquire("gw", k)
        self.assertEqual(cm.exception.limits["requests"].remaining, 0)
        self.assertEqual(cm.exception.limits["tokens"].rule, "1")

    def test_limits_of_odd_replies(self):
        # a server's bytes are input: a member of the wrong shape is left out
        a = admit.Admission({"ok": True, "limits": {
            "requests": {"rule": "r", "limit": 2, "remaining": 1, "reset_ms": 5},
            "tokens": {"rule": "t", "limit": "6000", "remaining": 1, "reset_ms": 5},
            "concurrency": [1]}}, "s")
        self.assertEqual(a.limits, {"requests": admit.Limit("r", 2, 1, 5)})
        self.assertEqual(admit.Admission({"ok": True, "limits": 3}, "s").limits, {})

    def test_refusal_remaining_reset_ms_and_target(self):
        k = self.key()
        self.client.acquire("meter", k, cost=5).release()
        with self.assertRaises(admit.Limited) as cm:
            self.client.try_acquire("meter", k)
        e = cm.exception
        self.assertEqual(e.remaining, 0)
        self.assertGreater(e.reset_ms, 5 * REFILL_MS - 60000)
        self.assertLessEqual(e.reset_ms, 5 * REFILL_MS)
        self.assertEqual(e.target, {"index": 0, "scope": "meter", "key": k})
        self.assertIn("target 0", str(e))
        with self.assertRaises(admit.BudgetExceeded) as cm:
            self.client.acquire(targets=[{"scope": "wide", "key": k},
                                         {"scope": "meter", "url": "https://%s/x" % k}],
                                timeout=1)
        self.assertEqual(cm.exception.target, {"index": 1, "scope": "meter", "key": k.lower()})
        self.assertEqual(cm.exception.remaining, 0)

    def test_release_outcome(self):
        k = self.key()
        for o in ("ok", "limited", "error"):
            lease = self.client.acquire("wide", k)
            self.assertIs(lease.release(outcome=o), True)
        with self.client.acquire("wide", k) as lease:
            lease.outcome = "limited"
        self.assertIs(lease.held, True)
        lease = self.client.acquire("wide", k)
        with self.assertRaises(ValueError):
            lease.release(outcome="429")
        self.assertFalse(lease.released)  # nothing was sent: still held
        self.assertIs(lease.release(outcome="error"), True)

    def test_daemon_refuses_an_unknown_outcome(self):
        lease = self.client.acquire("wide", self.key())
        r = self.client.request_line('{"op":"release","lease":"%s","outcome":"bogus","id":"o"}'
                                     % lease.lease)
        self.assertEqual((r["ok"], r["error"]), (False, "bad_request"))
        self.assertIs(lease.release(), True)  # the refused release settled nothing


class AsyncFieldsTest(AsyncClientCase):
    conf = FIELDS_CONF

    async def test_default_key(self):
        c = self.client
        await c.penalize("dflt", retry_after=60)
        self.assertEqual((await c.inspect("dflt"))["key"], "shared")
        await c.reset("dflt")
        self.assertEqual((await c.inspect("dflt"))["penalty_ms"], 0)

    async def test_release_outcome(self):
        k = self.key()
        lease = await self.client.acquire("wide", k)
        with self.assertRaises(ValueError):
            await lease.release(outcome="fine")
        self.assertIs(await lease.release(outcome="limited"), True)
        async with self.client.acquire("wide", k) as lease:
            lease.outcome = "error"
        self.assertIs(lease.held, True)

    async def test_lease_remaining_and_refusal_target(self):
        k = self.key()
        lease = await self.client.acquire("meter", k, cost=5)
        self.assertEqual(lease.remaining, 0)
        self.assertGreater(lease.reset_ms, 5 * REFILL_MS - 60000)
        await lease.release()
        with self.assertRaises(admit.Limited) as cm:
            await self.client.try_acquire("meter", k)
        self.assertEqual(cm.exception.target, {"index": 0, "scope": "meter", "key": k})
        self.assertEqual(cm.exception.remaining, 0)
        self.assertGreater(cm.exception.reset_ms, 0)
        self.assertEqual(cm.exception.limits["requests"],
                         admit.Limit("0", 5, 0, cm.exception.reset_ms))


if __name__ == "__main__":
    unittest.main()
