"""launcher.py - start the real admitd for the client tests.

Owns: a temp dir with a conf and a socket, starting daemon/admitd
(ADMITD_BIN) on them, waiting for the socket with a deadline, halting it
for a restart on the same socket (SIGTERM, or SIGKILL for a crash),
starting it later from a thread (a client that starts first), and
stopping it (SIGTERM, then SIGKILL) while failing the test if the daemon's
stderr shows a sanitizer or assert report.
"""

import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ADMITD_BIN = os.environ.get("ADMITD_BIN", os.path.join(ROOT, "daemon", "admitd"))
ADMIT_BIN = os.environ.get("ADMIT_BIN", os.path.join(ROOT, "client", "admit"))
LIBADMIT_TEST = os.environ.get("ADMIT_TEST_LIBADMIT",
                               os.path.join(ROOT, "tests", "client", "test_libadmit"))
VECTORS_DIR = os.path.join(ROOT, "proto", "vectors")

BAD_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
               "Assertion", "==ERROR", "Invalid read", "Invalid write")


FROM_ENV = {os.environ.get(v) for v in ("ADMITD_BIN", "ADMIT_BIN", "ADMIT_TEST_LIBADMIT")}


def require_binaries(*paths):
    """Skip the calling test when a binary is not built yet; fail instead
    when `make test-client` named it (it must exist then)."""
    for p in paths:
        if not os.access(p, os.X_OK):
            if p in FROM_ENV:
                raise AssertionError("%s is missing" % p)
            raise unittest.SkipTest("%s is not built (make all)" % p)


class Daemon:
    """One admitd on a temp socket. Use as a context manager."""

    def __init__(self, conf_text=None, conf_path=None):
        self.tmp = tempfile.TemporaryDirectory(prefix="admit-client-")
        self.socket = os.path.join(self.tmp.name, "admitd.sock")
        self.log_path = os.path.join(self.tmp.name, "admitd.log")
        if conf_path is None:
            conf_path = os.path.join(self.tmp.name, "admitd.conf")
            with open(conf_path, "w") as f:
                f.write(conf_text)
        self.conf = conf_path
        self.proc = None

    def start(self, deadline_s=10.0):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([ADMITD_BIN, "-c", self.conf, "--socket", self.socket],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("admitd exited %d:\n%s" % (self.proc.returncode, self.logs()))
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                try:
                    s.connect(self.socket)
                    return self
                except OSError:
                    pass
            time.sleep(0.02)
        raise RuntimeError("admitd did not listen within %.0fs:\n%s" % (deadline_s, self.logs()))

    def logs(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def start_later(self, delay_s):
        """start() in a thread delay_s from now; join the returned thread
        (its .error lists what start raised)."""
        def run():
            try:
                self.start()
            except BaseException as e:
                th.error.append(e)

        th = threading.Timer(delay_s, run)
        th.error = []
        th.start()
        return th

    def halt(self, kill=False):
        """Stop the process (SIGTERM, or SIGKILL: a crash, the socket file
        left behind) and keep the temp dir, for start() again."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and not self.log.closed:
            self.log.close()

    def stop(self):
        """Stop the daemon; raise AssertionError on a sanitizer/assert report."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and not self.log.closed:
            self.log.close()
        text = self.logs()
        self.tmp.cleanup()
        for m in BAD_MARKERS:
            if m in text:
                raise AssertionError("admitd log shows %r:\n%s" % (m, text))

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False
