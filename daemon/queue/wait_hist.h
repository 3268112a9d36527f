/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * wait_hist.h - the buckets of the wait histogram each scope keeps (its
 * admissions' waited_ms, and each class's: class_wait.h), which `status`
 * and the metrics show. The bounds are defined in class_wait.c;
 * waitq_answer.c observes the waits.
 */

#ifndef ADMITD_WAIT_HIST_H
#define ADMITD_WAIT_HIST_H

#include <stddef.h>
#include <stdint.h>

/* Upper bounds (ms, inclusive) of the wait histogram; one more bucket above. */
#define WAIT_HIST_NBOUNDS  15
#define WAIT_HIST_NBUCKETS (WAIT_HIST_NBOUNDS + 1)
extern const int64_t wait_hist_bounds_ms[WAIT_HIST_NBOUNDS];

/*
 * wait_hist_bucket - the bucket of a wait of waited_ms;
 * wait_hist_observe - count one admission's wait in hist (per bucket,
 * not cumulative: hist[i] counts waits in (bound[i-1], bound[i]], the last
 * one waits above every bound). Waits are whole ms, so bound 0 holds the
 * admissions that did not wait.
 */
static inline size_t wait_hist_bucket(int64_t waited_ms)
{
	size_t i = 0;

	while (i < WAIT_HIST_NBOUNDS && waited_ms > wait_hist_bounds_ms[i])
		i++;
	return i;
}

static inline void wait_hist_observe(uint64_t *hist, int64_t waited_ms)
{
	hist[wait_hist_bucket(waited_ms)]++;
}

#endif
