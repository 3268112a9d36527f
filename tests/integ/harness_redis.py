"""harness_redis.py - a real redis-server for the tests, and a tiny RESP client.

Owns: RedisServer (a redis-server on a temp Unix socket or a free port,
with its conf, started and stopped against deadlines, its log kept when a
test fails), RespConn and resp_encode (a blocking RESP client for the
tests' own calls) and RedisError. Stdlib only; import harness, not this
module.
"""

import os
import signal
import socket
import subprocess

from .harness_base import (START_DEADLINE, STOP_DEADLINE, STALLS, Started, _TempDir, _read_text,
                           _terminate, _wait_until, free_tcp_port)


class RedisError(Exception):
    """An error reply (-ERR ...) from Redis."""


def resp_encode(args):
    """args (str, int or bytes) as one RESP command."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class RespConn:
    """One RESP2 connection: command(*args) -> Python value (str/int/list/None)."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def close(self):
        self.sock.close()

    def _line(self):
        while b"\r\n" not in self.buf:
            d = self.sock.recv(65536)
            if not d:
                raise ConnectionError("redis closed the connection")
            self.buf += d
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            d = self.sock.recv(65536)
            if not d:
                raise ConnectionError("redis closed the connection")
            self.buf += d
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return RedisError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self._exact(n)
            try:
                return data.decode()
            except UnicodeDecodeError:
                return data
        if t == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self._reply() for _ in range(n)]
        raise ConnectionError("bad RESP type byte %r" % t)

    def command(self, *args):
        self.sock.sendall(resp_encode(args))
        r = self._reply()
        if isinstance(r, RedisError):
            raise r
        return r

    def pipeline(self, cmds, depth=16):
        """Send cmds (resp_encode's) depth at a time, reading each chunk's
        replies; raises the first error reply, returns the last reply."""
        last = None
        for i in range(0, len(cmds), depth):
            chunk = cmds[i:i + depth]
            self.sock.sendall(b"".join(chunk))
            for _ in chunk:
                last = self._reply()
                if isinstance(last, RedisError):
                    raise last
        return last


class RedisServer(Started):
    """A throwaway redis-server: Unix socket by default, TCP with port=True.

    start()/stop()/restart() (same socket or port), pause()/resume()
    (SIGSTOP/SIGCONT: the server holds connections but answers nothing),
    .url, .command(*args) via a fresh RESP connection, .cli(*args) via
    redis-cli. Use as a context manager.
    """

    def __init__(self, password=None, port=False, args=()):
        self.password = password
        self.extra_args = list(args)  # more redis-server flags
        self.use_tcp = bool(port)
        self.port = None
        self.proc = None
        self.tmp = _TempDir("redis-")
        self.sock_path = os.path.join(self.tmp.path, "redis.sock")
        self.log_path = os.path.join(self.tmp.path, "redis.log")
        self.paused = False

    @property
    def url(self):
        auth = (":%s@" % self.password) if self.password else ""
        if self.use_tcp:
            return "redis://%s127.0.0.1:%d" % (auth, self.port)
        if self.password:
            return "unix://%s%s" % (auth, self.sock_path)
        return "unix://" + self.sock_path

    def log_text(self):
        return _read_text(self.log_path)

    def start(self):
        if self.use_tcp and self.port is None:
            self.port = free_tcp_port()
        args = ["redis-server", "--save", "", "--appendonly", "no",
                "--dir", self.tmp.path, "--unixsocket", self.sock_path,
                "--unixsocketperm", "700",
                "--port", str(self.port if self.use_tcp else 0),
                "--bind", "127.0.0.1"]
        if self.password:
            args += ["--requirepass", self.password]
        args += self.extra_args
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        log.close()
        STALLS.watch(self.proc.pid)
        self.paused = False

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError("redis-server exited %s\n%s"
                                     % (self.proc.returncode, self.log_text()))
            try:
                return self.command("PING") == "PONG"
            except (OSError, ConnectionError, RedisError):
                return False

        _wait_until(ready, START_DEADLINE, "redis-server to answer PING", self.log_text)
        return self

    def connect(self, timeout=5.0):
        """A RespConn (authenticated when a password is set)."""
        if self.use_tcp:
            s = socket.create_connection(("127.0.0.1", self.port), timeout)
        else:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(timeout)
            try:
                s.connect(self.sock_path)
            except OSError:
                s.close()
                raise
        c = RespConn(s)
        if self.password:
            try:
                c.command("AUTH", self.password)
            except Exception:
                c.close()
                raise
        return c

    def command(self, *args):
        c = self.connect()
        try:
            return c.command(*args)
        finally:
            c.close()

    def cli(self, *args):
        cmd = ["redis-cli"]
        cmd += ["-p", str(self.port)] if self.use_tcp else ["-s", self.sock_path]
        if self.password:
            cmd += ["--no-auth-warning", "-a", self.password]
        r = subprocess.run(cmd + [str(a) for a in args], capture_output=True,
                           text=True, timeout=10)
        return r.stdout.strip()

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self):
        if self.proc is None:
            return
        if self.paused:
            self.resume()
        _terminate(self.proc, STOP_DEADLINE)
        self.proc = None

    def restart(self):
        self.stop()
        try:
            os.unlink(self.sock_path)
        except OSError:
            pass
        if self.use_tcp:
            # The old port is now free; wait until it can be bound again.
            def bindable():
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", self.port))
                    return True
                except OSError:
                    return False
                finally:
                    s.close()
            _wait_until(bindable, STOP_DEADLINE, "port %d to free" % self.port)
        return self.start()

    def cleanup(self, failed=False):
        self.stop()
        if failed:
            self.tmp.keep()
        self.tmp.cleanup()
