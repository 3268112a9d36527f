/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * limiter_share.c - the limits one pod applies: its share and the overrides.
 *
 * Owns: a pod's share of a cluster-wide amount (lim_share_of, lim_owner),
 * an override's arithmetic and its life on struct lim_state (lim_ovr_*,
 * lim_override, lim_override_lift), the strategy parameters of a rule as
 * shared (lim_rule_params, lim_key_share, lim_min_delay) and what a scope's
 * conf asks of the limiter (lim_serialized, lim_tracks_leases, ...).
 */

#include "limiter.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t lim_share_of(int64_t v, struct lim_share sh)
{
	int64_t n = (int64_t)sh.div;

	if (sh.div <= 1.0 || v <= 0)
		return v;
	if ((double)n == sh.div && sh.rank >= 0)
		return v / n + (((sh.rank - sh.turn % n) % n + n) % n < v % n ? 1 : 0);
	return (int64_t)((double)v / sh.div);
}

bool lim_owner(struct lim_share sh)
{
	if (sh.div <= 1.0)
		return true;
	if (sh.rank < 0 || sh.pods < 1)
		return false;
	return ((sh.rank - sh.turn % sh.pods) % sh.pods + sh.pods) % sh.pods == 0;
}

int64_t lim_ovr_cap(int64_t v, int64_t milli)
{
	double c = floor((double)v * (double)milli / 1000.0);

	return c > (double)STRAT_MAX_AMOUNT ? STRAT_MAX_AMOUNT : c < 1 ? 1 : (int64_t)c;
}

int64_t lim_ovr_delay_floor(int64_t d, int64_t milli)
{
	return milli <= 0 ? d : (int64_t)floor((double)d * 1000.0 / (double)milli);
}

int64_t lim_ovr_amount(int64_t v, int64_t o, int64_t milli)
{
	int64_t cap;

	if (o <= 0 || milli <= 0)
		return v;
	cap = lim_ovr_cap(v, milli);
	return o > cap ? cap : o;
}

int64_t lim_ovr_delay(int64_t d, int64_t o, int64_t milli)
{
	int64_t fl;

	if (o < 0 || d <= 0 || milli <= 0)
		return d;
	fl = lim_ovr_delay_floor(d, milli);
	return o < fl ? fl : o;
}

int64_t lim_ovr_burst(int64_t b, int64_t a, int64_t v)
{
	double s = floor((double)b * (double)a / (double)v);

	return s < 1 ? 1 : (int64_t)s;
}

struct strat_params lim_rule_params(const struct conf_rule *r, struct lim_share sh)
{
	struct strat_params p = conf_rule_params(r);

	if (sh.ov != NULL && r->idx < sh.ov->nrules && sh.ov->amount[r->idx] > 0) {
		int64_t a = lim_ovr_amount(p.amount, sh.ov->amount[r->idx], sh.ov_milli);
		p.burst = lim_ovr_burst(p.burst, a, p.amount);
		p.amount = a;
	}
	if (sh.ad_ceil > 0 && r->meter == METER_REQUESTS) {
		p.amount = adapt_scale(p.amount, sh.ad_amt, sh.ad_ceil);
		p.burst = adapt_scale(p.burst, sh.ad_amt, sh.ad_ceil);
	}
	p.amount = lim_share_of(p.amount, sh);
	p.burst = lim_share_of(p.burst, sh);
	return p;
}

const struct lim_ovr *lim_ovr_in_force(const struct lim_state *st, const struct conf_scope *cs,
				       int64_t now)
{
	if (st == NULL || st->ov == NULL || cs->override_milli <= 0 || now >= st->ov->until ||
	    st->ov->nrules != cs->nrules)
		return NULL;
	return st->ov;
}

struct lim_share lim_key_share(const struct lim_state *st, const struct conf_scope *cs,
			       struct lim_share sh, int64_t now)
{
	if (cs->adaptive && st != NULL) {
		sh.ad_amt = adapt_amount(&st->ad, &cs->adapt);
		sh.ad_ceil = cs->adapt.ceil;
	}
	if ((sh.ov = lim_ovr_in_force(st, cs, now)) != NULL)
		sh.ov_milli = cs->override_milli;
	return sh;
}

int64_t lim_min_delay(const struct conf_scope *cs, struct lim_share sh)
{
	int64_t d = cs->min_delay_ms;

	if (sh.ov != NULL)
		d = lim_ovr_delay(d, sh.ov->min_delay_ms, sh.ov_milli);
	/* a serialized key has one pod serving it in fallback: its whole pace */
	return sh.div <= 1.0 || lim_serialized(cs) ? d : (int64_t)((double)d * sh.div);
}

bool lim_override(struct lim_state *st, const struct conf_scope *cs, int64_t until,
		  int64_t min_delay_ms, const int64_t *amount)
{
	struct lim_ovr *ov = malloc(sizeof(*ov) + (cs->nrules + 1) * sizeof(ov->amount[0]));

	if (ov == NULL)
		return false;
	ov->until = until;
	ov->min_delay_ms = min_delay_ms;
	ov->nrules = (uint32_t)cs->nrules;
	for (size_t i = 0; i < cs->nrules; i++)
		ov->amount[i] = amount != NULL ? amount[i] : 0;
	free(st->ov);
	st->ov = ov;
	return true;
}

void lim_override_lift(struct lim_state *st)
{
	free(st->ov);
	st->ov = NULL;
}

bool lim_serialized(const struct conf_scope *cs)
{
	return conf_plan_of(cs, NULL)->serialized;
}

bool lim_tracks_leases(const struct conf_scope *cs)
{
	return conf_plan_of(cs, NULL)->tracks_leases;
}

bool lim_release_books(const struct conf_scope *cs, const struct conf_class *cls)
{
	return conf_plan_of(cs, cls)->release_books;
}

bool lim_meters_tokens(const struct conf_scope *cs, const struct conf_class *cls, const char *name)
{
	const struct conf_plan *pl = conf_plan_of(cs, cls);
	size_t i;

	for (i = 0; i < pl->nrules; i++) {
		const struct conf_rule *r = &cs->rules[pl->rules[i]];
		if (r->meter == METER_TOKENS || (r->meter == METER_TOKENS_KEY &&
						 (name == NULL || strcmp(r->meter_key, name) == 0)))
			return true;
	}
	return false;
}
