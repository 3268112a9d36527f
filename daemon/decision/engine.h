/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * engine.h - where decisions are made: the in-process limiter or Redis.
 *
 * Owns: the choice of limiter for each operation (local mode: always the
 * in-process limiter, eng_local.h; Redis mode: the Redis store, backend.h,
 * and the in-process fallback by the scope's fail_mode when Redis cannot
 * answer), and the queue's decider (rt->dec) that these make up. Waiters,
 * leases and connections are the callers'.
 */

#ifndef ADMITD_ENGINE_H
#define ADMITD_ENGINE_H

#include "decider.h"
#include "eng_local.h"
#include "lease.h"
#include "lease_id.h"
#include "scope.h"
#include "waitq.h"

/*
 * eng_acquire - decide for the waiter's targets, booking under lease_id when
 * admitted. cb is called exactly once: before eng_acquire returns (in-process)
 * or later from the loop (Redis). The waiter must stay alive until then.
 */
void eng_acquire(struct rt *ad, struct waiter *w, const char *lease_id, eng_cb *cb, void *arg);

/*
 * eng_can_batch - may w, the head of its key, be decided together with the
 * compatible waiters behind it (Redis up, one target, a scope without
 * pacing: every limit counts n admissions at one instant exactly)?
 */
bool eng_can_batch(struct rt *ad, const struct waiter *w);

/*
 * eng_acquire_batch - decide ws[0..n) of one key, in FIFO order, in one call:
 * cb gets one result each (admitted ones first, then at most one refusal,
 * then undecided ones), exactly once, later from the loop or at once.
 */
void eng_acquire_batch(struct rt *ad, struct waiter *const *ws, size_t n, eng_batch_cb *cb,
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
 * eng_mirror - a lease granted through Redis is also entered in the
 * in-process lease set of each key that tracks leases, so that the
 * fallback counts what this daemon holds whichever backend booked it.
 */
void eng_mirror(struct lease *l);

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
void eng_release_ref(struct rt *ad, const struct lease_ref *ref, const struct meter_tokens *tokens,
		     size_t ntokens, eng_settled_cb *cb, void *arg);

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

/* eng_decider - the engine as the queue's decider (rt->dec). */
extern const struct decider eng_decider;

#endif
