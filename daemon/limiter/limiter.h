/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * limiter.h - one scope's limits for one key, decided in process.
 *
 * Owns: struct lim_state (pacing, penalty, quota instants, leases in
 * flight, one strategy counter per rule) and the arithmetic that checks every
 * limit of a scope together and books all of them or none. Pure: time is an
 * argument, nothing here logs or touches the loop. scripts/acquire.lua,
 * release.lua and penalize.lua are the same decisions over Redis keys; the
 * in-process backend and the Redis fallback both run this code.
 *
 * `sh` is this pod's fallback share (LIM_WHOLE in local mode and on Redis):
 * its divisor D and, when the pods' heartbeats ranked them, its rank. A
 * limit L becomes L / D rounded down, plus one for the first L mod D pods
 * by rank, so that the shares of D pods add up to L exactly; without a
 * rank (no heartbeat seen, a count from a registry still filling, or a
 * divisor that is not a whole number) it is rounded down. A share may be
 * 0: that pod then refuses with a wait, never with "exceeds". Which
 * pods take the remainders turns with the key (`turn`,
 * its hash), so that one pod does not take them for every key. min_delay
 * is multiplied by D, except a serialized key's (one at a time): one pod,
 * its owner, serves it in fallback (lim_owner), at the whole pace, and the
 * others refuse with a wait (`fallback_owner`).
 */

#ifndef ADMITD_LIMITER_H
#define ADMITD_LIMITER_H

#include "conf.h"
#include "conf_plan.h"
#include "lease_id.h"
#include "strategy.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct lim_ovr;

struct lim_share {
	double div;   /* 1: the whole limit */
	int64_t rank; /* 0-based among the pods alive; -1 unknown */
	/* adaptive scopes: requests rules are scaled by ad_amt / ad_ceil before
	 * the division (lim_key_share fills them from the key's state); 0: not */
	int64_t ad_amt, ad_ceil;
	/* the key's override in force (NULL: none), and its scope's override_milli */
	const struct lim_ovr *ov;
	int64_t ov_milli;
	/* the key's place in the rotation of remainders and owners (its hash,
	 * >= 0; eng_key_share), and the pods the heartbeat ranked (0: unknown) */
	int64_t turn, pods;
	/* deciding in fallback: since when Redis has not answered (mono ms);
	 * 0: not in fallback */
	int64_t out_since;
};
#define LIM_WHOLE ((struct lim_share){ .div = 1.0, .rank = -1 })

/* lim_share_of - this pod's share of a limit v (see above). */
int64_t lim_share_of(int64_t v, struct lim_share sh);

/*
 * lim_owner - does this pod serve a serialized key under sh? Always with the
 * whole limit; in fallback, the one ranked pod whose rank is the key's turn
 * modulo the pods ranked; never without a rank (a pod born in the outage
 * that is not told it is alone: fallback_pods above 1).
 */
bool lim_owner(struct lim_share sh);

struct lim_lease {
	char id[LEASE_NONCE_LEN + 1];
	int64_t deadline;
};

/*
 * A key's override (the override op): its own min_delay and rule amounts,
 * in force until `until`. The scope's override_max bounds how far they
 * loosen, when they are used (lim_ovr_amount, lim_ovr_delay): a reload that
 * lowers it bounds the overrides already set. scripts/acquire.lua applies
 * the same arithmetic to the fields the override op left in the key's
 * adaptive hash (ou, od, o<rule index>).
 */
struct lim_ovr {
	int64_t until;	      /* on the deciding limiter's clock */
	int64_t min_delay_ms; /* -1: the conf's */
	uint32_t nrules;
	int64_t amount[]; /* by conf rule index; 0: the conf's */
};

/* lim_ovr_cap - the loosest amount an override may give a rule of amount v. */
int64_t lim_ovr_cap(int64_t v, int64_t milli);
/* lim_ovr_delay_floor - the shortest min_delay an override may give a conf's d. */
int64_t lim_ovr_delay_floor(int64_t d, int64_t milli);
/* lim_ovr_amount - the amount in force: o (0: none) bounded by the cap, at least 1. */
int64_t lim_ovr_amount(int64_t v, int64_t o, int64_t milli);
/* lim_ovr_burst - a burst b of a rule of amount v, when an override makes the amount a. */
int64_t lim_ovr_burst(int64_t b, int64_t a, int64_t v);
/* lim_ovr_delay - the min_delay in force: o (-1: none) no shorter than the floor. */
int64_t lim_ovr_delay(int64_t d, int64_t o, int64_t milli);

struct lim_state {
	int64_t next_at;	  /* min_delay: no admission before this */
	int64_t penalty_until;	  /* penalize: no admission before this */
	int64_t last_ms;	  /* last time anything was booked */
	int64_t *quota;		  /* admission instants, ring, oldest at head */
	struct lim_lease *leases; /* in flight, when the scope tracks them */
	uint32_t quota_head, quota_n, quota_cap;
	uint32_t nleases, leases_cap;
	struct adapt_state ad; /* adaptive scopes: the key's learned amount */
	struct lim_ovr *ov;    /* the key's override (owned); NULL: none */
	uint32_t nrules;
	uint32_t spent_gen; /* the backend born in an outage that lim_spend_share spent it for */
	struct strat_state rules[]; /* one per conf rule, same index */
};

struct lim_req {
	const struct conf_class *cls; /* NULL: unnamed rules only */
	int64_t cost;		      /* requests meter units per admission */
	int64_t count;		      /* admissions asked for at once (>= 1) */
	const struct meter_tokens
	    *reserve; /* token meters: booked at acquire, settled at release */
	size_t nreserve;
};

struct lim_decision {
	bool admitted;
	int64_t retry_after_ms; /* refusals: the wait after which it may pass; -1 never */
	const char *rule;	/* refusals: what decided, conf-owned or static text */
	bool slot;		/* ... and it waits for a lease slot (a release may end it) */
	long which;		/* ... the PLAN_WHICH_ code or rule index */
	int64_t limit;		/* never-passing refusals: the capacity the request exceeds */
	bool share_short;	/* a fallback share too small for it refused (a wait) */
};

/*
 * lim_which_limit - the capacity of the limit `which` for cls under share sh
 * (never-passing refusals); conf_plan_which_limit is the whole one.
 */
int64_t lim_which_limit(const struct conf_scope *cs, const struct conf_class *cls, long which,
			struct lim_share sh);

/*
 * lim_wait_longer - is wait a longer than wait b (-1: never passes, the
 * longest)? Equal waits are not longer: among refusals the first named keeps
 * its place.
 */
static inline bool lim_wait_longer(int64_t a, int64_t b)
{
	return b != -1 && (a == -1 || a > b);
}

struct lim_state *lim_state_new(const struct conf_scope *cs);
void lim_state_free(struct lim_state *st);
/* In place (a key's state lives in its table entry): size, init, and
 * lim_state_clear, which frees what the state holds but not the state. */
size_t lim_state_size(const struct conf_scope *cs);
void lim_state_init(struct lim_state *st, const struct conf_scope *cs);
void lim_state_clear(struct lim_state *st);

/*
 * lim_rule_same - do two rules limit alike: the same meter (and meter key),
 * strategy, amount, window and burst? Names, text and lines do not count
 * (`600/1m` and `600/60s` are the same rule).
 */
bool lim_rule_same(const struct conf_rule *a, const struct conf_rule *b);

/*
 * lim_state_carry - a reload: dst (fresh, lim_state_init'ed for ncs) takes
 * over what src held under ocs, so that a reload refills nothing:
 * - an unchanged rule (lim_rule_same), wherever it moved, keeps its
 *   counter (the n-th of several alike takes the n-th old one alike);
 * - a changed rule keeps the counter of the rule it replaced at its
 *   position when that one counts the same way (meter, meter key and
 *   strategy) and no unchanged rule took it: the usage goes on under the
 *   new amount, window or burst, as in Redis, where a rule's state lives
 *   under its position;
 * - any other rule starts as a new key's would;
 * - the quota instants stay when quota and its window are the same, the
 *   pacing instant when min_delay and cluster_concurrency are;
 * - the leases in flight and a penalty are facts, not limits: always kept.
 * Arrays are moved, not copied: src keeps only what was not taken
 * (lim_state_clear it).
 */
void lim_state_carry(struct lim_state *dst, const struct conf_scope *ncs, struct lim_state *src,
		     const struct conf_scope *ocs);

/* lim_tracks_leases - true when the scope keeps the set of leases in flight. */
bool lim_tracks_leases(const struct conf_scope *cs);

/*
 * lim_release_books - true when releasing a lease of class cls changes the
 * state: a lease set, completion-anchored min_delay, or a token meter that
 * applies to cls. When false a release costs no backend call.
 */
bool lim_release_books(const struct conf_scope *cs, const struct conf_class *cls);

/*
 * lim_meters_tokens - does a token rule that applies to cls meter tokens
 * reported as `name` (NULL: any name)? A release (or a reservation) may
 * name only meters that some target of its lease counts.
 */
bool lim_meters_tokens(const struct conf_scope *cs, const struct conf_class *cls, const char *name);

/* lim_serialized - min_delay > 0 without cluster_concurrency: one at a time. */
bool lim_serialized(const struct conf_scope *cs);

/*
 * lim_check - would rq be admitted now? Checks every limit of the scope
 * that applies to rq->cls; when several refuse, the decision names the one
 * with the longest wait (ties: the first in conf order). Drops leases whose
 * deadline passed and quota instants out of the window (not observable
 * otherwise), books nothing.
 */
struct lim_decision lim_check(struct lim_state *st, const struct conf_scope *cs,
			      struct lim_share sh, int64_t now, const struct lim_req *rq);

/*
 * lim_book - book an admission lim_check allowed: rq->count leases named
 * lease_ids[0..count) (when the scope tracks leases), quota instants,
 * request meters, send-anchored pacing. Returns false only on allocation
 * failure, having booked nothing.
 */
bool lim_book(struct lim_state *st, const struct conf_scope *cs, struct lim_share sh, int64_t now,
	      const struct lim_req *rq, const char *const *lease_ids);

/*
 * lim_release - the lease `lease_id` (of class cls) is done: drop it from
 * the leases in flight, start completion-anchored min_delay (serialized, or
 * cluster_concurrency 1; only if the lease was still in flight: an expired
 * lease pushes nothing), and charge token meters from tokens[0..ntokens).
 * Returns true when the lease was still in flight.
 */
bool lim_release(struct lim_state *st, const struct conf_scope *cs, struct lim_share sh,
		 int64_t now, const char *lease_id, const struct conf_class *cls,
		 const struct meter_tokens *tokens, size_t ntokens);

/*
 * lim_lease_add - enter a lease booked elsewhere (through Redis) in the set
 * of leases in flight, until deadline, so that the in-process limits count
 * it; a lease already there is left as is. false only on allocation failure.
 */
bool lim_lease_add(struct lim_state *st, const char *lease_id, int64_t deadline);

/*
 * lim_release_settle - lim_release for a lease that reserved tokens at
 * acquire: each token rule is charged what was reported minus what was
 * reserved under the names reported (a refund when less was used); a name
 * reserved but not reported keeps its reservation charged.
 */
bool lim_release_settle(struct lim_state *st, const struct conf_scope *cs, struct lim_share sh,
			int64_t now, const char *lease_id, const struct conf_class *cls,
			const struct meter_tokens *tokens, size_t ntokens,
			const struct meter_tokens *reserve, size_t nreserve);

/*
 * lim_spend_share - take the whole of this pod's share sh at `at`, as if it
 * had been admitted then: the quota window and every rate rule's counter
 * are spent (a bucket empty, a window full) and send-spaced pacing starts.
 * What a fallback born while Redis was unreachable starts from: it cannot
 * know what it admitted before (a restarted pod), so it admits only what
 * its share earns from `at` on. Leases are not made up (see docs/outages.md).
 */
void lim_spend_share(struct lim_state *st, const struct conf_scope *cs, struct lim_share sh,
		     int64_t at);

/* lim_penalize - hold the key until now + delay_ms; never shortens a hold. */
void lim_penalize(struct lim_state *st, int64_t now, int64_t delay_ms);

/*
 * lim_view - what the state holds now, for inspect: leases in flight, quota
 * instants in the window and the oldest of them (0 when none). Drops what
 * time has made irrelevant, as lim_check does.
 */
void lim_view(struct lim_state *st, const struct conf_scope *cs, int64_t now, int64_t *leases,
	      int64_t *quota_used, int64_t *quota_oldest);

/*
 * lim_spent - what the state has taken at now: the quota instants in the
 * window, and per rule (conf index, cs->nrules of them) the units used of
 * the whole limit (strat_used; 0 for concurrency). What a Redis that lost
 * the key must be charged to know this pod's part of the current windows.
 */
void lim_spent(struct lim_state *st, const struct conf_scope *cs, int64_t now, int64_t *quota_n,
	       int64_t *units);

/*
 * lim_override - the key's override becomes (until, min_delay_ms, amount[0..
 * cs->nrules)), replacing any it had; false only on allocation failure
 * (the old one is kept).
 */
bool lim_override(struct lim_state *st, const struct conf_scope *cs, int64_t until,
		  int64_t min_delay_ms, const int64_t *amount);

/* lim_override_lift - st has no override any more. */
void lim_override_lift(struct lim_state *st);

/* lim_ovr_in_force - st's override at now, NULL when none (or it has ended). */
const struct lim_ovr *lim_ovr_in_force(const struct lim_state *st, const struct conf_scope *cs,
				       int64_t now);

/* lim_reset - lift the key's penalty, pacing and override (reset). */
void lim_reset(struct lim_state *st);

/* lim_idle - true when the state is indistinguishable from a fresh one. */
bool lim_idle(struct lim_state *st, const struct conf_scope *cs, int64_t now);

/*
 * What the tightest limit of some targets still allows: the one whose
 * remaining is the smallest part of its capacity (ties: the first seen).
 * remaining is in its meter's units (requests or tokens; leases for a cap);
 * reset_ms is when it is full again (it would admit its whole capacity if
 * nothing more were taken): a fixed or session window's end; a sliding
 * window's weighted count reaching 0 (the current window's count weighs
 * until the end of the next window, the previous one's until the end of
 * this one); a bucket's refill or drain to full; the newest quota
 * instant's leaving the window; for a cap, the lease_ttl that bounds the
 * leases it holds (a release frees a slot sooner).
 *
 * m: the same per meter (a reply's "limits"), each meter's tightest being
 * its limit with the fewest units left (ties: the sooner reset, then the
 * first seen). Names point into the conf the limits were read from (or are
 * static): a reload that may free it drops them (nm = 0).
 */
#define LIM_LEFT_METERS 6	/* meters told apart; a request's others are left out */
#define LIM_RULE_QUOTA	"quota" /* the quota, as a requests limit */

struct lim_meter_left {
	enum conf_meter meter;
	const char *key;  /* tokens.NAME: NAME; NULL for the other meters */
	const char *rule; /* its rule's name, or a setting's; NULL: an unnamed rule */
	long idx;	  /* ... whose index in its scope names it */
	int64_t limit, remaining, reset_ms;
};

struct lim_left {
	bool has; /* some limit counts: rules, quota or a cap */
	int64_t remaining, reset_ms, capacity;
	size_t nm;
	struct lim_meter_left m[LIM_LEFT_METERS];
};

/* lim_units_left - the most units one request could take from rule counter st now (0..cap). */
int64_t lim_units_left(const struct strat_state *st, const struct strat_params *p, int64_t now,
		       int64_t cap, int64_t floor);

/*
 * lim_left_add - fold one limit x (x->remaining of x->limit, full in
 * x->reset_ms) into acc, keeping the tightest overall and of x's meter.
 */
void lim_left_add(struct lim_left *acc, const struct lim_meter_left *x);

/* lim_left_merge - acc keeps the tightest of itself and x, overall and per meter. */
void lim_left_merge(struct lim_left *acc, const struct lim_left *x);

/* lim_left_age - l as it is elapsed_ms later: every reset_ms that much nearer. */
void lim_left_age(struct lim_left *l, int64_t elapsed_ms);

/* lim_meter_name - the name a reply gives m's meter ("tokens.NAME" etc.) in buf. */
const char *lim_meter_name(const struct lim_meter_left *m, char *buf, size_t size);

/*
 * lim_left_scope - fold every limit of (cs, cls) into acc, given its counters
 * (rules: by conf rule index, or with by_plan in the order of the class's
 * plan; NULL: all fresh), the leases in its lease set, the quota instants in
 * the window and the newest of them, at now.
 */
void lim_left_scope(struct lim_left *acc, const struct conf_scope *cs, const struct conf_class *cls,
		    struct lim_share sh, const struct strat_state *rules, bool by_plan,
		    int64_t leases, int64_t quota_used, int64_t quota_newest, int64_t now);

/* lim_left_state - lim_left_scope over the in-process state st. */
void lim_left_state(struct lim_left *acc, struct lim_state *st, const struct conf_scope *cs,
		    const struct conf_class *cls, struct lim_share sh, int64_t now);

/*
 * lim_key_share - sh with what is the key's own at now: its adaptive
 * amount, when the scope is adaptive, and its override in force (every
 * check and booking of st goes through it). In process as in Redis, a
 * rule's amount is the override's, then scaled by the adaptive amount
 * (requests rules), then divided.
 */
struct lim_share lim_key_share(const struct lim_state *st, const struct conf_scope *cs,
			       struct lim_share sh, int64_t now);

/* lim_min_delay - min_delay with the override in sh and the divisor applied. */
int64_t lim_min_delay(const struct conf_scope *cs, struct lim_share sh);

/*
 * lim_rule_params - a rule's strategy params with the override, the
 * adaptive amount and the divisor applied (the burst follows an overridden
 * amount in proportion).
 */
struct strat_params lim_rule_params(const struct conf_rule *r, struct lim_share sh);

#endif
