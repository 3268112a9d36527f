/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * cli_show.c - the `admit` commands that show what the daemon knows:
 * status, top, inspect and ping.
 *
 * Owns: status's tables (top's activity table once, then the totals per
 * scope, refusals by code and the Redis counters), top's --interval (the
 * live view itself is admit_top.c's), inspect's one line per item (penalty,
 * pacing, leases, quota, each rule's remaining units, each tenant weight
 * set, each class of the key's queue), --json's raw reply,
 * and ping's "ok". A counter the daemon did not send is shown as "-".
 */

#include "cli.h"
#include "admit_top.h"

#include <jansson.h>
#include <string.h>

/* A counter for a table: its value, or "-" when the daemon did not send it. */
static void cli_cell(int width, int64_t v)
{
	if (v < 0)
		printf(" %*s", width, "-");
	else
		printf(" %*lld", width, (long long)v);
}

/* "name N, name N, ..." of a status reply's named counters. */
static void cli_counts(const struct admit_count *c, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		printf("%s%s %lld", i ? ", " : "", c[i].name, (long long)c[i].count);
}

/* The columns of `admit status`: header, then the field of each scope. */
#define STATUS_COLUMNS(X)                \
	X("LEASES", leases)              \
	X("WAITING", waiting)            \
	X("ADMITTED", admitted)          \
	X("REFUSED", refused)            \
	X("TIMEOUTS", timeouts)          \
	X("CANCELED", canceled)          \
	X("FALLBACK", fallback_admitted) \
	X("SHADOW", shadow_limited)      \
	X("EXPIRED", expired)            \
	X("WAIT_MS", wait_ms_total)

static void cli_line(void *ctx, const char *line)
{
	(void)ctx;
	printf("%s\n", line);
}

int cmd_status(struct admit *a, const struct cli_args *ar)
{
	struct admit_result r;
	int w = 5; /* "SCOPE" */
	bool any = false;
	size_t i;
	int rc;

	admit_status(a, &r);
	rc = cli_reply_raw("status", &r, ar->set[O_JSON]);
	if (rc >= 0)
		return rc;
	printf("admitd %s, up %llds, backend %s\n", r.version ? r.version : "?",
	       (long long)r.uptime_s, r.backend ? r.backend : "?");
	top_table(&r, NULL, cli_line, NULL);
	printf("\ntotals since the daemon started:\n");
	for (i = 0; i < r.nscopes; i++)
		if ((int)strlen(r.scopes[i].name) > w)
			w = (int)strlen(r.scopes[i].name);
	printf("%-*s", w, "SCOPE");
#define STATUS_HEAD(h, f) printf(" %8s", h);
	STATUS_COLUMNS(STATUS_HEAD)
#undef STATUS_HEAD
	printf("\n");
	for (i = 0; i < r.nscopes; i++) {
		printf("%-*s", w, r.scopes[i].name);
#define STATUS_CELL(h, f) cli_cell(8, r.scopes[i].f);
		STATUS_COLUMNS(STATUS_CELL)
#undef STATUS_CELL
		printf("\n");
		any = any || r.scopes[i].nrefusals > 0;
	}
	if (any) {
		printf("\nrefused, by code:\n");
		for (i = 0; i < r.nscopes; i++) {
			if (r.scopes[i].nrefusals == 0)
				continue;
			printf("%-*s ", w, r.scopes[i].name);
			cli_counts(r.scopes[i].refusals, r.scopes[i].nrefusals);
			printf("\n");
		}
	}
	if (r.redis != NULL) {
		printf("\nredis: pods_seen %lld, queued %lld, reconciled %lld, rebooked %lld, "
		       "dropped %lld\n",
		       (long long)r.redis->pods_seen, (long long)r.redis->queued,
		       (long long)r.redis->reconciled, (long long)r.redis->rebooked,
		       (long long)r.redis->dropped);
		printf("redis errors: ");
		if (r.redis->nerrors == 0)
			printf("none");
		cli_counts(r.redis->errors, r.redis->nerrors);
		printf("\n");
	}
	admit_result_free(&r);
	return EXIT_ADMITTED;
}

int cmd_top(struct admit *a, const struct cli_args *ar)
{
	struct admit_result fail;
	int64_t ms = 1000;
	int rc;

	if (ar->set[O_INTERVAL] && (cli_duration(ar->val[O_INTERVAL], true, &ms) < 0 || ms < 100))
		return cli_usage_error("--interval %s: want a duration of at least 100ms, like 1s",
				       ar->val[O_INTERVAL]);
	memset(&fail, 0, sizeof(fail));
	rc = top_run(a, ms, &fail);
	if (rc == -1) {
		rc = cli_fail("top", &fail);
		admit_result_free(&fail);
	}
	return rc;
}

static void cli_item(const char *name, int64_t v)
{
	if (v < 0)
		printf("%-11s -\n", name);
	else
		printf("%-11s %lld\n", name, (long long)v);
}

/* "tenant T W, ttl_ms N" per tenant weight set on the key (the reply's "tenant_weights"). */
static void cli_tenant_weights(json_t *tw)
{
	const char *name;
	json_t *o;

	json_object_foreach (tw, name, o) {
		printf("%-11s %s %lld, ttl_ms %lld\n", "weight", name,
		       (long long)json_integer_value(json_object_get(o, "weight")),
		       (long long)json_integer_value(json_object_get(o, "ttl_ms")));
	}
}

/*
 * One line per class of the key's queue here (the reply's "queue"), in the
 * order their heads are asked: its waiters, V, and each tenant flow's
 * waiters, weight and next start tag ("default*": the shared flow).
 */
static void cli_inspect_queue(const char *raw)
{
	json_t *root = raw != NULL ? json_loads(raw, 0, NULL) : NULL, *cl, *fl;
	size_t i, j;

	if (root == NULL)
		return;
	cli_tenant_weights(json_object_get(root, "tenant_weights"));
	json_array_foreach (json_object_get(root, "queue"), i, cl) {
		json_t *v = json_object_get(cl, "v");
		printf("%-11s class \"%s\" priority %lld: %lld waiting", "queue",
		       json_string_value(json_object_get(cl, "class")),
		       (long long)json_integer_value(json_object_get(cl, "priority")),
		       (long long)json_integer_value(json_object_get(cl, "waiters")));
		if (json_is_number(v))
			printf(", V %g", json_number_value(v));
		json_array_foreach (json_object_get(cl, "tenants"), j, fl) {
			json_t *s = json_object_get(fl, "next_start");
			printf("%s %s%s %lld (weight %lld", j == 0 ? ";" : ",",
			       json_string_value(json_object_get(fl, "tenant")),
			       json_is_true(json_object_get(fl, "shared")) ? "*" : "",
			       (long long)json_integer_value(json_object_get(fl, "waiters")),
			       (long long)json_integer_value(json_object_get(fl, "weight")));
			if (json_is_number(s))
				printf(", next %g", json_number_value(s));
			printf(")");
		}
		printf("\n");
	}
	json_decref(root);
}

int cmd_inspect(struct admit *a, const struct cli_args *ar)
{
	const struct admit_inspect *in;
	const char *key, *url;
	struct admit_result r;
	size_t i;
	int rc;

	rc = cli_key_args(ar, &key, &url);
	if (rc != 0)
		return rc;
	admit_inspect(a, ar->pos[0], key, url, ar->val[O_CLASS], &r);
	rc = cli_reply_raw("inspect", &r, ar->set[O_JSON]);
	if (rc >= 0)
		return rc;
	in = r.inspect;
	printf("%-11s %s\n", "scope", in->scope ? in->scope : ar->pos[0]);
	printf("%-11s %s\n", "key", in->key ? in->key : (key ? key : "?"));
	printf("%-11s %s\n", "backend", r.backend ? r.backend : "?");
	cli_item("penalty_ms", in->penalty_ms);
	cli_item("next_in_ms", in->next_in_ms);
	cli_item("leases", in->leases);
	if (in->has_quota)
		printf("%-11s used %lld, limit %lld, frees_in_ms %lld\n", "quota",
		       (long long)in->quota_used, (long long)in->quota_limit,
		       (long long)in->quota_frees_in_ms);
	for (i = 0; i < in->nrules; i++)
		printf("%-11s \"%s\" remaining %lld, capacity %lld, full_in_ms %lld\n", "rule",
		       in->rules[i].rule ? in->rules[i].rule : "?",
		       (long long)in->rules[i].remaining, (long long)in->rules[i].capacity,
		       (long long)in->rules[i].full_in_ms);
	cli_inspect_queue(r.raw);
	admit_result_free(&r);
	return EXIT_ADMITTED;
}

int cmd_ping(struct admit *a, const struct cli_args *ar)
{
	struct admit_result r;
	int rc;

	(void)ar;
	rc = admit_ping(a, &r) == ADMIT_OK ? EXIT_ADMITTED : cli_fail("ping", &r);
	if (rc == EXIT_ADMITTED)
		printf("ok\n");
	admit_result_free(&r);
	return rc;
}
