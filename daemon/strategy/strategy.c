/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * strategy.c - dispatch from enum strat_kind to the five strategies, and
 * the parts of a check that are the same for all of them.
 *
 * Owns: the kind table and names, parameter normalisation, the clamping of
 * caller numbers, the "can never pass" test, and the exact retry_after
 * search; the integer helpers it shares with the strategy files are
 * strategy_impl.h's. A strategy file only answers "does this probe fit at
 * instant T?" (a non-decreasing predicate in T), so the smallest passing
 * wait is found here once, by bisection between "now" (fails) and "now +
 * ttl" (passes), and is exact by construction. Mirrored by
 * scripts/lib/strategy.lua.
 */

#include "strategy.h"

#include "strategy_impl.h"

#include <stddef.h>
#include <string.h>

/* Indexed by enum strat_kind. */
static const struct strat_ops *const strat_table[STRAT__COUNT] = {
	[STRAT_TOKEN_BUCKET] = &strat_token_bucket_ops,
	[STRAT_SLIDING_WINDOW] = &strat_sliding_window_ops,
	[STRAT_FIXED_WINDOW] = &strat_fixed_window_ops,
	[STRAT_LEAKY_BUCKET] = &strat_leaky_bucket_ops,
	[STRAT_SESSION_WINDOW] = &strat_session_window_ops,
};

/* The kind's table entry, or NULL for a kind out of range. */
static const struct strat_ops *strat_ops_of(enum strat_kind k)
{
	return (unsigned)k < STRAT__COUNT ? strat_table[k] : NULL;
}

/*
 * strat_normalise - p with amount and window in their valid ranges and burst
 * resolved to the capacity (0 = amount; windows have no burst), so the
 * strategy files never divide by zero or see a product past 2^53.
 */
static struct strat_params strat_normalise(const struct strat_ops *ops,
					   const struct strat_params *p)
{
	struct strat_params n = *p;

	n.amount = strat_clamp(p->amount, 1, STRAT_MAX_AMOUNT);
	n.window_ms = strat_clamp(p->window_ms, 1, STRAT_MAX_WINDOW_MS);
	n.burst = strat_clamp(p->burst, 0, STRAT_MAX_AMOUNT);
	if (!ops->has_burst || n.burst == 0)
		n.burst = n.amount;
	return n;
}

/*
 * strat_retry - the smallest wait after which pr fits, given that it does
 * not fit at now_ms. fits() is non-decreasing in time and reads now < t as
 * t, so the answer lies in (max(now, t), max(now, t) + ttl]: bisect.
 */
static int64_t strat_retry(const struct strat_ops *ops, const struct strat_probe *pr,
			   int64_t now_ms)
{
	int64_t lo = strat_now(pr->st, now_ms);
	int64_t hi = lo + ops->ttl(pr->p);

	if (!ops->fits(pr, hi))
		return hi - now_ms; /* only past STRAT_WAIT_MAX_MS */
	while (hi - lo > 1) {
		int64_t mid = lo + (hi - lo) / 2;

		if (ops->fits(pr, mid))
			hi = mid;
		else
			lo = mid;
	}
	return hi - now_ms;
}

/*
 * The probe of a check of cost units leaving floor_units on st (np holds
 * its normalised params): false when it can never pass (cost + floor above
 * the capacity).
 */
static inline bool strat_probe_of(const struct strat_ops *ops, const struct strat_state *st,
				  const struct strat_params *p, int64_t cost, int64_t floor_units,
				  struct strat_params *np, struct strat_probe *pr)
{
	*np = strat_normalise(ops, p);
	cost = strat_clamp(cost, 0, STRAT_UNITS_MAX);
	floor_units = strat_clamp(floor_units, 0, STRAT_UNITS_MAX);
	pr->st = st;
	pr->p = np;
	pr->need = cost == 0 ? 1 : cost * ops->unit;
	pr->room = (np->burst - floor_units) * ops->unit;
	return pr->need <= pr->room;
}

struct strat_result strat_check(const struct strat_state *st, const struct strat_params *p,
				int64_t now_ms, int64_t cost, int64_t floor_units)
{
	struct strat_result r = { .allowed = false, .retry_after_ms = -1 };
	const struct strat_ops *ops = strat_ops_of(p->kind);
	struct strat_params np;
	struct strat_probe pr;

	if (ops == NULL || !strat_probe_of(ops, st, p, cost, floor_units, &np, &pr))
		return r; /* an unknown kind, or cost + floor above the capacity: never */
	if (ops->fits(&pr, now_ms)) {
		r.allowed = true;
		r.retry_after_ms = 0;
		return r;
	}
	r.retry_after_ms = strat_retry(ops, &pr, now_ms);
	return r;
}

int64_t strat_full_in(const struct strat_state *st, const struct strat_params *p, int64_t now_ms)
{
	const struct strat_ops *ops = strat_ops_of(p->kind);
	struct strat_params np;
	struct strat_probe pr;
	int64_t lo, hi, at;

	if (ops == NULL)
		return -1;
	np = strat_normalise(ops, p);
	if (ops->level == NULL || ops->empty_at == NULL) { /* the whole capacity, as a cost */
		struct strat_result r = strat_check(st, p, now_ms, np.burst, 0);
		return r.allowed ? 0 : r.retry_after_ms;
	}
	pr.st = st;
	pr.p = &np;
	pr.need = pr.room = np.burst * ops->unit;
	if (ops->level(&pr, now_ms) <= 0)
		return 0;
	/* strat_retry's answer: the first instant past lo at which it fits,
	 * no later than lo + ttl */
	lo = strat_now(st, now_ms);
	hi = lo + ops->ttl(&np);
	at = ops->empty_at(&pr);
	if (at > hi)
		at = hi;
	if (at <= lo)
		at = lo + 1;
	return at - now_ms;
}

bool strat_fits(const struct strat_state *st, const struct strat_params *p, int64_t now_ms,
		int64_t cost, int64_t floor_units)
{
	const struct strat_ops *ops = strat_ops_of(p->kind);
	struct strat_params np;
	struct strat_probe pr;

	return ops != NULL && strat_probe_of(ops, st, p, cost, floor_units, &np, &pr) &&
	       ops->fits(&pr, now_ms);
}

int64_t strat_left(const struct strat_state *st, const struct strat_params *p, int64_t now_ms,
		   int64_t floor_units)
{
	const struct strat_ops *ops = strat_ops_of(p->kind);
	struct strat_params np;
	struct strat_probe pr;
	int64_t lo = 0, hi, mid; /* lo units fit; hi + 1 do not */

	if (ops == NULL)
		return 0;
	np = strat_normalise(ops, p);
	floor_units = strat_clamp(floor_units, 0, STRAT_UNITS_MAX);
	if (floor_units >= np.burst)
		return 0;
	pr.st = st;
	pr.p = &np;
	pr.room = (np.burst - floor_units) * ops->unit;
	hi = np.burst - floor_units;
	if (ops->level != NULL) { /* fits is level + need <= room: no search */
		int64_t lv = ops->level(&pr, now_ms);
		lo = lv >= pr.room ? 0 : (pr.room - lv) / ops->unit;
		return lo < hi ? lo : hi;
	}
	while (lo < hi) { /* the most units that fit now */
		mid = lo + (hi - lo + 1) / 2;
		pr.need = mid * ops->unit;
		if (ops->fits(&pr, now_ms))
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

int64_t strat_floor_units(const struct strat_params *p, int64_t floor_units, int64_t floor_ppm)
{
	const struct strat_ops *ops = strat_ops_of(p->kind);

	if (floor_ppm <= 0 || ops == NULL)
		return floor_units;
	return strat_normalise(ops, p).burst * strat_clamp(floor_ppm, 0, STRAT_FLOOR_WHOLE) /
	       STRAT_FLOOR_WHOLE;
}

int64_t strat_used(const struct strat_state *st, const struct strat_params *p, int64_t now_ms)
{
	const struct strat_ops *ops = strat_ops_of(p->kind);

	if (ops == NULL)
		return 0;
	return strat_normalise(ops, p).burst - strat_left(st, p, now_ms, 0);
}

void strat_book(struct strat_state *st, const struct strat_params *p, int64_t now_ms,
		int64_t amount)
{
	const struct strat_ops *ops = strat_ops_of(p->kind);
	struct strat_params np;

	if (ops == NULL)
		return;
	np = strat_normalise(ops, p);
	amount = strat_clamp(amount, -STRAT_UNITS_MAX, STRAT_UNITS_MAX);
	ops->book(st, &np, now_ms, amount * ops->unit);
}

int64_t strat_ttl_ms(const struct strat_params *p)
{
	const struct strat_ops *ops = strat_ops_of(p->kind);
	struct strat_params np;

	if (ops == NULL)
		return 0;
	np = strat_normalise(ops, p);
	return ops->ttl(&np);
}

const char *strat_kind_name(enum strat_kind k)
{
	const struct strat_ops *ops = strat_ops_of(k);

	return ops != NULL ? ops->name : NULL;
}

int strat_kind_parse(const char *s)
{
	if (s == NULL)
		return -1;
	for (int k = 0; k < STRAT__COUNT; k++)
		if (strcmp(strat_table[k]->name, s) == 0)
			return k;
	return -1;
}
