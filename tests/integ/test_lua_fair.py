"""test_lua_fair.py - acquire.lua's queue across pods (fair = yes), called directly.

The real script in a real redis-server, with hand-made pods: tickets are
tagged by start-time fair queuing (the tenant's weight, the class's virtual
time), equal tags go by arrival; only the pod whose ticket is first takes
it; a first ticket of a pod gone, or of this pod's that it no longer lists,
is dropped; a waiter leaving gives its tenant's charge back when it was the
tenant's last; the tags go when the queue empties; an 'f' group is refused
while tickets wait.
"""

import unittest

from .test_lua_plain import ScriptCase, acquire_argv

TTL = 1500


class FairScriptTest(ScriptCase):
    n = 0

    def setUp(self):
        FairScriptTest.n += 1
        self.tag = "fair%d" % FairScriptTest.n
        self.fq, self.fs, self.fp = ("t:{%s}:fq:" % self.tag, "t:{%s}:fs:" % self.tag,
                                     "t:{%s}:fp" % self.tag)

    def call(self, pod, waiters, amount=1, window=1000, burst=1, ttl=TTL, holders=(), ovr=0):
        """One fair call of pod: waiters is a list of (wid, member, flow,
        weight, try); each is asked at cost 1 against one token bucket.
        Returns (admitted, code, ahead, left, dropped, {wid: (member, tag)})."""
        ids = ",".join("%032d" % i for i, _ in enumerate(waiters))
        general = acquire_argv(ids, 1, 0, "token-bucket", amount, window, burst, False)
        general[1] = str(len(waiters))
        keys = [self.fq, self.fs, self.fp] + list(holders) + [
            "t:{%s}:s" % self.tag, "t:{%s}:q" % self.tag, "t:{%s}:l" % self.tag,
            "t:{%s}:r0" % self.tag]
        argv = ["F", pod, str(ttl), str(len(waiters)), str(len(holders)), str(ovr)]
        for w in waiters:
            argv += [w[0], w[1], w[2], str(w[3]), "1" if w[4] else "0",
                     w[5] if len(w) > 5 else w[2]]
        r = self.conn.command("EVALSHA", self.sha, len(keys), *(keys + argv + general))
        acq, ahead, left, dropped = r[0], r[1], r[2], r[3]
        placed = {}
        for i, w in enumerate(waiters):
            if 4 + 2 * i < len(r):
                placed[w[0]] = (r[4 + 2 * i], r[5 + 2 * i])
        return acq[0], acq[2], ahead, left, dropped, placed

    def leave(self, member, cost=1):
        return self.conn.command("EVALSHA", self.sha, 2, self.fq, self.fs, "FL", member,
                                 str(cost))

    def tickets(self):
        r = self.conn.command("ZRANGE", self.fq, 0, -1, "WITHSCORES")
        return [(r[i].split("|")[2], float(r[i + 1])) for i in range(0, len(r), 2)]

    def test_nobody_waiting_admits_with_no_ticket(self):
        adm, code, _, left, _, placed = self.call("A", [("1", "", "", 1, False)], amount=5,
                                                  burst=5)
        self.assertEqual((adm, code, left), (1, -1, 0))
        self.assertEqual(self.conn.command("EXISTS", self.fq, self.fs, self.fp), 0)

    def test_refused_waiters_queue_in_order_and_the_owner_takes_the_first(self):
        # the bucket (1 unit) admits one; the other two take tickets
        adm, _, _, left, _, placed = self.call(
            "A", [("1", "", "", 1, False), ("2", "", "", 1, False)])
        self.assertEqual((adm, left), (1, 1))
        m2 = placed["2"][0]
        adm, code, ahead, left, _, placed = self.call("B", [("9", "", "", 1, False)])
        self.assertEqual((adm, code, ahead, left), (0, -9, 1, 2))
        m9 = placed["9"][0]
        self.assertEqual([w for w, _ in self.tickets()], ["2", "9"])
        # B is not first: refused by the queue, whatever the limit holds
        self.conn.command("DEL", "t:{%s}:r0" % self.tag)
        adm, code, ahead, _, _, _ = self.call("B", [("9", m9, "", 1, False)])
        self.assertEqual((adm, code, ahead), (0, -9, 1))
        # A's ticket is first: admitted, and leaves the queue
        adm, code, _, left, _, _ = self.call("A", [("2", m2, "", 1, False)])
        self.assertEqual((adm, left), (1, 1))
        self.assertEqual([w for w, _ in self.tickets()], ["9"])

    def test_weights_tag_tickets(self):
        self.call("A", [("0", "", "", 1, False)])  # takes the unit: the rest wait
        ws = [("g%d" % i, "", "gold", 4, False) for i in range(4)] + \
             [("b%d" % i, "", "", 1, False) for i in range(2)]
        self.call("A", ws)
        tags = dict(self.tickets())
        # gold's start tags 250 apart (1000 / 4), the default flow's 1000
        self.assertEqual([tags["g%d" % i] for i in range(4)], [0, 250, 500, 750])
        self.assertEqual([tags["b%d" % i] for i in range(2)], [0, 1000])
        order = [w for w, _ in self.tickets()]
        self.assertEqual(order[:2], ["g0", "b0"])  # equal tags: arrival
        self.assertEqual(order.index("b1"), 5)

    def test_a_dead_pods_first_tickets_are_dropped(self):
        self.call("A", [("0", "", "", 1, False)])
        self.call("A", [("1", "", "", 1, False)])
        _, _, _, _, _, placed = self.call("B", [("9", "", "", 1, False)])
        self.assertEqual([w for w, _ in self.tickets()], ["1", "9"])
        self.conn.command("DEL", "t:{%s}:r0" % self.tag)  # the limit has room
        self.conn.command("ZADD", self.fp, 1, "A")  # A's turn lapsed long ago
        adm, _, _, left, dropped, _ = self.call("B", [("9", placed["9"][0], "", 1, False)])
        self.assertEqual((adm, dropped, left), (1, 1, 0))
        self.assertEqual(self.tickets(), [])

    def test_own_unlisted_first_ticket_is_dropped(self):
        self.call("A", [("0", "", "", 1, False)])
        _, _, _, _, _, placed = self.call("A", [("1", "", "", 1, False),
                                                ("2", "", "", 1, False)])
        self.conn.command("DEL", "t:{%s}:r0" % self.tag)
        # waiter 1 left and its leave was lost: A lists only 2
        adm, _, _, left, dropped, _ = self.call("A", [("2", placed["2"][0], "", 1, False)])
        self.assertEqual((adm, dropped, left), (1, 1, 0))
        self.assertEqual(self.conn.command("EXISTS", self.fq, self.fs), 0)  # idle: tags go

    def test_a_try_takes_no_ticket_and_never_jumps(self):
        self.call("A", [("0", "", "", 1, False)])
        self.call("A", [("1", "", "", 1, False)])
        self.conn.command("DEL", "t:{%s}:r0" % self.tag)
        adm, code, _, _, _, placed = self.call("B", [("7", "", "", 1, True)])
        self.assertEqual((adm, code), (0, -9))
        self.assertEqual(placed["7"], ("", ""))
        self.assertEqual([w for w, _ in self.tickets()], ["1"])

    def test_leave_gives_the_last_tickets_charge_back(self):
        self.call("A", [("0", "", "", 1, False)])
        _, _, _, _, _, placed = self.call("A", [("1", "", "gold", 4, False),
                                                ("2", "", "gold", 4, False),
                                                ("3", "", "", 1, False)])
        self.assertEqual(float(self.conn.command("HGET", self.fs, "f:gold")), 500)
        self.assertEqual(self.leave(placed["1"][0]), 1)  # not gold's last: stays charged
        self.assertEqual(float(self.conn.command("HGET", self.fs, "f:gold")), 500)
        self.assertEqual(self.leave(placed["2"][0]), 1)  # gold's last: back to its start
        self.assertEqual(float(self.conn.command("HGET", self.fs, "f:gold")), 250)
        self.assertEqual(self.leave(placed["2"][0]), 0)  # a repeat changes nothing
        self.assertEqual(self.leave(placed["3"][0]), 1)
        self.assertEqual(self.conn.command("EXISTS", self.fq, self.fs), 0)

    def test_an_override_sets_a_tenants_weight(self):
        ak = "t:{%s}:a" % self.tag
        now = int(self.conn.command("TIME")[0]) * 1000
        self.conn.command("HSET", ak, "tw:acme", "4:%d" % (now + 60000),
                          "tw:old", "4:%d" % (now - 1), "tw:huge", "1000:%d" % (now + 60000))
        self.call("A", [("0", "", "", 1, False)])
        ws = [("a%d" % i, "", "", 1, False, "acme") for i in range(2)] + \
             [("o%d" % i, "", "", 1, False, "old") for i in range(2)] + \
             [("h%d" % i, "", "", 1, False, "huge") for i in range(2)]
        self.call("A", ws, ovr=2000)  # override_max = 2
        tags = dict(self.tickets())
        # acme: its own flow at weight 2 (4, bounded by 2 x its conf weight 1)
        self.assertEqual([tags["a0"], tags["a1"]], [0, 500])
        # old: the override ended: the default flow, weight 1
        self.assertEqual([tags["o0"], tags["o1"]], [0, 1000])
        self.assertEqual([tags["h0"], tags["h1"]], [0, 500])  # bounded too
        # no override taken by the scope (ovr 0): as the conf says (the default flow)
        self.call("A", [("z", "", "", 1, False, "acme")])
        self.assertEqual(dict(self.tickets())["z"], 2000)

    def test_a_class_before_holds_this_one_back(self):
        hk = "t:{%s}:fq:hi" % self.tag
        self.conn.command("ZADD", self.fp, 10**13, "B")  # pod B alive
        self.conn.command("ZADD", hk, 0, "000000000001|B|5||1")
        adm, code, ahead, left, _, placed = self.call("A", [("1", "", "", 1, False)],
                                                      amount=5, burst=5, holders=[hk])
        # the limit has room, but another pod's waiter of the class before waits
        self.assertEqual((adm, code, ahead), (0, -9, 1))
        self.assertNotEqual(placed["1"][0], "")  # it took a ticket of its own class
        # this pod's own tickets there are its own order's: no hold
        self.conn.command("ZREM", hk, "000000000001|B|5||1")
        self.conn.command("ZADD", hk, 0, "000000000002|A|6||1")
        adm, _, _, _, _, _ = self.call("A", [("1", placed["1"][0], "", 1, False)],
                                       amount=5, burst=5, holders=[hk])
        self.assertEqual(adm, 1)
        # a pod gone: its ticket there is dropped, and holds nobody
        self.conn.command("ZADD", hk, 0, "000000000003|C|7||1")
        adm, _, _, _, dropped, _ = self.call("A", [("2", "", "", 1, False)],
                                             amount=5, burst=5, holders=[hk])
        self.assertEqual((adm, dropped), (1, 1))

    def test_f_group_is_refused_while_tickets_wait(self):
        rk = "t:{%s}:r0" % self.tag
        grp = ["=", "1", "f", "token-bucket", "100", "1000", "100", "0", "0", "0", "1",
               "1", "0", "0"]
        r = self.conn.command("EVALSHA", self.sha, 2, rk, self.fq, *grp)
        self.assertEqual((r[1], r[3]), (1, -1))  # nobody waits: admitted
        self.conn.command("ZADD", self.fq, 0, "000000000001|B|9||1")
        r = self.conn.command("EVALSHA", self.sha, 2, rk, self.fq, *grp)
        self.assertEqual((r[1], r[3], r[7]), (0, -9, 0))  # refused, nothing booked ahead


if __name__ == "__main__":
    unittest.main()
