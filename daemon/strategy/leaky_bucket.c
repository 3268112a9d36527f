/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * leaky_bucket.c - a bucket whose level drains at AMOUNT per WINDOW,
 * continuously, up to a capacity of burst (default AMOUNT); a request that
 * would overflow it is refused, not queued.
 *
 * Owns: the bucket arithmetic, which the token bucket shares (token_bucket.c:
 * a token bucket holding k tokens is this bucket at level capacity - k).
 *
 * State: a = level in milli-units, rounded up; b = drain already accrued
 * but smaller than one milli-unit, in 1/window_ms milli-units (0 <= b <
 * window_ms), so the exact level is a - b/window_ms and no fraction is lost
 * however often the bucket is updated; t = time of the last booking. All
 * zero is an empty bucket (a full token bucket). Since a is the level
 * rounded up and need and room are whole milli-units, "a + need <= room"
 * is exactly "level + need <= room". A booking may overfill the bucket (a
 * post-hoc charge) by at most one window's drain: the level never passes
 * (capacity + AMOUNT) milli-units, so a debt is repaid within a window.
 */

#include "strategy_impl.h"

/*
 * strat_bucket_level - the level at now_ms (*pending: the drain below one
 * milli-unit carried to the next update). Nothing drains while time stands
 * still or runs backwards.
 */
static int64_t strat_bucket_level(const struct strat_state *st, const struct strat_params *p,
				  int64_t now_ms, int64_t *pending)
{
	int64_t rate = p->amount * 1000; /* milli-units drained per window */
	int64_t elapsed = strat_now(st, now_ms) - st->t;
	int64_t drained;

	*pending = 0;
	if (st->a <= 0 || elapsed / p->window_ms > st->a / rate)
		return 0; /* more whole windows passed than the level holds */
	drained = strat_muldiv(elapsed, rate, st->b, p->window_ms, pending);
	if (drained >= st->a) {
		*pending = 0;
		return 0;
	}
	return st->a - drained;
}

int64_t strat_bucket_probe_level(const struct strat_probe *pr, int64_t now_ms)
{
	int64_t pending;

	return strat_bucket_level(pr->st, pr->p, now_ms, &pending);
}

/*
 * The level is 0 once floor((elapsed * rate + b) / window) >= a, that is
 * once elapsed >= ceil((a * window - b) / rate) (b < window); the early
 * return of strat_bucket_level agrees. a * window may pass 2^63.
 */
int64_t strat_bucket_empty_at(const struct strat_probe *pr)
{
	const struct strat_state *st = pr->st;
	unsigned __int128 need, rate = (unsigned __int128)pr->p->amount * 1000;

	if (st->a <= 0)
		return st->t;
	need = (unsigned __int128)st->a * (unsigned __int128)pr->p->window_ms;
	if (need <= (unsigned __int128)(st->b > 0 ? st->b : 0))
		return st->t;
	need -= (unsigned __int128)(st->b > 0 ? st->b : 0);
	return st->t + (int64_t)((need + rate - 1) / rate);
}

bool strat_bucket_fits(const struct strat_probe *pr, int64_t now_ms)
{
	return strat_bucket_probe_level(pr, now_ms) + pr->need <= pr->room;
}

void strat_bucket_book(struct strat_state *st, const struct strat_params *p, int64_t now_ms,
		       int64_t units)
{
	int64_t top = (p->burst + p->amount) * 1000;
	int64_t pending;
	int64_t level = strat_bucket_level(st, p, now_ms, &pending) + units;

	if (level <= 0 || level > top) {
		/* the exact level is clamped to 0 or top: no fraction left */
		level = strat_clamp(level, 0, top);
		pending = 0;
	}
	st->t = strat_now(st, now_ms);
	st->a = level;
	st->b = pending;
}

int64_t strat_bucket_ttl(const struct strat_params *p)
{
	/* from the top level, (burst + amount)/amount windows, rounded up */
	int64_t windows = p->burst / p->amount + 2;

	if (windows > STRAT_WAIT_MAX_MS / p->window_ms)
		return STRAT_WAIT_MAX_MS;
	return windows * p->window_ms;
}

const struct strat_ops strat_leaky_bucket_ops = {
	.name = "leaky-bucket",
	.unit = 1000,
	.has_burst = true,
	.fits = strat_bucket_fits,
	.level = strat_bucket_probe_level,
	.empty_at = strat_bucket_empty_at,
	.book = strat_bucket_book,
	.ttl = strat_bucket_ttl,
};
