#!/usr/bin/env python3
"""run.py - admitd's benchmark: one run, one table, one picture, measuring
admitd against what a user would use instead, plus two Redis call counts
that must hold. Stdlib only (the peers bring their own). `make bench` runs it.

Owns: one process tree per run (one redis-server on a Unix socket in a temp
dir, admitd in redis mode (pod A), a second one for the FIFO count (pod B),
admitd in local mode, tests/bench/echo, and the load: redis-benchmark,
tests/bench/loadgen, tests/bench/peers/rlf.js, tests/bench/peers/
limits_bench.py), the measurements, the table on stdout, and
tests/bench/results/ (latest.json, table.md, bench.png and its data).

Throughput (timings: reported, never asserted), every row repeated --reps
times, interleaved (each repetition runs every row once), quoted as the
median with min and max. The unit is admissions/s: one acquire+release pair
for admitd, one script call for a ceiling, one consume()/hit() for a peer.
  ceiling   redis-benchmark, 64 connections, EVALSHA of tests/bench/bucket.lua
            (a plain token bucket: TIME, HMGET, HSET, PEXPIRE on one hash per
            key): random keys -P 1 and -P 16, one hot key -P 16; and for
            context the daemon's own acquire script (scripts/lib + acquire.lua
            with the KEYS/ARGV admitd sent, captured with MONITOR), random keys
            -P 16.
  echo      tests/bench/echo (a fixed reply per request line) driven by the
            loadgen at 16 connections: the cost of the Unix-socket round trips
            alone, in round trips/s (a pair is two).
  admitd    loadgen -> admitd local / admitd on Redis, at each of --conns
            connections, distinct keys (one per connection) and one hot key,
            on scope `tb` (one rule, requests token-bucket 1000000/1s: every
            call admits, a refusal would be cheaper work).
  topology  the same admitd rows (distinct keys and one hot key, at each of
            --topo-conns connections) with admitd on a 3-master Redis Cluster
            (redis+cluster://, tests/integ/redis_deploy.py) and on a TLS
            redis-server (rediss://, a CA and certificate made with openssl),
            each with its own pod; a line after the table gives each row's
            ratio to the matching plain-Redis row (the goal: within 20%).
            Redis calls and CPU are summed over the cluster's nodes. Skipped
            with a row saying why when the daemon or the box cannot (--topologies
            "" skips them).
  peers     rate-limiter-flexible (npm, on ioredis; `npm ci` from the
            committed package-lock.json into tests/bench/peers/node_modules)
            and Debian's python3-limits (RedisStorage, --limits-strategy),
            --peer-conc loops/threads, distinct keys and one hot key, against
            the same Redis. Skipped with a row saying why when node/npm or the
            package is missing.
  columns   ratio to the matching ceiling (distinct -> bucket.lua random
            -P 16, hot -> bucket.lua hot -P 16, admitd local -> echo pairs/s),
            ratio to rate-limiter-flexible (same keys), p50/p99 latency
            (admitd: acquire, from the loadgen's clock; ceilings: per call,
            from redis-benchmark; peers: per consume/hit), admitd's CPU per
            request (/proc/PID/stat utime+stime over the run / requests),
            Redis EVALSHA calls and Redis CPU per admission (INFO
            commandstats and /proc deltas).
  callgrind admitd local under valgrind --tool=callgrind serving a fixed
            number of pairs (16 connections): instructions per acquire+release
            pair, the difference of two runs (BASE and BASE+--callgrind-pairs
            pairs) so that start-up and shutdown cancel out. Repeatable where
            timings are not.
  redis     redis instructions per admission (tests/bench/redis_cost.py):
  cost      redis-server under callgrind serving a fixed number of
            admissions, 16 deep over 64 keys, for bucket.lua,
            rate-limiter-flexible's own script, admitd's acquire alone and in
            batches of 8 and 32 (the daemon's library, FUNCTION DUMP; its
            captured acquire). Repeatable where Redis CPU is not; runs with
            --counts-only too (--redis-cost 0 skips it).
  goals     the Redis-cost goals, each with its figure and whether it is met
            (goals_lines: Redis CPU and admissions/s against
            rate-limiter-flexible, a one-rule scope against bucket.lua, local
            mode against the echo, Cluster and TLS against plain Redis,
            instructions per pair).
  picture   results/bench.png (gnuplot, tests/bench/plot.py): admissions/s
            against the connection counts measured, and each row's p50 and
            p99 acquire latency at the largest. --publish copies it to
            docs/bench.png. (The latency CDFs at 16 connections, cdf-*.dat,
            stay in results/ as data.)

Counts (asserted; run.py exits 1 when one is violated):
  release_no_rtt   N acquire+release pairs on a scope with only a requests
                   rule: Redis sees at most N acquire-script calls (exactly N
                   with BENCH_REDIS_BATCH=1; fewer when acquires of different
                   keys share a call) and 0 release-script calls (INFO
                   commandstats: those plus the pods' heartbeats). Control: a
                   scope with a concurrency rule, whose release does book,
                   must show N release calls.
  fifo_head_only   another admitd holds the only lease of a min_delay key;
                   100 waiters queue on it in admitd A. During a 2 s window A
                   sends about 2 s / concurrency_retry acquire-script calls
                   (the head's retries), not 100 times that.
  book_ahead       N acquires one after another on one key of the
                   throughput scope (one connection): every one admitted,
                   each either by an acquire-script call or from units an
                   earlier call booked ahead (calls + admitted_ahead = N, by
                   the daemon's counts; Redis saw those calls and the
                   give-backs), and at most N/8 calls (exactly N with
                   BENCH_BOOK_AHEAD=0).
"""

import argparse
import csv
import hashlib
import io
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)

from tests.integ.harness import Admitd, RedisServer  # noqa: E402
from tests.bench import plot as bench_plot  # noqa: E402
from tests.integ import redis_deploy  # noqa: E402
from tests.bench import redis_cost  # noqa: E402

ADMITD = os.environ.get("ADMITD_BIN") or os.path.join(REPO, "daemon", "admitd")
LOADGEN = os.environ.get("ADMITD_LOADGEN") or os.path.join(HERE, "loadgen")
ECHO = os.path.join(HERE, "echo")
BUCKET_LUA = os.path.join(HERE, "bucket.lua")
PEERS = os.path.join(HERE, "peers")
# Debian's python3-limits lives in /usr/bin/python3's dist-packages, which a
# pyenv `python3` on PATH does not see.
LIMITS_PYTHON = os.environ.get("LIMITS_PYTHON") or (
    "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable)
RESULTS_DIR = os.path.join(HERE, "results")
RESULTS = os.path.join(RESULTS_DIR, "latest.json")
DOCS_PNG = os.path.join(REPO, "docs", "bench.png")

# The throughput scope: one token bucket so large that every call admits.
TB_SCOPE = """
[scope tb]
rule = requests token-bucket 1000000/1s
timeout = 5s
"""
TB_RATE = 1000000
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
CEIL_CONNS = 64      # redis-benchmark clients
ECHO_CONNS = 16
CDF_CONNS = 16       # the latency distribution in the picture
LG_TIMEOUT_MS = 5000


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


SCRIPT_CMDS = ("EVALSHA", "FCALL")


def evalsha_count(calls, sha=None, exclude=()):
    """Script calls (EVALSHA by SHA or FCALL by function name; sha and
    exclude name scripts as sets of both ids)."""
    return sum(1 for c, a, _ in calls
               if c in SCRIPT_CMDS and (sha is None or a in sha)
               and not any(a in x for x in exclude))


def evalsha_stats(redis):
    """INFO commandstats for the script calls, EVALSHA and FCALL summed:
    {"calls", "failed_calls", "rejected_calls"}."""
    info = redis.command("INFO", "commandstats")
    out = {"calls": 0, "failed_calls": 0, "rejected_calls": 0}
    for m in re.finditer(r"cmdstat_(?:evalsha|fcall):(\S+)", info):
        for kv in m.group(1).split(","):
            k, _, v = kv.partition("=")
            if k in out:
                out[k] += int(v)
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


def loadgen(sock, scope, conns, keys=0, seconds=3.0, warmup=0.5, pairs=0, timeout_ms=1000,
            cdf=None, oneshot=False):
    cmd = [LOADGEN, "-s", sock, "-S", scope, "-c", str(conns), "-k", str(keys),
           "-d", str(seconds), "-w", str(warmup), "-t", str(timeout_ms)]
    if oneshot:
        cmd += ["-1"]
    if pairs:
        cmd += ["-n", str(pairs)]
    if cdf:
        cmd += ["-H", cdf]
    r = subprocess.run(cmd, capture_output=True, text=True,
                       timeout=seconds + warmup + 60 + (pairs / 100 if pairs else 0))
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
    if out.get("unheld"):
        p.append("%d releases answered held:false" % out["unheld"])
    if out["backend"]["fallback"] or out["backend"]["other"]:
        p.append("replies not from the expected backend: %s" % out["backend"])
    return p


def redis_benchmark(redis, conns, n, command, keyspace=None, pipeline=1):
    cmd = ["redis-benchmark", "-s", redis.sock_path, "-c", str(conns), "-n", str(n),
           "-P", str(pipeline), "--csv"]
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


def capture_acquire_argv(mon, daemon, sha_acq, scope="tb", key="k0"):
    """The EVALSHA argv admitd sends for one acquire on SCOPE/KEY, made into a
    redis-benchmark command: every key random, a fresh lease id per call (a
    plain acquire carries none)."""
    a = mon.mark()
    c = daemon.connect()
    r = c.request({"op": "acquire", "scope": scope, "key": key, "timeout_ms": 1000})
    if not r.get("ok") or r.get("backend") != "redis":
        raise AssertionError("capture acquire failed: %r" % r)
    c.request({"op": "release", "lease": r["lease"]})
    c.close()
    daemon._conns.remove(c)
    calls = [args for cmd, first, args in mon.between(a, mon.mark())
             if cmd in SCRIPT_CMDS and first in sha_acq]
    if len(calls) != 1:
        raise AssertionError("expected 1 acquire EVALSHA, saw %d" % len(calls))
    argv = list(calls[0])
    nkeys = int(argv[2])
    tag = "{%s:%s}" % (scope, key)
    for i in range(3, 3 + nkeys):
        if tag not in argv[i]:
            raise AssertionError("acquire key %r lacks the hash tag %s" % (argv[i], tag))
        # Random keys, like the plain script's ceiling (redis-benchmark draws
        # each __rand_int__ on its own: the keys of one call differ, which a
        # single Redis does not mind).
        argv[i] = argv[i].replace(tag, "{%s:__rand_int__}" % scope)
    if argv[3 + nkeys] == "=":
        # A plain acquire: '=', one group ('p', its params, not_after, 1)
        # and its cost; an 'a' group (a bucket that may book ahead) adds
        # extra and give, replayed as 0 (a random key has no units ahead).
        # No lease id. not_after: as below.
        group = argv[5 + nkeys] if len(argv) > 5 + nkeys else None
        want = {"p": 12, "a": 14}.get(group)
        if argv[4 + nkeys] != "1" or want is None or len(argv) != 3 + nkeys + want:
            raise AssertionError("unexpected plain acquire argv %r" % argv)
        argv[3 + nkeys + 9] = "0"
        if group == "a":
            argv[-2:] = ["0", "0"]
        return argv
    lease_at = 3 + nkeys
    lease = argv[lease_at]
    # A fresh lease id per call, same length: redis-benchmark fills
    # __rand_int__ with 12 digits.
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


# -------------------------------------------------------- measurements ----


def summarize(vals):
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "runs": vals}


def proc_cpu_s(pid):
    """utime + stime of a live process, seconds (/proc/PID/stat fields 14, 15)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_s():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


_CMDSTAT = re.compile(r"^cmdstat_([^:]+):(\S+?)\r?$", re.M)


def commandstats(redis):
    """{command: {"calls", "failed_calls", ...}} from INFO commandstats."""
    out = {}
    for name, kvs in _CMDSTAT.findall(redis.command("INFO", "commandstats")):
        out[name] = {k: float(v) for k, _, v in (kv.partition("=") for kv in kvs.split(","))}
    return out


class Sample:
    """Redis commandstats, Redis CPU, a server's CPU and the children's CPU
    around one measured run."""

    def __init__(self, redis, server_pid=None):
        # redis: one RedisServer, or a list (a cluster's nodes: summed)
        self.servers = list(redis) if isinstance(redis, (list, tuple)) else [redis]
        self.server_pid = server_pid
        self.cs = self._cs()
        self.rcpu = self._cpu()
        self.scpu = proc_cpu_s(server_pid) if server_pid else None
        self.ccpu = children_cpu_s()

    def _cs(self):
        out = {}
        for srv in self.servers:
            for cmd, kv in commandstats(srv).items():
                acc = out.setdefault(cmd, {})
                for k, v in kv.items():
                    acc[k] = acc.get(k, 0) + v
        return out

    def _cpu(self):
        return sum(proc_cpu_s(srv.proc.pid) for srv in self.servers)

    def done(self, admissions, requests=None):
        cs = self._cs()
        rcpu = self._cpu()
        ccpu = children_cpu_s()

        def delta(cmd, field="calls"):
            return cs.get(cmd, {}).get(field, 0) - self.cs.get(cmd, {}).get(field, 0)

        cmds = sum(delta(c) for c in cs if c != "info")
        adm = max(admissions, 1)
        d = {
            "admissions": admissions,
            "evalsha": delta("evalsha") + delta("fcall"),
            "evalsha_failed": delta("evalsha", "failed_calls") + delta("fcall", "failed_calls"),
            "redis_commands": cmds,
            "redis_calls_per_adm": (delta("evalsha") + delta("fcall")) / adm,
            "redis_cmds_per_adm": cmds / adm,
            "redis_cpu_us_per_adm": (rcpu - self.rcpu) * 1e6 / adm,
            "client_cpu_us_per_adm": (ccpu - self.ccpu) * 1e6 / adm,
        }
        if self.server_pid:
            scpu = proc_cpu_s(self.server_pid) - self.scpu
            d["server_cpu_s"] = scpu
            d["server_cpu_us_per_req"] = scpu * 1e6 / max(requests or admissions, 1)
        return d


class Row:
    """One line of the table: what runs, and its measurements per repetition."""

    def __init__(self, rid, label, kind, conns, keys, unit="adm/s", **kw):
        self.id, self.label, self.kind, self.conns, self.keys = rid, label, kind, conns, keys
        self.unit = unit
        self.kw = kw
        self.runs = []
        self.skipped = None
        self.ceiling = None   # id of the matching ceiling row
        self.peer = None      # id of the rate-limiter-flexible row
        self.cdfs = []        # per repetition (CDF_CONNS rows)


def build_rows(args):
    rows = [
        Row("ceil.bucket.rand.p1", "ceiling bucket.lua rand -P1", "ceiling", CEIL_CONNS,
            "distinct", script="bucket", pipeline=1),
        Row("ceil.bucket.rand.p16", "ceiling bucket.lua rand -P16", "ceiling", CEIL_CONNS,
            "distinct", script="bucket", pipeline=16),
        Row("ceil.bucket.hot.p16", "ceiling bucket.lua hot -P16", "ceiling", CEIL_CONNS, "hot",
            script="bucket", pipeline=16),
        Row("ceil.acquire.rand.p16", "ceiling acquire.lua rand -P16", "ceiling", CEIL_CONNS,
            "distinct", script="admitd", pipeline=16),
        Row("echo", "unix echo", "echo", ECHO_CONNS, "distinct", unit="rt/s"),
        # One client, no load: the latency goal's terms (acquire p50 at one
        # connection against these two p50s).
        Row("ceil.bucket.rand.p1.c1", "ceiling bucket.lua rand -P1", "ceiling", 1,
            "distinct", script="bucket", pipeline=1),
        Row("echo.c1", "unix echo", "echo", 1, "distinct", unit="rt/s"),
    ]
    for mode in ("local", "redis"):
        for keys in ("distinct", "hot"):
            for c in args.conns:
                rows.append(Row("admitd.%s.%s.c%d" % (mode, keys, c), "admitd %s %s" % (mode, keys),
                                "admitd", c, keys, mode=mode))
    # One-shot: "lease": false, no release; one round trip an admission, as
    # rate-limiter-flexible's consume is one call.
    c = 64 if 64 in args.conns else max(args.conns)
    for mode in ("local", "redis"):
        for keys in ("distinct", "hot"):
            rows.append(Row("admitd.%s.%s.oneshot.c%d" % (mode, keys, c),
                            "admitd %s %s one-shot" % (mode, keys), "admitd", c, keys,
                            mode=mode, oneshot=True))
    for mode in args.topologies:
        for keys in ("distinct", "hot"):
            for c in args.topo_conns:
                rows.append(Row("admitd.%s.%s.c%d" % (mode, keys, c), "admitd %s %s" % (mode, keys),
                                "admitd", c, keys, mode=mode,
                                base="admitd.redis.%s.c%d" % (keys, c)))
    for keys in ("distinct", "hot"):
        rows.append(Row("rlf.%s" % keys, "rate-limiter-flexible %s" % keys, "rlf",
                        args.peer_conc, keys))
    for keys in ("distinct", "hot"):
        rows.append(Row("limits.%s" % keys, "limits %s %s" % (args.limits_strategy, keys),
                        "limits", args.peer_conc, keys))
    for r in rows:
        if r.kind == "echo":
            continue
        if r.kind == "admitd" and r.kw["mode"] == "local":
            r.ceiling = "echo"
        elif r.id not in ("ceil.bucket.rand.p16", "ceil.bucket.hot.p16"):
            r.ceiling = "ceil.bucket.hot.p16" if r.keys == "hot" else "ceil.bucket.rand.p16"
        if r.kind != "rlf":
            r.peer = "rlf.%s" % r.keys
    return rows


def select_rows(rows, regex):
    """The rows whose id matches regex (None: all), with the rows they are
    compared with: their ceiling, their peer and their base."""
    if regex is None:
        return rows
    keep = {r.id for r in rows if re.search(regex, r.id)}
    for r in rows:
        if r.id in keep:
            keep |= {x for x in (r.ceiling, r.peer, r.kw.get("base")) if x}
    return [r for r in rows if r.id in keep]


def admissions_per_s(row, run):
    """The rate compared across rows: the echo's round trips count as pairs."""
    return run["rate"] / 2 if row.kind == "echo" else run["rate"]


def npm_setup():
    """node_modules for the peers from the committed lockfile: None when ready,
    else why the Node peer is skipped."""
    if not shutil.which("node") or not shutil.which("npm"):
        return "skipped: no node/npm (apt-get install nodejs npm)"
    lock = os.path.join(PEERS, "package-lock.json")
    with open(lock, "rb") as f:
        want = sha1(f.read())
    stamp = os.path.join(PEERS, "node_modules", ".admitd-bench-lock")
    try:
        with open(stamp) as f:
            if f.read().strip() == want:
                return None
    except OSError:
        pass
    log("npm ci in %s" % os.path.relpath(PEERS))
    r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--prefer-offline"], cwd=PEERS,
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return "skipped: npm ci failed: %s" % (r.stderr.strip().splitlines() or ["?"])[-1][:160]
    with open(stamp, "w") as f:
        f.write(want + "\n")
    return None


def limits_setup():
    r = subprocess.run([LIMITS_PYTHON, "-c", "import limits, redis"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        return "skipped: %s has no limits/redis (apt-get install python3-limits python3-redis)" \
            % LIMITS_PYTHON
    return None


class Echo:
    """tests/bench/echo on a socket in a temp dir."""

    def __init__(self, parent):
        self.dir = tempfile.mkdtemp(prefix="echo-", dir=parent)
        self.sock_path = os.path.join(self.dir, "echo.sock")
        self.proc = subprocess.Popen([ECHO, self.sock_path], stdin=subprocess.DEVNULL)
        wait_for(lambda: os.path.exists(self.sock_path), 5, "the echo socket")

    @property
    def pid(self):
        return self.proc.pid

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Bench:
    def __init__(self, args, redis, pod_a, local, echo, acquire_argv, problems, topo=None):
        self.args, self.redis, self.pod_a, self.local, self.echo = args, redis, pod_a, local, echo
        self.problems = problems
        # mode -> (pod, the Redis servers it uses) for the topology rows
        self.topo = topo or {}
        with open(BUCKET_LUA, "rb") as f:
            self.bucket_sha = redis.command("SCRIPT", "LOAD", f.read().decode())
        self.commands = {
            "bucket.distinct": ["EVALSHA", self.bucket_sha, "1", "bench:{__rand_int__}",
                                str(TB_RATE), str(TB_RATE), "1"],
            "bucket.hot": ["EVALSHA", self.bucket_sha, "1", "bench:hot", str(TB_RATE),
                           str(TB_RATE), "1"],
            "admitd.distinct": acquire_argv,
        }
        self.n = {}
        self.cdf_dir = tempfile.mkdtemp(prefix="cdf-", dir=os.environ["ADMITD_TEST_TMPDIR"])

    def note(self, row, rep, what):
        self.problems.append("%s @%d rep %d: %s" % (row.label, row.conns, rep + 1, what))

    def ceiling_command(self, row):
        return self.commands["%s.%s" % (row.kw["script"], row.keys)]

    def calibrate(self, row):
        """redis-benchmark -n for about --seconds of this ceiling."""
        cmd = self.ceiling_command(row)
        r = redis_benchmark(self.redis, row.conns, 20000, cmd,
                            RAND_KEYSPACE if row.keys == "distinct" else None,
                            row.kw["pipeline"])
        self.n[row.id] = max(20000, int(r["rps"] * self.args.seconds))

    def run_ceiling(self, row, rep):
        cmd = self.ceiling_command(row)
        n = self.n[row.id]
        s = Sample(self.redis)
        r = redis_benchmark(self.redis, row.conns, n, cmd,
                            RAND_KEYSPACE if row.keys == "distinct" else None,
                            row.kw["pipeline"])
        d = s.done(n)
        # The redis-mode pods each send one heartbeat EVALSHA a second.
        if not n <= d["evalsha"] <= n * 1.001 + 20 or d["evalsha_failed"]:
            self.note(row, rep, "%d EVALSHA sent, commandstats says %d (%d failed)"
                      % (n, d["evalsha"], d["evalsha_failed"]))
        one = [a.replace("__rand_int__", "999999999999") for a in cmd[1:]]
        reply = self.redis.command(cmd[0], *one)
        if isinstance(reply, list) and "=" in cmd:
            reply = reply[1:]  # the '=' form: the Redis time, then the acquire's own
        if (reply[0] if isinstance(reply, list) else reply) != 1:
            self.note(row, rep, "the script refused right after the run: %r" % (reply,))
        d.update(rate=r["rps"], p50_us=r["p50_us"], p99_us=r["p99_us"], n=n)
        return d

    def run_loadgen(self, row, rep, server, sock, backend, redis=None):
        cdf = None
        oneshot = bool(row.kw.get("oneshot"))
        if row.conns == CDF_CONNS and row.kind in ("admitd", "echo") and not oneshot:
            cdf = os.path.join(self.cdf_dir, "%s.rep%d.dat" % (row.id, rep))
        s = Sample(redis or self.redis, server.pid)
        lg = loadgen(sock, "tb", row.conns, keys=1 if row.keys == "hot" else row.conns,
                     seconds=self.args.seconds, warmup=self.args.warmup,
                     timeout_ms=LG_TIMEOUT_MS, cdf=cdf, oneshot=oneshot)
        # a one-shot admission is one request (no release)
        requests = lg["sent"] + (0 if oneshot else lg["pairs_all"])
        d = s.done(lg["admitted"], requests)
        for p in lg["problems"]:
            self.note(row, rep, p)
        if lg["backend"][backend] != lg["admitted"]:
            self.note(row, rep, "not every reply said backend %s: %s" % (backend, lg["backend"]))
        if backend == "redis" and d["evalsha_failed"]:
            self.note(row, rep, "%d EVALSHA failed in Redis" % d["evalsha_failed"])
        rate = lg["pairs_per_s"] * (2 if row.kind == "echo" else 1)
        d.update(rate=rate, p50_us=lg["acquire_us"]["p50"], p99_us=lg["acquire_us"]["p99"],
                 loadgen=lg, requests=requests, cdf=cdf)
        d["cpu_us_per_req"] = d.pop("server_cpu_us_per_req")
        return d

    def run_peer(self, row, rep):
        a = self.args
        if row.kind == "rlf":
            cmd = ["node", os.path.join(PEERS, "rlf.js"), "--socket", self.redis.sock_path,
                   "--conc", str(row.conns), "--keys", row.keys, "--seconds", str(a.seconds),
                   "--warmup", str(a.warmup), "--points", str(TB_RATE)]
        else:
            cmd = [LIMITS_PYTHON, os.path.join(PEERS, "limits_bench.py"), "--socket",
                   self.redis.sock_path, "--threads", str(row.conns), "--keys", row.keys,
                   "--strategy", a.limits_strategy, "--seconds", str(a.seconds),
                   "--warmup", str(a.warmup), "--limit", "%d/second" % TB_RATE]
        s = Sample(self.redis)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.seconds + 120)
        lines = r.stdout.strip().splitlines()
        out = json.loads(lines[-1]) if lines else {}
        if "skipped" in out:
            row.skipped = "skipped: " + out["skipped"]
            return None
        if r.returncode != 0 or not out:
            self.note(row, rep, "exit %d: %s" % (r.returncode, r.stderr.strip()[-300:]))
            return None
        d = s.done(out["ops_all"])
        if out["errors"] or out["rejected"]:
            self.note(row, rep, "%d errors (%s), %d rejected"
                      % (out["errors"], out["last_error"], out["rejected"]))
        d.update(rate=out["ops_per_s"], p50_us=out["latency_us"]["p50"],
                 p99_us=out["latency_us"]["p99"], peer=out)
        return d

    def run(self, row, rep):
        if row.skipped:
            return
        if row.kind == "ceiling":
            d = self.run_ceiling(row, rep)
        elif row.kind == "echo":
            d = self.run_loadgen(row, rep, self.echo, self.echo.sock_path, "local")
        elif row.kind == "admitd" and row.kw["mode"] in self.topo:
            pod, servers = self.topo[row.kw["mode"]]
            d = self.run_loadgen(row, rep, pod, pod.sock_path, "redis", redis=servers)
        elif row.kind == "admitd":
            local = row.kw["mode"] == "local"
            d = self.run_loadgen(row, rep, self.local if local else self.pod_a,
                                 (self.local if local else self.pod_a).sock_path,
                                 "local" if local else "redis")
        else:
            d = self.run_peer(row, rep)
        if d is not None:
            d["rep"] = rep
            d["loadavg_1m"] = os.getloadavg()[0]
            row.runs.append(d)


def start_topologies(args, conf, rows, objs):
    """For each of --topologies: the deployment and one pod on it, waited
    until it is on Redis. Returns {mode: (pod, [redis servers])}; a
    topology the box or the daemon cannot run marks its rows skipped (with
    why) instead of failing the run. objs collects what to clean up."""
    topo = {}
    for mode in args.topologies:
        why = None
        try:
            if mode == "cluster":
                why = redis_deploy.what_is_missing("cluster")
                if why is None:
                    rc = redis_deploy.RedisClusterDeploy(3)
                    objs.append(rc)
                    rc.start()
                    pod = Admitd(conf, redis_url=rc.url)
                    servers = rc.nodes
            elif mode == "tls":
                why = redis_deploy.what_is_missing("tls")
                if why is None:
                    d = tempfile.mkdtemp(prefix="tls-", dir=os.environ["ADMITD_TEST_TMPDIR"])
                    files = redis_deploy.TlsFiles(d)
                    srv = redis_deploy.TlsRedis(files)
                    objs.append(srv)
                    srv.start()
                    pod = Admitd("[admitd]\nredis_tls_ca_file = %s\n\n%s"
                                 % (files.path("ca.crt"), conf), redis_url=srv.url)
                    servers = [srv]
            else:
                why = "unknown topology %r (cluster, tls)" % mode
            if why is None:
                objs.append(pod)
                pod.start()
                wait_for(lambda: status(pod)["backend"] == "redis", 10,
                         "admitd to use the %s" % mode)
                topo[mode] = (pod, servers)
        except AssertionError as e:
            why = "admitd on %s: %s" % (mode, str(e).strip().splitlines()[-1][:160])
        if why is not None:
            log("topology %s skipped: %s" % (mode, why))
            for r in rows:
                if r.kind == "admitd" and r.kw.get("mode") == mode:
                    r.skipped = "skipped: " + why
    return topo


def run_throughput(args, bench, rows):
    for r in rows:
        if r.kind == "ceiling":
            bench.calibrate(r)
    t0 = time.monotonic()
    for rep in range(args.reps):
        # Interleaved: every row once per repetition; every other repetition
        # in reverse order, so that a drift of the box's load over the run
        # falls on both ends of the table alike.
        order = rows if rep % 2 == 0 else rows[::-1]
        log("repetition %d/%d (%d rows)" % (rep + 1, args.reps, len(rows)))
        for r in order:
            bench.run(r, rep)
        log("repetition %d done, %.0fs so far" % (rep + 1, time.monotonic() - t0))


def median_of(row, key):
    vals = [r[key] for r in row.runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def summarize_rows(rows):
    by_id = {r.id: r for r in rows}
    out = []
    for r in rows:
        d = {"id": r.id, "label": r.label, "kind": r.kind, "conns": r.conns, "keys": r.keys,
             "unit": r.unit, "ceiling": r.ceiling, "peer": r.peer, "params": r.kw}
        if r.skipped or not r.runs:
            d["skipped"] = r.skipped or "no clean run"
            out.append(d)
            continue
        d["rate"] = summarize([x["rate"] for x in r.runs])
        for k in ("p50_us", "p99_us", "cpu_us_per_req", "redis_calls_per_adm",
                  "redis_cmds_per_adm", "redis_cpu_us_per_adm", "client_cpu_us_per_adm"):
            d[k] = median_of(r, k)
        for name, ref_id in (("ratio_ceiling", r.ceiling), ("ratio_rlf", r.peer),
                             ("ratio_redis", r.kw.get("base"))):
            ref = by_id.get(ref_id)
            if ref is None or not ref.runs:
                continue
            refs = {x["rep"]: admissions_per_s(ref, x) for x in ref.runs}
            ratios = [admissions_per_s(r, x) / refs[x["rep"]] for x in r.runs
                      if refs.get(x["rep"])]
            if ratios:
                d[name] = summarize([round(x, 3) for x in ratios])
        d["runs"] = [{k: v for k, v in x.items() if k not in ("loadgen", "peer")}
                     for x in r.runs]
        d["raw"] = [x.get("loadgen") or x.get("peer") for x in r.runs
                    if x.get("loadgen") or x.get("peer")]
        if r.kind == "rlf" or r.kind == "limits":
            d["versions"] = r.runs[0]["peer"].get("versions")
        cdfs = [x for x in r.runs if x.get("cdf")]
        if cdfs:
            # The repetition whose rate is the median: its distribution is plotted.
            mid = sorted(cdfs, key=lambda x: x["rate"])[(len(cdfs) - 1) // 2]
            d["cdf_rep"] = mid["rep"]
            d["_cdf_file"] = mid["cdf"]
        out.append(d)
    return out


# ------------------------------------------------------------ callgrind ----


def _callgrind_top(path, n=12):
    r = subprocess.run(["callgrind_annotate", "--inclusive=no", path], capture_output=True,
                       text=True, timeout=120)
    top = []
    for line in r.stdout.splitlines():
        m = re.match(r"^\s*([\d,]+)\s+\(\s*([\d.]+)%\)\s+(.+?)\s*$", line)
        if m and "PROGRAM TOTALS" not in m.group(3):
            top.append({"ir": int(m.group(1).replace(",", "")), "pct": float(m.group(2)),
                        "function": m.group(3)})
        if len(top) >= n:
            break
    return top


def run_callgrind(args, conf, parent):
    """Instructions per acquire+release pair, admitd local mode, 16 connections."""
    if args.callgrind_pairs <= 0:
        return {"skipped": "skipped: --callgrind-pairs 0"}
    if not shutil.which("valgrind"):
        return {"skipped": "skipped: no valgrind (apt-get install valgrind)"}
    base = args.callgrind_base
    totals = {}
    top = []
    t0 = time.monotonic()
    for pairs in (base, base + args.callgrind_pairs):
        d = tempfile.mkdtemp(prefix="callgrind-", dir=parent)
        sock = os.path.join(d, "admitd.sock")
        conf_path = os.path.join(d, "admitd.conf")
        out = os.path.join(d, "callgrind.out")
        with open(conf_path, "w") as f:
            f.write("[admitd]\nsocket = %s\n\n%s" % (sock, conf))
        err = open(os.path.join(d, "stderr"), "wb")
        proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
                                 ADMITD, "-c", conf_path, "--socket", sock],
                                stdin=subprocess.DEVNULL, stdout=err, stderr=subprocess.STDOUT)
        err.close()
        ok = False
        try:
            def ready():
                if proc.poll() is not None:
                    raise AssertionError("admitd under callgrind exited %s" % proc.returncode)
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.connect(sock)
                    return True
                except OSError:
                    return False
                finally:
                    s.close()
            wait_for(ready, 120, "admitd under callgrind")
            lg = loadgen(sock, "tb", CDF_CONNS, pairs=pairs, timeout_ms=60000)
            if lg["problems"] or lg["pairs_all"] != pairs:
                raise AssertionError("callgrind load: %s, %d pairs" % (lg["problems"],
                                                                     lg["pairs_all"]))
            proc.send_signal(signal.SIGTERM)
            proc.wait(120)
            totals[pairs] = redis_cost.callgrind_total(out)
            if pairs != base:
                top = _callgrind_top(out)
            ok = True
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if ok:
                shutil.rmtree(d, ignore_errors=True)
            else:
                log("callgrind: keeping %s" % d)
    hi = base + args.callgrind_pairs
    return {"mode": "local", "conns": CDF_CONNS, "scope": "tb", "pairs": [base, hi],
            "instructions": [totals[base], totals[hi]],
            "instructions_per_pair": (totals[hi] - totals[base]) / args.callgrind_pairs,
            "top_self_of_the_larger_run": top, "seconds": round(time.monotonic() - t0, 1)}


# ----------------------------------------------------------------- plot ----


def plot(summary, m, out_dir):
    """results/bench.png (tests/bench/plot.py); None when done, else why not. m: the machine."""
    rows = [r for r in summary if "rate" in r]
    title = "admitd benchmark, %s: %s CPUs (%s), Linux %s" % (
        m.get("date", "?"), m.get("cpus"), m.get("cpu_model"), m.get("kernel"))
    return bench_plot.plot(rows, title, os.path.join(out_dir, "bench.png"))


# --------------------------------------------------------------- output ----


def _f(x, nd=0):
    if x is None:
        return "-"
    if nd == 0:
        return "%.0f" % x
    return "%.*f" % (nd, x)


TABLE_HEAD = ("row", "conns", "unit", "median", "min", "max", "/ceiling", "/rlf", "p50 us",
              "p99 us", "admitd cpu us/req", "redis calls/adm", "redis cpu us/adm")


def table_rows(summary):
    out = []
    for r in summary:
        if "rate" not in r:
            out.append((r["label"], str(r["conns"]), r["skipped"]))
            continue
        rc = r.get("ratio_ceiling")
        rl = r.get("ratio_rlf")
        local = r["kind"] == "admitd" and r["params"].get("mode") == "local"
        out.append((
            r["label"], str(r["conns"]), r["unit"], _f(r["rate"]["median"]), _f(r["rate"]["min"]),
            _f(r["rate"]["max"]), _f(rc["median"], 2) if rc else "-",
            _f(rl["median"], 2) if rl else "-", _f(r["p50_us"]), _f(r["p99_us"]),
            _f(r.get("cpu_us_per_req"), 1) if r["kind"] == "admitd" else "-",
            "-" if local or r["kind"] == "echo" else _f(r["redis_calls_per_adm"], 2),
            "-" if local or r["kind"] == "echo" else _f(r["redis_cpu_us_per_adm"], 1)))
    return out


def text_table(summary):
    rows = [TABLE_HEAD] + table_rows(summary)
    full = [r for r in rows if len(r) == len(TABLE_HEAD)]
    w = [max(len(r[i]) for r in full) for i in range(len(TABLE_HEAD))]
    lines = []
    for r in rows:
        if len(r) != len(TABLE_HEAD):
            lines.append("  ".join((r[0].ljust(w[0]), r[1].rjust(w[1]), r[2])))
            continue
        lines.append("  ".join(c.ljust(w[i]) if i in (0, 2) else c.rjust(w[i])
                               for i, c in enumerate(r)))
    lines.insert(1, "-" * len(lines[0]))
    return lines


def markdown_table(summary):
    head = TABLE_HEAD
    lines = ["| " + " | ".join(head) + " |",
             "| " + " | ".join("---" if i in (0, 2) else "---:" for i in range(len(head))) + " |"]
    for r in table_rows(summary):
        if len(r) != len(head):
            r = (r[0], r[1], r[2]) + ("",) * (len(head) - 3)
        lines.append("| " + " | ".join(r) + " |")
    return lines


def topology_lines(summary):
    """Each topology row against the plain-Redis row of the same keys and
    connections (median of the per-repetition ratios)."""
    out = []
    for r in summary:
        rr = r.get("ratio_redis")
        if rr:
            out.append("  %s @%d: %.2fx of admitd redis %s @%d (min %.2f, max %.2f)"
                       % (r["label"], r["conns"], rr["median"], r["keys"], r["conns"],
                          rr["min"], rr["max"]))
    return ["topologies against one plain Redis (goal: within 20%):"] + out if out else []


def callgrind_line(cg):
    if cg is None:
        return None
    if "skipped" in cg:
        return "callgrind: %s" % cg["skipped"]
    return ("callgrind: admitd local, %d conns: %.0f instructions per acquire+release pair "
            "(%d vs %d pairs: %d and %d instructions)"
            % (cg["conns"], cg["instructions_per_pair"], cg["pairs"][1], cg["pairs"][0],
               cg["instructions"][1], cg["instructions"][0]))


def counts_lines(c):
    nr = c["release_no_rtt"]["requests_only"]
    ctl = c["release_no_rtt"]["control_concurrency_rule"]
    f = c["fifo_head_only"]
    return [
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
    ] + ([
        "  book_ahead      %s: %d acquires on one key -> %d acquire calls, %d admitted from "
        "units booked ahead (%.3f calls per admission; %d give-back calls)"
        % ("ok" if c["book_ahead"]["ok"] else "VIOLATED", c["book_ahead"]["acquires"],
           c["book_ahead"]["acquire_calls"], c["book_ahead"]["admitted_ahead"],
           c["book_ahead"]["acquire_calls"] / max(1, c["book_ahead"]["acquires"]),
           c["book_ahead"]["give_back_calls"]),
    ] if "book_ahead" in c else [])


def goals_lines(res):
    """The Redis-cost goals, each with its figure and whether it is met (n/a
    when a row it needs was skipped). Ratios are the table's: medians of the
    per-repetition ratios; CPU ratios are of the medians."""
    t = res.get("throughput")
    rows = {r["id"]: r for r in t["rows"]} if t else {}
    rc = (res.get("redis_cost") or {}).get("rows", {})
    out = ["goals (higher ratios are better):"]

    def med(rid, key):
        v = rows.get(rid, {}).get(key)
        return v.get("median") if isinstance(v, dict) else v

    def ins(name):
        return rc.get(name, {}).get("instructions_per_admission")

    def goal(text, ratio, bound, extra=""):
        state = "n/a" if ratio is None else "met" if ratio >= bound else "NOT met"
        fig = "-" if ratio is None else "%.2fx" % ratio
        out.append("  %-7s %s >= %.2fx: %s%s" % (state, text, bound, fig, extra))

    def ratio(a, b):
        return a / b if a and b else None

    acpu = med("admitd.redis.distinct.c64", "redis_cpu_us_per_adm")
    goal("Redis CPU per admission, distinct @64, rlf's / admitd's",
         ratio(med("rlf.distinct", "redis_cpu_us_per_adm"), acpu), 1.0,
         "" if not ins("rlf") else " (instructions, batches of 32: %.2fx; booking 4 ahead: %.2fx)"
         % (ratio(ins("rlf"), ins("admitd batch 32")) or 0,
            ratio(ins("rlf"), ins("admitd batch 32, 4 ahead")) or 0))
    goal("adm/s distinct @64 against rlf", med("admitd.redis.distinct.c64", "ratio_rlf"), 1.0)
    goal("adm/s one hot key @64 against rlf", med("admitd.redis.hot.c64", "ratio_rlf"), 1.5)
    goal("adm/s distinct @64 against rlf, one-shot (\"lease\": false)",
         med("admitd.redis.distinct.oneshot.c64", "ratio_rlf"), 1.0)
    goal("adm/s one hot key @64 against rlf, one-shot",
         med("admitd.redis.hot.oneshot.c64", "ratio_rlf"), 1.5)
    goal("one-rule scope's Redis CPU, bucket.lua -P16's / admitd's distinct @64",
         ratio(med("ceil.bucket.rand.p16", "redis_cpu_us_per_adm"), acpu), 0.85,
         "" if not ins("bucket.lua") else
         " (instructions: %.2fx in batches of 32, %.2fx alone)"
         % (ratio(ins("bucket.lua"), ins("admitd batch 32")),
            ratio(ins("bucket.lua"), ins("admitd alone"))))
    for keys in ("distinct", "hot"):
        goal("local mode %s @64 against the echo" % keys,
             med("admitd.local.%s.c64" % keys, "ratio_ceiling"), 0.50)
    for mode in ("cluster", "tls"):
        for keys in ("distinct", "hot"):
            goal("%s %s @64 against plain Redis" % (mode, keys),
                 med("admitd.%s.%s.c64" % (mode, keys), "ratio_redis"), 0.80)
    cg = res.get("callgrind") or {}
    ipp = cg.get("instructions_per_pair")
    goal("25,000 / instructions per acquire+release pair (local, callgrind)",
         ratio(25000, ipp), 1.0, "" if not ipp else " (%.0f instructions)" % ipp)
    return out


def report(res):
    lines = []
    t = res.get("throughput")
    if t:
        lines += ["%d repetitions of %gs (+%gs warmup), interleaved; median, min, max"
                  % (t["reps"], t["seconds"], t["warmup"])]
        lines += text_table(t["rows"])
        tl = topology_lines(t["rows"])
        if tl:
            lines += [""] + tl
        cl = callgrind_line(res.get("callgrind"))
        if cl:
            lines += ["", cl]
        if t.get("plot"):
            lines += ["picture: %s" % t["plot"]]
        lines += [""]
    lines += counts_lines(res["counts"])
    rc = redis_cost.lines(res.get("redis_cost"))
    if rc:
        lines += [""] + rc
    if t:
        lines += [""] + goals_lines(res)
    return "\n".join(lines)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def machine():
    def version(cmd):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
            return (r.stdout or r.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            return None
    return {"cpus": os.cpu_count(), "cpu_model": cpu_model(), "kernel": platform.release(),
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "platform": platform.platform(), "loadavg": os.getloadavg(),
            "redis": version(["redis-server", "--version"]),
            "node": version(["node", "--version"]) if shutil.which("node") else None,
            "valgrind": version(["valgrind", "--version"]) if shutil.which("valgrind") else None,
            "python": platform.python_version()}


def int_list(s):
    return [int(x) for x in str(s).replace(",", " ").split()]


def finish(res, args, out_dir):
    """The picture, table.md, latest.json and the table on stdout."""
    t = res.get("throughput")
    if t:
        why = plot(t["rows"], res["machine"], out_dir)
        t["plot"] = os.path.relpath(os.path.join(out_dir, "bench.png")) if why is None else why
        if why is None and args.publish:
            shutil.copyfile(os.path.join(out_dir, "bench.png"), DOCS_PNG)
            log("copied to %s" % os.path.relpath(DOCS_PNG))
        with open(os.path.join(out_dir, "table.md"), "w") as f:
            f.write("\n".join(markdown_table(t["rows"])) + "\n")
            tl = topology_lines(t["rows"])
            if tl:
                f.write("\n" + "\n".join(tl) + "\n")
            cl = callgrind_line(res.get("callgrind"))
            if cl:
                f.write("\n%s\n" % cl)
            rc = redis_cost.lines(res.get("redis_cost"))
            if rc:
                f.write("\n" + "\n".join(rc) + "\n")
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
        f.write("\n")
    print(report(res))


def main():
    ap = argparse.ArgumentParser(description="admitd against a plain Redis script, a Unix "
                                 "echo and two peer libraries (docs/bench.md)")
    env = os.environ.get
    ap.add_argument("--reps", type=int, default=int(env("BENCH_REPS", "3")))
    ap.add_argument("--seconds", type=float, default=float(env("BENCH_SECONDS", "3")))
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--conns", type=int_list, default=int_list(env("BENCH_CONNS", "1,16,64,256")),
                    help="admitd connection counts, e.g. 1,16,64,256")
    ap.add_argument("--topologies", type=lambda x: [t for t in x.replace(",", " ").split()],
                    default=env("BENCH_TOPOLOGIES", "cluster tls").replace(",", " ").split(),
                    help="admitd rows on other Redis deployments: cluster, tls ('' for none)")
    ap.add_argument("--topo-conns", type=int_list,
                    default=int_list(env("BENCH_TOPO_CONNS", "16,64")),
                    help="connection counts of the topology rows")
    ap.add_argument("--peer-conc", type=int, default=64,
                    help="concurrent loops (rlf) and threads (limits)")
    ap.add_argument("--limits-strategy", choices=("fixed-window", "moving-window"),
                    default="fixed-window")
    ap.add_argument("--no-peers", action="store_true", help="skip rate-limiter-flexible, limits")
    ap.add_argument("--callgrind-pairs", type=int,
                    default=int(env("BENCH_CALLGRIND_PAIRS", "20000")),
                    help="pairs measured under callgrind (0: skip)")
    ap.add_argument("--redis-cost", type=int, default=int(env("BENCH_REDIS_COST", "4800")),
                    help="admissions a row of redis_cost.py's callgrind rows (0: skip)")
    ap.add_argument("--callgrind-base", type=int, default=2000,
                    help="pairs of the baseline callgrind run, subtracted")
    ap.add_argument("--counts-only", action="store_true", help="skip the throughput part")
    ap.add_argument("--publish", action="store_true", default=env("BENCH_PUBLISH") == "1",
                    help="copy results/bench.png to docs/bench.png (BENCH_PUBLISH=1)")
    ap.add_argument("--replot", action="store_true",
                    help="measure nothing: redraw the picture and tables from --out")
    ap.add_argument("--rows", default=None, metavar="REGEX",
                    help="run only the rows whose id matches (and the ceilings and peers "
                         "they are compared with), e.g. 'oneshot|redis.distinct.c64'")
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args()
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if args.replot:
        with open(args.out) as f:
            res = json.load(f)
        finish(res, args, out_dir)
        return 0
    if args.reps < 1 or args.seconds <= 0 or not args.conns:
        sys.exit("bench: --reps, --seconds and --conns must be positive")
    for exe in (ADMITD, LOADGEN, ECHO):
        if not os.access(exe, os.X_OK):
            sys.exit("bench: %s is missing: run `make bench`" % exe)
    os.makedirs(out_dir, exist_ok=True)

    # The harness's temp dirs, under tests/bench/results/tmp unless told
    # otherwise: on a shared box, /tmp/integ.*, /tmp/admitd-* and /tmp/redis-*
    # were swept by something else while a run was using them.
    os.environ.setdefault("ADMITD_TEST_TMPDIR", os.path.join(out_dir, "tmp"))
    os.makedirs(os.environ["ADMITD_TEST_TMPDIR"], exist_ok=True)
    problems = []
    rows = select_rows(build_rows(args), args.rows)
    if not args.counts_only:
        skip_rlf = "skipped: --no-peers" if args.no_peers else npm_setup()
        skip_limits = "skipped: --no-peers" if args.no_peers else limits_setup()
        for r in rows:
            if r.kind == "rlf" and skip_rlf:
                r.skipped = skip_rlf
            if r.kind == "limits" and skip_limits:
                r.skipped = skip_limits
    conf = TB_SCOPE + NOREL_SCOPE + BOOKS_SCOPE + FIFO_SCOPE
    # The Redis levers, each measured alone: BENCH_REDIS_FUNCTIONS=no (EVALSHA),
    # BENCH_REDIS_BATCH=1 (every acquire its own call), BENCH_BOOK_AHEAD=0
    # (no units booked ahead; or another horizon, in ms).
    levers = ""
    if os.environ.get("BENCH_BOOK_AHEAD"):
        levers += "redis_book_ahead = %dms\n" % int(os.environ["BENCH_BOOK_AHEAD"])
    if os.environ.get("BENCH_REDIS_FUNCTIONS", "yes") == "no":
        levers += "redis_functions = no\n"
    if os.environ.get("BENCH_REDIS_BATCH"):
        levers += "redis_batch = %d\n" % int(os.environ["BENCH_REDIS_BATCH"])
    if levers:
        conf = "[admitd]\n" + levers + conf
    t_start = time.monotonic()
    redis = RedisServer().start()
    started = []
    topo_objs = []
    mon = None
    echo = None
    clean = False
    try:
        redis.command("SCRIPT", "FLUSH")
        redis.command("FUNCTION", "FLUSH")
        pod_a = Admitd(conf, redis_url=redis.url).start()
        started.append(pod_a)
        pod_b = Admitd(conf, redis_url=redis.url).start()
        started.append(pod_b)
        local = Admitd(conf).start()
        started.append(local)
        for d in (pod_a, pod_b):
            wait_for(lambda d=d: status(d)["backend"] == "redis", 10, "admitd to use redis")
        # The scripts the daemon loaded are byte for byte the ones we build.
        sha_pair = (sha1(embedded_script("acquire")), sha1(embedded_script("release")))
        exists = redis.command("SCRIPT", "EXISTS", *sha_pair)
        if exists != [1, 1]:
            raise AssertionError("the daemon's scripts are not scripts/lib + scripts/*.lua "
                                 "as gen_scripts.sh builds them (SCRIPT EXISTS %s)" % exists)
        # Each script's ids: its SHA, and its function when the library is loaded.
        fnames = {}
        for lib in redis.command("FUNCTION", "LIST"):
            lib = dict(zip(lib[::2], lib[1::2]))
            for fn in lib.get("functions", []):
                name = dict(zip(fn[::2], fn[1::2]))["name"]
                fnames[name.rsplit("_", 1)[-1]] = name
        shas = tuple({sha} | ({fnames[n]} if n in fnames else set())
                     for sha, n in zip(sha_pair, ("acquire", "release")))
        mon = Monitor(redis)
        acquire_argv = capture_acquire_argv(mon, pod_a, shas[0])
        library_dump = redis_cost.function_dump(redis.sock_path)
        counts = run_counts(redis, mon, pod_a, pod_b, shas, problems)
        mon.close()
        mon = None
        res = {"machine": machine(), "counts": counts, "scopes": conf.strip()}
        if not args.counts_only:
            redis.command("FLUSHALL")
            echo = Echo(os.environ["ADMITD_TEST_TMPDIR"])
            topo = start_topologies(args, conf, rows, topo_objs)
            bench = Bench(args, redis, pod_a, local, echo, acquire_argv, problems, topo)
            run_throughput(args, bench, rows)
            summary = summarize_rows(rows)
            res["throughput"] = {
                "reps": args.reps, "seconds": args.seconds, "warmup": args.warmup,
                "conns": args.conns, "peer_conc": args.peer_conc,
                "ceiling_commands": {k: " ".join(v) for k, v in bench.commands.items()},
                "redis_benchmark_n": bench.n, "bucket_lua_sha": bench.bucket_sha,
                "rows": summary}
            log("callgrind (%d + %d pairs)" % (args.callgrind_base, args.callgrind_pairs))
            res["callgrind"] = run_callgrind(args, conf, os.environ["ADMITD_TEST_TMPDIR"])
        if args.redis_cost > 0:
            log("redis instructions per admission (callgrind, %d admissions a row)"
                % args.redis_cost)
            res["redis_cost"] = redis_cost.run(os.environ["ADMITD_TEST_TMPDIR"],
                                               library_dump, acquire_argv, args.redis_cost)
        res["problems"] = problems
        res["elapsed_s"] = round(time.monotonic() - t_start, 1)
        clean = True
    finally:
        if mon is not None:
            mon.close()
        if echo is not None:
            echo.stop()
        # After a failure: kill, keep the logs (the harness prints where).
        for d in started + topo_objs[::-1]:
            d.cleanup(failed=not clean)
        redis.cleanup(failed=not clean)

    t = res.get("throughput")
    if t:
        # The median repetition's latency distribution, kept beside the JSON.
        for r in t["rows"]:
            src = r.pop("_cdf_file", None)
            if src and os.path.exists(src):
                r["cdf_file"] = "cdf-%s.dat" % r["id"]
                shutil.copyfile(src, os.path.join(out_dir, r["cdf_file"]))
        shutil.rmtree(bench.cdf_dir, ignore_errors=True)
    finish(res, args, out_dir)
    print("\nresults: %s (%.0fs)" % (os.path.relpath(args.out), res["elapsed_s"]))
    if problems:
        print("\nPROBLEMS:\n  " + "\n  ".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
