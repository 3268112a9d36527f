/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * adaptive.c - AIMD of a key's amount from upstream outcomes (adaptive.h).
 *
 * Owns: nothing but arithmetic. scripts/lib/adaptive.lua is the same code
 * in Lua, line for line.
 */

#include "adaptive.h"

#include <math.h>
#include <string.h>

#define ADAPT_TTL_MIN_MS    (10 * 60 * 1000LL)
#define ADAPT_TTL_INTERVALS 60

int64_t adapt_amount(const struct adapt_state *st, const struct adapt_params *p)
{
	if (st->amt <= 0 || st->amt >= p->ceil)
		return p->ceil;
	if (st->amt < p->floor)
		return p->floor;
	return st->amt;
}

/* The latest instant st holds: now is never taken as earlier. */
static int64_t adapt_now(const struct adapt_state *st, int64_t now)
{
	if (st->td > now)
		now = st->td;
	if (st->tc > now)
		now = st->tc;
	if (st->tl > now)
		now = st->tl;
	return now;
}

/* Store a as amt: the ceiling is kept as 0 (see struct adapt_state). */
static void adapt_set(struct adapt_state *st, const struct adapt_params *p, int64_t a, int64_t now)
{
	int64_t old = adapt_amount(st, p);

	st->amt = a >= p->ceil ? 0 : a;
	if (a != old)
		st->tc = now;
}

bool adapt_apply(struct adapt_state *st, const struct adapt_params *p, int64_t now,
		 enum adapt_outcome o)
{
	int64_t a = adapt_amount(st, p), n = adapt_now(st, now), since;

	if (o == ADAPT_LIMITED) {
		st->tl = n;
		if (st->td == 0 || n - st->td >= p->interval_ms) {
			int64_t d = a * p->factor / 1000;
			adapt_set(st, p, d < p->floor ? p->floor : d, n);
			st->td = n;
		}
		return true;
	}
	if (o != ADAPT_OK || a >= p->ceil)
		return false;
	since = st->tc > st->tl ? st->tc : st->tl;
	if (n - since < p->interval_ms)
		return false;
	adapt_set(st, p, a + p->step > p->ceil ? p->ceil : a + p->step, n);
	return true;
}

int64_t adapt_scale(int64_t v, int64_t amt, int64_t ceil)
{
	int64_t s;

	if (v <= 0 || amt >= ceil)
		return v;
	s = (int64_t)floor((double)v * (double)amt / (double)ceil);
	return s < 1 ? 1 : s;
}

int64_t adapt_ttl_ms(const struct adapt_params *p)
{
	int64_t t = p->interval_ms * ADAPT_TTL_INTERVALS;

	return t > ADAPT_TTL_MIN_MS ? t : ADAPT_TTL_MIN_MS;
}

int adapt_outcome_parse(const char *s)
{
	if (s == NULL)
		return -1;
	if (strcmp(s, "ok") == 0)
		return ADAPT_OK;
	if (strcmp(s, "limited") == 0)
		return ADAPT_LIMITED;
	if (strcmp(s, "error") == 0)
		return ADAPT_ERROR;
	return -1;
}
