/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * proto_upstream.c - reading what an upstream says, for the codec's callers.
 *
 * Owns: the host of a target URL (proto_url_host) and an HTTP Retry-After
 * value, delta-seconds or HTTP-date (proto_parse_retry_after). Both are pure
 * string functions; the decoder uses them on a target's url (the key) and a
 * penalize's retry_after.
 */

#include "proto.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool proto_url_host(const char *url, char *host, size_t hostlen)
{
	const char *p = strstr(url, "://"), *end, *at;
	size_t n, i;

	p = p ? p + 3 : (strncmp(url, "//", 2) == 0 ? url + 2 : NULL);
	if (p == NULL)
		return false;
	end = p + strcspn(p, "/?#");
	at = memchr(p, '@', (size_t)(end - p));
	while (at != NULL) { /* the host follows the last '@' of the authority */
		p = at + 1;
		at = memchr(p, '@', (size_t)(end - p));
	}
	if (*p == '[') {
		const char *rb = memchr(p, ']', (size_t)(end - p));
		if (rb == NULL)
			return false;
		p++;
		end = rb;
	} else {
		const char *colon = memchr(p, ':', (size_t)(end - p));
		if (colon)
			end = colon;
	}
	n = (size_t)(end - p);
	if (n == 0 || n >= hostlen)
		return false;
	for (i = 0; i < n; i++)
		host[i] = (char)tolower((unsigned char)p[i]);
	host[n] = '\0';
	return true;
}

bool proto_parse_retry_after(const char *s, int64_t *delay_ms, int64_t *until_wall_ms)
{
	static const char *const fmts[] = {
		"%a, %d %b %Y %H:%M:%S GMT", /* IMF-fixdate, RFC 9110 preferred */
		"%A, %d-%b-%y %H:%M:%S GMT", /* obsolete RFC 850 */
		"%a %b %e %H:%M:%S %Y",	     /* obsolete asctime */
	};
	struct tm tm;
	size_t i;
	char *end;
	long long v;

	while (isspace((unsigned char)*s))
		s++;
	if (isdigit((unsigned char)*s)) {
		v = strtoll(s, &end, 10);
		while (isspace((unsigned char)*end))
			end++;
		if (*end != '\0' || v < 0)
			return false;
		/* strtoll saturates on overflow; the cap applies either way */
		*delay_ms = v > PROTO_MAX_TIMEOUT_MS / 1000 ? PROTO_MAX_TIMEOUT_MS : v * 1000;
		return true;
	}
	for (i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++) {
		const char *rest;
		memset(&tm, 0, sizeof(tm));
		rest = strptime(s, fmts[i], &tm);
		if (rest != NULL && *rest == '\0') {
			*delay_ms = -1;
			*until_wall_ms = (int64_t)timegm(&tm) * 1000;
			return true;
		}
	}
	return false;
}
