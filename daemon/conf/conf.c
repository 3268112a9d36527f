/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * conf.c - load admitd.conf into an immutable, validated struct conf.
 *
 * Owns: the option tables (one per section: name, type, offset, default as
 * the user would write it, min, max, flags, help), the generic walker that
 * applies defaults and values from them, our line reader for libinih, the
 * cross-key validation pass, and error reporting as "file:line: message"
 * for every problem in the file, not only the first. The syntax of each
 * value is conf_value.c's; what the daemon does with the snapshot is not
 * this file's business.
 *
 * Why our own reader: libinih 55 reads into a fixed 200-byte buffer and
 * counts one line per reader call, so a longer physical line becomes
 * several "lines" and the tail is parsed as garbage or as a continuation.
 * It also reports only the first syntax error, truncates section names to
 * 50 bytes and never tells the handler its line number (INI_HANDLER_LINENO
 * is a compile-time switch the packaged library does not use; defining it
 * here would break the ABI). So conf_reader hands libinih one physical line
 * per call and keeps the physical line number; it also handles what libinih
 * would get wrong or report vaguely: over-long lines, section headers
 * (parsed here in full, then hidden from libinih), lines that are neither
 * a section nor "key = value", NUL bytes, and leading whitespace (stripped,
 * so an indented line is never glued to the previous value as a
 * configparser-style continuation). libinih is left to split "key = value"
 * (or "key: value"), trim both, and strip inline comments, which start at
 * a ';' preceded by whitespace ('#' only starts a whole-line comment).
 */

#include "conf.h"

#include "admit_proto.h"
#include "conf_value.h"
#include "redis_url.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <math.h>
#include <ini.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CONF_FILE_MAX	(1024 * 1024) /* a conf larger than this is a mistake */
#define CONF_SOCKET_MAX 107	      /* sizeof(sun_path) - 1 */

/* ---- option tables ---------------------------------------------------- */

enum conf_type {
	CT_STRING,	/* any non-empty text */
	CT_FILE,	/* a path the daemon reads: readable when the conf is loaded */
	CT_SOCKET,	/* a Unix socket path that fits sun_path */
	CT_URL,		/* a Redis URL, or empty for local mode */
	CT_HOSTPORT,	/* HOST:PORT of a TCP listener, or empty for none */
	CT_PREFIX,	/* a Redis key prefix: no blanks, no hash-tag braces */
	CT_NAME,	/* [A-Za-z0-9_.-]{1,64} */
	CT_OCTAL,	/* file mode */
	CT_INT,		/* int64, min..max */
	CT_SIZE,	/* int64 bytes, min..max */
	CT_DURATION,	/* int64 ms, min..max */
	CT_DOUBLE,	/* double, min..max */
	CT_BOOL,	/* bool */
	CT_LOG_LEVEL,	/* char *, one of log_levels */
	CT_FAIL_MODE,	/* enum conf_fail_mode */
	CT_QUOTA,	/* scope: quota, quota_window_ms, quota_text */
	CT_DIVISOR,	/* scope: fallback_divisor, fallback_divisor_auto */
	CT_RULE,	/* scope: appends to rules */
	CT_CLASS,	/* scope: appends to classes */
	CT_UIDS,	/* struct conf_ids: user names or uids, space separated */
	CT_GIDS,	/* struct conf_ids: group names or gids, space separated */
	CT_GROUP,	/* int64 gid: one group name or gid */
	CT_ADAPT_FLOOR, /* scope: adaptive_floor_n, adaptive_floor_w_ms */
	CT_ADAPT_STEP,	/* scope: adaptive_increase_pct, or _n and _w_ms */
	CT__COUNT
};

#define CONF_F_REPEATABLE   0x01 /* may appear more than once in a section */
#define CONF_F_ARG	    0x02 /* "key NAME = ..." allowed */
#define CONF_F_ARG_REQUIRED 0x04
#define CONF_F_EMPTY_NULL   0x08 /* an empty value means "unset" (NULL) */
/* How a reload applies a changed [admitd] key (conf_reload_keys). A key with
 * neither flag needs a restart, and the running value is kept: a key added
 * without thought for reloads is safe by default. (A key of a type with no
 * comparison, CS_OTHER, allow_uids and allow_gids, is taken from the new conf
 * without a word: both are read at each accept, and a reload checks the open
 * connections against them.) */
#define CONF_F_LIVE  0x10 /* read where it is used: the new value applies at once */
#define CONF_F_REDIS 0x20 /* the Redis connections are remade with it */

struct conf_key {
	const char *name;
	enum conf_type type;
	size_t offset;
	const char *def; /* as a user would write it; NULL: no default */
	int64_t min, max;
	unsigned flags;
	const char *help;
};

#define MS_SEC	      1000LL
#define MS_MIN	      (60 * MS_SEC)
#define MS_HOUR	      (60 * MS_MIN)
#define MS_DAY	      (24 * MS_HOUR)
#define ADMITD_OFF(f) offsetof(struct conf, f)
#define SCOPE_OFF(f)  offsetof(struct conf_scope, f)

static const struct conf_key conf_admitd_keys[] = {
	{ "socket", CT_SOCKET, ADMITD_OFF(socket), ADMIT_DEFAULT_SOCKET, 0, 0, 0,
	  "path of the Unix socket clients connect to" },
	{ "socket_mode", CT_OCTAL, ADMITD_OFF(socket_mode), "0660", 0, 0777, 0,
	  "permissions of the socket (octal)" },
	{ "redis", CT_URL, ADMITD_OFF(redis), NULL, 0, 0, CONF_F_EMPTY_NULL | CONF_F_REDIS,
	  "redis://[user[:pass]@]host[:port][/db], rediss://... (TLS), unix:///path, "
	  "redis+sentinel://H1:P1,H2:P2/MASTER[?db=N&tls=1] or "
	  "redis+cluster://H1:P1,H2:P2[?tls=1]; "
	  "absent or empty: local mode" },
	{ "prefix", CT_PREFIX, ADMITD_OFF(prefix), "admitd", 0, 0, 0,
	  "namespace of every Redis key (PREFIX:{SCOPE:KEY}:...)" },
	{ "max_line", CT_SIZE, ADMITD_OFF(max_line), "64KiB", 1024, 16 * 1024 * 1024, CONF_F_LIVE,
	  "longest request line; longer gets line_too_long and the connection closes" },
	{ "max_connections", CT_INT, ADMITD_OFF(max_connections), "1024", 1, 1000000, CONF_F_LIVE,
	  "client connections served at once" },
	{ "client_write_timeout", CT_DURATION, ADMITD_OFF(client_write_timeout_ms), "10s", 100,
	  MS_HOUR, CONF_F_LIVE,
	  "a client with replies pending that takes none of them for this long is disconnected" },
	{ "redis_pool", CT_INT, ADMITD_OFF(redis_pool), "2", 1, 64, CONF_F_REDIS,
	  "connections to Redis" },
	{ "redis_batch", CT_INT, ADMITD_OFF(redis_batch), "32", 1, 256, CONF_F_REDIS,
	  "acquires of different keys that one pass of the event loop sends on one Redis "
	  "connection go in one call, each decided alone, at most this many (1: a call each; "
	  "not in a Cluster)" },
	{ "redis_refusal_hold", CT_DURATION, ADMITD_OFF(redis_refusal_hold_ms), "1s", 0, MS_MIN,
	  CONF_F_LIVE,
	  "a refusal Redis gave a key (a wait no release can shorten) is given again here, "
	  "with no call, until that wait ends but for at most this long: a reset or override "
	  "through another daemon reaches this one within it (0: every acquire asks Redis)" },
	{ "redis_book_ahead", CT_DURATION, ADMITD_OFF(redis_book_ahead_ms), "5ms", 0, MS_SEC,
	  CONF_F_LIVE,
	  "a key this daemon takes fast, under a token or leaky bucket and nothing else, has "
	  "what it will take in this long booked in Redis with the call that admits it, and "
	  "handed out here with no call; what is not handed out within it goes back (0: "
	  "every acquire asks Redis)" },
	{ "redis_functions", CT_BOOL, ADMITD_OFF(redis_functions), "yes", 0, 0, CONF_F_REDIS,
	  "load the scripts as one function library and FCALL them (Redis 7); no, or a Redis "
	  "that refuses FUNCTION LOAD: EVALSHA" },
	{ "fallback_pods", CT_INT, ADMITD_OFF(fallback_pods), "1", 1, 1000000, CONF_F_LIVE,
	  "fallback_divisor = auto divides by this until a heartbeat has counted the daemons "
	  "alive (a daemon started during an outage has seen none), and by no fewer while "
	  "they fill the count again (5 s after a daemon's first beat or Redis losing its data)" },
	{ "redis_timeout", CT_DURATION, ADMITD_OFF(redis_timeout_ms), "250ms", 1, MS_MIN,
	  CONF_F_REDIS,
	  "per Redis operation and connect; past it the request is served by fail_mode" },
	{ "redis_password_file", CT_FILE, ADMITD_OFF(redis_password_file), NULL, 0, 0,
	  CONF_F_EMPTY_NULL | CONF_F_REDIS,
	  "file holding the Redis password (AUTH); unset: no AUTH" },
	{ "redis_user", CT_STRING, ADMITD_OFF(redis_user), NULL, 0, 0,
	  CONF_F_EMPTY_NULL | CONF_F_REDIS, "Redis ACL user for AUTH; unset: the default user" },
	{ "sentinel_password_file", CT_FILE, ADMITD_OFF(sentinel_password_file), NULL, 0, 0,
	  CONF_F_EMPTY_NULL | CONF_F_REDIS,
	  "file holding the sentinels' password (AUTH); unset: no AUTH" },
	{ "redis_tls_ca_file", CT_STRING, ADMITD_OFF(redis_tls_ca_file), NULL, 0, 0,
	  CONF_F_EMPTY_NULL | CONF_F_REDIS,
	  "PEM CA certificates the Redis server's chain must lead to; unset: "
	  "the system store" },
	{ "redis_tls_cert_file", CT_STRING, ADMITD_OFF(redis_tls_cert_file), NULL, 0, 0,
	  CONF_F_EMPTY_NULL | CONF_F_REDIS,
	  "PEM client certificate (chain) for servers that ask for one" },
	{ "redis_tls_key_file", CT_STRING, ADMITD_OFF(redis_tls_key_file), NULL, 0, 0,
	  CONF_F_EMPTY_NULL | CONF_F_REDIS,
	  "PEM key of redis_tls_cert_file; unset: in the certificate file" },
	{ "redis_tls_server_name", CT_STRING, ADMITD_OFF(redis_tls_server_name), NULL, 0, 0,
	  CONF_F_EMPTY_NULL | CONF_F_REDIS,
	  "name the server certificate must show (and SNI); unset: the host "
	  "connected to" },
	{ "redis_tls_verify", CT_BOOL, ADMITD_OFF(redis_tls_verify), "yes", 0, 0, CONF_F_REDIS,
	  "verify the server certificate's chain and name; `no` accepts any certificate" },
	{ "log_level", CT_LOG_LEVEL, ADMITD_OFF(log_level), "info", 0, 0, CONF_F_LIVE,
	  "least severe level logged" },
	{ "watch_conf", CT_BOOL, ADMITD_OFF(watch_conf), "no", 0, 0, CONF_F_LIVE,
	  "reload when the conf file changes, as on SIGHUP (its directory is watched, so a "
	  "Kubernetes ConfigMap's symlink swap is seen)" },
	{ "metrics", CT_HOSTPORT, ADMITD_OFF(metrics), NULL, 0, 0, CONF_F_EMPTY_NULL,
	  "HOST:PORT serving /metrics (Prometheus), /healthz and /readyz over HTTP; absent or "
	  "empty: off" },
	{ "metrics_timeout", CT_DURATION, ADMITD_OFF(metrics_timeout_ms), "10s", 100, MS_MIN, 0,
	  "an HTTP client must send each request whole within this of connecting or of its "
	  "previous reply (taking that reply included), however slowly it trickles; else it is "
	  "closed" },
	{ "socket_group", CT_GROUP, ADMITD_OFF(socket_group), NULL, 0, 0, 0,
	  "group the socket is given (with socket_mode 0660: the group's members may connect); "
	  "unset: the daemon's group" },
	{ "allow_uids", CT_UIDS, ADMITD_OFF(allow_uids), NULL, 0, 0, CONF_F_LIVE,
	  "only peers running as one of these users may connect (checked with SO_PEERCRED); "
	  "refused: one forbidden line, then closed; unset: anyone the socket's mode lets in" },
	{ "allow_gids", CT_GIDS, ADMITD_OFF(allow_gids), NULL, 0, 0, CONF_F_LIVE,
	  "... or whose group or a supplementary group is one of these (with allow_uids: "
	  "either lets a peer in)" },
	{ "max_keys", CT_INT, ADMITD_OFF(max_keys), "100000", 1, 1000000000, CONF_F_LIVE,
	  "keys of all scopes kept in memory; when full, the least recently used key with "
	  "nothing held or waiting is forgotten (its in-process state with it), a key under an "
	  "override in force only after every key without one, and in local mode never (its "
	  "override would be lost; with Redis only the fallback's copy goes); when none can "
	  "be, a new key (an override's too) is refused unavailable" },
	{ "max_leases", CT_INT, ADMITD_OFF(max_leases), "100000", 1, 100000000, CONF_F_LIVE,
	  "leases held through this daemon at once (detached ones included); beyond it an "
	  "acquire is refused unavailable" },
	{ NULL, 0, 0, NULL, 0, 0, 0, NULL },
};

static const struct conf_key conf_scope_keys[] = {
	{ "max_concurrent", CT_INT, SCOPE_OFF(max_concurrent), "0", 0, 1000000, 0,
	  "leases of one key held at once through this daemon (0: unlimited); raised to "
	  "cluster_concurrency when nonzero and smaller" },
	{ "min_delay", CT_DURATION, SCOPE_OFF(min_delay_ms), "0", 0, MS_DAY, 0,
	  "spacing of admissions per key: from the previous release (cluster_concurrency 0: "
	  "one at a time; 1: one in flight across all daemons) or from the previous admission "
	  "(cluster_concurrency > 1)" },
	{ "cluster_concurrency", CT_INT, SCOPE_OFF(cluster_concurrency), "0", 0, 1000000, 0,
	  "leases of one key held at once across all daemons (0: none)" },
	{ "quota", CT_QUOTA, SCOPE_OFF(quota), NULL, 0, 0, 0,
	  "at most Q admissions per key in any interval of length W (e.g. 60/1m)" },
	{ "jitter", CT_DOUBLE, SCOPE_OFF(jitter), "0", 0, 1, 0,
	  "a nonzero wait is stretched by a random 0..F of itself" },
	{ "rule", CT_RULE, SCOPE_OFF(rules), NULL, 0, 0, CONF_F_REPEATABLE | CONF_F_ARG,
	  "METER [STRATEGY] AMOUNT/WINDOW [burst=N], or concurrency N; `rule NAME = ...` "
	  "applies only to classes listing NAME" },
	{ "class", CT_CLASS, SCOPE_OFF(classes), NULL, 0, 0,
	  CONF_F_REPEATABLE | CONF_F_ARG | CONF_F_ARG_REQUIRED,
	  "`class NAME = RULENAME... [floor=N|floor=P%]`: the named rules this class is held to; "
	  "floor=N leaves each rule's last N units to others, floor=P% the last P% of each rule's "
	  "own capacity (rounded down)" },
	{ "default_class", CT_NAME, SCOPE_OFF(default_class), NULL, 0, 0, 0,
	  "class of a request that names none" },
	{ "timeout", CT_DURATION, SCOPE_OFF(timeout_ms), "30s", 0, MS_HOUR, 0,
	  "default wait budget of an acquire" },
	{ "lease_ttl", CT_DURATION, SCOPE_OFF(lease_ttl_ms), "60s", 1, MS_DAY, 0,
	  "a lease never released frees its slot after this" },
	{ "concurrency_retry", CT_DURATION, SCOPE_OFF(concurrency_retry_ms), "25ms", 1, MS_MIN, 0,
	  "how soon a waiter asks again when a cluster-wide cap is full" },
	{ "fallback_divisor", CT_DIVISOR, SCOPE_OFF(fallback_divisor), "auto", 1, 1000000, 0,
	  "while Redis is unreachable, limits are divided by this; auto: by the daemons seen "
	  "alive before the outage (fallback_pods before any was seen)" },
	{ "key", CT_STRING, SCOPE_OFF(default_key), NULL, 0, 0, 0,
	  "key used when a request gives neither key nor url" },
	{ "shadow", CT_BOOL, SCOPE_OFF(shadow), "no", 0, 0, 0,
	  "admit everything, but report shadow_limited where a refusal would have been" },
	{ "fail_mode", CT_FAIL_MODE, SCOPE_OFF(fail_mode), "fallback", 0, 0, 0,
	  "when the backend cannot decide: fallback (in-process limits), open (admit), closed "
	  "(refuse with unavailable)" },
	{ "max_waiters", CT_INT, SCOPE_OFF(max_waiters), "1024", 1, 1000000, 0,
	  "acquires waiting in this scope at once; more get too_many_waiters" },
	{ "adaptive", CT_BOOL, SCOPE_OFF(adaptive), "no", 0, 0, 0,
	  "learn each key's rate from the outcomes releases report: the requests rules move "
	  "between adaptive_floor and their configured amount (the ceiling), shared by every "
	  "daemon on the Redis" },
	{ "adaptive_floor", CT_ADAPT_FLOOR, SCOPE_OFF(adaptive_floor_n), NULL, 0, 0, 0,
	  "N/W: the least rate adaptive lowers a key to (required with adaptive = yes; below "
	  "the first requests rule's rate)" },
	{ "adaptive_decrease", CT_DOUBLE, SCOPE_OFF(adaptive_decrease), "0.8", 0, 1, 0,
	  "a limited outcome multiplies the key's amount by this (above 0, below 1), at most "
	  "once per adaptive_interval" },
	{ "adaptive_increase", CT_ADAPT_STEP, SCOPE_OFF(adaptive_increase_pct), "2%", 0, 0, 0,
	  "P% of the ceiling, or a rate N/W: what an adaptive_interval of ok outcomes with no "
	  "limited one adds to the key's amount" },
	{ "adaptive_interval", CT_DURATION, SCOPE_OFF(adaptive_interval_ms), "1s", 10, MS_HOUR, 0,
	  "at most one decrease, and one increase, of a key's amount per interval" },
	{ "override_max", CT_DOUBLE, SCOPE_OFF(override_max), "0", 0, 1000, 0,
	  "the scope takes per-key overrides (the override op, shared by every daemon on the "
	  "Redis): they may tighten freely, and loosen rule amounts up to F times the conf's "
	  "and min_delay down to the conf's / F (1: tighten only; 0: no overrides)" },
	{ NULL, 0, 0, NULL, 0, 0, 0, NULL },
};

#define CONF_ADMITD_NKEYS (sizeof(conf_admitd_keys) / sizeof(conf_admitd_keys[0]) - 1)
#define CONF_SCOPE_NKEYS  (sizeof(conf_scope_keys) / sizeof(conf_scope_keys[0]) - 1)

/* ---- parse state ------------------------------------------------------- */

enum conf_sect { SECT_NONE = 0, SECT_ADMITD, SECT_SCOPE, SECT_IGNORED };

/* Per-scope state that only the parse needs. */
struct conf_pscope {
	int seen[CONF_SCOPE_NKEYS]; /* line each key was set at; 0 = not set */
	struct cv_class *pend;	    /* parallel to scope->classes: names to resolve */
};

struct conf_ctx {
	struct conf *c;
	const char *name; /* file name in messages */
	FILE *errf;
	int nerrors;
	int lineno; /* physical line being parsed */
	enum conf_sect sect;
	size_t scope;	 /* SECT_SCOPE: index into c->scopes */
	int admitd_line; /* line of [admitd]; 0 = not seen */
	int bad_headers; /* section headers refused (a scope's among them, maybe) */
	int admitd_seen[CONF_ADMITD_NKEYS];
	struct conf_pscope *ps; /* parallel to c->scopes */
	const char *keyname;	/* the key being set, for messages */
	char errbuf[256];	/* setters format messages here */
	/* the reader's input */
	const char *p, *end;
};

static void conf_err(struct conf_ctx *x, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Report one problem; line 0 means "not about a line". */
static void conf_err(struct conf_ctx *x, int line, const char *fmt, ...)
{
	va_list ap;

	x->nerrors++;
	if (x->errf == NULL)
		return;
	if (line > 0)
		fprintf(x->errf, "%s:%d: ", x->name, line);
	else
		fprintf(x->errf, "%s: ", x->name);
	va_start(ap, fmt);
	vfprintf(x->errf, fmt, ap);
	va_end(ap);
	fputc('\n', x->errf);
}

static const char *conf_fmt(struct conf_ctx *x, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Format a setter's message into the context's buffer and return it. */
static const char *conf_fmt(struct conf_ctx *x, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(x->errbuf, sizeof(x->errbuf), fmt, ap);
	va_end(ap);
	return x->errbuf;
}

/* "1500ms" / "2s" / "1m": the largest unit that divides ms exactly. */
static void conf_fmt_duration(char *buf, size_t len, int64_t ms)
{
	static const struct {
		int64_t ms;
		const char *unit;
	} u[] = { { MS_HOUR, "h" }, { MS_MIN, "m" }, { MS_SEC, "s" } };

	for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++) {
		if (ms != 0 && ms % u[i].ms == 0) {
			snprintf(buf, len, "%lld%s", (long long)(ms / u[i].ms), u[i].unit);
			return;
		}
	}
	snprintf(buf, len, ms == 0 ? "0" : "%lldms", (long long)ms);
}

/* ---- setters: one per type; NULL or a message ------------------------- */

#define FIELD(base, k, T) ((T *)(void *)((char *)(base) + (k)->offset))

typedef const char *(*conf_setter)(struct conf_ctx *x, const struct conf_key *k, void *base,
				   const char *arg, const char *val);

/* Replace an owned string field; empty means NULL when the key allows it. */
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

static void conf_rule_clear(struct conf_rule *r)
{
	free(r->name);
	free(r->text);
	free(r->meter_key);
}

static const char *conf_set_rule(struct conf_ctx *x, const struct conf_key *k, void *base,
				 const char *arg, const char *val)
{
	struct conf_scope *s = base;
	struct conf_rule r = { 0 }, *nr;
	const char *e;

	(void)k;
	if (arg != NULL) {
		if (!cv_name_ok(arg))
			return "bad rule name ([A-Za-z0-9_.-], 1 to 64 characters)";
		for (size_t i = 0; i < s->nrules; i++)
			if (s->rules[i].name && strcmp(s->rules[i].name, arg) == 0)
				return conf_fmt(x, "rule \"%s\" already defined at line %d", arg,
						s->rules[i].line);
	}
	if ((e = cv_rule(val, &r, x->errbuf, sizeof(x->errbuf))) != NULL)
		return e;
	r.line = x->lineno;
	if ((arg != NULL && (r.name = strdup(arg)) == NULL) ||
	    (nr = realloc(s->rules, (s->nrules + 1) * sizeof(*nr))) == NULL) {
		conf_rule_clear(&r);
		return "out of memory";
	}
	s->rules = nr;
	s->rules[s->nrules++] = r;
	return NULL;
}

static const char *conf_set_class(struct conf_ctx *x, const struct conf_key *k, void *base,
				  const char *arg, const char *val)
{
	struct conf_scope *s = base;
	struct conf_pscope *ps = &x->ps[x->scope];
	struct cv_class cv;
	struct cv_class *np;
	struct conf_class *nc;
	const char *e;
	char *name;

	(void)k;
	if (!cv_name_ok(arg))
		return "bad class name ([A-Za-z0-9_.-], 1 to 64 characters)";
	for (size_t i = 0; i < s->nclasses; i++)
		if (strcmp(s->classes[i].name, arg) == 0)
			return conf_fmt(x, "class \"%s\" already defined at line %d", arg,
					s->classes[i].line);
	if ((e = cv_class(val, &cv, x->errbuf, sizeof(x->errbuf))) != NULL)
		return e;
	/* grow both arrays before committing, so a failure leaves them in step */
	if ((name = strdup(arg)) == NULL ||
	    (np = realloc(ps->pend, (s->nclasses + 1) * sizeof(*np))) == NULL)
		goto oom;
	ps->pend = np;
	if ((nc = realloc(s->classes, (s->nclasses + 1) * sizeof(*nc))) == NULL)
		goto oom;
	s->classes = nc;
	s->classes[s->nclasses] = (struct conf_class){
		.name = name, .floor = cv.floor, .floor_ppm = cv.floor_ppm, .line = x->lineno
	};
	ps->pend[s->nclasses++] = cv;
	return NULL;
oom:
	free(name);
	cv_class_clear(&cv);
	return "out of memory";
}

/* How a type stores its value, for comparing two confs (conf_reload_keys). */
enum conf_store { CS_OTHER = 0, CS_STRING, CS_INT, CS_INT64, CS_DOUBLE, CS_BOOL, CS_ENUM };

/* Longest user or group name looked up, and the getpw/getgr buffer. */
#define CONF_ID_NAME_MAX 256
#define CONF_ID_BUF	 (64 * 1024)

/*
 * One user or group: digits are an id as is (it need not exist: a
 * container's uids often have no name), anything else a name looked up now
 * (NSS: /etc/passwd, /etc/group), so a typo fails at load, not at accept.
 */
static const char *conf_id_resolve(struct conf_ctx *x, bool group, const char *word, uint32_t *out)
{
	char *buf = NULL;
	const char *e = NULL;
	int64_t v;
	int rc;

	if (isdigit((unsigned char)*word)) {
		if (cv_int(word, &v) != NULL || v > 4294967294LL)
			return conf_fmt(x, "\"%.64s\" is not a %s id (0 to 4294967294)", word,
					group ? "group" : "user");
		*out = (uint32_t)v;
		return NULL;
	}
	if ((buf = malloc(CONF_ID_BUF)) == NULL)
		return "out of memory";
	if (group) {
		struct group gr, *res = NULL;
		rc = getgrnam_r(word, &gr, buf, CONF_ID_BUF, &res);
		if (res != NULL)
			*out = (uint32_t)gr.gr_gid;
		else
			e = rc != 0 ? conf_fmt(x, "cannot look up group \"%.64s\": %s", word,
					       strerror(rc))
				    : conf_fmt(x, "no group \"%.64s\"", word);
	} else {
		struct passwd pw, *res = NULL;
		rc = getpwnam_r(word, &pw, buf, CONF_ID_BUF, &res);
		if (res != NULL)
			*out = (uint32_t)pw.pw_uid;
		else
			e = rc != 0 ? conf_fmt(x, "cannot look up user \"%.64s\": %s", word,
					       strerror(rc))
				    : conf_fmt(x, "no user \"%.64s\"", word);
	}
	free(buf);
	return e;
}

/* CT_UIDS, CT_GIDS: "root 1000 app" -> ids; every word must resolve. */
static const char *conf_set_ids(struct conf_ctx *x, const struct conf_key *k, void *base,
				const char *arg, const char *val)
{
	struct conf_ids *f = FIELD(base, k, struct conf_ids), ids = { 0 };
	bool group = k->type == CT_GIDS;
	char word[CONF_ID_NAME_MAX];
	const char *p = val, *e = NULL;

	(void)arg;
	while (*p != '\0') {
		size_t len = strcspn(p, " \t");
		uint32_t *grown;

		if (len >= sizeof(word)) {
			e = "a name is too long";
			goto fail;
		}
		memcpy(word, p, len);
		word[len] = '\0';
		p += len;
		p += strspn(p, " \t");
		if ((grown = realloc(ids.ids, (ids.n + 1) * sizeof(*grown))) == NULL) {
			e = "out of memory";
			goto fail;
		}
		ids.ids = grown;
		if ((e = conf_id_resolve(x, group, word, &ids.ids[ids.n])) != NULL)
			goto fail;
		ids.n++;
	}
	if (ids.n == 0) {
		e = group ? "needs at least one group (leave the key out to allow any)"
			  : "needs at least one user (leave the key out to allow any)";
		goto fail;
	}
	free(f->ids);
	*f = ids;
	return NULL;
fail:
	free(ids.ids);
	return e;
}

/* CT_GROUP: one group name or gid. */
static const char *conf_set_group(struct conf_ctx *x, const struct conf_key *k, void *base,
				  const char *arg, const char *val)
{
	uint32_t gid;
	const char *e;

	(void)arg;
	if (*val == '\0' || strpbrk(val, " \t") != NULL)
		return "must be one group name or gid";
	if ((e = conf_id_resolve(x, true, val, &gid)) != NULL)
		return e;
	*FIELD(base, k, int64_t) = gid;
	return NULL;
}

static const struct {
	const char *doc; /* for conf_dump_keys */
	conf_setter set;
	enum conf_store store;
} conf_types[CT__COUNT] = {
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
	[CT_UIDS] = { "users (names or uids)", conf_set_ids },
	[CT_GIDS] = { "groups (names or gids)", conf_set_ids },
	[CT_GROUP] = { "group (name or gid)", conf_set_group, CS_INT64 },
	[CT_ADAPT_FLOOR] = { "N/W", conf_set_adapt_floor },
	[CT_ADAPT_STEP] = { "P% or N/W", conf_set_adapt_step },
};

/* ---- the generic walker ------------------------------------------------ */

/*
 * Set every key of `table` that has a default, parsing the default string
 * with the key's own setter, so defaults obey the same rules as values.
 */
static void conf_defaults(struct conf_ctx *x, const struct conf_key *table, void *base)
{
	const char *e;

	for (const struct conf_key *k = table; k->name != NULL; k++) {
		if (k->def == NULL)
			continue;
		if ((e = conf_types[k->type].set(x, k, base, NULL, k->def)) != NULL)
			conf_err(x, 0, "internal: default of %s (\"%s\"): %s", k->name, k->def, e);
	}
}

#define CONF_SUGGEST_MAX 2  /* edits (insert, delete, change, swap) a suggestion is away */
#define CONF_SUGGEST_LEN 48 /* longer words are not compared */

/*
 * Edit distance of a[0..alen) and b with adjacent swaps counted as one edit
 * (optimal string alignment), so "min_dealy" is one edit from "min_delay".
 * Returns CONF_SUGGEST_MAX + 1 for a word too long to compare.
 */
static size_t conf_distance(const char *a, size_t alen, const char *b)
{
	size_t blen = strlen(b), d[3][CONF_SUGGEST_LEN + 1];

	if (alen > CONF_SUGGEST_LEN || blen > CONF_SUGGEST_LEN)
		return CONF_SUGGEST_MAX + 1;
	/* rows i-2, i-1 and i of the usual table, by i % 3 */
	for (size_t j = 0; j <= blen; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= alen; i++) {
		size_t *cur = d[i % 3], *up = d[(i - 1) % 3], *up2 = d[(i + 1) % 3];

		cur[0] = i;
		for (size_t j = 1; j <= blen; j++) {
			size_t v = up[j - 1] + (a[i - 1] != b[j - 1]);

			if (up[j] + 1 < v)
				v = up[j] + 1;
			if (cur[j - 1] + 1 < v)
				v = cur[j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    up2[j - 2] + 1 < v)
				v = up2[j - 2] + 1;
			cur[j] = v;
		}
	}
	return d[alen % 3][blen];
}

/*
 * The key of `table` closest to the unknown word (at most CONF_SUGGEST_MAX
 * edits away, and fewer edits than the word has letters, so that "x" is not
 * taken for "key"), or NULL. The first of equally close keys wins.
 */
static const char *conf_suggest(const struct conf_key *table, const char *word, size_t wlen)
{
	const char *best = NULL;
	size_t best_d = CONF_SUGGEST_MAX + 1;

	for (const struct conf_key *k = table; k->name != NULL; k++) {
		size_t d = conf_distance(word, wlen, k->name);

		if (d < best_d && d < wlen) {
			best = k->name;
			best_d = d;
		}
	}
	return best;
}

/* An unknown key, with a hint: a close key of this section, or the section the key is of. */
static void conf_unknown_key(struct conf_ctx *x, const struct conf_key *table, const char *section,
			     const char *keyname, const char *word, size_t wlen)
{
	const struct conf_key *other =
	    table == conf_admitd_keys ? conf_scope_keys : conf_admitd_keys;
	const char *close = conf_suggest(table, word, wlen);

	if (close != NULL) {
		conf_err(x, x->lineno, "unknown key \"%s\" in %s (did you mean \"%s\"?)", keyname,
			 section, close);
		return;
	}
	for (const struct conf_key *k = other; k->name != NULL; k++) {
		if (strlen(k->name) == wlen && strncmp(k->name, word, wlen) == 0) {
			conf_err(x, x->lineno, "unknown key \"%s\" in %s (%s is a key of %s)",
				 keyname, section, k->name,
				 other == conf_admitd_keys ? "[admitd]" : "[scope NAME]");
			return;
		}
	}
	conf_err(x, x->lineno, "unknown key \"%s\" in %s", keyname, section);
}

/*
 * Apply "name = value" from the current section through `table`. `name` is
 * "key" or "key ARG"; seen[] holds the line each key was first set at.
 */
static void conf_apply(struct conf_ctx *x, const struct conf_key *table, int *seen, void *base,
		       const char *section, const char *name, const char *val)
{
	const struct conf_key *k;
	size_t wlen = strcspn(name, " \t");
	const char *arg = name + wlen, *e;
	char keyname[128];

	while (*arg == ' ' || *arg == '\t')
		arg++;
	snprintf(keyname, sizeof(keyname), "%.*s%s%s", (int)wlen, name, *arg ? " " : "", arg);
	for (k = table; k->name != NULL; k++)
		if (strlen(k->name) == wlen && strncmp(k->name, name, wlen) == 0)
			break;
	if (k->name == NULL) {
		conf_unknown_key(x, table, section, keyname, name, wlen);
		return;
	}
	if (*arg == '\0') {
		arg = NULL;
		if (k->flags & CONF_F_ARG_REQUIRED) {
			conf_err(x, x->lineno, "%s: needs a name: %s NAME = ...", keyname, k->name);
			return;
		}
	} else if (!(k->flags & CONF_F_ARG)) {
		conf_err(x, x->lineno, "unknown key \"%s\" in %s", keyname, section);
		return;
	} else if (strpbrk(arg, " \t") != NULL) {
		conf_err(x, x->lineno, "%s: the name must be one word", keyname);
		return;
	}
	if (!(k->flags & CONF_F_REPEATABLE)) {
		if (seen[k - table] != 0) {
			conf_err(x, x->lineno, "%s: duplicate key (first set at line %d)", keyname,
				 seen[k - table]);
			return;
		}
		seen[k - table] = x->lineno;
	}
	if ((e = conf_types[k->type].set(x, k, base, arg, val)) != NULL)
		conf_err(x, x->lineno, "%s: %s", keyname, e);
}

/* libinih's handler; `section` is ignored: the reader tracks sections. */
static int conf_ini_handler(void *user, const char *section, const char *name, const char *value)
{
	struct conf_ctx *x = user;
	char where[CV_NAME_MAX + sizeof("[scope ]")];

	(void)section;
	switch (x->sect) {
	case SECT_NONE:
		conf_err(x, x->lineno, "\"%s\" outside a section ([admitd] or [scope NAME])", name);
		break;
	case SECT_ADMITD:
		conf_apply(x, conf_admitd_keys, x->admitd_seen, x->c, "[admitd]", name, value);
		break;
	case SECT_SCOPE:
		snprintf(where, sizeof(where), "[scope %s]", x->c->scopes[x->scope].name);
		conf_apply(x, conf_scope_keys, x->ps[x->scope].seen, &x->c->scopes[x->scope], where,
			   name, value);
		break;
	case SECT_IGNORED: /* its header was already reported */ break;
	}
	return 1;
}

/* ---- sections and the line reader ------------------------------------ */

/* Start [scope NAME]: a new scope with its defaults. */
static void conf_scope_open(struct conf_ctx *x, const char *name)
{
	struct conf *c = x->c;
	struct conf_scope *ns;
	struct conf_pscope *np;
	char *copy;

	x->sect = SECT_IGNORED;
	if (!cv_name_ok(name)) {
		conf_err(x, x->lineno, "bad scope name \"%s\" ([A-Za-z0-9_.-], 1 to 64 characters)",
			 name);
		return;
	}
	for (size_t i = 0; i < c->nscopes; i++) {
		if (strcmp(c->scopes[i].name, name) == 0) {
			conf_err(x, x->lineno, "duplicate scope \"%s\" (first at line %d)", name,
				 c->scopes[i].line);
			return;
		}
	}
	/* both arrays grow before the scope counts, so they stay in step */
	if ((copy = strdup(name)) == NULL)
		goto oom;
	if ((np = realloc(x->ps, (c->nscopes + 1) * sizeof(*np))) == NULL)
		goto oom;
	x->ps = np;
	if ((ns = realloc(c->scopes, (c->nscopes + 1) * sizeof(*ns))) == NULL)
		goto oom;
	c->scopes = ns;
	memset(&ns[c->nscopes], 0, sizeof(*ns));
	memset(&np[c->nscopes], 0, sizeof(*np));
	x->scope = c->nscopes++;
	ns[x->scope].line = x->lineno;
	ns[x->scope].name = copy;
	conf_defaults(x, conf_scope_keys, &ns[x->scope]);
	x->sect = SECT_SCOPE;
	return;
oom:
	free(copy);
	conf_err(x, x->lineno, "out of memory");
}

/* A "[...]" line, given without leading blanks; s is NUL-terminated. */
static void conf_section(struct conf_ctx *x, char *s)
{
	char *close = strchr(s, ']'), *in, *arg, *rest;

	x->sect = SECT_IGNORED;
	if (close == NULL) {
		conf_err(x, x->lineno, "missing ']' in section header");
		return;
	}
	for (rest = close + 1; *rest == ' ' || *rest == '\t'; rest++)
		;
	if (*rest != '\0' && *rest != ';' && *rest != '#') {
		conf_err(x, x->lineno, "unexpected text after ']'");
		return;
	}
	*close = '\0';
	in = s + 1;
	in += strspn(in, " \t");
	for (char *e = close; e > in && (e[-1] == ' ' || e[-1] == '\t');)
		*--e = '\0';
	arg = in + strcspn(in, " \t");
	if (*arg != '\0') {
		*arg++ = '\0';
		arg += strspn(arg, " \t");
	}
	if (strcmp(in, "admitd") == 0 && *arg == '\0') {
		if (x->admitd_line != 0) {
			conf_err(x, x->lineno, "duplicate section [admitd] (first at line %d)",
				 x->admitd_line);
			return;
		}
		x->admitd_line = x->lineno;
		x->sect = SECT_ADMITD;
	} else if (strcmp(in, "scope") == 0) {
		if (*arg == '\0')
			conf_err(x, x->lineno, "a scope needs a name: [scope NAME]");
		else
			conf_scope_open(x, arg);
	} else {
		conf_err(x, x->lineno, "unknown section [%s%s%s]", in, *arg ? " " : "", arg);
	}
}

/*
 * True when libinih will find "key = value" (or "key: value") on s: a '='
 * or ':' before any inline comment (';' after a blank).
 */
static bool conf_has_separator(const char *s)
{
	for (const char *p = s; *p; p++) {
		if (*p == '=' || *p == ':')
			return true;
		if (*p == ';' && p > s && isspace((unsigned char)p[-1]))
			return false;
	}
	return false;
}

/*
 * The ini_reader: one physical line per call into buf (num bytes, as
 * libinih's stack buffer allows). Lines libinih must not see (comments,
 * section headers, errors) are handed over as empty lines, so libinih's
 * count stays equal to ours. Returns NULL at the end of the input.
 */
static char *conf_reader(char *buf, int num, void *stream)
{
	struct conf_ctx *x = stream;
	const char *s, *nl, *e;
	size_t len;

	if (x->p >= x->end)
		return NULL;
	x->lineno++;
	s = x->p;
	nl = memchr(s, '\n', (size_t)(x->end - s));
	e = nl ? nl : x->end;
	x->p = nl ? nl + 1 : x->end;
	if (e > s && e[-1] == '\r')
		e--;
	if (x->lineno == 1 && e - s >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0)
		s += 3;
	/* Every blank libinih's lskip would skip (\v and \f too): a line it
	 * sees starting with one would be glued onto the previous value. */
	while (s < e && isspace((unsigned char)*s))
		s++;
	len = (size_t)(e - s);
	buf[0] = '\0';
	if (len == 0 || *s == ';' || *s == '#')
		return buf; /* blank or comment: may be of any length */
	if (memchr(s, '\0', len) != NULL) {
		conf_err(x, x->lineno, "NUL byte in line");
		return buf;
	}
	if (num < 2 || len > (size_t)num - 2) {
		conf_err(x, x->lineno, "line too long");
		/* a section header we cannot read would file its keys wrongly */
		if (*s == '[') {
			x->sect = SECT_IGNORED;
			x->bad_headers++;
		}
		return buf;
	}
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (*buf == '[') {
		conf_section(x, buf);
		if (x->sect == SECT_IGNORED)
			x->bad_headers++;
		buf[0] = '\0';
	} else if (!conf_has_separator(buf)) {
		conf_err(x, x->lineno, "expected \"key = value\" or \"[section]\"");
		buf[0] = '\0';
	}
	return buf;
}

/* ---- validation after the whole file ---------------------------------- */

static size_t conf_key_index(const struct conf_key *table, const char *name)
{
	size_t i = 0;

	while (table[i].name != NULL && strcmp(table[i].name, name) != 0)
		i++;
	return i;
}

/* A rate n/w in milli-units of rule r's amount per its window (rounded down). */
static double conf_adapt_milli(const struct conf_rule *r, int64_t n, int64_t w_ms)
{
	return floor((double)n * (double)r->sp.window_ms * 1000.0 / (double)w_ms);
}

/* adaptive = yes: its rule, its range and its steps, in milli-units of the rule. */
static void conf_validate_adaptive(struct conf_ctx *x, struct conf_scope *s, struct conf_pscope *ps)
{
	static const char *const keys[] = { "adaptive_floor", "adaptive_decrease",
					    "adaptive_increase", "adaptive_interval" };
	int line = ps->seen[conf_key_index(conf_scope_keys, "adaptive")];
	int fl_line = ps->seen[conf_key_index(conf_scope_keys, "adaptive_floor")];
	int dec_line = ps->seen[conf_key_index(conf_scope_keys, "adaptive_decrease")];
	int inc_line = ps->seen[conf_key_index(conf_scope_keys, "adaptive_increase")];
	const struct conf_rule *r = NULL;
	double fl, step;
	size_t i;

	s->adapt_rule = -1;
	if (!s->adaptive) {
		for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
			int l = ps->seen[conf_key_index(conf_scope_keys, keys[i])];
			if (l != 0)
				conf_err(x, l, "%s: only with adaptive = yes", keys[i]);
		}
		return;
	}
	for (i = 0; i < s->nrules && r == NULL; i++)
		if (s->rules[i].meter == METER_REQUESTS) {
			r = &s->rules[i];
			s->adapt_rule = (long)i;
		}
	if (r == NULL) {
		conf_err(x, line, "adaptive: [scope %s] has no requests rule to adapt", s->name);
		return;
	}
	if (s->adaptive_floor_n == 0) {
		conf_err(x, line, "adaptive: needs adaptive_floor (the least rate, e.g. 1/1s)");
		return;
	}
	s->adapt.ceil = r->sp.amount * 1000;
	fl = conf_adapt_milli(r, s->adaptive_floor_n, s->adaptive_floor_w_ms);
	if (fl >= (double)s->adapt.ceil) {
		conf_err(x, fl_line, "adaptive_floor: not below the rate of rule %s", r->text);
		return;
	}
	if (fl < 1) {
		conf_err(x, fl_line,
			 "adaptive_floor: too small for rule %s (under 1/1000 of a unit)", r->text);
		return;
	}
	s->adapt.floor = (int64_t)fl;
	s->adapt.factor = (int64_t)floor(s->adaptive_decrease * 1000.0 + 0.5);
	if (s->adapt.factor < 1 || s->adapt.factor > 999)
		conf_err(x, dec_line,
			 "adaptive_decrease: must be above 0 and below 1 (0.001 to 0.999)");
	if (s->adaptive_increase_pct > 0)
		step = floor((double)s->adapt.ceil * s->adaptive_increase_pct / 100.0);
	else
		step = conf_adapt_milli(r, s->adaptive_increase_n, s->adaptive_increase_w_ms);
	if (step < 1)
		conf_err(x, inc_line,
			 "adaptive_increase: too small for rule %s (under 1/1000 of a unit)",
			 r->text);
	s->adapt.step = step > (double)s->adapt.ceil ? s->adapt.ceil : (int64_t)step;
	s->adapt.interval_ms = s->adaptive_interval_ms;
}

/* Resolve class rule names and check what needs the whole scope. */
static void conf_validate_scope(struct conf_ctx *x, struct conf_scope *s, struct conf_pscope *ps)
{
	bool *used = calloc(s->nrules + 1, sizeof(*used));
	int dc_line = ps->seen[conf_key_index(conf_scope_keys, "default_class")];

	if (used == NULL) {
		conf_err(x, 0, "out of memory");
		return;
	}
	for (size_t i = 0; i < s->nclasses; i++) {
		struct conf_class *cl = &s->classes[i];
		struct cv_class *pc = &ps->pend[i];

		if ((cl->rules = calloc(pc->nnames + 1, sizeof(*cl->rules))) == NULL) {
			conf_err(x, 0, "out of memory");
			break;
		}
		for (size_t j = 0; j < pc->nnames; j++) {
			size_t r;

			for (r = 0; r < s->nrules; r++)
				if (s->rules[r].name && strcmp(s->rules[r].name, pc->names[j]) == 0)
					break;
			if (r == s->nrules) {
				conf_err(x, cl->line, "class %s: unknown rule \"%s\"", cl->name,
					 pc->names[j]);
				continue;
			}
			used[r] = true;
			cl->rules[cl->nrules++] = r;
			/* a floor the rule can never leave makes the class never admitted */
			int64_t cap =
			    s->rules[r].sp.burst ? s->rules[r].sp.burst : s->rules[r].sp.amount;
			if (cl->floor >= cap)
				conf_err(x, cl->line,
					 "class %s: floor=%lld leaves nothing of rule %s (%lld)",
					 cl->name, (long long)cl->floor, pc->names[j],
					 (long long)cap);
		}
	}
	for (size_t r = 0; r < s->nrules; r++)
		if (s->rules[r].name && !used[r])
			conf_err(x, s->rules[r].line,
				 "rule %s: named rule is not used by any class (list it in a "
				 "class, or drop its name to apply it to all)",
				 s->rules[r].name);
	free(used);
	if (s->default_class != NULL && conf_class_find(s, s->default_class) == NULL)
		conf_err(x, dc_line, "default_class: no class \"%s\" in [scope %s]",
			 s->default_class, s->name);
	/* documented: a per-daemon cap below the cluster's would hide the cluster's */
	if (s->max_concurrent != 0 && s->cluster_concurrency > s->max_concurrent)
		s->max_concurrent = s->cluster_concurrency;
	conf_validate_adaptive(x, s, ps);
	for (size_t r = 0; r < s->nrules; r++)
		s->rules[r].idx = r;
	if (s->override_max != 0 && s->override_max < 1)
		conf_err(x, ps->seen[conf_key_index(conf_scope_keys, "override_max")],
			 "override_max: 0 (no overrides) or a factor of at least 1 (1: overrides "
			 "may only tighten)");
	s->override_milli = (int64_t)floor(s->override_max * 1000.0 + 0.5);
}

/* The Redis keys that only make sense together. */
static void conf_validate_redis(struct conf_ctx *x)
{
	static const char *const tls_keys[] = { "redis_tls_ca_file", "redis_tls_cert_file",
						"redis_tls_key_file", "redis_tls_server_name",
						"redis_tls_verify" };
	const struct conf *c = x->c;
	struct redis_url u;
	char msg[200];
	bool have = c->redis != NULL && c->redis[0] != '\0' &&
		    redis_url_parse(c->redis, &u, msg, sizeof(msg)) == 0;
	int key_line = x->admitd_seen[conf_key_index(conf_admitd_keys, "redis_tls_key_file")];
	int sp_line = x->admitd_seen[conf_key_index(conf_admitd_keys, "sentinel_password_file")];

	if (key_line != 0 && c->redis_tls_cert_file == NULL)
		conf_err(x, key_line, "redis_tls_key_file without redis_tls_cert_file");
	if (!have)
		return;
	for (size_t i = 0; !u.tls && i < sizeof(tls_keys) / sizeof(tls_keys[0]); i++) {
		int line = x->admitd_seen[conf_key_index(conf_admitd_keys, tls_keys[i])];
		if (line != 0)
			conf_err(x, line,
				 "%s is set but redis is not a TLS url (rediss://, or ?tls=1 on "
				 "redis+sentinel:// and redis+cluster://)",
				 tls_keys[i]);
	}
	if (sp_line != 0 && u.kind != REDIS_URL_SENTINEL)
		conf_err(x, sp_line,
			 "sentinel_password_file is set but redis is not a "
			 "redis+sentinel:// url");
}

/* ---- public ------------------------------------------------------------ */

static struct conf *conf_parse(const char *text, size_t len, const char *name, FILE *errf)
{
	struct conf_ctx x = { .name = name, .errf = errf, .p = text, .end = text + len };
	int rc;

	if ((x.c = calloc(1, sizeof(*x.c))) == NULL || (x.c->path = strdup(name)) == NULL) {
		conf_err(&x, 0, "out of memory");
		goto done;
	}
	x.c->socket_group = -1;
	conf_defaults(&x, conf_admitd_keys, x.c);
	rc = ini_parse_stream(conf_reader, &x, conf_ini_handler, &x);
	if (rc < 0)
		conf_err(&x, 0, "libinih failed (%d)", rc);
	for (size_t i = 0; i < x.c->nscopes; i++)
		conf_validate_scope(&x, &x.c->scopes[i], &x.ps[i]);
	conf_validate_redis(&x);
	/* A daemon with no scope refuses every request: an empty or truncated
	 * file (a reload caught between a truncate and a slow write) must not
	 * pass. A section header that failed was reported already, and may
	 * have been meant as the scope. */
	if (x.c->nscopes == 0 && x.bad_headers == 0)
		conf_err(&x, x.lineno,
			 "no [scope NAME] section: a conf needs at least one scope (is the file "
			 "empty or cut short?)");
	for (size_t i = 0; i < x.c->nscopes && x.nerrors == 0; i++)
		if (!conf_plan_compile(&x.c->scopes[i]))
			conf_err(&x, 0, "out of memory");
done:
	if (x.c != NULL) {
		for (size_t i = 0; i < x.c->nscopes; i++) {
			for (size_t j = 0; j < x.c->scopes[i].nclasses; j++)
				cv_class_clear(&x.ps[i].pend[j]);
			free(x.ps[i].pend);
		}
	}
	free(x.ps);
	if (x.nerrors > 0) {
		conf_free(x.c);
		return NULL;
	}
	return x.c;
}

struct conf *conf_load_string(const char *text, const char *name, FILE *errf)
{
	return conf_parse(text, strlen(text), name, errf);
}

struct conf *conf_load(const char *path, FILE *errf)
{
	struct conf *c = NULL;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	if ((f = fopen(path, "r")) == NULL) {
		if (errf != NULL)
			fprintf(errf, "%s: cannot open: %s\n", path, strerror(errno));
		return NULL;
	}
	/* one byte more than allowed tells "too large" from "exactly the max" */
	if ((buf = malloc(CONF_FILE_MAX + 1)) == NULL) {
		if (errf != NULL)
			fprintf(errf, "%s: out of memory\n", path);
		goto done;
	}
	len = fread(buf, 1, CONF_FILE_MAX + 1, f);
	if (ferror(f)) {
		if (errf != NULL)
			fprintf(errf, "%s: read error: %s\n", path, strerror(errno));
	} else if (len > CONF_FILE_MAX) {
		if (errf != NULL)
			fprintf(errf, "%s: larger than %d bytes\n", path, CONF_FILE_MAX);
	} else {
		c = conf_parse(buf, len, path, errf);
	}
done:
	free(buf);
	fclose(f);
	return c;
}

void conf_free(struct conf *c)
{
	if (c == NULL)
		return;
	for (size_t i = 0; i < c->nscopes; i++) {
		struct conf_scope *s = &c->scopes[i];

		for (size_t j = 0; j < s->nrules; j++)
			conf_rule_clear(&s->rules[j]);
		for (size_t j = 0; j < s->nclasses; j++) {
			free(s->classes[j].name);
			free(s->classes[j].rules);
		}
		conf_plan_free(s);
		free(s->name);
		free(s->rules);
		free(s->classes);
		free(s->quota_text);
		free(s->default_class);
		free(s->default_key);
	}
	free(c->scopes);
	free(c->path);
	free(c->socket);
	free(c->redis);
	free(c->prefix);
	free(c->redis_password_file);
	free(c->redis_user);
	free(c->sentinel_password_file);
	free(c->redis_tls_ca_file);
	free(c->redis_tls_cert_file);
	free(c->redis_tls_key_file);
	free(c->redis_tls_server_name);
	free(c->log_level);
	free(c->metrics);
	free(c->allow_uids.ids);
	free(c->allow_gids.ids);
	free(c);
}

/* Do two [admitd] values of key k differ? false for a type with no comparison. */
static bool conf_key_differs(const struct conf_key *k, const struct conf *a, const struct conf *b)
{
	switch (conf_types[k->type].store) {
	case CS_STRING: {
		const char *x = *FIELD(a, k, char *), *y = *FIELD(b, k, char *);
		return (x == NULL) != (y == NULL) || (x != NULL && strcmp(x, y) != 0);
	}
	case CS_INT: return *FIELD(a, k, int) != *FIELD(b, k, int);
	case CS_INT64: return *FIELD(a, k, int64_t) != *FIELD(b, k, int64_t);
	case CS_DOUBLE: return *FIELD(a, k, double) != *FIELD(b, k, double);
	case CS_BOOL: return *FIELD(a, k, bool) != *FIELD(b, k, bool);
	case CS_ENUM: return *FIELD(a, k, enum conf_fail_mode) != *FIELD(b, k, enum conf_fail_mode);
	case CS_OTHER: break;
	}
	return false;
}

/* Give nw the value old runs with (a key that needs a restart). */
static bool conf_key_keep(const struct conf_key *k, const struct conf *old, struct conf *nw)
{
	char **dst, *v = NULL;
	const char *src;

	switch (conf_types[k->type].store) {
	case CS_STRING:
		src = *FIELD(old, k, char *);
		dst = FIELD(nw, k, char *);
		if (src != NULL && (v = strdup(src)) == NULL)
			return false;
		free(*dst);
		*dst = v;
		return true;
	case CS_INT: *FIELD(nw, k, int) = *FIELD(old, k, int); return true;
	case CS_INT64: *FIELD(nw, k, int64_t) = *FIELD(old, k, int64_t); return true;
	case CS_DOUBLE: *FIELD(nw, k, double) = *FIELD(old, k, double); return true;
	case CS_BOOL: *FIELD(nw, k, bool) = *FIELD(old, k, bool); return true;
	case CS_ENUM:
		*FIELD(nw, k, enum conf_fail_mode) = *FIELD(old, k, enum conf_fail_mode);
		return true;
	case CS_OTHER: break;
	}
	return true;
}

bool conf_reload_keys(const struct conf *old, struct conf *nw, conf_change_cb *cb, void *arg)
{
	for (const struct conf_key *k = conf_admitd_keys; k->name != NULL; k++) {
		enum conf_change how = (k->flags & CONF_F_LIVE)	   ? CONF_CHANGE_LIVE
				       : (k->flags & CONF_F_REDIS) ? CONF_CHANGE_REDIS
								   : CONF_CHANGE_RESTART;

		if (!conf_key_differs(k, old, nw))
			continue;
		if (how == CONF_CHANGE_RESTART && !conf_key_keep(k, old, nw))
			return false;
		cb(arg, k->name, how);
	}
	return true;
}

const struct conf_scope *conf_scope_find(const struct conf *c, const char *name)
{
	for (size_t i = 0; i < c->nscopes; i++)
		if (strcmp(c->scopes[i].name, name) == 0)
			return &c->scopes[i];
	return NULL;
}

const struct conf_class *conf_class_find(const struct conf_scope *s, const char *name)
{
	for (size_t i = 0; i < s->nclasses; i++)
		if (strcmp(s->classes[i].name, name) == 0)
			return &s->classes[i];
	return NULL;
}

/* One markdown table per section, rows straight from the option table. */
static void conf_dump_table(FILE *out, const char *title, const struct conf_key *table)
{
	fprintf(out, "### %s\n\n| key | default | accepts | meaning |\n|---|---|---|---|\n", title);
	for (const struct conf_key *k = table; k->name != NULL; k++) {
		char range[96] = "";

		if (k->type == CT_INT || k->type == CT_SIZE)
			snprintf(range, sizeof(range), ", %lld..%lld", (long long)k->min,
				 (long long)k->max);
		else if (k->type == CT_DOUBLE || k->type == CT_DIVISOR)
			snprintf(range, sizeof(range), ", %lld..%lld", (long long)k->min,
				 (long long)k->max);
		else if (k->type == CT_DURATION) {
			char lo[32], hi[32];

			conf_fmt_duration(lo, sizeof(lo), k->min);
			conf_fmt_duration(hi, sizeof(hi), k->max);
			snprintf(range, sizeof(range), ", %s..%s", lo, hi);
		}
		fprintf(out, "| `%s%s` | %s%s%s | %s%s | %s |\n", k->name,
			(k->flags & CONF_F_ARG_REQUIRED) ? " NAME"
			: (k->flags & CONF_F_ARG)	 ? " [NAME]"
							 : "",
			k->def ? "`" : "", k->def ? k->def : "(none)", k->def ? "`" : "",
			conf_types[k->type].doc, range, k->help);
	}
	fputc('\n', out);
}

void conf_dump_keys(FILE *out)
{
	conf_dump_table(out, "[admitd]", conf_admitd_keys);
	conf_dump_table(out, "[scope NAME]", conf_scope_keys);
}
