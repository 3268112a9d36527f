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
 *
 * `test_libadmit MODE SOCKET [KEY]` runs one scenario whose daemon the
 * Python side starts late, restarts or kills around it, or starts on a conf
 * of its own (NEWER_CONF in test_client.py: the modes defaults, fields,
 * cancel and override; see main).
 */

#include "admit.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
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

	/* a missing socket, and a connect timeout of 0: fails at once */
	setenv("ADMITD_CONNECT_TIMEOUT", "0", 1);
	errno = 0;
	a = admit_connect("/nonexistent/admitd.sock");
	CHECK(a == NULL && errno == ENOENT, "connect to a missing socket: errno %d", errno);
	admit_close(a);
	unsetenv("ADMITD_CONNECT_TIMEOUT");
}

/* How long connects wait for a daemon that is not there. */
static void test_connect_timeout(void)
{
	static const struct {
		const char *env;
		int64_t ms;
	} envs[] = { { "0", 0 }, { "300", 300 }, { "300ms", 300 }, { "0.3s", 300 } };
	const char *missing = "/nonexistent/admitd.sock";
	struct admit_req rq = req("open", "lib-ct-1");
	struct admit_result r;
	struct admit *a;
	int64_t t0, took;
	size_t i;

	for (i = 0; i < sizeof(envs) / sizeof(envs[0]); i++) {
		setenv("ADMITD_CONNECT_TIMEOUT", envs[i].env, 1);
		t0 = mono_ms();
		errno = 0;
		a = admit_connect(missing);
		took = mono_ms() - t0;
		CHECK(a == NULL && errno == ENOENT, "ADMITD_CONNECT_TIMEOUT=%s: errno %d",
		      envs[i].env, errno);
		CHECK(took >= envs[i].ms && took < envs[i].ms + 400,
		      "ADMITD_CONNECT_TIMEOUT=%s: gave up after %lld ms", envs[i].env,
		      (long long)took);
		admit_close(a);
	}
	unsetenv("ADMITD_CONNECT_TIMEOUT");

	/* admit_new connects on the first call; the setter bounds it */
	a = admit_new(missing);
	CHECK(a != NULL, "admit_new does not connect");
	if (a == NULL)
		return;
	CHECK_STR(admit_socket_path(a), missing);
	admit_set_connect_timeout(a, 0);
	t0 = mono_ms();
	admit_ping(a, &r);
	CHECK_ERR(r, ADMIT_E_CONNECT);
	CHECK(mono_ms() - t0 < 200, "connect timeout 0 took %lld ms", (long long)(mono_ms() - t0));
	CHECK(r.message && strstr(r.message, missing) && strstr(r.message, "No such file"),
	      "message %s", r.message ? r.message : "-");
	admit_result_free(&r);
	admit_set_connect_timeout(a, 250);
	t0 = mono_ms();
	admit_status(a, &r);
	took = mono_ms() - t0;
	CHECK_ERR(r, ADMIT_E_CONNECT);
	CHECK(took >= 250 && took < 650, "connect timeout 250 took %lld ms", (long long)took);
	admit_result_free(&r);

	/* within the call's budget: try (0) tries once, a 300 ms acquire ~300 ms */
	admit_set_connect_timeout(a, 5000);
	t0 = mono_ms();
	admit_try(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_CONNECT);
	CHECK(mono_ms() - t0 < 200, "try took %lld ms", (long long)(mono_ms() - t0));
	admit_result_free(&r);
	rq.timeout_ms = 300;
	t0 = mono_ms();
	admit_acquire(a, &rq, &r);
	took = mono_ms() - t0;
	CHECK_ERR(r, ADMIT_E_CONNECT);
	CHECK(took >= 300 && took < 700, "acquire with a 300 ms budget took %lld ms",
	      (long long)took);
	admit_result_free(&r);
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
	CHECK(r.redis == NULL, "no redis block in local mode");
	admit_result_free(&r);
	admit_result_free(&r); /* a freed result can be freed again */
}

/* The status counters, after an admission and a refusal in scope "once". */
static void test_status_counters(struct admit *a)
{
	struct admit_req rq = req("once", "lib-counters-1");
	const struct admit_scope_stat *st = NULL;
	struct admit_result r;
	int64_t limited = -1;
	size_t i;

	CHECK(admit_try(a, &rq, &r) == ADMIT_OK, "first: %s", r.message);
	admit_result_free(&r);
	admit_try(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_LIMITED);
	admit_result_free(&r);
	CHECK(admit_status(a, &r) == ADMIT_OK, "status: %s", r.message);
	for (i = 0; i < r.nscopes; i++)
		if (strcmp(r.scopes[i].name, "once") == 0)
			st = &r.scopes[i];
	CHECK(st != NULL, "scope once in status");
	if (st != NULL) {
		CHECK(st->admitted >= 1 && st->refused >= 1, "admitted %lld refused %lld",
		      (long long)st->admitted, (long long)st->refused);
		CHECK(st->timeouts >= 0 && st->canceled >= 0 && st->fallback_admitted >= 0 &&
			  st->shadow_limited >= 0 && st->expired >= 0 && st->wait_ms_total >= 0 &&
			  st->keys >= 1,
		      "counters present");
		for (i = 0; i < st->nrefusals; i++)
			if (strcmp(st->refusals[i].name, "limited") == 0)
				limited = st->refusals[i].count;
		CHECK(limited >= 1 && limited <= st->refused, "refusals.limited %lld",
		      (long long)limited);
	}
	admit_result_free(&r);
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

/* cost 0 is sent as 0 (ADMIT_COST_ZERO) and takes nothing. */
static void test_cost_zero(struct admit *a)
{
	struct admit_req rq = req("fw", "lib-cost0-1");
	struct admit_result r;
	int i;

	rq.cost = ADMIT_COST_ZERO;
	for (i = 0; i < 3; i++) {
		CHECK(admit_try(a, &rq, &r) == ADMIT_OK, "cost 0: %s", r.message);
		admit_result_free(&r);
	}
	rq.cost = 5; /* fw's whole 5/1h is still there */
	CHECK(admit_try(a, &rq, &r) == ADMIT_OK, "cost 5 after cost 0: %s", r.message);
	admit_result_free(&r);
	rq.cost = 1;
	admit_try(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_LIMITED);
	admit_result_free(&r);
	rq.cost = -2;
	CHECK(admit_try(a, &rq, &r) == ADMIT_E_ARG, "cost -2: %d", r.err);
	admit_result_free(&r);
}

/* admit_once, admit_try_once: admissions with nothing to release. */
static void test_once(struct admit *a)
{
	struct admit_req rq = req("fw", "lib-once-1");
	struct admit_result r;

	rq.cost = 2;
	CHECK(admit_once(a, &rq, &r) == ADMIT_OK, "once: %s", r.message);
	CHECK(r.lease == NULL, "no lease: %s", r.lease ? r.lease : "-");
	CHECK(admit_result_remaining(&r) == 3, "remaining %lld",
	      (long long)admit_result_remaining(&r));
	admit_result_free(&r);
	rq.cost = 3;
	CHECK(admit_try_once(a, &rq, &r) == ADMIT_OK, "try once: %s", r.message);
	CHECK(admit_result_remaining(&r) == 0, "remaining %lld",
	      (long long)admit_result_remaining(&r));
	admit_result_free(&r);
	rq.cost = 1; /* the five are spent, leases or not */
	admit_try_once(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_LIMITED);
	CHECK(r.retry_after_ms > 0, "retry_after_ms %lld", (long long)r.retry_after_ms);
	admit_result_free(&r);
	rq.detach = true; /* nothing to detach: refused before anything is sent */
	CHECK(admit_try_once(a, &rq, &r) == ADMIT_E_ARG, "detach without a lease: %d", r.err);
	admit_result_free(&r);
	rq = req("solo", "lib-once-2"); /* max_concurrent: a release books */
	admit_try_once(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_BAD_REQUEST);
	CHECK(r.message != NULL && strstr(r.message, "max_concurrent") != NULL, "message %s",
	      r.message ? r.message : "-");
	admit_result_free(&r);
	CHECK(admit_try(a, &rq, &r) == ADMIT_OK, "then with a lease: %s", r.message);
	if (r.lease != NULL) {
		struct admit_result rel;
		CHECK(admit_release(a, r.lease, NULL, 0, &rel) == ADMIT_OK && rel.held,
		      "release: %s", rel.message);
		admit_result_free(&rel);
	}
	admit_result_free(&r);
}

/* A cost above a rule's capacity: exceeds_limit at once, with the limit. */
static void test_exceeds_limit(struct admit *a)
{
	struct admit_req rq = req("fw", "lib-exceeds-1");
	struct admit_result r;
	int64_t t0;

	rq.cost = 6;
	rq.timeout_ms = 5000;
	t0 = mono_ms();
	admit_acquire(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_EXCEEDS_LIMIT);
	CHECK(mono_ms() - t0 < 1000, "answered at once: %lld ms", (long long)(mono_ms() - t0));
	CHECK(r.limit == 5, "limit %lld", (long long)r.limit);
	CHECK(r.retry_after_ms == -1, "no retry_after_ms: %lld", (long long)r.retry_after_ms);
	CHECK_STR(r.rule, "requests fixed-window 5/1h");
	CHECK_STR(admit_strerror(r.err), "exceeds_limit");
	admit_result_free(&r);
	rq.cost = 5; /* nothing was booked */
	CHECK(admit_try(a, &rq, &r) == ADMIT_OK && r.limit == -1, "cost 5: %s", r.message);
	admit_result_free(&r);
}

/* reserve: charged at acquire, settled by the release's counts. */
static void test_reserve(struct admit *a)
{
	const struct admit_token res80[] = { { "output", 80 } };
	const struct admit_token used10[] = { { "output", 10 } };
	const struct admit_token dup[] = { { "output", 1 }, { "output", 2 } };
	const struct admit_token neg[] = { { "output", -1 } };
	struct admit_token many[ADMIT_MAX_TOKENS + 1];
	struct admit_req rq = req("tok", "lib-reserve-1");
	struct admit_result r;
	char *lease;
	size_t i;

	rq.reserve = res80;
	rq.nreserve = 1;
	CHECK(admit_acquire(a, &rq, &r) == ADMIT_OK, "reserve 80: %s", r.message);
	lease = steal_lease(&r);
	admit_try(a, &rq, &r); /* tokens 100/1h: 20 left */
	CHECK_ERR(r, ADMIT_E_LIMITED);
	CHECK_STR(r.rule, "tokens fixed-window 100/1h");
	admit_result_free(&r);
	CHECK(admit_release(a, lease, used10, 1, &r) == ADMIT_OK && r.held, "release: %s",
	      r.message);
	admit_result_free(&r);
	free(lease);
	CHECK(admit_try(a, &rq, &r) == ADMIT_OK, "90 left after settling: %s", r.message);
	admit_result_free(&r);

	rq.reserve = dup;
	rq.nreserve = 2;
	CHECK(admit_try(a, &rq, &r) == ADMIT_E_ARG, "a name twice: %d", r.err);
	admit_result_free(&r);
	rq.reserve = neg;
	rq.nreserve = 1;
	CHECK(admit_try(a, &rq, &r) == ADMIT_E_ARG, "negative: %d", r.err);
	admit_result_free(&r);
	for (i = 0; i < ADMIT_MAX_TOKENS + 1; i++) {
		many[i].name = "x";
		many[i].count = 1;
	}
	rq.reserve = many;
	rq.nreserve = ADMIT_MAX_TOKENS + 1;
	CHECK(admit_try(a, &rq, &r) == ADMIT_E_ARG, "17 names: %d", r.err);
	admit_result_free(&r);
}

/* reset clears penalty and pacing; inspect shows where a key stands. */
static void test_reset_inspect(struct admit *a)
{
	struct admit_req rq = req("open", "lib-reset-1");
	struct admit_result r;
	const struct admit_inspect *in;
	char *lease;

	CHECK(admit_penalize(a, "open", "lib-reset-1", NULL, 60000, NULL, &r) == ADMIT_OK, "%s",
	      r.message);
	admit_result_free(&r);
	CHECK(admit_inspect(a, "open", "lib-reset-1", NULL, NULL, &r) == ADMIT_OK, "inspect: %s",
	      r.message);
	in = r.inspect;
	CHECK(in != NULL, "res->inspect");
	if (in != NULL) {
		CHECK_STR(in->scope, "open");
		CHECK_STR(in->key, "lib-reset-1");
		CHECK(in->penalty_ms > 55000 && in->penalty_ms <= 60000, "penalty_ms %lld",
		      (long long)in->penalty_ms);
		CHECK(in->next_in_ms == 0 && in->leases == 0, "next_in_ms %lld leases %lld",
		      (long long)in->next_in_ms, (long long)in->leases);
		CHECK(!in->has_quota, "scope open has no quota");
	}
	CHECK_STR(r.backend, "local");
	admit_result_free(&r);
	CHECK(admit_reset(a, "open", "lib-reset-1", NULL, &r) == ADMIT_OK, "reset: %s", r.message);
	admit_result_free(&r);
	CHECK(admit_try(a, &rq, &r) == ADMIT_OK, "admitted after reset: %s", r.message);
	admit_result_free(&r);

	/* pacing (min_delay 1h), by url */
	rq = req("paced", "lib-reset.example.com");
	CHECK(admit_try(a, &rq, &r) == ADMIT_OK, "paced: %s", r.message);
	lease = steal_lease(&r);
	CHECK(lease && admit_release(a, lease, NULL, 0, &r) == ADMIT_OK, "release");
	admit_result_free(&r);
	free(lease);
	admit_try(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_LIMITED);
	admit_result_free(&r);
	CHECK(admit_inspect(a, "paced", NULL, "http://LIB-Reset.Example.com/x", NULL, &r) ==
		  ADMIT_OK,
	      "inspect by url: %s", r.message);
	CHECK(r.inspect && r.inspect->next_in_ms > 3500000, "next_in_ms %lld",
	      r.inspect ? (long long)r.inspect->next_in_ms : -2LL);
	admit_result_free(&r);
	CHECK(admit_reset(a, "paced", NULL, "http://lib-reset.example.com/", &r) == ADMIT_OK,
	      "reset by url: %s", r.message);
	admit_result_free(&r);
	CHECK(admit_try(a, &rq, &r) == ADMIT_OK, "paced after reset: %s", r.message);
	admit_result_free(&r);

	/* quota and rules */
	CHECK(admit_inspect(a, "once", "lib-inspect-q", NULL, NULL, &r) == ADMIT_OK, "%s",
	      r.message);
	CHECK(r.inspect && r.inspect->has_quota && r.inspect->quota_limit == 1 &&
		  r.inspect->quota_used == 0,
	      "quota of once");
	admit_result_free(&r);
	rq = req("fw", "lib-inspect-r");
	rq.cost = 2;
	CHECK(admit_try(a, &rq, &r) == ADMIT_OK, "fw cost 2: %s", r.message);
	admit_result_free(&r);
	CHECK(admit_inspect(a, "fw", "lib-inspect-r", NULL, NULL, &r) == ADMIT_OK, "%s", r.message);
	CHECK(r.inspect && r.inspect->nrules == 1, "fw has one rule");
	if (r.inspect && r.inspect->nrules == 1) {
		CHECK_STR(r.inspect->rules[0].rule, "requests fixed-window 5/1h");
		CHECK(r.inspect->rules[0].capacity == 5 && r.inspect->rules[0].remaining == 3,
		      "capacity %lld remaining %lld", (long long)r.inspect->rules[0].capacity,
		      (long long)r.inspect->rules[0].remaining);
	}
	admit_result_free(&r);

	admit_inspect(a, "nope", "k", NULL, NULL, &r);
	CHECK_ERR(r, ADMIT_E_UNKNOWN_SCOPE);
	CHECK(r.inspect == NULL, "no inspect on a failure");
	admit_result_free(&r);
	/* without a key: the scope's default key, and open has none */
	CHECK(admit_reset(a, "open", NULL, NULL, &r) == ADMIT_E_BAD_REQUEST,
	      "reset without key: %d", r.err);
	admit_result_free(&r);
	CHECK(admit_inspect(a, "open", "k", "http://k/", NULL, &r) == ADMIT_E_ARG,
	      "inspect with key and url: %d", r.err);
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

/*
 * The scenarios test_client.py drives, each against a daemon it starts
 * late, restarts or kills. Lines on stdout tell the driver where we are;
 * a line on stdin lets us go on. Each returns the exit status.
 */

/* Wait for one line on stdin (the driver did its part). */
static void wait_for_go(void)
{
	char line[64];

	if (fgets(line, sizeof(line), stdin) == NULL)
		CHECK(0, "no go line on stdin");
}

static void say(const char *what)
{
	printf("%s\n", what);
	fflush(stdout);
}

/* late: the daemon starts after we do; admit_connect waits for it. */
static void mode_late(void)
{
	struct admit *a;
	struct admit_result r;
	int64_t t0 = mono_ms();

	a = admit_connect(sock_path);
	CHECK(a != NULL, "connect waits for the daemon: %s", strerror(errno));
	if (a == NULL)
		return;
	printf("connected after %lld ms\n", (long long)(mono_ms() - t0));
	CHECK(admit_ping(a, &r) == ADMIT_OK, "ping: %s", r.message);
	admit_result_free(&r);
	admit_close(a);
}

/*
 * restart: between two calls the daemon restarts (at once, or with a gap
 * the connect retry covers): the second call connects again and succeeds.
 */
static void mode_restart(void)
{
	struct admit *a = admit_connect(sock_path);
	struct admit_req rq = req("solo", "lib-restart-1");
	struct admit_result r;

	CHECK(a != NULL, "connect: %s", strerror(errno));
	if (a == NULL)
		return;
	CHECK(admit_ping(a, &r) == ADMIT_OK, "ping: %s", r.message);
	admit_result_free(&r);
	say("ready");
	wait_for_go();
	rq.timeout_ms = 3000;
	CHECK(admit_acquire(a, &rq, &r) == ADMIT_OK, "acquire after the restart: %s", r.message);
	admit_result_free(&r);
	admit_close(a);
}

/*
 * inflight: an acquire waiting when the daemon dies fails (ADMIT_E_IO, not
 * sent again); the next call, after the daemon is back, connects again.
 */
static void mode_inflight(const char *key)
{
	struct admit *a = admit_connect(sock_path);
	struct admit_req rq = req("solo", key);
	struct admit_result r;

	CHECK(a != NULL, "connect: %s", strerror(errno));
	if (a == NULL)
		return;
	rq.timeout_ms = 20000;
	say("ready");
	admit_acquire(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_IO);
	admit_result_free(&r);
	say("lost");
	wait_for_go();
	CHECK(admit_ping(a, &r) == ADMIT_OK, "ping after the daemon came back: %s", r.message);
	admit_result_free(&r);
	admit_close(a);
}

/*
 * budget: the socket appears ~500 ms after we start, on a key the driver
 * holds: a 1000 ms acquire times out within ~1000 ms in all, the connect
 * having taken its share of the budget.
 */
static void mode_budget(const char *key)
{
	struct admit *a = admit_new(sock_path);
	struct admit_req rq = req("solo", key);
	struct admit_result r;
	int64_t t0 = mono_ms(), took;

	CHECK(a != NULL, "admit_new");
	if (a == NULL)
		return;
	rq.timeout_ms = 1000;
	admit_acquire(a, &rq, &r);
	took = mono_ms() - t0;
	CHECK_ERR(r, ADMIT_E_TIMEOUT);
	admit_result_free(&r);
	printf("took %lld ms\n", (long long)took);
	admit_close(a);
}

/* The scopes of NEWER_CONF (test_client.py) the modes below use. */
#define BUSY_RULE "requests token-bucket 10/1h"
#define REFILL_MS 720000 /* meter's 5/1h: one unit back every 720 s */

/*
 * defaults: reset, inspect and penalize with neither key nor url act on the
 * scope's default key; release's outcome is sent when valid, refused here
 * (ADMIT_E_ARG, nothing sent) when not.
 */
static void mode_defaults(void)
{
	static const char *const outcomes[] = { "ok", "limited", "error", NULL };
	struct admit *a = admit_connect(sock_path);
	struct admit_req rq = req("dflt", "lib-outcome");
	struct admit_result r;
	char *lease;
	size_t i;

	CHECK(a != NULL, "connect: %s", strerror(errno));
	if (a == NULL)
		return;
	CHECK(admit_penalize(a, "dflt", NULL, NULL, 60000, NULL, &r) == ADMIT_OK,
	      "penalize the default key: %s", r.message);
	admit_result_free(&r);
	CHECK(admit_inspect(a, "dflt", NULL, NULL, NULL, &r) == ADMIT_OK, "inspect: %s", r.message);
	if (r.inspect != NULL) {
		CHECK_STR(r.inspect->key, "shared");
		CHECK(r.inspect->penalty_ms > 55000, "penalty_ms %lld",
		      (long long)r.inspect->penalty_ms);
	}
	admit_result_free(&r);
	CHECK(admit_reset(a, "dflt", NULL, NULL, &r) == ADMIT_OK, "reset: %s", r.message);
	admit_result_free(&r);
	CHECK(admit_inspect(a, "dflt", NULL, NULL, NULL, &r) == ADMIT_OK, "inspect: %s", r.message);
	CHECK(r.inspect != NULL && r.inspect->penalty_ms == 0, "penalty lifted");
	admit_result_free(&r);
	admit_inspect(a, "meter", NULL, NULL, NULL, &r);
	CHECK_ERR(r, ADMIT_E_BAD_REQUEST); /* no default key there */
	admit_result_free(&r);
	admit_inspect(a, "dflt", "k", "http://k/", NULL, &r);
	CHECK_ERR(r, ADMIT_E_ARG);
	admit_result_free(&r);

	for (i = 0; i < sizeof(outcomes) / sizeof(outcomes[0]); i++) {
		CHECK(admit_acquire(a, &rq, &r) == ADMIT_OK, "acquire: %s", r.message);
		lease = steal_lease(&r);
		CHECK(admit_release_outcome(a, lease, NULL, 0, outcomes[i], &r) == ADMIT_OK,
		      "release outcome %s: %s", outcomes[i] ? outcomes[i] : "NULL", r.message);
		CHECK(r.held, "held");
		admit_result_free(&r);
		free(lease);
	}
	CHECK(admit_acquire(a, &rq, &r) == ADMIT_OK, "acquire: %s", r.message);
	lease = steal_lease(&r);
	admit_release_outcome(a, lease, NULL, 0, "429", &r);
	CHECK_ERR(r, ADMIT_E_ARG);
	CHECK(r.message && strstr(r.message, "\"limited\""), "message %s", r.message);
	admit_result_free(&r);
	CHECK(admit_release(a, lease, NULL, 0, &r) == ADMIT_OK && r.held,
	      "the refused release sent nothing: still held");
	admit_result_free(&r);
	free(lease);
	admit_close(a);
}

/*
 * The limits of a refusal of busy (max_concurrent 1, 10/1h) and meter's
 * spent 5/1h together: per meter, the requests meter's tightest is meter's
 * rule (0 left of 5, before busy's 9 of 10), the concurrency meter busy's
 * max_concurrent; walked by index and found by name.
 */
static void check_limits(const struct admit_result *r)
{
	char *meter = NULL, *rule = NULL;
	int64_t limit = -1, left = -1, reset = -1;
	bool seen[2] = { false, false };
	size_t i;

	for (i = 0; admit_result_limit(r, i, &meter, &rule, &limit, &left, &reset) == 1; i++) {
		if (strcmp(meter, "requests") == 0) {
			seen[0] = true;
			CHECK_STR(rule, "0");
			CHECK(limit == 5 && left == 0, "requests: %lld of %lld", (long long)left,
			      (long long)limit);
			CHECK(reset > 5 * REFILL_MS - 60000 && reset <= 5 * REFILL_MS,
			      "requests reset_ms %lld", (long long)reset);
		} else if (strcmp(meter, "concurrency") == 0) {
			seen[1] = true;
			CHECK_STR(rule, "max_concurrent");
			CHECK(limit == 1 && left == 1, "concurrency: %lld of %lld", (long long)left,
			      (long long)limit);
		} else {
			CHECK(false, "meter %s", meter);
		}
		free(meter);
		free(rule);
		meter = rule = NULL;
	}
	CHECK(i == 2 && seen[0] && seen[1], "%zu meters", i);
	CHECK(admit_result_limit(r, 2, NULL, NULL, NULL, NULL, NULL) == 0, "past the last");
	CHECK(admit_result_limit_of(r, "requests", NULL, &limit, &left, NULL) == 1 && limit == 5 &&
		  left == 0,
	      "requests by name: %lld of %lld", (long long)left, (long long)limit);
	CHECK(admit_result_limit_of(r, "tokens", &rule, NULL, NULL, NULL) == 0 && rule == NULL,
	      "no tokens meter");
	CHECK(admit_result_limit_of(r, NULL, NULL, NULL, NULL, NULL) == 0, "a NULL meter");
}

/*
 * fields: remaining and reset_ms of an admission and a refusal, and the
 * refusing target, read through their accessors.
 */
static void mode_fields(void)
{
	struct admit *a = admit_connect(sock_path);
	struct admit_req rq = req("meter", "lib-fields");
	struct admit_target tg[2] = { { .scope = "busy", .key = "lib-fields" },
				      { .scope = "meter", .key = "lib-fields" } };
	struct admit_result r;
	char *scope = NULL, *key = NULL;
	int64_t ms;

	CHECK(a != NULL, "connect: %s", strerror(errno));
	if (a == NULL)
		return;
	CHECK(admit_acquire(a, &rq, &r) == ADMIT_OK, "acquire: %s", r.message);
	CHECK(admit_result_remaining(&r) == 4, "remaining %lld",
	      (long long)admit_result_remaining(&r));
	ms = admit_result_reset_ms(&r);
	CHECK(ms > REFILL_MS - 60000 && ms <= REFILL_MS, "reset_ms %lld", (long long)ms);
	CHECK(admit_result_target(&r, &scope, &key) == -1 && scope == NULL && key == NULL,
	      "no target on an admission");
	free(steal_lease(&r));
	rq.cost = 4;
	CHECK(admit_try(a, &rq, &r) == ADMIT_OK, "cost 4: %s", r.message);
	CHECK(admit_result_remaining(&r) == 0, "remaining %lld",
	      (long long)admit_result_remaining(&r));
	admit_result_free(&r);
	rq.cost = 0;
	admit_try(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_LIMITED);
	CHECK(admit_result_remaining(&r) == 0, "refusal remaining %lld",
	      (long long)admit_result_remaining(&r));
	ms = admit_result_reset_ms(&r);
	CHECK(ms > 5 * REFILL_MS - 60000 && ms <= 5 * REFILL_MS, "refusal reset_ms %lld",
	      (long long)ms);
	CHECK(admit_result_target(&r, &scope, &key) == 0, "target index");
	CHECK_STR(scope, "meter");
	CHECK_STR(key, "lib-fields");
	free(scope);
	free(key);
	admit_result_free(&r);
	rq = (struct admit_req)ADMIT_REQ_INIT;
	rq.targets = tg;
	rq.ntargets = 2;
	admit_try(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_LIMITED);
	check_limits(&r);
	CHECK(admit_result_target(&r, NULL, &key) == 1, "the second target refused");
	CHECK_STR(key, "lib-fields");
	free(key);
	admit_result_free(&r);
	CHECK(admit_ping(a, &r) == ADMIT_OK, "ping: %s", r.message);
	CHECK(admit_result_remaining(&r) == -1 && admit_result_reset_ms(&r) == -1,
	      "absent fields are -1");
	admit_result_free(&r);
	memset(&r, 0, sizeof(r));
	CHECK(admit_result_remaining(&r) == -1 && admit_result_target(&r, &scope, NULL) == -1,
	      "a zeroed result has none");
	admit_close(a);
}

/* Whether an inspect of scope ovr's key k shows an override in force. */
static bool ovr_shown(struct admit *a, const char *k)
{
	struct admit_result r;
	bool shown;

	CHECK(admit_inspect(a, "ovr", k, NULL, NULL, &r) == ADMIT_OK, "inspect: %s", r.message);
	shown = r.raw != NULL && strstr(r.raw, "\"override\":{\"ttl_ms\":") != NULL;
	admit_result_free(&r);
	return shown;
}

/*
 * override: on NEWER_CONF's [scope ovr] (rule 0 `requests fixed-window
 * 5/1h`, override_max 2, default key "k"), a rule tightened to 1 admits one
 * try and refuses the next; loosening past 2 x 5 is bad_request; inspect
 * shows the override until reset lifts it; bad arguments send nothing.
 */
static void mode_override(void)
{
	static const struct admit_rule_amount one[] = { { "0", 1 } }, eleven[] = { { "0", 11 } };
	static const struct admit_rule_amount twice[] = { { "0", 1 }, { "0", 2 } };
	static const struct admit_rule_amount zero[] = { { "0", 0 } }, unnamed[] = { { "", 1 } };
	static const struct {
		const char *what, *scope, *url;
		int64_t ttl_ms, min_delay_ms;
		const struct admit_rule_amount *rules;
		size_t nrules;
	} bad[] = {
		{ "no scope", NULL, NULL, 1000, -1, one, 1 },
		{ "key and url", "ovr", "http://k/", 1000, -1, one, 1 },
		{ "ttl 0", "ovr", NULL, 0, -1, one, 1 },
		{ "nothing to set", "ovr", NULL, 1000, -1, NULL, 0 },
		{ "min_delay_ms below -1", "ovr", NULL, 1000, -2, one, 1 },
		{ "rules NULL", "ovr", NULL, 1000, -1, NULL, 1 },
		{ "a rule twice", "ovr", NULL, 1000, -1, twice, 2 },
		{ "amount 0", "ovr", NULL, 1000, -1, zero, 1 },
		{ "an empty rule", "ovr", NULL, 1000, -1, unnamed, 1 },
	};
	struct admit *a = admit_connect(sock_path);
	struct admit_req rq = req("ovr", "lib-ovr");
	struct admit_result r;
	size_t i;

	CHECK(a != NULL, "connect: %s", strerror(errno));
	if (a == NULL)
		return;
	CHECK(admit_override(a, "ovr", "lib-ovr", NULL, 60000, -1, one, 1, &r) == ADMIT_OK,
	      "override: %s", r.message);
	CHECK_STR(r.backend, "local");
	CHECK(r.raw != NULL && strstr(r.raw, "\"ttl_ms\":60000") != NULL, "reply %s",
	      r.raw ? r.raw : "-");
	admit_result_free(&r);
	CHECK(admit_try(a, &rq, &r) == ADMIT_OK, "first try: %s", r.message);
	CHECK(admit_result_remaining(&r) == 0, "remaining %lld",
	      (long long)admit_result_remaining(&r));
	admit_result_free(&r);
	admit_try(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_LIMITED);
	CHECK_STR(r.rule, "requests fixed-window 5/1h");
	admit_result_free(&r);

	admit_override(a, "ovr", "lib-ovr", NULL, 60000, -1, eleven, 1, &r);
	CHECK_ERR(r, ADMIT_E_BAD_REQUEST);
	CHECK(r.message && strstr(r.message, "override_max"), "message %s", r.message);
	admit_result_free(&r);
	CHECK(ovr_shown(a, "lib-ovr"), "inspect shows the override");
	CHECK(admit_inspect(a, "ovr", "lib-ovr", NULL, NULL, &r) == ADMIT_OK, "inspect: %s",
	      r.message);
	CHECK(r.inspect && r.inspect->nrules == 1 && r.inspect->rules[0].capacity == 1,
	      "the rule's capacity is the override's");
	admit_result_free(&r);
	CHECK(admit_reset(a, "ovr", "lib-ovr", NULL, &r) == ADMIT_OK, "reset: %s", r.message);
	admit_result_free(&r);
	CHECK(!ovr_shown(a, "lib-ovr"), "reset lifted the override");
	CHECK(admit_try(a, &rq, &r) == ADMIT_OK, "admitted after reset: %s", r.message);
	admit_result_free(&r);

	/* the default key, by url, and the daemon's refusals */
	CHECK(admit_override(a, "ovr", NULL, NULL, 60000, -1, one, 1, &r) == ADMIT_OK,
	      "override the default key: %s", r.message);
	admit_result_free(&r);
	CHECK(ovr_shown(a, "k"), "the default key is k");
	CHECK(admit_override(a, "ovr", NULL, "https://LIB-Ovr.Example.com/x", 1000, -1, one, 1,
			     &r) == ADMIT_OK,
	      "override by url: %s", r.message);
	admit_result_free(&r);
	CHECK(ovr_shown(a, "lib-ovr.example.com"), "keyed on the url's host");
	admit_override(a, "hold", "lib-ovr", NULL, 60000, -1, one, 1, &r);
	CHECK_ERR(r, ADMIT_E_BAD_REQUEST); /* no override_max there */
	admit_result_free(&r);
	admit_override(a, "ovr", "lib-ovr", NULL, 60000, 10, NULL, 0, &r);
	CHECK_ERR(r, ADMIT_E_BAD_REQUEST); /* ovr has no min_delay */
	admit_result_free(&r);
	admit_override(a, "nope", "lib-ovr", NULL, 60000, -1, one, 1, &r);
	CHECK_ERR(r, ADMIT_E_UNKNOWN_SCOPE);
	admit_result_free(&r);

	/* refused here, nothing sent */
	CHECK(admit_override(NULL, "ovr", "k", NULL, 1000, -1, one, 1, &r) == ADMIT_E_ARG,
	      "no handle");
	admit_result_free(&r);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		admit_override(a, bad[i].scope, "k", bad[i].url, bad[i].ttl_ms, bad[i].min_delay_ms,
			       bad[i].rules, bad[i].nrules, &r);
		CHECK(r.err == ADMIT_E_ARG, "%s: err %d", bad[i].what, r.err);
		admit_result_free(&r);
	}
	CHECK(admit_ping(a, &r) == ADMIT_OK, "ping after bad args: %s", r.message);
	admit_result_free(&r);
	admit_close(a);
}

/* status' "waiting" of scope busy, -1 when it cannot be read. */
static int64_t busy_waiting(struct admit *c)
{
	struct admit_result r;
	int64_t n = -1;
	size_t i;

	if (admit_status(c, &r) == ADMIT_OK)
		for (i = 0; i < r.nscopes; i++)
			if (strcmp(r.scopes[i].name, "busy") == 0)
				n = r.scopes[i].waiting;
	admit_result_free(&r);
	return n;
}

/* Poll until busy has `n` waiting (true), or 5 s have passed (false). */
static bool busy_waits(struct admit *c, int64_t n)
{
	int64_t end = mono_ms() + 5000;
	const struct timespec tick = { 0, 10 * 1000000L };

	while (busy_waiting(c) != n) {
		if (mono_ms() >= end)
			return false;
		nanosleep(&tick, NULL);
	}
	return true;
}

/* busy's remaining units for key k, -1 when inspect fails. */
static int64_t busy_remaining(struct admit *c, const char *k)
{
	struct admit_result r;
	int64_t n = -1;
	size_t i;

	if (admit_inspect(c, "busy", k, NULL, NULL, &r) == ADMIT_OK)
		for (i = 0; i < r.inspect->nrules; i++)
			if (strcmp(r.inspect->rules[i].rule, BUSY_RULE) == 0)
				n = r.inspect->rules[i].remaining;
	admit_result_free(&r);
	return n;
}

struct canceler {
	struct admit *watch; /* its own handle: a handle serves one thread */
	struct admit *victim;
	pthread_t signal_to; /* with `by_signal`: SIGUSR1 to this thread instead */
	bool by_signal;
	bool seen;
};

static struct admit *cancel_on_signal;

static void on_usr1(int sig)
{
	(void)sig;
	admit_cancel(cancel_on_signal);
}

static void *canceler_main(void *arg)
{
	struct canceler *cn = arg;

	cn->seen = busy_waits(cn->watch, 1);
	if (cn->by_signal)
		pthread_kill(cn->signal_to, SIGUSR1);
	else
		admit_cancel(cn->victim);
	return NULL;
}

/*
 * One acquire on busy/k that waits behind a holder, canceled from another
 * thread (or by a signal whose handler calls admit_cancel): it returns
 * ADMIT_E_INTERRUPTED at once and spent nothing; the handle's other lease
 * is still held (the connection was kept) and it serves the next call.
 */
static void cancel_one(struct admit *a, struct admit *c, const char *k, bool by_signal)
{
	struct admit *b = admit_connect(sock_path), *w = admit_connect(sock_path);
	struct admit_req rq = req("busy", k), hold = req("hold", k);
	struct canceler cn = { .watch = w, .victim = a, .by_signal = by_signal };
	struct admit_result r;
	char *holder, *mine;
	pthread_t th;
	int64_t t0;

	CHECK(b != NULL && w != NULL, "connect: %s", strerror(errno));
	if (b == NULL || w == NULL) {
		admit_close(b);
		admit_close(w);
		return;
	}
	CHECK(admit_acquire(b, &rq, &r) == ADMIT_OK, "holder: %s", r.message);
	holder = steal_lease(&r);
	CHECK(admit_acquire(a, &hold, &r) == ADMIT_OK, "own lease: %s", r.message);
	mine = steal_lease(&r);
	cn.signal_to = pthread_self();
	cancel_on_signal = a;
	rq.timeout_ms = 30000;
	CHECK(pthread_create(&th, NULL, canceler_main, &cn) == 0, "thread");
	t0 = mono_ms();
	admit_acquire(a, &rq, &r);
	pthread_join(th, NULL);
	CHECK(cn.seen, "the acquire waited");
	CHECK_ERR(r, ADMIT_E_INTERRUPTED);
	CHECK(mono_ms() - t0 < 5000 + 2000, "returned soon after the cancel: %lld ms",
	      (long long)(mono_ms() - t0));
	admit_result_free(&r);
	CHECK(busy_waits(c, 0), "the daemon no longer has it waiting");
	CHECK(admit_release(b, holder, NULL, 0, &r) == ADMIT_OK && r.held, "holder released");
	admit_result_free(&r);
	CHECK(busy_remaining(c, k) == 9, "only the holder's unit is spent: %lld",
	      (long long)busy_remaining(c, k));
	admit_try(c, &hold, &r);
	CHECK_ERR(r, ADMIT_E_LIMITED); /* a's own lease survived the cancel */
	admit_result_free(&r);
	CHECK(admit_release(a, mine, NULL, 0, &r) == ADMIT_OK && r.held, "own lease still held");
	admit_result_free(&r);
	rq.timeout_ms = 1000;
	CHECK(admit_acquire(a, &rq, &r) == ADMIT_OK, "the handle serves on: %s", r.message);
	admit_result_free(&r);
	CHECK(busy_remaining(c, k) == 8, "and that one spent a unit");
	free(holder);
	free(mine);
	admit_close(b);
	admit_close(w);
}

static void mode_cancel(void)
{
	struct admit *a = admit_connect(sock_path), *c = admit_connect(sock_path);
	struct sigaction sa = { .sa_handler = on_usr1 };
	struct admit_req rq = req("busy", "lib-cancel-late");
	struct admit_result r;

	CHECK(a != NULL && c != NULL, "connect: %s", strerror(errno));
	CHECK(admit_cancel(NULL) == -1, "NULL handle");
	if (a != NULL && c != NULL) {
		sigemptyset(&sa.sa_mask);
		sigaction(SIGUSR1, &sa, NULL);
		cancel_one(a, c, "lib-cancel-thread", false);
		cancel_one(a, c, "lib-cancel-signal", true);
		/* a cancel when nothing waits is forgotten by the next acquire */
		CHECK(admit_cancel(a) == 0, "cancel");
		rq.timeout_ms = 1000;
		CHECK(admit_acquire(a, &rq, &r) == ADMIT_OK, "not canceled: %s", r.message);
		admit_result_free(&r);
	}
	admit_close(a);
	admit_close(c);
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
