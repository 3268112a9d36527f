/*
 * check_conf_files.c - unit tests of daemon/conf against the repository's
 * files: every example conf in conf/ loads, conf_dump_keys lists exactly the
 * keys docs/conf-keys.md documents, and conf_reload_keys reports which keys
 * a reload changes (and how).
 */

#include "conf.h"

#include "admit_proto.h"
#include "conf_test.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

START_TEST(test_example_confs)
{
	char path[512];
	struct conf *c;
	const struct conf_scope *s;
	const struct conf_class *cl;
	char *out = NULL;
	size_t len;
	FILE *f = open_memstream(&out, &len);

	snprintf(path, sizeof(path), "%s/conf/admitd.conf", srcdir());
	c = conf_load(path, f);
	fflush(f);
	ck_assert_msg(c != NULL, "%s", out);
	ck_assert_str_eq(c->path, path);
	ck_assert_str_eq(c->socket, "/tmp/admitd.sock");
	ck_assert_ptr_null(c->redis);
	ck_assert_uint_eq(c->nscopes, 5);

	s = conf_scope_find(c, "crawler");
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(s->min_delay_ms, 2000);
	ck_assert_int_eq(s->quota, 60);
	ck_assert_int_eq(s->quota_window_ms, 60000);
	ck_assert_double_eq_tol(s->jitter, 0.2, 1e-12);
	ck_assert_int_eq(s->max_concurrent, 4);

	s = conf_scope_find(c, "search");
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(s->cluster_concurrency, 4);
	ck_assert_int_eq(s->min_delay_ms, 500);
	ck_assert_int_eq(s->quota, 100);
	ck_assert_int_eq(s->lease_ttl_ms, 30000);

	s = conf_scope_find(c, "llm");
	ck_assert_ptr_nonnull(s);
	ck_assert_uint_eq(s->nrules, 3);
	ck_assert_str_eq(s->rules[0].text, "requests sliding-window 600/1m");
	ck_assert_str_eq(s->rules[1].text, "tokens token-bucket 100000/1m");
	ck_assert_str_eq(s->rules[2].text, "tokens.output fixed-window 40000/1m");

	s = conf_scope_find(c, "carapi");
	ck_assert_ptr_nonnull(s);
	ck_assert_str_eq(s->default_class, "main");
	cl = conf_class_find(s, "background");
	ck_assert_ptr_nonnull(cl);
	ck_assert_int_eq(cl->floor, 20);
	ck_assert_ptr_nonnull(conf_class_find(s, "priority"));
	ck_assert_ptr_nonnull(conf_class_find(s, "main"));

	s = conf_scope_find(c, "api");
	ck_assert_ptr_nonnull(s);
	ck_assert_uint_eq(s->nrules, 2);
	ck_assert_str_eq(s->rules[0].text, "requests token-bucket 10/1s");
	ck_assert_double_eq_tol(s->override_max, 10, 1e-12);
	conf_free(c);

	snprintf(path, sizeof(path), "%s/conf/minimal.conf", srcdir());
	c = conf_load(path, f);
	fclose(f);
	ck_assert_msg(c != NULL, "%s", out);
	ck_assert_uint_ge(c->nscopes, 1);
	ck_assert_str_eq(out, "");
	conf_free(c);
	free(out);
}
END_TEST

/* Every key is dumped, and docs/conf-keys.md holds the dump verbatim. */
START_TEST(test_dump_keys)
{
	static const char *const keys[] = {
		"socket",
		"socket_mode",
		"redis",
		"prefix",
		"max_line",
		"max_connections",
		"client_write_timeout",
		"redis_pool",
		"fallback_pods",
		"redis_timeout",
		"redis_password_file",
		"redis_user",
		"log_level",
		"watch_conf",
		"socket_group",
		"allow_uids",
		"allow_gids",
		"max_keys",
		"max_leases",
		"max_concurrent",
		"min_delay",
		"cluster_concurrency",
		"quota",
		"jitter",
		"rule",
		"class",
		"default_class",
		"timeout",
		"lease_ttl",
		"concurrency_retry",
		"fallback_divisor",
		"key",
		"shadow",
		"fail_mode",
		"max_waiters",
	};
	char *out = NULL, *doc, pat[64];
	size_t len;
	FILE *f = open_memstream(&out, &len);

	conf_dump_keys(f);
	fclose(f);
	for (size_t i = 0; i < N(keys); i++) {
		snprintf(pat, sizeof(pat), "| `%s", keys[i]);
		ck_assert_msg(strstr(out, pat) != NULL, "%s missing from the dump", keys[i]);
	}
	ck_assert_ptr_nonnull(strstr(out, "| `lease_ttl` | `60s` |"));
	ck_assert_ptr_nonnull(strstr(out, "| `max_line` | `64KiB` |"));
	ck_assert_ptr_nonnull(strstr(out, "| `class NAME` | (none) |"));
	doc = slurp("docs/conf-keys.md");
	ck_assert_msg(strstr(doc, out) != NULL,
		      "docs/conf-keys.md is out of date: paste `admitd --help-conf` into it");
	free(doc);
	free(out);
}
END_TEST

/* What conf_reload_keys reports, one "key:how" per line. */
static char reload_seen[512];

static void reload_seen_cb(void *arg, const char *key, enum conf_change how)
{
	static const char *const hows[] = { "live", "redis", "restart" };
	size_t n = strlen(reload_seen);

	(void)arg;
	snprintf(reload_seen + n, sizeof(reload_seen) - n, "%s:%s\n", key, hows[how]);
}

START_TEST(test_reload_keys)
{
	struct conf *old = load_scoped("[admitd]\nsocket = /run/a.sock\nredis = redis://h:1\n"
				       "max_connections = 10\nprefix = p1\n");
	struct conf *nw = load_scoped("[admitd]\nsocket = /run/b.sock\nredis = redis://h:2\n"
				      "max_connections = 20\nprefix = p1\nlog_level = debug\n"
				      "watch_conf = yes\n");

	ck_assert_ptr_nonnull(old);
	ck_assert_ptr_nonnull(nw);
	reload_seen[0] = '\0';
	ck_assert(conf_reload_keys(old, nw, reload_seen_cb, NULL));
	ck_assert_str_eq(reload_seen, "socket:restart\nredis:redis\nmax_connections:live\n"
				      "log_level:live\nwatch_conf:live\n");
	/* a key that needs a restart keeps the running value; the others are new */
	ck_assert_str_eq(nw->socket, "/run/a.sock");
	ck_assert_str_eq(nw->redis, "redis://h:2");
	ck_assert_int_eq(nw->max_connections, 20);
	/* nothing differs any more but what applies */
	reload_seen[0] = '\0';
	ck_assert(conf_reload_keys(nw, nw, reload_seen_cb, NULL));
	ck_assert_str_eq(reload_seen, "");
	conf_free(old);
	conf_free(nw);
}
END_TEST

static Suite *conf_files_suite(void)
{
	Suite *s = suite_create("conf_files");
	TCase *tc = tcase_create("conf");

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, test_example_confs);
	tcase_add_test(tc, test_dump_keys);
	tcase_add_test(tc, test_reload_keys);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(conf_files_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
