/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rb_acquire.c - the Redis backend's acquires of one waiter and of a hot
 * key's first waiters.
 *
 * Owns: the acquire calls of one waiter (backend_acquire: one call per
 * target, pipelined, or a single target queued for the pass's batch,
 * rb_xbatch.c) and of the first waiters of one hot key (one call,
 * backend_acquire_batch); reading their replies (what is left, the
 * adaptive amount and the override they carry back), and rolling back the
 * targets that admitted when another refused, failed or the waiter left.
 * A single target queued for the pass's batch is answered through the
 * callbacks it hands rb_xbatch.c (rb_acq_xb).
 */

#include "backend_int.h"

#include "adaptive_rt.h"
#include "clock.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

enum rb_outcome { RB_R_REFUSED = 0, RB_R_ADMITTED, RB_R_STALE, RB_R_UNKNOWN };

/* The general reply's length for a one-rule plan (rb_plain_reply makes one). */
#define RB_PLAIN_REPLY 13

/* One target's call of an acquire: the arg of its reply's callback. */
struct rb_acq_part {
	struct rb_acq *q;
	size_t i;
};

/* One waiter's acquire: its targets' outcomes and their calls' args, then
 * its answer (one allocation, its r[] sized to the waiter's targets: one
 * target's is within glibc's per-thread cache). */
struct rb_acq {
	struct backend *b;
	struct waiter *w;
	eng_cb *cb;
	void *arg;
	char lease_id[LEASE_NONCE_LEN + 1];
	size_t pending;
	int64_t not_after_mono; /* no run of these scripts books after this */
	struct eng_res res;	/* the answer, once decided */
	size_t rollbacks;	/* answered when the last rollback is in */
	bool ahead;		/* its one target's plan books ahead */
	bool form7;		/* ... and the call is an 'a' group (seven numbers) */
	int64_t got;		/* ... the units it booked ahead */
	int64_t give;		/* ... and those it gave back (rb_ahead_ask) */
	uint64_t gen;		/* the conf it was sent under (reloads applied) */
	struct {
		enum rb_outcome out;
		int64_t retry;
		long code;
		int64_t next_booked, next_before;
		struct lim_left left;
		struct rb_acq_part part; /* {this acquire, i} */
	} r[];				 /* one a target of w (w->nt): allocated to its count */
};

/* ---- acquire ---- */
/*
 * What the acquire script's reply says is left of t's limits after its
 * decision (reply[7..9]: leases, quota instants, the newest; then a, b, t
 * per rule of the plan; reply[6] is the adaptive amount), folded into acc. A reply without it (a stale run)
 * adds nothing.
 */
static void rb_left_parse(struct lim_left *acc, const struct rval *reply, const struct target_rt *t)
{
	const struct conf_scope *cs = t->kq->sc->cs;
	const struct conf_plan *pl = conf_plan_of(cs, t->cls);
	struct strat_state few[8] = { { 0, 0, 0 } }, *rules = few;
	size_t k, n = 10 + 3 * pl->nrules;

	if (cs->shadow || reply->n < n)
		return;
	for (k = 3; k < n; k++)
		if (reply->a[k].type != RV_INT)
			return;
	if (pl->nrules > sizeof(few) / sizeof(few[0]) &&
	    (rules = calloc(pl->nrules, sizeof(*rules))) == NULL)
		return;
	for (k = 0; k < pl->nrules; k++) {
		rules[k].a = reply->a[10 + 3 * k].i;
		rules[k].b = reply->a[11 + 3 * k].i;
		rules[k].t = reply->a[12 + 3 * k].i;
	}
	eng_fb_left(acc, t->kq, t->cls, reply->a[6].i, rules, reply->a[7].i, reply->a[8].i,
		    reply->a[9].i, reply->a[3].i);
	if (rules != few)
		free(rules);
}

/*
 * What an acquire reply says of t's override (after the rules' counters: its
 * end, its min_delay, then per rule of the plan its amount): the key's
 * in-process state takes it, on this daemon's clock, so that the fallback
 * holds it too should Redis go away, and so that what is left is counted
 * against it. An override another daemon set, or lifted, comes here too.
 */
static void rb_ovr_mirror(const struct rval *reply, const struct target_rt *t)
{
	const struct conf_scope *cs = t->kq->sc->cs;
	const struct conf_plan *pl = conf_plan_of(cs, t->cls);
	int64_t few[8], *amount = few;
	size_t k, base = 10 + 3 * pl->nrules;

	if (cs->override_milli <= 0 || reply->n < base + 2 + pl->nrules)
		return;
	for (k = base; k < base + 2 + pl->nrules; k++)
		if (reply->a[k].type != RV_INT)
			return;
	if (reply->a[base].i <= reply->a[3].i) {
		eng_fb_override(t->kq, t->cls, 0, -1, NULL);
		return;
	}
	if (pl->nrules > sizeof(few) / sizeof(few[0]) &&
	    (amount = calloc(pl->nrules, sizeof(*amount))) == NULL)
		return;
	for (k = 0; k < pl->nrules; k++)
		amount[k] = reply->a[base + 2 + k].i;
	eng_fb_override(t->kq, t->cls, clock_mono_ms() + (reply->a[base].i - reply->a[3].i),
			reply->a[base + 1].i, amount);
	if (amount != few)
		free(amount);
}

/* Undo the targets of q that Redis admitted (another refused or failed). */
static void rb_acq_finish(struct rb_acq *q)
{
	q->cb(q->arg, &q->res);
	free(q);
}

/* A rollback answered (or was queued after an unknown outcome). */
static void rb_rollback_done(void *arg, const struct eng_settled *st UNUSED)
{
	struct rb_acq *q = arg;

	if (--q->rollbacks == 0)
		rb_acq_finish(q);
}

/*
 * Undo the targets Redis admitted, and answer the waiter only once Redis
 * has: a client told "refused" that asks again at once must not find the
 * rolled-back booking still there (it may go through another connection).
 * q->res is the answer; q is finished here or when the last rollback is in.
 */
/*
 * Undo what target i of w booked in Redis under lease_id (next_booked and
 * next_before: the pacing it set and replaced). With cb, true when cb will
 * run once Redis has answered; otherwise (or when it cannot be sent now) the
 * undo goes out alone, or waits in the queue until Redis takes calls again.
 */
static bool rb_rollback_target(struct backend *b, const struct waiter *w, size_t i,
			       const char *lease_id, int64_t next_booked, int64_t next_before,
			       eng_settled_cb *cb, void *arg)
{
	struct rb_rel *r = rb_rel_new(b, RB_M_ROLLBACK, RB_OP_ROLLBACK, lease_id);

	eng_refused_forget(w->t[i].kq); /* a refund: what Redis refused may pass */
	if (r == NULL || !rb_rel_target(r, w->t[i].kq->sc->cs, w->t[i].cls, w->t[i].kq->key)) {
		if (r != NULL)
			rb_rel_free(r);
		rb_failed(b, RB_OP_ROLLBACK, RP_CONN, NULL);
		return false;
	}
	r->cost[0] = w->t[i].cost;
	r->reserve = meter_tokens_dup(w->reserve, w->nreserve, &r->nreserve);
	r->x1[0] = next_booked;
	r->x2[0] = next_before;
	r->cb = cb;
	r->cb_arg = arg;
	if (rb_rel_send(r))
		return cb != NULL;
	r->cb = NULL;
	rb_queue(b, r, 0);
	return false;
}

static void rb_rollback(struct rb_acq *q, bool wait)
{
	struct waiter *w = q->w;
	size_t i;

	q->rollbacks = 1; /* held while they are sent: one may complete at once */
	for (i = 0; i < w->nt; i++) {
		if (q->r[i].out != RB_R_ADMITTED)
			continue;
		q->rollbacks++;
		if (!rb_rollback_target(q->b, w, i, q->lease_id, q->r[i].next_booked,
					q->r[i].next_before, wait ? rb_rollback_done : NULL, q))
			q->rollbacks--;
	}
	rb_rollback_done(q, NULL);
}

/*
 * An admitted acquire that booked ahead: its key keeps the units (even if
 * its own admission is undone: they were booked), unless a reload came
 * between (they were booked under a rule that may be gone: dropped), and
 * what is left counts them as this pod's.
 */
static void rb_acq_ahead(struct rb_acq *q, struct eng_res *res)
{
	const struct target_rt *t = &q->w->t[0];

	if (q->gen != q->b->ad->reloads_ok) {
		q->b->ahead_booked += (uint64_t)q->got;
		q->b->ahead_dropped += (uint64_t)q->got;
		return;
	}
	rb_ahead_keep(q->b, t->kq, t->cls, q->got, &res->left);
	rb_ahead_count(&res->left, q->got);
}

/*
 * q's one target goes plain (or not), with ask (NULL: nothing booked
 * ahead): what it books ahead and gives back.
 */
static void rb_acq_plain(struct rb_acq *q, bool plain, const struct rb_ask *ask)
{
	q->ahead = plain && ask != NULL && ask->books_ahead;
	/* a fair key's plain acquire alone is an 'f' group: the 'a' layout */
	q->form7 = plain && ask != NULL && (ask->ahead || rb_fair_on(q->w));
	q->give = q->form7 ? ask->give : 0;
}

/* All targets answered (or failed): combine, roll back partial admissions. */
static void rb_acq_done(struct rb_acq *q)
{
	struct backend *b = q->b;
	struct waiter *w = q->w;
	struct eng_res res = { .admitted = true, .via = VIA_REDIS };
	bool unknown[PROTO_MAX_TARGETS] = { false };
	bool failed = false, any_unknown = false;
	size_t i;

	for (i = 0; i < w->nt; i++) {
		if (q->r[i].out == RB_R_STALE || q->r[i].out == RB_R_UNKNOWN)
			failed = true;
		if (q->r[i].out == RB_R_UNKNOWN)
			unknown[i] = any_unknown = true;
	}
	if (b->closing) {
		/* The pool is gone: nothing can be sent. What Redis booked
		 * expires by its TTLs. */
		struct eng_res gone = { .via = VIA_REDIS, .unavailable = true };
		q->cb(q->arg, &gone);
		free(q);
		return;
	}
	for (i = 0; i < w->nt && !failed; i++) {
		const struct conf_scope *cs = w->t[i].kq->sc->cs;
		bool admitted = q->r[i].out == RB_R_ADMITTED;
		if (admitted && conf_plan_of(cs, w->t[i].cls)->release_books)
			res.booked = true;
		eng_merge(
		    &res, w->t[i].kq, admitted, q->r[i].retry,
		    conf_plan_which_rule(cs, q->r[i].code), conf_plan_which_slot(cs, q->r[i].code),
		    q->r[i].retry < 0 ? conf_plan_which_limit(cs, w->t[i].cls, q->r[i].code) : 0);
	}
	eng_merge_end(&res);
	for (i = 0; i < w->nt && !failed; i++)
		eng_merge_left(&res, &q->r[i].left);
	if (!failed && q->ahead && q->r[0].out == RB_R_ADMITTED)
		rb_acq_ahead(q, &res);
	if (failed && q->give > 0)
		rb_ahead_lost(b, q->give);
	if (failed) {
		bool admitted_any = false;
		for (i = 0; i < w->nt; i++)
			admitted_any |= q->r[i].out == RB_R_ADMITTED;
		res = eng_fallback(b->ad, w, q->lease_id);
		if (any_unknown && res.admitted) {
			/* The lease the fallback grants is released in Redis too. */
			res.redis_maybe = true;
			res.redis_after = q->not_after_mono + RB_CLOCK_MARGIN_MS;
		} else if (any_unknown) {
			rb_reconcile(b, w, unknown, q->lease_id, q->not_after_mono);
		}
		q->res = res;
		if (admitted_any) /* Redis is failing: the fallback answers now */
			rb_rollback(q, false);
		else
			rb_acq_finish(q);
		return;
	}
	if (res.admitted && w->canceled) {
		/* Its client canceled it (or left) while Redis decided: nobody
		 * will use the admission, so it is undone, not released. */
		res.admitted = false;
		res.booked = false;
		q->res = res;
		rb_rollback(q, false);
		return;
	}
	if (!res.admitted && res.retry_after_ms >= 0 && rb_fair_on(w)) {
		/* A fair key is at its limit: its waiters take tickets, this
		 * one now (its class head asks in the fair form at once). */
		w->t[0].kq->fl_queued = true;
		res.ask_max_ms = 1;
	}
	q->res = res;
	if (!res.admitted) {
		eng_refused_keep(w, &res); /* asked again here only once it can pass */
		rb_rollback(q, true);
		return;
	}
	rb_acq_finish(q);
}

static void rb_acq_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct rb_acq_part *part = arg;
	struct rb_acq *q = part->q;
	size_t i = part->i;

	if (st == RP_OK && reply != NULL && reply->type == RV_ARR && reply->n >= 4 &&
	    reply->a[0].type == RV_INT && reply->a[1].type == RV_INT &&
	    reply->a[2].type == RV_INT) {
		q->r[i].out = reply->a[0].i == 1 ? RB_R_ADMITTED : RB_R_REFUSED;
		q->r[i].retry = reply->a[1].i;
		q->r[i].code = (long)reply->a[2].i;
		if (reply->a[3].type == RV_INT)
			rb_saw_time(q->b, reply->a[3].i);
		if (reply->n >= 6 && reply->a[4].type == RV_INT && reply->a[5].type == RV_INT) {
			q->r[i].next_booked = reply->a[4].i;
			q->r[i].next_before = reply->a[5].i;
		}
		if (reply->n >= 7 && reply->a[6].type == RV_INT)
			adrt_mirror(q->w->t[i].kq, reply->a[6].i);
		if (q->r[i].code == PLAN_WHICH_FLEET)
			q->w->t[i].kq->fl_queued = true; /* its tickets' turn: take one */
		if (q->r[i].code == PLAN_WHICH_STALE) {
			rb_stale(q->b, RB_OP_ACQUIRE);
			q->r[i].out = RB_R_STALE;
		} else {
			rb_ovr_mirror(reply, &q->w->t[i]);
			rb_left_parse(&q->r[i].left, reply, &q->w->t[i]);
		}
	} else {
		if (st != RP_SHUTDOWN)
			rb_failed(q->b, RB_OP_ACQUIRE, st, reply);
		q->r[i].out = RB_R_UNKNOWN;
	}
	if (--q->pending == 0)
		rb_acq_done(q);
}

/*
 * A plain acquire's six numbers in a flat reply (at: where they start;
 * a[0] the call's Redis time) as the general reply rb_acq_cb reads:
 * admitted, wait, code, now, no pacing, no adaptive amount, no lease set or
 * quota, then the rule's counter. false when they are not six numbers, or
 * seven for one that books ahead (part's acquire takes the seventh: the
 * units it booked ahead).
 */
static bool rb_plain_reply(const struct rval *flat, size_t at, const struct rb_acq_part *part,
			   struct rval v[RB_PLAIN_REPLY], struct rval *arr)
{
	static const size_t from[RB_PLAIN_REPLY] = { 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 4, 5, 6 };
	size_t k, nv = RB_PLAIN_NUMS(part->q->form7);

	if (flat == NULL || flat->type != RV_ARR || flat->n < at + nv || flat->a[0].type != RV_INT)
		return false;
	for (k = 0; k < nv; k++)
		if (flat->a[at + k].type != RV_INT)
			return false;
	if (part->q->form7)
		part->q->got = flat->a[at + 6].i > 0 ? flat->a[at + 6].i : 0;
	for (k = 0; k < RB_PLAIN_REPLY; k++) {
		v[k] = (struct rval){ .type = RV_INT };
		if (k == 3)
			v[k].i = flat->a[0].i;
		else if (from[k] != 0)
			v[k].i = flat->a[at + from[k] - 1].i;
	}
	*arr = (struct rval){ .type = RV_ARR, .n = RB_PLAIN_REPLY, .a = v };
	return true;
}

/* A lone plain acquire's reply: the Redis time and its six (or seven) numbers. */
static void rb_plain_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct rb_acq_part *part = arg;
	struct rval v[RB_PLAIN_REPLY], arr;

	if (st == RP_OK && reply != NULL && reply->type == RV_ARR &&
	    reply->n == 1 + RB_PLAIN_NUMS(part->q->form7) &&
	    rb_plain_reply(reply, 1, part, v, &arr))
		reply = &arr;
	else if (st == RP_OK && reply != NULL && reply->type != RV_ERR)
		reply = NULL; /* not what was asked: the outcome is unknown */
	rb_acq_cb(arg, st, reply);
}

/* An acquire the batch never sent: the fallback decides, nothing to reconcile. */
static void rb_acq_unsent(void *arg)
{
	struct rb_acq_part *part = arg;
	struct rb_acq *q = part->q;

	q->b->errors[RB_OP_ACQUIRE]++;
	q->r[part->i].out = RB_R_STALE;
	if (--q->pending == 0) /* as rb_acq_cb ends */
		rb_acq_done(q);
}

/* How the pass's batch answers an acquire it holds (rb_xbatch.c). */
static const struct rb_xb_ops rb_acq_xb = { .reply = rb_acq_cb,
					    .plain = rb_plain_cb,
					    .unsent = rb_acq_unsent };

/* Queue q's one target for the pass's batch; false: it goes alone. */
static bool rb_acq_queue(struct rb_acq *q, int64_t not_after, const struct rb_ask *ask)
{
	const struct target_rt *t = &q->w->t[0];
	struct rb_acq_part *part = &q->r[0].part;

	*part = (struct rb_acq_part){ .q = q, .i = 0 };
	/* before it is queued: a batch that cannot be sent answers at once */
	rb_acq_plain(q, conf_plan_of(t->kq->sc->cs, t->cls)->plain, ask);
	q->pending = 1;
	return rb_xb_add(q->b, q->w, q->lease_id, not_after, ask, &rb_acq_xb, part);
}

bool backend_acquire(struct backend *b, struct waiter *w, const char *lease_id, eng_cb *cb,
		     void *arg)
{
	struct rargs a[PROTO_MAX_TARGETS];
	struct rpool_call calls[PROTO_MAX_TARGETS];
	struct rb_acq *q;
	struct rb_ask ask = { 0 };
	bool alone = w->nt == 1 && w->nreserve == 0; /* may book ahead */
	int64_t not_after;
	bool ok = false;
	size_t i;

	if (b->closing)
		return false;
	if (!b->up || b->wb_active || !rpool_up(b->pool)) {
		b->errors[RB_OP_ACQUIRE]++; /* decided in fallback: Redis was not reached */
		return false;
	}
	q = calloc(1, offsetof(struct rb_acq, r) + w->nt * sizeof(q->r[0]));
	if (q == NULL)
		return false;
	q->b = b;
	q->w = w;
	q->cb = cb;
	q->arg = arg;
	memcpy(q->lease_id, lease_id, sizeof(q->lease_id));
	q->gen = b->ad->reloads_ok;
	not_after = rb_not_after(b, &q->not_after_mono);
	if (alone)
		ask = rb_ahead_ask(b, &w->t[0]);
	if (w->nt == 1 && b->xb != NULL && rb_acq_queue(q, not_after, alone ? &ask : NULL))
		return true;
	for (i = 0; i < w->nt; i++)
		rargs_init(&a[i]); /* its inline room is written before it is read */
	for (i = 0; i < w->nt; i++) {
		struct rb_acq_part *part = &q->r[i].part;
		struct rb_plain pa;
		size_t nkeys = 0;
		bool plain = rb_target_args(&a[i], b, &w->t[i], lease_id, not_after, w,
					    alone ? &ask : NULL, &pa, &nkeys);
		rb_acq_plain(q, plain, alone ? &ask : NULL);
		if (a[i].oom)
			goto out;
		part->q = q;
		part->i = i;
		calls[i] = (struct rpool_call){ .affinity = rb_affinity(w->t[0].kq->sc->cs,
									w->t[0].kq->key),
						.script = (size_t)b->s_acquire,
						.nkeys = nkeys,
						.argc = a[i].n,
						.argv = (const char *const *)a[i].v,
						.argvlen = a[i].len,
						.cb = plain ? rb_plain_cb : rb_acq_cb,
						.arg = part };
	}
	q->pending = w->nt;
	rb_xb_flush(b);
	ok = rpool_eval_multi(b->pool, w->nt, calls) == 0;
	if (ok) /* one script call per target, pipelined */
		b->calls[RB_OP_ACQUIRE] += w->nt;
out:
	if (!ok) {
		rb_ahead_lost(b, q->give); /* never sent */
		free(q);
	}
	for (i = 0; i < w->nt; i++)
		rargs_clear(&a[i]);
	return ok;
}

/* ---- acquire, batched: the first n waiters of one hot key in one call ---- */

struct rb_batch {
	struct backend *b;
	struct waiter *ws[ENG_BATCH_MAX];
	size_t n;
	eng_batch_cb *cb;
	void *arg;
	int64_t not_after_mono;
	bool fair; /* the fair form: the waiters' tickets, then the acquire's reply */
};

bool backend_fair(const struct backend *b, const struct waiter *w, bool *now)
{
	*now = b != NULL && rb_fair_now(w);
	return b != NULL && rb_fair_on(w);
}

/* The refusal of ws[i] by a limit or, in a fair key, by the tickets ahead. */
static void rb_batch_refused(struct rb_batch *q, struct eng_res *res, const struct rval *reply,
			     int64_t ahead)
{
	const struct target_rt *t = &q->ws[0]->t[0];
	const struct conf_scope *cs = t->kq->sc->cs;
	long code = (long)reply->a[2].i;
	int64_t retry = reply->a[1].i, ask_min = 0;

	if (code == PLAN_WHICH_FLEET)
		retry = rb_fair_behind(cs, t->cls, ahead, t->cost, retry, &ask_min);
	eng_merge(res, t->kq, false, retry, conf_plan_which_rule(cs, code),
		  conf_plan_which_slot(cs, code),
		  retry < 0 ? conf_plan_which_limit(cs, t->cls, code) : 0);
	eng_merge_end(res);
	if (q->fair) { /* its pod's tickets lapse unless it asks within RB_FAIR_TTL_MS */
		res->ask_min_ms = ask_min;
		res->ask_max_ms = RB_FAIR_ASK_MS;
	}
}

static void rb_batch_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct rb_batch *q = arg;
	struct backend *b = q->b;
	struct eng_res res[ENG_BATCH_MAX];
	const struct target_rt *t = &q->ws[0]->t[0];
	const struct conf_scope *cs = t->kq->sc->cs;
	int64_t ahead = 0;
	bool ok;

	if (q->fair && st == RP_OK && reply != NULL && reply->type == RV_ARR)
		reply = rb_fair_reply(q->ws, q->n, reply, &ahead);
	ok = st == RP_OK && reply != NULL && reply->type == RV_ARR && reply->n >= 4 &&
	     reply->a[0].type == RV_INT && reply->a[1].type == RV_INT &&
	     reply->a[2].type == RV_INT && reply->a[0].i >= 0 && (size_t)reply->a[0].i <= q->n;
	size_t i, m;

	memset(res, 0, sizeof(res));
	if (ok && reply->a[3].type == RV_INT)
		rb_saw_time(b, reply->a[3].i);
	if (ok && reply->n >= 7 && reply->a[6].type == RV_INT)
		adrt_mirror(t->kq, reply->a[6].i);
	if (ok && reply->a[2].i == PLAN_WHICH_STALE) {
		rb_stale(b, RB_OP_ACQUIRE);
		for (i = 0; i < q->n; i++) /* it booked nothing: decide in process */
			res[i] = eng_fallback(b->ad, q->ws[i], q->ws[i]->lease_id);
	} else if (ok) {
		struct lim_left left = { 0 };
		m = (size_t)reply->a[0].i;
		/* after the whole batch: each admitted one is told the least */
		rb_ovr_mirror(reply, t);
		rb_left_parse(&left, reply, t);
		for (i = 0; i < q->n; i++) {
			res[i].via = VIA_REDIS;
			res[i].left = left;
			if (i < m && q->ws[i]->canceled) {
				/* canceled while Redis decided: undone (a batch's
				 * scope has no pacing to put back) */
				rb_rollback_target(b, q->ws[i], 0, q->ws[i]->lease_id, 0, 0, NULL,
						   NULL);
				res[i].undecided = true;
			} else if (i < m) {
				res[i].admitted = true;
				res[i].booked = conf_plan_of(cs, t->cls)->release_books;
			} else if (i == m) {
				rb_batch_refused(q, &res[i], reply, ahead);
			} else {
				res[i].undecided = true;
			}
		}
	} else {
		/* Unknown: each in turn through the fallback, under its own id;
		 * what Redis may have booked is settled once its bound passed. */
		if (st != RP_SHUTDOWN)
			rb_failed(b, RB_OP_ACQUIRE, st, reply);
		for (i = 0; i < q->n; i++) {
			bool one = true;
			if (b->closing) {
				res[i] = (struct eng_res){ .via = VIA_REDIS, .unavailable = true };
				continue;
			}
			res[i] = eng_fallback(b->ad, q->ws[i], q->ws[i]->lease_id);
			if (res[i].admitted) {
				res[i].redis_maybe = true;
				res[i].redis_after = q->not_after_mono + RB_CLOCK_MARGIN_MS;
			} else {
				rb_reconcile(b, q->ws[i], &one, q->ws[i]->lease_id,
					     q->not_after_mono);
			}
		}
	}
	q->cb(q->arg, q->ws, q->n, res);
	free(q);
}

bool backend_acquire_batch(struct backend *b, struct waiter *const *ws, size_t n, eng_batch_cb *cb,
			   void *arg)
{
	char ids[ENG_BATCH_MAX * (LEASE_NONCE_LEN + 1)];
	struct rargs a = { 0 };
	struct rb_batch *q;
	size_t i, nkeys = 0, off = 0;
	int64_t not_after;

	if (b->closing || !b->up || b->wb_active || !rpool_up(b->pool) || n == 0 ||
	    n > ENG_BATCH_MAX)
		return false;
	q = calloc(1, sizeof(*q));
	if (q == NULL)
		return false;
	for (i = 0; i < n; i++) {
		if (i > 0)
			ids[off++] = ',';
		memcpy(ids + off, ws[i]->lease_id, LEASE_NONCE_LEN);
		off += LEASE_NONCE_LEN;
		q->ws[i] = ws[i];
	}
	ids[off] = '\0';
	q->b = b;
	q->n = n;
	q->cb = cb;
	q->arg = arg;
	not_after = rb_not_after(b, &q->not_after_mono);
	q->fair = rb_fair_on(ws[0]);
	/* (batched waiters reserve nothing: waitq_batchable) */
	if (q->fair)
		rb_fair_args(&a, b, ws, n, ids, not_after, &nkeys);
	else
		rb_acquire_args(&a, b, &ws[0]->t[0], ids, n, not_after, ws[0], &nkeys);
	if (a.oom || rb_eval(b, ws[0]->t[0].kq->sc->cs, ws[0]->t[0].kq->key, b->s_acquire, &a,
			     nkeys, rb_batch_cb, q) != 0) {
		free(q);
		rargs_clear(&a);
		return false;
	}
	b->calls[RB_OP_ACQUIRE]++; /* one call admits the whole batch */
	if (n > 1) {
		ws[0]->t[0].kq->sc->batches++;
		ws[0]->t[0].kq->sc->batched += n;
	}
	rargs_clear(&a);
	return true;
}
