"""adaptive_judge.py - a real upstream that refuses at a rate admitd is not told.

Owns: an nginx (Debian's nginx-light) run as the test user on loopback,
with its own prefix, conf, pid file and error log in a temp dir and a free
port, limiting every request with `limit_req` (429 past the rate), and a
fleet of crawler threads that, through admitd, acquire, GET, and release
with the outcome the upstream gave. Used by tests/integ/test_adaptive.py
(the judge) and tests/bench/adaptive.py (the plot).
"""

import http.client
import os
import shutil
import signal
import subprocess
import threading
import time

from .harness import _TempDir, _wait_until, free_tcp_port

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK)
                                  else None)

NGINX_CONF = """{user}
daemon off;
master_process on;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log error;
events {{ worker_connections 512; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    limit_req_zone $server_name zone=judge:1m rate={rate}r/s;
    limit_req_status 429;
    limit_req_log_level warn;
    server {{
        listen 127.0.0.1:{port};
        server_name judge;
        root {d}/www;
        location / {{
            limit_req zone=judge burst={burst} nodelay;
        }}
    }}
}}
"""


class Nginx:
    """nginx with limit_req at `rate` r/s (burst `burst`); reload() changes the rate."""

    def __init__(self, rate, burst=2):
        self.tmp = _TempDir("nginx-")
        self.dir = self.tmp.path
        self.port = free_tcp_port()
        self.burst = burst
        self.rate = rate
        self.proc = None
        os.makedirs(os.path.join(self.dir, "www"))
        with open(os.path.join(self.dir, "www", "index.html"), "w") as f:
            f.write("ok\n")
        self.conf = os.path.join(self.dir, "nginx.conf")
        self._write()

    def _write(self):
        with open(self.conf, "w") as f:
            # As root, nginx's workers would run as nobody, who cannot read
            # the private temp dir: they run as the test user, as otherwise.
            user = "user root;" if os.geteuid() == 0 else ""
            f.write(NGINX_CONF.format(user=user, d=self.dir, port=self.port, rate=self.rate,
                                      burst=self.burst))

    def start(self):
        self.proc = subprocess.Popen([NGINX, "-p", self.dir, "-c", self.conf],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        def up():
            h = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
            try:
                return get_status(h) in (200, 429)
            except OSError:
                return False
            finally:
                h.close()
        _wait_until(up, 10, "nginx to answer", self.error_log)
        return self

    def error_log(self):
        try:
            with open(os.path.join(self.dir, "error.log")) as f:
                return f.read()
        except OSError:
            return ""

    def reload(self, rate):
        """New rate through nginx's own reload (SIGHUP to the master): new
        workers take it, the old ones finish what they serve."""
        self.rate = rate
        self._write()
        self.proc.send_signal(signal.SIGHUP)

    def cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                self.proc.wait(10)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()
        self.tmp.cleanup()


def get_status(conn):
    conn.request("GET", "/")
    r = conn.getresponse()
    r.read()
    return r.status


class Fleet:
    """threads crawler threads per daemon, each with its own admitd connection
    and its own keep-alive HTTP connection: acquire (waiting), GET, release
    with "ok" (200), "limited" (429) or "error" (anything else). events is a
    list of (monotonic time, daemon index, HTTP status) of every GET."""

    def __init__(self, daemons, port, scope, key="judge", threads=8):
        self.daemons = daemons
        self.port = port
        self.scope = scope
        self.key = key
        self.threads = threads
        self.events = []
        self.errors = []
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.workers = []

    def start(self):
        for i, d in enumerate(self.daemons):
            for _ in range(self.threads):
                t = threading.Thread(target=self._crawl, args=(i, d), daemon=True)
                t.start()
                self.workers.append(t)
        return self

    def _crawl(self, i, d):
        c = d.connect()
        h = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            while not self.stop_ev.is_set():
                r = c.request({"op": "acquire", "scope": self.scope, "key": self.key,
                               "timeout_ms": 2000}, timeout=10)
                if not r.get("ok"):
                    continue  # a wait over the budget: ask again
                try:
                    status = get_status(h)
                except (OSError, http.client.HTTPException):
                    h.close()
                    h = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                    status = 0
                outcome = "ok" if status == 200 else "limited" if status == 429 else "error"
                with self.lock:
                    self.events.append((time.monotonic(), i, status))
                rel = c.request({"op": "release", "lease": r["lease"], "outcome": outcome},
                                timeout=10)
                if not rel.get("ok"):
                    with self.lock:
                        self.errors.append(rel)
        except Exception as e:  # recorded: the test fails on it
            with self.lock:
                self.errors.append(repr(e))
        finally:
            h.close()
            c.close()

    def stop(self):
        self.stop_ev.set()
        for t in self.workers:
            t.join(15)

    def window(self, t0, t1):
        """(GETs answered 200 per second, fraction answered 429) in [t0, t1)."""
        with self.lock:
            ev = [e for e in self.events if t0 <= e[0] < t1]
        ok = sum(1 for e in ev if e[2] == 200)
        lim = sum(1 for e in ev if e[2] == 429)
        return ok / (t1 - t0), (lim / len(ev) if ev else 0.0)
