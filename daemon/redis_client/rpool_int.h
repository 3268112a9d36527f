/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rpool_int.h - what rpool.c (calls, nodes, connections) and rtopo.c
 * (Sentinel discovery, the Cluster slot map) share. Not for other files.
 */

#ifndef ADMITD_RPOOL_INT_H
#define ADMITD_RPOOL_INT_H

#include "redis_url.h"
#include "rpool.h"
#include "slot.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

struct event;
struct event_base;
struct rconn;
struct tls_ctx;

#define RP_SHA_LEN 40

enum rp_topo { TOPO_SINGLE = 0, TOPO_SENTINEL, TOPO_CLUSTER };

/* Connection states, in handshake order. */
enum conn_state { CS_DISCONNECTED = 0, CS_CONNECTING, CS_READY };

/* What a reply on a node connection answers (rconn kinds). */
enum rp_kind { K_CALL = 1, K_HS, K_DISCARD };

struct rp_node;

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
	struct rp_topo_ctl *ctl; /* SENTINEL, CLUSTER: discovery (rtopo.c) */
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

/* ---- rpool.c, for rtopo.c ---- */

/* node_get - the node for host:port, made (inactive) when new; NULL on OOM. */
struct rp_node *node_get(struct rpool *p, const char *host, int port);
/* node_activate - keep its connections up (connect now when new). */
void node_activate(struct rp_node *n);
/* node_deactivate - drop its connections (their calls fail with RP_CONN). */
void node_deactivate(struct rp_node *n, const char *why);
bool node_ready(const struct rp_node *n);
void run_schedule(struct rpool *p);
uint64_t rp_rand(struct rpool *p);
const char *log_safe(const char *s, char *buf, size_t n);
struct timeval;
struct timeval ms_to_tv(int64_t ms);
/*
 * rp_auth_refusal - when error reply v says the server wants a password we
 * did not send, or refused the one we sent, true with *msg (the log line's
 * message) and *fix (what to set: the conf keys, the URL) filled; else
 * false. sentinel: v came from a sentinel. Redis 7 refuses an argument
 * longer than 16 KiB from an unauthenticated client before it parses the
 * command ("Protocol error: unauthenticated bulk length"), so a SCRIPT LOAD
 * sent without AUTH is answered that way, not with NOAUTH. Neither string
 * holds a secret.
 */
bool rp_auth_refusal(const struct rpool *p, const struct rval *v, bool sentinel, const char **msg,
		     const char **fix);
/* Send a formatted copy of argv on rc as kind/tag; false on failure. */
bool rp_send_argv(struct rconn *rc, int argc, const char **argv, int kind, void *tag);

/* ---- rtopo.c ---- */

/* topo_start - begin discovery (SENTINEL, CLUSTER); false on OOM. */
bool topo_start(struct rpool *p);
/* topo_node_lost - a node connection dropped or a node said it is no master. */
void topo_node_lost(struct rpool *p, struct rp_node *n);
/* topo_stale - a reply says the topology changed (MOVED; READONLY...). */
void topo_stale(struct rpool *p);
void topo_free(struct rpool *p);

#endif
