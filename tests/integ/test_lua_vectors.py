"""test_lua_vectors.py - scripts/lib/strategy.lua against tests/vectors/strategy/*.jsonl,
scripts/lib/adaptive.lua against tests/vectors/adaptive/adaptive.jsonl, and
scripts/lib/override.lua against tests/vectors/override/override.jsonl.

Owns: replaying every strategy vector in a real redis-server (EVAL of
scripts/lib/strategy.lua + tests/integ/lua_vectors.lua, one call per case),
and a third, independent implementation of the five strategies (a reference
model in exact rational arithmetic, below) that the same vectors are checked
against. The C side replays the same files in tests/unit/strategy/check_strategy.c.

The model is written differently from the C and Lua on purpose: levels and
weighted counts are Fractions, retry_after is solved in closed form rather
than searched, so a shared mistake is unlikely. It also fills in the
expectations of hand-written scenarios:

    python3 tests/integ/test_lua_vectors.py --regen   # rewrites the jsonl files

Needs no daemon: only redis-server (tests.integ.harness.RedisServer).
"""

import glob
import json
import math
import os
import random
import sys
import unittest
from fractions import Fraction

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VECTOR_DIR = os.environ.get("STRAT_VECTORS") or os.path.join(REPO, "tests", "vectors", "strategy")
LIB_LUA = os.path.join(REPO, "scripts", "lib", "strategy.lua")
WRAPPER_LUA = os.path.join(REPO, "tests", "integ", "lua_vectors.lua")
ADAPT_VECTORS = os.path.join(REPO, "tests", "vectors", "adaptive", "adaptive.jsonl")
ADAPT_LUA = os.path.join(REPO, "scripts", "lib", "adaptive.lua")
ADAPT_WRAPPER_LUA = os.path.join(REPO, "tests", "integ", "lua_adaptive.lua")
OVR_VECTORS = os.path.join(REPO, "tests", "vectors", "override", "override.jsonl")
OVR_LUA = os.path.join(REPO, "scripts", "lib", "override.lua")
OVR_WRAPPER_LUA = os.path.join(REPO, "tests", "integ", "lua_override.lua")

MAX_AMOUNT = 10 ** 9
MAX_WINDOW = 86400000
UNITS_MAX = 1 << 40
WAIT_MAX = 10 ** 15
FLOOR_WHOLE = 10 ** 6
BUCKETS = ("token-bucket", "leaky-bucket")
KINDS = ("token-bucket", "sliding-window", "fixed-window", "leaky-bucket", "session-window")


def clamp(x, lo, hi):
    return max(lo, min(hi, x))


class Model:
    """One strategy with its parameters, in exact arithmetic.

    Semantics (strategy.h): with count the units in use (a bucket's level, a
    window's count, the sliding window's weighted count), a check passes iff
    count + cost <= cap - floor, where a cost-0 check costs the smallest
    unit of the state (a milli-unit of a bucket, a unit of a window). retry_after is the least whole ms after
    which the check passes, capped at now_eff + ttl.
    """

    def __init__(self, params):
        self.kind = params["kind"]
        self.amount = clamp(params["amount"], 1, MAX_AMOUNT)
        self.w = clamp(params["window_ms"], 1, MAX_WINDOW)
        burst = clamp(params.get("burst", 0), 0, MAX_AMOUNT)
        self.bucket = self.kind in BUCKETS
        self.cap = burst if self.bucket and burst > 0 else self.amount
        self.unit = 1000 if self.bucket else 1

    def ttl(self):
        if self.bucket:
            return min((self.cap // self.amount + 2) * self.w, WAIT_MAX)
        return 2 * self.w if self.kind == "sliding-window" else self.w

    # -- the count at instant T (T already >= st.t), exact --
    def count(self, st, T):
        a, b, t = st["a"], st["b"], st["t"]
        w = self.w
        if self.bucket:
            level = Fraction(a) - Fraction(b, w)
            return max(Fraction(0), level - Fraction((T - t) * self.amount * 1000, w))
        if self.kind == "fixed-window":
            return Fraction(a if T // w * w == t else 0)
        if self.kind == "session-window":
            return Fraction(a if b != 0 and T - t < w else 0)
        start = T // w * w
        cur, prev = self._roll(st, start)
        return cur + Fraction(prev * (w - (T - start)), w)

    def _roll(self, st, start):
        if start == st["t"]:
            return st["a"], st["b"]
        return 0, (st["a"] if start - st["t"] == self.w else 0)

    def floor(self, floor, ppm):
        """The units a class's floor leaves: ppm millionths of the capacity,
        rounded down (exact integers), or floor units."""
        if ppm <= 0:
            return floor
        return self.cap * min(ppm, FLOOR_WHOLE) // FLOOR_WHOLE

    def check(self, st, now, cost, floor):
        cost = max(1, clamp(cost, 0, UNITS_MAX) * self.unit)
        room = (self.cap - clamp(floor, 0, UNITS_MAX)) * self.unit
        if cost > room:
            return False, -1
        T0 = max(now, st["t"])
        if self.count(st, T0) + cost <= room:
            return True, 0
        T = min(self._first_pass(st, T0, cost, room), T0 + self.ttl())
        return False, T - now

    def _first_pass(self, st, T0, cost, room):
        """Least T > T0 at which the check passes, in closed form."""
        w = self.w
        if self.bucket:
            level = self.count(st, T0)
            rate = Fraction(self.amount * 1000, w)
            return T0 + math.ceil((level - (room - cost)) / rate)
        if self.kind == "fixed-window":
            return T0 // w * w + w
        if self.kind == "session-window":
            return st["t"] + w
        s0 = T0 // w * w
        c0, p0 = self._roll(st, s0)
        # In [s0, s0+w) the count is c0 + p0*r/w with r = s0+w-T; in
        # [s0+w, s0+2w) it is c0*r/w with r = s0+2w-T; then 0.
        for base, fixed, weight in ((s0 + w, c0, p0), (s0 + 2 * w, 0, c0)):
            r = self._max_r(fixed, weight, cost, room)
            if r >= 1:
                return max(T0 + 1, base - min(r, w))
        return s0 + 2 * w

    def _max_r(self, fixed, weight, cost, room):
        """Largest r (<= w, or 0 if none) with fixed + weight*r/w passing."""
        m = room - cost - fixed
        if m < 0:
            return 0
        return self.w if weight == 0 else (m * self.w) // weight

    def book(self, st, now, amount):
        amount = clamp(amount, -UNITS_MAX, UNITS_MAX) * self.unit
        T = max(now, st["t"])
        w = self.w
        if self.bucket:
            top = (self.cap + self.amount) * 1000
            level = clamp(self.count(st, T) + amount, 0, top)
            a = math.ceil(level)
            return {"a": a, "b": int((a - level) * w), "t": T}
        if self.kind == "fixed-window":
            start = T // w * w
            return {"a": clamp(int(self.count(st, T)) + amount, 0, UNITS_MAX), "b": 0, "t": start}
        if self.kind == "session-window":
            if st["b"] != 0 and T - st["t"] < w:
                return {"a": clamp(st["a"] + amount, 0, UNITS_MAX), "b": 1, "t": st["t"]}
            if amount <= 0:
                return {"a": 0, "b": 0, "t": 0}
            return {"a": clamp(amount, 0, UNITS_MAX), "b": 1, "t": T}
        start = T // w * w
        cur, prev = self._roll(st, start)
        return {"a": clamp(cur + amount, 0, UNITS_MAX), "b": prev, "t": start}


def load_vectors():
    """[(file name, line number, case dict)] for every vector file."""
    out = []
    files = sorted(glob.glob(os.path.join(VECTOR_DIR, "*.jsonl")))
    for path in files:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    out.append((os.path.basename(path), n, json.loads(line)))
    return out


def model_run(case):
    """Replay a case through the model: a list of per-step results shaped as
    the vectors' expectations."""
    m = Model(case["params"])
    st = dict(case["state"])
    res = []
    for step in case["steps"]:
        op = step["op"]
        if op == "check":
            fl = m.floor(step.get("floor", 0), step.get("floor_ppm", 0))
            ok, retry = m.check(st, step["now"], step.get("cost", 1), fl)
            res.append({"allowed": ok, "retry_after_ms": retry})
        elif op == "floor":
            res.append(m.floor(step.get("floor", 0), step.get("floor_ppm", 0)))
        elif op == "book":
            st = m.book(st, step["now"], step["amount"])
            res.append(dict(st))
        elif op == "ttl":
            res.append(m.ttl())
        else:
            raise ValueError("unknown op %r" % op)
    return res


def expected(step):
    op = step["op"]
    if op == "check":
        return step["expect"]
    if op == "book":
        return step["expect_state"]
    return step["expect"]


def regen():
    for path in sorted(glob.glob(os.path.join(VECTOR_DIR, "*.jsonl"))):
        lines = []
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                case = json.loads(line)
                for step, got in zip(case["steps"], model_run(case)):
                    step.pop("expect", None)
                    step.pop("expect_state", None)
                    step["expect_state" if step["op"] == "book" else "expect"] = got
                lines.append(json.dumps(case, separators=(",", ":")))
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        print("%s: %d cases" % (path, len(lines)))


class TestVectorFiles(unittest.TestCase):
    """The vector files themselves: shape, coverage, and agreement with the model."""

    def test_every_kind_has_enough_cases(self):
        cases = load_vectors()
        for kind in KINDS:
            n = sum(1 for _, _, c in cases if c["params"]["kind"] == kind)
            self.assertGreaterEqual(n, 12, "%s has only %d vector cases" % (kind, n))

    def test_model_agrees_with_vectors(self):
        for fname, line, case in load_vectors():
            for i, (step, got) in enumerate(zip(case["steps"], model_run(case))):
                self.assertEqual(got, expected(step), "%s:%d %r step %d (model)"
                                 % (fname, line, case["name"], i))


class TestLuaVectors(unittest.TestCase):
    """scripts/lib/strategy.lua, run by a real redis-server, against the vectors."""

    @classmethod
    def setUpClass(cls):
        from tests.integ.harness import RedisServer
        cls.redis = RedisServer().start()
        with open(LIB_LUA) as f:
            lib = f.read()
        with open(WRAPPER_LUA) as f:
            wrapper = f.read()
        cls.conn = cls.redis.connect(timeout=30.0)
        cls.sha = cls.conn.command("SCRIPT", "LOAD", lib + "\n" + wrapper)

    @classmethod
    def tearDownClass(cls):
        cls.conn.close()
        cls.redis.cleanup()

    def run_case(self, case):
        """The wrapper's flat integer reply, split per step."""
        flat = self.conn.command("EVALSHA", self.sha, 0, json.dumps(case))
        out = []
        for step in case["steps"]:
            n = {"check": 4, "book": 3, "ttl": 1, "floor": 1}[step["op"]]
            out.append(flat[:n])
            flat = flat[n:]
        self.assertEqual(flat, [], "wrapper returned extra values")
        return out

    def test_vectors(self):
        cases = load_vectors()
        self.assertGreater(len(cases), 0, "no vectors in " + VECTOR_DIR)
        for fname, line, case in cases:
            where = "%s:%d %r" % (fname, line, case["name"])
            for i, (step, got) in enumerate(zip(case["steps"], self.run_case(case))):
                exp = expected(step)
                if step["op"] == "check":
                    allowed, retry, at_retry, before = got
                    self.assertEqual({"allowed": bool(allowed), "retry_after_ms": retry}, exp,
                                     "%s step %d" % (where, i))
                    if retry > 0 and retry < WAIT_MAX:
                        # exact and minimal: passes at now+retry, not a ms before
                        self.assertEqual((at_retry, before), (1, 0),
                                         "%s step %d: retry_after_ms %d is not exact"
                                         % (where, i, retry))
                elif step["op"] == "book":
                    self.assertEqual(dict(zip("abt", got)), exp, "%s step %d" % (where, i))
                else:
                    self.assertEqual(got[0], exp, "%s step %d" % (where, i))

    def test_no_globals(self):
        """Redis refuses scripts that set globals; the library must define none."""
        with open(LIB_LUA) as f:
            r = self.conn.command("EVAL", f.read() + "\nreturn 1", 0)
        self.assertEqual(r, 1)

    def test_random_cases_match_model(self):
        """Random params (up to the 1e9 / one-day limits), states and steps:
        the Lua must give exactly what the rational model gives."""
        rnd = random.Random(20261129)
        for n in range(300):
            case = random_case(rnd, KINDS[n % len(KINDS)])
            want = model_run(case)
            for i, (step, got) in enumerate(zip(case["steps"], self.run_case(case))):
                where = "random case %d %s step %d" % (n, json.dumps(case), i)
                if step["op"] == "check":
                    self.assertEqual({"allowed": bool(got[0]), "retry_after_ms": got[1]},
                                     want[i], where)
                else:
                    self.assertEqual(dict(zip("abt", got)), want[i], where)


# ---- the adaptive amount (daemon/strategy/adaptive.c, scripts/lib/adaptive.lua) ----

class AdaptModel:
    """AIMD of one key's amount, written from the rule's statement rather
    than from the C: the amount (0 meaning the ceiling) is clamped into
    [floor, ceil] when read; a limited outcome multiplies it by factor/1000
    at most once per interval, an ok outcome adds step once an interval has
    passed since the last change and the last limited outcome."""

    def __init__(self, p):
        self.p = p

    def amount(self, st):
        p = self.p
        a = st["amt"]
        return p["ceil"] if a <= 0 or a >= p["ceil"] else max(a, p["floor"])

    def apply(self, st, now, outcome):
        p, st = self.p, dict(st)
        before = self.amount(st)
        n = max(now, st["td"], st["tc"], st["tl"])
        if outcome == "limited":
            st["tl"] = n
            if st["td"] == 0 or n - st["td"] >= p["interval_ms"]:
                new = max(p["floor"], (before * p["factor"]) // 1000)
                st["td"] = n
                self._store(st, before, new, n)
            return True, st
        if outcome != "ok" or before >= p["ceil"]:
            return False, st
        if n - max(st["tc"], st["tl"]) < p["interval_ms"]:
            return False, st
        self._store(st, before, min(p["ceil"], before + p["step"]), n)
        return True, st

    def _store(self, st, before, new, n):
        st["amt"] = 0 if new >= self.p["ceil"] else new
        if new != before:
            st["tc"] = n

    @staticmethod
    def scale(v, amt, ceil):
        if v <= 0 or amt >= ceil:
            return v
        return max(1, int(Fraction(v * amt, ceil)))  # exact; the vectors stay clear of ties

    def ttl(self):
        return max(600000, 60 * self.p["interval_ms"])


def load_adapt_vectors():
    with open(ADAPT_VECTORS) as f:
        return [(n, json.loads(line)) for n, line in enumerate(f, 1) if line.strip()]


def adapt_model_run(case):
    m = AdaptModel(case["params"])
    st = dict(case["state"])
    out = []
    for step in case["steps"]:
        op = step["op"]
        if op == "apply":
            changed, st = m.apply(st, step["now"], step["outcome"])
            out.append({"changed": changed, "state": dict(st)})
        elif op == "amount":
            out.append(m.amount(st))
        elif op == "scale":
            out.append(m.scale(step["v"], step["amt"], step["ceil"]))
        elif op == "ttl":
            out.append(m.ttl())
        else:
            raise ValueError("unknown op %r" % op)
    return out


class TestAdaptiveVectors(unittest.TestCase):
    """scripts/lib/adaptive.lua in a real redis-server, and the model, against
    the vectors check_adaptive.c replays."""

    @classmethod
    def setUpClass(cls):
        from tests.integ.harness import RedisServer
        cls.redis = RedisServer().start()
        with open(ADAPT_LUA) as f:
            cls.lib = f.read()
        with open(ADAPT_WRAPPER_LUA) as f:
            wrapper = f.read()
        cls.conn = cls.redis.connect(timeout=30.0)
        cls.sha = cls.conn.command("SCRIPT", "LOAD", cls.lib + "\n" + wrapper)

    @classmethod
    def tearDownClass(cls):
        cls.conn.close()
        cls.redis.cleanup()

    def test_enough_cases(self):
        self.assertGreaterEqual(len(load_adapt_vectors()), 15)

    def test_model_agrees_with_vectors(self):
        for line, case in load_adapt_vectors():
            for i, (step, got) in enumerate(zip(case["steps"], adapt_model_run(case))):
                self.assertEqual(got, step["expect"], "adaptive.jsonl:%d %r step %d (model)"
                                 % (line, case["name"], i))

    def test_lua_vectors(self):
        for line, case in load_adapt_vectors():
            flat = self.conn.command("EVALSHA", self.sha, 0, json.dumps(case))
            for i, step in enumerate(case["steps"]):
                where = "adaptive.jsonl:%d %r step %d" % (line, case["name"], i)
                if step["op"] == "apply":
                    got, flat = flat[:5], flat[5:]
                    self.assertEqual({"changed": bool(got[0]),
                                      "state": dict(zip(("amt", "td", "tc", "tl"), got[1:]))},
                                     step["expect"], where)
                else:
                    got, flat = flat[0], flat[1:]
                    self.assertEqual(got, step["expect"], where)
            self.assertEqual(flat, [], "wrapper returned extra values")

    def test_no_globals(self):
        r = self.conn.command("EVAL", self.lib + "\nreturn 1", 0)
        self.assertEqual(r, 1)


class TestOverrideVectors(unittest.TestCase):
    """scripts/lib/override.lua in a real redis-server against the vectors
    check_limiter_override.c replays (their expectations are exact rationals, written
    by tests/vectors/override/gen.py)."""

    @classmethod
    def setUpClass(cls):
        from tests.integ.harness import RedisServer
        cls.redis = RedisServer().start()
        with open(ADAPT_LUA) as f:
            adapt = f.read()
        with open(OVR_LUA) as f:
            cls.lib = adapt + "\n" + f.read()
        with open(OVR_WRAPPER_LUA) as f:
            cls.wrapper = f.read()
        cls.conn = cls.redis.connect(timeout=30.0)
        with open(OVR_VECTORS) as f:
            cls.cases = [json.loads(line) for line in f if line.strip()]

    @classmethod
    def tearDownClass(cls):
        cls.conn.close()
        cls.redis.cleanup()

    def test_lua_vectors(self):
        self.assertGreaterEqual(len(self.cases), 100)
        got = self.conn.command("EVAL", self.lib + "\n" + self.wrapper, 0,
                                json.dumps([{"fn": c["fn"], "args": c["args"]} for c in self.cases]))
        self.assertEqual(len(got), len(self.cases))
        for i, (c, g) in enumerate(zip(self.cases, got), 1):
            self.assertEqual(g, c["want"], "override.jsonl:%d %s%r" % (i, c["fn"], c["args"]))

    def test_no_globals(self):
        self.assertEqual(self.conn.command("EVAL", self.lib + "\nreturn 1", 0), 1)


def random_case(rnd, kind):
    """A case of random steps, small or huge numbers, time moving on (and
    sometimes back)."""
    def size(small, huge):
        return huge - rnd.randrange(3) if rnd.randrange(4) == 0 else 1 + rnd.randrange(small)

    params = {"kind": kind, "amount": size(20, MAX_AMOUNT), "window_ms": size(5000, MAX_WINDOW),
              "burst": 0 if rnd.randrange(2) else size(40, MAX_AMOUNT)}
    cap = max(params["amount"], 50)
    now = 1700000000000 + rnd.randrange(10 ** 6)
    steps = []
    for _ in range(10):
        back = rnd.randrange(2 * params["window_ms"]) if rnd.randrange(8) == 0 else 0
        check = {"now": now - back, "op": "check",
                 "cost": 0 if rnd.randrange(3) == 0 else 1 + rnd.randrange(cap),
                 "floor": 0 if rnd.randrange(2) else rnd.randrange(cap)}
        if rnd.randrange(4) == 0:  # a fractional floor, up to the whole capacity
            check["floor_ppm"] = rnd.choice((FLOOR_WHOLE, FLOOR_WHOLE - 1, 1)) \
                if rnd.randrange(4) == 0 else rnd.randrange(FLOOR_WHOLE)
        steps.append(check)
        amount = rnd.randrange(cap)
        steps.append({"now": now, "op": "book",
                      "amount": -amount if rnd.randrange(4) == 0 else amount})
        now += 0 if rnd.randrange(3) == 0 else rnd.randrange(2 * params["window_ms"])
    return {"name": "random", "params": params, "state": {"a": 0, "b": 0, "t": 0},
            "steps": steps}


if __name__ == "__main__":
    if sys.argv[1:] == ["--regen"]:
        regen()
    else:
        unittest.main()
