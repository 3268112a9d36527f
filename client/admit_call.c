/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * admit_call.c - libadmit's round trip: one request out, its reply back.
 *
 * Owns: making sure the handle is connected before a request (a connection
 * the daemon closed is dropped, connecting counts against an acquire's
 * budget), framing a request with a fresh integer id, skipping a reply
 * with another id (a late answer to a call that gave up), the client's
 * deadline (the daemon's wait budget plus the I/O timeout), and ending an
 * acquire's wait that admit_cancel asked to end: the cancel op sent, the
 * replies read, a lease that came first released. One request is in
 * flight per handle at a time.
 */

#include "admit_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Make sure the handle is connected before a request: drop a connection the
 * daemon has closed since the last call, and connect when there is none,
 * retrying a missing or refused socket for the connect timeout, or `cap_ms`
 * when that is shorter (>= 0: the call's own budget). 0, or -1 with res
 * failed (ADMIT_E_CONNECT, the message naming the socket and errno).
 */
static int admit_ready(struct admit *a, int64_t cap_ms, struct admit_result *res)
{
	int64_t within = a->connect_timeout_ms;
	char msg[512];

	if (a->fd >= 0 && admit_hung_up(a))
		admit_drop(a);
	if (a->fd >= 0)
		return 0;
	if (cap_ms >= 0 && cap_ms < within)
		within = cap_ms;
	if (admit_open(a, admit_now_ms() + within) == 0)
		return 0;
	snprintf(msg, sizeof(msg), "%s: %s", a->path, strerror(errno));
	admit_fail(res, ADMIT_E_CONNECT, msg);
	return -1;
}

/*
 * Read one reply line into *line (malloc'd) and *rep (its JSON object).
 * 0, or a negative admit_client_err (ADMIT_E_PROTO: not a JSON object).
 */
static int admit_next_reply(struct admit *a, int64_t deadline, char **line, json_t **rep)
{
	json_error_t jerr;
	int rc;

	free(*line);
	*line = NULL;
	json_decref(*rep);
	*rep = NULL;
	rc = admit_read_line(a, deadline, line);
	if (rc != 0)
		return rc;
	*rep = json_loads(*line, 0, &jerr);
	return json_is_object(*rep) ? 0 : ADMIT_E_PROTO;
}

/* Send one request object (not consumed) with id `id`; 0 or an error. */
static int admit_send_req(struct admit *a, json_t *req, int64_t id)
{
	char *line;
	size_t n;
	int rc;

	if (json_object_set_new(req, "id", json_integer(id)) < 0)
		return ADMIT_E_NOMEM;
	line = json_dumps(req, JSON_COMPACT);
	if (line == NULL)
		return ADMIT_E_NOMEM;
	n = strlen(line);
	line[n] = '\n'; /* json_dumps' NUL becomes the frame's newline */
	rc = admit_send_all(a, line, n + 1, admit_now_ms() + a->io_timeout_ms);
	free(line);
	return rc;
}

/*
 * admit_cancel interrupted the wait for the reply to acquire `id`: send the
 * cancel, then read until that acquire's reply (the daemon answers it
 * first, "canceled" when it still waited) and the cancel's. A lease the
 * acquire got before the cancel arrived is released. A daemon without the
 * op (its cancel reply fails before the acquire's came) gets the
 * connection closed, which ends the wait there too. Fills res with
 * ADMIT_E_INTERRUPTED (raw: the acquire's reply, when it came); returns it.
 */
static int admit_cancel_wait(struct admit *a, int64_t id, struct admit_result *res)
{
	json_t *req = json_pack("{s:s, s:I}", "op", "cancel", "of", (json_int_t)id);
	json_t *rep = NULL;
	char *line = NULL, *lease = NULL;
	const char *msg = "canceled: the acquire spent nothing";
	struct admit_result rel;
	int64_t cid = ++a->next_id, deadline = admit_now_ms() + a->io_timeout_ms, rid;
	bool got = false, done = false;
	int rc;

	a->cancelable = false;
	rc = req == NULL ? ADMIT_E_NOMEM : admit_send_req(a, req, cid);
	json_decref(req);
	while (rc == 0 && !(got && done)) {
		rc = admit_next_reply(a, deadline, &line, &rep);
		if (rc != 0)
			break;
		rid = admit_json_int(rep, "id");
		if (rid == id && !got) {
			got = true;
			if (json_is_true(json_object_get(rep, "ok")))
				lease = admit_json_str(rep, "lease");
			free(res->raw);
			res->raw = line;
			line = NULL;
		} else if (rid == cid) {
			done = true;
			if (!got && !json_is_true(json_object_get(rep, "ok")))
				break; /* no cancel op: the acquire still waits */
		}
	}
	if (rc != 0 || !got) {
		admit_drop(a);
		msg = "canceled: the connection was closed to end the wait (leases of this "
		      "handle not detached went with it)";
	}
	if (lease != NULL && a->fd >= 0) {
		/* admitted before the cancel arrived: nobody will use it */
		admit_roundtrip(a, json_pack("{s:s, s:s}", "op", "release", "lease", lease), 0,
				false, &rel);
		admit_result_free(&rel);
		msg = "canceled: a lease admitted before the cancel arrived was released";
	}
	free(lease);
	free(line);
	json_decref(rep);
	return admit_fail(res, ADMIT_E_INTERRUPTED, msg);
}

/*
 * Send `req` (consumed) with a fresh id and read its reply into res.
 * `wait_ms` is how long the daemon may legitimately take (its wait budget),
 * -1 when unknown (no client deadline). An acquire passes its budget as
 * `wait_ms` with `acquire` set: connecting then counts against it (at most
 * the budget is spent connecting, and the timeout_ms sent is what is left),
 * and admit_cancel may end the wait for its reply.
 */
int admit_roundtrip(struct admit *a, json_t *req, int64_t wait_ms, bool acquire,
		    struct admit_result *res)
{
	char *reply = NULL;
	json_t *rep = NULL;
	int64_t id, deadline, t0, spent;
	int rc;

	admit_result_init(res);
	if (req == NULL)
		return admit_fail(res, ADMIT_E_NOMEM, NULL);
	t0 = admit_now_ms();
	if (admit_ready(a, acquire ? wait_ms : -1, res) < 0) {
		rc = res->err;
		goto out;
	}
	spent = admit_now_ms() - t0;
	if (acquire && wait_ms > 0 && spent > 0) {
		/* what is left of the budget; a budget stays a wait (>= 1 ms) */
		wait_ms = wait_ms - spent > 1 ? wait_ms - spent : 1;
		if (json_object_set_new(req, "timeout_ms", json_integer(wait_ms)) < 0) {
			rc = admit_fail(res, ADMIT_E_NOMEM, NULL);
			goto out;
		}
	}
	id = ++a->next_id;
	deadline = wait_ms < 0 ? -1 : admit_now_ms() + wait_ms + a->io_timeout_ms;
	rc = admit_send_req(a, req, id);
	a->cancelable = acquire && wait_ms != 0;
	while (rc == 0) {
		rc = admit_next_reply(a, deadline, &reply, &rep);
		/* no id: an answer about the line itself (line_too_long) */
		if (rc != 0 || json_object_get(rep, "id") == NULL ||
		    admit_json_int(rep, "id") == id)
			break;
	}
	if (rc == ADMIT_E_INTERRUPTED) {
		rc = admit_cancel_wait(a, id, res);
		goto out;
	}
	a->cancelable = false;
	if (rc != 0) {
		admit_drop(a);
		admit_fail(res, rc, NULL);
		goto out;
	}
	res->raw = reply;
	reply = NULL;
	rc = admit_decode(rep, res);
	if (rc == ADMIT_E_LINE_TOO_LONG)
		admit_drop(a); /* the daemon closes after line_too_long */
out:
	free(reply);
	json_decref(rep);
	json_decref(req);
	return rc;
}
