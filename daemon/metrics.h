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
 * increments and wait_hist_observe's compares.
 */

#ifndef ADMITD_METRICS_H
#define ADMITD_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct admitd;
struct evbuffer;

/*
 * metrics_render - append the Prometheus text format (0.0.4) of every
 * metric of ad to out: HELP and TYPE lines, then the samples. Reads
 * counters only, changes nothing. false when out could not grow (what was
 * appended is then incomplete).
 */
bool metrics_render(const struct admitd *ad, struct evbuffer *out);

#endif
