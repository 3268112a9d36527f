/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rb_ahead.c - the Redis backend's units booked ahead for a hot key.
 *
 * Owns: per key, the units an acquire booked in Redis beyond its own cost
 * (struct rb_ahead, hung on the kq), handing them out with no call while
 * redis_book_ahead has not passed since they were booked, how many the
 * key's next acquire asks for, and giving back what was not handed out:
 * with that acquire, or from a tick of its own (backend.h says the rules).
 *
 * Only a plan of one token or leaky bucket and nothing else books ahead.
 * Its units are taken in Redis first, so no pod ever admits beyond the
 * bucket: a unit handed out later than it was booked is a bucket that
 * filled meanwhile, never one that overflows. What one pod holds unused is
 * at most what the bucket refills in redis_book_ahead, and only for that
 * long; other pods may be refused by that much.
 */

#include "backend_int.h"

#include "clock.h"
#include "log.h"

#include <event2/event.h>
#include <stdlib.h>

struct rb_ahead {
	TAILQ_ENTRY(rb_ahead) link; /* b->aheads, by booking time */
	struct backend *b;	    /* whose list: a reload's new backend has its own */
	struct kq *kq;
	const struct conf_scope *cs;  /* the conf they were booked under (b keeps it) */
	const struct conf_class *cls; /* the class they were booked for */
	int64_t n;		      /* units booked and not handed out */
	int64_t got;		      /* units the last booking gave */
	int64_t at;		      /* when they were booked (mono ms) */
	struct lim_left left;	      /* what Redis said was left then */
};

/* The units (cs, cls) may book ahead in one call: 0 when its plan cannot. */
int64_t rb_ahead_cap(const struct backend *b, const struct conf_scope *cs,
		     const struct conf_class *cls)
{
	const struct conf_plan *pl = conf_plan_of(cs, cls);
	int64_t h = b->ad->conf->redis_book_ahead_ms, cap;
	const struct strat_params *sp;

	if (h <= 0 || !pl->plain || cs->shadow)
		return 0;
	sp = &cs->rules[pl->rules[0]].sp;
	if (sp->kind != STRAT_TOKEN_BUCKET && sp->kind != STRAT_LEAKY_BUCKET)
		return 0;
	/* what the bucket refills in the horizon, in whole units */
	if (sp->amount > INT64_MAX / h)
		return RB_AHEAD_MAX;
	cap = sp->amount * h / sp->window_ms;
	return cap < RB_AHEAD_MAX ? cap : RB_AHEAD_MAX;
}

bool backend_ahead_on(const struct backend *b, const struct waiter *w)
{
	return b != NULL && w->nt == 1 && w->nreserve == 0 &&
	       rb_ahead_cap(b, w->t[0].kq->sc->cs, w->t[0].cls) > 0;
}

static void rb_ahead_free(struct rb_ahead *a)
{
	TAILQ_REMOVE(&a->b->aheads, a, link);
	a->kq->ahead = NULL;
	free(a);
}

/* A give-back in flight: its units count as given back unless it fails. */
struct rb_give {
	struct backend *b;
	int64_t units;
};

/* Units counted as given back whose call failed or never went: dropped. */
void rb_ahead_lost(struct backend *b, int64_t units)
{
	b->ahead_returned -= (uint64_t)units; /* Redis may not have them */
	b->ahead_dropped += (uint64_t)units;
}

/* What is left, as this daemon sees it: Redis's, and the units it holds. */
void rb_ahead_count(struct lim_left *left, int64_t held)
{
	size_t i;

	if (!left->has || held <= 0)
		return;
	left->remaining += held;
	if (left->capacity > 0 && left->remaining > left->capacity)
		left->remaining = left->capacity;
	for (i = 0; i < left->nm; i++) /* a plan that books ahead has its one rule */
		left->m[i].remaining = left->m[i].remaining + held < left->m[i].limit
					   ? left->m[i].remaining + held
					   : left->m[i].limit;
}

static void rb_ahead_return_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct rb_give *g = arg;

	if (st != RP_OK || reply == NULL || reply->type != RV_ARR) {
		if (st != RP_SHUTDOWN)
			rb_failed(g->b, RB_OP_GIVE_BACK, st, reply);
		rb_ahead_lost(g->b, g->units);
	}
	free(g);
}

/*
 * Give a's units back now, in a call of their own (a plain acquire of
 * nothing that gives them back); when it cannot be sent, they are lost to
 * the bucket until it refills (never admitted twice).
 */
static void rb_ahead_return(struct rb_ahead *a)
{
	struct backend *b = a->b;
	struct rb_plain p;
	struct rargs args = { 0 };
	struct rb_give *g;

	if (a->n <= 0)
		return;
	rb_plain_params(&p, a->cs, a->cls, 0, 0);
	p.ahead = true;
	p.give = a->n;
	a->n = 0;
	if (b->closing || !b->up || (g = malloc(sizeof(*g))) == NULL) {
		b->ahead_dropped += (uint64_t)p.give;
		return;
	}
	*g = (struct rb_give){ .b = b, .units = p.give };
	rb_plain_call(&args, b, a->cs, a->kq->key, &p);
	if (args.oom ||
	    rb_eval(b, a->cs, a->kq->key, b->s_acquire, &args, 1, rb_ahead_return_cb, g) != 0) {
		b->errors[RB_OP_GIVE_BACK]++;
		b->ahead_dropped += (uint64_t)p.give;
		free(g);
	} else {
		b->calls[RB_OP_GIVE_BACK]++;
		b->ahead_returned += (uint64_t)p.give;
	}
	rargs_clear(&args);
}

/* The tick runs every redis_book_ahead while some key has a record. */
static void rb_ahead_arm(struct backend *b)
{
	int64_t h = b->ad->conf->redis_book_ahead_ms > 0 ? b->ad->conf->redis_book_ahead_ms : 1;
	struct timeval tv = { (time_t)(h / 1000), (suseconds_t)(h % 1000) * 1000 };

	if (evtimer_add(b->ahead_ev, &tv) != 0)
		log_ratelimited(LOG_SLOT_FALLBACK, 1000, "cannot arm the book-ahead tick", NULL);
}

/*
 * The tick: what was booked redis_book_ahead ago or more and not handed
 * out goes back; a key's record goes once it is twice that old (until
 * then its next acquire still knows how fast it went).
 */
static void rb_ahead_tick(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	struct backend *b = arg;
	int64_t now = clock_mono_ms(), h = b->ad->conf->redis_book_ahead_ms;
	struct rb_ahead *a, *next;

	for (a = TAILQ_FIRST(&b->aheads); a != NULL && a->at + h <= now; a = next) {
		next = TAILQ_NEXT(a, link);
		rb_ahead_return(a);
		if (a->at + 2 * h <= now && a->kq->pending == 0)
			rb_ahead_free(a);
	}
	if (!TAILQ_EMPTY(&b->aheads))
		rb_ahead_arm(b);
}

/*
 * What t's acquire, its waiter's only target, books ahead and gives back
 * (its caller hands it to rb_target_args): all zero when its plan cannot
 * book ahead. What the key held goes back with it (counted as returned).
 */
struct rb_ask rb_ahead_ask(struct backend *b, const struct target_rt *t)
{
	struct rb_ahead *a = t->kq->ahead;
	int64_t cap = rb_ahead_cap(b, t->kq->sc->cs, t->cls), want = 0, behind;
	struct rb_ask ask = { .books_ahead = cap > 0 };

	if (!ask.books_ahead)
		return ask;
	if (a != NULL && a->b == b && a->cls == t->cls) {
		int64_t now = clock_mono_ms();
		if (now < a->at + b->ad->conf->redis_book_ahead_ms)
			want = a->got > 0 ? 2 * a->got : 1; /* ran short in time: more */
		else
			want = a->got - a->n; /* what one horizon took */
		ask.give = a->n;	      /* back with this call */
		b->ahead_returned += (uint64_t)a->n;
		a->n = 0;
	}
	/* a hot key's waiters behind this one are served from what it books */
	behind = t->kq->nwait > 1 ? (int64_t)(t->kq->nwait - 1) * (t->cost > 0 ? t->cost : 1) : 0;
	if (want < behind)
		want = behind;
	ask.extra = want < cap ? want : cap;
	ask.ahead = ask.extra > 0 || ask.give > 0; /* else the 'p' group's fewer arguments */
	return ask;
}

void rb_ahead_keep(struct backend *b, struct kq *kq, const struct conf_class *cls, int64_t units,
		   const struct lim_left *left)
{
	struct rb_ahead *a = kq->ahead;

	if (a != NULL && a->b != b) { /* a replaced backend's, under a replaced conf */
		a->b->ahead_dropped += (uint64_t)a->n;
		rb_ahead_free(a);
		a = NULL;
	}
	if (a != NULL && a->cls != cls) {
		rb_ahead_return(a); /* booked for another class: not this one's */
	} else if (a == NULL) {
		if ((a = calloc(1, sizeof(*a))) == NULL) {
			b->ahead_booked += (uint64_t)(units > 0 ? units : 0);
			b->ahead_dropped += (uint64_t)(units > 0 ? units : 0);
			return; /* nowhere to keep them: lost until the bucket refills */
		}
		a->b = b;
		a->kq = kq;
		kq->ahead = a;
		TAILQ_INSERT_TAIL(&b->aheads, a, link);
	}
	if (a->n > 0) /* units a rollback or another call left: they go back */
		rb_ahead_return(a);
	a->cs = kq->sc->cs;
	a->cls = cls;
	a->n = a->got = units > 0 ? units : 0;
	a->at = clock_mono_ms();
	a->left = *left;
	b->ahead_booked += (uint64_t)a->n;
	if (TAILQ_NEXT(a, link) != NULL) { /* the newest booking goes last */
		TAILQ_REMOVE(&b->aheads, a, link);
		TAILQ_INSERT_TAIL(&b->aheads, a, link);
	}
	if (!evtimer_pending(b->ahead_ev, NULL))
		rb_ahead_arm(b);
}

bool backend_ahead_take(struct backend *b, struct waiter *w, struct eng_res *res)
{
	struct kq *kq = w->t[0].kq;
	struct rb_ahead *a = kq->ahead;
	int64_t cost = w->t[0].cost, now;

	if (a == NULL || a->n <= 0 || a->b != b || w->nt != 1 || w->nreserve != 0 ||
	    a->cls != w->t[0].cls || cost > a->n || kq->fl_queued)
		return false; /* (fl_queued: a fair key's tickets go first) */
	now = clock_mono_ms();
	if (now >= a->at + b->ad->conf->redis_book_ahead_ms)
		return false; /* too old to hand out: the next call gives them back */
	a->n -= cost;
	b->ahead_taken += (uint64_t)cost;
	*res = (struct eng_res){ .admitted = true,
				 .via = VIA_REDIS,
				 .booked = conf_plan_of(kq->sc->cs, a->cls)->release_books,
				 .left = a->left };
	rb_ahead_count(&res->left, a->n); /* Redis's then, and what is still held of it */
	lim_left_age(&res->left, now - a->at);
	kq->sc->admitted_ahead++;
	return true;
}

void backend_ahead_end(struct kq *kq)
{
	if (kq->ahead != NULL)
		rb_ahead_return(kq->ahead);
}

void backend_ahead_drop(struct kq *kq, bool give)
{
	struct rb_ahead *a = kq->ahead;

	if (a == NULL)
		return;
	if (give)
		rb_ahead_return(a);
	a->b->ahead_dropped += (uint64_t)a->n;
	rb_ahead_free(a);
}

void rb_ahead_give_all(struct backend *b)
{
	struct rb_ahead *a;

	for (a = TAILQ_FIRST(&b->aheads); a != NULL; a = TAILQ_NEXT(a, link))
		rb_ahead_return(a);
}

bool rb_ahead_init(struct backend *b)
{
	TAILQ_INIT(&b->aheads);
	return (b->ahead_ev = evtimer_new(b->ad->base, rb_ahead_tick, b)) != NULL;
}

void rb_ahead_free_all(struct backend *b)
{
	while (!TAILQ_EMPTY(&b->aheads)) {
		struct rb_ahead *a = TAILQ_FIRST(&b->aheads);
		b->ahead_dropped += (uint64_t)a->n;
		rb_ahead_free(a);
	}
	if (b->ahead_ev != NULL)
		event_free(b->ahead_ev);
	b->ahead_ev = NULL;
}
