/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * backend.h - the Redis backend: the scripts over the pool, health, fallback.
 *
 * Owns: the rpool, the Redis state (up/down and since when), the pod's
 * registration heartbeat (for fallback_divisor = auto). In local mode there
 * is no backend (ad->redis is NULL) and these functions are not called,
 * except backend_divisor, which is then 1.
 */

#ifndef ADMITD_BACKEND_H
#define ADMITD_BACKEND_H

#include "engine.h"

struct backend *backend_new(struct admitd *ad);
void backend_free(struct backend *b);

/*
 * backend_acquire - send the acquire script(s) for w. Returns false when
 * Redis cannot take the call now (the caller decides in process with the
 * fallback divisor); true when cb will be called exactly once later.
 */
bool backend_acquire(struct backend *b, struct waiter *w, const char *lease_id, eng_cb *cb,
		     void *arg);
void backend_release(struct backend *b, struct lease *l, const struct lim_tokens *tokens,
		     size_t ntokens);
void backend_penalize(struct backend *b, struct kq *kq, int64_t delay_ms);

/* backend_divisor - the fallback divisor for cs now (1 when b is NULL). */
double backend_divisor(const struct backend *b, const struct conf_scope *cs);

/*
 * backend_status - add the backend's counters to a status reply: a "redis"
 * object with the pods seen alive and the failed calls by operation (the
 * seeds' OnError hook, as counters; each failure is also logged).
 */
void backend_status(const struct backend *b, struct preply *r);

/* backend_up - true while Redis takes calls. */
bool backend_up(const struct backend *b);

/* backend_status - "redis" or "fallback", since (mono ms). */
const char *backend_state(const struct backend *b, int64_t *since_ms);

#endif
