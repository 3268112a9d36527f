/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * htab.h - a string-keyed hash table with chaining.
 *
 * Owns: its buckets and a copy of every key. Values are the caller's: the
 * table never frees them. Used for the per-scope key tables and the lease
 * table, both of which grow and shrink with traffic.
 */

#ifndef ADMITD_HTAB_H
#define ADMITD_HTAB_H

#include <stdbool.h>
#include <stddef.h>

struct htab;

struct htab *htab_new(void);
/* htab_free - frees the table and its keys, not the values. */
void htab_free(struct htab *h);

void *htab_get(const struct htab *h, const char *key);
/* htab_put - insert or replace; false on allocation failure. */
bool htab_put(struct htab *h, const char *key, void *val);
/* htab_del - remove; returns the value that was there, or NULL. */
void *htab_del(struct htab *h, const char *key);
size_t htab_count(const struct htab *h);

/*
 * htab_each - call fn on every entry. fn may delete the entry it is given
 * (and only that one); iteration continues with the next.
 */
void htab_each(struct htab *h, void (*fn)(void *arg, const char *key, void *val), void *arg);

#endif
