/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * waitq_all.c - every key's queue at once: after a reload (waiters
 * re-pointed at the new conf, or answered when their scope or class is
 * gone; every head asks again), at shutdown, at exit, and a key whose lease
 * slot was freed (rt->slot_freed).
 */

#include "waitq_int.h"

#include "clock.h"
#include "lease.h"
#include "log.h"
#include "scope.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>

/*
 * The queues after a reload. scopes_reload has mapped the scopes and keys
 * onto nc (the running conf is still oc).
 */
struct waitq_reload_walk {
	const struct conf *oc, *nc;
};

/*
 * A waiter's last refusal names a rule: when the text is the old conf's,
 * the same text in the new one, or NULL (its timeout then blames the head
 * or the queue). Static names are kept.
 */
static const char *waitq_rule_text(const struct conf *oc, const struct conf *nc, const char *s)
{
	size_t i, j;

	if (s == NULL)
		return NULL;
	for (i = 0; i < oc->nscopes; i++) {
		const struct conf_scope *o = &oc->scopes[i], *n;
		bool ours = s == o->quota_text;

		for (j = 0; !ours && j < o->nrules; j++)
			ours = s == o->rules[j].text || s == o->rules[j].name;
		if (!ours)
			continue;
		if ((n = conf_scope_find(nc, o->name)) == NULL)
			return NULL;
		if (n->quota_text != NULL && strcmp(n->quota_text, s) == 0)
			return n->quota_text;
		for (j = 0; j < n->nrules; j++) {
			if (strcmp(n->rules[j].text, s) == 0)
				return n->rules[j].text;
			if (n->rules[j].name != NULL && strcmp(n->rules[j].name, s) == 0)
				return n->rules[j].name;
		}
		return NULL;
	}
	return s;
}

/*
 * The waiters queued on one key: re-pointed at the new conf (a retired
 * scope's target keeps its class: that conf stays with it), and answered
 * when they cannot go on because a scope or class they name is gone. A
 * waiter whose client left is only waiting for its decision: re-pointed.
 */
static void waitq_reload_kq(void *arg, const char *key UNUSED, void *val)
{
	struct waitq_reload_walk *rw = arg;
	struct kq *kq = val;
	struct waiter *w, *nx;
	char msg[200];

	for (w = TAILQ_FIRST(&kq->waiters); w != NULL; w = nx) {
		const char *gone_scope = NULL, *gone_class = NULL;
		size_t i;

		nx = TAILQ_NEXT(w, kq_link);
		for (i = 0; i < w->nt; i++) {
			struct scope_rt *sc = w->t[i].kq->sc;
			const char *name = w->t[i].cls ? w->t[i].cls->name : "";

			if (sc->retired) {
				if (gone_scope == NULL)
					gone_scope = sc->cs->name;
				continue;
			}
			if (gone_class == NULL && w->t[i].cls != NULL &&
			    conf_class_find(sc->cs, name) == NULL) {
				snprintf(
				    msg, sizeof(msg),
				    "scope \"%s\" has no class \"%s\" since the conf was reloaded",
				    sc->cs->name, name);
				gone_class = msg;
			}
			w->t[i].cls = w->t[i].cls != NULL ? conf_class_find(sc->cs, name) : NULL;
		}
		w->last_rule = waitq_rule_text(rw->oc, rw->nc, w->last_rule);
		w->left.nm = 0; /* its meters name the old conf: the next decision tells */
		if (w->conn == NULL)
			continue;
		if (gone_scope != NULL) {
			snprintf(msg, sizeof(msg),
				 "no scope \"%s\" in the conf since it was reloaded", gone_scope);
			waitq_abort(w, ADMIT_E_UNKNOWN_SCOPE, msg);
		} else if (gone_class != NULL) {
			waitq_abort(w, ADMIT_E_BAD_REQUEST, gone_class);
		}
	}
}

void waitq_reload(struct rt *ad, const struct conf *oc, const struct conf *nc)
{
	struct waitq_reload_walk rw = { .oc = oc, .nc = nc };
	const struct scope_rt *r;
	size_t i;

	for (i = 0; i < ad->nscopes; i++)
		htab_each(ad->scopes[i].keys, waitq_reload_kq, &rw);
	for (r = ad->retired; r != NULL; r = r->retired_next)
		htab_each(r->keys, waitq_reload_kq, &rw);
}

static void waitq_wake_kq(void *arg UNUSED, const char *key UNUSED, void *val)
{
	struct kq *kq = val;

	if (TAILQ_EMPTY(&kq->waiters) || kq->busy)
		return;
	/* A head asleep on a refusal asks again now: a raised limit may admit it. */
	if (kq->wake_at != 0 && kq->retry_ev != NULL && event_del(kq->retry_ev) != 0) {
		log_warn("cannot wake a waiting key after the reload: it asks at its time",
			 "scope=%s", kq->sc->cs->name);
		return;
	}
	kq->wake_at = 0;
	waitq_pump(kq);
}

void waitq_wake_all(struct rt *ad)
{
	size_t i;

	for (i = 0; i < ad->nscopes; i++)
		htab_each(ad->scopes[i].keys, waitq_wake_kq, NULL);
}

static void waitq_shutdown_cb(void *arg UNUSED, const char *key UNUSED, void *val)
{
	waitq_shutdown(val);
}

void waitq_shutdown_all(struct rt *ad)
{
	size_t i;

	for (i = 0; i < ad->nscopes; i++)
		htab_each(ad->scopes[i].keys, waitq_shutdown_cb, NULL);
}

static void waitq_free_kq(void *arg UNUSED, const char *key UNUSED, void *val)
{
	struct kq *kq = val;

	while (!TAILQ_EMPTY(&kq->waiters)) {
		struct waiter *w = TAILQ_FIRST(&kq->waiters);
		kq->busy = false;
		waitq_remove(w);
	}
}

void waitq_free_all(struct rt *ad)
{
	const struct scope_rt *r;
	size_t i;

	for (i = 0; i < ad->nscopes; i++)
		htab_each(ad->scopes[i].keys, waitq_free_kq, NULL);
	for (r = ad->retired; r != NULL; r = r->retired_next)
		htab_each(r->keys, waitq_free_kq, NULL);
	waitq_spares_free();
}

void waitq_slot_freed(struct kq *kq)
{
	/*
	 * A slot is free: the head may go now, not at its next poll. With Redis
	 * only a head waiting for a slot is woken; one sleeping out a pacing or
	 * budget wait would spend a round trip to hear the same answer.
	 */
	if (kq->wake_at != 0 && kq->retry_ev != NULL &&
	    (kq->sc->ad->redis == NULL || kq->slot_wait)) {
		event_del(kq->retry_ev);
		kq->wake_at = 0;
	}
	waitq_pump(kq);
}
