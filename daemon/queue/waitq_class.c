/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * waitq_class.c - a key's class heads: which waiter of each class asks,
 * in what order (priority=N, then arrival), and which head holds back
 * another (conf_plan_holds_too); and the order within a class: each
 * waiter's place by its tenant's start tag (fairq.h), then arrival.
 * Walks over the key's waiter list.
 */

#include "waitq_int.h"

#include "clock.h"
#include "lease.h"
#include "log.h"
#include "scope.h"
#include "tenant_ovr.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int waitq_prio(const struct waiter *w)
{
	return w->t[0].cls != NULL ? w->t[0].cls->priority : 0;
}

/* Is head x asked before head y: a higher priority, or the same and arrived first? */
static bool waitq_before(const struct waiter *x, const struct waiter *y)
{
	if (waitq_prio(x) != waitq_prio(y))
		return waitq_prio(x) > waitq_prio(y);
	return x->seq < y->seq;
}

/*
 * The first waiter of each class queued on kq, higher priority first, then
 * by arrival. The walk ends once every class of the scope has its head: one
 * step when the scope has no classes.
 */
void waitq_heads(struct kq *kq, struct waitq_heads *h)
{
	size_t want = kq->sc->cs->nclasses + 1, i, j;
	struct waiter *x;

	h->n = 0;
	for (x = TAILQ_FIRST(&kq->waiters); x != NULL; x = TAILQ_NEXT(x, kq_link)) {
		for (i = 0; i < h->n && h->w[i]->t[0].cls != x->t[0].cls; i++)
			;
		if (i < h->n)
			continue;
		for (j = h->n; j > 0 && waitq_before(x, h->w[j - 1]); j--)
			h->w[j] = h->w[j - 1];
		h->w[j] = x;
		if (++h->n == WAITQ_HEADS || h->n == want)
			break;
	}
}

/* The head of w's class on its key: the first waiter of that class. */
struct waiter *waitq_class_head(const struct waiter *w)
{
	struct waiter *x;

	for (x = TAILQ_FIRST(&w->t[0].kq->waiters); x != NULL; x = TAILQ_NEXT(x, kq_link))
		if (x->t[0].cls == w->t[0].cls)
			return x;
	return NULL;
}

/*
 * Does head x, refused before, hold back head y of another class asked
 * after it? When the limit that refused x holds y too (conf_plan_holds_too),
 * and it was x's own key's, not another target's.
 */
static bool waitq_blocks(const struct waiter *x, const struct waiter *y)
{
	const struct kq *kq = x->t[0].kq;

	if (x->refused_by != NULL && x->refused_by != kq)
		return false;
	return conf_plan_holds_too(kq->sc->cs, x->t[0].cls, x->last_rule, y->t[0].cls);
}

/* The head ordered before h->w[i] that holds it back, or NULL. */
struct waiter *waitq_blocker(const struct waitq_heads *h, size_t i)
{
	size_t j;

	for (j = 0; j < i; j++)
		if (waitq_blocks(h->w[j], h->w[i]))
			return h->w[j];
	return NULL;
}

/* What w waits behind: its class's head, else a head that holds that one back. */
struct waiter *waitq_behind(struct waiter *w)
{
	struct waiter *ch = waitq_class_head(w);
	struct waitq_heads h;
	size_t i;

	if (ch != NULL && ch != w)
		return ch;
	waitq_heads(w->t[0].kq, &h);
	for (i = 0; i < h.n && h.w[i] != w; i++)
		;
	return i < h.n ? waitq_blocker(&h, i) : NULL;
}

/*
 * Tag w (not a try) in its class's queue on kq and put it after the last
 * waiter of its class whose start tag is no later (or that is untagged: a
 * try being decided); before the class's head otherwise, taking over that
 * head's sleep and last refusal. It may go before waiters whose decision
 * is in flight (a batch): their answers do not depend on where they stand,
 * and a light tenant then waits for one call, not for the batch behind it.
 * Without memory for the tags, w goes untagged to the tail (arrival order).
 * A scope with no `weight` line, on a key with no tenant weight set at run
 * time (tenant_ovr.h), has one flow, whose start tags are arrival order: w
 * goes to the tail with no tag and no state (the common case costs nothing).
 */
void waitq_fair_insert(struct kq *kq, struct waiter *w)
{
	const char *cname = w->t[0].cls != NULL ? w->t[0].cls->name : "", *flow;
	struct fairq_cls *c;
	struct waiter *x, *first = NULL;
	int weight;

	if (kq->sc->cs->nweights == 0 && kq->tovr == NULL) {
		TAILQ_INSERT_TAIL(&kq->waiters, w, kq_link);
		return;
	}
	flow = tovr_flow(kq, w->tenant, &weight);
	for (c = kq->fq; c != NULL && strcmp(c->cls, cname) != 0; c = c->next)
		;
	if (c == NULL && (c = fairq_cls_new(cname)) != NULL) {
		c->next = kq->fq;
		kq->fq = c;
	}
	if (c == NULL) {
		TAILQ_INSERT_TAIL(&kq->waiters, w, kq_link);
		return;
	}
	w->fq = c;
	w->fq_slot = fairq_join(c, flow, w->t[0].cost, weight, &w->fq_s, &w->fq_f);
	TAILQ_FOREACH_REVERSE(x, &kq->waiters, waiter_list, kq_link)
	{
		if (x->t[0].cls != w->t[0].cls)
			continue;
		if (x->fq == NULL || x->fq_s <= w->fq_s) {
			TAILQ_INSERT_AFTER(&kq->waiters, x, w, kq_link);
			return;
		}
		first = x;
	}
	if (first == NULL) {
		TAILQ_INSERT_TAIL(&kq->waiters, w, kq_link);
		return;
	}
	TAILQ_INSERT_BEFORE(first, w, kq_link);
	w->wake_at = first->wake_at;
	w->last_rule = first->last_rule;
	w->refused_by = first->refused_by;
	first->wake_at = 0;
}

/* w was admitted: its class's virtual time moves to its start tag. */
void waitq_fair_served(struct waiter *w)
{
	if (w->fq == NULL)
		return;
	fairq_served(w->fq, w->fq_s);
	w->fq_served = true;
}

/* w leaves kq's queue: untag it; its class's tags go once no waiter of it is tagged. */
void waitq_fair_leave(struct kq *kq, struct waiter *w)
{
	struct fairq_cls **pp;

	if (w->fq == NULL || !fairq_leave(w->fq, w->fq_slot, w->fq_s, w->fq_f, w->fq_served))
		return;
	for (pp = &kq->fq; *pp != NULL && *pp != w->fq; pp = &(*pp)->next)
		;
	if (*pp != NULL)
		*pp = w->fq->next;
	free(w->fq);
	w->fq = NULL;
}
