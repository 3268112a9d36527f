/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * ops_target.c - a request's targets resolved against the conf.
 *
 * Owns: ops_targets, where requests meet the conf (unknown scope, class,
 * missing key, a reservation of a meter nothing counts, an acquire without a
 * lease where the scope needs one) and become key tables with their class
 * and cost (struct target_rt), and the refusal of a token meter no rule
 * counts (ops_meter_unknown, ops_meter_error).
 */

#include "ops_int.h"

#include <stdio.h>

/*
 * The first of tk[0..ntk) that no token rule of the targets (cs[i], cls[i])
 * meters, or NULL: a name nothing counts (a typo, "ouput") would be
 * accepted and never charged, so it is refused.
 */
const char *ops_meter_unknown(const struct conf_scope *const *cs,
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

void ops_meter_error(struct client *c, const struct request *rq, const char *field,
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
bool ops_targets(struct client *c, struct request *rq, struct target_rt *out)
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
