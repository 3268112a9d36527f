/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * backend_int.h - what the rooms of the Redis backend share: struct backend,
 * the argument vectors, the modes and records of release.lua calls, and
 * the functions one room calls in another. Not a public interface (that is
 * backend.h); only backend_redis.c and the rb_*.c files include it.
 *
 * Owns: no code. The rooms call one way, bottom first (the sections below
 * run in this order; a room calls only rooms listed before it, and one
 * above it only through a callback it declares): rb_args.c (a plan to KEYS
 * and ARGV), rb_xbatch.c (single-target acquires of different keys, one
 * call per connection and loop pass), rb_call.c (a script call, the Redis
 * time that bounds a booking call, failures), rb_ahead.c (units booked
 * ahead for a hot key), rb_rel.c (one release.lua call of a lease),
 * rb_queue.c (the outage queue), rb_release.c (releases), rb_rebook.c
 * (reconciliations and rebooks), rb_writeback.c (the write-back of what the
 * fallback admitted), rb_fair.c (a fair key's queue across daemons: its
 * call's form and reply, a waiter's ticket dropped), rb_acquire.c (the acquires of one waiter and of a hot
 * key's batch, their replies and rollbacks), rb_operator.c
 * (inspect/reset/override), rb_status.c (what `status` reads), rb_health.c
 * (up or down, the heartbeat, the divisor and the fallback's share), and
 * backend_redis.c on top (the state's life, wiring the rooms; penalize).
 */

#ifndef ADMITD_BACKEND_INT_H
#define ADMITD_BACKEND_INT_H

#include "backend.h"

#include "rpool.h"

#include <sys/queue.h>

/* A pod that has not beaten for this long is not counted by divisor = auto. */
#define RB_POD_WINDOW_MS 5000
#define RB_HEARTBEAT_MS	 1000
/* Leases settled elsewhere that one heartbeat takes from this pod's list at most. */
#define RB_SETTLED_TAKE 1024
/* A pod's slot after a window's turn, at most (backend_turn_delay): more than a
 * timer's and a round trip's noise, so the slots keep their order. */
#define RB_TURN_SLOT_MS 50
/* The release queue: checked every tick, at most BATCH sends a tick. */
#define RB_QUEUE_TICK_MS   50
#define RB_QUEUE_BATCH	   1024
#define RB_QUEUE_MAX	   100000
#define RB_QUEUE_MAX_BYTES (64 * 1024 * 1024)
#define RB_QUEUE_ATTEMPTS  20
/* A pod's tickets in a fair key's queue lapse when it has not asked for this
 * long (it is gone); its heads ask at least every RB_FAIR_ASK_MS. */
#define RB_FAIR_TTL_MS 1500
#define RB_FAIR_ASK_MS (RB_FAIR_TTL_MS / 3)
/* The classes whose tickets one fair call checks before its own's, at most. */
#define RB_FAIR_HOLDERS 16
/* Waited past a late call's not_after before reconciling it (clock steps). */
#define RB_CLOCK_MARGIN_MS 50
/*
 * How long a lease's settlement record outlives the lease: tokens reported
 * that much after lease_ttl (a call that outlived its lease) still settle.
 */
#define RB_GRACE_MS(cs) ((cs)->lease_ttl_ms)
/* Nodes listed by `status` (a Cluster of more masters shows the first ones). */
#define RB_STATUS_NODES 64

/* The operations whose failures are counted, for `status`. */
enum rb_op {
	RB_OP_ACQUIRE = 0,
	RB_OP_RELEASE,
	RB_OP_ROLLBACK,
	RB_OP_PENALIZE,
	RB_OP_HEARTBEAT,
	RB_OP_RECONCILE,
	RB_OP_REBOOK,
	RB_OP_INSPECT,
	RB_OP_RESET,
	RB_OP_WRITEBACK,
	RB_OP_OVERRIDE,
	RB_OP_GIVE_BACK, /* units booked ahead and not handed out (rb_ahead.c) */
	RB_OP_LEAVE,	 /* the ticket of a waiter that left a fair key's queue (rb_fair.c) */
	RB_OP__COUNT
};
extern const char *const rb_op_names[RB_OP__COUNT];

struct rb_rel;
TAILQ_HEAD(rb_rel_list, rb_rel);
/*
 * What rb_rel.c hands up when a record is answered, to rooms it does not
 * name (backend_new sets them in struct backend): rel_queue keeps r until
 * Redis can take it, not before not_before (rb_queue.c's rb_queue);
 * rel_rebooked reads a rebook's answer for its lease (rb_rebook.c's
 * rb_rebooked). Each takes r.
 */
typedef void rb_rel_queue_fn(struct backend *b, struct rb_rel *r, int64_t not_before);
typedef void rb_rel_done_fn(struct rb_rel *r);
struct rb_owe;
TAILQ_HEAD(rb_owe_list, rb_owe);
struct rb_ahead;
TAILQ_HEAD(rb_ahead_list, rb_ahead);

struct backend {
	struct rt *ad;
	struct rpool *pool;
	struct rpool_conf pc;
	char *password;
	char *sentinel_password;
	char url_log[512]; /* conf redis with the password hidden, for log lines */
	bool up;
	bool closing; /* inside backend_free: calls complete, nothing new is sent */
	int64_t since_ms;
	int64_t pods_seen; /* from the last heartbeat while up */
	int64_t pod_rank;  /* ... and this pod's rank among them (heartbeat.lua) */
	/*
	 * The fleet a fallback divides by and ranks in (backend_share while
	 * down): the last heartbeat's, except one answered while down or within
	 * RB_POD_WINDOW_MS of Redis's return, before every live pod has beaten
	 * again (it may count this pod alone): that one does not replace it, so
	 * a pod whose Redis flaps at its return keeps the view the others keep.
	 */
	int64_t fb_pods, fb_rank;
	bool fb_ranked;
	int64_t back_ms; /* when Redis last came back after an outage (mono ms), or 0 */
	/* The last beat came within RB_POD_WINDOW_MS of one that found this pod
	 * unregistered (its first, or Redis lost its data): the registry is
	 * still filling (backend_share); pods_hi: the most pods counted before
	 * it emptied and since. */
	int64_t pods_hi, pods_fresh_ms;
	bool pods_fresh;
	int64_t offset_ms; /* Redis TIME minus clock_mono_ms, from the last reply */
	bool offset_known;
	char pod_id[64];
	char *pods_key;
	char *settled_key; /* this pod's list of leases settled elsewhere (settled.lua) */
	struct event *hb_ev;
	int s_acquire, s_release, s_penalize, s_heartbeat, s_reset, s_inspect, s_writeback;
	int s_override, s_settled;
	/* What the fallback admitted while Redis could not be asked, by key
	 * (rb_owe), and the write-back of it in flight once Redis answers. */
	struct htab *owed;
	struct rb_owe_list owing;   /* the same entries, for the write-back */
	struct rb_owe_list sending; /* sent, or failed and to be sent again */
	size_t wb_pending;	    /* write-back calls in flight */
	bool wb_active;		    /* acquires wait for it: Redis serves after */
	bool wb_partial; /* a write-back while Redis kept serving (see rb_writeback_owed) */
	uint64_t wb_round, wb_keys, wb_dropped, wb_lost;
	struct event *wb_ev;
	uint64_t errors[RB_OP__COUNT]; /* failed calls by operation */
	uint64_t calls[RB_OP__COUNT];  /* calls the pool took, by operation (metrics) */
	struct rb_rel_list queue;      /* owed to Redis, oldest first */
	rb_rel_queue_fn *rel_queue;    /* rb_queue: where rb_rel.c puts a record back */
	rb_rel_done_fn *rel_rebooked;  /* rb_rebooked: a rebook answered (rb_rel.c) */
	size_t nqueued;
	size_t queued_bytes; /* what the queue's records hold (rb_rel.bytes) */
	struct event *queue_ev;
	uint64_t reconciled, rebooked, dropped;
	uint64_t beats; /* heartbeats answered */
	bool was_up;	/* up at least once: a later up is a return */
	uint32_t gen;	/* one per backend made (backend_born_down) */
	int64_t born_ms;
	/* Single-target acquires of this loop pass, by pool connection, sent
	 * as one call per connection when the pass ends (rb_xb_*). */
	struct rb_xb **xb; /* nxb of them; NULL: every acquire its own call */
	size_t nxb, xb_pending;
	struct event *xb_ev;
	/* Keys with units booked ahead (rb_ahead.c), oldest booking first, and
	 * the tick that gives back what was not handed out in time. */
	struct rb_ahead_list aheads;
	struct event *ahead_ev;
	uint64_t ahead_booked, ahead_taken, ahead_returned, ahead_dropped; /* units */
};

/* ---- argument vectors ---- */

/*
 * A growable argv whose strings it owns. The first 48 arguments and 1 KB of
 * their bytes live in the struct itself (a call's arguments cost no malloc
 * and no printf on the hot path); more spill into allocated blocks, which
 * never move, so every v[i] stays valid while the argv grows.
 */
#define RARGS_INLINE_N 48
#define RARGS_INLINE_B 1024

struct rblk {
	struct rblk *next;
	size_t used, cap;
	char data[];
};

struct rargs {
	char **v;
	size_t *len;
	size_t n, cap;
	bool oom;
	struct rblk *blk; /* overflow bytes, newest first */
	size_t iused;
	char *iv[RARGS_INLINE_N];
	size_t ilen[RARGS_INLINE_N];
	char ibuf[RARGS_INLINE_B];
};

/* The modes of release.lua (see its header). */
enum rb_mode { RB_M_RELEASE = 0, RB_M_ROLLBACK, RB_M_RECONCILE, RB_M_REBOOK, RB_M_OUTCOME };

/*
 * KEYS and ARGV of release.lua for one target. A release charges the token
 * meters that apply what was reported, less what was reserved under the
 * names reported (conf_settle_charge); a rollback refunds `cost` to the
 * request meters and the reservation to the token meters, and passes x1,
 * x2 (the pacing it booked and replaced); rebook passes the ms the lease
 * has left and not_after.
 */
struct rb_settle {
	const struct meter_tokens *tokens, *reserve;
	size_t ntokens, nreserve;
	bool own;	  /* sent by the daemon that issued the lease */
	const char *body; /* the body of the lease's handle (lease_id_body) */
	int outcome;	  /* enum adapt_outcome the release reports */
};

/*
 * One target of a queued call, by name: a record may wait through reloads,
 * so it never points into a conf; each send resolves it against the
 * running one (rb_tgt_resolve). The three strings share one allocation.
 */
struct rb_tgt {
	char *scope;
	const char *cls; /* NULL: none */
	const char *key;
};

/*
 * struct rb_rel - one release.lua call per target of one lease, in flight
 * or queued. Owns copies of everything it sends (the lease and its keys may
 * be gone by the time Redis can take it).
 */
struct rb_rel {
	struct backend *b;
	TAILQ_ENTRY(rb_rel) link; /* the queue, while queued */
	enum rb_mode mode;
	enum rb_op op;
	char nonce[LEASE_NONCE_LEN + 1];
	bool own;	 /* this daemon issued the lease (it knows what was booked) */
	char *body;	 /* its handle's body (lease_id_body), owned; NULL: none */
	char issuer[64]; /* release: the pod that issued the lease, when another daemon's
			    release settled it while live (release.lua's reply) */
	size_t bytes;	 /* what it holds, counted against the queue's bound */
	size_t nt;
	struct rb_tgt t[PROTO_MAX_TARGETS];
	int64_t cost[PROTO_MAX_TARGETS]; /* rollback: the request units to refund */
	int64_t x1[PROTO_MAX_TARGETS], x2[PROTO_MAX_TARGETS];
	size_t ntokens;
	struct meter_tokens *tokens; /* owned copy (names too), or NULL */
	int64_t not_before;	     /* mono ms: not sent before (a late booking call's bound) */
	int attempts;
	size_t nreserve;
	struct meter_tokens *reserve; /* owned copy, or NULL */
	int outcome;		      /* release: enum adapt_outcome, for adaptive targets */
	bool outcome_only;	      /* release: nothing to settle, only the outcome */
	/* in flight */
	size_t pending;
	bool unknown;  /* a target's outcome is unknown */
	bool gone;     /* rebook: released meanwhile through another daemon */
	int held;      /* some target answered 1 */
	bool settled;  /* release: some target settled (answered 0 or 1) */
	bool repeat;   /* release: some target had been settled before (-2) */
	bool mismatch; /* release: a target's record binds another handle (-4) */
	eng_settled_cb *cb;
	void *cb_arg;
};

/* ---- what one room calls in another, bottom first ---- */

/* rb_args.c: a plan to KEYS and ARGV (the scripts' headers say what each holds) */
extern const char *const rb_mode_names[]; /* by enum rb_mode */
void rargs_cat(struct rargs *a, const char *const *s, size_t ns);
void rargs_str(struct rargs *a, const char *s);
void rargs_int(struct rargs *a, int64_t v);
void rargs_clear(struct rargs *a);
/* rargs_init - a empty, its inline room left as it is (cheaper than = { 0 }). */
void rargs_init(struct rargs *a);
void rb_key(struct rargs *a, const struct backend *b, const struct conf_scope *cs, const char *key,
	    const char *suffix, long idx);
size_t rb_keys(struct rargs *a, const struct backend *b, const struct conf_scope *cs,
	       const char *key, const struct conf_plan *pl);
void rb_fair_class_key(struct rargs *a, const struct backend *b, const struct conf_scope *cs,
		       const char *key, const char *what, const struct conf_class *cls);
void rb_penalty_key(struct rargs *a, const struct backend *b, const struct conf_scope *cs,
		    const char *key);
unsigned rb_affinity(const struct conf_scope *cs, const char *key);
void rb_adapt_args(struct rargs *a, const struct conf_scope *cs);
void rb_acquire_args(struct rargs *a, struct backend *b, const struct target_rt *t,
		     const char *lease_id, size_t count, int64_t not_after, const struct waiter *w,
		     size_t *nkeys);
/* ---- rb_fair.c ---- */
/* rb_fair_on: w's scope is fair and w is of the kind that takes tickets;
 * rb_fair_now: ... and it is asked in the fair form now. */
bool rb_fair_on(const struct waiter *w);
bool rb_fair_now(const struct waiter *w);
void rb_fair_args(struct rargs *a, struct backend *b, struct waiter *const *ws, size_t n,
		  const char *ids, int64_t not_after, size_t *nkeys);
const struct rval *rb_fair_reply(struct waiter *const *ws, size_t n, const struct rval *reply,
				 int64_t *ahead);
int64_t rb_fair_behind(const struct conf_scope *cs, const struct conf_class *cls, int64_t ahead,
		       int64_t cost, int64_t first, int64_t *ask_min);
/* What one plain acquire books ahead and gives back (rb_ahead_ask; rb_plain's fields). */
struct rb_ask {
	bool books_ahead, ahead;
	int64_t extra, give;
};
/* What acquire.lua's 'p' group carries of one plain acquire (rb_target_args). */
struct rb_plain {
	const char *kind; /* strat_kind_name's: one pointer per kind */
	int64_t amount, window_ms, burst, floor, code, not_after, cost;
	bool books_ahead;	      /* its plan books ahead (rb_ahead_ask) */
	bool ahead;		      /* sent in an 'a' group: books extra ahead, gives give back */
	bool queue;		      /* ... an 'f' group: a fair key, refused while tickets wait */
	const struct conf_class *cls; /* queue: the class whose tickets are checked */
	int64_t extra, give;	      /* units (rb_ahead_ask); both 0: a 'p' group */
};
/* The numbers a plain acquire's reply has in the '=' form. */
#define RB_PLAIN_NUMS(ahead) ((ahead) ? 7u : 6u)
void rb_plain_costs(struct rargs *a, const struct rb_plain *p);
void rb_plain_params(struct rb_plain *p, const struct conf_scope *cs, const struct conf_class *cls,
		     int64_t cost, int64_t not_after);
void rb_plain_call(struct rargs *a, const struct backend *b, const struct conf_scope *cs,
		   const char *key, const struct rb_plain *p);
bool rb_target_args(struct rargs *a, struct backend *b, const struct target_rt *t,
		    const char *lease_id, int64_t not_after, const struct waiter *w,
		    const struct rb_ask *ask, struct rb_plain *p, size_t *nkeys);
/* rb_target_args' plain half without rb_plain_tail's ARGV (false: not plain, a untouched). */
bool rb_target_keys(struct rargs *a, const struct backend *b, const struct target_rt *t,
		    int64_t not_after, const struct rb_ask *ask, struct rb_plain *p, size_t *nkeys);
void rb_plain_tail(struct rargs *a, const struct rb_plain *p);
void rb_plain_group(struct rargs *a, const struct rb_plain *p, size_t n);
bool rb_plain_same(const struct rb_plain *x, const struct rb_plain *y);
void rb_release_args(struct rargs *a, const struct backend *b, const struct be_target *t,
		     const char *lease_id, enum rb_mode mode, int64_t cost,
		     const struct rb_settle *se, int64_t x1, int64_t x2, size_t *nkeys);

/*
 * rb_xbatch.c: acquires of different keys, one call per connection and loop
 * pass. An acquire queued there is answered through the callbacks its
 * caller hands it, with arg: reply takes its reply in the general form, or
 * a failure; plain takes a plain one's own reply (the Redis time, then its
 * RB_PLAIN_NUMS numbers), as a call of its own would get it; unsent says it
 * never went (the fallback decides it, nothing to reconcile). Each takes arg.
 */
struct rb_xb_ops {
	rpool_cb *reply;
	rpool_cb *plain;
	void (*unsent)(void *arg);
};
bool rb_xb_add(struct backend *b, const struct waiter *w, const char *lease_id, int64_t not_after,
	       const struct rb_ask *ask, const struct rb_xb_ops *ops, void *arg);
bool rb_xb_init(struct backend *b);
void rb_xb_free(struct backend *b);
void rb_xb_flush(struct backend *b);

/* rb_call.c: the calls every room makes, and their failures */
int rb_eval(struct backend *b, const struct conf_scope *cs, const char *key, int script,
	    const struct rargs *a, size_t nkeys, rpool_cb *cb, void *arg);
int64_t rb_not_after(struct backend *b, int64_t *mono);
void rb_saw_time(struct backend *b, long long redis_ms);
void rb_failed(struct backend *b, enum rb_op opi, enum rp_status st, const struct rval *reply);
void rb_stale(struct backend *b, enum rb_op opi);

/*
 * rb_ahead.c: units a hot key's acquire books ahead in Redis, handed out
 * here. rb_ahead_ask says what t's acquire may book ahead and gives back
 * (its caller passes that to rb_target_args); rb_ahead_keep takes what an
 * admitted one booked (left: what Redis said is left after it).
 */
#define RB_AHEAD_MAX 256 /* units one call books ahead at most */
int64_t rb_ahead_cap(const struct backend *b, const struct conf_scope *cs,
		     const struct conf_class *cls);
struct rb_ask rb_ahead_ask(struct backend *b, const struct target_rt *t);
void rb_ahead_keep(struct backend *b, struct kq *kq, const struct conf_class *cls, int64_t units,
		   const struct lim_left *left);
void rb_ahead_give_all(struct backend *b);		  /* all held go back (backend_flush) */
void rb_ahead_lost(struct backend *b, int64_t units);	  /* a give-back that may not have landed */
void rb_ahead_count(struct lim_left *left, int64_t held); /* left counts what is held */
bool rb_ahead_init(struct backend *b);
void rb_ahead_free_all(struct backend *b);

/* rb_rel.c: one release.lua call of one lease on its targets (b->rel_queue, b->rel_rebooked) */
struct rb_rel *rb_rel_new(struct backend *b, enum rb_mode mode, enum rb_op op, const char *nonce);
bool rb_rel_target(struct rb_rel *r, const struct conf_scope *cs, const struct conf_class *cls,
		   const char *key);
bool rb_rel_send(struct rb_rel *r);
void rb_rel_free(struct rb_rel *r);

/* rb_queue.c: what Redis could not take yet */
bool rb_queue_init(struct backend *b);
void rb_queue_free(struct backend *b);
void rb_queue(struct backend *b, struct rb_rel *r, int64_t not_before);
void rb_queue_run(struct backend *b, bool all_due);

/* rb_release.c: a lease's record of the targets that need a call */
struct rb_rel *rb_rel_of(struct backend *b, const struct lease *l, enum rb_mode mode,
			 enum rb_op op);

/* rb_rebook.c: reconciliations and rebooks */
void rb_reconcile(struct backend *b, const struct waiter *w, const bool *which, const char *nonce,
		  int64_t after);
void rb_rebook_all(struct backend *b, const char *why);
void rb_rebooked(struct rb_rel *r); /* a rebook answered (b->rel_rebooked) */

/* rb_writeback.c: what the fallback admitted, charged to Redis */
bool rb_wb_init(struct backend *b);
void rb_wb_free(struct backend *b);
void rb_writeback(struct backend *b);
void rb_writeback_owed(struct backend *b);
void rb_owe_penalty(struct backend *b, struct kq *kq, int64_t until);

/* rb_health.c: what backend_new hands the pool and the heartbeat's timer */
void rb_state_cb(void *arg, bool up);
void rb_node_up_cb(void *arg, const char *node);
void rb_hb_cb(evutil_socket_t fd, short what, void *arg);

#endif
