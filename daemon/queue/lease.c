/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * lease.c - leases: ids, the lease table, TTL expiry, detach.
 *
 * Owns: struct lease and its TTL timer, and the per-pod semaphore counts it
 * holds on its keys (kq->held). The lease table is this daemon's record of
 * what it issued: a release settles what the table says was booked, never
 * what the handle says. A lease is settled exactly once: released by the
 * op, by its connection closing (unless detached), or by its TTL. A lease
 * whose tokens a release could still charge outlives its TTL by one more
 * lease_ttl as `expired` (no slot held; a release then charges the tokens);
 * the others end at their TTL. A second release finds nothing and changes
 * nothing. max_leases bounds the table (expired leases included), so a
 * flood of detached leases cannot grow the daemon without bound.
 */

#include "lease.h"

#include "clock.h"
#include "scope.h"
#include "lease_id.h"
#include "log.h"
#include "rand.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/*
 * An owned copy of n token counts, names included, in one allocation sized
 * to them (a waiter's reservation, a queued Redis release: the queue holds
 * up to 100,000). *nout is how many were kept: 0 when memory runs out.
 */
struct meter_tokens *meter_tokens_dup(const struct meter_tokens *src, size_t n, size_t *nout)
{
	struct meter_tokens *out;
	size_t i, bytes = 0;
	char *names;

	*nout = 0;
	if (n == 0 || src == NULL)
		return NULL;
	for (i = 0; i < n; i++)
		bytes += strlen(src[i].name) + 1;
	out = malloc(n * sizeof(*out) + bytes);
	if (out == NULL)
		return NULL;
	names = (char *)(out + n);
	for (i = 0; i < n; i++) {
		size_t len = strlen(src[i].name) + 1;
		memcpy(names, src[i].name, len);
		out[i].name = names;
		out[i].n = src[i].n;
		names += len;
	}
	*nout = n;
	return out;
}

/*
 * Unguessable: a lease id is a capability to release someone's slot. The
 * bytes come from the kernel's CSPRNG, 256 ids' worth per getrandom() call
 * (not a syscall per lease); each byte is used once.
 */
#define LEASE_POOL (256 * LEASE_NONCE_LEN / 2)

void lease_make_id(char *buf)
{
	static const char hex[] = "0123456789abcdef";
	static unsigned char pool[LEASE_POOL];
	static size_t left;
	unsigned char *raw;
	size_t i;

	if (left < LEASE_NONCE_LEN / 2) {
		if (getrandom(pool, sizeof(pool), 0) == (ssize_t)sizeof(pool)) {
			left = sizeof(pool);
		} else { /* no kernel randomness: never seen; still never repeat */
			for (i = 0; i + 8 <= sizeof(pool); i += 8) {
				uint64_t r = rand_u64();
				memcpy(pool + i, &r, 8);
			}
			left = sizeof(pool);
		}
	}
	raw = pool + sizeof(pool) - left;
	left -= LEASE_NONCE_LEN / 2;
	for (i = 0; i < LEASE_NONCE_LEN / 2; i++) {
		buf[2 * i] = hex[raw[i] >> 4];
		buf[2 * i + 1] = hex[raw[i] & 15];
		raw[i] = 0; /* used: not kept around */
	}
	buf[LEASE_NONCE_LEN] = '\0';
}

static struct lease_ttlq *lease_ttlq_of(struct rt *ad, int64_t ttl);
static bool lease_ttlq_arm(struct lease_ttlq *q, int64_t now);
static void lease_unslot(struct lease *l);

/* May a release of l still charge tokens (a token rule applies to a target)? */
static bool lease_charges_late(const struct lease *l)
{
	size_t i;

	for (i = 0; i < l->nt; i++)
		if (lim_meters_tokens(l->t[i].kq->sc->cs, l->t[i].cls, NULL))
			return true;
	return false;
}

/*
 * The TTL ended on a lease whose tokens a release may still report: it
 * gives up its slots and stays, expired, for one more TTL. false when it
 * cannot (no timer): it ends now.
 */
static bool lease_keep_expired(struct lease *l)
{
	int64_t now = clock_mono_ms(), ttl = l->ttlq->ttl_ms;
	struct lease_ttlq *q = lease_ttlq_of(l->ad, ttl);
	size_t i;

	if (q == NULL)
		return false;
	TAILQ_REMOVE(&l->ttlq->leases, l, ttl_link);
	l->ttlq = q;
	l->deadline_ms = now + ttl;
	TAILQ_INSERT_TAIL(&q->leases, l, ttl_link);
	if (!lease_ttlq_arm(q, now))
		return false; /* lease_release takes it off q */
	l->expired = true;
	if (l->conn != NULL) { /* its connection's close settles nothing now */
		TAILQ_REMOVE(&l->conn->leases, l, conn_link);
		l->conn = NULL;
	}
	for (i = 0; i < l->nt; i++)
		kq_ref(l->t[i].kq); /* the key stays while the lease may settle */
	lease_unslot(l);
	return true;
}

static void lease_expire(struct lease *l)
{
	size_t i;

	if (l->expired) { /* no release came within the grace: forgotten */
		l->backend_booked = false;
		l->redis_maybe = false;
		lease_release(l, NULL, 0);
		return;
	}

	/* One line per lease would flood the log when many expire: debug each,
	 * warn at most once a second, count them all (status: "expired"). */
	log_debug("lease expired", "lease=%.8s scope=%s key=\"%s\"", l->id,
		  l->t[0].kq->sc->cs->name, l->t[0].kq->key);
	log_ratelimited(LOG_SLOT_LEASE, 1000, "leases expired unreleased (lease_ttl)",
			"scope=%s key=\"%s\"", l->t[0].kq->sc->cs->name, l->t[0].kq->key);
	for (i = 0; i < l->nt; i++)
		if (i == 0 || l->t[i].kq->sc != l->t[0].kq->sc)
			l->t[i].kq->sc->expired++;
	/* The backend's lease set expires by itself at the same deadline. */
	if (lease_charges_late(l) && lease_keep_expired(l))
		return;
	l->backend_booked = false;
	l->redis_maybe = false;
	lease_release(l, NULL, 0);
}

/* Set q's timer for its head, if it has one and the timer is not set. */
static bool lease_ttlq_arm(struct lease_ttlq *q, int64_t now)
{
	struct lease *head = TAILQ_FIRST(&q->leases);
	int64_t d;
	struct timeval tv;

	if (head == NULL || q->armed)
		return true;
	d = head->deadline_ms > now ? head->deadline_ms - now : 0;
	tv.tv_sec = d / 1000;
	tv.tv_usec = (d % 1000) * 1000;
	if (evtimer_add(q->ev, &tv) != 0)
		return false;
	q->armed = true;
	q->armed_for = head->deadline_ms;
	return true;
}

static void lease_ttl_cb(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	struct lease_ttlq *q = arg;
	int64_t now = clock_mono_ms();
	/* The loop's cached clock, which the timer was set by, may run a little
	 * behind ours: the deadline it was set for is due now, as the limiter,
	 * reading the same deadline, already holds. */
	int64_t due = now > q->armed_for ? now : q->armed_for;
	struct lease *l;

	q->armed = false;
	while ((l = TAILQ_FIRST(&q->leases)) != NULL && l->deadline_ms <= due)
		lease_expire(l);
	if (!lease_ttlq_arm(q, now))
		log_ratelimited(LOG_SLOT_LEASE, 1000, "cannot arm the lease_ttl timer", NULL);
}

/* The queue of leases of this lease_ttl, made on first use; NULL: no memory. */
static struct lease_ttlq *lease_ttlq_of(struct rt *ad, int64_t ttl)
{
	struct lease_ttlq *q;

	SLIST_FOREACH(q, &ad->ttlqs, link)
	if (q->ttl_ms == ttl)
		return q;
	if ((q = calloc(1, sizeof(*q))) == NULL)
		return NULL;
	if ((q->ev = evtimer_new(ad->base, lease_ttl_cb, q)) == NULL) {
		free(q);
		return NULL;
	}
	q->ad = ad;
	q->ttl_ms = ttl;
	TAILQ_INIT(&q->leases);
	SLIST_INSERT_HEAD(&ad->ttlqs, q, link);
	return q;
}

/* sp: what a handle of a lease on t[0..nt) with reservation rs[0..nrs) is made of. */
static void lease_spec_of(struct lease_spec *sp, const char *nonce, const struct target_rt *t,
			  size_t nt, const struct meter_tokens *rs, size_t nrs)
{
	size_t i;

	*sp = (struct lease_spec){ .nonce = nonce, .nt = nt, .reserve = rs, .nreserve = nrs };
	for (i = 0; i < nt && i < PROTO_MAX_TARGETS; i++) {
		sp->scope[i] = t[i].kq->sc->cs->name;
		sp->cls[i] = t[i].cls ? t[i].cls->name : "";
		sp->key[i] = t[i].kq->key;
	}
}

/* The handle of a lease: its nonce, then what a release needs. */
static char *lease_handle(const struct lease *l)
{
	struct lease_spec sp;

	lease_spec_of(&sp, l->id, l->t, l->nt, l->reserve, l->nreserve);
	return lease_id_make(&sp);
}

char *lease_body_of(const struct target_rt *t, size_t nt, const struct meter_tokens *rs, size_t nrs)
{
	struct lease_spec sp;

	lease_spec_of(&sp, NULL, t, nt, rs, nrs);
	return lease_id_body(&sp);
}

void lease_settled_elsewhere(struct rt *ad, const char *nonce)
{
	struct lease *l = htab_get(ad->leases, nonce);

	if (l == NULL)
		return;
	log_debug("lease settled through another daemon", "lease=%.8s", l->id);
	/* Redis settled it (its record is a tombstone): nothing is sent, as
	 * at its TTL; the in-process mirror ends at that deadline too. */
	l->backend_booked = false;
	l->redis_maybe = false;
	l->outcome = ADAPT_NONE;
	lease_release(l, NULL, 0);
}

struct lease *lease_resolve(struct rt *ad, const char *handle, struct lease_ref *ref, bool *foreign)
{
	char nonce[LEASE_NONCE_LEN + 1];
	struct lease *l;

	*foreign = false;
	if (strlen(handle) < LEASE_NONCE_LEN || !lease_id_nonce_ok(handle, LEASE_NONCE_LEN))
		return NULL;
	memcpy(nonce, handle, LEASE_NONCE_LEN);
	nonce[LEASE_NONCE_LEN] = '\0';
	if ((l = htab_get(ad->leases, nonce)) != NULL)
		return l;
	*foreign = lease_id_parse(handle, ref);
	return NULL;
}

bool lease_full_msg(const struct rt *ad, char *msg, size_t len)
{
	int64_t max = ad->conf->max_leases;

	snprintf(msg, len,
		 "max_leases (%lld) reached: that many leases are held through this daemon "
		 "(detached ones included); release some, or wait for their lease_ttl",
		 (long long)max);
	log_ratelimited(LOG_SLOT_LEASES, 1000, "max_leases reached: acquires refused",
			"max_leases=%lld", (long long)max);
	return true;
}

struct lease *lease_new(struct rt *ad, const struct lease_of *of, enum via via)
{
	struct lease *l = calloc(1, sizeof(*l));
	int64_t ttl = 0, now = clock_mono_ms();
	size_t i;

	if (l == NULL)
		return NULL;
	memcpy(l->id, of->nonce, sizeof(l->id) - 1);
	l->reserve = of->reserve;
	l->nreserve = of->nreserve;
	l->ad = ad;
	l->via = via;
	l->nt = of->nt;
	memcpy(l->t, of->t, of->nt * sizeof(of->t[0]));
	for (i = 0; i < l->nt; i++)
		if (l->t[i].kq->sc->cs->lease_ttl_ms > ttl)
			ttl = l->t[i].kq->sc->cs->lease_ttl_ms;
	l->deadline_ms = now + ttl;
	/* The table's keys are nonces lease_make_id drew, never a client's
	 * (htab.h: why they need no keyed hash); marked while it is empty. */
	if (htab_count(ad->leases) == 0)
		htab_issued(ad->leases);
	l->handle = lease_handle(l);
	l->ttlq = lease_ttlq_of(ad, ttl);
	if (l->handle == NULL || l->ttlq == NULL || !htab_put(ad->leases, l->id, l))
		goto fail;
	TAILQ_INSERT_TAIL(&l->ttlq->leases, l, ttl_link);
	if (!lease_ttlq_arm(l->ttlq, now)) { /* it was idle, and cannot be set */
		TAILQ_REMOVE(&l->ttlq->leases, l, ttl_link);
		htab_del(ad->leases, l->id);
		goto fail;
	}
	ad->nleases++;
	for (i = 0; i < l->nt; i++) {
		kq_hold(l->t[i].kq);
		l->t[i].kq->sc->leases++;
	}
	if (of->conn != NULL) {
		l->conn = of->conn;
		TAILQ_INSERT_TAIL(&l->conn->leases, l, conn_link);
	}
	return l;
fail:
	free(l->handle);
	free(l);
	return NULL;
}

/* A lease's targets in kept scopes: the class of the same name, or none
 * (the unnamed rules) when it is gone. */
static void lease_reload_one(void *arg UNUSED, const char *key UNUSED, void *val)
{
	struct lease *l = val;
	size_t i;

	for (i = 0; i < l->nt; i++)
		if (!l->t[i].kq->sc->retired)
			l->t[i].cls = l->t[i].cls != NULL
					  ? conf_class_find(l->t[i].kq->sc->cs, l->t[i].cls->name)
					  : NULL;
}

void lease_reload(struct rt *ad)
{
	htab_each(ad->leases, lease_reload_one, NULL);
}

void lease_release(struct lease *l, const struct proto_token *tokens, size_t ntokens)
{
	struct meter_tokens tk[PROTO_MAX_TOKENS];
	size_t i;

	for (i = 0; i < ntokens && i < PROTO_MAX_TOKENS; i++) {
		tk[i].name = tokens[i].name;
		tk[i].n = tokens[i].n;
	}
	log_debug("lease released", "lease=%.8s via=%s booked=%d redis_maybe=%d", l->id,
		  via_name(l->via), (int)l->backend_booked, (int)l->redis_maybe);
	if (l->backend_booked || l->redis_maybe || ntokens > 0 || l->ad->dec->sends(l))
		l->ad->dec->release(l, tk, i);
	htab_del(l->ad->leases, l->id);
	l->ad->nleases--;
	if (l->conn != NULL)
		TAILQ_REMOVE(&l->conn->leases, l, conn_link);
	TAILQ_REMOVE(&l->ttlq->leases, l, ttl_link); /* its timer may fire early: harmless */
	free(l->handle);
	free(l->reserve);
	if (l->expired) {
		for (i = 0; i < l->nt; i++)
			kq_unref(l->t[i].kq);
	} else {
		lease_unslot(l);
	}
	free(l);
}

/* l's slots are free (it ended, or expired): the keys' heads may go. */
static void lease_unslot(struct lease *l)
{
	size_t i;

	for (i = 0; i < l->nt; i++) {
		kq_unhold(l->t[i].kq);
		l->t[i].kq->sc->leases--;
	}
	for (i = 0; i < l->nt; i++)
		l->ad->slot_freed(l->t[i].kq); /* the head may go now */
}

void lease_conn_closed(struct client *c)
{
	while (!TAILQ_EMPTY(&c->leases)) {
		struct lease *l = TAILQ_FIRST(&c->leases);
		lease_release(l, NULL, 0);
	}
}

static void lease_free_cb(void *arg UNUSED, const char *key UNUSED, void *val)
{
	struct lease *l = val;

	free(l->handle);
	free(l->reserve);
	free(l);
}

void lease_free_all(struct rt *ad)
{
	htab_each(ad->leases, lease_free_cb, NULL);
	htab_free(ad->leases);
	ad->leases = NULL;
	while (!SLIST_EMPTY(&ad->ttlqs)) {
		struct lease_ttlq *q = SLIST_FIRST(&ad->ttlqs);
		SLIST_REMOVE_HEAD(&ad->ttlqs, link);
		event_free(q->ev);
		free(q);
	}
}
