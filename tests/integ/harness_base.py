"""harness_base.py - what every part of the test harness stands on.

Owns: where the repository and the daemon binary are (REPO, admitd_bin,
VALGRIND, _asan_build), the timing allowances (SLACK scaled by the load at
start, EPS, the start/stop/IO deadlines, and the stalls of this process
measured while a bounded interval ran: STALLS, late_allowance, unstalled),
polling a condition against a deadline (_wait_until), stopping a process
(SIGTERM then SIGKILL: _terminate), free ports, and the private temp dirs
kept when a test fails (_TempDir), and Started (start and clean up a
process with `with`). Stdlib only.

Import harness (tests/integ/harness.py), which re-exports what the tests
use, rather than this module.
"""

import atexit
import bisect
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time


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


class Started:
    """A process of the tests as a context manager: `with X(...) as x`
    starts x, and cleans it up on the way out, its files kept when the block
    failed. X has start() (returning x) and cleanup(failed)."""

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        self.cleanup(failed=exc_type is not None)
        return False
