/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rb_release.c - the Redis backend's releases.
 *
 * Owns: a lease's release, outcome report and release by reference
 * (backend_release, backend_outcome, backend_release_ref): the record of
 * the targets that need a call (rb_rel_of), with the tokens, reservation and
 * handle body its settlement binds, sent at once or queued (rb_queue.c).
 */

#include "backend_int.h"

#include "clock.h"

#include <stdlib.h>
#include <string.h>

/*
 * What r settles: copies of the tokens reported and of the reservation,
 * and the body of the lease's handle (what its settlement record binds).
 * false when memory runs out.
 */
static bool rb_rel_settle(struct rb_rel *r, const struct meter_tokens *tokens, size_t ntokens,
			  const struct meter_tokens *reserve, size_t nreserve, const char *body)
{
	r->tokens = meter_tokens_dup(tokens, ntokens, &r->ntokens);
	r->reserve = meter_tokens_dup(reserve, nreserve, &r->nreserve);
	if (body != NULL && (r->body = strdup(body)) == NULL)
		return false;
	r->bytes += (ntokens + nreserve) * (sizeof(struct meter_tokens) + PROTO_NAME_MAX + 1) +
		    (body != NULL ? strlen(body) + 1 : 0);
	return r->ntokens == ntokens && r->nreserve == nreserve;
}

/* A release record for lease l (targets that need a call only). */
struct rb_rel *rb_rel_of(struct backend *b, const struct lease *l, enum rb_mode mode, enum rb_op op)
{
	struct rb_rel *r = rb_rel_new(b, mode, op, l->id);
	size_t i;

	if (r == NULL)
		return NULL;
	for (i = 0; i < l->nt; i++)
		if (!rb_rel_target(r, l->t[i].kq->sc->cs, l->t[i].cls, l->t[i].kq->key)) {
			rb_rel_free(r);
			return NULL;
		}
	r->own = true;
	if (!rb_rel_settle(r, NULL, 0, l->reserve, l->nreserve, strchr(l->handle, '.') + 1)) {
		rb_rel_free(r);
		return NULL;
	}
	return r;
}

bool backend_release(struct backend *b, struct lease *l, const struct meter_tokens *tokens,
		     size_t ntokens)
{
	struct rb_rel *r;
	int64_t now = clock_mono_ms();

	if (b->closing)
		return false;
	r = rb_rel_of(b, l, RB_M_RELEASE, RB_OP_RELEASE);
	if (r != NULL &&
	    (r->tokens = meter_tokens_dup(tokens, ntokens, &r->ntokens), r->ntokens) != ntokens) {
		rb_rel_free(r);
		r = NULL;
	}
	if (r == NULL) {
		rb_failed(b, RB_OP_RELEASE, RP_CONN, NULL);
		return false;
	}
	r->bytes += ntokens * (sizeof(struct meter_tokens) + PROTO_NAME_MAX + 1);
	r->outcome = l->outcome;
	/* A lease a late script may still book must not be released before
	 * that script's bound: the release could land first. */
	if (l->redis_maybe && l->redis_after > now) {
		rb_queue(b, r, l->redis_after);
		return false;
	}
	if (rb_rel_send(r))
		return true;
	b->errors[RB_OP_RELEASE]++;
	rb_queue(b, r, 0);
	return false;
}

bool backend_outcome(struct backend *b, struct lease *l)
{
	struct rb_rel *r;

	if (b->closing || !b->up || !rpool_up(b->pool))
		return false;
	if ((r = rb_rel_of(b, l, RB_M_RELEASE, RB_OP_RELEASE)) == NULL) {
		rb_failed(b, RB_OP_RELEASE, RP_CONN, NULL);
		return false;
	}
	r->outcome = l->outcome;
	r->outcome_only = true;
	if (rb_rel_send(r))
		return true;
	b->errors[RB_OP_RELEASE]++;
	rb_rel_free(r); /* never queued: applied in process instead */
	return false;
}

bool backend_release_ref(struct backend *b, const struct be_target *t, size_t nt, const char *nonce,
			 const struct meter_tokens *tokens, size_t ntokens,
			 const struct meter_tokens *reserve, size_t nreserve, const char *body,
			 eng_settled_cb *cb, void *arg)
{
	struct rb_rel *r;
	size_t i;

	if (b->closing || !b->up || !rpool_up(b->pool))
		return false; /* never queued: nothing can vouch for it now */
	if ((r = rb_rel_new(b, RB_M_RELEASE, RB_OP_RELEASE, nonce)) == NULL)
		return false;
	for (i = 0; i < nt; i++)
		if (!rb_rel_target(r, t[i].cs, t[i].cls, t[i].key))
			goto fail;
	if (!rb_rel_settle(r, tokens, ntokens, reserve, nreserve, body))
		goto fail;
	r->cb = cb;
	r->cb_arg = arg;
	if (rb_rel_send(r))
		return true;
	b->errors[RB_OP_RELEASE]++;
fail:
	rb_rel_free(r);
	return false;
}
