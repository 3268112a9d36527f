"""bench_env.py - where the benchmark's things are and what it runs on.

Owns: the paths (the daemon, the loadgen, the echo, bucket.lua, the peers,
results/ and docs/bench.png, overridable from the environment), the scopes
of the runs (tb: the throughput scope; norel, books and fifo: the counts'),
the run constants (connections, windows, timeouts), log, and the CPU time
of a process and of this one's children (/proc).
"""

import os
import resource
import sys


HERE = os.path.dirname(os.path.abspath(__file__))


REPO = os.path.dirname(os.path.dirname(HERE))


ADMITD = os.environ.get("ADMITD_BIN") or os.path.join(REPO, "daemon", "admitd")


LOADGEN = os.environ.get("ADMITD_LOADGEN") or os.path.join(HERE, "loadgen")


ECHO = os.path.join(HERE, "echo")


BUCKET_LUA = os.path.join(HERE, "bucket.lua")


PEERS = os.path.join(HERE, "peers")


# Debian's python3-limits lives in /usr/bin/python3's dist-packages, which a
# pyenv `python3` on PATH does not see.
LIMITS_PYTHON = os.environ.get("LIMITS_PYTHON") or (
    "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable)


RESULTS_DIR = os.path.join(HERE, "results")


RESULTS = os.path.join(RESULTS_DIR, "latest.json")


DOCS_PNG = os.path.join(REPO, "docs", "bench.png")


# The throughput scope: one token bucket so large that every call admits.
TB_SCOPE = """
[scope tb]
rule = requests token-bucket 1000000/1s
timeout = 5s
"""


TB_RATE = 1000000


def with_admitd(conf, *lines):
    """conf with lines added to its [admitd] section (made when it has none):
    an INI file takes one [admitd] section."""
    head = "[admitd]\n"
    add = "".join(line + "\n" for line in lines)
    if conf.startswith(head):
        return head + add + conf[len(head):]
    return head + add + "\n" + conf


NOREL_SCOPE = """
[scope norel]
rule = requests token-bucket 1000000000/1s
"""


BOOKS_SCOPE = """
[scope books]
rule = requests token-bucket 1000000000/1s
rule = concurrency 1000000
"""


# redis-benchmark -r: __rand_int__ becomes 12 digits below this. It is read
# with atoi: 10**12 overflows to 0 and every call would get the same id.
RAND_KEYSPACE = 10 ** 9


FIFO_RETRY_MS = 50


FIFO_SCOPE = """
[scope fifo]
min_delay = 100ms
concurrency_retry = %dms
timeout = 30s
""" % FIFO_RETRY_MS


FIFO_WAITERS = 100


FIFO_WINDOW_S = 2.0


CEIL_CONNS = 64      # redis-benchmark clients


ECHO_CONNS = 16


# The key-space rows: each connection (or peer loop) cycles through this
# many keys of its own (loadgen -K; rlf.js --keys keyspace), so 64
# connections take 64,000 keys, each coming back every second or two: too
# late for units booked ahead, as a fleet's hosts or tenants would.
KEYSPACE_PER_CONN = 1000


# A key-space row whose admissions came from units booked ahead more often
# than this is not measuring cold keys: a problem of the run.
KEYSPACE_MAX_AHEAD = 0.05


CDF_CONNS = 16       # the latency distribution in the picture


LG_TIMEOUT_MS = 5000


def log(msg):
    sys.stderr.write("bench: %s\n" % msg)
    sys.stderr.flush()


def proc_cpu_s(pid):
    """utime + stime of a live process, seconds (/proc/PID/stat fields 14, 15)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_s():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime
