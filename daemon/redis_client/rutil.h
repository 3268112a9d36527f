/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rutil.h - small helpers that both the pool (rpool*.c) and the topology
 * (rtopo.c) use: a millisecond timeval, a log-safe copy of a server's
 * message, sending a command built from argv, telling an authentication
 * refusal apart, and the jitter generator. No state of their own.
 */

#ifndef ADMITD_RUTIL_H
#define ADMITD_RUTIL_H

#include "resp.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>

struct rconn;

/* rutil_tv - ms milliseconds as a struct timeval. */
struct timeval rutil_tv(int64_t ms);

/* rutil_log_safe - s copied into buf for a quoted log value: quotes, backslashes and controls become '?'. */
const char *rutil_log_safe(const char *s, char *buf, size_t n);

/* rutil_send_argv - send a formatted copy of argv on rc as kind/tag; false on failure. */
bool rutil_send_argv(struct rconn *rc, int argc, const char **argv, int kind, void *tag);

/*
 * rutil_auth_refusal - when error reply v says the server wants a password
 * we did not send, or refused the one we sent (sent: one was sent), true
 * with *msg (the log line's message) and *fix (what to set: the conf keys,
 * the URL) filled; else false. sentinel: v came from a sentinel. Redis 7
 * refuses an argument longer than 16 KiB from an unauthenticated client
 * before it parses the command ("Protocol error: unauthenticated bulk
 * length"), so a SCRIPT LOAD sent without AUTH is answered that way, not
 * with NOAUTH. Neither string holds a secret.
 */
bool rutil_auth_refusal(const struct rval *v, bool sentinel, bool sent, const char **msg,
			const char **fix);

/* rutil_rand - the next of *state's xorshift64 sequence (jitter only: no quality, no clock). */
uint64_t rutil_rand(uint64_t *state);

/* rutil_seed - a seed for rutil_rand, from an address and the pid. */
uint64_t rutil_seed(const void *addr);

#endif
