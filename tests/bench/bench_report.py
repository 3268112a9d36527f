"""bench_report.py - the benchmark's table, goals and picture.

Owns: the table on stdout and in table.md (text_table, markdown_table),
each topology row's ratio to plain Redis, the callgrind line, the counts'
lines, the Redis-cost goals (goals_lines), the whole report, the machine
it ran on, and the picture (plot: tests/bench/plot.py, gnuplot).
"""

import os
import platform
import shutil
import subprocess
import time

from tests.bench import plot as bench_plot
from tests.bench import redis_cost
from tests.bench.bench_env import KEYSPACE_PER_CONN
from tests.bench.bench_rows import KEY_WORDS


def plot(summary, m, out_dir):
    """results/bench.png (tests/bench/plot.py); None when done, else why not. m: the machine."""
    rows = [r for r in summary if "rate" in r]
    title = "admitd benchmark, %s: %s CPUs (%s), Linux %s" % (
        m.get("date", "?"), m.get("cpus"), m.get("cpu_model"), m.get("kernel"))
    return bench_plot.plot(rows, title, os.path.join(out_dir, "bench.png"))


def _f(x, nd=0):
    if x is None:
        return "-"
    if nd == 0:
        return "%.0f" % x
    return "%.*f" % (nd, x)


TABLE_HEAD = ("row", "conns", "unit", "median", "min", "max", "/ceiling", "/rlf", "p50 us",
              "p99 us", "admitd cpu us/req", "redis calls/adm", "ahead/adm", "redis cpu us/adm")


def table_rows(summary):
    out = []
    for r in summary:
        if "rate" not in r:
            out.append((r["label"], str(r["conns"]), r["skipped"]))
            continue
        rc = r.get("ratio_ceiling")
        rl = r.get("ratio_rlf")
        local = r["kind"] == "admitd" and r["params"].get("mode") == "local"
        ahead = r.get("ahead_per_adm")
        out.append((
            r["label"], str(r["conns"]), r["unit"], _f(r["rate"]["median"]), _f(r["rate"]["min"]),
            _f(r["rate"]["max"]), _f(rc["median"], 2) if rc else "-",
            _f(rl["median"], 2) if rl else "-", _f(r["p50_us"]), _f(r["p99_us"]),
            _f(r.get("cpu_us_per_req"), 1) if r["kind"] == "admitd" else "-",
            "-" if local or r["kind"] == "echo" else _f(r["redis_calls_per_adm"], 2),
            "-" if ahead is None else _f(ahead, 2),
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
                       % (r["label"], r["conns"], rr["median"], KEY_WORDS[r["keys"]], r["conns"],
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


def per_rep_ratio(rows, a, b, key):
    """The median of the per-repetition ratios rows[a][key] / rows[b][key]
    (each pair from the same repetition), with the two rows' medians; None
    when a row or a figure is missing."""
    ra, rb = rows.get(a), rows.get(b)
    if not ra or not rb or not ra.get("runs") or not rb.get("runs"):
        return None
    bs = {x["rep"]: x.get(key) for x in rb["runs"]}
    vals = sorted(x[key] / bs[x["rep"]] for x in ra["runs"]
                  if x.get(key) and bs.get(x["rep"]))
    if not vals:
        return None
    n = len(vals)
    mid = vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2
    return {"median": mid, "min": vals[0], "max": vals[-1], "a": ra.get(key), "b": rb.get(key)}


def goals_lines(res):
    """The goals, each with its figure and whether it is met (n/a when a
    row it needs was skipped). Ratios are medians of the per-repetition
    ratios (each of two rows' runs in the same repetition). First today's
    goals, kept so that nothing else is lost; the report ends with the key
    space's goals 1 to 4."""
    t = res.get("throughput")
    rows = {r["id"]: r for r in t["rows"]} if t else {}
    rc = (res.get("redis_cost") or {}).get("rows", {})
    out = ["goals (higher ratios are better; medians of the per-repetition ratios):",
           " kept, so that nothing else is lost (goal 5):"]

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

    def mm(key, rid):
        """ (min..max) of a row's per-repetition ratios in the summary."""
        v = rows.get(rid, {}).get(key)
        return " (%.2f..%.2f)" % (v["min"], v["max"]) if isinstance(v, dict) else ""

    acpu = med("admitd.redis.distinct.c64", "redis_cpu_us_per_adm")
    goal("Redis CPU per admission, per-conn key @64, rlf's / admitd's",
         ratio(med("rlf.distinct", "redis_cpu_us_per_adm"), acpu), 1.0,
         "" if not ins("rlf") else " (instructions, batches of 32: %.2fx; booking 4 ahead: %.2fx)"
         % (ratio(ins("rlf"), ins("admitd batch 32")) or 0,
            ratio(ins("rlf"), ins("admitd batch 32, 4 ahead")) or 0))
    goal("adm/s per-conn key @64 against rlf", med("admitd.redis.distinct.c64", "ratio_rlf"), 1.0)
    goal("adm/s one hot key @64 against rlf", med("admitd.redis.hot.c64", "ratio_rlf"), 1.5)
    goal("adm/s per-conn key @64 against rlf, one-shot (\"lease\": false)",
         med("admitd.redis.distinct.oneshot.c64", "ratio_rlf"), 1.0)
    goal("one-rule scope's Redis CPU, bucket.lua -P16's / admitd's per-conn key @64",
         ratio(med("ceil.bucket.rand.p16", "redis_cpu_us_per_adm"), acpu), 0.85,
         "" if not ins("bucket.lua") else
         " (instructions: %.2fx in batches of 32, %.2fx alone)"
         % (ratio(ins("bucket.lua"), ins("admitd batch 32")),
            ratio(ins("bucket.lua"), ins("admitd alone"))))
    for mode in ("cluster", "tls"):
        for keys in ("distinct", "hot"):
            goal("%s %s @64 against plain Redis" % (mode, KEY_WORDS[keys]),
                 med("admitd.%s.%s.c64" % (mode, keys), "ratio_redis"), 0.80)
    cg = res.get("callgrind") or {}
    ipp = cg.get("instructions_per_pair")
    goal("25,000 / instructions per acquire+release pair (local, callgrind)",
         ratio(25000, ipp), 1.0, "" if not ipp else " (%.0f instructions)" % ipp)

    out.append(" the key space (64 connections x %s keys of each one's own) and the socket path:"
               % "{:,}".format(rows.get("admitd.redis.keyspace.c64", {}).get("params", {})
                               .get("per_conn", KEYSPACE_PER_CONN)))
    for what, rid in (("acquire+release", "admitd.redis.keyspace.c64"),
                      ("\"lease\": false", "admitd.redis.keyspace.oneshot.c64")):
        r = per_rep_ratio(rows, "rlf.keyspace", rid, "redis_cpu_us_per_adm")
        goal("1. Redis CPU per admission on the key space, %s: rlf's / admitd's" % what,
             r and r["median"], 1.0,
             "" if r is None else " (%.2f..%.2f; admitd %.1f us, rlf %.1f us)"
             % (r["min"], r["max"], r["b"], r["a"]))
    rid = "admitd.redis.keyspace.oneshot.c64"
    goal("2. adm/s on the key space, \"lease\": false, against rlf", med(rid, "ratio_rlf"), 1.0,
         mm("ratio_rlf", rid))
    rid = "admitd.redis.hot.oneshot.c64"
    goal("2. adm/s on one hot key, \"lease\": false, against rlf", med(rid, "ratio_rlf"), 1.5,
         mm("ratio_rlf", rid))
    for n in (16, 64):
        rid = "admitd.local.distinct.c%d" % n
        r = rows.get(rid, {})
        goal("3. local mode per-conn key @%d: round trips (pairs x 2) against the echo's @%d"
             % (n, rows.get(r.get("ceiling"), {}).get("conns", n)),
             med(rid, "ratio_ceiling"), 0.80, mm("ratio_ceiling", rid))
    rid = "admitd.local.keyspace.c64"
    goal("3. local mode on the key space @64 against the echo's round trips",
         med(rid, "ratio_ceiling"), 0.80, mm("ratio_ceiling", rid))
    for keys in ("keyspace", "distinct"):
        rid = "admitd.redis.%s.c64" % keys
        goal("4. pairs on Redis against local mode's, %s @64"
             % ("on the key space" if keys == "keyspace" else "per-conn key"),
             med(rid, "ratio_local"), 0.90, mm("ratio_local", rid))
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
