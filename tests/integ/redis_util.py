"""redis_util.py - shared pieces of the Redis integration tests.

Owns: the Pods fixture (one redis-server plus N admitd processes on one
conf), the multi-daemon hammer that records every admission's instants, the
Redis-clock offset, and the invariant checks over recorded instants used by
test_redis_multipod.py and test_redis_faults.py. Process lifecycle itself is
harness.py's (not edited here).

Instants. Every client runs in this process, so time.monotonic() is one
clock for all of them, and the daemons' CLOCK_MONOTONIC is the same clock.
The decisions are made by the Lua scripts on Redis TIME (wall clock, whole
milliseconds); its offset to the monotonic clock is measured (redis_offset)
where a check needs absolute Redis instants (aligned windows).

An admission's Redis decision instant R is bracketed as lo <= R <= hi:
- hi = the instant its reply line was read (after R, always).
- lo = t_send + waited_ms - LAG. The daemon measures waited_ms from when it
  read the request (>= t_send) to when it handled Redis's answer, which is
  after R by the answer's delivery and the daemon's loop turn: LAG bounds
  that delay. This is the one tolerance that is not a clock granularity;
  it weakens the checks by LAG and never makes them report a violation
  that is not certain when the daemon's lag is within it.
A lease was certainly held over [t_recv, t_rel]: admitted before its reply
was read, released after the release was sent.
"""

import bisect
import os
import random
import re
import socket
import struct
import threading
import time

from . import harness
from .harness import EPS, SLACK, SLACK_BASE, Admitd, RedisServer, acquire_req, now

# The daemon's lag from Redis's decision (TIME inside the script) to its own
# clock reading for waited_ms: one Unix-socket delivery plus one event-loop
# turn. Both are sub-millisecond on an idle box; a 2-core box running 48
# client threads, 3 daemons and Redis (possibly under ASan) can deschedule
# the daemon for a scheduler slice or two, so the timer slack (30ms, more
# under valgrind) bounds it. SLACK_BASE, not SLACK: LAG widens the brackets
# the limits are checked on, and a busy box must not weaken those checks
# (SLACK grows with the load measured at the start; LAG does not).
LAG = SLACK_BASE
# How late a reply may come after its budget (timeout_ms) ends: the daemon's
# deadline timer (SLACK) plus the delay before a busy client thread (GIL,
# 2 cores) gets to read it, another SLACK (SLACK grows with the box's load).
# Checks add the stalls of this process measured over the request's
# interval (budget_late_ok); the bound is there to catch a reply a whole retry
# period past its budget, or none, not a descheduled client.
BUDGET_SLACK = 2 * SLACK + 0.05


def budget_late_ok(t_send, t_recv, budget_s):
    """Whether a reply read at t_recv to a request sent at t_send with a
    budget of budget_s seconds came in time (see BUDGET_SLACK)."""
    late = t_recv - t_send - budget_s
    return late < BUDGET_SLACK or late < BUDGET_SLACK + harness.late_allowance(t_send, t_recv)

PER_DAEMON = 16


def redis_offset(redis, samples=5):
    """(lo, hi), seconds: Redis TIME minus time.monotonic() lies in [lo, hi].
    Each sample brackets one TIME reply between two monotonic readings; the
    tightest bracket of several wins (Redis TIME has microseconds)."""
    c = redis.connect()
    best = None
    try:
        for _ in range(samples):
            t0 = now()
            sec, usec = c.command("TIME")
            t1 = now()
            wall = int(sec) + int(usec) / 1e6
            b = (wall - t1, wall - t0)
            if best is None or b[1] - b[0] < best[1] - best[0]:
                best = b
    finally:
        c.close()
    return best


class Pods:
    """One redis-server and n admitd processes on the same conf text.

    conf: [scope ...] sections; admitd_extra: lines for the [admitd] section
    (redis_timeout etc.). redis: an already built RedisServer to use (it is
    started unless start_redis is False). Use as a context manager: on a
    failure every log and temp dir is kept."""

    def __init__(self, conf, n=3, admitd_extra="", redis=None, start_redis=True,
                 start_daemons=True):
        self.redis = redis or RedisServer()
        self.own_redis = redis is None
        self.start_redis = start_redis
        self.start_daemons = start_daemons
        self.daemons = []
        for _ in range(n):
            d = Admitd("[admitd]\n", redis_url=self.redis.url)
            text = "[admitd]\nsocket = %s\n%s\n\n%s" % (d.sock_path, admitd_extra, conf)
            with open(d.conf_path, "w") as f:
                f.write(text)
            d.conf_text = text
            self.daemons.append(d)

    def __enter__(self):
        try:
            if self.start_redis:
                self.redis.start()
            if self.start_daemons:
                for d in self.daemons:
                    d.start()
        except BaseException:
            self.cleanup(True)
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        self.cleanup(exc_type is not None)
        return False

    def cleanup(self, failed):
        first = None
        for d in self.daemons:
            try:
                d.cleanup(failed=failed)
            except AssertionError as e:
                first = first or e
        if self.own_redis:
            self.redis.cleanup(failed=failed or first is not None)
        if first is not None and not failed:
            raise first

    def logs(self):
        return "\n".join("--- admitd %d ---\n%s" % (i, d.stderr_text())
                         for i, d in enumerate(self.daemons))

    def alive(self):
        """Every daemon that was started is still running."""
        return all(d.proc is None or d.proc.poll() is None for d in self.daemons)


def key_name(prefix, scope, key, suffix):
    """The Redis key backend_redis.c uses for (scope, key)."""
    return "%s:{%s:%s}:%s" % (prefix, scope, key, suffix)


class Adm:
    """One admission: by which daemon and client, when (see module doc)."""
    __slots__ = ("daemon", "client", "t_send", "t_recv", "t_rel", "reply", "lo", "hi",
                 "cls")

    def __init__(self, daemon, client, t_send, t_recv, reply, cls=None):
        self.daemon, self.client, self.t_send, self.t_recv, self.reply = \
            daemon, client, t_send, t_recv, reply
        self.t_rel = None
        self.cls = cls
        self.lo = t_send + reply["waited_ms"] / 1000.0 - LAG
        self.hi = t_recv

    def __repr__(self):
        return "Adm(d%d c%d [%.4f, %.4f] rel %s)" % (
            self.daemon, self.client, self.lo, self.hi,
            "-" if self.t_rel is None else "%.4f" % self.t_rel)


class Outcome:
    """What a hammer saw: admissions (sorted by hi), refusals as
    (daemon, t_send, t_recv, reply), and every request's (t_send, t_recv,
    budget in seconds) in late."""

    def __init__(self):
        self.adms = []
        self.refusals = []
        self.late = []

    def errors(self):
        out = {}
        for _, _, _, r in self.refusals:
            out[r.get("error")] = out.get(r.get("error"), 0) + 1
        return out


def hammer(test, cluster, scope, key, duration, per_daemon=PER_DAEMON, hold=(0.0, 0.0),
           budget_ms=None, cls=None, release_tokens=None, retry_refused=True):
    """per_daemon client threads on every daemon of cluster, each with its own
    connection, loop acquire -> hold uniform(hold) -> release on one key for
    `duration` seconds. Each acquire's budget is budget_ms, or (default)
    what is left of the duration, so no client is still queued at the end.
    cls: a class name or a function of the client index giving one.
    A refusal (limited, budget_exceeded, timeout) is recorded and the client
    sleeps the retry_after_ms it was given (bounded by the time left): the
    caller's behaviour, not a wait on the daemon. Every reply must match its
    request's id and come within its budget + BUDGET_SLACK (+ the stalls
    measured meanwhile: budget_late_ok), or the test fails.
    Returns an Outcome."""
    daemons = cluster.daemons
    n = per_daemon * len(daemons)
    end = now() + duration
    lock = threading.Lock()
    out = Outcome()

    def client(i):
        d = i // per_daemon
        c = daemons[d].connect(timeout=30)
        rng = random.Random(i)
        my_cls = cls(i) if callable(cls) else cls
        seq = 0
        adms, refs, late = [], [], []
        try:
            while True:
                left = end - now()
                if left <= 0:
                    break
                seq += 1
                b = budget_ms if budget_ms is not None else int(left * 1000)
                req = acquire_req(scope, key, id=seq, timeout_ms=b)
                if my_cls is not None:
                    req["class"] = my_cls
                t_send = now()
                r = c.request(req, timeout=b / 1000.0 + harness.IO_TIMEOUT)
                t_recv = c.last_t
                test.assertEqual(r.get("id"), seq, r)
                late.append((t_send, t_recv, b / 1000.0))
                if r.get("ok"):
                    test.assertIsInstance(r.get("lease"), str, r)
                    test.assertIsInstance(r.get("waited_ms"), int, r)
                    a = Adm(d, i, t_send, t_recv, r, my_cls)
                    h = rng.uniform(*hold)
                    if h > 0:
                        time.sleep(h)  # the client's own work while holding
                    a.t_rel = now()
                    rel = {"op": "release", "lease": r["lease"]}
                    if release_tokens is not None:
                        rel["tokens"] = release_tokens
                    rr = c.request(rel)
                    test.assertIs(rr.get("ok"), True, rr)
                    adms.append(a)
                else:
                    test.assertIn(r.get("error"), ("limited", "budget_exceeded", "timeout"), r)
                    refs.append((d, t_send, t_recv, r))
                    ra = r.get("retry_after_ms") or 0
                    if retry_refused and ra > 0:
                        time.sleep(max(0.0, min(ra / 1000.0, end - now())))
        finally:
            c.close()
        with lock:
            out.adms.extend(adms)
            out.refusals.extend(refs)
            out.late.extend(late)

    harness.run_clients(n, client, timeout=duration + 60)
    out.adms.sort(key=lambda a: a.hi)
    late = [(t_recv - t_send - b, t_send, t_recv) for t_send, t_recv, b in out.late
            if not budget_late_ok(t_send, t_recv, b)]
    test.assertEqual(late, [], "replies later than their budget allows (lateness, sent, "
                     "received; BUDGET_SLACK %.3fs, load average %s)"
                     % (BUDGET_SLACK, os.getloadavg()))
    return out


def load(test, cluster, scope, control, per_daemon=4, budget_ms=300, key="k"):
    """per_daemon clients per daemon loop acquire (budget_ms) -> release on
    key (a name, or a function of the client index giving one) while
    control() runs in its own thread; they stop when it returns. Every
    request must get exactly one reply, with its id, within its budget
    (+ BUDGET_SLACK and the stalls measured meanwhile: budget_late_ok), and
    a refusal must be one of the limit's (limited, budget_exceeded,
    timeout), never an error. Returns (replies as (daemon, t_send, t_recv,
    reply, key) sorted by t_recv, control's result)."""
    n = per_daemon * len(cluster.daemons)
    done = threading.Event()
    res = {}
    lock = threading.Lock()
    replies = []

    def body(i):
        if i == n:
            try:
                res["control"] = control()
            finally:
                done.set()
            return
        d = i // per_daemon
        k = key(i) if callable(key) else key
        c = cluster.daemons[d].connect(timeout=10)
        seq = 0
        mine = []
        try:
            while not done.is_set():
                seq += 1
                t_send = now()
                r = c.request(acquire_req(scope, k, id=seq, timeout_ms=budget_ms),
                              timeout=budget_ms / 1000.0 + harness.IO_TIMEOUT)
                t_recv = c.last_t
                test.assertEqual(r.get("id"), seq, r)
                test.assertTrue(budget_late_ok(t_send, t_recv, budget_ms / 1000.0),
                                (t_recv - t_send, budget_ms, BUDGET_SLACK, r))
                mine.append((d, t_send, t_recv, r, k))
                if r.get("ok"):
                    test.assertTrue(r.get("lease"), r)
                    rr = c.request({"op": "release", "lease": r["lease"]})
                    test.assertIs(rr.get("ok"), True, rr)
                else:
                    test.assertIn(r.get("error"), ("limited", "budget_exceeded", "timeout"), r)
                    # the client backs off as told (bounded: keep load on)
                    time.sleep(min(0.05, (r.get("retry_after_ms") or 0) / 1000.0))
            # Exactly once: nothing more arrives for this connection.
            test.assertEqual(c.buf, b"")
            c.sock.settimeout(0.05)
            try:
                extra = c.sock.recv(4096)
            except socket.timeout:
                extra = b""
            test.assertEqual(extra, b"", "a reply arrived twice")
        finally:
            c.close()
        with lock:
            replies.extend(mine)

    harness.run_clients(n + 1, body, timeout=120)
    replies.sort(key=lambda x: x[2])
    return replies, res.get("control")


# ----------------------------------------------------------------- checks ----


def span_excess(ivs, allowed):
    """ivs: bracketed instants [(lo, hi)]. allowed(L): the most admissions any
    closed interval of length L may hold (nondecreasing in L). Returns a
    counterexample (i, m, L) when some m admissions certainly lie within an
    interval of length at most L and m > allowed(L), else None. For each
    starting bracket i, the admissions with lo >= lo_i taken in order of hi
    certainly lie within [lo_i, hi]: the longest that interval can really be
    is hi - lo_i (+ EPS for the scripts' whole milliseconds)."""
    order = sorted(range(len(ivs)), key=lambda k: ivs[k][0])
    for pos, i in enumerate(order):
        lo_i = ivs[i][0]
        his = sorted(ivs[k][1] for k in order[pos:])
        for m, hi in enumerate(his, 1):
            span = max(0.0, hi - lo_i) + EPS
            if m > allowed(span):
                return (i, m, span)
    return None


def window_excess(ivs, window, amount):
    """How many more than amount bracketed admissions certainly lie in one
    interval shorter than window: max over i of the admissions with
    lo >= lo_i and hi < lo_i + window, less amount (<= 0: none over).
    For measuring (how much a failover lets through), not for a bound."""
    los = sorted(ivs)
    best = 0
    for i, (lo_i, _) in enumerate(los):
        m = sum(1 for lo, hi in los[i:] if hi < lo_i + window)
        best = max(best, m)
    return best - amount


def policer(burst, rate):
    """allowed(L) of a token or leaky bucket as a policer: burst + rate * L."""
    return lambda span: burst + rate * span


def per_window(amount, window, extra=1):
    """allowed(L) when each window of length `window` holds at most amount:
    an interval of length L meets at most floor(L / window) + extra of them
    (extra 1: windows that start at admissions in it, e.g. a rolling quota;
    2: aligned windows, or sessions already running when it starts)."""
    return lambda span: amount * (int(span // window) + extra)


def aligned_excess(ivs, offset, window_ms, amount):
    """Windows aligned on the Redis clock (fixed-window, the buckets of
    sliding-window): count the admissions certainly inside each window
    floor(R / W), R = Redis TIME in ms; offset = redis_offset(). Returns
    {window: count} for windows holding more than amount, else {}."""
    counts = {}
    for lo, hi in ivs:
        a = int(((lo + offset[0]) * 1000.0) // window_ms)
        b = int(((hi + offset[1]) * 1000.0) // window_ms)
        if a == b:
            counts[a] = counts.get(a, 0) + 1
    return {w: n for w, n in counts.items() if n > amount}


def pace_violations(adms, d):
    """Pairs of admissions certainly less than d apart (both orders)."""
    ivs = sorted((a.lo, a.hi) for a in adms)
    out = []
    for i, (lo_i, hi_i) in enumerate(ivs):
        # only later-starting brackets can be certainly closer than d to i
        j = i + 1
        while j < len(ivs) and ivs[j][0] < hi_i + d:
            lo_j, hi_j = ivs[j]
            if max(hi_j - lo_i, hi_i - lo_j) < d:
                out.append(((lo_i, hi_i), (lo_j, hi_j)))
            j += 1
    return out


RULE_KEY = re.compile(r"\}:r\d+$")


def rule_pack(a, b, t, penalty_until=0):
    """A rule's state as scripts/lib/state.lua writes it: a, b, t (and
    penalty_until when not 0) as little-endian signed 64-bit integers."""
    if penalty_until:
        return struct.pack("<4q", a, b, t, penalty_until)
    return struct.pack("<3q", a, b, t)


def rule_state(redis, key):
    """The state of the rule under key ({a, b, t, penalty_until}, ints) as
    scripts/lib/state.lua stores it, or None when there is none."""
    v = redis.command("GET", key)
    if v is None:
        return None
    if isinstance(v, str):
        v = v.encode()
    if len(v) not in (24, 32):
        raise AssertionError("%s holds %r: not a rule's state" % (key, v))
    f = struct.unpack("<%dq" % (len(v) // 8), v)
    return {"a": f[0], "b": f[1], "t": f[2], "penalty_until": f[3] if len(f) > 3 else 0}


def redis_field(redis, key, field):
    """HGET key field, or for a rule's key (PREFIX:{..}:rN, a string) that
    field of its state; a string, None when absent (or 0 there)."""
    if RULE_KEY.search(key):
        st = rule_state(redis, key)
        return str(st[field]) if st is not None and st[field] != 0 else None
    return redis.command("HGET", key, field)


def wait_redis_field(redis, key, field, deadline=2.0):
    """Poll redis_field(key, field) until it has a value; returns it."""
    return harness._wait_until(lambda: redis_field(redis, key, field), deadline,
                               "%s %s in Redis" % (key, field))


def status(daemon):
    with harness.Conn(daemon.sock_path) as c:
        r = c.request({"op": "status"})
    if not r.get("ok"):
        raise AssertionError("status failed: %r" % r)
    return r


def wait_backend(daemon, state, deadline):
    """Poll status until "backend" is state; returns the instant seen (the
    deadline only ends a test that is failing: a bound on when the state
    came is the caller's, with harness.late_allowance)."""
    harness._wait_until(lambda: status(daemon)["backend"] == state, deadline,
                        "admitd backend %s" % state, daemon.stderr_text)
    return now()


def write_secret(tmpdir, name, secret):
    path = os.path.join(tmpdir, name)
    with open(path, "w") as f:
        f.write(secret + "\n")
    os.chmod(path, 0o600)
    return path


def bisect_count(sorted_ts, lo, hi):
    """How many of sorted_ts lie in [lo, hi]."""
    return bisect.bisect_right(sorted_ts, hi) - bisect.bisect_left(sorted_ts, lo)


__all__ = ["Adm", "BUDGET_SLACK", "Pods", "budget_late_ok", "LAG", "Outcome", "PER_DAEMON",
           "aligned_excess", "bisect_count", "hammer", "key_name", "load", "pace_violations",
           "per_window", "policer", "redis_field", "redis_offset", "rule_pack", "rule_state",
           "span_excess", "status", "wait_backend", "wait_redis_field", "window_excess",
           "write_secret"]
