/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rpool_hs.c - the handshake of a pool's node connection: what is sent
 * before the first call (AUTH, SELECT, ROLE for Sentinel, FUNCTION LOAD,
 * SCRIPT LOAD, TIME), all queued at once, and what each reply means: an
 * authentication refusal explained, the SHAs and Redis's clock recorded,
 * FCALL or EVALSHA chosen (EVALSHA for good once a node refuses FUNCTION),
 * a node that is no master reported to the topology. Connecting, readiness
 * and dropping are rpool_node.c's.
 */

#include "rpool_int.h"

#include "clock.h"
#include "log.h"
#include "rconn.h"
#include "rtopo.h"
#include "rutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Handshake steps (the tag of a K_HS reply); SCRIPT LOAD i is HS_LOAD + i. */
enum { HS_AUTH = 0, HS_SELECT, HS_ROLE, HS_TIME, HS_FLOAD, HS_LOAD };
static const char *const hs_names[] = { "authenticating", "selecting",	       "role",
					"timing",	  "loading_functions", "loading_scripts" };

/*
 * rp_hs_send - queue the whole handshake at once (it leaves in one
 * write as soon as the connection is up): AUTH when there is a password,
 * SELECT when db != 0, ROLE (Sentinel: is it still the master?), SCRIPT
 * LOAD of every script, TIME. The connection is ready after the last reply.
 */
bool rp_hs_send(struct rp_conn *c)
{
	struct rpool *p = c->node->pool;
	char db[16];
	bool ok = true;

	c->hs_left = 0;
	if (p->password != NULL) {
		/* AUTH [user] password: the ACL form only when a user is set */
		const char *argv[3] = { "AUTH", p->user, p->password };
		if (p->user == NULL)
			ok = rutil_send_argv(c->rc, 2, (const char *[]){ "AUTH", p->password },
					     K_HS, (void *)(uintptr_t)HS_AUTH);
		else
			ok = rutil_send_argv(c->rc, 3, argv, K_HS, (void *)(uintptr_t)HS_AUTH);
		c->hs_left++;
	}
	if (ok && p->url.db != 0 && p->topo != TOPO_CLUSTER) {
		const char *argv[2] = { "SELECT", db };
		snprintf(db, sizeof(db), "%d", p->url.db);
		ok = rutil_send_argv(c->rc, 2, argv, K_HS, (void *)(uintptr_t)HS_SELECT);
		c->hs_left++;
	}
	if (ok && p->topo == TOPO_SENTINEL) {
		ok = rutil_send_argv(c->rc, 1, (const char *[]){ "ROLE" }, K_HS,
				     (void *)(uintptr_t)HS_ROLE);
		c->hs_left++;
	}
	if (ok && p->fload_cmd != NULL && p->fcall >= 0) {
		ok = rconn_send(c->rc, p->fload_cmd, p->fload_len, K_HS,
				(void *)(uintptr_t)HS_FLOAD) == 0;
		c->hs_left++;
	}
	for (size_t i = 0; ok && i < p->nscripts; i++) {
		ok = rconn_send(c->rc, p->load_cmd[i], p->load_len[i], K_HS,
				(void *)(uintptr_t)(HS_LOAD + i)) == 0;
		c->hs_left++;
	}
	/* Redis's clock before the first call: callers bound when a call may
	 * still book (a script run late must book nothing). */
	if (ok) {
		ok = rutil_send_argv(c->rc, 1, (const char *[]){ "TIME" }, K_HS,
				     (void *)(uintptr_t)HS_TIME);
		c->hs_left++;
	}
	return ok;
}

bool rp_hs_reply(struct rp_conn *c, unsigned step, const struct rval *v)
{
	struct rpool *p = c->node->pool;
	const char *msg, *fix;
	char buf[256];

	if (rutil_auth_refusal(v, false, p->password != NULL, &msg, &fix)) {
		log_warn(msg, "node=%s conn=%d step=%s fix=\"%s\" err=\"%s\"", c->node->name,
			 c->idx, hs_names[step < HS_LOAD ? step : HS_LOAD], fix,
			 rutil_log_safe(v->s, buf, sizeof(buf)));
		return false;
	}
	if (step == HS_FLOAD) {
		/* Loaded, or loaded before (by this build on another connection,
		 * or another pod): FCALL. Any other answer (Redis 6 has no
		 * FUNCTION, an ACL may deny it): EVALSHA, for good. */
		if (v->type == RV_STR ||
		    (v->type == RV_ERR && strstr(v->s, "already exists") != NULL)) {
			if (p->fcall == 0) {
				p->fcall = 1;
				log_info("redis functions loaded: calls use FCALL", "node=%s",
					 c->node->name);
			}
		} else if (p->fcall >= 0) {
			p->fcall = -1;
			log_info("redis functions unavailable: calls use EVALSHA",
				 "node=%s err=\"%s\"", c->node->name,
				 v->type == RV_ERR ? rutil_log_safe(v->s, buf, sizeof(buf)) : "?");
		}
		return true;
	}
	if (v->type == RV_ERR) {
		/* The server's message never contains the secret we sent. */
		log_warn("redis handshake failed", "node=%s conn=%d step=%s err=\"%s\"",
			 c->node->name, c->idx, hs_names[step < HS_LOAD ? step : HS_LOAD],
			 rutil_log_safe(v->s, buf, sizeof(buf)));
		return false;
	}
	if (step == HS_ROLE) {
		if (v->type != RV_ARR || v->n < 1 || v->a[0].type != RV_STR ||
		    strcmp(v->a[0].s, "master") != 0) {
			log_ratelimited(LOG_SLOT_REDIS_CONN, 1000, "redis node is not a master",
					"node=%s role=\"%s\"", c->node->name,
					v->type == RV_ARR && v->n > 0 && v->a[0].s
					    ? rutil_log_safe(v->a[0].s, buf, sizeof(buf))
					    : "?");
			rtopo_stale(p->rtopo);
			return false;
		}
	} else if (step == HS_TIME) {
		if (v->type != RV_ARR || v->n != 2 || v->a[0].type != RV_STR ||
		    v->a[1].type != RV_STR) {
			log_warn("redis TIME: unexpected reply", "node=%s", c->node->name);
			return false;
		}
		p->clock_off = strtoll(v->a[0].s, NULL, 10) * 1000 +
			       strtoll(v->a[1].s, NULL, 10) / 1000 - clock_mono_ms();
		p->clock_known = true;
	} else if (step >= HS_LOAD) {
		size_t i = step - HS_LOAD;
		if (v->type != RV_STR || v->len != RP_SHA_LEN) {
			log_warn("redis SCRIPT LOAD: unexpected reply", "node=%s script=%zu",
				 c->node->name, i);
			return false;
		}
		memcpy(p->sha[i], v->s, RP_SHA_LEN);
		p->sha[i][RP_SHA_LEN] = '\0';
	}
	return true;
}
