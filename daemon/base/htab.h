/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * htab.h - a string-keyed hash table with chaining.
 *
 * Owns: its buckets and a copy of every key. Values are the caller's: the
 * table never frees them. Used for the per-scope key tables and the lease
 * table, both of which grow and shrink with traffic.
 *
 * Which hash a table uses depends on who chooses its keys:
 * - keys a client chooses (the per-scope key tables: upstream host names,
 *   tenants; and every table by default) are hashed keyed: SipHash-2-4
 *   under a 128-bit secret drawn once per process from getrandom(). Each
 *   table copies the process secret when it is created, so a table's
 *   bucket layout cannot be predicted from outside (no hash flooding) and
 *   never changes under it.
 * - keys the daemon issues itself, drawn from the kernel's CSPRNG (the
 *   lease table: lease nonces, lease.c), are hashed unkeyed and cheaply
 *   once the table is marked so (htab_issued). Only the daemon inserts
 *   there; a client's bytes are only ever looked up, which walks one
 *   chain whose length random keys set, so there is nothing to flood.
 */

#ifndef ADMITD_HTAB_H
#define ADMITD_HTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct htab;

struct htab *htab_new(void);
/*
 * htab_issued - h's keys are strings the daemon drew at random (never a
 * client's): hash them unkeyed, a few instructions a word. Only while h is
 * empty; returns whether h hashes so now.
 */
bool htab_issued(struct htab *h);
/* htab_free - frees the table and its keys, not the values. */
void htab_free(struct htab *h);

void *htab_get(const struct htab *h, const char *key);
/* htab_put - insert or replace; false on allocation failure. */
bool htab_put(struct htab *h, const char *key, void *val);
/*
 * htab_put_inline - a new entry whose value lives in the entry's own block:
 * valsize zeroed bytes, returned (NULL when the key is there already or
 * memory runs out). *stored is the table's copy of the key, which lives as
 * long as the entry. One allocation for key, entry and value: the per-key
 * tables' form. htab_del and htab_free free the value with the entry.
 */
void *htab_put_inline(struct htab *h, const char *key, size_t valsize, const char **stored);

/* htab_del - remove; returns the value that was there (NULL for an inline one). */
void *htab_del(struct htab *h, const char *key);
size_t htab_count(const struct htab *h);

/*
 * htab_walk - htab_each over the buckets [cursor, cursor + nbuckets) only;
 * returns where the next slice starts (0 once the last bucket was walked).
 * A walk in slices covers every entry that stays in the table, in about
 * nb / nbuckets slices (a resize between slices only moves the cursor's
 * meaning: entries may be visited twice or one slice late, never lost for
 * good). fn may delete the entry it is given, as with htab_each.
 */
size_t htab_walk(struct htab *h, size_t cursor, size_t nbuckets,
		 void (*fn)(void *arg, const char *key, void *val), void *arg);

/* htab_buckets - how many buckets the table has now. */
size_t htab_buckets(const struct htab *h);

/*
 * htab_each - call fn on every entry. fn may delete the entry it is given
 * (and only that one); iteration continues with the next.
 */
void htab_each(struct htab *h, void (*fn)(void *arg, const char *key, void *val), void *arg);

/*
 * siphash24 - SipHash-2-4 (Aumasson & Bernstein, 2012) of len bytes at msg
 * under the 16-byte key (read as two little-endian 64-bit words, as in the
 * paper). Any alignment; same result on every host.
 */
uint64_t siphash24(const void *msg, size_t len, const uint8_t key[16]);

/*
 * Internal; exposed for tests.
 *
 * htab_seed_generate - fill key with 16 fresh secret bytes: getrandom(),
 * else htab_seed_fallback(). Never fails.
 * htab_seed_fallback - 16 bytes mixed from clocks, pids, addresses (ASLR)
 * and a call counter: not secret against a local attacker, but different
 * per process and per call.
 * htab_seed_set - replace the process secret (tests). Only tables created
 * afterwards use it; existing tables keep theirs and stay consistent.
 * htab_max_chain - length of the longest bucket chain.
 */
void htab_seed_generate(uint8_t key[16]);
void htab_seed_fallback(uint8_t key[16]);
void htab_seed_set(const uint8_t key[16]);
size_t htab_max_chain(const struct htab *h);

#endif
