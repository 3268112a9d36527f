/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * spares.h - a few freed records of one size, kept for the next allocation.
 *
 * Owns: the records put back into one struct spares, up to its cap, until
 * they are taken again or spares_free. The daemon makes some records once a
 * request (a reply's builder, a waiter) on its one loop thread; a spare saves
 * a calloc and a free each. Not thread-safe.
 */

#ifndef ADMITD_SPARES_H
#define ADMITD_SPARES_H

#include <stddef.h>

#define SPARES_MAX 64

struct spares {
	size_t size; /* of one record */
	size_t cap;  /* how many are kept, at most SPARES_MAX */
	size_t n;
	void *p[SPARES_MAX];
};

/* A struct spares for records of type, keeping at most cap. */
#define SPARES_INIT(type, cap_)                     \
	{                                           \
		.size = sizeof(type), .cap = (cap_) \
	}

/* spares_get - a zeroed record (a spare when there is one); NULL when out of memory. */
void *spares_get(struct spares *s);

/* spares_put - p is done with: kept as a spare, or freed past the cap. */
void spares_put(struct spares *s, void *p);

/* spares_free - free every spare (at exit). */
void spares_free(struct spares *s);

#endif
