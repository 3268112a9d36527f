/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rpool.c - the Redis client's public face (see rpool.h): making and
 * freeing a pool, taking calls (rpool_eval, rpool_command,
 * rpool_eval_multi), the state callers may ask for, and the run event.
 * Calls, nodes, connections, replies and the topology's reports are the
 * other rpool_*.c files' (see rpool_int.h); discovery is rtopo.c's.
 *
 * One rule keeps re-entrancy manageable: user code (call callbacks,
 * on_state, on_node_up) only runs from the run event or from rpool_free,
 * never from inside a connection callback. A reply converts, queues the
 * call on the done list and activates the run event, so a user callback
 * may submit new calls or free the pool while no connection code is on
 * the stack.
 *
 * A call is in flight on at most one connection (call->conn); when that
 * connection is freed every call in flight on it is completed with RP_CONN
 * at once (rconn_free delivers a NULL reply for each), so by the time the
 * run event delivers a call no connection refers to it and it is freed
 * there. A call that times out is completed at its timer and the
 * connection it is in flight on is freed (not politely).
 */

#include "rpool_int.h"

#include "resp.h"
#include "rtopo.h"
#include "rutil.h"
#include "tls.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#define RP_DEFAULT_BACKOFF_MIN_MS 50
#define RP_DEFAULT_BACKOFF_MAX_MS 2000
#define RP_MAX_POOL		  256

/* What the node connections report up to the calls. */
static const struct rp_node_ops node_ops = {
	.on_call_reply = rp_call_reply,
	.on_conn_ready = rp_park_kick,
};

/* ---- the run event: deliveries, outside connection code ---- */

static void run_cb(evutil_socket_t fd, short what, void *arg)
{
	struct rpool *p = arg;
	struct rp_call *call;
	bool alive = true, up, came_up;

	(void)fd;
	(void)what;
	p->alive = &alive;
	while ((call = rp_call_done_pop(p)) != NULL) {
		rp_call_deliver(call);
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
		if (!n->back || !rp_node_ready(n))
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

/* SENTINEL, CLUSTER: start discovery, which reports to rpool_map.c. */
static bool pool_topo(struct rpool *p)
{
	struct rtopo_conf tc = { .kind = p->topo == TOPO_SENTINEL ? RTOPO_SENTINEL : RTOPO_CLUSTER,
				 .base = p->base,
				 .url = &p->url,
				 .tls = p->url.tls ? p->tls : NULL,
				 .user = p->user,
				 .password = p->password,
				 .sentinel_password = p->sentinel_password,
				 .timeout_ms = p->timeout_ms,
				 .backoff_min_ms = p->backoff_min_ms,
				 .backoff_max_ms = p->backoff_max_ms };

	p->rtopo = rtopo_new(&tc, &rp_map_ops, p);
	return p->rtopo != NULL;
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
	p->rng = rutil_seed(p);
	p->node_ops = &node_ops;
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
	p->park_ev = evtimer_new(base, rp_park_cb, p);
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
		p->master = p->url.kind == REDIS_URL_UNIX
				? rp_node_new(p, "", 0, p->url.path)
				: rp_node_get(p, p->url.host, p->url.port);
		if (p->master == NULL)
			goto oom;
		rp_node_activate(p->master);
	} else {
		errpos = "topology";
		if (!pool_topo(p))
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
		return p->master != NULL && rp_node_ready(p->master);
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
		ready |= rp_node_ready(n);
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
	call = rp_call_new(p, 0, NULL, argc, argv, argvlen, argc >= 2 ? 1 : -1, cb, arg);
	if (call == NULL)
		return -1;
	if (rp_call_dispatch(p, call) != 0) {
		rp_call_free(call);
		return -1;
	}
	p->ncalls++;
	rp_call_arm(call);
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
		built[i] = rp_call_new(p, 3, prefix, in->argc, in->argv, in->argvlen,
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
		if (rp_call_dispatch(p, built[i]) == 0) {
			p->ncalls++;
			rp_call_arm(built[i]);
			sent++;
		}
	if (sent == 0)
		goto cleanup;
	for (i = 0; i < ncalls; i++)
		if (built[i]->conn == NULL) {
			p->ncalls++;
			rp_call_complete(built[i], RP_CONN, NULL);
		}
	rc = 0;
	if (built != inl)
		free(built);
	return rc;
cleanup:
	for (i = 0; i < ncalls && built[i] != NULL; i++)
		rp_call_free(built[i]);
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
			o->state = rp_node_ready(n) ? "ready" : connecting ? "connecting" : "down";
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
	rtopo_free(p->rtopo);
	p->rtopo = NULL;
	/* Calls in flight come back with NULL and are queued as RP_SHUTDOWN;
	 * queued ones keep their status. */
	for (struct rp_node *n = p->nodes; n != NULL; n = n->next)
		for (int i = 0; i < n->nconns; i++)
			rp_conn_drop(&n->conns[i], "shutdown");
	while ((call = TAILQ_FIRST(&p->parked)) != NULL)
		rp_call_complete(call, RP_SHUTDOWN, NULL);
	while ((call = rp_call_done_pop(p)) != NULL)
		rp_call_deliver(call);
	while (p->nodes != NULL) {
		struct rp_node *n = p->nodes;
		p->nodes = n->next;
		rp_node_free(n);
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
