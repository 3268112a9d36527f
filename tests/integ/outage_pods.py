"""outage_pods.py - what the pods of a fleet do in a Redis outage, measured
from outside: a pod restarted during the outage, one host at a time
(min_delay) across pods, and where a cap's remainders go.

Three real daemons on one real redis-server (harness), clients on real
sockets. Each run returns what its clients saw; test_outage_pods.py asserts
on it, and `python3 -m tests.integ.outage_pods [RUNS] [BIN...]` prints the
rows of docs/outages.md's table for each binary (default $ADMITD_BIN).
"""

import os
import signal
import sys
import threading
import time

from . import harness
from .harness import acquire_req, now
from .redis_util import Pods, status, wait_backend

EXTRA = "redis_timeout = 100ms\nfallback_pods = 3\n"


def all_count(cl, n):
    """Every daemon's heartbeat counted n pods."""
    harness._wait_until(
        lambda: all(status(d)["redis"]["pods_seen"] == n for d in cl.daemons), 10.0,
        "%d pods seen by every daemon" % n)


def take(daemon, scope, key, n):
    """n acquires with no wait on daemon (released at once); the admissions."""
    got = 0
    with daemon.connect() as c:
        for _ in range(n):
            r = c.request(acquire_req(scope, key, timeout_ms=0))
            if r.get("ok"):
                got += 1
                rr = c.request({"op": "release", "lease": r["lease"]})
                assert rr.get("ok") is True, rr
            elif r.get("error") not in ("limited", "budget_exceeded"):
                raise AssertionError("not a limit's refusal: %r" % r)
    return got


def restart(d):
    """kill -9 the daemon and start it again (Redis still down)."""
    d.kill9()
    try:
        os.unlink(d.sock_path)
    except OSError:
        pass
    d.start()
    wait_backend(d, "fallback", 10)


# ---------------------------------------------------------------- restarts --

RESTART_CONF = """
[scope q]
quota = 30/1m
timeout = 100ms

[scope r]
quota = 6/3s
timeout = 100ms
"""


def restart_run(restarts=4):
    """quota 30/1m over 3 pods: 30 admitted through Redis (10 by each pod),
    Redis stopped, every pod asked for 15 more, then pod 0 restarted
    `restarts` times, asked for 15 after each start. Also quota 6/3s ("r"):
    after the last restart, pod 0 asked at once and again 3.3 s later (a
    spent share earns again a window after the pod's start).
    Returns {"redis": 30, "fallback": before any restart, "restarted":
    [admissions after each start], "total", "r_at_start", "r_later"}."""
    with Pods(RESTART_CONF, n=3, admitd_extra=EXTRA) as cl:
        all_count(cl, 3)
        out = {"redis": sum(take(d, "q", "k", 10) for d in cl.daemons)}
        cl.redis.stop()
        for d in cl.daemons:
            wait_backend(d, "fallback", 5)
        out["fallback"] = sum(take(d, "q", "k", 15) for d in cl.daemons)
        out["restarted"] = []
        for _ in range(restarts):
            restart(cl.daemons[0])
            out["restarted"].append(take(cl.daemons[0], "q", "k", 15))
        out["total"] = out["redis"] + out["fallback"] + sum(out["restarted"])
        t0 = now()
        out["r_at_start"] = take(cl.daemons[0], "r", "k", 5)
        time.sleep(max(0.0, 3.3 - (now() - t0)))
        out["r_later"] = take(cl.daemons[0], "r", "k", 5)
        return out


# ------------------------------------------------------------- politeness --

POLITE_CONF = """
[scope crawl]
min_delay = 500ms
lease_ttl = 2s
timeout = 30s

[scope cap]
cluster_concurrency = 4
lease_ttl = 30s
timeout = 30s
"""
HOSTS = ["h%d.example" % i for i in range(6)]
HOLD = 0.1  # a fetch: how long a client holds its lease


def polite_run(kind="kill", outage=5.0, before=2.0, after=3.0):
    """One client per (daemon, host) loops acquire (1 s budget) -> hold 100
    ms -> release on scope crawl while Redis is up `before` s, out `outage`
    s (kind "kill": kill -9, then restarted empty; "stop": SIGSTOP, then
    SIGCONT), then up `after` s. Returns (admissions, refusals, t_out,
    t_back): an admission is (host, daemon, t_recv, t_rel, backend), the
    lease certainly held over [t_recv, t_rel]; a refusal (host, daemon,
    reply)."""
    with Pods(POLITE_CONF, n=3, admitd_extra=EXTRA) as cl:
        all_count(cl, 3)
        done = threading.Event()
        lock = threading.Lock()
        adms, refs, marks = [], [], {}

        def client(i):
            d, host = divmod(i, len(HOSTS))
            c = cl.daemons[d].connect(timeout=10)
            mine, mref, seq = [], [], 0
            try:
                while not done.is_set():
                    seq += 1
                    r = c.request(acquire_req("crawl", HOSTS[host], id=seq, timeout_ms=1000),
                                  timeout=1.0 + harness.IO_TIMEOUT)
                    t_recv = c.last_t
                    assert r.get("id") == seq, r
                    if r.get("ok"):
                        time.sleep(HOLD)
                        t_rel = now()
                        rr = c.request({"op": "release", "lease": r["lease"]})
                        assert rr.get("ok") is True, rr
                        mine.append((HOSTS[host], d, t_recv, t_rel, r.get("backend")))
                    else:
                        if r.get("error") not in ("limited", "budget_exceeded", "timeout"):
                            raise AssertionError("not a limit's refusal: %r" % r)
                        mref.append((HOSTS[host], d, r))
                        time.sleep(0.02)
            finally:
                c.close()
            with lock:
                adms.extend(mine)
                refs.extend(mref)

        def control():
            time.sleep(before)
            marks["out"] = now()
            if kind == "kill":
                cl.redis.proc.send_signal(signal.SIGKILL)
                cl.redis.proc.wait()
                cl.redis.proc = None
            else:
                cl.redis.pause()
            time.sleep(outage)
            marks["back"] = now()
            if kind == "kill":
                cl.redis.restart()
            else:
                cl.redis.resume()
            time.sleep(after)
            done.set()

        n = len(cl.daemons) * len(HOSTS)
        ctl = threading.Thread(target=control)
        ctl.start()
        harness.run_clients(n, client, timeout=60 + before + outage + after)
        ctl.join()
        adms.sort(key=lambda a: a[2])
        return adms, refs, marks["out"], marks["back"]


def overlaps(adms, t_out, t_back):
    """Each pair of admissions of one host by different daemons whose
    certain holds overlap, (host, first, second), first received first, by
    when the second was received: "start" (the first before the outage, the
    second in it), "during" (both in the outage), "return" (the second once
    Redis was back), "redis" (both before the outage). Returns them and the
    smallest gap (second's t_recv less first's t_rel) between admissions of
    a host by different daemons one after the other, in the outage or into
    it, and over the whole run."""
    out = {"start": [], "during": [], "return": [], "redis": []}
    gap = gap_all = None
    by_host = {}
    for a in adms:
        by_host.setdefault(a[0], []).append(a)
    for lst in by_host.values():
        lst.sort(key=lambda a: a[2])
        for i, a in enumerate(lst):
            for b in lst[i + 1:]:
                if b[2] >= a[3]:
                    break
                if a[1] == b[1]:
                    continue
                k = ("return" if b[2] >= t_back else "during" if a[2] >= t_out
                     else "start" if b[2] >= t_out else "redis")
                out[k].append((lst[0][0], a, b))
        for a, b in zip(lst, lst[1:]):
            if a[1] == b[1]:
                continue
            g = b[2] - a[3]
            gap_all = g if gap_all is None else min(gap_all, g)
            if t_out <= b[2] < t_back:
                gap = g if gap is None else min(gap, g)
    return out, gap, gap_all


def polite_summary(adms, refs, t_out, t_back):
    """What a polite_run's clients saw: the overlaps, the smallest gaps, the
    daemons that served hosts in fallback, fallback admissions, owner
    refusals."""
    ov, gap, gap_all = overlaps(adms, t_out, t_back)
    fb = [a for a in adms if a[4] == "fallback"]
    return {"overlaps": {k: len(v) for k, v in ov.items()},
            "gap": gap, "gap_all": gap_all,
            "fallback": len(fb),
            "fallback_daemons": sorted({a[1] for a in fb}),
            "hosts_by_daemon": {d: sorted({a[0] for a in fb if a[1] == d})
                                for d in sorted({a[1] for a in fb})},
            "owner_refusals": sum(1 for _, _, r in refs if r.get("rule") == "fallback_owner"),
            "pairs": ov}


# ------------------------------------------------------- cap remainders --

def cap_run(keys=8):
    """cluster_concurrency 4 over 3 pods, Redis stopped: each pod asked for
    3 detached leases of each key. Returns {key: [held by daemon 0, 1, 2]}."""
    with Pods(POLITE_CONF, n=3, admitd_extra=EXTRA) as cl:
        all_count(cl, 3)
        cl.redis.stop()
        for d in cl.daemons:
            wait_backend(d, "fallback", 5)
        out = {}
        for k in range(keys):
            key = "k%d" % k
            out[key] = []
            for d in cl.daemons:
                with d.connect() as c:
                    out[key].append(sum(
                        bool(c.request(acquire_req("cap", key, detach=True, timeout_ms=0))
                             .get("ok")) for _ in range(3)))
        return out


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    bins = sys.argv[2:] or [harness.admitd_bin()]
    for b in bins:
        os.environ["ADMITD_BIN"] = b
        print("== %s" % b, flush=True)
        for _ in range(runs):
            r = restart_run()
            print("restart: total %d (redis %d, fallback %d, after each restart %s)"
                  % (r["total"], r["redis"], r["fallback"], r["restarted"]), flush=True)
        for kind in ("kill", "stop"):
            for _ in range(runs):
                s = polite_summary(*polite_run(kind))
                print("polite %s: overlaps %s, smallest gap in the outage %s s, over the run "
                      "%.3f s, fallback admissions %d by daemons %s, owner refusals %d"
                      % (kind, s["overlaps"], s["gap"] is not None and round(s["gap"], 3),
                         s["gap_all"], s["fallback"], s["fallback_daemons"],
                         s["owner_refusals"]), flush=True)
        for _ in range(runs):
            held = cap_run()
            big = sorted({v.index(max(v)) for v in held.values()})
            print("cap: held by key %s; pods with the remainder: %s"
                  % (sorted(held.values()), big), flush=True)


if __name__ == "__main__":
    main()
