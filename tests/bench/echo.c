/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * echo.c - the floor under admitd's local mode: a Unix-socket line server
 * that does nothing.
 *
 *   echo SOCKET
 *
 * Owns: one listening Unix socket and one epoll thread. Every request line
 * read gets one fixed reply line, {"ok":true,"lease":"echo","backend":"local"}
 * (which tests/bench/loadgen takes as an admitted acquire and as a release),
 * and everything one read brings is answered with one write. No JSON is
 * parsed, no state is kept: what it costs per round trip is the kernel's
 * socket path, the wakeups and the loadgen, which admitd pays too. SIGTERM or
 * SIGINT ends it; it removes its socket.
 */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define EC_RBUF	  65536
#define EC_EVENTS 256

static const char ec_reply[] = "{\"ok\":true,\"lease\":\"echo\",\"backend\":\"local\"}\n";
#define EC_REPLY_LEN (sizeof(ec_reply) - 1)

struct ec_conn {
	int fd;
	char *out; /* replies not written yet (a slow reader only) */
	size_t olen, ocap;
	bool want_out; /* EPOLLOUT registered */
};

static volatile sig_atomic_t ec_stop;

static void ec_on_signal(int sig)
{
	(void)sig;
	ec_stop = 1;
}

static void ec_close(int ep, struct ec_conn *c)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	free(c->out);
	free(c);
}

/* Append n replies to c's pending output and write as much as the socket takes. */
static bool ec_reply_n(int ep, struct ec_conn *c, size_t n)
{
	size_t need = c->olen + n * EC_REPLY_LEN, i;
	ssize_t w;

	if (need > c->ocap) {
		size_t cap = need * 2;
		char *p = realloc(c->out, cap);
		if (p == NULL)
			return false;
		c->out = p;
		c->ocap = cap;
	}
	for (i = 0; i < n; i++, c->olen += EC_REPLY_LEN)
		memcpy(c->out + c->olen, ec_reply, EC_REPLY_LEN);
	if (c->olen == 0)
		return true;
	w = write(c->fd, c->out, c->olen);
	if (w < 0) {
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return false;
		w = 0;
	}
	memmove(c->out, c->out + w, c->olen - (size_t)w);
	c->olen -= (size_t)w;
	if (c->want_out != (c->olen > 0)) {
		struct epoll_event ev = { .events = EPOLLIN | (c->olen ? EPOLLOUT : 0),
					  .data.ptr = c };
		c->want_out = c->olen > 0;
		return epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) == 0;
	}
	return true;
}

static bool ec_read(int ep, struct ec_conn *c)
{
	static char buf[EC_RBUF];
	ssize_t r = read(c->fd, buf, sizeof(buf));
	const char *p, *end;
	size_t lines = 0;

	if (r < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
	if (r == 0)
		return false;
	for (p = buf, end = buf + r; (p = memchr(p, '\n', (size_t)(end - p))) != NULL; p++)
		lines++;
	return lines == 0 || ec_reply_n(ep, c, lines);
}

int main(int argc, char **argv)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct epoll_event ev = { .events = EPOLLIN }, evs[EC_EVENTS];
	struct sigaction act = { .sa_handler = ec_on_signal };
	int lfd, ep, i, n;

	if (argc != 2 || strlen(argv[1]) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "usage: echo SOCKET\n");
		return 2;
	}
	memcpy(sa.sun_path, argv[1], strlen(argv[1]) + 1);
	signal(SIGPIPE, SIG_IGN);
	sigaction(SIGTERM, &act, NULL);
	sigaction(SIGINT, &act, NULL);
	unlink(argv[1]);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    listen(lfd, 1024) != 0) {
		perror("echo: listen");
		return 1;
	}
	ep = epoll_create1(EPOLL_CLOEXEC);
	ev.data.ptr = NULL; /* the listener */
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) != 0) {
		perror("echo: epoll");
		return 1;
	}
	while (!ec_stop) {
		n = epoll_wait(ep, evs, EC_EVENTS, -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			perror("echo: epoll_wait");
			break;
		}
		for (i = 0; i < n; i++) {
			struct ec_conn *c = evs[i].data.ptr;
			if (c == NULL) {
				int fd;
				while ((fd = accept4(lfd, NULL, NULL,
						     SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
					struct epoll_event cev = { .events = EPOLLIN };
					c = calloc(1, sizeof(*c));
					if (c == NULL) {
						close(fd);
						continue;
					}
					c->fd = fd;
					cev.data.ptr = c;
					if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev) != 0) {
						close(fd);
						free(c);
					}
				}
				continue;
			}
			if ((evs[i].events & EPOLLOUT) && !ec_reply_n(ep, c, 0)) {
				ec_close(ep, c);
				continue;
			}
			if ((evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !ec_read(ep, c))
				ec_close(ep, c);
		}
	}
	unlink(argv[1]);
	return 0;
}
