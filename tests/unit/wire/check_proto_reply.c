/*
 * check_proto_reply.c - unit tests for the reply builder of
 * daemon/wire/proto_reply.c: each reply is parsed back with jansson and its
 * fields, nesting, id round trip, error form, bytes and failure modes
 * checked, and a reply quoting client bytes cut mid-character keeps the
 * decode's error code. A builder handed back (finished, freed, failed) is
 * the next reply's, and starts it clean.
 */

#include "proto.h"

#include <check.h>
#include <glob.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the reply builder ---- */

/* Finish r, check the framing, and parse the line. */
static json_t *finish_parse(struct preply *r)
{
	size_t len = 0;
	char *line = preply_finish(r, &len);
	json_error_t jerr;
	json_t *j;

	ck_assert_ptr_nonnull(line);
	ck_assert_uint_eq(len, strlen(line));
	ck_assert_uint_gt(len, 1);
	ck_assert_int_eq(line[len - 1], '\n');
	ck_assert_msg(memchr(line, '\n', len - 1) == NULL, "inner newline in %s", line);
	j = json_loadb(line, len - 1, JSON_REJECT_DUPLICATES, &jerr);
	ck_assert_msg(j != NULL, "%s: %s", line, jerr.text);
	ck_assert(json_is_object(j));
	free(line);
	return j;
}

/* Integers are written two digits at a time: each length, both signs, the ends of int64. */
START_TEST(test_reply_int_digits)
{
	static const struct {
		int64_t v;
		const char *text;
	} cases[] = {
		{ 0, "0" },
		{ 7, "7" },
		{ 9, "9" },
		{ 10, "10" },
		{ 99, "99" },
		{ 100, "100" },
		{ 101, "101" },
		{ 1000, "1000" },
		{ 12345, "12345" },
		{ -5, "-5" },
		{ -100, "-100" },
		{ INT64_MAX, "9223372036854775807" },
		{ INT64_MIN, "-9223372036854775808" },
	};
	size_t i, len;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct preply *r = preply_new(NULL, true);
		char want[64], *line;

		preply_int(r, "n", cases[i].v);
		line = preply_finish(r, &len);
		snprintf(want, sizeof(want), "{\"ok\":true,\"n\":%s}\n", cases[i].text);
		ck_assert_str_eq(line, want);
		free(line);
	}
}
END_TEST

START_TEST(test_reply_fields)
{
	struct preply *r = preply_new(NULL, true);
	json_t *j, *o;

	ck_assert_ptr_nonnull(r);
	preply_str(r, "lease", "abc\ndef\"");
	preply_int(r, "waited_ms", 1234567890123LL);
	preply_int(r, "neg", -1);
	preply_bool(r, "held", false);
	preply_double(r, "ratio", 0.25);
	preply_push(r, "scopes");
	preply_push(r, "open");
	preply_int(r, "leases", 3);
	preply_pop(r);
	preply_push(r, "once");
	preply_int(r, "waiting", 4);
	preply_pop(r);
	preply_pop(r);
	preply_str(r, "backend", "local");
	preply_pop(r); /* at the top: harmless */
	preply_str(r, "after", "x");
	j = finish_parse(r);

	ck_assert(json_is_true(json_object_get(j, "ok")));
	ck_assert_ptr_null(json_object_get(j, "id"));
	ck_assert_ptr_null(json_object_get(j, "error"));
	ck_assert_str_eq(json_string_value(json_object_get(j, "lease")), "abc\ndef\"");
	ck_assert_int_eq(json_integer_value(json_object_get(j, "waited_ms")), 1234567890123LL);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "neg")), -1);
	ck_assert(json_is_false(json_object_get(j, "held")));
	ck_assert(json_real_value(json_object_get(j, "ratio")) == 0.25);
	o = json_object_get(j, "scopes");
	ck_assert(json_is_object(o));
	ck_assert_uint_eq(json_object_size(o), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(o, "open"), "leases")),
			 3);
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(o, "once"), "waiting")),
			 4);
	ck_assert_str_eq(json_string_value(json_object_get(j, "backend")), "local");
	ck_assert_str_eq(json_string_value(json_object_get(j, "after")), "x");
	ck_assert_uint_eq(json_object_size(j), 9);
	json_decref(j);
}
END_TEST

START_TEST(test_reply_deep)
{
	struct preply *r = preply_new("1", true);
	json_t *j, *o;

	preply_push(r, "a");
	preply_push(r, "b");
	preply_push(r, "c");
	preply_int(r, "d", 5);
	preply_pop(r);
	preply_pop(r);
	preply_pop(r);
	j = finish_parse(r);
	o = json_object_get(json_object_get(json_object_get(j, "a"), "b"), "c");
	ck_assert_int_eq(json_integer_value(json_object_get(o, "d")), 5);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "id")), 1);
	json_decref(j);
}
END_TEST

/* Each id form decoded from a request comes back equal in the reply. */
START_TEST(test_reply_id_roundtrip)
{
	static const char *const ids[] = {
		"42",
		"-3",
		"\"req-7\"",
		"{\"trace\":\"abc\",\"n\":[1,2,{\"x\":null}]}",
		"null",
		"[1,\"2\"]",
		"\"\\u00e9\\n\"",
		"2.5",
		"false",
	};
	char line[256], msg[256];
	struct request rq;
	size_t i;

	for (i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		json_t *want = json_loads(ids[i], JSON_DECODE_ANY, NULL), *j;

		ck_assert_ptr_nonnull(want);
		snprintf(line, sizeof(line), "{\"op\":\"ping\",\"id\":%s}", ids[i]);
		ck_assert_int_eq(proto_decode(line, strlen(line), &rq, msg, sizeof(msg)), ADMIT_OK);
		j = finish_parse(preply_new(rq.id, true));
		ck_assert_msg(json_equal(json_object_get(j, "id"), want), "id %s", ids[i]);
		ck_assert(json_is_true(json_object_get(j, "ok")));
		json_decref(j);
		json_decref(want);
		proto_request_clear(&rq);
	}
}
END_TEST

START_TEST(test_reply_error)
{
	struct request rq;
	json_t *j;
	int e;

	/* the error path of ops.c: decode fails, the error reply echoes the id */
	static const char line[] = "{\"op\":\"bogus\",\"id\":{\"k\":[7]}}";
	char msg[128];
	enum admit_err err = proto_decode(line, strlen(line), &rq, msg, sizeof(msg));
	ck_assert_int_eq(err, ADMIT_E_UNKNOWN_OP);
	j = finish_parse(preply_error(rq.id, err, msg));
	ck_assert(json_is_false(json_object_get(j, "ok")));
	ck_assert_str_eq(json_string_value(json_object_get(j, "error")), "unknown_op");
	ck_assert_str_eq(json_string_value(json_object_get(j, "message")), msg);
	ck_assert_int_eq(
	    json_integer_value(json_array_get(json_object_get(json_object_get(j, "id"), "k"), 0)),
	    7);
	json_decref(j);
	proto_request_clear(&rq);

	/* every code: its wire string, and the default message when none given */
	for (e = 1; e < ADMIT_E__COUNT; e++) {
		struct preply *r = preply_error(NULL, (enum admit_err)e, NULL);

		preply_int(r, "retry_after_ms", 5);
		j = finish_parse(r);
		ck_assert(json_is_false(json_object_get(j, "ok")));
		ck_assert_str_eq(json_string_value(json_object_get(j, "error")), admit_err_str(e));
		ck_assert_str_eq(json_string_value(json_object_get(j, "message")),
				 admit_err_msg(e));
		ck_assert_int_eq(admit_err_parse(admit_err_str(e)), e);
		ck_assert_ptr_null(json_object_get(j, "id"));
		ck_assert_int_eq(json_integer_value(json_object_get(j, "retry_after_ms")), 5);
		json_decref(j);
	}
}
END_TEST

/* Exactly the bytes expected: compact, in insertion order, one '\n'. */
START_TEST(test_reply_bytes)
{
	struct preply *r = preply_new("\"x\"", true);
	size_t len;
	char *line;

	preply_bool(r, "held", true);
	line = preply_finish(r, &len);
	ck_assert_str_eq(line, "{\"ok\":true,\"id\":\"x\",\"held\":true}\n");
	ck_assert_uint_eq(len, strlen(line));
	free(line);

	r = preply_error("7", ADMIT_E_LIMITED, "wait");
	preply_str(r, "rule", "quota 1/1h");
	line = preply_finish(r, &len);
	ck_assert_str_eq(line, "{\"ok\":false,\"id\":7,\"error\":\"limited\",\"message\":\"wait\","
			       "\"rule\":\"quota 1/1h\"}\n");
	free(line);
}
END_TEST

/* A builder that could not be built still yields one well-formed line. */
START_TEST(test_reply_failed)
{
	json_t *j;

	j = finish_parse(NULL);
	ck_assert(json_is_false(json_object_get(j, "ok")));
	ck_assert_str_eq(json_string_value(json_object_get(j, "error")), "unavailable");
	json_decref(j);

	/* an id is the codec's JSON text, pasted as is; one that would break
	 * the line framing cannot be echoed */
	j = finish_parse(preply_new("1\n2", true));
	ck_assert(json_is_false(json_object_get(j, "ok")));
	json_decref(j);

	/* the NULL builder is accepted by every adder */
	preply_int(NULL, "a", 1);
	preply_str(NULL, "a", "b");
	preply_bool(NULL, "a", true);
	preply_double(NULL, "a", 1.0);
	preply_push(NULL, "a");
	preply_pop(NULL);
}
END_TEST

/*
 * An error message quoting client bytes cut mid-character (an unknown op
 * name at 64 bytes, jansson's "near '...'") is not valid UTF-8: the reply
 * must still carry the decode's own error code and the id, not the
 * builder's out-of-memory line.
 */
START_TEST(test_reply_invalid_utf8)
{
	static const char bad_json[] = "{\"id\":3,\"op\":\"ping\",\"x\\u00\xf0\x9f\x98\x80\":1}";
	char line[512] = "{\"id\":1,\"op\":\"";
	struct request rq;
	char msg[256];
	enum admit_err e;
	json_t *j;
	size_t n;
	char *out;
	int i;

	for (i = 0; i < 30; i++)
		strcat(line, "\xe2\x82\xac");
	strcat(line, "\"}");
	e = proto_decode(line, strlen(line), &rq, msg, sizeof(msg));
	ck_assert_int_eq(e, ADMIT_E_UNKNOWN_OP);
	out = preply_finish(preply_error(rq.id, e, msg), &n);
	proto_request_clear(&rq);
	j = json_loadb(out, n, 0, NULL);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(json_string_value(json_object_get(j, "error")), "unknown_op");
	ck_assert_int_eq(json_integer_value(json_object_get(j, "id")), 1);
	json_decref(j);
	free(out);

	e = proto_decode(bad_json, strlen(bad_json), &rq, msg, sizeof(msg));
	ck_assert_int_eq(e, ADMIT_E_BAD_REQUEST);
	out = preply_finish(preply_error(rq.id, e, msg), &n);
	proto_request_clear(&rq);
	j = json_loadb(out, n, 0, NULL);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(json_string_value(json_object_get(j, "error")), "bad_request");
	json_decref(j);
	free(out);
}
END_TEST

/* Member names that need escaping (a client's key as an object's member)
 * take the general path; plain ones the one-copy path: both parse back. */
START_TEST(test_reply_member_names)
{
	struct preply *r = preply_new("7", true);
	json_t *j, *o;

	preply_push(r, "keys");
	preply_int(r, "plain.host:443", 1);
	preply_int(r, "say \"hi\"\\", 2);
	preply_int(r, "caf\xc3\xa9", 3);
	preply_int(r, "tab\there", 4);
	preply_int(r, "", 5);
	preply_pop(r);
	preply_list(r, "list");
	preply_item(r);
	preply_int(r, "x", 6);
	preply_pop(r);
	preply_pop(r);
	j = finish_parse(r);
	o = json_object_get(j, "keys");
	ck_assert_int_eq(json_integer_value(json_object_get(o, "plain.host:443")), 1);
	ck_assert_int_eq(json_integer_value(json_object_get(o, "say \"hi\"\\")), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(o, "caf\xc3\xa9")), 3);
	ck_assert_int_eq(json_integer_value(json_object_get(o, "tab\there")), 4);
	ck_assert_int_eq(json_integer_value(json_object_get(o, "")), 5);
	ck_assert_uint_eq(json_object_size(o), 5);
	o = json_array_get(json_object_get(j, "list"), 0);
	ck_assert_int_eq(json_integer_value(json_object_get(o, "x")), 6);
	json_decref(j);
}
END_TEST

/* The next reply takes the builder a finished or freed one handed back,
 * with nothing of the last reply in it (nesting, failure, bytes). */
START_TEST(test_reply_builder_reused_clean)
{
	struct preply *r = preply_new("1", true);
	uintptr_t was = (uintptr_t)r;
	size_t len = 0;
	char *line;
	json_t *j;

	ck_assert_ptr_nonnull(r);
	preply_push(r, "a");
	preply_list(r, "b");
	preply_free(r); /* left two levels deep */
	r = preply_new("2", false);
	ck_assert_uint_eq((uintptr_t)r, was);
	preply_int(r, "n", 5);
	line = preply_finish(r, &len);
	ck_assert_str_eq(line, "{\"ok\":false,\"id\":2,\"n\":5}\n");
	free(line);

	r = preply_new(NULL, true);
	ck_assert_uint_eq((uintptr_t)r, was);
	preply_item(r); /* not in an array: the builder fails */
	line = preply_finish(r, &len);
	ck_assert_ptr_nonnull(strstr(line, "out of memory"));
	free(line);

	r = preply_new("3", true);
	ck_assert_uint_eq((uintptr_t)r, was);
	preply_str(r, "s", "x");
	j = finish_parse(r);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "id")), 3);
	ck_assert_str_eq(json_string_value(json_object_get(j, "s")), "x");
	ck_assert_uint_eq(json_object_size(j), 3);
	json_decref(j);
}
END_TEST

static Suite *proto_reply_suite(void)
{
	Suite *s = suite_create("proto_reply");
	TCase *tc;

	tc = tcase_create("reply");
	tcase_add_test(tc, test_reply_fields);
	tcase_add_test(tc, test_reply_int_digits);
	tcase_add_test(tc, test_reply_deep);
	tcase_add_test(tc, test_reply_id_roundtrip);
	tcase_add_test(tc, test_reply_error);
	tcase_add_test(tc, test_reply_bytes);
	tcase_add_test(tc, test_reply_failed);
	tcase_add_test(tc, test_reply_invalid_utf8);
	tcase_add_test(tc, test_reply_builder_reused_clean);
	tcase_add_test(tc, test_reply_member_names);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int nfail;

	sr = srunner_create(proto_reply_suite());
	srunner_run_all(sr, CK_ENV);
	nfail = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nfail == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
