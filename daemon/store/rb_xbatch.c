/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rb_xbatch.c - the Redis backend's acquires across keys.
 *
 * Owns: the single-target acquires of different keys one loop pass makes,
 * held per pool connection (struct rb_xb, b->xb) and sent as one
 * acquire.lua call when the pass ends, when redis_batch of them wait or
 * before anything else is sent; reading that call's reply into each
 * acquire's. Each acquire comes with the callbacks that answer it (struct
 * rb_xb_ops, its caller's: rb_acquire.c); this file names no caller.
 */

#include "backend_int.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

/* ---- acquire, across keys: one call per connection and loop pass ---- */

/*
 * A single-target acquire is not sent at once: it waits, with the others of
 * this pass of the event loop for the same pool connection, until the pass
 * ends (xb_ev is made active, and runs after the pass's other callbacks),
 * until redis_batch of them wait, or until anything else is sent (so that
 * what this daemon sends for a key still reaches Redis in the order it was
 * made). Then one acquire.lua call carries them all ('=' form: each
 * decided alone; consecutive plain acquires of the same params are one 'p'
 * group, which sends only each one's key and cost, the rest one 'g' group
 * each); one alone goes as it would have. This adds no waiting, and saves
 * Redis a call's dispatch, its TIME and, on a socket, its read and write per
 * acquire. In a Cluster the keys of one connection are not in one slot:
 * there every acquire is its own call.
 */
struct rb_xone {
	struct rargs a; /* KEYS then ARGV, as a lone call would send them */
	size_t nkeys;
	const struct rb_xb_ops *ops; /* what answers it, through arg */
	void *arg;
	bool plain; /* a is KEYS only, p its params (rb_target_keys; rb_plain_tail
		     * adds the ARGV if it goes alone) */
	struct rb_plain p;
};

#define RB_XB_MAX 256 /* redis_batch's bound (conf.c) */

struct rb_xb {
	struct rb_xone *c[RB_XB_MAX]; /* redis_batch at most */
	size_t n;
	size_t reply_n;	   /* the reply's length: the time, 6 or 7 per plain, 1 per other */
	unsigned affinity; /* the first one's: the connection they share */
};
/* b->xb[i]: the batch waiting for pool connection i (NULL: none), made by
 * its first acquire of the pass and sent whole, with its slot emptied. */

/* Free a queued acquire; unsent: its owner is told first (the fallback decides it). */
static void rb_xone_drop(struct rb_xone *one, bool unsent)
{
	if (unsent)
		one->ops->unsent(one->arg);
	rargs_clear(&one->a);
	free(one);
}

/*
 * A batch's reply: the Redis time, then per acquire in order its own. A
 * plain one's numbers go to its owner as a call of its own would have
 * answered: the Redis time, then them.
 */
static void rb_xb_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct rb_xb *x = arg;
	bool ok = st == RP_OK && reply != NULL && reply->type == RV_ARR && reply->n == x->reply_n &&
		  reply->a[0].type == RV_INT;
	const struct rval *err = reply != NULL && reply->type == RV_ERR ? reply : NULL;
	struct rval own[1 + RB_PLAIN_NUMS(true)], lone;
	size_t i, at = 1;

	for (i = 0; i < x->n; i++) {
		struct rb_xone *one = x->c[i];
		if (!ok) {
			one->ops->reply(one->arg, st, err);
		} else if (one->plain) {
			size_t nv = RB_PLAIN_NUMS(one->p.ahead);
			own[0] = reply->a[0];
			memcpy(&own[1], &reply->a[at], nv * sizeof(own[0]));
			lone = (struct rval){ .type = RV_ARR, .n = 1 + nv, .a = own };
			one->ops->plain(one->arg, RP_OK, &lone);
			at += nv;
		} else {
			one->ops->reply(one->arg, RP_OK, &reply->a[at++]);
		}
	}
	for (i = 0; i < x->n; i++)
		rb_xone_drop(x->c[i], false);
	free(x);
}

/* argv[*k..] and len[*k..] take a's arguments [from, to). */
static void rb_argv_put(const char **argv, size_t *len, size_t *k, const struct rargs *a,
			size_t from, size_t to)
{
	for (size_t j = from; j < to; j++, (*k)++) {
		argv[*k] = a->v[j];
		len[*k] = a->len[j];
	}
}

/*
 * The '=' form's groups of x in hdr: '=', how many, then per group its head
 * ('p' and its params, or 'g' and its KEYS and ARGV counts) and, for a 'p'
 * group, its costs; head[g] is where group g's entries start in hdr and
 * first[g] its first acquire. Returns how many groups.
 */
static size_t rb_xb_groups(const struct rb_xb *x, struct rargs *hdr, size_t *head, size_t *first)
{
	size_t j, e, g = 0;

	for (j = 0; j < x->n; j = e, g++) {
		e = j + 1;
		if (x->c[j]->plain)
			while (e < x->n && x->c[e]->plain &&
			       rb_plain_same(&x->c[j]->p, &x->c[e]->p))
				e++;
		first[g] = j;
	}
	first[g] = x->n;
	rargs_str(hdr, "=");
	rargs_int(hdr, (int64_t)g);
	for (size_t k = 0; k < g; k++) {
		const struct rb_xone *one = x->c[first[k]];
		head[k] = hdr->n;
		if (one->plain) {
			rb_plain_group(hdr, &one->p, first[k + 1] - first[k]);
			for (j = first[k]; j < first[k + 1]; j++)
				rb_plain_costs(hdr, &x->c[j]->p);
		} else {
			rargs_str(hdr, "g");
			rargs_int(hdr, (int64_t)one->nkeys);
			rargs_int(hdr, (int64_t)(one->a.n - one->nkeys));
		}
	}
	head[g] = hdr->n;
	return g;
}

/*
 * Send the batch waiting for pool connection i. It leaves its slot first:
 * answering these may queue more, into a new batch.
 */
static void rb_xb_send(struct backend *b, size_t i)
{
	struct rb_xb *x = b->xb[i];
	const char **argv = NULL;
	size_t *len = NULL, j, k = 0, nkeys = 0, argc = 0, ng;
	size_t head[RB_XB_MAX + 1], first[RB_XB_MAX + 1]; /* rb_xb_groups' */
	struct rargs hdr;
	struct rpool_call call;
	bool oom = false;

	if (x == NULL)
		return;
	b->xb[i] = NULL;
	b->xb_pending -= x->n;
	rargs_init(&hdr);
	call = (struct rpool_call){ .affinity = x->affinity, .script = (size_t)b->s_acquire };
	if (x->n == 1 && x->c[0]->plain) /* alone: the '=' form's ARGV of its own */
		rb_plain_tail(&x->c[0]->a, &x->c[0]->p);
	for (j = 0; j < x->n; j++)
		oom |= x->c[j]->a.oom;
	if (x->n == 1) {
		struct rb_xone *one = x->c[0];
		call.nkeys = one->nkeys;
		call.argc = one->a.n;
		call.argv = (const char *const *)one->a.v;
		call.argvlen = one->a.len;
		call.cb = one->plain ? one->ops->plain : one->ops->reply;
		call.arg = one->arg;
		if (oom || rpool_eval_multi(b->pool, 1, &call) != 0) {
			rb_xone_drop(one, true);
		} else {
			b->calls[RB_OP_ACQUIRE]++;
			rb_xone_drop(one, false);
		}
		free(x);
		return;
	}
	ng = rb_xb_groups(x, &hdr, head, first);
	x->reply_n = 1;
	for (j = 0; j < x->n; j++) {
		nkeys += x->c[j]->nkeys;
		argc += x->c[j]->nkeys + (x->c[j]->plain ? 0 : x->c[j]->a.n - x->c[j]->nkeys);
		x->reply_n += x->c[j]->plain ? RB_PLAIN_NUMS(x->c[j]->p.ahead) : 1;
	}
	argc += hdr.n;
	argv = malloc(argc * sizeof(*argv));
	len = malloc(argc * sizeof(*len));
	if (argv == NULL || len == NULL || hdr.oom || oom)
		goto unsent;
	for (j = 0; j < x->n; j++) /* every KEYS, then '=' and the groups */
		rb_argv_put(argv, len, &k, &x->c[j]->a, 0, x->c[j]->nkeys);
	rb_argv_put(argv, len, &k, &hdr, 0, head[0]);
	for (j = 0; j < ng; j++) {
		const struct rb_xone *one = x->c[first[j]];
		rb_argv_put(argv, len, &k, &hdr, head[j], head[j + 1]);
		if (!one->plain)
			rb_argv_put(argv, len, &k, &one->a, one->nkeys, one->a.n);
	}
	call.nkeys = nkeys;
	call.argc = argc;
	call.argv = argv;
	call.argvlen = len;
	call.cb = rb_xb_cb;
	call.arg = x;
	if (rpool_eval_multi(b->pool, 1, &call) != 0)
		goto unsent;
	b->calls[RB_OP_ACQUIRE]++; /* x is the call's now (rb_xb_cb) */
	goto done;
unsent:
	for (j = 0; j < x->n; j++)
		rb_xone_drop(x->c[j], true);
	free(x);
done:
	free(argv);
	free(len);
	rargs_clear(&hdr);
}

void rb_xb_flush(struct backend *b)
{
	size_t i;

	if (b->xb_pending == 0)
		return;
	for (i = 0; i < b->nxb; i++)
		rb_xb_send(b, i);
}

static void rb_xb_ev_cb(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	rb_xb_flush(arg);
}

/*
 * Queue w's one target for the pass's batch of its connection (its KEYS and
 * ARGV built here: rb_target_keys, ask what it books ahead), answered
 * through ops with arg. false when it cannot be queued (no memory): the
 * caller sends it alone, and still owns arg.
 */
bool rb_xb_add(struct backend *b, const struct waiter *w, const char *lease_id, int64_t not_after,
	       const struct rb_ask *ask, const struct rb_xb_ops *ops, void *arg)
{
	const struct target_rt *t = &w->t[0];
	unsigned aff = rb_affinity(t->kq->sc->cs, t->kq->key);
	size_t slot = aff % b->nxb;
	/* malloc, not calloc: both are 2 KB of which an acquire uses a few
	 * words, each set here or as it is filled (c[0..n), a's by rargs_init) */
	struct rb_xone *one = malloc(sizeof(*one));
	struct rb_xb *x = b->xb[slot];

	if (one != NULL && x == NULL && (x = malloc(sizeof(*x))) != NULL) {
		x->n = 0;
		x->reply_n = 0;
		x->affinity = aff; /* the pass's first for it */
		b->xb[slot] = x;
	}
	if (x == NULL || one == NULL) {
		free(one);
		return false;
	}
	rargs_init(&one->a);
	one->plain = rb_target_keys(&one->a, b, t, not_after, ask, &one->p, &one->nkeys);
	if (!one->plain)
		rb_acquire_args(&one->a, b, t, lease_id, 1, not_after, w, &one->nkeys);
	one->ops = ops;
	one->arg = arg;
	x->c[x->n++] = one;
	if (b->xb_pending++ == 0)
		event_active(b->xb_ev, EV_TIMEOUT, 0);
	if (x->n >= (size_t)b->ad->conf->redis_batch)
		rb_xb_send(b, slot);
	return true;
}

bool rb_xb_init(struct backend *b)
{
	struct rt *ad = b->ad;

	if (ad->conf->redis_batch <= 1 || strcmp(rpool_topology(b->pool), "cluster") == 0)
		return true; /* every acquire its own call */
	b->nxb = (size_t)ad->conf->redis_pool;
	return (b->xb = calloc(b->nxb, sizeof(*b->xb))) != NULL &&
	       (b->xb_ev = event_new(ad->base, -1, 0, rb_xb_ev_cb, b)) != NULL;
}

void rb_xb_free(struct backend *b)
{
	for (size_t i = 0; i < b->nxb && b->xb != NULL; i++) {
		struct rb_xb *x = b->xb[i];
		b->xb[i] = NULL;
		for (size_t j = 0; x != NULL && j < x->n; j++)
			rb_xone_drop(x->c[j], true);
		free(x);
	}
	free(b->xb);
	b->xb = NULL;
	if (b->xb_ev)
		event_free(b->xb_ev);
	b->xb_ev = NULL;
}
