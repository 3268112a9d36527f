/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * class_wait.h - how long admitted acquires waited, per scope and class
 * (the histogram of wait_hist.h, once per class), which `status` and the
 * metrics show.
 *
 * class_wait.c owns each scope's list of them (scope_rt.cwait): one entry
 * per class name that an admission came from, made at the first one, kept
 * across reloads (the scope's counters are), freed with the scope.
 * Acquires without a class count under class "" (the name no class has).
 */

#ifndef ADMITD_CLASS_WAIT_H
#define ADMITD_CLASS_WAIT_H

#include "proto.h"
#include "wait_hist.h"

#include <stdint.h>

struct conf_class;
struct preply;
struct scope_rt;

struct class_wait {
	struct class_wait *next;
	char cls[PROTO_NAME_MAX + 1]; /* "": no class */
	uint64_t hist[WAIT_HIST_NBUCKETS];
	uint64_t ms_total; /* summed waited_ms */
};

/*
 * class_wait_observe - one admission of class cls (NULL: none) in sc
 * waited ms, in bucket b (wait_hist_bucket's, found once for the scope's
 * histogram and this). Its first in a class makes the class's entry:
 * without memory for it, it is not counted.
 */
void class_wait_observe(struct scope_rt *sc, const struct conf_class *cls, size_t b, int64_t ms);
/* class_wait_find - sc's entry of class name cls ("": none), NULL before its first. */
const struct class_wait *class_wait_find(const struct scope_rt *sc, const char *cls);
/*
 * class_wait_each - fn on each class of sc's conf (its entry, or NULL when
 * none of it was admitted yet), then on "" when the scope has requests
 * without a class (no default_class) or counted some.
 */
void class_wait_each(const struct scope_rt *sc,
		     void (*fn)(void *arg, const char *cls, const struct class_wait *cw),
		     void *arg);
/* class_wait_reply - "class_waits":{CLASS:{"wait_buckets":[...],"wait_ms_total":N},...} */
void class_wait_reply(struct preply *r, const struct scope_rt *sc);
/* class_wait_free - sc's list, when sc goes. */
void class_wait_free(struct scope_rt *sc);

#endif
