/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * admit_result.c - libadmit's struct admit_result: its life and what it
 * answers after the call.
 *
 * Owns: initialising, failing and freeing a result, the accessors that
 * read fields added after the struct's layout was fixed from the reply it
 * keeps (remaining, reset_ms, the failing target, each meter's limit), and
 * admit_strerror, the words for every error code, the client's and the
 * daemon's.
 */

#include "admit_int.h"

#include <stdlib.h>
#include <string.h>

static char *admit_strdup(const char *s)
{
	return s ? strdup(s) : NULL;
}

static void admit_counts_free(struct admit_count *c, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(c[i].name);
	free(c);
}

void admit_result_free(struct admit_result *res)
{
	size_t i;

	if (res == NULL)
		return;
	free(res->lease);
	free(res->backend);
	free(res->rule);
	free(res->message);
	free(res->version);
	free(res->raw);
	for (i = 0; i < res->nscopes; i++) {
		free(res->scopes[i].name);
		admit_counts_free(res->scopes[i].refusals, res->scopes[i].nrefusals);
		free(res->scopes[i].wait_buckets);
	}
	free(res->wait_bounds_ms);
	free(res->scopes);
	if (res->redis != NULL)
		admit_counts_free(res->redis->errors, res->redis->nerrors);
	free(res->redis);
	if (res->inspect != NULL) {
		free(res->inspect->scope);
		free(res->inspect->key);
		for (i = 0; i < res->inspect->nrules; i++)
			free(res->inspect->rules[i].rule);
		free(res->inspect->rules);
	}
	free(res->inspect);
	memset(res, 0, sizeof(*res));
}

void admit_result_init(struct admit_result *res)
{
	memset(res, 0, sizeof(*res));
	res->retry_after_ms = -1;
	res->waited_ms = -1;
	res->uptime_s = -1;
	res->limit = -1;
	res->uptime_ms = -1;
	res->connections = -1;
}

/* Fail `res` with a client-side error; returns err. */
int admit_fail(struct admit_result *res, int err, const char *msg)
{
	res->err = err;
	free(res->message);
	res->message = admit_strdup(msg ? msg : admit_strerror(err));
	return err;
}

int admit_refuse(struct admit_result *res, const char *msg)
{
	admit_result_init(res);
	return admit_fail(res, ADMIT_E_ARG, msg);
}

/* The integer `k` of the reply in res->raw (of object `in` when set); -1. */
static int64_t admit_raw_int(const struct admit_result *res, const char *in, const char *k)
{
	json_t *rep = res && res->raw ? json_loads(res->raw, 0, NULL) : NULL;
	json_t *o = in ? json_object_get(rep, in) : rep;
	int64_t v = admit_json_int(o, k);

	json_decref(rep);
	return v;
}

int64_t admit_result_remaining(const struct admit_result *res)
{
	return admit_raw_int(res, NULL, "remaining");
}

int64_t admit_result_reset_ms(const struct admit_result *res)
{
	return admit_raw_int(res, NULL, "reset_ms");
}

int64_t admit_result_target(const struct admit_result *res, char **scope, char **key)
{
	json_t *rep = res && res->raw ? json_loads(res->raw, 0, NULL) : NULL;
	json_t *t = json_object_get(rep, "target");
	int64_t index = admit_json_int(t, "index");

	if (scope != NULL)
		*scope = index >= 0 ? admit_json_str(t, "scope") : NULL;
	if (key != NULL)
		*key = index >= 0 ? admit_json_str(t, "key") : NULL;
	json_decref(rep);
	return index;
}

/*
 * One meter of a reply's "limits": the i-th well-formed one, or (name not
 * NULL) the one named so; 1 with what is asked set, 0 when there is none,
 * ADMIT_E_NOMEM when a copy fails.
 */
static int admit_limit_find(const struct admit_result *res, size_t i, const char *name,
			    char **meter, char **rule, int64_t *limit, int64_t *remaining,
			    int64_t *reset_ms)
{
	json_t *rep = res && res->raw ? json_loads(res->raw, 0, NULL) : NULL;
	json_t *lims = json_object_get(rep, "limits"), *v;
	const char *k;
	char *m = NULL, *r = NULL;
	size_t n = 0;
	int rc = 0;

	json_object_foreach (lims, k, v) {
		int64_t nums[3] = { admit_json_int(v, "limit"), admit_json_int(v, "remaining"),
				    admit_json_int(v, "reset_ms") };

		if (!json_is_string(json_object_get(v, "rule")) || nums[0] < 0 || nums[1] < 0 ||
		    nums[2] < 0)
			continue; /* not a limit: it has no index */
		if (name != NULL ? strcmp(k, name) != 0 : n++ != i)
			continue;
		if ((meter != NULL && (m = strdup(k)) == NULL) ||
		    (rule != NULL && (r = admit_json_str(v, "rule")) == NULL)) {
			free(m);
			rc = ADMIT_E_NOMEM;
			goto done;
		}
		if (meter != NULL)
			*meter = m;
		if (rule != NULL)
			*rule = r;
		if (limit != NULL)
			*limit = nums[0];
		if (remaining != NULL)
			*remaining = nums[1];
		if (reset_ms != NULL)
			*reset_ms = nums[2];
		rc = 1;
		goto done;
	}
done:
	json_decref(rep);
	return rc;
}

int admit_result_limit(const struct admit_result *res, size_t i, char **meter, char **rule,
		       int64_t *limit, int64_t *remaining, int64_t *reset_ms)
{
	return admit_limit_find(res, i, NULL, meter, rule, limit, remaining, reset_ms);
}

int admit_result_limit_of(const struct admit_result *res, const char *meter, char **rule,
			  int64_t *limit, int64_t *remaining, int64_t *reset_ms)
{
	if (meter == NULL)
		return 0;
	return admit_limit_find(res, 0, meter, NULL, rule, limit, remaining, reset_ms);
}

const char *admit_strerror(int err)
{
	switch (err) {
	case ADMIT_E_CONNECT: return "daemon unreachable";
	case ADMIT_E_IO: return "connection to the daemon lost";
	case ADMIT_E_DEADLINE: return "no reply from the daemon in time";
	case ADMIT_E_PROTO: return "reply not understood";
	case ADMIT_E_ARG: return "invalid arguments";
	case ADMIT_E_NOMEM: return "out of memory";
	case ADMIT_E_INTERRUPTED: return "canceled";
	default: break;
	}
	if (err >= ADMIT_OK && err < ADMIT_E__COUNT)
		return admit_err_str(err);
	return "unknown error";
}
