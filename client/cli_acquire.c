/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * cli_acquire.c - the `admit` commands that take and give back admissions:
 * acquire, try, once and release.
 *
 * Owns: an acquire's request built from the command line (SCOPE [KEY],
 * --url, --class, --cost, --timeout, --reserve; `admit run` builds its own
 * with it too), the lease printed and detached so that it outlives the
 * command, the shadow scope's warning, and release's --tokens and
 * --outcome with its "released" or "not held".
 */

#include "cli.h"

#include <stdlib.h>
#include <string.h>

void cli_acq_free(struct cli_acq *q)
{
	free(q->buf);
	q->buf = NULL;
}

static int cli_req_fill(const struct cli_args *ar, struct cli_acq *q)
{
	struct admit_req *rq = &q->rq;
	int64_t cost;
	int rc;

	rq->scope = ar->pos[0];
	rq->cls = ar->val[O_CLASS];
	rc = cli_key_args(ar, &rq->key, &rq->url);
	if (rc != 0)
		return rc;
	if (ar->set[O_COST]) {
		if (cli_int(ar->val[O_COST], &cost) < 0)
			return cli_usage_error("--cost %s: want an integer >= 0", ar->val[O_COST]);
		if (cost > CLI_MAX_COST)
			return cli_usage_error("--cost %s: at most 1000000000", ar->val[O_COST]);
		rq->cost = cost == 0 ? ADMIT_COST_ZERO : cost;
	}
	if (ar->set[O_TIMEOUT] && cli_duration(ar->val[O_TIMEOUT], true, &rq->timeout_ms) < 0)
		return cli_usage_error("--timeout %s: want a duration like 250ms, 5s, 1m",
				       ar->val[O_TIMEOUT]);
	if (ar->set[O_TIMEOUT] && rq->timeout_ms > CLI_MAX_WAIT_MS)
		return cli_usage_error("--timeout %s: at most 24h (86400s)", ar->val[O_TIMEOUT]);
	if (ar->set[O_RESERVE]) {
		rc = cli_token_list("reserve", ar->val[O_RESERVE], false, &q->buf, q->reserve,
				    &rq->nreserve);
		if (rc != 0)
			return rc;
		rq->reserve = q->reserve;
	}
	return 0;
}

int cli_req(const struct cli_args *ar, struct cli_acq *q)
{
	int rc = cli_req_fill(ar, q);

	if (rc != 0)
		cli_acq_free(q);
	return rc;
}

/* acquire and try: both detach and print the lease; once: no lease at all. */
static int cli_take(struct admit *a, const struct cli_args *ar, bool wait, bool lease)
{
	struct cli_acq q = { .rq = ADMIT_REQ_INIT };
	struct admit_req rq;
	struct admit_result r;
	int rc;

	rc = cli_req(ar, &q);
	if (rc != 0)
		return rc;
	rq = q.rq;
	rq.detach = lease;
	if (!lease)
		admit_once(a, &rq, &r);
	else if (wait)
		admit_acquire(a, &rq, &r);
	else
		admit_try(a, &rq, &r);
	if (r.err == ADMIT_OK && (r.lease == NULL) == lease)
		r.err = ADMIT_E_PROTO;
	if (r.err == ADMIT_OK) {
		if (lease)
			printf("%s\n", r.lease);
		if (r.shadow_limited)
			fprintf(stderr, "admit: shadow scope: would have been limited%s%s\n",
				r.rule ? " by " : "", r.rule ? r.rule : "");
	}
	rc = cli_done(!lease ? "once" : wait ? "acquire" : "try", &r);
	cli_acq_free(&q);
	return rc;
}

int cmd_acquire(struct admit *a, const struct cli_args *ar)
{
	return cli_take(a, ar, true, true);
}

int cmd_try(struct admit *a, const struct cli_args *ar)
{
	return cli_take(a, ar, false, true);
}

int cmd_once(struct admit *a, const struct cli_args *ar)
{
	return cli_take(a, ar, true, false);
}

int cmd_release(struct admit *a, const struct cli_args *ar)
{
	struct admit_token tk[CLI_MAX_TOKENS];
	struct admit_result r;
	char *buf = NULL;
	size_t n = 0;
	int rc;

	if (ar->set[O_TOKENS]) {
		rc = cli_token_list("tokens", ar->val[O_TOKENS], true, &buf, tk, &n);
		if (rc != 0) {
			free(buf);
			return rc;
		}
	}
	if (ar->set[O_OUTCOME] && strcmp(ar->val[O_OUTCOME], "ok") != 0 &&
	    strcmp(ar->val[O_OUTCOME], "limited") != 0 &&
	    strcmp(ar->val[O_OUTCOME], "error") != 0) {
		free(buf);
		return cli_usage_error("--outcome %s: want ok, limited or error",
				       ar->val[O_OUTCOME]);
	}
	admit_release_outcome(a, ar->pos[0], tk, n, ar->val[O_OUTCOME], &r);
	free(buf);
	if (r.err == ADMIT_OK)
		printf("%s\n", r.held ? "released" : "not held");
	rc = r.err == ADMIT_OK ? (r.held ? EXIT_ADMITTED : EXIT_NOT_HELD) : cli_fail("release", &r);
	admit_result_free(&r);
	return rc;
}
