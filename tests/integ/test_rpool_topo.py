"""test_rpool_topo.py - the Redis client over TLS, a Redis Cluster and Sentinel.

The pool itself (daemon/redis_client/) driven by tests/tools/rpool_drive, as in
test_rpool.py, against real redis-servers started here on loopback:
  - TLS: redis-server --tls-port with a CA, server and client certificates
    made by the test (openssl CLI); a wrong CA, a wrong name and a client
    without the certificate the server asks for are refused, and nothing is
    served over them.
  - Cluster: three masters (`redis-cli --cluster create`); calls reach the
    owner of their key's slot, `nodes` lists the three with their slots; a
    slot moved by hand is followed (MOVED), and a key mid-migration is
    reached with ASK.
  - Sentinel: a master, a replica and one sentinel; calls go to the master,
    and after SENTINEL FAILOVER to the new one.
"""

import os
import re
import shutil
import subprocess
import time
import unittest

from tests.integ import harness
from tests.integ.test_rpool import SCALE, Drive

HAVE_OPENSSL = shutil.which("openssl") is not None
HAVE_CLI = shutil.which("redis-cli") is not None


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certs(d):
    """ca.crt, srv.{crt,key} (localhost, 127.0.0.1), cli.{crt,key}, other-ca.crt."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.crt", "-days", "2", "-subj", "/CN=admitd-test-ca", cwd=d)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "other-ca.key",
            "-out", "other-ca.crt", "-days", "2", "-subj", "/CN=other-ca", cwd=d)
    with open(os.path.join(d, "ext.cnf"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name, cn, ext in (("srv", "localhost", True), ("cli", "client", False)):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key", "-out",
                name + ".csr", "-subj", "/CN=" + cn, cwd=d)
        openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", name + ".crt", "-days", "2",
                *(["-extfile", "ext.cnf"] if ext else []), cwd=d)


class TopoBase(unittest.TestCase):

    def setUp(self):
        self.tmp = harness._TempDir("rtopo-")
        self.servers = []
        self.drives = []

    def tearDown(self):
        for d in self.drives:
            d.kill()
        for s in self.servers:
            s.cleanup()
        self.tmp.cleanup()

    def server(self, args=(), port=True):
        s = harness.RedisServer(port=port, args=args)
        self.servers.append(s)
        return s

    def drive(self, url, env=None, up=True, args=("-n", "2", "-t", "500", "-b", "50:200")):
        old = {}
        for k, v in (env or {}).items():
            old[k] = os.environ.get(k)
            os.environ[k] = v
        try:
            d = Drive(self.tmp.path, url, args)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.drives.append(d)
        d.send("waitup %d" % int((5000 if up else 1500) * SCALE))
        m, _ = d.expect(r"^(up|waitup timeout)$")
        self.assertEqual(m.group(1), "up" if up else "waitup timeout", d.stderr_text())
        return d


@unittest.skipUnless(HAVE_OPENSSL, "openssl CLI missing")
class TlsTest(TopoBase):

    def start_tls(self, auth_clients="no"):
        make_certs(self.tmp.path)
        p = lambda n: os.path.join(self.tmp.path, n)
        self.tls_port = harness.free_tcp_port()
        s = harness.RedisServer(port=False, args=(
            "--tls-port", str(self.tls_port), "--tls-cert-file", p("srv.crt"),
            "--tls-key-file", p("srv.key"), "--tls-ca-cert-file", p("ca.crt"),
            "--tls-auth-clients", auth_clients))
        self.servers.append(s)
        s.start()
        return s

    def url(self, host="127.0.0.1"):
        return "rediss://%s:%d" % (host, self.tls_port)

    def ca(self, name="ca.crt"):
        return {"RPOOL_DRIVE_TLS_CA": os.path.join(self.tmp.path, name)}

    def test_verified_calls(self):
        self.start_tls()
        for host in ("127.0.0.1", "localhost"):  # IP SAN and DNS SAN
            d = self.drive(self.url(host), self.ca())
            self.assertEqual(d.call("eval 0 1 tk 1"), 'ok arr [int 2, str "tk", int %d]'
                             % (1 if host == "127.0.0.1" else 2))
            d.finish()
        self.assertEqual(self.servers[0].command("GET", "tk"), "2")

    def test_wrong_ca_refused(self):
        self.start_tls()
        d = self.drive(self.url(), self.ca("other-ca.crt"), up=False)
        self.assertEqual(d.call("eval 0 1 k 1"), "conn rejected")
        d.finish()
        self.assertIn("certificate verify failed", d.stderr_text())
        self.assertIsNone(self.servers[0].command("GET", "k"))

    def test_wrong_name_refused(self):
        self.start_tls()
        env = dict(self.ca(), RPOOL_DRIVE_TLS_NAME="redis.example.com")
        d = self.drive(self.url(), env, up=False)
        d.finish()
        self.assertRegex(d.stderr_text(), r"certificate verify failed: [^\n]*(mismatch|name)")

    def test_no_verify_accepts_any(self):
        self.start_tls()
        env = dict(self.ca("other-ca.crt"), RPOOL_DRIVE_TLS_NOVERIFY="1")
        d = self.drive(self.url(), env)
        self.assertTrue(d.call("eval 0 1 k 1").startswith("ok arr"))
        d.finish()

    def test_client_certificate(self):
        self.start_tls(auth_clients="yes")
        d = self.drive(self.url(), self.ca(), up=False)  # none offered: refused
        d.finish()
        env = dict(self.ca(), RPOOL_DRIVE_TLS_CERT=os.path.join(self.tmp.path, "cli.crt"),
                   RPOOL_DRIVE_TLS_KEY=os.path.join(self.tmp.path, "cli.key"))
        d = self.drive(self.url(), env)
        self.assertTrue(d.call("eval 0 1 k 1").startswith("ok arr"))
        d.finish()


def cluster_ports(n):
    """n ports whose cluster bus port (+10000) is free too."""
    ports = []
    while len(ports) < n:
        p = harness.free_tcp_port()
        if p + 10000 > 65535 or p in ports:
            continue
        import socket
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p + 10000))
        except OSError:
            continue
        finally:
            s.close()
        ports.append(p)
    return ports


@unittest.skipUnless(HAVE_CLI, "redis-cli missing")
class ClusterTest(TopoBase):

    def start_cluster(self):
        self.nodes = []
        for p in cluster_ports(3):
            s = self.server(args=("--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
                                  "--cluster-require-full-coverage", "no",
                                  "--cluster-config-file", "nodes-%d.conf" % p))
            s.port = p
            s.start()
            self.nodes.append(s)
        r = subprocess.run(["redis-cli", "--cluster", "create",
                            *["127.0.0.1:%d" % s.port for s in self.nodes],
                            "--cluster-replicas", "0", "--cluster-yes"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if all("cluster_state:ok" in s.cli("CLUSTER", "INFO") for s in self.nodes):
                return
            time.sleep(0.1)
        self.fail("cluster not ok")

    def url(self):
        return "redis+cluster://127.0.0.1:%d" % self.nodes[0].port

    def owner(self, key):
        """(server, slot, node id) owning key, from the first node's view."""
        slot = int(self.nodes[0].cli("CLUSTER", "KEYSLOT", key))
        for line in self.nodes[0].cli("CLUSTER", "NODES").splitlines():
            f = line.split()
            port = int(f[1].split("@")[0].rsplit(":", 1)[1])
            for r in f[8:]:
                if r.startswith("["):
                    continue
                lo, _, hi = r.partition("-")
                if int(lo) <= slot <= int(hi or lo):
                    return next(x for x in self.nodes if x.port == port), slot, f[0]
        self.fail("no owner for slot %d" % slot)

    def test_keys_on_every_master(self):
        self.start_cluster()
        d = self.drive(self.url())
        keys = ["{k%d}:x" % i for i in range(30)]
        for k in keys:
            self.assertRegex(d.call("eval 0 1 %s 1" % k), r'^ok arr \[int 2, str "%s", int 1\]$'
                             % re.escape(k))
        for k in keys:  # every key is on its owner: a plain GET there finds it
            s, _, _ = self.owner(k)
            self.assertEqual(s.cli("GET", k), "1")
        owners = {self.owner(k)[0].port for k in keys}
        self.assertEqual(len(owners), 3)
        d.send("nodes")
        m, _ = d.expect(r"^nodes (\S+) (\d+)$")
        self.assertEqual(m.groups(), ("cluster", "3"))
        total = 0
        for _ in range(3):
            m, _ = d.expect(r"^node 127\.0\.0\.1:(\d+) ready slots=(\d+) calls=(\d+) failures=0$")
            total += int(m.group(2))
        self.assertEqual(total, 16384)
        d.finish()

    def test_moved_slot_is_followed(self):
        self.start_cluster()
        d = self.drive(self.url())
        key = "{mv}:x"
        self.assertTrue(d.call("eval 0 1 %s 1" % key).startswith("ok arr [int 2"))
        src, slot, src_id = self.owner(key)
        dst = next(s for s in self.nodes if s is not src)
        dst_id = dst.cli("CLUSTER", "MYID")
        # migrate the slot by hand, key by key, then hand it over
        self.assertEqual(dst.cli("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id), "OK")
        self.assertEqual(src.cli("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id), "OK")
        # mid-migration a key still on the source is served there; one that is
        # not (a new key) is answered ASK and written on the target
        self.assertEqual(d.call("eval 0 1 {mv}:new 1"), 'ok arr [int 2, str "{mv}:new", int 1]')
        self.assertTrue(src.cli("EXISTS", "{mv}:new").startswith("ASK "))  # not on the source
        for k in src.cli("CLUSTER", "GETKEYSINSLOT", slot, 100).split():
            src.cli("MIGRATE", "127.0.0.1", dst.port, k, 0, 5000)
        for s in self.nodes:
            s.cli("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        self.assertEqual(d.call("eval 0 1 %s 1" % key), 'ok arr [int 2, str "%s", int 2]' % key)
        self.assertEqual(dst.cli("GET", key), "2")
        self.assertEqual(dst.cli("GET", "{mv}:new"), "1")  # written there after ASKING
        d.finish()


    def test_master_down_fails_its_keys_only_and_is_reported_back(self):
        self.start_cluster()
        d = self.drive(self.url())
        key = "{back}:x"
        self.assertTrue(d.call("eval 0 1 %s 1" % key).startswith("ok arr [int 2"))
        src, _, _ = self.owner(key)
        other = next(k for k in ("{o%d}:x" % i for i in range(100)) if self.owner(k)[0] is not src)
        src.stop()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the pool sees the connections go
            r = d.call("eval 0 1 %s 1" % key)
            if r in ("conn", "conn rejected"):
                break
            time.sleep(0.05)
        self.assertIn(r, ("conn", "conn rejected"))
        # another master's keys are still served, and the pool is still up
        self.assertTrue(d.call("eval 0 1 %s 1" % other).startswith("ok arr [int 2"))
        src.start()  # the same port and nodes.conf: the same master, empty
        d.expect(r"^node_up 127\.0\.0\.1:%d$" % src.port, timeout=15)
        # served again (empty: INCR starts over) once the node has rejoined
        # (until then it answers CLUSTERDOWN, which is passed on as is)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            r = d.call("eval 0 1 %s 1" % key)
            if not r.startswith('ok err "CLUSTERDOWN'):
                break
            time.sleep(0.1)
        self.assertEqual(r, 'ok arr [int 2, str "%s", int 1]' % key)
        self.assertNotIn("state down", d.lines)  # the pool never reported down
        d.finish()


@unittest.skipUnless(shutil.which("redis-server"), "redis-server missing")
class SentinelTest(TopoBase):

    def start_sentinel(self):
        self.master = self.server()
        self.master.start()
        self.replica = self.server()
        self.replica.start()
        self.replica.cli("REPLICAOF", "127.0.0.1", self.master.port)
        self.sport = harness.free_tcp_port()
        conf = os.path.join(self.tmp.path, "sentinel.conf")
        with open(conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\ndir %s\n"
                    "sentinel monitor mm 127.0.0.1 %d 1\n"
                    "sentinel down-after-milliseconds mm 1000\n"
                    "sentinel failover-timeout mm 5000\n"
                    % (self.sport, self.tmp.path, self.master.port))
        self.sent = subprocess.Popen(["redis-server", conf, "--sentinel"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            r = subprocess.run(["redis-cli", "-p", str(self.sport), "SENTINEL", "replicas",
                                "mm"], capture_output=True, text=True)
            if str(self.replica.port) in r.stdout and \
                    "master_link_status:up" in self.replica.cli("INFO", "replication"):
                return
            time.sleep(0.2)
        self.fail("sentinel did not see the replica")

    def tearDown(self):
        if getattr(self, "sent", None) is not None:
            self.sent.terminate()
            self.sent.wait(10)
        super().tearDown()

    def nodes(self, d):
        """[(port, state)] of the pool's nodes in use."""
        d.send("nodes", "echo end")
        out = []
        while True:
            m, _ = d.expect(r"^(end|node 127\.0\.0\.1:(\d+) (\S+) .*)$")
            if m.group(1) == "end":
                return out
            out.append((int(m.group(2)), m.group(3)))

    def test_follows_failover(self):
        self.start_sentinel()
        d = self.drive("redis+sentinel://127.0.0.1:%d/mm" % self.sport)
        self.assertEqual(d.call("eval 0 1 sk 1"), 'ok arr [int 2, str "sk", int 1]')
        self.assertEqual(self.nodes(d), [(self.master.port, "ready")])
        subprocess.run(["redis-cli", "-p", str(self.sport), "SENTINEL", "FAILOVER", "mm"],
                       capture_output=True, timeout=10)
        deadline = time.monotonic() + 15
        moved = False
        while time.monotonic() < deadline and not moved:
            moved = self.nodes(d) == [(self.replica.port, "ready")]
            time.sleep(0.1)
        self.assertTrue(moved, d.lines[-5:])
        self.assertTrue(d.call("eval 0 1 sk2 1").startswith("ok arr"))
        self.assertEqual(self.replica.cli("GET", "sk2"), "1")  # the new master
        d.finish()


if __name__ == "__main__":
    unittest.main()
