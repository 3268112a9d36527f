/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * backend_redis.c - the Redis backend (see backend.h): its state's life.
 *
 * Owns: struct backend's life (backend_new, backend_free), which makes and
 * frees every room's part, hands the lower rooms the callbacks they
 * declare (b->rel_queue, b->rel_rebooked) and the pool rb_health.c's, and
 * penalize. The rooms sit under it and call one way
 * (backend_int.h lists them, bottom first): rb_args.c builds every call's
 * KEYS and ARGV from the plan, rb_xbatch.c sends single-target acquires of
 * one loop pass together, rb_call.c makes a script call and counts its
 * failures, rb_ahead.c holds the units a hot key booked ahead, rb_rel.c,
 * rb_queue.c, rb_release.c, rb_rebook.c and rb_writeback.c own what must
 * reach Redis in the end (releases, the outage queue, reconciliations,
 * rebooks, the write-back), rb_acquire.c makes the acquires and reads
 * their replies, rb_operator.c answers inspect, reset and override,
 * rb_status.c what `status` reads, and rb_health.c the up/down state, the
 * pod heartbeat, the divisor and the fallback's share. It speaks to Redis
 * only through rpool.c.
 *
 * Keys: PREFIX:{SCOPE:KEY}:s (pacing hash), :q (quota instants), :l (leases
 * in flight), :rN (rule N's counter). One hash tag per (scope, key), so every
 * key one script touches is in one slot (what Redis Cluster needs of a
 * script; this pool speaks to one Redis, not to a cluster).
 *
 * An acquire is one script call per target (FCALL of the function library,
 * or EVALSHA), pipelined when there are several; single-target acquires of
 * different keys in one loop pass share a call (rb_xbatch.c).
 * Any failure (no connection, timeout, an error reply of any kind: script
 * error, NOPERM, OOM) is never read as admitted: the decision is made by the
 * scope's fail_mode (eng_fallback), counted and logged. A target that
 * admitted while another refused or failed is rolled back, pacing included.
 *
 * Seams. Every booking call carries not_after, a Redis time after which it
 * books nothing, so a call whose outcome is unknown (sent, then its
 * connection died or its timer fired) can be settled: once not_after has
 * passed, what it may have booked under its lease id is released
 * (reconcile, idempotent), or, when the fallback granted the lease under
 * the same id, released in Redis with the lease. Releases that Redis
 * cannot take now wait in a queue, tokens and all, until it can. When Redis
 * comes back, or the heartbeat finds that it lost its data, every lease
 * this daemon holds is booked there again (rebook).
 */

#include "clock.h"
#include "log.h"
#include "rand.h"
#include "redis_url.h"
#include "rpool.h"
#include "scripts.h"

#include <event2/event.h>
#include <sys/queue.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_int.h"

/* ---- fire-and-forget calls: penalize ---- */

struct rb_ff {
	struct backend *b;
	enum rb_op op;
};

static void rb_ff_cb(void *arg, enum rp_status st, const struct rval *reply)
{
	struct rb_ff *ff = arg;

	if ((st != RP_OK || reply == NULL || reply->type != RV_INT) && st != RP_SHUTDOWN)
		rb_failed(ff->b, ff->op, st, reply);
	free(ff);
}

void backend_penalize(struct backend *b, struct kq *kq, int64_t delay_ms)
{
	struct rargs a = { 0 };
	struct rb_ff *ff;

	if (b->closing)
		return;
	if (!b->up || !rpool_up(b->pool)) { /* told to Redis once it answers */
		if (delay_ms <= 0)
			return; /* only an outcome: the fallback applied it */
		rb_owe_penalty(b, kq, clock_mono_ms() + delay_ms);
		return;
	}
	rb_penalty_key(&a, b, kq->sc->cs, kq->key);
	rargs_int(&a, delay_ms);
	if (kq->sc->cs->adaptive) /* a penalty is a limited outcome */
		rb_adapt_args(&a, kq->sc->cs);
	if (a.oom || (ff = malloc(sizeof(*ff))) == NULL) {
		rb_failed(b, RB_OP_PENALIZE, RP_CONN, NULL);
		rargs_clear(&a);
		return;
	}
	ff->b = b;
	ff->op = RB_OP_PENALIZE;
	if (rb_eval(b, kq->sc->cs, kq->key, b->s_penalize, &a, 1, rb_ff_cb, ff) != 0) {
		free(ff);
		rb_failed(b, RB_OP_PENALIZE, RP_CONN, NULL);
	} else {
		b->calls[RB_OP_PENALIZE]++;
	}
	rargs_clear(&a);
}

/* The AUTH secret: the file's first line. Never logged. */
static char *rb_read_password(const char *path, const char *key)
{
	FILE *f = fopen(path, "r");
	char buf[1024];
	char *nl;

	if (f == NULL) {
		log_error("cannot read password file", "key=%s path=\"%s\"", key, path);
		return NULL;
	}
	if (fgets(buf, sizeof(buf), f) == NULL)
		buf[0] = '\0';
	fclose(f);
	nl = strpbrk(buf, "\r\n");
	if (nl)
		*nl = '\0';
	return strdup(buf);
}

struct backend *backend_new(struct rt *ad)
{
	struct backend *b = calloc(1, sizeof(*b));
	struct timeval hb = { 0, RB_HEARTBEAT_MS * 1000 };
	char err[256] = "";
	char host[48] = "pod";
	static uint32_t gens; /* backends made: their generations */

	if (b == NULL)
		return NULL;
	b->ad = ad;
	b->pods_seen = 1;
	b->rel_queue = rb_queue; /* what rb_rel.c hands up */
	b->rel_rebooked = rb_rebooked;
	TAILQ_INIT(&b->queue);
	TAILQ_INIT(&b->owing);
	TAILQ_INIT(&b->sending);
	b->since_ms = b->born_ms = clock_mono_ms();
	b->gen = ++gens != 0 ? gens : ++gens;
	b->s_acquire = script_index("acquire");
	b->s_release = script_index("release");
	b->s_penalize = script_index("penalize");
	b->s_heartbeat = script_index("heartbeat");
	b->s_reset = script_index("reset");
	b->s_inspect = script_index("inspect");
	b->s_override = script_index("override");
	b->s_writeback = script_index("writeback");
	b->s_settled = script_index("settled");
	if (b->s_acquire < 0 || b->s_release < 0 || b->s_penalize < 0 || b->s_heartbeat < 0 ||
	    b->s_reset < 0 || b->s_inspect < 0 || b->s_override < 0 || b->s_settled < 0) {
		log_error("a Redis script is missing from the build", NULL);
		goto fail;
	}
	gethostname(host, sizeof(host) - 1);
	snprintf(b->pod_id, sizeof(b->pod_id), "%s:%d:%08llx", host, (int)getpid(),
		 (unsigned long long)(rand_u64() & 0xffffffffULL));
	if (asprintf(&b->pods_key, "%s:pods", ad->conf->prefix) < 0) {
		b->pods_key = NULL;
		goto fail;
	}
	/* In the pods zset's slot (the prefix has no braces): one heartbeat
	 * call reads both, in a Cluster too. */
	if (asprintf(&b->settled_key, "{%s}:s:%s", b->pods_key, b->pod_id) < 0) {
		b->settled_key = NULL;
		goto fail;
	}
	if (ad->conf->redis_password_file != NULL &&
	    (b->password =
		 rb_read_password(ad->conf->redis_password_file, "redis_password_file")) == NULL)
		goto fail;
	if (ad->conf->sentinel_password_file != NULL &&
	    (b->sentinel_password = rb_read_password(ad->conf->sentinel_password_file,
						     "sentinel_password_file")) == NULL)
		goto fail;
	b->pc.url = ad->conf->redis;
	if (ad->conf->redis_functions) {
		b->pc.library = script_library;
		b->pc.functions = script_functions;
	}
	redis_url_redact(ad->conf->redis, b->url_log, sizeof(b->url_log));
	b->pc.pool_size = (int)ad->conf->redis_pool;
	b->pc.timeout_ms = ad->conf->redis_timeout_ms;
	b->pc.user = ad->conf->redis_user;
	b->pc.password = b->password;
	b->pc.backoff_min_ms = 50;
	b->pc.backoff_max_ms = 500; /* back within 2 s of Redis returning, jitter included */
	b->pc.sentinel_password = b->sentinel_password;
	b->pc.tls_ca_file = ad->conf->redis_tls_ca_file;
	b->pc.tls_cert_file = ad->conf->redis_tls_cert_file;
	b->pc.tls_key_file = ad->conf->redis_tls_key_file;
	b->pc.tls_server_name = ad->conf->redis_tls_server_name;
	b->pc.tls_no_verify = !ad->conf->redis_tls_verify;
	b->pc.on_node_up = rb_node_up_cb;
	b->pool = rpool_new(ad->base, &b->pc, script_sources, script_count, rb_state_cb, b, err,
			    sizeof(err));
	if (b->pool == NULL) {
		log_error("bad redis setting", "redis=\"%s\" err=\"%s\"", b->url_log, err);
		goto fail;
	}
	b->hb_ev = event_new(ad->base, -1, EV_PERSIST, rb_hb_cb, b);
	if (!rb_queue_init(b) || !rb_wb_init(b) || !rb_xb_init(b) || !rb_ahead_init(b))
		goto fail;
	if (b->hb_ev == NULL || event_add(b->hb_ev, &hb) != 0)
		goto fail;
	return b;
fail:
	backend_free(b);
	return NULL;
}

void backend_free(struct backend *b)
{
	if (b == NULL)
		return;
	b->closing = true;
	if (b->hb_ev)
		event_free(b->hb_ev);
	rb_xb_free(b); /* queued acquires first: answered by rb_acq_done's closing branch */
	if (b->pool)
		rpool_free(b->pool);
	rb_ahead_free_all(b); /* the units this daemon held: Redis gets them back as it refills */
	rb_queue_free(b);
	rb_wb_free(b);
	free(b->pods_key);
	free(b->settled_key);
	free(b->password);
	free(b->sentinel_password);
	free(b);
}

const struct eng_fleet backend_fleet = { .share = backend_share,
					 .born_down = backend_born_down,
					 .owe = backend_owe,
					 .owe_pace = backend_owe_pace };
