/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * metrics.c - Prometheus text rendering of admitd's counters.
 *
 * Owns: the metric families (METRICS_FAMILIES below: name, type, help and
 * the function writing its samples) and the wait histogram's bounds. Every
 * value is read, at scrape time, from the struct that counts it: outcomes,
 * leases and waiters from struct scope_rt, connections and reloads from
 * struct admitd, calls and errors from the backend. Nothing is copied or
 * counted twice, so a scrape costs the hot path nothing. Labels carry
 * scope names only (never keys): conf names are [A-Za-z0-9_.-], which need
 * no escaping in a label value.
 */

#include "metrics.h"

#include "adaptive_rt.h"
#include "admitd.h"
#include "backend.h"
#include "class_wait.h"

#include <event2/buffer.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

/* The writer: one evbuffer and whether any append failed. */
struct mw {
	struct evbuffer *out;
	bool failed;
};

static void mw_printf(struct mw *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void mw_printf(struct mw *w, const char *fmt, ...)
{
	va_list ap;

	if (w->failed)
		return;
	va_start(ap, fmt);
	if (evbuffer_add_vprintf(w->out, fmt, ap) < 0)
		w->failed = true;
	va_end(ap);
}

/* One sample labelled by scope: NAME{scope="S"} V. */
static void mw_scope(struct mw *w, const char *name, const struct scope_rt *sc, uint64_t v)
{
	mw_printf(w, "%s{scope=\"%s\"} %" PRIu64 "\n", name, sc->cs->name, v);
}

/*
 * The outcomes of admitd_acquires_total: "acquired", the refusals a waiter
 * can end with (by their wire code), and "canceled" (the client left).
 * The refusals that come before a scope is known (bad_request,
 * unknown_scope) belong to no scope and are not here.
 */
static const enum admit_err metrics_refusals[] = {
	ADMIT_E_LIMITED,	  ADMIT_E_BUDGET_EXCEEDED, ADMIT_E_TIMEOUT,
	ADMIT_E_TOO_MANY_WAITERS, ADMIT_E_UNAVAILABLE,	   ADMIT_E_SHUTTING_DOWN,
	ADMIT_E_EXCEEDS_LIMIT,
};

static void m_acquires(struct mw *w, const struct admitd *ad, const char *name)
{
	size_t i, j;

	for (i = 0; i < ad->rt.nscopes; i++) {
		const struct scope_rt *sc = &ad->rt.scopes[i];
		const char *s = sc->cs->name;
		mw_printf(w, "%s{scope=\"%s\",outcome=\"acquired\"} %" PRIu64 "\n", name, s,
			  sc->admitted);
		for (j = 0; j < sizeof(metrics_refusals) / sizeof(metrics_refusals[0]); j++)
			mw_printf(w, "%s{scope=\"%s\",outcome=\"%s\"} %" PRIu64 "\n", name, s,
				  admit_err_str(metrics_refusals[j]),
				  sc->outcome[metrics_refusals[j]]);
		mw_printf(w, "%s{scope=\"%s\",outcome=\"canceled\"} %" PRIu64 "\n", name, s,
			  sc->canceled);
	}
}

/* ms as seconds the way Prometheus clients write `le`: 0.001, 0.25, 1, 2.5. */
static void metrics_seconds(char *buf, size_t len, int64_t ms)
{
	int n = snprintf(buf, len, "%" PRId64 ".%03" PRId64, ms / 1000, ms % 1000);

	while (n > 0 && (size_t)n < len && buf[n - 1] == '0')
		buf[--n] = '\0';
	if (n > 0 && (size_t)n < len && buf[n - 1] == '.')
		buf[--n] = '\0';
}

/* One histogram's samples, labelled by lab (`scope="S"` and more): buckets, sum, count. */
static void mw_hist(struct mw *w, const char *name, const char *lab, const uint64_t *hist,
		    uint64_t ms_total)
{
	char le[24];
	uint64_t cum = 0;
	size_t j;

	for (j = 0; j < WAIT_HIST_NBOUNDS; j++) {
		cum += hist[j];
		metrics_seconds(le, sizeof(le), wait_hist_bounds_ms[j]);
		mw_printf(w, "%s_bucket{%s,le=\"%s\"} %" PRIu64 "\n", name, lab, le, cum);
	}
	cum += hist[WAIT_HIST_NBOUNDS];
	mw_printf(w, "%s_bucket{%s,le=\"+Inf\"} %" PRIu64 "\n", name, lab, cum);
	mw_printf(w, "%s_sum{%s} %" PRIu64 ".%03" PRIu64 "\n", name, lab, ms_total / 1000,
		  ms_total % 1000);
	mw_printf(w, "%s_count{%s} %" PRIu64 "\n", name, lab, cum);
}

static void m_wait(struct mw *w, const struct admitd *ad, const char *name)
{
	char lab[128];
	size_t i;

	for (i = 0; i < ad->rt.nscopes; i++) {
		const struct scope_rt *sc = &ad->rt.scopes[i];
		snprintf(lab, sizeof(lab), "scope=\"%s\"", sc->cs->name);
		mw_hist(w, name, lab, sc->wait_hist, sc->wait_ms_total);
	}
}

/* m_class_wait's walk over one scope's classes. */
struct mw_class {
	struct mw *w;
	const char *name, *scope;
};

static void m_class_wait_one(void *arg, const char *cls, const struct class_wait *cw)
{
	static const uint64_t none[WAIT_HIST_NBUCKETS];
	const struct mw_class *x = arg;
	char lab[200];

	snprintf(lab, sizeof(lab), "scope=\"%s\",class=\"%s\"", x->scope, cls);
	mw_hist(x->w, x->name, lab, cw != NULL ? cw->hist : none, cw != NULL ? cw->ms_total : 0);
}

/* Per class of each scope; class="" counts the acquires without one. */
static void m_class_wait(struct mw *w, const struct admitd *ad, const char *name)
{
	for (size_t i = 0; i < ad->rt.nscopes; i++) {
		struct mw_class x = { w, name, ad->rt.scopes[i].cs->name };
		class_wait_each(&ad->rt.scopes[i], m_class_wait_one, &x);
	}
}

/* The per-scope counters and gauges that are one field each. */
#define METRICS_SCOPE_FIELD(fn, expr)                                           \
	static void fn(struct mw *w, const struct admitd *ad, const char *name) \
	{                                                                       \
		for (size_t i = 0; i < ad->rt.nscopes; i++) {                   \
			const struct scope_rt *sc = &ad->rt.scopes[i];          \
			mw_scope(w, name, sc, (uint64_t)(expr));                \
		}                                                               \
	}
METRICS_SCOPE_FIELD(m_releases, sc->releases)
METRICS_SCOPE_FIELD(m_penalties, sc->penalties)
METRICS_SCOPE_FIELD(m_shadow, sc->shadow_limited)
METRICS_SCOPE_FIELD(m_fallback, sc->fallbacks)
METRICS_SCOPE_FIELD(m_expired, sc->expired)
METRICS_SCOPE_FIELD(m_batches, sc->batches)
METRICS_SCOPE_FIELD(m_batched, sc->batched)
METRICS_SCOPE_FIELD(m_refused_known, sc->refused_known)
METRICS_SCOPE_FIELD(m_admitted_ahead, sc->admitted_ahead)
METRICS_SCOPE_FIELD(m_tickets, sc->tickets)
METRICS_SCOPE_FIELD(m_tickets_dropped, sc->tickets_dropped)
METRICS_SCOPE_FIELD(m_leases, sc->leases > 0 ? sc->leases : 0)
METRICS_SCOPE_FIELD(m_waiters, sc->waiting > 0 ? sc->waiting : 0)
#undef METRICS_SCOPE_FIELD

/* The adaptive scopes only: the learned amount averaged over this daemon's keys. */
static void m_adaptive(struct mw *w, const struct admitd *ad, const char *name)
{
	for (size_t i = 0; i < ad->rt.nscopes; i++) {
		int64_t mean;
		size_t n;
		if (adrt_scope_mean(&ad->rt.scopes[i], &mean, &n))
			mw_printf(w, "%s{scope=\"%s\"} %" PRId64 ".%03" PRId64 "\n", name,
				  ad->rt.scopes[i].cs->name, mean / 1000, mean % 1000);
	}
}

static void m_keys(struct mw *w, const struct admitd *ad, const char *name)
{
	mw_printf(w, "%s %zu\n", name, ad->rt.nkeys);
}

static void m_evictions(struct mw *w, const struct admitd *ad, const char *name)
{
	mw_printf(w, "%s %" PRIu64 "\n", name, ad->rt.key_evictions);
}

/* Every operation, in local mode too (zeros), so that dashboards see the series. */
static void m_backend_errors(struct mw *w, const struct admitd *ad, const char *name)
{
	for (size_t i = 0; i < backend_nops(); i++)
		mw_printf(w, "%s{op=\"%s\"} %" PRIu64 "\n", name, backend_op_name(i),
			  backend_op_errors(ad->rt.redis, i));
}

static void m_redis_calls(struct mw *w, const struct admitd *ad, const char *name)
{
	for (size_t i = 0; i < backend_nops(); i++)
		mw_printf(w, "%s{op=\"%s\"} %" PRIu64 "\n", name, backend_op_name(i),
			  backend_op_calls(ad->rt.redis, i));
}

static void m_redis_up(struct mw *w, const struct admitd *ad, const char *name)
{
	mw_printf(w, "%s %d\n", name, ad->rt.redis != NULL && backend_up(ad->rt.redis) ? 1 : 0);
}

static void m_connections(struct mw *w, const struct admitd *ad, const char *name)
{
	mw_printf(w, "%s %zu\n", name, ad->rt.nconns);
}

static void m_reloads(struct mw *w, const struct admitd *ad, const char *name)
{
	mw_printf(w, "%s{result=\"ok\"} %" PRIu64 "\n", name, ad->rt.reloads_ok);
	mw_printf(w, "%s{result=\"error\"} %" PRIu64 "\n", name, ad->rt.reloads_error);
}

static void m_build_info(struct mw *w, const struct admitd *ad, const char *name)
{
	(void)ad;
	mw_printf(w, "%s{version=\"%s\"} 1\n", name, ADMITD_VERSION);
}

/* X(name without the admitd_ prefix, type, help, sample writer) */
#define METRICS_FAMILIES(X)                                                                        \
	X(acquires_total, "counter",                                                               \
	  "Acquires answered, by scope and outcome: acquired, a refusal's error code, or "         \
	  "canceled (the client left while waiting).",                                             \
	  m_acquires)                                                                              \
	X(acquire_wait_seconds, "histogram", "How long admitted acquires waited, by scope.",       \
	  m_wait)                                                                                  \
	X(acquire_class_wait_seconds, "histogram",                                                 \
	  "How long admitted acquires waited, by scope and class (\"\": without a class).",        \
	  m_class_wait)                                                                            \
	X(releases_total, "counter", "Release requests naming a lease of the scope.", m_releases)  \
	X(penalties_total, "counter", "Penalize requests naming the scope.", m_penalties)          \
	X(shadow_limited_total, "counter", "Admissions a shadow scope would have refused.",        \
	  m_shadow)                                                                                \
	X(fallback_acquires_total, "counter",                                                      \
	  "Admissions decided by the in-process fallback while Redis could not decide.",           \
	  m_fallback)                                                                              \
	X(leases_expired_total, "counter", "Leases that reached lease_ttl unreleased.", m_expired) \
	X(leases, "gauge", "Leases held through this daemon now.", m_leases)                       \
	X(waiters, "gauge", "Acquires waiting now.", m_waiters)                                    \
	X(keys, "gauge", "Keys with in-process state now, all scopes.", m_keys)                    \
	X(adaptive_amount, "gauge",                                                                \
	  "Adaptive scopes: the effective amount of the first requests rule, averaged over the "   \
	  "keys this daemon holds (the ceiling when it holds none).",                              \
	  m_adaptive)                                                                              \
	X(key_evictions_total, "counter", "Idle keys evicted to stay within max_keys.",            \
	  m_evictions)                                                                             \
	X(backend_errors_total, "counter", "Failed Redis backend calls, by operation.",            \
	  m_backend_errors)                                                                        \
	X(redis_calls_total, "counter", "Calls sent to Redis, by operation.", m_redis_calls)       \
	X(redis_batches_total, "counter",                                                          \
	  "Acquire calls to Redis deciding several waiters of one key at once.", m_batches)        \
	X(redis_batched_acquires_total, "counter",                                                 \
	  "Acquire attempts decided in those batched calls.", m_batched)                           \
	X(refusals_known_total, "counter",                                                         \
	  "Acquires refused from a refusal Redis gave the key before, with no call.",              \
	  m_refused_known)                                                                         \
	X(admissions_ahead_total, "counter",                                                       \
	  "Acquires admitted from units an earlier Redis call booked ahead, with no call.",        \
	  m_admitted_ahead)                                                                        \
	X(fair_tickets_total, "counter",                                                           \
	  "fair = yes: tickets this daemon's waiters took in their keys' queues in Redis.",        \
	  m_tickets)                                                                               \
	X(fair_tickets_dropped_total, "counter",                                                   \
	  "fair = yes: tickets this daemon's calls dropped: of pods gone, or of its own waiters "  \
	  "that had left.",                                                                        \
	  m_tickets_dropped)                                                                       \
	X(redis_up, "gauge", "1 while Redis takes calls, else 0 (always 0 in local mode).",        \
	  m_redis_up)                                                                              \
	X(connections, "gauge", "Client connections open now.", m_connections)                     \
	X(reloads_total, "counter", "Conf reloads, by result.", m_reloads)                         \
	X(build_info, "gauge", "Always 1; the version is in the label.", m_build_info)

struct metrics_family {
	const char *name, *type, *help;
	void (*samples)(struct mw *w, const struct admitd *ad, const char *name);
};

static const struct metrics_family metrics_families[] = {
#define METRICS_ROW(n, t, h, f) { "admitd_" #n, t, h, f },
	METRICS_FAMILIES(METRICS_ROW)
#undef METRICS_ROW
};

bool metrics_render(const struct admitd *ad, struct evbuffer *out)
{
	struct mw w = { .out = out, .failed = false };
	size_t i;

	for (i = 0; i < sizeof(metrics_families) / sizeof(metrics_families[0]); i++) {
		const struct metrics_family *f = &metrics_families[i];
		mw_printf(&w, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, f->type);
		f->samples(&w, ad, f->name);
	}
	return !w.failed;
}
