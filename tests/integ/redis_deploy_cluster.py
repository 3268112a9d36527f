"""redis_deploy_cluster.py - a real 3-master Redis Cluster on loopback.

Owns: ClusterNode (a redis-server --cluster-enabled yes) and
RedisClusterDeploy: the nodes, the slot map, a slot migrated by hand, a
master killed and restarted. Every process is a real redis-server started
through harness.RedisServer; import redis_deploy, not this module.
"""

import signal
import subprocess
import time

from .harness import START_DEADLINE, RedisError, RedisServer, _wait_until
from .redis_deploy_base import _Deployment, _bindable, admitd_slot, free_cluster_port

# -------------------------------------------------------------- probes ----


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
