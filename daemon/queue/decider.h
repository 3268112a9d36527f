/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * decider.h - what the queue asks of whoever decides, and the answers.
 *
 * Owns nothing by itself: it declares the decider, the hook table through
 * which the queue (waitq.c, lease.c, scope.c) asks for decisions without
 * knowing who makes them (the engine fills it: engine.c), and the answers
 * a decision gives, whichever limiter made it (the in-process one, or the
 * Redis store): acquires (eng_res), releases by handle (eng_settled),
 * inspections (eng_insp), resets and overrides (eng_reset_cb).
 */

#ifndef ADMITD_DECIDER_H
#define ADMITD_DECIDER_H

#include "limiter.h"
#include "rt.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kq;
struct lease;
struct waiter;

/* Which limiter made a decision; "backend" in replies. */
enum via { VIA_LOCAL = 0, VIA_REDIS, VIA_FALLBACK };
static inline const char *via_name(enum via v)
{
	static const char *const names[] = { "local", "redis", "fallback" };

	return names[v];
}

struct eng_res {
	bool admitted;
	int64_t retry_after_ms; /* refusals */
	const char *rule;	/* refusals and shadow refusals */
	enum via via;
	bool shadow_limited;	 /* admitted only because the refusing scope is shadow */
	bool booked;		 /* state to release exists in the backend */
	bool unavailable;	 /* refused because fail_mode = closed and Redis is down */
	bool slot_wait;		 /* refusals: the deciding limit waits for a lease slot */
	int64_t limit;		 /* never-passing refusals: the capacity asked beyond */
	bool refused;		 /* eng_merge: a non-shadow target refused */
	bool undecided;		 /* a batch's waiter after the first refused: no decision */
	bool redis_maybe;	 /* not via Redis, but a Redis call for it had no known outcome */
	int64_t redis_after;	 /* ... which can book nothing after this (mono ms) */
	const char *shadow_rule; /* eng_merge: the first shadow target's refusal */
	bool share_short;	 /* fallback: this pod's share of a limit refused it */
	const struct kq *by;	 /* refusals: the target whose limit decided */
	int64_t ask_min_ms;	 /* refusals: a sleeping head asks again no sooner (0: any) */
	int64_t ask_max_ms;	 /* ... and no later (0: at its wait's end) */
	struct lim_left left;	 /* what the tightest limit allows after this decision */
};

typedef void eng_cb(void *arg, const struct eng_res *r);

#define ENG_BATCH_MAX 16
typedef void eng_batch_cb(void *arg, struct waiter *const *ws, size_t n, const struct eng_res *res);

/* What a release by handle settled (eng_release_ref). */
struct eng_settled {
	bool held;	  /* the lease was still in flight */
	bool settled;	  /* this release settled it: the first one */
	bool repeat;	  /* it was settled before: nothing changed */
	bool mismatch;	  /* the handle is not what its record binds: nothing changed */
	bool unknown;	  /* Redis took the call but its answer was lost: ask again */
	bool unavailable; /* Redis cannot be asked now: nothing changed */
};
typedef void eng_settled_cb(void *arg, const struct eng_settled *s);

/* A tenant flow of a fair key's queue across daemons, as inspect shows it. */
struct eng_flow {
	const char *name;
	int64_t n;
};
#define ENG_INSP_FLOWS 80 /* flows shown at most (a class tracks 65) */

/* What inspect reports of one key, on the deciding limiter's clock. */
struct eng_insp {
	enum via via;
	int64_t now, next_at, penalty_until;
	int64_t leases; /* in flight: cluster-wide through Redis, else this daemon's */
	int64_t quota_used, quota_oldest;
	const struct strat_state *rules; /* by conf rule index */
	struct adapt_state ad;		 /* adaptive scopes: the key's learned amount */
	const struct lim_ovr *ov;	 /* the key's override in force; NULL: none */
	/* a fair scope on Redis: the class's queue across daemons */
	bool fair;
	int64_t tickets;	      /* waiting */
	const char *fair_v;	      /* its virtual time, as Redis keeps it */
	size_t nflows;		      /* tenant flows with tickets */
	const struct eng_flow *flows; /* ... each: its name ("" the default) and count */
};
typedef void eng_insp_cb(void *arg, const struct eng_insp *in);

typedef void eng_reset_cb(void *arg, enum via via, bool ok);

/*
 * The decider: rt->dec. Each hook is the engine's function of the name
 * (engine.h says what it does); the queue calls them only through here.
 */
struct decider {
	/* acquire - decide for w's targets; cb exactly once, now or later. */
	void (*acquire)(struct rt *rt, struct waiter *w, const char *lease_id, eng_cb *cb,
			void *arg);
	/* can_batch - may w, its key's head, be decided with those like it behind? */
	bool (*can_batch)(struct rt *rt, const struct waiter *w);
	/* acquire_batch - decide ws[0..n) of one key in one call; cb exactly once. */
	void (*acquire_batch)(struct rt *rt, struct waiter *const *ws, size_t n, eng_batch_cb *cb,
			      void *arg);
	/* release - give l's bookings back and charge its tokens. */
	void (*release)(struct lease *l, const struct meter_tokens *tokens, size_t ntokens);
	/* mirror - a lease booked through Redis is counted in process too. */
	void (*mirror)(struct lease *l);
	/* sends - does l's release carry an outcome the store must learn? */
	bool (*sends)(const struct lease *l);
	/* min_delay - the min_delay in force for kq as a release through via starts it. */
	int64_t (*min_delay)(struct kq *kq, enum via via);
	/* forget - what the deciders remember of kq is dropped: a refusal Redis
	 * gave, units booked ahead (given back). */
	void (*forget)(struct kq *kq);
	/* leave - w leaves its queue unserved while it holds a ticket in a
	 * queue across daemons (w->fl_member): the ticket goes. */
	void (*leave)(struct rt *rt, const struct waiter *w);
	/* turn_delay - a refused head's slot after a window's turn (0: none). */
	int64_t (*turn_delay)(struct rt *rt, int64_t turn_mono, int64_t window_ms);
};

#endif
