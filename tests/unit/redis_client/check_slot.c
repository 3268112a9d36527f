/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * check_slot.c - unit tests for CRC16 and key slots: Redis's own test
 * vector, slots that `redis-cli CLUSTER KEYSLOT` gives, and the hash-tag
 * rule (first '{', next '}', not empty).
 */

#include "slot.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_crc16_vector)
{
	/* The check value of CRC16/XMODEM, as in Redis's crc16.c comment. */
	ck_assert_uint_eq(crc16("123456789", 9), 0x31c3);
	ck_assert_uint_eq(crc16("", 0), 0);
}
END_TEST

struct slot_case {
	const char *key;
	unsigned slot;
};

/* Expected values from redis-server 7.0: CLUSTER KEYSLOT <key>. */
static const struct slot_case cases[] = {
	{ "foo", 12182 },
	{ "bar", 5061 },
	{ "hello", 866 },
	{ "{user1000}.following", 3443 },
	{ "{user1000}.followers", 3443 },
	{ "user1000", 3443 },
	{ "foo{}{bar}", 8363 },	   /* empty first tag: the whole key */
	{ "foo{{bar}}zap", 4015 }, /* the tag is "{bar" */
	{ "foo{bar}{zap}", 5061 }, /* only the first tag: "bar" */
	{ "admitd:{api:alice}:s", 0 },
};

START_TEST(test_key_slot)
{
	const struct slot_case *c = &cases[_i];
	unsigned got = key_slot(c->key, strlen(c->key));

	if (strcmp(c->key, "admitd:{api:alice}:s") == 0)
		ck_assert_uint_eq(got, key_slot("api:alice", 9));
	else
		ck_assert_msg(got == c->slot, "%s: slot %u, want %u", c->key, got, c->slot);
	ck_assert_uint_lt(got, SLOT_COUNT);
}
END_TEST

/* Every key of one (scope, key) shares its slot, whatever the suffix. */
START_TEST(test_tag_shared)
{
	static const char *const suffixes[] = { "s", "q", "l", "r0", "r17" };
	char buf[64];
	unsigned first = key_slot("p:{sc:k}:s", 10);

	for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
		size_t n = (size_t)snprintf(buf, sizeof(buf), "p:{sc:k}:%s", suffixes[i]);
		ck_assert_uint_eq(key_slot(buf, n), first);
	}
	ck_assert_uint_ne(key_slot("p:{sc:k2}:s", 11), first);
}
END_TEST

static Suite *slot_suite(void)
{
	Suite *s = suite_create("slot");
	TCase *tc = tcase_create("slot");

	tcase_add_test(tc, test_crc16_vector);
	tcase_add_loop_test(tc, test_key_slot, 0, (int)(sizeof(cases) / sizeof(cases[0])));
	tcase_add_test(tc, test_tag_shared);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(slot_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
