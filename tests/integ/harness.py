"""harness.py - start real redis-server and admitd processes for integration tests.

Owns: process lifecycle (temp dirs, readiness polling with deadlines, SIGTERM
then SIGKILL escalation), a tiny RESP client for Redis, a line-JSON client for
admitd's socket, and the post-mortem scan of the daemon's stderr for sanitizer,
valgrind and assert reports (a test that passes while the daemon's log shows
one of those fails anyway). Stdlib only.

Nothing here sleeps and hopes: every wait polls a condition against a
deadline and fails with the process's log when the deadline passes. Logs and
temp dirs are removed when a test passes and kept (path printed) when it fails.

Timing: lower bounds (the limits) are exact up to EPS. Upper bounds (how late
an event may be) get SLACK, scaled by the load measured when the suite
starts, plus the stalls of this process measured while the bounded interval
ran (late_allowance): they exist to catch "never" and "a whole period
late", not the scheduler. Reply deadlines (IO_TIMEOUT) are far above both.
"""

import atexit
import bisect
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

VALGRIND = os.environ.get("VALGRIND") == "1"
VALGRIND_CMD = [
    "valgrind", "--error-exitcode=99", "--leak-check=full",
    "--errors-for-leak-kinds=definite", "--error-markers=VGBEGIN,VGEND",
]

def admitd_bin():
    return os.environ.get("ADMITD_BIN") or os.path.join(REPO, "daemon", "admitd")


def _asan_build():
    """True when the daemon binary is ASan-instrumented (make SANITIZE=1)."""
    try:
        with open(admitd_bin(), "rb") as f:
            return b"__asan_init" in f.read()
    except OSError:
        return False


# How much busier than its cores the box may make SLACK (below): past this
# a box is too busy for timing tests to tell a late daemon from a late box.
MAX_LOAD_FACTOR = 4.0


def _cores():
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _runnable():
    """Tasks running or waiting for a CPU right now, this one excluded
    (/proc/loadavg's fourth field), or None where there is no such file."""
    try:
        with open("/proc/loadavg") as f:
            return max(0, int(f.read().split()[3].split("/")[0]) - 1)
    except (OSError, ValueError, IndexError):
        return None


def load_factor(samples=20):
    """How much longer than on an idle box a process waits for a CPU: 1 +
    the other tasks that want one (the median of `samples` readings of the
    tasks running or runnable, 10ms apart) per usable core, at most
    MAX_LOAD_FACTOR. 1 on an idle box; 2 with two CPU hogs on two cores.
    Meant to be read before the suite starts its own processes (their
    share of the box is already in SLACK_BASE)."""
    runs = []
    for i in range(samples):
        if i:
            time.sleep(0.01)
        r = _runnable()
        if r is not None:
            runs.append(r)
    if not runs:  # no /proc: the 1-minute load average, less this process
        try:
            runs = [max(0.0, os.getloadavg()[0] - 1.0)]
        except OSError:
            return 1.0
    others = sorted(runs)[len(runs) // 2]
    return min(MAX_LOAD_FACTOR, 1.0 + others / _cores())


# Timer slack, seconds: how LATE an event may be against its ideal instant.
# Used only in upper bounds ("admitted no later than ..."); lower bounds,
# the limits themselves, use EPS below and no slack. libevent timers fire
# within ~1ms on an idle box and the suite's own processes add scheduling
# noise: 30ms (SLACK_BASE). ASan makes every request several times slower
# and two sanitized suites on a 2-core box were measured up to ~50ms late:
# 50ms. Valgrind slows everything ~20x: 150ms. On a box that other work
# keeps busier than its cores (CI's neighbours, CPU hogs beside the suite)
# every wait for a CPU is longer: SLACK is SLACK_BASE times the load
# measured when the harness is imported, before the suite starts anything
# (load_factor), and each upper bound also forgives the stalls of this
# process measured while it ran (late_allowance). ADMITD_SLACK_MS sets
# SLACK as is (no scaling).
_SLACK_MS = os.environ.get("ADMITD_SLACK_MS")
SLACK_BASE = float(_SLACK_MS or (150 if VALGRIND else 50 if _asan_build() else 30)) / 1000.0
LOAD_AT_START = 1.0 if _SLACK_MS else load_factor()
SLACK = SLACK_BASE * LOAD_AT_START
# Precision, seconds, of a lower bound ("at least D after X"): the daemon
# keeps integer milliseconds (up to 1ms lost to truncation at each of two
# instants) and may read libevent's cached loop time (stale by the length of
# one loop iteration). 5ms covers both with margin; it never covers a real
# violation of a 100ms+ delay.
EPS = 0.005
# How long a daemon may take to start / stop.
START_DEADLINE = 30.0 if VALGRIND else 10.0
STOP_DEADLINE = 20.0 if VALGRIND else 5.0
# How long a client waits for a reply it is owed before the test fails. A
# reply that never comes costs this once, in a failing test; a reply that
# is merely late (a loaded 2-core box, a descheduled daemon) must never
# trip it, so it is far above any lateness and any bound a test checks.
IO_TIMEOUT = 60.0 if VALGRIND else 20.0

# Lines in the daemon's stderr that fail the test on sight.
BAD_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "LeakSanitizer",
               "VGBEGIN", "Assertion", "AddressSanitizer:")

now = time.monotonic


def _run_delay(pid):
    """Seconds process pid (its main thread) has spent runnable but waiting
    for a CPU since it started (/proc/PID/schedstat), or None."""
    try:
        with open("/proc/%d/schedstat" % pid) as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class _StallMeter:
    """Measures, as it happens, how long the box kept the test's processes
    from running.

    This process: a daemon thread sleeps PERIOD again and again and records
    each sleep that overran by more than NOISE as (start, end, overrun). A
    descheduled client (CPU hogs beside the suite, a VM losing its CPU, a
    GIL convoy) shows up as one long overrun at the instant it happened.
    The processes the harness started (admitd, redis-server: watch()): the
    same thread samples each one's run-queue wait (schedstat), the time it
    was ready to run and had no CPU. A daemon that sleeps too long is not
    waiting for a CPU, so this never excuses a daemon's own lateness.

    An upper bound can so forgive exactly the stalls that hit the interval
    it measures and nothing more. It only ever loosens upper bounds
    (lateness); lower bounds, the limits themselves, never use it."""

    PERIOD = 0.005
    NOISE = 0.002
    KEEP = 900.0  # seconds of history (a test measures far less)

    def __init__(self):
        self.lock = threading.Lock()
        self.samples = []
        self.procs = {}  # pid -> [(instant, run-queue wait so far)], while alive
        self.gone = {}   # the same, for processes that have exited
        self.done_to = now()  # every stall before this instant is recorded
        self.thread = threading.Thread(target=self._run, name="stall-meter", daemon=True)
        self.thread.start()

    def watch(self, pid):
        """Sample pid's run-queue wait from now until it exits."""
        d = _run_delay(pid)
        if d is not None:
            with self.lock:
                self.procs[pid] = [(now(), d)]

    def _sample_procs(self, t):
        with self.lock:
            pids = list(self.procs)
        for pid in pids:
            d = _run_delay(pid)
            with self.lock:
                hist = self.procs.get(pid)
                if hist is None:
                    continue
                if d is None:  # exited (or reaped and reused: no longer ours)
                    self.gone[(pid, t)] = self.procs.pop(pid)
                elif d != hist[-1][1]:
                    hist.append((t, d))

    def _run(self):
        t1 = now()
        while True:
            # From the end of one pass to the end of the next: a stall that
            # hits this loop anywhere (in its sleep or in its sampling) shows.
            t0 = t1
            time.sleep(self.PERIOD)
            self._sample_procs(now())
            t1 = now()
            over = t1 - t0 - self.PERIOD
            with self.lock:
                self.done_to = t1
                if over > self.NOISE:
                    self.samples.append((t0, t1, over))
                    if self.samples[0][1] < t1 - self.KEEP:
                        self.samples = [x for x in self.samples if x[1] >= t1 - self.KEEP]
                for k in [k for k, h in self.gone.items() if h[-1][0] < t1 - self.KEEP]:
                    del self.gone[k]

    def sync(self, t1, limit=2.0):
        """Wait (at most limit seconds) until the stalls up to t1 are
        recorded: a check made right after a stall ends (the client got
        its CPU back before this thread did) must see that stall."""
        end = now() + limit
        while True:
            with self.lock:
                if self.done_to >= t1:
                    return
            if now() >= end:
                return
            time.sleep(self.PERIOD / 5)

    def worst(self, t0, t1):
        """The longest stall of this process overlapping [t0, t1], seconds
        (0 if none)."""
        self.sync(t1)
        with self.lock:
            return max((over for s, e, over in self.samples if s < t1 and e > t0),
                       default=0.0)

    @staticmethod
    def _at(hist, t):
        """A process's run-queue wait so far at instant t (step function)."""
        i = bisect.bisect_right(hist, (t, float("inf"))) - 1
        return hist[max(i, 0)][1]

    def proc_wait(self, t0, t1):
        """The longest run-queue wait of one watched process within
        [t0, t1], seconds (0 if none), widened by one sampling period on
        each side."""
        a, b = t0 - self.PERIOD, t1 + self.PERIOD
        self.sync(b)
        with self.lock:
            hists = list(self.procs.values()) + list(self.gone.values())
            return max((self._at(h, b) - self._at(h, a) for h in hists
                        if h[-1][0] >= a and h[0][0] <= b), default=0.0)


STALLS = _StallMeter()


def late_allowance(t0, t1=None):
    """Extra lateness, seconds, an upper bound over the interval [t0, t1]
    (t1: now) forgives beyond the SLACK it already has: the stalls measured
    in that interval (STALLS: the longest of this process, plus the longest
    run-queue wait of a daemon or Redis the harness started; ~0 on an idle
    box). Only for upper bounds: they catch "never" and "a whole period
    late", not scheduler latency."""
    if t1 is None:
        t1 = now()
    return STALLS.worst(t0, t1) + STALLS.proc_wait(t0, t1)


def unstalled(t0, t1):
    """The length of [t0, t1] less the stalls measured in it
    (late_allowance): what to hold to an upper bound when several samples
    are checked at once (each forgiven its own stalls only; never for a
    lower bound)."""
    return (t1 - t0) - late_allowance(t0, t1)


def _wait_until(cond, deadline_s, what, log=None, interval=0.01):
    """Poll cond() until true or deadline; raise AssertionError naming what."""
    end = now() + deadline_s
    while True:
        r = cond()
        if r:
            return r
        if now() >= end:
            msg = "timed out after %.1fs waiting for %s" % (deadline_s, what)
            if log is not None:
                msg += "\n--- log ---\n" + log()
            raise AssertionError(msg)
        time.sleep(interval)


def _terminate(proc, deadline_s):
    """SIGTERM, wait up to deadline_s, then SIGKILL. Returns the exit code."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            return proc.wait(deadline_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None
    return proc.returncode


def _read_text(path):
    """A log file's text so far ("" when it does not exist yet)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def free_tcp_port():
    """A TCP port that was free a moment ago (bind port 0, read, close)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


_parent = None


def _private_parent():
    """This process's own parent for temp dirs (ADMITD_TEST_TMPDIR, or a
    fresh /tmp/integ.XXXX): other tools on a shared box sweep
    /tmp/admitd-* and /tmp/redis-*, which must not pull a socket or conf
    out from under a running test. Removed at exit when nothing was kept."""
    global _parent
    if _parent is None:
        base = os.environ.get("ADMITD_TEST_TMPDIR")
        if base:
            os.makedirs(base, exist_ok=True)
        _parent = tempfile.mkdtemp(prefix="integ.", dir=base)
        atexit.register(_remove_parent_if_empty, _parent)
    elif not os.path.isdir(_parent):
        # Swept by someone's cleanup while we ran: later tests still start.
        os.makedirs(_parent, mode=0o700, exist_ok=True)
    return _parent


def _remove_parent_if_empty(path):
    try:
        os.rmdir(path)
    except OSError:
        pass


class _TempDir:
    """A temp dir kept on failure: keep() marks it, cleanup() removes unless kept."""

    def __init__(self, prefix):
        self.path = tempfile.mkdtemp(prefix=prefix, dir=_private_parent())
        self.kept = False

    def keep(self):
        if not self.kept:
            self.kept = True
            sys.stderr.write("harness: keeping %s for inspection\n" % self.path)

    def cleanup(self):
        if not self.kept:
            shutil.rmtree(self.path, ignore_errors=True)


# ---------------------------------------------------------------- Redis ----


class RedisError(Exception):
    """An error reply (-ERR ...) from Redis."""


def resp_encode(args):
    """args (str, int or bytes) as one RESP command."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class RespConn:
    """One RESP2 connection: command(*args) -> Python value (str/int/list/None)."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def close(self):
        self.sock.close()

    def _line(self):
        while b"\r\n" not in self.buf:
            d = self.sock.recv(65536)
            if not d:
                raise ConnectionError("redis closed the connection")
            self.buf += d
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            d = self.sock.recv(65536)
            if not d:
                raise ConnectionError("redis closed the connection")
            self.buf += d
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return RedisError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self._exact(n)
            try:
                return data.decode()
            except UnicodeDecodeError:
                return data
        if t == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self._reply() for _ in range(n)]
        raise ConnectionError("bad RESP type byte %r" % t)

    def command(self, *args):
        self.sock.sendall(resp_encode(args))
        r = self._reply()
        if isinstance(r, RedisError):
            raise r
        return r

    def pipeline(self, cmds, depth=16):
        """Send cmds (resp_encode's) depth at a time, reading each chunk's
        replies; raises the first error reply, returns the last reply."""
        last = None
        for i in range(0, len(cmds), depth):
            chunk = cmds[i:i + depth]
            self.sock.sendall(b"".join(chunk))
            for _ in chunk:
                last = self._reply()
                if isinstance(last, RedisError):
                    raise last
        return last


class RedisServer:
    """A throwaway redis-server: Unix socket by default, TCP with port=True.

    start()/stop()/restart() (same socket or port), pause()/resume()
    (SIGSTOP/SIGCONT: the server holds connections but answers nothing),
    .url, .command(*args) via a fresh RESP connection, .cli(*args) via
    redis-cli. Use as a context manager.
    """

    def __init__(self, password=None, port=False, args=()):
        self.password = password
        self.extra_args = list(args)  # more redis-server flags
        self.use_tcp = bool(port)
        self.port = None
        self.proc = None
        self.tmp = _TempDir("redis-")
        self.sock_path = os.path.join(self.tmp.path, "redis.sock")
        self.log_path = os.path.join(self.tmp.path, "redis.log")
        self.paused = False

    @property
    def url(self):
        auth = (":%s@" % self.password) if self.password else ""
        if self.use_tcp:
            return "redis://%s127.0.0.1:%d" % (auth, self.port)
        if self.password:
            return "unix://%s%s" % (auth, self.sock_path)
        return "unix://" + self.sock_path

    def log_text(self):
        return _read_text(self.log_path)

    def start(self):
        if self.use_tcp and self.port is None:
            self.port = free_tcp_port()
        args = ["redis-server", "--save", "", "--appendonly", "no",
                "--dir", self.tmp.path, "--unixsocket", self.sock_path,
                "--unixsocketperm", "700",
                "--port", str(self.port if self.use_tcp else 0),
                "--bind", "127.0.0.1"]
        if self.password:
            args += ["--requirepass", self.password]
        args += self.extra_args
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        log.close()
        STALLS.watch(self.proc.pid)
        self.paused = False

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError("redis-server exited %s\n%s"
                                     % (self.proc.returncode, self.log_text()))
            try:
                return self.command("PING") == "PONG"
            except (OSError, ConnectionError, RedisError):
                return False

        _wait_until(ready, START_DEADLINE, "redis-server to answer PING", self.log_text)
        return self

    def connect(self, timeout=5.0):
        """A RespConn (authenticated when a password is set)."""
        if self.use_tcp:
            s = socket.create_connection(("127.0.0.1", self.port), timeout)
        else:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(timeout)
            try:
                s.connect(self.sock_path)
            except OSError:
                s.close()
                raise
        c = RespConn(s)
        if self.password:
            try:
                c.command("AUTH", self.password)
            except Exception:
                c.close()
                raise
        return c

    def command(self, *args):
        c = self.connect()
        try:
            return c.command(*args)
        finally:
            c.close()

    def cli(self, *args):
        cmd = ["redis-cli"]
        cmd += ["-p", str(self.port)] if self.use_tcp else ["-s", self.sock_path]
        if self.password:
            cmd += ["--no-auth-warning", "-a", self.password]
        r = subprocess.run(cmd + [str(a) for a in args], capture_output=True,
                           text=True, timeout=10)
        return r.stdout.strip()

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self):
        if self.proc is None:
            return
        if self.paused:
            self.resume()
        _terminate(self.proc, STOP_DEADLINE)
        self.proc = None

    def restart(self):
        self.stop()
        try:
            os.unlink(self.sock_path)
        except OSError:
            pass
        if self.use_tcp:
            # The old port is now free; wait until it can be bound again.
            def bindable():
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", self.port))
                    return True
                except OSError:
                    return False
                finally:
                    s.close()
            _wait_until(bindable, STOP_DEADLINE, "port %d to free" % self.port)
        return self.start()

    def cleanup(self, failed=False):
        self.stop()
        if failed:
            self.tmp.keep()
        self.tmp.cleanup()

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        self.cleanup(failed=exc_type is not None)
        return False


# --------------------------------------------------------------- admitd ----


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


class Admitd:
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

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        self.cleanup(failed=exc_type is not None)
        return False


# -------------------------------------------------------------- helpers ----


def run_clients(n, fn, timeout=60.0):
    """Run fn(i) in n threads released together by a barrier. Returns the
    list of results in index order; re-raises the first exception."""
    barrier = threading.Barrier(n)
    results = [None] * n
    errors = []

    def body(i):
        try:
            barrier.wait(timeout)
            results[i] = fn(i)
        except BaseException as e:  # noqa: B902 - reported to the caller
            errors.append(e)
            try:
                barrier.abort()
            except threading.BrokenBarrierError:
                pass

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        if t.is_alive():
            raise AssertionError("client thread still running after %.0fs" % timeout)
    if errors:
        raise errors[0]
    return results


def max_overlap(intervals):
    """Most intervals (start, end) open at one instant. An interval ending at
    the same instant another starts does not overlap it (end is processed first)."""
    ev = []
    for s, e in intervals:
        ev.append((s, 1))
        ev.append((e, -1))
    ev.sort(key=lambda x: (x[0], x[1]))
    cur = best = 0
    for _, d in ev:
        cur += d
        best = max(best, cur)
    return best


def max_in_window(times, window):
    """Most instants in any half-open interval [t, t + window)."""
    ts = sorted(times)
    best = 0
    j = 0
    for i in range(len(ts)):
        while ts[i] - ts[j] >= window:
            j += 1
        best = max(best, i - j + 1)
    return best


# An event the client observed only between two instants: it certainly
# happened in [lo, hi]. For an admission: lo = request sent + the daemon's
# own waited_ms (measured from when it read the request, which is later),
# hi = reply received. The checks below report only what is certain, so
# thread scheduling (the GIL, a loaded box) can hide a violation but never
# invent one; with ~1ms round trips they are as sharp as the daemon's clock.


def closer_than(ivs, d):
    """Pairs of bracketed events certainly less than d apart:
    [(i, j)] with max(hi_j - lo_i, hi_i - lo_j) < d."""
    out = []
    for i in range(len(ivs)):
        for j in range(i + 1, len(ivs)):
            (lo_i, hi_i), (lo_j, hi_j) = ivs[i], ivs[j]
            if max(hi_j - lo_i, hi_i - lo_j) < d:
                out.append((i, j))
    return out


def crowded_window(ivs, w, q):
    """A set of more than q bracketed events certainly inside one interval
    shorter than w, as a list of indexes, or None. (Any such set fits in
    [lo_i, lo_i + w) for its earliest-starting member i.)"""
    for i, (lo_i, _) in enumerate(ivs):
        inside = [j for j, (lo_j, hi_j) in enumerate(ivs)
                  if lo_j >= lo_i and hi_j < lo_i + w]
        if len(inside) > q:
            return inside
    return None


class DaemonCase(unittest.TestCase):
    """One daemon per test class, started from CONF (and REDIS_URL if set).
    Each test should use its own scope or key. tearDownClass stops the
    daemon with the full stop() checks (exit 0, clean log)."""

    CONF = None
    ARGS = ()
    BACKEND = "local"  # what admitted replies must say in "backend"
    _key_seq = 0

    @classmethod
    def setUpClass(cls):
        cls.daemon = Admitd(cls.CONF, args=cls.ARGS)
        cls.daemon.start()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.cleanup()

    def tearDown(self):
        # A failed test keeps the daemon's dir (conf, stderr) for inspection.
        outcome = getattr(self, "_outcome", None)
        if outcome is not None and not getattr(outcome, "success", True):
            self.daemon.tmp.keep()
        p = self.daemon.proc
        if p is None or p.poll() is not None:
            self.daemon.tmp.keep()
            self.fail("admitd died during the test\n" + self.daemon.stderr_text())

    def conn(self, timeout=None):
        c = self.daemon.connect(timeout)
        self.addCleanup(c.close)
        return c

    def key(self):
        """A key no other test uses."""
        DaemonCase._key_seq += 1
        return "%s-%d" % (self._testMethodName, DaemonCase._key_seq)

    def status(self, conn=None):
        c = conn or self.conn()
        r = c.request({"op": "status"})
        self.assertTrue(r.get("ok"), r)
        return r

    def wait_waiting(self, scope, n, deadline=IO_TIMEOUT):
        """Poll status until scope has exactly n waiters (a measured arrival,
        not a sleep). The deadline only ends a test that is failing anyway."""
        c = self.conn()

        def cond():
            return self.status(c)["scopes"][scope]["waiting"] == n
        _wait_until(cond, deadline, "%d waiters in scope %s" % (n, scope),
                    self.daemon.stderr_text)

    def assertNotLate(self, elapsed, bound, msg=None, since=None, stalls=True):
        """An upper bound on lateness: elapsed < bound (which includes SLACK)
        + late_allowance over the interval measured. That interval is
        [since, now], or [now - elapsed, now] when since is None (the usual
        case: checked right after measuring). stalls=False forgives no
        stall: for a statistic (a median, the second-largest of many
        samples) that one stall cannot move. The failure says how loaded
        the box was."""
        if elapsed < bound:
            return
        t1 = now()
        t0 = t1 - elapsed if since is None else since
        extra = late_allowance(t0, t1) if stalls else 0.0
        if elapsed >= bound + extra:
            self.fail("%.3fs late bound (+%.3fs for stalls) exceeded: %.3fs "
                      "(SLACK %.0fms = %.0fms x load %.2f at start, load average %s, "
                      "stalls: client %.3fs, daemon/redis %.3fs)%s"
                      % (bound, extra, elapsed, SLACK * 1000, SLACK_BASE * 1000,
                         LOAD_AT_START, os.getloadavg(), STALLS.worst(t0, t1),
                         STALLS.proc_wait(t0, t1),
                         (": %s" % (msg,)) if msg is not None else ""))

    def assertRefused(self, reply, error, rule=None, rule_prefix=None):
        """reply is a refusal with this error code and (when given) this
        exact rule text, or a rule text starting with rule_prefix."""
        self.assertIs(reply.get("ok"), False, reply)
        self.assertEqual(reply.get("error"), error, reply)
        self.assertIsInstance(reply.get("message"), str, reply)
        if error in ("limited", "budget_exceeded"):
            self.assertIsInstance(reply.get("retry_after_ms"), int, reply)
            self.assertGreaterEqual(reply["retry_after_ms"], 0, reply)
        if rule is not None:
            self.assertEqual(reply.get("rule"), rule, reply)
        if rule_prefix is not None:
            self.assertIsInstance(reply.get("rule"), str, reply)
            self.assertTrue(reply["rule"].startswith(rule_prefix), reply)

    def assertAdmitted(self, reply):
        self.assertIs(reply.get("ok"), True, reply)
        self.assertIsInstance(reply.get("lease"), str, reply)
        self.assertIsInstance(reply.get("waited_ms"), int, reply)
        self.assertEqual(reply.get("backend"), self.BACKEND, reply)
        return reply["lease"]


def settled_nothing(r, repeat=False):
    """Is r the reply of a release that changed nothing (a repeat when
    repeat is True: Redis saw the lease settled before)?"""
    want = {"ok": True, "held": False, "settled": False}
    if repeat:
        want["repeat"] = True
    return {k: r.get(k) for k in ("ok", "held", "settled", "repeat") if k in r} == want \
        and bool(r.get("message"))


def acquire_req(scope, key=None, **kw):
    r = {"op": "acquire", "scope": scope}
    if key is not None:
        r["key"] = key
    r.update(kw)
    return r


class Scenario:
    """Lifecycle glue for unittest: with Scenario(self) as sc, registered
    daemons/servers are cleaned up, kept on failure. Simpler: use the
    objects' own context managers; this exists for tests that start several."""

    def __init__(self, test):
        self.test = test
        self.objs = []

    def add(self, obj):
        self.objs.append(obj)
        return obj

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        first = None
        for o in reversed(self.objs):
            try:
                o.cleanup(failed=exc_type is not None)
            except AssertionError as e:
                first = first or e
        if first and exc_type is None:
            raise first
        return False
