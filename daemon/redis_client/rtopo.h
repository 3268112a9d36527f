/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rtopo.h - topology discovery for the Redis client: which master a set of
 * Sentinels names, or which masters own which slots of a Redis Cluster.
 *
 * It sits below the pool and does not know it: it keeps one control
 * connection of its own and reports what it learns through struct
 * rtopo_ops, which its owner (the pool) registers. The owner tells it in
 * turn when a data connection was lost or a reply says the topology
 * changed (rtopo_node_lost, rtopo_stale). No callback runs user code.
 */

#ifndef ADMITD_RTOPO_H
#define ADMITD_RTOPO_H

#include "redis_url.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct rtopo;
struct tls_ctx;

enum rtopo_kind { RTOPO_SENTINEL = 1, RTOPO_CLUSTER };

/* One range of a Cluster slot map: slots start..end are owned by host:port. */
struct rtopo_range {
	long start, end;
	const char *host; /* valid during the callback only */
	int port;
};

/* What the topology reports, each with the owner pointer given to rtopo_new. */
struct rtopo_ops {
	/* SENTINEL: the master is at host:port from now on (why: for the log). */
	void (*use_master)(void *owner, const char *host, int port, const char *why);
	/* SENTINEL: the master in use may be demoted: reconnect it (its handshake checks). */
	void (*recheck_master)(void *owner);
	/* CLUSTER: a valid slot map; NULL when applied, else why not (the map unchanged). */
	const char *(*apply_map)(void *owner, const struct rtopo_range *r, size_t nr);
	/*
	 * CLUSTER: the masters of the map in use: how many there are, and the
	 * address of the k-th (k < that count) in *host (valid until the next
	 * event) and *port.
	 */
	size_t (*master_addr)(void *owner, size_t k, const char **host, int *port);
};

/* What discovery needs; the pointers must outlive the struct rtopo. */
struct rtopo_conf {
	enum rtopo_kind kind;
	struct event_base *base;
	const struct redis_url *url;   /* the seeds (hosts), the master's name */
	struct tls_ctx *tls;	       /* NULL: plain TCP */
	const char *user;	       /* CLUSTER: the ACL user, or NULL */
	const char *password;	       /* CLUSTER: AUTH, or NULL; never logged */
	const char *sentinel_password; /* SENTINEL: AUTH, or NULL; never logged */
	int64_t timeout_ms, backoff_min_ms, backoff_max_ms;
};

/* rtopo_new - start discovery (connects now, in the background); NULL on OOM. */
struct rtopo *rtopo_new(const struct rtopo_conf *conf, const struct rtopo_ops *ops, void *owner);

/* rtopo_node_lost - a data connection dropped: ask again soon (NULL t: nothing). */
void rtopo_node_lost(struct rtopo *t);

/* rtopo_stale - a reply says the topology changed (MOVED; READONLY...; a master that is no master). */
void rtopo_stale(struct rtopo *t);

/* rtopo_free - close the control connection; no callback runs after (NULL is fine). */
void rtopo_free(struct rtopo *t);

#endif
