/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * lease.h - leases: struct lease, the lease table, TTL expiry.
 *
 * lease.c owns each lease from its admission to its settlement, the table
 * of them in rt (rt->leases) and their TTL queues (rt->ttlqs).
 */

#ifndef ADMITD_LEASE_H
#define ADMITD_LEASE_H

#include "client.h"
#include "conf.h"
#include "decider.h"
#include "lease_id.h"
#include "rt.h"
#include "scope.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

struct event;

/*
 * lease_ttlq: lease.c. The leases of one lease_ttl, in the order they were
 * granted, so in deadline order: one timer, at the head's deadline, serves
 * them all (no timer is made or unmade per lease). It may fire early, for a
 * head released since, and is then set again for the new head.
 */
struct lease;
struct lease_ttlq {
	SLIST_ENTRY(lease_ttlq) link;
	struct rt *ad;
	int64_t ttl_ms;
	struct lease_list leases;
	struct event *ev;
	bool armed;
	int64_t armed_for; /* the deadline the timer was set for */
};

/* lease: lease.c. Admission granted; released by op, by close, or by TTL. */
struct lease {
	char id[LEASE_NONCE_LEN + 1]; /* the nonce it is booked under */
	char *handle;		      /* what the client holds (lease_id.h), owned */
	TAILQ_ENTRY(lease) conn_link;
	struct client *conn; /* NULL when detached */
	struct rt *ad;
	enum via via;
	bool backend_booked; /* the backend holds state to release (lease set, meters, pacing) */
	bool redis_maybe;    /* not via Redis, yet Redis may hold it (unknown outcome, rebook) */
	int64_t redis_after; /* ... and no late script can book it after this (mono ms) */
	int64_t deadline_ms; /* when its TTL ends (mono ms) */
	struct lease_ttlq *ttlq;
	TAILQ_ENTRY(lease) ttl_link;
	size_t nt;
	struct target_rt t[PROTO_MAX_TARGETS];
	struct meter_tokens *reserve; /* taken from its waiter: settled at release */
	size_t nreserve;
	/*
	 * Its TTL ended, but a release may still report its tokens (a call
	 * that outlived lease_ttl): it holds no slot, only what a release
	 * settles, for one more lease_ttl (then it is forgotten).
	 */
	bool expired;
	int outcome; /* enum adapt_outcome its release reports (ADAPT_NONE: none) */
};

/* What an admitted acquire makes its lease of (lease_new). */
struct lease_of {
	const char *nonce; /* the id it was booked under (LEASE_NONCE_LEN) */
	const struct target_rt *t;
	size_t nt;
	struct meter_tokens *reserve; /* the lease's once it is made (owned, then) */
	size_t nreserve;
	struct client *conn; /* NULL: detached */
};

/*
 * lease_new - the lease of an admission through via: booked in the table,
 * its slots held. NULL when memory runs out (of->reserve is still the
 * caller's then). A lease booked through Redis is mirrored in process
 * (dec->mirror) by the caller, once it owns the reservation.
 */
struct lease *lease_new(struct rt *ad, const struct lease_of *of, enum via via);
/* lease_reload - after scopes_reload: each lease's classes are nc's. */
void lease_reload(struct rt *ad);
/*
 * lease_resolve - what a handle a client sent back names: a lease this
 * daemon issued and has not settled (returned, its own record: the
 * handle's contents are not read), else, when the handle is one
 * (lease_id_parse), its parsed form in *ref and NULL with *foreign true;
 * else NULL with *foreign false (not a handle at all). A bare nonce finds
 * this daemon's own lease only.
 */
struct lease_ref;
struct lease *lease_resolve(struct rt *ad, const char *handle, struct lease_ref *ref,
			    bool *foreign);
/*
 * lease_release - settle and end l: tokens may be NULL. A held lease frees
 * its slots; an expired one (its TTL ended while its tokens could still
 * be reported) charges them. Frees the lease.
 */
void lease_release(struct lease *l, const struct proto_token *tokens, size_t ntokens);
/*
 * lease_settled_elsewhere - Redis says the lease under nonce was settled
 * through another daemon: when this daemon still holds it, it ends here
 * with nothing sent (its slot and its max_leases place are free).
 */
void lease_settled_elsewhere(struct rt *ad, const char *nonce);
/*
 * lease_body_of - the body of the handle (lease_id_body) of a lease on
 * targets t[0..nt) with reservation rs[0..nrs): malloc'd, NULL on failure.
 */
char *lease_body_of(const struct target_rt *t, size_t nt, const struct meter_tokens *rs,
		    size_t nrs);
/* lease_detach_conn - the connection closes: release or orphan its leases. */
void lease_conn_closed(struct client *c);
void lease_free_all(struct rt *ad);
void lease_make_id(char *buf);
/*
 * lease_full - max_leases leases are held: true, with why in msg (len
 * bytes, written only then). Inline: three checks per acquire.
 */
bool lease_full_msg(const struct rt *ad, char *msg, size_t len);
static inline bool lease_full(const struct rt *ad, char *msg, size_t len)
{
	return (int64_t)ad->nleases >= ad->conf->max_leases && lease_full_msg(ad, msg, len);
}

/* meter_tokens_dup - an owned copy of n token counts (one allocation sized to
 * them, names included; free() it); NULL when n is 0 or memory runs out,
 * with *nout the count kept (0 then). */
struct meter_tokens *meter_tokens_dup(const struct meter_tokens *src, size_t n, size_t *nout);

#endif
