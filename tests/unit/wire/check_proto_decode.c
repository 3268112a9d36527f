/*
 * check_proto_decode.c - unit tests for the general decoder of
 * daemon/wire/proto.c: the error table of proto_cases.h (every op, every
 * field's type and range errors, the message naming the field, malformed
 * JSON, targets and tokens bounds), the decoded values of each op, the id
 * echo kept as raw JSON even when the request fails, the length bounds, and
 * the tables of proto_url_host and proto_parse_retry_after.
 * client/python/tests/test_features.py reads this file's urlcases table.
 */

#include "proto.h"

#include "adaptive.h"
#include "proto_cases.h"

#include <check.h>
#include <glob.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))

START_TEST(test_decode_table)
{
	const struct dcase *c = &dcases[_i];
	struct request rq;
	char msg[256] = "";
	size_t len;
	char *line = dcase_line(c, &len);
	enum admit_err e = proto_decode(line, len, &rq, msg, sizeof(msg));

	ck_assert_msg(e == c->err, "%s: got %s (%s), want %s", c->line, admit_err_str(e), msg,
		      admit_err_str(c->err));
	if (c->msg != NULL)
		ck_assert_msg(strstr(msg, c->msg) != NULL, "%s: message \"%s\" lacks \"%s\"",
			      c->line, msg, c->msg);
	proto_request_clear(&rq);
	free(line);
}
END_TEST /* A release's outcome: the three values, and anything else refused. */
START_TEST(test_release_outcome)
{
	static const struct {
		const char *line;
		enum admit_err err;
		int outcome;
	} c[] = {
		{ "{\"op\":\"release\",\"lease\":\"l\"}", ADMIT_OK, ADAPT_NONE },
		{ "{\"op\":\"release\",\"lease\":\"l\",\"outcome\":\"ok\"}", ADMIT_OK, ADAPT_OK },
		{ "{\"op\":\"release\",\"lease\":\"l\",\"outcome\":\"limited\"}", ADMIT_OK,
		  ADAPT_LIMITED },
		{ "{\"op\":\"release\",\"lease\":\"l\",\"outcome\":\"error\"}", ADMIT_OK,
		  ADAPT_ERROR },
		{ "{\"op\":\"release\",\"lease\":\"l\",\"outcome\":\"\"}", ADMIT_E_BAD_REQUEST, 0 },
		{ "{\"op\":\"release\",\"lease\":\"l\",\"outcome\":[\"ok\"]}", ADMIT_E_BAD_REQUEST,
		  0 },
		{ "{\"op\":\"release\",\"lease\":\"l\",\"outcome\":true}", ADMIT_E_BAD_REQUEST, 0 },
	};

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		struct request rq;
		char msg[256];
		enum admit_err e =
		    proto_decode(c[i].line, strlen(c[i].line), &rq, msg, sizeof(msg));
		ck_assert_msg(e == c[i].err, "%s: error %d", c[i].line, (int)e);
		if (e == ADMIT_OK)
			ck_assert_int_eq(rq.outcome, c[i].outcome);
		else
			ck_assert_str_eq(msg,
					 "\"outcome\" must be \"ok\", \"limited\" or \"error\"");
		proto_request_clear(&rq);
	}
}
END_TEST

/* ---- decode: the values ---- */

static enum admit_err dec(const char *line, struct request *rq)
{
	char msg[256];

	return proto_decode(line, strlen(line), rq, msg, sizeof(msg));
}

START_TEST(test_decode_ops)
{
	static const struct {
		const char *line;
		int op;
	} t[] = {
		{ "{\"op\":\"ping\"}", OP_PING },
		{ "{\"op\":\"status\"}", OP_STATUS },
		{ "{\"op\":\"acquire\",\"scope\":\"s\"}", OP_ACQUIRE },
		{ "{\"op\":\"release\",\"lease\":\"L\"}", OP_RELEASE },
		{ "{\"op\":\"penalize\",\"scope\":\"s\",\"retry_after_ms\":1}", OP_PENALIZE },
	};
	struct request rq;
	size_t i;

	for (i = 0; i < N(t); i++) {
		ck_assert_int_eq(dec(t[i].line, &rq), ADMIT_OK);
		ck_assert_int_eq(rq.op, t[i].op);
		proto_request_clear(&rq);
	}
	ck_assert_int_eq(dec("{\"op\":\"nope\"}", &rq), ADMIT_E_UNKNOWN_OP);
	ck_assert_int_eq(rq.op, -1);
	proto_request_clear(&rq);
}
END_TEST

START_TEST(test_decode_acquire_fields)
{
	struct request rq;

	ck_assert_int_eq(
	    dec("{\"op\":\"acquire\",\"scope\":\"api\",\"key\":\"K1\",\"class\":\"bg\","
		"\"cost\":7,\"timeout_ms\":250,\"detach\":true}",
		&rq),
	    ADMIT_OK);
	ck_assert_uint_eq(rq.ntargets, 1);
	ck_assert_str_eq(rq.targets[0].scope, "api");
	ck_assert_str_eq(rq.targets[0].key, "K1"); /* keys keep their case */
	ck_assert(rq.targets[0].has_key);
	ck_assert_str_eq(rq.targets[0].cls, "bg");
	ck_assert(rq.targets[0].has_cls);
	ck_assert_int_eq(rq.targets[0].cost, 7);
	ck_assert(rq.has_timeout);
	ck_assert_int_eq(rq.timeout_ms, 250);
	ck_assert(rq.detach);
	ck_assert_ptr_null(rq.id);
	proto_request_clear(&rq);

	/* defaults */
	ck_assert_int_eq(dec("{\"op\":\"acquire\",\"scope\":\"api\",\"detach\":false}", &rq),
			 ADMIT_OK);
	ck_assert(!rq.targets[0].has_key);
	ck_assert(!rq.targets[0].has_cls);
	ck_assert_int_eq(rq.targets[0].cost, 1);
	ck_assert(!rq.has_timeout);
	ck_assert(!rq.detach);
	ck_assert(!rq.no_lease); /* a lease unless told otherwise */
	ck_assert(!rq.has_tenant);
	ck_assert_str_eq(rq.tenant, ""); /* the default tenant */
	proto_request_clear(&rq);

	ck_assert_int_eq(
	    dec("{\"op\":\"acquire\",\"scope\":\"api\",\"tenant\":\"Acme-1.b_c\"}", &rq), ADMIT_OK);
	ck_assert(rq.has_tenant);
	ck_assert_str_eq(rq.tenant, "Acme-1.b_c");
	proto_request_clear(&rq);

	ck_assert_int_eq(dec("{\"op\":\"acquire\",\"scope\":\"api\",\"lease\":false}", &rq),
			 ADMIT_OK);
	ck_assert(rq.no_lease);
	proto_request_clear(&rq);
	ck_assert_int_eq(dec("{\"op\":\"acquire\",\"scope\":\"api\",\"lease\":true}", &rq),
			 ADMIT_OK);
	ck_assert(!rq.no_lease);
	proto_request_clear(&rq);

	/* a url stands in for the key: its host, lowercased */
	ck_assert_int_eq(dec("{\"op\":\"acquire\",\"scope\":\"s\","
			     "\"url\":\"https://u:p@API.Example.COM:8443/v1?q=1\"}",
			     &rq),
			 ADMIT_OK);
	ck_assert(rq.targets[0].has_key);
	ck_assert_str_eq(rq.targets[0].key, "api.example.com");
	proto_request_clear(&rq);
}
END_TEST

START_TEST(test_decode_targets)
{
	struct request rq;

	ck_assert_int_eq(
	    dec("{\"op\":\"acquire\",\"scope\":\"ignored\",\"targets\":["
		"{\"scope\":\"a\",\"key\":\"k1\",\"cost\":3},"
		"{\"scope\":\"b\",\"url\":\"http://[2001:DB8::1]:80/\",\"class\":\"c\"},"
		"{\"scope\":\"c\"}],\"timeout_ms\":0}",
		&rq),
	    ADMIT_OK);
	ck_assert_uint_eq(rq.ntargets, 3);
	ck_assert_str_eq(rq.targets[0].scope, "a");
	ck_assert_str_eq(rq.targets[0].key, "k1");
	ck_assert_int_eq(rq.targets[0].cost, 3);
	ck_assert(!rq.targets[0].has_cls);
	ck_assert_str_eq(rq.targets[1].scope, "b");
	ck_assert_str_eq(rq.targets[1].key, "2001:db8::1");
	ck_assert_str_eq(rq.targets[1].cls, "c");
	ck_assert_int_eq(rq.targets[1].cost, 1);
	ck_assert_str_eq(rq.targets[2].scope, "c");
	ck_assert(!rq.targets[2].has_key);
	ck_assert(rq.has_timeout);
	ck_assert_int_eq(rq.timeout_ms, 0);
	proto_request_clear(&rq);

	ck_assert_int_eq(dec("{\"op\":\"acquire\",\"targets\":[" T8 "]}", &rq), ADMIT_OK);
	ck_assert_uint_eq(rq.ntargets, PROTO_MAX_TARGETS);
	ck_assert_str_eq(rq.targets[7].scope, "s");
	proto_request_clear(&rq);
}
END_TEST

START_TEST(test_decode_tokens)
{
	struct request rq;
	int64_t in = -1, out = -1;
	size_t i;

	ck_assert_int_eq(dec("{\"op\":\"release\",\"lease\":\"abc\","
			     "\"tokens\":{\"input\":300,\"output\":0}}",
			     &rq),
			 ADMIT_OK);
	ck_assert_str_eq(rq.lease, "abc");
	ck_assert_uint_eq(rq.ntokens, 2);
	for (i = 0; i < rq.ntokens; i++) {
		if (strcmp(rq.tokens[i].name, "input") == 0)
			in = rq.tokens[i].n;
		else if (strcmp(rq.tokens[i].name, "output") == 0)
			out = rq.tokens[i].n;
	}
	ck_assert_int_eq(in, 300);
	ck_assert_int_eq(out, 0);
	proto_request_clear(&rq);

	ck_assert_int_eq(dec("{\"op\":\"release\",\"lease\":\"L\",\"tokens\":{" K16 "}}", &rq),
			 ADMIT_OK);
	ck_assert_uint_eq(rq.ntokens, PROTO_MAX_TOKENS);
	proto_request_clear(&rq);
}
END_TEST

START_TEST(test_decode_penalize)
{
	struct request rq;

	ck_assert_int_eq(dec("{\"op\":\"penalize\",\"scope\":\"s\",\"key\":\"k\","
			     "\"retry_after_ms\":1500}",
			     &rq),
			 ADMIT_OK);
	ck_assert_int_eq(rq.penalty_ms, 1500);
	ck_assert_str_eq(rq.targets[0].key, "k");
	proto_request_clear(&rq);

	ck_assert_int_eq(dec("{\"op\":\"penalize\",\"scope\":\"s\",\"retry_after\":120}", &rq),
			 ADMIT_OK);
	ck_assert_int_eq(rq.penalty_ms, 120000);
	proto_request_clear(&rq);

	ck_assert_int_eq(dec("{\"op\":\"penalize\",\"scope\":\"s\",\"retry_after\":\"120\"}", &rq),
			 ADMIT_OK);
	ck_assert_int_eq(rq.penalty_ms, 120000);
	proto_request_clear(&rq);

	ck_assert_int_eq(dec("{\"op\":\"penalize\",\"scope\":\"s\","
			     "\"retry_after\":\"Sun, 06 Nov 1994 08:49:37 GMT\"}",
			     &rq),
			 ADMIT_OK);
	ck_assert_int_eq(rq.penalty_ms, -1);
	ck_assert_int_eq(rq.penalty_until_wall_ms, 784111777000LL);
	proto_request_clear(&rq);

	/* both given: retry_after_ms wins, retry_after is not even read */
	ck_assert_int_eq(dec("{\"op\":\"penalize\",\"scope\":\"s\",\"retry_after_ms\":7,"
			     "\"retry_after\":\"soon\"}",
			     &rq),
			 ADMIT_OK);
	ck_assert_int_eq(rq.penalty_ms, 7);
	proto_request_clear(&rq);

	/* penalize takes targets too */
	ck_assert_int_eq(dec("{\"op\":\"penalize\",\"targets\":[{\"scope\":\"a\",\"key\":\"x\"},"
			     "{\"scope\":\"b\",\"url\":\"http://H/\"}],\"retry_after_ms\":1}",
			     &rq),
			 ADMIT_OK);
	ck_assert_uint_eq(rq.ntargets, 2);
	ck_assert_str_eq(rq.targets[1].key, "h");
	proto_request_clear(&rq);
}
END_TEST

/* ---- id echo ---- */

static const struct {
	const char *line;
	enum admit_err err;
	const char *id; /* compact JSON, or NULL for none */
} idcases[] = {
	{ "{\"op\":\"ping\",\"id\":42}", ADMIT_OK, "42" },
	{ "{\"op\":\"ping\",\"id\":-7}", ADMIT_OK, "-7" },
	{ "{\"op\":\"ping\",\"id\":1.5}", ADMIT_OK, "1.5" },
	{ "{\"op\":\"ping\",\"id\":\"req-7\"}", ADMIT_OK, "\"req-7\"" },
	{ "{\"op\":\"ping\",\"id\":\"a\\\"b\\u00e9\"}", ADMIT_OK, "\"a\\\"b\xc3\xa9\"" },
	{ "{\"op\":\"ping\",\"id\":{\"trace\":\"abc\",\"n\":[1, 2]}}", ADMIT_OK,
	  "{\"trace\":\"abc\",\"n\":[1,2]}" },
	{ "{\"op\":\"ping\",\"id\":[]}", ADMIT_OK, "[]" },
	{ "{\"op\":\"ping\",\"id\":null}", ADMIT_OK, "null" },
	{ "{\"op\":\"ping\",\"id\":true}", ADMIT_OK, "true" },
	{ "{\"op\":\"ping\"}", ADMIT_OK, NULL },
	/* kept when the request fails after the id was read */
	{ "{\"id\":9,\"op\":\"frobnicate\"}", ADMIT_E_UNKNOWN_OP, "9" },
	{ "{\"op\":\"frobnicate\",\"id\":9}", ADMIT_E_UNKNOWN_OP, "9" },
	{ "{\"op\":5,\"id\":10}", ADMIT_E_BAD_REQUEST, "10" },
	{ "{\"id\":\"x\"}", ADMIT_E_BAD_REQUEST, "\"x\"" },
	{ "{\"op\":\"acquire\",\"cost\":-1,\"scope\":\"s\",\"id\":{\"a\":1}}", ADMIT_E_BAD_REQUEST,
	  "{\"a\":1}" },
	{ "{\"op\":\"release\",\"id\":14}", ADMIT_E_BAD_REQUEST, "14" },
	/* kept when an integer beyond 64 bits made jansson refuse the whole line */
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"cost\":9223372036854775808,\"id\":21}",
	  ADMIT_E_BAD_REQUEST, "21" },
	{ "{\"id\":\"a\\\"9\",\"op\":\"acquire\",\"scope\":\"s\",\"timeout_ms\":1e2,"
	  "\"cost\":[1],\"x\":{\"id\":99999999999999999999}}",
	  ADMIT_E_BAD_REQUEST, "\"a\\\"9\"" },
	{ "{\"id\":{\"n\":[1,2]},\"op\":\"ping\",\"big\":-99999999999999999999}", ADMIT_OK,
	  "{\"n\":[1,2]}" },
	/* ... but not when the id itself is such an integer: it could not be echoed */
	{ "{\"op\":\"ping\",\"id\":18446744073709551616}", ADMIT_E_BAD_REQUEST, NULL },
	{ "{\"op\":\"ping\",\"id\":[1,18446744073709551616]}", ADMIT_E_BAD_REQUEST, NULL },
	{ "{\"op\":\"acquire\",\"cost\":18446744073709551616,\"id\":18446744073709551616}",
	  ADMIT_E_BAD_REQUEST, NULL },
	/* not an object, or not JSON: nothing to echo */
	{ "[{\"id\":1}]", ADMIT_E_BAD_REQUEST, NULL },
	{ "{\"op\":\"ping\",\"id\":1", ADMIT_E_BAD_REQUEST, NULL },
	{ "{\"op\":\"ping\",\"id\":1,\"id\":2}", ADMIT_E_BAD_REQUEST, NULL },
};

START_TEST(test_id_echo)
{
	struct request rq;

	ck_assert_int_eq(dec(idcases[_i].line, &rq), idcases[_i].err);
	if (idcases[_i].id == NULL)
		ck_assert_ptr_null(rq.id);
	else
		ck_assert_str_eq(rq.id, idcases[_i].id);
	proto_request_clear(&rq);
	ck_assert_ptr_null(rq.id); /* clear is idempotent */
	proto_request_clear(&rq);
}
END_TEST

START_TEST(test_decode_len_bounds)
{
	/* only len bytes are read: no terminator needed, bytes after ignored */
	static const char buf[] = "{\"op\":\"ping\"}GARBAGE";
	struct request rq;
	char msg[64];

	ck_assert_int_eq(proto_decode(buf, 13, &rq, msg, sizeof(msg)), ADMIT_OK);
	proto_request_clear(&rq);
	ck_assert_int_eq(proto_decode(buf, 14, &rq, msg, sizeof(msg)), ADMIT_E_BAD_REQUEST);
	proto_request_clear(&rq);
	/* an embedded NUL byte inside the line */
	ck_assert_int_eq(proto_decode("{\"op\":\"ping\"}\0", 14, &rq, msg, sizeof(msg)),
			 ADMIT_E_BAD_REQUEST);
	proto_request_clear(&rq);
	/* a tiny message buffer truncates, never overflows */
	ck_assert_int_eq(proto_decode("{\"op\":\"zzzzzzzzzzzz\"}", 21, &rq, msg, 4),
			 ADMIT_E_UNKNOWN_OP);
	ck_assert_uint_eq(strlen(msg), 3);
	proto_request_clear(&rq);
}
END_TEST

/* ---- proto_url_host ---- */

static const struct {
	const char *url;
	const char *host; /* NULL: false */
} urlcases[] = {
	{ "https://Example.COM/a", "example.com" },
	{ "http://example.com", "example.com" },
	{ "http://host.example:8080/p?q", "host.example" },
	{ "http://user@host.example/", "host.example" },
	{ "http://user:pw@host.example:1/", "host.example" },
	{ "http://a@b@c.example/", "c.example" },
	{ "http://[::1]:8080/", "::1" },
	{ "http://[2001:DB8::1]/x", "2001:db8::1" },
	{ "http://u@[::1]/", "::1" },
	{ "//host.example/x", "host.example" },
	{ "http://host?x=1", "host" },
	{ "http://host#frag", "host" },
	{ "http://HOST:", "host" },
	{ "redis://10.0.0.1:6379/0", "10.0.0.1" },
	{ "http://host/p@q", "host" }, /* '@' in the path is not userinfo */
	{ "http:///path", NULL },
	{ "http://", NULL },
	{ "http://:80/", NULL },
	{ "http://user@/", NULL },
	{ "http://user@:80/", NULL },
	{ "http://[::1/", NULL },
	{ "http://[]/", NULL },
	{ "example.com", NULL },
	{ "example.com/path", NULL },
	{ "", NULL },
	{ "/", NULL },
};

START_TEST(test_url_host)
{
	char host[64];
	bool ok;

	memset(host, '#', sizeof(host));
	ok = proto_url_host(urlcases[_i].url, host, sizeof(host));
	if (urlcases[_i].host == NULL) {
		ck_assert_msg(!ok, "%s: got host \"%.*s\"", urlcases[_i].url, 63, host);
	} else {
		ck_assert_msg(ok, "%s: no host", urlcases[_i].url);
		ck_assert_str_eq(host, urlcases[_i].host);
	}
}
END_TEST

START_TEST(test_url_host_bounds)
{
	char host[5];

	ck_assert(proto_url_host("http://abcd/", host, sizeof(host)));
	ck_assert_str_eq(host, "abcd");
	ck_assert(!proto_url_host("http://abcde/", host, sizeof(host)));
	ck_assert(!proto_url_host("http://[abcde]/", host, sizeof(host)));
}
END_TEST

/* ---- proto_parse_retry_after ---- */

static const struct {
	const char *s;
	bool ok;
	int64_t delay_ms;      /* -1 for a date */
	int64_t until_wall_ms; /* dates only */
} racases[] = {
	{ "120", true, 120000, 0 },
	{ "0", true, 0, 0 },
	{ "  7  ", true, 7000, 0 },
	{ "007", true, 7000, 0 },
	{ "86400", true, 86400000, 0 },
	{ "86401", true, 86400000, 0 }, /* capped at 24h, like every form */
	{ "99999999999999999999999", true, 86400000, 0 },
	{ "-1", false, 0, 0 },
	{ "+5", false, 0, 0 },
	{ "1.5", false, 0, 0 },
	{ "120s", false, 0, 0 },
	{ "12 0", false, 0, 0 },
	{ "", false, 0, 0 },
	{ "   ", false, 0, 0 },
	{ "soon", false, 0, 0 },
	/* RFC 9110 section 5.6.7: the three forms of the same instant */
	{ "Sun, 06 Nov 1994 08:49:37 GMT", true, -1, 784111777000LL },
	{ "Sunday, 06-Nov-94 08:49:37 GMT", true, -1, 784111777000LL },
	{ "Sun Nov  6 08:49:37 1994", true, -1, 784111777000LL },
	{ "Wed, 21 Oct 2015 07:28:00 GMT", true, -1, 1445412480000LL },
	{ "Thu, 01 Jan 1970 00:00:00 GMT", true, -1, 0 },
	{ "Wed, 21 Oct 2099 07:28:00 GMT", true, -1, 4096250880000LL },
	{ "Sun, 06 Nov 1994 08:49:37", false, 0, 0 },
	{ "Sun, 06 Nov 1994 08:49:37 GMT x", false, 0, 0 },
	{ "Sun, 06 Nov 1994", false, 0, 0 },
	{ "Sun, 06 Foo 1994 08:49:37 GMT", false, 0, 0 },
	{ "Sun, 32 Nov 1994 08:49:37 GMT", false, 0, 0 },
	{ "Sun, 06 Nov 1994 25:49:37 GMT", false, 0, 0 },
	{ "Sun Nov  6 08:49:37", false, 0, 0 },
};

START_TEST(test_retry_after)
{
	int64_t delay = -12345, until = -12345;
	bool ok = proto_parse_retry_after(racases[_i].s, &delay, &until);

	ck_assert_msg(ok == racases[_i].ok, "\"%s\": %s", racases[_i].s,
		      ok ? "accepted" : "refused");
	if (!ok)
		return;
	ck_assert_int_eq(delay, racases[_i].delay_ms);
	if (racases[_i].delay_ms == -1)
		ck_assert_int_eq(until, racases[_i].until_wall_ms);
	else
		ck_assert_int_eq(until, -12345); /* untouched */
}
END_TEST

static Suite *proto_decode_suite(void)
{
	Suite *s = suite_create("proto_decode");
	TCase *tc;

	tc = tcase_create("decode");
	tcase_add_loop_test(tc, test_decode_table, 0, N(dcases));
	tcase_add_test(tc, test_release_outcome);
	tcase_add_test(tc, test_decode_ops);
	tcase_add_test(tc, test_decode_acquire_fields);
	tcase_add_test(tc, test_decode_targets);
	tcase_add_test(tc, test_decode_tokens);
	tcase_add_test(tc, test_decode_penalize);
	tcase_add_loop_test(tc, test_id_echo, 0, N(idcases));
	tcase_add_test(tc, test_decode_len_bounds);
	suite_add_tcase(s, tc);

	tc = tcase_create("values");
	tcase_add_loop_test(tc, test_url_host, 0, N(urlcases));
	tcase_add_test(tc, test_url_host_bounds);
	tcase_add_loop_test(tc, test_retry_after, 0, N(racases));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int nfail;

	sr = srunner_create(proto_decode_suite());
	srunner_run_all(sr, CK_ENV);
	nfail = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nfail == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
