"""test_cancel.py - AsyncClient's calls as real coroutines, and cancelled
acquires that spend nothing, in both clients, against the real admitd.

An acquire the caller gives up on while it waits (its task cancelled,
asyncio.wait_for running out, KeyboardInterrupt in the blocking client) is
canceled in the daemon: the key's budget is as if it had never been asked.
Cancel is an op the daemon gained with the protocol's later fields; a
daemon built before it leaves the acquire waiting, admits it later (the
client then releases the lease, but the unit is spent), and the Cancel*
tests fail on it.
"""

import asyncio
import os
import signal
import threading
import time
import unittest

import admit

from .support import AsyncClientCase, ClientCase

now = time.monotonic

CANCEL_CONF = """
[scope busy]
max_concurrent = 1
rule = requests token-bucket 10/1h
; far longer than any wait below: a waiter that leaves the queue within
; the test's deadlines was canceled, it did not time out
timeout = 1m
"""

RULE = "requests token-bucket 10/1h"


def remaining(ins):
    """The busy rule's remaining units in an inspect reply."""
    return {r["rule"]: r["remaining"] for r in ins["rules"]}[RULE]


class CoroutineTest(AsyncClientCase):
    """acquire and try_acquire are coroutines asyncio takes as such."""

    conf = CANCEL_CONF

    async def test_create_task_and_ensure_future(self):
        k = self.key()
        task = asyncio.create_task(self.client.acquire("busy", k))
        lease = await task
        self.assertIsInstance(lease, admit.AsyncLease)
        self.assertIs(await lease.release(), True)
        lease = await asyncio.ensure_future(self.client.try_acquire("busy", k))
        self.assertIs(await lease.release(), True)

    async def test_gather_and_wait_for(self):
        a, b = self.key("-a"), self.key("-b")
        leases = await asyncio.gather(self.client.acquire("busy", a),
                                      self.client.try_acquire("busy", b))
        self.assertEqual([lz.key for lz in leases], [a, b])
        for lz in leases:
            self.assertIs(await lz.release(), True)
        lease = await asyncio.wait_for(self.client.acquire("busy", a, timeout=1), 5)
        self.assertIs(await lease.release(), True)
        # a refusal comes through gather as the exception
        async with self.client.acquire("busy", a):
            res = await asyncio.gather(self.client.try_acquire("busy", a),
                                       return_exceptions=True)
        self.assertIsInstance(res[0], admit.Limited)

    async def test_async_with_still_works(self):
        k = self.key()
        async with self.client.acquire("busy", k) as lease:
            self.assertFalse(lease.released)
        self.assertIs(lease.held, True)

    async def test_an_unused_call_sends_nothing(self):
        k = self.key()
        call = self.client.acquire("busy", k)
        call.close()  # as a coroutine closed before it ran
        with self.assertRaises(RuntimeError):
            await call
        ins = await self.client.inspect("busy", k)
        self.assertEqual((ins["leases"], remaining(ins)), (0, 10))


async def wait_until(cond, what, deadline=5.0):
    end = now() + deadline
    while not await cond():
        if now() >= end:
            raise AssertionError("timed out waiting for " + what)
        await asyncio.sleep(0.01)


class CancelAsyncTest(AsyncClientCase):
    conf = CANCEL_CONF

    async def waiting(self, n):
        async def cond():
            return (await self.client.status())["scopes"]["busy"]["waiting"] == n
        await wait_until(cond, "%d waiting" % n)

    async def check_nothing_spent(self, k, holder):
        """After the canceled waiter left the queue and the holder released,
        only the holder's unit is spent, and the key admits again."""
        await self.waiting(0)
        self.assertIs(await holder.release(), True)
        await asyncio.sleep(0.1)  # an admission the cancel missed would land here
        ins = await self.client.inspect("busy", k)
        self.assertEqual((ins["leases"], remaining(ins)), (0, 9))
        lease = await self.client.try_acquire("busy", k)
        self.assertEqual(remaining(await self.client.inspect("busy", k)), 8)
        await lease.release()

    async def test_cancelled_task_spends_nothing(self):
        k = self.key()
        holder = await self.client.acquire("busy", k)
        task = asyncio.create_task(self.client.acquire("busy", k))
        await self.waiting(1)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        await self.check_nothing_spent(k, holder)

    async def test_wait_for_timeout_spends_nothing(self):
        k = self.key()
        holder = await self.client.acquire("busy", k)
        t0 = now()
        with self.assertRaises(asyncio.TimeoutError):
            await asyncio.wait_for(self.client.acquire("busy", k), 0.3)
        self.assertLess(now() - t0, 0.3 + 1.0)
        await self.check_nothing_spent(k, holder)

    async def test_cancel_on_a_connection_others_use(self):
        # The cancel names its acquire by id: another task's waiting acquire
        # on the same connection (another key) is left alone.
        k, other = self.key(), self.key("-other")
        holder = await self.client.acquire("busy", k)
        oholder = await self.client.acquire("busy", other)
        task = asyncio.create_task(self.client.acquire("busy", k))
        keep = asyncio.create_task(self.client.acquire("busy", other))
        await self.waiting(2)
        task.cancel()
        await self.waiting(1)
        self.assertFalse(keep.done())
        await oholder.release()
        lease = await asyncio.wait_for(keep, 5)
        self.assertIs(await lease.release(), True)
        await self.check_nothing_spent(k, holder)


class CancelSyncTest(ClientCase):
    conf = CANCEL_CONF

    def waiting(self, n):
        end = now() + 5
        while self.client.status()["scopes"]["busy"]["waiting"] != n:
            if now() >= end:
                raise AssertionError("timed out waiting for %d waiting" % n)
            time.sleep(0.01)

    @unittest.skipUnless(threading.current_thread() is threading.main_thread(),
                         "SIGINT reaches the main thread only")
    def test_keyboard_interrupt_cancels_and_spends_nothing(self):
        k = self.key()
        holder = self.client.acquire("busy", k)
        pid = os.getpid()

        def interrupt():
            self.waiting(1)
            os.kill(pid, signal.SIGINT)

        th = threading.Thread(target=interrupt)
        th.start()
        try:
            with self.assertRaises(KeyboardInterrupt):
                self.client.acquire("busy", k)
        finally:
            th.join(10)
        self.waiting(0)
        self.assertIs(holder.release(), True)
        time.sleep(0.1)  # an admission the cancel missed would land here
        ins = self.client.inspect("busy", k)
        self.assertEqual((ins["leases"], remaining(ins)), (0, 9))
        # the connection is still usable, and the key admits
        self.client.try_acquire("busy", k).release()
        self.assertEqual(remaining(self.client.inspect("busy", k)), 8)


if __name__ == "__main__":
    unittest.main()
