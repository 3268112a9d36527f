"""test_vectors.py - replay proto/vectors/*.jsonl through the clients' raw
line transport (Client.request_line, AsyncClient.request_line).

A vector line is a case: {"name", "send", "expect"} or {"name", "steps":
[{"send", "expect"}, ...]}. "send" is a request object or a raw line (a
string, sent as is). "expect" is matched as a subset of the reply, nested
objects too; "<any>" matches any value that is present, "<int>" an integer,
"<absent>" a key the reply must not have.
A "$lease" in a send stands for the lease of the case's latest admitted
acquire. The cases run against the real daemon on proto/vectors/vectors.conf,
one daemon per client kind, each case on a fresh connection. The matching
rules are tests/client/vectors.py's.
"""

import json
import os
import unittest

import admit

from .support import REPO, check_binary, harness, load_by_path

VECTORS = os.path.join(REPO, "proto", "vectors")


# tests/client/vectors.py (the C client's replayer) owns the vector format's
# matching rules: match, load, default_files.
rules = load_by_path("admit_vector_rules", "tests/client/vectors.py")


def steps_of(case):
    return case["steps"] if "steps" in case else [case]


def substitute(send, lease):
    """The line to send: a raw string as is, an object with "$lease"
    replaced by the case's latest lease."""
    if isinstance(send, str):
        return send
    return json.dumps({k: (lease if v == "$lease" else v) for k, v in send.items()})


def check_step(test, fname, lineno, case, i, step, reply):
    why = rules.match(step["expect"], reply)
    where = "%s:%d %s (step %d)" % (fname, lineno, case.get("name", ""), i)
    test.assertIsNone(why, "%s: %s" % (where, why))


def admitted_lease(reply, lease):
    if reply.get("ok") is True and isinstance(reply.get("lease"), str):
        return reply["lease"]
    return lease


class VectorCase(unittest.TestCase):
    """Starts the daemon on vectors.conf; skips when there are no vectors."""

    @classmethod
    def setUpClass(cls):
        cls.cases = rules.load(rules.default_files(VECTORS))
        if not cls.cases:
            raise unittest.SkipTest("no proto/vectors/*.jsonl")
        check_binary()
        with open(os.path.join(VECTORS, "vectors.conf"), encoding="utf-8") as f:
            cls.daemon = harness.Admitd(f.read()).start()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.cleanup()



class ClientVectorsTest(VectorCase):
    def test_replay(self):
        for fname, lineno, case in self.cases:
            with admit.Client(self.daemon.sock_path) as client:
                lease = None
                for i, step in enumerate(steps_of(case)):
                    reply = client.request_line(substitute(step["send"], lease))
                    check_step(self, fname, lineno, case, i, step, reply)
                    lease = admitted_lease(reply, lease)


class AsyncClientVectorsTest(VectorCase, unittest.IsolatedAsyncioTestCase):
    async def test_replay(self):
        for fname, lineno, case in self.cases:
            async with admit.AsyncClient(self.daemon.sock_path) as client:
                lease = None
                for i, step in enumerate(steps_of(case)):
                    reply = await client.request_line(substitute(step["send"], lease))
                    check_step(self, fname, lineno, case, i, step, reply)
                    lease = admitted_lease(reply, lease)
