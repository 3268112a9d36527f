"""test_metrics.py - `metrics = HOST:PORT`: /metrics, /healthz and /readyz.

After a known sequence of acquires (each outcome that can be provoked at
will: acquired, limited, budget_exceeded, timeout, too_many_waiters,
exceeds_limit, canceled, unavailable), releases and penalties, every
counter of /metrics is read back exactly, as are the gauges (leases,
waiters, connections, keys once the idle sweep has run) and the wait
histogram's count and buckets; `promtool check metrics` finds nothing in
the text; a real Prometheus started on loopback scrapes the daemon and
its HTTP API answers the same values. /readyz is 503 while the daemon
starts (a Redis that is down delays the socket by one redis_timeout) and
while it drains (SIGTERM with a release still owed to a paused Redis),
200 otherwise, fallback included; its body names the backend state.
test_metrics_limits.py: HTTP cannot starve the socket.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import unittest.mock
import urllib.error
import urllib.parse
import urllib.request

from .harness import IO_TIMEOUT, Admitd, RedisServer, acquire_req, free_tcp_port, run_admitd

from .metrics_http import (PROMTOOL_MISSING, http_get, metrics_port, parse, promtool, scrape, val,
                           wait_for)


CONF = """[admitd]
metrics = 127.0.0.1:0

[scope q]
quota = 1/1h

[scope m]
max_concurrent = 1
max_waiters = 1
timeout = 10s

[scope r]
rule = requests 5/1s
"""


OUTCOMES = ("acquired", "limited", "budget_exceeded", "timeout", "too_many_waiters",
            "unavailable", "shutting_down", "exceeds_limit", "canceled")


class MetricsLocalTest(unittest.TestCase):

    def waiting(self, c, scope, n):
        wait_for(lambda: c.request({"op": "status"})["scopes"][scope]["waiting"] == n,
                 "%d waiting in %s" % (n, scope))

    def test_known_sequence_exact_values(self):
        with Admitd(CONF) as d, d.connect() as c:
            port = metrics_port(d)
            before = parse(scrape(port))
            for s in ("q", "m", "r"):
                for o in OUTCOMES:
                    self.assertEqual(val(before, "admitd_acquires_total", scope=s, outcome=o), 0)

            # q: one admission, then limited (no wait allowed), then
            # budget_exceeded (the wait needed is an hour).
            self.assertIs(c.request(acquire_req("q", "a")).get("ok"), True)
            self.assertEqual(c.request(acquire_req("q", "a", timeout_ms=0))["error"], "limited")
            self.assertEqual(c.request(acquire_req("q", "a", timeout_ms=5000))["error"],
                             "budget_exceeded")
            # m: one slot. A waiter fills the queue (max_waiters 1): the next
            # is too_many_waiters; the waiter's client leaves: canceled.
            hold = c.request(acquire_req("m", "k"))
            self.assertIs(hold.get("ok"), True, hold)
            gone = d.connect()
            gone.send(acquire_req("m", "k"))
            self.waiting(c, "m", 1)
            self.assertEqual(c.request(acquire_req("m", "k"))["error"], "too_many_waiters")
            gone.close()
            self.waiting(c, "m", 0)
            self.assertEqual(c.request(acquire_req("m", "k", timeout_ms=100))["error"], "timeout")
            # A waiter admitted when the slot is released, after >= 150 ms.
            w = d.connect()
            w.send(acquire_req("m", "k", id=1))
            self.waiting(c, "m", 1)
            time.sleep(0.15)
            self.assertIs(c.request({"op": "release", "lease": hold["lease"]})["held"], True)
            got = w.recv()
            self.assertIs(got.get("ok"), True, got)
            self.assertGreaterEqual(got["waited_ms"], 150)
            self.assertIs(w.request({"op": "release", "lease": got["lease"]})["held"], True)
            # The same handle again: a release request naming m, held false.
            self.assertIs(c.request({"op": "release", "lease": got["lease"]})["held"], False)
            # Not a handle at all: names no scope, counts nowhere.
            self.assertIs(c.request({"op": "release", "lease": "nope"})["held"], False)
            w.close()
            # At the end: one lease held in m (k2) and one acquire waiting on it.
            k2 = c.request(acquire_req("m", "k2"))
            self.assertIs(k2.get("ok"), True, k2)
            waiter = d.connect()
            waiter.send(acquire_req("m", "k2"))
            self.waiting(c, "m", 1)
            # r: asks more than the rule holds.
            self.assertEqual(c.request(acquire_req("r", "x", cost=6))["error"], "exceeds_limit")
            # Penalties: q once, r twice (one request naming both counts in each).
            for req in ({"op": "penalize", "scope": "q", "key": "z", "retry_after_ms": 60000},
                        {"op": "penalize", "scope": "r", "key": "p", "retry_after_ms": 60000},
                        {"op": "penalize", "targets": [{"scope": "r", "key": "p2"},
                                                       {"scope": "q", "key": "z"}],
                         "retry_after_ms": 60000}):
                r = c.request(req)
                self.assertIs(r.get("ok"), True, r)

            # Gauges converge (a closed client is seen when its EOF is read,
            # an idle key is swept within a second): poll, then read all.
            def settled():
                s = parse(scrape(port))
                return s if (val(s, "admitd_connections") == 2 and
                             val(s, "admitd_keys") == 5) else None
            after = wait_for(settled, "connections 2 and keys 5 (q:a q:z r:p r:p2 m:k2)")
            text = scrape(port)
            st = c.request({"op": "status"})

        want = {
            "q": {"acquired": 1, "limited": 1, "budget_exceeded": 1},
            "m": {"acquired": 3, "too_many_waiters": 1, "canceled": 1, "timeout": 1},
            "r": {"exceeds_limit": 1},
        }
        for s, outs in want.items():
            for o in OUTCOMES:
                self.assertEqual(val(after, "admitd_acquires_total", scope=s, outcome=o),
                                 outs.get(o, 0), (s, o))
        self.assertEqual(val(after, "admitd_releases_total", scope="m"), 3)
        self.assertEqual(val(after, "admitd_releases_total", scope="q"), 0)
        self.assertEqual(val(after, "admitd_penalties_total", scope="q"), 2)
        self.assertEqual(val(after, "admitd_penalties_total", scope="r"), 2)
        self.assertEqual(val(after, "admitd_penalties_total", scope="m"), 0)
        self.assertEqual(val(after, "admitd_leases", scope="m"), 1)
        self.assertEqual(val(after, "admitd_leases", scope="q"), 1)  # never released
        self.assertEqual(val(after, "admitd_waiters", scope="m"), 1)
        self.assertEqual(val(after, "admitd_waiters", scope="q"), 0)
        self.assertEqual(val(after, "admitd_shadow_limited_total", scope="q"), 0)
        self.assertEqual(val(after, "admitd_fallback_acquires_total", scope="m"), 0)
        self.assertEqual(val(after, "admitd_leases_expired_total", scope="m"), 0)
        # The histogram: three admissions in m, two at once, one >= 150 ms.
        h = "admitd_acquire_wait_seconds"
        self.assertEqual(val(after, h + "_count", scope="m"), 3)
        self.assertEqual(val(after, h + "_bucket", scope="m", le="+Inf"), 3)
        self.assertEqual(val(after, h + "_bucket", scope="m", le="0.1"), 2)
        self.assertEqual(val(after, h + "_bucket", scope="m", le="0.05"), 2)
        self.assertEqual(val(after, h + "_count", scope="q"), 1)
        self.assertEqual(val(after, h + "_count", scope="r"), 0)
        self.assertAlmostEqual(val(after, h + "_sum", scope="m"),
                               st["scopes"]["m"]["wait_ms_total"] / 1000.0, places=6)
        self.assertGreaterEqual(val(after, h + "_sum", scope="m"), 0.150)
        buckets = [val(after, h + "_bucket", scope="m", le=le) for le in
                   ("0", "0.001", "0.002", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25",
                    "0.5", "1", "2.5", "5", "10", "30", "+Inf")]
        self.assertEqual(buckets, sorted(buckets))  # cumulative
        # The same histogram in status, per bucket (not cumulative).
        sb = st["scopes"]["m"]["wait_buckets"]
        self.assertEqual(len(sb), len(st["wait_bounds_ms"]) + 1)
        self.assertEqual([sum(sb[:i + 1]) for i in range(len(sb))], buckets)
        self.assertEqual(st["wait_bounds_ms"],
                         [0, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000,
                          30000])
        self.assertEqual(st["scopes"]["m"]["releases"], 3)
        self.assertEqual(st["scopes"]["r"]["penalties"], 2)
        # Daemon-wide.
        self.assertEqual(val(after, "admitd_keys"), 5)
        self.assertEqual(val(after, "admitd_connections"), 2)
        self.assertEqual(val(after, "admitd_redis_up"), 0)
        self.assertEqual(val(after, "admitd_key_evictions_total"), 0)
        self.assertEqual(val(after, "admitd_reloads_total", result="ok"), 0)
        self.assertEqual(val(after, "admitd_reloads_total", result="error"), 0)
        for op in ("acquire", "release", "penalize", "heartbeat"):
            self.assertEqual(val(after, "admitd_backend_errors_total", op=op), 0)
            self.assertEqual(val(after, "admitd_redis_calls_total", op=op), 0)
        self.assertEqual(val(after, "admitd_build_info", version=st["version"]), 1)
        # HELP and TYPE once per family, before its samples.
        families = re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M)
        self.assertEqual(len(families), len(re.findall(r"^# HELP ", text, re.M)))
        self.assertEqual(len(families), len(set(families)))
        self.assertIn(("admitd_acquire_wait_seconds", "histogram"), families)
        self.assertIn(("admitd_acquires_total", "counter"), families)
        self.assertIn(("admitd_leases", "gauge"), families)
        # (test_promtool_finds_nothing says so when promtool is missing;
        # this test's own values are checked either way)
        if shutil.which("promtool") is not None:
            promtool(self, text)

    def test_promtool_finds_nothing(self):
        if shutil.which("promtool") is None:
            self.skipTest(PROMTOOL_MISSING)
        with Admitd(CONF) as d, d.connect() as c:
            port = metrics_port(d)
            self.assertIs(c.request(acquire_req("q", "a")).get("ok"), True)
            self.assertEqual(c.request(acquire_req("q", "a", timeout_ms=0))["error"], "limited")
            self.assertIs(c.request({"op": "penalize", "scope": "r", "key": "k",
                                     "retry_after_ms": 10}).get("ok"), True)
            text = scrape(port)
        self.assertIn("admitd_acquire_wait_seconds_bucket", text)
        promtool(self, text)

    def test_endpoints(self):
        with Admitd(CONF) as d:
            port = metrics_port(d)
            self.assertEqual(http_get(port, "/healthz")[:2], (200, "ok\n"))
            self.assertEqual(http_get(port, "/readyz")[:2], (200, "ready backend=local\n"))
            code, body, ctype = http_get(port, "/metrics?x=1")
            self.assertEqual((code, ctype), (200, "text/plain; version=0.0.4; charset=utf-8"))
            self.assertIn("\nadmitd_connections 0\n", body)
            self.assertEqual(http_get(port, "/metrics", method="HEAD")[:2], (200, ""))
            self.assertEqual(http_get(port, "/nope")[0], 404)
            self.assertEqual(http_get(port, "/metrics", method="POST")[0], 501)

    def test_bad_value_at_conf_test(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bad.conf")
            with open(path, "w") as f:
                f.write("[admitd]\n; metrics\nmetrics = localhost:http\n[scope s]\n")
            p = run_admitd(["-t", "-c", path])
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stderr, "%s:3: metrics: the port is not a number\n" % path)

    def test_port_in_use_fails_start(self):
        with tempfile.TemporaryDirectory() as tmp, socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            path = os.path.join(tmp, "a.conf")
            with open(path, "w") as f:
                f.write(CONF.replace("127.0.0.1:0", "127.0.0.1:%d" % s.getsockname()[1]))
            p = run_admitd(["-c", path, "--socket", os.path.join(tmp, "a.sock")])
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn('msg="cannot serve metrics"', p.stderr)
        self.assertIn("call=bind: address in use", p.stderr)

    def test_metrics_on_the_command_line_wins(self):
        # The conf's address is taken: only --metrics can make this start.
        # (In a pod: --metrics $(POD_IP):9464, the IP from the downward API.)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            conf = CONF.replace("127.0.0.1:0", "127.0.0.1:%d" % s.getsockname()[1])
            with Admitd(conf, args=["--metrics", "127.0.0.1:0"]) as d, d.connect() as c:
                port = metrics_port(d)
                self.assertNotEqual(port, s.getsockname()[1])
                self.assertEqual(http_get(port, "/healthz")[0], 200)
                # A reload reads the conf's other address again: the command
                # line still wins, so it is no change needing a restart.
                d.proc.send_signal(signal.SIGHUP)
                wait_for(lambda: "conf reloaded" in d.stderr_text(), "the reload")
                self.assertIn("restart_needed=0", d.stderr_text())
                self.assertNotIn("key=metrics", d.stderr_text())
                self.assertIs(c.request({"op": "ping"}).get("ok"), True)
                self.assertEqual(http_get(port, "/healthz")[0], 200)

    def test_bad_metrics_on_the_command_line_is_a_usage_error(self):
        p = run_admitd(["-c", "/nonexistent.conf", "--metrics", "10.0.0.1"])
        self.assertEqual((p.returncode, p.stdout), (2, ""), p.stderr)
        self.assertEqual(p.stderr,
                         "admitd: --metrics 10.0.0.1: not HOST:PORT (e.g. 127.0.0.1:9464)\n")


class MetricsRedisTest(unittest.TestCase):

    def test_redis_calls_errors_and_drain(self):
        conf = CONF.replace("[admitd]\n", "[admitd]\nredis_timeout = 3s\n") + \
            "\n[scope c]\ncluster_concurrency = 2\n" \
            "\n[scope b]\nrule = requests 100/1s\ntimeout = 10s\n"
        with RedisServer() as redis:
            with Admitd(conf, redis_url=redis.url) as d, d.connect() as c:
                port = metrics_port(d)
                wait_for(lambda: c.request({"op": "status"})["backend"] == "redis", "redis up")
                self.assertEqual(http_get(port, "/readyz")[:2], (200, "ready backend=redis\n"))
                s0 = parse(scrape(port))
                self.assertEqual(val(s0, "admitd_redis_up"), 1)
                a = c.request(acquire_req("c", "k"))
                b = c.request(acquire_req("c", "k"))
                self.assertEqual((a["backend"], b["backend"]), ("redis", "redis"))
                self.assertIs(c.request({"op": "release", "lease": a["lease"]})["held"], True)
                self.assertIs(c.request({"op": "penalize", "scope": "c", "key": "k",
                                         "retry_after_ms": 10}).get("ok"), True)
                # An error reply: the acquire goes to the fallback, counted.
                redis.command("SET", "admitd:{c:bad}:s", "not a hash")
                f = c.request(acquire_req("c", "bad"))
                self.assertEqual(f["backend"], "fallback", f)
                text = scrape(port)
                s1 = parse(text)

                def d_(name, **kw):
                    return val(s1, name, **kw) - val(s0, name, **kw)
                self.assertEqual(d_("admitd_redis_calls_total", op="acquire"), 3)
                self.assertEqual(d_("admitd_redis_calls_total", op="release"), 1)
                self.assertEqual(d_("admitd_redis_calls_total", op="penalize"), 1)
                self.assertEqual(d_("admitd_backend_errors_total", op="acquire"), 1)
                self.assertEqual(d_("admitd_backend_errors_total", op="release"), 0)
                self.assertEqual(d_("admitd_fallback_acquires_total", scope="c"), 1)
                self.assertEqual(d_("admitd_acquires_total", scope="c", outcome="acquired"), 3)
                self.assertGreaterEqual(val(s1, "admitd_redis_calls_total", op="heartbeat"), 1)
                self.assertEqual(val(s1, "admitd_backend_errors_total", op="heartbeat"), 0)
                if shutil.which("promtool") is not None:  # (skips in test_promtool_...)
                    promtool(self, text)

                # Batched admissions: three waiters behind a penalty are
                # decided together once it ends (the head asked alone first).
                self.assertIs(c.request({"op": "penalize", "scope": "b", "key": "hot",
                                         "retry_after_ms": 300}).get("ok"), True)
                ws = [d.connect() for _ in range(3)]
                ws[0].send(acquire_req("b", "hot"))
                wait_for(lambda: c.request({"op": "status"})["scopes"]["b"]["waiting"] == 1,
                         "the head waiting")
                for w in ws[1:]:
                    w.send(acquire_req("b", "hot"))
                wait_for(lambda: c.request({"op": "status"})["scopes"]["b"]["waiting"] == 3,
                         "three waiting")
                got = [w.recv() for w in ws]
                self.assertEqual([g.get("backend") for g in got], ["redis"] * 3, got)
                s2 = parse(scrape(port))

                def d2(name, **kw):
                    return val(s2, name, **kw) - val(s1, name, **kw)
                # One batch, or more when the head woke a hair before Redis's
                # clock ended the penalty: each carries all three, and is one call.
                batches = d2("admitd_redis_batches_total", scope="b")
                self.assertGreaterEqual(batches, 1)
                self.assertEqual(d2("admitd_redis_batched_acquires_total", scope="b"), 3 * batches)
                self.assertEqual(d2("admitd_redis_calls_total", op="acquire"), 1 + batches)
                self.assertEqual(d2("admitd_acquires_total", scope="b", outcome="acquired"), 3)
                self.assertEqual(val(s2, "admitd_redis_batches_total", scope="c"), 0)

                # Drain: b's release is owed to a Redis that does not answer,
                # so the daemon waits for it (up to redis_timeout) after
                # SIGTERM, and /readyz says so meanwhile.
                redis.pause()
                try:
                    c.close()  # b is released on close: a call Redis now owes
                    d.proc.send_signal(15)
                    seen = wait_for(lambda: (lambda r: r if r[0] == 503 else None)(
                        http_get(port, "/readyz")), "/readyz 503 while draining")
                    self.assertRegex(seen[1], r"^draining backend=(redis|fallback)\n$")
                    self.assertEqual(http_get(port, "/healthz")[:2], (200, "ok\n"))
                finally:
                    redis.resume()
                self.assertEqual(d.proc.wait(IO_TIMEOUT), 0)
                d.exit_code, d.proc = 0, None
                d.scan_log()

    def test_ready_in_fallback_and_503_while_starting(self):
        dead = "redis://127.0.0.1:%d" % free_tcp_port()
        conf = CONF.replace("[admitd]\n", "[admitd]\nredis_timeout = 1500ms\n") + \
            "\n[scope z]\nfail_mode = closed\n\n[scope f]\nquota = 1/300ms\n"
        d = Admitd(conf, redis_url=dead)
        seen = []

        def poll():  # from before the socket accepts
            try:
                port = metrics_port(d)
            except AssertionError:
                return
            end = time.monotonic() + IO_TIMEOUT
            while time.monotonic() < end:
                try:
                    r = http_get(port, "/readyz")
                except OSError:
                    continue
                seen.append(r[:2])
                if r[0] == 200:
                    return
                time.sleep(0.02)

        t = threading.Thread(target=poll)
        t.start()
        with d:
            t.join(IO_TIMEOUT)
            port = metrics_port(d)
            self.assertEqual(http_get(port, "/readyz")[:2], (200, "ready backend=fallback\n"))
            with d.connect() as c:  # Redis cannot decide, the scope will not guess
                self.assertEqual(c.request(acquire_req("z", "k"))["error"], "unavailable")
                # born while Redis is unreachable: its share starts spent,
                # and is there again a window after its start
                time.sleep(0.35)
                r = c.request(acquire_req("f", "k", timeout_ms=0))
                self.assertEqual((r.get("ok"), r.get("backend")), (True, "fallback"), r)
            got = parse(scrape(port))
            self.assertEqual(val(got, "admitd_redis_up"), 0)
            self.assertEqual(val(got, "admitd_acquires_total", scope="z", outcome="unavailable"), 1)
            self.assertEqual(val(got, "admitd_fallback_acquires_total", scope="f"), 1)
            self.assertEqual(val(got, "admitd_backend_errors_total", op="acquire"), 2)
        self.assertIn((503, "starting backend=fallback\n"), seen)
        self.assertEqual(seen[-1], (200, "ready backend=fallback\n"))


class PromtoolMissingTest(unittest.TestCase):
    """Without the prometheus package, its tests skip and name it."""

    def test_skips_with_the_package_named(self):
        real = shutil.which

        def fake(name, *a, **kw):
            return None if name in ("promtool", "prometheus") else real(name, *a, **kw)
        suite = unittest.TestSuite([MetricsLocalTest("test_promtool_finds_nothing"),
                                    PrometheusTest("test_prometheus_reads_the_same_values")])
        result = unittest.TestResult()
        with unittest.mock.patch.object(shutil, "which", fake):
            suite.run(result)
        self.assertEqual((result.testsRun, result.failures, result.errors), (2, [], []))
        reasons = sorted(reason for _, reason in result.skipped)
        self.assertEqual(reasons, [
            "prometheus is not installed (Debian: apt-get install prometheus; .ci/run installs it)",
            "promtool is not installed (Debian: apt-get install prometheus; .ci/run installs it)"])


class PrometheusTest(unittest.TestCase):
    """The daemon scraped by a real Prometheus; its query API agrees."""

    def query(self, port, q):
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, urllib.parse.urlencode({"query": q}))
        with urllib.request.urlopen(url, timeout=IO_TIMEOUT) as r:
            rep = json.loads(r.read().decode())
        self.assertEqual(rep["status"], "success", rep)
        res = rep["data"]["result"]
        return float(res[0]["value"][1]) if len(res) == 1 else None

    def test_prometheus_reads_the_same_values(self):
        if shutil.which("prometheus") is None:
            self.skipTest(PROMTOOL_MISSING.replace("promtool", "prometheus", 1))
        with Admitd(CONF) as d, d.connect() as c:
            mport = metrics_port(d)
            self.assertIs(c.request(acquire_req("q", "a")).get("ok"), True)
            self.assertEqual(c.request(acquire_req("q", "a", timeout_ms=0))["error"], "limited")
            self.assertEqual(c.request(acquire_req("q", "a", timeout_ms=0))["error"], "limited")
            self.assertIs(c.request(acquire_req("m", "k")).get("ok"), True)
            mine = parse(scrape(mport))
            tmp = tempfile.mkdtemp(prefix="prom-", dir=d.tmp.path)
            cfg = os.path.join(tmp, "prometheus.yml")
            with open(cfg, "w") as f:
                f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        "scrape_configs:\n  - job_name: admitd\n    static_configs:\n"
                        "      - targets: ['127.0.0.1:%d']\n" % mport)
            pport = free_tcp_port()
            log = open(os.path.join(tmp, "prometheus.log"), "w")
            prom = subprocess.Popen(
                ["prometheus", "--config.file", cfg, "--storage.tsdb.path",
                 os.path.join(tmp, "data"), "--web.listen-address", "127.0.0.1:%d" % pport],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                checks = {
                    'admitd_acquires_total{scope="q",outcome="acquired"}':
                        val(mine, "admitd_acquires_total", scope="q", outcome="acquired"),
                    'admitd_acquires_total{scope="q",outcome="limited"}':
                        val(mine, "admitd_acquires_total", scope="q", outcome="limited"),
                    'admitd_leases{scope="m"}': val(mine, "admitd_leases", scope="m"),
                    'admitd_acquire_wait_seconds_count{scope="q"}':
                        val(mine, "admitd_acquire_wait_seconds_count", scope="q"),
                    'admitd_connections': val(mine, "admitd_connections"),
                    'up{job="admitd"}': 1.0,
                }
                self.assertEqual(checks['admitd_acquires_total{scope="q",outcome="limited"}'], 2)

                def agree():
                    try:
                        return all(self.query(pport, q) == v for q, v in checks.items())
                    except (OSError, ValueError):
                        return False
                try:
                    wait_for(agree, "prometheus to scrape the same values", deadline=30)
                except AssertionError:
                    d.tmp.keep()
                    raise
                self.assertEqual(self.query(pport, 'admitd_acquires_total{outcome="limited"}'
                                            ' - ignoring(outcome) admitd_acquires_total'
                                            '{outcome="acquired",scope="q"}'), 1.0)
            finally:
                prom.terminate()
                try:
                    prom.wait(10)
                except subprocess.TimeoutExpired:
                    prom.kill()
                    prom.wait()
                log.close()


if __name__ == "__main__":
    unittest.main()
