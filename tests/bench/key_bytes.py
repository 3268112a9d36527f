"""key_bytes.py - what one key costs the daemon: malloc in-use bytes and RSS.

    python3 tests/bench/key_bytes.py [-n KEYS] [--key-len N] [--rules R]
    python3 tests/bench/key_bytes.py --sweep [-n KEYS]
    python3 tests/bench/key_bytes.py --leases [-n LEASES]

Starts the real daemon in local mode with a scope of R rules (1 by
default; each an hour-long fixed window on its own meter), takes one
acquire on each of KEYS distinct host-name-like keys (pipelined, leases
released when their connection closes; the rule keeps each key's state
for an hour, so the idle sweep frees none), and reads glibc's malloc_stats()
through gdb before and after: in-use bytes per key, hash buckets included.
RSS (/proc/PID/status VmRSS) is reported beside it. The budget for a
one-rule scope is 256 bytes a key. With --leases: what one detached lease
costs instead (LEASES detached acquires on one key of a scope without
limits). With --sweep: every key length of 10, 64, 256 and 512 bytes with
1 and 4 rules, one daemon each, then the least-squares fit of
bytes = fixed + a * key_len + b * rules over them (the formula the docs
give). Needs gdb; prints one JSON line per run.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.integ.harness import Admitd  # noqa: E402

def conf(rules):
    """A scope of `rules` rules, each keeping its key's state for an hour."""
    # max_keys above any -n: an evicted key would not be counted
    lines = ["[admitd]", "max_keys = 100000000", "[scope s]", "rule = requests 100/1h"]
    lines += ["rule = tokens.m%d 1000/1h" % i for i in range(1, rules)]
    return "\n".join(lines) + "\n"


BATCH = 2000


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def in_use(d):
    """glibc's total in-use bytes, printed by malloc_stats() into the daemon's stderr."""
    before = len(d.stderr_text())
    subprocess.run(["gdb", "-p", str(d.pid), "-batch", "-ex", "call (void)malloc_stats()"],
                   capture_output=True, timeout=60)  # exits 1 on a harmless
    # "Couldn't write extended state status" after the call ran
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = re.findall(r"in use bytes\s*=\s*(\d+)", d.stderr_text()[before:])
        if m:
            return int(m[-1])  # the last one is the total over every arena
        time.sleep(0.05)
    raise RuntimeError("malloc_stats printed nothing")


def flood(d, n, key_len, start=0):
    done = start
    while done < start + n:
        c = d.connect(timeout=60)
        m = min(BATCH, start + n - done)
        data = b"".join(b'{"op":"acquire","scope":"s","key":"%s","timeout_ms":0}\n'
                        % key_of(i, key_len).encode() for i in range(done, done + m))
        c.send(data)
        for _ in range(m):
            r = c.recv(timeout=60)
            if r.get("ok") is not True:
                raise RuntimeError("acquire refused: %r" % r)
        c.close()
        done += m


def key_of(i, key_len):
    k = "api%d.example.com" % i
    return (k + "x" * key_len)[:key_len] if len(k) < key_len else k


def keys(d):
    c = d.connect()
    st = c.request({"op": "status"})
    c.close()
    return st["scopes"]["s"]["keys"]


def flood_leases(d, n):
    c = d.connect(timeout=60)
    line = b'{"op":"acquire","scope":"free","key":"k","timeout_ms":0,"detach":true}\n'
    for at in range(0, n, BATCH):
        m = min(BATCH, n - at)
        c.send(line * m)
        for _ in range(m):
            r = c.recv(timeout=60)
            if r.get("ok") is not True:
                raise RuntimeError("acquire refused: %r" % r)
    c.close()


def leases(n):
    with Admitd("[scope free]\n") as d:
        flood_leases(d, 1000)
        u0, r0 = in_use(d), rss_kb(d.pid)
        flood_leases(d, n)
        u1, r1 = in_use(d), rss_kb(d.pid)
    print(json.dumps({"leases": n, "in_use_bytes_per_lease": round((u1 - u0) / n, 1),
                      "rss_bytes_per_lease": round((r1 - r0) * 1024 / n, 1)}))


def per_key(n, key_len, rules):
    with Admitd(conf(rules)) as d:
        flood(d, 1000, key_len, start=10 ** 8)  # warm: buffers, the first table sizes
        u0, r0, k0 = in_use(d), rss_kb(d.pid), keys(d)
        flood(d, n, key_len)
        u1, r1, k1 = in_use(d), rss_kb(d.pid), keys(d)
    n = k1 - k0
    res = {"keys": n, "key_len": key_len, "rules": rules,
           "in_use_bytes_per_key": round((u1 - u0) / n, 1),
           "rss_bytes_per_key": round((r1 - r0) * 1024 / n, 1),
           "in_use_before": u0, "in_use_after": u1,
           "rss_kb_before": r0, "rss_kb_after": r1}
    print(json.dumps(res), flush=True)
    return res


def fit(runs, field):
    """Least squares of field = fixed + a * key_len + b * rules (normal equations)."""
    rows = [(1.0, r["key_len"], r["rules"], r[field]) for r in runs]
    m = [[sum(x[i] * x[j] for x in rows) for j in range(3)] for i in range(3)]
    v = [sum(x[i] * x[3] for x in rows) for i in range(3)]
    for i in range(3):  # Gauss-Jordan on a 3x3 system
        piv = m[i][i]
        m[i] = [e / piv for e in m[i]]
        v[i] /= piv
        for j in range(3):
            if j != i:
                f = m[j][i]
                m[j] = [a - f * b for a, b in zip(m[j], m[i])]
                v[j] -= f * v[i]
    worst = max(abs(x[3] - (v[0] + v[1] * x[1] + v[2] * x[2])) for x in rows)
    return {"fixed": round(v[0], 1), "per_key_byte": round(v[1], 3),
            "per_rule": round(v[2], 1), "worst_residual": round(worst, 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=200000)
    ap.add_argument("--key-len", type=int, default=20)
    ap.add_argument("--rules", type=int, default=1)
    ap.add_argument("--leases", action="store_true")
    ap.add_argument("--sweep", action="store_true")
    a = ap.parse_args()
    if a.leases:
        leases(min(a.n, 90000))  # the default max_leases is 100,000
        return
    if not a.sweep:
        per_key(a.n, a.key_len, a.rules)
        return
    runs = [per_key(a.n, kl, r) for r in (1, 4) for kl in (10, 64, 256, 512)]
    print(json.dumps({"fit_in_use": fit(runs, "in_use_bytes_per_key"),
                      "fit_rss": fit(runs, "rss_bytes_per_key")}))


if __name__ == "__main__":
    main()
