/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * scope.c - scopes at run time and their tables of keys.
 *
 * Owns: the scope_rt array and every struct kq (created on first use of a
 * key, freed by the sweep once nothing is queued or held on it and its
 * in-process limiter state is indistinguishable from a fresh one, so memory
 * follows the keys in use, not the keys ever seen), and the LRU list of idle
 * kqs that bounds them: past max_keys a new key evicts the least recently
 * used kq with nothing held or waiting, forgetting its in-process state (as
 * nginx's limit_req zones forget their oldest node when full). A kq leaves
 * the list while held or referenced and goes back to its tail when the last
 * hold or ref ends, and a lookup of an idle kq moves it to the tail: every
 * touch is O(1), and the list's head is always evictable.
 */

#include "admitd.h"

#include "clock.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>

/* The idle-key sweep: a table is walked in this many slices (one a tick),
 * each of at least KQ_SWEEP_MIN buckets. */
#define KQ_SWEEP_SLICES 10
#define KQ_SWEEP_MIN	64

bool scopes_init(struct admitd *ad)
{
	size_t i;

	TAILQ_INIT(&ad->idle_keys);
	ad->nkeys = 0;
	ad->nscopes = ad->conf->nscopes;
	ad->scopes = calloc(ad->nscopes ? ad->nscopes : 1, sizeof(*ad->scopes));
	if (ad->scopes == NULL)
		return false;
	for (i = 0; i < ad->nscopes; i++) {
		ad->scopes[i].ad = ad;
		ad->scopes[i].cs = &ad->conf->scopes[i];
		ad->scopes[i].idx = i;
		ad->scopes[i].keys = htab_new();
		if (ad->scopes[i].keys == NULL)
			return false;
	}
	return true;
}

static void kq_free_cb(void *arg UNUSED, const char *key UNUSED, void *val)
{
	waitq_free_kq(val);
}

void scopes_free(struct admitd *ad)
{
	size_t i;

	for (i = 0; i < ad->nscopes; i++) {
		if (ad->scopes[i].keys == NULL)
			continue;
		htab_each(ad->scopes[i].keys, kq_free_cb, NULL);
		htab_free(ad->scopes[i].keys);
	}
	free(ad->scopes);
	ad->scopes = NULL;
}

struct scope_rt *scope_find(struct admitd *ad, const char *name)
{
	size_t i;

	for (i = 0; i < ad->nscopes; i++)
		if (strcmp(ad->scopes[i].cs->name, name) == 0)
			return &ad->scopes[i];
	return NULL;
}

static bool kq_idle_listed(const struct kq *kq)
{
	return kq->idle_link.tqe_prev != NULL;
}

/* Free an idle kq and its table entry. */
static void kq_free(struct kq *kq)
{
	struct admitd *ad = kq->sc->ad;

	if (kq_idle_listed(kq))
		kq_idle_out(kq);
	waitq_free_kq(kq);
	ad->nkeys--;
	htab_del(kq->sc->keys, kq->key); /* frees kq, which lives in the entry */
}

struct kq *kq_get(struct scope_rt *sc, const char *key, bool *full)
{
	struct admitd *ad = sc->ad;
	struct kq *kq = htab_get(sc->keys, key);
	const char *kq_key;

	if (kq != NULL) {
		if (kq_idle_listed(kq)) { /* most recently used now */
			kq_idle_out(kq);
			kq_idle_in(kq);
		}
		return kq;
	}
	/* A loop, not one eviction: after a reload that lowered max_keys the
	 * table shrinks to it at the next new key. */
	while ((int64_t)ad->nkeys >= ad->conf->max_keys) {
		struct kq *victim = TAILQ_FIRST(&ad->idle_keys);
		if (victim == NULL) {
			if (full != NULL)
				*full = true;
			log_ratelimited(
			    LOG_SLOT_KEYS, 1000,
			    "max_keys reached and every key is in use: new keys refused",
			    "max_keys=%lld", (long long)ad->conf->max_keys);
			return NULL;
		}
		log_debug("key evicted", "scope=%s key=\"%s\"", victim->sc->cs->name, victim->key);
		kq_free(victim);
		ad->key_evictions++;
	}
	/* One allocation: the table's entry, its key, the kq and its limiter
	 * state (about 250 bytes for a one-rule scope and a host name). */
	kq = htab_put_inline(sc->keys, key, KQ_LIM_OFF + lim_state_size(sc->cs), &kq_key);
	if (kq == NULL)
		return NULL;
	kq->key = kq_key;
	kq->sc = sc;
	lim_state_init(kq_lim(kq), sc->cs);
	TAILQ_INIT(&kq->waiters);
	kq_idle_in(kq);
	ad->nkeys++;
	return kq;
}

struct sweep_ctx {
	struct scope_rt *sc;
	int64_t now;
};

static void kq_sweep_one(void *arg, const char *key, void *val)
{
	struct sweep_ctx *sw = arg;
	struct kq *kq = val;

	(void)key;
	if (kq->nwait > 0 || kq->held > 0 || kq->busy || kq->refs > 0 || kq->pending > 0)
		return;
	if (!lim_idle(kq_lim(kq), sw->sc->cs, sw->now))
		return;
	kq_free(kq);
}

void kq_sweep(struct admitd *ad)
{
	struct sweep_ctx sw = { .now = clock_mono_ms() };
	size_t i;

	/* A slice of each table per tick: every key is looked at about once in
	 * KQ_SWEEP_SLICES ticks, and no tick walks a million keys at once. */
	for (i = 0; i < ad->nscopes; i++) {
		size_t nb = htab_buckets(ad->scopes[i].keys), slice = nb / KQ_SWEEP_SLICES;
		sw.sc = &ad->scopes[i];
		sw.sc->sweep_at =
		    htab_walk(sw.sc->keys, sw.sc->sweep_at,
			      slice < KQ_SWEEP_MIN ? KQ_SWEEP_MIN : slice, kq_sweep_one, &sw);
	}
}

static void kq_shutdown_cb(void *arg UNUSED, const char *key UNUSED, void *val)
{
	waitq_shutdown(val);
}

void kq_shutdown_all(struct admitd *ad)
{
	size_t i;

	for (i = 0; i < ad->nscopes; i++)
		htab_each(ad->scopes[i].keys, kq_shutdown_cb, NULL);
}
