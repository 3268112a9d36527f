/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * admit.c - libadmit: one blocking connection to admitd.
 *
 * Owns: finding and connecting the socket (argument, $ADMITD_SOCKET, the
 * default), retrying a connect that finds no daemon yet (missing or refused
 * socket) within the connect timeout and the call's budget, noticing a
 * connection the daemon closed before a call is sent on it, line I/O with
 * poll deadlines, encoding requests and decoding replies (jansson) into
 * struct admit_result. One request is in flight per handle at a time; each
 * carries a fresh integer id and a reply with another id (a late answer to a
 * call that gave up) is skipped. No global state (the backoff's jitter comes
 * from a per-handle generator), so handles are independent across threads;
 * SIGPIPE is avoided per send (MSG_NOSIGNAL) rather than by touching the
 * process's signal mask.
 */

#include "admit.h"

#include <jansson.h>

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define ADMIT_IO_TIMEOUT_MS  10000
#define ADMIT_MAX_REPLY	     (16 * 1024 * 1024) /* a reply longer than this is garbage */
#define ADMIT_BACKOFF_MIN_MS 20			/* first pause between connect attempts */
#define ADMIT_BACKOFF_MAX_MS 200

struct admit {
	int fd;
	char *path;
	int64_t io_timeout_ms;
	int64_t connect_timeout_ms;
	uint64_t rng; /* xorshift state for the backoff's jitter */
	int64_t next_id;
	char *buf; /* bytes received and not yet consumed */
	size_t len;
	size_t cap;
	/* admit_cancel's side, touched from other threads and signal
	 * handlers: the request flag and the eventfd that wakes the poll (-1
	 * until the first acquire that may wait makes it). */
	atomic_int cancel;
	atomic_int wake_fd;
	bool cancelable; /* the call in progress reads an acquire's reply */
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

/* A pseudo-random number from the handle's own generator (xorshift64). */
static uint64_t admit_rand(struct admit *a)
{
	uint64_t x = a->rng;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	a->rng = x;
	return x;
}

/* Sleep until the monotonic instant `until_ms` (signals do not cut it short). */
static void admit_sleep_until(int64_t until_ms)
{
	struct timespec ts;
	int64_t left;

	while ((left = until_ms - admit_now_ms()) > 0) {
		ts.tv_sec = (time_t)(left / 1000);
		ts.tv_nsec = (long)(left % 1000) * 1000000L;
		if (nanosleep(&ts, NULL) == 0)
			break;
		if (errno != EINTR)
			break;
	}
}

/*
 * One connect attempt on a->path. 0 (a->fd set), or -1 with errno set.
 */
static int admit_open_once(struct admit *a, const struct sockaddr_un *sun)
{
	int fd, saved;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (admit_connect_fd(a, fd, sun) < 0) {
		saved = errno;
		close(fd);
		errno = saved;
		return -1;
	}
	a->fd = fd;
	a->len = 0;
	return 0;
}

/*
 * Connect a->path, retrying a socket that is missing (ENOENT: the daemon
 * has not created it yet) or refused (ECONNREFUSED: a stale socket file, or
 * a daemon not listening yet) until `deadline` (monotonic ms): 20 ms apart,
 * doubling up to 200 ms, each pause jittered down by up to half so clients
 * started together do not knock together. The last pause is cut to end at
 * the deadline, where one last attempt is made. 0 or -1 with errno set.
 */
static int admit_open(struct admit *a, int64_t deadline)
{
	struct sockaddr_un sun;
	int64_t backoff = ADMIT_BACKOFF_MIN_MS, pause, now;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	if (strlen(a->path) >= sizeof(sun.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(sun.sun_path, a->path, strlen(a->path) + 1);
	for (;;) {
		if (admit_open_once(a, &sun) == 0)
			return 0;
		if (errno != ENOENT && errno != ECONNREFUSED)
			return -1;
		now = admit_now_ms();
		if (now >= deadline)
			return -1;
		pause = backoff - (int64_t)(admit_rand(a) % (uint64_t)(backoff / 2 + 1));
		admit_sleep_until(now + pause < deadline ? now + pause : deadline);
		backoff = backoff * 2 > ADMIT_BACKOFF_MAX_MS ? ADMIT_BACKOFF_MAX_MS : backoff * 2;
	}
}

/* Drop the connection: after an error its state (half a line?) is unknown. */
static void admit_drop(struct admit *a)
{
	if (a->fd >= 0)
		close(a->fd);
	a->fd = -1;
	a->len = 0;
}

/*
 * Whether the daemon has closed its end (it stopped or restarted since the
 * last call): a request sent now would be lost with the connection, so the
 * caller connects again first. Replies still unread before the end do not
 * matter: one call is in flight at a time, and it is over.
 */
static bool admit_hung_up(const struct admit *a)
{
	struct pollfd pfd = { .fd = a->fd, .events = POLLIN | POLLRDHUP };

	if (poll(&pfd, 1, 0) < 0)
		return errno != EINTR;
	return (pfd.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL)) != 0;
}

/*
 * A connect timeout as $ADMITD_CONNECT_TIMEOUT gives it: milliseconds, or a
 * number with a unit ms, s or m ("250ms", "1.5s"). -1 when s is not one.
 */
static int64_t admit_parse_connect_timeout(const char *s)
{
	static const struct {
		const char *unit;
		double ms;
	} units[] = { { "", 1 }, { "ms", 1 }, { "s", 1000 }, { "m", 60000 } };
	char *end;
	double v;
	size_t i;

	if (s == NULL || !isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || !isfinite(v) || v < 0)
		return -1;
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strcmp(end, units[i].unit) == 0 && v * units[i].ms < 9e15)
			return (int64_t)llround(v * units[i].ms);
	return -1;
}

struct admit *admit_new(const char *path)
{
	struct admit *a;
	int64_t ms;

	if (path == NULL || *path == '\0')
		path = getenv("ADMITD_SOCKET");
	if (path == NULL || *path == '\0')
		path = ADMIT_DEFAULT_SOCKET;
	a = calloc(1, sizeof(*a));
	if (a == NULL)
		return NULL;
	a->fd = -1;
	atomic_init(&a->cancel, 0);
	atomic_init(&a->wake_fd, -1);
	a->io_timeout_ms = ADMIT_IO_TIMEOUT_MS;
	ms = admit_parse_connect_timeout(getenv("ADMITD_CONNECT_TIMEOUT"));
	a->connect_timeout_ms = ms >= 0 ? ms : ADMIT_CONNECT_TIMEOUT_MS;
	a->rng = ((uint64_t)admit_now_ms() << 20) ^ (uint64_t)getpid() ^ (uint64_t)(uintptr_t)a;
	if (a->rng == 0)
		a->rng = 1;
	a->path = strdup(path);
	if (a->path == NULL) {
		free(a);
		return NULL;
	}
	return a;
}

struct admit *admit_connect(const char *path)
{
	struct admit *a = admit_new(path);
	int saved;

	if (a == NULL)
		return NULL;
	if (admit_open(a, admit_now_ms() + a->connect_timeout_ms) < 0) {
		saved = errno;
		admit_close(a);
		errno = saved;
		return NULL;
	}
	return a;
}

void admit_close(struct admit *a)
{
	if (a == NULL)
		return;
	admit_drop(a);
	if (atomic_load(&a->wake_fd) >= 0)
		close(atomic_load(&a->wake_fd));
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

void admit_set_connect_timeout(struct admit *a, int64_t ms)
{
	a->connect_timeout_ms = ms < 0 ? 0 : ms;
}

/* Empty the eventfd admit_cancel writes to (it is non-blocking). */
static void admit_drain_wake(struct admit *a)
{
	int fd = atomic_load(&a->wake_fd);
	uint64_t v;
	ssize_t r;

	if (fd >= 0) {
		r = read(fd, &v, sizeof(v));
		(void)r; /* EAGAIN: it was empty */
	}
}

/*
 * Wait for `events` on the socket until `deadline` (monotonic ms; -1 means
 * none). Returns 0 when ready, ADMIT_E_DEADLINE or ADMIT_E_IO; while the
 * call reads an acquire's reply (a->cancelable), ADMIT_E_INTERRUPTED once
 * admit_cancel asked for it (its eventfd wakes the poll, a signal's EINTR
 * finds the flag).
 */
static int admit_wait(struct admit *a, short events, int64_t deadline)
{
	struct pollfd pfd[2] = { { .fd = a->fd, .events = events },
				 { .fd = atomic_load(&a->wake_fd), .events = POLLIN } };
	nfds_t nfds = a->cancelable && pfd[1].fd >= 0 ? 2 : 1;
	int64_t left;
	int n;

	for (;;) {
		if (a->cancelable && atomic_load(&a->cancel))
			return ADMIT_E_INTERRUPTED;
		left = -1;
		if (deadline >= 0) {
			left = deadline - admit_now_ms();
			if (left < 0)
				left = 0;
		}
		n = poll(pfd, nfds, left > 1000000000 ? 1000000000 : (int)left);
		if (n > 0 && pfd[0].revents != 0)
			return 0;
		if (n == 0)
			return ADMIT_E_DEADLINE;
		if (n < 0 && errno != EINTR)
			return ADMIT_E_IO;
		/* EINTR, or the eventfd (emptied here, so that a stale wake-up
		 * cannot spin): the loop's check of the flag */
		if (n > 0)
			admit_drain_wake(a);
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

static void admit_counts_free(struct admit_count *c, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(c[i].name);
	free(c);
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
	for (i = 0; i < res->nscopes; i++) {
		free(res->scopes[i].name);
		admit_counts_free(res->scopes[i].refusals, res->scopes[i].nrefusals);
		free(res->scopes[i].wait_buckets);
	}
	free(res->wait_bounds_ms);
	free(res->scopes);
	if (res->redis != NULL)
		admit_counts_free(res->redis->errors, res->redis->nerrors);
	free(res->redis);
	if (res->inspect != NULL) {
		free(res->inspect->scope);
		free(res->inspect->key);
		for (i = 0; i < res->inspect->nrules; i++)
			free(res->inspect->rules[i].rule);
		free(res->inspect->rules);
	}
	free(res->inspect);
	memset(res, 0, sizeof(*res));
}

static void admit_result_init(struct admit_result *res)
{
	memset(res, 0, sizeof(*res));
	res->retry_after_ms = -1;
	res->waited_ms = -1;
	res->uptime_s = -1;
	res->limit = -1;
	res->uptime_ms = -1;
	res->connections = -1;
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

/*
 * The integer members of object `o` as name/count pairs (members that are
 * not integers are skipped). 0, or -1 out of memory (what was filled is
 * still in *out / *n for the caller to free).
 */
static int admit_decode_counts(json_t *o, struct admit_count **out, size_t *n)
{
	const char *name;
	json_t *v;

	*out = NULL;
	*n = 0;
	if (!json_is_object(o) || json_object_size(o) == 0)
		return 0;
	*out = calloc(json_object_size(o), sizeof(**out));
	if (*out == NULL)
		return -1;
	json_object_foreach (o, name, v) {
		if (!json_is_integer(v))
			continue;
		(*out)[*n].name = strdup(name);
		if ((*out)[*n].name == NULL)
			return -1;
		(*out)[*n].count = (int64_t)json_integer_value(v);
		(*n)++;
	}
	return 0;
}

/*
 * The integers of array a into a malloc'd *out (other members are skipped).
 * 0 (nothing when a is no array or empty), or -1 out of memory.
 */
static int admit_decode_ints(json_t *a, int64_t **out, size_t *n)
{
	size_t i;
	json_t *v;

	*out = NULL;
	*n = 0;
	if (!json_is_array(a) || json_array_size(a) == 0)
		return 0;
	*out = calloc(json_array_size(a), sizeof(**out));
	if (*out == NULL)
		return -1;
	json_array_foreach (a, i, v)
		if (json_is_integer(v))
			(*out)[(*n)++] = (int64_t)json_integer_value(v);
	return 0;
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
		struct admit_scope_stat *st = &res->scopes[i];

		st->name = strdup(name);
		if (st->name == NULL)
			return -1;
		res->nscopes = ++i;
		st->leases = admit_json_int(v, "leases");
		st->waiting = admit_json_int(v, "waiting");
		st->keys = admit_json_int(v, "keys");
		st->admitted = admit_json_int(v, "admitted");
		st->refused = admit_json_int(v, "refused");
		st->timeouts = admit_json_int(v, "timeouts");
		st->canceled = admit_json_int(v, "canceled");
		st->fallback_admitted = admit_json_int(v, "fallback_admitted");
		st->shadow_limited = admit_json_int(v, "shadow_limited");
		st->expired = admit_json_int(v, "expired");
		st->wait_ms_total = admit_json_int(v, "wait_ms_total");
		st->releases = admit_json_int(v, "releases");
		st->penalties = admit_json_int(v, "penalties");
		if (admit_decode_ints(json_object_get(v, "wait_buckets"), &st->wait_buckets,
				      &st->nwait_buckets) < 0)
			return -1;
		if (admit_decode_counts(json_object_get(v, "refusals"), &st->refusals,
					&st->nrefusals) < 0)
			return -1;
	}
	return 0;
}

static int admit_decode_redis(json_t *o, struct admit_result *res)
{
	struct admit_redis_stat *r;

	if (!json_is_object(o))
		return 0;
	r = res->redis = calloc(1, sizeof(*res->redis));
	if (r == NULL)
		return -1;
	r->pods_seen = admit_json_int(o, "pods_seen");
	r->queued = admit_json_int(o, "queued");
	r->reconciled = admit_json_int(o, "reconciled");
	r->rebooked = admit_json_int(o, "rebooked");
	r->dropped = admit_json_int(o, "dropped");
	return admit_decode_counts(json_object_get(o, "errors"), &r->errors, &r->nerrors);
}

/* The inspect fields of a reply; only called for an inspect request. */
static int admit_decode_inspect(json_t *rep, struct admit_result *res)
{
	struct admit_inspect *in;
	json_t *q = json_object_get(rep, "quota"), *rules = json_object_get(rep, "rules"), *v;
	size_t i;

	in = res->inspect = calloc(1, sizeof(*res->inspect));
	if (in == NULL)
		return -1;
	in->scope = admit_json_str(rep, "scope");
	in->key = admit_json_str(rep, "key");
	in->penalty_ms = admit_json_int(rep, "penalty_ms");
	in->next_in_ms = admit_json_int(rep, "next_in_ms");
	in->leases = admit_json_int(rep, "leases");
	in->has_quota = json_is_object(q);
	in->quota_used = admit_json_int(q, "used");
	in->quota_limit = admit_json_int(q, "limit");
	in->quota_frees_in_ms = admit_json_int(q, "frees_in_ms");
	if (!json_is_array(rules) || json_array_size(rules) == 0)
		return 0;
	in->rules = calloc(json_array_size(rules), sizeof(*in->rules));
	if (in->rules == NULL)
		return -1;
	json_array_foreach (rules, i, v) {
		struct admit_rule_stat *rs = &in->rules[in->nrules];

		if (!json_is_object(v))
			continue;
		rs->rule = admit_json_str(v, "rule");
		in->nrules++;
		if (rs->rule == NULL && json_is_string(json_object_get(v, "rule")))
			return -1;
		rs->remaining = admit_json_int(v, "remaining");
		rs->capacity = admit_json_int(v, "capacity");
		rs->full_in_ms = admit_json_int(v, "full_in_ms");
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
	res->uptime_ms = admit_json_int(rep, "uptime_ms");
	res->connections = admit_json_int(rep, "connections");
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
	res->limit = admit_json_int(rep, "limit");
	if (admit_decode_scopes(json_object_get(rep, "scopes"), res) < 0 ||
	    admit_decode_redis(json_object_get(rep, "redis"), res) < 0 ||
	    admit_decode_ints(json_object_get(rep, "wait_bounds_ms"), &res->wait_bounds_ms,
			      &res->nwait_bounds) < 0)
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
		admit_release(a, lease, NULL, 0, &rel);
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
static int admit_roundtrip(struct admit *a, json_t *req, int64_t wait_ms, bool acquire,
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

/* Set `k` to a string when v is not NULL; 0 or -1 (out of memory). */
static int admit_set_str(json_t *o, const char *k, const char *v)
{
	return v ? json_object_set_new(o, k, json_string(v)) : 0;
}

/*
 * scope, key|url, class, cost of one target into o; 0, or -1 bad/nomem.
 * cost: 0 sends nothing (the daemon's 1), ADMIT_COST_ZERO sends 0.
 */
static int admit_set_target(json_t *o, const char *scope, const char *key, const char *url,
			    const char *cls, int64_t cost)
{
	if (scope == NULL || (key && url) || (cost < 0 && cost != ADMIT_COST_ZERO))
		return -1;
	if (admit_set_str(o, "scope", scope) < 0 || admit_set_str(o, "key", key) < 0 ||
	    admit_set_str(o, "url", url) < 0 || admit_set_str(o, "class", cls) < 0)
		return -1;
	if (cost != 0 &&
	    json_object_set_new(o, "cost", json_integer(cost == ADMIT_COST_ZERO ? 0 : cost)) < 0)
		return -1;
	return 0;
}

/*
 * One "NAME":N of a {name: count} object; 0, or -1: the name missing or
 * already there, n below min, out of memory.
 */
static int admit_set_count(json_t *obj, const char *name, int64_t n, int64_t min)
{
	if (name == NULL || n < min || json_object_get(obj, name) != NULL)
		return -1;
	return json_object_set_new(obj, name, json_integer(n));
}

/*
 * {"NAME":COUNT,...} from n token counts under `k` of o (nothing when n is
 * 0). 0, or -1: a name missing or given twice, a negative count, more than
 * ADMIT_MAX_TOKENS, out of memory.
 */
static int admit_set_tokens(json_t *o, const char *k, const struct admit_token *tk, size_t n)
{
	json_t *obj;
	size_t i;

	if (n == 0)
		return 0;
	if (tk == NULL || n > ADMIT_MAX_TOKENS)
		return -1;
	obj = json_object();
	if (obj == NULL || json_object_set_new(o, k, obj) < 0)
		return -1;
	for (i = 0; i < n; i++)
		if (admit_set_count(obj, tk[i].name, tk[i].count, 0) < 0)
			return -1;
	return 0;
}

static json_t *admit_encode_acquire(const struct admit_req *rq, int64_t timeout_ms, bool lease)
{
	json_t *o = json_pack("{s:s}", "op", "acquire");
	json_t *arr, *t;
	size_t i;

	if (o == NULL)
		return NULL;
	if (rq->ntargets > 0) {
		arr = json_array();
		if (rq->targets == NULL || arr == NULL ||
		    json_object_set_new(o, "targets", arr) < 0)
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
	if (admit_set_tokens(o, "reserve", rq->reserve, rq->nreserve) < 0)
		goto fail;
	/* nothing to release: nothing to detach or to settle either */
	if (!lease &&
	    (rq->detach || rq->nreserve > 0 || json_object_set_new(o, "lease", json_false()) < 0))
		goto fail;
	return o;
fail:
	json_decref(o);
	return NULL;
}

/*
 * Ready admit_cancel for an acquire that may wait: make the eventfd that
 * wakes its poll (without one, only a signal's EINTR does), and forget a
 * cancel that came before this call.
 */
static void admit_arm_cancel(struct admit *a)
{
	int fd;

	if (atomic_load(&a->wake_fd) < 0) {
		fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (fd >= 0)
			atomic_store(&a->wake_fd, fd);
	}
	atomic_store(&a->cancel, 0);
	admit_drain_wake(a);
}

int admit_cancel(struct admit *a)
{
	uint64_t one = 1;
	ssize_t r;
	int fd;

	if (a == NULL)
		return -1;
	atomic_store(&a->cancel, 1);
	fd = atomic_load(&a->wake_fd);
	if (fd >= 0) {
		r = write(fd, &one, sizeof(one));
		(void)r; /* EAGAIN: the counter is full, a wake-up is pending anyway */
	}
	return 0;
}

static int admit_do_acquire(struct admit *a, const struct admit_req *rq, int64_t timeout_ms,
			    bool lease, struct admit_result *res)
{
	json_t *req;

	if (a == NULL || rq == NULL || timeout_ms < ADMIT_TIMEOUT_DEFAULT) {
		admit_result_init(res);
		return admit_fail(res, ADMIT_E_ARG, "no handle, no request or a negative timeout");
	}
	req = admit_encode_acquire(rq, timeout_ms, lease);
	if (req == NULL) {
		admit_result_init(res);
		return admit_fail(res, ADMIT_E_ARG,
				  "acquire needs a scope, at most one of key and url, cost >= 0 "
				  "(or ADMIT_COST_ZERO), named reserve counts >= 0; without a "
				  "lease, neither detach nor reserve");
	}
	if (timeout_ms != 0)
		admit_arm_cancel(a);
	return admit_roundtrip(a, req, timeout_ms, true, res);
}

int admit_acquire(struct admit *a, const struct admit_req *rq, struct admit_result *res)
{
	return admit_do_acquire(a, rq, rq ? rq->timeout_ms : 0, true, res);
}

int admit_try(struct admit *a, const struct admit_req *rq, struct admit_result *res)
{
	return admit_do_acquire(a, rq, 0, true, res);
}

int admit_once(struct admit *a, const struct admit_req *rq, struct admit_result *res)
{
	return admit_do_acquire(a, rq, rq ? rq->timeout_ms : 0, false, res);
}

int admit_try_once(struct admit *a, const struct admit_req *rq, struct admit_result *res)
{
	return admit_do_acquire(a, rq, 0, false, res);
}

int admit_release(struct admit *a, const char *lease, const struct admit_token *tokens,
		  size_t ntokens, struct admit_result *res)
{
	return admit_release_outcome(a, lease, tokens, ntokens, NULL, res);
}

int admit_release_outcome(struct admit *a, const char *lease, const struct admit_token *tokens,
			  size_t ntokens, const char *outcome, struct admit_result *res)
{
	json_t *req;

	if (a == NULL || lease == NULL || (ntokens > 0 && tokens == NULL)) {
		admit_result_init(res);
		return admit_fail(res, ADMIT_E_ARG, "release needs a handle and a lease");
	}
	if (outcome != NULL && strcmp(outcome, "ok") != 0 && strcmp(outcome, "limited") != 0 &&
	    strcmp(outcome, "error") != 0) {
		admit_result_init(res);
		return admit_fail(res, ADMIT_E_ARG,
				  "outcome must be \"ok\", \"limited\" or \"error\"");
	}
	req = json_pack("{s:s, s:s}", "op", "release", "lease", lease);
	if (req == NULL || admit_set_tokens(req, "tokens", tokens, ntokens) < 0 ||
	    admit_set_str(req, "outcome", outcome) < 0) {
		json_decref(req);
		admit_result_init(res);
		return admit_fail(res, ADMIT_E_ARG,
				  "tokens: at most 16 distinct names, counts >= 0");
	}
	return admit_roundtrip(a, req, 0, false, res);
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
		return admit_fail(res, ADMIT_E_ARG,
				  "penalize needs a scope and at most one of key and url");
	}
	return admit_roundtrip(a, req, 0, false, res);
}

int admit_status(struct admit *a, struct admit_result *res)
{
	if (a == NULL) {
		admit_result_init(res);
		return admit_fail(res, ADMIT_E_ARG, "no handle");
	}
	return admit_roundtrip(a, json_pack("{s:s}", "op", "status"), 0, false, res);
}

int admit_ping(struct admit *a, struct admit_result *res)
{
	if (a == NULL) {
		admit_result_init(res);
		return admit_fail(res, ADMIT_E_ARG, "no handle");
	}
	return admit_roundtrip(a, json_pack("{s:s}", "op", "ping"), 0, false, res);
}

/*
 * reset and inspect: {"op":OP,"scope":S[,"key":K|"url":U][,"class":C]};
 * neither key nor url: the scope's default key.
 */
static json_t *admit_encode_key_op(const char *op, const char *scope, const char *key,
				   const char *url, const char *cls)
{
	json_t *req = json_pack("{s:s}", "op", op);

	if (req != NULL && admit_set_target(req, scope, key, url, cls, 0) < 0) {
		json_decref(req);
		return NULL;
	}
	return req;
}

int admit_reset(struct admit *a, const char *scope, const char *key, const char *url,
		struct admit_result *res)
{
	json_t *req = a ? admit_encode_key_op("reset", scope, key, url, NULL) : NULL;

	if (req == NULL) {
		admit_result_init(res);
		return admit_fail(res, ADMIT_E_ARG,
				  "reset needs a handle, a scope and at most one of key and url");
	}
	return admit_roundtrip(a, req, 0, false, res);
}

int admit_inspect(struct admit *a, const char *scope, const char *key, const char *url,
		  const char *cls, struct admit_result *res)
{
	json_t *req = a ? admit_encode_key_op("inspect", scope, key, url, cls) : NULL;
	json_t *rep;
	int rc;

	if (req == NULL) {
		admit_result_init(res);
		return admit_fail(res, ADMIT_E_ARG,
				  "inspect needs a handle, a scope and at most one of key and url");
	}
	rc = admit_roundtrip(a, req, 0, false, res);
	if (rc != ADMIT_OK)
		return rc;
	/* the roundtrip decoded the common fields; the rest is inspect's own */
	rep = json_loads(res->raw, 0, NULL);
	if (rep == NULL || admit_decode_inspect(rep, res) < 0)
		rc = admit_fail(res, rep == NULL ? ADMIT_E_PROTO : ADMIT_E_NOMEM, NULL);
	json_decref(rep);
	return rc;
}

/*
 * The override request: its target (admit_set_target), ttl_ms, min_delay_ms
 * unless -1, and the rule amounts; NULL for arguments it refuses (a rule
 * unnamed, empty or given twice, an amount below 1, nothing to set).
 */
static json_t *admit_encode_override(const char *scope, const char *key, const char *url,
				     int64_t ttl_ms, int64_t min_delay_ms,
				     const struct admit_rule_amount *rules, size_t nrules)
{
	json_t *req, *obj;
	size_t i;

	if (ttl_ms < 1 || min_delay_ms < -1 || (min_delay_ms < 0 && nrules == 0) ||
	    (nrules > 0 && rules == NULL) || nrules > ADMIT_MAX_TOKENS)
		return NULL;
	req = json_pack("{s:s, s:I}", "op", "override", "ttl_ms", (json_int_t)ttl_ms);
	if (req == NULL || admit_set_target(req, scope, key, url, NULL, 0) < 0)
		goto fail;
	if (min_delay_ms >= 0 &&
	    json_object_set_new(req, "min_delay_ms", json_integer(min_delay_ms)) < 0)
		goto fail;
	if (nrules > 0) {
		obj = json_object();
		if (obj == NULL || json_object_set_new(req, "rules", obj) < 0)
			goto fail;
		for (i = 0; i < nrules; i++)
			if (rules[i].rule == NULL || rules[i].rule[0] == '\0' ||
			    admit_set_count(obj, rules[i].rule, rules[i].amount, 1) < 0)
				goto fail;
	}
	return req;
fail:
	json_decref(req);
	return NULL;
}

int admit_override(struct admit *a, const char *scope, const char *key, const char *url,
		   int64_t ttl_ms, int64_t min_delay_ms, const struct admit_rule_amount *rules,
		   size_t nrules, struct admit_result *res)
{
	json_t *req =
	    a ? admit_encode_override(scope, key, url, ttl_ms, min_delay_ms, rules, nrules) : NULL;

	if (req == NULL) {
		admit_result_init(res);
		return admit_fail(res, ADMIT_E_ARG,
				  "override needs a handle, a scope, at most one of key and url, "
				  "a ttl_ms >= 1, and a min_delay_ms >= 0 or rule amounts >= 1 "
				  "(at most 16, each rule named once)");
	}
	return admit_roundtrip(a, req, 0, false, res);
}

/* The integer `k` of the reply in res->raw (of object `in` when set); -1. */
static int64_t admit_raw_int(const struct admit_result *res, const char *in, const char *k)
{
	json_t *rep = res && res->raw ? json_loads(res->raw, 0, NULL) : NULL;
	json_t *o = in ? json_object_get(rep, in) : rep;
	int64_t v = admit_json_int(o, k);

	json_decref(rep);
	return v;
}

int64_t admit_result_remaining(const struct admit_result *res)
{
	return admit_raw_int(res, NULL, "remaining");
}

int64_t admit_result_reset_ms(const struct admit_result *res)
{
	return admit_raw_int(res, NULL, "reset_ms");
}

int64_t admit_result_target(const struct admit_result *res, char **scope, char **key)
{
	json_t *rep = res && res->raw ? json_loads(res->raw, 0, NULL) : NULL;
	json_t *t = json_object_get(rep, "target");
	int64_t index = admit_json_int(t, "index");

	if (scope != NULL)
		*scope = index >= 0 ? admit_json_str(t, "scope") : NULL;
	if (key != NULL)
		*key = index >= 0 ? admit_json_str(t, "key") : NULL;
	json_decref(rep);
	return index;
}

/*
 * One meter of a reply's "limits": the i-th well-formed one, or (name not
 * NULL) the one named so; 1 with what is asked set, 0 when there is none,
 * ADMIT_E_NOMEM when a copy fails.
 */
static int admit_limit_find(const struct admit_result *res, size_t i, const char *name,
			    char **meter, char **rule, int64_t *limit, int64_t *remaining,
			    int64_t *reset_ms)
{
	json_t *rep = res && res->raw ? json_loads(res->raw, 0, NULL) : NULL;
	json_t *lims = json_object_get(rep, "limits"), *v;
	const char *k;
	char *m = NULL, *r = NULL;
	size_t n = 0;
	int rc = 0;

	json_object_foreach (lims, k, v) {
		int64_t nums[3] = { admit_json_int(v, "limit"), admit_json_int(v, "remaining"),
				    admit_json_int(v, "reset_ms") };

		if (!json_is_string(json_object_get(v, "rule")) || nums[0] < 0 || nums[1] < 0 ||
		    nums[2] < 0)
			continue; /* not a limit: it has no index */
		if (name != NULL ? strcmp(k, name) != 0 : n++ != i)
			continue;
		if ((meter != NULL && (m = strdup(k)) == NULL) ||
		    (rule != NULL && (r = admit_json_str(v, "rule")) == NULL)) {
			free(m);
			rc = ADMIT_E_NOMEM;
			goto done;
		}
		if (meter != NULL)
			*meter = m;
		if (rule != NULL)
			*rule = r;
		if (limit != NULL)
			*limit = nums[0];
		if (remaining != NULL)
			*remaining = nums[1];
		if (reset_ms != NULL)
			*reset_ms = nums[2];
		rc = 1;
		goto done;
	}
done:
	json_decref(rep);
	return rc;
}

int admit_result_limit(const struct admit_result *res, size_t i, char **meter, char **rule,
		       int64_t *limit, int64_t *remaining, int64_t *reset_ms)
{
	return admit_limit_find(res, i, NULL, meter, rule, limit, remaining, reset_ms);
}

int admit_result_limit_of(const struct admit_result *res, const char *meter, char **rule,
			  int64_t *limit, int64_t *remaining, int64_t *reset_ms)
{
	if (meter == NULL)
		return 0;
	return admit_limit_find(res, 0, meter, NULL, rule, limit, remaining, reset_ms);
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
	case ADMIT_E_INTERRUPTED: return "canceled";
	default: break;
	}
	if (err >= ADMIT_OK && err < ADMIT_E__COUNT)
		return admit_err_str(err);
	return "unknown error";
}
