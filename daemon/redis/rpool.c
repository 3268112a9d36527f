/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rpool.c - a small pool of hiredis 0.14.1 async connections on libevent.
 *
 * Owns: the redisAsyncContexts (the only file that includes hiredis), each
 * connection's handshake (AUTH, SELECT, SCRIPT LOAD, TIME) and its timer (connect
 * deadline while connecting, reconnect backoff while disconnected), every
 * call's copy of its arguments and its timeout timer, the scripts' SHAs,
 * and the struct rval copies of replies handed to callers.
 *
 * Two rules keep the re-entrancy manageable:
 *
 *  1. We never call redisAsyncFree from inside a hiredis callback (reply,
 *     connect or disconnect): there we set conn->reap and activate the run
 *     event, which frees the context from the loop. 0.14.1 defers a free
 *     from a reply callback (REDIS_IN_CALLBACK) but not from onConnect or
 *     onDisconnect, so one rule for all is simpler than three.
 *  2. User code (call callbacks, on_state) only ever runs from the run
 *     event or from rpool_free, never from inside hiredis: a hiredis
 *     callback converts the reply, queues the call on the done list and
 *     activates the run event. So a user callback may submit new calls or
 *     free the pool, and hiredis is never on the stack when it does.
 *
 * A call's struct lives until both hiredis has released it (inflight is
 * false: its reply callback ran, with a reply or with NULL when the context
 * died) and its user callback has been invoked (delivered). A call that
 * timed out is completed at the timer and its connection is freed at once,
 * which makes hiredis release every call pending there (with NULL).
 */

#include "rpool.h"

#include "clock.h"
#include "log.h"
#include "redis_url.h"

#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RP_SHA_LEN		  40
#define RP_NO_SCRIPT		  SIZE_MAX /* rp_call.script for a plain command */
#define RP_DEFAULT_BACKOFF_MIN_MS 50
#define RP_DEFAULT_BACKOFF_MAX_MS 2000
#define RP_MAX_POOL		  256

/* Connection states, in handshake order (conn_advance relies on it). */
enum conn_state {
	CS_DISCONNECTED = 0,
	CS_CONNECTING,
	CS_AUTHENTICATING,
	CS_SELECTING,
	CS_LOADING_SCRIPTS,
	CS_TIMING,
	CS_READY,
};

static const char *const conn_state_names[] = {
	[CS_DISCONNECTED] = "disconnected",
	[CS_CONNECTING] = "connecting",
	[CS_AUTHENTICATING] = "authenticating",
	[CS_SELECTING] = "selecting",
	[CS_LOADING_SCRIPTS] = "loading_scripts",
	[CS_TIMING] = "timing",
	[CS_READY] = "ready",
};

struct rp_conn {
	struct rpool *pool;
	int idx;
	enum conn_state state;
	redisAsyncContext *ac; /* NULL when DISCONNECTED */
	struct event *timer;   /* connect deadline, or reconnect backoff */
	int64_t backoff_ms;    /* the next reconnect delay, before jitter */
	size_t loaded;	       /* SCRIPT LOAD replies seen in this handshake */
	bool freeing;	       /* inside our redisAsyncFree: ignore onDisconnect */
	bool reap;	       /* free ac from the run event */
	const char *reap_why;
};

struct rp_call {
	struct rpool *pool;
	struct rp_conn *conn; /* where it is (or was last) in flight */
	struct event *timer;
	rpool_cb *cb;
	void *arg;
	size_t script; /* RP_NO_SCRIPT for rpool_command */
	int argc;      /* the command as sent, kept for the NOSCRIPT retry */
	const char **argv;
	size_t *argvlen;
	char *bytes;
	char nkeys[24];
	enum rp_status st; /* set when completed */
	struct rval *reply;
	bool inflight;	      /* hiredis holds a reply callback for it */
	bool completed;	      /* status known; queued for or past delivery */
	bool delivered;	      /* the user callback has been (or is being) run */
	bool retried;	      /* NOSCRIPT retry used */
	struct rp_call *next; /* done queue */
};

struct rpool {
	struct event_base *base;
	struct redis_url url;
	const char *user;     /* effective: conf, else URL; NULL if none */
	const char *password; /* effective: conf, else URL; never logged */
	int64_t timeout_ms, backoff_min_ms, backoff_max_ms;
	const char *const *scripts;
	size_t nscripts;
	char (*sha)[RP_SHA_LEN + 1];
	void (*on_state)(void *arg, bool up);
	void *state_arg;
	bool reported_up;
	struct rp_conn *conns;
	int nconns;
	int rr; /* round-robin cursor */
	struct event *run_ev;
	struct rp_call *done_head, *done_tail;
	bool *alive;  /* set while run_cb runs user code; rpool_free clears */
	bool freeing; /* rpool_free in progress */
	uint64_t rng;
	size_t ncalls;	   /* accepted and not yet delivered */
	int64_t clock_off; /* Redis TIME minus clock_mono_ms, from the last handshake */
	bool clock_known;
};

static void conn_connect(struct rp_conn *c);
static void call_reply_cb(redisAsyncContext *ac, void *r, void *privdata);
static void call_timer_cb(evutil_socket_t fd, short what, void *arg);

/* ---- small helpers ---- */

static struct timeval ms_to_tv(int64_t ms)
{
	struct timeval tv = { .tv_sec = (time_t)(ms / 1000),
			      .tv_usec = (suseconds_t)((ms % 1000) * 1000) };
	return tv;
}

/* Copy s for a quoted log value: quotes, backslashes and controls become '?'. */
static const char *log_safe(const char *s, char *buf, size_t n)
{
	size_t i;

	if (s == NULL)
		return "";
	for (i = 0; s[i] != '\0' && i + 1 < n; i++)
		buf[i] = (s[i] == '"' || s[i] == '\\' || (unsigned char)s[i] < 0x20) ? '?' : s[i];
	buf[i] = '\0';
	return buf;
}

static uint64_t rp_rand(struct rpool *p)
{
	/* xorshift64: jitter only, no need for quality or a clock read */
	p->rng ^= p->rng << 13;
	p->rng ^= p->rng >> 7;
	p->rng ^= p->rng << 17;
	return p->rng;
}

static void run_schedule(struct rpool *p)
{
	event_active(p->run_ev, EV_TIMEOUT, 0);
}

/* ---- replies ---- */

static void rval_clear(struct rval *v)
{
	for (size_t i = 0; i < v->n; i++)
		rval_clear(&v->a[i]);
	free(v->a);
	free(v->s);
}

static void rval_free(struct rval *v)
{
	if (v == NULL)
		return;
	rval_clear(v);
	free(v);
}

/* Deep copy of r into *v (zeroed by the caller); false on OOM. */
static bool rval_fill(struct rval *v, const redisReply *r)
{
	switch (r->type) {
	case REDIS_REPLY_INTEGER:
		v->type = RV_INT;
		v->i = r->integer;
		return true;
	case REDIS_REPLY_NIL: v->type = RV_NIL; return true;
	case REDIS_REPLY_ARRAY:
		v->type = RV_ARR;
		if (r->elements == 0)
			return true;
		v->a = calloc(r->elements, sizeof(*v->a));
		if (v->a == NULL)
			return false;
		v->n = r->elements;
		for (size_t i = 0; i < r->elements; i++)
			if (!rval_fill(&v->a[i], r->element[i]))
				return false;
		return true;
	case REDIS_REPLY_STATUS: v->type = RV_STATUS; break;
	case REDIS_REPLY_ERROR: v->type = RV_ERR; break;
	default: /* REDIS_REPLY_STRING, and anything newer read as bytes */ v->type = RV_STR; break;
	}
	v->s = malloc(r->len + 1);
	if (v->s == NULL)
		return false;
	if (r->len > 0)
		memcpy(v->s, r->str, r->len);
	v->s[r->len] = '\0';
	v->len = r->len;
	return true;
}

static struct rval *rval_from_reply(const redisReply *r)
{
	struct rval *v = calloc(1, sizeof(*v));

	if (v != NULL && !rval_fill(v, r)) {
		rval_free(v);
		v = NULL;
	}
	return v;
}

/* ---- calls ---- */

static void call_free(struct rp_call *call)
{
	if (call->timer != NULL)
		event_free(call->timer);
	rval_free(call->reply);
	free(call->argv);
	free(call->argvlen);
	free(call->bytes);
	free(call);
}

/*
 * call_new - a call owning a copy of its command: prefix[0..npre) then
 * argv[0..argc). argvlen may be NULL (NUL-terminated arguments).
 */
static struct rp_call *call_new(struct rpool *p, size_t npre, const char *const *prefix,
				size_t argc, const char *const *argv, const size_t *argvlen,
				rpool_cb *cb, void *arg)
{
	struct rp_call *call = calloc(1, sizeof(*call));
	size_t total = 0, i, off = 0, n = npre + argc;

	if (call == NULL)
		return NULL;
	call->pool = p;
	call->cb = cb;
	call->arg = arg;
	call->script = RP_NO_SCRIPT;
	call->argc = (int)n;
	for (i = 0; i < argc; i++)
		total += argvlen ? argvlen[i] : strlen(argv[i]);
	call->argv = calloc(n, sizeof(*call->argv));
	call->argvlen = calloc(n, sizeof(*call->argvlen));
	call->bytes = malloc(total + 1);
	call->timer = evtimer_new(p->base, call_timer_cb, call);
	if (call->argv == NULL || call->argvlen == NULL || call->bytes == NULL ||
	    call->timer == NULL) {
		call_free(call);
		return NULL;
	}
	for (i = 0; i < npre; i++) {
		call->argv[i] = prefix[i];
		call->argvlen[i] = strlen(prefix[i]);
	}
	for (i = 0; i < argc; i++) {
		size_t len = argvlen ? argvlen[i] : strlen(argv[i]);
		if (len > 0)
			memcpy(call->bytes + off, argv[i], len);
		call->argv[npre + i] = call->bytes + off;
		call->argvlen[npre + i] = len;
		off += len;
	}
	return call;
}

/*
 * call_new_eval - EVALSHA sha nkeys args... The SHA pointer is the pool's
 * (stable for the pool's life); nkeys is printed into the call itself.
 */
static struct rp_call *call_new_eval(struct rpool *p, size_t script, size_t nkeys, size_t argc,
				     const char *const *argv, const size_t *argvlen, rpool_cb *cb,
				     void *arg)
{
	char nk[24];
	const char *prefix[3] = { "EVALSHA", p->sha[script], nk };
	struct rp_call *call;

	snprintf(nk, sizeof(nk), "%zu", nkeys);
	call = call_new(p, 3, prefix, argc, argv, argvlen, cb, arg);
	if (call == NULL)
		return NULL;
	memcpy(call->nkeys, nk, sizeof(nk));
	call->argv[2] = call->nkeys;
	call->script = script;
	return call;
}

static int call_send(struct rp_conn *c, struct rp_call *call)
{
	if (redisAsyncCommandArgv(c->ac, call_reply_cb, call, call->argc, call->argv,
				  call->argvlen) != REDIS_OK)
		return -1;
	call->inflight = true;
	call->conn = c;
	return 0;
}

/* The call's outcome is known: stop its timer and queue it for delivery. */
static void call_complete(struct rp_call *call, enum rp_status st, struct rval *reply)
{
	struct rpool *p = call->pool;

	call->completed = true;
	call->st = st;
	call->reply = reply;
	evtimer_del(call->timer);
	call->next = NULL;
	if (p->done_tail != NULL)
		p->done_tail->next = call;
	else
		p->done_head = call;
	p->done_tail = call;
	run_schedule(p);
}

/*
 * call_deliver - run the user callback of a completed call that has been
 * unlinked from the done queue. The struct is freed first when hiredis no
 * longer holds it, so nothing here touches it after the callback (which may
 * free the pool).
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
	if (!call->inflight)
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

/* ---- connections ---- */

/* Schedule the next connect attempt: jittered, doubling up to the cap. */
static void conn_backoff(struct rp_conn *c)
{
	struct rpool *p = c->pool;
	int64_t d = c->backoff_ms, half = d / 2;
	struct timeval tv;

	c->state = CS_DISCONNECTED;
	d = half + (int64_t)(rp_rand(p) % (uint64_t)(d - half + 1));
	c->backoff_ms =
	    c->backoff_ms * 2 > p->backoff_max_ms ? p->backoff_max_ms : c->backoff_ms * 2;
	tv = ms_to_tv(d);
	evtimer_add(c->timer, &tv);
}

/*
 * conn_drop - free the context now and schedule a reconnect. Never from a
 * hiredis callback (use conn_reap). hiredis calls every pending reply
 * callback with NULL from inside redisAsyncFree; they only queue calls.
 */
static void conn_drop(struct rp_conn *c, const char *why)
{
	struct rpool *p = c->pool;
	redisAsyncContext *ac = c->ac;

	c->reap = false;
	if (ac == NULL)
		return;
	/* A frozen Redis drops every handshake at its deadline, over and over:
	 * those lines come at most once a second; other drops are each logged. */
	if (!p->freeing && c->state != CS_READY)
		log_ratelimited(LOG_SLOT_REDIS_CONN, 1000, "redis connection dropped",
				"conn=%d state=%s reason=\"%s\"", c->idx,
				conn_state_names[c->state], why);
	else if (!p->freeing)
		log_warn("redis connection dropped", "conn=%d state=%s reason=\"%s\"", c->idx,
			 conn_state_names[c->state], why);
	c->ac = NULL;
	c->state = CS_DISCONNECTED;
	evtimer_del(c->timer);
	c->freeing = true;
	redisAsyncFree(ac);
	c->freeing = false;
	if (!p->freeing) {
		conn_backoff(c);
		run_schedule(p); /* on_state */
	}
}

/* From inside a hiredis callback: have the run event drop the connection. */
static void conn_reap(struct rp_conn *c, const char *why)
{
	if (!c->reap) {
		c->reap = true;
		c->reap_why = why;
		run_schedule(c->pool);
	}
}

static void conn_ready(struct rp_conn *c)
{
	evtimer_del(c->timer);
	c->state = CS_READY;
	c->backoff_ms = c->pool->backoff_min_ms;
	log_info("redis connection ready", "conn=%d", c->idx);
	run_schedule(c->pool); /* on_state */
}

static void conn_setup_cb(redisAsyncContext *ac, void *r, void *privdata);

static bool conn_send(struct rp_conn *c, redisCallbackFn *fn, void *privdata, int argc,
		      const char **argv)
{
	return redisAsyncCommandArgv(c->ac, fn, privdata, argc, argv, NULL) == REDIS_OK;
}

/* Send SCRIPT LOAD scripts[i]; the reply goes to fn. */
static bool conn_send_load(struct rp_conn *c, redisCallbackFn *fn, size_t i)
{
	const char *argv[3] = { "SCRIPT", "LOAD", c->pool->scripts[i] };

	return conn_send(c, fn, c, 3, argv);
}

/*
 * conn_advance - the next handshake step after the current state's reply:
 * AUTH when there is a password, SELECT when db != 0, SCRIPT LOAD of every
 * script (pipelined), then READY.
 */
static void conn_advance(struct rp_conn *c)
{
	struct rpool *p = c->pool;
	char db[16];
	bool ok = true;

	if (c->state < CS_AUTHENTICATING && p->password != NULL) {
		/* AUTH [user] password: the ACL form only when a user is set */
		const char *argv[3] = { "AUTH", p->user, p->password };
		int argc = 3;
		if (p->user == NULL) {
			argv[1] = p->password;
			argc = 2;
		}
		c->state = CS_AUTHENTICATING;
		ok = conn_send(c, conn_setup_cb, c, argc, argv);
	} else if (c->state < CS_SELECTING && p->url.db != 0) {
		const char *argv[2] = { "SELECT", db };
		snprintf(db, sizeof(db), "%d", p->url.db);
		c->state = CS_SELECTING;
		ok = conn_send(c, conn_setup_cb, c, 2, argv);
	} else if (c->state < CS_LOADING_SCRIPTS && p->nscripts > 0) {
		c->state = CS_LOADING_SCRIPTS;
		c->loaded = 0;
		for (size_t i = 0; ok && i < p->nscripts; i++)
			ok = conn_send_load(c, conn_setup_cb, i);
	} else if (c->state < CS_TIMING) {
		/* Redis's clock before the first call: callers bound when a call
		 * may still book (a script run late must book nothing). */
		const char *argv[1] = { "TIME" };
		c->state = CS_TIMING;
		ok = conn_send(c, conn_setup_cb, c, 1, argv);
	} else {
		conn_ready(c);
	}
	if (!ok)
		conn_reap(c, "cannot send handshake command");
}

/* Replies to the handshake commands; privdata is the connection. */
static void conn_setup_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct rp_conn *c = privdata;
	const redisReply *reply = r;
	char buf[256];

	(void)ac;
	if (reply == NULL || c->reap)
		return; /* the context is going away; the drop path handles it */
	if (reply->type == REDIS_REPLY_ERROR) {
		/* The server's message never contains the secret we sent. */
		log_warn("redis handshake failed", "conn=%d step=%s err=\"%s\"", c->idx,
			 conn_state_names[c->state], log_safe(reply->str, buf, sizeof(buf)));
		conn_reap(c, "handshake error");
		return;
	}
	if (c->state == CS_LOADING_SCRIPTS) {
		size_t i = c->loaded++;
		if (reply->type != REDIS_REPLY_STRING || reply->len != RP_SHA_LEN) {
			log_warn("redis SCRIPT LOAD: unexpected reply", "conn=%d script=%zu",
				 c->idx, i);
			conn_reap(c, "bad SCRIPT LOAD reply");
			return;
		}
		memcpy(c->pool->sha[i], reply->str, RP_SHA_LEN);
		c->pool->sha[i][RP_SHA_LEN] = '\0';
		if (c->loaded < c->pool->nscripts)
			return;
	}
	if (c->state == CS_TIMING) {
		if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
		    reply->element[0]->type != REDIS_REPLY_STRING ||
		    reply->element[1]->type != REDIS_REPLY_STRING) {
			log_warn("redis TIME: unexpected reply", "conn=%d", c->idx);
			conn_reap(c, "bad TIME reply");
			return;
		}
		c->pool->clock_off = strtoll(reply->element[0]->str, NULL, 10) * 1000 +
				     strtoll(reply->element[1]->str, NULL, 10) / 1000 -
				     clock_mono_ms();
		c->pool->clock_known = true;
	}
	conn_advance(c);
}

/* onConnect: 0.14.1 frees the context itself after a failed connect. */
static void conn_connect_cb(const redisAsyncContext *ac, int status)
{
	struct rp_conn *c = ac->data;
	char buf[256];

	if (status != REDIS_OK) {
		log_ratelimited(LOG_SLOT_REDIS, 1000, "redis connect failed", "conn=%d err=\"%s\"",
				c->idx, log_safe(ac->errstr, buf, sizeof(buf)));
		c->ac = NULL;
		evtimer_del(c->timer);
		conn_backoff(c);
		return;
	}
	conn_advance(c);
}

/*
 * onDisconnect: only for contexts that were connected. Either hiredis lost
 * the connection (it already called every pending reply callback with NULL)
 * or we are in our own redisAsyncFree (c->freeing).
 */
static void conn_disconnect_cb(const redisAsyncContext *ac, int status)
{
	struct rp_conn *c = ac->data;
	char buf[256];

	(void)status;
	if (c->freeing)
		return;
	log_warn("redis connection lost", "conn=%d state=%s err=\"%s\"", c->idx,
		 conn_state_names[c->state], log_safe(ac->errstr, buf, sizeof(buf)));
	c->ac = NULL;
	c->reap = false;
	evtimer_del(c->timer);
	if (!c->pool->freeing)
		conn_backoff(c);
	run_schedule(c->pool);
}

static void conn_connect(struct rp_conn *c)
{
	struct rpool *p = c->pool;
	redisAsyncContext *ac;
	struct timeval tv = ms_to_tv(p->timeout_ms);
	char buf[256];

	if (p->url.kind == REDIS_URL_UNIX)
		ac = redisAsyncConnectUnix(p->url.path);
	else
		ac = redisAsyncConnect(p->url.host, p->url.port);
	if (ac == NULL || ac->err) {
		log_ratelimited(LOG_SLOT_REDIS, 1000, "redis connect failed", "conn=%d err=\"%s\"",
				c->idx,
				ac ? log_safe(ac->errstr, buf, sizeof(buf)) : "out of memory");
		if (ac != NULL)
			redisAsyncFree(ac); /* unattached, unconnected: no callbacks */
		conn_backoff(c);
		return;
	}
	ac->data = c;
	c->ac = ac;
	c->state = CS_CONNECTING;
	redisLibeventAttach(ac, p->base);
	redisAsyncSetConnectCallback(ac, conn_connect_cb);
	redisAsyncSetDisconnectCallback(ac, conn_disconnect_cb);
	evtimer_add(c->timer, &tv);
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

/* ---- call callbacks ---- */

static bool is_noscript(const redisReply *r)
{
	return r->type == REDIS_REPLY_ERROR && r->len >= 8 && memcmp(r->str, "NOSCRIPT", 8) == 0;
}

/* Reply to the SCRIPT LOAD sent before a NOSCRIPT retry. */
static void conn_reload_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct rp_conn *c = privdata;
	const redisReply *reply = r;
	char buf[256];

	(void)ac;
	if (reply != NULL && reply->type == REDIS_REPLY_ERROR)
		log_warn("redis SCRIPT LOAD failed", "conn=%d err=\"%s\"", c->idx,
			 log_safe(reply->str, buf, sizeof(buf)));
}

/*
 * call_reply_cb - hiredis is done with the call: a reply, or NULL when the
 * context is being freed. Abandoned calls (timed out) are swallowed here.
 */
static void call_reply_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct rp_call *call = privdata;
	struct rpool *p = call->pool;
	const redisReply *reply = r;
	struct rval *v;

	call->inflight = false;
	if (call->delivered) {
		call_free(call);
		return;
	}
	if (call->completed)
		return; /* timed out: still queued, freed at delivery */
	if (reply == NULL) {
		call_complete(call, p->freeing ? RP_SHUTDOWN : RP_CONN, NULL);
		return;
	}
	if (call->script != RP_NO_SCRIPT && !call->retried && is_noscript(reply)) {
		struct rp_conn *c = ac->data;
		/* Redis restarted or flushed: reload, then retry once on the same
		 * connection (the pipeline keeps the order); the timer keeps running. */
		call->retried = true;
		log_info("redis NOSCRIPT: reloading script", "conn=%d script=%zu", c->idx,
			 call->script);
		if (conn_send_load(c, conn_reload_cb, call->script) && call_send(c, call) == 0)
			return;
	}
	v = rval_from_reply(reply);
	call_complete(call, v ? RP_OK : RP_CONN, v);
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
	log_ratelimited(LOG_SLOT_REDIS_CALL, 1000, "redis call timed out",
			"conn=%d timeout_ms=%lld", c->idx, (long long)call->pool->timeout_ms);
	call_complete(call, RP_TIMEOUT, NULL);
	conn_drop(c, "call timeout");
}

static void call_arm(struct rp_call *call)
{
	struct timeval tv = ms_to_tv(call->pool->timeout_ms);

	evtimer_add(call->timer, &tv);
}

/* ---- the run event: reaps and deliveries, outside hiredis ---- */

static void run_cb(evutil_socket_t fd, short what, void *arg)
{
	struct rpool *p = arg;
	struct rp_call *call;
	bool alive = true, up;

	(void)fd;
	(void)what;
	p->alive = &alive;
	for (int i = 0; i < p->nconns; i++)
		if (p->conns[i].reap)
			conn_drop(&p->conns[i], p->conns[i].reap_why);
	while ((call = done_pop(p)) != NULL) {
		call_deliver(call);
		if (!alive)
			return; /* a callback freed the pool */
	}
	up = rpool_up(p);
	if (up != p->reported_up) {
		p->reported_up = up;
		if (p->on_state != NULL) {
			p->on_state(p->state_arg, up);
			if (!alive)
				return;
		}
	}
	p->alive = NULL;
}

/* ---- public ---- */

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
	if (redis_url_parse(conf->url, &p->url, err, errlen) < 0) {
		free(p);
		return NULL;
	}
	p->base = base;
	p->user = conf->user ? conf->user : (p->url.user[0] ? p->url.user : NULL);
	p->password =
	    conf->password ? conf->password : (p->url.password[0] ? p->url.password : NULL);
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
	p->state_arg = state_arg;
	p->rng = ((uint64_t)(uintptr_t)p << 16) ^ (uint64_t)getpid() ^ 0x9e3779b97f4a7c15ULL;
	p->nconns = conf->pool_size;
	errpos = "calloc";
	p->sha = calloc(nscripts ? nscripts : 1, sizeof(*p->sha));
	p->conns = calloc((size_t)p->nconns, sizeof(*p->conns));
	if (p->sha == NULL || p->conns == NULL)
		goto oom;
	errpos = "event_new";
	p->run_ev = event_new(base, -1, 0, run_cb, p);
	if (p->run_ev == NULL)
		goto oom;
	for (int i = 0; i < p->nconns; i++) {
		struct rp_conn *c = &p->conns[i];
		c->pool = p;
		c->idx = i;
		c->backoff_ms = p->backoff_min_ms;
		c->timer = evtimer_new(base, conn_timer_cb, c);
		if (c->timer == NULL)
			goto oom;
	}
	for (int i = 0; i < p->nconns; i++)
		conn_connect(&p->conns[i]);
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
	for (int i = 0; i < p->nconns; i++)
		if (p->conns[i].state == CS_READY && !p->conns[i].reap)
			return true;
	return false;
}

/*
 * A ready connection: for affinity A > 0, the A-th one (or the next ready
 * after it), so that calls with the same affinity run in the order sent
 * while that connection lives; for 0, round robin.
 */
static struct rp_conn *pick_conn(struct rpool *p, unsigned affinity)
{
	int start = affinity != 0 ? (int)(affinity % (unsigned)p->nconns) : p->rr;

	if (p->freeing)
		return NULL;
	for (int i = 0; i < p->nconns; i++) {
		struct rp_conn *c = &p->conns[(start + i) % p->nconns];
		if (c->state == CS_READY && !c->reap) {
			if (affinity == 0)
				p->rr = (c->idx + 1) % p->nconns;
			return c;
		}
	}
	return NULL;
}

static bool args_ok(size_t argc, const char *const *argv)
{
	return argc <= (size_t)INT_MAX - 3 && (argc == 0 || argv != NULL);
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
	struct rp_conn *c;
	struct rp_call *call;

	if (argc == 0 || !args_ok(argc, argv) || cb == NULL)
		return -1;
	c = pick_conn(p, 0);
	if (c == NULL)
		return -1;
	call = call_new(p, 0, NULL, argc, argv, argvlen, cb, arg);
	if (call == NULL)
		return -1;
	if (call_send(c, call) < 0) {
		call_free(call);
		return -1;
	}
	p->ncalls++;
	call_arm(call);
	return 0;
}

int rpool_eval_multi(struct rpool *p, size_t ncalls, const struct rpool_call *calls)
{
	struct rp_call **built = NULL;
	struct rp_conn *c;
	size_t i;

	for (i = 0; i < ncalls; i++)
		if (calls[i].script >= p->nscripts || calls[i].nkeys > calls[i].argc ||
		    !args_ok(calls[i].argc, calls[i].argv) || calls[i].cb == NULL)
			return -1;
	c = pick_conn(p, ncalls > 0 ? calls[0].affinity : 0);
	if (c == NULL || ncalls == 0)
		return c == NULL ? -1 : 0;
	built = calloc(ncalls, sizeof(*built));
	if (built == NULL)
		return -1;
	for (i = 0; i < ncalls; i++) {
		const struct rpool_call *in = &calls[i];
		built[i] = call_new_eval(p, in->script, in->nkeys, in->argc, in->argv, in->argvlen,
					 in->cb, in->arg);
		if (built[i] == NULL)
			goto cleanup;
	}
	/* All sent before we return to the loop: hiredis writes them as one
	 * pipeline. Past the first send the calls are accepted; one that cannot
	 * be sent (the context is already dying) completes with RP_CONN. */
	for (i = 0; i < ncalls; i++) {
		if (call_send(c, built[i]) < 0) {
			if (i == 0)
				goto cleanup;
			p->ncalls++;
			call_complete(built[i], RP_CONN, NULL);
			continue;
		}
		p->ncalls++;
		call_arm(built[i]);
	}
	free(built);
	return 0;
cleanup:
	for (i = 0; i < ncalls; i++)
		if (built[i] != NULL)
			call_free(built[i]);
	free(built);
	return -1;
}

void rpool_free(struct rpool *p)
{
	struct rp_call *call;

	if (p == NULL || p->freeing)
		return; /* a callback run by the outer rpool_free: it finishes */
	p->freeing = true;
	if (p->alive != NULL)
		*p->alive = false;
	/* Pending calls come back through call_reply_cb with NULL and are
	 * queued as RP_SHUTDOWN (p->freeing); queued ones keep their status. */
	for (int i = 0; p->conns != NULL && i < p->nconns; i++)
		conn_drop(&p->conns[i], "shutdown");
	while ((call = done_pop(p)) != NULL)
		call_deliver(call);
	for (int i = 0; p->conns != NULL && i < p->nconns; i++)
		if (p->conns[i].timer != NULL)
			event_free(p->conns[i].timer);
	if (p->run_ev != NULL)
		event_free(p->run_ev);
	free(p->conns);
	free(p->sha);
	free(p);
}
