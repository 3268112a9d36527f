"""harness.py - start real redis-server and admitd processes for integration tests.

The one module the tests import (tests.integ.harness; client/python/tests,
whose own package is also "tests", loads this folder as admitd_integ). It
re-exports the parts, each of one job: harness_base.py (where things are, timing allowances, deadlines,
processes, temp dirs), harness_redis.py (RedisServer, a tiny RESP client),
harness_admitd.py (Admitd, its post-mortem log scan, the line-JSON Conn).
It owns what scenarios share on top of them: DaemonCase (a class-wide
daemon), Scenario (cleanup of several), run_clients (threads released
together), interval checks (max_overlap, max_in_window, closer_than,
crowded_window), redis_daemon (Redis, a daemon on it and a connection),
acquire_req and settled_nothing. Stdlib only.

Nothing here sleeps and hopes: every wait polls a condition against a
deadline and fails with the process's log when the deadline passes. Logs and
temp dirs are removed when a test passes and kept (path printed) when it fails.

Timing: lower bounds (the limits) are exact up to EPS. Upper bounds (how late
an event may be) get SLACK, scaled by the load measured when the suite
starts, plus the stalls of this process measured while the bounded interval
ran (late_allowance): they exist to catch "never" and "a whole period
late", not the scheduler. Reply deadlines (IO_TIMEOUT) are far above both.
"""

import json  # noqa: F401 (harness.json: some tests use it through the harness)
import os
import threading
import unittest

from .harness_base import (  # noqa: F401
    BAD_MARKERS, EPS, IO_TIMEOUT, LOAD_AT_START, MAX_LOAD_FACTOR, REPO, SLACK, SLACK_BASE,
    STALLS, START_DEADLINE, STOP_DEADLINE, VALGRIND, VALGRIND_CMD, Started, _TempDir,
    _asan_build, _read_text, _terminate, _wait_until, admitd_bin, free_tcp_port,
    late_allowance, load_factor, now, unstalled)
from .harness_redis import RedisError, RedisServer, RespConn, resp_encode  # noqa: F401
from .harness_admitd import Admitd, Conn, run_admitd  # noqa: F401


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


def redis_daemon(test, conf, **kw):
    """A redis-server, an Admitd on it (conf, kw as Admitd's) and a Conn to
    the daemon, for test (a TestCase), cleaned up in reverse order when the
    test ends. Returns (redis, daemon, conn)."""
    rs = RedisServer().start()
    test.addCleanup(rs.cleanup)
    d = Admitd(conf, redis_url=rs.url, **kw).start()
    test.addCleanup(d.cleanup)
    c = d.connect()
    test.addCleanup(c.close)
    return rs, d, c


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
