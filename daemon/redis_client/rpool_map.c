/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rpool_map.c - what the topology (rtopo.c) reports, applied to the pool:
 * the master in use (Sentinel), the slot map and the nodes it makes active
 * or idle (Cluster), and the masters the topology may ask next. These are
 * the struct rtopo_ops callbacks; rtopo.c calls them from its control
 * connection's callbacks, and they run no user code (the run event reports
 * the pool going up or down).
 */

#include "rpool_int.h"

#include "log.h"
#include "rtopo.h"

#include <stdlib.h>
#include <string.h>

/* SENTINEL: the master is at host:port from now on. */
static void map_use_master(void *owner, const char *host, int port, const char *why)
{
	struct rpool *p = owner;
	struct rp_node *n = rp_node_get(p, host, port), *old = p->master;

	if (n == NULL)
		return;
	if (n == old) {
		rp_node_activate(n);
		return;
	}
	if (old != NULL)
		log_warn("redis master changed", "from=%s to=%s reason=%s", old->name, n->name,
			 why);
	else
		log_info("redis master found", "master=%s reason=%s", n->name, why);
	p->master = n;
	rp_node_activate(n);
	if (old != NULL)
		rp_node_deactivate(old, "no longer the master");
	rp_run_schedule(p);
}

/* SENTINEL: a master that may be demoted: reconnect it, and ROLE checks it. */
static void map_recheck_master(void *owner)
{
	struct rpool *p = owner;

	if (p->master == NULL)
		return;
	for (int i = 0; i < p->master->nconns; i++)
		if (p->master->conns[i].state == CS_READY) {
			rp_node_deactivate(p->master, "not writable");
			rp_node_activate(p->master);
			break;
		}
}

/* CLUSTER: r[0..nr) is the map: each slot's owner; owners active, others idle. */
static const char *map_apply(void *owner, const struct rtopo_range *r, size_t nr)
{
	struct rpool *p = owner;
	struct rp_node **n = calloc(nr ? nr : 1, sizeof(*n));

	if (n == NULL)
		return "out of memory";
	for (size_t i = 0; i < nr; i++) {
		n[i] = rp_node_get(p, r[i].host, r[i].port);
		if (n[i] == NULL) {
			free(n);
			return "out of memory";
		}
	}
	for (struct rp_node *m = p->nodes; m != NULL; m = m->next)
		m->slots = 0;
	memset(p->slots, 0, SLOT_COUNT * sizeof(*p->slots));
	for (size_t i = 0; i < nr; i++) {
		for (long s = r[i].start; s <= r[i].end; s++)
			p->slots[s] = n[i];
		n[i]->slots += (int)(r[i].end - r[i].start + 1);
	}
	free(n);
	for (struct rp_node *m = p->nodes; m != NULL; m = m->next) {
		if (m->slots > 0)
			rp_node_activate(m);
		else if (m->active)
			rp_node_deactivate(m, "owns no slot");
	}
	p->map_known = true;
	rp_run_schedule(p);
	return NULL;
}

/* CLUSTER: how many masters the map has; the k-th's address when k is below that. */
static size_t map_master_addr(void *owner, size_t k, const char **host, int *port)
{
	const struct rpool *p = owner;
	size_t count = 0;

	for (const struct rp_node *n = p->nodes; n != NULL; n = n->next)
		if (n->active && n->slots > 0) {
			if (count == k) {
				*host = n->host;
				*port = n->port;
			}
			count++;
		}
	return count;
}

const struct rtopo_ops rp_map_ops = {
	.use_master = map_use_master,
	.recheck_master = map_recheck_master,
	.apply_map = map_apply,
	.master_addr = map_master_addr,
};
