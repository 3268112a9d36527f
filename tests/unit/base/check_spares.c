/*
 * check_spares.c - unit tests for daemon/base/spares.c: a record put back is
 * the next one taken, zeroed whatever it held; no more than cap are kept
 * (the rest freed: valgrind and ASan see no leak); spares_free empties it.
 */

#include "spares.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

struct rec {
	char bytes[40];
	long n;
};

START_TEST(test_put_back_is_taken_zeroed)
{
	struct spares s = SPARES_INIT(struct rec, 4);
	struct rec *a = spares_get(&s), *b;
	size_t i;

	ck_assert_ptr_nonnull(a);
	memset(a, 0x5a, sizeof(*a));
	spares_put(&s, a);
	ck_assert_uint_eq(s.n, 1);
	b = spares_get(&s);
	ck_assert_ptr_eq(b, a);
	ck_assert_uint_eq(s.n, 0);
	for (i = 0; i < sizeof(b->bytes); i++)
		ck_assert_int_eq(b->bytes[i], 0);
	ck_assert_int_eq(b->n, 0);
	spares_put(&s, b);
	spares_free(&s);
	ck_assert_uint_eq(s.n, 0);
}
END_TEST

START_TEST(test_no_more_than_cap_kept)
{
	struct spares s = SPARES_INIT(struct rec, 3);
	void *p[5];
	size_t i;

	for (i = 0; i < 5; i++)
		p[i] = spares_get(&s);
	for (i = 0; i < 5; i++)
		spares_put(&s, p[i]);
	ck_assert_uint_eq(s.n, 3);
	spares_put(&s, NULL); /* nothing to keep */
	ck_assert_uint_eq(s.n, 3);
	/* the last kept is taken first */
	ck_assert_ptr_eq(spares_get(&s), p[2]);
	spares_put(&s, p[2]);
	spares_free(&s);
	ck_assert_uint_eq(s.n, 0);
}
END_TEST

static Suite *spares_suite(void)
{
	Suite *s = suite_create("spares");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_put_back_is_taken_zeroed);
	tcase_add_test(tc, test_no_more_than_cap_kept);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(spares_suite());
	int nfail;

	srunner_run_all(sr, CK_ENV);
	nfail = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nfail == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
