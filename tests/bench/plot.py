#!/usr/bin/env python3
"""plot.py - the benchmark's picture (gnuplot), from the rows of one run.

Owns the picture only: run.py draws it after a run (results/bench.png), and
this script draws it again from a run recorded in docs/bench.md, the table
of one "## Measured on ..." section (the data the README quotes):

    python3 tests/bench/plot.py --section 'Measured on 2026-12-04' -o docs/bench.png

Left: admissions/s against the connection counts the admitd rows were
measured at (the axis is those counts, nothing wider), admitd's four
pair series (a key per connection, one hot key) as lines with min..max
bars, the key-space rows, the peers and the Unix echo (in pairs/s: round
trips / 2) as points, the ceilings as horizontal lines; each
series is labelled where it ends, labels spread apart with a leader line to
their point. Right: each row's acquire latency at the largest connection
count, p50 (dot) to p99 (bar end).

A row: {"label", "conns", "unit", "rate": {"median", "min", "max"}, "p50_us",
"p99_us"}. Stdlib only.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# The key-space points sit this far right of their count, clear of the lines'
# bars (set at most 0.075 apart) and of the other points.
KS_DX = 0.15

# (row label, legend text, colour, point type, dash type); POINTS: (row label,
# legend text, colour, point type[, x offset])
LINES = (
    ("admitd local per-conn key", "admitd local, a key per connection", "#1f77b4", 7, 1),
    ("admitd local hot", "admitd local, one hot key", "#17becf", 5, 2),
    ("admitd redis per-conn key", "admitd on Redis, a key per connection", "#d62728", 9, 4),
    ("admitd redis hot", "admitd on Redis, one hot key", "#ff7f0e", 11, 5),
)
POINTS = (
    ("admitd local keyspace", "admitd local, key space", "#1f77b4", 6, KS_DX),
    ("admitd redis keyspace", "admitd on Redis, key space", "#d62728", 8, KS_DX),
    ("admitd redis keyspace one-shot", "admitd on Redis, key space, one-shot", "#d62728", 4,
     KS_DX),
    ("rate-limiter-flexible per-loop key", "rate-limiter-flexible, a key per loop", "#2ca02c",
     13),
    ("rate-limiter-flexible hot", "rate-limiter-flexible, hot", "#2ca02c", 12),
    ("rate-limiter-flexible keyspace", "rate-limiter-flexible, key space", "#2ca02c", 10,
     KS_DX),
    ("limits fixed-window per-loop key", "limits, a key per loop", "#9467bd", 13),
    ("limits fixed-window hot", "limits, hot", "#9467bd", 12),
    ("unix echo", "Unix echo (pairs/s = round trips / 2)", "#555555", 3),
)
# Rows of runs recorded before the key-space rows, when "distinct" meant a
# key per connection (per loop for the peers): their labels now.
RENAMED = {
    "admitd local distinct": "admitd local per-conn key",
    "admitd redis distinct": "admitd redis per-conn key",
    "admitd local distinct one-shot": "admitd local per-conn key one-shot",
    "admitd redis distinct one-shot": "admitd redis per-conn key one-shot",
    "admitd cluster distinct": "admitd cluster per-conn key",
    "admitd tls distinct": "admitd tls per-conn key",
    "rate-limiter-flexible distinct": "rate-limiter-flexible per-loop key",
    "limits fixed-window distinct": "limits fixed-window per-loop key",
    "limits moving-window distinct": "limits moving-window per-loop key",
}
CEILINGS = (
    ("ceiling bucket.lua hot -P16", "ceiling: bucket.lua, hot key, -P16", "#8c564b", 2),
    ("ceiling acquire.lua rand -P16", "ceiling: acquire.lua, random keys, -P16", "#e377c2", 4),
    ("ceiling bucket.lua rand -P16", "ceiling: bucket.lua, random keys, -P16", "#7f7f7f", 3),
    ("ceiling bucket.lua rand -P1", "ceiling: bucket.lua, random keys, -P1", "#bcbd22", 5),
)


def rows_from_md(path, section):
    """The rows of the first table under the heading that starts with section
    (labels of older runs renamed as the rows are named now: RENAMED)."""
    with open(path) as f:
        text = f.read()
    m = re.search(r"^## " + re.escape(section) + r".*$", text, re.M)
    if not m:
        raise SystemExit("plot: no section %r in %s" % (section, path))
    body = text[m.end():].split("\n## ", 1)[0]
    lines = [x for x in body.splitlines() if x.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[2:]:
        cells = dict(zip(head, (c.strip() for c in line.strip("|").split("|"))))

        def num(k):
            v = cells.get(k, "-")
            return None if v in ("-", "") else float(v)
        rows.append({"label": RENAMED.get(cells["row"], cells["row"]),
                     "conns": int(cells["conns"]), "unit": cells["unit"],
                     "rate": {"median": num("median"), "min": num("min"), "max": num("max")},
                     "p50_us": num("p50 us"), "p99_us": num("p99 us")})
    return rows, m.group(0)[3:]


def spread(ys, gap, lo, hi):
    """Label positions near ys, at least gap apart, within [lo, hi], order kept."""
    order = sorted(range(len(ys)), key=lambda i: ys[i])
    pos = [0.0] * len(ys)
    last = lo - gap
    for i in order:
        pos[i] = max(ys[i], last + gap)
        last = pos[i]
    over = last - hi
    if over > 0:  # push the stack down, keeping the gaps
        nxt = hi + gap
        for i in reversed(order):
            pos[i] = min(pos[i], nxt - gap)
            nxt = pos[i]
    return pos


def gq(s):
    return "'%s'" % s.replace("'", "''")


def fmt(x):
    return "{:,.0f}".format(x)


def script(rows, title, png, dat_dir):
    """The gnuplot script (and its data files in dat_dir) for rows."""
    by = {}
    for r in rows:
        if r.get("rate") and r["rate"].get("median") is not None:
            by.setdefault(r["label"], []).append(r)
    xs = sorted({r["conns"] for label, *_ in LINES for r in by.get(label, [])})
    if not xs:  # a run of some rows (--rows): the counts of its points
        xs = sorted({r["conns"] for label, *_ in POINTS for r in by.get(label, [])})
    if not xs:
        raise ValueError("no rows to plot")
    pos = {c: i for i, c in enumerate(xs)}          # categories: the counts measured
    xend = len(xs) - 1
    xmin, xmax = -0.35, xend + 0.25

    def rate(r, k="median"):
        v = r["rate"][k]
        return v / 2 if r["label"] == "unix echo" else v   # echo: round trips -> pairs

    plots, ends, ymax = [], [], 0.0
    for k, (label, text, col, pt, dt) in enumerate(LINES):
        dodge = (k - (len(LINES) - 1) / 2) * 0.05   # side by side: their bars overlap else
        pts = sorted((r for r in by.get(label, []) if r["conns"] in pos), key=lambda r: r["conns"])
        if not pts:
            continue
        p = os.path.join(dat_dir, "line-%s.dat" % label.replace(" ", "-"))
        with open(p, "w") as f:
            for r in pts:
                f.write("%g %g %g %g\n" % (pos[r["conns"]] + dodge, rate(r), rate(r, "min"),
                                            rate(r, "max")))
        plots.append("%s u 1:2:3:4 w yerrorlines lc rgb '%s' lw 2.5 pt %d ps 1.6 dt %d notitle"
                     % (gq(p), col, pt, dt))
        ymax = max(ymax, max(rate(r, "max") for r in pts))
        last = pts[-1]
        ends.append((pos[last["conns"]] + dodge, rate(last), "%s  %s" % (text, fmt(rate(last))), col))
    for label, text, col, pt, *dx in POINTS:
        pts = [r for r in by.get(label, []) if r["conns"] in pos]
        dx = dx[0] if dx else 0
        for r in pts:
            p = os.path.join(dat_dir, "point-%s-%d.dat" % (label.replace(" ", "-"), r["conns"]))
            with open(p, "w") as f:
                f.write("%g %g %g %g\n" % (pos[r["conns"]] + dx, rate(r), rate(r, "min"),
                                            rate(r, "max")))
            plots.append("%s u 1:2:3:4 w yerrorbars lc rgb '%s' lw 1.5 pt %d ps 2 notitle"
                         % (gq(p), col, pt))
            ymax = max(ymax, rate(r, "max"))
            ends.append((pos[r["conns"]] + dx, rate(r), "%s  %s%s" % (
                text, fmt(rate(r)), "" if r["conns"] == xs[-1] else " (%d conns)" % r["conns"]),
                col))
    for label, text, col, dt in CEILINGS:
        r = next((x for x in by.get(label, []) if x["conns"] == 64), None)
        if r is None:
            continue
        plots.append("%g w l lc rgb '%s' lw 2 dt %d notitle" % (rate(r), col, dt))
        ymax = max(ymax, rate(r))
        ends.append((xmax, rate(r), "%s  %s (64 conns)" % (text, fmt(rate(r))), col))

    ytop = ymax * 1.08
    gap = ytop * 0.042
    ys = spread([e[1] for e in ends], gap, 0, ytop)
    labels = []
    lx = xmax + (xmax - xmin) * 0.03      # labels to the right of the plot, leader lines to them
    for (x, y, text, col), ly in zip(ends, ys):
        labels.append("set arrow from %g,%g to %g,%g nohead lc rgb '%s' lw 0.8 dt 3"
                      % (x, y, lx, ly, col))
        labels.append("set label %s at %g,%g left tc rgb '%s' font 'sans,10'"
                      % (gq(text), lx + (xmax - xmin) * 0.01, ly, col))

    # Right: latency at the largest count, one row each (p50 dot, p99 bar end).
    lat = [r for r in rows if r["conns"] == xs[-1] and r.get("p50_us") and r.get("p99_us")
           and not r["label"].startswith("ceiling")]
    lat.sort(key=lambda r: r["p50_us"])
    lp = os.path.join(dat_dir, "latency.dat")
    with open(lp, "w") as f:
        for i, r in enumerate(lat):
            f.write("%d %g %g\n" % (i, r["p50_us"], r["p99_us"]))
    ytics = ", ".join("%s %d" % (gq(r["label"]), i) for i, r in enumerate(lat))
    lo = min(r["p50_us"] for r in lat) / 1.5
    hi = max(r["p99_us"] for r in lat) * 1.3
    ticks = [m * 10 ** e for e in range(0, 8) for m in (1, 2, 5) if lo <= m * 10 ** e <= hi]

    xtics = ", ".join("'%d' %d" % (c, i) for i, c in enumerate(xs))
    out = [
        "set terminal pngcairo size 1600,780 font 'sans,10'",
        "set output %s" % gq(png),
        "set multiplot title %s" % gq(title),
        # left
        "set origin 0,0", "set size 0.60,0.95",
        "set lmargin 10", "set rmargin 40", "set bmargin 4", "set tmargin 2",
        "set grid ytics lc rgb '#dddddd'", "set border 3", "set tics nomirror",
        "set xrange [%g:%g]" % (xmin, xmax), "set xtics (%s)" % xtics,
        "set yrange [0:%g]" % ytop, "set format y '%.0s%c'",
        "set xlabel 'client connections (loops for the peers)'",
        "set ylabel 'admissions/s (acquire+release pairs; script or consume calls)'",
        "set title 'throughput: median of the repetitions, bars min to max' font 'sans,11'",
    ] + labels + [
        "plot " + ", \\\n     ".join(plots),
        "unset label", "unset arrow",
        # right
        "set origin 0.60,0", "set size 0.40,0.95",
        "set lmargin 30", "set rmargin 3",
        "set logscale x 10", "set xrange [%g:%g]" % (lo, hi),
        "set xtics (%s)" % ", ".join("'%g' %g" % (t, t) for t in ticks),
        "set format y '%g'",
        "set yrange [-0.7:%g]" % (len(lat) - 0.3), "set ytics (%s)" % ytics,
        "set grid xtics ytics lc rgb '#dddddd'",
        "set xlabel 'acquire latency, microseconds (loadgen clock)'", "unset ylabel",
        "set title 'latency at %d connections: p50 (dot) to p99 (bar end)' font 'sans,11'"
        % xs[-1],
        "plot %s u 2:1:2:3 w xerrorbars lc rgb '#444444' lw 2 pt 7 ps 1.3 notitle" % gq(lp),
        "unset multiplot",
    ]
    return "\n".join(out) + "\n"


def plot(rows, title, png):
    """Draw png from rows; None when done, else why not."""
    if not shutil.which("gnuplot"):
        return "skipped: no gnuplot (apt-get install gnuplot-nox)"
    with tempfile.TemporaryDirectory(prefix="bench-plot-") as d:
        gp = os.path.join(d, "bench.gp")
        with open(gp, "w") as f:
            f.write(script(rows, title, os.path.abspath(png), d))
        r = subprocess.run(["gnuplot", gp], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            return "gnuplot failed: %s" % r.stderr.strip()[-300:]
        keep = os.path.splitext(png)[0] + ".gp"
        if os.path.basename(os.path.dirname(os.path.abspath(png))) == "results":
            shutil.copyfile(gp, keep)
    return None


def main():
    ap = argparse.ArgumentParser(description="the benchmark's picture from a run in docs/bench.md")
    ap.add_argument("--md", default=os.path.join(os.path.dirname(__file__), "../../docs/bench.md"))
    ap.add_argument("--section", required=True, help="the heading's start: 'Measured on 2026-12-04'")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--title", default=None)
    args = ap.parse_args()
    rows, heading = rows_from_md(args.md, args.section)
    why = plot(rows, args.title or "admitd benchmark: docs/bench.md, \"%s\"" % heading, args.out)
    if why:
        sys.exit(why)
    return 0


if __name__ == "__main__":
    sys.exit(main())
