/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * admit.c - libadmit: one blocking connection to admitd.
 *
 * Owns: finding and connecting the socket (argument, $ADMITD_SOCKET, the
 * default), line I/O with poll deadlines, encoding requests and decoding
 * replies (jansson) into struct admit_result. One request is in flight per
 * handle at a time; each carries a fresh integer id and a reply with another
 * id (a late answer to a call that gave up) is skipped. No global state, so
 * handles are independent across threads; SIGPIPE is avoided per send
 * (MSG_NOSIGNAL) rather than by touching the process's signal mask.
 */

#include "admit.h"

#include <jansson.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define ADMIT_IO_TIMEOUT_MS 10000
#define ADMIT_MAX_REPLY	    (16 * 1024 * 1024) /* a reply longer than this is garbage */

struct admit {
	int fd;
	char *path;
	int64_t io_timeout_ms;
	int64_t next_id;
	char *buf; /* bytes received and not yet consumed */
	size_t len;
	size_t cap;
};

static int64_t admit_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *admit_strdup(const char *s)
{
	return s ? strdup(s) : NULL;
}

/*
 * Connect fd to sun within a->io_timeout_ms. An AF_UNIX connect does not go
 * "in progress" the way TCP's does: on a full listen backlog (a frozen
 * daemon) a non-blocking connect fails at once with EAGAIN, and a blocking
 * one sleeps until the daemon accepts, forever if it never does. SO_SNDTIMEO
 * bounds that sleep (the kernel wakes the connect as soon as the backlog has
 * room); it is cleared again afterwards, the rest of the file polls instead.
 * 0, or -1 with errno set (ETIMEDOUT when the backlog stayed full).
 */
static int admit_connect_fd(struct admit *a, int fd, const struct sockaddr_un *sun)
{
	const struct timeval none = { 0, 0 };
	int64_t deadline = admit_now_ms() + (a->io_timeout_ms > 0 ? a->io_timeout_ms : 1);
	struct timeval tv;
	int64_t left;
	int rc;

	for (;;) {
		left = deadline - admit_now_ms();
		if (left <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		tv.tv_sec = (time_t)(left / 1000);
		tv.tv_usec = (suseconds_t)(left % 1000) * 1000;
		if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
			return -1;
		rc = connect(fd, (const struct sockaddr *)sun, sizeof(*sun));
		if (rc == 0 || (errno != EINTR && errno != EAGAIN))
			break;
		/* EINTR: retry with what is left; EAGAIN: the loop's deadline check */
	}
	if (rc < 0)
		return -1;
	return setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none));
}

/* Connect a->path; 0 or -1 with errno set. */
static int admit_open(struct admit *a)
{
	struct sockaddr_un sun;
	int fd, saved;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	if (strlen(a->path) >= sizeof(sun.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(sun.sun_path, a->path, strlen(a->path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (admit_connect_fd(a, fd, &sun) < 0) {
		saved = errno;
		close(fd);
		errno = saved;
		return -1;
	}
	a->fd = fd;
	a->len = 0;
	return 0;
}

/* Drop the connection: after an error its state (half a line?) is unknown. */
static void admit_drop(struct admit *a)
{
	if (a->fd >= 0)
		close(a->fd);
	a->fd = -1;
	a->len = 0;
}

struct admit *admit_connect(const char *path)
{
	struct admit *a;
	int saved;

	if (path == NULL || *path == '\0')
		path = getenv("ADMITD_SOCKET");
	if (path == NULL || *path == '\0')
		path = ADMIT_DEFAULT_SOCKET;
	a = calloc(1, sizeof(*a));
	if (a == NULL)
		return NULL;
	a->fd = -1;
	a->io_timeout_ms = ADMIT_IO_TIMEOUT_MS;
	a->path = strdup(path);
	if (a->path == NULL || admit_open(a) < 0)
		goto fail;
	return a;
fail:
	saved = errno;
	free(a->path);
	free(a);
	errno = saved;
	return NULL;
}

void admit_close(struct admit *a)
{
	if (a == NULL)
		return;
	admit_drop(a);
	free(a->path);
	free(a->buf);
	free(a);
}

const char *admit_socket_path(const struct admit *a)
{
	return a->path;
}

void admit_set_io_timeout(struct admit *a, int64_t ms)
{
	a->io_timeout_ms = ms < 0 ? 0 : ms;
}

/*
 * Wait for `events` on the socket until `deadline` (monotonic ms; -1 means
 * none). Returns 0 when ready, ADMIT_E_DEADLINE or ADMIT_E_IO.
 */
static int admit_wait(struct admit *a, short events, int64_t deadline)
{
	struct pollfd pfd = { .fd = a->fd, .events = events };
	int64_t left;
	int n;

	for (;;) {
		left = -1;
		if (deadline >= 0) {
			left = deadline - admit_now_ms();
			if (left < 0)
				left = 0;
		}
		n = poll(&pfd, 1, left > 1000000000 ? 1000000000 : (int)left);
		if (n > 0)
			return 0;
		if (n == 0)
			return ADMIT_E_DEADLINE;
		if (errno != EINTR)
			return ADMIT_E_IO;
	}
}

static int admit_send_all(struct admit *a, const char *p, size_t n, int64_t deadline)
{
	ssize_t w;
	int rc;

	while (n > 0) {
		rc = admit_wait(a, POLLOUT, deadline);
		if (rc != 0)
			return rc;
		w = send(a->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
				continue;
			return ADMIT_E_IO;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/*
 * Read one line (without its "\n" or "\r\n") into a malloc'd, NUL-terminated
 * string *out. Returns 0 or a negative admit_client_err.
 */
static int admit_read_line(struct admit *a, int64_t deadline, char **out)
{
	char *nl, *tmp;
	size_t ll;
	ssize_t r;
	int rc;

	for (;;) {
		nl = a->len ? memchr(a->buf, '\n', a->len) : NULL;
		if (nl != NULL)
			break;
		if (a->len >= ADMIT_MAX_REPLY)
			return ADMIT_E_PROTO;
		if (a->cap - a->len < 4096) {
			tmp = realloc(a->buf, a->cap ? a->cap * 2 : 8192);
			if (tmp == NULL)
				return ADMIT_E_NOMEM;
			a->buf = tmp;
			a->cap = a->cap ? a->cap * 2 : 8192;
		}
		rc = admit_wait(a, POLLIN, deadline);
		if (rc != 0)
			return rc;
		r = recv(a->fd, a->buf + a->len, a->cap - a->len, MSG_DONTWAIT);
		if (r == 0)
			return ADMIT_E_IO;
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
				continue;
			return ADMIT_E_IO;
		}
		a->len += (size_t)r;
	}
	ll = (size_t)(nl - a->buf);
	*out = malloc(ll + 1);
	if (*out == NULL)
		return ADMIT_E_NOMEM;
	memcpy(*out, a->buf, ll);
	if (ll > 0 && (*out)[ll - 1] == '\r')
		ll--;
	(*out)[ll] = '\0';
	a->len -= (size_t)(nl - a->buf) + 1;
	memmove(a->buf, nl + 1, a->len);
	return 0;
}

void admit_result_free(struct admit_result *res)
{
	size_t i;

	if (res == NULL)
		return;
	free(res->lease);
	free(res->backend);
	free(res->rule);
	free(res->message);
	free(res->version);
	free(res->raw);
	for (i = 0; i < res->nscopes; i++)
		free(res->scopes[i].name);
	free(res->scopes);
	memset(res, 0, sizeof(*res));
}

static void admit_result_init(struct admit_result *res)
{
	memset(res, 0, sizeof(*res));
	res->retry_after_ms = -1;
	res->waited_ms = -1;
	res->uptime_s = -1;
}

/* Fail `res` with a client-side error; returns err. */
static int admit_fail(struct admit_result *res, int err, const char *msg)
{
	res->err = err;
	free(res->message);
	res->message = admit_strdup(msg ? msg : admit_strerror(err));
	return err;
}

static int64_t admit_json_int(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

static char *admit_json_str(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	return json_is_string(v) ? strdup(json_string_value(v)) : NULL;
}

static int admit_decode_scopes(json_t *scopes, struct admit_result *res)
{
	const char *name;
	json_t *v;
	size_t i = 0;

	if (!json_is_object(scopes) || json_object_size(scopes) == 0)
		return 0;
	res->scopes = calloc(json_object_size(scopes), sizeof(*res->scopes));
	if (res->scopes == NULL)
		return -1;
	json_object_foreach (scopes, name, v) {
		res->scopes[i].name = strdup(name);
		if (res->scopes[i].name == NULL)
			return -1;
		res->scopes[i].leases = admit_json_int(v, "leases");
		res->scopes[i].waiting = admit_json_int(v, "waiting");
		res->nscopes = ++i;
	}
	return 0;
}

/* Fill res from a parsed reply object. Returns res->err. */
static int admit_decode(json_t *rep, struct admit_result *res)
{
	json_t *ok = json_object_get(rep, "ok");
	json_t *v;
	char *code;
	int e;

	if (!json_is_boolean(ok))
		return admit_fail(res, ADMIT_E_PROTO, "reply has no \"ok\"");
	res->retry_after_ms = admit_json_int(rep, "retry_after_ms");
	res->waited_ms = admit_json_int(rep, "waited_ms");
	res->uptime_s = admit_json_int(rep, "uptime_s");
	res->held = json_is_true(json_object_get(rep, "held"));
	res->shadow_limited = json_is_true(json_object_get(rep, "shadow_limited"));
	res->lease = admit_json_str(rep, "lease");
	res->backend = admit_json_str(rep, "backend");
	res->rule = admit_json_str(rep, "rule");
	res->message = admit_json_str(rep, "message");
	v = json_object_get(rep, "version");
	if (json_is_string(v))
		res->version = strdup(json_string_value(v));
	else if (json_is_integer(v) &&
		 asprintf(&res->version, "%lld", (long long)json_integer_value(v)) < 0)
		res->version = NULL;
	if (admit_decode_scopes(json_object_get(rep, "scopes"), res) < 0)
		return admit_fail(res, ADMIT_E_NOMEM, NULL);
	if (json_is_true(ok)) {
		res->err = ADMIT_OK;
		return ADMIT_OK;
	}
	code = admit_json_str(rep, "error");
	e = code ? admit_err_parse(code) : -1;
	if (e <= ADMIT_OK) {
		/* a code newer than this library: still a failure, say which */
		res->err = ADMIT_E_PROTO;
		if (res->message == NULL)
			res->message = code ? code : strdup("failed reply without \"error\"");
		else
			free(code);
		return res->err;
	}
	free(code);
	res->err = e;
	if (res->message == NULL)
		res->message = strdup(admit_err_msg(e));
	return e;
}

/*
 * Send `req` (consumed) with a fresh id and read its reply into res.
 * `wait_ms` is how long the daemon may legitimately take (its wait budget),
 * -1 when unknown (no client deadline).
 */
static int admit_roundtrip(struct admit *a, json_t *req, int64_t wait_ms, struct admit_result *res)
{
	char *line = NULL, *reply = NULL;
	json_t *rep = NULL;
	json_error_t jerr;
	int64_t id, deadline;
	size_t n;
	int rc;

	admit_result_init(res);
	if (req == NULL)
		return admit_fail(res, ADMIT_E_NOMEM, NULL);
	if (a->fd < 0 && admit_open(a) < 0) {
		rc = admit_fail(res, ADMIT_E_CONNECT, strerror(errno));
		goto out;
	}
	id = ++a->next_id;
	if (json_object_set_new(req, "id", json_integer(id)) < 0) {
		rc = admit_fail(res, ADMIT_E_NOMEM, NULL);
		goto out;
	}
	line = json_dumps(req, JSON_COMPACT);
	if (line == NULL) {
		rc = admit_fail(res, ADMIT_E_NOMEM, NULL);
		goto out;
	}
	n = strlen(line);
	line[n] = '\n'; /* json_dumps' NUL becomes the frame's newline */
	deadline = wait_ms < 0 ? -1 : admit_now_ms() + wait_ms + a->io_timeout_ms;
	rc = admit_send_all(a, line, n + 1, admit_now_ms() + a->io_timeout_ms);
	while (rc == 0) {
		free(reply);
		reply = NULL;
		rc = admit_read_line(a, deadline, &reply);
		if (rc != 0)
			break;
		json_decref(rep);
		rep = json_loads(reply, 0, &jerr);
		if (!json_is_object(rep)) {
			rc = ADMIT_E_PROTO;
			break;
		}
		/* no id: an answer about the line itself (line_too_long) */
		if (json_object_get(rep, "id") == NULL || admit_json_int(rep, "id") == id)
			break;
	}
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
	free(line);
	free(reply);
	json_decref(rep);
	json_decref(req);
	return rc;
}

/* Set `k` to a string when v is not NULL; 0 or -1 (out of memory). */
static int admit_set_str(json_t *o, const char *k, const char *v)
{
	return v ? json_object_set_new(o, k, json_string(v)) : 0;
}

/* scope, key|url, class, cost of one target into o; 0, or -1 bad/nomem. */
static int admit_set_target(json_t *o, const char *scope, const char *key, const char *url,
			    const char *cls, int64_t cost)
{
	if (scope == NULL || (key && url) || cost < 0)
		return -1;
	if (admit_set_str(o, "scope", scope) < 0 || admit_set_str(o, "key", key) < 0 ||
	    admit_set_str(o, "url", url) < 0 || admit_set_str(o, "class", cls) < 0)
		return -1;
	if (cost > 0 && json_object_set_new(o, "cost", json_integer(cost)) < 0)
		return -1;
	return 0;
}

static json_t *admit_encode_acquire(const struct admit_req *rq, int64_t timeout_ms)
{
	json_t *o = json_pack("{s:s}", "op", "acquire");
	json_t *arr, *t;
	size_t i;

	if (o == NULL)
		return NULL;
	if (rq->ntargets > 0) {
		arr = json_array();
		if (arr == NULL || json_object_set_new(o, "targets", arr) < 0)
			goto fail;
		for (i = 0; i < rq->ntargets; i++) {
			const struct admit_target *tg = &rq->targets[i];

			t = json_object();
			if (t == NULL || json_array_append_new(arr, t) < 0 ||
			    admit_set_target(t, tg->scope, tg->key, tg->url, tg->cls, tg->cost) < 0)
				goto fail;
		}
	} else if (admit_set_target(o, rq->scope, rq->key, rq->url, rq->cls, rq->cost) < 0) {
		goto fail;
	}
	if (timeout_ms >= 0 && json_object_set_new(o, "timeout_ms", json_integer(timeout_ms)) < 0)
		goto fail;
	if (rq->detach && json_object_set_new(o, "detach", json_true()) < 0)
		goto fail;
	return o;
fail:
	json_decref(o);
	return NULL;
}

static int admit_do_acquire(struct admit *a, const struct admit_req *rq, int64_t timeout_ms,
			    struct admit_result *res)
{
	json_t *req;

	if (a == NULL || rq == NULL || timeout_ms < ADMIT_TIMEOUT_DEFAULT) {
		admit_result_init(res);
		return admit_fail(res, ADMIT_E_ARG, "no handle, no request or a negative timeout");
	}
	req = admit_encode_acquire(rq, timeout_ms);
	if (req == NULL) {
		admit_result_init(res);
		return admit_fail(res, ADMIT_E_ARG,
				  "acquire needs a scope, at most one of key and url, cost >= 0");
	}
	return admit_roundtrip(a, req, timeout_ms, res);
}

int admit_acquire(struct admit *a, const struct admit_req *rq, struct admit_result *res)
{
	return admit_do_acquire(a, rq, rq ? rq->timeout_ms : 0, res);
}

int admit_try(struct admit *a, const struct admit_req *rq, struct admit_result *res)
{
	return admit_do_acquire(a, rq, 0, res);
}

int admit_release(struct admit *a, const char *lease, const struct admit_token *tokens,
		  size_t ntokens, struct admit_result *res)
{
	json_t *req, *tk;
	size_t i;

	if (a == NULL || lease == NULL || (ntokens > 0 && tokens == NULL)) {
		admit_result_init(res);
		return admit_fail(res, ADMIT_E_ARG, "release needs a handle and a lease");
	}
	req = json_pack("{s:s, s:s}", "op", "release", "lease", lease);
	if (req != NULL && ntokens > 0) {
		tk = json_object();
		if (tk == NULL || json_object_set_new(req, "tokens", tk) < 0)
			goto nomem;
		for (i = 0; i < ntokens; i++)
			if (tokens[i].name == NULL ||
			    json_object_set_new(tk, tokens[i].name, json_integer(tokens[i].count)) <
				0)
				goto nomem;
	}
	return admit_roundtrip(a, req, 0, res);
nomem:
	json_decref(req);
	admit_result_init(res);
	return admit_fail(res, ADMIT_E_ARG, "a token without a name");
}

int admit_penalize(struct admit *a, const char *scope, const char *key, const char *url,
		   int64_t retry_after_ms, const char *retry_after, struct admit_result *res)
{
	json_t *req;
	int rc = -1;

	if (a == NULL || (retry_after == NULL && retry_after_ms < 0)) {
		admit_result_init(res);
		return admit_fail(res, ADMIT_E_ARG, "penalize needs a retry-after");
	}
	req = json_pack("{s:s}", "op", "penalize");
	if (req != NULL && admit_set_target(req, scope, key, url, NULL, 0) == 0) {
		if (retry_after)
			rc = json_object_set_new(req, "retry_after", json_string(retry_after));
		else
			rc = json_object_set_new(req, "retry_after_ms",
						 json_integer(retry_after_ms));
	}
	if (rc < 0) {
		json_decref(req);
		admit_result_init(res);
		return admit_fail(res, ADMIT_E_ARG, "penalize needs a scope and key or url");
	}
	return admit_roundtrip(a, req, 0, res);
}

int admit_status(struct admit *a, struct admit_result *res)
{
	return admit_roundtrip(a, json_pack("{s:s}", "op", "status"), 0, res);
}

int admit_ping(struct admit *a, struct admit_result *res)
{
	return admit_roundtrip(a, json_pack("{s:s}", "op", "ping"), 0, res);
}

const char *admit_strerror(int err)
{
	switch (err) {
	case ADMIT_E_CONNECT: return "daemon unreachable";
	case ADMIT_E_IO: return "connection to the daemon lost";
	case ADMIT_E_DEADLINE: return "no reply from the daemon in time";
	case ADMIT_E_PROTO: return "reply not understood";
	case ADMIT_E_ARG: return "invalid arguments";
	case ADMIT_E_NOMEM: return "out of memory";
	default: break;
	}
	if (err >= ADMIT_OK && err < ADMIT_E__COUNT)
		return admit_err_str(err);
	return "unknown error";
}
