/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * tenant_ovr.h - tenants' weights set at run time on one key (the override
 * op with "tenant" and "weight"), in force until their ttl ends.
 *
 * tenant_ovr.c owns struct tovr_set: at most TOVR_MAX tenants of one key,
 * each with its weight and its end (monotonic ms), hung on the key's kq
 * (kq->tovr) while one is set, freed with the kq or once the last ended.
 * In local mode it is the override itself; on Redis, this daemon's copy of
 * what it set there (override.lua's `tw:<tenant>` fields), for the order of
 * its own waiters. waitq_class.c asks it for a waiter's flow and weight.
 */

#ifndef ADMITD_TENANT_OVR_H
#define ADMITD_TENANT_OVR_H

#include "attr.h"
#include "conf.h"
#include "proto.h"

#include <stdbool.h>
#include <stdint.h>

struct kq;
struct preply;

/* Tenant weights one key holds at most. */
#define TOVR_MAX 16

struct tovr {
	char tenant[PROTO_NAME_MAX + 1];
	int weight;    /* as set: bounded again when used (tovr_weight_cap) */
	int64_t until; /* monotonic ms */
};

struct tovr_set {
	size_t n;
	struct tovr o[TOVR_MAX];
};

/*
 * tovr_weight_cap - the largest weight an override may give tenant in
 * scope cs: override_max times its conf weight (1 when unlisted), at most
 * CONF_WEIGHT_MAX; 0 when the scope takes no overrides.
 */
int tovr_weight_cap(const struct conf_scope *cs, const char *tenant);
/*
 * tovr_put - tenant weighs weight on kq until `until` (replacing its last
 * one). false when kq holds TOVR_MAX others, or memory ran out (*oom).
 */
bool tovr_put(struct kq *kq, const char *tenant, int weight, int64_t until, int64_t now,
	      bool *oom) MUST_CHECK;
/* tovr_lift - every tenant weight of kq ends (reset). */
void tovr_lift(struct kq *kq);
/* tovr_until - the latest end of kq's tenant weights in force, 0 when none. */
int64_t tovr_until(struct kq *kq, int64_t now);
/*
 * tovr_flow - the flow waiter tenant joins on kq and its weight: a tenant
 * weight in force (bounded again by the scope's override_max), else its
 * conf `weight` line; the tenant's name then, NULL for the default flow
 * (weight 1).
 */
const char *tovr_flow(struct kq *kq, const char *tenant, int *weight);
/*
 * tovr_reply - "tenant_weights":{T:{"weight":W,"ttl_ms":N},...} of an
 * inspect reply, when kq has any in force.
 */
void tovr_reply(struct preply *r, struct kq *kq, int64_t now);

#endif
