/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * test_libadmit.c - every libadmit call against a running admitd.
 *
 * Owns: the library's end-to-end checks. Run by test_client.py, which starts
 * the real daemon on proto/vectors/vectors.conf and passes its socket as
 * argv[1]. Keys here start with "lib-" so they never meet the vectors'.
 * Exits 0 when every check passed, 1 otherwise (each failure printed).
 */

#include "admit.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int failures;

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

static const char *sock_path;

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Take the lease out of a result and free the rest; the caller frees it. */
static char *steal_lease(struct admit_result *r)
{
	char *lease = r->lease;

	r->lease = NULL;
	admit_result_free(r);
	return lease;
}

static struct admit_req req(const char *scope, const char *key)
{
	struct admit_req rq = ADMIT_REQ_INIT;

	rq.scope = scope;
	rq.key = key;
	return rq;
}

static void test_connect(void)
{
	struct admit *a;
	struct admit_result r;

	a = admit_connect(sock_path);
	CHECK(a != NULL, "connect %s: %s", sock_path, strerror(errno));
	if (a == NULL)
		return;
	CHECK_STR(admit_socket_path(a), sock_path);
	admit_close(a);

	/* no argument: $ADMITD_SOCKET */
	setenv("ADMITD_SOCKET", sock_path, 1);
	a = admit_connect(NULL);
	CHECK(a != NULL, "connect via $ADMITD_SOCKET: %s", strerror(errno));
	if (a != NULL) {
		CHECK_STR(admit_socket_path(a), sock_path);
		CHECK(admit_ping(a, &r) == ADMIT_OK, "ping via env: %s", r.message);
		admit_result_free(&r);
		admit_close(a);
	}
	unsetenv("ADMITD_SOCKET");

	/* neither: the default path, which is not our daemon */
	errno = 0;
	a = admit_connect("/nonexistent/admitd.sock");
	CHECK(a == NULL && errno == ENOENT, "connect to a missing socket: errno %d", errno);
	admit_close(a);
}

static void test_ping_status(struct admit *a)
{
	struct admit_result r;
	size_t i;
	bool found = false;

	CHECK(admit_ping(a, &r) == ADMIT_OK, "ping: %s", r.message);
	CHECK(r.raw != NULL && strstr(r.raw, "\"ok\"") != NULL, "raw %s", r.raw);
	admit_result_free(&r);

	CHECK(admit_status(a, &r) == ADMIT_OK, "status: %s", r.message);
	CHECK(r.version != NULL, "status has a version");
	CHECK(r.uptime_s >= 0, "uptime_s %lld", (long long)r.uptime_s);
	CHECK_STR(r.backend, "local");
	CHECK(r.nscopes >= 10, "nscopes %zu", r.nscopes);
	for (i = 0; i < r.nscopes; i++) {
		if (strcmp(r.scopes[i].name, "solo") == 0) {
			found = true;
			CHECK(r.scopes[i].leases >= 0 && r.scopes[i].waiting >= 0,
			      "solo leases %lld waiting %lld", (long long)r.scopes[i].leases,
			      (long long)r.scopes[i].waiting);
		}
	}
	CHECK(found, "status lists scope solo");
	admit_result_free(&r);
	admit_result_free(&r); /* a freed result can be freed again */
}

static void test_acquire_release(struct admit *a)
{
	struct admit_req rq = req("open", "lib-acq-1");
	struct admit_result r, r2;
	char *lease;

	CHECK(admit_acquire(a, &rq, &r) == ADMIT_OK, "acquire: %s", r.message);
	CHECK(r.lease != NULL && r.lease[0] != '\0', "a lease");
	CHECK(r.waited_ms >= 0, "waited_ms %lld", (long long)r.waited_ms);
	CHECK_STR(r.backend, "local");
	CHECK(!r.shadow_limited, "not shadow limited");
	lease = steal_lease(&r);

	CHECK(admit_release(a, lease, NULL, 0, &r) == ADMIT_OK, "release: %s", r.message);
	CHECK(r.held, "first release: held true");
	admit_result_free(&r);
	CHECK(admit_release(a, lease, NULL, 0, &r) == ADMIT_OK, "release again: %s", r.message);
	CHECK(!r.held, "second release: held false");
	admit_result_free(&r);
	free(lease);

	CHECK(admit_release(a, "lib-no-such-lease", NULL, 0, &r) == ADMIT_OK, "%s", r.message);
	CHECK(!r.held, "unknown lease: held false");
	admit_result_free(&r);

	/* url: the host, lowercased, is the key */
	rq = req("once", NULL);
	rq.url = "https://LIB-Host.Example.com/path";
	CHECK(admit_try(a, &rq, &r) == ADMIT_OK, "try by url: %s", r.message);
	admit_result_free(&r);
	rq = req("once", "lib-host.example.com");
	admit_try(a, &rq, &r2);
	CHECK_ERR(r2, ADMIT_E_LIMITED);
	admit_result_free(&r2);
}

static void test_refusals(struct admit *a)
{
	struct admit_req rq = req("once", "lib-quota-1");
	struct admit_result r;
	int64_t t0;

	CHECK(admit_try(a, &rq, &r) == ADMIT_OK, "first try: %s", r.message);
	admit_result_free(&r);
	CHECK(admit_try(a, &rq, &r) == ADMIT_E_LIMITED, "second try: %d", r.err);
	CHECK(r.retry_after_ms > 3500000 && r.retry_after_ms <= 3600000, "retry_after_ms %lld",
	      (long long)r.retry_after_ms);
	CHECK_STR(r.rule, "quota 1/1h");
	CHECK(r.lease == NULL, "no lease when limited");
	CHECK(r.message != NULL, "a message");
	admit_result_free(&r);

	/* a budget shorter than the wait: budget_exceeded, at once */
	rq.timeout_ms = 2000;
	t0 = mono_ms();
	admit_acquire(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_BUDGET_EXCEEDED);
	CHECK(mono_ms() - t0 < 1000, "answered at once, took %lld ms", (long long)(mono_ms() - t0));
	CHECK(r.retry_after_ms > 2000, "retry_after_ms %lld", (long long)r.retry_after_ms);
	admit_result_free(&r);

	/* max_concurrent 1: a held lease makes the next acquire wait its budget */
	rq = req("solo", "lib-solo-1");
	CHECK(admit_acquire(a, &rq, &r) == ADMIT_OK, "solo acquire: %s", r.message);
	admit_result_free(&r);
	rq.timeout_ms = 150;
	t0 = mono_ms();
	admit_acquire(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_TIMEOUT);
	CHECK(mono_ms() - t0 >= 140, "waited %lld ms", (long long)(mono_ms() - t0));
	admit_result_free(&r);

	rq = req("nope", "lib-k");
	admit_acquire(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_UNKNOWN_SCOPE);
	CHECK(r.message != NULL, "unknown_scope has a message");
	admit_result_free(&r);

	/* shadow: admitted, flagged */
	rq = req("shadowed", "lib-shadow-1");
	CHECK(admit_try(a, &rq, &r) == ADMIT_OK && !r.shadow_limited, "shadow first: %d", r.err);
	admit_result_free(&r);
	CHECK(admit_try(a, &rq, &r) == ADMIT_OK && r.shadow_limited, "shadow second: %d", r.err);
	admit_result_free(&r);

	/* cost against a requests rule */
	rq = req("fw", "lib-cost-1");
	rq.cost = 5;
	CHECK(admit_try(a, &rq, &r) == ADMIT_OK, "cost 5: %s", r.message);
	admit_result_free(&r);
	rq.cost = 0; /* not sent: 1 */
	admit_try(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_LIMITED);
	CHECK_STR(r.rule, "requests fixed-window 5/1h");
	admit_result_free(&r);

	/* class */
	rq = req("classes", "lib-class-1");
	rq.cls = "background";
	CHECK(admit_try(a, &rq, &r) == ADMIT_OK, "background: %s", r.message);
	admit_result_free(&r);
	admit_try(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_LIMITED);
	admit_result_free(&r);
	rq.cls = NULL;
	CHECK(admit_try(a, &rq, &r) == ADMIT_OK, "default class: %s", r.message);
	admit_result_free(&r);
}

static void test_tokens_penalize(struct admit *a)
{
	const struct admit_token tk[] = { { "input", 300 }, { "output", 200 } };
	struct admit_req rq = req("tok", "lib-tok-1");
	struct admit_result r;
	char *lease;

	CHECK(admit_try(a, &rq, &r) == ADMIT_OK, "tok try: %s", r.message);
	lease = steal_lease(&r);
	CHECK(admit_release(a, lease, tk, 2, &r) == ADMIT_OK, "release tokens: %s", r.message);
	CHECK(r.held, "held");
	admit_result_free(&r);
	free(lease);
	admit_try(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_LIMITED);
	CHECK_STR(r.rule, "tokens fixed-window 100/1h");
	admit_result_free(&r);

	CHECK(admit_penalize(a, "open", "lib-pen-1", NULL, 60000, NULL, &r) == ADMIT_OK, "%s",
	      r.message);
	admit_result_free(&r);
	rq = req("open", "lib-pen-1");
	admit_try(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_LIMITED);
	CHECK_STR(r.rule, "penalty");
	CHECK(r.retry_after_ms > 50000 && r.retry_after_ms <= 60000, "retry_after_ms %lld",
	      (long long)r.retry_after_ms);
	admit_result_free(&r);

	CHECK(admit_penalize(a, "open", NULL, "https://LIB-Pen.Example.com/", -1, "120", &r) ==
		  ADMIT_OK,
	      "penalize header: %s", r.message);
	admit_result_free(&r);
	rq = req("open", "lib-pen.example.com");
	admit_try(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_LIMITED);
	CHECK(r.retry_after_ms > 110000 && r.retry_after_ms <= 120000, "retry_after_ms %lld",
	      (long long)r.retry_after_ms);
	admit_result_free(&r);

	admit_penalize(a, "nope", "k", NULL, 10, NULL, &r);
	CHECK_ERR(r, ADMIT_E_UNKNOWN_SCOPE);
	admit_result_free(&r);
	admit_penalize(a, "open", "lib-pen-2", NULL, 0, "soon", &r);
	CHECK_ERR(r, ADMIT_E_BAD_REQUEST);
	admit_result_free(&r);
}

/* One acquire over two scopes: all admit or none; one release frees both. */
static void test_targets(struct admit *a)
{
	const struct admit_target tg[] = {
		{ .scope = "solo", .key = "lib-tg-1" },
		{ .scope = "fw", .url = "http://LIB-TG.example.com/", .cost = 5 },
	};
	struct admit_req rq = ADMIT_REQ_INIT, one = req("solo", "lib-tg-1");
	struct admit_result r;
	char *lease;

	rq.targets = tg;
	rq.ntargets = 2;
	CHECK(admit_acquire(a, &rq, &r) == ADMIT_OK, "targets: %s", r.message);
	lease = steal_lease(&r);
	admit_try(a, &one, &r);
	CHECK_ERR(r, ADMIT_E_LIMITED);
	admit_result_free(&r);
	/* fw's 5/1h is spent: the whole multi-target acquire is refused */
	admit_try(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_LIMITED);
	admit_result_free(&r);
	CHECK(admit_release(a, lease, NULL, 0, &r) == ADMIT_OK && r.held, "release targets");
	admit_result_free(&r);
	free(lease);
	CHECK(admit_try(a, &one, &r) == ADMIT_OK, "solo free again: %s", r.message);
	admit_result_free(&r);
}

static void test_bad_args(struct admit *a)
{
	struct admit_req rq = req(NULL, "k");
	struct admit_result r;

	CHECK(admit_try(a, &rq, &r) == ADMIT_E_ARG, "no scope: %d", r.err);
	admit_result_free(&r);
	rq = req("open", "k");
	rq.url = "http://x/";
	CHECK(admit_acquire(a, &rq, &r) == ADMIT_E_ARG, "key and url: %d", r.err);
	admit_result_free(&r);
	CHECK(admit_release(a, NULL, NULL, 0, &r) == ADMIT_E_ARG, "no lease: %d", r.err);
	admit_result_free(&r);
	CHECK(admit_penalize(a, "open", "k", NULL, -1, NULL, &r) == ADMIT_E_ARG, "no hold: %d",
	      r.err);
	admit_result_free(&r);
	/* the handle still works after refused arguments */
	CHECK(admit_ping(a, &r) == ADMIT_OK, "ping after bad args: %s", r.message);
	admit_result_free(&r);
}

/* A detached lease outlives its connection; a plain one does not. */
static void test_detach(void)
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

static void test_threads(void)
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

int main(int argc, char **argv)
{
	struct admit *a;

	if (argc != 2) {
		fprintf(stderr, "usage: test_libadmit SOCKET\n");
		return 64;
	}
	sock_path = argv[1];
	test_connect();
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
