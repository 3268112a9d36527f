/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * redis_url.h - parse a Redis address into a struct redis_url.
 *
 * Owns: the accepted URL grammar. Pure: no sockets, no allocation, no
 * logging, no global state. Error messages never quote the password.
 *
 *   redis://[user[:password]@]host[:port][/db]      host may be [v6::addr]
 *   rediss://...                                     the same over TLS
 *   unix://[user[:password]@]/path/to/redis.sock[?db=N]
 *   redis+sentinel://[user[:password]@]H1[:P1],H2[:P2]/MASTER[?db=N&tls=1]
 *   redis+cluster://[user[:password]@]H1[:P1],H2[:P2][?tls=1]
 *
 * user and password may be %XX-escaped; they are the data nodes' (a
 * sentinel's password is a conf key of its own). port defaults to 6379
 * (26379 for a sentinel), db to 0; a cluster has only db 0.
 */

#ifndef ADMITD_REDIS_URL_H
#define ADMITD_REDIS_URL_H

#include <stddef.h>

enum redis_url_kind { REDIS_URL_TCP = 0, REDIS_URL_UNIX, REDIS_URL_SENTINEL, REDIS_URL_CLUSTER };

#define REDIS_URL_HOST_MAX  256
#define REDIS_URL_PATH_MAX  108 /* sizeof(sun_path) on Linux */
#define REDIS_URL_USER_MAX  128
#define REDIS_URL_PASS_MAX  256
#define REDIS_URL_HOSTS_MAX 16	/* sentinels or cluster seeds */
#define REDIS_URL_NAME_MAX  128 /* a sentinel's master name */

struct redis_host {
	char host[REDIS_URL_HOST_MAX];
	int port;
};

struct redis_url {
	enum redis_url_kind kind;
	char host[REDIS_URL_HOST_MAX];	   /* TCP: name or address, no brackets */
	int port;			   /* TCP: 1..65535 */
	char path[REDIS_URL_PATH_MAX];	   /* UNIX: absolute socket path */
	char user[REDIS_URL_USER_MAX];	   /* "" when absent */
	char password[REDIS_URL_PASS_MAX]; /* "" when absent */
	int db;				   /* >= 0 */
	int tls;			   /* rediss://, or ?tls=1 */
	size_t nhosts; /* TCP: 1 (hosts[0] = host:port); SENTINEL, CLUSTER: >= 1 */
	struct redis_host hosts[REDIS_URL_HOSTS_MAX];
	char master[REDIS_URL_NAME_MAX]; /* SENTINEL: the master's name */
};

/*
 * redis_url_parse - fill *out from url. Returns 0, or -1 with a one-line
 * message in err (never containing the password); *out is then unspecified.
 */
int redis_url_parse(const char *url, struct redis_url *out, char *err, size_t errlen);

/*
 * redis_url_redact - url for a log line: the password of its userinfo
 * replaced by "***" (the user, hosts and the rest kept), truncated to
 * fit out[outlen]. Works on any string, valid URL or not.
 */
void redis_url_redact(const char *url, char *out, size_t outlen);

#endif
