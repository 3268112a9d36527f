/*
 * check_htab.c - unit tests for daemon/base/htab.c: put/get/del/replace, keys
 * copied (the caller's buffer may change), growth and shrink over 10k keys
 * with every key still reachable, and htab_each deleting the entry it is
 * given while the walk goes on.
 *
 * The keyed hash: SipHash-2-4 against the paper's 64 reference vectors, the
 * secret differing per draw (kernel and fallback), the bucket layout
 * following the secret, and a flood of 20,000 keys that all collide under
 * the old unseeded FNV-1a staying spread out.
 *
 * Issued keys (htab_issued: the cheap unkeyed hash of the lease table):
 * only an empty table switches, and 50,000 random nonces, or as many
 * counters of the same form, spread as a random layout does.
 */

#include "htab.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

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

/* ---- SipHash-2-4 ---------------------------------------------------- */

/*
 * The reference vectors (SipHash paper, appendix; vectors.h of the
 * reference implementation): key 00 01 .. 0f, message 00 01 .. (len-1) for
 * len 0..63, output read little-endian.
 */
static const uint64_t sip24_vectors[64] = {
	0x726fdb47dd0e0e31ULL, 0x74f839c593dc67fdULL, 0x0d6c8009d9a94f5aULL, 0x85676696d7fb7e2dULL,
	0xcf2794e0277187b7ULL, 0x18765564cd99a68dULL, 0xcbc9466e58fee3ceULL, 0xab0200f58b01d137ULL,
	0x93f5f5799a932462ULL, 0x9e0082df0ba9e4b0ULL, 0x7a5dbbc594ddb9f3ULL, 0xf4b32f46226bada7ULL,
	0x751e8fbc860ee5fbULL, 0x14ea5627c0843d90ULL, 0xf723ca908e7af2eeULL, 0xa129ca6149be45e5ULL,
	0x3f2acc7f57c29bdbULL, 0x699ae9f52cbe4794ULL, 0x4bc1b3f0968dd39cULL, 0xbb6dc91da77961bdULL,
	0xbed65cf21aa2ee98ULL, 0xd0f2cbb02e3b67c7ULL, 0x93536795e3a33e88ULL, 0xa80c038ccd5ccec8ULL,
	0xb8ad50c6f649af94ULL, 0xbce192de8a85b8eaULL, 0x17d835b85bbb15f3ULL, 0x2f2e6163076bcfadULL,
	0xde4daaaca71dc9a5ULL, 0xa6a2506687956571ULL, 0xad87a3535c49ef28ULL, 0x32d892fad841c342ULL,
	0x7127512f72f27cceULL, 0xa7f32346f95978e3ULL, 0x12e0b01abb051238ULL, 0x15e034d40fa197aeULL,
	0x314dffbe0815a3b4ULL, 0x027990f029623981ULL, 0xcadcd4e59ef40c4dULL, 0x9abfd8766a33735cULL,
	0x0e3ea96b5304a7d0ULL, 0xad0c42d6fc585992ULL, 0x187306c89bc215a9ULL, 0xd4a60abcf3792b95ULL,
	0xf935451de4f21df2ULL, 0xa9538f0419755787ULL, 0xdb9acddff56ca510ULL, 0xd06c98cd5c0975ebULL,
	0xe612a3cb9ecba951ULL, 0xc766e62cfcadaf96ULL, 0xee64435a9752fe72ULL, 0xa192d576b245165aULL,
	0x0a8787bf8ecb74b2ULL, 0x81b3e73d20b49b6fULL, 0x7fa8220ba3b2eceaULL, 0x245731c13ca42499ULL,
	0xb78dbfaf3a8d83bdULL, 0xea1ad565322a1a0bULL, 0x60e61c23a3795013ULL, 0x6606d7e446282b93ULL,
	0x6ca4ecb15c5f91e1ULL, 0x9f626da15c9625f3ULL, 0xe51b38608ef25f57ULL, 0x958a324ceb064572ULL,
};

START_TEST(test_siphash_vectors)
{
	uint8_t key[16], msg[64], shifted[64 + 7];
	size_t i, off;

	for (i = 0; i < 16; i++)
		key[i] = (uint8_t)i;
	for (i = 0; i < 64; i++)
		msg[i] = (uint8_t)i;
	for (i = 0; i < 64; i++)
		ck_assert_msg(siphash24(msg, i, key) == sip24_vectors[i],
			      "len %zu: got %016llx, want %016llx", i,
			      (unsigned long long)siphash24(msg, i, key),
			      (unsigned long long)sip24_vectors[i]);
	/* the message at any alignment: bytes are loaded one by one */
	for (off = 1; off < 8; off++) {
		memcpy(shifted + off, msg, 64);
		for (i = 0; i < 64; i++)
			ck_assert(siphash24(shifted + off, i, key) == sip24_vectors[i]);
	}
}
END_TEST

/* ---- the secret ------------------------------------------------------- */

static bool all_zero(const uint8_t k[16])
{
	size_t i;

	for (i = 0; i < 16; i++)
		if (k[i] != 0)
			return false;
	return true;
}

START_TEST(test_seed_draws_differ)
{
	uint8_t a[16], b[16];

	htab_seed_generate(a);
	htab_seed_generate(b);
	ck_assert(!all_zero(a) && !all_zero(b));
	ck_assert(memcmp(a, b, 16) != 0);
	/* the no-getrandom() path too: two calls, even in one clock tick, differ */
	htab_seed_fallback(a);
	htab_seed_fallback(b);
	ck_assert(!all_zero(a) && !all_zero(b));
	ck_assert(memcmp(a, b, 16) != 0);
}
END_TEST

#define NORDER 1000

struct order {
	size_t n;
	size_t v[NORDER];
};

static void order_fn(void *arg, const char *key, void *val)
{
	struct order *o = arg;

	(void)key;
	ck_assert_uint_lt(o->n, NORDER);
	o->v[o->n++] = UNV(val);
}

/* A fresh table under seed k (NULL: the process secret), filled with
 * NORDER keys; the order htab_each walks them is the bucket layout. */
static void layout(const uint8_t *k, struct order *o)
{
	struct htab *t;
	char key[32];
	size_t i;

	if (k != NULL)
		htab_seed_set(k);
	t = htab_new();
	ck_assert_ptr_nonnull(t);
	for (i = 0; i < NORDER; i++) {
		keyname(key, sizeof(key), i);
		ck_assert(htab_put(t, key, V(i + 1)));
	}
	o->n = 0;
	htab_each(t, order_fn, o);
	ck_assert_uint_eq(o->n, NORDER);
	htab_free(t);
}

START_TEST(test_seed_changes_layout)
{
	static struct order a, b, c, d, e;
	uint8_t k1[16], k2[16];

	htab_seed_generate(k1);
	htab_seed_generate(k2);
	layout(k1, &a);
	layout(k2, &b);
	layout(k1, &c);
	/* another secret, another layout; the same secret, the same layout */
	ck_assert(memcmp(a.v, b.v, sizeof(a.v)) != 0);
	ck_assert(memcmp(a.v, c.v, sizeof(a.v)) == 0);
	/* tables of one process share its secret */
	layout(NULL, &d);
	layout(NULL, &e);
	ck_assert(memcmp(d.v, e.v, sizeof(d.v)) == 0);
}
END_TEST

START_TEST(test_seed_set_spares_old_tables)
{
	uint8_t k[16];
	char key[32];
	size_t i;

	/* h was made under the old secret: it keeps it, every key still found */
	fill(NKEYS);
	htab_seed_generate(k);
	htab_seed_set(k);
	for (i = 0; i < NKEYS; i++) {
		keyname(key, sizeof(key), i);
		ck_assert_uint_eq(UNV(htab_get(h, key)), i + 1);
	}
	for (i = 0; i < NKEYS; i += 2) {
		keyname(key, sizeof(key), i);
		ck_assert_uint_eq(UNV(htab_del(h, key)), i + 1);
	}
	ck_assert_uint_eq(htab_count(h), NKEYS / 2);
}
END_TEST

/* ---- hash flooding ---------------------------------------------------- */

#define NFLOOD	  20000
#define FLOODBITS 16 /* >= log2 of the bucket count at NFLOOD keys (32768) */
#define FLOODMASK ((1ULL << FLOODBITS) - 1)
#define FLOODLOW  0x5ca1ULL /* the low FLOODBITS every key's FNV-1a shares */

#define FNV_OFFSET 1469598103934665603ULL
#define FNV_PRIME  1099511628211ULL

/* The hash htab used before: 64-bit FNV-1a, unseeded. */
static uint64_t fnv1a(const char *s)
{
	uint64_t x = FNV_OFFSET;

	while (*s) {
		x ^= (unsigned char)*s++;
		x *= FNV_PRIME;
	}
	return x;
}

/*
 * NFLOOD distinct keys whose FNV-1a agrees in the low FLOODBITS bits: under
 * the old hash all of them fall in one bucket of any table of up to 2^16
 * buckets. An attacker's construction, cheap because the low bits of FNV-1a
 * depend only on the low bits of its state: the state must be u (below)
 * before the last multiply; for a prefix, try every byte c1 and keep it
 * when the bits above the low 8 then already match u, the last byte c2
 * fixing the low 8.
 */
static char (*flood_keys(void))[24]
{
	char(*keys)[24] = calloc(NFLOOD, sizeof(*keys));
	uint64_t inv = FNV_PRIME, u;
	size_t n = 0, p;
	int i;

	ck_assert_ptr_nonnull(keys);
	for (i = 0; i < 6; i++) /* Newton: inverse of the odd prime mod 2^64 */
		inv *= 2 - FNV_PRIME * inv;
	ck_assert(inv * FNV_PRIME == 1);
	u = (FLOODLOW * inv) & FLOODMASK;
	for (p = 0; n < NFLOOD; p++) {
		char pre[16];
		uint64_t s0;
		unsigned c1;

		snprintf(pre, sizeof(pre), "h%zu.", p);
		s0 = fnv1a(pre);
		for (c1 = 1; c1 < 256 && n < NFLOOD; c1++) {
			uint64_t s1 = (s0 ^ c1) * FNV_PRIME;
			unsigned c2 = (unsigned)((s1 ^ u) & 0xff);

			if (((s1 ^ u) & FLOODMASK & ~0xffULL) != 0 || c2 == 0)
				continue;
			snprintf(keys[n], sizeof(keys[n]), "%s%c%c", pre, (char)c1, (char)c2);
			n++;
		}
	}
	return keys;
}

static void flood(struct htab *t)
{
	char(*keys)[24] = flood_keys();
	size_t i;

	/* they do collide under the old hash */
	for (i = 0; i < NFLOOD; i++)
		ck_assert_msg((fnv1a(keys[i]) & FLOODMASK) == FLOODLOW, "key %zu", i);

	for (i = 0; i < NFLOOD; i++) {
		ck_assert(htab_put(t, keys[i], V(i + 1)));
		if (i % 1000 == 999)
			ck_assert_uint_lt(htab_max_chain(t), 16);
	}
	ck_assert_uint_eq(htab_count(t), NFLOOD); /* all distinct, none lost */
	/* 20,000 keys in 32,768 buckets: a random layout's longest chain is
	 * about 7; FNV-1a's was 20,000 */
	ck_assert_uint_lt(htab_max_chain(t), 16);
	for (i = 0; i < NFLOOD; i++)
		ck_assert_msg(UNV(htab_get(t, keys[i])) == i + 1, "key %zu lost", i);
	/* out again: odd ones first, then the rest */
	for (i = 1; i < NFLOOD; i += 2)
		ck_assert_uint_eq(UNV(htab_del(t, keys[i])), i + 1);
	ck_assert_uint_eq(htab_count(t), NFLOOD / 2);
	ck_assert_uint_lt(htab_max_chain(t), 16);
	for (i = 0; i < NFLOOD; i++) {
		if (i % 2 == 1)
			ck_assert_ptr_null(htab_get(t, keys[i]));
		else
			ck_assert_uint_eq(UNV(htab_get(t, keys[i])), i + 1);
	}
	for (i = 0; i < NFLOOD; i += 2)
		ck_assert_uint_eq(UNV(htab_del(t, keys[i])), i + 1);
	ck_assert_uint_eq(htab_count(t), 0);
	for (i = 0; i < NFLOOD; i++)
		ck_assert_ptr_null(htab_get(t, keys[i]));
	free(keys);
}

START_TEST(test_flood_process_seed)
{
	flood(h); /* under this process's secret from getrandom() */
}
END_TEST

START_TEST(test_flood_fixed_seeds)
{
	/* reproducible: the reference key, and the all-zero key */
	static const uint8_t keys[2][16] = {
		{ 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 },
		{ 0 },
	};
	size_t i;

	for (i = 0; i < 2; i++) {
		struct htab *t;

		htab_seed_set(keys[i]);
		t = htab_new();
		ck_assert_ptr_nonnull(t);
		flood(t);
		htab_free(t);
	}
}
END_TEST

/* ---- walks in slices, and inline values ---- */

struct walk_ctx {
	struct htab *h;
	int seen[4000];
	bool delete_odd;
};

static void walk_cb(void *arg, const char *key, void *val)
{
	struct walk_ctx *x = arg;
	int k = atoi(key + 1);

	(void)val;
	ck_assert_int_ge(k, 0);
	ck_assert_int_lt(k, 4000);
	x->seen[k]++;
	if (x->delete_odd && k % 2 == 1)
		htab_del(x->h, key); /* the entry it was given: allowed */
}

START_TEST(test_walk_in_slices_covers_every_key)
{
	struct walk_ctx *x = calloc(1, sizeof(*x));
	char key[16];
	size_t cursor = 0, slices = 0;
	int i;

	ck_assert_ptr_nonnull(x);
	x->h = htab_new();
	ck_assert_ptr_nonnull(x->h);
	for (i = 0; i < 4000; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		ck_assert(htab_put(x->h, key, x));
	}
	/* one cycle of slices, deleting odd keys as they are met */
	x->delete_odd = true;
	do {
		cursor = htab_walk(x->h, cursor, htab_buckets(x->h) / 10, walk_cb, x);
		slices++;
	} while (cursor != 0 && slices < 100);
	ck_assert_uint_ge(slices, 10);
	ck_assert_uint_le(slices, 11);
	for (i = 0; i < 4000; i++)
		ck_assert_msg(x->seen[i] == 1, "key %d seen %d times", i, x->seen[i]);
	ck_assert_uint_eq(htab_count(x->h), 2000);
	for (i = 0; i < 4000; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		ck_assert((htab_get(x->h, key) != NULL) == (i % 2 == 0));
	}
	/* a cursor past the end (the table shrank) starts again at 0 */
	ck_assert_uint_eq(htab_walk(x->h, 1u << 30, 1, walk_cb, x), 1);
	htab_free(x->h);
	free(x);
}
END_TEST

START_TEST(test_inline_values)
{
	struct htab *t = htab_new();
	const char *stored = NULL;
	char *v;

	ck_assert_ptr_nonnull(t);
	v = htab_put_inline(t, "host.example", 40, &stored);
	ck_assert_ptr_nonnull(v);
	ck_assert_str_eq(stored, "host.example");
	for (int i = 0; i < 40; i++)
		ck_assert_int_eq(v[i], 0); /* zeroed */
	memset(v, 'x', 40);
	ck_assert_ptr_eq(htab_get(t, "host.example"), v);
	ck_assert_ptr_null(htab_put_inline(t, "host.example", 40, &stored)); /* there already */
	ck_assert_ptr_null(htab_del(t, "host.example")); /* freed with its entry */
	ck_assert_ptr_null(htab_get(t, "host.example"));
	ck_assert_ptr_nonnull(htab_put_inline(t, "other", 8, &stored));
	htab_free(t); /* frees the inline value too: valgrind and ASan check it */
}
END_TEST

/* n keys of a lease nonce's form (32 lowercase hex digits): random, or counters. */
#define NISSUED 50000
static char (*nonces(bool random))[33]
{
	static const char hex[] = "0123456789abcdef";
	char(*keys)[33] = malloc(NISSUED * sizeof(*keys));
	unsigned char(*raw)[16] = malloc(NISSUED * sizeof(*raw));
	size_t i, j, got = 0;

	ck_assert_ptr_nonnull(keys);
	ck_assert_ptr_nonnull(raw);
	while (random && got < NISSUED * sizeof(*raw)) {
		ssize_t r = getrandom((unsigned char *)raw + got, NISSUED * sizeof(*raw) - got, 0);

		ck_assert_int_gt(r, 0);
		got += (size_t)r;
	}
	for (i = 0; i < NISSUED; i++) {
		for (j = 0; j < 16; j++) {
			/* counters: i big-endian in the last 8 bytes, zeros before */
			unsigned b = random  ? raw[i][j]
				     : j < 8 ? 0
					     : (unsigned)((i >> (8 * (15 - j))) & 0xff);
			keys[i][2 * j] = hex[b >> 4];
			keys[i][2 * j + 1] = hex[b & 15];
		}
		keys[i][32] = '\0';
	}
	free(raw);
	return keys;
}

START_TEST(test_issued_keys)
{
	struct htab *t = htab_new();
	bool random;

	ck_assert_ptr_nonnull(t);
	ck_assert(htab_put(t, "a", V(1)));
	ck_assert(!htab_issued(t)); /* not once it holds a key: its layout stays */
	ck_assert_uint_eq(UNV(htab_get(t, "a")), 1);
	htab_free(t);
	for (random = false;; random = true) {
		char(*keys)[33] = nonces(random);
		size_t i;

		t = htab_new();
		ck_assert_ptr_nonnull(t);
		ck_assert(htab_issued(t));
		for (i = 0; i < NISSUED; i++)
			ck_assert(htab_put(t, keys[i], V(i + 1)));
		ck_assert_uint_eq(htab_count(t), NISSUED);
		/* 50,000 keys in 65,536 buckets: a random layout's longest
		 * chain is about 8 */
		ck_assert_uint_lt(htab_max_chain(t), 16);
		for (i = 0; i < NISSUED; i++)
			ck_assert_msg(UNV(htab_get(t, keys[i])) == i + 1, "key %zu lost", i);
		for (i = 0; i < NISSUED; i += 2)
			ck_assert_uint_eq(UNV(htab_del(t, keys[i])), i + 1);
		ck_assert_uint_lt(htab_max_chain(t), 16);
		for (i = 0; i < NISSUED; i++)
			ck_assert_uint_eq(UNV(htab_get(t, keys[i])), i % 2 ? i + 1 : 0);
		htab_free(t);
		free(keys);
		if (random)
			break;
	}
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
	tcase_add_test(tc, test_siphash_vectors);
	tcase_add_test(tc, test_seed_draws_differ);
	tcase_add_test(tc, test_seed_changes_layout);
	tcase_add_test(tc, test_seed_set_spares_old_tables);
	tcase_add_test(tc, test_flood_process_seed);
	tcase_add_test(tc, test_flood_fixed_seeds);
	tcase_add_test(tc, test_walk_in_slices_covers_every_key);
	tcase_add_test(tc, test_inline_values);
	tcase_add_test(tc, test_issued_keys);
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
