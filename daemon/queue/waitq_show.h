/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * waitq_show.h - what the wait queues look like, for the operator: one
 * key's queue by class and tenant (inspect's "queue") and the keys with
 * the most waiters (status's "contended"). Keys appear in these replies
 * only, never in metrics.
 */

#ifndef ADMITD_WAITQ_SHOW_H
#define ADMITD_WAITQ_SHOW_H

#include "rt.h"

struct kq;
struct preply;

/* The most entries of status's "contended". */
#define WAITQ_SHOW_TOP 20

/*
 * waitq_show_queue - "queue":[...] of kq, one object per class with
 * waiters, in the order their heads are asked (priority, then arrival):
 * its waiters, its virtual time and per tenant flow its waiters and next
 * start tag (waitq_show.c says the shape; PROTOCOL.md documents it).
 */
void waitq_show_queue(struct preply *r, struct kq *kq);
/*
 * waitq_show_contended - "contended":[...]: the WAITQ_SHOW_TOP (scope, key,
 * class) with the most waiters on this daemon, most first.
 */
void waitq_show_contended(struct preply *r, struct rt *ad);

#endif
