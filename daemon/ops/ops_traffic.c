/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * ops_traffic.c - the ops on a call's path: acquire, release, penalize.
 *
 * Owns: op_acquire, which turns a request into a waiter (waitq.c); op_release,
 * which settles a lease this daemon issued (lease.c) or one it did not
 * through the backend, and says why a release changed nothing; and
 * op_penalize, which holds the targets' keys back (engine.c).
 */

#include "ops_int.h"

#include "clock.h"
#include "engine.h"

#include <stdlib.h>
#include <string.h>

void op_acquire(struct client *c, struct request *rq)
{
	char msg[256];
	const struct conf_scope *cs;
	struct meter_tokens rs[PROTO_MAX_TOKENS];
	struct waiter *w;
	int64_t timeout;
	size_t i;

	if (c->ad->shutting_down) {
		ops_error(c, rq, ADMIT_E_SHUTTING_DOWN, NULL);
		return;
	}
	/* Refused before it makes a key or a waiter: a flood of acquires past
	 * max_leases costs nothing kept (waitq_pump checks again for waiters). */
	if (lease_full(c->ad, msg, sizeof(msg))) {
		struct scope_rt *sc = scope_find(c->ad, rq->targets[0].scope);
		if (sc != NULL) {
			sc->refused++;
			sc->outcome[ADMIT_E_UNAVAILABLE]++;
		}
		ops_error(c, rq, ADMIT_E_UNAVAILABLE, msg);
		return;
	}
	w = waitq_new();
	if (w == NULL) {
		ops_error(c, rq, ADMIT_E_UNAVAILABLE, "out of memory");
		return;
	}
	if (!ops_targets(c, rq, w->t)) {
		free(w);
		return;
	}
	w->nt = rq->ntargets;
	cs = w->t[0].kq->sc->cs;
	timeout = rq->has_timeout ? rq->timeout_ms : cs->timeout_ms;
	w->conn = c;
	w->id = rq->id; /* the waiter owns the id from here */
	rq->id = NULL;
	w->detach = rq->detach;
	w->no_lease = rq->no_lease;
	memcpy(w->tenant, rq->tenant, sizeof(w->tenant));
	for (i = 0; i < rq->nreserve; i++) {
		rs[i].name = rq->reserve[i].name;
		rs[i].n = rq->reserve[i].n;
	}
	w->reserve = meter_tokens_dup(rs, rq->nreserve, &w->nreserve);
	if (w->nreserve != rq->nreserve) {
		rq->id = w->id; /* the error reply carries it */
		free(w);
		ops_error(c, rq, ADMIT_E_UNAVAILABLE, "out of memory");
		return;
	}
	w->try_only = timeout == 0;
	w->start_ms = clock_mono_ms();
	w->deadline_ms = w->start_ms + timeout;
	waitq_add(w);
}

/* A release that changed nothing: say why, as a repeat answers. */
static void ops_release_nothing(struct preply *r, bool repeat, bool mismatch)
{
	preply_bool(r, "held", false);
	preply_bool(r, "settled", false);
	if (repeat)
		preply_bool(r, "repeat", true);
	preply_str(r, "message",
		   repeat ? "already released: nothing changed"
		   : mismatch
		       ? "this handle is not the one issued (a target's scope, class or key, "
			 "or the reservation, differs from the lease's record): nothing "
			 "changed"
		       : "no lease to settle under this handle (already released, expired a "
			 "lease_ttl ago, or never issued): nothing changed");
}

/* The answer to a release of a lease this daemon did not issue. */
static void op_release_ref_done(void *arg, const struct eng_settled *st)
{
	struct op_pend *p = arg;
	struct preply *r;

	if (st->unavailable || st->unknown) {
		r = preply_error(p->id, ADMIT_E_UNAVAILABLE,
				 st->unknown
				     ? "redis took the release but its answer was lost: "
				       "release again (a repeat changes nothing)"
				     : "redis cannot be asked now, and only it can vouch for "
				       "a lease another admitd issued: release again later");
	} else {
		r = preply_new(p->id, true);
		if (st->settled)
			preply_bool(r, "held", st->held);
		else
			ops_release_nothing(r, st->repeat, st->mismatch);
	}
	ops_pend_done(p, r);
}

/* Count a release once in each scope its targets name (NULL: not in the conf). */
static void ops_count_release(struct scope_rt *const *scs, size_t n)
{
	size_t i, j;

	for (i = 0; i < n; i++) {
		for (j = 0; j < i && scs[j] != scs[i]; j++)
			;
		if (scs[i] != NULL && j == i)
			scs[i]->releases++;
	}
}

/*
 * release: the handle is resolved (lease.c): a lease this daemon issued is
 * settled from its own record, at once; a handle of another daemon's lease
 * (or of this one's before a restart) is settled through Redis, which
 * alone can vouch for it (engine.c); anything else changes nothing. Token
 * names no target meters are refused before anything is settled.
 */
void op_release(struct client *c, struct request *rq)
{
	const struct conf_scope *cs[PROTO_MAX_TARGETS];
	const struct conf_class *cl[PROTO_MAX_TARGETS];
	struct scope_rt *scs[PROTO_MAX_TARGETS];
	struct meter_tokens tk[PROTO_MAX_TOKENS];
	/* written only when the handle is another daemon's (lease_resolve),
	 * and read before op_release returns (eng_release_ref copies it):
	 * on the stack, not the heap (6 KB, past glibc's per-thread cache) */
	struct lease_ref ref_mem, *ref = &ref_mem;
	struct op_pend *p;
	struct preply *r;
	struct lease *l;
	const char *bad;
	bool foreign;
	size_t i, n = 0;

	l = lease_resolve(c->ad, rq->lease, ref, &foreign);
	if (l != NULL) {
		for (i = 0; i < l->nt; i++) {
			scs[i] = l->t[i].kq->sc;
			cs[n] = scs[i]->cs;
			cl[n++] = l->t[i].cls;
		}
	} else if (foreign) {
		for (i = 0; i < ref->nt; i++) {
			scs[i] = scope_find(c->ad, ref->t[i].scope);
			if (scs[i] == NULL)
				continue;
			cs[n] = scs[i]->cs;
			cl[n] = ref->t[i].cls[0] ? conf_class_find(cs[n], ref->t[i].cls) : NULL;
			n++;
		}
	}
	if ((l != NULL || foreign) &&
	    (bad = ops_meter_unknown(cs, cl, n, rq->tokens, rq->ntokens)) != NULL) {
		ops_meter_error(c, rq, "tokens", bad);
		return;
	}
	if (l != NULL || !foreign) {
		r = preply_new(rq->id, true);
		if (l != NULL) {
			bool held = !l->expired;
			ops_count_release(scs, l->nt);
			l->outcome = rq->outcome;
			lease_release(l, rq->tokens, rq->ntokens);
			preply_bool(r, "held", held);
		} else {
			ops_release_nothing(r, false, false);
		}
		client_reply(c, r);
		return;
	}
	ops_count_release(scs, ref->nt);
	if ((p = ops_pend(c, rq)) == NULL)
		return;
	for (i = 0; i < rq->ntokens; i++) {
		tk[i].name = rq->tokens[i].name;
		tk[i].n = rq->tokens[i].n;
	}
	eng_release_ref(c->ad, ref, tk, rq->ntokens, op_release_ref_done, p);
}

void op_penalize(struct client *c, struct request *rq)
{
	struct target_rt t[PROTO_MAX_TARGETS];
	int64_t delay = rq->penalty_ms;
	struct preply *r;
	size_t i;

	if (!ops_targets(c, rq, t))
		return;
	for (i = 0; i < rq->ntargets; i++) {
		size_t j;
		for (j = 0; j < i && t[j].kq->sc != t[i].kq->sc; j++)
			;
		if (j == i)
			t[i].kq->sc->penalties++;
	}
	if (delay < 0) /* an HTTP-date: as bounded as the other forms */
		delay = rq->penalty_until_wall_ms - clock_wall_ms();
	if (delay > PROTO_MAX_TIMEOUT_MS)
		delay = PROTO_MAX_TIMEOUT_MS;
	for (i = 0; i < rq->ntargets; i++) /* a penalty of nothing still says "limited" */
		if (delay > 0 || t[i].kq->sc->cs->adaptive)
			eng_penalize(t[i].kq, delay > 0 ? delay : 0);
	r = preply_new(rq->id, true);
	preply_int(r, "penalty_ms", delay > 0 ? delay : 0);
	client_reply(c, r);
}
