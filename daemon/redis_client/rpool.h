/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rpool.h - the Redis client: pools of connections to one Redis, to the
 * master a set of Sentinels names, or to every master of a Redis Cluster.
 *
 * Owns: the connections (rconn.c) to every node, their handshakes and
 * reconnect timers, per-call timeout timers, the SHAs of the embedded
 * scripts, the topology (Sentinel discovery, the Cluster slot map), and the
 * copies of replies handed to callers. It knows nothing of scopes, leases
 * or rules: it runs scripts and commands and reports how each call ended.
 * Callers do not see the topology: a call goes to the node that owns its
 * first key (Cluster), or to the master (one Redis, Sentinel).
 *
 * Every call that rpool_eval/rpool_command/rpool_eval_multi accepts (return
 * 0) completes exactly once through its callback, from the event loop, never
 * from inside the submitting call: with RP_OK and a reply, or with a
 * failure status and reply NULL. A call that timed out is completed with
 * RP_TIMEOUT at the timer, its connection is freed (not politely closed) and
 * the late reply, if any, is swallowed. A call is never retried after a
 * timeout (a script that timed out may have run); NOSCRIPT is answered by
 * SCRIPT LOAD and one transparent retry, "Function not found" (FUNCTION
 * FLUSH) by FUNCTION LOAD and one retry. In a Cluster, MOVED and ASK are
 * followed (at most 5 redirections) and TRYAGAIN retried after a short
 * pause, within the call's timeout: those replies say the script did not
 * run. A node that cannot be reached fails the calls for its keys only.
 */

#ifndef ADMITD_RPOOL_H
#define ADMITD_RPOOL_H

#include "resp.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct rpool;

enum rp_status {
	RP_OK = 0,   /* the server answered; reply is set (may be RV_ERR) */
	RP_TIMEOUT,  /* no answer within timeout_ms */
	RP_CONN,     /* connection lost or none ready */
	RP_SHUTDOWN, /* the pool is being freed */
};

struct rpool_conf {
	const char *url;	/* see redis_url.h */
	int pool_size;		/* >= 1 */
	int64_t timeout_ms;	/* per call and per connect */
	const char *user;	/* ACL user, or NULL */
	const char *password;	/* AUTH secret, or NULL; never logged */
	int64_t backoff_min_ms; /* reconnect backoff, doubled up to backoff_max_ms */
	int64_t backoff_max_ms;
	const char *sentinel_password; /* AUTH for the sentinels, or NULL; never logged */
	/* TLS (rediss://, ?tls=1): files PEM; NULL ca_file: the system store */
	const char *tls_ca_file, *tls_cert_file, *tls_key_file, *tls_server_name;
	bool tls_no_verify; /* true only when redis_tls_verify = no */
	/*
	 * Cluster: a master that had lost every connection is ready again
	 * while the pool stayed up (what it held may be gone, like a Redis
	 * that came back). Called from the loop with rpool_new's state_arg.
	 */
	void (*on_node_up)(void *arg, const char *node);
	/*
	 * The same scripts as one function library (Redis 7: FUNCTION LOAD
	 * once per node, then FCALL functions[i], nothing defined per call),
	 * or NULL. Loaded at each connection's handshake; a node that refuses
	 * it (Redis 6, an ACL) makes the pool use EVALSHA from then on.
	 */
	const char *library;
	const char *const *functions;
};

/* One node, for status. */
struct rpool_node_info {
	char addr[280];	   /* host:port or the socket path */
	const char *state; /* "ready", "connecting" or "down" */
	int slots;	   /* Cluster: slots it owns; else 0 */
	uint64_t calls;	   /* calls sent to it */
	uint64_t failures; /* of those: timed out, connection lost, error reply */
};

typedef void rpool_cb(void *arg, enum rp_status st, const struct rval *reply);

/*
 * rpool_new - start connecting (in the background; returns at once).
 * scripts[i] is Lua source; rpool_eval(..., i, ...) runs it by SHA.
 * The pool keeps pointers to conf strings and scripts: they must outlive it.
 * on_state, when set, is called whenever the pool goes up (some connection
 * ready with scripts loaded) or down (none ready). Returns NULL with err
 * filled on a bad URL.
 */
struct rpool *rpool_new(struct event_base *base, const struct rpool_conf *conf,
			const char *const *scripts, size_t nscripts,
			void (*on_state)(void *arg, bool up), void *state_arg, char *err,
			size_t errlen);

/* rpool_functions - true while calls go as FCALL (the library loaded). */
bool rpool_functions(const struct rpool *p);

/* true when at least one connection is ready to take calls. */
bool rpool_up(const struct rpool *p);

/* rpool_inflight - calls accepted whose callback has not run yet. */
size_t rpool_inflight(const struct rpool *p);

/*
 * rpool_clock - Redis TIME (ms) minus clock_mono_ms(), read by the last
 * connection handshake (every connection reads TIME before it is ready, so
 * this is known whenever rpool_up is true). false when never read.
 */
bool rpool_clock(const struct rpool *p, int64_t *offset_ms);

/*
 * rpool_eval - EVALSHA scripts[script] with argv[0..nkeys) as KEYS and the
 * rest as ARGV (binary-safe, argvlen gives lengths). Returns 0 when accepted
 * (cb will be called exactly once), -1 when no connection is ready (cb is
 * not called).
 */
int rpool_eval(struct rpool *p, size_t script, size_t nkeys, size_t argc, const char *const *argv,
	       const size_t *argvlen, rpool_cb *cb, void *arg);

/*
 * rpool_command - any command, same contract as rpool_eval. In a Cluster it
 * goes to the owner of argv[1] (the key of single-key commands), or with
 * one argument to any node.
 */
int rpool_command(struct rpool *p, size_t argc, const char *const *argv, const size_t *argvlen,
		  rpool_cb *cb, void *arg);

/*
 * rpool_eval_multi - several EVALSHA calls pipelined, in one round trip:
 * on one connection (calls[0]'s affinity), or in a Cluster on one
 * connection per node owning their first keys, in parallel. cb is called
 * once per call (same status rules), in order per node. Returns -1 when
 * none could be sent (no cb called); a call that could not be sent when
 * others were completes with RP_CONN.
 */
struct rpool_call {
	unsigned affinity; /* > 0: calls with the same one keep their order (one connection) */
	size_t script;
	size_t nkeys;
	size_t argc;
	const char *const *argv;
	const size_t *argvlen;
	rpool_cb *cb;
	void *arg;
};
int rpool_eval_multi(struct rpool *p, size_t ncalls, const struct rpool_call *calls);

/* rpool_topology - "redis", "sentinel" or "cluster". */
const char *rpool_topology(const struct rpool *p);

/*
 * rpool_nodes - the nodes in use (the master; in a Cluster every master
 * of the slot map) into out[0..max); returns how many there are.
 */
size_t rpool_nodes(const struct rpool *p, struct rpool_node_info *out, size_t max);

/* rpool_free - complete every pending call with RP_SHUTDOWN, free everything. */
void rpool_free(struct rpool *p);

#endif
