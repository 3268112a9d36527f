#!/usr/bin/env python3
"""run.py - admitd benchmarks: throughput as ratios against a Redis ceiling,
and two Redis call counts that must hold. Stdlib only. `make bench` runs it.

Owns: one process tree per run (a redis-server on a Unix socket in a temp
dir, admitd in redis mode, a second admitd in redis mode for the FIFO count,
admitd in local mode, redis-benchmark and tests/bench/loadgen), the
measurements, the table on stdout and tests/bench/results/latest.json.

Throughput (timings: reported, never asserted):
  ceiling.acquire  redis-benchmark running EVALSHA of the daemon's own
                   acquire script (strategy.lua + acquire.lua, concatenated
                   as daemon/gen_scripts.sh does) with the exact KEYS/ARGV
                   admitd sent for the bench scope (captured with MONITOR),
                   a fresh random lease id per call: script calls/s.
  ceiling.ping     redis-benchmark PING, for context.
  redis.spread     loadgen -> admitd (redis mode), CONNS connections on
                   CONNS keys: acquire+release pairs/s. On the bench scope a
                   release books nothing, so one pair is one script call, and
                   ratio = pairs/s / ceiling calls/s (of the same repetition).
  redis.hot        the same on one key: admitd's per-key FIFO lets only the
                   head ask Redis, so this is bounded by one round trip at a time.
  local.spread     loadgen -> admitd (local mode): pairs/s, absolute.
Each is repeated --reps times, interleaved; medians, min and max are quoted.

Counts (asserted; run.py exits 1 when one is violated):
  release_no_rtt   N acquire+release pairs on a scope with only a requests
                   rule: Redis sees exactly N acquire-script calls and 0
                   release-script calls (INFO commandstats: N plus the pods'
                   heartbeats). Control: a scope with a concurrency rule,
                   whose release does book, must show N release calls.
  fifo_head_only   another admitd holds the only lease of a min_delay key;
                   100 waiters queue on it in admitd A. During a 2 s window A
                   sends about 2 s / concurrency_retry acquire-script calls
                   (the head's retries), not 100 times that.
"""

import argparse
import csv
import hashlib
import io
import json
import math
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)

from tests.integ.harness import Admitd, RedisServer  # noqa: E402

LOADGEN = os.environ.get("ADMITD_LOADGEN") or os.path.join(HERE, "loadgen")
RESULTS = os.path.join(HERE, "results", "latest.json")

# Huge budgets: every call admits, so the ceiling and the daemon do the same
# work (a refusal is cheaper and would flatter whoever got refused).
BENCH_SCOPE = """
[scope bench]
rule = requests token-bucket 1000000000/1s
quota = 100000/100ms
timeout = 1s
"""
NOREL_SCOPE = """
[scope norel]
rule = requests token-bucket 1000000000/1s
"""
BOOKS_SCOPE = """
[scope books]
rule = requests token-bucket 1000000000/1s
rule = concurrency 1000000
"""
# redis-benchmark -r: __rand_int__ becomes 12 digits below this. It is read
# with atoi: 10**12 overflows to 0 and every call would get the same id.
RAND_KEYSPACE = 10 ** 9
FIFO_RETRY_MS = 50
FIFO_SCOPE = """
[scope fifo]
min_delay = 100ms
concurrency_retry = %dms
timeout = 30s
""" % FIFO_RETRY_MS
FIFO_WAITERS = 100
FIFO_WINDOW_S = 2.0


def log(msg):
    sys.stderr.write("bench: %s\n" % msg)
    sys.stderr.flush()


# ------------------------------------------------------------- scripts ----


def _lines_of(path):
    with open(path, "rb") as fh:
        data = fh.read()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return b"".join(line + b"\n" for line in lines)


def embedded_script(name):
    """The exact bytes gen_scripts.sh builds for scripts/NAME.lua (sed adds a
    newline to a last line that lacks one)."""
    libdir = os.path.join(REPO, "scripts", "lib")
    libs = sorted(os.path.join(libdir, f) for f in os.listdir(libdir) if f.endswith(".lua"))
    return b"".join(_lines_of(f) for f in libs + [os.path.join(REPO, "scripts", name + ".lua")])


def sha1(data):
    return hashlib.sha1(data).hexdigest()


# ------------------------------------------------------------- monitor ----

_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


class Monitor:
    """A MONITOR connection read by a thread. calls[i] = (CMD, first arg, all args).

    mark() sends ECHO of a unique token on another connection and returns
    once the monitor has seen it: its index orders it exactly against every
    command Redis ran, so counts between two marks are exact (no sleeps)."""

    def __init__(self, redis):
        self.redis = redis
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(redis.sock_path)
        self.sock.sendall(b"MONITOR\r\n")
        self.calls = []
        self.marks = {}
        self.cond = threading.Condition()
        self.closed = False
        self.seq = 0
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        buf = b""
        while True:
            try:
                d = self.sock.recv(1 << 16)
            except OSError:
                d = b""
            if not d:
                break
            buf += d
            *lines, buf = buf.split(b"\r\n")
            with self.cond:
                for raw in lines:
                    args = _QUOTED.findall(raw.decode("utf-8", "replace"))
                    if not args:
                        continue
                    cmd = args[0].upper()
                    first = args[1] if len(args) > 1 else ""
                    if cmd == "ECHO" and first.startswith("bench-mark-"):
                        self.marks[first] = len(self.calls)
                    self.calls.append((cmd, first, args))
                self.cond.notify_all()
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def mark(self, timeout=10.0):
        self.seq += 1
        token = "bench-mark-%d" % self.seq
        self.redis.command("ECHO", token)
        with self.cond:
            if not self.cond.wait_for(lambda: token in self.marks or self.closed, timeout):
                raise AssertionError("MONITOR did not show %s" % token)
            return self.marks[token]

    def between(self, a, b):
        with self.cond:
            return list(self.calls[a:b])

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)


def evalsha_count(calls, sha=None, exclude=()):
    return sum(1 for c, a, _ in calls
               if c == "EVALSHA" and (sha is None or a == sha) and a not in exclude)


def evalsha_stats(redis):
    """INFO commandstats for EVALSHA: {"calls", "failed_calls", "rejected_calls"}."""
    info = redis.command("INFO", "commandstats")
    m = re.search(r"cmdstat_evalsha:(\S+)", info)
    out = {"calls": 0, "failed_calls": 0, "rejected_calls": 0}
    if m:
        for kv in m.group(1).split(","):
            k, _, v = kv.partition("=")
            if k in out:
                out[k] = int(v)
    return out


def commandstats_evalsha(redis):
    return evalsha_stats(redis)["calls"]


# ---------------------------------------------------------- processes ----


def status(daemon):
    c = daemon.connect()
    try:
        return c.request({"op": "status"})
    finally:
        c.close()
        daemon._conns.remove(c)


def wait_for(cond, deadline, what):
    end = time.monotonic() + deadline
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.02)


def loadgen(sock, scope, conns, keys=0, seconds=3.0, warmup=0.5, pairs=0, timeout_ms=1000):
    cmd = [LOADGEN, "-s", sock, "-S", scope, "-c", str(conns), "-k", str(keys),
           "-d", str(seconds), "-w", str(warmup), "-t", str(timeout_ms)]
    if pairs:
        cmd += ["-n", str(pairs)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + warmup + 60)
    if not r.stdout.strip():
        raise AssertionError("loadgen printed nothing (exit %d): %s" % (r.returncode, r.stderr))
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["exit"] = r.returncode
    out["problems"] = loadgen_problems(out, r.stderr)
    return out


def loadgen_problems(out, stderr):
    """What makes a loadgen run not a clean measurement (reported, and fails the run)."""
    p = []
    if out["exit"] != 0:
        p.append("loadgen exit %d: %s" % (out["exit"], stderr.strip()[:200]))
    if out["errors"]:
        p.append("refused/failed acquires: %s" % out["errors"])
    if out["release_errors"]:
        p.append("%d failed releases" % out["release_errors"])
    if out["backend"]["fallback"] or out["backend"]["other"]:
        p.append("replies not from the expected backend: %s" % out["backend"])
    return p


def redis_benchmark(redis, conns, n, command, keyspace=None):
    cmd = ["redis-benchmark", "-s", redis.sock_path, "-c", str(conns), "-n", str(n),
           "-P", "1", "--csv"]
    if keyspace:
        cmd += ["-r", str(keyspace)]
    r = subprocess.run(cmd + list(command), capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError("redis-benchmark failed: %s" % r.stderr)
    rows = list(csv.reader(io.StringIO(r.stdout)))
    head = rows[0]
    row = rows[-1]
    d = dict(zip(head, row))
    return {"rps": float(d["rps"]), "p50_us": float(d["p50_latency_ms"]) * 1000,
            "p99_us": float(d["p99_latency_ms"]) * 1000, "n": n}


# ------------------------------------------------------------ capture ----


def capture_acquire_argv(mon, daemon, sha_acq):
    """The EVALSHA argv admitd sends for one acquire on scope bench, key k0."""
    a = mon.mark()
    c = daemon.connect()
    r = c.request({"op": "acquire", "scope": "bench", "key": "k0", "timeout_ms": 1000})
    if not r.get("ok") or r.get("backend") != "redis":
        raise AssertionError("capture acquire failed: %r" % r)
    c.request({"op": "release", "lease": r["lease"]})
    c.close()
    daemon._conns.remove(c)
    calls = [args for cmd, first, args in mon.between(a, mon.mark())
             if cmd == "EVALSHA" and first == sha_acq]
    if len(calls) != 1:
        raise AssertionError("expected 1 acquire EVALSHA, saw %d" % len(calls))
    argv = calls[0]
    nkeys = int(argv[2])
    lease_at = 3 + nkeys
    lease = argv[lease_at]
    # A fresh lease id per call, same length: redis-benchmark fills
    # __rand_int__ with 12 digits (ZADD of distinct members, as in real use).
    argv = list(argv)
    argv[lease_at] = lease[:len(lease) - 12] + "__rand_int__"
    # The last ARGV is not_after, a Redis time just past the daemon's own
    # timeout for that one call: replayed later it would make every ceiling
    # call stop early as stale. 0 disables it (the check itself still runs).
    argv[-1] = "0"
    return argv


# -------------------------------------------------------------- counts ----


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
    ok = (norel["sent"] == n and norel["admitted"] == n and norel["acquire_calls"] == n
          and norel["release_calls"] == 0
          and n <= norel["commandstats_evalsha_delta"] <= n + norel["other_evalsha"])
    ok_ctl = books["acquire_calls"] == n and books["release_calls"] == n
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
    return out


# -------------------------------------------------------- throughput ----


def summarize(vals):
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "runs": vals}


def calibrate(redis, conns, command, seconds, keyspace=None):
    """-n for about `seconds` of redis-benchmark."""
    r = redis_benchmark(redis, conns, 20000, command, keyspace)
    return max(20000, int(r["rps"] * seconds))


def ceiling_run(redis, conns, n, argv, problems):
    """One redis-benchmark run of the acquire script; every call must have run
    the script to the end and admitted (or it measured something cheaper)."""
    before = evalsha_stats(redis)
    t0 = time.monotonic()
    r = redis_benchmark(redis, conns, n, argv, keyspace=RAND_KEYSPACE)
    # The two idle redis-mode pods each send one heartbeat EVALSHA a second.
    beats = 2 * (math.ceil(time.monotonic() - t0) + 1)
    after = evalsha_stats(redis)
    d = {k: after[k] - before[k] for k in after}
    if not n <= d["calls"] <= n + beats or d["failed_calls"] or d["rejected_calls"]:
        problems.append("ceiling: %d EVALSHA sent, commandstats says %s" % (n, d))
    one = [a.replace("__rand_int__", "999999999999") for a in argv[1:]]
    reply = redis.command("EVALSHA", *one)
    if not reply or reply[0] != 1:
        problems.append("ceiling: the script refused right after the run: %r" % (reply,))
    return r


def run_throughput(args, redis, pod_a, local, ceil_argv, problems):
    conns = args.conns
    n_acq = calibrate(redis, conns, ceil_argv, args.seconds, keyspace=RAND_KEYSPACE)
    n_ping = calibrate(redis, conns, ["PING"], args.seconds / 2)
    runs = {k: [] for k in ("ceiling.acquire", "ceiling.ping", "redis.spread",
                            "redis.hot", "local.spread")}
    def daemon_run(name, d, keys, rep):
        before = evalsha_stats(redis)
        lg = loadgen(d.sock_path, "bench", conns, keys=keys, seconds=args.seconds,
                     warmup=args.warmup)
        after = evalsha_stats(redis)
        if after["failed_calls"] != before["failed_calls"]:
            lg["problems"].append("%d EVALSHA failed in Redis"
                                  % (after["failed_calls"] - before["failed_calls"]))
        want = "local" if d is local else "redis"
        if lg["backend"][want] != lg["admitted"]:
            lg["problems"].append("not every reply said backend %s: %s" % (want, lg["backend"]))
        problems.extend("%s rep %d: %s" % (name, rep + 1, p) for p in lg["problems"])
        runs[name].append(lg)

    loadavg = []
    for rep in range(args.reps):
        log("repetition %d/%d" % (rep + 1, args.reps))
        # The ceiling brackets the redis-mode runs (before and after; their
        # mean is this repetition's denominator), so a neighbour's load that
        # comes and goes hits both sides of the ratio alike.
        before = ceiling_run(redis, conns, n_acq, ceil_argv, problems)
        daemon_run("redis.spread", pod_a, conns, rep)
        daemon_run("redis.hot", pod_a, 1, rep)
        after = ceiling_run(redis, conns, n_acq, ceil_argv, problems)
        runs["ceiling.acquire"].append({
            "rps": (before["rps"] + after["rps"]) / 2, "bracket": [before["rps"], after["rps"]],
            "p50_us": (before["p50_us"] + after["p50_us"]) / 2,
            "p99_us": (before["p99_us"] + after["p99_us"]) / 2})
        runs["ceiling.ping"].append(redis_benchmark(redis, conns, n_ping, ["PING"]))
        daemon_run("local.spread", local, conns, rep)
        loadavg.append(os.getloadavg()[0])
    res = {"conns": conns, "seconds": args.seconds, "reps": args.reps,
           "redis_benchmark_n": {"acquire": n_acq, "ping": n_ping}, "loadavg_1m": loadavg}
    for k in ("ceiling.acquire", "ceiling.ping"):
        res[k] = {"calls_per_s": summarize([r["rps"] for r in runs[k]]),
                  "p50_us": statistics.median(r["p50_us"] for r in runs[k]),
                  "p99_us": statistics.median(r["p99_us"] for r in runs[k])}
    for k in ("redis.spread", "redis.hot", "local.spread"):
        res[k] = {"pairs_per_s": summarize([r["pairs_per_s"] for r in runs[k]]),
                  "acquire_p50_us": statistics.median(r["acquire_us"]["p50"] for r in runs[k]),
                  "acquire_p99_us": statistics.median(r["acquire_us"]["p99"] for r in runs[k]),
                  "pair_p50_us": statistics.median(r["pair_us"]["p50"] for r in runs[k]),
                  "pair_p99_us": statistics.median(r["pair_us"]["p99"] for r in runs[k]),
                  "keys": runs[k][0]["keys"]}
    ceil = [r["rps"] for r in runs["ceiling.acquire"]]
    for k in ("redis.spread", "redis.hot"):
        ratios = [lg["pairs_per_s"] / c for lg, c in zip(runs[k], ceil)]
        res[k]["ratio_to_ceiling"] = summarize([round(x, 3) for x in ratios])
        res[k]["ratio_of_medians"] = round(res[k]["pairs_per_s"]["median"]
                                           / res["ceiling.acquire"]["calls_per_s"]["median"], 3)
    res["ceiling.acquire"]["brackets"] = [r["bracket"] for r in runs["ceiling.acquire"]]
    return res


# --------------------------------------------------------------- output ----


def throughput_table(t):
    rows = [("what", "unit", "median", "min", "max", "ratio", "p50 us", "p99 us")]

    def fmt(x):
        return "%.0f" % x

    for k, unit in (("ceiling.acquire", "calls/s"), ("ceiling.ping", "calls/s")):
        s = t[k]["calls_per_s"]
        rows.append((k, unit, fmt(s["median"]), fmt(s["min"]), fmt(s["max"]), "",
                     fmt(t[k]["p50_us"]), fmt(t[k]["p99_us"])))
    for k in ("redis.spread", "redis.hot", "local.spread"):
        s = t[k]["pairs_per_s"]
        r = t[k].get("ratio_to_ceiling")
        rows.append(("%s (%d key%s)" % (k, t[k]["keys"], "s" if t[k]["keys"] > 1 else ""),
                     "pairs/s", fmt(s["median"]), fmt(s["min"]), fmt(s["max"]),
                     "%.2f [%.2f-%.2f]" % (r["median"], r["min"], r["max"]) if r else "-",
                     fmt(t[k]["acquire_p50_us"]), fmt(t[k]["acquire_p99_us"])))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r))
             for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    return lines


def table(res):
    lines = throughput_table(res["throughput"]) if "throughput" in res else []
    c = res["counts"]
    nr = c["release_no_rtt"]["requests_only"]
    ctl = c["release_no_rtt"]["control_concurrency_rule"]
    f = c["fifo_head_only"]
    lines += [
        "",
        "counts (asserted):",
        "  release_no_rtt  %s: %d pairs -> %d acquire calls, %d release calls "
        "(commandstats evalsha +%d, incl. %d heartbeats); control (concurrency rule): "
        "%d release calls"
        % ("ok" if c["release_no_rtt"]["ok"] else "VIOLATED", nr["pairs"], nr["acquire_calls"],
           nr["release_calls"], nr["commandstats_evalsha_delta"], nr["other_evalsha"],
           ctl["release_calls"]),
        "  fifo_head_only  %s: %d waiters, %.1fs -> %d acquire calls (head's retries "
        "~%.0f, allowed %s; every waiter polling would be ~%d)"
        % ("ok" if f["ok"] else "VIOLATED", f["waiters"], f["window_s"], f["acquire_calls"],
           f["expected_head_retries"], f["allowed"], f["if_every_waiter_polled"]),
    ]
    return "\n".join(lines)


def machine():
    try:
        rv = subprocess.run(["redis-server", "--version"], capture_output=True,
                            text=True).stdout.strip()
    except OSError:
        rv = "?"
    return {"cpus": os.cpu_count(), "platform": platform.platform(),
            "loadavg": os.getloadavg(), "redis": rv, "python": platform.python_version()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=int(os.environ.get("BENCH_REPS", "5")))
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("BENCH_SECONDS", "3")))
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--conns", type=int, default=int(os.environ.get("BENCH_CONNS", "16")))
    ap.add_argument("--counts-only", action="store_true", help="skip the throughput part")
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args()
    for exe in (os.path.join(REPO, "daemon", "admitd"), LOADGEN):
        if not os.access(exe, os.X_OK):
            sys.exit("bench: %s is missing: run `make bench`" % exe)

    # The harness's temp dirs, under tests/bench/results/tmp unless told
    # otherwise: on a shared box, /tmp/integ.*, /tmp/admitd-* and /tmp/redis-*
    # were swept by something else while a run was using them.
    os.environ.setdefault("ADMITD_TEST_TMPDIR", os.path.join(os.path.dirname(args.out), "tmp"))
    problems = []
    shas = (sha1(embedded_script("acquire")), sha1(embedded_script("release")))
    conf = BENCH_SCOPE + NOREL_SCOPE + BOOKS_SCOPE + FIFO_SCOPE
    t_start = time.monotonic()
    redis = RedisServer().start()
    started = []
    mon = None
    clean = False
    try:
        redis.command("SCRIPT", "FLUSH")
        pod_a = Admitd(conf, redis_url=redis.url).start()
        started.append(pod_a)
        pod_b = Admitd(conf, redis_url=redis.url).start()
        started.append(pod_b)
        local = Admitd(conf).start()
        started.append(local)
        for d in (pod_a, pod_b):
            wait_for(lambda d=d: status(d)["backend"] == "redis", 10, "admitd to use redis")
        # The scripts the daemon loaded are byte for byte the ones we build.
        exists = redis.command("SCRIPT", "EXISTS", *shas)
        if exists != [1, 1]:
            raise AssertionError("the daemon's scripts are not scripts/lib + scripts/*.lua "
                                 "as gen_scripts.sh builds them (SCRIPT EXISTS %s)" % exists)
        mon = Monitor(redis)
        ceil_argv = capture_acquire_argv(mon, pod_a, shas[0])
        log("ceiling command: %s" % " ".join(ceil_argv))
        counts = run_counts(redis, mon, pod_a, pod_b, shas, problems)
        mon.close()
        mon = None
        res = {"machine": machine(), "counts": counts,
               "ceiling_command": ceil_argv, "scopes": conf.strip()}
        if not args.counts_only:
            redis.command("FLUSHALL")
            res["throughput"] = run_throughput(args, redis, pod_a, local, ceil_argv, problems)
        res["problems"] = problems
        res["elapsed_s"] = round(time.monotonic() - t_start, 1)
        clean = True
    finally:
        if mon is not None:
            mon.close()
        # After a failure: kill, keep the logs (the harness prints where).
        for d in started:
            d.cleanup(failed=not clean)
        redis.cleanup(failed=not clean)

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
        f.write("\n")
    print(table(res))
    print("\nresults: %s (%.0fs)" % (os.path.relpath(args.out), res["elapsed_s"]))
    if problems:
        print("\nPROBLEMS:\n  " + "\n  ".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
