/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * waitq.c - queues of acquires waiting for one (scope, key), FIFO per class.
 *
 * Owns: struct waiter records, their deadline timers, and each kq's retry
 * timer. Does not own the connection a waiter came from (conn.c) nor the
 * lease it gets (lease.c).
 *
 * A key's waiters are one list in arrival order; the first waiter of each
 * class is that class's head. Only heads ask the limiter; the others sleep
 * until they become the head or their deadline passes, so a thousand local
 * waiters of a class are one poll, not a thousand. Heads are asked in class
 * priority order (priority=N, higher first), then by arrival. A head
 * refused by a limit another class is held to as well (an unnamed rule, a
 * named rule both list, with the other's floor no lower; max_concurrent,
 * pacing, a penalty) holds back that class's heads behind it in that order:
 * a freed unit goes to it first. A head refused by its own class (its
 * floor, a named rule the other does not list) or by another target's key
 * holds back no other class. A refusal says how long to wait: the head sleeps
 * that long (stretched by the scope's jitter; after a fixed or session
 * window's turn, plus its pod's slot: backend_turn_delay) and asks again,
 * unless the wait is longer than what is left of its budget, in which case
 * it is answered
 * `budget_exceeded` at once rather than slept out; a wait for a lease slot
 * (a release ends it: no one knows when) is slept out to the deadline and
 * answered `timeout`, and a request no wait can admit (it asks more than a
 * limit holds) is answered `exceeds_limit` at once. A waiter whose decision is
 * in flight when its client leaves (or its deadline passes) is kept until the
 * decision returns (twemproxy's swallow), and an admission that nobody can
 * receive any more is released at once.
 */

#include "waitq.h"

#include "clock.h"
#include "lease.h"
#include "scope.h"
#include "log.h"
#include "rand.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>

const int64_t wait_hist_bounds_ms[WAIT_HIST_NBOUNDS] = {
	0, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
};

static void waitq_decided(void *arg, const struct eng_res *res);

static bool waitq_send_batch(struct kq *kq, struct waiter *w);

/* Waiters of one hot key decided in one Redis call, at most. */
#define WAITQ_BATCH 16

/* The most class heads of one key a pass looks at (more classes wait their turn). */
#define WAITQ_HEADS 64

/* A key's class heads, in the order they are asked. */
struct waitq_heads {
	struct waiter *w[WAITQ_HEADS];
	size_t n;
};

static int waitq_prio(const struct waiter *w)
{
	return w->t[0].cls != NULL ? w->t[0].cls->priority : 0;
}

/*
 * The first waiter of each class queued on kq, higher priority first, then
 * by arrival. The walk ends once every class of the scope has its head: one
 * step when the scope has no classes.
 */
static void waitq_heads(struct kq *kq, struct waitq_heads *h)
{
	size_t want = kq->sc->cs->nclasses + 1, i, j;
	struct waiter *x;

	h->n = 0;
	for (x = TAILQ_FIRST(&kq->waiters); x != NULL; x = TAILQ_NEXT(x, kq_link)) {
		for (i = 0; i < h->n && h->w[i]->t[0].cls != x->t[0].cls; i++)
			;
		if (i < h->n)
			continue;
		for (j = h->n; j > 0 && waitq_prio(h->w[j - 1]) < waitq_prio(x); j--)
			h->w[j] = h->w[j - 1];
		h->w[j] = x;
		if (++h->n == WAITQ_HEADS || h->n == want)
			break;
	}
}

/* The head of w's class on its key: the first waiter of that class. */
static struct waiter *waitq_class_head(const struct waiter *w)
{
	struct waiter *x;

	for (x = TAILQ_FIRST(&w->t[0].kq->waiters); x != NULL; x = TAILQ_NEXT(x, kq_link))
		if (x->t[0].cls == w->t[0].cls)
			return x;
	return NULL;
}

/*
 * Does head x, refused before, hold back head y of another class asked
 * after it? When the limit that refused x holds y too (conf_plan_holds_too),
 * and it was x's own key's, not another target's.
 */
static bool waitq_blocks(const struct waiter *x, const struct waiter *y)
{
	const struct kq *kq = x->t[0].kq;

	if (x->refused_by != NULL && x->refused_by != kq)
		return false;
	return conf_plan_holds_too(kq->sc->cs, x->t[0].cls, x->last_rule, y->t[0].cls);
}

/* The head ordered before h->w[i] that holds it back, or NULL. */
static struct waiter *waitq_blocker(const struct waitq_heads *h, size_t i)
{
	size_t j;

	for (j = 0; j < i; j++)
		if (waitq_blocks(h->w[j], h->w[i]))
			return h->w[j];
	return NULL;
}

/* What w waits behind: its class's head, else a head that holds that one back. */
static struct waiter *waitq_behind(struct waiter *w)
{
	struct waiter *ch = waitq_class_head(w);
	struct waitq_heads h;
	size_t i;

	if (ch != NULL && ch != w)
		return ch;
	waitq_heads(w->t[0].kq, &h);
	for (i = 0; i < h.n && h.w[i] != w; i++)
		;
	return i < h.n ? waitq_blocker(&h, i) : NULL;
}

/* Is target i the first of w's targets in its scope (counted once a scope)? */
static bool waitq_first_of_scope(const struct waiter *w, size_t i)
{
	size_t j;

	for (j = 0; j < i; j++)
		if (w->t[j].kq->sc == w->t[i].kq->sc)
			return false;
	return true;
}

static bool waitq_in_flight(struct waiter *w)
{
	return w->inflight;
}

/* w no longer belongs to its connection (answered, or the client left). */
static void waitq_unlink_conn(struct waiter *w)
{
	struct client *c = w->conn;

	if (c == NULL)
		return;
	TAILQ_REMOVE(&c->waiters, w, conn_link);
	w->conn = NULL;
	client_waiter_done(c);
}

/* Remove w from its queue and its connection, and free it. */
static void waitq_remove(struct waiter *w)
{
	struct kq *kq = w->t[0].kq;
	size_t i;

	for (i = 0; i < w->nt; i++) {
		kq_unref(w->t[i].kq);
		if (waitq_first_of_scope(w, i))
			w->t[i].kq->sc->waiting--;
	}
	/* kq's timer may stay armed for w: it then finds no head due, and is set again */
	TAILQ_REMOVE(&kq->waiters, w, kq_link);
	kq->nwait--;
	waitq_unlink_conn(w);
	if (w->deadline_set)
		event_del(&w->deadline_ev);
	free(w->id);
	free(w->reserve);
	free(w);
}

/* Why a fallback refusal came from this pod's share, not the whole limit. */
#define WAITQ_SHARE_MSG                                                                       \
	"redis is down, and this pod's fallback share of the limit (the limit divided among " \
	"the pods alive, so that the shares add up to it) is too small for the request now"

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

/*
 * "limits": per meter, its tightest limit of w's targets: the rule (its
 * name, an unnamed rule's index in its scope, or the setting's name), its
 * capacity, what is left and when it is full again.
 */
static void waitq_put_limits(struct preply *r, const struct lim_left *left)
{
	char meter[80], idx[24];
	size_t i;

	if (left->nm == 0)
		return;
	preply_push(r, "limits");
	for (i = 0; i < left->nm; i++) {
		const struct lim_meter_left *m = &left->m[i];

		snprintf(idx, sizeof(idx), "%ld", m->idx);
		preply_push(r, lim_meter_name(m, meter, sizeof(meter)));
		preply_str(r, "rule", m->rule != NULL ? m->rule : idx);
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
static void waitq_fail(struct waiter *w, enum admit_err e, int64_t retry_ms, const char *rule,
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
static void waitq_exceeds(struct waiter *w, const struct eng_res *res)
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

static void waitq_admit(struct waiter *w, const struct eng_res *res, int64_t now)
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
			sc->wait_ms_total += (uint64_t)(now - w->start_ms);
			wait_hist_observe(sc->wait_hist, now - w->start_ms);
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
static const char *waitq_blame(struct waiter *w)
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

static void waitq_deadline_cb(evutil_socket_t fd, short what, void *arg);

/* Arms w's deadline timer for what is left of its budget at now. */
static int waitq_arm_deadline(struct waiter *w, int64_t now)
{
	int64_t left = w->deadline_ms > now ? w->deadline_ms - now : 0;
	struct timeval tv = { left / 1000, (left % 1000) * 1000 };

	if (evtimer_assign(&w->deadline_ev, w->t[0].kq->sc->ad->base, waitq_deadline_cb, w) != 0)
		return -1;
	return evtimer_add(&w->deadline_ev, &tv);
}

static void waitq_deadline_cb(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	struct waiter *w = arg;
	struct kq *kq = w->t[0].kq;
	bool was_head = waitq_class_head(w) == w;
	int64_t now = clock_mono_ms();

	/* libevent times from the loop's cached clock, which can be a few ms
	 * behind ours: a timeout never answers before its budget is spent. */
	if (now < w->deadline_ms && waitq_arm_deadline(w, now) == 0)
		return;
	if (w->conn != NULL) { /* a waiter whose client left was counted as canceled */
		w->t[0].kq->sc->timeouts++;
		waitq_fail(w, ADMIT_E_TIMEOUT, 0, waitq_blame(w), "waited the whole budget");
	}
	if (waitq_in_flight(w)) {
		/* The decision in flight finds conn NULL and cleans up; an
		 * admission nobody waits for is undone. */
		w->canceled = true;
		waitq_unlink_conn(w);
		return;
	}
	waitq_remove(w);
	if (was_head)
		waitq_pump(kq);
}

static void waitq_arm_retry(struct kq *kq, int64_t now, int64_t wait_ms);

/*
 * The heads whose wait is over (libevent's clock may run a few ms behind
 * ours: what the timer was set for counts as passed) ask again; the timer
 * is set again for the earliest of those still asleep.
 */
static void waitq_retry_cb(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	struct kq *kq = arg;
	int64_t now = clock_mono_ms(), upto = kq->wake_at > now ? kq->wake_at : now, next = 0;
	struct waitq_heads h;
	size_t i;

	kq->wake_at = 0;
	waitq_heads(kq, &h);
	for (i = 0; i < h.n; i++) {
		struct waiter *x = h.w[i];
		if (x->wake_at <= upto)
			x->wake_at = 0;
		else if (next == 0 || x->wake_at < next)
			next = x->wake_at;
	}
	if (next != 0)
		waitq_arm_retry(kq, now, next - now);
	waitq_pump(kq);
}

/* How long w, refused behind by (or NULL), would wait, for `limited`. */
static int64_t waitq_queue_wait(const struct waiter *by, const struct kq *kq, int64_t now)
{
	if (by != NULL && by->wake_at > now)
		return by->wake_at - now;
	if (by != NULL && kq->wake_at > now)
		return kq->wake_at - now;
	return kq->sc->cs->concurrency_retry_ms;
}

/* Refuse try w, which may not go before by (a waiter ahead of it, or NULL). */
static void waitq_try_behind(struct waiter *w, struct waiter *by, int64_t now)
{
	waitq_fail(w, ADMIT_E_LIMITED, waitq_queue_wait(by, w->t[0].kq, now), waitq_blame(w), NULL);
	waitq_remove(w);
}

void waitq_add(struct waiter *w)
{
	struct kq *kq = w->t[0].kq;
	int64_t now = clock_mono_ms();
	size_t i;
	bool too_many = false;

	/* Every target's kq stays alive while w names it (the sweep skips it);
	 * w waits in every target's scope, and each scope's max_waiters holds. */
	for (i = 0; i < w->nt; i++) {
		kq_ref(w->t[i].kq);
		if (waitq_first_of_scope(w, i) &&
		    ++w->t[i].kq->sc->waiting > w->t[i].kq->sc->cs->max_waiters)
			too_many = true;
	}
	TAILQ_INSERT_TAIL(&kq->waiters, w, kq_link);
	kq->nwait++;
	if (w->conn != NULL)
		TAILQ_INSERT_TAIL(&w->conn->waiters, w, conn_link);
	if (w->try_only && waitq_class_head(w) != w) {
		/* Others of its class are waiting first: a try never jumps its
		 * class's queue (another class's waiters: see waitq_pump). */
		waitq_try_behind(w, waitq_class_head(w), now);
		return;
	}
	if (!w->try_only && too_many) {
		waitq_fail(w, ADMIT_E_TOO_MANY_WAITERS, 0, PLAN_RULE_MAX_WAITERS, NULL);
		waitq_remove(w);
		return;
	}
	if (!w->try_only) {
		if (waitq_arm_deadline(w, now) != 0) {
			waitq_fail(w, ADMIT_E_UNAVAILABLE, 0, NULL, "cannot arm timer");
			waitq_remove(w);
			return;
		}
		w->deadline_set = true;
	}
	waitq_pump(kq);
}

/*
 * The per-pod semaphore: is every target's kq below max_concurrent? When
 * not, *own tells whether it is this queue's own key (a release of it will
 * pump this queue) or another target's (poll).
 */
static bool waitq_sem_free(struct waiter *w, bool *own, const char **rule)
{
	size_t i;

	for (i = 0; i < w->nt; i++) {
		const struct conf_scope *cs = w->t[i].kq->sc->cs;
		/* Attempts in flight count: their admissions would land after this check. */
		if (cs->max_concurrent > 0 &&
		    w->t[i].kq->held + w->t[i].kq->pending >= cs->max_concurrent) {
			*own = i == 0;
			*rule = PLAN_RULE_MAX_CONCURRENT;
			w->refused_by = w->t[i].kq;
			return false;
		}
	}
	return true;
}

static void waitq_arm_retry(struct kq *kq, int64_t now, int64_t wait_ms)
{
	struct timeval tv = { wait_ms / 1000, (wait_ms % 1000) * 1000 };

	if (kq->retry_ev == NULL)
		kq->retry_ev = evtimer_new(kq->sc->ad->base, waitq_retry_cb, kq);
	if (kq->retry_ev == NULL || evtimer_add(kq->retry_ev, &tv) != 0) {
		log_ratelimited(LOG_SLOT_FALLBACK, 1000, "cannot arm retry timer", NULL);
		return;
	}
	kq->wake_at = now + wait_ms;
}

/* Head w sleeps wait_ms (at least 1) on a refusal; kq's timer wakes the earliest
 * head (waitq_retry_cb), and nothing else but waitq_wake_heads wakes it. */
static void waitq_sleep(struct kq *kq, struct waiter *w, int64_t now, int64_t wait_ms)
{
	if (wait_ms < 1)
		wait_ms = 1;
	w->wake_at = now + wait_ms;
	if (kq->wake_at == 0 || kq->wake_at > w->wake_at)
		waitq_arm_retry(kq, now, wait_ms);
}

/* kq's timer was stopped (a release, a reload, an override): every head asks now. */
static void waitq_wake_heads(struct kq *kq)
{
	struct waitq_heads h;
	size_t i;

	waitq_heads(kq, &h);
	for (i = 0; i < h.n; i++)
		h.w[i]->wake_at = 0;
	kq->slot_wait = false;
}

static bool waitq_in(struct waiter *const *set, size_t n, const struct waiter *w)
{
	while (n > 0)
		if (set[--n] == w)
			return true;
	return false;
}

/*
 * The next head of kq to ask now: the first, in priority then arrival
 * order, that is not asleep (its timer has not fired: asked at most once a
 * pass), not waiting for a release of this key (held), and
 * not held back by a head before it. A try held back is refused on the way
 * (*gone: start again).
 */
static struct waiter *waitq_next(struct kq *kq, struct waiter *const *held, size_t nheld,
				 int64_t now, bool *gone)
{
	struct waitq_heads h;
	size_t i;

	*gone = false;
	waitq_heads(kq, &h);
	for (i = 0; i < h.n; i++) {
		struct waiter *x = h.w[i], *by = waitq_blocker(&h, i);
		if (by != NULL && x->try_only) {
			waitq_try_behind(x, by, now);
			*gone = true;
			return NULL;
		}
		if (by == NULL && x->wake_at == 0 && !waitq_in(held, nheld, x))
			return x;
	}
	return NULL;
}

void waitq_pump(struct kq *kq)
{
	struct waiter *held[WAITQ_HEADS];
	size_t nheld = 0;

	if (kq->in_pump)
		return;
	kq->in_pump = true;
	if (kq->wake_at == 0)
		waitq_wake_heads(kq);
	while (!kq->busy && !TAILQ_EMPTY(&kq->waiters)) {
		int64_t now = clock_mono_ms();
		bool gone, own = true;
		struct waiter *w = waitq_next(kq, held, nheld, now, &gone);
		char full[256];
		const char *rule = NULL;
		size_t i;

		if (gone)
			continue;
		if (w == NULL)
			break;
		if (lease_full(kq->sc->ad, full, sizeof(full))) {
			waitq_fail(w, ADMIT_E_UNAVAILABLE, 0, NULL, full);
			waitq_remove(w);
			continue;
		}
		if (!waitq_sem_free(w, &own, &rule)) {
			int64_t retry = kq->sc->cs->concurrency_retry_ms;
			w->last_rule = rule;
			if (w->try_only) {
				waitq_fail(w, ADMIT_E_LIMITED, retry, rule, NULL);
				waitq_remove(w);
				continue;
			}
			if (!own)
				waitq_sleep(kq, w, now, retry);
			else if (nheld < WAITQ_HEADS) /* the next release of it pumps this queue */
				held[nheld++] = w;
			else
				break;
			continue;
		}
		lease_make_id(w->lease_id);
		kq->busy = true;
		w->inflight = true;
		for (i = 0; i < w->nt; i++)
			w->t[i].kq->pending++;
		if (kq->sc->ad->dec->can_batch(kq->sc->ad, w) && TAILQ_NEXT(w, kq_link) != NULL &&
		    waitq_send_batch(kq, w))
			continue;
		kq->sc->ad->dec->acquire(kq->sc->ad, w, w->lease_id, waitq_decided, w);
	}
	kq->in_pump = false;
}

/* Jitter: stretch a nonzero wait by a random 0..jitter of itself. */
static int64_t waitq_jitter(const struct conf_scope *cs, int64_t wait)
{
	double f;

	if (cs->jitter <= 0 || wait <= 0)
		return wait;
	f = (double)(rand_u64() >> 11) / (double)(1ULL << 53);
	return wait + (int64_t)((double)wait * cs->jitter * f);
}

/*
 * After a refusal by a window that gives all its units back at one instant
 * (a fixed window's turn, a session's end), on every pod at once: how long
 * after that instant this head asks again (its pod's slot, which rotates
 * turn by turn: backend_turn_delay). 0 for any other refusal.
 */
static int64_t waitq_turn_delay(const struct kq *kq, const struct eng_res *res, int64_t now)
{
	const struct conf_scope *cs;
	size_t i;

	if (res->via != VIA_REDIS || res->slot_wait || res->retry_after_ms <= 0 ||
	    res->by == NULL || res->rule == NULL)
		return 0;
	cs = res->by->sc->cs;
	for (i = 0; i < cs->nrules; i++) {
		struct strat_params p = conf_rule_params(&cs->rules[i]);
		if (cs->rules[i].text != res->rule)
			continue;
		if (cs->rules[i].meter == METER_CONCURRENCY ||
		    (p.kind != STRAT_FIXED_WINDOW && p.kind != STRAT_SESSION_WINDOW))
			return 0;
		return kq->sc->ad->dec->turn_delay(kq->sc->ad, now + res->retry_after_ms,
						   p.window_ms);
	}
	return 0;
}

/* The target of w whose limit refused it (res->by), or its first. */
static struct kq *waitq_by(struct waiter *w, const struct eng_res *res)
{
	for (size_t i = 0; i < w->nt; i++)
		if (w->t[i].kq == res->by)
			return w->t[i].kq;
	return w->t[0].kq;
}

/*
 * Was w refused for the lease slot of a key whose min_delay counts from
 * each release (serialized, or cluster_concurrency 1)? Then the lease held
 * must end, and min_delay pass after it.
 */
static bool waitq_paced_slot(struct waiter *w, const struct eng_res *res)
{
	if (!res->slot_wait || res->rule == NULL ||
	    !conf_plan_of(waitq_by(w, res)->sc->cs, NULL)->pace_release)
		return false;
	return strcmp(res->rule, PLAN_RULE_MIN_DELAY) == 0 ||
	       strcmp(res->rule, PLAN_RULE_CLUSTER) == 0;
}

/* One waiter's decision: admitted (and answered) or refused (answered, or
 * left to sleep out its wait as the queue's head). */
static void waitq_settle(struct waiter *w, const struct eng_res *res, int64_t now)
{
	struct kq *kq = w->t[0].kq;

	w->decided = true;
	w->last_via = res->via;
	if (!res->admitted)
		w->refused_by = res->by;
	w->left = res->left;
	if (res->admitted) {
		waitq_admit(w, res, now);
		waitq_remove(w);
	} else if (w->conn == NULL) {
		waitq_remove(w); /* gone or timed out while the decision was in flight */
	} else if (res->unavailable) {
		waitq_fail(w, ADMIT_E_UNAVAILABLE, 0, NULL, "the limiter backend cannot decide");
		waitq_remove(w);
	} else if (res->retry_after_ms < 0) {
		waitq_exceeds(w, res);
		waitq_remove(w);
	} else if (w->try_only && waitq_paced_slot(w, res)) {
		/* min_delay from completion while a lease is held: the earliest
		 * admission is its release plus min_delay (the key's override's,
		 * when it has one), so a retry sooner can only be refused again. */
		struct kq *by = waitq_by(w, res);
		int64_t pace = by->sc->ad->dec->min_delay(by, res->via);
		int64_t retry = res->retry_after_ms > pace ? res->retry_after_ms : pace;
		waitq_fail(w, ADMIT_E_LIMITED, retry, res->rule,
			   "a lease of this key is held, and min_delay counts from its release: "
			   "not admitted before it is released, plus min_delay");
		waitq_remove(w);
	} else if (w->try_only) {
		waitq_fail(w, ADMIT_E_LIMITED, res->retry_after_ms, res->rule,
			   res->share_short ? WAITQ_SHARE_MSG : NULL);
		waitq_remove(w);
	} else if (!res->slot_wait && now + res->retry_after_ms > w->deadline_ms) {
		/* A known wait longer than the budget left: say so now. A wait
		 * for a lease slot has no known end: it is slept out (timeout). */
		waitq_fail(w, ADMIT_E_BUDGET_EXCEEDED, res->retry_after_ms, res->rule,
			   res->share_short ? WAITQ_SHARE_MSG : NULL);
		waitq_remove(w);
	} else {
		int64_t wait =
		    waitq_jitter(kq->sc->cs, res->retry_after_ms) + waitq_turn_delay(kq, res, now);
		if (now + wait > w->deadline_ms) /* jitter never costs the last try; */
			wait = w->deadline_ms - now + (res->slot_wait ? 1 : 0); /* a slot
			* wait ends at the deadline */
		w->last_rule = res->rule;
		/* A wait for a lease slot can end early, at a release here (any
		 * head's: it stays set until every head has asked again). */
		kq->slot_wait = res->slot_wait || (kq->slot_wait && kq->sc->cs->nclasses > 0);
		waitq_sleep(kq, w, now, wait);
	}
}

static void waitq_decided(void *arg, const struct eng_res *res)
{
	struct waiter *w = arg;
	struct kq *kq = w->t[0].kq;
	bool nested = kq->in_pump;
	struct kq *others[PROTO_MAX_TARGETS];
	size_t i, nothers = w->nt - 1;

	/*
	 * Hold the pump off until w has left the queue: an admission nobody can
	 * receive is released at once, and that release pumps this queue, whose
	 * head is still w (it would be sent to the backend a second time).
	 */
	kq->in_pump = true;
	kq->busy = false;
	w->inflight = false;
	for (i = 0; i < w->nt; i++)
		w->t[i].kq->pending--;
	for (i = 1; i < w->nt; i++)
		others[i - 1] = w->t[i].kq;
	waitq_settle(w, res, clock_mono_ms());
	kq->in_pump = nested;
	if (!nested)
		waitq_pump(kq);
	/* This attempt no longer counts against the other targets' max_concurrent
	 * (the sweep runs from its own timer, so the kqs are still there). */
	for (i = 0; i < nothers; i++)
		waitq_pump(others[i]);
}

/*
 * The decision for the first n waiters of kq, sent in one call: the first
 * ones admitted, the next one refused (it is the head now, and sleeps out
 * its wait or is answered), the rest not decided (they stay queued, in
 * order, unless their client left or their deadline passed meanwhile).
 */
static void waitq_decided_batch(void *arg, struct waiter *const *ws, size_t n,
				const struct eng_res *res)
{
	struct kq *kq = arg;
	int64_t now = clock_mono_ms();
	bool nested = kq->in_pump, refused = false;
	size_t i;

	kq->in_pump = true;
	kq->busy = false;
	for (i = 0; i < n; i++) {
		ws[i]->inflight = false;
		kq->pending--;
	}
	for (i = 0; i < n; i++) {
		struct waiter *w = ws[i];
		if (!refused && !res[i].undecided) {
			refused = !res[i].admitted;
			waitq_settle(w, &res[i], now);
		} else if (w->conn == NULL) {
			waitq_remove(w); /* left, or timed out, while the call was out */
		}
	}
	kq->in_pump = nested;
	if (!nested)
		waitq_pump(kq);
}

/* May x follow head w in one batched call (same shape, slot free)? */
static bool waitq_batchable(const struct waiter *w, const struct waiter *x, int64_t extra)
{
	const struct kq *kq = w->t[0].kq;
	int64_t maxc = kq->sc->cs->max_concurrent;

	return x->nt == 1 && !x->inflight && x->t[0].cls == w->t[0].cls &&
	       x->t[0].cost == w->t[0].cost && x->nreserve == 0 && w->nreserve == 0 &&
	       (maxc == 0 || kq->held + kq->pending + extra < maxc);
}

/*
 * Send head w and the compatible waiters right behind it as one call (a hot
 * key: the script admits as many as the limits allow, in FIFO order). false
 * when none can follow (w goes alone).
 */
static bool waitq_send_batch(struct kq *kq, struct waiter *w)
{
	struct waiter *ws[WAITQ_BATCH], *x;
	size_t n = 1;

	ws[0] = w;
	for (x = TAILQ_NEXT(w, kq_link); x != NULL && n < WAITQ_BATCH; x = TAILQ_NEXT(x, kq_link)) {
		if (x->t[0].cls != w->t[0].cls)
			continue; /* another class's queue */
		if (!waitq_batchable(w, x, 0))
			break;
		lease_make_id(x->lease_id);
		x->inflight = true;
		kq->pending++;
		ws[n++] = x;
	}
	if (n == 1)
		return false;
	kq->sc->ad->dec->acquire_batch(kq->sc->ad, ws, n, waitq_decided_batch, kq);
	return true;
}

void waitq_cancel(struct waiter *w)
{
	struct kq *kq = w->t[0].kq;
	bool was_head = waitq_class_head(w) == w;

	if (w->conn != NULL)
		kq->sc->canceled++;
	w->canceled = true;
	waitq_unlink_conn(w);
	if (waitq_in_flight(w))
		return;
	waitq_remove(w);
	if (was_head)
		waitq_pump(kq);
}

void waitq_cancel_asked(struct waiter *w)
{
	client_reply(w->conn, preply_error(w->id, ADMIT_E_CANCELED, NULL));
	waitq_cancel(w);
}

void waitq_shutdown(struct kq *kq)
{
	struct waiter *w, *nx;

	for (w = TAILQ_FIRST(&kq->waiters); w != NULL; w = nx) {
		nx = TAILQ_NEXT(w, kq_link);
		waitq_fail(w, ADMIT_E_SHUTTING_DOWN, 0, NULL, NULL);
		waitq_unlink_conn(w);
		if (!waitq_in_flight(w))
			waitq_remove(w);
	}
}

void waitq_abort(struct waiter *w, enum admit_err e, const char *msg)
{
	waitq_fail(w, e, 0, NULL, msg);
	waitq_unlink_conn(w);
	if (!waitq_in_flight(w))
		waitq_remove(w);
}

/*
 * The queues after a reload. scopes_reload has mapped the scopes and keys
 * onto nc (the running conf is still oc).
 */
struct waitq_reload_walk {
	const struct conf *oc, *nc;
};

/*
 * A waiter's last refusal names a rule: when the text is the old conf's,
 * the same text in the new one, or NULL (its timeout then blames the head
 * or the queue). Static names are kept.
 */
static const char *waitq_rule_text(const struct conf *oc, const struct conf *nc, const char *s)
{
	size_t i, j;

	if (s == NULL)
		return NULL;
	for (i = 0; i < oc->nscopes; i++) {
		const struct conf_scope *o = &oc->scopes[i], *n;
		bool ours = s == o->quota_text;

		for (j = 0; !ours && j < o->nrules; j++)
			ours = s == o->rules[j].text || s == o->rules[j].name;
		if (!ours)
			continue;
		if ((n = conf_scope_find(nc, o->name)) == NULL)
			return NULL;
		if (n->quota_text != NULL && strcmp(n->quota_text, s) == 0)
			return n->quota_text;
		for (j = 0; j < n->nrules; j++) {
			if (strcmp(n->rules[j].text, s) == 0)
				return n->rules[j].text;
			if (n->rules[j].name != NULL && strcmp(n->rules[j].name, s) == 0)
				return n->rules[j].name;
		}
		return NULL;
	}
	return s;
}

/*
 * The waiters queued on one key: re-pointed at the new conf (a retired
 * scope's target keeps its class: that conf stays with it), and answered
 * when they cannot go on because a scope or class they name is gone. A
 * waiter whose client left is only waiting for its decision: re-pointed.
 */
static void waitq_reload_kq(void *arg, const char *key UNUSED, void *val)
{
	struct waitq_reload_walk *rw = arg;
	struct kq *kq = val;
	struct waiter *w, *nx;
	char msg[200];

	for (w = TAILQ_FIRST(&kq->waiters); w != NULL; w = nx) {
		const char *gone_scope = NULL, *gone_class = NULL;
		size_t i;

		nx = TAILQ_NEXT(w, kq_link);
		for (i = 0; i < w->nt; i++) {
			struct scope_rt *sc = w->t[i].kq->sc;
			const char *name = w->t[i].cls ? w->t[i].cls->name : "";

			if (sc->retired) {
				if (gone_scope == NULL)
					gone_scope = sc->cs->name;
				continue;
			}
			if (gone_class == NULL && w->t[i].cls != NULL &&
			    conf_class_find(sc->cs, name) == NULL) {
				snprintf(
				    msg, sizeof(msg),
				    "scope \"%s\" has no class \"%s\" since the conf was reloaded",
				    sc->cs->name, name);
				gone_class = msg;
			}
			w->t[i].cls = w->t[i].cls != NULL ? conf_class_find(sc->cs, name) : NULL;
		}
		w->last_rule = waitq_rule_text(rw->oc, rw->nc, w->last_rule);
		w->left.nm = 0; /* its meters name the old conf: the next decision tells */
		if (w->conn == NULL)
			continue;
		if (gone_scope != NULL) {
			snprintf(msg, sizeof(msg),
				 "no scope \"%s\" in the conf since it was reloaded", gone_scope);
			waitq_abort(w, ADMIT_E_UNKNOWN_SCOPE, msg);
		} else if (gone_class != NULL) {
			waitq_abort(w, ADMIT_E_BAD_REQUEST, gone_class);
		}
	}
}

void waitq_reload(struct rt *ad, const struct conf *oc, const struct conf *nc)
{
	struct waitq_reload_walk rw = { .oc = oc, .nc = nc };
	const struct scope_rt *r;
	size_t i;

	for (i = 0; i < ad->nscopes; i++)
		htab_each(ad->scopes[i].keys, waitq_reload_kq, &rw);
	for (r = ad->retired; r != NULL; r = r->retired_next)
		htab_each(r->keys, waitq_reload_kq, &rw);
}

static void waitq_wake_kq(void *arg UNUSED, const char *key UNUSED, void *val)
{
	struct kq *kq = val;

	if (TAILQ_EMPTY(&kq->waiters) || kq->busy)
		return;
	/* A head asleep on a refusal asks again now: a raised limit may admit it. */
	if (kq->wake_at != 0 && kq->retry_ev != NULL && event_del(kq->retry_ev) != 0) {
		log_warn("cannot wake a waiting key after the reload: it asks at its time",
			 "scope=%s", kq->sc->cs->name);
		return;
	}
	kq->wake_at = 0;
	waitq_pump(kq);
}

void waitq_wake_all(struct rt *ad)
{
	size_t i;

	for (i = 0; i < ad->nscopes; i++)
		htab_each(ad->scopes[i].keys, waitq_wake_kq, NULL);
}

static void waitq_shutdown_cb(void *arg UNUSED, const char *key UNUSED, void *val)
{
	waitq_shutdown(val);
}

void waitq_shutdown_all(struct rt *ad)
{
	size_t i;

	for (i = 0; i < ad->nscopes; i++)
		htab_each(ad->scopes[i].keys, waitq_shutdown_cb, NULL);
}

static void waitq_free_kq(void *arg UNUSED, const char *key UNUSED, void *val)
{
	struct kq *kq = val;

	while (!TAILQ_EMPTY(&kq->waiters)) {
		struct waiter *w = TAILQ_FIRST(&kq->waiters);
		kq->busy = false;
		waitq_remove(w);
	}
}

void waitq_free_all(struct rt *ad)
{
	const struct scope_rt *r;
	size_t i;

	for (i = 0; i < ad->nscopes; i++)
		htab_each(ad->scopes[i].keys, waitq_free_kq, NULL);
	for (r = ad->retired; r != NULL; r = r->retired_next)
		htab_each(r->keys, waitq_free_kq, NULL);
}

void waitq_slot_freed(struct kq *kq)
{
	/*
	 * A slot is free: the head may go now, not at its next poll. With Redis
	 * only a head waiting for a slot is woken; one sleeping out a pacing or
	 * budget wait would spend a round trip to hear the same answer.
	 */
	if (kq->wake_at != 0 && kq->retry_ev != NULL &&
	    (kq->sc->ad->redis == NULL || kq->slot_wait)) {
		event_del(kq->retry_ev);
		kq->wake_at = 0;
	}
	waitq_pump(kq);
}
