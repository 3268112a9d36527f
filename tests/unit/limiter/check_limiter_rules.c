/*
 * check_limiter_rules.c - unit tests for the decision of daemon/limiter/
 * with explicit `now`, one rule kind at a time: cluster_concurrency and
 * concurrency rules cap the leases in flight, serialized min_delay runs
 * from completion (an expired lease pushes nothing), send-spaced min_delay
 * from admission, quota is a rolling window whose retry_after is exact,
 * penalties only extend, a refusal books nothing anywhere, the longest wait
 * names the refusal (ties: conf order), classes and floor, and token meters
 * overdrawn at release.
 */

#include "limiter.h"

#include "conf.h"
#include "limiter_test.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- leases in flight ---- */

START_TEST(test_cluster_concurrency)
{
	use("cluster_concurrency = 3\nlease_ttl = 1s\nconcurrency_retry = 25ms\n");
	ck_assert(lim_tracks_leases(cs));
	ck_assert(!lim_serialized(cs));
	admit(0, "a");
	admit(10, "b");
	admit(20, "c");
	/* full: a short poll, bounded by the earliest deadline */
	refused(chk(30), PLAN_RULE_CLUSTER, 25);
	refused(chk(995), PLAN_RULE_CLUSTER, 5);
	ck_assert(release(40, "b"));
	ck_assert(!release(41, "b")); /* idempotent */
	ck_assert(!release(41, "nope"));
	admit(40, "d");
	refused(chk(40), PLAN_RULE_CLUSTER, 25);
	/* a's deadline is 1000: at 1000 its slot is free, and releasing it is a no-op */
	refused(chk(999), PLAN_RULE_CLUSTER, 1);
	ck_assert(chk(1000).admitted);
	ck_assert(!release(1000, "a"));
	/* more at once than the cap: never */
	refused(chk_full(1000, NULL, 1, 4, D(1.0)), PLAN_RULE_CLUSTER, -1);
}
END_TEST

START_TEST(test_concurrency_rule)
{
	use("rule = concurrency 2\nlease_ttl = 10s\n");
	ck_assert(lim_tracks_leases(cs));
	admit(0, "a");
	admit(0, "b");
	refused(chk(1), "concurrency 2", 25);
	ck_assert(release(2, "a"));
	admit(2, "c");
	refused(chk_full(3, NULL, 1, 3, D(1.0)), "concurrency 2", -1);
}
END_TEST

START_TEST(test_book_count)
{
	static const char *const ids[] = { "x1", "x2", "x3" };
	struct lim_req rq = { .cls = NULL, .cost = 1, .count = 3 };
	int i;

	use("cluster_concurrency = 4\nquota = 5/1s\n");
	ck_assert(lim_check(st, cs, D(1.0), 0, &rq).admitted);
	ck_assert(lim_book(st, cs, D(1.0), 0, &rq, ids));
	ck_assert_uint_eq(st->nleases, 3);
	ck_assert_uint_eq(st->quota_n, 3);
	/* two more would pass the cluster cap; the quota has room for two */
	refused(chk_full(1, NULL, 1, 2, D(1.0)), PLAN_RULE_CLUSTER, 25);
	admit(1, "y");
	/* both refuse two more: the quota's wait (4 instants, 5 max) is longer */
	refused(chk_full(2, NULL, 1, 2, D(1.0)), "quota 5/1s", 998);
	for (i = 0; i < 3; i++)
		ck_assert(release(3, ids[i]));
	refused(chk_full(3, NULL, 1, 2, D(1.0)), "quota 5/1s", 997);
	ck_assert(chk_full(3, NULL, 1, 1, D(1.0)).admitted);
}
END_TEST

/* ---- min_delay ---- */

START_TEST(test_serialized_min_delay)
{
	use("min_delay = 100ms\nlease_ttl = 1s\nconcurrency_retry = 25ms\n");
	ck_assert(lim_serialized(cs));
	ck_assert(lim_tracks_leases(cs));
	admit(0, "a");
	/* one at a time: while a is in flight, poll */
	refused(chk(10), PLAN_RULE_MIN_DELAY, 25);
	/* released at 50: the next one from 150, exactly */
	ck_assert(release(50, "a"));
	refused(chk(50), PLAN_RULE_MIN_DELAY, 100);
	ck_assert_int_eq(exact(50, PLAN_RULE_MIN_DELAY), 100);
	admit(150, "b");
	/* b expires at 1150 without a release: free at once, nothing pushed */
	refused(chk(1149), PLAN_RULE_MIN_DELAY, 1);
	ck_assert(chk(1150).admitted);
	ck_assert(!release(1200, "b"));
	ck_assert(chk(1200).admitted);
	ck_assert_int_eq(st->next_at, 150);
}
END_TEST

START_TEST(test_send_spaced_min_delay)
{
	use("cluster_concurrency = 2\nmin_delay = 100ms\nlease_ttl = 10s\n");
	ck_assert(!lim_serialized(cs));
	admit(0, "a");
	/* spaced from the admission, not the release */
	refused(chk(50), PLAN_RULE_MIN_DELAY, 50);
	ck_assert_int_eq(exact(50, PLAN_RULE_MIN_DELAY), 50);
	admit(100, "b");
	ck_assert(release(150, "a"));
	/* the release pushed nothing: next_at is still 200 */
	refused(chk(199), PLAN_RULE_MIN_DELAY, 1);
	admit(200, "c");
	/* two in flight: the cap refuses once the spacing has passed */
	/* both refuse: the longer wait names it */
	refused(chk(201), PLAN_RULE_MIN_DELAY, 99);
	refused(chk(290), PLAN_RULE_CLUSTER, 25);
	/* the spacing has passed: the cap alone refuses */
	refused(chk(300), PLAN_RULE_CLUSTER, 25);
}
END_TEST

/* ---- quota ---- */

START_TEST(test_quota)
{
	use("quota = 3/1s\n");
	ck_assert(!lim_tracks_leases(cs));
	admit(0, "");
	admit(100, "");
	admit(200, "");
	refused(chk(300), "quota 3/1s", 700);
	ck_assert_int_eq(exact(300, "quota 3/1s"), 700);
	admit(1000, ""); /* instants 100, 200, 1000 */
	refused(chk(1050), "quota 3/1s", 50);
	/* two at once: 100 has left, wait until 200 leaves too */
	refused(chk_full(1100, NULL, 1, 2, D(1.0)), "quota 3/1s", 100);
	refused(chk_full(1100, NULL, 1, 4, D(1.0)), "quota 3/1s", -1);
}
END_TEST

/*
 * Admit as early as allowed, over many windows (the ring wraps and
 * grows), and check against a model: never more than Q admissions in any
 * window of W, and every retry exact.
 */
START_TEST(test_quota_model)
{
	enum { Q = 5, W = 100, NADM = 400 };
	int64_t at[NADM];
	int64_t now = 0;
	unsigned seed = 12345;
	int n = 0, i;

	use("quota = 5/100ms\n");
	while (n < NADM) {
		struct lim_decision d = chk(now);

		if (d.admitted) {
			book_full(now, NULL, 1, D(1.0), "");
			at[n++] = now;
			seed = seed * 1103515245u + 12345u;
			now += (seed >> 16) % 40; /* 0..39 ms, bursts included */
			continue;
		}
		ck_assert_str_eq(d.rule, "quota 5/100ms");
		now += exact(now, "quota 5/100ms");
	}
	for (i = Q; i < n; i++)
		ck_assert_msg(at[i] - at[i - Q] >= W, "%d admissions within %lld ms", Q + 1,
			      (long long)(at[i] - at[i - Q]));
}
END_TEST

/* ---- penalty ---- */

START_TEST(test_penalty_extends_only)
{
	use("max_concurrent = 0\n");
	ck_assert(lim_idle(st, cs, 0));
	lim_penalize(st, 0, 1000);
	refused(chk(0), PLAN_RULE_PENALTY, 1000);
	lim_penalize(st, 100, 500); /* until 600: shorter, ignored */
	refused(chk(500), PLAN_RULE_PENALTY, 500);
	lim_penalize(st, 600, 0);
	lim_penalize(st, 600, -5);
	refused(chk(600), PLAN_RULE_PENALTY, 400);
	lim_penalize(st, 600, 1000); /* until 1600: longer, taken */
	ck_assert_int_eq(exact(700, PLAN_RULE_PENALTY), 900);
	ck_assert(!lim_idle(st, cs, 1599));
	ck_assert(lim_idle(st, cs, 1600));
}
END_TEST

/* ---- all or nothing, naming ---- */

START_TEST(test_refusal_books_nothing)
{
	int i;

	use("quota = 1/1h\n"
	    "rule a = requests fixed-window 10/1h\n"
	    "rule b = requests fixed-window 3/1h\n"
	    "class both = a b\n"
	    "class onlya = a\n");
	for (i = 0; i < 5; i++)
		refused(chk_full(10 + i, cls("both"), 5, 1, D(1.0)), "requests fixed-window 3/1h",
			-1);
	/* nothing was booked in a, nor in the quota */
	ck_assert_uint_eq(st->quota_n, 0);
	admit_full(20, cls("onlya"), 10, D(1.0), "");
	/* a is full now, the quota too; b was never touched */
	refused(chk_full(30, cls("onlya"), 1, 1, D(1.0)), "quota 1/1h", HOUR - 10);
}
END_TEST

START_TEST(test_longest_wait_names)
{
	use("rule = requests fixed-window 1/1s\n"
	    "rule = requests fixed-window 1/10s\n");
	admit(0, "");
	refused(chk(100), "requests fixed-window 1/10s", 9900);
	lim_penalize(st, 100, 20000);
	refused(chk(100), PLAN_RULE_PENALTY, 20000);
	refused(chk(15000), PLAN_RULE_PENALTY, 5100);
	/* after the penalty, a shorter one: the rule's wait is longer */
	admit(20100, "");
	lim_penalize(st, 20100, 500);
	refused(chk(20200), "requests fixed-window 1/10s", 9800);
}
END_TEST

START_TEST(test_never_beats_any_wait)
{
	use("quota = 1/1h\nrule = requests fixed-window 2/1h\n");
	lim_penalize(st, 0, 5000);
	refused(chk_full(0, NULL, 1, 2, D(1.0)), "quota 1/1h", -1);
	/* a cost the rule can never hold: -1, named after the rule */
	refused(chk_full(0, NULL, 3, 1, D(1.0)), "requests fixed-window 2/1h", -1);
}
END_TEST

START_TEST(test_ties_conf_order)
{
	/* both rules overdrawn by one booking of 2: both free at the window's end */
	use("rule = requests fixed-window 1/1s\nrule = requests fixed-window 2/1s\n");
	book_full(0, NULL, 2, D(1.0), "");
	refused(chk(100), "requests fixed-window 1/1s", 900);

	use("rule = requests fixed-window 2/1s\nrule = requests fixed-window 1/1s\n");
	book_full(0, NULL, 2, D(1.0), "");
	refused(chk(100), "requests fixed-window 2/1s", 900);
}
END_TEST

START_TEST(test_tie_quota_first)
{
	use("quota = 1/1s\nrule = requests fixed-window 1/1s\n");
	admit(0, "");
	refused(chk(100), "quota 1/1s", 900);
}
END_TEST

/* ---- classes ---- */

/* Does rule i apply to class c: is it in c's compiled plan? */
static bool applies(size_t i, const struct conf_class *c)
{
	const struct conf_plan *pl = conf_plan_of(cs, c);

	for (size_t k = 0; k < pl->nrules; k++)
		if (pl->rules[k] == i)
			return true;
	return false;
}

START_TEST(test_classes_floor)
{
	int i;

	use("rule shared = requests fixed-window 10/1h\n"
	    "rule = requests fixed-window 100/1h\n"
	    "class low = shared floor=4\n"
	    "class high = shared\n");
	ck_assert(applies(0, cls("low")));
	ck_assert(!applies(0, NULL));
	ck_assert(applies(1, NULL));
	ck_assert(applies(1, cls("high")));
	for (i = 0; i < 6; i++)
		admit_full(i, cls("low"), 1, D(1.0), "");
	/* low may not take the last 4 */
	refused(chk_full(10, cls("low"), 1, 1, D(1.0)), "requests fixed-window 10/1h", HOUR - 10);
	for (i = 0; i < 4; i++)
		admit_full(20 + i, cls("high"), 1, D(1.0), "");
	refused(chk_full(30, cls("high"), 1, 1, D(1.0)), "requests fixed-window 10/1h", HOUR - 30);
	/* no class: only the unnamed rule (10 of 100 used) */
	admit_full(40, NULL, 90, D(1.0), "");
	refused(chk_full(50, NULL, 1, 1, D(1.0)), "requests fixed-window 100/1h", HOUR - 50);
}
END_TEST

START_TEST(test_floor_bucket_exact)
{
	use("rule r = requests token-bucket 10/1s\nclass low = r floor=5\nclass high = r\n");
	admit_full(0, cls("high"), 5, D(1.0), "");
	/* 5 left, low needs 1 + floor 5: one token refills in 100ms */
	ck_assert_int_eq(exact_full(0, cls("low"), 1, D(1.0), "requests token-bucket 10/1s"), 100);
	admit_full(0, cls("high"), 5, D(1.0), "");
	ck_assert_int_eq(exact_full(0, cls("high"), 1, D(1.0), NULL), 100);
	ck_assert_int_eq(exact_full(0, cls("low"), 1, D(1.0), NULL), 600);
}
END_TEST

/* ---- token meters ---- */

START_TEST(test_tokens_overdraw)
{
	static const struct meter_tokens tk[] = { { "input", 300 }, { "output", 200 } };
	static const struct meter_tokens t99[] = { { "x", 99 } };
	static const struct meter_tokens t1[] = { { "x", 1 } };

	use("rule = tokens fixed-window 100/1h\n");
	ck_assert(lim_release_books(cs, NULL));
	admit(0, "");
	lim_release(st, cs, D(1.0), 5, "", NULL, t99, 1);
	admit(6, ""); /* 1 left: not overdrawn */
	lim_release(st, cs, D(1.0), 7, "", NULL, t1, 1);
	refused(chk(8), "tokens fixed-window 100/1h", HOUR - 8);
	/* a window later it passes; then a big report overdraws it */
	admit(HOUR, "");
	lim_release(st, cs, D(1.0), HOUR + 1, "", NULL, tk, 2);
	ck_assert_int_eq(exact(HOUR + 2, "tokens fixed-window 100/1h"), HOUR - 2);
}
END_TEST

START_TEST(test_tokens_key_bucket)
{
	static const struct meter_tokens out[] = { { "output", 1000 } };
	static const struct meter_tokens in[] = { { "output", 5 }, { "input", 30 } };

	use("rule = tokens.input token-bucket 10/1s\n");
	lim_release(st, cs, D(1.0), 0, "", NULL, out, 1);
	ck_assert(chk(0).admitted); /* other meters charge nothing */
	lim_release(st, cs, D(1.0), 0, "", NULL, in, 2);
	/* 30 from a bucket of 10: the debt is capped at one window (-10) */
	ck_assert_int_eq(exact(0, "tokens.input token-bucket 10/1s"), 1001);
}
END_TEST

static Suite *limiter_rules_suite(void)
{
	Suite *s = suite_create("limiter_rules");
	TCase *tc = tcase_create("limiter");

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, test_cluster_concurrency);
	tcase_add_test(tc, test_concurrency_rule);
	tcase_add_test(tc, test_book_count);
	tcase_add_test(tc, test_serialized_min_delay);
	tcase_add_test(tc, test_send_spaced_min_delay);
	tcase_add_test(tc, test_quota);
	tcase_add_test(tc, test_quota_model);
	tcase_add_test(tc, test_penalty_extends_only);
	tcase_add_test(tc, test_refusal_books_nothing);
	tcase_add_test(tc, test_longest_wait_names);
	tcase_add_test(tc, test_never_beats_any_wait);
	tcase_add_test(tc, test_ties_conf_order);
	tcase_add_test(tc, test_tie_quota_first);
	tcase_add_test(tc, test_classes_floor);
	tcase_add_test(tc, test_floor_bucket_exact);
	tcase_add_test(tc, test_tokens_overdraw);
	tcase_add_test(tc, test_tokens_key_bucket);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(limiter_rules_suite());
	int nfail;

	srunner_run_all(sr, CK_ENV);
	nfail = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nfail == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
