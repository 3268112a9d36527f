"""gen.py - writes override.jsonl: the override arithmetic's contract.

Each line is one call of the arithmetic that bounds a key's override
(daemon/limiter/limiter.c lim_ovr_*, scripts/lib/override.lua ovr_*) with its
expected result, computed here in exact rational arithmetic (Fraction), a
third way of writing the same rules:
  cap(v, milli)       the loosest amount an override may give a rule of amount v:
                      floor(v * milli / 1000), clamped to 1..10^9
  amount(v, o, milli) the amount in force: v when o <= 0 or milli <= 0, else
                      min(o, cap(v, milli))
  delay(d, o, milli)  the min_delay in force: d when o < 0, d <= 0 or
                      milli <= 0, else max(o, floor(d * 1000 / milli))
  burst(b, a, v)      a burst b of a rule of amount v, when the amount
                      becomes a: floor(b * a / v), at least 1

    python3 tests/vectors/override/gen.py > tests/vectors/override/override.jsonl
"""

import json
import math
import random
from fractions import Fraction

MAX = 10 ** 9


def cap(v, milli):
    return max(1, min(MAX, math.floor(Fraction(v * milli, 1000))))


def amount(v, o, milli):
    if o <= 0 or milli <= 0:
        return v
    return min(o, cap(v, milli))


def delay(d, o, milli):
    if o < 0 or d <= 0 or milli <= 0:
        return d
    return max(o, math.floor(Fraction(d * 1000, milli)))


def burst(b, a, v):
    return max(1, math.floor(Fraction(b * a, v)))


FNS = {"cap": cap, "amount": amount, "delay": delay, "burst": burst}

HAND = [
    ("cap", [10, 2000]), ("cap", [10, 1000]), ("cap", [7, 1500]), ("cap", [1, 1000]),
    ("cap", [MAX, 1000000]), ("cap", [999999999, 1001]), ("cap", [3, 1333]),
    ("amount", [10, 1, 2000]), ("amount", [10, 20, 2000]), ("amount", [10, 21, 2000]),
    ("amount", [10, 0, 2000]), ("amount", [10, 5, 0]), ("amount", [600, 1000, 1000]),
    ("amount", [600, 599, 1000]), ("amount", [5, 7, 1500]),
    ("delay", [2000, 500, 4000]), ("delay", [2000, 499, 4000]), ("delay", [2000, -1, 4000]),
    ("delay", [0, 300, 4000]), ("delay", [2000, 10000, 1000]), ("delay", [2000, 0, 1000]),
    ("delay", [1000, 1, 3000]), ("delay", [86400000, 0, 1000000]), ("delay", [7, 3, 2500]),
    ("burst", [100, 50, 100]), ("burst", [10, 1, 60]), ("burst", [10, 7, 3]),
    ("burst", [60, 120, 60]), ("burst", [MAX, MAX, 1]), ("burst", [3, 2, 7]),
]


def main():
    rnd = random.Random(18)
    cases = list(HAND)
    for _ in range(40):
        milli = rnd.choice([0, 1000, 1001, 1500, 2000, 2500, 4000, 10000, 1000000])
        v = rnd.choice([1, 2, 3, 7, 60, 600, 1000, 99991, 10 ** 6, MAX])
        cases.append(("cap", [v, milli]))
        cases.append(("amount", [v, rnd.randint(-1, 3 * v), milli]))
        d = rnd.choice([0, 1, 250, 1000, 2000, 86400000])
        cases.append(("delay", [d, rnd.randint(-1, 2 * d + 1), milli]))
        # Products below 2^53, where doubles (C, Lua) are exact; beyond, the
        # two languages still round alike (the same IEEE operations).
        b = rnd.randint(1, MAX)
        a = rnd.randint(1, min(MAX, (1 << 53) // b))
        cases.append(("burst", [b, a, rnd.randint(1, MAX)]))
    for fn, args in cases:
        print(json.dumps({"fn": fn, "args": args, "want": FNS[fn](*args)}))


if __name__ == "__main__":
    main()
