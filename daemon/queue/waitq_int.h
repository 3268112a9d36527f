/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * waitq_int.h - what the files of the wait queue share and no one else sees:
 * a key's class heads (waitq_class.c), a waiter's answers and removal
 * (waitq_answer.c), which the pump (waitq.c) and the walks over every queue
 * (waitq_all.c) use.
 */

#ifndef ADMITD_WAITQ_INT_H
#define ADMITD_WAITQ_INT_H

#include "waitq.h"

/* Waiters of one hot key decided in one Redis call, at most. */
#define WAITQ_BATCH 16
/* The most class heads of one key a pass looks at (more classes wait their turn). */
#define WAITQ_HEADS 64
/* A fair key's new waiter gets its ticket within this (waitq_fleet_wake). */
#define WAITQ_FLEET_GATHER_MS 10
/* ... or within this when its tenant has a ticket here already: under the
 * 100 ms apart at which arrival order across pods is held to. */
#define WAITQ_FLEET_GATHER_BACKLOG_MS 80

/* A key's class heads, in the order they are asked. */
struct waitq_heads {
	struct waiter *w[WAITQ_HEADS];
	size_t n;
};

/* Why a fallback refusal came from this pod's share, not the whole limit. */
#define WAITQ_SHARE_MSG                                                                       \
	"redis is down, and this pod's fallback share of the limit (the limit divided among " \
	"the pods alive, so that the shares add up to it) is too small for the request now"

/* ---- waitq_class.c ---- */

void waitq_heads(struct kq *kq, struct waitq_heads *h);
struct waiter *waitq_behind(struct waiter *w);
struct waiter *waitq_class_head(const struct waiter *w);
struct waiter *waitq_blocker(const struct waitq_heads *h, size_t i);
void waitq_fair_insert(struct kq *kq, struct waiter *w);
void waitq_fair_served(struct waiter *w);
void waitq_fair_leave(struct kq *kq, struct waiter *w);

/* ---- waitq_answer.c ---- */

void waitq_unlink_conn(struct waiter *w);
bool waitq_in_flight(struct waiter *w);
const char *waitq_blame(struct waiter *w);
void waitq_remove(struct waiter *w);
/* waitq_spares_free - at exit: free the spare waiter records. */
void waitq_spares_free(void);
/*
 * waitq_watch - watch w (NULL: none) while waitq_add pumps its queue;
 * waitq_watching - is w still there (not answered and freed meanwhile)?
 */
void waitq_watch(const struct waiter *w);
bool waitq_watching(const struct waiter *w);
void waitq_admit(struct waiter *w, const struct eng_res *res, int64_t now);
void waitq_fail(struct waiter *w, enum admit_err e, int64_t retry_ms, const char *rule,
		const char *msg);
void waitq_exceeds(struct waiter *w, const struct eng_res *res);
bool waitq_first_of_scope(const struct waiter *w, size_t i);

#endif
