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
 * nginx's limit_req zones forget their oldest node when full); a kq under
 * an override only after every one without, and in local mode never (its
 * override would be lost: the new key is refused instead). A kq leaves
 * the list while held or referenced and goes back to its tail when the last
 * hold or ref ends, and a lookup of an idle kq moves it to the tail: every
 * touch is O(1), and the list's head is always evictable. And the mapping
 * of all of them onto a reloaded conf: scopes matched by name, each key's
 * limiter state carried limit by limit, classes re-pointed by name, removed
 * scopes retired (each in its own allocation, with the conf it came from kept
 * by reload.c) until their last lease is released.
 */

#include "scope.h"

#include "class_wait.h"
#include "clock.h"
#include "decider.h"
#include "log.h"
#include "tenant_ovr.h"

#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The idle-key sweep: a table is walked in this many slices (one a tick),
 * each of at least KQ_SWEEP_MIN buckets. */
#define KQ_SWEEP_SLICES 10
#define KQ_SWEEP_MIN	64

bool scopes_init(struct rt *ad)
{
	size_t i;

	TAILQ_INIT(&ad->idle_keys);
	TAILQ_INIT(&ad->kept_keys);
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

/*
 * What a kq holds besides its entry: its retry timer, what the deciders
 * remember of it, its limiter state. Its waiters are gone by then (a swept
 * or evicted kq has none; at exit waitq_free_all answered them). kq itself,
 * its key and its limiter state live in its key table's entry
 * (htab_put_inline).
 */
static void kq_free_parts(struct kq *kq)
{
	if (kq->retry_ev != NULL)
		event_free(kq->retry_ev);
	kq->retry_ev = NULL;
	kq->sc->ad->dec->forget(kq);
	tovr_lift(kq);
	if (kq->lim_ext) {
		lim_state_free(kq_lim(kq));
		kq->lim_ext = false;
		/* what is left in the entry is an empty state: freeing it twice is a no-op */
		memset((char *)kq + KQ_LIM_OFF, 0, sizeof(struct lim_state));
	} else {
		lim_state_clear(kq_lim(kq));
	}
}

static void kq_free_cb(void *arg UNUSED, const char *key UNUSED, void *val)
{
	kq_free_parts(val);
}

static void scope_free_keys(struct scope_rt *sc)
{
	if (sc->keys == NULL)
		return;
	htab_each(sc->keys, kq_free_cb, NULL);
	htab_free(sc->keys);
	class_wait_free(sc);
	sc->keys = NULL;
}

void scopes_free(struct rt *ad)
{
	size_t i;

	for (i = 0; i < ad->nscopes; i++)
		scope_free_keys(&ad->scopes[i]);
	free(ad->scopes);
	ad->scopes = NULL;
	while (ad->retired != NULL) {
		struct scope_rt *r = ad->retired;
		ad->retired = r->retired_next;
		scope_free_keys(r);
		free(r);
	}
}

struct scope_rt *scope_find(struct rt *ad, const char *name)
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
	struct rt *ad = kq->sc->ad;

	if (kq_idle_listed(kq))
		kq_idle_out(kq);
	kq_free_parts(kq);
	ad->nkeys--;
	htab_del(kq->sc->keys, kq->key); /* frees kq, which lives in the entry */
}

/* The latest end of kq's overrides in force (its own, its tenants' weights); 0: none. */
static int64_t kq_ovr_until(struct kq *kq, int64_t now)
{
	const struct lim_ovr *ov = lim_ovr_in_force(kq_lim(kq), kq->sc->cs, now);
	int64_t until = tovr_until(kq, now);

	return ov != NULL && ov->until > until ? ov->until : until;
}

/*
 * Idle kqs whose override has ended since eviction passed them over go back
 * to idle_keys (empty when this is called, so in the order they were
 * passed over), and kept_until becomes the earliest end of those left.
 */
static void kq_kept_ended(struct rt *ad, int64_t now)
{
	struct kq *kq, *nx;
	int64_t until;

	ad->kept_until = INT64_MAX;
	for (kq = TAILQ_FIRST(&ad->kept_keys); kq != NULL; kq = nx) {
		nx = TAILQ_NEXT(kq, idle_link);
		if ((until = kq_ovr_until(kq, now)) == 0) {
			kq_idle_out(kq);
			kq_idle_in(kq);
		} else if (until < ad->kept_until) {
			ad->kept_until = until;
		}
	}
}

/*
 * The idle kq max_keys evicts next, NULL when none may go. The least
 * recently used one without an override in force; each one passed over for
 * its override moves to kept_keys (idle still, and a lookup moves it back),
 * so it is looked at once, not at every eviction. Only when none is left
 * without one: those whose override has ended since (looked for once the
 * earliest end has passed), and then, with Redis only, the least recently
 * used under an override (Redis holds the override, for every daemon; this
 * kq only the copy its fallback uses, which the key's next call brings
 * back). In local mode the override is this kq's alone, so it stays, and
 * the new key is refused instead.
 */
static struct kq *kq_victim(struct rt *ad)
{
	int64_t now = clock_mono_ms(), until;
	struct kq *kq;

	while ((kq = TAILQ_FIRST(&ad->idle_keys)) != NULL) {
		if ((until = kq_ovr_until(kq, now)) == 0)
			return kq;
		if (TAILQ_EMPTY(&ad->kept_keys) || until < ad->kept_until)
			ad->kept_until = until;
		kq_idle_out(kq);
		TAILQ_INSERT_TAIL(&ad->kept_keys, kq, idle_link);
		kq->kept = true;
	}
	if (!TAILQ_EMPTY(&ad->kept_keys) && now >= ad->kept_until) {
		kq_kept_ended(ad, now);
		if ((kq = TAILQ_FIRST(&ad->idle_keys)) != NULL)
			return kq;
	}
	return ad->redis != NULL ? TAILQ_FIRST(&ad->kept_keys) : NULL;
}

struct kq *kq_get(struct scope_rt *sc, const char *key, bool *full)
{
	struct rt *ad = sc->ad;
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
		struct kq *victim = kq_victim(ad);
		if (victim == NULL) {
			if (full != NULL)
				*full = true;
			log_ratelimited(LOG_SLOT_KEYS, 1000,
					"max_keys reached and every key is in use or under an "
					"override: new keys refused",
					"max_keys=%lld kept_for_override=%s",
					(long long)ad->conf->max_keys,
					TAILQ_EMPTY(&ad->kept_keys) ? "no" : "yes");
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
	kq->lim_ext = false;
	/* an understated room only moves a reload's state out of the entry */
	kq->lim_cap = sc->cs->nrules > UINT16_MAX ? UINT16_MAX : (uint16_t)sc->cs->nrules;
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
	if (!lim_idle(kq_lim(kq), sw->sc->cs, sw->now) || tovr_until(kq, sw->now) > 0)
		return;
	kq_free(kq);
}

/* A retired scope's key goes as soon as nothing names it: its limits are gone. */
static void kq_sweep_retired_one(void *arg UNUSED, const char *key UNUSED, void *val)
{
	struct kq *kq = val;

	if (kq->nwait > 0 || kq->held > 0 || kq->busy || kq->refs > 0 || kq->pending > 0)
		return;
	kq_free(kq); /* off the idle list too; kq->sc is the retired scope, its table */
}

/* Free the retired scopes whose last key went. */
static void kq_sweep_retired(struct rt *ad)
{
	struct scope_rt **pp = &ad->retired;

	while (*pp != NULL) {
		struct scope_rt *r = *pp;
		htab_each(r->keys, kq_sweep_retired_one, NULL);
		if (htab_count(r->keys) > 0) {
			pp = &r->retired_next;
			continue;
		}
		log_info("removed scope finished", "scope=%s", r->cs->name);
		*pp = r->retired_next;
		htab_free(r->keys);
		class_wait_free(r);
		free(r);
	}
}

void kq_sweep(struct rt *ad)
{
	struct sweep_ctx sw = { .now = clock_mono_ms() };
	size_t i;

	if (ad->retired != NULL)
		kq_sweep_retired(ad);

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

/* ---- reload ------------------------------------------------------------ */

/* What scopes_reload prepares before it changes anything. */
struct scope_swap {
	const struct conf *nc;
	struct scope_rt *ns;	   /* nc's scopes, to become ad->scopes */
	size_t *from;		   /* ns[i] is old scope from[i]; SIZE_MAX: new */
	struct scope_rt **retire;  /* by old index: the allocation it retires into */
	struct lim_state **ext;	   /* states for keys outgrowing their entry, in walk order */
	size_t next, used;	   /* how many there are, how many were handed out */
	struct lim_state *scratch; /* in-place carries go through this */
	/* the scope being walked */
	struct scope_rt *sc;
	const struct conf_scope *ocs, *ncs;
};

static void *kq_lim_inline(struct kq *kq)
{
	return (char *)kq + KQ_LIM_OFF;
}

static void scope_swap_count_ext(void *arg, const char *key UNUSED, void *val)
{
	struct scope_swap *p = arg;
	struct kq *kq = val;

	if (p->ncs->nrules > kq->lim_cap)
		p->next++;
}

/* One kept key: re-pointed at its new scope, its limiter state carried. */
static void scope_swap_carry_kq(void *arg, const char *key UNUSED, void *val)
{
	struct scope_swap *p = arg;
	struct kq *kq = val;
	struct lim_state *old = kq_lim(kq), *dst;
	bool ext = p->ncs->nrules > kq->lim_cap;

	/* The same walk as scope_swap_count_ext's, so there is one state each. */
	dst = ext ? p->ext[p->used++] : p->scratch;
	lim_state_init(dst, p->ncs);
	lim_state_carry(dst, p->ncs, old, p->ocs);
	if (kq->lim_ext)
		lim_state_free(old);
	else
		lim_state_clear(old); /* what was not carried */
	if (ext)		      /* the entry keeps a pointer to it where the state was */
		memcpy(kq_lim_inline(kq), &dst, sizeof(dst));
	else
		memcpy(kq_lim_inline(kq), dst, lim_state_size(p->ncs)); /* its arrays move too */
	kq->lim_ext = ext;
	kq->sc = p->sc;
	kq->sc->ad->dec->forget(kq); /* decided under the old conf, whose strings go with it */
}

static void scope_swap_repoint_kq(void *arg, const char *key UNUSED, void *val)
{
	struct kq *kq = val;

	kq->sc = arg;
	kq->sc->ad->dec->forget(kq); /* decided under the old conf */
}

/* The class of the same name in cs (*gone set when there is none). */

static void scope_swap_free(struct scope_swap *p, size_t nold)
{
	size_t i;

	for (i = p->used; p->ext != NULL && i < p->next; i++)
		free(p->ext[i]);
	free(p->ext);
	for (i = 0; p->retire != NULL && i < nold; i++)
		free(p->retire[i]);
	free(p->retire);
	/* a new scope's table (from[] is SIZE_MAX for it; not yet set: 0, and no table) */
	for (i = 0; p->ns != NULL && p->from != NULL && i < p->nc->nscopes; i++)
		if (p->from[i] == SIZE_MAX && p->ns[i].keys != NULL)
			htab_free(p->ns[i].keys);
	free(p->ns);
	free(p->from);
	free(p->scratch);
}

/* Everything that can fail, before anything changes. */
static bool scope_swap_prepare(struct rt *ad, struct scope_swap *p)
{
	const struct conf *nc = p->nc;
	size_t i, j, nmax = 1, size;
	bool *kept = calloc(ad->nscopes + 1, sizeof(*kept)), ok = false;

	p->ns = calloc(nc->nscopes + 1, sizeof(*p->ns));
	p->from = calloc(nc->nscopes + 1, sizeof(*p->from));
	p->retire = calloc(ad->nscopes + 1, sizeof(*p->retire));
	if (kept == NULL || p->ns == NULL || p->from == NULL || p->retire == NULL)
		goto done;
	for (i = 0; i < nc->nscopes; i++) {
		p->from[i] = SIZE_MAX;
		if (nc->scopes[i].nrules > nmax)
			nmax = nc->scopes[i].nrules;
		for (j = 0; j < ad->nscopes; j++)
			if (strcmp(ad->scopes[j].cs->name, nc->scopes[i].name) == 0)
				break;
		if (j < ad->nscopes) {
			p->from[i] = j;
			kept[j] = true;
			p->ncs = &nc->scopes[i];
			htab_each(ad->scopes[j].keys, scope_swap_count_ext, p);
		} else if ((p->ns[i].keys = htab_new()) == NULL) {
			goto done;
		}
	}
	for (j = 0; j < ad->nscopes; j++)
		if (!kept[j] && (p->retire[j] = malloc(sizeof(**p->retire))) == NULL)
			goto done;
	/* Each state is sized for the largest scope: which key takes which
	 * is only known on the walk that carries them. */
	size = sizeof(struct lim_state) + nmax * sizeof(struct strat_state);
	if (p->next > 0 && (p->ext = calloc(p->next, sizeof(*p->ext))) == NULL)
		goto done;
	for (i = 0; i < p->next; i++) {
		if ((p->ext[i] = calloc(1, size)) == NULL) {
			p->next = i; /* free only these */
			goto done;
		}
	}
	ok = (p->scratch = calloc(1, size)) != NULL;
done:
	free(kept);
	return ok;
}

bool scopes_reload(struct rt *ad, const struct conf *nc)
{
	struct scope_swap p = { .nc = nc };
	struct scope_rt *r;
	size_t i, j, nold = ad->nscopes;

	if (!scope_swap_prepare(ad, &p)) {
		scope_swap_free(&p, nold);
		return false;
	}
	/* Nothing fails from here on. */
	for (i = 0; i < nc->nscopes; i++) {
		struct scope_rt *sc = &p.ns[i];

		if (p.from[i] != SIZE_MAX) {
			*sc = ad->scopes[p.from[i]]; /* its keys and counters */
			p.ocs = sc->cs;
		}
		sc->ad = ad;
		sc->cs = &nc->scopes[i];
		sc->idx = i;
		sc->retired = false;
		sc->retired_next = NULL;
		if (p.from[i] != SIZE_MAX) {
			p.sc = sc;
			p.ncs = sc->cs;
			htab_each(sc->keys, scope_swap_carry_kq, &p);
		}
	}
	for (j = 0; j < nold; j++) {
		if ((r = p.retire[j]) == NULL)
			continue;
		p.retire[j] = NULL;
		*r = ad->scopes[j];
		r->retired = true;
		r->retired_next = ad->retired;
		ad->retired = r;
		htab_each(r->keys, scope_swap_repoint_kq, r);
		log_info("scope removed: its waiters are answered, its leases stay releasable",
			 "scope=%s leases=%lld waiting=%lld", r->cs->name, (long long)r->leases,
			 (long long)r->waiting);
	}
	free(ad->scopes);
	ad->scopes = p.ns;
	ad->nscopes = nc->nscopes;
	p.ns = NULL;
	/* override_max or the rules changed: which overrides are in force is
	 * for the next eviction to look at again */
	ad->kept_until = INT64_MIN;
	scope_swap_free(&p, nold);
	return true;
}

bool scopes_points_into(const struct rt *ad, const struct conf *c)
{
	const struct scope_rt *r;

	for (r = ad->retired; r != NULL; r = r->retired_next)
		if (r->cs >= c->scopes && r->cs < c->scopes + c->nscopes)
			return true;
	return false;
}
