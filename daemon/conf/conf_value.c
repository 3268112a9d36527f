/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * conf_value.c - pure parsers for admitd.conf values.
 *
 * Owns: the syntax of durations, sizes, octal modes, numbers, booleans,
 * "Q/W" rates, rule lines and class lines. See conf_value.h for the
 * contract shared by every function. Numbers are parsed by hand, digit by
 * digit with an explicit overflow bound, rather than with strtoll: strtoll
 * accepts leading blanks and signs, which a conf value must not have.
 */

#include "conf_value.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CV_INT_MAX 1000000000000000LL /* 10^15: far above any limit, far below 2^63 */

static const struct {
	const char *name;
	int64_t ms;
} cv_units[] = {
	{ "ms", 1 },
	{ "s", 1000 },
	{ "m", 60 * 1000 },
	{ "h", 3600 * 1000 },
};

/*
 * Parse the leading digits of s into *out and point *end after them.
 * Returns NULL, or an error when there is no digit, a sign, or overflow.
 */
static const char *cv_digits(const char *s, int64_t *out, const char **end)
{
	int64_t v = 0;
	const char *p = s;

	if (*p == '-')
		return "must not be negative";
	if (!isdigit((unsigned char)*p))
		return *p ? "not a number" : "empty value";
	for (; isdigit((unsigned char)*p); p++) {
		v = v * 10 + (*p - '0');
		if (v > CV_INT_MAX)
			return "number too large";
	}
	*out = v;
	*end = p;
	return NULL;
}

const char *cv_int(const char *s, int64_t *out)
{
	const char *end, *e;
	int64_t v;

	if ((e = cv_digits(s, &v, &end)) != NULL)
		return e;
	if (*end)
		return "trailing characters after the number";
	*out = v;
	return NULL;
}

/* The unit table lookup shared by cv_duration and cv_rate's bare units. */
static int64_t cv_unit_ms(const char *u)
{
	for (size_t i = 0; i < sizeof(cv_units) / sizeof(cv_units[0]); i++)
		if (strcmp(u, cv_units[i].name) == 0)
			return cv_units[i].ms;
	return 0;
}

const char *cv_duration(const char *s, int64_t *ms)
{
	const char *end, *e;
	int64_t v, unit;

	if ((e = cv_digits(s, &v, &end)) != NULL)
		return e;
	if (*end == '\0') {
		if (v != 0)
			return "a duration needs a unit (ms, s, m, h)";
		*ms = 0;
		return NULL;
	}
	if ((unit = cv_unit_ms(end)) == 0)
		return "unknown duration unit (ms, s, m, h)";
	if (v > CV_DURATION_MAX_MS / unit)
		return "duration too large";
	*ms = v * unit;
	return NULL;
}

const char *cv_size(const char *s, int64_t *bytes)
{
	static const struct {
		const char *name;
		int64_t mult;
	} units[] = {
		{ "", 1 },
		{ "k", 1024 },
		{ "K", 1024 },
		{ "KiB", 1024 },
		{ "m", 1024 * 1024 },
		{ "M", 1024 * 1024 },
		{ "MiB", 1024 * 1024 },
	};
	const char *end, *e;
	int64_t v;

	if ((e = cv_digits(s, &v, &end)) != NULL)
		return e;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(end, units[i].name) != 0)
			continue;
		if (v > CV_SIZE_MAX / units[i].mult)
			return "size too large";
		*bytes = v * units[i].mult;
		return NULL;
	}
	return "unknown size unit (k, KiB, m, MiB)";
}

const char *cv_octal(const char *s, int *mode)
{
	int v = 0;

	if (*s == '\0')
		return "empty value";
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '7')
			return "not an octal mode (like 0660)";
		v = v * 8 + (*p - '0');
		if (v > 0777)
			return "mode larger than 0777";
	}
	*mode = v;
	return NULL;
}

const char *cv_double(const char *s, double *out)
{
	char *end;
	double v;

	if (*s == '-')
		return "must not be negative";
	/* strtod would also take blanks, signs, hex, "inf" and "nan" */
	if (!isdigit((unsigned char)*s) && *s != '.')
		return *s ? "not a number" : "empty value";
	for (const char *p = s; *p; p++)
		if (!isdigit((unsigned char)*p) && *p != '.')
			return "not a decimal number";
	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end || errno || !isfinite(v))
		return "not a decimal number";
	*out = v;
	return NULL;
}

const char *cv_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "yes", "true", "on", "1" };
	static const char *const no[] = { "no", "false", "off", "0" };

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = true;
			return NULL;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = false;
			return NULL;
		}
	}
	return "not a boolean (yes/no, true/false, on/off, 1/0)";
}

const char *cv_rate(const char *s, int64_t *amount, int64_t *window_ms)
{
	const char *end, *e;
	int64_t a, w;

	if ((e = cv_digits(s, &a, &end)) != NULL)
		return e;
	if (*end != '/')
		return "expected AMOUNT/WINDOW (like 60/1m)";
	end++;
	/* "600/m": a bare unit means one of it */
	if ((w = cv_unit_ms(end)) == 0 && (e = cv_duration(end, &w)) != NULL)
		return e;
	if (w == 0)
		return "the window must be longer than 0";
	*amount = a;
	*window_ms = w;
	return NULL;
}

const char *cv_hostport(const char *s, char *host, size_t hostlen, int *port)
{
	const char *colon = strrchr(s, ':'), *h = s, *e;
	unsigned char addr[16];
	char buf[CV_HOST_MAX + 1];
	size_t hl;
	int64_t p;

	if (*s == '\0')
		return "empty value";
	if (colon == NULL)
		return "not HOST:PORT (e.g. 127.0.0.1:9464)";
	hl = (size_t)(colon - s);
	if (*s == '[') { /* [IPv6]:PORT */
		if (hl < 3 || s[hl - 1] != ']')
			return "an IPv6 address goes in brackets: [::1]:9464";
		h = s + 1;
		hl -= 2;
	}
	if (hl == 0)
		return "no host before the port (0.0.0.0 listens on every address)";
	if (hl > CV_HOST_MAX || hl >= hostlen)
		return "host name too long";
	memcpy(buf, h, hl);
	buf[hl] = '\0';
	if (h != s) {
		if (inet_pton(AF_INET6, buf, addr) != 1)
			return "not an IPv6 address in the brackets";
	} else if (strchr(buf, ':') != NULL) {
		return "an IPv6 address goes in brackets: [::1]:9464";
	} else {
		for (const char *q = buf; *q; q++)
			if (!isalnum((unsigned char)*q) && *q != '.' && *q != '-')
				return "not a host name or IPv4 address";
	}
	if ((e = cv_int(colon + 1, &p)) != NULL)
		return *(colon + 1) == '\0' ? "no port after the host" : "the port is not a number";
	if (p > 65535)
		return "the port must be between 0 and 65535";
	memcpy(host, buf, hl + 1);
	*port = (int)p;
	return NULL;
}

bool cv_name_ok(const char *s)
{
	size_t n = 0;

	for (; s[n]; n++)
		if (!isalnum((unsigned char)s[n]) && !strchr("_.-", s[n]))
			return false;
	return n >= 1 && n <= CV_NAME_MAX;
}

char *cv_normalise(const char *s)
{
	char *out = malloc(strlen(s) + 1), *o = out;

	if (out == NULL)
		return NULL;
	for (const char *p = s; *p;) {
		if (isspace((unsigned char)*p)) {
			while (isspace((unsigned char)*p))
				p++;
			if (o != out && *p)
				*o++ = ' ';
			continue;
		}
		*o++ = *p++;
	}
	*o = '\0';
	return out;
}

/*
 * Split a normalised copy into at most `max` space-separated words, in
 * place. Returns the number of words, or max + 1 when there are more.
 */
static size_t cv_words(char *buf, char **w, size_t max)
{
	size_t n = 0;

	for (char *p = buf; *p;) {
		if (n == max)
			return max + 1;
		w[n++] = p;
		if ((p = strchr(p, ' ')) == NULL)
			break;
		*p++ = '\0';
	}
	return n;
}

static const char *cv_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static const char *cv_errf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return err;
}

/* Check an amount-like number against 1..STRAT_MAX_AMOUNT. */
static const char *cv_amount(const char *word, const char *what, int64_t *out, char *err,
			     size_t errlen)
{
	const char *e;

	if ((e = cv_int(word, out)) != NULL)
		return cv_errf(err, errlen, "%s \"%s\": %s", what, word, e);
	if (*out < 1 || *out > STRAT_MAX_AMOUNT)
		return cv_errf(err, errlen, "%s must be between 1 and %lld", what,
			       (long long)STRAT_MAX_AMOUNT);
	return NULL;
}

/* The meter word: requests, tokens or tokens.NAME. */
static const char *cv_meter(const char *word, struct conf_rule *r, char *err, size_t errlen)
{
	if (strcmp(word, "requests") == 0) {
		r->meter = METER_REQUESTS;
	} else if (strcmp(word, "tokens") == 0) {
		r->meter = METER_TOKENS;
	} else if (strncmp(word, "tokens.", 7) == 0 && cv_name_ok(word + 7)) {
		r->meter = METER_TOKENS_KEY;
		if ((r->meter_key = strdup(word + 7)) == NULL)
			return cv_errf(err, errlen, "out of memory");
	} else {
		return cv_errf(err, errlen,
			       "unknown meter \"%s\" (requests, tokens, tokens.NAME, concurrency)",
			       word);
	}
	return NULL;
}

/* The words after the meter: [STRATEGY] AMOUNT/WINDOW [burst=N]. */
static const char *cv_rule_rate(char **w, size_t n, struct conf_rule *r, char *err, size_t errlen)
{
	size_t i = 0;
	int kind = STRAT_TOKEN_BUCKET;
	const char *e;

	if (i < n && strchr(w[i], '/') == NULL) {
		if ((kind = strat_kind_parse(w[i])) < 0)
			return cv_errf(err, errlen,
				       "unknown strategy \"%s\" (token-bucket, sliding-window, "
				       "fixed-window, leaky-bucket, session-window)",
				       w[i]);
		i++;
	}
	if (i >= n)
		return cv_errf(err, errlen, "missing AMOUNT/WINDOW");
	r->sp.kind = (enum strat_kind)kind;
	if ((e = cv_rate(w[i], &r->sp.amount, &r->sp.window_ms)) != NULL)
		return cv_errf(err, errlen, "\"%s\": %s", w[i], e);
	if (r->sp.amount < 1 || r->sp.amount > STRAT_MAX_AMOUNT)
		return cv_errf(err, errlen, "amount must be between 1 and %lld",
			       (long long)STRAT_MAX_AMOUNT);
	if (r->sp.window_ms > STRAT_MAX_WINDOW_MS)
		return cv_errf(err, errlen, "window must be at most 24h");
	i++;
	if (i < n && strncmp(w[i], "burst=", 6) == 0) {
		if (kind != STRAT_TOKEN_BUCKET && kind != STRAT_LEAKY_BUCKET)
			return cv_errf(err, errlen,
				       "burst= is only valid for token-bucket and leaky-bucket");
		if ((e = cv_amount(w[i] + 6, "burst", &r->sp.burst, err, errlen)) != NULL)
			return e;
		i++;
	}
	if (i < n)
		return cv_errf(err, errlen, "unexpected \"%s\"", w[i]);
	return NULL;
}

const char *cv_rule(const char *s, struct conf_rule *r, char *err, size_t errlen)
{
	char *text = cv_normalise(s), *buf = NULL, *w[6];
	struct conf_rule t = { 0 };
	const char *e = NULL;
	size_t n;

	if (text == NULL || (buf = strdup(text)) == NULL) {
		e = cv_errf(err, errlen, "out of memory");
		goto out;
	}
	n = cv_words(buf, w, 5);
	if (n == 0) {
		e = cv_errf(err, errlen, "empty rule (METER [STRATEGY] AMOUNT/WINDOW [burst=N])");
	} else if (n > 5) {
		e = cv_errf(err, errlen, "too many words in rule");
	} else if (strcmp(w[0], "concurrency") == 0) {
		t.meter = METER_CONCURRENCY;
		if (n != 2)
			e = cv_errf(err, errlen, "expected \"concurrency N\"");
		else
			e = cv_amount(w[1], "concurrency", &t.sp.amount, err, errlen);
	} else if ((e = cv_meter(w[0], &t, err, errlen)) == NULL) {
		e = cv_rule_rate(w + 1, n - 1, &t, err, errlen);
	}
	if (e == NULL) {
		r->meter = t.meter;
		r->meter_key = t.meter_key;
		r->sp = t.sp;
		r->text = text;
		text = NULL;
		t.meter_key = NULL;
	}
out:
	free(t.meter_key);
	free(text);
	free(buf);
	return e;
}

void cv_class_clear(struct cv_class *c)
{
	for (size_t i = 0; i < c->nnames; i++)
		free(c->names[i]);
	free(c->names);
	memset(c, 0, sizeof(*c));
}

const char *cv_percent_ppm(const char *s, int64_t *ppm)
{
	int64_t v = 0, scale = STRAT_FLOOR_WHOLE / 100; /* millionths per whole percent */
	const char *p = s;

	if (*p == '\0')
		return "empty value";
	if (!isdigit((unsigned char)*p))
		return "not a percentage";
	for (; isdigit((unsigned char)*p); p++)
		if ((v = v * 10 + (*p - '0')) > 100)
			return "must be at most 100%";
	v *= scale;
	if (*p == '.') {
		if (!isdigit((unsigned char)*++p))
			return "not a percentage";
		for (; isdigit((unsigned char)*p); p++) {
			if ((scale /= 10) == 0)
				return "at most 4 decimals";
			v += (*p - '0') * scale;
		}
	}
	if (*p != '\0')
		return "not a percentage";
	if (v > STRAT_FLOOR_WHOLE)
		return "must be at most 100%";
	*ppm = v;
	return NULL;
}

/* floor=N or floor=P% (the text after "floor=") into c. */
static const char *cv_class_floor(const char *v, struct cv_class *c, char *err, size_t errlen)
{
	size_t n = strlen(v);
	char pct[16];
	const char *e;

	if (n == 0 || v[n - 1] != '%') {
		if ((e = cv_int(v, &c->floor)) != NULL)
			return cv_errf(err, errlen, "floor \"%s\": %s", v, e);
		if (c->floor > STRAT_MAX_AMOUNT)
			return cv_errf(err, errlen, "floor must be at most %lld",
				       (long long)STRAT_MAX_AMOUNT);
		return NULL;
	}
	if (n > sizeof(pct)) {
		e = "not a percentage";
	} else {
		memcpy(pct, v, n - 1);
		pct[n - 1] = '\0';
		e = cv_percent_ppm(pct, &c->floor_ppm);
	}
	if (e != NULL)
		return cv_errf(err, errlen, "floor \"%s\": %s (want floor=P%%, 0 <= P < 100)", v,
			       e);
	if (c->floor_ppm >= STRAT_FLOOR_WHOLE)
		return cv_errf(err, errlen,
			       "floor=%s leaves nothing of any rule (want below 100%%)", v);
	return NULL;
}

/* priority=N (the text after "priority=") into c. */
static const char *cv_class_priority(const char *v, struct cv_class *c, char *err, size_t errlen)
{
	const char *e;
	int64_t n;
	bool neg = v[0] == '-';

	if ((e = cv_int(neg ? v + 1 : v, &n)) != NULL)
		return cv_errf(err, errlen, "priority \"%s\": %s (want %d..%d)", v, e,
			       CV_PRIORITY_MIN, CV_PRIORITY_MAX);
	if (neg)
		n = -n;
	if (n < CV_PRIORITY_MIN || n > CV_PRIORITY_MAX)
		return cv_errf(err, errlen, "priority \"%s\": out of range (want %d..%d)", v,
			       CV_PRIORITY_MIN, CV_PRIORITY_MAX);
	c->priority = n;
	return NULL;
}

const char *cv_class(const char *s, struct cv_class *c, char *err, size_t errlen)
{
	char *buf = cv_normalise(s), *p, *next;
	const char *e = NULL;
	bool seen_floor = false, seen_prio = false;

	memset(c, 0, sizeof(*c));
	if (buf == NULL)
		return cv_errf(err, errlen, "out of memory");
	for (p = *buf ? buf : NULL; p != NULL && e == NULL; p = next) {
		if ((next = strchr(p, ' ')) != NULL)
			*next++ = '\0';
		if (strncmp(p, "floor=", 6) == 0) {
			if (seen_floor)
				e = cv_errf(err, errlen, "floor= given twice");
			else
				e = cv_class_floor(p + 6, c, err, errlen);
			seen_floor = true;
			continue;
		}
		if (strncmp(p, "priority=", 9) == 0) {
			if (seen_prio)
				e = cv_errf(err, errlen, "priority= given twice");
			else
				e = cv_class_priority(p + 9, c, err, errlen);
			seen_prio = true;
			continue;
		}
		if (seen_floor || seen_prio) {
			e = cv_errf(err, errlen,
				    "floor= and priority= must come after the rule names");
			continue;
		}
		if (!cv_name_ok(p)) {
			e = cv_errf(err, errlen,
				    "bad rule name \"%s\" (want [A-Za-z0-9_.-], 1..64)", p);
			continue;
		}
		for (size_t i = 0; i < c->nnames && e == NULL; i++)
			if (strcmp(c->names[i], p) == 0)
				e = cv_errf(err, errlen, "rule \"%s\" listed twice", p);
		if (e != NULL)
			continue;
		char **nn = realloc(c->names, (c->nnames + 1) * sizeof(*nn));
		if (nn == NULL || (nn[c->nnames] = strdup(p)) == NULL) {
			if (nn != NULL)
				c->names = nn;
			e = cv_errf(err, errlen, "out of memory");
			continue;
		}
		c->names = nn;
		c->nnames++;
	}
	free(buf);
	if (e != NULL)
		cv_class_clear(c);
	return e;
}
