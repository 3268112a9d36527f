/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rpool_call.c - the pool's calls: each struct rp_call from its making
 * (the command formatted once, kept for retries; its Cluster slot) to its
 * delivery: routing (the master, or the owner of its slot, or any ready
 * node), the choice of connection (by affinity, else round robin), the
 * send, its deadline (which completes it with RP_TIMEOUT and frees the
 * connection it is in flight on, not politely), and the done queue that
 * the run event (rpool.c) empties. What a reply sets off is
 * rpool_reply.c's.
 */

#include "rpool_int.h"

#include "log.h"
#include "rconn.h"
#include "resp.h"
#include "rutil.h"

#include <stdlib.h>
#include <string.h>

static void call_timer_cb(evutil_socket_t fd, short what, void *arg);

void rp_call_free(struct rp_call *call)
{
	if (call->timer != NULL)
		event_free(call->timer);
	rval_free(call->reply);
	rval_free(call->last_err);
	if (call->cmd != NULL)
		resp_free_cmd(call->cmd);
	free(call);
}

struct rp_call *rp_call_new(struct rpool *p, size_t npre, const char *const *prefix, size_t argc,
			    const char *const *argv, const size_t *argvlen, int keyarg,
			    rpool_cb *cb, void *arg)
{
	struct rp_call *call = calloc(1, sizeof(*call));
	const char *inl[32];
	size_t inlen[32];
	const char **v = inl;
	size_t *l = inlen, n = npre + argc, i;
	int rc;

	if (call == NULL)
		return NULL;
	call->pool = p;
	call->cb = cb;
	call->arg = arg;
	call->script = RP_NO_SCRIPT;
	call->slot = -1;
	if (n > 32) {
		v = malloc(n * sizeof(*v));
		l = malloc(n * sizeof(*l));
	}
	call->timer = evtimer_new(p->base, call_timer_cb, call);
	if (v == NULL || l == NULL || call->timer == NULL)
		goto fail;
	for (i = 0; i < npre; i++) {
		v[i] = prefix[i];
		l[i] = strlen(prefix[i]);
	}
	for (i = 0; i < argc; i++) {
		v[npre + i] = argv[i];
		l[npre + i] = argvlen ? argvlen[i] : strlen(argv[i]);
	}
	rc = resp_format((int)n, v, l, &call->cmd, &call->cmdlen);
	if (rc != 0)
		goto fail;
	if (keyarg >= 0 && (size_t)keyarg < argc)
		call->slot = (int)key_slot(argv[keyarg], l[npre + (size_t)keyarg]);
	if (v != inl) {
		free(v);
		free(l);
	}
	return call;
fail:
	if (v != inl) {
		free(v);
		free(l);
	}
	rp_call_free(call);
	return NULL;
}

void rp_call_complete(struct rp_call *call, enum rp_status st, struct rval *reply)
{
	struct rpool *p = call->pool;

	call->completed = true;
	call->st = st;
	call->reply = reply;
	if (call->node != NULL && (st != RP_OK || (reply != NULL && reply->type == RV_ERR)))
		call->node->failures++;
	evtimer_del(call->timer);
	if (call->parked) {
		TAILQ_REMOVE(&p->parked, call, plink);
		call->parked = false;
	}
	call->next = NULL;
	if (p->done_tail != NULL)
		p->done_tail->next = call;
	else
		p->done_head = call;
	p->done_tail = call;
	rp_run_schedule(p);
}

/*
 * rp_call_deliver - run the user callback of a completed call unlinked from
 * the done queue. The struct is freed first (no connection refers to it
 * any more), so nothing here touches it after the callback.
 */
void rp_call_deliver(struct rp_call *call)
{
	rpool_cb *cb = call->cb;
	void *arg = call->arg;
	enum rp_status st = call->st;
	struct rval *reply = call->reply;

	call->reply = NULL;
	call->delivered = true;
	call->pool->ncalls--;
	rp_call_free(call);
	cb(arg, st, reply);
	rval_free(reply);
}

struct rp_call *rp_call_done_pop(struct rpool *p)
{
	struct rp_call *call = p->done_head;

	if (call != NULL) {
		p->done_head = call->next;
		if (p->done_head == NULL)
			p->done_tail = NULL;
		call->next = NULL;
	}
	return call;
}

/* ---- routing and sending ---- */

struct rp_node *rp_call_route(struct rpool *p, const struct rp_call *call)
{
	if (p->topo != TOPO_CLUSTER)
		return p->master;
	if (call->ask != NULL)
		return call->ask;
	if (call->slot >= 0)
		return p->map_known ? p->slots[call->slot] : NULL;
	/* keyless: any node in use and ready, round robin over the list */
	for (struct rp_node *n = p->nodes; n != NULL; n = n->next)
		if (n->active && n->slots > 0 && rp_node_ready(n))
			return n;
	return NULL;
}

/*
 * A ready connection of n: for affinity A > 0, the A-th one (or the next
 * ready after it), so that calls with the same affinity run in the order
 * sent while that connection lives; for 0, round robin.
 */
static struct rp_conn *pick_conn(struct rp_node *n, unsigned affinity)
{
	int start = affinity != 0 ? (int)(affinity % (unsigned)n->nconns) : n->rr;

	if (n->pool->freeing)
		return NULL;
	for (int i = 0; i < n->nconns; i++) {
		struct rp_conn *c = &n->conns[(start + i) % n->nconns];
		if (c->state == CS_READY) {
			if (affinity == 0)
				n->rr = (c->idx + 1) % n->nconns;
			return c;
		}
	}
	return NULL;
}

static const char asking_cmd[] = "*1\r\n$6\r\nASKING\r\n";

int rp_call_send(struct rp_conn *c, struct rp_call *call)
{
	if (call->ask != NULL &&
	    rconn_send(c->rc, asking_cmd, sizeof(asking_cmd) - 1, K_DISCARD, NULL) != 0)
		return -1;
	if (rconn_send(c->rc, call->cmd, call->cmdlen, K_CALL, call) != 0)
		return -1;
	call->ask = NULL;
	call->conn = c;
	return 0;
}

int rp_call_dispatch(struct rpool *p, struct rp_call *call)
{
	struct rp_node *n = rp_call_route(p, call);
	struct rp_conn *c = n != NULL ? pick_conn(n, call->affinity) : NULL;

	if (n != NULL) {
		call->node = n; /* a node that cannot take it is charged the failure */
		n->calls++;
	}
	if (c == NULL)
		return -1;
	return rp_call_send(c, call);
}

/* ---- deadlines ---- */

/* A call's deadline: complete it, and free its connection (not politely). */
static void call_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct rp_call *call = arg;
	struct rp_conn *c = call->conn;

	(void)fd;
	(void)what;
	if (call->completed)
		return;
	if (c == NULL && call->last_err != NULL) {
		/* parked after a redirection: it never ran; say why */
		struct rval *v = call->last_err;
		call->last_err = NULL;
		rp_call_complete(call, RP_OK, v);
		return;
	}
	log_ratelimited(LOG_SLOT_REDIS_CALL, 1000, "redis call timed out",
			"node=%s timeout_ms=%lld", call->node ? call->node->name : "none",
			(long long)call->pool->timeout_ms);
	rp_call_complete(call, RP_TIMEOUT, NULL);
	if (c != NULL)
		rp_conn_drop(c, "call timeout");
}

void rp_call_arm(struct rp_call *call)
{
	struct timeval tv = rutil_tv(call->pool->timeout_ms);

	evtimer_add(call->timer, &tv);
}
