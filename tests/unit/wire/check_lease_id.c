/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * check_lease_id.c - unit tests for lease handles: every target survives a
 * round trip (one and eight targets, classes and none, keys of every byte
 * but NUL, the longest fields), and malformed handles of every kind are
 * refused (nonce, separator, alphabet, version, truncation, field sizes).
 * The body a settlement record binds is the handle's text after the nonce,
 * and changes with every target's scope, class and key and the reservation.
 */

#include "lease_id.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char NONCE[] = "0123456789abcdef0123456789abcdef";

static void fill(struct lease_ref *r, size_t nt)
{
	size_t i;

	memset(r, 0, sizeof(*r));
	memcpy(r->nonce, NONCE, sizeof(r->nonce));
	r->nt = nt;
	for (i = 0; i < nt; i++) {
		snprintf(r->t[i].scope, sizeof(r->t[i].scope), "scope%zu", i);
		snprintf(r->t[i].cls, sizeof(r->t[i].cls), "%s", i % 2 ? "main" : "");
		snprintf(r->t[i].key, sizeof(r->t[i].key), "api-%zu.example.com:443/ü?x=%zu", i, i);
	}
	r->nreserve = nt % 3; /* none, one, two reservations */
	for (i = 0; i < r->nreserve; i++) {
		snprintf(r->reserve[i].name, sizeof(r->reserve[i].name), "meter%zu", i);
		r->reserve[i].n = (int64_t)(i * 1000 + nt);
	}
}

static void same(const struct lease_ref *a, const struct lease_ref *b)
{
	size_t i;

	ck_assert_str_eq(a->nonce, b->nonce);
	ck_assert_uint_eq(a->nt, b->nt);
	for (i = 0; i < a->nt; i++) {
		ck_assert_str_eq(a->t[i].scope, b->t[i].scope);
		ck_assert_str_eq(a->t[i].cls, b->t[i].cls);
		ck_assert_str_eq(a->t[i].key, b->t[i].key);
	}
	ck_assert_uint_eq(a->nreserve, b->nreserve);
	for (i = 0; i < a->nreserve; i++) {
		ck_assert_str_eq(a->reserve[i].name, b->reserve[i].name);
		ck_assert_int_eq(a->reserve[i].n, b->reserve[i].n);
	}
}

START_TEST(test_round_trip)
{
	struct lease_ref in, out;
	size_t nt = (size_t)_i + 1;
	char *h;

	fill(&in, nt);
	h = lease_id_format(&in);
	ck_assert_ptr_nonnull(h);
	ck_assert_int_eq(strncmp(h, NONCE, 32), 0);
	ck_assert_int_eq(h[32], '.');
	/* shell- and URL-safe: base64url, no padding */
	ck_assert_uint_eq(strspn(h + 33, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123"
					 "456789-_"),
			  strlen(h + 33));
	ck_assert_msg(lease_id_parse(h, &out), "%s", h);
	same(&in, &out);
	free(h);
}
END_TEST

/* sp: ref's fields, by reference (rs holds the reservation's). */
static void spec_of(struct lease_spec *sp, struct meter_tokens *rs, const struct lease_ref *ref)
{
	size_t i;

	memset(sp, 0, sizeof(*sp));
	sp->nt = ref->nt;
	for (i = 0; i < ref->nt; i++) {
		sp->scope[i] = ref->t[i].scope;
		sp->cls[i] = ref->t[i].cls;
		sp->key[i] = ref->t[i].key;
	}
	for (i = 0; i < ref->nreserve; i++) {
		rs[i].name = ref->reserve[i].name;
		rs[i].n = ref->reserve[i].n;
	}
	sp->reserve = rs;
	sp->nreserve = ref->nreserve;
}

/* Row _i: edit target _i / 4's scope, class or key (or, for 3, the reservation). */
START_TEST(test_body_binds_every_field)
{
	struct lease_ref ref;
	struct lease_spec sp;
	struct meter_tokens rs[PROTO_MAX_TOKENS];
	size_t t = (size_t)_i / 4, f = (size_t)_i % 4;
	char *h, *body, *edited;

	fill(&ref, PROTO_MAX_TARGETS);
	ref.nreserve = 1;
	snprintf(ref.reserve[0].name, sizeof(ref.reserve[0].name), "output");
	ref.reserve[0].n = 2000;
	h = lease_id_format(&ref);
	spec_of(&sp, rs, &ref);
	body = lease_id_body(&sp);
	ck_assert_ptr_nonnull(h);
	ck_assert_ptr_nonnull(body);
	ck_assert_str_eq(body, h + 33);
	if (f == 0)
		sp.scope[t] = "other";
	else if (f == 1)
		sp.cls[t] = t % 2 ? "" : "b"; /* fill: odd targets are of class main */
	else if (f == 2)
		sp.key[t] = "k2";
	else
		rs[0].n = 2001;
	edited = lease_id_body(&sp);
	ck_assert_ptr_nonnull(edited);
	ck_assert_msg(strcmp(edited, body) != 0, "target %zu field %zu", t, f);
	free(edited);
	free(body);
	free(h);
}
END_TEST

START_TEST(test_every_byte_and_longest_fields)
{
	struct lease_ref in, out;
	size_t i;
	char *h;

	fill(&in, PROTO_MAX_TARGETS);
	for (i = 0; i < PROTO_MAX_TARGETS; i++) {
		memset(in.t[i].scope, 's', PROTO_NAME_MAX);
		memset(in.t[i].cls, 'c', PROTO_NAME_MAX);
		memset(in.t[i].key, 'k', PROTO_KEY_MAX);
		in.t[i].scope[PROTO_NAME_MAX] = in.t[i].cls[PROTO_NAME_MAX] = '\0';
		in.t[i].key[PROTO_KEY_MAX] = '\0';
	}
	for (i = 1; i < 256; i++) /* every byte but NUL */
		in.t[0].key[i - 1] = (char)i;
	in.nreserve = PROTO_MAX_TOKENS;
	for (i = 0; i < PROTO_MAX_TOKENS; i++) {
		memset(in.reserve[i].name, 'n', PROTO_NAME_MAX);
		in.reserve[i].name[PROTO_NAME_MAX] = '\0';
		in.reserve[i].n = PROTO_MAX_COST;
	}
	h = lease_id_format(&in);
	ck_assert_ptr_nonnull(h);
	ck_assert_uint_le(strlen(h), LEASE_ID_MAX);
	ck_assert_uint_le(strlen(h), PROTO_LEASE_MAX);
	ck_assert(lease_id_parse(h, &out));
	same(&in, &out);
	free(h);
}
END_TEST

START_TEST(test_format_refuses)
{
	struct lease_ref r;

	fill(&r, 1);
	r.nonce[0] = 'G';
	ck_assert_ptr_null(lease_id_format(&r));
	fill(&r, 1);
	r.nt = 0;
	ck_assert_ptr_null(lease_id_format(&r));
	fill(&r, 1);
	r.nt = PROTO_MAX_TARGETS + 1;
	ck_assert_ptr_null(lease_id_format(&r));
}
END_TEST

static const char *const bad[] = {
	"", "no-such-lease", "0123456789abcdef0123456789abcdef", /* a bare nonce */
	"0123456789abcdef0123456789abcdef.",			 /* no payload */
	"0123456789abcdef0123456789abcdef.AWEAAGsA",   /* good: the cases below break one thing */
	"0123456789ABCDEF0123456789abcdef.AWEAAGsA",   /* upper-case nonce */
	"0123456789abcdef0123456789abcde.AWEAAGsA",    /* short nonce */
	"0123456789abcdef0123456789abcdefxAWEAAGsA",   /* no dot */
	"0123456789abcdef0123456789abcdef.AWEA+GsA",   /* not base64url */
	"0123456789abcdef0123456789abcdef.AWEAAGsA==", /* padding */
	"0123456789abcdef0123456789abcdef.A",	       /* a lone sextet */
	"0123456789abcdef0123456789abcdef.AnNjAAA",    /* version 2 */
	"0123456789abcdef0123456789abcdef.AXNjAA",     /* "sc\0" then "\0": no key */
	"0123456789abcdef0123456789abcdef.AQAAAA",     /* an empty scope */
	/* canonical only: "llm", "m" is ...AWxsbQAAbQA; a set padding bit is not it */
	"0123456789abcdef0123456789abcdef.AWxsbQAAbQB",
	"0123456789abcdef0123456789abcdef.AXMAAGsAAG91dAAwMDcA", /* a count with a leading zero */
};

START_TEST(test_parse_refuses)
{
	struct lease_ref r;

	if (_i == 4) { /* the good one */
		ck_assert(lease_id_parse(bad[_i], &r));
		ck_assert_str_eq(r.t[0].scope, "a");
		ck_assert_str_eq(r.t[0].key, "k");
		return;
	}
	ck_assert_msg(!lease_id_parse(bad[_i], &r), "accepted: %s", bad[_i]);
}
END_TEST

/* A test-side base64url encoder, to build handles the formatter refuses to. */
static char *b64url(const unsigned char *raw, size_t n)
{
	static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	char *out = malloc(33 + (n + 2) / 3 * 4 + 1);
	size_t i, o = 33;

	ck_assert_ptr_nonnull(out);
	memcpy(out, NONCE, 32);
	out[32] = '.';
	for (i = 0; i < n; i += 3) {
		unsigned v = (unsigned)raw[i] << 16 | (i + 1 < n ? (unsigned)raw[i + 1] << 8 : 0) |
			     (i + 2 < n ? raw[i + 2] : 0);
		out[o++] = al[(v >> 18) & 63];
		out[o++] = al[(v >> 12) & 63];
		if (i + 1 < n)
			out[o++] = al[(v >> 6) & 63];
		if (i + 2 < n)
			out[o++] = al[v & 63];
	}
	out[o] = '\0';
	return out;
}

START_TEST(test_parse_target_count)
{
	/* version 1, then n targets "a" / "" / "k" */
	unsigned char raw[1 + 5 * (PROTO_MAX_TARGETS + 1)];
	struct lease_ref r;
	size_t n = 1, i;
	char *h;

	raw[0] = 1;
	for (i = 0; i < PROTO_MAX_TARGETS + 1; i++) {
		memcpy(raw + n, "a\0\0k\0", 5);
		n += 5;
		h = b64url(raw, n);
		if (i < PROTO_MAX_TARGETS) {
			ck_assert_msg(lease_id_parse(h, &r), "%zu targets: %s", i + 1, h);
			ck_assert_uint_eq(r.nt, i + 1);
			ck_assert_str_eq(r.t[i].key, "k");
			ck_assert_str_eq(r.t[i].cls, "");
		} else {
			ck_assert_msg(!lease_id_parse(h, &r), "%zu targets accepted", i + 1);
		}
		free(h);
	}
	/* a key one byte over the limit */
	{
		static unsigned char big[1 + 2 + 2 + PROTO_KEY_MAX + 2];
		size_t m = 0;
		big[m++] = 1;
		memcpy(big + m, "a\0\0", 3);
		m += 3;
		memset(big + m, 'k', PROTO_KEY_MAX + 1);
		m += PROTO_KEY_MAX + 1;
		big[m++] = 0;
		h = b64url(big, m);
		ck_assert(!lease_id_parse(h, &r));
		free(h);
	}
}
END_TEST

/* Every byte value at every place of a nonce: only 0-9 and a-f pass (the
 * check takes eight bytes at a time). */
START_TEST(test_nonce_every_byte)
{
	char s[LEASE_NONCE_LEN + 1];
	size_t at;
	unsigned b;

	memset(s, '7', LEASE_NONCE_LEN);
	s[LEASE_NONCE_LEN] = '\0';
	ck_assert(lease_id_nonce_ok(s, LEASE_NONCE_LEN));
	ck_assert(!lease_id_nonce_ok(s, LEASE_NONCE_LEN - 1));
	for (at = 0; at < LEASE_NONCE_LEN; at++) {
		for (b = 0; b < 256; b++) {
			bool hex = (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f');

			s[at] = (char)b;
			ck_assert_msg(lease_id_nonce_ok(s, LEASE_NONCE_LEN) == hex,
				      "byte 0x%02x at %zu", b, at);
		}
		s[at] = at % 2 ? 'f' : '0';
	}
	ck_assert(lease_id_nonce_ok(s, LEASE_NONCE_LEN));
}
END_TEST

static Suite *lease_id_suite(void)
{
	Suite *s = suite_create("lease_id");
	TCase *tc = tcase_create("handles");

	tcase_add_loop_test(tc, test_round_trip, 0, PROTO_MAX_TARGETS);
	tcase_add_test(tc, test_every_byte_and_longest_fields);
	tcase_add_loop_test(tc, test_body_binds_every_field, 0, 4 * PROTO_MAX_TARGETS);
	tcase_add_test(tc, test_format_refuses);
	tcase_add_loop_test(tc, test_parse_refuses, 0, (int)(sizeof(bad) / sizeof(bad[0])));
	tcase_add_test(tc, test_parse_target_count);
	tcase_add_test(tc, test_nonce_every_byte);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(lease_id_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
