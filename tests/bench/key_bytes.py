"""key_bytes.py - what one key costs the daemon: malloc in-use bytes and RSS.

    python3 tests/bench/key_bytes.py [-n KEYS] [--key-len N]
    python3 tests/bench/key_bytes.py --leases [-n LEASES]

Starts the real daemon in local mode with a one-rule scope, takes one
acquire on each of KEYS distinct host-name-like keys (pipelined, leases
released when their connection closes; the rule keeps each key's state
for an hour, so the idle sweep frees none), and reads glibc's malloc_stats()
through gdb before and after: in-use bytes per key, hash buckets included.
RSS (/proc/PID/status VmRSS) is reported beside it. The budget for a
one-rule scope is 256 bytes a key. With --leases: what one detached lease
costs instead (LEASES detached acquires on one key of a scope without
limits). Needs gdb; prints one JSON line.
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

CONF = """
[scope s]
rule = requests 100/1h
"""

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=200000)
    ap.add_argument("--key-len", type=int, default=20)
    ap.add_argument("--leases", action="store_true")
    a = ap.parse_args()
    if a.leases:
        leases(min(a.n, 90000))  # the default max_leases is 100,000
        return
    with Admitd(CONF) as d:
        flood(d, 1000, a.key_len, start=10 ** 8)  # warm: buffers, the first table sizes
        u0, r0, k0 = in_use(d), rss_kb(d.pid), keys(d)
        flood(d, a.n, a.key_len)
        u1, r1, k1 = in_use(d), rss_kb(d.pid), keys(d)
    n = k1 - k0
    print(json.dumps({"keys": n, "key_len": a.key_len,
                      "in_use_bytes_per_key": round((u1 - u0) / n, 1),
                      "rss_bytes_per_key": round((r1 - r0) * 1024 / n, 1),
                      "in_use_before": u0, "in_use_after": u1,
                      "rss_kb_before": r0, "rss_kb_after": r1}))


if __name__ == "__main__":
    main()
