/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * htab.c - a string-keyed hash table with chaining (SipHash-2-4 under a
 * per-process secret, power-of-two bucket counts, grows at load 1, shrinks
 * at load 1/8).
 *
 * The secret: 128 bits from getrandom(), drawn by the first htab_new() of
 * the process; each table keeps its own copy. admitd runs one event loop
 * thread, so the lazy draw needs no lock.
 */

#include "htab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

struct hent {
	struct hent *next;
	void *val;
	uint64_t hash;
	uint32_t voff; /* an inline value: the block starts this far before the entry */
	char key[];
};

/* The block an entry lives in (its inline value first, when it has one). */
static void hent_free(struct hent *e)
{
	free((char *)e - e->voff);
}

struct htab {
	struct hent **b;
	size_t nb;
	size_t n;
	int walking;	 /* >0 inside htab_each: no resize */
	bool issued;	 /* keys the daemon drew at random: htab_issued_hash */
	uint64_t k0, k1; /* this table's SipHash key */
};

/* ---- SipHash-2-4 ---------------------------------------------------- */

static inline uint64_t rotl64(uint64_t x, unsigned r)
{
	return (x << r) | (x >> (64 - r));
}

/* A little-endian word at any alignment: one load on a little-endian host. */
static inline uint64_t load64le(const unsigned char *p)
{
	uint64_t w;

	memcpy(&w, p, sizeof(w));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	w = __builtin_bswap64(w);
#endif
	return w;
}

static void store64le(uint8_t *p, uint64_t w)
{
	int i;

	for (i = 0; i < 8; i++) {
		p[i] = (uint8_t)(w & 0xff);
		w >>= 8;
	}
}

/* One SipRound on v0..v3, in place (a macro: the compiler keeps the state
 * in registers, where a function per round spilled it). */
#define SIPROUND(v0, v1, v2, v3)         \
	do {                             \
		(v0) += (v1);            \
		(v1) = rotl64((v1), 13); \
		(v1) ^= (v0);            \
		(v0) = rotl64((v0), 32); \
		(v2) += (v3);            \
		(v3) = rotl64((v3), 16); \
		(v3) ^= (v2);            \
		(v0) += (v3);            \
		(v3) = rotl64((v3), 21); \
		(v3) ^= (v0);            \
		(v2) += (v1);            \
		(v1) = rotl64((v1), 17); \
		(v1) ^= (v2);            \
		(v2) = rotl64((v2), 32); \
	} while (0)

static uint64_t sip24(uint64_t k0, uint64_t k1, const void *msg, size_t len)
{
	const unsigned char *p = msg;
	/* "somepseudorandomlygeneratedbytes" */
	uint64_t v0 = k0 ^ 0x736f6d6570736575ULL, v1 = k1 ^ 0x646f72616e646f6dULL;
	uint64_t v2 = k0 ^ 0x6c7967656e657261ULL, v3 = k1 ^ 0x7465646279746573ULL;
	unsigned char tail[8] = { 0 };
	size_t left = len;
	uint64_t m;

	/* one message word at a time: c = 2 compression rounds */
	for (; left >= 8; left -= 8, p += 8) {
		m = load64le(p);
		v3 ^= m;
		SIPROUND(v0, v1, v2, v3);
		SIPROUND(v0, v1, v2, v3);
		v0 ^= m;
	}
	/* the last word: the 0..7 remaining bytes, and len mod 256 on top */
	memcpy(tail, p, left);
	m = load64le(tail) | (uint64_t)(len & 0xff) << 56;
	v3 ^= m;
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	v0 ^= m;
	/* finalization: d = 4 rounds */
	v2 ^= 0xff;
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t siphash24(const void *msg, size_t len, const uint8_t key[16])
{
	return sip24(load64le(key), load64le(key + 8), msg, len);
}

/* ---- the process secret --------------------------------------------- */

static uint64_t seed_k0, seed_k1;
static bool seeded;

void htab_seed_fallback(uint8_t key[16])
{
	static uint64_t calls;
	struct timespec rt = { 0 }, mt = { 0 };
	uint64_t w[11];
	void *heap = malloc(1);
	int on_stack = 0;

	(void)clock_gettime(CLOCK_REALTIME, &rt);
	(void)clock_gettime(CLOCK_MONOTONIC, &mt);
	w[0] = (uint64_t)rt.tv_sec;
	w[1] = (uint64_t)rt.tv_nsec;
	w[2] = (uint64_t)mt.tv_sec;
	w[3] = (uint64_t)mt.tv_nsec;
	w[4] = (uint64_t)clock();
	w[5] = (uint64_t)getpid();
	w[6] = (uint64_t)getppid();
	w[7] = (uint64_t)(uintptr_t)&on_stack; /* stack, data, heap: ASLR */
	w[8] = (uint64_t)(uintptr_t)&calls;
	w[9] = (uint64_t)(uintptr_t)heap;
	w[10] = ++calls; /* two calls in one clock tick still differ */
	free(heap);
	/* fixed keys (digits of pi): they only spread the inputs over 128 bits */
	store64le(key, sip24(0x243f6a8885a308d3ULL, 0x13198a2e03707344ULL, w, sizeof(w)));
	store64le(key + 8, sip24(0xa4093822299f31d0ULL, 0x082efa98ec4e6c89ULL, w, sizeof(w)));
}

void htab_seed_generate(uint8_t key[16])
{
	int saved = errno;
	size_t got = 0;

	while (got < 16) {
		ssize_t r = getrandom(key + got, 16 - got, 0);

		if (r > 0)
			got += (size_t)r;
		else if (r < 0 && errno == EINTR)
			continue;
		else
			break; /* ENOSYS, EPERM (seccomp), ...: no kernel randomness */
	}
	if (got < 16)
		htab_seed_fallback(key);
	errno = saved;
}

void htab_seed_set(const uint8_t key[16])
{
	seed_k0 = load64le(key);
	seed_k1 = load64le(key + 8);
	seeded = true;
}

static void htab_seed_init(void)
{
	uint8_t key[16];

	if (seeded)
		return;
	htab_seed_generate(key);
	htab_seed_set(key);
}

/* ---- the table ------------------------------------------------------- */

/*
 * The hash of a table of issued keys (htab_issued): unkeyed, a multiply
 * and a shift a word. Its keys are already uniformly random, so all it
 * must do is fold every byte of them into the bits a bucket index takes.
 */
static uint64_t htab_issued_hash(const void *msg, size_t len)
{
	const uint64_t mul = 0x9e3779b97f4a7c15ULL; /* 2^64 / golden ratio, odd */
	const unsigned char *p = msg;
	unsigned char tail[8] = { 0 };
	uint64_t h = len * mul;

	for (; len >= 8; len -= 8, p += 8) {
		h = (h ^ load64le(p)) * mul;
		h ^= h >> 32;
	}
	memcpy(tail, p, len);
	h = (h ^ load64le(tail)) * mul;
	return h ^ (h >> 29);
}

static uint64_t htab_hash_len(const struct htab *h, const char *key, size_t len)
{
	return h->issued ? htab_issued_hash(key, len) : sip24(h->k0, h->k1, key, len);
}

static uint64_t htab_hash(const struct htab *h, const char *key)
{
	return htab_hash_len(h, key, strlen(key));
}

bool htab_issued(struct htab *h)
{
	if (h->n != 0)
		return h->issued;
	h->issued = true;
	return true;
}

struct htab *htab_new(void)
{
	struct htab *h = calloc(1, sizeof(*h));

	if (h == NULL)
		return NULL;
	h->nb = 16;
	h->b = calloc(h->nb, sizeof(*h->b));
	if (h->b == NULL) {
		free(h);
		return NULL;
	}
	htab_seed_init();
	h->k0 = seed_k0;
	h->k1 = seed_k1;
	return h;
}

void htab_free(struct htab *h)
{
	size_t i;

	if (h == NULL)
		return;
	for (i = 0; i < h->nb; i++) {
		struct hent *e = h->b[i];
		while (e) {
			struct hent *nx = e->next;
			hent_free(e);
			e = nx;
		}
	}
	free(h->b);
	free(h);
}

static void htab_resize(struct htab *h, size_t nb)
{
	struct hent **nbk = calloc(nb, sizeof(*nbk));
	size_t i;

	if (nbk == NULL)
		return; /* keep the old size: slower, still correct */
	for (i = 0; i < h->nb; i++) {
		struct hent *e = h->b[i];
		while (e) {
			struct hent *nx = e->next;
			size_t j = e->hash & (nb - 1);
			e->next = nbk[j];
			nbk[j] = e;
			e = nx;
		}
	}
	free(h->b);
	h->b = nbk;
	h->nb = nb;
}

static struct hent **htab_slot(const struct htab *h, const char *key, uint64_t hash)
{
	struct hent **pp = &h->b[hash & (h->nb - 1)];

	while (*pp && ((*pp)->hash != hash || strcmp((*pp)->key, key) != 0))
		pp = &(*pp)->next;
	return pp;
}

void *htab_get(const struct htab *h, const char *key)
{
	struct hent **pp = htab_slot(h, key, htab_hash(h, key));

	return *pp ? (*pp)->val : NULL;
}

bool htab_put(struct htab *h, const char *key, void *val)
{
	size_t klen = strlen(key);
	uint64_t hash = htab_hash_len(h, key, klen);
	struct hent **pp = htab_slot(h, key, hash);
	struct hent *e;

	if (*pp) {
		(*pp)->val = val;
		return true;
	}
	e = malloc(sizeof(*e) + klen + 1);
	if (e == NULL)
		return false;
	memcpy(e->key, key, klen + 1);
	e->hash = hash;
	e->val = val;
	e->voff = 0;
	e->next = NULL;
	*pp = e;
	if (++h->n > h->nb)
		htab_resize(h, h->nb * 2);
	return true;
}

void *htab_put_inline(struct htab *h, const char *key, size_t valsize, const char **stored)
{
	size_t klen = strlen(key), voff = (valsize + 15) & ~(size_t)15;
	uint64_t hash = htab_hash_len(h, key, klen);
	struct hent **pp = htab_slot(h, key, hash);
	struct hent *e;
	char *block;

	if (*pp != NULL || voff > UINT32_MAX)
		return NULL;
	block = calloc(1, voff + sizeof(*e) + klen + 1);
	if (block == NULL)
		return NULL;
	e = (struct hent *)(void *)(block + voff);
	memcpy(e->key, key, klen + 1);
	e->hash = hash;
	e->val = block;
	e->voff = (uint32_t)voff;
	e->next = NULL;
	*pp = e;
	*stored = e->key;
	if (++h->n > h->nb)
		htab_resize(h, h->nb * 2);
	return block;
}

void *htab_del(struct htab *h, const char *key)
{
	struct hent **pp = htab_slot(h, key, htab_hash(h, key));
	struct hent *e = *pp;
	void *val;

	if (e == NULL)
		return NULL;
	*pp = e->next;
	val = e->voff != 0 ? NULL : e->val; /* an inline value goes with its entry */
	hent_free(e);
	h->n--;
	if (h->walking == 0 && h->nb > 16 && h->n < h->nb / 8)
		htab_resize(h, h->nb / 2);
	return val;
}

size_t htab_count(const struct htab *h)
{
	return h->n;
}

void htab_each(struct htab *h, void (*fn)(void *arg, const char *key, void *val), void *arg)
{
	htab_walk(h, 0, h->nb, fn, arg); /* one slice: every bucket */
}

size_t htab_walk(struct htab *h, size_t cursor, size_t nbuckets,
		 void (*fn)(void *arg, const char *key, void *val), void *arg)
{
	size_t i, end;

	if (cursor >= h->nb)
		cursor = 0;
	end = nbuckets < h->nb - cursor ? cursor + nbuckets : h->nb;
	/* fn may delete its own entry: resizing is held off meanwhile, so the
	 * saved next pointer stays in the bucket being walked. */
	h->walking++;
	for (i = cursor; i < end; i++) {
		struct hent *e = h->b[i];
		while (e) {
			struct hent *nx = e->next;
			fn(arg, e->key, e->val);
			e = nx;
		}
	}
	h->walking--;
	return end >= h->nb ? 0 : end;
}

size_t htab_buckets(const struct htab *h)
{
	return h->nb;
}

size_t htab_max_chain(const struct htab *h)
{
	size_t i, max = 0;

	for (i = 0; i < h->nb; i++) {
		const struct hent *e;
		size_t len = 0;

		for (e = h->b[i]; e; e = e->next)
			len++;
		if (len > max)
			max = len;
	}
	return max;
}
