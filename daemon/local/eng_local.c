/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * eng_local.c - the in-process decisions (see eng_local.h).
 *
 * Shadow scopes: their refusals are computed and counted but do not refuse;
 * a target whose own check refused is not booked (it would not have gone
 * out had the limit been enforced).
 */

#include "eng_local.h"

#include "clock.h"
#include "log.h"

#include <stdlib.h>

void eng_merge(struct eng_res *res, struct kq *kq, bool admitted, int64_t retry, const char *rule,
	       bool slot, int64_t limit)
{
	struct scope_rt *sc = kq->sc;

	if (admitted)
		return;
	if (sc->cs->shadow) {
		sc->shadow_limited++;
		if (res->shadow_rule == NULL)
			res->shadow_rule = rule;
		return;
	}
	if (!res->refused || lim_wait_longer(retry, res->retry_after_ms)) {
		res->retry_after_ms = retry;
		res->rule = rule;
		res->slot_wait = slot;
		res->limit = limit;
		res->by = kq;
	}
	res->refused = true;
}

void eng_merge_left(struct eng_res *res, const struct lim_left *left)
{
	lim_left_merge(&res->left, left);
}

void eng_merge_end(struct eng_res *res)
{
	res->admitted = !res->refused;
	res->shadow_limited = res->admitted && res->shadow_rule != NULL;
	if (res->shadow_limited)
		res->rule = res->shadow_rule;
}

struct lim_share eng_key_share(struct rt *ad, const struct kq *kq)
{
	struct lim_share sh =
	    ad->redis != NULL ? ad->fleet->share(ad->redis, kq->sc->cs) : LIM_WHOLE;
	uint64_t h = 14695981039346656037ULL; /* FNV-1a over "scope\0key" */
	const char *p;

	if (sh.div <= 1.0)
		return sh; /* nothing divided: no turn to take */
	for (p = kq->sc->cs->name; *p != '\0'; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	h *= 1099511628211ULL;
	for (p = kq->key; *p != '\0'; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	sh.turn = (int64_t)(h >> 33);
	return sh;
}

/*
 * A fallback decision of kq's state under share sh: the share in force now
 * (Redis failing while the pool is up counts as down since now), and, when
 * the backend was born while Redis was unreachable, the state spent once as
 * of its birth (lim_spend_share): what this pod admitted before it was
 * born, restarted during the outage, is not known here.
 */
static struct lim_share eng_fb_share(struct rt *ad, struct kq *kq, int64_t now)
{
	struct lim_share sh = eng_key_share(ad, kq);
	struct lim_state *st = kq_lim(kq);
	int64_t born = 0;
	uint32_t gen = ad->redis != NULL ? ad->fleet->born_down(ad->redis, &born) : 0;

	if (sh.out_since == 0)
		sh.out_since = now;
	if (gen != 0 && st != NULL && st->spent_gen != gen) {
		lim_spend_share(st, kq->sc->cs, sh, born);
		st->spent_gen = gen;
	}
	return sh;
}

/*
 * kq, another pod's serialized key, was refused here in fallback: once Redis
 * answers, its pacing there starts at min_delay from now (fleet->owe_pace),
 * which keeps this pod off the key while the owner may still hold a lease
 * its fallback granted and has not booked in Redis yet.
 */
static void eng_owner_paced(struct rt *ad, struct kq *kq, struct lim_share sh, int64_t now)
{
	const struct conf_scope *cs = kq->sc->cs;

	if (ad->redis != NULL)
		ad->fleet->owe_pace(
		    ad->redis, kq, now + lim_min_delay(cs, lim_key_share(kq_lim(kq), cs, sh, now)));
}

/* What the targets' tightest limit allows now, from the in-process state. */
static void eng_left_local(struct eng_res *res, const struct target_rt *t, size_t nt,
			   const struct lim_share *div, int64_t now)
{
	size_t i;

	for (i = 0; i < nt; i++) {
		struct lim_state *st = kq_lim(t[i].kq);
		if (st != NULL && !t[i].kq->sc->cs->shadow)
			lim_left_state(&res->left, st, t[i].kq->sc->cs, t[i].cls, div[i], now);
	}
}

struct eng_res eng_local(struct rt *ad, struct target_rt *t, size_t nt, int64_t now,
			 const char *lease_id, enum via via, const struct meter_tokens *reserve,
			 size_t nreserve)
{
	struct lim_share div[PROTO_MAX_TARGETS];
	struct eng_res res = { .admitted = true, .via = via };
	struct lim_decision d[PROTO_MAX_TARGETS];
	const char *ids[1] = { lease_id };
	size_t i;

	for (i = 0; i < nt; i++) {
		struct lim_req rq = { .cls = t[i].cls,
				      .cost = t[i].cost,
				      .count = 1,
				      .reserve = reserve,
				      .nreserve = nreserve };
		struct lim_state *st = kq_lim(t[i].kq);
		div[i] = via == VIA_FALLBACK ? eng_fb_share(ad, t[i].kq, now) : LIM_WHOLE;
		if (st == NULL) {
			res.admitted = false;
			res.unavailable = true;
			res.rule = "out of memory";
			return res;
		}
		d[i] = lim_check(st, t[i].kq->sc->cs, div[i], now, &rq);
		if (d[i].which == PLAN_WHICH_OWNER)
			eng_owner_paced(ad, t[i].kq, div[i], now);
		if (!d[i].admitted && d[i].share_short && !t[i].kq->sc->cs->shadow)
			res.share_short = true;
		eng_merge(&res, t[i].kq, d[i].admitted, d[i].retry_after_ms, d[i].rule, d[i].slot,
			  d[i].limit);
	}
	eng_merge_end(&res);
	if (!res.admitted) {
		eng_left_local(&res, t, nt, div, now);
		return res;
	}
	for (i = 0; i < nt; i++) {
		struct lim_req rq = { .cls = t[i].cls,
				      .cost = t[i].cost,
				      .count = 1,
				      .reserve = reserve,
				      .nreserve = nreserve };
		const struct conf_scope *cs = t[i].kq->sc->cs;
		if (!d[i].admitted)
			continue;
		if (!lim_book(kq_lim(t[i].kq), cs, div[i], now, &rq, ids)) {
			/* Never admit what could not be booked (targets booked before
			 * this one keep their booking until their windows pass). */
			log_warn("cannot book: out of memory", "scope=%s", cs->name);
			res.admitted = false;
			res.unavailable = true;
			return res;
		}
		if (lim_release_books(cs, t[i].cls))
			res.booked = true;
		if (via == VIA_FALLBACK && ad->redis != NULL)
			ad->fleet->owe(ad->redis, t[i].kq, t[i].cls, t[i].cost, reserve, nreserve);
	}
	eng_left_local(&res, t, nt, div, now);
	return res;
}

struct eng_refused { /* forgotten when a reload re-points the key (scope.c) */
	const struct conf_class *cls;
	int64_t cost;
	int64_t at, until; /* when Redis said it, until when it is given again (mono ms) */
	int64_t wait_end;  /* when Redis said it may pass */
	const char *rule;
	struct lim_left left;
};

void eng_refused_forget(struct kq *kq)
{
	free(kq->refused);
	kq->refused = NULL;
}

void eng_refused_keep(const struct waiter *w, const struct eng_res *res)
{
	struct kq *kq = w->t[0].kq;
	struct eng_refused *r = kq->refused;
	int64_t now = clock_mono_ms(), hold = kq->sc->ad->conf->redis_refusal_hold_ms, until;
	const struct lim_ovr *ov;

	if (w->nt != 1 || w->nreserve != 0 || res->admitted || res->slot_wait ||
	    res->retry_after_ms <= 0 || res->unavailable || kq->sc->cs->shadow || hold <= 0)
		return;
	until = now + (res->retry_after_ms < hold ? res->retry_after_ms : hold);
	/* the end of an override may let it pass sooner than Redis said */
	if ((ov = lim_ovr_in_force(kq_lim(kq), kq->sc->cs, now)) != NULL && ov->until < until)
		until = ov->until;
	if (until <= now)
		return;
	if (r == NULL && (r = malloc(sizeof(*r))) == NULL)
		return; /* the next ask goes to Redis, as without it */
	*r = (struct eng_refused){ .cls = w->t[0].cls,
				   .cost = w->t[0].cost,
				   .at = now,
				   .until = until,
				   .wait_end = now + res->retry_after_ms,
				   .rule = res->rule,
				   .left = res->left };
	kq->refused = r;
}

/* Is w refused by what Redis said of its key before? Then res says so. */
bool eng_refused_known(struct waiter *w, struct eng_res *res)
{
	struct kq *kq = w->t[0].kq;
	const struct eng_refused *r = kq->refused;
	int64_t now;

	if (r == NULL || w->nt != 1 || w->nreserve != 0)
		return false;
	now = clock_mono_ms();
	if (now >= r->until) {
		eng_refused_forget(kq); /* passed */
		return false;
	}
	if (r->cls != w->t[0].cls || w->t[0].cost < r->cost)
		return false;
	*res = (struct eng_res){ .via = VIA_REDIS,
				 .refused = true,
				 .retry_after_ms = r->wait_end - now,
				 .rule = r->rule,
				 .by = kq,
				 .left = r->left };
	lim_left_age(&res->left, now - r->at);
	kq->sc->refused_known++;
	return true;
}

struct eng_res eng_fallback(struct rt *ad, struct waiter *w, const char *lease_id)
{
	enum conf_fail_mode mode = FAIL_OPEN;
	struct eng_res res = { .via = VIA_FALLBACK };
	size_t i;

	for (i = 0; i < w->nt; i++) {
		enum conf_fail_mode m = w->t[i].kq->sc->cs->fail_mode;
		if (m == FAIL_CLOSED || (m == FAIL_FALLBACK && mode == FAIL_OPEN))
			mode = m;
	}
	switch (mode) {
	case FAIL_OPEN: res.admitted = true; return res;
	case FAIL_CLOSED: res.unavailable = true; return res;
	default:
		return eng_local(ad, w->t, w->nt, clock_mono_ms(), lease_id, VIA_FALLBACK,
				 w->reserve, w->nreserve);
	}
}

void eng_inspect_local(struct kq *kq, enum via via, eng_insp_cb *cb, void *arg)
{
	struct lim_state *st = kq_lim(kq);
	struct eng_insp in = { .via = via };

	in.now = clock_mono_ms();
	if (st != NULL) {
		lim_view(st, kq->sc->cs, in.now, &in.leases, &in.quota_used, &in.quota_oldest);
		in.next_at = st->next_at;
		in.penalty_until = st->penalty_until;
		in.rules = st->rules;
		in.ad = st->ad;
		in.ov = lim_ovr_in_force(st, kq->sc->cs, in.now);
	}
	cb(arg, &in);
}

void eng_fb_override(struct kq *kq, const struct conf_class *cls, int64_t until,
		     int64_t min_delay_ms, const int64_t *amount)
{
	const struct conf_scope *cs = kq->sc->cs;
	const struct conf_plan *pl = conf_plan_of(cs, cls);
	struct lim_state *st = kq_lim(kq);
	size_t k;

	if (until <= 0) {
		lim_override_lift(st);
		return;
	}
	if ((st->ov == NULL || st->ov->nrules != cs->nrules) &&
	    !lim_override(st, cs, until, -1, NULL))
		return; /* out of memory: the fallback keeps the conf's limits */
	st->ov->until = until;
	st->ov->min_delay_ms = min_delay_ms;
	for (k = 0; k < pl->nrules; k++)
		st->ov->amount[pl->rules[k]] = amount[k];
}

void eng_fb_left(struct lim_left *acc, struct kq *kq, const struct conf_class *cls, int64_t ad_amt,
		 const struct strat_state *rules, int64_t leases, int64_t quota_used,
		 int64_t quota_newest, int64_t now)
{
	const struct conf_scope *cs = kq->sc->cs;
	struct lim_share sh = LIM_WHOLE;

	if (cs->adaptive && ad_amt > 0) { /* the capacities the check used */
		sh.ad_amt = ad_amt;
		sh.ad_ceil = cs->adapt.ceil;
	}
	if ((sh.ov = lim_ovr_in_force(kq_lim(kq), cs, clock_mono_ms())) != NULL)
		sh.ov_milli = cs->override_milli;
	lim_left_scope(acc, cs, cls, sh, rules, true, leases, quota_used, quota_newest, now);
}

void eng_fb_spent(struct kq *kq, int64_t now, int64_t *quota_n, int64_t *units)
{
	lim_spent(kq_lim(kq), kq->sc->cs, now, quota_n, units);
}

int64_t eng_fb_next_at(struct kq *kq)
{
	return kq_lim(kq)->next_at;
}

bool eng_fb_idle(struct kq *kq, int64_t now)
{
	return lim_idle(kq_lim(kq), kq->sc->cs, now);
}
