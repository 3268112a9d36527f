"""test_rpool.py - the Redis pool (daemon/redis_client/rpool.c) against real redis-servers.

Drives tests/tools/rpool_drive (built by `make tests/tools/rpool_drive`, a
prerequisite of test-integ) line by line over stdin and reads one line per
completed call. The pool gets its own Lua scripts from files written here,
so it is tested independently of the daemon's scripts.

Sanitized run (ASan+UBSan build next to the plain one, no shared objects
touched):
    make tests/tools/rpool_drive.asan
    RPOOL_DRIVE=$PWD/tests/tools/rpool_drive.asan python3 -m unittest tests.integ.test_rpool -v
Under valgrind: VALGRIND=1 python3 -m unittest tests.integ.test_rpool -v
Every driver's stderr is scanned for sanitizer/valgrind/assert reports and
its exit status must be 0 (it exits 3 if any call completed twice).
"""

import os
import queue
import re
import subprocess
import threading
import time
import unittest

from tests.integ import harness

DRIVER = os.environ.get("RPOOL_DRIVE") or os.path.join(harness.REPO, "tests", "tools",
                                                       "rpool_drive")
SCALE = 20.0 if harness.VALGRIND else 1.0
# How late a call's timeout may be reported, seconds: timer + pipe + ASan,
# plus (at the check) the stalls of this process measured meanwhile
# (harness.late_allowance; SLACK itself grows with the box's load).
LATE = max(0.15, 3 * harness.SLACK) * SCALE

SCRIPTS = [
    # 0: typed values: ARGV[1]+1, KEYS[1], INCR KEYS[1]
    "return {tonumber(ARGV[1]) + 1, KEYS[1], redis.call('INCR', KEYS[1])}\n",
    # 1: an error reply made by the script
    "return redis.error_reply('ERR boom from script')\n",
    # 2: a runtime error inside the script
    "local t = nil\nreturn t.field\n",
    # 3: a status reply
    "return redis.status_reply('FINE')\n",
]

CALL_RE = re.compile(r"^call (\d+) (\S+)(?: (.*))?$")


class Drive:
    """One rpool_drive process: send(lines), expect(regex) -> (match, t)."""

    def __init__(self, tmp, url, args=(), password=None):
        if not os.access(DRIVER, os.X_OK):
            raise AssertionError("%s not built: run `make tests/tools/rpool_drive`" % DRIVER)
        self.scripts = []
        for i, text in enumerate(SCRIPTS):
            path = os.path.join(tmp, "s%d.lua" % i)
            with open(path, "w") as f:
                f.write(text)
            self.scripts.append(path)
        self.err_path = os.path.join(tmp, "drive%d.stderr" % id(self))
        env = dict(os.environ)
        env.pop("RPOOL_DRIVE_PASSWORD", None)
        if password is not None:
            env["RPOOL_DRIVE_PASSWORD"] = password
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
        env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        cmd = [DRIVER, *args, url, *self.scripts]
        if harness.VALGRIND:
            cmd = harness.VALGRIND_CMD + cmd
        err = open(self.err_path, "wb")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=err, env=env, text=True, bufsize=1)
        err.close()
        self.lines = []  # every stdout line, in order
        self.q = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            self.q.put((line, harness.now()))
        self.proc.stdout.close()
        self.q.put((None, harness.now()))

    def stderr_text(self):
        with open(self.err_path, errors="replace") as f:
            return f.read()

    def own_stderr(self):
        """stderr without valgrind's own lines (it echoes the command line)."""
        return "\n".join(l for l in self.stderr_text().splitlines() if not l.startswith("=="))

    def send(self, *lines):
        self.proc.stdin.write("".join(l + "\n" for l in lines))
        self.proc.stdin.flush()
        return harness.now()

    def expect(self, regex, timeout=10.0):
        """Skip lines until one matches regex; (match, arrival instant). The
        timeout is a deadline for a line that never comes, not a bound."""
        end = harness.now() + timeout * SCALE
        seen = []
        while True:
            left = end - harness.now()
            try:
                line, t = self.q.get(timeout=max(left, 0.001))
            except queue.Empty:
                raise AssertionError("no line matching %r within %.1fs; saw %r\n%s"
                                     % (regex, timeout, seen, self.stderr_text())) from None
            if line is None:
                raise AssertionError("driver exited before %r; saw %r\n%s"
                                     % (regex, seen, self.stderr_text()))
            seen.append(line)
            m = re.match(regex, line)
            if m:
                return m, t

    def call(self, line, timeout=10.0):
        """Send one submitting line and return the completion text after the id."""
        self.send(line)
        m, _ = self.expect(r"^call (\d+) (.*)$", timeout)
        return m.group(2)

    def finish(self):
        """EOF on stdin; assert exit 0, `bye`, each call completed exactly once,
        and a clean stderr. Returns {id: completion text}."""
        self.proc.stdin.close()
        code = self.proc.wait(30 * SCALE)
        self.reader.join(5)
        err = self.stderr_text()
        bad = [m for m in harness.BAD_MARKERS if m in err]
        assert not bad, "driver stderr shows %s:\n%s" % (bad, err)
        assert code == 0, "driver exited %s\n%s\n%s" % (code, self.lines, err)
        assert self.lines and self.lines[-1].startswith("bye "), self.lines
        ncalls = int(re.search(r"calls=(\d+)", self.lines[-1]).group(1))
        done = {}
        for line in self.lines:
            m = CALL_RE.match(line)
            if m:
                cid = int(m.group(1))
                assert cid not in done, "call %d completed twice: %r" % (cid, self.lines)
                done[cid] = line.split(" ", 2)[2]
        assert sorted(done) == list(range(1, ncalls + 1)), \
            "calls without exactly one completion: %r" % self.lines
        return done

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(5)
        if not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass


class RpoolTest(unittest.TestCase):

    def setUp(self):
        self.redis = None
        self.drives = []
        self.tmp = harness._TempDir("rpool-")

    def _failed(self):
        outcome = getattr(self, "_outcome", None)
        if outcome is None:
            return False
        if hasattr(outcome, "errors"):  # Python < 3.11
            return any(e for _, e in outcome.errors)
        result = outcome.result
        return any(t is self for t, _ in result.errors + result.failures)

    def tearDown(self):
        failed = self._failed()
        for d in self.drives:
            d.kill()
        if self.redis is not None:
            self.redis.cleanup(failed=failed)
        if failed:
            self.tmp.keep()
        self.tmp.cleanup()

    def start_redis(self, **kw):
        self.redis = harness.RedisServer(**kw).start()
        return self.redis

    def drive(self, url=None, args=("-n", "2", "-t", "300", "-b", "50:200"), password=None):
        d = Drive(self.tmp.path, url or self.redis.url, args, password)
        self.drives.append(d)
        d.send("waitup %d" % int(5000 * SCALE))
        d.expect(r"^(up|waitup timeout)$")
        return d

    # (1) eval works and returns typed replies
    def test_eval_typed_replies(self):
        self.start_redis()
        d = self.drive()
        self.assertEqual(d.call("eval 0 1 k 41"), 'ok arr [int 42, str "k", int 1]')
        self.assertEqual(d.call("eval 0 1 k 0"), 'ok arr [int 1, str "k", int 2]')
        self.assertEqual(d.call("eval 3 0"), 'ok status "FINE"')
        self.assertEqual(d.call("cmd GET k"), 'ok str "2"')
        self.assertEqual(d.call("cmd GET missing"), "ok nil")
        self.assertEqual(d.call("cmd INCRBY k 40"), "ok int 42")
        self.assertEqual(self.redis.command("GET", "k"), "42")
        # a callback that submits a new call (re-entrancy)
        d.send("evalchain 0 1 c 1")
        d.expect(r'^call 7 ok arr \[int 2, str "c", int 1\]$')
        d.expect(r'^call 8 ok status "PONG"$')
        done = d.finish()
        self.assertEqual(len(done), 8)

    # (2) SCRIPT FLUSH between calls: the next call still succeeds, one reload
    def test_noscript_reload_once(self):
        self.start_redis()
        d = self.drive(args=("-n", "1", "-t", "500"))
        self.assertEqual(d.call("eval 0 1 k 1"), 'ok arr [int 2, str "k", int 1]')

        def stats():
            info = self.redis.command("INFO", "commandstats")
            out = {}
            for name in ("evalsha", "script|load"):
                m = re.search(r"cmdstat_%s:calls=(\d+)" % re.escape(name), info)
                out[name] = int(m.group(1)) if m else 0
            return out

        before = stats()
        self.assertEqual(self.redis.command("SCRIPT", "FLUSH"), "OK")
        self.assertEqual(self.redis.command("SCRIPT", "EXISTS", "0" * 40), [0])
        self.assertEqual(d.call("eval 0 1 k 1"), 'ok arr [int 2, str "k", int 2]')
        after = stats()
        # one EVALSHA answered NOSCRIPT, one SCRIPT LOAD, one retried EVALSHA
        self.assertEqual(after["evalsha"] - before["evalsha"], 2)
        self.assertEqual(after["script|load"] - before["script|load"], 1)
        # loaded again: the next call is a single EVALSHA
        self.assertEqual(d.call("eval 0 1 k 1"), 'ok arr [int 2, str "k", int 3]')
        self.assertEqual(stats()["evalsha"] - after["evalsha"], 1)
        self.assertIn("NOSCRIPT", d.stderr_text())
        d.finish()

    # (3) SIGSTOP: timeout within timeout_ms + slack, exactly once; then back
    def test_frozen_redis_times_out_then_recovers(self):
        self.start_redis()
        timeout = 0.3
        d = self.drive()
        self.assertEqual(d.call("eval 0 1 k 1"), 'ok arr [int 2, str "k", int 1]')
        self.redis.pause()
        t0 = d.send("eval 0 1 k 1")
        m, t1 = d.expect(r"^call 2 (\S+)")
        self.assertEqual(m.group(1), "timeout")
        self.assertGreaterEqual(t1 - t0, timeout - 0.01)
        self.assertLess(t1 - t0, timeout + LATE + harness.late_allowance(t0, t1))
        # the other connection (if still up) times out too, or nothing is up
        r = d.call("eval 0 1 k 1", timeout=3)
        self.assertIn(r, ("timeout", "conn rejected"))
        d.send("waitdown %d" % int(2000 * SCALE))
        d.expect(r"^down$")
        self.assertEqual(d.call("eval 0 1 k 1"), "conn rejected")
        time.sleep(0.5)  # reconnect attempts keep timing out while frozen
        self.redis.resume()
        d.send("waitup %d" % int(5000 * SCALE))
        d.expect(r"^up$")
        # the timed-out INCRs may or may not have run; the pool never retried them
        n = int(self.redis.command("GET", "k"))
        self.assertIn(n, (1, 2, 3))
        self.assertEqual(d.call("eval 0 1 k 1"), 'ok arr [int 2, str "k", int %d]' % (n + 1))
        d.send("sleep 400")  # a late duplicate completion would show up here
        done = d.finish()
        self.assertEqual(done[2], "timeout")
        err = d.own_stderr()
        self.assertIn("redis call timed out", err)
        # while frozen, handshakes hung and were cut by the connect deadline
        self.assertIn('reason="connect timeout"', err)

    # (4) stopped: fail fast; restarted on the same socket: back up
    def test_stopped_redis_fails_fast_and_comes_back(self):
        self.start_redis()
        d = self.drive()
        self.assertEqual(d.call("eval 0 1 k 1"), 'ok arr [int 2, str "k", int 1]')
        self.redis.stop()
        d.expect(r"^state down$", 5)
        t0 = harness.now()
        for _ in range(3):
            self.assertEqual(d.call("eval 0 1 k 1"), "conn rejected")
        # Fast: not each call waiting out the 300ms timeout (0.9 s for
        # three), whatever the load adds to 0.5 s.
        took = harness.now() - t0
        self.assertLess(took, min(0.5 * SCALE + harness.late_allowance(t0), 0.9 * SCALE - 0.05))
        self.redis.restart()
        d.expect(r"^state up$", 5)  # backoff is capped at 200ms here
        # a new server: scripts were loaded again on connect, k starts over
        self.assertEqual(d.call("eval 0 1 k 1"), 'ok arr [int 2, str "k", int 1]')
        d.finish()

    # (5) AUTH: requirepass, ACL user, wrong password; never the secret in logs
    def test_auth(self):
        secret = "Req-Pass-7f3a9c"
        self.start_redis(password=secret)
        # password from the environment
        d = self.drive(url="unix://" + self.redis.sock_path, password=secret)
        self.assertEqual(d.call("eval 0 1 k 1"), 'ok arr [int 2, str "k", int 1]')
        self.assertEqual(d.call("cmd ACL WHOAMI"), 'ok str "default"')
        d.finish()
        # password in the URL, db 3 through ?db=
        d = self.drive(url=self.redis.url + "?db=3")
        self.assertEqual(d.call("eval 0 1 k 1"), 'ok arr [int 2, str "k", int 1]')
        self.assertRegex(d.call("cmd CLIENT INFO"), r'^ok str ".* db=3 ')
        d.finish()
        # an ACL user
        alice_pw = "Alice-Pw-55e1d0"
        self.assertEqual(self.redis.command("ACL", "SETUSER", "alice", "on", ">" + alice_pw,
                                            "~*", "+@all"), "OK")
        d = self.drive(url="unix://" + self.redis.sock_path, password=alice_pw,
                       args=("-n", "2", "-t", "300", "-u", "alice"))
        self.assertEqual(d.call("cmd ACL WHOAMI"), 'ok str "alice"')
        self.assertEqual(d.call("eval 0 1 k 1"), 'ok arr [int 2, str "k", int 2]')
        d.finish()
        # wrong passwords: never up, calls rejected, the secret never logged
        wrong = "Wrong-Pw-0b77e4"
        for args in (("-n", "1", "-t", "300", "-b", "50:100"),
                     ("-n", "1", "-t", "300", "-b", "50:100", "-u", "alice")):
            d = Drive(self.tmp.path, "unix://" + self.redis.sock_path, args, wrong)
            self.drives.append(d)
            d.send("waitup 700")
            d.expect(r"^waitup timeout$")
            self.assertEqual(d.call("eval 0 1 k 1"), "conn rejected")
            d.finish()
            err = d.own_stderr()
            self.assertIn("redis refused the password", err)
            self.assertIn("step=authenticating", err)
            self.assertRegex(err, r"WRONGPASS|invalid")
            for s in (wrong, secret, alice_pw):
                self.assertNotIn(s, err)
                self.assertNotIn(s, "\n".join(d.lines))
        for d in self.drives:
            for s in (wrong, secret, alice_pw):
                self.assertNotIn(s, d.own_stderr())

    # (6) a script error is an RV_ERR reply, not OK data
    def test_script_errors_are_err(self):
        self.start_redis()
        d = self.drive()
        self.assertEqual(d.call("eval 1 0"), 'ok err "ERR boom from script"')
        r = d.call("eval 2 0")
        self.assertRegex(r, r'^ok err "ERR .*(nil|index|field).*"$')
        self.redis.command("SET", "s", "not-a-number")
        r = d.call("eval 0 1 s 1")
        self.assertRegex(r, r'^ok err ".*not an integer.*"$')
        self.assertRegex(d.call("cmd NOSUCHCOMMAND x"), r'^ok err "ERR unknown command')
        # the connection is still fine after error replies
        self.assertEqual(d.call("eval 0 1 k 1"), 'ok arr [int 2, str "k", int 1]')
        d.finish()

    # (7) a pipelined multi returns every result, in order
    def test_multi_in_order(self):
        self.start_redis()
        d = self.drive()
        lines = ["multi 6"] + ["eval 0 1 m %d" % i for i in range(5)]
        lines.insert(3, "eval 1 0")  # an error in the middle
        d.send(*lines)
        got = [d.expect(r"^call (\d+) (.*)$")[0].groups() for _ in range(6)]
        self.assertEqual([int(i) for i, _ in got], [1, 2, 3, 4, 5, 6])
        self.assertEqual([r for _, r in got], [
            'ok arr [int 1, str "m", int 1]',
            'ok arr [int 2, str "m", int 2]',
            'ok err "ERR boom from script"',
            'ok arr [int 3, str "m", int 3]',
            'ok arr [int 4, str "m", int 4]',
            'ok arr [int 5, str "m", int 5]',
        ])
        # one connection took the whole pipeline: INCRs in submission order
        self.assertEqual(self.redis.command("GET", "m"), "5")
        d.finish()

    # rpool_free with calls pending: each completes once with shutdown
    def test_free_with_pending_calls(self):
        self.start_redis()
        d = self.drive(args=("-n", "2", "-t", "5000"))
        self.assertEqual(d.call("eval 0 1 k 1"), 'ok arr [int 2, str "k", int 1]')
        self.redis.pause()
        d.send("eval 0 1 k 1", "eval 0 1 k 2", "multi 2", "eval 0 1 a 1", "eval 0 1 b 1",
               "sleep 50", "free", "eval 0 1 k 3")
        got = sorted(d.expect(r"^call ([2-5]) (.*)$")[0].groups() for _ in range(4))
        self.assertEqual(got, [(str(i), "shutdown") for i in range(2, 6)])
        self.assertEqual(d.expect(r"^call 6 (.*)$")[0].group(1), "conn rejected")
        self.redis.resume()
        d.finish()

    # a callback may free the pool; the calls still queued complete once
    def test_free_from_callback(self):
        self.start_redis()
        d = self.drive()
        d.send("evalfree 0 1 k 1", "eval 0 1 k 1", "eval 0 1 k 1")
        done = d.finish()
        # Two connections: Redis may run the calls in any order across them,
        # so the first one's INCR is 1, 2 or 3 (the suite saw 2 once).
        self.assertRegex(done[1], r'^ok arr \[int 2, str "k", int [123]\]$')
        for i in (2, 3):
            self.assertRegex(done[i], r'^(ok arr .*|shutdown)$')

    # TCP, with the db in the path
    def test_tcp_and_db(self):
        self.start_redis(port=True)
        d = self.drive(url=self.redis.url + "/2")
        self.assertEqual(d.call("eval 0 1 k 5"), 'ok arr [int 6, str "k", int 1]')
        self.assertRegex(d.call("cmd CLIENT INFO"), r'^ok str ".* db=2 ')
        c = self.redis.connect()
        try:
            self.assertEqual(c.command("SELECT", "2"), "OK")
            self.assertEqual(c.command("GET", "k"), "1")
        finally:
            c.close()
        self.assertIsNone(self.redis.command("GET", "k"))  # not in db 0
        d.finish()

    def test_bad_url(self):
        self.start_redis()
        d = Drive(self.tmp.path, "redis://u:Hidden-Pw@h:99999", ())
        self.drives.append(d)
        m, _ = d.expect(r"^error (.*)$")
        self.assertIn("port must be a number", m.group(1))
        self.assertNotIn("Hidden-Pw", m.group(1))
        d.proc.stdin.close()
        self.assertEqual(d.proc.wait(10), 1)


if __name__ == "__main__":
    unittest.main()
