"""bench_rows.py - the benchmark's rows and the load they run.

Owns: the loadgen (tests/bench/loadgen) and redis-benchmark runs and their
problems, a run's Sample and a table Row, which rows a run makes and what
each is compared with (build_rows, select_rows: --rows, --conns,
--topologies), the peers' setup
(npm ci for rate-limiter-flexible, python3-limits), the echo server, and
the summaries over repetitions (median with min and max).
"""

import csv
import io
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile

from tests.bench.bench_env import (
    CEIL_CONNS, children_cpu_s, ECHO, ECHO_CONNS, KEYSPACE_PER_CONN, LIMITS_PYTHON, LOADGEN, log,
    PEERS, proc_cpu_s)
from tests.bench.bench_redis import commandstats, sha1, wait_for


def loadgen(sock, scope, conns, keys=0, seconds=3.0, warmup=0.5, pairs=0, timeout_ms=1000,
            cdf=None, oneshot=False, per_conn=0):
    """One loadgen run: keys in all (0: one per connection), or per_conn keys
    of each connection's own (-K: the key space)."""
    cmd = [LOADGEN, "-s", sock, "-S", scope, "-c", str(conns),
           "-d", str(seconds), "-w", str(warmup), "-t", str(timeout_ms)]
    cmd += ["-K", str(per_conn)] if per_conn else ["-k", str(keys)]
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


def summarize(vals):
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "runs": vals}


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
        self.local = None     # admitd redis: id of the local-mode row of the same load
        self.cdfs = []        # per repetition (CDF_CONNS rows)


# The rows' words for their keys: "distinct" is one key per connection (per
# loop for the peers), taken hundreds of times a second; "keyspace" is
# KEYSPACE_PER_CONN keys of each connection's own, each coming back every
# second or two.
KEY_WORDS = {"distinct": "per-conn key", "hot": "hot", "keyspace": "keyspace"}
PEER_KEY_WORDS = dict(KEY_WORDS, distinct="per-loop key")


def echo_id(conns):
    return "echo" if conns == ECHO_CONNS else "echo.c%d" % conns


def build_rows(args):
    # The key-space rows, the one-shot rows and the second echo run at 64
    # connections (the peers' loops), or the largest count asked for.
    c = 64 if 64 in args.conns else max(args.conns)
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
    ] + ([Row(echo_id(c), "unix echo", "echo", c, "distinct", unit="rt/s")]
         if c != ECHO_CONNS else []) + [
        # One client, no load: the latency goal's terms (acquire p50 at one
        # connection against these two p50s).
        Row("ceil.bucket.rand.p1.c1", "ceiling bucket.lua rand -P1", "ceiling", 1,
            "distinct", script="bucket", pipeline=1),
        Row("echo.c1", "unix echo", "echo", 1, "distinct", unit="rt/s"),
    ]
    for mode in ("local", "redis"):
        for keys in ("distinct", "hot"):
            for n in args.conns:
                rows.append(Row("admitd.%s.%s.c%d" % (mode, keys, n),
                                "admitd %s %s" % (mode, KEY_WORDS[keys]), "admitd", n, keys,
                                mode=mode))
    # The key space: 1000 keys a connection (acquire+release pairs).
    for mode in ("local", "redis"):
        rows.append(Row("admitd.%s.keyspace.c%d" % (mode, c), "admitd %s keyspace" % mode,
                        "admitd", c, "keyspace", mode=mode, per_conn=KEYSPACE_PER_CONN))
    # One-shot: "lease": false, no release; one round trip an admission, as
    # rate-limiter-flexible's consume is one call.
    for mode in ("local", "redis"):
        for keys in ("distinct", "hot", "keyspace"):
            rows.append(Row("admitd.%s.%s.oneshot.c%d" % (mode, keys, c),
                            "admitd %s %s one-shot" % (mode, KEY_WORDS[keys]), "admitd", c, keys,
                            mode=mode, oneshot=True,
                            per_conn=KEYSPACE_PER_CONN if keys == "keyspace" else 0))
    for mode in args.topologies:
        for keys in ("distinct", "hot"):
            for n in args.topo_conns:
                rows.append(Row("admitd.%s.%s.c%d" % (mode, keys, n),
                                "admitd %s %s" % (mode, KEY_WORDS[keys]), "admitd", n, keys,
                                mode=mode, base="admitd.redis.%s.c%d" % (keys, n)))
    for keys in ("distinct", "hot", "keyspace"):
        rows.append(Row("rlf.%s" % keys, "rate-limiter-flexible %s" % PEER_KEY_WORDS[keys], "rlf",
                        args.peer_conc, keys,
                        per_conn=KEYSPACE_PER_CONN if keys == "keyspace" else 0))
    for keys in ("distinct", "hot"):
        rows.append(Row("limits.%s" % keys, "limits %s %s" % (args.limits_strategy,
                                                             PEER_KEY_WORDS[keys]),
                        "limits", args.peer_conc, keys))
    ids = {r.id for r in rows}
    for r in rows:
        if r.kind == "echo":
            continue
        if r.kind == "admitd" and r.kw["mode"] == "local":
            # The echo at the same connections when it ran, else at ECHO_CONNS.
            r.ceiling = echo_id(r.conns) if echo_id(r.conns) in ids else "echo"
        elif r.id not in ("ceil.bucket.rand.p16", "ceil.bucket.hot.p16"):
            r.ceiling = "ceil.bucket.hot.p16" if r.keys == "hot" else "ceil.bucket.rand.p16"
        if r.kind != "rlf":
            r.peer = "rlf.%s" % r.keys
        if r.kind == "admitd" and r.kw["mode"] == "redis":
            r.local = r.id.replace("admitd.redis.", "admitd.local.", 1)
    return rows


def select_rows(rows, regex):
    """The rows whose id matches regex (None: all), with the rows they are
    compared with: their ceiling, their peer, their base and (admitd on
    Redis) local mode on the same load, with that local row's echo."""
    if regex is None:
        return rows
    by = {r.id: r for r in rows}
    keep = {r.id for r in rows if re.search(regex, r.id)}
    for rid in list(keep):
        r = by[rid]
        keep |= {x for x in (r.ceiling, r.peer, r.local, r.kw.get("base")) if x}
        if r.local in by:  # goal 4's local row is held against its echo too
            keep |= {by[r.local].ceiling} - {None}
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


def median_of(row, key):
    vals = [r[key] for r in row.runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def summarize_rows(rows):
    by_id = {r.id: r for r in rows}
    out = []
    for r in rows:
        d = {"id": r.id, "label": r.label, "kind": r.kind, "conns": r.conns, "keys": r.keys,
             "unit": r.unit, "ceiling": r.ceiling, "peer": r.peer, "local": r.local,
             "params": r.kw}
        if r.skipped or not r.runs:
            d["skipped"] = r.skipped or "no clean run"
            out.append(d)
            continue
        d["rate"] = summarize([x["rate"] for x in r.runs])
        for k in ("p50_us", "p99_us", "cpu_us_per_req", "redis_calls_per_adm",
                  "redis_cmds_per_adm", "redis_cpu_us_per_adm", "client_cpu_us_per_adm",
                  "ahead_per_adm"):
            d[k] = median_of(r, k)
        for name, ref_id in (("ratio_ceiling", r.ceiling), ("ratio_rlf", r.peer),
                             ("ratio_redis", r.kw.get("base")), ("ratio_local", r.local)):
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
