"""support.py - the real admitd for the Python client's tests.

Owns: finding and loading the repo's integration harness
(tests/integ/harness.py: its Admitd starts the real binary from ADMITD_BIN
or ./daemon/admitd on a temp socket and fails the test on a sanitizer
report), the conf every client test runs against, and DaemonCase, a
TestCase that starts one daemon per class (ClientCase and AsyncClientCase
add a fresh client per test).
"""

import importlib.util
import os
import sys
import unittest

import admit

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def load_by_path(name, relpath):
    """Import the repo file relpath as module name. Shared test code of the
    repo is loaded this way because this suite's package is also "tests"."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, relpath))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_integ(module):
    """Import tests/integ/MODULE.py as admitd_integ.MODULE: the folder is
    loaded as a package of another name (this suite's package is also
    "tests"), so the harness's parts find each other."""
    if "admitd_integ" not in sys.modules:
        folder = os.path.join(REPO, "tests", "integ")
        spec = importlib.util.spec_from_file_location(
            "admitd_integ", os.path.join(folder, "__init__.py"),
            submodule_search_locations=[folder])
        pkg = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = pkg
        spec.loader.exec_module(pkg)
    return importlib.import_module("admitd_integ." + module)


harness = load_integ("harness")

# One scope per behaviour a client test needs; keys are per test, so tests
# sharing a daemon never see each other's state.
CONF = """
[scope one]
max_concurrent = 1
timeout = 2s

[scope two]
max_concurrent = 2
timeout = 10s

[scope narrow]
max_concurrent = 1
max_waiters = 1
timeout = 5s

[scope quota]
quota = 1/1h
timeout = 1s

[scope pen]
max_concurrent = 100
timeout = 1s

[scope tok]
rule = tokens.input token-bucket 100/1h
; output is metered too (a release may name only metered tokens), loosely
rule = tokens.output token-bucket 1000000/1h
timeout = 1s

[scope cost]
rule = requests token-bucket 2/1h
timeout = 1s

[scope cls]
rule r = requests fixed-window 2/1h
class high = r
class low = r floor=1
default_class = high
timeout = 1s

[scope ovr]
; per-key overrides: tighten freely, loosen up to 2x (rule 0: at most 10)
rule = requests fixed-window 5/1h
override_max = 2
key = k
timeout = 1s
"""

SCOPES = ("one", "two", "narrow", "quota", "pen", "tok", "cost", "cls", "ovr")

# Generous bounds for "answered at once" on a loaded or sanitized box.
PROMPT = 1.0 if harness.VALGRIND else 0.5


def unreachable_calls(client):
    """One call of each API method (sync, or coroutines for AsyncClient):
    with no daemon each must raise Unavailable."""
    return [
        lambda: client.ping(),
        lambda: client.status(),
        lambda: client.acquire("one", "k", timeout=1),
        lambda: client.try_acquire("one", "k"),
        lambda: client.release("lease-x"),
        lambda: client.penalize("one", "k", retry_after=1),
        lambda: client.override("one", "k", ttl=1, rules={"0": 1}),
    ]


def check_binary():
    path = harness.admitd_bin()
    if not os.access(path, os.X_OK):
        raise AssertionError(
            "no admitd binary at %s: build it (make daemon/admitd) or set ADMITD_BIN" % path
        )


class DaemonCase(unittest.TestCase):
    """One real admitd (CONF) for the whole class, at cls.daemon.sock_path."""

    conf = CONF

    @classmethod
    def setUpClass(cls):
        check_binary()
        cls.daemon = harness.Admitd(cls.conf).start()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.cleanup()

    def key(self, suffix=""):
        """A key no other test uses."""
        return self.id().rsplit(".", 1)[-1] + suffix


class AsyncDaemonCase(unittest.IsolatedAsyncioTestCase):
    """DaemonCase for coroutine tests."""

    conf = CONF
    setUpClass = DaemonCase.__dict__["setUpClass"]
    tearDownClass = DaemonCase.__dict__["tearDownClass"]
    key = DaemonCase.key


class ClientCase(DaemonCase):
    """DaemonCase with a fresh admit.Client on the daemon as self.client."""

    def setUp(self):
        self.client = admit.Client(self.daemon.sock_path)

    def tearDown(self):
        self.client.close()


class AsyncClientCase(AsyncDaemonCase):
    """AsyncDaemonCase with a fresh admit.AsyncClient as self.client."""

    async def asyncSetUp(self):
        self.client = admit.AsyncClient(self.daemon.sock_path)

    async def asyncTearDown(self):
        await self.client.close()
