"""redis_deploy.py - real multi-process Redis deployments on loopback.

The module the tests import. It re-exports the deployments, each in a file
of its own: redis_deploy_base.py (probes, ports, slots, the deployment's
base), redis_deploy_cluster.py (RedisClusterDeploy: a 3-master Redis
Cluster), redis_deploy_sentinel.py (SentinelDeploy: a master, a replica and
three sentinels), redis_deploy_tls.py (TlsFiles, TlsRedis). It owns what the
tests do with a deployment: the probes (the redis-server's version and TLS
support; what_is_missing() names the binary or feature a deployment needs
and this box lacks, so a test can skip with that reason instead of
failing), start_pods (admitd pods on it), has_failed, and
ConfCheckMixin (the conf checks every deployment's test shares).

Every process is a real redis-server started through harness.RedisServer
(temp dir, ports bound a moment ago, readiness polled against a deadline);
nothing here sleeps and hopes but the pacing a caller asks for.
"""

import os
import shutil
import subprocess

from . import harness
from .harness import _TempDir
from .redis_util import Pods, wait_backend
from .redis_deploy_base import admitd_slot, crc16, free_cluster_port, key_slot
from .redis_deploy_base import _bindable  # noqa: F401 (test_redis_cluster uses it)
from .redis_deploy_cluster import ClusterNode, RedisClusterDeploy
from .redis_deploy_sentinel import SentinelDeploy, SentinelServer, role
from .redis_deploy_tls import TlsFiles, TlsRedis

# -------------------------------------------------------------- probes ----


def _redis_version():
    try:
        out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for word in out.split():
        if word.startswith("v="):
            try:
                return tuple(int(x) for x in word[2:].split(".")[:2])
            except ValueError:
                return None
    return None


_TLS_OK = None


def redis_has_tls():
    """Whether this redis-server was built with TLS (it refuses --tls-port
    otherwise): tried once, on a port bound a moment ago."""
    global _TLS_OK
    if _TLS_OK is None:
        tmp = _TempDir("tlsprobe-")
        try:
            files = TlsFiles(tmp.path)
            srv = TlsRedis(files)
            try:
                srv.start()
                _TLS_OK = True
            except AssertionError:
                _TLS_OK = False
            finally:
                srv.cleanup()
        except (OSError, subprocess.SubprocessError):
            _TLS_OK = False
        finally:
            tmp.cleanup()
    return _TLS_OK


def what_is_missing(kind):
    """None when the box can run deployment kind ("cluster", "sentinel",
    "tls"), else the reason it cannot (for unittest.skip)."""
    if shutil.which("redis-server") is None:
        return "redis-server is not installed"
    v = _redis_version()
    if kind == "cluster":
        if shutil.which("redis-cli") is None:
            return "redis-cli (redis-tools) is not installed: it creates the cluster"
        if v is not None and v < (5, 0):
            return "redis-cli --cluster create needs Redis 5+, this is %d.%d" % v
    elif kind == "sentinel":
        if shutil.which("redis-sentinel") is None:
            return "redis-sentinel is not installed"
    elif kind == "tls":
        if shutil.which("openssl") is None:
            return "openssl (the CLI) is not installed: it makes the test certificates"
        if v is not None and v < (6, 0):
            return "redis-server %d.%d has no TLS" % v
        if not redis_has_tls():
            return "this redis-server was built without TLS"
    return None


def has_failed(test):
    """Whether unittest test has failed so far (usable in its cleanups,
    where Python 3.11's _outcome.success does not yet say so)."""
    outcome = getattr(test, "_outcome", None)
    if outcome is None:
        return False
    if not getattr(outcome, "success", True):
        return True
    errors = getattr(outcome, "errors", None)  # Python <= 3.10
    if errors:
        return any(exc for _, exc in errors)
    result = getattr(outcome, "result", None)
    if result is None:
        return False
    return any(t is test or getattr(t, "test_case", None) is test
               for t, _ in list(result.failures) + list(result.errors))


def start_pods(test, conf, deploy, n=1, extra="", keep=(), wait=True):
    """n daemons on deploy (anything with a url) for one test, stopped by its
    cleanup. A failed test keeps every daemon's files and, given keep (a
    callable returning servers), those servers' too. wait: each is on Redis
    before this returns."""
    p = Pods(conf, n=n, admitd_extra=extra, redis=deploy, start_redis=False)
    p.__enter__()

    def stop():
        failed = has_failed(test)
        if failed:
            for x in (keep() if callable(keep) else keep):
                x.tmp.keep()
        p.cleanup(failed)

    test.addCleanup(stop)
    if wait:
        for d in p.daemons:
            wait_backend(d, "redis", 60.0 if harness.VALGRIND else 10.0)
    return p


class ConfCheckMixin:
    """For a unittest.TestCase: assertConfError(text, line, *words) runs
    `admitd -t` on conf text and asserts exit 2 with an error that names
    the file and line (path:line:) and says each of words; assertConfOk
    asserts exit 0."""

    def _conf_t(self, text):
        tmp = _TempDir("conf-")
        self.addCleanup(tmp.cleanup)
        path = os.path.join(tmp.path, "admitd.conf")
        with open(path, "w") as f:
            f.write(text)
        return path, harness.run_admitd(["-t", "-c", path])

    def assertConfError(self, text, line, *words):
        path, r = self._conf_t(text)
        self.assertEqual(r.returncode, 2, (text, r.stdout, r.stderr))
        self.assertIn("%s:%d:" % (path, line), r.stderr, text)
        for w in words:
            self.assertIn(w.lower(), r.stderr.lower(), (text, r.stderr))
        # Refused for what is wrong with it, not because the form is unknown.
        self.assertNotIn("unsupported scheme", r.stderr, text)
        self.assertNotIn("unknown key", r.stderr, text)
        return r.stderr

    def assertConfOk(self, text):
        _, r = self._conf_t(text)
        self.assertEqual(r.returncode, 0, (text, r.stdout, r.stderr))


__all__ = ["ClusterNode", "ConfCheckMixin", "RedisClusterDeploy", "SentinelDeploy", "SentinelServer", "TlsFiles",
           "TlsRedis", "admitd_slot", "crc16", "free_cluster_port", "key_slot", "role", "has_failed",
           "what_is_missing"]
