/*
 * conf_test.h - the helpers of the conf tests (check_conf_keys.c,
 * check_conf_errors.c, check_conf_files.c): load a conf from a string with
 * its error stream captured in errtext (load, load_scoped), free it after
 * each test (teardown), and find the repository's files (srcdir,
 * readable_file, slurp). Included by exactly one file of each test binary.
 */

#ifndef ADMITD_TEST_CONF_TEST_H
#define ADMITD_TEST_CONF_TEST_H

#include "conf.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))

static char *errtext;

/* Load text as "t.conf"; errtext gets everything written to errf. */
static inline struct conf *load(const char *text)
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
static inline struct conf *load_scoped(const char *text)
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

static inline void teardown(void)
{
	free(errtext);
	errtext = NULL;
}

/* The repository root, where conf/ and docs/ live (tests run from it). */
static inline const char *srcdir(void)
{
	const char *d = getenv("ADMITD_SRCDIR");

	return d ? d : ".";
}

/* A file any test can read: a redis_password_file that exists. */
static inline const char *readable_file(void)
{
	static char path[512];

	snprintf(path, sizeof(path), "%s/conf/minimal.conf", srcdir());
	return path;
}

static inline char *slurp(const char *rel)
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

#endif
