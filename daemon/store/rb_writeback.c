/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rb_writeback.c - the Redis backend's write-back.
 *
 * Owns: what the fallback admitted while Redis could not be asked, per
 * (scope, key) (struct rb_owe, backend_owe, backend_owe_pace), and charging
 * it to Redis when it answers again (writeback.lua, rb_writeback), or at
 * the next beat when one node could not answer while the pool stayed up
 * (rb_writeback_owed); Redis serves acquires only after a full round.
 */

#include "backend_int.h"

#include "clock.h"
#include "log.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

/* ---- write-back: what the fallback admitted, charged to Redis ---- */

/*
 * struct rb_owe - what this pod's fallback booked on one (scope, key)
 * while Redis could not be asked: units per rule of the scope (by conf
 * index), quota instants, and the pacing and penalty in force. Sent once
 * Redis answers (writeback.lua), under a marker that makes a resend book
 * nothing.
 */
struct rb_owe {
	TAILQ_ENTRY(rb_owe) link;
	char *name;	   /* "SCOPE:KEY" (':' is in no scope name): the table's key */
	const char *key;   /* into name */
	char marker[96];   /* set when first sent: a resend uses the same */
	bool inflight;	   /* sent, not answered */
	int64_t quota_n;   /* admissions counted by quota */
	int64_t next_at;   /* mono ms; 0: none */
	int64_t pen_until; /* mono ms; 0: none */
	int64_t own_quota; /* of the quota instants held here, those not in quota_n */
	size_t nrules;
	/* per conf rule: [0, nrules) what the fallback booked; [nrules,
	 * 2 nrules) the rest of what this pod's state holds in the current
	 * windows (its admissions through Redis): booked only where Redis lost
	 * the key. */
	int64_t units[];
};

#define RB_OWE_MAX 100000 /* keys kept owing; past it the oldest are dropped */

static void rb_owe_free(struct rb_owe *o)
{
	free(o->name);
	free(o);
}

/* The entry of (cs, key), made on first use; NULL when it cannot be. */
static struct rb_owe *rb_owe_of(struct backend *b, const struct conf_scope *cs, const char *key)
{
	size_t ls = strlen(cs->name), lk = strlen(key);
	char *name = malloc(ls + lk + 2);
	struct rb_owe *o;

	if (name == NULL)
		return NULL;
	memcpy(name, cs->name, ls);
	name[ls] = ':';
	memcpy(name + ls + 1, key, lk + 1);
	if ((o = htab_get(b->owed, name)) != NULL) {
		free(name);
		return o->nrules == cs->nrules ? o : NULL; /* a reload changed the rules */
	}
	if (htab_count(b->owed) >= RB_OWE_MAX) {
		struct rb_owe *old = TAILQ_FIRST(&b->owing);
		TAILQ_REMOVE(&b->owing, old, link);
		htab_del(b->owed, old->name);
		rb_owe_free(old);
		b->wb_dropped++;
		log_ratelimited(LOG_SLOT_FALLBACK, 1000,
				"too many keys owed to redis: the oldest dropped", "max=%d",
				RB_OWE_MAX);
	}
	o = calloc(1, sizeof(*o) + 2 * cs->nrules * sizeof(o->units[0]));
	if (o == NULL || !htab_put(b->owed, name, o)) {
		free(o);
		free(name);
		return NULL;
	}
	o->name = name;
	o->key = name + ls + 1;
	o->nrules = cs->nrules;
	TAILQ_INSERT_TAIL(&b->owing, o, link);
	return o;
}

void backend_owe(struct backend *b, struct kq *kq, const struct conf_class *cls, int64_t cost,
		 const struct meter_tokens *reserve, size_t nreserve)
{
	const struct conf_scope *cs = kq->sc->cs;
	const struct conf_plan *pl = conf_plan_of(cs, cls);
	struct rb_owe *o;
	size_t i;

	if (b->closing || (o = rb_owe_of(b, cs, kq->key)) == NULL)
		return;
	if (cs->quota > 0)
		o->quota_n++;
	for (i = 0; i < pl->nrules; i++) {
		const struct conf_rule *r = &cs->rules[pl->rules[i]];
		if (r->meter == METER_REQUESTS)
			o->units[pl->rules[i]] += cost;
		else if (r->meter != METER_CONCURRENCY)
			o->units[pl->rules[i]] += conf_token_charge(r, reserve, nreserve);
	}
	if (eng_fb_next_at(kq) > o->next_at)
		o->next_at = eng_fb_next_at(kq);
}

void backend_owe_pace(struct backend *b, struct kq *kq, int64_t until)
{
	struct rb_owe *o;

	if (!b->closing && (o = rb_owe_of(b, kq->sc->cs, kq->key)) != NULL && until > o->next_at)
		o->next_at = until;
}

void rb_owe_penalty(struct backend *b, struct kq *kq, int64_t until)
{
	struct rb_owe *o = rb_owe_of(b, kq->sc->cs, kq->key);

	if (o != NULL && until > o->pen_until)
		o->pen_until = until;
}

static void rb_wb_done(struct backend *b)
{
	struct timeval tv = { 0, RB_QUEUE_TICK_MS * 1000 };

	if (b->wb_pending > 0)
		return;
	if (!TAILQ_EMPTY(&b->sending)) { /* failed ones: again, soon */
		if (!evtimer_pending(b->wb_ev, NULL) && evtimer_add(b->wb_ev, &tv) != 0)
			log_ratelimited(LOG_SLOT_FALLBACK, 1000, "cannot arm the write-back timer",
					NULL);
		return;
	}
	if (!TAILQ_EMPTY(&b->owing) && !b->wb_partial) { /* admitted in fallback meanwhile */
		rb_writeback(b);
		return;
	}
	b->wb_partial = false;
	if (b->wb_active)
		log_info("fallback admissions written back to redis: limits are shared",
			 "keys=%llu", (unsigned long long)b->wb_keys);
	b->wb_active = false;
}

struct rb_wb_call {
	struct backend *b;
	struct rb_owe *o;
};

static void rb_wb_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct rb_wb_call *c = arg;
	struct backend *b = c->b;

	b->wb_pending--;
	c->o->inflight = false;
	if (st == RP_OK && reply != NULL && reply->type == RV_INT) {
		TAILQ_REMOVE(&b->sending, c->o, link);
		rb_owe_free(c->o);
		b->wb_keys++;
		if (reply->i == 2) /* Redis had lost the key: own admissions booked again */
			b->wb_lost++;
	} else if (st != RP_SHUTDOWN) {
		rb_failed(b, RB_OP_WRITEBACK, st, reply); /* kept: sent again, same marker */
	}
	free(c);
	if (!b->closing)
		rb_wb_done(b);
}

/*
 * What the key's state here holds beyond what the fallback booked: this
 * pod's admissions through Redis in the current windows (and its pacing).
 * Worked out at each send, from the state as it is then.
 */
static void rb_owe_own(struct rb_owe *o, struct scope_rt *sc, int64_t now)
{
	struct kq *kq = htab_get(sc->keys, o->key);
	int64_t qn = 0;
	size_t i;

	o->own_quota = 0;
	memset(&o->units[o->nrules], 0, o->nrules * sizeof(o->units[0]));
	if (kq == NULL)
		return;
	eng_fb_spent(kq, now, &qn, &o->units[o->nrules]);
	o->own_quota = qn > o->quota_n ? qn - o->quota_n : 0;
	for (i = 0; i < o->nrules; i++) {
		int64_t *own = &o->units[o->nrules + i];
		*own = *own > o->units[i] ? *own - o->units[i] : 0;
	}
	if (eng_fb_next_at(kq) > o->next_at)
		o->next_at = eng_fb_next_at(kq);
}

static bool rb_owe_units(const struct rb_owe *o)
{
	size_t i;

	for (i = 0; i < 2 * o->nrules; i++)
		if (o->units[i] != 0)
			return true;
	return false;
}

/* Send one entry's write-back; false when Redis cannot take it now. */
static bool rb_wb_send(struct backend *b, struct rb_owe *o)
{
	struct scope_rt *sc = NULL;
	const struct conf_scope *cs;
	struct rargs a = { 0 };
	struct rb_wb_call *c;
	int64_t now = clock_mono_ms();
	size_t i, nkeys = 4, n = 0;
	char *colon = strchr(o->name, ':'), scope[PROTO_NAME_MAX + 1];

	if (colon == NULL || (size_t)(colon - o->name) > PROTO_NAME_MAX)
		return true; /* cannot be: dropped below */
	memcpy(scope, o->name, (size_t)(colon - o->name));
	scope[colon - o->name] = '\0';
	if ((sc = scope_find(b->ad, scope)) == NULL || sc->cs->nrules != o->nrules) {
		TAILQ_REMOVE(&b->sending, o, link); /* the scope changed: nothing to charge */
		rb_owe_free(o);
		return true;
	}
	cs = sc->cs;
	rb_owe_own(o, sc, now);
	if (o->quota_n == 0 && o->own_quota == 0 && o->next_at <= now && o->pen_until <= now &&
	    !rb_owe_units(o)) {
		TAILQ_REMOVE(&b->sending, o, link); /* nothing left to tell */
		rb_owe_free(o);
		return true;
	}
	if (o->marker[0] == '\0')
		snprintf(o->marker, sizeof(o->marker), "%s:%llu:%p", b->pod_id,
			 (unsigned long long)b->wb_round, (void *)o);
	{
		const char *parts[7] = {
			b->ad->conf->prefix, ":{", cs->name, ":", o->key, "}:w:", o->marker
		};
		rargs_cat(&a, parts, 7);
	}
	rb_key(&a, b, cs, o->key, "s", -1);
	rb_key(&a, b, cs, o->key, "q", -1);
	rb_penalty_key(&a, b, cs, o->key);
	rb_key(&a, b, cs, o->key, "lost", -1);
	nkeys++;
	for (i = 0; i < cs->nrules; i++)
		if ((o->units[i] != 0 || o->units[o->nrules + i] != 0) &&
		    cs->rules[i].meter != METER_CONCURRENCY) {
			rb_key(&a, b, cs, o->key, "r", (long)i);
			nkeys++;
		}
	rargs_int(&a, cs->quota_window_ms > RB_GRACE_MS(cs) ? cs->quota_window_ms + 60000
							    : RB_GRACE_MS(cs) + 60000);
	rargs_int(&a, o->quota_n);
	rargs_int(&a, o->own_quota);
	rargs_int(&a, cs->quota_window_ms);
	rargs_int(&a, o->next_at > now ? o->next_at - now : 0);
	rargs_int(&a, o->pen_until > now ? o->pen_until - now : 0);
	rargs_int(&a, (int64_t)(nkeys - 5));
	for (i = 0; i < cs->nrules; i++) {
		struct strat_params p;
		if ((o->units[i] == 0 && o->units[o->nrules + i] == 0) ||
		    cs->rules[i].meter == METER_CONCURRENCY)
			continue;
		p = conf_rule_params(&cs->rules[i]);
		rargs_str(&a, strat_kind_name(p.kind));
		rargs_int(&a, p.amount);
		rargs_int(&a, p.window_ms);
		rargs_int(&a, p.burst);
		rargs_int(&a, o->units[i]);
		rargs_int(&a, o->units[o->nrules + i]);
		n++;
	}
	if (a.oom || (c = malloc(sizeof(*c))) == NULL) {
		rargs_clear(&a);
		return false;
	}
	c->b = b;
	c->o = o;
	if (rb_eval(b, cs, o->key, b->s_writeback, &a, nkeys, rb_wb_cb, c) != 0) {
		free(c);
		rargs_clear(&a);
		return false;
	}
	b->calls[RB_OP_WRITEBACK]++;
	b->wb_pending++;
	o->inflight = true;
	rargs_clear(&a);
	(void)n;
	return true;
}

/* Send what is owed (new entries and ones to send again), then serve. */
static void rb_wb_run(struct backend *b)
{
	struct rb_owe *o, *nx;

	if (b->closing || !b->up)
		return;
	for (o = TAILQ_FIRST(&b->sending); o != NULL; o = nx) {
		nx = TAILQ_NEXT(o, link);
		if (!o->inflight && !rb_wb_send(b, o))
			break; /* the pool is not taking calls: the timer tries again */
	}
	rb_wb_done(b);
}

static void rb_wb_timer(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	rb_wb_run(arg);
}

/*
 * Redis answers again: what the fallback owes it is sent before Redis
 * serves acquires here (they stay in fallback meanwhile, a round trip).
 */
struct rb_walk {
	struct backend *b;
	const struct conf_scope *cs;
	int64_t now;
};

static void rb_walk_key(void *arg, const char *key, void *val)
{
	struct rb_walk *w = arg;
	struct kq *kq = val;

	/* Past the bound the fallback's own entries are not pushed out. */
	if (htab_count(w->b->owed) < RB_OWE_MAX && !eng_fb_idle(kq, w->now))
		(void)rb_owe_of(w->b, w->cs, key); /* NULL: out of memory, or new rules */
}

/* A new write-back round: everything owed moves to the sending list. */
static void rb_wb_take_owing(struct backend *b)
{
	struct rb_owe *o;

	b->wb_round++;
	while ((o = TAILQ_FIRST(&b->owing)) != NULL) {
		TAILQ_REMOVE(&b->owing, o, link);
		htab_del(b->owed, o->name);
		TAILQ_INSERT_TAIL(&b->sending, o, link);
	}
}

void rb_writeback(struct backend *b)
{
	struct rb_walk w = { .b = b, .now = clock_mono_ms() };
	size_t i;

	/* Every key with something in its current windows goes too: if Redis
	 * lost it (restarted empty, a failover to a replica that had not got
	 * it), what this pod admitted through Redis before is booked again. */
	for (i = 0; i < b->ad->nscopes; i++) {
		w.cs = b->ad->scopes[i].cs;
		htab_each(b->ad->scopes[i].keys, rb_walk_key, &w);
	}
	if (TAILQ_EMPTY(&b->owing) && TAILQ_EMPTY(&b->sending))
		return;
	rb_wb_take_owing(b);
	b->wb_active = true;
	log_info("redis is back: writing back what the fallback admitted", "round=%llu",
		 (unsigned long long)b->wb_round);
	rb_wb_run(b);
}

/*
 * Owed while Redis kept serving: some calls met a node that could not take
 * them (a slot migration longer than redis_timeout, one Cluster master
 * lost) and the fallback decided them while the pool stayed up. What they
 * admitted is written back at the next beat, with no walk of the keys and
 * without holding acquires back (the rest of Redis is serving); a call that
 * fails again is retried by the write-back timer.
 */
void rb_writeback_owed(struct backend *b)
{
	if (!b->up || b->wb_active || b->wb_partial || b->wb_pending > 0 ||
	    TAILQ_EMPTY(&b->owing) || !TAILQ_EMPTY(&b->sending))
		return;
	b->wb_partial = true;
	rb_wb_take_owing(b);
	log_info("writing back what the fallback admitted while a redis node could not answer",
		 "round=%llu", (unsigned long long)b->wb_round);
	rb_wb_run(b);
}

bool rb_wb_init(struct backend *b)
{
	b->wb_ev = evtimer_new(b->ad->base, rb_wb_timer, b);
	b->owed = htab_new();
	return b->wb_ev != NULL && b->owed != NULL;
}

void rb_wb_free(struct backend *b)
{
	if (b->wb_ev)
		event_free(b->wb_ev);
	while (!TAILQ_EMPTY(&b->owing)) {
		struct rb_owe *o = TAILQ_FIRST(&b->owing);
		TAILQ_REMOVE(&b->owing, o, link);
		rb_owe_free(o);
	}
	while (!TAILQ_EMPTY(&b->sending)) {
		struct rb_owe *o = TAILQ_FIRST(&b->sending);
		TAILQ_REMOVE(&b->sending, o, link);
		rb_owe_free(o);
	}
	htab_free(b->owed);
}
