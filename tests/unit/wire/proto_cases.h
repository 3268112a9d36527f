/*
 * proto_cases.h - the decode error table of the codec's tests: one line per
 * case (every op, every field's type and range errors, malformed JSON, the
 * bounds), the error it must get and a substring of its message, and
 * dcase_line, which builds a case's line. Shared by check_proto_decode.c
 * (each case decoded) and check_proto_fast.c (each case decoded both ways);
 * included by exactly one file of each test binary.
 */

#ifndef ADMITD_TEST_PROTO_CASES_H
#define ADMITD_TEST_PROTO_CASES_H

#include "proto.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* ---- decode: the error table ---- */

struct dcase {
	const char *line; /* "%s" is replaced by `pad` 'x' characters */
	size_t pad;
	enum admit_err err;
	const char *msg; /* a substring the message must contain; NULL when ok */
};

#define T8                                                                         \
	"{\"scope\":\"s\"},{\"scope\":\"s\"},{\"scope\":\"s\"},{\"scope\":\"s\"}," \
	"{\"scope\":\"s\"},{\"scope\":\"s\"},{\"scope\":\"s\"},{\"scope\":\"s\"}"
#define K8  "\"a\":1,\"b\":1,\"c\":1,\"d\":1,\"e\":1,\"f\":1,\"g\":1,\"h\":1"
#define K16 K8 ",\"i\":1,\"j\":1,\"k\":1,\"l\":1,\"m\":1,\"n\":1,\"o\":1,\"p\":1"

static const struct dcase dcases[] = {
	/* every op, minimal */
	{ "{\"op\":\"ping\"}", 0, ADMIT_OK, NULL },
	{ "{\"op\":\"status\"}", 0, ADMIT_OK, NULL },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"key\":\"k\"}", 0, ADMIT_OK, NULL },
	{ "{\"op\":\"acquire\",\"scope\":\"s\"}", 0, ADMIT_OK, NULL }, /* default key: ops.c */
	{ "{\"op\":\"release\",\"lease\":\"L\"}", 0, ADMIT_OK, NULL },
	{ "{\"op\":\"penalize\",\"scope\":\"s\",\"retry_after_ms\":0}", 0, ADMIT_OK, NULL },
	/* not a request object */
	{ "", 0, ADMIT_E_BAD_REQUEST, "invalid JSON" },
	{ "hello", 0, ADMIT_E_BAD_REQUEST, "invalid JSON" },
	{ "{\"op\":\"ping\"", 0, ADMIT_E_BAD_REQUEST, "invalid JSON" },
	{ "{\"op\":\"ping\"} x", 0, ADMIT_E_BAD_REQUEST, "invalid JSON" },
	{ "{\"op\":\"ping\"}{\"op\":\"ping\"}", 0, ADMIT_E_BAD_REQUEST, "invalid JSON" },
	{ "{\"op\":\"ping\",\"op\":\"status\"}", 0, ADMIT_E_BAD_REQUEST, "duplicate" },
	{ "{\"op\":\"ping\",\"x\":{\"a\":1,\"a\":2}}", 0, ADMIT_E_BAD_REQUEST, "duplicate" },
	{ "[1,2]", 0, ADMIT_E_BAD_REQUEST, "JSON object" },
	{ "[]", 0, ADMIT_E_BAD_REQUEST, "JSON object" },
	{ "\"ping\"", 0, ADMIT_E_BAD_REQUEST, "invalid JSON" },
	{ "42", 0, ADMIT_E_BAD_REQUEST, "invalid JSON" },
	{ "null", 0, ADMIT_E_BAD_REQUEST, "invalid JSON" },
	{ "{\"op\":\"acquire\",\"scope\":\"a\\u0000b\"}", 0, ADMIT_E_BAD_REQUEST, "invalid JSON" },
	/* op */
	{ "{}", 0, ADMIT_E_BAD_REQUEST, "\"op\"" },
	{ "{\"op\":5}", 0, ADMIT_E_BAD_REQUEST, "\"op\"" },
	{ "{\"op\":null}", 0, ADMIT_E_BAD_REQUEST, "\"op\"" },
	{ "{\"op\":[\"ping\"]}", 0, ADMIT_E_BAD_REQUEST, "\"op\"" },
	{ "{\"op\":\"frobnicate\"}", 0, ADMIT_E_UNKNOWN_OP, "frobnicate" },
	{ "{\"op\":\"PING\"}", 0, ADMIT_E_UNKNOWN_OP, "PING" },
	{ "{\"op\":\"\"}", 0, ADMIT_E_UNKNOWN_OP, "unknown op" },
	/* unknown fields are ignored, whatever their type */
	{ "{\"op\":\"ping\",\"future\":{\"x\":[1,2]},\"v\":9,\"z\":null}", 0, ADMIT_OK, NULL },
	{ "{\"op\":\"release\",\"lease\":\"L\",\"scope\":5}", 0, ADMIT_OK, NULL },
	/* acquire: scope, key, url, class */
	{ "{\"op\":\"acquire\",\"key\":\"k\"}", 0, ADMIT_E_BAD_REQUEST, "\"scope\" is required" },
	{ "{\"op\":\"acquire\",\"scope\":null}", 0, ADMIT_E_BAD_REQUEST, "\"scope\" is required" },
	{ "{\"op\":\"acquire\",\"scope\":1}", 0, ADMIT_E_BAD_REQUEST,
	  "\"scope\" must be a string" },
	{ "{\"op\":\"acquire\",\"scope\":\"\"}", 0, ADMIT_E_BAD_REQUEST, "\"scope\" must not be" },
	{ "{\"op\":\"acquire\",\"scope\":\"%s\"}", 64, ADMIT_OK, NULL },
	{ "{\"op\":\"acquire\",\"scope\":\"%s\"}", 65, ADMIT_E_BAD_REQUEST, "\"scope\" longer" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"key\":true}", 0, ADMIT_E_BAD_REQUEST, "\"key\"" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"key\":\"\"}", 0, ADMIT_E_BAD_REQUEST, "\"key\"" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"key\":\"%s\"}", 512, ADMIT_OK, NULL },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"key\":\"%s\"}", 513, ADMIT_E_BAD_REQUEST,
	  "\"key\" longer" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"url\":5}", 0, ADMIT_E_BAD_REQUEST, "\"url\"" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"url\":\"nohost\"}", 0, ADMIT_E_BAD_REQUEST,
	  "\"url\" has no host" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"url\":\"http:///p\"}", 0, ADMIT_E_BAD_REQUEST,
	  "\"url\" has no host" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"url\":\"http://%s/\"}", 513, ADMIT_E_BAD_REQUEST,
	  "\"url\" has no host" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"url\":\"http://h/%s\"}", 3000, ADMIT_E_BAD_REQUEST,
	  "\"url\" longer" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"key\":\"k\",\"url\":\"http://h/\"}", 0,
	  ADMIT_E_BAD_REQUEST, "not both" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"class\":[]}", 0, ADMIT_E_BAD_REQUEST,
	  "\"class\"" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"class\":\"%s\"}", 65, ADMIT_E_BAD_REQUEST,
	  "\"class\" longer" },
	/* acquire: tenant */
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"tenant\":\"\"}", 0, ADMIT_E_BAD_REQUEST,
	  "\"tenant\" must not be empty" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"tenant\":\"%s\"}", 65, ADMIT_E_BAD_REQUEST,
	  "\"tenant\" longer" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"tenant\":\"%s\"}", 64, ADMIT_OK, NULL },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"tenant\":\"a b\"}", 0, ADMIT_E_BAD_REQUEST,
	  "\"tenant\" must be 1 to 64 of A-Z a-z 0-9 _ . -" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"tenant\":\"a/b\"}", 0, ADMIT_E_BAD_REQUEST,
	  "\"tenant\" must be 1 to" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"tenant\":7}", 0, ADMIT_E_BAD_REQUEST,
	  "\"tenant\" must be a string" },
	/* acquire: cost, timeout_ms, detach */
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"cost\":\"3\"}", 0, ADMIT_E_BAD_REQUEST,
	  "\"cost\" must be an integer" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"cost\":1.5}", 0, ADMIT_E_BAD_REQUEST,
	  "\"cost\" must be an integer" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"cost\":-1}", 0, ADMIT_E_BAD_REQUEST,
	  "\"cost\" must be between" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"cost\":1000000001}", 0, ADMIT_E_BAD_REQUEST,
	  "\"cost\" must be between" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"cost\":1000000000}", 0, ADMIT_OK, NULL },
	/* beyond int64, which jansson alone refuses whole: the field is named */
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"cost\":9223372036854775808}", 0,
	  ADMIT_E_BAD_REQUEST, "\"cost\" must be between 0 and 1000000000" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"cost\":-9223372036854775809}", 0,
	  ADMIT_E_BAD_REQUEST, "\"cost\" must be between 0 and 1000000000" },
	{ "{\"op\":\"acquire\",\"targets\":[{\"scope\":\"s\",\"x\":1e3},"
	  "{\"scope\":\"s\",\"cost\":123456789012345678901234567890}]}",
	  0, ADMIT_E_BAD_REQUEST, "\"cost\" must be between 0 and 1000000000" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"timeout_ms\":99999999999999999999}", 0,
	  ADMIT_E_BAD_REQUEST, "\"timeout_ms\" must be between 0 and 86400000 ms" },
	{ "{\"op\":\"release\",\"lease\":\"L\",\"tokens\":{\"out\":18446744073709551616}}", 0,
	  ADMIT_E_BAD_REQUEST, "token count \"out\" must be an integer 0..1000000000" },
	/* int64's own edges are integers: the range check words them */
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"cost\":9223372036854775807}", 0,
	  ADMIT_E_BAD_REQUEST, "\"cost\" must be between" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"cost\":-9223372036854775808}", 0,
	  ADMIT_E_BAD_REQUEST, "\"cost\" must be between" },
	/* an unknown field is ignored however large; a digit string in a string is text */
	{ "{\"op\":\"ping\",\"future\":[99999999999999999999]}", 0, ADMIT_OK, NULL },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"key\":\"99999999999999999999\",\"x\":1}", 0,
	  ADMIT_OK, NULL },
	/* a big real overflows in jansson whatever is done: still invalid JSON */
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"cost\":1e999}", 0, ADMIT_E_BAD_REQUEST,
	  "invalid JSON" },
	/* and a line broken elsewhere stays broken */
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"cost\":99999999999999999999", 0,
	  ADMIT_E_BAD_REQUEST, "invalid JSON" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"cost\":0}", 0, ADMIT_OK, NULL },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"timeout_ms\":\"100\"}", 0, ADMIT_E_BAD_REQUEST,
	  "\"timeout_ms\" must be an integer" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"timeout_ms\":-5}", 0, ADMIT_E_BAD_REQUEST,
	  "\"timeout_ms\" must be between" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"timeout_ms\":86400001}", 0, ADMIT_E_BAD_REQUEST,
	  "\"timeout_ms\" must be between 0 and 86400000 ms" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"timeout_ms\":86400000}", 0, ADMIT_OK, NULL },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"detach\":\"yes\"}", 0, ADMIT_E_BAD_REQUEST,
	  "\"detach\"" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"detach\":1}", 0, ADMIT_E_BAD_REQUEST,
	  "\"detach\"" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"detach\":null}", 0, ADMIT_OK, NULL },
	/* acquire: "lease": false (nothing to release) */
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"lease\":false}", 0, ADMIT_OK, NULL },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"lease\":true}", 0, ADMIT_OK, NULL },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"lease\":null}", 0, ADMIT_OK, NULL },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"lease\":\"abc\"}", 0, ADMIT_E_BAD_REQUEST,
	  "\"lease\" in an acquire must be true or false" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"lease\":0}", 0, ADMIT_E_BAD_REQUEST,
	  "\"lease\" in an acquire must be true or false" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"lease\":false,\"detach\":true}", 0,
	  ADMIT_E_BAD_REQUEST, "cannot go with \"lease\": false" },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"lease\":true,\"detach\":true}", 0, ADMIT_OK,
	  NULL },
	{ "{\"op\":\"acquire\",\"scope\":\"s\",\"lease\":false,\"reserve\":{\"out\":5}}", 0,
	  ADMIT_E_BAD_REQUEST, "\"reserve\" needs a lease" },
	/* targets */
	{ "{\"op\":\"acquire\",\"targets\":[]}", 0, ADMIT_E_BAD_REQUEST, "\"targets\"" },
	{ "{\"op\":\"acquire\",\"targets\":{}}", 0, ADMIT_E_BAD_REQUEST, "\"targets\"" },
	{ "{\"op\":\"acquire\",\"targets\":\"s\"}", 0, ADMIT_E_BAD_REQUEST, "\"targets\"" },
	{ "{\"op\":\"acquire\",\"targets\":[" T8 "]}", 0, ADMIT_OK, NULL },
	{ "{\"op\":\"acquire\",\"targets\":[" T8 ",{\"scope\":\"s\"}]}", 0, ADMIT_E_BAD_REQUEST,
	  "at most 8 targets" },
	{ "{\"op\":\"acquire\",\"targets\":[1]}", 0, ADMIT_E_BAD_REQUEST, "each target" },
	{ "{\"op\":\"acquire\",\"targets\":[{\"scope\":\"s\"},null]}", 0, ADMIT_E_BAD_REQUEST,
	  "each target" },
	{ "{\"op\":\"acquire\",\"targets\":[{\"key\":\"k\"}]}", 0, ADMIT_E_BAD_REQUEST,
	  "\"scope\" is required" },
	{ "{\"op\":\"acquire\",\"targets\":[{\"scope\":\"s\"},{\"scope\":\"t\",\"cost\":\"x\"}]}",
	  0, ADMIT_E_BAD_REQUEST, "\"cost\"" },
	{ "{\"op\":\"penalize\",\"targets\":[],\"retry_after_ms\":1}", 0, ADMIT_E_BAD_REQUEST,
	  "\"targets\"" },
	/* release: lease, tokens */
	{ "{\"op\":\"release\"}", 0, ADMIT_E_BAD_REQUEST, "\"lease\" is required" },
	{ "{\"op\":\"release\",\"lease\":12}", 0, ADMIT_E_BAD_REQUEST, "\"lease\" must be" },
	{ "{\"op\":\"release\",\"lease\":\"\"}", 0, ADMIT_E_BAD_REQUEST, "\"lease\" must not" },
	{ "{\"op\":\"release\",\"lease\":\"%s\"}", PROTO_LEASE_MAX, ADMIT_OK, NULL },
	{ "{\"op\":\"release\",\"lease\":\"%s\"}", PROTO_LEASE_MAX + 1, ADMIT_E_BAD_REQUEST,
	  "\"lease\" longer" },
	{ "{\"op\":\"release\",\"lease\":\"L\",\"tokens\":5}", 0, ADMIT_E_BAD_REQUEST,
	  "\"tokens\"" },
	{ "{\"op\":\"release\",\"lease\":\"L\",\"tokens\":[1]}", 0, ADMIT_E_BAD_REQUEST,
	  "\"tokens\"" },
	{ "{\"op\":\"release\",\"lease\":\"L\",\"tokens\":{}}", 0, ADMIT_OK, NULL },
	{ "{\"op\":\"release\",\"lease\":\"L\",\"tokens\":null}", 0, ADMIT_OK, NULL },
	{ "{\"op\":\"release\",\"lease\":\"L\",\"tokens\":{\"in\":-1}}", 0, ADMIT_E_BAD_REQUEST,
	  "token count \"in\"" },
	{ "{\"op\":\"release\",\"lease\":\"L\",\"tokens\":{\"in\":\"1\"}}", 0, ADMIT_E_BAD_REQUEST,
	  "token count \"in\"" },
	{ "{\"op\":\"release\",\"lease\":\"L\",\"tokens\":{\"in\":1.5}}", 0, ADMIT_E_BAD_REQUEST,
	  "token count \"in\"" },
	{ "{\"op\":\"release\",\"lease\":\"L\",\"tokens\":{\"in\":1000000001}}", 0,
	  ADMIT_E_BAD_REQUEST, "token count \"in\"" },
	{ "{\"op\":\"release\",\"lease\":\"L\",\"tokens\":{\"in\":1000000000}}", 0, ADMIT_OK,
	  NULL },
	{ "{\"op\":\"release\",\"lease\":\"L\",\"tokens\":{" K16 "}}", 0, ADMIT_OK, NULL },
	{ "{\"op\":\"release\",\"lease\":\"L\",\"tokens\":{" K16 ",\"q\":1}}", 0,
	  ADMIT_E_BAD_REQUEST, "at most 16" },
	{ "{\"op\":\"release\",\"lease\":\"L\",\"tokens\":{\"\":1}}", 0, ADMIT_E_BAD_REQUEST,
	  "token meter name" },
	{ "{\"op\":\"release\",\"lease\":\"L\",\"tokens\":{\"%s\":1}}", 64, ADMIT_OK, NULL },
	{ "{\"op\":\"release\",\"lease\":\"L\",\"tokens\":{\"%s\":1}}", 65, ADMIT_E_BAD_REQUEST,
	  "token meter name" },
	/* penalize: retry_after_ms, retry_after */
	{ "{\"op\":\"penalize\",\"scope\":\"s\"}", 0, ADMIT_E_BAD_REQUEST,
	  "\"retry_after_ms\" or \"retry_after\"" },
	{ "{\"op\":\"penalize\",\"scope\":\"s\",\"retry_after\":null}", 0, ADMIT_E_BAD_REQUEST,
	  "\"retry_after_ms\" or \"retry_after\"" },
	{ "{\"op\":\"penalize\",\"retry_after_ms\":5}", 0, ADMIT_E_BAD_REQUEST,
	  "\"scope\" is required" },
	{ "{\"op\":\"penalize\",\"scope\":\"s\",\"retry_after_ms\":\"5\"}", 0, ADMIT_E_BAD_REQUEST,
	  "\"retry_after_ms\" must be an integer" },
	{ "{\"op\":\"penalize\",\"scope\":\"s\",\"retry_after_ms\":-1}", 0, ADMIT_E_BAD_REQUEST,
	  "\"retry_after_ms\" must be between" },
	{ "{\"op\":\"penalize\",\"scope\":\"s\",\"retry_after_ms\":86400001}", 0,
	  ADMIT_E_BAD_REQUEST, "\"retry_after_ms\" must be between 0 and 86400000 ms" },
	{ "{\"op\":\"penalize\",\"scope\":\"s\",\"retry_after\":\"soon\"}", 0, ADMIT_E_BAD_REQUEST,
	  "\"retry_after\" must be" },
	{ "{\"op\":\"penalize\",\"scope\":\"s\",\"retry_after\":-1}", 0, ADMIT_E_BAD_REQUEST,
	  "\"retry_after\" must be" },
	/* beyond 24h: capped, not refused (an upstream's header is taken as is) */
	{ "{\"op\":\"penalize\",\"scope\":\"s\",\"key\":\"k\",\"retry_after\":86401}", 0, ADMIT_OK,
	  NULL },
	{ "{\"op\":\"penalize\",\"scope\":\"s\",\"retry_after\":1.5}", 0, ADMIT_E_BAD_REQUEST,
	  "\"retry_after\" must be" },
	{ "{\"op\":\"penalize\",\"scope\":\"s\",\"retry_after\":true}", 0, ADMIT_E_BAD_REQUEST,
	  "\"retry_after\" must be" },
	{ "{\"op\":\"penalize\",\"scope\":\"s\",\"retry_after\":\"\"}", 0, ADMIT_E_BAD_REQUEST,
	  "\"retry_after\" must be" },
};

/* The line of a case, "%s" replaced by the padding. Caller frees. */
static char *dcase_line(const struct dcase *c, size_t *len)
{
	const char *hole = c->pad ? strstr(c->line, "%s") : NULL;
	size_t n = strlen(c->line);
	char *s;

	if (hole == NULL) {
		s = strdup(c->line);
		ck_assert_ptr_nonnull(s);
		*len = n;
		return s;
	}
	*len = n - 2 + c->pad;
	s = malloc(*len + 1);
	ck_assert_ptr_nonnull(s);
	memcpy(s, c->line, (size_t)(hole - c->line));
	memset(s + (hole - c->line), 'x', c->pad);
	strcpy(s + (hole - c->line) + c->pad, hole + 2);
	return s;
}

#endif
