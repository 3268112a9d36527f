/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * scope.h - scopes at run time (struct scope_rt) and their keys (struct kq).
 *
 * scope.c owns both: the scope array in rt, each scope's table of keys, the
 * LRU of idle keys that max_keys bounds, and their mapping onto a reloaded
 * conf. A kq's queue of waiters is waitq.c's (waitq.h).
 */

#ifndef ADMITD_SCOPE_H
#define ADMITD_SCOPE_H

#include "client.h"
#include "conf.h"
#include "htab.h"
#include "limiter.h"
#include "proto.h"
#include "rt.h"
#include "wait_hist.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/queue.h>

struct event;
struct class_wait;
struct tovr_set;

/*
 * kq: scope.c (table, life, LRU) and waitq.c (queue, pump). One key of one
 * scope. Its in-process limiter state (local mode, or Redis fallback)
 * follows it in the same block: kq_lim(). A kq with nothing held and no
 * refs is idle: it sits on its daemon's LRU list (idle_link), whence
 * max_keys evicts it, or on kept_keys while an override keeps it from
 * eviction (scope.c). held and refs change only through kq_hold/kq_unhold
 * and kq_ref/kq_unref, which keep that list right.
 */
struct kq {
	struct scope_rt *sc;
	const char *key; /* the key table's copy: lives as long as kq */
	struct waiter_list waiters;
	TAILQ_ENTRY(kq) idle_link; /* on ad->idle_keys iff idle (tqe_prev NULL: not) */
	uint32_t nwait;
	int32_t held;		/* leases of this key held through this daemon */
	int32_t pending;	/* attempts in flight naming this key (any queue's head) */
	int32_t refs;		/* waiters (and pends) naming this key: not swept, not evicted */
	struct event *retry_ev; /* the head's next attempt */
	struct eng_refused *refused; /* a refusal Redis gave, kept until it can pass (engine.c) */
	struct rb_ahead *ahead;	     /* units booked ahead in Redis (rb_ahead.c) */
	bool
	    fl_queued; /* a fair scope's key: tickets waited in Redis at its last call (rb_fair.c) */
	struct fairq_cls *fq;  /* its classes' fair-queuing tags, while waiters are tagged */
	struct tovr_set *tovr; /* tenants' weights set on it (tenant_ovr.h); NULL: none */
	int64_t wake_at;       /* the earliest head's wake: retry_ev; 0: unarmed */
	uint16_t lim_cap;      /* rules the state inline in the entry has room for */
	bool lim_ext;	       /* lim is a separate allocation (a reload added rules) */
	bool slot_wait;	       /* a head waits for a lease slot (a release may end it) */
	bool busy;	       /* a backend decision for the head is in flight */
	bool in_pump;
	bool kept; /* idle, on ad->kept_keys: eviction passed it over for its override */
};

/* One target of an acquire, resolved: key queue, class, cost. */
struct target_rt {
	struct kq *kq;
	const struct conf_class *cls;
	int64_t cost;
};

/* Where a kq's limiter state starts in its block (8-byte aligned). */
#define KQ_LIM_OFF ((sizeof(struct kq) + 7) & ~(size_t)7)

/* kq_lim - the key's in-process limiter state (never NULL): in its entry,
 * or, once a reload gave its scope more rules than the entry has room for,
 * where the pointer stored in the entry in its place says. */
static inline struct lim_state *kq_lim(struct kq *kq)
{
	void *in = (char *)kq + KQ_LIM_OFF;
	struct lim_state *ext;

	if (!kq->lim_ext)
		return (struct lim_state *)in;
	memcpy(&ext, in, sizeof(ext));
	return ext;
}

/* scope_rt: scope.c. A scope a reload removed is "retired": it stays, alone
 * in its allocation, until its keys have nothing held, queued or in flight. */
struct scope_rt {
	struct rt *ad;
	const struct conf_scope *cs; /* in ad->conf; a retired one's, in the conf it came from */
	size_t idx;
	bool retired;
	struct scope_rt *retired_next;
	struct htab *keys; /* key -> struct kq */
	size_t sweep_at;   /* where the idle-key sweep goes on (a bucket) */
	int64_t leases;	   /* held through this daemon, all keys */
	int64_t waiting;
	/* Outcomes of acquires (a wait hook's events, as counters in `status`). */
	uint64_t admitted, refused, shadow_limited, timeouts, fallbacks;
	uint64_t outcome[ADMIT_E__COUNT]; /* refusals by error code */
	uint64_t canceled;		  /* the client left while waiting */
	uint64_t wait_ms_total;		  /* summed waited_ms of admissions */
	uint64_t expired;		  /* leases ended by lease_ttl */
	uint64_t releases;		  /* release ops naming a lease of this scope */
	uint64_t penalties;		  /* penalize ops naming this scope */
	uint64_t refused_known;		  /* refused from a refusal Redis gave before */
	uint64_t admitted_ahead;	  /* admitted from units booked ahead, with no call */
	/* Batched Redis acquire calls (one for the head of a key and the
	 * waiters like it behind), and the attempts they carried. */
	uint64_t batches, batched;
	/* fair = yes: tickets this daemon's waiters took in their keys' queues
	 * across daemons, and tickets its calls dropped (of pods gone, or of
	 * its own waiters that had left) (rb_fair.c) */
	uint64_t tickets, tickets_dropped;
	/* waited_ms of admissions, per bucket (metrics.h) */
	uint64_t wait_hist[WAIT_HIST_NBUCKETS];
	struct class_wait *cwait; /* ... and per class (class_wait.h), owned */
};

bool scopes_init(struct rt *ad) MUST_CHECK;
void scopes_free(struct rt *ad);
struct scope_rt *scope_find(struct rt *ad, const char *name);
/*
 * kq_get - the key's kq, created when new (the key table owns it). A new
 * key past max_keys first evicts the least recently used idle key (its
 * in-process state is forgotten), one without an override in force before
 * any with one; in local mode a key under an override is not evicted at
 * all (the override would be lost). NULL when memory runs out, or when
 * no key kept can be evicted: then *full (when not NULL) is set true. A kq
 * that is not referenced (kq_ref, kq_hold) may be evicted by the next kq_get.
 */
struct kq *kq_get(struct scope_rt *sc, const char *key, bool *full);
/*
 * kq_ref, kq_unref - a waiter or a pending reply names kq (refs).
 * kq_hold, kq_unhold - a lease of kq is held through this daemon (held).
 * Inline: each acquire+release makes about four of these calls. A kq is
 * on idle_keys iff both counts are 0; kq_idle_out marks it off the list.
 */
static inline void kq_idle_out(struct kq *kq)
{
	struct rt *ad = kq->sc->ad;

	TAILQ_REMOVE(kq->kept ? &ad->kept_keys : &ad->idle_keys, kq, idle_link);
	kq->idle_link.tqe_prev = NULL;
	kq->kept = false;
}

static inline void kq_idle_in(struct kq *kq)
{
	TAILQ_INSERT_TAIL(&kq->sc->ad->idle_keys, kq, idle_link);
}

static inline void kq_ref(struct kq *kq)
{
	if (kq->refs++ == 0 && kq->held == 0)
		kq_idle_out(kq);
}

static inline void kq_unref(struct kq *kq)
{
	if (--kq->refs == 0 && kq->held == 0)
		kq_idle_in(kq);
}

static inline void kq_hold(struct kq *kq)
{
	if (kq->held++ == 0 && kq->refs == 0)
		kq_idle_out(kq);
}

static inline void kq_unhold(struct kq *kq)
{
	if (--kq->held == 0 && kq->refs == 0)
		kq_idle_in(kq);
}
/* kq_sweep - free the kqs with nothing queued, held or remembered: one
 * slice of each scope's table per call (the whole table in ten calls). */
void kq_sweep(struct rt *ad);
/*
 * scopes_reload - nc's scopes replace the running ones (ad->conf is still
 * the old conf). A scope of the same name keeps its keys, their waiters,
 * leases and counters, and each key's limiter state where the limit did not
 * change (lim_state_carry); a new scope starts empty; a removed one is
 * retired: its waiters are answered unknown_scope, its leases stay
 * releasable. The waiters, leases and owed replies are their owners' to
 * re-point once this returns true (waitq_reload, lease_reload, ops_reload).
 * false,
 * with nothing changed, when memory ran out. Call waitq_wake_all once ad->conf
 * is nc.
 */
bool scopes_reload(struct rt *ad, const struct conf *nc) MUST_CHECK;
/* scopes_points_into - does a retired scope still use a scope of conf c? */
bool scopes_points_into(const struct rt *ad, const struct conf *c);

#endif
