/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * conf_plan.c - compile each (scope, class) of a loaded conf into a plan.
 *
 * Owns: conf_scope.plans (one struct conf_plan per class and one for a
 * request that names no class) and conf_scope.penalty_rule. A plan says
 * which of the scope's rules apply, in conf order, and what state a limiter
 * keeps for it: whether there is a lease set, whether a release has anything
 * to book, and where in Redis a key's penalty lives. The in-process limiter
 * and the Redis backend both read it instead of working it out per call.
 *
 * Where the penalty lives: a scope with pacing (min_delay) keeps it in the
 * key's state hash beside next_at, which the acquire reads anyway. A scope
 * without pacing keeps it in the hash of its first counting rule, so that an
 * acquire reads it with that rule's counters: a one-rule scope's acquire
 * makes the Redis calls of a plain bucket script and no more. A scope with
 * neither (only concurrency limits) keeps it in the state hash.
 *
 * A plain plan is the commonest shape: one requests rule whose hash holds the
 * penalty, and nothing else (no pacing, cluster concurrency, quota, lease
 * set, token meter, adaptive amount or override). Its acquire is one rule
 * hash's read and write, and acquire.lua takes it in a form of its own,
 * params as numbers, many in one call ('p' groups).
 *
 * Also owns the vocabulary both deciders share, pure functions of the conf:
 * what a refusal's code (PLAN_WHICH_*, a rule's index) names, whether it
 * waits for a lease slot and the whole capacity it refuses against, and what
 * reported or reserved tokens charge a token rule. The Redis backend reads a
 * reply and books a release with these, not with the limiter's state.
 */

#include "conf_plan.h"

#include <stdlib.h>
#include <string.h>

static bool plan_rule_applies(const struct conf_scope *s, size_t i, const struct conf_class *cls)
{
	if (s->rules[i].name == NULL)
		return true;
	if (cls == NULL)
		return false;
	for (size_t j = 0; j < cls->nrules; j++)
		if (cls->rules[j] == i)
			return true;
	return false;
}

static bool plan_tracks_leases(const struct conf_scope *s, bool serialized)
{
	if (serialized || s->cluster_concurrency > 0)
		return true;
	for (size_t i = 0; i < s->nrules; i++)
		if (s->rules[i].meter == METER_CONCURRENCY)
			return true;
	return false;
}

static long plan_penalty_rule(const struct conf_scope *s)
{
	if (s->min_delay_ms > 0)
		return -1;
	for (size_t i = 0; i < s->nrules; i++)
		if (s->rules[i].meter != METER_CONCURRENCY)
			return (long)i;
	return -1;
}

static bool plan_build(struct conf_plan *p, const struct conf_scope *s,
		       const struct conf_class *cls)
{
	p->serialized = s->min_delay_ms > 0 && s->cluster_concurrency == 0;
	/* One lease in flight fleet-wide has one completion to count from. */
	p->pace_release = s->min_delay_ms > 0 && s->cluster_concurrency <= 1;
	p->pace_send = s->min_delay_ms > 0 && s->cluster_concurrency > 1;
	p->tracks_leases = plan_tracks_leases(s, p->serialized);
	p->release_books = p->tracks_leases;
	p->penalty_in = -1;
	if ((p->rules = calloc(s->nrules + 1, sizeof(*p->rules))) == NULL)
		return false;
	for (size_t i = 0; i < s->nrules; i++) {
		if (!plan_rule_applies(s, i, cls))
			continue;
		if (s->rules[i].meter == METER_TOKENS || s->rules[i].meter == METER_TOKENS_KEY)
			p->release_books = true;
		if (s->penalty_rule == (long)i)
			p->penalty_in = (long)p->nrules;
		p->rules[p->nrules++] = i;
	}
	p->reads_state = s->penalty_rule < 0 || s->min_delay_ms > 0;
	p->penalty_extra = s->penalty_rule >= 0 && p->penalty_in < 0;
	p->plain = p->nrules == 1 && s->rules[p->rules[0]].meter == METER_REQUESTS &&
		   p->penalty_in == 0 && !p->tracks_leases && !p->release_books &&
		   s->min_delay_ms == 0 && s->cluster_concurrency == 0 && s->quota == 0 &&
		   !s->adaptive && s->override_milli <= 0;
	return true;
}

bool conf_plan_compile(struct conf_scope *s)
{
	s->penalty_rule = plan_penalty_rule(s);
	if ((s->plans = calloc(s->nclasses + 1, sizeof(*s->plans))) == NULL)
		return false;
	for (size_t i = 0; i <= s->nclasses; i++)
		if (!plan_build(&s->plans[i], s, i < s->nclasses ? &s->classes[i] : NULL))
			return false;
	return true;
}

void conf_plan_free(struct conf_scope *s)
{
	if (s->plans == NULL)
		return;
	for (size_t i = 0; i <= s->nclasses; i++)
		free(s->plans[i].rules);
	free(s->plans);
	s->plans = NULL;
}

const char *conf_plan_which_rule(const struct conf_scope *cs, long which)
{
	switch (which) {
	case PLAN_WHICH_PENALTY: return PLAN_RULE_PENALTY;
	case PLAN_WHICH_MIN_DELAY:
	case PLAN_WHICH_SERIALIZED: return PLAN_RULE_MIN_DELAY;
	case PLAN_WHICH_CLUSTER: return PLAN_RULE_CLUSTER;
	case PLAN_WHICH_OWNER: return PLAN_RULE_OWNER;
	case PLAN_WHICH_FLEET: return PLAN_RULE_QUEUE;
	case PLAN_WHICH_QUOTA: return cs->quota_text;
	default: return which >= 0 && (size_t)which < cs->nrules ? cs->rules[which].text : "redis";
	}
}

bool conf_plan_holds_too(const struct conf_scope *cs, const struct conf_class *x, const char *rule,
			 const struct conf_class *y)
{
	const struct conf_plan *pl = conf_plan_of(cs, y);
	struct strat_params p;
	size_t r, k;

	if (rule == NULL || strcmp(rule, PLAN_RULE_QUEUE) == 0)
		return false; /* the class's own queue (across daemons) holds no other */
	for (r = 0; r < cs->nrules && cs->rules[r].text != rule; r++)
		;
	if (r == cs->nrules)
		return true; /* a setting: every class is held to it */
	for (k = 0; k < pl->nrules && pl->rules[k] != r; k++)
		;
	if (k == pl->nrules)
		return false;
	p = conf_rule_params(&cs->rules[r]);
	return conf_class_floor(y, &p) >= conf_class_floor(x, &p);
}

bool conf_plan_holds_always(const struct conf_scope *cs, const struct conf_class *x,
			    const struct conf_class *y)
{
	const struct conf_plan *px = conf_plan_of(cs, x), *py = conf_plan_of(cs, y);
	size_t i, k;

	if ((x != NULL ? x->priority : 0) <= (y != NULL ? y->priority : 0) || x == y)
		return false;
	for (i = 0; i < px->nrules; i++) {
		struct strat_params p = conf_rule_params(&cs->rules[px->rules[i]]);
		for (k = 0; k < py->nrules && py->rules[k] != px->rules[i]; k++)
			;
		if (k == py->nrules || conf_class_floor(y, &p) < conf_class_floor(x, &p))
			return false;
	}
	return true;
}

bool conf_plan_which_slot(const struct conf_scope *cs, long which)
{
	return which == PLAN_WHICH_CLUSTER || which == PLAN_WHICH_SERIALIZED ||
	       which == PLAN_WHICH_OWNER ||
	       (which >= 0 && (size_t)which < cs->nrules &&
		cs->rules[which].meter == METER_CONCURRENCY);
}

int64_t conf_rule_capacity(const struct conf_rule *r, const struct strat_params *p,
			   const struct conf_class *cls)
{
	int64_t floor = conf_class_floor(cls, p);

	if (r->meter == METER_CONCURRENCY)
		return p->amount;
	return p->burst - floor > 0 ? p->burst - floor : 0;
}

int64_t conf_plan_which_limit(const struct conf_scope *cs, const struct conf_class *cls, long which)
{
	struct strat_params p;

	if (which == PLAN_WHICH_CLUSTER)
		return cs->cluster_concurrency;
	if (which == PLAN_WHICH_QUOTA)
		return cs->quota;
	if (which < 0 || (size_t)which >= cs->nrules)
		return 0;
	p = conf_rule_params(&cs->rules[which]);
	return conf_rule_capacity(&cs->rules[which], &p, cls);
}

int64_t conf_token_charge(const struct conf_rule *r, const struct meter_tokens *tokens,
			  size_t ntokens)
{
	int64_t sum = 0;
	size_t i;

	if (r->meter != METER_TOKENS && r->meter != METER_TOKENS_KEY)
		return 0;
	for (i = 0; i < ntokens; i++) {
		if (r->meter == METER_TOKENS)
			sum += tokens[i].n;
		else if (strcmp(tokens[i].name, r->meter_key) == 0)
			sum += tokens[i].n;
	}
	return sum;
}

int64_t conf_settle_charge(const struct conf_rule *r, const struct meter_tokens *tokens,
			   size_t ntokens, const struct meter_tokens *reserve, size_t nreserve)
{
	int64_t n = conf_token_charge(r, tokens, ntokens);
	size_t i, j;

	for (i = 0; i < nreserve; i++)
		for (j = 0; j < ntokens; j++)
			if (strcmp(reserve[i].name, tokens[j].name) == 0) {
				n -= conf_token_charge(r, &reserve[i], 1);
				break;
			}
	return n;
}
