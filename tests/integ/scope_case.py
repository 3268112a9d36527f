"""scope_case.py - what the scope tests share: CONF, Rec, ScopeCase.

Owns: the conf of every scope the tests of test_scopes.py and
test_scopes_rules.py use (CONF: one daemon for all), Rec (one client
request's instants and reply) and ScopeCase, a class-wide daemon on CONF
with the ways to drive it: hammer (clients acquiring and releasing for a
while), probe (timeout_ms 0 acquires at a period) and the gaps from a
release to the next admission.

Method. Clients record, with time.monotonic(), the instant each acquire was
sent (t_send), the instant its reply arrived (t_recv) and the instant its
release was sent (t_rel). The daemon's own instants are bracketed by these:
an admission happened in [t_send, t_recv], a release was processed after
t_rel. So a lease was certainly held over [t_recv, t_rel] (overlaps of these
intervals are real overlaps: no tolerance needed), and "admission at least D
after the previous release" implies t_recv(next) - t_rel(prev) >= D, up to
EPS (the daemon's millisecond arithmetic). Two admissions are compared
through their brackets [lo, hi] (harness.closer_than, crowded_window), so
a violation is reported only when certain. Upper bounds ("admitted no
later than ...") get SLACK for timer and scheduling lateness. See
harness.py for the values and their reasons.

Rate tests probe with timeout_ms 0 (admitted or limited, decided at once), so
an admission instant is known to within one round trip (< 1 ms idle).

An upper bound compares the earliest the later event can have happened
with the latest the earlier one can have: a waited admission happened no
earlier than t_send + waited_ms (the daemon's own measure of the wait, from
when it read the request), a reference event no later than the instant its
reply was read. The client's own delay in reading a reply (a loaded box)
is then not counted against the daemon; what is left of the box's
lateness, assertNotLate forgives (harness.late_allowance).
"""

import random
import time

from .harness import DaemonCase, acquire_req, late_allowance, now, run_clients


CONF = """
[scope conc]
max_concurrent = 3
timeout = 20s

[scope crule]
rule = concurrency 2
timeout = 20s

[scope fifo]
max_concurrent = 1
timeout = 20s

[scope pace]
min_delay = 150ms
lease_ttl = 500ms
timeout = 20s

[scope cluster]
cluster_concurrency = 3
min_delay = 100ms
lease_ttl = 2s
timeout = 20s

[scope cluster1]
cluster_concurrency = 1
min_delay = 300ms
lease_ttl = 600ms
timeout = 20s

[scope raised]
max_concurrent = 1
cluster_concurrency = 3
min_delay = 10ms

[scope quota]
quota = 5/1s
timeout = 20s

[scope jitter]
min_delay = 100ms
jitter = 0.5
timeout = 20s

[scope fixed]
rule = requests fixed-window 5/500ms

[scope sliding]
rule = requests sliding-window 10/1s

[scope tbucket]
rule = requests token-bucket 10/1s burst=5

[scope leaky]
rule = requests leaky-bucket 10/1s burst=5

[scope session]
rule = requests session-window 5/500ms

[scope twin]
rule a = requests fixed-window 5/1h
rule b = requests token-bucket 2/1h
class both = a b
class onlya = a

[scope tokens]
rule = tokens token-bucket 1000/5s
timeout = 5s

[scope tokname]
rule = tokens.output token-bucket 500/1h

[scope classes]
rule r = requests token-bucket 10/1h
class main = r
class background = r floor=3
default_class = background

[scope budget]
min_delay = 1s

[scope penal]
max_concurrent = 100

[scope byurl]
max_concurrent = 1

[scope shadow]
quota = 2/1m
shadow = yes

[scope waiters]
max_concurrent = 1
max_waiters = 2
timeout = 20s

[scope dflt]
max_concurrent = 1
key = shared
"""


class Rec:
    """One admission as seen by a client. It certainly happened within
    [lo, hi] (see harness.closer_than)."""
    __slots__ = ("client", "t_send", "t_recv", "t_rel", "reply", "lo", "hi")

    def __init__(self, client, t_send, t_recv, t_rel, reply):
        self.client, self.t_send, self.t_recv, self.t_rel, self.reply = \
            client, t_send, t_recv, t_rel, reply
        self.lo = t_send + reply["waited_ms"] / 1000.0
        self.hi = t_recv


class ScopeCase(DaemonCase):
    CONF = CONF

    def hammer(self, scope, key, nclients, duration, hold=(0.0, 0.0)):
        """nclients loop acquire -> hold uniform(hold) seconds -> release on
        one key until `duration` has passed. The hold is the client's own
        behaviour (a request being served), not a wait on the daemon.
        Returns every admission, sorted by t_recv."""
        end = now() + duration

        def client(i):
            c = self.daemon.connect(timeout=30)
            rng = random.Random(i)
            recs = []
            try:
                while now() < end:
                    t_send = now()
                    r = c.request(acquire_req(scope, key), timeout=30)
                    t_recv = c.last_t
                    self.assertAdmitted(r)
                    h = rng.uniform(*hold)
                    if h > 0:
                        time.sleep(h)
                    t_rel = now()
                    rr = c.request({"op": "release", "lease": r["lease"]})
                    self.assertEqual(rr, {"ok": True, "held": True})
                    recs.append(Rec(i, t_send, t_recv, t_rel, r))
            finally:
                c.close()
            return recs

        out = [r for recs in run_clients(nclients, client) for r in recs]
        out.sort(key=lambda r: r.t_recv)
        return out

    def probe(self, scope, key, duration, period=0.002, **kw):
        """Ask acquire with timeout_ms 0 every `period` for `duration`,
        releasing every admitted lease at once. Returns (admits, refusals,
        max_gap): admits and refusals are (lo, hi, reply), the decision
        certainly made within [lo, hi] (request sent, reply received);
        max_gap is the longest interval between two probes (the resolution
        of the measurement)."""
        c = self.conn()
        admits, refusals = [], []
        end = now() + duration
        last = None
        max_gap = 0.0
        while True:
            t0 = now()
            if last is not None:
                max_gap = max(max_gap, t0 - last)
                if t0 - last > 0.05:
                    # A stall measured on this box (this process, or the
                    # daemon waiting for a CPU) does not shorten the probe:
                    # the windows it hid are probed after it. A reply the
                    # daemon holds back is no stall, and still shows.
                    end += min(t0 - last, late_allowance(last, t0))
            if t0 >= end:
                break
            last = t0
            r = c.request(acquire_req(scope, key, timeout_ms=0, **kw))
            if r.get("ok"):
                admits.append((t0, c.last_t, r))
                rr = c.request({"op": "release", "lease": r["lease"]})
                self.assertTrue(rr.get("ok"), rr)
            else:
                refusals.append((t0, c.last_t, r))
            time.sleep(period)
        return admits, refusals, max_gap

    def gaps_release_to_admit(self, recs):
        """recv(next) - rel(prev) for consecutive admissions."""
        return [b.t_recv - a.t_rel for a, b in zip(recs, recs[1:])]
