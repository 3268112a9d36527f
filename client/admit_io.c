/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * admit_io.c - libadmit's bytes on the socket: one line at a time.
 *
 * Owns: polling the socket against a deadline, sending a whole frame
 * (SIGPIPE is avoided per send with MSG_NOSIGNAL rather than by touching
 * the process's signal mask), reading one newline-terminated line into the
 * handle's buffer (a line longer than ADMIT_MAX_REPLY is garbage), and
 * admit_cancel's side: the flag and the eventfd that wake a poll waiting
 * for an acquire's reply, from another thread or a signal handler.
 */

#include "admit_int.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

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

int admit_send_all(struct admit *a, const char *p, size_t n, int64_t deadline)
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
int admit_read_line(struct admit *a, int64_t deadline, char **out)
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

/*
 * Ready admit_cancel for an acquire that may wait: make the eventfd that
 * wakes its poll (without one, only a signal's EINTR does), and forget a
 * cancel that came before this call.
 */
void admit_arm_cancel(struct admit *a)
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
