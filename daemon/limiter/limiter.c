/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * limiter.c - one scope's limits for one key, decided in process.
 *
 * Owns: the decision on a struct lim_state and its booking. Every limit is
 * checked first (lim_check) and only then booked (lim_book), so a refusal by
 * any one books nothing in the others (nginx limit_req's account=0 pass).
 * Pure: the clock is `now`.
 *
 * The two pacing modes share the lease list:
 * - min_delay > 0, cluster_concurrency 0: "serialized". At most one lease
 *   in flight (it expires at lease_ttl), and a release pushes next_at to
 *   completion + min_delay.
 * - cluster_concurrency 1: the same pacing, from each completion (there is
 *   one lease in flight at most, so one completion to count from); the cap
 *   counts the lease.
 * - cluster_concurrency N > 1: at most N leases in flight, and next_at is
 *   pushed to admission + min_delay (sends are spaced; releases push nothing).
 *
 * The state's life (new, carry, purge, reset) is in limiter_state.c, the
 * shares and overrides in limiter_share.c, what is left in limiter_left.c.
 */

#include "limiter.h"
#include "limiter_int.h"

#include <stdlib.h>
#include <string.h>

/* The wait until a lease slot frees: short polls, bounded by the earliest deadline. */
static int64_t lim_lease_wait(const struct lim_state *st, const struct conf_scope *cs, int64_t now)
{
	int64_t w = cs->concurrency_retry_ms;
	size_t i;

	for (i = 0; i < st->nleases; i++)
		if (st->leases[i].deadline - now < w)
			w = st->leases[i].deadline - now;
	return w < 1 ? 1 : w;
}

int64_t lim_which_limit(const struct conf_scope *cs, const struct conf_class *cls, long which,
			struct lim_share sh)
{
	struct strat_params p;

	if (which == PLAN_WHICH_CLUSTER)
		return lim_share_of(cs->cluster_concurrency, sh);
	if (which == PLAN_WHICH_QUOTA)
		return lim_share_of(cs->quota, sh);
	if (which < 0 || (size_t)which >= cs->nrules)
		return 0;
	p = lim_rule_params(&cs->rules[which], sh);
	return conf_rule_capacity(&cs->rules[which], &p, cls);
}

/* Keep the refusal with the longest wait; -1 (never) beats any wait. */
static void lim_refuse(struct lim_decision *d, const struct conf_scope *cs, int64_t wait,
		       long which)
{
	if (d->admitted || lim_wait_longer(wait, d->retry_after_ms)) {
		d->admitted = false;
		d->retry_after_ms = wait;
		d->which = which;
		d->rule = conf_plan_which_rule(cs, which);
		d->slot = conf_plan_which_slot(cs, which);
	}
}

/*
 * A serialized key in fallback: only its owner serves it (a wait for the
 * others, which polls, so that the next try after Redis is back asks Redis).
 * The owner itself waits until no lease another pod took through Redis
 * before the outage can still be held: lease_ttl after Redis stopped
 * answering, unless this pod's own release pushed the pacing past that
 * instant (then Redis admitted nobody after it), it holds a lease itself,
 * or the last heartbeat counted it alone.
 */
static void lim_check_owner(struct lim_decision *d, struct lim_state *st,
			    const struct conf_scope *cs, struct lim_share sh, int64_t now)
{
	int64_t end = sh.out_since + cs->lease_ttl_ms, w = cs->concurrency_retry_ms;

	if (!lim_owner(sh)) {
		lim_refuse(d, cs, w, PLAN_WHICH_OWNER);
		return;
	}
	if (sh.pods == 1 || st->nleases > 0 || st->next_at >= sh.out_since || now >= end)
		return;
	lim_refuse(d, cs, end - now < w ? end - now : w, PLAN_WHICH_SERIALIZED);
}

struct lim_decision lim_check(struct lim_state *st, const struct conf_scope *cs,
			      struct lim_share sh, int64_t now, const struct lim_req *rq)
{
	struct lim_decision d = { .admitted = true, .which = PLAN_WHICH_NONE };
	const struct conf_plan *pl = conf_plan_of(cs, rq->cls);

	sh = lim_key_share(st, cs, sh, now);
	lim_purge(st, cs, now);
	if (now < st->penalty_until)
		lim_refuse(&d, cs, st->penalty_until - now, PLAN_WHICH_PENALTY);
	if (lim_serialized(cs) && st->nleases > 0)
		lim_refuse(&d, cs, lim_lease_wait(st, cs, now), PLAN_WHICH_SERIALIZED);
	if (lim_serialized(cs) && sh.out_since > 0)
		lim_check_owner(&d, st, cs, sh, now);
	if (now < st->next_at)
		lim_refuse(&d, cs, st->next_at - now, PLAN_WHICH_MIN_DELAY);
	/* Never passing is judged against the whole limit: a share too small
	 * for the request (0 included) is a wait, for Redis or for a share. */
	if (cs->cluster_concurrency > 0) {
		int64_t cap = lim_share_of(cs->cluster_concurrency, sh);
		if ((int64_t)st->nleases + rq->count > cap)
			lim_refuse(
			    &d, cs,
			    rq->count > cs->cluster_concurrency ? -1 : lim_lease_wait(st, cs, now),
			    PLAN_WHICH_CLUSTER);
		d.share_short |= rq->count > cap && rq->count <= cs->cluster_concurrency;
	}
	if (cs->quota > 0) {
		int64_t q = lim_share_of(cs->quota, sh);
		if (rq->count > cs->quota)
			lim_refuse(&d, cs, -1, PLAN_WHICH_QUOTA);
		else if (rq->count > q) {
			lim_refuse(&d, cs, cs->quota_window_ms, PLAN_WHICH_QUOTA);
			d.share_short = true;
		} else if ((int64_t)st->quota_n + rq->count > q)
			lim_refuse(&d, cs,
				   lim_quota_at(st, st->quota_n + rq->count - q - 1) +
				       cs->quota_window_ms - now,
				   PLAN_WHICH_QUOTA);
	}
	for (size_t k = 0; k < pl->nrules; k++) {
		size_t i = pl->rules[k];
		const struct conf_rule *r = &cs->rules[i];
		struct strat_params p = lim_rule_params(r, sh);
		int64_t floor = conf_class_floor(rq->cls, &p); /* of this rule's capacity */
		struct strat_result sr;

		if ((p.amount == 0 || p.burst == 0) && r->meter != METER_CONCURRENCY) {
			/* this pod's share of the rate is nothing: a window's wait */
			lim_refuse(&d, cs, p.window_ms, (long)i);
			d.share_short = true;
			continue;
		}
		switch (r->meter) {
		case METER_CONCURRENCY:
			if ((int64_t)st->nleases + rq->count > p.amount)
				lim_refuse(&d, cs,
					   rq->count > r->sp.amount ? -1
								    : lim_lease_wait(st, cs, now),
					   (long)i);
			d.share_short |= rq->count > p.amount && rq->count <= r->sp.amount;
			continue;
		case METER_REQUESTS:
			sr = strat_check(&st->rules[i], &p, now, rq->cost * rq->count, floor);
			break;
		default: /* token meters: the reservation, else not overdrawn */
			sr = strat_check(
			    &st->rules[i], &p, now,
			    conf_token_charge(r, rq->reserve, rq->nreserve) * rq->count, floor);
			break;
		}
		if (!sr.allowed)
			lim_refuse(&d, cs, sr.retry_after_ms, (long)i);
	}
	if (!d.admitted && d.retry_after_ms < 0)
		d.limit = lim_which_limit(cs, rq->cls, d.which, sh);
	return d;
}

static bool lim_quota_push(struct lim_state *st, int64_t now, int64_t count)
{
	int64_t k;

	if ((size_t)count > st->quota_cap - st->quota_n) {
		size_t ncap = st->quota_cap ? st->quota_cap * 2 : 8, i;
		int64_t *nq;
		while (ncap - st->quota_n < (size_t)count)
			ncap *= 2;
		nq = malloc(ncap * sizeof(*nq));
		if (nq == NULL)
			return false;
		for (i = 0; i < st->quota_n; i++)
			nq[i] = lim_quota_at(st, i);
		free(st->quota);
		st->quota = nq;
		st->quota_cap = ncap;
		st->quota_head = 0;
	}
	for (k = 0; k < count; k++)
		st->quota[(st->quota_head + st->quota_n++) % st->quota_cap] = now;
	return true;
}

static bool lim_leases_reserve(struct lim_state *st, size_t more)
{
	size_t ncap = st->leases_cap ? st->leases_cap : 4;
	struct lim_lease *nl;

	if (st->nleases + more <= st->leases_cap)
		return true;
	while (ncap < st->nleases + more)
		ncap *= 2;
	nl = realloc(st->leases, ncap * sizeof(*nl));
	if (nl == NULL)
		return false;
	st->leases = nl;
	st->leases_cap = ncap;
	return true;
}

bool lim_lease_add(struct lim_state *st, const char *lease_id, int64_t deadline)
{
	struct lim_lease *l;
	size_t i;

	for (i = 0; i < st->nleases; i++)
		if (strcmp(st->leases[i].id, lease_id) == 0)
			return true;
	if (!lim_leases_reserve(st, 1))
		return false;
	l = &st->leases[st->nleases++];
	strncpy(l->id, lease_id, LEASE_NONCE_LEN);
	l->id[LEASE_NONCE_LEN] = '\0';
	l->deadline = deadline;
	return true;
}

bool lim_book(struct lim_state *st, const struct conf_scope *cs, struct lim_share sh, int64_t now,
	      const struct lim_req *rq, const char *const *lease_ids)
{
	const struct conf_plan *pl = conf_plan_of(cs, rq->cls);
	int64_t k;

	sh = lim_key_share(st, cs, sh, now);
	if (lim_tracks_leases(cs) && lease_ids != NULL &&
	    !lim_leases_reserve(st, (size_t)rq->count))
		return false;
	if (cs->quota > 0 && !lim_quota_push(st, now, rq->count))
		return false;
	if (lim_tracks_leases(cs) && lease_ids != NULL) {
		for (k = 0; k < rq->count; k++) {
			struct lim_lease *l = &st->leases[st->nleases++];
			strncpy(l->id, lease_ids[k], LEASE_NONCE_LEN);
			l->id[LEASE_NONCE_LEN] = '\0';
			l->deadline = now + cs->lease_ttl_ms;
		}
	}
	if (pl->pace_send) {
		int64_t next = now + lim_min_delay(cs, sh);
		if (next > st->next_at)
			st->next_at = next;
	}
	for (size_t j = 0; j < pl->nrules; j++) {
		size_t i = pl->rules[j];
		const struct conf_rule *r = &cs->rules[i];
		struct strat_params p;
		int64_t n;
		if (r->meter == METER_REQUESTS)
			n = rq->cost * rq->count;
		else if (r->meter == METER_TOKENS || r->meter == METER_TOKENS_KEY)
			n = conf_token_charge(r, rq->reserve, rq->nreserve) * rq->count;
		else
			continue;
		p = lim_rule_params(r, sh);
		if (n != 0 || r->meter == METER_REQUESTS)
			strat_book(&st->rules[i], &p, now, n);
	}
	st->last_ms = now;
	return true;
}

bool lim_release(struct lim_state *st, const struct conf_scope *cs, struct lim_share sh,
		 int64_t now, const char *lease_id, const struct conf_class *cls,
		 const struct meter_tokens *tokens, size_t ntokens)
{
	return lim_release_settle(st, cs, sh, now, lease_id, cls, tokens, ntokens, NULL, 0);
}

bool lim_release_settle(struct lim_state *st, const struct conf_scope *cs, struct lim_share sh,
			int64_t now, const char *lease_id, const struct conf_class *cls,
			const struct meter_tokens *tokens, size_t ntokens,
			const struct meter_tokens *reserve, size_t nreserve)
{
	const struct conf_plan *pl = conf_plan_of(cs, cls);
	bool held = false;
	size_t i;

	sh = lim_key_share(st, cs, sh, now);
	lim_purge(st, cs, now);
	for (i = 0; i < st->nleases; i++) {
		if (strcmp(st->leases[i].id, lease_id) == 0) {
			st->leases[i] = st->leases[--st->nleases];
			held = true;
			break;
		}
	}
	if (held && pl->pace_release) {
		int64_t next = now + lim_min_delay(cs, sh);
		if (next > st->next_at)
			st->next_at = next;
	}
	for (size_t k = 0; k < pl->nrules; k++) {
		const struct conf_rule *r = &cs->rules[pl->rules[k]];
		int64_t n;
		if (r->meter != METER_TOKENS && r->meter != METER_TOKENS_KEY)
			continue;
		n = conf_settle_charge(r, tokens, ntokens, reserve, nreserve);
		if (n != 0) {
			struct strat_params p = lim_rule_params(r, sh);
			strat_book(&st->rules[pl->rules[k]], &p, now, n);
			st->last_ms = now;
		}
	}
	return held;
}

void lim_spend_share(struct lim_state *st, const struct conf_scope *cs, struct lim_share sh,
		     int64_t at)
{
	int64_t q;
	size_t i;

	if (st->last_ms > at)
		at = st->last_ms; /* never book before what the counters hold */
	sh = lim_key_share(st, cs, sh, at);
	lim_purge(st, cs, at);
	if (st->quota_n > 0 && lim_quota_at(st, st->quota_n - 1) > at)
		at = lim_quota_at(st, st->quota_n - 1); /* the ring stays in order */
	q = lim_share_of(cs->quota, sh);
	if (cs->quota > 0 && (int64_t)st->quota_n < q)
		(void)lim_quota_push(st, at, q - (int64_t)st->quota_n); /* OOM: less spent */
	for (i = 0; i < cs->nrules && i < st->nrules; i++) {
		struct strat_params p = lim_rule_params(&cs->rules[i], sh);
		int64_t left;
		if (cs->rules[i].meter == METER_CONCURRENCY || p.amount == 0 || p.burst == 0)
			continue;
		if ((left = strat_left(&st->rules[i], &p, at, 0)) > 0)
			strat_book(&st->rules[i], &p, at, left);
	}
	if (cs->cluster_concurrency > 0 && cs->min_delay_ms > 0 &&
	    at + lim_min_delay(cs, sh) > st->next_at)
		st->next_at = at + lim_min_delay(cs, sh);
	st->last_ms = at;
}

void lim_penalize(struct lim_state *st, int64_t now, int64_t delay_ms)
{
	if (delay_ms > 0 && now + delay_ms > st->penalty_until)
		st->penalty_until = now + delay_ms;
}
