"""test_reload.py - a conf re-read while the daemon runs (SIGHUP, watch_conf).

A raised limit applies at once, to a waiter already queued and to the next
acquire, while a lease held before the reload is still released with
held:true; a reload refills nothing: a limit it did not change keeps its
state whatever its place or spelling in the new conf, one changed in place
goes on from its usage (in process as in Redis), one of another strategy
starts fresh; a conf with an error is refused whole, each problem logged as
file:line: message, and the old limits stay enforced; a removed scope's
waiter is answered unknown_scope while its lease stays releasable; the same
reload through watch_conf after a Kubernetes ConfigMap-style symlink swap;
a truncated conf (no scope left) is refused and acquires go on, by
SIGHUP and through watch_conf's truncate-then-slow-write; watch_conf on a
conf that is a symlink into another directory sees its target change;
[admitd] keys that need a restart are logged and kept; a change of `redis`
moves the next acquires to the new Redis. Each test runs its own daemon
(its conf is rewritten) and waits for the daemon's own log line saying the
reload was applied or refused, then reads the outcome counters from status.
"""

import os
import re
import shutil
import signal
import time
import unittest
import urllib.request

from .harness import IO_TIMEOUT, Admitd, RedisServer, _wait_until, acquire_req

RELOAD_DEADLINE = 10.0


def header(d, extra=""):
    return "[admitd]\nsocket = %s\n%s\n" % (d.sock_path, extra)


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


class ReloadCase(unittest.TestCase):
    def start(self, body, extra="", **kw):
        d = Admitd("[admitd]\n%s\n%s" % (extra, body), **kw)
        # the harness passes --socket; the conf names the same path
        d.conf_text = d.conf_text.replace("[admitd]\n", "[admitd]\nsocket = %s\n" % d.sock_path, 1)
        with open(d.conf_path, "w") as f:
            f.write(d.conf_text)
        d.start()
        self.addCleanup(d.cleanup)
        self.d = d
        return d

    def conn(self):
        c = self.d.connect()
        self.addCleanup(c.close)
        return c

    def reloads(self):
        r = self.conn().request({"op": "status"})
        self.assertTrue(r["ok"], r)
        return r["reloads"]

    def log_count(self, what):
        return self.d.stderr_text().count('msg="%s' % what)

    def wait_log(self, what, before):
        _wait_until(lambda: self.log_count(what) > before, RELOAD_DEADLINE,
                    "the daemon to log %s" % what, self.d.stderr_text)

    def reload(self, body, extra="", expect="conf reloaded", signal_it=True):
        """Rewrite the conf (header + body) and SIGHUP; wait for `expect`."""
        before = self.log_count(expect)
        write_atomic(self.d.conf_path, header(self.d, extra) + body)
        if signal_it:
            self.d.proc.send_signal(signal.SIGHUP)
        self.wait_log(expect, before)

    def acq(self, c, scope, key, **kw):
        kw.setdefault("timeout_ms", 0)
        return c.request(acquire_req(scope, key, **kw))


class ReloadTest(ReloadCase):
    def test_raised_limit_applies_at_once_and_old_lease_releases_held(self):
        self.start("[scope s]\nmax_concurrent = 1\nlease_ttl = 1m\ntimeout = 20s\n")
        c1, c2, c3 = self.conn(), self.conn(), self.conn()
        held = self.acq(c1, "s", "k")
        self.assertTrue(held["ok"], held)
        r = self.acq(c3, "s", "k")
        self.assertEqual((r["ok"], r["error"], r["rule"]), (False, "limited", "max_concurrent"))
        # a waiter queued behind the held lease, with a 20 s budget
        c2.send(acquire_req("s", "k", timeout_ms=20000))
        with self.assertRaises(TimeoutError):  # it waits
            c2.recv_line(timeout=0.3)
        t0 = time.monotonic()
        self.reload("[scope s]\nmax_concurrent = 3\nlease_ttl = 1m\ntimeout = 20s\n")
        w = c2.recv(timeout=IO_TIMEOUT)
        self.assertTrue(w["ok"], w)
        # admitted by the reload, not by its budget running out
        self.assertLess(time.monotonic() - t0, 5.0)
        r = self.acq(c3, "s", "k")
        self.assertTrue(r["ok"], r)
        r = self.acq(c3, "s", "k")
        self.assertEqual((r["ok"], r["error"], r["rule"]), (False, "limited", "max_concurrent"))
        # the lease held before the reload is still this daemon's to release
        rel = c1.request({"op": "release", "lease": held["lease"]})
        self.assertEqual(rel, {"ok": True, "held": True})
        r = self.acq(c3, "s", "k")
        self.assertTrue(r["ok"], r)
        self.assertEqual(self.reloads(), {"ok": 1, "error": 0})

    def test_limits_of_a_waiter_name_the_conf_that_answers_it(self):
        # a waiter decided under one conf, answered under the next: its limits
        # never name a rule of the replaced conf (freed with it)
        body = ("[scope s]\nrule %s = concurrency 1\nrule = requests fixed-window 50/1h\n"
                "class x = %s\ndefault_class = x\nlease_ttl = 1m\n")
        self.start(body % ("old", "old"))
        c1, c2 = self.conn(), self.conn()
        held = self.acq(c1, "s", "k")
        self.assertEqual(held["limits"]["concurrency"]["rule"], "old", held)
        c2.send(acquire_req("s", "k", timeout_ms=1500))
        with self.assertRaises(TimeoutError):  # it waits for the slot
            c2.recv_line(timeout=0.3)
        self.reload(body % ("new", "new"))
        w = c2.recv(timeout=IO_TIMEOUT)
        self.assertEqual(w["error"], "timeout", w)
        for meter, lim in w.get("limits", {}).items():
            self.assertNotEqual(lim["rule"], "old", w)
        r = self.acq(c1, "s", "k2")
        self.assertEqual(r["limits"]["concurrency"]["rule"], "new", r)

    def test_no_refill_moved_rule_keeps_state_changed_one_goes_on(self):
        self.start("[scope keep]\nrule = requests 3/1h\n"
                   "[scope change]\nrule = requests 2/1h\n"
                   "[scope kind]\nrule = requests 2/1h\n")
        c = self.conn()
        for scope, n in (("keep", 3), ("change", 2), ("kind", 2)):
            for _ in range(n):
                self.assertTrue(self.acq(c, scope, "k")["ok"])
            r = self.acq(c, scope, "k")
            self.assertEqual((r["ok"], r["error"]), (False, "limited"), r)
        # keep: the same rule, written 3/60m, after a new one; change: 2 -> 4
        # in place; kind: another strategy in its place
        self.reload("[scope keep]\nrule = requests 100/1h\nrule = requests 3/60m\n"
                    "[scope change]\nrule = requests 4/1h\n"
                    "[scope kind]\nrule = requests fixed-window 2/1h\n")
        r = self.acq(c, "keep", "k")
        self.assertEqual((r["ok"], r["error"], r["rule"]),
                         (False, "limited", "requests 3/60m"))
        # one token back takes 20 minutes: nothing was refilled
        self.assertGreater(r["retry_after_ms"], 19 * 60 * 1000)
        # the 2 used count against the raised 4: 2 more, not 4
        self.assertEqual([self.acq(c, "change", "k")["ok"] for _ in range(3)],
                         [True, True, False])
        # a counter of another strategy starts fresh
        self.assertEqual([self.acq(c, "kind", "k")["ok"] for _ in range(3)],
                         [True, True, False])
        self.assertEqual(self.reloads(), {"ok": 1, "error": 0})

    def metric_lines(self, prefix):
        port = re.search(r'msg="metrics listening" .*port=(\d+)', self.d.stderr_text()).group(1)
        with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=IO_TIMEOUT) as r:
            return [ln for ln in r.read().decode().splitlines() if ln.startswith(prefix)]

    def test_bad_conf_refused_whole_and_old_limits_enforced(self):
        m = "metrics = 127.0.0.1:0\n"
        self.start("[scope b]\nrule = requests 2/1h\n", extra=m)
        c = self.conn()
        for _ in range(2):
            self.assertTrue(self.acq(c, "b", "k")["ok"])
        # the header is three lines: the errors are on lines 6 and 8
        self.reload("[scope b]\nrule = requests 10/1h\nbogus = 1\n[scope extra]\n"
                    "timeout = 30\n", extra=m.strip(), expect="conf reload refused")
        log = self.d.stderr_text()
        path = re.escape(self.d.conf_path)
        self.assertRegex(log, r'(?m)^%s:6: unknown key "bogus" in \[scope b\]$' % path)
        self.assertRegex(log, r"(?m)^%s:8: timeout: " % path)
        r = self.acq(c, "b", "k")
        self.assertEqual((r["ok"], r["error"], r["rule"]), (False, "limited", "requests 2/1h"))
        r = self.acq(c, "extra", "k")
        self.assertEqual(r["error"], "unknown_scope", r)
        self.assertEqual(self.reloads(), {"ok": 0, "error": 1})
        # fixed, it applies
        self.reload("[scope b]\nrule = requests 10/1h\n", extra=m.strip())
        self.assertTrue(self.acq(c, "b", "k")["ok"])
        self.assertEqual(self.reloads(), {"ok": 1, "error": 1})
        self.assertEqual(self.metric_lines("admitd_reloads_total{"),
                         ['admitd_reloads_total{result="ok"} 1',
                          'admitd_reloads_total{result="error"} 1'])

    def test_truncated_conf_refused_and_acquires_go_on(self):
        self.start("[scope b]\nmax_concurrent = 1\nlease_ttl = 1m\n")
        c = self.conn()
        held = self.acq(c, "b", "k")
        self.assertTrue(held["ok"], held)
        for text, line in (("", ""), ("[admitd]\nsocket = %s\n" % self.d.sock_path, ":2")):
            before = self.log_count("conf reload refused")
            with open(self.d.conf_path, "w") as f:  # truncated in place
                f.write(text)
            self.d.proc.send_signal(signal.SIGHUP)
            self.wait_log("conf reload refused", before)
            self.assertRegex(self.d.stderr_text(),
                             r"(?m)^%s%s: no \[scope NAME\] section" % (
                                 re.escape(self.d.conf_path), line))
            # the running conf goes on: the scope is there and its limit holds
            r = self.acq(c, "b", "k")
            self.assertEqual((r["ok"], r["error"], r["rule"]), (False, "limited", "max_concurrent"))
            r = self.acq(c, "b", "other" + line)
            self.assertTrue(r["ok"], r)
        self.assertEqual(self.reloads(), {"ok": 0, "error": 2})
        self.assertEqual(c.request({"op": "release", "lease": held["lease"]}),
                         {"ok": True, "held": True})

    def test_removed_scope_answers_waiters_and_keeps_leases_releasable(self):
        self.start("[scope gone]\nmax_concurrent = 1\nlease_ttl = 1m\ntimeout = 20s\n"
                   "[scope stay]\nmax_concurrent = 1\n")
        c1, c2, c3 = self.conn(), self.conn(), self.conn()
        held = self.acq(c1, "gone", "k")
        detached = self.acq(c3, "gone", "k2", detach=True)
        self.assertTrue(held["ok"] and detached["ok"], (held, detached))
        c2.send(acquire_req("gone", "k", timeout_ms=20000, id=7))
        with self.assertRaises(TimeoutError):  # it waits
            c2.recv_line(timeout=0.3)
        self.reload("[scope stay]\nmax_concurrent = 1\n")
        w = c2.recv(timeout=IO_TIMEOUT)
        self.assertEqual((w["ok"], w["id"], w["error"]), (False, 7, "unknown_scope"), w)
        r = self.acq(c3, "gone", "k")
        self.assertEqual(r["error"], "unknown_scope", r)
        self.assertEqual(c1.request({"op": "release", "lease": held["lease"]}),
                         {"ok": True, "held": True})
        self.assertEqual(c3.request({"op": "release", "lease": detached["lease"]}),
                         {"ok": True, "held": True})
        # the removed scope goes once its last lease did
        _wait_until(lambda: self.log_count("removed scope finished") == 1, RELOAD_DEADLINE,
                    "the removed scope to be freed", self.d.stderr_text)
        self.assertTrue(self.acq(c3, "stay", "k")["ok"])

    def test_replaced_conf_freed_once_nothing_points_into_it(self):
        self.start("[scope gone]\nmax_concurrent = 1\nlease_ttl = 1m\n[scope s]\n",
                   extra="log_level = debug\n")
        c = self.conn()
        held = self.acq(c, "gone", "k")
        self.assertTrue(held["ok"], held)
        self.reload("[scope s]\n", extra="log_level = debug\n")
        self.reload("[scope s]\nmax_concurrent = 1\n", extra="log_level = debug\n")
        # the second conf goes (nothing points into it); the first stays with
        # the removed scope's lease
        self.wait_log("replaced conf freed", 0)
        time.sleep(0.3)  # housekeeping runs every 100 ms: nothing more goes
        log = self.d.stderr_text()
        self.assertEqual(log.count('msg="replaced conf freed"'), 1, log)
        self.assertIn('msg="replaced conf freed" left=1', log)
        self.assertEqual(c.request({"op": "release", "lease": held["lease"]}),
                         {"ok": True, "held": True})
        _wait_until(lambda: 'msg="replaced conf freed" left=0' in self.d.stderr_text(),
                    RELOAD_DEADLINE, "the first conf to be freed", self.d.stderr_text)

    def test_restart_keys_logged_and_kept(self):
        self.start("[scope s]\nmax_concurrent = 1\n",
                   extra="prefix = one\nmax_line = 4096\nmetrics = 127.0.0.1:0\n")
        c = self.conn()
        self.reload("[scope s]\nmax_concurrent = 2\n",
                    extra="prefix = two\nsocket_mode = 0600\nmax_line = 8192\n"
                          "metrics = 127.0.0.1:1\n")
        log = self.d.stderr_text()
        for key in ("prefix", "socket_mode", "metrics"):
            self.assertIn('msg="conf key changed: needs a restart, the running value is kept" '
                          "key=%s" % key, log)
        self.assertIn('msg="conf key changed" key=max_line', log)
        self.assertIn("restart_needed=3", log)
        self.assertEqual(os.stat(self.d.sock_path).st_mode & 0o777, 0o660)
        # the metrics listener goes on where it was
        self.assertEqual(self.metric_lines("admitd_reloads_total{"),
                         ['admitd_reloads_total{result="ok"} 1',
                          'admitd_reloads_total{result="error"} 0'])
        self.assertTrue(self.acq(c, "s", "k")["ok"])
        self.assertTrue(self.acq(c, "s", "k")["ok"])


class ReloadRedisTest(ReloadCase):
    def test_redis_change_moves_the_next_acquires(self):
        a = RedisServer().start()
        self.addCleanup(a.cleanup)
        b = RedisServer().start()
        self.addCleanup(b.cleanup)
        self.start("[scope s]\nrule = requests 5/1h\n", extra="redis = %s\n" % a.url)
        c = self.conn()
        r = self.acq(c, "s", "k")
        self.assertEqual((r["ok"], r["backend"]), (True, "redis"), r)
        self.assertEqual(len(b.command("KEYS", "admitd:{s:k}*")), 0)
        self.reload("[scope s]\nrule = requests 5/1h\n", extra="redis = %s\n" % b.url)
        self.assertIn('msg="conf key changed: reconnecting to redis" key=redis',
                      self.d.stderr_text())

        def on_b():
            r = self.acq(c, "s", "k2")
            return r.get("backend") == "redis" and len(b.command("KEYS", "admitd:{s:k2}*")) > 0

        _wait_until(on_b, RELOAD_DEADLINE, "an acquire booked in the new redis",
                    self.d.stderr_text, interval=0.05)
        self.assertEqual(len(a.command("KEYS", "admitd:{s:k2}*")), 0)


class ReloadRedisStateTest(ReloadCase):
    def test_redis_state_stays_by_position(self):
        # In Redis a rule's state lives under its position: an unchanged rule
        # in place keeps it, and a changed one goes on from it, as in process.
        r = RedisServer().start()
        self.addCleanup(r.cleanup)
        extra = "redis = %s\n" % r.url
        self.start("[scope keep]\nrule = requests 3/1h\n[scope change]\nrule = requests 2/1h\n",
                   extra=extra)
        c = self.conn()
        for scope, n in (("keep", 3), ("change", 2)):
            for _ in range(n):
                a = self.acq(c, scope, "k")
                self.assertEqual((a["ok"], a["backend"]), (True, "redis"), a)
        self.reload("[scope keep]\nrule = requests 3/60m\ntimeout = 5s\n"
                    "[scope change]\nrule = requests 4/1h\n", extra=extra)
        r1 = self.acq(c, "keep", "k")
        self.assertEqual((r1["ok"], r1["error"], r1["rule"], r1["backend"]),
                         (False, "limited", "requests 3/60m", "redis"))
        self.assertGreater(r1["retry_after_ms"], 19 * 60 * 1000)
        got = [self.acq(c, "change", "k") for _ in range(3)]
        self.assertEqual([g["ok"] for g in got], [True, True, False], got)
        self.assertEqual((got[2]["rule"], got[2]["backend"]), ("requests 4/1h", "redis"))


class ReloadUnderLoadTest(ReloadCase):
    """Reloads while clients acquire, wait and release, in process, through
    Redis, and moving between two Redis servers: scopes come and go, rules
    are added (a key's state outgrows its table entry) and removed, a class
    disappears. Every reply is one of the
    protocol's, every lease taken is released (held true or false), and the
    daemon's log stays clean (the harness fails on a sanitizer report)."""

    CONFS = [
        "[scope a]\nrule = requests 50/1s\nmax_concurrent = 2\ntimeout = 300ms\n"
        "[scope b]\nrule hi = requests 40/1s\nclass c = hi\ndefault_class = c\n"
        "timeout = 300ms\n",
        "[scope a]\nrule = requests 50/1s\nrule = requests 500/1m\nrule = tokens 9000/1m\n"
        "rule = requests leaky-bucket 60/1s\nmax_concurrent = 3\ntimeout = 300ms\n"
        "[scope b]\nrule = requests 40/1s\ntimeout = 300ms\n"
        "[scope c]\nquota = 30/1s\ntimeout = 300ms\n",
        "[scope a]\nrule = requests 50/1s\ntimeout = 300ms\n"
        "[scope c]\nquota = 30/1s\ncluster_concurrency = 2\ntimeout = 300ms\n",
    ]
    ERRORS = {"limited", "budget_exceeded", "timeout", "unknown_scope", "bad_request",
              "too_many_waiters"}

    def run_load(self, *extras):
        import threading
        self.start(self.CONFS[0], extra=extras[0])
        stop = threading.Event()
        bad, counts = [], {"ok": 0}

        def client(i):
            c = self.d.connect()
            try:
                n = 0
                while not stop.is_set():
                    n += 1
                    scope = "abc"[n % 3]
                    r = c.request(acquire_req(scope, "k%d" % (n % 4), timeout_ms=200 * (i % 2)),
                                  timeout=IO_TIMEOUT)
                    if r.get("ok"):
                        counts["ok"] += 1
                        rel = c.request({"op": "release", "lease": r["lease"],
                                         "tokens": {"output": 3}}, timeout=IO_TIMEOUT)
                        if rel.get("error") == "bad_request" and \
                                'meters "output"' in rel.get("message", ""):
                            # the conf in force has no token rule there: the
                            # release is refused whole, and goes without them
                            rel = c.request({"op": "release", "lease": r["lease"]},
                                            timeout=IO_TIMEOUT)
                        if rel.get("ok") is not True or "held" not in rel:
                            bad.append(rel)
                    elif r.get("error") not in self.ERRORS:
                        bad.append(r)
            finally:
                c.close()

        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(4)]
        for t in threads:
            t.start()
        try:
            for i in range(1, 19):
                self.reload(self.CONFS[i % 3], extra=extras[i % len(extras)])
                time.sleep(0.05)
        finally:
            stop.set()
            for t in threads:
                t.join(IO_TIMEOUT * 2)
        self.assertEqual(bad, [])
        self.assertGreater(counts["ok"], 0)
        self.assertEqual(self.reloads(), {"ok": 18, "error": 0})

    def test_local(self):
        self.run_load("")

    def test_redis(self):
        r = RedisServer().start()
        self.addCleanup(r.cleanup)
        self.run_load("redis = %s\n" % r.url)

    def test_redis_switching(self):
        # every other reload moves to the other Redis: the replaced backend
        # drains while the next one serves
        a = RedisServer().start()
        self.addCleanup(a.cleanup)
        b = RedisServer().start()
        self.addCleanup(b.cleanup)
        self.run_load("redis = %s\n" % a.url, "redis = %s\n" % b.url)


class WatchConfTest(ReloadCase):
    """A ConfigMap volume: admitd.conf -> ..data/admitd.conf, ..data -> ..TS."""

    def swap(self, cm, name, text):
        os.mkdir(os.path.join(cm, name))
        with open(os.path.join(cm, name, "admitd.conf"), "w") as f:
            f.write(text)
        old = os.readlink(os.path.join(cm, "..data"))
        os.symlink(name, os.path.join(cm, "..data_tmp"))
        os.rename(os.path.join(cm, "..data_tmp"), os.path.join(cm, "..data"))
        shutil.rmtree(os.path.join(cm, old))

    def test_symlink_swap_reloads(self):
        d = Admitd("[admitd]\n")
        self.addCleanup(d.cleanup)
        self.d = d
        cm = os.path.join(d.tmp.path, "cm")
        os.mkdir(cm)
        os.mkdir(os.path.join(cm, "..2026_12_01_00_00_00.1"))
        os.symlink("..2026_12_01_00_00_00.1", os.path.join(cm, "..data"))
        os.symlink("..data/admitd.conf", os.path.join(cm, "admitd.conf"))
        hdr = "[admitd]\nsocket = %s\nwatch_conf = yes\n" % d.sock_path
        with open(os.path.join(cm, "..data", "admitd.conf"), "w") as f:
            f.write(hdr + "[scope s]\nmax_concurrent = 1\nlease_ttl = 1m\n")
        d.conf_path = os.path.join(cm, "admitd.conf")
        d.start()
        c = self.conn()
        held = self.acq(c, "s", "k")
        self.assertTrue(held["ok"], held)
        self.assertEqual(self.acq(c, "s", "k")["error"], "limited")

        before = self.log_count("conf reloaded")
        self.swap(cm, "..2026_12_01_00_01_00.2",
                  hdr + "[scope s]\nmax_concurrent = 2\nlease_ttl = 1m\n")
        self.wait_log("conf reloaded", before)
        self.assertIn("cause=watch_conf", self.d.stderr_text())
        self.assertTrue(self.acq(c, "s", "k")["ok"])
        self.assertEqual(self.acq(c, "s", "k")["error"], "limited")
        self.assertEqual(c.request({"op": "release", "lease": held["lease"]}),
                         {"ok": True, "held": True})

        # a broken conf swapped in is refused; the raised limit stays
        before = self.log_count("conf reload refused")
        self.swap(cm, "..2026_12_01_00_02_00.3",
                  hdr + "[scope s]\nmax_concurrent = lots\n")
        self.wait_log("conf reload refused", before)
        self.assertRegex(self.d.stderr_text(),
                         r"(?m)^%s:5: max_concurrent: " % re.escape(d.conf_path))
        self.assertTrue(self.acq(c, "s", "k")["ok"])
        self.assertEqual(self.acq(c, "s", "k")["error"], "limited")
        self.assertEqual(self.reloads(), {"ok": 1, "error": 1})


class WatchConfEditTest(ReloadCase):
    """watch_conf on a file edited in place, and on a symlink into another directory."""

    def wait_reload(self, what, write):
        before = self.log_count(what)
        write()
        self.wait_log(what, before)

    def test_truncate_then_slow_write(self):
        hdr = "watch_conf = yes\n"
        self.start("[scope s]\nmax_concurrent = 1\nlease_ttl = 1m\n", extra=hdr)
        c = self.conn()
        held = self.acq(c, "s", "k")
        self.assertTrue(held["ok"], held)
        f = open(self.d.conf_path, "w")  # truncated: the watch sees an empty file
        self.addCleanup(f.close)
        self.wait_reload("conf reload refused", lambda: None)
        self.assertEqual(self.acq(c, "s", "k")["error"], "limited")
        self.assertTrue(self.acq(c, "s", "k2")["ok"])
        # the writer finishes: the complete conf applies
        self.wait_reload("conf reloaded", lambda: (
            f.write(header(self.d, hdr) + "[scope s]\nmax_concurrent = 3\nlease_ttl = 1m\n"),
            f.flush()))
        self.assertTrue(self.acq(c, "s", "k")["ok"])
        self.assertEqual(self.reloads(), {"ok": 1, "error": 1})
        self.assertIn("cause=watch_conf", self.d.stderr_text())

    def test_symlink_into_another_directory(self):
        d = Admitd("[admitd]\n")
        self.addCleanup(d.cleanup)
        self.d = d
        etc, srv, srv2 = (os.path.join(d.tmp.path, n) for n in ("etc", "srv", "srv2"))
        for x in (etc, srv, srv2):
            os.mkdir(x)
        hdr = "[admitd]\nsocket = %s\nwatch_conf = yes\n" % d.sock_path
        target = os.path.join(srv, "admitd.conf")
        with open(target, "w") as f:
            f.write(hdr + "[scope s]\nmax_concurrent = 1\nlease_ttl = 1m\n")
        d.conf_path = os.path.join(etc, "admitd.conf")
        os.symlink(target, d.conf_path)
        d.start()
        c = self.conn()
        self.assertTrue(self.acq(c, "s", "k")["ok"])
        self.assertEqual(self.acq(c, "s", "k")["error"], "limited")

        # the target is rewritten where it is: nothing happens in etc/
        def edit(path, n):
            def go():
                with open(path, "w") as f:
                    f.write(hdr + "[scope s]\nmax_concurrent = %d\nlease_ttl = 1m\n" % n)
            return go
        self.wait_reload("conf reloaded", edit(target, 2))
        self.assertTrue(self.acq(c, "s", "k")["ok"])
        self.assertEqual(self.acq(c, "s", "k")["error"], "limited")

        # the symlink is pointed at a file in a third directory, then that one is edited
        target2 = os.path.join(srv2, "admitd.conf")
        edit(target2, 3)()
        tmp = d.conf_path + ".new"
        self.wait_reload("conf reloaded", lambda: (os.symlink(target2, tmp),
                                                  os.rename(tmp, d.conf_path)))
        self.assertTrue(self.acq(c, "s", "k")["ok"])
        self.assertEqual(self.acq(c, "s", "k")["error"], "limited")
        self.wait_reload("conf reloaded", edit(target2, 4))
        self.assertTrue(self.acq(c, "s", "k")["ok"])
        self.assertEqual(self.acq(c, "s", "k")["error"], "limited")
        self.assertEqual(self.reloads(), {"ok": 3, "error": 0})
        self.assertRegex(d.stderr_text(), r'watching the directory the conf resolves to.*dir="%s"'
                         % re.escape(os.path.realpath(srv2)))
        self.assertNotIn("the directory is gone", d.stderr_text())


if __name__ == "__main__":
    unittest.main()
