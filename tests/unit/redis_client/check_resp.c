/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * check_resp.c - unit tests for the wire codec (daemon/redis_client/resp.c): the
 * bytes a command is formatted to (the same as hiredis's formatter makes,
 * for thousands of argvs), replies fed one byte at a time and in
 * batches, every reply type, a protocol error, the error-word test the
 * pool routes on (MOVED, ASK, TRYAGAIN, NOSCRIPT), and the bounds on one
 * reply (array length, values, bytes) with the largest reply we read
 * (CLUSTER SLOTS of 16384 ranges) inside them.
 */

#include "resp.h"

#include <check.h>
#include <hiredis/hiredis.h>
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

/* fmt_same - resp_format and hiredis's redisFormatCommandArgv make the same bytes. */
static void fmt_same(int argc, const char **argv, const size_t *lens)
{
	char *ours = NULL, *theirs = NULL;
	size_t len = 0;
	int n;

	ck_assert_int_eq(resp_format(argc, argv, lens, &ours, &len), 0);
	n = redisFormatCommandArgv(&theirs, argc, argv, lens);
	ck_assert_int_gt(n, 0);
	ck_assert_uint_eq(len, (size_t)n);
	ck_assert_mem_eq(ours, theirs, len);
	resp_free_cmd(ours);
	redisFreeCommand(theirs);
}

/*
 * The formatter against hiredis's: argument counts across the digit
 * boundaries (1, 9, 10, 99, 100, 1000), lengths across them too (0, 9, 10,
 * 99, 100, 999, 1000, 65536, 1 MiB + 7), binary bytes (NUL, CR, LF, 0xff),
 * then 2000 random argvs of random bytes.
 */
START_TEST(test_format_same_as_hiredis)
{
	static const size_t sizes[] = { 0,   1,	  9,   10,   11,    99,
					100, 101, 999, 1000, 65536, (1 << 20) + 7 };
	static const int counts[] = { 1, 2, 9, 10, 11, 99, 100, 101, 1000 };
	const size_t nsizes = sizeof(sizes) / sizeof(sizes[0]);
	size_t big = (1 << 20) + 7, i, lens[1000];
	const char *argv[1000];
	char *buf = malloc(big + 1024); /* room past big for the offsets below */
	unsigned seed = 30;

	ck_assert_ptr_nonnull(buf);
	for (i = 0; i < big + 1024; i++)
		buf[i] = (char)(i % 256); /* every byte value, NUL, CR and LF among them */
	for (i = 0; i < nsizes; i++) {
		argv[0] = buf;
		lens[0] = sizes[i];
		fmt_same(1, argv, lens);
		argv[0] = "EVALSHA";
		lens[0] = 7;
		argv[1] = buf + 13;
		lens[1] = sizes[i];
		fmt_same(2, argv, lens);
	}
	for (i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		for (int a = 0; a < counts[i]; a++) {
			argv[a] = buf + a;
			lens[a] = sizes[(size_t)a % (nsizes - 1)];
		}
		fmt_same(counts[i], argv, lens);
	}
	/* C strings (lens NULL) against hiredis given their strlen */
	{
		const char *cs[4] = { "SET", "", "k{tag}", "12345678901" };
		size_t cl[4] = { 3, 0, 6, 11 };
		char *ours = NULL, *theirs = NULL;
		size_t len = 0;
		int n;

		ck_assert_int_eq(resp_format(4, cs, NULL, &ours, &len), 0);
		n = redisFormatCommandArgv(&theirs, 4, cs, cl);
		ck_assert_uint_eq(len, (size_t)n);
		ck_assert_mem_eq(ours, theirs, len);
		resp_free_cmd(ours);
		redisFreeCommand(theirs);
	}
	for (int r = 0; r < 2000; r++) {
		int argc = 1 + (int)(rand_r(&seed) % 40);

		for (int a = 0; a < argc; a++) {
			unsigned k = (unsigned)rand_r(&seed);

			lens[a] = k % 5 == 0 ? k % 20000 : k % 40;
			argv[a] = buf + (size_t)rand_r(&seed) % (big - 20000);
		}
		fmt_same(argc, argv, lens);
	}
	free(buf);
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

/* Feed all of buf (len bytes) and read: the first resp_next result that is not 1. */
static int feed_and_drain(struct resp_reader *r, const char *buf, size_t len, size_t *replies)
{
	struct rval *v = NULL;
	int k;

	ck_assert_int_eq(resp_feed(r, buf, len), 0);
	while ((k = resp_next(r, &v)) == 1) {
		rval_free(v);
		(*replies)++;
	}
	ck_assert_ptr_null(v);
	return k;
}

/* Append the text of a RESP value made by fmt to a growing buffer. */
struct sbuf {
	char *p;
	size_t len, cap;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2;
		b->p = realloc(b->p, b->cap);
		ck_assert_ptr_nonnull(b->p);
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

static void sb_fmt(struct sbuf *b, const char *fmt, long long x)
{
	char tmp[64];
	int n = snprintf(tmp, sizeof(tmp), fmt, x);

	sb_add(b, tmp, (size_t)n);
}

START_TEST(test_reader_refuses_huge_array_header)
{
	/* Refused at the header, before a byte of an element arrives (hiredis
	 * alone would calloc 16 GiB of pointers here). */
	static const char *const heads[] = { "*2147483647\r\n", "*65537\r\n",
					     "*1\r\n*1\r\n*100000\r\n" };

	for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
		struct resp_reader *r = resp_reader_new();
		size_t n = 0;

		ck_assert_int_eq(feed_and_drain(r, heads[i], strlen(heads[i]), &n), -1);
		ck_assert_uint_eq(n, 0);
		ck_assert_msg(strstr(resp_error(r), "array longer") != NULL, "%s: %s", heads[i],
			      resp_error(r));
		resp_reader_free(r);
	}
}
END_TEST

START_TEST(test_reader_array_at_the_bound)
{
	struct resp_reader *r = resp_reader_new();
	struct sbuf b = { 0 };
	struct rval *v = NULL;

	sb_fmt(&b, "*%lld\r\n", RESP_MAX_ARRAY);
	for (int i = 0; i < RESP_MAX_ARRAY; i++)
		sb_fmt(&b, ":%lld\r\n", i);
	ck_assert_int_eq(resp_feed(r, b.p, b.len), 0);
	ck_assert_int_eq(resp_next(r, &v), 1);
	ck_assert_uint_eq(v->n, RESP_MAX_ARRAY);
	ck_assert_int_eq(v->a[RESP_MAX_ARRAY - 1].i, RESP_MAX_ARRAY - 1);
	rval_free(v);
	resp_reader_free(r);
	free(b.p);
}
END_TEST

START_TEST(test_reader_refuses_too_many_values)
{
	/* Arrays each within the bound whose sum is not: 17 x 65536 > 2^20. */
	struct resp_reader *r = resp_reader_new();
	struct sbuf b = { 0 };
	size_t n = 0;

	sb_add(&b, "*17\r\n", 5);
	for (int j = 0; j < 17; j++) {
		sb_fmt(&b, "*%lld\r\n", RESP_MAX_ARRAY);
		if (j < 16)
			for (int i = 0; i < RESP_MAX_ARRAY; i++)
				sb_add(&b, ":1\r\n", 4);
	}
	ck_assert_int_eq(feed_and_drain(r, b.p, b.len, &n), -1);
	ck_assert_uint_eq(n, 0);
	ck_assert_msg(strstr(resp_error(r), "too many values") != NULL, "%s", resp_error(r));
	resp_reader_free(r);
	free(b.p);
}
END_TEST

START_TEST(test_reader_refuses_endless_bulk)
{
	/* A bulk string announced at 1 GB: refused once more than
	 * RESP_MAX_BYTES of it are buffered, not at 1 GB. */
	struct resp_reader *r = resp_reader_new();
	static char chunk[1 << 20];
	size_t n = 0, fed = 0;
	int k = 0;

	memset(chunk, 'x', sizeof(chunk));
	ck_assert_int_eq(feed_and_drain(r, "$1000000000\r\n", 13, &n), 0);
	while (fed <= (size_t)RESP_MAX_BYTES + sizeof(chunk) && k == 0) {
		k = feed_and_drain(r, chunk, sizeof(chunk), &n);
		fed += sizeof(chunk);
	}
	ck_assert_int_eq(k, -1);
	ck_assert_uint_le(fed, (size_t)RESP_MAX_BYTES + sizeof(chunk));
	ck_assert_uint_gt(fed, (size_t)RESP_MAX_BYTES - sizeof(chunk));
	ck_assert_msg(strstr(resp_error(r), "reply longer") != NULL, "%s", resp_error(r));
	resp_reader_free(r);
}
END_TEST

START_TEST(test_reader_many_replies_past_the_byte_bound)
{
	/* The bound is per reply: a pipeline of small replies longer than it
	 * is read whole (in 256 KiB reads, as rconn.c feeds it: hiredis moves
	 * what is left after each reply, so one huge feed would be slow). */
	struct resp_reader *r = resp_reader_new();
	struct sbuf b = { 0 };
	char bulk[1024];
	size_t n = 0, want = 0;

	memset(bulk, 'y', sizeof(bulk));
	while (b.len <= (size_t)RESP_MAX_BYTES + 4096) {
		sb_add(&b, "$1024\r\n", 7);
		sb_add(&b, bulk, sizeof(bulk));
		sb_add(&b, "\r\n", 2);
		want++;
	}
	for (size_t off = 0; off < b.len; off += 256 * 1024) {
		size_t step = b.len - off < 256 * 1024 ? b.len - off : 256 * 1024;
		ck_assert_int_eq(feed_and_drain(r, b.p + off, step, &n), 0);
	}
	ck_assert_uint_eq(n, want);
	resp_reader_free(r);
	free(b.p);
}
END_TEST

START_TEST(test_reader_largest_cluster_slots)
{
	/* CLUSTER SLOTS of 16384 single-slot ranges, a master and two replicas
	 * each (Redis 7 shape: ip, port, id, metadata), fed in 256 KiB reads
	 * as rconn.c does: read whole. */
	static const char id[] = "0123456789abcdef0123456789abcdef01234567";
	struct resp_reader *r = resp_reader_new();
	struct sbuf b = { 0 };
	struct rval *v = NULL;
	size_t off = 0;
	int k = 0;

	sb_add(&b, "*16384\r\n", 8);
	for (int s = 0; s < 16384; s++) {
		sb_fmt(&b, "*5\r\n:%lld\r\n", s);
		sb_fmt(&b, ":%lld\r\n", s);
		for (int node = 0; node < 3; node++) {
			sb_add(&b, "*4\r\n$9\r\n127.0.0.1\r\n", 19);
			sb_fmt(&b, ":%lld\r\n$40\r\n", 7000 + (s + node) % 3);
			sb_add(&b, id, 40);
			sb_add(&b, "\r\n*0\r\n", 6);
		}
	}
	while (off < b.len && k == 0) {
		size_t step = b.len - off < 256 * 1024 ? b.len - off : 256 * 1024;
		ck_assert_int_eq(resp_feed(r, b.p + off, step), 0);
		off += step;
		k = resp_next(r, &v);
	}
	ck_assert_int_eq(k, 1);
	ck_assert_uint_eq(off, b.len);
	ck_assert_uint_eq(v->n, 16384);
	ck_assert_int_eq(v->a[16383].a[1].i, 16383);
	ck_assert_int_eq(v->a[16383].a[4].a[1].i, 7000 + (16383 + 2) % 3);
	ck_assert_str_eq(v->a[5].a[2].a[2].s, id);
	rval_free(v);
	resp_reader_free(r);
	free(b.p);
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
	tcase_add_test(tc, test_format_same_as_hiredis);
	tcase_add_test(tc, test_reader_split_and_batched);
	tcase_add_test(tc, test_reader_protocol_error);
	tcase_add_test(tc, test_err_words_and_copy);
	tcase_add_test(tc, test_reader_refuses_huge_array_header);
	tcase_add_test(tc, test_reader_array_at_the_bound);
	tcase_add_test(tc, test_reader_refuses_too_many_values);
	tcase_add_test(tc, test_reader_refuses_endless_bulk);
	tcase_add_test(tc, test_reader_many_replies_past_the_byte_bound);
	tcase_add_test(tc, test_reader_largest_cluster_slots);
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
