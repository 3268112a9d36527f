/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * admitd.h - the runtime objects shared across the daemon's files.
 *
 * Owns nothing by itself: it declares struct admitd (the process), struct
 * scope_rt (a conf scope at run time), struct kq (one key of one scope: its
 * FIFO of waiters, its per-pod semaphore, its in-process limiter state),
 * struct waiter (an acquire waiting in a kq), struct lease and struct conn.
 * Each is created and freed by the file named in its comment.
 */

#ifndef ADMITD_ADMITD_H
#define ADMITD_ADMITD_H

#include "conf.h"
#include "htab.h"
#include "limiter.h"
#include "metrics.h"
#include "proto.h"

#include <event2/event_struct.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>

#define MUST_CHECK __attribute__((warn_unused_result))
#define UNUSED	   __attribute__((unused))

struct event;
struct event_base;
struct backend;
struct conn;
struct kq;

/* Which limiter made a decision; "backend" in replies. */
enum via { VIA_LOCAL = 0, VIA_REDIS, VIA_FALLBACK };
const char *via_name(enum via v);

/* One target of an acquire, resolved: key queue, class, cost. */
struct target_rt {
	struct kq *kq;
	const struct conf_class *cls;
	int64_t cost;
};

/* waiter: waitq.c. An acquire from a connection, queued on its first target's kq
 * (one list in arrival order; the first waiter of each class is that class's head). */
struct waiter {
	TAILQ_ENTRY(waiter) kq_link;
	TAILQ_ENTRY(waiter) conn_link;
	struct conn *conn; /* NULL once the client went away */
	char *id;	   /* raw JSON id to echo, owned */
	size_t nt;
	struct target_rt t[PROTO_MAX_TARGETS];
	bool detach;
	bool no_lease; /* "lease": false: its lease goes back as it is admitted */
	bool try_only; /* timeout_ms 0: never queue */
	int64_t start_ms;
	int64_t deadline_ms;
	struct event deadline_ev; /* in place: no timer is made per request */
	bool deadline_set;
	const char *last_rule;	     /* the rule of the last refusal, for `timeout` */
	const struct kq *refused_by; /* ... and the target it came from */
	struct lim_left left;	     /* the tightest limit at the last decision */
	bool decided;		     /* a limiter has answered for it at least once */
	bool inflight;		     /* a decision for it is out (alone or batched) */
	bool canceled;		     /* its client canceled it: an admission is undone */
	int64_t
	    wake_at; /* its class's head, asleep on a refusal: asks again then (mono ms); 0: due */
	enum via last_via;		    /* ... and which one, for the refusal's "backend" */
	char lease_id[LEASE_NONCE_LEN + 1]; /* booked under this id when admitted */
	struct meter_tokens *reserve;	    /* tokens reserved up front, owned (names too) */
	size_t nreserve;
};
TAILQ_HEAD(waiter_list, waiter);

/*
 * lease_ttlq: lease.c. The leases of one lease_ttl, in the order they were
 * granted, so in deadline order: one timer, at the head's deadline, serves
 * them all (no timer is made or unmade per lease). It may fire early, for a
 * head released since, and is then set again for the new head.
 */
struct lease;
TAILQ_HEAD(lease_list, lease);
struct lease_ttlq {
	SLIST_ENTRY(lease_ttlq) link;
	struct admitd *ad;
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
	struct conn *conn; /* NULL when detached */
	struct admitd *ad;
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

/*
 * kq: scope.c (table, life, LRU) and waitq.c (queue, pump). One key of one
 * scope. Its in-process limiter state (local mode, or Redis fallback)
 * follows it in the same block: kq_lim(). A kq with nothing held and no
 * refs is idle: it sits on its daemon's LRU list (idle_link), whence
 * max_keys evicts it, or on kept_keys while an override keeps it from
 * eviction (scope.c). held and refs change only through kq_hold/kq_unhold
 * and kq_ref/kq_unref, which keep that list right.
 */
struct kq {
	struct scope_rt *sc;
	const char *key; /* the key table's copy: lives as long as kq */
	struct waiter_list waiters;
	TAILQ_ENTRY(kq) idle_link; /* on ad->idle_keys iff idle (tqe_prev NULL: not) */
	uint32_t nwait;
	int32_t held;		/* leases of this key held through this daemon */
	int32_t pending;	/* attempts in flight naming this key (any queue's head) */
	int32_t refs;		/* waiters (and pends) naming this key: not swept, not evicted */
	struct event *retry_ev; /* the head's next attempt */
	struct eng_refused *refused; /* a refusal Redis gave, kept until it can pass (engine.c) */
	struct rb_ahead *ahead;	     /* units booked ahead in Redis (rb_ahead.c) */
	int64_t wake_at;  /* when retry_ev fires (the earliest head's wake); 0: not armed */
	uint16_t lim_cap; /* rules the state inline in the entry has room for */
	bool lim_ext;	  /* lim is a separate allocation (a reload added rules) */
	bool slot_wait;	  /* a head waits for a lease slot (a release may end it) */
	bool busy;	  /* a backend decision for the head is in flight */
	bool in_pump;
	bool kept; /* idle, on ad->kept_keys: eviction passed it over for its override */
};
TAILQ_HEAD(kq_list, kq);

/* Where a kq's limiter state starts in its block (8-byte aligned). */
#define KQ_LIM_OFF ((sizeof(struct kq) + 7) & ~(size_t)7)

/* kq_lim - the key's in-process limiter state (never NULL): in its entry,
 * or, once a reload gave its scope more rules than the entry has room for,
 * where the pointer stored in the entry in its place says. */
static inline struct lim_state *kq_lim(struct kq *kq)
{
	void *in = (char *)kq + KQ_LIM_OFF;
	struct lim_state *ext;

	if (!kq->lim_ext)
		return (struct lim_state *)in;
	memcpy(&ext, in, sizeof(ext));
	return ext;
}

/* scope_rt: scope.c. A scope a reload removed is "retired": it stays, alone
 * in its allocation, until its keys have nothing held, queued or in flight. */
struct scope_rt {
	struct admitd *ad;
	const struct conf_scope *cs; /* in ad->conf; a retired one's, in the conf it came from */
	size_t idx;
	bool retired;
	struct scope_rt *retired_next;
	struct htab *keys; /* key -> struct kq */
	size_t sweep_at;   /* where the idle-key sweep goes on (a bucket) */
	int64_t leases;	   /* held through this daemon, all keys */
	int64_t waiting;
	/* Outcomes of acquires (a wait hook's events, as counters in `status`). */
	uint64_t admitted, refused, shadow_limited, timeouts, fallbacks;
	uint64_t outcome[ADMIT_E__COUNT]; /* refusals by error code */
	uint64_t canceled;		  /* the client left while waiting */
	uint64_t wait_ms_total;		  /* summed waited_ms of admissions */
	uint64_t expired;		  /* leases ended by lease_ttl */
	uint64_t releases;		  /* release ops naming a lease of this scope */
	uint64_t penalties;		  /* penalize ops naming this scope */
	uint64_t refused_known;		  /* refused from a refusal Redis gave before */
	uint64_t admitted_ahead;	  /* admitted from units booked ahead, with no call */
	/* Batched Redis acquire calls (one for the head of a key and the
	 * waiters like it behind), and the attempts they carried. */
	uint64_t batches, batched;
	/* waited_ms of admissions, per bucket (metrics.h) */
	uint64_t wait_hist[METRICS_WAIT_NBUCKETS];
};

/* op_pend: ops.c. A reply owed to a connection once the backend answers. */
struct op_pend {
	TAILQ_ENTRY(op_pend) conn_link;
	struct conn *conn; /* NULL once the client went away */
	char *id;	   /* raw JSON id to echo, owned */
	struct kq *kq;	   /* reset, inspect, override: the key (a ref is held) */
	const struct conf_class *cls;
	int64_t ttl_ms; /* override: echoed */
};
TAILQ_HEAD(op_pend_list, op_pend);

/* conn: conn.c. */
struct conn {
	struct admitd *ad;
	struct bufferevent *bev;
	struct event *close_ev; /* deferred free (see conn_close_after_flush) */
	uint64_t id;
	TAILQ_ENTRY(conn) link;
	struct waiter_list waiters;
	struct lease_list leases;
	struct op_pend_list pends; /* replies owed (ops.c) */
	struct ucred peer;	   /* the peer's credentials, read at accept (server.c) */
	bool peer_known;	   /* ... when they could be read */
	bool closing;		   /* close once the output is flushed */
	bool half_closed;	   /* the peer finished sending: close after its last waiter */
	bool reads_paused;	   /* backpressure: too much output unread (not closing) */
	bool dropped;		   /* closed without a flush: sends are discarded, close_ev frees */
};
TAILQ_HEAD(conn_list, conn);

/* admitd: main.c. */
struct admitd {
	struct event_base *base;
	struct conf *conf;
	struct scope_rt *scopes;
	size_t nscopes;
	struct scope_rt *retired; /* scopes a reload removed, still holding leases */
	struct htab *leases;	  /* id -> struct lease */
	SLIST_HEAD(lease_ttlq_list, lease_ttlq) ttlqs; /* lease.c: one per lease_ttl seen */
	size_t nleases;		  /* entries of leases (max_leases bounds it) */
	struct kq_list idle_keys; /* idle kqs of every scope, least recently used first */
	struct kq_list kept_keys; /* idle kqs eviction found under an override (scope.c) */
	int64_t kept_until;	  /* no override of kept_keys ends before (mono ms) */
	size_t nkeys;		  /* kqs of every scope (max_keys bounds it) */
	struct conn_list conns;
	size_t nconns;
	uint64_t next_conn_id;
	struct server *server;
	struct backend *redis; /* NULL in local mode */
	struct event *gc_ev;
	struct event *exit_ev;
	struct http *http; /* NULL when metrics is off */
	int64_t start_ms;
	bool shutting_down;
	/* Reloads (reload.c) and the service manager (sdnotify.c). */
	const char *conf_path;	 /* -c, re-read by a reload */
	const char *socket_arg;	 /* --socket, applied over every conf read */
	const char *redis_arg;	 /* --redis (or $ADMITD_REDIS), likewise */
	const char *metrics_arg; /* --metrics, likewise */
	struct reload *reload;	 /* confs and backends a reload replaced, the conf watch */
	struct sdnotify *notify; /* NULL when not run by a service manager */
	struct event *watchdog_ev;
	uint64_t reloads_ok;	/* reloads applied (admitd_reloads_total{result="ok"}) */
	uint64_t reloads_error; /* reloads refused: the old conf kept running */
	uint64_t key_evictions; /* idle keys kq_get forgot to stay within max_keys */
};

/* scope.c */
bool scopes_init(struct admitd *ad) MUST_CHECK;
void scopes_free(struct admitd *ad);
struct scope_rt *scope_find(struct admitd *ad, const char *name);
/*
 * kq_get - the key's kq, created when new (the key table owns it). A new
 * key past max_keys first evicts the least recently used idle key (its
 * in-process state is forgotten), one without an override in force before
 * any with one; in local mode a key under an override is not evicted at
 * all (the override would be lost). NULL when memory runs out, or when
 * no key kept can be evicted: then *full (when not NULL) is set true. A kq
 * that is not referenced (kq_ref, kq_hold) may be evicted by the next kq_get.
 */
struct kq *kq_get(struct scope_rt *sc, const char *key, bool *full);
/*
 * kq_ref, kq_unref - a waiter or a pending reply names kq (refs).
 * kq_hold, kq_unhold - a lease of kq is held through this daemon (held).
 * Inline: each acquire+release makes about four of these calls. A kq is
 * on idle_keys iff both counts are 0; kq_idle_out marks it off the list.
 */
static inline void kq_idle_out(struct kq *kq)
{
	struct admitd *ad = kq->sc->ad;

	TAILQ_REMOVE(kq->kept ? &ad->kept_keys : &ad->idle_keys, kq, idle_link);
	kq->idle_link.tqe_prev = NULL;
	kq->kept = false;
}

static inline void kq_idle_in(struct kq *kq)
{
	TAILQ_INSERT_TAIL(&kq->sc->ad->idle_keys, kq, idle_link);
}

static inline void kq_ref(struct kq *kq)
{
	if (kq->refs++ == 0 && kq->held == 0)
		kq_idle_out(kq);
}

static inline void kq_unref(struct kq *kq)
{
	if (--kq->refs == 0 && kq->held == 0)
		kq_idle_in(kq);
}

static inline void kq_hold(struct kq *kq)
{
	if (kq->held++ == 0 && kq->refs == 0)
		kq_idle_out(kq);
}

static inline void kq_unhold(struct kq *kq)
{
	if (--kq->held == 0 && kq->refs == 0)
		kq_idle_in(kq);
}
/* kq_sweep - free the kqs with nothing queued, held or remembered: one
 * slice of each scope's table per call (the whole table in ten calls). */
void kq_sweep(struct admitd *ad);
/* kq_shutdown_all - answer every waiter `shutting_down`. */
void kq_shutdown_all(struct admitd *ad);
/*
 * scopes_reload - nc's scopes replace the running ones (ad->conf is still
 * the old conf). A scope of the same name keeps its keys, their waiters,
 * leases and counters, and each key's limiter state where the limit did not
 * change (lim_state_carry); a new scope starts empty; a removed one is
 * retired: its waiters are answered unknown_scope, its leases stay
 * releasable. Waiters, leases and pending replies are re-pointed at nc's
 * classes (a waiter whose class is gone is answered bad_request). false,
 * with nothing changed, when memory ran out. Call scopes_wake once ad->conf
 * is nc.
 */
bool scopes_reload(struct admitd *ad, const struct conf *nc) MUST_CHECK;
/* scopes_wake - after a reload: every queue's head asks again now. */
void scopes_wake(struct admitd *ad);
/* scopes_points_into - does a retired scope still use a scope of conf c? */
bool scopes_points_into(const struct admitd *ad, const struct conf *c);

/* waitq.c */
void waitq_add(struct waiter *w);
void waitq_pump(struct kq *kq);
void waitq_cancel(struct waiter *w);
/*
 * waitq_cancel_asked - the client's cancel of w (on a live connection): w is
 * answered `canceled` now and spends nothing (an admission Redis is deciding
 * now is undone when it comes back).
 */
void waitq_cancel_asked(struct waiter *w);
void waitq_shutdown(struct kq *kq);
/*
 * waitq_abort - answer w with error e now and drop it from its queue (a
 * decision in flight finds it gone). The queue is not pumped: the caller
 * does, once it is done walking queues.
 */
void waitq_abort(struct waiter *w, enum admit_err e, const char *msg);
/* waitq_free_kq - free what kq owns (its waiters, timer, limiter state); kq
 * itself is its key table's entry, freed by htab_del or htab_free. */
void waitq_free_kq(struct kq *kq);

/* lease.c */
struct lease *lease_new(struct admitd *ad, struct waiter *w, enum via via);
/*
 * lease_resolve - what a handle a client sent back names: a lease this
 * daemon issued and has not settled (returned, its own record: the
 * handle's contents are not read), else, when the handle is one
 * (lease_id_parse), its parsed form in *ref and NULL with *foreign true;
 * else NULL with *foreign false (not a handle at all). A bare nonce finds
 * this daemon's own lease only.
 */
struct lease_ref;
struct lease *lease_resolve(struct admitd *ad, const char *handle, struct lease_ref *ref,
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
void lease_settled_elsewhere(struct admitd *ad, const char *nonce);
/*
 * lease_body_of - the body of the handle (lease_id_body) of a lease on
 * targets t[0..nt) with reservation rs[0..nrs): malloc'd, NULL on failure.
 */
char *lease_body_of(const struct target_rt *t, size_t nt, const struct meter_tokens *rs,
		    size_t nrs);
/* lease_detach_conn - the connection closes: release or orphan its leases. */
void lease_conn_closed(struct conn *c);
void lease_free_all(struct admitd *ad);
void lease_make_id(char *buf);
/*
 * lease_full - max_leases leases are held: true, with why in msg (len
 * bytes, written only then). Inline: three checks per acquire.
 */
bool lease_full_msg(const struct admitd *ad, char *msg, size_t len);
static inline bool lease_full(const struct admitd *ad, char *msg, size_t len)
{
	return (int64_t)ad->nleases >= ad->conf->max_leases && lease_full_msg(ad, msg, len);
}

/* conn.c */
/* conn_new - serve fd; cred: the peer's credentials read at accept, or NULL. */
void conn_new(struct admitd *ad, int fd, const struct ucred *cred);
/*
 * conn_revoke - the peer may no longer be served: one `forbidden` line
 * (message msg), its waiters cancelled at once, then closed after the flush
 * (its leases released as on any close). Safe anywhere: it never frees c.
 */
void conn_revoke(struct conn *c, const char *msg);
void conn_send(struct conn *c, const char *line, size_t len);
void conn_send_reply(struct conn *c, struct preply *r);
/* conn_sweep - drop half-closed connections whose peer has gone entirely. */
void conn_sweep(struct admitd *ad);
/* conn_waiter_done - one of c's waiters was answered or cancelled. */
void conn_waiter_done(struct conn *c);
void conn_close_all(struct admitd *ad);
/* conn_free_all - at exit: close every connection now. */
void conn_free_all(struct admitd *ad);

/* ops.c */
void ops_dispatch(struct conn *c, const char *line, size_t len);
/* ops_conn_closed - c goes away: the replies owed to it are dropped. */
void ops_conn_closed(struct conn *c);

/* meter_tokens_dup - an owned copy of n token counts (one allocation sized to
 * them, names included; free() it); NULL when n is 0 or memory runs out,
 * with *nout the count kept (0 then). */
struct meter_tokens *meter_tokens_dup(const struct meter_tokens *src, size_t n, size_t *nout);

#endif
