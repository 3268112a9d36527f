/*
 * check_conf_errors.c - unit tests for the errors of daemon/conf: every
 * error message with its exact "file:line: message" text, a conf without a
 * scope, unreadable and forbidden password files, all errors of a file
 * reported together, over-long lines, a NUL byte, vertical-tab indent, and
 * conf_load_file's own errors.
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
	{ "[scope a]\nclass c = floor=2 r\n",
	  "t.conf:2: class c: floor= and priority= must come after the rule names\n" },
	{ "[scope a]\nclass c = priority=2 r\n",
	  "t.conf:2: class c: floor= and priority= must come after the rule names\n" },
	{ "[scope a]\nclass c = priority=1001\n",
	  "t.conf:2: class c: priority \"1001\": out of range (want -1000..1000)\n" },
	{ "[scope a]\nclass c = priority=-1001\n",
	  "t.conf:2: class c: priority \"-1001\": out of range (want -1000..1000)\n" },
	{ "[scope a]\nclass c = priority=high\n",
	  "t.conf:2: class c: priority \"high\": not a number (want -1000..1000)\n" },
	{ "[scope a]\nclass c = priority=\n",
	  "t.conf:2: class c: priority \"\": empty value (want -1000..1000)\n" },
	{ "[scope a]\nclass c = priority=1 priority=2\n",
	  "t.conf:2: class c: priority= given twice\n" },
	{ "[scope a]\nclass c = floor=1 floor=2\n", "t.conf:2: class c: floor= given twice\n" },
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

static Suite *conf_errors_suite(void)
{
	Suite *s = suite_create("conf_errors");
	TCase *tc = tcase_create("conf");

	tcase_add_checked_fixture(tc, NULL, teardown);
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
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(conf_errors_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
