"""test_client_daemon.py - the clients when the daemon is not there for them.

Owns: libadmit and the CLI when the daemon stops under them, freezes, is
absent, starts after them or restarts (TestWaitForDaemon, and
TestLibadmitScenarios, which drives test_libadmit's modes late, restart,
inflight and budget). Keys start with "cli-" or "lib-".
"""

import json
import os
import select
import socket
import subprocess
import tempfile
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import launcher  # noqa: E402

from client_case import LATE, SLACK, LinkLater, VECTORS_CONF, run_admit  # noqa: E402


class TestDaemonStops(unittest.TestCase):
    """admitd stops while `admit acquire` waits: shutting_down, exit 69."""

    def test_waiting_acquire_gets_shutting_down(self):
        launcher.require_binaries(launcher.ADMITD_BIN, launcher.ADMIT_BIN)
        d = launcher.Daemon(conf_path=VECTORS_CONF).start()
        try:
            base = [launcher.ADMIT_BIN, "--socket", d.socket]
            p = subprocess.run(base + ["acquire", "solo", "cli-stop-1"], capture_output=True,
                               text=True, timeout=10)
            self.assertEqual(p.returncode, 0, p.stderr)
            w = subprocess.Popen(base + ["acquire", "solo", "cli-stop-1", "--timeout", "20s"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            end = time.monotonic() + 5
            while time.monotonic() < end:  # until the daemon counts the waiter
                st = json.loads(subprocess.run(base + ["status", "--json"], capture_output=True,
                                               text=True, timeout=10).stdout)
                if st["scopes"]["solo"]["waiting"] == 1:
                    break
                time.sleep(0.02)
            self.assertEqual(st["scopes"]["solo"]["waiting"], 1)
        finally:
            d.stop()
        out, err = w.communicate(timeout=10)
        self.assertEqual(w.returncode, 69, err)
        self.assertIn("shutting_down", err)
        self.assertEqual(out, "")


class TestFrozenDaemon(unittest.TestCase):
    """A daemon that stopped accepting: its listen backlog is full."""

    def test_connect_gives_up_at_the_io_timeout(self):
        launcher.require_binaries(launcher.ADMIT_BIN)
        with tempfile.TemporaryDirectory(prefix="admit-frozen-") as tmp:
            path = os.path.join(tmp, "admitd.sock")
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            held = []
            try:
                listener.bind(path)
                listener.listen(0)
                for _ in range(8):  # connect until the backlog refuses
                    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    c.setblocking(False)
                    try:
                        c.connect(path)
                    except BlockingIOError:
                        c.close()
                        break
                    held.append(c)
                else:
                    self.fail("the listen backlog never filled")
                t0 = time.monotonic()
                p = subprocess.run([launcher.ADMIT_BIN, "--socket", path, "ping"],
                                   capture_output=True, text=True, timeout=25)
                took = time.monotonic() - t0
            finally:
                for c in held:
                    c.close()
                listener.close()
        self.assertEqual(p.returncode, 69, p.stderr)
        self.assertIn("daemon unreachable", p.stderr)
        self.assertIn("timed out", p.stderr)
        # the library's default I/O timeout is 10 s
        self.assertGreaterEqual(took, 9.5)
        self.assertLess(took, 15)


class TestNoDaemon(unittest.TestCase):
    """Nothing listens on the socket: every command says so with exit 69
    (at once with a connect timeout of 0; TestWaitForDaemon has the waits)."""

    def setUp(self):
        launcher.require_binaries(launcher.ADMIT_BIN)

    def test_unreachable(self):
        path = "/nonexistent/admitd.sock"
        for args in (["ping"], ["status"], ["try", "s", "k"], ["acquire", "s", "k"],
                     ["release", "L"], ["penalize", "s", "k", "1s"],
                     ["run", "s", "k", "--", "true"], ["reset", "s", "k"],
                     ["inspect", "s", "k"], ["override", "s", "k", "--ttl", "1s",
                                             "--rule", "0=1"]):
            with self.subTest(args=args):
                code, _, err, took = run_admit(["--connect-timeout", "0"] + args, path)
                self.assertEqual(code, 69, err)
                self.assertIn("daemon unreachable", err)
                self.assertIn(path, err)
                self.assertLess(took, 1.0)
        code, _, err, _ = run_admit(["ping"], env={"ADMITD_SOCKET": path,
                                                   "ADMITD_CONNECT_TIMEOUT": "0"})
        self.assertEqual(code, 69)
        self.assertIn(path, err)

    def test_library_unreachable(self):
        launcher.require_binaries(launcher.LIBADMIT_TEST)
        p = subprocess.run([launcher.LIBADMIT_TEST, "/nonexistent/admitd.sock"],
                           capture_output=True, text=True, timeout=10,
                           env=dict(os.environ, ADMITD_CONNECT_TIMEOUT="0"))
        self.assertEqual(p.returncode, 1)
        self.assertIn("cannot connect", p.stderr)


class TestWaitForDaemon(unittest.TestCase):
    """The CLI started before its daemon: it waits for it, within
    --connect-timeout / $ADMITD_CONNECT_TIMEOUT and the request's budget."""

    def setUp(self):
        launcher.require_binaries(launcher.ADMITD_BIN, launcher.ADMIT_BIN)
        self.tmp = tempfile.TemporaryDirectory(prefix="admit-nodaemon-")
        self.missing = os.path.join(self.tmp.name, "none.sock")

    def tearDown(self):
        self.tmp.cleanup()

    def late_daemon(self):
        d = launcher.Daemon(conf_path=VECTORS_CONF)
        self.addCleanup(d.stop)
        th = d.start_later(LATE)
        self.addCleanup(th.join, 30)
        return d

    def test_commands_wait_for_a_daemon_starting_late(self):
        d = self.late_daemon()
        code, out, err, took = run_admit(["acquire", "solo", "cli-late-1", "--timeout", "3s"],
                                         d.socket)
        self.assertEqual(code, 0, err)
        self.assertGreaterEqual(took, LATE - 0.01)
        self.assertLess(took, LATE + 10)
        self.assertExit(run_admit(["try", "solo", "cli-late-1"], d.socket), 75)  # held there
        self.assertExit(run_admit(["release", out.strip()], d.socket), 0)

    def test_ping_waits_for_a_daemon_starting_late(self):
        d = self.late_daemon()
        code, out, err, took = run_admit(["ping"], d.socket)
        self.assertEqual((code, out), (0, "ok\n"), err)
        self.assertGreaterEqual(took, LATE - 0.01)

    def assertExit(self, res, code):
        self.assertEqual(res[0], code, "exit %d, want %d; stdout %r stderr %r"
                         % (res[0], code, res[1], res[2]))

    def test_connect_timeout_zero_fails_at_once(self):
        for args, env in ((["--connect-timeout", "0", "ping"], {}),
                          (["ping"], {"ADMITD_CONNECT_TIMEOUT": "0"})):
            with self.subTest(args=args, env=env):
                code, _, err, took = run_admit(args, self.missing, env)
                self.assertEqual(code, 69, err)
                self.assertIn("No such file", err)
                self.assertLess(took, 0.25)

    def test_connect_timeout_bounds_the_wait(self):
        for args, env in ((["--connect-timeout", "300ms", "ping"], {}),
                          (["--connect-timeout", "0.3", "status"], {}),
                          (["ping"], {"ADMITD_CONNECT_TIMEOUT": "300"}),
                          (["ping"], {"ADMITD_CONNECT_TIMEOUT": "0.3s"}),
                          (["--connect-timeout", "300ms", "ping"],
                           {"ADMITD_CONNECT_TIMEOUT": "20s"})):
            with self.subTest(args=args, env=env):
                code, _, err, took = run_admit(args, self.missing, env)
                self.assertEqual(code, 69, err)
                self.assertGreaterEqual(took, 0.3)
                self.assertLess(took, 0.3 + 1.0)

    def test_the_request_budget_bounds_the_connect(self):
        code, _, err, took = run_admit(["acquire", "solo", "k", "--timeout", "300ms"],
                                       self.missing)
        self.assertEqual(code, 69, err)
        self.assertGreaterEqual(took, 0.3)
        self.assertLess(took, 0.3 + 1.0)
        code, _, err, took = run_admit(["try", "solo", "k"], self.missing)  # budget 0
        self.assertEqual(code, 69, err)
        self.assertLess(took, 0.25)

    def test_connect_and_wait_share_the_budget(self):
        with launcher.Daemon(conf_path=VECTORS_CONF) as d:
            self.assertExit(run_admit(["acquire", "solo", "cli-share-1"], d.socket), 0)
            link = LinkLater(d.socket)
            try:
                code, _, err, took = run_admit(["acquire", "solo", "cli-share-1", "--timeout",
                                                "1s"], link.path)
            finally:
                link.cleanup()
        self.assertEqual(code, 80, err)
        # The budget left after the connect is sent in whole milliseconds and
        # the daemon counts from when it read the line: up to ~2 ms early.
        self.assertGreaterEqual(took, 1.0 - 0.005)
        self.assertLess(took, 1.0 + SLACK)  # ~1.5 s if all of it were still sent

    def test_bad_connect_timeouts(self):
        for args, env in ((["--connect-timeout", "soon", "ping"], {}),
                          (["--connect-timeout", "-1s", "ping"], {}),
                          (["ping"], {"ADMITD_CONNECT_TIMEOUT": "5 s"}),
                          (["ping"], {"ADMITD_CONNECT_TIMEOUT": "forever"})):
            with self.subTest(args=args, env=env):
                code, _, err, _ = run_admit(args, self.missing, env)
                self.assertEqual(code, 64, err)
                self.assertIn("connect", err.lower())


class TestLibadmitScenarios(unittest.TestCase):
    """libadmit around a daemon that starts late, restarts or dies
    (test_libadmit MODE SOCKET [KEY], driven through its stdin/stdout)."""

    def setUp(self):
        launcher.require_binaries(launcher.ADMITD_BIN, launcher.ADMIT_BIN,
                                  launcher.LIBADMIT_TEST)
        self.daemon = launcher.Daemon(conf_path=VECTORS_CONF)
        self.addCleanup(self.daemon.stop)

    def spawn(self, *args):
        env = dict(os.environ)
        env.pop("ADMITD_CONNECT_TIMEOUT", None)
        p = subprocess.Popen([launcher.LIBADMIT_TEST] + list(args), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.addCleanup(self.reap, p)
        return p

    @staticmethod
    def reap(p):
        if p.poll() is None:
            p.kill()
        p.communicate()

    def expect_line(self, p, want):
        ready, _, _ = select.select([p.stdout], [], [], 15)
        self.assertTrue(ready, "no %r from test_libadmit" % want)
        self.assertEqual(p.stdout.readline(), want + "\n")

    def finish(self, p, go=True):
        out, err = p.communicate("go\n" if go else None, timeout=30)
        self.assertEqual(p.returncode, 0, out + err)
        return out

    def test_connect_waits_for_a_daemon_starting_late(self):
        p = self.spawn("late", self.daemon.socket)
        th = self.daemon.start_later(LATE)
        out = self.finish(p, go=False)
        th.join(30)
        waited = int(out.split("connected after ")[1].split()[0])
        self.assertGreaterEqual(waited, LATE * 1000 - 10)

    def test_restart_between_calls(self):
        self.daemon.start()
        p = self.spawn("restart", self.daemon.socket)
        self.expect_line(p, "ready")
        self.daemon.halt()
        self.daemon.start()
        self.finish(p)

    def test_connect_retry_covers_the_restart_gap(self):
        self.daemon.start()
        p = self.spawn("restart", self.daemon.socket)
        self.expect_line(p, "ready")
        self.daemon.halt(kill=True)  # the socket file stays: refused until the restart
        th = self.daemon.start_later(LATE)
        self.finish(p)
        th.join(30)
        self.assertEqual(th.error, [])

    def test_call_in_flight_fails_then_the_next_reconnects(self):
        self.daemon.start()
        code = run_admit(["acquire", "solo", "lib-inflight-1"], self.daemon.socket)[0]
        self.assertEqual(code, 0)
        p = self.spawn("inflight", self.daemon.socket, "lib-inflight-1")
        self.expect_line(p, "ready")
        end = time.monotonic() + 5
        while time.monotonic() < end:
            out = run_admit(["status", "--json"], self.daemon.socket)[1]
            if json.loads(out)["scopes"]["solo"]["waiting"] == 1:
                break
            time.sleep(0.02)
        self.daemon.halt(kill=True)
        self.expect_line(p, "lost")
        self.daemon.start()
        self.finish(p)

    def test_connect_and_wait_share_the_budget(self):
        self.daemon.start()
        self.assertEqual(run_admit(["acquire", "solo", "lib-share-1"], self.daemon.socket)[0], 0)
        link = LinkLater(self.daemon.socket)
        self.addCleanup(link.cleanup)
        out = self.finish(self.spawn("budget", link.path, "lib-share-1"), go=False)
        took = int(out.split("took ")[1].split()[0])
        self.assertGreaterEqual(took, 1000 - 5)  # whole ms, counted from the daemon's read
        self.assertLess(took, 1000 + SLACK * 1000)


if __name__ == "__main__":
    unittest.main()
