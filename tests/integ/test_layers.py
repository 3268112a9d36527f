"""test_layers.py - the layers check (tests/tools/layers.py, `make layers`).

The check passes on this tree, and fails, with a `file:line: what` line, on
a copy of the daemon's sources where one file includes a header of a layer
above its own, where an allowed upward include is gone, where a file sits in
a folder of no layer, or includes a header that is nowhere or in two folders.
With --objects it reads the built objects: a call by name up the layers, or
files that call each other in a circle, fail it; and in the built daemon the
files of conf/, ops/ and strategy/ call one way, no circle among them.
"""

import importlib.util
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

    def allow(self, line):
        with open(self.path("daemon/LAYERS"), "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def test_an_upward_include_into_an_allowed_file_fails(self):
        # An allowed upward include lets that one through, not anything else above.
        self.allow("allow daemon/store/backend.h engine.h -- a test's debt")
        self.insert_after_first_include("daemon/store/backend.h", '#include "engine.h"')
        rc, out, err = run_check(self.tmp)
        self.assertEqual(rc, 0, out + err)
        self.assertIn("1 allowed upward includes", out)
        n = self.insert_after_first_include("daemon/store/backend.h", '#include "admitd.h"')
        rc, _out, err = run_check(self.tmp)
        self.assertEqual(rc, 1, err)
        self.assertIn('daemon/store/backend.h:%d: includes "admitd.h" of layer process' % n, err)

    def test_a_paid_debt_must_be_struck(self):
        self.allow("allow daemon/store/backend.h engine.h -- a test's debt")
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



class CallsTest(unittest.TestCase):
    """--objects: calls by name run down the layers, and no files call in a circle."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="admitd-calls-")
        for d in ("daemon/low", "daemon/high", "proto"):
            os.makedirs(os.path.join(self.tmp, d))
        with open(os.path.join(self.tmp, "daemon", "LAYERS"), "w", encoding="utf-8") as f:
            f.write("layer low daemon/low\nlayer high daemon/high\n")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def source(self, rel, text):
        path = os.path.join(self.tmp, rel)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        subprocess.run(["cc", "-std=c11", "-c", "-o", path[:-2] + ".o", path], check=True,
                       timeout=60)

    def run_objects(self):
        p = subprocess.run([sys.executable, CHECK, "--root", self.tmp, "--objects"],
                           capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout, p.stderr

    def test_calls_down_pass(self):
        self.source("daemon/low/a.c", "int a(void);\nint a(void) { return 1; }\n")
        self.source("daemon/high/h.c", "int a(void);\nint h(void);\nint h(void) { return a(); }\n")
        rc, out, err = self.run_objects()
        self.assertEqual(rc, 0, out + err)
        self.assertIn("2 objects: no upward call, no cycle", out)

    def test_an_upward_call_fails(self):
        self.source("daemon/low/a.c", "int h(void);\nint a(void);\nint a(void) { return h(); }\n")
        self.source("daemon/high/h.c", "int h(void);\nint h(void) { return 2; }\n")
        rc, _out, err = self.run_objects()
        self.assertEqual(rc, 1, err)
        self.assertIn("daemon/low/a.c: calls h of daemon/high/h.c, layer high above its own "
                      "layer low", err)

    def test_a_cycle_in_one_layer_fails(self):
        self.source("daemon/low/a.c", "int b(void);\nint a(void);\nint a(void) { return b(); }\n")
        self.source("daemon/low/b.c", "int a(void);\nint b(void);\nint b(void) { return a(); }\n")
        rc, _out, err = self.run_objects()
        self.assertEqual(rc, 1, err)
        self.assertIn("daemon/low/a.c: files in a cycle: a.c -> b.c (b); b.c -> a.c (a)", err)

    def test_a_pointer_handed_down_is_no_arrow(self):
        # The lower layer declares the callback; the upper one hands it down.
        self.source("daemon/low/a.c", "int a(int (*cb)(void));\nint a(int (*cb)(void)) "
                    "{ return cb(); }\n")
        self.source("daemon/high/h.c", "int a(int (*cb)(void));\nint h(void);\n"
                    "static int up(void) { return 3; }\nint h(void) { return a(up); }\n")
        rc, out, err = self.run_objects()
        self.assertEqual(rc, 0, out + err)


class FoldersCallOneWayTest(unittest.TestCase):
    """The built daemon: within conf/, ops/, strategy/ and store/ no files call in a circle.

    Each folder has its facade on top, its parts below and the helpers they
    share at the bottom (conf_msg.c, conf_find.c, ops_reply.c, the static
    inline helpers of strategy_impl.h; store/'s rb_args.c, rb_xbatch.c and
    rb_call.c, in the order backend_int.h lists), so a part never calls back
    up: what goes up goes through a callback the lower file declares.
    """

    FOLDERS = ("daemon/conf/", "daemon/ops/", "daemon/strategy/", "daemon/store/")

    def setUp(self):
        spec = importlib.util.spec_from_file_location("layers_check", CHECK)
        self.layers = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.layers)
        self.files = self.layers.daemon_files(ROOT)
        sources = [f for f in self.files if f.startswith(self.FOLDERS) and f.endswith(".c")]
        unbuilt = [f for f in sources if not os.path.isfile(os.path.join(ROOT, f[:-2] + ".o"))]
        if unbuilt:
            self.skipTest("build first (make): no object for " + ", ".join(unbuilt))

    def test_no_cycle_within_these_folders(self):
        arrows = self.layers.object_arrows(ROOT, self.files)
        # the calls inside each folder are read (else no cycle would prove nothing)
        for a, b in (("daemon/conf/conf_load.c", "daemon/conf/conf_set.c"),
                     ("daemon/ops/ops.c", "daemon/ops/ops_traffic.c"),
                     ("daemon/strategy/strategy.c", "daemon/strategy/leaky_bucket.c"),
                     ("daemon/store/rb_acquire.c", "daemon/store/rb_xbatch.c")):
            self.assertIn(b, arrows.get(a, {}), "%s -> %s not read from the objects" % (a, b))
        tied = [part for part in self.layers.cycles(arrows)
                if any(f.startswith(self.FOLDERS) for f in part)]
        self.assertEqual(tied, [])


if __name__ == "__main__":
    unittest.main()
