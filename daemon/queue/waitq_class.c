/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * waitq_class.c - a key's class heads: which waiter of each class asks,
 * in what order (priority=N, then arrival), and which head holds back
 * another (conf_plan_holds_too). Pure walks over the key's waiter list.
 */

#include "waitq_int.h"

#include "clock.h"
#include "lease.h"
#include "log.h"
#include "scope.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>

static int waitq_prio(const struct waiter *w)
{
	return w->t[0].cls != NULL ? w->t[0].cls->priority : 0;
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
		for (j = h->n; j > 0 && waitq_prio(h->w[j - 1]) < waitq_prio(x); j--)
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
