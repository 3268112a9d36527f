"""redis_deploy_tls.py - a TLS redis-server and its certificates.

Owns: TlsFiles (a CA, a server certificate for 127.0.0.1 and localhost, a
wrong CA, an expired certificate, one for another name, a client
certificate, all made with the openssl CLI in a temp dir) and TlsRedis (a
redis-server serving TLS with them). Import redis_deploy, not this module.
"""

import os
import socket
import ssl
import subprocess

from . import harness
from .harness import RedisServer, RespConn, _wait_until
from .redis_deploy_base import _bindable

# -------------------------------------------------------------- probes ----


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
