/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * redis_url.c - the Redis address grammar (see redis_url.h).
 *
 * Owns: scheme dispatch, userinfo splitting and %XX decoding, host/port
 * (with bracketed IPv6), the db number and the unix socket path. Works on
 * (pointer, length) slices of the input so nothing is allocated; every
 * field is bounded by its buffer and an over-long one is an error, never
 * a truncation.
 */

#include "redis_url.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* One input slice: [p, p + n). */
struct slice {
	const char *p;
	size_t n;
};

__attribute__((format(printf, 3, 4))) static int url_fail(char *err, size_t errlen, const char *fmt,
							  ...)
{
	va_list ap;

	if (err != NULL && errlen > 0) {
		int k = snprintf(err, errlen, "redis url: ");
		va_start(ap, fmt);
		if (k >= 0 && (size_t)k < errlen)
			vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
		va_end(ap);
	}
	return -1;
}

static bool starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Strict decimal: digits only, no sign, no spaces, value <= max. */
static bool parse_num(struct slice s, long max, long *out)
{
	long v = 0;

	if (s.n == 0)
		return false;
	for (size_t i = 0; i < s.n; i++) {
		if (s.p[i] < '0' || s.p[i] > '9')
			return false;
		v = v * 10 + (s.p[i] - '0');
		if (v > max)
			return false;
	}
	*out = v;
	return true;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* %XX-decode s into dst[cap]; false on a bad escape, NUL or overflow. */
static bool decode(struct slice s, char *dst, size_t cap)
{
	size_t o = 0;

	for (size_t i = 0; i < s.n; i++) {
		char c = s.p[i];
		if (c == '%') {
			int hi, lo;
			if (i + 2 >= s.n)
				return false;
			hi = hexval(s.p[i + 1]);
			lo = hexval(s.p[i + 2]);
			if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
				return false;
			c = (char)(hi * 16 + lo);
			i += 2;
		}
		if (o + 1 >= cap)
			return false;
		dst[o++] = c;
	}
	dst[o] = '\0';
	return true;
}

static bool copy_plain(struct slice s, char *dst, size_t cap)
{
	if (s.n + 1 > cap || memchr(s.p, '\0', s.n) != NULL)
		return false;
	memcpy(dst, s.p, s.n);
	dst[s.n] = '\0';
	return true;
}

/* "user[:password]" -> out->user, out->password. */
static int parse_userinfo(struct slice ui, struct redis_url *out, char *err, size_t errlen)
{
	const char *colon = memchr(ui.p, ':', ui.n);
	struct slice user = { ui.p, colon ? (size_t)(colon - ui.p) : ui.n };

	if (!decode(user, out->user, sizeof(out->user)))
		return url_fail(err, errlen, "bad user name (bad %%-escape or longer than %d)",
				REDIS_URL_USER_MAX - 1);
	if (colon != NULL) {
		struct slice pw = { colon + 1, ui.n - user.n - 1 };
		if (!decode(pw, out->password, sizeof(out->password)))
			return url_fail(err, errlen,
					"bad password (bad %%-escape or longer than %d)",
					REDIS_URL_PASS_MAX - 1);
	}
	return 0;
}

/* "host[:port]" or "[v6]:port" into host[hostcap] and *portp (kept when absent). */
static int parse_hostport(struct slice hp, char *hostbuf, size_t hostcap, int *portp, char *err,
			  size_t errlen)
{
	struct slice host = hp, port = { NULL, 0 };
	long v;

	if (hp.n > 0 && hp.p[0] == '[') {
		const char *rb = memchr(hp.p, ']', hp.n);
		if (rb == NULL)
			return url_fail(err, errlen, "missing ']' after IPv6 address");
		host.p = hp.p + 1;
		host.n = (size_t)(rb - hp.p) - 1;
		if (rb + 1 < hp.p + hp.n) {
			if (rb[1] != ':')
				return url_fail(err, errlen, "expected ':port' after ']'");
			port.p = rb + 2;
			port.n = (size_t)(hp.p + hp.n - port.p);
			if (port.n == 0)
				return url_fail(err, errlen, "empty port");
		}
	} else {
		const char *colon = memchr(hp.p, ':', hp.n);
		if (colon != NULL) {
			host.n = (size_t)(colon - hp.p);
			port.p = colon + 1;
			port.n = hp.n - host.n - 1;
			if (memchr(port.p, ':', port.n) != NULL)
				return url_fail(err, errlen,
						"an IPv6 address must be written in [brackets]");
			if (port.n == 0)
				return url_fail(err, errlen, "empty port");
		}
	}
	if (host.n == 0)
		return url_fail(err, errlen, "missing host");
	if (!copy_plain(host, hostbuf, hostcap))
		return url_fail(err, errlen, "host longer than %d", REDIS_URL_HOST_MAX - 1);
	if (port.p != NULL) {
		if (!parse_num(port, 65535, &v) || v == 0)
			return url_fail(err, errlen, "port must be a number in 1..65535");
		*portp = (int)v;
	}
	return 0;
}

/* The authority: up to the first '/', split at its last '@'. */
static int split_authority(struct slice rest, struct slice *ui, struct slice *hostpart,
			   struct redis_url *out, char *err, size_t errlen)
{
	const char *slash = memchr(rest.p, '/', rest.n);
	struct slice auth = { rest.p, slash ? (size_t)(slash - rest.p) : rest.n };
	const char *at = NULL;

	for (size_t i = auth.n; i > 0; i--) {
		if (auth.p[i - 1] == '@') {
			at = auth.p + i - 1;
			break;
		}
	}
	ui->p = auth.p;
	ui->n = 0;
	*hostpart = auth;
	if (at != NULL) {
		ui->n = (size_t)(at - auth.p);
		hostpart->p = at + 1;
		hostpart->n = auth.n - ui->n - 1;
		if (parse_userinfo(*ui, out, err, errlen) < 0)
			return -1;
	}
	return 0;
}

static int parse_tcp(struct slice rest, struct redis_url *out, char *err, size_t errlen)
{
	struct slice ui, hp, tail;
	long v;

	out->kind = REDIS_URL_TCP;
	if (split_authority(rest, &ui, &hp, out, err, errlen) < 0)
		return -1;
	if (parse_hostport(hp, out->host, sizeof(out->host), &out->port, err, errlen) < 0)
		return -1;
	memcpy(out->hosts[0].host, out->host, sizeof(out->host));
	out->hosts[0].port = out->port;
	out->nhosts = 1;
	tail.p = hp.p + hp.n;
	tail.n = (size_t)(rest.p + rest.n - tail.p);
	if (tail.n <= 1) /* "" or "/" */
		return 0;
	tail.p++;
	tail.n--;
	if (!parse_num(tail, 1000000, &v))
		return url_fail(err, errlen, "db must be a number after the last '/'");
	out->db = (int)v;
	return 0;
}

/* "key=value&key=value" for sentinel and cluster URLs: db (sentinel) and tls. */
static int parse_multi_query(struct slice q, struct redis_url *out, char *err, size_t errlen)
{
	while (q.n > 0) {
		const char *amp = memchr(q.p, '&', q.n);
		struct slice kv = { q.p, amp ? (size_t)(amp - q.p) : q.n }, val;
		long v;
		const char *eq = memchr(kv.p, '=', kv.n);
		if (eq == NULL)
			return url_fail(err, errlen, "query wants key=value");
		val.p = eq + 1;
		val.n = (size_t)(kv.p + kv.n - val.p);
		if ((size_t)(eq - kv.p) == 2 && memcmp(kv.p, "db", 2) == 0 &&
		    out->kind == REDIS_URL_SENTINEL) {
			if (!parse_num(val, 1000000, &v))
				return url_fail(err, errlen, "db must be a number in '?db=N'");
			out->db = (int)v;
		} else if ((size_t)(eq - kv.p) == 3 && memcmp(kv.p, "tls", 3) == 0) {
			if (!parse_num(val, 1, &v))
				return url_fail(err, errlen, "tls must be 0 or 1");
			out->tls = (int)v;
		} else {
			return url_fail(err, errlen, "unknown query key \"%.*s\" (want %s)",
					(int)(eq - kv.p), kv.p,
					out->kind == REDIS_URL_SENTINEL ? "db or tls" : "tls");
		}
		if (amp == NULL)
			break;
		q.n -= kv.n + 1;
		q.p = amp + 1;
		if (q.n == 0)
			return url_fail(err, errlen, "empty query after '&'");
	}
	return 0;
}

/*
 * redis+sentinel:// and redis+cluster://: a comma-separated host list, then
 * (sentinel) /MASTER, then an optional query.
 */
static int parse_multi(struct slice rest, struct redis_url *out, int defport, char *err,
		       size_t errlen)
{
	struct slice ui, hp, tail, query = { NULL, 0 };
	const char *q = memchr(rest.p, '?', rest.n);
	const char *kind = out->kind == REDIS_URL_SENTINEL ? "sentinel" : "cluster";

	if (q != NULL) {
		query.p = q + 1;
		query.n = (size_t)(rest.p + rest.n - query.p);
		rest.n = (size_t)(q - rest.p);
	}
	if (split_authority(rest, &ui, &hp, out, err, errlen) < 0)
		return -1;
	if (hp.n == 0)
		return url_fail(err, errlen, "no %s %s in the url", kind,
				out->kind == REDIS_URL_SENTINEL ? "host" : "seed node");
	while (hp.n > 0) {
		const char *comma = memchr(hp.p, ',', hp.n);
		struct slice one = { hp.p, comma ? (size_t)(comma - hp.p) : hp.n };
		struct redis_host *h;
		if (one.n == 0)
			return url_fail(err, errlen, "empty host in the %s host list", kind);
		if (out->nhosts == REDIS_URL_HOSTS_MAX)
			return url_fail(err, errlen, "more than %d hosts", REDIS_URL_HOSTS_MAX);
		h = &out->hosts[out->nhosts++];
		h->port = defport;
		if (parse_hostport(one, h->host, sizeof(h->host), &h->port, err, errlen) < 0)
			return -1;
		if (comma == NULL)
			break;
		hp.n -= one.n + 1;
		hp.p = comma + 1;
		if (hp.n == 0)
			return url_fail(err, errlen, "empty host in the %s host list", kind);
	}
	memcpy(out->host, out->hosts[0].host, sizeof(out->host));
	out->port = out->hosts[0].port;
	tail.p = hp.p + hp.n;
	tail.n = (size_t)(rest.p + rest.n - tail.p);
	if (tail.n > 0) {
		tail.p++; /* the '/' */
		tail.n--;
	}
	if (out->kind == REDIS_URL_SENTINEL) {
		if (tail.n == 0)
			return url_fail(err, errlen, "empty master name (want .../MASTERNAME)");
		if (!decode(tail, out->master, sizeof(out->master)) || strchr(out->master, '/'))
			return url_fail(err, errlen,
					"bad master name (bad %%-escape, '/', or longer than %d)",
					REDIS_URL_NAME_MAX - 1);
	} else if (tail.n > 0) {
		return url_fail(err, errlen,
				"a cluster has only db 0: nothing may follow the hosts");
	}
	return query.p != NULL ? parse_multi_query(query, out, err, errlen) : 0;
}

static int parse_query(struct slice q, struct redis_url *out, char *err, size_t errlen)
{
	long v;

	if (q.n < 3 || memcmp(q.p, "db=", 3) != 0)
		return url_fail(err, errlen, "unix url takes only '?db=N'");
	q.p += 3;
	q.n -= 3;
	if (!parse_num(q, 1000000, &v))
		return url_fail(err, errlen, "db must be a number in '?db=N'");
	out->db = (int)v;
	return 0;
}

static int parse_unix(struct slice rest, struct redis_url *out, char *err, size_t errlen)
{
	struct slice ui, hp, path;
	const char *q;

	out->kind = REDIS_URL_UNIX;
	out->port = 0;
	if (split_authority(rest, &ui, &hp, out, err, errlen) < 0)
		return -1;
	if (hp.n != 0)
		return url_fail(err, errlen, "unix url wants an absolute path: unix:///path");
	path.p = hp.p;
	path.n = (size_t)(rest.p + rest.n - path.p);
	q = memchr(path.p, '?', path.n);
	if (q != NULL) {
		struct slice query = { q + 1, (size_t)(path.p + path.n - q - 1) };
		path.n = (size_t)(q - path.p);
		if (parse_query(query, out, err, errlen) < 0)
			return -1;
	}
	if (path.n <= 1)
		return url_fail(err, errlen, "missing socket path");
	if (!copy_plain(path, out->path, sizeof(out->path)))
		return url_fail(err, errlen, "socket path longer than %d", REDIS_URL_PATH_MAX - 1);
	return 0;
}

int redis_url_parse(const char *url, struct redis_url *out, char *err, size_t errlen)
{
	static const char redis_scheme[] = "redis://";
	static const char rediss_scheme[] = "rediss://";
	static const char unix_scheme[] = "unix://";
	static const char sentinel_scheme[] = "redis+sentinel://";
	static const char cluster_scheme[] = "redis+cluster://";
	const char *sep;
	struct slice rest;

	memset(out, 0, sizeof(*out));
	out->port = 6379;
	if (url == NULL || url[0] == '\0')
		return url_fail(err, errlen, "empty");
	if (starts_with(url, redis_scheme)) {
		rest.p = url + sizeof(redis_scheme) - 1;
		rest.n = strlen(rest.p);
		return parse_tcp(rest, out, err, errlen);
	}
	if (starts_with(url, rediss_scheme)) {
		rest.p = url + sizeof(rediss_scheme) - 1;
		rest.n = strlen(rest.p);
		out->tls = 1;
		return parse_tcp(rest, out, err, errlen);
	}
	if (starts_with(url, sentinel_scheme)) {
		rest.p = url + sizeof(sentinel_scheme) - 1;
		rest.n = strlen(rest.p);
		out->kind = REDIS_URL_SENTINEL;
		return parse_multi(rest, out, 26379, err, errlen);
	}
	if (starts_with(url, cluster_scheme)) {
		rest.p = url + sizeof(cluster_scheme) - 1;
		rest.n = strlen(rest.p);
		out->kind = REDIS_URL_CLUSTER;
		return parse_multi(rest, out, 6379, err, errlen);
	}
	if (starts_with(url, unix_scheme)) {
		rest.p = url + sizeof(unix_scheme) - 1;
		rest.n = strlen(rest.p);
		return parse_unix(rest, out, err, errlen);
	}
	sep = strstr(url, "://");
	if (sep != NULL && sep - url <= 16 && memchr(url, '@', (size_t)(sep - url)) == NULL)
		return url_fail(err, errlen,
				"unsupported scheme \"%.*s\" (want redis://, rediss://, unix://, "
				"redis+sentinel:// or redis+cluster://)",
				(int)(sep - url), url);
	return url_fail(err, errlen,
			"must start with redis://, rediss://, unix://, "
			"redis+sentinel:// or redis+cluster://");
}

void redis_url_redact(const char *url, char *out, size_t outlen)
{
	const char *sep, *auth, *end, *at = NULL, *colon;

	if (outlen == 0)
		return;
	if (url == NULL) {
		out[0] = '\0';
		return;
	}
	sep = strstr(url, "://");
	auth = sep != NULL ? sep + 3 : url;
	/* The authority ends at the first '/' or '?'; its last '@' ends the
	 * userinfo (a password may hold '@', as the parser allows). */
	end = auth + strcspn(auth, "/?");
	for (const char *p = auth; p < end; p++)
		if (*p == '@')
			at = p;
	colon = at != NULL ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
	if (colon == NULL) {
		snprintf(out, outlen, "%s", url);
		return;
	}
	snprintf(out, outlen, "%.*s***%s", (int)(colon + 1 - url), url, at);
}
