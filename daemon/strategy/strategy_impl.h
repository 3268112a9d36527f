/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * strategy_impl.h - private to daemon/strategy: the table each strategy
 * file fills in, and the exact integer helpers they share.
 *
 * Owns: struct strat_ops (one per kind, defined in the kind's file and
 * listed by strategy.c), struct strat_probe (one check's question) and the
 * exact integer helpers (strat_clamp, strat_now, strat_muldiv), static
 * inline so that no strategy file calls back into strategy.c: strategy.c
 * sits on top and calls down to the kinds, never the other way. The
 * generic parts of strat_check (clamping, the "never" test and the search
 * for the exact retry_after) live once in strategy.c; a strategy only says
 * whether a probe fits at a given instant, how to book, and how long its
 * counter lives. scripts/lib/strategy.lua has the same pieces under the
 * same names.
 */

#ifndef ADMITD_STRATEGY_IMPL_H
#define ADMITD_STRATEGY_IMPL_H

#include "strategy.h"

#include <stdbool.h>
#include <stdint.h>

/*
 * Every cost, floor and booked amount is clamped to +-STRAT_UNITS_MAX units
 * before use, and window counters to [0, STRAT_UNITS_MAX]; in milli-units
 * that is ~1.1e15, below 2^53.
 */
#define STRAT_UNITS_MAX (1LL << 40)
/*
 * retry_after_ms and strat_ttl_ms never exceed this (1e15 ms, ~31,700
 * years): only a bucket with burst/amount near 1e9 and a one-day window
 * needs that long, and now + it stays below 2^53.
 */
#define STRAT_WAIT_MAX_MS 1000000000000000LL

/*
 * One check, in the state's own units (milli-units for the buckets):
 * `need` is what the request takes, `room` is the capacity minus the floor.
 * A cost-0 check ("is more than floor left?") needs one state unit: one
 * milli-unit of a bucket, one unit of a window.
 */
struct strat_probe {
	const struct strat_state *st;
	const struct strat_params *p; /* normalised: see strat_normalise */
	int64_t need;
	int64_t room;
};

/*
 * What a kind provides. fits(pr, now) must be non-decreasing in now (once
 * true it stays true while nothing is booked) and must treat now < st->t as
 * now == st->t; book takes state units (already multiplied by unit); ttl
 * is a time after the last booking at which fits holds for every probe
 * whose need <= room (the counter is as good as fresh).
 */
struct strat_ops {
	const char *name;
	int64_t unit;	/* state units per unit: 1000 for buckets, else 1 */
	bool has_burst; /* capacity is burst (0: amount) rather than amount */
	bool (*fits)(const struct strat_probe *pr, int64_t now_ms);
	/* where fits is level + need <= room: the level at now, in state units
	 * (what strat_used reads without a search); NULL otherwise */
	int64_t (*level)(const struct strat_probe *pr, int64_t now_ms);
	/* where level is: the first instant at or after the state's own at
	 * which it is 0, if nothing more is booked (what strat_full_in reads
	 * without a search); NULL otherwise */
	int64_t (*empty_at)(const struct strat_probe *pr);
	void (*book)(struct strat_state *st, const struct strat_params *p, int64_t now_ms,
		     int64_t units);
	int64_t (*ttl)(const struct strat_params *p);
};

extern const struct strat_ops strat_token_bucket_ops;
extern const struct strat_ops strat_sliding_window_ops;
extern const struct strat_ops strat_fixed_window_ops;
extern const struct strat_ops strat_leaky_bucket_ops;
extern const struct strat_ops strat_session_window_ops;

/* ---- exact integer helpers (strategy.c and the strategy files) ---- */

/* strat_clamp - x limited to [lo, hi]. */
static inline int64_t strat_clamp(int64_t x, int64_t lo, int64_t hi)
{
	return x < lo ? lo : x > hi ? hi : x;
}

/* strat_now - the instant a state is read at: time never runs backwards. */
static inline int64_t strat_now(const struct strat_state *st, int64_t now_ms)
{
	return now_ms < st->t ? st->t : now_ms;
}

/*
 * strat_muldiv - floor((x * y + add) / w) and its remainder in *rem, exact
 * although x * y may pass 2^53: needs x, y, add >= 0, 1 <= w <=
 * STRAT_MAX_WINDOW_MS (so w * w < 2^53) and a quotient below 2^53.
 */
static inline int64_t strat_muldiv(int64_t x, int64_t y, int64_t add, int64_t w, int64_t *rem)
{
	/* x*y/w = qx*y + rx*qy + rx*ry/w, and rx*ry < w*w < 2^53. */
	int64_t qx = x / w, rx = x % w;
	int64_t qy = y / w, ry = y % w;
	int64_t n = rx * ry + add;

	*rem = n % w;
	return qx * y + rx * qy + n / w;
}

/* ---- the bucket both bucket kinds are (leaky_bucket.c) ---- */

bool strat_bucket_fits(const struct strat_probe *pr, int64_t now_ms);
int64_t strat_bucket_probe_level(const struct strat_probe *pr, int64_t now_ms);
int64_t strat_bucket_empty_at(const struct strat_probe *pr);
void strat_bucket_book(struct strat_state *st, const struct strat_params *p, int64_t now_ms,
		       int64_t units);
int64_t strat_bucket_ttl(const struct strat_params *p);

#endif
