/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * libadmit_threads.c - libadmit across connections and threads: a detached
 * lease outlives its connection while a plain one does not, and threads
 * sharing the library each acquire and release on their own connections.
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

/* A detached lease outlives its connection; a plain one does not. */
void test_detach(void)
{
	struct admit *a = admit_connect(sock_path), *b = admit_connect(sock_path);
	struct admit_req rq = req("solo", "lib-detach-1");
	struct admit_result r;
	int64_t t0;
	char *lease;

	CHECK(a && b, "two handles");
	if (!a || !b)
		goto out;
	rq.detach = true;
	CHECK(admit_acquire(a, &rq, &r) == ADMIT_OK, "detached acquire: %s", r.message);
	lease = steal_lease(&r);
	admit_close(a);
	a = NULL;
	usleep(100 * 1000);
	admit_try(b, &rq, &r);
	CHECK_ERR(r, ADMIT_E_LIMITED);
	admit_result_free(&r);
	CHECK(admit_release(b, lease, NULL, 0, &r) == ADMIT_OK && r.held,
	      "release from another connection: %d held %d", r.err, r.held);
	admit_result_free(&r);
	free(lease);

	a = admit_connect(sock_path);
	rq = req("solo", "lib-detach-2");
	CHECK(a && admit_acquire(a, &rq, &r) == ADMIT_OK, "plain acquire");
	admit_result_free(&r);
	admit_close(a);
	a = NULL;
	/* the daemon releases when it sees the close: poll for it */
	t0 = mono_ms();
	while (admit_try(b, &rq, &r) != ADMIT_OK && mono_ms() - t0 < 2000) {
		admit_result_free(&r);
		usleep(10 * 1000);
	}
	CHECK_ERR(r, ADMIT_OK);
	admit_result_free(&r);
out:
	admit_close(a);
	admit_close(b);
}

#define NTHREADS 4
#define NROUNDS	 50

static void *thread_main(void *arg)
{
	struct admit *a = admit_connect(sock_path);
	struct admit_req rq = req("solo", (const char *)arg);
	struct admit_result r;
	intptr_t bad = 0;
	char *lease;
	int i;

	if (a == NULL)
		return (void *)(intptr_t)NROUNDS;
	for (i = 0; i < NROUNDS; i++) {
		if (admit_try(a, &rq, &r) != ADMIT_OK || r.lease == NULL) {
			bad++;
			admit_result_free(&r);
			continue;
		}
		lease = steal_lease(&r);
		if (admit_release(a, lease, NULL, 0, &r) != ADMIT_OK || !r.held)
			bad++;
		admit_result_free(&r);
		free(lease);
	}
	admit_close(a);
	return (void *)bad;
}

void test_threads(void)
{
	static const char *const keys[NTHREADS] = { "lib-th-0", "lib-th-1", "lib-th-2",
						    "lib-th-3" };
	pthread_t th[NTHREADS];
	void *bad;
	int i;

	for (i = 0; i < NTHREADS; i++)
		CHECK(pthread_create(&th[i], NULL, thread_main, (void *)keys[i]) == 0, "thread");
	for (i = 0; i < NTHREADS; i++) {
		pthread_join(th[i], &bad);
		CHECK(bad == NULL, "thread %d: %ld failed rounds", i, (long)(intptr_t)bad);
	}
}
