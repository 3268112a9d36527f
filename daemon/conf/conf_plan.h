/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * conf_plan.h - the plans: what a limiter does for one (scope, class).
 *
 * conf_plan.c compiles them once when the conf is loaded, into each
 * scope's plans, and names the limit that decided a refusal (the codes the
 * in-process limiter and scripts/acquire.lua share).
 */

#ifndef ADMITD_CONF_PLAN_H
#define ADMITD_CONF_PLAN_H

#include "conf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * conf_plan: what a limiter does for one (scope, class), compiled once when
 * the conf is loaded (conf_plan.c), so that neither the in-process limiter
 * nor the Redis backend works out per call which limits apply, which Redis
 * keys a call names and which of them the scripts touch.
 */
struct conf_plan {
	size_t nrules;
	size_t *rules;	    /* indexes into conf_scope.rules that apply, conf order */
	bool tracks_leases; /* a lease set: cluster_concurrency, a concurrency rule, serialized */
	bool serialized;    /* min_delay without cluster_concurrency: one at a time */
	bool pace_release;  /* min_delay counts from each release: serialized, or a cap of 1 */
	bool pace_send;	    /* min_delay counts from each admission: a cap above 1 */
	bool release_books; /* a release changes state: the lease set or a token meter */
	bool reads_state;   /* the acquire reads the state hash (pacing, or the penalty is there) */
	long penalty_in;    /* plan.rules[i] whose hash holds the penalty; -1: none of them */
	bool penalty_extra; /* the penalty's hash is a rule's this plan does not apply */
	bool plain;	    /* one requests rule holding the penalty, nothing else (conf_plan.c) */
};

/* conf_plan_compile - fill s->plans and s->penalty_rule; false: out of memory. */
bool conf_plan_compile(struct conf_scope *s);
void conf_plan_free(struct conf_scope *s);

/* conf_plan_of - the plan of cls (NULL: no class), which must be one of s's. */
static inline const struct conf_plan *conf_plan_of(const struct conf_scope *s,
						   const struct conf_class *cls)
{
	return &s->plans[cls != NULL ? (size_t)(cls - s->classes) : s->nclasses];
}

/*
 * Which limit decided a refusal: a rule's index in the scope (>= 0), or one
 * of these. The in-process limiter decides with them, and
 * scripts/acquire.lua returns the same codes.
 */
#define PLAN_WHICH_NONE	      (-1)
#define PLAN_WHICH_PENALTY    (-2)
#define PLAN_WHICH_MIN_DELAY  (-3) /* next_at: a known wait */
#define PLAN_WHICH_CLUSTER    (-4)
#define PLAN_WHICH_QUOTA      (-5)
#define PLAN_WHICH_STALE      (-6) /* Redis only: the script ran after its deadline */
#define PLAN_WHICH_SERIALIZED (-7) /* min_delay, one at a time: a lease is held */
#define PLAN_WHICH_OWNER      (-8) /* fallback: another pod serves the key's one at a time */
#define PLAN_WHICH_FLEET      (-9) /* Redis, a fair scope: other pods' tickets are first */

/* Static names of the settings a refusal can name. */
#define PLAN_RULE_PENALTY	 "penalty"
#define PLAN_RULE_MIN_DELAY	 "min_delay"
#define PLAN_RULE_CLUSTER	 "cluster_concurrency"
#define PLAN_RULE_MAX_CONCURRENT "max_concurrent"
#define PLAN_RULE_MAX_WAITERS	 "max_waiters"
#define PLAN_RULE_QUEUE		 "queue" /* a try behind waiters that have not been decided yet */
#define PLAN_RULE_OWNER		 "fallback_owner"

/* conf_plan_which_rule - the text a refusal by `which` names (conf-owned or static). */
const char *conf_plan_which_rule(const struct conf_scope *cs, long which);

/*
 * conf_plan_holds_too - class x (NULL: none) was refused by the limit whose
 * text is `rule` (conf_plan_which_rule's; NULL: none known): is class y held
 * to it as well, so that y waits behind x for it? Yes for a setting (pacing,
 * a penalty, a quota, max_concurrent: every class), and for a rule y applies
 * with a floor on it no lower than x's. No for a rule y does not apply (a
 * named rule of x's), or one where x keeps a higher floor (x may have been
 * refused for its floor only), or no rule at all.
 */
/*
 * conf_plan_holds_always - does class x (NULL: none) go before class y
 * whatever refused x: a higher priority, and every rule x is held to y is
 * held to as well, with a floor on it no lower than x's? Then no unit y
 * could take is one x could not, and while x waits y waits behind it
 * (a fair scope's queues across daemons: rb_fair.c). A rule of x's own, or
 * a higher floor, makes x's waits its own: no.
 */
bool conf_plan_holds_always(const struct conf_scope *cs, const struct conf_class *x,
			    const struct conf_class *y);
bool conf_plan_holds_too(const struct conf_scope *cs, const struct conf_class *x, const char *rule,
			 const struct conf_class *y);

/*
 * conf_plan_which_slot - does a refusal by `which` wait for a lease slot?
 * Such a wait has no known end (a release ends it), so it is slept out and
 * ends in `timeout`, never in `budget_exceeded`.
 */
bool conf_plan_which_slot(const struct conf_scope *cs, long which);

/*
 * conf_plan_which_limit - the whole capacity of the limit `which` for cls, as
 * Redis counts it (never-passing refusals): a rule's burst less the class's
 * floor, a cap's amount, cluster_concurrency, quota; 0 for anything else.
 */
int64_t conf_plan_which_limit(const struct conf_scope *cs, const struct conf_class *cls,
			      long which);

#endif
