"""test_readme.py - the README's shell session is true.

The shell blocks of README.md's "A 30-second tour" are run as written, in
one bash, against the daemon on conf/admitd.conf (the conf `make run`
uses; its socket and metrics address moved into the test's temp dir and
port 0). Each `$ ` command's output must match the lines printed under it,
where `…` (with the characters just before it) stands for any text and a
number for any number.
"""

import os
import re
import shutil
import subprocess
import unittest

from .harness import REPO, Admitd

MARK = "@@readme-command-done@@"


def shell_session(readme, heading):
    """The ```sh blocks of the section under heading, one session:
    [(command, [expected lines])]."""
    section = readme.split("\n## " + heading + "\n", 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("\n```", 1)[0] for b in section.split("```sh\n")[1:]]
    steps = []
    for line in "\n".join(blocks).splitlines():
        if line.startswith("$ "):
            steps.append([line[2:], []])
        elif steps and steps[-1][0].endswith("\\") and not steps[-1][1]:
            steps[-1][0] += "\n" + line
        else:
            steps[-1][1].append(line)
    return steps


def line_pattern(expected):
    """A regex for one documented output line (`…` and numbers are wildcards)."""
    parts = re.split(r"(\w*…|\d+)", expected)
    out = []
    for i, p in enumerate(parts):
        if i % 2 == 0:
            out.append(re.escape(p))
        elif p.endswith("…"):
            out.append(".*")
        else:
            out.append(r"\d+")
    return "".join(out)


@unittest.skipIf(shutil.which("socat") is None,
                 "socat is not installed (Debian: apt-get install socat)")
class ReadmeShellTest(unittest.TestCase):

    def test_line_pattern(self):
        # The matcher itself: a wrong lease shape or a missing field fails.
        pat = line_pattern('{"ok":true,"lease":"045e…","waited_ms":0}')
        self.assertRegex('{"ok":true,"lease":"9a.AWN","waited_ms":12}', "^%s$" % pat)
        self.assertNotRegex('{"ok":true,"lease":"9a.AWN"}', "^%s$" % pat)
        self.assertNotRegex('{"ok":false,"lease":"9a","waited_ms":0}', "^%s$" % pat)

    def test_the_tour_from_a_shell(self):
        with open(os.path.join(REPO, "README.md")) as f:
            steps = shell_session(f.read(), "A 30-second tour")
        self.assertGreaterEqual(len(steps), 5)  # both blocks
        with open(os.path.join(REPO, "conf/admitd.conf")) as f:
            conf = f.read()
        conf = re.sub(r"^metrics = .*$", "metrics = 127.0.0.1:0", conf, flags=re.M)
        with Admitd(conf) as d:
            script = "".join("%s\necho %s\n" % (cmd.replace("/tmp/admitd.sock", d.sock_path), MARK)
                             for cmd, _ in steps)
            r = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                               timeout=30)
            self.assertEqual((r.returncode, r.stderr), (0, ""), r)
            outputs = r.stdout.split(MARK + "\n")
            self.assertEqual(outputs[-1], "")
            self.assertEqual(len(outputs) - 1, len(steps), r.stdout)
            for (cmd, want), got in zip(steps, outputs):
                got = got.splitlines()
                self.assertEqual(len(got), len(want), (cmd, got))
                for w, g in zip(want, got):
                    self.assertRegex(g, "^%s$" % line_pattern(w), cmd)
            # The release ended the lease the session acquired: the key is free.
            with d.connect() as c:
                st = c.request({"op": "status"})
                self.assertEqual(st["scopes"]["crawler"]["leases"], 0, st)


if __name__ == "__main__":
    unittest.main()
