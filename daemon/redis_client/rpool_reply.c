/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rpool_reply.c - what a call's reply sets off before the call completes:
 * NOSCRIPT answered by SCRIPT LOAD and one retry, "Function not found" by
 * FUNCTION LOAD and one retry (both on the same connection, whose pipeline
 * keeps the order); in a Cluster, MOVED and ASK followed (at most
 * RP_MAX_REDIRECTS) and TRYAGAIN retried after a pause, through the parked
 * calls and their timer; in a Sentinel deployment, READONLY, LOADING and
 * MASTERDOWN reported to the topology. Owns the parked list (p->parked,
 * p->park_ev).
 */

#include "rpool_int.h"

#include "clock.h"
#include "log.h"
#include "rconn.h"
#include "rtopo.h"
#include "rutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RP_MAX_REDIRECTS 5
#define RP_TRYAGAIN_MS	 10 /* pause before retrying a TRYAGAIN */
#define RP_PARK_TICK_MS	 5

static void park(struct rpool *p, struct rp_call *call, int64_t delay_ms)
{
	struct timeval tv = rutil_tv(delay_ms < RP_PARK_TICK_MS ? RP_PARK_TICK_MS : delay_ms);

	call->retry_at = clock_mono_ms() + delay_ms;
	if (!call->parked) {
		TAILQ_INSERT_TAIL(&p->parked, call, plink);
		call->parked = true;
	}
	if (!evtimer_pending(p->park_ev, NULL))
		evtimer_add(p->park_ev, &tv);
}

/*
 * Park a call that a redirection (v) has not let run: if its deadline
 * comes while it is parked, it completes with a copy of v (it certainly did
 * not run), not with RP_TIMEOUT.
 */
static void park_with(struct rpool *p, struct rp_call *call, const struct rval *v, int64_t delay_ms)
{
	rval_free(call->last_err);
	call->last_err = rval_copy(v);
	park(p, call, delay_ms);
}

/* Parked calls whose time has come: sent when their node is ready. */
void rp_park_cb(evutil_socket_t fd, short what, void *arg)
{
	struct rpool *p = arg;
	struct rp_call *call, *tmp;
	int64_t now = clock_mono_ms();
	struct timeval tv = rutil_tv(RP_PARK_TICK_MS);

	(void)fd;
	(void)what;
	for (call = TAILQ_FIRST(&p->parked); call != NULL; call = tmp) {
		struct rp_node *n;
		tmp = TAILQ_NEXT(call, plink);
		if (call->retry_at > now)
			continue;
		n = rp_call_route(p, call);
		if (n == NULL || !n->active) {
			rp_call_complete(call, RP_CONN, NULL); /* unlinks it */
			continue;
		}
		TAILQ_REMOVE(&p->parked, call, plink);
		call->parked = false;
		if (rp_call_dispatch(p, call) != 0)
			park(p, call, 0); /* not ready yet: its deadline bounds the wait */
	}
	if (!TAILQ_EMPTY(&p->parked))
		evtimer_add(p->park_ev, &tv);
}

/* "MOVED 3999 127.0.0.1:6381": the slot and the node (NULL when malformed). */
static struct rp_node *parse_redirect(struct rpool *p, const struct rp_conn *from,
				      const struct rval *v, int *slot)
{
	char host[REDIS_URL_HOST_MAX];
	const char *sp1 = strchr(v->s, ' '), *sp2, *colon;
	long s, port;
	char *end;

	if (sp1 == NULL)
		return NULL;
	s = strtol(sp1 + 1, &end, 10);
	if (end == sp1 + 1 || *end != ' ' || s < 0 || s >= SLOT_COUNT)
		return NULL;
	sp2 = end;
	colon = strrchr(sp2, ':');
	if (colon == NULL)
		return NULL;
	port = strtol(colon + 1, &end, 10);
	if (end == colon + 1 || *end != '\0' || port < 1 || port > 65535)
		return NULL;
	if ((size_t)(colon - sp2 - 1) >= sizeof(host))
		return NULL;
	memcpy(host, sp2 + 1, (size_t)(colon - sp2 - 1));
	host[colon - sp2 - 1] = '\0';
	if (host[0] == '[' && strlen(host) > 2 && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	if (host[0] == '\0' || strcmp(host, "?") == 0) /* the node we asked */
		snprintf(host, sizeof(host), "%s", from->node->host);
	*slot = (int)s;
	return rp_node_get(p, host, (int)port);
}

/*
 * A Cluster redirection for call (in flight on c until now): true when it
 * is taken care of (sent again or parked), false to complete the call with
 * the reply as it is.
 */
static bool call_redirect(struct rp_conn *c, struct rp_call *call, const struct rval *v)
{
	struct rpool *p = c->node->pool;
	bool moved = rval_is_err(v, "MOVED"), ask = rval_is_err(v, "ASK");
	struct rp_node *n;
	int slot;

	if (!moved && !ask && !rval_is_err(v, "TRYAGAIN"))
		return false;
	if (p->freeing)
		return false;
	if (!moved && !ask) {
		/* A slot migrating with its keys split across two nodes: again
		 * and again until it is whole, within the call's deadline. */
		call->redirects = 0; /* paced: no tight loop to guard against */
		park_with(p, call, v, RP_TRYAGAIN_MS);
		return true;
	}
	if (call->redirects++ >= RP_MAX_REDIRECTS)
		return false;
	n = parse_redirect(p, c, v, &slot);
	if (n == NULL)
		return false;
	if (moved) {
		if (p->slots[slot] != NULL)
			p->slots[slot]->slots--;
		p->slots[slot] = n;
		n->slots++;
		rtopo_stale(p->rtopo);
	} else {
		call->ask = n;
	}
	rp_node_activate(n);
	if (rp_call_dispatch(p, call) != 0)
		park_with(p, call, v, 0);
	return true;
}

static bool is_master_gone(const struct rval *v)
{
	return rval_is_err(v, "READONLY") || rval_is_err(v, "LOADING") ||
	       rval_is_err(v, "MASTERDOWN");
}

/* See rpool_int.h. */
void rp_call_reply(struct rp_conn *c, struct rp_call *call, struct rval *v)
{
	struct rpool *p = c->node->pool;

	call->conn = NULL;
	if (call->completed) { /* cannot happen: a timeout frees the connection */
		rval_free(v);
		return;
	}
	if (v == NULL) {
		rp_call_complete(call, p->freeing ? RP_SHUTDOWN : RP_CONN, NULL);
		return;
	}
	if (v->type == RV_ERR) {
		if (call->script != RP_NO_SCRIPT && !call->retried && rval_is_err(v, "NOSCRIPT")) {
			/* Redis restarted or flushed: reload, then retry once on the
			 * same connection (the pipeline keeps the order). */
			call->retried = true;
			log_info("redis NOSCRIPT: reloading script", "node=%s conn=%d script=%zu",
				 c->node->name, c->idx, call->script);
			if (rconn_send(c->rc, p->load_cmd[call->script], p->load_len[call->script],
				       K_DISCARD, NULL) == 0 &&
			    rp_call_send(c, call) == 0) {
				rval_free(v);
				return;
			}
		}
		if (call->fcall && !call->retried && strstr(v->s, "Function not found") != NULL) {
			/* FUNCTION FLUSH (or a node that never had it): load the
			 * library, then retry once on the same connection. */
			call->retried = true;
			log_info("redis function not found: loading the library", "node=%s conn=%d",
				 c->node->name, c->idx);
			if (rconn_send(c->rc, p->fload_cmd, p->fload_len, K_DISCARD, NULL) == 0 &&
			    rp_call_send(c, call) == 0) {
				rval_free(v);
				return;
			}
		}
		if (p->topo == TOPO_CLUSTER && call_redirect(c, call, v)) {
			rval_free(v);
			return;
		}
		if (p->topo == TOPO_SENTINEL && is_master_gone(v))
			rtopo_stale(p->rtopo);
	}
	rp_call_complete(call, RP_OK, v);
}

void rp_park_kick(struct rpool *p)
{
	if (!TAILQ_EMPTY(&p->parked)) {
		struct timeval tv = { 0, 0 };
		evtimer_add(p->park_ev, &tv);
	}
}
