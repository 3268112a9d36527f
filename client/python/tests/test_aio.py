"""test_aio.py - admit.AsyncClient against the real admitd.

The asyncio twin of test_client.py: the same calls, results and error
paths, plus tasks sharing one client and a cancelled acquire.
"""

import asyncio
import os
import tempfile
import time
import unittest

import admit

from .support import PROMPT, SCOPES, AsyncDaemonCase, harness, unreachable_calls

now = time.monotonic


async def wait_for(cond, deadline=5.0, what="condition"):
    end = now() + deadline
    while True:
        r = await cond()
        if r:
            return r
        if now() >= end:
            raise AssertionError("timed out waiting for %s" % what)
        await asyncio.sleep(0.01)


async def admitted(client, scope, key):
    try:
        lease = await client.try_acquire(scope, key)
    except admit.Limited:
        return False
    await lease.release()
    return True


class AsyncUnreachableTest(unittest.IsolatedAsyncioTestCase):

    async def test_every_call_raises_unavailable(self):
        with tempfile.TemporaryDirectory() as d:
            client = admit.AsyncClient(os.path.join(d, "none.sock"), connect_timeout=0)
            for call in unreachable_calls(client):
                t0 = now()
                with self.assertRaises(admit.Unavailable) as cm:
                    await call()
                self.assertLess(now() - t0, PROMPT)
                self.assertEqual(cm.exception.code, "unavailable")
                self.assertIn(client.socket, cm.exception.message)
            await client.close()


class AsyncClientTest(AsyncDaemonCase):
    async def asyncSetUp(self):
        self.client = admit.AsyncClient(self.daemon.sock_path)

    async def asyncTearDown(self):
        await self.client.close()

    async def test_ping_and_status(self):
        self.assertIs(await self.client.ping(), True)
        st = await self.client.status()
        self.assertIs(st["ok"], True)
        self.assertNotIn("id", st)
        self.assertEqual(st["backend"], "local")
        self.assertEqual(sorted(set(SCOPES) & set(st["scopes"])), sorted(SCOPES))

    async def test_acquire_and_release(self):
        k = self.key()
        lease = await self.client.acquire("one", k, timeout=1)
        self.assertIsInstance(lease, admit.AsyncLease)
        self.assertTrue(lease.lease)
        self.assertEqual(lease.backend, "local")
        self.assertFalse(await admitted(self.client, "one", k))
        self.assertIs(await lease.release(), True)
        self.assertIs(await self.client.release(lease), False)
        self.assertIs(await self.client.release("no-such-lease-0123"), False)
        self.assertTrue(await admitted(self.client, "one", k))

    async def test_async_with_acquire_releases(self):
        k = self.key()
        async with self.client.acquire("one", k) as lease:
            self.assertIsInstance(lease, admit.AsyncLease)
            with self.assertRaises(admit.Limited) as cm:
                await self.client.try_acquire("one", k)
            self.assertIsNotNone(cm.exception.retry_after)
        self.assertIs(lease.held, True)
        async with self.client.try_acquire("one", k) as lease2:
            self.assertFalse(lease2.released)
        self.assertIs(lease2.held, True)
        lease3 = await self.client.acquire("one", k)
        async with lease3:
            pass
        self.assertIs(lease3.held, True)
        self.assertTrue(await admitted(self.client, "one", k))

    async def test_an_acquire_call_runs_once(self):
        call = self.client.acquire("one", self.key())
        lease = await call
        with self.assertRaises(RuntimeError):
            await call
        self.assertIs(await lease.release(), True)

    async def test_unknown_scope(self):
        with self.assertRaises(admit.UnknownScope) as cm:
            await self.client.acquire("no-such-scope", "k")
        self.assertEqual(cm.exception.code, "unknown_scope")
        with self.assertRaises(admit.UnknownScope):
            await self.client.penalize("no-such-scope", "k", retry_after=1)

    async def test_limited_and_budget_exceeded(self):
        k = self.key()
        await (await self.client.try_acquire("quota", k)).release()
        with self.assertRaises(admit.Limited) as cm:
            await self.client.try_acquire("quota", k)
        self.assertEqual(cm.exception.rule, "quota 1/1h")
        self.assertGreater(cm.exception.retry_after, 3600 - 60)
        self.assertLessEqual(cm.exception.retry_after, 3600)
        t0 = now()
        with self.assertRaises(admit.BudgetExceeded) as cm:
            await self.client.acquire("quota", k, timeout=1)
        self.assertLess(now() - t0, PROMPT)
        self.assertGreater(cm.exception.retry_after, 3600 - 60)

    async def test_too_many_waiters(self):
        k = self.key()
        async with self.client.acquire("narrow", k):
            task = await self.start_waiter(k, "narrow")
            with self.assertRaises(admit.TooManyWaiters):
                await self.client.acquire("narrow", k)
        lease = await asyncio.wait_for(task, 5)
        self.assertIs(await lease.release(), True)

    async def test_timeout(self):
        k = self.key()
        async with self.client.acquire("one", k):
            t0 = now()
            with self.assertRaises(admit.Timeout):
                await self.client.acquire("one", k, timeout=0.3)
            waited = now() - t0
        self.assertGreaterEqual(waited, 0.3 - harness.SLACK)
        self.assertLess(waited, 0.3 + PROMPT)

    async def test_tokens_at_release(self):
        k = self.key()
        async with self.client.acquire("tok", k) as lease:
            lease.tokens = {"input": 300, "output": 200}
        self.assertIs(lease.held, True)
        with self.assertRaises(admit.Limited) as cm:
            await self.client.try_acquire("tok", k)
        self.assertEqual(cm.exception.rule, "tokens.input token-bucket 100/1h")
        k2 = self.key("-explicit")
        lease = await self.client.acquire("tok", k2)
        self.assertIs(await lease.release(tokens={"input": 300}), True)
        self.assertFalse(await admitted(self.client, "tok", k2))

    async def test_penalize(self):
        k = self.key()
        reply = await self.client.penalize("pen", k, retry_after=30)
        self.assertIs(reply["ok"], True)
        with self.assertRaises(admit.Limited) as cm:
            await self.client.try_acquire("pen", k)
        self.assertEqual(cm.exception.rule, "penalty")
        self.assertGreater(cm.exception.retry_after, 29)
        k2 = self.key("-hdr")
        await self.client.penalize("pen", k2, retry_after="120")
        with self.assertRaises(admit.Limited) as cm:
            await self.client.try_acquire("pen", k2)
        self.assertGreater(cm.exception.retry_after, 119)

    async def test_tasks_share_a_client(self):
        k = self.key()
        intervals = []

        async def worker(i):
            for _ in range(5):
                async with self.client.acquire("two", k, timeout=10):
                    t_in = now()
                    await asyncio.sleep(0.02)
                    t_out = now()
                intervals.append((t_in, t_out))
            return i

        self.assertEqual(await asyncio.gather(*(worker(i) for i in range(8))), list(range(8)))
        self.assertEqual(len(intervals), 40)
        self.assertEqual(harness.max_overlap(intervals), 2)

    async def start_waiter(self, k, scope="one"):
        """A task blocked in acquire(scope, k), once the daemon counts it."""
        task = asyncio.ensure_future(self.client.acquire(scope, k, timeout=5))

        async def waiting():
            return (await self.client.status())["scopes"][scope]["waiting"] >= 1

        await wait_for(waiting, what="the acquire to wait")
        return task

    async def test_ping_is_not_stuck_behind_a_waiting_acquire(self):
        k = self.key()
        holder = await self.client.acquire("one", k)
        task = await self.start_waiter(k)
        t0 = now()
        self.assertIs(await self.client.ping(), True)
        self.assertLess(now() - t0, PROMPT)
        self.assertFalse(task.done())
        await holder.release()
        lease = await asyncio.wait_for(task, 5)
        self.assertIs(await lease.release(), True)

    async def test_cancelled_acquire_is_released_when_admitted(self):
        k = self.key()
        holder = await self.client.acquire("one", k)
        task = await self.start_waiter(k)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        await holder.release()
        # The daemon admits the cancelled acquire; the client releases it.
        await wait_for(lambda: admitted(self.client, "one", k), what="orphan released")

    async def test_close_releases_attached_leases(self):
        k = self.key()
        other = admit.AsyncClient(self.daemon.sock_path)
        await other.acquire("one", k)
        self.assertFalse(await admitted(self.client, "one", k))
        await other.close()
        await wait_for(lambda: admitted(self.client, "one", k), what="lease freed by close")
        with self.assertRaises(admit.Unavailable):
            await other.ping()

    async def test_detach(self):
        k = self.key()
        async with admit.AsyncClient(self.daemon.sock_path) as other:
            lease = await other.acquire("one", k, detach=True)
        self.assertFalse(await admitted(self.client, "one", k))
        self.assertIs(await self.client.release(lease.lease), True)

    async def test_raw_line_transport(self):
        r = await self.client.request_line('{"op":"ping","id":"raw-1"}')
        self.assertEqual(r, {"ok": True, "id": "raw-1"})
        r = await self.client.request_line(b"{not json")
        self.assertEqual((r["ok"], r["error"]), (False, "bad_request"))
        self.assertIs(await self.client.ping(), True)
