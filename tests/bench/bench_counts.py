"""bench_counts.py - the benchmark's asserted Redis call counts.

Owns: release_no_rtt (count_release: N pairs on a requests-only scope make
at most N acquire calls and no release call; the control scope with a
concurrency rule makes N release calls), fifo_head_only (run_counts: only
the head of a queue retries), book_ahead (count_ahead: at most N/8 calls
for N acquires on one key); run.py exits 1 when one is violated.
"""

import os
import time

from tests.bench.bench_env import FIFO_RETRY_MS, FIFO_WAITERS, FIFO_WINDOW_S
from tests.bench.bench_redis import (
    commandstats_evalsha, evalsha_count, status, wait_for)
from tests.bench.bench_rows import loadgen


def count_release(redis, mon, daemon, scope, n, conns, shas):
    sha_acq, sha_rel = shas
    a = mon.mark()
    before = commandstats_evalsha(redis)
    lg = loadgen(daemon.sock_path, scope, conns, pairs=n)
    # A fire-and-forget release call may still be on its way to Redis when
    # the reply reaches the client; the control scope proves this is enough.
    time.sleep(0.3)
    after = commandstats_evalsha(redis)
    calls = mon.between(a, mon.mark())
    res = {
        "pairs": n, "sent": lg["sent"], "admitted": lg["admitted"],
        "acquire_calls": evalsha_count(calls, sha_acq),
        "release_calls": evalsha_count(calls, sha_rel),
        "other_evalsha": evalsha_count(calls, exclude=(sha_acq, sha_rel)),
        "commandstats_evalsha_delta": after - before,
        "loadgen_problems": lg["problems"],
    }
    return res


def run_counts(redis, mon, pod_a, pod_b, shas, problems):
    sha_acq, sha_rel = shas
    n = 2000
    out = {}
    norel = count_release(redis, mon, pod_a, "norel", n, 8, shas)
    books = count_release(redis, mon, pod_a, "books", n, 8, shas)
    # Acquires of different keys may share a call (redis_batch): at most one
    # call per acquire, exactly one with BENCH_REDIS_BATCH=1.
    acq = norel["acquire_calls"]
    one_each = os.environ.get("BENCH_REDIS_BATCH") == "1"
    ok = (norel["sent"] == n and norel["admitted"] == n and 1 <= acq <= n
          and (acq == n or not one_each) and norel["release_calls"] == 0
          and acq <= norel["commandstats_evalsha_delta"] <= acq + norel["other_evalsha"])
    ok_ctl = 1 <= books["acquire_calls"] <= n and books["release_calls"] == n
    norel["ok"] = ok
    books["ok"] = ok_ctl
    out["release_no_rtt"] = {"requests_only": norel, "control_concurrency_rule": books,
                             "ok": ok and ok_ctl}
    if not ok:
        problems.append("release_no_rtt violated: %s" % norel)
    if not ok_ctl:
        problems.append("release_no_rtt control (release that books) miscounted: %s" % books)
    for r in (norel, books):
        problems.extend(r["loadgen_problems"])

    # FIFO: pod B holds the key's only lease; pod A's 100 waiters queue.
    holder = pod_b.connect()
    r = holder.request({"op": "acquire", "scope": "fifo", "key": "hot", "timeout_ms": 0})
    if not r.get("ok"):
        raise AssertionError("pod B could not take the fifo lease: %r" % r)
    waiters = [pod_a.connect(timeout=30) for _ in range(FIFO_WAITERS)]
    for i, w in enumerate(waiters):
        w.send({"op": "acquire", "scope": "fifo", "key": "hot", "id": i, "timeout_ms": 20000})
    wait_for(lambda: status(pod_a)["scopes"]["fifo"]["waiting"] == FIFO_WAITERS, 10,
             "%d waiters in pod A" % FIFO_WAITERS)
    a = mon.mark()
    t0 = time.monotonic()
    time.sleep(FIFO_WINDOW_S)
    b = mon.mark()
    window = time.monotonic() - t0
    still = status(pod_a)["scopes"]["fifo"]["waiting"]
    calls = mon.between(a, b)
    head_calls = evalsha_count(calls, sha_acq)
    expected = window * 1000.0 / FIFO_RETRY_MS
    lo, hi = 0.5 * expected, 1.5 * expected + 5
    fok = lo <= head_calls <= hi and still == FIFO_WAITERS
    out["fifo_head_only"] = {
        "waiters": FIFO_WAITERS, "window_s": round(window, 3),
        "concurrency_retry_ms": FIFO_RETRY_MS, "acquire_calls": head_calls,
        "expected_head_retries": round(expected, 1), "allowed": [round(lo, 1), round(hi, 1)],
        "if_every_waiter_polled": round(expected * FIFO_WAITERS), "still_waiting": still,
        "ok": fok,
    }
    if not fok:
        problems.append("fifo_head_only violated: %s" % out["fifo_head_only"])
    for w in waiters:
        w.close()
        pod_a._conns.remove(w)
    holder.request({"op": "release", "lease": r["lease"]})
    holder.close()
    pod_b._conns.remove(holder)
    wait_for(lambda: status(pod_a)["scopes"]["fifo"]["waiting"] == 0, 10, "waiters to go")

    # Book ahead: one key taken one acquire after another.
    out["book_ahead"] = ahead = count_ahead(mon, pod_a, "norel", n, sha_acq)
    if not ahead["ok"]:
        problems.append("book_ahead violated: %s" % ahead)
    problems.extend(ahead["loadgen_problems"])
    return out


def count_ahead(mon, daemon, scope, n, sha_acq):
    """n acquires in a row on one key: who admitted each (Redis calls, or units
    booked ahead by an earlier call)."""
    def counters():
        st = status(daemon)
        return (st["scopes"][scope]["admitted_ahead"], st["redis"]["calls"]["acquire"],
                st["redis"]["calls"]["give_back"])

    before = counters()
    a = mon.mark()
    lg = loadgen(daemon.sock_path, scope, 1, keys=1, pairs=n, oneshot=True)
    time.sleep(0.1)  # a give-back on its way
    script_calls = evalsha_count(mon.between(a, mon.mark()), sha_acq)
    taken, calls, gives = (x - y for x, y in zip(counters(), before))
    off = os.environ.get("BENCH_BOOK_AHEAD") == "0"
    # Redis saw the acquires and the give-backs (the same script): the
    # daemon's own counts tell them apart
    ok = (lg["admitted"] == n and calls + taken == n and script_calls == calls + gives
          and (calls == n if off else calls <= n // 8))
    return {"acquires": n, "admitted": lg["admitted"], "acquire_calls": calls,
            "give_back_calls": gives, "script_calls_seen": script_calls,
            "admitted_ahead": taken, "ok": ok, "loadgen_problems": lg["problems"]}
