"""test_daemon_conf.py - the [admitd] settings that shape the listener, and
the daemon's handling of its socket and signals.

socket_mode, max_connections and max_line are read back from the real
socket; a second daemon refuses to take a live daemon's socket; SIGHUP
reloads the conf (test_reload.py has the reload itself) and is not fatal.
"""

import os
import signal
import stat
import subprocess
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


if __name__ == "__main__":
    unittest.main()
