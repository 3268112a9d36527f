/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rtopo.c - which nodes the pool uses: the master named by Sentinels, or
 * the masters of a Redis Cluster's slot map (see rtopo.h).
 *
 * Owns: the control connection (to one sentinel, or to one cluster node),
 * its reconnect timer, and when to ask again. What it learns goes to its
 * owner through struct rtopo_ops (the pool's rpool_map.c applies it); it
 * never sees the pool's nodes or data connections.
 *
 * Sentinel: the control connection asks SENTINEL get-master-addr-by-name
 * and then SUBSCRIBEs to +switch-master on the same connection, so a
 * failover is seen as soon as that sentinel announces it. To ask again
 * (a data connection lost, a node that says it is not the master, a
 * READONLY/LOADING/MASTERDOWN reply) the control connection is made anew:
 * its first reply is the current answer. Sentinels are tried in turn.
 * A subscribed connection hears nothing while no failover happens, so a
 * sentinel that vanished (stopped, partitioned, its host gone) would go
 * unnoticed, and with it the next failover: it is PINGed every
 * RT_PING_MS (PING is allowed in subscribed mode), and one not answered by
 * the next PING drops it for the next sentinel. TCP keepalive (rconn.c)
 * is the second net, for a host that is gone.
 *
 * Cluster: the control connection asks CLUSTER SLOTS of a seed (or of a
 * master it knows), on start, every RT_REFRESH_MS, and soon after a
 * MOVED or a lost node connection; one not answered within RT_REFRESH_MS
 * (or redis_timeout, when longer) is asked of the next node.
 *
 * Nothing here runs user code; the changes that come from inside a
 * connection callback (rtopo_stale, rtopo_node_lost) are acted on from the
 * kick event, outside it.
 */

#include "rtopo.h"

#include "clock.h"
#include "log.h"
#include "rconn.h"
#include "resp.h"
#include "rutil.h"
#include "slot.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RT_REFRESH_MS 2000 /* CLUSTER SLOTS when nothing asked for it sooner */
#define RT_MIN_GAP_MS 100  /* between two asks */
#define RT_PING_MS    1000 /* SENTINEL: PING interval and answer deadline, at least */
/*
 * After +selected-slave: how long the selected replica stays the master in
 * use while it is not promoted yet (ROLE says slave), whatever a sentinel
 * still answers; a failover that has not finished by then is asked anew.
 */
#define RT_FAILOVER_MS 5000

enum { KC_AUTH = 1, KC_ADDR, KC_SUB, KC_SLOTS, KC_PING };

struct rtopo {
	struct rtopo_conf conf;
	const struct rtopo_ops *ops;
	void *owner;
	struct rconn *rc;
	bool ready;		       /* SENTINEL: subscribed; CLUSTER: a map read */
	bool slots_pending;	       /* CLUSTER SLOTS sent, no reply yet */
	bool stale;		       /* ask again soon */
	bool drop_master;	       /* SENTINEL: drop the master's connections too */
	bool ping_pending;	       /* SENTINEL: a PING sent and not answered yet */
	unsigned tries;		       /* connect attempts: picks the address */
	char host[REDIS_URL_HOST_MAX]; /* of rc */
	int port;
	struct event *timer; /* connect deadline, or reconnect backoff */
	struct event *kick;  /* act on stale / lost, outside connection callbacks */
	struct event *tick;  /* CLUSTER: periodic refresh */
	struct event *ping;  /* SENTINEL: PING the subscribed connection */
	int64_t backoff_ms;
	int64_t last_ask_ms;
	int64_t failover_until; /* SENTINEL: moving to a selected replica until then */
	uint64_t rng;		/* jitter */
	bool map_read;		/* CLUSTER: a map was applied once (logged) */
	bool freeing;		/* rtopo_free in progress */
};

static void ctl_connect(struct rtopo *t);
static void ctl_on_reply(void *owner, int kind, void *tag, struct rval *v);
static void ctl_on_push(void *owner, struct rval *v);
static void ctl_on_event(void *owner, bool up, const char *why);

static const struct rconn_ops ctl_ops = {
	.on_reply = ctl_on_reply,
	.on_push = ctl_on_push,
	.on_event = ctl_on_event,
};

static const char *topo_what(const struct rtopo *t)
{
	return t->conf.kind == RTOPO_SENTINEL ? "sentinel" : "cluster node";
}

/* Close the control connection; reconnect after a (jittered) backoff. */
static void ctl_drop(struct rtopo *t, const char *why, bool next_address, bool at_once)
{
	struct rconn *rc = t->rc;
	int64_t d = t->backoff_ms, half = d / 2;
	struct timeval tv;

	if (rc != NULL) {
		if (!t->freeing && why != NULL)
			log_ratelimited(LOG_SLOT_REDIS_CONN, 1000,
					"redis control connection closed", "%s=%s:%d reason=\"%s\"",
					topo_what(t), t->host, t->port, why);
		t->rc = NULL;
		rconn_free(rc);
	}
	t->ready = false;
	t->slots_pending = false;
	t->ping_pending = false;
	evtimer_del(t->timer);
	evtimer_del(t->ping);
	if (t->freeing)
		return;
	if (next_address)
		t->tries++;
	if (at_once) {
		d = 0;
	} else {
		d = half + (int64_t)(rutil_rand(&t->rng) % (uint64_t)(d - half + 1));
		t->backoff_ms = t->backoff_ms * 2 > t->conf.backoff_max_ms ? t->conf.backoff_max_ms
									   : t->backoff_ms * 2;
	}
	tv = rutil_tv(d);
	evtimer_add(t->timer, &tv);
}

/* The address of the next attempt: masters of the map first, then seeds. */
static void ctl_pick(struct rtopo *t, const char **host, int *port)
{
	const struct redis_url *url = t->conf.url;
	size_t known = 0, k;

	if (t->conf.kind == RTOPO_CLUSTER)
		known = t->ops->master_addr(t->owner, 0, host, port);
	k = t->tries % (known + url->nhosts);
	if (k >= known) {
		*host = url->hosts[k - known].host;
		*port = url->hosts[k - known].port;
		return;
	}
	t->ops->master_addr(t->owner, k, host, port);
}

static bool ctl_send_slots(struct rtopo *t)
{
	if (t->rc == NULL || t->slots_pending)
		return true;
	t->last_ask_ms = clock_mono_ms();
	t->stale = false;
	if (!rutil_send_argv(t->rc, 2, (const char *[]){ "CLUSTER", "SLOTS" }, KC_SLOTS, NULL))
		return false;
	t->slots_pending = true;
	return true;
}

static void ctl_connect(struct rtopo *t)
{
	const struct rtopo_conf *cf = &t->conf;
	struct timeval tv = rutil_tv(cf->timeout_ms);
	const char *host = NULL, *pass;
	char err[200];
	bool ok = true;

	ctl_pick(t, &host, &t->port);
	snprintf(t->host, sizeof(t->host), "%s", host);
	t->rc = rconn_new(cf->base, t->host, t->port, NULL, cf->tls, &ctl_ops, t, err, sizeof(err));
	if (t->rc == NULL) {
		log_ratelimited(LOG_SLOT_REDIS, 1000, "redis connect failed", "%s=%s:%d err=\"%s\"",
				topo_what(t), t->host, t->port, err);
		ctl_drop(t, NULL, true, false);
		return;
	}
	t->last_ask_ms = clock_mono_ms();
	evtimer_add(t->timer, &tv);
	pass = cf->kind == RTOPO_SENTINEL ? cf->sentinel_password : cf->password;
	if (pass != NULL) {
		if (cf->kind == RTOPO_CLUSTER && cf->user != NULL)
			ok = rutil_send_argv(t->rc, 3, (const char *[]){ "AUTH", cf->user, pass },
					     KC_AUTH, NULL);
		else
			ok = rutil_send_argv(t->rc, 2, (const char *[]){ "AUTH", pass }, KC_AUTH,
					     NULL);
	}
	if (cf->kind == RTOPO_SENTINEL) {
		const char *ask[3] = { "SENTINEL", "get-master-addr-by-name", cf->url->master };
		/* One reply is waited for; the second channel's confirmation
		 * comes as a push and is ignored. */
		const char *sub[3] = { "SUBSCRIBE", "+switch-master", "+selected-slave" };
		ok = ok && rutil_send_argv(t->rc, 3, ask, KC_ADDR, NULL) &&
		     rutil_send_argv(t->rc, 3, sub, KC_SUB, NULL);
	} else {
		t->stale = false;
		ok = ok && ctl_send_slots(t);
	}
	if (!ok)
		ctl_drop(t, "cannot queue the request", true, false);
}

static void ctl_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct rtopo *t = arg;

	(void)fd;
	(void)what;
	if (t->rc == NULL)
		ctl_connect(t);
	else if (!t->ready)
		ctl_drop(t, "timeout", true, false);
}

/* ---- Sentinel ---- */

/* The PING interval, which is also the deadline of its answer. */
static struct timeval ping_tv(const struct rtopo *t)
{
	return rutil_tv(t->conf.timeout_ms > RT_PING_MS ? t->conf.timeout_ms : RT_PING_MS);
}

/*
 * The subscribed connection's PING: the previous one unanswered means the
 * sentinel is gone (a stopped process keeps its sockets open, so TCP says
 * nothing): drop it and subscribe to the next sentinel at once.
 */
static void ctl_ping_cb(evutil_socket_t fd, short what, void *arg)
{
	struct rtopo *t = arg;
	struct timeval tv = ping_tv(t);

	(void)fd;
	(void)what;
	if (t->rc == NULL || !t->ready)
		return;
	if (t->ping_pending) {
		log_warn("sentinel stopped answering: subscribing to the next one",
			 "sentinel=%s:%d waited_ms=%lld", t->host, t->port,
			 (long long)tv.tv_sec * 1000 + (long long)tv.tv_usec / 1000);
		ctl_drop(t, "no answer to PING", true, true);
		return;
	}
	if (!rutil_send_argv(t->rc, 1, (const char *[]){ "PING" }, KC_PING, NULL)) {
		ctl_drop(t, "cannot send PING", true, false);
		return;
	}
	t->ping_pending = true;
	evtimer_add(t->ping, &tv);
}

static void sentinel_addr_reply(struct rtopo *t, const struct rval *v)
{
	const char *msg, *fix;
	char buf[200];
	long port;
	char *end;

	if (v->type == RV_ARR && v->n == 2 && v->a[0].type == RV_STR && v->a[1].type == RV_STR) {
		port = strtol(v->a[1].s, &end, 10);
		if (*end == '\0' && port > 0 && port <= 65535 && v->a[0].len > 0 &&
		    v->a[0].len < REDIS_URL_HOST_MAX) {
			/* Mid-failover a sentinel still names the old master
			 * until the replica is reconfigured: keep the selected one. */
			if (clock_mono_ms() < t->failover_until)
				return;
			t->ops->use_master(t->owner, v->a[0].s, (int)port, "sentinel");
			return;
		}
	}
	if (rutil_auth_refusal(v, true, t->conf.sentinel_password != NULL, &msg, &fix)) {
		log_ratelimited(LOG_SLOT_REDIS, 1000, msg, "sentinel=%s:%d fix=\"%s\" err=\"%s\"",
				t->host, t->port, fix, rutil_log_safe(v->s, buf, sizeof(buf)));
		ctl_drop(t, NULL, true, false);
		return;
	}
	log_ratelimited(LOG_SLOT_REDIS, 1000, "sentinel does not name the master",
			"sentinel=%s:%d master=\"%s\" reply=\"%s\"", t->host, t->port,
			rutil_log_safe(t->conf.url->master, buf, 64),
			v->type == RV_ERR ? rutil_log_safe(v->s, buf + 64, sizeof(buf) - 64)
					  : "nil");
	ctl_drop(t, NULL, true, false);
}

/*
 * Sentinel events. "+switch-master NAME OLDIP OLDPORT NEWIP NEWPORT": the
 * failover is done. "+selected-slave slave IP:PORT IP PORT @ NAME MIP MPORT":
 * a failover has picked that replica and is about to promote it. A sentinel
 * announces +switch-master only once it has seen the promotion in the
 * replica's INFO (about a second later); meanwhile the old master still
 * takes writes that its demotion will throw away. So admitd stops writing
 * to the old master at +selected-slave and uses the replica as soon as its
 * ROLE says master (its connections retry the handshake until then; no
 * master is ready meanwhile, so requests are served by fail_mode).
 */
static void ctl_on_push(void *owner, struct rval *v)
{
	struct rtopo *t = owner;
	const char *master = t->conf.url->master;
	char name[REDIS_URL_NAME_MAX], oh[REDIS_URL_HOST_MAX], nh[REDIS_URL_HOST_MAX];
	char kind[16], id[REDIS_URL_HOST_MAX + 8], at[2];
	int op, np;

	if (v->type != RV_ARR || v->n != 3 || v->a[0].type != RV_STR || v->a[1].type != RV_STR ||
	    v->a[2].type != RV_STR || strcmp(v->a[0].s, "message") != 0) {
		rval_free(v);
		return;
	}
	if (strcmp(v->a[1].s, "+switch-master") == 0 &&
	    sscanf(v->a[2].s, "%127s %255s %d %255s %d", name, oh, &op, nh, &np) == 5 &&
	    strcmp(name, master) == 0 && np > 0 && np <= 65535) {
		t->failover_until = 0;
		t->ops->use_master(t->owner, nh, np, "switch-master");
	} else if (strcmp(v->a[1].s, "+selected-slave") == 0 &&
		   sscanf(v->a[2].s, "%15s %263s %255s %d %1s %127s", kind, id, nh, &np, at,
			  name) == 6 &&
		   strcmp(at, "@") == 0 && strcmp(name, master) == 0 && np > 0 && np <= 65535) {
		log_warn("redis failover: a replica was selected; no writes to the old master",
			 "replica=%s:%d", nh, np);
		t->failover_until = clock_mono_ms() + RT_FAILOVER_MS;
		t->ops->use_master(t->owner, nh, np, "selected-slave");
	}
	rval_free(v);
}

/* ---- Cluster ---- */

/*
 * A CLUSTER SLOTS reply into a map handed to the owner: NULL when applied,
 * else why it is unusable (malformed, empty, OOM; the map is then
 * unchanged). A valid map has at most SLOT_COUNT ranges (one a slot); any
 * count up to that is taken, since years of resharding leave many small
 * ranges.
 */
static const char *cluster_apply(struct rtopo *t, const struct rval *v)
{
	struct rtopo_range *r;
	const char *why = NULL;
	size_t nr = 0;

	if (v->type != RV_ARR || v->n == 0)
		return "not a list of ranges";
	if (v->n > SLOT_COUNT)
		return "more ranges than slots";
	r = calloc(v->n, sizeof(*r));
	if (r == NULL)
		return "out of memory";
	for (size_t i = 0; i < v->n; i++) {
		const struct rval *e = &v->a[i], *m;
		if (e->type != RV_ARR || e->n < 3 || e->a[0].type != RV_INT ||
		    e->a[1].type != RV_INT || e->a[2].type != RV_ARR || e->a[2].n < 2)
			goto bad;
		m = &e->a[2];
		if (m->a[0].type != RV_STR || m->a[1].type != RV_INT ||
		    m->a[0].len >= REDIS_URL_HOST_MAX || m->a[1].i < 1 || m->a[1].i > 65535)
			goto bad;
		if (e->a[0].i < 0 || e->a[1].i >= SLOT_COUNT || e->a[0].i > e->a[1].i)
			goto bad;
		/* An empty or unknown endpoint: the node we asked. */
		r[nr].host = m->a[0].len == 0 || strcmp(m->a[0].s, "?") == 0 ? t->host : m->a[0].s;
		r[nr].start = e->a[0].i;
		r[nr].end = e->a[1].i;
		r[nr].port = (int)m->a[1].i;
		nr++;
	}
	why = t->ops->apply_map(t->owner, r, nr);
	free(r);
	if (why != NULL)
		return why;
	if (!t->map_read)
		log_info("redis cluster slot map read", "node=%s:%d ranges=%zu", t->host, t->port,
			 nr);
	t->map_read = true;
	return NULL;
bad:
	free(r);
	return "malformed range";
}

static void ctl_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct rtopo *t = arg;
	struct timeval tv = rutil_tv(RT_REFRESH_MS);
	int64_t wait = t->conf.timeout_ms;

	(void)fd;
	(void)what;
	/* A node that stopped answering (a stopped process keeps its sockets
	 * open) would hold the map as it was for good: ask another. */
	if (t->ready && t->slots_pending &&
	    clock_mono_ms() - t->last_ask_ms >= (wait > RT_REFRESH_MS ? wait : RT_REFRESH_MS)) {
		log_warn("cluster node stopped answering CLUSTER SLOTS: asking another",
			 "node=%s:%d", t->host, t->port);
		ctl_drop(t, "no answer to CLUSTER SLOTS", true, true);
	} else if (t->ready && !ctl_send_slots(t)) {
		ctl_drop(t, "cannot send CLUSTER SLOTS", true, false);
	}
	evtimer_add(t->tick, &tv);
}

/* ---- the control connection's replies ---- */

static void ctl_on_reply(void *owner, int kind, void *tag, struct rval *v)
{
	struct rtopo *t = owner;
	bool sentinel = t->conf.kind == RTOPO_SENTINEL;
	const char *why, *msg, *fix;
	char buf[200];

	(void)tag;
	if (v == NULL || t->rc == NULL) {
		rval_free(v);
		return;
	}
	if (v->type == RV_ERR && kind != KC_ADDR) {
		if (rutil_auth_refusal(v, sentinel,
				       (sentinel ? t->conf.sentinel_password : t->conf.password) !=
					   NULL,
				       &msg, &fix))
			log_ratelimited(LOG_SLOT_REDIS, 1000, msg, "%s=%s:%d fix=\"%s\" err=\"%s\"",
					topo_what(t), t->host, t->port, fix,
					rutil_log_safe(v->s, buf, sizeof(buf)));
		else
			log_ratelimited(LOG_SLOT_REDIS, 1000, "redis control request failed",
					"%s=%s:%d err=\"%s\"", topo_what(t), t->host, t->port,
					rutil_log_safe(v->s, buf, sizeof(buf)));
		rval_free(v);
		ctl_drop(t, NULL, true, false);
		return;
	}
	switch (kind) {
	case KC_ADDR: sentinel_addr_reply(t, v); break;
	case KC_SUB: {
		struct timeval tv = ping_tv(t);
		t->ready = true;
		t->backoff_ms = t->conf.backoff_min_ms;
		evtimer_del(t->timer);
		evtimer_add(t->ping, &tv);
		log_info("sentinel subscribed", "sentinel=%s:%d", t->host, t->port);
		break;
	}
	case KC_PING:
		/* Whatever comes first after a PING answers it: its pong, or an
		 * event published meanwhile (the pong then comes as a push). */
		t->ping_pending = false;
		if (v->type == RV_ARR) {
			ctl_on_push(t, v);
			return;
		}
		break;
	case KC_SLOTS:
		t->slots_pending = false;
		why = cluster_apply(t, v);
		if (why != NULL) {
			log_ratelimited(LOG_SLOT_REDIS, 1000, "redis CLUSTER SLOTS: unusable reply",
					"node=%s:%d ranges=%zu reason=\"%s\"", t->host, t->port,
					v->type == RV_ARR ? v->n : 0, why);
			ctl_drop(t, NULL, true, false);
			break;
		}
		t->ready = true;
		t->backoff_ms = t->conf.backoff_min_ms;
		evtimer_del(t->timer);
		if (t->stale) {
			struct timeval tv = rutil_tv(RT_MIN_GAP_MS);
			event_add(t->kick, &tv);
		}
		break;
	default: break; /* AUTH: OK */
	}
	rval_free(v);
}

static void ctl_on_event(void *owner, bool up, const char *why)
{
	struct rtopo *t = owner;

	if (!up)
		ctl_drop(t, why, true, false);
}

/* Act on stale/lost: ask again (at most once per RT_MIN_GAP_MS). */
static void ctl_kick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct rtopo *t = arg;
	int64_t gap = clock_mono_ms() - t->last_ask_ms;

	(void)fd;
	(void)what;
	if (gap < RT_MIN_GAP_MS) {
		struct timeval tv = rutil_tv(RT_MIN_GAP_MS - gap);
		event_add(t->kick, &tv);
		return;
	}
	if (t->conf.kind == RTOPO_SENTINEL) {
		if (t->drop_master)
			t->ops->recheck_master(t->owner); /* a demoted master: ROLE checks it */
		t->drop_master = false;
		t->last_ask_ms = clock_mono_ms();
		if (t->rc != NULL)
			ctl_drop(t, NULL, false, true); /* reconnects now and asks again */
	} else if (t->ready) {
		if (!ctl_send_slots(t))
			ctl_drop(t, "cannot send CLUSTER SLOTS", true, false);
	} else {
		t->stale = true; /* asked when the connection is back */
	}
}

static void ctl_kick(struct rtopo *t)
{
	struct timeval tv = { 0, 0 };

	t->stale = true;
	if (!evtimer_pending(t->kick, NULL))
		evtimer_add(t->kick, &tv);
}

/* ---- the owner's interface ---- */

static void ctl_free(struct rtopo *t)
{
	if (t->rc != NULL)
		rconn_free(t->rc);
	if (t->timer != NULL)
		event_free(t->timer);
	if (t->kick != NULL)
		event_free(t->kick);
	if (t->tick != NULL)
		event_free(t->tick);
	if (t->ping != NULL)
		event_free(t->ping);
	free(t);
}

struct rtopo *rtopo_new(const struct rtopo_conf *conf, const struct rtopo_ops *ops, void *owner)
{
	struct rtopo *t = calloc(1, sizeof(*t));
	struct timeval tv = rutil_tv(RT_REFRESH_MS);

	if (t == NULL)
		return NULL;
	t->conf = *conf;
	t->ops = ops;
	t->owner = owner;
	t->rng = rutil_seed(t);
	t->backoff_ms = conf->backoff_min_ms;
	t->timer = evtimer_new(conf->base, ctl_timer_cb, t);
	t->kick = evtimer_new(conf->base, ctl_kick_cb, t);
	t->tick = evtimer_new(conf->base, ctl_tick_cb, t);
	t->ping = evtimer_new(conf->base, ctl_ping_cb, t);
	if (t->timer == NULL || t->kick == NULL || t->tick == NULL || t->ping == NULL ||
	    (conf->kind == RTOPO_CLUSTER && evtimer_add(t->tick, &tv) != 0)) {
		ctl_free(t);
		return NULL;
	}
	ctl_connect(t);
	return t;
}

/* SENTINEL: waiting for the selected replica's promotion (nothing to ask). */
static bool failing_over(const struct rtopo *t)
{
	return t->conf.kind == RTOPO_SENTINEL && clock_mono_ms() < t->failover_until;
}

void rtopo_node_lost(struct rtopo *t)
{
	if (t != NULL && !failing_over(t))
		ctl_kick(t);
}

void rtopo_stale(struct rtopo *t)
{
	if (t == NULL || failing_over(t))
		return;
	if (t->conf.kind == RTOPO_SENTINEL)
		t->drop_master = true;
	ctl_kick(t);
}

void rtopo_free(struct rtopo *t)
{
	if (t == NULL)
		return;
	t->freeing = true;
	ctl_free(t);
}
