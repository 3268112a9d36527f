"""soak.py - a long mixed-load run that watches for slow leaks: not part of
`make test` or CI (it takes ten minutes), run by `make soak`.

Owns: the soak's conf, its load (client threads), the Redis restart halfway
through, the sampling of both daemons and of Redis every SAMPLE_S seconds,
the check that every resource comes back to its starting band once the load
has stopped and every TTL has passed, the table printed at the end and
tests/bench/results/soak.json. Processes come from harness.py (RedisServer,
Admitd, Conn). Stdlib only.

One private redis-server, two admitd processes on it. Client threads send a
realistic mix: acquires (tokens with `reserve`, classes, several targets),
tries, releases with token counts, penalize, reset, inspect, status and ping,
on keys drawn mostly from a large space (so keys are made and swept all the
time) and partly from a few hot keys (so limits refuse). Detached leases are
released through the *other* daemon, and a few are dropped to expire at
lease_ttl. Churn threads open and close connections all the time (sometimes
leaving mid-wait or holding a lease); a few idle connections are held for
the whole run. Halfway through, Redis is stopped, kept down DOWN_S seconds,
and started again empty.

Sampled per daemon: RSS (VmRSS), open fds, the keys and leases its status
counts (summed over scopes), its client connections and backend; for Redis:
DBSIZE and used_memory. The band, checked after the load has stopped and
the longest TTL of the conf (MAX_TTL_S) has passed:

  fds, connections   exactly their starting values (the idle connections
                     and the churn are gone; Redis is connected again)
  keys, leases       0 (the daemon started with none)
  Redis keys         at most the starting count (the pods heartbeat set)
  RSS                at most start + RSS_ALLOWANCE_KB (malloc keeps some
                     pages it no longer uses; a leak grows past that)
  Redis used_memory  reported, not checked (Redis restarted empty)

Exit 1 on a band violation, a malformed or unexpected reply, a dead daemon,
or a daemon exit other than 0 or a sanitizer/assert report in its log
(Admitd.stop() checks both).

    ADMITD_BIN=$PWD/daemon/admitd python3 -m tests.integ.soak [SECONDS]
    (SECONDS: the load's length; default $SOAK_SECONDS, else 600)
"""

import json
import os
import random
import sys
import threading
import time

from .harness import REPO, Admitd, Conn, RedisServer

CONF = """
[admitd]
redis_timeout = 250ms
client_write_timeout = 5s

[scope bucket]
rule = requests token-bucket 50/1s burst=100
rule = requests fixed-window 300/10s
jitter = 0.1
lease_ttl = 5s
timeout = 500ms

[scope cc]
cluster_concurrency = 4
min_delay = 10ms
lease_ttl = 5s
timeout = 300ms

[scope quota]
quota = 10/2s
max_concurrent = 3
lease_ttl = 5s
timeout = 200ms

[scope llm]
rule = tokens.output token-bucket 20000/1s
rule = tokens fixed-window 100000/10s
rule = concurrency 6
lease_ttl = 5s
timeout = 300ms

[scope tiers]
rule main = requests token-bucket 40/1s
rule prio = requests sliding-window 20/2s
class main = main
class background = main floor=10
class priority = prio
default_class = main
lease_ttl = 5s
timeout = 300ms
"""

SCOPES = ["bucket", "cc", "quota", "llm", "tiers"]
CLASSES = ["main", "background", "priority"]
# The longest TTL anything in CONF can leave behind, seconds: the 10 s fixed
# windows (lease_ttl 5 s, buckets 3-4 s, the 2 s sliding window 4 s, the
# quota 2 s, penalties at most PENALTY_MAX_MS).
MAX_TTL_S = 10.0
LEASE_TTL_S = 5.0
PENALTY_MAX_MS = 2000

SAMPLE_S = 10.0
DOWN_S = 3.0                 # Redis down this long halfway through
SETTLE_DEADLINE_S = MAX_TTL_S + 50.0  # after the load: band reached by then
BACK_DEADLINE_S = 30.0       # daemons back on Redis after the restart
RSS_ALLOWANCE_KB = 8 * 1024

KEYSPACE = 200000            # cold keys: come and go
HOT_KEYS = 8                 # hot keys: refused often
WORKERS = 6                  # per daemon, each on one long-lived connection
CHURNERS = 2                 # per daemon, connect/close all the time
IDLE_CONNS = 8               # per daemon, open the whole run, never used
THINK_S = 0.01               # a worker pauses up to this between requests

RESULTS = os.path.join(REPO, "tests", "bench", "results", "soak.json")

# What a refused acquire may say; anything else is a failure of the run.
ACQUIRE_REFUSALS = {"limited", "budget_exceeded", "timeout", "exceeds_limit",
                    "too_many_waiters"}
BACKENDS = {"redis", "fallback"}


class Book:
    """What every thread reports: outcome counts and failures."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.errors = []
        self.nerrors = 0

    def count(self, what):
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def error(self, msg):
        with self.lock:
            self.nerrors += 1
            if len(self.errors) < 50:
                self.errors.append("%.1fs %s" % (time.monotonic() - T0, msg))


T0 = time.monotonic()


def _int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def check_reply(op, req, reply):
    """None when reply is a well-formed answer to req, else what is wrong."""
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        return "no boolean ok"
    if reply.get("id") != req.get("id"):
        return "id %r for %r" % (reply.get("id"), req.get("id"))
    if reply["ok"] is False:
        err = reply.get("error")
        if not isinstance(reply.get("message"), str):
            return "refusal without a message"
        if op == "acquire" and err in ACQUIRE_REFUSALS:
            if err in ("limited", "budget_exceeded") and not (
                    _int(reply.get("retry_after_ms")) and reply["retry_after_ms"] >= 0):
                return "%s without retry_after_ms" % err
            if not isinstance(reply.get("rule"), str):
                return "%s without a rule" % err
            return None
        if op == "reset" and err == "unavailable":
            return None  # Redis down: reset here only
        return "unexpected error %r" % err
    if op == "acquire":
        if not (isinstance(reply.get("lease"), str) and reply["lease"]):
            return "admitted without a lease"
        if not (_int(reply.get("waited_ms")) and reply["waited_ms"] >= 0):
            return "admitted without waited_ms"
        if reply.get("backend") not in BACKENDS:
            return "admitted by backend %r" % reply.get("backend")
    elif op == "release":
        if not isinstance(reply.get("held"), bool):
            return "release without a boolean held"
    elif op == "penalize":
        if "penalty_ms" in reply and not _int(reply["penalty_ms"]):
            return "penalty_ms not an integer"
    elif op == "inspect":
        if reply.get("backend") not in BACKENDS or not _int(reply.get("leases")):
            return "inspect without backend or leases"
    elif op == "status":
        scopes = reply.get("scopes")
        if not isinstance(scopes, dict) or sorted(scopes) != sorted(SCOPES):
            return "status without every scope"
        for s in scopes.values():
            if not all(_int(s.get(f)) for f in ("leases", "waiting", "keys")):
                return "status scope without leases/waiting/keys"
    return None


class Client:
    """One connection with request ids, checking every reply."""

    def __init__(self, daemon, book):
        self.conn = Conn(daemon.sock_path)
        self.book = book
        self.n = 0

    def call(self, req):
        """Send req, return its reply (None when the reply was malformed)."""
        self.n += 1
        req["id"] = self.n
        self.conn.send(req)
        reply = self.conn.recv()
        bad = check_reply(req["op"], req, reply)
        if bad:
            self.book.error("malformed reply (%s): %r to %r" % (bad, reply, req))
            return None
        self.book.count("%s:%s" % (req["op"], reply.get("error") or "ok"))
        return reply

    def close(self):
        self.conn.close()


def pick_key(rng):
    if rng.random() < 0.3:
        return "hot%d" % rng.randrange(HOT_KEYS)
    return "k%d" % rng.randrange(KEYSPACE)


def target(rng, scope):
    t = {"scope": scope}
    if rng.random() < 0.2:
        t["url"] = "https://H%d.Example.org/p" % rng.randrange(KEYSPACE)
    else:
        t["key"] = pick_key(rng)
    if scope == "tiers":
        t["class"] = rng.choice(CLASSES)
    return t


def acquire_req(rng):
    """A single- or multi-target acquire, sometimes a try (timeout_ms 0):
    (request, the scopes it names)."""
    if rng.random() < 0.15:
        a, b = rng.sample(SCOPES, 2)
        req = {"op": "acquire", "targets": [target(rng, a), target(rng, b)]}
        scopes = (a, b)
    else:
        s = rng.choice(SCOPES)
        req = {"op": "acquire", **target(rng, s)}
        scopes = (s,)
        if s == "bucket" and rng.random() < 0.2:
            req["cost"] = rng.choice([0, 2, 5])
    if "llm" in scopes:
        req["reserve"] = {"output": rng.randrange(100, 1000)}
    req["timeout_ms"] = rng.choice([0, 0, 0, 20, 100, 250])
    return req, scopes


def tokens(rng):
    return {"input": rng.randrange(2000), "output": rng.randrange(1200)}


class Detached:
    """Detached leases waiting to be released through the other daemon."""

    def __init__(self, ndaemons):
        self.lock = threading.Lock()
        self.queues = [[] for _ in range(ndaemons)]  # [i]: issued by daemon i
        self.granted = 0
        self.dropped = 0

    def add(self, issuer, lease, due):
        with self.lock:
            self.granted += 1
            self.queues[issuer].append((due, lease))

    def take_due(self, issuer, now):
        with self.lock:
            q = self.queues[issuer]
            self.queues[issuer] = [(d, x) for d, x in q if d > now]
            return [lease for d, lease in q if d <= now]


def worker(idx, daemons, me, seed, stop, book, detached):
    """Long-lived connection: the realistic mix, holding leases for a while.
    A connection that fails is an error; the worker connects again."""
    rng = random.Random(seed)
    while not stop.is_set():
        c = None
        try:
            c = Client(daemons[me], book)
            worker_loop(c, me, rng, stop, detached)
        except (OSError, ConnectionError, TimeoutError, AssertionError) as e:
            book.error("worker %d on daemon %d: %r" % (idx, me, e))
            time.sleep(0.5)
        finally:
            if c is not None:
                c.close()  # releases whatever is still held


def worker_loop(c, me, rng, stop, detached):
    held = []  # (release_at, lease, report tokens)
    while not stop.is_set():
        now = time.monotonic()
        for item in [h for h in held if h[0] <= now]:
            held.remove(item)
            req = {"op": "release", "lease": item[1]}
            if item[2]:
                req["tokens"] = tokens(rng)
            c.call(req)
        r = rng.random()
        if r < 0.55:
            req, scopes = acquire_req(rng)
            detach = rng.random() < 0.15
            if detach:
                req["detach"] = True
            reply = c.call(req)
            if reply and reply["ok"]:
                lease, with_tokens = reply["lease"], "llm" in scopes
                if detach:
                    if rng.random() < 0.1:
                        detached.dropped += 1  # left to expire at lease_ttl
                    else:
                        detached.add(me, lease, now + rng.uniform(0, 2.0))
                elif rng.random() < 0.02:
                    # a call longer than lease_ttl: released late (held false)
                    held.append((now + LEASE_TTL_S + 1.0, lease, with_tokens))
                else:
                    held.append((now + rng.uniform(0, 0.3), lease, with_tokens))
        elif r < 0.65:
            req = {"op": "penalize", **target(rng, rng.choice(SCOPES))}
            req.pop("class", None)
            if rng.random() < 0.5:
                req["retry_after_ms"] = rng.randrange(PENALTY_MAX_MS)
            else:
                req["retry_after"] = "1"
            c.call(req)
        elif r < 0.67:
            req = {"op": "reset", **target(rng, rng.choice(SCOPES))}
            req.pop("class", None)
            c.call(req)
        elif r < 0.82:
            c.call({"op": "inspect", **target(rng, rng.choice(SCOPES))})
        elif r < 0.87:
            c.call({"op": "status"})
        else:
            c.call({"op": "ping"})
        time.sleep(rng.uniform(0, THINK_S))


def churner(idx, daemons, me, seed, stop, book):
    """Connections that come and go: a few requests each, some left mid-wait
    or holding a lease (the daemon releases it at close)."""
    rng = random.Random(seed)
    daemon = daemons[me]
    while not stop.is_set():
        c = None
        try:
            c = Client(daemon, book)
            for _ in range(rng.randrange(1, 6)):
                if rng.random() < 0.7:
                    req, _ = acquire_req(rng)
                    if rng.random() < 0.1:
                        c.n += 1
                        req["id"] = c.n
                        c.conn.send(req)  # and leave without reading
                        book.count("churn:vanished")
                        break
                    c.call(req)
                else:
                    c.call({"op": rng.choice(["ping", "status"])})
            book.count("churn:connections")
        except (OSError, ConnectionError, TimeoutError, AssertionError) as e:
            book.error("churner %d on daemon %d: %r" % (idx, me, e))
        finally:
            if c is not None:
                c.close()
        time.sleep(rng.uniform(0.005, 0.03))


def releaser(daemons, me, stop, book, detached):
    """Release, through daemon me, the detached leases the other daemon issued
    once they are due (what is left at the end is released by run())."""
    other = (me + 1) % len(daemons)
    while not stop.is_set():
        c = None
        try:
            c = Client(daemons[me], book)
            while not stop.wait(0.1):
                for lease in detached.take_due(other, time.monotonic()):
                    c.call({"op": "release", "lease": lease})
        except (OSError, ConnectionError, TimeoutError, AssertionError) as e:
            book.error("releaser on daemon %d: %r" % (me, e))
            time.sleep(0.5)
        finally:
            if c is not None:
                c.close()


# ------------------------------------------------------------- sampling ----


def proc_rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def proc_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


class Sampler:
    """Takes samples of both daemons and Redis over its own connections
    (opened before the first sample, so they are part of every fd count)."""

    def __init__(self, daemons, redis, book):
        self.daemons = daemons
        self.redis = redis
        self.book = book
        self.conns = [Client(d, book) for d in daemons]
        self.samples = []

    def status(self, i):
        try:
            r = self.conns[i].call({"op": "status"})
        except (OSError, ConnectionError, TimeoutError, AssertionError) as e:
            self.book.error("status of daemon %d: %r" % (i, e))
            self.conns[i].close()
            self.conns[i] = Client(self.daemons[i], self.book)
            return None
        return r

    def redis_numbers(self):
        try:
            keys = self.redis.command("DBSIZE")
            info = self.redis.command("INFO", "memory")
        except (OSError, ConnectionError):
            return None, None  # down
        mem = None
        for line in str(info).splitlines():
            if line.startswith("used_memory:"):
                mem = int(line.split(":", 1)[1])
        return keys, mem

    def take(self, phase, record=True):
        """One sample: {"t", "phase", "redis_keys", "redis_mem", "daemons": [...]}."""
        t = round(time.monotonic() - T0, 1)
        ds = []
        for i, d in enumerate(self.daemons):
            if d.proc is None or d.proc.poll() is not None:
                self.book.error("daemon %d died (exit %s)" % (
                    i, None if d.proc is None else d.proc.returncode))
                ds.append(None)
                continue
            st = self.status(i)
            scopes = st["scopes"].values() if st else []
            ds.append({
                "rss_kb": proc_rss_kb(d.pid),
                "fds": proc_fds(d.pid),
                "keys": sum(s["keys"] for s in scopes) if st else None,
                "leases": sum(s["leases"] for s in scopes) if st else None,
                "connections": st.get("connections") if st else None,
                "backend": st.get("backend") if st else None,
                "queued": (st.get("redis") or {}).get("queued") if st else None,
                "pods_seen": (st.get("redis") or {}).get("pods_seen") if st else None,
            })
        rkeys, rmem = self.redis_numbers()
        s = {"t": t, "phase": phase, "redis_keys": rkeys, "redis_mem": rmem, "daemons": ds}
        if record:
            self.samples.append(s)
            print("soak: %6.1fs %-6s rss_kb %s  keys %s  redis_keys %s" % (
                t, phase, "/".join(str(d and d["rss_kb"]) for d in ds),
                "/".join(str(d and d["keys"]) for d in ds), rkeys), flush=True)
        return s

    def close(self):
        for c in self.conns:
            c.close()


def violations(start, end):
    """What in sample end is outside the band set by sample start."""
    out = []
    for i, (a, b) in enumerate(zip(start["daemons"], end["daemons"])):
        if a is None or b is None:
            out.append("daemon %d: no sample" % i)
            continue
        for f in ("fds", "connections"):
            if b[f] != a[f]:
                out.append("daemon %d: %s %s, started at %s" % (i, f, b[f], a[f]))
        for f in ("keys", "leases"):
            if b[f] != 0:
                out.append("daemon %d: %s %s, expected 0" % (i, f, b[f]))
        if b["rss_kb"] > a["rss_kb"] + RSS_ALLOWANCE_KB:
            out.append("daemon %d: rss %d kB, above start %d + %d kB" % (
                i, b["rss_kb"], a["rss_kb"], RSS_ALLOWANCE_KB))
        if b["backend"] != "redis":
            out.append("daemon %d: backend %s" % (i, b["backend"]))
    if end["redis_keys"] is None or end["redis_keys"] > start["redis_keys"]:
        out.append("redis keys %s, started at %s" % (end["redis_keys"], start["redis_keys"]))
    return out


def table(samples):
    cols = ("time", "phase", "d", "rss_kb", "fds", "keys", "leases", "conns", "backend",
            "redis_keys", "redis_mem")
    lines = ["%6s %-6s %1s %8s %4s %6s %6s %5s %-8s %10s %10s" % cols]
    for s in samples:
        for i, d in enumerate(s["daemons"]):
            d = d or {}
            lines.append("%6.1f %-6s %1d %8s %4s %6s %6s %5s %-8s %10s %10s" % (
                s["t"], s["phase"], i, d.get("rss_kb"), d.get("fds"), d.get("keys"),
                d.get("leases"), d.get("connections"), d.get("backend"),
                s["redis_keys"], s["redis_mem"]))
    return "\n".join(lines)


def peaks(samples, n):
    out = {}
    for i in range(n):
        ds = [s["daemons"][i] for s in samples if s["daemons"][i]]
        out["daemon%d" % i] = {f: max((d[f] for d in ds if d[f] is not None), default=None)
                               for f in ("rss_kb", "fds", "keys", "leases", "connections")}
    out["redis_keys"] = max((s["redis_keys"] for s in samples
                             if s["redis_keys"] is not None), default=None)
    out["redis_mem"] = max((s["redis_mem"] for s in samples
                            if s["redis_mem"] is not None), default=None)
    return out


def steady_growth(samples, n):
    """RSS growth, kB, of each daemon under steady load, not checked (the
    band is): the first half (first to last load sample before Redis went
    down) and the second (from the first load sample SAMPLE_S or more after
    Redis was back, to the last). A leak shows here as growth in both."""
    out = {}
    t_down = next((s["t"] for s in samples if s["phase"] == "down"), None)
    t_back = next((s["t"] for s in samples if s["phase"] == "back"), None)
    for i in range(n):
        def rss(phase_ok):
            return [s["daemons"][i]["rss_kb"] for s in samples
                    if s["phase"] == "load" and s["daemons"][i] and phase_ok(s["t"])]
        first = rss(lambda t: t_down is None or t < t_down)
        second = rss(lambda t: t_back is not None and t >= t_back + SAMPLE_S)
        out["daemon%d" % i] = {"first_half_kb": first[-1] - first[0] if first else None,
                               "second_half_kb": second[-1] - second[0] if second else None}
    return out


# ----------------------------------------------------------------- main ----


def wait_back_on_redis(sampler, deadline_s):
    """Poll until every daemon is on Redis with nothing queued and has seen
    every daemon's heartbeat (so the pods set exists): True, or False at
    the deadline."""
    end = time.monotonic() + deadline_s
    n = len(sampler.daemons)
    while True:
        s = sampler.take("wait", record=False)
        if all(d and d["backend"] == "redis" and d["queued"] == 0 and d["pods_seen"] == n
               for d in s["daemons"]):
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.2)


def run(seconds, book):
    global T0
    redis = RedisServer().start()
    daemons = [Admitd(CONF, redis_url=redis.url) for _ in range(2)]
    sampler = None
    stop = threading.Event()
    threads = []
    idle = []
    detached = Detached(len(daemons))
    start = end = None
    try:
        for d in daemons:
            d.start()
        sampler = Sampler(daemons, redis, book)
        if not wait_back_on_redis(sampler, BACK_DEADLINE_S):
            book.error("daemons not on Redis at start")
        T0 = time.monotonic()
        start = sampler.take("start")

        idle = [Conn(d.sock_path) for d in daemons for _ in range(IDLE_CONNS)]
        for me in range(len(daemons)):
            for j in range(WORKERS):
                threads.append(threading.Thread(target=worker, args=(
                    j, daemons, me, 1000 * me + j, stop, book, detached)))
            for j in range(CHURNERS):
                threads.append(threading.Thread(target=churner, args=(
                    j, daemons, me, 5000 + 1000 * me + j, stop, book)))
            threads.append(threading.Thread(target=releaser, args=(
                daemons, me, stop, book, detached)))
        for t in threads:
            t.daemon = True
            t.start()

        t_load = time.monotonic()
        t_restart = t_load + seconds / 2.0
        restarted = False
        next_sample = t_load + SAMPLE_S
        while time.monotonic() < t_load + seconds:
            now = time.monotonic()
            if not restarted and now >= t_restart:
                restarted = True
                redis.stop()
                sampler.take("down")
                time.sleep(DOWN_S)
                redis.restart()  # empty: --save "" --appendonly no
                if not wait_back_on_redis(sampler, BACK_DEADLINE_S):
                    book.error("daemons not back on Redis %.0fs after the restart"
                               % BACK_DEADLINE_S)
                sampler.take("back")
                while next_sample <= time.monotonic():
                    next_sample += SAMPLE_S  # "down" and "back" stood for them
            if now >= next_sample:
                sampler.take("load")
                next_sample += SAMPLE_S
            if any(d.proc.poll() is not None for d in daemons):
                book.error("a daemon died during the load")
                break
            time.sleep(0.2)

        # The load stops; every lease goes (released, closed, or expired).
        stop.set()
        for t in threads:
            t.join(60)
            if t.is_alive():
                book.error("client thread %s still running 60s after the stop" % t.name)
        for c in idle:
            c.close()
        idle = []
        for me in range(len(daemons)):  # the detached leases not released yet
            other = (me + 1) % len(daemons)
            c = Client(daemons[me], book)
            for lease in detached.take_due(other, float("inf")):
                c.call({"op": "release", "lease": lease})
            c.close()
        if not wait_back_on_redis(sampler, BACK_DEADLINE_S):
            book.error("daemons not on Redis after the load")
        t_stop = time.monotonic()
        settle_end = t_stop + SETTLE_DEADLINE_S
        next_sample = t_stop + SAMPLE_S
        sampler.take("stop")
        while True:
            end = sampler.take("end", record=False)
            now = time.monotonic()
            if now - t_stop >= MAX_TTL_S and not violations(start, end):
                break
            if now >= settle_end:
                break
            if now >= next_sample:
                sampler.samples.append(dict(end, phase="settle"))
                next_sample += SAMPLE_S
            time.sleep(1.0)
        sampler.samples.append(end)
    finally:
        stop.set()
        for c in idle:
            c.close()
        if sampler is not None:
            sampler.close()
        for i, d in enumerate(daemons):
            try:
                d.stop()  # exit 0 on SIGTERM, no sanitizer/assert report in its log
            except AssertionError as e:
                book.error("daemon %d stop: %s" % (i, str(e)[:3000]))
            if book.nerrors == 0:
                d.tmp.cleanup()
            else:
                d.tmp.keep()
        redis.cleanup(failed=book.nerrors > 0)
    return sampler.samples, start, end, detached


def main(argv):
    seconds = float(argv[1] if len(argv) > 1 else os.environ.get("SOAK_SECONDS") or 600)
    book = Book()
    print("soak: %.0fs of load, Redis restart at %.0fs, sampling every %.0fs"
          % (seconds, seconds / 2, SAMPLE_S), flush=True)
    samples, start, end, detached = run(seconds, book)
    bad = violations(start, end) if start and end else ["no start or end sample"]
    pk = peaks(samples, 2)
    growth = steady_growth(samples, 2)

    print(table(samples))
    print("peaks: %s" % json.dumps(pk, sort_keys=True))
    print("rss growth under steady load (informative): %s" % json.dumps(growth, sort_keys=True))
    print("replies: %s" % json.dumps(book.counts, sort_keys=True))
    print("detached leases: %d granted, %d left to expire"
          % (detached.granted, detached.dropped))
    for v in bad:
        print("band violation: %s" % v)
    for e in book.errors:
        print("error: %s" % e)
    if book.nerrors > len(book.errors):
        print("error: ... %d more" % (book.nerrors - len(book.errors)))
    verdict = "PASS" if not bad and book.nerrors == 0 else "FAIL"
    print("soak: %s (%d band violations, %d errors; band: fds/connections = start, "
          "keys/leases = 0, redis keys <= %s, rss <= start + %d kB)"
          % (verdict, len(bad), book.nerrors, start and start["redis_keys"],
             RSS_ALLOWANCE_KB))

    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump({"seconds": seconds, "sample_s": SAMPLE_S, "down_s": DOWN_S,
                   "max_ttl_s": MAX_TTL_S, "rss_allowance_kb": RSS_ALLOWANCE_KB,
                   "conf": CONF, "samples": samples, "peaks": pk, "steady_growth": growth,
                   "replies": book.counts, "violations": bad, "errors": book.errors,
                   "nerrors": book.nerrors, "verdict": verdict}, f, indent=1)
    print("soak: samples written to %s" % os.path.relpath(RESULTS, REPO))
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
