/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * backend.h - the Redis backend: the scripts over the pool, health, fallback.
 *
 * Owns: the rpool, the Redis state (up/down and since when), the pod's
 * registration heartbeat (for fallback_divisor = auto), and the queue of
 * calls Redis still owes: releases it could not take when they were made,
 * and reconciliations of calls whose outcome is unknown (sent, then the
 * connection died or the timer fired), sent once Redis answers again. In
 * local mode there is no backend (ad->redis is NULL) and these functions
 * are not called, except backend_divisor, which is then 1.
 */

#ifndef ADMITD_BACKEND_H
#define ADMITD_BACKEND_H

#include "decider.h"
#include "eng_local.h"
#include "lease.h"
#include "scope.h"
#include "waitq.h"

struct backend *backend_new(struct rt *ad);
void backend_free(struct backend *b);

/*
 * backend_acquire - send the acquire script(s) for w. Returns false when
 * Redis cannot take the call now (the caller decides in process with the
 * fallback divisor); true when cb will be called exactly once later.
 */
bool backend_acquire(struct backend *b, struct waiter *w, const char *lease_id, eng_cb *cb,
		     void *arg);

/*
 * Units booked ahead. A key this daemon takes fast, whose plan for the
 * class is one token or leaky bucket and nothing else, has the units it is
 * expected to take within redis_book_ahead booked in Redis by the call that
 * admits it (never more than the bucket holds above the class's floor, nor
 * more than the bucket refills in that time). They are handed out here
 * with no call until redis_book_ahead has passed; then what is left goes
 * back to Redis, with the key's next acquire or on its own. A penalty,
 * reset or override of the key through this daemon ends them at once.
 *
 * backend_ahead_take - admit w from its key's units (res says so); false
 * when it has none for w (one target, its class, its cost, in time).
 * backend_ahead_on - does w's plan book ahead (its hot key is then decided
 * one head at a time, each admission booking for the waiters behind it)?
 * backend_ahead_end - kq's units are handed out no more (given back now);
 * backend_ahead_drop - kq forgets them, given back first when give is true
 * (under the conf they were booked under, which a reload keeps until the
 * calls of its time are done).
 */
bool backend_ahead_take(struct backend *b, struct waiter *w, struct eng_res *res);
bool backend_ahead_on(const struct backend *b, const struct waiter *w);
void backend_ahead_end(struct kq *kq);
void backend_ahead_drop(struct kq *kq, bool give);

/*
 * backend_acquire_batch - one acquire.lua call for ws[0..n), the first n
 * waiters of one key (single target, same shape), each under its own lease
 * id; false when Redis cannot take it now (cb is not called).
 */
/*
 * backend_fair - is w a waiter of a fair scope that takes tickets (*now:
 * and is it asked in the form that carries them now, rather than by an
 * acquire that checks for tickets itself)?
 */
bool backend_fair(const struct backend *b, const struct waiter *w, bool *now);
/* backend_fair_leave - w leaves unserved: its ticket in that queue goes (no answer). */
void backend_fair_leave(struct backend *b, const struct waiter *w);
bool backend_acquire_batch(struct backend *b, struct waiter *const *ws, size_t n, eng_batch_cb *cb,
			   void *arg);

/*
 * backend_release - release l (a lease this daemon issued) in Redis and
 * charge its tokens there, through its settlement record: once, even when
 * the call is sent again after an unknown outcome. true when sent now;
 * false when Redis cannot take it now: it is queued (tokens included) and
 * sent once Redis answers again, and the caller charges the tokens in
 * process.
 */
bool backend_release(struct backend *b, struct lease *l, const struct meter_tokens *tokens,
		     size_t ntokens);

/*
 * backend_outcome - send only l's release outcome to Redis, for its adaptive
 * targets (a release with nothing else to settle there). true when sent;
 * false when Redis cannot take it now (nothing is queued: the caller
 * applies the outcome in process).
 */
bool backend_outcome(struct backend *b, struct lease *l);

/* One target of a lease this daemon does not hold (keys are copied). */
struct be_target {
	const struct conf_scope *cs;
	const struct conf_class *cls;
	const char *key;
};

/*
 * backend_release_ref - settle, through its settlement records, the lease
 * nonce (issued elsewhere) on these targets: only a record that binds
 * exactly this handle body (lease_id_body: every target's scope, class and
 * key, and the reservation) and the charges this daemon's conf makes of
 * it is settled, once. true when sent: cb
 * runs later from the loop. false when Redis cannot take it now: nothing
 * is sent or kept (nothing can vouch for the handle), cb is not called.
 */
bool backend_release_ref(struct backend *b, const struct be_target *t, size_t nt, const char *nonce,
			 const struct meter_tokens *tokens, size_t ntokens,
			 const struct meter_tokens *reserve, size_t nreserve, const char *body,
			 eng_settled_cb *cb, void *arg);

/*
 * backend_flush - send what the queue holds that may go now, and give back
 * the units held ahead (shutdown, and a backend a reload replaced: before
 * waiting for backend_idle).
 */
void backend_flush(struct backend *b);

/* backend_idle - nothing in flight and nothing queued that Redis could take. */
bool backend_idle(const struct backend *b);

/* backend_last_due - when the last queued call may be sent (mono ms; 0: none queued). */
int64_t backend_last_due(const struct backend *b);
/* backend_penalize - hold kq in Redis; while Redis is down, once it answers. */
void backend_penalize(struct backend *b, struct kq *kq, int64_t delay_ms);

/*
 * backend_owe_pace - the fallback refused kq as another pod's serialized key
 * (fallback_owner): the pacing in Redis is pushed to `until` when it
 * answers again, before this pod serves from it, so that this pod does not
 * go through Redis on the key while the owner may still hold a lease its
 * fallback granted and has not booked there yet.
 */
void backend_owe_pace(struct backend *b, struct kq *kq, int64_t until);

/*
 * backend_owe - the fallback admitted on kq (class cls, cost, reservation):
 * it is written back to Redis, exactly once, when Redis answers again, and
 * Redis serves this pod's acquires only after it is.
 */
void backend_owe(struct backend *b, struct kq *kq, const struct conf_class *cls, int64_t cost,
		 const struct meter_tokens *reserve, size_t nreserve);

/* backend_inspect - read the key's state in Redis: true when sent (cb later). */
bool backend_inspect(struct backend *b, struct kq *kq, const struct conf_class *cls,
		     eng_insp_cb *cb, void *arg);

/* backend_reset - lift the key's penalty and pacing in Redis: true when sent. */
bool backend_reset(struct backend *b, struct kq *kq, eng_reset_cb *cb, void *arg);

/*
 * backend_override - set the key's override in Redis (eng_override's
 * arguments): true when sent (cb later, as backend_reset's).
 */
bool backend_override(struct backend *b, struct kq *kq, int64_t ttl_ms, int64_t min_delay_ms,
		      const int64_t *amount, eng_reset_cb *cb, void *arg);

/* What backend_override_tenant's callback is told: set, Redis not told, or refused full. */
enum backend_tovr { BACKEND_TOVR_SET, BACKEND_TOVR_UNTOLD, BACKEND_TOVR_FULL };
typedef void backend_tovr_cb(void *arg, enum backend_tovr res);
/*
 * backend_override_tenant - set tenant's weight on the key in Redis for
 * ttl_ms (override.lua's tenant form), unless max other tenants have one
 * in force there: true when sent (cb later).
 */
bool backend_override_tenant(struct backend *b, struct kq *kq, const char *tenant, int weight,
			     int64_t ttl_ms, int max, backend_tovr_cb *cb, void *arg);

/*
 * backend_share - this pod's fallback share of cs's limits now (LIM_WHOLE
 * when b is NULL): the divisor, the rank the last heartbeat gave and the
 * pods it ranked, and while Redis is down, since when.
 */
struct lim_share backend_share(const struct backend *b, const struct conf_scope *cs);

/*
 * backend_turn_delay - how long after a window's turn (turn_mono, mono ms)
 * this pod's refused head asks again, for a window of window_ms whose units
 * all come back at that one instant on every pod (fixed and session
 * windows). Every pod's head sleeps until the same turn, and the first call
 * there takes what its batch holds, up to the whole window; which pod is
 * first would be decided by timer and scheduling noise, which repeats from
 * window to window, so one pod could lose every turn. Instead the pods seen
 * alive by the last heartbeat ask in their rank's slot, the order rotating
 * by one at each turn: each pod that keeps asking asks first after one turn
 * in every N (N the pods seen). A slot is a quarter of the window divided
 * among the pods, at most RB_TURN_SLOT_MS. 0 when b is NULL, down, alone, or
 * not ranked yet (as before: at the turn).
 */
int64_t backend_turn_delay(const struct backend *b, int64_t turn_mono, int64_t window_ms);

/*
 * backend_born_down - a backend born while Redis was unreachable: made (at
 * daemon start, or by a reload that made a new backend) and not yet once
 * connected. Then its generation (nonzero, one per backend made) and
 * *born_ms, when it was made (mono ms); else 0 (it has been up: it saw what
 * this pod admitted through Redis since).
 */
uint32_t backend_born_down(const struct backend *b, int64_t *born_ms);

/*
 * backend_status - add the backend's counters to a status reply: a "redis"
 * object with the pods seen alive and the failed calls by operation (the
 * failures an error hook would see, as counters; each is also logged).
 */
void backend_status(const struct backend *b, struct preply *r);

/*
 * The operations the backend counts, for metrics: backend_nops() of them,
 * named by backend_op_name (NULL past the end). backend_op_errors is
 * backend_status's "errors"; backend_op_calls the calls the pool took for
 * the operation (an acquire of n targets is n calls, a batch one). Both
 * are 0 when b is NULL (local mode).
 */
size_t backend_nops(void);
const char *backend_op_name(size_t op);
uint64_t backend_op_errors(const struct backend *b, size_t op);
uint64_t backend_op_calls(const struct backend *b, size_t op);

/* backend_up - true while Redis takes calls. */
bool backend_up(const struct backend *b);

/* backend_status - "redis" or "fallback", since (mono ms). */
const char *backend_state(const struct backend *b, int64_t *since_ms);

/* backend_fleet - the store as the in-process limiter's fleet (rt->fleet). */
extern const struct eng_fleet backend_fleet;

#endif
