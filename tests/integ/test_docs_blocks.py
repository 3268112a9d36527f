"""test_docs_blocks.py - every fenced code block of the docs runs, or is checked.

The files: README.md, docs/*.md and the client packages' own READMEs.
proto/PROTOCOL.md is not among them: its blocks are the wire form
(`> request`, `< reply`) on confs of their own, and proto/vectors/*.jsonl are their executable form (tests/client/vectors.py).

Each block is classified by its language tag, and a block with no tag, or a
tag not below, fails the test:

- sh: a block whose lines start with `$ ` is a terminal transcript: each
  command runs in one bash (stderr into stdout, as a terminal shows both)
  and its output must match the lines under it, where `…` (with the word
  characters before it) stands for any text and a number for any number
  (test_readme.line_pattern). A command continues on the next line after a
  trailing `\\`, and a here-document's lines belong to its command. Any other
  sh block is a script, run by `bash -e -o pipefail`: it must exit 0.
- python, js, c: programs, run against the daemon (the C one compiled against
  client/libadmit.a; a C block without main() is the body of one, given
  `struct admit *a` connected and `struct admit_result r`). Python runs with
  client/python on PYTHONPATH, Node with client/node as `admitd-client`.
  The application's own work is named by placeholders these runs define:
  call_the_model(), fetch() (Python), callTheModel(), fetchIt(), store()
  (Node), and Node's global fetch() is a stand-in upstream (there is no
  network here) answering 200 with an OpenAI-style `usage`; $UPSTREAM is the
  URL of one such (a Python block's to call), $PORT a free port. A block that
  listens on TCP is a server (the prelude tells the test its port; a Node
  server's port is moved to a free one): it is sent one POST, and must answer
  it 200 with the upstream's body (and the six x-ratelimit-* headers when
  the block names them) and leave no lease held. Any other block
  must exit 0 with nothing on stderr.
- ini: a conf, checked by `admitd -t`. yaml: yaml.safe_load. json: json.loads.
  promql: each line an expression, checked by `promtool check rules`.
- text: says what it is in a marker (below): `output` (a recorded output,
  shown as is), `tree` (each `dir/` at a line's start exists in the repo),
  `usage CMD` (the `admit ...` lines of CMD's output, exactly).

Markers are HTML comments on the lines right above a fence (invisible on
GitHub):

- `<!-- conf: PATH -->`: the daemon a block runs against is the real admitd
  on this conf (default: conf/admitd.conf, the conf `make run` serves), on a
  socket of the test's (its path replaces the conf's `socket` in the block,
  and is $ADMITD_SOCKET) and a free metrics port. A sh block that starts
  `daemon/admitd` itself gets no daemon from the test.
- `<!-- session: NAME -->`: the blocks of one file with one NAME run as one
  program, in order (one bash; one Python namespace).
- `<!-- then: CODE -->`: code run after the block (a call of what it defines).
- `<!-- not-run: REASON -->`: only for REASONS below, each of which the
  block must show (an `apt-get install` for "installs packages", ...).
- `<!-- text: KIND -->`: see text above.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.request

from . import harness
from .harness import REPO, Admitd, admitd_bin, free_tcp_port
from .test_readme import line_pattern

DOC_FILES = ["README.md"] + sorted(
    [os.path.join("docs", f) for f in os.listdir(os.path.join(REPO, "docs")) if f.endswith(".md")]
) + ["client/python/README.md", "client/node/README.md"]

DEFAULT_CONF = "conf/admitd.conf"

# The only reasons a block may be left unrun, each with what the block must show.
NOT_RUN = {
    "installs packages": r"apt-get install|pip install|npm (install|pack)",
    "runs a test suite": r"make test|unittest discover|node --test",
    "runs or redraws the benchmarks": r"make bench|tests/bench/(run|plot)\.py",
}

LANGS = {"sh": "sh", "shell": "sh", "console": "sh", "bash": "sh", "python": "python",
         "py": "python", "js": "js", "javascript": "js", "node": "js", "c": "c",
         "ini": "ini", "conf": "ini", "yaml": "yaml", "yml": "yaml", "json": "json",
         "promql": "promql", "text": "text"}

# A block that acquires must have been admitted at least once.
ACQUIRES = (r"\bacquire\(|tryAcquire|try_acquire|\.admit\(|admit_(acquire|try|once)\b"
            r"|admit (acquire|try|once|run) |\"op\":\"acquire\"")

RUN_TIMEOUT = 60  # a block that waits forever fails, it does not hang the suite

PY_RUNNER = r'''
import builtins, sys, types
builtins.call_the_model = lambda: types.SimpleNamespace(input_tokens=300, output_tokens=200)
builtins.fetch = lambda *a, **k: None
import os, socket
_listen = socket.socket.listen


def _listen_and_say(self, *a):
    # A server block: say its port (the test sends it a request).
    r = _listen(self, *a)
    if self.family in (socket.AF_INET, socket.AF_INET6) and os.environ.get("DOCS_TEST_PORT_FILE"):
        with open(os.environ["DOCS_TEST_PORT_FILE"], "w") as f:
            f.write(str(self.getsockname()[1]))
    return r


socket.socket.listen = _listen_and_say
g = {"__name__": "__main__"}
for path in sys.argv[1:]:
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), g)
'''

JS_PRELUDE = r'''
const http = require('node:http');
globalThis.callTheModel = async () => ({ inputTokens: 300, outputTokens: 200 });
globalThis.fetchIt = async () => {};
globalThis.store = async () => {};
globalThis.fetch = async () => new Response(
  JSON.stringify({ choices: [], usage: { prompt_tokens: 12, completion_tokens: 34 } }),
  { status: 200, headers: { 'content-type': 'application/json' } });
const listen = http.Server.prototype.listen;
http.Server.prototype.listen = function (...args) {
  this.once('listening', () => require('node:fs').writeFileSync(
    process.env.DOCS_TEST_PORT_FILE, String(this.address().port)));
  return listen.call(this, 0, '127.0.0.1');
};
'''

C_WRAP = """#include <admit.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
	struct admit *a = admit_connect(NULL);
	struct admit_result r;

	if (a == NULL) {
		perror("admitd");
		return 69;
	}
	{
%s
	}
	admit_close(a);
	return 0;
}
"""


def read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


class FakeUpstream:
    """The model API a gateway block calls: 200 and an OpenAI-style usage (no network here)."""

    def __enter__(self):
        import http.server
        import threading

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length") or 0))
                body = json.dumps({"choices": [], "usage": {"prompt_tokens": 12,
                                                            "completion_tokens": 34}}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = "http://127.0.0.1:%d/v1/chat" % self.srv.server_address[1]
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.srv.shutdown()
        self.srv.server_close()


class Block:
    def __init__(self, path, line, tag, text, markers):
        self.path, self.line, self.tag, self.text, self.markers = path, line, tag, text, markers

    @property
    def where(self):
        return "%s:%d" % (self.path, self.line)

    @property
    def lang(self):
        return LANGS.get(self.tag)

    def marker(self, name):
        return self.markers.get(name)


def blocks_of(path):
    """Every fenced block of the file, with the markers right above it."""
    with open(os.path.join(REPO, path)) as f:
        lines = f.read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        indent, tag, start = m.group(1), m.group(2), i
        markers = {}
        j = i - 1
        while j >= 0 and (lines[j].strip() == "" and j == i - 1 or lines[j].strip().startswith("<!--")):
            mm = re.match(r"^\s*<!--\s*([\w-]+):\s*(.*?)\s*-->\s*$", lines[j])
            if mm:
                markers[mm.group(1)] = mm.group(2)
            j -= 1
        i += 1
        body = []
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        if i >= len(lines):
            raise AssertionError("%s:%d: a fence that never closes" % (path, start + 1))
        i += 1
        out.append(Block(path, start + 1, tag, "\n".join(body) + "\n", markers))
    return out


def all_blocks():
    return [b for p in DOC_FILES for b in blocks_of(p)]


def transcript(text):
    """[(command, [expected lines])] of a `$ ` transcript."""
    steps = []
    lines = text.rstrip("\n").split("\n")
    k = 0
    while k < len(lines):
        line = lines[k]
        k += 1
        if line.startswith("$ "):
            cmd = line[2:]
            while cmd.endswith("\\") and k < len(lines):
                cmd += "\n" + lines[k]
                k += 1
            hd = re.search(r"<<-?'?(\w+)'?", cmd)
            if hd:
                while k < len(lines):
                    cmd += "\n" + lines[k]
                    k += 1
                    if lines[k - 1] == hd.group(1):
                        break
            steps.append([cmd, []])
        elif steps:
            steps[-1][1].append(line)
        else:
            raise AssertionError("output before the first command: %r" % line)
    return steps


def unsafe(block):
    """What a block shows that the test must not run (NOT_RUN's patterns), or None."""
    for why, pat in NOT_RUN.items():
        m = re.search(pat, block.text)
        if m:
            return "%r (%s)" % (m.group(0), why)
    return None


def starts_own_daemon(text):
    return re.search(r"^\s*(\$ )?daemon/admitd\b.*&", text, re.M) is not None


def sessions(blocks):
    """Runnable blocks grouped: [(key, [blocks])] in file order."""
    groups = {}
    order = []
    for b in blocks:
        name = b.marker("session")
        key = (b.path, name) if name else (b.path, b.line)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(b)
    return [(k, groups[k]) for k in order]


def conf_for(group):
    confs = {b.marker("conf") for b in group if b.marker("conf")}
    if len(confs) > 1:
        raise AssertionError("%s: one session, several confs: %s" % (group[0].where, confs))
    return confs.pop() if confs else DEFAULT_CONF


class Daemon:
    """The real admitd on the conf a block names, or none when the block starts its own."""

    def __init__(self, conf_path):
        with open(os.path.join(REPO, conf_path)) as f:
            self.conf = f.read()
        m = re.search(r"^socket\s*=\s*(\S+)", self.conf, re.M)
        self.conf_socket = m.group(1) if m else None
        self.d = Admitd(self.conf, args=["--metrics", "127.0.0.1:0"])

    def __enter__(self):
        self.d.__enter__()
        return self

    def __exit__(self, *exc):
        return self.d.__exit__(*exc)

    def status(self):
        with self.d.connect() as c:
            return c.request({"op": "status"})

    def admitted(self):
        return sum(s.get("admitted", 0) for s in self.status()["scopes"].values())

    def leases(self):
        return self.status()["leases"]

    def subst(self, text):
        return text.replace(self.conf_socket, self.d.sock_path) if self.conf_socket else text


def run_group(cmd, cwd, env, timeout=RUN_TIMEOUT, stdin=None):
    """Run cmd in a process group of its own; kill the group after (background jobs too)."""
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError("%s: did not end within %d s\n%s\n%s" % (cmd, timeout, out, err))
    finally:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    return p.returncode, out, err


def base_env(tmp, sock=None):
    env = dict(os.environ)
    env.pop("ADMITD_REDIS", None)
    env["PATH"] = "%s:%s:%s" % (os.path.join(REPO, "client"), os.path.dirname(admitd_bin()),
                                env.get("PATH", ""))
    env["PYTHONPATH"] = os.path.join(REPO, "client/python")
    nm = os.path.join(tmp, "node_modules")
    if not os.path.exists(nm):
        os.makedirs(nm)
        os.symlink(os.path.join(REPO, "client/node"), os.path.join(nm, "admitd-client"))
    env["NODE_PATH"] = nm
    if sock:
        env["ADMITD_SOCKET"] = sock
    else:
        env.pop("ADMITD_SOCKET", None)
    return env


class DocsBlocksTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.blocks = all_blocks()

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="admitd-docs-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- the classification ------------------------------------------------

    def test_every_block_is_known(self):
        self.assertGreater(len(self.blocks), 30)
        bad = []
        for b in self.blocks:
            if b.lang is None:
                bad.append("%s: untagged or unknown tag %r" % (b.where, b.tag))
            why = b.marker("not-run")
            if why is not None:
                if why not in NOT_RUN:
                    bad.append("%s: not-run reason %r is none of %s" % (b.where, why, list(NOT_RUN)))
                elif not re.search(NOT_RUN[why], b.text):
                    bad.append("%s: not-run %r, but the block shows no %s"
                               % (b.where, why, NOT_RUN[why]))
            elif b.lang == "sh" and unsafe(b):
                bad.append("%s: shows %s: it needs <!-- not-run: REASON -->" % (b.where, unsafe(b)))
            if b.lang == "text" and not re.match(r"^(output|tree|usage \S+.*)$",
                                                 b.marker("text") or ""):
                bad.append("%s: a text block says what it is: <!-- text: output|tree|usage CMD -->"
                           % b.where)
        self.assertEqual(bad, [])

    def runnable(self, langs):
        # A block that installs packages or runs a suite is never run unmarked:
        # test_every_block_is_known fails on it instead.
        return [b for b in self.blocks if b.lang in langs and b.marker("not-run") is None
                and not unsafe(b)]

    # -- checked, not run --------------------------------------------------

    def test_ini_blocks_are_confs_admitd_accepts(self):
        blocks = self.runnable({"ini"})
        self.assertTrue(blocks)
        for b in blocks:
            with self.subTest(b.where):
                p = os.path.join(self.tmp, "block.conf")
                with open(p, "w") as f:
                    f.write(b.text)
                r = subprocess.run([admitd_bin(), "-t", "-c", p], capture_output=True, text=True,
                                   timeout=30)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_yaml_and_json_blocks_parse(self):
        for b in self.runnable({"yaml", "json"}):
            with self.subTest(b.where):
                if b.lang == "json":
                    json.loads(b.text)
                else:
                    try:
                        import yaml
                    except ImportError:
                        self.skipTest("python3-yaml is not installed")
                    self.assertIsNotNone(yaml.safe_load(b.text))
                    # The scrape target is the example conf's metrics address.
                    with open(os.path.join(REPO, DEFAULT_CONF)) as f:
                        addr = re.search(r"^metrics = (\S+)", f.read(), re.M).group(1)
                    if "scrape_configs" in b.text:
                        self.assertIn(addr, b.text)

    def test_promql_blocks_are_valid(self):
        blocks = self.runnable({"promql"})
        self.assertTrue(blocks)
        if shutil.which("promtool") is None:
            self.skipTest("promtool is not installed (Debian: prometheus)")
        for b in blocks:
            with self.subTest(b.where):
                exprs = [x for x in b.text.splitlines() if x.strip()]
                rules = {"groups": [{"name": "docs", "rules": [
                    {"record": "docs:expr%d" % i, "expr": e} for i, e in enumerate(exprs)]}]}
                p = os.path.join(self.tmp, "rules.json")
                with open(p, "w") as f:
                    json.dump(rules, f)
                r = subprocess.run(["promtool", "check", "rules", p], capture_output=True,
                                   text=True, timeout=30)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_text_blocks(self):
        for b in self.runnable({"text"}):
            kind = b.marker("text") or ""
            with self.subTest(b.where, kind=kind):
                if kind == "tree":
                    dirs = re.findall(r"^([\w./-]+/)\s", b.text, re.M)
                    self.assertTrue(dirs)
                    for d in dirs:
                        self.assertTrue(os.path.isdir(os.path.join(REPO, d)), d)
                elif kind.startswith("usage "):
                    cmd = kind.split(None, 1)[1].split()
                    cmd[0] = os.path.join(REPO, cmd[0])
                    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
                    self.assertEqual(r.returncode, 0, r.stderr)
                    want = [x.strip() for x in r.stdout.splitlines() if x.startswith("  admit ")]
                    self.assertTrue(want)
                    self.assertEqual(b.text.splitlines(), want)

    # -- run ----------------------------------------------------------------

    def test_shell_blocks(self):
        self.run_sessions({"sh"})

    def test_python_blocks(self):
        self.run_sessions({"python"})

    def test_node_blocks(self):
        if shutil.which("node") is None:
            self.skipTest("node is not installed (Debian: nodejs)")
        self.run_sessions({"js"})

    def test_c_blocks(self):
        self.run_sessions({"c"})

    def run_sessions(self, langs):
        groups = sessions(self.runnable(langs))
        self.assertTrue(groups)
        for key, group in groups:
            with self.subTest(group[0].where, blocks=len(group)):
                text = "".join(b.text for b in group)
                if group[0].lang == "sh" and starts_own_daemon(text):
                    self.run_sh(group, None)
                    continue
                with Daemon(conf_for(group)) as d:
                    before = d.admitted()
                    getattr(self, "run_" + group[0].lang)(group, d)
                    if re.search(ACQUIRES, text):
                        self.assertGreater(d.admitted(), before, "the block admitted nothing")
                    self.assertEqual(d.leases(), 0, "a lease was left held")

    def run_sh(self, group, d):
        env = base_env(self.tmp, d.d.sock_path if d else None)
        trans = [b for b in group if b.text.startswith("$ ")]
        if trans and len(trans) != len(group):
            self.fail("%s: a session is all transcripts or all scripts" % group[0].where)
        if not trans:
            script = "".join(b.text for b in group)
            if d:
                script = d.subst(script)
            rc, out, err = run_group(["bash", "-e", "-o", "pipefail", "-c", script], REPO, env)
            self.assertEqual(rc, 0, "exit %d\n--- stdout\n%s--- stderr\n%s" % (rc, out, err))
            return
        steps = [s for b in group for s in transcript(b.text)]
        mark = "@@docs-command-done@@"
        script = "exec 2>&1\n" + "".join(
            "%s\necho %s\n" % (d.subst(cmd) if d else cmd, mark) for cmd, _ in steps)
        rc, out, err = run_group(["bash", "-c", script], REPO, env)
        outputs = out.split(mark + "\n")
        self.assertEqual((rc, err, outputs[-1]), (0, "", ""), out)
        self.assertEqual(len(outputs) - 1, len(steps), out)
        for (cmd, want), got in zip(steps, outputs):
            got = got.splitlines()
            self.assertEqual(len(got), len(want), (cmd, got, want))
            for w, g in zip(want, got):
                # Columns are aligned by the width of the numbers: a run of
                # blanks matches any run of blanks.
                self.assertRegex(g, "^%s$" % re.sub(" +", " +", line_pattern(w)), cmd)

    def run_python(self, group, d):
        files = []
        for i, b in enumerate(group):
            p = os.path.join(self.tmp, "block%d.py" % i)
            with open(p, "w") as f:
                f.write(b.text + ("\n" + b.marker("then") + "\n" if b.marker("then") else ""))
            files.append(p)
        runner = os.path.join(self.tmp, "runner.py")
        with open(runner, "w") as f:
            f.write(PY_RUNNER)
        self.run_program(["python3", runner] + files, d, "".join(b.text for b in group))

    def run_js(self, group, d):
        self.assertEqual(len(group), 1, "one Node block a run")
        b = group[0]
        p = os.path.join(self.tmp, "block.js")
        with open(p, "w") as f:
            f.write(b.text + ("\n" + b.marker("then") + "\n" if b.marker("then") else ""))
        pre = os.path.join(self.tmp, "prelude.js")
        with open(pre, "w") as f:
            f.write(JS_PRELUDE)
        self.run_program(["node", "--require", pre, p], d, b.text)

    def run_program(self, cmd, d, code):
        """Run a Python or Node block: it must exit 0 with nothing on stderr, or
        listen (a server: the prelude writes its port) and answer a POST 200."""
        env = base_env(self.tmp, d.d.sock_path)
        port_file = os.path.join(self.tmp, "port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        env["DOCS_TEST_PORT_FILE"] = port_file
        env["PORT"] = str(free_tcp_port())
        with FakeUpstream() as up:
            env["UPSTREAM"] = up.url
            proc = subprocess.Popen(cmd, cwd=self.tmp, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
            try:
                deadline = time.monotonic() + RUN_TIMEOUT
                while not read_text(port_file) and proc.poll() is None:
                    self.assertLess(time.monotonic(), deadline, "neither ended nor listened")
                    time.sleep(0.05)
                if not read_text(port_file):
                    out, err = proc.communicate()
                    self.assertEqual((proc.returncode, err), (0, ""), out)
                    return
                port = int(read_text(port_file))
                req = urllib.request.Request("http://127.0.0.1:%d/v1/chat" % port, method="POST",
                                             data=b'{"model":"gpt-4o","messages":[]}',
                                             headers={"content-type": "application/json"})
                with urllib.request.urlopen(req, timeout=20) as resp:
                    self.assertEqual(resp.status, 200)
                    self.assertIn("usage", json.loads(resp.read()))
                    if "x-ratelimit-" in code:  # what the block says it sends
                        for h in ("limit", "remaining", "reset"):
                            for m in ("requests", "tokens"):
                                v = resp.headers.get("x-ratelimit-%s-%s" % (h, m))
                                self.assertRegex(v or "", r"^\d+(\.\d+)?(ms|s)?$", (h, m))
                deadline = time.monotonic() + 10
                while d.leases() and time.monotonic() < deadline:
                    time.sleep(0.05)
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()

    def run_c(self, group, d):
        self.assertEqual(len(group), 1, "one C block a run")
        src = group[0].text
        if not re.search(r"\bint main\(", src):
            src = C_WRAP % src
        p = os.path.join(self.tmp, "block.c")
        exe = os.path.join(self.tmp, "block")
        with open(p, "w") as f:
            f.write(src)
        # libadmit.a of a SANITIZE=1 build needs the sanitizers' runtime
        san = ["-fsanitize=address,undefined"] if harness._asan_build() else []
        cc = subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror"] + san +
                            ["-I" + os.path.join(REPO, "client"), "-I" + os.path.join(REPO, "proto"),
                             "-o", exe, p, os.path.join(REPO, "client/libadmit.a"), "-ljansson", "-lm"],
                            capture_output=True, text=True, timeout=60)
        self.assertEqual(cc.returncode, 0, cc.stderr)
        rc, out, err = run_group([exe], self.tmp, base_env(self.tmp, d.d.sock_path))
        self.assertEqual((rc, err), (0, ""), out)


class FiguresTest(unittest.TestCase):
    """One source for each figure: what a key costs is measured in docs/bench.md."""

    FORMULA = r"(\d+) \+ (?:([\d.]+) [×x] )?L \+ ([\d.]+) [×x] R"

    def test_key_cost_formula_has_one_source(self):
        with open(os.path.join(REPO, "docs/bench.md")) as f:
            src = f.read().split("### Memory per key and per lease", 1)[1].split("\n### ", 1)[0]
        src = re.sub(r"\s*\n\s*", " ", src)
        measured = re.findall(self.FORMULA, src)
        self.assertEqual(len(measured), 2, src)  # in use, RSS
        lease = re.findall(r"detached lease instead \([^)]*\): (\d+) bytes", src)
        self.assertEqual(len(lease), 1, src)
        for path in ("docs/conf-keys.md", "conf/admitd.conf", "conf/kubernetes-sidecar.yaml"):
            with open(os.path.join(REPO, path)) as f:
                text = re.sub(r"\s*\n[#;]?\s*", " ", f.read())
            with self.subTest(path):
                self.assertTrue("Memory per key and per lease" in text, "%s cites docs/bench.md" % path)
                found = re.findall(self.FORMULA, text)
                self.assertTrue(found)
                for x in found:
                    self.assertIn(x, measured, "%s gives %s" % (path, x))
                leases = re.findall(r"(\d+) (?:bytes )?a detached lease", text)
                self.assertEqual(leases, lease, path)

    def test_readme_costs_are_the_measured_run(self):
        # The README's cost table quotes one run of docs/bench.md, the one
        # the picture draws (test_bench_plot.SECTION): every figure of it is
        # in that run's section.
        from .test_bench_plot import SECTION
        with open(os.path.join(REPO, "README.md")) as f:
            costs = f.read().split("## What it costs", 1)[1].split("\n## ", 1)[0]
        with open(os.path.join(REPO, "docs/bench.md")) as f:
            bench = f.read()
        m = re.search(r"^## %s.*$" % re.escape(SECTION), bench, re.M)
        self.assertIsNotNone(m)
        run = bench[m.end():].split("\n## ", 1)[0]
        have = {x.rstrip(".").replace(",", "") for x in re.findall(r"\d[\d,]*\.?\d*", run)}
        quoted = re.findall(r"(?<![\w.])(\d{1,3}(?:,\d{3})+)(?![\d,])", costs)
        quoted += re.findall(r"(?<![\w.])(\d+\.\d+) ?(?:µs|x|Redis calls)", costs)
        self.assertGreater(len(quoted), 15)
        self.assertEqual([q for q in quoted if q.replace(",", "") not in have], [])

    def test_redis_ops_listed(self):
        # The op label of admitd_backend_errors_total and admitd_redis_calls_total
        # is every Redis call the daemon makes, as status's "errors" names them.
        r = RedisServerOps()
        with r:
            names = r.ops()
        self.assertIn("give_back", names)
        with open(os.path.join(REPO, "docs/metrics.md")) as f:
            row = next(x for x in f if x.startswith("| `admitd_backend_errors_total`"))
        listed = re.findall(r"`(\w+)`", row.split("failed Redis calls:", 1)[1].split("(zeros", 1)[0])
        self.assertEqual(sorted(listed), sorted(names))


class RedisServerOps:
    """The real daemon on a real Redis: the names of its Redis calls (status)."""

    def __enter__(self):
        from .harness import RedisServer
        self.redis = RedisServer()
        self.redis.__enter__()
        self.d = Admitd("[scope s]\nrule = requests 10/1s\n", redis_url=self.redis.url)
        self.d.__enter__()
        return self

    def __exit__(self, *exc):
        self.d.__exit__(*exc)
        return self.redis.__exit__(*exc)

    def ops(self):
        with self.d.connect() as c:
            st = c.request({"op": "status"})
        return list(st["redis"]["errors"])


if __name__ == "__main__":
    unittest.main()
