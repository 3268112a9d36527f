"""redis_cost.py - what one admission costs Redis, in instructions.

Owns: the benchmark's repeatable Redis figure. Timed Redis CPU per admission
(run.py's column) moves with the machine and its load; the instructions
redis-server executes per admission (valgrind --tool=callgrind) do not. Each
row runs a fresh redis-server under callgrind, loads every script, sends a
fixed number of admissions pipelined 16 deep over 64 distinct keys, and shuts
down; a run that loads the same and sends nothing is subtracted, so start-up,
loading and shutdown cancel out.

Rows:
  bucket.lua      the plain token bucket a user would write (one EVALSHA an
                  admission; the ceiling of run.py)
  rlf             rate-limiter-flexible's own script, read at run time from
                  the installed package (one EVALSHA an admission; skipped
                  when the package is not installed)
  admitd alone    the acquire admitd sends for one admission of the
                  throughput scope, as captured from the daemon (one FCALL)
  admitd batch N  N such acquires of different keys in one call, as the
                  daemon sends what one loop pass queued on one connection
  ... 4 ahead     the same, each booking 4 units ahead for keys taken fast
                  (redis_book_ahead): 5 admissions per acquire, the daemon
                  hands out the other 4 with no call
The library is the daemon's own (FUNCTION DUMP of what it loaded).
"""

import os
import re
import shutil
import socket
import subprocess
import tempfile
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUCKET_LUA = os.path.join(HERE, "bucket.lua")
RLF_JS = os.path.join(HERE, "peers", "node_modules", "rate-limiter-flexible", "lib",
                      "RateLimiterRedis.js")
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from tests.integ.harness import RespConn, resp_encode  # noqa: E402

KEYS = 64
DEPTH = 16


def _connect(path):
    """A RespConn to the Redis at the Unix socket path."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(600)
    try:
        s.connect(path)
    except OSError:
        s.close()
        raise
    return RespConn(s)


def function_dump(sock_path):
    """FUNCTION DUMP of the Redis at sock_path (the library a daemon loaded)."""
    c = _connect(sock_path)
    try:
        return c.command("FUNCTION", "DUMP")
    finally:
        c.close()


def rlf_script():
    """rate-limiter-flexible's increment script, from the installed package."""
    try:
        with open(RLF_JS) as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"const incrTtlLuaScript = `(.*?)`;", text, re.S)
    if not m:
        return None
    return m.group(1).replace("\\\n", "\n")


def callgrind_total(path):
    """The instruction total of a callgrind output file."""
    with open(path) as f:
        for line in f:
            m = re.match(r"^(?:summary|totals):\s+(\d+)", line)
            if m:
                return int(m.group(1))
    raise AssertionError("no totals in %s" % path)


def _run(parent, library_dump, scripts, cmds):
    """Instructions of one redis-server under callgrind that loads the
    library and scripts, then serves cmds (a list of RESP commands)."""
    d = tempfile.mkdtemp(prefix="redis-cost-", dir=parent)
    sock = os.path.join(d, "r.sock")
    out = os.path.join(d, "callgrind.out")
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, "redis-server",
         "--save", "", "--appendonly", "no", "--dir", d, "--unixsocket", sock, "--port", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        c = None
        while c is None:
            if proc.poll() is not None:
                raise AssertionError("redis-server under callgrind exited %s" % proc.returncode)
            try:
                c = _connect(sock)
                c.command("PING")
            except OSError:
                c = None
                if time.monotonic() > deadline:
                    raise AssertionError("redis-server under callgrind did not start")
                time.sleep(0.2)
        c.command("FUNCTION", "RESTORE", library_dump, "REPLACE")
        shas = [c.command("SCRIPT", "LOAD", s) for s in scripts]
        last = c.pipeline(cmds, DEPTH) if cmds else None
        try:
            c.command("SHUTDOWN", "NOSAVE")
        except (ConnectionError, OSError):
            pass
        proc.wait(120)
        return callgrind_total(out), shas, last
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(d, ignore_errors=True)


def _batch(lone, n, key_of):
    """lone: the captured '=' call of one plain acquire, as
    [FCALL, function, 1, key, '=', '1', 'p', kind, amount, window, burst,
    floor, code, not_after, '1', cost] (an 'a' group: cost, extra, give at
    the end); the call of n such acquires on the keys key_of(0..n-1), one
    group, as rb_xb_send makes it."""
    head = lone[4:14]
    return ([lone[0], lone[1], str(n)] + [key_of(i) for i in range(n)] + head +
            [str(n)] + lone[15:] * n)


def _ahead(lone, k):
    """lone as an 'a' group booking k units ahead: k + 1 admissions a call."""
    return lone[:6] + ["a"] + lone[7:16] + [str(k), "0"]


def run(parent, library_dump, lone, admissions=4800):
    """The rows (see above): instructions per admission. lone: the captured
    argv of one plain acquire ('=' form)."""
    if shutil.which("valgrind") is None:
        return {"skipped": "skipped: no valgrind"}
    if lone and lone[0] != "FCALL":
        return {"skipped": "skipped: the daemon sends %s (redis_functions = no); the "
                "instructions are counted for its function library only" % lone[0]}
    if lone[4:5] != ["="] or (lone[6:7], len(lone)) not in ((["p"], 16), (["a"], 18)):
        return {"skipped": "skipped: the captured acquire is not a plain one: %r" % lone[:8]}
    with open(BUCKET_LUA) as f:
        bucket = f.read()
    rlf = rlf_script()
    scripts = [bucket] + ([rlf] if rlf else [])
    base, shas, _ = _run(parent, library_dump, scripts, [])
    tag = lone[3]
    m = re.match(r"^(.*)\{([^:}]+):[^}]*\}(.*)$", tag)
    if not m:
        return {"skipped": "skipped: no hash tag in %r" % tag}

    def key(i):
        return "%s{%s:c%d}%s" % (m.group(1), m.group(2), i % KEYS, m.group(3))

    rows = {}
    plan = [("bucket.lua", 1, lambda i: ["EVALSHA", shas[0], "1", "bench:c%d" % (i % KEYS),
                                         "1000000", "1000000", "1"])]
    if rlf:
        plan.append(("rlf", 1, lambda i: ["EVALSHA", shas[1], "1", "rlf:c%d" % (i % KEYS),
                                          "1", "1"]))
    plan.append(("admitd alone", 1, lambda i: lone[:3] + [key(i)] + lone[4:]))
    for n in (8, 32):
        plan.append(("admitd batch %d" % n, n,
                     lambda i, n=n: _batch(lone, n, lambda j: key(i * n + j))))
    # What a key taken fast costs (an 'a' group, whichever the capture was:
    # a key's first call books nothing ahead and goes as 'p'): each call
    # books 4 units ahead, which the daemon hands out with no call.
    plan.append(("admitd alone, 4 ahead", 5,
                 lambda i: lone[:3] + [key(i)] + _ahead(lone, 4)[4:]))
    plan.append(("admitd batch 32, 4 ahead", 32 * 5,
                 lambda i: _batch(_ahead(lone, 4), 32, lambda j: key(i * 32 + j))))
    for name, per, make in plan:
        calls = admissions // per
        total, _, last = _run(parent, library_dump, scripts,
                              [resp_encode(make(i)) for i in range(calls)])
        rows[name] = {"admissions": calls * per, "calls": calls,
                      "instructions_per_admission": (total - base) / (calls * per),
                      "last_reply": repr(last)[:120]}
    out = {"rows": rows, "baseline_instructions": base, "keys": KEYS, "depth": DEPTH}
    if not rlf:
        out["rlf"] = "skipped: rate-limiter-flexible is not installed (npm ci in peers/)"
    return out


def lines(res):
    """The report's lines."""
    if res is None:
        return []
    if "skipped" in res:
        return ["redis instructions per admission: %s" % res["skipped"]]
    rows = res["rows"]
    out = ["redis instructions per admission (callgrind, pipelined %d deep, %d keys):"
           % (res["depth"], res["keys"])]
    ref = rows.get("rlf", {}).get("instructions_per_admission")
    bucket = rows["bucket.lua"]["instructions_per_admission"]
    for name, r in rows.items():
        ipa = r["instructions_per_admission"]
        rel = ["%.2fx bucket.lua" % (bucket / ipa)]
        if ref:
            rel.append("%.2fx rlf" % (ref / ipa))
        out.append("  %-26s %8.0f   (%s; higher is cheaper)" % (name, ipa, ", ".join(rel)))
    if "rlf" in res:
        out.append("  rlf: %s" % res["rlf"])
    return out
