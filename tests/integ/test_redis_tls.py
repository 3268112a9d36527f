"""test_redis_tls.py - admitd over rediss:// to a redis-server that speaks TLS.

The server is Debian's redis-server with --tls-port and --port 0
(redis_deploy.TlsRedis); its CA, its certificate (SAN 127.0.0.1 and
localhost), a wrong CA, an expired certificate, one for another name and a
client certificate are made by the test with the openssl CLI
(redis_deploy.TlsFiles). Shown:
- the core invariants (a rolling quota, cluster_concurrency) hold for
  three daemons over rediss://, and a server restarted under load is
  reconnected to (fallback while it is gone, Redis within 2 s of its return);
- a wrong CA, an expired certificate and a certificate for another name
  are refused: served by fail_mode (the fallback, or "unavailable" with
  fail_mode = closed), logged, and no command of admitd's ever runs on the
  server (INFO commandstats, read over the server's plain Unix socket);
- the escapes are explicit: redis_tls_server_name names the certificate
  expected, redis_tls_verify = no accepts what verification refuses;
- a server that requires client certificates takes admitd's
  (redis_tls_cert_file / redis_tls_key_file) and refuses it without;
- rediss://localhost is checked against the certificate's DNS names;
- redis+cluster://...?tls=1 reaches a cluster whose nodes (and bus) speak
  TLS only, and redis+sentinel://...?tls=1 follows a kill -9 failover where
  sentinels, master and replica speak TLS only;
- `admitd -t` refuses a bad redis_tls_verify value.

Run: ADMITD_BIN=daemon/admitd python3 -m unittest tests.integ.test_redis_tls -v
"""

import time
import types
import unittest

from . import harness
from .harness import _TempDir, acquire_req, max_overlap, now
from .redis_deploy import (ConfCheckMixin, RedisClusterDeploy, SentinelDeploy, TlsFiles, TlsRedis,
                           has_failed, start_pods, what_is_missing)
from .redis_util import (Pods, hammer, key_name, load, per_window, span_excess, status,
                         wait_backend)

MISSING = what_is_missing("tls")

CONF = """
[scope quota]
quota = 10/1s
timeout = 30s

[scope ccap]
cluster_concurrency = 3
lease_ttl = 5s
timeout = 30s

[scope q]
quota = 3/1h

[scope closed]
quota = 3/1h
fail_mode = closed

[scope qs]
quota = 3/%s
""" % ("20s" if harness.VALGRIND else "2s")
# qs: a daemon refused its Redis is born in the outage, its share spent for
# a window; under valgrind its start alone can outlast 2 s (the suite saw
# the first acquire admitted), so the window is longer there.


def admitd_commands(server):
    """{command: calls} of the commands admitd sends once connected (its
    scripts, TIME, ROLE, ...) that the server has run; the harness's own
    (PING, INFO, CONFIG, EXISTS, ZCARD over the Unix socket) are left out."""
    out = {}
    for line in server.command("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            name, rest = line[len("cmdstat_"):].split(":", 1)
            calls = int(rest.split("calls=")[1].split(",")[0])
            if name.split("|")[0] in ("evalsha", "eval", "script", "fcall", "function", "time",
                                      "hset", "zadd", "role", "select", "hello"):
                out[name] = calls
    return out


@unittest.skipIf(MISSING, MISSING or "")
class TlsCase(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = _TempDir("tls-")
        cls.files = TlsFiles(cls.tmp.path)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def server(self, cert="server", auth_clients="optional"):
        s = TlsRedis(self.files, cert=cert, auth_clients=auth_clients)
        s.start()
        self.addCleanup(s.cleanup)
        # The harness's own check: a correct client is accepted (or, with a
        # bad certificate, refused: the test proves what it means to).
        r = s.cli_tls("PING")
        if cert == "server" and auth_clients == "optional":
            self.assertEqual(r.stdout.strip(), "PONG", r.stderr)
        return s

    def tls_conf(self, ca="ca.crt", cert=None, server_name=None, verify=None,
                 timeout="2s" if harness.VALGRIND else "250ms"):
        lines = ["redis_timeout = %s" % timeout,
                 "redis_tls_ca_file = %s" % self.files.path(ca)]
        if cert:
            lines += ["redis_tls_cert_file = %s" % self.files.path(cert + ".crt"),
                      "redis_tls_key_file = %s" % self.files.path(cert + ".key")]
        if server_name:
            lines.append("redis_tls_server_name = %s" % server_name)
        if verify:
            lines.append("redis_tls_verify = %s" % verify)
        return "\n".join(lines) + "\n"

    def pods(self, srv, n=1, **kw):
        return start_pods(self, CONF, srv, n=n, extra=self.tls_conf(**kw), wait=False)


@unittest.skipIf(harness.VALGRIND, "timing invariants; run under ASan instead of valgrind")
class TlsInvariantsTest(TlsCase):

    def test_quota_and_concurrency_over_tls(self):
        q, w = 10, 1.0
        srv = self.server()
        p = self.pods(srv, n=3)
        for d in p.daemons:
            wait_backend(d, "redis", 10.0)
        out = hammer(self, p, "quota", "k", 3.0, per_daemon=8)
        for a in out.adms:
            self.assertEqual(a.reply.get("backend"), "redis", a.reply)
        ivs = [(a.lo, a.hi) for a in out.adms]
        self.assertIsNone(span_excess(ivs, per_window(q, w, extra=1)))
        self.assertGreaterEqual(len(ivs), 2 * q, out.errors())
        # Shared through Redis: more than one daemon admits. Not every one:
        # which pod's head gets a unit the quota frees is a race among pods
        # (there is no order across pods yet, docs/fairness.md), and on a
        # loaded box one pod can lose it for the whole 3 s. Measured with two
        # CPU hogs on 2 cores, admissions per pod, 5 runs of this binary and
        # of this session's first: [13,2,15] [7,5,18] ... and [2,18,10]
        # [3,11,16]; a full suite run once saw [0,x,y].
        self.assertGreaterEqual(len({a.daemon for a in out.adms}), 2)

        out = hammer(self, p, "ccap", "k", 2.0, per_daemon=3, hold=(0.05, 0.1))
        held = [(a.t_recv, a.t_rel) for a in out.adms]
        for a in out.adms:
            self.assertEqual(a.reply.get("backend"), "redis", a.reply)
        self.assertGreater(len(held), 10, out.errors())
        self.assertEqual(max_overlap(held), 3)
        self.assertTrue(p.alive(), p.logs())
        # It was TLS: the scripts ran, and the server has no plain TCP port.
        cmds = admitd_commands(srv)
        self.assertGreater(cmds.get("evalsha", 0) + cmds.get("fcall", 0), 0, cmds)
        self.assertEqual(srv.command("CONFIG", "GET", "port")[1], "0")


    def test_restarted_under_load(self):
        # The TLS connections are made again after the server returns.
        srv = self.server()
        p = self.pods(srv, n=2, timeout="100ms")
        for d in p.daemons:
            wait_backend(d, "redis", 10.0)
        ts = {}

        def control():
            time.sleep(0.8)
            srv.stop()
            ts["down"] = now()
            time.sleep(1.2)
            srv.restart()
            ts["back"] = now()
            time.sleep(3.0)

        replies, _ = load(self, p, "quota", control, per_daemon=3, budget_ms=300)
        self.assertTrue(p.alive(), p.logs())
        t_end = max(x[2] for x in replies)
        back_by = 2.0 + harness.late_allowance(ts["back"], t_end)
        for i in range(len(p.daemons)):
            mine = [x for x in replies if x[0] == i]
            self.assertTrue([x for x in mine if x[2] < ts["down"]
                             and x[3].get("backend") == "redis"], i)
            self.assertTrue([x for x in mine if ts["down"] + 0.2 < x[1] and x[2] < ts["back"]
                             and x[3].get("backend") == "fallback"], i)
            back = [x[2] for x in mine if x[1] > ts["back"] and x[3].get("backend") == "redis"]
            self.assertTrue(back, "daemon %d never went back to redis" % i)
            self.assertLess(min(back) - ts["back"], back_by, i)
            for x in mine:
                if x[1] > ts["back"] + back_by and "backend" in x[3]:
                    self.assertEqual(x[3].get("backend"), "redis", x[3])


class TlsRefusedTest(TlsCase):
    """A certificate admitd must not accept: never on Redis, fail_mode serves."""

    def assertRefusedTls(self, srv, reasons, **kw):
        """reasons: words one of which the logged refusal must give."""
        p = self.pods(srv, **kw)
        d = p.daemons[0]
        with d.connect() as c:
            # fallback: born while Redis is unreachable, its share starts
            # spent (quota 3 a window in process); a window later 3, then limited.
            r = c.request(acquire_req("qs", "k", timeout_ms=0))
            self.assertEqual((r.get("error"), r.get("backend")), ("limited", "fallback"), r)
            time.sleep(r["retry_after_ms"] / 1000.0 + 0.05)
            got = [c.request(acquire_req("qs", "k", timeout_ms=0)) for _ in range(5)]
            for r in got[:3]:
                self.assertIs(r.get("ok"), True, r)
                self.assertEqual(r.get("backend"), "fallback", r)
            for r in got[3:]:
                self.assertEqual(r.get("error"), "limited", r)
                self.assertEqual(r.get("backend"), "fallback", r)
            r = c.request(acquire_req("closed", "k", timeout_ms=0))
            self.assertEqual(r.get("error"), "unavailable", r)
            # ... and stays so: retried connections are refused too.
            stay = now() + 1.5
            while now() < stay:
                self.assertEqual(status(d)["backend"], "fallback")
                time.sleep(0.1)
        self.assertEqual(admitd_commands(srv), {}, "a command ran over a refused connection")
        self.assertEqual(srv.command("EXISTS", key_name("admitd", "qs", "k", "q")), 0)
        # Logged, with why: the verification failed, for this reason.
        log = d.stderr_text().lower()
        self.assertIn("certificate verify failed", log)
        self.assertTrue(any(w in log for w in reasons), (reasons, d.stderr_text()))
        return log

    def test_wrong_ca(self):
        srv = self.server()
        self.assertRefusedTls(srv, ("self-signed", "self signed", "unable to get local issuer"),
                              ca="wrong_ca.crt")

    def test_expired_certificate(self):
        srv = self.server(cert="expired")
        r = srv.cli_tls("PING")
        self.assertNotEqual(r.stdout.strip(), "PONG", "redis-cli accepted the expired cert")
        self.assertRefusedTls(srv, ("expired",))

    def test_certificate_for_another_name(self):
        srv = self.server(cert="othername")
        self.assertRefusedTls(srv, ("mismatch",))

    def test_host_name_checked_by_dns_entry(self):
        # rediss://localhost: matched against the certificate's DNS names.
        good = self.server()
        p = self.pods(types.SimpleNamespace(url="rediss://localhost:%d" % good.tls_port))
        wait_backend(p.daemons[0], "redis", 10.0)
        bad = self.server(cert="othername")
        via_name = types.SimpleNamespace(url="rediss://localhost:%d" % bad.tls_port,
                                         command=bad.command)
        self.assertRefusedTls(via_name, ("mismatch",))

    def test_server_name_names_the_certificate(self):
        # The same certificate is accepted once admitd is told to expect it.
        srv = self.server(cert="othername")
        p = self.pods(srv, server_name="wrong.example.invalid")
        d = p.daemons[0]
        wait_backend(d, "redis", 10.0)
        with d.connect() as c:
            r = c.request(acquire_req("q", "sn", timeout_ms=0))
            self.assertEqual(r.get("backend"), "redis", r)
        self.assertEqual(srv.command("ZCARD", key_name("admitd", "q", "sn", "q")), 1)

    def test_verify_no_is_explicit(self):
        srv = self.server(cert="expired")
        p = self.pods(srv, ca="wrong_ca.crt", verify="no")
        d = p.daemons[0]
        wait_backend(d, "redis", 10.0)
        with d.connect() as c:
            r = c.request(acquire_req("q", "nv", timeout_ms=0))
            self.assertEqual(r.get("backend"), "redis", r)


@unittest.skipIf(what_is_missing("cluster"), what_is_missing("cluster") or "")
class TlsClusterTest(TlsCase):
    """redis+cluster://...?tls=1 to a cluster whose nodes speak TLS only."""

    def test_cluster_over_tls(self):
        rc = RedisClusterDeploy(3, tls=self.files)
        rc.__enter__()
        self.addCleanup(lambda: rc.cleanup(has_failed(self)))
        by = rc.keys_by_master("q", 1, prefix="tls")
        p = self.pods(rc)
        d = p.daemons[0]
        wait_backend(d, "redis", 10.0)
        with d.connect() as c:
            for i in range(3):
                k = by[i][0]
                r = c.request(acquire_req("q", k, timeout_ms=0))
                self.assertIs(r.get("ok"), True, r)
                self.assertEqual(r.get("backend"), "redis", r)
                self.assertEqual(rc.nodes[i].command("ZCARD", key_name("admitd", "q", k, "q")), 1)
        # The same cluster through a wrong CA: refused, fail_mode serves.
        p2 = self.pods(rc, ca="wrong_ca.crt")
        d2 = p2.daemons[0]
        t0 = now()
        with d2.connect() as c:
            while now() < t0 + 1.0:
                r = c.request(acquire_req("q", "wrongca", timeout_ms=0))
                self.assertEqual(r.get("backend"), "fallback", r)
                time.sleep(0.1)
        self.assertIn("certificate verify failed", d2.stderr_text())


@unittest.skipIf(what_is_missing("sentinel"), what_is_missing("sentinel") or "")
@unittest.skipIf(harness.VALGRIND, "a failover's timing; run under ASan instead of valgrind")
class TlsSentinelTest(TlsCase):
    """redis+sentinel://...?tls=1: sentinels, master and replica speak TLS only."""

    def test_sentinel_over_tls_follows_a_failover(self):
        sd = SentinelDeploy(tls=self.files)
        sd.__enter__()
        self.addCleanup(lambda: sd.cleanup(has_failed(self)))
        p = self.pods(sd)
        d = p.daemons[0]
        wait_backend(d, "redis", 10.0)

        def booked_on(server, key):
            with d.connect() as c:
                r = c.request(acquire_req("q", key, timeout_ms=0))
            self.assertIs(r.get("ok"), True, r)
            return r.get("backend") == "redis" and server.command(
                "ZCARD", key_name("admitd", "q", key, "q")) == 1

        self.assertTrue(booked_on(sd.master(), "before"))
        old, _ = sd.kill_master()
        new, t_prom = sd.wait_promoted(old)
        # On the new master within 5 s of the promotion, over TLS again.
        n = [0]

        def moved():
            n[0] += 1
            return booked_on(new, "after%d" % n[0])
        harness._wait_until(moved, 5.0 + harness.late_allowance(t_prom) + 5.0,
                            "admitd on the new master", d.stderr_text, interval=0.05)
        self.assertLess(now() - t_prom, 5.0 + harness.late_allowance(t_prom))


class TlsClientCertTest(TlsCase):

    def test_client_certificate(self):
        srv = self.server(auth_clients="yes")
        p = self.pods(srv, cert="client")
        d = p.daemons[0]
        wait_backend(d, "redis", 10.0)
        with d.connect() as c:
            r = c.request(acquire_req("q", "cc", timeout_ms=0))
            self.assertEqual(r.get("backend"), "redis", r)
        # Without one, the server refuses the handshake: fail_mode serves.
        p2 = self.pods(srv)
        d2 = p2.daemons[0]
        t0 = now()
        with d2.connect() as c:
            while now() < t0 + 1.0:
                r = c.request(acquire_req("q", "nocert", timeout_ms=0))
                self.assertEqual(r.get("backend"), "fallback", r)
                time.sleep(0.1)
        self.assertEqual(srv.command("EXISTS", key_name("admitd", "q", "nocert", "q")), 0)


@unittest.skipIf(MISSING, MISSING or "")
class TlsConfTest(ConfCheckMixin, unittest.TestCase):

    def conf(self, extra, url="rediss://127.0.0.1:6380"):
        return "[admitd]\nredis = %s\n%s\n[scope s]\nquota = 1/1s\n" % (url, extra)

    def test_rediss_url_and_keys(self):
        self.assertConfOk(self.conf("redis_tls_verify = no\n"))
        self.assertConfOk(self.conf("redis_tls_server_name = redis.example.com\n"))

    def test_bad_verify_value(self):
        self.assertConfError(self.conf("redis_tls_verify = maybe\n"), 3, "redis_tls_verify")


if __name__ == "__main__":
    unittest.main()
