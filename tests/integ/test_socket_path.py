"""test_socket_path.py - the daemon's socket path writes like the echo.

The replies to one read of a client go out in one write(2), in the same pass
of the event loop; replies that reach a connection later (Redis replies) are
gathered per loop pass; a write waits for the socket (an event added, the
write timeout running) only when the socket is full. status's `socket`
counters ({"replies", "writes", "write_waits"}) show it: the tests count
writes against replies for a ping-pong client, a pipelined batch, a batch
answered by Redis, and a client that lets its socket fill.
"""

import json
import time
import unittest

from .harness import DaemonCase, redis_daemon

CONF = """
[scope s]
max_concurrent = 1000
timeout = 5s
"""

REDIS_CONF = """
[admitd]
redis_book_ahead = 0

[scope r]
rule = requests token-bucket 1000000/1s
"""

BATCH = 100  # requests pipelined in one send (about 2 KB: one read)
BIG_ID = 30000  # bytes of a ping's id: its reply is as long


def wmem_default():
    try:
        with open("/proc/sys/net/core/wmem_default") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 212992


def socket_counts(conn):
    st = conn.request({"op": "status"})
    s = st["socket"]
    return s["replies"], s["writes"], s["write_waits"]


def delta(after, before):
    return tuple(a - b for a, b in zip(after, before))


def recv_n(conn, n):
    return [conn.recv() for _ in range(n)]


class SocketPathTest(DaemonCase):
    CONF = CONF

    def test_ping_pong_one_write_each_never_waits(self):
        probe, c = self.conn(), self.conn()
        before = socket_counts(probe)
        for i in range(200):
            self.assertEqual(c.request({"op": "ping", "id": i}), {"ok": True, "id": i})
        replies, writes, waits = delta(socket_counts(probe), before)
        # 200 pings and the first status reply: each its own write, none waited.
        self.assertEqual((replies, writes, waits), (201, 201, 0))

    def test_pipelined_batch_one_write(self):
        probe, c = self.conn(), self.conn()
        before = socket_counts(probe)
        c.send(b"".join(json.dumps({"op": "ping", "id": i}).encode() + b"\n"
                        for i in range(BATCH)))
        got = recv_n(c, BATCH)
        self.assertEqual([r.get("id") for r in got], list(range(BATCH)))
        replies, writes, waits = delta(socket_counts(probe), before)
        self.assertEqual(replies, BATCH + 1)
        # One read brings the batch, one write answers it (a write per reply
        # would be BATCH). The bound leaves room for the kernel to hand the
        # batch over in a few reads.
        self.assertLessEqual(writes, 1 + 4, (replies, writes))
        self.assertEqual(waits, 0)

    def test_lines_split_across_reads(self):
        # Chunks of 7 bytes cut lines anywhere: a line's start is held
        # between reads, a chunk may end one line and start the next.
        c = self.conn()
        data = b"".join(json.dumps({"op": "ping", "id": i}).encode() + b"\r\n"
                        for i in range(50))
        for off in range(0, len(data), 7):
            c.send(data[off:off + 7])
            time.sleep(0.0005)
        got = recv_n(c, 50)
        self.assertEqual([r.get("id") for r in got], list(range(50)))
        self.assertEqual(c.request({"op": "ping", "id": "after"}), {"ok": True, "id": "after"})

    def test_full_socket_waits_then_delivers_in_order(self):
        probe, c = self.conn(), self.conn()
        before = socket_counts(probe)
        # Replies of three times a socket's send buffer (Linux's default:
        # 208 KiB): more than the socket holds, less than the daemon's high
        # watermark (2 MiB), so that it keeps reading.
        n = -(-3 * wmem_default() // BIG_ID)
        if n * BIG_ID > 1536 * 1024:
            self.skipTest("net.core.wmem_default is too large for the high watermark")
        c.send(b"".join(json.dumps({"op": "ping", "id": "%d-%s" % (i, "x" * BIG_ID)}).encode()
                        + b"\n" for i in range(n)))
        got = recv_n(c, n)
        self.assertEqual([r["id"].split("-")[0] for r in got], [str(i) for i in range(n)])
        replies, writes, waits = delta(socket_counts(probe), before)
        self.assertEqual(replies, n + 1)
        self.assertGreaterEqual(waits, 1, (replies, writes, waits))
        # A wait ends in more writes, never one per byte: bounded by the replies.
        self.assertLessEqual(writes, replies + waits * 64, (replies, writes, waits))


class SocketPathRedisTest(unittest.TestCase):
    def test_redis_replies_gathered_per_loop_pass(self):
        _, _, c = redis_daemon(self, REDIS_CONF)
        n = 64
        before = socket_counts(c)
        # Distinct keys: each acquire is decided in Redis, answered after the
        # read callback, in the few passes that read Redis's replies.
        c.send(b"".join(json.dumps({"op": "acquire", "scope": "r", "key": "g%d" % i,
                                    "id": i, "lease": False}).encode() + b"\n"
                        for i in range(n)))
        got = recv_n(c, n)
        self.assertEqual(sorted(r.get("id") for r in got), list(range(n)))
        self.assertEqual([r for r in got if not r.get("ok") or r.get("backend") != "redis"],
                         [])
        replies, writes, waits = delta(socket_counts(c), before)
        self.assertEqual(replies, n + 1)
        # Written one per reply, that is n + 1; gathered, one per pass that
        # reads Redis's replies (a call takes up to redis_batch acquires).
        self.assertLessEqual(writes, 1 + n // 4, (replies, writes))
        self.assertEqual(waits, 0)
