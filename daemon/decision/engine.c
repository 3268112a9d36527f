/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * engine.c - where decisions are made (see engine.h).
 *
 * In local mode every decision is the in-process limiter's, synchronous.
 * Shadow scopes: their refusals are computed and counted but do not refuse;
 * a target whose own check refused is not booked (it would not have gone
 * out had the limit been enforced).
 */

#include "engine.h"

#include "adaptive_rt.h"
#include "backend.h"
#include "clock.h"
#include "log.h"

#include <event2/event.h>
#include <stdlib.h>

const char *via_name(enum via v)
{
	static const char *const names[] = { "local", "redis", "fallback" };

	return names[v];
}

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

struct lim_share eng_key_share(struct admitd *ad, const struct kq *kq)
{
	struct lim_share sh = backend_share(ad->redis, kq->sc->cs);
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
static struct lim_share eng_fb_share(struct admitd *ad, struct kq *kq, int64_t now)
{
	struct lim_share sh = eng_key_share(ad, kq);
	struct lim_state *st = kq_lim(kq);
	int64_t born = 0;
	uint32_t gen = backend_born_down(ad->redis, &born);

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
 * answers, its pacing there starts at min_delay from now (backend_owe_pace),
 * which keeps this pod off the key while the owner may still hold a lease
 * its fallback granted and has not booked in Redis yet.
 */
static void eng_owner_paced(struct admitd *ad, struct kq *kq, struct lim_share sh, int64_t now)
{
	const struct conf_scope *cs = kq->sc->cs;

	if (ad->redis != NULL)
		backend_owe_pace(ad->redis, kq,
				 now + lim_min_delay(cs, lim_key_share(kq_lim(kq), cs, sh, now)));
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

struct eng_res eng_local(struct admitd *ad, struct target_rt *t, size_t nt, int64_t now,
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
			backend_owe(ad->redis, t[i].kq, t[i].cls, t[i].cost, reserve, nreserve);
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
static bool eng_refused_known(struct waiter *w, struct eng_res *res)
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

void eng_acquire(struct admitd *ad, struct waiter *w, const char *lease_id, eng_cb *cb, void *arg)
{
	struct eng_res res;

	if (ad->redis != NULL && eng_refused_known(w, &res))
		; /* answered without a call */
	else if (ad->redis != NULL && backend_ahead_take(ad->redis, w, &res))
		; /* admitted from what an earlier call booked ahead */
	else if (ad->redis == NULL)
		res = eng_local(ad, w->t, w->nt, clock_mono_ms(), lease_id, VIA_LOCAL, w->reserve,
				w->nreserve);
	else if (backend_acquire(ad->redis, w, lease_id, cb, arg))
		return;
	else
		res = eng_fallback(ad, w, lease_id);
	cb(arg, &res);
}

bool eng_can_batch(struct admitd *ad, const struct waiter *w)
{
	const struct conf_scope *cs = w->t[0].kq->sc->cs;

	return ad->redis != NULL && !ad->shutting_down && backend_up(ad->redis) && w->nt == 1 &&
	       cs->min_delay_ms == 0 && !cs->shadow && !backend_ahead_on(ad->redis, w);
}

void eng_acquire_batch(struct admitd *ad, struct waiter *const *ws, size_t n, eng_batch_cb *cb,
		       void *arg)
{
	struct eng_res res[ENG_BATCH_MAX];
	size_t i;

	if (n <= ENG_BATCH_MAX && backend_acquire_batch(ad->redis, ws, n, cb, arg))
		return;
	/* Redis cannot take it now: each in turn, in FIFO order, as alone. */
	for (i = 0; i < n && i < ENG_BATCH_MAX; i++)
		res[i] = eng_fallback(ad, ws[i], ws[i]->lease_id);
	cb(arg, ws, n, res);
}

struct eng_res eng_fallback(struct admitd *ad, struct waiter *w, const char *lease_id)
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

void eng_release(struct lease *l, const struct meter_tokens *tokens, size_t ntokens)
{
	int64_t now = clock_mono_ms();
	bool sent = false;
	size_t i;

	if (l->ad->redis != NULL &&
	    (l->via == VIA_REDIS ? l->backend_booked : l->backend_booked || l->redis_maybe))
		sent = backend_release(l->ad->redis, l, tokens, ntokens); /* queued when down */
	else if (l->ad->redis != NULL && adrt_sends(l))
		sent = backend_outcome(l->ad->redis, l);
	adrt_release_local(l, sent, now); /* an outcome Redis does not get moves this pod's */
	/*
	 * The in-process state is charged too, whatever booked the lease: it
	 * decided its own admissions, and it mirrors this pod's admissions
	 * through Redis (eng_mirror), so that its fallback share knows what
	 * the pod spent, and a reload to local mode counts them.
	 */
	for (i = 0; i < l->nt; i++) {
		struct kq *kq = l->t[i].kq;
		eng_refused_forget(kq); /* a release may refund: Redis is asked again */
		lim_release_settle(kq_lim(kq), kq->sc->cs, eng_key_share(l->ad, kq), now, l->id,
				   l->t[i].cls, tokens, ntokens, l->reserve, l->nreserve);
	}
}

void eng_mirror(struct lease *l)
{
	int64_t now = clock_mono_ms();
	size_t i;

	for (i = 0; i < l->nt; i++) {
		const struct conf_scope *cs = l->t[i].kq->sc->cs;
		struct lim_state *st = kq_lim(l->t[i].kq);
		struct lim_req rq = { .cls = l->t[i].cls,
				      .cost = l->t[i].cost,
				      .count = 1,
				      .reserve = l->reserve,
				      .nreserve = l->nreserve };
		if (st == NULL)
			continue;
		/* This pod's own admissions count against its fallback share:
		 * if Redis goes away now, the share left is what it has not
		 * spent of this window (booked as the fallback would book it). */
		if (!lim_book(st, cs, eng_key_share(l->ad, l->t[i].kq), now, &rq, NULL))
			log_ratelimited(LOG_SLOT_FALLBACK, 1000,
					"cannot mirror a Redis admission: out of memory",
					"scope=%s", cs->name);
		if (!lim_tracks_leases(cs))
			continue;
		if (!lim_lease_add(st, l->id, l->deadline_ms))
			log_ratelimited(LOG_SLOT_FALLBACK, 1000,
					"cannot mirror a Redis lease: out of memory", "scope=%s",
					cs->name);
	}
}

void eng_release_ref(struct admitd *ad, const struct lease_ref *ref,
		     const struct meter_tokens *tokens, size_t ntokens, eng_settled_cb *cb,
		     void *arg)
{
	struct be_target t[PROTO_MAX_TARGETS] = { { 0 } };
	struct meter_tokens rs[PROTO_MAX_TOKENS];
	struct eng_settled none = { .unavailable = ad->redis != NULL };
	char *handle = NULL;
	size_t i, nt = 0;

	for (i = 0; i < ref->nreserve; i++) {
		rs[i].name = ref->reserve[i].name;
		rs[i].n = ref->reserve[i].n;
	}
	/* No key is made or looked up: Redis holds the record, and a full
	 * max_keys must not make a target drop out. */
	for (i = 0; i < ref->nt; i++) {
		struct scope_rt *sc = scope_find(ad, ref->t[i].scope);
		const struct conf_class *cls = NULL;
		if (sc == NULL)
			continue; /* not in this daemon's conf: nothing it can release */
		if (ref->t[i].cls[0] != '\0' &&
		    (cls = conf_class_find(sc->cs, ref->t[i].cls)) == NULL)
			continue;
		t[nt++] = (struct be_target){ .cs = sc->cs, .cls = cls, .key = ref->t[i].key };
	}
	if (nt == 0 || ad->redis == NULL)
		none.unavailable = false; /* nothing could ever vouch for it here */
	/* The handle again, in its one canonical form (lease_id_parse took
	 * no other): its body is what the records must bind. */
	if (nt > 0 && ad->redis != NULL && (handle = lease_id_format(ref)) == NULL)
		nt = 0;
	if (nt == 0 || ad->redis == NULL ||
	    !backend_release_ref(ad->redis, t, nt, ref->nonce, tokens, ntokens, rs, ref->nreserve,
				 strchr(handle, '.') + 1, cb, arg))
		cb(arg, &none);
	free(handle);
}

void eng_inspect(struct kq *kq, const struct conf_class *cls, eng_insp_cb *cb, void *arg)
{
	struct admitd *ad = kq->sc->ad;

	if (ad->redis != NULL && backend_inspect(ad->redis, kq, cls, cb, arg))
		return;
	eng_inspect_local(kq, ad->redis == NULL ? VIA_LOCAL : VIA_FALLBACK, cb, arg);
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

/* The head may be sleeping out a limit that was just lifted or loosened. */
static void eng_wake_head(struct kq *kq)
{
	if (kq->wake_at != 0 && kq->retry_ev != NULL) {
		event_del(kq->retry_ev);
		kq->wake_at = 0;
	}
}

void eng_reset(struct kq *kq, eng_reset_cb *cb, void *arg)
{
	struct admitd *ad = kq->sc->ad;

	lim_reset(kq_lim(kq));
	eng_refused_forget(kq);
	backend_ahead_end(kq);
	eng_wake_head(kq);
	if (ad->redis != NULL && backend_reset(ad->redis, kq, cb, arg)) {
		waitq_pump(kq);
		return;
	}
	waitq_pump(kq);
	cb(arg, ad->redis == NULL ? VIA_LOCAL : VIA_FALLBACK, ad->redis == NULL);
}

void eng_override(struct kq *kq, int64_t ttl_ms, int64_t min_delay_ms, const int64_t *amount,
		  eng_reset_cb *cb, void *arg)
{
	struct admitd *ad = kq->sc->ad;
	struct lim_state *st = kq_lim(kq);
	bool here = st != NULL &&
		    lim_override(st, kq->sc->cs, clock_mono_ms() + ttl_ms, min_delay_ms, amount);

	eng_refused_forget(kq);
	backend_ahead_end(kq); /* booked under the amounts the override replaces */
	eng_wake_head(kq);
	/* Sent before the head asks again: on the key's connection, in order. */
	if (ad->redis != NULL &&
	    backend_override(ad->redis, kq, ttl_ms, min_delay_ms, amount, cb, arg)) {
		waitq_pump(kq);
		return;
	}
	waitq_pump(kq);
	cb(arg, ad->redis == NULL ? VIA_LOCAL : VIA_FALLBACK, ad->redis == NULL && here);
}

int64_t eng_min_delay(struct kq *kq, enum via via)
{
	const struct conf_scope *cs = kq->sc->cs;
	struct lim_share sh = via == VIA_FALLBACK && kq->sc->ad->redis != NULL
				  ? backend_share(kq->sc->ad->redis, cs)
				  : LIM_WHOLE;

	return lim_min_delay(cs, lim_key_share(kq_lim(kq), cs, sh, clock_mono_ms()));
}

void eng_penalize(struct kq *kq, int64_t delay_ms)
{
	struct lim_state *st = kq_lim(kq);

	/* The in-process state is held back too: it serves if Redis goes away. */
	if (st != NULL)
		lim_penalize(st, clock_mono_ms(), delay_ms);
	adrt_penalize_local(kq, kq->sc->ad->redis != NULL && backend_up(kq->sc->ad->redis),
			    clock_mono_ms());
	if (kq->sc->ad->redis != NULL)
		backend_penalize(kq->sc->ad->redis, kq, delay_ms);
	backend_ahead_end(kq); /* held back: what it booked ahead is not handed out */
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
