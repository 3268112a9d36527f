/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * admit_int.h - what the files of libadmit share and callers never see: the
 * handle (struct admit), its limits, and the calls one file makes into
 * another (connection, line I/O, reply decoding, the round trip). Every
 * declaration here is hidden: libadmit.so exports admit.h's calls and
 * nothing else.
 */

#ifndef ADMIT_INT_H
#define ADMIT_INT_H

#include "admit.h"

#include <jansson.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define ADMIT_HIDDEN __attribute__((visibility("hidden")))

#define ADMIT_IO_TIMEOUT_MS  10000
#define ADMIT_MAX_REPLY	     (16 * 1024 * 1024) /* a reply longer than this is garbage */
#define ADMIT_BACKOFF_MIN_MS 20			/* first pause between connect attempts */
#define ADMIT_BACKOFF_MAX_MS 200

struct admit {
	int fd;
	char *path;
	int64_t io_timeout_ms;
	int64_t connect_timeout_ms;
	uint64_t rng; /* xorshift state for the backoff's jitter */
	int64_t next_id;
	char *buf; /* bytes received and not yet consumed */
	size_t len;
	size_t cap;
	/* admit_cancel's side, touched from other threads and signal
	 * handlers: the request flag and the eventfd that wakes the poll (-1
	 * until the first acquire that may wait makes it). */
	atomic_int cancel;
	atomic_int wake_fd;
	bool cancelable; /* the call in progress reads an acquire's reply */
	char *tenant;	 /* admit_set_tenant: its acquires' "tenant"; NULL: none sent */
};

/* admit_conn.c: the handle's connection */

/* The monotonic clock in milliseconds. */
ADMIT_HIDDEN int64_t admit_now_ms(void);

/*
 * admit_open - connect a->path, retrying a socket that is missing or
 * refused until `deadline` (monotonic ms), with a jittered backoff. 0 or -1
 * with errno set.
 */
ADMIT_HIDDEN int admit_open(struct admit *a, int64_t deadline);

/* admit_drop - close the connection: after an error its state is unknown. */
ADMIT_HIDDEN void admit_drop(struct admit *a);

/* admit_hung_up - whether the daemon has closed its end since the last call. */
ADMIT_HIDDEN bool admit_hung_up(const struct admit *a);

/* admit_io.c: line I/O with deadlines, and admit_cancel's wake-up */

/*
 * admit_send_all - send n bytes before `deadline` (monotonic ms, -1: none).
 * 0, ADMIT_E_DEADLINE, ADMIT_E_IO or ADMIT_E_INTERRUPTED.
 */
ADMIT_HIDDEN int admit_send_all(struct admit *a, const char *p, size_t n, int64_t deadline);

/*
 * admit_read_line - one line (without "\n" or "\r\n") into a malloc'd *out.
 * 0 or a negative admit_client_err.
 */
ADMIT_HIDDEN int admit_read_line(struct admit *a, int64_t deadline, char **out);

/* admit_arm_cancel - ready admit_cancel for an acquire that may wait. */
ADMIT_HIDDEN void admit_arm_cancel(struct admit *a);

/* admit_result.c: the result's life */

/* admit_result_init - every field empty, the integers -1 where "absent" is. */
ADMIT_HIDDEN void admit_result_init(struct admit_result *res);

/* admit_fail - fail res with err and msg (NULL: err's meaning); returns err. */
ADMIT_HIDDEN int admit_fail(struct admit_result *res, int err, const char *msg);

/* admit_refuse - admit_result_init, then fail with ADMIT_E_ARG and msg. */
ADMIT_HIDDEN int admit_refuse(struct admit_result *res, const char *msg);

/* admit_reply.c: replies decoded */

/* The integer member k of o, -1 when absent or no integer. */
ADMIT_HIDDEN int64_t admit_json_int(json_t *o, const char *k);

/* A malloc'd copy of the string member k of o; NULL when absent. */
ADMIT_HIDDEN char *admit_json_str(json_t *o, const char *k);

/* admit_decode - fill res from a parsed reply object. Returns res->err. */
ADMIT_HIDDEN int admit_decode(json_t *rep, struct admit_result *res);

/* admit_decode_inspect - the inspect fields of a reply; 0 or -1 (no memory). */
ADMIT_HIDDEN int admit_decode_inspect(json_t *rep, struct admit_result *res);

/* admit_call.c: one request and its reply */

/*
 * admit_roundtrip - send `req` (consumed; NULL: out of memory) with a fresh
 * id and read its reply into res. `wait_ms`: how long the daemon may take
 * (-1 unknown); `acquire`: the budget covers connecting, and admit_cancel
 * may end the wait. Returns res->err.
 */
ADMIT_HIDDEN int admit_roundtrip(struct admit *a, json_t *req, int64_t wait_ms, bool acquire,
				 struct admit_result *res);

#endif
