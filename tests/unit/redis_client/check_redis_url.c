/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * check_redis_url.c - unit tests for redis_url_parse: one table of good
 * URLs with every parsed field, one of bad URLs with the message each must
 * give, and a check that no error ever echoes the password.
 */

#include "redis_url.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct good_case {
	const char *url;
	enum redis_url_kind kind;
	const char *host;
	int port;
	const char *path;
	const char *user;
	const char *password;
	int db;
};

static const struct good_case good[] = {
	{ "redis://localhost", REDIS_URL_TCP, "localhost", 6379, "", "", "", 0 },
	{ "redis://127.0.0.1:6380", REDIS_URL_TCP, "127.0.0.1", 6380, "", "", "", 0 },
	{ "redis://h:1/", REDIS_URL_TCP, "h", 1, "", "", "", 0 },
	{ "redis://h:65535/15", REDIS_URL_TCP, "h", 65535, "", "", "", 15 },
	{ "redis://:secret@h/2", REDIS_URL_TCP, "h", 6379, "", "", "secret", 2 },
	{ "redis://alice:pw@redis.svc:7000/3", REDIS_URL_TCP, "redis.svc", 7000, "", "alice", "pw",
	  3 },
	{ "redis://alice@h", REDIS_URL_TCP, "h", 6379, "", "alice", "", 0 },
	{ "redis://u:p%40ss%3Aw%2F@h", REDIS_URL_TCP, "h", 6379, "", "u", "p@ss:w/", 0 },
	{ "redis://u:a:b@h", REDIS_URL_TCP, "h", 6379, "", "u", "a:b", 0 },
	{ "redis://u:p@ss@h", REDIS_URL_TCP, "h", 6379, "", "u", "p@ss", 0 },
	{ "redis://[::1]:6390/4", REDIS_URL_TCP, "::1", 6390, "", "", "", 4 },
	{ "redis://[fe80::1]", REDIS_URL_TCP, "fe80::1", 6379, "", "", "", 0 },
	{ "unix:///tmp/redis.sock", REDIS_URL_UNIX, "", 0, "/tmp/redis.sock", "", "", 0 },
	{ "unix:///run/r.sock?db=9", REDIS_URL_UNIX, "", 0, "/run/r.sock", "", "", 9 },
	{ "unix://:pw@/run/r.sock", REDIS_URL_UNIX, "", 0, "/run/r.sock", "", "pw", 0 },
	{ "unix://bob:pw@/r.sock?db=1", REDIS_URL_UNIX, "", 0, "/r.sock", "bob", "pw", 1 },
};

START_TEST(test_good)
{
	const struct good_case *g = &good[_i];
	struct redis_url u;
	char err[256] = "";

	ck_assert_msg(redis_url_parse(g->url, &u, err, sizeof(err)) == 0, "%s: %s", g->url, err);
	ck_assert_int_eq(u.kind, g->kind);
	ck_assert_str_eq(u.host, g->host);
	ck_assert_int_eq(u.port, g->port);
	ck_assert_str_eq(u.path, g->path);
	ck_assert_str_eq(u.user, g->user);
	ck_assert_str_eq(u.password, g->password);
	ck_assert_int_eq(u.db, g->db);
}
END_TEST

struct bad_case {
	const char *url;
	const char *msg; /* a substring the error must contain */
};

static const struct bad_case bad[] = {
	{ "", "empty" },
	{ "localhost:6379", "must start with redis://, rediss://, unix://" },
	{ "http://h", "unsupported scheme \"http\"" },
	{ "redis+sentnel://h/m", "unsupported scheme \"redis+sentnel\"" },
	{ "rediss://", "missing host" },
	{ "redis+sentinel://h1,h2", "empty master name" },
	{ "redis+sentinel://h1,h2/", "empty master name" },
	{ "redis+sentinel:///m", "no sentinel host" },
	{ "redis+sentinel://h1,,h2/m", "empty host in the sentinel host list" },
	{ "redis+sentinel://h1,/m", "empty host in the sentinel host list" },
	{ "redis+sentinel://h1:0/m", "port must be a number in 1..65535" },
	{ "redis+sentinel://h1/m?db=x", "db must be a number" },
	{ "redis+sentinel://h1/m?tls=2", "tls must be 0 or 1" },
	{ "redis+sentinel://h1/m?tls", "query wants key=value" },
	{ "redis+sentinel://h1/m?db=1&", "empty query after '&'" },
	{ "redis+sentinel://h1/a%2Fb", "bad master name" },
	{ "redis+cluster://", "no cluster seed node" },
	{ "redis+cluster://?tls=1", "no cluster seed node" },
	{ "redis+cluster://h1,h2/3", "a cluster has only db 0" },
	{ "redis+cluster://h1?db=1", "unknown query key \"db\" (want tls)" },
	{ "redis+cluster://h1:6379,h2:x", "port must be a number" },
	{ "redis+cluster://h1,::1", "IPv6 address must be written in [brackets]" },
	{ "redis+cluster://a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q", "more than 16 hosts" },
	{ "redis://", "missing host" },
	{ "redis://:6379", "missing host" },
	{ "redis://h:", "empty port" },
	{ "redis://h:0", "port must be a number in 1..65535" },
	{ "redis://h:65536", "port must be a number in 1..65535" },
	{ "redis://h:-1", "port must be a number" },
	{ "redis://h:12ab", "port must be a number" },
	{ "redis://h/x", "db must be a number" },
	{ "redis://h/1/2", "db must be a number" },
	{ "redis://h/-1", "db must be a number" },
	{ "redis://::1:6379", "IPv6 address must be written in [brackets]" },
	{ "redis://[::1", "missing ']'" },
	{ "redis://[::1]x", "expected ':port' after ']'" },
	{ "redis://[::1]:", "empty port" },
	{ "redis://[]:1", "missing host" },
	{ "redis://u:p%4@h", "bad password" },
	{ "redis://u:p%zz@h", "bad password" },
	{ "redis://u:p%00@h", "bad password" },
	{ "redis://u%@h", "bad user name" },
	{ "unix://", "missing socket path" },
	{ "unix:///", "missing socket path" },
	{ "unix://relative.sock", "absolute path" },
	{ "unix:///r.sock?db=x", "db must be a number" },
	{ "unix:///r.sock?db=", "db must be a number" },
	{ "unix:///r.sock?timeout=1", "only '?db=N'" },
};

/* The multi-host schemes and TLS: every host, the master name, the flags. */
START_TEST(test_topologies)
{
	struct redis_url u;
	char err[256] = "";

	ck_assert_msg(redis_url_parse("rediss://u:p@h:6390/2", &u, err, sizeof(err)) == 0, "%s",
		      err);
	ck_assert_int_eq(u.kind, REDIS_URL_TCP);
	ck_assert_int_eq(u.tls, 1);
	ck_assert_str_eq(u.host, "h");
	ck_assert_int_eq(u.port, 6390);
	ck_assert_int_eq(u.db, 2);
	ck_assert_uint_eq(u.nhosts, 1);

	ck_assert_int_eq(redis_url_parse("redis://h", &u, err, sizeof(err)), 0);
	ck_assert_int_eq(u.tls, 0);

	ck_assert_msg(
	    redis_url_parse("redis+sentinel://al:pw@s1:26380,s2,[::1]:26390/my%20m?db=3&tls=1", &u,
			    err, sizeof(err)) == 0,
	    "%s", err);
	ck_assert_int_eq(u.kind, REDIS_URL_SENTINEL);
	ck_assert_uint_eq(u.nhosts, 3);
	ck_assert_str_eq(u.hosts[0].host, "s1");
	ck_assert_int_eq(u.hosts[0].port, 26380);
	ck_assert_str_eq(u.hosts[1].host, "s2");
	ck_assert_int_eq(u.hosts[1].port, 26379); /* the sentinel default */
	ck_assert_str_eq(u.hosts[2].host, "::1");
	ck_assert_int_eq(u.hosts[2].port, 26390);
	ck_assert_str_eq(u.master, "my m");
	ck_assert_int_eq(u.db, 3);
	ck_assert_int_eq(u.tls, 1);
	ck_assert_str_eq(u.user, "al");
	ck_assert_str_eq(u.password, "pw");

	ck_assert_msg(redis_url_parse("redis+cluster://c1:7000,c2:7001,c3", &u, err, sizeof(err)) ==
			  0,
		      "%s", err);
	ck_assert_int_eq(u.kind, REDIS_URL_CLUSTER);
	ck_assert_uint_eq(u.nhosts, 3);
	ck_assert_str_eq(u.hosts[1].host, "c2");
	ck_assert_int_eq(u.hosts[1].port, 7001);
	ck_assert_int_eq(u.hosts[2].port, 6379);
	ck_assert_int_eq(u.tls, 0);
	ck_assert_int_eq(u.db, 0);

	ck_assert_msg(redis_url_parse("redis+cluster://:pw@c1/?tls=1", &u, err, sizeof(err)) == 0,
		      "%s", err);
	ck_assert_uint_eq(u.nhosts, 1);
	ck_assert_int_eq(u.tls, 1);
	ck_assert_str_eq(u.password, "pw");
}
END_TEST

START_TEST(test_bad)
{
	const struct bad_case *b = &bad[_i];
	struct redis_url u;
	char err[256] = "";

	ck_assert_msg(redis_url_parse(b->url, &u, err, sizeof(err)) == -1, "%s accepted", b->url);
	ck_assert_msg(strstr(err, b->msg) != NULL, "%s: got \"%s\", want \"%s\"", b->url, err,
		      b->msg);
	ck_assert_msg(strncmp(err, "redis url: ", 11) == 0, "prefix: %s", err);
}
END_TEST

START_TEST(test_long_fields)
{
	struct redis_url u;
	char err[256];
	char url[1024];
	char path[200];

	memset(path, 'a', sizeof(path) - 1);
	path[0] = '/';
	path[sizeof(path) - 1] = '\0';
	snprintf(url, sizeof(url), "unix://%s", path);
	ck_assert_int_eq(redis_url_parse(url, &u, err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "socket path longer than 107"));

	/* exactly the limit fits */
	path[REDIS_URL_PATH_MAX - 1] = '\0';
	snprintf(url, sizeof(url), "unix://%s", path);
	ck_assert_int_eq(redis_url_parse(url, &u, err, sizeof(err)), 0);
	ck_assert_uint_eq(strlen(u.path), REDIS_URL_PATH_MAX - 1);

	memset(url, 0, sizeof(url));
	memcpy(url, "redis://", 8);
	memset(url + 8, 'h', REDIS_URL_HOST_MAX);
	ck_assert_int_eq(redis_url_parse(url, &u, err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "host longer than"));
}
END_TEST

/* A bad URL that carries a password never has it in the message. */
START_TEST(test_no_secret_in_errors)
{
	static const char *const urls[] = {
		"redis://u:hunter2@h:99999",	  "redis://u:hunter2@",
		"redis://u:hunter2@h/db",	  "unix://u:hunter2@relative",
		"unix://:hunter2@/s?x=1",	  "u:hunter2@h://x",
		"redis://u:hunter2%@h",		  "redis+sentinel://u:hunter2@h1,h2",
		"redis+cluster://u:hunter2@h1/2",
	};
	struct redis_url u;
	char err[256];

	for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
		err[0] = '\0';
		ck_assert_int_eq(redis_url_parse(urls[i], &u, err, sizeof(err)), -1);
		ck_assert_msg(err[0] != '\0', "%s: no message", urls[i]);
		ck_assert_msg(strstr(err, "hunter2") == NULL, "%s leaks: %s", urls[i], err);
	}
}
END_TEST

/* Log lines show the URL with the password replaced, and nothing else changed. */
START_TEST(test_redact)
{
	static const char *const cases[][2] = {
		{ "redis://h:6379/2", "redis://h:6379/2" },
		{ "redis://u:hunter2@h:6379", "redis://u:***@h:6379" },
		{ "redis://:hunter2@h", "redis://:***@h" },
		{ "redis://alice@h", "redis://alice@h" },
		{ "redis://u:p@ss@h/1", "redis://u:***@h/1" },
		{ "unix://:hunter2@/run/r.sock?db=1", "unix://:***@/run/r.sock?db=1" },
		{ "redis+cluster://:hunter2@n1:7000,n2:7001?tls=1",
		  "redis+cluster://:***@n1:7000,n2:7001?tls=1" },
		{ "redis+sentinel://u:hunter2@s1,s2/m?db=2",
		  "redis+sentinel://u:***@s1,s2/m?db=2" },
		{ "rediss://h/0?x=a@b:c", "rediss://h/0?x=a@b:c" }, /* '@' after the authority */
		{ "", "" },
	};
	char out[128];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		redis_url_redact(cases[i][0], out, sizeof(out));
		ck_assert_str_eq(out, cases[i][1]);
	}
	redis_url_redact("redis://u:hunter2@h", out, 12); /* truncated, still no secret */
	ck_assert_str_eq(out, "redis://u:*");
	redis_url_redact(NULL, out, sizeof(out));
	ck_assert_str_eq(out, "");
}
END_TEST

/* A tiny error buffer truncates, never overflows; NULL is allowed. */
START_TEST(test_small_err_buffer)
{
	struct redis_url u;
	char err[8];

	memset(err, 'X', sizeof(err));
	ck_assert_int_eq(redis_url_parse("http://h", &u, err, sizeof(err)), -1);
	ck_assert_uint_eq(strlen(err), sizeof(err) - 1);
	ck_assert_int_eq(redis_url_parse("http://h", &u, NULL, 0), -1);
	ck_assert_int_eq(redis_url_parse(NULL, &u, err, sizeof(err)), -1);
}
END_TEST

static Suite *redis_url_suite(void)
{
	Suite *s = suite_create("redis_url");
	TCase *tc = tcase_create("parse");

	tcase_add_loop_test(tc, test_good, 0, (int)(sizeof(good) / sizeof(good[0])));
	tcase_add_loop_test(tc, test_bad, 0, (int)(sizeof(bad) / sizeof(bad[0])));
	tcase_add_test(tc, test_long_fields);
	tcase_add_test(tc, test_topologies);
	tcase_add_test(tc, test_redact);
	tcase_add_test(tc, test_no_secret_in_errors);
	tcase_add_test(tc, test_small_err_buffer);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(redis_url_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
