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
 * caller's behalf, except the strings admit_result_target hands out.
 *
 * ABI: callers allocate the public structs, so their size and layout are
 * fixed for a soname (libadmit.so.3). Reply fields newer than that are read
 * through functions (admit_result_remaining and the like), never added as
 * members; new calls are new functions.
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
	ADMIT_E_INTERRUPTED = -7, /* admit_cancel ended the wait; the acquire spent nothing */
};

/* timeout_ms value meaning "the scope's `timeout`" (the field is not sent). */
#define ADMIT_TIMEOUT_DEFAULT (-1)

/*
 * cost value that sends "cost":0 (an admission that takes no unit of the
 * `requests` meters). A cost of 0 sends nothing: the daemon's default, 1.
 */
#define ADMIT_COST_ZERO (-1)

/*
 * How long a connect keeps retrying a socket that is missing (ENOENT) or
 * refused (ECONNREFUSED), the daemon not being up yet: 5 s unless
 * $ADMITD_CONNECT_TIMEOUT says otherwise (milliseconds, or a duration with a
 * unit: 250ms, 5s, 1m; 0: fail at once).
 */
#define ADMIT_CONNECT_TIMEOUT_MS 5000

/* One target of a multi-target acquire (see PROTOCOL.md, "targets"). */
struct admit_target {
	const char *scope;
	const char *key; /* key or url; both NULL: the scope's default key */
	const char *url;
	const char *cls; /* NULL: the scope's default_class */
	int64_t cost;	 /* 0: not sent (the daemon's default, 1); ADMIT_COST_ZERO: 0 */
};

/* A named token count: {"input":300} is {"input", 300}. */
struct admit_token {
	const char *name;
	int64_t count;
};

/*
 * What to acquire. Start from ADMIT_REQ_INIT so timeout_ms is the scope's
 * default rather than "do not wait". When ntargets > 0 the request is a
 * multi-target acquire and scope/key/url/cls/cost are ignored.
 *
 * reserve (nreserve entries, at most ADMIT_MAX_TOKENS) charges the token
 * meters at acquire: {"output", 500} books 500 output tokens now, and the
 * release settles them with the counts it reports.
 */
struct admit_req {
	const char *scope;
	const char *key;
	const char *url;
	const char *cls;
	int64_t cost;	    /* 0: not sent (default 1); ADMIT_COST_ZERO: 0 */
	int64_t timeout_ms; /* ADMIT_TIMEOUT_DEFAULT, 0 (do not wait) or a budget */
	bool detach;	    /* the lease outlives this connection */
	const struct admit_target *targets;
	size_t ntargets;
	const struct admit_token *reserve;
	size_t nreserve;
};

/*
 * One rule amount of an override: {"0", 1} sets the scope's first rule to 1
 * for the key. rule is a rule's name in the conf, or its 0-based index in
 * the scope as a decimal string; amount is >= 1.
 */
struct admit_rule_amount {
	const char *rule;
	int64_t amount;
};

/* Most token names one release or reservation may carry. */
#define ADMIT_MAX_TOKENS 16

#define ADMIT_REQ_INIT                              \
	{                                           \
		.timeout_ms = ADMIT_TIMEOUT_DEFAULT \
	}

/* A named counter of a status reply: refusals by code, Redis errors by op. */
struct admit_count {
	char *name;
	int64_t count;
};

/*
 * One scope of a status reply. Counters are since the daemon started; each
 * is -1 when the daemon did not send it.
 */
struct admit_scope_stat {
	char *name;
	int64_t leases;	 /* held now */
	int64_t waiting; /* acquires queued now */
	int64_t keys;	 /* keys with in-process state now */
	int64_t admitted;
	int64_t refused;	   /* all refusals; by code in refusals[] */
	int64_t timeouts;	   /* acquires that waited their whole budget */
	int64_t canceled;	   /* acquires whose client left while waiting */
	int64_t fallback_admitted; /* admissions decided by the in-process fallback */
	int64_t shadow_limited;
	int64_t expired;	      /* leases that ended at lease_ttl unreleased */
	int64_t wait_ms_total;	      /* summed waited_ms of admissions */
	struct admit_count *refusals; /* the nonzero ones, e.g. {"limited", 3} */
	size_t nrefusals;
	int64_t releases;  /* release requests naming a lease of the scope */
	int64_t penalties; /* penalize requests naming the scope */
	/* Admissions by wait: wait_buckets[i] counts the waits in
	 * (wait_bounds_ms[i-1], wait_bounds_ms[i]] of the result, the last one
	 * those above every bound (per bucket, not cumulative). */
	int64_t *wait_buckets;
	size_t nwait_buckets;
};

/* The "redis" block of a status reply (Redis configured); -1 when absent. */
struct admit_redis_stat {
	int64_t pods_seen;	    /* admitd processes alive at the last heartbeat */
	int64_t queued;		    /* releases waiting for Redis to answer again */
	int64_t reconciled;	    /* unknown outcomes settled afterwards */
	int64_t rebooked;	    /* leases booked again after Redis came back empty */
	int64_t dropped;	    /* queued releases given up */
	struct admit_count *errors; /* failed calls by operation */
	size_t nerrors;
};

/* One rule of an inspect reply. */
struct admit_rule_stat {
	char *rule; /* the conf text, e.g. "requests token-bucket 10/1s" */
	int64_t remaining;
	int64_t capacity;
	int64_t full_in_ms; /* until the rule is back to its capacity */
};

/*
 * An inspect reply: where one key of a scope stands. Integers are -1 when
 * the reply did not carry them; quota_* only when has_quota.
 */
struct admit_inspect {
	char *scope;
	char *key;
	int64_t penalty_ms; /* until the key's penalty ends; 0: none */
	int64_t next_in_ms; /* until its pacing (min_delay) lets the next one in */
	int64_t leases;	    /* held (cluster-wide in Redis mode) */
	bool has_quota;
	int64_t quota_used;
	int64_t quota_limit;
	int64_t quota_frees_in_ms;
	struct admit_rule_stat *rules;
	size_t nrules;
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
	char *raw;			/* the reply line as received (no newline) */
	int64_t limit;			/* exceeds_limit: the capacity the request asks more than */
	struct admit_redis_stat *redis; /* status with Redis configured, else NULL */
	struct admit_inspect *inspect;	/* inspect, else NULL */
	int64_t uptime_ms;		/* status */
	int64_t connections;		/* status: client connections open */
	int64_t *wait_bounds_ms;	/* status: upper bounds of wait_buckets (ms) */
	size_t nwait_bounds;
};

struct admit;

/*
 * admit_connect - connect to admitd. `path` NULL or "" means $ADMITD_SOCKET,
 * else ADMIT_DEFAULT_SOCKET. A socket that is missing or refused (the
 * daemon is starting) is retried with a short backoff (20 ms doubling to
 * 200 ms, jittered) for up to the connect timeout (ADMIT_CONNECT_TIMEOUT_MS,
 * $ADMITD_CONNECT_TIMEOUT). Returns NULL on failure with errno set (the
 * library prints nothing). The connect itself waits at most the default
 * I/O timeout (10 s) for a daemon that does not accept (its listen backlog is
 * full): errno ETIMEDOUT. admit_close closes and frees; NULL is fine.
 *
 * admit_new makes the same handle without connecting: its first call
 * connects, within that call's budget (see admit_set_connect_timeout).
 * NULL only when out of memory.
 *
 * A handle whose connection broke, or that the daemon closed (a restart),
 * connects again on its next call; leases that were not detached were
 * released by the daemon when it broke. A call in flight when the
 * connection breaks fails with ADMIT_E_IO and is not sent again.
 */
struct admit *admit_connect(const char *path);
struct admit *admit_new(const char *path);
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
 * admit_set_connect_timeout - how long a (re)connect retries a missing or
 * refused socket; 0 tries once. Always within the call's own budget: an
 * acquire with timeout_ms 300 spends at most ~300 ms connecting and
 * waiting together (the time spent connecting is taken from the timeout_ms
 * it sends), and admit_try, whose budget is 0, tries the connect once.
 */
void admit_set_connect_timeout(struct admit *a, int64_t ms);

/*
 * admit_set_tenant - the tenant this handle's acquires (acquire, try, once,
 * try_once) name from now on: the protocol's "tenant", 1 to 64 of
 * [A-Za-z0-9_.-], which orders a key's waiters among tenants by the
 * scope's `weight` lines. NULL or "": the default tenant (none sent). The
 * daemon refuses a bad name with ADMIT_E_BAD_REQUEST. 0, or -1 with errno
 * ENOMEM. (A function, not a field of struct admit_req, so that the
 * struct keeps its size.)
 */
int admit_set_tenant(struct admit *a, const char *tenant);

/*
 * The calls. Each returns res->err (so `if (admit_try(...) == ADMIT_OK)`
 * reads naturally) and always fills *res, which the caller frees with
 * admit_result_free. res is overwritten without being freed first.
 * A refusal no wait can help (ADMIT_E_EXCEEDS_LIMIT: the cost is larger
 * than a rule's capacity) carries the capacity in res->limit.
 *
 * admit_acquire waits up to rq->timeout_ms; admit_try never waits (it sends
 * timeout_ms 0 whatever rq says). admit_release is idempotent: res->held
 * says whether the lease was still held; tokens may be NULL. admit_penalize
 * sends retry_after (an upstream's Retry-After value: seconds or an
 * HTTP-date) when it is not NULL, else retry_after_ms; key and url both
 * NULL penalize the scope's default key.
 */
int admit_acquire(struct admit *a, const struct admit_req *rq, struct admit_result *res);
int admit_try(struct admit *a, const struct admit_req *rq, struct admit_result *res);
/*
 * admit_once, admit_try_once - admit_acquire and admit_try for an admission
 * with nothing to release ("lease": false): one round trip, for a scope that
 * only limits rates. res->lease is NULL; rq->detach and rq->reserve are
 * ADMIT_E_ARG (nothing is sent), and a scope whose release books something
 * (max_concurrent, cluster_concurrency, a concurrency rule, min_delay, a
 * tokens rule, adaptive) answers ADMIT_E_BAD_REQUEST.
 */
int admit_once(struct admit *a, const struct admit_req *rq, struct admit_result *res);
int admit_try_once(struct admit *a, const struct admit_req *rq, struct admit_result *res);
int admit_release(struct admit *a, const char *lease, const struct admit_token *tokens,
		  size_t ntokens, struct admit_result *res);
int admit_penalize(struct admit *a, const char *scope, const char *key, const char *url,
		   int64_t retry_after_ms, const char *retry_after, struct admit_result *res);
int admit_status(struct admit *a, struct admit_result *res);
int admit_ping(struct admit *a, struct admit_result *res);

/*
 * admit_release_outcome - admit_release that also reports how the upstream
 * call went: outcome "ok", "limited" (the upstream refused for rate: a 429,
 * or a 503 with Retry-After) or "error" (anything else); NULL sends none
 * (admit_release). Any other string is ADMIT_E_ARG and nothing is sent.
 */
int admit_release_outcome(struct admit *a, const char *lease, const struct admit_token *tokens,
			  size_t ntokens, const char *outcome, struct admit_result *res);

/*
 * admit_cancel - end the wait of the acquire in progress on `a`, from
 * another thread or a signal handler (it is async-signal-safe: an atomic
 * store and a write(2)). The acquire sends the daemon a cancel and returns
 * ADMIT_E_INTERRUPTED: the daemon ended it and it spent nothing (a lease
 * admitted just before the cancel arrived is released before it returns).
 * A daemon that has no cancel op gets the connection closed instead, which
 * ends the wait there too, along with the handle's leases not detached.
 * Only an acquire that may wait (admit_acquire with a timeout other than 0)
 * can be interrupted, once it has sent its request; a cancel when none is
 * waiting is forgotten when the next one starts. Returns 0, or -1 for a
 * NULL handle. The handle must outlive the call.
 */
int admit_cancel(struct admit *a);

/*
 * Reply fields read from res->raw (see "ABI" above), so they cost a parse
 * of the reply each; they are absent from replies of a daemon that predates
 * them.
 *
 * admit_result_remaining: on an acquire's result, admitted or refused
 * (limited, budget_exceeded, timeout), what the tightest rule or cap of the
 * targets still allows after this decision, in its meter's units;
 * admit_result_reset_ms: the ms until that rule is full again (0: it is
 * now). Both -1 when the reply had none (nothing limits the targets).
 *
 * admit_result_target: on a refused acquire, the index (into rq->targets;
 * 0 for a single-target acquire) of the target that refused, -1 when the
 * reply does not say. When scope or key is not NULL it is set to a
 * malloc'd copy of that target's scope or key (NULL when absent), which the
 * caller frees with free().
 */
int64_t admit_result_remaining(const struct admit_result *res);
int64_t admit_result_reset_ms(const struct admit_result *res);
int64_t admit_result_target(const struct admit_result *res, char **scope, char **key);

/*
 * admit_result_limit: on an acquire's result, admitted or refused, the
 * i-th meter (from 0, in the reply's order) of its "limits": per meter
 * ("requests", "tokens", "tokens.NAME", "concurrency") the tightest limit
 * of the targets after this decision, the one with the fewest units left.
 * Returns 1 and sets what is asked (each pointer may be NULL): *meter and
 * *rule to malloc'd copies (the caller frees them; rule is a named rule's
 * name, an unnamed rule's index in its scope, or "quota",
 * "cluster_concurrency", "max_concurrent"), *limit to its capacity,
 * *remaining to the units left, *reset_ms to the ms until it would admit
 * *limit again if nothing more were taken (0: now). Returns 0, setting
 * nothing, past the last meter (or when the reply has no limits), and
 * ADMIT_E_NOMEM when a copy fails (nothing set). A member of the wrong
 * shape is skipped (it has no index). Iterate with i = 0, 1, ... until it
 * returns 0; admit_result_limit_of finds one meter by name the same way.
 */
int admit_result_limit(const struct admit_result *res, size_t i, char **meter, char **rule,
		       int64_t *limit, int64_t *remaining, int64_t *reset_ms);
int admit_result_limit_of(const struct admit_result *res, const char *meter, char **rule,
			  int64_t *limit, int64_t *remaining, int64_t *reset_ms);

/*
 * Operator calls on one key (key, or url's host; both NULL: the scope's
 * default key, its conf's `key =`, as for admit_penalize): admit_reset
 * clears its penalty and pacing on every daemon; admit_inspect fills
 * res->inspect (and res->backend) with where it stands: penalty, pacing,
 * leases, quota and each rule's remaining units. cls (may be NULL) picks
 * the class whose rules inspect reports. res->raw holds the whole reply.
 */
int admit_reset(struct admit *a, const char *scope, const char *key, const char *url,
		struct admit_result *res);
int admit_inspect(struct admit *a, const char *scope, const char *key, const char *url,
		  const char *cls, struct admit_result *res);

/*
 * admit_override - for ttl_ms (1 to 30 days), replace one key's min_delay
 * (min_delay_ms >= 0; -1: not given) and rule amounts (nrules entries, at
 * most ADMIT_MAX_TOKENS), in Redis (so on every daemon) and in this daemon;
 * at least one of the two. Key and url as for admit_reset (both NULL: the
 * scope's default key). A new override replaces the key's last one whole;
 * admit_reset lifts it, and admit_inspect's res->raw shows it while it holds
 * ("override": ttl_ms left, min_delay_ms, rules). Tightening is always
 * allowed; loosening only within the scope's override_max (the conf's
 * amounts times it, its min_delay divided by it), else
 * ADMIT_E_BAD_REQUEST, as for a scope without override_max or a rule it
 * does not have. ADMIT_E_UNAVAILABLE: Redis could not be told, and the
 * override holds on this daemon only (retry). Bad arguments are ADMIT_E_ARG
 * and nothing is sent. res->backend names the backend; res->raw has the
 * whole reply.
 */
int admit_override(struct admit *a, const char *scope, const char *key, const char *url,
		   int64_t ttl_ms, int64_t min_delay_ms, const struct admit_rule_amount *rules,
		   size_t nrules, struct admit_result *res);

/*
 * admit_override_tenant - for ttl_ms (1 to 30 days), tenant (1 to 64 of
 * [A-Za-z0-9_.-]) weighs weight (1 to 1000) in the order of one key's
 * waiters, instead of its conf `weight` line (1 when unlisted); the key's
 * other limits and overrides are left alone. At most the scope's
 * override_max times the conf weight, and at most 16 tenants a key, else
 * ADMIT_E_BAD_REQUEST. Key and url, res and ADMIT_E_UNAVAILABLE as for
 * admit_override; admit_reset lifts it, admit_inspect's res->raw shows it
 * ("tenant_weights").
 */
int admit_override_tenant(struct admit *a, const char *scope, const char *key, const char *url,
			  const char *tenant, int64_t weight, int64_t ttl_ms,
			  struct admit_result *res);

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
