#!/usr/bin/env python3
"""fair.py - what `fair = yes` costs and what it achieves: contended rows
(three admitd, four tenants, one key over its limit), each beside the same
load with `fair = no`, and the uncontended row (one admitd, one key under
its limit), as a table, a JSON file and a picture.

Owns: the runs (a private redis-server and the real daemons, through
tests/integ/redis_util.py's Pods), their measurements, the table on stdout,
tests/bench/results/fair.json, and the picture (gnuplot; --png). The
clients are tests/integ/fair_util.py's Backlog (threads that acquire
again as soon as admitted, `"lease": false`) and its inverted_pairs.

Contended (scopes `fair` and `plain`: one rule, requests token-bucket
  RATE/1s burst=5, the same weights, fair = yes / no), one row per
  --rows LAYOUT:RATE. Gold 4, silver 2 and bronze 1 are backlogged:
    all     each keeps --conns waiters on every pod;
    split   gold 3 * --conns on pod 0 alone, silver on pod 1, bronze on pod 2.
  A light tenant (weight 1) sends one acquire every 250 ms, turning round
  the pods. Each run warms up (--warmup), then measures --seconds:
    adm/s        admissions answered in the window, per second
    calls/adm    Redis script calls (INFO commandstats, FCALL + EVALSHA)
                 over the window / admissions (the daemons' heartbeats too)
    script us    Redis's time in those calls (INFO commandstats usec) / admissions
    redis us/a   Redis CPU (INFO cpu, used_cpu_sys + used_cpu_user) / admissions
    admitd us/a  the three daemons' CPU (/proc) / admissions
    max err      the heavy tenants' shares against 4/7, 2/7, 1/7 of what the
                 light tenant leaves: the largest |share / weighted - 1|
    pod shares   each pod's share of the heavy admissions
    inverted     of two acquires of one tenant answered in the window, sent
                 more than 100 ms apart, that waited together, the share
                 where the later was answered first (tenants are weighed
                 against each other, so pairs are counted within a tenant,
                 across the pods)
    light        the light tenant's waits, p50 and max, ms
  Runs are interleaved (fair, plain, fair, plain, ...), --reps of each; the
  table quotes medians.
Uncontended (scopes `ufair` and `uplain`, 1000000/1s): one daemon, one
  connection, --uncontended acquires on one key at --uncontended-rate: Redis
  script calls per admission, fair = yes against fair = no (the issue's
  bound: within 5%), with redis_book_ahead at its default (5ms) and at 0
  (every acquire asks Redis).
Picture (--png): the fair = yes and fair = no runs of --png-row with the
  median admissions/s, side by side: each tenant's admissions, cumulative.

Timings are reported, never asserted (tests/integ/test_bench_fair.py checks
the quick mode's JSON; test_fleet_fair.py holds the bounds).

Run: ADMITD_BIN=daemon/admitd python3 tests/bench/fair.py [--quick]
     [--reps 3] [--seconds 6] [--rows all:50,all:200,split:50]
     [--png docs/fairness.png] [--json PATH]
"""

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
os.environ.setdefault("ADMITD_BIN", os.path.join(REPO, "daemon", "admitd"))

from tests.bench.bench_env import RESULTS_DIR, proc_cpu_s  # noqa: E402
from tests.bench.bench_redis import SCRIPT_CMDS, commandstats  # noqa: E402
from tests.integ.harness import acquire_req, now  # noqa: E402
from tests.integ.redis_util import Pods, status  # noqa: E402
from tests.integ.fair_util import Backlog, inverted_pairs  # noqa: E402

WEIGHTS = (("gold", 4), ("silver", 2), ("bronze", 1))
LIGHT = "light"
LIGHT_EVERY_S = 0.25
APART_S = 0.1
BUCKET_S = 0.25

CONTENDED = """
[scope fair]
rule = requests token-bucket {rate}/1s burst=5
fair = yes
timeout = 30s
{weights}

[scope plain]
rule = requests token-bucket {rate}/1s burst=5
timeout = 30s
{weights}
"""

UNCONTENDED = """
[scope ufair]
rule = requests token-bucket 1000000/1s
fair = yes

[scope uplain]
rule = requests token-bucket 1000000/1s
"""

LAYOUT_WORDS = {"all": "each tenant backlogged on every pod",
                "split": "gold on pod 0, silver on pod 1, bronze on pod 2"}

PLOT_HEAD = """
set terminal pngcairo size 1200,520 font ",10" noenhanced
set output "{out}"
set multiplot layout 1,2 title "three admitd, one key limited to {rate}/s; weights gold 4 : \
silver 2 : bronze 1, {where}; light (weight 1): one request every 250 ms, round the pods"
set xlabel "seconds"
set ylabel "admissions since the window began"
set key top left box opaque
set grid
"""

PLOT_PANEL = """
set title "fair = {fair}: {adm:.1f} admissions/s"
set xrange [0:{xmax}]
set yrange [0:{ymax}]
plot "{data}" using 1:2 with lines lw 2 title sprintf("gold, weight 4: %.1f/s, %.3f of the heavy \
(4/7 = 0.571)", {gold}, {sgold}), \\
     "{data}" using 1:3 with lines lw 2 title sprintf("silver, weight 2: %.1f/s, %.3f (0.286)", \
{silver}, {ssilver}), \\
     "{data}" using 1:4 with lines lw 2 title sprintf("bronze, weight 1: %.1f/s, %.3f (0.143)", \
{bronze}, {sbronze}), \\
     "{data}" using 1:5 with lines lw 2 title sprintf("light, weight 1, asks 4/s: %.1f/s", {light})
"""


def fair_log(msg):
    sys.stderr.write("fair: %s\n" % msg)
    sys.stderr.flush()


def fair_conf(tmpl, rate, concurrency_retry=None):
    """The contended scopes at RATE, with their weights (and
    concurrency_retry when one is given)."""
    lines = ["weight %s = %d" % tw for tw in WEIGHTS]
    if concurrency_retry:
        lines.append("concurrency_retry = %s" % concurrency_retry)
    return tmpl.format(rate=rate, weights="\n".join(lines))


def fair_redis_snapshot(redis):
    """(script calls, microseconds Redis spent in them, Redis CPU seconds)
    now: INFO commandstats (FCALL and EVALSHA) and INFO cpu."""
    cs = commandstats(redis)
    calls = usec = 0.0
    for cmd in SCRIPT_CMDS:
        calls += cs.get(cmd.lower(), {}).get("calls", 0)
        usec += cs.get(cmd.lower(), {}).get("usec", 0)
    cpu = 0.0
    for line in redis.command("INFO", "cpu").splitlines():
        k, _, v = line.partition(":")
        if k in ("used_cpu_sys", "used_cpu_user"):
            cpu += float(v)
    return calls, usec, cpu


def fair_redis_delta(before, after, n):
    """The per-admission figures of two snapshots over n admissions."""
    calls, usec, cpu = (y - x for x, y in zip(before, after))
    n = max(1, n)
    return {"redis_calls": int(calls), "redis_calls_per_admission": calls / n,
            "script_us_per_admission": usec / n, "redis_cpu_us_per_admission": cpu * 1e6 / n}


def fair_daemon_calls(daemons):
    """The daemons' Redis calls by kind (status redis.calls), summed."""
    out = {}
    for d in daemons:
        for k, v in status(d)["redis"]["calls"].items():
            if isinstance(v, (int, float)):
                out[k] = out.get(k, 0) + v
    return out


class FairLight:
    """The light tenant: one acquire every LIGHT_EVERY_S, turning round the
    pods, each on its own connection. waits: (pod, sent, answered, ok)."""

    def __init__(self, daemons, scope):
        self.daemons, self.scope = daemons, scope
        self.stop = threading.Event()
        self.got, self.errors = [], []
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        conns = [d.connect(timeout=40) for d in self.daemons]
        try:
            i = 0
            nxt = now()
            while not self.stop.is_set():
                pod = i % len(conns)
                t0 = now()
                r = conns[pod].request(acquire_req(self.scope, "k", timeout_ms=10000, lease=False,
                                                   tenant=LIGHT, id=i), timeout=20)
                self.got.append((pod, t0, now(), bool(r.get("ok"))))
                i += 1
                nxt += LIGHT_EVERY_S
                self.stop.wait(max(0.0, nxt - now()))
        except Exception as e:  # noqa: BLE001 (reported in the row)
            self.errors.append(repr(e))
        finally:
            for c in conns:
                c.close()

    def start(self):
        self.thread.start()
        return self

    def finish(self):
        self.stop.set()
        self.thread.join(30)


def fair_pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


class FairLoad:
    """The heavy tenants' backlog in one of the LAYOUTS: "all", each tenant
    --conns connections on every pod; "split", tenant i 3 * --conns on pod i
    alone (the same connections in all). admitted(): (pod, tenant, sent,
    answered), pod numbered in the fleet."""

    def __init__(self, daemons, scope, layout, conns):
        tenants = [t for t, _ in WEIGHTS]
        if layout == "all":
            self.parts = [(list(range(len(daemons))), Backlog(daemons, scope, conns, tenants))]
        else:
            self.parts = [([i], Backlog([daemons[i]], scope, conns * len(daemons), [t]))
                          for i, t in enumerate(tenants)]
        self.errors = []

    def start(self):
        for _, ld in self.parts:
            ld.start()
        return self

    def finish(self):
        for _, ld in self.parts:
            ld.stop.set()
        for _, ld in self.parts:
            ld.finish()
            self.errors += ld.errors

    def admitted(self, t0=float("-inf"), t1=float("inf")):
        return [(pods[g[0]],) + tuple(g[1:]) for pods, ld in self.parts
                for g in ld.admitted(t0, t1)]


def fair_contended_run(pods, scope, layout, args):
    """One run on SCOPE: the load, the window, the measurements (a dict)."""
    daemons = pods.daemons
    ld = FairLoad(daemons, scope, layout, args.conns).start()
    light = FairLight(daemons, scope).start()
    try:
        time.sleep(args.warmup)
        snap0 = fair_redis_snapshot(pods.redis)
        kinds0 = fair_daemon_calls(daemons)
        dcpu0 = sum(proc_cpu_s(d.pid) for d in daemons)
        t0 = now()
        time.sleep(args.seconds)
        t1 = now()
        snap1 = fair_redis_snapshot(pods.redis)
        kinds1 = fair_daemon_calls(daemons)
        dcpu1 = sum(proc_cpu_s(d.pid) for d in daemons)
    finally:
        light.finish()
        ld.finish()
    heavy = ld.admitted(t0, t1)
    lights = [g for g in light.got if t0 <= g[2] < t1]
    n = len(heavy) + sum(1 for g in lights if g[3])
    per = {t: sum(1 for g in heavy if g[1] == t) for t, _ in WEIGHTS}
    h = max(1, len(heavy))
    wsum = sum(w for _, w in WEIGHTS)
    errs = {t: abs(per[t] / h / (w / wsum) - 1) for t, w in WEIGHTS}
    pods_share = [sum(1 for g in heavy if g[0] == i) / h for i in range(len(daemons))]
    pod_tenants = [{t: sum(1 for g in heavy if g[0] == i and g[1] == t) for t, _ in WEIGHTS}
                   for i in range(len(daemons))]
    pairs = inv = 0
    for t, _ in WEIGHTS:
        p, v = inverted_pairs([g for g in heavy if g[1] == t], APART_S)
        pairs, inv = pairs + p, inv + v
    waits = [(g[2] - g[1]) * 1000 for g in lights if g[3]]
    secs = t1 - t0
    return dict(fair_redis_delta(snap0, snap1, n), **{
        "scope": scope,
        "layout": layout,
        "seconds": round(secs, 3),
        "admissions": n,
        "admissions_per_s": n / secs,
        "admitd_cpu_us_per_admission": (dcpu1 - dcpu0) * 1e6 / max(1, n),
        "daemon_calls_by_kind": {k: kinds1.get(k, 0) - kinds0.get(k, 0) for k in kinds1},
        "tenants": per,
        "light_admitted": sum(1 for g in lights if g[3]),
        "light_refused": sum(1 for g in lights if not g[3]),
        "shares": {t: per[t] / h for t, _ in WEIGHTS},
        "share_errors": errs,
        "max_share_error": max(errs.values()),
        "pod_shares": pods_share,
        "pod_tenants": pod_tenants,
        "pairs": pairs,
        "inverted": inv,
        "inverted_share": inv / pairs if pairs else None,
        "light_wait_ms_p50": fair_pct(waits, 0.5),
        "light_wait_ms_max": max(waits) if waits else None,
        "errors": [repr(e) for e in ld.errors] + light.errors,
        "series": fair_series(heavy, lights, t0, t1),
    })


def fair_series(heavy, lights, t0, t1):
    """Admissions per BUCKET_S per tenant over the window: [[t, g, s, b, l]],
    t the bucket's end (the last one ends with the window)."""
    nb = max(1, math.ceil((t1 - t0) / BUCKET_S))
    names = [t for t, _ in WEIGHTS] + [LIGHT]
    rows = [[0] * len(names) for _ in range(nb)]
    events = [(g[3], g[1]) for g in heavy] + [(g[2], LIGHT) for g in lights if g[3]]
    for t, tenant in events:
        b = int((t - t0) / BUCKET_S)
        if b < nb:
            rows[b][names.index(tenant)] += 1
    return [[round(min((b + 1) * BUCKET_S, t1 - t0), 3)] + r for b, r in enumerate(rows)]


def fair_uncontended(args, book_ahead):
    """One daemon (redis_book_ahead = BOOK_AHEAD), one key under its limit,
    one connection sending at --uncontended-rate (what is booked ahead
    follows the rate taken, so both scopes are held to one rate): script
    calls per admission on `ufair` and `uplain`, interleaved, --reps each."""
    out = {"redis_book_ahead": book_ahead, "ufair": [], "uplain": []}
    with Pods(UNCONTENDED, n=1, admitd_extra="redis_book_ahead = %s" % book_ahead) as p:
        d = p.daemons[0]
        with d.connect(timeout=20) as c:
            for rep in range(args.reps):
                for scope in ("ufair", "uplain"):
                    key = "u%d" % rep
                    c.request(acquire_req(scope, key, timeout_ms=1000, lease=False))
                    snap0 = fair_redis_snapshot(p.redis)
                    t0 = now()
                    for i in range(args.uncontended):
                        time.sleep(max(0.0, t0 + i / args.uncontended_rate - now()))
                        r = c.request(acquire_req(scope, key, timeout_ms=1000, lease=False,
                                                  id=i))
                        if not r.get("ok"):
                            raise AssertionError("uncontended acquire refused: %r" % r)
                    t1 = now()
                    snap1 = fair_redis_snapshot(p.redis)
                    n = args.uncontended
                    out[scope].append(dict(fair_redis_delta(snap0, snap1, n), admissions=n,
                                           admissions_per_s=n / (t1 - t0)))
        out["ticket_keys_left"] = len(p.redis.command("KEYS", "*}:f*"))
    out["median"] = {s: fair_summary(out[s]) for s in ("ufair", "uplain")}
    out["calls_ratio"] = (out["median"]["ufair"]["redis_calls_per_admission"]
                          / out["median"]["uplain"]["redis_calls_per_admission"])
    return out


def fair_median(runs, field):
    xs = [r[field] for r in runs if r.get(field) is not None]
    return statistics.median(xs) if xs else None


def fair_summary(runs):
    fields = ("admissions_per_s", "redis_calls_per_admission", "script_us_per_admission",
              "redis_cpu_us_per_admission",
              "admitd_cpu_us_per_admission", "max_share_error", "inverted_share",
              "light_wait_ms_p50", "light_wait_ms_max")
    s = {f: fair_median(runs, f) for f in fields}
    if "pod_shares" in runs[0]:
        s["pod_shares"] = [statistics.median(r["pod_shares"][i] for r in runs)
                           for i in range(len(runs[0]["pod_shares"]))]
        s["shares"] = {t: statistics.median(r["shares"][t] for r in runs) for t, _ in WEIGHTS}
    return s


def fair_fmt(v, f):
    return "-" if v is None else f % v


def fair_table(res):
    lines = ["", "contended: 3 admitd, one key at requests token-bucket RATE/1s burst=5; gold 4 : "
             "silver 2 : bronze 1 backlogged (%d connections per tenant per pod in layout all; "
             "in layout split each tenant %d connections on its own pod), + light (weight 1, one "
             "acquire every 250 ms, round the pods); medians of %d runs of %.0f s" % (
                 res["conns"], 3 * res["conns"], res["reps"], res["seconds"]),
             "%-10s %-8s %7s %9s %9s %10s %11s %7s %-17s %8s %13s" % (
                 "layout", "scope", "adm/s", "calls/adm", "script us", "redis us/a",
                 "admitd us/a", "max err", "pod shares", "inverted", "light p50/max")]
    for row in res["rows"]:
        for name in ("fair", "plain"):
            s = res["contended"][row][name]["median"]
            lines.append("%-10s %-8s %7.1f %9.3f %9.1f %10.1f %11.1f %6.1f%% %-17s %7.2f%% %13s" % (
                row, "fair=yes" if name == "fair" else "fair=no", s["admissions_per_s"],
                s["redis_calls_per_admission"], s["script_us_per_admission"],
                s["redis_cpu_us_per_admission"],
                s["admitd_cpu_us_per_admission"], 100 * s["max_share_error"],
                "/".join("%.3f" % x for x in s["pod_shares"]),
                100 * (s["inverted_share"] or 0),
                "%s/%s ms" % (fair_fmt(s["light_wait_ms_p50"], "%.0f"),
                              fair_fmt(s["light_wait_ms_max"], "%.0f"))))
            lines.append("%-19s shares %s" % ("", "  ".join(
                "%s %.3f" % (t, s["shares"][t]) for t, _ in WEIGHTS)))
    if not res["uncontended"]:
        return "\n".join(lines)
    lines += ["", "uncontended: 1 admitd, one key at requests token-bucket 1000000/1s, one "
              "connection at %.0f acquires/s, %d acquires a run; medians of %d" % (
                  res["uncontended_rate"], res["uncontended_n"], res["reps"])]
    for u in res["uncontended"]:
        for name in ("ufair", "uplain"):
            s = u["median"][name]
            lines.append("book ahead %-4s %-8s %6.0f adm/s %7.4f calls/adm %6.1f script us/adm "
                         "%6.1f redis us/adm" % (
                             u["redis_book_ahead"], "fair=yes" if name == "ufair" else "fair=no",
                             s["admissions_per_s"], s["redis_calls_per_admission"],
                             s["script_us_per_admission"], s["redis_cpu_us_per_admission"]))
        lines.append("book ahead %-4s calls per admission, fair=yes / fair=no: %.4f (within 5%%: "
                     "%s); ticket keys left: %d" % (
                         u["redis_book_ahead"], u["calls_ratio"],
                         "yes" if abs(u["calls_ratio"] - 1) <= 0.05 else "NO",
                         u["ticket_keys_left"]))
    return "\n".join(lines)


def fair_plot_data(run, path):
    """RUN's admissions per tenant, cumulative, into PATH; the gnuplot
    values for its legend (each tenant's rate and share)."""
    total = [0] * (len(WEIGHTS) + 1)
    with open(path, "w") as fh:
        fh.write("# t gold silver bronze light (admissions since the window began)\n")
        fh.write("0 0 0 0 0\n")
        for row in run["series"]:
            total = [a + b for a, b in zip(total, row[1:])]
            fh.write("%.3f %s\n" % (row[0], " ".join("%d" % x for x in total)))
    v = {t: run["tenants"][t] / run["seconds"] for t, _ in WEIGHTS}
    v[LIGHT] = run["light_admitted"] / run["seconds"]
    v.update(("s" + t, run["shares"][t]) for t, _ in WEIGHTS)
    v.update(data=path, adm=run["admissions_per_s"], xmax=run["series"][-1][0])
    return v, max(total)


def fair_plot(runs, row, out):
    """The picture: RUNS (fair = yes, fair = no: one run each of ROW), each
    tenant's admissions, cumulative, side by side on one y scale."""
    layout, rate = row.split(":")
    tmp = tempfile.mkdtemp(prefix="bench-fair-")
    try:
        panels, top = [], 0
        for name, run in zip(("yes", "no"), runs):
            v, m = fair_plot_data(run, os.path.join(tmp, "fair-%s.dat" % name))
            top = max(top, m)
            panels.append((name, v))
        gp = [PLOT_HEAD.format(out=out, rate=rate, where=LAYOUT_WORDS[layout])]
        for name, v in panels:
            gp.append(PLOT_PANEL.format(fair=name, ymax=int(top * 1.45) + 1, **v))
        gp.append("unset multiplot\n")
        script = os.path.join(tmp, "fair.gp")
        with open(script, "w") as fh:
            fh.write("".join(gp))
        subprocess.run(["gnuplot", script], check=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fair_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[1:]))
    ap.add_argument("--quick", action="store_true",
                    help="one short run of each at one rate (under a minute): a smoke test")
    ap.add_argument("--reps", type=int, default=3, help="runs of each row (median)")
    ap.add_argument("--seconds", type=float, default=6.0, help="measured window of a run")
    ap.add_argument("--warmup", type=float, default=1.5, help="load before the window")
    ap.add_argument("--rows", default="all:50,all:200,split:50",
                    help="the contended rows, LAYOUT:RATE comma-separated (LAYOUT: all or "
                    "split, RATE: the limit per second)")
    ap.add_argument("--conns", type=int, default=3,
                    help="connections per heavy tenant per pod")
    ap.add_argument("--uncontended", type=int, default=2000,
                    help="acquires per uncontended run (0: no uncontended rows)")
    ap.add_argument("--uncontended-rate", type=float, default=1000.0,
                    help="the uncontended client's pace, acquires per second")
    ap.add_argument("--concurrency-retry", default=None, metavar="DURATION",
                    help="concurrency_retry of the contended scopes (default: the daemon's)")
    ap.add_argument("--json", default=os.path.join(RESULTS_DIR, "fair.json"))
    ap.add_argument("--png", default=None,
                    help="draw the picture here (docs/fairness.png to publish it): the "
                    "fair = yes and fair = no runs of --png-row with the median admissions/s")
    ap.add_argument("--png-row", default=None, help="LAYOUT:RATE (default: the last row)")
    args = ap.parse_args(argv)
    if args.quick:
        args.reps, args.seconds, args.warmup, args.uncontended = 1, 2.5, 1.0, 500
        args.rows = "all:100,split:100"
    for name, v, low in (("--reps", args.reps, 1), ("--conns", args.conns, 1),
                         ("--uncontended", args.uncontended, 0)):
        if v < low:
            ap.error("%s must be at least %d" % (name, low))
    if args.seconds <= 0 or args.warmup < 0 or args.uncontended_rate <= 0:
        ap.error("--seconds and --uncontended-rate must be above 0, --warmup not below")
    args.rows = [x.strip() for x in args.rows.split(",") if x.strip()]
    if not args.rows:
        ap.error("--rows: at least one LAYOUT:RATE")
    for row in args.rows:
        layout, _, rate = row.partition(":")
        if layout not in LAYOUT_WORDS or not rate.isdigit() or int(rate) < 1:
            ap.error("--rows: %r is not LAYOUT:RATE (LAYOUT all or split)" % row)
    args.png_row = args.png_row or args.rows[-1]
    if args.png_row not in args.rows:
        ap.error("--png-row %s is not one of --rows" % args.png_row)
    return args


def main(argv=None):
    args = fair_args(argv)
    if args.png and shutil.which("gnuplot") is None:
        sys.exit("fair.py: --png needs gnuplot (gnuplot-nox)")
    res = {"machine": {"cores": os.cpu_count(), "platform": platform.platform(),
                       "loadavg": os.getloadavg()},
           "command": " ".join(["python3", "tests/bench/fair.py"] +
                               (sys.argv[1:] if argv is None else argv)),
           "rows": args.rows, "concurrency_retry": args.concurrency_retry, "conns": args.conns, "reps": args.reps, "seconds": args.seconds,
           "warmup": args.warmup, "uncontended_n": args.uncontended,
           "uncontended_rate": args.uncontended_rate, "contended": {}}
    for row in args.rows:
        layout, rate = row.split(":")
        res["contended"][row] = {"fair": {"runs": []}, "plain": {"runs": []}}
        with Pods(fair_conf(CONTENDED, int(rate), args.concurrency_retry), n=3) as p:
            for rep in range(args.reps):
                for scope in ("fair", "plain"):
                    r = fair_contended_run(p, scope, layout, args)
                    res["contended"][row][scope]["runs"].append(r)
                    fair_log("%s %s run %d: %.1f adm/s, %.3f calls/adm, max err %.1f%%, "
                             "inverted %d of %d pairs, light p50 %s ms" % (
                                 row, scope, rep + 1, r["admissions_per_s"],
                                 r["redis_calls_per_admission"], 100 * r["max_share_error"],
                                 r["inverted"], r["pairs"],
                                 fair_fmt(r["light_wait_ms_p50"], "%.0f")))
                    time.sleep(0.3)
        for scope in ("fair", "plain"):
            res["contended"][row][scope]["median"] = fair_summary(
                res["contended"][row][scope]["runs"])
    res["uncontended"] = [fair_uncontended(args, ahead) for ahead in ("5ms", "0")
                          if args.uncontended > 0]
    res["machine"]["loadavg_after"] = os.getloadavg()
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as fh:
        json.dump(res, fh, indent=1)
    print(fair_table(res))
    print("wrote %s" % args.json)
    if args.png:
        mids = []
        for scope in ("fair", "plain"):
            runs = res["contended"][args.png_row][scope]["runs"]
            mids.append(sorted(runs, key=lambda r: r["admissions_per_s"])[len(runs) // 2])
        fair_plot(mids, args.png_row, args.png)
        print("wrote %s (%s: the fair = yes and fair = no runs with the median admissions/s)"
              % (args.png, args.png_row))
    return res


if __name__ == "__main__":
    main()
