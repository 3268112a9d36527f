/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rpool.c - calls, nodes and node connections of the Redis client (see
 * rpool.h; discovery of which nodes to use is rtopo.c).
 *
 * Owns: every struct rp_call (its formatted command, its timer, its reply
 * until delivery), every node and its connections (rconn.c) with their
 * handshake (AUTH, SELECT, ROLE for Sentinel, FUNCTION LOAD, SCRIPT LOAD,
 * TIME), FCALL or EVALSHA (sticky EVALSHA once a node refuses FUNCTION), reconnect
 * backoff, routing (master, or the owner of a call's slot), redirections
 * (MOVED, ASK, TRYAGAIN), and the delivery queue.
 *
 * One rule keeps re-entrancy manageable: user code (call callbacks,
 * on_state) only runs from the run event or from rpool_free, never from
 * inside a connection callback. A reply converts, queues the call on the
 * done list and activates the run event, so a user callback may submit
 * new calls or free the pool while no connection code is on the stack.
 *
 * A call is in flight on at most one connection (call->conn); when that
 * connection is freed every call in flight on it is completed with RP_CONN
 * at once (rconn_free delivers a NULL reply for each), so by the time the
 * run event delivers a call no connection refers to it and it is freed
 * there. A call that times out is completed at its timer and the
 * connection it is in flight on is freed (not politely).
 */

#include "rpool_int.h"

#include "clock.h"
#include "log.h"
#include "rconn.h"
#include "resp.h"
#include "tls.h"

#include <event2/event.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RP_NO_SCRIPT		  SIZE_MAX /* rp_call.script for a plain command */
#define RP_DEFAULT_BACKOFF_MIN_MS 50
#define RP_DEFAULT_BACKOFF_MAX_MS 2000
#define RP_MAX_POOL		  256
#define RP_MAX_REDIRECTS	  5
#define RP_TRYAGAIN_MS		  10 /* pause before retrying a TRYAGAIN */
#define RP_PARK_TICK_MS		  5

/* Handshake steps (the tag of a K_HS reply); SCRIPT LOAD i is HS_LOAD + i. */
enum { HS_AUTH = 0, HS_SELECT, HS_ROLE, HS_TIME, HS_FLOAD, HS_LOAD };
static const char *const hs_names[] = { "authenticating", "selecting",	       "role",
					"timing",	  "loading_functions", "loading_scripts" };

static void conn_connect(struct rp_conn *c);
static void call_timer_cb(evutil_socket_t fd, short what, void *arg);
static void conn_on_reply(void *owner, int kind, void *tag, struct rval *v);
static void conn_on_push(void *owner, struct rval *v);
static void conn_on_event(void *owner, bool up, const char *why);

static const struct rconn_ops conn_ops = {
	.on_reply = conn_on_reply,
	.on_push = conn_on_push,
	.on_event = conn_on_event,
};

/* ---- small helpers ---- */

struct timeval ms_to_tv(int64_t ms)
{
	struct timeval tv = { .tv_sec = (time_t)(ms / 1000),
			      .tv_usec = (suseconds_t)((ms % 1000) * 1000) };
	return tv;
}

/* Copy s for a quoted log value: quotes, backslashes and controls become '?'. */
const char *log_safe(const char *s, char *buf, size_t n)
{
	size_t i;

	if (s == NULL)
		return "";
	for (i = 0; s[i] != '\0' && i + 1 < n; i++)
		buf[i] = (s[i] == '"' || s[i] == '\\' || (unsigned char)s[i] < 0x20) ? '?' : s[i];
	buf[i] = '\0';
	return buf;
}

uint64_t rp_rand(struct rpool *p)
{
	/* xorshift64: jitter only, no need for quality or a clock read */
	p->rng ^= p->rng << 13;
	p->rng ^= p->rng >> 7;
	p->rng ^= p->rng << 17;
	return p->rng;
}

void run_schedule(struct rpool *p)
{
	event_active(p->run_ev, EV_TIMEOUT, 0);
}

bool rp_auth_refusal(const struct rpool *p, const struct rval *v, bool sentinel, const char **msg,
		     const char **fix)
{
	bool sent = (sentinel ? p->sentinel_password : p->password) != NULL;

	if (v == NULL || v->type != RV_ERR)
		return false;
	if (rval_is_err(v, "NOAUTH") || strstr(v->s, "Protocol error: unauthenticated") != NULL) {
		*msg = sentinel ? "the sentinel requires a password and none is set"
				: "redis requires a password and none is set";
		*fix = sentinel ? "set sentinel_password_file"
				: "set redis_password_file, or the password in the redis URL "
				  "(redis://:PASSWORD@host:port)";
		return true;
	}
	if (sent && (rval_is_err(v, "WRONGPASS") || strstr(v->s, "invalid password") != NULL)) {
		*msg =
		    sentinel ? "the sentinel refused the password" : "redis refused the password";
		*fix = sentinel ? "check sentinel_password_file"
				: "check redis_password_file (or the redis URL's password) and "
				  "redis_user";
		return true;
	}
	return false;
}

bool rp_send_argv(struct rconn *rc, int argc, const char **argv, int kind, void *tag)
{
	char *cmd;
	size_t len;
	bool ok;

	if (resp_format(argc, argv, NULL, &cmd, &len) != 0)
		return false;
	ok = rconn_send(rc, cmd, len, kind, tag) == 0;
	resp_free_cmd(cmd);
	return ok;
}

/* ---- calls ---- */

static void call_free(struct rp_call *call)
{
	if (call->timer != NULL)
		event_free(call->timer);
	rval_free(call->reply);
	rval_free(call->last_err);
	if (call->cmd != NULL)
		resp_free_cmd(call->cmd);
	free(call);
}

/*
 * call_new - a call owning its command formatted: prefix[0..npre) then
 * argv[0..argc). argvlen may be NULL (NUL-terminated arguments). slot is
 * the Cluster slot of key argv[keyarg] (keyarg < 0: none).
 */
static struct rp_call *call_new(struct rpool *p, size_t npre, const char *const *prefix,
				size_t argc, const char *const *argv, const size_t *argvlen,
				int keyarg, rpool_cb *cb, void *arg)
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
	call_free(call);
	return NULL;
}

/* The call's outcome is known: stop its timer and queue it for delivery. */
static void call_complete(struct rp_call *call, enum rp_status st, struct rval *reply)
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
	run_schedule(p);
}

/*
 * call_deliver - run the user callback of a completed call unlinked from
 * the done queue. The struct is freed first (no connection refers to it
 * any more), so nothing here touches it after the callback.
 */
static void call_deliver(struct rp_call *call)
{
	rpool_cb *cb = call->cb;
	void *arg = call->arg;
	enum rp_status st = call->st;
	struct rval *reply = call->reply;

	call->reply = NULL;
	call->delivered = true;
	call->pool->ncalls--;
	call_free(call);
	cb(arg, st, reply);
	rval_free(reply);
}

static struct rp_call *done_pop(struct rpool *p)
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

/* ---- nodes ---- */

bool node_ready(const struct rp_node *n)
{
	for (int i = 0; i < n->nconns; i++)
		if (n->conns[i].state == CS_READY)
			return true;
	return false;
}

static void node_free(struct rp_node *n)
{
	for (int i = 0; n->conns != NULL && i < n->nconns; i++)
		if (n->conns[i].timer != NULL)
			event_free(n->conns[i].timer);
	free(n->conns);
	free(n);
}

static void conn_timer_cb(evutil_socket_t fd, short what, void *arg);

static struct rp_node *node_new(struct rpool *p, const char *host, int port, const char *path)
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
			node_free(n);
			return NULL;
		}
	}
	n->next = p->nodes;
	p->nodes = n;
	return n;
}

struct rp_node *node_get(struct rpool *p, const char *host, int port)
{
	for (struct rp_node *n = p->nodes; n != NULL; n = n->next)
		if (n->path == NULL && n->port == port && strcmp(n->host, host) == 0)
			return n;
	return node_new(p, host, port, NULL);
}

void node_activate(struct rp_node *n)
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

static void conn_drop(struct rp_conn *c, const char *why);

void node_deactivate(struct rp_node *n, const char *why)
{
	if (!n->active)
		return;
	n->active = false;
	log_info("redis node no longer in use", "node=%s reason=\"%s\"", n->name, why);
	for (int i = 0; i < n->nconns; i++) {
		conn_drop(&n->conns[i], why);
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
	d = half + (int64_t)(rp_rand(p) % (uint64_t)(d - half + 1));
	c->backoff_ms =
	    c->backoff_ms * 2 > p->backoff_max_ms ? p->backoff_max_ms : c->backoff_ms * 2;
	tv = ms_to_tv(d);
	evtimer_add(c->timer, &tv);
}

/*
 * conn_drop - free the connection now (every call in flight on it
 * completes with RP_CONN, or RP_SHUTDOWN while the pool is freed) and
 * schedule a reconnect while its node is in use.
 */
static void conn_drop(struct rp_conn *c, const char *why)
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
	if (was_ready && !node_ready(n))
		n->lost = true;
	evtimer_del(c->timer);
	rconn_free(rc);
	if (!p->freeing) {
		conn_backoff(c);
		run_schedule(p); /* on_state */
		if (n->active)
			topo_node_lost(p, n);
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
	run_schedule(c->node->pool); /* on_state, parked calls */
	if (!TAILQ_EMPTY(&c->node->pool->parked)) {
		struct timeval tv = { 0, 0 };
		evtimer_add(c->node->pool->park_ev, &tv);
	}
}

/*
 * conn_handshake - queue the whole handshake at once (it leaves in one
 * write as soon as the connection is up): AUTH when there is a password,
 * SELECT when db != 0, ROLE (Sentinel: is it still the master?), SCRIPT
 * LOAD of every script, TIME. The connection is ready after the last reply.
 */
static bool conn_handshake(struct rp_conn *c)
{
	struct rpool *p = c->node->pool;
	char db[16];
	bool ok = true;

	c->hs_left = 0;
	if (p->password != NULL) {
		/* AUTH [user] password: the ACL form only when a user is set */
		const char *argv[3] = { "AUTH", p->user, p->password };
		if (p->user == NULL)
			ok = rp_send_argv(c->rc, 2, (const char *[]){ "AUTH", p->password }, K_HS,
					  (void *)(uintptr_t)HS_AUTH);
		else
			ok = rp_send_argv(c->rc, 3, argv, K_HS, (void *)(uintptr_t)HS_AUTH);
		c->hs_left++;
	}
	if (ok && p->url.db != 0 && p->topo != TOPO_CLUSTER) {
		const char *argv[2] = { "SELECT", db };
		snprintf(db, sizeof(db), "%d", p->url.db);
		ok = rp_send_argv(c->rc, 2, argv, K_HS, (void *)(uintptr_t)HS_SELECT);
		c->hs_left++;
	}
	if (ok && p->topo == TOPO_SENTINEL) {
		ok = rp_send_argv(c->rc, 1, (const char *[]){ "ROLE" }, K_HS,
				  (void *)(uintptr_t)HS_ROLE);
		c->hs_left++;
	}
	if (ok && p->fload_cmd != NULL && p->fcall >= 0) {
		ok = rconn_send(c->rc, p->fload_cmd, p->fload_len, K_HS,
				(void *)(uintptr_t)HS_FLOAD) == 0;
		c->hs_left++;
	}
	for (size_t i = 0; ok && i < p->nscripts; i++) {
		ok = rconn_send(c->rc, p->load_cmd[i], p->load_len[i], K_HS,
				(void *)(uintptr_t)(HS_LOAD + i)) == 0;
		c->hs_left++;
	}
	/* Redis's clock before the first call: callers bound when a call may
	 * still book (a script run late must book nothing). */
	if (ok) {
		ok = rp_send_argv(c->rc, 1, (const char *[]){ "TIME" }, K_HS,
				  (void *)(uintptr_t)HS_TIME);
		c->hs_left++;
	}
	return ok;
}

static void conn_connect(struct rp_conn *c)
{
	struct rp_node *n = c->node;
	struct rpool *p = n->pool;
	struct timeval tv = ms_to_tv(p->timeout_ms);
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
	if (!conn_handshake(c))
		conn_drop(c, "cannot queue the handshake");
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
		conn_drop(c, "connect timeout");
}

static void conn_on_event(void *owner, bool up, const char *why)
{
	struct rp_conn *c = owner;

	if (!up)
		conn_drop(c, why);
}

static void conn_on_push(void *owner, struct rval *v)
{
	struct rp_conn *c = owner;

	rval_free(v);
	conn_drop(c, "reply with no command waiting");
}

/* One handshake reply; false when the connection must be dropped. */
static bool conn_hs_reply(struct rp_conn *c, unsigned step, const struct rval *v)
{
	struct rpool *p = c->node->pool;
	const char *msg, *fix;
	char buf[256];

	if (rp_auth_refusal(p, v, false, &msg, &fix)) {
		log_warn(msg, "node=%s conn=%d step=%s fix=\"%s\" err=\"%s\"", c->node->name,
			 c->idx, hs_names[step < HS_LOAD ? step : HS_LOAD], fix,
			 log_safe(v->s, buf, sizeof(buf)));
		return false;
	}
	if (step == HS_FLOAD) {
		/* Loaded, or loaded before (by this build on another connection,
		 * or another pod): FCALL. Any other answer (Redis 6 has no
		 * FUNCTION, an ACL may deny it): EVALSHA, for good. */
		if (v->type == RV_STR ||
		    (v->type == RV_ERR && strstr(v->s, "already exists") != NULL)) {
			if (p->fcall == 0) {
				p->fcall = 1;
				log_info("redis functions loaded: calls use FCALL", "node=%s",
					 c->node->name);
			}
		} else if (p->fcall >= 0) {
			p->fcall = -1;
			log_info("redis functions unavailable: calls use EVALSHA",
				 "node=%s err=\"%s\"", c->node->name,
				 v->type == RV_ERR ? log_safe(v->s, buf, sizeof(buf)) : "?");
		}
		return true;
	}
	if (v->type == RV_ERR) {
		/* The server's message never contains the secret we sent. */
		log_warn("redis handshake failed", "node=%s conn=%d step=%s err=\"%s\"",
			 c->node->name, c->idx, hs_names[step < HS_LOAD ? step : HS_LOAD],
			 log_safe(v->s, buf, sizeof(buf)));
		return false;
	}
	if (step == HS_ROLE) {
		if (v->type != RV_ARR || v->n < 1 || v->a[0].type != RV_STR ||
		    strcmp(v->a[0].s, "master") != 0) {
			log_ratelimited(LOG_SLOT_REDIS_CONN, 1000, "redis node is not a master",
					"node=%s role=\"%s\"", c->node->name,
					v->type == RV_ARR && v->n > 0 && v->a[0].s
					    ? log_safe(v->a[0].s, buf, sizeof(buf))
					    : "?");
			topo_stale(p);
			return false;
		}
	} else if (step == HS_TIME) {
		if (v->type != RV_ARR || v->n != 2 || v->a[0].type != RV_STR ||
		    v->a[1].type != RV_STR) {
			log_warn("redis TIME: unexpected reply", "node=%s", c->node->name);
			return false;
		}
		p->clock_off = strtoll(v->a[0].s, NULL, 10) * 1000 +
			       strtoll(v->a[1].s, NULL, 10) / 1000 - clock_mono_ms();
		p->clock_known = true;
	} else if (step >= HS_LOAD) {
		size_t i = step - HS_LOAD;
		if (v->type != RV_STR || v->len != RP_SHA_LEN) {
			log_warn("redis SCRIPT LOAD: unexpected reply", "node=%s script=%zu",
				 c->node->name, i);
			return false;
		}
		memcpy(p->sha[i], v->s, RP_SHA_LEN);
		p->sha[i][RP_SHA_LEN] = '\0';
	}
	return true;
}

/* ---- routing and sending ---- */

/* The node a call goes to now, or NULL when none is known. */
static struct rp_node *call_route(struct rpool *p, const struct rp_call *call)
{
	if (p->topo != TOPO_CLUSTER)
		return p->master;
	if (call->ask != NULL)
		return call->ask;
	if (call->slot >= 0)
		return p->map_known ? p->slots[call->slot] : NULL;
	/* keyless: any node in use and ready, round robin over the list */
	for (struct rp_node *n = p->nodes; n != NULL; n = n->next)
		if (n->active && n->slots > 0 && node_ready(n))
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

/* Send call on c (after ASKING when it follows an ASK); -1 when c is dying. */
static int call_send(struct rp_conn *c, struct rp_call *call)
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

/* Send call where it goes now: 0 sent, -1 no ready connection there. */
static int call_dispatch(struct rpool *p, struct rp_call *call)
{
	struct rp_node *n = call_route(p, call);
	struct rp_conn *c = n != NULL ? pick_conn(n, call->affinity) : NULL;

	if (n != NULL) {
		call->node = n; /* a node that cannot take it is charged the failure */
		n->calls++;
	}
	if (c == NULL)
		return -1;
	return call_send(c, call);
}

static void park(struct rpool *p, struct rp_call *call, int64_t delay_ms)
{
	struct timeval tv = ms_to_tv(delay_ms < RP_PARK_TICK_MS ? RP_PARK_TICK_MS : delay_ms);

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
static void park_cb(evutil_socket_t fd, short what, void *arg)
{
	struct rpool *p = arg;
	struct rp_call *call, *tmp;
	int64_t now = clock_mono_ms();
	struct timeval tv = ms_to_tv(RP_PARK_TICK_MS);

	(void)fd;
	(void)what;
	for (call = TAILQ_FIRST(&p->parked); call != NULL; call = tmp) {
		struct rp_node *n;
		tmp = TAILQ_NEXT(call, plink);
		if (call->retry_at > now)
			continue;
		n = call_route(p, call);
		if (n == NULL || !n->active) {
			call_complete(call, RP_CONN, NULL); /* unlinks it */
			continue;
		}
		TAILQ_REMOVE(&p->parked, call, plink);
		call->parked = false;
		if (call_dispatch(p, call) != 0)
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
	return node_get(p, host, (int)port);
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
		topo_stale(p);
	} else {
		call->ask = n;
	}
	node_activate(n);
	if (call_dispatch(p, call) != 0)
		park_with(p, call, v, 0);
	return true;
}

static bool is_master_gone(const struct rval *v)
{
	return rval_is_err(v, "READONLY") || rval_is_err(v, "LOADING") ||
	       rval_is_err(v, "MASTERDOWN");
}

/* A reply (or NULL: the connection is being freed) to a call. */
static void call_reply(struct rp_conn *c, struct rp_call *call, struct rval *v)
{
	struct rpool *p = c->node->pool;

	call->conn = NULL;
	if (call->completed) { /* cannot happen: a timeout frees the connection */
		rval_free(v);
		return;
	}
	if (v == NULL) {
		call_complete(call, p->freeing ? RP_SHUTDOWN : RP_CONN, NULL);
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
			    call_send(c, call) == 0) {
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
			    call_send(c, call) == 0) {
				rval_free(v);
				return;
			}
		}
		if (p->topo == TOPO_CLUSTER && call_redirect(c, call, v)) {
			rval_free(v);
			return;
		}
		if (p->topo == TOPO_SENTINEL && is_master_gone(v))
			topo_stale(p);
	}
	call_complete(call, RP_OK, v);
}

static void conn_on_reply(void *owner, int kind, void *tag, struct rval *v)
{
	struct rp_conn *c = owner;
	char buf[256];

	if (kind == K_CALL) {
		call_reply(c, tag, v);
		return;
	}
	if (v == NULL || c->rc == NULL) {
		rval_free(v);
		return; /* the connection is going away */
	}
	if (kind == K_DISCARD) {
		if (v->type == RV_ERR)
			log_warn("redis command failed", "node=%s conn=%d err=\"%s\"",
				 c->node->name, c->idx, log_safe(v->s, buf, sizeof(buf)));
		rval_free(v);
		return;
	}
	if (!conn_hs_reply(c, (unsigned)(uintptr_t)tag, v)) {
		rval_free(v);
		conn_drop(c, "handshake error");
		return;
	}
	rval_free(v);
	if (--c->hs_left == 0)
		conn_ready(c);
}

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
		call_complete(call, RP_OK, v);
		return;
	}
	log_ratelimited(LOG_SLOT_REDIS_CALL, 1000, "redis call timed out",
			"node=%s timeout_ms=%lld", call->node ? call->node->name : "none",
			(long long)call->pool->timeout_ms);
	call_complete(call, RP_TIMEOUT, NULL);
	if (c != NULL)
		conn_drop(c, "call timeout");
}

static void call_arm(struct rp_call *call)
{
	struct timeval tv = ms_to_tv(call->pool->timeout_ms);

	evtimer_add(call->timer, &tv);
}

/* ---- the run event: deliveries, outside connection code ---- */

static void run_cb(evutil_socket_t fd, short what, void *arg)
{
	struct rpool *p = arg;
	struct rp_call *call;
	bool alive = true, up, came_up;

	(void)fd;
	(void)what;
	p->alive = &alive;
	while ((call = done_pop(p)) != NULL) {
		call_deliver(call);
		if (!alive)
			return; /* a callback freed the pool */
	}
	up = rpool_up(p);
	came_up = up && !p->reported_up;
	if (up != p->reported_up) {
		p->reported_up = up;
		if (p->on_state != NULL) {
			p->on_state(p->state_arg, up);
			if (!alive)
				return;
		}
	}
	for (struct rp_node *n = p->nodes; n != NULL; n = n->next) {
		if (!n->back || !node_ready(n))
			continue;
		n->back = false;
		/* The pool going up (on_state) already stands for every node. */
		if (up && !came_up && p->on_node_up != NULL) {
			p->on_node_up(p->state_arg, n->name);
			if (!alive)
				return;
		}
	}
	p->alive = NULL;
}

/* ---- public ---- */

static bool pool_tls(struct rpool *p, const struct rpool_conf *conf, char *err, size_t errlen)
{
	struct tls_conf tc = { .ca_file = conf->tls_ca_file,
			       .cert_file = conf->tls_cert_file,
			       .key_file = conf->tls_key_file,
			       .server_name = conf->tls_server_name,
			       .verify = !conf->tls_no_verify };

	if (!p->url.tls)
		return true;
	if (p->url.kind == REDIS_URL_UNIX) {
		snprintf(err, errlen, "redis url: TLS over a unix socket is not supported");
		return false;
	}
	p->tls = tls_ctx_new(&tc, err, errlen);
	return p->tls != NULL;
}

struct rpool *rpool_new(struct event_base *base, const struct rpool_conf *conf,
			const char *const *scripts, size_t nscripts,
			void (*on_state)(void *arg, bool up), void *state_arg, char *err,
			size_t errlen)
{
	struct rpool *p = NULL;
	const char *errpos = NULL;

	if (conf->pool_size < 1 || conf->pool_size > RP_MAX_POOL) {
		snprintf(err, errlen, "redis pool size must be in 1..%d", RP_MAX_POOL);
		return NULL;
	}
	if (conf->timeout_ms <= 0) {
		snprintf(err, errlen, "redis timeout must be > 0");
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	if (p == NULL)
		goto oom;
	TAILQ_INIT(&p->parked);
	if (redis_url_parse(conf->url, &p->url, err, errlen) < 0) {
		free(p);
		return NULL;
	}
	p->base = base;
	p->topo = p->url.kind == REDIS_URL_SENTINEL  ? TOPO_SENTINEL
		  : p->url.kind == REDIS_URL_CLUSTER ? TOPO_CLUSTER
						     : TOPO_SINGLE;
	p->user = conf->user ? conf->user : (p->url.user[0] ? p->url.user : NULL);
	p->password =
	    conf->password ? conf->password : (p->url.password[0] ? p->url.password : NULL);
	p->sentinel_password = conf->sentinel_password;
	p->timeout_ms = conf->timeout_ms;
	p->backoff_min_ms =
	    conf->backoff_min_ms > 0 ? conf->backoff_min_ms : RP_DEFAULT_BACKOFF_MIN_MS;
	p->backoff_max_ms =
	    conf->backoff_max_ms > 0 ? conf->backoff_max_ms : RP_DEFAULT_BACKOFF_MAX_MS;
	if (p->backoff_max_ms < p->backoff_min_ms)
		p->backoff_max_ms = p->backoff_min_ms;
	p->scripts = scripts;
	p->nscripts = nscripts;
	p->on_state = on_state;
	p->on_node_up = conf->on_node_up;
	p->state_arg = state_arg;
	p->pool_size = conf->pool_size;
	p->rng = ((uint64_t)(uintptr_t)p << 16) ^ (uint64_t)getpid() ^ 0x9e3779b97f4a7c15ULL;
	errpos = "calloc";
	p->sha = calloc(nscripts ? nscripts : 1, sizeof(*p->sha));
	p->load_cmd = calloc(nscripts ? nscripts : 1, sizeof(*p->load_cmd));
	p->load_len = calloc(nscripts ? nscripts : 1, sizeof(*p->load_len));
	if (p->sha == NULL || p->load_cmd == NULL || p->load_len == NULL)
		goto oom;
	errpos = "resp_format";
	for (size_t i = 0; i < nscripts; i++) {
		const char *argv[3] = { "SCRIPT", "LOAD", scripts[i] };
		if (resp_format(3, argv, NULL, &p->load_cmd[i], &p->load_len[i]) != 0)
			goto oom;
	}
	if (conf->library != NULL && conf->functions != NULL) {
		const char *argv[3] = { "FUNCTION", "LOAD", conf->library };
		if (resp_format(3, argv, NULL, &p->fload_cmd, &p->fload_len) != 0)
			goto oom;
		p->functions = conf->functions;
	}
	errpos = "event_new";
	p->run_ev = event_new(base, -1, 0, run_cb, p);
	p->park_ev = evtimer_new(base, park_cb, p);
	if (p->run_ev == NULL || p->park_ev == NULL)
		goto oom;
	if (p->topo == TOPO_CLUSTER) {
		errpos = "slot map";
		p->slots = calloc(SLOT_COUNT, sizeof(*p->slots));
		if (p->slots == NULL)
			goto oom;
	}
	if (!pool_tls(p, conf, err, errlen)) {
		rpool_free(p);
		return NULL;
	}
	if (p->topo == TOPO_SINGLE) {
		errpos = "node";
		p->master = p->url.kind == REDIS_URL_UNIX ? node_new(p, "", 0, p->url.path)
							  : node_get(p, p->url.host, p->url.port);
		if (p->master == NULL)
			goto oom;
		node_activate(p->master);
	} else {
		errpos = "topology";
		if (!topo_start(p))
			goto oom;
	}
	return p;
oom:
	snprintf(err, errlen, "redis pool: out of memory (%s)", errpos ? errpos : "calloc");
	rpool_free(p);
	return NULL;
}

size_t rpool_inflight(const struct rpool *p)
{
	return p->ncalls;
}

bool rpool_clock(const struct rpool *p, int64_t *offset_ms)
{
	*offset_ms = p->clock_off;
	return p->clock_known;
}

bool rpool_up(const struct rpool *p)
{
	bool ready = false;

	if (p->topo != TOPO_CLUSTER)
		return p->master != NULL && node_ready(p->master);
	if (!p->map_known)
		return false;
	/* Up once some master is ready and every master has had its first
	 * chance to connect: a master that cannot be reached then fails its
	 * own keys' calls only, but one still connecting at start is waited for. */
	for (const struct rp_node *n = p->nodes; n != NULL; n = n->next) {
		if (!n->active || n->slots == 0)
			continue;
		if (!n->tried)
			return false;
		ready |= node_ready(n);
	}
	return ready;
}

static bool args_ok(size_t argc, const char *const *argv)
{
	return argc <= (size_t)INT_MAX - 3 && (argc == 0 || argv != NULL);
}

bool rpool_functions(const struct rpool *p)
{
	return p->functions != NULL && p->fcall > 0;
}

int rpool_eval(struct rpool *p, size_t script, size_t nkeys, size_t argc, const char *const *argv,
	       const size_t *argvlen, rpool_cb *cb, void *arg)
{
	struct rpool_call one = { .script = script,
				  .nkeys = nkeys,
				  .argc = argc,
				  .argv = argv,
				  .argvlen = argvlen,
				  .cb = cb,
				  .arg = arg };

	return rpool_eval_multi(p, 1, &one);
}

int rpool_command(struct rpool *p, size_t argc, const char *const *argv, const size_t *argvlen,
		  rpool_cb *cb, void *arg)
{
	struct rp_call *call;

	if (argc == 0 || !args_ok(argc, argv) || cb == NULL || p->freeing)
		return -1;
	call = call_new(p, 0, NULL, argc, argv, argvlen, argc >= 2 ? 1 : -1, cb, arg);
	if (call == NULL)
		return -1;
	if (call_dispatch(p, call) != 0) {
		call_free(call);
		return -1;
	}
	p->ncalls++;
	call_arm(call);
	return 0;
}

int rpool_eval_multi(struct rpool *p, size_t ncalls, const struct rpool_call *calls)
{
	struct rp_call *inl[8], **built = inl;
	size_t i, sent = 0;
	unsigned aff;
	int rc = -1;

	for (i = 0; i < ncalls; i++)
		if (calls[i].script >= p->nscripts || calls[i].nkeys > calls[i].argc ||
		    !args_ok(calls[i].argc, calls[i].argv) || calls[i].cb == NULL)
			return -1;
	if (p->freeing || !rpool_up(p))
		return -1;
	if (ncalls == 0)
		return 0;
	if (ncalls > 8 && (built = calloc(ncalls, sizeof(*built))) == NULL)
		return -1;
	/* No affinity asked: still one connection for the batch, turn by turn. */
	aff = calls[0].affinity != 0 || ncalls == 1 ? calls[0].affinity : ++p->multi_rr;
	if (aff == 0 && ncalls > 1)
		aff = ++p->multi_rr;
	for (i = 0; i < ncalls; i++) {
		const struct rpool_call *in = &calls[i];
		char nk[24];
		bool fc = rpool_functions(p);
		const char *prefix[3] = { fc ? "FCALL" : "EVALSHA",
					  fc ? p->functions[in->script] : p->sha[in->script], nk };
		snprintf(nk, sizeof(nk), "%zu", in->nkeys);
		built[i] = call_new(p, 3, prefix, in->argc, in->argv, in->argvlen,
				    in->nkeys > 0 ? 0 : -1, in->cb, in->arg);
		if (built[i] == NULL)
			goto cleanup;
		built[i]->script = in->script;
		built[i]->fcall = fc;
		built[i]->affinity = aff;
	}
	/* All queued before we return to the loop: each connection writes its
	 * share as one pipeline. Past the first send the calls are accepted;
	 * one that cannot be sent then completes with RP_CONN. */
	for (i = 0; i < ncalls; i++)
		if (call_dispatch(p, built[i]) == 0) {
			p->ncalls++;
			call_arm(built[i]);
			sent++;
		}
	if (sent == 0)
		goto cleanup;
	for (i = 0; i < ncalls; i++)
		if (built[i]->conn == NULL) {
			p->ncalls++;
			call_complete(built[i], RP_CONN, NULL);
		}
	rc = 0;
	if (built != inl)
		free(built);
	return rc;
cleanup:
	for (i = 0; i < ncalls && built[i] != NULL; i++)
		call_free(built[i]);
	if (built != inl)
		free(built);
	return rc;
}

const char *rpool_topology(const struct rpool *p)
{
	return p->topo == TOPO_CLUSTER	  ? "cluster"
	       : p->topo == TOPO_SENTINEL ? "sentinel"
					  : "redis";
}

size_t rpool_nodes(const struct rpool *p, struct rpool_node_info *out, size_t max)
{
	size_t k = 0;

	for (const struct rp_node *n = p->nodes; n != NULL; n = n->next) {
		bool connecting = false;
		if (!n->active || (p->topo != TOPO_CLUSTER && n != p->master))
			continue;
		if (k < max) {
			struct rpool_node_info *o = &out[k];
			snprintf(o->addr, sizeof(o->addr), "%s", n->name);
			for (int i = 0; i < n->nconns; i++)
				connecting |= n->conns[i].state == CS_CONNECTING;
			o->state = node_ready(n) ? "ready" : connecting ? "connecting" : "down";
			o->slots = n->slots;
			o->calls = n->calls;
			o->failures = n->failures;
		}
		k++;
	}
	return k;
}

void rpool_free(struct rpool *p)
{
	struct rp_call *call;

	if (p == NULL || p->freeing)
		return; /* a callback run by the outer rpool_free: it finishes */
	p->freeing = true;
	if (p->alive != NULL)
		*p->alive = false;
	topo_free(p);
	/* Calls in flight come back with NULL and are queued as RP_SHUTDOWN;
	 * queued ones keep their status. */
	for (struct rp_node *n = p->nodes; n != NULL; n = n->next)
		for (int i = 0; i < n->nconns; i++)
			conn_drop(&n->conns[i], "shutdown");
	while ((call = TAILQ_FIRST(&p->parked)) != NULL)
		call_complete(call, RP_SHUTDOWN, NULL);
	while ((call = done_pop(p)) != NULL)
		call_deliver(call);
	while (p->nodes != NULL) {
		struct rp_node *n = p->nodes;
		p->nodes = n->next;
		node_free(n);
	}
	for (size_t i = 0; p->load_cmd != NULL && i < p->nscripts; i++)
		if (p->load_cmd[i] != NULL)
			resp_free_cmd(p->load_cmd[i]);
	free(p->load_cmd);
	free(p->load_len);
	if (p->fload_cmd != NULL)
		resp_free_cmd(p->fload_cmd);
	if (p->run_ev != NULL)
		event_free(p->run_ev);
	if (p->park_ev != NULL)
		event_free(p->park_ev);
	tls_ctx_free(p->tls);
	free(p->slots);
	free(p->sha);
	free(p);
}
