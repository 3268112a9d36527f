/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * conf_keys.c - the option tables, one per section, and the --help-conf
 * text made from them.
 *
 * Owns: for each [admitd] and [scope NAME] key its name, type, offset,
 * default as the user would write it, min, max, flags and help; and the
 * markdown tables `admitd --help-conf` prints from those rows (which
 * docs/conf-keys.md is checked against). How a type is parsed is the
 * setters' (conf_types); how the rows are applied is conf_load.c's.
 */

#include "conf_int.h"

#include "admit_proto.h"

#include <stdio.h>

const struct conf_key conf_admitd_keys[] = {
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

const struct conf_key conf_scope_keys[] = {
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
	  "`class NAME = RULENAME... [floor=N|floor=P%] [priority=N]`: the named rules this class "
	  "is held to; floor=N leaves each rule's last N units to others, floor=P% the last P% of "
	  "each rule's own capacity (rounded down); priority=N (-1000..1000, default 0): a key's "
	  "waiters of a higher class are served first" },
	{ "weight", CT_WEIGHT, SCOPE_OFF(weights), NULL, 1, CONF_WEIGHT_MAX,
	  CONF_F_REPEATABLE | CONF_F_ARG | CONF_F_ARG_REQUIRED,
	  "`weight TENANT = W` (1..1000, at most 64 per scope): under contention a key's "
	  "waiters of TENANT (an acquire's \"tenant\") get W shares of each class's turns; "
	  "every unlisted tenant weighs 1, all of them together as one" },
	{ "fair", CT_BOOL, SCOPE_OFF(fair), "no", 0, 0, 0,
	  "with Redis, one queue per key and class across every daemon: a contended key's "
	  "waiters hold tickets in Redis and are admitted in the tickets' order (tenant "
	  "weights, then arrival), whichever pod they wait on" },
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

_Static_assert(sizeof(conf_admitd_keys) / sizeof(conf_admitd_keys[0]) - 1 == CONF_ADMITD_NKEYS,
	       "CONF_ADMITD_NKEYS");
_Static_assert(sizeof(conf_scope_keys) / sizeof(conf_scope_keys[0]) - 1 == CONF_SCOPE_NKEYS,
	       "CONF_SCOPE_NKEYS");

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
