/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * metrics.h - the Prometheus metrics: the wait histogram's buckets and the
 * text rendering of every metric.
 *
 * Owns: the list of metric families (name, type, help) and the bucket
 * bounds of admitd_acquire_wait_seconds. Owns no counter: each is a field
 * of the struct that already counts it (struct scope_rt, struct admitd,
 * the backend), read when /metrics is scraped. The hot path pays only the
 * increments and metrics_wait_observe's compares.
 */

#ifndef ADMITD_METRICS_H
#define ADMITD_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct admitd;
struct evbuffer;

/* Upper bounds (ms, inclusive) of the wait histogram; one more bucket above. */
#define METRICS_WAIT_NBOUNDS  15
#define METRICS_WAIT_NBUCKETS (METRICS_WAIT_NBOUNDS + 1)
extern const int64_t metrics_wait_bounds_ms[METRICS_WAIT_NBOUNDS];

/*
 * metrics_wait_observe - count one admission's wait in hist (per bucket,
 * not cumulative: hist[i] counts waits in (bound[i-1], bound[i]], the last
 * one waits above every bound). Waits are whole ms, so bound 0 holds the
 * admissions that did not wait.
 */
static inline void metrics_wait_observe(uint64_t *hist, int64_t waited_ms)
{
	size_t i = 0;

	while (i < METRICS_WAIT_NBOUNDS && waited_ms > metrics_wait_bounds_ms[i])
		i++;
	hist[i]++;
}

/*
 * metrics_render - append the Prometheus text format (0.0.4) of every
 * metric of ad to out: HELP and TYPE lines, then the samples. Reads
 * counters only, changes nothing. false when out could not grow (what was
 * appended is then incomplete).
 */
bool metrics_render(const struct admitd *ad, struct evbuffer *out);

#endif
