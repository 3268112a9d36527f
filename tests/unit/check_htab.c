/*
 * check_htab.c - unit tests for daemon/htab.c: put/get/del/replace, keys
 * copied (the caller's buffer may change), growth and shrink over 10k keys
 * with every key still reachable, and htab_each deleting the entry it is
 * given while the walk goes on.
 */

#include "htab.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NKEYS 10000

/* Values are small integers cast to pointers: the table never frees them. */
#define V(n)   ((void *)(uintptr_t)(n))
#define UNV(p) ((size_t)(uintptr_t)(p))

static struct htab *h;

static void setup(void)
{
	h = htab_new();
	ck_assert_ptr_nonnull(h);
}

static void teardown(void)
{
	htab_free(h);
	h = NULL;
}

static void keyname(char *buf, size_t len, size_t i)
{
	snprintf(buf, len, "key-%zu", i);
}

START_TEST(test_empty)
{
	ck_assert_uint_eq(htab_count(h), 0);
	ck_assert_ptr_null(htab_get(h, "a"));
	ck_assert_ptr_null(htab_del(h, "a"));
	ck_assert_ptr_null(htab_get(h, ""));
	ck_assert_uint_eq(htab_count(h), 0);
}
END_TEST

START_TEST(test_put_get_del)
{
	ck_assert(htab_put(h, "a", V(1)));
	ck_assert(htab_put(h, "b", V(2)));
	ck_assert(htab_put(h, "", V(3))); /* the empty key is a key */
	ck_assert_uint_eq(htab_count(h), 3);
	ck_assert_ptr_eq(htab_get(h, "a"), V(1));
	ck_assert_ptr_eq(htab_get(h, "b"), V(2));
	ck_assert_ptr_eq(htab_get(h, ""), V(3));
	ck_assert_ptr_null(htab_get(h, "ab"));

	ck_assert_ptr_eq(htab_del(h, "a"), V(1));
	ck_assert_uint_eq(htab_count(h), 2);
	ck_assert_ptr_null(htab_get(h, "a"));
	ck_assert_ptr_null(htab_del(h, "a")); /* twice: nothing there */
	ck_assert_uint_eq(htab_count(h), 2);
	ck_assert_ptr_eq(htab_get(h, "b"), V(2));
}
END_TEST

START_TEST(test_replace)
{
	ck_assert(htab_put(h, "k", V(1)));
	ck_assert(htab_put(h, "k", V(2)));
	ck_assert_uint_eq(htab_count(h), 1);
	ck_assert_ptr_eq(htab_get(h, "k"), V(2));
	/* a NULL value is stored, and reads back as absent */
	ck_assert(htab_put(h, "k", NULL));
	ck_assert_uint_eq(htab_count(h), 1);
	ck_assert_ptr_null(htab_get(h, "k"));
	ck_assert_ptr_null(htab_del(h, "k"));
	ck_assert_uint_eq(htab_count(h), 0);
}
END_TEST

START_TEST(test_key_copied)
{
	char buf[16];

	strcpy(buf, "alpha");
	ck_assert(htab_put(h, buf, V(7)));
	strcpy(buf, "beta");
	ck_assert_ptr_null(htab_get(h, "beta"));
	ck_assert_ptr_eq(htab_get(h, "alpha"), V(7));
}
END_TEST

/* Every key present with its own value, and a few absent keys absent. */
static void check_all(size_t from, size_t to)
{
	char k[32];
	size_t i;

	for (i = 0; i < NKEYS; i++) {
		keyname(k, sizeof(k), i);
		if (i >= from && i < to)
			ck_assert_msg(UNV(htab_get(h, k)) == i + 1, "%s lost", k);
		else
			ck_assert_msg(htab_get(h, k) == NULL, "%s still there", k);
	}
}

START_TEST(test_grow_shrink)
{
	char k[32];
	size_t i;

	for (i = 0; i < NKEYS; i++) {
		keyname(k, sizeof(k), i);
		ck_assert(htab_put(h, k, V(i + 1)));
		ck_assert_uint_eq(htab_count(h), i + 1);
	}
	check_all(0, NKEYS);
	/* delete from the front down to a handful: shrinking keeps the rest */
	for (i = 0; i < NKEYS - 5; i++) {
		keyname(k, sizeof(k), i);
		ck_assert_uint_eq(UNV(htab_del(h, k)), i + 1);
		ck_assert_uint_eq(htab_count(h), NKEYS - i - 1);
		if (i % 1000 == 999)
			check_all(i + 1, NKEYS);
	}
	check_all(NKEYS - 5, NKEYS);
	/* and it grows again after shrinking */
	for (i = 0; i < NKEYS - 5; i++) {
		keyname(k, sizeof(k), i);
		ck_assert(htab_put(h, k, V(i + 1)));
	}
	ck_assert_uint_eq(htab_count(h), NKEYS);
	check_all(0, NKEYS);
}
END_TEST

struct walk {
	size_t seen;
	size_t sum; /* of the values seen: each exactly once */
	unsigned char *hits;
	bool del_odd; /* delete entries with odd values */
	bool del_all;
};

static void walk_fn(void *arg, const char *key, void *val)
{
	struct walk *w = arg;
	size_t v = UNV(val);
	char k[32];

	keyname(k, sizeof(k), v - 1);
	ck_assert_str_eq(key, k);
	ck_assert_msg(w->hits[v - 1] == 0, "%s visited twice", key);
	w->hits[v - 1] = 1;
	w->seen++;
	w->sum += v;
	if (w->del_all || (w->del_odd && v % 2 == 1))
		ck_assert_uint_eq(UNV(htab_del(h, key)), v);
}

static void walk(struct walk *w)
{
	w->hits = calloc(NKEYS, 1);
	ck_assert_ptr_nonnull(w->hits);
	htab_each(h, walk_fn, w);
	free(w->hits);
	w->hits = NULL;
}

static void fill(size_t n)
{
	char k[32];
	size_t i;

	for (i = 0; i < n; i++) {
		keyname(k, sizeof(k), i);
		ck_assert(htab_put(h, k, V(i + 1)));
	}
}

START_TEST(test_each_visits_all)
{
	struct walk w = { 0 };

	fill(NKEYS);
	walk(&w);
	ck_assert_uint_eq(w.seen, NKEYS);
	ck_assert_uint_eq(w.sum, (size_t)NKEYS * (NKEYS + 1) / 2);
	ck_assert_uint_eq(htab_count(h), NKEYS);
}
END_TEST

START_TEST(test_each_delete_current)
{
	struct walk w = { .del_odd = true };
	char k[32];
	size_t i;

	fill(NKEYS);
	walk(&w);
	/* every entry seen once even though half were deleted under the walk */
	ck_assert_uint_eq(w.seen, NKEYS);
	ck_assert_uint_eq(w.sum, (size_t)NKEYS * (NKEYS + 1) / 2);
	ck_assert_uint_eq(htab_count(h), NKEYS / 2);
	for (i = 0; i < NKEYS; i++) {
		keyname(k, sizeof(k), i);
		if ((i + 1) % 2 == 1)
			ck_assert_ptr_null(htab_get(h, k));
		else
			ck_assert_uint_eq(UNV(htab_get(h, k)), i + 1);
	}
}
END_TEST

START_TEST(test_each_delete_all)
{
	struct walk w = { .del_all = true };
	char k[32];

	fill(NKEYS);
	walk(&w);
	ck_assert_uint_eq(w.seen, NKEYS);
	ck_assert_uint_eq(htab_count(h), 0);
	/* the shrink held off during the walk still works afterwards */
	fill(100);
	ck_assert_uint_eq(htab_count(h), 100);
	keyname(k, sizeof(k), 42);
	ck_assert_uint_eq(UNV(htab_get(h, k)), 43);
	ck_assert_uint_eq(UNV(htab_del(h, k)), 43);
	ck_assert_uint_eq(htab_count(h), 99);
}
END_TEST

static Suite *htab_suite(void)
{
	Suite *s = suite_create("htab");
	TCase *tc = tcase_create("htab");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_empty);
	tcase_add_test(tc, test_put_get_del);
	tcase_add_test(tc, test_replace);
	tcase_add_test(tc, test_key_copied);
	tcase_add_test(tc, test_grow_shrink);
	tcase_add_test(tc, test_each_visits_all);
	tcase_add_test(tc, test_each_delete_current);
	tcase_add_test(tc, test_each_delete_all);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(htab_suite());
	int nfail;

	srunner_run_all(sr, CK_ENV);
	nfail = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nfail == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
