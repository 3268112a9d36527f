/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rutil.c - the Redis client's small shared helpers (see rutil.h): what
 * both the pool and the topology layer need and neither owns.
 */

#include "rutil.h"

#include "rconn.h"

#include <string.h>
#include <unistd.h>

struct timeval rutil_tv(int64_t ms)
{
	struct timeval tv = { .tv_sec = (time_t)(ms / 1000),
			      .tv_usec = (suseconds_t)((ms % 1000) * 1000) };
	return tv;
}

const char *rutil_log_safe(const char *s, char *buf, size_t n)
{
	size_t i;

	if (s == NULL)
		return "";
	for (i = 0; s[i] != '\0' && i + 1 < n; i++)
		buf[i] = (s[i] == '"' || s[i] == '\\' || (unsigned char)s[i] < 0x20) ? '?' : s[i];
	buf[i] = '\0';
	return buf;
}

bool rutil_send_argv(struct rconn *rc, int argc, const char **argv, int kind, void *tag)
{
	char *cmd;
	size_t len;
	bool ok;

	if (resp_format(argc, argv, NULL, &cmd, &len) != 0)
		return false;
	ok = rconn_send(rc, cmd, len, kind, tag) == 0;
	resp_free_cmd(cmd);
	return ok;
}

bool rutil_auth_refusal(const struct rval *v, bool sentinel, bool sent, const char **msg,
			const char **fix)
{
	if (v == NULL || v->type != RV_ERR)
		return false;
	if (rval_is_err(v, "NOAUTH") || strstr(v->s, "Protocol error: unauthenticated") != NULL) {
		*msg = sentinel ? "the sentinel requires a password and none is set"
				: "redis requires a password and none is set";
		*fix = sentinel ? "set sentinel_password_file"
				: "set redis_password_file, or the password in the redis URL "
				  "(redis://:PASSWORD@host:port)";
		return true;
	}
	if (sent && (rval_is_err(v, "WRONGPASS") || strstr(v->s, "invalid password") != NULL)) {
		*msg =
		    sentinel ? "the sentinel refused the password" : "redis refused the password";
		*fix = sentinel ? "check sentinel_password_file"
				: "check redis_password_file (or the redis URL's password) and "
				  "redis_user";
		return true;
	}
	return false;
}

uint64_t rutil_rand(uint64_t *state)
{
	/* xorshift64: jitter only, no need for quality or a clock read */
	*state ^= *state << 13;
	*state ^= *state >> 7;
	*state ^= *state << 17;
	return *state;
}

uint64_t rutil_seed(const void *addr)
{
	return ((uint64_t)(uintptr_t)addr << 16) ^ (uint64_t)getpid() ^ 0x9e3779b97f4a7c15ULL;
}
