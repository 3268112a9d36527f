"""test_metrics.py - `metrics = HOST:PORT`: /metrics, /healthz and /readyz.

After a known sequence of acquires (each outcome that can be provoked at
will: acquired, limited, budget_exceeded, timeout, too_many_waiters,
exceeds_limit, canceled, unavailable), releases and penalties, every
counter of /metrics is read back exactly, as are the gauges (leases,
waiters, connections, keys once the idle sweep has run) and the wait
histogram's count and buckets; `promtool check metrics` finds nothing in
the text; a real Prometheus started on loopback scrapes the daemon and
its HTTP API answers the same values. HTTP cannot starve the socket:
under a low RLIMIT_NOFILE, 300 half-sent HTTP requests take at most 16
descriptors (past the cap each closes the oldest) while 120 socket clients are
served at once; a client trickling one byte a second is closed at
metrics_timeout (absolute, not restarted by its bytes); a probe takes the
place of the connection that waited longest for its request, so under a
flood of idle connections (64, and more each round) or trickling ones,
all from the probe's own address, /healthz and /readyz answer within 1 s,
round after round; past the
descriptor limit, socket clients are answered `unavailable` at once, not
left hanging. /readyz is 503 while the daemon
starts (a Redis that is down delays the socket by one redis_timeout) and
while it drains (SIGTERM with a release still owed to a paused Redis),
200 otherwise, fallback included; its body names the backend state.
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

from . import harness
from .harness import (IO_TIMEOUT, Admitd, RedisServer, acquire_req, free_tcp_port,
                      run_admitd)

SAMPLE = re.compile(r'^([a-z_]+)(?:\{([^}]*)\})? (\S+)$')


def parse(text):
    """{(name, frozenset of (label, value)): float} of the samples."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, "not a sample line: %r" % line
        labels = frozenset(tuple(kv.split("=", 1)) for kv in m.group(2).split(",")) \
            if m.group(2) else frozenset()
        out[(m.group(1), frozenset((k, v.strip('"')) for k, v in labels))] = float(m.group(3))
    return out


def val(samples, name, **labels):
    key = (name, frozenset(labels.items()))
    if key not in samples:
        raise AssertionError("no sample %s%s" % (name, labels))
    return samples[key]


def http_get(port, path, method="GET"):
    """(status, body, content type) of one request to the metrics listener."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method)
    try:
        with urllib.request.urlopen(req, timeout=IO_TIMEOUT) as r:
            return r.status, r.read().decode(), r.headers.get("Content-Type")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers.get("Content-Type")


def metrics_port(d, deadline=10.0):
    """The port the daemon logged for `metrics = 127.0.0.1:0`."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        m = re.search(r'msg="metrics listening" .* port=(\d+)', d.stderr_text())
        if m:
            return int(m.group(1))
        time.sleep(0.01)
    raise AssertionError("no metrics listening line\n" + d.stderr_text())


def scrape(port):
    code, body, _ = http_get(port, "/metrics")
    assert code == 200, (code, body)
    return body


def wait_for(cond, what, deadline=IO_TIMEOUT):
    """Poll cond() until it returns a true value (a deadline that only ends
    a test that is failing anyway)."""
    end = time.monotonic() + deadline
    while True:
        r = cond()
        if r:
            return r
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.01)


# promtool and prometheus come in Debian's prometheus package, which running
# admitd does not need (and which starts a server and node-exporter on a
# systemd host): the tests that need them skip, saying so, without them.
PROMTOOL_MISSING = ("promtool is not installed (Debian: apt-get install prometheus; "
                    ".ci/run installs it)")


def promtool(test, text):
    """`promtool check metrics` finds nothing in text (skip without promtool)."""
    if shutil.which("promtool") is None:
        test.skipTest(PROMTOOL_MISSING)
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=IO_TIMEOUT)
    test.assertEqual((p.returncode, p.stdout, p.stderr), (0, "", ""))


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

def daemon_fds(d):
    return len(os.listdir("/proc/%d/fd" % d.pid))


def settled_fds(d, deadline=5.0):
    """daemon_fds once it holds still (the harness's readiness probe, a
    connection the daemon closes when it sees its end, may still be open)."""
    end = time.monotonic() + deadline
    last, same = daemon_fds(d), 0
    while same < 3 and time.monotonic() < end:
        time.sleep(0.05)
        n = daemon_fds(d)
        same = same + 1 if n == last else 0
        last = n
    return last


def idle_conns(port, n):
    """n TCP connections to port that send nothing (those the backlog has
    no room for are left connecting)."""
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
    return socks


def half_sent(port, n):
    """n TCP connections to port, each with a request line and no end of
    headers (those the backlog has no room for are left connecting)."""
    socks = idle_conns(port, n)
    time.sleep(0.2)  # the handshakes the kernel completes
    for s in socks:
        try:
            s.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        except OSError:
            pass
    return socks


def read_rest(c):
    """What a closed connection still holds to read."""
    buf = c.buf
    c.sock.settimeout(IO_TIMEOUT)
    while True:
        try:
            d = c.sock.recv(65536)
        except OSError:
            return buf
        if not d:
            return buf
        buf += d


def close_all(socks):
    for s in socks:
        s.close()


def probe(port, path="/healthz", budget=1.0):
    """(status, body, seconds) of one GET the way a kubelet sends it: a new
    connection, the request at once, `budget` seconds for the reply (None
    for the status when there was none in time)."""
    t0 = time.monotonic()
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=budget)
    except OSError:
        return None, "", time.monotonic() - t0
    buf = b""
    try:
        s.settimeout(max(0.01, budget - (time.monotonic() - t0)))
        s.sendall(b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                  % path.encode())
        while True:
            d = s.recv(4096)
            if not d:
                break
            buf += d
            s.settimeout(max(0.01, budget - (time.monotonic() - t0)))
    except OSError:
        pass
    finally:
        s.close()
    took = time.monotonic() - t0
    m = re.match(rb"HTTP/1\.[01] (\d+) ", buf)
    if not m:
        return None, "", took
    return int(m.group(1)), buf.split(b"\r\n\r\n", 1)[-1].decode(), took


class Trickle(threading.Thread):
    """Keeps n connections each sending one byte of a never-ending request
    head every `every` seconds, reconnecting any the daemon closes."""

    def __init__(self, port, n, every=0.1):
        super().__init__(daemon=True)
        self.port, self.n, self.every = port, n, every
        self.stop = threading.Event()
        self.reconnects = 0

    def _open(self):
        return idle_conns(self.port, 1) + [b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 100000]

    def run(self):
        conns = [self._open() for _ in range(self.n)]
        while not self.stop.wait(self.every):
            for c in conns:
                try:
                    c[0].send(c[1][:1])
                    c[1] = c[1][1:]
                except BlockingIOError:
                    pass
                except OSError:
                    c[0].close()
                    c[:] = self._open()
                    self.reconnects += 1
        for c in conns:
            c[0].close()


HTTP_MAX_CONNS = 16  # http.c


class MetricsLimitsTest(unittest.TestCase):

    def test_half_sent_requests_do_not_starve_the_socket(self):
        with Admitd("[admitd]\nmetrics = 127.0.0.1:0\nmetrics_timeout = 1m\n\n[scope s]\n",
                    nofile=256) as d:
            port = metrics_port(d)
            base = settled_fds(d)
            socks = half_sent(port, 300)
            self.addCleanup(close_all, socks)
            # Never more than the cap: past it, each takes the place of the
            # one that waited longest.
            wait_for(lambda: daemon_fds(d) - base == HTTP_MAX_CONNS,
                     "%d http connections" % HTTP_MAX_CONNS)
            time.sleep(0.3)
            self.assertEqual(daemon_fds(d) - base, HTTP_MAX_CONNS)
            # 120 socket clients at once (within the listen backlog of 128),
            # each answered at once.
            t0 = time.monotonic()
            conns = [d.connect() for _ in range(120)]
            for i, c in enumerate(conns):
                c.send(acquire_req("s", "k%d" % i, id=i))
            for i, c in enumerate(conns):
                r = c.recv()
                self.assertEqual((r.get("ok"), r.get("id")), (True, i), r)
            took = time.monotonic() - t0
            self.assertLess(took, 2.0)
            for c in conns:
                c.close()
            self.assertNotIn("accept failed", d.stderr_text())

    # Under valgrind the kernel may hand accept() a descriptor in the range
    # valgrind keeps for itself; valgrind then closes it (the peer's
    # connection, unanswered) and returns EMFILE: not the daemon's doing.
    @unittest.skipIf(harness.VALGRIND, "valgrind closes accepted fds in its reserved range")
    def test_socket_clients_past_the_descriptor_limit_are_answered_unavailable(self):
        with Admitd("[scope s]\n", nofile=64) as d:
            t0 = time.monotonic()
            conns = [d.connect() for _ in range(100)]
            served = unavailable = 0
            for i, c in enumerate(conns):
                try:
                    r = c.request({"op": "ping", "id": i})
                except ConnectionError:
                    # Turned away before the ping was sent or read: the
                    # line waits in the socket, then EOF.
                    r = json.loads(read_rest(c).split(b"\n")[0] or b"{}")
                if r.get("ok") is True:
                    served += 1
                    continue
                self.assertEqual(r.get("error"), "unavailable", r)
                self.assertIn("out of file descriptors", r.get("message", ""))
                unavailable += 1
            took = time.monotonic() - t0
            self.assertEqual(served + unavailable, 100)
            self.assertGreater(unavailable, 0)
            self.assertGreater(served, 30)
            self.assertLess(took, 5.0)
            for c in conns:
                c.close()
            # Descriptors free again: served as ever.
            def served_again():
                try:
                    with d.connect() as c:
                        return c.request({"op": "ping", "id": 1}) == {"ok": True, "id": 1}
                except (ConnectionError, BrokenPipeError):
                    return False
            wait_for(served_again, "a ping served once the clients are gone")
            self.assertIn("out of file descriptors: connections turned away unavailable",
                          d.stderr_text())

    def test_trickling_client_closed_at_the_absolute_deadline(self):
        deadline = 2.0
        with Admitd("[admitd]\nmetrics = 127.0.0.1:0\nmetrics_timeout = 2s\n\n"
                    "[scope s]\n") as d:
            port = metrics_port(d)
            s = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT)
            self.addCleanup(s.close)
            t0 = time.monotonic()
            closed_at = None
            for b in b"GET /metrics HTTP/1.1\r\nHost: trickle\r\nX-Slow: " + b"a" * 100:
                try:
                    s.send(bytes([b]))
                except OSError:
                    closed_at = time.monotonic()
                    break
                s.settimeout(1.0)  # one byte a second
                try:
                    got = s.recv(4096)
                except socket.timeout:
                    continue
                except ConnectionResetError:
                    got = b""
                if not got:
                    closed_at = time.monotonic()
                    break
                self.fail("a reply to a request never finished: %r" % got)
                if time.monotonic() - t0 > deadline + 5:
                    break
            self.assertIsNotNone(closed_at, "the trickling client was never closed")
            self.assertGreaterEqual(closed_at - t0, deadline - 0.05)
            self.assertLess(closed_at - t0, deadline + 1.5)
            # A scrape still works; one behind a full house of half-sent
            # clients is answered once their deadline closes them.
            self.assertIn("admitd_connections", scrape(port))
            self.assertIn("http client sent no whole request within metrics_timeout: closed",
                          d.stderr_text())
            # One behind a full house of half-sent clients takes the place
            # of the one that waited longest, at once.
            socks = half_sent(port, HTTP_MAX_CONNS)
            self.addCleanup(close_all, socks)
            t1 = time.monotonic()
            code, body, _ = http_get(port, "/healthz")
            waited = time.monotonic() - t1
            self.assertEqual((code, body), (200, "ok\n"))
            self.assertLess(waited, 1.0)

    # The kubelet's probes come from the node (or, in the pod, from the
    # same 127.0.0.1 as anything else): what holds connections shares
    # their address, so only what a connection sent sets it apart.
    PROBE_ROUNDS = 5

    def assertProbesAnswered(self, port, rounds=PROBE_ROUNDS, between=None):
        for i in range(rounds):
            for path, want in (("/healthz", (200, "ok\n")), ("/readyz", (200, None))):
                code, body, took = probe(port, path)
                self.assertEqual(code, want[0], "%s: no answer within 1 s (round %d, %.2f s)"
                                 % (path, i, took))
                if want[1] is not None:
                    self.assertEqual(body, want[1])
                self.assertLess(took, 1.0)
            if between is not None:
                between()

    def test_idle_connection_flood_does_not_lock_out_probes(self):
        with Admitd("[admitd]\nmetrics = 127.0.0.1:0\nmetrics_timeout = 1m\n\n[scope s]\n") as d:
            port = metrics_port(d)
            base = settled_fds(d)
            socks = idle_conns(port, 64)
            self.addCleanup(close_all, socks)
            wait_for(lambda: daemon_fds(d) - base == HTTP_MAX_CONNS,
                     "%d http connections" % HTTP_MAX_CONNS)

            def more():  # the flood goes on between rounds
                socks.extend(idle_conns(port, HTTP_MAX_CONNS))
                time.sleep(0.2)
            self.assertProbesAnswered(port, between=more)
            # and it never holds more than the cap
            time.sleep(0.3)
            self.assertLessEqual(daemon_fds(d) - base, HTTP_MAX_CONNS)
            self.assertIn("http connections full: the one waiting longest for its request "
                          "closed", d.stderr_text())

    def test_trickling_connections_do_not_lock_out_probes(self):
        with Admitd("[admitd]\nmetrics = 127.0.0.1:0\nmetrics_timeout = 1m\n\n[scope s]\n") as d:
            port = metrics_port(d)
            base = settled_fds(d)
            # slowloris: 2 x the cap, each a byte every 100 ms; and idle ones
            tr = Trickle(port, 2 * HTTP_MAX_CONNS)
            tr.start()
            self.addCleanup(tr.join, 10)
            self.addCleanup(tr.stop.set)
            socks = idle_conns(port, 32)
            self.addCleanup(close_all, socks)
            wait_for(lambda: daemon_fds(d) - base == HTTP_MAX_CONNS,
                     "%d http connections" % HTTP_MAX_CONNS)
            time.sleep(0.5)
            self.assertProbesAnswered(port, between=lambda: time.sleep(0.2))
            self.assertLessEqual(daemon_fds(d) - base, HTTP_MAX_CONNS)
            self.assertGreater(tr.reconnects, 0)  # trickling held no slot for long
            # A scrape is still whole.
            self.assertIn("admitd_connections", scrape(port))


if __name__ == "__main__":
    unittest.main()
