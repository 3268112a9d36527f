"""metrics_http.py - reading the daemon's HTTP listener in the tests.

Owns: parse and val (the Prometheus text format, a sample by name and
labels), http_get, metrics_port (the port the daemon bound for
`metrics = HOST:0`), scrape, wait_for (poll a condition against a
deadline) and promtool (`promtool check metrics`, skipping, saying why,
where Debian's prometheus package is missing). Used by test_metrics.py,
test_metrics_limits.py and test_bounds.py.
"""

import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

from .harness import IO_TIMEOUT


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
