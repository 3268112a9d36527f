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
 *   unix://[user[:password]@]/path/to/redis.sock[?db=N]
 *
 * user and password may be %XX-escaped. port defaults to 6379, db to 0.
 */

#ifndef ADMITD_REDIS_URL_H
#define ADMITD_REDIS_URL_H

#include <stddef.h>

enum redis_url_kind { REDIS_URL_TCP = 0, REDIS_URL_UNIX };

#define REDIS_URL_HOST_MAX 256
#define REDIS_URL_PATH_MAX 108 /* sizeof(sun_path) on Linux */
#define REDIS_URL_USER_MAX 128
#define REDIS_URL_PASS_MAX 256

struct redis_url {
	enum redis_url_kind kind;
	char host[REDIS_URL_HOST_MAX];	   /* TCP: name or address, no brackets */
	int port;			   /* TCP: 1..65535 */
	char path[REDIS_URL_PATH_MAX];	   /* UNIX: absolute socket path */
	char user[REDIS_URL_USER_MAX];	   /* "" when absent */
	char password[REDIS_URL_PASS_MAX]; /* "" when absent */
	int db;				   /* >= 0 */
};

/*
 * redis_url_parse - fill *out from url. Returns 0, or -1 with a one-line
 * message in err (never containing the password); *out is then unspecified.
 */
int redis_url_parse(const char *url, struct redis_url *out, char *err, size_t errlen);

#endif
