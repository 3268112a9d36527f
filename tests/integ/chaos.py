"""chaos.py - a soak under faults: not part of `make test` (it takes a
minute), run by `make chaos`.

Three admitd processes share one Redis. Client threads send random
requests (acquire with random budgets, tries, several targets, releases
with tokens, late releases after lease_ttl, releases through another
daemon, repeated releases, releases of forged handles and of real ones
with a class, scope or key edited, through another daemon, penalize,
status, malformed lines), vanish mid-wait, or half-close;
a pipelining client stalls Redis traffic in flight; clients that stop
reading are dropped. A fault thread pauses, resumes, restarts (empty) and
SCRIPT FLUSHes Redis, freezes it with DEBUG SLEEP, restarts a daemon
with SIGTERM as a rolling deploy does, and reloads a daemon's conf while
Redis is down (its release queue then outlives the conf it was made under).

Through every outage (Redis stopped, restarted empty, paused, asleep)
one key of scope `bound` (quota 20/1s and a token bucket 20/2s) is loaded
from every daemon, and the admissions counted from outside must stay
within the limit plus one fallback budget (the pods' shares add up to one
limit) for each outage a window overlaps (docs/outages.md): at most
2 x 20 in any 1 s window, and at most 20 + 10 L + 20 in any interval of
length L, around one outage. The worst window around each outage is printed.

At the end every daemon must still answer ping, exit 0 on SIGTERM, and its
log must show no sanitizer, valgrind or assert report (the harness checks
at stop). Every reply must be one JSON object with "ok", and an id when the
request had one. A forged or edited handle must never settle anything
(its release changes nothing, or is refused while Redis is down), and the
real handle of an edited one still settles its lease at the end. Then no slot may be
left booked in Redis: every detached
lease ever granted is released (through a random daemon), every daemon
stops, and every lease set in Redis must be empty although lease_ttl is
far longer than the wait (a slot nobody holds would still be there).

    ADMITD_BIN=$PWD/daemon/admitd python3 -m tests.integ.chaos [SECONDS]
"""

import base64
import json
import os
import random
import signal
import socket
import sys
import threading
import time

from .harness import EPS, Admitd, RedisServer, now
from .outage import bucket_excess, quota_excess
from .redis_util import LAG

CONF = """
[admitd]
redis_timeout = 100ms
client_write_timeout = 1s
fallback_pods = 3

[scope bound]
quota = 20/1s
rule = requests token-bucket 20/2s
timeout = 200ms

[scope pace]
min_delay = 20ms
lease_ttl = 60s
timeout = 500ms

[scope cc]
cluster_concurrency = 3
min_delay = 5ms
max_concurrent = 2
lease_ttl = 60s
timeout = 500ms

[scope llm]
rule = tokens fixed-window 2000/1s
cluster_concurrency = 4
lease_ttl = 300ms
timeout = 200ms

[scope rules]
rule = requests sliding-window 200/1s
rule = tokens token-bucket 5000/1s
rule = concurrency 4
quota = 300/1s
timeout = 300ms
fallback_divisor = auto

[scope classes]
rule main = requests token-bucket 50/1s
rule prio = requests token-bucket 10/1s
class main = main
class background = main floor=10
class priority = prio
default_class = main
timeout = 300ms

[scope shadow]
quota = 5/1s
shadow = yes

[scope closed]
quota = 100/1s
fail_mode = closed
"""

SCOPES = ["pace", "cc", "llm", "rules", "classes", "shadow", "closed"]
METERED = ("llm", "rules")  # scopes whose rules count tokens
RELOADS = [0]  # conf reloads made while Redis was down
LONG_TTL = ("pace", "cc")  # a slot leaked there would outlive the run's end
DETACHED = []  # every detached lease granted: released at the end
DETACHED_LOCK = threading.Lock()
BOUND_Q, BOUND_W = 20, 1.0            # scope bound: quota 20/1s
BOUND_C, BOUND_RATE = 20, 10.0        # and a token bucket 20/2s
BOUND_ADMS = []  # (lo, hi, backend) of every admission of bound's key
DAEMONS = []     # the three daemons (an edited handle goes through another)
PHASES = []      # (start, end, what) of every outage made by faults()


def bound_client(daemon, stop):
    """Acquire and release one key of scope bound as fast as it is given,
    recording each admission's bracket (redis_util: the decision lies in
    [t_send + waited_ms - LAG, t_recv])."""
    mine = []
    while not stop.is_set():
        try:
            with daemon.connect(timeout=10) as c:
                while not stop.is_set():
                    t_send = now()
                    r = c.request({"op": "acquire", "scope": "bound", "key": "b",
                                   "timeout_ms": 200}, timeout=10)
                    if r.get("ok"):
                        mine.append((t_send + r.get("waited_ms", 0) / 1000.0 - LAG, c.last_t,
                                     r.get("backend")))
                        c.request({"op": "release", "lease": r["lease"]}, timeout=10)
                    else:
                        time.sleep(0.01)
        except (OSError, TimeoutError, ConnectionError, ValueError):
            time.sleep(0.05)  # the daemon restarting: connect again
    with DETACHED_LOCK:
        BOUND_ADMS.extend(mine)


def _outages_in(a, b):
    """How many outage phases the interval [a, b] overlaps (at least 1: the
    one whose aftermath it may hold)."""
    return max(1, sum(1 for t0, t1, _ in PHASES if t0 <= b and a <= t1))


def quota_beyond(ivs):
    """Admissions certainly inside one interval shorter than the quota
    window, beyond the limit plus one fallback budget for each outage the
    interval overlaps; returns (excess, its count, the outages)."""
    los = sorted(ivs)
    best = (0, 0, 1)
    for i, (lo_i, _) in enumerate(los):
        n = sum(1 for lo, hi in los[i:] if hi < lo_i + BOUND_W)
        k = _outages_in(lo_i, lo_i + BOUND_W)
        if n - BOUND_Q * (1 + k) > best[0] or (best[0] == 0 and n > best[1]):
            best = (max(0, n - BOUND_Q * (1 + k)), n, k)
    return best


def bucket_beyond(ivs):
    """The most admissions certainly inside one interval [a, a + L] beyond
    one bucket's policer (C + r L) plus one fallback budget (C) for each
    outage the interval overlaps; returns (excess, beyond the policer, L,
    the outages)."""
    los = sorted(ivs)
    best = (0, 0.0, 0.0, 1)
    for i, (lo_i, _) in enumerate(los):
        his = sorted(hi for lo, hi in los[i:])
        for m, hi in enumerate(his, 1):
            span = max(0.0, hi - lo_i) + EPS
            x = m - (BOUND_C + BOUND_RATE * span)
            k = _outages_in(lo_i, hi)
            if x - BOUND_C * k > best[0] or (best[0] <= 0 and x > best[1]):
                best = (max(0.0, x - BOUND_C * k), x, span, k)
    return int(best[0]), int(best[1]), best[2], best[3]


def check_bound(errors):
    """Around every outage phase (from 1 s before it to 2 s after):
    admissions of bound's key per window within the limit plus one
    fallback budget for each outage the window overlaps (phases come
    0.3 s apart at the least: a window around one may span the next). The
    run as a whole is printed."""
    ivs = [(lo, hi) for lo, hi, _ in BOUND_ADMS]
    fb = sum(1 for _, _, b in BOUND_ADMS if b == "fallback")
    for t0, t1, what in PHASES:
        near = [(lo, hi) for lo, hi in ivs if t0 - 1.0 <= lo <= t1 + 2.0]
        qx, q, qk = quota_beyond(near)
        tbx, tb, span, tbk = bucket_beyond(near)
        print("chaos: bound: %-16s %.2fs: %3d admitted around it, the worst 1s window %d "
              "(limit %d, bound %d over %d outage(s)), bucket: %d beyond 20 + 10/s over %.2fs "
              "(bound %d over %d outage(s))"
              % (what, t1 - t0, len(near), q, BOUND_Q, BOUND_Q * (1 + qk), qk, tb, span,
                 BOUND_C * tbk, tbk))
        if qx > 0:
            errors.append("bound: %d admissions in a 1s window around %s (limit %d + %d x %d "
                          "outage(s))" % (q, what, BOUND_Q, BOUND_Q, qk))
        if tbx > 0:
            errors.append("bound: %d beyond the bucket around %s (one bucket: %d x %d "
                          "outage(s))" % (tb, what, BOUND_C, tbk))
    q = quota_excess(ivs, BOUND_W, 0)
    tb, _ = bucket_excess(ivs, BOUND_C, BOUND_RATE)
    print("chaos: bound: %d admitted (%d by the fallback) over %d outages; the worst 1s "
          "window %d (bound %d), the bucket's worst %d beyond (bound %d)"
          % (len(ivs), fb, len(PHASES), q, 2 * BOUND_Q, tb, BOUND_C))
    # (not asserted over the whole run: an interval there spans several
    # outages, each of which may spend one fallback budget)
    if len(ivs) < BOUND_Q:
        errors.append("bound: only %d admissions of the bound key" % len(ivs))


def forged(rng):
    """A handle no daemon issued: a random nonce, a real scope and key, a
    huge reservation (what a forger would claim to get refunded)."""
    raw = bytes([1]) + ("%s\0\0k%d\0" % (rng.choice(SCOPES), rng.randrange(3))).encode()
    raw += b"\0output\0" + b"1000000000\0"
    return "%032x.%s" % (rng.getrandbits(128),
                         base64.urlsafe_b64encode(raw).decode().rstrip("="))


def edited(rng, lease):
    """A real handle with one target's class, scope or key edited (the
    nonce and the rest kept): what a client would send to get another
    class's or key's budget refunded."""
    nonce, b = lease.split(".")
    raw = base64.urlsafe_b64decode(b + "=" * (-len(b) % 4))
    fields = raw[1:].split(b"\0")
    ntargets = 0
    while 3 * ntargets < len(fields) and fields[3 * ntargets] != b"":
        ntargets += 1
    i = 3 * rng.randrange(ntargets) + rng.randrange(3)
    was = fields[i]
    if i % 3 == 0:  # a scope: another of the conf's
        fields[i] = rng.choice([s for s in SCOPES if s.encode() != was]).encode()
    elif i % 3 == 1:  # a class: another (or none, or one)
        fields[i] = rng.choice([c for c in (b"", b"main", b"background", b"priority")
                                if c != was])
    else:  # a key
        fields[i] = was + b"x"
    raw = raw[:1] + b"\0".join(fields)
    return nonce + "." + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def tokens_for(rng, metered, names=("output",)):
    return {"tokens": {n: rng.randrange(300) for n in names}} if metered else {}


def request(rng, held, done):
    scope = rng.choice(SCOPES)
    key = "k%d" % rng.randrange(3)
    r = rng.random()
    if r < 0.45:
        req = {"op": "acquire", "scope": scope, "key": key,
               "timeout_ms": rng.choice([0, 0, 50, 200, 600])}
        if scope == "classes":
            req["class"] = rng.choice(["main", "background", "priority"])
        if rng.random() < 0.2:
            req["detach"] = True
        return req
    if r < 0.47 and held:
        # a late release: the call outlived lease_ttl (tokens still count)
        time.sleep(rng.choice([0.0, 0.35]))
        lease, metered = held.pop(rng.randrange(len(held)))
        done.append((lease, metered))
        return {"op": "release", "lease": lease, **tokens_for(rng, metered)}
    if r < 0.55:
        other = rng.choice([s for s in SCOPES if s != scope])
        return {"op": "acquire", "timeout_ms": rng.choice([0, 100]),
                "targets": [{"scope": scope, "key": key}, {"scope": other, "url":
                                                            "https://H%d.example/x" % rng.randrange(3)}]}
    if r < 0.75 and held:
        lease, metered = held.pop(rng.randrange(len(held)))
        done.append((lease, metered))
        return {"op": "release", "lease": lease,
                **tokens_for(rng, metered, ("input", "output"))}
    if r < 0.77 and done:
        # a repeat (a client retrying after a lost reply): settles nothing
        # more; it may be the first to reach Redis when the first release
        # is still queued there
        lease, metered = rng.choice(done)
        return {"op": "release", "lease": lease, "repeat": True, **tokens_for(rng, metered)}
    if r < 0.775:
        # no tokens: a scope without token rules refuses them (bad_request)
        # before the handle is looked at
        return {"op": "release", "lease": forged(rng), "forged": True}
    if r < 0.78 and held:
        # a real lease's handle, edited, through another daemon: the lease
        # stays held (and is released as it is later)
        return {"op": "release", "lease": edited(rng, rng.choice(held)[0]), "edited": True}
    if r < 0.80:
        return {"op": "penalize", "scope": scope, "key": key,
                "retry_after_ms": rng.randrange(50)}
    if r < 0.85:
        return {"op": "status"}
    if r < 0.88:
        return "{not json"
    return {"op": "ping"}


def req_detached(req):
    return isinstance(req, dict) and bool(req.get("detach"))


def client(daemon, seed, stop, errors, seen):
    rng = random.Random(seed)
    while not stop.is_set():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(5)
            s.connect(daemon.sock_path)
            f = s.makefile("rwb")
            held, done, n = [], [], 0
            for _ in range(rng.randrange(1, 40)):
                if stop.is_set():
                    break
                req = request(rng, held, done)
                n += 1
                kind = None
                if isinstance(req, dict):
                    kind = "forged" if req.pop("forged", False) else \
                        "repeat" if req.pop("repeat", False) else \
                        "edited" if req.pop("edited", False) else None
                    req["id"] = n
                    line = json.dumps(req).encode() + b"\n"
                else:
                    line = req.encode() + b"\n"
                if kind == "edited":
                    release_edited(daemon, req, rng, errors, seen)
                    continue
                f.write(line)
                f.flush()
                if rng.random() < 0.03 and not req_detached(req):
                    break  # vanish, maybe mid-wait (a detached lease whose
                    # reply nobody reads is held until lease_ttl, by design)
                if rng.random() < 0.03:
                    s.shutdown(socket.SHUT_WR)  # half-close: still owed a reply
                reply = json.loads(f.readline())
                outcome = reply.get("error") or reply.get("backend") or "ok"
                seen[outcome] = seen.get(outcome, 0) + 1
                if "ok" not in reply or (isinstance(req, dict) and reply.get("id") != n):
                    errors.append("bad reply %r to %r" % (reply, req))
                if kind == "forged" and not (
                        reply.get("settled") is False or reply.get("error") == "unavailable"):
                    errors.append("a forged handle's release answered %r" % reply)
                if kind == "repeat":
                    what = "nothing" if reply.get("settled") is False else \
                        reply.get("error") or "settled"
                    seen["repeat_" + what] = seen.get("repeat_" + what, 0) + 1
                if isinstance(req, dict) and req.get("op") == "release" and \
                        reply.get("error") == "bad_request":
                    errors.append("a release answered %r" % reply)
                if reply.get("lease"):
                    scopes = [req.get("scope")] + [t.get("scope") for t in req.get("targets", [])]
                    held.append((reply["lease"], any(x in METERED for x in scopes)))
                    if req.get("detach"):
                        with DETACHED_LOCK:
                            DETACHED.append(reply["lease"])
                if isinstance(req, dict) is False and reply.get("error") != "bad_request":
                    errors.append("malformed line answered %r" % reply)
                if rng.random() < 0.03:
                    break
        except (OSError, ValueError):
            pass  # a daemon-side close after half-close, or a reset: fine
        finally:
            s.close()


def release_edited(daemon, req, rng, errors, seen):
    """Send an edited handle's release through a daemon other than the
    client's (the one that issued it settles from its own record): it must
    settle nothing, or be refused while Redis cannot vouch for it."""
    other = rng.choice([d for d in DAEMONS if d is not daemon])
    try:
        with other.connect(timeout=10) as c:
            reply = c.request(req, timeout=10)
    except (OSError, TimeoutError, ConnectionError, ValueError):
        return  # that daemon restarting
    what = "nothing" if reply.get("settled") is False else reply.get("error") or "settled"
    seen["edited_" + what] = seen.get("edited_" + what, 0) + 1
    if not (reply.get("settled") is False or reply.get("error") == "unavailable"):
        errors.append("an edited handle's release answered %r (%r)" % (reply, req))


def pipeliner(daemon, seed, stop, errors):
    """Acquire (then release) on many keys without waiting for replies, so
    that calls are always in flight when a fault hits Redis."""
    rng = random.Random(seed)
    while not stop.is_set():
        try:
            with daemon.connect(timeout=10) as c:
                n = 50
                for i in range(n):
                    c.send({"op": "acquire", "scope": "cc", "key": "p%d" % rng.randrange(40),
                            "timeout_ms": 300, "id": i})
                    time.sleep(0.005)
                got = 0
                while got < n:
                    r = c.recv(timeout=10)
                    if "ok" not in r:
                        errors.append("bad reply %r" % r)
                    if isinstance(r.get("id"), int):
                        got += 1
                        if r.get("ok"):
                            c.send({"op": "release", "lease": r["lease"], "id": "r"})
        except (OSError, TimeoutError, ConnectionError):
            pass


def non_reader(daemon, stop, errors):
    """Hold a lease, then pipeline pings and never read: must be dropped."""
    while not stop.is_set():
        time.sleep(2.0)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(5)
            s.connect(daemon.sock_path)
            s.sendall(json.dumps({"op": "acquire", "scope": "cc", "key": "nr",
                                  "timeout_ms": 0}).encode() + b"\n")
            s.setblocking(False)
            ping = (json.dumps({"op": "ping", "id": "x" * 30000}) + "\n").encode()
            end = time.monotonic() + 10
            closed = False
            while time.monotonic() < end and not closed:
                try:
                    s.send(ping)
                except BlockingIOError:
                    time.sleep(0.05)
                except OSError:
                    closed = True  # dropped by the daemon
            if not closed:
                errors.append("a client that never reads was not dropped within 10 s")
        except OSError:
            pass
        finally:
            s.close()


def faults(redis, daemons, stop, rng, errors):
    while not stop.is_set():
        time.sleep(rng.uniform(0.3, 1.5))
        what = rng.random()
        t0 = now()
        if what < 0.2:
            redis.pause()
            time.sleep(rng.uniform(0.05, 0.5))
            redis.resume()
            PHASES.append((t0, now(), "pause"))
        elif what < 0.35:
            redis.stop()
            time.sleep(rng.uniform(0.05, 0.5))
            redis.restart()
            PHASES.append((t0, now(), "restart-empty"))
        elif what < 0.5:
            try:
                redis.command("SCRIPT", "FLUSH")
                redis.command("FUNCTION", "FLUSH")
            except Exception:
                pass
        elif what < 0.7:
            try:  # a stall: calls in flight time out, then Redis runs them
                redis.command("DEBUG", "SLEEP", "%.2f" % rng.uniform(0.1, 0.3))
            except Exception:
                pass
            PHASES.append((t0, now(), "debug-sleep"))
        elif what < 0.87:
            # a reload while Redis is down: releases queued under the old
            # conf are sent under the new one once Redis is back
            d = rng.choice(daemons)
            redis.stop()
            time.sleep(rng.uniform(0.2, 0.4))
            text = d.conf_text.replace("timeout = 500ms", "timeout = 450ms") \
                if "timeout = 500ms" in d.conf_text else \
                d.conf_text.replace("timeout = 450ms", "timeout = 500ms")
            with open(d.conf_path + ".tmp", "w") as f:
                f.write(text)
            os.rename(d.conf_path + ".tmp", d.conf_path)
            d.conf_text = text
            try:
                d.proc.send_signal(signal.SIGHUP)
                RELOADS[0] += 1
            except OSError:
                pass
            time.sleep(rng.uniform(0.2, 0.4))
            redis.restart()
            PHASES.append((t0, now(), "reload-while-down"))
        elif what < 0.95:
            d = rng.choice(daemons)  # a rolling deploy: SIGTERM, start again
            try:
                d.stop()  # asserts exit 0 and a clean log
            except AssertionError as e:
                errors.append("daemon restart: %s" % str(e)[:2000])
            d.start()


def _wait_redis(daemon, errors, deadline=10.0):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        with daemon.connect() as c:
            st = c.request({"op": "status"})
        if st.get("backend") == "redis" and st.get("redis", {}).get("queued") == 0:
            return
        time.sleep(0.1)
    errors.append("daemon %d not back on Redis with its queue sent" % daemon.pid)


def _leaked_slots(redis):
    """Lease sets of the long-TTL scopes that still hold a lease."""
    out = []
    for k in redis.command("KEYS", "admitd:{*}:l"):
        k = k.decode() if isinstance(k, bytes) else k
        if k.split("{", 1)[1].split(":", 1)[0] in LONG_TTL:
            n = int(redis.command("ZCARD", k))
            if n:
                out.append((k, n))
    return out


def main(seconds):
    rng = random.Random(1)
    errors, seen = [], {}
    with RedisServer(args=["--enable-debug-command", "yes"]) as redis:
        daemons = [Admitd(CONF, redis_url=redis.url) for _ in range(3)]
        DAEMONS.extend(daemons)
        for d in daemons:
            d.start()
        try:
            stop = threading.Event()
            threads = [threading.Thread(target=client, args=(d, 100 * i + j, stop, errors, seen))
                       for i, d in enumerate(daemons) for j in range(8)]
            threads += [threading.Thread(target=pipeliner, args=(d, 7 + i, stop, errors))
                        for i, d in enumerate(daemons)]
            threads.append(threading.Thread(target=non_reader, args=(daemons[0], stop, errors)))
            threads += [threading.Thread(target=bound_client, args=(d, stop)) for d in daemons]
            threads.append(threading.Thread(target=faults, args=(redis, daemons, stop, rng, errors)))
            for t in threads:
                t.start()
            time.sleep(seconds)
            stop.set()
            for t in threads:
                t.join(30)
            if redis.paused:
                redis.resume()
            for d in daemons:
                with d.connect() as c:
                    if c.request({"op": "ping"}) != {"ok": True}:
                        errors.append("daemon %d does not answer ping" % d.pid)
            for d in daemons:  # back on Redis before the books are checked
                _wait_redis(d, errors)
            # Any daemon releases any detached lease (issued by any of them,
            # by a process since restarted, or already released: held false).
            for i, lease in enumerate(DETACHED):
                with daemons[i % len(daemons)].connect() as c:
                    r = c.request({"op": "release", "lease": lease})
                    if r.get("ok") is not True:
                        errors.append("release of a detached lease: %r" % r)
        finally:
            for d in daemons:
                d.stop()  # asserts exit 0 and a clean log
        check_bound(errors)
        leaked = _leaked_slots(redis)
        if leaked:
            errors.append("slots still booked in Redis after every lease ended: %r"
                          % leaked[:10])
    for e in errors[:20]:
        print(e)
    print("chaos: replies by outcome: %s" % json.dumps(seen, sort_keys=True))
    print("chaos: %d detached leases released at the end" % len(DETACHED))
    print("chaos: %d reloads while Redis was down" % RELOADS[0])
    print("chaos: %d s, %d errors" % (seconds, len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1]) if len(sys.argv) > 1 else 60))
