/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * ops.c - the protocol's operations: a request in, a reply (or a waiter) out.
 *
 * Owns: the op table and its handlers. Types and ranges were checked by the
 * codec; here requests meet the conf (unknown scope, class, missing key) and
 * become waiters (waitq.c), lease releases (lease.c) or penalties
 * (engine.c). Every request gets exactly one reply, now or when its waiter
 * ends.
 */

#include "admitd.h"

#include "adaptive_rt.h"
#include "backend.h"
#include "clock.h"
#include "engine.h"
#include "log.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct op_entry {
	void (*handler)(struct conn *c, struct request *rq);
};

static void ops_error(struct conn *c, const struct request *rq, enum admit_err e, const char *msg)
{
	conn_send_reply(c, preply_error(rq->id, e, msg));
}

/*
 * The first of tk[0..ntk) that no token rule of the targets (cs[i], cls[i])
 * meters, or NULL: a name nothing counts (a typo, "ouput") would be
 * accepted and never charged, so it is refused.
 */
static const char *ops_meter_unknown(const struct conf_scope *const *cs,
				     const struct conf_class *const *cls, size_t n,
				     const struct proto_token *tk, size_t ntk)
{
	size_t i, j;

	for (j = 0; j < ntk; j++) {
		for (i = 0; i < n && !lim_meters_tokens(cs[i], cls[i], tk[j].name); i++)
			;
		if (i == n)
			return tk[j].name;
	}
	return NULL;
}

static void ops_meter_error(struct conn *c, const struct request *rq, const char *field,
			    const char *name)
{
	char msg[256];

	snprintf(msg, sizeof(msg),
		 "%s: no token rule of the named scopes meters \"%s\" (nothing would be charged)",
		 field, name);
	ops_error(c, rq, ADMIT_E_BAD_REQUEST, msg);
}

/*
 * Why an acquire of (cs, cls) cannot go without a lease ("lease": false),
 * or NULL when it can: its release would book something or teach the
 * adaptive amount, or a cap counts the leases held, which a lease given
 * back at once would not hold.
 */
static const char *ops_needs_lease(const struct conf_scope *cs, const struct conf_class *cls)
{
	const struct conf_plan *pl = conf_plan_of(cs, cls);

	if (cs->max_concurrent > 0)
		return "caps the leases held (max_concurrent)";
	if (pl->serialized)
		return "paces from each release (min_delay without cluster_concurrency)";
	if (pl->tracks_leases)
		return "counts the leases in flight (cluster_concurrency or a concurrency rule)";
	if (pl->release_books)
		return "meters tokens, which a release reports";
	if (cs->adaptive)
		return "learns its amount from each release's outcome (adaptive)";
	return NULL;
}

/*
 * Resolve a request's targets against the conf. false (after replying)
 * when a scope, key or class is wrong, a reservation names a meter none of
 * them counts, an acquire without a lease names a scope that needs one, or
 * memory runs out.
 */
static bool ops_targets(struct conn *c, struct request *rq, struct target_rt *out)
{
	char msg[256];
	const char *why;
	size_t i, j, npinned = 0;
	bool full = false;

	for (i = 0; i < rq->ntargets; i++) {
		struct proto_target *pt = &rq->targets[i];
		struct scope_rt *sc = scope_find(c->ad, pt->scope);
		const char *key = pt->key, *cname = NULL;

		if (sc == NULL) {
			snprintf(msg, sizeof(msg), "no scope \"%s\" in the conf", pt->scope);
			ops_error(c, rq, ADMIT_E_UNKNOWN_SCOPE, msg);
			goto fail;
		}
		if (!pt->has_key) {
			if (sc->cs->default_key == NULL) {
				snprintf(msg, sizeof(msg),
					 "scope \"%s\" has no default key: give \"key\" or \"url\"",
					 pt->scope);
				ops_error(c, rq, ADMIT_E_BAD_REQUEST, msg);
				goto fail;
			}
			key = sc->cs->default_key;
		}
		out[i].cls = NULL;
		cname = pt->has_cls ? pt->cls : sc->cs->default_class;
		if (cname != NULL) {
			out[i].cls = conf_class_find(sc->cs, cname);
			if (out[i].cls == NULL) {
				snprintf(msg, sizeof(msg), "scope \"%s\" has no class \"%s\"",
					 pt->scope, cname);
				ops_error(c, rq, ADMIT_E_BAD_REQUEST, msg);
				goto fail;
			}
		}
		if (rq->no_lease && (why = ops_needs_lease(sc->cs, out[i].cls)) != NULL) {
			snprintf(msg, sizeof(msg),
				 "scope \"%s\" %s: its acquires need a lease (\"lease\": false is "
				 "for scopes whose release books nothing)",
				 pt->scope, why);
			ops_error(c, rq, ADMIT_E_BAD_REQUEST, msg);
			goto fail;
		}
		out[i].cost = pt->cost;
		out[i].kq = kq_get(sc, key, &full);
		if (out[i].kq == NULL) {
			if (full)
				snprintf(msg, sizeof(msg),
					 "max_keys (%lld) reached and every key kept is held, "
					 "waited on or under an override: a new key is refused "
					 "until one is released or an override ends",
					 (long long)c->ad->conf->max_keys);
			ops_error(c, rq, ADMIT_E_UNAVAILABLE, full ? msg : "out of memory");
			goto fail;
		}
		for (j = 0; j < i; j++) {
			/* Booked twice in process, refused by itself in Redis: say so. */
			if (out[j].kq == out[i].kq) {
				snprintf(msg, sizeof(msg),
					 "scope \"%s\" key \"%.200s\" is named twice", pt->scope,
					 out[i].kq->key);
				ops_error(c, rq, ADMIT_E_BAD_REQUEST, msg);
				goto fail;
			}
		}
		/* The next target's kq_get must not evict this one. */
		if (i + 1 < rq->ntargets) {
			kq_ref(out[i].kq);
			npinned++;
		}
	}
	if (rq->nreserve > 0) {
		const struct conf_scope *cs[PROTO_MAX_TARGETS];
		const struct conf_class *cl[PROTO_MAX_TARGETS];
		const char *bad;
		for (i = 0; i < rq->ntargets; i++) {
			cs[i] = out[i].kq->sc->cs;
			cl[i] = out[i].cls;
		}
		bad = ops_meter_unknown(cs, cl, rq->ntargets, rq->reserve, rq->nreserve);
		if (bad != NULL) {
			ops_meter_error(c, rq, "reserve", bad);
			goto fail;
		}
	}
	for (j = 0; j < npinned; j++)
		kq_unref(out[j].kq);
	return true;
fail:
	for (j = 0; j < npinned; j++)
		kq_unref(out[j].kq);
	return false;
}

static void op_acquire(struct conn *c, struct request *rq)
{
	char msg[256];
	const struct conf_scope *cs;
	struct meter_tokens rs[PROTO_MAX_TOKENS];
	struct waiter *w;
	int64_t timeout;
	size_t i;

	if (c->ad->shutting_down) {
		ops_error(c, rq, ADMIT_E_SHUTTING_DOWN, NULL);
		return;
	}
	/* Refused before it makes a key or a waiter: a flood of acquires past
	 * max_leases costs nothing kept (waitq_pump checks again for waiters). */
	if (lease_full(c->ad, msg, sizeof(msg))) {
		struct scope_rt *sc = scope_find(c->ad, rq->targets[0].scope);
		if (sc != NULL) {
			sc->refused++;
			sc->outcome[ADMIT_E_UNAVAILABLE]++;
		}
		ops_error(c, rq, ADMIT_E_UNAVAILABLE, msg);
		return;
	}
	w = calloc(1, sizeof(*w));
	if (w == NULL) {
		ops_error(c, rq, ADMIT_E_UNAVAILABLE, "out of memory");
		return;
	}
	if (!ops_targets(c, rq, w->t)) {
		free(w);
		return;
	}
	w->nt = rq->ntargets;
	cs = w->t[0].kq->sc->cs;
	timeout = rq->has_timeout ? rq->timeout_ms : cs->timeout_ms;
	w->conn = c;
	w->id = rq->id; /* the waiter owns the id from here */
	rq->id = NULL;
	w->detach = rq->detach;
	w->no_lease = rq->no_lease;
	for (i = 0; i < rq->nreserve; i++) {
		rs[i].name = rq->reserve[i].name;
		rs[i].n = rq->reserve[i].n;
	}
	w->reserve = meter_tokens_dup(rs, rq->nreserve, &w->nreserve);
	if (w->nreserve != rq->nreserve) {
		rq->id = w->id; /* the error reply carries it */
		free(w);
		ops_error(c, rq, ADMIT_E_UNAVAILABLE, "out of memory");
		return;
	}
	w->try_only = timeout == 0;
	w->start_ms = clock_mono_ms();
	w->deadline_ms = w->start_ms + timeout;
	waitq_add(w);
}

void ops_conn_closed(struct conn *c)
{
	while (!TAILQ_EMPTY(&c->pends)) {
		struct op_pend *p = TAILQ_FIRST(&c->pends);
		TAILQ_REMOVE(&c->pends, p, conn_link);
		p->conn = NULL;
	}
}

/* A reply owed once the backend answers; NULL (after replying) on OOM. */
static struct op_pend *ops_pend(struct conn *c, struct request *rq)
{
	struct op_pend *p = calloc(1, sizeof(*p));

	if (p == NULL) {
		ops_error(c, rq, ADMIT_E_UNAVAILABLE, "out of memory");
		return NULL;
	}
	p->conn = c;
	p->id = rq->id; /* owned from here */
	rq->id = NULL;
	TAILQ_INSERT_TAIL(&c->pends, p, conn_link);
	return p;
}

/* The pend's reply is sent (or its client left): unlink and free it. */
static void ops_pend_done(struct op_pend *p, struct preply *r)
{
	if (p->conn != NULL) {
		TAILQ_REMOVE(&p->conn->pends, p, conn_link);
		conn_send_reply(p->conn, r);
		conn_waiter_done(p->conn);
	} else {
		preply_free(r);
	}
	if (p->kq != NULL)
		kq_unref(p->kq);
	free(p->id);
	free(p);
}

/* A release that changed nothing: say why, as a repeat answers. */
static void ops_release_nothing(struct preply *r, bool repeat, bool mismatch)
{
	preply_bool(r, "held", false);
	preply_bool(r, "settled", false);
	if (repeat)
		preply_bool(r, "repeat", true);
	preply_str(r, "message",
		   repeat ? "already released: nothing changed"
		   : mismatch
		       ? "this handle is not the one issued (a target's scope, class or key, "
			 "or the reservation, differs from the lease's record): nothing "
			 "changed"
		       : "no lease to settle under this handle (already released, expired a "
			 "lease_ttl ago, or never issued): nothing changed");
}

/* The answer to a release of a lease this daemon did not issue. */
static void op_release_ref_done(void *arg, const struct eng_settled *st)
{
	struct op_pend *p = arg;
	struct preply *r;

	if (st->unavailable || st->unknown) {
		r = preply_error(p->id, ADMIT_E_UNAVAILABLE,
				 st->unknown
				     ? "redis took the release but its answer was lost: "
				       "release again (a repeat changes nothing)"
				     : "redis cannot be asked now, and only it can vouch for "
				       "a lease another admitd issued: release again later");
	} else {
		r = preply_new(p->id, true);
		if (st->settled)
			preply_bool(r, "held", st->held);
		else
			ops_release_nothing(r, st->repeat, st->mismatch);
	}
	ops_pend_done(p, r);
}

/* Count a release once in each scope its targets name (NULL: not in the conf). */
static void ops_count_release(struct scope_rt *const *scs, size_t n)
{
	size_t i, j;

	for (i = 0; i < n; i++) {
		for (j = 0; j < i && scs[j] != scs[i]; j++)
			;
		if (scs[i] != NULL && j == i)
			scs[i]->releases++;
	}
}

/*
 * release: the handle is resolved (lease.c): a lease this daemon issued is
 * settled from its own record, at once; a handle of another daemon's lease
 * (or of this one's before a restart) is settled through Redis, which
 * alone can vouch for it (engine.c); anything else changes nothing. Token
 * names no target meters are refused before anything is settled.
 */
static void op_release(struct conn *c, struct request *rq)
{
	const struct conf_scope *cs[PROTO_MAX_TARGETS];
	const struct conf_class *cl[PROTO_MAX_TARGETS];
	struct scope_rt *scs[PROTO_MAX_TARGETS];
	struct meter_tokens tk[PROTO_MAX_TOKENS];
	struct lease_ref *ref = malloc(sizeof(*ref));
	struct op_pend *p;
	struct preply *r;
	struct lease *l;
	const char *bad;
	bool foreign;
	size_t i, n = 0;

	if (ref == NULL) {
		ops_error(c, rq, ADMIT_E_UNAVAILABLE, "out of memory");
		return;
	}
	l = lease_resolve(c->ad, rq->lease, ref, &foreign);
	if (l != NULL) {
		for (i = 0; i < l->nt; i++) {
			scs[i] = l->t[i].kq->sc;
			cs[n] = scs[i]->cs;
			cl[n++] = l->t[i].cls;
		}
	} else if (foreign) {
		for (i = 0; i < ref->nt; i++) {
			scs[i] = scope_find(c->ad, ref->t[i].scope);
			if (scs[i] == NULL)
				continue;
			cs[n] = scs[i]->cs;
			cl[n] = ref->t[i].cls[0] ? conf_class_find(cs[n], ref->t[i].cls) : NULL;
			n++;
		}
	}
	if ((l != NULL || foreign) &&
	    (bad = ops_meter_unknown(cs, cl, n, rq->tokens, rq->ntokens)) != NULL) {
		free(ref);
		ops_meter_error(c, rq, "tokens", bad);
		return;
	}
	if (l != NULL || !foreign) {
		free(ref);
		r = preply_new(rq->id, true);
		if (l != NULL) {
			bool held = !l->expired;
			ops_count_release(scs, l->nt);
			l->outcome = rq->outcome;
			lease_release(l, rq->tokens, rq->ntokens);
			preply_bool(r, "held", held);
		} else {
			ops_release_nothing(r, false, false);
		}
		conn_send_reply(c, r);
		return;
	}
	ops_count_release(scs, ref->nt);
	if ((p = ops_pend(c, rq)) == NULL) {
		free(ref);
		return;
	}
	for (i = 0; i < rq->ntokens; i++) {
		tk[i].name = rq->tokens[i].name;
		tk[i].n = rq->tokens[i].n;
	}
	eng_release_ref(c->ad, ref, tk, rq->ntokens, op_release_ref_done, p);
	free(ref);
}

static void op_penalize(struct conn *c, struct request *rq)
{
	struct target_rt t[PROTO_MAX_TARGETS];
	int64_t delay = rq->penalty_ms;
	struct preply *r;
	size_t i;

	if (!ops_targets(c, rq, t))
		return;
	for (i = 0; i < rq->ntargets; i++) {
		size_t j;
		for (j = 0; j < i && t[j].kq->sc != t[i].kq->sc; j++)
			;
		if (j == i)
			t[i].kq->sc->penalties++;
	}
	if (delay < 0) /* an HTTP-date: as bounded as the other forms */
		delay = rq->penalty_until_wall_ms - clock_wall_ms();
	if (delay > PROTO_MAX_TIMEOUT_MS)
		delay = PROTO_MAX_TIMEOUT_MS;
	for (i = 0; i < rq->ntargets; i++) /* a penalty of nothing still says "limited" */
		if (delay > 0 || t[i].kq->sc->cs->adaptive)
			eng_penalize(t[i].kq, delay > 0 ? delay : 0);
	r = preply_new(rq->id, true);
	preply_int(r, "penalty_ms", delay > 0 ? delay : 0);
	conn_send_reply(c, r);
}

static void op_status(struct conn *c, struct request *rq)
{
	struct admitd *ad = c->ad;
	struct preply *r = preply_new(rq->id, true);
	int64_t now = clock_mono_ms(), since = ad->start_ms;
	const char *state = "local";
	size_t i, j;
	int e;

	if (ad->redis != NULL)
		state = backend_state(ad->redis, &since);
	preply_str(r, "version", ADMITD_VERSION);
	preply_int(r, "protocol", ADMIT_PROTO_VERSION);
	preply_int(r, "uptime_s", (now - ad->start_ms) / 1000);
	preply_int(r, "uptime_ms", now - ad->start_ms);
	preply_str(r, "backend", state);
	preply_int(r, "backend_since_s", (now - since) / 1000);
	preply_int(r, "connections", (int64_t)ad->nconns);
	preply_push(r, "reloads");
	preply_int(r, "ok", (int64_t)ad->reloads_ok);
	preply_int(r, "error", (int64_t)ad->reloads_error);
	preply_pop(r);
	preply_int(r, "keys", (int64_t)ad->nkeys);
	preply_int(r, "max_keys", ad->conf->max_keys);
	preply_int(r, "key_evictions", (int64_t)ad->key_evictions);
	preply_int(r, "leases", (int64_t)ad->nleases);
	preply_int(r, "max_leases", ad->conf->max_leases);
	if (ad->redis != NULL)
		backend_status(ad->redis, r);
	preply_list(r, "wait_bounds_ms");
	for (i = 0; i < METRICS_WAIT_NBOUNDS; i++)
		preply_int(r, NULL, metrics_wait_bounds_ms[i]);
	preply_pop(r);
	preply_push(r, "scopes");
	for (i = 0; i < ad->nscopes; i++) {
		struct scope_rt *sc = &ad->scopes[i];
		preply_push(r, sc->cs->name);
		preply_int(r, "leases", sc->leases);
		preply_int(r, "waiting", sc->waiting);
		preply_int(r, "keys", (int64_t)htab_count(sc->keys));
		preply_int(r, "admitted", (int64_t)sc->admitted);
		preply_int(r, "refused", (int64_t)sc->refused);
		preply_int(r, "timeouts", (int64_t)sc->timeouts);
		preply_int(r, "shadow_limited", (int64_t)sc->shadow_limited);
		preply_int(r, "fallback_admitted", (int64_t)sc->fallbacks);
		preply_int(r, "canceled", (int64_t)sc->canceled);
		preply_int(r, "wait_ms_total", (int64_t)sc->wait_ms_total);
		preply_int(r, "expired", (int64_t)sc->expired);
		preply_int(r, "releases", (int64_t)sc->releases);
		preply_int(r, "penalties", (int64_t)sc->penalties);
		preply_int(r, "refused_known", (int64_t)sc->refused_known);
		preply_int(r, "admitted_ahead", (int64_t)sc->admitted_ahead);
		preply_list(r, "wait_buckets");
		for (j = 0; j < METRICS_WAIT_NBUCKETS; j++)
			preply_int(r, NULL, (int64_t)sc->wait_hist[j]);
		preply_pop(r);
		preply_push(r, "refusals");
		for (e = ADMIT_E_BAD_REQUEST; e < ADMIT_E__COUNT; e++)
			if (sc->outcome[e] > 0)
				preply_int(r, admit_err_str(e), (int64_t)sc->outcome[e]);
		preply_pop(r);
		adrt_status(r, sc);
		preply_pop(r);
	}
	preply_pop(r);
	conn_send_reply(c, r);
}

/* The "override" object of an inspect reply: what is in force, and for how long. */
static void ops_inspect_override(struct preply *r, const struct conf_scope *cs,
				 const struct lim_ovr *ov, int64_t now, struct lim_share sh)
{
	char idx[24];
	size_t i;

	preply_push(r, "override");
	preply_int(r, "ttl_ms", ov->until - now);
	if (ov->min_delay_ms >= 0 && cs->min_delay_ms > 0)
		preply_int(r, "min_delay_ms", lim_min_delay(cs, sh));
	for (i = 0; i < cs->nrules && i < ov->nrules && ov->amount[i] <= 0; i++)
		;
	if (i == cs->nrules || i == ov->nrules) { /* it sets no rule amount */
		preply_pop(r);
		return;
	}
	preply_push(r, "rules");
	for (; i < cs->nrules && i < ov->nrules; i++) {
		if (ov->amount[i] <= 0)
			continue;
		snprintf(idx, sizeof(idx), "%zu", i);
		preply_int(
		    r, cs->rules[i].name ? cs->rules[i].name : idx,
		    lim_ovr_amount(cs->rules[i].sp.amount, ov->amount[i], cs->override_milli));
	}
	preply_pop(r);
	preply_pop(r);
}

static void op_inspect_done(void *arg, const struct eng_insp *in)
{
	struct op_pend *p = arg;
	const struct conf_scope *cs = p->kq->sc->cs;
	struct preply *r = preply_new(p->id, true);
	struct lim_share div = adrt_inspect_share(
	    cs, in, in->via == VIA_FALLBACK ? eng_key_share(p->kq->sc->ad, p->kq) : LIM_WHOLE);
	const struct conf_plan *pl = conf_plan_of(cs, p->cls);
	size_t k;

	preply_str(r, "backend", via_name(in->via));
	preply_str(r, "scope", cs->name);
	preply_str(r, "key", p->kq->key);
	preply_int(r, "penalty_ms", in->penalty_until > in->now ? in->penalty_until - in->now : 0);
	preply_int(r, "next_in_ms", in->next_at > in->now ? in->next_at - in->now : 0);
	/* A lease set exists only where a limit counts leases (cluster-wide in
	 * Redis); otherwise the count is this daemon's (max_concurrent). */
	preply_int(r, "leases", lim_tracks_leases(cs) ? in->leases : p->kq->held);
	preply_int(r, "held_here", p->kq->held);
	if (cs->quota > 0) {
		int64_t limit = cs->quota, frees = 0;
		if (in->via == VIA_FALLBACK)
			limit = lim_which_limit(cs, p->cls, PLAN_WHICH_QUOTA, div);
		if (in->quota_used >= limit && in->quota_oldest > 0)
			frees = in->quota_oldest + cs->quota_window_ms - in->now;
		preply_push(r, "quota");
		preply_int(r, "used", in->quota_used);
		preply_int(r, "limit", limit);
		preply_int(r, "frees_in_ms", frees > 0 ? frees : 0);
		preply_pop(r);
	}
	adrt_inspect(r, cs, in);
	if (in->ov != NULL && in->ov->until > in->now && cs->override_milli > 0) {
		div.ov = in->ov;
		div.ov_milli = cs->override_milli;
		ops_inspect_override(r, cs, in->ov, in->now, div);
	}
	preply_list(r, "rules");
	for (k = 0; k < pl->nrules; k++) {
		size_t i = pl->rules[k];
		const struct conf_rule *rule = &cs->rules[i];
		struct strat_params sp = lim_rule_params(rule, div);
		static const struct strat_state fresh;
		const struct strat_state *st = in->rules ? &in->rules[i] : &fresh;
		int64_t cap = lim_which_limit(cs, p->cls, (long)i, div);
		struct strat_result full;
		preply_item(r);
		preply_str(r, "rule", rule->text);
		preply_int(r, "capacity", cap);
		if (rule->meter == METER_CONCURRENCY) {
			preply_int(r, "remaining", cap > in->leases ? cap - in->leases : 0);
		} else {
			int64_t floor = conf_class_floor(p->cls, &sp);
			full = strat_check(st, &sp, in->now, cap, floor);
			preply_int(r, "remaining", lim_units_left(st, &sp, in->now, cap, floor));
			preply_int(r, "full_in_ms", full.allowed ? 0 : full.retry_after_ms);
		}
		preply_pop(r);
	}
	preply_pop(r);
	ops_pend_done(p, r);
}

/* reset and inspect name one key: resolve it, hold it while the backend answers. */
static struct op_pend *ops_key_pend(struct conn *c, struct request *rq)
{
	struct target_rt t[PROTO_MAX_TARGETS];
	struct op_pend *p;

	if (!ops_targets(c, rq, t))
		return NULL;
	if ((p = ops_pend(c, rq)) == NULL)
		return NULL;
	p->kq = t[0].kq;
	p->cls = t[0].cls;
	kq_ref(p->kq);
	return p;
}

static void op_inspect(struct conn *c, struct request *rq)
{
	struct op_pend *p = ops_key_pend(c, rq);

	if (p != NULL)
		eng_inspect(p->kq, p->cls, op_inspect_done, p);
}

static void op_reset_done(void *arg, enum via via, bool ok)
{
	struct op_pend *p = arg;
	struct preply *r;

	if (!ok) {
		r = preply_error(p->id, ADMIT_E_UNAVAILABLE,
				 "reset here only: Redis could not be told, other daemons keep "
				 "the key's penalty and pacing");
		preply_str(r, "backend", via_name(via));
	} else {
		r = preply_new(p->id, true);
		preply_str(r, "backend", via_name(via));
	}
	ops_pend_done(p, r);
}

static void op_reset(struct conn *c, struct request *rq)
{
	struct op_pend *p = ops_key_pend(c, rq);

	if (p != NULL) {
		log_info("key reset", "scope=%s key=\"%s\"", p->kq->sc->cs->name, p->kq->key);
		eng_reset(p->kq, op_reset_done, p);
	}
}

/*
 * The conf rule an override names: by name, or by its index in the scope
 * (decimal); -1 when there is none.
 */
static long ops_rule_named(const struct conf_scope *cs, const char *name)
{
	char *end;
	unsigned long i;

	for (i = 0; i < cs->nrules; i++)
		if (cs->rules[i].name != NULL && strcmp(cs->rules[i].name, name) == 0)
			return (long)i;
	if (name[0] < '0' || name[0] > '9')
		return -1;
	i = strtoul(name, &end, 10);
	return *end == '\0' && i < cs->nrules ? (long)i : -1;
}

/*
 * What an override asks, checked against the scope: amount[] by conf rule
 * index. Tightening is always allowed, loosening up to override_max.
 * false with the reason in msg.
 */
static bool ops_override_check(const struct conf_scope *cs, const struct request *rq,
			       int64_t *amount, char *msg, size_t len)
{
	size_t i;

	if (cs->override_milli <= 0) {
		snprintf(msg, len,
			 "[scope %s] takes no overrides (override_max in its conf section allows "
			 "them)",
			 cs->name);
		return false;
	}
	if (rq->ov_min_delay_ms >= 0) {
		int64_t fl = lim_ovr_delay_floor(cs->min_delay_ms, cs->override_milli);
		if (cs->min_delay_ms == 0) {
			snprintf(msg, len, "min_delay_ms: [scope %s] has no min_delay to override",
				 cs->name);
			return false;
		}
		if (rq->ov_min_delay_ms < fl) {
			snprintf(msg, len,
				 "min_delay_ms: %lld loosens past override_max (%g): at least %lld",
				 (long long)rq->ov_min_delay_ms, cs->override_max, (long long)fl);
			return false;
		}
	}
	for (i = 0; i < rq->nov; i++) {
		long k = ops_rule_named(cs, rq->ov_rules[i].name);
		int64_t cap;
		if (k < 0) {
			snprintf(msg, len,
				 "rules: no rule \"%s\" in [scope %s] (a rule's name, or its index "
				 "0..%zu)",
				 rq->ov_rules[i].name, cs->name, cs->nrules ? cs->nrules - 1 : 0);
			return false;
		}
		cap = lim_ovr_cap(cs->rules[k].sp.amount, cs->override_milli);
		if (rq->ov_rules[i].n > cap) {
			snprintf(msg, len,
				 "rules: %s: %lld loosens past override_max (%g): at most %lld",
				 rq->ov_rules[i].name, (long long)rq->ov_rules[i].n,
				 cs->override_max, (long long)cap);
			return false;
		}
		amount[k] = rq->ov_rules[i].n;
	}
	return true;
}

static void op_override_done(void *arg, enum via via, bool ok)
{
	struct op_pend *p = arg;
	struct preply *r;

	if (!ok) {
		r = preply_error(p->id, ADMIT_E_UNAVAILABLE,
				 "override here only: Redis could not be told, other daemons keep "
				 "the key's limits");
	} else {
		r = preply_new(p->id, true);
		preply_int(r, "ttl_ms", p->ttl_ms);
	}
	preply_str(r, "backend", via_name(via));
	ops_pend_done(p, r);
}

/*
 * override: the key's own min_delay and rule amounts for ttl_ms, for every
 * daemon on the Redis (replacing any override it had).
 */
static void op_override(struct conn *c, struct request *rq)
{
	struct op_pend *p = ops_key_pend(c, rq);
	const struct conf_scope *cs;
	int64_t *amount;
	char msg[256];

	if (p == NULL)
		return;
	cs = p->kq->sc->cs;
	if ((amount = calloc(cs->nrules + 1, sizeof(*amount))) == NULL) {
		ops_pend_done(p, preply_error(p->id, ADMIT_E_UNAVAILABLE, "out of memory"));
		return;
	}
	if (!ops_override_check(cs, rq, amount, msg, sizeof(msg))) {
		ops_pend_done(p, preply_error(p->id, ADMIT_E_BAD_REQUEST, msg));
		goto out;
	}
	p->ttl_ms = rq->ov_ttl_ms;
	log_info("key override", "scope=%s key=\"%s\" ttl_ms=%lld min_delay_ms=%lld rules=%zu",
		 cs->name, p->kq->key, (long long)rq->ov_ttl_ms, (long long)rq->ov_min_delay_ms,
		 rq->nov);
	eng_override(p->kq, rq->ov_ttl_ms, rq->ov_min_delay_ms, amount, op_override_done, p);
out:
	free(amount);
}

/* Is the raw JSON id a the same value as the compact JSON b? */
static bool ops_same_id(const char *a, const char *b)
{
	json_t *x, *y;
	bool eq;

	if (strcmp(a, b) == 0)
		return true;
	x = json_loads(a, JSON_DECODE_ANY, NULL);
	y = json_loads(b, JSON_DECODE_ANY, NULL);
	eq = x != NULL && y != NULL && json_equal(x, y);
	json_decref(x);
	json_decref(y);
	return eq;
}

/*
 * cancel: the waiting acquire of this connection whose id is "of" is
 * answered `canceled` (it spends nothing), then the cancel says whether it
 * found one. Only this connection's waiters can be named: an id is the
 * client's own, not a handle on anyone else's wait.
 */
static void op_cancel(struct conn *c, struct request *rq)
{
	struct waiter *w, *found = NULL;
	struct preply *r;

	for (w = TAILQ_FIRST(&c->waiters); w != NULL && found == NULL; w = TAILQ_NEXT(w, conn_link))
		if (w->id != NULL && ops_same_id(w->id, rq->of))
			found = w;
	if (found != NULL) {
		log_debug("acquire canceled", "scope=%s key=\"%s\"", found->t[0].kq->sc->cs->name,
			  found->t[0].kq->key);
		waitq_cancel_asked(found);
	}
	r = preply_new(rq->id, true);
	preply_bool(r, "found", found != NULL);
	conn_send_reply(c, r);
}

static void op_ping(struct conn *c, struct request *rq)
{
	conn_send_reply(c, preply_new(rq->id, true));
}

/* Indexed by the op the codec decoded (proto.c owns the names). */
static const struct op_entry op_table[OP__COUNT] = {
	[OP_ACQUIRE] = { op_acquire },	 [OP_RELEASE] = { op_release },
	[OP_PENALIZE] = { op_penalize }, [OP_STATUS] = { op_status },
	[OP_PING] = { op_ping },	 [OP_RESET] = { op_reset },
	[OP_INSPECT] = { op_inspect },	 [OP_CANCEL] = { op_cancel },
	[OP_OVERRIDE] = { op_override },
};

void ops_dispatch(struct conn *c, const char *line, size_t len)
{
	struct request rq;
	char msg[256];
	enum admit_err e = proto_decode(line, len, &rq, msg, sizeof(msg));

	if (e != ADMIT_OK)
		ops_error(c, &rq, e, msg);
	else
		op_table[rq.op].handler(c, &rq);
	proto_request_clear(&rq);
}
