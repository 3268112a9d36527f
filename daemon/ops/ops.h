/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * ops.h - the ops: what each request line asks, done.
 *
 * ops.c owns the dispatch of a client's lines to their op; ops_reply.c the
 * replies owed to a client once a decision comes back (struct op_pend).
 */

#ifndef ADMITD_OPS_H
#define ADMITD_OPS_H

#include "client.h"
#include "proto.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

struct conf_class;
struct kq;

/* op_pend: ops_reply.c. A reply owed to a connection once the backend answers. */
struct op_pend {
	TAILQ_ENTRY(op_pend) conn_link;
	struct client *conn; /* NULL once the client went away */
	char *id;	     /* raw JSON id to echo, owned */
	struct kq *kq;	     /* reset, inspect, override: the key (a ref is held) */
	const struct conf_class *cls;
	int64_t ttl_ms;			 /* override: echoed */
	char tenant[PROTO_NAME_MAX + 1]; /* override of a tenant's weight: whose */
	int weight;			 /* ... and the weight */
};

/* ops_dispatch - do what the request line asks and reply to c, now or later. */
void ops_dispatch(struct client *c, const char *line, size_t len);
/* ops_conn_closed - c goes away: the replies owed to it are dropped. */
void ops_conn_closed(struct client *c);
/* ops_reload - after a reload: the replies c is owed name nc's classes. */
void ops_reload(struct client *c);

#endif
