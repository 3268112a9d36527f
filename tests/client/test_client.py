"""test_client.py - libadmit, the admit CLI and the vectors against the real admitd.

Owns: the client tests run by `make test-client`. Every class starts its
own daemon/admitd on proto/vectors/vectors.conf (a temp socket), except
TestNoDaemon, which checks what happens when nothing listens. Keys start
with "cli-" or "lib-" so they never meet the vectors' keys.
"""

import json
import os
import select
import signal
import socket
import subprocess
import tempfile
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import launcher  # noqa: E402
import vectors  # noqa: E402

VECTORS_CONF = os.path.join(launcher.VECTORS_DIR, "vectors.conf")


class DaemonCase(unittest.TestCase):
    """A class-wide admitd on vectors.conf."""

    @classmethod
    def setUpClass(cls):
        launcher.require_binaries(launcher.ADMITD_BIN, launcher.ADMIT_BIN)
        cls.daemon = launcher.Daemon(conf_path=VECTORS_CONF).start()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def admit(self, *args, env=None, timeout=20):
        """Run the CLI on this daemon: (exit status, stdout, stderr)."""
        e = dict(os.environ)
        e.pop("ADMITD_SOCKET", None)
        e.update(env or {})
        argv = [launcher.ADMIT_BIN]
        if "ADMITD_SOCKET" not in (env or {}):
            argv += ["--socket", self.daemon.socket]
        p = subprocess.run(argv + list(args), capture_output=True, text=True, env=e,
                           timeout=timeout)
        return p.returncode, p.stdout, p.stderr

    def assertExit(self, res, code):
        self.assertEqual(res[0], code, "exit %d, want %d; stdout %r stderr %r"
                         % (res[0], code, res[1], res[2]))


class TestVectors(DaemonCase):
    """Replay proto/vectors/*.jsonl over raw sockets."""

    def test_vectors(self):
        cases = vectors.load(vectors.default_files(launcher.VECTORS_DIR))
        self.assertGreater(len(cases), 40)
        for fname, n, case in cases:
            with self.subTest("%s:%d %s" % (fname, n, case["name"])):
                self.assertIsNone(vectors.run_case(self.daemon.socket, case))


class TestVectorMatcher(unittest.TestCase):
    """The matching rules themselves (no daemon needed)."""

    def test_subset_and_placeholders(self):
        m = vectors.match
        self.assertIsNone(m({"ok": True}, {"ok": True, "x": 1}))
        self.assertIsNotNone(m({"ok": True}, {"ok": False}))
        self.assertIsNotNone(m({"ok": True, "id": 1}, {"ok": True}))
        self.assertIsNone(m({"a": "<any>"}, {"a": None}))
        self.assertIsNone(m({"a": "<int>"}, {"a": 5}))
        self.assertIsNotNone(m({"a": "<int>"}, {"a": "5"}))
        self.assertIsNotNone(m({"a": "<int>"}, {"a": True}))
        self.assertIsNotNone(m({"a": 1}, {"a": True}))
        self.assertIsNone(m({"s": {"x": {"n": "<int>"}}}, {"s": {"x": {"n": 0, "m": 1}, "y": 2}}))
        self.assertIsNotNone(m({"id": [1, 2]}, {"id": [1, 2, 3]}))


class TestLibadmit(DaemonCase):
    def test_library(self):
        launcher.require_binaries(launcher.LIBADMIT_TEST)
        p = subprocess.run([launcher.LIBADMIT_TEST, self.daemon.socket], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("all checks passed", p.stdout)


class TestCli(DaemonCase):
    def test_help_lists_exit_codes(self):
        code, out, _ = self.admit("--help")
        self.assertEqual(code, 0)
        for word in ("acquire", "release", "try", "penalize", "run", "status", "ping"):
            self.assertIn("admit " + word, out)
        for c in (" 64 ", " 69 ", " 75 ", " 78 ", " 79 ", " 80 "):
            self.assertIn(c, out)
        self.assertIn("can collide", out)  # run: admit's codes vs the command's

    def test_usage_errors(self):
        self.assertExit(self.admit(), 64)
        self.assertExit(self.admit("frob"), 64)
        self.assertExit(self.admit("try"), 64)
        self.assertExit(self.admit("try", "open", "k", "extra"), 64)
        self.assertExit(self.admit("try", "open", "k", "--bogus"), 64)
        self.assertExit(self.admit("try", "open", "k", "--timeout", "1s"), 64)
        self.assertExit(self.admit("acquire", "open", "k", "--timeout", "soon"), 64)
        self.assertExit(self.admit("acquire", "open", "k", "--cost", "-2"), 64)
        self.assertExit(self.admit("acquire", "open", "k", "--url", "http://x/"), 64)
        self.assertExit(self.admit("run", "open", "k"), 64)
        self.assertExit(self.admit("run", "open", "k", "--"), 64)
        self.assertExit(self.admit("ping", "--", "x"), 64)
        self.assertExit(self.admit("release", "L", "--tokens", "input"), 64)
        code, _, err = self.admit("release")
        self.assertEqual(code, 64)
        self.assertIn("admit release", err)

    def test_ping(self):
        code, out, _ = self.admit("ping")
        self.assertEqual((code, out), (0, "ok\n"))

    def test_socket_from_environment(self):
        code, out, _ = self.admit("ping", env={"ADMITD_SOCKET": self.daemon.socket})
        self.assertEqual((code, out), (0, "ok\n"))

    def test_status_table_and_json(self):
        code, out, _ = self.admit("status")
        self.assertEqual(code, 0)
        lines = out.splitlines()
        self.assertRegex(lines[0], r"^admitd \S+, up \d+s, backend local$")
        self.assertEqual(lines[1].split(), ["SCOPE", "LEASES", "WAITING"])
        rows = {ln.split()[0]: ln.split()[1:] for ln in lines[2:]}
        self.assertIn("solo", rows)
        self.assertTrue(all(v.isdigit() for v in rows["solo"]))
        code, out, _ = self.admit("status", "--json")
        self.assertEqual(code, 0)
        st = json.loads(out)
        self.assertIs(st["ok"], True)
        self.assertEqual(st["backend"], "local")
        self.assertIn("open", st["scopes"])
        self.assertEqual(set(rows), set(st["scopes"]))

    def test_acquire_release(self):
        code, out, _ = self.admit("acquire", "open", "cli-acq-1", "--timeout", "2s")
        self.assertEqual(code, 0)
        lease = out.strip()
        self.assertTrue(lease)
        self.assertEqual(self.admit("release", lease)[:2], (0, "released\n"))
        self.assertEqual(self.admit("release", lease)[:2], (0, "not held\n"))
        self.assertEqual(self.admit("release", "cli-no-such-lease")[:2], (0, "not held\n"))

    def test_acquire_detaches(self):
        code, out, _ = self.admit("acquire", "solo", "cli-det-1", "--detach")
        self.assertEqual(code, 0)
        lease = out.strip()
        # admit has exited, the lease is still held
        self.assertExit(self.admit("try", "solo", "cli-det-1"), 75)
        self.assertEqual(self.admit("release", lease)[:2], (0, "released\n"))
        code, out, _ = self.admit("try", "solo", "cli-det-1")
        self.assertEqual(code, 0)
        self.assertEqual(self.admit("release", out.strip())[:2], (0, "released\n"))

    def test_try_limited_prints_retry_after(self):
        self.assertExit(self.admit("try", "once", "cli-try-1"), 0)
        code, out, err = self.admit("try", "once", "cli-try-1")
        self.assertEqual(code, 75)
        self.assertGreater(float(out), 3500.0)
        self.assertLessEqual(float(out), 3600.0)
        self.assertIn("limited", err)
        self.assertIn('"quota 1/1h"', err)

    def test_budget_exceeded_and_timeout(self):
        self.assertExit(self.admit("try", "once", "cli-budget-1"), 0)
        t0 = time.monotonic()
        code, out, err = self.admit("acquire", "once", "cli-budget-1", "--timeout", "3s")
        self.assertEqual(code, 79, err)
        self.assertLess(time.monotonic() - t0, 2.5)
        self.assertGreater(float(out), 3.0)
        self.assertIn("budget_exceeded", err)

        self.assertExit(self.admit("acquire", "solo", "cli-tmo-1"), 0)
        t0 = time.monotonic()
        code, _, err = self.admit("acquire", "solo", "cli-tmo-1", "--timeout", "200ms")
        self.assertEqual(code, 80, err)
        self.assertGreaterEqual(time.monotonic() - t0, 0.19)
        self.assertIn("timeout", err)

    def test_unknown_scope(self):
        code, _, err = self.admit("try", "nope", "k")
        self.assertEqual(code, 78)
        self.assertIn("unknown_scope", err)
        self.assertExit(self.admit("acquire", "nope", "k"), 78)
        self.assertExit(self.admit("penalize", "nope", "k", "5s"), 78)
        self.assertExit(self.admit("run", "nope", "k", "--", "true"), 78)

    def test_url_class_cost(self):
        self.assertExit(self.admit("acquire", "once", "--url", "https://CLI.Example.com/p"), 0)
        self.assertExit(self.admit("try", "once", "cli.example.com"), 75)
        self.assertExit(self.admit("try", "fw", "cli-cost-1", "--cost", "5"), 0)
        code, _, err = self.admit("try", "fw", "cli-cost-1")
        self.assertEqual(code, 75)
        self.assertIn("requests fixed-window 5/1h", err)
        self.assertExit(self.admit("try", "classes", "cli-class-1", "--class", "background"), 0)
        self.assertExit(self.admit("try", "classes", "cli-class-1", "--class", "background"), 75)
        self.assertExit(self.admit("try", "classes", "cli-class-1", "--class=priority"), 0)

    def test_release_tokens(self):
        code, out, _ = self.admit("try", "tok", "cli-tok-1")
        self.assertEqual(code, 0)
        self.assertEqual(self.admit("release", out.strip(), "--tokens", "input=300,output=200")[:2],
                         (0, "released\n"))
        code, _, err = self.admit("try", "tok", "cli-tok-1")
        self.assertEqual(code, 75)
        self.assertIn("tokens fixed-window 100/1h", err)

    def test_penalize(self):
        self.assertExit(self.admit("penalize", "open", "cli-pen-1", "30s"), 0)
        code, out, err = self.admit("try", "open", "cli-pen-1")
        self.assertEqual(code, 75)
        self.assertTrue(25.0 < float(out) <= 30.0, out)
        self.assertIn('"penalty"', err)
        # a Retry-After header value as is: seconds
        self.assertExit(self.admit("penalize", "open", "cli-pen-2", "120"), 0)
        code, out, _ = self.admit("try", "open", "cli-pen-2")
        self.assertEqual(code, 75)
        self.assertTrue(110.0 < float(out) <= 120.0, out)
        # an HTTP-date
        self.assertExit(self.admit("penalize", "open", "cli-pen-3",
                                   "Wed, 21 Oct 2099 07:28:00 GMT"), 0)
        self.assertExit(self.admit("try", "open", "cli-pen-3"), 75)
        # by url
        self.assertExit(self.admit("penalize", "open", "--url", "https://CLI-Pen.Example.com/x",
                                   "1m"), 0)
        self.assertExit(self.admit("try", "open", "cli-pen.example.com"), 75)
        self.assertExit(self.admit("penalize", "open", "cli-pen-4"), 64)
        self.assertExit(self.admit("penalize", "open", "cli-pen-4", "soon"), 65)
        # KEY and --url together: a usage error, not the library's bad arguments
        code, _, err = self.admit("penalize", "open", "cli-pen-4", "30s", "--url", "http://x/")
        self.assertEqual(code, 64, err)
        self.assertIn("not both", err)

    def test_tiny_timeout_is_a_wait_not_do_not_wait(self):
        # 0.0001s rounds to 0 ms; it must still wait (1 ms): timeout (80), where
        # --timeout 0 ("do not wait") answers at once with limited (75)
        code, out, _ = self.admit("acquire", "solo", "cli-tiny-1")
        self.assertEqual(code, 0)
        try:
            self.assertExit(self.admit("acquire", "solo", "cli-tiny-1", "--timeout", "0"), 75)
            self.assertExit(self.admit("acquire", "solo", "cli-tiny-1", "--timeout",
                                       "0.0001s"), 80)
            self.assertExit(self.admit("acquire", "solo", "cli-tiny-1", "--timeout",
                                       "0.0001"), 80)
        finally:
            self.admit("release", out.strip())

    def test_run_propagates_exit_status(self):
        self.assertExit(self.admit("run", "solo", "cli-run-1", "--", "sh", "-c", "exit 7"), 7)
        code, out, _ = self.admit("run", "solo", "cli-run-1", "--timeout", "1s", "--",
                                  "echo", "hello")
        self.assertEqual((code, out), (0, "hello\n"))
        # the lease was released both times: the key is free
        code, out, _ = self.admit("try", "solo", "cli-run-1")
        self.assertEqual(code, 0)
        self.admit("release", out.strip())
        self.assertExit(self.admit("run", "solo", "cli-run-1", "--", "/nonexistent/cmd"), 127)
        self.assertExit(self.admit("run", "solo", "cli-run-1", "--", "sh", "-c", "kill -9 $$"),
                        128 + 9)

    def test_run_refused_does_not_run(self):
        marker = os.path.join(self.daemon.tmp.name, "ran")
        self.assertExit(self.admit("try", "once", "cli-run-lim"), 0)
        self.assertExit(self.admit("run", "once", "cli-run-lim", "--timeout", "0", "--",
                                   "touch", marker), 75)
        self.assertFalse(os.path.exists(marker))

    def _run_and_signal(self, key, sig):
        p = subprocess.Popen([launcher.ADMIT_BIN, "--socket", self.daemon.socket, "run", "solo",
                              key, "--", "sleep", "30"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            # wait until admit run holds the key (and so has started sleep)
            end = time.monotonic() + 5
            while time.monotonic() < end:
                code, out, _ = self.admit("try", "solo", key)
                if code == 75:
                    break
                if code == 0:
                    self.admit("release", out.strip())
                time.sleep(0.02)
            self.assertEqual(code, 75, "admit run never held the key")
            time.sleep(0.1)  # let admit reach waitpid
            t0 = time.monotonic()
            p.send_signal(sig)
            rc = p.wait(10)
            self.assertLess(time.monotonic() - t0, 5, "the child did not get the signal")
        finally:
            self._reap(p)
        self.assertEqual(rc, 128 + sig)
        self._assert_released(key)

    @staticmethod
    def _reap(p):
        """Kill p if a failed test left it running; close its pipes."""
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
        p.stderr.close()

    def _assert_released(self, key):
        """admit run released: a try on the max_concurrent=1 key succeeds at once."""
        code, out, err = self.admit("try", "solo", key)
        self.assertEqual(code, 0, err)
        self.admit("release", out.strip())

    def test_run_sigterm_forwards_and_releases(self):
        self._run_and_signal("cli-run-sig-1", signal.SIGTERM)

    def test_run_sigint_forwards_and_releases(self):
        self._run_and_signal("cli-run-sig-2", signal.SIGINT)

    def test_run_terminal_ctrl_c_reaches_the_command_once(self):
        """^C on a terminal signals the whole foreground group, the command
        included: admit must not pass on a second SIGINT. The command exits
        with the number of SIGINTs it saw."""
        import fcntl
        import pty
        import termios
        counter = ("import signal, sys, time\n"
                   "n = 0\n"
                   "def h(s, f):\n"
                   "    global n\n"
                   "    n += 1\n"
                   "signal.signal(signal.SIGINT, h)\n"
                   "print('ready', flush=True)\n"
                   "end = time.monotonic() + 10\n"
                   "while n == 0 and time.monotonic() < end:\n"
                   "    time.sleep(0.01)\n"
                   "time.sleep(0.5)\n"  # room for a second, forwarded SIGINT
                   "sys.exit(n)\n")
        master, slave = pty.openpty()

        def own_terminal():  # a session of its own, the pty as its terminal
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        p = subprocess.Popen([launcher.ADMIT_BIN, "--socket", self.daemon.socket, "run", "solo",
                              "cli-run-tty-1", "--", sys.executable, "-c", counter],
                             stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=own_terminal)
        os.close(slave)
        try:
            ready, _, _ = select.select([p.stdout], [], [], 10)
            self.assertTrue(ready, "the command never started")
            self.assertEqual(p.stdout.readline(), b"ready\n")
            os.write(master, b"\x03")  # the terminal's INTR character
            rc = p.wait(15)
        finally:
            self._reap(p)
            os.close(master)
        self.assertEqual(rc, 1, "the command saw %d SIGINTs for one ^C" % rc)
        self._assert_released("cli-run-tty-1")

    def test_run_with_sigchld_ignored(self):
        """An ignored SIGCHLD survives exec; admit run must still get the
        command's status, and give the command the disposition it got."""
        def ignore_sigchld():
            signal.signal(signal.SIGCHLD, signal.SIG_IGN)

        base = [launcher.ADMIT_BIN, "--socket", self.daemon.socket, "run", "solo", "cli-chld-1",
                "--"]
        p = subprocess.run(base + ["sh", "-c", "exit 3"], capture_output=True, text=True,
                           timeout=20, preexec_fn=ignore_sigchld)
        self.assertEqual(p.returncode, 3, p.stderr)
        probe = ("import signal, sys\n"
                 "sys.exit(4 if signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN else 5)\n")
        p = subprocess.run(base + [sys.executable, "-c", probe], capture_output=True, text=True,
                           timeout=20, preexec_fn=ignore_sigchld)
        self.assertEqual(p.returncode, 4, p.stderr)


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
    """Nothing listens on the socket: every command says so with exit 69."""

    def setUp(self):
        launcher.require_binaries(launcher.ADMIT_BIN)

    def test_unreachable(self):
        path = "/nonexistent/admitd.sock"
        for args in (["ping"], ["status"], ["try", "s", "k"], ["acquire", "s", "k"],
                     ["release", "L"], ["penalize", "s", "k", "1s"],
                     ["run", "s", "k", "--", "true"]):
            with self.subTest(args=args):
                p = subprocess.run([launcher.ADMIT_BIN, "--socket", path] + args,
                                   capture_output=True, text=True, timeout=10)
                self.assertEqual(p.returncode, 69, p.stderr)
                self.assertIn("daemon unreachable", p.stderr)
                self.assertIn(path, p.stderr)
        p = subprocess.run([launcher.ADMIT_BIN, "ping"], capture_output=True, text=True,
                           timeout=10, env=dict(os.environ, ADMITD_SOCKET=path))
        self.assertEqual(p.returncode, 69)
        self.assertIn(path, p.stderr)

    def test_library_unreachable(self):
        launcher.require_binaries(launcher.LIBADMIT_TEST)
        p = subprocess.run([launcher.LIBADMIT_TEST, "/nonexistent/admitd.sock"],
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 1)
        self.assertIn("cannot connect", p.stderr)


if __name__ == "__main__":
    unittest.main()
