/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rb_call.c - the Redis backend's script calls and their failures.
 *
 * Owns: one script call on its key's connection (rb_eval, after the
 * acquires the pass queued: rb_xbatch.c), the Redis time that bounds a
 * booking call (rb_not_after, rb_saw_time), and failed calls: their
 * counters by operation (rb_op_names) and their log lines (rb_failed,
 * rb_stale). Every room that sends calls these; they call no room but
 * rb_args.c and rb_xbatch.c.
 */

#include "backend_int.h"

#include "clock.h"
#include "log.h"
#include "rpool.h"

const char *const rb_op_names[RB_OP__COUNT] = { "acquire",   "release",	  "rollback", "penalize",
						"heartbeat", "reconcile", "rebook",   "inspect",
						"reset",     "writeback", "override", "give_back",
						"leave" };

/* One script call on the connection of (cs, key). */
int rb_eval(struct backend *b, const struct conf_scope *cs, const char *key, int script,
	    const struct rargs *a, size_t nkeys, rpool_cb *cb, void *arg)
{
	struct rpool_call one = { .affinity = rb_affinity(cs, key),
				  .script = (size_t)script,
				  .nkeys = nkeys,
				  .argc = a->n,
				  .argv = (const char *const *)a->v,
				  .argvlen = a->len,
				  .cb = cb,
				  .arg = arg };

	rb_xb_flush(b); /* the acquires queued before it go first */
	return rpool_eval_multi(b->pool, 1, &one);
}

/*
 * The Redis time after which a booking call sent now must book nothing: a
 * little before this call times out here (a quarter of redis_timeout is
 * left for the reply to travel), so a script that Redis runs late, after a
 * freeze, cannot leave a lease behind that the fallback's admission will
 * never release. *mono is the same instant on this daemon's clock: once it
 * has passed, no such call can book any more, and what it may have booked
 * can be reconciled. The pool reads Redis's clock in every connection's
 * handshake, so the bound holds from the first call.
 */
int64_t rb_not_after(struct backend *b, int64_t *mono)
{
	int64_t t = b->ad->conf->redis_timeout_ms, margin = t / 4 > 0 ? t / 4 : 1;
	int64_t now = clock_mono_ms();

	if (!b->offset_known && rpool_clock(b->pool, &b->offset_ms))
		b->offset_known = true;
	*mono = now + t - margin;
	if (!b->offset_known)
		return 0; /* never: rpool_up implies a handshake read TIME */
	return now + b->offset_ms + t - margin;
}

/* Learn Redis's clock from a reply that carries its TIME. */
void rb_saw_time(struct backend *b, long long redis_ms)
{
	b->offset_ms = (int64_t)redis_ms - clock_mono_ms();
	b->offset_known = true;
}

/* ---- failures ---- */

void rb_failed(struct backend *b, enum rb_op opi, enum rp_status st, const struct rval *reply)
{
	static const char *const names[] = { "ok", "timeout", "connection", "shutdown" };
	const char *op = rb_op_names[opi];

	b->errors[opi]++;
	if (st == RP_OK && reply != NULL && reply->type == RV_ERR)
		log_ratelimited(LOG_SLOT_REDIS, 1000, "redis error reply", "op=%s err=\"%.200s\"",
				op, reply->s);
	else if (st == RP_OK)
		log_ratelimited(LOG_SLOT_REDIS, 1000, "redis reply of unexpected shape", "op=%s",
				op);
	else
		log_ratelimited(LOG_SLOT_REDIS, 1000, "redis call failed", "op=%s status=%s", op,
				names[st]);
}

/* A booking call that Redis ran after its not_after: it booked nothing. */
void rb_stale(struct backend *b, enum rb_op opi)
{
	b->errors[opi]++;
	log_ratelimited(LOG_SLOT_REDIS, 1000,
			"redis ran the call after its deadline: it booked nothing", "op=%s",
			rb_op_names[opi]);
}
