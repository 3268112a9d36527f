/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * client.h - a client as the layers below the front see it.
 *
 * Owns nothing by itself: struct client is what a connection (the front's
 * struct conn, which embeds one) holds below the front: its waiters
 * (waitq.c), its leases (lease.c) and the replies owed to it (the ops), and
 * the two callbacks through which those layers answer it. The front fills
 * the callbacks; nothing below it knows what a connection is, as a
 * hiredis reader never knows who reads.
 */

#ifndef ADMITD_CLIENT_H
#define ADMITD_CLIENT_H

#include "rt.h"

#include <stdbool.h>
#include <sys/queue.h>

struct client;
struct lease;
struct op_pend;
struct preply;
struct waiter;

TAILQ_HEAD(waiter_list, waiter);
TAILQ_HEAD(lease_list, lease);
TAILQ_HEAD(op_pend_list, op_pend);

struct client_cb {
	/* reply - send r, one reply line, and free it (r may be an out-of-memory
	 * reply: preply_new never fails). A client being closed drops it. */
	void (*reply)(struct client *c, struct preply *r);
	/* waiter_done - one of c's waiters was answered or cancelled. */
	void (*waiter_done)(struct client *c);
};

struct client {
	struct rt *ad;
	const struct client_cb *cb;
	struct waiter_list waiters;
	struct lease_list leases;
	struct op_pend_list pends; /* replies owed (the ops) */
};

static inline void client_reply(struct client *c, struct preply *r)
{
	c->cb->reply(c, r);
}

static inline void client_waiter_done(struct client *c)
{
	c->cb->waiter_done(c);
}

#endif
