/*
 * check_conf.c - unit tests for daemon/conf/conf.c: every key's default and
 * parse, every error message with its exact "file:line: message" text, all
 * errors of a file reported together, over-long lines, rule/class/default
 * class resolution, cluster_concurrency raising max_concurrent, the example
 * confs in conf/, and conf_dump_keys against docs/conf-keys.md.
 *
 * Confs are given as strings through conf_load_string (no temp files); the
 * error stream is captured with open_memstream.
 */

#include "conf.h"

#include "admit_proto.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))

static char *errtext;

/* Load text as "t.conf"; errtext gets everything written to errf. */
static struct conf *load(const char *text)
{
	size_t len = 0;
	FILE *f;
	struct conf *c;

	free(errtext);
	errtext = NULL;
	f = open_memstream(&errtext, &len);
	ck_assert_ptr_nonnull(f);
	c = conf_load_string(text, "t.conf", f);
	fclose(f);
	return c;
}

/*
 * text, then "[scope t]" when it has no scope: for the tests of [admitd]
 * keys, which a conf without a scope would fail for that alone
 * (test_no_scope). Appended after the text, so its line numbers hold.
 */
static struct conf *load_scoped(const char *text)
{
	char *buf;
	struct conf *c;

	if (strstr(text, "[scope") != NULL)
		return load(text);
	ck_assert_int_ge(asprintf(&buf, "%s[scope t]\n", text), 0);
	c = load(buf);
	free(buf);
	return c;
}

static void teardown(void)
{
	free(errtext);
	errtext = NULL;
}

/* The repository root, where conf/ and docs/ live (tests run from it). */
static const char *srcdir(void)
{
	const char *d = getenv("ADMITD_SRCDIR");

	return d ? d : ".";
}

/* A file any test can read: a redis_password_file that exists. */
static const char *readable_file(void)
{
	static char path[512];

	snprintf(path, sizeof(path), "%s/conf/minimal.conf", srcdir());
	return path;
}

static char *slurp(const char *rel)
{
	char path[512];
	FILE *f;
	char *buf = NULL;
	size_t cap = 0, n = 0;

	snprintf(path, sizeof(path), "%s/%s", srcdir(), rel);
	f = fopen(path, "r");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	for (;;) {
		if (n + 4096 + 1 > cap) {
			char *nb = realloc(buf, (n + 4096 + 1) * 2);

			ck_assert_ptr_nonnull(nb);
			buf = nb;
			cap = (n + 4096 + 1) * 2;
		}
		size_t r = fread(buf + n, 1, 4096, f);
		if (r == 0)
			break;
		n += r;
	}
	buf[n] = '\0';
	fclose(f);
	return buf;
}

START_TEST(test_admitd_defaults)
{
	struct conf *c = load_scoped("");

	ck_assert_msg(c != NULL, "%s", errtext);
	ck_assert_str_eq(errtext, "");
	ck_assert_str_eq(c->path, "t.conf");
	ck_assert_str_eq(c->socket, ADMIT_DEFAULT_SOCKET);
	ck_assert_str_eq(c->socket, "/run/admitd/admitd.sock");
	ck_assert_int_eq(c->socket_mode, 0660);
	ck_assert_ptr_null(c->redis);
	ck_assert_str_eq(c->prefix, "admitd");
	ck_assert_int_eq(c->max_line, 65536);
	ck_assert_int_eq(c->max_connections, 1024);
	ck_assert_int_eq(c->client_write_timeout_ms, 10000);
	ck_assert_int_eq(c->redis_pool, 2);
	ck_assert_int_eq(c->redis_timeout_ms, 250);
	ck_assert_ptr_null(c->redis_password_file);
	ck_assert_ptr_null(c->redis_user);
	ck_assert_str_eq(c->log_level, "info");
	ck_assert_int_eq(c->fallback_pods, 1);
	ck_assert(!c->watch_conf);
	ck_assert_int_eq(c->socket_group, -1);
	ck_assert_uint_eq(c->allow_uids.n, 0);
	ck_assert_uint_eq(c->allow_gids.n, 0);
	ck_assert_int_eq(c->max_keys, 100000);
	ck_assert_int_eq(c->max_leases, 100000);
	ck_assert_uint_eq(c->nscopes, 1);
	conf_free(c);
}
END_TEST

/* The TLS and Sentinel keys, with the URLs they go with; verify defaults to yes. */
START_TEST(test_redis_topology_keys)
{
	char text[1024];
	struct conf *c;

	snprintf(text, sizeof(text),
		 "[admitd]\n"
		 "redis = redis+sentinel://s1:26379,s2:26380/mymaster?db=2&tls=1\n"
		 "sentinel_password_file = %s\n"
		 "redis_tls_ca_file = /etc/admitd/ca.pem\n"
		 "redis_tls_cert_file = /etc/admitd/client.pem\n"
		 "redis_tls_key_file = /etc/admitd/client.key\n"
		 "redis_tls_server_name = redis.internal\n",
		 readable_file());
	c = load_scoped(text);
	ck_assert_msg(c != NULL, "%s", errtext);
	ck_assert_str_eq(c->sentinel_password_file, readable_file());
	ck_assert_str_eq(c->redis_tls_ca_file, "/etc/admitd/ca.pem");
	ck_assert_str_eq(c->redis_tls_cert_file, "/etc/admitd/client.pem");
	ck_assert_str_eq(c->redis_tls_key_file, "/etc/admitd/client.key");
	ck_assert_str_eq(c->redis_tls_server_name, "redis.internal");
	ck_assert(c->redis_tls_verify);
	conf_free(c);

	c = load_scoped("[admitd]\nredis = rediss://h:6380\nredis_tls_verify = no\n");
	ck_assert_msg(c != NULL, "%s", errtext);
	ck_assert(!c->redis_tls_verify);
	ck_assert_ptr_null(c->redis_tls_ca_file);
	conf_free(c);

	c = load_scoped("[admitd]\nredis = redis+cluster://n1:7000,n2:7001,n3:7002\n");
	ck_assert_msg(c != NULL, "%s", errtext);
	ck_assert_str_eq(c->redis, "redis+cluster://n1:7000,n2:7001,n3:7002");
	conf_free(c);
}
END_TEST

/* Users and groups: numbers as they are, names looked up (root is 0 everywhere). */
START_TEST(test_access_and_bounds_keys)
{
	struct conf *c = load_scoped("[admitd]\n"
				     "allow_uids = root 4321  7\n"
				     "allow_gids = 0 99\n"
				     "socket_group = root\n"
				     "max_keys = 5\n"
				     "max_leases = 1\n");

	ck_assert_msg(c != NULL, "%s", errtext);
	ck_assert_uint_eq(c->allow_uids.n, 3);
	ck_assert_uint_eq(c->allow_uids.ids[0], 0);
	ck_assert_uint_eq(c->allow_uids.ids[1], 4321);
	ck_assert_uint_eq(c->allow_uids.ids[2], 7);
	ck_assert_uint_eq(c->allow_gids.n, 2);
	ck_assert_uint_eq(c->allow_gids.ids[0], 0);
	ck_assert_uint_eq(c->allow_gids.ids[1], 99);
	ck_assert_int_eq(c->socket_group, 0);
	ck_assert_int_eq(c->max_keys, 5);
	ck_assert_int_eq(c->max_leases, 1);
	conf_free(c);
}
END_TEST

START_TEST(test_admitd_keys)
{
	char text[1024];
	struct conf *c;

	snprintf(text, sizeof(text),
		 "[admitd]\n"
		 "socket = /tmp/x/admitd.sock\n"
		 "socket_mode = 0600\n"
		 "redis = redis://127.0.0.1:6380/2\n"
		 "prefix = rl.prod\n"
		 "max_line = 1MiB\n"
		 "max_connections = 50\n"
		 "client_write_timeout = 250ms\n"
		 "redis_pool = 4\n"
		 "redis_timeout = 2s\n"
		 "redis_password_file = %s\n"
		 "redis_user = admitd\n"
		 "log_level = debug\n",
		 readable_file());
	c = load_scoped(text);
	ck_assert_msg(c != NULL, "%s", errtext);
	ck_assert_str_eq(c->socket, "/tmp/x/admitd.sock");
	ck_assert_int_eq(c->socket_mode, 0600);
	ck_assert_str_eq(c->redis, "redis://127.0.0.1:6380/2");
	ck_assert_str_eq(c->prefix, "rl.prod");
	ck_assert_int_eq(c->max_line, 1048576);
	ck_assert_int_eq(c->max_connections, 50);
	ck_assert_int_eq(c->client_write_timeout_ms, 250);
	ck_assert_int_eq(c->redis_pool, 4);
	ck_assert_int_eq(c->redis_timeout_ms, 2000);
	ck_assert_str_eq(c->redis_password_file, readable_file());
	ck_assert_str_eq(c->redis_user, "admitd");
	ck_assert_str_eq(c->log_level, "debug");
	conf_free(c);
}
END_TEST

START_TEST(test_admitd_variants)
{
	static const struct {
		const char *line;
		int64_t max_line;
	} v[] = { { "max_line = 65536", 65536 },
		  { "max_line = 64k", 65536 },
		  { "max_line = 64KiB", 65536 },
		  { "max_line: 2m", 2097152 } };
	char buf[128];

	for (size_t i = 0; i < N(v); i++) {
		snprintf(buf, sizeof(buf), "[admitd]\n%s\n", v[i].line);
		struct conf *c = load_scoped(buf);
		ck_assert_msg(c != NULL, "%s: %s", v[i].line, errtext);
		ck_assert_int_eq(c->max_line, v[i].max_line);
		conf_free(c);
	}
	/* empty redis means local mode, like no redis line at all */
	struct conf *c = load_scoped("[admitd]\nredis =\nredis_user =\n");
	ck_assert_msg(c != NULL, "%s", errtext);
	ck_assert_ptr_null(c->redis);
	ck_assert_ptr_null(c->redis_user);
	conf_free(c);
	c = load_scoped("[admitd]\nredis = unix:///run/redis/redis.sock\n");
	ck_assert_msg(c != NULL, "%s", errtext);
	ck_assert_str_eq(c->redis, "unix:///run/redis/redis.sock");
	conf_free(c);
}
END_TEST

START_TEST(test_scope_defaults)
{
	struct conf *c = load("[scope api]\n");
	const struct conf_scope *s;

	ck_assert_msg(c != NULL, "%s", errtext);
	ck_assert_uint_eq(c->nscopes, 1);
	s = conf_scope_find(c, "api");
	ck_assert_ptr_nonnull(s);
	ck_assert_ptr_null(conf_scope_find(c, "API"));
	ck_assert_str_eq(s->name, "api");
	ck_assert_int_eq(s->line, 1);
	ck_assert_int_eq(s->max_concurrent, 0);
	ck_assert_int_eq(s->min_delay_ms, 0);
	ck_assert_int_eq(s->cluster_concurrency, 0);
	ck_assert_int_eq(s->quota, 0);
	ck_assert_int_eq(s->quota_window_ms, 0);
	ck_assert_ptr_null(s->quota_text);
	ck_assert_double_eq(s->jitter, 0);
	ck_assert_uint_eq(s->nrules, 0);
	ck_assert_uint_eq(s->nclasses, 0);
	ck_assert_ptr_null(s->default_class);
	ck_assert_int_eq(s->timeout_ms, 30000);
	ck_assert_int_eq(s->lease_ttl_ms, 60000);
	ck_assert_int_eq(s->concurrency_retry_ms, 25);
	/* auto by default: a fleet that never set it does not admit N times
	 * the budget in an outage */
	ck_assert_double_eq(s->fallback_divisor, 1);
	ck_assert(s->fallback_divisor_auto);
	ck_assert_ptr_null(s->default_key);
	ck_assert(!s->shadow);
	ck_assert_int_eq(s->fail_mode, FAIL_FALLBACK);
	ck_assert_int_eq(s->max_waiters, 1024);
	conf_free(c);
}
END_TEST

START_TEST(test_scope_keys)
{
	struct conf *c = load("[scope crawl]\n"
			      "max_concurrent = 4\n"
			      "min_delay = 2s\n"
			      "cluster_concurrency = 2\n"
			      "quota = 60/1m\n"
			      "jitter = 0.2\n"
			      "timeout = 1m\n"
			      "lease_ttl = 30s\n"
			      "concurrency_retry = 50ms\n"
			      "fallback_divisor = 3\n"
			      "key = example.com\n"
			      "shadow = yes\n"
			      "fail_mode = closed\n"
			      "max_waiters = 10\n"
			      "[scope b]\n"
			      "fail_mode = open\n"
			      "shadow = false\n"
			      "timeout = 0\n");
	const struct conf_scope *s;

	ck_assert_msg(c != NULL, "%s", errtext);
	s = conf_scope_find(c, "crawl");
	ck_assert_int_eq(s->max_concurrent, 4);
	ck_assert_int_eq(s->min_delay_ms, 2000);
	ck_assert_int_eq(s->cluster_concurrency, 2);
	ck_assert_int_eq(s->quota, 60);
	ck_assert_int_eq(s->quota_window_ms, 60000);
	ck_assert_str_eq(s->quota_text, "quota 60/1m");
	ck_assert_double_eq_tol(s->jitter, 0.2, 1e-12);
	ck_assert_int_eq(s->timeout_ms, 60000);
	ck_assert_int_eq(s->lease_ttl_ms, 30000);
	ck_assert_int_eq(s->concurrency_retry_ms, 50);
	ck_assert_double_eq(s->fallback_divisor, 3);
	ck_assert(!s->fallback_divisor_auto);
	ck_assert_str_eq(s->default_key, "example.com");
	ck_assert(s->shadow);
	ck_assert_int_eq(s->fail_mode, FAIL_CLOSED);
	ck_assert_int_eq(s->max_waiters, 10);
	s = conf_scope_find(c, "b");
	ck_assert_int_eq(s->line, 15);
	ck_assert_int_eq(s->fail_mode, FAIL_OPEN);
	ck_assert(!s->shadow);
	ck_assert_int_eq(s->timeout_ms, 0);
	conf_free(c);
}
END_TEST

START_TEST(test_auto_divisor)
{
	struct conf *c = load("[scope a]\nfallback_divisor = auto\n[scope b]\n"
			      "fallback_divisor = 2.5\n");

	ck_assert_msg(c != NULL, "%s", errtext);
	ck_assert(conf_scope_find(c, "a")->fallback_divisor_auto);
	ck_assert_double_eq(conf_scope_find(c, "a")->fallback_divisor, 1);
	ck_assert(!conf_scope_find(c, "b")->fallback_divisor_auto);
	ck_assert_double_eq(conf_scope_find(c, "b")->fallback_divisor, 2.5);
	conf_free(c);
}
END_TEST

START_TEST(test_max_concurrent_raise)
{
	struct conf *c = load("[scope raised]\nmax_concurrent = 2\ncluster_concurrency = 4\n"
			      "[scope unlimited]\nmax_concurrent = 0\ncluster_concurrency = 4\n"
			      "[scope kept]\ncluster_concurrency = 4\nmax_concurrent = 8\n");

	ck_assert_msg(c != NULL, "%s", errtext);
	ck_assert_str_eq(errtext, "");
	ck_assert_int_eq(conf_scope_find(c, "raised")->max_concurrent, 4);
	ck_assert_int_eq(conf_scope_find(c, "unlimited")->max_concurrent, 0);
	ck_assert_int_eq(conf_scope_find(c, "kept")->max_concurrent, 8);
	conf_free(c);
}
END_TEST

/* A rule line per meter and strategy, as the daemon will see them. */
START_TEST(test_rules_in_scope)
{
	struct conf *c = load("[scope llm]\n"
			      "rule = requests sliding-window 600/1m\n"
			      "rule =   tokens   token-bucket 100000/1m  \n"
			      "rule = tokens.output fixed-window 40000/1m\n"
			      "rule = requests leaky-bucket 10/1s burst=20\n"
			      "rule = requests session-window 5/1h\n"
			      "rule = requests 600/m\n"
			      "rule = concurrency 16\n");
	const struct conf_scope *s;

	ck_assert_msg(c != NULL, "%s", errtext);
	s = conf_scope_find(c, "llm");
	ck_assert_uint_eq(s->nrules, 7);
	ck_assert_str_eq(s->rules[0].text, "requests sliding-window 600/1m");
	ck_assert_int_eq(s->rules[0].meter, METER_REQUESTS);
	ck_assert_int_eq(s->rules[0].sp.kind, STRAT_SLIDING_WINDOW);
	ck_assert_int_eq(s->rules[0].line, 2);
	ck_assert_ptr_null(s->rules[0].name);
	ck_assert_str_eq(s->rules[1].text, "tokens token-bucket 100000/1m");
	ck_assert_int_eq(s->rules[1].meter, METER_TOKENS);
	ck_assert_int_eq(s->rules[1].sp.amount, 100000);
	ck_assert_str_eq(s->rules[2].meter_key, "output");
	ck_assert_int_eq(s->rules[2].meter, METER_TOKENS_KEY);
	ck_assert_int_eq(s->rules[2].sp.kind, STRAT_FIXED_WINDOW);
	ck_assert_int_eq(s->rules[3].sp.kind, STRAT_LEAKY_BUCKET);
	ck_assert_int_eq(s->rules[3].sp.burst, 20);
	ck_assert_int_eq(s->rules[4].sp.kind, STRAT_SESSION_WINDOW);
	ck_assert_int_eq(s->rules[4].sp.window_ms, 3600000);
	ck_assert_int_eq(s->rules[5].sp.kind, STRAT_TOKEN_BUCKET);
	ck_assert_int_eq(s->rules[5].sp.window_ms, 60000);
	ck_assert_int_eq(s->rules[6].meter, METER_CONCURRENCY);
	ck_assert_int_eq(s->rules[6].sp.amount, 16);
	ck_assert_int_eq(s->rules[6].line, 8);
	conf_free(c);
}
END_TEST

START_TEST(test_classes)
{
	struct conf *c = load("[scope car]\n"
			      "class background = main floor=20\n"
			      "rule prio = requests token-bucket 10/1s burst=10\n"
			      "rule main = requests token-bucket 60/1m\n"
			      "rule = concurrency 8\n"
			      "class priority = prio\n"
			      "class main = main\n"
			      "class free =\n"
			      "default_class = main\n");
	const struct conf_scope *s;
	const struct conf_class *cl;

	ck_assert_msg(c != NULL, "%s", errtext);
	s = conf_scope_find(c, "car");
	ck_assert_uint_eq(s->nrules, 3);
	ck_assert_str_eq(s->rules[0].name, "prio");
	ck_assert_str_eq(s->rules[0].text, "requests token-bucket 10/1s burst=10");
	ck_assert_str_eq(s->rules[1].name, "main");
	ck_assert_ptr_null(s->rules[2].name);
	ck_assert_uint_eq(s->nclasses, 4);
	ck_assert_str_eq(s->default_class, "main");
	/* a class may name a rule defined after it */
	cl = conf_class_find(s, "background");
	ck_assert_ptr_nonnull(cl);
	ck_assert_int_eq(cl->line, 2);
	ck_assert_int_eq(cl->floor, 20);
	ck_assert_uint_eq(cl->nrules, 1);
	ck_assert_uint_eq(cl->rules[0], 1);
	cl = conf_class_find(s, "priority");
	ck_assert_uint_eq(cl->nrules, 1);
	ck_assert_uint_eq(cl->rules[0], 0);
	ck_assert_int_eq(cl->floor, 0);
	cl = conf_class_find(s, "free");
	ck_assert_uint_eq(cl->nrules, 0);
	ck_assert_ptr_null(conf_class_find(s, "nope"));
	conf_free(c);
}
END_TEST

/* Each (scope, class) compiles into a plan: its rules, its state, its penalty's home. */
START_TEST(test_plans)
{
	struct conf *c = load("[scope car]\n"
			      "rule prio = requests token-bucket 10/1s\n"
			      "rule main = tokens token-bucket 600/1m\n"
			      "rule = concurrency 8\n"
			      "class priority = prio\n"
			      "class main = main\n"
			      "[scope one]\n"
			      "rule = requests token-bucket 10/1s\n"
			      "[scope paced]\n"
			      "min_delay = 1s\n"
			      "rule = requests token-bucket 10/1s\n"
			      "[scope cc]\n"
			      "cluster_concurrency = 2\n"
			      "[scope ovr]\n"
			      "override_max = 2\n"
			      "rule = requests token-bucket 10/1s\n"
			      "[scope quota]\n"
			      "quota = 60/1m\n"
			      "rule = requests token-bucket 10/1s\n");
	const struct conf_scope *s;
	const struct conf_plan *p;

	ck_assert_msg(c != NULL, "%s", errtext);
	s = conf_scope_find(c, "car");
	ck_assert_int_eq(s->penalty_rule, 0); /* the first counting rule */
	p = conf_plan_of(s, conf_class_find(s, "priority"));
	ck_assert_uint_eq(p->nrules, 2);
	ck_assert_uint_eq(p->rules[0], 0);
	ck_assert_uint_eq(p->rules[1], 2);
	ck_assert(p->tracks_leases && !p->serialized && p->release_books && !p->reads_state);
	ck_assert_int_eq(p->penalty_in, 0);
	ck_assert(!p->penalty_extra);
	p = conf_plan_of(s, conf_class_find(s, "main"));
	ck_assert_uint_eq(p->nrules, 2);
	ck_assert_uint_eq(p->rules[0], 1);
	ck_assert_int_eq(p->penalty_in, -1);
	ck_assert(p->penalty_extra); /* prio's hash holds it, main does not apply prio */
	p = conf_plan_of(s, NULL);
	ck_assert_uint_eq(p->nrules, 1);
	ck_assert_uint_eq(p->rules[0], 2);

	s = conf_scope_find(c, "one");
	p = conf_plan_of(s, NULL);
	ck_assert_uint_eq(p->nrules, 1);
	ck_assert(!p->tracks_leases && !p->release_books && !p->reads_state);
	ck_assert_int_eq(p->penalty_in, 0);
	ck_assert(p->plain); /* the one plan acquire.lua's 'p' groups take */
	ck_assert(!conf_plan_of(conf_scope_find(c, "car"), NULL)->plain); /* concurrency */
	ck_assert(!conf_plan_of(conf_scope_find(c, "paced"), NULL)->plain);
	ck_assert(!conf_plan_of(conf_scope_find(c, "ovr"), NULL)->plain);
	ck_assert(!conf_plan_of(conf_scope_find(c, "quota"), NULL)->plain);

	s = conf_scope_find(c, "paced"); /* pacing: the penalty stays beside next_at */
	ck_assert_int_eq(s->penalty_rule, -1);
	p = conf_plan_of(s, NULL);
	ck_assert(p->serialized && p->tracks_leases && p->reads_state && !p->penalty_extra);
	ck_assert_int_eq(p->penalty_in, -1);

	s = conf_scope_find(c, "cc"); /* no counting rule */
	ck_assert_int_eq(s->penalty_rule, -1);
	p = conf_plan_of(s, NULL);
	ck_assert(p->tracks_leases && p->release_books && p->reads_state && !p->serialized);
	conf_free(c);
}
END_TEST

START_TEST(test_syntax_tolerance)
{
	/* BOM, CRLF, indentation, ':' separator, comments of both kinds */
	struct conf *c = load("\xEF\xBB\xBF; leading comment\r\n"
			      "# hash comment\r\n"
			      "[admitd]   ; section comment\r\n"
			      "\tsocket : /tmp/s.sock ; inline comment\r\n"
			      "   prefix=p;q\r\n"
			      "[ scope  x ]\r\n"
			      "    min_delay = 2s\r\n"
			      "rule p = requests 1/1s\n"
			      "class c = p\n"
			      "\n"
			      "max_waiters = 3");

	ck_assert_msg(c != NULL, "%s", errtext);
	ck_assert_str_eq(c->socket, "/tmp/s.sock");
	ck_assert_str_eq(c->prefix, "p;q"); /* ';' starts a comment only after a blank */
	ck_assert_int_eq(conf_scope_find(c, "x")->min_delay_ms, 2000);
	ck_assert_int_eq(conf_scope_find(c, "x")->line, 6);
	ck_assert_int_eq(conf_scope_find(c, "x")->max_waiters, 3);
	conf_free(c);
}
END_TEST

/* Every error message, with its line. One row: conf text, exact output. */
static const struct {
	const char *text;
	const char *want;
} err_vecs[] = {
	{ "socket = x\n", "t.conf:1: \"socket\" outside a section ([admitd] or [scope NAME])\n" },
	{ "[admitd]\nnope = 1\n", "t.conf:2: unknown key \"nope\" in [admitd]\n" },
	{ "[scope a]\nnope = 1\n", "t.conf:2: unknown key \"nope\" in [scope a]\n" },
	{ "[scope a]\nmax_concurrent x = 1\n",
	  "t.conf:2: unknown key \"max_concurrent x\" in [scope a]\n" },
	{ "[admitd]\nrule = requests 1/1s\n",
	  "t.conf:2: unknown key \"rule\" in [admitd] (rule is a key of [scope NAME])\n" },
	{ "[global]\nx = 1\n", "t.conf:1: unknown section [global]\n" },
	{ "[admitd extra]\n", "t.conf:1: unknown section [admitd extra]\n" },
	{ "[scope]\n", "t.conf:1: a scope needs a name: [scope NAME]\n" },
	{ "[scope a b]\n",
	  "t.conf:1: bad scope name \"a b\" ([A-Za-z0-9_.-], 1 to 64 characters)\n" },
	{ "[scope a/b]\n",
	  "t.conf:1: bad scope name \"a/b\" ([A-Za-z0-9_.-], 1 to 64 characters)\n" },
	{ "[scope "
	  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa]\n",
	  "t.conf:1: bad scope name "
	  "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" "
	  "([A-Za-z0-9_.-], 1 to 64 characters)\n" },
	{ "[scope a]\n[scope b]\n[scope a]\nmax_concurrent = -1\n",
	  "t.conf:3: duplicate scope \"a\" (first at line 1)\n" },
	{ "[admitd]\n[admitd]\n", "t.conf:2: duplicate section [admitd] (first at line 1)\n" },
	{ "[scope a\n", "t.conf:1: missing ']' in section header\n" },
	{ "[scope a] x\n", "t.conf:1: unexpected text after ']'\n" },
	{ "[scope a]\njust words\n", "t.conf:2: expected \"key = value\" or \"[section]\"\n" },
	{ "[scope a]\nmax_concurrent ; = 1\n",
	  "t.conf:2: expected \"key = value\" or \"[section]\"\n" },
	{ "[scope a]\nmin_delay = 1s\nmin_delay = 2s\n",
	  "t.conf:3: min_delay: duplicate key (first set at line 2)\n" },
	{ "[admitd]\nsocket_mode = 0800\n",
	  "t.conf:2: socket_mode: not an octal mode (like 0660)\n" },
	{ "[admitd]\nsocket_mode = 01777\n", "t.conf:2: socket_mode: mode larger than 0777\n" },
	{ "[admitd]\nsocket =\n", "t.conf:2: socket: must not be empty\n" },
	{ "[admitd]\nsocket = /"
	  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	  "aaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
	  "t.conf:2: socket: socket path longer than 107 bytes\n" },
	{ "[admitd]\nredis = http://x\n", NULL }, /* redis_url's message; checked by prefix */
	{ "[admitd]\nredis = redis+cluster://\n",
	  "t.conf:2: redis: redis url: no cluster seed node in the url\n" },
	{ "[admitd]\nredis = redis+sentinel://s1:26379,s2:26379\n",
	  "t.conf:2: redis: redis url: empty master name (want .../MASTERNAME)\n" },
	{ "[admitd]\nredis = redis+sentinel://s1:26379,,s2/m\n",
	  "t.conf:2: redis: redis url: empty host in the sentinel host list\n" },
	{ "[admitd]\nredis = redis+cluster://n1:7000,n2:x\n",
	  "t.conf:2: redis: redis url: port must be a number in 1..65535\n" },
	{ "[admitd]\nredis = redis://h\nredis_tls_ca_file = /ca.pem\n",
	  "t.conf:3: redis_tls_ca_file is set but redis is not a TLS url (rediss://, or ?tls=1 on "
	  "redis+sentinel:// and redis+cluster://)\n" },
	{ "[admitd]\nredis = rediss://h\nredis_tls_key_file = /k.pem\n",
	  "t.conf:3: redis_tls_key_file without redis_tls_cert_file\n" },
	{ "[admitd]\nredis = redis+cluster://n1\nsentinel_password_file = /dev/null\n",
	  "t.conf:3: sentinel_password_file is set but redis is not a redis+sentinel:// url\n" },
	{ "[admitd]\nredis = rediss://h\nredis_tls_verify = maybe\n",
	  "t.conf:3: redis_tls_verify: not a boolean (yes/no, true/false, on/off, 1/0)\n" },
	{ "[admitd]\nprefix = a{b}\n", "t.conf:2: prefix: must not contain blanks, '{' or '}'\n" },
	{ "[admitd]\nprefix = a b\n", "t.conf:2: prefix: must not contain blanks, '{' or '}'\n" },
	{ "[admitd]\nmax_line = 100\n", "t.conf:2: max_line: must be between 1024 bytes and "
					"16777216 bytes\n" },
	{ "[admitd]\nmax_line = 64kb\n",
	  "t.conf:2: max_line: unknown size unit (k, KiB, m, MiB)\n" },
	{ "[admitd]\nmax_connections = 0\n",
	  "t.conf:2: max_connections: must be between 1 and 1000000\n" },
	{ "[admitd]\nmax_connections = -5\n", "t.conf:2: max_connections: must not be negative\n" },
	{ "[admitd]\nmax_connections = 10x\n",
	  "t.conf:2: max_connections: trailing characters after the number\n" },
	{ "[admitd]\nredis_pool = 65\n", "t.conf:2: redis_pool: must be between 1 and 64\n" },
	{ "[admitd]\nallow_uids =\n",
	  "t.conf:2: allow_uids: needs at least one user (leave the key out to allow any)\n" },
	{ "[admitd]\nallow_uids = 4294967295\n",
	  "t.conf:2: allow_uids: \"4294967295\" is not a user id (0 to 4294967294)\n" },
	{ "[admitd]\nallow_uids = 12x\n",
	  "t.conf:2: allow_uids: \"12x\" is not a user id (0 to 4294967294)\n" },
	{ "[admitd]\nallow_uids = root no-such-user-x\n",
	  "t.conf:2: allow_uids: no user \"no-such-user-x\"\n" },
	{ "[admitd]\nallow_gids = no-such-group-x\n",
	  "t.conf:2: allow_gids: no group \"no-such-group-x\"\n" },
	{ "[admitd]\nsocket_group = 0 1\n",
	  "t.conf:2: socket_group: must be one group name or gid\n" },
	{ "[admitd]\nmax_keys = 0\n", "t.conf:2: max_keys: must be between 1 and 1000000000\n" },
	{ "[admitd]\nmax_leases = 0\n", "t.conf:2: max_leases: must be between 1 and 100000000\n" },
	{ "[admitd]\nredis_timeout = 250\n",
	  "t.conf:2: redis_timeout: a duration needs a unit (ms, s, m, h)\n" },
	{ "[admitd]\nredis_timeout = 0\n",
	  "t.conf:2: redis_timeout: must be between 1ms and 1m\n" },
	{ "[admitd]\nredis_timeout = 2m\n",
	  "t.conf:2: redis_timeout: must be between 1ms and 1m\n" },
	{ "[admitd]\nclient_write_timeout = 10\n",
	  "t.conf:2: client_write_timeout: a duration needs a unit (ms, s, m, h)\n" },
	{ "[admitd]\nclient_write_timeout = 99ms\n",
	  "t.conf:2: client_write_timeout: must be between 100ms and 1h\n" },
	{ "[admitd]\nclient_write_timeout = 61m\n",
	  "t.conf:2: client_write_timeout: must be between 100ms and 1h\n" },
	{ "[admitd]\nlog_level = verbose\n",
	  "t.conf:2: log_level: must be debug, info, warn or error\n" },
	{ "[scope a]\nmax_concurrent = 1000001\n",
	  "t.conf:2: max_concurrent: must be between 0 and 1000000\n" },
	{ "[scope a]\nmin_delay = 2\n",
	  "t.conf:2: min_delay: a duration needs a unit (ms, s, m, h)\n" },
	{ "[scope a]\nmin_delay = 25h\n", "t.conf:2: min_delay: must be between 0 and 24h\n" },
	{ "[scope a]\nmin_delay = 2s # per host\n",
	  "t.conf:2: min_delay: unknown duration unit (ms, s, m, h)\n" },
	{ "[scope a]\ncluster_concurrency = -1\n",
	  "t.conf:2: cluster_concurrency: must not be negative\n" },
	{ "[scope a]\nquota = 0/1m\n",
	  "t.conf:2: quota: the count must be between 1 and 100000\n" },
	{ "[scope a]\nquota = 60\n", "t.conf:2: quota: expected AMOUNT/WINDOW (like 60/1m)\n" },
	{ "[scope a]\nquota = 60/25h\n", "t.conf:2: quota: the window must be at most 24h\n" },
	{ "[scope a]\njitter = 1.5\n", "t.conf:2: jitter: must be between 0 and 1\n" },
	{ "[scope a]\njitter = -0.1\n", "t.conf:2: jitter: must not be negative\n" },
	{ "[scope a]\ntimeout = 2h\n", "t.conf:2: timeout: must be between 0 and 1h\n" },
	{ "[scope a]\nlease_ttl = 0\n", "t.conf:2: lease_ttl: must be between 1ms and 24h\n" },
	{ "[scope a]\nconcurrency_retry = 0\n",
	  "t.conf:2: concurrency_retry: must be between 1ms and 1m\n" },
	{ "[scope a]\nfallback_divisor = 0.5\n",
	  "t.conf:2: fallback_divisor: must be between 1 and 1000000\n" },
	{ "[scope a]\nfallback_divisor = automatic\n",
	  "t.conf:2: fallback_divisor: must be a number >= 1, or auto\n" },
	{ "[scope a]\nkey =\n", "t.conf:2: key: must not be empty\n" },
	{ "[scope a]\nshadow = maybe\n",
	  "t.conf:2: shadow: not a boolean (yes/no, true/false, on/off, 1/0)\n" },
	{ "[scope a]\nfail_mode = fail\n",
	  "t.conf:2: fail_mode: must be fallback, open or closed\n" },
	{ "[scope a]\nmax_waiters = 0\n",
	  "t.conf:2: max_waiters: must be between 1 and 1000000\n" },
	{ "[scope a]\nrule = requests gcra 1/1s\n",
	  "t.conf:2: rule: unknown strategy \"gcra\" (token-bucket, sliding-window, "
	  "fixed-window, leaky-bucket, session-window)\n" },
	{ "[scope a]\nrule = requests sliding-window 5/1s burst=2\n",
	  "t.conf:2: rule: burst= is only valid for token-bucket and leaky-bucket\n" },
	{ "[scope a]\nrule = requests 1/1s\nrule =\n",
	  "t.conf:3: rule: empty rule (METER [STRATEGY] AMOUNT/WINDOW [burst=N])\n" },
	{ "[scope a]\nrule a/b = requests 1/1s\n",
	  "t.conf:2: rule a/b: bad rule name ([A-Za-z0-9_.-], 1 to 64 characters)\n" },
	{ "[scope a]\nrule x y = requests 1/1s\n",
	  "t.conf:2: rule x y: the name must be one word\n" },
	{ "[scope a]\nrule r = requests 1/1s\nrule r = requests 2/1s\nclass c = r\n",
	  "t.conf:3: rule r: rule \"r\" already defined at line 2\n" },
	{ "[scope a]\nclass = x\n", "t.conf:2: class: needs a name: class NAME = ...\n" },
	{ "[scope a]\nclass c = x\n", "t.conf:2: class c: unknown rule \"x\"\n" },
	{ "[scope a]\nclass c =\nclass c =\n",
	  "t.conf:3: class c: class \"c\" already defined at line 2\n" },
	{ "[scope a]\nclass c = r r\n", "t.conf:2: class c: rule \"r\" listed twice\n" },
	{ "[scope a]\nclass c = floor=2 r\n", "t.conf:2: class c: floor=N must come last\n" },
	{ "[scope a]\nclass c = floor=150%\n", "t.conf:2: class c: floor \"150%\": must be at most "
					       "100% (want floor=P%, 0 <= P < 100)\n" },
	{ "[scope a]\nclass c = floor=%\n",
	  "t.conf:2: class c: floor \"%\": empty value (want floor=P%, 0 <= P < 100)\n" },
	{ "[scope a]\nrule r = requests 10/1s\nclass c = r floor=10\n",
	  "t.conf:3: class c: floor=10 leaves nothing of rule r (10)\n" },
	{ "[scope a]\nrule r = requests 10/1s burst=30\nclass c = r floor=10\nclass d = r "
	  "floor=30\n",
	  "t.conf:4: class d: floor=30 leaves nothing of rule r (30)\n" },
	{ "[scope a]\nrule r = requests 1/1s\n",
	  "t.conf:2: rule r: named rule is not used by any class (list it in a class, or drop "
	  "its name to apply it to all)\n" },
	{ "[scope a]\nclass c =\ndefault_class = d\n",
	  "t.conf:3: default_class: no class \"d\" in [scope a]\n" },
	{ "[scope a]\ndefault_class = d\n",
	  "t.conf:2: default_class: no class \"d\" in [scope a]\n" },
	{ "[scope a]\ndefault_class = d e\n",
	  "t.conf:2: default_class: not a valid name ([A-Za-z0-9_.-], 1 to 64 characters)\n" },
	/* an unknown key close to a known one of its section (two edits at most) names it */
	{ "[scope a]\nmin_dealy = 1s\n",
	  "t.conf:2: unknown key \"min_dealy\" in [scope a] (did you mean \"min_delay\"?)\n" },
	{ "[scope a]\nmaxconcurrent = 1\n", "t.conf:2: unknown key \"maxconcurrent\" in [scope a] "
					    "(did you mean \"max_concurrent\"?)\n" },
	{ "[scope a]\nrul = requests 1/1s\n",
	  "t.conf:2: unknown key \"rul\" in [scope a] (did you mean \"rule\"?)\n" },
	{ "[scope a]\ntimeuot = 1s\n",
	  "t.conf:2: unknown key \"timeuot\" in [scope a] (did you mean \"timeout\"?)\n" },
	{ "[scope a]\nleese_tl = 1s\n",
	  "t.conf:2: unknown key \"leese_tl\" in [scope a] (did you mean \"lease_ttl\"?)\n" },
	{ "[admitd]\nmax_key = 5\n",
	  "t.conf:2: unknown key \"max_key\" in [admitd] (did you mean \"max_keys\"?)\n" },
	{ "[admitd]\nwatchconf = yes\n",
	  "t.conf:2: unknown key \"watchconf\" in [admitd] (did you mean \"watch_conf\"?)\n" },
	/* three edits away: no suggestion */
	{ "[scope a]\nmn_dly = 1s\n", "t.conf:2: unknown key \"mn_dly\" in [scope a]\n" },
	/* short words are not taken for anything ("x" is two edits from "key") */
	{ "[scope a]\nx = 1\n", "t.conf:2: unknown key \"x\" in [scope a]\n" },
	/* a key of the other section says so */
	{ "[scope a]\nmax_keys = 5\n",
	  "t.conf:2: unknown key \"max_keys\" in [scope a] (max_keys is a key of [admitd])\n" },
	/* the suggestion is over the section's own table only */
	{ "[admitd]\nmin_dealy = 1s\n", "t.conf:2: unknown key \"min_dealy\" in [admitd]\n" },
};

START_TEST(test_errors)
{
	struct conf *c = load_scoped(err_vecs[_i].text);

	if (err_vecs[_i].want == NULL && strncmp(err_vecs[_i].text, "[admitd]\nredis", 14) == 0) {
		ck_assert_ptr_null(c);
		ck_assert_msg(strncmp(errtext, "t.conf:2: redis: ", 17) == 0, "%s", errtext);
		return;
	}
	if (err_vecs[_i].want == NULL) {
		ck_assert_msg(c != NULL, "%s", errtext);
		conf_free(c);
		return;
	}
	ck_assert_ptr_null(c);
	ck_assert_str_eq(errtext, err_vecs[_i].want);
}
END_TEST

/* A conf without a scope is refused: empty, comments only, [admitd] only, cut short. */
static const struct {
	const char *text;
	const char *want;
} no_scope_vecs[] = {
	{ "", "t.conf: no [scope NAME] section: a conf needs at least one scope (is the file "
	      "empty or cut short?)\n" },
	{ "; nothing yet\n\n", "t.conf:2: no [scope NAME] section: a conf needs at least one "
			       "scope (is the file empty or cut short?)\n" },
	{ "[admitd]\nsocket = /run/x.sock\nmax_k", /* truncated mid-line */
	  "t.conf:3: expected \"key = value\" or \"[section]\"\n"
	  "t.conf:3: no [scope NAME] section: a conf needs at least one scope (is the file "
	  "empty or cut short?)\n" },
	{ "[admitd]\nmax_keys = 0\n", "t.conf:2: max_keys: must be between 1 and 1000000000\n"
				      "t.conf:2: no [scope NAME] section: a conf needs at least "
				      "one scope (is the file empty or cut short?)\n" },
	/* a scope header that failed is reported once, as what it is */
	{ "[admitd]\n[scope]\n", "t.conf:2: a scope needs a name: [scope NAME]\n" },
};

START_TEST(test_no_scope)
{
	struct conf *c = load(no_scope_vecs[_i].text);

	ck_assert_ptr_null(c);
	ck_assert_str_eq(errtext, no_scope_vecs[_i].want);
}
END_TEST

/* One scope is enough, even an empty one. */
START_TEST(test_one_empty_scope)
{
	struct conf *c = load("[scope s]\n");

	ck_assert_msg(c != NULL, "%s", errtext);
	ck_assert_uint_eq(c->nscopes, 1);
	conf_free(c);
}
END_TEST

/* A password file the daemon could not read fails the load, with its path and why. */
START_TEST(test_password_file_unreadable)
{
	static const char *const keys[] = { "redis_password_file", "sentinel_password_file" };
	char text[512], want[512];
	struct conf *c;

	for (size_t i = 0; i < N(keys); i++) {
		const char *url = i == 0 ? "redis://h" : "redis+sentinel://s1/m";

		snprintf(text, sizeof(text),
			 "[admitd]\nredis = %s\n%s = /nonexistent/admitd.pass\n", url, keys[i]);
		c = load_scoped(text);
		ck_assert_ptr_null(c);
		snprintf(want, sizeof(want),
			 "t.conf:3: %s: cannot read /nonexistent/admitd.pass: No such file or "
			 "directory\n",
			 keys[i]);
		ck_assert_str_eq(errtext, want);
		/* a directory opens, but cannot be read */
		snprintf(text, sizeof(text), "[admitd]\nredis = %s\n%s = %s\n", url, keys[i],
			 srcdir());
		c = load_scoped(text);
		ck_assert_ptr_null(c);
		snprintf(want, sizeof(want), "t.conf:3: %s: cannot read %s: Is a directory\n",
			 keys[i], srcdir());
		ck_assert_str_eq(errtext, want);
	}
}
END_TEST

/* Permission denied, which only a user other than root sees. */
START_TEST(test_password_file_forbidden)
{
	char dir[] = "/tmp/check_conf.XXXXXX", path[64], text[256], want[256];
	struct conf *c;
	FILE *f;

	if (geteuid() == 0)
		return; /* root reads a mode 000 file: nothing to test */
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/pass", dir);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	fputs("secret\n", f);
	fclose(f);
	ck_assert_int_eq(chmod(path, 0), 0);
	snprintf(text, sizeof(text), "[admitd]\nredis = redis://h\nredis_password_file = %s\n",
		 path);
	c = load_scoped(text);
	unlink(path);
	rmdir(dir);
	ck_assert_ptr_null(c);
	snprintf(want, sizeof(want),
		 "t.conf:3: redis_password_file: cannot read %s: Permission denied\n", path);
	ck_assert_str_eq(errtext, want);
}
END_TEST

START_TEST(test_many_errors)
{
	struct conf *c = load("[admitd]\n"
			      "socket_mode = 999\n"
			      "bogus = 1\n"
			      "[scope ok]\n"
			      "min_delay = 5\n"
			      "quota = 0/1m\n"
			      "[nope]\n"
			      "whatever = 1\n"
			      "[scope ok]\n"
			      "[scope two]\n"
			      "rule = requests 10/1s burst=0\n"
			      "class c = missing\n"
			      "jitter = 2\n");

	ck_assert_ptr_null(c);
	ck_assert_str_eq(errtext, "t.conf:2: socket_mode: not an octal mode (like 0660)\n"
				  "t.conf:3: unknown key \"bogus\" in [admitd]\n"
				  "t.conf:5: min_delay: a duration needs a unit (ms, s, m, h)\n"
				  "t.conf:6: quota: the count must be between 1 and 100000\n"
				  "t.conf:7: unknown section [nope]\n"
				  "t.conf:9: duplicate scope \"ok\" (first at line 4)\n"
				  "t.conf:11: rule: burst must be between 1 and 1000000000\n"
				  "t.conf:13: jitter: must be between 0 and 1\n"
				  "t.conf:12: class c: unknown rule \"missing\"\n");
}
END_TEST

/* A physical line longer than libinih's buffer: reported once, at its own line,
 * and the lines after it keep their numbers. */
/* Lines indented with any blank libinih skips (\v, \f too) stand alone. */
START_TEST(test_vertical_tab_indent)
{
	struct conf *c =
	    load("[scope a]\nquota = 5/1m\n\vtimeout = 1s\n\f rule = requests 10/1s\n");

	ck_assert_msg(c != NULL, "%s", errtext);
	ck_assert_int_eq(conf_scope_find(c, "a")->timeout_ms, 1000);
	ck_assert_int_eq(conf_scope_find(c, "a")->quota, 5);
	ck_assert_uint_eq(conf_scope_find(c, "a")->nrules, 1);
	conf_free(c);
}
END_TEST

START_TEST(test_long_line)
{
	char text[1024], val[301];
	struct conf *c;

	memset(val, 'a', 300);
	val[300] = '\0';
	snprintf(text, sizeof(text), "[scope a]\nkey = %s\nmin_delay = 5\n", val);
	c = load(text);
	ck_assert_ptr_null(c);
	ck_assert_str_eq(errtext, "t.conf:2: line too long\n"
				  "t.conf:3: min_delay: a duration needs a unit (ms, s, m, h)\n");

	/* a long comment is harmless; so is a long line at the end without '\n' */
	snprintf(text, sizeof(text), "; %s\n[scope a]\nkey = b\n# %s", val, val);
	c = load(text);
	ck_assert_msg(c != NULL, "%s", errtext);
	ck_assert_str_eq(conf_scope_find(c, "a")->default_key, "b");
	conf_free(c);

	snprintf(text, sizeof(text), "[scope a]\nrule = %s", val);
	c = load(text);
	ck_assert_ptr_null(c);
	ck_assert_str_eq(errtext, "t.conf:2: line too long\n");

	/* keys under a section header too long to read are not filed elsewhere */
	snprintf(text, sizeof(text), "[scope a]\n[scope %s]\nmin_delay = 1s\n", val);
	c = load(text);
	ck_assert_ptr_null(c);
	ck_assert_str_eq(errtext, "t.conf:2: line too long\n");
}
END_TEST

/* A NUL byte can only come from a file: write one to a private temp file. */
START_TEST(test_nul_byte)
{
	static const char body[] = "[scope a]\nkey = a\0b\nmin_delay = 1s\n";
	const char *tmp = getenv("TMPDIR");
	char path[512], *out = NULL;
	size_t len;
	FILE *f, *ef;
	int fd;

	snprintf(path, sizeof(path), "%s/check_conf.XXXXXX", tmp && *tmp ? tmp : P_tmpdir);
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	f = fdopen(fd, "w");
	ck_assert_uint_eq(fwrite(body, 1, sizeof(body) - 1, f), sizeof(body) - 1);
	fclose(f);
	ef = open_memstream(&out, &len);
	ck_assert_ptr_null(conf_load(path, ef));
	fclose(ef);
	unlink(path);
	ck_assert_ptr_nonnull(strstr(out, ":2: NUL byte in line\n"));
	ck_assert_ptr_null(strstr(out, ":3:"));
	free(out);
}
END_TEST

START_TEST(test_load_file_errors)
{
	struct conf *c;
	char *out = NULL;
	size_t len;
	FILE *f = open_memstream(&out, &len);

	c = conf_load("/nonexistent/admitd.conf", f);
	fclose(f);
	ck_assert_ptr_null(c);
	ck_assert_str_eq(out, "/nonexistent/admitd.conf: cannot open: No such file or directory\n");
	free(out);
	/* errf may be NULL */
	ck_assert_ptr_null(conf_load_string("[bad", "x", NULL));
	conf_free(NULL);
}
END_TEST

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

static Suite *conf_suite(void)
{
	Suite *s = suite_create("conf");
	TCase *tc = tcase_create("conf");

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, test_admitd_defaults);
	tcase_add_test(tc, test_admitd_keys);
	tcase_add_test(tc, test_redis_topology_keys);
	tcase_add_test(tc, test_admitd_variants);
	tcase_add_test(tc, test_access_and_bounds_keys);
	tcase_add_test(tc, test_scope_defaults);
	tcase_add_test(tc, test_scope_keys);
	tcase_add_test(tc, test_auto_divisor);
	tcase_add_test(tc, test_max_concurrent_raise);
	tcase_add_test(tc, test_rules_in_scope);
	tcase_add_test(tc, test_classes);
	tcase_add_test(tc, test_plans);
	tcase_add_test(tc, test_syntax_tolerance);
	tcase_add_loop_test(tc, test_errors, 0, N(err_vecs));
	tcase_add_loop_test(tc, test_no_scope, 0, N(no_scope_vecs));
	tcase_add_test(tc, test_one_empty_scope);
	tcase_add_test(tc, test_password_file_unreadable);
	tcase_add_test(tc, test_password_file_forbidden);
	tcase_add_test(tc, test_many_errors);
	tcase_add_test(tc, test_long_line);
	tcase_add_test(tc, test_vertical_tab_indent);
	tcase_add_test(tc, test_nul_byte);
	tcase_add_test(tc, test_load_file_errors);
	tcase_add_test(tc, test_example_confs);
	tcase_add_test(tc, test_dump_keys);
	tcase_add_test(tc, test_reload_keys);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(conf_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
