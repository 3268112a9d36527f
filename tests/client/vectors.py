"""vectors.py - replay proto/vectors/*.jsonl over a raw Unix socket.

Owns: the vector format's matching rules (PROTOCOL.md, "Vectors"): expect
is a subset of the reply, objects compared recursively, "<any>" matches any
present value, "<int>" any integer, "<absent>" a key the reply must not
have; "$lease" in a send is the most recent
lease seen in the case. Each case runs on a fresh connection; a case with
"steps" runs them in order on that one connection. Usable as a script:

    python3 tests/client/vectors.py SOCKET [FILE.jsonl ...]
"""

import glob
import json
import os
import socket
import sys

ANY, INT, ABSENT = "<any>", "<int>", "<absent>"


def load(paths):
    """[(file, lineno, case)] for every case in paths, in order."""
    out = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    out.append((os.path.basename(p), n, json.loads(line)))
    return out


def default_files(vdir):
    return sorted(glob.glob(os.path.join(vdir, "*.jsonl")))


def match(expect, got, path="$"):
    """None when got matches expect, else a string saying where it does not."""
    if expect == ANY:
        return None
    if expect == INT:
        ok = isinstance(got, int) and not isinstance(got, bool)
        return None if ok else "%s: want an integer, got %r" % (path, got)
    if isinstance(expect, dict):
        if not isinstance(got, dict):
            return "%s: want an object, got %r" % (path, got)
        for k, v in expect.items():
            if v == ABSENT:
                if k in got:
                    return "%s.%s: want it absent, got %r" % (path, k, got[k])
                continue
            if k not in got:
                return "%s.%s: missing" % (path, k)
            why = match(v, got[k], "%s.%s" % (path, k))
            if why:
                return why
        return None
    if isinstance(expect, list):
        if not isinstance(got, list) or len(got) != len(expect):
            return "%s: want %r, got %r" % (path, expect, got)
        for i, (e, g) in enumerate(zip(expect, got)):
            why = match(e, g, "%s[%d]" % (path, i))
            if why:
                return why
        return None
    if type(expect) is not type(got) or expect != got:
        return "%s: want %r, got %r" % (path, expect, got)
    return None


def _subst(send, lease):
    if isinstance(send, dict):
        return {k: _subst(v, lease) for k, v in send.items()}
    if isinstance(send, list):
        return [_subst(v, lease) for v in send]
    if send == "$lease" and lease is not None:
        return lease
    return send


class Conn:
    def __init__(self, path, timeout=10.0):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        self.s.connect(path)
        self.buf = b""

    def send(self, send):
        if isinstance(send, str):
            data = send.encode("utf-8") + b"\n"
        else:
            data = json.dumps(send, separators=(",", ":")).encode("utf-8") + b"\n"
        self.s.sendall(data)

    def reply(self):
        while b"\n" not in self.buf:
            try:
                chunk = self.s.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise EOFError("connection closed without a reply")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line.decode("utf-8"))

    def close(self):
        self.s.close()


def run_case(path, case):
    """None when the case passes, else a description of the first failure."""
    steps = case.get("steps") or [{"send": case["send"], "expect": case["expect"]}]
    conn = Conn(path)
    lease = None
    try:
        for i, st in enumerate(steps):
            try:
                conn.send(_subst(st["send"], lease))
                got = conn.reply()
            except (OSError, EOFError, ValueError) as e:
                return "step %d: %s" % (i, e)
            why = match(st["expect"], got)
            if why:
                return "step %d: %s (reply %s)" % (i, why, json.dumps(got))
            if isinstance(got.get("lease"), str):
                lease = got["lease"]
    finally:
        conn.close()
    return None


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 64
    files = argv[2:] or default_files(os.path.join(os.path.dirname(__file__), "..", "..",
                                                   "proto", "vectors"))
    bad = 0
    for fname, n, case in load(files):
        why = run_case(argv[1], case)
        print("%s %s:%d %s%s" % ("FAIL" if why else "ok  ", fname, n, case["name"],
                                 (": " + why) if why else ""))
        bad += bool(why)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
