"""test_connect.py - both clients waiting for their daemon, and reconnecting.

In a pod the application and admitd start together, so a client may ask
before the daemon listens: a missing or refused socket is retried for
connect_timeout, never beyond the request's own budget. Reconnecting
follows one rule in Client and AsyncClient alike: a request in flight when
the connection dies fails with Unavailable; the next request connects
again (waiting out a restart's gap the same way). Every test runs the real
daemon, started late, stopped, restarted or killed under the client.
"""

import asyncio
import os
import tempfile
import threading
import time
import unittest

import admit

from .support import CONF, PROMPT, DaemonCase, check_binary, harness

now = time.monotonic

# How late the daemon starts in the "client first" tests.
LATE = 0.5


class LateStart(object):
    """A daemon on CONF started LATE seconds from now, in a thread (the
    harness waits until its socket accepts). stop() joins and cleans up."""

    def __init__(self, daemon=None, delay=LATE):
        check_binary()
        self.daemon = daemon or harness.Admitd(CONF)
        self.error = []
        self.thread = threading.Timer(delay, self._start)
        self.thread.start()

    def _start(self):
        try:
            self.daemon.start()
        except BaseException as e:  # reported by stop()
            self.error.append(e)

    @property
    def sock_path(self):
        return self.daemon.sock_path

    def join(self):
        self.thread.join(30)
        if self.error:
            raise self.error[0]

    def stop(self):
        self.thread.cancel()
        self.thread.join(30)
        self.daemon.cleanup()
        if self.error:
            raise self.error[0]


class LinkLater(object):
    """A socket path that appears (a symlink to a running daemon's socket)
    `delay` seconds from now: until then a connect finds no socket, as
    when the daemon is still starting, while the daemon itself keeps state
    the test set up (a held key)."""

    def __init__(self, target, delay=LATE):
        self.tmp = tempfile.TemporaryDirectory(prefix="admit-link-")
        self.path = os.path.join(self.tmp.name, "admitd.sock")
        self.thread = threading.Timer(delay, os.symlink, (target, self.path))
        self.thread.start()

    def cleanup(self):
        self.thread.cancel()
        self.thread.join(10)
        self.tmp.cleanup()


def no_daemon_path(tmp):
    return os.path.join(tmp, "none.sock")


class ClientWaitsForDaemonTest(unittest.TestCase):
    def test_request_waits_for_a_daemon_starting_late(self):
        late = LateStart()
        try:
            with admit.Client(late.sock_path) as c:  # connect_timeout 5 s
                t0 = now()
                lease = c.acquire("one", "late-1", timeout=3)
                took = now() - t0
                self.assertGreaterEqual(took, LATE - harness.EPS)
                self.assertLess(took, LATE + harness.START_DEADLINE)
                self.assertEqual(lease.backend, "local")
                with self.assertRaises(admit.Limited):
                    c.try_acquire("one", "late-1")  # really held by that daemon
                self.assertIs(lease.release(), True)
        finally:
            late.stop()

    def test_connect_timeout_zero_fails_at_once(self):
        with tempfile.TemporaryDirectory() as d:
            c = admit.Client(no_daemon_path(d), connect_timeout=0)
            t0 = now()
            with self.assertRaises(admit.Unavailable) as cm:
                c.ping()
            self.assertLess(now() - t0, PROMPT)
            self.assertIn("No such file", cm.exception.message)

    def test_connect_timeout_bounds_the_wait(self):
        with tempfile.TemporaryDirectory() as d:
            c = admit.Client(no_daemon_path(d), connect_timeout=0.3)
            t0 = now()
            with self.assertRaises(admit.Unavailable):
                c.ping()
            took = now() - t0
        self.assertGreaterEqual(took, 0.3 - harness.EPS)
        self.assertLess(took, 0.3 + PROMPT)

    def test_the_acquire_budget_bounds_the_connect(self):
        with tempfile.TemporaryDirectory() as d:
            c = admit.Client(no_daemon_path(d))  # connect_timeout 5 s
            t0 = now()
            with self.assertRaises(admit.Unavailable):
                c.acquire("one", "k", timeout=0.3)
            took = now() - t0
            self.assertGreaterEqual(took, 0.3 - harness.EPS)
            self.assertLess(took, 0.3 + PROMPT)
            t0 = now()  # try_acquire's budget is 0: one attempt
            with self.assertRaises(admit.Unavailable):
                c.try_acquire("one", "k")
            self.assertLess(now() - t0, PROMPT)

    def test_bad_connect_timeout(self):
        for bad in (-1, "5", None, float("nan")):
            with self.assertRaises((TypeError, ValueError)):
                admit.Client("/nonexistent.sock", connect_timeout=bad)


class ConnectShareBudgetTest(DaemonCase):
    """The connect and the wait together stay within an acquire's budget."""

    def test_time_spent_connecting_is_taken_from_the_wait(self):
        k = self.key()
        holder = admit.Client(self.daemon.sock_path)
        link = LinkLater(self.daemon.sock_path)
        try:
            holder.acquire("one", k)
            c = admit.Client(link.path)
            t0 = now()
            with self.assertRaises(admit.Timeout):
                c.acquire("one", k, timeout=1.0)  # ~0.5 s connecting, ~0.5 s waiting
            took = now() - t0
            c.close()
        finally:
            link.cleanup()
            holder.close()
        self.assertGreaterEqual(took, 1.0 - harness.EPS)
        # 1.5 s if the whole budget were still sent once connected
        self.assertLess(took, 1.0 + 0.3)


class ClientReconnectTest(unittest.TestCase):
    def setUp(self):
        check_binary()
        self.daemon = harness.Admitd(CONF).start()
        self.client = admit.Client(self.daemon.sock_path)

    def tearDown(self):
        self.client.close()
        self.daemon.cleanup()

    def test_restart_between_requests(self):
        self.assertIs(self.client.ping(), True)
        self.daemon.stop()
        self.daemon.start()
        # The connection the daemon closed is noticed before sending.
        self.assertIs(self.client.ping(), True)
        lease = self.client.acquire("one", "after-restart", timeout=1)
        self.assertIs(lease.release(), True)

    def test_connect_retry_covers_the_restart_gap(self):
        self.assertIs(self.client.ping(), True)
        self.daemon.stop()
        late = LateStart(self.daemon)
        try:
            t0 = now()
            lease = self.client.acquire("one", "gap-1", timeout=3)
            took = now() - t0
            self.assertIs(lease.release(), True)
            late.join()
        finally:
            late.thread.cancel()
        self.assertGreaterEqual(took, LATE - harness.EPS)

    def test_request_in_flight_fails_then_the_next_reconnects(self):
        holder = self.client.acquire("one", "k")
        errs = []

        def waiter():
            try:
                self.client.acquire("one", "k", timeout=10)
            except admit.AdmitError as e:
                errs.append(e)

        th = threading.Thread(target=waiter)
        th.start()
        deadline = now() + 5
        while self.client.status()["scopes"]["one"]["waiting"] != 1 and now() < deadline:
            time.sleep(0.01)
        self.daemon.kill9()
        th.join(5)
        self.assertEqual([type(e) for e in errs], [admit.Unavailable])
        self.daemon.start()
        # The next request connects again; the lease went with the old daemon.
        self.assertIs(holder.release(), False)
        self.assertIs(self.client.ping(), True)
        self.client.acquire("one", "k", timeout=1).release()


class AsyncWaitsForDaemonTest(unittest.IsolatedAsyncioTestCase):
    async def test_request_waits_for_a_daemon_starting_late(self):
        late = LateStart()
        try:
            async with admit.AsyncClient(late.sock_path) as c:
                t0 = now()
                lease = await c.acquire("one", "late-1", timeout=3)
                took = now() - t0
                self.assertGreaterEqual(took, LATE - harness.EPS)
                with self.assertRaises(admit.Limited):
                    await c.try_acquire("one", "late-1")
                self.assertIs(await lease.release(), True)
        finally:
            late.stop()

    async def test_tasks_waiting_together_share_one_connection(self):
        late = LateStart()
        try:
            async with admit.AsyncClient(late.sock_path) as c:
                pings = await asyncio.gather(*(c.ping() for _ in range(5)))
                self.assertEqual(pings, [True] * 5)
                conn = c._conn
                self.assertIs(await c.ping(), True)
                self.assertIs(c._conn, conn)  # the losers' connections were closed
        finally:
            late.stop()

    async def test_connect_timeout_zero_and_bounds(self):
        with tempfile.TemporaryDirectory() as d:
            c = admit.AsyncClient(no_daemon_path(d), connect_timeout=0)
            t0 = now()
            with self.assertRaises(admit.Unavailable):
                await c.ping()
            self.assertLess(now() - t0, PROMPT)
            c = admit.AsyncClient(no_daemon_path(d), connect_timeout=0.3)
            t0 = now()
            with self.assertRaises(admit.Unavailable):
                await c.ping()
            took = now() - t0
            self.assertGreaterEqual(took, 0.3 - harness.EPS)
            self.assertLess(took, 0.3 + PROMPT)
            c = admit.AsyncClient(no_daemon_path(d))
            t0 = now()
            with self.assertRaises(admit.Unavailable):
                await c.acquire("one", "k", timeout=0.3)
            took = now() - t0
            self.assertGreaterEqual(took, 0.3 - harness.EPS)
            self.assertLess(took, 0.3 + PROMPT)
            await c.close()


class AsyncConnectShareBudgetTest(unittest.IsolatedAsyncioTestCase):
    async def test_time_spent_connecting_is_taken_from_the_wait(self):
        check_binary()
        d = harness.Admitd(CONF).start()
        link = LinkLater(d.sock_path)
        try:
            async with admit.AsyncClient(d.sock_path) as holder:
                await holder.acquire("one", "k")
                async with admit.AsyncClient(link.path) as c:
                    t0 = now()
                    with self.assertRaises(admit.Timeout):
                        await c.acquire("one", "k", timeout=1.0)
                    took = now() - t0
        finally:
            link.cleanup()
            d.cleanup()
        self.assertGreaterEqual(took, 1.0 - harness.EPS)
        self.assertLess(took, 1.0 + 0.3)


class AsyncReconnectTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        check_binary()
        self.daemon = harness.Admitd(CONF).start()
        self.client = admit.AsyncClient(self.daemon.sock_path)

    async def asyncTearDown(self):
        await self.client.close()
        self.daemon.cleanup()

    async def test_restart_between_requests(self):
        self.assertIs(await self.client.ping(), True)
        # Blocking calls: the client's reader gets no turn to see the end.
        self.daemon.stop()
        self.daemon.start()
        self.assertIs(await self.client.ping(), True)
        lease = await self.client.acquire("one", "after-restart", timeout=1)
        self.assertIs(await lease.release(), True)

    async def test_connect_retry_covers_the_restart_gap(self):
        self.assertIs(await self.client.ping(), True)
        self.daemon.stop()
        late = LateStart(self.daemon)
        try:
            t0 = now()
            lease = await self.client.acquire("one", "gap-1", timeout=3)
            took = now() - t0
            self.assertIs(await lease.release(), True)
            late.join()
        finally:
            late.thread.cancel()
        self.assertGreaterEqual(took, LATE - harness.EPS)

    async def test_request_in_flight_fails_then_the_next_reconnects(self):
        holder = await self.client.acquire("one", "k")
        task = asyncio.ensure_future(self.client.acquire("one", "k", timeout=10))
        deadline = now() + 5
        while (await self.client.status())["scopes"]["one"]["waiting"] != 1:
            self.assertLess(now(), deadline, "the acquire never waited")
            await asyncio.sleep(0.01)
        self.daemon.kill9()
        with self.assertRaises(admit.Unavailable) as cm:
            await asyncio.wait_for(task, 5)
        self.assertIn("connection", cm.exception.message)
        self.daemon.start()
        self.assertIs(await holder.release(), False)
        self.assertIs(await self.client.ping(), True)
        await (await self.client.acquire("one", "k", timeout=1)).release()


if __name__ == "__main__":
    unittest.main()
