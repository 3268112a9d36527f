/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * admit.h - libadmit, the C client of admitd.
 *
 * Owns: the public API. A `struct admit` is one connection to admitd's Unix
 * socket; every call on it sends one request line and blocks (poll with a
 * deadline) until the matching reply line arrives. Handles share nothing, so
 * several threads may each use their own handle at the same time; one handle
 * must not be used by two threads at once.
 *
 * Results come back in a `struct admit_result` the caller provides. Every
 * string in it is malloc'd by the library and freed by admit_result_free
 * (also safe on a zeroed or already freed result), so a caller can keep or
 * drop any result without leaking. Nothing else is ever allocated on the
 * caller's behalf.
 */

#ifndef ADMIT_H
#define ADMIT_H

#include "admit_proto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Client-side failures, kept apart from the daemon's codes (enum admit_err
 * from admit_proto.h, all >= 0): these are negative.
 */
enum admit_client_err {
	ADMIT_E_CONNECT = -1,  /* could not connect to the socket (errno kept) */
	ADMIT_E_IO = -2,       /* write/read failed or the daemon closed the connection */
	ADMIT_E_DEADLINE = -3, /* no reply before the I/O deadline; connection dropped */
	ADMIT_E_PROTO = -4,    /* the reply is not a protocol reply */
	ADMIT_E_ARG = -5,      /* bad arguments to the call; nothing was sent */
	ADMIT_E_NOMEM = -6,
};

/* timeout_ms value meaning "the scope's `timeout`" (the field is not sent). */
#define ADMIT_TIMEOUT_DEFAULT (-1)

/* One target of a multi-target acquire (see PROTOCOL.md, "targets"). */
struct admit_target {
	const char *scope;
	const char *key; /* key or url; both NULL: the scope's default key */
	const char *url;
	const char *cls; /* NULL: the scope's default_class */
	int64_t cost;	 /* 0: not sent (the daemon's default, 1) */
};

/*
 * What to acquire. Start from ADMIT_REQ_INIT so timeout_ms is the scope's
 * default rather than "do not wait". When ntargets > 0 the request is a
 * multi-target acquire and scope/key/url/cls/cost are ignored.
 */
struct admit_req {
	const char *scope;
	const char *key;
	const char *url;
	const char *cls;
	int64_t cost;	    /* 0: not sent (default 1) */
	int64_t timeout_ms; /* ADMIT_TIMEOUT_DEFAULT, 0 (do not wait) or a budget */
	bool detach;	    /* the lease outlives this connection */
	const struct admit_target *targets;
	size_t ntargets;
};

#define ADMIT_REQ_INIT                              \
	{                                           \
		.timeout_ms = ADMIT_TIMEOUT_DEFAULT \
	}

/* A post-hoc meter reported at release: {"input":300} is {"input", 300}. */
struct admit_token {
	const char *name;
	int64_t count;
};

/* One scope line of a status reply. */
struct admit_scope_stat {
	char *name;
	int64_t leases;
	int64_t waiting;
};

/*
 * The outcome of one call. `err` is ADMIT_OK, an enum admit_err sent by the
 * daemon, or an enum admit_client_err. Integer fields are -1 and strings NULL
 * when the reply did not carry them.
 */
struct admit_result {
	int err;
	int64_t retry_after_ms;		 /* limited, budget_exceeded, ... */
	int64_t waited_ms;		 /* acquire */
	bool held;			 /* release: the lease was held until now */
	bool shadow_limited;		 /* acquire in a shadow scope: would have been refused */
	char *lease;			 /* acquire */
	char *backend;			 /* "local", "redis" or "fallback" */
	char *rule;			 /* refusals: the conf text that decided */
	char *message;			 /* failures: the daemon's (or the library's) words */
	char *version;			 /* status */
	int64_t uptime_s;		 /* status */
	struct admit_scope_stat *scopes; /* status */
	size_t nscopes;
	char *raw; /* the reply line as received (no newline) */
};

struct admit;

/*
 * admit_connect - connect to admitd. `path` NULL or "" means $ADMITD_SOCKET,
 * else ADMIT_DEFAULT_SOCKET. Returns NULL on failure with errno set (the
 * library prints nothing). The connect itself waits at most the default
 * I/O timeout (10 s) for a daemon that does not accept (its listen backlog is
 * full): errno ETIMEDOUT. admit_close closes and frees; NULL is fine.
 * A handle whose connection broke reconnects on its next call; leases that
 * were not detached were released by the daemon when it broke.
 */
struct admit *admit_connect(const char *path);
void admit_close(struct admit *a);

/* The socket path this handle uses (owned by the handle). */
const char *admit_socket_path(const struct admit *a);

/*
 * admit_set_io_timeout - how long a call may wait for its reply beyond the
 * request's own wait budget (default 10000 ms); also how long a reconnect
 * may wait for the daemon to accept. An acquire with the scope's
 * default budget (ADMIT_TIMEOUT_DEFAULT) has no client deadline: the daemon
 * answers when its budget runs out.
 */
void admit_set_io_timeout(struct admit *a, int64_t ms);

/*
 * The calls. Each returns res->err (so `if (admit_try(...) == ADMIT_OK)`
 * reads naturally) and always fills *res, which the caller frees with
 * admit_result_free. res is overwritten without being freed first.
 *
 * admit_acquire waits up to rq->timeout_ms; admit_try never waits (it sends
 * timeout_ms 0 whatever rq says). admit_release is idempotent: res->held
 * says whether the lease was still held; tokens may be NULL. admit_penalize
 * sends retry_after (an upstream's Retry-After value: seconds or an
 * HTTP-date) when it is not NULL, else retry_after_ms.
 */
int admit_acquire(struct admit *a, const struct admit_req *rq, struct admit_result *res);
int admit_try(struct admit *a, const struct admit_req *rq, struct admit_result *res);
int admit_release(struct admit *a, const char *lease, const struct admit_token *tokens,
		  size_t ntokens, struct admit_result *res);
int admit_penalize(struct admit *a, const char *scope, const char *key, const char *url,
		   int64_t retry_after_ms, const char *retry_after, struct admit_result *res);
int admit_status(struct admit *a, struct admit_result *res);
int admit_ping(struct admit *a, struct admit_result *res);

/* Free what a result holds and zero it. */
void admit_result_free(struct admit_result *res);

/*
 * admit_strerror - a short English phrase for any err value a result can
 * hold ("limited", "daemon unreachable", ...). Static storage.
 */
const char *admit_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif
