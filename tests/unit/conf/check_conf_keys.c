/*
 * check_conf_keys.c - unit tests for the keys of daemon/conf: every key's
 * default and parse in [admitd] and in a scope (the Redis topology, access
 * and bounds keys among them), rule/class/default class resolution,
 * cluster_concurrency raising max_concurrent, plans, and the syntax the
 * parser tolerates. Confs are given as strings through conf_load_string (no
 * temp files); the error stream is captured with open_memstream.
 */

#include "conf.h"
#include "conf_plan.h"

#include "admit_proto.h"
#include "conf_test.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* Which refusals of one class hold another class's waiters back. */
START_TEST(test_plan_holds_too)
{
	struct conf *c = load("[scope car]\n"
			      "rule prio = requests token-bucket 10/1s burst=10\n"
			      "rule main = requests token-bucket 60/1m\n"
			      "rule = concurrency 8\n"
			      "class priority = prio priority=5\n"
			      "class main = main priority=10\n"
			      "class background = main floor=20\n"
			      "class same = main floor=20\n"
			      "class lower = main floor=10\n"
			      "class pct = main floor=50%\n"
			      "default_class = main\n");
	const struct conf_scope *s;
	const char *prio, *main, *conc;

	ck_assert_msg(c != NULL, "%s", errtext);
	s = conf_scope_find(c, "car");
	prio = s->rules[0].text;
	main = s->rules[1].text;
	conc = s->rules[2].text;
#define CLS(n) conf_class_find(s, n)
	/* refused for its floor: a class with a lower floor is not held back */
	ck_assert(!conf_plan_holds_too(s, CLS("background"), main, CLS("main")));
	ck_assert(!conf_plan_holds_too(s, CLS("background"), main, CLS("lower")));
	/* ... one with the same floor or a higher one is */
	ck_assert(conf_plan_holds_too(s, CLS("background"), main, CLS("same")));
	ck_assert(conf_plan_holds_too(s, CLS("background"), main, CLS("pct"))); /* 30 of 60 */
	ck_assert(!conf_plan_holds_too(s, CLS("pct"), main, CLS("background")));
	/* refused with no floor: every class held to the rule waits too */
	ck_assert(conf_plan_holds_too(s, CLS("main"), main, CLS("background")));
	ck_assert(conf_plan_holds_too(s, CLS("main"), main, CLS("lower")));
	/* a named rule of its own holds back no class that does not list it */
	ck_assert(!conf_plan_holds_too(s, CLS("priority"), prio, CLS("main")));
	ck_assert(!conf_plan_holds_too(s, CLS("main"), main, CLS("priority")));
	/* an unnamed rule, a setting: every class */
	ck_assert(conf_plan_holds_too(s, CLS("main"), conc, CLS("priority")));
	ck_assert(conf_plan_holds_too(s, CLS("priority"), conc, CLS("background")));
	ck_assert(conf_plan_holds_too(s, CLS("priority"), PLAN_RULE_MAX_CONCURRENT, CLS("main")));
	ck_assert(conf_plan_holds_too(s, CLS("main"), PLAN_RULE_PENALTY, CLS("priority")));
	/* no refusal known: nothing */
	ck_assert(!conf_plan_holds_too(s, CLS("main"), NULL, CLS("priority")));
	ck_assert_int_eq(CLS("main")->priority, 10);
#undef CLS
	conf_free(c);
}
END_TEST

/* Which classes a fair scope's queue across daemons holds behind which. */
START_TEST(test_plan_holds_always)
{
	struct conf *c = load("[scope car]\n"
			      "rule prio = requests token-bucket 10/1s burst=10\n"
			      "rule main = requests token-bucket 60/1m\n"
			      "rule = concurrency 8\n"
			      "class priority = prio priority=5\n"
			      "class main = main priority=10\n"
			      "class background = main floor=20\n"
			      "class hifloor = main floor=30 priority=20\n"
			      "class peer = main priority=10\n");
	const struct conf_scope *s;

	ck_assert_msg(c != NULL, "%s", errtext);
	s = conf_scope_find(c, "car");
#define CLS(n) conf_class_find(s, n)
	/* higher, every rule of it shared, a floor no higher: held behind */
	ck_assert(conf_plan_holds_always(s, CLS("main"), CLS("background")));
	/* no class: held to the unnamed rule only, not to main's */
	ck_assert(!conf_plan_holds_always(s, CLS("main"), NULL));
	ck_assert(!conf_plan_holds_always(s, CLS("background"), CLS("main"))); /* lower */
	ck_assert(!conf_plan_holds_always(s, CLS("main"), CLS("peer")));       /* equal */
	ck_assert(!conf_plan_holds_always(s, CLS("main"), CLS("main")));
	/* a rule of its own (prio), or one the lower class lacks (main) */
	ck_assert(!conf_plan_holds_always(s, CLS("priority"), CLS("background")));
	ck_assert(!conf_plan_holds_always(s, CLS("main"), CLS("priority")));
	/* a higher floor than the lower class's: its waits may be its own */
	ck_assert(!conf_plan_holds_always(s, CLS("hifloor"), CLS("background")));
	ck_assert(!conf_plan_holds_always(s, CLS("hifloor"), CLS("main")));
#undef CLS
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
			      "class priority = prio priority=1000\n"
			      "class main = main\n"
			      "class free = priority=-1000\n"
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
	ck_assert_int_eq(cl->priority, 1000);
	ck_assert_int_eq(conf_class_find(s, "main")->priority, 0); /* the default */
	ck_assert_int_eq(conf_class_find(s, "background")->priority, 0);
	cl = conf_class_find(s, "free");
	ck_assert_uint_eq(cl->nrules, 0);
	ck_assert_int_eq(cl->priority, -1000);
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

static Suite *conf_keys_suite(void)
{
	Suite *s = suite_create("conf_keys");
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
	tcase_add_test(tc, test_plan_holds_too);
	tcase_add_test(tc, test_plan_holds_always);
	tcase_add_test(tc, test_plans);
	tcase_add_test(tc, test_syntax_tolerance);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(conf_keys_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
