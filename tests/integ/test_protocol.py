"""test_protocol.py - the wire protocol of the real admitd binary.

Covers the protocol's basics: ping, status, malformed lines, unknown
ops, over-long lines, id echo, pipelining and out-of-order replies, unknown
fields, CRLF, the command line (-t, --version, -h) and SIGTERM with waiters.
"""

import json
import os
import re
import tempfile
import threading

from .harness import (IO_TIMEOUT, SLACK, STOP_DEADLINE, VALGRIND, Admitd, DaemonCase,
                      acquire_req, run_admitd)

CONF = """
[scope s]
max_concurrent = 1
timeout = 5s
"""


class ProtocolTest(DaemonCase):
    CONF = CONF

    def test_ping(self):
        c = self.conn()
        self.assertEqual(c.request({"op": "ping"}), {"ok": True})

    def test_status_fields(self):
        c = self.conn()
        st = self.status(c)
        self.assertIsInstance(st.get("version"), str, st)
        self.assertIsInstance(st.get("uptime_s"), int, st)
        self.assertGreaterEqual(st["uptime_s"], 0)
        self.assertEqual(st.get("backend"), "local", st)
        self.assertIn("s", st["scopes"], st)
        # A held lease and a waiter show up in the counts of that scope.
        k = self.key()
        before = st["scopes"]["s"]
        self.assertEqual((before["leases"], before["waiting"]), (0, 0), st)
        lease = self.assertAdmitted(c.request(acquire_req("s", k)))
        w = self.conn()
        w.send(acquire_req("s", k, id="w"))
        self.wait_waiting("s", 1)
        self.assertEqual(self.status(c)["scopes"]["s"]["leases"], 1)
        self.assertEqual(c.request({"op": "release", "lease": lease}), {"ok": True, "held": True})
        r = w.recv()
        self.assertEqual(r.get("id"), "w")
        self.assertAdmitted(r)
        self.assertEqual(self.status(c)["scopes"]["s"]["waiting"], 0)

    def test_malformed_line_keeps_connection(self):
        c = self.conn()
        for bad in (b"{not json\n", b"[1,2,3]\n", b"\"just a string\"\n",
                    b'{"op":42}\n', b'{"op":"acquire"}\n',
                    b'{"op":"acquire","scope":"s","key":"k","cost":"many"}\n',
                    b'{"op":"release"}\n'):
            r = c.request(bad)
            self.assertIs(r.get("ok"), False, (bad, r))
            self.assertEqual(r.get("error"), "bad_request", (bad, r))
            self.assertIsInstance(r.get("message"), str, r)
            # The same connection still answers.
            self.assertEqual(c.request({"op": "ping"}), {"ok": True}, bad)

    def test_malformed_with_id_echoes_id(self):
        c = self.conn()
        r = c.request({"op": "acquire", "id": 17})  # no scope
        self.assertEqual((r.get("error"), r.get("id")), ("bad_request", 17), r)

    def test_unknown_op(self):
        c = self.conn()
        r = c.request({"op": "frobnicate", "id": 7})
        self.assertEqual(r.get("ok"), False, r)
        self.assertEqual(r.get("error"), "unknown_op", r)
        self.assertEqual(r.get("id"), 7, r)
        self.assertEqual(c.request({"op": "ping"}), {"ok": True})

    def test_one_mib_line(self):
        c = self.conn()
        big = b'{"op":"ping","pad":"' + b"x" * (1 << 20) + b'"}\n'
        # The daemon may answer and close before reading all of it; a
        # broken pipe on our side is part of the expected outcome.
        try:
            c.send(big)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            r = c.recv()
        except ConnectionResetError:
            self.fail("connection reset before the line_too_long reply arrived")
        self.assertEqual(r.get("ok"), False, r)
        self.assertEqual(r.get("error"), "line_too_long", r)
        self.assertTrue(c.closed_by_peer(), "connection still open after line_too_long")
        # The daemon still serves new connections.
        self.assertEqual(self.conn().request({"op": "ping"}), {"ok": True})

    def test_line_just_under_max_line_is_served(self):
        # Default max_line is 64 KiB: a 60 KiB request is fine.
        c = self.conn()
        line = b'{"op":"ping","id":1,"pad":"' + b"y" * (60 * 1024) + b'"}\n'
        c.send(line)
        self.assertEqual(c.recv(), {"ok": True, "id": 1})

    def test_id_echo(self):
        c = self.conn()
        for ident in (42, -3, 1.5, "abc", "", {"a": [1, 2, {"b": None}]}, [1, "x"], True):
            r = c.request({"op": "ping", "id": ident})
            self.assertEqual(r, {"ok": True, "id": ident}, ident)
            r = c.request({"op": "nosuch", "id": ident})
            self.assertEqual(r.get("id"), ident, r)
        # Acquire and release replies echo it too.
        r = c.request(acquire_req("s", self.key(), id={"req": 9}))
        self.assertEqual(r.get("id"), {"req": 9}, r)
        r = c.request({"op": "release", "lease": r["lease"], "id": "rel"})
        self.assertEqual(r, {"ok": True, "held": True, "id": "rel"})

    def test_pipelined_requests(self):
        c = self.conn()
        c.send(b"".join(json.dumps({"op": "ping", "id": i}).encode() + b"\n" for i in range(50))
               + b'{"op":"status","id":"st"}\n')
        ids = [c.recv().get("id") for _ in range(51)]
        self.assertEqual(sorted(ids[:50]), list(range(50)))
        self.assertEqual(ids[50], "st")

    def test_replies_out_of_order(self):
        # A waiting acquire does not hold back the replies behind it.
        k = self.key()
        holder = self.conn()
        lease = self.assertAdmitted(holder.request(acquire_req("s", k)))
        c = self.conn()
        c.send(acquire_req("s", k, id="slow"))
        c.send({"op": "ping", "id": "fast"})
        self.assertEqual(c.recv(), {"ok": True, "id": "fast"})
        holder.request({"op": "release", "lease": lease})
        r = c.recv()
        self.assertEqual(r.get("id"), "slow", r)
        self.assertAdmitted(r)

    def test_unknown_fields_ignored(self):
        c = self.conn()
        self.assertEqual(c.request({"op": "ping", "future": {"x": [1]}, "v": 2}), {"ok": True})
        r = c.request(acquire_req("s", self.key(), hint="new-client", priority=3))
        self.assertAdmitted(r)
        r = c.request({"op": "release", "lease": r["lease"], "trace": "t"})
        self.assertEqual(r, {"ok": True, "held": True})

    def test_crlf_line(self):
        c = self.conn()
        self.assertEqual(c.request(b'{"op":"ping","id":5}\r\n'), {"ok": True, "id": 5})
        self.assertEqual(c.request({"op": "ping"}), {"ok": True})

    def test_empty_line_is_bad_request(self):
        # An empty line (LF or CRLF) carries no request, but a client that
        # sent it waits for a reply: it gets bad_request (no id), in step
        # with the lines, and the connection keeps working.
        c = self.conn()
        for empty in (b"\n", b"\r\n"):
            r = c.request(empty, timeout=2)
            self.assertEqual((r.get("ok"), r.get("error")), (False, "bad_request"), r)
            self.assertNotIn("id", r)
            self.assertIn("empty line", r.get("message", ""))
        c.send(b"\n\n")
        c.send({"op": "ping", "id": "after"})
        self.assertEqual(c.recv().get("error"), "bad_request")
        self.assertEqual(c.recv().get("error"), "bad_request")
        self.assertEqual(c.recv(), {"ok": True, "id": "after"})
        r = c.request(acquire_req("s", self.key(), id=7))
        self.assertAdmitted(r)
        self.assertEqual(c.request({"op": "release", "lease": r["lease"]}),
                         {"ok": True, "held": True})

    def test_unknown_scope(self):
        c = self.conn()
        r = c.request(acquire_req("nosuchscope", "k", id=1))
        self.assertEqual((r.get("ok"), r.get("error"), r.get("id")),
                         (False, "unknown_scope", 1), r)


class CommandLineTest(DaemonCase):
    CONF = CONF

    def _conf_file(self, text):
        fd, path = tempfile.mkstemp(suffix=".conf")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        self.addCleanup(os.unlink, path)
        return path

    def test_check_good_conf(self):
        path = self._conf_file("[admitd]\nsocket = /tmp/x.sock\n\n[scope a]\nmax_concurrent = 2\n"
                               "min_delay = 250ms\nquota = 60/1m\n"
                               "rule = requests sliding-window 600/1m\n")
        r = run_admitd(["-c", path, "-t"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_check_bad_conf(self):
        path = self._conf_file("[admitd]\nsocket = /tmp/x.sock\n[scope a]\n"
                               "max_concurrent = banana\n"
                               "min_delay = 5 fortnights\n")
        r = run_admitd(["-c", path, "-t"])
        out = r.stdout + r.stderr
        self.assertEqual(r.returncode, 2, out)
        # Every problem is reported as file:line: message.
        self.assertRegex(out, re.escape(path) + r":4: \S")
        self.assertRegex(out, re.escape(path) + r":5: \S")

    def test_bad_conf_refuses_to_start(self):
        path = self._conf_file("[scope a]\nmax_concurrent = -1\n")
        r = run_admitd(["-c", path, "--socket", path + ".sock"])
        self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(path + ":2:", r.stdout + r.stderr)

    def test_version(self):
        r = run_admitd(["--version"])
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout + r.stderr
        m = re.search(r"\d+\.\d+\.\d+", out)
        self.assertIsNotNone(m, out)
        # The running daemon reports the same version in status.
        self.assertEqual(self.status()["version"], m.group(0))

    def test_help(self):
        r = run_admitd(["-h"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("-c", r.stdout + r.stderr)


class ShutdownTest(DaemonCase):
    # A fresh daemon per test: these tests end it.
    CONF = CONF

    def setUp(self):
        self.daemon = Admitd(CONF)
        self.daemon.start()

    def tearDown(self):
        self.daemon.cleanup()

    @classmethod
    def setUpClass(cls):
        pass

    @classmethod
    def tearDownClass(cls):
        pass

    def test_sigterm_answers_waiters_and_exits(self):
        d = self.daemon
        holder = d.connect()
        self.assertAdmitted(holder.request(acquire_req("s", "k")))
        # Five waiters on their own connections, two pipelined on one more.
        waiters = [d.connect() for _ in range(5)]
        for i, w in enumerate(waiters):
            w.send(acquire_req("s", "k", id=i, timeout_ms=30000))
        piped = d.connect()
        piped.send(acquire_req("s", "k", id="p1", timeout_ms=30000))
        piped.send(acquire_req("s", "k", id="p2", timeout_ms=30000))
        self.wait_waiting("s", 7)
        code, took = d.terminate(deadline=STOP_DEADLINE)
        self.assertEqual(code, 0, d.stderr_text())
        # "exit 0 within a second"; valgrind is ~20x slower, so it only gets
        # the general stop deadline.
        if not VALGRIND:
            self.assertNotLate(took, 1.0 + SLACK, "took %.3fs to exit" % took)
        for i, w in enumerate(waiters):
            r = w.recv()
            self.assertEqual((r.get("id"), r.get("ok"), r.get("error")),
                             (i, False, "shutting_down"), r)
        got = {piped.recv().get("id"): None for _ in range(2)}
        self.assertEqual(set(got), {"p1", "p2"})
        d.scan_log()

    def test_sigterm_idle_exits_fast(self):
        code, took = self.daemon.terminate(deadline=STOP_DEADLINE)
        self.assertEqual(code, 0, self.daemon.stderr_text())
        if not VALGRIND:
            self.assertNotLate(took, 1.0 + SLACK)
        self.daemon.scan_log()

    def test_sigterm_with_concurrent_traffic(self):
        # Clients keep pinging while the daemon stops: each sees either a
        # reply or a closed connection, never a hang, and the daemon exits 0.
        # (A hang: no reply and no close for longer than the daemon may take
        # to stop; a loaded box may delay a reply, never that long.)
        d = self.daemon
        conns = [d.connect() for _ in range(4)]
        stop = threading.Event()
        errors = []

        def pinger(c):
            while not stop.is_set():
                try:
                    r = c.request({"op": "ping"}, timeout=STOP_DEADLINE + IO_TIMEOUT)
                    if r != {"ok": True}:
                        errors.append(r)
                        return
                except (ConnectionError, OSError):
                    return
                except TimeoutError as e:
                    errors.append(e)
                    return

        ts = [threading.Thread(target=pinger, args=(c,), daemon=True) for c in conns]
        for t in ts:
            t.start()
        code, _ = d.terminate(deadline=STOP_DEADLINE)
        stop.set()
        for t in ts:
            t.join(5)
        self.assertEqual(code, 0, d.stderr_text())
        self.assertEqual(errors, [])
        d.scan_log()
