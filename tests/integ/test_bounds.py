"""test_bounds.py - the daemon's memory bounds, max_keys and max_leases.

max_keys: past it a new key evicts the least recently used key that has
nothing held or waiting, and its in-process state is forgotten (a key that
was limited admits again); a held or waited-on key is never evicted; when
no key can be evicted a new key is refused `unavailable`, saying why. The
key count and the evictions are read from `status`, exactly; RSS from
/proc/PID/status stays within a bound far below what the flood's keys
would take if they were all kept (about 290 bytes a key, tests/bench/
key_bytes.py). max_leases: beyond it an acquire is refused `unavailable`
saying why, a flood of detached leases holds exactly max_leases, and once
leases are released acquires succeed again. /metrics agrees: admitd_keys,
admitd_key_evictions_total, the unavailable acquires and the leases gauge.

RSS is not compared under valgrind (its own heap) or ASan (its quarantine
keeps freed blocks): the counts are checked there all the same.
"""

import json
import time
import unittest

from .harness import IO_TIMEOUT, VALGRIND, Admitd, _asan_build, acquire_req
from .metrics_http import metrics_port, parse, scrape, val

# A flood under valgrind is ~30x slower: fewer keys, same checks.
SCALE = 10 if VALGRIND else 1
RSS_CHECKED = not VALGRIND and not _asan_build()

CONF = """
[admitd]
max_keys = {max_keys}
max_leases = {max_leases}
metrics = 127.0.0.1:0

[scope lim]
rule = requests 1/1h

[scope conc]
max_concurrent = 1

# A key of its own that stays busy for an hour after a release: the idle
# sweep cannot free it, so only an eviction can make room.
[scope kept]
max_concurrent = 1
rule = requests 1000/1h

[scope free]
"""


def conf(max_keys=1000000, max_leases=100000):
    return CONF.format(max_keys=max_keys, max_leases=max_leases)


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/%d/status" % pid)


def pipeline(c, reqs):
    """Send every request at once, then read one reply each (in order)."""
    c.send(b"".join(json.dumps(r).encode() + b"\n" for r in reqs))
    return [c.recv() for _ in reqs]


class BoundsCase(unittest.TestCase):

    def flood(self, c, scope, keys, batch=500):
        """Acquire once on each key (timeout 0) and release each lease
        right away, batch by batch: the keys end idle, their state kept."""
        for at in range(0, len(keys), batch):
            part = keys[at:at + batch]
            got = pipeline(c, [acquire_req(scope, k, timeout_ms=0) for k in part])
            for k, r in zip(part, got):
                self.assertIs(r.get("ok"), True, (k, r))
            rel = pipeline(c, [{"op": "release", "lease": r["lease"]} for r in got])
            for r in rel:
                self.assertEqual(r, {"ok": True, "held": True})

    def status(self, c):
        st = c.request({"op": "status"})
        self.assertIs(st.get("ok"), True, st)
        return st


class MaxKeysTest(BoundsCase):

    def test_flood_of_distinct_keys_keeps_the_count_and_rss(self):
        max_keys, extra = 10000 // SCALE, 90000 // SCALE
        with Admitd(conf(max_keys=max_keys)) as d, d.connect() as c:
            self.flood(c, "lim", ["first-%d" % i for i in range(max_keys)])
            st = self.status(c)
            self.assertEqual((st["keys"], st["max_keys"], st["key_evictions"]),
                             (max_keys, max_keys, 0))
            # Kept: the key's bucket is spent for an hour.
            self.assertEqual(c.request(acquire_req("lim", "first-0", timeout_ms=0))["error"],
                             "limited")
            before = rss_kb(d.pid)
            self.flood(c, "lim", ["flood-%d" % i for i in range(extra)])
            after = rss_kb(d.pid)
            st = self.status(c)
            self.assertEqual(st["keys"], max_keys)
            self.assertEqual(st["scopes"]["lim"]["keys"], max_keys)
            self.assertEqual(st["key_evictions"], extra)
            self.assertEqual(st["leases"], 0)
            m = parse(scrape(metrics_port(d)))
            self.assertEqual((val(m, "admitd_keys"), val(m, "admitd_key_evictions_total")),
                             (max_keys, extra))
            # Evicted, and forgotten: the spent key admits again.
            self.assertIs(c.request(acquire_req("lim", "first-0", timeout_ms=0)).get("ok"), True)
            if RSS_CHECKED:
                # All 90,000 kept would be ~25 MiB more; the bound is a
                # fifth of that (malloc keeps some of what churned).
                self.assertLess(after - before, 5 * 1024,
                                "RSS grew from %d to %d kB over %d evicted keys"
                                % (before, after, extra))

    def test_held_and_waited_on_keys_are_never_evicted(self):
        with Admitd(conf(max_keys=100)) as d, d.connect() as c, d.connect() as holder, \
                d.connect() as waiter:
            held = holder.request(acquire_req("conc", "held", timeout_ms=0))
            self.assertIs(held.get("ok"), True, held)
            self.flood(c, "lim", ["waited"])  # spent: limited for an hour
            # Waits for conc/held's slot, naming lim/waited as a second target.
            waiter.send({"op": "acquire", "id": 7, "timeout_ms": 20000,
                         "targets": [{"scope": "conc", "key": "held"},
                                     {"scope": "lim", "key": "waited"}]})
            deadline = time.monotonic() + IO_TIMEOUT  # ends a failing test only
            while self.status(c)["scopes"]["conc"]["waiting"] != 1:
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.01)
            self.flood(c, "lim", ["k%d" % i for i in range(1000)], batch=50)
            st = self.status(c)
            self.assertEqual(st["keys"], 100)
            # 1002 keys were made (held, waited, k0..k999), 100 are kept.
            self.assertEqual(st["key_evictions"], 902)
            # Both kept with their state: the slot is still taken, the
            # bucket still spent (a forgotten key would admit).
            r = c.request(acquire_req("conc", "held", timeout_ms=0))
            self.assertEqual((r.get("error"), r.get("rule")), ("limited", "max_concurrent"), r)
            self.assertEqual(c.request(acquire_req("lim", "waited", timeout_ms=0))["error"],
                             "limited")
            # The release wakes the waiter, which finds lim/waited spent.
            self.assertEqual(holder.request({"op": "release", "lease": held["lease"]}),
                             {"ok": True, "held": True})
            r = waiter.recv()
            self.assertEqual((r.get("id"), r.get("error")), (7, "budget_exceeded"), r)

    def test_full_of_keys_in_use_refuses_a_new_key(self):
        with Admitd(conf(max_keys=100)) as d, d.connect() as c:
            leases = pipeline(c, [acquire_req("kept", "h%d" % i, timeout_ms=0)
                                  for i in range(100)])
            for r in leases:
                self.assertIs(r.get("ok"), True, r)
            r = c.request(acquire_req("kept", "new", timeout_ms=0))
            self.assertEqual(r.get("error"), "unavailable", r)
            self.assertIn("max_keys (100) reached", r["message"])
            self.assertIn("held, waited on", r["message"])
            # A kept key is still served (here: its slot is taken).
            r = c.request(acquire_req("kept", "h3", timeout_ms=0))
            self.assertEqual((r.get("error"), r.get("rule")), ("limited", "max_concurrent"), r)
            st = self.status(c)
            self.assertEqual((st["keys"], st["key_evictions"]), (100, 0))
            # One key released: the new key takes its place. It is evicted,
            # not swept: its rule's window holds state for an hour.
            self.assertEqual(c.request({"op": "release", "lease": leases[5]["lease"]}),
                             {"ok": True, "held": True})
            self.assertIs(c.request(acquire_req("kept", "new", timeout_ms=0)).get("ok"), True)
            st = self.status(c)
            self.assertEqual((st["keys"], st["key_evictions"]), (100, 1))
            m = parse(scrape(metrics_port(d)))
            self.assertEqual((val(m, "admitd_keys"), val(m, "admitd_key_evictions_total")),
                             (100, 1))
            # ... and it was h5 that went: h5 would be a new key again, and
            # every key kept is held now.
            r = c.request(acquire_req("kept", "h5", timeout_ms=0))
            self.assertEqual(r.get("error"), "unavailable", r)


class MaxLeasesTest(BoundsCase):

    def test_beyond_max_leases_is_unavailable_until_a_release(self):
        with Admitd(conf(max_leases=50)) as d, d.connect() as c:
            got = pipeline(c, [acquire_req("free", "k%d" % i, timeout_ms=0, detach=True)
                               for i in range(50)])
            for r in got:
                self.assertIs(r.get("ok"), True, r)
            r = c.request(acquire_req("free", "k50", timeout_ms=0, detach=True))
            self.assertEqual(r.get("error"), "unavailable", r)
            self.assertIn("max_leases (50) reached", r["message"])
            # A waiting acquire is refused too, not queued.
            r = c.request(acquire_req("free", "k51", timeout_ms=5000))
            self.assertEqual(r.get("error"), "unavailable", r)
            st = self.status(c)
            self.assertEqual((st["leases"], st["max_leases"]), (50, 50))
            self.assertEqual(st["scopes"]["free"]["refusals"], {"unavailable": 2})
            self.assertEqual(c.request({"op": "release", "lease": got[0]["lease"]}),
                             {"ok": True, "held": True})
            self.assertIs(c.request(acquire_req("free", "k50", timeout_ms=0)).get("ok"), True)
            r = c.request(acquire_req("free", "k52", timeout_ms=0))
            self.assertEqual(r.get("error"), "unavailable", r)

    def test_flood_of_detached_leases_holds_max_leases(self):
        n, cap = 40000 // SCALE, 1000
        with Admitd(conf(max_leases=cap)) as d, d.connect() as c:
            before = rss_kb(d.pid)
            ok = refused = 0
            for at in range(0, n, 1000):
                for r in pipeline(c, [acquire_req("free", "d%d" % i, timeout_ms=0, detach=True)
                                      for i in range(at, at + 1000)]):
                    if r.get("ok") is True:
                        ok += 1
                    else:
                        self.assertEqual(r.get("error"), "unavailable", r)
                        refused += 1
            after = rss_kb(d.pid)
            self.assertEqual((ok, refused), (cap, n - cap))
            st = self.status(c)
            self.assertEqual(st["leases"], cap)
            # Refused before a key is made: only the leases' keys are kept.
            self.assertEqual(st["keys"], cap)
            self.assertEqual(st["scopes"]["free"]["refusals"], {"unavailable": n - cap})
            m = parse(scrape(metrics_port(d)))
            self.assertEqual(val(m, "admitd_acquires_total", scope="free", outcome="unavailable"),
                             n - cap)
            self.assertEqual(val(m, "admitd_leases", scope="free"), cap)
            if RSS_CHECKED:
                # 40,000 detached leases kept would be over 20 MiB.
                self.assertLess(after - before, 4 * 1024,
                                "RSS grew from %d to %d kB" % (before, after))


if __name__ == "__main__":
    unittest.main()
