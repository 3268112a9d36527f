/*
 * check_limiter_state.c - unit tests for the state a key's lim_state keeps
 * in daemon/limiter/: lim_idle's windows and a fresh state, what
 * lim_release_books gives back, what a reload carries over
 * (lim_state_carry: unchanged limits whatever their place or spelling, a
 * rule changed in place goes on from its usage, another strategy starts
 * fresh), and lim_left per meter.
 */

#include "limiter.h"

#include "conf.h"
#include "limiter_test.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- lim_idle ---- */

START_TEST(test_idle_windows)
{
	/* a monotonic clock far from 0 (a fresh state's last booking is 0) */
	const int64_t t0 = 100 * HOUR;

	use("quota = 2/1s\nrule = requests fixed-window 5/1s\n");
	ck_assert(lim_idle(st, cs, t0));
	admit(t0, "");
	ck_assert(!lim_idle(st, cs, t0));
	ck_assert(!lim_idle(st, cs, t0 + 999));
	ck_assert(lim_idle(st, cs, t0 + 1000));

	use("cluster_concurrency = 2\nlease_ttl = 5s\n");
	admit(t0, "a");
	admit(t0, "b");
	ck_assert(release(t0 + 10, "a"));
	ck_assert(!lim_idle(st, cs, t0 + 4999)); /* b still in flight */
	ck_assert(lim_idle(st, cs, t0 + 5000));

	use("min_delay = 100ms\n");
	admit(t0, "a");
	ck_assert(!lim_idle(st, cs, t0 + 5));
	ck_assert(release(t0 + 10, "a"));
	ck_assert(!lim_idle(st, cs, t0 + 109));
	ck_assert(lim_idle(st, cs, t0 + 110));
}
END_TEST

/*
 * Whenever lim_idle says the state is idle, it must decide exactly as a
 * fresh state would (the daemon drops idle states).
 */
START_TEST(test_idle_is_fresh)
{
	static const struct meter_tokens big[] = { { "in", 1000 } };
	static const char *const bodies[] = {
		"rule = tokens token-bucket 10/1s\n",
		"rule = tokens leaky-bucket 10/1s burst=30\n",
		"rule = requests sliding-window 3/1s\n",
		"rule = requests session-window 3/1s\n",
		"rule = tokens fixed-window 10/1s\nquota = 2/300ms\n",
	};
	size_t b;

	for (b = 0; b < sizeof(bodies) / sizeof(bodies[0]); b++) {
		struct lim_state *fresh;
		bool was_idle = false;
		int64_t t;

		use(bodies[b]);
		fresh = lim_state_new(cs);
		ck_assert_ptr_nonnull(fresh);
		admit(0, "");
		admit(1, "");
		lim_release(st, cs, D(1.0), 2, "", NULL, big, 1);
		for (t = 2; t < 20000; t += 37) {
			bool idle = lim_idle(st, cs, t);
			int64_t cost;

			ck_assert_msg(!was_idle || idle, "%s: idle, then not at %lld", bodies[b],
				      (long long)t);
			was_idle = idle;
			for (cost = 1; idle && cost <= 3; cost++) {
				struct lim_req rq = { .cls = NULL, .cost = cost, .count = 1 };
				struct lim_decision a = lim_check(st, cs, D(1.0), t, &rq);
				struct lim_decision f = lim_check(fresh, cs, D(1.0), t, &rq);

				ck_assert_msg(a.admitted == f.admitted &&
						  a.retry_after_ms == f.retry_after_ms,
					      "%s: idle at %lld but decides apart", bodies[b],
					      (long long)t);
			}
		}
		ck_assert_msg(was_idle, "%s: never idle", bodies[b]);
		lim_state_free(fresh);
	}
}
END_TEST

/* ---- lim_release_books ---- */

START_TEST(test_release_books)
{
	use("rule = requests fixed-window 5/1s\nquota = 3/1s\n");
	ck_assert(!lim_release_books(cs, NULL));
	ck_assert(!lim_tracks_leases(cs));

	use("cluster_concurrency = 2\n");
	ck_assert(lim_release_books(cs, NULL));

	use("min_delay = 10ms\n");
	ck_assert(lim_release_books(cs, NULL));

	use("rule = concurrency 3\n");
	ck_assert(lim_release_books(cs, NULL));

	use("rule = tokens.out fixed-window 5/1s\n");
	ck_assert(lim_release_books(cs, NULL));

	use("rule t = tokens fixed-window 5/1h\nrule r = requests fixed-window 5/1h\n"
	    "class c = t\nclass d = r\n");
	ck_assert(lim_release_books(cs, cls("c")));
	ck_assert(!lim_release_books(cs, cls("d")));
	ck_assert(!lim_release_books(cs, NULL));
}
END_TEST

/*
 * A reload: the old rule 2/1m is now written 2/60s and comes second; a new
 * rule comes first; the quota changed. Only the 2/1m counter carries over
 * (the key used its 2 at 0: still refused until the window ends), the new
 * rule and the changed quota start fresh, and the lease in flight and the
 * penalty are kept.
 */
START_TEST(test_carry_unchanged_limits)
{
	struct conf *ocf;
	const struct conf_scope *ocs;
	struct lim_state *ost;

	use("rule = requests fixed-window 2/1m\nrule = requests fixed-window 5/1m\n"
	    "quota = 4/1m\ncluster_concurrency = 10\n");
	admit(0, "a");
	admit(0, "b");
	refused(chk(1), "requests fixed-window 2/1m", 59999);
	lim_penalize(st, 0, 500);
	/* keep the old conf and state; load the new ones */
	ocf = cf;
	ocs = cs;
	ost = st;
	cf = NULL;
	st = NULL;
	use("rule = requests fixed-window 100/1m\nrule = requests fixed-window 2/60s\n"
	    "quota = 3/1m\ncluster_concurrency = 10\n");
	lim_state_carry(st, cs, ost, ocs);
	lim_state_clear(ost);
	free(ost);
	conf_free(ocf);
	ck_assert_uint_eq(st->nleases, 2);
	ck_assert_int_eq(st->penalty_until, 500);
	refused(chk(1), "requests fixed-window 2/60s", 59999);
	ck_assert_int_eq(st->rules[0].a, 0);
	ck_assert_int_eq(st->quota_n, 0);
}
END_TEST

/* A rule changed in place counts on: 2 used of a raised 4 leave 2; the
 * next rule, of another strategy in its place, starts fresh. */
START_TEST(test_carry_changed_in_place)
{
	struct conf *ocf;
	const struct conf_scope *ocs;
	struct lim_state *ost;

	use("rule = requests fixed-window 2/1m\nrule = requests 2/1m\n");
	admit(0, "a");
	admit(0, "b");
	ocf = cf;
	ocs = cs;
	ost = st;
	cf = NULL;
	st = NULL;
	use("rule = requests fixed-window 4/1m\nrule = requests sliding-window 3/1m\n");
	lim_state_carry(st, cs, ost, ocs);
	lim_state_clear(ost);
	free(ost);
	conf_free(ocf);
	ck_assert_int_eq(st->rules[1].a, 0);
	ck_assert_int_eq(st->rules[1].b, 0);
	admit(1, "c");
	admit(1, "d");
	refused(chk(1), "requests fixed-window 4/1m", 59999);
}
END_TEST

/* The meter of left named so, or NULL. */
static const struct lim_meter_left *meter_of(const struct lim_left *left, const char *name)
{
	char buf[80];

	for (size_t i = 0; i < left->nm; i++)
		if (strcmp(lim_meter_name(&left->m[i], buf, sizeof(buf)), name) == 0)
			return &left->m[i];
	return NULL;
}

/* Per meter: the fewest units left (ties: the sooner reset), named; merged across targets. */
START_TEST(test_left_per_meter)
{
	struct lim_left left = { 0 }, other = { 0 };
	const struct lim_meter_left *m;

	use("rule = requests fixed-window 10/1h\nrule big = requests fixed-window 10/1m\n"
	    "rule = tokens token-bucket 6000/1m\nrule = tokens.out token-bucket 100/1s\n"
	    "class c = big\n");
	admit_full(0, cls("c"), 1, D(1.0), "a");
	lim_left_state(&left, st, cs, cls("c"), D(1.0), 0);
	ck_assert_uint_eq(left.nm, 3);
	m = meter_of(&left, "requests");
	ck_assert_ptr_nonnull(m);
	/* 9 of 10 in each: the 1m window resets sooner */
	ck_assert_str_eq(m->rule, "big");
	ck_assert_int_eq(m->remaining, 9);
	ck_assert_int_eq(m->reset_ms, 60000);
	m = meter_of(&left, "tokens");
	ck_assert_ptr_null(m->rule);
	ck_assert_int_eq(m->idx, 2);
	ck_assert_int_eq(m->limit, 6000);
	ck_assert_ptr_nonnull(meter_of(&left, "tokens.out"));
	/* another target with fewer requests left wins that meter alone */
	lim_left_add(&other, &(struct lim_meter_left){ .meter = METER_REQUESTS,
						       .rule = LIM_RULE_QUOTA,
						       .limit = 100,
						       .remaining = 5,
						       .reset_ms = 7 });
	lim_left_merge(&left, &other);
	ck_assert_str_eq(meter_of(&left, "requests")->rule, LIM_RULE_QUOTA);
	ck_assert_int_eq(meter_of(&left, "tokens")->limit, 6000);
	/* overall: 5 of 100 is the smallest part left */
	ck_assert_int_eq(left.remaining, 5);
	lim_left_age(&left, 10);
	ck_assert_int_eq(left.reset_ms, 0);
	ck_assert_int_eq(meter_of(&left, "tokens.out")->reset_ms, 0);
	ck_assert_int_eq(meter_of(&left, "requests")->reset_ms, 0);
}
END_TEST

/* Past LIM_LEFT_METERS meters the others are left out; the overall still counts them. */
START_TEST(test_left_meters_bounded)
{
	struct lim_left left = { 0 };
	char body[1024] = "";

	for (int i = 0; i < LIM_LEFT_METERS + 2; i++)
		snprintf(body + strlen(body), sizeof(body) - strlen(body),
			 "rule = tokens.m%d fixed-window %d/1h\n", i, 100 - i);
	use(body);
	lim_left_state(&left, st, cs, NULL, D(1.0), 0);
	ck_assert_uint_eq(left.nm, LIM_LEFT_METERS);
	ck_assert_int_eq(left.capacity, 100); /* all full: the first seen */
	ck_assert_ptr_null(meter_of(&left, "tokens.m7"));
	ck_assert_ptr_nonnull(meter_of(&left, "tokens.m5"));
}
END_TEST

static Suite *limiter_state_suite(void)
{
	Suite *s = suite_create("limiter_state");
	TCase *tc = tcase_create("limiter");

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, test_idle_windows);
	tcase_add_test(tc, test_idle_is_fresh);
	tcase_add_test(tc, test_release_books);
	tcase_add_test(tc, test_carry_unchanged_limits);
	tcase_add_test(tc, test_carry_changed_in_place);
	tcase_add_test(tc, test_left_per_meter);
	tcase_add_test(tc, test_left_meters_bounded);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(limiter_state_suite());
	int nfail;

	srunner_run_all(sr, CK_ENV);
	nfail = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nfail == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
