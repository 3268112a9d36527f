/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rb_rel.c - the Redis backend's release.lua calls of one lease.
 *
 * Owns: struct rb_rel, one release, reconciliation or rebook of one lease on
 * its targets: making it (rb_rel_new, rb_rel_target), which targets need the
 * call, sending it (rb_rel_send) and reading its replies, and what is done
 * once every target answered: the engine's callback, the lease's issuer
 * told (settled.lua, rb_tell_issuer), an unknown outcome queued again, a
 * rebook's answer handed on. Who makes them: rb_release.c, rb_rebook.c,
 * rb_acquire.c (rollbacks); where they wait while Redis cannot take them:
 * rb_queue.c. It names neither: what goes back up goes through
 * b->rel_queue and b->rel_rebooked (backend_int.h).
 */

#include "backend_int.h"

#include "clock.h"
#include "log.h"

#include <stdio.h>
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

/* A call that tells a pod something; its answer is not needed. */
static void rb_told(void *arg, enum rp_status st, const struct rval *reply)
{
	struct backend *b = arg;

	if (st != RP_OK && st != RP_SHUTDOWN)
		rb_failed(b, RB_OP_RELEASE, st, reply);
}

/*
 * Another daemon's live lease was settled here: tell its issuer (pod), so
 * that it stops counting the lease at its next heartbeat. Best effort: a
 * pod not told counts it until its lease_ttl, as before.
 */
static void rb_tell_issuer(struct backend *b, const char *pod, const char *nonce)
{
	const char *argv[3];
	size_t len[3];
	char ttl[24], *key = NULL;

	if (b->closing || strcmp(pod, b->pod_id) == 0 || b->s_settled < 0 ||
	    asprintf(&key, "{%s}:s:%s", b->pods_key, pod) < 0)
		return;
	snprintf(ttl, sizeof(ttl), "%d", RB_POD_WINDOW_MS);
	argv[0] = key;
	argv[1] = nonce;
	argv[2] = ttl;
	len[0] = strlen(key);
	len[1] = strlen(nonce);
	len[2] = strlen(ttl);
	if (rpool_eval(b->pool, (size_t)b->s_settled, 1, 3, argv, len, rb_told, b) != 0)
		rb_failed(b, RB_OP_RELEASE, RP_CONN, NULL);
	free(key);
}

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
		b->rel_rebooked(r);
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
		b->rel_queue(b, r, clock_mono_ms() + b->ad->conf->redis_timeout_ms);
		return;
	}
	if (r->unknown && !b->closing && r->mode != RB_M_RELEASE) {
		/* What it may have left in flight is released again (idempotent). */
		r->mode = RB_M_RECONCILE;
		r->unknown = false;
		b->rel_queue(b, r, clock_mono_ms() + b->ad->conf->redis_timeout_ms);
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
