"""bench_redis.py - what the benchmark reads from Redis and sends to it.

Owns: the daemon's embedded scripts and their SHA1s, Monitor (a MONITOR
connection that captures the script calls: SCRIPT_CMDS), the EVALSHA
counts and INFO commandstats, a daemon's status, wait_for, and the capture
of the KEYS/ARGV the daemon sends with its acquire script
(capture_acquire_argv, replayed by the ceilings and redis_cost.py).
"""

import hashlib
import os
import re
import socket
import threading
import time

from tests.bench.bench_env import REPO


def _lines_of(path):
    with open(path, "rb") as fh:
        data = fh.read()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return b"".join(line + b"\n" for line in lines)


def embedded_script(name):
    """The exact bytes gen_scripts.sh builds for scripts/NAME.lua (sed adds a
    newline to a last line that lacks one)."""
    libdir = os.path.join(REPO, "scripts", "lib")
    libs = sorted(os.path.join(libdir, f) for f in os.listdir(libdir) if f.endswith(".lua"))
    return b"".join(_lines_of(f) for f in libs + [os.path.join(REPO, "scripts", name + ".lua")])


def sha1(data):
    return hashlib.sha1(data).hexdigest()


_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


class Monitor:
    """A MONITOR connection read by a thread. calls[i] = (CMD, first arg, all args).

    mark() sends ECHO of a unique token on another connection and returns
    once the monitor has seen it: its index orders it exactly against every
    command Redis ran, so counts between two marks are exact (no sleeps)."""

    def __init__(self, redis):
        self.redis = redis
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(redis.sock_path)
        self.sock.sendall(b"MONITOR\r\n")
        self.calls = []
        self.marks = {}
        self.cond = threading.Condition()
        self.closed = False
        self.seq = 0
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        buf = b""
        while True:
            try:
                d = self.sock.recv(1 << 16)
            except OSError:
                d = b""
            if not d:
                break
            buf += d
            *lines, buf = buf.split(b"\r\n")
            with self.cond:
                for raw in lines:
                    args = _QUOTED.findall(raw.decode("utf-8", "replace"))
                    if not args:
                        continue
                    cmd = args[0].upper()
                    first = args[1] if len(args) > 1 else ""
                    if cmd == "ECHO" and first.startswith("bench-mark-"):
                        self.marks[first] = len(self.calls)
                    self.calls.append((cmd, first, args))
                self.cond.notify_all()
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def mark(self, timeout=10.0):
        self.seq += 1
        token = "bench-mark-%d" % self.seq
        self.redis.command("ECHO", token)
        with self.cond:
            if not self.cond.wait_for(lambda: token in self.marks or self.closed, timeout):
                raise AssertionError("MONITOR did not show %s" % token)
            return self.marks[token]

    def between(self, a, b):
        with self.cond:
            return list(self.calls[a:b])

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)


SCRIPT_CMDS = ("EVALSHA", "FCALL")


def evalsha_count(calls, sha=None, exclude=()):
    """Script calls (EVALSHA by SHA or FCALL by function name; sha and
    exclude name scripts as sets of both ids)."""
    return sum(1 for c, a, _ in calls
               if c in SCRIPT_CMDS and (sha is None or a in sha)
               and not any(a in x for x in exclude))


def evalsha_stats(redis):
    """INFO commandstats for the script calls, EVALSHA and FCALL summed:
    {"calls", "failed_calls", "rejected_calls"}."""
    info = redis.command("INFO", "commandstats")
    out = {"calls": 0, "failed_calls": 0, "rejected_calls": 0}
    for m in re.finditer(r"cmdstat_(?:evalsha|fcall):(\S+)", info):
        for kv in m.group(1).split(","):
            k, _, v = kv.partition("=")
            if k in out:
                out[k] += int(v)
    return out


def commandstats_evalsha(redis):
    return evalsha_stats(redis)["calls"]


def status(daemon):
    c = daemon.connect()
    try:
        return c.request({"op": "status"})
    finally:
        c.close()
        daemon._conns.remove(c)


def wait_for(cond, deadline, what):
    end = time.monotonic() + deadline
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.02)


def capture_acquire_argv(mon, daemon, sha_acq, scope="tb", key="k0"):
    """The EVALSHA argv admitd sends for one acquire on SCOPE/KEY, made into a
    redis-benchmark command: every key random, a fresh lease id per call (a
    plain acquire carries none)."""
    a = mon.mark()
    c = daemon.connect()
    r = c.request({"op": "acquire", "scope": scope, "key": key, "timeout_ms": 1000})
    if not r.get("ok") or r.get("backend") != "redis":
        raise AssertionError("capture acquire failed: %r" % r)
    c.request({"op": "release", "lease": r["lease"]})
    c.close()
    daemon._conns.remove(c)
    calls = [args for cmd, first, args in mon.between(a, mon.mark())
             if cmd in SCRIPT_CMDS and first in sha_acq]
    if len(calls) != 1:
        raise AssertionError("expected 1 acquire EVALSHA, saw %d" % len(calls))
    argv = list(calls[0])
    nkeys = int(argv[2])
    tag = "{%s:%s}" % (scope, key)
    for i in range(3, 3 + nkeys):
        if tag not in argv[i]:
            raise AssertionError("acquire key %r lacks the hash tag %s" % (argv[i], tag))
        # Random keys, like the plain script's ceiling (redis-benchmark draws
        # each __rand_int__ on its own: the keys of one call differ, which a
        # single Redis does not mind).
        argv[i] = argv[i].replace(tag, "{%s:__rand_int__}" % scope)
    if argv[3 + nkeys] == "=":
        # A plain acquire: '=', one group ('p', its params, not_after, 1)
        # and its cost; an 'a' group (a bucket that may book ahead) adds
        # extra and give, replayed as 0 (a random key has no units ahead).
        # No lease id. not_after: as below.
        group = argv[5 + nkeys] if len(argv) > 5 + nkeys else None
        want = {"p": 12, "a": 14}.get(group)
        if argv[4 + nkeys] != "1" or want is None or len(argv) != 3 + nkeys + want:
            raise AssertionError("unexpected plain acquire argv %r" % argv)
        argv[3 + nkeys + 9] = "0"
        if group == "a":
            argv[-2:] = ["0", "0"]
        return argv
    lease_at = 3 + nkeys
    lease = argv[lease_at]
    # A fresh lease id per call, same length: redis-benchmark fills
    # __rand_int__ with 12 digits.
    argv[lease_at] = lease[:len(lease) - 12] + "__rand_int__"
    # The last ARGV is not_after, a Redis time just past the daemon's own
    # timeout for that one call: replayed later it would make every ceiling
    # call stop early as stale. 0 disables it (the check itself still runs).
    argv[-1] = "0"
    return argv


_CMDSTAT = re.compile(r"^cmdstat_([^:]+):(\S+?)\r?$", re.M)


def commandstats(redis):
    """{command: {"calls", "failed_calls", ...}} from INFO commandstats."""
    out = {}
    for name, kvs in _CMDSTAT.findall(redis.command("INFO", "commandstats")):
        out[name] = {k: float(v) for k, _, v in (kv.partition("=") for kv in kvs.split(","))}
    return out
