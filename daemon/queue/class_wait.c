/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * class_wait.c - the wait histograms' bounds (wait_hist.h), and the wait
 * histogram per class of each scope (class_wait.h): its entries, made at a class's first admission and found by name (a
 * reload re-points classes, the names stay), and its part of `status`.
 */

#include "class_wait.h"

#include "conf.h"
#include "scope.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The wait histograms' bounds (wait_hist.h), the scope's and each class's. */
const int64_t wait_hist_bounds_ms[WAIT_HIST_NBOUNDS] = {
	0, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
};

const struct class_wait *class_wait_find(const struct scope_rt *sc, const char *cls)
{
	const struct class_wait *cw;

	for (cw = sc->cwait; cw != NULL; cw = cw->next)
		if (strcmp(cw->cls, cls) == 0)
			return cw;
	return NULL;
}

void class_wait_observe(struct scope_rt *sc, const struct conf_class *cls, size_t b, int64_t ms)
{
	const char *name = cls != NULL ? cls->name : "";
	struct class_wait *cw;

	/* no class (the common case): its entry found with no call */
	for (cw = sc->cwait; cw != NULL; cw = cw->next)
		if (name[0] == '\0' ? cw->cls[0] == '\0' : strcmp(cw->cls, name) == 0)
			break;
	if (cw == NULL) {
		if ((cw = calloc(1, sizeof(*cw))) == NULL)
			return;
		snprintf(cw->cls, sizeof(cw->cls), "%s", name);
		cw->next = sc->cwait;
		sc->cwait = cw;
	}
	cw->hist[b < WAIT_HIST_NBUCKETS ? b : WAIT_HIST_NBOUNDS]++;
	cw->ms_total += (uint64_t)(ms > 0 ? ms : 0);
}

void class_wait_each(const struct scope_rt *sc,
		     void (*fn)(void *arg, const char *cls, const struct class_wait *cw), void *arg)
{
	const struct class_wait *none = class_wait_find(sc, "");
	size_t i;

	for (i = 0; i < sc->cs->nclasses; i++)
		fn(arg, sc->cs->classes[i].name, class_wait_find(sc, sc->cs->classes[i].name));
	if (sc->cs->default_class == NULL || none != NULL)
		fn(arg, "", none);
}

static void class_wait_one(void *arg, const char *cls, const struct class_wait *cw)
{
	struct preply *r = arg;
	size_t j;

	preply_push(r, cls);
	preply_list(r, "wait_buckets");
	for (j = 0; j < WAIT_HIST_NBUCKETS; j++)
		preply_int(r, NULL, cw != NULL ? (int64_t)cw->hist[j] : 0);
	preply_pop(r);
	preply_int(r, "wait_ms_total", cw != NULL ? (int64_t)cw->ms_total : 0);
	preply_pop(r);
}

void class_wait_reply(struct preply *r, const struct scope_rt *sc)
{
	preply_push(r, "class_waits");
	class_wait_each(sc, class_wait_one, r);
	preply_pop(r);
}

void class_wait_free(struct scope_rt *sc)
{
	struct class_wait *cw;

	while ((cw = sc->cwait) != NULL) {
		sc->cwait = cw->next;
		free(cw);
	}
}
