/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * backend_redis.c - the Redis backend (see backend.h).
 *
 * Owns: struct backend, the Redis keys of every (scope, key), the argument
 * vectors of scripts/acquire.lua, release.lua and penalize.lua, the up/down
 * state and the pod heartbeat. It speaks to Redis only through rpool.c.
 *
 * Keys: PREFIX:{SCOPE:KEY}:s (pacing hash), :q (quota instants), :l (leases
 * in flight), :rN (rule N's counter). One hash tag per (scope, key), so every
 * key one script touches is in one slot (what Redis Cluster needs of a
 * script; this pool speaks to one Redis, not to a cluster).
 *
 * An acquire is one script call per target (FCALL of the function library,
 * or EVALSHA), pipelined when there are several.
 * Any failure (no connection, timeout, an error reply of any kind: script
 * error, NOPERM, OOM) is never read as admitted: the decision is made by the
 * scope's fail_mode (eng_fallback), counted and logged. A target that
 * admitted while another refused or failed is rolled back, pacing included.
 *
 * Seams. Every booking call carries not_after, a Redis time after which it
 * books nothing, so a call whose outcome is unknown (sent, then its
 * connection died or its timer fired) can be settled: once not_after has
 * passed, what it may have booked under its lease id is released
 * (reconcile, idempotent), or, when the fallback granted the lease under
 * the same id, released in Redis with the lease. Releases that Redis
 * cannot take now wait in a queue, tokens and all, until it can. When Redis
 * comes back, or the heartbeat finds that it lost its data, every lease
 * this daemon holds is booked there again (rebook).
 */

#include "backend.h"

#include "adaptive_rt.h"

#include "clock.h"
#include "log.h"
#include "redis_url.h"
#include "rpool.h"
#include "scripts.h"

#include <event2/event.h>
#include <sys/queue.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A pod that has not beaten for this long is not counted by divisor = auto. */
#define RB_POD_WINDOW_MS 5000
#define RB_HEARTBEAT_MS	 1000
/* The release queue: checked every tick, at most BATCH sends a tick. */
#define RB_QUEUE_TICK_MS   50
#define RB_QUEUE_BATCH	   1024
#define RB_QUEUE_MAX	   100000
#define RB_QUEUE_MAX_BYTES (64 * 1024 * 1024)
#define RB_QUEUE_ATTEMPTS  20
/* Waited past a late call's not_after before reconciling it (clock steps). */
#define RB_CLOCK_MARGIN_MS 50
/*
 * How long a lease's settlement record outlives the lease: tokens reported
 * that much after lease_ttl (a call that outlived its lease) still settle.
 */
#define RB_GRACE_MS(cs) ((cs)->lease_ttl_ms)
/* Nodes listed by `status` (a Cluster of more masters shows the first ones). */
#define RB_STATUS_NODES 64

/* The operations whose failures are counted, for `status`. */
enum rb_op {
	RB_OP_ACQUIRE = 0,
	RB_OP_RELEASE,
	RB_OP_ROLLBACK,
	RB_OP_PENALIZE,
	RB_OP_HEARTBEAT,
	RB_OP_RECONCILE,
	RB_OP_REBOOK,
	RB_OP_INSPECT,
	RB_OP_RESET,
	RB_OP_WRITEBACK,
	RB_OP_OVERRIDE,
	RB_OP__COUNT
};
static const char *const rb_op_names[RB_OP__COUNT] = { "acquire",   "release",	 "rollback",
						       "penalize",  "heartbeat", "reconcile",
						       "rebook",    "inspect",	 "reset",
						       "writeback", "override" };

struct rb_rel;
TAILQ_HEAD(rb_rel_list, rb_rel);
struct rb_owe;
TAILQ_HEAD(rb_owe_list, rb_owe);

struct backend {
	struct admitd *ad;
	struct rpool *pool;
	struct rpool_conf pc;
	char *password;
	char *sentinel_password;
	char url_log[512]; /* conf redis with the password hidden, for log lines */
	bool up;
	bool closing; /* inside backend_free: calls complete, nothing new is sent */
	int64_t since_ms;
	int64_t pods_seen; /* from the last heartbeat while up */
	int64_t pod_rank;  /* ... and this pod's rank among them (heartbeat.lua) */
	int64_t offset_ms; /* Redis TIME minus clock_mono_ms, from the last reply */
	bool offset_known;
	char pod_id[64];
	char *pods_key;
	struct event *hb_ev;
	int s_acquire, s_release, s_penalize, s_heartbeat, s_reset, s_inspect, s_writeback;
	int s_override;
	/* What the fallback admitted while Redis could not be asked, by key
	 * (rb_owe), and the write-back of it in flight once Redis answers. */
	struct htab *owed;
	struct rb_owe_list owing;   /* the same entries, for the write-back */
	struct rb_owe_list sending; /* sent, or failed and to be sent again */
	size_t wb_pending;	    /* write-back calls in flight */
	bool wb_active;		    /* acquires wait for it: Redis serves after */
	bool wb_partial; /* a write-back while Redis kept serving (see rb_writeback_owed) */
	uint64_t wb_round, wb_keys, wb_dropped, wb_lost;
	struct event *wb_ev;
	uint64_t errors[RB_OP__COUNT]; /* failed calls by operation */
	uint64_t calls[RB_OP__COUNT];  /* calls the pool took, by operation (metrics) */
	struct rb_rel_list queue;      /* owed to Redis, oldest first */
	size_t nqueued;
	size_t queued_bytes; /* what the queue's records hold (rb_rel.bytes) */
	struct event *queue_ev;
	uint64_t reconciled, rebooked, dropped;
	uint64_t beats; /* heartbeats answered */
	bool was_up;	/* up at least once: a later up is a return */
	/* Single-target acquires of this loop pass, by pool connection, sent
	 * as one call per connection when the pass ends (rb_xb_*). */
	struct rb_xb *xb; /* nxb of them; NULL: every acquire its own call */
	size_t nxb, xb_pending;
	struct event *xb_ev;
};

/* ---- argument vectors ---- */

/*
 * A growable argv whose strings it owns. The first 48 arguments and 1 KB of
 * their bytes live in the struct itself (a call's arguments cost no malloc
 * and no printf on the hot path); more spill into allocated blocks, which
 * never move, so every v[i] stays valid while the argv grows.
 */
#define RARGS_INLINE_N 48
#define RARGS_INLINE_B 1024

struct rblk {
	struct rblk *next;
	size_t used, cap;
	char data[];
};

struct rargs {
	char **v;
	size_t *len;
	size_t n, cap;
	bool oom;
	struct rblk *blk; /* overflow bytes, newest first */
	size_t iused;
	char *iv[RARGS_INLINE_N];
	size_t ilen[RARGS_INLINE_N];
	char ibuf[RARGS_INLINE_B];
};

/* Room for n bytes and a NUL, where they will not move. */
static char *rargs_room(struct rargs *a, size_t n)
{
	struct rblk *k;
	char *p;

	if (a->oom)
		return NULL;
	if (a->iused + n + 1 <= sizeof(a->ibuf)) {
		p = a->ibuf + a->iused;
		a->iused += n + 1;
		return p;
	}
	k = a->blk;
	if (k == NULL || k->used + n + 1 > k->cap) {
		size_t cap = n + 1 > 4096 ? n + 1 : 4096;
		k = malloc(sizeof(*k) + cap);
		if (k == NULL) {
			a->oom = true;
			return NULL;
		}
		k->used = 0;
		k->cap = cap;
		k->next = a->blk;
		a->blk = k;
	}
	p = k->data + k->used;
	k->used += n + 1;
	return p;
}

/* Register the argument at p (n bytes, NUL-terminated by the caller). */
static void rargs_push(struct rargs *a, char *p, size_t n)
{
	if (a->oom || p == NULL)
		return;
	if (a->v == NULL) {
		a->v = a->iv;
		a->len = a->ilen;
		a->cap = RARGS_INLINE_N;
	}
	if (a->n == a->cap) {
		size_t ncap = a->cap * 2;
		char **nv = malloc(ncap * sizeof(*nv));
		size_t *nl = malloc(ncap * sizeof(*nl));
		if (nv == NULL || nl == NULL) {
			free(nv);
			free(nl);
			a->oom = true;
			return;
		}
		memcpy(nv, a->v, a->n * sizeof(*nv));
		memcpy(nl, a->len, a->n * sizeof(*nl));
		if (a->v != a->iv) {
			free(a->v);
			free(a->len);
		}
		a->v = nv;
		a->len = nl;
		a->cap = ncap;
	}
	a->v[a->n] = p;
	a->len[a->n++] = n;
}

/* An argument made of the pieces s[0..ns), each NUL-terminated. */
static void rargs_cat(struct rargs *a, const char *const *s, size_t ns)
{
	size_t i, n = 0, off = 0;
	char *p;

	for (i = 0; i < ns; i++)
		n += strlen(s[i]);
	p = rargs_room(a, n);
	if (p == NULL)
		return;
	for (i = 0; i < ns; i++) {
		size_t k = strlen(s[i]);
		memcpy(p + off, s[i], k);
		off += k;
	}
	p[n] = '\0';
	rargs_push(a, p, n);
}

static void rargs_str(struct rargs *a, const char *s)
{
	rargs_cat(a, &s, 1);
}

/* v in decimal, NUL-terminated, at the end of buf[24]; returns its start. */
static char *rb_itoa(char *buf, int64_t v)
{
	char *q = buf + 23;
	uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;

	*q = '\0';
	do
		*--q = (char)('0' + u % 10);
	while ((u /= 10) != 0);
	if (v < 0)
		*--q = '-';
	return q;
}

/* A decimal integer, without printf. */
static void rargs_int(struct rargs *a, int64_t v)
{
	char num[24], *q = rb_itoa(num, v);
	size_t n = (size_t)(num + 23 - q);
	char *p;

	p = rargs_room(a, n);
	if (p != NULL) {
		memcpy(p, q, n + 1);
		rargs_push(a, p, n);
	}
}

static void rargs_clear(struct rargs *a)
{
	while (a->blk != NULL) {
		struct rblk *k = a->blk;
		a->blk = k->next;
		free(k);
	}
	if (a->v != a->iv) {
		free(a->v);
		free(a->len);
	}
	a->v = NULL;
	a->len = NULL;
	a->n = a->cap = a->iused = 0;
	a->oom = false;
}

static void rb_key(struct rargs *a, const struct backend *b, const struct conf_scope *cs,
		   const char *key, const char *suffix, long idx)
{
	char num[24];
	const char *parts[8] = { b->ad->conf->prefix,
				 ":{",
				 cs->name,
				 ":",
				 key,
				 "}:",
				 suffix,
				 idx >= 0 ? rb_itoa(num, idx) : "" };

	rargs_cat(a, parts, 8);
}

/*
 * The KEYS of acquire.lua and release.lua, which take the same ones: the
 * pacing hash, the quota instants, the leases, then the counters of the
 * plan's rules. Returns how many.
 */
static size_t rb_keys(struct rargs *a, const struct backend *b, const struct conf_scope *cs,
		      const char *key, const struct conf_plan *pl)
{
	size_t i;

	rb_key(a, b, cs, key, "s", -1);
	rb_key(a, b, cs, key, "q", -1);
	rb_key(a, b, cs, key, "l", -1);
	for (i = 0; i < pl->nrules; i++)
		rb_key(a, b, cs, key, "r", (long)pl->rules[i]);
	return 3 + pl->nrules;
}

/* The hash that holds a key's penalty (conf_plan.c says which). */
static void rb_penalty_key(struct rargs *a, const struct backend *b, const struct conf_scope *cs,
			   const char *key)
{
	if (cs->penalty_rule < 0)
		rb_key(a, b, cs, key, "s", -1);
	else
		rb_key(a, b, cs, key, "r", cs->penalty_rule);
}

/*
 * A lease's settlement record, PREFIX:{SCOPE:KEY}:k:NONCE (acquire.lua
 * writes it, release.lua settles through it); with lease_id NULL, the
 * prefix acquire.lua appends each admitted lease's id to.
 */
static void rb_record_key(struct rargs *a, const struct backend *b, const struct conf_scope *cs,
			  const char *key, const char *lease_id)
{
	const char *parts[7] = { b->ad->conf->prefix,
				 ":{",
				 cs->name,
				 ":",
				 key,
				 "}:k:",
				 lease_id != NULL ? lease_id : "" };

	rargs_cat(a, parts, 7);
}

/*
 * The pool connection a (scope, key)'s calls go on, so that they run in
 * the order this daemon sent them (an acquire, its release, an inspect).
 * Not a secret: a crafted key can only choose a connection.
 */
static unsigned rb_affinity(const struct conf_scope *cs, const char *key)
{
	uint32_t h = 2166136261u;
	const char *p;

	for (p = cs->name; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	h = (h ^ ':') * 16777619u;
	for (p = key; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	return h | 1u; /* never 0: 0 means any connection */
}

static void rb_xb_flush(struct backend *b);

/* One script call on the connection of (cs, key). */
static int rb_eval(struct backend *b, const struct conf_scope *cs, const char *key, int script,
		   const struct rargs *a, size_t nkeys, rpool_cb *cb, void *arg)
{
	struct rpool_call one = { .affinity = rb_affinity(cs, key),
				  .script = (size_t)script,
				  .nkeys = nkeys,
				  .argc = a->n,
				  .argv = (const char *const *)a->v,
				  .argvlen = a->len,
				  .cb = cb,
				  .arg = arg };

	rb_xb_flush(b); /* the acquires queued before it go first */
	return rpool_eval_multi(b->pool, 1, &one);
}

static const char *rb_meter(enum conf_meter m)
{
	return m == METER_REQUESTS ? "r" : m == METER_CONCURRENCY ? "c" : "t";
}

/*
 * The Redis time after which a booking call sent now must book nothing: a
 * little before this call times out here (a quarter of redis_timeout is
 * left for the reply to travel), so a script that Redis runs late, after a
 * freeze, cannot leave a lease behind that the fallback's admission will
 * never release. *mono is the same instant on this daemon's clock: once it
 * has passed, no such call can book any more, and what it may have booked
 * can be reconciled. The pool reads Redis's clock in every connection's
 * handshake, so the bound holds from the first call.
 */
static int64_t rb_not_after(struct backend *b, int64_t *mono)
{
	int64_t t = b->ad->conf->redis_timeout_ms, margin = t / 4 > 0 ? t / 4 : 1;
	int64_t now = clock_mono_ms();

	if (!b->offset_known && rpool_clock(b->pool, &b->offset_ms))
		b->offset_known = true;
	*mono = now + t - margin;
	if (!b->offset_known)
		return 0; /* never: rpool_up implies a handshake read TIME */
	return now + b->offset_ms + t - margin;
}

/* Learn Redis's clock from a reply that carries its TIME. */
static void rb_saw_time(struct backend *b, long long redis_ms)
{
	b->offset_ms = (int64_t)redis_ms - clock_mono_ms();
	b->offset_known = true;
}

/* The five params of an adaptive scope, as scripts/lib/adaptive.lua's adapt_arg reads them. */
static void rb_adapt_args(struct rargs *a, const struct conf_scope *cs)
{
	rargs_int(a, cs->adapt.ceil);
	rargs_int(a, cs->adapt.floor);
	rargs_int(a, cs->adapt.factor);
	rargs_int(a, cs->adapt.step);
	rargs_int(a, cs->adapt.interval_ms);
}

/*
 * The tail of acquire.lua's and release.lua's ARGV: the adaptive params
 * (five zeros when only the override follows), then override_milli.
 */
static void rb_adapt_ovr_args(struct rargs *a, const struct conf_scope *cs, bool adapt, bool ovr)
{
	int i;

	if (adapt)
		rb_adapt_args(a, cs);
	else if (ovr)
		for (i = 0; i < 5; i++)
			rargs_int(a, 0);
	if (ovr)
		rargs_int(a, cs->override_milli);
}

/* KEYS and ARGV of acquire.lua for one target (see the script's header). */
static void rb_acquire_args(struct rargs *a, struct backend *b, const struct target_rt *t,
			    const char *lease_id, size_t count, int64_t not_after,
			    const struct lim_tokens *reserve, size_t nreserve, size_t *nkeys)
{
	const struct conf_scope *cs = t->kq->sc->cs;
	const struct conf_plan *pl = conf_plan_of(cs, t->cls);
	size_t i;

	*nkeys = rb_keys(a, b, cs, t->kq->key, pl);
	if (pl->penalty_extra) {
		rb_penalty_key(a, b, cs, t->kq->key);
		(*nkeys)++;
	}
	if (pl->release_books) { /* the settlement records' prefix: the last key */
		rb_record_key(a, b, cs, t->kq->key, NULL);
		(*nkeys)++;
	}
	rargs_str(a, lease_id);
	rargs_int(a, (int64_t)count);
	rargs_int(a, t->cost);
	rargs_int(a, t->cls ? t->cls->floor : 0);
	rargs_int(a, cs->min_delay_ms);
	rargs_int(a, pl->serialized ? 1 : 0);
	rargs_int(a, cs->cluster_concurrency);
	rargs_int(a, cs->quota);
	rargs_int(a, cs->quota_window_ms);
	rargs_int(a, cs->lease_ttl_ms);
	rargs_int(a, cs->concurrency_retry_ms);
	rargs_int(a, pl->tracks_leases ? 1 : 0);
	rargs_int(a, (int64_t)pl->nrules);
	for (i = 0; i < pl->nrules; i++) {
		const struct conf_rule *r = &cs->rules[pl->rules[i]];
		struct strat_params p = lim_rule_params(r, LIM_WHOLE);
		rargs_str(a, rb_meter(r->meter));
		rargs_str(a, strat_kind_name(p.kind));
		rargs_int(a, p.amount);
		rargs_int(a, p.window_ms);
		rargs_int(a, p.burst);
		rargs_int(a, (int64_t)pl->rules[i]);
		rargs_int(a, lim_token_charge(r, reserve, nreserve));
	}
	rargs_int(a, pl->penalty_in >= 0 ? pl->penalty_in + 1
		     : pl->penalty_extra ? (int64_t)pl->nrules + 1
					 : 0);
	rargs_int(a, not_after);
	if (pl->release_books) {
		char claim[LEASE_ID_CLAIM_MAX];
		lease_id_claim(reserve, nreserve, claim, sizeof(claim));
		rargs_int(a, cs->lease_ttl_ms + RB_GRACE_MS(cs));
		rargs_str(a, claim);
	} else if (cs->adaptive || cs->override_milli > 0) {
		rargs_int(a, 0); /* no settlement record: the adaptive params follow */
		rargs_str(a, "");
	}
	rb_adapt_ovr_args(a, cs, cs->adaptive, cs->override_milli > 0);
}

/* The modes of release.lua (see its header). */
enum rb_mode { RB_M_RELEASE = 0, RB_M_ROLLBACK, RB_M_RECONCILE, RB_M_REBOOK, RB_M_OUTCOME };
static const char *const rb_mode_names[] = { "release", "rollback", "reconcile", "rebook",
					     "outcome" };

/*
 * KEYS and ARGV of release.lua for one target. A release charges the token
 * meters that apply what was reported, less what was reserved under the
 * names reported (lim_settle_charge); a rollback refunds `cost` to the
 * request meters and the reservation to the token meters, and passes x1,
 * x2 (the pacing it booked and replaced); rebook passes the ms the lease
 * has left and not_after.
 */
struct rb_settle {
	const struct lim_tokens *tokens, *reserve;
	size_t ntokens, nreserve;
	bool own;	   /* sent by the daemon that issued the lease */
	const char *claim; /* the reservation the handle names (lease_id_claim) */
	int outcome;	   /* enum adapt_outcome the release reports */
};

static void rb_release_args(struct rargs *a, const struct backend *b, const struct be_target *t,
			    const char *lease_id, enum rb_mode mode, int64_t cost,
			    const struct rb_settle *se, int64_t x1, int64_t x2, size_t *nkeys)
{
	const struct conf_scope *cs = t->cs;
	const struct conf_plan *pl = conf_plan_of(cs, t->cls);
	bool adapt, ovr;
	size_t i;

	*nkeys = rb_keys(a, b, cs, t->key, pl);
	rb_record_key(a, b, cs, t->key, lease_id); /* its settlement record */
	(*nkeys)++;
	rargs_str(a, lease_id);
	rargs_str(a, rb_mode_names[mode]);
	rargs_int(a, pl->serialized ? 1 : 0);
	rargs_int(a, cs->min_delay_ms);
	rargs_int(a, (int64_t)pl->nrules);
	for (i = 0; i < pl->nrules; i++) {
		const struct conf_rule *r = &cs->rules[pl->rules[i]];
		struct strat_params p = lim_rule_params(r, LIM_WHOLE);
		int64_t charge = 0;
		if (mode == RB_M_ROLLBACK && r->meter == METER_REQUESTS)
			charge = -cost;
		else if (mode == RB_M_ROLLBACK)
			charge = -lim_token_charge(r, se->reserve, se->nreserve);
		else if (mode == RB_M_RELEASE)
			charge = lim_settle_charge(r, se->tokens, se->ntokens, se->reserve,
						   se->nreserve);
		rargs_str(a, strat_kind_name(p.kind));
		rargs_int(a, p.amount);
		rargs_int(a, p.window_ms);
		rargs_int(a, p.burst);
		rargs_int(a, charge);
	}
	rargs_int(a, x1);
	rargs_int(a, x2);
	rargs_int(a, pl->penalty_in + 1);
	rargs_int(a, se->own ? 1 : 0);
	rargs_str(a, se->claim != NULL ? se->claim : "");
	rargs_int(a, RB_GRACE_MS(cs));
	adapt = cs->adaptive && (mode == RB_M_RELEASE || mode == RB_M_OUTCOME);
	ovr = cs->override_milli > 0 && pl->serialized && mode == RB_M_RELEASE;
	if (adapt || ovr)
		rargs_str(a, !adapt			    ? ""
			     : se->outcome == ADAPT_OK	    ? "ok"
			     : se->outcome == ADAPT_LIMITED ? "limited"
							    : "");
	rb_adapt_ovr_args(a, cs, adapt, ovr);
}

/* ---- failures ---- */

static void rb_failed(struct backend *b, enum rb_op opi, enum rp_status st,
		      const struct rval *reply)
{
	static const char *const names[] = { "ok", "timeout", "connection", "shutdown" };
	const char *op = rb_op_names[opi];

	b->errors[opi]++;
	if (st == RP_OK && reply != NULL && reply->type == RV_ERR)
		log_ratelimited(LOG_SLOT_REDIS, 1000, "redis error reply", "op=%s err=\"%.200s\"",
				op, reply->s);
	else if (st == RP_OK)
		log_ratelimited(LOG_SLOT_REDIS, 1000, "redis reply of unexpected shape", "op=%s",
				op);
	else
		log_ratelimited(LOG_SLOT_REDIS, 1000, "redis call failed", "op=%s status=%s", op,
				names[st]);
}

/* A booking call that Redis ran after its not_after: it booked nothing. */
static void rb_stale(struct backend *b, enum rb_op opi)
{
	b->errors[opi]++;
	log_ratelimited(LOG_SLOT_REDIS, 1000,
			"redis ran the call after its deadline: it booked nothing", "op=%s",
			rb_op_names[opi]);
}

/* ---- fire-and-forget calls: penalize ---- */

struct rb_ff {
	struct backend *b;
	enum rb_op op;
};

static void rb_ff_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct rb_ff *ff = arg;

	if ((st != RP_OK || reply == NULL || reply->type != RV_INT) && st != RP_SHUTDOWN)
		rb_failed(ff->b, ff->op, st, reply);
	free(ff);
}

/* ---- releases, reconciliations, rebooks: one lease on its targets ---- */

/*
 * One target of a queued call, by name: a record may wait through reloads,
 * so it never points into a conf; each send resolves it against the
 * running one (rb_tgt_resolve). The three strings share one allocation.
 */
struct rb_tgt {
	char *scope;
	const char *cls; /* NULL: none */
	const char *key;
};

/*
 * struct rb_rel - one release.lua call per target of one lease, in flight
 * or queued. Owns copies of everything it sends (the lease and its keys may
 * be gone by the time Redis can take it).
 */
struct rb_rel {
	struct backend *b;
	TAILQ_ENTRY(rb_rel) link; /* the queue, while queued */
	enum rb_mode mode;
	enum rb_op op;
	char nonce[LIM_LEASE_ID_LEN + 1];
	bool own;     /* this daemon issued the lease (it knows what was booked) */
	char *claim;  /* the reservation its handle names, owned; NULL: none */
	size_t bytes; /* what it holds, counted against the queue's bound */
	size_t nt;
	struct rb_tgt t[PROTO_MAX_TARGETS];
	int64_t cost[PROTO_MAX_TARGETS]; /* rollback: the request units to refund */
	int64_t x1[PROTO_MAX_TARGETS], x2[PROTO_MAX_TARGETS];
	size_t ntokens;
	struct lim_tokens *tokens; /* owned copy (names too), or NULL */
	int64_t not_before;	   /* mono ms: not sent before (a late booking call's bound) */
	int attempts;
	size_t nreserve;
	struct lim_tokens *reserve; /* owned copy, or NULL */
	int outcome;		    /* release: enum adapt_outcome, for adaptive targets */
	bool outcome_only;	    /* release: nothing to settle, only the outcome */
	/* in flight */
	size_t pending;
	bool unknown; /* a target's outcome is unknown */
	bool gone;    /* rebook: released meanwhile through another daemon */
	int held;     /* some target answered 1 */
	bool settled; /* release: some target settled (answered 0 or 1) */
	bool repeat;  /* release: some target had been settled before (-2) */
	eng_settled_cb *cb;
	void *cb_arg;
};

static void rb_rel_free(struct rb_rel *r)
{
	size_t i;

	for (i = 0; i < r->nt; i++)
		free(r->t[i].scope);
	free(r->tokens);
	free(r->reserve);
	free(r->claim);
	free(r);
}

/* Target g in the running conf; false when its scope is no longer there. */
static bool rb_tgt_resolve(const struct backend *b, const struct rb_tgt *g, struct be_target *out)
{
	struct scope_rt *sc = scope_find(b->ad, g->scope);

	if (sc == NULL)
		return false;
	out->cs = sc->cs;
	out->cls = g->cls != NULL ? conf_class_find(sc->cs, g->cls) : NULL;
	out->key = g->key;
	return true;
}

/* A new record for nonce; targets added by rb_rel_target. */
static struct rb_rel *rb_rel_new(struct backend *b, enum rb_mode mode, enum rb_op op,
				 const char *nonce)
{
	struct rb_rel *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return NULL;
	r->bytes = sizeof(*r);
	r->b = b;
	r->mode = mode;
	r->op = op;
	memcpy(r->nonce, nonce, sizeof(r->nonce));
	return r;
}

static bool rb_rel_target(struct rb_rel *r, const struct conf_scope *cs,
			  const struct conf_class *cls, const char *key)
{
	size_t ls = strlen(cs->name) + 1, lc = cls != NULL ? strlen(cls->name) + 1 : 0;
	size_t lk = strlen(key) + 1;
	char *p = malloc(ls + lc + lk);

	if (p == NULL)
		return false;
	memcpy(p, cs->name, ls);
	if (cls != NULL)
		memcpy(p + ls, cls->name, lc);
	memcpy(p + ls + lc, key, lk);
	r->t[r->nt].scope = p;
	r->t[r->nt].cls = cls != NULL ? p + ls : NULL;
	r->t[r->nt].key = p + ls + lc;
	r->bytes += ls + lc + lk;
	r->nt++;
	return true;
}

/* An adaptive target of a release that reports an outcome it moves on. */
static bool rb_rel_adapts(const struct rb_rel *r, const struct be_target *t)
{
	return t->cs->adaptive && (r->outcome == ADAPT_OK || r->outcome == ADAPT_LIMITED);
}

/* A release's mode for one target: only the outcome when it has nothing to settle. */
static enum rb_mode rb_rel_mode(const struct rb_rel *r, const struct be_target *t)
{
	if (r->mode == RB_M_RELEASE && (r->outcome_only || !lim_release_books(t->cs, t->cls)))
		return RB_M_OUTCOME;
	return r->mode;
}

/* Does this target need the call at all (a release with nothing to book costs none)? */
static bool rb_rel_needed(const struct rb_rel *r, const struct be_target *t)
{
	switch (r->mode) {
	case RB_M_RELEASE:
		if (rb_rel_adapts(r, t))
			return true;
		return !r->outcome_only && lim_release_books(t->cs, t->cls);
	case RB_M_ROLLBACK: return true;
	default: return lim_tracks_leases(t->cs);
	}
}

static void rb_queue(struct backend *b, struct rb_rel *r, int64_t not_before);
static void rb_rebooked(struct rb_rel *r);
static void rb_writeback(struct backend *b);
static void rb_owe_penalty(struct backend *b, struct kq *kq, int64_t until);

static void rb_rel_done(struct rb_rel *r)
{
	struct backend *b = r->b;

	log_debug("redis call done", "lease=%.8s mode=%s held=%d unknown=%d", r->nonce,
		  rb_mode_names[r->mode], r->held, (int)r->unknown);
	if (r->cb != NULL) {
		struct eng_settled st = { .held = r->held == 1,
					  .settled = r->settled,
					  .repeat = r->repeat && !r->settled,
					  .unknown = r->unknown };
		r->cb(r->cb_arg, &st);
		r->cb = NULL;
	}
	if (r->mode == RB_M_REBOOK) {
		rb_rebooked(r);
		return;
	}
	if (r->unknown && !b->closing && r->mode == RB_M_RELEASE && r->own) {
		/*
		 * It may or may not have run. A release settles through the
		 * lease's record, once, so it is simply sent again, tokens and
		 * all (the in-process state was charged at the release). A
		 * release of another daemon's lease is not kept: its client was
		 * told the outcome is unknown, and may ask again.
		 */
		r->unknown = false;
		rb_queue(b, r, clock_mono_ms() + b->ad->conf->redis_timeout_ms);
		return;
	}
	if (r->unknown && !b->closing && r->mode != RB_M_RELEASE) {
		/* What it may have left in flight is released again (idempotent). */
		r->mode = RB_M_RECONCILE;
		r->unknown = false;
		rb_queue(b, r, clock_mono_ms() + b->ad->conf->redis_timeout_ms);
		return;
	}
	rb_rel_free(r);
}

static void rb_rel_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct rb_rel *r = arg;

	if (st == RP_OK && reply != NULL && reply->type == RV_INT) {
		if (reply->i == 1)
			r->held = 1;
		else if (reply->i == -1)
			r->gone = true;
		if (r->mode == RB_M_RELEASE && reply->i >= 0)
			r->settled = true;
		else if (r->mode == RB_M_RELEASE && reply->i == -2)
			r->repeat = true;
	} else {
		if (st != RP_SHUTDOWN)
			rb_failed(r->b, r->op, st, reply);
		r->unknown = true;
	}
	if (--r->pending == 0)
		rb_rel_done(r);
}

/*
 * Send r now: true when accepted (it completes through rb_rel_done, which
 * owns it from then on), false when Redis cannot take it now (r is still
 * the caller's). A record with no target needing a call completes at once.
 */
static bool rb_rel_send(struct rb_rel *r)
{
	struct backend *b = r->b;
	struct rargs a[PROTO_MAX_TARGETS];
	struct rpool_call calls[PROTO_MAX_TARGETS];
	struct rb_settle se = { .tokens = r->tokens,
				.reserve = r->reserve,
				.ntokens = r->ntokens,
				.nreserve = r->nreserve,
				.own = r->own,
				.claim = r->claim,
				.outcome = r->outcome };
	size_t i, n = 0, sent;
	int script = b->s_release;
	bool ok = true;

	if (b->closing || !b->up || !rpool_up(b->pool))
		return false;
	memset(a, 0, sizeof(a));
	for (i = 0; i < r->nt; i++) {
		struct be_target t;
		size_t nkeys = 0;
		if (!rb_tgt_resolve(b, &r->t[i], &t) || !rb_rel_needed(r, &t))
			continue;
		rb_release_args(&a[n], b, &t, r->nonce, rb_rel_mode(r, &t), r->cost[i], &se,
				r->x1[i], r->x2[i], &nkeys);
		if (a[n].oom)
			ok = false;
		calls[n] = (struct rpool_call){ .affinity = rb_affinity(t.cs, t.key),
						.script = (size_t)script,
						.nkeys = nkeys,
						.argc = a[n].n,
						.argv = (const char *const *)a[n].v,
						.argvlen = a[n].len,
						.cb = rb_rel_cb,
						.arg = r };
		n++;
	}
	r->held = 0;
	r->gone = false;
	r->unknown = false;
	r->settled = false;
	r->repeat = false;
	/*
	 * Each target on its key's connection, after what this daemon sent for
	 * that key before (all in this loop pass: one round trip of wall time).
	 * Once one is accepted the record is the pool's: a target that could not
	 * be sent then is settled as an unknown outcome (reconciled).
	 */
	sent = 0;
	if (ok)
		rb_xb_flush(b);
	for (i = 0; ok && i < n; i++) {
		r->pending = sent + 1; /* a callback never runs inside the call */
		if (rpool_eval_multi(b->pool, 1, &calls[i]) == 0) {
			sent++;
			b->calls[r->op]++;
		} else if (sent > 0)
			r->unknown = true;
		else
			ok = false;
	}
	r->pending = sent;
	for (i = 0; i < n; i++)
		rargs_clear(&a[i]);
	if (!ok)
		return false;
	if (sent == 0)
		rb_rel_done(r);
	return true;
}

/* Keep r until Redis can take it (and not before not_before). */
static void rb_queue(struct backend *b, struct rb_rel *r, int64_t not_before)
{
	struct timeval tv = { 0, RB_QUEUE_TICK_MS * 1000 };

	if (b->closing) {
		rb_rel_free(r);
		return;
	}
	/* Only what this daemon booked gets here (a handle it did not issue
	 * is never queued), so the bound is reached only by a long outage. */
	while (!TAILQ_EMPTY(&b->queue) &&
	       (b->nqueued >= RB_QUEUE_MAX || b->queued_bytes + r->bytes > RB_QUEUE_MAX_BYTES)) {
		struct rb_rel *old = TAILQ_FIRST(&b->queue);
		TAILQ_REMOVE(&b->queue, old, link);
		b->nqueued--;
		b->queued_bytes -= old->bytes;
		b->dropped++;
		log_ratelimited(LOG_SLOT_RECONCILE, 1000,
				"redis release queue full: dropping the oldest (it expires by "
				"lease_ttl)",
				"max=%d max_bytes=%d", RB_QUEUE_MAX, RB_QUEUE_MAX_BYTES);
		rb_rel_free(old);
	}
	r->not_before = not_before;
	r->cb = NULL;
	/* An outcome is news only now: a late one could lower a rate that has
	 * recovered since (the fallback applied it in process instead). */
	r->outcome = ADAPT_NONE;
	log_debug("redis call queued", "lease=%.8s mode=%s in_ms=%lld", r->nonce,
		  rb_mode_names[r->mode], (long long)(not_before - clock_mono_ms()));
	TAILQ_INSERT_TAIL(&b->queue, r, link);
	b->nqueued++;
	b->queued_bytes += r->bytes;
	if (!evtimer_pending(b->queue_ev, NULL) && evtimer_add(b->queue_ev, &tv) != 0)
		log_ratelimited(LOG_SLOT_RECONCILE, 1000, "cannot arm the release queue timer",
				NULL);
}

/* Send what is due, in order; give up on a record after many failures. */
static void rb_queue_run(struct backend *b, bool all_due)
{
	struct rb_rel *r, *nx;
	int64_t now = clock_mono_ms();
	struct timeval tv = { 0, RB_QUEUE_TICK_MS * 1000 };
	size_t sent = 0;

	for (r = TAILQ_FIRST(&b->queue); r != NULL && b->up; r = nx) {
		nx = TAILQ_NEXT(r, link);
		if (r->not_before > now)
			continue;
		if (!all_due && sent >= RB_QUEUE_BATCH)
			break;
		TAILQ_REMOVE(&b->queue, r, link);
		b->nqueued--;
		b->queued_bytes -= r->bytes;
		if (r->attempts >= RB_QUEUE_ATTEMPTS) {
			log_ratelimited(LOG_SLOT_RECONCILE, 1000,
					"redis release failed too often: given up (it expires by "
					"lease_ttl)",
					"lease=%.8s", r->nonce);
			b->dropped++;
			rb_rel_free(r);
			continue;
		}
		r->attempts++; /* before: a sent record may be freed at once */
		if (!rb_rel_send(r)) {
			r->attempts--;
			TAILQ_INSERT_HEAD(&b->queue, r, link);
			b->nqueued++;
			b->queued_bytes += r->bytes;
			break;
		}
		sent++;
	}
	if (!TAILQ_EMPTY(&b->queue) && !evtimer_pending(b->queue_ev, NULL) &&
	    evtimer_add(b->queue_ev, &tv) != 0)
		log_ratelimited(LOG_SLOT_RECONCILE, 1000, "cannot arm the release queue timer",
				NULL);
}

static void rb_queue_cb(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	rb_queue_run(arg, false);
}

void backend_flush(struct backend *b)
{
	rb_queue_run(b, true);
}

int64_t backend_last_due(const struct backend *b)
{
	const struct rb_rel *r;
	int64_t last = 0;

	TAILQ_FOREACH (r, &b->queue, link)
		if (r->not_before > last)
			last = r->not_before;
	return last;
}

bool backend_idle(const struct backend *b)
{
	const struct rb_rel *r;
	int64_t now = clock_mono_ms();

	if (rpool_inflight(b->pool) > 0)
		return false;
	if (!b->up)
		return true; /* nothing queued can go */
	TAILQ_FOREACH (r, &b->queue, link)
		if (r->not_before <= now)
			return false;
	return TAILQ_EMPTY(&b->queue);
}

/*
 * What r settles: copies of the tokens reported and of the reservation,
 * and the reservation as its settlement record holds it (the claim).
 * false when memory runs out.
 */
static bool rb_rel_settle(struct rb_rel *r, const struct lim_tokens *tokens, size_t ntokens,
			  const struct lim_tokens *reserve, size_t nreserve)
{
	char claim[LEASE_ID_CLAIM_MAX];

	r->tokens = lim_tokens_dup(tokens, ntokens, &r->ntokens);
	r->reserve = lim_tokens_dup(reserve, nreserve, &r->nreserve);
	lease_id_claim(reserve, nreserve, claim, sizeof(claim));
	if (claim[0] != '\0' && (r->claim = strdup(claim)) == NULL)
		return false;
	r->bytes +=
	    (ntokens + nreserve) * (sizeof(struct lim_tokens) + PROTO_NAME_MAX + 1) + strlen(claim);
	return r->ntokens == ntokens && r->nreserve == nreserve;
}

/* A release record for lease l (targets that need a call only). */
static struct rb_rel *rb_rel_of(struct backend *b, const struct lease *l, enum rb_mode mode,
				enum rb_op op)
{
	struct rb_rel *r = rb_rel_new(b, mode, op, l->id);
	size_t i;

	if (r == NULL)
		return NULL;
	for (i = 0; i < l->nt; i++)
		if (!rb_rel_target(r, l->t[i].kq->sc->cs, l->t[i].cls, l->t[i].kq->key)) {
			rb_rel_free(r);
			return NULL;
		}
	r->own = true;
	if (!rb_rel_settle(r, NULL, 0, l->reserve, l->nreserve)) {
		rb_rel_free(r);
		return NULL;
	}
	return r;
}

bool backend_release(struct backend *b, struct lease *l, const struct lim_tokens *tokens,
		     size_t ntokens)
{
	struct rb_rel *r;
	int64_t now = clock_mono_ms();

	if (b->closing)
		return false;
	r = rb_rel_of(b, l, RB_M_RELEASE, RB_OP_RELEASE);
	if (r != NULL &&
	    (r->tokens = lim_tokens_dup(tokens, ntokens, &r->ntokens), r->ntokens) != ntokens) {
		rb_rel_free(r);
		r = NULL;
	}
	if (r == NULL) {
		rb_failed(b, RB_OP_RELEASE, RP_CONN, NULL);
		return false;
	}
	r->bytes += ntokens * (sizeof(struct lim_tokens) + PROTO_NAME_MAX + 1);
	r->outcome = l->outcome;
	/* A lease a late script may still book must not be released before
	 * that script's bound: the release could land first. */
	if (l->redis_maybe && l->redis_after > now) {
		rb_queue(b, r, l->redis_after);
		return false;
	}
	if (rb_rel_send(r))
		return true;
	b->errors[RB_OP_RELEASE]++;
	rb_queue(b, r, 0);
	return false;
}

bool backend_outcome(struct backend *b, struct lease *l)
{
	struct rb_rel *r;

	if (b->closing || !b->up || !rpool_up(b->pool))
		return false;
	if ((r = rb_rel_of(b, l, RB_M_RELEASE, RB_OP_RELEASE)) == NULL) {
		rb_failed(b, RB_OP_RELEASE, RP_CONN, NULL);
		return false;
	}
	r->outcome = l->outcome;
	r->outcome_only = true;
	if (rb_rel_send(r))
		return true;
	b->errors[RB_OP_RELEASE]++;
	rb_rel_free(r); /* never queued: applied in process instead */
	return false;
}

bool backend_release_ref(struct backend *b, const struct be_target *t, size_t nt, const char *nonce,
			 const struct lim_tokens *tokens, size_t ntokens,
			 const struct lim_tokens *reserve, size_t nreserve, eng_settled_cb *cb,
			 void *arg)
{
	struct rb_rel *r;
	size_t i;

	if (b->closing || !b->up || !rpool_up(b->pool))
		return false; /* never queued: nothing can vouch for it now */
	if ((r = rb_rel_new(b, RB_M_RELEASE, RB_OP_RELEASE, nonce)) == NULL)
		return false;
	for (i = 0; i < nt; i++)
		if (!rb_rel_target(r, t[i].cs, t[i].cls, t[i].key))
			goto fail;
	if (!rb_rel_settle(r, tokens, ntokens, reserve, nreserve))
		goto fail;
	r->cb = cb;
	r->cb_arg = arg;
	if (rb_rel_send(r))
		return true;
	b->errors[RB_OP_RELEASE]++;
fail:
	rb_rel_free(r);
	return false;
}

/*
 * The acquire under nonce had targets whose outcome is unknown, and no lease
 * holds it: release what it may have booked once no late run can book.
 */
static void rb_reconcile(struct backend *b, const struct waiter *w, const bool *which,
			 const char *nonce, int64_t after)
{
	struct rb_rel *r = rb_rel_new(b, RB_M_RECONCILE, RB_OP_RECONCILE, nonce);
	size_t i;

	if (r == NULL)
		return;
	for (i = 0; i < w->nt; i++)
		if (which[i] &&
		    !rb_rel_target(r, w->t[i].kq->sc->cs, w->t[i].cls, w->t[i].kq->key)) {
			rb_rel_free(r);
			return;
		}
	if (r->nt == 0) {
		rb_rel_free(r);
		return;
	}
	b->reconciled++;
	rb_queue(b, r, after + RB_CLOCK_MARGIN_MS);
}

/*
 * Redis came back, or lost its data: put every lease this daemon holds
 * that counts in a lease set back there (ZADD NX: one already there stays).
 * A lease granted in fallback is released in Redis too from then on.
 */
struct rb_rebook_ctx {
	struct backend *b;
	size_t sent;
};

static void rb_rebook_one(void *arg, const char *key UNUSED, void *val)
{
	struct rb_rebook_ctx *x = arg;
	struct backend *b = x->b;
	struct lease *l = val;
	int64_t now = clock_mono_ms(), mono_after, not_after = rb_not_after(b, &mono_after);
	struct rb_rel *r;
	size_t i;
	bool any = false;

	if (l->via == VIA_LOCAL || l->expired || l->deadline_ms <= now)
		return;
	for (i = 0; i < l->nt; i++)
		if (lim_tracks_leases(l->t[i].kq->sc->cs))
			any = true;
	if (!any || (r = rb_rel_of(b, l, RB_M_REBOOK, RB_OP_REBOOK)) == NULL)
		return;
	for (i = 0; i < r->nt; i++) {
		r->x1[i] = l->deadline_ms - now;
		r->x2[i] = not_after;
	}
	r->not_before = mono_after; /* reused: the rebook's own bound */
	if (!rb_rel_send(r)) {
		rb_rel_free(r);
		return;
	}
	x->sent++;
}

static void rb_rebook_all(struct backend *b, const char *why)
{
	struct rb_rebook_ctx x = { .b = b };

	htab_each(b->ad->leases, rb_rebook_one, &x);
	if (x.sent > 0)
		log_info("leases booked in redis again", "leases=%zu reason=\"%s\"", x.sent, why);
	b->rebooked += x.sent;
}

static void rb_rebooked(struct rb_rel *r)
{
	struct backend *b = r->b;
	struct lease *l = htab_get(b->ad->leases, r->nonce);

	if (l != NULL && r->gone && !r->unknown) {
		/* Released through another daemon while this one held it (a
		 * detached lease): it is over here too. */
		log_info("lease released elsewhere", "lease=%.8s", l->id);
		l->redis_maybe = true; /* what a rebook of another target put back goes too */
		if (r->not_before > l->redis_after)
			l->redis_after = r->not_before;
		lease_release(l, NULL, 0);
		rb_rel_free(r);
		return;
	}
	if (l != NULL) {
		/* Held: its release goes to Redis, after the rebook's bound. */
		l->redis_maybe = true;
		if (r->not_before > l->redis_after)
			l->redis_after = r->not_before;
		rb_rel_free(r);
		return;
	}
	/* Released while the rebook was in flight: the release may have landed
	 * first. Take the lease out again once the rebook can book no more. */
	r->mode = RB_M_RECONCILE;
	r->op = RB_OP_RECONCILE;
	r->unknown = false;
	rb_queue(b, r, r->not_before + RB_CLOCK_MARGIN_MS);
}

void backend_penalize(struct backend *b, struct kq *kq, int64_t delay_ms)
{
	struct rargs a = { 0 };
	struct rb_ff *ff;

	if (b->closing)
		return;
	if (!b->up || !rpool_up(b->pool)) { /* told to Redis once it answers */
		if (delay_ms <= 0)
			return; /* only an outcome: the fallback applied it */
		rb_owe_penalty(b, kq, clock_mono_ms() + delay_ms);
		return;
	}
	rb_penalty_key(&a, b, kq->sc->cs, kq->key);
	rargs_int(&a, delay_ms);
	if (kq->sc->cs->adaptive) /* a penalty is a limited outcome */
		rb_adapt_args(&a, kq->sc->cs);
	if (a.oom || (ff = malloc(sizeof(*ff))) == NULL) {
		rb_failed(b, RB_OP_PENALIZE, RP_CONN, NULL);
		rargs_clear(&a);
		return;
	}
	ff->b = b;
	ff->op = RB_OP_PENALIZE;
	if (rb_eval(b, kq->sc->cs, kq->key, b->s_penalize, &a, 1, rb_ff_cb, ff) != 0) {
		free(ff);
		rb_failed(b, RB_OP_PENALIZE, RP_CONN, NULL);
	} else {
		b->calls[RB_OP_PENALIZE]++;
	}
	rargs_clear(&a);
}

/* ---- operator calls: inspect, reset ---- */

struct rb_op_ctx {
	struct backend *b;
	struct kq *kq;
	const struct conf_scope *cs; /* kq's scope's conf when sent (a reload may replace it) */
	const struct conf_class *cls;
	eng_insp_cb *insp_cb;
	eng_reset_cb *reset_cb;
	enum rb_op op; /* reset_cb's: RB_OP_RESET or RB_OP_OVERRIDE */
	void *arg;
};

static void rb_inspect_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct rb_op_ctx *x = arg;
	const struct conf_scope *cs = x->cs;
	const struct conf_plan *pl = conf_plan_of(cs, x->cls);
	struct strat_state *rules = NULL;
	struct lim_ovr *ov = NULL;
	size_t i, j, nov = cs->override_milli > 0 ? 2 + pl->nrules : 0;
	struct eng_insp in = { .via = VIA_REDIS };
	bool ok;

	if (cs != x->kq->sc->cs) {
		/* A reload replaced the scope while the call was out: the reply is
		 * laid out for rules the caller no longer has. */
		eng_inspect_local(x->kq, VIA_FALLBACK, x->insp_cb, x->arg);
		goto out;
	}
	rules = calloc(cs->nrules ? cs->nrules : 1, sizeof(*rules));
	ok =
	    rules != NULL && st == RP_OK && reply != NULL && reply->type == RV_ARR && reply->n >= 6;

	for (i = 0; ok && i < reply->n; i++)
		ok = reply->a[i].type == RV_INT;
	ok = ok && reply->n == 10 + 3 * pl->nrules + nov;
	if (!ok) {
		if (st != RP_SHUTDOWN)
			rb_failed(x->b, RB_OP_INSPECT, st, reply);
		eng_inspect_local(x->kq, VIA_FALLBACK, x->insp_cb, x->arg);
		goto out;
	}
	in.now = reply->a[0].i;
	in.next_at = reply->a[1].i;
	in.penalty_until = reply->a[2].i;
	in.leases = reply->a[3].i;
	in.quota_used = reply->a[4].i;
	in.quota_oldest = reply->a[5].i;
	for (i = 0, j = 6; i < pl->nrules; i++, j += 3) {
		rules[pl->rules[i]].a = reply->a[j].i;
		rules[pl->rules[i]].b = reply->a[j + 1].i;
		rules[pl->rules[i]].t = reply->a[j + 2].i;
	}
	in.rules = rules;
	/* the adaptive hash: amt, td, tc, tl, then the override */
	in.ad = (struct adapt_state){ reply->a[j].i, reply->a[j + 1].i, reply->a[j + 2].i,
				      reply->a[j + 3].i };
	j += 4;
	if (nov > 0 && reply->a[j].i > 0 &&
	    (ov = calloc(1, sizeof(*ov) + (cs->nrules + 1) * sizeof(ov->amount[0]))) != NULL) {
		ov->until = reply->a[j].i;
		ov->min_delay_ms = reply->a[j + 1].i;
		ov->nrules = (uint32_t)cs->nrules;
		for (i = 0; i < pl->nrules; i++)
			ov->amount[pl->rules[i]] = reply->a[j + 2 + i].i;
		in.ov = ov;
	}
	x->insp_cb(x->arg, &in);
out:
	free(ov);
	free(rules);
	free(x);
}

bool backend_inspect(struct backend *b, struct kq *kq, const struct conf_class *cls,
		     eng_insp_cb *cb, void *arg)
{
	const struct conf_scope *cs = kq->sc->cs;
	const struct conf_plan *pl = conf_plan_of(cs, cls);
	struct rb_op_ctx *x = calloc(1, sizeof(*x));
	struct rargs a = { 0 };
	size_t nkeys, i;
	bool ok = false;

	if (b->closing || !b->up || !rpool_up(b->pool) || x == NULL)
		goto out;
	nkeys = rb_keys(&a, b, cs, kq->key, pl);
	if (cs->penalty_rule >= 0) {
		rb_penalty_key(&a, b, cs, kq->key);
		nkeys++;
	}
	rargs_int(&a, cs->quota > 0 ? cs->quota_window_ms : 0);
	rargs_int(&a, (int64_t)pl->nrules);
	if (cs->override_milli > 0) { /* its override too, by the rules' indexes */
		rargs_int(&a, 1);
		for (i = 0; i < pl->nrules; i++)
			rargs_int(&a, (int64_t)pl->rules[i]);
	}
	*x =
	    (struct rb_op_ctx){ .b = b, .kq = kq, .cs = cs, .cls = cls, .insp_cb = cb, .arg = arg };
	ok = !a.oom && rb_eval(b, cs, kq->key, b->s_inspect, &a, nkeys, rb_inspect_cb, x) == 0;
	if (ok)
		b->calls[RB_OP_INSPECT]++;
out:
	if (!ok)
		free(x);
	rargs_clear(&a);
	return ok;
}

static void rb_reset_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct rb_op_ctx *x = arg;
	bool ok = st == RP_OK && reply != NULL && reply->type == RV_INT;

	if (!ok && st != RP_SHUTDOWN)
		rb_failed(x->b, x->op, st, reply);
	x->reset_cb(x->arg, ok ? VIA_REDIS : VIA_FALLBACK, ok);
	free(x);
}

bool backend_reset(struct backend *b, struct kq *kq, eng_reset_cb *cb, void *arg)
{
	struct rb_op_ctx *x = calloc(1, sizeof(*x));
	struct rargs a = { 0 };
	bool ok = false;

	if (b->closing || !b->up || !rpool_up(b->pool) || x == NULL)
		goto out;
	rb_key(&a, b, kq->sc->cs, kq->key, "s", -1);
	if (kq->sc->cs->penalty_rule >= 0)
		rb_penalty_key(&a, b, kq->sc->cs, kq->key);
	*x = (struct rb_op_ctx){ .b = b, .kq = kq, .op = RB_OP_RESET, .reset_cb = cb, .arg = arg };
	ok = !a.oom && rb_eval(b, kq->sc->cs, kq->key, b->s_reset, &a, a.n, rb_reset_cb, x) == 0;
	if (ok)
		b->calls[RB_OP_RESET]++;
out:
	if (!ok)
		free(x);
	rargs_clear(&a);
	return ok;
}

bool backend_override(struct backend *b, struct kq *kq, int64_t ttl_ms, int64_t min_delay_ms,
		      const int64_t *amount, eng_reset_cb *cb, void *arg)
{
	const struct conf_scope *cs = kq->sc->cs;
	struct rb_op_ctx *x = calloc(1, sizeof(*x));
	struct rargs a = { 0 };
	bool ok = false;
	size_t i;

	if (b->closing || !b->up || !rpool_up(b->pool) || x == NULL)
		goto out;
	rb_key(&a, b, cs, kq->key, "a", -1);
	rargs_int(&a, ttl_ms);
	rargs_int(&a, min_delay_ms);
	rargs_int(&a, (int64_t)cs->nrules);
	for (i = 0; i < cs->nrules; i++)
		rargs_int(&a, amount != NULL ? amount[i] : 0);
	*x = (struct rb_op_ctx){
		.b = b, .kq = kq, .op = RB_OP_OVERRIDE, .reset_cb = cb, .arg = arg
	};
	ok = !a.oom && rb_eval(b, cs, kq->key, b->s_override, &a, 1, rb_reset_cb, x) == 0;
	if (ok)
		b->calls[RB_OP_OVERRIDE]++;
out:
	if (!ok)
		free(x);
	rargs_clear(&a);
	return ok;
}

/* ---- acquire ---- */

enum rb_outcome { RB_R_REFUSED = 0, RB_R_ADMITTED, RB_R_STALE, RB_R_UNKNOWN };

struct rb_acq {
	struct backend *b;
	struct waiter *w;
	eng_cb *cb;
	void *arg;
	char lease_id[LIM_LEASE_ID_LEN + 1];
	size_t pending;
	int64_t not_after_mono; /* no run of these scripts books after this */
	struct eng_res res;	/* the answer, once decided */
	size_t rollbacks;	/* answered when the last rollback is in */
	struct {
		enum rb_outcome out;
		int64_t retry;
		long code;
		int64_t next_booked, next_before;
		struct lim_left left;
	} r[PROTO_MAX_TARGETS];
};

/*
 * What the acquire script's reply says is left of t's limits after its
 * decision (reply[7..9]: leases, quota instants, the newest; then a, b, t
 * per rule of the plan; reply[6] is the adaptive amount), folded into acc. A reply without it (a stale run)
 * adds nothing.
 */
static void rb_left_parse(struct lim_left *acc, const struct rval *reply, const struct target_rt *t)
{
	const struct conf_scope *cs = t->kq->sc->cs;
	const struct conf_plan *pl = conf_plan_of(cs, t->cls);
	struct strat_state few[8] = { { 0, 0, 0 } }, *rules = few;
	struct lim_share sh = LIM_WHOLE;
	size_t k, n = 10 + 3 * pl->nrules;

	if (cs->shadow || reply->n < n)
		return;
	for (k = 3; k < n; k++)
		if (reply->a[k].type != RV_INT)
			return;
	if (pl->nrules > sizeof(few) / sizeof(few[0]) &&
	    (rules = calloc(pl->nrules, sizeof(*rules))) == NULL)
		return;
	for (k = 0; k < pl->nrules; k++) {
		rules[k].a = reply->a[10 + 3 * k].i;
		rules[k].b = reply->a[11 + 3 * k].i;
		rules[k].t = reply->a[12 + 3 * k].i;
	}
	if (cs->adaptive && reply->a[6].i > 0) { /* the capacities the check used */
		sh.ad_amt = reply->a[6].i;
		sh.ad_ceil = cs->adapt.ceil;
	}
	if ((sh.ov = lim_ovr_in_force(kq_lim(t->kq), cs, clock_mono_ms())) != NULL)
		sh.ov_milli = cs->override_milli; /* rb_ovr_mirror has just set it */
	lim_left_scope(acc, cs, t->cls, sh, rules, true, reply->a[7].i, reply->a[8].i,
		       reply->a[9].i, reply->a[3].i);
	if (rules != few)
		free(rules);
}

/*
 * What an acquire reply says of t's override (after the rules' counters: its
 * end, its min_delay, then per rule of the plan its amount): the key's
 * in-process state takes it, on this daemon's clock, so that the fallback
 * holds it too should Redis go away, and so that what is left is counted
 * against it. An override another daemon set, or lifted, comes here too.
 */
static void rb_ovr_mirror(const struct rval *reply, const struct target_rt *t)
{
	const struct conf_scope *cs = t->kq->sc->cs;
	const struct conf_plan *pl = conf_plan_of(cs, t->cls);
	struct lim_state *st = kq_lim(t->kq);
	size_t k, base = 10 + 3 * pl->nrules;
	int64_t until;

	if (cs->override_milli <= 0 || st == NULL || reply->n < base + 2 + pl->nrules)
		return;
	for (k = base; k < base + 2 + pl->nrules; k++)
		if (reply->a[k].type != RV_INT)
			return;
	if (reply->a[base].i <= reply->a[3].i) {
		lim_override_lift(st);
		return;
	}
	until = clock_mono_ms() + (reply->a[base].i - reply->a[3].i);
	if ((st->ov == NULL || st->ov->nrules != cs->nrules) &&
	    !lim_override(st, cs, until, -1, NULL))
		return;
	st->ov->until = until;
	st->ov->min_delay_ms = reply->a[base + 1].i;
	for (k = 0; k < pl->nrules; k++)
		st->ov->amount[pl->rules[k]] = reply->a[base + 2 + k].i;
}

/* Undo the targets of q that Redis admitted (another refused or failed). */
static void rb_acq_finish(struct rb_acq *q)
{
	q->cb(q->arg, &q->res);
	free(q);
}

/* A rollback answered (or was queued after an unknown outcome). */
static void rb_rollback_done(void *arg, const struct eng_settled *st UNUSED)
{
	struct rb_acq *q = arg;

	if (--q->rollbacks == 0)
		rb_acq_finish(q);
}

/*
 * Undo the targets Redis admitted, and answer the waiter only once Redis
 * has: a client told "refused" that asks again at once must not find the
 * rolled-back booking still there (it may go through another connection).
 * q->res is the answer; q is finished here or when the last rollback is in.
 */
/*
 * Undo what target i of w booked in Redis under lease_id (next_booked and
 * next_before: the pacing it set and replaced). With cb, true when cb will
 * run once Redis has answered; otherwise (or when it cannot be sent now) the
 * undo goes out alone, or waits in the queue until Redis takes calls again.
 */
static bool rb_rollback_target(struct backend *b, const struct waiter *w, size_t i,
			       const char *lease_id, int64_t next_booked, int64_t next_before,
			       eng_settled_cb *cb, void *arg)
{
	struct rb_rel *r = rb_rel_new(b, RB_M_ROLLBACK, RB_OP_ROLLBACK, lease_id);

	eng_refused_forget(w->t[i].kq); /* a refund: what Redis refused may pass */
	if (r == NULL || !rb_rel_target(r, w->t[i].kq->sc->cs, w->t[i].cls, w->t[i].kq->key)) {
		if (r != NULL)
			rb_rel_free(r);
		rb_failed(b, RB_OP_ROLLBACK, RP_CONN, NULL);
		return false;
	}
	r->cost[0] = w->t[i].cost;
	r->reserve = lim_tokens_dup(w->reserve, w->nreserve, &r->nreserve);
	r->x1[0] = next_booked;
	r->x2[0] = next_before;
	r->cb = cb;
	r->cb_arg = arg;
	if (rb_rel_send(r))
		return cb != NULL;
	r->cb = NULL;
	rb_queue(b, r, 0);
	return false;
}

static void rb_rollback(struct rb_acq *q, bool wait)
{
	struct waiter *w = q->w;
	size_t i;

	q->rollbacks = 1; /* held while they are sent: one may complete at once */
	for (i = 0; i < w->nt; i++) {
		if (q->r[i].out != RB_R_ADMITTED)
			continue;
		q->rollbacks++;
		if (!rb_rollback_target(q->b, w, i, q->lease_id, q->r[i].next_booked,
					q->r[i].next_before, wait ? rb_rollback_done : NULL, q))
			q->rollbacks--;
	}
	rb_rollback_done(q, NULL);
}

/* All targets answered (or failed): combine, roll back partial admissions. */
static void rb_acq_done(struct rb_acq *q)
{
	struct backend *b = q->b;
	struct waiter *w = q->w;
	struct eng_res res = { .admitted = true, .via = VIA_REDIS };
	bool unknown[PROTO_MAX_TARGETS] = { false };
	bool failed = false, any_unknown = false;
	size_t i;

	for (i = 0; i < w->nt; i++) {
		if (q->r[i].out == RB_R_STALE || q->r[i].out == RB_R_UNKNOWN)
			failed = true;
		if (q->r[i].out == RB_R_UNKNOWN)
			unknown[i] = any_unknown = true;
	}
	if (b->closing) {
		/* The pool is gone: nothing can be sent. What Redis booked
		 * expires by its TTLs. */
		struct eng_res gone = { .via = VIA_REDIS, .unavailable = true };
		q->cb(q->arg, &gone);
		free(q);
		return;
	}
	for (i = 0; i < w->nt && !failed; i++) {
		const struct conf_scope *cs = w->t[i].kq->sc->cs;
		bool admitted = q->r[i].out == RB_R_ADMITTED;
		if (admitted && lim_release_books(cs, w->t[i].cls))
			res.booked = true;
		eng_merge(&res, w->t[i].kq, admitted, q->r[i].retry,
			  lim_which_rule(cs, q->r[i].code), lim_which_slot(cs, q->r[i].code),
			  q->r[i].retry < 0
			      ? lim_which_limit(cs, w->t[i].cls, q->r[i].code, LIM_WHOLE)
			      : 0);
	}
	eng_merge_end(&res);
	for (i = 0; i < w->nt && !failed; i++)
		if (q->r[i].left.has)
			lim_left_fold(&res.left, q->r[i].left.remaining, q->r[i].left.capacity,
				      q->r[i].left.reset_ms);
	if (failed) {
		bool admitted_any = false;
		for (i = 0; i < w->nt; i++)
			admitted_any |= q->r[i].out == RB_R_ADMITTED;
		res = eng_fallback(b->ad, w, q->lease_id);
		if (any_unknown && res.admitted) {
			/* The lease the fallback grants is released in Redis too. */
			res.redis_maybe = true;
			res.redis_after = q->not_after_mono + RB_CLOCK_MARGIN_MS;
		} else if (any_unknown) {
			rb_reconcile(b, w, unknown, q->lease_id, q->not_after_mono);
		}
		q->res = res;
		if (admitted_any) /* Redis is failing: the fallback answers now */
			rb_rollback(q, false);
		else
			rb_acq_finish(q);
		return;
	}
	if (res.admitted && w->canceled) {
		/* Its client canceled it (or left) while Redis decided: nobody
		 * will use the admission, so it is undone, not released. */
		res.admitted = false;
		res.booked = false;
		q->res = res;
		rb_rollback(q, false);
		return;
	}
	q->res = res;
	if (!res.admitted) {
		eng_refused_keep(w, &res); /* asked again here only once it can pass */
		rb_rollback(q, true);
		return;
	}
	rb_acq_finish(q);
}

struct rb_acq_part {
	struct rb_acq *q;
	size_t i;
};

static void rb_acq_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct rb_acq_part *part = arg;
	struct rb_acq *q = part->q;
	size_t i = part->i;

	if (st == RP_OK && reply != NULL && reply->type == RV_ARR && reply->n >= 4 &&
	    reply->a[0].type == RV_INT && reply->a[1].type == RV_INT &&
	    reply->a[2].type == RV_INT) {
		q->r[i].out = reply->a[0].i == 1 ? RB_R_ADMITTED : RB_R_REFUSED;
		q->r[i].retry = reply->a[1].i;
		q->r[i].code = (long)reply->a[2].i;
		if (reply->a[3].type == RV_INT)
			rb_saw_time(q->b, reply->a[3].i);
		if (reply->n >= 6 && reply->a[4].type == RV_INT && reply->a[5].type == RV_INT) {
			q->r[i].next_booked = reply->a[4].i;
			q->r[i].next_before = reply->a[5].i;
		}
		if (reply->n >= 7 && reply->a[6].type == RV_INT)
			adrt_mirror(q->w->t[i].kq, reply->a[6].i);
		if (q->r[i].code == LIM_WHICH_STALE) {
			rb_stale(q->b, RB_OP_ACQUIRE);
			q->r[i].out = RB_R_STALE;
		} else {
			rb_ovr_mirror(reply, &q->w->t[i]);
			rb_left_parse(&q->r[i].left, reply, &q->w->t[i]);
		}
	} else {
		if (st != RP_SHUTDOWN)
			rb_failed(q->b, RB_OP_ACQUIRE, st, reply);
		q->r[i].out = RB_R_UNKNOWN;
	}
	free(part);
	if (--q->pending == 0)
		rb_acq_done(q);
}

/* ---- acquire, across keys: one call per connection and loop pass ---- */

/*
 * A single-target acquire is not sent at once: it waits, with the others of
 * this pass of the event loop for the same pool connection, until the pass
 * ends (xb_ev is made active, and runs after the pass's other callbacks),
 * until redis_batch of them wait, or until anything else is sent (so that
 * what this daemon sends for a key still reaches Redis in the order it was
 * made). Then one acquire.lua call carries them all ('*' form: each
 * decided alone, one reply each); one alone goes as it would have. This
 * adds no waiting, and saves Redis a call's dispatch, its TIME and, on a
 * socket, its read and write per acquire. In a Cluster the keys of one
 * connection are not in one slot: there every acquire is its own call.
 */
struct rb_xone {
	struct rargs a; /* KEYS then ARGV, as a lone call would send them */
	size_t nkeys;
	struct rb_acq_part *part;
};

struct rb_xb {
	struct rb_xone *c[256]; /* redis_batch at most */
	size_t n;
	unsigned affinity; /* the first one's: the connection they share */
};

/* An acquire that was never sent: the fallback decides, nothing to reconcile. */
static void rb_acq_unsent(struct rb_acq_part *part)
{
	struct rb_acq *q = part->q;

	q->b->errors[RB_OP_ACQUIRE]++;
	q->r[part->i].out = RB_R_STALE;
	free(part);
	if (--q->pending == 0) /* as rb_acq_cb ends */
		rb_acq_done(q);
}

/* A batch's reply: one acquire reply per acquire, in order. */
static void rb_xb_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct rb_xb *x = arg;
	bool ok = st == RP_OK && reply != NULL && reply->type == RV_ARR && reply->n == x->n;
	size_t i;

	for (i = 0; i < x->n; i++)
		rb_acq_cb(x->c[i]->part, ok ? RP_OK : st,
			  ok					   ? &reply->a[i]
			  : reply != NULL && reply->type == RV_ERR ? reply
								   : NULL);
	for (i = 0; i < x->n; i++) {
		rargs_clear(&x->c[i]->a);
		free(x->c[i]);
	}
	free(x);
}

/* Send what bucket x holds (and empty it). */
static void rb_xb_send(struct backend *b, struct rb_xb *x)
{
	const char **argv = NULL;
	size_t *len = NULL, i, j, k = 0, nkeys = 0, argc = 0;
	struct rb_xb *out = NULL;
	struct rargs hdr = { 0 };
	struct rpool_call call = { .affinity = x->affinity, .script = (size_t)b->s_acquire };

	if (x->n == 0)
		return;
	b->xb_pending -= x->n;
	if (x->n == 1) {
		struct rb_xone *one = x->c[0];
		call.nkeys = one->nkeys;
		call.argc = one->a.n;
		call.argv = (const char *const *)one->a.v;
		call.argvlen = one->a.len;
		call.cb = rb_acq_cb;
		call.arg = one->part;
		if (one->a.oom || rpool_eval_multi(b->pool, 1, &call) != 0)
			rb_acq_unsent(one->part);
		else
			b->calls[RB_OP_ACQUIRE]++;
		rargs_clear(&one->a);
		free(one);
		x->n = 0;
		return;
	}
	rargs_str(&hdr, "*");
	rargs_int(&hdr, (int64_t)x->n);
	for (i = 0; i < x->n; i++) {
		rargs_int(&hdr, (int64_t)x->c[i]->nkeys);
		rargs_int(&hdr, (int64_t)(x->c[i]->a.n - x->c[i]->nkeys));
		nkeys += x->c[i]->nkeys;
		argc += x->c[i]->a.n;
	}
	argc += hdr.n;
	out = malloc(sizeof(*out));
	argv = malloc(argc * sizeof(*argv));
	len = malloc(argc * sizeof(*len));
	if (out == NULL || argv == NULL || len == NULL || hdr.oom)
		goto unsent;
	for (i = 0; i < x->n; i++) /* every KEYS, then the header, then every ARGV */
		for (j = 0; j < x->c[i]->nkeys; j++, k++) {
			argv[k] = x->c[i]->a.v[j];
			len[k] = x->c[i]->a.len[j];
		}
	for (j = 0; j < hdr.n; j++, k++) {
		argv[k] = hdr.v[j];
		len[k] = hdr.len[j];
	}
	for (i = 0; i < x->n; i++)
		for (j = x->c[i]->nkeys; j < x->c[i]->a.n; j++, k++) {
			argv[k] = x->c[i]->a.v[j];
			len[k] = x->c[i]->a.len[j];
		}
	*out = *x; /* the acquires go with the call; x is empty again */
	call.nkeys = nkeys;
	call.argc = argc;
	call.argv = argv;
	call.argvlen = len;
	call.cb = rb_xb_cb;
	call.arg = out;
	for (i = 0; i < x->n && !x->c[i]->a.oom; i++)
		;
	if (i < x->n || rpool_eval_multi(b->pool, 1, &call) != 0) {
		free(out);
		out = NULL;
		goto unsent;
	}
	b->calls[RB_OP_ACQUIRE]++;
	x->n = 0;
	goto done;
unsent:
	free(out);
	for (i = 0; i < x->n; i++) {
		rb_acq_unsent(x->c[i]->part);
		rargs_clear(&x->c[i]->a);
		free(x->c[i]);
	}
	x->n = 0;
done:
	free(argv);
	free(len);
	rargs_clear(&hdr);
}

static void rb_xb_flush(struct backend *b)
{
	size_t i;

	if (b->xb_pending == 0)
		return;
	for (i = 0; i < b->nxb; i++)
		rb_xb_send(b, &b->xb[i]);
}

static void rb_xb_ev_cb(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	rb_xb_flush(arg);
}

/*
 * Queue w's one target for the pass's batch of its connection. false when
 * it cannot be queued (no memory): the caller sends it alone.
 */
static bool rb_xb_add(struct backend *b, struct rb_acq *q, const struct target_rt *t,
		      int64_t not_after)
{
	unsigned aff = rb_affinity(t->kq->sc->cs, t->kq->key);
	struct rb_xb *x = &b->xb[aff % b->nxb];
	struct rb_xone *one = calloc(1, sizeof(*one));
	struct rb_acq_part *part = malloc(sizeof(*part));

	if (one == NULL || part == NULL) {
		free(one);
		free(part);
		return false;
	}
	rb_acquire_args(&one->a, b, t, q->lease_id, 1, not_after, q->w->reserve, q->w->nreserve,
			&one->nkeys);
	part->q = q;
	part->i = 0;
	one->part = part;
	q->pending = 1;
	if (x->n == 0)
		x->affinity = aff;
	x->c[x->n++] = one;
	if (b->xb_pending++ == 0)
		event_active(b->xb_ev, EV_TIMEOUT, 0);
	if (x->n >= (size_t)b->ad->conf->redis_batch)
		rb_xb_send(b, x);
	return true;
}

bool backend_acquire(struct backend *b, struct waiter *w, const char *lease_id, eng_cb *cb,
		     void *arg)
{
	struct rargs a[PROTO_MAX_TARGETS];
	struct rpool_call calls[PROTO_MAX_TARGETS];
	struct rb_acq *q;
	int64_t not_after;
	bool ok = false;
	size_t i, made = 0;

	if (b->closing)
		return false;
	if (!b->up || b->wb_active || !rpool_up(b->pool)) {
		b->errors[RB_OP_ACQUIRE]++; /* decided in fallback: Redis was not reached */
		return false;
	}
	q = calloc(1, sizeof(*q));
	if (q == NULL)
		return false;
	memset(a, 0, sizeof(a));
	q->b = b;
	q->w = w;
	q->cb = cb;
	q->arg = arg;
	memcpy(q->lease_id, lease_id, sizeof(q->lease_id));
	not_after = rb_not_after(b, &q->not_after_mono);
	if (w->nt == 1 && b->xb != NULL && rb_xb_add(b, q, &w->t[0], not_after))
		return true;
	for (i = 0; i < w->nt; i++) {
		struct rb_acq_part *part = malloc(sizeof(*part));
		size_t nkeys = 0;
		rb_acquire_args(&a[i], b, &w->t[i], lease_id, 1, not_after, w->reserve, w->nreserve,
				&nkeys);
		if (part == NULL || a[i].oom) {
			free(part);
			goto out;
		}
		part->q = q;
		part->i = i;
		calls[i] = (struct rpool_call){ .affinity = rb_affinity(w->t[0].kq->sc->cs,
									w->t[0].kq->key),
						.script = (size_t)b->s_acquire,
						.nkeys = nkeys,
						.argc = a[i].n,
						.argv = (const char *const *)a[i].v,
						.argvlen = a[i].len,
						.cb = rb_acq_cb,
						.arg = part };
		made++;
	}
	q->pending = w->nt;
	rb_xb_flush(b);
	ok = rpool_eval_multi(b->pool, w->nt, calls) == 0;
	if (ok) /* one script call per target, pipelined */
		b->calls[RB_OP_ACQUIRE] += w->nt;
out:
	if (!ok) {
		for (i = 0; i < made; i++)
			free(calls[i].arg);
		free(q);
	}
	for (i = 0; i < PROTO_MAX_TARGETS; i++)
		rargs_clear(&a[i]);
	return ok;
}

/* ---- acquire, batched: the first n waiters of one hot key in one call ---- */

struct rb_batch {
	struct backend *b;
	struct waiter *ws[ENG_BATCH_MAX];
	size_t n;
	eng_batch_cb *cb;
	void *arg;
	int64_t not_after_mono;
};

static void rb_batch_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct rb_batch *q = arg;
	struct backend *b = q->b;
	struct eng_res res[ENG_BATCH_MAX];
	const struct target_rt *t = &q->ws[0]->t[0];
	const struct conf_scope *cs = t->kq->sc->cs;
	bool ok = st == RP_OK && reply != NULL && reply->type == RV_ARR && reply->n >= 4 &&
		  reply->a[0].type == RV_INT && reply->a[1].type == RV_INT &&
		  reply->a[2].type == RV_INT && reply->a[0].i >= 0 && (size_t)reply->a[0].i <= q->n;
	size_t i, m;

	memset(res, 0, sizeof(res));
	if (ok && reply->a[3].type == RV_INT)
		rb_saw_time(b, reply->a[3].i);
	if (ok && reply->n >= 7 && reply->a[6].type == RV_INT)
		adrt_mirror(t->kq, reply->a[6].i);
	if (ok && reply->a[2].i == LIM_WHICH_STALE) {
		rb_stale(b, RB_OP_ACQUIRE);
		for (i = 0; i < q->n; i++) /* it booked nothing: decide in process */
			res[i] = eng_fallback(b->ad, q->ws[i], q->ws[i]->lease_id);
	} else if (ok) {
		struct lim_left left = { 0 };
		m = (size_t)reply->a[0].i;
		/* after the whole batch: each admitted one is told the least */
		rb_ovr_mirror(reply, t);
		rb_left_parse(&left, reply, t);
		for (i = 0; i < q->n; i++) {
			res[i].via = VIA_REDIS;
			res[i].left = left;
			if (i < m && q->ws[i]->canceled) {
				/* canceled while Redis decided: undone (a batch's
				 * scope has no pacing to put back) */
				rb_rollback_target(b, q->ws[i], 0, q->ws[i]->lease_id, 0, 0, NULL,
						   NULL);
				res[i].undecided = true;
			} else if (i < m) {
				res[i].admitted = true;
				res[i].booked = lim_release_books(cs, t->cls);
			} else if (i == m) {
				long code = (long)reply->a[2].i;
				eng_merge(&res[i], t->kq, false, reply->a[1].i,
					  lim_which_rule(cs, code), lim_which_slot(cs, code),
					  reply->a[1].i < 0
					      ? lim_which_limit(cs, t->cls, code, LIM_WHOLE)
					      : 0);
				eng_merge_end(&res[i]);
			} else {
				res[i].undecided = true;
			}
		}
	} else {
		/* Unknown: each in turn through the fallback, under its own id;
		 * what Redis may have booked is settled once its bound passed. */
		if (st != RP_SHUTDOWN)
			rb_failed(b, RB_OP_ACQUIRE, st, reply);
		for (i = 0; i < q->n; i++) {
			bool one = true;
			if (b->closing) {
				res[i] = (struct eng_res){ .via = VIA_REDIS, .unavailable = true };
				continue;
			}
			res[i] = eng_fallback(b->ad, q->ws[i], q->ws[i]->lease_id);
			if (res[i].admitted) {
				res[i].redis_maybe = true;
				res[i].redis_after = q->not_after_mono + RB_CLOCK_MARGIN_MS;
			} else {
				rb_reconcile(b, q->ws[i], &one, q->ws[i]->lease_id,
					     q->not_after_mono);
			}
		}
	}
	q->cb(q->arg, q->ws, q->n, res);
	free(q);
}

bool backend_acquire_batch(struct backend *b, struct waiter *const *ws, size_t n, eng_batch_cb *cb,
			   void *arg)
{
	char ids[ENG_BATCH_MAX * (LIM_LEASE_ID_LEN + 1)];
	struct rargs a = { 0 };
	struct rb_batch *q;
	size_t i, nkeys = 0, off = 0;
	int64_t not_after;

	if (b->closing || !b->up || b->wb_active || !rpool_up(b->pool) || n == 0 ||
	    n > ENG_BATCH_MAX)
		return false;
	q = calloc(1, sizeof(*q));
	if (q == NULL)
		return false;
	for (i = 0; i < n; i++) {
		if (i > 0)
			ids[off++] = ',';
		memcpy(ids + off, ws[i]->lease_id, LIM_LEASE_ID_LEN);
		off += LIM_LEASE_ID_LEN;
		q->ws[i] = ws[i];
	}
	ids[off] = '\0';
	q->b = b;
	q->n = n;
	q->cb = cb;
	q->arg = arg;
	not_after = rb_not_after(b, &q->not_after_mono);
	rb_acquire_args(&a, b, &ws[0]->t[0], ids, n, not_after, NULL, 0, &nkeys);
	if (a.oom || rb_eval(b, ws[0]->t[0].kq->sc->cs, ws[0]->t[0].kq->key, b->s_acquire, &a,
			     nkeys, rb_batch_cb, q) != 0) {
		free(q);
		rargs_clear(&a);
		return false;
	}
	b->calls[RB_OP_ACQUIRE]++; /* one call admits the whole batch */
	ws[0]->t[0].kq->sc->batches++;
	ws[0]->t[0].kq->sc->batched += n;
	rargs_clear(&a);
	return true;
}

/* ---- write-back: what the fallback admitted, charged to Redis ---- */

/*
 * struct rb_owe - what this pod's fallback booked on one (scope, key)
 * while Redis could not be asked: units per rule of the scope (by conf
 * index), quota instants, and the pacing and penalty in force. Sent once
 * Redis answers (writeback.lua), under a marker that makes a resend book
 * nothing.
 */
struct rb_owe {
	TAILQ_ENTRY(rb_owe) link;
	char *name;	   /* "SCOPE:KEY" (':' is in no scope name): the table's key */
	const char *key;   /* into name */
	char marker[96];   /* set when first sent: a resend uses the same */
	bool inflight;	   /* sent, not answered */
	int64_t quota_n;   /* admissions counted by quota */
	int64_t next_at;   /* mono ms; 0: none */
	int64_t pen_until; /* mono ms; 0: none */
	int64_t own_quota; /* of the quota instants held here, those not in quota_n */
	size_t nrules;
	/* per conf rule: [0, nrules) what the fallback booked; [nrules,
	 * 2 nrules) the rest of what this pod's state holds in the current
	 * windows (its admissions through Redis): booked only where Redis lost
	 * the key. */
	int64_t units[];
};

#define RB_OWE_MAX 100000 /* keys kept owing; past it the oldest are dropped */

static void rb_owe_free(struct rb_owe *o)
{
	free(o->name);
	free(o);
}

/* The entry of (cs, key), made on first use; NULL when it cannot be. */
static struct rb_owe *rb_owe_of(struct backend *b, const struct conf_scope *cs, const char *key)
{
	size_t ls = strlen(cs->name), lk = strlen(key);
	char *name = malloc(ls + lk + 2);
	struct rb_owe *o;

	if (name == NULL)
		return NULL;
	memcpy(name, cs->name, ls);
	name[ls] = ':';
	memcpy(name + ls + 1, key, lk + 1);
	if ((o = htab_get(b->owed, name)) != NULL) {
		free(name);
		return o->nrules == cs->nrules ? o : NULL; /* a reload changed the rules */
	}
	if (htab_count(b->owed) >= RB_OWE_MAX) {
		struct rb_owe *old = TAILQ_FIRST(&b->owing);
		TAILQ_REMOVE(&b->owing, old, link);
		htab_del(b->owed, old->name);
		rb_owe_free(old);
		b->wb_dropped++;
		log_ratelimited(LOG_SLOT_FALLBACK, 1000,
				"too many keys owed to redis: the oldest dropped", "max=%d",
				RB_OWE_MAX);
	}
	o = calloc(1, sizeof(*o) + 2 * cs->nrules * sizeof(o->units[0]));
	if (o == NULL || !htab_put(b->owed, name, o)) {
		free(o);
		free(name);
		return NULL;
	}
	o->name = name;
	o->key = name + ls + 1;
	o->nrules = cs->nrules;
	TAILQ_INSERT_TAIL(&b->owing, o, link);
	return o;
}

void backend_owe(struct backend *b, struct kq *kq, const struct conf_class *cls, int64_t cost,
		 const struct lim_tokens *reserve, size_t nreserve)
{
	const struct conf_scope *cs = kq->sc->cs;
	const struct conf_plan *pl = conf_plan_of(cs, cls);
	struct lim_state *st = kq_lim(kq);
	struct rb_owe *o;
	size_t i;

	if (b->closing || (o = rb_owe_of(b, cs, kq->key)) == NULL)
		return;
	if (cs->quota > 0)
		o->quota_n++;
	for (i = 0; i < pl->nrules; i++) {
		const struct conf_rule *r = &cs->rules[pl->rules[i]];
		if (r->meter == METER_REQUESTS)
			o->units[pl->rules[i]] += cost;
		else if (r->meter != METER_CONCURRENCY)
			o->units[pl->rules[i]] += lim_token_charge(r, reserve, nreserve);
	}
	if (st != NULL && st->next_at > o->next_at)
		o->next_at = st->next_at;
}

static void rb_owe_penalty(struct backend *b, struct kq *kq, int64_t until)
{
	struct rb_owe *o = rb_owe_of(b, kq->sc->cs, kq->key);

	if (o != NULL && until > o->pen_until)
		o->pen_until = until;
}

static void rb_wb_done(struct backend *b)
{
	struct timeval tv = { 0, RB_QUEUE_TICK_MS * 1000 };

	if (b->wb_pending > 0)
		return;
	if (!TAILQ_EMPTY(&b->sending)) { /* failed ones: again, soon */
		if (!evtimer_pending(b->wb_ev, NULL) && evtimer_add(b->wb_ev, &tv) != 0)
			log_ratelimited(LOG_SLOT_FALLBACK, 1000, "cannot arm the write-back timer",
					NULL);
		return;
	}
	if (!TAILQ_EMPTY(&b->owing) && !b->wb_partial) { /* admitted in fallback meanwhile */
		rb_writeback(b);
		return;
	}
	b->wb_partial = false;
	if (b->wb_active)
		log_info("fallback admissions written back to redis: limits are shared",
			 "keys=%llu", (unsigned long long)b->wb_keys);
	b->wb_active = false;
}

struct rb_wb_call {
	struct backend *b;
	struct rb_owe *o;
};

static void rb_wb_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct rb_wb_call *c = arg;
	struct backend *b = c->b;

	b->wb_pending--;
	c->o->inflight = false;
	if (st == RP_OK && reply != NULL && reply->type == RV_INT) {
		TAILQ_REMOVE(&b->sending, c->o, link);
		rb_owe_free(c->o);
		b->wb_keys++;
		if (reply->i == 2) /* Redis had lost the key: own admissions booked again */
			b->wb_lost++;
	} else if (st != RP_SHUTDOWN) {
		rb_failed(b, RB_OP_WRITEBACK, st, reply); /* kept: sent again, same marker */
	}
	free(c);
	if (!b->closing)
		rb_wb_done(b);
}

/*
 * What the key's state here holds beyond what the fallback booked: this
 * pod's admissions through Redis in the current windows (and its pacing).
 * Worked out at each send, from the state as it is then.
 */
static void rb_owe_own(struct rb_owe *o, struct scope_rt *sc, int64_t now)
{
	struct kq *kq = htab_get(sc->keys, o->key);
	int64_t qn = 0;
	size_t i;

	o->own_quota = 0;
	memset(&o->units[o->nrules], 0, o->nrules * sizeof(o->units[0]));
	if (kq == NULL)
		return;
	lim_spent(kq_lim(kq), sc->cs, now, &qn, &o->units[o->nrules]);
	o->own_quota = qn > o->quota_n ? qn - o->quota_n : 0;
	for (i = 0; i < o->nrules; i++) {
		int64_t *own = &o->units[o->nrules + i];
		*own = *own > o->units[i] ? *own - o->units[i] : 0;
	}
	if (kq_lim(kq)->next_at > o->next_at)
		o->next_at = kq_lim(kq)->next_at;
}

static bool rb_owe_units(const struct rb_owe *o)
{
	size_t i;

	for (i = 0; i < 2 * o->nrules; i++)
		if (o->units[i] != 0)
			return true;
	return false;
}

/* Send one entry's write-back; false when Redis cannot take it now. */
static bool rb_wb_send(struct backend *b, struct rb_owe *o)
{
	struct scope_rt *sc = NULL;
	const struct conf_scope *cs;
	struct rargs a = { 0 };
	struct rb_wb_call *c;
	int64_t now = clock_mono_ms();
	size_t i, nkeys = 4, n = 0;
	char *colon = strchr(o->name, ':'), scope[PROTO_NAME_MAX + 1];

	if (colon == NULL || (size_t)(colon - o->name) > PROTO_NAME_MAX)
		return true; /* cannot be: dropped below */
	memcpy(scope, o->name, (size_t)(colon - o->name));
	scope[colon - o->name] = '\0';
	if ((sc = scope_find(b->ad, scope)) == NULL || sc->cs->nrules != o->nrules) {
		TAILQ_REMOVE(&b->sending, o, link); /* the scope changed: nothing to charge */
		rb_owe_free(o);
		return true;
	}
	cs = sc->cs;
	rb_owe_own(o, sc, now);
	if (o->quota_n == 0 && o->own_quota == 0 && o->next_at <= now && o->pen_until <= now &&
	    !rb_owe_units(o)) {
		TAILQ_REMOVE(&b->sending, o, link); /* nothing left to tell */
		rb_owe_free(o);
		return true;
	}
	if (o->marker[0] == '\0')
		snprintf(o->marker, sizeof(o->marker), "%s:%llu:%p", b->pod_id,
			 (unsigned long long)b->wb_round, (void *)o);
	{
		const char *parts[7] = {
			b->ad->conf->prefix, ":{", cs->name, ":", o->key, "}:w:", o->marker
		};
		rargs_cat(&a, parts, 7);
	}
	rb_key(&a, b, cs, o->key, "s", -1);
	rb_key(&a, b, cs, o->key, "q", -1);
	rb_penalty_key(&a, b, cs, o->key);
	rb_key(&a, b, cs, o->key, "lost", -1);
	nkeys++;
	for (i = 0; i < cs->nrules; i++)
		if ((o->units[i] != 0 || o->units[o->nrules + i] != 0) &&
		    cs->rules[i].meter != METER_CONCURRENCY) {
			rb_key(&a, b, cs, o->key, "r", (long)i);
			nkeys++;
		}
	rargs_int(&a, cs->quota_window_ms > RB_GRACE_MS(cs) ? cs->quota_window_ms + 60000
							    : RB_GRACE_MS(cs) + 60000);
	rargs_int(&a, o->quota_n);
	rargs_int(&a, o->own_quota);
	rargs_int(&a, cs->quota_window_ms);
	rargs_int(&a, o->next_at > now ? o->next_at - now : 0);
	rargs_int(&a, o->pen_until > now ? o->pen_until - now : 0);
	rargs_int(&a, (int64_t)(nkeys - 5));
	for (i = 0; i < cs->nrules; i++) {
		struct strat_params p;
		if ((o->units[i] == 0 && o->units[o->nrules + i] == 0) ||
		    cs->rules[i].meter == METER_CONCURRENCY)
			continue;
		p = lim_rule_params(&cs->rules[i], LIM_WHOLE);
		rargs_str(&a, strat_kind_name(p.kind));
		rargs_int(&a, p.amount);
		rargs_int(&a, p.window_ms);
		rargs_int(&a, p.burst);
		rargs_int(&a, o->units[i]);
		rargs_int(&a, o->units[o->nrules + i]);
		n++;
	}
	if (a.oom || (c = malloc(sizeof(*c))) == NULL) {
		rargs_clear(&a);
		return false;
	}
	c->b = b;
	c->o = o;
	if (rb_eval(b, cs, o->key, b->s_writeback, &a, nkeys, rb_wb_cb, c) != 0) {
		free(c);
		rargs_clear(&a);
		return false;
	}
	b->calls[RB_OP_WRITEBACK]++;
	b->wb_pending++;
	o->inflight = true;
	rargs_clear(&a);
	(void)n;
	return true;
}

/* Send what is owed (new entries and ones to send again), then serve. */
static void rb_wb_run(struct backend *b)
{
	struct rb_owe *o, *nx;

	if (b->closing || !b->up)
		return;
	for (o = TAILQ_FIRST(&b->sending); o != NULL; o = nx) {
		nx = TAILQ_NEXT(o, link);
		if (!o->inflight && !rb_wb_send(b, o))
			break; /* the pool is not taking calls: the timer tries again */
	}
	rb_wb_done(b);
}

static void rb_wb_timer(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	rb_wb_run(arg);
}

/*
 * Redis answers again: what the fallback owes it is sent before Redis
 * serves acquires here (they stay in fallback meanwhile, a round trip).
 */
struct rb_walk {
	struct backend *b;
	const struct conf_scope *cs;
	int64_t now;
};

static void rb_walk_key(void *arg, const char *key, void *val)
{
	struct rb_walk *w = arg;
	struct kq *kq = val;

	/* Past the bound the fallback's own entries are not pushed out. */
	if (htab_count(w->b->owed) < RB_OWE_MAX && !lim_idle(kq_lim(kq), w->cs, w->now))
		(void)rb_owe_of(w->b, w->cs, key); /* NULL: out of memory, or new rules */
}

/* A new write-back round: everything owed moves to the sending list. */
static void rb_wb_take_owing(struct backend *b)
{
	struct rb_owe *o;

	b->wb_round++;
	while ((o = TAILQ_FIRST(&b->owing)) != NULL) {
		TAILQ_REMOVE(&b->owing, o, link);
		htab_del(b->owed, o->name);
		TAILQ_INSERT_TAIL(&b->sending, o, link);
	}
}

static void rb_writeback(struct backend *b)
{
	struct rb_walk w = { .b = b, .now = clock_mono_ms() };
	size_t i;

	/* Every key with something in its current windows goes too: if Redis
	 * lost it (restarted empty, a failover to a replica that had not got
	 * it), what this pod admitted through Redis before is booked again. */
	for (i = 0; i < b->ad->nscopes; i++) {
		w.cs = b->ad->scopes[i].cs;
		htab_each(b->ad->scopes[i].keys, rb_walk_key, &w);
	}
	if (TAILQ_EMPTY(&b->owing) && TAILQ_EMPTY(&b->sending))
		return;
	rb_wb_take_owing(b);
	b->wb_active = true;
	log_info("redis is back: writing back what the fallback admitted", "round=%llu",
		 (unsigned long long)b->wb_round);
	rb_wb_run(b);
}

/*
 * Owed while Redis kept serving: some calls met a node that could not take
 * them (a slot migration longer than redis_timeout, one Cluster master
 * lost) and the fallback decided them while the pool stayed up. What they
 * admitted is written back at the next beat, with no walk of the keys and
 * without holding acquires back (the rest of Redis is serving); a call that
 * fails again is retried by the write-back timer.
 */
static void rb_writeback_owed(struct backend *b)
{
	if (!b->up || b->wb_active || b->wb_partial || b->wb_pending > 0 ||
	    TAILQ_EMPTY(&b->owing) || !TAILQ_EMPTY(&b->sending))
		return;
	b->wb_partial = true;
	rb_wb_take_owing(b);
	log_info("writing back what the fallback admitted while a redis node could not answer",
		 "round=%llu", (unsigned long long)b->wb_round);
	rb_wb_run(b);
}

/* ---- health, heartbeat, divisor ---- */

static void rb_hb_cb(evutil_socket_t fd, short what, void *arg);

static void rb_state_cb(void *arg, bool up)
{
	struct backend *b = arg;

	if (up == b->up)
		return;
	b->up = up;
	b->since_ms = clock_mono_ms();
	if (!up) {
		log_warn("redis is down: serving from the in-process fallback", "redis=\"%s\"",
			 b->url_log);
		return;
	}
	log_info("redis is up: limits are shared", "redis=\"%s\"", b->url_log);
	if (rpool_clock(b->pool, &b->offset_ms))
		b->offset_known = true;
	/* The pods alive, at once, not a beat later; then what Redis is owed. */
	rb_hb_cb(-1, 0, b);
	rb_writeback(b);
	if (b->was_up)
		rb_rebook_all(b, "redis is back");
	b->was_up = true;
	rb_queue_run(b, false);
}

/*
 * A Cluster master that had lost every connection is back while the others
 * kept serving: like a Redis that came back, it may have lost what it held
 * (restarted empty), so the leases are booked again (only what is missing
 * is added) and the releases owed are sent.
 */
static void rb_node_up_cb(void *arg, const char *node)
{
	struct backend *b = arg;

	if (b->closing || !b->up)
		return;
	log_info("redis node is back", "node=%s", node);
	rb_rebook_all(b, "a redis node is back");
	rb_queue_run(b, false);
}

static void rb_hb_reply(void *arg, enum rp_status st, const struct rval *reply)
{
	struct backend *b = arg;

	if (st == RP_OK && reply != NULL && reply->type == RV_ARR && reply->n == 4 &&
	    reply->a[0].type == RV_INT && reply->a[0].i >= 1 && reply->a[1].type == RV_INT &&
	    reply->a[2].type == RV_INT && reply->a[3].type == RV_INT && reply->a[3].i >= 0 &&
	    reply->a[3].i < reply->a[0].i) {
		b->pods_seen = reply->a[0].i;
		b->pod_rank = reply->a[3].i;
		rb_saw_time(b, reply->a[1].i);
		/* This pod was registered a beat ago and is not now: Redis lost
		 * its data (restarted empty, flushed, failed over) and with it
		 * the leases this daemon holds. */
		if (reply->a[2].i == 0 && b->beats > 0)
			rb_rebook_all(b, "redis lost its data");
		b->beats++;
	} else if (st != RP_SHUTDOWN)
		rb_failed(b, RB_OP_HEARTBEAT, st, reply);
}

static void rb_hb_cb(evutil_socket_t fd UNUSED, short what, void *arg)
{
	struct backend *b = arg;
	const char *argv[4];
	size_t len[4];
	char window[32];

	if (!rpool_up(b->pool)) {
		b->errors[RB_OP_HEARTBEAT]++;
		return;
	}
	snprintf(window, sizeof(window), "%d", RB_POD_WINDOW_MS);
	argv[0] = b->pods_key;
	argv[1] = b->pod_id;
	argv[2] = window;
	len[0] = strlen(argv[0]);
	len[1] = strlen(argv[1]);
	len[2] = strlen(argv[2]);
	if (rpool_eval(b->pool, (size_t)b->s_heartbeat, 1, 3, argv, len, rb_hb_reply, b) != 0)
		rb_failed(b, RB_OP_HEARTBEAT, RP_CONN, NULL);
	else
		b->calls[RB_OP_HEARTBEAT]++;
	if (what != 0) /* the beat's timer; rb_state_cb writes back itself */
		rb_writeback_owed(b);
}

struct lim_share backend_share(const struct backend *b, const struct conf_scope *cs)
{
	struct lim_share sh = LIM_WHOLE;

	if (b == NULL)
		return sh;
	if (b->beats > 0) /* ranked by the last heartbeat, whatever the divisor */
		sh.rank = b->pod_rank;
	if (cs->fallback_divisor_auto && b->beats == 0) /* the fleet not seen yet */
		sh.div = (double)b->ad->conf->fallback_pods;
	else if (cs->fallback_divisor_auto)
		sh.div = b->pods_seen > 1 ? (double)b->pods_seen : 1.0;
	else
		sh.div = cs->fallback_divisor < 1.0 ? 1.0 : cs->fallback_divisor;
	return sh;
}

/*
 * "topology": the deployment and its nodes in use (the master for one Redis
 * or Sentinel; every master of the slot map for a Cluster).
 */
static void rb_status_topology(const struct backend *b, struct preply *r)
{
	struct rpool_node_info nodes[RB_STATUS_NODES];
	size_t n = rpool_nodes(b->pool, nodes, RB_STATUS_NODES), i;

	preply_push(r, "topology");
	preply_str(r, "kind", rpool_topology(b->pool));
	preply_list(r, "nodes");
	for (i = 0; i < n && i < RB_STATUS_NODES; i++) {
		preply_item(r);
		preply_str(r, "addr", nodes[i].addr);
		preply_str(r, "state", nodes[i].state);
		if (strcmp(rpool_topology(b->pool), "cluster") == 0)
			preply_int(r, "slots", nodes[i].slots);
		preply_int(r, "calls", (int64_t)nodes[i].calls);
		preply_int(r, "failures", (int64_t)nodes[i].failures);
		preply_pop(r);
	}
	preply_pop(r);
	preply_pop(r);
}

void backend_status(const struct backend *b, struct preply *r)
{
	size_t i;

	preply_push(r, "redis");
	preply_int(r, "pods_seen", b->pods_seen);
	preply_int(r, "queued", (int64_t)b->nqueued);
	preply_int(r, "reconciled", (int64_t)b->reconciled);
	preply_int(r, "rebooked", (int64_t)b->rebooked);
	preply_int(r, "dropped", (int64_t)b->dropped);
	preply_int(r, "owed", (int64_t)htab_count(b->owed));
	preply_int(r, "written_back", (int64_t)b->wb_keys);
	preply_int(r, "owed_dropped", (int64_t)b->wb_dropped);
	preply_int(r, "found_lost", (int64_t)b->wb_lost);
	preply_push(r, "errors");
	for (i = 0; i < RB_OP__COUNT; i++)
		preply_int(r, rb_op_names[i], (int64_t)b->errors[i]);
	preply_pop(r);
	rb_status_topology(b, r);
	preply_pop(r);
}

size_t backend_nops(void)
{
	return RB_OP__COUNT;
}

const char *backend_op_name(size_t op)
{
	return op < RB_OP__COUNT ? rb_op_names[op] : NULL;
}

uint64_t backend_op_errors(const struct backend *b, size_t op)
{
	return b != NULL && op < RB_OP__COUNT ? b->errors[op] : 0;
}

uint64_t backend_op_calls(const struct backend *b, size_t op)
{
	return b != NULL && op < RB_OP__COUNT ? b->calls[op] : 0;
}

bool backend_up(const struct backend *b)
{
	return b->up && !b->wb_active;
}

const char *backend_state(const struct backend *b, int64_t *since_ms)
{
	*since_ms = b->since_ms;
	return b->up && !b->wb_active ? "redis" : "fallback";
}

/* The AUTH secret: the file's first line. Never logged. */
static char *rb_read_password(const char *path, const char *key)
{
	FILE *f = fopen(path, "r");
	char buf[1024];
	char *nl;

	if (f == NULL) {
		log_error("cannot read password file", "key=%s path=\"%s\"", key, path);
		return NULL;
	}
	if (fgets(buf, sizeof(buf), f) == NULL)
		buf[0] = '\0';
	fclose(f);
	nl = strpbrk(buf, "\r\n");
	if (nl)
		*nl = '\0';
	return strdup(buf);
}

struct backend *backend_new(struct admitd *ad)
{
	struct backend *b = calloc(1, sizeof(*b));
	struct timeval hb = { 0, RB_HEARTBEAT_MS * 1000 };
	char err[256] = "";
	char host[48] = "pod";

	if (b == NULL)
		return NULL;
	b->ad = ad;
	b->pods_seen = 1;
	TAILQ_INIT(&b->queue);
	TAILQ_INIT(&b->owing);
	TAILQ_INIT(&b->sending);
	b->since_ms = clock_mono_ms();
	b->s_acquire = script_index("acquire");
	b->s_release = script_index("release");
	b->s_penalize = script_index("penalize");
	b->s_heartbeat = script_index("heartbeat");
	b->s_reset = script_index("reset");
	b->s_inspect = script_index("inspect");
	b->s_override = script_index("override");
	b->s_writeback = script_index("writeback");
	if (b->s_acquire < 0 || b->s_release < 0 || b->s_penalize < 0 || b->s_heartbeat < 0 ||
	    b->s_reset < 0 || b->s_inspect < 0 || b->s_override < 0) {
		log_error("a Redis script is missing from the build", NULL);
		goto fail;
	}
	gethostname(host, sizeof(host) - 1);
	snprintf(b->pod_id, sizeof(b->pod_id), "%s:%d:%08llx", host, (int)getpid(),
		 (unsigned long long)(rand_u64() & 0xffffffffULL));
	if (asprintf(&b->pods_key, "%s:pods", ad->conf->prefix) < 0) {
		b->pods_key = NULL;
		goto fail;
	}
	if (ad->conf->redis_password_file != NULL &&
	    (b->password =
		 rb_read_password(ad->conf->redis_password_file, "redis_password_file")) == NULL)
		goto fail;
	if (ad->conf->sentinel_password_file != NULL &&
	    (b->sentinel_password = rb_read_password(ad->conf->sentinel_password_file,
						     "sentinel_password_file")) == NULL)
		goto fail;
	b->pc.url = ad->conf->redis;
	if (ad->conf->redis_functions) {
		b->pc.library = script_library;
		b->pc.functions = script_functions;
	}
	redis_url_redact(ad->conf->redis, b->url_log, sizeof(b->url_log));
	b->pc.pool_size = (int)ad->conf->redis_pool;
	b->pc.timeout_ms = ad->conf->redis_timeout_ms;
	b->pc.user = ad->conf->redis_user;
	b->pc.password = b->password;
	b->pc.backoff_min_ms = 50;
	b->pc.backoff_max_ms = 500; /* back within 2 s of Redis returning, jitter included */
	b->pc.sentinel_password = b->sentinel_password;
	b->pc.tls_ca_file = ad->conf->redis_tls_ca_file;
	b->pc.tls_cert_file = ad->conf->redis_tls_cert_file;
	b->pc.tls_key_file = ad->conf->redis_tls_key_file;
	b->pc.tls_server_name = ad->conf->redis_tls_server_name;
	b->pc.tls_no_verify = !ad->conf->redis_tls_verify;
	b->pc.on_node_up = rb_node_up_cb;
	b->pool = rpool_new(ad->base, &b->pc, script_sources, script_count, rb_state_cb, b, err,
			    sizeof(err));
	if (b->pool == NULL) {
		log_error("bad redis setting", "redis=\"%s\" err=\"%s\"", b->url_log, err);
		goto fail;
	}
	b->hb_ev = event_new(ad->base, -1, EV_PERSIST, rb_hb_cb, b);
	b->queue_ev = evtimer_new(ad->base, rb_queue_cb, b);
	b->wb_ev = evtimer_new(ad->base, rb_wb_timer, b);
	b->owed = htab_new();
	if (ad->conf->redis_batch > 1 && strcmp(rpool_topology(b->pool), "cluster") != 0) {
		b->nxb = (size_t)ad->conf->redis_pool;
		if ((b->xb = calloc(b->nxb, sizeof(*b->xb))) == NULL ||
		    (b->xb_ev = event_new(ad->base, -1, 0, rb_xb_ev_cb, b)) == NULL)
			goto fail;
	}
	if (b->hb_ev == NULL || b->queue_ev == NULL || b->wb_ev == NULL || b->owed == NULL ||
	    event_add(b->hb_ev, &hb) != 0)
		goto fail;
	return b;
fail:
	backend_free(b);
	return NULL;
}

void backend_free(struct backend *b)
{
	if (b == NULL)
		return;
	b->closing = true;
	if (b->hb_ev)
		event_free(b->hb_ev);
	/* queued acquires first: they are answered by rb_acq_done's closing branch */
	for (size_t i = 0; i < b->nxb && b->xb != NULL; i++) {
		struct rb_xb *x = &b->xb[i];
		for (size_t j = 0; j < x->n; j++) {
			rb_acq_unsent(x->c[j]->part);
			rargs_clear(&x->c[j]->a);
			free(x->c[j]);
		}
	}
	free(b->xb);
	if (b->xb_ev)
		event_free(b->xb_ev);
	if (b->pool)
		rpool_free(b->pool);
	if (b->nqueued > 0)
		log_warn("redis releases still queued at exit: they expire by lease_ttl",
			 "queued=%zu", b->nqueued);
	while (!TAILQ_EMPTY(&b->queue)) {
		struct rb_rel *r = TAILQ_FIRST(&b->queue);
		TAILQ_REMOVE(&b->queue, r, link);
		rb_rel_free(r);
	}
	if (b->queue_ev)
		event_free(b->queue_ev);
	if (b->wb_ev)
		event_free(b->wb_ev);
	while (!TAILQ_EMPTY(&b->owing)) {
		struct rb_owe *o = TAILQ_FIRST(&b->owing);
		TAILQ_REMOVE(&b->owing, o, link);
		rb_owe_free(o);
	}
	while (!TAILQ_EMPTY(&b->sending)) {
		struct rb_owe *o = TAILQ_FIRST(&b->sending);
		TAILQ_REMOVE(&b->sending, o, link);
		rb_owe_free(o);
	}
	htab_free(b->owed);
	free(b->pods_key);
	free(b->password);
	free(b->sentinel_password);
	free(b);
}
