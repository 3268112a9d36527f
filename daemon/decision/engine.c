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

void eng_acquire(struct rt *ad, struct waiter *w, const char *lease_id, eng_cb *cb, void *arg)
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

bool eng_can_batch(struct rt *ad, const struct waiter *w)
{
	const struct conf_scope *cs = w->t[0].kq->sc->cs;
	bool now;

	if (ad->redis == NULL || ad->shutting_down || !backend_up(ad->redis) || w->nt != 1)
		return false;
	/* A fair key's waiters go in the form that carries their tickets once
	 * some wait (alone or not; one at a time where min_delay paces), and
	 * never in a batch before (their acquire checks for tickets itself). */
	if (backend_fair(ad->redis, w, &now))
		return now;
	return cs->min_delay_ms == 0 && !cs->shadow && !backend_ahead_on(ad->redis, w);
}

void eng_acquire_batch(struct rt *ad, struct waiter *const *ws, size_t n, eng_batch_cb *cb,
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

void eng_release_ref(struct rt *ad, const struct lease_ref *ref, const struct meter_tokens *tokens,
		     size_t ntokens, eng_settled_cb *cb, void *arg)
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
	struct rt *ad = kq->sc->ad;

	if (ad->redis != NULL && backend_inspect(ad->redis, kq, cls, cb, arg))
		return;
	eng_inspect_local(kq, ad->redis == NULL ? VIA_LOCAL : VIA_FALLBACK, cb, arg);
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
	struct rt *ad = kq->sc->ad;

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
	struct rt *ad = kq->sc->ad;
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

/* The queue's hooks that are not the engine's own functions as they stand. */
static void eng_forget(struct kq *kq)
{
	eng_refused_forget(kq);
	backend_ahead_drop(kq, true);
}

static void eng_leave(struct rt *ad, const struct waiter *w)
{
	if (ad->redis != NULL)
		backend_fair_leave(ad->redis, w);
}

static int64_t eng_turn_delay(struct rt *ad, int64_t turn_mono, int64_t window_ms)
{
	return backend_turn_delay(ad->redis, turn_mono, window_ms);
}

const struct decider eng_decider = { .acquire = eng_acquire,
				     .can_batch = eng_can_batch,
				     .acquire_batch = eng_acquire_batch,
				     .release = eng_release,
				     .mirror = eng_mirror,
				     .sends = adrt_sends,
				     .min_delay = eng_min_delay,
				     .forget = eng_forget,
				     .leave = eng_leave,
				     .turn_delay = eng_turn_delay };
