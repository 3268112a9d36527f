/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rpool_node.c - the pool's nodes and their connections: a node per
 * address ever used (kept, with its counters, while the topology changes),
 * pool_size connections (rconn.c) to each node in use, each connecting,
 * going through its handshake (rpool_hs.c) and reconnecting after a
 * jittered, doubling backoff. It knows calls only as the tags of K_CALL
 * replies, which it hands up through struct rp_node_ops; a lost connection
 * is reported down to the topology (rtopo_node_lost).
 */

#include "rpool_int.h"

#include "log.h"
#include "rconn.h"
#include "rtopo.h"
#include "rutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void conn_connect(struct rp_conn *c);
static void conn_timer_cb(evutil_socket_t fd, short what, void *arg);
static void conn_on_reply(void *owner, int kind, void *tag, struct rval *v);
static void conn_on_push(void *owner, struct rval *v);
static void conn_on_event(void *owner, bool up, const char *why);

static const struct rconn_ops conn_ops = {
	.on_reply = conn_on_reply,
	.on_push = conn_on_push,
	.on_event = conn_on_event,
};

bool rp_node_ready(const struct rp_node *n)
{
	for (int i = 0; i < n->nconns; i++)
		if (n->conns[i].state == CS_READY)
			return true;
	return false;
}

void rp_node_free(struct rp_node *n)
{
	for (int i = 0; n->conns != NULL && i < n->nconns; i++)
		if (n->conns[i].timer != NULL)
			event_free(n->conns[i].timer);
	free(n->conns);
	free(n);
}

struct rp_node *rp_node_new(struct rpool *p, const char *host, int port, const char *path)
{
	struct rp_node *n = calloc(1, sizeof(*n));

	if (n == NULL)
		return NULL;
	n->pool = p;
	n->port = port;
	n->path = path;
	if (path != NULL)
		snprintf(n->name, sizeof(n->name), "%s", path);
	else {
		snprintf(n->host, sizeof(n->host), "%s", host);
		snprintf(n->name, sizeof(n->name), strchr(host, ':') ? "[%s]:%d" : "%s:%d", host,
			 port);
	}
	n->nconns = p->pool_size;
	n->conns = calloc((size_t)n->nconns, sizeof(*n->conns));
	if (n->conns == NULL) {
		free(n);
		return NULL;
	}
	for (int i = 0; i < n->nconns; i++) {
		struct rp_conn *c = &n->conns[i];
		c->node = n;
		c->idx = i;
		c->backoff_ms = p->backoff_min_ms;
		c->timer = evtimer_new(p->base, conn_timer_cb, c);
		if (c->timer == NULL) {
			rp_node_free(n);
			return NULL;
		}
	}
	n->next = p->nodes;
	p->nodes = n;
	return n;
}

struct rp_node *rp_node_get(struct rpool *p, const char *host, int port)
{
	for (struct rp_node *n = p->nodes; n != NULL; n = n->next)
		if (n->path == NULL && n->port == port && strcmp(n->host, host) == 0)
			return n;
	return rp_node_new(p, host, port, NULL);
}

void rp_node_activate(struct rp_node *n)
{
	if (n->active)
		return;
	n->active = true;
	log_info("redis node in use", "node=%s", n->name);
	for (int i = 0; i < n->nconns; i++)
		if (n->conns[i].state == CS_DISCONNECTED) {
			evtimer_del(n->conns[i].timer);
			conn_connect(&n->conns[i]);
		}
}

void rp_node_deactivate(struct rp_node *n, const char *why)
{
	if (!n->active)
		return;
	n->active = false;
	log_info("redis node no longer in use", "node=%s reason=\"%s\"", n->name, why);
	for (int i = 0; i < n->nconns; i++) {
		rp_conn_drop(&n->conns[i], why);
		evtimer_del(n->conns[i].timer);
	}
}

/* ---- connections ---- */

/* Schedule the next connect attempt: jittered, doubling up to the cap. */
static void conn_backoff(struct rp_conn *c)
{
	struct rpool *p = c->node->pool;
	int64_t d = c->backoff_ms, half = d / 2;
	struct timeval tv;

	c->state = CS_DISCONNECTED;
	if (!c->node->active || p->freeing)
		return;
	d = half + (int64_t)(rutil_rand(&p->rng) % (uint64_t)(d - half + 1));
	c->backoff_ms =
	    c->backoff_ms * 2 > p->backoff_max_ms ? p->backoff_max_ms : c->backoff_ms * 2;
	tv = rutil_tv(d);
	evtimer_add(c->timer, &tv);
}

/* See rpool_int.h. */
void rp_conn_drop(struct rp_conn *c, const char *why)
{
	struct rp_node *n = c->node;
	struct rpool *p = n->pool;
	struct rconn *rc = c->rc;
	bool was_ready = c->state == CS_READY;

	if (rc == NULL)
		return;
	/* A frozen Redis drops every handshake at its deadline, over and over:
	 * those lines come at most once a second; other drops are each logged. */
	if (!p->freeing && !was_ready)
		log_ratelimited(LOG_SLOT_REDIS_CONN, 1000, "redis connection dropped",
				"node=%s conn=%d state=connecting reason=\"%s\"", n->name, c->idx,
				why);
	else if (!p->freeing)
		log_warn("redis connection dropped", "node=%s conn=%d state=ready reason=\"%s\"",
			 n->name, c->idx, why);
	c->rc = NULL;
	c->state = CS_DISCONNECTED;
	n->tried = true;
	if (was_ready && !rp_node_ready(n))
		n->lost = true;
	evtimer_del(c->timer);
	rconn_free(rc);
	if (!p->freeing) {
		conn_backoff(c);
		rp_run_schedule(p); /* on_state */
		if (n->active)
			rtopo_node_lost(p->rtopo);
	}
}

static void conn_ready(struct rp_conn *c)
{
	if (c->node->lost) {
		c->node->lost = false;
		c->node->back = true;
	}
	c->node->tried = true;
	evtimer_del(c->timer);
	c->state = CS_READY;
	c->backoff_ms = c->node->pool->backoff_min_ms;
	log_info("redis connection ready", "node=%s conn=%d", c->node->name, c->idx);
	rp_run_schedule(c->node->pool);			       /* on_state */
	c->node->pool->node_ops->on_conn_ready(c->node->pool); /* parked calls */
}

static void conn_connect(struct rp_conn *c)
{
	struct rp_node *n = c->node;
	struct rpool *p = n->pool;
	struct timeval tv = rutil_tv(p->timeout_ms);
	char err[200];

	if (!n->active || p->freeing)
		return;
	c->rc =
	    rconn_new(p->base, n->host, n->port, n->path, p->tls, &conn_ops, c, err, sizeof(err));
	if (c->rc == NULL) {
		log_ratelimited(LOG_SLOT_REDIS, 1000, "redis connect failed",
				"node=%s conn=%d err=\"%s\"", n->name, c->idx, err);
		n->tried = true;
		conn_backoff(c);
		return;
	}
	c->state = CS_CONNECTING;
	evtimer_add(c->timer, &tv);
	if (!rp_hs_send(c))
		rp_conn_drop(c, "cannot queue the handshake");
}

/* The connection timer: reconnect after backoff, or give up a handshake. */
static void conn_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct rp_conn *c = arg;

	(void)fd;
	(void)what;
	if (c->state == CS_DISCONNECTED)
		conn_connect(c);
	else if (c->state != CS_READY)
		rp_conn_drop(c, "connect timeout");
}

static void conn_on_event(void *owner, bool up, const char *why)
{
	struct rp_conn *c = owner;

	if (!up)
		rp_conn_drop(c, why);
}

static void conn_on_push(void *owner, struct rval *v)
{
	struct rp_conn *c = owner;

	rval_free(v);
	rp_conn_drop(c, "reply with no command waiting");
}

static void conn_on_reply(void *owner, int kind, void *tag, struct rval *v)
{
	struct rp_conn *c = owner;
	char buf[256];

	if (kind == K_CALL) {
		c->node->pool->node_ops->on_call_reply(c, tag, v);
		return;
	}
	if (v == NULL || c->rc == NULL) {
		rval_free(v);
		return; /* the connection is going away */
	}
	if (kind == K_DISCARD) {
		if (v->type == RV_ERR)
			log_warn("redis command failed", "node=%s conn=%d err=\"%s\"",
				 c->node->name, c->idx, rutil_log_safe(v->s, buf, sizeof(buf)));
		rval_free(v);
		return;
	}
	if (!rp_hs_reply(c, (unsigned)(uintptr_t)tag, v)) {
		rval_free(v);
		rp_conn_drop(c, "handshake error");
		return;
	}
	rval_free(v);
	if (--c->hs_left == 0)
		conn_ready(c);
}
