/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * htab.c - a string-keyed hash table with chaining (FNV-1a, power-of-two
 * bucket counts, grows at load 1, shrinks at load 1/8).
 */

#include "htab.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct hent {
	struct hent *next;
	void *val;
	uint64_t hash;
	char key[];
};

struct htab {
	struct hent **b;
	size_t nb;
	size_t n;
	int walking; /* >0 inside htab_each: no resize */
};

static uint64_t htab_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	while (*s) {
		h ^= (unsigned char)*s++;
		h *= 1099511628211ULL;
	}
	return h;
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
			free(e);
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
	struct hent **pp = htab_slot(h, key, htab_hash(key));

	return *pp ? (*pp)->val : NULL;
}

bool htab_put(struct htab *h, const char *key, void *val)
{
	uint64_t hash = htab_hash(key);
	struct hent **pp = htab_slot(h, key, hash);
	size_t klen;
	struct hent *e;

	if (*pp) {
		(*pp)->val = val;
		return true;
	}
	klen = strlen(key);
	e = malloc(sizeof(*e) + klen + 1);
	if (e == NULL)
		return false;
	memcpy(e->key, key, klen + 1);
	e->hash = hash;
	e->val = val;
	e->next = NULL;
	*pp = e;
	if (++h->n > h->nb)
		htab_resize(h, h->nb * 2);
	return true;
}

void *htab_del(struct htab *h, const char *key)
{
	struct hent **pp = htab_slot(h, key, htab_hash(key));
	struct hent *e = *pp;
	void *val;

	if (e == NULL)
		return NULL;
	*pp = e->next;
	val = e->val;
	free(e);
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
	size_t i;

	/* fn may delete its own entry: resizing is held off meanwhile, so the
	 * saved next pointer stays in the bucket being walked. */
	h->walking++;
	for (i = 0; i < h->nb; i++) {
		struct hent *e = h->b[i];
		while (e) {
			struct hent *nx = e->next;
			fn(arg, e->key, e->val);
			e = nx;
		}
	}
	h->walking--;
}
