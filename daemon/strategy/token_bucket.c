/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * token_bucket.c - the default strategy: a bucket of burst tokens (default
 * AMOUNT) that refills AMOUNT per WINDOW, continuously; a request takes
 * cost tokens if that many are there (exactly that many is enough).
 *
 * Owns: only the kind's table entry. A token bucket holding k tokens is the
 * leaky bucket (leaky_bucket.c) at level capacity - k: refilling tokens is
 * draining the level, taking tokens is filling it, "k >= cost + floor" is
 * "level + cost <= capacity - floor". So the state is the milli-tokens
 * spent (a, rounded up), the refill below one milli-token already accrued
 * (b, in 1/window_ms milli-tokens) and the time of the last booking (t);
 * all zero is a full bucket, and a post-hoc overdraw may leave it down to
 * -AMOUNT tokens (a debt refilled within one window).
 */

#include "strategy_impl.h"

const struct strat_ops strat_token_bucket_ops = {
	.name = "token-bucket",
	.unit = 1000,
	.has_burst = true,
	.fits = strat_bucket_fits,
	.level = strat_bucket_probe_level,
	.empty_at = strat_bucket_empty_at,
	.book = strat_bucket_book,
	.ttl = strat_bucket_ttl,
};
