/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * sliding_window.c - AMOUNT units per sliding WINDOW, estimated from two
 * fixed windows: count = prev * (WINDOW - elapsed) / WINDOW + cur, where
 * elapsed is how far now is into the current window, so the previous
 * window weighs by the part of it the sliding window still covers.
 *
 * State: a = units in the current fixed window, which starts at t (a
 * multiple of window_ms); b = units in the one before it. All zero is an
 * empty counter. The weighted count is a fraction, compared exactly:
 * "count + cost <= room" holds iff it holds with the weighted part rounded
 * up (cost and room are whole units).
 */

#include "strategy_impl.h"

/*
 * slide_count - the count at now_ms, its weighted part rounded up; *start,
 * *cur and *prev: the current window and both counts rolled to now_ms.
 */
static int64_t slide_count(const struct strat_state *st, const struct strat_params *p,
			   int64_t now_ms, int64_t *start, int64_t *cur, int64_t *prev)
{
	int64_t w = p->window_ms;
	int64_t now = strat_now(st, now_ms);
	int64_t weighted, rem;

	*start = now / w * w;
	*cur = st->a;
	*prev = st->b;
	if (*start != st->t) { /* rolled: one window on, or more */
		*prev = *start - st->t == w ? st->a : 0;
		*cur = 0;
	}
	weighted = strat_muldiv(*prev, w - (now - *start), 0, w, &rem);
	if (rem > 0)
		weighted++;
	return *cur + weighted;
}

static bool slide_fits(const struct strat_probe *pr, int64_t now_ms)
{
	int64_t start, cur, prev;
	int64_t count = slide_count(pr->st, pr->p, now_ms, &start, &cur, &prev);

	return count + pr->need <= pr->room;
}

static void slide_book(struct strat_state *st, const struct strat_params *p, int64_t now_ms,
		       int64_t units)
{
	int64_t start, cur, prev;

	slide_count(st, p, now_ms, &start, &cur, &prev);
	st->a = strat_clamp(cur + units, 0, STRAT_UNITS_MAX);
	st->b = prev;
	st->t = start;
}

static int64_t slide_ttl(const struct strat_params *p)
{
	return 2 * p->window_ms;
}

const struct strat_ops strat_sliding_window_ops = {
	.name = "sliding-window",
	.unit = 1,
	.has_burst = false,
	.fits = slide_fits,
	.book = slide_book,
	.ttl = slide_ttl,
};
