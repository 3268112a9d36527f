/*
 * check_proto_fast.c - unit tests for the fast path of the codec
 * (daemon/wire/proto_fast.c): the hand-written decoder answers only where
 * the general one gives the same request. Every case of the error table
 * (proto_cases.h) and lines made to sit on the fast decoder's edges are
 * decoded both ways; the fast decoder must take the hot shapes, leave the
 * rest, and never take what the general decoder refuses.
 */

#include "proto.h"

#include "proto_cases.h"

#include <check.h>
#include <glob.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))

/*
 * The hand-written decoder answers only where the jansson one gives the same
 * request: every case of the table, and lines made to sit on its edges.
 * fcases[i].fast: must the fast decoder take it (the hot shapes), or leave it?
 */
static const struct {
	const char *line;
	bool fast;
} fcases[] = {
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"key\":\"k\",\"timeout_ms\":100,\"id\":7}", true },
	{ " { \"id\" : \"a/b c\" , \"op\" : \"acquire\" ,\"scope\":\"s\"}  ", true },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"class\":\"bg\",\"cost\":0,\"detach\":true}",
	  true },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"detach\":false,\"lease\":false}", true },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"lease\":true,\"id\":3}", true },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"detach\":true,\"lease\":true}", true },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"timeout_ms\":86400000}", true },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"cost\":1000000000,\"id\":999999999999999}", true },
	{ "{\"op\":\"release\",\"lease\":\"abc.def\",\"id\":\"r1\"}", true },
	{ "{\"op\":\"release\",\"lease\":\"abc\",\"scope\":7}", true },
	{ "{\"op\":\"release\",\"lease\":\"abc\",\"outcome\":\"ok\"}", true },
	{ "{\"op\":\"release\",\"lease\":\"abc\",\"outcome\":\"limited\",\"id\":3}", true },
	{ "{\"op\":\"release\",\"outcome\":\"error\",\"lease\":\"abc\"}", true },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"outcome\":7}", true },
	{ "{\"op\":\"release\",\"lease\":\"abc\",\"outcome\":\"OK\"}", false },
	{ "{\"op\":\"release\",\"lease\":\"abc\",\"outcome\":\"limitedd\"}", false },
	{ "{\"op\":\"release\",\"lease\":\"abc\",\"outcome\":429}", false },
	{ "{\"op\":\"release\",\"lease\":\"abc\",\"outcome\":null}", false },
	{ "{\"op\":\"ping\"}", true },
	{ "{\"op\":\"status\",\"id\":0}", true },
	/* left to the general decoder */
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"tenant\":\"acme\",\"id\":1}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"tenant\":\"a b\"}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"timeout_ms\":86400001}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"cost\":1000000001}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"id\":9999999999999999}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"id\":-1}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"id\":1.5}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"id\":1e3}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"id\":01}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"id\":true}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"id\":null}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"key\":\"a\\\"b\"}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"key\":\"\xc3\xa9\"}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"key\":\"\"}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"key\":null}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"scope\":\"t\"}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"url\":\"http://h/\"}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"x\":1}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"detach\":1}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"lease\":5}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"lease\":\"x\"}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"detach\":true,\"lease\":false}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",}", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\"} x", false },
	{ "{\"op\":\"acquire\",\"scope\":\"s\"", false },
	{ "{\"op\":\"acquire\"}", false },
	{ "{\"op\":\"penalize\",\"scope\":\"s\",\"retry_after_ms\":5}", false },
	{ "{\"op\":\"release\"}", false },
	{ "{\"op\":\"nope\"}", false },
	{ "{}", false },
	{ "[]", false },
	{ "", false },
};

static void same_both_ways(const char *line, size_t len, int fast_want, const char *what)
{
	struct request a, b, f;
	char ma[256] = "", mb[256] = "";
	enum admit_err ea, eb;
	bool fast;

	memset(&f, 0, sizeof(f));
	f.op = -1;
	fast = proto_fast_decode(line, len, &f);
	if (fast_want >= 0)
		ck_assert_msg(fast == (fast_want == 1), "%s: fast decoder %s it", what,
			      fast ? "took" : "left");
	ea = proto_decode(line, len, &a, ma, sizeof(ma));
	eb = proto_decode_general(line, len, &b, mb, sizeof(mb));
	ck_assert_msg(ea == eb, "%s: %s against %s", what, admit_err_str(ea), admit_err_str(eb));
	ck_assert_msg(strcmp(ma, mb) == 0, "%s: \"%s\" against \"%s\"", what, ma, mb);
	if (fast) {
		ck_assert_msg(eb == ADMIT_OK, "%s: fast took what the general decoder refuses",
			      what);
		ck_assert_msg(proto_request_equal(&f, &b), "%s: not the same request", what);
	}
	if (ea == ADMIT_OK)
		ck_assert_msg(proto_request_equal(&a, &b), "%s: not the same request", what);
	proto_request_clear(&a);
	proto_request_clear(&b);
	proto_request_clear(&f);
}
START_TEST(test_fast_decoder_cases)
{
	same_both_ways(fcases[_i].line, strlen(fcases[_i].line), fcases[_i].fast, fcases[_i].line);
}
END_TEST

START_TEST(test_fast_decoder_table)
{
	size_t len;
	char *line = dcase_line(&dcases[_i], &len);

	same_both_ways(line, len, -1, dcases[_i].line);
	free(line);
}
END_TEST

static Suite *proto_fast_suite(void)
{
	Suite *s = suite_create("proto_fast");
	TCase *tc;

	tc = tcase_create("decode");
	tcase_add_loop_test(tc, test_fast_decoder_cases, 0, N(fcases));
	tcase_add_loop_test(tc, test_fast_decoder_table, 0, N(dcases));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int nfail;

	sr = srunner_create(proto_fast_suite());
	srunner_run_all(sr, CK_ENV);
	nfail = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nfail == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
