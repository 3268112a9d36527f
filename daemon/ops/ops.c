/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * ops.c - the protocol's operations: a request in, a reply (or a waiter) out.
 *
 * Owns: the op table and the dispatch of a decoded line to its handler, and
 * the two ops that touch only the connection, ping and cancel. Types and
 * ranges were checked by the codec; the handlers are in ops_traffic.c
 * (acquire, release, penalize) and ops_admin.c (status, inspect, reset,
 * override), the conf checks of their targets in ops_target.c, the error
 * reply and the replies owed once the backend answers (struct op_pend) in
 * ops_reply.c. The calls run one way: this file, then the handlers, then
 * the target checks, then the replies. Every request gets exactly one
 * reply, now or when its waiter ends.
 */

#include "ops_int.h"

#include "log.h"

#include <jansson.h>
#include <string.h>

struct op_entry {
	void (*handler)(struct client *c, struct request *rq);
};

/* Is the raw JSON id a the same value as the compact JSON b? */
static bool ops_same_id(const char *a, const char *b)
{
	json_t *x, *y;
	bool eq;

	if (strcmp(a, b) == 0)
		return true;
	x = json_loads(a, JSON_DECODE_ANY, NULL);
	y = json_loads(b, JSON_DECODE_ANY, NULL);
	eq = x != NULL && y != NULL && json_equal(x, y);
	json_decref(x);
	json_decref(y);
	return eq;
}

/*
 * cancel: the waiting acquire of this connection whose id is "of" is
 * answered `canceled` (it spends nothing), then the cancel says whether it
 * found one. Only this connection's waiters can be named: an id is the
 * client's own, not a handle on anyone else's wait.
 */
static void op_cancel(struct client *c, struct request *rq)
{
	struct waiter *w, *found = NULL;
	struct preply *r;

	for (w = TAILQ_FIRST(&c->waiters); w != NULL && found == NULL; w = TAILQ_NEXT(w, conn_link))
		if (w->id != NULL && ops_same_id(w->id, rq->of))
			found = w;
	if (found != NULL) {
		log_debug("acquire canceled", "scope=%s key=\"%s\"", found->t[0].kq->sc->cs->name,
			  found->t[0].kq->key);
		waitq_cancel_asked(found);
	}
	r = preply_new(rq->id, true);
	preply_bool(r, "found", found != NULL);
	client_reply(c, r);
}

static void op_ping(struct client *c, struct request *rq)
{
	client_reply(c, preply_new(rq->id, true));
}

/* Indexed by the op the codec decoded (proto.c owns the names). */
static const struct op_entry op_table[OP__COUNT] = {
	[OP_ACQUIRE] = { op_acquire },	 [OP_RELEASE] = { op_release },
	[OP_PENALIZE] = { op_penalize }, [OP_STATUS] = { op_status },
	[OP_PING] = { op_ping },	 [OP_RESET] = { op_reset },
	[OP_INSPECT] = { op_inspect },	 [OP_CANCEL] = { op_cancel },
	[OP_OVERRIDE] = { op_override },
};

void ops_dispatch(struct client *c, const char *line, size_t len)
{
	struct request rq;
	char msg[256];
	enum admit_err e = proto_decode(line, len, &rq, msg, sizeof(msg));

	if (e != ADMIT_OK)
		ops_error(c, &rq, e, msg);
	else
		op_table[rq.op].handler(c, &rq);
	proto_request_clear(&rq);
}
