/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * waitq_show.c - the wait queues as the operator sees them (waitq_show.h):
 * a key's classes in the order their heads are asked, each with its
 * waiters, its virtual time V and its tenant flows (fairq.h); and the
 * (scope, key, class) with the most waiters. Reads the queues, changes
 * nothing but expired tenant weights (tenant_ovr.c drops them as it reads).
 *
 * One class of inspect's "queue":
 *   {"class":C,"priority":P,"waiters":N,"v":V,"tenants":[
 *     {"tenant":T,"weight":W,"waiters":N,"next_start":S},...]}
 * class "" is the acquires without one; the shared flow of every tenant
 * without a weight is {"tenant":"default","shared":true,...}. "v" and
 * "next_start" are absent when the class's waiters carry no tags (a scope
 * with no `weight` line and no tenant weight set: arrival order).
 */

#include "waitq_show.h"

#include "scope.h"
#include "tenant_ovr.h"
#include "waitq_int.h"

#include <string.h>

/* Waiters of class cls queued on kq. */
static uint32_t waitq_show_count(const struct kq *kq, const struct conf_class *cls)
{
	const struct waiter *x;
	uint32_t n = 0;

	TAILQ_FOREACH (x, &kq->waiters, kq_link)
		n += x->t[0].cls == cls;
	return n;
}

/* cls's fair-queuing state on kq, NULL when its waiters are untagged. */
static struct fairq_cls *waitq_show_fq(const struct kq *kq, const struct conf_class *cls)
{
	const char *name = cls != NULL ? cls->name : "";
	struct fairq_cls *c;

	for (c = kq->fq; c != NULL && strcmp(c->cls, name) != 0; c = c->next)
		;
	return c;
}

/* The start tag of the first waiter of flow slot in c: its next to go. */
static const struct waiter *waitq_show_next(const struct kq *kq, const struct fairq_cls *c,
					    int slot)
{
	const struct waiter *x;

	TAILQ_FOREACH (x, &kq->waiters, kq_link)
		if (x->fq == c && x->fq_slot == slot)
			return x;
	return NULL;
}

static void waitq_show_flow(struct preply *r, struct kq *kq, const struct fairq_cls *c, int slot)
{
	const struct fairq_flow *fl = &c->flows[slot];
	const struct waiter *nx = waitq_show_next(kq, c, slot);
	int weight = 1;

	preply_item(r);
	if (slot == 0) {
		preply_str(r, "tenant", "default");
		preply_bool(r, "shared", true);
	} else {
		preply_str(r, "tenant", fl->tenant);
		(void)tovr_flow(kq, fl->tenant, &weight);
	}
	preply_int(r, "weight", weight);
	preply_int(r, "waiters", fl->n);
	if (nx != NULL)
		preply_double(r, "next_start", nx->fq_s);
	preply_pop(r);
}

void waitq_show_queue(struct preply *r, struct kq *kq)
{
	struct waitq_heads h;
	size_t i;
	int slot;

	waitq_heads(kq, &h);
	preply_list(r, "queue");
	for (i = 0; i < h.n; i++) {
		const struct conf_class *cls = h.w[i]->t[0].cls;
		struct fairq_cls *c = waitq_show_fq(kq, cls);
		uint32_t n = waitq_show_count(kq, cls);

		preply_item(r);
		preply_str(r, "class", cls != NULL ? cls->name : "");
		preply_int(r, "priority", cls != NULL ? cls->priority : 0);
		preply_int(r, "waiters", n);
		if (c != NULL)
			preply_double(r, "v", c->v);
		preply_list(r, "tenants");
		if (c == NULL) { /* untagged: one flow, in arrival order */
			preply_item(r);
			preply_str(r, "tenant", "default");
			preply_bool(r, "shared", true);
			preply_int(r, "weight", 1);
			preply_int(r, "waiters", n);
			preply_pop(r);
		}
		for (slot = 0; c != NULL && slot < FAIRQ_FLOWS; slot++)
			if (c->flows[slot].used && c->flows[slot].n > 0)
				waitq_show_flow(r, kq, c, slot);
		preply_pop(r);
		preply_pop(r);
	}
	preply_pop(r);
}

/* One (scope, key, class) of "contended". */
struct waitq_hot {
	const struct kq *kq;
	const struct conf_class *cls;
	uint32_t waiters, tenants;
};

struct waitq_top {
	struct waitq_hot e[WAITQ_SHOW_TOP];
	size_t n;
};

/* Does a go before b: more waiters, then scope, key and class by name. */
static bool waitq_hot_before(const struct waitq_hot *a, const struct waitq_hot *b)
{
	int d;

	if (a->waiters != b->waiters)
		return a->waiters > b->waiters;
	if ((d = strcmp(a->kq->sc->cs->name, b->kq->sc->cs->name)) != 0)
		return d < 0;
	if ((d = strcmp(a->kq->key, b->kq->key)) != 0)
		return d < 0;
	return strcmp(a->cls != NULL ? a->cls->name : "", b->cls != NULL ? b->cls->name : "") < 0;
}

static void waitq_top_add(struct waitq_top *t, const struct waitq_hot *x)
{
	size_t j;

	if (t->n == WAITQ_SHOW_TOP && !waitq_hot_before(x, &t->e[t->n - 1]))
		return;
	if (t->n < WAITQ_SHOW_TOP)
		t->n++;
	for (j = t->n - 1; j > 0 && waitq_hot_before(x, &t->e[j - 1]); j--)
		t->e[j] = t->e[j - 1];
	t->e[j] = *x;
}

static void waitq_top_key(void *arg, const char *key, void *val)
{
	struct waitq_top *t = arg;
	struct kq *kq = val;
	struct waitq_heads h;
	size_t i;
	int slot;

	(void)key;
	if (kq->nwait == 0)
		return;
	waitq_heads(kq, &h);
	for (i = 0; i < h.n; i++) {
		struct waitq_hot x = { .kq = kq, .cls = h.w[i]->t[0].cls };
		const struct fairq_cls *c = waitq_show_fq(kq, x.cls);
		x.waiters = waitq_show_count(kq, x.cls);
		x.tenants = c == NULL;
		for (slot = 0; c != NULL && slot < FAIRQ_FLOWS; slot++)
			x.tenants += c->flows[slot].used && c->flows[slot].n > 0;
		waitq_top_add(t, &x);
	}
}

void waitq_show_contended(struct preply *r, struct rt *ad)
{
	struct waitq_top t = { .n = 0 };
	size_t i;

	for (i = 0; i < ad->nscopes; i++)
		if (ad->scopes[i].waiting > 0)
			htab_each(ad->scopes[i].keys, waitq_top_key, &t);
	preply_list(r, "contended");
	for (i = 0; i < t.n; i++) {
		preply_item(r);
		preply_str(r, "scope", t.e[i].kq->sc->cs->name);
		preply_str(r, "key", t.e[i].kq->key);
		preply_str(r, "class", t.e[i].cls != NULL ? t.e[i].cls->name : "");
		preply_int(r, "waiters", t.e[i].waiters);
		preply_int(r, "tenants", t.e[i].tenants);
		preply_pop(r);
	}
	preply_pop(r);
}
