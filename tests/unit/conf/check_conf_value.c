/*
 * check_conf_value.c - unit tests for the pure value parsers of
 * daemon/conf/conf_value.c: durations, sizes, octal modes, numbers, booleans,
 * Q/W rates, rule lines and class lines, with their edge cases (overflow,
 * trailing garbage, signs, missing units).
 */

#include "conf_value.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* One row: input, expected value when ok, expected error when not (NULL = ok). */
struct int_vec {
	const char *in;
	int64_t want;
	const char *err;
};

static const struct int_vec dur_vecs[] = {
	{ "0", 0, NULL },
	{ "250ms", 250, NULL },
	{ "2s", 2000, NULL },
	{ "1m", 60000, NULL },
	{ "1h", 3600000, NULL },
	{ "0s", 0, NULL },
	{ "24h", 86400000, NULL },
	{ "8784h", 8784LL * 3600000, NULL },
	{ "8785h", 0, "duration too large" },
	{ "99999999999999999999s", 0, "number too large" },
	{ "30", 0, "a duration needs a unit (ms, s, m, h)" },
	{ "2d", 0, "unknown duration unit (ms, s, m, h)" },
	{ "2 s", 0, "unknown duration unit (ms, s, m, h)" },
	{ "2sx", 0, "unknown duration unit (ms, s, m, h)" },
	{ "2S", 0, "unknown duration unit (ms, s, m, h)" },
	{ "-1s", 0, "must not be negative" },
	{ "+1s", 0, "not a number" },
	{ " 1s", 0, "not a number" },
	{ "s", 0, "not a number" },
	{ "", 0, "empty value" },
	{ "1.5s", 0, "unknown duration unit (ms, s, m, h)" },
};

/* Run one row through an int64 parser: the value, or the exact error. */
static void check_int_row(const struct int_vec *v, const char *(*parse)(const char *, int64_t *))
{
	int64_t got = -7;
	const char *e = parse(v->in, &got);

	if (v->err == NULL) {
		ck_assert_msg(e == NULL, "%s: unexpected error %s", v->in, e);
		ck_assert_int_eq(got, v->want);
	} else {
		ck_assert_msg(e != NULL, "%s: accepted as %lld", v->in, (long long)got);
		ck_assert_str_eq(e, v->err);
		ck_assert_int_eq(got, -7); /* untouched on error */
	}
}

START_TEST(test_duration)
{
	check_int_row(&dur_vecs[_i], cv_duration);
}
END_TEST

static const struct int_vec size_vecs[] = {
	{ "65536", 65536, NULL },
	{ "64k", 65536, NULL },
	{ "64K", 65536, NULL },
	{ "64KiB", 65536, NULL },
	{ "1m", 1048576, NULL },
	{ "1M", 1048576, NULL },
	{ "2MiB", 2097152, NULL },
	{ "0", 0, NULL },
	{ "1048576MiB", 1LL << 40, NULL },
	{ "1048577MiB", 0, "size too large" },
	{ "64kb", 0, "unknown size unit (k, KiB, m, MiB)" },
	{ "64 KiB", 0, "unknown size unit (k, KiB, m, MiB)" },
	{ "64G", 0, "unknown size unit (k, KiB, m, MiB)" },
	{ "-1", 0, "must not be negative" },
	{ "k", 0, "not a number" },
	{ "", 0, "empty value" },
};

START_TEST(test_size)
{
	check_int_row(&size_vecs[_i], cv_size);
}
END_TEST

static const struct int_vec int_vecs[] = {
	{ "0", 0, NULL },
	{ "42", 42, NULL },
	{ "007", 7, NULL },
	{ "1000000000000000", 1000000000000000LL, NULL },
	{ "1000000000000001", 0, "number too large" },
	{ "99999999999999999999999", 0, "number too large" },
	{ "-5", 0, "must not be negative" },
	{ "+5", 0, "not a number" },
	{ "5x", 0, "trailing characters after the number" },
	{ "5 ", 0, "trailing characters after the number" },
	{ "0x10", 0, "trailing characters after the number" },
	{ "abc", 0, "not a number" },
	{ "", 0, "empty value" },
};

START_TEST(test_int)
{
	check_int_row(&int_vecs[_i], cv_int);
}
END_TEST

static const struct int_vec octal_vecs[] = {
	{ "0660", 0660, NULL },
	{ "660", 0660, NULL },
	{ "0", 0, NULL },
	{ "0777", 0777, NULL },
	{ "00000600", 0600, NULL },
	{ "1000", 0, "mode larger than 0777" },
	{ "0778", 0, "not an octal mode (like 0660)" },
	{ "0o660", 0, "not an octal mode (like 0660)" },
	{ "rw", 0, "not an octal mode (like 0660)" },
	{ "-660", 0, "not an octal mode (like 0660)" },
	{ "", 0, "empty value" },
};

/* cv_octal through the int64 row checker; it must not touch *mode on error. */
static const char *octal64(const char *s, int64_t *out)
{
	int mode = -7;
	const char *e = cv_octal(s, &mode);

	if (e == NULL)
		*out = mode;
	else
		ck_assert_int_eq(mode, -7);
	return e;
}

/* A percentage in millionths, exact: a whole or decimal 0..100, 4 decimals at most. */
static const struct int_vec pct_vecs[] = {
	{ "10", 100000, NULL },
	{ "0", 0, NULL },
	{ "100", 1000000, NULL },
	{ "12.5", 125000, NULL },
	{ "0.0001", 1, NULL },
	{ "99.9999", 999999, NULL },
	{ "007.50", 75000, NULL },
	{ "100.0000", 1000000, NULL },
	{ "100.0001", 0, "must be at most 100%" },
	{ "150", 0, "must be at most 100%" },
	{ "99999999999999999999", 0, "must be at most 100%" },
	{ "1.23456", 0, "at most 4 decimals" },
	{ "", 0, "empty value" },
	{ "1.", 0, "not a percentage" },
	{ ".5", 0, "not a percentage" },
	{ "-5", 0, "not a percentage" },
	{ "5x", 0, "not a percentage" },
	{ "5%", 0, "not a percentage" },
};

START_TEST(test_percent)
{
	check_int_row(&pct_vecs[_i], cv_percent_ppm);
}
END_TEST

START_TEST(test_octal)
{
	check_int_row(&octal_vecs[_i], octal64);
}
END_TEST

START_TEST(test_double)
{
	double d = -1;

	ck_assert_ptr_null(cv_double("0.2", &d));
	ck_assert_double_eq_tol(d, 0.2, 1e-12);
	ck_assert_ptr_null(cv_double("1", &d));
	ck_assert_double_eq(d, 1.0);
	ck_assert_ptr_null(cv_double(".5", &d));
	ck_assert_double_eq(d, 0.5);
	ck_assert_str_eq(cv_double("-0.1", &d), "must not be negative");
	ck_assert_str_eq(cv_double("nan", &d), "not a number");
	ck_assert_str_eq(cv_double("inf", &d), "not a number");
	ck_assert_str_eq(cv_double("1e3", &d), "not a decimal number");
	ck_assert_str_eq(cv_double("0x1", &d), "not a decimal number");
	ck_assert_str_eq(cv_double("1.2.3", &d), "not a decimal number");
	ck_assert_str_eq(cv_double(".", &d), "not a decimal number");
	ck_assert_str_eq(cv_double("0.5 ", &d), "not a decimal number");
	ck_assert_str_eq(cv_double("", &d), "empty value");
	ck_assert_double_eq(d, 0.5); /* untouched by the failures */
}
END_TEST

/* HOST:PORT of `metrics`: accepted forms split exactly, each mistake named. */
START_TEST(test_hostport)
{
	static const struct {
		const char *in, *host, *err;
		int port;
	} v[] = {
		{ "127.0.0.1:9464", "127.0.0.1", NULL, 9464 },
		{ "0.0.0.0:0", "0.0.0.0", NULL, 0 },
		{ "localhost:65535", "localhost", NULL, 65535 },
		{ "[::1]:9464", "::1", NULL, 9464 },
		{ "[::1]", NULL, "an IPv6 address goes in brackets: [::1]:9464", 0 },
		{ "::1:9464", NULL, "an IPv6 address goes in brackets: [::1]:9464", 0 },
		{ "[nope]:1", NULL, "not an IPv6 address in the brackets", 0 },
		{ "9464", NULL, "not HOST:PORT (e.g. 127.0.0.1:9464)", 0 },
		{ ":9464", NULL, "no host before the port (0.0.0.0 listens on every address)", 0 },
		{ "host:", NULL, "no port after the host", 0 },
		{ "host:http", NULL, "the port is not a number", 0 },
		{ "host:65536", NULL, "the port must be between 0 and 65535", 0 },
		{ "ho st:1", NULL, "not a host name or IPv4 address", 0 },
		{ "", NULL, "empty value", 0 },
	};
	for (size_t i = 0; i < N(v); i++) {
		char host[CV_HOST_MAX + 1] = "";
		int port = -1;
		const char *e = cv_hostport(v[i].in, host, sizeof(host), &port);
		if (v[i].err != NULL) {
			ck_assert_msg(e != NULL && strcmp(e, v[i].err) == 0, "%s: got %s", v[i].in,
				      e ? e : "(ok)");
			ck_assert_int_eq(port, -1);
		} else {
			ck_assert_msg(e == NULL, "%s: %s", v[i].in, e);
			ck_assert_str_eq(host, v[i].host);
			ck_assert_int_eq(port, v[i].port);
		}
	}
}
END_TEST

START_TEST(test_bool)
{
	static const char *const yes[] = { "yes", "YES", "true", "True", "on", "1" };
	static const char *const no[] = { "no", "No", "false", "FALSE", "off", "0" };
	bool b;

	for (size_t i = 0; i < N(yes); i++) {
		b = false;
		ck_assert_ptr_null(cv_bool(yes[i], &b));
		ck_assert_msg(b, "%s", yes[i]);
		b = true;
		ck_assert_ptr_null(cv_bool(no[i], &b));
		ck_assert_msg(!b, "%s", no[i]);
	}
	ck_assert_str_eq(cv_bool("y", &b), "not a boolean (yes/no, true/false, on/off, 1/0)");
	ck_assert_ptr_nonnull(cv_bool("2", &b));
	ck_assert_ptr_nonnull(cv_bool("", &b));
}
END_TEST

static const struct {
	const char *in;
	int64_t amount, window;
	const char *err;
} rate_vecs[] = {
	{ "60/1m", 60, 60000, NULL },
	{ "600/m", 600, 60000, NULL },
	{ "10/s", 10, 1000, NULL },
	{ "5/h", 5, 3600000, NULL },
	{ "1/ms", 1, 1, NULL },
	{ "100/250ms", 100, 250, NULL },
	{ "0/1s", 0, 1000, NULL }, /* ranges are the caller's */
	{ "60/0", 0, 0, "the window must be longer than 0" },
	{ "60/0s", 0, 0, "the window must be longer than 0" },
	{ "60/60", 0, 0, "a duration needs a unit (ms, s, m, h)" },
	{ "60/1d", 0, 0, "unknown duration unit (ms, s, m, h)" },
	{ "60", 0, 0, "expected AMOUNT/WINDOW (like 60/1m)" },
	{ "60 /1m", 0, 0, "expected AMOUNT/WINDOW (like 60/1m)" },
	{ "-1/1m", 0, 0, "must not be negative" },
	{ "60/-1m", 0, 0, "must not be negative" },
	{ "/1m", 0, 0, "not a number" },
	{ "60/", 0, 0, "empty value" },
	{ "60/1m/2", 0, 0, "unknown duration unit (ms, s, m, h)" },
	{ "99999999999999999/1m", 0, 0, "number too large" },
};

START_TEST(test_rate)
{
	int64_t a = -7, w = -7;
	const char *e = cv_rate(rate_vecs[_i].in, &a, &w);

	if (rate_vecs[_i].err == NULL) {
		ck_assert_msg(e == NULL, "%s: %s", rate_vecs[_i].in, e);
		ck_assert_int_eq(a, rate_vecs[_i].amount);
		ck_assert_int_eq(w, rate_vecs[_i].window);
	} else {
		ck_assert_msg(e != NULL, "%s: accepted", rate_vecs[_i].in);
		ck_assert_str_eq(e, rate_vecs[_i].err);
		ck_assert_int_eq(a, -7);
	}
}
END_TEST

START_TEST(test_name_and_normalise)
{
	char n64[65], *s;

	memset(n64, 'a', 64);
	n64[64] = '\0';
	ck_assert(cv_name_ok("api.example-com_2"));
	ck_assert(cv_name_ok(n64));
	ck_assert(!cv_name_ok(""));
	ck_assert(!cv_name_ok("a b"));
	ck_assert(!cv_name_ok("a/b"));
	ck_assert(!cv_name_ok("a:b"));
	n64[63] = 'b';
	ck_assert(cv_name_ok(n64));
	{
		char n65[66];

		memset(n65, 'a', 65);
		n65[65] = '\0';
		ck_assert(!cv_name_ok(n65));
	}
	s = cv_normalise("  requests \t sliding-window   600/1m  ");
	ck_assert_str_eq(s, "requests sliding-window 600/1m");
	free(s);
	s = cv_normalise(" \t ");
	ck_assert_str_eq(s, "");
	free(s);
}
END_TEST

/* Rule lines: the text, meter, key, kind, amount, window, burst; or an error. */
static const struct {
	const char *in;
	const char *text;
	enum conf_meter meter;
	const char *meter_key;
	int kind;
	int64_t amount, window, burst;
	const char *err;
} rule_vecs[] = {
	{ "requests 10/1s", "requests 10/1s", METER_REQUESTS, NULL, STRAT_TOKEN_BUCKET, 10, 1000, 0,
	  NULL },
	{ "  requests   sliding-window\t600/1m ", "requests sliding-window 600/1m", METER_REQUESTS,
	  NULL, STRAT_SLIDING_WINDOW, 600, 60000, 0, NULL },
	{ "requests fixed-window 5/h", "requests fixed-window 5/h", METER_REQUESTS, NULL,
	  STRAT_FIXED_WINDOW, 5, 3600000, 0, NULL },
	{ "requests leaky-bucket 20/1s burst=5", "requests leaky-bucket 20/1s burst=5",
	  METER_REQUESTS, NULL, STRAT_LEAKY_BUCKET, 20, 1000, 5, NULL },
	{ "requests session-window 100/10m", "requests session-window 100/10m", METER_REQUESTS,
	  NULL, STRAT_SESSION_WINDOW, 100, 600000, 0, NULL },
	{ "requests token-bucket 10/1s burst=10", "requests token-bucket 10/1s burst=10",
	  METER_REQUESTS, NULL, STRAT_TOKEN_BUCKET, 10, 1000, 10, NULL },
	{ "tokens token-bucket 100000/1m", "tokens token-bucket 100000/1m", METER_TOKENS, NULL,
	  STRAT_TOKEN_BUCKET, 100000, 60000, 0, NULL },
	{ "tokens.output fixed-window 40000/1m", "tokens.output fixed-window 40000/1m",
	  METER_TOKENS_KEY, "output", STRAT_FIXED_WINDOW, 40000, 60000, 0, NULL },
	{ "tokens 600/m burst=1000", "tokens 600/m burst=1000", METER_TOKENS, NULL,
	  STRAT_TOKEN_BUCKET, 600, 60000, 1000, NULL },
	{ "concurrency 8", "concurrency 8", METER_CONCURRENCY, NULL, 0, 8, 0, 0, NULL },
	{ "requests 1000000000/24h", "requests 1000000000/24h", METER_REQUESTS, NULL,
	  STRAT_TOKEN_BUCKET, 1000000000, 86400000, 0, NULL },
	{ "requests 1/1ms", "requests 1/1ms", METER_REQUESTS, NULL, STRAT_TOKEN_BUCKET, 1, 1, 0,
	  NULL },
	/* errors */
	{ "", NULL, 0, NULL, 0, 0, 0, 0, "empty rule (METER [STRATEGY] AMOUNT/WINDOW [burst=N])" },
	{ "bytes 10/1s", NULL, 0, NULL, 0, 0, 0, 0,
	  "unknown meter \"bytes\" (requests, tokens, tokens.NAME, concurrency)" },
	{ "tokens. 10/1s", NULL, 0, NULL, 0, 0, 0, 0,
	  "unknown meter \"tokens.\" (requests, tokens, tokens.NAME, concurrency)" },
	{ "requests gcra 10/1s", NULL, 0, NULL, 0, 0, 0, 0,
	  "unknown strategy \"gcra\" (token-bucket, sliding-window, fixed-window, "
	  "leaky-bucket, session-window)" },
	{ "requests token-bucket", NULL, 0, NULL, 0, 0, 0, 0, "missing AMOUNT/WINDOW" },
	{ "requests", NULL, 0, NULL, 0, 0, 0, 0, "missing AMOUNT/WINDOW" },
	{ "requests 0/1s", NULL, 0, NULL, 0, 0, 0, 0, "amount must be between 1 and 1000000000" },
	{ "requests 1000000001/1s", NULL, 0, NULL, 0, 0, 0, 0,
	  "amount must be between 1 and 1000000000" },
	{ "requests 10/25h", NULL, 0, NULL, 0, 0, 0, 0, "window must be at most 24h" },
	{ "requests 10/0s", NULL, 0, NULL, 0, 0, 0, 0,
	  "\"10/0s\": the window must be longer than 0" },
	{ "requests 10/10", NULL, 0, NULL, 0, 0, 0, 0,
	  "\"10/10\": a duration needs a unit (ms, s, m, h)" },
	{ "requests -10/1s", NULL, 0, NULL, 0, 0, 0, 0, "\"-10/1s\": must not be negative" },
	{ "requests sliding-window 10/1s burst=5", NULL, 0, NULL, 0, 0, 0, 0,
	  "burst= is only valid for token-bucket and leaky-bucket" },
	{ "requests 10/1s burst=0", NULL, 0, NULL, 0, 0, 0, 0,
	  "burst must be between 1 and 1000000000" },
	{ "requests 10/1s burst=x", NULL, 0, NULL, 0, 0, 0, 0, "burst \"x\": not a number" },
	{ "requests 10/1s burst=5 extra", NULL, 0, NULL, 0, 0, 0, 0, "unexpected \"extra\"" },
	{ "requests 10/1s 20/1m", NULL, 0, NULL, 0, 0, 0, 0, "unexpected \"20/1m\"" },
	{ "requests a b c d e f", NULL, 0, NULL, 0, 0, 0, 0, "too many words in rule" },
	{ "concurrency", NULL, 0, NULL, 0, 0, 0, 0, "expected \"concurrency N\"" },
	{ "concurrency 0", NULL, 0, NULL, 0, 0, 0, 0,
	  "concurrency must be between 1 and 1000000000" },
	{ "concurrency 4 burst=2", NULL, 0, NULL, 0, 0, 0, 0, "expected \"concurrency N\"" },
	{ "concurrency 4x", NULL, 0, NULL, 0, 0, 0, 0,
	  "concurrency \"4x\": trailing characters after the number" },
};

START_TEST(test_rule)
{
	struct conf_rule r = { .line = 77 };
	char err[256];
	const char *e = cv_rule(rule_vecs[_i].in, &r, err, sizeof(err));

	if (rule_vecs[_i].err != NULL) {
		ck_assert_msg(e != NULL, "%s: accepted", rule_vecs[_i].in);
		ck_assert_str_eq(e, rule_vecs[_i].err);
		ck_assert_ptr_null(r.text);
		ck_assert_ptr_null(r.meter_key);
		return;
	}
	ck_assert_msg(e == NULL, "%s: %s", rule_vecs[_i].in, e);
	ck_assert_str_eq(r.text, rule_vecs[_i].text);
	ck_assert_int_eq(r.meter, rule_vecs[_i].meter);
	if (rule_vecs[_i].meter_key)
		ck_assert_str_eq(r.meter_key, rule_vecs[_i].meter_key);
	else
		ck_assert_ptr_null(r.meter_key);
	if (r.meter != METER_CONCURRENCY) {
		ck_assert_int_eq(r.sp.kind, rule_vecs[_i].kind);
		ck_assert_int_eq(r.sp.window_ms, rule_vecs[_i].window);
	}
	ck_assert_int_eq(r.sp.amount, rule_vecs[_i].amount);
	ck_assert_int_eq(r.sp.burst, rule_vecs[_i].burst);
	ck_assert_int_eq(r.line, 77);
	ck_assert_ptr_null(r.name);
	free(r.text);
	free(r.meter_key);
}
END_TEST

START_TEST(test_class)
{
	struct cv_class c;
	char err[256];

	ck_assert_ptr_null(cv_class("prio  main floor=20", &c, err, sizeof(err)));
	ck_assert_uint_eq(c.nnames, 2);
	ck_assert_str_eq(c.names[0], "prio");
	ck_assert_str_eq(c.names[1], "main");
	ck_assert_int_eq(c.floor, 20);
	cv_class_clear(&c);
	ck_assert_ptr_null(c.names);

	ck_assert_ptr_null(cv_class("", &c, err, sizeof(err)));
	ck_assert_uint_eq(c.nnames, 0);
	ck_assert_int_eq(c.floor, 0);
	ck_assert_int_eq(c.priority, 0);
	cv_class_clear(&c);

	/* priority=N and floor= after the names, in either order */
	ck_assert_ptr_null(cv_class("main priority=-7 floor=3", &c, err, sizeof(err)));
	ck_assert_uint_eq(c.nnames, 1);
	ck_assert_int_eq(c.priority, -7);
	ck_assert_int_eq(c.floor, 3);
	cv_class_clear(&c);
	ck_assert_ptr_null(cv_class("main floor=10% priority=1000", &c, err, sizeof(err)));
	ck_assert_int_eq(c.priority, 1000);
	ck_assert_int_eq(c.floor_ppm, 100000);
	cv_class_clear(&c);
	ck_assert_str_eq(cv_class("main priority=1001", &c, err, sizeof(err)),
			 "priority \"1001\": out of range (want -1000..1000)");
	ck_assert_ptr_null(c.names);
	ck_assert_str_eq(
	    cv_class("priority=5x", &c, err, sizeof(err)),
	    "priority \"5x\": trailing characters after the number (want -1000..1000)");
	ck_assert_str_eq(cv_class("priority=3 main", &c, err, sizeof(err)),
			 "floor= and priority= must come after the rule names");
	ck_assert_ptr_null(c.names);

	ck_assert_ptr_null(cv_class("floor=0", &c, err, sizeof(err)));
	ck_assert_uint_eq(c.nnames, 0);
	cv_class_clear(&c);

	ck_assert_ptr_null(cv_class("a b floor=10%", &c, err, sizeof(err)));
	ck_assert_uint_eq(c.nnames, 2);
	ck_assert_int_eq(c.floor, 0);
	ck_assert_int_eq(c.floor_ppm, 100000);
	cv_class_clear(&c);
	ck_assert_int_eq(c.floor_ppm, 0);

	ck_assert_str_eq(cv_class("a floor=150%", &c, err, sizeof(err)),
			 "floor \"150%\": must be at most 100% (want floor=P%, 0 <= P < 100)");
	ck_assert_ptr_null(c.names);
	ck_assert_str_eq(cv_class("a floor=%", &c, err, sizeof(err)),
			 "floor \"%\": empty value (want floor=P%, 0 <= P < 100)");
	ck_assert_str_eq(cv_class("a floor=100%", &c, err, sizeof(err)),
			 "floor=100% leaves nothing of any rule (want below 100%)");
	ck_assert_str_eq(
	    cv_class("a floor=12345678901234567%", &c, err, sizeof(err)),
	    "floor \"12345678901234567%\": not a percentage (want floor=P%, 0 <= P < 100)");
	ck_assert_str_eq(cv_class("a floor=10% b", &c, err, sizeof(err)),
			 "floor= and priority= must come after the rule names");

	ck_assert_str_eq(cv_class("a floor=5 b", &c, err, sizeof(err)),
			 "floor= and priority= must come after the rule names");
	ck_assert_ptr_null(c.names);
	ck_assert_str_eq(cv_class("a a", &c, err, sizeof(err)), "rule \"a\" listed twice");
	ck_assert_ptr_null(c.names);
	ck_assert_str_eq(cv_class("a floor=-1", &c, err, sizeof(err)),
			 "floor \"-1\": must not be negative");
	ck_assert_str_eq(cv_class("a floor=1000000001", &c, err, sizeof(err)),
			 "floor must be at most 1000000000");
	ck_assert_str_eq(cv_class("a b/c", &c, err, sizeof(err)),
			 "bad rule name \"b/c\" (want [A-Za-z0-9_.-], 1..64)");
	ck_assert_ptr_null(c.names);
	ck_assert_uint_eq(c.nnames, 0);
}
END_TEST

static Suite *conf_value_suite(void)
{
	Suite *s = suite_create("conf_value");
	TCase *tc = tcase_create("parsers");

	tcase_add_loop_test(tc, test_duration, 0, N(dur_vecs));
	tcase_add_loop_test(tc, test_size, 0, N(size_vecs));
	tcase_add_loop_test(tc, test_int, 0, N(int_vecs));
	tcase_add_loop_test(tc, test_octal, 0, N(octal_vecs));
	tcase_add_loop_test(tc, test_percent, 0, N(pct_vecs));
	tcase_add_test(tc, test_double);
	tcase_add_test(tc, test_bool);
	tcase_add_test(tc, test_hostport);
	tcase_add_loop_test(tc, test_rate, 0, N(rate_vecs));
	tcase_add_test(tc, test_name_and_normalise);
	tcase_add_loop_test(tc, test_rule, 0, N(rule_vecs));
	tcase_add_test(tc, test_class);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(conf_value_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
