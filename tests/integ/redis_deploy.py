"""redis_deploy.py - real multi-process Redis deployments on loopback.

Owns: a 3-master Redis Cluster (RedisClusterDeploy: nodes, slot map, a
slot migrated by hand, a master killed and restarted), a master, a replica
and three sentinels (SentinelDeploy: SENTINEL FAILOVER, kill -9 of the
master, waiting for the promotion), and a TLS redis-server with its
certificates (TlsFiles, TlsRedis: a CA, a server certificate for 127.0.0.1
and localhost, a wrong CA, an expired certificate, one for another name, a
client certificate), all made here with the openssl CLI in a temp dir.
Every process is a real redis-server started through harness.RedisServer
(temp dir, ports bound a moment ago, readiness polled against a deadline);
nothing here sleeps and hopes but the pacing a caller asks for.

what_is_missing() names the binary or feature a deployment needs and this
box lacks, so a test can skip with that reason instead of failing.
"""

import os
import shutil
import signal
import socket
import ssl
import subprocess
import time

from . import harness
from .harness import START_DEADLINE, RedisError, RedisServer, RespConn, _TempDir, _wait_until, now
from .redis_util import Pods, wait_backend

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


# --------------------------------------------------------------- ports ----


def _bindable(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_cluster_port():
    """A port free a moment ago whose cluster bus port (+10000) is free too."""
    for _ in range(200):
        p = harness.free_tcp_port()
        if p + 10000 <= 65535 and _bindable(p + 10000):
            return p
    raise AssertionError("no port with a free bus port (+10000) found")


# ---------------------------------------------------------------- slots ----


def _crc16_table():
    tab = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
        tab.append(crc & 0xFFFF)
    return tab


_CRC16 = _crc16_table()


def crc16(data):
    """CRC16-CCITT (XMODEM), what Redis Cluster hashes keys with."""
    crc = 0
    for b in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[((crc >> 8) ^ b) & 0xFF]
    return crc


def key_slot(key):
    """The slot of a Redis key: CRC16 of its hash tag ({...}, when non-empty)
    or of the whole key, mod 16384."""
    k = key.encode() if isinstance(key, str) else key
    s = k.find(b"{")
    if s >= 0:
        e = k.find(b"}", s + 1)
        if e > s + 1:
            k = k[s + 1:e]
    return crc16(k) % 16384


def admitd_slot(scope, key, prefix="admitd"):
    """The slot of every Redis key admitd keeps for (scope, key): they are
    hash-tagged {scope:key} (redis_util.key_name)."""
    return key_slot("%s:{%s:%s}:x" % (prefix, scope, key))


# ------------------------------------------------------------- cluster ----


class ClusterNode(RedisServer):
    """One redis-server of a Redis Cluster on a TCP port with a free bus
    port; its nodes.conf lives in its temp dir, so restart() brings the same
    node (same id, same slots) back."""

    def __init__(self, node_timeout_ms=2000, args=(), tls=None, password=None):
        port = free_cluster_port()
        if tls is not None:
            # TLS only, clients and bus alike (--port 0); the harness's own
            # commands go over the plain Unix socket.
            args = ["--tls-port", str(port), "--tls-cluster", "yes", "--tls-replication", "yes",
                    "--tls-cert-file", tls.path("server.crt"),
                    "--tls-key-file", tls.path("server.key"),
                    "--tls-ca-cert-file", tls.path("ca.crt"),
                    "--tls-auth-clients", "optional", *args]
        super().__init__(port=tls is None, password=password, args=[
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(node_timeout_ms),
            # A master down must cost only its own slots.
            "--cluster-require-full-coverage", "no",
            "--cluster-allow-reads-when-down", "no", *args])
        self.port = port
        self.node_id = None

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    def kill9(self):
        """SIGKILL: the node vanishes with its connections (no shutdown)."""
        if self.proc is not None:
            if self.paused:
                self.resume()
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def info(self, section=None):
        text = self.command("INFO", section) if section else self.command("INFO")
        out = {}
        for line in text.splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                out[k] = v.strip()
        return out

    def cluster_info(self):
        out = {}
        for line in self.command("CLUSTER", "INFO").splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                out[k] = v.strip()
        return out


class _Deployment:
    """A set of servers used as a context manager: start() them all, and on
    a failure while starting or inside the block, cleanup(failed=True)
    keeps every log and temp dir."""

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.cleanup(True)
            raise

    def __exit__(self, exc_type, exc, tb):
        self.cleanup(failed=exc_type is not None)
        return False


class RedisClusterDeploy(_Deployment):
    """n masters (no replicas) made one Redis Cluster with
    `redis-cli --cluster create`. .nodes (ClusterNode), .url
    (redis+cluster://seeds), slot_owner(slot), keys_by_master(scope, n),
    migrate_slot(), kill/restart of a node. A context manager: on a failure
    every log and temp dir is kept."""

    def __init__(self, n=3, node_timeout_ms=2000, tls=None, password=None, layout=None):
        """tls: a TlsFiles: the nodes speak TLS only (clients and bus), and
        .url asks for it (?tls=1). password: every node requires it
        (requirepass); .url does not carry it. layout: slot -> node index,
        for a map redis-cli would not make (many small ranges): each node
        is given its slots by CLUSTER ADDSLOTS and the nodes MEET."""
        self.tls = tls
        self.password = password
        self.layout = layout
        self.nodes = [ClusterNode(node_timeout_ms, tls=tls, password=password)
                      for _ in range(n)]

    @property
    def url(self):
        return "redis+cluster://" + ",".join(n.addr for n in self.nodes) + (
            "?tls=1" if self.tls else "")

    def seeds(self):
        return ",".join(n.addr for n in self.nodes)

    def start(self):
        for n in self.nodes:
            n.start()
        if self.layout is not None:
            return self._start_by_hand()
        tls = ["--tls", "--cacert", self.tls.path("ca.crt")] if self.tls else []
        if self.password:
            tls += ["--no-auth-warning", "-a", self.password]
        r = subprocess.run(["redis-cli", *tls, "--cluster", "create", *[n.addr for n in self.nodes],
                            "--cluster-replicas", "0", "--cluster-yes"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise AssertionError("redis-cli --cluster create failed (%d)\n%s\n%s"
                                 % (r.returncode, r.stdout, r.stderr))
        for n in self.nodes:
            n.node_id = n.command("CLUSTER", "MYID")
        self.wait_ok()
        return self

    def _start_by_hand(self):
        """The cluster of self.layout: ADDSLOTS per node (in one command
        each), a distinct config epoch per node, MEET from the first."""
        own = {i: [] for i in range(len(self.nodes))}
        for s in range(16384):
            own[self.layout(s)].append(s)
        for i, n in enumerate(self.nodes):
            n.command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
            if own[i]:
                n.command("CLUSTER", "ADDSLOTS", *own[i])
        for n in self.nodes[1:]:
            self.nodes[0].command("CLUSTER", "MEET", "127.0.0.1", n.port)
        for n in self.nodes:
            n.node_id = n.command("CLUSTER", "MYID")
        self.wait_ok()
        return self

    def ranges(self, via=None):
        """How many ranges CLUSTER SLOTS lists."""
        return len((via or self.nodes[0]).command("CLUSTER", "SLOTS"))

    def wait_ok(self, deadline=30.0, nodes=None):
        """Every (given) node says cluster_state:ok, knows all nodes and sees
        all 16384 slots served: the cluster has converged."""
        nodes = nodes or self.nodes

        def ok():
            for n in nodes:
                try:
                    ci = n.cluster_info()
                except (OSError, ConnectionError, RedisError):
                    return False
                if (ci.get("cluster_state") != "ok" or ci.get("cluster_slots_ok") != "16384"
                        or ci.get("cluster_known_nodes") != str(len(self.nodes))):
                    return False
            return True
        _wait_until(ok, deadline, "cluster_state:ok on every node", self.logs)

    def node_by_id(self, node_id):
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(node_id)

    def slot_map(self, via=None):
        """{slot: ClusterNode} from CLUSTER SLOTS asked of via (default: the
        first node that answers)."""
        for n in ([via] if via else self.nodes):
            if n.proc is None:
                continue
            try:
                rows = n.command("CLUSTER", "SLOTS")
            except (OSError, ConnectionError):
                continue
            out = {}
            by_port = {x.port: x for x in self.nodes}
            for row in rows:
                start, end, master = int(row[0]), int(row[1]), row[2]
                node = by_port[int(master[1])]
                for s in range(start, end + 1):
                    out[s] = node
            return out
        raise AssertionError("no cluster node answers CLUSTER SLOTS")

    def slot_owner(self, slot):
        return self.slot_map()[slot]

    def keys_by_master(self, scope, per_master=1, prefix="k", avoid=()):
        """{node index: [key, ...]}: per_master admitd keys of scope (key
        names prefix0, prefix1, ...) whose slot each master owns, none of
        their slots in avoid."""
        smap = self.slot_map()
        out = {i: [] for i in range(len(self.nodes))}
        idx = {id(n): i for i, n in enumerate(self.nodes)}
        j = 0
        while any(len(v) < per_master for v in out.values()):
            k = "%s%d" % (prefix, j)
            j += 1
            s = admitd_slot(scope, k)
            i = idx[id(smap[s])]
            if s not in avoid and len(out[i]) < per_master:
                out[i].append(k)
            if j > 100000:
                raise AssertionError("keys_by_master found no keys")
        return out

    def index_of(self, node):
        return self.nodes.index(node)

    def migrate_slot(self, slot, dst, pace=0.0, batch=1, timeout_ms=5000, during=None):
        """Move slot from its owner to node dst by hand, as an operator's
        resharding does: SETSLOT IMPORTING on dst, MIGRATING on the source,
        MIGRATE the slot's keys `batch` at a time (sleeping pace seconds
        between batches: keys live on both nodes meanwhile), then SETSLOT
        NODE on every master (the target first). during(), when given, is
        called once the slot is MIGRATING. Returns the number of keys moved."""
        src = self.slot_owner(slot)
        if src is dst:
            raise AssertionError("slot %d is already on %s" % (slot, dst.addr))
        dst.command("CLUSTER", "SETSLOT", slot, "IMPORTING", src.node_id)
        src.command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst.node_id)
        if during is not None:
            during()
        moved = 0
        c = src.connect()
        try:
            while True:
                keys = c.command("CLUSTER", "GETKEYSINSLOT", slot, batch)
                if not keys:
                    break
                # A key that expired meanwhile is skipped by MIGRATE (NOKEY).
                c.command("MIGRATE", "127.0.0.1", dst.port, "", 0, timeout_ms, "KEYS", *keys)
                moved += len(keys)
                if pace > 0:
                    time.sleep(pace)
        finally:
            c.close()
        dst.command("CLUSTER", "SETSLOT", slot, "NODE", dst.node_id)
        src.command("CLUSTER", "SETSLOT", slot, "NODE", dst.node_id)
        for n in self.nodes:
            if n is not src and n is not dst and n.proc is not None:
                n.command("CLUSTER", "SETSLOT", slot, "NODE", dst.node_id)
        return moved

    def wait_slot_owner(self, slot, node, deadline=10.0):
        """Every running node's CLUSTER SLOTS names node as slot's owner."""
        def ok():
            return all(self.slot_map(via=n)[slot] is node for n in self.nodes
                       if n.proc is not None)
        _wait_until(ok, deadline, "slot %d on %s everywhere" % (slot, node.addr), self.logs)

    def kill9(self, i):
        self.nodes[i].kill9()

    def restart(self, i):
        """Start node i again on its port and nodes.conf; waits until it
        serves its slots again (cluster_state:ok everywhere)."""
        n = self.nodes[i]
        n.proc = None
        _wait_until(lambda: _bindable(n.port) and _bindable(n.port + 10000), START_DEADLINE,
                    "ports %d/+10000 to free" % n.port)
        n.start()
        self.wait_ok()
        return n

    def wait_node_failed(self, i, deadline=15.0):
        """The other nodes mark node i failed (after cluster-node-timeout)."""
        dead = self.nodes[i]

        def ok():
            for n in self.nodes:
                if n is dead or n.proc is None:
                    continue
                for line in n.command("CLUSTER", "NODES").splitlines():
                    f = line.split()
                    if f[0] == dead.node_id and "fail" not in f[2].split(","):
                        return False
            return True
        _wait_until(ok, deadline, "node %s marked fail" % dead.addr, self.logs)

    def logs(self):
        return "\n".join("--- redis %s ---\n%s" % (n.addr, n.log_text()[-3000:])
                         for n in self.nodes)

    def cleanup(self, failed=False):
        for n in self.nodes:
            n.cleanup(failed)


# ------------------------------------------------------------ sentinel ----


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


# ----------------------------------------------------------------- TLS ----


def _openssl(*args, cwd):
    r = subprocess.run(["openssl", *args], capture_output=True, text=True, cwd=cwd, timeout=60)
    if r.returncode != 0:
        raise AssertionError("openssl %s failed\n%s" % (" ".join(args), r.stderr))


class TlsFiles:
    """Certificates made with the openssl CLI in dir:
    ca.crt/ca.key       the test CA
    server.crt/.key     signed by it, SAN IP:127.0.0.1, DNS:localhost
    wrong_ca.crt        another CA, which signed none of these
    expired.crt/.key    signed by the CA, for 127.0.0.1, already expired
    othername.crt/.key  signed by the CA, for wrong.example.invalid only
    client.crt/.key     a client certificate signed by the CA
    self.path(name) gives the absolute path."""

    def __init__(self, dir):
        self.dir = dir
        self._ca("ca", "admitd-test-ca")
        self._ca("wrong_ca", "admitd-wrong-ca")
        san_ok = "subjectAltName=IP:127.0.0.1,DNS:localhost"
        self._leaf("server", "localhost", san_ok, days="2")
        # notAfter a day before now: "certificate has expired".
        self._leaf("expired", "localhost", san_ok, days="-1")
        self._leaf("othername", "wrong.example.invalid",
                   "subjectAltName=DNS:wrong.example.invalid", days="2")
        self._leaf("client", "admitd-client", "extendedKeyUsage=clientAuth", days="2")

    def path(self, name):
        return os.path.join(self.dir, name)

    def _ca(self, name, cn):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key",
                 "-out", name + ".crt", "-days", "2", "-subj", "/CN=" + cn, cwd=self.dir)

    def _leaf(self, name, cn, ext, days):
        with open(os.path.join(self.dir, name + ".ext"), "w") as f:
            f.write(ext + "\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key",
                 "-out", name + ".csr", "-subj", "/CN=" + cn, cwd=self.dir)
        _openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", name + ".crt", "-days", days,
                 "-extfile", name + ".ext", cwd=self.dir)


class TlsRedis(RedisServer):
    """A redis-server that speaks TLS only on TCP (--port 0, --tls-port),
    presenting cert (a TlsFiles name: "server", "expired", "othername"),
    trusting the test CA for client certificates (optional unless
    auth_clients is "yes"). Its Unix socket stays plain for the harness's
    own commands (command(), readiness). .url is rediss://127.0.0.1:port."""

    def __init__(self, files, cert="server", auth_clients="optional", password=None, args=()):
        self.files = files
        self.tls_port = harness.free_tcp_port()
        super().__init__(password=password, args=[
            "--tls-port", str(self.tls_port), "--tls-cert-file", files.path(cert + ".crt"),
            "--tls-key-file", files.path(cert + ".key"),
            "--tls-ca-cert-file", files.path("ca.crt"),
            "--tls-auth-clients", auth_clients, *args])
        # Where it listens (TLS): what a sentinel or a replica is told.
        self.port = self.tls_port

    @property
    def url(self):
        auth = (":%s@" % self.password) if self.password else ""
        return "rediss://%s127.0.0.1:%d" % (auth, self.tls_port)

    def restart(self):
        self.stop()
        try:
            os.unlink(self.sock_path)
        except OSError:
            pass
        _wait_until(lambda: _bindable(self.tls_port), harness.STOP_DEADLINE,
                    "port %d to free" % self.tls_port)
        return self.start()

    def tls_connect(self, ca="ca.crt", server_name="127.0.0.1", cert=None, timeout=5.0):
        """A RespConn over TLS from Python's ssl (verifying the chain against
        ca and the name server_name): the harness's own check that the
        server and its certificates are what a correct client accepts."""
        ctx = ssl.create_default_context(cafile=self.files.path(ca))
        if cert:
            ctx.load_cert_chain(self.files.path(cert + ".crt"), self.files.path(cert + ".key"))
        raw = socket.create_connection(("127.0.0.1", self.tls_port), timeout)
        try:
            s = ctx.wrap_socket(raw, server_hostname=server_name)
        except BaseException:
            raw.close()
            raise
        return RespConn(s)

    def cli_tls(self, *args, ca="ca.crt", host="127.0.0.1"):
        """redis-cli --tls against the TLS port: CompletedProcess."""
        return subprocess.run(["redis-cli", "--tls", "--cacert", self.files.path(ca), "-h", host,
                               "-p", str(self.tls_port), *[str(a) for a in args]],
                              capture_output=True, text=True, timeout=10)


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


# ---------------------------------------------------------------- conf ----


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
