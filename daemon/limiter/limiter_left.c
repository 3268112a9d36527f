/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * limiter_left.c - what is left of a key's limits, for replies and status.
 *
 * Owns: struct lim_left accounting: the units a strategy has left
 * (lim_units_left), the tightest limit overall and per meter, merged over
 * targets and aged for a cached answer (lim_left_*), and a meter's name.
 */

#include "limiter.h"
#include "limiter_int.h"

#include <stdio.h>
#include <string.h>

int64_t lim_units_left(const struct strat_state *st, const struct strat_params *p, int64_t now,
		       int64_t cap, int64_t floor)
{
	int64_t left = cap > 0 ? strat_left(st, p, now, floor) : 0;

	return left < cap ? left : cap;
}

/* Fold one limit into acc's overall tightest: the smallest part of its capacity left. */
static void lim_left_fold(struct lim_left *acc, int64_t remaining, int64_t capacity,
			  int64_t reset_ms)
{
	if (capacity <= 0)
		return;
	if (remaining < 0)
		remaining = 0;
	if (reset_ms < 0)
		reset_ms = 0;
	/* a smaller part of its capacity left; doubles: the products can pass int64 */
	if (acc->has &&
	    (double)remaining * (double)acc->capacity >= (double)acc->remaining * (double)capacity)
		return;
	acc->has = true;
	acc->remaining = remaining;
	acc->capacity = capacity;
	acc->reset_ms = reset_ms;
}

/* Do a and b count the same meter? */
static bool lim_meter_same(const struct lim_meter_left *a, const struct lim_meter_left *b)
{
	if (a->meter != b->meter)
		return false;
	if (a->key == NULL || b->key == NULL)
		return a->key == b->key;
	return strcmp(a->key, b->key) == 0;
}

/* Fold one limit into its meter's tightest in acc: the fewest units left. */
static void lim_left_meter(struct lim_left *acc, const struct lim_meter_left *x)
{
	struct lim_meter_left v = *x;
	size_t i;

	if (v.limit <= 0)
		return;
	if (v.remaining < 0)
		v.remaining = 0;
	if (v.reset_ms < 0)
		v.reset_ms = 0;
	for (i = 0; i < acc->nm && !lim_meter_same(&acc->m[i], &v); i++)
		;
	if (i == acc->nm) {
		if (acc->nm == LIM_LEFT_METERS)
			return; /* a meter past those a reply tells apart */
		acc->m[acc->nm++] = v;
		return;
	}
	if (v.remaining < acc->m[i].remaining ||
	    (v.remaining == acc->m[i].remaining && v.reset_ms < acc->m[i].reset_ms))
		acc->m[i] = v;
}

void lim_left_merge(struct lim_left *acc, const struct lim_left *x)
{
	size_t i;

	if (!x->has)
		return;
	lim_left_fold(acc, x->remaining, x->capacity, x->reset_ms);
	for (i = 0; i < x->nm; i++)
		lim_left_meter(acc, &x->m[i]);
}

/* reset_ms as it is elapsed_ms later (never below 0). */
static int64_t lim_reset_after(int64_t reset_ms, int64_t elapsed_ms)
{
	return reset_ms > elapsed_ms ? reset_ms - elapsed_ms : 0;
}

void lim_left_age(struct lim_left *l, int64_t elapsed_ms)
{
	size_t i;

	if (!l->has)
		return;
	l->reset_ms = lim_reset_after(l->reset_ms, elapsed_ms);
	for (i = 0; i < l->nm; i++)
		l->m[i].reset_ms = lim_reset_after(l->m[i].reset_ms, elapsed_ms);
}

const char *lim_meter_name(const struct lim_meter_left *m, char *buf, size_t size)
{
	switch (m->meter) {
	case METER_REQUESTS: return "requests";
	case METER_TOKENS: return "tokens";
	case METER_CONCURRENCY: return "concurrency";
	case METER_TOKENS_KEY: snprintf(buf, size, "tokens.%s", m->key ? m->key : ""); return buf;
	}
	return "requests";
}

void lim_left_add(struct lim_left *acc, const struct lim_meter_left *x)
{
	lim_left_fold(acc, x->remaining, x->limit, x->reset_ms);
	lim_left_meter(acc, x);
}

void lim_left_scope(struct lim_left *acc, const struct conf_scope *cs, const struct conf_class *cls,
		    struct lim_share sh, const struct strat_state *rules, bool by_plan,
		    int64_t leases, int64_t quota_used, int64_t quota_newest, int64_t now)
{
	static const struct strat_state fresh;
	const struct conf_plan *pl = conf_plan_of(cs, cls);
	int64_t held = leases > 0 ? cs->lease_ttl_ms : 0;
	size_t k;

	if (cs->cluster_concurrency > 0) {
		int64_t cap = lim_which_limit(cs, cls, PLAN_WHICH_CLUSTER, sh);
		lim_left_add(acc, &(struct lim_meter_left){ .meter = METER_CONCURRENCY,
							    .rule = PLAN_RULE_CLUSTER,
							    .limit = cap,
							    .remaining = cap - leases,
							    .reset_ms = held });
	}
	if (cs->quota > 0) {
		int64_t cap = lim_which_limit(cs, cls, PLAN_WHICH_QUOTA, sh);
		lim_left_add(acc, &(struct lim_meter_left){
				      .meter = METER_REQUESTS,
				      .rule = LIM_RULE_QUOTA,
				      .limit = cap,
				      .remaining = cap - quota_used,
				      .reset_ms = quota_used > 0
						      ? quota_newest + cs->quota_window_ms - now
						      : 0 });
	}
	for (k = 0; k < pl->nrules; k++) {
		size_t i = pl->rules[k];
		const struct conf_rule *rule = &cs->rules[i];
		const struct strat_state *st = rules == NULL ? &fresh : &rules[by_plan ? k : i];
		struct lim_meter_left x = { .meter = rule->meter,
					    .key = rule->meter_key,
					    .rule = rule->name,
					    .idx = (long)i,
					    .limit = lim_which_limit(cs, cls, (long)i, sh) };
		struct strat_params sp;

		if (rule->meter == METER_CONCURRENCY) {
			x.remaining = x.limit - leases;
			x.reset_ms = held;
			lim_left_add(acc, &x);
			continue;
		}
		sp = lim_rule_params(rule, sh);
		if (x.limit > 0) { /* full again: nothing of it used */
			x.remaining =
			    lim_units_left(st, &sp, now, x.limit, conf_class_floor(cls, &sp));
			x.reset_ms = strat_full_in(st, &sp, now);
			lim_left_add(acc, &x);
		}
	}
}

void lim_left_state(struct lim_left *acc, struct lim_state *st, const struct conf_scope *cs,
		    const struct conf_class *cls, struct lim_share sh, int64_t now)
{
	int64_t leases, used, oldest;

	lim_view(st, cs, now, &leases, &used, &oldest);
	lim_left_scope(acc, cs, cls, lim_key_share(st, cs, sh, now), st->rules, false, leases, used,
		       used > 0 ? lim_quota_at(st, (size_t)used - 1) : 0, now);
}
