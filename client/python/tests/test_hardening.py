"""test_hardening.py - regression tests for the clients' edge cases.

Each test pins one bug a review found: an over-long request line (refused
locally, and mapped to its caller if the daemon refuses it), a reply taken
in the same loop pass (or thread switch) as a cancel or KeyboardInterrupt
(its lease must not be lost), a fork (the child must not keep the parent's
connection open) and AsyncClient.close() during a connect.
"""

import asyncio
import os
import time
import unittest

import admit
from admit import _proto
from admit import aio as admit_aio
from admit import client as admit_client

from .support import AsyncDaemonCase, DaemonCase
from .test_aio import admitted as async_admitted
from .test_aio import wait_for as async_wait_for
from .test_client import admitted, wait_for

def big_key(total):
    """A key making the encoded acquire of ("one", key) exactly total bytes
    (newline included) with id 1..9."""
    base = len(_proto.encode(dict(_proto.acquire_request("one", ""), id=1)))
    return "x" * (total - base)


class PendingLineTooLongTest(unittest.TestCase):
    """The id-less line_too_long reply goes to the line that caused it."""

    def test_idless_line_too_long_goes_to_the_longest_pending_line(self):
        p = _proto.Pending()
        p.add(1, "acquire-waiting", 120)
        p.add(2, "the-long-one", 70000)
        p.add(None, "raw-idless", 30)
        reply = {"ok": False, "error": "line_too_long", "message": "too long"}
        self.assertEqual(p.take(reply), ("the-long-one", None))
        # The others still wait (the connection's death will answer them).
        self.assertEqual(sorted(p.clear()), ["acquire-waiting", "raw-idless"])

    def test_idless_line_too_long_from_a_raw_idless_line(self):
        p = _proto.Pending()
        p.add(None, "short-raw", 30)
        p.add(None, "long-raw", 9000)
        reply = {"ok": False, "error": "line_too_long"}
        self.assertEqual(p.take(reply)[0], "long-raw")
        # Other id-less replies still go in FIFO order.
        self.assertEqual(p.take({"ok": True})[0], "short-raw")

    def test_other_idless_replies_stay_fifo(self):
        p = _proto.Pending()
        p.add(None, "a", 10)
        p.add(None, "b", 99999)
        self.assertEqual(p.take({"ok": False, "error": "bad_request"})[0], "a")


class LineTooLongTest(DaemonCase):
    def setUp(self):
        self.client = admit.Client(self.daemon.sock_path)

    def tearDown(self):
        self.client.close()

    def test_refused_locally_and_leases_survive(self):
        k = self.key()
        lease = self.client.acquire("one", k)
        with self.assertRaises(admit.BadRequest) as cm:
            self.client.acquire("one", big_key(65537))
        self.assertEqual(cm.exception.code, "line_too_long")
        with self.assertRaises(admit.BadRequest):
            self.client.request_line(b'{"op":"ping","pad":"' + b"y" * 70000 + b'"}')
        # Nothing was sent: the connection and its lease are intact.
        self.assertFalse(admitted(self.client, "one", k))
        self.assertIs(lease.release(), True)
        self.assertIs(self.client.ping(), True)

    def test_exactly_max_line_is_sent(self):
        # 65536 bytes with the newline: sent, and read by the daemon (an
        # answer with the id, not an id-less line_too_long).
        head, tail = b'{"op":"ping","id":"big","pad":"', b'"}\n'
        line = head + b"y" * (65536 - len(head) - len(tail)) + tail
        self.assertEqual(len(line), 65536)
        r = self.client.request_line(line)
        self.assertEqual(r.get("id"), "big")
        self.assertNotEqual(r.get("error"), "line_too_long")
        self.assertIs(self.client.ping(), True)

    def test_client_max_line_above_the_daemons(self):
        # The daemon refuses (max_line 64 KiB) with no id and closes: the
        # caller gets BadRequest, not Unavailable.
        c = admit.Client(self.daemon.sock_path, max_line=1 << 20)
        try:
            with self.assertRaises(admit.BadRequest) as cm:
                c.acquire("one", big_key(100000))
            self.assertEqual(cm.exception.code, "line_too_long")
            self.assertIs(c.ping(), True)  # a new connection
        finally:
            c.close()

    def test_bad_max_line(self):
        for bad in (0, -1, 1.5, "64k", True):
            with self.assertRaises((ValueError, TypeError)):
                admit.Client(self.daemon.sock_path, max_line=bad)


class InterruptTest(DaemonCase):
    """A KeyboardInterrupt after the reply arrived must not lose the lease."""

    def setUp(self):
        self.client = admit.Client(self.daemon.sock_path)

    def tearDown(self):
        self.client.close()

    def test_interrupt_after_the_reply_releases_the_lease(self):
        k = self.key()
        real = admit_client._Waiter

        class LateInterrupt(real):
            __slots__ = ()

            def __init__(self):
                super().__init__()
                ev = self.event

                class Ev(object):
                    def wait(self, timeout=None):
                        ev.wait(5)  # the reply is in
                        raise KeyboardInterrupt

                    def is_set(self):
                        return ev.is_set()

                    def set(self):
                        ev.set()

                self.event = Ev()

        admit_client._Waiter = LateInterrupt
        try:
            with self.assertRaises(KeyboardInterrupt):
                self.client.acquire("one", k)
        finally:
            admit_client._Waiter = real
        wait_for(lambda: admitted(self.client, "one", k), what="lease released")


class ForkTest(DaemonCase):
    def test_child_does_not_keep_the_parents_connection(self):
        # P takes a lease, forks G and exits without closing its client (no
        # shutdown: the way a process dies). While G lives, the lease must
        # be freed: G must not hold P's connection open. G then uses the
        # inherited client, which connects again.
        k = self.key()
        ready_r, ready_w = os.pipe()
        gate_r, gate_w = os.pipe()
        res_r, res_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # P
            try:
                os.close(ready_r)
                os.close(gate_w)
                os.close(res_r)
                c = admit.Client(self.daemon.sock_path)
                c.acquire("one", k)
                if os.fork() == 0:  # G
                    try:
                        os.close(ready_w)
                        os.read(gate_r, 1)
                        os.write(res_w, b"1" if c.ping() is True else b"0")
                    finally:
                        os._exit(0)
                os.write(ready_w, b"a")
            finally:
                os._exit(0)
        os.close(ready_w)
        os.close(gate_r)
        os.close(res_w)
        other = admit.Client(self.daemon.sock_path)
        try:
            self.assertEqual(os.read(ready_r, 1), b"a")
            _, status = os.waitpid(pid, 0)
            self.assertEqual(os.waitstatus_to_exitcode(status), 0)
            wait_for(lambda: admitted(other, "one", k), what="lease freed when P exited")
        finally:
            os.close(gate_w)  # G goes on
            got = os.read(res_r, 1)
            os.close(res_r)
            os.close(ready_r)
            other.close()
        self.assertEqual(got, b"1", "the child connects again")


class AsyncHardeningTest(AsyncDaemonCase):
    async def asyncSetUp(self):
        self.client = admit.AsyncClient(self.daemon.sock_path)

    async def asyncTearDown(self):
        await self.client.close()

    async def test_line_too_long(self):
        k = self.key()
        lease = await self.client.acquire("one", k)
        with self.assertRaises(admit.BadRequest) as cm:
            await self.client.acquire("one", big_key(65537))
        self.assertEqual(cm.exception.code, "line_too_long")
        self.assertFalse(await async_admitted(self.client, "one", k))
        self.assertIs(await lease.release(), True)
        c = admit.AsyncClient(self.daemon.sock_path, max_line=1 << 20)
        try:
            # Small enough to be written in one go: asyncio drops what is
            # left to read when a write fails.
            with self.assertRaises(admit.BadRequest):
                await c.acquire("one", big_key(70000))
            self.assertIs(await c.ping(), True)
        finally:
            await c.close()

    async def cancel_around_dispatch(self, before):
        """An acquire cancelled in the same loop pass as its reply is
        dispatched (before or after the dispatch); its lease must be
        released."""
        k = self.key()
        await self.client.ping()
        conn = self.client._conn
        real = conn._dispatch
        box = {}

        def dispatch(reply):
            task = box.get("task")
            hit = task is not None and isinstance(reply.get("lease"), str)
            if hit and before:
                task.cancel()
            real(reply)
            if hit and not before:
                task.cancel()

        conn._dispatch = dispatch
        box["task"] = asyncio.ensure_future(self.client.acquire("one", k))
        with self.assertRaises(asyncio.CancelledError):
            await box["task"]
        box.clear()
        await async_wait_for(
            lambda: async_admitted(self.client, "one", k), what="lease released"
        )

    async def test_cancel_after_the_reply_was_taken(self):
        await self.cancel_around_dispatch(before=False)

    async def test_cancel_just_before_the_reply_is_taken(self):
        await self.cancel_around_dispatch(before=True)

    async def test_close_during_connect(self):
        gate = asyncio.Event()
        entered = asyncio.Event()
        made = []
        real = admit_aio._AsyncConn.open
        attr = admit_aio._AsyncConn.__dict__["open"]

        async def slow_open(path, connect_timeout):
            entered.set()
            await gate.wait()
            conn = await real(path, connect_timeout)
            made.append(conn)
            return conn

        admit_aio._AsyncConn.open = staticmethod(slow_open)
        try:
            c = admit.AsyncClient(self.daemon.sock_path)
            ping = asyncio.ensure_future(c.ping())
            await entered.wait()
            closing = asyncio.ensure_future(c.close())
            await asyncio.sleep(0.01)
            gate.set()
            await asyncio.wait_for(closing, 5)
            with self.assertRaises(admit.Unavailable):
                await ping
        finally:
            admit_aio._AsyncConn.open = attr
        self.assertEqual(len(made), 1)
        self.assertIsNotNone(made[0].dead)
        self.assertTrue(made[0].writer.is_closing())
        self.assertIsNone(c._conn)


if __name__ == "__main__":
    unittest.main()


class IntegerRangeTest(DaemonCase):
    """cost=2**63 once hung for the whole request timeout: the daemon's
    parser refused the line whole and answered without the id, which the
    client waited for. Now the client refuses out-of-range fields at once
    (in the unit they were given in), and a raw line the daemon answers
    without an id is matched as an id-less one."""

    def client(self):
        c = admit.Client(self.daemon.sock_path, request_timeout=30)
        self.addCleanup(c.close)
        return c

    def assert_prompt(self, t0):
        self.assertLess(time.monotonic() - t0, 5.0, "not answered at once")

    def test_out_of_range_fields_raise_valueerror_at_once(self):
        c = self.client()
        cases = [
            (lambda: c.acquire("one", self.key(), cost=2 ** 63),
             "cost must be at most 1000000000, not 9223372036854775808"),
            (lambda: c.acquire("one", self.key(), cost=1000000001),
             "cost must be at most 1000000000, not 1000000001"),
            (lambda: c.acquire("one", self.key(), timeout=100000),
             "timeout must be at most 86400 seconds (24h), not 100000"),
            (lambda: c.penalize("pen", self.key(), retry_after=86400.5),
             "retry_after must be at most 86400 seconds (24h), not 86400.5"),
            (lambda: c.acquire("tok", self.key(), reserve={"input": 2 ** 64}),
             "reserve: 'input' must be at most 1000000000, not 18446744073709551616"),
            (lambda: c.release("lease-x", tokens={"input": 10 ** 10}),
             "tokens: 'input' must be at most 1000000000, not 10000000000"),
            (lambda: c.request({"op": "ping", "x": -2 ** 63 - 1}),
             "x: -9223372036854775809 is out of range (beyond 64 bits)"),
            (lambda: c.request({"op": "ping", "x": [float("nan")]}),
             "request not sendable: Out of range float values are not JSON compliant"),
        ]
        for call, msg in cases:
            t0 = time.monotonic()
            with self.assertRaises(ValueError) as cm:
                call()
            self.assertEqual(str(cm.exception), msg)
            self.assert_prompt(t0)
        # the edges themselves are sent, and the connection is fine
        lease = c.acquire("one", self.key("edge"), cost=0, timeout=86400)
        self.assertTrue(lease.release())
        self.assertIs(c.ping(), True)

    def test_raw_big_integer_answered_with_its_id(self):
        c = self.client()
        t0 = time.monotonic()
        r = c.request_line('{"op":"acquire","scope":"one","key":"%s",'
                           '"cost":9223372036854775808,"id":77}' % self.key())
        self.assert_prompt(t0)
        self.assertEqual(r, {"ok": False, "id": 77, "error": "bad_request",
                             "message": '"cost" must be between 0 and 1000000000'})

    def test_raw_lines_answered_without_their_id_do_not_hang(self):
        c = self.client()
        for line in ('{"op":"ping","id":5,"id":6}',           # duplicate key
                     '{"op":"ping","id":7,"x":NaN}',          # not JSON to the daemon
                     '{"op":"ping","id":8,"x":1e999}',        # real overflow
                     '{"op":"ping","id":9,"x":"a\\u0000b"}',  # NUL in a string
                     '{"op":"ping","id":18446744073709551616}'):
            t0 = time.monotonic()
            r = c.request_line(line)
            self.assert_prompt(t0)
            self.assertEqual((r["ok"], r["error"], "id" in r), (False, "bad_request", False), line)
        # what follows is matched by id as ever
        self.assertEqual(c.request_line('{"op":"ping","id":10}'), {"ok": True, "id": 10})


class AsyncIntegerRangeTest(AsyncDaemonCase):
    async def test_out_of_range_raises_at_once_and_raw_lines_do_not_hang(self):
        async with admit_aio.AsyncClient(self.daemon.sock_path, request_timeout=30) as c:
            t0 = time.monotonic()
            with self.assertRaises(ValueError) as cm:
                await c.acquire("one", self.key(), cost=2 ** 63)
            self.assertEqual(str(cm.exception),
                             "cost must be at most 1000000000, not 9223372036854775808")
            with self.assertRaises(ValueError) as cm:
                await c.acquire("one", self.key(), timeout=90000)
            self.assertEqual(str(cm.exception),
                             "timeout must be at most 86400 seconds (24h), not 90000")
            r = await c.request_line('{"op":"acquire","scope":"one","key":"%s",'
                                     '"timeout_ms":99999999999999999999,"id":"t"}' % self.key())
            self.assertEqual(r, {"ok": False, "id": "t", "error": "bad_request",
                                 "message": '"timeout_ms" must be between 0 and 86400000 ms'})
            r = await c.request_line('{"op":"ping","id":3,"id":4}')
            self.assertEqual((r["error"], "id" in r), ("bad_request", False))
            self.assertLess(time.monotonic() - t0, 5.0)
            self.assertIs(await c.ping(), True)
