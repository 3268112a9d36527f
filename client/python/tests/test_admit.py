"""test_admit.py - Client.admit and AsyncClient.admit, admissions with nothing
to release ("lease": false), against the real admitd.

An admission counts against the scope's limits as a lease does (5/1h admits
five, then Limited with a retry), carries what is left, leaves the daemon
holding no lease, and is refused BadRequest on a scope whose release books
something; detach or reserve without a lease is a ValueError before anything
is sent; a cancelled admit is canceled in the daemon and spends nothing.
"""

import asyncio
import unittest

import admit
from admit import _proto

from .support import AsyncClientCase, ClientCase

ADMIT_CONF = """
[scope meter]
rule = requests token-bucket 5/1h
timeout = 1s

[scope capped]
max_concurrent = 3
timeout = 1s

[scope single]
quota = 1/1h
timeout = 5s
"""


class LocalTest(unittest.TestCase):
    def test_request(self):
        self.assertEqual(_proto.acquire_request("s", "k", lease=False),
                         {"op": "acquire", "scope": "s", "key": "k", "lease": False})
        self.assertNotIn("lease", _proto.acquire_request("s", "k"))
        for kw in ({"detach": True}, {"reserve": {"out": 5}}):
            with self.subTest(**kw), self.assertRaises(ValueError):
                _proto.acquire_request("s", "k", lease=False, **kw)


class AdmitTest(ClientCase):
    conf = ADMIT_CONF

    def test_counts_and_holds_nothing(self):
        c, k = self.client, self.key()
        a = c.admit("meter", k)
        self.assertIsInstance(a, admit.Admission)
        self.assertFalse(hasattr(a, "lease"))
        self.assertEqual((a.scope, a.key, a.remaining, a.backend), ("meter", k, 4, "local"))
        self.assertNotIn("lease", a.reply)
        for left in (3, 2, 1, 0):
            self.assertEqual(c.try_admit("meter", k).remaining, left)
        with self.assertRaises(admit.Limited) as cm:
            c.try_admit("meter", k)
        self.assertGreater(cm.exception.retry_after, 0)
        self.assertEqual(c.request({"op": "status"})["leases"], 0)

    def test_refused_where_a_release_books(self):
        with self.assertRaises(admit.BadRequest) as cm:
            self.client.admit("capped", self.key())
        self.assertIn("max_concurrent", str(cm.exception))
        self.client.try_acquire("capped", self.key()).release()  # the connection goes on


class AsyncAdmitTest(AsyncClientCase):
    conf = ADMIT_CONF

    async def test_counts_and_refuses(self):
        c, k = self.client, self.key()
        self.assertEqual((await c.admit("meter", k, cost=2)).remaining, 3)
        self.assertEqual((await c.try_admit("meter", k, cost=3)).remaining, 0)
        with self.assertRaises(admit.Limited):
            await c.try_admit("meter", k)
        with self.assertRaises(admit.BadRequest):
            await c.admit("capped", k)

    async def test_a_cancelled_admit_spends_nothing(self):
        c, k = self.client, self.key()
        await c.penalize("single", k, retry_after=0.8)  # the admit waits it out
        task = asyncio.ensure_future(c.admit("single", k))
        await asyncio.sleep(0.1)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.9)
        self.assertEqual((await c.try_admit("single", k)).remaining, 0)  # quota 1/1h: ours


if __name__ == "__main__":
    unittest.main()
