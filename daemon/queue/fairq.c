/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * fairq.c - start-time fair queuing among the tenants of one class's queue
 * on a key (Goyal, Vin and Cheng, SIGCOMM '96): a waiter's start tag is
 * max(V, its flow's last finish), its finish the start plus cost / weight,
 * and V the start tag of the last waiter admitted; waiters go in start-tag
 * order. Owns struct fairq_cls (fairq.h); pure arithmetic on it, no clock.
 */

#include "fairq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fairq_tag(double v, double f_last, int64_t cost, int weight, double *s, double *f)
{
	*s = f_last > v ? f_last : v;
	*f = *s + (double)cost / (double)(weight > 0 ? weight : 1);
}

double fairq_rollback(double f_last, double s, double f)
{
	return f_last == f ? s : f_last;
}

struct fairq_cls *fairq_cls_new(const char *cls)
{
	struct fairq_cls *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	snprintf(c->cls, sizeof(c->cls), "%s", cls != NULL ? cls : "");
	c->flows[0].used = true; /* the default flow: tenant "" */
	return c;
}

/* A slot that carries nothing: no waiter queued and no finish beyond V. */
static bool fairq_idle(const struct fairq_cls *c, const struct fairq_flow *fl)
{
	return !fl->used || (fl->n == 0 && fl->f <= c->v);
}

/* tenant's slot, or a free one taken for it, or -1 when the table is full. */
static int fairq_slot(struct fairq_cls *c, const char *tenant)
{
	int i, free_at = -1;

	for (i = 1; i < FAIRQ_FLOWS; i++) {
		struct fairq_flow *fl = &c->flows[i];
		if (fl->used && strcmp(fl->tenant, tenant) == 0)
			return i;
		if (free_at < 0 && fairq_idle(c, fl))
			free_at = i;
	}
	if (free_at > 0) {
		struct fairq_flow *fl = &c->flows[free_at];
		snprintf(fl->tenant, sizeof(fl->tenant), "%s", tenant);
		fl->f = 0;
		fl->n = 0;
		fl->used = true;
	}
	return free_at;
}

int fairq_join(struct fairq_cls *c, const char *tenant, int64_t cost, int weight, double *s,
	       double *f)
{
	int slot = 0;

	if (tenant != NULL && tenant[0] != '\0')
		slot = fairq_slot(c, tenant);
	if (slot <= 0) {
		slot = 0;
		weight = 1;
	}
	fairq_tag(c->v, c->flows[slot].f, cost, weight, s, f);
	c->flows[slot].f = *f;
	c->flows[slot].n++;
	c->nq++;
	return slot;
}

void fairq_served(struct fairq_cls *c, double s)
{
	if (s > c->v)
		c->v = s;
}

bool fairq_leave(struct fairq_cls *c, int slot, double s, double f, bool served)
{
	struct fairq_flow *fl = &c->flows[slot >= 0 && slot < FAIRQ_FLOWS ? slot : 0];

	if (fl->n > 0)
		fl->n--;
	if (!served)
		fl->f = fairq_rollback(fl->f, s, f);
	if (c->nq > 0)
		c->nq--;
	return c->nq == 0;
}
