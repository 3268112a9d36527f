"""test_lifecycle.py - what happens to waiters and leases when clients come and go.

A client that vanishes while waiting books nothing; a client that closes
while holding a non-detached lease releases it; a detached lease survives
its connection and can be released from another; release is idempotent;
every lease expires at lease_ttl. Instants are bracketed as in
test_scopes.py (see harness.py for EPS and SLACK): an upper bound runs from
the latest the earlier event can have happened to the earliest the later
one can have (t_send + waited_ms for a waited admission).
"""

import socket
import time

from .harness import EPS, SLACK, DaemonCase, acquire_req, now, settled_nothing

CONF = """
[scope one]
max_concurrent = 1
timeout = 10s
lease_ttl = 400ms

[scope quota]
max_concurrent = 1
quota = 2/1m
timeout = 10s

[scope pace]
min_delay = 300ms
timeout = 10s

[scope long]
max_concurrent = 1
lease_ttl = 1m
timeout = 10s
"""


class LifecycleTest(DaemonCase):
    CONF = CONF

    def _vanishing_waiter_books_nothing(self, leave):
        """A waiter queued behind a holder leaves (leave(conn)); once the
        daemon has noticed, the holder's release must hand the slot to a
        newcomer at once: the vanished waiter booked nothing."""
        k = self.key()
        holder = self.conn()
        lease = self.assertAdmitted(holder.request(acquire_req("long", k)))
        w = self.daemon.connect()
        w.send(acquire_req("long", k))
        self.wait_waiting("long", 1)
        leave(w)
        # The daemon has noticed once its waiter count drops.
        self.wait_waiting("long", 0)
        holder.request({"op": "release", "lease": lease})
        # Had the vanished waiter been handed the slot, this would be refused.
        c = self.conn()
        self.assertAdmitted(c.request(acquire_req("long", k, timeout_ms=0)))
        self.assertEqual(self.status()["scopes"]["long"]["leases"], 1)

    def test_vanished_waiter_books_no_slot(self):
        self._vanishing_waiter_books_nothing(lambda w: w.close())

    def test_half_closed_client_still_gets_its_reply(self):
        # `echo REQUEST | socat - UNIX-CONNECT:...` shuts down its write side
        # after the line and keeps reading: the waiting acquire is answered,
        # then the daemon closes the connection, which releases the lease.
        k = self.key()
        holder = self.conn()
        lease = self.assertAdmitted(holder.request(acquire_req("long", k)))
        w = self.daemon.connect()
        w.send(acquire_req("long", k, id=7))
        self.wait_waiting("long", 1)
        w.sock.shutdown(socket.SHUT_WR)
        holder.request({"op": "release", "lease": lease})
        got = w.recv()
        self.assertAdmitted(got)
        self.assertEqual(got["id"], 7)
        self.assertTrue(w.closed_by_peer())
        # Closing released it: the key is free at once.
        c = self.conn()
        self.assertAdmitted(c.request(acquire_req("long", k, timeout_ms=0)))

    def test_half_closed_then_gone_waiter_books_nothing(self):
        # A client that first stops sending and then disappears is noticed
        # by the connection sweep (1 s), before any slot is handed to it.
        def leave(w):
            w.sock.shutdown(socket.SHUT_WR)
            w.close()

        self._vanishing_waiter_books_nothing(leave)

    def test_vanished_waiter_consumes_no_quota(self):
        k = self.key()
        holder = self.conn()
        lease = self.assertAdmitted(holder.request(acquire_req("quota", k)))  # quota 1 of 2
        w = self.daemon.connect()
        w.send(acquire_req("quota", k))
        self.wait_waiting("quota", 1)
        w.close()
        self.wait_waiting("quota", 0)
        holder.request({"op": "release", "lease": lease})
        c = self.conn()
        # Quota 2 of 2 is still there for a live client ...
        lease = self.assertAdmitted(c.request(acquire_req("quota", k, timeout_ms=0)))
        c.request({"op": "release", "lease": lease})
        # ... and only it: the quota is really counting.
        self.assertRefused(c.request(acquire_req("quota", k, timeout_ms=0)), "limited",
                           rule="quota 2/1m")

    def test_vanished_waiter_adds_no_delay(self):
        # min_delay 300ms from completion: a waiter that vanishes during the
        # pause must not push the next live client a further 300ms back.
        k = self.key()
        c = self.conn()
        lease = self.assertAdmitted(c.request(acquire_req("pace", k)))
        w = self.daemon.connect()
        w.send(acquire_req("pace", k))
        self.wait_waiting("pace", 1)
        t_rel = now()
        c.request({"op": "release", "lease": lease})
        t_booked = c.last_t  # the release was booked before its reply
        w.close()
        self.wait_waiting("pace", 0)
        t_send = now()
        r = c.request(acquire_req("pace", k, timeout_ms=2000))
        self.assertAdmitted(r)
        self.assertGreaterEqual(c.last_t - t_rel, 0.300 - EPS)
        # min_delay after the release, not another 300ms on top.
        lo = t_send + r["waited_ms"] / 1000.0
        self.assertNotLate(lo - t_booked, 0.300 + SLACK, since=t_booked)

    def test_closed_holder_releases_lease(self):
        k = self.key()
        a = self.daemon.connect()
        self.assertAdmitted(a.request(acquire_req("long", k)))
        b = self.conn()
        b.send(acquire_req("long", k, id="b"))
        self.wait_waiting("long", 1)
        t_close = now()
        a.close()
        r = b.recv()
        self.assertEqual(r.get("id"), "b")
        self.assertAdmitted(r)
        # At once, not at lease_ttl (1m): a second is "at once".
        self.assertNotLate(b.last_t - t_close, 1.0)

    def test_closed_holder_of_many_leases_releases_all(self):
        k1, k2 = self.key(), self.key()
        a = self.daemon.connect()
        # Two leases plus a pipelined waiter on the same connection.
        self.assertAdmitted(a.request(acquire_req("long", k1)))
        self.assertAdmitted(a.request(acquire_req("long", k2)))
        a.send(acquire_req("long", k1))
        self.wait_waiting("long", 1)
        a.close()
        self.wait_waiting("long", 0)
        c = self.conn()
        self.assertAdmitted(c.request(acquire_req("long", k1, timeout_ms=1000)))
        self.assertAdmitted(c.request(acquire_req("long", k2, timeout_ms=1000)))

    def test_detached_lease_survives_connection(self):
        k = self.key()
        a = self.daemon.connect()
        lease = self.assertAdmitted(a.request(acquire_req("long", k, detach=True)))
        a.close()
        b = self.conn()
        # Still held after the close: a waiter times out over a measured
        # 300ms (a released lease would admit it at once).
        t0 = now()
        self.assertRefused(b.request(acquire_req("long", k, timeout_ms=300)), "timeout")
        self.assertGreaterEqual(b.last_t - t0, 0.300 - EPS)
        self.assertEqual(self.status()["scopes"]["long"]["leases"], 1)
        # Another connection releases it.
        other = self.conn()
        self.assertEqual(other.request({"op": "release", "lease": lease}),
                         {"ok": True, "held": True})
        self.assertAdmitted(b.request(acquire_req("long", k, timeout_ms=0)))

    def test_release_idempotent(self):
        k = self.key()
        c = self.conn()
        lease = self.assertAdmitted(c.request(acquire_req("long", k)))
        self.assertEqual(c.request({"op": "release", "lease": lease}), {"ok": True, "held": True})
        r = c.request({"op": "release", "lease": lease})
        self.assertTrue(settled_nothing(r), r)
        # From another connection too.
        r = self.conn().request({"op": "release", "lease": lease})
        self.assertTrue(settled_nothing(r), r)

    def test_lease_expires_at_lease_ttl(self):
        ttl = 0.400
        k = self.key()
        a = self.conn()
        t_send = now()
        lease = self.assertAdmitted(a.request(acquire_req("one", k)))
        t_recv = a.last_t
        b = self.conn()
        t_b_send = now()
        r = b.request(acquire_req("one", k, timeout_ms=2000))
        self.assertAdmitted(r)
        self.assertGreaterEqual(b.last_t - t_send, ttl - EPS)
        lo_b = t_b_send + r["waited_ms"] / 1000.0
        self.assertNotLate(lo_b - t_recv, ttl + SLACK, since=t_recv)
        # The expired lease is gone: its release changes nothing.
        r = a.request({"op": "release", "lease": lease})
        self.assertTrue(settled_nothing(r), r)
        # And the new holder is unaffected by that stale release.
        self.assertRefused(a.request(acquire_req("one", k, timeout_ms=0)), "limited")

    def test_detached_lease_expires_at_lease_ttl(self):
        ttl = 0.400
        k = self.key()
        a = self.daemon.connect()
        t_send = now()
        self.assertAdmitted(a.request(acquire_req("one", k, detach=True)))
        t_recv = a.last_t
        a.close()
        b = self.conn()
        t_b_send = now()
        r = b.request(acquire_req("one", k, timeout_ms=2000))
        self.assertAdmitted(r)
        self.assertGreaterEqual(b.last_t - t_send, ttl - EPS)
        lo_b = t_b_send + r["waited_ms"] / 1000.0
        self.assertNotLate(lo_b - t_recv, ttl + SLACK, since=t_recv)

    def test_a_later_lease_expires_at_its_own_deadline(self):
        # One timer serves the leases of one lease_ttl, set for the oldest.
        # Released early, that oldest one leaves the timer set for its own
        # deadline: the next lease must still expire at its own, later one.
        ttl = 0.400
        k1, k2 = self.key(), self.key()
        a, b = self.conn(), self.conn()
        t1 = now()
        la = self.assertAdmitted(a.request(acquire_req("one", k1)))
        time.sleep(0.2)
        t2 = now()
        self.assertAdmitted(b.request(acquire_req("one", k2)))
        t2_recv = b.last_t
        self.assertEqual(a.request({"op": "release", "lease": la}), {"ok": True, "held": True})
        # past the first lease's deadline, before the second's: still held
        time.sleep(max(0.0, t1 + ttl + 0.05 - now()))
        if now() < t2 + ttl - 0.05:
            self.assertRefused(self.conn().request(acquire_req("one", k2, timeout_ms=0)),
                               "limited")
        c = self.conn()
        t_c = now()
        r = c.request(acquire_req("one", k2, timeout_ms=2000))
        self.assertAdmitted(r)
        self.assertGreaterEqual(c.last_t - t2, ttl - EPS)
        self.assertNotLate(t_c + r["waited_ms"] / 1000.0 - t2_recv, ttl + SLACK, since=t2_recv)

    def test_many_vanishing_waiters_leave_daemon_healthy(self):
        # 50 waiters vanish at once; then the queue still works in order.
        k = self.key()
        holder = self.conn()
        lease = self.assertAdmitted(holder.request(acquire_req("long", k)))
        ws = [self.daemon.connect() for _ in range(50)]
        for w in ws:
            w.send(acquire_req("long", k))
        self.wait_waiting("long", 50)
        t0 = now()
        for w in ws:
            w.close()
        self.wait_waiting("long", 0)
        # Each close is noticed at its EOF, not at a sweep or at lease_ttl.
        self.assertNotLate(now() - t0, 2.0)
        live = self.conn()
        live.send(acquire_req("long", k, id="live"))
        self.wait_waiting("long", 1)
        holder.request({"op": "release", "lease": lease})
        r = live.recv()
        self.assertEqual(r.get("id"), "live")
        self.assertAdmitted(r)
