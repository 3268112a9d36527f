"""test_metrics_limits.py - the HTTP listener cannot starve the socket.

Under a low RLIMIT_NOFILE, 300 half-sent HTTP requests take at most 16
descriptors (past the cap each closes the oldest) while 120 socket clients
are served at once; a client trickling one byte a second is closed at
metrics_timeout (absolute, not restarted by its bytes); a probe takes the
place of the connection that waited longest for its request, so under a
flood of idle connections (64, and more each round) or trickling ones, all
from the probe's own address, /healthz and /readyz answer within 1 s, round
after round; past the descriptor limit, socket clients are answered
`unavailable` at once, not left hanging.
"""

import json
import os
import re
import socket
import threading
import time
import unittest
import unittest.mock

from . import harness
from .harness import IO_TIMEOUT, Admitd, acquire_req

from .metrics_http import http_get, metrics_port, scrape, wait_for


def daemon_fds(d):
    return len(os.listdir("/proc/%d/fd" % d.pid))


def settled_fds(d, deadline=5.0):
    """daemon_fds once it holds still (the harness's readiness probe, a
    connection the daemon closes when it sees its end, may still be open)."""
    end = time.monotonic() + deadline
    last, same = daemon_fds(d), 0
    while same < 3 and time.monotonic() < end:
        time.sleep(0.05)
        n = daemon_fds(d)
        same = same + 1 if n == last else 0
        last = n
    return last


def idle_conns(port, n):
    """n TCP connections to port that send nothing (those the backlog has
    no room for are left connecting)."""
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
    return socks


def half_sent(port, n):
    """n TCP connections to port, each with a request line and no end of
    headers (those the backlog has no room for are left connecting)."""
    socks = idle_conns(port, n)
    time.sleep(0.2)  # the handshakes the kernel completes
    for s in socks:
        try:
            s.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        except OSError:
            pass
    return socks


def read_rest(c):
    """What a closed connection still holds to read."""
    buf = c.buf
    c.sock.settimeout(IO_TIMEOUT)
    while True:
        try:
            d = c.sock.recv(65536)
        except OSError:
            return buf
        if not d:
            return buf
        buf += d


def close_all(socks):
    for s in socks:
        s.close()


def probe(port, path="/healthz", budget=1.0):
    """(status, body, seconds) of one GET the way a kubelet sends it: a new
    connection, the request at once, `budget` seconds for the reply (None
    for the status when there was none in time)."""
    t0 = time.monotonic()
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=budget)
    except OSError:
        return None, "", time.monotonic() - t0
    buf = b""
    try:
        s.settimeout(max(0.01, budget - (time.monotonic() - t0)))
        s.sendall(b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                  % path.encode())
        while True:
            d = s.recv(4096)
            if not d:
                break
            buf += d
            s.settimeout(max(0.01, budget - (time.monotonic() - t0)))
    except OSError:
        pass
    finally:
        s.close()
    took = time.monotonic() - t0
    m = re.match(rb"HTTP/1\.[01] (\d+) ", buf)
    if not m:
        return None, "", took
    return int(m.group(1)), buf.split(b"\r\n\r\n", 1)[-1].decode(), took


class Trickle(threading.Thread):
    """Keeps n connections each sending one byte of a never-ending request
    head every `every` seconds, reconnecting any the daemon closes."""

    def __init__(self, port, n, every=0.1):
        super().__init__(daemon=True)
        self.port, self.n, self.every = port, n, every
        self.stop = threading.Event()
        self.reconnects = 0

    def _open(self):
        return idle_conns(self.port, 1) + [b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 100000]

    def run(self):
        conns = [self._open() for _ in range(self.n)]
        while not self.stop.wait(self.every):
            for c in conns:
                try:
                    c[0].send(c[1][:1])
                    c[1] = c[1][1:]
                except BlockingIOError:
                    pass
                except OSError:
                    c[0].close()
                    c[:] = self._open()
                    self.reconnects += 1
        for c in conns:
            c[0].close()


HTTP_MAX_CONNS = 16  # http.c


class MetricsLimitsTest(unittest.TestCase):

    def test_half_sent_requests_do_not_starve_the_socket(self):
        with Admitd("[admitd]\nmetrics = 127.0.0.1:0\nmetrics_timeout = 1m\n\n[scope s]\n",
                    nofile=256) as d:
            port = metrics_port(d)
            base = settled_fds(d)
            socks = half_sent(port, 300)
            self.addCleanup(close_all, socks)
            # Never more than the cap: past it, each takes the place of the
            # one that waited longest.
            wait_for(lambda: daemon_fds(d) - base == HTTP_MAX_CONNS,
                     "%d http connections" % HTTP_MAX_CONNS)
            time.sleep(0.3)
            self.assertEqual(daemon_fds(d) - base, HTTP_MAX_CONNS)
            # 120 socket clients at once (within the listen backlog of 128),
            # each answered at once.
            t0 = time.monotonic()
            conns = [d.connect() for _ in range(120)]
            for i, c in enumerate(conns):
                c.send(acquire_req("s", "k%d" % i, id=i))
            for i, c in enumerate(conns):
                r = c.recv()
                self.assertEqual((r.get("ok"), r.get("id")), (True, i), r)
            took = time.monotonic() - t0
            self.assertLess(took, 2.0)
            for c in conns:
                c.close()
            self.assertNotIn("accept failed", d.stderr_text())

    # Under valgrind the kernel may hand accept() a descriptor in the range
    # valgrind keeps for itself; valgrind then closes it (the peer's
    # connection, unanswered) and returns EMFILE: not the daemon's doing.
    @unittest.skipIf(harness.VALGRIND, "valgrind closes accepted fds in its reserved range")
    def test_socket_clients_past_the_descriptor_limit_are_answered_unavailable(self):
        with Admitd("[scope s]\n", nofile=64) as d:
            t0 = time.monotonic()
            conns = [d.connect() for _ in range(100)]
            served = unavailable = 0
            for i, c in enumerate(conns):
                try:
                    r = c.request({"op": "ping", "id": i})
                except ConnectionError:
                    # Turned away before the ping was sent or read: the
                    # line waits in the socket, then EOF.
                    r = json.loads(read_rest(c).split(b"\n")[0] or b"{}")
                if r.get("ok") is True:
                    served += 1
                    continue
                self.assertEqual(r.get("error"), "unavailable", r)
                self.assertIn("out of file descriptors", r.get("message", ""))
                unavailable += 1
            took = time.monotonic() - t0
            self.assertEqual(served + unavailable, 100)
            self.assertGreater(unavailable, 0)
            self.assertGreater(served, 30)
            self.assertLess(took, 5.0)
            for c in conns:
                c.close()
            # Descriptors free again: served as ever.
            def served_again():
                try:
                    with d.connect() as c:
                        return c.request({"op": "ping", "id": 1}) == {"ok": True, "id": 1}
                except (ConnectionError, BrokenPipeError):
                    return False
            wait_for(served_again, "a ping served once the clients are gone")
            self.assertIn("out of file descriptors: connections turned away unavailable",
                          d.stderr_text())

    def test_trickling_client_closed_at_the_absolute_deadline(self):
        deadline = 2.0
        with Admitd("[admitd]\nmetrics = 127.0.0.1:0\nmetrics_timeout = 2s\n\n"
                    "[scope s]\n") as d:
            port = metrics_port(d)
            s = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT)
            self.addCleanup(s.close)
            t0 = time.monotonic()
            closed_at = None
            for b in b"GET /metrics HTTP/1.1\r\nHost: trickle\r\nX-Slow: " + b"a" * 100:
                try:
                    s.send(bytes([b]))
                except OSError:
                    closed_at = time.monotonic()
                    break
                s.settimeout(1.0)  # one byte a second
                try:
                    got = s.recv(4096)
                except socket.timeout:
                    continue
                except ConnectionResetError:
                    got = b""
                if not got:
                    closed_at = time.monotonic()
                    break
                self.fail("a reply to a request never finished: %r" % got)
                if time.monotonic() - t0 > deadline + 5:
                    break
            self.assertIsNotNone(closed_at, "the trickling client was never closed")
            self.assertGreaterEqual(closed_at - t0, deadline - 0.05)
            self.assertLess(closed_at - t0, deadline + 1.5)
            # A scrape still works; one behind a full house of half-sent
            # clients is answered once their deadline closes them.
            self.assertIn("admitd_connections", scrape(port))
            self.assertIn("http client sent no whole request within metrics_timeout: closed",
                          d.stderr_text())
            # One behind a full house of half-sent clients takes the place
            # of the one that waited longest, at once.
            socks = half_sent(port, HTTP_MAX_CONNS)
            self.addCleanup(close_all, socks)
            t1 = time.monotonic()
            code, body, _ = http_get(port, "/healthz")
            waited = time.monotonic() - t1
            self.assertEqual((code, body), (200, "ok\n"))
            self.assertLess(waited, 1.0)

    # The kubelet's probes come from the node (or, in the pod, from the
    # same 127.0.0.1 as anything else): what holds connections shares
    # their address, so only what a connection sent sets it apart.
    PROBE_ROUNDS = 5

    def assertProbesAnswered(self, port, rounds=PROBE_ROUNDS, between=None):
        for i in range(rounds):
            for path, want in (("/healthz", (200, "ok\n")), ("/readyz", (200, None))):
                code, body, took = probe(port, path)
                self.assertEqual(code, want[0], "%s: no answer within 1 s (round %d, %.2f s)"
                                 % (path, i, took))
                if want[1] is not None:
                    self.assertEqual(body, want[1])
                self.assertLess(took, 1.0)
            if between is not None:
                between()

    def test_idle_connection_flood_does_not_lock_out_probes(self):
        with Admitd("[admitd]\nmetrics = 127.0.0.1:0\nmetrics_timeout = 1m\n\n[scope s]\n") as d:
            port = metrics_port(d)
            base = settled_fds(d)
            socks = idle_conns(port, 64)
            self.addCleanup(close_all, socks)
            wait_for(lambda: daemon_fds(d) - base == HTTP_MAX_CONNS,
                     "%d http connections" % HTTP_MAX_CONNS)

            def more():  # the flood goes on between rounds
                socks.extend(idle_conns(port, HTTP_MAX_CONNS))
                time.sleep(0.2)
            self.assertProbesAnswered(port, between=more)
            # and it never holds more than the cap
            time.sleep(0.3)
            self.assertLessEqual(daemon_fds(d) - base, HTTP_MAX_CONNS)
            self.assertIn("http connections full: the one waiting longest for its request "
                          "closed", d.stderr_text())

    def test_trickling_connections_do_not_lock_out_probes(self):
        with Admitd("[admitd]\nmetrics = 127.0.0.1:0\nmetrics_timeout = 1m\n\n[scope s]\n") as d:
            port = metrics_port(d)
            base = settled_fds(d)
            # slowloris: 2 x the cap, each a byte every 100 ms; and idle ones
            tr = Trickle(port, 2 * HTTP_MAX_CONNS)
            tr.start()
            self.addCleanup(tr.join, 10)
            self.addCleanup(tr.stop.set)
            socks = idle_conns(port, 32)
            self.addCleanup(close_all, socks)
            wait_for(lambda: daemon_fds(d) - base == HTTP_MAX_CONNS,
                     "%d http connections" % HTTP_MAX_CONNS)
            time.sleep(0.5)
            self.assertProbesAnswered(port, between=lambda: time.sleep(0.2))
            self.assertLessEqual(daemon_fds(d) - base, HTTP_MAX_CONNS)
            self.assertGreater(tr.reconnects, 0)  # trickling held no slot for long
            # A scrape is still whole.
            self.assertIn("admitd_connections", scrape(port))


if __name__ == "__main__":
    unittest.main()
