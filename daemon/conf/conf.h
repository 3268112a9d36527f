/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * conf.h - the configuration snapshot: what admitd.conf says, validated.
 *
 * Owns: struct conf and everything hanging from it (all strings and arrays
 * are owned by the snapshot and freed by conf_free). A snapshot is immutable
 * once conf_load returns; the daemon reads it, never writes it.
 */

#ifndef ADMITD_CONF_H
#define ADMITD_CONF_H

#include "adaptive.h"
#include "strategy.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum conf_meter {
	METER_REQUESTS = 0, /* charged `cost` at acquire */
	METER_TOKENS,	    /* charged the sum of all reported tokens at release */
	METER_TOKENS_KEY,   /* charged tokens[meter_key] at release */
	METER_CONCURRENCY,  /* leases in flight; sp.amount is the cap */
};

/* Token counts by meter name: reported at release, or reserved at acquire. */
struct meter_tokens {
	const char *name;
	int64_t n;
};

enum conf_fail_mode {
	FAIL_FALLBACK = 0, /* serve from the in-process limiter / divisor */
	FAIL_OPEN,	   /* admit while the backend cannot decide */
	FAIL_CLOSED,	   /* refuse with `unavailable` */
};

struct conf_rule {
	char *name; /* "rule NAME = ..."; NULL for an unnamed rule (every class) */
	char *text; /* the conf's value, whitespace-normalised: "requests sliding-window 600/1m" */
	enum conf_meter meter;
	char *meter_key;	/* tokens.NAME: "NAME"; else NULL */
	struct strat_params sp; /* concurrency: sp.amount = N, kind unused */
	size_t idx;		/* its index in conf_scope.rules */
	int line;
};

struct conf_class {
	char *name;
	size_t nrules;
	size_t *rules;	   /* indexes into conf_scope.rules (named rules only) */
	int64_t floor;	   /* units of each of its rules it may not take; 0 = none */
	int64_t floor_ppm; /* or millionths of each rule's own capacity (floor=P%); 0 = none */
	int priority;	   /* priority=N: a higher class's waiters are served first; default 0 */
	int line;
};

/* `weight NAME = W`: a tenant's share of a key's queue under contention. */
struct conf_weight {
	char *name; /* the tenant: [A-Za-z0-9_.-]{1,64} */
	int weight; /* 1..CONF_WEIGHT_MAX */
	int line;
};

#define CONF_WEIGHT_MAX	 1000 /* the largest `weight NAME = W` */
#define CONF_MAX_WEIGHTS 64   /* `weight` lines per scope: the tenants a key tracks */

struct conf_plan;

struct conf_scope {
	char *name;
	int line;
	int64_t max_concurrent;	     /* per key, this daemon; 0 = unlimited */
	int64_t min_delay_ms;	     /* 0 = none */
	int64_t cluster_concurrency; /* 0 = none */
	int64_t quota;		     /* 0 = none */
	int64_t quota_window_ms;
	char *quota_text; /* "quota 60/1m", for refusals; NULL when none */
	double jitter;	  /* 0..1 */
	struct conf_rule *rules;
	size_t nrules;
	struct conf_class *classes;
	size_t nclasses;
	char *default_class;	     /* NULL = none */
	struct conf_weight *weights; /* listed tenants; every other one weighs 1, as one flow */
	size_t nweights;
	int64_t timeout_ms;	      /* default wait budget; default 30s */
	int64_t lease_ttl_ms;	      /* default 60s */
	int64_t concurrency_retry_ms; /* default 25ms */
	double fallback_divisor;      /* default 1; ignored when _auto */
	bool fallback_divisor_auto;
	char *default_key; /* NULL = a request must give key or url */
	bool shadow;
	bool fair; /* one order of waiters across the fleet (tickets in Redis) */
	enum conf_fail_mode fail_mode;
	int64_t max_waiters; /* per scope; default 1024 */
	/* adaptive = yes: the requests rules move between a floor and their
	 * configured amount, learned from upstream outcomes (adaptive.h) */
	bool adaptive;
	int64_t adaptive_floor_n, adaptive_floor_w_ms; /* adaptive_floor N/W; 0: unset */
	double adaptive_decrease;		       /* the factor a limited outcome applies */
	double adaptive_increase_pct;		       /* step as % of the ceiling; 0: a rate */
	int64_t adaptive_increase_n, adaptive_increase_w_ms; /* ... or N/W per interval */
	int64_t adaptive_interval_ms;
	long adapt_rule;	   /* the first requests rule: its amount is the ceiling; -1 */
	struct adapt_params adapt; /* in milli-units of adapt_rule (valid when adaptive) */
	/* override_max = F: a key's override (the override op) may set its rule
	 * amounts up to F times the conf's and min_delay down to the conf's / F;
	 * tightening is always allowed. override_milli = F * 1000; 0: the scope
	 * takes no overrides (and its acquires read no override). */
	double override_max;
	int64_t override_milli;
	/* Compiled at load (conf_plan.c): */
	long penalty_rule; /* the rule whose Redis hash holds a key's penalty; -1: the state hash */
	struct conf_plan *plans; /* nclasses + 1: one per class, then the one of no class */
};

/* A list of uids or gids (allow_uids, allow_gids), names resolved at load. */
struct conf_ids {
	uint32_t *ids; /* owned */
	size_t n;      /* 0: the key is absent (anyone the socket's mode lets in) */
};

struct conf {
	char *path;
	char *socket;			 /* default ADMIT_DEFAULT_SOCKET */
	int socket_mode;		 /* octal in the conf; default 0660 */
	char *redis;			 /* NULL or "" = local mode */
	char *prefix;			 /* key namespace in Redis; default "admitd" */
	int64_t max_line;		 /* bytes; default 64 KiB */
	int64_t max_connections;	 /* default 1024 */
	int64_t client_write_timeout_ms; /* default 10s */
	int64_t redis_pool;		 /* default 2 */
	int64_t redis_batch;		 /* acquires of different keys in one call; default 32 */
	int64_t redis_refusal_hold_ms;	 /* known refusals kept at most this; default 1s */
	int64_t redis_book_ahead_ms;	 /* hot keys' units booked ahead for this; default 5ms */
	bool redis_functions;		 /* FCALL when the server has functions; default yes */
	int64_t fallback_pods;		 /* default 1: auto's divisor before any heartbeat */
	int64_t redis_timeout_ms;	 /* default 250ms */
	char *redis_password_file;	 /* NULL = no AUTH */
	char *redis_user;		 /* NULL = default user */
	char *sentinel_password_file;	 /* NULL = sentinels without AUTH */
	char *redis_tls_ca_file;	 /* NULL = the system store */
	char *redis_tls_cert_file;	 /* NULL = no client certificate */
	char *redis_tls_key_file;	 /* NULL = in redis_tls_cert_file */
	char *redis_tls_server_name;	 /* NULL = the host connected to */
	bool redis_tls_verify;		 /* default yes */
	char *log_level;		 /* debug, info, warn, error; default info */
	bool watch_conf;		 /* reload when the file changes */
	char *metrics;			 /* HOST:PORT of /metrics; NULL = off */
	int64_t metrics_timeout_ms;	 /* an HTTP exchange's absolute deadline; default 10s */
	int64_t socket_group;		 /* gid the socket is chowned to; -1: left as created */
	struct conf_ids allow_uids;	 /* peers let in by uid (SO_PEERCRED) */
	struct conf_ids allow_gids;	 /* ... or by one of their groups */
	int64_t max_keys;		 /* keys of all scopes kept at once; default 1,000,000 */
	int64_t max_leases;		 /* leases held through this daemon; default 100,000 */
	struct conf_scope *scopes;
	size_t nscopes;
};

/*
 * conf_load - read and validate a conf file. Every problem found is written
 * to errf as "file:line: message" (all of them, not just the first).
 * Returns the snapshot, or NULL when there was any error.
 */
struct conf *conf_load(const char *path, FILE *errf);

/* conf_load_string - the same from a string; `name` stands in for the path. */
struct conf *conf_load_string(const char *text, const char *name, FILE *errf);

void conf_free(struct conf *c);

/* How a reload applies a changed [admitd] key. */
enum conf_change {
	CONF_CHANGE_LIVE,    /* at once: the daemon reads it where it is used */
	CONF_CHANGE_REDIS,   /* the Redis connections are remade */
	CONF_CHANGE_RESTART, /* not applied: the running value is kept */
};
typedef void conf_change_cb(void *arg, const char *key, enum conf_change how);

/*
 * conf_reload_keys - compare the [admitd] keys of the running conf and a
 * newly loaded one, through the option table: cb is called once per key
 * whose value differs, with how the reload applies it; a key that needs a
 * restart gets the running value back in nw, so nw describes what runs.
 * [scope] keys are the scopes' business (scope.c). false only when memory
 * ran out (nw is then half-reconciled: free it).
 */
bool conf_reload_keys(const struct conf *old, struct conf *nw, conf_change_cb *cb, void *arg);

/*
 * conf_rule_params - a rule's strategy params as the conf gives them, a burst
 * of 0 being the amount: what Redis applies, and where the in-process
 * limiter starts from (lim_rule_params adds shares, learned amounts and
 * overrides).
 */
static inline struct strat_params conf_rule_params(const struct conf_rule *r)
{
	struct strat_params p = r->sp;

	if (p.burst == 0)
		p.burst = p.amount;
	return p;
}

/*
 * conf_class_floor - the units class cls (NULL: none) leaves of a rule whose
 * params (with shares, learned amounts and overrides) are p: floor=N's N, or
 * floor=P%'s part of p's capacity, rounded down (strat_floor_units).
 */
static inline int64_t conf_class_floor(const struct conf_class *cls, const struct strat_params *p)
{
	return cls == NULL ? 0 : strat_floor_units(p, cls->floor, cls->floor_ppm);
}

/*
 * conf_rule_capacity - what rule r holds under params p, less the floor of
 * cls (NULL: none) on it (never below 0).
 */
int64_t conf_rule_capacity(const struct conf_rule *r, const struct strat_params *p,
			   const struct conf_class *cls);

/* conf_token_charge - what tokens[0..n) count on token rule r (0 for other meters). */
int64_t conf_token_charge(const struct conf_rule *r, const struct meter_tokens *tokens, size_t n);

/*
 * conf_settle_charge - what a release charges token rule r: what was reported
 * minus what was reserved under the names reported (a refund when less was
 * used); a name reserved but not reported keeps its reservation charged.
 */
int64_t conf_settle_charge(const struct conf_rule *r, const struct meter_tokens *tokens,
			   size_t ntokens, const struct meter_tokens *reserve, size_t nreserve);

/* Lookups (conf_find.c): NULL when absent. */
const struct conf_scope *conf_scope_find(const struct conf *c, const char *name);
const struct conf_class *conf_class_find(const struct conf_scope *s, const char *name);
const struct conf_weight *conf_weight_find(const struct conf_scope *s, const char *tenant);

/*
 * conf_dump_keys - print every conf key with its default and help text
 * (from the option tables), for `admitd --help-conf` and docs/conf-keys.md.
 */
void conf_dump_keys(FILE *out);

#endif
