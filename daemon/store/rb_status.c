/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rb_status.c - the Redis backend's status reporting.
 *
 * Owns: what `status` and the metrics read of the backend: its topology and
 * nodes, its calls and failures per operation, up or down and since when.
 */

#include "backend_int.h"

#include "rpool.h"

#include <string.h>

/*
 * "topology": the deployment and its nodes in use (the master for one Redis
 * or Sentinel; every master of the slot map for a Cluster).
 */
static void rb_status_topology(const struct backend *b, struct preply *r)
{
	struct rpool_node_info nodes[RB_STATUS_NODES];
	size_t n = rpool_nodes(b->pool, nodes, RB_STATUS_NODES), i;

	preply_push(r, "topology");
	preply_str(r, "kind", rpool_topology(b->pool));
	preply_list(r, "nodes");
	for (i = 0; i < n && i < RB_STATUS_NODES; i++) {
		preply_item(r);
		preply_str(r, "addr", nodes[i].addr);
		preply_str(r, "state", nodes[i].state);
		if (strcmp(rpool_topology(b->pool), "cluster") == 0)
			preply_int(r, "slots", nodes[i].slots);
		preply_int(r, "calls", (int64_t)nodes[i].calls);
		preply_int(r, "failures", (int64_t)nodes[i].failures);
		preply_pop(r);
	}
	preply_pop(r);
	preply_pop(r);
}

void backend_status(const struct backend *b, struct preply *r)
{
	size_t i;

	preply_push(r, "redis");
	preply_int(r, "pods_seen", b->pods_seen);
	preply_int(r, "queued", (int64_t)b->nqueued);
	preply_int(r, "reconciled", (int64_t)b->reconciled);
	preply_int(r, "rebooked", (int64_t)b->rebooked);
	preply_int(r, "dropped", (int64_t)b->dropped);
	preply_int(r, "owed", (int64_t)htab_count(b->owed));
	preply_int(r, "written_back", (int64_t)b->wb_keys);
	preply_int(r, "owed_dropped", (int64_t)b->wb_dropped);
	preply_int(r, "found_lost", (int64_t)b->wb_lost);
	preply_push(r, "ahead"); /* units booked ahead (rb_ahead.c) */
	preply_int(r, "booked", (int64_t)b->ahead_booked);
	preply_int(r, "taken", (int64_t)b->ahead_taken);
	preply_int(r, "given_back", (int64_t)b->ahead_returned);
	preply_int(r, "dropped", (int64_t)b->ahead_dropped);
	preply_pop(r);
	preply_push(r, "calls");
	for (i = 0; i < RB_OP__COUNT; i++)
		preply_int(r, rb_op_names[i], (int64_t)b->calls[i]);
	preply_pop(r);
	preply_push(r, "errors");
	for (i = 0; i < RB_OP__COUNT; i++)
		preply_int(r, rb_op_names[i], (int64_t)b->errors[i]);
	preply_pop(r);
	rb_status_topology(b, r);
	preply_pop(r);
}

size_t backend_nops(void)
{
	return RB_OP__COUNT;
}

const char *backend_op_name(size_t op)
{
	return op < RB_OP__COUNT ? rb_op_names[op] : NULL;
}

uint64_t backend_op_errors(const struct backend *b, size_t op)
{
	return b != NULL && op < RB_OP__COUNT ? b->errors[op] : 0;
}

uint64_t backend_op_calls(const struct backend *b, size_t op)
{
	return b != NULL && op < RB_OP__COUNT ? b->calls[op] : 0;
}

bool backend_up(const struct backend *b)
{
	return b->up && !b->wb_active;
}

const char *backend_state(const struct backend *b, int64_t *since_ms)
{
	*since_ms = b->since_ms;
	return b->up && !b->wb_active ? "redis" : "fallback";
}
