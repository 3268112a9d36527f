"""test_scopes_rules.py - the rules of a scope: strategies, meters, classes, penalties.

Owns: each rate strategy (token and leaky bucket, fixed, session and
sliding windows), rules checked together booking nothing on a refusal,
token meters (overdraw, then wait; named meters), classes (floor, default
class), penalize (holds a key, never shortens, Retry-After in seconds or an
HTTP date, by URL, past the budget) and shadow mode, as invariants over
timestamps (the method: scope_case.py).
"""

import email.utils
import time

from .harness import EPS, SLACK, acquire_req, crowded_window, now

from .scope_case import ScopeCase


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
        self.assertGreaterEqual(len(bursts), 3, ("probe gap %.3fs" % gap, bursts))
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
