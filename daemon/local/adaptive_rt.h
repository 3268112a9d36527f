/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * adaptive_rt.h - adaptive amounts at run time: where an outcome is applied,
 * what this daemon knows of each key's learned amount, and how it is shown.
 *
 * Owns: no memory. The arithmetic is strategy/adaptive.c's; a key's learned
 * amount lives in its in-process state (struct lim_state.ad) and, on Redis,
 * in the key's adaptive hash (scripts/lib/adaptive.lua). On Redis the
 * scripts move the shared amount (release and penalize apply outcomes,
 * acquire reads the amount it uses and returns it) and this daemon keeps
 * the last amount it saw, which its fallback then uses; in local mode, in
 * fallback, and for a release Redis could not be sent, the outcome is
 * applied to the in-process state instead.
 */

#ifndef ADMITD_ADAPTIVE_RT_H
#define ADMITD_ADAPTIVE_RT_H

#include "limiter.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct eng_insp;
struct kq;
struct lease;
struct preply;
struct scope_rt;

/* adrt_sends - does a release of l carry an outcome that an adaptive target moves on? */
bool adrt_sends(const struct lease *l);

/*
 * adrt_release_local - apply l's outcome to the in-process state of its
 * adaptive targets, unless sent (Redis took the release, and applies it).
 */
void adrt_release_local(struct lease *l, bool sent, int64_t now);

/* adrt_penalize_local - a penalty is a limited outcome: in process unless sent to Redis. */
void adrt_penalize_local(struct kq *kq, bool sent, int64_t now);

/*
 * adrt_mirror - Redis said kq's effective amount is amt (milli-units): the
 * in-process copy takes it (the fallback's amount, should Redis go away).
 * Its instants are Redis's, not this clock's: they are forgotten.
 */
void adrt_mirror(struct kq *kq, int64_t amt);

/*
 * adrt_scope_mean - the effective amount averaged over the keys of sc this
 * daemon holds (milli-units; the ceiling when it holds none), and how many.
 * false when the scope is not adaptive.
 */
bool adrt_scope_mean(const struct scope_rt *sc, int64_t *mean_milli, size_t *nkeys);

/* adrt_status - the "adaptive" object of sc's entry in a status reply (adaptive scopes). */
void adrt_status(struct preply *r, struct scope_rt *sc);

/* adrt_inspect - the "adaptive" object of an inspect reply: the amount and its last change. */
void adrt_inspect(struct preply *r, const struct conf_scope *cs, const struct eng_insp *in);

/* adrt_inspect_share - div with in's adaptive amount, so rule capacities show what applies. */
struct lim_share adrt_inspect_share(const struct conf_scope *cs, const struct eng_insp *in,
				    struct lim_share div);

#endif
