/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * waitq_fleet.c - a waiter's place in its key's queue across daemons.
 *
 * Owns: where a waiter of a fair scope stands in its class on this daemon
 * once the store says which ticket it holds in the queue that every daemon
 * shares (the tickets' order: their start tags, then their arrival numbers
 * there), so that this daemon asks for its waiters in the order the shared
 * queue will admit them. The tickets themselves are the store's.
 */

#include "waitq_int.h"

#include <stdlib.h>
#include <string.h>

/* Is ticketed x before ticketed y in the shared queue? */
static bool waitq_fleet_before(const struct waiter *x, const struct waiter *y)
{
	if (x->fl_s != y->fl_s)
		return x->fl_s < y->fl_s;
	return x->fl_seq < y->fl_seq;
}

void waitq_fleet_place(struct waiter *w, const char *member, double s)
{
	struct kq *kq = w->t[0].kq;
	struct waiter *x, *head = waitq_class_head(w), *after = NULL;
	size_t n;

	if (member == NULL || (n = strlen(member)) >= sizeof(w->fl_member)) {
		w->fl_member[0] = '\0';
		return;
	}
	memcpy(w->fl_member, member, n + 1);
	w->fl_s = s;
	w->fl_seq = strtoull(member, NULL, 10); /* the member starts with it */
	TAILQ_REMOVE(&kq->waiters, w, kq_link);
	/* after the last ticketed waiter of its class that goes before it */
	TAILQ_FOREACH (x, &kq->waiters, kq_link) {
		if (x->t[0].cls != w->t[0].cls)
			continue;
		if (x->fl_member[0] == '\0' || !waitq_fleet_before(x, w))
			break;
		after = x;
	}
	if (after != NULL) {
		TAILQ_INSERT_AFTER(&kq->waiters, after, w, kq_link);
	} else if (x != NULL) {
		TAILQ_INSERT_BEFORE(x, w, kq_link);
	} else {
		TAILQ_INSERT_TAIL(&kq->waiters, w, kq_link);
	}
	if (head != NULL && head != w && waitq_class_head(w) == w) {
		/* w takes the head's place: its sleep and last refusal */
		w->wake_at = head->wake_at;
		w->last_rule = head->last_rule;
		w->refused_by = head->refused_by;
		head->wake_at = 0;
	}
}
