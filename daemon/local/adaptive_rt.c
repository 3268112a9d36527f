/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * adaptive_rt.c - adaptive amounts at run time (adaptive_rt.h).
 *
 * Owns: nothing allocated. Reads and writes the adaptive part of keys'
 * in-process states; the replies it fills belong to their callers.
 */

#include "adaptive_rt.h"

#include "decider.h"
#include "lease.h"
#include "scope.h"

static void adrt_apply(struct kq *kq, enum adapt_outcome o, int64_t now)
{
	const struct conf_scope *cs = kq->sc->cs;

	if (cs->adaptive && (o == ADAPT_OK || o == ADAPT_LIMITED))
		adapt_apply(&kq_lim(kq)->ad, &cs->adapt, now, o);
}

bool adrt_sends(const struct lease *l)
{
	size_t i;

	if (l->outcome != ADAPT_OK && l->outcome != ADAPT_LIMITED)
		return false;
	for (i = 0; i < l->nt; i++)
		if (l->t[i].kq->sc->cs->adaptive)
			return true;
	return false;
}

void adrt_release_local(struct lease *l, bool sent, int64_t now)
{
	size_t i;

	if (sent)
		return;
	for (i = 0; i < l->nt; i++)
		adrt_apply(l->t[i].kq, (enum adapt_outcome)l->outcome, now);
}

void adrt_penalize_local(struct kq *kq, bool sent, int64_t now)
{
	if (!sent)
		adrt_apply(kq, ADAPT_LIMITED, now);
}

void adrt_mirror(struct kq *kq, int64_t amt)
{
	const struct conf_scope *cs = kq->sc->cs;

	if (!cs->adaptive || amt <= 0)
		return;
	kq_lim(kq)->ad = (struct adapt_state){ .amt = amt >= cs->adapt.ceil ? 0 : amt };
}

struct adrt_sum {
	const struct conf_scope *cs;
	int64_t sum;
	size_t n;
};

static void adrt_sum_key(void *arg, const char *key, void *val)
{
	struct adrt_sum *s = arg;
	struct kq *kq = val;

	(void)key;
	s->sum += adapt_amount(&kq_lim(kq)->ad, &s->cs->adapt);
	s->n++;
}

bool adrt_scope_mean(const struct scope_rt *sc, int64_t *mean_milli, size_t *nkeys)
{
	struct adrt_sum s = { .cs = sc->cs };

	if (!sc->cs->adaptive)
		return false;
	htab_each(sc->keys, adrt_sum_key, &s);
	*nkeys = s.n;
	*mean_milli = s.n > 0 ? s.sum / (int64_t)s.n : sc->cs->adapt.ceil;
	return true;
}

/* The range of cs in whole units of its first requests rule. */
static void adrt_range(struct preply *r, const struct conf_scope *cs)
{
	preply_int(r, "ceiling", cs->adapt.ceil / 1000);
	preply_int(r, "floor_milli", cs->adapt.floor);
}

void adrt_status(struct preply *r, struct scope_rt *sc)
{
	int64_t mean;
	size_t n;

	if (!adrt_scope_mean(sc, &mean, &n))
		return;
	preply_push(r, "adaptive");
	preply_int(r, "amount", mean / 1000);
	preply_int(r, "amount_milli", mean);
	adrt_range(r, sc->cs);
	preply_int(r, "keys", (int64_t)n);
	preply_pop(r);
}

void adrt_inspect(struct preply *r, const struct conf_scope *cs, const struct eng_insp *in)
{
	int64_t amt;

	if (!cs->adaptive)
		return;
	amt = adapt_amount(&in->ad, &cs->adapt);
	preply_push(r, "adaptive");
	preply_int(r, "amount", amt / 1000);
	preply_int(r, "amount_milli", amt);
	adrt_range(r, cs);
	/* Instants this limiter's clock did not stamp (an amount mirrored from
	 * Redis, seen in fallback) are unknown: left out. */
	if (in->ad.tc > 0 && in->now >= in->ad.tc)
		preply_int(r, "changed_ms_ago", in->now - in->ad.tc);
	if (in->ad.td > 0 && in->now >= in->ad.td)
		preply_int(r, "decreased_ms_ago", in->now - in->ad.td);
	if (in->ad.tl > 0 && in->now >= in->ad.tl)
		preply_int(r, "limited_ms_ago", in->now - in->ad.tl);
	preply_pop(r);
}

struct lim_share adrt_inspect_share(const struct conf_scope *cs, const struct eng_insp *in,
				    struct lim_share div)
{
	if (cs->adaptive) {
		div.ad_amt = adapt_amount(&in->ad, &cs->adapt);
		div.ad_ceil = cs->adapt.ceil;
	}
	return div;
}
