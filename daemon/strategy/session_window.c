/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * session_window.c - AMOUNT units per window, where a window (a session)
 * opens at the first booking after the previous one ended and ends WINDOW
 * later; nothing resets in the background, idle time opens no window.
 *
 * State: a = units counted in the session; b = 1 while a session has been
 * opened (0: none yet, the all-zero fresh state); t = when it opened. The
 * session is over once now >= t + WINDOW. Only a positive booking opens a
 * session (a refund against no session is nothing to undo).
 */

#include "strategy_impl.h"

/* sess_open - whether a session is running at now_ms. */
static bool sess_open(const struct strat_state *st, const struct strat_params *p, int64_t now_ms)
{
	return st->b != 0 && strat_now(st, now_ms) - st->t < p->window_ms;
}

static int64_t sess_level(const struct strat_probe *pr, int64_t now_ms)
{
	return sess_open(pr->st, pr->p, now_ms) ? pr->st->a : 0;
}

static bool sess_fits(const struct strat_probe *pr, int64_t now_ms)
{
	return sess_level(pr, now_ms) + pr->need <= pr->room;
}

static void sess_book(struct strat_state *st, const struct strat_params *p, int64_t now_ms,
		      int64_t units)
{
	if (!sess_open(st, p, now_ms)) {
		if (units <= 0) {
			st->a = st->b = st->t = 0;
			return;
		}
		st->a = 0;
		st->b = 1;
		st->t = strat_now(st, now_ms);
	}
	st->a = strat_clamp(st->a + units, 0, STRAT_UNITS_MAX);
}

static int64_t sess_ttl(const struct strat_params *p)
{
	return p->window_ms;
}

const struct strat_ops strat_session_window_ops = {
	.name = "session-window",
	.unit = 1,
	.has_burst = false,
	.fits = sess_fits,
	.level = sess_level,
	.book = sess_book,
	.ttl = sess_ttl,
};
