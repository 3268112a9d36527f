/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rt.h - the runtime root below the front: what every layer from the
 * queue up reaches the daemon's state through.
 *
 * Owns nothing by itself. struct rt sits inside struct rt (main.c makes
 * and frees it); its tables are made by scopes_init (scope.c: the scopes and
 * their keys, the LRU of idle keys) and lease.c (the lease table and its TTL
 * queues). Its two hook tables are the layers above, as the queue declares
 * them: dec, the decider that answers the queue's waiters (decider.h, filled
 * by the engine), and fleet, what the in-process limiter asks of the Redis
 * store (eng_local.h, filled by the store). The front counts its
 * connections here for `status`.
 */

#ifndef ADMITD_RT_H
#define ADMITD_RT_H

#include "attr.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

struct backend;
struct conf;
struct decider;
struct eng_fleet;
struct event_base;
struct htab;
struct kq;
struct lease_ttlq;
struct scope_rt;

TAILQ_HEAD(kq_list, kq);

struct rt {
	struct event_base *base;
	struct conf *conf;
	struct scope_rt *scopes;
	size_t nscopes;
	struct scope_rt *retired; /* scopes a reload removed, still holding leases */
	struct htab *leases;	  /* id -> struct lease */
	SLIST_HEAD(lease_ttlq_list, lease_ttlq) ttlqs; /* lease.c: one per lease_ttl seen */
	size_t nleases;		       /* entries of leases (max_leases bounds it) */
	struct kq_list idle_keys;      /* idle kqs of every scope, least recently used first */
	struct kq_list kept_keys;      /* idle kqs eviction found under an override (scope.c) */
	int64_t kept_until;	       /* no override of kept_keys ends before (mono ms) */
	size_t nkeys;		       /* kqs of every scope (max_keys bounds it) */
	uint64_t key_evictions;	       /* idle keys kq_get forgot to stay within max_keys */
	struct backend *redis;	       /* the Redis store; NULL in local mode */
	const struct decider *dec;     /* the engine (decider.h) */
	const struct eng_fleet *fleet; /* the store's fleet view (eng_local.h) */
	/* slot_freed - a lease of kq ended (lease.c calls it): the queue's head
	 * may go now (waitq_slot_freed: the queue is above the leases). */
	void (*slot_freed)(struct kq *kq);
	size_t nconns;		/* the front's connections, for `status` */
	uint64_t reloads_ok;	/* reloads applied: the conf's generation */
	uint64_t reloads_error; /* reloads refused: the old conf kept running */
	int64_t start_ms;
	bool shutting_down;
	/* The front's socket path, for `status`: replies queued to clients, the
	 * write(2)s that sent them, and how often a full socket made one wait. */
	uint64_t conn_replies, conn_writes, conn_write_waits;
};

#endif
