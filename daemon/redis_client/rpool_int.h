/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rpool_int.h - what the pieces of the pool share, and nothing else: its
 * structs and the functions each piece offers the ones above it. Bottom
 * first: rpool_hs.c (a connection's handshake), rpool_node.c (nodes and
 * their connections), rpool_call.c (calls: made, routed, sent, timed out,
 * delivered), rpool_reply.c (what a call's reply sets off: retries,
 * redirections, parking), rpool_map.c (what the topology reports, applied)
 * and rpool.c (the public API, the run event). Each calls only pieces
 * below it; rpool_node.c reaches the calls through struct rp_node_ops.
 * The topology (rtopo.h) is below all of them. Not for other files.
 */

#ifndef ADMITD_RPOOL_INT_H
#define ADMITD_RPOOL_INT_H

#include "redis_url.h"
#include "rpool.h"
#include "slot.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

struct event;
struct event_base;
struct rconn;
struct rtopo;
struct tls_ctx;

#define RP_SHA_LEN   40
#define RP_NO_SCRIPT SIZE_MAX /* rp_call.script for a plain command */

enum rp_topo { TOPO_SINGLE = 0, TOPO_SENTINEL, TOPO_CLUSTER };

/* Connection states, in handshake order. */
enum conn_state { CS_DISCONNECTED = 0, CS_CONNECTING, CS_READY };

/* What a reply on a node connection answers (rconn kinds). */
enum rp_kind { K_CALL = 1, K_HS, K_DISCARD };

struct rp_call;
struct rp_conn;
struct rp_node;

/*
 * What a node connection reports upward (rpool_node.c calls these; rpool.c
 * registers them, from rpool_reply.c).
 */
struct rp_node_ops {
	/* the reply v to call in flight on c (NULL: c is being freed); owns v */
	void (*on_call_reply)(struct rp_conn *c, struct rp_call *call, struct rval *v);
	/* a connection of p became ready: parked calls may go */
	void (*on_conn_ready)(struct rpool *p);
};

struct rp_conn {
	struct rp_node *node;
	int idx;
	enum conn_state state;
	struct rconn *rc;    /* NULL when DISCONNECTED */
	struct event *timer; /* connect deadline, or reconnect backoff */
	int64_t backoff_ms;  /* the next reconnect delay, before jitter */
	size_t hs_left;	     /* handshake replies still awaited */
};

struct rp_node {
	struct rpool *pool;
	char host[REDIS_URL_HOST_MAX]; /* TCP */
	int port;
	const char *path; /* Unix socket (the pool's url), or NULL */
	char name[280];	  /* host:port or path, for logs and status */
	struct rp_conn *conns;
	int nconns;
	int rr;
	bool active; /* in the topology: its connections are kept up */
	int slots;   /* Cluster: slots it owns in the map */
	bool tried;  /* a connection of it got ready or failed at least once */
	bool lost;   /* was ready, then lost every connection */
	bool back;   /* ready again after lost: on_node_up due */
	uint64_t calls, failures;
	struct rp_node *next;
};

struct rp_call {
	struct rpool *pool;
	struct rp_conn *conn; /* where it is in flight; NULL when not */
	struct rp_node *node; /* where it was last sent (stats) */
	struct event *timer;  /* its deadline */
	rpool_cb *cb;
	void *arg;
	size_t script; /* RP_NO_SCRIPT for rpool_command */
	char *cmd;     /* formatted, kept for retries */
	size_t cmdlen;
	int slot; /* -1: any node */
	unsigned affinity;
	struct rp_node *ask; /* ASK: the next send goes there, after ASKING */
	int redirects;
	int64_t retry_at;      /* parked until (clock_mono_ms) */
	struct rval *last_err; /* the redirection that parked it (its answer at the deadline) */
	enum rp_status st;
	struct rval *reply;
	bool completed; /* status known; queued for or past delivery */
	bool delivered;
	bool retried; /* NOSCRIPT (or function not found) retry used */
	bool fcall;   /* sent as FCALL */
	bool parked;
	struct rp_call *next;	    /* done queue */
	TAILQ_ENTRY(rp_call) plink; /* parked list */
};
TAILQ_HEAD(rp_call_list, rp_call);

struct rpool {
	struct event_base *base;
	struct redis_url url;
	enum rp_topo topo;
	const char *user;     /* effective: conf, else URL; NULL if none */
	const char *password; /* effective: conf, else URL; never logged */
	const char *sentinel_password;
	int64_t timeout_ms, backoff_min_ms, backoff_max_ms;
	const char *const *scripts;
	size_t nscripts;
	char (*sha)[RP_SHA_LEN + 1];
	char **load_cmd; /* SCRIPT LOAD scripts[i], formatted */
	size_t *load_len;
	const char *const *functions; /* FCALL names; NULL: EVALSHA only */
	char *fload_cmd;	      /* FUNCTION LOAD library, formatted */
	size_t fload_len;
	int fcall; /* 1: calls go as FCALL; 0: not known yet; -1: EVALSHA (sticky) */
	struct tls_ctx *tls;
	const struct rp_node_ops *node_ops;
	void (*on_state)(void *arg, bool up);
	void (*on_node_up)(void *arg, const char *node);
	void *state_arg;
	bool reported_up;
	int pool_size;
	unsigned multi_rr;	/* the affinity of the last batch sent with none */
	struct rp_node *nodes;	/* every node ever used; active ones have connections */
	struct rp_node *master; /* SINGLE, SENTINEL: the node in use (NULL: none known) */
	struct rp_node **slots; /* CLUSTER: SLOT_COUNT owners (NULL: unknown) */
	bool map_known;
	struct rtopo *rtopo; /* SENTINEL, CLUSTER: discovery (rtopo.c) */
	struct rp_call_list parked;
	struct event *park_ev;
	struct event *run_ev;
	struct rp_call *done_head, *done_tail;
	bool *alive;  /* set while run_cb runs user code; rpool_free clears */
	bool freeing; /* rpool_free in progress */
	uint64_t rng;
	size_t ncalls;	   /* accepted and not yet delivered */
	int64_t clock_off; /* Redis TIME minus clock_mono_ms, from the last handshake */
	bool clock_known;
};

/* rp_run_schedule - have the run event (rpool.c) deliver and report, outside connection code. */
static inline void rp_run_schedule(struct rpool *p)
{
	event_active(p->run_ev, EV_TIMEOUT, 0);
}

/* ---- rpool_hs.c: a node connection's handshake ---- */

/* rp_hs_send - queue c's whole handshake (c->hs_left counts it); false on failure. */
bool rp_hs_send(struct rp_conn *c);
/* rp_hs_reply - one handshake reply (the step its tag names); false: drop c. */
bool rp_hs_reply(struct rp_conn *c, unsigned step, const struct rval *v);

/* ---- rpool_node.c: nodes and their connections ---- */

/* rp_node_new - a node (inactive) for host:port or a Unix socket path; NULL on OOM. */
struct rp_node *rp_node_new(struct rpool *p, const char *host, int port, const char *path);
/* rp_node_get - the node for host:port, made (inactive) when new; NULL on OOM. */
struct rp_node *rp_node_get(struct rpool *p, const char *host, int port);
/* rp_node_activate - keep its connections up (connect now when new). */
void rp_node_activate(struct rp_node *n);
/* rp_node_deactivate - drop its connections (their calls fail with RP_CONN). */
void rp_node_deactivate(struct rp_node *n, const char *why);
/* rp_node_ready - some connection of n is ready. */
bool rp_node_ready(const struct rp_node *n);
/* rp_node_free - free n and its timers (its connections are dropped already). */
void rp_node_free(struct rp_node *n);
/*
 * rp_conn_drop - free the connection now (every call in flight on it
 * completes with RP_CONN, or RP_SHUTDOWN while the pool is freed) and
 * schedule a reconnect while its node is in use.
 */
void rp_conn_drop(struct rp_conn *c, const char *why);

/* ---- rpool_call.c: calls ---- */

/*
 * rp_call_new - a call owning its command formatted: prefix[0..npre) then
 * argv[0..argc). argvlen may be NULL (NUL-terminated arguments). slot is
 * the Cluster slot of key argv[keyarg] (keyarg < 0: none).
 */
struct rp_call *rp_call_new(struct rpool *p, size_t npre, const char *const *prefix, size_t argc,
			    const char *const *argv, const size_t *argvlen, int keyarg,
			    rpool_cb *cb, void *arg);
void rp_call_free(struct rp_call *call);
/* rp_call_arm - start the call's deadline (timeout_ms). */
void rp_call_arm(struct rp_call *call);
/* rp_call_complete - the outcome is known: stop its timer, queue it for delivery. */
void rp_call_complete(struct rp_call *call, enum rp_status st, struct rval *reply);
/* rp_call_done_pop - the next completed call, unlinked; NULL when none. */
struct rp_call *rp_call_done_pop(struct rpool *p);
/* rp_call_deliver - free a popped call, then run its callback. */
void rp_call_deliver(struct rp_call *call);
/* rp_call_route - the node the call goes to now, or NULL when none is known. */
struct rp_node *rp_call_route(struct rpool *p, const struct rp_call *call);
/* rp_call_send - send call on c (after ASKING when it follows an ASK); -1 when c is dying. */
int rp_call_send(struct rp_conn *c, struct rp_call *call);
/* rp_call_dispatch - send call where it goes now: 0 sent, -1 no ready connection there. */
int rp_call_dispatch(struct rpool *p, struct rp_call *call);

/* ---- rpool_reply.c: what a call's reply sets off ---- */

/* rp_call_reply - a reply (or NULL: the connection is being freed) to call, in flight on c. */
void rp_call_reply(struct rp_conn *c, struct rp_call *call, struct rval *v);
/* rp_park_cb - the park event (p->park_ev): parked calls whose time has come. */
void rp_park_cb(evutil_socket_t fd, short what, void *arg);
/* rp_park_kick - look at the parked calls now (a connection is ready). */
void rp_park_kick(struct rpool *p);

/* ---- rpool_map.c: what the topology reports, applied to p ---- */

/* The callbacks rtopo_new gets, with p as their owner. */
extern const struct rtopo_ops rp_map_ops;

#endif
