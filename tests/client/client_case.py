"""client_case.py - what the client tests share (tests/client/test_*.py).

Owns: VECTORS_CONF (the daemon's conf for the vectors), DaemonCase (a
class-wide daemon/admitd on it, with the CLI run against it), run_admit (the
CLI on any socket), LinkLater (a socket path that appears later), LATE and
SLACK (how late a daemon starts, how much scheduling noise a time bound
allows) and load_harness (tests/integ/harness.py).
"""

import importlib.util
import os
import subprocess
import tempfile
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import launcher  # noqa: E402


VECTORS_CONF = os.path.join(launcher.VECTORS_DIR, "vectors.conf")


# How late a daemon starts in the "client first" tests, and how much
# scheduling noise an upper time bound allows.
LATE = 0.5


SLACK = float(os.environ.get("ADMITD_SLACK_MS") or 300) / 1000.0


def load_harness():
    """tests/integ/harness.py (Redis and a daemon on it), as tests.integ.harness."""
    if launcher.ROOT not in sys.path:
        sys.path.insert(0, launcher.ROOT)
    return importlib.import_module("tests.integ.harness")


def run_admit(args, socket_path=None, env=None, timeout=20):
    """(exit status, stdout, stderr, seconds) of the CLI."""
    e = dict(os.environ)
    for v in ("ADMITD_SOCKET", "ADMITD_CONNECT_TIMEOUT"):
        e.pop(v, None)
    e.update(env or {})
    argv = [launcher.ADMIT_BIN] + (["--socket", socket_path] if socket_path else [])
    t0 = time.monotonic()
    p = subprocess.run(argv + list(args), capture_output=True, text=True, env=e,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


class LinkLater:
    """A socket path that appears (a symlink to a live daemon's socket)
    `delay` seconds from now: until then a connect finds no socket, as when
    the daemon is starting, while the daemon keeps what the test set up."""

    def __init__(self, target, delay=LATE):
        self.tmp = tempfile.TemporaryDirectory(prefix="admit-link-")
        self.path = os.path.join(self.tmp.name, "admitd.sock")
        self.timer = threading.Timer(delay, os.symlink, (target, self.path))
        self.timer.start()

    def cleanup(self):
        self.timer.cancel()
        self.timer.join(10)
        self.tmp.cleanup()


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
        e.pop("ADMITD_CONNECT_TIMEOUT", None)
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
