/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * engine.h - where decisions are made: the in-process limiter or Redis.
 *
 * Owns: the choice of backend for each operation (local mode: always the
 * in-process limiter; Redis mode: Redis, and the scope's fail_mode when
 * Redis cannot answer), shadow mode, and all-or-nothing over several
 * targets; and the door through which the Redis backend keeps the
 * fallback's state in step with what Redis says (eng_fb_*). Waiters, leases
 * and connections are the callers'.
 */

#ifndef ADMITD_ENGINE_H
#define ADMITD_ENGINE_H

#include "admitd.h"
#include "lease_id.h"

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
	struct lim_left left;	 /* what the tightest limit allows after this decision */
};

/*
 * eng_merge - fold the decision of one target, kq's, into res (which starts admitted):
 * the refusal with the longest wait names the rule (never-passing -1 wins,
 * ties: the first); a shadow scope's refusal is counted and remembered but
 * refuses nothing. eng_merge_end settles res once every target is in.
 */
void eng_merge(struct eng_res *res, struct kq *kq, bool admitted, int64_t retry, const char *rule,
	       bool slot, int64_t limit);
void eng_merge_end(struct eng_res *res);
/* eng_merge_left - res->left keeps the tightest of itself and one target's left. */
void eng_merge_left(struct eng_res *res, const struct lim_left *left);

typedef void eng_cb(void *arg, const struct eng_res *r);

/*
 * The refusals Redis already answered. A single-target acquire that Redis
 * refused with a known wait that no release can shorten (pacing, a
 * penalty, a rate rule, the quota: not a lease slot) is refused here, with
 * no call, until that wait has passed (but for at most redis_refusal_hold,
 * and not past the end of the key's override), for the same class and a
 * cost at least as large with no reservation: nothing but a refund, a
 * reset or an override can admit it sooner. A release through this daemon
 * of a lease on the key, a rollback of one, a reset or an override through
 * it, and a reload forget it; one through another daemon is seen here
 * within redis_refusal_hold (until then the key is refused as Redis said,
 * never admitted beyond a limit).
 *
 * eng_refused_keep - remember res (a refusal Redis gave the waiter w of one
 * target) on its key; eng_refused_forget - kq's is forgotten (and freed).
 */
struct eng_refused;
void eng_refused_keep(const struct waiter *w, const struct eng_res *res);
void eng_refused_forget(struct kq *kq);

/*
 * eng_acquire - decide for the waiter's targets, booking under lease_id when
 * admitted. cb is called exactly once: before eng_acquire returns (in-process)
 * or later from the loop (Redis). The waiter must stay alive until then.
 */
void eng_acquire(struct admitd *ad, struct waiter *w, const char *lease_id, eng_cb *cb, void *arg);

/*
 * eng_can_batch - may w, the head of its key, be decided together with the
 * compatible waiters behind it (Redis up, one target, a scope without
 * pacing: every limit counts n admissions at one instant exactly)?
 */
bool eng_can_batch(struct admitd *ad, const struct waiter *w);

#define ENG_BATCH_MAX 16
typedef void eng_batch_cb(void *arg, struct waiter *const *ws, size_t n, const struct eng_res *res);

/*
 * eng_acquire_batch - decide ws[0..n) of one key, in FIFO order, in one call:
 * cb gets one result each (admitted ones first, then at most one refusal,
 * then undecided ones), exactly once, later from the loop or at once.
 */
void eng_acquire_batch(struct admitd *ad, struct waiter *const *ws, size_t n, eng_batch_cb *cb,
		       void *arg);

/*
 * eng_release - give the lease's bookings back and charge token meters:
 * in Redis when it booked there (or may have), in process for what the
 * in-process limiter booked (its own admissions, and the mirror of Redis
 * leases). Tokens that cannot reach Redis now are charged in process, and
 * queued for Redis.
 */
void eng_release(struct lease *l, const struct meter_tokens *tokens, size_t ntokens);

/*
 * eng_key_share - this pod's fallback share of kq's limits (backend_share),
 * with the key's turn: its hash, which spreads the remainders of the shares
 * and the owners of serialized keys across the ranked pods.
 */
struct lim_share eng_key_share(struct admitd *ad, const struct kq *kq);

/*
 * eng_mirror - a lease granted through Redis is also entered in the
 * in-process lease set of each key that tracks leases, so that the
 * fallback counts what this daemon holds whichever backend booked it.
 */
void eng_mirror(struct lease *l);

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

/*
 * eng_release_ref - release, by its handle, a lease this daemon did not
 * issue (another daemon's, or this daemon's before a restart). Only Redis
 * can vouch for such a handle: the lease's settlement record there is
 * settled once (its slot freed, its tokens charged against what it
 * booked), and a handle with no record, or one settled before, changes
 * nothing. In local mode, or while Redis cannot be asked, nothing changes
 * and nothing is queued. cb runs exactly once, now or from the loop.
 */
struct be_target;
void eng_release_ref(struct admitd *ad, const struct lease_ref *ref,
		     const struct meter_tokens *tokens, size_t ntokens, eng_settled_cb *cb,
		     void *arg);

/* What inspect reports of one key, on the deciding limiter's clock. */
struct eng_insp {
	enum via via;
	int64_t now, next_at, penalty_until;
	int64_t leases; /* in flight: cluster-wide through Redis, else this daemon's */
	int64_t quota_used, quota_oldest;
	const struct strat_state *rules; /* by conf rule index */
	struct adapt_state ad;		 /* adaptive scopes: the key's learned amount */
	const struct lim_ovr *ov;	 /* the key's override in force; NULL: none */
};
typedef void eng_insp_cb(void *arg, const struct eng_insp *in);

/*
 * eng_inspect - the key's state as the limiter that decides now sees it
 * (Redis when it answers; else the in-process one). cb runs exactly once,
 * now or from the loop; kq stays alive until then (the caller holds a ref).
 */
void eng_inspect(struct kq *kq, const struct conf_class *cls, eng_insp_cb *cb, void *arg);

/*
 * eng_reset - lift the key's penalty and pacing: in Redis (for every
 * daemon) and in process. cb(arg, via, ok) runs exactly once; ok false when
 * Redis could not be told (the in-process state is reset anyway).
 */
/* eng_inspect_local - the in-process half of eng_inspect (cb runs now). */
void eng_inspect_local(struct kq *kq, enum via via, eng_insp_cb *cb, void *arg);

typedef void eng_reset_cb(void *arg, enum via via, bool ok);
void eng_reset(struct kq *kq, eng_reset_cb *cb, void *arg);

/*
 * eng_override - the key's override (what the caller checked against the
 * scope's override_max) holds for ttl_ms: min_delay_ms (-1: the conf's) and
 * amount[0..nrules) by conf rule index (NULL, or 0: the conf's), replacing
 * any it had. In Redis for every daemon, and in process (which the fallback
 * then uses). cb as eng_reset's: ok false when Redis could not be told.
 */
void eng_override(struct kq *kq, int64_t ttl_ms, int64_t min_delay_ms, const int64_t *amount,
		  eng_reset_cb *cb, void *arg);

/*
 * eng_min_delay - the min_delay in force for kq now, as a release through
 * `via` would start it: the key's override (in Redis mode the one the last
 * acquire reply carried), and in fallback times the divisor.
 */
int64_t eng_min_delay(struct kq *kq, enum via via);

/* eng_penalize - hold the key back for delay_ms (never shortens a hold). */
void eng_penalize(struct kq *kq, int64_t delay_ms);

/*
 * eng_local - the in-process decision for targets[0..nt), booking under
 * lease_id when all admit. VIA_FALLBACK divides each scope's limits by its
 * fallback divisor.
 */
struct eng_res eng_local(struct admitd *ad, struct target_rt *t, size_t nt, int64_t now,
			 const char *lease_id, enum via via, const struct meter_tokens *reserve,
			 size_t nreserve);

/*
 * eng_fallback - the decision while Redis cannot give one, by the scopes'
 * fail_mode (the strictest of the targets'): fallback decides in process
 * with the divisor, open admits without booking, closed refuses `unavailable`.
 */
struct eng_res eng_fallback(struct admitd *ad, struct waiter *w, const char *lease_id);

/*
 * The fallback's state as the Redis backend keeps it in step (eng_fb_*): the
 * backend reads Redis's replies by the plan, and what they say of a key
 * reaches the in-process limiter through these, never by the backend
 * touching the limiter's state.
 */

/*
 * eng_fb_override - Redis says kq's override runs until `until` (mono ms;
 * 0: there is none) with min_delay_ms and, per rule of cls's plan, amount[k]:
 * the fallback holds the same, so that it goes on should Redis go away.
 */
void eng_fb_override(struct kq *kq, const struct conf_class *cls, int64_t until,
		     int64_t min_delay_ms, const int64_t *amount);

/*
 * eng_fb_left - fold into acc what Redis's counters leave of kq's limits for
 * cls: rules[k] per rule of the plan, the leases in its set, the quota
 * instants in the window and the newest of them, at Redis's now; ad_amt is
 * the adaptive amount the script used (0: none). Counted against the
 * key's override in force, which eng_fb_override has just set.
 */
void eng_fb_left(struct lim_left *acc, struct kq *kq, const struct conf_class *cls, int64_t ad_amt,
		 const struct strat_state *rules, int64_t leases, int64_t quota_used,
		 int64_t quota_newest, int64_t now);

/*
 * eng_fb_spent - what the fallback took of kq's limits at now: its quota
 * instants, and per conf rule (units[0..nrules)) the units used, which a
 * Redis that lost the key is charged.
 */
void eng_fb_spent(struct kq *kq, int64_t now, int64_t *quota_n, int64_t *units);

/* eng_fb_next_at - the fallback's pacing instant for kq (mono ms; 0: none). */
int64_t eng_fb_next_at(struct kq *kq);

/* eng_fb_idle - true when kq's fallback state holds nothing (nothing to write back). */
bool eng_fb_idle(struct kq *kq, int64_t now);

#endif
