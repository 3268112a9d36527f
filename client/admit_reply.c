/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * admit_reply.c - libadmit's reading of a reply: JSON into struct
 * admit_result.
 *
 * Owns: the common fields of every reply (ok, the error code and message,
 * the lease, retry-after, version), a status reply's per-scope counters,
 * wait histogram and Redis counters, and an inspect reply's fields. A code
 * newer than this library still fails, as ADMIT_E_PROTO naming it. It never
 * touches the socket: admit_call.c hands it a parsed object.
 */

#include "admit_int.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One integer member of a reply object and the int64_t field it fills. */
struct admit_int_field {
	const char *name;
	size_t off;
};

#define ADMIT_INT(type, member, field)        \
	{                                     \
		member, offsetof(type, field) \
	}

static const struct admit_int_field admit_result_ints[] = {
	ADMIT_INT(struct admit_result, "retry_after_ms", retry_after_ms),
	ADMIT_INT(struct admit_result, "waited_ms", waited_ms),
	ADMIT_INT(struct admit_result, "uptime_s", uptime_s),
	ADMIT_INT(struct admit_result, "uptime_ms", uptime_ms),
	ADMIT_INT(struct admit_result, "connections", connections),
	ADMIT_INT(struct admit_result, "limit", limit),
};

static const struct admit_int_field admit_scope_ints[] = {
	ADMIT_INT(struct admit_scope_stat, "leases", leases),
	ADMIT_INT(struct admit_scope_stat, "waiting", waiting),
	ADMIT_INT(struct admit_scope_stat, "keys", keys),
	ADMIT_INT(struct admit_scope_stat, "admitted", admitted),
	ADMIT_INT(struct admit_scope_stat, "refused", refused),
	ADMIT_INT(struct admit_scope_stat, "timeouts", timeouts),
	ADMIT_INT(struct admit_scope_stat, "canceled", canceled),
	ADMIT_INT(struct admit_scope_stat, "fallback_admitted", fallback_admitted),
	ADMIT_INT(struct admit_scope_stat, "shadow_limited", shadow_limited),
	ADMIT_INT(struct admit_scope_stat, "expired", expired),
	ADMIT_INT(struct admit_scope_stat, "wait_ms_total", wait_ms_total),
	ADMIT_INT(struct admit_scope_stat, "releases", releases),
	ADMIT_INT(struct admit_scope_stat, "penalties", penalties),
};

static const struct admit_int_field admit_redis_ints[] = {
	ADMIT_INT(struct admit_redis_stat, "pods_seen", pods_seen),
	ADMIT_INT(struct admit_redis_stat, "queued", queued),
	ADMIT_INT(struct admit_redis_stat, "reconciled", reconciled),
	ADMIT_INT(struct admit_redis_stat, "rebooked", rebooked),
	ADMIT_INT(struct admit_redis_stat, "dropped", dropped),
};

static const struct admit_int_field admit_inspect_ints[] = {
	ADMIT_INT(struct admit_inspect, "penalty_ms", penalty_ms),
	ADMIT_INT(struct admit_inspect, "next_in_ms", next_in_ms),
	ADMIT_INT(struct admit_inspect, "leases", leases),
};

/* the members of an inspect reply's "quota" object */
static const struct admit_int_field admit_quota_ints[] = {
	ADMIT_INT(struct admit_inspect, "used", quota_used),
	ADMIT_INT(struct admit_inspect, "limit", quota_limit),
	ADMIT_INT(struct admit_inspect, "frees_in_ms", quota_frees_in_ms),
};

static const struct admit_int_field admit_rule_ints[] = {
	ADMIT_INT(struct admit_rule_stat, "remaining", remaining),
	ADMIT_INT(struct admit_rule_stat, "capacity", capacity),
	ADMIT_INT(struct admit_rule_stat, "full_in_ms", full_in_ms),
};

#define ADMIT_NFIELDS(t) (sizeof(t) / sizeof(t[0]))

/* Each field of the table from o's member (-1 when absent, admit_json_int). */
static void admit_decode_int_fields(json_t *o, void *dst, const struct admit_int_field *f, size_t n)
{
	int64_t v;
	size_t i;

	for (i = 0; i < n; i++) {
		v = admit_json_int(o, f[i].name);
		memcpy((char *)dst + f[i].off, &v, sizeof(v));
	}
}

/*
 * The integer members of object `o` as name/count pairs (members that are
 * not integers are skipped). 0, or -1 out of memory (what was filled is
 * still in *out / *n for the caller to free).
 */
static int admit_decode_counts(json_t *o, struct admit_count **out, size_t *n)
{
	const char *name;
	json_t *v;

	*out = NULL;
	*n = 0;
	if (!json_is_object(o) || json_object_size(o) == 0)
		return 0;
	*out = calloc(json_object_size(o), sizeof(**out));
	if (*out == NULL)
		return -1;
	json_object_foreach (o, name, v) {
		if (!json_is_integer(v))
			continue;
		(*out)[*n].name = strdup(name);
		if ((*out)[*n].name == NULL)
			return -1;
		(*out)[*n].count = (int64_t)json_integer_value(v);
		(*n)++;
	}
	return 0;
}

/*
 * The integers of array a into a malloc'd *out (other members are skipped).
 * 0 (nothing when a is no array or empty), or -1 out of memory.
 */
static int admit_decode_ints(json_t *a, int64_t **out, size_t *n)
{
	size_t i;
	json_t *v;

	*out = NULL;
	*n = 0;
	if (!json_is_array(a) || json_array_size(a) == 0)
		return 0;
	*out = calloc(json_array_size(a), sizeof(**out));
	if (*out == NULL)
		return -1;
	json_array_foreach (a, i, v)
		if (json_is_integer(v))
			(*out)[(*n)++] = (int64_t)json_integer_value(v);
	return 0;
}

static int admit_decode_scopes(json_t *scopes, struct admit_result *res)
{
	const char *name;
	json_t *v;
	size_t i = 0;

	if (!json_is_object(scopes) || json_object_size(scopes) == 0)
		return 0;
	res->scopes = calloc(json_object_size(scopes), sizeof(*res->scopes));
	if (res->scopes == NULL)
		return -1;
	json_object_foreach (scopes, name, v) {
		struct admit_scope_stat *st = &res->scopes[i];

		st->name = strdup(name);
		if (st->name == NULL)
			return -1;
		res->nscopes = ++i;
		admit_decode_int_fields(v, st, admit_scope_ints, ADMIT_NFIELDS(admit_scope_ints));
		if (admit_decode_ints(json_object_get(v, "wait_buckets"), &st->wait_buckets,
				      &st->nwait_buckets) < 0)
			return -1;
		if (admit_decode_counts(json_object_get(v, "refusals"), &st->refusals,
					&st->nrefusals) < 0)
			return -1;
	}
	return 0;
}

static int admit_decode_redis(json_t *o, struct admit_result *res)
{
	struct admit_redis_stat *r;

	if (!json_is_object(o))
		return 0;
	r = res->redis = calloc(1, sizeof(*res->redis));
	if (r == NULL)
		return -1;
	admit_decode_int_fields(o, r, admit_redis_ints, ADMIT_NFIELDS(admit_redis_ints));
	return admit_decode_counts(json_object_get(o, "errors"), &r->errors, &r->nerrors);
}

/* The inspect fields of a reply; only called for an inspect request. */
int admit_decode_inspect(json_t *rep, struct admit_result *res)
{
	struct admit_inspect *in;
	json_t *q = json_object_get(rep, "quota"), *rules = json_object_get(rep, "rules"), *v;
	size_t i;

	in = res->inspect = calloc(1, sizeof(*res->inspect));
	if (in == NULL)
		return -1;
	in->scope = admit_json_str(rep, "scope");
	in->key = admit_json_str(rep, "key");
	admit_decode_int_fields(rep, in, admit_inspect_ints, ADMIT_NFIELDS(admit_inspect_ints));
	in->has_quota = json_is_object(q);
	admit_decode_int_fields(q, in, admit_quota_ints, ADMIT_NFIELDS(admit_quota_ints));
	if (!json_is_array(rules) || json_array_size(rules) == 0)
		return 0;
	in->rules = calloc(json_array_size(rules), sizeof(*in->rules));
	if (in->rules == NULL)
		return -1;
	json_array_foreach (rules, i, v) {
		struct admit_rule_stat *rs = &in->rules[in->nrules];

		if (!json_is_object(v))
			continue;
		rs->rule = admit_json_str(v, "rule");
		in->nrules++;
		if (rs->rule == NULL && json_is_string(json_object_get(v, "rule")))
			return -1;
		admit_decode_int_fields(v, rs, admit_rule_ints, ADMIT_NFIELDS(admit_rule_ints));
	}
	return 0;
}

/* Fill res from a parsed reply object. Returns res->err. */
int admit_decode(json_t *rep, struct admit_result *res)
{
	json_t *ok = json_object_get(rep, "ok");
	json_t *v;
	char *code;
	int e;

	if (!json_is_boolean(ok))
		return admit_fail(res, ADMIT_E_PROTO, "reply has no \"ok\"");
	admit_decode_int_fields(rep, res, admit_result_ints, ADMIT_NFIELDS(admit_result_ints));
	res->held = json_is_true(json_object_get(rep, "held"));
	res->shadow_limited = json_is_true(json_object_get(rep, "shadow_limited"));
	res->lease = admit_json_str(rep, "lease");
	res->backend = admit_json_str(rep, "backend");
	res->rule = admit_json_str(rep, "rule");
	res->message = admit_json_str(rep, "message");
	v = json_object_get(rep, "version");
	if (json_is_string(v))
		res->version = strdup(json_string_value(v));
	else if (json_is_integer(v) &&
		 asprintf(&res->version, "%lld", (long long)json_integer_value(v)) < 0)
		res->version = NULL;
	if (admit_decode_scopes(json_object_get(rep, "scopes"), res) < 0 ||
	    admit_decode_redis(json_object_get(rep, "redis"), res) < 0 ||
	    admit_decode_ints(json_object_get(rep, "wait_bounds_ms"), &res->wait_bounds_ms,
			      &res->nwait_bounds) < 0)
		return admit_fail(res, ADMIT_E_NOMEM, NULL);
	if (json_is_true(ok)) {
		res->err = ADMIT_OK;
		return ADMIT_OK;
	}
	code = admit_json_str(rep, "error");
	e = code ? admit_err_parse(code) : -1;
	if (e <= ADMIT_OK) {
		/* a code newer than this library: still a failure, say which */
		res->err = ADMIT_E_PROTO;
		if (res->message == NULL)
			res->message = code ? code : strdup("failed reply without \"error\"");
		else
			free(code);
		return res->err;
	}
	free(code);
	res->err = e;
	if (res->message == NULL)
		res->message = strdup(admit_err_msg(e));
	return e;
}
