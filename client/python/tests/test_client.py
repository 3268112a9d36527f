"""test_client.py - admit.Client against the real admitd.

Every API call's result is checked, the error paths included: daemon not
running, unknown scope, limited with retry_after, budget exceeded, timeout,
release of an unknown lease, shutting down, a connection lost mid-wait.
Thread tests assert their invariant from recorded timestamps.
"""

import email.utils
import gc
import os
import socket
import tempfile
import threading
import time
import unittest

import admit

from .support import (
    CONF,
    PROMPT,
    SCOPES,
    DaemonCase,
    check_binary,
    harness,
    unreachable_calls,
)

now = time.monotonic


def wait_for(cond, deadline=5.0, what="condition"):
    end = now() + deadline
    while True:
        r = cond()
        if r:
            return r
        if now() >= end:
            raise AssertionError("timed out waiting for %s" % what)
        time.sleep(0.01)


def admitted(client, scope, key):
    """True when a non-waiting acquire on key is admitted now (and released)."""
    try:
        client.try_acquire(scope, key).release()
        return True
    except admit.Limited:
        return False


class UnreachableTest(unittest.TestCase):
    """No daemon and connect_timeout=0: every call raises Unavailable at
    once (test_connect.py has the waits for a daemon starting late)."""

    def assert_all_unavailable(self, client):
        for call in unreachable_calls(client):
            t0 = now()
            with self.assertRaises(admit.Unavailable) as cm:
                call()
            self.assertLess(now() - t0, PROMPT)
            self.assertEqual(cm.exception.code, "unavailable")
            self.assertIn(client.socket, cm.exception.message)
            self.assertIsInstance(cm.exception, admit.AdmitError)

    def test_socket_missing(self):
        with tempfile.TemporaryDirectory() as d:
            self.assert_all_unavailable(
                admit.Client(os.path.join(d, "none.sock"), connect_timeout=0)
            )

    def test_connection_refused(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "dead.sock")
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(path)  # a socket file nobody listens on: ECONNREFUSED
            try:
                self.assert_all_unavailable(admit.Client(path, connect_timeout=0))
            finally:
                s.close()

    def test_socket_path_resolution(self):
        old = os.environ.pop("ADMITD_SOCKET", None)
        try:
            self.assertEqual(admit.Client().socket, "/run/admitd/admitd.sock")
            os.environ["ADMITD_SOCKET"] = "/tmp/from-env.sock"
            self.assertEqual(admit.Client().socket, "/tmp/from-env.sock")
            self.assertEqual(admit.Client("/tmp/arg.sock").socket, "/tmp/arg.sock")
        finally:
            os.environ.pop("ADMITD_SOCKET", None)
            if old is not None:
                os.environ["ADMITD_SOCKET"] = old

    def test_bad_arguments_are_refused_locally(self):
        c = admit.Client("/nonexistent/admitd.sock")
        with self.assertRaises(ValueError):
            c.acquire("one", key="a", url="http://a/")
        with self.assertRaises(ValueError):
            c.acquire("one", "a", timeout=-1)
        with self.assertRaises(ValueError):
            c.acquire("one", "a", cost=-2)
        with self.assertRaises(TypeError):
            c.penalize("one", "a")
        with self.assertRaises(TypeError):
            c.release(42)


class ClientTest(DaemonCase):
    def setUp(self):
        self.client = admit.Client(self.daemon.sock_path)

    def tearDown(self):
        self.client.close()

    def test_ping_and_env_socket(self):
        self.assertIs(self.client.ping(), True)
        old = os.environ.get("ADMITD_SOCKET")
        os.environ["ADMITD_SOCKET"] = self.daemon.sock_path
        try:
            with admit.Client() as c:
                self.assertEqual(c.socket, self.daemon.sock_path)
                self.assertIs(c.ping(), True)
        finally:
            if old is None:
                del os.environ["ADMITD_SOCKET"]
            else:
                os.environ["ADMITD_SOCKET"] = old

    def test_status(self):
        st = self.client.status()
        self.assertIs(st["ok"], True)
        self.assertNotIn("id", st)
        self.assertIsInstance(st["version"], str)
        self.assertEqual(st["backend"], "local")
        self.assertGreaterEqual(st["uptime_s"], 0)
        for name in SCOPES:
            self.assertIn(name, st["scopes"])
            self.assertGreaterEqual(st["scopes"][name]["leases"], 0)
            self.assertGreaterEqual(st["scopes"][name]["waiting"], 0)

    def test_acquire_and_release(self):
        k = self.key()
        lease = self.client.acquire("one", k, timeout=1)
        self.assertIsInstance(lease, admit.Lease)
        self.assertIsInstance(lease.lease, str)
        self.assertTrue(lease.lease)
        self.assertEqual(str(lease), lease.lease)
        self.assertEqual(lease.backend, "local")
        self.assertGreaterEqual(lease.waited, 0.0)
        self.assertLess(lease.waited, PROMPT)
        self.assertEqual((lease.scope, lease.key), ("one", k))
        self.assertFalse(admitted(self.client, "one", k))
        self.assertIs(lease.release(), True)
        self.assertTrue(lease.released)
        self.assertIs(lease.held, True)
        # Idempotent: the daemon no longer holds it.
        self.assertIs(self.client.release(lease), False)
        self.assertTrue(admitted(self.client, "one", k))
        # Lease.release() again sends nothing: the daemon counts no release.
        before = self.client.status()["scopes"]["one"]["releases"]
        self.assertIs(lease.release(), False)
        self.assertEqual(self.client.status()["scopes"]["one"]["releases"], before)

    def test_release_unknown_lease(self):
        self.assertIs(self.client.release("no-such-lease-0123"), False)

    def test_context_manager_releases(self):
        k = self.key()
        with self.client.acquire("one", k) as lease:
            self.assertFalse(lease.released)
            with self.assertRaises(admit.Limited):
                self.client.try_acquire("one", k)
        self.assertTrue(lease.released)
        self.assertIs(lease.held, True)
        self.client.try_acquire("one", k).release()

    def test_context_manager_releases_on_exception(self):
        k = self.key()
        with self.assertRaises(ZeroDivisionError):
            with self.client.acquire("one", k) as lease:
                1 / 0
        self.assertIs(lease.held, True)
        self.assertTrue(admitted(self.client, "one", k))

    def test_context_manager_after_explicit_release(self):
        k = self.key()
        with self.client.acquire("one", k) as lease:
            self.assertIs(lease.release(), True)
            self.assertTrue(admitted(self.client, "one", k))
        self.assertIs(lease.held, True)  # __exit__ did not release again

    def test_unknown_scope(self):
        for call in (
            lambda: self.client.acquire("no-such-scope", "k"),
            lambda: self.client.try_acquire("no-such-scope", "k"),
            lambda: self.client.penalize("no-such-scope", "k", retry_after=1),
        ):
            with self.assertRaises(admit.UnknownScope) as cm:
                call()
            self.assertEqual(cm.exception.code, "unknown_scope")
            self.assertTrue(cm.exception.message)
        self.assertIs(self.client.ping(), True)  # the connection is still fine

    def test_limited_with_retry_after(self):
        k = self.key()
        lease = self.client.try_acquire("quota", k)
        self.assertIs(lease.release(), True)
        t0 = now()
        with self.assertRaises(admit.Limited) as cm:
            self.client.try_acquire("quota", k)
        self.assertLess(now() - t0, PROMPT)
        e = cm.exception
        self.assertEqual(e.code, "limited")
        self.assertEqual(e.rule, "quota 1/1h")
        self.assertGreater(e.retry_after, 3600 - 60)
        self.assertLessEqual(e.retry_after, 3600)
        self.assertEqual(e.reply["retry_after_ms"] / 1000.0, e.retry_after)

    def test_budget_exceeded(self):
        k = self.key()
        self.client.acquire("quota", k).release()
        t0 = now()
        with self.assertRaises(admit.BudgetExceeded) as cm:
            self.client.acquire("quota", k, timeout=1.0)
        self.assertLess(now() - t0, PROMPT, "budget_exceeded is answered at once")
        e = cm.exception
        self.assertEqual(e.code, "budget_exceeded")
        self.assertGreater(e.retry_after, 3600 - 60)
        self.assertEqual(e.rule, "quota 1/1h")

    def test_timeout(self):
        k = self.key()
        with self.client.acquire("one", k):
            t0 = now()
            with self.assertRaises(admit.Timeout) as cm:
                self.client.acquire("one", k, timeout=0.3)
            waited = now() - t0
        self.assertEqual(cm.exception.code, "timeout")
        self.assertGreaterEqual(waited, 0.3 - harness.SLACK)
        self.assertLess(waited, 0.3 + PROMPT)

    def test_too_many_waiters(self):
        k = self.key()
        holder = self.client.acquire("narrow", k)
        got = []
        th = threading.Thread(target=lambda: got.append(self.client.acquire("narrow", k)))
        th.start()
        wait_for(lambda: self.client.status()["scopes"]["narrow"]["waiting"] == 1)
        t0 = now()
        with self.assertRaises(admit.TooManyWaiters) as cm:
            self.client.acquire("narrow", k)  # max_waiters = 1
        self.assertLess(now() - t0, PROMPT)
        self.assertEqual(cm.exception.code, "too_many_waiters")
        self.assertIs(holder.release(), True)
        th.join(5)
        self.assertIs(got[0].release(), True)

    def test_url_key_is_the_lowercased_host(self):
        k = self.key().lower() + ".example.com"
        with self.client.acquire("one", url="https://%s:8443/a?b" % k.upper()) as lease:
            self.assertEqual(lease.key, k)  # the key the daemon derived
            with self.assertRaises(admit.Limited):
                self.client.try_acquire("one", k)
        self.assertTrue(admitted(self.client, "one", k))

    def test_tokens_at_release(self):
        # tokens.input token-bucket 100/1h: 300 input tokens overdraw it for
        # hours; output tokens are another meter and leave it alone.
        k_in, k_out = self.key("-in"), self.key("-out")
        with self.client.acquire("tok", k_out) as lease:
            lease.tokens = {"output": 300}
        self.assertIs(lease.held, True)
        self.assertTrue(admitted(self.client, "tok", k_out))
        lease = self.client.acquire("tok", k_in)
        self.assertIs(lease.release(tokens={"input": 300, "output": 200}), True)
        with self.assertRaises(admit.Limited) as cm:
            self.client.try_acquire("tok", k_in)
        self.assertEqual(cm.exception.rule, "tokens.input token-bucket 100/1h")
        self.assertGreater(cm.exception.retry_after, 60)

    def test_tokens_from_context_manager(self):
        k = self.key()
        with self.client.acquire("tok", k) as lease:
            lease.tokens = {"input": 300}
        with self.assertRaises(admit.Limited):
            self.client.try_acquire("tok", k)

    def test_cost(self):
        # requests token-bucket 2/1h: one acquire of cost 2 takes both.
        k = self.key()
        self.client.acquire("cost", k, cost=2).release()
        with self.assertRaises(admit.Limited) as cm:
            self.client.try_acquire("cost", k)
        self.assertEqual(cm.exception.rule, "requests token-bucket 2/1h")
        k2 = self.key("-2")
        with self.assertRaises(admit.ExceedsLimit):  # 3 > the bucket's 2: never admissible
            self.client.acquire("cost", k2, cost=3, timeout=0.5)

    def test_class(self):
        # r = 2/1h; class low has floor=1, so it may take only the first.
        k = self.key()
        self.client.try_acquire("cls", k, cls="low").release()
        with self.assertRaises(admit.Limited):
            self.client.try_acquire("cls", k, cls="low")
        self.client.try_acquire("cls", k, cls="high").release()
        with self.assertRaises(admit.Limited):
            self.client.try_acquire("cls", k)  # default_class high, now empty

    def test_penalize_seconds(self):
        k = self.key()
        reply = self.client.penalize("pen", k, retry_after=30)
        self.assertIs(reply["ok"], True)
        with self.assertRaises(admit.Limited) as cm:
            self.client.try_acquire("pen", k)
        self.assertEqual(cm.exception.rule, "penalty")
        self.assertGreater(cm.exception.retry_after, 29)
        self.assertLessEqual(cm.exception.retry_after, 30)
        # Only ever extends: a shorter penalty leaves the hold as it was.
        self.client.penalize("pen", k, retry_after=0.5)
        with self.assertRaises(admit.Limited) as cm:
            self.client.try_acquire("pen", k)
        self.assertGreater(cm.exception.retry_after, 29)
        self.assertTrue(admitted(self.client, "pen", self.key("-other")))

    def test_penalize_retry_after_header(self):
        k = self.key()
        self.assertIs(self.client.penalize("pen", k, retry_after="120")["ok"], True)
        with self.assertRaises(admit.Limited) as cm:
            self.client.try_acquire("pen", k)
        self.assertEqual(cm.exception.rule, "penalty")
        self.assertGreater(cm.exception.retry_after, 119)
        self.assertLessEqual(cm.exception.retry_after, 120)

    def test_penalize_http_date(self):
        k = self.key()
        date = email.utils.formatdate(time.time() + 300, usegmt=True)
        self.client.penalize("pen", url="http://%s/x" % k.lower(), retry_after=date)
        with self.assertRaises(admit.Limited) as cm:
            self.client.try_acquire("pen", k.lower())
        self.assertGreater(cm.exception.retry_after, 297)
        self.assertLessEqual(cm.exception.retry_after, 301)

    def test_detach_outlives_the_connection(self):
        k = self.key()
        c1 = admit.Client(self.daemon.sock_path)
        lease = c1.acquire("one", k, detach=True)
        c1.close()
        self.assertFalse(admitted(self.client, "one", k))
        self.assertIs(self.client.release(lease.lease), True)
        self.assertTrue(admitted(self.client, "one", k))

    def test_close_releases_attached_leases(self):
        k = self.key()
        c1 = admit.Client(self.daemon.sock_path)
        c1.acquire("one", k)
        self.assertFalse(admitted(self.client, "one", k))
        c1.close()
        wait_for(lambda: admitted(self.client, "one", k), what="lease freed by close")
        with self.assertRaises(admit.Unavailable):
            c1.ping()  # a closed client stays closed

    def test_dropped_client_releases_attached_leases(self):
        k = self.key()
        c1 = admit.Client(self.daemon.sock_path)
        c1.acquire("one", k)
        del c1
        gc.collect()
        wait_for(lambda: admitted(self.client, "one", k), what="lease freed by collection")

    def test_other_requests_are_not_stuck_behind_a_waiting_acquire(self):
        k = self.key()
        holder = self.client.acquire("one", k)
        got = {}

        def waiter():
            t = now()
            got["lease"] = self.client.acquire("one", k, timeout=5)
            got["waited"] = now() - t

        th = threading.Thread(target=waiter)
        th.start()
        wait_for(
            lambda: self.client.status()["scopes"]["one"]["waiting"] >= 1,
            what="the acquire to wait",
        )
        t0 = now()
        self.assertIs(self.client.ping(), True)
        st = self.client.status()
        self.assertLess(now() - t0, PROMPT)
        self.assertGreaterEqual(st["scopes"]["one"]["leases"], 1)
        self.assertIs(holder.release(), True)
        th.join(5)
        self.assertFalse(th.is_alive())
        self.assertGreater(got["waited"], 0)
        self.assertIs(got["lease"].release(), True)

    def test_threads_share_a_client(self):
        # 8 threads x 5 rounds on one max_concurrent=2 key: never more than
        # two held at once (client-side intervals lie inside the daemon's),
        # and two at once does happen (the connection is not serialized).
        k = self.key()
        intervals = []
        lock = threading.Lock()

        def worker(i):
            for _ in range(5):
                with self.client.acquire("two", k, timeout=10) as lease:
                    t_in = now()
                    time.sleep(0.02)
                    t_out = now()
                with lock:
                    intervals.append((t_in, t_out))
                self.assertIs(lease.held, True)
            return i

        self.assertEqual(harness.run_clients(8, worker), list(range(8)))
        self.assertEqual(len(intervals), 40)
        self.assertEqual(harness.max_overlap(intervals), 2)

    def test_abandoned_acquire_is_released_when_admitted(self):
        k = self.key()
        holder = self.client.acquire("one", k)
        impatient = admit.Client(self.daemon.sock_path, request_timeout=0.2)
        try:
            # The client gives up after 0.2s (only a wedged daemon makes a
            # public call do that, so drive the internal path directly).
            req = {"op": "acquire", "scope": "one", "key": k, "timeout_ms": 2000}
            with self.assertRaises(admit.Unavailable):
                impatient._roundtrip(req, wait=0.0, orphan=True)
            holder.release()
            # The daemon admits the abandoned acquire; the client releases it.
            wait_for(lambda: admitted(self.client, "one", k), what="orphan released")
            self.assertIs(impatient.ping(), True)
        finally:
            impatient.close()

    def test_raw_line_transport(self):
        r = self.client.request_line('{"op":"ping","id":"raw-1"}')
        self.assertEqual(r, {"ok": True, "id": "raw-1"})
        r = self.client.request_line(b"{not json\n")
        self.assertIs(r["ok"], False)
        self.assertEqual(r["error"], "bad_request")
        r = self.client.request_line('{"op":"frobnicate","id":7}')
        self.assertEqual((r["ok"], r["error"], r["id"]), (False, "unknown_op", 7))
        self.assertIs(self.client.ping(), True)


class DaemonLifecycleTest(unittest.TestCase):
    """Tests that stop their own daemon."""

    def setUp(self):
        check_binary()
        self.daemon = harness.Admitd(CONF).start()
        self.client = admit.Client(self.daemon.sock_path)

    def tearDown(self):
        self.client.close()
        self.daemon.cleanup()

    def start_waiter(self):
        """A thread blocked in acquire("one", "k") (held by the caller);
        returns it and the list its AdmitError will be appended to."""
        errs = []

        def waiter():
            try:
                self.client.acquire("one", "k", timeout=10)
            except admit.AdmitError as e:
                errs.append(e)

        th = threading.Thread(target=waiter)
        th.start()
        wait_for(lambda: self.client.status()["scopes"]["one"]["waiting"] == 1)
        return th, errs

    def test_shutting_down_answers_waiters(self):
        holder = self.client.acquire("one", "k")
        th, errs = self.start_waiter()
        code, took = self.daemon.terminate()
        th.join(5)
        self.assertEqual(code, 0)
        self.assertEqual(len(errs), 1)
        self.assertIsInstance(errs[0], admit.ShuttingDown)
        self.assertEqual(errs[0].code, "shutting_down")
        self.client.connect_timeout = 0  # no daemon to wait for
        with self.assertRaises(admit.Unavailable):
            holder.release()
        self.daemon.scan_log()

    def test_reconnects_after_restart(self):
        with admit.Client(self.daemon.sock_path, connect_timeout=0.2) as c:
            self.assertIs(c.ping(), True)
            self.daemon.stop()
            with self.assertRaises(admit.Unavailable):
                c.ping()  # down for longer than connect_timeout
            self.daemon.start()
            self.assertIs(c.ping(), True)
            self.assertEqual(c.status()["backend"], "local")

    def test_connection_lost_while_waiting(self):
        self.client.acquire("one", "k")
        th, errs = self.start_waiter()
        self.daemon.kill9()
        th.join(5)
        self.assertEqual([type(e) for e in errs], [admit.Unavailable])
        self.assertIn("connection", errs[0].message)


if __name__ == "__main__":
    unittest.main()
