"""fair_util.py - what the tests of fair = yes share: clients that keep a
key's queue full on several pods (Backlog), the order they were served in
(inverted_pairs), and the numbers a run measured (report, FAIR_REPORT=1).
"""

import os
import sys
import threading

from .harness import acquire_req, now


def report(*a):
    """FAIR_REPORT=1: print what a test measured (the closing note's numbers)."""
    if os.environ.get("FAIR_REPORT"):
        print(*a, file=sys.stderr)


class Backlog:
    """Threads that acquire (scope, key) again as soon as admitted, each on
    its own connection to daemon pods[i]: (pod, tenant, sent, received,
    backend)."""

    def __init__(self, pods, scope, per_pod, tenants=(None,), key="k", cls=None):
        self.cls = cls
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.got, self.errors = [], []
        self.threads = [threading.Thread(target=self.run, args=(i, d, scope, key, t), daemon=True)
                        for i, d in enumerate(pods) for t in tenants for _ in range(per_pod)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def run(self, pod, d, scope, key, tenant):
        try:
            with d.connect(timeout=40) as c:
                while not self.stop.is_set():
                    req = acquire_req(scope, key, timeout_ms=30000, lease=False)
                    if tenant is not None:
                        req["tenant"] = tenant
                    if self.cls is not None:
                        req["class"] = self.cls
                    t0 = now()
                    r = c.request(req, timeout=40)
                    t1 = now()
                    if not r.get("ok"):
                        raise AssertionError("refused: %r" % r)
                    with self.lock:
                        self.got.append((pod, tenant, t0, t1, r.get("backend")))
        except Exception as e:  # noqa: BLE001 (reported by finish)
            if not self.stop.is_set():
                self.errors.append(e)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(60)

    def admitted(self, t0=float("-inf"), t1=float("inf")):
        with self.lock:
            return [g for g in self.got if t0 <= g[3] < t1]


def report(*a):
    """FAIR_REPORT=1: print what a test measured (the closing note's numbers)."""
    if os.environ.get("FAIR_REPORT"):
        print(*a, file=sys.stderr)


def inverted_pairs(got, apart=0.1):
    """(pairs, inverted): pairs of admissions whose requests were sent more
    than `apart` s apart and waited together (the later was sent before the
    earlier was answered); inverted: the later was answered first."""
    got = sorted(got, key=lambda g: g[2])
    pairs = inv = 0
    for i, a in enumerate(got):
        for b in got[i + 1:]:
            if b[2] >= a[3]:
                break
            if b[2] - a[2] <= apart:
                continue
            pairs += 1
            if b[3] < a[3]:
                inv += 1
    return pairs, inv
