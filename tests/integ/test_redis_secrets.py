"""test_redis_secrets.py - the Redis URL off the command line.

A password in `--redis URL` is readable by every user through ps. admitd
takes the URL from $ADMITD_REDIS when --redis is not given (command line >
environment > conf), and warns once at startup, the password redacted, when
--redis carries one; the environment's URL gets no warning. The password
never appears in the daemon's log.
"""

import unittest

from .harness import Admitd, RedisServer

PASSWORD = "s3cret-Pw"

CONF = """
[admitd]
; generous: the test is about where the URL comes from, not timing
redis_timeout = 5s

[scope s]
rule = requests 100/1h
"""

WARNING = "--redis has a password"


class RedisUrlSourceTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.redis = RedisServer(password=PASSWORD, port=True).start()

    @classmethod
    def tearDownClass(cls):
        cls.redis.cleanup()

    def backend_after_acquire(self, d):
        """status's backend, and the acquire's, once one acquire went through."""
        with d.connect() as c:
            a = c.request({"op": "acquire", "scope": "s", "key": "k", "timeout_ms": 0})
            self.assertIs(a.get("ok"), True, a)
            return c.request({"op": "status"})["backend"], a["backend"]

    @staticmethod
    def log_after_stop(d):
        """The whole log: stop first (it checks the exit), the temp dir goes at the block's end."""
        d.stop()
        return d.stderr_text()

    def booked_in_redis(self):
        return self.redis.command("KEYS", "admitd:{s:k}*")

    def test_url_from_the_environment(self):
        self.redis.command("FLUSHALL")
        with Admitd(CONF, env={"ADMITD_REDIS": self.redis.url}) as d:
            self.assertEqual(self.backend_after_acquire(d), ("redis", "redis"))
            self.assertNotEqual(self.booked_in_redis(), [])
            log = self.log_after_stop(d)
        self.assertNotIn(WARNING, log)
        self.assertNotIn(PASSWORD, log)

    def test_password_on_the_command_line_warns_redacted(self):
        self.redis.command("FLUSHALL")
        with Admitd(CONF, redis_url=self.redis.url) as d:
            self.assertEqual(self.backend_after_acquire(d), ("redis", "redis"))
            log = self.log_after_stop(d)
        warnings = [l for l in log.splitlines() if WARNING in l]
        self.assertEqual(len(warnings), 1, log)
        self.assertIn("redis_password_file", warnings[0])
        self.assertIn("redis://:***@127.0.0.1:%d" % self.redis.port, warnings[0])
        self.assertNotIn(PASSWORD, log)

    def test_command_line_wins_over_the_environment(self):
        # The environment names a Redis that is not there: had it been used,
        # the acquire would have come from the fallback.
        bogus = "redis://:%s@127.0.0.1:1" % PASSWORD
        with Admitd(CONF, redis_url=self.redis.url, env={"ADMITD_REDIS": bogus}) as d:
            self.assertEqual(self.backend_after_acquire(d), ("redis", "redis"))
            self.assertNotIn(PASSWORD, self.log_after_stop(d))

    def test_environment_wins_over_the_conf_and_empty_is_unset(self):
        conf = CONF.replace("[admitd]\n", "[admitd]\nredis = redis://127.0.0.1:1\n")
        with Admitd(conf, env={"ADMITD_REDIS": self.redis.url}) as d:
            self.assertEqual(self.backend_after_acquire(d), ("redis", "redis"))
        # Empty: as if unset, so the conf's (absent) redis: local mode.
        with Admitd(CONF, env={"ADMITD_REDIS": ""}) as d:
            self.assertEqual(self.backend_after_acquire(d), ("local", "local"))

    def test_no_password_no_warning(self):
        url = "redis://127.0.0.1:%d" % self.redis.port
        with Admitd(CONF, redis_url=url) as d:
            with d.connect() as c:
                self.assertIn(c.request({"op": "status"})["backend"], ("redis", "fallback"))
            log = self.log_after_stop(d)
        self.assertNotIn(WARNING, log)
        self.assertIn("admitd started", log)


if __name__ == "__main__":
    unittest.main()
