/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * backend_redis.c - the Redis backend (see backend.h): its state and the
 * calls every room makes.
 *
 * Owns: struct backend's life (backend_new, backend_free), the up/down
 * state, the pod heartbeat and the divisor it gives, the script calls
 * (rb_eval) with the Redis time that bounds a booking call (rb_not_after),
 * failures and their counters, penalize, and the operator calls (inspect,
 * reset, override). The other rooms (backend_int.h): rb_args.c builds every
 * call's KEYS and ARGV from the plan, rb_acquire.c makes the acquires and
 * reads their replies, rb_queue.c owns what must reach Redis in the end
 * (releases, reconciliations, rebooks, the write-back). It speaks to Redis
 * only through rpool.c.
 *
 * Keys: PREFIX:{SCOPE:KEY}:s (pacing hash), :q (quota instants), :l (leases
 * in flight), :rN (rule N's counter). One hash tag per (scope, key), so every
 * key one script touches is in one slot (what Redis Cluster needs of a
 * script; this pool speaks to one Redis, not to a cluster).
 *
 * An acquire is one script call per target (FCALL of the function library,
 * or EVALSHA), pipelined when there are several; single-target acquires of
 * different keys in one loop pass share a call (rb_acquire.c).
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

#include "clock.h"
#include "lease_id.h"
#include "log.h"
#include "rand.h"
#include "redis_url.h"
#include "rpool.h"
#include "scripts.h"

#include <event2/event.h>
#include <sys/queue.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_int.h"

const char *const rb_op_names[RB_OP__COUNT] = { "acquire",   "release",	  "rollback", "penalize",
						"heartbeat", "reconcile", "rebook",   "inspect",
						"reset",     "writeback", "override", "give_back" };

/* One script call on the connection of (cs, key). */
int rb_eval(struct backend *b, const struct conf_scope *cs, const char *key, int script,
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
int64_t rb_not_after(struct backend *b, int64_t *mono)
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
void rb_saw_time(struct backend *b, long long redis_ms)
{
	b->offset_ms = (int64_t)redis_ms - clock_mono_ms();
	b->offset_known = true;
}

/* ---- failures ---- */

void rb_failed(struct backend *b, enum rb_op opi, enum rp_status st, const struct rval *reply)
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
void rb_stale(struct backend *b, enum rb_op opi)
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
	if (b->was_up) /* a return: the pods' beats may have lapsed meanwhile */
		b->back_ms = b->since_ms;
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

/*
 * The leases of this pod that other daemons settled while they were live
 * (heartbeat.lua took them from this pod's list): each one this daemon
 * still holds ends here, with nothing sent (Redis settled it).
 */
static void rb_settled_elsewhere(struct backend *b, const struct rval *ids)
{
	size_t i;

	for (i = 0; i < ids->n; i++) {
		const struct rval *v = &ids->a[i];
		if (v->type == RV_STR && lease_id_nonce_ok(v->s, v->len))
			lease_settled_elsewhere(b->ad, v->s);
	}
}

/* A call that tells a pod something; its answer is not needed. */
static void rb_told(void *arg, enum rp_status st, const struct rval *reply)
{
	struct backend *b = arg;

	if (st != RP_OK && st != RP_SHUTDOWN)
		rb_failed(b, RB_OP_RELEASE, st, reply);
}

/*
 * Another daemon's live lease was settled here: tell its issuer (pod), so
 * that it stops counting the lease at its next heartbeat. Best effort: a
 * pod not told counts it until its lease_ttl, as before.
 */
void rb_tell_issuer(struct backend *b, const char *pod, const char *nonce)
{
	const char *argv[3];
	size_t len[3];
	char ttl[24], *key = NULL;

	if (b->closing || strcmp(pod, b->pod_id) == 0 || b->s_settled < 0 ||
	    asprintf(&key, "{%s}:s:%s", b->pods_key, pod) < 0)
		return;
	snprintf(ttl, sizeof(ttl), "%d", RB_POD_WINDOW_MS);
	argv[0] = key;
	argv[1] = nonce;
	argv[2] = ttl;
	len[0] = strlen(key);
	len[1] = strlen(nonce);
	len[2] = strlen(ttl);
	if (rpool_eval(b->pool, (size_t)b->s_settled, 1, 3, argv, len, rb_told, b) != 0)
		rb_failed(b, RB_OP_RELEASE, RP_CONN, NULL);
	free(key);
}

static void rb_hb_reply(void *arg, enum rp_status st, const struct rval *reply)
{
	struct backend *b = arg;

	if (st == RP_OK && reply != NULL && reply->type == RV_ARR &&
	    (reply->n == 4 || reply->n == 5) && reply->a[0].type == RV_INT && reply->a[0].i >= 1 &&
	    reply->a[1].type == RV_INT && reply->a[2].type == RV_INT &&
	    reply->a[3].type == RV_INT && reply->a[3].i >= 0 && reply->a[3].i < reply->a[0].i) {
		int64_t now = clock_mono_ms();
		b->pods_seen = reply->a[0].i;
		b->pod_rank = reply->a[3].i;
		if (!b->fb_ranked ||
		    (b->up && (b->back_ms == 0 || now - b->back_ms >= RB_POD_WINDOW_MS))) {
			b->fb_pods = b->pods_seen;
			b->fb_rank = b->pod_rank;
			b->fb_ranked = true;
		}
		if (reply->a[2].i == 0)
			b->pods_fresh_ms = now;
		b->pods_fresh = now - b->pods_fresh_ms < RB_POD_WINDOW_MS;
		if (!b->pods_fresh || b->pods_seen > b->pods_hi)
			b->pods_hi = b->pods_seen;
		rb_saw_time(b, reply->a[1].i);
		/* This pod was registered a beat ago and is not now: Redis lost
		 * its data (restarted empty, flushed, failed over) and with it
		 * the leases this daemon holds. */
		if (reply->a[2].i == 0 && b->beats > 0)
			rb_rebook_all(b, "redis lost its data");
		b->beats++;
		if (reply->n == 5 && reply->a[4].type == RV_ARR)
			rb_settled_elsewhere(b, &reply->a[4]);
	} else if (st != RP_SHUTDOWN)
		rb_failed(b, RB_OP_HEARTBEAT, st, reply);
}

static void rb_hb_cb(evutil_socket_t fd UNUSED, short what, void *arg)
{
	struct backend *b = arg;
	const char *argv[5];
	size_t len[5], i;
	char window[32], take[24];

	if (!rpool_up(b->pool)) {
		b->errors[RB_OP_HEARTBEAT]++;
		return;
	}
	snprintf(window, sizeof(window), "%d", RB_POD_WINDOW_MS);
	snprintf(take, sizeof(take), "%d", RB_SETTLED_TAKE);
	argv[0] = b->pods_key;
	argv[1] = b->settled_key;
	argv[2] = b->pod_id;
	argv[3] = window;
	argv[4] = take;
	for (i = 0; i < 5; i++)
		len[i] = strlen(argv[i]);
	if (rpool_eval(b->pool, (size_t)b->s_heartbeat, 2, 5, argv, len, rb_hb_reply, b) != 0)
		rb_failed(b, RB_OP_HEARTBEAT, RP_CONN, NULL);
	else
		b->calls[RB_OP_HEARTBEAT]++;
	if (what != 0) /* the beat's timer; rb_state_cb writes back itself */
		rb_writeback_owed(b);
}

/*
 * For a liveness window after a beat that found this pod unregistered (its
 * first, or Redis lost its data), the registry is still filling: a count
 * below the pods counted before it emptied, or below fallback_pods, misses
 * pods that take their shares too. The divisor is then that many at least,
 * with no rank (rounded down), so that the shares add up to at most the
 * limit.
 */
static struct lim_share rb_share_unsure(const struct backend *b, const struct conf_scope *cs,
					struct lim_share sh)
{
	int64_t least = b->pods_hi;

	if (b->beats == 0 || !b->pods_fresh)
		return sh;
	if (b->ad->conf->fallback_pods > least)
		least = b->ad->conf->fallback_pods;
	if (b->pods_seen >= least)
		return sh;
	if (cs->fallback_divisor_auto && sh.div < (double)least)
		sh.div = (double)least;
	if (sh.div > 1.0) {
		sh.rank = -1;
		sh.pods = 0;
	}
	return sh;
}

struct lim_share backend_share(const struct backend *b, const struct conf_scope *cs)
{
	struct lim_share sh = LIM_WHOLE;
	bool ranked;
	int64_t pods;

	if (b == NULL)
		return sh;
	ranked = b->up ? b->beats > 0 : b->fb_ranked;
	pods = b->up ? b->pods_seen : b->fb_pods;
	if (ranked) { /* ranked by the last heartbeat, whatever the divisor */
		sh.rank = b->up ? b->pod_rank : b->fb_rank;
		sh.pods = pods;
	}
	if (!b->up)
		sh.out_since = b->since_ms > 0 ? b->since_ms : 1;
	if (cs->fallback_divisor_auto && !ranked) /* the fleet not seen yet */
		sh.div = (double)b->ad->conf->fallback_pods;
	else if (cs->fallback_divisor_auto)
		sh.div = pods > 1 ? (double)pods : 1.0;
	else
		sh.div = cs->fallback_divisor < 1.0 ? 1.0 : cs->fallback_divisor;
	return rb_share_unsure(b, cs, sh);
}

int64_t backend_turn_delay(const struct backend *b, int64_t turn_mono, int64_t window_ms)
{
	int64_t n, slot, turn;

	if (b == NULL || !b->up || b->beats == 0 || b->pods_seen <= 1 || !b->offset_known ||
	    window_ms <= 0)
		return 0;
	n = b->pods_seen;
	slot = window_ms / (4 * n);
	if (slot > RB_TURN_SLOT_MS)
		slot = RB_TURN_SLOT_MS;
	/* The turn's index on Redis TIME, the same on every pod: a turn's
	 * instant is a window's end, and a pod's estimate of it is off by a
	 * round trip at most, far less than half a window. */
	turn = (turn_mono + b->offset_ms + window_ms / 2) / window_ms;
	if (slot <= 0 || turn < 0)
		return 0;
	return (turn + b->pod_rank) % n * slot;
}

uint32_t backend_born_down(const struct backend *b, int64_t *born_ms)
{
	if (b == NULL || b->was_up)
		return 0;
	*born_ms = b->born_ms;
	return b->gen;
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
	preply_push(r, "ahead"); /* units booked ahead (rb_ahead.c) */
	preply_int(r, "booked", (int64_t)b->ahead_booked);
	preply_int(r, "taken", (int64_t)b->ahead_taken);
	preply_int(r, "given_back", (int64_t)b->ahead_returned);
	preply_int(r, "dropped", (int64_t)b->ahead_dropped);
	preply_pop(r);
	preply_push(r, "calls");
	for (i = 0; i < RB_OP__COUNT; i++)
		preply_int(r, rb_op_names[i], (int64_t)b->calls[i]);
	preply_pop(r);
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
	static uint32_t gens; /* backends made: their generations */

	if (b == NULL)
		return NULL;
	b->ad = ad;
	b->pods_seen = 1;
	TAILQ_INIT(&b->queue);
	TAILQ_INIT(&b->owing);
	TAILQ_INIT(&b->sending);
	b->since_ms = b->born_ms = clock_mono_ms();
	b->gen = ++gens != 0 ? gens : ++gens;
	b->s_acquire = script_index("acquire");
	b->s_release = script_index("release");
	b->s_penalize = script_index("penalize");
	b->s_heartbeat = script_index("heartbeat");
	b->s_reset = script_index("reset");
	b->s_inspect = script_index("inspect");
	b->s_override = script_index("override");
	b->s_writeback = script_index("writeback");
	b->s_settled = script_index("settled");
	if (b->s_acquire < 0 || b->s_release < 0 || b->s_penalize < 0 || b->s_heartbeat < 0 ||
	    b->s_reset < 0 || b->s_inspect < 0 || b->s_override < 0 || b->s_settled < 0) {
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
	/* In the pods zset's slot (the prefix has no braces): one heartbeat
	 * call reads both, in a Cluster too. */
	if (asprintf(&b->settled_key, "{%s}:s:%s", b->pods_key, b->pod_id) < 0) {
		b->settled_key = NULL;
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
	if (!rb_queue_init(b) || !rb_xb_init(b) || !rb_ahead_init(b))
		goto fail;
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
	rb_xb_free(b); /* queued acquires first: answered by rb_acq_done's closing branch */
	if (b->pool)
		rpool_free(b->pool);
	rb_ahead_free_all(b); /* the units this daemon held: Redis gets them back as it refills */
	rb_queue_free(b);
	free(b->pods_key);
	free(b->settled_key);
	free(b->password);
	free(b->sentinel_password);
	free(b);
}
