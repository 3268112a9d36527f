/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * spares.c - a few freed records of one size, kept for the next allocation
 * (spares.h).
 */

#include "spares.h"

#include <stdlib.h>
#include <string.h>

void *spares_get(struct spares *s)
{
	void *p;

	if (s->n == 0)
		return calloc(1, s->size);
	p = s->p[--s->n];
	memset(p, 0, s->size);
	return p;
}

void spares_put(struct spares *s, void *p)
{
	if (p == NULL)
		return;
	if (s->n < s->cap && s->n < SPARES_MAX)
		s->p[s->n++] = p;
	else
		free(p);
}

void spares_free(struct spares *s)
{
	while (s->n > 0)
		free(s->p[--s->n]);
}
