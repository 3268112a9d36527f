#!/usr/bin/env python3
"""adaptive.py - the adaptive judge as a picture: the fleet's effective amount
and nginx's rate over time, plotted into docs/adaptive.png with gnuplot.

Owns: one run of tests/integ/adaptive_judge.py's fleet (a redis-server,
three admitd on it with `adaptive = yes` on a scope of `requests 60/1s`,
8 crawler threads each, nginx limit_req at 18 r/s, reloaded at 36 r/s at
half time), a data file and the gnuplot script in a temp dir, and the png.
Each second it records nginx's configured rate, the GETs it served and
refused, and the effective amount (admitd_adaptive_amount's average over
the three daemons, read from their status). Timings are reported, never
asserted: the judge's assertions are in tests/integ/test_adaptive.py.

Run: make bench-adaptive   (or ADMITD_BIN=daemon/admitd python3 tests/bench/adaptive.py
     [--seconds 60] [--out docs/adaptive.png])
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
os.environ.setdefault("ADMITD_BIN", os.path.join(REPO, "daemon", "admitd"))

from tests.integ.adaptive_judge import NGINX, Fleet, Nginx  # noqa: E402
from tests.integ.redis_util import Pods  # noqa: E402

CONF = """
[scope crawl]
rule = requests 60/1s
timeout = 5s
adaptive = yes
adaptive_floor = 1/1s
"""

PLOT = """
set terminal pngcairo size 900,420 font ",10" noenhanced
set output "{out}"
set title "adaptive: three admitd, 24 crawlers, nginx limit_req (the scope says 60/s)"
set xlabel "seconds"
set ylabel "requests per second"
set key top left
set grid
set yrange [0:*]
plot "{data}" using 1:2 with steps lw 2 title "nginx's rate", \\
     "{data}" using 1:5 with lines lw 2 title "effective amount (mean of the pods)", \\
     "{data}" using 1:3 with lines title "served (200)", \\
     "{data}" using 1:4 with impulses title "refused (429)"
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "adaptive.png"))
    args = ap.parse_args()
    if NGINX is None or shutil.which("gnuplot") is None:
        sys.exit("adaptive.py: needs nginx (nginx-light) and gnuplot (gnuplot-nox)")
    tmp = tempfile.mkdtemp(prefix="bench-adaptive-")
    data = os.path.join(tmp, "adaptive.dat")
    rows = []
    ng = Nginx(18).start()
    try:
        with Pods(CONF, n=3) as p:
            conns = [d.connect() for d in p.daemons]
            f = Fleet(p.daemons, ng.port, "crawl", threads=8).start()
            t0 = time.monotonic()
            try:
                for s in range(1, args.seconds + 1):
                    time.sleep(max(0.0, t0 + s - time.monotonic()))
                    if s == args.seconds // 2:
                        ng.reload(36)
                    t = time.monotonic()
                    with f.lock:
                        ev = [e for e in f.events if t - 1 <= e[0] < t]
                    ok = sum(1 for e in ev if e[2] == 200)
                    lim = sum(1 for e in ev if e[2] == 429)
                    amts = [c.request({"op": "status"})["scopes"]["crawl"]["adaptive"]
                            ["amount_milli"] for c in conns]
                    rows.append((s, ng.rate, ok, lim, sum(amts) / len(amts) / 1000.0))
                    print("%3d s  nginx %2d r/s  served %3d  refused %3d  amount %5.1f"
                          % rows[-1], flush=True)
            finally:
                f.stop()
    finally:
        ng.cleanup()
    with open(data, "w") as fh:
        fh.write("# s nginx_rate served refused amount\n")
        for r in rows:
            fh.write("%d %d %d %d %.3f\n" % r)
    script = os.path.join(tmp, "adaptive.gp")
    with open(script, "w") as fh:
        fh.write(PLOT.format(out=args.out, data=data))
    subprocess.run(["gnuplot", script], check=True)
    print("wrote %s" % args.out)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
