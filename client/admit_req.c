/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * admit_req.c - libadmit's calls: each public request checked and encoded.
 *
 * Owns: acquire, try, once and try_once, release (with tokens and the
 * outcome), penalize, status, ping, reset, inspect and override: their
 * arguments refused with ADMIT_E_ARG before anything is sent, and their
 * JSON request objects (a target's scope, key or url, class and cost, token
 * and rule amount maps). The round trip itself is admit_call.c's.
 */

#include "admit_int.h"

#include <string.h>

/* Set `k` to a string when v is not NULL; 0 or -1 (out of memory). */
static int admit_set_str(json_t *o, const char *k, const char *v)
{
	return v ? json_object_set_new(o, k, json_string(v)) : 0;
}

/*
 * scope, key|url, class, cost of one target into o; 0, or -1 bad/nomem.
 * cost: 0 sends nothing (the daemon's 1), ADMIT_COST_ZERO sends 0.
 */
static int admit_set_target(json_t *o, const char *scope, const char *key, const char *url,
			    const char *cls, int64_t cost)
{
	if (scope == NULL || (key && url) || (cost < 0 && cost != ADMIT_COST_ZERO))
		return -1;
	if (admit_set_str(o, "scope", scope) < 0 || admit_set_str(o, "key", key) < 0 ||
	    admit_set_str(o, "url", url) < 0 || admit_set_str(o, "class", cls) < 0)
		return -1;
	if (cost != 0 &&
	    json_object_set_new(o, "cost", json_integer(cost == ADMIT_COST_ZERO ? 0 : cost)) < 0)
		return -1;
	return 0;
}

/*
 * One "NAME":N of a {name: count} object; 0, or -1: the name missing or
 * already there, n below min, out of memory.
 */
static int admit_set_count(json_t *obj, const char *name, int64_t n, int64_t min)
{
	if (name == NULL || n < min || json_object_get(obj, name) != NULL)
		return -1;
	return json_object_set_new(obj, name, json_integer(n));
}

/*
 * {"NAME":COUNT,...} from n token counts under `k` of o (nothing when n is
 * 0). 0, or -1: a name missing or given twice, a negative count, more than
 * ADMIT_MAX_TOKENS, out of memory.
 */
static int admit_set_tokens(json_t *o, const char *k, const struct admit_token *tk, size_t n)
{
	json_t *obj;
	size_t i;

	if (n == 0)
		return 0;
	if (tk == NULL || n > ADMIT_MAX_TOKENS)
		return -1;
	obj = json_object();
	if (obj == NULL || json_object_set_new(o, k, obj) < 0)
		return -1;
	for (i = 0; i < n; i++)
		if (admit_set_count(obj, tk[i].name, tk[i].count, 0) < 0)
			return -1;
	return 0;
}

static json_t *admit_encode_acquire(const struct admit_req *rq, const char *tenant,
				    int64_t timeout_ms, bool lease)
{
	json_t *o = json_pack("{s:s}", "op", "acquire");
	json_t *arr, *t;
	size_t i;

	if (o == NULL)
		return NULL;
	if (rq->ntargets > 0) {
		arr = json_array();
		if (rq->targets == NULL || arr == NULL ||
		    json_object_set_new(o, "targets", arr) < 0)
			goto fail;
		for (i = 0; i < rq->ntargets; i++) {
			const struct admit_target *tg = &rq->targets[i];

			t = json_object();
			if (t == NULL || json_array_append_new(arr, t) < 0 ||
			    admit_set_target(t, tg->scope, tg->key, tg->url, tg->cls, tg->cost) < 0)
				goto fail;
		}
	} else if (admit_set_target(o, rq->scope, rq->key, rq->url, rq->cls, rq->cost) < 0) {
		goto fail;
	}
	if (timeout_ms >= 0 && json_object_set_new(o, "timeout_ms", json_integer(timeout_ms)) < 0)
		goto fail;
	if (rq->detach && json_object_set_new(o, "detach", json_true()) < 0)
		goto fail;
	if (admit_set_str(o, "tenant", tenant) < 0)
		goto fail;
	if (admit_set_tokens(o, "reserve", rq->reserve, rq->nreserve) < 0)
		goto fail;
	/* nothing to release: nothing to detach or to settle either */
	if (!lease &&
	    (rq->detach || rq->nreserve > 0 || json_object_set_new(o, "lease", json_false()) < 0))
		goto fail;
	return o;
fail:
	json_decref(o);
	return NULL;
}

static int admit_do_acquire(struct admit *a, const struct admit_req *rq, int64_t timeout_ms,
			    bool lease, struct admit_result *res)
{
	json_t *req;

	if (a == NULL || rq == NULL || timeout_ms < ADMIT_TIMEOUT_DEFAULT)
		return admit_refuse(res, "no handle, no request or a negative timeout");
	req = admit_encode_acquire(rq, a->tenant, timeout_ms, lease);
	if (req == NULL)
		return admit_refuse(res,
				    "acquire needs a scope, at most one of key and url, cost >= 0 "
				    "(or ADMIT_COST_ZERO), named reserve counts >= 0; without a "
				    "lease, neither detach nor reserve");
	if (timeout_ms != 0)
		admit_arm_cancel(a);
	return admit_roundtrip(a, req, timeout_ms, true, res);
}

int admit_acquire(struct admit *a, const struct admit_req *rq, struct admit_result *res)
{
	return admit_do_acquire(a, rq, rq ? rq->timeout_ms : 0, true, res);
}

int admit_try(struct admit *a, const struct admit_req *rq, struct admit_result *res)
{
	return admit_do_acquire(a, rq, 0, true, res);
}

int admit_once(struct admit *a, const struct admit_req *rq, struct admit_result *res)
{
	return admit_do_acquire(a, rq, rq ? rq->timeout_ms : 0, false, res);
}

int admit_try_once(struct admit *a, const struct admit_req *rq, struct admit_result *res)
{
	return admit_do_acquire(a, rq, 0, false, res);
}

int admit_release(struct admit *a, const char *lease, const struct admit_token *tokens,
		  size_t ntokens, struct admit_result *res)
{
	return admit_release_outcome(a, lease, tokens, ntokens, NULL, res);
}

int admit_release_outcome(struct admit *a, const char *lease, const struct admit_token *tokens,
			  size_t ntokens, const char *outcome, struct admit_result *res)
{
	json_t *req;

	if (a == NULL || lease == NULL || (ntokens > 0 && tokens == NULL))
		return admit_refuse(res, "release needs a handle and a lease");
	if (outcome != NULL && strcmp(outcome, "ok") != 0 && strcmp(outcome, "limited") != 0 &&
	    strcmp(outcome, "error") != 0)
		return admit_refuse(res, "outcome must be \"ok\", \"limited\" or \"error\"");
	req = json_pack("{s:s, s:s}", "op", "release", "lease", lease);
	if (req == NULL || admit_set_tokens(req, "tokens", tokens, ntokens) < 0 ||
	    admit_set_str(req, "outcome", outcome) < 0) {
		json_decref(req);
		return admit_refuse(res, "tokens: at most 16 distinct names, counts >= 0");
	}
	return admit_roundtrip(a, req, 0, false, res);
}

int admit_penalize(struct admit *a, const char *scope, const char *key, const char *url,
		   int64_t retry_after_ms, const char *retry_after, struct admit_result *res)
{
	json_t *req;
	int rc = -1;

	if (a == NULL || (retry_after == NULL && retry_after_ms < 0))
		return admit_refuse(res, "penalize needs a retry-after");
	req = json_pack("{s:s}", "op", "penalize");
	if (req != NULL && admit_set_target(req, scope, key, url, NULL, 0) == 0) {
		if (retry_after)
			rc = json_object_set_new(req, "retry_after", json_string(retry_after));
		else
			rc = json_object_set_new(req, "retry_after_ms",
						 json_integer(retry_after_ms));
	}
	if (rc < 0) {
		json_decref(req);
		return admit_refuse(res, "penalize needs a scope and at most one of key and url");
	}
	return admit_roundtrip(a, req, 0, false, res);
}

int admit_status(struct admit *a, struct admit_result *res)
{
	if (a == NULL)
		return admit_refuse(res, "no handle");
	return admit_roundtrip(a, json_pack("{s:s}", "op", "status"), 0, false, res);
}

int admit_ping(struct admit *a, struct admit_result *res)
{
	if (a == NULL)
		return admit_refuse(res, "no handle");
	return admit_roundtrip(a, json_pack("{s:s}", "op", "ping"), 0, false, res);
}

/*
 * reset and inspect: {"op":OP,"scope":S[,"key":K|"url":U][,"class":C]};
 * neither key nor url: the scope's default key.
 */
static json_t *admit_encode_key_op(const char *op, const char *scope, const char *key,
				   const char *url, const char *cls)
{
	json_t *req = json_pack("{s:s}", "op", op);

	if (req != NULL && admit_set_target(req, scope, key, url, cls, 0) < 0) {
		json_decref(req);
		return NULL;
	}
	return req;
}

int admit_reset(struct admit *a, const char *scope, const char *key, const char *url,
		struct admit_result *res)
{
	json_t *req = a ? admit_encode_key_op("reset", scope, key, url, NULL) : NULL;

	if (req == NULL)
		return admit_refuse(res,
				    "reset needs a handle, a scope and at most one of key and url");
	return admit_roundtrip(a, req, 0, false, res);
}

int admit_inspect(struct admit *a, const char *scope, const char *key, const char *url,
		  const char *cls, struct admit_result *res)
{
	json_t *req = a ? admit_encode_key_op("inspect", scope, key, url, cls) : NULL;
	json_t *rep;
	int rc;

	if (req == NULL)
		return admit_refuse(
		    res, "inspect needs a handle, a scope and at most one of key and url");
	rc = admit_roundtrip(a, req, 0, false, res);
	if (rc != ADMIT_OK)
		return rc;
	/* the roundtrip decoded the common fields; the rest is inspect's own */
	rep = json_loads(res->raw, 0, NULL);
	if (rep == NULL || admit_decode_inspect(rep, res) < 0)
		rc = admit_fail(res, rep == NULL ? ADMIT_E_PROTO : ADMIT_E_NOMEM, NULL);
	json_decref(rep);
	return rc;
}

/*
 * The override request: its target (admit_set_target), ttl_ms, min_delay_ms
 * unless -1, and the rule amounts; NULL for arguments it refuses (a rule
 * unnamed, empty or given twice, an amount below 1, nothing to set).
 */
static json_t *admit_encode_override(const char *scope, const char *key, const char *url,
				     int64_t ttl_ms, int64_t min_delay_ms,
				     const struct admit_rule_amount *rules, size_t nrules)
{
	json_t *req, *obj;
	size_t i;

	if (ttl_ms < 1 || min_delay_ms < -1 || (min_delay_ms < 0 && nrules == 0) ||
	    (nrules > 0 && rules == NULL) || nrules > ADMIT_MAX_TOKENS)
		return NULL;
	req = json_pack("{s:s, s:I}", "op", "override", "ttl_ms", (json_int_t)ttl_ms);
	if (req == NULL || admit_set_target(req, scope, key, url, NULL, 0) < 0)
		goto fail;
	if (min_delay_ms >= 0 &&
	    json_object_set_new(req, "min_delay_ms", json_integer(min_delay_ms)) < 0)
		goto fail;
	if (nrules > 0) {
		obj = json_object();
		if (obj == NULL || json_object_set_new(req, "rules", obj) < 0)
			goto fail;
		for (i = 0; i < nrules; i++)
			if (rules[i].rule == NULL || rules[i].rule[0] == '\0' ||
			    admit_set_count(obj, rules[i].rule, rules[i].amount, 1) < 0)
				goto fail;
	}
	return req;
fail:
	json_decref(req);
	return NULL;
}

int admit_override(struct admit *a, const char *scope, const char *key, const char *url,
		   int64_t ttl_ms, int64_t min_delay_ms, const struct admit_rule_amount *rules,
		   size_t nrules, struct admit_result *res)
{
	json_t *req =
	    a ? admit_encode_override(scope, key, url, ttl_ms, min_delay_ms, rules, nrules) : NULL;

	if (req == NULL)
		return admit_refuse(res,
				    "override needs a handle, a scope, at most one of key and url, "
				    "a ttl_ms >= 1, and a min_delay_ms >= 0 or rule amounts >= 1 "
				    "(at most 16, each rule named once)");
	return admit_roundtrip(a, req, 0, false, res);
}

int admit_override_tenant(struct admit *a, const char *scope, const char *key, const char *url,
			  const char *tenant, int64_t weight, int64_t ttl_ms,
			  struct admit_result *res)
{
	json_t *req = NULL;

	if (a != NULL && ttl_ms >= 1 && tenant != NULL && tenant[0] != '\0' &&
	    strlen(tenant) <= 64 && weight >= 1 && weight <= 1000) {
		req = json_pack("{s:s, s:I, s:s, s:I}", "op", "override", "ttl_ms",
				(json_int_t)ttl_ms, "tenant", tenant, "weight", (json_int_t)weight);
		if (req != NULL && admit_set_target(req, scope, key, url, NULL, 0) < 0) {
			json_decref(req);
			req = NULL;
		}
	}
	if (req == NULL)
		return admit_refuse(res,
				    "override of a tenant's weight needs a handle, a scope, at "
				    "most one of key and url, a ttl_ms >= 1, a tenant of 1 "
				    "to 64 characters and a weight from 1 to 1000");
	return admit_roundtrip(a, req, 0, false, res);
}
