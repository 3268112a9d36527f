/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * check_resp.c - unit tests for the wire codec (daemon/redis/resp.c): the
 * bytes a command is formatted to, replies fed one byte at a time and in
 * batches, every reply type, a protocol error, and the error-word test the
 * pool routes on (MOVED, ASK, TRYAGAIN, NOSCRIPT).
 */

#include "resp.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_format_binary_safe)
{
	const char *argv[3] = { "EVALSHA", "a\r\nb", "" };
	const size_t lens[3] = { 7, 4, 0 };
	static const char want[] = "*3\r\n$7\r\nEVALSHA\r\n$4\r\na\r\nb\r\n$0\r\n\r\n";
	char *cmd = NULL;
	size_t len = 0;

	ck_assert_int_eq(resp_format(3, argv, lens, &cmd, &len), 0);
	ck_assert_uint_eq(len, sizeof(want) - 1);
	ck_assert_mem_eq(cmd, want, len);
	resp_free_cmd(cmd);

	/* C strings without lengths */
	ck_assert_int_eq(resp_format(1, (const char *[]){ "PING" }, NULL, &cmd, &len), 0);
	ck_assert_uint_eq(len, 14);
	ck_assert_mem_eq(cmd, "*1\r\n$4\r\nPING\r\n", 14);
	resp_free_cmd(cmd);
	ck_assert_int_eq(resp_format(0, argv, lens, &cmd, &len), -1);
}
END_TEST

/* A pipeline of replies of every type: one byte at a time, then all at once. */
static const char pipeline[] = "+OK\r\n"
			       "-MOVED 3999 127.0.0.1:7001\r\n"
			       ":-42\r\n"
			       "$5\r\nab\r\nc\r\n"
			       "$-1\r\n"
			       "*3\r\n:1\r\n*2\r\n$1\r\nx\r\n*0\r\n$0\r\n\r\n";

static void check_pipeline(struct rval **v)
{
	ck_assert_int_eq(v[0]->type, RV_STATUS);
	ck_assert_str_eq(v[0]->s, "OK");
	ck_assert_int_eq(v[1]->type, RV_ERR);
	ck_assert_str_eq(v[1]->s, "MOVED 3999 127.0.0.1:7001");
	ck_assert_int_eq(v[2]->type, RV_INT);
	ck_assert_int_eq(v[2]->i, -42);
	ck_assert_int_eq(v[3]->type, RV_STR);
	ck_assert_uint_eq(v[3]->len, 5);
	ck_assert_mem_eq(v[3]->s, "ab\r\nc", 5);
	ck_assert_int_eq(v[4]->type, RV_NIL);
	ck_assert_int_eq(v[5]->type, RV_ARR);
	ck_assert_uint_eq(v[5]->n, 3);
	ck_assert_int_eq(v[5]->a[0].i, 1);
	ck_assert_uint_eq(v[5]->a[1].n, 2);
	ck_assert_str_eq(v[5]->a[1].a[0].s, "x");
	ck_assert_int_eq(v[5]->a[1].a[1].type, RV_ARR);
	ck_assert_uint_eq(v[5]->a[1].a[1].n, 0);
	ck_assert_int_eq(v[5]->a[2].type, RV_STR);
	ck_assert_uint_eq(v[5]->a[2].len, 0);
}

START_TEST(test_reader_split_and_batched)
{
	for (int mode = 0; mode < 2; mode++) {
		struct resp_reader *r = resp_reader_new();
		struct rval *v[6] = { NULL };
		size_t got = 0, n = sizeof(pipeline) - 1;

		ck_assert_ptr_nonnull(r);
		for (size_t off = 0; off < n;) {
			size_t step = mode == 0 ? 1 : n;
			struct rval *one;
			int k;
			ck_assert_int_eq(resp_feed(r, pipeline + off, step), 0);
			off += step;
			while ((k = resp_next(r, &one)) == 1) {
				ck_assert_uint_lt(got, 6);
				v[got++] = one;
			}
			ck_assert_int_eq(k, 0);
		}
		ck_assert_uint_eq(got, 6);
		check_pipeline(v);
		for (size_t i = 0; i < got; i++)
			rval_free(v[i]);
		resp_reader_free(r);
	}
}
END_TEST

START_TEST(test_reader_protocol_error)
{
	struct resp_reader *r = resp_reader_new();
	struct rval *v = NULL;

	ck_assert_int_eq(resp_feed(r, "+OK\r\n?garbage\r\n", 15), 0);
	ck_assert_int_eq(resp_next(r, &v), 1);
	ck_assert_str_eq(v->s, "OK");
	rval_free(v);
	ck_assert_int_eq(resp_next(r, &v), -1);
	ck_assert_ptr_null(v);
	resp_reader_free(r);
}
END_TEST

START_TEST(test_err_words_and_copy)
{
	struct resp_reader *r = resp_reader_new();
	struct rval *v = NULL, *c;
	static const char in[] = "-ASK 12 10.0.0.1:7000\r\n-TRYAGAIN Multiple keys\r\n-ASKING\r\n";
	const char *first[3] = { "ASK", "TRYAGAIN", NULL };

	ck_assert_int_eq(resp_feed(r, in, sizeof(in) - 1), 0);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(resp_next(r, &v), 1);
		if (first[i] != NULL)
			ck_assert(rval_is_err(v, first[i]));
		else
			ck_assert(!rval_is_err(v, "ASK")); /* a word, not a prefix */
		ck_assert(!rval_is_err(v, "MOVED"));
		c = rval_copy(v);
		ck_assert_ptr_nonnull(c);
		ck_assert_ptr_ne(c->s, v->s);
		ck_assert_str_eq(c->s, v->s);
		ck_assert_uint_eq(c->len, v->len);
		rval_free(c);
		rval_free(v);
	}
	ck_assert(!rval_is_err(NULL, "ASK"));
	resp_reader_free(r);
}
END_TEST

static Suite *resp_suite(void)
{
	Suite *s = suite_create("resp");
	TCase *tc = tcase_create("resp");

	tcase_add_test(tc, test_format_binary_safe);
	tcase_add_test(tc, test_reader_split_and_batched);
	tcase_add_test(tc, test_reader_protocol_error);
	tcase_add_test(tc, test_err_words_and_copy);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(resp_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
