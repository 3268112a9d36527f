"""test_client.py - libadmit and the vectors against the real admitd.

Owns: the vectors replayed over raw sockets, the vector matcher, the whole
run of test_libadmit on vectors.conf, and the calls the protocol gained
later (NEWER_CONF: default keys, release outcomes, remaining/reset_ms/target,
cancel, override) through the CLI and test_libadmit's modes; `admit
status` with Redis. Run by `make test-client` with the other
tests/client/test_*.py (test_cli.py: the CLI; test_client_daemon.py: a
daemon that stops, freezes, is absent, starts late or restarts). Keys start
with "cli-" or "lib-" so they never meet the vectors' keys.
"""

import json
import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import launcher  # noqa: E402
import vectors  # noqa: E402

from client_case import DaemonCase, load_harness, run_admit  # noqa: E402


class TestVectors(DaemonCase):
    """Replay proto/vectors/*.jsonl over raw sockets."""

    def test_vectors(self):
        cases = vectors.load(vectors.default_files(launcher.VECTORS_DIR))
        self.assertGreater(len(cases), 40)
        for fname, n, case in cases:
            with self.subTest("%s:%d %s" % (fname, n, case["name"])):
                self.assertIsNone(vectors.run_case(self.daemon.socket, case))


class TestVectorMatcher(unittest.TestCase):
    """The matching rules themselves (no daemon needed)."""

    def test_subset_and_placeholders(self):
        m = vectors.match
        self.assertIsNone(m({"ok": True}, {"ok": True, "x": 1}))
        self.assertIsNotNone(m({"ok": True}, {"ok": False}))
        self.assertIsNotNone(m({"ok": True, "id": 1}, {"ok": True}))
        self.assertIsNone(m({"a": "<any>"}, {"a": None}))
        self.assertIsNone(m({"a": "<int>"}, {"a": 5}))
        self.assertIsNotNone(m({"a": "<int>"}, {"a": "5"}))
        self.assertIsNotNone(m({"a": "<int>"}, {"a": True}))
        self.assertIsNotNone(m({"a": 1}, {"a": True}))
        self.assertIsNone(m({"s": {"x": {"n": "<int>"}}}, {"s": {"x": {"n": 0, "m": 1}, "y": 2}}))
        self.assertIsNotNone(m({"id": [1, 2]}, {"id": [1, 2, 3]}))


class TestLibadmit(DaemonCase):
    def test_library(self):
        launcher.require_binaries(launcher.LIBADMIT_TEST)
        p = subprocess.run([launcher.LIBADMIT_TEST, self.daemon.socket], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("all checks passed", p.stdout)


# Scopes for the calls the protocol gained later (default keys, release
# outcomes, remaining/reset_ms/target, cancel, override); test_libadmit's
# modes defaults, fields, cancel and override name them too.
NEWER_CONF = """
[scope dflt]
key = shared
max_concurrent = 100
timeout = 1s

[scope busy]
max_concurrent = 1
rule = requests token-bucket 10/1h
timeout = 1m

[scope meter]
rule = requests token-bucket 5/1h
timeout = 1s

[scope hold]
max_concurrent = 1
timeout = 1s

[scope ovr]
; per-key overrides: tighten freely, loosen up to 2x (rule 0: at most 10)
rule = requests fixed-window 5/1h
override_max = 2
key = k
timeout = 1s
"""


class TestNewer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        launcher.require_binaries(launcher.ADMITD_BIN, launcher.ADMIT_BIN,
                                  launcher.LIBADMIT_TEST)
        cls.daemon = launcher.Daemon(conf_text=NEWER_CONF).start()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def lib(self, mode):
        p = subprocess.run([launcher.LIBADMIT_TEST, mode, self.daemon.socket],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_libadmit_default_keys_and_outcome(self):
        self.lib("defaults")

    def test_libadmit_remaining_reset_ms_target(self):
        self.lib("fields")

    def test_libadmit_cancel_spends_nothing(self):
        self.lib("cancel")

    def test_libadmit_override(self):
        self.lib("override")

    def test_cli_default_key(self):
        s = self.daemon.socket
        self.assertEqual(run_admit(["penalize", "dflt", "60s"], s)[0], 0)
        code, out, err, _ = run_admit(["inspect", "dflt"], s)
        self.assertEqual(code, 0, err)
        self.assertIn("key         shared\n", out)
        self.assertEqual(run_admit(["try", "dflt", "shared"], s)[0], 75)
        self.assertEqual(run_admit(["reset", "dflt"], s)[:2], (0, "reset\n"))
        self.assertEqual(run_admit(["try", "dflt"], s)[0], 0)

    def test_cli_override(self):
        s = self.daemon.socket
        self.assertEqual(run_admit(["override", "ovr", "cli-ovr-1", "--ttl", "60s",
                                    "--rule", "0=1"], s)[:2], (0, "override\n"))
        self.assertEqual(run_admit(["try", "ovr", "cli-ovr-1"], s)[0], 0)
        code, out, err, _ = run_admit(["try", "ovr", "cli-ovr-1"], s)
        self.assertEqual(code, 75, err)  # refused afterwards
        self.assertIn('limited by "requests fixed-window 5/1h"', err)
        self.assertGreater(float(out), 0)
        code, out, _, _ = run_admit(["inspect", "ovr", "cli-ovr-1", "--json"], s)
        ovr = json.loads(out)["override"]
        self.assertEqual(ovr["rules"], {"0": 1})
        self.assertTrue(0 < ovr["ttl_ms"] <= 60000, ovr)
        # loosening past override_max (2 x 5) is the daemon's bad_request
        code, _, err, _ = run_admit(["override", "ovr", "cli-ovr-1", "--ttl", "1m",
                                     "--rule", "0=11"], s)
        self.assertEqual(code, 65)
        self.assertIn("loosens past override_max", err)
        self.assertEqual(run_admit(["reset", "ovr", "cli-ovr-1"], s)[:2], (0, "reset\n"))
        code, out, _, _ = run_admit(["inspect", "ovr", "cli-ovr-1", "--json"], s)
        self.assertNotIn("override", json.loads(out))
        self.assertEqual(run_admit(["try", "ovr", "cli-ovr-1"], s)[0], 0)
        # the default key, a url, a bare --ttl in seconds, a rule loosened within the ceiling
        self.assertEqual(run_admit(["override", "ovr", "--ttl", "90", "--rule", "0=10"], s)[0],
                         0)
        self.assertIn('"capacity":10', run_admit(["inspect", "ovr", "--json"], s)[1])
        self.assertEqual(run_admit(["override", "ovr", "--url", "http://CLI-Ovr.example/",
                                    "--ttl", "1h", "--rule", "0=2", "--rule", "0=3"], s)[0],
                         65)  # a rule given twice: libadmit refuses it, nothing sent
        # refusals of the daemon and usage errors
        for args, code in ((["override", "hold", "k", "--ttl", "1s", "--rule", "0=1"], 65),
                           (["override", "ovr", "k", "--ttl", "1s", "--rule", "fast=1"], 65),
                           (["override", "ovr", "k", "--ttl", "1s", "--min-delay", "1s"], 65),
                           (["override", "nope", "k", "--ttl", "1s", "--rule", "0=1"], 78),
                           (["override", "ovr", "k", "--rule", "0=1"], 64),
                           (["override", "ovr", "k", "--ttl", "1s"], 64),
                           (["override", "ovr", "k", "--ttl", "0", "--rule", "0=1"], 64),
                           (["override", "ovr", "k", "--ttl", "721h", "--rule", "0=1"], 64),
                           (["override", "ovr", "k", "--ttl", "soon", "--rule", "0=1"], 64),
                           (["override", "ovr", "k", "--ttl", "1s", "--min-delay", "25h"], 64),
                           (["override", "ovr", "k", "--ttl", "1s", "--rule", "0"], 64),
                           (["override", "ovr", "k", "--ttl", "1s", "--rule", "=1"], 64),
                           (["override", "ovr", "k", "--ttl", "1s", "--rule", "0=0"], 64),
                           (["override", "ovr", "k", "--url", "http://k/", "--ttl", "1s",
                             "--rule", "0=1"], 64),
                           (["reset", "ovr", "k", "--rule", "0=1"], 64)):
            with self.subTest(args=args):
                self.assertEqual(run_admit(args, s)[0], code)

    def test_cli_release_outcome(self):
        s = self.daemon.socket
        for o in ("ok", "limited", "error"):
            code, lease, _, _ = run_admit(["acquire", "meter", "cli-out-" + o], s)
            self.assertEqual(code, 0)
            self.assertEqual(run_admit(["release", lease.strip(), "--outcome", o], s)[:2],
                             (0, "released\n"))
        code, lease, _, _ = run_admit(["acquire", "dflt", "cli-out-bad"], s)
        code, _, err, _ = run_admit(["release", lease.strip(), "--outcome", "429"], s)
        self.assertEqual(code, 64)
        self.assertIn("want ok, limited or error", err)
        self.assertEqual(run_admit(["release", lease.strip()], s)[:2], (0, "released\n"))

    def test_cli_refusal_names_target_and_remaining(self):
        s = self.daemon.socket
        self.assertEqual(run_admit(["try", "meter", "cli-ref-1", "--cost", "5"], s)[0], 0)
        code, _, err, _ = run_admit(["try", "meter", "cli-ref-1"], s)
        self.assertEqual(code, 75)
        self.assertIn("(target 0: scope meter key cli-ref-1); remaining 0, full again in ", err)

    def test_cli_run_limited_exit(self):
        s = self.daemon.socket
        for status in (0, 3, 4):
            code = run_admit(["run", "hold", "cli-run-le", "--limited-exit", "3", "--",
                              "sh", "-c", "exit %d" % status], s)[0]
            self.assertEqual(code, status)
        self.assertEqual(run_admit(["try", "hold", "cli-run-le"], s)[0], 0)  # released
        for bad in ("0", "256", "x"):
            self.assertEqual(run_admit(["run", "hold", "k", "--limited-exit", bad, "--",
                                        "true"], s)[0], 64)


class TestStatusRedis(unittest.TestCase):
    """`admit status` shows the redis block when the daemon has Redis."""

    def test_redis_counters(self):
        launcher.require_binaries(launcher.ADMITD_BIN, launcher.ADMIT_BIN)
        if shutil.which("redis-server") is None:
            self.skipTest("redis-server is not installed")
        harness = load_harness()
        with harness.RedisServer() as r:
            with harness.Admitd("[scope api]\ncluster_concurrency = 2\n",
                                redis_url=r.url) as d:
                self.assertEqual(run_admit(["try", "api", "cli-redis-1"], d.sock_path)[0], 0)
                code, out, err, _ = run_admit(["status"], d.sock_path)
                self.assertEqual(code, 0, err)
                st = json.loads(run_admit(["status", "--json"], d.sock_path)[1])
        lines = out.splitlines()
        self.assertRegex(lines[0], r"^admitd \S+, up \d+s, backend redis$")
        rb = st["redis"]
        self.assertIn("redis: pods_seen %d, queued %d, reconciled %d, rebooked %d, dropped %d"
                      % (rb["pods_seen"], rb["queued"], rb["reconciled"], rb["rebooked"],
                         rb["dropped"]), lines)
        self.assertIn("redis errors: " + ", ".join("%s %d" % kv for kv in rb["errors"].items()),
                      lines)
        self.assertIn("acquire 0", out)


if __name__ == "__main__":
    unittest.main()
