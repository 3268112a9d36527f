/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rb_acquire.h - what the Redis backend's acquire rooms share: the record
 * of one waiter's acquire (struct rb_acq) and of one of its targets' calls
 * (struct rb_acq_part), and the functions rb_acquire.c lends
 * rb_xbatch.c. Private to daemon/store.
 *
 * Owns: no code.
 */

#ifndef ADMITD_RB_ACQUIRE_H
#define ADMITD_RB_ACQUIRE_H

#include "backend_int.h"

enum rb_outcome { RB_R_REFUSED = 0, RB_R_ADMITTED, RB_R_STALE, RB_R_UNKNOWN };

/* The general reply's length for a one-rule plan (rb_plain_reply makes one). */
#define RB_PLAIN_REPLY 13
/* The numbers a plain acquire's reply has in the '=' form. */
#define RB_PLAIN_NUMS(ahead) ((ahead) ? 7u : 6u)

struct rb_acq {
	struct backend *b;
	struct waiter *w;
	eng_cb *cb;
	void *arg;
	char lease_id[LEASE_NONCE_LEN + 1];
	size_t pending;
	int64_t not_after_mono; /* no run of these scripts books after this */
	struct eng_res res;	/* the answer, once decided */
	size_t rollbacks;	/* answered when the last rollback is in */
	bool ahead;		/* its one target's plan books ahead */
	bool form7;		/* ... and the call is an 'a' group (seven numbers) */
	int64_t got;		/* ... the units it booked ahead */
	int64_t give;		/* ... and those it gave back (rb_ahead_ask) */
	uint64_t gen;		/* the conf it was sent under (reloads applied) */
	struct {
		enum rb_outcome out;
		int64_t retry;
		long code;
		int64_t next_booked, next_before;
		struct lim_left left;
	} r[PROTO_MAX_TARGETS];
};

struct rb_acq_part {
	struct rb_acq *q;
	size_t i;
};

/* rb_acquire.c: the replies, the rollbacks and the end of one waiter's acquire */
void rb_acq_plain(struct rb_acq *q, bool plain, const struct rb_plain *p);
void rb_acq_done(struct rb_acq *q);
void rb_acq_cb(void *arg, enum rp_status st, const struct rval *reply);
bool rb_plain_reply(const struct rval *flat, size_t at, const struct rb_acq_part *part,
		    struct rval v[RB_PLAIN_REPLY], struct rval *arr);
void rb_plain_cb(void *arg, enum rp_status st, const struct rval *reply);

/* rb_xbatch.c: queue q's one target for the pass's batch (false: send it alone) */
bool rb_xb_add(struct backend *b, struct rb_acq *q, const struct target_rt *t, int64_t not_after);

#endif
