"""test_rpool_auth.py - what the daemon says when Redis wants a password.

A requirepass redis-server reached without a password answers the first
long argument of the handshake (SCRIPT LOAD) with "Protocol error:
unauthenticated bulk length" (Redis 7 refuses it before it parses the
command) and short commands with NOAUTH. Either way the daemon's log must
say that Redis requires a password and which keys set it
(redis_password_file, the URL's password); a wrong password must be named
as refused; the password itself never appears. Shown on one Redis and on a
Cluster (where the control connection's CLUSTER SLOTS is refused first).

Run: ADMITD_BIN=daemon/admitd python3 -m unittest tests.integ.test_rpool_auth -v
"""

import unittest

from . import harness
from .harness import Admitd, RedisServer, acquire_req
from .redis_deploy import RedisClusterDeploy, what_is_missing
from .redis_util import status, write_secret

CONF = """
[scope s]
quota = 5/1s
"""

SECRET = "auth-pw-plugh"
NEEDS = "redis requires a password and none is set"
FIX = "set redis_password_file, or the password in the redis URL"


class AuthTest(unittest.TestCase):

    def daemon(self, url, conf=CONF):
        d = Admitd(conf, redis_url=url)
        d.start()
        self.addCleanup(d.cleanup)
        return d

    def wait_log(self, d, text):
        harness._wait_until(lambda: text in d.stderr_text(), 10.0, repr(text), d.stderr_text)

    def assertFallback(self, d):
        self.assertEqual(status(d)["backend"], "fallback")
        with d.connect() as c:
            r = c.request(acquire_req("s", "k", timeout_ms=0))
        self.assertEqual(r.get("backend"), "fallback", r)

    def test_no_password_says_so(self):
        r = RedisServer(password=SECRET, port=True)
        r.start()
        self.addCleanup(r.cleanup)
        d = self.daemon("redis://127.0.0.1:%d" % r.port)
        self.wait_log(d, NEEDS)
        log = d.stderr_text()
        line = next(x for x in log.splitlines() if NEEDS in x)
        self.assertIn(FIX, line)
        self.assertIn("node=127.0.0.1:%d" % r.port, line)
        # The old message, alone, is gone: no "handshake failed" line left
        # the reader to guess.
        self.assertNotIn('msg="redis handshake failed"', log)
        self.assertFallback(d)
        d.stop()
        self.assertNotIn(SECRET, d.stderr_text())

    def test_wrong_password_is_refused(self):
        r = RedisServer(password=SECRET, port=True)
        r.start()
        self.addCleanup(r.cleanup)
        wrong = "not-the-" + SECRET
        pw = write_secret(r.tmp.path, "pw", wrong)
        conf = "[admitd]\nredis_password_file = %s\n%s" % (pw, CONF)
        d = self.daemon("redis://127.0.0.1:%d" % r.port, conf)
        self.wait_log(d, "redis refused the password")
        line = next(x for x in d.stderr_text().splitlines() if "refused the password" in x)
        self.assertIn("check redis_password_file", line)
        self.assertIn("WRONGPASS", line)
        self.assertFallback(d)
        d.stop()
        self.assertNotIn(wrong, d.stderr_text())
        self.assertNotIn(SECRET, d.stderr_text())

    def test_right_password_still_works(self):
        r = RedisServer(password=SECRET, port=True)
        r.start()
        self.addCleanup(r.cleanup)
        pw = write_secret(r.tmp.path, "pw", SECRET)
        conf = "[admitd]\nredis_password_file = %s\n%s" % (pw, CONF)
        d = self.daemon("redis://127.0.0.1:%d" % r.port, conf)
        harness._wait_until(lambda: status(d)["backend"] == "redis", 10.0, "backend redis",
                            d.stderr_text)
        with d.connect() as c:
            rep = c.request(acquire_req("s", "k", timeout_ms=0))
        self.assertEqual(rep.get("backend"), "redis", rep)
        self.assertNotIn("password", d.stderr_text())

    @unittest.skipIf(what_is_missing("cluster"), what_is_missing("cluster") or "")
    def test_cluster_without_password_says_so(self):
        with RedisClusterDeploy(3, password=SECRET) as rc:
            d = self.daemon(rc.url)
            self.wait_log(d, NEEDS)
            line = next(x for x in d.stderr_text().splitlines() if NEEDS in x)
            self.assertIn(FIX, line)
            self.assertIn("NOAUTH", line)
            self.assertFallback(d)
            d.stop()
            self.assertNotIn(SECRET, d.stderr_text())


if __name__ == "__main__":
    unittest.main()
