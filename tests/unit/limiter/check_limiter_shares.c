/*
 * check_limiter_shares.c - unit tests for a pod's share of the limits in
 * daemon/limiter/ (struct lim_share): the fallback divisor applied to each
 * param, limit and min_delay, the turn that spreads remainders among ranked
 * pods, the serialized scope's owner, and the spend share.
 */

#include "limiter.h"

#include "conf.h"
#include "limiter_test.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- fallback divisor ---- */

START_TEST(test_divisor_params)
{
	struct strat_params p;
	int64_t amount = 0, burst = 0;

	use("rule = requests token-bucket 100/1s burst=40\nrule = requests fixed-window 10/1s\n");
	p = lim_rule_params(&cs->rules[0], D(1.0));
	ck_assert_int_eq(p.amount, 100);
	ck_assert_int_eq(p.burst, 40);
	p = lim_rule_params(&cs->rules[0], D(4.0));
	ck_assert_int_eq(p.amount, 25);
	ck_assert_int_eq(p.burst, 10);
	ck_assert_int_eq(p.window_ms, 1000);
	p = lim_rule_params(&cs->rules[0], D(1000.0)); /* unranked: rounded down */
	ck_assert_int_eq(p.amount, 0);
	ck_assert_int_eq(p.burst, 0);
	p = lim_rule_params(&cs->rules[0], D(0.5)); /* below 1: no change */
	ck_assert_int_eq(p.amount, 100);
	ck_assert_int_eq(p.burst, 40);
	p = lim_rule_params(&cs->rules[1], D(3.0)); /* no burst: the amount's */
	ck_assert_int_eq(p.amount, 3);
	ck_assert_int_eq(p.burst, 3);
	/* ranked: the remainder goes to the first pods, the shares add up */
	for (int64_t r = 0; r < 3; r++) {
		p = lim_rule_params(&cs->rules[0], R(3.0, r));
		ck_assert_int_eq(p.amount, r == 0 ? 34 : 33);
		ck_assert_int_eq(p.burst, r == 0 ? 14 : 13);
		amount += p.amount;
		burst += p.burst;
	}
	ck_assert_int_eq(amount, 100);
	ck_assert_int_eq(burst, 40);
	for (int64_t v = 0; v < 50; v++) {
		int64_t sum = 0;
		for (int64_t r = 0; r < 7; r++)
			sum += lim_share_of(v, R(7.0, r));
		ck_assert_int_eq(sum, v);
	}
}
END_TEST

START_TEST(test_divisor_limits)
{
	struct lim_decision d;

	use("cluster_concurrency = 8\nlease_ttl = 10s\n");
	admit_full(0, NULL, 1, D(4.0), "a");
	admit_full(0, NULL, 1, D(4.0), "b");
	refused(chk_full(0, NULL, 1, 1, D(4.0)), PLAN_RULE_CLUSTER, 25);
	ck_assert(chk_full(0, NULL, 1, 1, D(1.0)).admitted);

	/* a cap of 2 over 3 pods: 1, 1 and 0, never 3 in all */
	use("cluster_concurrency = 2\nlease_ttl = 10s\n");
	admit_full(0, NULL, 1, R(3.0, 1), "a");
	refused(chk_full(0, NULL, 1, 1, R(3.0, 1)), PLAN_RULE_CLUSTER, 25);
	use("cluster_concurrency = 2\nlease_ttl = 10s\n");
	d = chk_full(0, NULL, 1, 1, R(3.0, 2)); /* a share of 0: a wait, said so */
	refused(d, PLAN_RULE_CLUSTER, 25);
	ck_assert(d.share_short);
	ck_assert(chk_full(0, NULL, 1, 1, R(3.0, 0)).admitted);

	use("cluster_concurrency = 3\n");
	d = chk_full(0, NULL, 1, 1, D(10.0)); /* unranked 3/10: 0, a wait */
	refused(d, PLAN_RULE_CLUSTER, 25);
	ck_assert(d.share_short);
	refused(chk_full(0, NULL, 1, 4, D(10.0)), PLAN_RULE_CLUSTER, -1); /* above the whole */

	use("quota = 10/1s\n");
	admit_full(0, NULL, 1, D(4.0), "");
	admit_full(1, NULL, 1, D(4.0), "");
	refused(chk_full(2, NULL, 1, 1, D(4.0)), "quota 10/1s", 998);

	use("quota = 1/1s\n");
	d = chk_full(2, NULL, 1, 1, D(4.0));
	refused(d, "quota 1/1s", 1000);
	ck_assert(d.share_short);
	ck_assert(chk_full(2, NULL, 1, 1, R(4.0, 0)).admitted);

	use("rule = requests fixed-window 10/1h\n");
	admit_full(0, NULL, 1, D(4.0), "");
	admit_full(0, NULL, 1, D(4.0), "");
	refused(chk_full(0, NULL, 1, 1, D(4.0)), "requests fixed-window 10/1h", HOUR);
	d = chk_full(0, NULL, 1, 1, D(40.0)); /* a share of nothing: a window's wait */
	refused(d, "requests fixed-window 10/1h", HOUR);
	ck_assert(d.share_short);
}
END_TEST

START_TEST(test_divisor_min_delay)
{
	/* send-spaced: min_delay multiplied */
	use("cluster_concurrency = 5\nmin_delay = 100ms\n");
	admit_full(0, NULL, 1, D(4.0), "a");
	ck_assert(lim_release(st, cs, D(4.0), 10, "a", NULL, NULL, 0));
	ck_assert_int_eq(exact_full(10, NULL, 1, D(4.0), PLAN_RULE_MIN_DELAY), 390);

	/* serialized: from the release, whole: one pod (the owner) serves it */
	use("min_delay = 100ms\n");
	admit_full(0, NULL, 1, D(2.5), "a");
	ck_assert(lim_release(st, cs, D(2.5), 0, "a", NULL, NULL, 0));
	ck_assert_int_eq(exact_full(0, NULL, 1, D(2.5), PLAN_RULE_MIN_DELAY), 100);
}
END_TEST

/* A share in fallback: ranked among pods, the key's turn, down since out. */
static struct lim_share T(int64_t pods, int64_t rank, int64_t turn, int64_t out) {
	return (struct lim_share){
		.div = (double)pods, .rank = rank, .turn = turn, .pods = pods, .out_since = out
	};
}

START_TEST(test_turn_spreads_remainders)
{
	/* a cap of 4 over 3 pods: 2, 1, 1, the 2 at the pod the key's turn names */
	for (int64_t turn = 0; turn < 6; turn++) {
		int64_t sum = 0;
		for (int64_t r = 0; r < 3; r++) {
			int64_t v = lim_share_of(4, T(3, r, turn, 0));
			ck_assert_int_eq(v, r == turn % 3 ? 2 : 1);
			sum += v;
		}
		ck_assert_int_eq(sum, 4);
	}
	for (int64_t v = 0; v < 30; v++)
		for (int64_t turn = 0; turn < 9; turn++) {
			int64_t sum = 0;
			for (int64_t r = 0; r < 7; r++)
				sum += lim_share_of(v, T(7, r, turn, 0));
			ck_assert_int_eq(sum, v);
		}
}
END_TEST

START_TEST(test_serialized_owner)
{
	struct lim_decision d;
	int64_t owners = 0;

	/* one owner of every key among the ranked pods; the others wait, said so */
	for (int64_t turn = 0; turn < 5; turn++) {
		owners = 0;
		for (int64_t r = 0; r < 3; r++)
			owners += lim_owner(T(3, r, turn, 1));
		ck_assert_int_eq(owners, 1);
		ck_assert(lim_owner(T(3, turn % 3, turn, 1)));
	}
	ck_assert(lim_owner(D(1.0)));	     /* alone, or the whole limit */
	ck_assert(!lim_owner(D(3.0)));	     /* unranked: born in the outage */
	ck_assert(lim_owner(T(1, 0, 7, 1))); /* the only pod ranked */

	use("min_delay = 500ms\nlease_ttl = 2s\n");
	d = chk_full(5000, NULL, 1, 1, T(3, 1, 0, 1000));
	refused(d, PLAN_RULE_OWNER, 25);
	ck_assert(d.slot);
	/* the owner: a lease another pod took through Redis may be held until
	 * lease_ttl after Redis stopped answering (polled) */
	d = chk_full(1500, NULL, 1, 1, T(3, 0, 0, 1000));
	refused(d, PLAN_RULE_MIN_DELAY, 25);
	d = chk_full(2990, NULL, 1, 1, T(3, 0, 0, 1000));
	refused(d, PLAN_RULE_MIN_DELAY, 10);
	ck_assert(chk_full(3000, NULL, 1, 1, T(3, 0, 0, 1000)).admitted);
	/* ... unless its own release pushed the pacing past the outage's start */
	admit_full(0, NULL, 1, D(1.0), "a");
	ck_assert(lim_release(st, cs, D(1.0), 600, "a", NULL, NULL, 0)); /* next 1100 */
	refused(chk_full(1050, NULL, 1, 1, T(3, 0, 0, 1000)), PLAN_RULE_MIN_DELAY, 50);
	ck_assert(chk_full(1100, NULL, 1, 1, T(3, 0, 0, 1000)).admitted);
	/* alone at the last heartbeat: no other pod's lease to wait out */
	use("min_delay = 500ms\nlease_ttl = 2s\n");
	ck_assert(chk_full(1500, NULL, 1, 1, T(1, 0, 5, 1000)).admitted);
	/* Redis up (no out_since): every pod, as before */
	ck_assert(chk_full(1100, NULL, 1, 1, T(3, 1, 0, 0)).admitted);
}
END_TEST

START_TEST(test_spend_share)
{
	/* quota: the share's instants at the birth, out of the window W later */
	use("quota = 30/1m\n");
	lim_spend_share(st, cs, D(3.0), 1000);
	refused(chk_full(1000, NULL, 1, 1, D(3.0)), "quota 30/1m", 60000);
	ck_assert(chk_full(61000, NULL, 1, 1, D(3.0)).admitted);
	lim_spend_share(st, cs, D(3.0), 1000); /* again: nothing more */
	ck_assert(chk_full(61000, NULL, 1, 1, D(3.0)).admitted);

	/* a token bucket: empty, refilling at the share's rate */
	use("rule = requests token-bucket 30/3s\n");
	lim_spend_share(st, cs, D(3.0), 0);
	refused(chk_full(0, NULL, 1, 1, D(3.0)), "requests token-bucket 30/3s", 300);
	ck_assert(chk_full(300, NULL, 1, 1, D(3.0)).admitted);

	/* a fixed window: the birth's window full, the next one the share's */
	use("rule = requests fixed-window 9/1s\n");
	lim_spend_share(st, cs, D(3.0), 10500);
	ck_assert(!chk_full(10999, NULL, 1, 1, D(3.0)).admitted);
	for (int i = 0; i < 3; i++)
		admit_full(11000, NULL, 1, D(3.0), "");
	ck_assert(!chk_full(11000, NULL, 1, 1, D(3.0)).admitted);

	/* send-spaced pacing starts at the birth */
	use("cluster_concurrency = 3\nmin_delay = 100ms\n");
	lim_spend_share(st, cs, D(3.0), 50);
	ck_assert_int_eq(exact_full(50, NULL, 1, D(3.0), PLAN_RULE_MIN_DELAY), 300);
}
END_TEST

static Suite *limiter_shares_suite(void)
{
	Suite *s = suite_create("limiter_shares");
	TCase *tc = tcase_create("limiter");

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, test_divisor_params);
	tcase_add_test(tc, test_divisor_limits);
	tcase_add_test(tc, test_divisor_min_delay);
	tcase_add_test(tc, test_turn_spreads_remainders);
	tcase_add_test(tc, test_serialized_owner);
	tcase_add_test(tc, test_spend_share);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(limiter_shares_suite());
	int nfail;

	srunner_run_all(sr, CK_ENV);
	nfail = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nfail == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
