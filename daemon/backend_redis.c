/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * backend_redis.c - the Redis backend (see backend.h).
 *
 * INTERIM: Redis mode is not built yet; a conf naming a Redis makes admitd
 * refuse to start rather than pretend to share limits.
 */

#include "backend.h"

#include "log.h"

struct backend *backend_new(struct admitd *ad)
{
	log_error("redis mode is not available in this build", "redis=\"%s\"", ad->conf->redis);
	return NULL;
}

void backend_free(struct backend *b)
{
	(void)b;
}

bool backend_acquire(struct backend *b UNUSED, struct waiter *w UNUSED,
		     const char *lease_id UNUSED, eng_cb *cb UNUSED, void *arg UNUSED)
{
	return false;
}

void backend_release(struct backend *b UNUSED, struct lease *l UNUSED,
		     const struct lim_tokens *tokens UNUSED, size_t ntokens UNUSED)
{
}

void backend_penalize(struct backend *b UNUSED, struct kq *kq UNUSED, int64_t delay_ms UNUSED)
{
}

double backend_divisor(const struct backend *b UNUSED, const struct conf_scope *cs UNUSED)
{
	return 1.0;
}

void backend_fail_mode(const struct conf_scope *cs UNUSED, struct eng_res *res UNUSED)
{
}

const char *backend_state(const struct backend *b UNUSED, int64_t *since_ms UNUSED)
{
	return "local";
}
