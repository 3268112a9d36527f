"""test_bench_keyspace.py - the bench's key-space load is the key space it says.

The key-space rows of tests/bench/run.py claim that each connection (each
rate-limiter-flexible loop) cycles through 1,000 keys of its own. Checked
with the real parts at a small size: tests/bench/loadgen -K against a real
admitd (the scope's key count in `status`, and a per-key limit that refuses
exactly the acquire that comes back to a key once too often, so the order
is j % N), pairs and one-shot; tests/bench/peers/rlf.js --keys keyspace
against a real redis-server (the keys of its calls, in order, by MONITOR);
and the rows a run makes: --rows selects a key-space row with what it is
compared with, and the report's goals 1-4 are the medians of the
per-repetition ratios, met or not.

Run: ADMITD_BIN=daemon/admitd python3 -m unittest tests.integ.test_bench_keyspace -v
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import unittest

from .harness import REPO, Admitd, RedisServer

sys.path.insert(0, REPO)
from tests.bench import bench_report, bench_rows  # noqa: E402
from tests.bench.bench_redis import Monitor  # noqa: E402

LOADGEN = os.path.join(REPO, "tests", "bench", "loadgen")
RLF = os.path.join(REPO, "tests", "bench", "peers", "rlf.js")

# Budgets of an hour: no key goes idle, so the sweep frees none mid-test.
CONF = """
[scope any]
rule = requests token-bucket 1000000/1h

[scope any1]
rule = requests token-bucket 1000000/1h

[scope three]
rule = requests fixed-window 3/1h
"""


def loadgen(sock, *args):
    r = subprocess.run([LOADGEN, "-s", sock, "-t", "0"] + list(args), capture_output=True,
                       text=True, timeout=60)
    out = json.loads(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else None
    return r.returncode, out, r.stderr


class LoadgenKeyspace(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        r = subprocess.run(["make", "-s", "tests/bench/loadgen"], cwd=REPO, capture_output=True,
                           text=True, timeout=120)
        if r.returncode != 0:
            raise AssertionError("make tests/bench/loadgen: %s" % r.stderr)
        cls.d = Admitd(CONF).start()

    @classmethod
    def tearDownClass(cls):
        cls.d.cleanup()

    def scope(self, name):
        c = self.d.connect()
        try:
            return c.request({"op": "status"})["scopes"][name]
        finally:
            c.close()
            self.d._conns.remove(c)

    def test_each_connection_cycles_through_its_own_keys(self):
        for scope, oneshot in (("any", []), ("any1", ["-1"])):
            with self.subTest(oneshot=bool(oneshot)):
                # 4 connections x 7 keys; 400 acquires: each connection
                # comes round its keys many times, and adds no other key.
                for _ in (0, 1):
                    rc, out, err = loadgen(self.d.sock_path, "-S", scope, "-c", "4", "-K", "7",
                                           "-n", "400", *oneshot)
                    self.assertEqual(rc, 0, err)
                    self.assertEqual((out["admitted"], out["errors"], out["keys"],
                                      out["keys_per_conn"]), (400, {}, 28, 7))
                    # The second run takes the same 28 keys again.
                    self.assertEqual(self.scope(scope)["keys"], 28)

    def test_the_keys_come_round_in_order(self):
        # One connection, 5 keys, 3 admissions a key an hour: the first 15
        # acquires take each key 3 times, the 16th is the first key's 4th.
        rc, out, err = loadgen(self.d.sock_path, "-S", "three", "-c", "1", "-K", "5",
                               "-n", "16", "-1")
        self.assertEqual(rc, 0, err)
        self.assertEqual(out["admitted"], 15, out)
        self.assertEqual(sum(out["errors"].values()), 1, out)
        self.assertEqual(self.scope("three")["keys"], 5)
        c = self.d.connect()
        try:
            r = c.request({"op": "acquire", "scope": "three", "key": "k0-4", "lease": False})
            self.assertFalse(r["ok"], r)   # taken 3 times: its limit
            r = c.request({"op": "acquire", "scope": "three", "key": "k0-5", "lease": False})
            self.assertTrue(r["ok"], r)    # never taken: -K 5 is keys 0 to 4
        finally:
            c.close()
            self.d._conns.remove(c)

    def test_bad_key_space_is_refused(self):
        for bad in (["-K", "-1"], ["-K", "5", "-k", "3"], ["-c", "1000", "-K", "1000000"]):
            with self.subTest(bad=bad):
                r = subprocess.run([LOADGEN, "-s", self.d.sock_path, "-S", "any"] + bad,
                                   capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("usage", r.stderr)


class RlfKeyspace(unittest.TestCase):

    def test_each_loop_cycles_through_its_own_keys(self):
        if not shutil.which("node") or not os.path.isdir(
                os.path.join(REPO, "tests", "bench", "peers", "node_modules",
                             "rate-limiter-flexible")):
            self.skipTest("no node or no tests/bench/peers/node_modules (make bench installs it)")
        redis = RedisServer().start()
        mon = None
        try:
            # What rate-limiter-flexible sent (its keys expire within 1 s, so
            # Redis's keys afterwards would depend on the box's pace).
            mon = Monitor(redis)
            a = mon.mark()
            r = subprocess.run(["node", RLF, "--socket", redis.sock_path, "--conc", "3",
                                "--keys", "keyspace", "--per-loop", "4", "--seconds", "0.5",
                                "--warmup", "0.1"], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            out = json.loads(r.stdout.strip().splitlines()[-1])
            self.assertEqual((out["errors"], out["rejected"], out["per_loop"]), (0, 0, 4))
            keys = [args[3] for cmd, _, args in mon.between(a, mon.mark())
                    if cmd in ("EVALSHA", "EVAL") and len(args) > 3]
            self.assertEqual(len(keys), out["ops_all"])
            self.assertGreater(len(keys), 3 * 4)
            for i in range(3):
                # Loop i's calls in order: its own 4 keys, round and round.
                mine = [k for k in keys if k.startswith("rlf:k%d-" % i)]
                self.assertEqual(mine, ["rlf:k%d-%d" % (i, j % 4) for j in range(len(mine))])
                self.assertGreaterEqual(len(mine), 4)
            self.assertEqual(sum(len([k for k in keys if k.startswith("rlf:k%d-" % i)])
                                 for i in range(3)), len(keys))
            bad = subprocess.run(["node", RLF, "--socket", redis.sock_path, "--keys", "keyspace",
                                  "--per-loop", "0"], capture_output=True, text=True, timeout=60)
            self.assertEqual(bad.returncode, 2, bad.stderr)
        finally:
            if mon is not None:
                mon.close()
            redis.cleanup()


def args(conns=(16, 64)):
    return argparse.Namespace(conns=list(conns), topologies=[], topo_conns=[16, 64],
                              peer_conc=64, limits_strategy="fixed-window")


class Rows(unittest.TestCase):

    def test_rows_select_what_they_compare_with(self):
        rows = bench_rows.build_rows(args())
        by = {r.id: r for r in rows}
        ks = by["admitd.redis.keyspace.c64"]
        self.assertEqual((ks.conns, ks.kw["per_conn"], ks.peer, ks.local),
                         (64, 1000, "rlf.keyspace", "admitd.local.keyspace.c64"))
        self.assertEqual(by["rlf.keyspace"].kw["per_conn"], 1000)
        self.assertEqual(by["admitd.local.distinct.c64"].ceiling, "echo.c64")
        self.assertEqual(by["admitd.local.distinct.c16"].ceiling, "echo")
        self.assertEqual(by["echo.c64"].conns, 64)
        # Names a reader tells apart.
        labels = [r.label for r in rows]
        self.assertEqual(len(labels), len(set((r.label, r.conns) for r in rows)))
        for want in ("admitd redis keyspace", "admitd redis keyspace one-shot",
                     "admitd local keyspace", "admitd local keyspace one-shot",
                     "rate-limiter-flexible keyspace", "admitd redis per-conn key",
                     "rate-limiter-flexible per-loop key"):
            self.assertIn(want, labels)
        got = {r.id for r in bench_rows.select_rows(rows, r"redis\.keyspace\.c64$")}
        self.assertEqual(got, {"admitd.redis.keyspace.c64", "admitd.local.keyspace.c64",
                               "rlf.keyspace", "ceil.bucket.rand.p16", "echo.c64"})

    def test_goals_are_medians_of_per_repetition_ratios(self):
        def row(rid, rates, cpus, **kw):
            r = bench_rows.Row(rid, rid, kw.pop("kind", "admitd"), 64, "keyspace", **kw)
            for rep, (rate, cpu) in enumerate(zip(rates, cpus)):
                r.runs.append({"rep": rep, "rate": rate, "redis_cpu_us_per_adm": cpu,
                               "peer": {"versions": {}}})
            return r
        rows = [
            row("rlf.keyspace", [100, 100, 100], [6.0, 6.0, 9.0], kind="rlf"),
            row("rlf.hot", [100, 100, 100], [1, 1, 1], kind="rlf"),
            row("admitd.redis.keyspace.c64", [50, 95, 99], [8.0, 5.0, 10.0], mode="redis"),
            row("admitd.local.keyspace.c64", [100, 100, 100], [0, 0, 0], mode="local"),
            row("admitd.redis.keyspace.oneshot.c64", [90, 120, 130], [6.0, 6.0, 6.0],
                mode="redis"),
            row("admitd.redis.hot.oneshot.c64", [140, 160, 170], [1, 1, 1], mode="redis"),
        ]
        by = {r.id: r for r in rows}
        for r in rows:
            if r.kind == "admitd":
                r.peer = "rlf.hot" if "hot" in r.id else "rlf.keyspace"
        by["admitd.redis.keyspace.c64"].local = "admitd.local.keyspace.c64"
        res = {"throughput": {"rows": bench_rows.summarize_rows(rows)}}
        lines = "\n".join(bench_report.goals_lines(res)).splitlines()
        last = [x for x in lines if "1. " in x or "2. " in x or "3. " in x or "4. " in x]
        # per repetition rlf/admitd CPU: 0.75, 1.2, 0.9 -> median 0.90
        self.assertRegex(last[0], r"^\s+NOT met 1\. .*acquire\+release.*: 0\.90x")
        # one-shot: 1.0, 1.0, 1.5 -> 1.00, met
        self.assertRegex(last[1], r"^\s+met\s+1\. .*\"lease\": false.*: 1\.00x")
        self.assertRegex(last[2], r"^\s+met\s+2\. .*key space.*: 1\.20x")
        self.assertRegex(last[3], r"^\s+met\s+2\. .*hot key.*: 1\.60x")
        self.assertTrue(all("n/a" in x for x in last[4:7]), last)   # no local/echo rows
        self.assertRegex(last[7], r"^\s+met\s+4\. .*key space.*: 0\.95x")
        self.assertEqual(lines[-1], last[-1])   # the report ends with goals 1-4


if __name__ == "__main__":
    unittest.main()
