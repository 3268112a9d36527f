/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * tenant_ovr.c - tenants' weights set at run time on one key: the set on
 * kq->tovr (tenant_ovr.h), its bound (override_max times the conf weight,
 * at most TOVR_MAX tenants a key), its ends, and which flow and weight a
 * waiter of a tenant gets from it and from the conf's `weight` lines.
 */

#include "tenant_ovr.h"

#include "clock.h"
#include "scope.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tovr_weight_cap(const struct conf_scope *cs, const char *tenant)
{
	const struct conf_weight *cw = conf_weight_find(cs, tenant);
	int64_t cap = (cw != NULL ? cw->weight : 1) * cs->override_milli / 1000;

	if (cs->override_milli <= 0)
		return 0;
	return cap > CONF_WEIGHT_MAX ? CONF_WEIGHT_MAX : cap < 1 ? 1 : (int)cap;
}

/* Drop the ended ones; the set goes with its last. */
static void tovr_prune(struct kq *kq, int64_t now)
{
	struct tovr_set *s = kq->tovr;
	size_t i = 0;

	if (s == NULL)
		return;
	while (i < s->n) {
		if (s->o[i].until > now) {
			i++;
			continue;
		}
		s->o[i] = s->o[--s->n];
	}
	if (s->n == 0) {
		free(s);
		kq->tovr = NULL;
	}
}

static struct tovr *tovr_find(struct tovr_set *s, const char *tenant)
{
	size_t i;

	for (i = 0; s != NULL && i < s->n; i++)
		if (strcmp(s->o[i].tenant, tenant) == 0)
			return &s->o[i];
	return NULL;
}

bool tovr_put(struct kq *kq, const char *tenant, int weight, int64_t until, int64_t now, bool *oom)
{
	struct tovr *o;

	*oom = false;
	tovr_prune(kq, now);
	if ((o = tovr_find(kq->tovr, tenant)) == NULL) {
		if (kq->tovr == NULL && (kq->tovr = calloc(1, sizeof(*kq->tovr))) == NULL) {
			*oom = true;
			return false;
		}
		if (kq->tovr->n == TOVR_MAX)
			return false;
		o = &kq->tovr->o[kq->tovr->n++];
		snprintf(o->tenant, sizeof(o->tenant), "%s", tenant);
	}
	o->weight = weight;
	o->until = until;
	return true;
}

void tovr_lift(struct kq *kq)
{
	free(kq->tovr);
	kq->tovr = NULL;
}

int64_t tovr_until(struct kq *kq, int64_t now)
{
	int64_t until = 0;
	size_t i;

	tovr_prune(kq, now);
	for (i = 0; kq->tovr != NULL && i < kq->tovr->n; i++)
		if (kq->tovr->o[i].until > until)
			until = kq->tovr->o[i].until;
	return until;
}

const char *tovr_flow(struct kq *kq, const char *tenant, int *weight)
{
	const struct conf_scope *cs = kq->sc->cs;
	const struct conf_weight *cw;
	const struct tovr *o;
	int cap;

	if (kq->tovr != NULL && tenant[0] != '\0') {
		tovr_prune(kq, clock_mono_ms());
		if ((o = tovr_find(kq->tovr, tenant)) != NULL &&
		    (cap = tovr_weight_cap(cs, tenant)) > 0) {
			*weight = o->weight < cap ? o->weight : cap;
			return o->tenant;
		}
	}
	if ((cw = conf_weight_find(cs, tenant)) != NULL) {
		*weight = cw->weight;
		return cw->name;
	}
	*weight = 1;
	return NULL;
}

void tovr_reply(struct preply *r, struct kq *kq, int64_t now)
{
	size_t i;

	tovr_prune(kq, now);
	if (kq->tovr == NULL)
		return;
	preply_push(r, "tenant_weights");
	for (i = 0; i < kq->tovr->n; i++) {
		const struct tovr *o = &kq->tovr->o[i];
		int cap = tovr_weight_cap(kq->sc->cs, o->tenant);
		if (cap == 0) /* a reload took override_max away: not in force */
			continue;
		preply_push(r, o->tenant);
		preply_int(r, "weight", o->weight < cap ? o->weight : cap);
		preply_int(r, "ttl_ms", o->until - now);
		preply_pop(r);
	}
	preply_pop(r);
}
