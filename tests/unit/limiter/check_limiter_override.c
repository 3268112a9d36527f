/*
 * check_limiter_override.c - unit tests for a key's override in
 * daemon/limiter/ (lim_override): it tightens, loosens only up to
 * override_max, moves a burst in proportion, paces a serialized scope from
 * its own min_delay, ends at its time and keeps a key from being idle; and
 * its arithmetic replays tests/vectors/override/override.jsonl (as
 * override.lua does).
 */

#include "limiter.h"

#include "conf.h"
#include "limiter_test.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- overrides ---- */

static void ovr(int64_t until, int64_t min_delay, const int64_t *amount)
{
	ck_assert(lim_override(st, cs, until, min_delay, amount));
}

START_TEST(test_override_tightens_until_its_end)
{
	static const int64_t one[] = { 1 };

	use("rule = requests fixed-window 5/1m\noverride_max = 2\n");
	ovr(1000, -1, one);
	admit(0, "a");
	refused(chk(1), "requests fixed-window 5/1m", 59999);
	/* ended: the conf's 5 again (1 of them used) */
	admit(1000, "b");
	admit(1000, "c");
	admit(1000, "d");
	admit(1000, "e");
	refused(chk(1000), "requests fixed-window 5/1m", 59000);
}
END_TEST

START_TEST(test_override_loosens_up_to_the_ceiling)
{
	static const int64_t many[] = { 50 };
	int i;

	use("rule = requests fixed-window 5/1m\noverride_max = 2\n");
	ovr(HOUR, -1, many); /* asked 50: 10 is the most override_max = 2 allows */
	for (i = 0; i < 10; i++)
		admit(0, "x");
	refused(chk(0), "requests fixed-window 5/1m", 60000);
	ck_assert_int_eq(lim_which_limit(cs, NULL, 0, lim_key_share(st, cs, D(1.0), 0)), 10);
	/* a fallback share divides the amount in force */
	ck_assert_int_eq(lim_which_limit(cs, NULL, 0, lim_key_share(st, cs, D(2.0), 0)), 5);
	/* reset lifts it */
	lim_reset(st);
	ck_assert_ptr_null(lim_ovr_in_force(st, cs, 0));
	ck_assert_int_eq(lim_which_limit(cs, NULL, 0, lim_key_share(st, cs, D(1.0), 0)), 5);
}
END_TEST

START_TEST(test_override_moves_the_burst)
{
	static const int64_t five[] = { 5 };
	int i;

	/* 10/1s burst 20, amount 5: burst 10 */
	use("rule = requests token-bucket 10/1s burst=20\noverride_max = 1\n");
	ovr(HOUR, -1, five);
	for (i = 0; i < 10; i++)
		admit(0, "x");
	/* refills at 5/s: one unit every 200 ms */
	ck_assert_int_eq(exact_full(0, NULL, 1, D(1.0), "requests token-bucket 10/1s burst=20"),
			 200);
}
END_TEST

START_TEST(test_override_min_delay)
{
	/* serialized: the next one 300 ms after the release, not 1 s */
	use("min_delay = 1s\noverride_max = 4\n");
	ovr(HOUR, 300, NULL);
	admit(0, "a");
	ck_assert(release(10, "a"));
	ck_assert_int_eq(exact_full(10, NULL, 1, D(1.0), PLAN_RULE_MIN_DELAY), 300);
	/* below the floor (1 s / 4): bounded when used */
	use("min_delay = 1s\noverride_max = 4\n");
	ovr(HOUR, 1, NULL);
	admit(0, "a");
	ck_assert(release(0, "a"));
	ck_assert_int_eq(exact_full(0, NULL, 1, D(1.0), PLAN_RULE_MIN_DELAY), 250);
	/* send-spaced, tighter than the conf */
	use("cluster_concurrency = 5\nmin_delay = 100ms\noverride_max = 1\n");
	ovr(HOUR, 700, NULL);
	admit(0, "a");
	ck_assert_int_eq(exact_full(0, NULL, 1, D(1.0), PLAN_RULE_MIN_DELAY), 700);
}
END_TEST

START_TEST(test_override_keeps_the_key)
{
	static const int64_t two[] = { 2 };

	use("rule = requests fixed-window 5/1s\noverride_max = 1\n");
	ck_assert(lim_idle(st, cs, HOUR));
	ovr(3 * HOUR, -1, two);
	ck_assert(!lim_idle(st, cs, 3 * HOUR - 1));
	ck_assert(lim_idle(st, cs, 3 * HOUR));
	/* a scope without override_max never applies one */
	use("rule = requests fixed-window 5/1s\n");
	ovr(HOUR, -1, two);
	ck_assert_ptr_null(lim_ovr_in_force(st, cs, 0));
	admit(0, "a");
	admit(0, "b");
	admit(0, "c");
}
END_TEST

static json_t *ovr_cases;

START_TEST(test_override_vector)
{
	json_t *c = json_array_get(ovr_cases, (size_t)_i), *a = json_object_get(c, "args");
	const char *fn = json_string_value(json_object_get(c, "fn"));
	int64_t x = json_integer_value(json_array_get(a, 0));
	int64_t y = json_integer_value(json_array_get(a, 1));
	int64_t z = json_integer_value(json_array_get(a, 2)), got;

	if (strcmp(fn, "cap") == 0)
		got = lim_ovr_cap(x, y);
	else if (strcmp(fn, "amount") == 0)
		got = lim_ovr_amount(x, y, z);
	else if (strcmp(fn, "delay") == 0)
		got = lim_ovr_delay(x, y, z);
	else if (strcmp(fn, "burst") == 0)
		got = lim_ovr_burst(x, y, z);
	else
		ck_abort_msg("unknown fn %s", fn);
	ck_assert_msg(got == json_integer_value(json_object_get(c, "want")),
		      "%s(%lld, %lld, %lld) = %lld", fn, (long long)x, (long long)y, (long long)z,
		      (long long)got);
}
END_TEST

/* Every line of the vector file, parsed; enough of them to mean something. */
static size_t ovr_load(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[1024];

	ovr_cases = json_array();
	if (f == NULL) {
		fprintf(stderr, "cannot open %s\n", path);
		exit(EXIT_FAILURE);
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		json_t *c = json_loads(line, 0, NULL);
		if (c == NULL) {
			fprintf(stderr, "%s: bad line %s", path, line);
			exit(EXIT_FAILURE);
		}
		json_array_append_new(ovr_cases, c);
	}
	fclose(f);
	return json_array_size(ovr_cases);
}

static Suite *limiter_override_suite(void)
{
	Suite *s = suite_create("limiter_override");
	TCase *tc = tcase_create("limiter");
	TCase *tv;
	size_t n;

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, test_override_tightens_until_its_end);
	tcase_add_test(tc, test_override_loosens_up_to_the_ceiling);
	tcase_add_test(tc, test_override_moves_the_burst);
	tcase_add_test(tc, test_override_min_delay);
	tcase_add_test(tc, test_override_keeps_the_key);
	suite_add_tcase(s, tc);
	tv = tcase_create("override vectors");
	if ((n = ovr_load("tests/vectors/override/override.jsonl")) < 100) {
		fprintf(stderr, "override.jsonl: %zu cases, want 100 or more\n", n);
		exit(EXIT_FAILURE);
	}
	tcase_add_loop_test(tv, test_override_vector, 0, (int)n);
	suite_add_tcase(s, tv);
	return s;
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(limiter_override_suite());
	int nfail;

	srunner_run_all(sr, CK_ENV);
	nfail = srunner_ntests_failed(sr);
	srunner_free(sr);
	json_decref(ovr_cases);
	return nfail == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
