"""test_top.py - `admit top` in a real terminal (tmux) and `admit status`'s
activity table, against the real daemon.

A known state first: in scope alpha one lease held, one acquire waiting,
and two admissions whose waits fall in known buckets (0 ms, and about
350 ms: in (250, 500]); in scope beta two admissions and one refusal
(limited). `admit status` shows it since the daemon started: the gauges
exactly, the wait percentiles exactly (interpolated within the bucket:
p99 of {0, (250,500]} is 250 + 250 * 0.98 = 495), the rates within the
bounds the uptime before and after allow. `admit top`, run under tmux
and read with capture-pane, shows a row per scope with the same gauges;
over an interval without admissions the rates are 0.0 and the
percentiles "-"; an admission whose wait is about 1.5 s (in (1000,
2500]) shows p50 1750 and p99 2485 in the frame of its interval. `q`
quits with status 0, C-c with 130, and the terminal is given back
cooked (stty shows icanon and echo again).
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import launcher  # noqa: E402

CONF = """[scope alpha]
max_concurrent = 1
timeout = 20s

[scope beta]
quota = 2/1h
"""

COLUMNS = ["ADM/s", "LIM/s", "BUDG/s", "TMO/s", "FULL/s", "UNAV/s", "EXCD/s", "CANC/s",
           "WAIT", "LEASES", "P50ms", "P99ms"]
DEADLINE = 20.0


class Line:
    """One JSON-lines connection to the daemon."""

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(DEADLINE)
        self.s.connect(path)
        self.buf = b""

    def send(self, obj):
        self.s.sendall(json.dumps(obj).encode() + b"\n")

    def recv(self):
        while b"\n" not in self.buf:
            d = self.s.recv(65536)
            if not d:
                raise ConnectionError("closed")
            self.buf += d
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def request(self, obj):
        self.send(obj)
        return self.recv()

    def close(self):
        self.s.close()


def rows_of(text):
    """{scope: {column: cell}} of the table under the SCOPE header in text."""
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if ln.split()[:1] == ["SCOPE"]:
            head = ln.split()[1:]
            out = {}
            for row in lines[i + 1:]:
                cells = row.split()
                if len(cells) != len(head) + 1:
                    break
                out[cells[0]] = dict(zip(head, cells[1:]))
            return head, out
    return None, {}


def wait_for(cond, what):
    end = time.monotonic() + DEADLINE
    while True:
        r = cond()
        if r:
            return r
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.02)


class TopTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        launcher.require_binaries(launcher.ADMITD_BIN, launcher.ADMIT_BIN)
        cls.daemon = launcher.Daemon(conf_text=CONF).start()
        cls.conns = []

    @classmethod
    def tearDownClass(cls):
        for c in cls.conns:
            c.close()
        cls.daemon.stop()

    def conn(self):
        c = Line(self.daemon.socket)
        self.conns.append(c)
        return c

    def status(self, c):
        return c.request({"op": "status"})

    def waiting(self, c, scope, n):
        wait_for(lambda: self.status(c)["scopes"][scope]["waiting"] == n,
                 "%d waiting in %s" % (n, scope))

    def admit(self, *args):
        p = subprocess.run([launcher.ADMIT_BIN, "--socket", self.daemon.socket, *args],
                           capture_output=True, text=True, timeout=DEADLINE)
        return p.returncode, p.stdout, p.stderr

    # tmux on a server of its own (-L), so nothing else's sessions are touched
    def tmux(self, *args, check=True):
        return subprocess.run(["tmux", "-L", self.tmux_sock, *args], capture_output=True,
                              text=True, timeout=DEADLINE, check=check)

    def start_top(self, script_prefix=""):
        """admit top in a 200x50 tmux pane; the shell records its exit status
        and the terminal's modes after it in self.out."""
        self.out = os.path.join(self.tmp, "after")
        cmd = ("%s%s --socket %s top --interval 300ms; echo rc=$? > %s; stty -a >> %s"
               % (script_prefix, launcher.ADMIT_BIN, self.daemon.socket, self.out, self.out))
        self.tmux("new-session", "-d", "-s", "top", "-x", "200", "-y", "50", "sh", "-c", cmd)

    def pane(self):
        return self.tmux("capture-pane", "-p", "-t", "top").stdout

    def after(self):
        """What the shell wrote once admit top ended."""
        def done():
            try:
                with open(self.out) as f:
                    t = f.read()
                return t if "rc=" in t and "speed" in t else None
            except OSError:
                return None
        return wait_for(done, "admit top to end")

    def setUp(self):
        if shutil.which("tmux") is None:
            self.skipTest("tmux is not installed (Debian: apt-get install tmux)")
        self.tmp = tempfile.mkdtemp(prefix="admit-top-")
        self.tmux_sock = "admit-top-%d" % os.getpid()

    def tearDown(self):
        self.tmux("kill-server", check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_status_then_top(self):
        c, w, x = self.conn(), self.conn(), self.conn()
        hold = c.request({"op": "acquire", "scope": "alpha", "key": "k"})
        self.assertIs(hold.get("ok"), True, hold)
        w.send({"op": "acquire", "scope": "alpha", "key": "k"})
        self.waiting(c, "alpha", 1)
        time.sleep(0.35)
        self.assertIs(c.request({"op": "release", "lease": hold["lease"]})["held"], True)
        got = w.recv()
        self.assertIs(got.get("ok"), True, got)
        self.assertGreater(got["waited_ms"], 250)
        self.assertLessEqual(got["waited_ms"], 500)
        x.send({"op": "acquire", "scope": "alpha", "key": "k"})
        x_since = time.monotonic()
        self.waiting(c, "alpha", 1)
        for want in (True, True, False):
            r = c.request({"op": "acquire", "scope": "beta", "key": "b", "timeout_ms": 0})
            self.assertIs(r.get("ok"), want, r)

        # admit status: top's columns once, since the daemon started.
        before = self.status(c)["uptime_ms"]
        code, out, err = self.admit("status")
        after = self.status(c)["uptime_ms"]
        self.assertEqual(code, 0, err)
        head, rows = rows_of(out)
        self.assertEqual(head, COLUMNS)
        self.assertEqual(set(rows), {"alpha", "beta"})
        a, b = rows["alpha"], rows["beta"]
        # alpha's p50 is the upper bound of hold's bucket (its wait: 0 ms,
        # or 1 on a slow run, as under the sanitizers once)
        p50 = next(b for b in (0, 1, 2, 5, 10, 25, 50, 100, 250) if b >= hold["waited_ms"])
        self.assertEqual((a["WAIT"], a["LEASES"], a["P50ms"], a["P99ms"]),
                         ("1", "1", str(p50), "495"))
        self.assertEqual((b["WAIT"], b["LEASES"], b["P50ms"], b["P99ms"]), ("0", "2", "0", "0"))
        for col in ("BUDG/s", "TMO/s", "FULL/s", "UNAV/s", "EXCD/s", "CANC/s"):
            self.assertEqual((a[col], b[col]), ("0.0", "0.0"), col)
        self.assertEqual(a["LIM/s"], "0.0")
        # 2 admissions (each scope) and 1 refusal over the uptime then.
        for cell, n in ((a["ADM/s"], 2), (b["ADM/s"], 2), (b["LIM/s"], 1)):
            lo, hi = n / (after / 1000.0), n / (before / 1000.0)
            self.assertTrue(round(lo, 1) <= float(cell) <= round(hi, 1) + 0.05,
                            (cell, lo, hi))

        # admit top: the same rows, live.
        self.start_top()

        def quiet_frame():
            t = self.pane()
            if "over the last interval" not in t:
                return None
            _, r = rows_of(t)
            return r if set(r) == {"alpha", "beta"} else None
        r = wait_for(quiet_frame, "a frame over an interval with both scopes")
        self.assertIn("backend local, 4 connections; every 0.3s (q quits)", self.pane())
        self.assertEqual(r["alpha"], {"ADM/s": "0.0", "LIM/s": "0.0", "BUDG/s": "0.0",
                                      "TMO/s": "0.0", "FULL/s": "0.0", "UNAV/s": "0.0",
                                      "EXCD/s": "0.0", "CANC/s": "0.0", "WAIT": "1",
                                      "LEASES": "1", "P50ms": "-", "P99ms": "-"})
        self.assertEqual((r["beta"]["LEASES"], r["beta"]["P50ms"]), ("2", "-"))

        # x admitted after ~1.5 s of waiting: its interval's frame says so.
        time.sleep(max(0.0, 1.5 - (time.monotonic() - x_since)))
        self.assertIs(w.request({"op": "release", "lease": got["lease"]})["held"], True)
        got_x = x.recv()
        self.assertIs(got_x.get("ok"), True, got_x)
        self.assertTrue(1000 < got_x["waited_ms"] <= 2500, got_x)

        def busy_frame():
            _, r = rows_of(self.pane())
            return r.get("alpha") if r.get("alpha", {}).get("P50ms") not in (None, "-") else None
        row = wait_for(busy_frame, "the frame of x's admission")
        self.assertEqual((row["P50ms"], row["P99ms"], row["WAIT"], row["LEASES"]),
                         ("1750", "2485", "0", "1"))
        self.assertGreater(float(row["ADM/s"]), 0.0)

        self.tmux("send-keys", "-t", "top", "q")
        t = self.after()
        self.assertIn("rc=0\n", t)
        modes = t.split()
        self.assertIn("icanon", modes)
        self.assertIn("echo", modes)

    def test_interrupt_restores_the_terminal(self):
        # sh ignores INT itself; admit top installs its own handler.
        self.start_top("trap '' INT; ")
        wait_for(lambda: "SCOPE" in self.pane(), "the first frame")
        self.tmux("send-keys", "-t", "top", "C-c")
        t = self.after()
        self.assertIn("rc=130\n", t)
        modes = t.split()
        self.assertIn("icanon", modes)
        self.assertIn("echo", modes)
        self.assertNotIn("-icanon", modes)


if __name__ == "__main__":
    unittest.main()
