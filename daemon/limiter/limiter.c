/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * limiter.c - one scope's limits for one key, decided in process.
 *
 * Owns: struct lim_state. Every limit is checked first (lim_check) and
 * only then booked (lim_book), so a refusal by any one books nothing in
 * the others (nginx limit_req's account=0 pass). Pure: the clock is `now`.
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
 */

#include "limiter.h"

#include <math.h>
#include <stdio.h>
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

static int64_t lim_quota_at(const struct lim_state *st, size_t i)
{
	return st->quota[(st->quota_head + i) % st->quota_cap];
}

/* Drop what time has made irrelevant: expired leases, old quota instants. */
static void lim_purge(struct lim_state *st, const struct conf_scope *cs, int64_t now)
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

void lim_view(struct lim_state *st, const struct conf_scope *cs, int64_t now, int64_t *leases,
	      int64_t *quota_used, int64_t *quota_oldest)
{
	lim_purge(st, cs, now);
	*leases = (int64_t)st->nleases;
	*quota_used = (int64_t)st->quota_n;
	*quota_oldest = st->quota_n > 0 ? lim_quota_at(st, 0) : 0;
}

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
