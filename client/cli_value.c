/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * cli_value.c - the values on the `admit` command line.
 *
 * Owns: durations (250ms, 5s, 1m, 1h; a bare number is seconds where the
 * option says so, and a nonzero duration is at least 1 ms), non-negative
 * integers, token lists (input=300,output=200) and the key of a target
 * (KEY or --url, at most one). Durations and integers only read their
 * value (the command words the usage error, in its own units); a token
 * list and a target's key say what is wrong themselves.
 */

#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/*
 * Parse a duration into ms: a number (decimals allowed) with a unit ms, s,
 * m or h; a bare number is seconds when bare_ok. Any nonzero duration is
 * at least 1 ms (0 alone means "do not wait"). Returns 0 or -1.
 */
int cli_duration(const char *s, bool bare_ok, int64_t *ms)
{
	static const struct {
		const char *unit;
		double ms;
	} units[] = { { "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 } };
	const char *unit;
	char *end;
	double v;
	size_t i;

	if (s == NULL || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || !isfinite(v) || v < 0)
		return -1;
	unit = *end == '\0' && bare_ok ? "s" : end;
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(unit, units[i].unit) == 0 && v * units[i].ms < 9e15) {
			*ms = (int64_t)llround(v * units[i].ms);
			/* 0.0001s is a (tiny) wait, not "do not wait" */
			if (*ms == 0 && v > 0)
				*ms = 1;
			return 0;
		}
	}
	return -1;
}

int cli_int(const char *s, int64_t *out)
{
	char *end;
	long long v;

	if (s == NULL || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || *end != '\0')
		return -1;
	*out = v;
	return 0;
}

/* "input=300,output=200" into tk (names point into buf, which the caller frees). */
static int cli_tokens(char *buf, struct admit_token *tk, size_t *n)
{
	char *save = NULL, *item, *eq;

	*n = 0;
	for (item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		eq = strchr(item, '=');
		if (eq == NULL || eq == item || *n == CLI_MAX_TOKENS)
			return -1;
		*eq = '\0';
		tk[*n].name = item;
		if (cli_int(eq + 1, &tk[*n].count) < 0)
			return -1;
		(*n)++;
	}
	return 0;
}

int cli_token_list(const char *opt, const char *val, bool empty_ok, char **buf,
		   struct admit_token *tk, size_t *n)
{
	*n = 0;
	*buf = strdup(val);
	if (*buf == NULL) {
		fprintf(stderr, "admit: out of memory\n");
		return EXIT_SOFTWARE;
	}
	if (cli_tokens(*buf, tk, n) < 0 || (*n == 0 && !empty_ok))
		return cli_usage_error("--%s %s: want NAME=COUNT[,NAME=COUNT...]", opt, val);
	return 0;
}

int cli_key_args(const struct cli_args *ar, const char **key, const char **url)
{
	*key = ar->npos > 1 ? ar->pos[1] : NULL;
	*url = ar->val[O_URL];
	if (*key && *url)
		return cli_usage_error("%s: give KEY or --url, not both", *key);
	return 0; /* neither: the scope's default key (its conf's `key =`) */
}
