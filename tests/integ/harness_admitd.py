"""harness_admitd.py - the real admitd for the tests, and a client of its socket.

Owns: Admitd (daemon/admitd on a conf written to a temp dir, optionally
under valgrind, started against a deadline, stopped with SIGTERM then
SIGKILL, its stderr scanned afterwards for sanitizer, valgrind and assert
reports: a test that passes while the log shows one fails anyway),
run_admitd (the binary run to completion) and Conn (a line-JSON client of
the daemon's socket). Stdlib only; import harness, not this module.
"""

import json
import os
import resource
import signal
import socket
import subprocess

from .harness_base import (BAD_MARKERS, IO_TIMEOUT, START_DEADLINE, STOP_DEADLINE, STALLS,
                           VALGRIND, VALGRIND_CMD, Started, _TempDir, _read_text, _wait_until,
                           admitd_bin, now)


def run_admitd(args, timeout=10.0):
    """Run the binary to completion (for -t, --version, -h): CompletedProcess."""
    cmd = ([*VALGRIND_CMD, "-q"] if VALGRIND else []) + [admitd_bin(), *args]
    return subprocess.run(cmd, capture_output=True, text=True,
                          timeout=timeout * (10 if VALGRIND else 1))


class Conn:
    """A client connection to admitd's socket speaking newline-delimited JSON."""

    def __init__(self, path, timeout=None):
        self.timeout = IO_TIMEOUT if timeout is None else timeout
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(path)
        self.buf = b""
        self.last_t = None  # monotonic instant the last reply line was complete
        self.eof = False

    def send(self, obj):
        """Send one request: a dict/list (JSON-encoded + newline) or raw bytes as is."""
        if isinstance(obj, (bytes, bytearray)):
            data = bytes(obj)
        elif isinstance(obj, str):
            data = obj.encode()
        else:
            data = json.dumps(obj).encode() + b"\n"
        self.sock.sendall(data)

    def _restore_timeout(self):
        """Sends use the connection's own timeout, not what a wait left."""
        try:
            self.sock.settimeout(self.timeout)
        except OSError:  # closed meanwhile (by another thread, or stop())
            pass

    def recv_line(self, timeout=None):
        """One raw reply line (bytes, without newline); ConnectionError on EOF.
        timeout: how long the reply may take (default IO_TIMEOUT)."""
        if timeout is None:
            timeout = IO_TIMEOUT
        end = now() + timeout
        try:
            while b"\n" not in self.buf:
                left = end - now()
                if left <= 0:
                    raise TimeoutError("no reply within %.1fs" % timeout)
                self.sock.settimeout(left)
                try:
                    d = self.sock.recv(65536)
                except socket.timeout:
                    raise TimeoutError("no reply within %.1fs" % timeout) from None
                if not d:
                    self.eof = True
                    raise ConnectionError("admitd closed the connection")
                self.buf += d
        finally:
            self._restore_timeout()
        self.last_t = now()
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def recv(self, timeout=None):
        """One reply, parsed: a dict. Sets .last_t to the instant it arrived."""
        line = self.recv_line(timeout)
        try:
            obj = json.loads(line)
        except ValueError:
            raise AssertionError("reply is not JSON: %r" % line[:200]) from None
        if not isinstance(obj, dict):
            raise AssertionError("reply is not a JSON object: %r" % line[:200])
        return obj

    def recv_at(self, timeout=None):
        """(reply, monotonic arrival instant)."""
        r = self.recv(timeout)
        return r, self.last_t

    def request(self, obj, timeout=None):
        self.send(obj)
        return self.recv(timeout)

    def closed_by_peer(self, timeout=None):
        """True when the daemon closes the connection within timeout (default
        IO_TIMEOUT; any pending reply lines are discarded), False if it
        stays open."""
        end = now() + (IO_TIMEOUT if timeout is None else timeout)
        try:
            while True:
                left = end - now()
                if left <= 0:
                    return False
                self.sock.settimeout(left)
                try:
                    d = self.sock.recv(65536)
                except socket.timeout:
                    return False
                except ConnectionResetError:
                    return True
                if not d:
                    self.eof = True
                    return True
        finally:
            self._restore_timeout()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()
        return False


class Admitd(Started):
    """The real daemon on a temp socket.

    conf: conf text; an [admitd] section is prepended when the text has none.
    redis_url: passed as --redis. args: extra flags. nofile: the daemon's
    RLIMIT_NOFILE (soft and hard), set in the child before exec; None: this
    process's. env: variables added to the daemon's environment (which never
    inherits ADMITD_REDIS from the test's: a URL exported there would turn
    every local-mode test into a Redis one). start() polls until the socket accepts; stop() SIGTERMs, asserts exit 0, and scans stderr for
    sanitizer/valgrind/assert reports (AssertionError with the log if any).
    """

    def __init__(self, conf, redis_url=None, args=(), nofile=None, env=None):
        self.tmp = _TempDir("admitd-")
        self.nofile = nofile
        self.env = dict(env or {})
        self.sock_path = os.path.join(self.tmp.path, "admitd.sock")
        self.conf_path = os.path.join(self.tmp.path, "admitd.conf")
        self.err_path = os.path.join(self.tmp.path, "admitd.stderr")
        if "[admitd]" not in conf:
            conf = "[admitd]\nsocket = %s\n\n%s" % (self.sock_path, conf)
        with open(self.conf_path, "w") as f:
            f.write(conf)
        self.conf_text = conf
        self.redis_url = redis_url
        self.args = list(args)
        self.proc = None
        self.exit_code = None
        self._conns = []

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def stderr_text(self):
        return _read_text(self.err_path)

    def command_line(self):
        cmd = [admitd_bin(), "-c", self.conf_path, "--socket", self.sock_path]
        if self.redis_url:
            cmd += ["--redis", self.redis_url]
        cmd += self.args
        if VALGRIND:
            # -q: no banner, which would echo the command line (a --redis URL's
            # password) into the daemon's log; errors still come, marked VGBEGIN.
            cmd = VALGRIND_CMD + ["-q"] + cmd
        return cmd

    def start(self):
        env = dict(os.environ)
        env.pop("ADMITD_REDIS", None)
        env.update(self.env)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        err = open(self.err_path, "ab")
        preexec = None
        if self.nofile is not None:
            n = self.nofile

            def preexec():
                resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
        self.proc = subprocess.Popen(self.command_line(), stdout=err, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, preexec_fn=preexec)
        err.close()
        STALLS.watch(self.proc.pid)

        def ready():
            if self.proc.poll() is not None:
                self.tmp.keep()
                raise AssertionError("admitd exited %s during start\n--- stderr ---\n%s"
                                     % (self.proc.returncode, self.stderr_text()))
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.sock_path)
                return True
            except OSError:
                return False
            finally:
                s.close()

        try:
            _wait_until(ready, START_DEADLINE, "admitd socket to accept", self.stderr_text)
        except AssertionError:
            self.tmp.keep()
            self.kill9()
            raise
        return self

    def connect(self, timeout=None):
        c = Conn(self.sock_path, timeout)
        self._conns.append(c)
        return c

    def scan_log(self):
        """Raise AssertionError with the log if it shows a sanitizer/valgrind/assert report."""
        text = self.stderr_text()
        hits = [m for m in BAD_MARKERS if m in text]
        if hits:
            self.tmp.keep()
            raise AssertionError("admitd log shows %s\n--- stderr ---\n%s" % (hits, text))

    def terminate(self, deadline=None):
        """SIGTERM and wait; returns (exit code or None if it had to be killed,
        seconds it took to exit)."""
        if self.proc is None:
            return self.exit_code, 0.0
        t0 = now()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(deadline if deadline is not None else STOP_DEADLINE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code = None
        took = now() - t0
        self.exit_code = code
        self.proc = None
        return code, took

    def stop(self):
        """SIGTERM; assert a clean exit 0 within the deadline and a clean log."""
        for c in self._conns:
            c.close()
        self._conns = []
        if self.proc is None:
            return
        code, took = self.terminate()
        if code != 0:
            self.tmp.keep()
            raise AssertionError("admitd exited %s (after %.2fs) on SIGTERM\n--- stderr ---\n%s"
                                 % (code, took, self.stderr_text()))
        self.scan_log()

    def kill9(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.exit_code = self.proc.returncode
            self.proc = None

    def cleanup(self, failed=False):
        """stop() (or kill when already failing), then drop the temp dir unless kept."""
        try:
            if failed:
                self.tmp.keep()
                self.kill9()
            else:
                self.stop()
        finally:
            self.tmp.cleanup()
