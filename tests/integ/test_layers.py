"""test_layers.py - the layers check (tests/tools/layers.py, `make layers`).

The check passes on this tree, and fails, with a `file:line: what` line, on
a copy of the daemon's sources where one file includes a header of a layer
above its own, where an allowed upward include is gone, where a file sits in
a folder of no layer, or includes a header that is nowhere or in two folders.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CHECK = os.path.join(ROOT, "tests", "tools", "layers.py")


def run_check(root):
    p = subprocess.run([sys.executable, CHECK, "--root", root], capture_output=True, text=True,
                       timeout=60)
    return p.returncode, p.stdout, p.stderr


def allowed_count():
    with open(os.path.join(ROOT, "daemon", "LAYERS"), encoding="utf-8") as f:
        return sum(1 for line in f if line.startswith("allow "))


class LayersTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="admitd-layers-")
        # The daemon's sources and LAYERS, and proto/ (found on the include path).
        for top in ("daemon", "proto"):
            shutil.copytree(os.path.join(ROOT, top), os.path.join(self.tmp, top),
                            ignore=lambda d, names: [n for n in names if n.endswith(
                                (".o", ".d", ".a")) or n == "admitd"])

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def path(self, rel):
        return os.path.join(self.tmp, rel)

    def insert_after_first_include(self, rel, text):
        """Insert a line after rel's first #include; return its line number."""
        with open(self.path(rel), encoding="utf-8") as f:
            lines = f.readlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("#include"))
        lines.insert(at + 1, text + "\n")
        with open(self.path(rel), "w", encoding="utf-8") as f:
            f.writelines(lines)
        return at + 2

    def test_this_tree_keeps_its_layers(self):
        rc, out, err = run_check(ROOT)
        self.assertEqual(rc, 0, err)
        self.assertEqual(err, "")
        m = re.search(r"(\d+) allowed upward includes", out)
        self.assertIsNotNone(m, out)
        self.assertEqual(int(m.group(1)), allowed_count())

    def test_the_copy_keeps_its_layers(self):
        rc, out, err = run_check(self.tmp)
        self.assertEqual(rc, 0, out + err)

    def test_an_upward_include_fails(self):
        n = self.insert_after_first_include("daemon/base/htab.c", '#include "engine.h"')
        rc, out, err = run_check(self.tmp)
        self.assertEqual(rc, 1, out + err)
        self.assertIn('daemon/base/htab.c:%d: includes "engine.h" of layer decision, above its '
                      "own layer base" % n, err)
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("layers: 1 problems", out)

    def test_an_upward_include_into_an_allowed_file_fails(self):
        # backend.h may include engine.h (listed debt), not anything else above it.
        n = self.insert_after_first_include("daemon/store/backend.h", '#include "admitd.h"')
        rc, _out, err = run_check(self.tmp)
        self.assertEqual(rc, 1, err)
        self.assertIn('daemon/store/backend.h:%d: includes "admitd.h" of layer process' % n, err)

    def test_a_paid_debt_must_be_struck(self):
        rel = "daemon/store/backend.h"
        with open(self.path(rel), encoding="utf-8") as f:
            text = f.read()
        self.assertIn('#include "engine.h"\n', text)
        with open(self.path(rel), "w", encoding="utf-8") as f:
            f.write(text.replace('#include "engine.h"\n', ""))
        rc, _out, err = run_check(self.tmp)
        self.assertEqual(rc, 1, err)
        self.assertRegex(err, r"daemon/LAYERS:\d+: allowed upward include "
                              r"daemon/store/backend.h -> engine.h is gone: strike it")

    def test_a_folder_of_no_layer_fails(self):
        os.mkdir(self.path("daemon/extra"))
        with open(self.path("daemon/extra/x.c"), "w", encoding="utf-8") as f:
            f.write('#include "log.h"\n')
        rc, _out, err = run_check(self.tmp)
        self.assertEqual(rc, 1, err)
        self.assertIn("daemon/extra/x.c:1: folder daemon/extra is in no layer", err)

    def test_a_header_found_nowhere_fails(self):
        n = self.insert_after_first_include("daemon/ops/ops.c", '#include "nosuch.h"')
        rc, _out, err = run_check(self.tmp)
        self.assertEqual(rc, 1, err)
        self.assertIn('daemon/ops/ops.c:%d: includes "nosuch.h", found in no layer' % n, err)

    def test_a_header_in_two_folders_is_ambiguous(self):
        # Headers are included by name: a second log.h makes every include of it a guess.
        shutil.copy(self.path("daemon/base/log.h"), self.path("daemon/queue/log.h"))
        rc, _out, err = run_check(self.tmp)
        self.assertEqual(rc, 1, err)
        self.assertRegex(err, r'daemon/conf/confwatch.c:\d+: includes "log.h", which is in '
                              r'daemon/base and daemon/queue: ambiguous')
        # A file next to it finds its neighbour first, as the compiler does.
        self.assertNotIn("daemon/queue/waitq.c", err)

    def test_a_malformed_layers_file_is_refused(self):
        with open(self.path("daemon/LAYERS"), "a", encoding="utf-8") as f:
            f.write("allow daemon/ops/ops.c engine.h\n")  # no reason
        rc, _out, err = run_check(self.tmp)
        self.assertEqual(rc, 2, err)
        self.assertIn("'allow FILE HEADER -- reason' expected", err)


if __name__ == "__main__":
    unittest.main()
