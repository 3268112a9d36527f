/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * strategy.h - the five rate strategies as pure functions.
 *
 * Owns: the state layout of one rule's counter for one key, and the
 * arithmetic that decides and books against it. Nothing here reads a clock,
 * allocates, logs or touches the event loop: every function is a function of
 * (state, params, now_ms, request). scripts/lib/strategy.lua mirrors these
 * functions name for name; tests/vectors/strategy/ (one .jsonl per kind) is the contract
 * both are tested against.
 *
 * Units: times are integer milliseconds; amounts are whole units (requests
 * or tokens) at the interface and milli-units inside the state of the
 * bucket strategies, so refill at AMOUNT/WINDOW is exact in integers. Every
 * intermediate product stays below 2^53 for the limits the conf accepts
 * (AMOUNT and burst <= 10^9, WINDOW <= 1 day), so Lua's doubles compute the
 * same numbers as C's int64.
 */

#ifndef ADMITD_STRATEGY_H
#define ADMITD_STRATEGY_H

#include <stdbool.h>
#include <stdint.h>

enum strat_kind {
	STRAT_TOKEN_BUCKET = 0, /* refills AMOUNT per WINDOW up to burst */
	STRAT_SLIDING_WINDOW,	/* two fixed buckets, previous one weighted */
	STRAT_FIXED_WINDOW,	/* counter reset at floor(now/WINDOW) */
	STRAT_LEAKY_BUCKET,	/* level drains AMOUNT per WINDOW; full refuses */
	STRAT_SESSION_WINDOW,	/* window anchored at first request after reset */
	STRAT__COUNT
};

/* Limits the conf accepts, so products stay exact in doubles. */
#define STRAT_MAX_AMOUNT    1000000000LL
#define STRAT_MAX_WINDOW_MS 86400000LL

struct strat_params {
	enum strat_kind kind;
	int64_t amount;	   /* budget per window, >= 1 */
	int64_t window_ms; /* >= 1 */
	int64_t burst;	   /* bucket capacity (token/leaky); 0 means = amount */
};

/*
 * One rule's counter for one key. All zero is a fresh counter (a full
 * token bucket, an empty window). The meaning of a, b and t per kind is
 * documented in each strategy's file; the Lua keeps the same three numbers
 * in a hash with fields a, b, t.
 */
struct strat_state {
	int64_t a;
	int64_t b;
	int64_t t;
};

struct strat_result {
	bool allowed;
	int64_t retry_after_ms; /* 0 when allowed; else >= 1 */
};

/*
 * strat_check - would taking `cost` units now be allowed while leaving at
 * least `floor` units untouched? Pure: never modifies st. cost 0 asks "is
 * the budget not overdrawn" (used by token meters at acquire: allowed iff
 * more than `floor` units remain). retry_after_ms is the shortest wait after
 * which the same check would pass if nothing else happened, or -1 when it
 * never can (cost + floor larger than the capacity).
 */
struct strat_result strat_check(const struct strat_state *st, const struct strat_params *p,
				int64_t now_ms, int64_t cost, int64_t floor);

/*
 * strat_full_in - how long until the counter is full again (nothing used):
 * what strat_check of the whole capacity would give as retry_after_ms (0
 * when it is full now), worked out without a search where the kind allows.
 */
int64_t strat_full_in(const struct strat_state *st, const struct strat_params *p, int64_t now_ms);

/*
 * strat_left - the most units strat_check would let one request take now,
 * leaving floor untouched (0 when even one would not pass).
 */
int64_t strat_left(const struct strat_state *st, const struct strat_params *p, int64_t now_ms,
		   int64_t floor_units);

/* A floor given as a part of each rule's capacity, in millionths: 100% is this. */
#define STRAT_FLOOR_WHOLE 1000000LL

/*
 * strat_floor_units - the units a floor leaves untouched on a rule of params
 * p: with floor_ppm > 0, floor_ppm millionths of p's capacity (a bucket's
 * burst, a window's amount) rounded down, floor(capacity * ppm / 10^6);
 * else floor_units. Exact: the product stays below 2^53.
 */
int64_t strat_floor_units(const struct strat_params *p, int64_t floor_units, int64_t floor_ppm);

/* strat_fits - strat_check's allowed alone (no retry_after is worked out). */
bool strat_fits(const struct strat_state *st, const struct strat_params *p, int64_t now_ms,
		int64_t cost, int64_t floor_units);

/*
 * strat_book - charge `amount` units now, unconditionally (a token meter's
 * post-hoc charge may overdraw; an overdrawn counter refuses until it has
 * recovered). A negative amount refunds (rollback of a booking).
 */
void strat_book(struct strat_state *st, const struct strat_params *p, int64_t now_ms,
		int64_t amount);

/*
 * strat_used - the units of the capacity taken at now: the capacity less the
 * most units strat_check would allow (the capacity when overdrawn). Pure.
 * What a fresh counter must be charged to refuse what st refuses.
 */
int64_t strat_used(const struct strat_state *st, const struct strat_params *p, int64_t now_ms);

/*
 * strat_ttl_ms - after this long without activity the counter is
 * indistinguishable from a fresh one; it bounds the TTL of its Redis key and
 * the life of an idle in-process counter.
 */
int64_t strat_ttl_ms(const struct strat_params *p);

/* strat_kind_name / strat_kind_parse: "token-bucket" etc.; parse gives -1. */
const char *strat_kind_name(enum strat_kind k);
int strat_kind_parse(const char *s);

#endif
