/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * limiter_state.c - the life of a struct lim_state.
 *
 * Owns: allocating and freeing a key's state, carrying its counters across
 * a reload (lim_state_carry: an unchanged rule keeps its counter, a resized
 * one goes on), dropping what time made irrelevant (lim_purge), reading it
 * for views, status and idleness (lim_view, lim_spent, lim_idle), and
 * resetting it (lim_reset).
 */

#include "limiter.h"
#include "limiter_int.h"

#include <stdlib.h>
#include <string.h>

size_t lim_state_size(const struct conf_scope *cs)
{
	return sizeof(struct lim_state) + cs->nrules * sizeof(struct strat_state);
}

void lim_state_init(struct lim_state *st, const struct conf_scope *cs)
{
	memset(st, 0, lim_state_size(cs));
	st->nrules = (uint32_t)cs->nrules;
}

struct lim_state *lim_state_new(const struct conf_scope *cs)
{
	struct lim_state *st = malloc(lim_state_size(cs));

	if (st != NULL)
		lim_state_init(st, cs);
	return st;
}

void lim_state_clear(struct lim_state *st)
{
	free(st->quota);
	free(st->leases);
	free(st->ov);
	st->quota = NULL;
	st->leases = NULL;
	st->ov = NULL;
	st->quota_n = st->quota_cap = st->quota_head = 0;
	st->nleases = st->leases_cap = 0;
}

void lim_state_free(struct lim_state *st)
{
	if (st == NULL)
		return;
	lim_state_clear(st);
	free(st);
}

bool lim_rule_same(const struct conf_rule *a, const struct conf_rule *b)
{
	if (a->meter != b->meter || (a->meter_key == NULL) != (b->meter_key == NULL) ||
	    (a->meter_key != NULL && strcmp(a->meter_key, b->meter_key) != 0))
		return false;
	return a->sp.kind == b->sp.kind && a->sp.amount == b->sp.amount &&
	       a->sp.window_ms == b->sp.window_ms && a->sp.burst == b->sp.burst;
}

/* Same meter (and meter key) and strategy: the same counter, maybe resized. */
static bool lim_rule_kin(const struct conf_rule *a, const struct conf_rule *b)
{
	return a->meter == b->meter && a->sp.kind == b->sp.kind &&
	       (a->meter_key == NULL) == (b->meter_key == NULL) &&
	       (a->meter_key == NULL || strcmp(a->meter_key, b->meter_key) == 0);
}

/* How many of rules[0..n) are the same as r. */
static size_t lim_count_same(const struct conf_rule *rules, size_t n, const struct conf_rule *r)
{
	size_t i, k = 0;

	for (i = 0; i < n; i++)
		k += lim_rule_same(&rules[i], r);
	return k;
}

/* The old rule an unchanged new rule i takes its counter from: the n-th new
 * rule alike some others takes the n-th old one alike it (each old counter
 * goes to one new rule at most, with no allocation); SIZE_MAX: none. */
static size_t lim_carry_same(const struct conf_scope *ncs, size_t i, const struct conf_scope *ocs)
{
	size_t rank = lim_count_same(ncs->rules, i, &ncs->rules[i]), j;

	for (j = 0; j < ocs->nrules; j++)
		if (lim_rule_same(&ocs->rules[j], &ncs->rules[i]) && rank-- == 0)
			return j;
	return SIZE_MAX;
}

/* Does an unchanged new rule take old rule j's counter? */
static bool lim_carry_taken(const struct conf_scope *ocs, size_t j, const struct conf_scope *ncs)
{
	return lim_count_same(ocs->rules, j, &ocs->rules[j]) <
	       lim_count_same(ncs->rules, ncs->nrules, &ocs->rules[j]);
}

void lim_state_carry(struct lim_state *dst, const struct conf_scope *ncs, struct lim_state *src,
		     const struct conf_scope *ocs)
{
	size_t i, j;

	dst->penalty_until = src->penalty_until;
	dst->last_ms = src->last_ms;
	dst->spent_gen = src->spent_gen;
	dst->ad = src->ad; /* clamped into the new range when read */
	if (src->ov != NULL && ocs->nrules == ncs->nrules) { /* rules by position, as in Redis */
		dst->ov = src->ov;
		src->ov = NULL;
	}
	dst->leases = src->leases;
	dst->nleases = src->nleases;
	dst->leases_cap = src->leases_cap;
	src->leases = NULL;
	src->nleases = src->leases_cap = 0;
	if (ocs->min_delay_ms == ncs->min_delay_ms &&
	    ocs->cluster_concurrency == ncs->cluster_concurrency)
		dst->next_at = src->next_at;
	if (ocs->quota == ncs->quota && ocs->quota_window_ms == ncs->quota_window_ms) {
		dst->quota = src->quota;
		dst->quota_head = src->quota_head;
		dst->quota_n = src->quota_n;
		dst->quota_cap = src->quota_cap;
		src->quota = NULL;
		src->quota_head = src->quota_n = src->quota_cap = 0;
	}
	for (i = 0; i < ncs->nrules && i < dst->nrules; i++) {
		j = lim_carry_same(ncs, i, ocs);
		/* Not unchanged: the rule in its place goes on, resized, when it
		 * counts the same way and no unchanged rule took it. */
		if (j == SIZE_MAX && i < ocs->nrules &&
		    lim_rule_kin(&ocs->rules[i], &ncs->rules[i]) && !lim_carry_taken(ocs, i, ncs))
			j = i;
		if (j != SIZE_MAX && j < src->nrules)
			dst->rules[i] = src->rules[j];
	}
}

int64_t lim_quota_at(const struct lim_state *st, size_t i)
{
	return st->quota[(st->quota_head + i) % st->quota_cap];
}

/* Drop what time has made irrelevant: expired leases, old quota instants. */
void lim_purge(struct lim_state *st, const struct conf_scope *cs, int64_t now)
{
	size_t i, j;

	for (i = j = 0; i < st->nleases; i++)
		if (st->leases[i].deadline > now)
			st->leases[j++] = st->leases[i];
	st->nleases = j;
	while (st->quota_n > 0 && lim_quota_at(st, 0) <= now - cs->quota_window_ms) {
		st->quota_head = (st->quota_head + 1) % st->quota_cap;
		st->quota_n--;
	}
}

void lim_view(struct lim_state *st, const struct conf_scope *cs, int64_t now, int64_t *leases,
	      int64_t *quota_used, int64_t *quota_oldest)
{
	lim_purge(st, cs, now);
	*leases = (int64_t)st->nleases;
	*quota_used = (int64_t)st->quota_n;
	*quota_oldest = st->quota_n > 0 ? lim_quota_at(st, 0) : 0;
}

void lim_spent(struct lim_state *st, const struct conf_scope *cs, int64_t now, int64_t *quota_n,
	       int64_t *units)
{
	size_t i;

	lim_purge(st, cs, now);
	*quota_n = (int64_t)st->quota_n;
	for (i = 0; i < cs->nrules && i < st->nrules; i++) {
		struct strat_params p = lim_rule_params(&cs->rules[i], LIM_WHOLE);
		units[i] = cs->rules[i].meter == METER_CONCURRENCY
			       ? 0
			       : strat_used(&st->rules[i], &p, now);
	}
	for (; i < cs->nrules; i++)
		units[i] = 0;
}

void lim_reset(struct lim_state *st)
{
	st->next_at = 0;
	st->penalty_until = 0;
	st->ad = (struct adapt_state){ 0 }; /* back to the ceiling */
	lim_override_lift(st);		    /* back to the conf's limits */
}

bool lim_idle(struct lim_state *st, const struct conf_scope *cs, int64_t now)
{
	size_t i;

	lim_purge(st, cs, now);
	if (st->nleases > 0 || st->quota_n > 0 || now < st->next_at || now < st->penalty_until)
		return false;
	if (st->ov != NULL && now < st->ov->until)
		return false; /* an override holds until its end */
	if (cs->adaptive && st->ad.amt != 0 &&
	    now - (st->ad.tc > st->ad.tl ? st->ad.tc : st->ad.tl) < adapt_ttl_ms(&cs->adapt))
		return false; /* what it learned is not forgotten before its time */
	for (i = 0; i < cs->nrules; i++) {
		struct strat_params p = lim_rule_params(&cs->rules[i], LIM_WHOLE);
		if (cs->rules[i].meter != METER_CONCURRENCY && now - st->last_ms < strat_ttl_ms(&p))
			return false;
	}
	return true;
}
