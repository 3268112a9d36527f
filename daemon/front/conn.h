/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * conn.h - the connections of the Unix socket.
 *
 * conn.c owns each struct conn, from its accept (server.c) until it is
 * freed, and the set of them (struct conns): its socket, its events and
 * its two buffers, its framing of request lines, its output and
 * backpressure, half-close and revocation. What a connection
 * holds below the front (waiters, leases, owed replies) is its struct
 * client, which conn.c answers through (client.h).
 */

#ifndef ADMITD_CONN_H
#define ADMITD_CONN_H

#include "client.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/socket.h>

struct event;

/* conn_buf: conn.c. Bytes from buf + off, len of them, in cap allocated. */
struct conn_buf {
	char *buf;
	size_t off, len, cap;
};

/* conn: conn.c. */
struct conn {
	struct client cl; /* what the layers below see of it: first */
	struct conns *set;
	int fd;
	struct event *read_ev;	/* EV_READ|EV_PERSIST, added while reading */
	struct event *write_ev; /* EV_WRITE|EV_PERSIST, added only while the socket is full */
	struct event *flush_ev; /* made active to write the replies of a loop pass at once */
	struct event *close_ev; /* deferred free (see conn_close_after_flush) */
	struct conn_buf in;	/* the start of a line not complete yet, or lines held back */
	struct conn_buf out;	/* replies not written yet */
	uint64_t id;
	TAILQ_ENTRY(conn) link;
	struct ucred peer; /* the peer's credentials, read at accept (server.c) */
	bool peer_known;   /* ... when they could be read */
	bool closing;	   /* close once the output is flushed */
	bool half_closed;  /* the peer finished sending: close after its last waiter */
	bool reads_paused; /* backpressure: too much output unread (not closing) */
	bool dropped;	   /* closed without a flush: sends are discarded, close_ev frees */
	bool in_read;	   /* in its read callback: replies are written at its end */
	bool write_armed;  /* write_ev is added */
	bool flush_queued; /* flush_ev is active */
};
TAILQ_HEAD(conn_list, conn);

/* conns: conn.c. Every connection open; rt->nconns counts them. */
struct conns {
	struct rt *rt;
	struct conn_list list;
	uint64_t next_id;
	/* drained - made active when the daemon shuts down and its last
	 * connection has closed (main.c's exit timer); NULL: none. */
	struct event *drained;
};

/* conn_new - serve fd; cred: the peer's credentials read at accept, or NULL. */
void conn_new(struct conns *cs, int fd, const struct ucred *cred);
/*
 * conn_revoke - the peer may no longer be served: one `forbidden` line
 * (message msg), its waiters cancelled at once, then closed after the flush
 * (its leases released as on any close). Safe anywhere: it never frees c.
 */
void conn_revoke(struct conn *c, const char *msg);
/* conn_sweep - drop half-closed connections whose peer has gone entirely. */
void conn_sweep(struct conns *cs);
void conn_close_all(struct conns *cs);
/* conn_free_all - at exit: close every connection now. */
void conn_free_all(struct conns *cs);

#endif
