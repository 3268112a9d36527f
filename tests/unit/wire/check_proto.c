/*
 * check_proto.c - unit tests for daemon/wire/proto.c, the codec.
 *
 * Decoding is table-driven: every op, every field's type and range errors
 * (the message must name the field), malformed JSON (trailing garbage,
 * duplicate keys, non-object top level), targets and tokens bounds, and the
 * id echo kept as raw JSON even when the request fails. proto_url_host and
 * proto_parse_retry_after have their own tables. The reply builder is
 * checked by parsing its output back with jansson. Last, every "send" of
 * proto/vectors/NAME.jsonl is decoded and, where the codec alone can decide,
 * its error code compared with the vector's.
 */

#include "proto.h"

#include "adaptive.h"

#include <check.h>
#include <glob.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))

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
END_TEST

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

/* A release's outcome: the three values, and anything else refused. */
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
	char line[256];
	struct request rq;
	size_t i;

	for (i = 0; i < N(ids); i++) {
		json_t *want = json_loads(ids[i], JSON_DECODE_ANY, NULL), *j;

		ck_assert_ptr_nonnull(want);
		snprintf(line, sizeof(line), "{\"op\":\"ping\",\"id\":%s}", ids[i]);
		ck_assert_int_eq(dec(line, &rq), ADMIT_OK);
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

/* ---- proto/vectors replay ---- */

struct vsend {
	char *name;
	char *line; /* what is written on the socket, without '\n' */
	char *err;  /* expected error code, NULL when the vector expects ok */
	json_t *id; /* expected id echo, or NULL */
};

static struct vsend *vsends;
static size_t nvsends;
static size_t nvbad; /* lines that are not JSON, steps without "send" */

static const char *srcdir(void)
{
	const char *d = getenv("ADMITD_SRCDIR");

	return d ? d : ".";
}

static void vsend_add(const char *file, const char *name, json_t *send, json_t *expect)
{
	struct vsend *v, *nv;
	json_t *err = json_object_get(expect, "error");

	if (send == NULL) {
		nvbad++;
		return;
	}
	nv = realloc(vsends, (nvsends + 1) * sizeof(*nv));
	if (nv == NULL)
		abort();
	vsends = nv;
	v = &vsends[nvsends++];
	if (asprintf(&v->name, "%s: %s", file, name) < 0)
		abort();
	v->line = json_is_string(send) ? strdup(json_string_value(send))
				       : json_dumps(send, JSON_COMPACT | JSON_ENCODE_ANY);
	v->err = json_is_string(err) ? strdup(json_string_value(err)) : NULL;
	v->id = json_incref(json_object_get(expect, "id"));
	if (v->line == NULL)
		abort();
}

/* Every "send" of proto/vectors/NAME.jsonl, single or in "steps". */
static void vectors_load(void)
{
	char pat[512];
	glob_t g;
	size_t f;

	snprintf(pat, sizeof(pat), "%s/proto/vectors/*.jsonl", srcdir());
	if (glob(pat, 0, NULL, &g) != 0)
		return;
	for (f = 0; f < g.gl_pathc; f++) {
		FILE *fp = fopen(g.gl_pathv[f], "r");
		char *buf = NULL;
		size_t cap = 0;
		const char *base = strrchr(g.gl_pathv[f], '/') + 1;

		if (fp == NULL)
			continue;
		while (getline(&buf, &cap, fp) > 0) {
			json_t *v = json_loads(buf, 0, NULL), *steps;
			const char *name;
			size_t i;

			if (v == NULL) {
				nvbad++; /* test_vectors_present fails on it */
				continue;
			}
			name = json_string_value(json_object_get(v, "name"));
			name = name ? name : "?";
			steps = json_object_get(v, "steps");
			if (json_is_array(steps)) {
				for (i = 0; i < json_array_size(steps); i++) {
					json_t *st = json_array_get(steps, i);
					vsend_add(base, name, json_object_get(st, "send"),
						  json_object_get(st, "expect"));
				}
			} else if (json_object_get(v, "send") != NULL) {
				vsend_add(base, name, json_object_get(v, "send"),
					  json_object_get(v, "expect"));
			}
			json_decref(v);
		}
		free(buf);
		fclose(fp);
	}
	globfree(&g);
}

static void vectors_free(void)
{
	size_t i;

	for (i = 0; i < nvsends; i++) {
		free(vsends[i].name);
		free(vsends[i].line);
		free(vsends[i].err);
		json_decref(vsends[i].id);
	}
	free(vsends);
}

START_TEST(test_vectors_present)
{
	ck_assert_msg(nvsends >= 40, "only %zu sends read from %s/proto/vectors", nvsends,
		      srcdir());
	ck_assert_msg(nvbad == 0, "%zu vector lines or steps unreadable", nvbad);
}
END_TEST

/*
 * true when only ops.c can refuse the request: a target names no key (does
 * the scope have a default key?), tokens or a reservation are named (does
 * a rule of the scope meter them?), an override (does the scope take it,
 * and within its override_max?), or an acquire without a lease (does a
 * release book nothing in each target's scope?)
 */
static bool needs_conf(const struct request *rq)
{
	size_t i;

	if ((rq->op == OP_RELEASE && rq->ntokens > 0) ||
	    (rq->op == OP_ACQUIRE && (rq->nreserve > 0 || rq->no_lease)) || rq->op == OP_OVERRIDE)
		return true;
	if (rq->op != OP_ACQUIRE && rq->op != OP_PENALIZE)
		return false;
	for (i = 0; i < rq->ntargets; i++)
		if (!rq->targets[i].has_key)
			return true;
	return false;
}

START_TEST(test_vectors_replay)
{
	const struct vsend *v = &vsends[_i];
	struct request rq;
	char msg[256] = "";
	enum admit_err e = proto_decode(v->line, strlen(v->line), &rq, msg, sizeof(msg));
	int want = v->err ? admit_err_parse(v->err) : ADMIT_OK;

	ck_assert_msg(want >= 0, "%s: unknown error \"%s\"", v->name, v->err);
	if (want == ADMIT_E_LINE_TOO_LONG) {
		/* framing, decided by conn.c before the codec sees the line */
	} else if (want == ADMIT_E_BAD_REQUEST || want == ADMIT_E_UNKNOWN_OP) {
		if (e == ADMIT_OK)
			ck_assert_msg(want == ADMIT_E_BAD_REQUEST && needs_conf(&rq),
				      "%s: decoded, the vector wants %s", v->name, v->err);
		else
			ck_assert_msg((int)e == want, "%s: got %s (%s), want %s", v->name,
				      admit_err_str(e), msg, v->err);
	} else {
		/* ok, or refused by the limiter / ops: the codec must accept it */
		ck_assert_msg(e == ADMIT_OK, "%s: got %s (%s)", v->name, admit_err_str(e), msg);
	}
	/* an error reply echoes the id the vector expects (decided by the codec) */
	if (e != ADMIT_OK && v->id != NULL) {
		json_t *got = rq.id ? json_loads(rq.id, JSON_DECODE_ANY, NULL) : NULL;
		ck_assert_msg(json_equal(got, v->id), "%s: id %s", v->name,
			      rq.id ? rq.id : "(none)");
		json_decref(got);
	}
	proto_request_clear(&rq);
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

static Suite *proto_suite(void)
{
	Suite *s = suite_create("proto");
	TCase *tc;

	tc = tcase_create("decode");
	tcase_add_loop_test(tc, test_decode_table, 0, N(dcases));
	tcase_add_test(tc, test_release_outcome);
	tcase_add_loop_test(tc, test_fast_decoder_cases, 0, N(fcases));
	tcase_add_loop_test(tc, test_fast_decoder_table, 0, N(dcases));
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

	tc = tcase_create("reply");
	tcase_add_test(tc, test_reply_fields);
	tcase_add_test(tc, test_reply_deep);
	tcase_add_test(tc, test_reply_id_roundtrip);
	tcase_add_test(tc, test_reply_error);
	tcase_add_test(tc, test_reply_bytes);
	tcase_add_test(tc, test_reply_failed);
	tcase_add_test(tc, test_reply_invalid_utf8);
	suite_add_tcase(s, tc);

	tc = tcase_create("vectors");
	tcase_add_test(tc, test_vectors_present);
	if (nvsends > 0)
		tcase_add_loop_test(tc, test_vectors_replay, 0, (int)nvsends);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int nfail;

	vectors_load();
	sr = srunner_create(proto_suite());
	srunner_run_all(sr, CK_ENV);
	nfail = srunner_ntests_failed(sr);
	srunner_free(sr);
	vectors_free();
	return nfail == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
