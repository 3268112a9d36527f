/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * eng_local.h - the in-process decisions: local mode's, and the fallback's
 * while Redis cannot answer.
 *
 * Owns: a decision over a waiter's targets from each key's in-process state
 * (eng_local: all-or-nothing, shadow scopes counted but not refusing), the
 * scopes' fail_mode when Redis is away (eng_fallback), the fold of several
 * targets' answers into one (eng_merge, which the Redis store uses too),
 * the refusals Redis gave that are answered here without a call
 * (eng_refused_*), and the door through which the Redis store keeps the
 * fallback's state in step with what Redis says (eng_fb_*). What it needs
 * of the fleet (this pod's share of a limit, what to write back when Redis
 * returns) it asks through the hooks it declares (struct eng_fleet, which
 * the store fills), never by name.
 */

#ifndef ADMITD_ENG_LOCAL_H
#define ADMITD_ENG_LOCAL_H

#include "decider.h"
#include "limiter.h"
#include "rt.h"
#include "scope.h"
#include "waitq.h"

struct backend;

/*
 * The fleet as the in-process limiter sees it: rt->fleet, filled by the
 * Redis store (backend_fleet), called with rt->redis, and only when that is
 * not NULL (local mode has no fleet).
 */
struct eng_fleet {
	/* share - this pod's fallback share of cs's limits (LIM_WHOLE: all). */
	struct lim_share (*share)(const struct backend *b, const struct conf_scope *cs);
	/* born_down - nonzero (a generation) when the store was born while
	 * Redis was unreachable, and when (*born_ms). */
	uint32_t (*born_down)(const struct backend *b, int64_t *born_ms);
	/* owe - what the fallback admitted on kq is written to Redis later. */
	void (*owe)(struct backend *b, struct kq *kq, const struct conf_class *cls, int64_t cost,
		    const struct meter_tokens *reserve, size_t nreserve);
	/* owe_pace - kq's pacing in Redis starts at until once it answers. */
	void (*owe_pace)(struct backend *b, struct kq *kq, int64_t until);
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
/* eng_refused_known - is w refused by what Redis said of its key before?
 * Then res says so. */
bool eng_refused_known(struct waiter *w, struct eng_res *res);

/*
 * eng_key_share - this pod's fallback share of kq's limits (backend_share),
 * with the key's turn: its hash, which spreads the remainders of the shares
 * and the owners of serialized keys across the ranked pods.
 */
struct lim_share eng_key_share(struct rt *ad, const struct kq *kq);

/*
 * eng_local - the in-process decision for targets[0..nt), booking under
 * lease_id when all admit. VIA_FALLBACK divides each scope's limits by its
 * fallback divisor.
 */
struct eng_res eng_local(struct rt *ad, struct target_rt *t, size_t nt, int64_t now,
			 const char *lease_id, enum via via, const struct meter_tokens *reserve,
			 size_t nreserve);

/*
 * eng_fallback - the decision while Redis cannot give one, by the scopes'
 * fail_mode (the strictest of the targets'): fallback decides in process
 * with the divisor, open admits without booking, closed refuses `unavailable`.
 */
struct eng_res eng_fallback(struct rt *ad, struct waiter *w, const char *lease_id);

/* eng_inspect_local - the in-process half of eng_inspect (cb runs now). */
void eng_inspect_local(struct kq *kq, enum via via, eng_insp_cb *cb, void *arg);

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
