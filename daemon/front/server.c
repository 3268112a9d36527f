/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * server.c - the Unix listening socket.
 *
 * Owns: the listening fd (through an evconnlistener), the socket file and
 * a spare descriptor. Creates the socket OpenSMTPD-style: a connect() probe
 * first, so a second admitd does not steal a live daemon's socket, then
 * unlink of a stale one, bind under a umask, explicit chown (socket_group)
 * and chmod. When the process runs out of descriptors (EMFILE), the spare
 * is closed so that the peers waiting can be accepted, told `unavailable`
 * and closed, then it is opened again: a full process answers at once
 * instead of leaving clients in the backlog. Connections beyond
 * max_connections are closed at once, and a peer outside allow_uids and
 * allow_gids (its credentials read with SO_PEERCRED, its supplementary
 * groups with SO_PEERGROUPS) gets one `forbidden` line and is closed before
 * it is a connection at all. Every connection keeps the credentials read at
 * its accept, so that a reload narrowing the lists can close the open
 * connections of the peers it no longer lets in (server_recheck_peers).
 */

#include "server.h"

#include "clock.h"
#include "conf.h"
#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* A refused peer, read from until it closes (or SERVER_REFUSED_LINGER_MS). */
struct refused {
	TAILQ_ENTRY(refused) link;
	struct server *s;
	struct event *ev;
	int64_t until; /* closed then, even if the peer keeps writing (mono ms) */
	int fd;
};
TAILQ_HEAD(refused_list, refused);

struct server {
	struct rt *ad;
	struct conns *cs; /* where accepted connections go */
	struct evconnlistener *lev;
	struct event *resume_ev;
	char *path;
	struct refused_list refused; /* lingering refused peers */
	size_t nrefused;
	int spare_fd; /* kept open to be given up when accept() fails with EMFILE; -1: none */
};

/* Refused peers lingered on at once at most (each holds an fd), and how long. */
#define SERVER_REFUSED_MAX	 64
#define SERVER_REFUSED_LINGER_MS 1000

/* Peers turned away at most per EMFILE before the spare is taken back. */
#define SERVER_SHED_BATCH 16

/* Supplementary groups read into a stack buffer; a peer with more is read
 * again into a buffer of the size the kernel reports, up to NGROUPS_MAX. */
#define SERVER_PEER_GROUPS 256

static bool server_id_listed(const struct conf_ids *ids, uint32_t id)
{
	size_t i;

	for (i = 0; i < ids->n; i++)
		if (ids->ids[i] == id)
			return true;
	return false;
}

/*
 * Is one of the peer's supplementary groups (those its process had at
 * connect(), SO_PEERGROUPS) in allow_gids? With more than the stack buffer
 * holds the kernel fails with ERANGE and says in len how many bytes it
 * needs: the call is made again with that much. Groups that cannot be read
 * are not in the list.
 */
static bool server_peer_groups_listed(const struct conf_ids *allow, int fd)
{
	gid_t stack[SERVER_PEER_GROUPS], *groups = stack, *big = NULL;
	socklen_t len = sizeof(stack);
	bool listed = false;
	size_t i;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0) {
		if (errno != ERANGE || len <= sizeof(stack) ||
		    len > (socklen_t)(NGROUPS_MAX * sizeof(gid_t)) || (big = malloc(len)) == NULL)
			goto done;
		groups = big;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0)
			goto done;
	}
	for (i = 0; i < len / sizeof(groups[0]) && !listed; i++)
		listed = server_id_listed(allow, groups[i]);
done:
	free(big);
	return listed;
}

/* The peer's credentials as of its connect() (SO_PEERCRED); false when they
 * cannot be read (cred then names nobody: pid -1, uid and gid -1). */
static bool server_peer_cred(int fd, struct ucred *cred)
{
	socklen_t len = sizeof(*cred);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, &len) == 0 && len == sizeof(*cred))
		return true;
	cred->pid = -1;
	cred->uid = (uid_t)-1;
	cred->gid = (gid_t)-1;
	return false;
}

/*
 * May a peer with these credentials (known: they could be read) on fd be
 * served under cf? Always, without allow_uids and allow_gids; else when its
 * uid is in allow_uids, or its gid or one of its supplementary groups in
 * allow_gids. Credentials that could not be read are refused.
 */
static bool server_peer_allowed(const struct conf *cf, int fd, const struct ucred *cred, bool known)
{
	if (cf->allow_uids.n == 0 && cf->allow_gids.n == 0)
		return true;
	if (!known)
		return false;
	if (server_id_listed(&cf->allow_uids, cred->uid) ||
	    server_id_listed(&cf->allow_gids, cred->gid))
		return true;
	return cf->allow_gids.n > 0 && server_peer_groups_listed(&cf->allow_gids, fd);
}

/* Read and drop what a refused peer sends; false once it is gone. */
static bool server_refused_drain(int fd)
{
	char sink[4096];
	int i;

	for (i = 0; i < 16; i++) {
		ssize_t r = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
		if (r > 0)
			continue;
		return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
	}
	return true;
}

static void server_refused_free(struct refused *rf)
{
	TAILQ_REMOVE(&rf->s->refused, rf, link);
	rf->s->nrefused--;
	event_free(rf->ev);
	evutil_closesocket(rf->fd);
	free(rf);
}

static void server_refused_cb(evutil_socket_t fd, short what, void *arg)
{
	struct refused *rf = arg;

	if ((what & EV_TIMEOUT) || !server_refused_drain(fd) || clock_mono_ms() >= rf->until)
		server_refused_free(rf);
}

/*
 * Refuse a peer: one line, then EOF. The line fits an empty socket buffer,
 * so a non-blocking send writes it whole; shutdown(SHUT_WR) ends it. The
 * fd stays open a moment, its input read and dropped, until the peer
 * closes: a peer that writes first neither gets EPIPE nor loses the line
 * (closing a Unix socket with unread input would also turn the peer's EOF
 * into ECONNRESET). Past SERVER_REFUSED_MAX lingering peers, what is there
 * is read and the fd closed at once.
 */
static void server_refuse(struct server *s, int fd, const struct ucred *cred)
{
	struct timeval linger = { SERVER_REFUSED_LINGER_MS / 1000,
				  (SERVER_REFUSED_LINGER_MS % 1000) * 1000 };
	struct refused *rf = NULL;
	static const char line[] = "{\"ok\":false,\"error\":\"forbidden\",\"message\":"
				   "\"this peer may not connect: its uid and groups are not in "
				   "allow_uids or allow_gids\"}\n";

	log_ratelimited(
	    LOG_SLOT_FORBIDDEN, 1000, "connection refused: peer not in allow_uids/allow_gids",
	    "uid=%u gid=%u pid=%d", (unsigned)cred->uid, (unsigned)cred->gid, (int)cred->pid);
	if (send(fd, line, sizeof(line) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) !=
	    (ssize_t)(sizeof(line) - 1))
		log_debug("cannot tell a refused peer", "err=\"%s\"", strerror(errno));
	if (shutdown(fd, SHUT_WR) != 0)
		log_debug("shutdown of a refused peer failed", "err=\"%s\"", strerror(errno));
	if (!server_refused_drain(fd))
		goto close;
	if (s->nrefused >= SERVER_REFUSED_MAX || (rf = calloc(1, sizeof(*rf))) == NULL)
		goto close;
	rf->s = s;
	rf->fd = fd;
	rf->until = clock_mono_ms() + SERVER_REFUSED_LINGER_MS;
	rf->ev = event_new(s->ad->base, fd, EV_READ | EV_PERSIST, server_refused_cb, rf);
	if (rf->ev == NULL || event_add(rf->ev, &linger) != 0) {
		if (rf->ev != NULL)
			event_free(rf->ev);
		free(rf);
		goto close;
	}
	TAILQ_INSERT_TAIL(&s->refused, rf, link);
	s->nrefused++;
	return;
close:
	evutil_closesocket(fd);
}

static void server_accept_cb(struct evconnlistener *lev UNUSED, evutil_socket_t fd,
			     struct sockaddr *sa UNUSED, int salen UNUSED, void *arg)
{
	struct server *s = arg;
	struct ucred cred;
	bool known;

	if (s->ad->shutting_down || (int64_t)s->ad->nconns >= s->ad->conf->max_connections) {
		log_ratelimited(LOG_SLOT_ACCEPT, 1000,
				"connection refused: max_connections reached",
				"max_connections=%lld", (long long)s->ad->conf->max_connections);
		evutil_closesocket(fd);
		return;
	}
	/* Read at each accept, lists or not: a reload that sets them checks
	 * the connections already open against what was recorded here. */
	known = server_peer_cred(fd, &cred);
	if (!known && (s->ad->conf->allow_uids.n > 0 || s->ad->conf->allow_gids.n > 0))
		log_ratelimited(LOG_SLOT_FORBIDDEN, 1000,
				"cannot read a peer's credentials: refused", "err=\"%s\"",
				strerror(errno));
	if (!server_peer_allowed(s->ad->conf, fd, &cred, known)) {
		server_refuse(s, fd, &cred);
		return;
	}
	conn_new(s->cs, fd, known ? &cred : NULL);
}

static void server_resume_cb(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	struct server *s = arg;

	evconnlistener_enable(s->lev);
}

/* The spare descriptor: /dev/null, held so that EMFILE can be answered. */
static int server_spare_open(void)
{
	return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/*
 * Out of descriptors: give up the spare, so that one accept() can succeed,
 * and turn away the waiting peers one at a time, each told why in one line
 * (a client sees `unavailable` at once instead of hanging in the backlog
 * while the process stays full), then take the spare back. false when there
 * is no spare, or it cannot be had back (accepting then pauses instead).
 */
static bool server_shed(struct server *s, evutil_socket_t lfd)
{
	static const char line[] = "{\"ok\":false,\"error\":\"unavailable\",\"message\":"
				   "\"admitd is out of file descriptors: try again later\"}\n";
	int i, fd, shed = 0;

	if (s->spare_fd < 0)
		return false;
	close(s->spare_fd);
	for (i = 0; i < SERVER_SHED_BATCH; i++) {
		fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			break;
		if (send(fd, line, sizeof(line) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
			log_debug("cannot tell a shed peer", "err=\"%s\"", strerror(errno));
		close(fd);
		shed++;
	}
	s->spare_fd = server_spare_open();
	log_ratelimited(LOG_SLOT_ACCEPT, 1000,
			"out of file descriptors: connections turned away unavailable",
			"shed=%d conns=%zu", shed, s->ad->nconns);
	return s->spare_fd >= 0;
}

static void server_error_cb(struct evconnlistener *lev, void *arg)
{
	struct server *s = arg;
	int err = EVUTIL_SOCKET_ERROR();
	struct timeval tv = { 0, 100 * 1000 };

	if (err == EINTR || err == EWOULDBLOCK || err == ECONNABORTED)
		return;
	if ((err == EMFILE || err == ENFILE) && server_shed(s, evconnlistener_get_fd(lev)))
		return;
	/* Else (no spare, ENOBUFS, ENOMEM): pause instead of spinning on a
	 * listener we cannot drain. */
	log_ratelimited(LOG_SLOT_ACCEPT, 1000, "accept failed, pausing", "err=\"%s\"",
			strerror(err));
	evconnlistener_disable(lev);
	event_add(s->resume_ev, &tv);
}

void server_recheck_peers(struct conns *cs)
{
	struct rt *ad = cs->rt;
	struct conn *c;

	if (ad->conf->allow_uids.n == 0 && ad->conf->allow_gids.n == 0)
		return;
	for (c = TAILQ_FIRST(&cs->list); c != NULL; c = TAILQ_NEXT(c, link)) {
		if (c->closing || server_peer_allowed(ad->conf, c->fd, &c->peer, c->peer_known))
			continue;
		log_info("connection closed: a reload took its peer out of allow_uids/allow_gids",
			 "conn=%llu uid=%u gid=%u pid=%d", (unsigned long long)c->id,
			 (unsigned)c->peer.uid, (unsigned)c->peer.gid, (int)c->peer.pid);
		conn_revoke(c, "this peer may no longer connect: a reload took its uid and groups "
			       "out of allow_uids and allow_gids");
	}
}

/* A socket file that accepts a connection belongs to a live daemon. */
static bool server_probe_live(const struct sockaddr_un *sun)
{
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	bool live;

	if (fd < 0)
		return false;
	live = connect(fd, (const struct sockaddr *)sun, sizeof(*sun)) == 0;
	close(fd);
	return live;
}

struct server *server_new(struct conns *cs)
{
	struct rt *ad = cs->rt;
	const char *path = ad->conf->socket, *errpos = NULL;
	struct sockaddr_un sun;
	struct server *s = NULL;
	int fd = -1;
	mode_t old_umask;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sun.sun_path)) {
		log_error("socket path too long", "socket=\"%s\"", path);
		return NULL;
	}
	strcpy(sun.sun_path, path);
	if (server_probe_live(&sun)) {
		log_error("another daemon is listening on the socket", "socket=\"%s\"", path);
		return NULL;
	}
	if ((s = calloc(1, sizeof(*s))) != NULL)
		s->spare_fd = -1;
	if (s == NULL || (s->path = strdup(path)) == NULL) {
		errpos = "calloc";
		goto fail;
	}
	s->ad = ad;
	s->cs = cs;
	TAILQ_INIT(&s->refused);
	if ((s->spare_fd = server_spare_open()) < 0) {
		errpos = "open /dev/null (the spare descriptor)";
		goto fail;
	}
	if (unlink(path) != 0 && errno != ENOENT) {
		errpos = "unlink";
		goto fail;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		errpos = "socket";
		goto fail;
	}
	old_umask = umask(0177);
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0) {
		umask(old_umask);
		errpos = "bind";
		goto fail;
	}
	umask(old_umask);
	if (ad->conf->socket_group >= 0 &&
	    chown(path, (uid_t)-1, (gid_t)ad->conf->socket_group) != 0) {
		errpos = "chown";
		goto fail;
	}
	if (chmod(path, (mode_t)ad->conf->socket_mode) != 0) {
		errpos = "chmod";
		goto fail;
	}
	if (listen(fd, 128) != 0) {
		errpos = "listen";
		goto fail;
	}
	s->resume_ev = evtimer_new(ad->base, server_resume_cb, s);
	s->lev = evconnlistener_new(ad->base, server_accept_cb, s,
				    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, -1, fd);
	if (s->resume_ev == NULL || s->lev == NULL) {
		errpos = "evconnlistener_new";
		goto fail;
	}
	evconnlistener_set_error_cb(s->lev, server_error_cb);
	return s;
fail:
	log_error("cannot listen", "socket=\"%s\" call=%s err=\"%s\"", path, errpos,
		  strerror(errno));
	if (s != NULL && s->lev == NULL && fd >= 0)
		close(fd);
	if (s != NULL) {
		if (s->resume_ev)
			event_free(s->resume_ev);
		if (s->lev)
			evconnlistener_free(s->lev);
		if (s->spare_fd >= 0)
			close(s->spare_fd);
		free(s->path);
		free(s);
	}
	return NULL;
}

void server_free(struct server *s)
{
	if (s == NULL)
		return;
	evconnlistener_free(s->lev);
	event_free(s->resume_ev);
	while (!TAILQ_EMPTY(&s->refused))
		server_refused_free(TAILQ_FIRST(&s->refused));
	if (s->spare_fd >= 0)
		close(s->spare_fd);
	unlink(s->path);
	free(s->path);
	free(s);
}
