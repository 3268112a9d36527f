"""test_deploy.py - the deployment files: `make install` and the Kubernetes
sidecar example.

make install with PREFIX and DESTDIR puts every file where its PREFIX
says, admit.pc names that prefix, the installed admitd checks the installed
example conf, and the installed admit, libadmit and Python package work
against a daemon; `pip install` of client/python works offline into a
venv of Debian's python3. conf/kubernetes-sidecar.yaml runs admitd as a
native sidecar (an init container with restartPolicy: Always) sharing its
socket through an emptyDir, its conf from a ConfigMap mounted whole (no
subPath) with watch_conf = yes, the app's and the sidecar's uids allowed,
fallback_pods equal to the replicas, and probes /healthz and /readyz on the
metrics port of the pod's IP (--metrics $(POD_IP):PORT, from the downward
API), which a NetworkPolicy opens to Prometheus only and a PodMonitor
scrapes. Every conf/kubernetes-*.yaml passes the offline schema check of
k8s_schema.py (unknown and missing fields, types, the Pod Security
"restricted" level), which rejects misspelled fields; the embedded conf
passes `admitd -t`, and the sidecar's args run the real daemon.
"""

import copy
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

from . import k8s_schema
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
            "share/admitd/kubernetes-podmonitor.yaml": 0o644,
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
        self.assertEqual((r.returncode, r.stdout), (0, "%s: conf is good (5 scopes)\n" % conf),
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


def manifests():
    """{file name: [documents]} of every conf/kubernetes-*.yaml."""
    conf = os.path.join(REPO, "conf")
    out = {}
    for name in sorted(os.listdir(conf)):
        if name.startswith("kubernetes-") and name.endswith(".yaml"):
            with open(os.path.join(conf, name)) as f:
                out[name] = list(yaml.safe_load_all(f))
    return out


@unittest.skipIf(yaml is None, "needs PyYAML (python3-yaml)")
class KubernetesSidecarTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.files = manifests()
        docs = [d for ds in cls.files.values() for d in ds]
        cls.cm = [d for d in docs if d["kind"] == "ConfigMap"][0]
        cls.dep = [d for d in docs if d["kind"] == "Deployment"][0]
        cls.netpol = [d for d in docs if d["kind"] == "NetworkPolicy"][0]
        cls.podmon = [d for d in docs if d["kind"] == "PodMonitor"][0]
        cls.pod = cls.dep["spec"]["template"]["spec"]
        cls.conf = cls.cm["data"]["admitd.conf"]

    def conf_value(self, key):
        m = re.search(r"^%s\s*=\s*(.*?)\s*$" % key, self.conf, re.M)
        self.assertIsNotNone(m, key)
        return m.group(1)

    def side_app(self):
        (side,) = self.pod["initContainers"]
        (app,) = self.pod["containers"]
        return side, app

    def test_every_manifest_passes_the_schema_check(self):
        self.assertEqual(sorted(self.files), ["kubernetes-podmonitor.yaml",
                                              "kubernetes-sidecar.yaml"])
        kinds = []
        for name, docs in self.files.items():
            for d in docs:
                kinds.append(d["kind"])
                self.assertEqual(k8s_schema.validate(d), [], "%s: %s" % (name, d["kind"]))
        self.assertEqual(sorted(kinds), ["ConfigMap", "Deployment", "NetworkPolicy",
                                         "PodMonitor"])

    def test_native_sidecar_sharing_the_socket(self):
        side, app = self.side_app()
        self.assertEqual(side["restartPolicy"], "Always")
        vols = {v["name"]: v for v in self.pod["volumes"]}
        sock_dir = os.path.dirname(self.conf_value("socket"))
        mounts = {c["name"]: {m["name"]: m for m in c["volumeMounts"]} for c in (side, app)}
        shared = [n for n, v in vols.items() if "emptyDir" in v]
        self.assertEqual(len(shared), 1)
        for c in ("admitd", "app"):
            self.assertEqual(mounts[c][shared[0]]["mountPath"], sock_dir)
        env = {e["name"]: e.get("value") for e in app["env"]}
        self.assertEqual(env["ADMITD_SOCKET"], self.conf_value("socket"))

    def test_app_and_sidecar_uids_are_allowed(self):
        # the sidecar's own, for `kubectl exec -c admitd -- admit top`
        side, app = self.side_app()
        allowed = self.conf_value("allow_uids").split(";")[0].split()
        self.assertEqual(sorted(allowed), sorted([str(app["securityContext"]["runAsUser"]),
                                                  str(side["securityContext"]["runAsUser"])]))
        self.assertNotEqual(app["securityContext"]["runAsUser"],
                            side["securityContext"]["runAsUser"])

    def test_restricted_pod_security(self):
        side, app = self.side_app()
        self.assertEqual(k8s_schema.restricted_problems(self.pod), [])
        # Set on each container too, so a container copied elsewhere keeps them.
        for c in (side, app):
            sc = c["securityContext"]
            self.assertEqual((sc["allowPrivilegeEscalation"], sc["runAsNonRoot"],
                              sc["capabilities"], sc["seccompProfile"]),
                             (False, True, {"drop": ["ALL"]}, {"type": "RuntimeDefault"}),
                             c["name"])

    def test_conf_from_a_configmap_watched(self):
        side, _ = self.side_app()
        vols = {v["name"]: v for v in self.pod["volumes"]}
        (conf_vol,) = [n for n, v in vols.items() if "configMap" in v]
        self.assertEqual(vols[conf_vol]["configMap"]["name"], self.cm["metadata"]["name"])
        m = {x["name"]: x for x in side["volumeMounts"]}[conf_vol]
        self.assertNotIn("subPath", m)  # a subPath mount never sees an update
        self.assertEqual(side["args"][:2], ["-c", m["mountPath"] + "/admitd.conf"])
        self.assertEqual(self.conf_value("watch_conf"), "yes")

    def metrics_arg(self):
        side, _ = self.side_app()
        args = side["args"]
        return args[args.index("--metrics") + 1]

    def test_probes_on_the_metrics_port_of_the_pod_ip(self):
        side, _ = self.side_app()
        # The pod's IP from the downward API, expanded by the kubelet in args.
        env = {e["name"]: e for e in side["env"]}
        self.assertEqual(env["POD_IP"]["valueFrom"], {"fieldRef": {"fieldPath": "status.podIP"}})
        host, port = self.metrics_arg().rsplit(":", 1)
        self.assertEqual(host, "$(POD_IP)")
        self.assertNotRegex(self.conf, r"(?m)^\s*metrics\s*=")  # not 0.0.0.0 in the conf
        ports = {p["name"]: p["containerPort"] for p in side["ports"]}
        self.assertEqual(ports["metrics"], int(port))
        paths = {}
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            g = side[probe]["httpGet"]
            self.assertEqual(ports[g["port"]], int(port), probe)
            paths[probe] = g["path"]
        self.assertEqual(paths, {"startupProbe": "/readyz", "readinessProbe": "/readyz",
                                 "livenessProbe": "/healthz"})

    def test_fallback_pods_is_the_replica_count(self):
        self.assertEqual(int(self.conf_value("fallback_pods")), self.dep["spec"]["replicas"])
        self.assertGreater(self.dep["spec"]["replicas"], 1)

    def test_network_policy_guards_the_metrics_port(self):
        labels = self.dep["spec"]["template"]["metadata"]["labels"]
        spec = self.netpol["spec"]
        self.assertEqual(spec["podSelector"], {"matchLabels": labels})
        self.assertEqual(spec["policyTypes"], ["Ingress"])
        pod_ports = {p["name"] for c in self.side_app() for p in c.get("ports", [])}
        by_port = {}
        for rule in spec["ingress"]:
            for p in rule["ports"]:
                by_port[p["port"]] = rule.get("from")
        # Every port the pod serves is named (a selected pod's unnamed ports
        # are closed); the metrics port only to chosen peers, the app's to all.
        self.assertEqual(set(by_port), pod_ports)
        self.assertTrue(by_port["metrics"])
        self.assertIn("podSelector", by_port["metrics"][0])
        self.assertIsNone(by_port["http"])

    def test_pod_monitor_scrapes_the_metrics_port(self):
        labels = self.dep["spec"]["template"]["metadata"]["labels"]
        spec = self.podmon["spec"]
        self.assertEqual(spec["selector"], {"matchLabels": labels})
        (ep,) = spec["podMetricsEndpoints"]
        self.assertEqual((ep["port"], ep["path"]), ("metrics", "/metrics"))

    def test_schema_check_rejects_what_it_should(self):
        dep = copy.deepcopy(self.dep)
        pod = dep["spec"]["template"]["spec"]
        side = pod["initContainers"][0]
        side["readinessProbe"]["periodSecond"] = side["readinessProbe"].pop("periodSeconds")
        sc = pod["containers"][0]["securityContext"]
        sc["allowPrivilegeEscalaton"] = sc.pop("allowPrivilegeEscalation")
        del side["ports"][0]["containerPort"]
        dep["spec"]["replicas"] = "3"
        pre = "Deployment.spec.template.spec."
        self.assertEqual(sorted(k8s_schema.validate(dep)), sorted([
            pre + "containers[0].securityContext.allowPrivilegeEscalaton: unknown field",
            pre + "initContainers[0].ports[0]: missing required field containerPort",
            pre + "initContainers[0].readinessProbe.periodSecond: unknown field",
            "Deployment.spec.replicas: want an integer",
            # the misspelling also leaves the restricted setting unset
            "spec.template.spec.containers[0].securityContext.allowPrivilegeEscalation: "
            "must be false",
        ]))
        np = copy.deepcopy(self.netpol)
        np["spec"]["policyType"] = np["spec"].pop("policyTypes")
        np["apiVersion"] = "v1"
        self.assertEqual(k8s_schema.validate(np), [
            "apiVersion: NetworkPolicy wants networking.k8s.io/v1, not 'v1'",
            "NetworkPolicy.spec.policyType: unknown field"])
        pm = copy.deepcopy(self.podmon)
        pm["spec"]["podMetricEndpoints"] = pm["spec"].pop("podMetricsEndpoints")
        del pm["spec"]["selector"]
        self.assertEqual(sorted(k8s_schema.validate(pm)), sorted([
            "PodMonitor.spec: missing required field selector",
            "PodMonitor.spec.podMetricEndpoints: unknown field"]))
        cm = copy.deepcopy(self.cm)
        cm["data"]["n"] = 3
        self.assertEqual(k8s_schema.validate(cm), [
            "ConfigMap.data: want a map of strings (quote numbers and yes/no)"])
        self.assertEqual(k8s_schema.validate({"apiVersion": "v1", "kind": "Pod"})[0][:5],
                         "kind:")

    def test_restricted_check_rejects_what_it_should(self):
        pod = copy.deepcopy(self.pod)
        del pod["securityContext"]["seccompProfile"]
        del pod["containers"][0]["securityContext"]["seccompProfile"]
        pod["initContainers"][0]["securityContext"]["capabilities"]["add"] = ["SYS_ADMIN"]
        pod["containers"][0]["securityContext"]["capabilities"] = {}
        del pod["securityContext"]["runAsNonRoot"]
        del pod["initContainers"][0]["securityContext"]["runAsNonRoot"]
        pod["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
        pod["hostNetwork"] = True
        p = "spec.template.spec."
        self.assertEqual(sorted(k8s_schema.restricted_problems(pod)), sorted([
            p + "hostNetwork: not allowed",
            p + "volumes[2]: volume type ['hostPath'] not allowed",
            p + "initContainers[0].securityContext.capabilities.add: ['SYS_ADMIN'] not allowed",
            p + "initContainers[0].securityContext.runAsNonRoot: must be true (here or in the "
            "pod's)",
            p + "containers[0].securityContext.capabilities.drop: must include ALL",
            p + "containers[0].securityContext.seccompProfile.type: must be RuntimeDefault or "
            "Localhost (here or in the pod's)",
        ]))

    def test_embedded_conf_is_good(self):
        known = set(re.findall(r"^\| `([a-z_]+)", run_admitd(["--help-conf"]).stdout, re.M))
        # watch_conf comes from the reload work: a binary without it checks
        # the rest.
        pending = {"watch_conf"} - known
        lines = [l for l in self.conf.splitlines()
                 if l.split("=")[0].strip() not in pending]
        d = Admitd("\n".join(lines) + "\n")
        try:
            r = run_admitd(["-t", "-c", d.conf_path])
            self.assertEqual((r.returncode, r.stderr), (0, ""), r)
        finally:
            d.tmp.cleanup()

    def test_the_sidecar_args_run(self):
        # The container's args, as the kubelet expands them ($(POD_IP): here
        # loopback; the port 0, so the test takes a free one), on the
        # ConfigMap's conf with its socket, Redis and allow_uids made local.
        side, _ = self.side_app()
        args = [a.replace("$(POD_IP)", "127.0.0.1") for a in side["args"][2:]]
        i = args.index("--metrics") + 1
        args[i] = re.sub(r":\d+$", ":0", args[i])
        conf = re.sub(r"(?m)^(socket|redis|allow_uids)\s*=.*$", "", self.conf)
        with Admitd(conf, args=args) as d:
            m = None
            for _ in range(500):
                m = re.search(r'msg="metrics listening" metrics="127.0.0.1:0" port=(\d+)',
                              d.stderr_text())
                if m:
                    break
                time.sleep(0.01)
            self.assertIsNotNone(m, d.stderr_text())
            with urllib.request.urlopen("http://127.0.0.1:%s/readyz" % m.group(1),
                                        timeout=10) as r:
                self.assertEqual((r.status, r.read()), (200, b"ready backend=local\n"))


if __name__ == "__main__":
    unittest.main()
