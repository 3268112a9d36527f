"""bench_runners.py - the benchmark's process tree and its runs.

Owns: Bench (one redis-server on a Unix socket in a temp dir, admitd in
redis mode as pods A and B, admitd in local mode, the echo; each row run on
it), the topologies (a 3-master Redis Cluster and a TLS redis-server, each
with its own pod: start_topologies), the interleaved throughput
repetitions (run_throughput), and the callgrind count of instructions per
acquire+release pair (run_callgrind).
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from tests.integ.harness import Admitd
from tests.bench.bench_env import (
    ADMITD, BUCKET_LUA, CDF_CONNS, KEYSPACE_MAX_AHEAD, LG_TIMEOUT_MS, LIMITS_PYTHON, log, PEERS,
    RAND_KEYSPACE, TB_RATE, with_admitd)
from tests.bench.bench_redis import status, wait_for
from tests.bench.bench_rows import loadgen, redis_benchmark, Sample
from tests.bench import redis_cost
from tests.integ import redis_deploy


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
        ahead0 = self.admitted_ahead(row, server)
        s = Sample(redis or self.redis, server.pid)
        lg = loadgen(sock, "tb", row.conns, keys=1 if row.keys == "hot" else row.conns,
                     seconds=self.args.seconds, warmup=self.args.warmup,
                     timeout_ms=LG_TIMEOUT_MS, cdf=cdf, oneshot=oneshot,
                     per_conn=row.kw.get("per_conn", 0))
        # a one-shot admission is one request (no release)
        requests = lg["sent"] + (0 if oneshot else lg["pairs_all"])
        d = s.done(lg["admitted"], requests)
        if ahead0 is not None:  # None too from a daemon without the count
            # Admissions handed out from units booked ahead (no Redis call).
            ahead = self.admitted_ahead(row, server) - ahead0
            d["ahead_per_adm"] = ahead / max(lg["admitted"], 1)
            if row.keys == "keyspace" and d["ahead_per_adm"] > KEYSPACE_MAX_AHEAD:
                self.note(row, rep, "%.3f of the admissions came from units booked ahead "
                          "(at most %.2f on a key space of cold keys)"
                          % (d["ahead_per_adm"], KEYSPACE_MAX_AHEAD))
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

    def admitted_ahead(self, row, server):
        """The throughput scope's admitted_ahead in admitd's status (admitd
        on Redis only; None for other rows)."""
        if row.kind != "admitd" or row.kw["mode"] == "local":
            return None
        return status(server)["scopes"]["tb"].get("admitted_ahead")

    def run_peer(self, row, rep):
        a = self.args
        if row.kind == "rlf":
            cmd = ["node", os.path.join(PEERS, "rlf.js"), "--socket", self.redis.sock_path,
                   "--conc", str(row.conns), "--keys", row.keys, "--seconds", str(a.seconds),
                   "--warmup", str(a.warmup), "--points", str(TB_RATE)]
            if row.kw.get("per_conn"):
                cmd += ["--per-loop", str(row.kw["per_conn"])]
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
                    pod = Admitd(with_admitd(conf, "redis_tls_ca_file = %s" % files.path("ca.crt")),
                                 redis_url=srv.url)
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
            f.write(with_admitd(conf, "socket = %s" % sock))
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
