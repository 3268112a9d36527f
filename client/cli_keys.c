/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * cli_keys.c - the `admit` commands that change how a key is held back:
 * penalize, reset and override.
 *
 * Owns: penalize's hold (a duration converted here, a Retry-After header
 * value passed on as is), reset, and override's --ttl, --min-delay and
 * repeated --rule RULE=N, or its --tenant T --weight W, each checked
 * against the protocol's bounds in the units the command line gave. No key or --url: the scope's default key.
 */

#include "cli.h"

#include <stdlib.h>
#include <string.h>

int cmd_penalize(struct admit *a, const struct cli_args *ar)
{
	const char *key = NULL, *hold;
	struct admit_result r;
	int64_t ms = -1;

	if (ar->npos == 3 && ar->val[O_URL] != NULL)
		return cli_usage_error("%s: give KEY or --url, not both", ar->pos[1]);
	else if (ar->npos == 3)
		key = ar->pos[1];
	/* SCOPE RETRY_AFTER: --url's host, or the scope's default key */
	hold = ar->pos[ar->npos - 1];
	/* "30s" is ours to convert; "120" or a date goes as the header value */
	if (cli_duration(hold, false, &ms) < 0)
		ms = -1;
	else if (ms > CLI_MAX_WAIT_MS)
		return cli_usage_error("%s: a penalty is at most 24h (86400s)", hold);
	admit_penalize(a, ar->pos[0], key, ar->val[O_URL], ms, ms < 0 ? hold : NULL, &r);
	return cli_done("penalize", &r);
}

int cmd_reset(struct admit *a, const struct cli_args *ar)
{
	const char *key, *url;
	struct admit_result r;
	int rc;

	rc = cli_key_args(ar, &key, &url);
	if (rc != 0)
		return rc;
	admit_reset(a, ar->pos[0], key, url, &r);
	if (r.err == ADMIT_OK)
		printf("reset\n");
	return cli_done("reset", &r);
}

/*
 * --rule RULE=N (each value of the repeated option) into rules; the names
 * point into buf (one copy of all values, the caller frees it). 0 or the
 * usage error status.
 */
static int cli_rule_amounts(const struct cli_args *ar, struct admit_rule_amount *rules, char **buf)
{
	size_t len = 0, off = 0;
	char *item, *eq;
	int i;

	for (i = 0; i < ar->nmulti; i++)
		len += strlen(ar->multi[i]) + 1;
	*buf = malloc(len + 1);
	if (*buf == NULL) {
		fprintf(stderr, "admit: out of memory\n");
		return EXIT_SOFTWARE;
	}
	for (i = 0; i < ar->nmulti; i++) {
		item = strcpy(*buf + off, ar->multi[i]);
		off += strlen(item) + 1;
		eq = strrchr(item, '='); /* the amount follows the last '=' */
		if (eq == NULL || eq == item || cli_int(eq + 1, &rules[i].amount) < 0 ||
		    rules[i].amount < 1 || rules[i].amount > CLI_MAX_COST)
			return cli_usage_error("--rule %s: want RULE=N, N from 1 to 1000000000",
					       ar->multi[i]);
		*eq = '\0';
		rules[i].rule = item;
	}
	return 0;
}

/* override --tenant T --weight W: one tenant's weight on the key, nothing else. */
static int cli_override_tenant(struct admit *a, const struct cli_args *ar, const char *key,
			       const char *url, int64_t ttl_ms)
{
	struct admit_result r;
	int64_t w;

	if (!ar->set[O_TENANT] || !ar->set[O_WEIGHT])
		return cli_usage_error("%s: --tenant T and --weight W go together", "override");
	if (ar->set[O_MIN_DELAY] || ar->nmulti > 0)
		return cli_usage_error("%s: a tenant's weight is set alone (no --min-delay, "
				       "--rule)",
				       "override");
	if (cli_int(ar->val[O_WEIGHT], &w) < 0 || w < 1 || w > 1000)
		return cli_usage_error("--weight %s: want a whole number from 1 to 1000",
				       ar->val[O_WEIGHT]);
	admit_override_tenant(a, ar->pos[0], key, url, ar->val[O_TENANT], w, ttl_ms, &r);
	if (r.err == ADMIT_OK)
		printf("override\n");
	return cli_done("override", &r);
}

int cmd_override(struct admit *a, const struct cli_args *ar)
{
	struct admit_rule_amount rules[CLI_MAX_MULTI];
	int64_t ttl_ms, min_delay_ms = -1;
	const char *key, *url;
	struct admit_result r;
	char *buf = NULL;
	int rc;

	rc = cli_key_args(ar, &key, &url);
	if (rc != 0)
		return rc;
	if (!ar->set[O_TTL])
		return cli_usage_error("%s: wants --ttl D (how long the override holds)",
				       "override");
	if (cli_duration(ar->val[O_TTL], true, &ttl_ms) < 0 || ttl_ms < 1)
		return cli_usage_error("--ttl %s: want a duration above 0 like 90s, 1h",
				       ar->val[O_TTL]);
	if (ttl_ms > CLI_MAX_TTL_MS)
		return cli_usage_error("--ttl %s: at most 30 days (720h)", ar->val[O_TTL]);
	if (ar->set[O_TENANT] || ar->set[O_WEIGHT])
		return cli_override_tenant(a, ar, key, url, ttl_ms);
	if (ar->set[O_MIN_DELAY] && cli_duration(ar->val[O_MIN_DELAY], true, &min_delay_ms) < 0)
		return cli_usage_error("--min-delay %s: want a duration like 500ms, 2s",
				       ar->val[O_MIN_DELAY]);
	if (min_delay_ms > CLI_MAX_WAIT_MS)
		return cli_usage_error("--min-delay %s: at most 24h (86400s)",
				       ar->val[O_MIN_DELAY]);
	if (min_delay_ms < 0 && ar->nmulti == 0)
		return cli_usage_error("%s: wants --min-delay D or --rule RULE=N (what it sets)",
				       "override");
	rc = ar->nmulti > 0 ? cli_rule_amounts(ar, rules, &buf) : 0;
	if (rc == 0) {
		admit_override(a, ar->pos[0], key, url, ttl_ms, min_delay_ms, rules,
			       (size_t)ar->nmulti, &r);
		if (r.err == ADMIT_OK)
			printf("override\n");
		rc = cli_done("override", &r);
	}
	free(buf);
	return rc;
}
