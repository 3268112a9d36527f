"""test_vectors.py - replay proto/vectors/*.jsonl against the real daemon.

The daemon runs on proto/vectors/vectors.conf. The matching rules (subset
match, "<any>", "<int>", "steps", "$lease") live in one place,
tests/client/vectors.py, which the client suites replay with too; this file
only feeds it the real binary and reports each case as a subtest.
"""

import glob
import importlib.util
import os
import unittest

from .harness import REPO, Admitd

VDIR = os.path.join(REPO, "proto", "vectors")
REPLAYER = os.path.join(REPO, "tests", "client", "vectors.py")


def _replayer():
    spec = importlib.util.spec_from_file_location("admit_vectors_replayer", REPLAYER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class VectorsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.files = sorted(glob.glob(os.path.join(VDIR, "*.jsonl")))
        if not cls.files:
            raise unittest.SkipTest("proto/vectors has no *.jsonl vectors yet")
        if not os.path.exists(REPLAYER):
            raise AssertionError("vectors exist but the replayer %s is missing" % REPLAYER)
        cls.rp = _replayer()
        with open(os.path.join(VDIR, "vectors.conf")) as f:
            cls.daemon = Admitd(f.read())
        cls.daemon.start()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.cleanup()

    def test_vectors(self):
        cases = self.rp.load(self.files)
        self.assertGreater(len(cases), 0)
        for fname, n, case in cases:
            with self.subTest("%s:%d %s" % (fname, n, case.get("name"))):
                why = self.rp.run_case(self.daemon.sock_path, case)
                self.assertIsNone(why)
        # Every case left the daemon alive and serving.
        c = self.daemon.connect()
        self.assertEqual(c.request({"op": "ping"}), {"ok": True})

    def test_every_error_code_has_a_vector(self):
        # Each protocol error the daemon can produce from a single request is
        # exercised by some vector ("shutting_down" needs a signal,
        # "unavailable" needs Redis and "too_many_waiters" concurrent waiters:
        # covered by their own suites).
        seen = set()
        for _, _, case in self.rp.load(self.files):
            for st in case.get("steps") or [case]:
                e = st.get("expect", {}).get("error")
                if e:
                    seen.add(e)
        want = {"bad_request", "unknown_op", "unknown_scope", "line_too_long", "limited",
                "budget_exceeded", "timeout", "exceeds_limit"}
        self.assertEqual(want - seen, set(), "error codes without a vector")
