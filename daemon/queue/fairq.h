/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * fairq.h - start-time fair queuing (SFQ) among the tenants of one class's
 * waiters on one key: the tags and the state they come from.
 *
 * fairq.c owns struct fairq_cls: one class's virtual time V and its
 * flows' last finish tags. A flow is a tenant with a `weight` line, or
 * the default flow (slot 0) that every other tenant, named or not, shares
 * with weight 1. It does not know waiters or keys: waitq_class.c tags each
 * waiter as it queues and puts it in its class's queue by its start tag.
 */

#ifndef ADMITD_FAIRQ_H
#define ADMITD_FAIRQ_H

#include "conf.h"
#include "proto.h"

#include <stdbool.h>
#include <stdint.h>

/* The flows a class's queue on a key tracks: the listed tenants and the default one. */
#define FAIRQ_FLOWS (CONF_MAX_WEIGHTS + 1)

struct fairq_flow {
	char tenant[PROTO_NAME_MAX + 1]; /* "": the default flow (slot 0) */
	double f;			 /* the finish tag of its last waiter */
	uint32_t n;			 /* its waiters queued */
	bool used;
};

struct fairq_cls {
	struct fairq_cls *next;
	char cls[PROTO_NAME_MAX + 1]; /* the class's name; "": no class */
	double v;		      /* the start tag of the last waiter admitted */
	uint32_t nq;		      /* its waiters queued, tagged */
	struct fairq_flow flows[FAIRQ_FLOWS];
};

/*
 * fairq_tag - a waiter's tags: start *s = max(v, f_last), the later of the
 * virtual time and its flow's last finish; finish *f = *s + cost / weight.
 */
void fairq_tag(double v, double f_last, int64_t cost, int weight, double *s, double *f);
/*
 * fairq_rollback - a flow's last finish once a waiter with tags s, f left
 * unserved (canceled, timed out): back to s when it was the flow's last.
 */
double fairq_rollback(double f_last, double s, double f);

/* fairq_cls_new - an empty class state (V 0, no flow), malloc'd; NULL when out of memory. */
struct fairq_cls *fairq_cls_new(const char *cls);
/*
 * fairq_join - tag a waiter of tenant (NULL or "": the default flow) with
 * weight, and count it queued. A tenant the table has no room for joins
 * the default flow, with weight 1. Returns its flow's slot.
 */
int fairq_join(struct fairq_cls *c, const char *tenant, int64_t cost, int weight, double *s,
	       double *f);
/* fairq_served - a waiter with start tag s was admitted: V moves to s. */
void fairq_served(struct fairq_cls *c, double s);
/*
 * fairq_leave - a waiter of slot with tags s, f left the queue (served or
 * not). true when the class's queue is empty: the caller frees c, and
 * with it V and every tag (no credit is banked while idle).
 */
bool fairq_leave(struct fairq_cls *c, int slot, double s, double f, bool served);

#endif
