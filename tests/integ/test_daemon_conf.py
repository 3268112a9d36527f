"""test_daemon_conf.py - the [admitd] settings that shape the listener, and
the daemon's handling of its socket and signals.

socket_mode, max_connections and max_line are read back from the real
socket; a second daemon refuses to take a live daemon's socket; SIGHUP
reloads the conf (test_reload.py has the reload itself) and is not fatal.
`admitd -t` and start-up refuse (exit 2, file:line: message) a conf with no
scope and a password file the daemon could not read, which once passed -t
and then made the daemon exit at start-up or drop every scope.
"""

import os
import signal
import stat
import subprocess
import tempfile
import time
import unittest

from .harness import IO_TIMEOUT, Admitd, admitd_bin

CONF = """
[admitd]
socket_mode = 0600
max_line = 1KiB

[scope s]
max_concurrent = 1
"""

# Only the max_connections test runs with a cap: elsewhere the harness's
# readiness probe and a second daemon's live-socket probe take slots.
CAP_CONF = CONF.replace("[admitd]\n", "[admitd]\nmax_connections = 2\n")


class ListenerTest(unittest.TestCase):

    def test_socket_mode(self):
        with Admitd(CONF) as d:
            self.assertEqual(stat.S_IMODE(os.stat(d.sock_path).st_mode), 0o600)

    def test_max_connections(self):
        with Admitd(CAP_CONF) as d:
            a = d.connect()
            # The harness's readiness probe may not be reaped yet: wait until
            # this is the only connection the daemon counts.
            deadline = time.monotonic() + IO_TIMEOUT
            while a.request({"op": "status"})["connections"] != 1:
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.01)
            b = d.connect()
            self.assertEqual(b.request({"op": "ping"}), {"ok": True})
            third = d.connect()
            # Over the cap: closed at once, without a reply.
            self.assertTrue(third.closed_by_peer())
            self.assertEqual(a.request({"op": "ping"}), {"ok": True})
            b.close()
            # A slot freed: a new connection is served again (one over the
            # cap is closed at once, so a long reply timeout never hangs).
            deadline = time.monotonic() + IO_TIMEOUT
            while True:
                c = d.connect()
                try:
                    if c.request({"op": "ping"}) == {"ok": True}:
                        break
                except (ConnectionError, OSError, ValueError):
                    pass
                c.close()
                self.assertLess(time.monotonic(), deadline, "no slot after a close")
                time.sleep(0.02)

    def test_max_line_from_conf(self):
        with Admitd(CONF) as d, d.connect() as c:
            ok = {"op": "ping", "pad": "x" * 900}
            self.assertEqual(c.request(ok), {"ok": True})
            r = c.request({"op": "ping", "pad": "x" * 2000})
            self.assertEqual(r["error"], "line_too_long", r)
            self.assertTrue(c.closed_by_peer())

    def test_second_daemon_does_not_steal_the_socket(self):
        with Admitd(CONF) as d:
            p = subprocess.run([admitd_bin(), "-c", d.conf_path, "--socket", d.sock_path],
                               capture_output=True, text=True, timeout=10)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("another daemon is listening", p.stderr)
            with d.connect() as c:
                self.assertEqual(c.request({"op": "ping"}), {"ok": True})

    def test_sighup_reloads_not_fatal(self):
        with Admitd(CONF) as d:
            os.kill(d.pid, signal.SIGHUP)
            deadline = time.monotonic() + IO_TIMEOUT
            while 'msg="conf reloaded"' not in d.stderr_text():
                self.assertLess(time.monotonic(), deadline, d.stderr_text())
                time.sleep(0.02)
            with d.connect() as c:
                self.assertEqual(c.request({"op": "ping"}), {"ok": True})



class ConfCheckTest(unittest.TestCase):
    """-t and start-up on confs that must be refused, each with its message."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="admitd-conf-")
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.sock = os.path.join(self.dir, "admitd.sock")

    def write(self, text, name="admitd.conf"):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def run_daemon(self, path, *args):
        return subprocess.run([admitd_bin(), "-c", path, "--socket", self.sock] + list(args),
                              capture_output=True, text=True, timeout=IO_TIMEOUT * 4)

    def assert_refused(self, path, want_err):
        for args in (("-t",), ()):  # the check, then a real start-up
            p = self.run_daemon(path, *args)
            self.assertEqual(p.returncode, 2, (args, p.stdout, p.stderr))
            self.assertIn(want_err, p.stderr, args)
            self.assertNotIn("conf is good", p.stdout)
            self.assertFalse(os.path.exists(self.sock), "a refused conf must not listen")

    def test_no_scope_refused(self):
        msg = "no [scope NAME] section: a conf needs at least one scope"
        path = self.write("")
        self.assert_refused(path, "%s: %s" % (path, msg))
        path = self.write("[admitd]\nlog_level = info\n")
        self.assert_refused(path, "%s:2: %s" % (path, msg))
        path = self.write("[admitd]\n[scope s]\n")  # one empty scope is enough
        p = self.run_daemon(path, "-t")
        self.assertEqual((p.returncode, p.stdout.strip()), (0, "%s: conf is good (1 scopes)" % path))

    def test_password_file_unreadable_refused(self):
        missing = os.path.join(self.dir, "no-such.pass")
        path = self.write("[admitd]\nredis = redis://127.0.0.1:1\n"
                          "redis_password_file = %s\n[scope s]\n" % missing)
        self.assert_refused(path, "%s:3: redis_password_file: cannot read %s: "
                                  "No such file or directory" % (path, missing))
        path = self.write("[admitd]\nredis = redis+sentinel://127.0.0.1:1/m\n"
                          "sentinel_password_file = %s\n[scope s]\n" % self.dir)
        self.assert_refused(path, "%s:3: sentinel_password_file: cannot read %s: "
                                  "Is a directory" % (path, self.dir))
        if os.geteuid() != 0:  # root reads a mode 000 file
            pw = self.write("secret\n", "mode0.pass")
            os.chmod(pw, 0)
            path = self.write("[admitd]\nredis = redis://127.0.0.1:1\n"
                              "redis_password_file = %s\n[scope s]\n" % pw)
            self.assert_refused(path, "redis_password_file: cannot read %s: Permission denied"
                                % pw)
        # a readable one passes
        pw = self.write("secret\n", "ok.pass")
        path = self.write("[admitd]\nredis = redis://127.0.0.1:1\n"
                          "redis_password_file = %s\n[scope s]\n" % pw)
        self.assertEqual(self.run_daemon(path, "-t").returncode, 0)

    def test_did_you_mean(self):
        path = self.write("[scope s]\nmin_dealy = 1s\n")
        self.assert_refused(path, '%s:2: unknown key "min_dealy" in [scope s] '
                                  '(did you mean "min_delay"?)' % path)


if __name__ == "__main__":
    unittest.main()
