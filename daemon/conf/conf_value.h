/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * conf_value.h - pure parsers for the values written in admitd.conf.
 *
 * Owns: the syntax of one value (a duration, a size, an octal mode, a
 * "Q/W" rate, a rule line, a class line, a name). Nothing here knows about
 * sections, keys, line numbers or defaults (that is conf_load.c), and nothing
 * here does I/O, so every function is a function of its input and can be
 * unit-tested and fuzzed on its own.
 *
 * Conventions: every cv_* parser takes the whole value (already trimmed by
 * the INI reader), rejects leading signs and trailing garbage, and returns
 * NULL on success or a static, lower-case message on failure (the caller
 * prefixes "file:line: key: "). On failure the outputs are left untouched,
 * except where a function says it clears them.
 */

#ifndef ADMITD_CONF_VALUE_H
#define ADMITD_CONF_VALUE_H

#include "conf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CV_NAME_MAX	   64			      /* scope, class, rule and meter names */
#define CV_QUOTA_MAX	   100000LL		      /* instants kept per key for `quota` */
#define CV_DURATION_MAX_MS (366LL * 24 * 3600 * 1000) /* sanity cap: a year */
#define CV_SIZE_MAX	   (1LL << 40)		      /* sanity cap: 1 TiB */

/* cv_int - a decimal integer >= 0: digits only, at most 10^15. */
const char *cv_int(const char *s, int64_t *out);

/*
 * cv_duration - "0" or digits followed by one unit: ms, s, m or h
 * ("250ms", "2s", "1m", "1h"). A bare number other than 0 is an error,
 * because "30" could mean seconds or milliseconds.
 */
const char *cv_duration(const char *s, int64_t *ms);

/* cv_size - bytes: "65536", "64k", "64K", "64KiB", "1m", "1M", "1MiB". */
const char *cv_size(const char *s, int64_t *bytes);

/* cv_octal - a file mode in octal digits ("0660", "660"), at most 0777. */
const char *cv_octal(const char *s, int *mode);

/* cv_double - a finite decimal number >= 0 ("0.2", "1", "2.5"). */
const char *cv_double(const char *s, double *out);

/* cv_bool - yes/no, true/false, on/off, 1/0 (any case). */
const char *cv_bool(const char *s, bool *out);

/*
 * cv_rate - "AMOUNT/WINDOW": AMOUNT as cv_int, WINDOW as cv_duration or a
 * bare unit meaning one of it ("600/m" is 600 per minute). The window must
 * be > 0; the caller checks ranges, which differ between rules and quota.
 */
const char *cv_rate(const char *s, int64_t *amount, int64_t *window_ms);

/*
 * cv_hostport - "HOST:PORT" for a TCP listener: HOST an IPv4 address, an
 * IPv6 address in brackets ("[::1]") or a host name; PORT 0..65535 (0: any
 * free port). host gets HOST without brackets (hostlen bytes at most,
 * NUL included) and *port the number.
 */
#define CV_HOST_MAX 255
const char *cv_hostport(const char *s, char *host, size_t hostlen, int *port);

/* cv_name_ok - a scope, class, rule or meter name: [A-Za-z0-9_.-]{1,64}. */
bool cv_name_ok(const char *s);

/*
 * cv_normalise - a malloc'd copy of s with leading and trailing whitespace
 * removed and every inner run of whitespace replaced by one space. NULL
 * only when out of memory. The caller frees.
 */
char *cv_normalise(const char *s);

/*
 * cv_rule - parse "METER [STRATEGY] AMOUNT/WINDOW [burst=N]" or
 * "concurrency N" into r->meter, r->meter_key (malloc'd for tokens.NAME),
 * r->sp and r->text (malloc'd, whitespace-normalised). r->name and r->line
 * are not touched. STRATEGY defaults to token-bucket; burst is only valid
 * for token-bucket and leaky-bucket. AMOUNT, burst and N are 1..10^9,
 * WINDOW 1ms..1 day. Returns NULL, or an error message written into err
 * (errlen bytes) and returned; on error nothing is left allocated in r.
 * Out of memory is reported as the message "out of memory".
 */
const char *cv_rule(const char *s, struct conf_rule *r, char *err, size_t errlen);

/* The parsed form of "RULENAME... [floor=N | floor=P%] [priority=N]"; names are malloc'd. */
struct cv_class {
	char **names;
	size_t nnames;
	int64_t floor;	   /* floor=N: units */
	int64_t floor_ppm; /* floor=P%: millionths of each rule's capacity; 0: none */
	int64_t priority;  /* priority=N: CV_PRIORITY_MIN..CV_PRIORITY_MAX; 0: none given */
};

/* The range of a class's priority=N (higher is served first). */
#define CV_PRIORITY_MIN (-1000)
#define CV_PRIORITY_MAX 1000

/*
 * cv_percent_ppm - parse "P" (the part of "P%" before the sign), a whole
 * or decimal percentage 0..100 with at most 4 decimals, into millionths
 * (10.5 -> 105000), exactly. NULL, or an error message.
 */
const char *cv_percent_ppm(const char *s, int64_t *ppm);

/*
 * cv_class - parse a class value: zero or more rule names (each a valid,
 * distinct name), then, in either order and each at most once, an optional
 * floor=N (0..10^9) or floor=P% (0 <= P < 100, at most 4 decimals) and an
 * optional priority=N (CV_PRIORITY_MIN..CV_PRIORITY_MAX). Same error convention as cv_rule; on
 * error *c is left empty.
 */
const char *cv_class(const char *s, struct cv_class *c, char *err, size_t errlen);

/* cv_class_clear - free what cv_class allocated and zero *c. */
void cv_class_clear(struct cv_class *c);

#endif
