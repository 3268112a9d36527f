"""test_slow_clients.py - clients that do not read their replies.

A client that pipelines requests and never reads must not pin the daemon's
memory or its leases: past a high watermark of unsent output the daemon
stops reading it (backpressure), a client that takes none of its pending
replies for client_write_timeout is closed at once (its leases released),
and output that piles up anyway (replies to waiters) past the hard cap
closes it at once. A client that reads, however slowly, gets every reply
in order; an idle client, or one waiting on an acquire, has no output
pending and is never closed by the write timeout.

Flooding clients use raw non-blocking sockets and stop sending when the
daemon stops reading, so the test itself never blocks on a full socket.
"""

import errno
import json
import os
import socket
import threading
import time
import unittest

from . import harness
from .harness import Admitd, _asan_build, _wait_until, acquire_req, run_clients

WRITE_TIMEOUT = 1.0
CONF = """
[admitd]
client_write_timeout = 1s

[scope one]
max_concurrent = 1
timeout = 30s
lease_ttl = 5m
"""

# The write timeout out of the way: only the hard cap can close a client.
CAP_CONF = """
[admitd]
client_write_timeout = 1h

[scope one]
max_concurrent = 1
timeout = 30s
lease_ttl = 5m
"""

BIG_ID = 30000  # bytes of the "id" string a ping echoes back
# The daemon's resident memory after the flood. Unbounded, ten clients that
# never read grew it past 80 MiB. Under ASan, RSS also holds what ASan keeps
# of freed memory (its quarantine, 256 MiB by default): these tests start
# their daemons with a small one, and check no RSS bound when ASAN_OPTIONS
# was set from outside.
ASAN = _asan_build()
ASAN_OPTIONS = "detect_leaks=1:abort_on_error=0:quarantine_size_mb=8"
RSS_BOUND_KIB = (160 if ASAN else 64) * 1024


def big_ping(i):
    return json.dumps({"op": "ping", "id": "%08d" % i + "x" * BIG_ID}).encode() + b"\n"


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/%d/status" % pid)


def raw_connect(d):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(d.sock_path)
    return s


def flood(s, lines, quiet=0.3, deadline=30.0):
    """Send lines(i) for i = 0, 1, ... without blocking until the daemon has
    taken nothing for `quiet` seconds (it stopped reading) or closed the
    socket. Returns the bytes sent."""
    s.setblocking(False)
    sent, i, buf = 0, 0, b""
    last = time.monotonic()
    end = last + deadline
    try:
        while time.monotonic() < end:
            if not buf:
                buf = b"".join(lines(i + j) for j in range(16))
                i += 16
            try:
                n = s.send(buf)
            except BlockingIOError:
                if time.monotonic() - last > quiet:
                    break
                time.sleep(0.005)
                continue
            buf = buf[n:]
            sent += n
            last = time.monotonic()
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def closed_by_daemon(s, timeout=5.0):
    """Drain what the daemon left buffered: True on EOF or reset."""
    s.setblocking(True)
    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return False
        s.settimeout(left)
        try:
            if not s.recv(1 << 20):
                return True
        except socket.timeout:
            return False
        except OSError as e:
            if e.errno in (errno.ECONNRESET, errno.EPIPE):
                return True
            raise


# valgrind's own memory is in the daemon's RSS, and a 20-50x slowdown turns
# the 1 s write timeout into a race: ASan runs these.
@unittest.skipIf(harness.VALGRIND, "RSS and write-timeout bounds; run under ASan instead")
class SlowClientTest(unittest.TestCase):

    def setUp(self):
        self.check_rss = True
        if ASAN:
            if "ASAN_OPTIONS" in os.environ:
                self.check_rss = False
            else:
                os.environ["ASAN_OPTIONS"] = ASAN_OPTIONS
                self.addCleanup(os.environ.pop, "ASAN_OPTIONS", None)

    def assertRssBounded(self, d):
        rss = rss_kib(d.pid)
        if self.check_rss:
            self.assertLess(rss, RSS_BOUND_KIB, "VmRSS %d KiB" % rss)

    def wait_connections(self, d, probe, n, deadline):
        """Poll status until the daemon counts n connections (probe included)."""
        _wait_until(lambda: probe.request({"op": "status"})["connections"] == n, deadline,
                    "%d connections" % n, d.stderr_text)

    def test_clients_that_never_read_are_dropped_and_free_their_leases(self):
        with Admitd(CONF) as d:
            probe = d.connect()
            self.wait_connections(d, probe, 1, 5)
            socks = [raw_connect(d) for _ in range(10)]
            # The first one holds the only slot of one/k (not detached).
            socks[0].sendall(json.dumps(acquire_req("one", "k")).encode() + b"\n")
            reply = b""
            while not reply.endswith(b"\n"):
                reply += socks[0].recv(4096)
            self.assertIs(json.loads(reply)["ok"], True, reply)
            try:
                sent = run_clients(10, lambda i: flood(socks[i], big_ping))
                # A real flood: more than both socket buffers hold.
                for n in sent:
                    self.assertGreater(n, 512 << 10)
                # Dropped by the daemon (no reading on our side: draining the
                # sockets would let a daemon that waits for a flush off).
                self.wait_connections(d, probe, 1, 3 * WRITE_TIMEOUT + 2)
                self.assertRssBounded(d)
                for s in socks:
                    self.assertTrue(closed_by_daemon(s))
                # Its lease went with it: the key is free at once.
                r = probe.request(acquire_req("one", "k", timeout_ms=0))
                self.assertIs(r.get("ok"), True, r)
                self.assertLess(r["waited_ms"], 100, r)
                self.assertIn("closing", d.stderr_text())
            finally:
                for s in socks:
                    s.close()

    def test_slow_reader_gets_every_reply_in_order(self):
        n = 600  # ~18 MB of replies: more than any cap
        with Admitd(CONF) as d:
            s = raw_connect(d)
            # The sender's own socket object: the reader's timeouts are not its.
            ws = s.dup()
            ws.settimeout(30)
            errors = []

            def send():
                try:
                    for i in range(0, n, 20):
                        ws.sendall(b"".join(big_ping(j) for j in range(i, min(n, i + 20))))
                except OSError as e:
                    errors.append(e)

            sender = threading.Thread(target=send, daemon=True)
            sender.start()
            buf, got = b"", 0
            end = time.monotonic() + 60
            try:
                while got < n:
                    self.assertLess(time.monotonic(), end, "only %d replies" % got)
                    # A pause well inside the write timeout, then read a while.
                    time.sleep(WRITE_TIMEOUT / 2)
                    s.settimeout(0.05)
                    taken = 0
                    while taken < (4 << 20):
                        try:
                            chunk = s.recv(1 << 20)
                        except socket.timeout:
                            break
                        if not chunk:
                            self.fail("closed after %d replies\n%s" % (got, d.stderr_text()))
                        taken += len(chunk)
                        buf += chunk
                    lines = buf.split(b"\n")
                    buf = lines.pop()
                    for line in lines:
                        self.assertEqual(json.loads(line),
                                         {"ok": True, "id": "%08d" % got + "x" * BIG_ID})
                        got += 1
                sender.join(10)
                self.assertEqual(errors, [])
                self.assertEqual(buf, b"")
            finally:
                ws.close()
                s.close()

    def test_idle_and_waiting_clients_are_not_timed_out(self):
        with Admitd(CONF) as d:
            probe = d.connect()
            holder = d.connect()
            lease = holder.request(acquire_req("one", "w"))["lease"]
            waiter = d.connect()
            waiter.send(acquire_req("one", "w", id="w", timeout_ms=8000))
            idle = d.connect()
            self.assertEqual(idle.request({"op": "ping"}), {"ok": True})
            t0 = time.monotonic()
            _wait_until(lambda: probe.request({"op": "status"})["scopes"]["one"]["waiting"] == 1,
                        5, "the waiter", d.stderr_text)
            self.wait_connections(d, probe, 4, 5)
            # A client that does not read, beside them, is dropped meanwhile.
            s = raw_connect(d)
            try:
                flood(s, big_ping)
                self.wait_connections(d, probe, 4, 3 * WRITE_TIMEOUT + 2)
            finally:
                s.close()
            # Well past the write timeout, twice over.
            time.sleep(max(0.0, t0 + 2.5 * WRITE_TIMEOUT - time.monotonic()))
            self.assertEqual(idle.request({"op": "ping"}), {"ok": True})
            self.assertEqual(probe.request({"op": "status"})["scopes"]["one"]["waiting"], 1)
            self.assertEqual(holder.request({"op": "release", "lease": lease})["ok"], True)
            r = waiter.recv()
            self.assertIs(r.get("ok"), True, r)
            self.assertEqual(r["id"], "w")
            self.assertGreater(r["waited_ms"], 2000, r)

    def test_status_flood_without_reading_is_bounded(self):
        with Admitd(CONF) as d:
            probe = d.connect()
            self.wait_connections(d, probe, 1, 5)
            s = raw_connect(d)
            try:
                sent = flood(s, lambda i: b'{"op":"status"}\n')
                self.assertGreater(sent, 64 << 10)
                self.wait_connections(d, probe, 1, 3 * WRITE_TIMEOUT + 2)
                self.assertRssBounded(d)
                self.assertTrue(closed_by_daemon(s))
            finally:
                s.close()
            self.assertEqual(probe.request({"op": "ping"}), {"ok": True})

    def test_hard_cap_closes_at_once(self):
        # Replies to waiters are not held back by backpressure: 400 acquires
        # with 30 KB ids time out together, ~12 MB of replies nobody reads.
        # The write timeout is an hour: only the cap can close this client.
        n = 400
        with Admitd(CAP_CONF) as d:
            probe = d.connect()
            self.wait_connections(d, probe, 1, 5)
            lease = probe.request(acquire_req("one", "cap"))["lease"]
            s = raw_connect(d)
            try:
                s.settimeout(30)
                s.sendall(b"".join(
                    json.dumps(acquire_req("one", "cap", timeout_ms=2000,
                                           id="%08d" % i + "x" * BIG_ID)).encode() + b"\n"
                    for i in range(n)))
                _wait_until(
                    lambda: probe.request({"op": "status"})["scopes"]["one"]["waiting"] == n,
                    10, "%d waiters" % n, d.stderr_text)
                t0 = time.monotonic()
                self.wait_connections(d, probe, 1, 5)
                self.assertLess(time.monotonic() - t0, 5)
                self.assertEqual(probe.request({"op": "status"})["scopes"]["one"]["waiting"], 0)
                self.assertRssBounded(d)
                self.assertTrue(closed_by_daemon(s))
                self.assertIn("does not read its replies", d.stderr_text())
            finally:
                s.close()
            r = probe.request({"op": "release", "lease": lease})
            self.assertIs(r.get("ok"), True, r)


if __name__ == "__main__":
    unittest.main()
