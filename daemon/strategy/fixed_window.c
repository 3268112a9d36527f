/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * fixed_window.c - AMOUNT units per window, the counter reset at every
 * multiple of WINDOW (floor(now / WINDOW) * WINDOW, on the epoch).
 *
 * State: a = units counted in the window that starts at t (a multiple of
 * window_ms); b unused (0). All zero is an empty counter. A booking may
 * overdraw the window; the overdraw is forgotten at its end.
 */

#include "strategy_impl.h"

/* fw_count - the units counted in the window now_ms falls in (*start). */
static int64_t fw_count(const struct strat_state *st, const struct strat_params *p, int64_t now_ms,
			int64_t *start)
{
	int64_t now = strat_now(st, now_ms);

	*start = now / p->window_ms * p->window_ms;
	return *start == st->t ? st->a : 0;
}

static int64_t fw_level(const struct strat_probe *pr, int64_t now_ms)
{
	int64_t start;

	return fw_count(pr->st, pr->p, now_ms, &start);
}

/* A window's count is 0 from the next window on. */
static int64_t fw_empty_at(const struct strat_probe *pr)
{
	return pr->st->a <= 0 ? pr->st->t : pr->st->t + pr->p->window_ms;
}

static bool fw_fits(const struct strat_probe *pr, int64_t now_ms)
{
	return fw_level(pr, now_ms) + pr->need <= pr->room;
}

static void fw_book(struct strat_state *st, const struct strat_params *p, int64_t now_ms,
		    int64_t units)
{
	int64_t start;
	int64_t count = fw_count(st, p, now_ms, &start) + units;

	st->a = strat_clamp(count, 0, STRAT_UNITS_MAX);
	st->b = 0;
	st->t = start;
}

static int64_t fw_ttl(const struct strat_params *p)
{
	return p->window_ms;
}

const struct strat_ops strat_fixed_window_ops = {
	.name = "fixed-window",
	.unit = 1,
	.has_burst = false,
	.fits = fw_fits,
	.level = fw_level,
	.empty_at = fw_empty_at,
	.book = fw_book,
	.ttl = fw_ttl,
};
