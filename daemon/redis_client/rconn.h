/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rconn.h - one connection to one Redis server: bytes out, replies in.
 *
 * Owns: the bufferevent (plain or TLS), the reply reader, and the FIFO of
 * what was sent and awaits a reply (a tag and a kind per command, opaque
 * to it). Knows nothing of handshakes, scripts or topology: the owner
 * (a pool node's connection, rpool_node.c, or the topology's control
 * connection, rtopo.c) drives those. Commands queued in one loop pass leave
 * in one write; every reply read in one read is parsed and delivered in a
 * batch.
 *
 * Callbacks (owner's functions, with the owner pointer given at creation):
 *   on_reply(owner, kind, tag, v): the reply to a queued command, in
 *     order (v owned by the callee), or v NULL when the connection is
 *     being freed; every queued command gets exactly one.
 *   on_push(owner, v): a reply with no command waiting for it (pub/sub).
 *   on_event(owner, up, why): up: connected (TLS handshake done); !up:
 *     the connection failed or closed (why says how). After !up the owner
 *     must rconn_free it; nothing more is delivered before that.
 * rconn_free may be called from any of them.
 */

#ifndef ADMITD_RCONN_H
#define ADMITD_RCONN_H

#include "resp.h"

#include <stdbool.h>
#include <stddef.h>

struct event_base;
struct rconn;
struct tls_ctx;

struct rconn_ops {
	void (*on_reply)(void *owner, int kind, void *tag, struct rval *v);
	void (*on_push)(void *owner, struct rval *v);
	void (*on_event)(void *owner, bool up, const char *why);
};

/*
 * rconn_new - start connecting to host:port (path set: a Unix socket;
 * tls set: TLS over TCP). NULL with err filled when it cannot even start.
 */
struct rconn *rconn_new(struct event_base *base, const char *host, int port, const char *path,
			struct tls_ctx *tls, const struct rconn_ops *ops, void *owner, char *err,
			size_t errlen);

/* rconn_send - queue one formatted command and its reply's (kind, tag). -1 on OOM. */
int rconn_send(struct rconn *c, const char *cmd, size_t len, int kind, void *tag);

/* rconn_pending - commands queued or sent whose reply has not been delivered. */
size_t rconn_pending(const struct rconn *c);

/* rconn_free - close now; pending commands get on_reply(v NULL) first. */
void rconn_free(struct rconn *c);

#endif
