"""outage.py - load through a Redis outage on three limits at once, and the
over-admission measured from outside.

Three scopes share the run: a rolling quota, a token bucket and a
cluster-wide concurrency cap. Clients on every daemon acquire (budget
300 ms) and release at once (the cap's holders keep their lease 100 ms
first), while control() makes the outage. Every admission is recorded with
its instants (redis_util's brackets: the decision lies in [lo, hi]; a lease
was certainly held over [t_recv, t_rel]); the measures count only what is
certain, so a figure above zero is an over-admission that really happened.

Used by test_outage_bound.py (asserts the bound) and outage_cost.py (the
table of docs/outages.md).
"""

import threading
import time

from . import harness
from .harness import EPS, acquire_req, now
from .redis_util import LAG

Q, QW = 30, 1.0           # quota 30/1s
TB_C, TB_W = 30, 3.0      # token bucket 30/3s: capacity 30, 10 a second
TB_RATE = TB_C / TB_W
CC = 6                    # cluster_concurrency 6
HOLD = 0.1                # how long a cap holder keeps its lease
PER_DAEMON = {"q": 2, "tb": 2, "cc": 4}  # 12 holders for a cap of 6

CONF = """
[scope q]
quota = 30/1s
timeout = 30s

[scope tb]
rule = requests token-bucket 30/3s
timeout = 30s

[scope cc]
cluster_concurrency = 6
lease_ttl = 30s
timeout = 30s
"""

EXTRA = "redis_timeout = 100ms\nfallback_pods = 3\n"


def run_load(pods, control, scopes=("q", "tb", "cc"), per_daemon=None, budget_ms=300, key="k"):
    """per_daemon (default PER_DAEMON: more holders than the cap) clients
    per daemon and scope (an int, or {scope: n}) loop acquire -> (hold) ->
    release while control() runs; they stop when it returns. Returns
    (records, control's result); a record is (scope, daemon, t_send, t_recv,
    t_rel, reply), t_rel None for a refusal. A reply that is neither an
    admission nor a limit's refusal raises."""
    per = per_daemon if per_daemon is not None else PER_DAEMON
    jobs = [(s, d) for s in scopes for d in range(len(pods.daemons))
            for _ in range(per.get(s, 2) if isinstance(per, dict) else per)]
    done = threading.Event()
    res, out, lock = {}, [], threading.Lock()

    def body(i):
        if i == len(jobs):
            try:
                res["control"] = control()
            finally:
                done.set()
            return
        scope, d = jobs[i]
        mine = []
        c = pods.daemons[d].connect(timeout=10)
        try:
            seq = 0
            while not done.is_set():
                seq += 1
                t_send = now()
                r = c.request(acquire_req(scope, key, id=seq, timeout_ms=budget_ms),
                              timeout=budget_ms / 1000.0 + harness.IO_TIMEOUT)
                t_recv = c.last_t
                if r.get("id") != seq:
                    raise AssertionError("reply to another request: %r" % r)
                if r.get("ok"):
                    if scope == "cc":
                        time.sleep(HOLD)
                    t_rel = now()
                    rr = c.request({"op": "release", "lease": r["lease"]})
                    if rr.get("ok") is not True:
                        raise AssertionError("release: %r" % rr)
                    mine.append((scope, d, t_send, t_recv, t_rel, r))
                else:
                    if r.get("error") not in ("limited", "budget_exceeded", "timeout"):
                        raise AssertionError("not a limit's refusal: %r" % r)
                    mine.append((scope, d, t_send, t_recv, None, r))
                    time.sleep(min(0.05, (r.get("retry_after_ms") or 0) / 1000.0))
        finally:
            c.close()
        with lock:
            out.extend(mine)

    harness.run_clients(len(jobs) + 1, body, timeout=180)
    out.sort(key=lambda x: x[3])
    return out, res.get("control")


def brackets(records, scope, lo_t=None, hi_t=None, backend=None):
    """[(lo, hi)] of scope's admissions, those sent within [lo_t, hi_t]."""
    return [(ts + r["waited_ms"] / 1000.0 - LAG, tr) for s, _, ts, tr, _, r in records
            if s == scope and r.get("ok") and (backend is None or r.get("backend") == backend)
            and (lo_t is None or ts >= lo_t) and (hi_t is None or ts <= hi_t)]


def quota_excess(ivs, window=QW, amount=Q):
    """Admissions certainly inside one interval shorter than window, less
    amount (0: none over)."""
    los = sorted(ivs)
    best = 0
    for i, (lo_i, _) in enumerate(los):
        best = max(best, sum(1 for lo, hi in los[i:] if hi < lo_i + window))
    return max(0, best - amount)


def bucket_excess(ivs, burst=TB_C, rate=TB_RATE):
    """The most admissions certainly inside one interval [a, a + L] beyond
    what one bucket lets through in it (burst + rate * L); 0: none over.
    Returns (excess, L of the worst interval)."""
    los = sorted(ivs)
    best, span_at = 0.0, 0.0
    for i, (lo_i, _) in enumerate(los):
        his = sorted(hi for lo, hi in los[i:])
        for m, hi in enumerate(his, 1):
            span = max(0.0, hi - lo_i) + EPS
            x = m - (burst + rate * span)
            if x > best:
                best, span_at = x, span
    return int(best), span_at


def held_excess(records, scope="cc", cap=CC):
    """The most leases certainly held at one instant, less cap (0: none
    over): a lease was held over [t_recv, t_rel] at least."""
    ev = []
    for s, _, _, tr, trel, r in records:
        if s == scope and r.get("ok") and trel > tr:
            ev.append((tr, 1))
            ev.append((trel, -1))
    ev.sort(key=lambda e: (e[0], e[1]))  # a release before an admission at one instant
    n = best = 0
    for _, d in ev:
        n += d
        best = max(best, n)
    return max(0, best - cap)


def measure(records, lo_t=None, hi_t=None):
    """{"q": excess, "tb": excess, "cc": excess, "n": admissions by scope,
    "fb": fallback admissions by scope} over requests sent within
    [lo_t, hi_t] (the instants around the outage)."""
    sel = [x for x in records if (lo_t is None or x[2] >= lo_t) and (hi_t is None or x[2] <= hi_t)]
    out = {"q": quota_excess(brackets(sel, "q")),
           "tb": bucket_excess(brackets(sel, "tb"))[0],
           "cc": held_excess(sel),
           "n": {}, "fb": {}}
    for s in ("q", "tb", "cc"):
        out["n"][s] = len(brackets(sel, s))
        out["fb"][s] = len(brackets(sel, s, backend="fallback"))
    return out
