/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * conf_set.c - the setters of the plain value types, and the type table.
 *
 * Owns: one setter per type (text, paths, URLs, names, numbers, durations,
 * yes/no, the log level and fail mode, a scope's quota, divisor and
 * adaptive steps), each parsing a value with conf_value.c and storing it at
 * the key's offset, or returning a message; and conf_types, which names
 * each type's setter, its --help-conf words and how it is stored. The
 * setters of rules and classes are conf_rule.c's, of users and groups
 * conf_ids.c's.
 */

#include "conf_int.h"

#include "redis_url.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CONF_SOCKET_MAX 107 /* sizeof(sun_path) - 1 */

static const char *conf_store_string(const struct conf_key *k, void *base, const char *val)
{
	char **f = FIELD(base, k, char *), *v = NULL;

	if (*val == '\0' && !(k->flags & CONF_F_EMPTY_NULL))
		return "must not be empty";
	if (*val != '\0' && (v = strdup(val)) == NULL)
		return "out of memory";
	free(*f);
	*f = v;
	return NULL;
}

static const char *conf_set_string(struct conf_ctx *x, const struct conf_key *k, void *base,
				   const char *arg, const char *val)
{
	(void)x;
	(void)arg;
	return conf_store_string(k, base, val);
}

/*
 * CT_FILE: a secret the daemon reads once it runs. Read a byte of it now,
 * as the loading user, so that `-t`, start-up and a reload all say which
 * file is missing instead of the daemon exiting after it passed the check.
 */
static const char *conf_set_file(struct conf_ctx *x, const struct conf_key *k, void *base,
				 const char *arg, const char *val)
{
	char byte;
	int fd, err = 0;

	(void)arg;
	if (*val != '\0') {
		if ((fd = open(val, O_RDONLY | O_CLOEXEC)) < 0)
			err = errno;
		else if (read(fd, &byte, 1) < 0)
			err = errno; /* a directory opens, but does not read */
		if (fd >= 0)
			close(fd);
		if (err != 0)
			return conf_fmt(x, "cannot read %s: %s", val, strerror(err));
	}
	return conf_store_string(k, base, val);
}

static const char *conf_set_socket(struct conf_ctx *x, const struct conf_key *k, void *base,
				   const char *arg, const char *val)
{
	(void)arg;
	if (strlen(val) > CONF_SOCKET_MAX)
		return conf_fmt(x, "socket path longer than %d bytes", CONF_SOCKET_MAX);
	return conf_store_string(k, base, val);
}

static const char *conf_set_url(struct conf_ctx *x, const struct conf_key *k, void *base,
				const char *arg, const char *val)
{
	struct redis_url u;
	char msg[160];

	(void)arg;
	if (*val != '\0' && redis_url_parse(val, &u, msg, sizeof(msg)) != 0)
		return conf_fmt(x, "%s", msg);
	return conf_store_string(k, base, val);
}

static const char *conf_set_hostport(struct conf_ctx *x, const struct conf_key *k, void *base,
				     const char *arg, const char *val)
{
	char host[CV_HOST_MAX + 1];
	const char *e;
	int port;

	(void)arg;
	if (*val != '\0' && (e = cv_hostport(val, host, sizeof(host), &port)) != NULL)
		return conf_fmt(x, "%s", e);
	return conf_store_string(k, base, val);
}

static const char *conf_set_prefix(struct conf_ctx *x, const struct conf_key *k, void *base,
				   const char *arg, const char *val)
{
	(void)x;
	(void)arg;
	for (const char *p = val; *p; p++)
		if (isspace((unsigned char)*p) || *p == '{' || *p == '}')
			return "must not contain blanks, '{' or '}'";
	return conf_store_string(k, base, val);
}

static const char *conf_set_name(struct conf_ctx *x, const struct conf_key *k, void *base,
				 const char *arg, const char *val)
{
	(void)x;
	(void)arg;
	if (!cv_name_ok(val))
		return "not a valid name ([A-Za-z0-9_.-], 1 to 64 characters)";
	return conf_store_string(k, base, val);
}

static const char *conf_set_octal(struct conf_ctx *x, const struct conf_key *k, void *base,
				  const char *arg, const char *val)
{
	(void)x;
	(void)arg;
	return cv_octal(val, FIELD(base, k, int));
}

/* CT_INT, CT_SIZE and CT_DURATION: parse with the type's parser, check min..max. */
static const char *conf_set_int64(struct conf_ctx *x, const struct conf_key *k, void *base,
				  const char *arg, const char *val)
{
	int64_t v = 0;
	const char *e, *unit = k->type == CT_SIZE ? " bytes" : "";
	char lo[32], hi[32];

	(void)arg;
	e = k->type == CT_SIZE	     ? cv_size(val, &v)
	    : k->type == CT_DURATION ? cv_duration(val, &v)
				     : cv_int(val, &v);
	if (e != NULL)
		return e;
	if (v >= k->min && v <= k->max) {
		*FIELD(base, k, int64_t) = v;
		return NULL;
	}
	if (k->type == CT_DURATION) {
		conf_fmt_duration(lo, sizeof(lo), k->min);
		conf_fmt_duration(hi, sizeof(hi), k->max);
	} else {
		snprintf(lo, sizeof(lo), "%lld%s", (long long)k->min, unit);
		snprintf(hi, sizeof(hi), "%lld%s", (long long)k->max, unit);
	}
	return conf_fmt(x, "must be between %s and %s", lo, hi);
}

/* A double in min..max; the divisor setter shares it. */
static const char *conf_parse_double(struct conf_ctx *x, const struct conf_key *k, const char *val,
				     double *out)
{
	const char *e = cv_double(val, out);

	if (e != NULL)
		return e;
	if (*out < (double)k->min || *out > (double)k->max)
		return conf_fmt(x, "must be between %lld and %lld", (long long)k->min,
				(long long)k->max);
	return NULL;
}

static const char *conf_set_double(struct conf_ctx *x, const struct conf_key *k, void *base,
				   const char *arg, const char *val)
{
	(void)arg;
	return conf_parse_double(x, k, val, FIELD(base, k, double));
}

static const char *conf_set_bool(struct conf_ctx *x, const struct conf_key *k, void *base,
				 const char *arg, const char *val)
{
	(void)x;
	(void)arg;
	return cv_bool(val, FIELD(base, k, bool));
}

static const char *const conf_log_levels[] = { "debug", "info", "warn", "error", NULL };
static const char *const conf_fail_modes[] = { "fallback", "open", "closed", NULL };

static int conf_choice(const char *const *choices, const char *val)
{
	for (int i = 0; choices[i] != NULL; i++)
		if (strcmp(choices[i], val) == 0)
			return i;
	return -1;
}

static const char *conf_set_log_level(struct conf_ctx *x, const struct conf_key *k, void *base,
				      const char *arg, const char *val)
{
	(void)x;
	(void)arg;
	if (conf_choice(conf_log_levels, val) < 0)
		return "must be debug, info, warn or error";
	return conf_store_string(k, base, val);
}

static const char *conf_set_fail_mode(struct conf_ctx *x, const struct conf_key *k, void *base,
				      const char *arg, const char *val)
{
	int i = conf_choice(conf_fail_modes, val);

	(void)x;
	(void)arg;
	if (i < 0)
		return "must be fallback, open or closed";
	*FIELD(base, k, enum conf_fail_mode) = (enum conf_fail_mode)i;
	return NULL;
}

static const char *conf_set_quota(struct conf_ctx *x, const struct conf_key *k, void *base,
				  const char *arg, const char *val)
{
	struct conf_scope *s = base;
	int64_t q, w;
	const char *e = cv_rate(val, &q, &w);
	char *text;

	(void)k;
	(void)arg;
	if (e != NULL)
		return e;
	if (q < 1 || q > CV_QUOTA_MAX)
		return conf_fmt(x, "the count must be between 1 and %lld", (long long)CV_QUOTA_MAX);
	if (w > STRAT_MAX_WINDOW_MS)
		return "the window must be at most 24h";
	if ((text = malloc(strlen(val) + sizeof("quota "))) == NULL)
		return "out of memory";
	strcpy(text, "quota ");
	strcat(text, val);
	free(s->quota_text);
	s->quota_text = text;
	s->quota = q;
	s->quota_window_ms = w;
	return NULL;
}

static const char *conf_set_divisor(struct conf_ctx *x, const struct conf_key *k, void *base,
				    const char *arg, const char *val)
{
	struct conf_scope *s = base;
	double d;
	const char *e;

	(void)arg;
	if (strcmp(val, "auto") == 0) {
		s->fallback_divisor_auto = true;
		s->fallback_divisor = 1;
		return NULL;
	}
	if (cv_double(val, &d) != NULL)
		return "must be a number >= 1, or auto";
	if ((e = conf_parse_double(x, k, val, &d)) != NULL)
		return e;
	s->fallback_divisor = d;
	s->fallback_divisor_auto = false;
	return NULL;
}

static const char *conf_set_adapt_floor(struct conf_ctx *x, const struct conf_key *k, void *base,
					const char *arg, const char *val)
{
	struct conf_scope *s = base;
	const char *e = cv_rate(val, &s->adaptive_floor_n, &s->adaptive_floor_w_ms);

	(void)x;
	(void)k;
	(void)arg;
	if (e == NULL && s->adaptive_floor_w_ms > STRAT_MAX_WINDOW_MS)
		return "the window must be at most 24h";
	return e;
}

/* "P%" (0 < P <= 100) of the ceiling, or a rate N/W. */
static const char *conf_set_adapt_step(struct conf_ctx *x, const struct conf_key *k, void *base,
				       const char *arg, const char *val)
{
	struct conf_scope *s = base;
	size_t n = strlen(val);
	char num[32];
	double d;

	(void)x;
	(void)k;
	(void)arg;
	s->adaptive_increase_pct = 0;
	if (n > 1 && val[n - 1] == '%') {
		if (n - 1 >= sizeof(num))
			return "must be P% (0 < P <= 100) or a rate N/W";
		memcpy(num, val, n - 1);
		num[n - 1] = '\0';
		if (cv_double(num, &d) != NULL || !(d > 0 && d <= 100))
			return "must be P% (0 < P <= 100) or a rate N/W";
		s->adaptive_increase_pct = d;
		return NULL;
	}
	if (cv_rate(val, &s->adaptive_increase_n, &s->adaptive_increase_w_ms) != NULL)
		return "must be P% (0 < P <= 100) or a rate N/W";
	if (s->adaptive_increase_w_ms > STRAT_MAX_WINDOW_MS)
		return "the window must be at most 24h";
	return NULL;
}

const struct conf_type_info conf_types[CT__COUNT] = {
	[CT_STRING] = { "text", conf_set_string, CS_STRING },
	[CT_FILE] = { "readable file", conf_set_file, CS_STRING },
	[CT_SOCKET] = { "path", conf_set_socket, CS_STRING },
	[CT_URL] = { "URL", conf_set_url, CS_STRING },
	[CT_HOSTPORT] = { "HOST:PORT", conf_set_hostport, CS_STRING },
	[CT_PREFIX] = { "text", conf_set_prefix, CS_STRING },
	[CT_NAME] = { "name", conf_set_name, CS_STRING },
	[CT_OCTAL] = { "octal mode", conf_set_octal, CS_INT },
	[CT_INT] = { "integer", conf_set_int64, CS_INT64 },
	[CT_SIZE] = { "size", conf_set_int64, CS_INT64 },
	[CT_DURATION] = { "duration", conf_set_int64, CS_INT64 },
	[CT_DOUBLE] = { "decimal", conf_set_double, CS_DOUBLE },
	[CT_BOOL] = { "yes/no", conf_set_bool, CS_BOOL },
	[CT_LOG_LEVEL] = { "debug, info, warn or error", conf_set_log_level, CS_STRING },
	[CT_FAIL_MODE] = { "fallback, open or closed", conf_set_fail_mode, CS_ENUM },
	[CT_QUOTA] = { "Q/W", conf_set_quota },
	[CT_DIVISOR] = { "decimal or auto", conf_set_divisor },
	[CT_RULE] = { "rule, repeatable", conf_set_rule },
	[CT_CLASS] = { "class, repeatable", conf_set_class },
	[CT_WEIGHT] = { "weight, repeatable", conf_set_weight },
	[CT_UIDS] = { "users (names or uids)", conf_set_ids },
	[CT_GIDS] = { "groups (names or gids)", conf_set_ids },
	[CT_GROUP] = { "group (name or gid)", conf_set_group, CS_INT64 },
	[CT_ADAPT_FLOOR] = { "N/W", conf_set_adapt_floor },
	[CT_ADAPT_STEP] = { "P% or N/W", conf_set_adapt_step },
};
