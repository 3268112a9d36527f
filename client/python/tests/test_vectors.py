"""test_vectors.py - replay proto/vectors/*.jsonl through the clients' raw
line transport (Client.request_line, AsyncClient.request_line).

A vector line is a case: {"name", "send", "expect"} or {"name", "steps":
[{"send", "expect"}, ...]}. "send" is a request object or a raw line (a
string, sent as is). "expect" is matched as a subset of the reply, nested
objects too; "<any>" matches any value that is present, "<int>" an integer.
A "$lease" in a send stands for the lease of the case's latest admitted
acquire. The cases run against the real daemon on proto/vectors/vectors.conf,
one daemon per client kind, each file on a fresh connection.
"""

import glob
import json
import os
import unittest

import admit

from .support import REPO, check_binary, harness

VECTORS = os.path.join(REPO, "proto", "vectors")


def load_cases():
    """[(file name, case dict)] from every vector file, in file order."""
    cases = []
    for path in sorted(glob.glob(os.path.join(VECTORS, "*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    case = json.loads(line)
                    case.setdefault("name", "line %d" % n)
                    cases.append((os.path.basename(path), case))
    return cases


def steps_of(case):
    return case["steps"] if "steps" in case else [case]


def substitute(send, lease):
    if isinstance(send, str):
        return send
    out = dict(send)
    if out.get("lease") == "$lease":
        out["lease"] = lease
    return json.dumps(out)


def mismatch(expect, got, where="reply"):
    """None when got matches expect, else a sentence saying where not."""
    if expect == "<any>":
        return None
    if expect == "<int>":
        ok = isinstance(got, int) and not isinstance(got, bool)
        return None if ok else "%s: want an integer, got %r" % (where, got)
    if isinstance(expect, dict):
        if not isinstance(got, dict):
            return "%s: want an object, got %r" % (where, got)
        for k, v in expect.items():
            if k not in got:
                return "%s: no %r" % (where, k)
            m = mismatch(v, got[k], "%s.%s" % (where, k))
            if m:
                return m
        return None
    if expect != got or type(expect) is not type(got):
        return "%s: want %r, got %r" % (where, expect, got)
    return None


def check_step(test, fname, case, i, step, reply):
    m = mismatch(step["expect"], reply)
    test.assertIsNone(m, "%s: %s (step %d): %s" % (fname, case["name"], i, m))


def admitted_lease(reply, lease):
    if reply.get("ok") is True and isinstance(reply.get("lease"), str):
        return reply["lease"]
    return lease


class VectorCase(unittest.TestCase):
    """Starts the daemon on vectors.conf; skips when there are no vectors."""

    @classmethod
    def setUpClass(cls):
        cls.cases = load_cases()
        if not cls.cases:
            raise unittest.SkipTest("no proto/vectors/*.jsonl")
        check_binary()
        with open(os.path.join(VECTORS, "vectors.conf"), encoding="utf-8") as f:
            cls.daemon = harness.Admitd(f.read()).start()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.cleanup()

    def by_file(self):
        files = {}
        for fname, case in self.cases:
            files.setdefault(fname, []).append(case)
        return sorted(files.items())


class ClientVectorsTest(VectorCase):
    def test_replay(self):
        for fname, cases in self.by_file():
            with admit.Client(self.daemon.sock_path) as client:
                for case in cases:
                    lease = None
                    for i, step in enumerate(steps_of(case)):
                        reply = client.request_line(substitute(step["send"], lease))
                        check_step(self, fname, case, i, step, reply)
                        lease = admitted_lease(reply, lease)
        self.assertGreater(len(self.cases), 0)


class AsyncClientVectorsTest(VectorCase, unittest.IsolatedAsyncioTestCase):
    async def test_replay(self):
        for fname, cases in self.by_file():
            async with admit.AsyncClient(self.daemon.sock_path) as client:
                for case in cases:
                    lease = None
                    for i, step in enumerate(steps_of(case)):
                        reply = await client.request_line(substitute(step["send"], lease))
                        check_step(self, fname, case, i, step, reply)
                        lease = admitted_lease(reply, lease)
