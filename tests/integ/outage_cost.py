"""outage_cost.py - how much over its limit the fleet admits through each
kind of Redis outage (a measurement, not a test; the table of
docs/outages.md).

Three daemons, the three limits of outage.py (quota 30/1s, token bucket
30/3s, cluster_concurrency 6) under load at once, one outage per run:
  killed    kill -9 of redis-server (appendfsync always), 2 s down,
            restarted with its data
  empty     kill -9, 2 s down, restarted empty (no persistence)
  failover  Sentinel: SENTINEL FAILOVER
  kill9     Sentinel: kill -9 of the master
  cluster   Cluster of three masters with a replica each: kill -9 of the
            master of the loaded keys, its replica promoted (a new
            deployment per run)
  migration Cluster of three masters: the keys' three slots moved to
            another master by hand, 40 other keys each, 20 ms apart
            (about 1 s, longer than redis_timeout)
Each run prints, per limit, the admissions beyond the limit in the worst
interval of the run (quota: a 1 s window; bucket: beyond 30 + 10 L over an
interval of length L; cap: leases held at one instant beyond 6), counted
from outside (outage.py). Then the median of the runs per kind.

Run: python3 -m tests.integ.outage_cost [runs] [kinds,...] [BIN ...]
  (BIN: daemon binaries to compare, default $ADMITD_BIN; e.g.
   python3 -m tests.integ.outage_cost 3 killed,empty,failover,kill9 \\
       /work/wt-old/daemon/admitd $PWD/daemon/admitd)
"""

import os
import signal
import statistics
import subprocess
import threading
import sys
import time

from . import harness
from .harness import RedisServer, now
from .outage import CONF, EXTRA, measure, run_load
from .redis_deploy import RedisClusterDeploy, SentinelDeploy, admitd_slot, what_is_missing
from .redis_util import Pods, status

KINDS = ("killed", "empty", "failover", "kill9", "cluster", "migration")


class ReplicatedCluster(RedisClusterDeploy):
    """Three masters, each with one replica (`redis-cli --cluster create
    --cluster-replicas 1` over six nodes), node timeout 2 s, a replica
    free to take over however long since it last heard its master."""

    def __init__(self):
        super().__init__(n=6, node_timeout_ms=2000)
        # A replica judges its data too old to take over unless told not to
        # (it refused: "Disconnected from master for longer than allowed").
        for n in self.nodes:
            n.extra_args += ["--cluster-replica-validity-factor", "0"]

    def start(self):
        for n in self.nodes:
            n.start()
        r = subprocess.run(["redis-cli", "--cluster", "create", *[n.addr for n in self.nodes],
                            "--cluster-replicas", "1", "--cluster-yes"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise AssertionError("redis-cli --cluster create failed\n%s%s" % (r.stdout, r.stderr))
        for n in self.nodes:
            n.node_id = n.command("CLUSTER", "MYID")
        self.wait_ok()
        return self

    def master_key(self):
        return master_key(self)


def master_key(rc):
    """(a key whose three scopes' slots one master of rc owns, that master)."""
    smap = rc.slot_map()
    for j in range(100000):
        k = "c%d" % j
        owners = {id(smap[admitd_slot(s, k)]) for s in ("q", "tb", "cc")}
        if len(owners) == 1:
            return k, smap[admitd_slot("q", k)]
    raise AssertionError("no key")


def migration_run():
    """One run: the three slots of the loaded keys moved to another master
    by hand, each with 40 other keys moved 20 ms apart (about a second of
    ASK/TRYAGAIN for admitd's calls, longer than redis_timeout)."""
    with RedisClusterDeploy(n=3) as rc:
        key, src = master_key(rc)
        dst = next(n for n in rc.nodes if n is not src)
        slots = [admitd_slot(s, key) for s in ("q", "tb", "cc")]
        for s in ("q", "tb", "cc"):
            for j in range(40):
                src.command("SET", "other:{%s:%s}:%d" % (s, key, j), "x")
        with Pods(CONF, n=3, admitd_extra=EXTRA, redis=rc, start_redis=False) as p:
            _seen3(p)

            def control():
                time.sleep(1.5)
                t0 = now()
                ths = [threading.Thread(target=rc.migrate_slot, args=(sl, dst),
                                        kwargs={"pace": 0.02, "batch": 1}) for sl in slots]
                for t in ths:
                    t.start()
                for t in ths:
                    t.join()
                t1 = now()
                time.sleep(4.0)
                return t0, t1
            recs, (t0, t1) = run_load(p, control, key=key)
            for sl in slots:
                rc.wait_slot_owner(sl, dst)
            m = measure(recs)
            # what the fallbacks admitted and still owe Redis, 4 s after
            m["owed"] = [status(d)["redis"].get("owed") for d in p.daemons]
            m["written"] = ["fallback admissions written back" in d.stderr_text()
                            for d in p.daemons]
            return m, t1 - t0


def cluster_run():
    """One run: the master of the loaded keys killed (-9), its replica
    promoted by the cluster."""
    with ReplicatedCluster() as rc:
        key, m = rc.master_key()
        with Pods(CONF, n=3, admitd_extra=EXTRA, redis=rc, start_redis=False) as p:
            _seen3(p)

            def control():
                time.sleep(1.5)
                m.kill9()
                t0 = now()
                harness._wait_until(lambda: rc.slot_map()[admitd_slot("q", key)] is not m,
                                    30.0, "a replica promoted", rc.logs, interval=0.05)
                t1 = now()
                time.sleep(5.0)
                return t0, t1
            recs, (t0, t1) = run_load(p, control, key=key)
            return measure(recs), t1 - t0


def _seen3(p):
    harness._wait_until(lambda: all(status(d)["redis"]["pods_seen"] == 3 for d in p.daemons),
                        15.0, "3 pods seen")


def single(kind):
    """One run of a single redis-server killed and started again."""
    args = ["--appendonly", "yes", "--appendfsync", "always"] if kind == "killed" else []
    r = RedisServer(args=args)
    try:
        with Pods(CONF, n=3, admitd_extra=EXTRA, redis=r) as p:
            _seen3(p)

            def control():
                time.sleep(1.5)
                r.proc.send_signal(signal.SIGKILL)
                r.proc.wait()
                r.proc = None
                t0 = now()
                time.sleep(2.0)
                r.restart()
                t1 = now()
                time.sleep(4.0)
                return t0, t1
            recs, (t0, t1) = run_load(p, control)
            return measure(recs), t1 - t0
    finally:
        r.cleanup()


def sentinel(sd, kind):
    sd.heal()
    with Pods(CONF, n=3, admitd_extra=EXTRA, redis=sd, start_redis=False) as p:
        _seen3(p)

        def control():
            time.sleep(1.5)
            old, t0 = sd.failover() if kind == "failover" else sd.kill_master()
            _, t1 = sd.wait_promoted(old)
            time.sleep(5.0)
            return t0, t1
        recs, (t0, t1) = run_load(p, control)
        return measure(recs), t1 - t0


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    kinds = sys.argv[2].split(",") if len(sys.argv) > 2 else KINDS
    bins = sys.argv[3:] or [harness.admitd_bin()]
    sd = None
    if any(k in ("failover", "kill9") for k in kinds):
        why = what_is_missing("sentinel")
        if why:
            print("outage_cost: sentinel kinds skipped: " + why)
            kinds = [k for k in kinds if k not in ("failover", "kill9")]
        else:
            sd = SentinelDeploy().__enter__()
    table = {}
    try:
        for b in bins:
            os.environ["ADMITD_BIN"] = b
            for kind in kinds:
                for i in range(runs):
                    if kind == "cluster":
                        m, dt = cluster_run()
                    elif kind == "migration":
                        m, dt = migration_run()
                    elif kind in ("killed", "empty"):
                        m, dt = single(kind)
                    else:
                        m, dt = sentinel(sd, kind)
                    table.setdefault((b, kind), []).append(m)
                    print("%s %-8s run %d: over: quota %d, bucket %d, cap %d; admitted %s, by "
                          "the fallback %s; outage %.2fs"
                          % (b, kind, i + 1, m["q"], m["tb"], m["cc"], m["n"], m["fb"], dt),
                          flush=True)
                    if "owed" in m:
                        print("    keys still owed to Redis per daemon %s; a write-back "
                              "logged %s" % (m["owed"], m["written"]), flush=True)
    finally:
        if sd is not None:
            sd.cleanup(failed=False)
    print("\nmedian over-admission (runs: %d)" % runs)
    print("| kind | daemon | quota 30/1s | token bucket 30/3s | cluster_concurrency 6 |")
    print("|---|---|---|---|---|")
    for kind in kinds:
        for b in bins:
            ms = table[(b, kind)]
            med = [statistics.median(m[s] for m in ms) for s in ("q", "tb", "cc")]
            raw = ["/".join(str(m[s]) for m in ms) for s in ("q", "tb", "cc")]
            print("| %s | %s | %g (%s) | %g (%s) | %g (%s) |"
                  % (kind, b, med[0], raw[0], med[1], raw[1], med[2], raw[2]))


if __name__ == "__main__":
    main()
