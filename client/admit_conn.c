/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * admit_conn.c - libadmit's handle and its connection to the daemon.
 *
 * Owns: the handle's life (admit_new, admit_connect, admit_close and the
 * timeouts' setters), finding the socket (argument, $ADMITD_SOCKET, the
 * default) and the connect timeout ($ADMITD_CONNECT_TIMEOUT), connecting
 * within the I/O timeout even when the daemon's backlog is full, retrying a
 * socket that is missing or refused with a jittered backoff (each handle
 * has its own generator, so handles need no global state), and noticing a
 * connection the daemon closed before a call is sent on it.
 */

#include "admit_int.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int64_t admit_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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
int admit_open(struct admit *a, int64_t deadline)
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
void admit_drop(struct admit *a)
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
bool admit_hung_up(const struct admit *a)
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
	free(a->tenant);
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

int admit_set_tenant(struct admit *a, const char *tenant)
{
	char *t = NULL;

	if (tenant != NULL && tenant[0] != '\0' && (t = strdup(tenant)) == NULL)
		return -1;
	free(a->tenant);
	a->tenant = t;
	return 0;
}
