/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rb_fair.c - the queue that every daemon shares for a key of a fair scope.
 *
 * Owns: the fair form of acquire.lua's call (the waiters a class head's
 * call lists, each with the ticket it holds, then the acquire of the batch:
 * rb_fair_args), what its reply says of the tickets (placed on the waiters
 * through waitq_fleet_place: rb_fair_reply), how long a waiter behind other
 * pods' tickets waits (rb_fair_behind), and the call that drops the ticket
 * of a waiter that left unserved (backend_fair_leave). The order itself is
 * the script's (acquire.lua, "One order across the fleet").
 */

#include "backend_int.h"

#include "log.h"
#include "rpool.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The key's three keys of the shared queue: tickets, tags, pods. */
static void rb_fair_keys(struct rargs *a, const struct backend *b, const struct conf_scope *cs,
			 const char *key, const struct conf_class *cls, bool pods)
{
	const char *p[6] = { b->ad->conf->prefix, ":{", cs->name, ":", key, "}:fp" };

	rb_fair_class_key(a, b, cs, key, "}:fq:", cls);
	rb_fair_class_key(a, b, cs, key, "}:fs:", cls);
	if (pods)
		rargs_cat(a, p, 6);
}

/*
 * The classes of cs whose waiters go before cls's across daemons
 * (conf_plan_holds_always): into hs (at most max); returns how many.
 */
static size_t rb_fair_holders(const struct conf_scope *cs, const struct conf_class *cls,
			      const struct conf_class **hs, size_t max)
{
	size_t i, n = 0;

	for (i = 0; i <= cs->nclasses && n < max; i++) {
		const struct conf_class *h = i < cs->nclasses ? &cs->classes[i] : NULL;
		if (conf_plan_holds_always(cs, h, cls))
			hs[n++] = h;
	}
	return n;
}

bool rb_fair_on(const struct waiter *w)
{
	const struct conf_scope *cs = w->t[0].kq->sc->cs;

	return cs->fair && !cs->shadow && w->nt == 1 && w->nreserve == 0;
}

bool rb_fair_now(const struct waiter *w)
{
	const struct kq *kq = w->t[0].kq;
	const struct conf_class *hs[1];

	/* A plain plan's acquire checks the key's tickets itself (an 'f'
	 * group, which books ahead): it takes a ticket once some wait. That
	 * group checks its own class's tickets only: a class held behind
	 * another's always asks in the fair form. */
	return rb_fair_on(w) &&
	       (kq->fl_queued || kq->nwait > 1 || !conf_plan_of(kq->sc->cs, w->t[0].cls)->plain ||
		rb_fair_holders(kq->sc->cs, w->t[0].cls, hs, 1) > 0);
}

void rb_fair_args(struct rargs *a, struct backend *b, struct waiter *const *ws, size_t n,
		  const char *ids, int64_t not_after, size_t *nkeys)
{
	const struct target_rt *t = &ws[0]->t[0];
	const struct conf_scope *cs = t->kq->sc->cs;
	const struct conf_class *hs[RB_FAIR_HOLDERS];
	struct rargs acq = { 0 };
	size_t i, nk = 0, nh = rb_fair_holders(cs, t->cls, hs, RB_FAIR_HOLDERS);

	rb_acquire_args(&acq, b, t, ids, n, not_after, ws[0], &nk);
	if (acq.oom) {
		a->oom = true;
		goto out;
	}
	rb_fair_keys(a, b, cs, t->kq->key, t->cls, true);
	for (i = 0; i < nh; i++)
		rb_fair_class_key(a, b, cs, t->kq->key, "}:fq:", hs[i]);
	for (i = 0; i < nk; i++)
		rargs_str(a, acq.v[i]);
	rargs_str(a, "F");
	rargs_str(a, b->pod_id);
	rargs_int(a, RB_FAIR_TTL_MS);
	rargs_int(a, (int64_t)n);
	rargs_int(a, (int64_t)nh);
	rargs_int(a, cs->override_milli);
	for (i = 0; i < n; i++) {
		const struct conf_weight *cw = conf_weight_find(cs, ws[i]->tenant);
		char wid[24];
		snprintf(wid, sizeof(wid), "%" PRIx64, ws[i]->seq);
		rargs_str(a, wid);
		rargs_str(a, ws[i]->fl_member);
		rargs_str(a, cw != NULL ? cw->name : "");
		rargs_int(a, cw != NULL ? cw->weight : 1);
		rargs_str(a, ws[i]->try_only ? "1" : "0");
		rargs_str(a, ws[i]->tenant);
	}
	for (i = nk; i < acq.n; i++)
		rargs_str(a, acq.v[i]);
	*nkeys = nk + 3 + nh;
out:
	rargs_clear(&acq);
}

const struct rval *rb_fair_reply(struct waiter *const *ws, size_t n, const struct rval *reply,
				 int64_t *ahead)
{
	size_t i;

	struct kq *kq = ws[0]->t[0].kq;

	if (reply == NULL || reply->type != RV_ARR || reply->n < 4 || reply->a[0].type != RV_ARR ||
	    reply->a[1].type != RV_INT || reply->a[2].type != RV_INT || reply->a[3].type != RV_INT)
		return NULL;
	*ahead = reply->a[1].i;
	/* while tickets wait, this pod's acquires of the key take one too */
	kq->fl_queued = reply->a[2].i > 0;
	if (reply->a[3].i > 0)
		kq->sc->tickets_dropped += (uint64_t)reply->a[3].i;
	if (reply->n < 4 + 2 * n)
		return &reply->a[0]; /* nobody waits, or a stale run: nothing placed */
	for (i = 0; i < n; i++) {
		const struct rval *m = &reply->a[4 + 2 * i], *s = &reply->a[5 + 2 * i];
		if (m->type == RV_STR && m->len > 0 && s->type == RV_STR) {
			if (strcmp(ws[i]->fl_member, m->s) != 0)
				kq->sc->tickets++; /* a new one (or one Redis had lost) */
			waitq_fleet_place(ws[i], m->s, strtod(s->s, NULL));
		} else {
			waitq_fleet_place(ws[i], NULL, 0);
		}
	}
	return &reply->a[0];
}

int64_t rb_fair_behind(const struct conf_scope *cs, const struct conf_class *cls, int64_t ahead,
		       int64_t cost, int64_t first, int64_t *ask_min)
{
	int64_t bound = 0, est = 0;
	bool rated = false;
	size_t i;
	const struct conf_plan *pl = conf_plan_of(cs, cls);

	/*
	 * The wait: no sooner than the tightest rate rule lets the cost ahead
	 * pass and then this one's, all of it taken by this queue, whatever the
	 * rule holds now (its burst or window whole): a lower bound, so a
	 * `budget_exceeded` on it is never wrong (none where the amounts move
	 * at run time: adaptive scopes, overrides). The head asks again when
	 * its turn comes if every ticket ahead takes its unit on time: the
	 * first one's unit in `first` ms (the script's estimate), then one
	 * unit's interval of the tightest rule a ticket ahead.
	 */
	for (i = 0; i < pl->nrules; i++) {
		const struct conf_rule *r = &cs->rules[pl->rules[i]];
		struct strat_params p = conf_rule_params(r);
		int64_t lump, need, b, e;
		if (r->meter != METER_REQUESTS || p.amount <= 0 || p.window_ms <= 0)
			continue;
		lump = p.burst > p.amount ? p.burst : p.amount;
		need = (ahead + 1) * cost;
		b = need > lump ? (need - lump) * p.window_ms / p.amount : 0;
		e = (ahead * cost * p.window_ms + p.amount - 1) / p.amount; /* rounded up */
		if (b > bound)
			bound = b;
		if (e > est)
			est = e;
		rated = true;
	}
	if (cs->adaptive || cs->override_milli > 0)
		bound = 0;
	est += (first > 0 ? first : 0) + 1; /* a ms late, rather than a call early */
	if (!rated) /* no rate to count turns by (slots, a quota): a slot's wait */
		est = cs->concurrency_retry_ms;
	*ask_min = est < RB_FAIR_ASK_MS ? est : RB_FAIR_ASK_MS;
	return bound > 1 ? bound : 1;
}

static void rb_fair_left_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct backend *b = arg;

	if (st != RP_OK || reply == NULL || reply->type == RV_ERR) {
		if (st != RP_SHUTDOWN)
			rb_failed(b, RB_OP_LEAVE, st, reply);
	}
}

void backend_fair_leave(struct backend *b, const struct waiter *w)
{
	const struct kq *kq = w->t[0].kq;
	struct rargs a = { 0 };

	if (b->closing || !b->up || !rpool_up(b->pool))
		return; /* it lapses with this pod's turn on the key (RB_FAIR_TTL_MS) */
	rb_fair_keys(&a, b, kq->sc->cs, kq->key, w->t[0].cls, false);
	rargs_str(&a, "FL");
	rargs_str(&a, w->fl_member);
	rargs_int(&a, w->t[0].cost);
	if (a.oom || rb_eval(b, kq->sc->cs, kq->key, b->s_acquire, &a, 2, rb_fair_left_cb, b) != 0)
		log_ratelimited(LOG_SLOT_RECONCILE, 1000,
				"cannot drop a ticket of a waiter that left: it lapses", NULL);
	else
		b->calls[RB_OP_LEAVE]++;
	rargs_clear(&a);
}
