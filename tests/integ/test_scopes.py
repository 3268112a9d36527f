"""test_scopes.py - every scope behaviour, as invariants over timestamps.

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

import email.utils
import random
import select
import time

from .harness import (EPS, IO_TIMEOUT, SLACK, DaemonCase, acquire_req, closer_than,
                      crowded_window, max_overlap, now, run_clients, settled_nothing,
                      unstalled)

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
            if t0 >= end:
                break
            if last is not None:
                max_gap = max(max_gap, t0 - last)
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


class ConcurrencyTest(ScopeCase):

    def test_max_concurrent_never_exceeded(self):
        recs = self.hammer("conc", self.key(), nclients=8, duration=2.0, hold=(0.005, 0.03))
        held = [(r.t_recv, r.t_rel) for r in recs]
        # Certainly-held intervals never overlap more than N=3 ...
        self.assertLessEqual(max_overlap(held), 3)
        # ... and with 8 clients contending, the cap is actually used.
        self.assertEqual(max_overlap(held), 3)
        self.assertGreater(len(recs), 50)

    def test_concurrency_rule(self):
        # rule = concurrency N caps leases in flight like max_concurrent.
        recs = self.hammer("crule", self.key(), nclients=5, duration=1.5, hold=(0.005, 0.03))
        held = [(r.t_recv, r.t_rel) for r in recs]
        self.assertEqual(max_overlap(held), 2)
        k = self.key()
        c = self.conn()
        for _ in range(2):
            self.assertAdmitted(c.request(acquire_req("crule", k)))
        self.assertRefused(c.request(acquire_req("crule", k, timeout_ms=0)), "limited",
                           rule="concurrency 2")

    def test_max_concurrent_refusal_names_it(self):
        k = self.key()
        c = self.conn()
        for _ in range(3):
            self.assertAdmitted(c.request(acquire_req("conc", k)))
        self.assertRefused(c.request(acquire_req("conc", k, timeout_ms=0)), "limited",
                           rule_prefix="max_concurrent")

    def test_fifo(self):
        k = self.key()
        holder = self.conn()
        lease = self.assertAdmitted(holder.request(acquire_req("fifo", k)))
        waiters = []
        for i in range(6):
            w = self.conn()
            w.send(acquire_req("fifo", k, id=i))
            # Arrival order is established by the daemon's own count, not by
            # a sleep: the next waiter is sent only once this one is queued.
            self.wait_waiting("fifo", i + 1)
            waiters.append(w)
        holder.request({"op": "release", "lease": lease})
        for i, w in enumerate(waiters):
            # Whichever waiter is answered next must be the i-th to arrive
            # (and nobody behind it is answered while it holds the key).
            ready, _, _ = select.select([x.sock for x in waiters[i:]], [], [], IO_TIMEOUT)
            self.assertEqual([waiters.index(next(x for x in waiters if x.sock is r))
                              for r in ready], [i], "FIFO order broken")
            r = w.recv()
            self.assertEqual(r.get("id"), i, r)
            self.assertAdmitted(r)
            w.request({"op": "release", "lease": r["lease"]})

    def test_timeout_after_whole_budget(self):
        k = self.key()
        holder = self.conn()
        self.assertAdmitted(holder.request(acquire_req("fifo", k)))
        c = self.conn()
        t0 = now()
        r = c.request(acquire_req("fifo", k, timeout_ms=300))
        took = c.last_t - t0
        self.assertRefused(r, "timeout", rule_prefix="max_concurrent")
        self.assertGreaterEqual(took, 0.300 - EPS)
        self.assertNotLate(took, 0.300 + SLACK)

    def test_too_many_waiters(self):
        k = self.key()
        holder = self.conn()
        lease = self.assertAdmitted(holder.request(acquire_req("waiters", k)))
        w1, w2 = self.conn(), self.conn()
        # Two connections' requests are read in whatever order the daemon's
        # loop sees them: w1 is the head only once it is queued before w2
        # is sent (the daemon's own count, as in test_fifo).
        w1.send(acquire_req("waiters", k, id=1))
        self.wait_waiting("waiters", 1)
        w2.send(acquire_req("waiters", k, id=2))
        self.wait_waiting("waiters", 2)
        c = self.conn()
        t0 = now()
        r = c.request(acquire_req("waiters", k, id=3))
        self.assertRefused(r, "too_many_waiters")
        self.assertEqual(r.get("id"), 3)
        # Queued, it would wait for the holder (never released here) until
        # the scope's timeout, 20 s: a reply within a second is "at once".
        self.assertNotLate(c.last_t - t0, 1.0, "too_many_waiters must not wait")
        holder.request({"op": "release", "lease": lease})
        r = w1.recv()
        self.assertEqual(r.get("id"), 1, r)
        self.assertAdmitted(r)
        # w2 is next; w1's lease goes with its connection.
        w1.close()
        r = w2.recv()
        self.assertEqual(r.get("id"), 2, r)
        self.assertAdmitted(r)

    def test_default_key(self):
        c = self.conn()
        self.assertAdmitted(c.request({"op": "acquire", "scope": "dflt"}))
        # Same key "shared": the second one without a key is refused ...
        self.assertRefused(c.request({"op": "acquire", "scope": "dflt", "timeout_ms": 0}),
                           "limited", rule_prefix="max_concurrent")
        self.assertRefused(c.request(acquire_req("dflt", "shared", timeout_ms=0)), "limited")
        # ... while another key is independent.
        self.assertAdmitted(c.request(acquire_req("dflt", "other", timeout_ms=0)))

    def test_url_key_is_lowercased_host(self):
        c = self.conn()
        self.assertAdmitted(c.request({"op": "acquire", "scope": "byurl",
                                       "url": "http://WWW.Foo-Bar.ORG/a/b?c=d#e"}))
        self.assertRefused(c.request(acquire_req("byurl", "www.foo-bar.org", timeout_ms=0)),
                           "limited")
        self.assertRefused(c.request({"op": "acquire", "scope": "byurl", "timeout_ms": 0,
                                      "url": "https://www.foo-bar.org/other"}), "limited")
        self.assertAdmitted(c.request(acquire_req("byurl", "WWW.Foo-Bar.ORG", timeout_ms=0)))

    def test_unknown_scope(self):
        c = self.conn()
        self.assertRefused(c.request(acquire_req("no-such-scope", "k")), "unknown_scope")
        self.assertRefused(c.request({"op": "penalize", "scope": "no-such-scope", "key": "k",
                                      "retry_after_ms": 10}), "unknown_scope")


class PacingTest(ScopeCase):

    def test_min_delay_from_completion(self):
        d = 0.150
        recs = self.hammer("pace", self.key(), nclients=4, duration=2.0, hold=(0.0, 0.04))
        held = [(r.t_recv, r.t_rel) for r in recs]
        self.assertLessEqual(max_overlap(held), 1)
        gaps = self.gaps_release_to_admit(recs)
        self.assertGreater(len(gaps), 5)
        self.assertGreaterEqual(min(gaps), d - EPS, sorted(gaps)[:5])
        # Liveness: with waiters always queued, the next one goes at about D.
        gaps.sort()
        self.assertNotLate(gaps[len(gaps) // 2], d + SLACK, gaps, stalls=False)

    def test_min_delay_refusal(self):
        k = self.key()
        c = self.conn()
        lease = self.assertAdmitted(c.request(acquire_req("pace", k)))
        # Held: at most one lease per key.
        self.assertRefused(c.request(acquire_req("pace", k, timeout_ms=0)), "limited")
        t_rel = now()
        c.request({"op": "release", "lease": lease})
        r = c.request(acquire_req("pace", k, timeout_ms=0))
        self.assertRefused(r, "limited", rule_prefix="min_delay")
        self.assertLessEqual(r["retry_after_ms"], 150)
        self.assertGreaterEqual(r["retry_after_ms"], 150 - (c.last_t - t_rel) * 1000 - 2)

    def test_unreleased_lease_blocks_at_most_lease_ttl(self):
        ttl = 0.500
        k = self.key()
        a = self.conn()
        t_a_send = now()
        r = a.request(acquire_req("pace", k))
        t_a_recv = a.last_t
        lease = self.assertAdmitted(r)
        b = self.conn()
        t_b_send = now()
        r = b.request(acquire_req("pace", k, timeout_ms=3000))
        t_b = b.last_t
        self.assertAdmitted(r)
        # a's admission lies in [t_a_send, t_a_recv], b's in [lo_b, t_b].
        lo_b = t_b_send + r["waited_ms"] / 1000.0
        # Not before a's lease expired ...
        self.assertGreaterEqual(t_b - t_a_send, ttl - EPS)
        # ... and at its expiry: b polls at most every concurrency_retry,
        # bounded by the lease's deadline, so its last poll lands on it.
        # (Measured to b's admission, not to when this client got around
        # to reading the reply.)
        self.assertNotLate(lo_b - t_a_recv, ttl + SLACK, since=t_a_recv)
        # The expired lease's late release is a no-op and pushes nothing.
        r = a.request({"op": "release", "lease": lease})
        self.assertTrue(settled_nothing(r), r)
        self.assertRefused(b.request(acquire_req("pace", k, timeout_ms=0)), "limited")

    def test_budget_exceeded_answered_at_once(self):
        k = self.key()
        c = self.conn()
        lease = self.assertAdmitted(c.request(acquire_req("budget", k)))
        c.request({"op": "release", "lease": lease})
        t0 = now()
        r = c.request(acquire_req("budget", k, timeout_ms=500))
        took = c.last_t - t0
        self.assertRefused(r, "budget_exceeded", rule_prefix="min_delay")
        # The wait needed (~1s) is longer than the budget (500ms): the reply
        # comes at once. Sleeping the budget out would take >= 500ms.
        self.assertNotLate(took, 0.25)
        self.assertGreater(r["retry_after_ms"], 500)
        self.assertLessEqual(r["retry_after_ms"], 1000)
        # With a budget that covers the wait, the same request waits it out.
        t0 = now()
        r = c.request(acquire_req("budget", k, timeout_ms=1500))
        self.assertAdmitted(r)
        # Admitted 1 s after the release (before t0): by the daemon's wait.
        self.assertNotLate(r["waited_ms"] / 1000.0, 1.0 + SLACK, since=t0)

    def test_jitter_stretches_waits(self):
        d, f = 0.100, 0.5
        recs = self.hammer("jitter", self.key(), nclients=2, duration=2.5)
        gaps = self.gaps_release_to_admit(recs)
        self.assertGreater(len(gaps), 12)
        # A wait of D is stretched by a random 0..F of itself: [D, D(1+F)].
        self.assertGreaterEqual(min(gaps), d - EPS, gaps)
        # Upper bound: a wait of D stretched by at most F. Each gap less the
        # stalls measured inside it (harness.unstalled): a descheduled
        # client, or a daemon waiting for a CPU, is not over-stretching. One sample
        # may still be late by more than SLACK when the box is busy (a
        # 2-core box running several suites); a daemon that over-stretches
        # does so every time.
        late = sorted(unstalled(a.t_rel, b.t_recv) for a, b in zip(recs, recs[1:]))
        self.assertNotLate(late[-2], d * (1 + f) + SLACK, (late, gaps), stalls=False)
        self.assertNotLate(late[-1], d * (1 + f) + 3 * SLACK, (late, gaps), stalls=False)
        # Not all equal: with U(0, 50ms) stretches, 12+ samples spread over
        # more than 10ms except with probability < 1e-8.
        self.assertGreater(max(gaps) - min(gaps), 0.010, gaps)
        # And the stretch is real: the mean of U(0,50ms) is 25ms (sd of a
        # 12-sample mean ~4ms), so the mean gap is well above D + 5ms.
        self.assertGreater(sum(gaps) / len(gaps), d + 0.005, gaps)


class ClusterTest(ScopeCase):

    def test_cluster_concurrency_hammer(self):
        n, d = 3, 0.100
        # Holds of 250-500ms against admissions 100ms apart: without the cap
        # 3-5 leases would overlap, so the cap is what binds.
        recs = self.hammer("cluster", self.key(), nclients=6, duration=2.5, hold=(0.25, 0.5))
        held = [(r.t_recv, r.t_rel) for r in recs]
        self.assertLessEqual(max_overlap(held), n)
        self.assertGreaterEqual(max_overlap(held), 2)
        # Admissions at least min_delay apart (from sends): no two certainly
        # closer than that (EPS: the daemon's millisecond arithmetic).
        ivs = [(r.lo, r.hi) for r in recs]
        self.assertEqual(closer_than(ivs, d - EPS), [])
        # Liveness: with 6 clients queued, admissions come about every D
        # most of the time.
        his = [r.hi for r in recs]
        gaps = sorted(b - a for a, b in zip(his, his[1:]))
        self.assertNotLate(gaps[len(gaps) // 4], d + SLACK, gaps, stalls=False)

    def test_cap_of_one_paces_from_the_release(self):
        # cluster_concurrency 1: one lease in flight, so min_delay counts from
        # its release (as without the cap), never from the admission.
        k = self.key()
        a, b = self.conn(), self.conn()
        r = a.request(acquire_req("cluster1", k))
        t_a = a.last_t
        lease = self.assertAdmitted(r)
        b.send(acquire_req("cluster1", k, id="b"))
        self.wait_waiting("cluster1", 1)
        # Held longer than min_delay (300ms): b still waits min_delay after
        # the release (t_rel is read before the release is sent, b.last_t
        # after its admission's reply: the measured gap is never smaller).
        while now() < t_a + 0.400:
            time.sleep(0.005)  # the lease is held for 400ms on purpose
        t_rel = now()
        a.request({"op": "release", "lease": lease})
        r = b.recv()
        lease = self.assertAdmitted(r)
        self.assertGreaterEqual(b.last_t - t_rel, 0.300 - EPS)
        # the release wakes the head, which sleeps min_delay out
        self.assertNotLate(b.last_t - t_rel, 0.300 + 0.025 + SLACK, since=t_rel)

        # Released sooner than min_delay: the next admission is still
        # min_delay after the release.
        t_b = b.last_t
        a.send(acquire_req("cluster1", k, id="a2"))
        self.wait_waiting("cluster1", 1)
        while now() < t_b + 0.100:
            time.sleep(0.005)  # b's lease is held for 100ms on purpose
        t_rel = now()
        b.request({"op": "release", "lease": lease})
        r = a.recv()
        self.assertAdmitted(r)
        self.assertGreaterEqual(a.last_t - t_rel, 0.300 - EPS)
        self.assertNotLate(a.last_t - t_rel, 0.300 + 0.025 + SLACK, since=t_rel)

    def test_unreleased_lease_frees_slot_at_lease_ttl(self):
        ttl = 0.600
        k = self.key()
        a, b = self.conn(), self.conn()
        t_send = now()
        self.assertAdmitted(a.request(acquire_req("cluster1", k)))
        t_recv = a.last_t
        t_b_send = now()
        r = b.request(acquire_req("cluster1", k, timeout_ms=3000))
        self.assertAdmitted(r)
        self.assertGreaterEqual(b.last_t - t_send, ttl - EPS)
        # b's admission is no earlier than lo_b (see the module doc).
        lo_b = t_b_send + r["waited_ms"] / 1000.0
        self.assertNotLate(lo_b - t_recv, ttl + 0.025 + SLACK, since=t_recv)

    def test_max_concurrent_raised_to_cluster_concurrency(self):
        k = self.key()
        c = self.conn()
        for _ in range(3):
            self.assertAdmitted(c.request(acquire_req("raised", k, timeout_ms=1000)))
        self.assertRefused(c.request(acquire_req("raised", k, timeout_ms=0)), "limited")


class QuotaTest(ScopeCase):

    def test_quota_rolling_window(self):
        q, w = 5, 1.0
        recs = self.hammer("quota", self.key(), nclients=4, duration=2.2)
        admits = [r.t_recv for r in recs]
        # (Clients still waiting when the 2.2s are up are admitted in the
        # next window; the liveness count below only looks at 2.2s.)
        # In every interval of length W at most Q admissions: no Q+1 are
        # certainly inside one interval shorter than W.
        ivs = [(r.lo, r.hi) for r in recs]
        self.assertIsNone(crowded_window(ivs, w - EPS, q))
        # Liveness: Q at once, Q again one W later, and again: 15 in 2.2s
        # when the daemon is exact; at least two full windows' worth.
        first = [t for t in admits if t < admits[0] + 2.2]
        self.assertGreaterEqual(len(first), 2 * q)
        self.assertLessEqual(len(first), 3 * q)

    def test_quota_refusal(self):
        k = self.key()
        c = self.conn()
        t0 = now()
        for _ in range(5):
            self.assertAdmitted(c.request(acquire_req("quota", k, timeout_ms=0)))
        r = c.request(acquire_req("quota", k, timeout_ms=0))
        self.assertRefused(r, "limited", rule="quota 5/1s")
        self.assertLessEqual(r["retry_after_ms"], 1000)
        self.assertGreaterEqual(r["retry_after_ms"], 1000 - (c.last_t - t0) * 1000 - 2)


class StrategyTest(ScopeCase):
    """Each rule strategy, probed with timeout_ms 0 every ~2ms."""

    def check_bucket(self, scope, rule, amount, window, burst, duration=2.0):
        """token-bucket and leaky-bucket as a policer: over any span
        [T_i, T_j] at most burst + rate*(T_j - T_i) admissions (a violation
        is reported only when certain: with the longest span the brackets
        allow); the first `burst` probes are all admitted; and the daemon
        admits every unit as it becomes available (liveness)."""
        rate = amount / window
        admits, refusals, gap = self.probe(scope, self.key(), duration)
        first_refusal = refusals[0][0]
        self.assertEqual(len([a for a in admits if a[1] < first_refusal]), burst)
        for i in range(len(admits)):
            for j in range(i, len(admits)):
                # (+EPS: the daemon's clock is whole milliseconds.)
                longest = admits[j][1] - admits[i][0] + EPS
                self.assertLessEqual(j - i + 1, burst + rate * longest,
                                     (i, j, longest))
        span = max(admits[-1][1], refusals[-1][1]) - admits[0][0]
        # Each unit is taken within one probe gap (+ EPS) of appearing.
        self.assertGreaterEqual(len(admits), burst + rate * (span - gap - EPS) - 1)
        for _, _, r in refusals:
            self.assertRefused(r, "limited", rule=rule)
            self.assertLessEqual(r["retry_after_ms"], 1000 * window / amount + 1)

    def test_token_bucket(self):
        self.check_bucket("tbucket", "requests token-bucket 10/1s burst=5", 10, 1.0, 5)

    def test_leaky_bucket(self):
        self.check_bucket("leaky", "requests leaky-bucket 10/1s burst=5", 10, 1.0, 5)

    def bursts(self, admits, sep):
        """Split admissions into bursts separated by more than sep."""
        out = [[admits[0]]]
        for a, b in zip(admits, admits[1:]):
            if b[0] - a[1] > sep:
                out.append([])
            out[-1].append(b)
        return out

    def check_windows(self, scope, rule, amount, window, anchored, duration=2.2):
        admits, refusals, gap = self.probe(scope, self.key(), duration)
        bursts = self.bursts(admits, window / 2)
        if not anchored:
            # The first aligned window is entered at an arbitrary phase;
            # near its end the first burst can run into the next window's.
            bursts = bursts[1:]
        # Probing every ~2ms, each window's budget goes in one burst at its
        # start: exactly `amount` per window (the last may be cut off).
        self.assertGreaterEqual(len(bursts), 3, bursts)
        for b in bursts[:-1]:
            self.assertEqual(len(b), amount, bursts)
        self.assertLessEqual(len(bursts[-1]), amount)
        starts = [b[0] for b in bursts]
        for a, b in zip(starts, starts[1:]):
            # A new window begins W after the previous one began (aligned
            # or anchored); its burst starts at the first probe after that,
            # so consecutive burst starts are W apart give or take one gap.
            self.assertGreaterEqual(b[1] - a[0], window - gap - EPS, starts)
            self.assertLessEqual(b[0] - a[1], window + gap + EPS, starts)
        for _, _, r in refusals:
            self.assertRefused(r, "limited", rule=rule)
        if anchored:
            # Anchored at the first request: the first refusal waits for
            # W after that request. The elapsed time between the two
            # decisions lies within the brackets.
            first = admits[0]
            lo, hi, r = next(x for x in refusals if x[0] > first[1])
            got = r["retry_after_ms"] / 1000.0
            self.assertGreaterEqual(got, window - (hi - first[0]) - EPS)
            self.assertLessEqual(got, window - (lo - first[1]) + EPS)

    def test_fixed_window(self):
        self.check_windows("fixed", "requests fixed-window 5/500ms", 5, 0.5, anchored=False)

    def test_session_window(self):
        self.check_windows("session", "requests session-window 5/500ms", 5, 0.5, anchored=True)

    def test_sliding_window(self):
        amount, window, duration = 10, 1.0, 3.0
        admits, refusals, gap = self.probe("sliding", self.key(), duration)
        # A fresh counter: the first `amount` probes are all admitted.
        self.assertEqual(len([a for a in admits if a[1] < refusals[0][0]]), amount)
        # The weighted estimate never lets any W-long interval hold more
        # than the current bucket's budget plus the previous one's.
        ivs = [(lo, hi) for lo, hi, _ in admits]
        self.assertIsNone(crowded_window(ivs, window - EPS, 2 * amount))
        # After the first window the previous bucket's weight spreads the
        # admissions out (a fixed window would burst `amount` at each
        # boundary): about amount/W, never more than 4 in W/5 (admissions
        # come ~W/amount apart; two can meet at a bucket boundary).
        rest = [(lo, hi) for lo, hi in ivs if lo >= ivs[0][1] + window]
        # That spreading needs the probes to keep coming: while they pause
        # (this client or the daemon descheduled on a loaded box) the
        # estimate decays and the daemon rightly admits a burst when they
        # resume. So admissions near a pause of more than W/20 are left out
        # of it (never out of the limit checks above and below).
        probes = sorted(lo for lo, _, _ in admits + refusals)
        pauses = [(a, b) for a, b in zip(probes, probes[1:]) if b - a > window / 20]
        steady = [(lo, hi) for lo, hi in rest
                  if not any(a - window / 5 <= lo <= b + window / 5 for a, b in pauses)]
        self.assertIsNone(crowded_window(steady, window / 5, 4), (steady, pauses))
        span = duration - window
        self.assertGreaterEqual(len(rest), 0.7 * amount * span / window)
        self.assertLessEqual(len(rest), amount * span / window + 2)
        for _, _, r in refusals:
            self.assertRefused(r, "limited", rule="requests sliding-window 10/1s")

    def test_rules_checked_together_book_nothing_on_refusal(self):
        # Class "both" has rules a (fixed-window 5/1h) and b (token-bucket
        # 2/1h); class "onlya" has a. When b refuses, a must not be charged.
        k = self.key()
        c = self.conn()
        both, onlya = {"class": "both"}, {"class": "onlya"}
        for _ in range(2):
            self.assertAdmitted(c.request(acquire_req("twin", k, timeout_ms=0, **both)))
        for _ in range(20):
            self.assertRefused(c.request(acquire_req("twin", k, timeout_ms=0, **both)),
                               "limited", rule="requests token-bucket 2/1h")
        # a has 3 left only if the 20 refusals booked nothing.
        for _ in range(3):
            self.assertAdmitted(c.request(acquire_req("twin", k, timeout_ms=0, **onlya)))
        self.assertRefused(c.request(acquire_req("twin", k, timeout_ms=0, **onlya)),
                           "limited", rule="requests fixed-window 5/1h")


class TokenMeterTest(ScopeCase):

    def test_tokens_overdraw_then_wait(self):
        k = self.key()
        c = self.conn()
        lease = self.assertAdmitted(c.request(acquire_req("tokens", k, timeout_ms=0)))
        # Acquire charges nothing to a token meter; the release does.
        self.assertAdmitted(c.request(acquire_req("tokens", k, timeout_ms=0)))
        t_rel = now()
        r = c.request({"op": "release", "lease": lease, "tokens": {"input": 800, "output": 300}})
        t_booked = c.last_t  # the release was booked before its reply
        self.assertEqual(r, {"ok": True, "held": True})
        # 1100 charged to a 1000 bucket: overdrawn by 100 at 200 tokens/s.
        r = c.request(acquire_req("tokens", k, timeout_ms=0))
        self.assertRefused(r, "limited", rule="tokens token-bucket 1000/5s")
        elapsed_ms = (c.last_t - t_rel) * 1000
        self.assertGreaterEqual(r["retry_after_ms"], 500 - elapsed_ms - 2)
        self.assertLessEqual(r["retry_after_ms"], 520)
        # While overdrawn, acquires wait until it is paid back.
        t_send = now()
        r = c.request(acquire_req("tokens", k, timeout_ms=3000))
        self.assertAdmitted(r)
        self.assertGreaterEqual(c.last_t - t_rel, 0.500 - EPS)
        # Paid back 500ms after the release was booked (before t_booked);
        # the admission is no earlier than t_send + waited_ms.
        lo = t_send + r["waited_ms"] / 1000.0
        self.assertNotLate(lo - t_booked, 0.520 + SLACK, since=t_booked)

    def test_named_token_meter(self):
        k = self.key()
        c = self.conn()
        lease = self.assertAdmitted(c.request(acquire_req("tokname", k, timeout_ms=0)))
        # input is no meter of this scope: a typo would never be charged,
        # so the release is refused whole and settles nothing ...
        r = c.request({"op": "release", "lease": lease, "tokens": {"input": 100000, "output": 200}})
        self.assertEqual(r.get("error"), "bad_request", r)
        self.assertIn('"input"', r.get("message", ""))
        r = c.request({"op": "acquire", "scope": "tokname", "key": k, "timeout_ms": 0,
                       "reserve": {"inptu": 1}})
        self.assertEqual(r.get("error"), "bad_request", r)
        self.assertIn('"inptu"', r.get("message", ""))
        # ... and the lease is still there to release with its real count.
        self.assertEqual(c.request({"op": "release", "lease": lease, "tokens": {"output": 200}}),
                         {"ok": True, "held": True})
        # still 300 output tokens left.
        lease = self.assertAdmitted(c.request(acquire_req("tokname", k, timeout_ms=0)))
        c.request({"op": "release", "lease": lease, "tokens": {"output": 400}})
        r = c.request(acquire_req("tokname", k, timeout_ms=0))
        self.assertRefused(r, "limited", rule="tokens.output token-bucket 500/1h")
        # 100 over at 500/h: ~12 minutes.
        self.assertGreater(r["retry_after_ms"], 600000)
        t0 = now()
        r = c.request(acquire_req("tokname", k, timeout_ms=1000))
        self.assertRefused(r, "budget_exceeded", rule="tokens.output token-bucket 500/1h")
        # At once: sleeping the 1 s budget out would take >= 1 s.
        self.assertNotLate(c.last_t - t0, 0.5)


class ClassTest(ScopeCase):

    def test_floor_reserves_last_tokens(self):
        k = self.key()
        c = self.conn()
        rule = "requests token-bucket 10/1h"
        for i in range(7):
            self.assertAdmitted(c.request(acquire_req("classes", k, timeout_ms=0,
                                                      **{"class": "background"})))
        # background may not take the last 3 ...
        self.assertRefused(c.request(acquire_req("classes", k, timeout_ms=0,
                                                 **{"class": "background"})), "limited",
                           rule=rule)
        # ... main may.
        for i in range(3):
            self.assertAdmitted(c.request(acquire_req("classes", k, timeout_ms=0,
                                                      **{"class": "main"})))
        self.assertRefused(c.request(acquire_req("classes", k, timeout_ms=0,
                                                 **{"class": "main"})), "limited", rule=rule)

    def test_default_class(self):
        # default_class = background: a request without a class gets its floor.
        k = self.key()
        c = self.conn()
        for i in range(7):
            self.assertAdmitted(c.request(acquire_req("classes", k, timeout_ms=0)))
        self.assertRefused(c.request(acquire_req("classes", k, timeout_ms=0)), "limited",
                           rule="requests token-bucket 10/1h")
        self.assertAdmitted(c.request(acquire_req("classes", k, timeout_ms=0,
                                                  **{"class": "main"})))


class PenaltyTest(ScopeCase):

    def held_for(self, c, k):
        """The hold left on key k (ms), as the daemon reports it."""
        r = c.request(acquire_req("penal", k, timeout_ms=0))
        self.assertRefused(r, "limited", rule="penalty")
        return r["retry_after_ms"]

    def test_penalize_ms_holds_key(self):
        k = self.key()
        c = self.conn()
        t0 = now()
        r = c.request({"op": "penalize", "scope": "penal", "key": k, "retry_after_ms": 400})
        t1 = c.last_t
        self.assertTrue(r.get("ok"), r)
        left = self.held_for(c, k)
        self.assertLessEqual(left, 400)
        self.assertGreaterEqual(left, 400 - (c.last_t - t0) * 1000 - 2)
        t_send = now()
        r = c.request(acquire_req("penal", k, timeout_ms=2000))
        self.assertAdmitted(r)
        self.assertGreaterEqual(c.last_t - t0, 0.400 - EPS)
        # The hold ends 400ms after the penalize (booked before t1); the
        # admission is no earlier than t_send + waited_ms.
        lo = t_send + r["waited_ms"] / 1000.0
        self.assertNotLate(lo - t1, 0.400 + SLACK, since=t1)

    def test_penalize_never_shortens(self):
        k = self.key()
        c = self.conn()
        t0 = now()
        c.request({"op": "penalize", "scope": "penal", "key": k, "retry_after_ms": 5000})
        r = c.request({"op": "penalize", "scope": "penal", "key": k, "retry_after_ms": 100})
        self.assertTrue(r.get("ok"), r)
        r = c.request({"op": "penalize", "scope": "penal", "key": k, "retry_after": "1"})
        self.assertTrue(r.get("ok"), r)
        left = self.held_for(c, k)
        self.assertGreaterEqual(left, 5000 - (c.last_t - t0) * 1000 - 2)
        # A longer one does extend it.
        c.request({"op": "penalize", "scope": "penal", "key": k, "retry_after_ms": 8000})
        self.assertGreater(self.held_for(c, k), 7000)

    def test_penalize_retry_after_seconds(self):
        k = self.key()
        c = self.conn()
        t0 = now()
        r = c.request({"op": "penalize", "scope": "penal", "key": k, "retry_after": "2"})
        self.assertTrue(r.get("ok"), r)
        left = self.held_for(c, k)
        self.assertLessEqual(left, 2000)
        self.assertGreaterEqual(left, 2000 - (c.last_t - t0) * 1000 - 2)

    def test_penalize_http_date(self):
        k = self.key()
        c = self.conn()
        # HTTP-dates have whole seconds: formatdate drops the fraction, so
        # the hold ends within (3s, 4s] from now on the wall clock.
        wall = time.time()
        date = email.utils.formatdate(wall + 4, usegmt=True)
        r = c.request({"op": "penalize", "scope": "penal", "key": k, "retry_after": date})
        self.assertTrue(r.get("ok"), r)
        left = self.held_for(c, k)
        self.assertGreater(left, 2900)
        self.assertLessEqual(left, 4000 + 2)

    def test_penalize_by_url(self):
        c = self.conn()
        r = c.request({"op": "penalize", "scope": "penal", "url": "https://Example.COM/x?y=1",
                       "retry_after_ms": 3000})
        self.assertTrue(r.get("ok"), r)
        self.assertGreater(self.held_for(c, "example.com"), 2000)
        self.assertAdmitted(c.request(acquire_req("penal", "example.org", timeout_ms=0)))

    def test_penalize_budget_exceeded(self):
        k = self.key()
        c = self.conn()
        c.request({"op": "penalize", "scope": "penal", "key": k, "retry_after_ms": 3000})
        t0 = now()
        r = c.request(acquire_req("penal", k, timeout_ms=500))
        self.assertRefused(r, "budget_exceeded", rule="penalty")
        # At once: sleeping the 500ms budget out would take >= 500ms.
        self.assertNotLate(c.last_t - t0, 0.25)


class ShadowTest(ScopeCase):

    def test_shadow_admits_all_and_marks(self):
        k = self.key()
        c = self.conn()
        rs = [c.request(acquire_req("shadow", k, timeout_ms=0)) for _ in range(5)]
        for r in rs:
            self.assertAdmitted(r)
        for r in rs[:2]:
            self.assertFalse(r.get("shadow_limited", False), r)
        for r in rs[2:]:
            self.assertIs(r.get("shadow_limited"), True, r)
        # A request that would wait is admitted at once too.
        t0 = now()
        r = c.request(acquire_req("shadow", k, timeout_ms=5000))
        self.assertAdmitted(r)
        self.assertIs(r.get("shadow_limited"), True, r)
        self.assertNotLate(c.last_t - t0, 0.1)
