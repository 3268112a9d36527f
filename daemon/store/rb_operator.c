/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rb_operator.c - the Redis backend's operator calls.
 *
 * Owns: inspect (what Redis holds for a key), reset (its state deleted) and
 * override (a temporary limit, or a tenant's weight, set in Redis), each one script call whose
 * reply answers the operator through the engine's callback.
 */

#include "backend_int.h"

#include "rpool.h"

#include <stdlib.h>

/* ---- operator calls: inspect, reset ---- */

struct rb_op_ctx {
	struct backend *b;
	struct kq *kq;
	const struct conf_scope *cs; /* kq's scope's conf when sent (a reload may replace it) */
	const struct conf_class *cls;
	bool fair; /* inspect: the class's queue across daemons too */
	eng_insp_cb *insp_cb;
	eng_reset_cb *reset_cb;
	backend_tovr_cb *tovr_cb;
	enum rb_op op; /* reset_cb's: RB_OP_RESET or RB_OP_OVERRIDE */
	void *arg;
};

static void rb_inspect_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct rb_op_ctx *x = arg;
	const struct conf_scope *cs = x->cs;
	const struct conf_plan *pl = conf_plan_of(cs, x->cls);
	struct strat_state *rules = NULL;
	struct lim_ovr *ov = NULL;
	size_t i, j, nints, nov = cs->override_milli > 0 ? 2 + pl->nrules : 0;
	struct eng_insp in = { .via = VIA_REDIS };
	struct eng_flow flows[ENG_INSP_FLOWS];
	bool ok;

	if (cs != x->kq->sc->cs) {
		/* A reload replaced the scope while the call was out: the reply is
		 * laid out for rules the caller no longer has. */
		eng_inspect_local(x->kq, VIA_FALLBACK, x->insp_cb, x->arg);
		goto out;
	}
	rules = calloc(cs->nrules ? cs->nrules : 1, sizeof(*rules));
	ok =
	    rules != NULL && st == RP_OK && reply != NULL && reply->type == RV_ARR && reply->n >= 6;

	nints = 10 + 3 * pl->nrules + nov;
	for (i = 0; ok && i < reply->n && i < nints; i++)
		ok = reply->a[i].type == RV_INT;
	if (ok && x->fair) /* then the tickets, the virtual time, and per flow a name and a count */
		ok = reply->n >= nints + 2 && (reply->n - nints) % 2 == 0 &&
		     reply->a[nints].type == RV_INT && reply->a[nints + 1].type == RV_STR;
	else
		ok = ok && reply->n == nints;
	if (!ok) {
		if (st != RP_SHUTDOWN)
			rb_failed(x->b, RB_OP_INSPECT, st, reply);
		eng_inspect_local(x->kq, VIA_FALLBACK, x->insp_cb, x->arg);
		goto out;
	}
	in.now = reply->a[0].i;
	in.next_at = reply->a[1].i;
	in.penalty_until = reply->a[2].i;
	in.leases = reply->a[3].i;
	in.quota_used = reply->a[4].i;
	in.quota_oldest = reply->a[5].i;
	for (i = 0, j = 6; i < pl->nrules; i++, j += 3) {
		rules[pl->rules[i]].a = reply->a[j].i;
		rules[pl->rules[i]].b = reply->a[j + 1].i;
		rules[pl->rules[i]].t = reply->a[j + 2].i;
	}
	in.rules = rules;
	/* the adaptive hash: amt, td, tc, tl, then the override */
	in.ad = (struct adapt_state){ reply->a[j].i, reply->a[j + 1].i, reply->a[j + 2].i,
				      reply->a[j + 3].i };
	j += 4;
	if (nov > 0 && reply->a[j].i > 0 &&
	    (ov = calloc(1, sizeof(*ov) + (cs->nrules + 1) * sizeof(ov->amount[0]))) != NULL) {
		ov->until = reply->a[j].i;
		ov->min_delay_ms = reply->a[j + 1].i;
		ov->nrules = (uint32_t)cs->nrules;
		for (i = 0; i < pl->nrules; i++)
			ov->amount[pl->rules[i]] = reply->a[j + 2 + i].i;
		in.ov = ov;
	}
	if (x->fair) {
		in.fair = true;
		in.tickets = reply->a[nints].i;
		in.fair_v = reply->a[nints + 1].s;
		for (i = nints + 2; i + 1 < reply->n && in.nflows < ENG_INSP_FLOWS; i += 2)
			if (reply->a[i].type == RV_STR && reply->a[i + 1].type == RV_INT)
				flows[in.nflows++] =
				    (struct eng_flow){ reply->a[i].s, reply->a[i + 1].i };
		in.flows = flows;
	}
	x->insp_cb(x->arg, &in);
out:
	free(ov);
	free(rules);
	free(x);
}

bool backend_inspect(struct backend *b, struct kq *kq, const struct conf_class *cls,
		     eng_insp_cb *cb, void *arg)
{
	const struct conf_scope *cs = kq->sc->cs;
	const struct conf_plan *pl = conf_plan_of(cs, cls);
	struct rb_op_ctx *x = calloc(1, sizeof(*x));
	struct rargs a = { 0 };
	size_t nkeys, i;
	bool ok = false;

	if (b->closing || !b->up || !rpool_up(b->pool) || x == NULL)
		goto out;
	nkeys = rb_keys(&a, b, cs, kq->key, pl);
	if (cs->penalty_rule >= 0) {
		rb_penalty_key(&a, b, cs, kq->key);
		nkeys++;
	}
	if (cs->fair) { /* the class's tickets and tags: the last KEYS */
		rb_fair_class_key(&a, b, cs, kq->key, "}:fq:", cls);
		rb_fair_class_key(&a, b, cs, kq->key, "}:fs:", cls);
		nkeys += 2;
	}
	rargs_int(&a, cs->quota > 0 ? cs->quota_window_ms : 0);
	rargs_int(&a, (int64_t)pl->nrules);
	if (cs->override_milli > 0) { /* its override too, by the rules' indexes */
		rargs_int(&a, 1);
		for (i = 0; i < pl->nrules; i++)
			rargs_int(&a, (int64_t)pl->rules[i]);
	}
	if (cs->fair) {
		rargs_str(&a, "q");
		rargs_int(&a, 2);
	}
	*x = (struct rb_op_ctx){
		.b = b, .kq = kq, .cs = cs, .cls = cls, .fair = cs->fair, .insp_cb = cb, .arg = arg
	};
	ok = !a.oom && rb_eval(b, cs, kq->key, b->s_inspect, &a, nkeys, rb_inspect_cb, x) == 0;
	if (ok)
		b->calls[RB_OP_INSPECT]++;
out:
	if (!ok)
		free(x);
	rargs_clear(&a);
	return ok;
}

/* A reset's or an override's reply: told (an integer) or not; a tenant's weight, -1: full. */
static void rb_reset_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct rb_op_ctx *x = arg;
	bool ok = st == RP_OK && reply != NULL && reply->type == RV_INT;

	if (!ok && st != RP_SHUTDOWN)
		rb_failed(x->b, x->op, st, reply);
	if (x->tovr_cb != NULL)
		x->tovr_cb(x->arg, !ok		  ? BACKEND_TOVR_UNTOLD
				   : reply->i < 0 ? BACKEND_TOVR_FULL
						  : BACKEND_TOVR_SET);
	else
		x->reset_cb(x->arg, ok ? VIA_REDIS : VIA_FALLBACK, ok);
	free(x);
}

/* Send x's call (script, with a's arguments, the first nkeys keys): true when sent. */
static bool rb_op_send(struct rb_op_ctx *x, int script, struct rargs *a, size_t nkeys)
{
	struct backend *b = x->b;
	bool ok =
	    !a->oom && rb_eval(b, x->kq->sc->cs, x->kq->key, script, a, nkeys, rb_reset_cb, x) == 0;

	if (ok)
		b->calls[x->op]++;
	else
		free(x);
	rargs_clear(a);
	return ok;
}

/* The context of an operator call on kq, NULL when Redis takes none now. */
static struct rb_op_ctx *rb_op_new(struct backend *b, struct kq *kq, enum rb_op op, void *arg)
{
	struct rb_op_ctx *x;

	if (b->closing || !b->up || !rpool_up(b->pool) || (x = calloc(1, sizeof(*x))) == NULL)
		return NULL;
	*x = (struct rb_op_ctx){ .b = b, .kq = kq, .op = op, .arg = arg };
	return x;
}

bool backend_reset(struct backend *b, struct kq *kq, eng_reset_cb *cb, void *arg)
{
	struct rb_op_ctx *x = rb_op_new(b, kq, RB_OP_RESET, arg);
	struct rargs a = { 0 };

	if (x == NULL)
		return false;
	x->reset_cb = cb;
	rb_key(&a, b, kq->sc->cs, kq->key, "s", -1);
	if (kq->sc->cs->penalty_rule >= 0)
		rb_penalty_key(&a, b, kq->sc->cs, kq->key);
	return rb_op_send(x, b->s_reset, &a, a.n);
}

bool backend_override(struct backend *b, struct kq *kq, int64_t ttl_ms, int64_t min_delay_ms,
		      const int64_t *amount, eng_reset_cb *cb, void *arg)
{
	const struct conf_scope *cs = kq->sc->cs;
	struct rb_op_ctx *x = rb_op_new(b, kq, RB_OP_OVERRIDE, arg);
	struct rargs a = { 0 };
	size_t i;

	if (x == NULL)
		return false;
	x->reset_cb = cb;
	rb_key(&a, b, cs, kq->key, "a", -1);
	rargs_int(&a, ttl_ms);
	rargs_int(&a, min_delay_ms);
	rargs_int(&a, (int64_t)cs->nrules);
	for (i = 0; i < cs->nrules; i++)
		rargs_int(&a, amount != NULL ? amount[i] : 0);
	return rb_op_send(x, b->s_override, &a, 1);
}

bool backend_override_tenant(struct backend *b, struct kq *kq, const char *tenant, int weight,
			     int64_t ttl_ms, int max, backend_tovr_cb *cb, void *arg)
{
	struct rb_op_ctx *x = rb_op_new(b, kq, RB_OP_OVERRIDE, arg);
	struct rargs a = { 0 };

	if (x == NULL)
		return false;
	x->tovr_cb = cb;
	rb_key(&a, b, kq->sc->cs, kq->key, "a", -1);
	rargs_int(&a, ttl_ms);
	rargs_str(&a, "tw");
	rargs_str(&a, tenant);
	rargs_int(&a, weight);
	rargs_int(&a, max);
	return rb_op_send(x, b->s_override, &a, 1);
}
