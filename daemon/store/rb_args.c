/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rb_args.c - the Redis backend's arguments: a plan to KEYS and ARGV.
 *
 * Owns: the argument vectors (struct rargs), the Redis key names of every
 * (scope, key), and the KEYS and ARGV of acquire.lua and release.lua as the
 * scripts' headers describe them, built from the compiled plan
 * (conf_plan.c), a plain plan's in acquire.lua's '=' form (rb_target_args,
 * and the 'p' groups rb_acquire.c puts several of in one call). Nothing here
 * sends: the other rooms make the calls (backend_int.h).
 */

#include "backend_int.h"

#include "decimal.h"

#include "lease_id.h"

#include <stdlib.h>
#include <string.h>

/* Room for n bytes and a NUL, where they will not move. */
static char *rargs_room(struct rargs *a, size_t n)
{
	struct rblk *k;
	char *p;

	if (a->oom)
		return NULL;
	if (a->iused + n + 1 <= sizeof(a->ibuf)) {
		p = a->ibuf + a->iused;
		a->iused += n + 1;
		return p;
	}
	k = a->blk;
	if (k == NULL || k->used + n + 1 > k->cap) {
		size_t cap = n + 1 > 4096 ? n + 1 : 4096;
		k = malloc(sizeof(*k) + cap);
		if (k == NULL) {
			a->oom = true;
			return NULL;
		}
		k->used = 0;
		k->cap = cap;
		k->next = a->blk;
		a->blk = k;
	}
	p = k->data + k->used;
	k->used += n + 1;
	return p;
}

/* Register the argument at p (n bytes, NUL-terminated by the caller). */
static void rargs_push(struct rargs *a, char *p, size_t n)
{
	if (a->oom || p == NULL)
		return;
	if (a->v == NULL) {
		a->v = a->iv;
		a->len = a->ilen;
		a->cap = RARGS_INLINE_N;
	}
	if (a->n == a->cap) {
		size_t ncap = a->cap * 2;
		char **nv = malloc(ncap * sizeof(*nv));
		size_t *nl = malloc(ncap * sizeof(*nl));
		if (nv == NULL || nl == NULL) {
			free(nv);
			free(nl);
			a->oom = true;
			return;
		}
		memcpy(nv, a->v, a->n * sizeof(*nv));
		memcpy(nl, a->len, a->n * sizeof(*nl));
		if (a->v != a->iv) {
			free(a->v);
			free(a->len);
		}
		a->v = nv;
		a->len = nl;
		a->cap = ncap;
	}
	a->v[a->n] = p;
	a->len[a->n++] = n;
}

/* An argument made of the pieces s[0..ns), each NUL-terminated. */
void rargs_cat(struct rargs *a, const char *const *s, size_t ns)
{
	size_t i, n = 0, off = 0, lens[8];
	char *p;

	for (i = 0; i < ns; i++) {
		size_t k = strlen(s[i]);
		if (i < 8)
			lens[i] = k;
		n += k;
	}
	p = rargs_room(a, n);
	if (p == NULL)
		return;
	for (i = 0; i < ns; i++) {
		size_t k = i < 8 ? lens[i] : strlen(s[i]);
		memcpy(p + off, s[i], k);
		off += k;
	}
	p[n] = '\0';
	rargs_push(a, p, n);
}

void rargs_str(struct rargs *a, const char *s)
{
	rargs_cat(a, &s, 1);
}

/* A decimal integer, without printf: its digits written in place (the
 * call's hottest argument writer). */
void rargs_int(struct rargs *a, int64_t v)
{
	size_t n = dec_len_i64(v);
	char *p = rargs_room(a, n);

	if (p == NULL)
		return;
	p[n] = '\0';
	dec_put_i64(p + n, v);
	rargs_push(a, p, n);
}

void rargs_init(struct rargs *a)
{
	a->v = NULL;
	a->len = NULL;
	a->n = a->cap = a->iused = 0;
	a->oom = false;
	a->blk = NULL;
}

void rargs_clear(struct rargs *a)
{
	while (a->blk != NULL) {
		struct rblk *k = a->blk;
		a->blk = k->next;
		free(k);
	}
	if (a->v != a->iv) {
		free(a->v);
		free(a->len);
	}
	a->v = NULL;
	a->len = NULL;
	a->n = a->cap = a->iused = 0;
	a->oom = false;
}

void rb_key(struct rargs *a, const struct backend *b, const struct conf_scope *cs, const char *key,
	    const char *suffix, long idx)
{
	char num[DEC_MAX + 1] = { 0 }; /* its last byte ends the digits */
	const char *parts[8] = { b->ad->conf->prefix,
				 ":{",
				 cs->name,
				 ":",
				 key,
				 "}:",
				 suffix,
				 idx >= 0 ? dec_put_i64(num + DEC_MAX, idx) : "" };

	rargs_cat(a, parts, 8);
}

/*
 * The KEYS of acquire.lua and release.lua, which take the same ones: the
 * pacing hash, the quota instants, the leases, then the counters of the
 * plan's rules. Returns how many.
 */
size_t rb_keys(struct rargs *a, const struct backend *b, const struct conf_scope *cs,
	       const char *key, const struct conf_plan *pl)
{
	size_t i;

	rb_key(a, b, cs, key, "s", -1);
	rb_key(a, b, cs, key, "q", -1);
	rb_key(a, b, cs, key, "l", -1);
	for (i = 0; i < pl->nrules; i++)
		rb_key(a, b, cs, key, "r", (long)pl->rules[i]);
	return 3 + pl->nrules;
}

/* A fair key's tickets ("}:fq:") or tags ("}:fs:") of class cls (acquire.lua's fair_call). */
void rb_fair_class_key(struct rargs *a, const struct backend *b, const struct conf_scope *cs,
		       const char *key, const char *what, const struct conf_class *cls)
{
	const char *cname = cls != NULL ? cls->name : "";
	const char *q[7] = { b->ad->conf->prefix, ":{", cs->name, ":", key, what, cname };

	rargs_cat(a, q, 7);
}

/* The hash that holds a key's penalty (conf_plan.c says which). */
void rb_penalty_key(struct rargs *a, const struct backend *b, const struct conf_scope *cs,
		    const char *key)
{
	if (cs->penalty_rule < 0)
		rb_key(a, b, cs, key, "s", -1);
	else
		rb_key(a, b, cs, key, "r", cs->penalty_rule);
}

/*
 * A lease's settlement record, PREFIX:{SCOPE:KEY}:k:NONCE (acquire.lua
 * writes it, release.lua settles through it); with lease_id NULL, the
 * prefix acquire.lua appends each admitted lease's id to.
 */
static void rb_record_key(struct rargs *a, const struct backend *b, const struct conf_scope *cs,
			  const char *key, const char *lease_id)
{
	const char *parts[7] = { b->ad->conf->prefix,
				 ":{",
				 cs->name,
				 ":",
				 key,
				 "}:k:",
				 lease_id != NULL ? lease_id : "" };

	rargs_cat(a, parts, 7);
}

/*
 * What a lease's settlement record binds on one target (acquire.lua writes
 * it, release.lua compares it): "POD|BODY|RULE=N,...", the pod that issued
 * the lease (told when another daemon settles it), the handle's body
 * (lease_id_body: every target's scope, class and key, and the
 * reservation) and, per rule of the target's plan, its name ("#i" when
 * unnamed) and the tokens the reservation charged it. A release through a
 * daemon that did not issue the lease settles only when the body and the
 * charges it works out are these, byte for byte.
 */
static void rb_bind_arg(struct rargs *a, const struct backend *b, const struct conf_scope *cs,
			const struct conf_plan *pl, const char *body,
			const struct meter_tokens *reserve, size_t nreserve)
{
	size_t i, len = 1, off = 0;
	const char *parts[5];
	char *ch;

	for (i = 0; i < pl->nrules; i++) {
		const struct conf_rule *r = &cs->rules[pl->rules[i]];
		len += (r->name != NULL ? strlen(r->name) : 22) + 24;
	}
	if ((ch = malloc(len)) == NULL) {
		a->oom = true;
		return;
	}
	ch[0] = '\0';
	for (i = 0; i < pl->nrules; i++) {
		const struct conf_rule *r = &cs->rules[pl->rules[i]];
		int k = r->name != NULL
			    ? snprintf(ch + off, len - off, "%s%s=%lld", i ? "," : "", r->name,
				       (long long)conf_token_charge(r, reserve, nreserve))
			    : snprintf(ch + off, len - off, "%s#%zu=%lld", i ? "," : "", r->idx,
				       (long long)conf_token_charge(r, reserve, nreserve));
		if (k > 0 && (size_t)k < len - off)
			off += (size_t)k;
	}
	parts[0] = b->pod_id;
	parts[1] = "|";
	parts[2] = body != NULL ? body : "";
	parts[3] = "|";
	parts[4] = ch;
	rargs_cat(a, parts, 5);
	free(ch);
}

/*
 * The pool connection a (scope, key)'s calls go on, so that they run in
 * the order this daemon sent them (an acquire, its release, an inspect).
 * Not a secret: a crafted key can only choose a connection.
 */
unsigned rb_affinity(const struct conf_scope *cs, const char *key)
{
	uint32_t h = 2166136261u;
	const char *p;

	for (p = cs->name; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	h = (h ^ ':') * 16777619u;
	for (p = key; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	return h | 1u; /* never 0: 0 means any connection */
}

static const char *rb_meter(enum conf_meter m)
{
	return m == METER_REQUESTS ? "r" : m == METER_CONCURRENCY ? "c" : "t";
}

/* The five params of an adaptive scope, as scripts/lib/adaptive.lua's adapt_arg reads them. */
void rb_adapt_args(struct rargs *a, const struct conf_scope *cs)
{
	rargs_int(a, cs->adapt.ceil);
	rargs_int(a, cs->adapt.floor);
	rargs_int(a, cs->adapt.factor);
	rargs_int(a, cs->adapt.step);
	rargs_int(a, cs->adapt.interval_ms);
}

/*
 * The tail of acquire.lua's and release.lua's ARGV: the adaptive params
 * (five zeros when only the override follows), then override_milli.
 */
static void rb_adapt_ovr_args(struct rargs *a, const struct conf_scope *cs, bool adapt, bool ovr)
{
	int i;

	if (adapt)
		rb_adapt_args(a, cs);
	else if (ovr)
		for (i = 0; i < 5; i++)
			rargs_int(a, 0);
	if (ovr)
		rargs_int(a, cs->override_milli);
}

/* KEYS and ARGV of acquire.lua for one target (see the script's header). */
void rb_acquire_args(struct rargs *a, struct backend *b, const struct target_rt *t,
		     const char *lease_id, size_t count, int64_t not_after, const struct waiter *w,
		     size_t *nkeys)
{
	const struct meter_tokens *reserve = w->reserve;
	size_t nreserve = w->nreserve;
	const struct conf_scope *cs = t->kq->sc->cs;
	const struct conf_plan *pl = conf_plan_of(cs, t->cls);
	size_t i;

	*nkeys = rb_keys(a, b, cs, t->kq->key, pl);
	if (pl->penalty_extra) {
		rb_penalty_key(a, b, cs, t->kq->key);
		(*nkeys)++;
	}
	if (pl->release_books) { /* the settlement records' prefix: the last key */
		rb_record_key(a, b, cs, t->kq->key, NULL);
		(*nkeys)++;
	}
	rargs_str(a, lease_id);
	rargs_int(a, (int64_t)count);
	rargs_int(a, t->cost);
	/* floor=P%: each rule's own part, worked out by the script (negative) */
	rargs_int(a, t->cls == NULL	     ? 0
		     : t->cls->floor_ppm > 0 ? -t->cls->floor_ppm
					     : t->cls->floor);
	rargs_int(a, cs->min_delay_ms);
	rargs_int(a, pl->serialized ? 1 : 0);
	rargs_int(a, cs->cluster_concurrency);
	rargs_int(a, cs->quota);
	rargs_int(a, cs->quota_window_ms);
	rargs_int(a, cs->lease_ttl_ms);
	rargs_int(a, cs->concurrency_retry_ms);
	rargs_int(a, pl->tracks_leases ? 1 : 0);
	rargs_int(a, (int64_t)pl->nrules);
	for (i = 0; i < pl->nrules; i++) {
		const struct conf_rule *r = &cs->rules[pl->rules[i]];
		struct strat_params p = conf_rule_params(r);
		rargs_str(a, rb_meter(r->meter));
		rargs_str(a, strat_kind_name(p.kind));
		rargs_int(a, p.amount);
		rargs_int(a, p.window_ms);
		rargs_int(a, p.burst);
		rargs_int(a, (int64_t)pl->rules[i]);
		rargs_int(a, conf_token_charge(r, reserve, nreserve));
	}
	rargs_int(a, pl->penalty_in >= 0 ? pl->penalty_in + 1
		     : pl->penalty_extra ? (int64_t)pl->nrules + 1
					 : 0);
	rargs_int(a, not_after);
	if (pl->release_books) {
		char *body = lease_body_of(w->t, w->nt, reserve, nreserve);
		if (body == NULL)
			a->oom = true;
		rargs_int(a, cs->lease_ttl_ms + RB_GRACE_MS(cs));
		rb_bind_arg(a, b, cs, pl, body, reserve, nreserve);
		free(body);
	} else if (cs->adaptive || cs->override_milli > 0) {
		rargs_int(a, 0); /* no settlement record: the adaptive params follow */
		rargs_str(a, "");
	}
	rb_adapt_ovr_args(a, cs, cs->adaptive, cs->override_milli > 0);
}

/* p: what a 'p' group carries of an acquire of cost under (cs, cls)'s plain plan. */
void rb_plain_params(struct rb_plain *p, const struct conf_scope *cs, const struct conf_class *cls,
		     int64_t cost, int64_t not_after)
{
	const struct conf_plan *pl = conf_plan_of(cs, cls);
	struct strat_params sp = conf_rule_params(&cs->rules[pl->rules[0]]);

	*p = (struct rb_plain){ .kind = strat_kind_name(sp.kind),
				.amount = sp.amount,
				.window_ms = sp.window_ms,
				.burst = sp.burst,
				.floor = conf_class_floor(cls, &sp),
				.code = (int64_t)pl->rules[0],
				.not_after = not_after,
				.cost = cost };
}

/* a: the KEYS and ARGV of p alone in a call on key (its rule hash; '=', one group of one). */
void rb_plain_call(struct rargs *a, const struct backend *b, const struct conf_scope *cs,
		   const char *key, const struct rb_plain *p)
{
	rb_key(a, b, cs, key, "r", (long)p->code);
	if (p->queue)
		rb_fair_class_key(a, b, cs, key, "}:fq:", p->cls);
	rb_plain_tail(a, p);
}

/* The ARGV of p alone in a call, after its KEYS: '=', one group of one. */
void rb_plain_tail(struct rargs *a, const struct rb_plain *p)
{
	rargs_str(a, "=");
	rargs_int(a, 1);
	rb_plain_group(a, p, 1);
	rb_plain_costs(a, p);
}

/*
 * A plain target's acquire (its plan is plain, conf_plan.c): p takes what
 * acquire.lua's group carries (with ask, what it books ahead and gives
 * back), and a the KEYS of a call that is that one acquire alone (its
 * ARGV, rb_plain_tail, are for its caller to add when it goes alone).
 */
bool rb_target_keys(struct rargs *a, const struct backend *b, const struct target_rt *t,
		    int64_t not_after, const struct rb_ask *ask, struct rb_plain *p, size_t *nkeys)
{
	const struct conf_scope *cs = t->kq->sc->cs;

	if (!conf_plan_of(cs, t->cls)->plain)
		return false;
	rb_plain_params(p, cs, t->cls, t->cost, not_after);
	if (ask != NULL) {
		p->books_ahead = ask->books_ahead;
		p->ahead = ask->ahead;
		p->extra = ask->extra;
		p->give = ask->give;
	}
	if (ask != NULL && cs->fair && !cs->shadow) { /* an 'f' group: the 'a' layout, two keys */
		p->queue = p->ahead = true;
		p->cls = t->cls;
	}
	rb_key(a, b, cs, t->kq->key, "r", (long)p->code);
	if (p->queue)
		rb_fair_class_key(a, b, cs, t->kq->key, "}:fq:", p->cls);
	*nkeys = p->queue ? 2 : 1;
	return true;
}

/* One acquire's part of its group: its cost ('a': then extra and give). */
void rb_plain_costs(struct rargs *a, const struct rb_plain *p)
{
	rargs_int(a, p->cost);
	if (p->ahead) {
		rargs_int(a, p->extra);
		rargs_int(a, p->give);
	}
}

/*
 * The head of a 'p' group of n acquires of p's params, or of an 'a' group
 * when p books ahead (their costs follow, rb_plain_costs).
 */
void rb_plain_group(struct rargs *a, const struct rb_plain *p, size_t n)
{
	rargs_str(a, p->queue ? "f" : p->ahead ? "a" : "p");
	rargs_str(a, p->kind);
	rargs_int(a, p->amount);
	rargs_int(a, p->window_ms);
	rargs_int(a, p->burst);
	rargs_int(a, p->floor);
	rargs_int(a, p->code);
	rargs_int(a, p->not_after);
	rargs_int(a, (int64_t)n);
}

/*
 * KEYS and ARGV of t's acquire as a call of its own: a plain plan's '=' form
 * (p takes its params, for a batch's 'p' or 'a' group) or the general form
 * (count 1). ask: what a plain one books ahead and gives back (its caller
 * asked rb_ahead.c; NULL: nothing). Returns whether it is the plain one.
 */
bool rb_target_args(struct rargs *a, struct backend *b, const struct target_rt *t,
		    const char *lease_id, int64_t not_after, const struct waiter *w,
		    const struct rb_ask *ask, struct rb_plain *p, size_t *nkeys)
{
	if (rb_target_keys(a, b, t, not_after, ask, p, nkeys)) {
		rb_plain_tail(a, p);
		return true;
	}
	rb_acquire_args(a, b, t, lease_id, 1, not_after, w, nkeys);
	return false;
}

/* Two plain acquires one group can carry (all but what rb_plain_costs sends alike). */
bool rb_plain_same(const struct rb_plain *x, const struct rb_plain *y)
{
	return x->kind == y->kind && x->amount == y->amount && x->window_ms == y->window_ms &&
	       x->burst == y->burst && x->floor == y->floor && x->code == y->code &&
	       x->not_after == y->not_after && x->ahead == y->ahead && x->queue == y->queue;
}

const char *const rb_mode_names[] = { "release", "rollback", "reconcile", "rebook", "outcome" };

/* KEYS and ARGV of release.lua for one target (struct rb_settle says what each mode passes). */
void rb_release_args(struct rargs *a, const struct backend *b, const struct be_target *t,
		     const char *lease_id, enum rb_mode mode, int64_t cost,
		     const struct rb_settle *se, int64_t x1, int64_t x2, size_t *nkeys)
{
	const struct conf_scope *cs = t->cs;
	const struct conf_plan *pl = conf_plan_of(cs, t->cls);
	bool adapt, ovr;
	size_t i;

	*nkeys = rb_keys(a, b, cs, t->key, pl);
	rb_record_key(a, b, cs, t->key, lease_id); /* its settlement record */
	(*nkeys)++;
	rargs_str(a, lease_id);
	rargs_str(a, rb_mode_names[mode]);
	rargs_int(a, pl->pace_release ? 1 : 0);
	rargs_int(a, cs->min_delay_ms);
	rargs_int(a, (int64_t)pl->nrules);
	for (i = 0; i < pl->nrules; i++) {
		const struct conf_rule *r = &cs->rules[pl->rules[i]];
		struct strat_params p = conf_rule_params(r);
		int64_t charge = 0;
		if (mode == RB_M_ROLLBACK && r->meter == METER_REQUESTS)
			charge = -cost;
		else if (mode == RB_M_ROLLBACK)
			charge = -conf_token_charge(r, se->reserve, se->nreserve);
		else if (mode == RB_M_RELEASE)
			charge = conf_settle_charge(r, se->tokens, se->ntokens, se->reserve,
						    se->nreserve);
		rargs_str(a, strat_kind_name(p.kind));
		rargs_int(a, p.amount);
		rargs_int(a, p.window_ms);
		rargs_int(a, p.burst);
		rargs_int(a, charge);
	}
	rargs_int(a, x1);
	rargs_int(a, x2);
	rargs_int(a, pl->penalty_in + 1);
	rargs_int(a, se->own ? 1 : 0);
	rb_bind_arg(a, b, cs, pl, se->body, se->reserve, se->nreserve);
	rargs_int(a, RB_GRACE_MS(cs));
	adapt = cs->adaptive && (mode == RB_M_RELEASE || mode == RB_M_OUTCOME);
	ovr = cs->override_milli > 0 && pl->pace_release && mode == RB_M_RELEASE;
	if (adapt || ovr)
		rargs_str(a, !adapt			    ? ""
			     : se->outcome == ADAPT_OK	    ? "ok"
			     : se->outcome == ADAPT_LIMITED ? "limited"
							    : "");
	rb_adapt_ovr_args(a, cs, adapt, ovr);
}
