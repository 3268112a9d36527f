/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * ops_reply.c - the replies of the ops that are not an op's own: the error
 * reply, and the replies owed once the backend answers.
 *
 * Owns: ops_error (a request refused, answered now) and struct op_pend's
 * life: ops_pend (a reply owed, linked to its connection), ops_pend_done
 * (sent, or dropped when its client left, and freed), ops_conn_closed (a
 * connection goes: what it is owed is unlinked) and ops_reload (what it is
 * owed names the new conf's classes). It sits at the bottom of the ops:
 * the dispatch (ops.c), the handlers (ops_traffic.c, ops_admin.c) and the
 * target checks (ops_target.c) call it, and it calls none of them.
 */

#include "ops_int.h"

#include <stdlib.h>

void ops_error(struct client *c, const struct request *rq, enum admit_err e, const char *msg)
{
	client_reply(c, preply_error(rq->id, e, msg));
}

void ops_conn_closed(struct client *c)
{
	while (!TAILQ_EMPTY(&c->pends)) {
		struct op_pend *p = TAILQ_FIRST(&c->pends);
		TAILQ_REMOVE(&c->pends, p, conn_link);
		p->conn = NULL;
	}
}

void ops_reload(struct client *c)
{
	struct op_pend *p;

	TAILQ_FOREACH (p, &c->pends, conn_link)
		if (p->kq != NULL && !p->kq->sc->retired && p->cls != NULL)
			p->cls = conf_class_find(p->kq->sc->cs, p->cls->name);
}

/* A reply owed once the backend answers; NULL (after replying) on OOM. */
struct op_pend *ops_pend(struct client *c, struct request *rq)
{
	struct op_pend *p = calloc(1, sizeof(*p));

	if (p == NULL) {
		ops_error(c, rq, ADMIT_E_UNAVAILABLE, "out of memory");
		return NULL;
	}
	p->conn = c;
	p->id = rq->id; /* owned from here */
	rq->id = NULL;
	TAILQ_INSERT_TAIL(&c->pends, p, conn_link);
	return p;
}

/* The pend's reply is sent (or its client left): unlink and free it. */
void ops_pend_done(struct op_pend *p, struct preply *r)
{
	if (p->conn != NULL) {
		TAILQ_REMOVE(&p->conn->pends, p, conn_link);
		client_reply(p->conn, r);
		client_waiter_done(p->conn);
	} else {
		preply_free(r);
	}
	if (p->kq != NULL)
		kq_unref(p->kq);
	free(p->id);
	free(p);
}
