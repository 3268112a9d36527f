"""test_cli.py - the admit CLI against the real admitd on vectors.conf.

Owns: every command of `admit` (try, acquire, release, run, status, top,
keys, show and the rest), its exit statuses, output and errors, and the
retry loop docs/clients-c.md gives. Keys start with "cli-".
"""

import json
import os
import select
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import launcher  # noqa: E402

from client_case import DaemonCase  # noqa: E402


# The columns of `admit top` (and of the first table of `admit status`).
TOP_COLUMNS = ["ADM/s", "LIM/s", "BUDG/s", "TMO/s", "FULL/s", "UNAV/s", "EXCD/s", "CANC/s",
               "WAIT", "LEASES", "P50ms", "P99ms"]


# The retry loop docs/clients-c.md gives for a script that must get through.
RETRY_LOOP = ('until lease=$(admit try "$@" 2>/dev/null); do\n'
              '    [ $? -eq 75 ] || exit 1\n'
              '    sleep "$lease"\n'
              'done\n'
              'admit release "$lease"\n')


class TestCli(DaemonCase):
    def test_help_lists_exit_codes(self):
        code, out, _ = self.admit("--help")
        self.assertEqual(code, 0)
        for word in ("acquire", "release", "try", "once", "penalize", "run", "status",
                     "ping"):
            self.assertIn("admit " + word, out)
        for c in (" 64 ", " 69 ", " 75 ", " 78 ", " 79 ", " 80 ", " 81 "):
            self.assertIn(c, out)
        self.assertIn("exceeds_limit", out)
        for word in ("reset", "inspect", "override"):
            self.assertIn("admit " + word, out)
        for opt in ("--connect-timeout", "--reserve", "--ttl", "--min-delay", "--rule"):
            self.assertIn(opt, out)
        self.assertIn("can collide", out)  # run: admit's codes vs the command's

    def test_usage_errors(self):
        self.assertExit(self.admit(), 64)
        self.assertExit(self.admit("frob"), 64)
        self.assertExit(self.admit("try"), 64)
        self.assertExit(self.admit("try", "open", "k", "extra"), 64)
        self.assertExit(self.admit("try", "open", "k", "--bogus"), 64)
        self.assertExit(self.admit("try", "open", "k", "--timeout", "1s"), 64)
        self.assertExit(self.admit("acquire", "open", "k", "--timeout", "soon"), 64)
        self.assertExit(self.admit("acquire", "open", "k", "--cost", "-2"), 64)
        # out of the protocol's range: refused here, in the unit given
        for args, msg in ((("acquire", "open", "k", "--timeout", "25h"),
                           "admit: --timeout 25h: at most 24h (86400s)\n"),
                          (("acquire", "open", "k", "--timeout", "90000"),
                           "admit: --timeout 90000: at most 24h (86400s)\n"),
                          (("acquire", "open", "k", "--cost", "9223372036854775807"),
                           "admit: --cost 9223372036854775807: at most 1000000000\n"),
                          (("penalize", "open", "k", "1441m"),
                           "admit: 1441m: a penalty is at most 24h (86400s)\n")):
            code, _, err = self.admit(*args)
            self.assertEqual(code, 64, args)
            self.assertTrue(err.startswith(msg), (args, err))
        self.assertExit(self.admit("acquire", "open", "k", "--url", "http://x/"), 64)
        self.assertExit(self.admit("run", "open", "k"), 64)
        self.assertExit(self.admit("run", "open", "k", "--"), 64)
        self.assertExit(self.admit("ping", "--", "x"), 64)
        self.assertExit(self.admit("release", "L", "--tokens", "input"), 64)
        # A missing argument shows that command's usage line, naming it.
        code, _, err = self.admit("release")
        self.assertEqual(code, 64)
        self.assertEqual(err.splitlines()[0],
                         "admit: usage: admit release LEASE [--tokens input=300,output=200] "
                         "[--outcome ok|limited|error]")
        code, _, err = self.admit("penalize", "open")
        self.assertEqual(code, 64)
        self.assertIn("admit: usage: admit penalize SCOPE", err.splitlines()[0])
        code, _, err = self.admit("ping", "x")
        self.assertEqual((code, err.splitlines()[0]), (64, "admit: usage: admit ping"))

    def test_ping(self):
        code, out, _ = self.admit("ping")
        self.assertEqual((code, out), (0, "ok\n"))

    def test_socket_from_environment(self):
        code, out, _ = self.admit("ping", env={"ADMITD_SOCKET": self.daemon.socket})
        self.assertEqual((code, out), (0, "ok\n"))

    STATUS_COLUMNS = [("LEASES", "leases"), ("WAITING", "waiting"), ("ADMITTED", "admitted"),
                      ("REFUSED", "refused"), ("TIMEOUTS", "timeouts"), ("CANCELED", "canceled"),
                      ("FALLBACK", "fallback_admitted"), ("SHADOW", "shadow_limited"),
                      ("EXPIRED", "expired"), ("WAIT_MS", "wait_ms_total")]

    def test_status_table_and_json(self):
        self.assertExit(self.admit("try", "once", "cli-status-1"), 0)
        self.assertExit(self.admit("try", "once", "cli-status-1"), 75)
        code, out, _ = self.admit("status")
        self.assertEqual(code, 0)
        lines = out.splitlines()
        self.assertRegex(lines[0], r"^admitd \S+, up \d+s, backend local$")
        # First top's table (since start: tests/client/test_top.py checks
        # its values), then the totals.
        self.assertEqual(lines[1].split(), ["SCOPE"] + TOP_COLUMNS)
        top_end = lines.index("")
        self.assertEqual(lines[top_end + 1], "totals since the daemon started:")
        lines = lines[top_end + 2:]
        self.assertEqual(lines[0].split(), ["SCOPE"] + [h for h, _ in self.STATUS_COLUMNS])
        end = lines.index("") if "" in lines else len(lines)
        rows = {ln.split()[0]: ln.split()[1:] for ln in lines[1:end]}
        self.assertIn("solo", rows)
        self.assertTrue(all(v.isdigit() for v in rows["solo"]))
        # the counters by code, one line per scope that has any
        self.assertEqual(lines[end + 1], "refused, by code:")
        by_code = {ln.split()[0]: ln.split(None, 1)[1] for ln in lines[end + 2:]}
        code, out, _ = self.admit("status", "--json")
        self.assertEqual(code, 0)
        st = json.loads(out)
        self.assertIs(st["ok"], True)
        self.assertEqual(st["backend"], "local")
        self.assertIn("open", st["scopes"])
        self.assertEqual(set(rows), set(st["scopes"]))
        for name, row in rows.items():  # the table says what the reply says
            want = [str(st["scopes"][name][f]) for _, f in self.STATUS_COLUMNS]
            self.assertEqual(row, want, name)
        self.assertGreaterEqual(int(rows["once"][2]), 1)
        self.assertGreaterEqual(st["scopes"]["once"]["refusals"]["limited"], 1)
        self.assertEqual(by_code["once"], ", ".join(
            "%s %d" % kv for kv in st["scopes"]["once"]["refusals"].items()))
        self.assertEqual(set(by_code),
                         {n for n, sc in st["scopes"].items() if sc.get("refusals")})
        self.assertNotIn("redis", out)

    def test_acquire_release(self):
        code, out, _ = self.admit("acquire", "open", "cli-acq-1", "--timeout", "2s")
        self.assertEqual(code, 0)
        lease = out.strip()
        self.assertTrue(lease)
        self.assertEqual(self.admit("release", lease)[:2], (0, "released\n"))
        self.assertEqual(self.admit("release", lease)[:2], (0, "not held\n"))
        self.assertEqual(self.admit("release", "cli-no-such-lease")[:2], (0, "not held\n"))

    def test_acquire_detaches(self):
        code, out, _ = self.admit("acquire", "solo", "cli-det-1", "--detach")
        self.assertEqual(code, 0)
        lease = out.strip()
        # admit has exited, the lease is still held
        self.assertExit(self.admit("try", "solo", "cli-det-1"), 75)
        self.assertEqual(self.admit("release", lease)[:2], (0, "released\n"))
        code, out, _ = self.admit("try", "solo", "cli-det-1")
        self.assertEqual(code, 0)
        self.assertEqual(self.admit("release", out.strip())[:2], (0, "released\n"))

    def test_try_limited_prints_retry_after(self):
        self.assertExit(self.admit("try", "once", "cli-try-1"), 0)
        code, out, err = self.admit("try", "once", "cli-try-1")
        self.assertEqual(code, 75)
        self.assertGreater(float(out), 3500.0)
        self.assertLessEqual(float(out), 3600.0)
        self.assertIn("limited", err)
        self.assertIn('"quota 1/1h"', err)

    def test_once_has_nothing_to_release(self):
        # quota 1/1h: the first admission prints nothing, the second is limited
        self.assertEqual(self.admit("once", "once", "cli-once-1", "--timeout", "0")[:2],
                         (0, ""))
        code, out, err = self.admit("once", "once", "cli-once-1", "--timeout", "0")
        self.assertEqual(code, 75, err)
        self.assertGreater(float(out), 3500.0)
        self.assertIn("limited", err)
        # a scope whose release books something refuses it
        code, _, err = self.admit("once", "solo", "cli-once-2")
        self.assertEqual(code, 65, err)
        self.assertIn("max_concurrent", err)
        self.assertExit(self.admit("once", "once", "cli-once-3", "--reserve", "out=5"), 64)

    def test_budget_exceeded_and_timeout(self):
        self.assertExit(self.admit("try", "once", "cli-budget-1"), 0)
        t0 = time.monotonic()
        code, out, err = self.admit("acquire", "once", "cli-budget-1", "--timeout", "3s")
        self.assertEqual(code, 79, err)
        self.assertLess(time.monotonic() - t0, 2.5)
        self.assertGreater(float(out), 3.0)
        self.assertIn("budget_exceeded", err)

        self.assertExit(self.admit("acquire", "solo", "cli-tmo-1"), 0)
        t0 = time.monotonic()
        code, _, err = self.admit("acquire", "solo", "cli-tmo-1", "--timeout", "200ms")
        self.assertEqual(code, 80, err)
        self.assertGreaterEqual(time.monotonic() - t0, 0.19)
        self.assertIn("timeout", err)

    def test_run_without_double_dash_says_so(self):
        want = ("admit run: put -- before the command: "
                "admit run SCOPE KEY [options] -- CMD ...\n")
        marker = os.path.join(self.daemon.tmp.name, "ran-no-dashes")
        for args in (["run", "solo", "cli-dash-1", "touch", marker],
                     ["run", "solo", "cli-dash-1", "sh", "-c", "touch " + marker, "x", "y"],
                     ["run", "solo", "cli-dash-1", "--timeout", "1s", "curl", "x"],
                     ["run", "solo", "cli-dash-1"]):
            with self.subTest(args=args):
                code, out, err = self.admit(*args)
                self.assertEqual((code, out, err), (64, "", want))
        self.assertFalse(os.path.exists(marker))
        self.assertExit(self.admit("try", "solo", "cli-dash-1", "x", "y", "z"), 64)

    def test_cost_zero(self):
        for _ in range(3):  # takes nothing from fw's 5/1h
            code, out, err = self.admit("try", "fw", "cli-cost0-1", "--cost", "0")
            self.assertEqual(code, 0, err)
            self.assertExit(self.admit("release", out.strip()), 0)
        self.assertExit(self.admit("try", "fw", "cli-cost0-1", "--cost", "5"), 0)
        self.assertExit(self.admit("try", "fw", "cli-cost0-1"), 75)
        self.assertExit(self.admit("run", "open", "cli-cost0-2", "--cost", "0", "--", "true"), 0)
        self.assertExit(self.admit("try", "fw", "cli-cost0-1", "--cost", "-1"), 64)
        self.assertExit(self.admit("try", "fw", "cli-cost0-1", "--cost", "1x"), 64)

    def test_exceeds_limit(self):
        # fw is requests fixed-window 5/1h: a cost of 6 is never admitted
        code, out, err = self.admit("try", "fw", "cli-exc-1", "--cost", "6")
        self.assertEqual(code, 81, err)
        self.assertEqual(out, "")
        self.assertIn("exceeds_limit", err)
        self.assertIn("limit 5", err)
        self.assertIn("requests fixed-window 5/1h", err)
        self.assertIn("do not retry", err)
        t0 = time.monotonic()
        code, out, err = self.admit("acquire", "fw", "cli-exc-1", "--cost", "6", "--timeout", "5s")
        self.assertEqual((code, out), (81, ""), err)
        self.assertLess(time.monotonic() - t0, 2.0, "answered at once, whatever the budget")
        marker = os.path.join(self.daemon.tmp.name, "ran-exceeds")
        self.assertExit(self.admit("run", "fw", "cli-exc-1", "--cost", "6", "--", "touch",
                                   marker), 81)
        self.assertFalse(os.path.exists(marker))
        self.assertExit(self.admit("try", "fw", "cli-exc-1", "--cost", "5"), 0)  # nothing booked

    def run_loop(self, *args, timeout=20):
        env = dict(os.environ, ADMITD_SOCKET=self.daemon.socket,
                   PATH=os.path.dirname(launcher.ADMIT_BIN) + os.pathsep + os.environ["PATH"])
        env.pop("ADMITD_CONNECT_TIMEOUT", None)
        t0 = time.monotonic()
        p = subprocess.run(["sh", "-c", RETRY_LOOP, "loop"] + list(args), capture_output=True,
                           text=True, env=env, timeout=timeout)
        return p.returncode, p.stdout, p.stderr, time.monotonic() - t0

    def test_documented_retry_loop(self):
        # limited: it sleeps the retry-after and gets through
        self.assertExit(self.admit("penalize", "open", "cli-loop-1", "1s"), 0)
        code, out, err, took = self.run_loop("open", "cli-loop-1")
        self.assertEqual((code, out), (0, "released\n"), err)
        self.assertGreaterEqual(took, 0.9)
        # never admissible (exit 81) or no such scope (78): it stops at once
        for args in (["fw", "cli-loop-2", "--cost", "6"], ["nope", "cli-loop-3"]):
            code, _, _, took = self.run_loop(*args)
            self.assertEqual(code, 1, args)
            self.assertLess(took, 5)

    def test_reserve(self):
        # tok is tokens fixed-window 100/1h: a reservation of 80 leaves 20
        code, out, err = self.admit("acquire", "tok", "cli-res-1", "--reserve", "output=80")
        self.assertEqual(code, 0, err)
        lease = out.strip()
        code, out, err = self.admit("try", "tok", "cli-res-1", "--reserve", "output=80")
        self.assertEqual(code, 75, err)
        self.assertIn("tokens fixed-window 100/1h", err)
        # the release settles the reservation with what was used
        self.assertEqual(self.admit("release", lease, "--tokens", "output=10")[:2],
                         (0, "released\n"))
        code, out, err = self.admit("run", "tok", "cli-res-1", "--reserve", "output=60,input=20",
                                    "--", "true")
        self.assertEqual(code, 0, err)
        self.assertExit(self.admit("try", "tok", "cli-res-1", "--reserve", "output"), 64)
        self.assertExit(self.admit("try", "tok", "cli-res-1", "--reserve", ""), 64)
        self.assertExit(self.admit("release", "L", "--reserve", "output=1"), 64)

    def inspect(self, *args):
        code, out, err = self.admit("inspect", *args)
        self.assertEqual(code, 0, err)
        items = {}
        for ln in out.splitlines():
            name, _, value = ln.partition(" ")
            items.setdefault(name, []).append(value.strip())
        return items

    def test_reset_and_inspect(self):
        self.assertExit(self.admit("penalize", "open", "cli-ri-1", "60s"), 0)
        items = self.inspect("open", "cli-ri-1")
        self.assertEqual(items["scope"], ["open"])
        self.assertEqual(items["key"], ["cli-ri-1"])
        self.assertEqual(items["backend"], ["local"])
        self.assertTrue(55000 < int(items["penalty_ms"][0]) <= 60000, items)
        self.assertEqual((items["next_in_ms"], items["leases"]), (["0"], ["0"]))
        self.assertNotIn("quota", items)
        code, out, _ = self.admit("inspect", "open", "cli-ri-1", "--json")
        self.assertEqual(code, 0)
        self.assertLess(abs(json.loads(out)["penalty_ms"] - int(items["penalty_ms"][0])), 1000)
        self.assertEqual(self.admit("reset", "open", "cli-ri-1")[:2], (0, "reset\n"))
        self.assertEqual(self.inspect("open", "cli-ri-1")["penalty_ms"], ["0"])
        self.assertExit(self.admit("try", "open", "cli-ri-1"), 0)
        # pacing, by url
        self.assertExit(self.admit("run", "paced", "cli-ri.example.com", "--", "true"), 0)
        self.assertExit(self.admit("try", "paced", "cli-ri.example.com"), 75)
        items = self.inspect("paced", "--url", "https://CLI-RI.Example.com/x")
        self.assertEqual(items["key"], ["cli-ri.example.com"])
        self.assertGreater(int(items["next_in_ms"][0]), 3500000)
        self.assertEqual(self.admit("reset", "paced", "--url", "http://cli-ri.example.com/")[:2],
                         (0, "reset\n"))
        self.assertExit(self.admit("try", "paced", "cli-ri.example.com"), 0)
        # quota and rules, one line each
        self.assertExit(self.admit("try", "fw", "cli-ri-2", "--cost", "2"), 0)
        items = self.inspect("fw", "cli-ri-2")
        self.assertEqual(len(items["rule"]), 1)
        self.assertRegex(items["rule"][0],
                         r'^"requests fixed-window 5/1h" remaining 3, capacity 5, '
                         r'full_in_ms \d+$')
        # --class picks the class whose rules are shown
        for cls, rule in (("background", "requests fixed-window 1/1h"),
                          ("priority", "requests fixed-window 100/1h")):
            items = self.inspect("classes", "cli-ri-4", "--class", cls)
            self.assertEqual([r.split('"')[1] for r in items["rule"]], [rule], cls)
        items = self.inspect("once", "cli-ri-3")
        self.assertRegex(items["quota"][0], r"^used 0, limit 1, frees_in_ms \d+$")
        # usage and refusals
        self.assertExit(self.admit("reset", "open"), 65)  # no default key in open
        self.assertExit(self.admit("inspect", "open", "k", "--url", "http://k/"), 64)
        self.assertExit(self.admit("reset", "open", "k", "--class", "c"), 64)
        self.assertExit(self.admit("inspect", "nope", "k"), 78)
        self.assertExit(self.admit("reset", "nope", "k"), 78)

    def test_unknown_scope(self):
        code, _, err = self.admit("try", "nope", "k")
        self.assertEqual(code, 78)
        self.assertIn("unknown_scope", err)
        self.assertExit(self.admit("acquire", "nope", "k"), 78)
        self.assertExit(self.admit("penalize", "nope", "k", "5s"), 78)
        self.assertExit(self.admit("run", "nope", "k", "--", "true"), 78)

    def test_url_class_cost(self):
        self.assertExit(self.admit("acquire", "once", "--url", "https://CLI.Example.com/p"), 0)
        self.assertExit(self.admit("try", "once", "cli.example.com"), 75)
        self.assertExit(self.admit("try", "fw", "cli-cost-1", "--cost", "5"), 0)
        code, _, err = self.admit("try", "fw", "cli-cost-1")
        self.assertEqual(code, 75)
        self.assertIn("requests fixed-window 5/1h", err)
        self.assertExit(self.admit("try", "classes", "cli-class-1", "--class", "background"), 0)
        self.assertExit(self.admit("try", "classes", "cli-class-1", "--class", "background"), 75)
        self.assertExit(self.admit("try", "classes", "cli-class-1", "--class=priority"), 0)

    def test_tenant(self):
        self.assertExit(self.admit("try", "fw", "cli-tenant-1", "--tenant", "acme.gold-1"), 0)
        code, _, err = self.admit("try", "fw", "cli-tenant-1", "--tenant", "a b")
        self.assertNotEqual(code, 0)
        self.assertIn('"tenant" must be 1 to 64', err)
        self.assertExit(self.admit("once", "fw", "cli-tenant-1", "--tenant=acme"), 0)

    def test_release_tokens(self):
        code, out, _ = self.admit("try", "tok", "cli-tok-1")
        self.assertEqual(code, 0)
        self.assertEqual(self.admit("release", out.strip(), "--tokens", "input=300,output=200")[:2],
                         (0, "released\n"))
        code, _, err = self.admit("try", "tok", "cli-tok-1")
        self.assertEqual(code, 75)
        self.assertIn("tokens fixed-window 100/1h", err)

    def test_penalize(self):
        self.assertExit(self.admit("penalize", "open", "cli-pen-1", "30s"), 0)
        code, out, err = self.admit("try", "open", "cli-pen-1")
        self.assertEqual(code, 75)
        self.assertTrue(25.0 < float(out) <= 30.0, out)
        self.assertIn('"penalty"', err)
        # a Retry-After header value as is: seconds
        self.assertExit(self.admit("penalize", "open", "cli-pen-2", "120"), 0)
        code, out, _ = self.admit("try", "open", "cli-pen-2")
        self.assertEqual(code, 75)
        self.assertTrue(110.0 < float(out) <= 120.0, out)
        # an HTTP-date
        self.assertExit(self.admit("penalize", "open", "cli-pen-3",
                                   "Wed, 21 Oct 2099 07:28:00 GMT"), 0)
        self.assertExit(self.admit("try", "open", "cli-pen-3"), 75)
        # by url
        self.assertExit(self.admit("penalize", "open", "--url", "https://CLI-Pen.Example.com/x",
                                   "1m"), 0)
        self.assertExit(self.admit("try", "open", "cli-pen.example.com"), 75)
        # SCOPE RETRY_AFTER: the scope's default key; open has none
        self.assertExit(self.admit("penalize", "open", "cli-pen-4"), 65)
        self.assertExit(self.admit("penalize", "open", "cli-pen-4", "soon"), 65)
        # KEY and --url together: a usage error, not the library's bad arguments
        code, _, err = self.admit("penalize", "open", "cli-pen-4", "30s", "--url", "http://x/")
        self.assertEqual(code, 64, err)
        self.assertIn("not both", err)

    def test_tiny_timeout_is_a_wait_not_do_not_wait(self):
        # 0.0001s rounds to 0 ms; it must still wait (1 ms): timeout (80), where
        # --timeout 0 ("do not wait") answers at once with limited (75)
        code, out, _ = self.admit("acquire", "solo", "cli-tiny-1")
        self.assertEqual(code, 0)
        try:
            self.assertExit(self.admit("acquire", "solo", "cli-tiny-1", "--timeout", "0"), 75)
            self.assertExit(self.admit("acquire", "solo", "cli-tiny-1", "--timeout",
                                       "0.0001s"), 80)
            self.assertExit(self.admit("acquire", "solo", "cli-tiny-1", "--timeout",
                                       "0.0001"), 80)
        finally:
            self.admit("release", out.strip())

    def test_run_propagates_exit_status(self):
        self.assertExit(self.admit("run", "solo", "cli-run-1", "--", "sh", "-c", "exit 7"), 7)
        code, out, _ = self.admit("run", "solo", "cli-run-1", "--timeout", "1s", "--",
                                  "echo", "hello")
        self.assertEqual((code, out), (0, "hello\n"))
        # the lease was released both times: the key is free
        code, out, _ = self.admit("try", "solo", "cli-run-1")
        self.assertEqual(code, 0)
        self.admit("release", out.strip())
        self.assertExit(self.admit("run", "solo", "cli-run-1", "--", "/nonexistent/cmd"), 127)
        self.assertExit(self.admit("run", "solo", "cli-run-1", "--", "sh", "-c", "kill -9 $$"),
                        128 + 9)

    def test_run_refused_does_not_run(self):
        marker = os.path.join(self.daemon.tmp.name, "ran")
        self.assertExit(self.admit("try", "once", "cli-run-lim"), 0)
        self.assertExit(self.admit("run", "once", "cli-run-lim", "--timeout", "0", "--",
                                   "touch", marker), 75)
        self.assertFalse(os.path.exists(marker))

    def _run_and_signal(self, key, sig):
        p = subprocess.Popen([launcher.ADMIT_BIN, "--socket", self.daemon.socket, "run", "solo",
                              key, "--", "sleep", "30"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            # wait until admit run holds the key (and so has started sleep)
            end = time.monotonic() + 5
            while time.monotonic() < end:
                code, out, _ = self.admit("try", "solo", key)
                if code == 75:
                    break
                if code == 0:
                    self.admit("release", out.strip())
                time.sleep(0.02)
            self.assertEqual(code, 75, "admit run never held the key")
            time.sleep(0.1)  # let admit reach waitpid
            t0 = time.monotonic()
            p.send_signal(sig)
            rc = p.wait(10)
            self.assertLess(time.monotonic() - t0, 5, "the child did not get the signal")
        finally:
            self._reap(p)
        self.assertEqual(rc, 128 + sig)
        self._assert_released(key)

    @staticmethod
    def _reap(p):
        """Kill p if a failed test left it running; close its pipes."""
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
        p.stderr.close()

    def _assert_released(self, key):
        """admit run released: a try on the max_concurrent=1 key succeeds at once."""
        code, out, err = self.admit("try", "solo", key)
        self.assertEqual(code, 0, err)
        self.admit("release", out.strip())

    def test_run_sigterm_forwards_and_releases(self):
        self._run_and_signal("cli-run-sig-1", signal.SIGTERM)

    def test_run_sigint_forwards_and_releases(self):
        self._run_and_signal("cli-run-sig-2", signal.SIGINT)

    def test_run_terminal_ctrl_c_reaches_the_command_once(self):
        """^C on a terminal signals the whole foreground group, the command
        included: admit must not pass on a second SIGINT. The command exits
        with the number of SIGINTs it saw."""
        import fcntl
        import pty
        import termios
        counter = ("import signal, sys, time\n"
                   "n = 0\n"
                   "def h(s, f):\n"
                   "    global n\n"
                   "    n += 1\n"
                   "signal.signal(signal.SIGINT, h)\n"
                   "print('ready', flush=True)\n"
                   "end = time.monotonic() + 10\n"
                   "while n == 0 and time.monotonic() < end:\n"
                   "    time.sleep(0.01)\n"
                   "time.sleep(0.5)\n"  # room for a second, forwarded SIGINT
                   "sys.exit(n)\n")
        master, slave = pty.openpty()

        def own_terminal():  # a session of its own, the pty as its terminal
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        p = subprocess.Popen([launcher.ADMIT_BIN, "--socket", self.daemon.socket, "run", "solo",
                              "cli-run-tty-1", "--", sys.executable, "-c", counter],
                             stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=own_terminal)
        os.close(slave)
        try:
            ready, _, _ = select.select([p.stdout], [], [], 10)
            self.assertTrue(ready, "the command never started")
            self.assertEqual(p.stdout.readline(), b"ready\n")
            os.write(master, b"\x03")  # the terminal's INTR character
            rc = p.wait(15)
        finally:
            self._reap(p)
            os.close(master)
        self.assertEqual(rc, 1, "the command saw %d SIGINTs for one ^C" % rc)
        self._assert_released("cli-run-tty-1")

    def test_run_sigkilled_takes_the_command_with_it(self):
        """kill -9 of admit run: the daemon frees the lease (the socket
        closes), so the command must not run on holding nothing: the kernel
        kills it with admit (PR_SET_PDEATHSIG)."""
        key = "cli-run-kill-1"
        pidfile = os.path.join(self.daemon.tmp.name, "run-kill.pid")
        p = subprocess.Popen([launcher.ADMIT_BIN, "--socket", self.daemon.socket, "run", "solo",
                              key, "--", "sh", "-c", 'echo $$ > "$0"; exec sleep 300', pidfile],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        cmd_pid = None
        try:
            end = time.monotonic() + 10
            while time.monotonic() < end and cmd_pid is None:
                try:
                    with open(pidfile) as f:
                        cmd_pid = int(f.read().strip() or 0) or None
                except (FileNotFoundError, ValueError):
                    pass
                time.sleep(0.02)
            self.assertIsNotNone(cmd_pid, "the command never started")
            self.assertTrue(self._alive(cmd_pid), "the command is not running")
            self.assertExit(self.admit("try", "solo", key), 75)  # held while it runs
            p.kill()
            p.wait(10)
            t0 = time.monotonic()
            while self._alive(cmd_pid) and time.monotonic() - t0 < 2.0:
                time.sleep(0.02)
            gone = not self._alive(cmd_pid)
        finally:
            if cmd_pid is not None and self._alive(cmd_pid):
                os.kill(cmd_pid, signal.SIGKILL)
            self._reap(p)
        self.assertTrue(gone, "the command still runs 2 s after admit run was killed")
        self._assert_released(key)

    @staticmethod
    def _alive(pid):
        """pid is a process that has not ended (a zombie has ended)."""
        try:
            with open("/proc/%d/stat" % pid) as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError):
            return False

    def test_run_with_sigchld_ignored(self):
        """An ignored SIGCHLD survives exec; admit run must still get the
        command's status, and give the command the disposition it got."""
        def ignore_sigchld():
            signal.signal(signal.SIGCHLD, signal.SIG_IGN)

        base = [launcher.ADMIT_BIN, "--socket", self.daemon.socket, "run", "solo", "cli-chld-1",
                "--"]
        p = subprocess.run(base + ["sh", "-c", "exit 3"], capture_output=True, text=True,
                           timeout=20, preexec_fn=ignore_sigchld)
        self.assertEqual(p.returncode, 3, p.stderr)
        probe = ("import signal, sys\n"
                 "sys.exit(4 if signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN else 5)\n")
        p = subprocess.run(base + [sys.executable, "-c", probe], capture_output=True, text=True,
                           timeout=20, preexec_fn=ignore_sigchld)
        self.assertEqual(p.returncode, 4, p.stderr)


if __name__ == "__main__":
    unittest.main()
