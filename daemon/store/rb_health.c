/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rb_health.c - the Redis backend's health, heartbeat and pod share.
 *
 * Owns: the up/down state the pool reports (and what a return or a node's
 * return sets off), the pod heartbeat (heartbeat.lua: the pods alive and this
 * pod's rank, the leases settled elsewhere, a lost dataset), and what the
 * pods give: the divisor and the fallback's share of a limit
 * (backend_share), a window's turn (backend_turn_delay) and the generation
 * (backend_born_down).
 */

#include "backend_int.h"

#include "clock.h"
#include "log.h"
#include "rpool.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- health, heartbeat, divisor ---- */

void rb_state_cb(void *arg, bool up)
{
	struct backend *b = arg;

	if (up == b->up)
		return;
	b->up = up;
	b->since_ms = clock_mono_ms();
	if (!up) {
		log_warn("redis is down: serving from the in-process fallback", "redis=\"%s\"",
			 b->url_log);
		return;
	}
	log_info("redis is up: limits are shared", "redis=\"%s\"", b->url_log);
	if (b->was_up) /* a return: the pods' beats may have lapsed meanwhile */
		b->back_ms = b->since_ms;
	if (rpool_clock(b->pool, &b->offset_ms))
		b->offset_known = true;
	/* The pods alive, at once, not a beat later; then what Redis is owed. */
	rb_hb_cb(-1, 0, b);
	rb_writeback(b);
	if (b->was_up)
		rb_rebook_all(b, "redis is back");
	b->was_up = true;
	rb_queue_run(b, false);
}

/*
 * A Cluster master that had lost every connection is back while the others
 * kept serving: like a Redis that came back, it may have lost what it held
 * (restarted empty), so the leases are booked again (only what is missing
 * is added) and the releases owed are sent.
 */
void rb_node_up_cb(void *arg, const char *node)
{
	struct backend *b = arg;

	if (b->closing || !b->up)
		return;
	log_info("redis node is back", "node=%s", node);
	rb_rebook_all(b, "a redis node is back");
	rb_queue_run(b, false);
}

/*
 * The leases of this pod that other daemons settled while they were live
 * (heartbeat.lua took them from this pod's list): each one this daemon
 * still holds ends here, with nothing sent (Redis settled it).
 */
static void rb_settled_elsewhere(struct backend *b, const struct rval *ids)
{
	size_t i;

	for (i = 0; i < ids->n; i++) {
		const struct rval *v = &ids->a[i];
		if (v->type == RV_STR && lease_id_nonce_ok(v->s, v->len))
			lease_settled_elsewhere(b->ad, v->s);
	}
}

static void rb_hb_reply(void *arg, enum rp_status st, const struct rval *reply)
{
	struct backend *b = arg;

	if (st == RP_OK && reply != NULL && reply->type == RV_ARR &&
	    (reply->n == 4 || reply->n == 5) && reply->a[0].type == RV_INT && reply->a[0].i >= 1 &&
	    reply->a[1].type == RV_INT && reply->a[2].type == RV_INT &&
	    reply->a[3].type == RV_INT && reply->a[3].i >= 0 && reply->a[3].i < reply->a[0].i) {
		int64_t now = clock_mono_ms();
		b->pods_seen = reply->a[0].i;
		b->pod_rank = reply->a[3].i;
		if (!b->fb_ranked ||
		    (b->up && (b->back_ms == 0 || now - b->back_ms >= RB_POD_WINDOW_MS))) {
			b->fb_pods = b->pods_seen;
			b->fb_rank = b->pod_rank;
			b->fb_ranked = true;
		}
		if (reply->a[2].i == 0)
			b->pods_fresh_ms = now;
		b->pods_fresh = now - b->pods_fresh_ms < RB_POD_WINDOW_MS;
		if (!b->pods_fresh || b->pods_seen > b->pods_hi)
			b->pods_hi = b->pods_seen;
		rb_saw_time(b, reply->a[1].i);
		/* This pod was registered a beat ago and is not now: Redis lost
		 * its data (restarted empty, flushed, failed over) and with it
		 * the leases this daemon holds. */
		if (reply->a[2].i == 0 && b->beats > 0)
			rb_rebook_all(b, "redis lost its data");
		b->beats++;
		if (reply->n == 5 && reply->a[4].type == RV_ARR)
			rb_settled_elsewhere(b, &reply->a[4]);
	} else if (st != RP_SHUTDOWN)
		rb_failed(b, RB_OP_HEARTBEAT, st, reply);
}

void rb_hb_cb(evutil_socket_t fd UNUSED, short what, void *arg)
{
	struct backend *b = arg;
	const char *argv[5];
	size_t len[5], i;
	char window[32], take[24];

	if (!rpool_up(b->pool)) {
		b->errors[RB_OP_HEARTBEAT]++;
		return;
	}
	snprintf(window, sizeof(window), "%d", RB_POD_WINDOW_MS);
	snprintf(take, sizeof(take), "%d", RB_SETTLED_TAKE);
	argv[0] = b->pods_key;
	argv[1] = b->settled_key;
	argv[2] = b->pod_id;
	argv[3] = window;
	argv[4] = take;
	for (i = 0; i < 5; i++)
		len[i] = strlen(argv[i]);
	if (rpool_eval(b->pool, (size_t)b->s_heartbeat, 2, 5, argv, len, rb_hb_reply, b) != 0)
		rb_failed(b, RB_OP_HEARTBEAT, RP_CONN, NULL);
	else
		b->calls[RB_OP_HEARTBEAT]++;
	if (what != 0) /* the beat's timer; rb_state_cb writes back itself */
		rb_writeback_owed(b);
}

/*
 * For a liveness window after a beat that found this pod unregistered (its
 * first, or Redis lost its data), the registry is still filling: a count
 * below the pods counted before it emptied, or below fallback_pods, misses
 * pods that take their shares too. The divisor is then that many at least,
 * with no rank (rounded down), so that the shares add up to at most the
 * limit.
 */
static struct lim_share rb_share_unsure(const struct backend *b, const struct conf_scope *cs,
					struct lim_share sh)
{
	int64_t least = b->pods_hi;

	if (b->beats == 0 || !b->pods_fresh)
		return sh;
	if (b->ad->conf->fallback_pods > least)
		least = b->ad->conf->fallback_pods;
	if (b->pods_seen >= least)
		return sh;
	if (cs->fallback_divisor_auto && sh.div < (double)least)
		sh.div = (double)least;
	if (sh.div > 1.0) {
		sh.rank = -1;
		sh.pods = 0;
	}
	return sh;
}

struct lim_share backend_share(const struct backend *b, const struct conf_scope *cs)
{
	struct lim_share sh = LIM_WHOLE;
	bool ranked;
	int64_t pods;

	if (b == NULL)
		return sh;
	ranked = b->up ? b->beats > 0 : b->fb_ranked;
	pods = b->up ? b->pods_seen : b->fb_pods;
	if (ranked) { /* ranked by the last heartbeat, whatever the divisor */
		sh.rank = b->up ? b->pod_rank : b->fb_rank;
		sh.pods = pods;
	}
	if (!b->up)
		sh.out_since = b->since_ms > 0 ? b->since_ms : 1;
	if (cs->fallback_divisor_auto && !ranked) /* the fleet not seen yet */
		sh.div = (double)b->ad->conf->fallback_pods;
	else if (cs->fallback_divisor_auto)
		sh.div = pods > 1 ? (double)pods : 1.0;
	else
		sh.div = cs->fallback_divisor < 1.0 ? 1.0 : cs->fallback_divisor;
	return rb_share_unsure(b, cs, sh);
}

int64_t backend_turn_delay(const struct backend *b, int64_t turn_mono, int64_t window_ms)
{
	int64_t n, slot, turn;

	if (b == NULL || !b->up || b->beats == 0 || b->pods_seen <= 1 || !b->offset_known ||
	    window_ms <= 0)
		return 0;
	n = b->pods_seen;
	slot = window_ms / (4 * n);
	if (slot > RB_TURN_SLOT_MS)
		slot = RB_TURN_SLOT_MS;
	/* The turn's index on Redis TIME, the same on every pod: a turn's
	 * instant is a window's end, and a pod's estimate of it is off by a
	 * round trip at most, far less than half a window. */
	turn = (turn_mono + b->offset_ms + window_ms / 2) / window_ms;
	if (slot <= 0 || turn < 0)
		return 0;
	return (turn + b->pod_rank) % n * slot;
}

uint32_t backend_born_down(const struct backend *b, int64_t *born_ms)
{
	if (b == NULL || b->was_up)
		return 0;
	*born_ms = b->born_ms;
	return b->gen;
}
