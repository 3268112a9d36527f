"""test_deploy.py - the deployment files: `make install` and the Kubernetes
sidecar example.

make install with PREFIX and DESTDIR puts every file where its PREFIX
says, admit.pc names that prefix, the installed admitd checks the installed
example conf, and the installed admit, libadmit and Python package work
against a daemon. conf/kubernetes-sidecar.yaml runs admitd as a native
sidecar (an init container with restartPolicy: Always) sharing its socket
through an emptyDir, its conf from a ConfigMap mounted whole (no subPath)
with watch_conf = yes, and probes /healthz and /readyz on the conf's
metrics port; the embedded conf passes `admitd -t`.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from .harness import REPO, Admitd, run_admitd

PREFIX = "/opt/admitd-test"


def soname():
    """libadmit's soname, as client/client.mk sets it (it changes with the ABI)."""
    with open(os.path.join(REPO, "client/client.mk")) as f:
        return re.search(r"^CLIENT_SONAME\s*:=\s*(\S+)", f.read(), re.M).group(1)

try:
    import yaml
except ImportError:  # Debian: python3-yaml
    yaml = None


def sh(*cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


class InstallTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dest = tempfile.mkdtemp(prefix="admitd-install-")
        r = sh("make", "-C", REPO, "install", "PREFIX=" + PREFIX, "DESTDIR=" + cls.dest,
               "PYTHON=" + sys.executable)
        if r.returncode != 0:
            shutil.rmtree(cls.dest, ignore_errors=True)
            raise AssertionError("make install failed\n%s\n%s" % (r.stdout, r.stderr))
        cls.root = cls.dest + PREFIX

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dest, ignore_errors=True)

    def test_files_are_where_prefix_says(self):
        py = "python%d.%d" % sys.version_info[:2]
        site = [d for d in ("dist-packages", "site-packages")
                if os.path.isdir(os.path.join(self.root, "lib", py, d))]
        self.assertEqual(len(site), 1, site)
        want = {
            "sbin/admitd": 0o755, "bin/admit": 0o755,
            "lib/" + soname(): 0o755, "lib/libadmit.a": 0o644,
            "include/admit.h": 0o644, "include/admit_proto.h": 0o644,
            "lib/pkgconfig/admit.pc": 0o644,
            "share/admitd/admitd.conf.example": 0o644,
            "share/admitd/minimal.conf.example": 0o644,
            "share/admitd/kubernetes-sidecar.yaml": 0o644,
            "lib/systemd/system/admitd.service": 0o644,
            "lib/%s/%s/admit/__init__.py" % (py, site[0]): 0o644,
            "lib/%s/%s/admit/py.typed" % (py, site[0]): 0o644,
        }
        for rel, mode in want.items():
            st = os.stat(os.path.join(self.root, rel))
            self.assertEqual(oct(st.st_mode & 0o777), oct(mode), rel)
        self.assertEqual(os.readlink(os.path.join(self.root, "lib/libadmit.so")), soname())
        # Nothing outside DESTDIR/PREFIX.
        self.assertEqual(os.listdir(self.dest), [PREFIX.strip("/").split("/")[0]])

    def test_pkg_config_names_the_prefix(self):
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(self.root, "lib/pkgconfig"))
        r = sh("pkg-config", "--variable=prefix", "admit", env=env)
        self.assertEqual((r.returncode, r.stdout.strip()), (0, PREFIX), r.stderr)
        r = sh("pkg-config", "--cflags", "--libs", "admit", env=env)
        self.assertEqual(r.stdout.split(), ["-I%s/include" % PREFIX, "-L%s/lib" % PREFIX,
                                            "-ladmit"])

    def test_unit_points_at_the_installed_daemon(self):
        with open(os.path.join(self.root, "lib/systemd/system/admitd.service")) as f:
            unit = f.read()
        self.assertIn("ExecStart=%s/sbin/admitd -c /etc/admitd/admitd.conf" % PREFIX, unit)
        self.assertNotIn("/usr/local/", unit)

    def test_installed_binaries_run(self):
        conf = os.path.join(self.root, "share/admitd/admitd.conf.example")
        r = sh(os.path.join(self.root, "sbin/admitd"), "-t", "-c", conf)
        self.assertEqual((r.returncode, r.stdout), (0, "%s: conf is good (4 scopes)\n" % conf),
                         r.stderr)
        r = sh(os.path.join(self.root, "sbin/admitd"), "--version")
        self.assertTrue(r.stdout.startswith("admitd 0.1.0 "), r)
        with Admitd("[scope s]\nrule = requests 1/1h\n") as d:
            r = sh(os.path.join(self.root, "bin/admit"), "--socket", d.sock_path, "ping")
            self.assertEqual(r.returncode, 0, r)
            site = os.path.dirname(os.path.dirname(
                [os.path.join(dp, f) for dp, _, fs in os.walk(self.root) for f in fs
                 if dp.endswith("/admit") and f == "__init__.py"][0]))
            code = ("import admit, sys; c = admit.Client(sys.argv[1]); "
                    "l = c.acquire('s', 'k', timeout=0); print(admit.__file__); l.release()")
            r = sh(sys.executable, "-c", code, d.sock_path,
                   env=dict(os.environ, PYTHONPATH=site), cwd=self.dest)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(r.stdout.startswith(site + "/admit/"), r.stdout)


# Debian's interpreter: its site-packages hold the setuptools and wheel that an
# offline build (--no-build-isolation) needs; another python3 on PATH may not.
DEBIAN_PYTHON = "/usr/bin/python3"


class PipInstallTest(unittest.TestCase):
    """`pip install ./client/python` offline into a venv of Debian's python3."""

    def test_offline_install_into_a_venv(self):
        if not os.access(DEBIAN_PYTHON, os.X_OK):
            self.skipTest("no %s (Debian 12's python3)" % DEBIAN_PYTHON)
        tmp = tempfile.mkdtemp(prefix="admit-pip-")
        self.addCleanup(shutil.rmtree, tmp, True)
        venv = os.path.join(tmp, "venv")
        # --without-pip: pip comes from Debian's python3-pip through the system
        # site-packages, so python3-venv's ensurepip is not needed.
        r = sh(DEBIAN_PYTHON, "-m", "venv", "--without-pip", "--system-site-packages", venv)
        if r.returncode != 0:
            self.skipTest("%s -m venv fails (Debian: apt-get install python3-venv): %s"
                          % (DEBIAN_PYTHON, r.stderr.strip()))
        py = os.path.join(venv, "bin", "python")
        r = sh(py, "-c", "import setuptools, wheel, pip")  # (pip first upsets setuptools)
        if r.returncode != 0:
            self.skipTest("needs pip, setuptools and wheel (Debian: apt-get install "
                          "python3-pip python3-setuptools python3-wheel): %s"
                          % r.stderr.strip().splitlines()[-1])
        # A copy: an in-tree build leaves build/ and *.egg-info in the clone.
        src = os.path.join(tmp, "src")
        shutil.copytree(os.path.join(REPO, "client/python"), src,
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        r = sh(py, "-m", "pip", "install", "--no-index", "--no-build-isolation",
               "--disable-pip-version-check", src, env=dict(os.environ, PIP_NO_CACHE_DIR="1"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = sh(py, "-m", "pip", "show", "-f", "admit")
        self.assertEqual(r.returncode, 0, r.stderr)
        meta = dict(l.split(": ", 1) for l in r.stdout.splitlines() if ": " in l)
        self.assertEqual((meta["Name"], meta["Version"]), ("admit", "0.1.0"))
        self.assertIn("admission control", meta["Summary"])
        self.assertIn("admit/py.typed", r.stdout)
        self.assertNotIn("tests/", r.stdout)  # the package only, not its tests
        # Imported from the venv, not from the clone, and usable against a daemon.
        with Admitd("[scope s]\nrule = requests 1/1h\n") as d:
            code = ("import admit, sys; c = admit.Client(sys.argv[1]); "
                    "print(admit.__file__, admit.__version__, c.ping())")
            env = dict(os.environ)
            env.pop("PYTHONPATH", None)
            r = sh(py, "-c", code, d.sock_path, env=env, cwd=tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        path, version, pong = r.stdout.split()
        self.assertTrue(path.startswith(venv + "/lib/"), path)
        self.assertEqual((version, pong), ("0.1.0", "True"))


@unittest.skipIf(yaml is None, "needs PyYAML (python3-yaml)")
class KubernetesSidecarTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        with open(os.path.join(REPO, "conf/kubernetes-sidecar.yaml")) as f:
            docs = list(yaml.safe_load_all(f))
        cls.cm = [d for d in docs if d["kind"] == "ConfigMap"][0]
        cls.dep = [d for d in docs if d["kind"] == "Deployment"][0]
        cls.pod = cls.dep["spec"]["template"]["spec"]
        cls.conf = cls.cm["data"]["admitd.conf"]

    def conf_value(self, key):
        m = re.search(r"^%s\s*=\s*(.*?)\s*$" % key, self.conf, re.M)
        self.assertIsNotNone(m, key)
        return m.group(1)

    def test_native_sidecar_sharing_the_socket(self):
        (side,) = self.pod["initContainers"]
        self.assertEqual(side["restartPolicy"], "Always")
        (app,) = self.pod["containers"]
        vols = {v["name"]: v for v in self.pod["volumes"]}
        sock_dir = os.path.dirname(self.conf_value("socket"))
        mounts = {c["name"]: {m["name"]: m for m in c["volumeMounts"]} for c in (side, app)}
        shared = [n for n, v in vols.items() if "emptyDir" in v]
        self.assertEqual(len(shared), 1)
        for c in ("admitd", "app"):
            self.assertEqual(mounts[c][shared[0]]["mountPath"], sock_dir)
        env = {e["name"]: e["value"] for e in app["env"]}
        self.assertEqual(env["ADMITD_SOCKET"], self.conf_value("socket"))
        self.assertIn(str(app["securityContext"]["runAsUser"]),
                      self.conf_value("allow_uids").split())

    def test_conf_from_a_configmap_watched(self):
        (side,) = self.pod["initContainers"]
        vols = {v["name"]: v for v in self.pod["volumes"]}
        (conf_vol,) = [n for n, v in vols.items() if "configMap" in v]
        self.assertEqual(vols[conf_vol]["configMap"]["name"], self.cm["metadata"]["name"])
        m = {x["name"]: x for x in side["volumeMounts"]}[conf_vol]
        self.assertNotIn("subPath", m)  # a subPath mount never sees an update
        self.assertEqual(side["args"], ["-c", m["mountPath"] + "/admitd.conf"])
        self.assertEqual(self.conf_value("watch_conf"), "yes")

    def test_probes_on_the_metrics_port(self):
        (side,) = self.pod["initContainers"]
        port = int(self.conf_value("metrics").rsplit(":", 1)[1])
        ports = {p["name"]: p["containerPort"] for p in side["ports"]}
        paths = {}
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            g = side[probe]["httpGet"]
            self.assertEqual(ports[g["port"]], port, probe)
            paths[probe] = g["path"]
        self.assertEqual(paths, {"startupProbe": "/readyz", "readinessProbe": "/readyz",
                                 "livenessProbe": "/healthz"})
        # The kubelet probes the pod's address, not loopback.
        self.assertEqual(self.conf_value("metrics").rsplit(":", 1)[0], "0.0.0.0")

    def test_embedded_conf_is_good(self):
        known = set(re.findall(r"^\| `([a-z_]+)", run_admitd(["--help-conf"]).stdout, re.M))
        # metrics and watch_conf come from the metrics and reload work: a
        # binary without them checks the rest.
        pending = {"metrics", "watch_conf"} - known
        lines = [l for l in self.conf.splitlines()
                 if l.split("=")[0].strip() not in pending]
        d = Admitd("\n".join(lines) + "\n")
        try:
            r = run_admitd(["-t", "-c", d.conf_path])
            self.assertEqual((r.returncode, r.stderr), (0, ""), r)
        finally:
            d.tmp.cleanup()


if __name__ == "__main__":
    unittest.main()
