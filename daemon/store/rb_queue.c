/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rb_queue.c - the Redis backend's outage queue.
 *
 * Owns: the queue of release.lua calls (struct rb_rel) Redis could not take
 * when they were made, sent once it answers, at most RB_QUEUE_BATCH a tick,
 * oldest first, given up after RB_QUEUE_ATTEMPTS failures; flushing it, and
 * what `status` and a drain ask of it (backend_last_due, backend_idle); and
 * its life (rb_queue_init, rb_queue_free).
 */

#include "backend_int.h"

#include "clock.h"
#include "log.h"

#include <event2/event.h>
#include <stdlib.h>

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

bool rb_queue_init(struct backend *b)
{
	b->queue_ev = evtimer_new(b->ad->base, rb_queue_cb, b);
	return b->queue_ev != NULL;
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
}
