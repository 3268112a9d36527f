/*
 * check_decimal.c - unit tests for daemon/base/decimal.c: every length and
 * digit against printf's "%lld" and "%llu" (both sides of each power of ten,
 * the int64 and uint64 ends, 100,000 random values), the bytes it writes
 * and nothing before them.
 */

#include "decimal.h"

#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_i64(int64_t v)
{
	char want[32], buf[DEC_MAX + 2], *p;

	snprintf(want, sizeof(want), "%" PRId64, v);
	memset(buf, '#', sizeof(buf));
	buf[DEC_MAX + 1] = '\0';
	p = dec_put_i64(buf + DEC_MAX + 1, v);
	ck_assert_str_eq(p, want);
	ck_assert_uint_eq(dec_len_i64(v), strlen(want));
	ck_assert_int_eq(buf[0], '#'); /* within DEC_MAX */
}

static void check_u64(uint64_t u)
{
	char want[32], buf[DEC_MAX + 1], *p;

	snprintf(want, sizeof(want), "%" PRIu64, u);
	buf[DEC_MAX] = '\0';
	p = dec_put_u64(buf + DEC_MAX, u);
	ck_assert_str_eq(p, want);
	ck_assert_uint_eq(dec_len_u64(u), strlen(want));
}

START_TEST(test_powers_of_ten_and_ends)
{
	uint64_t p = 1;
	int i;

	check_i64(0);
	check_i64(INT64_MAX);
	check_i64(INT64_MIN);
	check_u64(UINT64_MAX);
	for (i = 0; i < 19; i++, p *= 10) {
		check_u64(p - 1);
		check_u64(p);
		check_u64(p + 1);
		check_i64((int64_t)p);
		check_i64(-(int64_t)p);
		check_i64((int64_t)p - 1);
		check_i64(1 - (int64_t)p);
	}
}
END_TEST

START_TEST(test_random)
{
	uint64_t x = 88172645463325252ULL;
	int i;

	for (i = 0; i < 100000; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		int64_t v = (int64_t)(x >> (i % 64));

		check_u64(x >> (i % 64));
		check_i64(i % 2 && v != INT64_MIN ? -v : v);
	}
}
END_TEST

static Suite *decimal_suite(void)
{
	Suite *s = suite_create("decimal");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_powers_of_ten_and_ends);
	tcase_add_test(tc, test_random);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(decimal_suite());
	int nfail;

	srunner_run_all(sr, CK_ENV);
	nfail = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nfail == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
