/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * waitq.c - queues of acquires waiting for one (scope, key), FIFO per class.
 *
 * Owns: struct waiter records from waitq_add until they are answered (their
 * answers and removal are waitq_answer.c's, the order of a key's class
 * heads waitq_class.c's, the walks over every queue waitq_all.c's), their
 * deadline timers, and each kq's retry timer. Does not own the connection a
 * waiter came from (conn.c) nor the lease it gets (lease.c).
 *
 * A key's waiters are one list, each class's in its tenants' fair order
 * (start tags, then arrival: waitq_class.c); the first waiter of each
 * class is that class's head. Only heads ask the limiter; the others sleep
 * until they become the head or their deadline passes, so a thousand local
 * waiters of a class are one poll, not a thousand. Heads are asked in class
 * priority order (priority=N, higher first), then by their arrival. A head
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

#include "waitq_int.h"

#include "clock.h"
#include "lease.h"
#include "scope.h"
#include "log.h"
#include "rand.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>

static void waitq_decided(void *arg, const struct eng_res *res);

static bool waitq_send_batch(struct kq *kq, struct waiter *w);
static void waitq_fleet_wake(struct kq *kq);
static bool waitq_fleet_backlogged(const struct kq *kq, const struct waiter *x);
static void waitq_sleep(struct kq *kq, struct waiter *w, int64_t now, int64_t wait_ms);
static bool waitq_batchable(const struct waiter *w, const struct waiter *x, int64_t extra);

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
	static uint64_t arrivals;
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
	w->seq = ++arrivals;
	if (w->try_only)
		TAILQ_INSERT_TAIL(&kq->waiters, w, kq_link);
	else
		waitq_fair_insert(kq, w);
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
	/* Most acquires are answered within this pump (local mode, a refused
	 * try): only one still waiting after it gets a deadline timer, so the
	 * others cost libevent's timer heap nothing. The timer only fires from
	 * the loop, so arming it after the pump changes no answer. */
	waitq_watch(w);
	waitq_pump(kq);
	if (!waitq_watching(w) || w->try_only) {
		waitq_watch(NULL);
		return;
	}
	waitq_watch(NULL);
	if (waitq_arm_deadline(w, clock_mono_ms()) == 0) {
		w->deadline_set = true;
		return;
	}
	waitq_fail(w, ADMIT_E_UNAVAILABLE, 0, NULL, "cannot arm timer");
	if (waitq_in_flight(w)) { /* its decision comes back to no one, and is undone */
		w->canceled = true;
		waitq_unlink_conn(w);
		return;
	}
	waitq_remove(w);
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
	if (kq->sc->cs->fair && !kq->busy)
		waitq_fleet_wake(kq);
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
		if (kq->sc->ad->dec->can_batch(kq->sc->ad, w) &&
		    (TAILQ_NEXT(w, kq_link) != NULL || kq->sc->cs->fair) && waitq_send_batch(kq, w))
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
		waitq_fair_served(w);
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
		if (res->ask_min_ms > 0 && wait < res->ask_min_ms)
			wait = res->ask_min_ms;
		if (res->ask_max_ms > 0 && wait > res->ask_max_ms)
			wait = res->ask_max_ms;
		if (now + wait > w->deadline_ms) /* jitter never costs the last try; */
			wait = w->deadline_ms - now + (res->slot_wait ? 1 : 0); /* a slot
			* wait ends at the deadline */
		w->last_rule = res->rule;
		if (waitq_class_head(w) != w) {
			/* a waiter tagged before it took its place: that one asks next */
			w->wake_at = 0;
			return;
		}
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

/*
 * A fair scope's waiters take their tickets in the shared queue as they
 * arrive, through their class head's call: a sleeping head asks within
 * WAITQ_FLEET_GATHER_MS when one of the waiters its call would carry holds
 * none yet (the arrivals of that time share the call, and a head due
 * sooner carries them anyway).
 */
static void waitq_fleet_wake(struct kq *kq)
{
	struct waitq_heads h;
	size_t i, n;
	struct waiter *x;
	int64_t now = clock_mono_ms();

	waitq_heads(kq, &h);
	for (i = 0; i < h.n; i++) {
		struct waiter *w = h.w[i];
		int64_t g = -1;
		if (w->wake_at <= now + WAITQ_FLEET_GATHER_MS ||
		    !kq->sc->ad->dec->can_batch(kq->sc->ad, w))
			continue;
		for (x = w, n = 0; x != NULL && n < WAITQ_BATCH && g != WAITQ_FLEET_GATHER_MS;
		     x = TAILQ_NEXT(x, kq_link)) {
			if (x->t[0].cls != w->t[0].cls)
				continue;
			if (x != w && !waitq_batchable(w, x, 0))
				break;
			if (x->fl_member[0] == '\0' && !x->try_only && !x->inflight)
				g = waitq_fleet_backlogged(kq, x) ? WAITQ_FLEET_GATHER_BACKLOG_MS
								  : WAITQ_FLEET_GATHER_MS;
			n++;
		}
		if (g > 0 && w->wake_at > now + g)
			waitq_sleep(kq, w, now, g);
	}
}

/*
 * Does another waiter of x's tenant and class here hold a ticket? Then x's
 * own goes behind that tenant's anyway (its start tag is at least the
 * tenant's last finish tag), and taking it with the head's next ask, a
 * little later, changes no order among tenants: it saves a call.
 */
static bool waitq_fleet_backlogged(const struct kq *kq, const struct waiter *x)
{
	const struct waiter *y;

	TAILQ_FOREACH (y, &kq->waiters, kq_link)
		if (y != x && y->t[0].cls == x->t[0].cls && y->fl_member[0] != '\0' &&
		    strcmp(y->tenant, x->tenant) == 0)
			return true;
	return false;
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
	if (n == 1 && !kq->sc->cs->fair)
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
