/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * adaptive.h - the adaptive amount of one key: AIMD from upstream outcomes.
 *
 * Owns: the state layout of a key's learned amount (struct adapt_state),
 * the arithmetic that moves it on an outcome (adapt_apply) and the scaling
 * of a rule's amount by it (adapt_scale). Pure like the strategies: no
 * clock, no allocation, no logging. scripts/lib/adaptive.lua mirrors these
 * functions name for name; tests/vectors/adaptive/adaptive.jsonl is the
 * contract both are tested against.
 *
 * Units: the amount is in milli-units of the scope's first requests rule
 * (its AMOUNT per its WINDOW), so 18.5 requests a second under a 60/1s
 * rule is 18500; times are milliseconds on the caller's clock (Redis TIME
 * in the scripts, the monotonic clock in process). Every product stays
 * below 2^53 (amounts <= 10^12 milli-units, factors <= 1000), except the
 * one in adapt_scale, which both languages compute in IEEE doubles in the
 * same order and so round alike.
 */

#ifndef ADMITD_ADAPTIVE_H
#define ADMITD_ADAPTIVE_H

#include <stdbool.h>
#include <stdint.h>

enum adapt_outcome {
	ADAPT_NONE = 0, /* not reported: moves nothing */
	ADAPT_OK,	/* the upstream served the call */
	ADAPT_LIMITED,	/* the upstream refused it for rate (429, 503 with Retry-After) */
	ADAPT_ERROR,	/* any other failure: not a rate signal, moves nothing */
};

struct adapt_params {
	int64_t ceil;	     /* milli-units: the configured amount */
	int64_t floor;	     /* milli-units, 1 <= floor < ceil */
	int64_t factor;	     /* per mille, 1..999: a decrease multiplies by factor / 1000 */
	int64_t step;	     /* milli-units added by an increase, >= 1 */
	int64_t interval_ms; /* at most one decrease, and one increase, per interval */
};

/*
 * One key's learned amount. All zero is a fresh key: at the ceiling, never
 * changed. amt 0 means "the ceiling", whatever the ceiling is now, so a
 * reload that raises it takes the keys at the ceiling along; any other amt
 * is clamped into [floor, ceil] when read (adapt_amount), which is how a
 * reload that narrows the range clamps every key. The Redis hash holds the
 * same four numbers as fields amt, td, tc, tl.
 */
struct adapt_state {
	int64_t amt; /* milli-units; 0: the ceiling */
	int64_t td;  /* last decrease (0: never) */
	int64_t tc;  /* last change of amt (0: never) */
	int64_t tl;  /* last limited outcome (0: never) */
};

/* adapt_amount - the effective amount, in milli-units: amt clamped into the range. */
int64_t adapt_amount(const struct adapt_state *st, const struct adapt_params *p);

/*
 * adapt_apply - fold one outcome reported at now into st:
 * - limited: multiplies the amount by factor/1000 (not below floor), unless
 *   a decrease happened less than an interval ago (a burst of refusals from
 *   one overload counts once); either way it is remembered as the last
 *   limited outcome;
 * - ok: adds step (not above the ceiling) once an interval has passed
 *   since both the last change and the last limited outcome;
 * - error, none: nothing.
 * Time never runs backwards: now is taken as at least the latest instant
 * st holds. Returns true when st changed (and must be written back).
 */
bool adapt_apply(struct adapt_state *st, const struct adapt_params *p, int64_t now,
		 enum adapt_outcome o);

/*
 * adapt_scale - a rule's amount (or burst) v under the effective amount
 * amt of a range whose ceiling is ceil: v * amt / ceil rounded down, at
 * least 1; v itself when amt is the ceiling or v is 0 (a burst that
 * follows the amount).
 */
int64_t adapt_scale(int64_t v, int64_t amt, int64_t ceil);

/*
 * adapt_ttl_ms - how long a key's learned amount outlives its last change:
 * 60 intervals, at least 10 minutes. An idle key then starts again at the
 * ceiling, as a new key does.
 */
int64_t adapt_ttl_ms(const struct adapt_params *p);

/* adapt_outcome_parse - "ok", "limited", "error"; -1 for anything else. */
int adapt_outcome_parse(const char *s);

#endif
