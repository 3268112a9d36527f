/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * check_rargs.c - unit tests for the Redis backend's argument vectors
 * (daemon/store/rb_args.c): rargs_int's digits against printf's for every
 * digit count and both signs, arguments past the inline room, and
 * rargs_cat's pieces past the eight it measures once.
 */

#include "backend_int.h"

#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a's last argument is v as printf writes it. */
static void int_same(struct rargs *a, int64_t v)
{
	char want[32];
	int n = snprintf(want, sizeof(want), "%" PRId64, v);

	rargs_int(a, v);
	ck_assert(!a->oom);
	ck_assert_uint_eq(a->len[a->n - 1], (size_t)n);
	ck_assert_str_eq(a->v[a->n - 1], want);
}

START_TEST(test_int_digits)
{
	struct rargs a;
	uint64_t p = 1;
	unsigned seed = 30;

	rargs_init(&a);
	int_same(&a, 0);
	int_same(&a, INT64_MAX);
	int_same(&a, INT64_MIN);
	int_same(&a, INT64_MIN + 1);
	for (int d = 0; d < 19; d++, p *= 10) { /* each digit count's edges, both signs */
		int64_t e = (int64_t)p;
		int_same(&a, e);
		int_same(&a, e - 1);
		int_same(&a, e + 1);
		int_same(&a, -e);
		int_same(&a, 1 - e);
		int_same(&a, -e - 1);
	}
	/* thousands more: past the inline argv and bytes, into the blocks */
	for (int i = 0; i < 5000; i++) {
		uint64_t r = ((uint64_t)rand_r(&seed) << 33) ^ ((uint64_t)rand_r(&seed) << 11) ^
			     (uint64_t)rand_r(&seed);
		int_same(&a, (int64_t)(r >> (1 + rand_r(&seed) % 63)) * (i % 2 ? -1 : 1));
	}
	ck_assert_uint_eq(a.n, 4 + 19 * 6 + 5000);
	ck_assert_str_eq(a.v[0], "0"); /* the first ones did not move */
	ck_assert_str_eq(a.v[1], "9223372036854775807");
	rargs_clear(&a);
}
END_TEST

START_TEST(test_cat_pieces)
{
	const char *s[10] = { "a", "", "bc", "{", "key", "}", ":", "r", "12", "xyz" };
	struct rargs a;

	rargs_init(&a);
	rargs_cat(&a, s, 10);
	rargs_cat(&a, s, 3);
	rargs_str(&a, "");
	ck_assert(!a.oom);
	ck_assert_uint_eq(a.n, 3);
	ck_assert_str_eq(a.v[0], "abc{key}:r12xyz");
	ck_assert_uint_eq(a.len[0], 15);
	ck_assert_str_eq(a.v[1], "abc");
	ck_assert_uint_eq(a.len[2], 0);
	rargs_clear(&a);
	ck_assert_uint_eq(a.n, 0);
}
END_TEST

static Suite *rargs_suite(void)
{
	Suite *s = suite_create("rargs");
	TCase *tc = tcase_create("rargs");

	tcase_add_test(tc, test_int_digits);
	tcase_add_test(tc, test_cat_pieces);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(rargs_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
