/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * libadmit_calls.c - each libadmit call on one connection to the daemon of
 * proto/vectors/vectors.conf: connect and its timeout, ping and status,
 * acquire and release, refusals, tokens and penalize, targets, cost 0,
 * once, a cost over the limit, reserve, reset and inspect, status
 * counters, and bad arguments refused before anything is sent.
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

void test_connect(void)
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
void test_connect_timeout(void)
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

void test_ping_status(struct admit *a)
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
void test_status_counters(struct admit *a)
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

void test_acquire_release(struct admit *a)
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

void test_refusals(struct admit *a)
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

void test_tokens_penalize(struct admit *a)
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
void test_targets(struct admit *a)
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
void test_cost_zero(struct admit *a)
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
void test_once(struct admit *a)
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

/* admit_set_tenant: its acquires name the tenant; the daemon checks the name. */
void test_tenant(struct admit *a)
{
	struct admit_req rq = req("fw", "lib-tenant-1");
	struct admit_result r;

	CHECK(admit_set_tenant(a, "a b") == 0, "set tenant");
	admit_try_once(a, &rq, &r);
	CHECK_ERR(r, ADMIT_E_BAD_REQUEST);
	CHECK(r.message != NULL && strstr(r.message, "\"tenant\"") != NULL, "message %s",
	      r.message ? r.message : "-");
	admit_result_free(&r);
	CHECK(admit_set_tenant(a, "acme.gold-1") == 0, "set tenant");
	CHECK(admit_try_once(a, &rq, &r) == ADMIT_OK, "a good tenant: %s", r.message);
	admit_result_free(&r);
	CHECK(admit_set_tenant(a, NULL) == 0, "the default tenant again");
	CHECK(admit_try_once(a, &rq, &r) == ADMIT_OK, "no tenant: %s", r.message);
	admit_result_free(&r);
}

/* A cost above a rule's capacity: exceeds_limit at once, with the limit. */
void test_exceeds_limit(struct admit *a)
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
void test_reserve(struct admit *a)
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
void test_reset_inspect(struct admit *a)
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

void test_bad_args(struct admit *a)
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
