/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * admit_proto.h - the wire vocabulary shared by admitd and libadmit.
 *
 * Owns: the list of error codes (one X-macro: enum, wire string, meaning)
 * and the protocol's fixed defaults. Both the daemon and the client library
 * include it, so a code added here exists on both sides at once.
 */

#ifndef ADMIT_PROTO_H
#define ADMIT_PROTO_H

#include <stddef.h>

#define ADMIT_PROTO_VERSION    1
#define ADMIT_DEFAULT_SOCKET   "/run/admitd/admitd.sock"
#define ADMIT_DEFAULT_MAX_LINE (64 * 1024)

/* ACTION(ENUM_SUFFIX, "wire_string", "what it means") */
#define ADMIT_ERRORS(ACTION)                                                                 \
	ACTION(BAD_REQUEST, "bad_request", "malformed request")                              \
	ACTION(UNKNOWN_OP, "unknown_op", "unknown op")                                       \
	ACTION(UNKNOWN_SCOPE, "unknown_scope", "no such scope in the conf")                  \
	ACTION(LINE_TOO_LONG, "line_too_long", "request line longer than max_line")          \
	ACTION(LIMITED, "limited", "not admitted now; retry after retry_after_ms")           \
	ACTION(BUDGET_EXCEEDED, "budget_exceeded",                                           \
	       "the wait needed is longer than the budget left")                             \
	ACTION(TIMEOUT, "timeout", "waited the whole budget")                                \
	ACTION(TOO_MANY_WAITERS, "too_many_waiters", "the wait queue is full")               \
	ACTION(SHUTTING_DOWN, "shutting_down", "the daemon is stopping")                     \
	ACTION(UNAVAILABLE, "unavailable", "the limiter backend cannot decide")              \
	ACTION(EXCEEDS_LIMIT, "exceeds_limit",                                               \
	       "no wait can admit it: it asks more than the limit holds")                    \
	ACTION(FORBIDDEN, "forbidden", "this peer may not connect (allow_uids, allow_gids)") \
	ACTION(CANCELED, "canceled", "the client canceled the wait (it spent nothing)")

enum admit_err {
	ADMIT_OK = 0,
#define ADMIT_ERR_ENUM(name, str, msg) ADMIT_E_##name,
	ADMIT_ERRORS(ADMIT_ERR_ENUM)
#undef ADMIT_ERR_ENUM
	    ADMIT_E__COUNT
};

/*
 * admit_err_str - the wire string of an error code ("ok" for ADMIT_OK,
 * NULL when out of range). admit_err_parse is its inverse: -1 when unknown.
 */
static inline const char *admit_err_str(int e)
{
	static const char *const tab[] = { "ok",
#define ADMIT_ERR_STR(name, str, msg) str,
					   ADMIT_ERRORS(ADMIT_ERR_STR)
#undef ADMIT_ERR_STR
	};
	if (e < 0 || e >= (int)(sizeof(tab) / sizeof(tab[0])))
		return NULL;
	return tab[e];
}

static inline const char *admit_err_msg(int e)
{
	static const char *const tab[] = { "ok",
#define ADMIT_ERR_MSG(name, str, msg) msg,
					   ADMIT_ERRORS(ADMIT_ERR_MSG)
#undef ADMIT_ERR_MSG
	};
	if (e < 0 || e >= (int)(sizeof(tab) / sizeof(tab[0])))
		return NULL;
	return tab[e];
}

static inline int admit_err_parse(const char *s)
{
	int e;

	for (e = 0; e < ADMIT_E__COUNT; e++) {
		const char *w = admit_err_str(e);
		const char *a = s;
		while (*w && *w == *a) {
			w++;
			a++;
		}
		if (*w == '\0' && *a == '\0')
			return e;
	}
	return -1;
}

#endif
