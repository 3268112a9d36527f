/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rb_rebook.c - the Redis backend's reconciliations and rebooks.
 *
 * Owns: releasing what an acquire of unknown outcome may have booked once no
 * late run can book (rb_reconcile), and booking every lease this daemon
 * holds in Redis again when Redis came back or lost its data
 * (rb_rebook_all), with what a rebook's answer means for its lease
 * (rb_rebooked).
 */

#include "backend_int.h"

#include "clock.h"
#include "log.h"

#include <stdlib.h>

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

void rb_rebooked(struct rb_rel *r)
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
