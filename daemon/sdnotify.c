/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * sdnotify.c - the sd_notify(3) datagram protocol, without libsystemd.
 *
 * Owns: the notify socket (one unconnected AF_UNIX datagram socket, close
 * on exec) and the address read from $NOTIFY_SOCKET. Why not libsystemd's
 * sd_notify: the protocol is documented as stable (one datagram of
 * KEY=VALUE lines to a path or an abstract '@' name) and takes thirty lines,
 * while the library would add a dependency to every build (containers and
 * non-systemd hosts included) for one function. What this leaves out of
 * sd_notify: passing file descriptors and credentials (admitd needs
 * neither) and vsock addresses (systemd 253+, for VMs).
 */

#include "sdnotify.h"

#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* A message is a few short lines: STATUS= is the longest. */
#define SDN_MSG_MAX 512

struct sdnotify {
	int fd;
	struct sockaddr_un sa;
	socklen_t salen;
	uint64_t watchdog_usec;
};

/* A positive decimal from the environment, or 0 when absent or malformed. */
static uint64_t sdn_env_u64(const char *name)
{
	const char *s = getenv(name);
	unsigned long long v;
	char *end;

	if (s == NULL || *s < '0' || *s > '9')
		return 0;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0')
		return 0;
	return (uint64_t)v;
}

bool sdnotify_open(struct sdnotify **out)
{
	const char *path = getenv("NOTIFY_SOCKET"), *errpos = NULL;
	struct sdnotify *n = NULL;
	size_t len;
	uint64_t pid;

	*out = NULL;
	if (path == NULL || *path == '\0')
		return true;
	len = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || len < 2 || len >= sizeof(n->sa.sun_path)) {
		errpos = "NOTIFY_SOCKET is neither a path nor an @abstract name that fits";
		goto fail;
	}
	if ((n = calloc(1, sizeof(*n))) == NULL) {
		errpos = "calloc";
		goto fail;
	}
	n->sa.sun_family = AF_UNIX;
	memcpy(n->sa.sun_path, path, len);
	if (path[0] == '@')
		n->sa.sun_path[0] = '\0'; /* abstract: the name is not NUL-terminated */
	n->salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (path[0] == '/'));
	n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (n->fd < 0) {
		errpos = "socket";
		goto fail;
	}
	/* The watchdog is ours unless WATCHDOG_PID names another process. */
	pid = sdn_env_u64("WATCHDOG_PID");
	if (pid == 0 || pid == (uint64_t)getpid())
		n->watchdog_usec = sdn_env_u64("WATCHDOG_USEC");
	*out = n;
	return true;
fail:
	log_error("cannot use NOTIFY_SOCKET", "socket=\"%s\" step=\"%s\" err=\"%s\"", path, errpos,
		  strerror(errno));
	free(n);
	return false;
}

void sdnotify_close(struct sdnotify *n)
{
	if (n == NULL)
		return;
	if (close(n->fd) != 0)
		log_warn("close of the notify socket failed", "err=\"%s\"", strerror(errno));
	free(n);
}

bool sdnotify_send(struct sdnotify *n, const char *fmt, ...)
{
	char msg[SDN_MSG_MAX];
	va_list ap;
	int len;

	if (n == NULL)
		return true;
	va_start(ap, fmt);
	len = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (len < 0 || (size_t)len >= sizeof(msg)) {
		log_warn("notify message too long: not sent", "len=%d", len);
		return false;
	}
	if (sendto(n->fd, msg, (size_t)len, MSG_NOSIGNAL, (const struct sockaddr *)&n->sa,
		   n->salen) != (ssize_t)len) {
		log_ratelimited(LOG_SLOT_NOTIFY, 10000, "cannot notify the service manager",
				"err=\"%s\"", strerror(errno));
		return false;
	}
	return true;
}

uint64_t sdnotify_watchdog_usec(const struct sdnotify *n)
{
	return n == NULL ? 0 : n->watchdog_usec;
}

uint64_t sdnotify_monotonic_usec(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}
