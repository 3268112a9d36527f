/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * libadmit_test.h - what the files of test_libadmit share: the CHECK macros
 * (a failed check is counted in `failures` and printed, the run goes on),
 * the daemon's socket, the small helpers of test_libadmit.c, the scopes of
 * NEWER_CONF the modes use, and each file's entry points, which main calls.
 */

#ifndef ADMIT_TEST_LIBADMIT_TEST_H
#define ADMIT_TEST_LIBADMIT_TEST_H

#include "admit.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern int failures;
extern const char *sock_path;

#define CHECK(cond, ...)                                                                \
	do {                                                                            \
		if (!(cond)) {                                                          \
			failures++;                                                     \
			fprintf(stderr, "%s:%d: FAIL %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                   \
			fprintf(stderr, "\n");                                          \
		}                                                                       \
	} while (0)

#define CHECK_ERR(res, want)                                                      \
	CHECK((res).err == (want), "err %d (%s), want %s; message %s", (res).err, \
	      admit_strerror((res).err), admit_strerror(want),                    \
	      (res).message ? (res).message : "-")

#define CHECK_STR(got, want)                                                          \
	CHECK((got) != NULL && strcmp((got), (want)) == 0, "got \"%s\", want \"%s\"", \
	      (got) ? (got) : "(null)", (want))

#define BUSY_RULE "requests token-bucket 10/1h"
#define REFILL_MS 720000 /* meter's 5/1h: one unit back every 720 s */

/* test_libadmit.c */
int64_t mono_ms(void);
char *steal_lease(struct admit_result *r);
struct admit_req req(const char *scope, const char *key);

/* libadmit_calls.c: every call on one connection */
void test_connect(void);
void test_connect_timeout(void);
void test_ping_status(struct admit *a);
void test_status_counters(struct admit *a);
void test_acquire_release(struct admit *a);
void test_refusals(struct admit *a);
void test_tokens_penalize(struct admit *a);
void test_targets(struct admit *a);
void test_cost_zero(struct admit *a);
void test_once(struct admit *a);
void test_tenant(struct admit *a);
void test_exceeds_limit(struct admit *a);
void test_reserve(struct admit *a);
void test_reset_inspect(struct admit *a);
void test_bad_args(struct admit *a);

/* libadmit_threads.c */
void test_detach(void);
void test_threads(void);

/* libadmit_modes.c: the scenarios the Python tests drive */
void mode_late(void);
void mode_restart(void);
void mode_inflight(const char *key);
void mode_budget(const char *key);
void mode_defaults(void);
void mode_fields(void);
void mode_override(void);

/* libadmit_cancel.c */
void mode_cancel(void);

#endif
