/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * waitq.h - acquires waiting on a key: struct waiter and its queue.
 *
 * waitq.c owns each waiter, from the acquire that made it until it is
 * answered, and each key's queue of them (kq->waiters) and retry timer.
 */

#ifndef ADMITD_WAITQ_H
#define ADMITD_WAITQ_H

#include "client.h"
#include "decider.h"
#include "fairq.h"
#include "lease.h"
#include "lease_id.h"
#include "limiter.h"
#include "proto.h"
#include "scope.h"

#include <event2/event_struct.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

struct conf_class;
struct kq;

/* A ticket's name in a queue across daemons: the store's, at most this long. */
#define WAITQ_FLEET_MEMBER 224

/* waiter: waitq.c. An acquire from a connection, queued on its first target's kq
 * (one list; each class's waiters in start-tag order, then arrival: waitq_class.c;
 * the first waiter of each class is that class's head). */
struct waiter {
	TAILQ_ENTRY(waiter) kq_link;
	TAILQ_ENTRY(waiter) conn_link;
	struct client *conn; /* NULL once the client went away */
	char *id;	     /* raw JSON id to echo, owned */
	size_t nt;
	struct target_rt t[PROTO_MAX_TARGETS];
	bool detach;
	bool no_lease; /* "lease": false: its lease goes back as it is admitted */
	bool try_only; /* timeout_ms 0: never queue */
	int64_t start_ms;
	int64_t deadline_ms;
	struct event deadline_ev; /* in place: no timer is made per request */
	bool deadline_set;
	const char *last_rule;		    /* the rule of the last refusal, for `timeout` */
	const struct kq *refused_by;	    /* ... and the target it came from */
	struct lim_left left;		    /* the tightest limit at the last decision */
	bool decided;			    /* a limiter has answered for it at least once */
	bool inflight;			    /* a decision for it is out (alone or batched) */
	bool canceled;			    /* its client canceled it: an admission is undone */
	int64_t wake_at;		    /* a sleeping class head's next ask (mono ms); 0: due */
	enum via last_via;		    /* ... and which one, for the refusal's "backend" */
	char lease_id[LEASE_NONCE_LEN + 1]; /* booked under this id when admitted */
	struct meter_tokens *reserve;	    /* tokens reserved up front, owned (names too) */
	size_t nreserve;
	char tenant[PROTO_NAME_MAX + 1]; /* its acquire's "tenant"; "": the default */
	struct fairq_cls *fq;		 /* its class's tags on its key; NULL: untagged (a try) */
	int fq_slot;			 /* its flow in fq */
	double fq_s, fq_f;		 /* its start and finish tags */
	bool fq_served;			 /* admitted: V moved to fq_s */
	uint64_t seq;			 /* arrival order on this daemon */
	/* Its ticket in its key's queue across daemons (a fair scope on
	 * Redis: waitq_fleet.c), as the store last saw it; "": none. */
	char fl_member[WAITQ_FLEET_MEMBER];
	double fl_s;	 /* ... the ticket's start tag */
	uint64_t fl_seq; /* ... and its arrival number there */
};

/* waitq_new - a zeroed waiter record (a spare when there is one); NULL when out of memory. */
struct waiter *waitq_new(void);
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
/*
 * waitq_reload - after scopes_reload mapped the keys onto nc (the running
 * conf is still oc): each waiter's classes and last refusal are re-pointed
 * at nc, and a waiter whose scope or class is gone is answered
 * (unknown_scope, bad_request). Call waitq_wake_all once nc runs.
 */
void waitq_reload(struct rt *ad, const struct conf *oc, const struct conf *nc);
/* waitq_wake_all - after a reload: every queue's head asks again now. */
void waitq_wake_all(struct rt *ad);
/* waitq_shutdown_all - answer every waiter `shutting_down`. */
void waitq_shutdown_all(struct rt *ad);
/* waitq_free_all - at exit, before scopes_free: drop every waiter left. */
void waitq_free_all(struct rt *ad);
/*
 * waitq_fleet_place - the store says w holds ticket member (start tag s)
 * in its key's queue across daemons, or none (member NULL): w moves to its
 * ticket's place among its class's waiters (ticketed ones by tag, then by
 * their arrival number there; before every waiter without a ticket).
 */
void waitq_fleet_place(struct waiter *w, const char *member, double s);
/* waitq_slot_freed - a lease of kq ended (rt->slot_freed): its head may go. */
void waitq_slot_freed(struct kq *kq);

#endif
