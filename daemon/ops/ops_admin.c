/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * ops_admin.c - the ops that look at or set the limits: status, inspect,
 * reset, override.
 *
 * Owns: op_status (the daemon, its backend and its scopes), op_inspect (one
 * key's state, local or from the backend), op_reset (one key's state
 * forgotten) and op_override (one key's limits changed for a while, checked
 * against the scope's rules). inspect, reset and override hold their key
 * while the backend answers (ops_key_pend).
 */

#include "ops_int.h"

#include "adaptive_rt.h"
#include "backend.h"
#include "clock.h"
#include "engine.h"
#include "class_wait.h"
#include "log.h"
#include "tenant_ovr.h"
#include "waitq_show.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void op_status(struct client *c, struct request *rq)
{
	struct rt *ad = c->ad;
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
	preply_push(r, "socket");
	preply_int(r, "replies", (int64_t)ad->conn_replies);
	preply_int(r, "writes", (int64_t)ad->conn_writes);
	preply_int(r, "write_waits", (int64_t)ad->conn_write_waits);
	preply_pop(r);
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
	for (i = 0; i < WAIT_HIST_NBOUNDS; i++)
		preply_int(r, NULL, wait_hist_bounds_ms[i]);
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
		preply_int(r, "tickets", (int64_t)sc->tickets);
		preply_int(r, "tickets_dropped", (int64_t)sc->tickets_dropped);
		preply_list(r, "wait_buckets");
		for (j = 0; j < WAIT_HIST_NBUCKETS; j++)
			preply_int(r, NULL, (int64_t)sc->wait_hist[j]);
		preply_pop(r);
		class_wait_reply(r, sc);
		preply_push(r, "refusals");
		for (e = ADMIT_E_BAD_REQUEST; e < ADMIT_E__COUNT; e++)
			if (sc->outcome[e] > 0)
				preply_int(r, admit_err_str(e), (int64_t)sc->outcome[e]);
		preply_pop(r);
		adrt_status(r, sc);
		preply_pop(r);
	}
	preply_pop(r);
	waitq_show_contended(r, ad);
	client_reply(c, r);
}

/*
 * The "tickets" object of a fair scope's inspect on Redis: the class's
 * queue across daemons (docs/fairness.md): tickets waiting, the virtual
 * time, and per tenant flow with tickets how many ("" the default flow).
 */
static void ops_inspect_tickets(struct preply *r, const struct eng_insp *in)
{
	size_t i;

	preply_push(r, "tickets");
	preply_int(r, "waiting", in->tickets);
	preply_str(r, "virtual_time", in->fair_v != NULL ? in->fair_v : "0");
	preply_push(r, "tenants");
	for (i = 0; i < in->nflows; i++)
		preply_int(r, in->flows[i].name[0] != '\0' ? in->flows[i].name : "default",
			   in->flows[i].n);
	preply_pop(r);
	preply_pop(r);
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
	if (in->fair)
		ops_inspect_tickets(r, in);
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
	tovr_reply(r, p->kq, clock_mono_ms());
	waitq_show_queue(r, p->kq);
	ops_pend_done(p, r);
}

/* reset and inspect name one key: resolve it, hold it while the backend answers. */
static struct op_pend *ops_key_pend(struct client *c, struct request *rq)
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

void op_inspect(struct client *c, struct request *rq)
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

void op_reset(struct client *c, struct request *rq)
{
	struct op_pend *p = ops_key_pend(c, rq);

	if (p != NULL) {
		log_info("key reset", "scope=%s key=\"%s\"", p->kq->sc->cs->name, p->kq->key);
		tovr_lift(p->kq);
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
				 p->tenant[0] != '\0'
				     ? "override here only: Redis could not be told, other daemons "
				       "keep the tenant's weight"
				     : "override here only: Redis could not be told, other daemons "
				       "keep the key's limits");
	} else {
		r = preply_new(p->id, true);
		preply_int(r, "ttl_ms", p->ttl_ms);
	}
	preply_str(r, "backend", via_name(via));
	ops_pend_done(p, r);
}

/* The key has TOVR_MAX tenants' weights in force, here or in Redis. */
static void ops_tovr_full(struct op_pend *p)
{
	char msg[200];

	snprintf(msg, sizeof(msg),
		 "tenant: the key has %d tenants' weights in force, the most it takes (one "
		 "ends, or reset lifts them)",
		 TOVR_MAX);
	ops_pend_done(p, preply_error(p->id, ADMIT_E_BAD_REQUEST, msg));
}

/*
 * The tenant's weight is set in this daemon (the order of its own
 * waiters). false, after replying, when it cannot be.
 */
static bool ops_tovr_here(struct op_pend *p)
{
	int64_t now = clock_mono_ms();
	bool oom;

	if (tovr_put(p->kq, p->tenant, p->weight, now + p->ttl_ms, now, &oom))
		return true;
	if (oom)
		ops_pend_done(p, preply_error(p->id, ADMIT_E_UNAVAILABLE, "out of memory"));
	else
		ops_tovr_full(p);
	return false;
}

/*
 * Redis answered: this daemon keeps what it set there, for its own order
 * (and what it could not tell Redis, as an override of rules is kept).
 * Refused full there: nothing is set.
 */
static void op_override_tenant_done(void *arg, enum backend_tovr res)
{
	struct op_pend *p = arg;

	if (res == BACKEND_TOVR_FULL) {
		ops_tovr_full(p);
		return;
	}
	if (ops_tovr_here(p))
		op_override_done(p, res == BACKEND_TOVR_SET ? VIA_REDIS : VIA_FALLBACK,
				 res == BACKEND_TOVR_SET);
}

/*
 * override of one tenant's weight on the key for ttl_ms: at most
 * override_max times its conf weight (1 unlisted), and CONF_WEIGHT_MAX;
 * at most TOVR_MAX tenants a key. In Redis for every daemon, and here.
 */
static void op_override_tenant(struct op_pend *p, const struct request *rq)
{
	const struct conf_scope *cs = p->kq->sc->cs;
	struct rt *ad = p->kq->sc->ad;
	int cap = tovr_weight_cap(cs, rq->tenant);
	char msg[256];

	if (cap == 0) {
		snprintf(msg, sizeof(msg),
			 "[scope %s] takes no overrides (override_max in its conf section allows "
			 "them)",
			 cs->name);
		ops_pend_done(p, preply_error(p->id, ADMIT_E_BAD_REQUEST, msg));
		return;
	}
	if (rq->ov_weight > cap) {
		snprintf(msg, sizeof(msg),
			 "weight: %lld for tenant %s loosens past override_max (%g) times its "
			 "weight (%d): at most %d",
			 (long long)rq->ov_weight, rq->tenant, cs->override_max,
			 conf_weight_find(cs, rq->tenant) != NULL
			     ? conf_weight_find(cs, rq->tenant)->weight
			     : 1,
			 cap);
		ops_pend_done(p, preply_error(p->id, ADMIT_E_BAD_REQUEST, msg));
		return;
	}
	p->ttl_ms = rq->ov_ttl_ms;
	snprintf(p->tenant, sizeof(p->tenant), "%s", rq->tenant);
	p->weight = (int)rq->ov_weight;
	log_info("tenant weight override", "scope=%s key=\"%s\" tenant=%s weight=%d ttl_ms=%lld",
		 cs->name, p->kq->key, p->tenant, p->weight, (long long)p->ttl_ms);
	if (ad->redis != NULL &&
	    backend_override_tenant(ad->redis, p->kq, p->tenant, p->weight, p->ttl_ms, TOVR_MAX,
				    op_override_tenant_done, p))
		return;
	if (ops_tovr_here(p))
		op_override_done(p, ad->redis == NULL ? VIA_LOCAL : VIA_FALLBACK,
				 ad->redis == NULL);
}

/*
 * override: the key's own min_delay and rule amounts for ttl_ms, for every
 * daemon on the Redis (replacing any override it had); or one tenant's
 * weight on it (op_override_tenant).
 */
void op_override(struct client *c, struct request *rq)
{
	struct op_pend *p = ops_key_pend(c, rq);
	const struct conf_scope *cs;
	int64_t *amount;
	char msg[256];

	if (p == NULL)
		return;
	if (rq->has_tenant) {
		op_override_tenant(p, rq);
		return;
	}
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
