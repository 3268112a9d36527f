"""test_rpool_bounds.py - the daemon against a hostile "Redis" (a fake server).

A tiny Python TCP server stands where redis-server should be and answers
the daemon's handshake with what no Redis reply needs: an array header of
2147483647 elements, arrays each within the bound whose values together
are not, or a bulk string announced at 1 GB and streamed until the daemon
hangs up. Shown, against the real daemon: it stays up, drops each such
connection with the bound it broke named in its log, serves acquires from
the fallback, and its peak memory (VmHWM, over its whole life: the first
connections are refused before it accepts clients) stays within the
bounds per pooled connection, not what the server announces. (Before the
bounds: the endless bulk took the daemon to 517 MiB, the fake's own cap.)

Run: ADMITD_BIN=daemon/admitd python3 -m unittest tests.integ.test_rpool_bounds -v
"""

import socket
import threading
import unittest

from . import harness
from .harness import VALGRIND, Admitd, _asan_build, acquire_req
from .redis_util import status

# A handshake deadline long enough that the byte bound, not the deadline,
# is what ends the endless bulk string.
# (valgrind reads the 32 MiB some 30 times slower; an ASan build on a slow
# box took over 2 s, and the deadline dropped the connection first; start-up
# waits up to one redis_timeout for Redis, within the harness's 10 s)
CONF = """
[admitd]
redis_timeout = %s

[scope s]
quota = 5/1s
""" % ("10s" if VALGRIND else "6s" if _asan_build() else "2s")

RESP_MAX_BYTES = 32 << 20  # daemon/redis_client/resp.h
POOL = 2  # redis_pool's default: connections that may each hold one reply
STREAM_CAP = 256 << 20  # the fake gives up streaming here (1 GB announced)
BASE = 24 << 20  # the daemon's own peak, with room
# ASan keeps freed memory in quarantine and valgrind has its own heap: the
# peaks are checked on the plain build only (as test_bounds.py does); the
# rest (up, fallback, the bound named, the bytes read) is checked everywhere.
RSS_CHECKED = not VALGRIND and not _asan_build()


def _vm(pid, field):
    """A VmXXX line of /proc/pid/status, in bytes."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no %s for pid %d" % (field, pid))


class FakeRedis:
    """Accepts connections on a loopback port; each gets reply(sock) once
    something arrives, then is held until the peer closes. Counts the
    connections and the bytes sent on each."""

    def __init__(self, reply):
        self.reply = reply
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.port = self.lsock.getsockname()[1]
        self.url = "redis://127.0.0.1:%d" % self.port
        self.lock = threading.Lock()
        self.sent = []  # bytes sent per connection, once it ended
        self.stop = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stop:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        n = 0
        try:
            c.settimeout(10.0)
            if c.recv(65536):
                n = self.reply(c)
                while c.recv(65536):  # until the daemon hangs up
                    pass
        except OSError:
            pass
        finally:
            c.close()
            with self.lock:
                self.sent.append(n)

    def ended(self):
        with self.lock:
            return list(self.sent)

    def close(self):
        self.stop = True
        self.lsock.close()


def reply_huge_header(c):
    c.sendall(b"*2147483647\r\n")
    return 13


def reply_too_many_values(c):
    # 17 arrays of 65536 (each within RESP_MAX_ARRAY); the 17th passes 2^20 values.
    full = b"*65536\r\n" + b":1\r\n" * 65536
    data = b"*17\r\n" + full * 16 + b"*65536\r\n"
    c.sendall(data)
    return len(data)


def reply_endless_bulk(c):
    n = 0
    try:
        c.sendall(b"$1000000000\r\n")
        chunk = b"x" * (1 << 20)
        while n < STREAM_CAP:
            c.sendall(chunk)
            n += len(chunk)
    except OSError:
        pass  # the daemon hung up: what it refused to read more of
    return n


class HostileServerTest(unittest.TestCase):

    def run_against(self, reply, words):
        fake = FakeRedis(reply)
        self.addCleanup(fake.close)
        d = Admitd(CONF, redis_url=fake.url)
        d.start()
        self.addCleanup(d.cleanup)
        # Several connections refused (the pool's, then its reconnects).
        harness._wait_until(lambda: len(fake.ended()) >= 2 * POOL,
                            300.0 if VALGRIND else 30.0,
                            "the daemon to drop the fake's connections", d.stderr_text)
        self.assertIsNone(d.proc.poll(), d.stderr_text())
        log = d.stderr_text()
        self.assertIn("protocol error in reply: " + words, log)
        st = status(d)
        self.assertEqual(st["backend"], "fallback", st)
        with d.connect() as c:
            r = c.request(acquire_req("s", "k", timeout_ms=0))
        self.assertIs(r.get("ok"), True, r)
        self.assertEqual(r.get("backend"), "fallback", r)
        peak = _vm(d.pid, "VmHWM")
        d.stop()
        return fake.ended(), peak

    def test_huge_array_header(self):
        _, peak = self.run_against(reply_huge_header, "array longer than any reply needs")
        # Refused at the header: nothing of 2^31 elements was allocated
        # (the daemon alone peaks at about 5 MiB).
        if RSS_CHECKED:
            self.assertLess(peak, BASE, peak)

    def test_too_many_values(self):
        _, peak = self.run_against(reply_too_many_values, "too many values in one reply")
        # At most 2^20 values (48 B each) per connection, freed on the drop.
        if RSS_CHECKED:
            self.assertLess(peak, BASE + POOL * (48 << 20), peak)

    def test_endless_bulk(self):
        sent, peak = self.run_against(reply_endless_bulk, "reply longer than 32 MiB")
        # Each connection was dropped after about RESP_MAX_BYTES, not at
        # the fake's cap: what it sent more is the sockets' buffers.
        for n in sent:
            self.assertLess(n, RESP_MAX_BYTES + (16 << 20), sent)
        # Buffered: up to the bound per connection (a reader's buffer may
        # be twice what it holds while it grows).
        if RSS_CHECKED:
            self.assertLess(peak, BASE + POOL * 2 * RESP_MAX_BYTES, peak)


if __name__ == "__main__":
    unittest.main()
