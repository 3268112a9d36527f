/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * test_libadmit.c - every libadmit call against a running admitd: main and
 * the helpers every file of the program uses.
 *
 * Run by test_client.py, which starts the real daemon on
 * proto/vectors/vectors.conf and passes its socket as argv[1]: the calls on
 * one connection (libadmit_calls.c), then detach and threads
 * (libadmit_threads.c). Keys here start with "lib-" so they never meet the
 * vectors'. Exits 0 when every check passed, 1 otherwise (each failure
 * printed).
 *
 * `test_libadmit MODE SOCKET [KEY]` runs one scenario whose daemon the
 * Python side starts late, restarts or kills around it, or starts on a conf
 * of its own (NEWER_CONF in test_client.py: the modes defaults, fields,
 * cancel and override; libadmit_modes.c and libadmit_cancel.c).
 */

#include "admit.h"
#include "libadmit_test.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int failures;
const char *sock_path;

int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Take the lease out of a result and free the rest; the caller frees it. */
char *steal_lease(struct admit_result *r)
{
	char *lease = r->lease;

	r->lease = NULL;
	admit_result_free(r);
	return lease;
}

struct admit_req req(const char *scope, const char *key)
{
	struct admit_req rq = ADMIT_REQ_INIT;

	rq.scope = scope;
	rq.key = key;
	return rq;
}

int main(int argc, char **argv)
{
	struct admit *a;

	if (argc == 3 || argc == 4) {
		sock_path = argv[2];
		if (strcmp(argv[1], "late") == 0)
			mode_late();
		else if (strcmp(argv[1], "restart") == 0)
			mode_restart();
		else if (strcmp(argv[1], "inflight") == 0 && argc == 4)
			mode_inflight(argv[3]);
		else if (strcmp(argv[1], "budget") == 0 && argc == 4)
			mode_budget(argv[3]);
		else if (strcmp(argv[1], "defaults") == 0)
			mode_defaults();
		else if (strcmp(argv[1], "fields") == 0)
			mode_fields();
		else if (strcmp(argv[1], "cancel") == 0)
			mode_cancel();
		else if (strcmp(argv[1], "override") == 0)
			mode_override();
		else
			CHECK(0, "unknown mode %s", argv[1]);
		printf("test_libadmit %s: %s\n", argv[1], failures ? "FAILED" : "ok");
		return failures ? 1 : 0;
	}
	if (argc != 2) {
		fprintf(stderr, "usage: test_libadmit SOCKET | test_libadmit MODE SOCKET [KEY]\n");
		return 64;
	}
	sock_path = argv[1];
	test_connect();
	test_connect_timeout();
	a = admit_connect(sock_path);
	if (a == NULL) {
		fprintf(stderr, "cannot connect to %s: %s\n", sock_path, strerror(errno));
		return 1;
	}
	test_ping_status(a);
	test_acquire_release(a);
	test_refusals(a);
	test_tokens_penalize(a);
	test_targets(a);
	test_cost_zero(a);
	test_once(a);
	test_tenant(a);
	test_exceeds_limit(a);
	test_reserve(a);
	test_reset_inspect(a);
	test_status_counters(a);
	test_bad_args(a);
	admit_close(a);
	test_detach();
	test_threads();
	if (failures)
		fprintf(stderr, "test_libadmit: %d check(s) failed\n", failures);
	else
		printf("test_libadmit: all checks passed\n");
	return failures ? 1 : 0;
}
