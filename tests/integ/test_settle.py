"""test_settle.py - a lease is settled exactly once, and only as issued.

A handle is what a client sends back: input, never authority. These tests
release the same lease again and again (from the issuing daemon, through
another one, after a restart), release handles that were never issued or
whose reservation was edited, and flood a Redis outage with forged
releases, against the real daemon and real redis-server processes; every
budget is read back (inspect's `remaining`, a refusal) and must be what
one settlement of what was booked leaves.
"""

import base64
import os
import signal
import time
import unittest

from . import harness
from .harness import Admitd, acquire_req, settled_nothing
from .redis_util import Pods, key_name, status, wait_backend

TOKENS = """
[scope llm]
rule = tokens.output fixed-window 5000/1h
lease_ttl = 30s
"""


def wait_for(cond, deadline, what, log=None):
    return harness._wait_until(cond, deadline, what, log)


def remaining(c, scope, key, rule_prefix="tokens.output"):
    ins = c.request({"op": "inspect", "scope": scope, "key": key})
    assert ins.get("ok"), ins
    return [x for x in ins["rules"] if x["rule"].startswith(rule_prefix)][0]["remaining"]


def handle(nonce, targets, reserve=()):
    """A lease handle as the daemon makes one (lease_id.h): any contents."""
    raw = bytearray([1])
    for scope, cls, key in targets:
        for f in (scope, cls, key):
            raw += f.encode() + b"\0"
    if reserve:
        raw += b"\0"
        for name, n in reserve:
            raw += name.encode() + b"\0" + str(n).encode() + b"\0"
    return nonce + "." + base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")


def decode(h):
    """(nonce, targets, reserve) of a handle."""
    nonce, b = h.split(".")
    raw = base64.urlsafe_b64decode(b + "=" * (-len(b) % 4))
    fields = raw[1:].split(b"\0")
    targets, i = [], 0
    while i < len(fields) and fields[i] != b"":
        targets.append(tuple(f.decode() for f in fields[i:i + 3]))
        i += 3
    rest = [f.decode() for f in fields[i + 1:] if f != b""]
    return nonce, targets, list(zip(rest[0::2], (int(x) for x in rest[1::2])))


class LocalSettleTest(unittest.TestCase):
    """In process: the daemon's own lease table is the record."""

    def test_a_repeated_release_refunds_nothing(self):
        with Admitd(TOKENS) as d:
            c = d.connect()
            r = c.request(acquire_req("llm", "k", reserve={"output": 1000}, detach=True))
            self.assertIs(r.get("ok"), True, r)
            self.assertEqual(remaining(c, "llm", "k"), 4000)
            self.assertEqual(c.request({"op": "release", "lease": r["lease"],
                                        "tokens": {"output": 1000}}), {"ok": True, "held": True})
            self.assertEqual(remaining(c, "llm", "k"), 4000)
            for _ in range(3):
                rel = c.request({"op": "release", "lease": r["lease"], "tokens": {"output": 0}})
                self.assertTrue(settled_nothing(rel), rel)
                # from another connection too
                with d.connect() as c2:
                    rel = c2.request({"op": "release", "lease": r["lease"]})
                    self.assertTrue(settled_nothing(rel), rel)
            self.assertEqual(remaining(c, "llm", "k"), 4000)

    def test_a_repeat_without_reservation_charges_once(self):
        with Admitd(TOKENS) as d:
            c = d.connect()
            r = c.request(acquire_req("llm", "k", detach=True))
            for _ in range(4):
                c.request({"op": "release", "lease": r["lease"], "tokens": {"output": 600}})
            self.assertEqual(remaining(c, "llm", "k"), 4400)

    def test_a_forged_handle_refunds_nothing(self):
        with Admitd(TOKENS) as d:
            c = d.connect()
            r = c.request(acquire_req("llm", "k", reserve={"output": 5000}, detach=True))
            self.assertIs(r.get("ok"), True, r)
            self.assertEqual(remaining(c, "llm", "k"), 0)
            forged = handle(os.urandom(16).hex(), [("llm", "", "k")], [("output", 10 ** 9)])
            rel = c.request({"op": "release", "lease": forged, "tokens": {"output": 0}})
            self.assertTrue(settled_nothing(rel), rel)
            # the real one's nonce with an edited reservation: this daemon
            # settles from its own record, whatever the handle claims
            nonce, targets, _ = decode(r["lease"])
            edited = handle(nonce, targets, [("output", 10 ** 9)])
            self.assertEqual(c.request({"op": "release", "lease": edited,
                                        "tokens": {"output": 5000}}), {"ok": True, "held": True})
            self.assertEqual(remaining(c, "llm", "k"), 0)
            st = c.request({"op": "status"})
            self.assertEqual(st["scopes"]["llm"]["leases"], 0, st)

    def test_a_late_release_settles_once(self):
        # A call that outlives lease_ttl: its tokens still settle, once.
        # The release must land after lease_ttl and within one more
        # lease_ttl of grace; aim for the middle, with a ttl wide enough
        # that the slack of a slow build (valgrind) fits in the half left.
        ttl_ms = max(300, round(6 * harness.SLACK * 1000))
        conf = TOKENS.replace("lease_ttl = 30s", f"lease_ttl = {ttl_ms}ms")
        with Admitd(conf) as d:
            c = d.connect()
            r = c.request(acquire_req("llm", "k", reserve={"output": 1000}))
            time.sleep(1.5 * ttl_ms / 1000)
            self.assertEqual(c.request({"op": "release", "lease": r["lease"],
                                        "tokens": {"output": 100}}), {"ok": True, "held": False})
            self.assertEqual(remaining(c, "llm", "k"), 4900)
            rel = c.request({"op": "release", "lease": r["lease"], "tokens": {"output": 0}})
            self.assertTrue(settled_nothing(rel), rel)
            self.assertEqual(remaining(c, "llm", "k"), 4900)

    def test_a_release_past_the_grace_changes_nothing(self):
        conf = TOKENS.replace("lease_ttl = 30s", "lease_ttl = 200ms")
        with Admitd(conf) as d:
            c = d.connect()
            r = c.request(acquire_req("llm", "k", reserve={"output": 1000}))
            time.sleep(0.6)  # lease_ttl, then one more lease_ttl of grace
            rel = c.request({"op": "release", "lease": r["lease"], "tokens": {"output": 0}})
            self.assertTrue(settled_nothing(rel), rel)
            self.assertEqual(remaining(c, "llm", "k"), 4000)  # the reservation stays booked


@unittest.skipIf(harness.VALGRIND, "timing seams; run under ASan instead of valgrind")
class RedisSettleTest(unittest.TestCase):
    """On Redis: the settlement record under the key's hash tag decides."""
    EXTRA = "redis_timeout = 200ms\n"

    def test_releases_through_two_daemons_settle_once(self):
        with Pods(TOKENS, n=2, admitd_extra=self.EXTRA) as cl:
            a, b = cl.daemons
            ca, cb = a.connect(), b.connect()
            r = ca.request(acquire_req("llm", "k", reserve={"output": 1000}, detach=True))
            self.assertEqual((r.get("ok"), r.get("backend")), (True, "redis"), r)
            lease = r["lease"]
            self.assertEqual(ca.request({"op": "release", "lease": lease,
                                         "tokens": {"output": 1000}}), {"ok": True, "held": True})
            wait_for(lambda: remaining(cb, "llm", "k") == 4000, 3.0, "the release settled")
            for c in (ca, cb, ca, cb, ca, cb, cb):
                rel = c.request({"op": "release", "lease": lease, "tokens": {"output": 0}})
                self.assertTrue(settled_nothing(rel, repeat=True), rel)
            self.assertEqual(remaining(cb, "llm", "k"), 4000)
            self.assertEqual(remaining(ca, "llm", "k"), 4000)

    def test_a_release_through_another_daemon_settles_once(self):
        with Pods(TOKENS, n=2, admitd_extra=self.EXTRA) as cl:
            a, b = cl.daemons
            ca, cb = a.connect(), b.connect()
            r = ca.request(acquire_req("llm", "k", reserve={"output": 1000}, detach=True))
            lease = r["lease"]
            # b did not issue it: Redis's record vouches for it, once; it
            # was live, so it was held, as its issuer would have said
            self.assertEqual(cb.request({"op": "release", "lease": lease,
                                         "tokens": {"output": 10}}), {"ok": True, "held": True})
            self.assertEqual(remaining(cb, "llm", "k"), 4990)
            # the issuer, told at its next heartbeat, holds it no more: a repeat
            wait_for(lambda: status(a)["leases"] == 0, 5.0, "the issuer let it go",
                     a.stderr_text)
            rel = ca.request({"op": "release", "lease": lease, "tokens": {"output": 0}})
            self.assertTrue(settled_nothing(rel, repeat=True), rel)
            time.sleep(0.2)
            self.assertEqual(remaining(cb, "llm", "k"), 4990)

    def test_forged_handles_settle_nothing_in_redis(self):
        with Pods(TOKENS, n=2, admitd_extra=self.EXTRA) as cl:
            a, b = cl.daemons
            ca, cb = a.connect(), b.connect()
            r = ca.request(acquire_req("llm", "k", reserve={"output": 5000}, detach=True))
            self.assertIs(r.get("ok"), True, r)
            self.assertEqual(remaining(cb, "llm", "k"), 0)
            forged = handle(os.urandom(16).hex(), [("llm", "", "k")], [("output", 10 ** 9)])
            rel = cb.request({"op": "release", "lease": forged, "tokens": {"output": 0}})
            self.assertTrue(settled_nothing(rel), rel)
            # a real nonce with an edited reservation, through a daemon that
            # must ask Redis: the record holds what was booked, not this
            nonce, targets, _ = decode(r["lease"])
            edited = handle(nonce, targets, [("output", 10 ** 9)])
            rel = cb.request({"op": "release", "lease": edited, "tokens": {"output": 0}})
            self.assertTrue(settled_nothing(rel), rel)
            self.assertEqual(remaining(cb, "llm", "k"), 0)
            # the real handle still settles: 4000 of 5000 used
            self.assertEqual(cb.request({"op": "release", "lease": r["lease"],
                                         "tokens": {"output": 4000}}), {"ok": True, "held": True})
            self.assertEqual(remaining(cb, "llm", "k"), 1000)
            self.assertEqual(status(b)["redis"].get("queued", 0), 0)

    def test_a_repeat_after_a_restart_settles_nothing(self):
        with Pods(TOKENS, n=1, admitd_extra=self.EXTRA) as cl:
            a = cl.daemons[0]
            with a.connect() as c:
                r = c.request(acquire_req("llm", "k", reserve={"output": 1000}, detach=True))
            a.stop()
            a.start()
            wait_backend(a, "redis", 5)
            with a.connect() as c:
                # its lease_ttl has not passed: held, as its issuer said
                self.assertEqual(c.request({"op": "release", "lease": r["lease"],
                                            "tokens": {"output": 200}}),
                                 {"ok": True, "held": True})
                self.assertEqual(remaining(c, "llm", "k"), 4800)
                a.proc.send_signal(signal.SIGTERM)
                a.proc.wait(10)
            a.start()
            wait_backend(a, "redis", 5)
            with a.connect() as c:
                rel = c.request({"op": "release", "lease": r["lease"], "tokens": {"output": 0}})
                self.assertTrue(settled_nothing(rel, repeat=True), rel)
                self.assertEqual(remaining(c, "llm", "k"), 4800)

    def test_a_release_through_a_daemon_whose_max_keys_is_full(self):
        # b keeps no key of the lease (its table is full of held keys): the
        # record in Redis is all the release needs, so it still settles.
        with Pods(TOKENS, n=2, admitd_extra=self.EXTRA + "max_keys = 2\n") as cl:
            a, b = cl.daemons
            ca, cb = a.connect(), b.connect()
            for k in ("f1", "f2"):
                self.assertIs(cb.request(acquire_req("llm", k)).get("ok"), True)
            full = cb.request(acquire_req("llm", "f3", timeout_ms=0))
            self.assertEqual(full.get("error"), "unavailable", full)
            r = ca.request(acquire_req("llm", "k", reserve={"output": 1000}, detach=True))
            self.assertEqual(cb.request({"op": "release", "lease": r["lease"],
                                         "tokens": {"output": 10}}), {"ok": True, "held": True})
            self.assertEqual(remaining(ca, "llm", "k"), 4990)

    def test_a_cap_slot_is_freed_once(self):
        conf = "[scope cap]\ncluster_concurrency = 1\nlease_ttl = 30s\n"
        with Pods(conf, n=2, admitd_extra=self.EXTRA) as cl:
            a, b = cl.daemons
            ca, cb = a.connect(), b.connect()
            first = ca.request(acquire_req("cap", "k", detach=True))
            self.assertEqual(cb.request({"op": "release", "lease": first["lease"]}),
                             {"ok": True, "held": True})
            second = cb.request(acquire_req("cap", "k", detach=True, timeout_ms=0))
            self.assertIs(second.get("ok"), True, second)
            # the first lease's handle again, through either: the second holder
            # keeps its slot (the issuer was told at its heartbeat: a repeat)
            wait_for(lambda: status(a)["leases"] == 0, 5.0, "the issuer let it go",
                     a.stderr_text)
            for c in (cb, ca):
                rel = c.request({"op": "release", "lease": first["lease"]})
                self.assertTrue(settled_nothing(rel, repeat=True), rel)
            time.sleep(0.2)
            self.assertEqual(int(cl.redis.command("ZCARD", key_name("admitd", "cap", "k", "l"))),
                             1)
            r = cb.request(acquire_req("cap", "k", timeout_ms=0))
            self.assertIs(r.get("ok"), False, r)


CLASSES = """
[scope llm]
rule ra = tokens.output fixed-window 5000/1h
rule rb = tokens.output fixed-window 5000/1h
class a = ra
class b = rb
lease_ttl = 30s
"""


def mismatched(rel):
    """Is rel the answer to a handle whose record binds another one?"""
    return settled_nothing(rel) and "not the one issued" in rel["message"]


def class_remaining(c, cls, key="k"):
    ins = c.request({"op": "inspect", "scope": "llm", "key": key, "class": cls})
    assert ins.get("ok"), ins
    assert len(ins["rules"]) == 1, ins  # the class's one rule
    return ins["rules"][0]["remaining"]


@unittest.skipIf(harness.VALGRIND, "timing seams; run under ASan instead of valgrind")
class ForeignHandleTest(unittest.TestCase):
    """A handle another daemon settles is checked against the record in
    Redis in every field: an edited class, scope, key or reservation
    settles nothing, and what is refunded is what the record says was
    charged."""
    EXTRA = "redis_timeout = 200ms\n"

    def test_an_edited_class_refunds_nothing(self):
        with Pods(CLASSES, n=2, admitd_extra=self.EXTRA) as cl:
            a, b = cl.daemons
            ca, cb = a.connect(), b.connect()
            # class b spends all of rb
            spent = ca.request(acquire_req("llm", "k", **{"class": "b"},
                                           reserve={"output": 5000}, detach=True))
            self.assertIs(spent.get("ok"), True, spent)
            self.assertEqual(class_remaining(cb, "b"), 0)
            r = ca.request(acquire_req("llm", "k", **{"class": "a"},
                                       reserve={"output": 2000}, detach=True))
            self.assertEqual((r.get("ok"), r.get("backend")), (True, "redis"), r)
            self.assertEqual(class_remaining(cb, "a"), 3000)
            nonce, targets, reserve = decode(r["lease"])
            self.assertEqual(targets, [("llm", "a", "k")])
            edited = handle(nonce, [("llm", "b", "k")], reserve)
            rel = cb.request({"op": "release", "lease": edited, "tokens": {"output": 0}})
            self.assertTrue(mismatched(rel), rel)
            time.sleep(0.2)
            self.assertEqual(class_remaining(cb, "b"), 0)  # rb got nothing back
            self.assertEqual(class_remaining(cb, "a"), 3000)
            more = cb.request(acquire_req("llm", "k", **{"class": "b"},
                                          reserve={"output": 2000}, timeout_ms=0))
            self.assertIs(more.get("ok"), False, more)
            # the real handle, through the same daemon, still settles: on ra
            self.assertEqual(cb.request({"op": "release", "lease": r["lease"],
                                         "tokens": {"output": 500}}),
                             {"ok": True, "held": True})
            self.assertEqual(class_remaining(cb, "a"), 4500)
            self.assertEqual(class_remaining(cb, "b"), 0)

    def test_edited_scope_key_or_targets_settle_nothing(self):
        conf = CLASSES + "\n[scope other]\nrule ra = tokens.output fixed-window 5000/1h\n" \
            "class a = ra\nlease_ttl = 30s\n"
        with Pods(conf, n=2, admitd_extra=self.EXTRA) as cl:
            a, b = cl.daemons
            ca, cb = a.connect(), b.connect()
            r = ca.request({"op": "acquire", "detach": True, "reserve": {"output": 2000},
                            "targets": [{"scope": "llm", "key": "k", "class": "a"},
                                        {"scope": "other", "key": "j", "class": "a"}]})
            self.assertIs(r.get("ok"), True, r)
            nonce, targets, reserve = decode(r["lease"])
            edits = [
                [("llm", "a", "k")],                       # a target dropped
                [("other", "a", "j"), ("llm", "a", "k")],  # reordered
                [("llm", "a", "k2"), ("other", "a", "j")],  # a key edited
                [("other", "a", "k"), ("llm", "a", "j")],  # scopes swapped
                [("llm", "a", "k"), ("other", "a", "j"), ("llm", "b", "k")],  # one added
            ]
            for targets_ in edits:
                rel = cb.request({"op": "release", "lease": handle(nonce, targets_, reserve),
                                  "tokens": {"output": 0}})
                self.assertTrue(settled_nothing(rel), (targets_, rel))
            rel = cb.request({"op": "release", "lease": handle(nonce, targets, [("output", 1999)]),
                              "tokens": {"output": 0}})
            self.assertTrue(mismatched(rel), rel)
            time.sleep(0.2)
            self.assertEqual(class_remaining(cb, "a"), 3000)
            ins = cb.request({"op": "inspect", "scope": "other", "key": "j", "class": "a"})
            self.assertEqual(ins["rules"][0]["remaining"], 3000, ins)
            self.assertEqual(cb.request({"op": "release", "lease": r["lease"],
                                         "tokens": {"output": 100}}),
                             {"ok": True, "held": True})
            self.assertEqual(class_remaining(cb, "a"), 4900)
            ins = cb.request({"op": "inspect", "scope": "other", "key": "j", "class": "a"})
            self.assertEqual(ins["rules"][0]["remaining"], 4900, ins)


@unittest.skipIf(harness.VALGRIND, "timing seams; run under ASan instead of valgrind")
class ForeignLiveReleaseTest(unittest.TestCase):
    """A live lease released through another daemon is held (as its issuer
    would say), and its issuer stops counting it within a heartbeat."""
    EXTRA = "redis_timeout = 200ms\nmax_leases = 3\n"

    def test_the_issuer_frees_the_slot_well_before_lease_ttl(self):
        conf = TOKENS.replace("lease_ttl = 30s", "lease_ttl = 60s")
        with Pods(conf, n=2, admitd_extra=self.EXTRA) as cl:
            a, b = cl.daemons
            ca, cb = a.connect(), b.connect()
            leases = []
            for i in range(3):
                r = ca.request(acquire_req("llm", "k%d" % i, reserve={"output": 100},
                                           detach=True))
                self.assertEqual((r.get("ok"), r.get("backend")), (True, "redis"), r)
                leases.append(r["lease"])
            full = ca.request(acquire_req("llm", "k9", timeout_ms=0, detach=True))
            self.assertEqual(full.get("error"), "unavailable", full)
            t0 = time.monotonic()
            for lease in leases:
                self.assertEqual(cb.request({"op": "release", "lease": lease,
                                             "tokens": {"output": 10}}),
                                 {"ok": True, "held": True})
            # the issuer learns at its next heartbeat (1 s): well within lease_ttl
            wait_for(lambda: status(a)["leases"] == 0, 10.0,
                     "the issuer stopped counting the leases", a.stderr_text)
            took = time.monotonic() - t0
            self.assertLess(took, 10.0)
            got = []
            for i in range(3):
                r = ca.request(acquire_req("llm", "n%d" % i, timeout_ms=0, detach=True))
                self.assertIs(r.get("ok"), True, r)
                got.append(r["lease"])
            # a release of the settled ones through their issuer: a repeat
            for lease in leases:
                rel = ca.request({"op": "release", "lease": lease, "tokens": {"output": 0}})
                self.assertTrue(settled_nothing(rel, repeat=True), rel)
            self.assertEqual(remaining(ca, "llm", "k0"), 4990)
            print("test_settle: the issuer freed 3 slots settled elsewhere in %.2fs "
                  "(lease_ttl 60s)" % took)

    def issued(self, cl):
        """A detached lease (reserving 1000) of cl's first daemon, through
        Redis: (that daemon, a connection to it, one to the second, reply)."""
        a, b = cl.daemons
        ca, cb = a.connect(), b.connect()
        r = ca.request(acquire_req("llm", "k", reserve={"output": 1000}, detach=True))
        self.assertEqual((r.get("ok"), r.get("backend")), (True, "redis"), r)
        return a, ca, cb, r

    def test_a_lease_booked_again_after_redis_lost_it_settles_elsewhere(self):
        # Redis loses its data; the issuer books the lease again (its
        # record too): another daemon then settles it through that record.
        conf = TOKENS.replace("lease_ttl = 30s", "lease_ttl = 60s\ncluster_concurrency = 5")
        with Pods(conf, n=2, admitd_extra=self.EXTRA) as cl:
            a, ca, cb, r = self.issued(cl)
            cl.redis.command("FLUSHALL")
            wait_for(lambda: status(a)["redis"]["rebooked"] >= 1, 10.0, "the lease rebooked",
                     a.stderr_text)
            self.assertEqual(cb.request({"op": "release", "lease": r["lease"],
                                         "tokens": {"output": 10}}), {"ok": True, "held": True})
            wait_for(lambda: status(a)["leases"] == 0, 10.0, "the issuer let it go",
                     a.stderr_text)
            self.assertEqual(int(cl.redis.command("ZCARD", key_name("admitd", "llm", "k", "l"))),
                             0)

    def test_an_expired_lease_released_elsewhere_is_not_held(self):
        conf = TOKENS.replace("lease_ttl = 30s", "lease_ttl = 500ms")
        with Pods(conf, n=2, admitd_extra=self.EXTRA) as cl:
            _, _, cb, r = self.issued(cl)
            time.sleep(0.7)
            self.assertEqual(cb.request({"op": "release", "lease": r["lease"],
                                         "tokens": {"output": 10}}),
                             {"ok": True, "held": False})


@unittest.skipIf(harness.VALGRIND, "timing seams; run under ASan instead of valgrind")
class OutageQueueTest(unittest.TestCase):
    EXTRA = "redis_timeout = 100ms\n"

    def test_forged_releases_in_an_outage_are_never_queued(self):
        conf = "[scope cap]\ncluster_concurrency = 2\nlease_ttl = 30s\n"
        with Pods(conf, n=1, admitd_extra=self.EXTRA) as cl:
            a = cl.daemons[0]
            c = a.connect()
            r = c.request(acquire_req("cap", "k", detach=True))
            self.assertEqual((r.get("ok"), r.get("backend")), (True, "redis"), r)
            cl.redis.pause()
            try:
                wait_backend(a, "fallback", 5)
                self.assertEqual(c.request({"op": "release", "lease": r["lease"]}),
                                 {"ok": True, "held": True})
                self.assertEqual(status(a)["redis"]["queued"], 1)
                # 20,000 handles never issued, pipelined 500 at a time
                n, errors = 20000, 0
                for base in range(0, n, 500):
                    c.send("".join(harness.json.dumps({
                        "op": "release", "id": i,
                        "lease": handle(os.urandom(16).hex(), [("cap", "", "k%d" % i)])}) + "\n"
                        for i in range(base, base + 500)))
                    for _ in range(500):
                        errors += c.recv().get("error") == "unavailable"
                self.assertEqual(errors, n)
                st = status(a)
                self.assertEqual(st["redis"]["queued"], 1, st["redis"])
            finally:
                cl.redis.resume()
            wait_backend(a, "redis", 5)
            wait_for(lambda: int(cl.redis.command(
                "ZCARD", key_name("admitd", "cap", "k", "l"))) == 0, 3.0,
                "the queued real release sent", a.stderr_text)
            self.assertEqual(status(a)["redis"].get("dropped", 0), 0)


def reload(d, text):
    """Rewrite d's conf and SIGHUP it; wait until it says it reloaded."""
    before = d.stderr_text().count('msg="conf reloaded')
    tmp = d.conf_path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, d.conf_path)
    d.conf_text = text
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: d.stderr_text().count('msg="conf reloaded') > before, 10.0,
             "the conf reloaded", d.stderr_text)


@unittest.skipIf(harness.VALGRIND, "timing seams; run under ASan instead of valgrind")
class ReloadSettleTest(unittest.TestCase):
    EXTRA = "redis_timeout = 100ms\n"

    def test_a_release_queued_across_two_reloads(self):
        # Reload, a detached lease, Redis down, its release queued, another
        # reload (the first conf can go), Redis back: the queued release
        # names its scope, not the freed conf, and reaches Redis.
        conf = "[scope cap]\ncluster_concurrency = 2\nlease_ttl = 30s\n"
        with Pods(conf, n=1, admitd_extra=self.EXTRA) as cl:
            a = cl.daemons[0]
            reload(a, a.conf_text + "jitter = 0.1\n")
            c = a.connect()
            r = c.request(acquire_req("cap", "k", detach=True))
            self.assertEqual((r.get("ok"), r.get("backend")), (True, "redis"), r)
            cl.redis.pause()
            try:
                wait_backend(a, "fallback", 5)
                self.assertEqual(c.request({"op": "release", "lease": r["lease"]}),
                                 {"ok": True, "held": True})
                self.assertEqual(status(a)["redis"]["queued"], 1)
                reload(a, a.conf_text.replace("jitter = 0.1", "jitter = 0.2"))
                time.sleep(0.3)  # the replaced confs are freed on the next ticks
            finally:
                cl.redis.resume()
            wait_backend(a, "redis", 5)
            wait_for(lambda: int(cl.redis.command(
                "ZCARD", key_name("admitd", "cap", "k", "l"))) == 0, 3.0,
                "the queued release sent", a.stderr_text)
            self.assertIsNone(a.proc.poll())
            self.assertEqual(c.request({"op": "ping"}), {"ok": True})

    def test_tokens_released_after_a_reload_to_local_mode_are_charged(self):
        rs = harness.RedisServer().start()
        self.addCleanup(rs.cleanup)
        d = Admitd("[admitd]\n" + TOKENS)
        head = "[admitd]\nsocket = %s\n" % d.sock_path
        d.conf_text = head + "redis = %s\n%s" % (rs.url, self.EXTRA) + TOKENS
        with open(d.conf_path, "w") as f:
            f.write(d.conf_text)
        with d:
            c = d.connect()
            r = c.request(acquire_req("llm", "k", reserve={"output": 100}, detach=True))
            self.assertEqual((r.get("ok"), r.get("backend")), (True, "redis"), r)
            reload(d, head + TOKENS)
            self.assertEqual(c.request({"op": "status"})["backend"], "local")
            self.assertEqual(c.request({"op": "release", "lease": r["lease"],
                                        "tokens": {"output": 3000}}), {"ok": True, "held": True})
            # Redis was not told: this daemon now decides, and counts them
            self.assertEqual(remaining(c, "llm", "k"), 2000)

if __name__ == "__main__":
    unittest.main()
