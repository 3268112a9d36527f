"""redis_deploy_sentinel.py - a real master, replica and three sentinels.

Owns: SentinelServer (a redis-server --sentinel), role (a server's
replication role) and SentinelDeploy: SENTINEL FAILOVER, kill -9 of the
master, waiting for the promotion. Import redis_deploy, not this module.
"""

import os
import signal
import socket
import ssl
import subprocess

from . import harness
from .harness import START_DEADLINE, RedisError, RedisServer, RespConn, _TempDir, _wait_until, now
from .redis_deploy_base import _Deployment
from .redis_deploy_tls import TlsRedis

# -------------------------------------------------------------- probes ----


class SentinelServer:
    """One sentinel: `redis-server sentinel.conf --sentinel` on a TCP port,
    its conf (which it rewrites) in its temp dir."""

    def __init__(self, master_name, master_port, quorum=2, down_after_ms=1000,
                 failover_timeout_ms=4000, password=None, tls=None):
        self.tmp = _TempDir("sentinel-")
        self.port = harness.free_tcp_port()
        self.conf_path = os.path.join(self.tmp.path, "sentinel.conf")
        self.log_path = os.path.join(self.tmp.path, "sentinel.log")
        self.password = password
        self.tls = tls
        if tls is not None:
            # TLS only, to clients and (tls-replication) to the nodes and
            # the other sentinels.
            lines = ["port 0", "tls-port %d" % self.port,
                     "tls-cert-file %s" % tls.path("server.crt"),
                     "tls-key-file %s" % tls.path("server.key"),
                     "tls-ca-cert-file %s" % tls.path("ca.crt"),
                     "tls-auth-clients optional", "tls-replication yes"]
        else:
            lines = ["port %d" % self.port]
        lines += [
            "bind 127.0.0.1", "protected-mode no",
            "dir %s" % self.tmp.path,
            "sentinel monitor %s 127.0.0.1 %d %d" % (master_name, master_port, quorum),
            "sentinel down-after-milliseconds %s %d" % (master_name, down_after_ms),
            "sentinel failover-timeout %s %d" % (master_name, failover_timeout_ms),
            "sentinel parallel-syncs %s 1" % master_name,
        ]
        if password:
            # Clients and the other sentinels must AUTH with it.
            lines += ["requirepass %s" % password, "sentinel sentinel-pass %s" % password]
        with open(self.conf_path, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.proc = None
        self.paused = False

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    def log_text(self):
        return harness._read_text(self.log_path)

    def start(self):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(["redis-server", self.conf_path, "--sentinel"], stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        harness.STALLS.watch(self.proc.pid)

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError("sentinel exited %s\n%s" % (self.proc.returncode,
                                                                 self.log_text()))
            try:
                return self.command("PING") == "PONG"
            except (OSError, ConnectionError, RedisError):
                return False
        _wait_until(ready, START_DEADLINE, "sentinel to answer PING", self.log_text)
        return self

    def connect(self, timeout=5.0):
        raw = socket.create_connection(("127.0.0.1", self.port), timeout)
        if self.tls is not None:
            ctx = ssl.create_default_context(cafile=self.tls.path("ca.crt"))
            try:
                raw = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
            except BaseException:
                raw.close()
                raise
        c = RespConn(raw)
        if self.password:
            c.command("AUTH", self.password)
        return c

    def command(self, *args):
        c = self.connect()
        try:
            return c.command(*args)
        finally:
            c.close()

    # SIGSTOP/SIGCONT, as RedisServer's: the sentinel keeps its sockets open
    # and answers nothing until resumed (stop() resumes it first).
    pause = RedisServer.pause
    resume = RedisServer.resume

    def stop(self):
        if self.proc is not None:
            if self.paused:
                self.resume()
            harness._terminate(self.proc, harness.STOP_DEADLINE)
            self.proc = None

    def cleanup(self, failed=False):
        self.stop()
        if failed:
            self.tmp.keep()
        self.tmp.cleanup()


def role(server):
    """ROLE's first field ("master", "slave") of a RedisServer, or None when
    it does not answer."""
    try:
        return server.command("ROLE")[0]
    except (OSError, ConnectionError, RedisError):
        return None


class SentinelDeploy(_Deployment):
    """A master, a replica of it and three sentinels watching it (quorum 2,
    down-after-milliseconds down_after_ms, failover-timeout
    failover_timeout_ms). .url (redis+sentinel://sentinels/NAME), .master()
    (the RedisServer sentinels name now), failover() (SENTINEL FAILOVER),
    kill_master() (kill -9), wait_promoted(). A context manager."""

    NAME = "mymaster"

    def __init__(self, down_after_ms=1000, failover_timeout_ms=4000, sentinel_password=None,
                 redis_password=None, replicas=1, tls=None, converge=True):
        """tls: a TlsFiles: every node and sentinel speaks TLS only, and .url
        asks for it (?tls=1). converge=False: start() returns once every
        sentinel names the master, before they know each other (~5 s
        sooner; enough for discovery, not for a failover)."""
        self.tls = tls
        self.converge = converge
        self.servers = [self._server(redis_password)]
        self.redis_password = redis_password
        self.sentinel_password = sentinel_password
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.n_replicas = replicas
        self.sentinels = []

    def _server(self, password, args=()):
        if self.tls is not None:
            return TlsRedis(self.tls, password=password, args=["--tls-replication", "yes", *args])
        return RedisServer(port=True, password=password, args=args)

    @property
    def url(self):
        return "redis+sentinel://%s/%s%s" % (",".join(s.addr for s in self.sentinels), self.NAME,
                                             "?tls=1" if self.tls else "")

    def start(self):
        m = self.servers[0]
        m.start()
        for _ in range(self.n_replicas):
            args = ["--replicaof", "127.0.0.1", str(m.port)]
            if self.redis_password:
                args += ["--masterauth", self.redis_password]
            r = self._server(self.redis_password, args)
            self.servers.append(r)
            r.start()
        self.wait_replicated(m)
        for _ in range(3):
            s = SentinelServer(self.NAME, m.port, down_after_ms=self.down_after_ms,
                               failover_timeout_ms=self.failover_timeout_ms,
                               password=self.sentinel_password, tls=self.tls)
            if self.redis_password:
                with open(s.conf_path, "a") as f:
                    f.write("sentinel auth-pass %s %s\n" % (self.NAME, self.redis_password))
            self.sentinels.append(s)
            s.start()
        if self.converge:
            self.wait_converged()
        else:
            _wait_until(lambda: self.master_port_by_sentinels() == m.port, 10.0,
                        "sentinels to name the master", self.logs)
        return self

    def wait_replicated(self, master, deadline=20.0):
        """Every other data node is a replica of master with its link up."""
        def ok():
            for r in self.servers:
                if r is master or r.proc is None:
                    continue
                try:
                    info = r.command("INFO", "replication")
                except (OSError, ConnectionError, RedisError):
                    return False
                if ("master_port:%d" % master.port not in info
                        or "master_link_status:up" not in info):
                    return False
            return True
        _wait_until(ok, deadline, "replicas of %d in sync" % master.port, self.logs)

    def wait_converged(self, deadline=30.0):
        """Each sentinel names the same master, knows the other two sentinels
        and the replicas (so a failover can be agreed at once)."""
        def ok():
            m = self.master_port_by_sentinels()
            if m is None:
                return False
            for s in self.sentinels:
                try:
                    info = s.command("SENTINEL", "MASTER", self.NAME)
                except (OSError, ConnectionError, RedisError):
                    return False
                d = dict(zip(info[::2], info[1::2]))
                if (int(d.get("num-other-sentinels", 0)) != len(self.sentinels) - 1
                        or int(d.get("num-slaves", 0)) < self.n_replicas
                        or "s_down" in d.get("flags", "") or "failover" in d.get("flags", "")):
                    return False
            return True
        _wait_until(ok, deadline, "sentinels to converge", self.logs)

    def master_port_by_sentinels(self):
        """The master port every running sentinel names, or None while they
        disagree (or one does not answer)."""
        ports = set()
        for s in self.sentinels:
            if s.proc is None:
                continue
            try:
                a = s.command("SENTINEL", "get-master-addr-by-name", self.NAME)
            except (OSError, ConnectionError, RedisError):
                return None
            if not a:
                return None
            ports.add(int(a[1]))
        return ports.pop() if len(ports) == 1 else None

    def by_port(self, port):
        for r in self.servers:
            if r.port == port:
                return r
        raise KeyError(port)

    def master(self):
        return self.by_port(self.master_port_by_sentinels())

    def replicas(self):
        m = self.master()
        return [r for r in self.servers if r is not m]

    def failover(self):
        """SENTINEL FAILOVER (graceful: the old master is demoted after the
        replica is promoted). Returns (old master, instant asked)."""
        old = self.master()
        t = now()
        self.sentinels[0].command("SENTINEL", "FAILOVER", self.NAME)
        return old, t

    def kill_master(self):
        """kill -9 of the current master. Returns (old master, instant)."""
        old = self.master()
        old.proc.send_signal(signal.SIGKILL)
        old.proc.wait()
        t = now()
        old.proc = None
        return old, t

    def wait_promoted(self, old, deadline=30.0):
        """Until a data node other than old says ROLE master (polled on the
        nodes themselves: the instant of the promotion, not of the sentinels
        agreeing on it, which their hello messages take up to 2 s more to
        spread). Returns (new master, instant seen)."""
        def ok():
            for r in self.servers:
                if r is not old and r.proc is not None and role(r) == "master":
                    return r
            return False
        new = _wait_until(ok, deadline, "a replica promoted", self.logs, interval=0.005)
        return new, now()

    def heal(self):
        """Bring back a data node a test killed (it returns as a master with
        no data; the sentinels make it a replica of the current master) and
        wait until the deployment is as after start(): replicas in sync,
        sentinels agreeing. For a class that shares one deployment."""
        for r in self.servers:
            if r.proc is None:
                r.restart()
        m = self.master()
        self.wait_replicated(m, deadline=30.0)
        self.wait_converged()
        return m

    def logs(self):
        out = []
        for r in self.servers:
            out.append("--- redis %s ---\n%s" % (r.port, r.log_text()[-2000:]))
        for s in self.sentinels:
            out.append("--- sentinel %s ---\n%s" % (s.port, s.log_text()[-2000:]))
        return "\n".join(out)

    def cleanup(self, failed=False):
        for s in self.sentinels:
            s.cleanup(failed)
        for r in self.servers:
            r.cleanup(failed)
