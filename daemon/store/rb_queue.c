/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rb_queue.c - the Redis backend's calls that must reach Redis in the end.
 *
 * Owns: releases, reconciliations and rebooks of one lease on its targets
 * (struct rb_rel), the queue of those Redis could not take when they were
 * made (sent once it answers, at most RB_QUEUE_BATCH a tick), and the
 * write-back of what the fallback admitted while Redis could not be asked
 * (struct rb_owe, writeback.lua), which Redis serves only after.
 */

#include "backend_int.h"

#include "clock.h"
#include "htab.h"
#include "lease_id.h"
#include "log.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

/* ---- releases, reconciliations, rebooks: one lease on its targets ---- */

void rb_rel_free(struct rb_rel *r)
{
	size_t i;

	for (i = 0; i < r->nt; i++)
		free(r->t[i].scope);
	free(r->tokens);
	free(r->reserve);
	free(r->body);
	free(r);
}

/* Target g in the running conf; false when its scope is no longer there. */
static bool rb_tgt_resolve(const struct backend *b, const struct rb_tgt *g, struct be_target *out)
{
	struct scope_rt *sc = scope_find(b->ad, g->scope);

	if (sc == NULL)
		return false;
	out->cs = sc->cs;
	out->cls = g->cls != NULL ? conf_class_find(sc->cs, g->cls) : NULL;
	out->key = g->key;
	return true;
}

/* A new record for nonce; targets added by rb_rel_target. */
struct rb_rel *rb_rel_new(struct backend *b, enum rb_mode mode, enum rb_op op, const char *nonce)
{
	struct rb_rel *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return NULL;
	r->bytes = sizeof(*r);
	r->b = b;
	r->mode = mode;
	r->op = op;
	memcpy(r->nonce, nonce, sizeof(r->nonce));
	return r;
}

bool rb_rel_target(struct rb_rel *r, const struct conf_scope *cs, const struct conf_class *cls,
		   const char *key)
{
	size_t ls = strlen(cs->name) + 1, lc = cls != NULL ? strlen(cls->name) + 1 : 0;
	size_t lk = strlen(key) + 1;
	char *p = malloc(ls + lc + lk);

	if (p == NULL)
		return false;
	memcpy(p, cs->name, ls);
	if (cls != NULL)
		memcpy(p + ls, cls->name, lc);
	memcpy(p + ls + lc, key, lk);
	r->t[r->nt].scope = p;
	r->t[r->nt].cls = cls != NULL ? p + ls : NULL;
	r->t[r->nt].key = p + ls + lc;
	r->bytes += ls + lc + lk;
	r->nt++;
	return true;
}

/* An adaptive target of a release that reports an outcome it moves on. */
static bool rb_rel_adapts(const struct rb_rel *r, const struct be_target *t)
{
	return t->cs->adaptive && (r->outcome == ADAPT_OK || r->outcome == ADAPT_LIMITED);
}

/* A release's mode for one target: only the outcome when it has nothing to settle. */
static enum rb_mode rb_rel_mode(const struct rb_rel *r, const struct be_target *t)
{
	if (r->mode == RB_M_RELEASE &&
	    (r->outcome_only || !conf_plan_of(t->cs, t->cls)->release_books))
		return RB_M_OUTCOME;
	return r->mode;
}

/* Does this target need the call at all (a release with nothing to book costs none)? */
static bool rb_rel_needed(const struct rb_rel *r, const struct be_target *t)
{
	switch (r->mode) {
	case RB_M_RELEASE:
		if (rb_rel_adapts(r, t))
			return true;
		return !r->outcome_only && conf_plan_of(t->cs, t->cls)->release_books;
	case RB_M_ROLLBACK: return true;
	default: return conf_plan_of(t->cs, NULL)->tracks_leases;
	}
}

static void rb_rebooked(struct rb_rel *r);

static void rb_rel_done(struct rb_rel *r)
{
	struct backend *b = r->b;

	log_debug("redis call done", "lease=%.8s mode=%s held=%d unknown=%d", r->nonce,
		  rb_mode_names[r->mode], r->held, (int)r->unknown);
	if (r->cb != NULL) {
		struct eng_settled st = { .held = r->held == 1,
					  .settled = r->settled,
					  .repeat = r->repeat && !r->settled,
					  .mismatch = r->mismatch && !r->settled && !r->repeat,
					  .unknown = r->unknown };
		r->cb(r->cb_arg, &st);
		r->cb = NULL;
	}
	/* Every target it names settled here (none bound another handle):
	 * its issuer may let the whole lease go. */
	if (r->issuer[0] != '\0' && r->settled && !r->mismatch)
		rb_tell_issuer(b, r->issuer, r->nonce);
	if (r->mode == RB_M_REBOOK) {
		rb_rebooked(r);
		return;
	}
	if (r->unknown && !b->closing && r->mode == RB_M_RELEASE && r->own) {
		/*
		 * It may or may not have run. A release settles through the
		 * lease's record, once, so it is simply sent again, tokens and
		 * all (the in-process state was charged at the release). A
		 * release of another daemon's lease is not kept: its client was
		 * told the outcome is unknown, and may ask again.
		 */
		r->unknown = false;
		rb_queue(b, r, clock_mono_ms() + b->ad->conf->redis_timeout_ms);
		return;
	}
	if (r->unknown && !b->closing && r->mode != RB_M_RELEASE) {
		/* What it may have left in flight is released again (idempotent). */
		r->mode = RB_M_RECONCILE;
		r->unknown = false;
		rb_queue(b, r, clock_mono_ms() + b->ad->conf->redis_timeout_ms);
		return;
	}
	rb_rel_free(r);
}

static void rb_rel_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct rb_rel *r = arg;

	/* {1, pod}: another daemon's live lease, settled here; pod issued it */
	if (st == RP_OK && reply != NULL && reply->type == RV_ARR && reply->n == 2 &&
	    reply->a[0].type == RV_INT && reply->a[0].i == 1 &&
	    (reply->a[1].type == RV_STR || reply->a[1].type == RV_STATUS) && !r->own &&
	    r->mode == RB_M_RELEASE && reply->a[1].len < sizeof(r->issuer)) {
		memcpy(r->issuer, reply->a[1].s, reply->a[1].len);
		r->issuer[reply->a[1].len] = '\0';
		reply = &reply->a[0];
	}
	if (st == RP_OK && reply != NULL && reply->type == RV_INT) {
		if (reply->i == 1)
			r->held = 1;
		else if (reply->i == -1)
			r->gone = true;
		if (r->mode == RB_M_RELEASE && reply->i >= 0)
			r->settled = true;
		else if (r->mode == RB_M_RELEASE && reply->i == -2)
			r->repeat = true;
		else if (r->mode == RB_M_RELEASE && reply->i == -4)
			r->mismatch = true;
	} else {
		if (st != RP_SHUTDOWN)
			rb_failed(r->b, r->op, st, reply);
		r->unknown = true;
	}
	if (--r->pending == 0)
		rb_rel_done(r);
}

/*
 * Send r now: true when accepted (it completes through rb_rel_done, which
 * owns it from then on), false when Redis cannot take it now (r is still
 * the caller's). A record with no target needing a call completes at once.
 */
bool rb_rel_send(struct rb_rel *r)
{
	struct backend *b = r->b;
	struct rargs a[PROTO_MAX_TARGETS];
	struct rpool_call calls[PROTO_MAX_TARGETS];
	struct rb_settle se = { .tokens = r->tokens,
				.reserve = r->reserve,
				.ntokens = r->ntokens,
				.nreserve = r->nreserve,
				.own = r->own,
				.body = r->body,
				.outcome = r->outcome };
	size_t i, n = 0, sent;
	int script = b->s_release;
	bool ok = true;

	if (b->closing || !b->up || !rpool_up(b->pool))
		return false;
	memset(a, 0, sizeof(a));
	for (i = 0; i < r->nt; i++) {
		struct be_target t;
		size_t nkeys = 0;
		if (!rb_tgt_resolve(b, &r->t[i], &t) || !rb_rel_needed(r, &t))
			continue;
		rb_release_args(&a[n], b, &t, r->nonce, rb_rel_mode(r, &t), r->cost[i], &se,
				r->x1[i], r->x2[i], &nkeys);
		if (a[n].oom)
			ok = false;
		calls[n] = (struct rpool_call){ .affinity = rb_affinity(t.cs, t.key),
						.script = (size_t)script,
						.nkeys = nkeys,
						.argc = a[n].n,
						.argv = (const char *const *)a[n].v,
						.argvlen = a[n].len,
						.cb = rb_rel_cb,
						.arg = r };
		n++;
	}
	r->held = 0;
	r->gone = false;
	r->unknown = false;
	r->settled = false;
	r->repeat = false;
	r->mismatch = false;
	r->issuer[0] = '\0';
	/*
	 * Each target on its key's connection, after what this daemon sent for
	 * that key before (all in this loop pass: one round trip of wall time).
	 * Once one is accepted the record is the pool's: a target that could not
	 * be sent then is settled as an unknown outcome (reconciled).
	 */
	sent = 0;
	if (ok)
		rb_xb_flush(b);
	for (i = 0; ok && i < n; i++) {
		r->pending = sent + 1; /* a callback never runs inside the call */
		if (rpool_eval_multi(b->pool, 1, &calls[i]) == 0) {
			sent++;
			b->calls[r->op]++;
		} else if (sent > 0)
			r->unknown = true;
		else
			ok = false;
	}
	r->pending = sent;
	for (i = 0; i < n; i++)
		rargs_clear(&a[i]);
	if (!ok)
		return false;
	if (sent == 0)
		rb_rel_done(r);
	return true;
}

/* Keep r until Redis can take it (and not before not_before). */
void rb_queue(struct backend *b, struct rb_rel *r, int64_t not_before)
{
	struct timeval tv = { 0, RB_QUEUE_TICK_MS * 1000 };

	if (b->closing) {
		rb_rel_free(r);
		return;
	}
	/* Only what this daemon booked gets here (a handle it did not issue
	 * is never queued), so the bound is reached only by a long outage. */
	while (!TAILQ_EMPTY(&b->queue) &&
	       (b->nqueued >= RB_QUEUE_MAX || b->queued_bytes + r->bytes > RB_QUEUE_MAX_BYTES)) {
		struct rb_rel *old = TAILQ_FIRST(&b->queue);
		TAILQ_REMOVE(&b->queue, old, link);
		b->nqueued--;
		b->queued_bytes -= old->bytes;
		b->dropped++;
		log_ratelimited(LOG_SLOT_RECONCILE, 1000,
				"redis release queue full: dropping the oldest (it expires by "
				"lease_ttl)",
				"max=%d max_bytes=%d", RB_QUEUE_MAX, RB_QUEUE_MAX_BYTES);
		rb_rel_free(old);
	}
	r->not_before = not_before;
	r->cb = NULL;
	/* An outcome is news only now: a late one could lower a rate that has
	 * recovered since (the fallback applied it in process instead). */
	r->outcome = ADAPT_NONE;
	log_debug("redis call queued", "lease=%.8s mode=%s in_ms=%lld", r->nonce,
		  rb_mode_names[r->mode], (long long)(not_before - clock_mono_ms()));
	TAILQ_INSERT_TAIL(&b->queue, r, link);
	b->nqueued++;
	b->queued_bytes += r->bytes;
	if (!evtimer_pending(b->queue_ev, NULL) && evtimer_add(b->queue_ev, &tv) != 0)
		log_ratelimited(LOG_SLOT_RECONCILE, 1000, "cannot arm the release queue timer",
				NULL);
}

/* Send what is due, in order; give up on a record after many failures. */
void rb_queue_run(struct backend *b, bool all_due)
{
	struct rb_rel *r, *nx;
	int64_t now = clock_mono_ms();
	struct timeval tv = { 0, RB_QUEUE_TICK_MS * 1000 };
	size_t sent = 0;

	for (r = TAILQ_FIRST(&b->queue); r != NULL && b->up; r = nx) {
		nx = TAILQ_NEXT(r, link);
		if (r->not_before > now)
			continue;
		if (!all_due && sent >= RB_QUEUE_BATCH)
			break;
		TAILQ_REMOVE(&b->queue, r, link);
		b->nqueued--;
		b->queued_bytes -= r->bytes;
		if (r->attempts >= RB_QUEUE_ATTEMPTS) {
			log_ratelimited(LOG_SLOT_RECONCILE, 1000,
					"redis release failed too often: given up (it expires by "
					"lease_ttl)",
					"lease=%.8s", r->nonce);
			b->dropped++;
			rb_rel_free(r);
			continue;
		}
		r->attempts++; /* before: a sent record may be freed at once */
		if (!rb_rel_send(r)) {
			r->attempts--;
			TAILQ_INSERT_HEAD(&b->queue, r, link);
			b->nqueued++;
			b->queued_bytes += r->bytes;
			break;
		}
		sent++;
	}
	if (!TAILQ_EMPTY(&b->queue) && !evtimer_pending(b->queue_ev, NULL) &&
	    evtimer_add(b->queue_ev, &tv) != 0)
		log_ratelimited(LOG_SLOT_RECONCILE, 1000, "cannot arm the release queue timer",
				NULL);
}

static void rb_queue_cb(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	rb_queue_run(arg, false);
}

void backend_flush(struct backend *b)
{
	rb_ahead_give_all(b);
	rb_queue_run(b, true);
}

int64_t backend_last_due(const struct backend *b)
{
	const struct rb_rel *r;
	int64_t last = 0;

	TAILQ_FOREACH (r, &b->queue, link)
		if (r->not_before > last)
			last = r->not_before;
	return last;
}

bool backend_idle(const struct backend *b)
{
	const struct rb_rel *r;
	int64_t now = clock_mono_ms();

	if (rpool_inflight(b->pool) > 0)
		return false;
	if (!b->up)
		return true; /* nothing queued can go */
	TAILQ_FOREACH (r, &b->queue, link)
		if (r->not_before <= now)
			return false;
	return TAILQ_EMPTY(&b->queue);
}

/*
 * What r settles: copies of the tokens reported and of the reservation,
 * and the body of the lease's handle (what its settlement record binds).
 * false when memory runs out.
 */
static bool rb_rel_settle(struct rb_rel *r, const struct meter_tokens *tokens, size_t ntokens,
			  const struct meter_tokens *reserve, size_t nreserve, const char *body)
{
	r->tokens = meter_tokens_dup(tokens, ntokens, &r->ntokens);
	r->reserve = meter_tokens_dup(reserve, nreserve, &r->nreserve);
	if (body != NULL && (r->body = strdup(body)) == NULL)
		return false;
	r->bytes += (ntokens + nreserve) * (sizeof(struct meter_tokens) + PROTO_NAME_MAX + 1) +
		    (body != NULL ? strlen(body) + 1 : 0);
	return r->ntokens == ntokens && r->nreserve == nreserve;
}

/* A release record for lease l (targets that need a call only). */
static struct rb_rel *rb_rel_of(struct backend *b, const struct lease *l, enum rb_mode mode,
				enum rb_op op)
{
	struct rb_rel *r = rb_rel_new(b, mode, op, l->id);
	size_t i;

	if (r == NULL)
		return NULL;
	for (i = 0; i < l->nt; i++)
		if (!rb_rel_target(r, l->t[i].kq->sc->cs, l->t[i].cls, l->t[i].kq->key)) {
			rb_rel_free(r);
			return NULL;
		}
	r->own = true;
	if (!rb_rel_settle(r, NULL, 0, l->reserve, l->nreserve, strchr(l->handle, '.') + 1)) {
		rb_rel_free(r);
		return NULL;
	}
	return r;
}

bool backend_release(struct backend *b, struct lease *l, const struct meter_tokens *tokens,
		     size_t ntokens)
{
	struct rb_rel *r;
	int64_t now = clock_mono_ms();

	if (b->closing)
		return false;
	r = rb_rel_of(b, l, RB_M_RELEASE, RB_OP_RELEASE);
	if (r != NULL &&
	    (r->tokens = meter_tokens_dup(tokens, ntokens, &r->ntokens), r->ntokens) != ntokens) {
		rb_rel_free(r);
		r = NULL;
	}
	if (r == NULL) {
		rb_failed(b, RB_OP_RELEASE, RP_CONN, NULL);
		return false;
	}
	r->bytes += ntokens * (sizeof(struct meter_tokens) + PROTO_NAME_MAX + 1);
	r->outcome = l->outcome;
	/* A lease a late script may still book must not be released before
	 * that script's bound: the release could land first. */
	if (l->redis_maybe && l->redis_after > now) {
		rb_queue(b, r, l->redis_after);
		return false;
	}
	if (rb_rel_send(r))
		return true;
	b->errors[RB_OP_RELEASE]++;
	rb_queue(b, r, 0);
	return false;
}

bool backend_outcome(struct backend *b, struct lease *l)
{
	struct rb_rel *r;

	if (b->closing || !b->up || !rpool_up(b->pool))
		return false;
	if ((r = rb_rel_of(b, l, RB_M_RELEASE, RB_OP_RELEASE)) == NULL) {
		rb_failed(b, RB_OP_RELEASE, RP_CONN, NULL);
		return false;
	}
	r->outcome = l->outcome;
	r->outcome_only = true;
	if (rb_rel_send(r))
		return true;
	b->errors[RB_OP_RELEASE]++;
	rb_rel_free(r); /* never queued: applied in process instead */
	return false;
}

bool backend_release_ref(struct backend *b, const struct be_target *t, size_t nt, const char *nonce,
			 const struct meter_tokens *tokens, size_t ntokens,
			 const struct meter_tokens *reserve, size_t nreserve, const char *body,
			 eng_settled_cb *cb, void *arg)
{
	struct rb_rel *r;
	size_t i;

	if (b->closing || !b->up || !rpool_up(b->pool))
		return false; /* never queued: nothing can vouch for it now */
	if ((r = rb_rel_new(b, RB_M_RELEASE, RB_OP_RELEASE, nonce)) == NULL)
		return false;
	for (i = 0; i < nt; i++)
		if (!rb_rel_target(r, t[i].cs, t[i].cls, t[i].key))
			goto fail;
	if (!rb_rel_settle(r, tokens, ntokens, reserve, nreserve, body))
		goto fail;
	r->cb = cb;
	r->cb_arg = arg;
	if (rb_rel_send(r))
		return true;
	b->errors[RB_OP_RELEASE]++;
fail:
	rb_rel_free(r);
	return false;
}

/*
 * The acquire under nonce had targets whose outcome is unknown, and no lease
 * holds it: release what it may have booked once no late run can book.
 */
void rb_reconcile(struct backend *b, const struct waiter *w, const bool *which, const char *nonce,
		  int64_t after)
{
	struct rb_rel *r = rb_rel_new(b, RB_M_RECONCILE, RB_OP_RECONCILE, nonce);
	size_t i;

	if (r == NULL)
		return;
	for (i = 0; i < w->nt; i++)
		if (which[i] &&
		    !rb_rel_target(r, w->t[i].kq->sc->cs, w->t[i].cls, w->t[i].kq->key)) {
			rb_rel_free(r);
			return;
		}
	if (r->nt == 0) {
		rb_rel_free(r);
		return;
	}
	b->reconciled++;
	rb_queue(b, r, after + RB_CLOCK_MARGIN_MS);
}

/*
 * Redis came back, or lost its data: put every lease this daemon holds
 * that counts in a lease set back there (ZADD NX: one already there stays).
 * A lease granted in fallback is released in Redis too from then on.
 */
struct rb_rebook_ctx {
	struct backend *b;
	size_t sent;
};

static void rb_rebook_one(void *arg, const char *key UNUSED, void *val)
{
	struct rb_rebook_ctx *x = arg;
	struct backend *b = x->b;
	struct lease *l = val;
	int64_t now = clock_mono_ms(), mono_after, not_after = rb_not_after(b, &mono_after);
	struct rb_rel *r;
	size_t i;
	bool any = false;

	if (l->via == VIA_LOCAL || l->expired || l->deadline_ms <= now)
		return;
	for (i = 0; i < l->nt; i++)
		if (conf_plan_of(l->t[i].kq->sc->cs, NULL)->tracks_leases)
			any = true;
	if (!any || (r = rb_rel_of(b, l, RB_M_REBOOK, RB_OP_REBOOK)) == NULL)
		return;
	for (i = 0; i < r->nt; i++) {
		r->x1[i] = l->deadline_ms - now;
		r->x2[i] = not_after;
	}
	r->not_before = mono_after; /* reused: the rebook's own bound */
	if (!rb_rel_send(r)) {
		rb_rel_free(r);
		return;
	}
	x->sent++;
}

void rb_rebook_all(struct backend *b, const char *why)
{
	struct rb_rebook_ctx x = { .b = b };

	htab_each(b->ad->leases, rb_rebook_one, &x);
	if (x.sent > 0)
		log_info("leases booked in redis again", "leases=%zu reason=\"%s\"", x.sent, why);
	b->rebooked += x.sent;
}

static void rb_rebooked(struct rb_rel *r)
{
	struct backend *b = r->b;
	struct lease *l = htab_get(b->ad->leases, r->nonce);

	if (l != NULL && r->gone && !r->unknown) {
		/* Released through another daemon while this one held it (a
		 * detached lease): it is over here too. */
		log_info("lease released elsewhere", "lease=%.8s", l->id);
		l->redis_maybe = true; /* what a rebook of another target put back goes too */
		if (r->not_before > l->redis_after)
			l->redis_after = r->not_before;
		lease_release(l, NULL, 0);
		rb_rel_free(r);
		return;
	}
	if (l != NULL) {
		/* Held: its release goes to Redis, after the rebook's bound. */
		l->redis_maybe = true;
		if (r->not_before > l->redis_after)
			l->redis_after = r->not_before;
		rb_rel_free(r);
		return;
	}
	/* Released while the rebook was in flight: the release may have landed
	 * first. Take the lease out again once the rebook can book no more. */
	r->mode = RB_M_RECONCILE;
	r->op = RB_OP_RECONCILE;
	r->unknown = false;
	rb_queue(b, r, r->not_before + RB_CLOCK_MARGIN_MS);
}

/* ---- write-back: what the fallback admitted, charged to Redis ---- */

/*
 * struct rb_owe - what this pod's fallback booked on one (scope, key)
 * while Redis could not be asked: units per rule of the scope (by conf
 * index), quota instants, and the pacing and penalty in force. Sent once
 * Redis answers (writeback.lua), under a marker that makes a resend book
 * nothing.
 */
struct rb_owe {
	TAILQ_ENTRY(rb_owe) link;
	char *name;	   /* "SCOPE:KEY" (':' is in no scope name): the table's key */
	const char *key;   /* into name */
	char marker[96];   /* set when first sent: a resend uses the same */
	bool inflight;	   /* sent, not answered */
	int64_t quota_n;   /* admissions counted by quota */
	int64_t next_at;   /* mono ms; 0: none */
	int64_t pen_until; /* mono ms; 0: none */
	int64_t own_quota; /* of the quota instants held here, those not in quota_n */
	size_t nrules;
	/* per conf rule: [0, nrules) what the fallback booked; [nrules,
	 * 2 nrules) the rest of what this pod's state holds in the current
	 * windows (its admissions through Redis): booked only where Redis lost
	 * the key. */
	int64_t units[];
};

#define RB_OWE_MAX 100000 /* keys kept owing; past it the oldest are dropped */

static void rb_owe_free(struct rb_owe *o)
{
	free(o->name);
	free(o);
}

/* The entry of (cs, key), made on first use; NULL when it cannot be. */
static struct rb_owe *rb_owe_of(struct backend *b, const struct conf_scope *cs, const char *key)
{
	size_t ls = strlen(cs->name), lk = strlen(key);
	char *name = malloc(ls + lk + 2);
	struct rb_owe *o;

	if (name == NULL)
		return NULL;
	memcpy(name, cs->name, ls);
	name[ls] = ':';
	memcpy(name + ls + 1, key, lk + 1);
	if ((o = htab_get(b->owed, name)) != NULL) {
		free(name);
		return o->nrules == cs->nrules ? o : NULL; /* a reload changed the rules */
	}
	if (htab_count(b->owed) >= RB_OWE_MAX) {
		struct rb_owe *old = TAILQ_FIRST(&b->owing);
		TAILQ_REMOVE(&b->owing, old, link);
		htab_del(b->owed, old->name);
		rb_owe_free(old);
		b->wb_dropped++;
		log_ratelimited(LOG_SLOT_FALLBACK, 1000,
				"too many keys owed to redis: the oldest dropped", "max=%d",
				RB_OWE_MAX);
	}
	o = calloc(1, sizeof(*o) + 2 * cs->nrules * sizeof(o->units[0]));
	if (o == NULL || !htab_put(b->owed, name, o)) {
		free(o);
		free(name);
		return NULL;
	}
	o->name = name;
	o->key = name + ls + 1;
	o->nrules = cs->nrules;
	TAILQ_INSERT_TAIL(&b->owing, o, link);
	return o;
}

void backend_owe(struct backend *b, struct kq *kq, const struct conf_class *cls, int64_t cost,
		 const struct meter_tokens *reserve, size_t nreserve)
{
	const struct conf_scope *cs = kq->sc->cs;
	const struct conf_plan *pl = conf_plan_of(cs, cls);
	struct rb_owe *o;
	size_t i;

	if (b->closing || (o = rb_owe_of(b, cs, kq->key)) == NULL)
		return;
	if (cs->quota > 0)
		o->quota_n++;
	for (i = 0; i < pl->nrules; i++) {
		const struct conf_rule *r = &cs->rules[pl->rules[i]];
		if (r->meter == METER_REQUESTS)
			o->units[pl->rules[i]] += cost;
		else if (r->meter != METER_CONCURRENCY)
			o->units[pl->rules[i]] += conf_token_charge(r, reserve, nreserve);
	}
	if (eng_fb_next_at(kq) > o->next_at)
		o->next_at = eng_fb_next_at(kq);
}

void backend_owe_pace(struct backend *b, struct kq *kq, int64_t until)
{
	struct rb_owe *o;

	if (!b->closing && (o = rb_owe_of(b, kq->sc->cs, kq->key)) != NULL && until > o->next_at)
		o->next_at = until;
}

void rb_owe_penalty(struct backend *b, struct kq *kq, int64_t until)
{
	struct rb_owe *o = rb_owe_of(b, kq->sc->cs, kq->key);

	if (o != NULL && until > o->pen_until)
		o->pen_until = until;
}

static void rb_wb_done(struct backend *b)
{
	struct timeval tv = { 0, RB_QUEUE_TICK_MS * 1000 };

	if (b->wb_pending > 0)
		return;
	if (!TAILQ_EMPTY(&b->sending)) { /* failed ones: again, soon */
		if (!evtimer_pending(b->wb_ev, NULL) && evtimer_add(b->wb_ev, &tv) != 0)
			log_ratelimited(LOG_SLOT_FALLBACK, 1000, "cannot arm the write-back timer",
					NULL);
		return;
	}
	if (!TAILQ_EMPTY(&b->owing) && !b->wb_partial) { /* admitted in fallback meanwhile */
		rb_writeback(b);
		return;
	}
	b->wb_partial = false;
	if (b->wb_active)
		log_info("fallback admissions written back to redis: limits are shared",
			 "keys=%llu", (unsigned long long)b->wb_keys);
	b->wb_active = false;
}

struct rb_wb_call {
	struct backend *b;
	struct rb_owe *o;
};

static void rb_wb_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct rb_wb_call *c = arg;
	struct backend *b = c->b;

	b->wb_pending--;
	c->o->inflight = false;
	if (st == RP_OK && reply != NULL && reply->type == RV_INT) {
		TAILQ_REMOVE(&b->sending, c->o, link);
		rb_owe_free(c->o);
		b->wb_keys++;
		if (reply->i == 2) /* Redis had lost the key: own admissions booked again */
			b->wb_lost++;
	} else if (st != RP_SHUTDOWN) {
		rb_failed(b, RB_OP_WRITEBACK, st, reply); /* kept: sent again, same marker */
	}
	free(c);
	if (!b->closing)
		rb_wb_done(b);
}

/*
 * What the key's state here holds beyond what the fallback booked: this
 * pod's admissions through Redis in the current windows (and its pacing).
 * Worked out at each send, from the state as it is then.
 */
static void rb_owe_own(struct rb_owe *o, struct scope_rt *sc, int64_t now)
{
	struct kq *kq = htab_get(sc->keys, o->key);
	int64_t qn = 0;
	size_t i;

	o->own_quota = 0;
	memset(&o->units[o->nrules], 0, o->nrules * sizeof(o->units[0]));
	if (kq == NULL)
		return;
	eng_fb_spent(kq, now, &qn, &o->units[o->nrules]);
	o->own_quota = qn > o->quota_n ? qn - o->quota_n : 0;
	for (i = 0; i < o->nrules; i++) {
		int64_t *own = &o->units[o->nrules + i];
		*own = *own > o->units[i] ? *own - o->units[i] : 0;
	}
	if (eng_fb_next_at(kq) > o->next_at)
		o->next_at = eng_fb_next_at(kq);
}

static bool rb_owe_units(const struct rb_owe *o)
{
	size_t i;

	for (i = 0; i < 2 * o->nrules; i++)
		if (o->units[i] != 0)
			return true;
	return false;
}

/* Send one entry's write-back; false when Redis cannot take it now. */
static bool rb_wb_send(struct backend *b, struct rb_owe *o)
{
	struct scope_rt *sc = NULL;
	const struct conf_scope *cs;
	struct rargs a = { 0 };
	struct rb_wb_call *c;
	int64_t now = clock_mono_ms();
	size_t i, nkeys = 4, n = 0;
	char *colon = strchr(o->name, ':'), scope[PROTO_NAME_MAX + 1];

	if (colon == NULL || (size_t)(colon - o->name) > PROTO_NAME_MAX)
		return true; /* cannot be: dropped below */
	memcpy(scope, o->name, (size_t)(colon - o->name));
	scope[colon - o->name] = '\0';
	if ((sc = scope_find(b->ad, scope)) == NULL || sc->cs->nrules != o->nrules) {
		TAILQ_REMOVE(&b->sending, o, link); /* the scope changed: nothing to charge */
		rb_owe_free(o);
		return true;
	}
	cs = sc->cs;
	rb_owe_own(o, sc, now);
	if (o->quota_n == 0 && o->own_quota == 0 && o->next_at <= now && o->pen_until <= now &&
	    !rb_owe_units(o)) {
		TAILQ_REMOVE(&b->sending, o, link); /* nothing left to tell */
		rb_owe_free(o);
		return true;
	}
	if (o->marker[0] == '\0')
		snprintf(o->marker, sizeof(o->marker), "%s:%llu:%p", b->pod_id,
			 (unsigned long long)b->wb_round, (void *)o);
	{
		const char *parts[7] = {
			b->ad->conf->prefix, ":{", cs->name, ":", o->key, "}:w:", o->marker
		};
		rargs_cat(&a, parts, 7);
	}
	rb_key(&a, b, cs, o->key, "s", -1);
	rb_key(&a, b, cs, o->key, "q", -1);
	rb_penalty_key(&a, b, cs, o->key);
	rb_key(&a, b, cs, o->key, "lost", -1);
	nkeys++;
	for (i = 0; i < cs->nrules; i++)
		if ((o->units[i] != 0 || o->units[o->nrules + i] != 0) &&
		    cs->rules[i].meter != METER_CONCURRENCY) {
			rb_key(&a, b, cs, o->key, "r", (long)i);
			nkeys++;
		}
	rargs_int(&a, cs->quota_window_ms > RB_GRACE_MS(cs) ? cs->quota_window_ms + 60000
							    : RB_GRACE_MS(cs) + 60000);
	rargs_int(&a, o->quota_n);
	rargs_int(&a, o->own_quota);
	rargs_int(&a, cs->quota_window_ms);
	rargs_int(&a, o->next_at > now ? o->next_at - now : 0);
	rargs_int(&a, o->pen_until > now ? o->pen_until - now : 0);
	rargs_int(&a, (int64_t)(nkeys - 5));
	for (i = 0; i < cs->nrules; i++) {
		struct strat_params p;
		if ((o->units[i] == 0 && o->units[o->nrules + i] == 0) ||
		    cs->rules[i].meter == METER_CONCURRENCY)
			continue;
		p = conf_rule_params(&cs->rules[i]);
		rargs_str(&a, strat_kind_name(p.kind));
		rargs_int(&a, p.amount);
		rargs_int(&a, p.window_ms);
		rargs_int(&a, p.burst);
		rargs_int(&a, o->units[i]);
		rargs_int(&a, o->units[o->nrules + i]);
		n++;
	}
	if (a.oom || (c = malloc(sizeof(*c))) == NULL) {
		rargs_clear(&a);
		return false;
	}
	c->b = b;
	c->o = o;
	if (rb_eval(b, cs, o->key, b->s_writeback, &a, nkeys, rb_wb_cb, c) != 0) {
		free(c);
		rargs_clear(&a);
		return false;
	}
	b->calls[RB_OP_WRITEBACK]++;
	b->wb_pending++;
	o->inflight = true;
	rargs_clear(&a);
	(void)n;
	return true;
}

/* Send what is owed (new entries and ones to send again), then serve. */
static void rb_wb_run(struct backend *b)
{
	struct rb_owe *o, *nx;

	if (b->closing || !b->up)
		return;
	for (o = TAILQ_FIRST(&b->sending); o != NULL; o = nx) {
		nx = TAILQ_NEXT(o, link);
		if (!o->inflight && !rb_wb_send(b, o))
			break; /* the pool is not taking calls: the timer tries again */
	}
	rb_wb_done(b);
}

static void rb_wb_timer(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	rb_wb_run(arg);
}

/*
 * Redis answers again: what the fallback owes it is sent before Redis
 * serves acquires here (they stay in fallback meanwhile, a round trip).
 */
struct rb_walk {
	struct backend *b;
	const struct conf_scope *cs;
	int64_t now;
};

static void rb_walk_key(void *arg, const char *key, void *val)
{
	struct rb_walk *w = arg;
	struct kq *kq = val;

	/* Past the bound the fallback's own entries are not pushed out. */
	if (htab_count(w->b->owed) < RB_OWE_MAX && !eng_fb_idle(kq, w->now))
		(void)rb_owe_of(w->b, w->cs, key); /* NULL: out of memory, or new rules */
}

/* A new write-back round: everything owed moves to the sending list. */
static void rb_wb_take_owing(struct backend *b)
{
	struct rb_owe *o;

	b->wb_round++;
	while ((o = TAILQ_FIRST(&b->owing)) != NULL) {
		TAILQ_REMOVE(&b->owing, o, link);
		htab_del(b->owed, o->name);
		TAILQ_INSERT_TAIL(&b->sending, o, link);
	}
}

void rb_writeback(struct backend *b)
{
	struct rb_walk w = { .b = b, .now = clock_mono_ms() };
	size_t i;

	/* Every key with something in its current windows goes too: if Redis
	 * lost it (restarted empty, a failover to a replica that had not got
	 * it), what this pod admitted through Redis before is booked again. */
	for (i = 0; i < b->ad->nscopes; i++) {
		w.cs = b->ad->scopes[i].cs;
		htab_each(b->ad->scopes[i].keys, rb_walk_key, &w);
	}
	if (TAILQ_EMPTY(&b->owing) && TAILQ_EMPTY(&b->sending))
		return;
	rb_wb_take_owing(b);
	b->wb_active = true;
	log_info("redis is back: writing back what the fallback admitted", "round=%llu",
		 (unsigned long long)b->wb_round);
	rb_wb_run(b);
}

/*
 * Owed while Redis kept serving: some calls met a node that could not take
 * them (a slot migration longer than redis_timeout, one Cluster master
 * lost) and the fallback decided them while the pool stayed up. What they
 * admitted is written back at the next beat, with no walk of the keys and
 * without holding acquires back (the rest of Redis is serving); a call that
 * fails again is retried by the write-back timer.
 */
void rb_writeback_owed(struct backend *b)
{
	if (!b->up || b->wb_active || b->wb_partial || b->wb_pending > 0 ||
	    TAILQ_EMPTY(&b->owing) || !TAILQ_EMPTY(&b->sending))
		return;
	b->wb_partial = true;
	rb_wb_take_owing(b);
	log_info("writing back what the fallback admitted while a redis node could not answer",
		 "round=%llu", (unsigned long long)b->wb_round);
	rb_wb_run(b);
}

bool rb_queue_init(struct backend *b)
{
	b->queue_ev = evtimer_new(b->ad->base, rb_queue_cb, b);
	b->wb_ev = evtimer_new(b->ad->base, rb_wb_timer, b);
	b->owed = htab_new();
	return b->queue_ev != NULL && b->wb_ev != NULL && b->owed != NULL;
}

void rb_queue_free(struct backend *b)
{
	if (b->nqueued > 0)
		log_warn("redis releases still queued at exit: they expire by lease_ttl",
			 "queued=%zu", b->nqueued);
	while (!TAILQ_EMPTY(&b->queue)) {
		struct rb_rel *r = TAILQ_FIRST(&b->queue);
		TAILQ_REMOVE(&b->queue, r, link);
		rb_rel_free(r);
	}
	if (b->queue_ev)
		event_free(b->queue_ev);
	if (b->wb_ev)
		event_free(b->wb_ev);
	while (!TAILQ_EMPTY(&b->owing)) {
		struct rb_owe *o = TAILQ_FIRST(&b->owing);
		TAILQ_REMOVE(&b->owing, o, link);
		rb_owe_free(o);
	}
	while (!TAILQ_EMPTY(&b->sending)) {
		struct rb_owe *o = TAILQ_FIRST(&b->sending);
		TAILQ_REMOVE(&b->sending, o, link);
		rb_owe_free(o);
	}
	htab_free(b->owed);
}
