/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * libadmit_modes.c - the scenarios the Python side drives, each against a
 * daemon it starts late, restarts or kills (late, restart, inflight,
 * budget: test_client_daemon.py), or starts on NEWER_CONF (defaults,
 * fields, override: test_client.py). Lines on stdout tell the driver
 * where we are; a line on stdin lets us go on.
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
void mode_late(void)
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
void mode_restart(void)
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
void mode_inflight(const char *key)
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
void mode_budget(const char *key)
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
/*
 * defaults: reset, inspect and penalize with neither key nor url act on the
 * scope's default key; release's outcome is sent when valid, refused here
 * (ADMIT_E_ARG, nothing sent) when not.
 */
void mode_defaults(void)
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
void mode_fields(void)
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
void mode_override(void)
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
