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
 * key one script touches is in one slot, unchanged on Redis Cluster.
 *
 * An acquire is one EVALSHA per target, pipelined when there are several.
 * Any failure (no connection, timeout, an error reply of any kind: script
 * error, NOPERM, OOM) is never read as admitted: the decision is made by the
 * scope's fail_mode (eng_fallback), counted and logged. A target that
 * admitted while another refused or failed is rolled back.
 */

#include "backend.h"

#include "clock.h"
#include "log.h"
#include "rpool.h"
#include "scripts.h"

#include <event2/event.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A pod that has not beaten for this long is not counted by divisor = auto. */
#define RB_POD_WINDOW_MS  5000
#define RB_HEARTBEAT_MS	  1000
#define RB_CODE_PENALTY	  (-2)
#define RB_CODE_MIN_DELAY (-3)
#define RB_CODE_CLUSTER	  (-4)
#define RB_CODE_QUOTA	  (-5)
#define RB_CODE_STALE	  (-6) /* the script ran after not_after: booked nothing */

/* The operations whose failures are counted, for `status`. */
enum rb_op {
	RB_OP_ACQUIRE = 0,
	RB_OP_RELEASE,
	RB_OP_ROLLBACK,
	RB_OP_PENALIZE,
	RB_OP_HEARTBEAT,
	RB_OP__COUNT
};
static const char *const rb_op_names[RB_OP__COUNT] = { "acquire", "release", "rollback", "penalize",
						       "heartbeat" };

struct backend {
	struct admitd *ad;
	struct rpool *pool;
	struct rpool_conf pc;
	char *password;
	bool up;
	bool closing; /* inside backend_free: calls complete, nothing new is sent */
	int64_t since_ms;
	int64_t pods_seen; /* from the last heartbeat while up */
	int64_t offset_ms; /* Redis TIME minus clock_mono_ms, from the last reply */
	bool offset_known;
	char pod_id[64];
	char *pods_key;
	struct event *hb_ev;
	int s_acquire, s_release, s_penalize, s_heartbeat;
	uint64_t errors[RB_OP__COUNT]; /* failed calls by operation */
};

/* ---- argument vectors ---- */

/* A growable argv whose strings it owns. */
struct rargs {
	char **v;
	size_t *len;
	size_t n, cap;
	bool oom;
};

static void rargs_add(struct rargs *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void rargs_add(struct rargs *a, const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	int n;

	if (a->oom)
		return;
	if (a->n == a->cap) {
		size_t ncap = a->cap ? a->cap * 2 : 32;
		char **nv = realloc(a->v, ncap * sizeof(*nv));
		size_t *nl;
		if (nv == NULL) {
			a->oom = true;
			return;
		}
		a->v = nv;
		nl = realloc(a->len, ncap * sizeof(*nl));
		if (nl == NULL) {
			a->oom = true;
			return;
		}
		a->len = nl;
		a->cap = ncap;
	}
	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0) {
		a->oom = true;
		return;
	}
	a->v[a->n] = s;
	a->len[a->n++] = (size_t)n;
}

static void rargs_clear(struct rargs *a)
{
	size_t i;

	for (i = 0; i < a->n; i++)
		free(a->v[i]);
	free(a->v);
	free(a->len);
	memset(a, 0, sizeof(*a));
}

static void rb_key(struct rargs *a, const struct backend *b, const struct kq *kq,
		   const char *suffix, long idx)
{
	if (idx < 0)
		rargs_add(a, "%s:{%s:%s}:%s", b->ad->conf->prefix, kq->sc->cs->name, kq->key,
			  suffix);
	else
		rargs_add(a, "%s:{%s:%s}:%s%ld", b->ad->conf->prefix, kq->sc->cs->name, kq->key,
			  suffix, idx);
}

/*
 * The KEYS of acquire.lua and release.lua, which take the same ones: the
 * pacing hash, the quota instants, the leases, then the counters of the
 * rules idx[0..nr). Returns how many.
 */
static size_t rb_keys(struct rargs *a, const struct backend *b, const struct kq *kq,
		      const size_t *idx, size_t nr)
{
	size_t i;

	rb_key(a, b, kq, "s", -1);
	rb_key(a, b, kq, "q", -1);
	rb_key(a, b, kq, "l", -1);
	for (i = 0; i < nr; i++)
		rb_key(a, b, kq, "r", (long)idx[i]);
	return 3 + nr;
}

/* Which rules of cs apply to cls: their indexes, in conf order. */
static size_t rb_rules(const struct conf_scope *cs, const struct conf_class *cls, size_t *out)
{
	size_t i, n = 0;

	for (i = 0; i < cs->nrules; i++)
		if (lim_rule_applies(cs, i, cls))
			out[n++] = i;
	return n;
}

static const char *rb_meter(enum conf_meter m)
{
	return m == METER_REQUESTS ? "r" : m == METER_CONCURRENCY ? "c" : "t";
}

/*
 * The Redis time after which an acquire sent now must book nothing: a little
 * before this call times out here (a quarter of redis_timeout is left for the
 * reply to travel), so a script that Redis runs late, after a freeze, cannot
 * leave a lease behind that the fallback's admission will never release.
 */
static int64_t rb_not_after(const struct backend *b)
{
	int64_t t = b->ad->conf->redis_timeout_ms, margin = t / 4 > 0 ? t / 4 : 1;

	if (!b->offset_known)
		return 0;
	return clock_mono_ms() + b->offset_ms + t - margin;
}

/* Learn Redis's clock from a reply that carries its TIME. */
static void rb_saw_time(struct backend *b, long long redis_ms)
{
	b->offset_ms = (int64_t)redis_ms - clock_mono_ms();
	b->offset_known = true;
}

/* KEYS and ARGV of acquire.lua for one target (see the script's header). */
static void rb_acquire_args(struct rargs *a, const struct backend *b, const struct target_rt *t,
			    const char *lease_id, size_t *nkeys)
{
	const struct conf_scope *cs = t->kq->sc->cs;
	size_t *idx = calloc(cs->nrules ? cs->nrules : 1, sizeof(*idx));
	size_t nr, i;

	if (idx == NULL) {
		a->oom = true;
		return;
	}
	nr = rb_rules(cs, t->cls, idx);
	*nkeys = rb_keys(a, b, t->kq, idx, nr);
	rargs_add(a, "%s", lease_id);
	rargs_add(a, "1");
	rargs_add(a, "%lld", (long long)t->cost);
	rargs_add(a, "%lld", (long long)(t->cls ? t->cls->floor : 0));
	rargs_add(a, "%lld", (long long)cs->min_delay_ms);
	rargs_add(a, "%d", lim_serialized(cs) ? 1 : 0);
	rargs_add(a, "%lld", (long long)cs->cluster_concurrency);
	rargs_add(a, "%lld", (long long)cs->quota);
	rargs_add(a, "%lld", (long long)cs->quota_window_ms);
	rargs_add(a, "%lld", (long long)cs->lease_ttl_ms);
	rargs_add(a, "%lld", (long long)cs->concurrency_retry_ms);
	rargs_add(a, "%d", lim_tracks_leases(cs) ? 1 : 0);
	rargs_add(a, "%zu", nr);
	for (i = 0; i < nr; i++) {
		const struct conf_rule *r = &cs->rules[idx[i]];
		struct strat_params p = lim_rule_params(r, 1.0);
		rargs_add(a, "%s", rb_meter(r->meter));
		rargs_add(a, "%s", strat_kind_name(p.kind));
		rargs_add(a, "%lld", (long long)p.amount);
		rargs_add(a, "%lld", (long long)p.window_ms);
		rargs_add(a, "%lld", (long long)p.burst);
		rargs_add(a, "%zu", idx[i]);
	}
	rargs_add(a, "%lld", (long long)rb_not_after(b));
	free(idx);
}

/*
 * KEYS and ARGV of release.lua for one target; mode "release" or "rollback".
 * tokens are charged to the token meters that apply (rollback: request
 * meters are refunded instead).
 */
static void rb_release_args(struct rargs *a, const struct backend *b, const struct target_rt *t,
			    const char *lease_id, const char *mode, const struct lim_tokens *tokens,
			    size_t ntokens, size_t *nkeys)
{
	const struct conf_scope *cs = t->kq->sc->cs;
	bool rollback = strcmp(mode, "rollback") == 0;
	size_t *idx = calloc(cs->nrules ? cs->nrules : 1, sizeof(*idx));
	size_t nr, i, j;

	if (idx == NULL) {
		a->oom = true;
		return;
	}
	nr = rb_rules(cs, t->cls, idx);
	*nkeys = rb_keys(a, b, t->kq, idx, nr);
	rargs_add(a, "%s", lease_id);
	rargs_add(a, "%s", mode);
	rargs_add(a, "%d", lim_serialized(cs) ? 1 : 0);
	rargs_add(a, "%lld", (long long)cs->min_delay_ms);
	rargs_add(a, "%zu", nr);
	for (i = 0; i < nr; i++) {
		const struct conf_rule *r = &cs->rules[idx[i]];
		struct strat_params p = lim_rule_params(r, 1.0);
		int64_t charge = 0;
		if (rollback && r->meter == METER_REQUESTS)
			charge = -t->cost;
		else if (!rollback && r->meter == METER_TOKENS)
			for (j = 0; j < ntokens; j++)
				charge += tokens[j].n;
		else if (!rollback && r->meter == METER_TOKENS_KEY)
			for (j = 0; j < ntokens; j++)
				if (strcmp(tokens[j].name, r->meter_key) == 0)
					charge += tokens[j].n;
		rargs_add(a, "%s", strat_kind_name(p.kind));
		rargs_add(a, "%lld", (long long)p.amount);
		rargs_add(a, "%lld", (long long)p.window_ms);
		rargs_add(a, "%lld", (long long)p.burst);
		rargs_add(a, "%lld", (long long)charge);
	}
	free(idx);
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

/* ---- fire-and-forget calls: release, rollback, penalize ---- */

struct rb_ff {
	struct backend *b;
	enum rb_op op;
};

static void rb_ff_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct rb_ff *ff = arg;

	if (st != RP_OK || reply == NULL || reply->type != RV_INT)
		rb_failed(ff->b, ff->op, st, reply);
	free(ff);
}

static void rb_ff_eval(struct backend *b, int script, enum rb_op op, struct rargs *a, size_t nkeys)
{
	struct rb_ff *ff;

	if (b->closing)
		return;
	if (a->oom || (ff = malloc(sizeof(*ff))) == NULL) {
		rb_failed(b, op, RP_CONN, NULL);
		return;
	}
	ff->b = b;
	ff->op = op;
	if (rpool_eval(b->pool, (size_t)script, nkeys, a->n, (const char *const *)a->v, a->len,
		       rb_ff_cb, ff) != 0) {
		free(ff);
		rb_failed(b, op, RP_CONN, NULL);
	}
}

static void rb_release_one(struct backend *b, const struct target_rt *t, const char *lease_id,
			   const char *mode, const struct lim_tokens *tokens, size_t ntokens)
{
	struct rargs a = { 0 };
	size_t nkeys = 0;

	rb_release_args(&a, b, t, lease_id, mode, tokens, ntokens, &nkeys);
	rb_ff_eval(b, b->s_release, strcmp(mode, "rollback") == 0 ? RB_OP_ROLLBACK : RB_OP_RELEASE,
		   &a, nkeys);
	rargs_clear(&a);
}

void backend_release(struct backend *b, struct lease *l, const struct lim_tokens *tokens,
		     size_t ntokens)
{
	struct rargs a[PROTO_MAX_TARGETS];
	struct rpool_call calls[PROTO_MAX_TARGETS];
	size_t i, n = 0;

	if (b->closing)
		return;
	memset(a, 0, sizeof(a));
	for (i = 0; i < l->nt; i++) {
		const struct conf_scope *cs = l->t[i].kq->sc->cs;
		struct rb_ff *ff;
		size_t nkeys = 0;
		/* Nothing to book in Redis: no round trip (issue 3). */
		if (!lim_release_books(cs, l->t[i].cls))
			continue;
		rb_release_args(&a[n], b, &l->t[i], l->id, "release", tokens, ntokens, &nkeys);
		ff = malloc(sizeof(*ff));
		if (ff == NULL || a[n].oom) {
			free(ff);
			rb_failed(b, RB_OP_RELEASE, RP_CONN, NULL);
			rargs_clear(&a[n]);
			continue;
		}
		ff->b = b;
		ff->op = RB_OP_RELEASE;
		calls[n] = (struct rpool_call){ .script = (size_t)b->s_release,
						.nkeys = nkeys,
						.argc = a[n].n,
						.argv = (const char *const *)a[n].v,
						.argvlen = a[n].len,
						.cb = rb_ff_cb,
						.arg = ff };
		n++;
	}
	/* All targets of one lease commit in one pipelined round trip. */
	if (n > 0 && rpool_eval_multi(b->pool, n, calls) != 0) {
		for (i = 0; i < n; i++)
			free(calls[i].arg);
		rb_failed(b, RB_OP_RELEASE, RP_CONN, NULL);
	}
	for (i = 0; i < n; i++)
		rargs_clear(&a[i]);
}

void backend_penalize(struct backend *b, struct kq *kq, int64_t delay_ms)
{
	struct rargs a = { 0 };

	rb_key(&a, b, kq, "s", -1);
	rargs_add(&a, "%lld", (long long)delay_ms);
	rb_ff_eval(b, b->s_penalize, RB_OP_PENALIZE, &a, 1);
	rargs_clear(&a);
}

/* ---- acquire ---- */

struct rb_acq {
	struct backend *b;
	struct waiter *w;
	eng_cb *cb;
	void *arg;
	char lease_id[LIM_LEASE_ID_LEN + 1];
	size_t pending;
	bool failed;
	struct {
		bool admitted;
		int64_t retry;
		long code;
	} r[PROTO_MAX_TARGETS];
};

static const char *rb_rule_name(const struct conf_scope *cs, long code)
{
	switch (code) {
	case RB_CODE_PENALTY: return LIM_RULE_PENALTY;
	case RB_CODE_MIN_DELAY: return LIM_RULE_MIN_DELAY;
	case RB_CODE_CLUSTER: return LIM_RULE_CLUSTER;
	case RB_CODE_QUOTA: return cs->quota_text;
	default: return code >= 0 && (size_t)code < cs->nrules ? cs->rules[code].text : "redis";
	}
}

/* Does the limit a refusal code names wait for a lease slot (as lim_check's)? */
static bool rb_slot_wait(const struct conf_scope *cs, long code)
{
	return code == RB_CODE_CLUSTER || (code >= 0 && (size_t)code < cs->nrules &&
					   cs->rules[code].meter == METER_CONCURRENCY);
}

/* All targets answered (or failed): combine, roll back partial admissions. */
static void rb_acq_done(struct rb_acq *q)
{
	struct waiter *w = q->w;
	struct eng_res res = { .admitted = true, .via = VIA_REDIS };
	size_t i;

	if (q->b->closing) {
		/* Shutting down: nobody will use an admission now, and the pool
		 * takes no more calls. What Redis booked expires by its TTLs. */
		struct eng_res gone = { .via = VIA_REDIS, .unavailable = true };
		q->cb(q->arg, &gone);
		free(q);
		return;
	}
	for (i = 0; i < w->nt && !q->failed; i++) {
		const struct conf_scope *cs = w->t[i].kq->sc->cs;
		if (q->r[i].admitted && lim_release_books(cs, w->t[i].cls))
			res.booked = true;
		eng_merge(&res, w->t[i].kq->sc, q->r[i].admitted, q->r[i].retry,
			  rb_rule_name(cs, q->r[i].code), rb_slot_wait(cs, q->r[i].code));
	}
	eng_merge_end(&res);
	if (q->failed || !res.admitted) {
		for (i = 0; i < w->nt; i++)
			if (q->r[i].admitted)
				rb_release_one(q->b, &w->t[i], q->lease_id, "rollback", NULL, 0);
	}
	if (q->failed)
		res = eng_fallback(q->b->ad, w, q->lease_id);
	q->cb(q->arg, &res);
	free(q);
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

	if (st == RP_OK && reply != NULL && reply->type == RV_ARR && reply->n == 4 &&
	    reply->a[0].type == RV_INT && reply->a[1].type == RV_INT &&
	    reply->a[2].type == RV_INT) {
		q->r[i].admitted = reply->a[0].i == 1;
		q->r[i].retry = reply->a[1].i;
		q->r[i].code = (long)reply->a[2].i;
		if (reply->a[3].type == RV_INT)
			rb_saw_time(q->b, reply->a[3].i);
		if (q->r[i].code == RB_CODE_STALE) {
			rb_failed(q->b, RB_OP_ACQUIRE, st, reply);
			q->failed = true;
		}
	} else {
		rb_failed(q->b, RB_OP_ACQUIRE, st, reply);
		q->failed = true;
	}
	free(part);
	if (--q->pending == 0)
		rb_acq_done(q);
}

bool backend_acquire(struct backend *b, struct waiter *w, const char *lease_id, eng_cb *cb,
		     void *arg)
{
	struct rargs a[PROTO_MAX_TARGETS];
	struct rpool_call calls[PROTO_MAX_TARGETS];
	struct rb_acq *q;
	bool ok = false;
	size_t i, made = 0;

	if (b->closing || !b->up || !rpool_up(b->pool))
		return false;
	q = calloc(1, sizeof(*q));
	if (q == NULL)
		return false;
	memset(a, 0, sizeof(a));
	q->b = b;
	q->w = w;
	q->cb = cb;
	q->arg = arg;
	memcpy(q->lease_id, lease_id, sizeof(q->lease_id));
	for (i = 0; i < w->nt; i++) {
		struct rb_acq_part *part = malloc(sizeof(*part));
		size_t nkeys = 0;
		rb_acquire_args(&a[i], b, &w->t[i], lease_id, &nkeys);
		if (part == NULL || a[i].oom) {
			free(part);
			goto out;
		}
		part->q = q;
		part->i = i;
		calls[i] = (struct rpool_call){ .script = (size_t)b->s_acquire,
						.nkeys = nkeys,
						.argc = a[i].n,
						.argv = (const char *const *)a[i].v,
						.argvlen = a[i].len,
						.cb = rb_acq_cb,
						.arg = part };
		made++;
	}
	q->pending = w->nt;
	ok = (w->nt == 1 ? rpool_eval(b->pool, calls[0].script, calls[0].nkeys, calls[0].argc,
				      calls[0].argv, calls[0].argvlen, calls[0].cb, calls[0].arg)
			 : rpool_eval_multi(b->pool, w->nt, calls)) == 0;
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

/* ---- health, heartbeat, divisor ---- */

static void rb_state_cb(void *arg, bool up)
{
	struct backend *b = arg;

	if (up == b->up)
		return;
	b->up = up;
	b->since_ms = clock_mono_ms();
	if (up)
		log_info("redis is up: limits are shared", "redis=\"%s\"", b->pc.url);
	else
		log_warn("redis is down: serving from the in-process fallback", "redis=\"%s\"",
			 b->pc.url);
}

static void rb_hb_reply(void *arg, enum rp_status st, const struct rval *reply)
{
	struct backend *b = arg;

	if (st == RP_OK && reply != NULL && reply->type == RV_ARR && reply->n == 2 &&
	    reply->a[0].type == RV_INT && reply->a[0].i >= 1 && reply->a[1].type == RV_INT) {
		b->pods_seen = reply->a[0].i;
		rb_saw_time(b, reply->a[1].i);
	} else if (st != RP_SHUTDOWN)
		rb_failed(b, RB_OP_HEARTBEAT, st, reply);
}

static void rb_hb_cb(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	struct backend *b = arg;
	const char *argv[4];
	size_t len[4];
	char window[32];

	if (!rpool_up(b->pool))
		return;
	snprintf(window, sizeof(window), "%d", RB_POD_WINDOW_MS);
	argv[0] = b->pods_key;
	argv[1] = b->pod_id;
	argv[2] = window;
	len[0] = strlen(argv[0]);
	len[1] = strlen(argv[1]);
	len[2] = strlen(argv[2]);
	if (rpool_eval(b->pool, (size_t)b->s_heartbeat, 1, 3, argv, len, rb_hb_reply, b) != 0)
		rb_failed(b, RB_OP_HEARTBEAT, RP_CONN, NULL);
}

double backend_divisor(const struct backend *b, const struct conf_scope *cs)
{
	if (b == NULL)
		return 1.0;
	if (cs->fallback_divisor_auto)
		return b->pods_seen > 1 ? (double)b->pods_seen : 1.0;
	return cs->fallback_divisor < 1.0 ? 1.0 : cs->fallback_divisor;
}

void backend_status(const struct backend *b, struct preply *r)
{
	size_t i;

	preply_push(r, "redis");
	preply_int(r, "pods_seen", b->pods_seen);
	preply_push(r, "errors");
	for (i = 0; i < RB_OP__COUNT; i++)
		preply_int(r, rb_op_names[i], (int64_t)b->errors[i]);
	preply_pop(r);
	preply_pop(r);
}

bool backend_up(const struct backend *b)
{
	return b->up;
}

const char *backend_state(const struct backend *b, int64_t *since_ms)
{
	*since_ms = b->since_ms;
	return b->up ? "redis" : "fallback";
}

/* The AUTH secret: the file's first line. Never logged. */
static char *rb_read_password(const char *path)
{
	FILE *f = fopen(path, "r");
	char buf[1024];
	char *nl;

	if (f == NULL) {
		log_error("cannot read redis_password_file", "path=\"%s\"", path);
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
	b->since_ms = clock_mono_ms();
	b->s_acquire = script_index("acquire");
	b->s_release = script_index("release");
	b->s_penalize = script_index("penalize");
	b->s_heartbeat = script_index("heartbeat");
	if (b->s_acquire < 0 || b->s_release < 0 || b->s_penalize < 0 || b->s_heartbeat < 0) {
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
	    (b->password = rb_read_password(ad->conf->redis_password_file)) == NULL)
		goto fail;
	b->pc.url = ad->conf->redis;
	b->pc.pool_size = (int)ad->conf->redis_pool;
	b->pc.timeout_ms = ad->conf->redis_timeout_ms;
	b->pc.user = ad->conf->redis_user;
	b->pc.password = b->password;
	b->pc.backoff_min_ms = 50;
	b->pc.backoff_max_ms = 500; /* back within 2 s of Redis returning, jitter included */
	b->pool = rpool_new(ad->base, &b->pc, script_sources, script_count, rb_state_cb, b, err,
			    sizeof(err));
	if (b->pool == NULL) {
		log_error("bad redis setting", "redis=\"%s\" err=\"%s\"", ad->conf->redis, err);
		goto fail;
	}
	b->hb_ev = event_new(ad->base, -1, EV_PERSIST, rb_hb_cb, b);
	if (b->hb_ev == NULL || event_add(b->hb_ev, &hb) != 0)
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
	if (b->pool)
		rpool_free(b->pool);
	free(b->pods_key);
	free(b->password);
	free(b);
}
