"""test_access.py - who may connect: allow_uids, allow_gids, socket_group.

A client run as another user (setpriv --reuid/--regid, no supplementary
groups unless given) outside the lists gets exactly one line,
{"ok":false,"error":"forbidden","message":...}, then EOF; a listed one is
served, also with 300 supplementary groups (more than one getsockopt
buffer of 256) when only the last is listed. A reload that takes a peer out
of the lists closes its open connection after one forbidden line, and the
lease it held is free at once; a peer still listed goes on. Names resolve
at load (a bad name is file:line, exit 2, at -t), and socket_group is the
socket's group (stat). The tests run as root (setpriv needs it) and open
the socket's directories to other users for their duration (traverse only:
0711), with socket_mode 0666 so that the mode lets everyone in and only the
lists decide. The Python client run as another user is a copy in the
daemon's temp dir: the clone it comes from may be in a directory only its
owner can enter.
"""

import grp
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import time
import unittest

from .harness import IO_TIMEOUT, REPO, Admitd, _wait_until, acquire_req, run_admitd

NOBODY = pwd.getpwnam("nobody").pw_uid
NOGROUP = grp.getgrnam("nogroup").gr_gid
OTHER = 4321  # a uid and gid with no name
STAY_OPEN_S = 0.3  # a served peer's connection is still open this long after its reply

# Run as the peer: connect, send a ping (or argv[4]), print every line until
# EOF as JSON. The first line may take IO_TIMEOUT; after it, the connection
# counts as left open when nothing comes for STAY_OPEN_S. With argv[5]
# ("hold"), the first line is printed at once, alone, and the rest may take
# IO_TIMEOUT too.
PEER = r"""
import json, socket, sys
first, stay_open = float(sys.argv[2]), float(sys.argv[3])
req = sys.argv[4].encode() if len(sys.argv) > 4 else b'{"op":"ping","id":1}'
hold = len(sys.argv) > 5
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(first)
s.connect(sys.argv[1])
buf, end, sent = b"", "eof", "ok"
try:
    s.sendall(req + b"\n")
except BrokenPipeError:
    sent = "epipe"
while True:
    try:
        d = s.recv(65536)
    except ConnectionResetError:
        end = "reset"
        break
    except socket.timeout:
        end = "open"
        break
    if not d:
        break
    buf += d
    if b"\n" in buf and hold:
        line, buf = buf.split(b"\n", 1)
        print(line.decode(), flush=True)
        hold = False
    elif b"\n" in buf and len(sys.argv) <= 5:
        s.settimeout(stay_open)
print(json.dumps({"lines": [l.decode() for l in buf.split(b"\n") if l], "end": end,
                  "sent": sent}), flush=True)
"""

CONF = """
[admitd]
socket_mode = 0666
%s

[scope s]
"""

# A scope whose one slot shows whether a revoked peer's lease was released.
HELD_CONF = CONF + """
[scope held]
max_concurrent = 1
"""

GROUPS_300 = [5000 + i for i in range(300)]  # gids with no name


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("setpriv"),
                     "needs root and setpriv to run a client as another user")
class AccessTest(unittest.TestCase):

    def daemon(self, lines):
        d = Admitd(CONF % lines)
        self.addCleanup(d.cleanup)  # last: after the modes are put back
        # Other users must reach the socket: open its directories to them
        # (traverse only) while this test runs.
        for path in (d.tmp.path, os.path.dirname(d.tmp.path)):
            mode = stat.S_IMODE(os.stat(path).st_mode)
            os.chmod(path, 0o711)
            self.addCleanup(os.chmod, path, mode)
        d.start()
        return d

    def peer(self, d, uid, gid, groups=None):
        """What a client running as uid/gid reads: (lines, how it ended).
        A served peer's connection stays open: it ends "open"."""
        cmd = ["setpriv", "--reuid", str(uid), "--regid", str(gid)]
        cmd += ["--groups", ",".join(map(str, groups))] if groups else ["--clear-groups"]
        cmd += ["/usr/bin/python3", "-c", PEER, d.sock_path, str(IO_TIMEOUT), str(STAY_OPEN_S)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=IO_TIMEOUT)
        self.assertEqual(out.returncode, 0, out.stderr)
        r = json.loads(out.stdout)
        # The daemon reads a refused peer's input before closing: writing
        # first never fails.
        self.assertEqual(r["sent"], "ok")
        return [json.loads(l) for l in r["lines"]], r["end"]

    def assertForbidden(self, got):
        lines, end = got
        self.assertEqual(len(lines), 1, lines)
        self.assertEqual(sorted(lines[0]), ["error", "message", "ok"], lines)
        self.assertEqual((lines[0]["ok"], lines[0]["error"]), (False, "forbidden"))
        self.assertIn("allow_uids", lines[0]["message"])
        self.assertEqual(end, "eof")

    def assertServed(self, got):
        lines, end = got
        self.assertEqual(lines, [{"ok": True, "id": 1}])
        self.assertEqual(end, "open")

    def test_peer_outside_allow_uids_gets_one_forbidden_line(self):
        d = self.daemon("allow_uids = 0")
        self.assertForbidden(self.peer(d, NOBODY, NOGROUP))
        with d.connect() as c:  # root: listed
            self.assertEqual(c.request({"op": "ping", "id": 2}), {"ok": True, "id": 2})
        self.assertIn("connection refused: peer not in allow_uids/allow_gids",
                      d.stderr_text())
        self.assertIn("uid=%d gid=%d" % (NOBODY, NOGROUP), d.stderr_text())

    def test_python_client_raises_forbidden(self):
        d = self.daemon("allow_uids = 0")
        # A copy of the package that other users can read: the clone's own
        # path may pass through a directory only its owner can enter (a
        # home, a mktemp -d). The temp dir's parents are traverse-only now.
        pydir = os.path.join(d.tmp.path, "py")
        shutil.copytree(os.path.join(REPO, "client/python/admit"),
                        os.path.join(pydir, "admit"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        for root, dirs, files in os.walk(pydir):
            os.chmod(root, 0o755)
            for f in files:
                os.chmod(os.path.join(root, f), 0o644)
        code = ("import admit, sys\n"
                "try:\n"
                "    admit.Client(sys.argv[1]).ping()\n"
                "except admit.Forbidden as e:\n"
                "    print('forbidden', e.code)\n")
        out = subprocess.run(["setpriv", "--reuid", str(NOBODY), "--regid", str(NOGROUP),
                              "--clear-groups", "/usr/bin/python3", "-c", code, d.sock_path],
                             capture_output=True, text=True, timeout=IO_TIMEOUT,
                             env=dict(os.environ, PYTHONPATH=pydir),
                             cwd="/")
        self.assertEqual((out.returncode, out.stdout), (0, "forbidden forbidden\n"), out.stderr)

    def test_names_resolve(self):
        d = self.daemon("allow_uids = root nobody")
        self.assertServed(self.peer(d, NOBODY, NOGROUP))
        self.assertForbidden(self.peer(d, OTHER, OTHER))

    def test_allow_gids_by_primary_or_supplementary_group(self):
        d = self.daemon("allow_uids = root\nallow_gids = nogroup")
        self.assertServed(self.peer(d, OTHER, NOGROUP))
        self.assertForbidden(self.peer(d, OTHER, OTHER))
        self.assertServed(self.peer(d, OTHER, OTHER, groups=[OTHER + 1, NOGROUP]))

    def test_more_than_256_supplementary_groups(self):
        # The kernel answers SO_PEERGROUPS with ERANGE past the buffer: the
        # daemon asks again with the size it is told, so the 300th counts.
        d = self.daemon("allow_uids = root\nallow_gids = %d" % GROUPS_300[-1])
        self.assertServed(self.peer(d, OTHER, OTHER, groups=GROUPS_300))
        self.assertForbidden(self.peer(d, OTHER, OTHER, groups=GROUPS_300[:-1]))

    def test_reload_closes_connections_of_peers_no_longer_allowed(self):
        d = self.daemon("allow_uids = root nobody")
        with open(d.conf_path, "w") as f:  # the same lists, and the held scope
            f.write(HELD_CONF % "allow_uids = root nobody")
        d.proc.send_signal(signal.SIGHUP)
        _wait_until(lambda: d.stderr_text().count('msg="conf reloaded') == 1, IO_TIMEOUT,
                    "the first reload", d.stderr_text)
        holder = subprocess.Popen(
            ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOGROUP), "--clear-groups",
             "/usr/bin/python3", "-c", PEER, d.sock_path, str(IO_TIMEOUT), str(IO_TIMEOUT),
             json.dumps(acquire_req("held", "k", timeout_ms=0, id=1)), "hold"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(holder.kill)
        first = json.loads(holder.stdout.readline())
        self.assertIs(first.get("ok"), True, first)  # nobody holds held/k's one slot
        root = d.connect()
        self.assertEqual(root.request(acquire_req("held", "k", timeout_ms=0, id=2))["error"],
                         "limited")

        with open(d.conf_path, "w") as f:
            f.write(HELD_CONF % "allow_uids = root")
        t0 = time.monotonic()
        d.proc.send_signal(signal.SIGHUP)
        out, err = holder.communicate(timeout=IO_TIMEOUT)
        took = time.monotonic() - t0
        rest = json.loads(out)
        self.assertEqual(len(rest["lines"]), 1, rest)
        line = json.loads(rest["lines"][0])
        self.assertEqual((line["ok"], line["error"]), (False, "forbidden"), line)
        self.assertIn("reload", line["message"])
        self.assertIn(rest["end"], ("eof", "reset"))  # closed, not left open
        self.assertLess(took, IO_TIMEOUT / 2)
        self.assertIn("connection closed: a reload took its peer out of allow_uids/allow_gids",
                      d.stderr_text())
        self.assertIn("uid=%d gid=%d" % (NOBODY, NOGROUP), d.stderr_text())
        # root, still listed, keeps its connection; the revoked lease is gone.
        self.assertEqual(root.request({"op": "ping", "id": 3}), {"ok": True, "id": 3})
        got = root.request(acquire_req("held", "k", timeout_ms=0, id=4))
        self.assertIs(got.get("ok"), True, got)
        # New connections from nobody are refused as before.
        self.assertForbidden(self.peer(d, NOBODY, NOGROUP))

    def test_socket_group(self):
        d = self.daemon("socket_group = nogroup")
        st = os.stat(d.sock_path)
        self.assertEqual(st.st_gid, NOGROUP)
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o666)
        self.assertServed(self.peer(d, OTHER, OTHER))  # no lists: the mode decides


class AccessConfTest(unittest.TestCase):

    def test_bad_names_are_file_line_errors(self):
        d = Admitd(CONF % "allow_uids = root no-such-user-x\nallow_gids = 12 no-such-group-x\n"
                   "socket_group = no-such-group-y")
        try:
            r = run_admitd(["-t", "-c", d.conf_path])
            self.assertEqual(r.returncode, 2, r)
            self.assertEqual(r.stderr.splitlines(), [
                '%s:4: allow_uids: no user "no-such-user-x"' % d.conf_path,
                '%s:5: allow_gids: no group "no-such-group-x"' % d.conf_path,
                '%s:6: socket_group: no group "no-such-group-y"' % d.conf_path,
            ])
        finally:
            d.tmp.cleanup()

    def test_numbers_and_names_are_good(self):
        d = Admitd(CONF % "allow_uids = root 0 65534 nobody\nallow_gids = nogroup 0\n"
                   "socket_group = 65534")
        try:
            r = run_admitd(["-t", "-c", d.conf_path])
            self.assertEqual((r.returncode, r.stderr), (0, ""), r)
        finally:
            d.tmp.cleanup()


if __name__ == "__main__":
    unittest.main()
