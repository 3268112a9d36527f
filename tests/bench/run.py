#!/usr/bin/env python3
"""run.py - admitd's benchmark: one run, one table, one picture, measuring
admitd against what a user would use instead, plus two Redis call counts
that must hold. Stdlib only (the peers bring their own). `make bench` runs it.

Owns: the command line and the run (main), saved and shown by finish. Its
parts, each of one job: bench_env.py (paths, scopes, constants),
bench_redis.py (what the runs read from Redis: commandstats, MONITOR, the
scripts), bench_counts.py (the asserted counts), bench_rows.py (the rows,
the load generators and peers, their samples), bench_runners.py (the
process tree, the throughput and callgrind runs), bench_report.py (the
table, the goals, the picture).

A run: one process tree (one redis-server on a Unix socket in a temp
dir, admitd in redis mode (pod A), a second one for the FIFO count (pod B),
admitd in local mode, tests/bench/echo, and the load: redis-benchmark,
tests/bench/loadgen, tests/bench/peers/rlf.js, tests/bench/peers/
limits_bench.py), the measurements, the table on stdout, and
tests/bench/results/ (latest.json, table.md, bench.png and its data).

Throughput (timings: reported, never asserted), every row repeated --reps
times, interleaved (each repetition runs every row once), quoted as the
median with min and max. The unit is admissions/s: one acquire+release pair
for admitd, one script call for a ceiling, one consume()/hit() for a peer.
  ceiling   redis-benchmark, 64 connections, EVALSHA of tests/bench/bucket.lua
            (a plain token bucket: TIME, HMGET, HSET, PEXPIRE on one hash per
            key): random keys -P 1 and -P 16, one hot key -P 16; and for
            context the daemon's own acquire script (scripts/lib + acquire.lua
            with the KEYS/ARGV admitd sent, captured with MONITOR), random keys
            -P 16.
  echo      tests/bench/echo (a fixed reply per request line) driven by the
            loadgen at 16 connections, and at 64 when 64 is measured: the
            cost of the Unix-socket round trips alone, in round trips/s (a
            pair is two).
  admitd    loadgen -> admitd local / admitd on Redis, at each of --conns
            connections, a key per connection ("per-conn key") and one hot
            key, on scope `tb` (one rule, requests token-bucket 1000000/1s:
            every call admits, a refusal would be cheaper work); at 64
            connections the key space too (loadgen -K 1000: each connection
            cycles through 1,000 keys of its own, 64,000 keys, each coming
            back every second or two, too late for units booked ahead), and
            the one-shot rows ("lease": false) of all three.
  topology  the same admitd rows (distinct keys and one hot key, at each of
            --topo-conns connections) with admitd on a 3-master Redis Cluster
            (redis+cluster://, tests/integ/redis_deploy.py) and on a TLS
            redis-server (rediss://, a CA and certificate made with openssl),
            each with its own pod; a line after the table gives each row's
            ratio to the matching plain-Redis row (the goal: within 20%).
            Redis calls and CPU are summed over the cluster's nodes. Skipped
            with a row saying why when the daemon or the box cannot (--topologies
            "" skips them).
  peers     rate-limiter-flexible (npm, on ioredis; `npm ci` from the
            committed package-lock.json into tests/bench/peers/node_modules)
            and Debian's python3-limits (RedisStorage, --limits-strategy),
            --peer-conc loops/threads, a key per loop and one hot key, and
            for rate-limiter-flexible the key space (each loop cycling through
            1,000 keys of its own, as the loadgen's -K), against the same
            Redis. Skipped with a row saying why when node/npm or the
            package is missing.
  columns   ratio to the matching ceiling (per-conn key and key space ->
            bucket.lua random -P 16, hot -> bucket.lua hot -P 16, admitd
            local -> echo pairs/s at the same connections),
            ratio to rate-limiter-flexible (same keys), p50/p99 latency
            (admitd: acquire, from the loadgen's clock; ceilings: per call,
            from redis-benchmark; peers: per consume/hit), admitd's CPU per
            request (/proc/PID/stat utime+stime over the run / requests),
            Redis EVALSHA calls, admissions from units booked ahead (the
            scope's admitted_ahead in status) and Redis CPU per admission
            (INFO commandstats and /proc deltas); in latest.json, a Redis
            row's ratio to local mode's row of the same load.
  callgrind admitd local under valgrind --tool=callgrind serving a fixed
            number of pairs (16 connections): instructions per acquire+release
            pair, the difference of two runs (BASE and BASE+--callgrind-pairs
            pairs) so that start-up and shutdown cancel out. Repeatable where
            timings are not.
  redis     redis instructions per admission (tests/bench/redis_cost.py):
  cost      redis-server under callgrind serving a fixed number of
            admissions, 16 deep over 64 keys, for bucket.lua,
            rate-limiter-flexible's own script, admitd's acquire alone and in
            batches of 8 and 32 (the daemon's library, FUNCTION DUMP; its
            captured acquire). Repeatable where Redis CPU is not; runs with
            --counts-only too (--redis-cost 0 skips it).
  goals     the goals, each with its figure and whether it is met
            (goals_lines): first the ones kept so that nothing else is lost
            (Redis CPU and admissions/s against rate-limiter-flexible on a key
            per connection and one hot key, a one-rule scope against
            bucket.lua, Cluster and TLS against plain Redis, instructions per
            pair), then the key space's 1-4: Redis CPU per admission and
            one-shot admissions/s against rate-limiter-flexible, local mode
            against the echo at 16 and 64, Redis pairs against local pairs.
  picture   results/bench.png (gnuplot, tests/bench/plot.py): admissions/s
            against the connection counts measured, and each row's p50 and
            p99 acquire latency at the largest. --publish copies it to
            docs/bench.png. (The latency CDFs at 16 connections, cdf-*.dat,
            stay in results/ as data.)

Counts (asserted; run.py exits 1 when one is violated):
  release_no_rtt   N acquire+release pairs on a scope with only a requests
                   rule: Redis sees at most N acquire-script calls (exactly N
                   with BENCH_REDIS_BATCH=1; fewer when acquires of different
                   keys share a call) and 0 release-script calls (INFO
                   commandstats: those plus the pods' heartbeats). Control: a
                   scope with a concurrency rule, whose release does book,
                   must show N release calls.
  fifo_head_only   another admitd holds the only lease of a min_delay key;
                   100 waiters queue on it in admitd A. During a 2 s window A
                   sends about 2 s / concurrency_retry acquire-script calls
                   (the head's retries), not 100 times that.
  book_ahead       N acquires one after another on one key of the
                   throughput scope (one connection): every one admitted,
                   each either by an acquire-script call or from units an
                   earlier call booked ahead (calls + admitted_ahead = N, by
                   the daemon's counts; Redis saw those calls and the
                   give-backs), and at most N/8 calls (exactly N with
                   BENCH_BOOK_AHEAD=0).
"""

import argparse
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.integ.harness import Admitd, RedisServer  # noqa: E402
from tests.bench.bench_env import (  # noqa: E402
    ADMITD, BOOKS_SCOPE, DOCS_PNG, ECHO, FIFO_SCOPE, LOADGEN, log, NOREL_SCOPE, RESULTS, TB_SCOPE,
    with_admitd)
from tests.bench.bench_redis import (  # noqa: E402
    capture_acquire_argv, embedded_script, Monitor, sha1, status, wait_for)
from tests.bench.bench_counts import run_counts  # noqa: E402
from tests.bench.bench_rows import (  # noqa: E402
    build_rows, Echo, limits_setup, npm_setup, select_rows, summarize_rows)
from tests.bench.bench_runners import (  # noqa: E402
    Bench, run_callgrind, run_throughput, start_topologies)
from tests.bench.bench_report import (  # noqa: E402
    callgrind_line, machine, markdown_table, plot, report, topology_lines)
from tests.bench import redis_cost  # noqa: E402


def int_list(s):
    return [int(x) for x in str(s).replace(",", " ").split()]


def finish(res, args, out_dir):
    """The picture, table.md, latest.json and the table on stdout."""
    t = res.get("throughput")
    if t:
        why = plot(t["rows"], res["machine"], out_dir)
        t["plot"] = os.path.relpath(os.path.join(out_dir, "bench.png")) if why is None else why
        if why is None and args.publish:
            shutil.copyfile(os.path.join(out_dir, "bench.png"), DOCS_PNG)
            log("copied to %s" % os.path.relpath(DOCS_PNG))
        with open(os.path.join(out_dir, "table.md"), "w") as f:
            f.write("\n".join(markdown_table(t["rows"])) + "\n")
            tl = topology_lines(t["rows"])
            if tl:
                f.write("\n" + "\n".join(tl) + "\n")
            cl = callgrind_line(res.get("callgrind"))
            if cl:
                f.write("\n%s\n" % cl)
            rc = redis_cost.lines(res.get("redis_cost"))
            if rc:
                f.write("\n" + "\n".join(rc) + "\n")
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
        f.write("\n")
    print(report(res))


def main():
    ap = argparse.ArgumentParser(description="admitd against a plain Redis script, a Unix "
                                 "echo and two peer libraries (docs/bench.md)")
    env = os.environ.get
    ap.add_argument("--reps", type=int, default=int(env("BENCH_REPS", "3")))
    ap.add_argument("--seconds", type=float, default=float(env("BENCH_SECONDS", "3")))
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--conns", type=int_list, default=int_list(env("BENCH_CONNS", "1,16,64,256")),
                    help="admitd connection counts, e.g. 1,16,64,256")
    ap.add_argument("--topologies", type=lambda x: [t for t in x.replace(",", " ").split()],
                    default=env("BENCH_TOPOLOGIES", "cluster tls").replace(",", " ").split(),
                    help="admitd rows on other Redis deployments: cluster, tls ('' for none)")
    ap.add_argument("--topo-conns", type=int_list,
                    default=int_list(env("BENCH_TOPO_CONNS", "16,64")),
                    help="connection counts of the topology rows")
    ap.add_argument("--peer-conc", type=int, default=64,
                    help="concurrent loops (rlf) and threads (limits)")
    ap.add_argument("--limits-strategy", choices=("fixed-window", "moving-window"),
                    default="fixed-window")
    ap.add_argument("--no-peers", action="store_true", help="skip rate-limiter-flexible, limits")
    ap.add_argument("--callgrind-pairs", type=int,
                    default=int(env("BENCH_CALLGRIND_PAIRS", "20000")),
                    help="pairs measured under callgrind (0: skip)")
    ap.add_argument("--redis-cost", type=int, default=int(env("BENCH_REDIS_COST", "4800")),
                    help="admissions a row of redis_cost.py's callgrind rows (0: skip)")
    ap.add_argument("--callgrind-base", type=int, default=2000,
                    help="pairs of the baseline callgrind run, subtracted")
    ap.add_argument("--counts-only", action="store_true", help="skip the throughput part")
    ap.add_argument("--publish", action="store_true", default=env("BENCH_PUBLISH") == "1",
                    help="copy results/bench.png to docs/bench.png (BENCH_PUBLISH=1)")
    ap.add_argument("--replot", action="store_true",
                    help="measure nothing: redraw the picture and tables from --out")
    ap.add_argument("--rows", default=None, metavar="REGEX",
                    help="run only the rows whose id matches (and the ceilings and peers "
                         "they are compared with), e.g. 'oneshot|redis.distinct.c64'")
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args()
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if args.replot:
        with open(args.out) as f:
            res = json.load(f)
        finish(res, args, out_dir)
        return 0
    if args.reps < 1 or args.seconds <= 0 or not args.conns:
        sys.exit("bench: --reps, --seconds and --conns must be positive")
    for exe in (ADMITD, LOADGEN, ECHO):
        if not os.access(exe, os.X_OK):
            sys.exit("bench: %s is missing: run `make bench`" % exe)
    os.makedirs(out_dir, exist_ok=True)

    # The harness's temp dirs, under tests/bench/results/tmp unless told
    # otherwise: on a shared box, /tmp/integ.*, /tmp/admitd-* and /tmp/redis-*
    # were swept by something else while a run was using them.
    os.environ.setdefault("ADMITD_TEST_TMPDIR", os.path.join(out_dir, "tmp"))
    os.makedirs(os.environ["ADMITD_TEST_TMPDIR"], exist_ok=True)
    problems = []
    rows = select_rows(build_rows(args), args.rows)
    if not args.counts_only:
        skip_rlf = "skipped: --no-peers" if args.no_peers else npm_setup()
        skip_limits = "skipped: --no-peers" if args.no_peers else limits_setup()
        for r in rows:
            if r.kind == "rlf" and skip_rlf:
                r.skipped = skip_rlf
            if r.kind == "limits" and skip_limits:
                r.skipped = skip_limits
    conf = TB_SCOPE + NOREL_SCOPE + BOOKS_SCOPE + FIFO_SCOPE
    # The Redis levers, each measured alone: BENCH_REDIS_FUNCTIONS=no (EVALSHA),
    # BENCH_REDIS_BATCH=1 (every acquire its own call), BENCH_BOOK_AHEAD=0
    # (no units booked ahead; or another horizon, in ms).
    # redis_timeout: the default 250 ms is for production; on a 2-core box
    # shared with the load, a stall past it answers from the fallback, which
    # makes the run unclean without saying anything about Redis's cost.
    levers = ["redis_timeout = 2s"]
    if os.environ.get("BENCH_BOOK_AHEAD"):
        levers.append("redis_book_ahead = %dms" % int(os.environ["BENCH_BOOK_AHEAD"]))
    if os.environ.get("BENCH_REDIS_FUNCTIONS", "yes") == "no":
        levers.append("redis_functions = no")
    if os.environ.get("BENCH_REDIS_BATCH"):
        levers.append("redis_batch = %d" % int(os.environ["BENCH_REDIS_BATCH"]))
    conf = with_admitd(conf, *levers)
    t_start = time.monotonic()
    redis = RedisServer().start()
    started = []
    topo_objs = []
    mon = None
    echo = None
    clean = False
    try:
        redis.command("SCRIPT", "FLUSH")
        redis.command("FUNCTION", "FLUSH")
        pod_a = Admitd(conf, redis_url=redis.url).start()
        started.append(pod_a)
        pod_b = Admitd(conf, redis_url=redis.url).start()
        started.append(pod_b)
        local = Admitd(conf).start()
        started.append(local)
        for d in (pod_a, pod_b):
            wait_for(lambda d=d: status(d)["backend"] == "redis", 10, "admitd to use redis")
        # The scripts the daemon loaded are byte for byte the ones we build.
        sha_pair = (sha1(embedded_script("acquire")), sha1(embedded_script("release")))
        exists = redis.command("SCRIPT", "EXISTS", *sha_pair)
        if exists != [1, 1]:
            raise AssertionError("the daemon's scripts are not scripts/lib + scripts/*.lua "
                                 "as gen_scripts.sh builds them (SCRIPT EXISTS %s)" % exists)
        # Each script's ids: its SHA, and its function when the library is loaded.
        fnames = {}
        for lib in redis.command("FUNCTION", "LIST"):
            lib = dict(zip(lib[::2], lib[1::2]))
            for fn in lib.get("functions", []):
                name = dict(zip(fn[::2], fn[1::2]))["name"]
                fnames[name.rsplit("_", 1)[-1]] = name
        shas = tuple({sha} | ({fnames[n]} if n in fnames else set())
                     for sha, n in zip(sha_pair, ("acquire", "release")))
        mon = Monitor(redis)
        acquire_argv = capture_acquire_argv(mon, pod_a, shas[0])
        library_dump = redis_cost.function_dump(redis.sock_path)
        counts = run_counts(redis, mon, pod_a, pod_b, shas, problems)
        mon.close()
        mon = None
        res = {"machine": machine(), "counts": counts, "scopes": conf.strip()}
        if not args.counts_only:
            redis.command("FLUSHALL")
            echo = Echo(os.environ["ADMITD_TEST_TMPDIR"])
            topo = start_topologies(args, conf, rows, topo_objs)
            bench = Bench(args, redis, pod_a, local, echo, acquire_argv, problems, topo)
            run_throughput(args, bench, rows)
            summary = summarize_rows(rows)
            res["throughput"] = {
                "reps": args.reps, "seconds": args.seconds, "warmup": args.warmup,
                "conns": args.conns, "peer_conc": args.peer_conc,
                "ceiling_commands": {k: " ".join(v) for k, v in bench.commands.items()},
                "redis_benchmark_n": bench.n, "bucket_lua_sha": bench.bucket_sha,
                "rows": summary}
            log("callgrind (%d + %d pairs)" % (args.callgrind_base, args.callgrind_pairs))
            res["callgrind"] = run_callgrind(args, conf, os.environ["ADMITD_TEST_TMPDIR"])
        if args.redis_cost > 0:
            log("redis instructions per admission (callgrind, %d admissions a row)"
                % args.redis_cost)
            res["redis_cost"] = redis_cost.run(os.environ["ADMITD_TEST_TMPDIR"],
                                               library_dump, acquire_argv, args.redis_cost)
        res["problems"] = problems
        res["elapsed_s"] = round(time.monotonic() - t_start, 1)
        clean = True
    finally:
        if mon is not None:
            mon.close()
        if echo is not None:
            echo.stop()
        # After a failure: kill, keep the logs (the harness prints where).
        for d in started + topo_objs[::-1]:
            d.cleanup(failed=not clean)
        redis.cleanup(failed=not clean)

    t = res.get("throughput")
    if t:
        # The median repetition's latency distribution, kept beside the JSON.
        for r in t["rows"]:
            src = r.pop("_cdf_file", None)
            if src and os.path.exists(src):
                r["cdf_file"] = "cdf-%s.dat" % r["id"]
                shutil.copyfile(src, os.path.join(out_dir, r["cdf_file"]))
        shutil.rmtree(bench.cdf_dir, ignore_errors=True)
    finish(res, args, out_dir)
    print("\nresults: %s (%.0fs)" % (os.path.relpath(args.out), res["elapsed_s"]))
    if problems:
        print("\nPROBLEMS:\n  " + "\n  ".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
