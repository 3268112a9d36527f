"""chaos.py - a soak under faults: not part of `make test` (it takes a
minute and asserts only survival and protocol shape), run by `make chaos`.

Three admitd processes share one Redis. Client threads send random
requests (acquire with random budgets, tries, several targets, releases
with tokens, penalize, status, malformed lines), vanish mid-wait, or
half-close, while a fault thread pauses, resumes, restarts and SCRIPT
FLUSHes Redis. At the end every daemon must still answer ping, exit 0 on
SIGTERM, and its log must show no sanitizer, valgrind or assert report
(the harness checks at stop). Every reply must be one JSON object with
"ok", and an id when the request had one.

    ADMITD_BIN=$PWD/daemon/admitd python3 -m tests.integ.chaos [SECONDS]
"""

import json
import random
import socket
import sys
import threading
import time

from .harness import Admitd, RedisServer

CONF = """
[admitd]
redis_timeout = 100ms

[scope pace]
min_delay = 20ms
lease_ttl = 2s
timeout = 500ms

[scope cc]
cluster_concurrency = 3
min_delay = 5ms
max_concurrent = 2
lease_ttl = 1s
timeout = 500ms

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

SCOPES = ["pace", "cc", "rules", "classes", "shadow", "closed"]


def request(rng, held):
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
    if r < 0.55:
        other = rng.choice([s for s in SCOPES if s != scope])
        return {"op": "acquire", "timeout_ms": rng.choice([0, 100]),
                "targets": [{"scope": scope, "key": key}, {"scope": other, "url":
                                                            "https://H%d.example/x" % rng.randrange(3)}]}
    if r < 0.75 and held:
        return {"op": "release", "lease": held.pop(rng.randrange(len(held))),
                "tokens": {"input": rng.randrange(200), "output": rng.randrange(200)}}
    if r < 0.80:
        return {"op": "penalize", "scope": scope, "key": key,
                "retry_after_ms": rng.randrange(50)}
    if r < 0.85:
        return {"op": "status"}
    if r < 0.88:
        return "{not json"
    return {"op": "ping"}


def client(daemon, seed, stop, errors, seen):
    rng = random.Random(seed)
    while not stop.is_set():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(5)
            s.connect(daemon.sock_path)
            f = s.makefile("rwb")
            held, n = [], 0
            for _ in range(rng.randrange(1, 40)):
                if stop.is_set():
                    break
                req = request(rng, held)
                n += 1
                if isinstance(req, dict):
                    req["id"] = n
                    line = json.dumps(req).encode() + b"\n"
                else:
                    line = req.encode() + b"\n"
                f.write(line)
                f.flush()
                if rng.random() < 0.03:
                    break  # vanish, maybe mid-wait
                if rng.random() < 0.03:
                    s.shutdown(socket.SHUT_WR)  # half-close: still owed a reply
                reply = json.loads(f.readline())
                outcome = reply.get("error") or reply.get("backend") or "ok"
                seen[outcome] = seen.get(outcome, 0) + 1
                if "ok" not in reply or (isinstance(req, dict) and reply.get("id") != n):
                    errors.append("bad reply %r to %r" % (reply, req))
                if reply.get("lease"):
                    held.append(reply["lease"])
                if isinstance(req, dict) is False and reply.get("error") != "bad_request":
                    errors.append("malformed line answered %r" % reply)
                if rng.random() < 0.03:
                    break
        except (OSError, ValueError):
            pass  # a daemon-side close after half-close, or a reset: fine
        finally:
            s.close()


def faults(redis, stop, rng):
    while not stop.is_set():
        time.sleep(rng.uniform(0.3, 1.5))
        what = rng.random()
        if what < 0.3:
            redis.pause()
            time.sleep(rng.uniform(0.05, 0.5))
            redis.resume()
        elif what < 0.5:
            redis.stop()
            time.sleep(rng.uniform(0.05, 0.5))
            redis.restart()
        elif what < 0.8:
            try:
                redis.command("SCRIPT", "FLUSH")
            except Exception:
                pass


def main(seconds):
    rng = random.Random(1)
    errors, seen = [], {}
    with RedisServer() as redis:
        daemons = [Admitd(CONF, redis_url=redis.url) for _ in range(3)]
        for d in daemons:
            d.start()
        try:
            stop = threading.Event()
            threads = [threading.Thread(target=client, args=(d, 100 * i + j, stop, errors, seen))
                       for i, d in enumerate(daemons) for j in range(8)]
            threads.append(threading.Thread(target=faults, args=(redis, stop, rng)))
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
        finally:
            for d in daemons:
                d.stop()  # asserts exit 0 and a clean log
    for e in errors[:20]:
        print(e)
    print("chaos: replies by outcome: %s" % json.dumps(seen, sort_keys=True))
    print("chaos: %d s, %d errors" % (seconds, len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1]) if len(sys.argv) > 1 else 60))
