"""test_bench_plot.py - docs/bench.png shows what was measured.

The picture is drawn by tests/bench/plot.py from the run docs/bench.md
records ("Measured on 2026-12-05"); run.py draws each run's the same way.
Checked on the gnuplot script the rows give, and on the picture itself:
the x axis is the connection counts measured and nothing wider, the y
range fits the data (no empty half), each series is labelled where it
ends with its median, the ceilings differ in colour and dash, and
docs/bench.png is what plot.py draws now.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from .harness import REPO

sys.path.insert(0, REPO)
from tests.bench import plot  # noqa: E402
from tests.bench import run as bench_run  # noqa: E402

SECTION = "Measured on 2026-12-05"


class BenchPlotTest(unittest.TestCase):

    def setUp(self):
        self.rows, self.heading = plot.rows_from_md(os.path.join(REPO, "docs/bench.md"), SECTION)
        self.tmp = tempfile.mkdtemp(prefix="bench-plot-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def script(self, rows):
        return plot.script(rows, "t", os.path.join(self.tmp, "x.png"), self.tmp)

    def left(self, gp):
        return gp.split("unset label", 1)[0]

    def test_axes_fit_the_data(self):
        gp = self.left(self.script(self.rows))
        admitd = [r for r in self.rows if r["label"] in {x[0] for x in plot.LINES}]
        conns = sorted({r["conns"] for r in admitd})
        self.assertEqual(conns, [1, 16, 64, 256])
        tics = re.search(r"set xtics \((.*)\)", gp).group(1)
        self.assertEqual(re.findall(r"'(\d+)'", tics), ["1", "16", "64", "256"])
        # Categories: the measured counts at 0..n-1, the range just around them.
        lo, hi = map(float, re.search(r"set xrange \[(\S+):(\S+)\]", gp).groups())
        n = len(conns)
        self.assertTrue(-0.5 < lo < 0 and n - 1 < hi < n - 0.5, (lo, hi))
        top = float(re.search(r"set yrange \[0:(\S+)\]", gp).group(1))
        plotted = [r["rate"]["max"] / (2 if r["label"] == "unix echo" else 1)  # pairs/s
                   for r in self.rows if r["label"] in
                   {x[0] for x in plot.LINES + plot.POINTS} and r["conns"] in conns
                   and r["rate"]["max"] is not None]   # not a skipped row
        plotted += [r["rate"]["median"] for r in self.rows if r["label"] in
                    {x[0] for x in plot.CEILINGS} and r["conns"] == 64]
        self.assertGreaterEqual(top, max(plotted))
        self.assertLessEqual(top, max(plotted) * 1.15)

    def test_each_series_is_labelled_where_it_ends(self):
        gp = self.left(self.script(self.rows))
        labels = re.findall(r"set label '([^']*)' at (\S+),(\S+)", gp)
        arrows = re.findall(r"set arrow from (\S+),(\S+) to (\S+),(\S+)", gp)
        self.assertEqual(len(labels), len(arrows))
        want = []
        for label, text, *_ in plot.LINES:
            last = max((r for r in self.rows if r["label"] == label), key=lambda r: r["conns"])
            want.append("%s  %s" % (text, "{:,.0f}".format(last["rate"]["median"])))
        for label, text, *_ in plot.CEILINGS:
            r = next(r for r in self.rows if r["label"] == label and r["conns"] == 64)
            want.append("%s  %s (64 conns)" % (text, "{:,.0f}".format(r["rate"]["median"])))
        got = [t for t, _, _ in labels]
        for w in want:
            self.assertIn(w, got)
        # Each leader line starts at the series' last point (its median) and
        # labels do not overlap.
        ys = sorted(float(y) for _, _, y in labels)
        top = float(re.search(r"set yrange \[0:(\S+)\]", gp).group(1))
        self.assertTrue(all(b - a >= top * 0.04 for a, b in zip(ys, ys[1:])), ys)
        medians = {round(float(y)) for _, y, _, _ in arrows}
        self.assertIn(64922, medians)   # admitd redis per-conn key @256, its last point

    def test_ceilings_look_different(self):
        gp = self.left(self.script(self.rows))
        ceil = re.findall(r"^\s*(?:plot )?\d+(?:\.\d+)? w l lc rgb '(#\w+)' lw \S+ dt (\d+)", gp,
                          re.M)
        self.assertEqual(len(ceil), 4, gp)
        self.assertEqual(len({c for c, _ in ceil}), 4)
        self.assertEqual(len({d for _, d in ceil}), 4)

    def test_run_py_draws_the_same_picture(self):
        # run.py's picture is plot.py's: its x axis is the run's counts.
        if shutil.which("gnuplot") is None:
            self.skipTest("gnuplot is not installed (Debian: gnuplot-nox)")
        rows = [dict(r, conns=c) for r in self.rows for c in (1, 256)
                if r["label"] == "admitd local per-conn key" and r["conns"] == 64] + self.rows
        self.assertIsNone(bench_run.plot(rows, {"date": "d"}, self.tmp))
        self.assertTrue(os.path.getsize(os.path.join(self.tmp, "bench.png")) > 10000)
        gp = self.left(self.script(rows))
        tics = re.search(r"set xtics \((.*)\)", gp).group(1)
        self.assertEqual(re.findall(r"'(\d+)'", tics), ["1", "16", "64", "256"])

    def test_docs_png_is_drawn_from_the_table(self):
        if shutil.which("gnuplot") is None:
            self.skipTest("gnuplot is not installed (Debian: gnuplot-nox)")
        out = os.path.join(self.tmp, "bench.png")
        r = subprocess.run([sys.executable, os.path.join(REPO, "tests/bench/plot.py"),
                            "--section", SECTION, "-o", out], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out, "rb") as a, open(os.path.join(REPO, "docs/bench.png"), "rb") as b:
            self.assertTrue(a.read() == b.read(),
                            "docs/bench.png is not what tests/bench/plot.py draws: redraw it")


if __name__ == "__main__":
    unittest.main()
