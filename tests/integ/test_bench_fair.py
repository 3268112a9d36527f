"""test_bench_fair.py - tests/bench/fair.py runs and measures what it says.

Runs its quick mode (one short run of each row, a real redis-server and the
real daemons) into a temp JSON file and checks the fields and that their
values are sane: admissions on both contended scopes and both uncontended
ones, Redis calls, script time and CPU per admission above zero, shares
that add up, a light tenant that was served, and no ticket left behind by an
uncontended key. The timings themselves are reported by the bench, never
held here (test_fleet_fair.py holds the bounds). Also `--help`, and bad
arguments refused.

Run: ADMITD_BIN=daemon/admitd python3 -m unittest tests.integ.test_bench_fair -v
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from . import harness
from .harness import REPO

FAIR = os.path.join(REPO, "tests", "bench", "fair.py")


def run_fair(args, timeout):
    env = dict(os.environ)
    env["ADMITD_BIN"] = harness.admitd_bin()
    return subprocess.run([sys.executable, FAIR] + args, cwd=REPO, env=env, timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


class BenchFairHelp(unittest.TestCase):

    def test_help(self):
        p = run_fair(["--help"], 30)
        self.assertEqual(p.returncode, 0, p.stdout)
        for args, says in ((["--rows", "all:0"], "is not LAYOUT:RATE"),
                           (["--reps", "0"], "--reps must be at least 1"),
                           (["--uncontended-rate", "0"], "must be above 0")):
            p = run_fair(args, 30)
            self.assertEqual(p.returncode, 2, p.stdout)
            self.assertIn(says, p.stdout)
        for flag in ("--quick", "--reps", "--seconds", "--rows", "--json", "--png"):
            self.assertIn(flag, p.stdout)


@unittest.skipIf(harness.VALGRIND, "a timed benchmark: too slow under valgrind")
class BenchFairQuick(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bench-fair-test-")
        path = os.path.join(cls.tmp, "fair.json")
        cls.proc = run_fair(["--quick", "--json", path], 170)
        cls.res = None
        if cls.proc.returncode == 0:
            with open(path) as fh:
                cls.res = json.load(fh)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stdout[-4000:])

    def test_contended_fields_and_values(self):
        self.assertEqual(self.res["rows"], ["all:100", "split:100"])
        for row in self.res["rows"]:
            for scope in ("fair", "plain"):
                self.check_run(row, scope)

    def check_run(self, row, scope):
        what = "%s %s" % (row, scope)
        runs = self.res["contended"][row][scope]["runs"]
        self.assertEqual(len(runs), 1, what)
        r = runs[0]
        self.assertEqual(r["errors"], [], what)
        self.assertEqual(r["layout"], row.split(":")[0])
        self.assertGreater(r["admissions"], 0, what)
        self.assertGreater(r["admissions_per_s"], 0, what)
        self.assertGreater(r["redis_calls_per_admission"], 0, what)
        self.assertGreater(r["redis_cpu_us_per_admission"], 0, what)
        self.assertGreater(r["script_us_per_admission"], 0, what)
        self.assertGreater(r["admitd_cpu_us_per_admission"], 0, what)
        # the limit holds over the window (burst 5, and the window's edges:
        # one answer in flight per connection, 28 of them)
        self.assertLessEqual(r["admissions"], 100 * r["seconds"] + 5 + 28, what)
        self.assertEqual(set(r["tenants"]), {"gold", "silver", "bronze"})
        self.assertTrue(all(n > 0 for n in r["tenants"].values()), (what, r["tenants"]))
        self.assertEqual(sum(r["tenants"].values()) + r["light_admitted"], r["admissions"])
        self.assertAlmostEqual(sum(r["shares"].values()), 1.0, places=6)
        self.assertAlmostEqual(sum(r["pod_shares"]), 1.0, places=6)
        self.assertEqual(len(r["pod_shares"]), 3)
        self.assertGreaterEqual(r["max_share_error"], 0)
        self.assertGreater(r["pairs"], 0, what)
        self.assertLessEqual(r["inverted"], r["pairs"])
        self.assertGreater(r["light_admitted"], 0, what)
        self.assertGreaterEqual(r["light_wait_ms_max"], r["light_wait_ms_p50"])
        self.assertGreater(len(r["series"]), 0)
        self.assertEqual(sum(sum(b[1:]) for b in r["series"]), r["admissions"])
        med = self.res["contended"][row][scope]["median"]
        self.assertEqual(med["admissions_per_s"], r["admissions_per_s"])
        if r["layout"] == "split":
            # each heavy tenant on its own pod: the pods' shares are the tenants'
            self.assertEqual([r["pod_tenants"][i][t] for i, t in
                              enumerate(("gold", "silver", "bronze"))],
                             [r["tenants"][t] for t in ("gold", "silver", "bronze")])

    def test_uncontended_fields_and_values(self):
        rows = {u["redis_book_ahead"]: u for u in self.res["uncontended"]}
        self.assertEqual(set(rows), {"5ms", "0"})
        for u in rows.values():
            self.assertEqual(u["ticket_keys_left"], 0)
            for scope in ("ufair", "uplain"):
                r = u[scope][0]
                self.assertEqual(r["admissions"], self.res["uncontended_n"])
                self.assertGreater(r["redis_calls_per_admission"], 0, scope)
                self.assertGreater(r["script_us_per_admission"], 0, scope)
            self.assertGreater(u["calls_ratio"], 0)
        # every acquire asks Redis once when nothing is booked ahead, fair or
        # not (a heartbeat a second may fall in the window: one call more)
        for scope in ("ufair", "uplain"):
            r = rows["0"][scope][0]
            self.assertGreaterEqual(r["redis_calls"], r["admissions"], scope)
            self.assertLessEqual(r["redis_calls"], r["admissions"] + 5, scope)

    def test_table_on_stdout(self):
        out = self.proc.stdout
        self.assertIn("fair=yes", out)
        self.assertIn("fair=no", out)
        self.assertIn("calls per admission, fair=yes / fair=no", out)


if __name__ == "__main__":
    unittest.main()
