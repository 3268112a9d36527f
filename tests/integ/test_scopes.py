"""test_scopes.py - how many, how fast: concurrency, pacing, clusters, quota.

Owns: max_concurrent and concurrency rules (never exceeded, FIFO, the
whole timeout budget, too many waiters, default and URL keys), min_delay
pacing (from completion, refusals, an unreleased lease, jitter),
cluster_concurrency (a hammer, a cap of one, lease_ttl) and the rolling
quota, as invariants over timestamps. test_scopes_rules.py has the
strategies, token meters, classes, penalties and shadow mode; scope_case.py
the conf and ScopeCase, and the method these tests follow.
"""

import select
import time

from .harness import (EPS, IO_TIMEOUT, SLACK, acquire_req, closer_than, crowded_window,
                      max_overlap, now, settled_nothing, unstalled)

from .scope_case import ScopeCase


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
