/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * ops_int.h - what the files of the ops share and no one else sees.
 *
 * Owns: the handlers the op table of ops.c dispatches to (ops_traffic.c,
 * ops_admin.c), the error reply and the owed replies (ops_reply.c), and the
 * resolution of a request's targets (ops_target.c).
 */

#ifndef ADMITD_OPS_INT_H
#define ADMITD_OPS_INT_H

#include "ops.h"

#include "engine.h"
#include "lease.h"
#include "proto.h"
#include "scope.h"
#include "waitq.h"

/* ---- ops_reply.c ---- */

/* ops_error - reply to rq with error e and msg. */
void ops_error(struct client *c, const struct request *rq, enum admit_err e, const char *msg);
/* ops_pend - a reply owed once the backend answers; NULL (after replying) on OOM. */
struct op_pend *ops_pend(struct client *c, struct request *rq);
/* ops_pend_done - the pend's reply r is sent (or its client left): unlink and free it. */
void ops_pend_done(struct op_pend *p, struct preply *r);

/* ---- ops_target.c ---- */

/*
 * ops_meter_unknown - the first of tk[0..ntk) that no token rule of the
 * targets (cs[i], cls[i]) meters, or NULL.
 */
const char *ops_meter_unknown(const struct conf_scope *const *cs,
			      const struct conf_class *const *cls, size_t n,
			      const struct proto_token *tk, size_t ntk);
/* ops_meter_error - refuse rq: its field names a meter nothing counts. */
void ops_meter_error(struct client *c, const struct request *rq, const char *field,
		     const char *name);
/*
 * ops_targets - resolve rq's targets against the conf into out. false
 * (after replying) when one is wrong or memory runs out.
 */
bool ops_targets(struct client *c, struct request *rq, struct target_rt *out);

/* ---- the handlers: ops_traffic.c, ops_admin.c ---- */

void op_acquire(struct client *c, struct request *rq);
void op_release(struct client *c, struct request *rq);
void op_penalize(struct client *c, struct request *rq);
void op_status(struct client *c, struct request *rq);
void op_inspect(struct client *c, struct request *rq);
void op_reset(struct client *c, struct request *rq);
void op_override(struct client *c, struct request *rq);

#endif
