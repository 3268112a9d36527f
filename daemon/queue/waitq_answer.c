/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * waitq_answer.c - a waiter's answers and its end: the admission (its lease
 * made, the reply with what is left of the limits), the refusals
 * (`limited`, `exceeds_limit`, `budget_exceeded`, `timeout` and the rest,
 * with the target and the rule that decided), and its removal from its key
 * and its connection.
 */

#include "waitq_int.h"

#include "class_wait.h"
#include "clock.h"
#include "decimal.h"
#include "lease.h"
#include "log.h"
#include "scope.h"
#include "spares.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Is target i the first of w's targets in its scope (counted once a scope)? */
bool waitq_first_of_scope(const struct waiter *w, size_t i)
{
	size_t j;

	for (j = 0; j < i; j++)
		if (w->t[j].kq->sc == w->t[i].kq->sc)
			return false;
	return true;
}

bool waitq_in_flight(struct waiter *w)
{
	return w->inflight;
}

/* w no longer belongs to its connection (answered, or the client left). */
void waitq_unlink_conn(struct waiter *w)
{
	struct client *c = w->conn;

	if (c == NULL)
		return;
	TAILQ_REMOVE(&c->waiters, w, conn_link);
	w->conn = NULL;
	client_waiter_done(c);
}

/* The waiter waitq_add is pumping for (waitq_watch); NULL once it is freed. */
static const struct waiter *waitq_watched;

void waitq_watch(const struct waiter *w)
{
	waitq_watched = w;
}

bool waitq_watching(const struct waiter *w)
{
	return w != NULL && waitq_watched == w;
}

/*
 * Spare waiter records: a removed waiter's record is kept for the next
 * acquire instead of a free and a calloc each request. Bounded; freed at
 * exit (waitq_spares_free).
 */
static struct spares waitq_spares = SPARES_INIT(struct waiter, 64);

struct waiter *waitq_new(void)
{
	return spares_get(&waitq_spares);
}

void waitq_spares_free(void)
{
	spares_free(&waitq_spares);
}

/* Remove w from its queue and its connection, and free it. */
void waitq_remove(struct waiter *w)
{
	struct kq *kq = w->t[0].kq;
	size_t i;

	for (i = 0; i < w->nt; i++) {
		kq_unref(w->t[i].kq);
		if (waitq_first_of_scope(w, i))
			w->t[i].kq->sc->waiting--;
	}
	/* kq's timer may stay armed for w: it then finds no head due, and is set again */
	waitq_fair_leave(kq, w);
	if (w->fl_member[0] != '\0')
		kq->sc->ad->dec->leave(kq->sc->ad, w);
	TAILQ_REMOVE(&kq->waiters, w, kq_link);
	kq->nwait--;
	waitq_unlink_conn(w);
	if (w->deadline_set)
		event_del(&w->deadline_ev);
	if (waitq_watched == w)
		waitq_watched = NULL;
	free(w->id);
	free(w->reserve);
	spares_put(&waitq_spares, w);
}

/* Why a pod refused a serialized key in fallback: another pod serves it. */
#define WAITQ_OWNER_MSG                                                                       \
	"redis is down, and another pod serves this key's one request at a time until it is " \
	"back (each key has one owner among the pods alive, by the key's hash)"

/*
 * "target": which of w's targets refused it (its limit decided): the index
 * into the request's targets, its scope and key. The first target when the
 * refusal came from the queue (the first target's key).
 */
static void waitq_put_target(struct preply *r, const struct waiter *w)
{
	const struct kq *by = w->refused_by;
	size_t i;

	for (i = 0; i < w->nt && w->t[i].kq != by; i++)
		;
	if (i == w->nt)
		i = 0;
	preply_push(r, "target");
	preply_int(r, "index", (int64_t)i);
	preply_str(r, "scope", w->t[i].kq->sc->cs->name);
	preply_str(r, "key", w->t[i].kq->key);
	preply_pop(r);
}

/* An unnamed rule's index in its scope (0 or more), as the reply names it:
 * written into idx (no snprintf on the hot path). */
static const char *waitq_idx_str(long n, char idx[DEC_MAX + 1])
{
	idx[DEC_MAX] = '\0';
	return dec_put_u64(idx + DEC_MAX, n < 0 ? 0 : (uint64_t)n);
}

/*
 * "limits": per meter, its tightest limit of w's targets: the rule (its
 * name, an unnamed rule's index in its scope, or the setting's name), its
 * capacity, what is left and when it is full again.
 */
static void waitq_put_limits(struct preply *r, const struct lim_left *left)
{
	char meter[80], idx[DEC_MAX + 1];
	size_t i;

	if (left->nm == 0)
		return;
	preply_push(r, "limits");
	for (i = 0; i < left->nm; i++) {
		const struct lim_meter_left *m = &left->m[i];

		preply_push(r, lim_meter_name(m, meter, sizeof(meter)));
		preply_str(r, "rule", m->rule != NULL ? m->rule : waitq_idx_str(m->idx, idx));
		preply_int(r, "limit", m->limit);
		preply_int(r, "remaining", m->remaining);
		preply_int(r, "reset_ms", m->reset_ms);
		preply_pop(r);
	}
	preply_pop(r);
}

/*
 * "remaining", "reset_ms": what the tightest limit allowed at w's last
 * decision, or this pod's max_concurrent (its leases held here now); then
 * the same per meter ("limits").
 */
static void waitq_put_left(struct preply *r, const struct waiter *w)
{
	struct lim_left left = w->left;
	size_t i;

	for (i = 0; i < w->nt; i++) {
		const struct kq *kq = w->t[i].kq;
		int64_t maxc = kq->sc->cs->max_concurrent;
		if (maxc > 0 && !kq->sc->cs->shadow) {
			struct lim_meter_left m = { .meter = METER_CONCURRENCY,
						    .rule = PLAN_RULE_MAX_CONCURRENT,
						    .limit = maxc,
						    .remaining = maxc - kq->held,
						    .reset_ms = kq->held > 0
								    ? kq->sc->cs->lease_ttl_ms
								    : 0 };
			lim_left_add(&left, &m);
		}
	}
	if (!left.has)
		return;
	preply_int(r, "remaining", left.remaining);
	preply_int(r, "reset_ms", left.reset_ms);
	waitq_put_limits(r, &left);
}

/* Answer a waiter with an error (if its client is still there). */
void waitq_fail(struct waiter *w, enum admit_err e, int64_t retry_ms, const char *rule,
		const char *msg)
{
	struct preply *r;

	if (e != ADMIT_E_SHUTTING_DOWN)
		w->t[0].kq->sc->refused++;
	w->t[0].kq->sc->outcome[e]++;
	log_debug("acquire refused", "scope=%s key=\"%s\" error=%s rule=\"%s\" waited_ms=%lld",
		  w->t[0].kq->sc->cs->name, w->t[0].kq->key, admit_err_str(e), rule ? rule : "",
		  (long long)(clock_mono_ms() - w->start_ms));
	if (w->conn == NULL)
		return;
	if (rule != NULL && strcmp(rule, PLAN_RULE_OWNER) == 0)
		msg = WAITQ_OWNER_MSG;
	r = preply_error(w->id, e, msg);
	if (retry_ms > 0 ||
	    (retry_ms == 0 && (e == ADMIT_E_LIMITED || e == ADMIT_E_BUDGET_EXCEEDED)))
		preply_int(r, "retry_after_ms", retry_ms);
	if (rule != NULL) {
		preply_str(r, "rule", rule);
		waitq_put_target(r, w);
	}
	waitq_put_left(r, w);
	if (w->decided)
		preply_str(r, "backend", via_name(w->last_via));
	client_reply(w->conn, r);
}

/* No wait can admit w: it asks more than a limit holds. Answered at once. */
void waitq_exceeds(struct waiter *w, const struct eng_res *res)
{
	struct preply *r;
	char msg[160];

	w->t[0].kq->sc->refused++;
	w->t[0].kq->sc->outcome[ADMIT_E_EXCEEDS_LIMIT]++;
	if (w->conn == NULL)
		return;
	snprintf(msg, sizeof(msg), "no wait can admit it: it asks more than \"%s\" holds (%lld)",
		 res->rule ? res->rule : "", (long long)res->limit);
	r = preply_error(w->id, ADMIT_E_EXCEEDS_LIMIT, msg);
	if (res->rule != NULL)
		preply_str(r, "rule", res->rule);
	preply_int(r, "limit", res->limit);
	waitq_put_target(r, w);
	waitq_put_left(r, w);
	preply_str(r, "backend", via_name(res->via));
	client_reply(w->conn, r);
}

void waitq_admit(struct waiter *w, const struct eng_res *res, int64_t now)
{
	struct rt *ad = w->t[0].kq->sc->ad;
	char full[256];
	bool over = lease_full(ad, full, sizeof(full));
	const struct lease_of of = { .nonce = w->lease_id,
				     .t = w->t,
				     .nt = w->nt,
				     .reserve = w->reserve,
				     .nreserve = w->nreserve,
				     .conn = w->detach ? NULL : w->conn };
	struct lease *l = lease_new(ad, &of, res->via);
	struct preply *r;
	size_t i;

	if (l == NULL) {
		waitq_fail(w, ADMIT_E_UNAVAILABLE, 0, NULL, "out of memory");
		return;
	}
	w->reserve = NULL; /* the waiter's reservation is the lease's now */
	w->nreserve = 0;
	if (res->via == VIA_REDIS)
		ad->dec->mirror(l);
	l->backend_booked = res->booked;
	l->redis_maybe = res->redis_maybe;
	l->redis_after = res->redis_after;
	if (over) {
		/* Decided while others were in flight, and the table filled
		 * meanwhile: what was booked goes straight back. */
		lease_release(l, NULL, 0);
		if (w->conn != NULL)
			waitq_fail(w, ADMIT_E_UNAVAILABLE, 0, NULL, full);
		return;
	}
	if (w->conn == NULL) {
		/* Nobody to tell: give it straight back. Its acquire was already
		 * counted as canceled or timed out, never also as admitted. */
		lease_release(l, NULL, 0);
		return;
	}
	log_debug("acquire admitted",
		  "scope=%s key=\"%s\" backend=%s waited_ms=%lld lease=%.8s redis_maybe=%d",
		  w->t[0].kq->sc->cs->name, w->t[0].kq->key, via_name(res->via),
		  (long long)(now - w->start_ms), l->id, (int)l->redis_maybe);
	for (i = 0; i < w->nt; i++) {
		struct scope_rt *sc = w->t[i].kq->sc;
		if (waitq_first_of_scope(w, i)) {
			size_t b = wait_hist_bucket(now - w->start_ms);
			sc->wait_ms_total += (uint64_t)(now - w->start_ms);
			sc->wait_hist[b]++;
			class_wait_observe(sc, w->t[i].cls, b, now - w->start_ms);
			sc->admitted++;
			if (res->via == VIA_FALLBACK)
				sc->fallbacks++;
		}
	}
	r = preply_new(w->id, true);
	if (w->no_lease) /* nothing to release: it goes back now, as a release would */
		lease_release(l, NULL, 0);
	else
		preply_str(r, "lease", l->handle);
	preply_int(r, "waited_ms", now - w->start_ms);
	preply_str(r, "backend", via_name(res->via));
	waitq_put_left(r, w);
	if (res->shadow_limited) {
		preply_bool(r, "shadow_limited", true);
		preply_str(r, "rule", res->rule);
	}
	client_reply(w->conn, r);
}

/*
 * What kept w waiting, for its `timeout`: its own last refusal; else (it
 * never reached the head) what keeps its class's head waiting, or the head
 * of another class that holds it back; else the queue.
 */
const char *waitq_blame(struct waiter *w)
{
	struct waiter *by;

	if (w->last_rule != NULL)
		return w->last_rule;
	w->refused_by = NULL;
	by = waitq_behind(w);
	if (by != NULL && by->last_rule == NULL) /* a head not asked yet: what holds it */
		by = waitq_behind(by);
	if (by != NULL && by->last_rule != NULL) {
		w->refused_by = by->refused_by;
		return by->last_rule;
	}
	return PLAN_RULE_QUEUE;
}
