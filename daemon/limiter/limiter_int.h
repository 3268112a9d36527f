/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * limiter_int.h - what the limiter's files share and no one else sees.
 *
 * Owns: the quota ring's reader and the purge of expired leases and old
 * quota instants (limiter_state.c), used by the decision (limiter.c) and the
 * "left" accounting (limiter_left.c).
 */

#ifndef ADMITD_LIMITER_INT_H
#define ADMITD_LIMITER_INT_H

#include "limiter.h"

/* The i-th oldest admission instant of the quota ring. */
int64_t lim_quota_at(const struct lim_state *st, size_t i);
/* Drop what time has made irrelevant: expired leases, old quota instants. */
void lim_purge(struct lim_state *st, const struct conf_scope *cs, int64_t now);

#endif
